# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_metrics: the cluster-wide metrics objects (alert rules, dashboard)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: gpu_metrics_objects
short_description: The collection's GPU alert rules and Grafana dashboard as Kubernetes objects
version_added: 0.1.0
description:
  - The alert rules built from the doctor's knowledge (fatal Xid, ECC and row remapping, throttling, idle allocations,
    use beyond a share) as a C(PrometheusRule) where the input says C(monitoring.coreos.com/v1) is served, else a
    ConfigMap holding the rule file; and the Grafana dashboard as a ConfigMap labelled C(grafana_dashboard) that a
    Grafana dashboard sidecar provisions.
  - Rendering only, on the controller; role C(gpuops.k8s_gpu.gpu_metrics) applies the objects.
options:
  _input:
    description: Whether the cluster serves C(monitoring.coreos.com/v1) (the Prometheus Operator's API).
    type: bool
    required: true
  namespace:
    description: Namespace of the objects.
    type: str
    default: kube-system
  alert_rules:
    description: Render the alert rules.
    type: bool
    default: true
  rules_options:
    description: Options of the alert rules (thresholds, durations, selectors, extra labels); see docs/observability.md.
    type: dict
    default: {}
  grafana_dashboard:
    description: Render the dashboard ConfigMap.
    type: bool
    default: true
  served:
    description:
      - Whether the cluster serves C(monitoring.coreos.com/v1), detected (for example from the Prometheus Operator's
        CRDs), whatever form O(_input) asks; by default as O(_input). It decides whether V(absent) and V(stale) name
        the C(PrometheusRule).
    type: bool
  state:
    description:
      - V(absent) returns every object the filter may render with O(alert_rules) and O(grafana_dashboard) (by kind and
        name), whatever O(rules_options); the C(PrometheusRule) where O(served).
      - V(stale) returns, by kind and name, the rules' other form that a V(present) run removes after a switch of form -
        the rules ConfigMap where the C(PrometheusRule) is rendered, the C(PrometheusRule) where the ConfigMap is
        rendered and O(served) - and nothing when O(alert_rules) is false.
    type: str
    choices: [present, absent, stale]
    default: present
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: The rules and the dashboard for a cluster with the Prometheus Operator
  ansible.builtin.set_fact:
    metrics_objects: "{{ true | gpuops.k8s_gpu.gpu_metrics_objects(namespace='monitoring') }}"

- name: Scrape annotations asked while the Operator's API is served - the PrometheusRule made before, to remove
  ansible.builtin.set_fact:
    stale_objects: "{{ false | gpuops.k8s_gpu.gpu_metrics_objects(namespace='monitoring', served=true, state='stale') }}"
'''

RETURN = r'''
_value:
  description: Kubernetes objects (dictionaries), in apply order.
  type: list
  elements: dict
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import cluster, rules
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError


def gpu_metrics_objects(monitoring_api: Any, namespace: str = 'kube-system', alert_rules: bool = True,
                        rules_options: dict[str, Any] | None = None, grafana_dashboard: bool = True,
                        state: str = 'present', served: Any = None) -> list[Any]:
    try:
        if state == 'absent':
            return cluster.names(monitoring_api, namespace, alert_rules, grafana_dashboard, served)
        if state == 'stale':
            return cluster.stale(monitoring_api, namespace, alert_rules, served)
        if state != 'present':
            raise StackError("state must be present, absent or stale; got %r" % (state,))
        return cluster.objects(monitoring_api, namespace, alert_rules, rules_options, grafana_dashboard)
    except (StackError, rules.RulesError, ValueError) as e:
        raise AnsibleFilterError('gpu_metrics_objects: %s' % e)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'gpu_metrics_objects': gpu_metrics_objects}
