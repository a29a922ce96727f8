#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_remediation
short_description: Quarantine an unhealthy GPU, drain only the pods that hold it, and release it again
version_added: 0.1.0
description:
  - The cluster side of the remediation loop (docs/remediation.md). The doctor (M(gpuops.k8s_gpu.gpu_doctor), return
    value C(remediation)) says which GPUs of a node are unhealthy, by UUID, with its findings and the repair they need;
    this module quarantines those GPUs and, after the repair on the node, releases them.
  - With O(state=quarantined) - per GPU of O(gpus), in a DRA pool (a ResourceSlice of O(dra_driver) publishes the
    GPU's UUID as attribute C(uuid) and the API server serves C(DeviceTaintRule) in C(resource.k8s.io/v1), Kubernetes
    1.37 and later) a C(DeviceTaintRule) that selects that one device, created with effect C(None) first - a dry run
    whose status the kube-controller-manager's device-taint-eviction controller fills with the number of pods a
    C(NoExecute) would evict (RV(dry_runs)) - then set to O(effect). Elsewhere (a device-plugin pool, Kubernetes
    before 1.37, O(mode=node)) the node gets the taint C(gpuops.io/gpu-unhealthy:NoSchedule) and is cordoned.
  - One node annotation, C(gpuops.io/gpu-remediation) (JSON), records what was made for which GPU, why (the finding
    ids and their evidence) and since when; every change leaves an Event on the Node.
  - With O(drain=true) the pods that hold a quarantined GPU are evicted through the Eviction API, so
    PodDisruptionBudgets are honoured; other GPUs' pods stay. In a DRA pool the holders are the pods the GPU's
    ResourceClaims are reserved for; at node level they are the pods O(allocations) names for the GPU (the kubelet's
    device-plugin allocations), and without O(allocations) no pod is evicted and RV(holders) says the holders are
    unknown.
  - With O(state=released) - takes back exactly what the annotation says this module made for O(uuids) (all recorded
    GPUs when empty) except the GPUs O(gpus) still names - the rules, its own taint and its own cordon - never a taint
    or cordon of the site's, and leaves an Event.
  - A run on a healthy node (O(gpus) empty) or a repeated run writes nothing.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.k8s_auth_options
  - gpuops.k8s_gpu.attributes.actionable
attributes:
  check_mode:
    details:
      - The node, slices, rules and claims are read; nothing is created, patched or evicted. RV(actions) lists what
        would be done; the dry run's count is not waited for.
  diff_mode:
    support: full
    details:
      - The node's taints and cordon, the DeviceTaintRules and the quarantined GPUs before and after.
options:
  node:
    description: The Kubernetes node name.
    type: str
    required: true
  state:
    description: V(quarantined) takes the GPUs of O(gpus) out of service, V(released) gives them back.
    type: str
    choices: [quarantined, released]
    default: quarantined
  gpus:
    description:
      - The unhealthy GPUs of the node, by UUID - M(gpuops.k8s_gpu.gpu_doctor)'s RV(gpuops.k8s_gpu.gpu_doctor#module:remediation),
        each with C(findings) (the doctor's findings) and optionally C(repair).
      - With O(state=quarantined), empty on a healthy node - nothing is done.
      - With O(state=released), the doctor's answer after the repair - the GPUs it still names stay quarantined.
    type: dict
    default: {}
  uuids:
    description: With O(state=released), the GPUs to release; empty releases every GPU the record names.
    type: list
    elements: str
    default: []
  mode:
    description:
      - V(auto) quarantines by device where the cluster can (DRA pool and DeviceTaintRule served), else by node.
      - V(dra) fails, before any change, for a GPU that cannot be quarantined by device; V(node) always uses the node.
    type: str
    choices: [auto, dra, node]
    default: auto
  effect:
    description:
      - The DeviceTaintRule's effect after the dry run. V(NoSchedule) keeps new claims off the device and leaves the
        running pods to O(drain) (PodDisruptionBudgets honoured); V(NoExecute) lets the device-taint-eviction
        controller delete every pod whose claim holds the device (no PodDisruptionBudget is asked).
    type: str
    choices: [NoSchedule, NoExecute]
    default: NoSchedule
  dra_driver:
    description: The DRA driver whose ResourceSlices publish the GPUs (NVIDIA's DRA driver is V(gpu.nvidia.com)).
    type: str
    default: gpu.nvidia.com
  dry_run_timeout:
    description: Seconds to wait for the effect V(None) rule's count of the pods it would evict (0 - do not wait).
    type: int
    default: 15
  drain:
    description: Evict the pods that hold a quarantined GPU (Eviction API).
    type: bool
    default: true
  drain_timeout:
    description:
      - Seconds to keep asking for evictions a PodDisruptionBudget refuses and to wait until the evicted pods are gone
        (an evicted pod holds its GPU until its containers stop); RV(pods_left) names the rest.
    type: int
    default: 300
  allocations:
    description:
      - Device-plugin allocations of the node - C(namespace), C(name) and C(devices) (GPU UUIDs) per pod, as the
        kubelet's pod-resources API lists them - to find the pods that hold a GPU quarantined at node level.
      - Or M(gpuops.k8s_gpu.gpu_device_allocations)'s RV(gpuops.k8s_gpu.gpu_device_allocations#module:allocations) (from
        the kubelet's checkpoint) - C(pod_uid) and C(devices) per pod; the pods of the node (O(node)) give each UID its
        namespace and name, and a UID of a pod gone since holds nothing.
    type: list
    elements: dict
  resource:
    description: The device plugin's extended resource of the GPUs (for O(device_plugin_selector) and O(validate)).
    type: str
    default: nvidia.com/gpu
  device_plugin_selector:
    description:
      - With O(state=released), a label selector of the device plugin's pods. NVIDIA's device plugin never lists a GPU
        it marked unhealthy as healthy again (only a restart does); when the Node's allocatable of O(resource) is below
        its capacity, the plugin's pods on the node are deleted (their DaemonSet starts new ones) before the
        validation, and the module waits up to O(device_plugin_timeout) seconds for allocatable to equal capacity
        (RV(device_plugin)). Empty - no restart.
    type: str
    default: ''
  device_plugin_timeout:
    description: Seconds to wait for the allocatable to return after the device plugin's restart.
    type: int
    default: 120
  validate:
    description:
      - With O(state=released), a validation workload per GPU to be released, before it is released; a GPU whose
        validation fails stays quarantined and the module fails saying why (RV(validation)).
      - At node level (a device-plugin pool) a pod bound to the node (C(spec.nodeName), so the cordon and the
        NoSchedule taints do not keep it off) asks every free unit of O(resource), so the repaired GPU is among
        them; in a DRA pool a ResourceClaim selects exactly that device by its C(uuid) attribute and tolerates the
        loop's own device taint. The container gets C(GPUOPS_VALIDATE_UUID), the GPU's UUID.
      - The pod (and claim) are deleted once the verdict is in; a pod of that name that is not this module's is
        refused.
    type: dict
    suboptions:
      image:
        description:
          - The image of the check, pinned (a tag other than latest, or a digest). On a real GPU NVIDIA's CUDA sample
            (V(nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0), through the site's mirror).
        type: str
        required: true
      command:
        description: The container command; unset or empty - the image's own.
        type: list
        elements: str
      namespace:
        description: The namespace of the validation pod.
        type: str
        default: default
      timeout:
        description: Seconds to wait for the pod to end; no verdict by then is a failed validation.
        type: int
        default: 300
      device_class:
        description: The DeviceClass of the DRA claim.
        type: str
        default: gpu.nvidia.com
      tolerations:
        description: More tolerations of the pod (the loop's own taint is always tolerated).
        type: list
        elements: dict
        default: []
      runtime_class:
        description: The pod's runtimeClassName (for example the NVIDIA runtime's); unset or empty - none.
        type: str
      pull_secrets:
        description: Image pull secrets of the pod.
        type: list
        elements: str
        default: []
      volumes:
        description: Volumes of the pod (for example a hostPath the site's check reads).
        type: list
        elements: dict
        default: []
      volume_mounts:
        description: Volume mounts of the check's container.
        type: list
        elements: dict
        default: []
      registry:
        description:
          - The mirror prefix the image is pulled through (the collection's C(gpuops_mirror.registry)) - it replaces
            the image's registry host and keeps its path, as for the stacks' images; empty - the image as given.
        type: str
        default: ''
notes:
  - With O(validate) it also needs create, get and delete on pods (and resourceclaims in a DRA pool) in its namespace
    and get on pods/log; with O(device_plugin_selector) list and delete on pods.
  - Needs get and patch on nodes, get and list on resourceslices and resourceclaims, get, create, patch and delete on
    devicetaintrules, create on events and on pods/eviction; list on pods when O(allocations) gives pod UIDs.
  - The repair itself (a GPU reset, a reboot) happens on the node, between a quarantine and a release; the role
    C(gpuops.k8s_gpu.gpu_remediation) and the playbook C(gpuops.k8s_gpu.remediate) run the whole loop.
seealso:
  - module: gpuops.k8s_gpu.gpu_doctor
  - module: gpuops.k8s_gpu.gpu_node_drain
  - name: Kubernetes - DRA device taints and tolerations
    description: DeviceTaintRule, its effects and the dry run with effect None.
    link: https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/#device-taints-and-tolerations
'''

EXAMPLES = r'''
- name: Diagnose the node
  gpuops.k8s_gpu.gpu_doctor:
  register: doctor

- name: Quarantine its unhealthy GPUs and evict only their pods
  gpuops.k8s_gpu.gpu_remediation:
    node: "{{ inventory_hostname }}"
    gpus: "{{ doctor.remediation }}"
  delegate_to: localhost

- name: Give the GPUs back once the doctor finds them healthy again
  gpuops.k8s_gpu.gpu_remediation:
    node: "{{ inventory_hostname }}"
    state: released
  delegate_to: localhost
'''

RETURN = r'''
actions:
  description: What was written (or would be, in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: ["create DeviceTaintRule gpuops-node-1-gpu-1234 (effect None: dry run) for gpu.nvidia.com/node-1/gpu-0"]
plan:
  description: Per quarantined GPU - C(uuid), C(kind) (V(dra) or V(node)), C(device) (driver, pool, device), C(rule), C(why).
  returned: state=quarantined
  type: list
  elements: dict
dry_runs:
  description: Per rule created in this run, the device-taint-eviction controller's count for effect V(None) (None when it did not come in time).
  returned: state=quarantined
  type: dict
holders:
  description: Per GPU, the pods that hold it (C(namespace/name)); None when unknown (node level without O(allocations)).
  returned: state=quarantined
  type: dict
evicted:
  description: The pods evicted.
  returned: state=quarantined
  type: list
  elements: str
pods_left:
  description: Pods still holding a GPU after O(drain_timeout) (a PodDisruptionBudget refused them, or they were still
    terminating).
  returned: state=quarantined
  type: list
  elements: str
released:
  description: The GPUs released.
  returned: state=released
  type: list
  elements: str
device_plugin:
  description: The device plugin's restart - C(restarted) (the pods deleted), C(before) and C(after) (capacity, allocatable of O(resource)).
  returned: state=released and O(device_plugin_selector) set and a node-level GPU to release
  type: dict
validation:
  description: Per GPU validated - C(passed) (None in check mode), C(why), C(log) (the pod's last lines), C(pod).
  returned: state=released and O(validate) set and a GPU to release
  type: dict
events:
  description: The Events left on the Node (reason, message, type).
  returned: always
  type: list
  elements: dict
'''

from typing import Any

import re

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import kube as rk
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import common as stack_common

UUID_RE = re.compile(r'^(GPU|MIG)-[0-9A-Za-z-]+$')


def check_params(p: dict[str, Any]) -> str | None:
    """The first bad input, named, before anything is read or written; None when all is well."""
    for uuid, entry in sorted((p['gpus'] or {}).items()):
        if not UUID_RE.match(uuid):
            return 'gpus: %r is not a GPU UUID (GPU-... or MIG-..., as nvidia-smi -L prints it)' % uuid
        if not isinstance(entry, dict) or not isinstance(entry.get('findings'), list) or not entry['findings']:
            return ('gpus[%s]: %r needs findings, a non-empty list of the doctor\'s findings (gpu_doctor\'s '
                    'remediation return value)' % (uuid, entry))
        for f in entry['findings']:
            if not isinstance(f, dict) or not f.get('id'):
                return 'gpus[%s].findings: %r is not a doctor finding (a dict with id)' % (uuid, f)
    for uuid in p['uuids'] or []:
        if not UUID_RE.match(uuid):
            return 'uuids: %r is not a GPU UUID (GPU-... or MIG-...)' % uuid
    error = plan.allocations_error(p.get('allocations'))
    if error:
        return error
    error = plan.validate_settings_error(p.get('validate'))
    if error:
        return error
    for name in ('dry_run_timeout', 'drain_timeout', 'device_plugin_timeout'):
        if p.get(name, 0) < 0:
            return '%s: %s must be 0 or more' % (name, p[name])
    return None


def main() -> None:
    spec = access.auth_arg_spec(env_fallback)
    spec.update(
        node=dict(type='str', required=True),
        state=dict(type='str', choices=['quarantined', 'released'], default='quarantined'),
        gpus=dict(type='dict', default={}),
        uuids=dict(type='list', elements='str', default=[]),
        mode=dict(type='str', choices=list(plan.MODES), default='auto'),
        effect=dict(type='str', choices=list(plan.EFFECTS), default='NoSchedule'),
        dra_driver=dict(type='str', default=plan.DRA_DRIVER),
        dry_run_timeout=dict(type='int', default=15),
        drain=dict(type='bool', default=True),
        drain_timeout=dict(type='int', default=300),
        allocations=dict(type='list', elements='dict'),
        resource=dict(type='str', default='nvidia.com/gpu'),
        device_plugin_selector=dict(type='str', default=''),
        device_plugin_timeout=dict(type='int', default=120),
        validate=dict(type='dict', options=dict(
            image=dict(type='str', required=True),
            command=dict(type='list', elements='str'),
            namespace=dict(type='str', default='default'),
            timeout=dict(type='int', default=300),
            device_class=dict(type='str', default=plan.DRA_DRIVER),
            tolerations=dict(type='list', elements='dict', default=[]),
            runtime_class=dict(type='str'),
            pull_secrets=dict(type='list', elements='str', default=[], no_log=False),
            registry=dict(type='str', default=''),
            volumes=dict(type='list', elements='dict', default=[]),
            volume_mounts=dict(type='list', elements='dict', default=[]),
        )),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    error = check_params(p)
    if error:
        module.fail_json(msg=error)
    if p['state'] == 'quarantined' and not p['gpus']:
        module.exit_json(changed=False, actions=[], plan=[], dry_runs={}, holders={}, evicted=[], pods_left=[],
                         events=[])
    kubeconfig, error = access.check_kubeconfig(p.get('kubeconfig'))
    if error:
        module.fail_json(msg=error)
    p['kubeconfig'] = kubeconfig
    if access.KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=access.KUBERNETES_IMPORT_ERROR)
    try:
        api = rk.RestApi(access.api_client(p))
    except access.KubeError as e:
        module.fail_json(msg=str(e))
    worker = rk.Remediator(api, p['node'], check_mode=module.check_mode)
    result: dict[str, Any] = {}
    try:
        if p['state'] == 'released':
            keep = sorted(p['gpus'] or {})
            pending = worker.to_release(p['uuids'] or None, keep=keep)
            if pending and p['device_plugin_selector'] and any(e['kind'] == 'node' for e in pending):
                result['device_plugin'] = worker.restart_device_plugin(
                    p['device_plugin_selector'], p['resource'], p['device_plugin_timeout'])
            if pending and p['validate']:
                settings = dict(p['validate'], resource=p['resource'], image=stack_common.mirror_image(
                    p['validate']['image'], p['validate']['registry'], 'validate.image'))
                result['validation'] = worker.validate(pending, settings)
                failed_uuids = sorted(u for u, v in result['validation'].items() if v['passed'] is False)
                keep = sorted(set(keep) | set(failed_uuids))
            released, diff = worker.release(p['uuids'] or None, keep=keep)
            result['released'] = released
        else:
            unhealthy = dict((u, e['findings']) for u, e in p['gpus'].items())
            repairs = dict((u, e.get('repair')) for u, e in p['gpus'].items())
            entries, diff = worker.quarantine(unhealthy, p['mode'], p['effect'], p['dra_driver'],
                                              p['dry_run_timeout'], repairs)
            holders = worker.holders(entries, p['allocations']) if p['drain'] else {}
            evicted, left = worker.drain(holders, p['drain_timeout']) if p['drain'] else ([], [])
            for uuid in sorted(holders):
                if holders[uuid] is None:
                    module.warn('GPU %s is quarantined at node level and no allocations were given: the pods that '
                                'hold it are unknown and none was evicted' % uuid)
            result.update(plan=entries, dry_runs=worker.dry_runs, evicted=evicted, pods_left=left,
                          holders=dict((u, None if v is None else ['%s/%s' % x for x in v]) for u, v in holders.items()))
    except (plan.PlanError, stack_common.StackError) as e:
        module.fail_json(msg=str(e), changed=bool(worker.actions), actions=worker.actions)
    except Exception as e:  # ApiException or a connection error: name the node
        module.fail_json(msg='Kubernetes API call for node %s failed: %s' % (p['node'], e),
                         changed=bool(worker.actions), actions=worker.actions)
    out = dict(changed=bool(worker.actions), actions=worker.actions, events=worker.events, **result)
    if module._diff:
        out['diff'] = diff
    failed = dict((u, v) for u, v in (result.get('validation') or {}).items() if v['passed'] is False)
    if failed:
        module.fail_json(msg='validation failed, the GPU%s stay%s quarantined: %s' % (
            's' if len(failed) > 1 else '', '' if len(failed) > 1 else 's',
            '; '.join('%s: %s%s' % (u, v['why'], ' (log: %s)' % ' | '.join(v['log'].strip().splitlines()[-6:])
                                    if v['log'].strip() else '') for u, v in sorted(failed.items()))), **out)
    if result.get('pods_left'):
        module.fail_json(msg='pods still hold a quarantined GPU after %ss (a PodDisruptionBudget refused their '
                         'eviction, or they were still terminating): %s; the GPUs stay quarantined' % (p['drain_timeout'], ', '.join(result['pods_left'])),
                         **out)
    module.exit_json(**out)


if __name__ == '__main__':
    main()
