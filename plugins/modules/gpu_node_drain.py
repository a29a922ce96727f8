#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_node_drain
short_description: Take a GPU node out of service (MIG change, driver upgrade) and give it back
version_added: 0.1.0
description:
  - With O(state=drained) - cordons the node (unless it is already cordoned), pauses its GPU clients the way NVIDIA's
    k8s-mig-manager does (the node labels C(nvidia.com/gpu.deploy.device-plugin), C(.gpu-feature-discovery),
    C(.dcgm-exporter), C(.dcgm), C(.nvsm), C(.client) that the node carries are set to C(paused-for-mig-change); a label
    that says C(false) stays C(false)), evicts the node's GPU pods through the Eviction subresource and waits until
    they and the paused clients' pods are gone.
  - GPU pods are pods that request or limit a resource whose name starts with one of O(gpu_resources), and pods that
    hold DRA devices (a ResourceClaim in C(spec.resourceClaims), or C(status.extendedResourceClaimStatus) - extended
    resources the scheduler backed with DRA). With
    O(pods=all) every pod is evicted. O(pod_selector) narrows either to the pods with matching labels. Never evicted -
    finished pods, mirror (static) pods, DaemonSet pods; pods of DaemonSets that select on a paused label are waited
    for (their controller removes them).
  - As C(kubectl drain) does, the pods to evict are checked before the first eviction - a DaemonSet pod (unless
    O(ignore_daemonsets)), a pod with an C(emptyDir) volume (unless O(delete_emptydir_data)) or one without a
    controller (unless O(force)) fails the module naming them, the node cordoned and nothing evicted.
  - Pods still there after O(timeout) (a PodDisruptionBudget, a finalizer, a slow job) fail the module, naming them
    (RV(pods_left)); the node stays cordoned and RV(restore) says what to give back.
  - O(mark) sets an annotation before the cordon that says who works on the node (a driver upgrade sets the target
    version); a run that stopped is found by it, and O(state=restored) removes it.
  - O(wait_for_jobs) waits, after the cordon and before any eviction, until no pod of its selector runs on the node;
    when its timeout runs out the drain goes on, or fails with O(wait_for_jobs.on_timeout=stop).
  - With O(state=restored) - sets the labels of O(restore) back (C(true), or C(false) where they said C(false)),
    uncordons the node when O(restore) says this module cordoned it, and removes the mark.
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
    description:
      - Prefixes of the extended resource names that make a pod a GPU pod.
      - When not set, the resources of every GPU sharing strategy the collection knows (its strategy model), which are
        C(nvidia.com/gpu), C(nvidia.com/mig-), C(aliyun.com/gpu), C(volcano.sh/) and C(tencent.com/vcuda).
    type: list
    elements: str
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
        were), C(uncordon) (bool) and C(mark) (the annotation to remove).
      - Without C(uncordon) (a run that resumes one that stopped after its drain) the node is uncordoned when it
        carries the annotation C(gpuops.io/mig-change) this module sets with its cordon.
    type: dict
  pod_selector:
    description: Label selector (C(kubectl drain --pod-selector)); only matching pods are evicted.
    type: str
  pause_gpu_clients:
    description: Pause the GPU clients through their deploy labels (a MIG change); V(false) leaves the labels alone.
    type: bool
    default: true
  ignore_daemonsets:
    description: DaemonSet pods stay on the node; V(false) fails the drain when the node has any (as kubectl).
    type: bool
    default: true
  keep_gpu_daemonset_pods:
    description:
      - What to do about DaemonSet pods on the node that hold a GPU (request or limit one of O(gpu_resources), or hold
        a ResourceClaim) - they stay on the node and keep their devices (the kubelet keeps a running container's
        devices), so when another plugin takes the node over (a move between sharing strategies) it can hand the
        same GPU to another pod.
      - V(true) leaves them, as kubectl drain C(--ignore-daemonsets); V(false) fails before anything is written (no
        mark, no cordon, nothing evicted), naming each pod, its DaemonSet and what it holds. The pods of a GPU client
        whose label O(pause_gpu_clients) pauses are not counted (their DaemonSet removes them).
    type: bool
    default: true
  delete_emptydir_data:
    description: Evict pods with C(emptyDir) volumes (their data is lost); V(false) fails the drain on such a pod.
    type: bool
    default: true
  force:
    description: Evict pods that declare no controller (nothing recreates them); V(false) fails the drain on one.
    type: bool
    default: true
  disable_eviction:
    description: Delete the pods instead of evicting them - PodDisruptionBudgets are not asked.
    type: bool
    default: false
  grace_period:
    description: Seconds each pod gets to terminate (the eviction's or deletion's C(gracePeriodSeconds)); omitted -
      the pod's own.
    type: int
  mark:
    description: An annotation set before the cordon and removed by O(state=restored).
    type: dict
    suboptions:
      annotation:
        description: The annotation's key.
        type: str
        required: true
      value:
        description: Its value.
        type: str
        required: true
  wait_for_jobs:
    description: Wait for running jobs to finish before evicting (the GPU operator's C(waitForCompletion)).
    type: dict
    suboptions:
      pod_selector:
        description: Label selector of the job pods waited for (not finished, not DaemonSet or mirror pods).
        type: str
        required: true
      timeout:
        description: Seconds to wait.
        type: int
        default: 3600
      on_timeout:
        description: V(drain) evicts them like the other pods (the GPU operator's behaviour), V(stop) fails.
        type: str
        choices: [drain, stop]
        default: drain
requirements:
  - kubernetes (the Python client) on the host that runs the module
notes:
  - Needs get and patch on nodes, list on pods in all namespaces and create on pods/eviction (delete on pods with
    O(disable_eviction)).
  - The module neither stops host services (DCGM, nvidia-persistenced) nor touches the GPUs; the role
    C(gpuops.k8s_gpu.gpu_node_sharing) does that around it (M(gpuops.k8s_gpu.gpu_sharing)).
seealso:
  - module: gpuops.k8s_gpu.gpu_sharing
  - name: NVIDIA mig-parted (k8s-mig-manager reconfigure flow)
    description: The GPU-client labels and values this module flips.
    link: https://github.com/NVIDIA/mig-parted
  - name: kubectl drain library
    description: Which pods a drain may evict, and how (pkg/drain).
    link: https://github.com/kubernetes/kubectl/tree/master/pkg/drain
'''

EXAMPLES = r'''
- name: Cordon, pause the GPU clients and evict the GPU pods
  gpuops.k8s_gpu.gpu_node_drain:
    name: gpu-node-1
    timeout: 300
  register: drain
  delegate_to: localhost

- name: Drain for a driver upgrade - every pod, jobs first given an hour, the node marked
  gpuops.k8s_gpu.gpu_node_drain:
    name: gpu-node-1
    pods: all
    pause_gpu_clients: false
    force: false
    mark:
      annotation: gpuops.io/driver-upgrade
      value: "580.105.08"
    wait_for_jobs:
      pod_selector: gpuops.io/gpu-job=true
      timeout: 3600
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
jobs_left:
  description: Pods of O(wait_for_jobs) still running when its timeout ran out (then drained with the others).
  returned: when O(state=drained) and the node exists
  type: list
  elements: str
pods_left:
  description: Pods that still hold the node - empty after a drain that finished; on failure, the pods that stayed
    past O(timeout), the jobs that outlived O(wait_for_jobs), or the pods kubectl's rules refuse to evict.
  returned: when O(state=drained), also on failure
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

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access, rest
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain

# CoreV1Api as plain requests (kube/rest) over the client of the one Kubernetes access layer (kube/)
k8s_client = rest.client_module(access.ApiClient)


def main() -> None:
    spec = access.auth_arg_spec(env_fallback)
    spec.update(
        name=dict(type='str', required=True),
        state=dict(type='str', choices=['drained', 'restored'], default='drained'),
        pods=dict(type='str', choices=['gpu', 'all'], default='gpu'),
        gpu_resources=dict(type='list', elements='str'),
        timeout=dict(type='int', default=600),
        poll_interval=dict(type='int', default=2),
        restore=dict(type='dict'),
        without_api=dict(type='str', choices=['fail', 'warn'], default='fail'),
        pod_selector=dict(type='str'),
        pause_gpu_clients=dict(type='bool', default=True),
        ignore_daemonsets=dict(type='bool', default=True),
        keep_gpu_daemonset_pods=dict(type='bool', default=True),
        delete_emptydir_data=dict(type='bool', default=True),
        force=dict(type='bool', default=True),
        disable_eviction=dict(type='bool', default=False),
        grace_period=dict(type='int'),
        mark=dict(type='dict', options=dict(annotation=dict(type='str', required=True),
                                            value=dict(type='str', required=True))),
        wait_for_jobs=dict(type='dict', options=dict(
            pod_selector=dict(type='str', required=True),
            timeout=dict(type='int', default=3600),
            on_timeout=dict(type='str', choices=['drain', 'stop'], default='drain'))),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           required_if=[('state', 'restored', ['restore'])])
    p = module.params
    if p['timeout'] < 0 or p['poll_interval'] < 1:
        module.fail_json(msg='timeout must be 0 or more and poll_interval 1 or more (got timeout=%s, poll_interval=%s)'
                         % (p['timeout'], p['poll_interval']))
    if p['wait_for_jobs'] and p['wait_for_jobs']['timeout'] < 0:
        module.fail_json(msg='wait_for_jobs.timeout must be 0 or more (got %s)' % p['wait_for_jobs']['timeout'])
    if p['grace_period'] is not None and p['grace_period'] < 0:
        module.fail_json(msg='grace_period must be 0 or more (got %s)' % p['grace_period'])
    kubeconfig, error = access.check_kubeconfig(p.get('kubeconfig'))
    if error:
        module.fail_json(msg=error)
    p['kubeconfig'] = kubeconfig
    if access.KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=access.KUBERNETES_IMPORT_ERROR)
    try:
        api = access.api_client(p)
    except access.KubeError as e:
        no_config = str(e).startswith('cannot configure the Kubernetes client')
        if p['without_api'] == 'warn' and not p['kubeconfig'] and not p['host'] and no_config:
            module.warn('node %s was not cordoned or drained: %s' % (p['name'], e))
            module.exit_json(changed=False, node_found=False, actions=[], restore={})
        module.fail_json(msg=str(e))
    worker = drain.Drainer(k8s_client.CoreV1Api(api), check_mode=module.check_mode)
    try:
        if p['state'] == 'restored':
            found = worker.node(p['name']) is not None
            if found:
                worker.restore(p['name'], p['restore'])
            result = {'node_found': found}
        else:
            gpu_resources = drain.default_gpu_resources() if p['gpu_resources'] is None else p['gpu_resources']
            result = worker.drain(p['name'], p['pods'], gpu_resources, p['timeout'], p['poll_interval'],
                                  pod_selector=p['pod_selector'], wait_for=p['wait_for_jobs'], mark=p['mark'],
                                  pause_gpu_clients=p['pause_gpu_clients'], ignore_daemonsets=p['ignore_daemonsets'],
                                  delete_emptydir_data=p['delete_emptydir_data'], force=p['force'],
                                  disable_eviction=p['disable_eviction'], grace_period=p['grace_period'],
                                  keep_gpu_daemonset_pods=p['keep_gpu_daemonset_pods'])
    except drain.DrainError as e:
        module.fail_json(msg=str(e), changed=bool(e.done), actions=e.done, restore=e.restore, pods_left=e.pods_left)
    except Exception as e:  # ApiException or a connection error: name the call's context
        module.fail_json(msg='Kubernetes API call for node %s failed: %s' % (p['name'], e), changed=bool(worker.actions),
                         actions=worker.actions)
    module.exit_json(changed=bool(worker.actions), actions=worker.actions, **result)


if __name__ == '__main__':
    main()
