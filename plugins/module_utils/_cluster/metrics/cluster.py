# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster-wide objects of role gpu_metrics (filter gpu_metrics_objects): the collection's alert rules (metrics/rules,
from the doctor's knowledge) as a PrometheusRule or a rules ConfigMap, and the Grafana dashboard (metrics/dashboard) as
a ConfigMap a Grafana dashboard sidecar provisions. The per-pool exporter objects are module gpu_metrics_manifests'."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard, exporter, rules
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError, check_name

RULES_NAME = 'gpuops-gpu-alerts'
DASHBOARD_NAME = 'gpuops-gpu-dashboard'
# what the role may prune of its own: these objects carry the managed-by and part-of labels and this scope
SCOPE = 'metrics-cluster'


def _labels() -> dict[str, str]:
    return {'app.kubernetes.io/managed-by': exporter.MANAGED_BY, 'app.kubernetes.io/part-of': exporter.PART_OF,
            exporter.SCOPE_LABEL: SCOPE}


def objects(monitoring_api: Any = False, namespace: str = 'kube-system', alert_rules: bool = True,
            rules_options: dict[str, Any] | None = None, grafana_dashboard: bool = True) -> list[dict[str, Any]]:
    """The rules (PrometheusRule where monitoring.coreos.com/v1 is served, else a ConfigMap) and the dashboard
    ConfigMap; StackError for bad input, naming the option."""
    namespace = check_name(namespace, 'namespace')
    if not isinstance(alert_rules, bool) or not isinstance(grafana_dashboard, bool):
        raise StackError('alert_rules and grafana_dashboard must be true or false; got %r and %r'
                         % (alert_rules, grafana_dashboard))
    out: list[dict[str, Any]] = []
    if alert_rules:
        doc = rules.alert_rules(rules_options or {})
        out += exporter.rule_objects(doc, RULES_NAME, namespace, monitoring_api=monitoring_api, labels=_labels())
        for obj in out:
            obj['metadata']['labels'][exporter.SCOPE_LABEL] = SCOPE
    if grafana_dashboard:
        out.append(dashboard.config_map(DASHBOARD_NAME, namespace, _labels()))
    return out


def _rules_name(kind: str, namespace: str) -> dict[str, Any]:
    api = exporter.MONITORING_API if kind == 'PrometheusRule' else 'v1'
    return {'apiVersion': api, 'kind': kind, 'metadata': {'name': RULES_NAME, 'namespace': namespace}}


def names(monitoring_api: Any = False, namespace: str = 'kube-system', alert_rules: bool = True,
          grafana_dashboard: bool = True, served: Any = None) -> list[dict[str, Any]]:
    """Every object objects() may make with these flags, by kind and name, whatever the rule options (state absent
    removes them); the PrometheusRule where its API is served (``served``, detected: a bool or the api_versions; by
    default as monitoring_api), whichever form is asked now."""
    namespace = check_name(namespace, 'namespace')
    out: list[dict[str, Any]] = []
    if alert_rules:
        if _served(monitoring_api, served):
            out.append(_rules_name('PrometheusRule', namespace))
        out.append(_rules_name('ConfigMap', namespace))
    if grafana_dashboard:
        out.append({'apiVersion': 'v1', 'kind': 'ConfigMap',
                    'metadata': {'name': DASHBOARD_NAME, 'namespace': namespace}})
    return out


def _served(monitoring_api: Any, served: Any) -> bool:
    found = exporter.monitoring_present(served, 'served') if served is not None else False
    return exporter.monitoring_present(monitoring_api) or found


def stale(monitoring_api: Any = False, namespace: str = 'kube-system', alert_rules: bool = True,
          served: Any = None) -> list[dict[str, Any]]:
    """The rules' other form, by kind and name, that a present run removes after a switch of form: the rules ConfigMap
    where the PrometheusRule is rendered, the PrometheusRule where the ConfigMap is rendered and the API is served
    (``served``; by default as monitoring_api). Nothing without alert_rules (the rules are then left alone)."""
    namespace = check_name(namespace, 'namespace')
    if not alert_rules:
        return []
    if exporter.monitoring_present(monitoring_api):
        return [_rules_name('ConfigMap', namespace)]
    if _served(monitoring_api, served):
        return [_rules_name('PrometheusRule', namespace)]
    return []


def crd_served(found: Any) -> bool:
    """Whether a CustomResourceDefinition that was looked up by name serves its kind: ``found`` is what
    k8s_objects_info returned for that name (a list: empty when the CRD is not there; metadata.deletionTimestamp and
    status.conditions read). Served means Established and not being deleted: a CRD being deleted (the API server
    deletes its objects first, and a finalizer on one of them keeps it so for as long as it stays) refuses every create
    of its kind ("create not allowed while custom resource definition is terminating"), and one not Established yet is
    not ready (the condition clients wait for; apiextensions-apiserver v0.37.2 customresource_handler.go). So a form
    switch driven by the CRDs moves to the scrape annotations as soon as the Prometheus Operator's CRDs are being
    removed, and back only once they are Established again."""
    if found is None:
        return False
    if not isinstance(found, list) or not all(isinstance(o, dict) for o in found):
        raise StackError('the CRD read must be a list of objects (k8s_objects_info); got %r' % (found,))
    for crd in found:
        if (crd.get('metadata') or {}).get('deletionTimestamp'):
            continue
        conditions = (crd.get('status') or {}).get('conditions') or []
        if any(isinstance(c, dict) and c.get('type') == 'Established' and c.get('status') == 'True'
               for c in conditions):
            return True
    return False
