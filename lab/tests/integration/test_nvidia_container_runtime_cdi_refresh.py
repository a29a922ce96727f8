"""Role nvidia_container_runtime, CDI refresh-unit branch end to end (docs/conformance/nvidia-container-toolkit.md
NCT-10): in a systemd node container the role installs the lab's stand-in toolkit 1.20.0 from the signed local
repository (lab/apt_repo), finds the stand-in nvidia-cdi-refresh.path/.service units the base package ships (upstream
names, triggers, output path; LAB STAND-INS, not NVIDIA software), enables and starts the path unit, runs the service
once, and reports the spec at /var/run/cdi/nvidia.yaml ready; a re-run changes nothing, and a changed nvidia-ctk
(one of the path unit's triggers) regenerates the spec through systemd. The nvidia-ctk generate branch (toolkits
without the units) is test_nvidia_container_runtime_cdi.py. Needs the lab's docker engine, node image and the Debian
mirror (runc, the stand-in runtime's dependency).

test_NCT_26 does the same with NVIDIA's OWN units and program, not stand-ins: nvidia-cdi-refresh.path/.service read
from the toolkit v1.20.0 module in the Go module cache at test time (deployments/systemd; never copied into the
repository) and installed where the Debian package puts them, the real nvidia-ctk 1.20.0 (lab/go/nvidia-ctk) as
/usr/bin/nvidia-ctk, the NVML simulator as the driver's library, the lab's nvidia-smi (-L), the driver's files a
driver package would leave (libcuda/libnvidia-ml of the version, /dev/nvidia*, nvidia.ko in modules.dep).

Run: .venv/bin/pytest lab/tests/integration/test_nvidia_container_runtime_cdi_refresh.py
"""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from conftest import ROOT, ansible_env, dexec, lab_node, run_playbook, sh

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
from oracle_util import go_program  # noqa: E402

SERVE = os.path.join(ROOT, 'lab', 'apt_repo', 'serve.sh')
STANDIN_VERSION = '1.20.0-1~gpuopslab1'
SPEC = '/var/run/cdi/nvidia.yaml'


@pytest.fixture(scope='module')
def node(tmp_path_factory):
    # A private instance of the apt repository server (its own state dir): the molecule scenario
    # nvidia_container_runtime runs at the same time and uses the shared one, which this file must not stop.
    env = dict(os.environ, LAB_APT_REPO_STATE=str(tmp_path_factory.mktemp('apt_repo_state')))
    url = sh(SERVE, 'start', timeout=300, env=env).stdout.strip().splitlines()[-1]
    try:
        with lab_node('i15-cdir-%d' % os.getpid(), 'cdir-1', network='host') as name:
            yield name, url
    finally:
        sh(SERVE, 'stop', check=False, env=env)


def role_run(tmp_path, name, host, role_vars):
    """Role nvidia_container_runtime with role_vars on node container ``name`` (inventory host ``host``): (the host's
    changed count, {task name: its result})."""
    inv = tmp_path / 'hosts.yml'
    inv.write_text(yaml.safe_dump({'all': {'hosts': {host: {
        'ansible_host': name, 'ansible_connection': 'community.docker.docker',
        'ansible_python_interpreter': '/usr/bin/python3'}}}}))
    play = tmp_path / 'play.yml'
    play.write_text(yaml.safe_dump([{'hosts': 'all', 'gather_facts': True, 'roles': [
        {'role': 'gpuops.k8s_gpu.nvidia_container_runtime', 'vars': role_vars}]}]))
    collections = sh('bash', os.path.join(ROOT, 'lab', 'bin', 'collections-path.sh')).stdout.strip()
    proc, doc = run_playbook(inv, play, ansible_env(collections))
    assert proc.returncode == 0, json.dumps(doc)[-4000:]
    tasks = dict((t['task']['name'].split(' : ', 1)[-1], t['hosts'][host]) for p in doc['plays']
                 for t in p['tasks'] if host in t['hosts'])
    return doc['stats'][host]['changed'], tasks


def run_role(tmp_path, name, url):
    return role_run(tmp_path, name, 'cdir-1', {
        'gpuops_mirror': {'apt': url}, 'nvidia_container_runtime_version': STANDIN_VERSION,
        'nvidia_container_runtime_engines': ['containerd'], 'nvidia_container_runtime_restart': False,
        'nvidia_container_runtime_containerd_config_version': '2', 'nvidia_container_runtime_cdi': True})


def test_NCT_10_refresh_units_enabled_spec_present_rerun_unchanged(tmp_path, node):
    name, url = node
    changed, tasks = run_role(tmp_path, name, url)
    assert changed > 0
    assert not tasks['Enable and start the toolkit\'s CDI refresh path unit (regenerates the spec after driver changes)'].get('skipped')
    assert tasks['Generate the CDI spec with nvidia-ctk into the scratch directory (toolkit without refresh units)'].get(
        'skipped')
    assert tasks['Make a scratch directory for the generated spec'].get('skipped')
    res = tasks['Tell the cluster layer whether a CDI spec exists']
    assert (res.get('ansible_facts') or res)['nvidia_container_runtime_cdi_spec_ready'] is True
    assert dexec(name, 'dpkg-query', '-W', '-f', '${Version}', 'nvidia-container-toolkit-base').stdout == STANDIN_VERSION
    assert dexec(name, 'systemctl', 'is-enabled', 'nvidia-cdi-refresh.path').stdout.strip() == 'enabled'
    assert dexec(name, 'systemctl', 'is-active', 'nvidia-cdi-refresh.path').stdout.strip() == 'active'
    assert 'kind: nvidia.com/gpu' in dexec(name, 'cat', SPEC).stdout
    # the units are the package's, at the Debian path upstream uses from 1.20.0 on
    assert dexec(name, 'dpkg', '-S', '/lib/systemd/system/nvidia-cdi-refresh.path').stdout.startswith(
        'nvidia-container-toolkit-base:')
    # re-run: nothing changes
    changed, tasks = run_role(tmp_path, name, url)
    assert changed == 0, [k for k, v in tasks.items() if v.get('changed')]
    # a changed nvidia-ctk (a toolkit upgrade) triggers the path unit, whose service writes the spec again
    dexec(name, 'rm', '-f', SPEC)
    dexec(name, 'sh', '-c', 'cp -p /usr/bin/nvidia-ctk /tmp/ctk && cat /tmp/ctk > /usr/bin/nvidia-ctk')
    deadline = time.monotonic() + 20
    while dexec(name, 'test', '-e', SPEC, check=False).returncode != 0:
        assert time.monotonic() < deadline, dexec(name, 'journalctl', '-u', 'nvidia-cdi-refresh.service',
                                                  '--no-pager', check=False).stdout
        time.sleep(0.2)


# ------------------------------------------------------------------------- NVIDIA's own units (NCT-26)
TOOLKIT_MODULE = 'github.com/!n!v!i!d!i!a/nvidia-container-toolkit@v1.20.0'
UNIT_FILES = {'nvidia-cdi-refresh.path': '/lib/systemd/system/', 'nvidia-cdi-refresh.service': '/lib/systemd/system/',
              'nvidia-cdi-refresh.env': '/etc/nvidia-container-toolkit/'}   # packaging/debian/...-base.install


def _toolkit_units():
    """NVIDIA's unit files from the toolkit module in the Go module cache (lab/go/nvidia-ctk requires v1.20.0)."""
    cache = subprocess.run(['go', 'env', 'GOMODCACHE'], cwd=os.path.join(ROOT, 'lab', 'go', 'nvidia-ctk'),
                           capture_output=True, text=True, check=True).stdout.strip()
    here = os.path.join(cache, TOOLKIT_MODULE, 'deployments', 'systemd')
    if not os.path.isfile(os.path.join(here, 'nvidia-cdi-refresh.path')):
        # the module is downloaded with the nvidia-ctk set's build; fetch it when the cache lost it
        subprocess.run(['go', 'mod', 'download', 'github.com/NVIDIA/nvidia-container-toolkit@v1.20.0'],
                       cwd=os.path.join(ROOT, 'lab', 'go', 'nvidia-ctk'), capture_output=True, timeout=600)
    assert os.path.isfile(os.path.join(here, 'nvidia-cdi-refresh.path')), 'no toolkit units in %s' % here
    return here


def _driver_files(name, version, minors):
    """What a driver package leaves on the node for nvidia-ctk and the units: the version's libcuda and libnvidia-ml
    (empty files: no CUDA here), /dev/nvidiactl and /dev/nvidia<minor>, and nvidia.ko in the running kernel's
    modules.dep and modules.dep.bin (written last, as depmod writes them when the package installs the module: a
    temporary file renamed over each; the path unit's trigger. systemd 252 does not fire a PathChanged on a rename
    while another PathChanged of the unit names a file that does not exist - modules.dep.bin here - so both are
    written, as depmod does; NCT-26)."""
    lib = '/usr/lib/x86_64-linux-gnu'
    dexec(name, 'sh', '-ec', 'rm -f %s/libcuda.so.5* %s/libnvidia-ml.so.5* && touch %s/libcuda.so.%s %s/libnvidia-ml.so.%s'
          % (lib, lib, lib, version, lib, version))
    nodes = ' && '.join(['[ -e /dev/nvidiactl ] || mknod -m 666 /dev/nvidiactl c 195 255'] +
                        ['[ -e /dev/nvidia%d ] || mknod -m 666 /dev/nvidia%d c 195 %d' % (m, m, m) for m in minors])
    dexec(name, 'sh', '-ec', nodes)
    dexec(name, 'sh', '-ec', 'd=/lib/modules/$(uname -r); mkdir -p $d/updates/dkms && '
          'printf "updates/dkms/nvidia.ko: # %s\\nkernel/drivers/net/dummy.ko:\\n" > $d/modules.dep.tmp && '
          'printf "binary index of %s\\n" > $d/modules.dep.bin.tmp && '
          'mv $d/modules.dep.tmp $d/modules.dep && mv $d/modules.dep.bin.tmp $d/modules.dep.bin' % (version, version))


@pytest.fixture(scope='module')
def real_node():
    with lab_node('i15-cdiu-%d' % os.getpid(), 'cdiu-1', nvml_profile='h100-real-580') as name:
        units = _toolkit_units()
        ctk = go_program('nvidia-ctk', 'version 1.20.0')
        sh('docker', 'cp', ctk, '%s:/usr/bin/nvidia-ctk' % name)
        sh('docker', 'cp', os.path.join(ROOT, 'lab', 'nvml_sim', 'nvidia-smi'), '%s:/usr/bin/nvidia-smi' % name)
        dexec(name, 'mkdir', '-p', '/etc/nvidia-container-toolkit')
        for f, d in UNIT_FILES.items():
            sh('docker', 'cp', os.path.join(units, f), '%s:%s%s' % (name, d, f))
        dexec(name, 'sh', '-ec', 'chmod 0644 /lib/systemd/system/nvidia-cdi-refresh.* && systemctl daemon-reload')
        yield name


def _run_role_real(tmp_path, name):
    return role_run(tmp_path, name, 'cdiu-1', {
        'nvidia_container_runtime_install': False, 'nvidia_container_runtime_engines': ['containerd'],
        'nvidia_container_runtime_restart': False, 'nvidia_container_runtime_cdi_spec': True,
        'nvidia_container_runtime_containerd_config_version': '2'})


def _oracle(name):
    """nvidia-ctk's own spec for the node as it is now (the same program, run by hand)."""
    dexec(name, 'rm', '-f', '/tmp/oracle.yaml')
    dexec(name, '/usr/bin/nvidia-ctk', 'cdi', 'generate', '--output=/tmp/oracle.yaml')
    return dexec(name, 'cat', '/tmp/oracle.yaml').stdout


def _wait_for_spec(name, since_mtime, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        r = dexec(name, 'stat', '-c', '%Y.%y', SPEC, check=False)
        if r.returncode == 0 and r.stdout.strip() != since_mtime:
            # the oneshot is done when the unit is no longer activating
            if dexec(name, 'systemctl', 'is-active', 'nvidia-cdi-refresh.service', check=False).stdout.strip() != \
                    'activating':
                return r.stdout.strip()
        assert time.monotonic() < deadline, dexec(name, 'journalctl', '-u', 'nvidia-cdi-refresh.service',
                                                  '-u', 'nvidia-cdi-refresh.path', '--no-pager', check=False).stdout
        time.sleep(0.3)


def test_NCT_26_nvidias_own_refresh_units_write_nvidia_ctks_spec_and_follow_a_driver_change(tmp_path, real_node):
    name = real_node
    first = json.loads(dexec(name, 'cat', '/etc/nvml-sim/inventory.json').stdout)
    _driver_files(name, first['driver_version'], [g.get('minor_number', i) for i, g in enumerate(first['gpus'])])
    # the units are NVIDIA's, byte for byte
    for f, d in UNIT_FILES.items():
        with open(os.path.join(_toolkit_units(), f)) as fh:
            assert dexec(name, 'cat', d + f).stdout == fh.read(), f
    assert dexec(name, 'test', '-e', SPEC, check=False).returncode != 0

    changed, tasks = _run_role_real(tmp_path, name)
    assert changed > 0
    assert not tasks['Enable and start the toolkit\'s CDI refresh path unit (regenerates the spec after driver changes)'].get('skipped')
    assert tasks['Generate the CDI spec with nvidia-ctk into the scratch directory (toolkit without refresh units)'].get('skipped')
    res = tasks['Tell the cluster layer whether a CDI spec exists']
    assert (res.get('ansible_facts') or res)['nvidia_container_runtime_cdi_spec_ready'] is True
    assert dexec(name, 'systemctl', 'is-enabled', 'nvidia-cdi-refresh.path').stdout.strip() == 'enabled'
    assert dexec(name, 'systemctl', 'is-active', 'nvidia-cdi-refresh.path').stdout.strip() == 'active'
    # NVIDIA's service ran nvidia-ctk on the simulator: the spec is nvidia-ctk's own, byte for byte
    journal = dexec(name, 'journalctl', '-u', 'nvidia-cdi-refresh.service', '--no-pager', check=False).stdout
    spec = dexec(name, 'cat', SPEC).stdout
    assert spec == _oracle(name), journal
    doc = yaml.safe_load(spec)
    assert doc['kind'] == 'nvidia.com/gpu' and {'0', first['gpus'][0]['uuid'], 'all'} <= {
        d['name'] for d in doc['devices']}
    assert 'libcuda.so.%s' % first['driver_version'] in spec
    assert 'GPU 0: ' in journal or 'Succeeded' in journal or 'Finished' in journal, journal

    # a re-run of the role writes nothing
    mtime = dexec(name, 'stat', '-c', '%Y.%y', SPEC).stdout.strip()
    changed, tasks = _run_role_real(tmp_path, name)
    assert changed == 0, [k for k, v in tasks.items() if v.get('changed')]
    assert dexec(name, 'stat', '-c', '%Y.%y', SPEC).stdout.strip() == mtime

    # a driver change: the simulator reports a new version, the package leaves that version's files and depmod
    # rewrites modules.dep - the path unit runs NVIDIA's service, which writes nvidia-ctk's spec of the new driver
    new = dict(first, driver_version='580.95.05')
    inv = tmp_path / 'inventory.json'
    inv.write_text(json.dumps(new))
    sh('docker', 'cp', str(inv), '%s:/etc/nvml-sim/inventory.json' % name)
    time.sleep(1.1)   # a new mtime second for the spec
    _driver_files(name, new['driver_version'], [g.get('minor_number', i) for i, g in enumerate(new['gpus'])])
    _wait_for_spec(name, mtime)
    spec = dexec(name, 'cat', SPEC).stdout
    assert 'libcuda.so.580.95.05' in spec and 'libcuda.so.%s' % first['driver_version'] not in spec, spec[-2000:]
    assert spec == _oracle(name)
