# -*- coding: utf-8 -*-
"""HAMi stack against upstream Project-HAMi/HAMi v2.10.0 (rows of docs/conformance/hami.md)."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import hami
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions, pins

T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}], 'sharing': {}}


def render(registry='', **hs):
    hs.setdefault('kube_version', 'v1.33.2')
    return r.render(dict(strategy='hami', pool='p1', nodes=['n1'], facts={'n1': T4}, registry=registry,
                         settings={'hami': hs}))


def obj(out, kind, name):
    found = [m for m in out['manifests'] if m['kind'] == kind and m['metadata']['name'] == name]
    assert len(found) == 1, (kind, name, [(m['kind'], m['metadata']['name']) for m in out['manifests']])
    return found[0]


def container(out, kind, name, cname):
    return [c for c in obj(out, kind, name)['spec']['template']['spec']['containers'] if c['name'] == cname][0]


def device_config(out):
    return json.loads(obj(out, 'ConfigMap', 'hami-scheduler-device')['data']['device-config.yaml'])['nvidia']


def rules_allow(rules, group, resource, verb):
    return any(group in ru['apiGroups'] and resource in ru['resources'] and verb in ru['verbs'] for ru in rules)


def test_HAMI_01_image_is_the_current_release():
    out = render()
    assert hami.HAMI_IMAGE == pins.ref('hami')
    assert container(out, 'Deployment', 'hami-scheduler', 'vgpu-scheduler-extender')['image'] == hami.HAMI_IMAGE
    assert container(out, 'DaemonSet', 'hami-device-plugin-p1', 'device-plugin')['image'] == hami.HAMI_IMAGE


def test_HAMI_02_kube_scheduler_image_follows_the_cluster_version():
    out = render(kube_version='v1.31.1+k3s1')
    assert container(out, 'Deployment', 'hami-scheduler', 'kube-scheduler')['image'] == 'registry.k8s.io/kube-scheduler:v1.31.1'
    out = render(kube_version='v1.36.0-eks-2d5f260', registry='reg.example/m')
    assert container(out, 'Deployment', 'hami-scheduler', 'kube-scheduler')['image'] == 'reg.example/m/kube-scheduler:v1.36.0'
    # a fixed image of another minor is refused (it was 1.29.4 whatever the cluster ran)
    with pytest.raises(StackError, match='kube_scheduler_image .* does not match'):
        render(kube_version='v1.33.2', kube_scheduler_image='registry.k8s.io/kube-scheduler:v1.29.4')
    # only a minor and no image: the exact version is needed
    with pytest.raises(StackError, match='no patch version'):
        render(kube_version='1.33')
    with pytest.raises(StackError, match='kube_version must be the cluster'):
        render(kube_version='')


@pytest.mark.parametrize('minor', list(range(kube_versions.SUPPORTED_MIN_MINOR, kube_versions.MAX_MINOR + 1)))
def test_HAMI_03_kubernetes_window_supported_minors(minor):
    out = render(kube_version='v1.%d.3' % minor)
    conf = json.loads(obj(out, 'ConfigMap', 'hami-scheduler')['data']['config.yaml'])
    assert conf['apiVersion'] == ('kubescheduler.config.k8s.io/v1' if minor >= 25 else 'kubescheduler.config.k8s.io/v1beta3')


@pytest.mark.parametrize('version', ['v1.%d.9' % (kube_versions.SUPPORTED_MIN_MINOR - 1),
                                     'v1.%d.0' % (kube_versions.MAX_MINOR + 1)])
def test_HAMI_03_outside_the_window_refused(version):
    with pytest.raises(StackError, match='between 1.%d and 1.%d' % kube_versions.SUPPORTED):
        render(kube_version=version)


def test_HAMI_04_scheduler_configuration_registers_the_extender():
    conf = json.loads(obj(render(), 'ConfigMap', 'hami-scheduler')['data']['config.yaml'])
    ext = conf['extenders'][0]
    assert conf['profiles'] == [{'schedulerName': 'hami-scheduler'}]
    assert (ext['filterVerb'], ext['bindVerb'], ext['nodeCacheCapable']) == ('filter', 'bind', True)
    assert {m['name'] for m in ext['managedResources']} >= {'nvidia.com/gpu', 'nvidia.com/gpumem', 'nvidia.com/gpucores'}
    assert all(m['ignoredByScheduler'] for m in ext['managedResources'])


def test_HAMI_05_post_start_hook_only_for_images_that_carry_vgpu_init():
    hook = container(render(), 'DaemonSet', 'hami-device-plugin-p1', 'device-plugin')['lifecycle']['postStart']['exec']['command']
    assert hook[-1].startswith('/k8s-vgpu/bin/vgpu-init.sh ')
    old = container(render(image='docker.io/projecthami/hami:v2.4.1'), 'DaemonSet', 'hami-device-plugin-p1', 'device-plugin')
    assert 'lifecycle' not in old
    assert hami.image_version('x/hami:v2.5.0') >= hami.POST_START_SINCE > hami.image_version('x/hami:2.4.9')


def test_HAMI_06_default_memory_key():
    dev = device_config(render(default_memory=2048))
    assert dev['defaultMemory'] == 2048
    assert 'defaultMem' not in dev
    with pytest.raises(StackError, match='unknown key'):
        render(default_mem=1)


def test_HAMI_07_only_keys_hami_reads():
    dev = device_config(render(extra_device_config={'gpuCorePolicy': 'force', 'memoryFactor': 1}))
    assert set(dev) <= hami.DEVICE_CONFIG_KEYS
    assert dev['gpuCorePolicy'] == 'force'
    for gone in ('migstrategy', 'disablecorelimit'):
        assert gone not in dev
    with pytest.raises(StackError, match='extra_device_config has key.*defaultMem'):
        render(extra_device_config={'defaultMem': 1})


# system:kube-scheduler of kubernetes/kubernetes v1.37.2 (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go,
# the rules that no feature gate adds; eventsRule from controller_policy.go; Read = get, list, watch), as
# (api group, resource, verbs).  Left out, with the reason: leasecandidates (coordinated leader election, behind the
# CoordinatedLeaderElection feature gate, off by default; the HAMi scheduler elects on an ordinary Lease).
READ = ('get', 'list', 'watch')
KUBE_SCHEDULER_V1_37_2 = [
    ('', 'events', ('create', 'update', 'patch')), ('events.k8s.io', 'events', ('create', 'update', 'patch')),
    ('coordination.k8s.io', 'leases', ('create', 'get', 'update', 'list', 'watch')),
    ('', 'nodes', READ), ('', 'pods', ('get', 'list', 'watch', 'delete')),
    ('', 'pods/binding', ('create',)), ('', 'bindings', ('create',)), ('', 'pods/status', ('patch', 'update')),
    ('', 'services', READ), ('', 'replicationcontrollers', READ), ('apps', 'replicasets', READ),
    ('apps', 'statefulsets', READ), ('policy', 'poddisruptionbudgets', READ),
    ('', 'persistentvolumeclaims', READ), ('', 'persistentvolumes', READ),
    ('authentication.k8s.io', 'tokenreviews', ('create',)), ('authorization.k8s.io', 'subjectaccessreviews', ('create',)),
    ('storage.k8s.io', 'csinodes', READ), ('storage.k8s.io', 'volumeattachments', READ), ('', 'namespaces', READ),
    ('storage.k8s.io', 'csidrivers', READ), ('storage.k8s.io', 'csistoragecapacities', READ),
]


def test_HAMI_08_scheduler_rbac_has_what_kube_scheduler_needs():
    out = render()
    rules = obj(out, 'ClusterRole', 'hami-scheduler')['rules']
    # every rule of the bootstrap role at v1.37.2 is written out in our own ClusterRole as well
    missing = [(g, res, v) for g, res, verbs in KUBE_SCHEDULER_V1_37_2 for v in verbs if not rules_allow(rules, g, res, v)]
    assert missing == []
    for group, res, verb in [('', 'pods', 'delete'), ('', 'pods/status', 'patch'), ('', 'pods/status', 'update'),
                             ('events.k8s.io', 'events', 'create'), ('events.k8s.io', 'events', 'patch'),
                             ('', 'pods/binding', 'create'), ('', 'bindings', 'create'),
                             ('storage.k8s.io', 'csistoragecapacities', 'list'), ('policy', 'poddisruptionbudgets', 'watch')]:
        assert rules_allow(rules, group, res, verb), (group, res, verb)
    bound = sorted(m['roleRef']['name'] for m in out['manifests'] if m['kind'] == 'ClusterRoleBinding'
                   and m['subjects'][0]['name'] == 'hami-scheduler')
    assert bound == ['hami-scheduler', 'system:kube-scheduler', 'system:volume-scheduler']


def test_HAMI_09_extender_rbac_from_hami_chart():
    rules = obj(render(), 'ClusterRole', 'hami-scheduler')['rules']
    for group, res, verb in [('', 'pods', 'patch'), ('', 'configmaps', 'patch'), ('', 'nodes', 'patch'),
                             ('', 'resourcequotas', 'list')]:
        assert rules_allow(rules, group, res, verb), (group, res, verb)


def test_HAMI_10_device_plugin_pod_as_upstream():
    out = render()
    ds = obj(out, 'DaemonSet', 'hami-device-plugin-p1')['spec']['template']['spec']
    assert ds['hostPID'] is True
    c = container(out, 'DaemonSet', 'hami-device-plugin-p1', 'device-plugin')
    assert c['securityContext']['privileged'] is True and 'SYS_ADMIN' in c['securityContext']['capabilities']['add']
    mounts = dict((m['mountPath'], m['name']) for m in c['volumeMounts'])
    for path in ('/var/lib/kubelet/device-plugins', '/usr/local/vgpu', '/config', '/device-config.yaml', '/var/run/cdi', '/tmp'):
        assert path in mounts, path
    vols = dict((v['name'], v) for v in ds['volumes'])
    assert vols['deviceconfig']['configMap']['name'] == 'hami-device-plugin-p1'
    assert json.loads(obj(out, 'ConfigMap', 'hami-device-plugin-p1')['data']['config.json']) == {'nodeconfig': []}
    env = dict((e['name'], e.get('value')) for e in c['env'])
    assert env['DEVICE_LIST_STRATEGY'] == 'envvar' and env['HOOK_PATH'] == '/usr/local'
    assert env['NVIDIA_MIG_MONITOR_DEVICES'] == 'all' and 'NODE_NAME' in env
    assert '--config-file=/device-config.yaml' in c['command']


def test_HAMI_11_device_plugin_rbac():
    rules = obj(render(), 'ClusterRole', 'hami-device-plugin-p1')['rules']
    for group, res, verb in [('', 'nodes', 'update'), ('', 'nodes', 'patch'), ('', 'pods', 'patch'), ('', 'events', 'create')]:
        assert rules_allow(rules, group, res, verb), (group, res, verb)


def test_HAMI_12_device_plugin_node_selector_and_label():
    out = render()
    assert obj(out, 'DaemonSet', 'hami-device-plugin-p1')['spec']['template']['spec']['nodeSelector']['gpu'] == 'on'
    assert out['node_labels']['n1']['gpu'] == 'on'


def test_HAMI_13_vgpu_monitor():
    c = container(render(), 'DaemonSet', 'hami-device-plugin-p1', 'vgpu-monitor')
    sc = c['securityContext']
    assert sc['allowPrivilegeEscalation'] is False and sc['capabilities'] == {'drop': ['ALL'], 'add': ['SYS_ADMIN']}
    assert {m['mountPath'] for m in c['volumeMounts']} >= {'/usr/local/vgpu/containers', '/run/containerd', '/sysinfo', '/hostvar'}
    assert c['command'] == ['vGPUmonitor']


def test_HAMI_14_a_changed_device_config_rolls_scheduler_and_device_plugin():
    """Issue #27 3.2: both mount device-config.yaml with subPath (never updated in place) and read it at start; the
    chart rolls them through checksum annotations on the pod templates."""
    def ann(out, kind, name):
        return obj(out, kind, name)['spec']['template']['metadata'].get('annotations') or {}
    before, again, after = render(), render(), render(default_memory=2048)
    for kind, name in (('Deployment', 'hami-scheduler'), ('DaemonSet', 'hami-device-plugin-p1')):
        a = ann(before, kind, name)
        assert set(a) == {'checksum/hami-scheduler-config', 'checksum/hami-scheduler-device-config'}, name
        assert a == ann(again, kind, name)
        assert ann(after, kind, name)['checksum/hami-scheduler-device-config'] != a['checksum/hami-scheduler-device-config']


def _pool_node(name, pool, strategy):
    return {'metadata': {'name': name, 'labels': {'gpuops.io/sharing-pool': pool, 'gpuops.io/sharing-strategy': strategy}}}


def test_HAMI_15_webhook_refused_beside_another_nvidia_pool():
    """Issue #27 3.4: HAMi's webhook sends every nvidia.com/gpu pod of the cluster to hami-scheduler."""
    hs = {'kube_version': 'v1.33.2', 'webhook_tls_secret': 'hami-tls', 'webhook_ca_bundle': 'Q0E='}
    others = [_pool_node('gpu-2', 'ts', 'time-slicing')]
    with pytest.raises(StackError, match='webhook.*ts \\(time-slicing\\).*schedulerName'):
        r.render(dict(strategy='hami', pool='p1', nodes=['n1'], facts={'n1': T4}, settings={'hami': hs},
                      live_nodes=others))
    # without the webhook HAMi pods opt in with schedulerName: allowed
    r.render(dict(strategy='hami', pool='p1', nodes=['n1'], facts={'n1': T4},
                  settings={'hami': {'kube_version': 'v1.33.2'}}, live_nodes=others))
    # alone (or beside non-NVIDIA pools) the webhook is rendered
    out = r.render(dict(strategy='hami', pool='p1', nodes=['n1'], facts={'n1': T4}, settings={'hami': hs},
                        live_nodes=[_pool_node('gpu-5', 'gs', 'gpushare')]))
    assert any(m['kind'] == 'MutatingWebhookConfiguration' for m in out['manifests'])
    # an NVIDIA pool beside a HAMi pool is warned
    out = r.render(dict(strategy='exclusive', pool='ex', nodes=['n2'], live_nodes=[_pool_node('gpu-7', 'p1', 'hami')]))
    assert any('hami-scheduler' in w for w in out['warnings'])


def test_HAMI_16_one_active_scheduler_leader_election_and_recreate():
    out = render(scheduler_name='hami-sched')
    dep = obj(out, 'Deployment', 'hami-scheduler')
    # never two scheduler pods at once: the old one is gone before the new one starts
    assert dep['spec']['strategy'] == {'type': 'Recreate'} and dep['spec']['replicas'] == 1
    cfg = json.loads(obj(out, 'ConfigMap', 'hami-scheduler')['data']['config.yaml'])
    assert cfg['leaderElection'] == {'leaderElect': True, 'resourceName': 'hami-sched', 'resourceNamespace': 'kube-system'}
    ks = container(out, 'Deployment', 'hami-scheduler', 'kube-scheduler')
    assert not [a for a in ks['command'] if a.startswith('--leader-elect')]
    ext = container(out, 'Deployment', 'hami-scheduler', 'vgpu-scheduler-extender')
    assert ext['command'][-3:] == ['--leader-elect=true', '--leader-elect-resource-name=hami-sched',
                                   '--leader-elect-resource-namespace=kube-system']
    rules = obj(out, 'ClusterRole', 'hami-scheduler')['rules']
    for verb in ('get', 'list', 'watch', 'create', 'update'):
        assert rules_allow(rules, 'coordination.k8s.io', 'leases', verb), verb
