"""Helpers of the oracle tests (lab/tests/oracles): build an upstream program set of lab/go, run the collection's
container_runtime_config module in this process, read TOML. Nothing here is part of the collection."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tomllib

import pytest
from conftest import lab_collections_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RUNTIME_FIXTURES = os.path.join(ROOT, 'tests', 'unit', 'plugins', 'module_utils', 'fixtures', 'runtime')
NVIDIA_RUNTIME = '/usr/bin/nvidia-container-runtime'


def go_set(name):
    """The directory holding the binaries of lab/go/NAME, built on first use (fails the test loudly, with the build's
    output, when the set cannot be built: an oracle that cannot run is a failure, never a skip)."""
    proc = subprocess.run(['bash', os.path.join(ROOT, 'lab', 'go', 'build.sh'), name], cwd=ROOT, capture_output=True,
                          text=True, timeout=3000)
    if proc.returncode != 0:
        tail = '\n'.join(l for l in proc.stderr.splitlines() if 'warning' not in l and 'note:' not in l)[-4000:]
        pytest.fail('lab/go/build.sh %s failed (rc %d): the oracle cannot run\n%s' % (name, proc.returncode, tail))
    return proc.stdout.strip().splitlines()[-1]


def go_program(name, version=None, program=None):
    """The path of program PROGRAM (default NAME) of lab/go/NAME, built on first use; with version, asserts that
    `PROGRAM --version` prints it (the oracle is the release the tests name)."""
    path = os.path.join(go_set(name), program or name)
    if version is not None:
        out = subprocess.run([path, '--version'], capture_output=True, text=True, check=True).stdout
        assert version in out, out
    return path


def stop_process(proc, timeout=30):
    """Terminate a daemon the test started (an upstream server) and wait for it; kill it when it does not go."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _collections_path():
    return lab_collections_path(importable=True)


def run_ours(args, containerd=None):
    """Run the collection's container_runtime_config module's main() here with args; return its result (a dict).
    With containerd (a binary's path) that containerd is first on PATH, the one the module asks for its version (with
    cdi it refuses a containerd older than 1.7, such as Debian 12's 1.6.20 on this machine)."""
    _collections_path()
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.gpuops.k8s_gpu.plugins.modules import container_runtime_config as mod
    buf = io.StringIO()
    old_path = os.environ.get('PATH', '')
    if containerd:
        os.environ['PATH'] = os.path.dirname(containerd) + os.pathsep + old_path
    try:
        with patch_module_args(args), contextlib.redirect_stdout(buf):
            try:
                mod.main()
            except SystemExit:
                pass
    finally:
        os.environ['PATH'] = old_path
    return json.loads(buf.getvalue().strip().splitlines()[-1])


def toml_output(cmd):
    """What the upstream program cmd (a list) prints as its effective configuration, read as TOML; the program must
    exit 0 (the assertion shows its stderr)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tomllib.loads(proc.stdout)


def read_toml(path):
    with open(path, 'rb') as f:
        return tomllib.load(f)


def dig(doc, path, default=None):
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return default
        doc = doc[key]
    return doc


def without(doc, *paths):
    """A deep copy of doc without the keys at paths (lists of keys); tables left empty by that are removed too."""
    doc = json.loads(json.dumps(doc))
    for path in paths:
        chain = [doc]
        for key in path[:-1]:
            nxt = chain[-1].get(key) if isinstance(chain[-1], dict) else None
            if not isinstance(nxt, dict):
                break
            chain.append(nxt)
        else:
            chain[-1].pop(path[-1], None)
            for i in range(len(chain) - 1, 0, -1):
                if chain[i]:
                    break
                chain[i - 1].pop(path[i - 1])
    return doc


# ---------------------------------------------------------------------------------------------- the NVML simulator
INVENTORIES = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')
NVML_SIM = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_facts
print(json.dumps(gpu_facts.gather(with_node=False), default=str))
"""


def inventories():
    """The simulator's shipped inventories (file names)."""
    return sorted(n for n in os.listdir(INVENTORIES) if n.endswith('.json'))


def build_nvml_sim():
    """lab/.build/nvml_sim (libnvidia-ml.so.1), built when out of date; fails the test with the build's output."""
    proc = subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail('lab/nvml_sim/build.sh failed: %s' % proc.stderr[-3000:])
    return NVML_SIM


def sim_env(inventory, state):
    """The environment of a program that loads libnvidia-ml.so.1 and must find the simulator with this inventory."""
    return dict(os.environ, LD_LIBRARY_PATH=NVML_SIM, NVML_SIM_INVENTORY=str(inventory), NVML_SIM_STATE=str(state))


def probe_facts(inventory, state):
    """gpu_info's facts (the collection's gpu_facts.gather, through the unmodified pynvml) on the simulator, in a child
    process (pynvml finds the library through LD_LIBRARY_PATH at load)."""
    proc = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'python'), '-c', _PROBE, _collections_path()],
                          env=sim_env(inventory, state), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# what the NVIDIA kernel module writes for MIG (mig-minors) and the /proc prologue that carries it: lab/node/nvcaps.py,
# shared with the real lab nodes (node.py nvidia_toolkit) and the demo
sys.path.insert(0, os.path.join(ROOT, 'lab', 'node'))
from nvcaps import PRIVATE_PROC, cap_minor, mig_minors_lines  # noqa: E402,F401  (re-exported to the oracle tests)

