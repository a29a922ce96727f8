# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_sharing_stack: a pool's settings as one dict, defaulted once from the role's argument_specs."""

from __future__ import annotations

DOCUMENTATION = r'''
name: stack_settings
short_description: A pool's settings of role gpu_sharing_stack as one dict
version_added: "0.1.0"
description:
  - The settings of one pool (C(gpu_sharing_stack_settings), keys the role's variable names such as
    C(gpu_sharing_stack_hami)) over the role's variables of the same names (O(variables)); a setting given by neither
    takes the default of the role's C(meta/argument_specs.yml). Returns every pool setting.
  - The pool settings are the role's options C(gpu_sharing_stack_<key>) of every settings key of the strategy model
    (C(gpu_sharing_stack_nvidia), ..., C(gpu_sharing_stack_gpu_operator)) and the pool-wide options
    C(node_selector), C(namespace), C(registry), C(image_pull_secrets), C(allow_mixed_accounting), C(validation),
    C(validation_image) and C(helm_install) (each with the prefix C(gpu_sharing_stack_)).
  - Each value is checked against the role's argument_specs (type, choices); an error names the variable, the value
    and what is allowed. The keys inside a strategy's settings are checked by the render (M(gpuops.k8s_gpu.gpu_stack_manifests)).
options:
  _input:
    description: The pool's settings (C(gpu_sharing_stack_settings)); a key that is not a pool setting is refused.
    type: dict
    required: true
  variables:
    description: The role's variables of the same names (what a setting left out of O(_input) takes).
    type: dict
    default: {}
  render:
    description:
      - Return only the strategies' settings, keyed as M(gpuops.k8s_gpu.gpu_stack_manifests) takes them in its
        C(settings) (C(nvidia), C(time_slicing), ..., without the prefix); O(_input) is then this filter's own result.
    type: bool
    default: false
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: The pool's settings, one dict
  ansible.builtin.set_fact:
    pool_settings: "{{ {'gpu_sharing_stack_hami': {'device_split_count': 4}} | gpuops.k8s_gpu.stack_settings }}"
'''

RETURN = r'''
_value:
  description: Every pool setting (the role's variable name) to its value; with O(render), the strategies' settings.
  type: dict
'''

from collections.abc import Callable, Iterable
from typing import Any

import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

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


# (path, mtime_ns, size) -> the options of that file: a role pass calls the filter three times in one worker process
# (settings.yml: the names twice, then the settings), and the file is 800 lines
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
    """The argument spec of the pool settings, one level deep (the settings' own keys are the render's)."""
    out = {}
    for name in names:
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


def stack_settings(settings: Any, variables: dict[str, Any] | None = None, render: bool = False,
                   options: dict[str, Any] | None = None) -> dict[str, Any]:
    if render:
        return dict((key, (settings or {}).get(PREFIX + key) or {}) for key in SETTINGS_KEYS)
    if not isinstance(settings, dict):
        raise AnsibleFilterError('gpu_sharing_stack_settings must be a dictionary of the role\'s variable names to '
                                 'values; got %r' % (settings,))
    names = pool_setting_names()
    unknown = sorted(k for k in settings if k not in names)
    if unknown:
        raise AnsibleFilterError('gpu_sharing_stack_settings has unknown key(s) %s; allowed: %s'
                                 % (', '.join(str(k) for k in unknown), ', '.join(names)))
    spec = _spec(options if options is not None else role_options(), names)
    variables = variables or {}
    out = {}
    for name in names:
        if name in settings:
            out[name] = settings[name]
        elif variables.get(name) is not None:
            out[name] = variables[name]
        else:
            out[name] = spec[name].get('default')
    out = _plain(out)
    result = ArgumentSpecValidator(spec).validate(dict((k, v) for k, v in out.items() if v is not None))
    if result.error_messages:
        raise AnsibleFilterError('gpu_sharing_stack_settings: %s' % '; '.join(str(m) for m in result.error_messages))
    return out


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'stack_settings': stack_settings}
