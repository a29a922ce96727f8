#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

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
  - With O(plan) instead of O(patches) (as role P(gpuops.k8s_gpu.gpu_node_labels#role) calls it), the module also
    reads the Nodes (one list request) and plans each node's patch itself, with the same code as the filter
    P(gpuops.k8s_gpu.node_labels_patch#filter), so reading, planning and patching cost one module run. Any problem
    of the plan (a strategy label set by someone else, a foreign record annotation, another accounting's resources, a
    missing node) fails the module before the first patch, naming every problem.
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
      - Exactly one of O(patches) and O(plan) is required.
    type: list
    elements: dict
  plan:
    description:
      - The label plan of every node (the output of P(gpuops.k8s_gpu.node_labels_plan#filter)); the module reads
        the Nodes and works out the patches (see the description).
      - Exactly one of O(patches) and O(plan) is required.
    type: dict
  state:
    description: With O(plan), V(present) sets the labels; V(absent) removes or restores only the recorded ones.
    type: str
    choices: [present, absent]
    default: present
  strategy_label:
    description: With O(plan), the label that carries the strategy.
    type: str
    default: gpuops.io/sharing-strategy
  record_annotation:
    description: With O(plan), the annotation with the record of the labels the role set.
    type: str
    default: gpuops.io/managed-labels
  check_resources:
    description: With O(plan), refuse a node that advertises GPU resources of another accounting family.
    type: bool
    default: true
  fail_on_missing_nodes:
    description: With O(plan), a node of the plan that is not in the cluster is an error (else reported as not found).
    type: bool
    default: true
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

- name: Read the nodes, plan and patch in one run (as role gpu_node_labels does)
  gpuops.k8s_gpu.gpu_node_labels_apply:
    plan: "{{ groups | gpuops.k8s_gpu.node_labels_plan(hostvars) }}"
    state: present
  register: labels
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
    cleared:
      description:
        - With O(state=absent), what the pool's stack agents had left on the node and the module removed
          (C(annotation <name>), C(status.capacity <resource>), C(status.allocatable <resource>)); see
          C(node_state) of the filter P(gpuops.k8s_gpu.gpu_strategy#filter).
      type: list
      elements: str
nodes:
  description:
    - With O(plan), every node of the plan (C(host), C(node), C(found), C(changed), C(strategy), C(pools), C(patch),
      C(status_patch), C(cleared), C(set), C(removed), C(restored), C(kept)), as the filter
      P(gpuops.k8s_gpu.node_labels_patch#filter) returns them. C(status_patch) is the JSON patch sent to the node's
      status subresource with O(state=absent); it removes the resources the pool's stack agents wrote there
      themselves (gpushare's C(aliyun.com/gpu-count), Volcano's C(volcano.sh/gpu-number)), which the kubelet never
      removes.
  returned: when O(plan) is given
  type: list
  elements: dict
errors:
  description: With O(plan), the problems that stopped the module before any patch.
  returned: when O(plan) is given and the module failed on them
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import node_labels_apply as labels
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import rest
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL

# CoreV1Api and friends as plain requests (kube/rest): the typed API classes of the client cost ~0.5 CPU-s to import
k8s_client = rest.client_module(access.ApiClient)


def main() -> None:
    spec = access.auth_arg_spec(env_fallback)
    spec.update(
        patches=dict(type='list', elements='dict'),
        plan=dict(type='dict'),
        state=dict(type='str', choices=['present', 'absent'], default='present'),
        strategy_label=dict(type='str', default=STRATEGY_LABEL),
        record_annotation=dict(type='str', default='gpuops.io/managed-labels'),
        check_resources=dict(type='bool', default=True),
        fail_on_missing_nodes=dict(type='bool', default=True),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, mutually_exclusive=[('patches', 'plan')],
                           required_one_of=[('patches', 'plan')])
    p = module.params
    if p['plan'] is not None:
        problems = labels.check_plan(p['plan'])
    else:
        problems = labels.check_patches(p['patches'])
    if problems:
        module.fail_json(msg='gpu_node_labels_apply refused, nothing was sent: %s' % '; '.join(problems))
    if p['patches'] is not None and not p['patches']:
        module.exit_json(changed=False, results=[])
    if k8s_client is None:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=access.KUBERNETES_IMPORT_ERROR)
    try:
        api = k8s_client.CoreV1Api(access.api_client(p))
    except access.KubeError as e:
        module.fail_json(msg=str(e))
    extra = {}
    try:
        if p['plan'] is not None:
            names = ('state', 'strategy_label', 'record_annotation', 'check_resources', 'fail_on_missing_nodes')
            options = dict((k, p[k]) for k in names)
            plan, results = labels.plan_and_apply(api, p['plan'], options, check_mode=module.check_mode)
            if results is None:
                module.fail_json(msg='gpu_node_labels refused, nothing was changed: %s' % '; '.join(plan['errors']),
                                 nodes=plan['nodes'], errors=plan['errors'], results=[])
            extra['nodes'] = plan['nodes']
        else:
            # required_one_of: without a plan the patches are given (an empty list ended the run above)
            results = labels.apply(api, p['patches'] or [], check_mode=module.check_mode)
    except labels.PatchError as e:
        module.fail_json(msg=str(e), results=e.results, changed=any(r['changed'] for r in e.results))
    if not module._diff:
        for r in results:
            r.pop('diff', None)
    module.exit_json(changed=any(r['changed'] for r in results), results=results, **extra)


if __name__ == '__main__':
    main()
