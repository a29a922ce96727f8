# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the cluster-layer playbooks: the sharing pools of the GPU nodes (planning in Python, called once per run)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: sharing_pools
short_description: The sharing pools of the GPU nodes, from the inventory
version_added: 0.1.0
description:
  - A node's pool is its C(gpuops_sharing_pool) variable, else the one group it is in below O(node_group) that is
    not a layer group, else O(node_group) itself. The Kubernetes pool name is the group name in lower case with
    C(_) replaced by C(-); it must be a DNS label. Every node of a pool has the same C(gpuops_sharing_strategy)
    (default C(exclusive)).
  - Reads each host's variables once. Used by the playbooks C(gpuops.k8s_gpu.cluster), C(report), C(doctor) and
    C(uninstall), once per run.
extends_documentation_fragment:
  - gpuops.k8s_gpu.inventory_vars.groups
options:
  node_group:
    description: Group of the GPU nodes.
    type: str
    default: gpu_nodes
  layer_groups:
    description: More groups that are not pools (besides C(all), C(ungrouped), O(node_group), C(esxi_gpu_vms),
      C(kube_control_plane) and C(rke_controller)).
    type: list
    elements: str
    default: []
  settings:
    description: Variable names copied from each pool's first host into the pool's C(settings) (only those defined).
    type: list
    elements: str
    default: []
  facts:
    description:
      - Which hosts' C(gpu_probe_facts) go into each pool's C(facts). V(all) every host's. V(renamed) only those of the
        hosts whose Kubernetes node name (C(gpu_node_labels_node_name)) is not their inventory name - role
        C(gpuops.k8s_gpu.gpu_sharing_stack) reads the others from C(hostvars) itself, and facts in the pools are carried
        through every task that passes a pool (the cluster playbooks use V(renamed)).
    type: str
    choices: [all, renamed]
    default: all
  agreement:
    description:
      - Also refuse pools of one strategy whose settings that go into the objects they share differ (HAMi's
        scheduler, Volcano's configs, gpushare's extender, gpu-manager's admission, the GPU operator's release),
        and a C(gpu-operator) pool beside a C(mig) pool with the MIG manager. Playbook C(gpuops.k8s_gpu.uninstall)
        passes V(false) - removing such pools is how a site gets out of that state.
    type: bool
    default: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Plan the pools once
  ansible.builtin.set_fact:
    pools: "{{ groups | gpuops.k8s_gpu.sharing_pools(hostvars, settings=['gpu_sharing_stack_namespace']) }}"
'''

RETURN = r'''
_value:
  description:
    - C(pools) (sorted by name; each with C(name), C(group), C(strategy), C(hosts), C(nodes), C(first), C(settings)
      and C(facts) - Kubernetes node name to C(gpu_probe_facts), see O(facts)), C(label_pools) (for role
      C(gpuops.k8s_gpu.gpu_node_labels)), C(needs_extender) (a pool needs the kube-scheduler extender) and
      C(errors) (empty when the pools are consistent).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import sharing_pools as _plan


def sharing_pools(groups: Any, hostvars: Any, node_group: str = 'gpu_nodes', layer_groups: list[str] | None = None,
                  settings: list[str] | None = None, facts: str = 'all', agreement: bool = True) -> dict[str, Any]:
    if not hasattr(groups, 'get'):
        raise AnsibleFilterError('sharing_pools: expected the groups mapping, got %s' % type(groups).__name__)
    try:
        return _plan(groups, hostvars, node_group=node_group, layer_groups=layer_groups, settings=settings,
                     facts=facts, agreement=agreement)
    except ValueError as e:
        raise AnsibleFilterError(str(e))


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'sharing_pools': sharing_pools}
