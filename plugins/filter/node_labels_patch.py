# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_node_labels: what to patch on each node, from its plan and the Node objects of the cluster."""

from __future__ import annotations

DOCUMENTATION = r'''
name: node_labels_patch
short_description: What to patch on each GPU node, from the label plan and the Node objects read from the cluster
version_added: 0.1.0
description:
  - For every node of the plan (the output of P(gpuops.k8s_gpu.node_labels_plan#filter)), the JSON merge patch on its
    metadata that sets the desired labels and, for O(state=absent), removes or restores the labels the role recorded
    in its annotation; labels set by others are kept.
  - Refuses (in C(errors)) a strategy label set by someone else, a record annotation that is not the role's JSON,
    and, with O(check_resources), a node that advertises GPU resources of another accounting family than the
    node's strategy (memory-based and whole-GPU accounting never share a GPU) or is registered with HAMi.
options:
  _input:
    description: The label plan (output of P(gpuops.k8s_gpu.node_labels_plan#filter)).
    type: dict
    required: true
  live:
    description: Node objects (C(resources) of C(kubernetes.core.k8s_info)).
    type: list
    elements: dict
    required: true
  state:
    description: C(present) sets the labels; C(absent) removes or restores only the recorded ones.
    type: str
    default: present
  strategy_label:
    description: Label that carries the strategy.
    type: str
    default: gpuops.io/sharing-strategy
  record_annotation:
    description: Annotation with the record of the labels the role set.
    type: str
    default: gpuops.io/managed-labels
  check_resources:
    description: Refuse a node that advertises resources of another accounting.
    type: bool
    default: true
  fail_on_missing_nodes:
    description: A node of the plan that is not in the cluster is an error (else it is reported as not found).
    type: bool
    default: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Work out what to patch on each node
  ansible.builtin.set_fact:
    patches: "{{ plan | gpuops.k8s_gpu.node_labels_patch(nodes.resources) }}"
'''

RETURN = r'''
_value:
  description:
    - C(nodes) (each with C(host), C(node), C(found), C(changed), C(strategy), C(pools), C(patch), C(set),
      C(removed), C(restored), C(kept)) and C(errors).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan import label_live_plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL


def node_labels_patch(plan: dict[str, Any], live: list[dict[str, Any]] | None, state: str = 'present',
                      strategy_label: str = STRATEGY_LABEL,
                      record_annotation: str = 'gpuops.io/managed-labels', check_resources: bool = True,
                      fail_on_missing_nodes: bool = True) -> dict[str, Any]:
    return label_live_plan(plan, live, state=state, strategy_label=strategy_label, record_annotation=record_annotation,
                           check_resources=check_resources, fail_on_missing_nodes=fail_on_missing_nodes)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'node_labels_patch': node_labels_patch}
