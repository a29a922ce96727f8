# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_sharing_stack: whether kubernetes.core.helm can drive the helm client on the delegate."""

from __future__ import annotations

DOCUMENTATION = r'''
name: helm_client_check
short_description: Whether kubernetes.core.helm can drive a helm client
version_added: 0.1.0
description:
  - Reads the registered result of C(helm version --short) run where the Helm release will be installed and the
    version of the kubernetes.core collection on the controller (the one whose C(kubernetes.core.helm) will run), and
    tells whether that pair works - helm 3 with every kubernetes.core release, helm 4 from kubernetes.core 6.4.0
    (6.3.0 refuses helm 4; older releases run it with helm 3 flags).
  - Used by role C(gpuops.k8s_gpu.gpu_sharing_stack) before it changes anything, for strategies that install a Helm
    release (V(gpu-operator), V(dra)).
options:
  _input:
    description: The registered result of C(ansible.builtin.command) running C(helm version --short) (C(rc), C(stdout),
      C(stderr)).
    type: dict
    required: true
  host:
    description: The host the command ran on, for the message.
    type: str
    default: ''
  kubernetes_core_version:
    description:
      - The kubernetes.core version to check against; by default the version of the kubernetes.core collection this
        controller loads (its C(MANIFEST.json), or C(galaxy.yml) for a source checkout). When it cannot be read only
        the helm side is checked.
    type: str
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Read the helm client
  ansible.builtin.command:
    argv: [helm, version, --short]
  changed_when: false
  failed_when: false
  check_mode: false
  register: helm_client

- name: Check that kubernetes.core can drive it
  ansible.builtin.assert:
    that: check.ok
    fail_msg: "{{ check.msg }}"
  vars:
    check: "{{ helm_client | gpuops.k8s_gpu.helm_client_check(host=inventory_hostname) }}"
'''

RETURN = r'''
_value:
  description:
    - C(ok) (the pair works), C(msg) (why not, naming both versions and what to change; empty when ok),
      C(helm_version) and C(kubernetes_core_version) (X.Y.Z; empty when unknown).
  type: dict
'''

import json
import os
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.helm_client import (
    helm_client_check as _check,
)


def installed_kubernetes_core_version() -> str | None:
    """The version of the kubernetes.core collection this controller loads, or None."""
    try:
        from ansible_collections.kubernetes import core  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    for base in list(getattr(core, '__path__', None) or []):
        manifest = os.path.join(base, 'MANIFEST.json')
        if os.path.isfile(manifest):
            try:
                with open(manifest) as f:
                    return str(json.load(f)['collection_info']['version'])
            except (OSError, ValueError, KeyError, TypeError):
                return None
        galaxy = os.path.join(base, 'galaxy.yml')
        if os.path.isfile(galaxy):
            try:
                import yaml  # pylint: disable=import-outside-toplevel
                with open(galaxy) as f:
                    return str(yaml.safe_load(f)['version'])
            except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
                return None
    return None


def helm_client_check(result: dict[str, Any] | None, host: str = '',
                      kubernetes_core_version: str | None = None) -> dict[str, Any]:
    result = result or {}
    core = kubernetes_core_version if kubernetes_core_version is not None else installed_kubernetes_core_version()
    return _check(result.get('rc'), result.get('stdout'), result.get('stderr') or result.get('msg'), core, host=host)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'helm_client_check': helm_client_check}
