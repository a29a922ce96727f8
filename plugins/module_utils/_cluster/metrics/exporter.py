# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The objects of one pool's dcgm-exporter (module gpu_metrics_manifests): the collectors ConfigMap, a DaemonSet on the
pool's nodes with the attribution its strategy needs, a Service on port 9400 `metrics`, the ServiceAccount and the
least RBAC, and the monitoring objects: a ServiceMonitor when the caller found the monitoring.coreos.com/v1 API, else
scrape annotations on the Service. Rule files (metrics/rules) become a PrometheusRule or a ConfigMap (rule_objects).

What the strategy needs to attribute usage to pods comes from the strategy model (gpu_strategy), not from a list of
names here: the NVIDIA device plugin strategies are attributed through the kubelet's pod-resources API, those whose
pods share a GPU (the model's resource nvidia.com/gpu.shared) with the virtual-GPU option, and the DRA strategy with the
DRA option. The facts and their sources: docs/conformance/dcgm-exporter.md.

Pure: no cluster access, no Ansible import.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    CONTROL_PLANE_TOLERATIONS, GPU_TOLERATION, MANAGED_BY, POOL_LABEL, SCOPE_LABEL, STRATEGY_LABEL,
    Manifest, StackError, check_name, config_checksum, mirror_image, strategy_label_error, valid_label_key,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dcgm, stack_metrics

PIN = 'dcgm-exporter'
# sha256 of the collectors ConfigMap on the pod template: the exporter reads the file once, so a change rolls the pods
CHECKSUM_ANNOTATION = 'checksum/config'
IMAGE = pins.ref(PIN)
APP = 'dcgm-exporter'
# the scope label of the exporter's objects: not 'pool', so the sharing stack's prune (stacks/render.prune_rules:
# managed-by, pool, scope pool) never takes them, and the exporter's own prune (prune_rules) takes only them
SCOPE = 'metrics'
PART_OF = 'gpu-metrics'
MONITORING_API = 'monitoring.coreos.com/v1'
# the prefix of every object name; a Service name is a DNS-1035 label of at most 63 characters
NAME_PREFIX = 'dcgm-exporter-'
MAX_POOL = 63 - len(NAME_PREFIX)
# the family of the DRA strategy in the model: devices claimed through ResourceClaims
DRA_FAMILY = 'dra'
SCRAPE_INTERVAL = '30s'
# the pool on every series: Prometheus' Kubernetes discovery gives a target's pod labels as
# __meta_kubernetes_pod_label_<name> with the name sanitised (prometheus v0.316.0 discovery/kubernetes/kubernetes.go,
# strutil.SanitizeLabelName); the ServiceMonitor copies the exporter pod's pool label to SERIES_POOL_LABEL
SERIES_POOL_LABEL = re.sub(r'[^a-zA-Z0-9_]', '_', POOL_LABEL)
# a registry mirror prefix: host[:port][/path]
_REGISTRY = re.compile(r'^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*/?$')
_DURATION = re.compile(r'^([0-9]+(ms|s|m|h|d|w|y))+$')
# the DRA exporter's API calls (DCGMX-22): two informers of client-go, which list and watch - the pods of every
# namespace (a field selector on NODE_NAME) and the ResourceSlices (cluster-scoped; resource.k8s.io/v1beta1); their
# listers read the informers' caches, so no get (the chart grants get as well; the least privilege leaves it out)
DRA_READS = (('', 'pods'), ('resource.k8s.io', 'resourceslices'))
DRA_VERBS = ('list', 'watch')
KINDS = (('v1', 'ConfigMap'), ('v1', 'ServiceAccount'), ('v1', 'Service'), ('apps/v1', 'DaemonSet'),
         ('rbac.authorization.k8s.io/v1', 'ClusterRole'), ('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding'))


def attribution(strategy: str) -> dict[str, Any] | None:
    """How the exporter attributes a pool's GPUs to pods, from the strategy model, or None where it cannot:
    {'dra': bool, 'virtual_gpus': bool, 'resource_names': [names beyond nvidia.com/gpu and nvidia.com/mig-*]}."""
    if strategy not in gpu_strategy.STRATEGIES:
        return None
    if gpu_strategy.family(strategy) == DRA_FAMILY:
        return {'dra': True, 'virtual_gpus': False, 'resource_names': []}
    if not gpu_strategy.strategy(strategy)['nvidia_plugin']:
        return None
    names = [r[0] for r in gpu_strategy.stack_info(strategy)['resources']]
    shared = gpu_strategy.GPU_SHARED[0]
    return {'dra': False, 'virtual_gpus': shared in names,
            'resource_names': [n for n in names if n != dcgm.DEFAULT_RESOURCE and not n.endswith('-')]}


# the strategies a pool's exporter can attribute (the module's choices; tests compare them with the DOCUMENTATION)
STRATEGIES = tuple(s for s in gpu_strategy.STRATEGIES if attribution(s) is not None)
# the module's choices: those, and the strategies whose stack serves metrics of its own (metrics/stack_metrics)
ALL_STRATEGIES = tuple(s for s in gpu_strategy.STRATEGIES if s in STRATEGIES or s in stack_metrics.STRATEGIES)


def monitoring_present(api: Any, option: str = 'monitoring_api') -> bool:
    """Whether the caller's discovery found the Prometheus Operator's API: a bool, or the cluster's api_versions (a
    list of group/version strings, as Ansible's k8s_cluster_info and `kubectl api-versions` give them)."""
    if isinstance(api, bool):
        return api
    if isinstance(api, (list, tuple)):
        return MONITORING_API in api
    raise StackError('%s must be a boolean or the list of the cluster\'s api_versions (e.g. [%s]); got %r'
                     % (option, MONITORING_API, api))


def _names(pool: str) -> str:
    return NAME_PREFIX + pool


def _check(params: dict[str, Any]) -> dict[str, Any]:
    strategy = params.get('strategy')
    if strategy not in ALL_STRATEGIES:
        why = ' (%s)' % stack_metrics.refusal(strategy) if strategy in gpu_strategy.STRATEGIES else ''
        raise StackError('strategy must be one of %s; got %r%s' % (', '.join(ALL_STRATEGIES), strategy, why))
    pool = check_name(params.get('pool'), 'pool')
    if len(pool) > MAX_POOL:
        raise StackError('pool must be at most %d characters (the Service %s<pool> is a 63-character DNS label); got '
                         '%r' % (MAX_POOL, NAME_PREFIX, pool))
    namespace = check_name(params.get('namespace') or 'kube-system', 'namespace')
    label_error = strategy_label_error(params.get('strategy_label', STRATEGY_LABEL))
    if label_error:
        raise StackError(label_error)
    extra = params.get('extra_labels') or {}
    if not isinstance(extra, dict):
        raise StackError('extra_labels must be a dictionary of label keys to values; got %r' % (extra,))
    for k, v in extra.items():
        if not valid_label_key(k) or not isinstance(v, str) or len(v) > 63:
            raise StackError('extra_labels: %r: %r is not a Kubernetes label (key: [prefix/]name; value: a string of at '
                             'most 63 characters)' % (k, v))
        if k in (POOL_LABEL, SCOPE_LABEL, 'app.kubernetes.io/managed-by', 'app.kubernetes.io/name'):
            raise StackError('extra_labels: %r is set by the collection (it selects the exporter\'s objects); choose '
                             'another key' % k)
    registry = params.get('registry') or ''
    if not isinstance(registry, str) or (registry and not _REGISTRY.match(registry)):
        raise StackError('registry must be a container image reference prefix, host[:port][/path] (e.g. '
                         'registry.example.com/mirror), or empty; got %r' % (registry,))
    interval = params.get('scrape_interval') or SCRAPE_INTERVAL
    if not isinstance(interval, str) or not _DURATION.match(interval):
        raise StackError('scrape_interval must be a Prometheus duration (e.g. 30s, 1m); got %r' % (interval,))
    selector = params.get('node_selector') or {}
    if not isinstance(selector, dict) or not all(valid_label_key(k) and isinstance(v, str) for k, v in selector.items()):
        raise StackError('node_selector must map Kubernetes label keys to string values; got %r' % (selector,))
    names = params.get('resource_names') or []
    if not isinstance(names, list) or not all(isinstance(n, str) and '/' in n for n in names):
        raise StackError('resource_names must be a list of extended resource names (e.g. nvidia.com/gpu.shared); got %r'
                         % (names,))
    return {'strategy': strategy, 'pool': pool, 'namespace': namespace, 'extra_labels': dict(extra),
            'node_selector': dict(selector), 'resource_names': list(names), 'registry': registry.rstrip('/'),
            'scrape_interval': interval,
            'strategy_label': params.get('strategy_label', STRATEGY_LABEL)}


def _meta(p: dict[str, Any], name: str, namespaced: bool = True,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = dict(p['extra_labels'])
    labels.update({'app.kubernetes.io/name': APP, 'app.kubernetes.io/instance': p['pool'],
                   'app.kubernetes.io/managed-by': MANAGED_BY, 'app.kubernetes.io/part-of': PART_OF,
                   POOL_LABEL: p['pool'], SCOPE_LABEL: SCOPE})
    meta: dict[str, Any] = {'name': name, 'labels': labels}
    if namespaced:
        meta['namespace'] = p['namespace']
    if annotations:
        meta['annotations'] = dict(annotations)
    return meta


def _selector(p: dict[str, Any]) -> dict[str, str]:
    return {'app.kubernetes.io/name': APP, POOL_LABEL: p['pool']}


def node_selector(pool: str, strategy: str, strategy_label: str = STRATEGY_LABEL,
                  extra: dict[str, str] | None = None) -> dict[str, str]:
    """The pool's nodes: the labels role gpu_node_labels writes on them (the pool label and the strategy label the
    site configures, gpu_node_labels_strategy_label), plus the pool's own node selector, as the stacks select them."""
    sel = {POOL_LABEL: pool, strategy_label: strategy}
    sel.update(extra or {})
    return sel


def prune_rules(pool: str, served: bool = False) -> list[dict[str, Any]]:
    """What k8s_converge may prune after applying a pool's exporter: its objects only (scope metrics); the
    ServiceMonitor kind wherever the monitoring.coreos.com/v1 API is served (``served``, detected by the caller),
    whatever form the render chose - a switch to scrape annotations removes the ServiceMonitor made before."""
    kinds = KINDS + ((MONITORING_API, 'ServiceMonitor'),) if served else KINDS
    labels = {'app.kubernetes.io/managed-by': MANAGED_BY, POOL_LABEL: pool, SCOPE_LABEL: SCOPE}
    return [{'label_selector': ','.join('%s=%s' % kv for kv in sorted(labels.items())),
             'kinds': [{'api_version': a, 'kind': k} for a, k in kinds]}]


def served_api(params: dict[str, Any], monitoring: bool) -> bool:
    """Whether the monitoring.coreos.com/v1 API is served, for the prune and the stale objects: params'
    monitoring_served (a bool or the api_versions) where given, else what the render's form says (monitoring)."""
    served = params.get('monitoring_served')
    found = monitoring_present(served, 'monitoring_served') if served is not None else False
    return monitoring or found


def stale_objects(monitors: list[tuple[str, str]], monitoring: bool, served: bool) -> list[Manifest]:
    """The other monitoring form's objects of a pool, by kind and name, that the caller removes (state absent: the
    prune covers state present): the ServiceMonitors (name, namespace) of the ServiceMonitor form where the API is
    served and the render made annotations."""
    if monitoring or not served:
        return []
    return [{'apiVersion': MONITORING_API, 'kind': 'ServiceMonitor', 'metadata': {'name': n, 'namespace': ns}}
            for n, ns in monitors]


def service_monitor_endpoint(port: str, interval: str, honor_labels: bool = True, pool_label: bool = True,
                             path: str = dcgm.METRICS_PATH) -> dict[str, Any]:
    """A ServiceMonitor endpoint on Service port ``port``. honor_labels: the series' own namespace, pod and container
    (the workload's) stay; without it the Operator's target labels of those names (the scraped pod's) win and the
    series' become exported_* (prometheus-operator v0.85.0 pkg/prometheus/promcfg.go; Prometheus' honor_labels;
    DCGMX-23). pool_label: the scraped pod's pool label copied to every series as SERIES_POOL_LABEL."""
    endpoint: dict[str, Any] = {'port': port, 'path': path, 'interval': interval}
    if honor_labels:
        endpoint['honorLabels'] = True
    if pool_label:
        endpoint['relabelings'] = [{'action': 'replace', 'targetLabel': SERIES_POOL_LABEL,
                                    'sourceLabels': ['__meta_kubernetes_pod_label_' + SERIES_POOL_LABEL]}]
    return endpoint


def render(params: dict[str, Any]) -> dict[str, Any]:
    """params: strategy, pool, namespace, registry (the mirror), image_pull_secrets, node_selector, strategy_label,
    settings (the pool's sharing settings: the runtime class its GPU pods use), resource_names (more resources to
    attribute), monitoring_api (bool or api_versions), monitoring_served (whether that API is served, for the prune
    and the stale objects; by default as monitoring_api), extra_labels, scrape_interval.
    Returns {'objects', 'image', 'attribution', 'monitoring', 'prune', 'stale', 'notes'}."""
    p = _check(params)
    if p['strategy'] in stack_metrics.STRATEGIES:  # the stack's own metrics, no dcgm-exporter
        return stack_metrics.render(p, params, monitoring_present(params.get('monitoring_api', False)))
    how = attribution(p['strategy'])
    if how is None:  # _check refused the others
        raise StackError('strategy %r has no exporter attribution' % p['strategy'])
    monitoring = monitoring_present(params.get('monitoring_api', False))
    served = served_api(params, monitoring)
    image = mirror_image(IMAGE, p['registry'], 'registry')
    name = _names(p['pool'])
    notes: list[str] = []

    csv = dcgm.collectors_csv()
    config = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': _meta(p, name),
              'data': {dcgm.COLLECTORS_KEY: csv}}
    account = {'apiVersion': 'v1', 'kind': 'ServiceAccount', 'metadata': _meta(p, name),
               'automountServiceAccountToken': how['dra']}

    resource_names = list(how['resource_names'])
    resource_names += [n for n in p['resource_names'] if n not in resource_names]
    env = [
        {'name': dcgm.ENV_COLLECTORS, 'value': dcgm.COLLECTORS_DIR + '/' + dcgm.COLLECTORS_KEY},
        {'name': dcgm.ENV_LISTEN, 'value': ':%d' % dcgm.PORT},
        {'name': dcgm.ENV_KUBERNETES, 'value': 'true'},
        {'name': dcgm.ENV_GPU_ID_TYPE, 'value': dcgm.GPU_ID_TYPE},
        {'name': dcgm.ENV_NODE_NAME, 'valueFrom': {'fieldRef': {'apiVersion': 'v1', 'fieldPath': 'spec.nodeName'}}},
    ]
    if how['virtual_gpus']:
        env.append({'name': dcgm.ENV_VIRTUAL_GPUS, 'value': 'true'})
    if resource_names:
        env.append({'name': dcgm.ENV_RESOURCE_NAMES, 'value': ','.join(resource_names)})
    if how['dra']:
        env.append({'name': dcgm.ENV_DRA, 'value': 'true'})
    probe: dict[str, Any] = {'httpGet': {'path': dcgm.HEALTH_PATH, 'port': dcgm.PORT, 'scheme': 'HTTP'},
                             'initialDelaySeconds': 45, 'periodSeconds': 5}
    container = {
        'name': 'exporter', 'image': image, 'imagePullPolicy': 'IfNotPresent', 'env': env,
        'ports': [{'name': dcgm.PORT_NAME, 'containerPort': dcgm.PORT}],
        'securityContext': {'runAsNonRoot': False, 'runAsUser': 0, 'allowPrivilegeEscalation': False,
                            'capabilities': {'add': ['SYS_ADMIN'], 'drop': ['ALL']}},
        'volumeMounts': [{'name': 'pod-gpu-resources', 'mountPath': dcgm.POD_RESOURCES_DIR, 'readOnly': True},
                         {'name': 'collectors', 'mountPath': dcgm.COLLECTORS_DIR, 'readOnly': True}],
        'livenessProbe': probe,
        'readinessProbe': {'httpGet': dict(probe['httpGet']), 'initialDelaySeconds': 45},
        'resources': {'limits': {'cpu': '200m', 'memory': '512Mi'}, 'requests': {'cpu': '100m', 'memory': '128Mi'}},
    }
    spec: dict[str, Any] = {
        'serviceAccountName': name, 'automountServiceAccountToken': how['dra'],
        'priorityClassName': 'system-node-critical',
        'nodeSelector': node_selector(p['pool'], p['strategy'], p['strategy_label'], p['node_selector']),
        'tolerations': [dict(GPU_TOLERATION)] + [dict(t) for t in CONTROL_PLANE_TOLERATIONS],
        'containers': [container],
        'volumes': [{'name': 'pod-gpu-resources', 'hostPath': {'path': dcgm.POD_RESOURCES_DIR, 'type': 'Directory'}},
                    {'name': 'collectors', 'configMap': {'name': name}}],
    }
    if how['virtual_gpus']:
        # per-process usage of a shared GPU: the exporter maps NVML's host PIDs to pods through /proc/<pid>/cgroup
        spec['hostPID'] = True
    # the pool's settings as the pools' plan gives them (gpu_sharing_stack_nvidia: ...) or as gpu_stack_manifests takes
    # them (nvidia: ...): the runtime class the pool's GPU pods use
    runtime_class = stacks_render.pod_runtime_class(p['strategy'], stack_metrics.pool_settings(params), 'settings.')
    if runtime_class:
        spec['runtimeClassName'] = runtime_class
    secrets = params.get('image_pull_secrets') or []
    if secrets:
        spec['imagePullSecrets'] = [{'name': s} for s in secrets]
    selector = _selector(p)
    template_labels = dict(p['extra_labels'])
    template_labels.update(selector)
    daemonset = {
        'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'metadata': _meta(p, name),
        'spec': {'selector': {'matchLabels': selector},
                 'updateStrategy': {'type': 'RollingUpdate', 'rollingUpdate': {'maxUnavailable': 1}},
                 'template': {'metadata': {'labels': template_labels,
                                           'annotations': {CHECKSUM_ANNOTATION: config_checksum(config)}},
                              'spec': spec}}}
    scrape = {} if monitoring else {'prometheus.io/scrape': 'true', 'prometheus.io/port': str(dcgm.PORT),
                                    'prometheus.io/path': dcgm.METRICS_PATH}
    service = {'apiVersion': 'v1', 'kind': 'Service', 'metadata': _meta(p, name, annotations=scrape),
               'spec': {'type': 'ClusterIP', 'selector': dict(selector),
                        'ports': [{'name': dcgm.PORT_NAME, 'port': dcgm.PORT, 'targetPort': dcgm.PORT_NAME,
                                   'protocol': 'TCP'}]}}
    objects: list[Manifest] = [account, config]
    if how['dra']:
        role_name = 'gpuops-' + name
        objects.append({'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRole',
                        'metadata': _meta(p, role_name, namespaced=False),
                        'rules': [{'apiGroups': [group], 'resources': [resource], 'verbs': list(DRA_VERBS)}
                                  for group, resource in DRA_READS]})
        objects.append({'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRoleBinding',
                        'metadata': _meta(p, role_name, namespaced=False),
                        'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole', 'name': role_name},
                        'subjects': [{'kind': 'ServiceAccount', 'name': name, 'namespace': p['namespace']}]})
        notes.append('DRA attribution reads ResourceSlices through resource.k8s.io/v1beta1 (dcgm-exporter %s): the API '
                     'server must serve that version, which Kubernetes 1.34 and later do not by default (a 1.37.2 '
                     'kube-apiserver lists only v1) - enable it with --runtime-config=resource.k8s.io/v1beta1=true, '
                     'else the DRA labels stay empty' % pins.pin(PIN)['upstream_ref'])
    objects += [daemonset, service]
    if monitoring:
        objects.append({
            'apiVersion': MONITORING_API, 'kind': 'ServiceMonitor', 'metadata': _meta(p, name),
            'spec': {'selector': {'matchLabels': dict(selector)},
                     'namespaceSelector': {'matchNames': [p['namespace']]},
                     'endpoints': [service_monitor_endpoint(dcgm.PORT_NAME, p['scrape_interval'])]}})
    return {'objects': objects, 'image': image, 'monitoring': monitoring, 'notes': notes,
            'attribution': {'pods': True, 'virtual_gpus': how['virtual_gpus'], 'dra': how['dra'],
                            'resource_names': [dcgm.DEFAULT_RESOURCE] + resource_names,
                            'mig_instances': True},
            'prune': prune_rules(p['pool'], served),
            'stale': stale_objects([(name, p['namespace'])], monitoring, served)}


def rule_objects(rules: Any, name: str, namespace: str = 'kube-system', monitoring_api: Any = False,
                 labels: dict[str, str] | None = None) -> list[Manifest]:
    """A rule file (``{'groups': [...]}``, from metrics/rules) as a PrometheusRule where the monitoring.coreos.com/v1
    API is present, else as a ConfigMap holding the file (key ``<name>.rules.yml``, JSON text, which is YAML) for a
    Prometheus that reads rule files."""
    if not isinstance(rules, dict) or not isinstance(rules.get('groups'), list):
        raise StackError('rules must be a rule file: a dictionary with a list under "groups"; got %r' % (rules,))
    name = check_name(name, 'name')
    namespace = check_name(namespace, 'namespace')
    meta_labels = dict(labels or {})
    meta_labels.update({'app.kubernetes.io/managed-by': MANAGED_BY, 'app.kubernetes.io/part-of': PART_OF})
    meta = {'name': name, 'namespace': namespace, 'labels': meta_labels}
    if monitoring_present(monitoring_api):
        return [{'apiVersion': MONITORING_API, 'kind': 'PrometheusRule', 'metadata': meta,
                 'spec': {'groups': rules['groups']}}]
    return [{'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': meta,
             'data': {name + '.rules.yml': json.dumps({'groups': rules['groups']}, indent=2, sort_keys=True) + '\n'}}]
