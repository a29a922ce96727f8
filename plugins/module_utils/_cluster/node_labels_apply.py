# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Send the Node metadata patches that role gpu_node_labels planned, in one module run (plan_and_apply: read the
Nodes and plan the patches in that same run).

One JSON merge patch per node on metadata.labels and metadata.annotations only (a null value removes a key); with
state absent also a JSON patch on the node's status subresource that removes what the pool's stack agents put there
themselves (gpu_strategy.node_state, e.g. gpushare's aliyun.com/gpu-count). In check mode the same requests go with
dryRun=All, so the API server validates them and nothing is stored. Pure logic on a
CoreV1Api-like object, so the unit tests use a fake. Responses are read as raw JSON (_preload_content=False): the
typed models of the kubernetes client refuse a Node whose status lacks fields they require.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import read
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import label_plan

MERGE_PATCH = 'application/merge-patch+json'
JSON_PATCH = 'application/json-patch+json'


class PatchError(Exception):
    def __init__(self, msg: str, results: list[dict[str, Any]]) -> None:
        super(PatchError, self).__init__(msg)
        self.results = results


def _meta(obj: Any) -> dict[str, dict[str, Any]]:
    """labels and annotations of a Node as returned by the client (object or dict)."""
    if obj is None:
        return {'labels': {}, 'annotations': {}}
    if hasattr(obj, 'data') and not isinstance(obj, dict):  # a raw response (_preload_content=False)
        obj = read.body(obj)
    if not isinstance(obj, dict):
        obj = obj.to_dict() if hasattr(obj, 'to_dict') else {}
    meta = obj.get('metadata') or {}
    return {'labels': dict(meta.get('labels') or {}), 'annotations': dict(meta.get('annotations') or {})}


def check_patches(patches: list[Any]) -> list[str]:
    """Problems with the patches, before any request: a list of messages (empty when all is well)."""
    problems: list[str] = []
    for i, item in enumerate(patches):
        node = item.get('node') if isinstance(item, dict) else None
        patch = item.get('patch') if isinstance(item, dict) else None
        if not node:
            problems.append('patches[%d] has no node name' % i)
            continue
        meta = (patch or {}).get('metadata') if isinstance(patch, dict) else None
        if not isinstance(meta, dict):
            problems.append('patches[%d] (node %s) has no patch.metadata' % (i, node))
            continue
        extra = sorted(set(meta) - set(['name', 'labels', 'annotations']))
        if extra:
            problems.append('patches[%d] (node %s) patches metadata.%s; only labels and annotations are allowed'
                            % (i, node, ', metadata.'.join(extra)))
    return problems


def check_plan(plan: Any) -> list[str]:
    """Problems with a static label plan (node_labels_plan's output), before any request."""
    if not isinstance(plan, dict) or not isinstance(plan.get('nodes'), list):
        return ['plan must be the output of the filter gpuops.k8s_gpu.node_labels_plan (a dict with a nodes list)']
    problems = list(plan.get('errors') or [])
    for i, item in enumerate(plan['nodes']):
        if not isinstance(item, dict) or not item.get('node') or not item.get('host'):
            problems.append('plan.nodes[%d] has no host or node name' % i)
        elif not isinstance(item.get('labels', {}), dict) or not isinstance(item.get('defaults', {}), dict):
            problems.append('plan.nodes[%d] (node %s): labels and defaults must be dictionaries' % (i, item['node']))
    return problems


def apply(api: Any, patches: list[dict[str, Any]], check_mode: bool = False) -> list[dict[str, Any]]:
    """Patch each node; returns one result per patch: {node, changed, diff: {before, after}}.

    A failed request raises PatchError naming the node, with the results of the nodes done before it.
    """
    results: list[dict[str, Any]] = []
    for item in patches:
        node = item['node']
        meta = item['patch']['metadata']
        body = {'metadata': dict((k, v) for k, v in meta.items() if k in ('labels', 'annotations'))}
        kwargs: dict[str, Any] = {'_content_type': MERGE_PATCH, '_preload_content': False}
        if check_mode:
            kwargs['dry_run'] = 'All'
        status_ops = item.get('status_patch') or []
        try:
            before = _meta(api.read_node(node, _preload_content=False))
            after = before
            if len(meta) > 1:
                after = _meta(api.patch_node(node, body, **kwargs))
            if status_ops:
                # what the stack's agents patched into the Node's status (gpu_strategy.node_state): a JSON patch on
                # the status subresource, each entry removed only where the read found it
                skw: dict[str, Any] = {'_content_type': JSON_PATCH, '_preload_content': False}
                if check_mode:
                    skw['dry_run'] = 'All'
                api.patch_node_status(node, status_ops, **skw)
        except Exception as e:  # ApiException or a connection error: name the node
            raise PatchError('patching the labels of node %s failed: %s' % (node, getattr(e, 'reason', None) or e),
                             results)
        results.append({'node': node, 'changed': before != after or bool(status_ops),
                        'diff': {'before': before, 'after': after}, 'cleared': list(item.get('cleared') or [])})
    return results


def list_nodes(api: Any) -> list[dict[str, Any]]:
    """Every Node of the cluster, as dicts (one list request, raw JSON)."""
    return read.body(api.list_node(_preload_content=False)).get('items') or []


def plan_and_apply(api: Any, static: dict[str, Any], options: dict[str, Any],
                   check_mode: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """Role gpu_node_labels in one module run: read the Nodes, plan each node's patch from the static plan
    (label_plan.label_live_plan with options: state, strategy_label, record_annotation, check_resources,
    fail_on_missing_nodes), refuse any conflict before the first write, then patch the nodes that differ.

    Returns (plan, results): plan is label_live_plan's {nodes, errors}; results is None when the plan has errors
    (nothing was sent), else apply()'s results for the changed nodes.
    """
    try:
        live = list_nodes(api)
    except Exception as e:  # ApiException or a connection error
        raise PatchError('reading the nodes failed: %s' % (getattr(e, 'reason', None) or e), [])
    plan = label_plan.label_live_plan(static, live, **options)
    if plan['errors']:
        return plan, None
    patches = [{'node': n['node'], 'patch': n['patch'], 'status_patch': n.get('status_patch') or [],
                'cleared': n.get('cleared') or []} for n in plan['nodes'] if n.get('changed')]
    return plan, apply(api, patches, check_mode=check_mode)
