#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_node_labels_apply
short_description: Send the Node label and annotation patches planned by role gpu_node_labels, in one run
version_added: 0.1.0
description:
  - Sends one JSON merge patch per node on C(metadata.labels) and C(metadata.annotations) only (a null value removes
    the key), all in one module run, so a fleet of nodes costs one task instead of one task per node.
  - The patches come from the filter P(gpuops.k8s_gpu.node_labels_patch#filter), which only lists nodes that differ;
    this module is the one writer of the collection's Node labels.
  - Each node is read before its patch, for the diff.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.k8s_auth_options
  - gpuops.k8s_gpu.attributes.actionable
attributes:
  check_mode:
    details:
      - The patches are sent with C(dryRun=All), so the API server checks them and stores nothing.
  diff_mode:
    details:
      - Labels and annotations of each node before and after its patch, in RV(results).
options:
  patches:
    description:
      - One item per node, C({node, patch}); C(patch) is a Node document whose C(metadata) has only C(name),
        C(labels) and C(annotations). Anything else in C(metadata) is refused before any request.
    type: list
    elements: dict
    required: true
requirements:
  - kubernetes (Python client)
  - kubernetes.core collection (its client configuration)
notes:
  - Nodes are patched in the order given; when one fails the module stops and RV(results) lists the nodes done.
seealso:
  - module: kubernetes.core.k8s
'''

EXAMPLES = r'''
- name: Patch the labels of the nodes that differ
  gpuops.k8s_gpu.gpu_node_labels_apply:
    patches:
      - node: gpu-a
        patch:
          apiVersion: v1
          kind: Node
          metadata:
            name: gpu-a
            labels:
              gpuops.io/sharing-pool: a100
              gpuops.io/old: null
'''

RETURN = r'''
results:
  description: One entry per patch, in order.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node name.
      type: str
    changed:
      description: Whether the node's labels or annotations changed (or would change, in check mode).
      type: bool
    diff:
      description: C(before) and C(after), each with the node's C(labels) and C(annotations).
      type: dict
'''

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import k8s_access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import node_labels_apply as labels

try:
    from kubernetes import client as k8s_client
except ImportError:
    k8s_client = None


def main():
    spec = k8s_access.auth_arg_spec(env_fallback)
    spec.update(patches=dict(type='list', elements='dict', required=True))
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    problems = labels.check_patches(p['patches'])
    if problems:
        module.fail_json(msg='gpu_node_labels_apply refused, nothing was sent: %s' % '; '.join(problems))
    if not p['patches']:
        module.exit_json(changed=False, results=[])
    if k8s_client is None:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=k8s_access.KUBERNETES_IMPORT_ERROR)
    try:
        api = k8s_client.CoreV1Api(k8s_access.api_client(p))
    except k8s_access.KubeError as e:
        module.fail_json(msg=str(e))
    try:
        results = labels.apply(api, p['patches'], check_mode=module.check_mode)
    except labels.PatchError as e:
        module.fail_json(msg=str(e), results=e.results, changed=any(r['changed'] for r in e.results))
    if not module._diff:
        for r in results:
            r.pop('diff', None)
    module.exit_json(changed=any(r['changed'] for r in results), results=results)


if __name__ == '__main__':
    main()
