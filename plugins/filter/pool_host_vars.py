# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_sharing_stack: what it reads from the inventory about a pool's nodes, each host read once."""

from __future__ import annotations

DOCUMENTATION = r'''
name: pool_host_vars
short_description: The inventory variables role gpu_sharing_stack reads about a pool's nodes
version_added: 0.1.0
description:
  - For every node name of the pool that is an inventory host, its C(gpu_probe_facts), C(gpu_sharing_stack_strategy),
    C(nvidia_container_runtime_cdi_spec_ready) and C(nvidia_container_runtime_cdi) (only those defined), each host's
    variables read once.
extends_documentation_fragment:
  - gpuops.k8s_gpu.inventory_vars
options:
  _input:
    description: Kubernetes node names of the pool (C(gpu_sharing_stack_nodes)).
    type: list
    elements: str
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Collect what the inventory says about the pool's nodes
  ansible.builtin.set_fact:
    pool_vars: "{{ ['gpu-1', 'gpu-2'] | gpuops.k8s_gpu.pool_host_vars(hostvars) }}"
'''

RETURN = r'''
_value:
  description: C(facts), C(node_strategies), C(cdi_spec_ready) and C(cdi_enabled), each a mapping of node name to value.
  type: dict
'''

# the filter is pool_plan's function itself (hosts, hostvars)
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import pool_host_vars


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'pool_host_vars': pool_host_vars}
