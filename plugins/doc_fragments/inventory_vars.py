# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of the filters that read the inventory: the magic variables C(hostvars) and C(groups), described once."""


class ModuleDocFragment(object):

    # Option hostvars (a filter's argument)
    DOCUMENTATION = r'''
options:
  hostvars:
    description: The variables of every host (the magic variable C(hostvars)).
    type: raw
    required: true
'''

    # The filter's input is the magic variable groups, with option hostvars
    GROUPS = r'''
options:
  _input:
    description: The inventory groups (the magic variable C(groups)).
    type: dict
    required: true
  hostvars:
    description: The variables of every host (the magic variable C(hostvars)).
    type: raw
    required: true
'''
