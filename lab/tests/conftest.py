"""Shared fixtures for the lab's tests (lab/tests). Nothing here is part of the collection."""
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import urllib.request

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
KUBE = os.path.join(ROOT, 'lab', 'kube')


@pytest.fixture(scope='session')
def collections_path():
    out = subprocess.run(['bash', os.path.join(ROOT, 'lab/bin/collections-path.sh')], check=True,
                         capture_output=True, text=True).stdout.strip()
    return out


def run_module(collections_path, module, args='', env=None, check=False):
    """Run a module with `ansible localhost -c local` and return its JSON result."""
    e = dict(os.environ)
    e.update(env or {})
    e['ANSIBLE_COLLECTIONS_PATH'] = collections_path
    e['ANSIBLE_LOAD_CALLBACK_PLUGINS'] = '1'
    e['ANSIBLE_STDOUT_CALLBACK'] = 'ansible.builtin.json'
    e['ANSIBLE_LOCALHOST_WARNING'] = '0'
    e['ANSIBLE_PYTHON_INTERPRETER'] = os.path.join(VENV_BIN, 'python')
    cmd = [os.path.join(VENV_BIN, 'ansible'), 'localhost', '-c', 'local', '-m', module]
    if args:
        cmd += ['-a', args]
    if check:
        cmd.append('--check')
    proc = subprocess.run(cmd, env=e, capture_output=True, text=True, cwd=ROOT)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible output is not JSON (rc=%s):\n%s\n%s' % (proc.returncode, proc.stdout, proc.stderr))
    return doc['plays'][0]['tasks'][0]['hosts']['localhost']


@contextlib.contextmanager
def kube_emulator(seed_dir, name, seed_docs, version='v1.29.4'):
    """Start the lab's Kubernetes API emulator seeded with ``seed_docs``; yield its kubeconfig, state dir and URL.

    Stops it afterwards (and fails when stopping fails); its state dir is removed unless
    KUBE_EMULATOR_KEEP_STATE is set.
    """
    seed = pathlib.Path(str(seed_dir)) / 'seed.yaml'
    seed.write_text(yaml.safe_dump_all(seed_docs))
    name = '%s-%d' % (name, os.getpid())
    out = subprocess.run([os.path.join(KUBE, 'start.sh'), '--name', name, '--version', version, '--seed', str(seed)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, 'start.sh failed: %s\n%s' % (out.stdout, out.stderr)
    kubeconfig = out.stdout.strip().splitlines()[-1]
    state = pathlib.Path(kubeconfig).parent
    port = int((state / 'port').read_text())
    yield {'name': name, 'kubeconfig': kubeconfig, 'state': state, 'url': 'http://127.0.0.1:%d' % port}
    stop = subprocess.run([os.path.join(KUBE, 'stop.sh'), '--name', name], capture_output=True, text=True, timeout=30)
    assert stop.returncode == 0, stop.stderr
    if not os.environ.get('KUBE_EMULATOR_KEEP_STATE'):
        shutil.rmtree(str(state), ignore_errors=True)


def emulator_get(emu, path):
    """GET a path of the emulator (e.g. /_emulator/requests?since=N) and decode its JSON."""
    with urllib.request.urlopen(emu['url'] + path, timeout=10) as r:
        return json.loads(r.read())


def sh(*cmd, check=True, timeout=900, **kw):
    """Run a command (arguments may be paths); fail the test with its output when it fails and ``check`` is set."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError('command failed (rc=%s): %s\n--- stdout\n%s\n--- stderr\n%s'
                             % (proc.returncode, ' '.join(map(str, cmd)), proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc


def run_role_on_localhost(collections_path, tmp_path, role, variables, args=()):
    """Apply a role of the collection to localhost (local connection, no facts) with ``variables`` as extra vars,
    through ansible-playbook and the json callback. Returns (CompletedProcess, parsed json document)."""
    (tmp_path / 'vars.json').write_text(json.dumps(dict(variables, ansible_python_interpreter=os.path.join(
        VENV_BIN, 'python'))))
    play = tmp_path / 'play.yml'
    play.write_text(yaml.safe_dump([{'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
                                     'roles': ['gpuops.k8s_gpu.%s' % role]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
               ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0')
    proc = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), '-i', 'localhost,', str(play),
                           '-e', '@%s' % (tmp_path / 'vars.json')] + list(args),
                          env=env, capture_output=True, text=True, cwd=ROOT)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook output is not JSON (rc=%s):\n%s\n%s'
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc, doc
