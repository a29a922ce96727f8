# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-label plans of role gpu_node_labels, on the controller: what each node should carry (the pools' and the
sharing stacks' labels: ``label_static_plan``) and what to patch against the live Nodes (``label_live_plan``, with
the record annotation that state absent reads back). Module gpu_node_labels_apply and the filters node_labels_plan,
node_labels_patch run them.

Plain Python over plain data (``groups``, ``hostvars`` as in pool_plan). No Ansible imports. One of the plans at the top of
``_cluster`` (docs/layout.md).
"""

from __future__ import annotations

import json
import re

from collections.abc import Collection, Mapping
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (
    NODE_STRATEGIES, STRATEGIES, family, foreign_resources, node_state,
)

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    LABEL_NAME_RE, STRATEGY_LABEL, valid_label_key,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import _MISSING, _get, _pool_hosts

RECORD_RE = re.compile(r'^\s*\{.*\}\s*$', re.S)


def label_value(value: Any) -> str:
    """A label value as text: booleans lower case ('true'), everything else str()."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def stack_node_labels(stacks: Any) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The node labels the sharing stacks need, per Kubernetes node name, from the stacks' render results.

    ``stacks``: pool name -> the stack's render result (module gpu_stack_manifests: ``node_labels`` and
    ``node_label_defaults``, both node -> {label: value}); role gpu_sharing_stack publishes them as
    gpu_sharing_stack_rendered. Returns ({node: {'labels', 'defaults', 'pools'}}, errors). A default label (set only
    when the node has none, e.g. nvidia.com/gpu.deploy.device-plugin that mig-manager pauses) is never a plain label.
    """
    out: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    owner: dict[tuple[str, str], str] = {}
    if not isinstance(stacks, Mapping):
        return out, ['gpu_node_labels_stacks must be a mapping of pool name to the stack\'s render result; got %s'
                     % type(stacks).__name__]
    for pool in sorted(stacks):
        stack = stacks[pool]
        if not isinstance(stack, Mapping):
            errors.append('gpu_node_labels_stacks: pool %s is not a render result of gpu_stack_manifests' % pool)
            continue
        labels = _get(stack, 'node_labels') or {}
        defaults = _get(stack, 'node_label_defaults') or {}
        for node in sorted(set(labels) | set(defaults)):
            entry = out.setdefault(node, {'labels': {}, 'defaults': {}, 'pools': []})
            entry['pools'].append(pool)
            mine_defaults = dict((k, label_value(v)) for k, v in (_get(defaults, node) or {}).items())
            for k, v in (_get(labels, node) or {}).items():
                if k in mine_defaults:
                    continue
                sv = label_value(v)
                if k in entry['labels'] and entry['labels'][k] != sv:
                    errors.append('%s: the stacks of pools %s and %s set label %s to different values (%s, %s)'
                                  % (node, owner[(node, k)], pool, k, entry['labels'][k], sv))
                entry['labels'][k] = sv
                owner[(node, k)] = pool
            entry['defaults'].update(mine_defaults)
    return out, errors


def label_static_plan(groups: Mapping[str, Any], hostvars: Mapping[str, Any], group: str = 'gpu_nodes',
                      pools: list[dict[str, Any]] | None = None, state: str = 'present', gfd_labels: bool = True,
                      require_facts: bool = True, extra: dict[str, Any] | None = None,
                      strategy_label: str = STRATEGY_LABEL, check_capabilities: bool = True,
                      stacks: Any = None) -> dict[str, Any]:
    """Desired labels per host of ``group``, and every input error, without reading the cluster.

    ``stacks``: pool name -> render result of the pool's sharing stack (see stack_node_labels): the labels the stacks
    need join the plan (one writer of Node labels); a stack's node that is no host of ``group`` gets a plan entry of
    its own (host = node name) with the stack's labels only. An empty ``group`` labels only the stacks' nodes.

    Returns {'nodes': [{host, node, strategy, pools, labels, defaults, claimed}], 'errors': [...]}; ``defaults`` are
    set only where the node has no value, ``claimed`` lists the stack labels (recorded even when already set, so
    state=absent removes them)."""
    pools = list(pools or [])
    present = state == 'present'
    out_nodes: list[dict[str, Any]] = []
    errors: list[str] = []
    names: list[str] = []
    members = list(groups.get(group) or []) if group else []
    if group and group not in groups:
        errors.append('gpu_node_labels_group: inventory group %s does not exist' % group)
    stack_labels, stack_errors = stack_node_labels(stacks or {})
    if present:
        errors.extend(stack_errors)
    pool_hosts: list[set[str]] = []
    for pool in pools:
        if pool['name'] in names:
            errors.append('gpu_node_labels_pools: pool name %s is used twice' % pool['name'])
        names.append(pool['name'])
        pgroup = _get(pool, 'group') or ''
        if pgroup and pgroup not in groups:
            errors.append('gpu_node_labels_pools: pool %s: inventory group %s does not exist' % (pool['name'], pgroup))
        hosts: Collection[str] = _pool_hosts(pool, groups)
        pool_hosts.append(set(hosts))
        for h in hosts:
            if h not in members:
                errors.append('gpu_node_labels_pools: pool %s: host %s is not in gpu_node_labels_group (%s)'
                              % (pool['name'], h, group))
    for h in members:
        hv = hostvars[h]
        labels: dict[str, Any] = {}
        owner: dict[str, str] = {}
        my_errors: list[str] = []
        my_pools: list[str] = []
        strategy, strategy_pool = '', ''
        facts = _get(hv, 'gpu_probe_facts') or {}
        if present and gfd_labels:
            if isinstance(_get(facts, 'labels'), Mapping):
                labels.update(facts['labels'])
            elif require_facts:
                my_errors.append('%s: no gpu_probe_facts.labels (run the gpuops.k8s_gpu.gpu_probe role on it first, or '
                                 'set gpu_node_labels_gfd_labels=false / gpu_node_labels_require_facts=false)' % h)
        labels.update(extra or {})
        for pool, hosts in zip(pools, pool_hosts):
            if h not in hosts:
                continue
            my_pools.append(pool['name'])
            if strategy and strategy != pool['strategy']:
                my_errors.append('%s: conflicting sharing strategies - pool %s says %s, pool %s says %s; a node has '
                                 'exactly one strategy (gpu-mem and whole-GPU accounting must not share GPUs)'
                                 % (h, strategy_pool, strategy, pool['name'], pool['strategy']))
            else:
                strategy, strategy_pool = pool['strategy'], pool['name']
            pl = dict(_get(pool, 'labels') or {})
            pl[strategy_label] = pool['strategy']
            # the labels the strategy's agents select (gpushare's device plugin: gpushare=true)
            found = registry.find(pool['strategy'])
            pl.update(found.pool_node_labels if found is not None else {})
            if _get(pool, 'device_plugin_config'):
                pl['nvidia.com/device-plugin.config'] = pool['device_plugin_config']
            for k, v in pl.items():
                sv = label_value(v)
                if k in owner and labels[k] != sv:
                    my_errors.append('%s: pools %s and %s set label %s to different values (%s, %s)'
                                     % (h, owner[k], pool['name'], k, labels[k], sv))
                labels[k] = sv
                owner[k] = pool['name']
        node_name = _get(hv, 'gpu_node_labels_node_name', h)
        stack = stack_labels.pop(node_name, None) or {}
        _merge_stack(h, stack, labels, owner, my_errors)
        sharing = _get(facts, 'sharing', _MISSING)
        if present and strategy and check_capabilities and sharing is not _MISSING:
            cap = _get(sharing, strategy) or {}
            allowed = _get(cap, 'allowed', _MISSING)
            if allowed is not _MISSING and not allowed:
                my_errors.append('%s: strategy %s (pool %s) is not possible on this node: %s'
                                 % (h, strategy, strategy_pool, _get(cap, 'reason') or 'gpu_info says it is not allowed'))
        clean = _clean_labels(h, labels, my_errors)
        defaults = _clean_labels(h, stack.get('defaults') or {}, my_errors)
        if present:
            errors.extend(my_errors)
        out_nodes.append({'host': h, 'node': node_name, 'strategy': strategy,
                          'pools': my_pools + [p for p in stack.get('pools') or [] if p not in my_pools],
                          'labels': clean, 'defaults': defaults, 'claimed': sorted(stack.get('labels') or {})})
    # nodes of a stack that are no host of the group (the stack role used on its own): the stack's labels only
    for node in sorted(stack_labels):
        stack, labels, my_errors = stack_labels[node], {}, []
        _merge_stack(node, stack, labels, {}, my_errors)
        clean = _clean_labels(node, labels, my_errors)
        defaults = _clean_labels(node, stack['defaults'], my_errors)
        if present:
            errors.extend(my_errors)
        out_nodes.append({'host': node, 'node': node, 'strategy': '', 'pools': list(stack['pools']),
                          'labels': clean, 'defaults': defaults, 'claimed': sorted(stack['labels'])})
    return {'nodes': out_nodes, 'errors': errors}


def _merge_stack(host: str, stack: dict[str, Any], labels: dict[str, Any], owner: dict[str, str],
                 errors: list[str]) -> None:
    """Add a stack's labels to a node's desired labels; a label a pool set to another value is an error."""
    for k, sv in sorted((stack.get('labels') or {}).items()):
        if k in owner and labels[k] != sv:
            errors.append('%s: pool %s sets label %s to %s but the stack of pool %s needs %s'
                          % (host, owner[k], k, labels[k], ', '.join(stack.get('pools') or []), sv))
        labels[k] = sv
    for k in stack.get('defaults') or {}:
        labels.pop(k, None)


def _clean_labels(host: str, labels: dict[str, Any], errors: list[str]) -> dict[str, str]:
    clean = {}
    for k, v in labels.items():
        sv = label_value(v)
        if not valid_label_key(k):
            errors.append('%s: label key %s is not a valid Kubernetes label key ([prefix/]name, name at most 63 '
                          'characters of [A-Za-z0-9-_.], starting and ending alphanumeric)' % (host, k))
        if len(sv) > 63 or not (sv == '' or LABEL_NAME_RE.match(sv)):
            errors.append('%s: label %s value %s is not a valid Kubernetes label value (at most 63 characters '
                          'of [A-Za-z0-9-_.], starting and ending alphanumeric)' % (host, k, sv))
        clean[k] = sv
    return clean


def label_live_plan(static: dict[str, Any], live: list[dict[str, Any]] | None, state: str = 'present',
                    strategy_label: str = STRATEGY_LABEL, record_annotation: str = 'gpuops.io/managed-labels',
                    check_resources: bool = True, fail_on_missing_nodes: bool = True) -> dict[str, Any]:
    """What to patch on each node, from the static plan and the Node objects read from the cluster.

    Returns {'nodes': [{host, node, found, changed, strategy, pools, patch, set, removed, restored, kept}],
    'errors': [...]}. The patch is a JSON merge patch on metadata only (labels and the record annotation)."""
    by_name: dict[str, dict[str, Any]] = {}
    for obj in live or []:
        by_name[obj['metadata']['name']] = obj
    present = state == 'present'
    out_nodes: list[dict[str, Any]] = []
    errors: list[str] = []
    for want in static['nodes']:
        host, name = want['host'], want['node']
        if name not in by_name:
            if fail_on_missing_nodes:
                errors.append('%s: node %s is not in the cluster (set gpu_node_labels_node_name for the host, or '
                              'gpu_node_labels_fail_on_missing_nodes=false to skip it)' % (host, name))
            out_nodes.append({'host': host, 'node': name, 'found': False, 'changed': False})
            continue
        obj = by_name[name]
        meta = obj.get('metadata') or {}
        labels = meta.get('labels') or {}
        annotations = meta.get('annotations') or {}
        record: dict[str, Any] = {}
        my_errors = []
        raw = annotations.get(record_annotation) or ''
        if raw:
            if RECORD_RE.match(raw):
                record = json.loads(raw)
            else:
                my_errors.append('%s: annotation %s on node %s is not the JSON object this role writes; remove it or '
                                 'fix it' % (host, record_annotation, name))
        desired = want['labels'] if present else {}
        wstrategy = want.get('strategy')
        if present and wstrategy:
            sl = strategy_label
            ours = sl in record and _get(record[sl], 'value') == labels.get(sl)
            if sl in labels and labels[sl] != wstrategy and not ours:
                my_errors.append('%s: node %s already has %s=%s, set by someone else; refusing to switch it to %s '
                                 '(remove the label first)' % (host, name, sl, labels[sl], wstrategy))
            if check_resources:
                alloc = (obj.get('status') or {}).get('allocatable') or {}
                for res, qty in foreign_resources(wstrategy, alloc, labels.get(sl)):
                    my_errors.append('%s: node %s advertises %s=%s, which belongs to another GPU accounting than %s '
                                     '(gpu-mem and whole-GPU accounting must not share GPUs); remove that device '
                                     'plugin first or set gpu_node_labels_check_resources=false'
                                     % (host, name, res, qty, wstrategy))
                # a node registered by a stack's agents (HAMi's device plugin) is not for another accounting
                for reg in registry.stacks():
                    if (reg.registration_annotations and wstrategy in NODE_STRATEGIES and family(wstrategy) != reg.family
                            and any(a in annotations for a in reg.registration_annotations)):
                        my_errors.append('%s: node %s is registered with %s (annotation %s); refusing strategy %s'
                                         % (host, name, reg.title, reg.registration_annotations[0], wstrategy))
        defaults = (want.get('defaults') or {}) if present else {}
        claimed = set(want.get('claimed') or []) if present else set()
        patch: dict[str, Any] = {}
        newrecord: dict[str, Any] = {}
        set_: list[str] = []
        removed: list[str] = []
        restored: list[str] = []
        kept: list[str] = []
        for k, v in desired.items():
            current = labels.get(k)
            previous = _get(record[k], 'previous') if k in record else current
            if current != v:
                patch[k] = v
                set_.append(k)
            if k in record or current != v:
                newrecord[k] = {'value': v, 'previous': previous}
            elif k in claimed:
                # a stack label already in place (set by an earlier release, whose stack role wrote it itself):
                # it is the collection's, so state=absent removes it
                newrecord[k] = {'value': v, 'previous': None}
        for k, v in defaults.items():
            # set only where the node has no value: the label's other owner (mig-manager pausing the device plugin)
            # may change it, and then it is theirs until it is back to our value
            if labels.get(k) is None:
                patch[k] = v
                set_.append(k)
                newrecord[k] = {'value': v, 'previous': _get(record[k], 'previous') if k in record else None}
            elif k in record:
                newrecord[k] = record[k]
        for k, entry in record.items():
            if k in desired or k in defaults:
                continue
            current = labels.get(k)
            if _get(entry, 'value') == current:
                prev = _get(entry, 'previous')
                if current != prev:
                    patch[k] = prev
                    (removed if prev is None else restored).append(k)
            else:
                kept.append(k)
        metadata: dict[str, Any] = {'name': name}
        if patch:
            metadata['labels'] = patch
        if newrecord != record:
            metadata['annotations'] = {record_annotation: json.dumps(newrecord, sort_keys=True) if newrecord else None}
        cleared: list[str] = []
        status_patch: list[dict[str, Any]] = []
        if not present:
            # what the pool's stack agents wrote on the node and left behind (their DaemonSets are gone by now):
            # the next strategy of the node would be refused over it (foreign resources, HAMi's registration)
            left = _left_node_state(want.get('strategy'), record, labels, strategy_label)
            for lab in left['labels']:
                if lab in labels and lab not in (metadata.get('labels') or {}):
                    metadata.setdefault('labels', {})[lab] = None
                    cleared.append('label ' + lab)
            for ann in left['annotations']:
                if ann in annotations:
                    metadata.setdefault('annotations', {})[ann] = None
                    cleared.append('annotation ' + ann)
            status = obj.get('status') or {}
            for res in left['status']:
                for field in ('capacity', 'allocatable'):
                    if res in (status.get(field) or {}):
                        status_patch.append({'op': 'remove', 'path': '/status/%s/%s' % (field, _pointer(res))})
                        cleared.append('status.%s %s' % (field, res))
        errors.extend(my_errors)
        out_nodes.append({'host': host, 'node': name, 'found': True, 'strategy': wstrategy, 'pools': want.get('pools'),
                          'changed': len(metadata) > 1 or bool(status_patch),
                          'patch': {'apiVersion': 'v1', 'kind': 'Node', 'metadata': metadata},
                          'status_patch': status_patch, 'cleared': cleared,
                          'set': set_, 'removed': removed, 'restored': restored, 'kept': kept})
    return {'nodes': out_nodes, 'errors': errors}


def _pointer(name: str) -> str:
    """A key as a JSON pointer token (RFC 6901: ~ as ~0, / as ~1)."""
    return name.replace('~', '~0').replace('/', '~1')


def _left_node_state(pool_strategy: Any, record: Any, labels: dict[str, Any], strategy_label: str) -> dict[str, list[str]]:
    """The node state (gpu_strategy.node_state) of the strategies the collection gave the node: the pool's, and the
    one its record says it wrote as the strategy label (while the label still has that value)."""
    names: list[str] = []
    if pool_strategy in STRATEGIES:
        names.append(pool_strategy)
    entry = record.get(strategy_label) if isinstance(record, Mapping) else None
    ours = _get(entry, 'value')
    if ours in STRATEGIES and labels.get(strategy_label) == ours and ours not in names:
        names.append(ours)
    out: dict[str, list[str]] = {'status': [], 'annotations': [], 'labels': []}
    for n in names:
        st = node_state(n)
        out['labels'].extend(x for x in st.get('labels') or () if x not in out['labels'])
        out['status'].extend(r for r in st['status'] if r not in out['status'])
        out['annotations'].extend(a for a in st['annotations'] if a not in out['annotations'])
    return out
