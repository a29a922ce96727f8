# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster-layer planning on the controller: the sharing pools of the GPU nodes (playbooks cluster, report, doctor,
uninstall) and the node-label plans of role gpu_node_labels (what each node should carry; what to patch).

Plain Python over plain data: ``groups`` (group -> host names) and ``hostvars`` (host -> mapping of its variables; the
filter plugins pass Ansible's hostvars, read once per host). No Ansible imports.
"""

import json
import re

from collections.abc import Mapping

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (
    DEFAULT_STRATEGY, EXTENDER_STRATEGIES, LABELLED_STRATEGIES, NODE_STRATEGIES, STRATEGIES, family,
    foreign_resources, node_state,
)

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpu_stack_registry
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.gpu_stack_shared import (
    conflicts as shared_conflicts, operator_mix,
)

LAYER_GROUPS = ('all', 'ungrouped', 'esxi_gpu_vms', 'kube_control_plane', 'rke_controller')
POOL_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')
LABEL_NAME_RE = re.compile(r'^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$')
LABEL_PREFIX_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
RECORD_RE = re.compile(r'^\s*\{.*\}\s*$', re.S)
_MISSING = object()


def _get(mapping, key, default=None):
    try:
        return mapping[key]
    except (KeyError, TypeError):
        return default


def label_value(value):
    """A label value as text: booleans lower case ('true'), everything else str()."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# sharing_pools' facts: every host's, or only those of the hosts whose Kubernetes node name is not the inventory name
SHARING_POOLS_FACTS = ('all', 'renamed')


def sharing_pools(groups, hostvars, node_group='gpu_nodes', layer_groups=None, settings=None, facts='all',
                  agreement=True):
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
    group_sets = {}
    pools, errors, unprobed, host_groups = {}, [], [], {}
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
    for stack in gpu_stack_registry.stacks():
        # a stack's own agreement check of its pools (the DRA driver's release: gpu_stack_dra.release_conflicts)
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


def _dra_beside_device_plugin(ordered, pools, host_groups):
    """A node of a dra pool that is also in a pool of a device plugin (a pool group it is in besides its
    gpuops_sharing_pool, or another host naming the same Kubernetes node): NVIDIA's DRA driver must not run beside the
    GPU device plugin on one node (dra-driver-nvidia-gpu v0.5.0 templates/validation.yaml, gpuResourcesEnabledOverride)."""
    errors = []
    by_node = {}

    def claims(pool):
        stack = gpu_stack_registry.find(pool['strategy'])
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


def _pool_hosts(pool, groups):
    hosts = list(_get(pool, 'nodes') or [])
    if _get(pool, 'group'):
        hosts += list(groups.get(pool['group']) or [])
    return hosts


def stack_node_labels(stacks):
    """The node labels the sharing stacks need, per Kubernetes node name, from the stacks' render results.

    ``stacks``: pool name -> the stack's render result (module gpu_stack_manifests: ``node_labels`` and
    ``node_label_defaults``, both node -> {label: value}); role gpu_sharing_stack publishes them as
    gpu_sharing_stack_rendered. Returns ({node: {'labels', 'defaults', 'pools'}}, errors). A default label (set only
    when the node has none, e.g. nvidia.com/gpu.deploy.device-plugin that mig-manager pauses) is never a plain label.
    """
    out, errors, owner = {}, [], {}
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


def label_static_plan(groups, hostvars, group='gpu_nodes', pools=None, state='present', gfd_labels=True,
                      require_facts=True, extra=None, strategy_label='gpuops.io/sharing-strategy',
                      check_capabilities=True, stacks=None):
    """Desired labels per host of ``group``, and every input error, without reading the cluster.

    ``stacks``: pool name -> render result of the pool's sharing stack (see stack_node_labels): the labels the stacks
    need join the plan (one writer of Node labels); a stack's node that is no host of ``group`` gets a plan entry of
    its own (host = node name) with the stack's labels only. An empty ``group`` labels only the stacks' nodes.

    Returns {'nodes': [{host, node, strategy, pools, labels, defaults, claimed}], 'errors': [...]}; ``defaults`` are
    set only where the node has no value, ``claimed`` lists the stack labels (recorded even when already set, so
    state=absent removes them)."""
    pools = list(pools or [])
    present = state == 'present'
    out_nodes, errors, names = [], [], []
    members = list(groups.get(group) or []) if group else []
    if group and group not in groups:
        errors.append('gpu_node_labels_group: inventory group %s does not exist' % group)
    stack_labels, stack_errors = stack_node_labels(stacks or {})
    if present:
        errors.extend(stack_errors)
    pool_hosts = []
    for pool in pools:
        if pool['name'] in names:
            errors.append('gpu_node_labels_pools: pool name %s is used twice' % pool['name'])
        names.append(pool['name'])
        pgroup = _get(pool, 'group') or ''
        if pgroup and pgroup not in groups:
            errors.append('gpu_node_labels_pools: pool %s: inventory group %s does not exist' % (pool['name'], pgroup))
        hosts = _pool_hosts(pool, groups)
        pool_hosts.append(set(hosts))
        for h in hosts:
            if h not in members:
                errors.append('gpu_node_labels_pools: pool %s: host %s is not in gpu_node_labels_group (%s)'
                              % (pool['name'], h, group))
    for h in members:
        hv = hostvars[h]
        labels, owner, my_errors, my_pools = {}, {}, [], []
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
            stack = gpu_stack_registry.find(pool['strategy'])
            pl.update(stack.pool_node_labels if stack is not None else {})
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


def _merge_stack(host, stack, labels, owner, errors):
    """Add a stack's labels to a node's desired labels; a label a pool set to another value is an error."""
    for k, sv in sorted((stack.get('labels') or {}).items()):
        if k in owner and labels[k] != sv:
            errors.append('%s: pool %s sets label %s to %s but the stack of pool %s needs %s'
                          % (host, owner[k], k, labels[k], ', '.join(stack.get('pools') or []), sv))
        labels[k] = sv
    for k in stack.get('defaults') or {}:
        labels.pop(k, None)


def _clean_labels(host, labels, errors):
    clean = {}
    for k, v in labels.items():
        sv = label_value(v)
        parts = k.split('/')
        kname = parts[-1]
        if (len(parts) > 2 or len(kname) > 63 or not LABEL_NAME_RE.match(kname)
                or (len(parts) == 2 and (len(parts[0]) > 253 or not LABEL_PREFIX_RE.match(parts[0])))):
            errors.append('%s: label key %s is not a valid Kubernetes label key ([prefix/]name, name at most 63 '
                          'characters of [A-Za-z0-9-_.], starting and ending alphanumeric)' % (host, k))
        if len(sv) > 63 or not (sv == '' or LABEL_NAME_RE.match(sv)):
            errors.append('%s: label %s value %s is not a valid Kubernetes label value (at most 63 characters '
                          'of [A-Za-z0-9-_.], starting and ending alphanumeric)' % (host, k, sv))
        clean[k] = sv
    return clean


def label_live_plan(static, live, state='present', strategy_label='gpuops.io/sharing-strategy',
                    record_annotation='gpuops.io/managed-labels', check_resources=True, fail_on_missing_nodes=True):
    """What to patch on each node, from the static plan and the Node objects read from the cluster.

    Returns {'nodes': [{host, node, found, changed, strategy, pools, patch, set, removed, restored, kept}],
    'errors': [...]}. The patch is a JSON merge patch on metadata only (labels and the record annotation)."""
    by_name = {}
    for obj in live or []:
        by_name[obj['metadata']['name']] = obj
    present = state == 'present'
    out_nodes, errors = [], []
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
        record, my_errors = {}, []
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
                for reg in gpu_stack_registry.stacks():
                    if (reg.registration_annotations and wstrategy in NODE_STRATEGIES and family(wstrategy) != reg.family
                            and any(a in annotations for a in reg.registration_annotations)):
                        my_errors.append('%s: node %s is registered with %s (annotation %s); refusing strategy %s'
                                         % (host, name, reg.title, reg.registration_annotations[0], wstrategy))
        defaults = (want.get('defaults') or {}) if present else {}
        claimed = set(want.get('claimed') or []) if present else set()
        patch, newrecord, set_, removed, restored, kept = {}, {}, [], [], [], []
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
        metadata = {'name': name}
        if patch:
            metadata['labels'] = patch
        if newrecord != record:
            metadata['annotations'] = {record_annotation: json.dumps(newrecord, sort_keys=True) if newrecord else None}
        cleared, status_patch = [], []
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


def _pointer(name):
    """A key as a JSON pointer token (RFC 6901: ~ as ~0, / as ~1)."""
    return name.replace('~', '~0').replace('/', '~1')


def _left_node_state(pool_strategy, record, labels, strategy_label):
    """The node state (gpu_strategy.node_state) of the strategies the collection gave the node: the pool's, and the
    one its record says it wrote as the strategy label (while the label still has that value)."""
    names = []
    if pool_strategy in STRATEGIES:
        names.append(pool_strategy)
    entry = record.get(strategy_label) if isinstance(record, Mapping) else None
    ours = _get(entry, 'value')
    if ours in STRATEGIES and labels.get(strategy_label) == ours and ours not in names:
        names.append(ours)
    out = {'status': [], 'annotations': [], 'labels': []}
    for n in names:
        st = node_state(n)
        out['labels'].extend(x for x in st.get('labels') or () if x not in out['labels'])
        out['status'].extend(r for r in st['status'] if r not in out['status'])
        out['annotations'].extend(a for a in st['annotations'] if a not in out['annotations'])
    return out


def pool_host_vars(nodes, hostvars):
    """What role gpu_sharing_stack reads from the inventory about a pool's nodes, each host read once: for every node
    name that is an inventory host, its gpu_probe_facts, gpu_sharing_stack_strategy and
    nvidia_container_runtime_cdi_spec_ready and nvidia_container_runtime_cdi (only those defined). Returns {'facts',
    'node_strategies', 'cdi_spec_ready', 'cdi_enabled'}."""
    out = {'facts': {}, 'node_strategies': {}, 'cdi_spec_ready': {}, 'cdi_enabled': {}}
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


def unprobed_hosts(hosts, hostvars):
    """The hosts of ``hosts`` that have no gpu_probe_facts, in order."""
    return [h for h in hosts or [] if _get(hostvars[h], 'gpu_probe_facts', _MISSING) is _MISSING]
