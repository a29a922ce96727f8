#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: esxi_gpu_passthrough
short_description: Pass NVIDIA GPUs through to a vSphere VM (host passthrough, VM devices and settings) in one task
version_added: 0.1.0
description:
  - Host part. Lists the NVIDIA PCI devices (vendor C(0x10de)) of an ESXi host with their passthrough state,
    enables passthrough for the GPUs chosen in O(gpus), and reports when the host must reboot before the change is
    active. With O(host_reboot=true) it puts the host into maintenance mode, reboots it, waits for it and takes it
    out of maintenance mode again.
  - VM part. Makes the VM hold exactly the requested NVIDIA GPUs, as DirectPath I/O devices (a fixed PCI device)
    or Dynamic DirectPath devices (vSphere 7 and later), and sets what a passthrough GPU needs -
    C(hypervisor.cpuid.v0 = FALSE), C(pciPassthru.use64bitMMIO) and C(pciPassthru.64bitMMIOSizeGB), EFI firmware
    with Secure Boot off, and the memory reservation locked to the VM's memory. Passthrough devices of other
    vendors are left alone.
  - All VM changes go into one C(ReconfigVM_Task). A run that finds nothing to change issues no reconfigure task.
  - The VM is powered off and on again only when a change needs it and O(power_cycle=true).
  - Works against vCenter Server (the VM's current host is used) and against a standalone ESXi host.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.vmware_connection
  - gpuops.k8s_gpu.attributes.actionable
options:
  name:
    description:
      - Name of the VM. Required unless O(scope=host) with O(esxi_hostname).
      - The name must be unique (within O(datacenter) when given).
    type: str
  datacenter:
    description: Look for the VM and the host only in this datacenter.
    type: str
  esxi_hostname:
    description:
      - Name of the ESXi host as vCenter knows it. Without O(name) it selects the host for O(scope=host).
      - With O(name) it must be the VM's current host (the module does not migrate VMs).
      - Against a standalone ESXi host it may be omitted.
    type: str
  scope:
    description:
      - V(all) does the host part, then the VM part.
      - V(host) only the host part (enable passthrough, reboot when O(host_reboot=true)). With O(name) the GPUs are
        chosen as for that VM; without, O(gpus) picks the host's GPUs to enable (every match when C(count) is unset),
        and with O(gpus) empty the module only lists the host's GPUs.
      - V(vm) only the VM part; every chosen GPU must already be passthrough-active.
    type: str
    choices: [all, host, vm]
    default: all
  gpus:
    description:
      - The GPUs the VM must hold, exactly. GPUs attached to the VM and not requested are removed.
      - An empty list removes every NVIDIA passthrough device from the VM.
      - Each entry has exactly one of C(pci_id), C(device_id), C(model).
    type: list
    elements: dict
    default: []
    suboptions:
      pci_id:
        description: PCI address on the host, C(0000:3b:00.0) or C(3b:00.0). Only with O(passthrough_type=directpath).
        type: str
      device_id:
        description:
          - PCI device id, as a hex string (C("0x20F1"), C("20f1")) or its integer value. Quote hex strings in YAML.
        type: raw
      model:
        description: A word of the PCI device name, matched case-insensitively as a whole word, such as C(T4) or C(A100 PCIe 40GB).
        type: str
      count:
        description:
          - How many GPUs of this C(device_id) or C(model). Already attached ones are kept, then the ones this VM's earlier
            run reserved (see O(pending_reboot)), then free ones are chosen (active ones first, then by PCI address; a GPU
            enabled but waiting for a host reboot that no VM reserved is picked last). A GPU attached to or reserved by
            another VM is never chosen.
          - Default 1 for a VM, all matching GPUs for O(scope=host) without O(name).
        type: int
      memory_gb:
        description:
          - GPU memory in GB, for the MMIO size and the memory check. Needed only for a GPU the collection does not know
            (its catalogue covers NVIDIA data-centre GPUs from Pascal to Hopper; a C(<n>GB) in the device name also works).
        type: int
      custom_label:
        description: Dynamic DirectPath custom label (hardware label on the host). Only with O(passthrough_type=dynamic).
        type: str
  passthrough_type:
    description:
      - V(directpath) attaches a fixed PCI device (C(VirtualPCIPassthroughDeviceBackingInfo)).
      - V(dynamic) attaches Dynamic DirectPath devices (C(VirtualPCIPassthroughDynamicBackingInfo)) that vSphere binds to
        a free GPU of the allowed device ids at power-on. Needs vSphere 7.0 or later.
    type: str
    choices: [directpath, dynamic]
    default: directpath
  enable_passthrough:
    description:
      - Enable passthrough on the host for chosen GPUs that do not have it. With V(false) such a GPU is an error.
    type: bool
    default: true
  host_reboot:
    description:
      - Allow the module to reboot the host when an enabled GPU is not active yet. The host enters maintenance
        mode first (in a DRS cluster vCenter evacuates the running VMs; otherwise they must be off).
      - With V(false) and a reboot needed, O(scope=all) and O(scope=vm) fail before changing anything (see O(pending_reboot));
        O(scope=host) enables passthrough and returns RV(host.reboot_required=true).
    type: bool
    default: false
  pending_reboot:
    description:
      - What O(scope=all) does when a chosen GPU needs a host reboot and O(host_reboot=false).
      - V(fail) stops before changing anything.
      - V(skip_vm) does the host part (enables passthrough) and then decides from what the host reports - vSphere 7 and
        later activate passthrough at once where the device allows it. When every chosen GPU is active, the VM part
        runs in the same task. Otherwise it skips the VM part, returns RV(host.reboot_required=true) and
        RV(vm_skipped=true) and RV(chosen_gpus), so a caller (the role) can reboot the host once and run again with
        O(chosen_gpus). Nothing is written to the VM then. (Older releases recorded the GPUs in the VM's advanced
        setting C(gpuops.passthrough.reserved); such a setting is still honoured and removed when the GPUs are
        attached.)
    type: str
    choices: [fail, skip_vm]
    default: fail
  chosen_gpus:
    description:
      - PCI addresses of the GPUs an earlier call chose for this VM (its RV chosen_gpus, from a run with
        O(pending_reboot=skip_vm) that stopped for the host reboot). They are taken first for O(gpus), unless another
        VM holds them by now; the role passes them from its first call to the one after the reboot.
      - Only for O(passthrough_type=directpath) with a VM.
    type: list
    elements: str
    default: []
  host_reboot_timeout:
    description:
      - Seconds to wait for maintenance mode, the reboot and the host to come back.
      - Maintenance mode gets it as vSphere's own timeout (C(EnterMaintenanceMode_Task)); when maintenance mode fails
        or does not come in time, the task is cancelled if it still runs, the host is not rebooted, and the error
        names the powered-on VMs still on the host.
    type: int
    default: 1800
  hide_hypervisor:
    description:
      - Set C(hypervisor.cpuid.v0 = FALSE), so the guest does not see the hypervisor CPUID bit. With V(false) the
        setting is left as it is.
      - Unset (the default) decides by GPU class - V(true) when a chosen GPU is a consumer one (GeForce, TITAN), whose
        driver refused to start under a hypervisor before R465, V(false) for data-centre and workstation GPUs, which
        never needed it (and the guest then keeps seeing its hypervisor, which the collection's own checks read).
        RV(hide_hypervisor) says what was decided and why.
    type: bool
  mmio_size_gb:
    description:
      - Value of C(pciPassthru.64bitMMIOSizeGB); C(pciPassthru.use64bitMMIO = TRUE) is set with it.
      - Default is the rule - the next power of two at or above twice the total memory of the VM's GPUs in GB
        (1x 16 GB -> 32, 2x 16 GB -> 64, 1x 40 GB -> 128, 1x 80 GB -> 256).
      - V(0) leaves both settings alone. Nothing is set when O(gpus) is empty.
    type: int
  firmware:
    description:
      - V(efi) switches the VM to EFI firmware and sets Secure Boot to O(secure_boot). V(keep) leaves firmware and Secure Boot alone.
    type: str
    choices: [efi, keep]
    default: efi
  secure_boot:
    description: Secure Boot with EFI firmware. The NVIDIA driver is not signed for every guest, so the default is off.
    type: bool
    default: false
  bios_to_efi:
    description:
      - What to do when a BIOS VM with a virtual disk (an installed guest) would be switched to EFI - its guest may not
        boot. V(fail) stops before changing anything, V(warn) switches and warns.
    type: str
    choices: [fail, warn]
    default: fail
  reserve_memory:
    description:
      - Lock the memory reservation to the VM's memory (C(memoryReservationLockedToMax)). vSphere refuses to power on
        a VM with a passthrough device without a full reservation, so with V(false) the module refuses to power on
        such a VM unless its reservation already covers its memory.
    type: bool
    default: true
  memory_mb:
    description: Set the VM's memory (MB) in the same reconfigure. Default is to keep it.
    type: int
  memory_check:
    description:
      - The rule VM memory >= O(memory_ratio) x total GPU memory. V(fail) stops before changing anything,
        V(warn) warns, V(ignore) skips the check.
    type: str
    choices: [fail, warn, ignore]
    default: fail
  memory_ratio:
    description: Factor of the memory rule.
    type: float
    default: 1.5
  power_cycle:
    description:
      - Allow the module to power a running VM off (guest shutdown when VMware Tools run, else power-off) for changes that
        need it, and on again afterwards. With V(false) such a change on a running VM fails before anything changes.
      - Device, firmware, Secure Boot, memory size and advanced setting changes need the VM off; locking the memory
        reservation does not.
    type: bool
    default: false
  power_timeout:
    description: Seconds to wait for the guest shutdown and the power tasks.
    type: int
    default: 600
notes:
  - The module checks what vSphere enforces and the lab's simulator does not - no passthrough device change on a running
    VM (it powers the VM off first or fails), and no power-on of a VM with a passthrough device without a full memory
    reservation.
  - Whether enabled passthrough needs a host reboot (C(passthruActive) still false) is read from the host after the
    change; check mode cannot know it and assumes a reboot (the enabled GPUs become active with O(host_reboot=true)).
  - With O(pending_reboot=fail) and O(host_reboot=false), a chosen GPU that is not active yet fails before anything
    changes, even one the host might activate at once - use O(pending_reboot=skip_vm) to let the module enable it and
    decide from the host's report.
seealso:
  - name: VMware - Deploy an AI-ready enterprise platform (DirectPath I/O and MMIO settings)
    description: VMware's documentation of DirectPath I/O for GPUs and the 64-bit MMIO settings.
    link: https://docs.vmware.com/en/VMware-vSphere/7.0/com.vmware.vsphere.vm_admin.doc/GUID-5B3CAB26-5D06-4A99-92A0-3A04C69CE64B.html
'''

EXAMPLES = r'''
- name: Give a VM two A100s as DirectPath devices, rebooting the host and power-cycling the VM if needed
  gpuops.k8s_gpu.esxi_gpu_passthrough:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    name: gpu-worker-01
    gpus:
      - model: A100
        count: 2
    memory_mb: 131072
    host_reboot: true
    power_cycle: true
  delegate_to: localhost

- name: Pin one T4 by PCI address, on a standalone ESXi host
  gpuops.k8s_gpu.esxi_gpu_passthrough:
    hostname: esxi01.example.com
    username: root
    password: "{{ esxi_password }}"
    name: inference-01
    gpus:
      - pci_id: "0000:3b:00.0"
    bios_to_efi: warn
  delegate_to: localhost

- name: One Dynamic DirectPath L4, any free one with the label "l4" on the VM's host (vSphere 7+)
  gpuops.k8s_gpu.esxi_gpu_passthrough:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    name: gpu-worker-02
    passthrough_type: dynamic
    gpus:
      - device_id: "0x27B8"
        custom_label: l4
  delegate_to: localhost

- name: Only list a host's NVIDIA GPUs and their passthrough state
  gpuops.k8s_gpu.esxi_gpu_passthrough:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    esxi_hostname: esxi01.example.com
    scope: host
  delegate_to: localhost
  register: host_gpus

- name: Remove every NVIDIA GPU from a VM
  gpuops.k8s_gpu.esxi_gpu_passthrough:
    name: gpu-worker-01
    gpus: []
    firmware: keep
    hide_hypervisor: false
  delegate_to: localhost
'''

RETURN = r'''
hide_hypervisor:
  description:
    - Whether C(hypervisor.cpuid.v0 = FALSE) is wanted on the VM (C(effective)) and why (C(reason)) - O(hide_hypervisor)
      as given, or the GPU class of the chosen GPUs when it is unset.
  returned: when a VM part was planned
  type: dict
  sample: {effective: false, reason: 'auto: data-centre GPU(s) GA100 [A100 PCIe 40GB] never needed it'}
host:
  description: The ESXi host and its NVIDIA GPUs, after the run (predicted in check mode).
  returned: always
  type: dict
  contains:
    name:
      description: Host name.
      type: str
      sample: esxi01.example.com
    gpus:
      description:
        - One entry per NVIDIA PCI device - id, device_id, device_name, capable, enabled, active, attached_to, reserved_by
          (VMs whose C(gpuops.passthrough.reserved) lists it).
      type: list
      elements: dict
      sample:
        - id: 0000:3b:00.0
          device_id: '0x1eb8'
          device_name: TU104GL [Tesla T4]
          capable: true
          enabled: true
          active: true
          attached_to: [gpu-worker-01]
          reserved_by: []
    enabled:
      description: PCI ids for which passthrough was (or would be) enabled by this run.
      type: list
      elements: str
      sample: [0000:3b:00.0]
    reboot_required:
      description: A chosen GPU is enabled but not active after the change, as the host reports it; the host must reboot.
      type: bool
      sample: false
    rebooted:
      description: The module rebooted the host.
      type: bool
      sample: false
vm:
  description: The managed settings of the VM after the run (predicted in check mode); absent without a VM part.
  returned: when the VM part ran
  type: dict
  sample:
    name: gpu-worker-01
    power_state: poweredOn
    gpus: ['directpath:0000:3b:00.0']
    firmware: efi
    secure_boot: false
    memory_mb: 65536
    memory_reservation_locked_to_max: true
    extra_config:
      hypervisor.cpuid.v0: 'FALSE'
      pciPassthru.64bitMMIOSizeGB: '32'
      pciPassthru.use64bitMMIO: 'TRUE'
changes:
  description: What changed (or would change), in words.
  returned: always
  type: list
  elements: str
  sample: ['enable passthrough for 0000:3b:00.0 on esxi01', 'add GPU directpath:0000:3b:00.0', 'firmware bios -> efi']
mmio_size_gb:
  description: The 64-bit MMIO size used (0 when the module leaves it alone).
  returned: when the VM part ran
  type: int
  sample: 32
gpu_memory_gb:
  description: Total memory of the VM's requested GPUs in GB.
  returned: when the VM part ran
  type: int
  sample: 16
reconfigure_count:
  description: Number of ReconfigVM_Task calls issued (0 or 1; 0 in check mode).
  returned: always
  type: int
  sample: 1
tasks:
  description: The vSphere calls that changed something, in order.
  returned: always
  type: list
  elements: str
  sample: [UpdatePassthruConfig, EnterMaintenanceMode_Task, RebootHost_Task, ExitMaintenanceMode_Task, ReconfigVM_Task]
chosen_gpus:
  description:
    - PCI addresses of the host GPUs chosen for O(gpus) (DirectPath), or enabled for the Dynamic DirectPath requests.
    - With RV(vm_skipped=true), pass them as O(chosen_gpus) to the call after the host reboot.
  returned: always
  type: list
  elements: str
  sample: ["0000:3b:00.0"]
vm_skipped:
  description: The VM part was skipped because the host must reboot first (O(pending_reboot=skip_vm)).
  returned: always
  type: bool
  sample: false
power_cycled:
  description: The VM was powered off for the change and on again.
  returned: always
  type: bool
  sample: false
'''

from typing import Any

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_gpu as eg
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_vsphere as ev
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi.esxi_passthrough import Runner, check_params


def argument_spec() -> dict[str, Any]:
    spec = ev.connection_argument_spec()
    spec.update(
        name=dict(type='str'),
        datacenter=dict(type='str'),
        esxi_hostname=dict(type='str'),
        scope=dict(type='str', choices=list(eg.SCOPES), default='all'),
        gpus=dict(type='list', elements='dict', default=[], options=dict(
            pci_id=dict(type='str'),
            device_id=dict(type='raw'),
            model=dict(type='str'),
            count=dict(type='int'),
            memory_gb=dict(type='int'),
            custom_label=dict(type='str'),
        )),
        passthrough_type=dict(type='str', choices=list(eg.PASSTHROUGH_TYPES), default='directpath'),
        enable_passthrough=dict(type='bool', default=True),
        host_reboot=dict(type='bool', default=False),
        pending_reboot=dict(type='str', choices=['fail', 'skip_vm'], default='fail'),
        chosen_gpus=dict(type='list', elements='str', default=[]),
        host_reboot_timeout=dict(type='int', default=1800),
        hide_hypervisor=dict(type='bool'),
        mmio_size_gb=dict(type='int'),
        firmware=dict(type='str', choices=list(eg.FIRMWARES), default='efi'),
        secure_boot=dict(type='bool', default=False),
        bios_to_efi=dict(type='str', choices=list(eg.BIOS_TO_EFI), default='fail'),
        reserve_memory=dict(type='bool', default=True),
        memory_mb=dict(type='int'),
        memory_check=dict(type='str', choices=list(eg.MEMORY_CHECKS), default='fail'),
        memory_ratio=dict(type='float', default=1.5),
        power_cycle=dict(type='bool', default=False),
        power_timeout=dict(type='int', default=600),
    )
    return spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
    )
    if not ev.HAS_PYVMOMI:
        module.fail_json(msg=missing_required_lib('pyVmomi'), exception=ev.PYVMOMI_IMP_ERR)
    try:
        requests = check_params(module.params)
    except eg.GpuError as exc:
        module.fail_json(msg=str(exc), changed=False)
    runner = Runner(module, requests)
    try:
        result = runner.run()
    except (eg.GpuError, ev.VSphereError) as exc:
        module.fail_json(msg=str(exc), changed=bool(runner.tasks), tasks=runner.tasks, changes=runner.changes,
                         reconfigure_count=runner.reconfigure_count)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg='unexpected error: %s' % ev.fault_text(exc), exception=traceback.format_exc(),
                         changed=bool(runner.tasks), tasks=runner.tasks)
    for w in runner.warnings:
        module.warn(w)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
