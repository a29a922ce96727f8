#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_node_drain
short_description: Take a GPU node out of service around a MIG change and give it back
version_added: 0.3.0
description:
  - With O(state=drained) - cordons the node (unless it is already cordoned), pauses its GPU clients the way NVIDIA's
    k8s-mig-manager does (the node labels C(nvidia.com/gpu.deploy.device-plugin), C(.gpu-feature-discovery),
    C(.dcgm-exporter), C(.dcgm), C(.nvsm), C(.client) that the node carries are set to C(paused-for-mig-change); a label
    that says C(false) stays C(false)), evicts the node's GPU pods through the Eviction subresource and waits until
    they and the paused clients' pods are gone.
  - GPU pods are pods that request or limit a resource whose name starts with one of O(gpu_resources). With
    O(pods=all) every pod is evicted. Never evicted - finished pods, mirror (static) pods, DaemonSet pods; pods of
    DaemonSets that select on a paused label are waited for (their controller removes them).
  - Pods still there after O(timeout) (a PodDisruptionBudget, a finalizer, a slow job) fail the module, naming them;
    the node stays cordoned and RV(restore) says what to give back.
  - With O(state=restored) - sets the labels of O(restore) back (C(true), or C(false) where they said C(false)) and
    uncordons the node when O(restore) says this module cordoned it.
  - A node the cluster does not have (not joined yet) is left alone; RV(node_found) is V(false).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.k8s_auth_options
  - gpuops.k8s_gpu.attributes.actionable
attributes:
  check_mode:
    details:
      - The node and its pods are read; nothing is patched or evicted. RV(actions) lists what would be done.
  diff_mode:
    support: none
    details:
      - RV(actions) lists the changes.
options:
  name:
    description: The Kubernetes node name.
    type: str
    required: true
  state:
    description: V(drained) takes the node out of service, V(restored) gives it back.
    type: str
    choices: [drained, restored]
    default: drained
  pods:
    description: V(gpu) evicts the pods that use GPU resources (see O(gpu_resources)), V(all) every pod.
    type: str
    choices: [gpu, all]
    default: gpu
  gpu_resources:
    description: Prefixes of the extended resource names that make a pod a GPU pod.
    type: list
    elements: str
    default: [nvidia.com/, aliyun.com/gpu, volcano.sh/vgpu, tencent.com/vcuda]
  timeout:
    description: Seconds to wait for the evicted pods and the paused GPU clients to be gone.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two looks at the node's pods.
    type: int
    default: 2
  without_api:
    description:
      - What to do when no Kubernetes access is configured at all - no O(kubeconfig) or O(host), no E(KUBECONFIG) or
        C(~/.kube/config), no in-cluster service account. V(fail) fails; V(warn) warns and does nothing
        (RV(node_found) V(false)), for a node that is in no cluster this host can reach.
      - A kubeconfig that is given but does not work always fails.
    type: str
    choices: [fail, warn]
    default: fail
  restore:
    description:
      - With O(state=restored), RV(restore) of the O(state=drained) run - C(labels) (the GPU-client labels as they
        were) and C(uncordon) (bool).
    type: dict
requirements:
  - kubernetes (the Python client) on the host that runs the module
notes:
  - Needs get and patch on nodes, list on pods in all namespaces and create on pods/eviction.
  - The module neither stops host services (DCGM, nvidia-persistenced) nor touches the GPUs; the role
    C(gpuops.k8s_gpu.gpu_node_sharing) does that around it (M(gpuops.k8s_gpu.gpu_sharing)).
seealso:
  - module: gpuops.k8s_gpu.gpu_sharing
  - name: NVIDIA mig-parted (k8s-mig-manager reconfigure flow)
    description: The GPU-client labels and values this module flips.
    link: https://github.com/NVIDIA/mig-parted
'''

EXAMPLES = r'''
- name: Cordon, pause the GPU clients and evict the GPU pods
  gpuops.k8s_gpu.gpu_node_drain:
    name: gpu-node-1
    timeout: 300
  register: drain
  delegate_to: localhost

- name: Give the node back after the MIG change
  gpuops.k8s_gpu.gpu_node_drain:
    name: gpu-node-1
    state: restored
    restore: "{{ drain.restore }}"
  delegate_to: localhost
'''

RETURN = r'''
node_found:
  description: V(false) when the cluster has no node of that name (nothing was done).
  returned: always
  type: bool
  sample: true
actions:
  description: What was done (or would be done in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: ["cordon node gpu-node-1", "pause GPU clients on gpu-node-1: nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change",
           "evict pod default/train-0"]
evicted:
  description: The pods selected for eviction, as C(namespace/name).
  returned: when O(state=drained) and the node exists
  type: list
  elements: str
waited_for:
  description: GPU-client pods (and pods already terminating) that were waited for, as C(namespace/name).
  returned: when O(state=drained) and the node exists
  type: list
  elements: str
kept:
  description: Pods left on the node (not GPU pods, DaemonSet or mirror pods), as C(namespace/name).
  returned: when O(state=drained) and the node exists
  type: list
  elements: str
paused:
  description: The labels this run set to pause the GPU clients.
  returned: when O(state=drained) and the node exists
  type: dict
restore:
  description: What O(state=restored) needs - C(labels) (the GPU-client labels before the pause) and C(uncordon).
  returned: when O(state=drained), also on failure
  type: dict
  sample: {"labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}, "uncordon": true}
'''

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_share_report_kube as kube
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import k8s_access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain


def main():
    spec = k8s_access.auth_arg_spec(env_fallback)
    spec.update(
        name=dict(type='str', required=True),
        state=dict(type='str', choices=['drained', 'restored'], default='drained'),
        pods=dict(type='str', choices=['gpu', 'all'], default='gpu'),
        gpu_resources=dict(type='list', elements='str', default=list(drain.DEFAULT_GPU_RESOURCES)),
        timeout=dict(type='int', default=600),
        poll_interval=dict(type='int', default=2),
        restore=dict(type='dict'),
        without_api=dict(type='str', choices=['fail', 'warn'], default='fail'),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           required_if=[('state', 'restored', ['restore'])])
    p = module.params
    if p['timeout'] < 0 or p['poll_interval'] < 1:
        module.fail_json(msg='timeout must be 0 or more and poll_interval 1 or more (got timeout=%s, poll_interval=%s)'
                         % (p['timeout'], p['poll_interval']))
    kubeconfig, error = k8s_access.check_kubeconfig(p.get('kubeconfig'))
    if error:
        module.fail_json(msg=error)
    p['kubeconfig'] = kubeconfig
    if kube.KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=kube.KUBERNETES_IMPORT_ERROR)
    try:
        api = kube.build_client(p)
    except kube.KubeError as e:
        no_config = str(e).startswith('cannot configure the Kubernetes client')
        if p['without_api'] == 'warn' and not p['kubeconfig'] and not p['host'] and no_config:
            module.warn('node %s was not cordoned or drained: %s' % (p['name'], e))
            module.exit_json(changed=False, node_found=False, actions=[], restore={})
        module.fail_json(msg=str(e))
    worker = drain.Drainer(kube.k8s_client.CoreV1Api(api), check_mode=module.check_mode)
    try:
        if p['state'] == 'restored':
            found = worker.node(p['name']) is not None
            if found:
                worker.restore(p['name'], p['restore'])
            result = {'node_found': found}
        else:
            result = worker.drain(p['name'], p['pods'], p['gpu_resources'], p['timeout'], p['poll_interval'])
    except drain.DrainError as e:
        module.fail_json(msg=str(e), changed=bool(e.done), actions=e.done, restore=e.restore)
    except Exception as e:  # ApiException or a connection error: name the call's context
        module.fail_json(msg='Kubernetes API call for node %s failed: %s' % (p['name'], e), changed=bool(worker.actions),
                         actions=worker.actions)
    module.exit_json(changed=bool(worker.actions), actions=worker.actions, **result)


if __name__ == '__main__':
    main()
