# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpuops.k8s_gpu.gpu_stack_manifests: the same render, in the controller process.

The module is a pure renderer (no I/O), so running it as a module only costs a Python process, AnsiballZ and
ansible.module_utils.basic on every call (about 0.35 CPU-s). This plugin has the module's name and takes over: it
checks the task arguments against the module's own argument specification (stacks/render.argument_spec) with the
messages AnsibleModule would give, calls render() here and returns what the module returns. It talks to no host,
so delegate_to and the connection do not matter; check mode renders the same as a normal run. The module stays as
the documentation and as a fallback when it is executed directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import pool_host_vars
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.render import argument_spec, render


# option -> what pool_host_vars returns it under
INVENTORY_OPTIONS = ('facts', 'node_strategies', 'cdi_spec_ready', 'cdi_enabled')


def with_inventory_vars(params: dict[str, Any], hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """params with the pool's host variables read from the inventory (filter pool_host_vars over params['nodes']),
    the entries already in params winning: what role gpu_sharing_stack templated into the task's arguments before
    (every node's facts, once more per pool), read here in the controller process instead. A new dict."""
    found = pool_host_vars(params.get('nodes') or [], hostvars)
    out = dict(params)
    for key in INVENTORY_OPTIONS:
        merged = dict(found[key])
        merged.update(params.get(key) or {})
        out[key] = merged
    return out


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # no effect

        validation = ArgumentSpecValidator(argument_spec()).validate(dict(self._task.args))
        if validation.error_messages:
            # what AnsibleModule says for the same arguments: the first error, and unknown options named as such
            msg = validation.errors.msg
            if isinstance(validation.errors[0], UnsupportedError):
                msg = 'Unsupported parameters for (%s) module: %s' % (self._task.action, msg)
            result.update(failed=True, changed=False, msg=msg)
            return result

        params = validation.validated_parameters
        if params.get('inventory_vars'):
            params = with_inventory_vars(params, (task_vars or {}).get('hostvars') or {})
        try:
            out = render(params)
        except StackError as e:
            result.update(failed=True, changed=False, msg=str(e))
            return result

        result.update(out)
        result['changed'] = False
        # render's warnings become the task's warnings: Ansible shows a result's `warnings` list and registers it. An
        # empty list is left out, as the controller does for a module's result (2.16 would keep it in an action's).
        if out['warnings']:
            result['warnings'] = list(out['warnings'])
        else:
            del result['warnings']
        return result
