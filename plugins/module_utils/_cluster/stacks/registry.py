# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strategy name -> its Stack object (stacks/base.Stack), built from the strategy model (gpu_strategy, the one home
of the strategies): each strategy's stack module (gpu_strategy.stack_info(name)['stack'], the modules below) makes the
object with its ``stack(name)``. The shared code asks these objects and names no strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import (
    dra, gpu_manager, gpushare, hami, nvidia, operator,
    volcano,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import argument_spec

# the stack modules, by the name the strategy model gives each strategy's stack; each has SETTINGS, render_stack (the
# one renderer signature, stacks/render) and stack(name) -> Stack
MODULES = {
    'nvidia': nvidia,
    'gpushare': gpushare,
    'volcano': volcano,
    'hami': hami,
    'gpu_manager': gpu_manager,
    'operator': operator,
    'dra': dra,
}

# every strategy of the model -> its Stack, in model order
REGISTRY: dict[str, Stack] = dict(
    (name, MODULES[gpu_strategy.stack_info(name)['stack']].stack(name)) for name in gpu_strategy.STRATEGIES)


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (KeyError for an unknown one)."""
    return REGISTRY[name]


def find(name: object) -> Stack | None:
    """The Stack of strategy ``name``, None for anything that is not a strategy (input not yet checked)."""
    return REGISTRY.get(name) if isinstance(name, str) else None


def stacks() -> list[Stack]:
    """Every Stack, in the order of the strategy model."""
    return list(REGISTRY.values())


def names(predicate: Callable[[Stack], object]) -> tuple[str, ...]:
    """The strategies whose Stack satisfies ``predicate`` (Stack -> bool), in model order."""
    return tuple(name for name, s in REGISTRY.items() if predicate(s))


def settings_schemas() -> dict[str, dict[str, Any]]:
    """Settings key -> its schema (the ``SETTINGS`` of the stack module that declares it), in the model's order
    (gpu_strategy.SETTINGS_KEYS)."""
    found: dict[str, dict[str, Any]] = {}
    for module in MODULES.values():
        found.update(module.SETTINGS)
    return dict((key, found[key]) for key in gpu_strategy.SETTINGS_KEYS)


def settings_spec(prefix: str) -> dict[str, dict[str, Any]]:
    """The argument spec of every settings block, keyed ``prefix + key`` (role gpu_sharing_stack's variable names with
    ``gpu_sharing_stack_``): a dict, default {} (and for a null), its keys from the block's schema
    (common.argument_spec). Built in process on each call (the defaults are copies)."""
    return dict((prefix + key, {'type': 'dict', 'default': {}, 'apply_defaults': True,
                                'options': argument_spec(schema, prefix + key)})
                for key, schema in settings_schemas().items())
