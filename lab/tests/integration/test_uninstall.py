"""playbooks/uninstall.yml end to end in the lab: one node container that is both a GPU node (NVML simulator, V100)
and the kubeadm control plane, with real-world files seeded first - a daemon.json with registry mirrors and
log-opts, a containerd config.toml of a site (its own imports, no CRI section: the runtime goes into a drop-in),
kubeadm's kube-scheduler static manifest - and a real control plane (lab/kube/real.py) holding the Node (a kwok node
with a foreign label and annotation) and kubeadm's kubeadm-config ConfigMap. The install path (lab/uninstall/install.yml: the runtime role, the CUDA
MPS unit, then playbooks/cluster.yml) changes all of them; uninstall.yml must give every foreign key back, remove
the collection's, keep backups, delete the objects the stack created, and change nothing on a second run (no write
request in the API server's audit log, by the playbook's own client identity).

This file starts a control plane of its own instead of the shared `kube_real` cluster (about 8 s): uninstall removes a
strategy's shared objects (gpushare's scheduler extender, its RBAC, the RuntimeClass) only when no other pool of the
cluster uses them, and "nothing of the collection's is left" is a claim about the whole cluster - on the shared cluster
the gpushare pool of test_gpu_sharing_stack_real.py, running at the same time on another worker, would decide both.

Run: .venv/bin/pytest -q lab/tests/integration/test_uninstall.py   (needs root, dockerd, the node image)
"""
import contextlib
import json
import os
import sys

import pytest
import yaml

from conftest import ROOT, ansible_env, private_kube, failed_tasks, lab_node, run_playbook, sh, wait_until

FIX = os.path.join(ROOT, 'tests', 'unit', 'plugins', 'module_utils', 'fixtures')
NODE = 'gpu-uni-1'
MANAGED = 'gpuops.k8s_gpu'
USER = 'gpuops-test-uninstall'
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
    res = {'cpu': '32', 'memory': '128Gi', 'pods': '110'}
    return [{'apiVersion': 'v1', 'kind': 'Node',
             'metadata': {'name': NODE, 'labels': {'kubernetes.io/hostname': NODE, 'team': 'ml'},
                          'annotations': {'site/owner': 'gpu-team', 'kwok.x-k8s.io/node': 'fake'}},
             'spec': {}, 'status': {'capacity': res, 'allocatable': dict(res)}}, cm]


@contextlib.contextmanager
def own_cluster(state):
    """A real control plane of this file's own (see the docstring), seeded; yields (KubeReal, the user kubeconfig)."""
    from kubernetes import client
    with private_kube(state) as kube:
        core = client.CoreV1Api(kube.api())
        node, cm = seed()
        core.create_node(node)
        core.create_namespaced_config_map('kube-system', cm)
        # what the cluster's own controllers write to a Node (the TTL controller's annotation) comes before the
        # snapshot the uninstall is compared with
        wait_until('the TTL controller annotated the node', lambda: 'node.alpha.kubernetes.io/ttl' in (
            core.read_node(NODE).metadata.annotations or {}))
        yield kube, kube.user(USER)


@pytest.fixture(scope='module')
def lab(tmp_path_factory, collections_path):
    from kubernetes import client
    tmp = tmp_path_factory.mktemp('uninstall')
    with lab_node('h2-uni-%d' % os.getpid(), 'uni-1', nvml_profile='v100') as name:
        # PyYAML for kube_scheduler_config on the control plane (requirements.txt), from Debian as on a real node
        sh('docker', 'exec', name, 'apt-get', 'install', '-y', '-q', 'python3-yaml')
        for path, text in FILES.items():
            local = tmp / os.path.basename(path)
            local.write_text(text)
            sh('docker', 'exec', name, 'mkdir', '-p', os.path.dirname(path))
            sh('docker', 'cp', str(local), '%s:%s' % (name, path))
        with own_cluster(tmp / 'kube') as (kube, kubeconfig):
            emu = {'kube': kube, 'kubeconfig': kubeconfig}
            node_before = kube.api().sanitize_for_serialization(client.CoreV1Api(kube.api()).read_node(NODE))['metadata']
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
            yield {'name': name, 'emu': emu, 'inventory': str(inv), 'env': env, 'tmp': tmp, 'node_before': node_before}


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


# what the collection can make, and what the test reads back (kind -> (api_version, namespaced))
KINDS = {'Node': ('v1', False), 'ConfigMap': ('v1', True), 'Secret': ('v1', True), 'ServiceAccount': ('v1', True),
         'Service': ('v1', True), 'DaemonSet': ('apps/v1', True), 'Deployment': ('apps/v1', True),
         'Job': ('batch/v1', True), 'RuntimeClass': ('node.k8s.io/v1', False),
         'ClusterRole': ('rbac.authorization.k8s.io/v1', False),
         'ClusterRoleBinding': ('rbac.authorization.k8s.io/v1', False),
         'Role': ('rbac.authorization.k8s.io/v1', True), 'RoleBinding': ('rbac.authorization.k8s.io/v1', True),
         'MutatingWebhookConfiguration': ('admissionregistration.k8s.io/v1', False)}


def objects(lab):
    """Every object of the kinds above, as the API server returns them (camelCase), with kind set (not Pods: the
    DaemonSets' pods are the garbage collector's to remove after the uninstall)."""
    from kubernetes import dynamic
    dyn = dynamic.DynamicClient(lab['emu']['kube'].api())
    out = []
    for kind, (api_version, _ns) in KINDS.items():
        res = dyn.resources.get(api_version=api_version, kind=kind)
        for item in dyn.get(res).to_dict()['items']:
            if item['metadata'].get('deletionTimestamp'):
                continue
            item['kind'] = kind
            out.append(item)
    return out


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

    before_node = lab['node_before']
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
    # the seeded annotations and the TTL controller's, nothing of the collection's
    assert node['metadata'].get('annotations') == before_node['annotations']
    assert set(before_node['annotations']) == {'site/owner', 'kwok.x-k8s.io/node', 'node.alpha.kubernetes.io/ttl'}
    cm = [o for o in state if o['kind'] == 'ConfigMap' and o['metadata']['name'] == 'kubeadm-config'][0]
    assert yaml.safe_load(cm['data']['ClusterConfiguration']) == yaml.safe_load(seed()[1]['data']['ClusterConfiguration'])

    # a second uninstall: no change on the node, no write request to the cluster
    kube = lab['emu']['kube']
    since = kube.mark()
    doc = playbook(lab, os.path.join(ROOT, 'playbooks', 'uninstall.yml'))
    assert changed_tasks(doc) == []
    assert kube.writes(since, kube.mark(), user=USER) == []
    # the first install and uninstall were this user's too: every write accepted
    assert [w for w in kube.writes(0, since, user=USER) if w[2] >= 300] == []
