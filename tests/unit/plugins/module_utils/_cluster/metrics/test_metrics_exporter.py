# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metrics/exporter and metrics/dcgm: one pool's dcgm-exporter objects (the rows DCGMX-* of
docs/conformance/dcgm-exporter.md), and module gpu_metrics_manifests."""
import csv
import io
import os

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dcgm, exporter
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_metrics_manifests

MONITORING = ['v1', 'apps/v1', 'monitoring.coreos.com/v1']


def _render(strategy='exclusive', **kw):
    params = dict(strategy=strategy, pool='p1')
    params.update(kw)
    return exporter.render(params)


def _kind(out, kind):
    found = [o for o in out['objects'] if o['kind'] == kind]
    assert len(found) <= 1, kind
    return found[0] if found else None


def _container(out):
    return _kind(out, 'DaemonSet')['spec']['template']['spec']['containers'][0]


def _env(out):
    return dict((e['name'], e.get('value', e.get('valueFrom'))) for e in _container(out)['env'])


def test_DCGMX_01_image_is_the_pin_through_the_mirror():
    assert pins.ref('dcgm-exporter') == 'nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless'
    assert exporter.IMAGE == pins.ref('dcgm-exporter')
    out = _render()
    assert out['image'] == _container(out)['image'] == pins.ref('dcgm-exporter')
    out = _render(registry='registry.example.com/mirror/')
    assert _container(out)['image'] == 'registry.example.com/mirror/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless'
    assert out['image'] == _container(out)['image']


def test_DCGMX_02_collectors_file_is_mounted_and_named():
    out = _render()
    cm = _kind(out, 'ConfigMap')
    assert cm['data'] == {dcgm.COLLECTORS_KEY: dcgm.collectors_csv()}
    env = _env(out)
    assert env['DCGM_EXPORTER_COLLECTORS'] == '/etc/gpuops/dcgm-exporter/counters.csv'
    spec = _kind(out, 'DaemonSet')['spec']['template']['spec']
    vol = [v for v in spec['volumes'] if v.get('configMap')]
    assert vol == [{'name': 'collectors', 'configMap': {'name': cm['metadata']['name']}}]
    assert {'name': 'collectors', 'mountPath': '/etc/gpuops/dcgm-exporter', 'readOnly': True} in \
        _container(out)['volumeMounts']
    # the exporter reads the file once: a changed file changes the pod template
    tmpl = _kind(out, 'DaemonSet')['spec']['template']['metadata']['annotations']
    assert len(tmpl['checksum/config']) == 64
    assert _kind(_render(), 'DaemonSet') == _kind(out, 'DaemonSet')


def test_DCGMX_03_port_9400_named_metrics():
    out = _render()
    assert _env(out)['DCGM_EXPORTER_LISTEN'] == ':9400'
    assert _container(out)['ports'] == [{'name': 'metrics', 'containerPort': 9400}]
    svc = _kind(out, 'Service')
    assert svc['spec']['ports'] == [{'name': 'metrics', 'port': 9400, 'targetPort': 'metrics', 'protocol': 'TCP'}]
    assert svc['spec']['selector'] == _kind(out, 'DaemonSet')['spec']['selector']['matchLabels']


def test_DCGMX_04_pod_attribution_reads_the_pod_resources_socket():
    for strategy in exporter.STRATEGIES:
        out = _render(strategy)
        assert _env(out)['DCGM_EXPORTER_KUBERNETES'] == 'true'
        spec = _kind(out, 'DaemonSet')['spec']['template']['spec']
        assert {'name': 'pod-gpu-resources', 'hostPath': {'path': '/var/lib/kubelet/pod-resources',
                                                          'type': 'Directory'}} in spec['volumes']
        assert {'name': 'pod-gpu-resources', 'mountPath': '/var/lib/kubelet/pod-resources', 'readOnly': True} in \
            _container(out)['volumeMounts']
        assert out['attribution']['pods'] is True


def test_DCGMX_05_every_counter_in_the_csv_with_a_known_type():
    text = dcgm.collectors_csv()
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith('#')]
    assert all(len(r) == 3 for r in rows), rows
    assert tuple(r[0].strip() for r in rows) == dcgm.COUNTERS
    assert all(r[1].strip() in dcgm.PROM_TYPES for r in rows)
    assert set(dcgm.COUNTER_INFO) == set(dcgm.COUNTERS)
    assert len(dcgm.COUNTERS) == len(set(dcgm.COUNTERS)) == 14
    # what the alerts read, by type: ECC and remapped rows only grow
    assert dict((r[0], r[1].strip()) for r in rows)['DCGM_FI_DEV_ECC_DBE_VOL_TOTAL'] == 'counter'
    assert dict((r[0], r[1].strip()) for r in rows)['DCGM_FI_DEV_XID_ERRORS'] == 'gauge'


def test_DCGMX_06_gpu_id_type_uid():
    for strategy in exporter.STRATEGIES:
        assert _env(_render(strategy))['DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE'] == 'uid'


@pytest.mark.parametrize('strategy,virtual', [('exclusive', False), ('time-slicing', True), ('mps', True),
                                              ('mig', False), ('dra', False)])
def test_DCGMX_07_shared_strategies_get_virtual_gpus_and_host_pid(strategy, virtual):
    out = _render(strategy)
    env = _env(out)
    spec = _kind(out, 'DaemonSet')['spec']['template']['spec']
    assert (env.get('KUBERNETES_VIRTUAL_GPUS') == 'true') is virtual
    assert spec.get('hostPID', False) is virtual
    assert out['attribution']['virtual_gpus'] is virtual
    # from the model: the strategies whose pods share a GPU advertise nvidia.com/gpu.shared
    names = [r[0] for r in gpu_strategy.stack_info(strategy)['resources']]
    assert ('nvidia.com/gpu.shared' in names) is virtual


def test_DCGMX_08_node_name_from_the_downward_api():
    assert _env(_render())['NODE_NAME'] == {'fieldRef': {'apiVersion': 'v1', 'fieldPath': 'spec.nodeName'}}


@pytest.mark.parametrize('strategy,names', [
    ('exclusive', None), ('time-slicing', 'nvidia.com/gpu.shared'), ('mps', 'nvidia.com/gpu.shared'), ('mig', None),
    ('dra', None)])
def test_DCGMX_09_shared_resource_is_named(strategy, names):
    assert _env(_render(strategy)).get('NVIDIA_RESOURCE_NAMES') == names
    out = _render(strategy, resource_names=['example.com/gpu'])
    assert _env(out)['NVIDIA_RESOURCE_NAMES'] == ','.join(([names] if names else []) + ['example.com/gpu'])
    assert out['attribution']['resource_names'][0] == 'nvidia.com/gpu'


def test_DCGMX_10_labels_and_mig_needs_no_option():
    assert dcgm.LABELS == ('gpu', 'UUID', 'device', 'modelName', 'Hostname', 'pod', 'namespace', 'container',
                           'GPU_I_PROFILE', 'GPU_I_ID')
    assert set(dcgm.LABELS) <= set(dcgm.GPU_LABELS + dcgm.POD_LABELS + dcgm.MIG_LABELS)
    exclusive, mig = _env(_render('exclusive')), _env(_render('mig'))
    assert exclusive == mig
    assert _render('mig')['attribution']['mig_instances'] is True


def test_DCGMX_11_dra_reads_resource_slices_and_pods_only():
    out = _render('dra', namespace='gpu-metrics')
    assert _env(out)['KUBERNETES_ENABLE_DRA'] == 'true'
    role = _kind(out, 'ClusterRole')
    assert role['rules'] == [
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list', 'watch']},
        {'apiGroups': ['resource.k8s.io'], 'resources': ['resourceslices'], 'verbs': ['list', 'watch']}]
    binding = _kind(out, 'ClusterRoleBinding')
    assert binding['roleRef'] == {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole',
                                  'name': role['metadata']['name']}
    assert binding['subjects'] == [{'kind': 'ServiceAccount', 'name': 'dcgm-exporter-p1', 'namespace': 'gpu-metrics'}]
    assert _kind(out, 'ServiceAccount')['automountServiceAccountToken'] is True
    assert _kind(out, 'DaemonSet')['spec']['template']['spec']['automountServiceAccountToken'] is True
    assert any('v1beta1' in n for n in out['notes'])
    assert [o['kind'] for o in out['objects']] == [
        'ServiceAccount', 'ConfigMap', 'ClusterRole', 'ClusterRoleBinding', 'DaemonSet', 'Service']


@pytest.mark.parametrize('strategy', ['exclusive', 'time-slicing', 'mps', 'mig'])
def test_DCGMX_12_no_token_and_no_rbac_without_dra(strategy):
    out = _render(strategy)
    assert [o['kind'] for o in out['objects']] == ['ServiceAccount', 'ConfigMap', 'DaemonSet', 'Service']
    assert _kind(out, 'ServiceAccount')['automountServiceAccountToken'] is False
    spec = _kind(out, 'DaemonSet')['spec']['template']['spec']
    assert spec['automountServiceAccountToken'] is False and spec['serviceAccountName'] == 'dcgm-exporter-p1'
    assert 'KUBERNETES_ENABLE_DRA' not in _env(out)


def test_DCGMX_13_security_context_probes_priority():
    out = _render()
    c = _container(out)
    assert c['securityContext'] == {'runAsNonRoot': False, 'runAsUser': 0, 'allowPrivilegeEscalation': False,
                                    'capabilities': {'add': ['SYS_ADMIN'], 'drop': ['ALL']}}
    assert c['livenessProbe']['httpGet'] == {'path': '/health', 'port': 9400, 'scheme': 'HTTP'}
    assert c['readinessProbe']['httpGet'] == {'path': '/health', 'port': 9400, 'scheme': 'HTTP'}
    spec = _kind(out, 'DaemonSet')['spec']['template']['spec']
    assert spec['priorityClassName'] == 'system-node-critical'
    assert 'privileged' not in c['securityContext']


def test_DCGMX_14_service_monitor_only_where_the_api_is_found():
    for api in (True, MONITORING):
        out = _render(monitoring_api=api)
        mon = _kind(out, 'ServiceMonitor')
        assert out['monitoring'] is True and mon['apiVersion'] == 'monitoring.coreos.com/v1'
        assert mon['spec']['selector'] == {'matchLabels': _kind(out, 'Service')['spec']['selector']}
        assert mon['spec']['endpoints'] == [{'port': 'metrics', 'path': '/metrics', 'honorLabels': True, 'interval': '30s', 'relabelings': [
            {'action': 'replace', 'targetLabel': 'gpuops_io_sharing_pool',
             'sourceLabels': ['__meta_kubernetes_pod_label_gpuops_io_sharing_pool']}]}]
        assert mon['spec']['namespaceSelector'] == {'matchNames': ['kube-system']}
        assert 'annotations' not in _kind(out, 'Service')['metadata']
        assert {'api_version': 'monitoring.coreos.com/v1', 'kind': 'ServiceMonitor'} in out['prune'][0]['kinds']
    for api in (False, ['v1', 'apps/v1'], []):
        out = _render(monitoring_api=api)
        assert out['monitoring'] is False and _kind(out, 'ServiceMonitor') is None
        assert _kind(out, 'Service')['metadata']['annotations'] == {
            'prometheus.io/scrape': 'true', 'prometheus.io/port': '9400', 'prometheus.io/path': '/metrics'}
        assert all(k['kind'] != 'ServiceMonitor' for k in out['prune'][0]['kinds'])
    with pytest.raises(StackError, match='monitoring_api must be a boolean or the list'):
        _render(monitoring_api='yes')


def test_DCGMX_14_the_prune_takes_the_service_monitor_wherever_the_api_is_served():
    """A switch of form (annotations forced, or the CRDs removed) must not leave the ServiceMonitor made before: the
    prune names its kind wherever the API is served (monitoring_served, detected), whatever form is rendered; for
    state absent the render names the pool's ServiceMonitor as stale."""
    sm = {'api_version': 'monitoring.coreos.com/v1', 'kind': 'ServiceMonitor'}
    for served in (True, MONITORING):
        out = _render(monitoring_api=False, monitoring_served=served, namespace='mon')
        assert out['monitoring'] is False and _kind(out, 'ServiceMonitor') is None
        assert sm in out['prune'][0]['kinds']
        assert out['stale'] == [{'apiVersion': 'monitoring.coreos.com/v1', 'kind': 'ServiceMonitor',
                                 'metadata': {'name': 'dcgm-exporter-p1', 'namespace': 'mon'}}]
    for served in (False, ['v1'], None):
        out = _render(monitoring_api=False, monitoring_served=served)
        assert sm not in out['prune'][0]['kinds'] and out['stale'] == []
    # the ServiceMonitor form: its own object is rendered, nothing stale, the kind pruned (another pool's stays:
    # the prune's selector names this pool)
    out = _render(monitoring_api=True, monitoring_served=False)
    assert sm in out['prune'][0]['kinds'] and out['stale'] == []
    assert 'gpuops.io/sharing-pool=p1' in out['prune'][0]['label_selector'].split(',')
    assert exporter.prune_rules('p1', True)[0]['kinds'][:len(exporter.KINDS)] == exporter.prune_rules('p1')[0]['kinds']
    with pytest.raises(StackError, match="monitoring_served must be a boolean or the list.*got 'yes'"):
        _render(monitoring_served='yes')


def test_DCGMX_15_clock_events_field_name():
    assert 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS' in dcgm.COUNTERS
    assert not any('THROTTLE' in c for c in dcgm.COUNTERS)


@pytest.mark.parametrize('params,message', [
    ({'strategy': 'gpushare'}, "strategy must be one of exclusive, time-slicing, mps, mig, volcano, hami, dra; got "
                               "'gpushare' (gpushare: "),
    ({'strategy': 'gpu-operator'}, "got 'gpu-operator' (gpu-operator: "),
    ({'strategy': 'nope'}, "strategy must be one of exclusive, time-slicing, mps, mig, volcano, hami, dra; got 'nope'"),
    ({'pool': 'Bad_Pool'}, "pool must be a DNS label"),
    ({'pool': 'p' * 50}, 'pool must be at most 49 characters'),
    ({'namespace': 'NS'}, 'namespace must be a DNS label'),
    ({'strategy_label': 'bad label'}, "strategy_label: 'bad label' is not a valid Kubernetes label key"),
    ({'extra_labels': {'team': 1}}, "extra_labels: 'team': 1 is not a Kubernetes label"),
    ({'extra_labels': {'gpuops.io/sharing-pool': 'x'}}, 'is set by the collection'),
    ({'node_selector': {'bad key!': 'x'}}, 'node_selector must map Kubernetes label keys'),
    ({'resource_names': ['gpu']}, 'resource_names must be a list of extended resource names'),
    ({'registry': 'bad registry!'}, 'registry must be a container image reference prefix'),
    ({'scrape_interval': '30 seconds'}, 'scrape_interval must be a Prometheus duration'),
])
def test_DCGMX_16_bad_input_refused(params, message):
    args = dict(strategy='exclusive', pool='p1')
    args.update(params)
    with pytest.raises(StackError) as e:
        exporter.render(args)
    assert message in str(e.value)


@pytest.mark.parametrize('strategy', exporter.STRATEGIES)
def test_DCGMX_17_the_stack_prune_never_takes_the_exporter(strategy):
    """The sharing stack prunes the pool's objects by their labels (stacks/render.prune_rules); the exporter's objects
    carry another scope, and the exporter's own prune takes them and nothing of the stack's."""
    def matches(selector, obj):
        labels = obj['metadata'].get('labels') or {}
        return all(labels.get(k) == v for k, v in (kv.split('=', 1) for kv in selector.split(',')))

    out = _render(strategy, monitoring_api=True)
    for rule in stacks_render.prune_rules(strategy, 'p1'):
        assert not any(matches(rule['label_selector'], o) for o in out['objects'])
    own = out['prune'][0]['label_selector']
    assert all(matches(own, o) for o in out['objects'])
    if strategy not in exporter.STRATEGIES[:2]:
        return  # the others need hardware facts and charts; their objects carry the same pool labels
    stack = stacks_render.render(dict(strategy=strategy, pool='p1', nodes=['n1'], settings={}, require_facts=False,
                                      facts={'n1': {'gpus': [{'index': 0, 'name': 'NVIDIA H100', 'mig_capable': True,
                                                              'compute_capability': '9.0',
                                                              'memory_total_mib': 81920}], 'sharing': {}}}))
    assert not any(matches(own, o) for o in stack['manifests'])


def test_DCGMX_17_node_selection_is_the_pools():
    out = _render('mps', strategy_label='example.com/strategy', node_selector={'zone': 'a'})
    spec = _kind(out, 'DaemonSet')['spec']['template']['spec']
    assert spec['nodeSelector'] == {'gpuops.io/sharing-pool': 'p1', 'example.com/strategy': 'mps', 'zone': 'a'}
    assert {'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'} in spec['tolerations']
    out = _render('exclusive')
    assert _kind(out, 'DaemonSet')['spec']['template']['spec']['nodeSelector'] == {
        'gpuops.io/sharing-pool': 'p1', 'gpuops.io/sharing-strategy': 'exclusive'}


def test_DCGMX_18_rules_as_prometheus_rule_or_config_map():
    rules = {'groups': [{'name': 'gpu', 'rules': [{'alert': 'GpuXid', 'expr': 'DCGM_FI_DEV_XID_ERRORS > 0'}]}]}
    pr = exporter.rule_objects(rules, 'gpu-rules', 'monitoring', MONITORING, {'team': 'gpu'})
    assert pr == [{'apiVersion': 'monitoring.coreos.com/v1', 'kind': 'PrometheusRule',
                   'metadata': {'name': 'gpu-rules', 'namespace': 'monitoring',
                                'labels': {'team': 'gpu', 'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu',
                                           'app.kubernetes.io/part-of': 'gpu-metrics'}},
                   'spec': {'groups': rules['groups']}}]
    cm = exporter.rule_objects(rules, 'gpu-rules', 'monitoring', False)
    assert cm[0]['kind'] == 'ConfigMap' and list(cm[0]['data']) == ['gpu-rules.rules.yml']
    assert yaml.safe_load(cm[0]['data']['gpu-rules.rules.yml']) == rules
    for bad in ({'rules': []}, [], None):
        with pytest.raises(StackError, match='rules must be a rule file'):
            exporter.rule_objects(bad, 'gpu-rules')
    with pytest.raises(StackError, match='name must be a DNS label'):
        exporter.rule_objects(rules, 'Bad')


def test_DCGMX_19_runtime_class_of_the_pool():
    spec = _kind(_render('time-slicing'), 'DaemonSet')['spec']['template']['spec']
    assert spec['runtimeClassName'] == 'nvidia'
    spec = _kind(_render('time-slicing', settings={'nvidia': {'runtime_class_name': ''}}), 'DaemonSet')
    assert 'runtimeClassName' not in spec['spec']['template']['spec']
    spec = _kind(_render('dra'), 'DaemonSet')['spec']['template']['spec']
    assert 'runtimeClassName' not in spec


def test_extra_labels_and_pull_secrets():
    out = _render(extra_labels={'team': 'gpu'}, image_pull_secrets=['regcred'])
    assert all(o['metadata']['labels']['team'] == 'gpu' for o in out['objects'])
    assert _kind(out, 'DaemonSet')['spec']['template']['metadata']['labels']['team'] == 'gpu'
    assert _kind(out, 'DaemonSet')['spec']['template']['spec']['imagePullSecrets'] == [{'name': 'regcred'}]


def test_strategies_are_the_models_attributable_ones():
    assert exporter.STRATEGIES == tuple(s for s in gpu_strategy.STRATEGIES
                                        if gpu_strategy.strategy(s)['nvidia_plugin'] or gpu_strategy.family(s) == 'dra')
    doc = yaml.safe_load(gpu_metrics_manifests.DOCUMENTATION)
    assert tuple(doc["options"]["strategy"]["choices"]) == exporter.ALL_STRATEGIES
    spec = gpu_metrics_manifests.argument_spec()
    assert set(doc['options']) == set(spec)
    for name, opt in spec.items():
        assert doc['options'][name].get('default') == opt.get('default'), name


def test_module_renders_and_refuses(run):
    res = run({'strategy': 'time-slicing', 'pool': 't4', 'mirror': 'mirror.example', 'monitoring_api': MONITORING,
               'rules': {'groups': []}}, check=True)
    assert res['failed'] is False and res['changed'] is False
    assert [o['kind'] for o in res['objects']] == [
        'ServiceAccount', 'ConfigMap', 'DaemonSet', 'Service', 'ServiceMonitor', 'PrometheusRule']
    assert res['image'] == 'mirror.example/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless'
    res = run({'strategy': 'exclusive', 'pool': 'Bad'})
    assert res['failed'] and 'pool must be a DNS label' in res['msg']
    res = run({'strategy': 'gpushare', 'pool': 'p'})
    assert res['failed'] and 'value of strategy must be one of' in res['msg']
    res = run({'strategy': 'exclusive', 'pool': 'p', 'monitoring_served': True})
    assert [o['kind'] for o in res['stale']] == ['ServiceMonitor']
    assert 'ServiceMonitor' in [k['kind'] for k in res['prune'][0]['kinds']]


def test_conformance_table_exists():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), *(['..'] * 6)))
    assert os.path.isfile(os.path.join(root, pins.pin('dcgm-exporter')['conformance']))


@pytest.mark.parametrize('settings', [{'nvidia': {'runtime_class_name': 'nvidia-cdi'}},
                                      {'gpu_sharing_stack_nvidia': {'runtime_class_name': 'nvidia-cdi'}}])
def test_the_pools_runtime_class_in_either_form_of_its_settings(settings):
    """The pools' plan (role gpu_metrics, playbooks/cluster.yml) gives a pool's settings under the role variables'
    names (gpu_sharing_stack_nvidia); gpu_stack_manifests' form has no prefix: both give the exporter's pods the
    runtime class the pool's GPU pods use."""
    out = exporter.render({'strategy': 'time-slicing', 'pool': 't4', 'settings': settings})
    assert _kind(out, 'DaemonSet')['spec']['template']['spec']['runtimeClassName'] == 'nvidia-cdi'
