# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: which pods still hold a node (the rule of module gpu_node_drain, for playbooks that list pods themselves)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: upgrade_pods_left
short_description: Pods that still hold a node after a drain or while waiting for jobs
version_added: 0.1.0
description:
  - From the pods C(kubernetes.core.k8s_info) listed on a node, the ones that still hold it - not finished
    (phase other than C(Succeeded) or C(Failed)), not mirror (static) pods, and not DaemonSet pods when
    O(ignore_daemonsets) is true. A pod being deleted (C(deletionTimestamp) set) still holds the node.
  - The rule module M(gpuops.k8s_gpu.gpu_node_drain) applies to the pods it waits for, for playbooks that list pods
    themselves.
positional: ignore_daemonsets
options:
  _input:
    description: Pod objects (C(resources) of C(kubernetes.core.k8s_info)).
    type: list
    elements: dict
    required: true
  ignore_daemonsets:
    description: DaemonSet pods do not hold the node (as C(kubectl drain --ignore-daemonsets)).
    type: bool
    default: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Stop when pods remain after the drain
  ansible.builtin.assert:
    that: pods.resources | gpuops.k8s_gpu.upgrade_pods_left | length == 0
'''

RETURN = r'''
_value:
  description: C(namespace/name) of each pod that still holds the node, sorted; empty when none does.
  type: list
  elements: str
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.gpu_sharing_drain import pods_holding


def upgrade_pods_left(pods: list[dict[str, Any]], ignore_daemonsets: bool = True) -> list[str]:
    if not isinstance(pods, list):
        raise AnsibleFilterError('upgrade_pods_left: expected a list of pods, got %s' % type(pods).__name__)
    # the rule module gpu_node_drain applies (one implementation)
    return pods_holding(pods, ignore_daemonsets)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'upgrade_pods_left': upgrade_pods_left}
