# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Stack interface (issue #37): every strategy of the model has one Stack, made by the module the model names, and
each answer of each Stack is what the shared code decided by strategy name before (the expected values below are
written out, not computed from the Stacks)."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry as reg
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import shared
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, StackError

NVIDIA = ('exclusive', 'time-slicing', 'mps', 'mig')
OPERANDS_OFF = {'nvidia.com/gpu.deploy.operands': 'false'}


def ctx(strategy):
    return Ctx('p', 'kube-system', strategy)


def test_every_strategy_of_the_model_has_one_stack_from_its_module():
    assert list(reg.REGISTRY) == list(gs.STRATEGIES)
    for name in gs.STRATEGIES:
        s = reg.stack(name)
        assert isinstance(s, Stack) and s.name == name, name
        # made by the module the model names (gpu_strategy.stack_info(name)['stack'])
        assert type(s).__module__ == reg.MODULES[gs.stack_info(name)['stack']].__name__, name
        assert type(s).__name__ != 'Stack', name
        assert s.title == gs.strategy(name)['title'] and s.family == gs.family(name)
        assert s.node_state() == gs.node_state(name)
    assert set(reg.MODULES) == set(gs.stack_info(n)['stack'] for n in gs.STRATEGIES)
    assert reg.find('vgpu-magic') is None and reg.find(None) is None and reg.find(['hami']) is None
    with pytest.raises(KeyError):
        reg.stack('vgpu-magic')


def test_the_base_answers_are_those_of_a_strategy_that_needs_nothing_special():
    s = Stack('exclusive')
    assert (s.shared, s.shared_by_records, s.claims_devices, s.asks_nvidia_gpu, s.may_intercept_nvidia_gpu,
            s.places_on_every_gpu_node, s.pool_node_labels, s.registration_annotations) == \
        (None, False, False, False, False, False, {}, ())
    assert s.shared_family() == ('exclusive',) and s.own_conflicts([{'name': 'a', 'strategy': 'exclusive'}]) == []
    assert s.keep_off_labels('hami') == {} and s.follows_deploy_labels({}, ctx('exclusive')) is False
    assert s.pool_follows_deploy_labels({}) is False and s.node_label_defaults({}, ['n'], ctx('exclusive')) == {}
    assert s.live_queries({}, True, 'ns') == [] and s.wants_version({}, True) is False
    assert s.pod_runtime_class({}, 'v_') == '' and s.runtime_class_note('') is None
    assert s.validation(ctx('exclusive'), {}, {}, None, {}, 'img', '') is None
    assert s.migration_labels() == {} and s.serving_sign('x.io/y') == {'kind': 'resource', 'resource': 'x.io/y'}
    settings = {}
    s.merge_objects(settings, {'volcano_conf': [{'data': {'volcano-scheduler.conf': 'x'}}]}, 'ns', 'v_')
    s.merge_version(settings, 'v1.33.1')
    assert settings == {}
    with pytest.raises(NotImplementedError):
        s.intercept_error('p', ['o'], 'v_')


# strategy -> (shared_family, shared_by_records, claims_devices, asks_nvidia_gpu, may_intercept_nvidia_gpu,
#              places_on_every_gpu_node, pool_node_labels, registration_annotations)
FLAGS = {
    'exclusive': (NVIDIA, True, False, True, False, False, {}, ()),
    'time-slicing': (NVIDIA, True, False, True, False, False, {}, ()),
    'mps': (NVIDIA, True, False, True, False, False, {}, ()),
    'mig': (NVIDIA, True, False, True, False, False, {}, ()),
    'gpushare': (('gpushare',), False, False, False, False, False, {'gpushare': 'true'}, ()),
    'volcano': (('volcano',), False, False, False, False, False, {}, ()),
    'hami': (('hami',), False, False, False, True, False, {},
             ('hami.io/node-nvidia-register', 'hami.io/node.nvidia.device-register')),
    'gpu-manager': (('gpu-manager',), False, False, False, False, False, {}, ()),
    'gpu-operator': (('gpu-operator',), False, False, True, False, True, {}, ()),
    'dra': (('dra',), False, True, False, False, False, {}, ()),
}


@pytest.mark.parametrize('name', gs.STRATEGIES)
def test_placement_and_sharing_answers(name):
    s = reg.stack(name)
    assert (s.shared_family(), s.shared_by_records, s.claims_devices, s.asks_nvidia_gpu, s.may_intercept_nvidia_gpu,
            s.places_on_every_gpu_node, s.pool_node_labels, s.registration_annotations) == FLAGS[name]


def test_the_table_covers_the_model():
    assert set(FLAGS) == set(gs.STRATEGIES)


def test_shared_objects_owners_as_before():
    owners = dict((n, reg.stack(n).shared_module) for n in gs.STRATEGIES if reg.stack(n).shared is not None)
    assert sorted(owners) == ['gpu-manager', 'gpu-operator', 'gpushare', 'hami', 'volcano']
    assert shared.OWNERS == owners
    for name, module in owners.items():
        assert reg.stack(name).shared is module.SHARED


def test_own_conflicts_only_dra_checks_its_release_itself():
    pools = [{'name': 'a', 'strategy': 'dra', 'settings': {'gpu_sharing_stack_dra': {'namespace': 'x'}}},
             {'name': 'b', 'strategy': 'dra', 'settings': {'gpu_sharing_stack_dra': {'namespace': 'y'}}}]
    for name in gs.STRATEGIES:
        errors = reg.stack(name).own_conflicts(pools)
        assert bool(errors) == (name == 'dra'), name


@pytest.mark.parametrize('pool_strategy', gs.STRATEGIES)
def test_keep_off_labels_only_the_operator_keeps_its_operands_off_node_level_pools(pool_strategy):
    node_level = pool_strategy not in ('gpu-operator', 'dra')
    for name in gs.STRATEGIES:
        want = OPERANDS_OFF if name == 'gpu-operator' and node_level else {}
        assert reg.stack(name).keep_off_labels(pool_strategy) == want, (name, pool_strategy)


def test_deploy_labels_mig_with_the_manager_only():
    for name in gs.STRATEGIES:
        s = reg.stack(name)
        assert s.follows_deploy_labels({}, ctx(name)) is (name == 'mig'), name
        assert s.follows_deploy_labels({'mig': {'manager': False}}, ctx(name)) is False, name
        assert s.pool_follows_deploy_labels({}) is (name == 'mig'), name
        assert s.pool_follows_deploy_labels({'gpu_sharing_stack_mig': {'manager': False}}) is False, name
        assert s.pool_follows_deploy_labels({'gpu_sharing_stack_mig': 'not a dict'}) is (name == 'mig'), name
        want = {'n1': {'nvidia.com/gpu.deploy.device-plugin': 'true'}} if name == 'mig' else {}
        assert s.node_label_defaults({}, ['n1'], ctx(name)) == want, name


def test_hami_intercepts_with_its_webhook_only():
    hami = reg.stack('hami')
    assert hami.intercepts_nvidia_gpu({'hami': {'webhook_tls_secret': 'tls'}}) is True
    assert hami.intercepts_nvidia_gpu({'hami': {}}) is False and hami.intercepts_nvidia_gpu({}) is False
    assert 'Refusing v_hami.webhook_tls_secret for pool p' in hami.intercept_error('p', ['ts (time-slicing)'], 'v_')
    assert hami.intercept_warning(['h (hami)'], 'v_').startswith('pool(s) h (hami) run HAMi')
    for name in gs.STRATEGIES:
        if name != 'hami':
            assert reg.stack(name).intercepts_nvidia_gpu({'hami': {'webhook_tls_secret': 'tls'}}) is False


# strategy -> (queries when present with empty settings, version present, version absent)
LIVE = {
    'volcano': ([{'key': 'volcano_conf', 'kind': 'ConfigMap', 'name': 'volcano-scheduler-configmap',
                  'namespace': 'volcano-system'}], True, False),
    'gpushare': ([{'key': 'kube_proxy', 'kind': 'ConfigMap', 'name': 'kube-proxy', 'namespace': 'kube-system'}],
                 False, False),
    'hami': ([], True, True),
    # the cluster's DeviceClasses, for a removal too: a class of the site's mapping a name of ours (DRAX-15)
    'dra': ([{'key': 'dra_device_classes', 'api_version': 'resource.k8s.io/v1', 'kind': 'DeviceClass'},
             {'key': 'dra_policies', 'api_version': 'admissionregistration.k8s.io/v1', 'kind': 'ValidatingAdmissionPolicy',
              'label_selectors': ['app.kubernetes.io/managed-by=gpuops.k8s_gpu', 'gpuops.io/sharing-stack=dra']}], True, True),
}
# strategy -> queries when absent (none unless listed)
LIVE_ABSENT = {'dra': LIVE['dra'][0]}


@pytest.mark.parametrize('name', gs.STRATEGIES)
def test_live_reads(name):
    s = reg.stack(name)
    queries, version, version_absent = LIVE.get(name, ([], False, False))
    assert s.live_queries({}, True, 'ns') == queries
    assert s.live_queries({}, False, 'ns') == LIVE_ABSENT.get(name, [])
    assert s.wants_version({}, True) is version and s.wants_version({}, False) is version_absent
    key = s.version_key
    assert (key is not None) == version, name
    if key:
        assert s.wants_version({key: {'kube_version': 'v1.33.1'}}, True) is False
        settings = {key: {'x': 1}}
        s.merge_version(settings, 'v1.34.0')
        assert settings == {key: {'x': 1, 'kube_version': 'v1.34.0'}}
        s.merge_version(settings, 'v1.35.0')
        assert settings[key]['kube_version'] == 'v1.34.0'
    else:
        settings = {}
        s.merge_version(settings, 'v1.34.0')
        assert settings == {}


def test_merge_objects_each_stack_its_own_key():
    objects = {'volcano_conf': [{'data': {'volcano-scheduler.conf': 'actions: x'}}],
               'kube_proxy': [{'data': {'config.conf': 'mode: ipvs'}}], 'hami_webhook_secret': [{'kind': 'Secret'}]}
    for name in gs.STRATEGIES:
        settings = {}
        reg.stack(name).merge_objects(settings, objects, 'ns', 'v_')
        want = {'volcano': {'volcano': {'existing_conf': 'actions: x'}},
                'gpushare': {'gpushare': {'kube_proxy_config': 'mode: ipvs'}}}.get(name, {})
        assert settings == want, name
    with pytest.raises(StackError, match='v_hami.webhook_tls_secret names Secret gpu/tls, which does not exist'):
        reg.stack('hami').merge_objects({'hami': {'webhook_tls_secret': 'tls'}}, {'hami_webhook_secret': []}, 'gpu', 'v_')


@pytest.mark.parametrize('name', gs.STRATEGIES)
def test_gpu_pods(name):
    s = reg.stack(name)
    want = 'nvidia' if name in NVIDIA + ('gpu-operator',) else ''
    assert s.pod_runtime_class({}, 'v_') == want
    note = s.runtime_class_note('')
    assert (note is not None) == (name == 'dra') and s.runtime_class_note('nvidia') is None
    val = {'namespace': 'default', 'replicas': 2, 'image': 'img'}
    out = s.validation(Ctx('p', 'kube-system', name), {}, {'aliyun.com/gpu-mem': 4}, None, val, 'img', '')
    if name == 'dra':
        assert [o['kind'] for o in out] == ['ResourceClaimTemplate', 'Pod']
        assert out[0]['apiVersion'] == 'resource.k8s.io/v1'
    elif name == 'gpushare':
        assert [o['kind'] for o in out] == ['Deployment'] and out[0]['spec']['replicas'] == 2
    else:
        assert out is None


@pytest.mark.parametrize('name', gs.STRATEGIES)
def test_migration_answers(name):
    # the labels each stack's render gives a pool's node that no setting changes (strategy_migration.pool_labels adds
    # the GPU operator's confinement; test_strategy_migration compares them with the renders)
    s = reg.stack(name)
    cfg = 'nvidia.com/device-plugin.config'
    assert s.migration_labels() == MIGRATION_LABELS.get(name, {})
    assert set(s.migration_labels()) <= set(s.migration_label_keys())
    assert set(s.migration_settings_labels()) <= set(s.migration_label_keys())
    # time-slicing and mps: the replicas per GPU of the pool's settings (gpuops.io/sharing-replicas, issue #36)
    assert bool(s.migration_settings_labels()) == (name in ('mig', 'gpu-operator', 'time-slicing', 'mps'))
    if name in ('time-slicing', 'mps'):
        assert s.migration_settings_labels() == ['gpuops.io/sharing-replicas']
    assert (cfg in s.migration_label_keys()) == (name in ('exclusive', 'time-slicing', 'mps', 'mig', 'gpu-operator'))
    if name == 'dra':
        assert s.serving_sign('nvidia.com/gpu') == {'kind': 'slice', 'driver': 'gpu.nvidia.com'}
    else:
        assert s.serving_sign('nvidia.com/gpu') == {'kind': 'resource', 'resource': 'nvidia.com/gpu'}


MIGRATION_LABELS = {
    'dra': {'nvidia.com/gpu.deploy.device-plugin': 'false'},
    'exclusive': {'nvidia.com/device-plugin.config': 'exclusive'},
    'time-slicing': {'nvidia.com/device-plugin.config': 'time-slicing'},
    'mps': {'nvidia.com/device-plugin.config': 'mps', 'nvidia.com/mps.capable': 'true'},
    'hami': {'gpu': 'on'}, 'gpu-manager': {'nvidia-device-enable': 'enable'}, 'gpushare': {'gpushare': 'true'},
}


HAMI_REG = {'hami.io/node-nvidia-register': 'GPU-1,10,32768,100,NVIDIA-A100,0,true:'}
# (labels, annotations, resources) -> the strategies the node shows, as the report read them before
SHOWN = [
    ({}, {}, {'nvidia.com/gpu': 1}, ['exclusive']),
    ({}, {}, {'nvidia.com/gpu': 0}, []),
    ({'nvidia.com/gpu.replicas': '4'}, {}, {'nvidia.com/gpu': 4}, ['time-slicing']),
    ({'nvidia.com/gpu.replicas': 'x'}, {}, {'nvidia.com/gpu': 4}, ['exclusive']),
    ({'nvidia.com/gpu.sharing-strategy': 'mps'}, {}, {'nvidia.com/gpu': 4}, ['mps']),
    ({'nvidia.com/gpu.sharing-strategy': 'time-slicing'}, {}, {'nvidia.com/gpu': 4}, ['time-slicing']),
    ({'nvidia.com/gpu.sharing-strategy': 'mps'}, {}, {'nvidia.com/gpu.shared': 4}, ['mps']),
    ({}, {}, {'nvidia.com/gpu.shared': 4}, ['time-slicing']),
    ({'nvidia.com/mig.strategy': 'single'}, {}, {'nvidia.com/gpu': 7}, ['mig']),
    ({}, {}, {'nvidia.com/mig-1g.10gb': 7, 'nvidia.com/gpu': 0}, ['mig']),
    ({}, HAMI_REG, {'nvidia.com/gpu': 10}, ['hami']),
    ({}, HAMI_REG, {}, ['hami']),
    ({}, {}, {'nvidia.com/gpumem': 1000}, ['hami']),
    ({}, {}, {'aliyun.com/gpu-mem': 32, 'aliyun.com/gpu-count': 1}, ['gpushare']),
    ({}, {}, {'volcano.sh/vgpu-number': 10}, ['volcano']),
    ({}, {}, {'tencent.com/vcuda-core': 100}, ['gpu-manager']),
    ({}, {}, {'aliyun.com/gpu-mem': 32, 'nvidia.com/gpu': 1}, ['exclusive', 'gpushare']),
]


@pytest.mark.parametrize('labels,annotations,resources,want', SHOWN)
def test_node_shows(labels, annotations, resources, want):
    registered = [n for n in gs.STRATEGIES if any(a in annotations for a in reg.stack(n).registration_annotations)]
    assert sorted(n for n in gs.STRATEGIES if reg.stack(n).node_shows(labels, annotations, resources, registered)) \
        == want


def test_accounting_conflicts_gpushare_and_volcano_have_their_own_words():
    assert reg.stack('gpushare').accounting_conflicts(['exclusive', 'gpushare'], ['exclusive']) == [
        'gpu-mem accounting (gpushare) and whole-GPU accounting (exclusive) on the same node: both schedulers hand '
        'out the same GPUs']
    assert reg.stack('gpushare').accounting_conflicts(['gpushare', 'hami'], []) == [
        'HAMi vGPU accounting and gpushare gpu-mem accounting on the same node']
    assert reg.stack('volcano').accounting_conflicts(['mig', 'volcano'], ['mig']) == [
        'Volcano GPU accounting and mig on the same node']
    for name in gs.STRATEGIES:
        if name not in ('gpushare', 'volcano'):
            assert reg.stack(name).accounting_conflicts(list(gs.STRATEGIES), ['exclusive']) == [], name


def test_own_metrics_hami_and_volcano_only():
    """metrics/stack_metrics asks each Stack what its own components serve (STKM-01, STKM-04, STKM-05, STKM-06)."""
    assert Stack('exclusive').own_metrics({}) is None
    for name in gs.STRATEGIES:
        if name not in ('hami', 'volcano'):
            assert reg.stack(name).own_metrics({}) is None, name
    assert reg.stack('hami').own_metrics({}) == {
        'pool': {'app': 'hami-device-plugin', 'port': 9394, 'port_name': 'metrics'},
        'scheduler': {'selects': 'pods', 'labels': {'app.kubernetes.io/name': 'hami-scheduler'}, 'port': 9395,
                      'port_name': 'metrics', 'namespace': None, 'needs': '', 'service': ''},
        'allocations': True, 'usage': True}
    volcano = {'pool': None,
               'scheduler': {'selects': 'service', 'labels': {'app': 'volcano-scheduler'}, 'port': 8080,
                             'port_name': 'metrics', 'namespace': 'volcano-system', 'needs': '--enable-metrics',
                             'service': 'volcano-scheduler-service'},
               'allocations': True, 'usage': False}
    assert reg.stack('volcano').own_metrics({}) == volcano
    volcano['scheduler']['namespace'], volcano['allocations'] = 'vc', False
    assert reg.stack('volcano').own_metrics({'volcano': {'namespace': 'vc', 'mode': 'gpu-share'}}) == volcano
