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
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry
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

# Volcano v1.15.1, pkg/scheduler/api/devices/nvidia/vgpu/metrics.go: the deviceshare plugin's vGPU series of
# volcano-scheduler (mode vgpu only; the gpu-share mode has none) (STKM-06). Where the scheduler serves them: its
# Stack's own_metrics (stacks/volcano), STKM-05.
VOLCANO_VGPU_METRICS = {
    'volcano_vgpu_device_shared_number': ('devID', 'NodeName'),
    'volcano_vgpu_device_allocated_memory': ('devID', 'NodeName'),
    'volcano_vgpu_device_allocated_cores': ('devID', 'NodeName'),
    'volcano_vgpu_device_memory_limit': ('devID', 'NodeName'),
    'volcano_vgpu_device_memory_allocation_for_a_certain_pod': ('devID', 'NodeName', 'podName'),
    'volcano_vgpu_device_core_allocation_for_a_certain_pod': ('devID', 'NodeName', 'podName'),
}
SETTINGS_PREFIX = 'gpu_sharing_stack_'

# the strategies whose stack serves metrics of its own (their Stack's own_metrics), in the model's order
STRATEGIES = tuple(s for s in gpu_strategy.STRATEGIES if registry.stack(s).own_metrics({}) is not None)
# the object names: <stack>-monitor-<pool> for a pool's pods that serve metrics, <stack>-scheduler-metrics for a
# scheduler
MONITOR_SUFFIX = '-monitor'
MAX_NAME = 63


def refusal(strategy: str) -> str:
    """Why a strategy of the model gets no metrics objects from the collection (the module's error)."""
    if registry.stack(strategy).places_on_every_gpu_node:
        return '%s: the GPU operator deploys and scrapes its own dcgm-exporter' % strategy
    return ('%s: dcgm-exporter does not attribute its resources (%s) to pods, and its stack serves no metrics of its '
            'own' % (strategy, ', '.join(r[0] for r in gpu_strategy.stack_info(strategy)['resources'])))


def pool_settings(params: dict[str, Any]) -> dict[str, Any]:
    """The pool's settings as gpu_stack_manifests takes them (``{'hami': {...}}``), also from the form the pools' plan
    passes (``{'gpu_sharing_stack_hami': {...}, 'gpu_sharing_stack_namespace': ...}``)."""
    settings = params.get('settings') or {}
    if not isinstance(settings, dict):
        raise StackError('settings must be a dictionary (the pool\'s sharing stack settings); got %r' % (settings,))
    out = dict((k[len(SETTINGS_PREFIX):], v) for k, v in settings.items() if k.startswith(SETTINGS_PREFIX))
    out.update((k, v) for k, v in settings.items() if not k.startswith(SETTINGS_PREFIX))
    return out


def own_metrics(strategy: str, params: dict[str, Any]) -> dict[str, Any]:
    """The Stack's answer for the pool's settings (stacks/base.Stack.own_metrics)."""
    found = registry.stack(strategy).own_metrics(pool_settings(params))
    if found is None:
        raise StackError('strategy %s serves no metrics of its own' % strategy)
    return found


def stack_namespace(strategy: str, params: dict[str, Any]) -> str:
    """The namespace of the stack's pods that serve metrics: option stack_namespace, else the pool's settings
    (gpu_sharing_stack_namespace), else kube-system (role gpu_sharing_stack's default)."""
    given = params.get('stack_namespace')
    if given:
        return check_name(given, 'stack_namespace')
    return check_name(pool_settings(params).get('namespace') or 'kube-system', 'settings.gpu_sharing_stack_namespace')


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
             port_name: str, monitoring: bool) -> Manifest:
    return {'apiVersion': 'v1', 'kind': 'Service', 'metadata': _meta(p, name, namespace, app, _scrape(monitoring, port)),
            'spec': {'type': 'ClusterIP', 'selector': dict(selector),
                     'ports': [{'name': port_name, 'port': port, 'targetPort': port, 'protocol': 'TCP'}]}}


def _monitor(p: dict[str, Any], name: str, namespace: str, app: str, selector: dict[str, str], port: str,
             honor: bool, pool_label: bool) -> Manifest:
    """A ServiceMonitor of the Services labelled ``selector`` in ``namespace``."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
    endpoint = exporter.service_monitor_endpoint(port, p['scrape_interval'], honor, pool_label, METRICS_PATH)
    return {'apiVersion': exporter.MONITORING_API, 'kind': 'ServiceMonitor', 'metadata': _meta(p, name, namespace, app),
            'spec': {'selector': {'matchLabels': dict(selector)}, 'namespaceSelector': {'matchNames': [namespace]},
                     'endpoints': [endpoint]}}


def _service_labels(app: str, pool: str | None) -> dict[str, str]:
    """The labels a ServiceMonitor selects one of our Services by (a subset of _meta's)."""
    labels = {'app.kubernetes.io/name': app, 'app.kubernetes.io/managed-by': MANAGED_BY}
    if pool:
        labels[POOL_LABEL] = pool
    return labels


def pool_selector(strategy: str, pool: str, params: dict[str, Any] | None = None) -> dict[str, str] | None:
    """The labels of the pool's pods that serve its metrics (as stacks/common.daemonset labels a pool's pods), None
    when they serve none."""
    served = own_metrics(strategy, params or {})['pool']
    return {'app.kubernetes.io/name': served['app'], POOL_LABEL: pool} if served else None


def render(p: dict[str, Any], params: dict[str, Any], monitoring: bool) -> dict[str, Any]:
    """The scrape objects of one pool of a stack that serves metrics (p: exporter's checked parameters; params: the
    module's, for stack_namespace, settings and scheduler). Returns what exporter.render returns."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
    strategy, pool = p['strategy'], p['pool']
    served = own_metrics(strategy, params)
    stack = gpu_strategy.stack_info(strategy)['stack']
    namespace = stack_namespace(strategy, params)
    scheduler = params.get('scheduler', True)
    if not isinstance(scheduler, bool):
        raise StackError('scheduler must be true or false (whether this pool scrapes its stack\'s scheduler, once '
                         'for every pool of the stack); got %r' % (scheduler,))
    objects: list[Manifest] = []
    notes: list[str] = []
    # the ServiceMonitors of the ServiceMonitor form, by name and namespace: the stale objects of the annotations form
    monitors: list[tuple[str, str]] = []
    agent = served['pool']
    if agent:
        app = stack + MONITOR_SUFFIX
        name = '%s-%s' % (app, pool)
        if len(name) > MAX_NAME:
            raise StackError('pool must be at most %d characters (the Service %s-<pool> is a 63-character DNS label); '
                             'got %r' % (MAX_NAME - len(app) - 1, app, pool))
        objects.append(_service(p, name, namespace, app, pool_selector(strategy, pool, params) or {}, agent['port'],
                                agent['port_name'], monitoring))
        monitors.append((name, namespace))
        if monitoring:
            objects.append(_monitor(p, name, namespace, app, _service_labels(app, pool), agent['port_name'], True,
                                    True))
    else:
        notes.append('%s: the device plugin the collection deploys for this pool serves no metrics; what the stack '
                     'serves comes from its scheduler%s' % (strategy, '' if served['allocations'] else
                                                            ' (no per-pod GPU series with these settings)'))
    sched = served['scheduler']
    if scheduler and sched:
        name = '%s-scheduler-metrics' % stack
        sched_ns = check_name(sched['namespace'], 'the %s scheduler\'s namespace' % stack) if sched['namespace'] \
            else namespace
        monitors.append((name, sched_ns))
        if sched['selects'] == 'pods':
            objects.append(_service(p, name, sched_ns, name, sched['labels'], sched['port'], sched['port_name'],
                                    monitoring))
            if monitoring:
                objects.append(_monitor(p, name, sched_ns, name, _service_labels(name, None), sched['port_name'],
                                        True, False))
        elif monitoring:
            objects.append(_monitor(p, name, sched_ns, name, sched['labels'], sched['port_name'], False, False))
            notes.append('%s: the ServiceMonitor %s/%s selects the stack\'s own Service %s (labels %s, port %s)%s'
                         % (strategy, sched_ns, name, sched['service'], sched['labels'], sched['port_name'],
                            '; its scheduler must run with %s' % sched['needs'] if sched['needs'] else ''))
        else:
            notes.append('%s: the stack\'s own Service %s/%s already carries the prometheus.io scrape annotations (port '
                         '%d, %s); nothing is rendered for its scheduler%s'
                         % (strategy, sched_ns, sched['service'], sched['port'], METRICS_PATH,
                            '; it must run with %s' % sched['needs'] if sched['needs'] else ''))
    attribution = {'source': stack, 'pods': bool(served['usage']), 'usage': bool(served['usage']),
                   'allocations': bool(served['allocations']), 'virtual_gpus': False, 'dra': False,
                   'resource_names': [r[0] for r in gpu_strategy.stack_info(strategy)['resources']],
                   'mig_instances': False}
    # as for a dcgm-exporter pool: the ServiceMonitor kind pruned wherever its API is served, whatever the form
    api_served = exporter.served_api(params, monitoring)
    return {'objects': objects, 'image': '', 'monitoring': monitoring, 'notes': notes, 'attribution': attribution,
            'prune': exporter.prune_rules(pool, api_served),
            'stale': exporter.stale_objects(monitors, monitoring, api_served)}
