# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the node roles: the node's distribution family, package manager and per-family vars files, computed
once from ansible_facts (module_utils/_common/platforms.py)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: node_platform
short_description: The node's distribution family, package manager and per-family vars files
version_added: 0.1.0
description:
  - From the node's facts, the family (C(Ubuntu) for Ubuntu, C(ansible_facts.os_family) otherwise), the package
    manager the roles dispatch their package tasks to (C(apt) or C(dnf); empty for a family they have no package
    tasks for), whether the collection supports the family, the supported families, and the per-family vars files
    a role loads with C(first_found), most specific first, ending with C(default.yml).
  - The one list of supported distributions is C(plugins/module_utils/_common/platforms.py).
options:
  _input:
    description: The node's C(ansible_facts) (C(distribution), C(os_family), C(distribution_major_version)); may be empty.
    type: dict
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Load the role's per-family variables
  ansible.builtin.include_vars:
    file: "{{ lookup('ansible.builtin.first_found', files=(ansible_facts | gpuops.k8s_gpu.node_platform).vars_files,
                     paths=[role_path ~ '/vars']) }}"
'''

RETURN = r'''
_value:
  description: C(family), C(os_family), C(pkg_mgr), C(supported), C(supported_families) and C(vars_files).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.platforms import node_platform


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'node_platform': node_platform}
