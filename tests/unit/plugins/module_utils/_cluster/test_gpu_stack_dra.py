# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strategy dra: NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.5.0; rows DRA-* of
docs/conformance/dra-driver-nvidia-gpu.md). lab/tests/oracles/test_dra_driver_chart.py renders the chart with helm and
applies the objects to the real API server."""
import os
import re
import tarfile

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import live
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import pool_host_vars, sharing_pools
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions, pins


def render(settings=None, nodes=('n1',), cdi=None, registry='', pull=None, **params):
    s = {'chart_path': '/charts/dra-driver-nvidia-gpu', 'chart_version': 'v0.5.0', 'kube_version': 'v1.34.2'}
    s.update(settings or {})
    p = {'strategy': 'dra', 'pool': 'p1', 'nodes': list(nodes), 'settings': {'dra': s}, 'registry': registry,
         'image_pull_secrets': pull or [],
         'cdi_enabled': dict((n, True) for n in nodes) if cdi is None else cdi}
    p.update(params)
    return r.render(p)


def values(**kw):
    return render(**kw)['helm']['values']


# ---- the Helm release

def test_DRA_01_values_and_helm_release():
    res = render()
    v = res['helm']['values']
    assert v['gpuResourcesEnabledOverride'] is True
    assert v['resources'] == {'gpus': {'enabled': True}, 'computeDomains': {'enabled': False}}
    assert v['nvidiaDriverRoot'] == '/'
    assert v['resourceApiVersion'] == 'resource.k8s.io/v1'
    term = v['kubeletPlugin']['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution']
    assert term['nodeSelectorTerms'] == [{'matchExpressions': [
        {'key': 'gpuops.io/sharing-strategy', 'operator': 'In', 'values': ['dra']}]}]
    assert v['kubeletPlugin']['tolerations'] == [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]
    assert 'featureGates' not in v and 'image' not in v and 'imagePullSecrets' not in v and 'logVerbosity' not in v
    assert 'nodeSelector' not in v['kubeletPlugin']
    assert res['helm'] == {'chart_ref': '/charts/dra-driver-nvidia-gpu', 'release_name': 'dra-driver-nvidia-gpu',
                           'release_namespace': 'dra-driver-nvidia-gpu', 'create_namespace': True, 'values': v,
                           'chart_version': 'v0.5.0'}
    assert res['accounting'] == 'dra' and res['resources'] == []
    # the collection's admission policy for the kubelet plugin's account (DRA-14), nothing else
    assert [(m['kind'], m['metadata']['name']) for m in res['manifests']] == [
        ('ValidatingAdmissionPolicy', 'gpuops-dra-resourceslices-dra-driver-nvidia-gpu'),
        ('ValidatingAdmissionPolicyBinding', 'gpuops-dra-resourceslices-dra-driver-nvidia-gpu')]
    assert res['node_labels'] == {'n1': {'gpuops.io/sharing-strategy': 'dra', 'gpuops.io/sharing-pool': 'p1',
                                         'nvidia.com/gpu.deploy.device-plugin': 'false'}}
    assert res['runtime_class_name'] == '' and 'ResourceClaim' in res['notes'][-1]
    assert any('gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com' in n for n in res['notes'])
    assert res['images'] == [pins.ref('dra-driver-nvidia-gpu-image')]


def test_DRA_14_resourceslice_policy_for_the_kubelet_plugins_account():
    """The chart's own policy names an account none of its workloads runs as (DRA-14): the collection's binds the
    account the chart's kubelet plugin DaemonSet runs as, <fullname>-service-account-kubeletplugin, fullname as the
    chart's _helpers.tpl makes it (the release name when it contains the chart's name, else release-chart)."""
    kubelet_plugin_account = dra.kubelet_plugin_account
    assert kubelet_plugin_account('dra-driver-nvidia-gpu', 'ns1') == (
        'system:serviceaccount:ns1:dra-driver-nvidia-gpu-service-account-kubeletplugin')
    assert kubelet_plugin_account('dra', 'ns1') == (
        'system:serviceaccount:ns1:dra-dra-driver-nvidia-gpu-service-account-kubeletplugin')
    assert kubelet_plugin_account('my-dra-driver-nvidia-gpu-x', 'ns1') == (
        'system:serviceaccount:ns1:my-dra-driver-nvidia-gpu-x-service-account-kubeletplugin')
    long_name = 'r' * 50
    assert kubelet_plugin_account(long_name, 'n') == 'system:serviceaccount:n:%s-service-account-kubeletplugin' % (
        (long_name + '-dra-driver-nvidia-gpu')[:63])
    res = render(settings={'release_name': 'dra', 'namespace': 'gpu-dra'})
    policy, binding = res['shared_manifests']
    assert res['pool_manifests'] == []
    assert policy['metadata']['name'] == binding['metadata']['name'] == binding['spec']['policyName'] == (
        'gpuops-dra-resourceslices-gpu-dra')
    assert all('namespace' not in m['metadata'] and m['metadata']['labels']['gpuops.io/sharing-scope'] == 'shared'
               for m in (policy, binding))
    [cond] = policy['spec']['matchConditions']
    assert cond['expression'] == (
        'request.userInfo.username == "system:serviceaccount:gpu-dra:dra-dra-driver-nvidia-gpu-service-account-'
        'kubeletplugin"')
    assert policy['spec']['failurePolicy'] == 'Fail' and binding['spec']['validationActions'] == ['Deny']
    assert [v['reason'] for v in policy['spec']['validations']] == ['Forbidden', 'Forbidden']  # 403, not 422
    [rule] = policy['spec']['matchConstraints']['resourceRules']
    assert rule == {'apiGroups': ['resource.k8s.io'], 'apiVersions': ['*'],
                    'operations': ['CREATE', 'UPDATE', 'DELETE'], 'resources': ['resourceslices']}
    # a release setting: every dra pool of the cluster must agree on it; off renders none
    assert 'resourceslice_policy' in dra.RELEASE_SETTINGS
    assert render(settings={'resourceslice_policy': False})['manifests'] == []


def test_DRA_01_settings_that_change_values():
    v = values(settings={'driver_root': '/run/nvidia/driver', 'compute_domains': True, 'log_verbosity': 6,
                         'release_name': 'dra', 'namespace': 'nvidia-dra'}, node_selector={'site': 'a'})
    assert v['nvidiaDriverRoot'] == '/run/nvidia/driver'
    assert v['resources']['computeDomains'] == {'enabled': True}
    assert v['logVerbosity'] == '6'
    assert v['kubeletPlugin']['nodeSelector'] == {'site': 'a'}
    res = render(settings={'release_name': 'dra', 'namespace': 'nvidia-dra'})
    assert (res['helm']['release_name'], res['helm']['release_namespace']) == ('dra', 'nvidia-dra')


def test_DRA_10_mirror_and_pull_secrets():
    res = render(registry='registry.example.com/mirror', pull=['regcred', 'other'])
    v = res['helm']['values']
    assert v['image'] == {'repository': 'registry.example.com/mirror/dra-driver-nvidia/dra-driver-nvidia-gpu'}
    assert v['imagePullSecrets'] == [{'name': 'regcred'}, {'name': 'other'}]
    assert res['images'] == ['registry.example.com/mirror/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0']
    # the chart's own tag (v + appVersion) is kept: a mirror rewrites the registry only
    assert 'tag' not in v['image']
    chart = dra.CHARTS[(0, 5)]
    assert dra.IMAGE == '%s:%s' % (chart['image_repository'], chart['tag']) == pins.ref('dra-driver-nvidia-gpu-image')
    assert dra.CURRENT_CHART == chart['tag']


@pytest.mark.parametrize('bad,match', [
    ({'chart_path': ''}, 'chart_path must be the path of the dra-driver-nvidia-gpu chart'),
    ({'namespace': 'default'}, 'refuses the default namespace'),
    ({'namespace': 'Bad_NS'}, 'gpu_sharing_stack_dra.namespace must be a DNS label'),
    ({'release_name': 'x' * 70}, 'gpu_sharing_stack_dra.release_name must be a DNS label'),
    ({'driver_root': 'run/nvidia'}, 'driver_root must be an absolute path'),
    ({'chart_version': 'v0.4.1'}, 'chart v0.4.1 is not one this collection renders values for; known releases: v0.5.x'),
    ({'chart_version': 'latest'}, 'chart version is unknown'),
    ({'bogus': 1}, 'gpu_sharing_stack_dra has unknown key'),
    ({'log_verbosity': 9}, 'log_verbosity must be <= 7'),
])
def test_DRA_01_bad_settings_are_refused_by_name(bad, match):
    with pytest.raises(StackError, match=match):
        render(settings=bad)


def test_DRA_01_chart_version_from_chart_yaml(tmp_path):
    d = tmp_path / 'dra-driver-nvidia-gpu'
    d.mkdir()
    (d / 'Chart.yaml').write_text('apiVersion: v2\nname: dra-driver-nvidia-gpu\nversion: "0.5.0"\n')
    res = render(settings={'chart_path': str(d), 'chart_version': ''})
    assert res['helm']['chart_version'] == 'v0.5.0'
    tgz = tmp_path / 'dra.tgz'
    with tarfile.open(str(tgz), 'w:gz') as tar:
        tar.add(str(d / 'Chart.yaml'), arcname='dra-driver-nvidia-gpu/Chart.yaml')
    assert render(settings={'chart_path': str(tgz), 'chart_version': ''})['helm']['chart_version'] == 'v0.5.0'
    with pytest.raises(StackError, match='chart version is unknown'):
        render(settings={'chart_path': str(tmp_path / 'missing'), 'chart_version': ''})


# ---- feature gates

def test_DRA_03_feature_gates_passed_on_and_alpha_warned_by_name():
    res = render(settings={'feature_gates': {'TimeSlicingSettings': True, 'MPSSupport': True,
                                             'IMEXDaemonsWithDNSNames': True}})
    assert res['helm']['values']['featureGates'] == {'TimeSlicingSettings': True, 'MPSSupport': True,
                                                     'IMEXDaemonsWithDNSNames': True}
    warning = [w for w in res['warnings'] if 'alpha' in w][0]
    assert 'MPSSupport, TimeSlicingSettings are alpha in dra-driver-nvidia-gpu v0.5.0' in warning
    one = render(settings={'feature_gates': {'DynamicMIG': True}})
    assert any('DynamicMIG is alpha' in w for w in one['warnings'])
    off = render(settings={'feature_gates': {'TimeSlicingSettings': False}})
    assert off['helm']['values']['featureGates'] == {'TimeSlicingSettings': False}
    assert not [w for w in off['warnings'] if 'alpha' in w]


@pytest.mark.parametrize('gates,match', [
    ({'Sharing': True}, 'Sharing is not a feature gate of dra-driver-nvidia-gpu v0.5.0; allowed: ComputeDomainCliques'),
    ({'MPSSupport': 'yes'}, 'feature_gates.MPSSupport must be true or false'),
    ({'DynamicMIG': True, 'MPSSupport': True}, 'DynamicMIG and MPSSupport are mutually exclusive'),
    ({'DynamicMIG': True, 'PassthroughSupport': True}, 'DynamicMIG and PassthroughSupport are mutually exclusive'),
    ({'DynamicMIG': True, 'NVMLDeviceHealthCheck': True}, 'DynamicMIG and NVMLDeviceHealthCheck are mutually'),
    ({'PassthroughSupport': True, 'NVMLDeviceHealthCheck': True}, 'PassthroughSupport and NVMLDeviceHealthCheck'),
    ({'DeviceMetadata': True}, r'DeviceMetadata needs PassthroughSupport .* \(PassthroughSupport is off by default\)'),
    # ComputeDomainCliques is on by default: switching off what it needs is refused
    ({'IMEXDaemonsWithDNSNames': False}, r'ComputeDomainCliques needs IMEXDaemonsWithDNSNames .*IMEXDaemonsWithDNSNames is off\)'),
])
def test_DRA_03_feature_gate_exclusions_and_requirements_refused_by_name(gates, match):
    with pytest.raises(StackError, match=match):
        render(settings={'feature_gates': gates})


def test_DRA_03_gates_with_what_they_need():
    v = values(settings={'feature_gates': {'DeviceMetadata': True, 'PassthroughSupport': True}})
    assert v['featureGates'] == {'DeviceMetadata': True, 'PassthroughSupport': True}
    v = values(settings={'feature_gates': {'IMEXDaemonsWithDNSNames': False, 'ComputeDomainCliques': False}})
    assert v['featureGates'] == {'ComputeDomainCliques': False, 'IMEXDaemonsWithDNSNames': False}


# ---- Kubernetes window

@pytest.mark.parametrize('kube,api', [('v1.34.2', 'resource.k8s.io/v1'), ('v1.37.2', 'resource.k8s.io/v1'),
                                      ('v1.36.0-eks-2d5f260', 'resource.k8s.io/v1'), ('1.35', 'resource.k8s.io/v1')])
def test_DRA_09_kube_window_ga(kube, api):
    res = render(settings={'kube_version': kube})
    assert res['helm']['values']['resourceApiVersion'] == api
    assert not [w for w in res['warnings'] if 'kube' in w]


@pytest.mark.parametrize('kube,api', [('v1.32.4', 'resource.k8s.io/v1beta1'), ('v1.33.1+rke2r1', 'resource.k8s.io/v1beta2')])
def test_DRA_09_kube_window_beta_needs_the_acknowledgement(kube, api):
    with pytest.raises(StackError, match=r'DRA is beta and off by default before Kubernetes 1.34; set '
                                         r'gpu_sharing_stack_dra.kube_dra_enabled: true .*--runtime-config=%s=true'
                                         % api.replace('.', r'\.')):
        render(settings={'kube_version': kube})
    assert values(settings={'kube_version': kube, 'kube_dra_enabled': True})['resourceApiVersion'] == api


def test_DRA_09_kube_window_refusals_and_warnings():
    with pytest.raises(StackError, match=r'needs Kubernetes 1.32 or newer .*allowed: 1.32-1.%d' % kube_versions.MAX_MINOR):
        render(settings={'kube_version': 'v1.31.9', 'kube_dra_enabled': True})
    with pytest.raises(StackError, match='kube_version must be a Kubernetes version'):
        render(settings={'kube_version': 'two'})
    with pytest.raises(StackError, match='kube_version must be a Kubernetes version'):
        render(settings={'kube_version': 'v2.0.0'})
    with pytest.raises(StackError, match='kube_version is unknown'):
        render(settings={'kube_version': ''})
    res = render(settings={'kube_version': 'v1.34.2', 'kube_dra_enabled': True})
    assert any('kube_dra_enabled has no effect' in w for w in res['warnings'])
    res = render(settings={'kube_version': 'v1.%d.0' % (kube_versions.MAX_MINOR + 1)})
    assert any('newer than the collection knows (1.%d)' % kube_versions.MAX_MINOR in w for w in res['warnings'])
    assert res['helm']['values']['resourceApiVersion'] == 'resource.k8s.io/v1'


def test_DRA_09_the_role_reads_the_version_from_the_cluster():
    q = live.queries('dra', settings={'dra': {}})
    # (and the cluster's DeviceClasses: DRAX-15)
    assert q['version'] is True and q['queries'] == [
        {'key': 'nodes', 'kind': 'Node'},
        {'key': 'dra_device_classes', 'api_version': 'resource.k8s.io/v1', 'kind': 'DeviceClass'},
        # and the collection's policies of the stack (a pool releases the one it recorded itself on and no longer uses)
        {'key': 'dra_policies', 'api_version': 'admissionregistration.k8s.io/v1', 'kind': 'ValidatingAdmissionPolicy',
         'label_selectors': ['app.kubernetes.io/managed-by=gpuops.k8s_gpu', 'gpuops.io/sharing-stack=dra']}]
    assert live.queries('dra', settings={'dra': {'kube_version': 'v1.34.2'}})['version'] is False
    # removal reads it too: the claims it deletes are in the version the cluster serves (DRA-13)
    assert live.queries('dra', state='absent', settings={'dra': {}})['version'] is True
    assert live.queries('dra', state='absent', settings={'dra': {'kube_version': 'v1.33.1'}})['version'] is False
    merged = live.merge({'strategy': 'dra', 'settings': {'dra': {'chart_path': '/c'}}},
                        {'objects': {'nodes': []}, 'version': {'gitVersion': 'v1.35.1'}})
    assert merged['settings']['dra'] == {'chart_path': '/c', 'kube_version': 'v1.35.1'}
    kept = live.merge({'strategy': 'dra', 'settings': {'dra': {'kube_version': 'v1.34.2'}}},
                      {'objects': {}, 'version': {'gitVersion': 'v1.35.1'}})
    assert kept['settings']['dra']['kube_version'] == 'v1.34.2'


def test_DRA_09_removal_needs_no_version_and_no_node_checks():
    res = render(settings={'kube_version': ''}, check_conflicts=False, cdi={})
    assert 'resourceApiVersion' not in res['helm']['values']
    assert res['helm']['release_name'] == 'dra-driver-nvidia-gpu'
    # a version outside the window (or no version at all) does not stop the removal
    for kube in ('v1.31.2', 'v1.33.1', 'nonsense'):
        res = render(settings={'kube_version': kube, 'claim_namespace': 'ml', 'claim_templates': [{'name': 'g'}]},
                     check_conflicts=False, cdi={})
        assert [m['kind'] for m in res['pool_manifests']] == ['ResourceClaimTemplate'], kube
    assert render(settings={'kube_version': 'v1.33.1'}, check_conflicts=False)['helm']['values'][
        'resourceApiVersion'] == 'resource.k8s.io/v1beta2'


# ---- CDI

def test_DRA_07_cdi_required_on_every_node():
    with pytest.raises(StackError, match=r"strategy dra needs CDI in the container runtime of every node of pool p1 "
                                         r"\(.*\): n2 has nvidia_container_runtime_cdi=False \(allowed: true\); n3 set no "
                                         r"nvidia_container_runtime_cdi \(allowed: true"):
        render(nodes=('n1', 'n2', 'n3'), cdi={'n1': True, 'n2': False})
    with pytest.raises(StackError, match='with gpu_sharing_stack_nodes empty no node can be checked'):
        render(nodes=(), node_selector={'a': 'b'}, cdi={})
    res = render(nodes=('n1',), cdi={}, settings={'assume_cdi_enabled': True})
    assert any('assume_cdi_enabled is true' in w for w in res['warnings'])


def probe(containerd_version):
    return {'node': {'container_runtimes': {'installed': ['containerd'], 'containerd_version': containerd_version}}}


def test_CTD_01_dra_refuses_a_node_whose_containerd_has_no_cdi():
    """containerd older than 1.7 has no CDI (docs/conformance/containerd.md CTD-01): the node is refused by name with
    its version, even where nvidia_container_runtime_cdi says true (1.6 ignores enable_cdi) or CDI is assumed."""
    facts = {'n1': probe('1.7.27'), 'n2': probe('1.6.20'), 'n3': probe(None)}
    for kw in ({}, {'settings': {'assume_cdi_enabled': True}, 'cdi': {}}):
        with pytest.raises(StackError, match=r"pool p1 .*containerd has CDI from 1\.7 on: n2 runs containerd 1\.6\.20 "
                                             r"\(gpu_probe_facts\); upgrade containerd on it to 1\.7 or later"):
            render(nodes=('n1', 'n2', 'n3'), facts=facts, **kw)
    facts['n2'] = probe('2.0.0')
    assert render(nodes=('n1', 'n2', 'n3'), facts=facts)['helm']


def test_CRIO_08_dra_message_for_a_runtime_with_cdi_on_by_default():
    with pytest.raises(StackError, match=r"n1 set no nvidia_container_runtime_cdi .*assume_cdi_enabled: true if the "
                                         r"runtime has CDI on \(containerd 2\.0\+ and CRI-O, from 1\.24 on without a "
                                         r"switch, have it on by default\)"):
        render(nodes=('n1',), cdi={})


def test_DRA_07_pool_host_vars_reads_the_runtime_role_setting():
    hv = {'n1': {'nvidia_container_runtime_cdi': True}, 'n2': {'nvidia_container_runtime_cdi': False}, 'n3': {}}
    out = pool_host_vars(['n1', 'n2', 'n3', 'other'], hv)
    assert out['cdi_enabled'] == {'n1': True, 'n2': False}


# ---- the device plugin is kept off the pool's nodes

def test_DRA_08_node_of_a_device_plugin_refused_even_with_mixed_accounting():
    nodes = [{'metadata': {'name': 'n1', 'labels': {}}, 'status': {'allocatable': {'nvidia.com/gpu': '8'}}}]
    for mixed in (False, True):
        with pytest.raises(StackError, match='nvidia.com/gpu=8'):
            render(live_nodes=nodes, allow_mixed_accounting=mixed)
    with pytest.raises(StackError, match=r'the DRA driver must not run on a node of the GPU device plugin .*n1 '
                                         r'advertises nvidia.com/gpu=8'):
        render(live_nodes=nodes, allow_mixed_accounting=True)
    labelled = [{'metadata': {'name': 'n1', 'labels': {'gpuops.io/sharing-strategy': 'time-slicing',
                                                       'gpuops.io/sharing-pool': 'p1'}}, 'status': {}}]
    # the stack's own conflict check refuses it first (another strategy on the node) ...
    with pytest.raises(StackError, match='n1 already runs strategy time-slicing'):
        render(live_nodes=labelled, allow_mixed_accounting=True)
    # ... and the DRA check refuses it on its own as well (node_state given directly)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx
    state = {'n1': {'labels': labelled[0]['metadata']['labels'], 'allocatable': {}}}
    with pytest.raises(StackError, match=r'n1 is in pool p1 \(strategy time-slicing, a device plugin\)'):
        dra.check_device_plugin_nodes(Ctx('p1', 'kube-system', 'dra'), ['n1'], state, [])
    # a node that is already dra, or advertises nothing above zero, is fine
    ok = [{'metadata': {'name': 'n1', 'labels': {'gpuops.io/sharing-strategy': 'dra', 'gpuops.io/sharing-pool': 'p1'}},
           'status': {'allocatable': {'nvidia.com/gpu': '0', 'cpu': '8'}}}]
    assert render(live_nodes=ok)['helm']


def test_DRA_08_pools_plan_refuses_a_node_in_a_dra_pool_and_a_device_plugin_pool():
    groups = {'gpu_nodes': ['a', 'b', 'c'], 'ts': ['a', 'b'], 'dra_pool': ['a', 'c']}
    hv = {'a': {'group_names': ['gpu_nodes', 'ts', 'dra_pool'], 'gpuops_sharing_pool': 'dra_pool',
                'gpuops_sharing_strategy': 'dra'},
          'b': {'group_names': ['gpu_nodes', 'ts'], 'gpuops_sharing_strategy': 'time-slicing'},
          'c': {'group_names': ['gpu_nodes', 'dra_pool'], 'gpuops_sharing_strategy': 'dra'}}
    assert sharing_pools(groups, hv)['errors'] == [
        'a (node a) is in dra pool dra-pool and in pool ts (strategy time-slicing): the DRA driver must not run beside '
        'the GPU device plugin on one node; take it out of one of them']
    # two hosts naming one Kubernetes node
    groups = {'gpu_nodes': ['x', 'y'], 'p_dra': ['x'], 'p_mig': ['y']}
    hv = {'x': {'group_names': ['gpu_nodes', 'p_dra'], 'gpuops_sharing_strategy': 'dra'},
          'y': {'group_names': ['gpu_nodes', 'p_mig'], 'gpuops_sharing_strategy': 'mig',
                'gpu_node_labels_node_name': 'x'}}
    assert sharing_pools(groups, hv)['errors'] == [
        'x (node x) is in dra pool p-dra and in pool p-mig (strategy mig): the DRA driver must not run beside the GPU '
        'device plugin on one node; take it out of one of them']
    # dra pools alone are fine, and so is a dra pool beside a device-plugin pool on other nodes
    hv['y']['gpu_node_labels_node_name'] = 'y'
    assert sharing_pools(groups, hv)['errors'] == []


# ---- claim templates

def test_DRA_06_claim_templates_full_gpu_with_cel_selectors():
    [t] = dra.claim_templates([{'name': 'h100', 'product_name': 'NVIDIA H100 80GB HBM3', 'architecture': 'Hopper',
                                'min_memory': '80Gi', 'uuid': "GPU-1'x", 'count': 2}], 'ml')
    assert t['apiVersion'] == 'resource.k8s.io/v1' and t['kind'] == 'ResourceClaimTemplate'
    assert t['metadata'] == {'name': 'h100', 'namespace': 'ml'}
    req = t['spec']['spec']['devices']['requests'][0]
    assert req['name'] == 'h100' and req['exactly']['deviceClassName'] == 'gpu.nvidia.com' and req['exactly']['count'] == 2
    assert [s['cel']['expression'] for s in req['exactly']['selectors']] == [
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
        "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'",
        "device.attributes['gpu.nvidia.com'].uuid == 'GPU-1\\'x'",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"]
    assert 'config' not in t['spec']['spec']['devices']
    [plain] = dra.claim_templates([{'name': 'any'}], 'ml', api_version='resource.k8s.io/v1beta2')
    assert plain['apiVersion'] == 'resource.k8s.io/v1beta2'
    assert plain['spec']['spec']['devices']['requests'] == [{'name': 'any', 'exactly': {'deviceClassName': 'gpu.nvidia.com'}}]


def test_DRA_06_claim_templates_mig_profile():
    [t] = dra.claim_templates([{'name': 'mig', 'kind': 'mig', 'mig_profile': '1g.10gb'}], 'ml')
    req = t['spec']['spec']['devices']['requests'][0]['exactly']
    assert req == {'deviceClassName': 'mig.nvidia.com', 'selectors': [
        {'cel': {'expression': "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]}


def test_DRA_05_claim_templates_time_slicing_and_mps_config():
    gates = {'TimeSlicingSettings': True, 'MPSSupport': True}
    ts, shared, mps, mps_plain = dra.claim_templates([
        {'name': 'ts', 'kind': 'time-slicing', 'interval': 'Long'},
        {'name': 'ts-shared', 'kind': 'time-slicing', 'shared': True},
        {'name': 'mps', 'kind': 'mps', 'mps_active_thread_percentage': 50, 'mps_pinned_memory_limit': '10Gi'},
        {'name': 'mps-plain', 'kind': 'mps'}], 'ml', gates=gates)
    want = {'apiVersion': 'resource.nvidia.com/v1beta1', 'kind': 'GpuConfig',
            'sharing': {'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': 'Long'}}}
    assert ts['spec']['spec']['devices']['config'] == [
        {'requests': ['ts'], 'opaque': {'driver': 'gpu.nvidia.com', 'parameters': want}}]
    assert shared['kind'] == 'ResourceClaim' and 'spec' not in shared['spec']
    assert shared['spec']['devices']['config'][0]['opaque']['parameters']['sharing'] == {
        'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': 'Default'}}
    assert mps['spec']['spec']['devices']['config'][0]['opaque']['parameters']['sharing'] == {
        'strategy': 'MPS', 'mpsConfig': {'defaultActiveThreadPercentage': 50, 'defaultPinnedDeviceMemoryLimit': '10Gi'}}
    assert mps_plain['spec']['spec']['devices']['config'][0]['opaque']['parameters']['sharing'] == {'strategy': 'MPS'}


@pytest.mark.parametrize('spec,match', [
    ({'kind': 'time-slicing'}, r"claim_templates\[0\]: kind time-slicing needs the driver's TimeSlicingSettings"),
    ({'kind': 'mps'}, "kind mps needs the driver's MPSSupport feature gate"),
    ({'kind': 'mig'}, 'kind mig needs mig_profile'),
    ({'kind': 'gpu', 'mig_profile': '1g.10gb'}, 'mig_profile is for kind mig only'),
    ({'kind': 'gpu', 'interval': 'Long'}, 'interval is for kind time-slicing only'),
    ({'kind': 'gpu', 'mps_active_thread_percentage': 10}, 'are for kind mps only'),
    ({'kind': 'mps', 'mps_pinned_memory_limit': 'lots'}, 'mps_pinned_memory_limit must be a Kubernetes quantity'),
    ({'kind': 'gpu', 'min_memory': '80 GB'}, 'min_memory must be a Kubernetes quantity'),
    ({'kind': 'vgpu'}, 'kind must be one of gpu, mig, time-slicing, mps'),
    ({'kind': 'time-slicing', 'interval': 'Forever'}, 'interval must be one of Default, Short, Medium, Long'),
    ({'count': 0}, 'count must be >= 1'),
    ({'name': None}, r'claim_templates\[0\].name must be a DNS label'),
    ({'colour': 'red'}, 'has unknown key'),
])
def test_DRA_06_claim_template_input_refused_by_name(spec, match):
    spec = dict({'name': 'x'}, **spec)
    if spec['name'] is None:
        del spec['name']
    with pytest.raises(StackError, match=match):
        dra.claim_templates([spec], 'ml', gates={})


def test_DRA_06_claim_templates_list_and_names():
    with pytest.raises(StackError, match='claim_templates must be a list'):
        dra.claim_templates({'name': 'x'}, 'ml')
    with pytest.raises(StackError, match='name x is used twice'):
        dra.claim_templates([{'name': 'x'}, {'name': 'x'}], 'ml')
    with pytest.raises(StackError, match='namespace must be a DNS label'):
        dra.claim_templates([{'name': 'x'}], 'Bad NS')
    # gates None: no gate checks (the caller does not know the cluster's gates)
    assert dra.claim_templates([{'name': 'x', 'kind': 'mps'}], 'ml')[0]['kind'] == 'ResourceClaimTemplate'


def test_DRA_06_pool_claim_templates_are_pool_manifests():
    res = render(settings={'claim_namespace': 'ml', 'feature_gates': {'MPSSupport': True},
                           'claim_templates': [{'name': 'g'}, {'name': 'm', 'kind': 'mps'}]})
    assert [(m['kind'], m['metadata']['name'], m['metadata']['namespace']) for m in res['pool_manifests']] == [
        ('ResourceClaimTemplate', 'g', 'ml'), ('ResourceClaimTemplate', 'm', 'ml')]
    assert res['pool_manifests'][0]['metadata']['labels']['gpuops.io/sharing-pool'] == 'p1'
    with pytest.raises(StackError, match='claim_templates needs gpu_sharing_stack_dra.claim_namespace'):
        render(settings={'claim_templates': [{'name': 'g'}]})
    with pytest.raises(StackError, match=r"gpu_sharing_stack_dra.claim_templates\[1\]: kind mps needs the driver's "
                                         r"MPSSupport"):
        render(settings={'claim_namespace': 'ml', 'claim_templates': [{'name': 'g'}, {'name': 'm', 'kind': 'mps'}]})
    beta = render(settings={'kube_version': 'v1.33.1', 'kube_dra_enabled': True, 'claim_namespace': 'ml',
                            'claim_templates': [{'name': 'g'}]})
    assert beta['pool_manifests'][0]['apiVersion'] == 'resource.k8s.io/v1beta2'
    gone = render(settings={'kube_version': '', 'claim_namespace': 'ml', 'claim_templates': [{'name': 'g'}]},
                  check_conflicts=False)
    assert gone['pool_manifests'][0]['apiVersion'] == 'resource.k8s.io/v1'


def test_DRA_06_validation_workload_uses_a_claim():
    res = render(validation={'enabled': True, 'namespace': 'gpu-check'}, pull=['regcred'])
    tpl, pod = res['validation_manifests']
    assert tpl['kind'] == 'ResourceClaimTemplate' and tpl['metadata']['name'] == 'gpu-validate-dra-p1'
    assert tpl['metadata']['labels']['gpuops.io/sharing-scope'] == 'validation'
    assert pod['spec']['resourceClaims'] == [{'name': 'gpu', 'resourceClaimTemplateName': 'gpu-validate-dra-p1'}]
    assert pod['spec']['containers'][0]['resources'] == {'claims': [{'name': 'gpu'}]}
    assert pod['spec']['nodeSelector'] == {'gpuops.io/sharing-pool': 'p1'}
    assert pod['spec']['imagePullSecrets'] == [{'name': 'regcred'}]
    assert 'runtimeClassName' not in pod['spec']
    rc = render(validation={'enabled': True, 'runtime_class_name': 'nvidia'})['validation_manifests'][1]
    assert rc['spec']['runtimeClassName'] == 'nvidia'


def test_DRA_13_v1beta1_claims_have_the_flat_request():
    [t, shared] = dra.claim_templates([{'name': 'h', 'count': 2, 'product_name': 'T4'}, {'name': 's', 'shared': True}],
                                      'ml', api_version='resource.k8s.io/v1beta1')
    assert t['apiVersion'] == 'resource.k8s.io/v1beta1'
    assert t['spec']['spec']['devices']['requests'] == [{
        'name': 'h', 'deviceClassName': 'gpu.nvidia.com', 'count': 2,
        'selectors': [{'cel': {'expression': "device.attributes['gpu.nvidia.com'].productName == 'T4'"}}]}]
    assert shared['spec']['devices']['requests'] == [{'name': 's', 'deviceClassName': 'gpu.nvidia.com'}]
    [ts] = dra.claim_templates([{'name': 't', 'kind': 'time-slicing'}], 'ml', api_version='resource.k8s.io/v1beta1')
    assert ts['spec']['spec']['devices']['config'][0]['requests'] == ['t']


@pytest.mark.parametrize('kube,api,flat', [('v1.32.4', 'resource.k8s.io/v1beta1', True),
                                           ('v1.33.1', 'resource.k8s.io/v1beta2', False),
                                           ('v1.34.2', 'resource.k8s.io/v1', False)])
@pytest.mark.parametrize('state', ['present', 'absent'])
def test_DRA_13_claims_and_validation_template_in_the_version_of_the_minor(kube, api, flat, state):
    res = render(settings={'kube_version': kube, 'kube_dra_enabled': kube < 'v1.34', 'claim_namespace': 'ml',
                           'claim_templates': [{'name': 'g'}]},
                 validation={'enabled': True, 'namespace': 'gpu-check'}, check_conflicts=state == 'present',
                 cdi={'n1': True} if state == 'present' else {})
    tpl = res['validation_manifests'][0]
    for obj in (res['pool_manifests'][0], tpl):
        assert obj['apiVersion'] == api, obj
        [req] = obj['spec']['spec']['devices']['requests']
        assert ('exactly' not in req and req['deviceClassName'] == 'gpu.nvidia.com') if flat else \
            req['exactly'] == {'deviceClassName': 'gpu.nvidia.com'}


def test_DRA_06_validation_pod_with_a_shared_claim_and_scheduler():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx
    ctx = Ctx('p1', 'kube-system', 'dra')
    [claim] = dra.claim_templates([{'name': 's', 'kind': 'gpu', 'shared': True}], 'ml')
    pod = dra.validation_pod(ctx, 'v', 'ml', 'img:1', claim, scheduler_name='other')
    assert pod['spec']['resourceClaims'] == [{'name': 'gpu', 'resourceClaimName': 's'}]
    assert pod['spec']['schedulerName'] == 'other' and 'imagePullSecrets' not in pod['spec']


def test_DRA_01_every_value_path_is_documented():
    v = values(registry='r.example.com', pull=['a'], node_selector={'x': 'y'},
               settings={'feature_gates': {'MPSSupport': True}, 'log_verbosity': 2})
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.operator import leaf_paths
    for p in leaf_paths(v):
        top = p if p in dra.DOCUMENTED_VALUE_KEYS else p.rsplit('.', 1)[0]
        assert any(top == k or top.startswith(k + '.') for k in dra.DOCUMENTED_VALUE_KEYS), p
    assert os.path.basename(pins.pin('dra-driver-nvidia-gpu')['conformance']) == 'dra-driver-nvidia-gpu.md'


@pytest.mark.parametrize('old,settings', [('time-slicing', {'time_slicing': {'replicas': 4}}),
                                          ('mig', {'mig': {'devices': {'1g.10gb': 7}, 'manager': False}})])
def test_DRA_08_migration_from_time_slicing_and_mig(old, settings):
    """docs/sharing_stacks.md "Moving a pool from time-slicing or mig to dra": while the old stack's labels and its
    device plugin's resources are on the node, dra is refused naming them; after state absent (labels gone, the
    kubelet reports the resource at 0) dra renders, and the old pool's removal render is what uninstall deletes."""
    a100 = {'gpus': [{'index': 0, 'name': 'NVIDIA A100-SXM4-80GB', 'memory_total_mib': 81920, 'mig_capable': True,
                      'mig_profiles': [{'name': '1g.10gb', 'count': 7}]}],
            'sharing': {'mig': {'allowed': True}, 'time-slicing': {'allowed': True}}}
    before = r.render({'strategy': old, 'pool': 'p1', 'nodes': ['n1'], 'settings': settings, 'facts': {'n1': a100}})
    labels = before['node_labels']['n1']
    assert labels['gpuops.io/sharing-strategy'] == old
    resource = 'nvidia.com/mig-1g.10gb' if old == 'mig' and before['resources'][-1].startswith('nvidia.com/mig') \
        else 'nvidia.com/gpu'
    running = [{'metadata': {'name': 'n1', 'labels': dict(labels)}, 'status': {'allocatable': {resource: '4'}}}]
    with pytest.raises(StackError, match='n1 already runs strategy %s' % old):
        render(live_nodes=running)
    # labels removed, the device plugin gone but the kubelet still reports its resource: still refused
    plugin_left = [{'metadata': {'name': 'n1', 'labels': {}}, 'status': {'allocatable': {resource: '4'}}}]
    with pytest.raises(StackError, match='%s=4' % re.escape(resource)):
        render(live_nodes=plugin_left, allow_mixed_accounting=True)
    removal = r.render({'strategy': old, 'pool': 'p1', 'nodes': ['n1'], 'settings': settings, 'check_conflicts': False})
    assert [m['kind'] for m in removal['pool_manifests']] and not removal['restarts']
    after = [{'metadata': {'name': 'n1', 'labels': {}}, 'status': {'allocatable': {resource: '0', 'cpu': '64'}}}]
    res = render(live_nodes=after)
    assert res['node_labels']['n1'] == {'gpuops.io/sharing-strategy': 'dra', 'gpuops.io/sharing-pool': 'p1',
                                        'nvidia.com/gpu.deploy.device-plugin': 'false'}
    assert res['helm']['release_name'] == 'dra-driver-nvidia-gpu'


# ---- one release for every dra pool; the GPU operator's device plugin kept off

def _two_dra_pools(a_settings, b_settings):
    groups = {'gpu_nodes': ['a', 'b'], 'pool_a': ['a'], 'pool_b': ['b']}
    hv = {'a': dict({'group_names': ['gpu_nodes', 'pool_a'], 'gpuops_sharing_strategy': 'dra'}, **a_settings),
          'b': dict({'group_names': ['gpu_nodes', 'pool_b'], 'gpuops_sharing_strategy': 'dra'}, **b_settings)}
    return sharing_pools(groups, hv, settings=['gpu_sharing_stack_dra', 'gpu_sharing_stack_registry',
                                               'gpu_sharing_stack_image_pull_secrets',
                                               'gpu_sharing_stack_node_selector'])['errors']


def test_DRA_04_dra_pools_with_different_release_settings_refused_naming_pools_and_keys():
    base = {'chart_path': '/c.tgz', 'chart_version': '0.5.0', 'claim_namespace': 'ml'}
    other = dict(base, feature_gates={'MPSSupport': True}, driver_root='/run/nvidia/driver', claim_namespace='ops')
    [err] = _two_dra_pools({'gpu_sharing_stack_dra': base},
                           {'gpu_sharing_stack_dra': other, 'gpu_sharing_stack_registry': 'mirror.example.com/m'})
    assert err.startswith("dra pools pool-a, pool-b share one Helm release of NVIDIA's DRA driver")
    assert 'gpu_sharing_stack_dra.driver_root (pool-a: "/", pool-b: "/run/nvidia/driver")' in err
    assert 'gpu_sharing_stack_dra.feature_gates (pool-a: {}, pool-b: {"MPSSupport":true})' in err
    assert 'gpu_sharing_stack_registry (pool-a: unset, pool-b: "mirror.example.com/m")' in err
    # what is the pool's own (claim templates and their namespace) may differ; a default spelt out is the default
    assert 'claim_namespace' not in err and 'chart_path' not in err and 'release_name' not in err
    assert _two_dra_pools({'gpu_sharing_stack_dra': base},
                          {'gpu_sharing_stack_dra': dict(base, claim_namespace='ops',
                                                         release_name='dra-driver-nvidia-gpu')}) == []
    # a dra pool beside pools of other strategies: nothing to compare
    assert dra.release_conflicts([{'name': 'x', 'strategy': 'dra', 'settings': {}},
                                  {'name': 'y', 'strategy': 'mig', 'settings': {'gpu_sharing_stack_registry': 'r'}}]) == []


def test_two_dra_pools_rendering_one_claim_name_into_one_namespace_are_refused():
    """Found by the lifecycle suite: two dra pools with the same claim templates each took the one ResourceClaimTemplate
    over on every run (a re-run wrote it twice), and one pool's uninstall would delete the other's. The pools' plan
    refuses it (Stack.own_conflicts); other names, or another namespace, are fine."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry as stacks_registry

    def pool(name, ns, names):
        return {'name': name, 'strategy': 'dra', 'settings': {'gpu_sharing_stack_dra': {
            'claim_namespace': ns, 'claim_templates': [{'name': n} for n in names]}}}
    [err] = stacks_registry.find('dra').own_conflicts([pool('a', 'ml', ['gpu', 'a-only']), pool('b', 'ml', ['gpu'])])
    assert err.startswith('dra pools a, b render the claim ml/gpu each'), err
    assert dra.claim_name_conflicts([pool('a', 'ml', ['gpu']), pool('b', 'ops', ['gpu'])]) == []
    assert dra.claim_name_conflicts([pool('a', 'ml', ['gpu-a']), pool('b', 'ml', ['gpu-b'])]) == []
    assert dra.claim_name_conflicts([pool('a', 'ml', ['gpu']), dict(pool('b', 'ml', ['gpu']), strategy='mig')]) == []


def test_DRA_12_dra_nodes_keep_the_gpu_operators_device_plugin_off():
    """NVIDIA/gpu-operator v26.7.0 runs its device plugin where nvidia.com/gpu.deploy.device-plugin is "true" and sets
    the label only where a node has none: every node of a dra pool carries "false"; state absent removes it."""
    res = render(nodes=('n1', 'n2'))
    for n in ('n1', 'n2'):
        assert res['node_labels'][n]['nvidia.com/gpu.deploy.device-plugin'] == 'false'
    gone = render(nodes=('n1',), state='absent')
    assert gone['node_labels']['n1']['nvidia.com/gpu.deploy.device-plugin'] == 'false'


# ---- a site's own strategy label (gpu_node_labels_strategy_label; #36)

CUSTOM_LABEL = 'example.com/gpu-strategy'


def test_a_custom_strategy_label_is_the_kubelet_plugins_affinity_and_the_nodes_label():
    """A site that records the pool's strategy under its own label key (role gpu_node_labels'
    gpu_node_labels_strategy_label) gets the DRA kubelet plugin on its nodes: the DaemonSet's affinity asks for that
    key, and the pool's nodes get that key, not the default one."""
    res = render(strategy_label=CUSTOM_LABEL)
    term = res['helm']['values']['kubeletPlugin']['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution']
    assert term['nodeSelectorTerms'] == [{'matchExpressions': [{'key': CUSTOM_LABEL, 'operator': 'In', 'values': ['dra']}]}]
    assert res['node_labels'] == {'n1': {CUSTOM_LABEL: 'dra', 'gpuops.io/sharing-pool': 'p1',
                                         'nvidia.com/gpu.deploy.device-plugin': 'false'}}


def test_a_device_plugin_node_recorded_under_a_custom_strategy_label_is_refused():
    # render's conflict check sees such a node first (test_gpu_stack_render); the DRA driver's own check reads the
    # same key
    ctx = Ctx('p1', 'kube-system', 'dra', strategy_label=CUSTOM_LABEL)
    node = {'metadata': {'name': 'n1', 'labels': {CUSTOM_LABEL: 'time-slicing', 'gpuops.io/sharing-pool': 'ts'}}}
    with pytest.raises(StackError, match=r'n1 is in pool ts \(strategy time-slicing, a device plugin\)'):
        dra.check_device_plugin_nodes(ctx, ['n1'], {}, [node])
    # the default key on that node is not the site's record: nothing to refuse by it
    other = {'metadata': {'name': 'n1', 'labels': {'gpuops.io/sharing-strategy': 'time-slicing',
                                                   'gpuops.io/sharing-pool': 'ts'}}}
    dra.check_device_plugin_nodes(ctx, ['n1'], {}, [other])
    with pytest.raises(StackError, match=r'already belongs to pool ts \(strategy time-slicing\)'):
        render(strategy_label=CUSTOM_LABEL, live_nodes=[node])
