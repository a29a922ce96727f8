# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scrape objects of a pool whose sharing stack serves metrics of its own (module gpu_metrics_manifests, through
metrics/exporter.render): HAMi's vGPU monitor per pool and its scheduler, Volcano's scheduler. No dcgm-exporter is
rendered for them: dcgm-exporter attributes only the NVIDIA device plugin's resources (DCGMX-09), and these stacks
count GPUs with resources of their own.

What each stack serves at the pinned tag (port, path, metric names, labels) and what the collection scrapes of it are
the rows STKM-* of docs/conformance/dcgm-exporter.md.

* HAMi (pin 'hami'): per pool, a Service selecting the pool's device plugin pods (their vgpu-monitor container serves
  :9394/metrics) and a ServiceMonitor (honorLabels: the monitor's series carry the workload's namespace, pod and
  container) or scrape annotations; the scheduler (one Deployment for every HAMi pool, its extender serving
  :9395/metrics) once: by the pool whose `scheduler` is true (role gpu_metrics: the first pool of the stack).
* Volcano (pin 'volcano'): the device plugins the collection deploys serve no metrics; Volcano's scheduler (installed
  by the site, not by the collection) serves :8080/metrics with --enable-metrics, behind its own Service
  `volcano-scheduler-service` that already carries the scrape annotations. With the Prometheus Operator's API, a
  ServiceMonitor selects that Service (once, by the pool whose `scheduler` is true); without it nothing is rendered.

Pure: no cluster access, no Ansible import.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import hami, volcano
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    MANAGED_BY, POOL_LABEL, SCOPE_LABEL, Manifest, StackError, check_name,
)

METRICS_PATH = '/metrics'

# HAMi v2.10.0, cmd/vGPUmonitor/metrics.go: the vGPU monitor's series (STKM-02, STKM-03). Every series also carries
# zone="vGPU" (NewClusterManager registers its collector with prometheus.WrapRegistererWith).
HAMI_MONITOR_METRICS = {
    'hami_host_gpu_memory_used_bytes': ('node', 'device_index', 'device_uuid', 'device_type'),
    'hami_host_gpu_utilization_ratio': ('node', 'device_index', 'device_uuid', 'device_type'),
    'hami_host_gpu_memory_controller_utilization_ratio': ('device_index', 'device_uuid', 'device_type'),
    'hami_vgpu_memory_used_bytes': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_vgpu_memory_limit_bytes': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_container_device_memory_bytes': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_container_device_utilization_ratio': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_container_last_kernel_elapsed_seconds': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_vgpu_memory_context_bytes': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_vgpu_memory_module_bytes': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_vgpu_memory_buffer_bytes': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid'),
    'hami_mig_device_info': ('namespace', 'pod', 'container', 'vdevice_index', 'device_uuid', 'mig_uuid', 'profile',
                             'gpu_instance_id', 'compute_instance_id'),
}
# the label NewClusterManager adds to every series of both HAMi collectors, and its value
HAMI_ZONE = ('zone', 'vGPU')
# the names before v2.10.0, served only with --legacy-metrics (off by default; the collection does not set it): the
# rules and dashboards read the names above
HAMI_LEGACY_METRICS = ('HostGPUMemoryUsage', 'HostCoreUtilization', 'vGPU_device_memory_usage_in_bytes',
                       'vGPU_device_memory_limit_in_bytes')
# HAMi v2.10.0, cmd/scheduler/metrics.go: the scheduler's series (STKM-04): what it allocated, per GPU and per container
HAMI_SCHEDULER_METRICS = {
    'hami_gpu_memory_limit_bytes': ('node', 'device_uuid', 'device_index', 'device_type'),
    'hami_gpu_core_limit_ratio': ('node', 'device_uuid', 'device_index', 'device_type'),
    'hami_gpu_memory_allocated_bytes': ('node', 'device_uuid', 'device_index', 'device_cores', 'device_type'),
    'hami_gpu_shared_count': ('node', 'device_uuid', 'device_index', 'device_type'),
    'hami_gpu_core_allocated_ratio': ('node', 'device_uuid', 'device_index', 'device_type'),
    'hami_node_gpu_overview': ('node', 'device_uuid', 'device_index', 'device_cores', 'device_memory_limit',
                               'device_type'),
    'hami_node_gpu_memory_allocated_ratio': ('node', 'device_uuid', 'device_index', 'device_type'),
    'hami_vgpu_memory_allocated_bytes': ('namespace', 'node', 'pod', 'container_index', 'device_uuid'),
    'hami_vgpu_core_allocated_ratio': ('namespace', 'node', 'pod', 'container_index', 'device_uuid'),
}

# Volcano v1.15.1: the scheduler serves /metrics on --listen-address (default :8080) only with --enable-metrics
# (cmd/scheduler/app/options/options.go, cmd/scheduler/app/server.go); the release manifests and the chart (its
# custom.scheduler_metrics_enable: true) set it and put the Service below in front of it (STKM-05)
VOLCANO_SCHEDULER_PORT = 8080
VOLCANO_SCHEDULER_PORT_NAME = 'metrics'
VOLCANO_SCHEDULER_SERVICE = 'volcano-scheduler-service'
VOLCANO_SCHEDULER_LABELS = {'app': 'volcano-scheduler'}
VOLCANO_METRICS_FLAG = '--enable-metrics'
# pkg/scheduler/api/devices/nvidia/vgpu/metrics.go: the deviceshare plugin's vGPU series (mode vgpu only; the gpu-share
# mode has none) (STKM-06)
VOLCANO_VGPU_METRICS = {
    'volcano_vgpu_device_shared_number': ('devID', 'NodeName'),
    'volcano_vgpu_device_allocated_memory': ('devID', 'NodeName'),
    'volcano_vgpu_device_allocated_cores': ('devID', 'NodeName'),
    'volcano_vgpu_device_memory_limit': ('devID', 'NodeName'),
    'volcano_vgpu_device_memory_allocation_for_a_certain_pod': ('devID', 'NodeName', 'podName'),
    'volcano_vgpu_device_core_allocation_for_a_certain_pod': ('devID', 'NodeName', 'podName'),
}


class StackMetrics(object):
    """What one stack serves and how the collection scrapes it."""

    def __init__(self, stack: str, pool_app: str | None, pool_port: int | None, scheduler_app: dict[str, str],
                 scheduler_port: int | str, own_scheduler: bool, source: str) -> None:
        self.stack = stack
        # the app.kubernetes.io/name of the pool's pods that serve metrics (None: no per-pool metrics)
        self.pool_app = pool_app
        self.pool_port = pool_port
        # the labels of the scheduler's pods (own_scheduler: the collection renders it, and a Service of ours selects
        # them) or of the stack's own metrics Service (else: a ServiceMonitor selects that Service)
        self.scheduler_app = scheduler_app
        self.scheduler_port = scheduler_port
        self.own_scheduler = own_scheduler
        self.source = source


HAMI = StackMetrics('hami', hami.DEVICE_PLUGIN, hami.MONITOR_PORT, {'app.kubernetes.io/name': hami.SCHEDULER},
                    hami.SCHEDULER_METRICS_PORT, True, 'hami')
VOLCANO = StackMetrics('volcano', None, None, VOLCANO_SCHEDULER_LABELS, VOLCANO_SCHEDULER_PORT_NAME, False,
                       'volcano')
BY_STACK = dict((m.stack, m) for m in (HAMI, VOLCANO))

# the strategies whose stack serves metrics of its own, in the model's order
STRATEGIES = tuple(s for s in gpu_strategy.STRATEGIES if gpu_strategy.stack_info(s)['stack'] in BY_STACK)
# the object names: <prefix><pool> for a pool's monitor, fixed names for a scheduler
MONITOR_PREFIX = 'hami-vgpu-monitor-'
MAX_POOL = 63 - len(MONITOR_PREFIX)
SCHEDULER_NAMES = {'hami': 'hami-scheduler-metrics', 'volcano': 'volcano-scheduler-metrics'}


def refusal(strategy: str) -> str:
    """Why a strategy of the model gets no metrics objects from the collection (the module's error)."""
    if gpu_strategy.stack_info(strategy)['stack'] == 'operator':
        return '%s: the GPU operator deploys and scrapes its own dcgm-exporter' % strategy
    return ('%s: dcgm-exporter does not attribute its resources (%s) to pods, and its stack serves no metrics of its '
            'own' % (strategy, ', '.join(r[0] for r in gpu_strategy.stack_info(strategy)['resources'])))


def for_strategy(strategy: str) -> StackMetrics:
    return BY_STACK[gpu_strategy.stack_info(strategy)['stack']]


def _settings_block(settings: dict[str, Any], key: str) -> dict[str, Any]:
    """A settings block of the pool, as gpu_stack_manifests takes it (``{key: {...}}``) or as the pools' plan passes
    it (``{'gpu_sharing_stack_<key>': {...}}``)."""
    for k in (key, 'gpu_sharing_stack_' + key):
        if isinstance(settings.get(k), dict):
            return settings[k]
    return {}


def stack_namespace(strategy: str, params: dict[str, Any]) -> str:
    """The namespace of the pods that serve the metrics: option stack_namespace, else the pool's settings
    (gpu_sharing_stack_namespace for HAMi, volcano.namespace for Volcano's scheduler), else the stacks' defaults."""
    given = params.get('stack_namespace')
    if given:
        return check_name(given, 'stack_namespace')
    settings = params.get('settings') or {}
    if not isinstance(settings, dict):
        raise StackError('settings must be a dictionary (the pool\'s sharing stack settings); got %r' % (settings,))
    if for_strategy(strategy) is VOLCANO:
        ns = _settings_block(settings, 'volcano').get('namespace') or volcano.VOLCANO_SCHEMA['namespace']['default']
        return check_name(ns, 'settings.volcano.namespace')
    ns = settings.get('gpu_sharing_stack_namespace') or settings.get('namespace') or 'kube-system'
    return check_name(ns, 'settings.gpu_sharing_stack_namespace')


def _meta(p: dict[str, Any], name: str, namespace: str, app: str,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    # the labels of exporter._meta (scope metrics and the pool: the role's prune, exporter.prune_rules, takes them)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
    labels = dict(p['extra_labels'])
    labels.update({'app.kubernetes.io/name': app, 'app.kubernetes.io/instance': p['pool'],
                   'app.kubernetes.io/managed-by': MANAGED_BY, 'app.kubernetes.io/part-of': exporter.PART_OF,
                   POOL_LABEL: p['pool'], SCOPE_LABEL: exporter.SCOPE})
    meta: dict[str, Any] = {'name': name, 'namespace': namespace, 'labels': labels}
    if annotations:
        meta['annotations'] = dict(annotations)
    return meta


def _scrape(monitoring: bool, port: int) -> dict[str, str]:
    return {} if monitoring else {'prometheus.io/scrape': 'true', 'prometheus.io/port': str(port),
                                  'prometheus.io/path': METRICS_PATH}


def _service(p: dict[str, Any], name: str, namespace: str, app: str, selector: dict[str, str], port: int,
             monitoring: bool) -> Manifest:
    return {'apiVersion': 'v1', 'kind': 'Service', 'metadata': _meta(p, name, namespace, app, _scrape(monitoring, port)),
            'spec': {'type': 'ClusterIP', 'selector': dict(selector),
                     'ports': [{'name': hami.METRICS_PORT_NAME, 'port': port, 'targetPort': port, 'protocol': 'TCP'}]}}


def _monitor(p: dict[str, Any], name: str, namespace: str, app: str, selector: dict[str, str], port: str,
             honor: bool, pool_label: bool) -> Manifest:
    """A ServiceMonitor of the Services labelled ``selector`` in ``namespace``."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
    endpoint: dict[str, Any] = {'port': port, 'path': METRICS_PATH, 'interval': p['scrape_interval']}
    if honor:
        # the series' own namespace, pod and container (the workload's) win over the target's, which the operator
        # would otherwise add and rename the series' to exported_* (prometheus-operator promcfg.go)
        endpoint['honorLabels'] = True
    if pool_label:
        endpoint['relabelings'] = [{'action': 'replace', 'targetLabel': exporter.SERIES_POOL_LABEL,
                                    'sourceLabels': ['__meta_kubernetes_pod_label_' + exporter.SERIES_POOL_LABEL]}]
    return {'apiVersion': exporter.MONITORING_API, 'kind': 'ServiceMonitor', 'metadata': _meta(p, name, namespace, app),
            'spec': {'selector': {'matchLabels': dict(selector)}, 'namespaceSelector': {'matchNames': [namespace]},
                     'endpoints': [endpoint]}}


def _service_labels(app: str, pool: str | None) -> dict[str, str]:
    """The labels a ServiceMonitor selects one of our Services by (a subset of _meta's)."""
    labels = {'app.kubernetes.io/name': app, 'app.kubernetes.io/managed-by': MANAGED_BY}
    if pool:
        labels[POOL_LABEL] = pool
    return labels


def pool_selector(strategy: str, pool: str) -> dict[str, str] | None:
    """The labels of the pool's pods that serve its metrics (as stacks/common.daemonset labels the stack's pods)."""
    m = for_strategy(strategy)
    return {'app.kubernetes.io/name': m.pool_app, POOL_LABEL: pool} if m.pool_app else None


def render(p: dict[str, Any], params: dict[str, Any], monitoring: bool) -> dict[str, Any]:
    """The scrape objects of one pool of a stack that serves metrics (p: exporter's checked parameters; params: the
    module's, for stack_namespace, settings and scheduler). Returns what exporter.render returns."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
    strategy, pool = p['strategy'], p['pool']
    m = for_strategy(strategy)
    namespace = stack_namespace(strategy, params)
    scheduler = params.get('scheduler', True)
    if not isinstance(scheduler, bool):
        raise StackError('scheduler must be true or false (whether this pool scrapes its stack\'s scheduler, once '
                         'for every pool of the stack); got %r' % (scheduler,))
    objects: list[Manifest] = []
    notes: list[str] = []
    selector = pool_selector(strategy, pool)
    if selector and m.pool_port:
        if len(pool) > MAX_POOL:
            raise StackError('pool must be at most %d characters (the Service %s<pool> is a 63-character DNS label); '
                             'got %r' % (MAX_POOL, MONITOR_PREFIX, pool))
        name = MONITOR_PREFIX + pool
        objects.append(_service(p, name, namespace, 'hami-vgpu-monitor', selector, m.pool_port, monitoring))
        if monitoring:
            objects.append(_monitor(p, name, namespace, 'hami-vgpu-monitor', _service_labels('hami-vgpu-monitor', pool),
                                    hami.METRICS_PORT_NAME, True, True))
    else:
        notes.append('%s: the device plugin the collection deploys for this pool serves no metrics (volcano-vgpu-'
                     'device-plugin runs without upstream\'s separate volcano-vgpu-monitor container; '
                     'volcano-device-plugin serves none); per-pod GPU allocations come from Volcano\'s scheduler '
                     '(mode vgpu)' % strategy)
    if scheduler:
        name = SCHEDULER_NAMES[m.stack]
        app = name
        if m.own_scheduler:
            objects.append(_service(p, name, namespace, app, m.scheduler_app, int(m.scheduler_port), monitoring))
            if monitoring:
                objects.append(_monitor(p, name, namespace, app, _service_labels(app, None), hami.METRICS_PORT_NAME,
                                        True, False))
        elif monitoring:
            objects.append(_monitor(p, name, namespace, app, m.scheduler_app, str(m.scheduler_port), False, False))
            notes.append('volcano: the ServiceMonitor %s/%s selects Volcano\'s own Service %s (labels %s, port %s); '
                         'volcano-scheduler must run with %s (Volcano\'s manifests and chart set it)'
                         % (namespace, name, VOLCANO_SCHEDULER_SERVICE, VOLCANO_SCHEDULER_LABELS,
                            VOLCANO_SCHEDULER_PORT_NAME, VOLCANO_METRICS_FLAG))
        else:
            notes.append('volcano: Volcano\'s own Service %s/%s already carries the prometheus.io scrape annotations '
                         '(port %d, %s); nothing is rendered for its scheduler. volcano-scheduler must run with %s'
                         % (namespace, VOLCANO_SCHEDULER_SERVICE, VOLCANO_SCHEDULER_PORT, METRICS_PATH,
                            VOLCANO_METRICS_FLAG))
    resources = [r[0] for r in gpu_strategy.stack_info(strategy)['resources']]
    if m is HAMI:
        attribution = {'source': m.source, 'pods': True, 'usage': True, 'allocations': True}
    else:
        mode = _settings_block(params.get('settings') or {}, 'volcano').get('mode') or \
            volcano.VOLCANO_SCHEMA['mode']['default']
        attribution = {'source': m.source, 'pods': False, 'usage': False, 'allocations': mode == 'vgpu'}
    attribution.update({'virtual_gpus': False, 'dra': False, 'resource_names': resources, 'mig_instances': False})
    return {'objects': objects, 'image': '', 'monitoring': monitoring, 'notes': notes, 'attribution': attribution,
            'prune': exporter.prune_rules(pool, monitoring)}
