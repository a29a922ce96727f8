"""Role nvidia_container_runtime, CDI refresh-unit branch end to end (docs/conformance/nvidia-container-toolkit.md
NCT-10): in a systemd node container the role installs the lab's stand-in toolkit 1.20.0 from the signed local
repository (lab/apt_repo), finds the stand-in nvidia-cdi-refresh.path/.service units the base package ships (upstream
names, triggers, output path; LAB STAND-INS, not NVIDIA software), enables and starts the path unit, runs the service
once, and reports the spec at /var/run/cdi/nvidia.yaml ready; a re-run changes nothing, and a changed nvidia-ctk
(one of the path unit's triggers) regenerates the spec through systemd. The nvidia-ctk generate branch (toolkits
without the units) is test_nvidia_container_runtime_cdi.py. Needs the lab's docker engine, node image and the Debian
mirror (runc, the stand-in runtime's dependency).

Run: .venv/bin/pytest lab/tests/integration/test_nvidia_container_runtime_cdi_refresh.py
"""
import json
import os
import time

import pytest
import yaml

from conftest import ROOT, ansible_env, dexec, lab_node, run_playbook, sh

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


def run_role(tmp_path, name, url):
    inv = tmp_path / 'hosts.yml'
    inv.write_text(yaml.safe_dump({'all': {'hosts': {'cdir-1': {
        'ansible_host': name, 'ansible_connection': 'community.docker.docker',
        'ansible_python_interpreter': '/usr/bin/python3'}}}}))
    play = tmp_path / 'play.yml'
    play.write_text(yaml.safe_dump([{'hosts': 'all', 'gather_facts': True, 'roles': [
        {'role': 'gpuops.k8s_gpu.nvidia_container_runtime', 'vars': {
            'gpuops_mirror': {'apt': url}, 'nvidia_container_runtime_version': STANDIN_VERSION,
            'nvidia_container_runtime_engines': ['containerd'], 'nvidia_container_runtime_restart': False,
            'nvidia_container_runtime_containerd_config_version': '2', 'nvidia_container_runtime_cdi': True}}]}]))
    collections = sh('bash', os.path.join(ROOT, 'lab', 'bin', 'collections-path.sh')).stdout.strip()
    proc, doc = run_playbook(inv, play, ansible_env(collections))
    assert proc.returncode == 0, json.dumps(doc)[-4000:]
    tasks = dict((t['task']['name'].split(' : ', 1)[-1], t['hosts']['cdir-1']) for p in doc['plays']
                 for t in p['tasks'] if 'cdir-1' in t['hosts'])
    return doc['stats']['cdir-1']['changed'], tasks


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
