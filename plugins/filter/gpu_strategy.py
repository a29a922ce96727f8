# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the properties of a GPU sharing strategy from the collection's one strategy model, for roles and playbooks."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: gpu_strategy
short_description: The properties of a GPU sharing strategy (the collection's strategy model)
version_added: 0.2.0
description:
  - Looks a strategy up in the collection's one strategy model (C(plugins/module_utils/_common/gpu_strategy.py)) so roles
    and playbooks do not keep their own lists of strategies.
options:
  _input:
    description: Strategy name (C(exclusive), C(time-slicing), C(mps), C(mig), C(gpushare), C(volcano), C(hami),
      C(gpu-manager), C(gpu-operator)).
    type: str
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Only for strategies whose pods use RuntimeClass nvidia
  ansible.builtin.debug:
    msg: RuntimeClass needed
  when: (my_strategy | gpuops.k8s_gpu.gpu_strategy).runtime_class
'''

RETURN = r'''
_value:
  description:
    - C(name), C(family) (accounting family), C(resources), C(nvidia_plugin), C(scheduler_extender),
      C(runtime_class), C(node_strategy) and C(node_labels).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import STRATEGIES, strategy


def gpu_strategy(name):
    if name not in STRATEGIES:
        raise AnsibleFilterError('gpu_strategy: %r is not a strategy; allowed: %s' % (name, ', '.join(STRATEGIES)))
    out = dict(strategy(name))
    out['resources'] = list(out['resources'])
    out['name'] = name
    return out


class FilterModule(object):
    def filters(self):
        return {'gpu_strategy': gpu_strategy}
