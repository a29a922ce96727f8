# -*- coding: utf-8 -*-
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError, mirror_image
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.gpushare import known_bad_extender
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.operator import DOCUMENTED_VALUE_KEYS, leaf_paths
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.volcano import scheduler_conf

T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}],
      'sharing': {'mps': {'allowed': True, 'max_clients': 48}, 'mig': {'allowed': False, 'reason': 'GPU(s) 0 are not MIG capable'}}}
P100 = {'gpus': [{'index': 0}], 'sharing': {'mps': {'allowed': False, 'reason': 'GPU 0 (Tesla P100) has compute capability 6.0; MPS needs >= 7.0'}}}
A100 = {'gpus': [{'index': i, 'memory_total_mib': 81920} for i in range(8)],
        'sharing': {'mps': {'allowed': True, 'max_clients': 48},
                    'mig': {'allowed': True, 'profiles': dict((str(i), ['1g.10gb', '3g.40gb']) for i in range(8))}}}


# gpushare refuses upstream's known-bad default images unless images are named (or the risk is accepted)
GPUSHARE_OK = {'gpushare': {'extender_image': 'reg.example/acs/k8s-gpushare-schd-extender:86f6025',
                            'device_plugin_image': 'reg.example/acs/k8s-gpushare-plugin:45fb8b8'}}
HAMI_OK = {'kube_version': 'v1.33.2'}


def render(strategy, **kw):
    p = dict(strategy=strategy, pool='p1', nodes=['n1'], facts={'n1': kw.pop('facts', T4)})
    p.update(kw)
    return r.render(p)


def kinds(out):
    return sorted(m['kind'] for m in out['manifests'])


def test_mirror_image_rewrites_host_and_requires_a_pin():
    assert mirror_image('nvcr.io/nvidia/k8s-device-plugin:v0.17.1', 'reg.example/m', 'x') == 'reg.example/m/nvidia/k8s-device-plugin:v0.17.1'
    assert mirror_image('busybox:1.36', 'reg.example/m', 'x') == 'reg.example/m/library/busybox:1.36'
    assert mirror_image('a/b@sha256:' + 'a' * 64, '', 'x') == 'a/b@sha256:' + 'a' * 64
    for bad in ('nvcr.io/nvidia/k8s-device-plugin', 'foo:latest', ''):
        with pytest.raises(StackError, match='var.image'):
            mirror_image(bad, '', 'var.image')


@pytest.mark.parametrize('strategy', ['exclusive', 'time-slicing', 'mps'])
def test_nvidia_strategies(strategy):
    out = render(strategy, settings={'time_slicing': {'replicas': 3}})
    assert 'DaemonSet' in kinds(out)
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap'][0]
    cfg = json.loads(list(cm['data'].values())[0])
    assert cfg['version'] == 'v1'
    if strategy == 'time-slicing':
        assert cfg['sharing']['timeSlicing']['resources'] == [{'name': 'nvidia.com/gpu', 'replicas': 3}]
    assert out['node_labels']['n1']['nvidia.com/device-plugin.config'] == list(cm['data'])[0]
    assert out['node_labels']['n1']['gpuops.io/sharing-strategy'] == strategy


def test_time_slicing_replicas_one_refused():
    with pytest.raises(StackError, match=r'gpu_sharing_stack_time_slicing.replicas must be >= 2'):
        render('time-slicing', settings={'time_slicing': {'replicas': 1}})


def test_mps_refused_below_cc7_with_node_and_reason():
    with pytest.raises(StackError, match=r'n1: .*compute capability 6.0'):
        render('mps', facts=P100)


def test_mps_needs_facts_unless_told():
    with pytest.raises(StackError, match='no gpu_probe_facts'):
        r.render(dict(strategy='mps', pool='p1', nodes=['n1']))
    out = r.render(dict(strategy='mps', pool='p1', nodes=['n1'], require_facts=False))
    assert 'nvidia-mps-control-daemon-p1' in [m['metadata']['name'] for m in out['manifests']]


def test_mig_profiles_checked_and_single_needs_one_profile():
    out = render('mig', facts=A100, settings={'mig': {'devices': {'1g.10gb': 7}}})
    assert out['node_labels']['n1']['nvidia.com/mig.config'] == 'gpuops-1g-10gb-7'
    with pytest.raises(StackError, match='offers only'):
        render('mig', facts=A100, settings={'mig': {'devices': {'1g.5gb': 7}}})
    with pytest.raises(StackError, match='strategy single needs one MIG profile'):
        render('mig', facts=A100, settings={'mig': {'devices': {'1g.10gb': 1, '3g.40gb': 1}}})
    with pytest.raises(StackError, match='not MIG capable'):
        render('mig', settings={'mig': {'devices': {'1g.10gb': 7}}})


def test_unknown_strategy_and_setting():
    with pytest.raises(StackError, match='gpu_sharing_stack_strategy must be one of'):
        render('magic')
    with pytest.raises(StackError, match='unknown key'):
        render('gpushare', settings={'gpushare': {'memory_units': 'GiB'}})


def test_gpushare_known_bad_tag_and_mib_warning():
    out = render('gpushare', facts=A100, registry='reg.example/m',
                 settings={'gpushare': {'memory_unit': 'MiB', 'accept_known_bad_images': True}})
    assert any('known-bad' in w for w in out['warnings'])
    assert any('gRPC' in w for w in out['warnings'])
    assert known_bad_extender('reg.example/m/acs/k8s-gpushare-schd-extender:1.11-d170d8a')
    assert not known_bad_extender('reg.example/m/acs/k8s-gpushare-schd-extender:1.12-fixed')
    ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'][0]
    assert ds['spec']['template']['spec']['nodeSelector']['gpushare'] == 'true'
    assert '--memory-unit=MiB' in ds['spec']['template']['spec']['containers'][0]['command']
    tol = [t['key'] for t in ds['spec']['template']['spec']['tolerations']]
    assert 'node-role.kubernetes.io/controlplane' in tol and 'node-role.kubernetes.io/control-plane' in tol
    assert out['node_labels']['n1']['gpushare'] == 'true'


def test_conflicting_accounting_refused():
    state = {'n1': {'labels': {}, 'allocatable': {'nvidia.com/gpu': '8'}}}
    with pytest.raises(StackError, match='显存资源及卡资源联动'):
        render('gpushare', node_state=state)
    out = render('gpushare', node_state=state, allow_mixed_accounting=True, settings=GPUSHARE_OK)
    assert out['manifests']
    state = {'n1': {'labels': {}, 'allocatable': {'aliyun.com/gpu-mem': '80'}}}
    with pytest.raises(StackError, match='aliyun.com/gpu-mem=80'):
        render('time-slicing', node_state=state)


def test_two_strategies_on_one_pool_refused():
    with pytest.raises(StackError, match='two strategies on one pool'):
        render('exclusive', node_strategies={'n1': 'gpushare'})
    with pytest.raises(StackError, match='already belongs to pool other'):
        labels = {'gpuops.io/sharing-pool': 'other', 'gpuops.io/sharing-strategy': 'hami'}
        render('exclusive', live_nodes=[{'metadata': {'name': 'n1', 'labels': labels}}])


def test_volcano_versions_and_merge():
    old = scheduler_conf((1, 8), 'gpu-share')
    preds = [p for t in old['tiers'] for p in t['plugins'] if p['name'] == 'predicates'][0]
    assert preds['arguments'] == {'predicate.GPUSharingEnable': True}
    existing = {'actions': 'allocate', 'tiers': [{'plugins': [{'name': 'tdm'},
                                                              {'name': 'predicates', 'arguments': {'predicate.GPUSharingEnable': True,
                                                                                                   'x': 1}}]}]}
    new = scheduler_conf((1, 10), 'vgpu', existing)
    names = [p['name'] for t in new['tiers'] for p in t['plugins']]
    assert names == ['tdm', 'predicates', 'deviceshare']
    ds = new['tiers'][0]['plugins'][2]['arguments']
    assert ds == {'deviceshare.GPUSharingEnable': False, 'deviceshare.VGPUEnable': True}
    assert new['tiers'][0]['plugins'][1]['arguments'] == {'x': 1}
    assert new['actions'] == 'allocate'
    with pytest.raises(StackError, match='needs Volcano >= 1.9'):
        render('volcano', settings={'volcano': {'version': '1.8', 'mode': 'vgpu'}})


def test_hami_settings_and_webhook_pairing():
    out = render('hami', settings={'hami': dict(HAMI_OK, device_split_count=4, device_memory_scaling=2)})
    cm = [m for m in out['manifests'] if m['metadata']['name'] == 'hami-scheduler-device'][0]
    dev = json.loads(cm['data']['device-config.yaml'])['nvidia']
    assert dev['deviceSplitCount'] == 4 and dev['deviceMemoryScaling'] == 2.0
    assert 'MutatingWebhookConfiguration' not in kinds(out)
    assert any('webhook' in w for w in out['warnings'])
    with pytest.raises(StackError, match='go together'):
        render('hami', settings={'hami': dict(HAMI_OK, webhook_tls_secret='x')})


def test_gpu_manager_needs_the_acknowledgement():
    # refused unless accept_unmaintained (pointing to hami); with it, every deploy warns and names hami
    with pytest.raises(StackError, match='gpu_sharing_stack_strategy: hami'):
        render('gpu-manager')
    out = render('gpu-manager', settings={'gpu_manager': {'accept_unmaintained': True,
                                                          'admission_image': 'reg.example/gpu-admission:47d56ae'}})
    assert any('hami' in w for w in out['warnings'])


def test_gpu_operator_values_documented():
    out = render('gpu-operator', registry='reg.example/m', image_pull_secrets=['regcred'],
                 settings={'gpu_operator': {'chart_path': '/charts/gpu-operator-v26.7.0.tgz', 'sharing': 'time-slicing'}})
    values = out['helm']['values']
    assert values['driver']['enabled'] is False and values['toolkit']['enabled'] is False
    assert set(leaf_paths(values)) <= DOCUMENTED_VALUE_KEYS
    assert values['devicePlugin']['repository'] == 'reg.example/m/nvidia'
    assert out['manifests'] == []
    with pytest.raises(StackError, match='chart_path'):
        render('gpu-operator')


def test_validation_workloads():
    out = render('gpushare', facts=A100, validation={'enabled': True}, settings=GPUSHARE_OK)
    d = out['validation_manifests'][0]
    assert d['kind'] == 'Deployment'
    assert d['spec']['template']['spec']['containers'][0]['resources']['limits'] == {'aliyun.com/gpu-mem': '2'}
    out = render('volcano', validation={'enabled': True})
    assert out['validation_manifests'][0]['spec']['schedulerName'] == 'volcano'


@pytest.mark.parametrize('strategy,expected', [
    ('exclusive', 'nvidia'), ('time-slicing', 'nvidia'), ('mps', 'nvidia'), ('gpu-operator', 'nvidia'),
    ('volcano', ''), ('hami', '')])
def test_DP_20_validation_pod_names_the_runtime_class_gpu_pods_need(strategy, expected):
    """Issue #27 3.1: with the default envvar strategy a GPU pod gets its GPU only through the nvidia runtime, so the
    validation pod names the RuntimeClass where nvidia is not the default runtime (k8s-device-plugin v0.20.0 README)."""
    settings = {'hami': HAMI_OK, 'gpu_operator': {'chart_path': '/charts/gpu-operator-v26.7.0.tgz'}}
    out = render(strategy, validation={'enabled': True}, settings=settings)
    spec = out['validation_manifests'][0]['spec']
    assert spec.get('runtimeClassName', '') == expected
    assert out['runtime_class_name'] == expected
    assert any(('runtimeClassName: %s' % expected) in n if expected else 'default runtime' in n for n in out['notes'])
    # follows the device plugin's setting, and can be overridden
    if strategy == 'exclusive':
        out = render(strategy, validation={'enabled': True}, settings={'nvidia': {'runtime_class_name': 'nv2'}})
        assert out['validation_manifests'][0]['spec']['runtimeClassName'] == 'nv2'
        out = render(strategy, validation={'enabled': True, 'runtime_class_name': ''})
        assert 'runtimeClassName' not in out['validation_manifests'][0]['spec']
        with pytest.raises(StackError, match='validation.runtime_class_name'):
            render(strategy, validation={'enabled': True, 'runtime_class_name': 'Bad_Name'})


def _containers(manifest):
    spec = manifest.get('spec') or {}
    pod = (spec.get('template') or {}).get('spec') or spec
    return (pod.get('initContainers') or []) + (pod.get('containers') or [])


@pytest.mark.parametrize('strategy,kw', [
    ('exclusive', {}), ('time-slicing', {'settings': {'time_slicing': {'replicas': 3}}}), ('mps', {}),
    ('mig', {'facts': A100, 'settings': {'mig': {'devices': {'1g.10gb': 7}}}}),
])
def test_K8S_12_no_env_value_is_the_empty_string(strategy, kw):
    """The API server drops an EnvVar's empty `value` (omitempty; found by the lab's real kube-apiserver v1.37.2):
    an entry rendered with value "" is never found in the live object, so every run re-applied the DaemonSet. An
    empty variable is rendered as a name alone, which the kubelet sets to "" just the same."""
    out = render(strategy, **kw)
    envs = [(m['kind'], m['metadata']['name'], c['name'], e) for m in out['manifests'] for c in _containers(m)
            for e in c.get('env') or []]
    assert envs, 'no env rendered at all: the test would prove nothing'
    assert [x for x in envs if x[3].get('value') == ''] == []


def rc_live(name, users):
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.nvidia import runtime_class
    live = runtime_class(name)
    live['metadata']['annotations'] = dict(('user.gpuops.io/' + u, 'true') for u in users)
    return live


def test_a_runtime_class_the_pool_no_longer_uses_is_released():
    """A pool recorded on RuntimeClass nvidia that now names another (runtime_class_name) releases its record on the
    old one; a RuntimeClass it still uses, or one it is not recorded on, is not named."""
    live = [rc_live('nvidia', ['p1', 'p2']), rc_live('other', ['p2'])]
    out = render('exclusive', settings={'nvidia': {'runtime_class_name': 'site-rc', 'runtime_class_create': False}},
                 live_runtime_classes=live + [rc_live('site-rc', [])])
    assert [m['metadata']['name'] for m in out['stale_shared_manifests']] == ['nvidia']
    assert out['stale_shared_manifests'][0]['metadata']['labels'] == {'gpuops.io/sharing-scope': 'shared'}
    same = render('exclusive', live_runtime_classes=live)
    assert [m['metadata']['name'] for m in same['shared_manifests']] == ['nvidia'] and same['stale_shared_manifests'] == []


def test_the_record_prefix_is_the_converge_modules_default():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.converger import USER_PREFIX
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import SHARED_USER_PREFIX
    from ansible_collections.gpuops.k8s_gpu.plugins.modules.k8s_converge import argument_spec
    assert SHARED_USER_PREFIX == USER_PREFIX == argument_spec()['user_annotation_prefix']['default']


PRUNE_CASES = [
    ('exclusive', {}), ('time-slicing', {'settings': {'time_slicing': {'replicas': 3}}}), ('mps', {}),
    ('mig', {'facts': A100, 'settings': {'mig': {'devices': {'1g.10gb': 7}}}}),
    ('mig', {'facts': A100, 'settings': {'mig': {'strategy': 'mixed', 'devices': {'1g.10gb': 2}, 'manager': False}}}),
    ('gpushare', {'settings': GPUSHARE_OK}), ('gpushare', {'settings': GPUSHARE_OK, 'validation': {'enabled': True}}),
    ('volcano', {'settings': {'volcano': {'version': '1.15', 'kube_version': 'v1.33.2'}}}),
    ('hami', {'settings': {'hami': HAMI_OK}}),
    ('gpu-manager', {'settings': {'gpu_manager': {'accept_unmaintained': True,
                                                  'admission_image': 'reg.example/gpu-admission:47d56ae'}}}),
    # the lifecycle suite's dra pools: a claim template dropped from claim_templates stayed in the cluster
    ('dra', {'settings': {'dra': {'chart_path': '/c/dra.tgz', 'chart_version': '0.5.0', 'kube_version': 'v1.33.2',
                                  'kube_dra_enabled': True, 'assume_cdi_enabled': True, 'claim_namespace': 'ml',
                                  'claim_templates': [{'name': 'g'}, {'name': 's', 'shared': True}]}},
             'validation': {'enabled': True}}),
    ('dra', {'settings': {'dra': {'chart_path': '/c/dra.tgz', 'chart_version': '0.5.0', 'kube_version': 'v1.37.2',
                                  'assume_cdi_enabled': True, 'claim_namespace': 'ml',
                                  'claim_templates': [{'name': 'g'}],
                                  'extended_resources': [{'name': 'example.com/gpu'}]}}}),
]  # gpu-operator renders no pool object (the one release and its values are shared)


@pytest.mark.parametrize('strategy,kw', PRUNE_CASES)
def test_the_pools_objects_are_pruned_by_their_labels_over_every_kind_a_pool_renders(strategy, kw):
    """Found by the lifecycle suite (lab/tests/integration/test_lifecycle_suite_real.py): a MIG pool switched to
    manager: false kept NVIDIA's MIG manager DaemonSet and its RBAC running on its node. The render names what role
    gpu_sharing_stack prunes after the apply (k8s_converge prune): the pool's own objects by their labels, over every
    kind any strategy renders for a pool, so an object a setting no longer makes (of any kind) is found."""
    out = render(strategy, **kw)
    rules = out['prune']
    assert rules[0]['label_selector'] == ('app.kubernetes.io/managed-by=gpuops.k8s_gpu,gpuops.io/sharing-pool=p1,'
                                          'gpuops.io/sharing-scope=pool')
    assert out['pool_manifests'], 'no pool object rendered: the test would prove nothing'
    checks = [(rules[0], out['pool_manifests'])]
    if strategy in ('gpushare', 'volcano', 'hami', 'gpu-manager'):
        # the strategy's shared objects too (found by the suite: gpu-admission's DaemonSet stayed after its
        # registration mode changed to cluster-ip); the NVIDIA family's RuntimeClass has its own release
        assert len(rules) == 2 and rules[1]['label_selector'] == (
            'app.kubernetes.io/managed-by=gpuops.k8s_gpu,gpuops.io/sharing-scope=shared,gpuops.io/sharing-stack=%s'
            % strategy)
        assert out['shared_manifests']
        checks.append((rules[1], out['shared_manifests']))
    else:
        assert len(rules) == 1
    for rule, manifests in checks:
        wanted = set((k['api_version'], k['kind']) for k in rule['kinds'])
        for m in manifests:
            labels = m['metadata']['labels']
            assert (m['apiVersion'], m['kind']) in wanted, m['kind']
            assert all(labels.get(k) == v for k, v in (kv.split('=') for kv in rule['label_selector'].split(',')))
    for m in out['validation_manifests'] + out['adopted_manifests']:
        assert not any(all((m['metadata'].get('labels') or {}).get(k) == v for k, v in
                           (kv.split('=') for kv in rule['label_selector'].split(','))) for rule in rules), m
    assert render(strategy, check_conflicts=False, **kw)['prune'] == []  # removal prunes nothing


POLICY = 'gpuops-dra-resourceslices-dra-driver-nvidia-gpu'  # the default release namespace's
DRA_SETTINGS = {'chart_path': '/c/dra.tgz', 'chart_version': '0.5.0', 'kube_version': 'v1.37.2',
                'assume_cdi_enabled': True, 'extended_resources': [{'name': 'example.com/gpu'}]}


def _live_shared(out, pools):
    """The live form of a render's shared objects, with the records of ``pools`` (what k8s_converge left)."""
    live = {'dra_device_classes': [], 'dra_policies': []}
    for m in out['shared_manifests']:
        key = {'DeviceClass': 'dra_device_classes', 'ValidatingAdmissionPolicy': 'dra_policies'}.get(m['kind'])
        if key:
            obj = json.loads(json.dumps(m))
            obj['metadata']['annotations'] = dict(('user.gpuops.io/%s' % p, 'true') for p in pools)
            live[key].append(obj)
    return live


@pytest.mark.parametrize('change,gone', [
    ({'resourceslice_policy': False}, {('ValidatingAdmissionPolicy', POLICY), ('ValidatingAdmissionPolicyBinding',
                                                                               POLICY)}),
    ({'namespace': 'dra-moved'}, {('ValidatingAdmissionPolicy', POLICY), ('ValidatingAdmissionPolicyBinding', POLICY)}),
    ({'extended_resources': []}, {('DeviceClass', 'gpu.example.com.extended.gpuops.io')}),
])
def test_dra_shared_objects_a_release_setting_drops_are_released_by_the_pools_record(change, gone):
    """Day 2 of DRA-14: switching resourceslice_policy off, moving the release namespace (the policy's name follows
    it) or dropping an extended resource no longer makes a shared object of the stack; the pool recorded on it releases
    it after the apply (stale_shared_manifests: its record goes, the object too once no other pool is recorded - whatever
    other dra pools there are: stale_shared_keep is false, the records alone decide, as the setting is the release's).
    A pool not recorded on it (another file's, another inventory's) leaves it alone. A removal still keeps the stack's
    shared objects while another dra pool has nodes (keep_shared), as it keeps the release they protect."""
    before = render('dra', settings={'dra': DRA_SETTINGS})
    live = {'objects': dict(_live_shared(before, ['p1', 'p2']), nodes=[node_of('p2', 'dra')])}
    after = render('dra', settings={'dra': dict(DRA_SETTINGS, **change)}, live=live)
    assert after['other_pools'] == ['p2']
    assert set((m['kind'], m['metadata']['name']) for m in after['stale_shared_manifests']) == gone
    assert after['stale_shared_keep'] is False and after['keep_shared'] is True  # (the removal keeps them, below)
    assert all(m['metadata']['labels'] == {'gpuops.io/sharing-scope': 'shared'}
               for m in after['stale_shared_manifests'])
    # nothing is stale for a render that still makes them, nor for a pool not recorded on them
    assert render('dra', settings={'dra': DRA_SETTINGS}, live=live)['stale_shared_manifests'] == []
    live = {'objects': _live_shared(before, ['p2'])}
    assert render('dra', settings={'dra': dict(DRA_SETTINGS, **change)}, live=live)['stale_shared_manifests'] == []


def test_gpu_manager_admission_registration_change_prunes_the_other_modes_objects():
    gm = {'accept_unmaintained': True, 'admission_image': 'reg.example/gpu-admission:47d56ae'}
    host = render('gpu-manager', settings={'gpu_manager': dict(gm, admission_registration='host-network')})
    ip = render('gpu-manager', settings={'gpu_manager': dict(gm, admission_registration='cluster-ip', admission_cluster_ip='10.96.0.50')})

    def ids(out):
        return set((m['kind'], m['metadata']['name']) for m in out['shared_manifests'])
    gone = ids(host) - ids(ip)
    assert ('DaemonSet', 'gpu-admission') in gone
    selector = dict(kv.split('=') for kv in ip['prune'][1]['label_selector'].split(','))
    kinds = set(k['kind'] for k in ip['prune'][1]['kinds'])
    for m in host['shared_manifests']:
        if (m['kind'], m['metadata']['name']) in gone:
            assert m['kind'] in kinds and all(m['metadata']['labels'].get(k) == v for k, v in selector.items())


def node_of(pool, strategy):
    return {'metadata': {'name': 'n-' + pool, 'labels': {'gpuops.io/sharing-pool': pool,
                                                         'gpuops.io/sharing-strategy': strategy}}}


def test_a_runtime_class_only_the_leaving_pool_uses_is_not_kept_for_the_familys_recorded_pools():
    """Found by the lifecycle suite: pool ex (exclusive) with runtime_class_name nvidia-x, beside time-slicing and mig
    pools recorded on RuntimeClass nvidia; uninstalling ex kept nvidia-x for ever, because the family's other pools
    (read from the nodes) made the role keep every shared object. A pool recorded on a RuntimeClass records itself on
    each it uses, so only pools recorded on none (installed before records) still keep the shared objects."""
    live_rcs = [rc_live('nvidia', ['ts', 'mig']), rc_live('nvidia-x', ['p1'])]
    nodes = [node_of('ts', 'time-slicing'), node_of('mig', 'mig'), node_of('p1', 'exclusive')]
    out = render('exclusive', settings={'nvidia': {'runtime_class_name': 'nvidia-x'}}, check_conflicts=False,
                 live_runtime_classes=live_rcs, live_nodes=nodes)
    assert out['other_pools'] == ['mig', 'ts'] and out['keep_shared'] is False
    # a pool of the family recorded on no RuntimeClass (installed before records) keeps them
    legacy = render('exclusive', settings={'nvidia': {'runtime_class_name': 'nvidia-x'}}, check_conflicts=False,
                    live_runtime_classes=live_rcs, live_nodes=nodes + [node_of('old', 'mps')])
    assert legacy['other_pools'] == ['mig', 'old', 'ts'] and legacy['keep_shared'] is True


def test_other_strategies_keep_their_shared_objects_for_any_other_pool_of_the_strategy():
    nodes = [node_of('h2', 'hami')]
    out = render('hami', settings={'hami': HAMI_OK}, check_conflicts=False, live_nodes=nodes)
    assert out['other_pools'] == ['h2'] and out['keep_shared'] is True
    alone = render('hami', settings={'hami': HAMI_OK}, check_conflicts=False, live_nodes=[])
    assert alone['keep_shared'] is False


# settings each strategy needs to render at all (the others render with their defaults)
_REMOVAL_SETTINGS = {'gpushare': GPUSHARE_OK, 'hami': {'hami': HAMI_OK}, 'mig': {'mig': {'devices': {'1g.10gb': 7}}},
                     'gpu-operator': {'gpu_operator': {'chart_path': '/charts/gpu-operator-v26.7.0.tgz'}},
                     'dra': {'dra': {'kube_version': 'v1.37.2', 'chart_path': '/charts/dra-driver-nvidia-gpu-0.5.0.tgz',
                             'chart_version': 'v0.5.0'}}}


@pytest.mark.parametrize('strategy', r.STRATEGIES)
def test_a_pool_with_no_node_left_can_be_removed(strategy):
    """A pool whose every node moved to another pool (migrate_to_dra.yml, or the inventory emptied its group) is
    removed with an empty node list and no selector: the removal renders the same objects as with its last node;
    installing such a pool is still refused, naming both variables (found by the lifecycle suite's node switches)."""
    settings = _REMOVAL_SETTINGS.get(strategy, {})
    with_node = render(strategy, settings=settings, check_conflicts=False, live_nodes=[])
    without = render(strategy, settings=settings, check_conflicts=False, live_nodes=[], nodes=[], facts={})
    names = [(m['kind'], (m.get('metadata') or {}).get('name')) for m in with_node['manifests']]
    assert [(m['kind'], (m.get('metadata') or {}).get('name')) for m in without['manifests']] == names
    assert (without.get('helm') or {}).get('release_name') == (with_node.get('helm') or {}).get('release_name')
    assert not [w for w in without.get('warnings') or [] if 'node_selector only' in w], without['warnings']
    with pytest.raises(StackError, match='gpu_sharing_stack_nodes .* or gpu_sharing_stack_node_selector must select'):
        render(strategy, settings=settings, nodes=[], facts={})


def test_two_gpushare_pools_validation_deployments_do_not_overlap():
    """Two gpushare pools validate in one namespace: each validation Deployment selects its own pool's pods only
    (Kubernetes: controllers with overlapping selectors conflict; the lifecycle suite's randomized run found each
    Deployment counting four pods where its pool made two). Failed before: both selected app.kubernetes.io/name only."""
    sels = []
    for pool in ('p1', 'p2'):
        out = render('gpushare', pool=pool, settings=GPUSHARE_OK, validation={'enabled': True})
        [dep] = [m for m in out['validation_manifests'] if m['kind'] == 'Deployment' and m['metadata']['name'].startswith(
            'gpushare-binpack-')]
        sel = dep['spec']['selector']['matchLabels']
        tmpl = dep['spec']['template']['metadata']['labels']
        assert all(tmpl.get(k) == v for k, v in sel.items()), (sel, tmpl)
        sels.append(sel)
    assert sels[0] != sels[1]
    assert not all(sels[1].get(k) == v for k, v in sels[0].items())


# ---- a site's own strategy label (role gpu_node_labels' gpu_node_labels_strategy_label; #36)

CUSTOM_LABEL = 'example.com/gpu-strategy'


def custom_node(name, pool, strategy):
    return {'metadata': {'name': name, 'labels': {'gpuops.io/sharing-pool': pool, CUSTOM_LABEL: strategy}}}


def test_a_custom_strategy_label_is_written_on_the_pools_nodes_instead_of_the_default():
    out = render('exclusive', strategy_label=CUSTOM_LABEL)
    assert out['node_labels']['n1'][CUSTOM_LABEL] == 'exclusive'
    assert 'gpuops.io/sharing-strategy' not in out['node_labels']['n1']
    assert out['node_manifests'][0]['metadata']['labels'][CUSTOM_LABEL] == 'exclusive'


def test_live_nodes_pools_are_read_by_the_custom_strategy_label():
    # the node is this pool's, recorded under the site's key with another strategy: two strategies on one node
    with pytest.raises(StackError, match='n1 already runs strategy hami'):
        render('exclusive', strategy_label=CUSTOM_LABEL, live_nodes=[custom_node('n1', 'p1', 'hami')])
    # a node recorded under the custom key in another pool: a conflict that names its strategy
    with pytest.raises(StackError, match=r'n1 already belongs to pool other \(strategy hami\)'):
        render('exclusive', strategy_label=CUSTOM_LABEL, live_nodes=[custom_node('n1', 'other', 'hami')])
    # the family's other pools (who shares the RuntimeClass) are read by it too
    out = render('exclusive', strategy_label=CUSTOM_LABEL, check_conflicts=False,
                 live_nodes=[custom_node('n-ts', 'ts', 'time-slicing'), node_of('old', 'mps')])
    assert out['other_pools'] == ['ts']


def test_hami_webhook_scope_sees_other_nvidia_pools_by_the_custom_strategy_label():
    nodes = [custom_node('n-ts', 'ts', 'time-slicing')]
    with pytest.raises(StackError, match=r'ts \(time-slicing\)'):
        render('hami', strategy_label=CUSTOM_LABEL, live_nodes=nodes,
               settings={'hami': dict(HAMI_OK, webhook_tls_secret='tls', webhook_ca_bundle='Q0E=')})
    ts = render('time-slicing', strategy_label=CUSTOM_LABEL, live_nodes=[custom_node('n-h', 'h', 'hami')],
                settings={'time_slicing': {'replicas': 2}})
    assert any(w.startswith('pool(s) h (hami) run HAMi') for w in ts['warnings'])


@pytest.mark.parametrize('bad', ['', 'a/b/c', '-x', 'Example.com/x', 'x' * 64, 7])
def test_a_strategy_label_that_is_no_label_key_is_refused_naming_the_option_value_and_form(bad):
    with pytest.raises(StackError) as err:
        render('exclusive', strategy_label=bad)
    msg = str(err.value)
    assert msg.startswith('strategy_label: %r is not a valid Kubernetes label key ([prefix/]name' % (bad,))
    assert 'the default is gpuops.io/sharing-strategy' in msg
