# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_node_labels: the labels every node of the group should carry (no cluster access)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: node_labels_plan
short_description: Desired labels of every GPU node and every input error, without reading the cluster
version_added: 0.1.0
description:
  - Merges each host's GFD-style labels (C(gpu_probe_facts.labels)), the extra labels and the labels of its sharing
    pools (strategy label, C(gpushare=true), C(nvidia.com/device-plugin.config)), and collects every error of the
    input - a node with two strategies, pools that give one label two values, a strategy the node's GPUs do not
    allow, invalid label keys or values, unknown groups and hosts.
  - Used by role C(gpuops.k8s_gpu.gpu_node_labels), once per run; the options are the role's variables.
extends_documentation_fragment:
  - gpuops.k8s_gpu.inventory_vars.groups
options:
  group:
    description: Group of the nodes to label; empty for none (only the nodes of O(stacks)).
    type: str
    default: gpu_nodes
  pools:
    description: Sharing pools (role variable C(gpu_node_labels_pools)).
    type: list
    elements: dict
    default: []
  state:
    description: C(present) or C(absent) (errors of the nodes count only for C(present)).
    type: str
    default: present
  gfd_labels:
    description: Apply C(gpu_probe_facts.labels).
    type: bool
    default: true
  require_facts:
    description: A host without C(gpu_probe_facts.labels) is an error.
    type: bool
    default: true
  extra:
    description: Labels for every node.
    type: dict
    default: {}
  strategy_label:
    description: Label that carries the strategy.
    type: str
    default: gpuops.io/sharing-strategy
  check_capabilities:
    description: Refuse a strategy that C(gpu_probe_facts.sharing) says the node does not allow.
    type: bool
    default: true
  stacks:
    description:
      - Pool name to the render result of the pool's sharing stack (M(gpuops.k8s_gpu.gpu_stack_manifests) -
        C(node_labels), C(node_label_defaults); role C(gpuops.k8s_gpu.gpu_sharing_stack) publishes them as
        C(gpu_sharing_stack_rendered)). Their labels join the plan; a label a pool sets to another value is an error.
      - A stack's node that is no host of O(group) gets its own entry with the stack's labels only.
    type: dict
    default: {}
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Work out the labels of every node
  ansible.builtin.set_fact:
    plan: "{{ groups | gpuops.k8s_gpu.node_labels_plan(hostvars, group='gpu_nodes', pools=my_pools) }}"
'''

RETURN = r'''
_value:
  description:
    - C(nodes) (each with C(host), C(node), C(strategy), C(pools), C(labels), C(defaults) - set only where the node
      has no value - and C(claimed) - the stacks' labels) and C(errors).
  type: dict
'''

from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan import label_static_plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL


def node_labels_plan(groups: Mapping[str, Any], hostvars: Mapping[str, Any], group: str = 'gpu_nodes',
                     pools: list[dict[str, Any]] | None = None, state: str = 'present', gfd_labels: bool = True,
                     require_facts: bool = True, extra: dict[str, Any] | None = None,
                     strategy_label: str = STRATEGY_LABEL, check_capabilities: bool = True,
                     stacks: Any = None) -> dict[str, Any]:
    return label_static_plan(groups, hostvars, group=group, pools=pools, state=state, gfd_labels=gfd_labels,
                             require_facts=require_facts, extra=extra, strategy_label=strategy_label,
                             check_capabilities=check_capabilities, stacks=stacks)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'node_labels_plan': node_labels_plan}
