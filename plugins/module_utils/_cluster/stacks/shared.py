# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pools of one strategy share cluster objects (HAMi's scheduler, Volcano's configs, gpushare's extender,
gpu-manager's admission, the GPU operator's release): each strategy's Stack (stacks/registry) gives its module's
SHARED, which says which of its settings and which pool variables enter them. Two pools of one strategy whose values
of these differ would overwrite each other's objects on every run (the last pool wins; a re-run is never changed=0):
conflicts() refuses them in the pools' plan, naming the pools and every setting that differs (a Stack may check its
pools itself instead: own_conflicts, the DRA driver's release, stacks/dra.release_conflicts)."""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry

# strategy -> the module that owns its shared objects (the Stacks that declare shared objects)
OWNERS = dict((s.name, s.shared_module) for s in registry.stacks() if s.shared is not None)


def _text(value: Any) -> str:
    return 'unset' if value is None else json.dumps(value, sort_keys=True, separators=(',', ':'))


def view(strategy: str, settings: dict[str, Any]) -> dict[str, Any]:
    """{name: value} of what a pool (sharing_pools' 'settings': variable name -> value) puts into its strategy's shared
    objects: the strategy's shared keys with the role's defaults filled in, the pool variables as given (None: unset)."""
    module = OWNERS[strategy]
    shared = module.SHARED
    schema = module.SETTINGS[shared['settings']]
    var = 'gpu_sharing_stack_' + shared['settings']
    own = settings.get(var)
    own = own if isinstance(own, dict) else {}
    out: dict[str, Any] = {}
    for key in shared['keys']:
        out['%s.%s' % (var, key)] = own.get(key, schema[key]['default'])
    for name in shared['pool_variables']:
        out[name] = settings.get(name)
    return out


def conflicts(pools: list[dict[str, Any]]) -> list[str]:
    """One error per strategy whose pools (sharing_pools' list of {name, strategy, settings}) differ in a shared
    setting, naming the pools, each setting and every pool's value."""
    errors: list[str] = []
    for strategy in sorted(OWNERS):
        mine = [p for p in pools if p.get('strategy') == strategy]
        if len(mine) < 2:
            continue
        views = [(p['name'], view(strategy, p.get('settings') or {})) for p in mine]
        differ = []
        for key in sorted(views[0][1]):
            values = [(name, v[key]) for name, v in views]
            if any(value != values[0][1] for dummy, value in values[1:]):
                differ.append('%s (%s)' % (key, ', '.join('%s: %s' % (n, _text(value)) for n, value in values)))
        if differ:
            errors.append('%s pools %s share %s, so the settings that go into it must be the same in each; they '
                          'differ in %s' % (strategy, ', '.join(n for n, dummy in views),
                                            OWNERS[strategy].SHARED['objects'], '; '.join(differ)))
    return errors


def operator_mix(pools: list[dict[str, Any]]) -> list[str]:
    """Errors for a gpu-operator pool beside a mig pool with the MIG manager (gpu_sharing_stack_mig.manager, on by
    default): that pool's device plugin and MIG manager go by nvidia.com/gpu.deploy.device-plugin and
    .mig-manager, which the operator sets to deploy its own device plugin and MIG manager there, or removes with
    nvidia.com/gpu.deploy.operands=false (NVIDIA/gpu-operator v26.7.0 controllers/state_manager.go; GPUOP-13): the
    operator cannot be kept off those nodes. Every other node-level pool carries that label and is left alone.
    The Stacks say which: places_on_every_gpu_node (the operator) and pool_follows_deploy_labels (mig, manager on)."""
    errors: list[str] = []
    for stack in registry.stacks():
        if not stack.places_on_every_gpu_node:
            continue
        mine = [p['name'] for p in pools if p.get('strategy') == stack.name]
        if not mine:
            continue
        followers = []
        for p in pools:
            other = registry.find(p.get('strategy'))
            if other is not None and other.pool_follows_deploy_labels(p.get('settings') or {}):
                followers.append(p['name'])
        if followers:
            errors.append(stack.deploy_label_conflict(mine, followers))
    return errors
