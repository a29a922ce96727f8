#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_info
short_description: Probe the NVIDIA GPUs of a node through NVML, or through PCI before a driver exists
version_added: 0.1.0
description:
  - Reads the NVIDIA GPUs of a host through NVML (the C(pynvml) module of the C(nvidia-ml-py) package)
    when a driver is loaded, and from sysfs PCI otherwise, and returns facts about them.
  - Returns node facts around the GPUs (nouveau, Secure Boot, hypervisor, kernel headers, NVSwitches,
    fabricmanager, container runtimes), the sharing strategies the hardware allows, and node labels in the
    names NVIDIA GPU feature discovery uses.
  - Read-only. No subprocess is started on the NVML path.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
options:
  mig_profiles:
    description:
      - Ask NVML for the GPU-instance profiles of MIG-capable GPUs.
      - When NVML does not answer (MIG disabled on some drivers), the profiles come from the collection's
        catalogue of NVIDIA's published MIG tables and are marked C(source=catalog).
    type: bool
    default: true
  node_facts:
    description:
      - Also read node facts (sysfs PCI, kernel modules, Secure Boot, hypervisor, runtimes).
      - With V(false) only NVML is read.
    type: bool
    default: true
requirements:
  - nvidia-ml-py (provides C(pynvml)) on the managed node for the NVML part; without it the module reports
    RV(nvml.status=bindings_missing) and still returns PCI facts.
notes:
  - A node without a loaded driver is not an error; RV(nvml.status) says why NVML could not be used.
seealso:
  - module: gpuops.k8s_gpu.gpu_sharing
  - module: gpuops.k8s_gpu.gpu_doctor
'''

EXAMPLES = r'''
- name: Probe the GPUs
  gpuops.k8s_gpu.gpu_info:
  register: gpu

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ gpu.gpu_count }} x {{ gpu.gpus | map(attribute='name') | unique | join(', ') }} (driver {{ gpu.nvml.driver_version }})"

- name: Fail early when MPS is impossible on this node
  ansible.builtin.assert:
    that: gpu.sharing.mps.allowed
    fail_msg: "{{ gpu.sharing.mps.reason | default('') }}"
'''

RETURN = r'''
nvml:
  description: What NVML reported, or why it could not be used.
  returned: always
  type: dict
  contains:
    status:
      description:
        - V(ok), or why NVML failed - V(bindings_missing) (no pynvml), V(bindings_outdated) (the installed pynvml
          lacks a call the probe needs; install nvidia-ml-py), V(not_installed) (no libnvidia-ml),
          V(driver_not_loaded), V(version_mismatch) (library and kernel module differ), V(no_permission), V(error).
      type: str
      sample: ok
    driver_version:
      description: Driver version.
      type: str
      sample: 535.183.01
    bindings_version:
      description: Version of the installed NVML Python binding (nvidia-ml-py or pynvml), when it can be read.
      type: str
      sample: 12.570.86
    cuda_driver_version:
      description: Highest CUDA version the driver supports.
      type: str
      sample: '12.2'
    nvml_version:
      description: NVML library version.
      type: str
      sample: 12.535.183.01
    error:
      description: The NVML error text when RV(nvml.status) is not V(ok).
      type: str
gpus:
  description:
    - One entry per GPU. From NVML when it works, otherwise from PCI with fewer keys.
    - Keys from NVML are index, name, uuid, pci_bus_id, pci_device_id, memory_total_mib, compute_capability
      (and its major/minor), architecture, bar1_total_mib, nvlinks (active NVLinks), nvswitch_links (NVSwitches
      those links reach), persistence_mode, compute_mode, mig_capable, mig_current, mig_pending, mig_devices,
      mig_profiles.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: Tesla T4
      uuid: GPU-5f1e3b0a-6a4e-4c1c-9d1c-8d5b0b6e2f11
      pci_bus_id: 00000000:3B:00.0
      pci_device_id: '0x1eb8'
      memory_total_mib: 15360
      compute_capability: '7.5'
      architecture: turing
      bar1_total_mib: 256
      persistence_mode: true
      compute_mode: default
      mig_capable: false
gpu_count:
  description: Number of GPUs (NVML's count when NVML works, the PCI count otherwise).
  returned: always
  type: int
  sample: 8
source:
  description: Where RV(gpus) came from, V(nvml) or V(pci).
  returned: always
  type: str
  sample: nvml
node:
  description:
    - Node facts around the GPUs; empty when O(node_facts=false).
    - C(nvswitch_count) counts NVSwitches found on PCI or behind the GPUs' NVLinks (NVML), whichever is more;
      C(fabricmanager_required) is true when it is not zero, or on an NVLink5 system (C(nvlink5), an InfiniBand
      device with SW_MNG in its VPD, as HGX B200/B300 and GB200 have), where C(ib_umad_loaded) says whether the
      kernel module fabric manager needs is loaded. C(imex_unit) is the state of C(nvidia-imex.service)
      (V(not-found) without it).
  returned: always
  type: dict
  sample:
    kernel_release: 6.1.0-26-amd64
    kernel_headers_installed: true
    nouveau_loaded: false
    nvidia_module_loaded: true
    nvidia_module_version: 535.183.01
    secure_boot: disabled
    hypervisor: vmware
    nvswitch_count: 6
    fabricmanager_required: true
    fabricmanager_unit: enabled
    nvlink5: false
    ib_umad_loaded: false
    imex_unit: not-found
    container_runtimes:
      installed: [containerd, nvidia-container-runtime]
      containerd_version: 1.7.27
sharing:
  description: For each sharing strategy, whether this node's GPUs allow it, and why not.
  returned: always
  type: dict
  sample:
    mps: {allowed: true, max_clients: 48}
    mig: {allowed: false, gpus: [], reason: GPU(s) 0 are not MIG capable}
labels:
  description: Node labels in GPU feature discovery's names.
  returned: always
  type: dict
  sample:
    nvidia.com/gpu.product: Tesla-T4
    nvidia.com/gpu.count: '1'
    nvidia.com/gpu.memory: '15360'
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_facts import gather


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            mig_profiles=dict(type='bool', default=True),
            node_facts=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    facts = gather(module.params['mig_profiles'], module.params['node_facts'], run=module.run_command)
    module.exit_json(changed=False, **facts)


if __name__ == '__main__':
    main()
