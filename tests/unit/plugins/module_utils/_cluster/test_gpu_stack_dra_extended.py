# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strategy dra: extended resources backed by DRA (Kubernetes KEP-5004, gate DRAExtendedResource; issue #40). Rows
DRAX-* of docs/conformance/dra-driver-nvidia-gpu.md; lab/tests/integration/test_dra_extended_real.py applies what is
rendered here to the lab's real API servers and schedules plain nvidia.com/gpu pods onto a real node's DRA device."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import sharing_pools

GATES = {'TimeSlicingSettings': True, 'MPSSupport': True}
SHARED = {'name': 'nvidia.com/gpu.shared', 'kind': 'time-slicing', 'interval': 'Long'}
MIG = {'name': 'nvidia.com/mig-1g.10gb', 'kind': 'mig'}


def render(settings=None, nodes=('n1',), cdi=None, **params):
    s = {'chart_path': '/charts/dra-driver-nvidia-gpu', 'chart_version': 'v0.5.0', 'kube_version': 'v1.37.2'}
    s.update(settings or {})
    p = {'strategy': 'dra', 'pool': 'p1', 'nodes': list(nodes), 'settings': {'dra': s},
         'cdi_enabled': dict((n, True) for n in nodes) if cdi is None else cdi}
    p.update(params)
    return r.render(p)


def _two_dra_pools(a_settings, b_settings):
    groups = {'gpu_nodes': ['a', 'b'], 'pool_a': ['a'], 'pool_b': ['b']}
    hv = {'a': dict({'group_names': ['gpu_nodes', 'pool_a'], 'gpuops_sharing_strategy': 'dra'}, **a_settings),
          'b': dict({'group_names': ['gpu_nodes', 'pool_b'], 'gpuops_sharing_strategy': 'dra'}, **b_settings)}
    return sharing_pools(groups, hv, settings=['gpu_sharing_stack_dra'])['errors']


def classes(specs, **kw):
    kw.setdefault('gates', GATES)
    kw.setdefault('minor', 37)
    return dra.extended_resource_classes(specs, **kw)


def test_DRAX_01_gate_stage_per_minor():
    assert dra.extended_resource_stage(37) == ('GA', True)
    assert dra.extended_resource_stage(36) == ('beta', True)
    assert dra.extended_resource_stage(35) == ('alpha', False)
    assert dra.extended_resource_stage(34) == ('alpha', False)
    assert dra.extended_resource_stage(33) is None


@pytest.mark.parametrize('minor,words', [(34, 'Kubernetes 1.34 cannot back extended resources with DRA: its feature '
                                          'gate DRAExtendedResource is alpha and off by default'),
                                         (35, 'gate DRAExtendedResource is alpha and off by default'),
                                         (33, 'Kubernetes 1.33 cannot back extended resources with DRA: its feature '
                                              'gate DRAExtendedResource is absent')])
def test_DRAX_01_minor_without_the_gate_refused_naming_minor_and_gate(minor, words):
    with pytest.raises(StackError, match=words):
        classes([SHARED], minor=minor)
    # workloads alone are refused there too: the chart's own nvidia.com/gpu mapping is dropped by that API server
    with pytest.raises(StackError, match='workload_resources: Kubernetes 1.%d' % minor):
        classes([], workload=['nvidia.com/gpu'], minor=minor)
    # nothing asked: nothing checked
    assert classes([], minor=minor) == []


def test_DRAX_03_shared_class_carries_the_gpu_config_and_the_name():
    [c] = classes([SHARED], minor=36)
    assert c == {'apiVersion': 'resource.k8s.io/v1', 'kind': 'DeviceClass',
                 'metadata': {'name': 'gpu.shared.nvidia.com.extended.gpuops.io'},
                 'spec': {'extendedResourceName': 'nvidia.com/gpu.shared',
                          'selectors': [{'cel': {'expression': "device.driver == 'gpu.nvidia.com' && device.attributes["
                                                               "'gpu.nvidia.com'].type == 'gpu'"}}],
                          'config': [{'opaque': {'driver': 'gpu.nvidia.com', 'parameters': {
                              'apiVersion': 'resource.nvidia.com/v1beta1', 'kind': 'GpuConfig',
                              'sharing': {'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': 'Long'}}}}}]}}
    [m] = classes([{'name': 'nvidia.com/gpu.mps', 'kind': 'mps', 'mps_active_thread_percentage': 50,
                    'mps_pinned_memory_limit': '10Gi', 'product_name': 'NVIDIA A100-SXM4-80GB'}])
    assert m['spec']['config'][0]['opaque']['parameters']['sharing'] == {
        'strategy': 'MPS', 'mpsConfig': {'defaultActiveThreadPercentage': 50, 'defaultPinnedDeviceMemoryLimit': '10Gi'}}
    assert m['spec']['selectors'][1] == {'cel': {'expression': "device.attributes['gpu.nvidia.com'].productName == "
                                                               "'NVIDIA A100-SXM4-80GB'"}}


def test_DRAX_04_mig_profile_class_with_a_cel_selector_per_profile():
    [a, b] = classes([MIG, {'name': 'example.com/small-mig', 'kind': 'mig', 'mig_profile': '2g.20gb'}])
    assert a['metadata']['name'] == 'mig-1g.10gb.nvidia.com.extended.gpuops.io'
    assert [s['cel']['expression'] for s in a['spec']['selectors']] == [
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]
    assert 'config' not in a['spec']
    assert b['spec']['selectors'][1]['cel']['expression'].endswith("profile == '2g.20gb'")
    with pytest.raises(StackError, match=r'extended_resources\[0\]: kind mig needs mig_profile'):
        classes([{'name': 'nvidia.com/gpu.small', 'kind': 'mig'}])


def test_DRAX_05_two_classes_mapping_one_name_refused():
    with pytest.raises(StackError, match="extended_resources\\[0\\].name nvidia.com/gpu: the chart's DeviceClass "
                                         "gpu.nvidia.com already maps it .*deviceclass-gpu.yaml"):
        classes([{'name': 'nvidia.com/gpu'}])
    with pytest.raises(StackError, match=r'extended_resources\[1\].name nvidia.com/gpu.shared is mapped twice \(also '
                                         r'by gpu.shared.nvidia.com.extended.gpuops.io\)'):
        classes([SHARED, dict(SHARED, kind='mps', interval='Default')])
    with pytest.raises(StackError, match=r'extended_resources\[1\].name example.com/GPU gives the DeviceClass name '
                                         r'gpu.example.com.extended.gpuops.io, which another entry has'):
        classes([{'name': 'example.com/gpu'}, {'name': 'example.com/GPU'}])


def test_DRAX_06_workload_resource_no_class_maps_refused():
    assert classes([SHARED], workload=['nvidia.com/gpu', 'nvidia.com/gpu.shared'])
    with pytest.raises(StackError, match='workload_resources: no DeviceClass maps nvidia.com/mig-1g.10gb, which the '
                                         "pool's workloads ask for; mapped: nvidia.com/gpu, nvidia.com/gpu.shared"):
        classes([SHARED], workload=['nvidia.com/gpu', 'nvidia.com/mig-1g.10gb'])


@pytest.mark.parametrize('spec,match', [
    ({'name': 'gpu'}, 'must be a domain-prefixed extended resource name'),
    ({'name': 'kubernetes.io/gpu'}, 'must not be in the kubernetes.io domain'),
    ({'name': 'deviceclass.resource.kubernetes.io/x'}, 'must not be in the kubernetes.io domain'),
    ({'name': 'requests.example.com/gpu'}, 'must not have the requests. prefix'),
    ({'name': 'example.com/g', 'kind': 'vgpu'}, 'kind'),
    ({'name': 'example.com/g', 'interval': 'Long'}, 'interval is for kind time-slicing only'),
    ({'name': 'example.com/g', 'mps_active_thread_percentage': 5}, 'are for kind mps only'),
    ({'name': 'example.com/g', 'min_memory': 'lots'}, 'min_memory must be a Kubernetes quantity'),
    ({'name': 'example.com/g', 'mig_profile': '1g.10gb'}, 'mig_profile is for kind mig only'),
    ({'name': 'example.com/g', 'colour': 'red'}, 'colour'),
])
def test_DRAX_06_bad_input_refused_by_name(spec, match):
    with pytest.raises(StackError, match=match):
        classes([spec])


def test_DRAX_03_sharing_kinds_need_the_drivers_gates():
    with pytest.raises(StackError, match="kind time-slicing needs the driver's TimeSlicingSettings feature gate"):
        classes([SHARED], gates={})
    with pytest.raises(StackError, match="kind mps needs the driver's MPSSupport"):
        classes([{'name': 'example.com/g', 'kind': 'mps'}], gates={'TimeSlicingSettings': True})


def test_DRAX_03_pool_render_classes_are_shared_cluster_objects_and_removal_refuses_nothing():
    s = {'kube_version': 'v1.37.2', 'feature_gates': {'TimeSlicingSettings': True},
         'extended_resources': [SHARED, MIG], 'workload_resources': ['nvidia.com/gpu', 'nvidia.com/gpu.shared']}
    res = render(settings=s)
    assert res['pool_manifests'] == []
    classes = [m for m in res['shared_manifests'] if m['kind'] == 'DeviceClass']
    got = [(m['kind'], m['metadata']['name'], m['spec']['extendedResourceName']) for m in classes]
    assert got == [('DeviceClass', 'gpu.shared.nvidia.com.extended.gpuops.io', 'nvidia.com/gpu.shared'),
                   ('DeviceClass', 'mig-1g.10gb.nvidia.com.extended.gpuops.io', 'nvidia.com/mig-1g.10gb')]
    assert all('namespace' not in m['metadata'] and m['metadata']['labels']['gpuops.io/sharing-scope'] == 'shared'
               for m in res['shared_manifests'])
    # refused on 1.34 before anything is rendered, naming the variable
    with pytest.raises(StackError, match=r'gpu_sharing_stack_dra.extended_resources: Kubernetes 1.34 cannot back'):
        render(settings=dict(s, kube_version='v1.34.4'))
    # state absent on 1.34 (or with no version) renders the same classes, to delete them
    for kube in ('v1.34.4', ''):
        res = render(settings=dict(s, kube_version=kube, feature_gates={}), check_conflicts=False, cdi={})
        assert [m['metadata']['name'] for m in res['shared_manifests'] if m['kind'] == 'DeviceClass'] == [
            'gpu.shared.nvidia.com.extended.gpuops.io', 'mig-1g.10gb.nvidia.com.extended.gpuops.io'], kube
    # nothing asked, no class rendered (the default; the kubelet plugin's admission policy is DRA-14's)
    assert [m['kind'] for m in render(settings={'kube_version': 'v1.34.4'})['shared_manifests']] == [
        'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding']


def test_DRAX_05_dra_pools_must_agree_on_the_extended_resources():
    base = {'chart_path': '/c.tgz', 'chart_version': '0.5.0'}
    [err] = _two_dra_pools({'gpu_sharing_stack_dra': dict(base, extended_resources=[SHARED])},
                           {'gpu_sharing_stack_dra': base})
    assert 'gpu_sharing_stack_dra.extended_resources (pool-a: [{' in err and 'pool-b: []' in err
    # the workloads of each pool are the pool's own
    assert _two_dra_pools({'gpu_sharing_stack_dra': dict(base, workload_resources=['nvidia.com/gpu'])},
                          {'gpu_sharing_stack_dra': base}) == []


# a 1g.10gb MIG device, else a whole GPU time-sliced (issue #40's example)
MIG_ELSE_SHARED = {'name': 'small-gpu', 'first_available': [
    {'kind': 'mig', 'mig_profile': '1g.10gb'}, {'name': 'shared', 'kind': 'time-slicing', 'interval': 'Short'}]}


def test_DRAX_12_first_available_renders_prioritized_subrequests():
    [t] = dra.claim_templates([MIG_ELSE_SHARED], 'team', gates=GATES)
    devices = t['spec']['spec']['devices']
    [req] = devices['requests']
    assert req['name'] == 'small-gpu' and 'exactly' not in req
    assert [s['name'] for s in req['firstAvailable']] == ['mig-0', 'shared']
    assert req['firstAvailable'][0]['deviceClassName'] == dra.MIG_CLASS
    mig_cel = [sel['cel']['expression'] for sel in req['firstAvailable'][0]['selectors']]
    assert mig_cel == ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"], mig_cel
    assert req['firstAvailable'][1] == {'name': 'shared', 'deviceClassName': dra.GPU_CLASS}
    # the GpuConfig applies to the time-sliced alternative only: <request>/<subrequest>
    assert devices['config'] == [{'requests': ['small-gpu/shared'], 'opaque': {'driver': 'gpu.nvidia.com', 'parameters': {
        'apiVersion': 'resource.nvidia.com/v1beta1', 'kind': 'GpuConfig',
        'sharing': {'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': 'Short'}}}}}]
    # a shared claim too
    [c] = dra.claim_templates([dict(MIG_ELSE_SHARED, shared=True)], 'team', gates=GATES)
    assert c['kind'] == 'ResourceClaim' and c['spec']['devices'] == devices


MIG_ALT = {'kind': 'mig', 'mig_profile': '1g.10gb'}


@pytest.mark.parametrize('spec, api, match', [
    (dict(MIG_ELSE_SHARED, kind='gpu'), 'resource.k8s.io/v1',
     r'claim_templates\[0\]: with first_available the device keys go in each alternative; got kind beside it'),
    (MIG_ELSE_SHARED, 'resource.k8s.io/v1beta2',
     r'claim_templates\[0\]\.first_available needs resource\.k8s\.io/v1 \(Kubernetes 1\.34\+: feature gate '
     r'DRAPrioritizedList, alpha and off on 1\.33, absent before\); this cluster gets resource\.k8s\.io/v1beta2'),
    ({'name': 'x', 'first_available': []}, 'resource.k8s.io/v1',
     r'claim_templates\[0\]\.first_available must list 1 to 8 alternatives; got 0'),
    ({'name': 'x', 'first_available': [{'kind': 'gpu'}] * 9}, 'resource.k8s.io/v1', r'1 to 8 alternatives; got 9'),
    ({'name': 'x', 'first_available': [{'kind': 'gpu', 'name': 'a'}, dict(MIG_ALT, name='a')]},
     'resource.k8s.io/v1', r'claim_templates\[0\]\.first_available\[1\]\.name a is used twice'),
    ({'name': 'x', 'first_available': [{'kind': 'mig'}]}, 'resource.k8s.io/v1',
     r'claim_templates\[0\]\.first_available\[0\]: kind mig needs mig_profile'),
    ({'name': 'x', 'first_available': [{'kind': 'gpu', 'shared': True}]}, 'resource.k8s.io/v1',
     r'claim_templates\[0\]\.first_available\[0\] has unknown key\(s\) shared'),
    ({'name': 'x', 'first_available': 'gpu'}, 'resource.k8s.io/v1', r'claim_templates\[0\]\.first_available'),
])
def test_DRAX_12_first_available_bad_input_refused_by_name(spec, api, match):
    with pytest.raises(StackError, match=match):
        dra.claim_templates([spec], 'team', gates=GATES, api_version=api)


def test_DRAX_12_first_available_alternative_needs_the_drivers_gate():
    with pytest.raises(StackError, match=r'claim_templates\[0\]\.first_available\[1\]: kind time-slicing needs the '
                                         r"driver's TimeSlicingSettings feature gate"):
        dra.claim_templates([MIG_ELSE_SHARED], 'team', gates={'TimeSlicingSettings': False, 'MPSSupport': False})
