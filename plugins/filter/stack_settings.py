# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_sharing_stack: a pool's settings validated once, at the role's boundary, with Ansible's own
validator and every default filled there (the settings blocks' argument spec built in process from the renderers'
schemas)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: stack_settings
short_description: A pool's settings of role gpu_sharing_stack, validated once and fully defaulted
version_added: "0.1.0"
description:
  - The settings of one pool (C(gpu_sharing_stack_settings), keys the role's variable names such as
    C(gpu_sharing_stack_hami)) over the role's variables of the same names (O(variables)), validated in one pass of
    Ansible's own validator (C(ArgumentSpecValidator)), which fills every default. Role gpu_sharing_stack runs it once
    per pool and hands the result to the live read and the render, which fill no default again.
  - The pool settings are the pool-wide options C(node_selector), C(namespace), C(registry), C(image_pull_secrets),
    C(allow_mixed_accounting), C(validation), C(validation_image) and C(helm_install) (each with the prefix
    C(gpu_sharing_stack_); their type, choices and default from the role's C(meta/argument_specs.yml)) and the role's
    options C(gpu_sharing_stack_<key>) of every settings key of the strategy model (C(gpu_sharing_stack_nvidia), ...,
    C(gpu_sharing_stack_dra)), whose keys, types, choices and defaults come from the renderers' schemas (the one
    declaration; the role's argument_specs options are generated from them).
  - A value of the wrong type, a value outside its choices and an unknown key, at either level, are refused with an
    error that names the variable, the value and what is allowed. Ranges (C(min)/C(max)) and what depends on the
    nodes' facts are checked by the render (M(gpuops.k8s_gpu.gpu_stack_manifests)), before anything changes.
options:
  _input:
    description: The pool's settings (C(gpu_sharing_stack_settings)); a key that is not a pool setting is refused.
    type: dict
    required: true
  variables:
    description: The role's variables of the same names (what a setting left out of O(_input) takes).
    type: dict
    default: {}
  names:
    description:
      - Return only the role's variable names of the pool settings, a list (O(_input) is not read, give V({})). These
        are the names playbooks C(cluster.yml) and C(uninstall.yml) collect from each pool's hosts.
    type: bool
    default: false
  render:
    description:
      - Return only the C(settings) of O(_input), a result of this filter (kept for callers of the earlier form; the
        role reads C(settings) of the result directly).
    type: bool
    default: false
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: The pool's settings, one dict
  ansible.builtin.set_fact:
    pool_settings: "{{ {'gpu_sharing_stack_hami': {'device_split_count': 4}} | gpuops.k8s_gpu.stack_settings }}"

- name: The pool settings' variable names, from the strategy model
  ansible.builtin.debug:
    msg: "{{ {} | gpuops.k8s_gpu.stack_settings(names=true) }}"
'''

RETURN = r'''
_value:
  description:
    - Each pool-wide setting under the role's variable name (C(gpu_sharing_stack_namespace), ...), and C(settings),
      every settings block by its key (C(nvidia), C(time_slicing), ..., as M(gpuops.k8s_gpu.gpu_stack_manifests)
      takes them), every key of each block present (its default where not given).
    - With O(names), the list of the pool settings' variable names; with O(render), the C(settings) of O(_input).
  type: raw
'''

from collections.abc import Callable, Iterable
from typing import Any

import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.registry import settings_spec
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import SETTINGS_KEYS

PREFIX = 'gpu_sharing_stack_'
# the pool-wide settings of role gpu_sharing_stack; the strategies' settings come from the strategy model
POOL_WIDE = ('node_selector', 'namespace', 'registry', 'image_pull_secrets', 'allow_mixed_accounting', 'validation',
             'validation_image', 'helm_install')
ARGUMENT_SPECS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'roles', 'gpu_sharing_stack',
                              'meta', 'argument_specs.yml')


def pool_setting_names() -> tuple[str, ...]:
    """The role's variable names of a pool's settings: the pool-wide ones, then one per settings key of the model."""
    return tuple(PREFIX + n for n in POOL_WIDE[:4] + SETTINGS_KEYS + POOL_WIDE[4:])


# (path, mtime_ns, size) -> the options of that file (about 800 lines): the pool-wide settings' declarations, read
# once per worker process and file version
_OPTIONS_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}


def role_options(path: str = ARGUMENT_SPECS) -> dict[str, Any]:
    """The options of the main entry point of the role's meta/argument_specs.yml (read once per process and file
    version; libyaml's loader when PyYAML has it: 12 ms against 120 ms for this file)."""
    import yaml
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _OPTIONS_CACHE:
        loader = getattr(yaml, 'CSafeLoader', None) or yaml.SafeLoader
        with open(path) as f:
            _OPTIONS_CACHE.clear()
            _OPTIONS_CACHE[key] = yaml.load(f, Loader=loader)['argument_specs']['main']['options']
    return _OPTIONS_CACHE[key]


def _spec(options: dict[str, Any], names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The argument spec of the pool settings: the pool-wide ones from the role's argument_specs (their
    declaration), the settings blocks built in process from the renderers' schemas (registry.settings_spec)."""
    blocks = settings_spec(PREFIX)
    out = {}
    for name in names:
        if name in blocks:
            out[name] = blocks[name]
            continue
        opt = options.get(name)
        if opt is None:
            raise AnsibleFilterError('stack_settings: role gpu_sharing_stack declares no option %s' % name)
        out[name] = dict((k, v) for k, v in opt.items() if k in ('type', 'elements', 'choices', 'default'))
    return out


def _plain(value: Any) -> Any:
    """``value`` as plain dicts and lists (each mapping and sequence copied once). The settings come from templating:
    Ansible's lazy containers, whose deep copy (ArgumentSpecValidator copies what it validates) also copies their
    templar with every variable of the task - at 5,000 inventory hosts, minutes and gigabytes per pool."""
    if isinstance(value, Mapping):
        return dict((k, _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def stack_settings(settings: Any, variables: dict[str, Any] | None = None, render: bool = False, names: bool = False,
                   options: dict[str, Any] | None = None) -> Any:
    if names:
        return list(pool_setting_names())
    if render:
        return (settings or {}).get('settings') or {}
    if not isinstance(settings, dict):
        raise AnsibleFilterError('gpu_sharing_stack_settings must be a dictionary of the role\'s variable names to '
                                 'values; got %r' % (settings,))
    all_names = pool_setting_names()
    unknown = sorted(k for k in settings if k not in all_names)
    if unknown:
        raise AnsibleFilterError('gpu_sharing_stack_settings has unknown key(s) %s; allowed: %s'
                                 % (', '.join(str(k) for k in unknown), ', '.join(all_names)))
    spec = _spec(options if options is not None else role_options(), all_names)
    variables = variables or {}
    given = {}
    for name in all_names:
        value = settings[name] if name in settings else variables.get(name)
        if value is not None:
            given[name] = value
    # one pass of Ansible's validator: types, choices and unknown keys at both levels, every default filled (a setting
    # given by neither the pool nor the role's variables, a key a block leaves out); null means "not given"
    result = ArgumentSpecValidator(spec).validate(_plain(given))
    if result.error_messages:
        raise AnsibleFilterError('gpu_sharing_stack_settings: %s' % '; '.join(str(m) for m in result.error_messages))
    valid = result.validated_parameters
    out: dict[str, Any] = dict((PREFIX + n, valid.get(PREFIX + n)) for n in POOL_WIDE)
    out['settings'] = dict((key, valid[PREFIX + key]) for key in SETTINGS_KEYS)
    return out


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'stack_settings': stack_settings}
