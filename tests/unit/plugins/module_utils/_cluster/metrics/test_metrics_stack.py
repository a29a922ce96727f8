# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metrics/stack_metrics: the scrape objects of HAMi and Volcano pools (the rows STKM-* of
docs/conformance/dcgm-exporter.md), through metrics/exporter.render and module gpu_metrics_manifests. The selectors
are compared with the pods the stacks' own renderers make (stacks/render), not with literals."""
import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter, rules, stack_metrics
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import hami, volcano
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import POOL_LABEL, StackError
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_metrics_manifests

FACTS = {'n1': {'gpus': [{'index': 0, 'name': 'NVIDIA H100', 'mig_capable': True, 'compute_capability': '9.0',
                          'memory_total_mib': 81920}], 'sharing': {}}}


def _render(strategy, **kw):
    params = dict(strategy=strategy, pool='p1')
    params.update(kw)
    return exporter.render(params)


def _stack(strategy, settings, namespace='kube-system', pool='p1'):
    return stacks_render.render(dict(strategy=strategy, pool=pool, nodes=['n1'], settings=settings, facts=FACTS,
                                     require_facts=False, namespace=namespace))['manifests']


def _pods(manifests, kind, name):
    [obj] = [m for m in manifests if m['kind'] == kind and m['metadata']['name'] == name]
    return obj['metadata'].get('namespace'), obj['spec']['template']['metadata']['labels'], \
        obj['spec']['template']['spec']


def _one(out, kind, name):
    found = [o for o in out['objects'] if o['kind'] == kind and o['metadata']['name'] == name]
    assert len(found) == 1, (kind, name, [(o['kind'], o['metadata']['name']) for o in out['objects']])
    return found[0]


def _selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


HAMI_SETTINGS = {'hami': {'kube_version': 'v1.33.2'}}


def test_STKM_01_hami_monitor_service_selects_exactly_the_pools_device_plugin_pods():
    stack = _stack('hami', HAMI_SETTINGS, namespace='gpu-sys') + _stack('hami', HAMI_SETTINGS, 'gpu-sys', pool='p2')
    ns, labels, spec = _pods(stack, 'DaemonSet', 'hami-device-plugin-p1')
    out = _render('hami', stack_namespace='gpu-sys')
    svc = _one(out, 'Service', 'hami-monitor-p1')
    assert svc['metadata']['namespace'] == ns == 'gpu-sys'
    assert _selects(svc['spec']['selector'], labels)
    # and no other pool's pods, nor the scheduler's
    for m in stack:
        if m['kind'] in ('DaemonSet', 'Deployment') and m['metadata']['name'] != 'hami-device-plugin-p1':
            assert not _selects(svc['spec']['selector'], m['spec']['template']['metadata']['labels']), m['metadata']
    # the vgpu-monitor container's port, by number and name
    [monitor] = [c for c in spec['containers'] if c['command'] == ['vGPUmonitor']]
    [port] = monitor['ports']
    assert svc['spec']['ports'] == [{'name': port['name'], 'port': port['containerPort'],
                                     'targetPort': port['containerPort'], 'protocol': 'TCP'}]
    assert port['containerPort'] == 9394
    # no legacy names asked for: the rules read the v2.10.0 names
    assert not any('legacy' in a for c in spec['containers'] for a in c.get('command', []) + c.get('args', []))


def test_STKM_01_service_monitor_or_annotations():
    out = _render('hami', monitoring_api=['v1', 'monitoring.coreos.com/v1'])
    svc = _one(out, 'Service', 'hami-monitor-p1')
    assert 'annotations' not in svc['metadata']
    mon = _one(out, 'ServiceMonitor', 'hami-monitor-p1')
    assert _selects(mon['spec']['selector']['matchLabels'], svc['metadata']['labels'])
    assert mon['spec']['namespaceSelector'] == {'matchNames': ['kube-system']}
    [ep] = mon['spec']['endpoints']
    assert ep['port'] == svc['spec']['ports'][0]['name'] and ep['path'] == '/metrics' and ep['interval'] == '30s'
    assert ep['relabelings'] == [{'action': 'replace', 'targetLabel': exporter.SERIES_POOL_LABEL,
                                  'sourceLabels': ['__meta_kubernetes_pod_label_' + exporter.SERIES_POOL_LABEL]}]
    out = _render('hami')
    assert [o['kind'] for o in out['objects']] == ['Service', 'Service']
    assert _one(out, 'Service', 'hami-monitor-p1')['metadata']['annotations'] == {
        'prometheus.io/scrape': 'true', 'prometheus.io/port': '9394', 'prometheus.io/path': '/metrics'}
    assert out['attribution']['source'] == 'hami' and out['attribution']['pods'] is True
    assert out['attribution']['usage'] is True and out['image'] == ''


def test_STKM_03_service_monitors_keep_the_series_labels():
    """HAMi's series carry the workload's namespace, pod and container: honorLabels keeps them (else the operator's
    target labels win and they become exported_*); Volcano's carry none of those names."""
    out = _render('hami', monitoring_api=True)
    mons = [o for o in out['objects'] if o['kind'] == 'ServiceMonitor']
    assert len(mons) == 2 and all(m['spec']['endpoints'][0]['honorLabels'] is True for m in mons)
    for labels in list(stack_metrics.HAMI_MONITOR_METRICS.values()) + list(stack_metrics.HAMI_SCHEDULER_METRICS.values()):
        if 'pod' in labels:
            assert 'namespace' in labels
    for labels in stack_metrics.VOLCANO_VGPU_METRICS.values():
        assert not {'namespace', 'pod', 'container', 'service', 'endpoint'} & set(labels)
    [mon] = _render('volcano', monitoring_api=True)['objects']
    assert 'honorLabels' not in mon['spec']['endpoints'][0]


def test_STKM_02_the_rule_reads_names_the_monitor_serves():
    assert pins.pin('hami')['upstream_ref'] == 'v2.10.0'
    for name in rules.HAMI_METRICS:
        assert stack_metrics.HAMI_MONITOR_METRICS[name] == rules.HAMI_LABELS
    assert rules.HAMI_LABELS == ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid')
    assert not set(stack_metrics.HAMI_LEGACY_METRICS) & set(stack_metrics.HAMI_MONITOR_METRICS)
    [share] = [r for r in rules.alert_rules()['groups'][0]['rules'] if r['alert'] == 'GpuOpsGpuShareExceeded']
    assert rules.expr_metrics(share['expr']) == set(rules.HAMI_METRICS)


def test_STKM_04_hami_scheduler_scraped_once():
    stack = _stack('hami', HAMI_SETTINGS, namespace='gpu-sys')
    ns, labels, spec = _pods(stack, 'Deployment', 'hami-scheduler')
    out = _render('hami', stack_namespace='gpu-sys', monitoring_api=True)
    svc = _one(out, 'Service', 'hami-scheduler-metrics')
    assert svc['metadata']['namespace'] == ns and _selects(svc['spec']['selector'], labels)
    for m in stack:
        if m['kind'] == 'DaemonSet':
            assert not _selects(svc['spec']['selector'], m['spec']['template']['metadata']['labels'])
    [ext] = [c for c in spec['containers'] if c['name'] == 'vgpu-scheduler-extender']
    [port] = [p for p in ext['ports'] if p['name'] == 'metrics']
    assert '--metrics-bind-address=:%d' % port['containerPort'] in ext['command']
    assert svc['spec']['ports'][0]['port'] == port['containerPort'] == 9395
    mon = _one(out, 'ServiceMonitor', 'hami-scheduler-metrics')
    assert _selects(mon['spec']['selector']['matchLabels'], svc['metadata']['labels'])
    assert not _selects(mon['spec']['selector']['matchLabels'],
                        _one(out, 'Service', 'hami-monitor-p1')['metadata']['labels'])
    assert mon['spec']['endpoints'][0]['honorLabels'] is True and 'relabelings' not in mon['spec']['endpoints'][0]
    # the other pools of the stack leave it out
    out = _render('hami', pool='p2', scheduler=False, monitoring_api=True)
    assert [o['metadata']['name'] for o in out['objects']] == ['hami-monitor-p2'] * 2


def test_STKM_04_namespace_from_the_pools_settings():
    for settings in ({'gpu_sharing_stack_namespace': 'gpu-a'}, {'namespace': 'gpu-a'}):
        assert {o['metadata']['namespace'] for o in _render('hami', settings=settings)['objects']} == {'gpu-a'}
    assert {o['metadata']['namespace'] for o in _render('hami')['objects']} == {'kube-system'}
    out = _render('hami', settings={'gpu_sharing_stack_namespace': 'gpu-a'}, stack_namespace='gpu-b')
    assert {o['metadata']['namespace'] for o in out['objects']} == {'gpu-b'}


def test_STKM_05_volcano_scheduler_service_monitor_selects_volcanos_service():
    out = _render('volcano', monitoring_api=True)
    [mon] = out['objects']
    assert mon['kind'] == 'ServiceMonitor' and mon['metadata']['name'] == 'volcano-scheduler-metrics'
    assert mon['metadata']['namespace'] == volcano.VOLCANO_SCHEMA['namespace']['default'] == 'volcano-system'
    assert mon['spec']['selector'] == {'matchLabels': {'app': 'volcano-scheduler'}}
    assert mon['spec']['endpoints'][0]['port'] == 'metrics' and mon['spec']['endpoints'][0]['path'] == '/metrics'
    out = _render('volcano', monitoring_api=True, settings={'gpu_sharing_stack_volcano': {'namespace': 'vc'}})
    assert out['objects'][0]['metadata']['namespace'] == 'vc'
    out = _render('volcano', monitoring_api=True, scheduler=False)
    assert out['objects'] == []
    # without the operator's API Volcano's own Service is scraped through its annotations: nothing of ours
    out = _render('volcano')
    assert out['objects'] == [] and any('volcano-scheduler-service' in n and '--enable-metrics' in n
                                        for n in out['notes'])
    assert volcano.SCHEDULER_METRICS_SERVICE == 'volcano-scheduler-service'
    assert out['attribution']['source'] == 'volcano' and out['attribution']['allocations'] is True
    assert _render('volcano', settings={'volcano': {'mode': 'gpu-share'}})['attribution']['allocations'] is False


@pytest.mark.parametrize('settings', [{'volcano': {}}, {'volcano': {'mode': 'gpu-share',
                                                                    'accept_known_bad_images': True}}])
def test_STKM_06_volcano_device_plugins_serve_no_metrics(settings):
    for m in _stack('volcano', settings):
        if m['kind'] == 'DaemonSet':
            assert not any(c.get('ports') for c in m['spec']['template']['spec']['containers'])
            assert stack_metrics.pool_selector('volcano', 'p1') is None
    out = _render('volcano', settings=settings, scheduler=False)
    assert out['objects'] == [] and any('serves no metrics' in n for n in out['notes'])


@pytest.mark.parametrize('strategy', [s for s in gpu_strategy.STRATEGIES if s not in exporter.ALL_STRATEGIES])
def test_STKM_07_unattributable_strategies_refused_with_the_reason(strategy):
    with pytest.raises(StackError) as e:
        _render(strategy)
    assert 'strategy must be one of %s' % ', '.join(exporter.ALL_STRATEGIES) in str(e.value)
    assert str(e.value).endswith('(%s)' % stack_metrics.refusal(strategy))
    assert ('deploys and scrapes its own dcgm-exporter' in str(e.value)) is (strategy == 'gpu-operator')


def test_STKM_07_every_strategy_rendered_or_refused():
    assert set(exporter.ALL_STRATEGIES) == set(exporter.STRATEGIES) | set(stack_metrics.STRATEGIES)
    assert stack_metrics.STRATEGIES == ('volcano', 'hami')
    assert not set(exporter.STRATEGIES) & set(stack_metrics.STRATEGIES)
    doc = yaml.safe_load(gpu_metrics_manifests.DOCUMENTATION)
    assert tuple(doc['options']['strategy']['choices']) == exporter.ALL_STRATEGIES
    for strategy in gpu_strategy.STRATEGIES:
        if strategy in exporter.ALL_STRATEGIES:
            assert _render(strategy)['attribution']
        else:
            with pytest.raises(StackError):
                _render(strategy)


@pytest.mark.parametrize('strategy', stack_metrics.STRATEGIES)
def test_STKM_08_pruned_with_the_pools_exporter_never_by_the_stack(strategy):
    def matches(selector, obj):
        labels = obj['metadata'].get('labels') or {}
        return all(labels.get(k) == v for k, v in (kv.split('=', 1) for kv in selector.split(',')))

    out = _render(strategy, monitoring_api=True, extra_labels={'team': 'gpu'})
    assert out['objects']
    assert out['prune'] == exporter.prune_rules('p1', True)
    own = out['prune'][0]['label_selector']
    kinds = {(k['api_version'], k['kind']) for k in out['prune'][0]['kinds']}
    for obj in out['objects']:
        assert matches(own, obj) and (obj['apiVersion'], obj['kind']) in kinds
        assert obj['metadata']['labels']['team'] == 'gpu'
    for rule in stacks_render.prune_rules(strategy, 'p1'):
        assert not any(matches(rule['label_selector'], o) for o in out['objects'])


def test_STKM_07_bad_input():
    with pytest.raises(StackError, match='pool must be at most 49 characters'):
        _render('hami', pool='p' * 50)
    with pytest.raises(StackError, match='stack_namespace must be a DNS label'):
        _render('hami', stack_namespace='Bad_NS')
    with pytest.raises(StackError, match='scheduler must be true or false'):
        _render('hami', scheduler='yes')
    with pytest.raises(StackError, match="the volcano scheduler's namespace must be a DNS label"):
        _render('volcano', monitoring_api=True, settings={'volcano': {'namespace': 'A'}})
    with pytest.raises(StackError, match='settings must be a dictionary'):
        _render('hami', settings=['x'])


def test_selector_labels_are_the_stacks_constants():
    assert stack_metrics.pool_selector('hami', 'p1') == {'app.kubernetes.io/name': hami.DEVICE_PLUGIN,
                                                         POOL_LABEL: 'p1'}
    assert stack_metrics.pool_selector('volcano', 'p1') is None


def test_module_renders_hami_and_refuses_gpushare(run):
    res = run({'strategy': 'hami', 'pool': 'a100', 'stack_namespace': 'gpu-sys', 'monitoring_api': True,
               'scheduler': False}, check=True)
    assert res['changed'] is False and res['attribution']['source'] == 'hami'
    assert [o['kind'] for o in res['objects']] == ['Service', 'ServiceMonitor']
    res = run({'strategy': 'gpushare', 'pool': 'v100'})
    assert res['failed'] is True and 'value of strategy must be one of' in res['msg']  # Ansible's choices check


@pytest.mark.parametrize('strategy', stack_metrics.STRATEGIES)
def test_STKM_08_a_switch_of_form_prunes_the_service_monitors(strategy):
    """Annotations asked while the Operator's API is served (monitoring_served): the prune takes the ServiceMonitor
    kind, and the stale objects name the ServiceMonitors the other form renders (state absent removes them)."""
    base = {'strategy': strategy, 'pool': 'p1', 'stack_namespace': 'gpu'}
    made = exporter.render(dict(base, monitoring_api=True))
    monitors = [{'apiVersion': o['apiVersion'], 'kind': o['kind'],
                 'metadata': {'name': o['metadata']['name'], 'namespace': o['metadata']['namespace']}}
                for o in made['objects'] if o['kind'] == 'ServiceMonitor']
    assert monitors and made['stale'] == []
    out = exporter.render(dict(base, monitoring_api=False, monitoring_served=True))
    assert not [o for o in out['objects'] if o['kind'] == 'ServiceMonitor']
    assert out['prune'] == exporter.prune_rules('p1', True) and out['stale'] == monitors
    out = exporter.render(dict(base, monitoring_api=False))
    assert out['prune'] == exporter.prune_rules('p1', False) and out['stale'] == []
