# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a sharing stack reads from the cluster before it renders, and how the renderer uses it.

queries() says what to read for a strategy (one k8s_objects_info run: Nodes always; RuntimeClasses for the strategies
whose pods run with RuntimeClass nvidia; what the strategy's Stack asks for (live_queries: Volcano's scheduler
ConfigMap, kube-proxy's ConfigMap for gpushare, HAMi's webhook Secret, the cluster's DeviceClasses for DRA) and the
API server version where the Stack needs it and its settings do not already give it (wants_version). merge() puts the answers where the renderer takes
them: live_nodes, live_runtime_classes and the strategies' settings (each Stack's merge_objects and merge_version:
Volcano's existing_conf, gpushare's kube_proxy_config, HAMi's, Volcano's and DRA's kube_version), and refuses what a
Stack refuses (a HAMi webhook Secret that does not exist). stacks/render also hands every query's answer to the
renderer as inputs['live_objects'] (by query key: DRA's DeviceClasses, whose clashes its render refuses).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry


def queries(strategy: Any, state: str = 'present', settings: dict[str, Any] | None = None,
            namespace: str = 'kube-system') -> dict[str, Any]:
    """{queries: [...], version: bool} for k8s_objects_info."""
    present = state == 'present'
    out: list[dict[str, Any]] = [{'key': 'nodes', 'kind': 'Node'}]
    stack = registry.find(strategy)
    if stack is None:
        return {'queries': out, 'version': False}
    if gpu_strategy.strategy(strategy)['runtime_class']:
        out.append({'key': 'runtime_classes', 'api_version': 'node.k8s.io/v1', 'kind': 'RuntimeClass'})
    settings = settings or {}
    out.extend(stack.live_queries(settings, present, namespace))
    return {'queries': out, 'version': bool(stack.wants_version(settings, present))}


def merge(params: dict[str, Any], live: dict[str, Any] | None, var: str = 'gpu_sharing_stack_') -> dict[str, Any]:
    """params with live's answers filled in (a new dict; params is not changed). live: k8s_objects_info's result."""
    objects = (live or {}).get('objects') or {}
    out = dict(params)
    if 'nodes' in objects:
        out['live_nodes'] = objects['nodes']
    if 'runtime_classes' in objects:
        out['live_runtime_classes'] = objects['runtime_classes']
    settings = dict(out.get('settings') or {})
    # what any Stack's queries found goes into that strategy's settings (each key is one Stack's)
    for stack in registry.stacks():
        stack.merge_objects(settings, objects, out.get('namespace') or 'kube-system', var)
    version = ((live or {}).get('version') or {}).get('gitVersion')
    chosen = registry.find(out.get('strategy'))
    if version and chosen is not None:
        chosen.merge_version(settings, version)
    out['settings'] = settings
    return out
