# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of playbooks/report.yml: the doctor's verdicts of the GPU nodes, by Kubernetes node name."""

from __future__ import annotations

DOCUMENTATION = r'''
name: doctor_health
short_description: The doctor's verdicts of hosts, by Kubernetes node name, for the share report's health column
version_added: 0.1.0
description:
  - Collects the host fact C(gpuops_doctor_verdict) (recorded by playbooks/node.yml with
    P(gpuops.k8s_gpu.doctor_verdict#filter)) of each host that has one, keyed by the host's Kubernetes node name
    (C(gpu_node_labels_node_name), else the inventory name). Hosts without a verdict are left out.
  - The result is the O(gpuops.k8s_gpu.gpu_share_report#module:node_health) option of M(gpuops.k8s_gpu.gpu_share_report).
extends_documentation_fragment:
  - gpuops.k8s_gpu.inventory_vars
options:
  _input:
    description: The hosts (a list of inventory names, for example C(groups['gpu_nodes'])).
    type: list
    elements: str
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: The report with a health column
  gpuops.k8s_gpu.gpu_share_report:
    node_health: "{{ groups['gpu_nodes'] | gpuops.k8s_gpu.doctor_health(hostvars) }}"
'''

RETURN = r'''
_value:
  description: Kubernetes node name -> the verdict (gate, gated, ran, healthy, critical, warning, info, message).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor.gpu_doctor_gate import health_by_node


def doctor_health(hosts: Any, hostvars: Any) -> Any:
    return health_by_node(hosts, hostvars)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'doctor_health': doctor_health}
