# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the properties of a GPU sharing strategy from the collection's one strategy model, for roles and playbooks."""

from __future__ import annotations

DOCUMENTATION = r'''
name: gpu_strategy
short_description: The properties of a GPU sharing strategy (the collection's strategy model)
version_added: 0.1.0
description:
  - Looks a strategy up in the collection's one strategy model (C(plugins/module_utils/_common/gpu_strategy.py)) so roles
    and playbooks do not keep their own lists of strategies.
options:
  _input:
    description: Strategy name (C(exclusive), C(time-slicing), C(mps), C(mig), C(gpushare), C(volcano), C(hami),
      C(gpu-manager), C(gpu-operator), C(dra)).
    type: str
    required: true
  compute_mode_setting:
    description:
      - A compute mode setting (role variable C(gpu_node_sharing_compute_mode)) - C(auto), C(keep), C(default),
        C(exclusive_process) or C(prohibited). When given, the result's C(compute_mode) is the mode to set on a node of
        the strategy - the strategy's own for C(auto), null for C(keep), else the mode named.
    type: str
  mig_devices:
    description:
      - A mig pool's MIG geometry, a mapping of MIG profile to count (seven 1g.10gb devices - C(1g.10gb) mapped
        to C(7)). With O(mig_config_name) it makes the result's C(mig_config_name).
    type: dict
  mig_config_name:
    description:
      - The mig-parted config name the site chose; empty to name it after O(mig_devices).
    type: str
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Only for strategies whose pods use RuntimeClass nvidia
  ansible.builtin.debug:
    msg: RuntimeClass needed
  when: (my_strategy | gpuops.k8s_gpu.gpu_strategy).runtime_class

- name: The compute mode a node of the strategy wants (null - leave it alone)
  ansible.builtin.set_fact:
    node_compute_mode: "{{ (my_strategy | gpuops.k8s_gpu.gpu_strategy(compute_mode_setting='auto')).compute_mode }}"

- name: The mig-parted config name of a mig pool (the name the stack's MIG manager selects)
  ansible.builtin.set_fact:
    mig_name: "{{ ('mig' | gpuops.k8s_gpu.gpu_strategy(mig_devices={'1g.10gb': 7})).mig_config_name }}"
'''

RETURN = r'''
_value:
  description:
    - C(name), C(title) (the name in messages), C(family) (accounting family), C(resources), C(nvidia_plugin),
      C(scheduler_extender), C(runtime_class), C(default_runtime) (nvidia must be the container runtime's default),
      C(compute_mode) (the GPU compute mode its nodes want, null to leave it alone), C(node_strategy),
      C(node_labels) and C(node_state) (I(status) - resources its agents put into a Node's status themselves -
      and I(annotations) they set; role gpu_node_labels clears both with state absent), C(shared_prune) (role
      gpu_sharing_stack deletes the strategy's shared objects a changed setting no longer renders).
    - With O(mig_devices) or O(mig_config_name), also the key mig_config_name, the mig-parted config name of the pool
      (V(gpuops-1g-10gb-7) for seven 1g.10gb devices).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (
    STRATEGIES, mig_config_name as _mig_config_name, node_compute_mode, strategy,
)


def gpu_strategy(name: Any, compute_mode_setting: str | None = None, mig_devices: Any = None,
                 mig_config_name: str | None = None) -> dict[str, Any]:
    if name not in STRATEGIES:
        raise AnsibleFilterError('gpu_strategy: %r is not a strategy; allowed: %s' % (name, ', '.join(STRATEGIES)))
    out = dict(strategy(name))
    out['resources'] = list(out['resources'])
    out['name'] = name
    if compute_mode_setting is not None:
        try:
            out['compute_mode'] = node_compute_mode(name, compute_mode_setting)
        except ValueError as e:
            raise AnsibleFilterError('gpu_strategy: compute_mode_setting %s' % e)
    if mig_devices is not None or mig_config_name is not None:
        if mig_devices is not None and not isinstance(mig_devices, dict):
            raise AnsibleFilterError('gpu_strategy: mig_devices must be a mapping of MIG profile to count, like '
                                     '{"1g.10gb": 7}; got %r' % (mig_devices,))
        out['mig_config_name'] = _mig_config_name(mig_devices, mig_config_name or '')
    return out


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'gpu_strategy': gpu_strategy}
