#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_device_allocations
short_description: Which pods hold which GPUs through a device plugin, from the kubelet's checkpoint
version_added: 0.1.0
description:
  - Runs on the GPU node. Reads the kubelet's device-manager checkpoint,
    C(<kubelet_root_dir>/device-plugins/kubelet_internal_checkpoint), where the kubelet records, per pod and
    container, the device ids a device plugin allocated (docs/remediation.md).
  - Names, per pod (by UID), the GPUs it holds by UUID - NVIDIA's device plugin's ids are the GPU UUID, the MIG UUID,
    or C(<id>::<n>) for a shared replica, or an index with C(deviceIDStrategy=index). A MIG device and an index are
    named with the node's GPU facts, O(gpus).
  - Its RV(allocations) is what M(gpuops.k8s_gpu.gpu_remediation)'s O(gpuops.k8s_gpu.gpu_remediation#module:allocations)
    takes to evict only the pods that hold a GPU quarantined at node level.
  - Only reads; never changes anything. A node without the checkpoint (no device plugin ever registered with its
    kubelet) has no allocations.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
attributes:
  check_mode:
    details:
      - The same read as without check mode.
options:
  kubelet_root_dir:
    description:
      - The kubelet's root directory (its C(--root-dir)); k3s and RKE2 use the same default unless set.
    type: path
    default: /var/lib/kubelet
  resource_prefix:
    description: The extended resources to read - those whose name starts with this prefix.
    type: str
    default: nvidia.com/
  gpus:
    description:
      - The node's GPUs as M(gpuops.k8s_gpu.gpu_info) returns them (C(index), C(uuid), C(mig_devices)), to name the GPU
        of a MIG device or an index id. M(gpuops.k8s_gpu.gpu_doctor)'s RV(gpuops.k8s_gpu.gpu_doctor#module:probe)
        carries them.
    type: list
    elements: dict
    default: []
notes:
  - Needs read access to the kubelet's root directory (root).
  - The checkpoint's checksum is not verified; it is the kubelet's hash of its own data structure.
seealso:
  - module: gpuops.k8s_gpu.gpu_remediation
  - name: Kubernetes - device plugins
    description: How the kubelet allocates devices from a device plugin.
    link: https://kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins/
'''

EXAMPLES = r'''
- name: Diagnose the node
  gpuops.k8s_gpu.gpu_doctor:
  register: doctor

- name: Which pods hold which GPUs
  gpuops.k8s_gpu.gpu_device_allocations:
    gpus: "{{ doctor.probe.gpus | default([]) }}"
  register: allocs

- name: Quarantine the unhealthy GPUs and evict only their pods
  gpuops.k8s_gpu.gpu_remediation:
    node: "{{ inventory_hostname }}"
    gpus: "{{ doctor.remediation }}"
    allocations: "{{ allocs.allocations }}"
  delegate_to: localhost
'''

RETURN = r'''
checkpoint:
  description: The checkpoint file read.
  returned: always
  type: str
  sample: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
found:
  description: Whether the checkpoint exists.
  returned: always
  type: bool
allocations:
  description:
    - Per pod, C(pod_uid), C(containers), C(resources), C(device_ids) (as the device plugin named them) and C(devices)
      (the GPU UUIDs, and MIG UUIDs, they are on).
  returned: always
  type: list
  elements: dict
  sample: [{"pod_uid": "0c1d...", "containers": ["main"], "resources": ["nvidia.com/gpu"],
            "device_ids": ["GPU-1b2c..."], "devices": ["GPU-1b2c..."]}]
unmapped:
  description: Device ids no GPU could be named for (a MIG UUID or an index id without O(gpus)).
  returned: always
  type: list
  elements: str
registered:
  description: Per resource of O(resource_prefix), the device ids the kubelet had registered from the plugins.
  returned: always
  type: dict
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import device_checkpoint as dc


def main() -> None:
    module = AnsibleModule(argument_spec=dict(
        kubelet_root_dir=dict(type='path', default='/var/lib/kubelet'),
        resource_prefix=dict(type='str', default=dc.DEFAULT_PREFIX),
        gpus=dict(type='list', elements='dict', default=[]),
    ), supports_check_mode=True)
    p = module.params
    root = p['kubelet_root_dir']
    if not os.path.isdir(root):
        module.fail_json(msg='kubelet_root_dir: %r is not a directory (the kubelet\'s --root-dir, default '
                             '/var/lib/kubelet; role gpu_remediation: gpu_remediation_kubelet_root_dir)' % root)
    if not p['resource_prefix']:
        module.fail_json(msg='resource_prefix: must not be empty (for example nvidia.com/)')
    try:
        data = dc.read(root)
    except dc.CheckpointError as e:
        module.fail_json(msg=str(e))
    allocs, unmapped = dc.allocations(data, p['gpus'], p['resource_prefix'])
    module.exit_json(changed=False, checkpoint=dc.checkpoint_path(root), found=data is not None,
                     allocations=allocs, unmapped=unmapped, registered=dc.registered(data, p['resource_prefix']))


if __name__ == '__main__':
    main()
