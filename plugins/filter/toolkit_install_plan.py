# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role nvidia_container_runtime: where the NVIDIA Container Toolkit comes from on this node (apt or dnf),
and the pinned package specs (the decisions in module_utils/_node/runtime_toolkit_repo.py)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: toolkit_install_plan
short_description: How the NVIDIA Container Toolkit is installed on a node (apt or dnf, repository, pinned packages)
version_added: 0.1.0
description:
  - From the node's facts and the role's variables, the package format (C(apt) for Debian/Ubuntu, C(rpm) for
    RHEL/Rocky/Alma 8, 9 and 10), the repository URL in NVIDIA's layout (C(libnvidia-container/stable/deb/ARCH) or
    C(libnvidia-container/stable/rpm/ARCH)) under the base URL, the signing key URL, and every package pinned to the
    version in the package manager's spelling (C(name=1.20.0-1) or C(name-1.20.0-1)).
  - For C(rpm) also the C(ansible.builtin.yum_repository) settings, with C(gpgcheck) and C(repo_gpgcheck) on.
  - Bad input gives C(errors), a list of sentences naming the variable, its value and what is allowed.
positional: base_url, version, packages, repo_url, key_url
options:
  _input:
    description: The node's C(ansible_facts) (C(os_family), C(distribution_major_version), C(architecture)).
    type: dict
    required: true
  base_url:
    description: Base URL of NVIDIA's repositories or of a mirror of them.
    type: str
    required: true
  version:
    description: The version to pin every package to (e.g. C(1.20.0-1)); empty for the newest.
    type: str
    default: ""
  packages:
    description: Package names.
    type: list
    elements: str
    required: true
  repo_url:
    description: The repository URL; empty derives it from O(base_url).
    type: str
    default: ""
  key_url:
    description: The signing key URL; empty derives it from O(base_url).
    type: str
    default: ""
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Plan the toolkit install
  ansible.builtin.set_fact:
    plan: >-
      {{ ansible_facts | gpuops.k8s_gpu.toolkit_install_plan('https://nvidia.github.io', '1.20.0-1',
         ['nvidia-container-toolkit', 'nvidia-container-toolkit-base']) }}
'''

RETURN = r'''
_value:
  description: C(family), C(repo_url), C(key_url), C(packages), C(version), C(errors) and for rpm C(yum_repository).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_toolkit_repo import install_plan


def toolkit_install_plan(facts: dict[str, Any], base_url: str, version: str = '', packages: list[str] | None = None,
                         repo_url: str = '', key_url: str = '') -> Any:
    facts = facts or {}
    return install_plan(facts.get('os_family') or 'unknown', facts.get('distribution_major_version'),
                        facts.get('architecture', 'x86_64'), base_url, version, packages or [], repo_url, key_url)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'toolkit_install_plan': toolkit_install_plan}
