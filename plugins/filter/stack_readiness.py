# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role gpu_sharing_stack: whether a stack is ready, from the Node objects of its pool."""

from __future__ import annotations

DOCUMENTATION = r'''
name: stack_readiness
short_description: Whether a GPU sharing stack is ready, from the Node objects of its pool
version_added: 0.1.0
description:
  - Reads, on every Node of the input, the label the stack's C(readiness) names (M(gpuops.k8s_gpu.gpu_stack_manifests)
    returns it; for V(mig) with the MIG manager C(nvidia.com/mig.config.state)) and tells whether every node of
    C(readiness.nodes) has reached C(readiness.value), and whether a node reports C(readiness.failed_value) (waiting
    longer cannot help).
  - Used by role C(gpuops.k8s_gpu.gpu_sharing_stack) as the condition of its bounded wait and for its failure message.
options:
  _input:
    description: Node objects (C(resources) of C(kubernetes.core.k8s_info)).
    type: list
    elements: dict
    required: true
  readiness:
    description: The stack's C(readiness) (C(label), C(value), C(failed_value), C(nodes)); null means ready.
    type: dict
    required: true
  pool:
    description: Pool name, for the message.
    type: str
    default: ''
  namespace:
    description: Namespace of the stack, for the C(kubectl logs) hint of the message.
    type: str
    default: ''
  retries:
    description: Retries of the wait, for the message.
    type: int
  delay:
    description: Seconds between retries, for the message.
    type: int
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Wait for the MIG manager
  kubernetes.core.k8s_info:
    kind: Node
    label_selectors: ["gpuops.io/sharing-pool={{ stack.pool }}"]
  register: nodes
  until: (nodes.resources | gpuops.k8s_gpu.stack_readiness(stack.readiness)).done
  retries: 60
  delay: 10
'''

RETURN = r'''
_value:
  description:
    - C(ready) (every node reached the value), C(done) (ready, or a node reports the failed value), C(failed) (those
      nodes), C(states) (node name to the label's value, empty when not set yet) and C(msg) (why the stack is not
      ready; empty when it is).
  type: dict
'''

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    stack_readiness as _readiness,
)


def stack_readiness(nodes: list[dict[str, Any]] | None, readiness: dict[str, Any] | None, pool: str = '',
                    namespace: str = '', retries: Any = None, delay: Any = None) -> dict[str, Any]:
    return _readiness(nodes, readiness, pool=pool, namespace=namespace, retries=retries, delay=delay)


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'stack_readiness': stack_readiness}
