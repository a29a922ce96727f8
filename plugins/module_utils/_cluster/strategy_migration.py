# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Moving a node between a device-plugin pool and a ``dra`` pool (issue #40, playbook migrate_to_dra.yml): what to do
with one node, and the labels role gpu_node_labels (the one writer of Node labels) gives it.

The node's pool is its labels (gpuops.io/sharing-strategy, or the site's gpu_node_labels_strategy_label, and
gpuops.io/sharing-pool, recorded by gpu_node_labels in the gpuops.io/managed-labels annotation). The switch keeps
every label the collection recorded that is not the source pool's (the GPU feature labels, extra labels), drops the
source pool's labels (the strategy and pool labels and every label the source pool's stack gives a node: pool_labels,
with the GPU operator's confinement) and sets the target pool's, recording them as the stack's (claimed), so a later
gpu_node_labels_state=absent for the target pool removes them. A device plugin DaemonSet of the collection selects its
pool label and the DRA kubelet plugin the strategy label dra: the switch moves the node from one to the other.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    POOL_LABEL, REPLICAS_LABEL as RECORDED_REPLICAS_LABEL, STRATEGY_LABEL,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.quantity import parse_count
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry

RECORD_ANNOTATION = 'gpuops.io/managed-labels'
# GFD's label of how many ways a device plugin shares each GPU (time-slicing, MPS; k8s-device-plugin v0.19.1
# internal/lm/resource.go): docs/conformance GFD-07, recorded on the lab's real nodes
REPLICAS_LABEL = 'nvidia.com/gpu.replicas'
MARK_ANNOTATION = 'gpuops.io/strategy-migration'
DEFAULT_RESOURCE = 'nvidia.com/gpu'


class MigrationError(Exception):
    pass


def pool_labels(strategy: str) -> tuple[dict[str, str], list[str], list[str]]:
    """What the render of a pool of ``strategy`` gives each of its nodes besides the strategy and pool labels (as
    cluster.yml writes them through gpu_node_labels): (labels, keys, unknown) - the labels whose values the migration
    knows (Stack.migration_labels), every key the pool's stack may give a node (a move away drops them) and the keys
    whose values come from the pool's settings, which a move onto the pool cannot set (cluster.yml does). With them the
    labels that keep the stacks landing on every GPU node off the pool's nodes (the GPU operator's
    nvidia.com/gpu.deploy.operands=false: stacks/render), except where the pool's own agents may go by those stacks'
    deploy labels (mig with the MIG manager, on by default: its settings say)."""
    stack = registry.stack(strategy)
    labels = dict(stack.migration_labels())
    unknown = set(stack.migration_settings_labels())
    confine: dict[str, str] = {}
    for other in registry.stacks():
        confine.update(other.keep_off_labels(strategy))
    if stack.pool_follows_deploy_labels({}):
        unknown |= set(confine)
    else:
        labels.update(confine)
    for k in unknown:
        labels.pop(k, None)
    keys = set(labels) | unknown | set(stack.migration_label_keys())
    return labels, sorted(keys), sorted(unknown)


def _side(raw: Any, var: str, strategy_label: str = STRATEGY_LABEL) -> dict[str, Any]:
    """A side of the migration: {pool, strategy, labels, resource, keys, unknown}, checked. ``labels`` (default: the
    pool's, pool_labels) are what a node moved onto the pool gets; ``keys`` what a node moved off it loses (the given
    labels and every key the pool's stack may give); ``unknown`` the pool's labels whose values only its settings
    give (none when ``labels`` is given)."""
    if not isinstance(raw, dict):
        raise MigrationError('%s must be a dict with pool and strategy; got %r' % (var, raw))
    unknown = sorted(set(raw) - {'pool', 'strategy', 'labels', 'resource'})
    if unknown:
        raise MigrationError('%s: unknown key(s) %s; allowed: pool, strategy, labels, resource'
                             % (var, ', '.join(unknown)))
    pool, strategy = raw.get('pool'), raw.get('strategy')
    if not isinstance(pool, str) or not pool:
        raise MigrationError('%s.pool must be the name of a sharing pool; got %r' % (var, pool))
    if strategy not in gpu_strategy.STRATEGIES:
        raise MigrationError('%s.strategy must be one of %s; got %r' % (var, ', '.join(gpu_strategy.STRATEGIES), strategy))
    labels = raw.get('labels')
    known, keys, unknown = pool_labels(strategy)
    if labels is None:
        # the labels every node of a pool of the strategy carries besides the strategy and pool labels (DRA-12)
        labels = known
    else:
        unknown = []
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise MigrationError('%s.labels must map label keys to string values (the pool stack\'s node labels); got %r'
                             % (var, labels))
    if strategy_label in labels or POOL_LABEL in labels:
        raise MigrationError('%s.labels must not hold %s or %s (they come from strategy and pool)'
                             % (var, strategy_label, POOL_LABEL))
    resource = raw.get('resource', DEFAULT_RESOURCE)
    if not isinstance(resource, str) or '/' not in resource:
        raise MigrationError('%s.resource must be the extended resource the device plugin advertises (e.g. %s); got %r'
                             % (var, DEFAULT_RESOURCE, resource))
    return {'pool': pool, 'strategy': strategy, 'labels': labels, 'resource': resource,
            'keys': sorted(set(keys) | set(labels)), 'unknown': unknown}


def check_sides(source: Any, target: Any, strategy_label: str = STRATEGY_LABEL) -> tuple[dict[str, Any], dict[str, Any]]:
    """(source, target) checked: exactly one side is a dra pool (its Stack claims_devices), the other a device-plugin
    pool. ``strategy_label``: the label a node's pool strategy is recorded in (gpu_node_labels_strategy_label)."""
    src = _side(source, 'gpuops_migrate_from', strategy_label)
    dst = _side(target, 'gpuops_migrate_to', strategy_label)
    if registry.stack(src['strategy']).claims_devices == registry.stack(dst['strategy']).claims_devices:
        raise MigrationError('one side of the migration must be a dra pool and the other a device-plugin pool; got '
                             'gpuops_migrate_from.strategy %s and gpuops_migrate_to.strategy %s'
                             % (src['strategy'], dst['strategy']))
    if src['pool'] == dst['pool']:
        raise MigrationError('gpuops_migrate_from.pool and gpuops_migrate_to.pool are both %s' % src['pool'])
    return src, dst


def _record(meta: dict[str, Any]) -> dict[str, Any]:
    raw = (meta.get('annotations') or {}).get(RECORD_ANNOTATION) or ''
    try:
        rec = json.loads(raw) if raw else {}
    except ValueError:
        raise MigrationError('node %s: annotation %s is not the JSON object gpu_node_labels writes'
                             % (meta.get('name'), RECORD_ANNOTATION))
    return rec if isinstance(rec, dict) else {}


def stacks_input(pool: str, node: str | None, labels: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Role gpu_node_labels' gpu_node_labels_stacks for the switch of one node: the target pool's labels of the node
    as a stack's (with gpu_node_labels_group empty, the node's labels are exactly these and each is recorded)."""
    return {pool: {'node_labels': {node: dict(labels)}, 'node_label_defaults': {}}}


def _label_int(value: Any) -> int | None:
    """A label's whole number (GFD's nvidia.com/gpu.replicas: '4'); None when absent or not one."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def node_replicas(labels: dict[str, Any]) -> tuple[int | None, str]:
    """(replicas per GPU, the label they come from): GFD's nvidia.com/gpu.replicas where the node has it, else the
    replicas the collection's stack configured for the node's pool (gpuops.io/sharing-replicas: the collection's
    stacks do not deploy GFD), as the share report reads them."""
    gfd = _label_int(labels.get(REPLICAS_LABEL))
    if gfd is not None:
        return gfd, REPLICAS_LABEL
    return _label_int(labels.get(RECORDED_REPLICAS_LABEL)), RECORDED_REPLICAS_LABEL


def capacity_change(node: dict[str, Any], src: dict[str, Any], dst: dict[str, Any]) -> dict[str, Any] | None:
    """{resource, before, after, replicas} when moving ``node`` from the device-plugin side ``src`` to the dra side
    ``dst`` takes pods away, else None. A device plugin that shares each GPU N ways (time-slicing, MPS: GFD's
    nvidia.com/gpu.replicas, else the collection's record gpuops.io/sharing-replicas) advertises N units per GPU, and N
    pods run on one GPU; under DRA the scheduler makes one
    claim per pod and a device goes to one claim (docs/sharing_stacks.md, "Sharing"), so the same pods get one GPU
    each: the node holds N times fewer of them."""
    if not registry.stack(dst['strategy']).claims_devices:
        return None
    meta = node.get('metadata') or {}
    replicas = node_replicas(meta.get('labels') or {})[0]
    before = parse_count(((node.get('status') or {}).get('allocatable') or {}).get(src['resource']))
    if not replicas or replicas <= 1 or not before:
        return None
    after = max(before // replicas, 1)
    if after >= before:
        return None
    return {'resource': src['resource'], 'before': before, 'after': after, 'replicas': replicas}


def node_step(node: dict[str, Any] | None, host: str, source: Any, target: Any,
              accept_capacity_loss: bool = False, strategy_label: str = STRATEGY_LABEL) -> dict[str, Any]:
    """What the migration does with one node: {host, node, action, reason, plan, wait}.

    ``node``: the live Node (dict, or None when it is not in the cluster); ``source``/``target``: the two sides (see
    check_sides). ``action``: ``migrate`` (on the source pool: drain, switch, wait, uncordon), ``resume`` (already on
    the target pool with the migration's mark: a run that stopped after the switch; wait and uncordon), ``skip`` (on
    the target pool, no mark: migrated before). ``labels``: the node's labels after the switch, and ``stacks``: them
    as role gpu_node_labels' gpu_node_labels_stacks (the one writer of Node labels). ``wait``: what shows the
    target's plugin serving the node - {kind: slice, driver} for dra, {kind: resource, resource} for a device plugin;
    ``leave``: the same for the source's plugin, whose devices must be gone (no ResourceSlice of the driver on the
    node; the resource's allocatable 0 or absent) before the node is uncordoned.
    ``capacity``: {resource, before, after, replicas} when the move holds fewer pods on the node (capacity_change),
    else None; such a move is refused unless ``accept_capacity_loss``. ``unset``: the target pool's labels the switch
    cannot set, their values coming from the pool's settings (pool_labels; the reason names them).
    ``strategy_label``: the label the node's pool strategy is read from and written to (the site's
    gpu_node_labels_strategy_label).
    MigrationError for a node in neither pool or not in the cluster, or a capacity loss not accepted."""
    src, dst = check_sides(source, target, strategy_label)
    if not node:
        raise MigrationError('%s: its node is not in the cluster (set gpuops_migrate_node_name for the host)' % host)
    meta = node.get('metadata') or {}
    name = meta.get('name')
    labels = meta.get('labels') or {}
    marked = MARK_ANNOTATION in (meta.get('annotations') or {})
    now = (labels.get(strategy_label), labels.get(POOL_LABEL))
    wait = registry.stack(dst['strategy']).serving_sign(dst['resource'])
    # the source plugin's devices leave the node before it is uncordoned: the kubelet keeps a stopped DRA plugin's
    # ResourceSlices 30 s (kubelet 1.37 pkg/kubelet/cm/dra/manager.go defaultWipingDelay) and a stopped device
    # plugin's resource in the capacity 5 min (its allocatable drops to 0 at once: devicemanager PluginDisconnected;
    # the scheduler backs a request with DRA on a node whose allocatable of it is 0). Seen on a real lab node.
    leave = registry.stack(src['strategy']).serving_sign(src['resource'])
    out: dict[str, Any] = {'host': host, 'node': name, 'wait': wait, 'leave': leave, 'from': src['pool'], 'to': dst['pool'],
                           'capacity': None, 'unset': []}
    if now == (dst['strategy'], dst['pool']):
        out.update(action='resume' if marked else 'skip', labels=None, stacks=None,
                   reason='on pool %s (strategy %s)%s' % (dst['pool'], dst['strategy'],
                                                          ', the switch of a stopped run: uncordon' if marked else
                                                          ' already: nothing to do'))
        return out
    if now != (src['strategy'], src['pool']):
        raise MigrationError('%s: node %s is on pool %s (strategy %s), neither the source pool %s (%s) nor the target '
                             'pool %s (%s); nothing was changed'
                             % (host, name, now[1] or '-', now[0] or '-', src['pool'], src['strategy'], dst['pool'],
                                dst['strategy']))
    capacity = capacity_change(node, src, dst)
    if capacity and not accept_capacity_loss:
        raise MigrationError(
            '%s: node %s shares each GPU %d ways on pool %s (%s=%d): %s %d; on the dra pool %s each pod\'s claim takes '
            'a whole device, so the same pods get %d - set gpuops_migrate_accept_capacity_loss: true to move it '
            'anyway, or give the pods that must share a GPU one ResourceClaim (claim_templates with shared: true); '
            'nothing was changed'
            % (host, name, capacity['replicas'], src['pool'], node_replicas(labels)[1], capacity['replicas'],
               capacity['resource'],
               capacity['before'], dst['pool'], capacity['after']))
    out['capacity'] = capacity
    record = _record(meta)
    # the source pool's labels go, recorded by cluster.yml (node_labels) or claimed (a stack's labels already set)
    drop = {strategy_label, POOL_LABEL} | set(src['keys'])
    keep = dict((k, (e or {}).get('value')) for k, e in record.items()
                if k not in drop and isinstance(e, dict) and e.get('value') is not None and labels.get(k) == e['value'])
    want = dict(keep)
    want.update(dst['labels'])
    want[strategy_label] = dst['strategy']
    want[POOL_LABEL] = dst['pool']
    out.update(action='migrate', labels=want, stacks=stacks_input(dst['pool'], name, want), unset=dst['unknown'],
               reason='pool %s (%s) -> pool %s (%s)%s%s' % (
                   src['pool'], src['strategy'], dst['pool'], dst['strategy'],
                   ', %s %d -> %d pods (accepted)' % (capacity['resource'], capacity['before'], capacity['after'])
                   if capacity else '',
                   '; not set, their values come from pool %s\'s settings (run cluster.yml, or give them in '
                   'gpuops_migrate_to.labels): %s' % (dst['pool'], ', '.join(dst['unknown'])) if dst['unknown'] else ''))
    return out


def migration_plan(nodes: list[dict[str, Any]] | None, hosts: list[dict[str, Any]] | None, source: Any, target: Any,
                   accept_capacity_loss: bool = False, strategy_label: str = STRATEGY_LABEL) -> dict[str, Any]:
    """Every host's step, in the order of ``hosts`` ([{host, node}]); ``nodes``: the live Nodes. Returns {'steps',
    'errors'}: errors (a node in neither pool, not in the cluster, bad sides, a capacity loss not accepted) stop the
    run before anything changes."""
    by_name = dict(((n.get('metadata') or {}).get('name'), n) for n in nodes or [])
    steps: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        check_sides(source, target, strategy_label)
    except MigrationError as exc:
        return {'steps': [], 'errors': [str(exc)]}
    for h in hosts or []:
        try:
            steps.append(node_step(by_name.get(h['node']), h['host'], source, target, accept_capacity_loss,
                                   strategy_label))
        except MigrationError as exc:
            errors.append(str(exc))
    return {'steps': steps, 'errors': errors}
