# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sharing pools of the GPU nodes, planned on the controller (playbooks cluster, report, doctor, uninstall; filters
sharing_pools, pool_host_vars, unprobed_hosts): which pool each host is in, its strategy and settings, and the
errors of a pool layout (names, strategies that cannot share a node, NVIDIA's DRA driver beside a device plugin).

Plain Python over plain data: ``groups`` (group -> host names) and ``hostvars`` (host -> mapping of its variables; the
filter plugins pass Ansible's hostvars, read once per host). No Ansible imports. One of the plans at the top of ``_cluster``.
"""

from __future__ import annotations

import re

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (
    DEFAULT_STRATEGY, EXTENDER_STRATEGIES, LABELLED_STRATEGIES, STRATEGIES,
)

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.shared import (
    conflicts as shared_conflicts, operator_mix,
)

LAYER_GROUPS = ('all', 'ungrouped', 'esxi_gpu_vms', 'kube_control_plane', 'rke_controller')
POOL_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')
_MISSING = object()


def _get(mapping: Any, key: Any, default: Any = None) -> Any:
    try:
        return mapping[key]
    except (KeyError, TypeError):
        return default


# sharing_pools' facts: every host's, or only those of the hosts whose Kubernetes node name is not the inventory name
SHARING_POOLS_FACTS = ('all', 'renamed')


def sharing_pools(groups: Mapping[str, Any], hostvars: Mapping[str, Any], node_group: str = 'gpu_nodes',
                  layer_groups: list[str] | None = None, settings: list[str] | None = None, facts: str = 'all',
                  agreement: bool = True) -> dict[str, Any]:
    """The sharing pools of the GPU nodes.

    A node's pool is its gpuops_sharing_pool variable, else the one group it is in, below ``node_group``, that is not a
    layer group (else ``node_group`` itself). The Kubernetes pool name is the group name, lower case, '_' -> '-'; it
    must be a DNS label. A pool has one strategy (gpuops_sharing_strategy, default exclusive).

    Returns {'pools': [{name, group, strategy, hosts, nodes, first, settings, facts}] sorted by name,
    'label_pools': [{name, strategy, nodes}] (pools whose nodes gpu_node_labels labels), 'needs_extender': bool,
    'errors': [...], 'unprobed': hosts without gpu_probe_facts, 'settings': the names asked for}.
    ``settings``: variable names copied from the pool's first host into the pool's 'settings' (only
    those defined there); 'facts': Kubernetes node name -> gpu_probe_facts of each host that has them, or with
    ``facts='renamed'`` only of the hosts whose Kubernetes node name (gpu_node_labels_node_name) is not their inventory
    name: role gpu_sharing_stack's render reads the others from hostvars itself (inventory_vars), and every node's
    facts in the pools would be carried through each task that passes a pool (milliseconds per node)."""
    if facts not in SHARING_POOLS_FACTS:
        raise ValueError('sharing_pools: facts is %r; allowed: %s' % (facts, ', '.join(SHARING_POOLS_FACTS)))
    layer = set(LAYER_GROUPS) | set([node_group]) | set(layer_groups or [])
    members = list(groups.get(node_group) or [])
    member_set = set(members)
    group_sets: dict[str, bool] = {}
    pools: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    unprobed: list[str] = []
    host_groups: dict[str, list[str]] = {}
    renamed = set()
    for h in members:
        hv = hostvars[h]
        candidates = []
        for g in _get(hv, 'group_names') or []:
            if g in layer:
                continue
            if g not in group_sets:
                group_sets[g] = set(groups.get(g) or []) <= member_set
            if group_sets[g]:
                candidates.append(g)
        group = _get(hv, 'gpuops_sharing_pool', _MISSING)
        if group is _MISSING:
            if len(candidates) == 1:
                group = candidates[0]
            elif not candidates:
                group = node_group
            else:
                group = ''
                errors.append('%s is in several pool groups (%s); set gpuops_sharing_pool for it'
                              % (h, ', '.join(candidates)))
        strategy = _get(hv, 'gpuops_sharing_strategy', DEFAULT_STRATEGY)
        if strategy not in STRATEGIES:
            errors.append('%s: gpuops_sharing_strategy is %s; allowed: %s' % (h, strategy, ', '.join(STRATEGIES)))
        host_facts = _get(hv, 'gpu_probe_facts', _MISSING)
        if host_facts is _MISSING:
            unprobed.append(h)
        if not group:
            continue
        group = str(group)
        name = group.lower().replace('_', '-')
        if not POOL_NAME_RE.match(name):
            errors.append('pool %s of %s gives the Kubernetes pool name %s, not a DNS label' % (group, h, name))
        p = pools.get(name)
        if p is None:
            p = pools[name] = {'name': name, 'group': group, 'strategy': strategy, 'hosts': [], 'nodes': [],
                               'first': h, 'facts': {},
                               'settings': dict((k, hv[k]) for k in (settings or []) if _get(hv, k, _MISSING)
                                                is not _MISSING)}
        if p['strategy'] != strategy:
            errors.append('pool %s mixes strategies: %s has %s, %s has %s' % (name, p['first'], p['strategy'], h,
                                                                              strategy))
        node = _get(hv, 'gpu_node_labels_node_name', h)
        host_groups[h] = candidates
        p['hosts'].append(h)
        p['nodes'].append(node)
        if host_facts is not _MISSING:
            p['facts'][node] = host_facts
            if node != h:
                renamed.add(node)
    ordered = [pools[k] for k in sorted(pools)]
    if facts == 'renamed':
        # a node name that is also another host's inventory name keeps its entry too: the render's facts win
        for p in ordered:
            p['facts'] = dict((k, v) for k, v in p['facts'].items() if k in renamed)
    errors.extend(_dra_beside_device_plugin(ordered, pools, host_groups))
    for stack in registry.stacks():
        # a stack's own agreement check of its pools (the DRA driver's release: stacks/dra.release_conflicts)
        errors.extend(stack.own_conflicts(ordered))
    if agreement:
        # what pools of one strategy share must agree, and the operator must be confinable: refused before a deploy,
        # not before an uninstall (removing the pools is how a site gets out of it)
        errors.extend(shared_conflicts(ordered))
        errors.extend(operator_mix(ordered))
    # the doctor's gate (node.yml, gpuops_doctor_gate: enforce): a node with a critical finding is not labelled into
    # its pool; without a verdict (the doctor did not run in this run) a node is not gated
    gated = []
    for p in ordered:
        for h in p['hosts']:
            v = _get(hostvars[h], 'gpuops_doctor_verdict')
            if isinstance(v, Mapping) and v.get('gated'):
                gated.append({'host': h, 'pool': p['name'], 'critical': list(v.get('critical') or []),
                              'message': '%s left out of pool %s by the doctor: %s' % (h, p['name'], v.get('message'))})
    gated_hosts = set(g['host'] for g in gated)
    label_pools = [{'name': p['name'], 'strategy': p['strategy'],
                    'nodes': [h for h in p['hosts'] if h not in gated_hosts]}
                   for p in ordered if p['strategy'] in LABELLED_STRATEGIES or p['strategy'] not in STRATEGIES]
    return {'pools': ordered, 'label_pools': label_pools, 'errors': errors, 'unprobed': unprobed, 'gated': gated,
            'settings': list(settings or []),
            'needs_extender': any(p['strategy'] in EXTENDER_STRATEGIES for p in ordered)}


def _dra_beside_device_plugin(ordered: list[dict[str, Any]], pools: dict[str, dict[str, Any]],
                              host_groups: dict[str, list[str]]) -> list[str]:
    """A node of a dra pool that is also in a pool of a device plugin (a pool group it is in besides its
    gpuops_sharing_pool, or another host naming the same Kubernetes node): NVIDIA's DRA driver must not run beside the
    GPU device plugin on one node (dra-driver-nvidia-gpu v0.5.0 templates/validation.yaml, gpuResourcesEnabledOverride)."""
    errors: list[str] = []
    by_node: dict[str, list[dict[str, Any]]] = {}

    def claims(pool: dict[str, Any]) -> bool:
        stack = registry.find(pool['strategy'])
        return stack is not None and stack.claims_devices

    for p in ordered:
        for n in p['nodes']:
            by_node.setdefault(n, [])
            if p not in by_node[n]:
                by_node[n].append(p)
    for p in ordered:
        if not claims(p):
            continue
        for h, n in zip(p['hosts'], p['nodes']):
            others = [q for q in by_node.get(n, []) if q is not p and not claims(q)]
            for g in host_groups.get(h) or []:
                q = pools.get(g.lower().replace('_', '-'))
                if q is not None and q is not p and not claims(q) and q not in others:
                    others.append(q)
            for q in others:
                errors.append('%s (node %s) is in dra pool %s and in pool %s (strategy %s): the DRA driver must not '
                              'run beside the GPU device plugin on one node; take it out of one of them'
                              % (h, n, p['name'], q['name'], q['strategy']))
    return errors


def _pool_hosts(pool: Any, groups: Mapping[str, Any]) -> list[str]:
    hosts = list(_get(pool, 'nodes') or [])
    if _get(pool, 'group'):
        hosts += list(groups.get(pool['group']) or [])
    return hosts


def pool_host_vars(nodes: list[str] | None, hostvars: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What role gpu_sharing_stack reads from the inventory about a pool's nodes, each host read once: for every node
    name that is an inventory host, its gpu_probe_facts, gpu_sharing_stack_strategy and
    nvidia_container_runtime_cdi_spec_ready and nvidia_container_runtime_cdi (only those defined). Returns {'facts',
    'node_strategies', 'cdi_spec_ready', 'cdi_enabled'}."""
    out: dict[str, dict[str, Any]] = {'facts': {}, 'node_strategies': {}, 'cdi_spec_ready': {}, 'cdi_enabled': {}}
    keys = (('facts', 'gpu_probe_facts'), ('node_strategies', 'gpu_sharing_stack_strategy'),
            ('cdi_spec_ready', 'nvidia_container_runtime_cdi_spec_ready'), ('cdi_enabled', 'nvidia_container_runtime_cdi'))
    for node in nodes or []:
        if node not in hostvars:
            continue
        hv = hostvars[node]
        for out_key, var in keys:
            value = _get(hv, var, _MISSING)
            if value is not _MISSING:
                out[out_key][node] = value
    return out


def unprobed_hosts(hosts: list[str] | None, hostvars: Mapping[str, Any]) -> list[str]:
    """The hosts of ``hosts`` that have no gpu_probe_facts, in order."""
    return [h for h in hosts or [] if _get(hostvars[h], 'gpu_probe_facts', _MISSING) is _MISSING]
