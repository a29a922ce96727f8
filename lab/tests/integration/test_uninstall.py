"""playbooks/uninstall.yml end to end in the lab: one node container that is both a GPU node (NVML simulator, V100)
and the kubeadm control plane, with real-world files seeded first - a daemon.json with registry mirrors and
log-opts, a containerd config.toml of a site (its own imports, no CRI section: the runtime goes into a drop-in),
kubeadm's kube-scheduler static manifest - and the Kubernetes API emulator holding the Node (with a foreign label)
and kubeadm's kubeadm-config ConfigMap. The install path (lab/uninstall/install.yml: the runtime role, the CUDA
MPS unit, then playbooks/cluster.yml) changes all of them; uninstall.yml must give every foreign key back, remove
the collection's, keep backups, delete the objects the stack created, and change nothing on a second run.

Run: .venv/bin/pytest -q lab/tests/integration/test_uninstall.py   (needs root, dockerd, the node image)
"""
import json
import os
import sys

import pytest
import yaml

from conftest import ROOT, ansible_env, emulator_get, failed_tasks, kube_emulator, lab_node, run_playbook, sh

FIX = os.path.join(ROOT, 'tests', 'unit', 'plugins', 'module_utils', 'fixtures')
NODE = 'gpu-uni-1'
MANAGED = 'gpuops.k8s_gpu'
CONTAINERD = '''# site containerd config (containerd 1.7)
version = 2
root = "/var/lib/containerd"
imports = ["/etc/containerd/certs.d/*.toml"]

[grpc]
  address = "/run/containerd/containerd.sock"

[debug]
  level = "info"
'''
FILES = {  # path in the node -> seeded text
    '/etc/docker/daemon.json': open(os.path.join(FIX, 'runtime', 'daemon-mirrors-logopts.json')).read(),
    '/etc/containerd/config.toml': CONTAINERD,
    '/etc/kubernetes/manifests/kube-scheduler.yaml': open(os.path.join(FIX, 'scheduler', 'kubeadm-kube-scheduler.yaml')).read(),
}

GS_EXTENDER = 'registry.example.com/acs/k8s-gpushare-schd-extender:86f6025'
GS_PLUGIN = 'registry.example.com/acs/k8s-gpushare-plugin:45fb8b8'


def seed():
    cm = yaml.safe_load(open(os.path.join(FIX, 'scheduler', 'kubeadm-config-configmap.yaml')))
    return [{'apiVersion': 'v1', 'kind': 'Node',
             'metadata': {'name': NODE, 'labels': {'kubernetes.io/hostname': NODE, 'team': 'ml'},
                          'annotations': {'site/owner': 'gpu-team'}},
             'spec': {}, 'status': {'capacity': {'cpu': '32'}, 'allocatable': {'cpu': '32'}}}, cm]


@pytest.fixture(scope='module')
def lab(tmp_path_factory, collections_path):
    tmp = tmp_path_factory.mktemp('uninstall')
    with lab_node('h2-uni-%d' % os.getpid(), 'uni-1', nvml_profile='v100') as name:
        # PyYAML for kube_scheduler_config on the control plane (requirements.txt), from Debian as on a real node
        sh('docker', 'exec', name, 'apt-get', 'install', '-y', '-q', 'python3-yaml')
        for path, text in FILES.items():
            local = tmp / os.path.basename(path)
            local.write_text(text)
            sh('docker', 'exec', name, 'mkdir', '-p', os.path.dirname(path))
            sh('docker', 'cp', str(local), '%s:%s' % (name, path))
        with kube_emulator(tmp, 'h2-uninstall', seed()) as emu:
            host = {'ansible_host': name, 'ansible_connection': 'community.docker.docker',
                    'ansible_python_interpreter': '/usr/bin/python3', 'gpu_node_labels_node_name': NODE}
            inventory = {'all': {
                'hosts': {'localhost': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}},
                'vars': {'gpuops_kubeconfig': emu['kubeconfig'], 'gpuops_become': False},
                'children': {
                    'gpu_nodes': {
                        'children': {'lab_pool_gs': {'hosts': {'uni-1': host},
                                                     'vars': {'gpuops_sharing_strategy': 'gpushare',
                                                              # images built from the fixing commits (names only:
                                                              # the lab pulls nothing); upstream's are refused
                                                              'gpu_sharing_stack_gpushare': {
                                                                  'extender_image': GS_EXTENDER,
                                                                  'device_plugin_image': GS_PLUGIN}}}},
                        'vars': {'gpu_probe_bindings_method': 'none',
                                 'nvidia_container_runtime_engines': ['docker', 'containerd'],
                                 'nvidia_container_runtime_install': False, 'nvidia_container_runtime_restart': False,
                                 'nvidia_container_runtime_set_as_default': True,
                                 'nvidia_container_runtime_runtimeclass': True,
                                 'nvidia_container_runtime_kubeconfig': emu['kubeconfig']}},
                    'kube_control_plane': {'hosts': {'uni-1': {}},
                                           'vars': {'kube_scheduler_extender_distribution': 'kubeadm'}}}}}
            inv = tmp / 'hosts.yml'
            inv.write_text(yaml.safe_dump(inventory))
            env = ansible_env(collections_path, K8S_AUTH_KUBECONFIG=emu['kubeconfig'])
            yield {'name': name, 'emu': emu, 'inventory': str(inv), 'env': env, 'tmp': tmp}


def playbook(lab, path):
    proc, doc = run_playbook(lab['inventory'], path, lab['env'], timeout=1800)
    assert proc.returncode == 0, '\n'.join(failed_tasks(doc)) or proc.stderr[-4000:]
    return doc


def changed_tasks(doc):
    return ['%s | %s' % (h, t['task']['name']) for p in doc['plays'] for t in p['tasks']
            for h, r in t['hosts'].items() if r.get('changed')]


def cat(lab, path):
    proc = sh('docker', 'exec', lab['name'], 'cat', path, check=False)
    return proc.stdout if proc.returncode == 0 else None


def ls(lab, directory):
    return sh('docker', 'exec', lab['name'], 'ls', '-1', directory, check=False).stdout.split()


def objects(lab):
    return emulator_get(lab['emu'], '/_emulator/state')['items']


def test_install_then_uninstall_restores_every_foreign_key(lab):
    playbook(lab, os.path.join(ROOT, 'lab', 'uninstall', 'install.yml'))
    # the install path changed every seeded file and created cluster objects
    for path, text in FILES.items():
        assert cat(lab, path) != text, path
    assert cat(lab, '/etc/containerd/conf.d/99-nvidia.toml') is not None
    assert cat(lab, '/etc/kubernetes/gpuops/scheduler-config.yaml') is not None
    assert cat(lab, '/etc/systemd/system/nvidia-mps.service') is not None
    created = [o for o in objects(lab) if (o['metadata'].get('labels') or {}).get('app.kubernetes.io/managed-by') == MANAGED]
    assert {o['kind'] for o in created} >= {'RuntimeClass', 'DaemonSet'}, sorted({o['kind'] for o in created})
    node = [o for o in objects(lab) if o['kind'] == 'Node'][0]
    assert len(node['metadata']['labels']) > 2

    doc = playbook(lab, os.path.join(ROOT, 'playbooks', 'uninstall.yml'))
    assert changed_tasks(doc)
    # daemon.json: registry mirrors, log-opts, the crun runtime... all back; runtimes.nvidia and default-runtime gone
    assert json.loads(cat(lab, '/etc/docker/daemon.json')) == json.loads(FILES['/etc/docker/daemon.json'])
    # containerd: the site's text exactly, the drop-in gone, its import gone, the site's own import kept
    assert cat(lab, '/etc/containerd/config.toml') == CONTAINERD
    assert cat(lab, '/etc/containerd/conf.d/99-nvidia.toml') is None
    # kube-scheduler manifest: the same document as kubeadm wrote it; the collection's config file gone
    assert (yaml.safe_load(cat(lab, '/etc/kubernetes/manifests/kube-scheduler.yaml'))
            == yaml.safe_load(FILES['/etc/kubernetes/manifests/kube-scheduler.yaml']))
    assert ls(lab, '/etc/kubernetes/manifests') == ['kube-scheduler.yaml']   # no backup where kubelet would run it
    assert cat(lab, '/etc/kubernetes/gpuops/scheduler-config.yaml') is None
    assert cat(lab, '/etc/systemd/system/nvidia-mps.service') is None
    # backups of everything changed
    assert [f for f in ls(lab, '/etc/docker') if f.startswith('daemon.json.')], ls(lab, '/etc/docker')
    assert [f for f in ls(lab, '/etc/containerd') if f.startswith('config.toml.')], ls(lab, '/etc/containerd')
    assert [f for f in ls(lab, '/etc/containerd/conf.d') if f.startswith('99-nvidia.toml.')]
    assert [f for f in ls(lab, '/etc/kubernetes/tmp') if f.startswith('kube-scheduler.yaml.')]
    assert [f for f in ls(lab, '/etc/kubernetes/gpuops') if f.startswith('scheduler-config.yaml.')]
    assert [f for f in ls(lab, '/etc/systemd/system') if f.startswith('nvidia-mps.service.')]
    # cluster: nothing of the collection's left, the node as it was, kubeadm-config as it was
    state = objects(lab)
    left = [(o['kind'], o['metadata']['name']) for o in state
            if (o['metadata'].get('labels') or {}).get('app.kubernetes.io/managed-by') == MANAGED]
    assert left == []
    assert not [o for o in state if o['kind'] == 'RuntimeClass']
    node = [o for o in state if o['kind'] == 'Node'][0]
    assert node['metadata']['labels'] == seed()[0]['metadata']['labels']
    assert node['metadata'].get('annotations') == {'site/owner': 'gpu-team'}
    cm = [o for o in state if o['kind'] == 'ConfigMap' and o['metadata']['name'] == 'kubeadm-config'][0]
    assert yaml.safe_load(cm['data']['ClusterConfiguration']) == yaml.safe_load(seed()[1]['data']['ClusterConfiguration'])

    # a second uninstall: no change on the node, no write request to the cluster
    since = emulator_get(lab['emu'], '/_emulator/requests')['seq']
    doc = playbook(lab, os.path.join(ROOT, 'playbooks', 'uninstall.yml'))
    assert changed_tasks(doc) == []
    assert emulator_get(lab['emu'], '/_emulator/requests?since=%d&writes=1' % since)['items'] == []
