# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of playbook cluster.yml: the GPU nodes this run has no GPU facts for."""

from __future__ import annotations

DOCUMENTATION = r'''
name: unprobed_hosts
short_description: The hosts that have no gpu_probe_facts
version_added: 0.1.0
description:
  - The hosts of the input that have no C(gpu_probe_facts) variable, in order, each host's variables read once.
  - The probe plays of C(gpuops.k8s_gpu.cluster) and C(gpuops.k8s_gpu.report) end at once when there are none, without a
    task per node.
extends_documentation_fragment:
  - gpuops.k8s_gpu.inventory_vars
options:
  _input:
    description: Inventory host names.
    type: list
    elements: str
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: End the play when every node has facts
  ansible.builtin.meta: end_play
  when: groups['gpu_nodes'] | gpuops.k8s_gpu.unprobed_hosts(hostvars) | length == 0
'''

RETURN = r'''
_value:
  description: The host names without C(gpu_probe_facts).
  type: list
  elements: str
'''

# the filter is pool_plan's function itself (hosts, hostvars)
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import unprobed_hosts


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'unprobed_hosts': unprobed_hosts}
