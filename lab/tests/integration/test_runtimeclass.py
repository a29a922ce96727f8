"""The RuntimeClass of role nvidia_container_runtime: schema-valid for Kubernetes 1.24-1.33 and applied to the
lab's API emulator with k8s_converge (run once; a re-run sends no write request).

Run: .venv/bin/pytest lab/tests/integration/test_runtimeclass.py
"""
import json
import os
import subprocess
import textwrap
import urllib.request

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
TASKS = os.path.join(ROOT, 'roles', 'nvidia_container_runtime', 'tasks', 'runtimeclass.yml')


def _definition():
    with open(TASKS) as f:
        task = yaml.safe_load(f)[0]
    d = json.loads(json.dumps(task['gpuops.k8s_gpu.k8s_converge']['definitions'][0]))
    d['metadata']['name'] = 'nvidia'
    d['handler'] = 'nvidia'
    return d


def test_runtimeclass_validates_for_every_supported_minor(tmp_path):
    path = tmp_path / 'rc.yaml'
    path.write_text(yaml.safe_dump(_definition()))
    proc = subprocess.run([os.path.join(VENV_BIN, 'python'), os.path.join(ROOT, 'lab/kube/validate.py'), str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def emulator():
    name = 'nvrt-test'
    kcfg = subprocess.run(['bash', os.path.join(ROOT, 'lab/kube/start.sh'), '--name', name], check=True,
                          capture_output=True, text=True).stdout.strip()
    yield kcfg
    subprocess.run(['bash', os.path.join(ROOT, 'lab/kube/stop.sh'), '--name', name], check=False)


def _requests(kubeconfig, query=''):
    with open(kubeconfig) as f:
        server = yaml.safe_load(f)['clusters'][0]['cluster']['server']
    with urllib.request.urlopen(server + '/_emulator/requests' + query) as r:
        return json.load(r)


def test_role_applies_runtimeclass_once(emulator, collections_path, tmp_path):
    play = tmp_path / 'play.yml'
    play.write_text(textwrap.dedent('''
        - hosts: n1,n2
          connection: local
          gather_facts: false
          vars:
            nvidia_container_runtime_install: false
            nvidia_container_runtime_engines: [docker]
            nvidia_container_runtime_docker_config: "{{ tmpdir }}/{{ inventory_hostname }}-daemon.json"
            nvidia_container_runtime_restart: false
            nvidia_container_runtime_runtimeclass: true
            nvidia_container_runtime_kubeconfig: "%s"
            ansible_python_interpreter: "%s"
          roles:
            - gpuops.k8s_gpu.nvidia_container_runtime
        ''' % (emulator, os.path.join(VENV_BIN, 'python'))))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
               ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0')
    cmd = [os.path.join(VENV_BIN, 'ansible-playbook'), '-i', 'n1,n2,', str(play), '-e', 'tmpdir=%s' % tmp_path]
    results = []
    for i in range(2):
        if i:
            seq = _requests(emulator)['seq']
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        results.append(json.loads(proc.stdout))
    first, second = (r['stats'] for r in results)
    assert first['n1']['changed'] + first['n2']['changed'] >= 3  # two daemon.json files + one RuntimeClass
    assert second['n1']['changed'] == 0 and second['n2']['changed'] == 0
    # kubernetes.core.k8s sent a PATCH on each re-run (changed=false); k8s_converge reads and writes nothing
    assert _requests(emulator, '?since=%d&writes=1' % seq)['items'] == []
    out = subprocess.run([os.path.join(VENV_BIN, 'python'), '-c', textwrap.dedent('''
        import json, sys
        from kubernetes import client, config
        config.load_kube_config(sys.argv[1])
        rc = client.NodeV1Api().read_runtime_class('nvidia')
        print(json.dumps({'handler': rc.handler, 'labels': rc.metadata.labels}))
        '''), emulator], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {'handler': 'nvidia', 'labels': {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu'}}
    for host in ('n1', 'n2'):
        assert json.loads((tmp_path / ('%s-daemon.json' % host)).read_text())['runtimes']['nvidia']
