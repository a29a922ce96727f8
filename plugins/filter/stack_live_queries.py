# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_sharing_stack: what a pool's stack reads from the cluster before it renders, in one module run."""

from __future__ import annotations

DOCUMENTATION = r'''
name: stack_live_queries
short_description: What a sharing stack reads from the cluster before it renders (the arguments of k8s_objects_info)
version_added: 0.1.0
description:
  - The O(gpuops.k8s_gpu.k8s_objects_info#module:queries) and O(gpuops.k8s_gpu.k8s_objects_info#module:version) of one
    M(gpuops.k8s_gpu.k8s_objects_info) run for a pool's stack - the Nodes always;
    the RuntimeClasses for the strategies whose pods use RuntimeClass C(nvidia); Volcano's scheduler ConfigMap,
    kube-proxy's ConfigMap (gpushare's NodePort registration), HAMi's webhook TLS Secret and the API server version
    (HAMi's kube-scheduler image) where the strategy's settings do not already give them.
  - Its answers go to M(gpuops.k8s_gpu.gpu_stack_manifests) as O(gpuops.k8s_gpu.gpu_stack_manifests#module:live).
options:
  _input:
    description: The strategy name.
    type: str
    required: true
  state:
    description: The stack's state; removal reads only what removal needs.
    type: str
    default: present
  settings:
    description: Per-strategy settings, as the renderer takes them (C(volcano), C(gpushare), C(hami), ...).
    type: dict
    default: {}
  namespace:
    description: The stack's namespace (where HAMi's webhook Secret lives).
    type: str
    default: kube-system
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: What the stack of a HAMi pool reads
  ansible.builtin.set_fact:
    live_read: "{{ 'hami' | gpuops.k8s_gpu.stack_live_queries(settings={'hami': {'webhook_tls_secret': 'hami-tls'}}) }}"

- name: Read it, in one module run
  gpuops.k8s_gpu.k8s_objects_info:
    queries: "{{ live_read.queries }}"
    version: "{{ live_read.version }}"
  register: live
'''

RETURN = r'''
_value:
  description: C(queries) (a list of C(key), C(api_version), C(kind), C(name), C(namespace)) and C(version) (bool).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.live import queries


def stack_live_queries(strategy: Any, state: str = 'present', settings: dict[str, Any] | None = None,
                       namespace: str = 'kube-system') -> dict[str, Any]:
    return queries(strategy, state=state, settings=settings or {}, namespace=namespace)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'stack_live_queries': stack_live_queries}
