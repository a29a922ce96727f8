# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_metrics: whether a CustomResourceDefinition read by name serves its kind."""

from __future__ import annotations

DOCUMENTATION = r'''
name: gpu_metrics_crd_served
short_description: Whether a CustomResourceDefinition looked up by name serves its kind
version_added: 0.1.0
description:
  - True when the CRD is there, its C(Established) condition is C(True) and it is not being deleted
    (no C(metadata.deletionTimestamp)).
  - A CRD being deleted refuses every create of its kind while the API server deletes its objects (a finalizer on one
    of them keeps it so for as long as it stays); one not Established yet is not ready (the condition clients wait
    for). Role
    C(gpuops.k8s_gpu.gpu_metrics) reads the Prometheus Operator's CRDs so, to choose the monitoring form
    (C(gpu_metrics_monitoring=auto)) and to know whether the other form's objects can be removed.
options:
  _input:
    description: What C(gpuops.k8s_gpu.k8s_objects_info) returned for the CRD's name (a list, empty when the CRD is not
      there), with C(metadata.deletionTimestamp) and C(status.conditions) among its fields.
    type: list
    elements: dict
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Is the ServiceMonitor kind served?
  ansible.builtin.set_fact:
    servicemonitors_served: "{{ crds.objects.servicemonitors | gpuops.k8s_gpu.gpu_metrics_crd_served }}"
'''

RETURN = r'''
_value:
  description: True when the CRD serves its kind.
  type: bool
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import cluster
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError


def gpu_metrics_crd_served(found: Any) -> bool:
    try:
        return cluster.crd_served(found)
    except StackError as e:
        raise AnsibleFilterError('gpu_metrics_crd_served: %s' % e)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'gpu_metrics_crd_served': gpu_metrics_crd_served}
