# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of playbook migrate_to_dra: what the migration does with each node (no cluster access)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: strategy_migration_plan
short_description: Each node's step of a move between a device-plugin pool and a dra pool
version_added: 0.1.0
description:
  - From the Nodes read from the cluster, the hosts to move (C(host), C(node)) and the two pools, each node's step -
    C(migrate) (on the source pool), C(resume) (on the target pool with the migration's mark, a run that stopped after
    the switch), C(skip) (on the target pool already) - with the labels after the switch for role C(gpuops.k8s_gpu.gpu_node_labels)
    and what shows the target's plugin serving the node; and every error (a node in neither pool or not in the
    cluster, one side not a dra pool). Used by playbook C(gpuops.k8s_gpu.migrate_to_dra).
positional: hosts, source, target, accept_capacity_loss, strategy_label
options:
  _input:
    description: Node objects (C(resources) of C(kubernetes.core.k8s_info)).
    type: list
    elements: dict
    required: true
  hosts:
    description: The hosts to move, in order, each C({host, node}).
    type: list
    elements: dict
    required: true
  source:
    description:
      - The pool the nodes leave - C(pool), C(strategy), C(labels) (its stack's node labels), C(resource).
      - Without C(labels), the labels the pool's stack gives every node that do not come from its settings (the NVIDIA
        device plugin's C(nvidia.com/device-plugin.config) with the strategy's own config, the GPU operator's
        confinement C(nvidia.com/gpu.deploy.operands=false)). A node moving off the pool loses every label its stack
        may give; one moving onto it gets these, and the step's C(unset) names those only the pool's settings give.
    type: dict
    required: true
  target:
    description: The pool the nodes join, as O(source).
    type: dict
    required: true
  accept_capacity_loss:
    description:
      - Move a node although it then holds fewer pods - a device plugin that shares each GPU N ways (time-slicing,
        MPS; GFD's C(nvidia.com/gpu.replicas), else the collection's record C(gpuops.io/sharing-replicas)) runs N pods per
        GPU, a dra pool one claim per device. Without it such a
        node is an error naming the numbers.
    type: bool
    default: false
  strategy_label:
    description:
      - The node label that records the sharing strategy of the node's pool, as role C(gpuops.k8s_gpu.gpu_node_labels)
        writes it (its C(gpu_node_labels_strategy_label)); a node's pool is read from it and the switch writes it.
      - Must be a Kubernetes label key (C([prefix/]name)).
    type: str
    default: gpuops.io/sharing-strategy
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Plan the move
  ansible.builtin.set_fact:
    plan: "{{ nodes.resources | gpuops.k8s_gpu.strategy_migration_plan(hosts, {'pool': 'ts', 'strategy': 'time-slicing'},
             {'pool': 'dra', 'strategy': 'dra'}) }}"
'''

RETURN = r'''
_value:
  description: C(steps) (each C(host), C(node), C(action), C(reason), C(labels), C(stacks), C(wait), C(leave), C(from), C(to),
    C(capacity) - C(resource), C(before), C(after), C(replicas) when the move holds fewer pods, else null; C(unset) - the
    target pool's labels the switch cannot set, from the pool's settings) and C(errors).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL, strategy_label_error
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.strategy_migration import migration_plan


def strategy_migration_plan(nodes: list[dict[str, Any]] | None, hosts: list[dict[str, Any]] | None, source: Any, target: Any,
                            accept_capacity_loss: bool = False, strategy_label: str = STRATEGY_LABEL) -> dict[str, Any]:
    if not isinstance(nodes, list) or not isinstance(hosts, list):
        raise AnsibleFilterError('strategy_migration_plan: expected lists of nodes and hosts')
    if not isinstance(accept_capacity_loss, bool):
        raise AnsibleFilterError('gpuops_migrate_accept_capacity_loss must be true or false; got %r' % (accept_capacity_loss,))
    error = strategy_label_error(strategy_label, 'gpu_node_labels_strategy_label')
    if error:
        raise AnsibleFilterError(error)
    return migration_plan(nodes, hosts, source, target, accept_capacity_loss, strategy_label)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'strategy_migration_plan': strategy_migration_plan}
