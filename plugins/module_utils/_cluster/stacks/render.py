# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the GPU sharing stack of one node pool: input checks, conflict checks, per-strategy manifests."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import live, registry
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import STRATEGIES
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    MANAGED_BY, POOL_LABEL, SCOPE_LABEL, SHARED_USER_PREFIX, STACK_LABEL, STRATEGY_LABEL, Ctx, Manifest, Settings,
    StackError, check_name, strategy_label_error, validate_settings, validation_pod,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack

# The renderers, by the name the strategy model gives each strategy's stack (gpu_strategy.stack_info(name)['stack']):
# the stack modules of stacks/registry. Each module has SETTINGS (settings key -> schema) and render_stack(ctx,
# strategy, settings, nodes, facts, inputs) returning manifests, labels, resources, limits and optionally helm,
# scheduler_name, readiness. inputs: require_facts, live_runtime_classes, cdi_spec_ready, node_state, live_nodes,
# cdi_enabled, removing, live_objects (what the render knows beyond the settings). Everything else the render asks of
# a strategy it asks of the strategy's Stack (stacks/registry.stack(name), stacks/base.Stack).
STACKS = registry.MODULES


def stack_renderer(strategy: str) -> ModuleType:
    """The renderer module of a strategy (KeyError for an unknown one)."""
    return STACKS[gpu_strategy.stack_info(strategy)['stack']]


def settings_schema(strategy: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The settings a strategy reads: settings key -> schema (the renderer's SETTINGS, the keys the model names)."""
    module = stack_renderer(strategy)
    return dict((key, module.SETTINGS[key]) for key in gpu_strategy.stack_info(strategy)['settings'])


def all_settings_schemas() -> dict[str, dict[str, dict[str, Any]]]:
    """Every settings key of every strategy -> its schema (role gpu_sharing_stack's gpu_sharing_stack_<key>)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in STRATEGIES:
        out.update(settings_schema(name))
    return out


VALIDATION_IMAGE = pins.ref('cuda-sample')
VALIDATION_SCHEMA = {
    'enabled': dict(type=bool, default=False),
    'namespace': dict(type=str, default='default'),
    'image': dict(type=str, default=VALIDATION_IMAGE),
    'replicas': dict(type=int, default=2, min=1, max=64),
    # None: as the stack (see pod_runtime_class); '' names none (nvidia must then be the node's default runtime)
    'runtime_class_name': dict(type=str, default=None),
}

# What a GPU pod must carry to get its GPU: with the default envvar device-list strategy the device plugin answers
# Allocate with NVIDIA_VISIBLE_DEVICES, which only the nvidia runtime acts on (k8s-device-plugin v0.20.0 README.md:
# nvidia as the default runtime, or a RuntimeClass). The NVIDIA strategies create RuntimeClass nvidia; the GPU
# operator creates RuntimeClass nvidia (operator.runtimeClass, gpu-operator v26.7.0 values.yaml and
# assets/pre-requisites/0200_runtime_class.yaml); HAMi, Volcano, gpushare and gpu-manager run their device plugins
# on the default runtime, so nvidia must be the default runtime there and a GPU pod needs no RuntimeClass
# (each Stack's pod_runtime_class; the strategies' model is gpu_strategy.STRATEGY_MODEL).


def pod_runtime_class(strategy: str, settings: Settings, var: str) -> str:
    """The runtimeClassName a GPU pod of this strategy must set ('' when nvidia must be the default runtime)."""
    return registry.stack(strategy).pod_runtime_class(settings, var)


def runtime_class_note(strategy: str, runtime_class_name: str) -> str:
    """What users' own GPU pods of the pool need, in words (returned as a note and shown by the role)."""
    own = registry.stack(strategy).runtime_class_note(runtime_class_name)
    if own:
        return own
    if runtime_class_name:
        return ('GPU pods of this pool must set runtimeClassName: %s (the validation pod does): without it, where nvidia '
                'is not the default runtime, the container starts without its GPU (NVIDIA_VISIBLE_DEVICES is acted on by '
                'the nvidia runtime only)' % runtime_class_name)
    return ('GPU pods of this pool (strategy %s) rely on nvidia being the default runtime of the nodes '
            '(nvidia_container_runtime_set_as_default: true); its device plugin needs it too' % strategy)


def argument_spec() -> dict[str, dict[str, Any]]:
    """The task arguments of gpuops.k8s_gpu.gpu_stack_manifests: one definition for the module (AnsibleModule) and its
    action plugin (ArgumentSpecValidator on the controller). A new dict on every call: the list and dict defaults end
    up in the validated parameters and must not be shared between runs."""
    return dict(
        strategy=dict(type='str', required=True, choices=list(STRATEGIES)),
        pool=dict(type='str', required=True),
        nodes=dict(type='list', elements='str', default=[]),
        node_selector=dict(type='dict', default={}),
        namespace=dict(type='str', default='kube-system'),
        registry=dict(type='str', default=''),
        image_pull_secrets=dict(type='list', elements='str', default=[], no_log=False),
        settings=dict(type='dict', default={}),
        facts=dict(type='dict', default={}),
        require_facts=dict(type='bool', default=True),
        node_state=dict(type='dict', default={}),
        live_nodes=dict(type='list', elements='dict', default=[]),
        node_strategies=dict(type='dict', default={}),
        check_conflicts=dict(type='bool', default=True),
        allow_mixed_accounting=dict(type='bool', default=False),
        validation=dict(type='dict', default={}),
        live_runtime_classes=dict(type='list', elements='dict', default=[]),
        cdi_spec_ready=dict(type='dict', default={}),
        cdi_enabled=dict(type='dict', default={}),
        live=dict(type='dict', default={}),
        var_prefix=dict(type='str', default='gpu_sharing_stack_'),
        strategy_label=dict(type='str', default=STRATEGY_LABEL),
        inventory_vars=dict(type='bool', default=False),
    )


# How a strategy counts GPUs on a node, and the rule that two accountings never share a GPU: the strategy model
# (gpu_strategy.family, gpu_strategy.foreign_resources).


def check_conflicts(strategy: str, pool: str, nodes: list[str], node_state: dict[str, dict[str, Any]] | None,
                    node_strategies: dict[str, str] | None, allow_mixed: bool, var: str,
                    strategy_label: str = STRATEGY_LABEL) -> None:
    """Refuse two strategies on one pool, a node in two pools, and two GPU accountings on one node. A node's pool
    is its labels: ``strategy_label`` (the site's gpu_node_labels_strategy_label) and the pool label."""
    problems: list[str] = []
    for node, other in sorted((node_strategies or {}).items()):
        if other and other != strategy:
            problems.append('%s is set to %s but the pool %s uses %s (two strategies on one pool)'
                            % (node, other, pool, strategy))
    mine = gpu_strategy.family(strategy)
    for node in nodes:
        st = (node_state or {}).get(node)
        if not st:
            continue
        labels = st.get('labels') or {}
        cur = labels.get(strategy_label)
        cur_pool = labels.get(POOL_LABEL)
        if cur_pool and cur_pool != pool:
            problems.append('%s already belongs to pool %s (strategy %s); a node can be in one pool only'
                            % (node, cur_pool, cur or 'unknown'))
        elif cur and cur != strategy:
            problems.append('%s already runs strategy %s; remove it first (%sstate: absent for pool %s)'
                            % (node, cur, var, pool))
        if allow_mixed:
            continue
        foreign = ['%s=%s' % rv for rv in gpu_strategy.foreign_resources(strategy, st.get('allocatable'), cur)]
        if foreign:
            problems.append('%s already advertises %s from another device plugin; %s would add %s accounting on the same '
                            'GPUs and the two would not see each other\'s allocations (GPU memory and whole-GPU '
                            'accounting are not linked, 显存资源及卡资源联动). Remove the other device plugin from this node '
                            'first, or set %sallow_mixed_accounting: true if you know the GPUs are split between them'
                            % (node, ', '.join(foreign), strategy, mine, var))
    if problems:
        raise StackError('Refusing %sstrategy=%s for pool %s: %s' % (var, strategy, pool, '; '.join(problems)))


# strategies whose pods ask for nvidia.com/gpu from another device plugin than HAMi's
NVIDIA_GPU_POOL_STRATEGIES = registry.names(lambda s: s.asks_nvidia_gpu)
# strategies whose admission webhook may take over every pod that asks for nvidia.com/gpu
NVIDIA_GPU_INTERCEPTORS = registry.names(lambda s: s.may_intercept_nvidia_gpu)


def _check_hami_webhook_scope(strategy: str, pool: str, settings: Settings, live_nodes: list[Manifest],
                              var: str, strategy_label: str = STRATEGY_LABEL) -> str | None:
    """HAMi's webhook (v2.10.0 pkg/scheduler/webhook.go) sends every pod of the cluster that asks for nvidia.com/gpu to
    hami-scheduler and denies such pods with a privileged container (pkg/device/nvidia/device.go MutateAdmission finds
    the resource): pods meant for another NVIDIA pool would be scheduled by HAMi, which knows only its own nodes.
    Refuse the webhook beside another NVIDIA pool; without the webhook, pods opt in with schedulerName. The Stacks say
    who may take pods over (may_intercept_nvidia_gpu, intercepts_nvidia_gpu) and whose pods ask (asks_nvidia_gpu)."""
    me = registry.stack(strategy)

    def pools(strategies: tuple[str, ...]) -> list[str]:
        out = set()
        for o in live_nodes:
            labels = (o.get('metadata') or {}).get('labels') or {}
            if labels.get(strategy_label) in strategies and labels.get(POOL_LABEL) not in (None, pool):
                out.add('%s (%s)' % (labels[POOL_LABEL], labels[strategy_label]))
        return sorted(out)
    if me.may_intercept_nvidia_gpu:
        if not me.intercepts_nvidia_gpu(settings):
            return None
        others = pools(NVIDIA_GPU_POOL_STRATEGIES)
        if others:
            raise StackError(me.intercept_error(pool, others, var))
    elif me.asks_nvidia_gpu:
        for name in NVIDIA_GPU_INTERCEPTORS:
            others = pools((name,))
            if others:
                return registry.stack(name).intercept_warning(others, var)
    return None


def _validation(ctx: Ctx, strategy: str, settings: Settings, limits: dict[str, Any], scheduler_name: str | None,
                val: dict[str, Any], runtime_class_name: str, claim_api_version: str | None = None) -> list[Manifest]:
    image = ctx.image(val['image'], ctx.var('validation') + '.image')
    ns = val['namespace']
    # a strategy's own workload (a claim for dra, gpushare's binpack sample), else a pod asking for the limits
    stack = registry.stack(strategy)
    own = stack.validation(ctx, settings, limits, scheduler_name, val, image, runtime_class_name, claim_api_version)
    if own is not None:
        return own
    pod = validation_pod(ctx, 'gpu-validate-%s-%s' % (strategy, ctx.pool), ns, image, limits, scheduler_name)
    pod['spec']['nodeSelector'] = ctx.pool_selector()
    if runtime_class_name:
        pod['spec']['runtimeClassName'] = runtime_class_name
    return [pod]


def stale_shared(pool: str, shared: list[Manifest], live_runtime_classes: list[Manifest]) -> list[Manifest]:
    """The RuntimeClasses the pool recorded itself on (SHARED_USER_PREFIX) that it no longer uses: its
    runtime_class_name changed, or the site's RuntimeClass is named now. The role releases them (its record goes; the
    object too when no other pool uses it), so an unused RuntimeClass does not live on for a pool's old record."""
    using = set((m['kind'], m['metadata']['name']) for m in shared)
    out = []
    for o in live_runtime_classes:
        meta = o.get('metadata') or {}
        if SHARED_USER_PREFIX + pool in (meta.get('annotations') or {}) and ('RuntimeClass', meta.get('name')) not in using:
            out.append({'apiVersion': 'node.k8s.io/v1', 'kind': 'RuntimeClass',
                        'metadata': {'name': meta['name'], 'labels': {SCOPE_LABEL: 'shared'}}})
    return sorted(out, key=lambda d: d['metadata']['name'])


def _unrecorded(other_pools: list[str], stack: Stack, live_runtime_classes: list[Manifest]) -> list[str]:
    """The pools among ``other_pools`` (the family's other pools on the nodes) for which the shared objects are kept
    whatever their records say. The NVIDIA family shares RuntimeClasses whose names are each pool's setting (its Stack
    says shared_by_records): a pool recorded on any RuntimeClass records itself on every one it uses, so only pools
    recorded on none (installed before records) keep them (else a RuntimeClass only the leaving pool used was kept for
    the family's other pools for ever). The other strategies' shared objects have fixed names: every other pool of the
    strategy uses them."""
    if not stack.shared_by_records:
        return list(other_pools)
    recorded = set()
    for o in live_runtime_classes:
        for k in ((o.get('metadata') or {}).get('annotations') or {}):
            if k.startswith(SHARED_USER_PREFIX):
                recorded.add(k[len(SHARED_USER_PREFIX):])
    return [p for p in other_pools if p not in recorded]


# Every kind a strategy renders among a pool's own objects (scope pool) and among the shared objects of the strategies
# in SHARED_PRUNE: role gpu_sharing_stack lists these by their labels after the apply and deletes what the render no
# longer makes (k8s_converge prune): an object a changed setting drops (the MIG manager switched off, gpu-admission's
# registration mode changed) or one left in the previous namespace. Unit tests check the lists against every strategy.
POOL_KINDS = (('v1', 'ConfigMap'), ('v1', 'ServiceAccount'), ('v1', 'Service'), ('apps/v1', 'DaemonSet'),
              ('apps/v1', 'Deployment'), ('rbac.authorization.k8s.io/v1', 'ClusterRole'),
              ('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding'), ('rbac.authorization.k8s.io/v1', 'Role'),
              ('rbac.authorization.k8s.io/v1', 'RoleBinding'))
SHARED_KINDS = POOL_KINDS + (('admissionregistration.k8s.io/v1', 'MutatingWebhookConfiguration'),)
# the strategies whose shared objects are pruned (the registry's shared_prune; the NVIDIA family's RuntimeClass is
# released by its records instead, stale_shared)
SHARED_PRUNE = gpu_strategy.SHARED_PRUNE_STRATEGIES


def _rule(labels: dict[str, str], kinds: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    return {'label_selector': ','.join('%s=%s' % kv for kv in sorted(labels.items())),
            'kinds': [{'api_version': a, 'kind': k} for a, k in kinds]}


def prune_rules(strategy: str, pool: str, kinds: Iterable[Iterable[str]] = ()) -> list[dict[str, Any]]:
    """What k8s_converge prunes after a pool's apply: [{label_selector, kinds}], the pool's own objects (POOL_KINDS and
    the stack's own ``kinds``: (apiVersion, kind) pairs its render returns as prune_kinds) and, for the strategies of
    SHARED_PRUNE, the strategy's shared objects."""
    own = POOL_KINDS + tuple(tuple(k) for k in kinds if tuple(k) not in POOL_KINDS)
    rules = [_rule({'app.kubernetes.io/managed-by': MANAGED_BY, POOL_LABEL: pool, SCOPE_LABEL: 'pool'}, own)]
    if strategy in SHARED_PRUNE:
        rules.append(_rule({'app.kubernetes.io/managed-by': MANAGED_BY, STACK_LABEL: strategy, SCOPE_LABEL: 'shared'},
                           SHARED_KINDS))
    return rules


def _runtime_class_wait(validation: list[Manifest], manifests: list[Manifest]) -> str | None:
    """The RuntimeClass named by a validation workload and made by none of the stack's manifests, or None."""
    made = set(m['metadata']['name'] for m in manifests if m.get('kind') == 'RuntimeClass')
    for obj in validation:
        spec = obj.get('spec') or {}
        if obj.get('kind') != 'Pod':
            spec = ((spec.get('template') or {}).get('spec')) or {}
        name = spec.get('runtimeClassName')
        if name and name not in made:
            return name
    return None


def render(params: dict[str, Any]) -> dict[str, Any]:
    """params: strategy, pool, nodes, node_selector, namespace, registry, image_pull_secrets, settings (per strategy),
    facts (node -> gpu_probe_facts), node_state (node -> {labels, allocatable}), node_strategies, require_facts,
    allow_mixed_accounting, validation, var_prefix, live_runtime_classes, cdi_spec_ready (node -> bool), live (the result
    of k8s_objects_info for stacks/live.queries; fills live_nodes, live_runtime_classes and settings), strategy_label
    (the label a node's pool strategy is recorded in: written on the pool's nodes, read on live nodes, the DRA kubelet
    plugin's node affinity).  Returns a dict (see the module's RETURN)."""
    var = params.get('var_prefix') or 'gpu_sharing_stack_'
    strategy = params.get('strategy')
    if strategy not in STRATEGIES:
        raise StackError('%sstrategy must be one of %s; got %r' % (var, ', '.join(STRATEGIES), strategy))
    strategy_label = params.get('strategy_label', STRATEGY_LABEL)
    label_error = strategy_label_error(strategy_label)
    if label_error:
        raise StackError(label_error)
    if params.get('live'):
        # the answers of k8s_objects_info (stacks/live.queries): Nodes, RuntimeClasses and per-strategy settings
        params = live.merge(params, params['live'], var=var)
    pool = check_name(params.get('pool'), var + 'pool')
    namespace = check_name(params.get('namespace') or 'kube-system', var + 'namespace')
    nodes = list(params.get('nodes') or [])
    for n in nodes:
        if not isinstance(n, str) or not n:
            raise StackError('%snodes must be a list of Kubernetes node names; got %r' % (var, n))
    node_selector = params.get('node_selector') or {}
    settings = params.get('settings') or {}
    removing = not params.get('check_conflicts', True)
    # a pool being removed may have no node left (every node moved to another pool, e.g. by migrate_to_dra.yml): its
    # objects are found by name and by the pool's labels, not by its nodes
    if not nodes and not node_selector and not removing:
        raise StackError('%snodes (the pool\'s Kubernetes node names) or %snode_selector must select the pool\'s nodes'
                         % (var, var))
    # removal renders the same objects without hardware checks (the facts may be gone by then)
    facts = {} if removing else (params.get('facts') or {})
    ctx = Ctx(pool, namespace, strategy, params.get('registry') or '', params.get('image_pull_secrets') or [],
              node_selector, var, strategy_label)
    ctx.removing = removing
    node_state = dict(params.get('node_state') or {})
    for obj in params.get('live_nodes') or []:
        meta = obj.get('metadata') or {}
        if meta.get('name') in nodes and meta.get('name') not in node_state:
            node_state[meta['name']] = {'labels': meta.get('labels') or {},
                                        'allocatable': (obj.get('status') or {}).get('allocatable') or {}}
    # pools that share this pool's shared objects (the Stack's shared_family: the NVIDIA strategies share one
    # RuntimeClass among them all)
    stack = registry.stack(strategy)
    family = stack.shared_family()
    other_pools = sorted(set(
        str(((o.get('metadata') or {}).get('labels') or {}).get(POOL_LABEL)) for o in params.get('live_nodes') or []
        if ((o.get('metadata') or {}).get('labels') or {}).get(strategy_label) in family
        and ((o.get('metadata') or {}).get('labels') or {}).get(POOL_LABEL) not in (None, pool)))
    if params.get('check_conflicts', True):
        check_conflicts(strategy, pool, nodes, node_state, params.get('node_strategies') or {},
                        bool(params.get('allow_mixed_accounting')), var, strategy_label)
        scope_warning = _check_hami_webhook_scope(strategy, pool, settings, params.get('live_nodes') or [], var,
                                                  strategy_label)
        if scope_warning:
            ctx.warn(scope_warning)
    if not nodes and node_selector:
        ctx.warn('%snodes is empty: the pool is selected by %snode_selector only, so no node labels are set and no '
                 'per-node hardware checks are made' % (var, var))
    for node in nodes:
        f = facts.get(node) or {}
        share = (f.get('sharing') or {}).get(strategy)
        if share is not None and not share.get('allowed', True):
            raise StackError('%sstrategy=%s is not possible on %s: %s' % (var, strategy, node, share.get('reason', '')))

    # what k8s_objects_info read for the Stack's live_queries, by query key (the renderer reads its own)
    live_objects: dict[str, Any] = dict(((params.get('live') or {}).get('objects')) or {})
    inputs = {'require_facts': params.get('require_facts', True) and not removing,
              'live_runtime_classes': params.get('live_runtime_classes') or [],
              'cdi_spec_ready': params.get('cdi_spec_ready') or {}, 'node_state': node_state, 'removing': removing,
              'live_nodes': params.get('live_nodes') or [], 'cdi_enabled': params.get('cdi_enabled') or {},
              'live_objects': live_objects}
    out = stack_renderer(strategy).render_stack(ctx, strategy, settings, nodes, facts, inputs)
    manifests, labels, resources, limits = out['manifests'], out['labels'], out['resources'], out['limits']
    helm, scheduler_name, readiness = out.get('helm'), out.get('scheduler_name'), out.get('readiness')

    # keeps the agents of the stacks that land on every GPU node (the GPU operator's operands) off the pool's nodes;
    # not for a pool whose own agents go by the operator's deploy labels (mig with the MIG manager): the pools' plan
    # refuses that pool beside a gpu-operator pool
    confine: dict[str, str] = {}
    if not stack.follows_deploy_labels(settings, ctx):
        for other in registry.stacks():
            confine.update(other.keep_off_labels(strategy))
    for node in nodes:
        lab = labels.setdefault(node, {})
        lab[strategy_label] = strategy
        lab[POOL_LABEL] = pool
        lab.update(confine)
    val = validate_settings(params.get('validation'), VALIDATION_SCHEMA, var + 'validation')
    pod_rc = pod_runtime_class(strategy, settings, var)
    if val['runtime_class_name'] is not None:
        if val['runtime_class_name']:
            check_name(val['runtime_class_name'], var + 'validation.runtime_class_name')
        pod_rc = val['runtime_class_name']
    if not removing:
        ctx.note(runtime_class_note(strategy, pod_rc))
    validation: list[Manifest] = []
    if val['enabled']:
        check_name(val['namespace'], var + 'validation.namespace')
        validation = _validation(ctx, strategy, settings, limits, scheduler_name, val, pod_rc,
                                 out.get('claim_api_version'))
    scopes: dict[str, Any] = {}
    for m in manifests:
        scopes.setdefault(m['metadata']['labels'].get(SCOPE_LABEL, 'pool'), []).append(m)
    stale = stale_shared(pool, scopes.get('shared', []), params.get('live_runtime_classes') or [])
    keep_shared = bool(_unrecorded(other_pools, stack, params.get('live_runtime_classes') or []))
    # a stack's own stale shared objects (the DRA stack's: made from release settings every dra pool agrees on, so
    # one no pool renders any more goes by its records alone, whatever other pools there are; on removal the stack's
    # shared objects stay while another pool has nodes, keep_shared, as its release does)
    stack_stale = stack.stale_shared(pool, scopes.get('shared', []), live_objects)
    stale += stack_stale
    return {
        'strategy': strategy,
        'pool': pool,
        'namespace': namespace,
        'manifests': manifests,
        'pool_manifests': scopes.get('pool', []),
        'shared_manifests': scopes.get('shared', []),
        'adopted_manifests': scopes.get('adopted', []),
        'stale_shared_manifests': stale,
        'stale_shared_keep': keep_shared and not stack_stale,
        'prune': [] if removing else prune_rules(strategy, pool, out.get('prune_kinds') or ()),
        'validation_manifests': validation,
        # the RuntimeClass the validation workloads name when no manifest of the stack makes it (the GPU operator
        # creates its own after the Helm install): entry point ready waits for it before it applies them
        'runtime_class_wait': _runtime_class_wait(validation, manifests),
        'node_labels': dict((n, labels[n]) for n in sorted(labels)),
        'node_label_defaults': stack.node_label_defaults(settings, nodes, ctx),
        'node_manifests': [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': n, 'labels': labels[n]}}
                           for n in sorted(labels)],
        'resources': resources,
        'accounting': gpu_strategy.family(strategy),
        'other_pools': other_pools,
        'keep_shared': keep_shared,
        'scheduler_name': scheduler_name,
        'runtime_class_name': pod_rc,
        'readiness': readiness,
        'extender_url': ctx.extender_url,
        'extender': ctx.extender,
        'restarts': [] if removing else ctx.restarts,
        'helm': helm,
        'images': ctx.images,
        'warnings': ctx.warnings,
        'notes': ctx.notes,
    }
