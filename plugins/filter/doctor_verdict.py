# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of playbooks node.yml and upgrade_driver.yml: the doctor's verdict on a node (the pool gate)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: doctor_verdict
short_description: The doctor's verdict on a node, for the pool gate
version_added: 0.1.0
description:
  - Turns a M(gpuops.k8s_gpu.gpu_doctor) result into the node's verdict. With O(gate=enforce) a node with a critical
    finding is gated - the pool planning (C(gpuops.k8s_gpu.sharing_pools)) leaves it out of its pool's labels.
  - A gate other than V(enforce), V(warn), V(off) is an error naming C(gpuops_doctor_gate).
options:
  _input:
    description: The registered gpu_doctor result (a skipped task counts as not diagnosed).
    type: dict
    required: true
  gate:
    description: V(enforce) (gate critical nodes), V(warn) (report only) or V(off).
    type: str
    default: enforce
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Record the verdict
  ansible.builtin.set_fact:
    gpuops_doctor_verdict: "{{ gpuops_doctor_result | gpuops.k8s_gpu.doctor_verdict(gpuops_doctor_gate | default('enforce')) }}"
'''

RETURN = r'''
_value:
  description: "gate, gated (bool), ran, healthy, critical (ids), warning (ids), message."
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor.gpu_doctor_gate import GateError, verdict


def doctor_verdict(result: Any, gate: str = 'enforce') -> Any:
    try:
        return verdict(result, gate)
    except GateError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'doctor_verdict': doctor_verdict}
