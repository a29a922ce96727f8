#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: esxi_gpu_passthrough
short_description: Pass NVIDIA GPUs through to a vSphere VM (host passthrough, VM devices and settings) in one task
version_added: 0.2.0
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
  - gpuops.k8s_gpu.attributes
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
        RV(vm_skipped=true), so a caller (the role) can reboot the host once and run again, and records the chosen GPUs
        in the VM's advanced setting C(gpuops.passthrough.reserved) (an extraConfig-only reconfigure, allowed on a
        running VM) - the VM's next run takes exactly those GPUs, other VMs' runs leave them alone; the setting is
        removed when the GPUs are attached.
    type: str
    choices: [fail, skip_vm]
    default: fail
  host_reboot_timeout:
    description: Seconds to wait for maintenance mode, the reboot and the host to come back.
    type: int
    default: 1800
  hide_hypervisor:
    description:
      - Set C(hypervisor.cpuid.v0 = FALSE), so the guest does not see the hypervisor CPUID bit (older NVIDIA drivers
        refuse consumer GPUs under a hypervisor). With V(false) the setting is left as it is.
    type: bool
    default: true
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

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import esxi_gpu as eg
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import esxi_vsphere as ev


def argument_spec():
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
        host_reboot_timeout=dict(type='int', default=1800),
        hide_hypervisor=dict(type='bool', default=True),
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


def check_params(p):
    """Input errors that need no vSphere (raised before connecting)."""
    if p['scope'] in ('all', 'vm') and not p['name']:
        raise eg.GpuError('name: required with scope=%s (the VM to give GPUs to)' % p['scope'])
    if p['mmio_size_gb'] is not None and p['mmio_size_gb'] < 0:
        raise eg.GpuError('mmio_size_gb: must be >= 0 (0 leaves the MMIO settings alone), got %d' % p['mmio_size_gb'])
    if p['memory_mb'] is not None and (p['memory_mb'] < 4 or p['memory_mb'] % 4):
        raise eg.GpuError('memory_mb: must be a positive multiple of 4, got %d' % p['memory_mb'])
    if p['memory_ratio'] <= 0:
        raise eg.GpuError('memory_ratio: must be > 0, got %s' % p['memory_ratio'])
    for opt in ('host_reboot_timeout', 'power_timeout'):
        if p[opt] < 1:
            raise eg.GpuError('%s: must be >= 1 second, got %d' % (opt, p[opt]))
    # The suboptions come back with every key present; drop the unset ones for normalize_requests.
    gpus = [dict((k, v) for k, v in g.items() if v is not None) for g in p['gpus']]
    return eg.normalize_requests(gpus, p['passthrough_type'], bool(p['name']))


def public_gpu(g):
    return dict(id=g['id'], device_id=eg.hex_id(g['device_id']), device_name=g['device_name'], capable=g['capable'],
                enabled=g['enabled'], active=g['active'], attached_to=g['attached_to'], reserved_by=g.get('reserved_by') or [])


class Runner(object):
    def __init__(self, module, requests):
        self.module = module
        self.p = module.params
        self.requests = requests
        self.si = None
        self.tasks = []
        self.changes = []
        self.warnings = []
        self.reconfigure_count = 0
        self.result = {}

    # -------------------------------------------------------------- inventory
    def find(self):
        p = self.p
        vm = None
        if p['name']:
            found = ev.find_by_name(self.si, ev.vim.VirtualMachine, p['name'], p['datacenter'])
            if not found:
                raise eg.GpuError('name: VM %r not found%s' % (p['name'], ' in datacenter %s' % p['datacenter'] if p['datacenter'] else ''))
            if len(found) > 1:
                raise eg.GpuError('name: %d VMs are called %r; set datacenter or rename them' % (len(found), p['name']))
            vm = ev.read_vm(self.si, found[0])
            host_obj = vm['_host']
            if host_obj is None:
                raise eg.GpuError('VM %r has no host (is it orphaned or inaccessible?)' % p['name'])
            host = ev.read_host(self.si, host_obj)
            if p['esxi_hostname'] and p['esxi_hostname'] != host['name']:
                raise eg.GpuError('esxi_hostname: VM %r runs on host %s, not %s (the module does not migrate VMs)'
                                  % (p['name'], host['name'], p['esxi_hostname']))
        else:
            hosts = ev.find_by_name(self.si, ev.vim.HostSystem, p['esxi_hostname'], p['datacenter']) if p['esxi_hostname'] \
                else ev.list_view(self.si, self.si.content.rootFolder, ev.vim.HostSystem)
            if not hosts:
                raise eg.GpuError('esxi_hostname: host %r not found' % p['esxi_hostname'])
            if len(hosts) > 1:
                raise eg.GpuError('esxi_hostname: required - this endpoint manages %d hosts' % len(hosts)
                                  if not p['esxi_hostname'] else 'esxi_hostname: %d hosts are called %r' % (len(hosts), p['esxi_hostname']))
            host = ev.read_host(self.si, hosts[0])
        return vm, host

    # -------------------------------------------------------------- planning (no changes)
    def plan(self, vm, host):
        p = self.p
        dynamic = p['passthrough_type'] == 'dynamic' and vm is not None
        if dynamic and ev.api_major(self.si) < 7:
            raise eg.GpuError('passthrough_type: dynamic needs vSphere 7.0 or later; this endpoint has API %s'
                              % self.si.content.about.apiVersion)
        vm_name = vm['name'] if vm else None
        wanted, memories, host_gpus = [], [], []
        if dynamic:
            targets = eg.dynamic_targets(self.requests, host['gpus'], host['name'])
            # the host part enables `count` GPUs per request: already active/enabled ones first
            used = set()
            for req in self.requests:
                pool = [g for g in host['gpus'] if g['capable'] and g['id'] not in used and
                        not [v for v in g['attached_to'] if v != vm_name] and
                        any(g in t['gpus'] for t in targets if t['request'] is req)]
                pool.sort(key=lambda g: (not g['active'], not g['enabled'], g['id']))
                for g in pool[:req['count']]:
                    used.add(g['id'])
                    host_gpus.append(g)
            for t in targets:
                if not t['memory_gb']:
                    raise eg.GpuError('%s: the memory of device(s) %s is unknown to the collection; set %s.memory_gb'
                                      % (t['request']['option'], ', '.join(eg.hex_id(i) for i in t['device_ids']),
                                         t['request']['option']))
                wanted.append({'type': 'dynamic', 'device_ids': t['device_ids'], 'label': t['label']})
                memories.append(t['memory_gb'])
        else:
            chosen = eg.select_gpus(self.requests, host['gpus'], host['name'], vm_name)
            host_gpus = [g for dummy, g in chosen]
            if vm is not None:
                memories = eg.memory_of(chosen)
                wanted = [{'type': 'directpath', 'id': g['id'], 'device_id': g['device_id'], 'device_name': g['device_name']}
                          for dummy, g in chosen]

        # host part
        to_enable = [g for g in host_gpus if not g['enabled']]
        if to_enable and not p['enable_passthrough']:
            raise eg.GpuError('GPU(s) %s on host %s are not passthrough-enabled; set enable_passthrough=true or enable them '
                              'in the vSphere Client' % (', '.join(g['id'] for g in to_enable), host['name']))
        inactive = [g for g in host_gpus if not g['active']]
        host_plan = {'enable': [g['id'] for g in to_enable], 'reboot': bool(inactive), 'ids': [g['id'] for g in host_gpus]}
        if inactive and vm is not None and p['scope'] in ('all', 'vm'):
            if p['scope'] == 'vm':
                raise eg.GpuError('GPU(s) %s on host %s are not passthrough-active (%s); run with scope=all or host first'
                                  % (', '.join(g['id'] for g in inactive), host['name'],
                                     ', '.join('%s %s' % (g['id'], 'enabled, host reboot pending' if g['enabled'] else 'not enabled')
                                               for g in inactive)))
            if not p['host_reboot'] and p['pending_reboot'] == 'skip_vm':
                # whether the host must reboot is decided after enabling, from what it reports (vSphere 7+ activates
                # passthrough at once where the device allows it); _run plans the VM part again then
                host_plan['defer_vm'] = True
                return host_plan, None
            if not p['host_reboot']:
                raise eg.GpuError('GPU(s) %s on host %s are not passthrough-active yet and need a host reboot; set host_reboot=true, '
                                  'or run with scope=host, reboot the host and run again'
                                  % (', '.join(g['id'] for g in inactive), host['name']))

        vm_plan = None
        if vm is not None and p['scope'] in ('all', 'vm'):
            mmio = p['mmio_size_gb']
            if mmio is None:
                mmio = eg.mmio_size_gb(memories)
            if not wanted:
                mmio = 0
            vm_plan = eg.plan_vm(vm, wanted, dict(
                hide_hypervisor=p['hide_hypervisor'], mmio_size_gb=mmio, firmware=p['firmware'], secure_boot=p['secure_boot'],
                reserve_memory=p['reserve_memory'], memory_mb=p['memory_mb']))
            vm_plan['mmio_size_gb'] = mmio
            vm_plan['gpu_memory_gb'] = sum(memories)
            warn = eg.check_memory(vm_plan['after_vm']['memory_mb'], memories, p['memory_ratio'], p['memory_check'], vm['name'])
            if warn:
                self.warnings.append(warn)
            warn = eg.check_bios_to_efi(vm, vm_plan, p['bios_to_efi'])
            if warn:
                self.warnings.append(warn)
            state = vm['power_state']
            vm_plan['power_cycle'] = False
            if state == 'suspended' and vm_plan['needs_reconfigure']:
                raise eg.GpuError('VM %s is suspended; resume and shut it down, or power it off, first' % vm['name'])
            if state == 'poweredOn' and vm_plan['offline_changes']:
                if not p['power_cycle']:
                    raise eg.GpuError('VM %s is powered on and these changes need it powered off: %s; set power_cycle=true '
                                      'to let the module power it off and on again' % (vm['name'], '; '.join(vm_plan['offline_changes'])))
                vm_plan['power_cycle'] = True
            # vSphere refuses to power on a VM holding a passthrough device without a full memory reservation (the lab
            # simulator does not): check it here, before anything changes.
            after = vm_plan['after_vm']
            if state == 'poweredOn' and after['gpus'] and not eg.full_reservation(after) and \
                    (vm_plan['power_cycle'] or vm_plan['remove'] or vm_plan['add']):
                raise eg.GpuError('VM %s holds passthrough GPU(s) but its memory is not fully reserved; vSphere will not power it on. '
                                  'Set reserve_memory=true' % vm['name'])
        return host_plan, vm_plan

    # -------------------------------------------------------------- run
    def run(self):
        p = self.p
        self.si = ev.connect(p)
        try:
            return self._run()
        finally:
            ev.disconnect(self.si)

    def _run(self):
        p = self.p
        check = self.module.check_mode
        vm, host = self.find()
        host_plan, vm_plan = self.plan(vm, host)
        before_host = dict((g['id'], {'enabled': g['enabled'], 'active': g['active']}) for g in host['gpus']
                           if g['id'] in host_plan['ids'])
        after_host = dict((k, dict(v)) for k, v in before_host.items())
        rebooted = False

        if host_plan['enable']:
            self.changes.append('enable passthrough for %s on %s' % (', '.join(host_plan['enable']), host['name']))
            for i in host_plan['enable']:
                after_host[i]['enabled'] = True
            if not check:
                ev.enable_passthrough(host, host_plan['enable'], apply_now=ev.api_major(self.si) >= 7)
                self.tasks.append('UpdatePassthruConfig')
                # decide on a reboot from what the host reports after the change, not before it
                host = ev.read_host(self.si, host['_obj'])
                for g in host['gpus']:
                    if g['id'] in after_host:
                        after_host[g['id']] = {'enabled': g['enabled'], 'active': g['active']}
        if check:
            reboot_required = host_plan['reboot']  # predicted: a GPU that is not active yet waits for a reboot
        else:
            reboot_required = any(g['enabled'] and not g['active'] for g in host['gpus'] if g['id'] in host_plan['ids'])
        if reboot_required and p['host_reboot']:
            self.changes.append('reboot host %s to activate passthrough' % host['name'])
            if not check:
                old_si = self.si
                self.si, host_obj = ev.reboot_host(self.si, host, p['host_reboot_timeout'], self.tasks,
                                                   reconnect=lambda: ev.connect(p))
                if self.si is not old_si:
                    ev.disconnect(old_si)
                    host['_obj'] = host_obj
                    if vm is not None:
                        vm['_obj'] = ev.vim.VirtualMachine(vm['_obj']._moId, self.si._stub)
            rebooted = True
            reboot_required = False
            for v in after_host.values():
                v['active'] = v['enabled']
        if not check and rebooted:
            host = ev.read_host(self.si, host['_obj'])
            reboot_required = any(g['enabled'] != g['active'] for g in host['gpus'] if g['id'] in before_host)

        if host_plan.get('defer_vm'):
            if not reboot_required:
                # every GPU is active without a reboot: the VM part runs now, with the GPUs just enabled
                vm = ev.read_vm(self.si, vm['_obj']) if not check else vm
                dummy, vm_plan = self.plan(vm, host)
            elif not check and sorted(eg.parse_reserved(vm['extra_config'].get(eg.RESERVED_KEY))) != sorted(host_plan['ids']):
                # the VM part waits for the host reboot: its next run takes these GPUs again, other VMs leave them
                ev.set_reservation(vm, host_plan['ids'], p['power_timeout'], self.tasks)
                self.changes.append('reserve %s for VM %s until host %s reboots (%s)'
                                    % (', '.join(host_plan['ids']), vm['name'], host['name'], eg.RESERVED_KEY))
                host = ev.read_host(self.si, host['_obj'])

        power_cycled = False
        if vm_plan is not None and vm_plan['needs_reconfigure']:
            self.changes.extend(vm_plan['changes'])
            if not check:
                power_cycled = self.apply_vm(vm, host, vm_plan)
            elif vm_plan['power_cycle']:
                self.changes.append('power VM %s off and on again' % vm['name'])
                power_cycled = True

        if not check:
            host = ev.read_host(self.si, host['_obj']) if vm_plan is not None and vm_plan['needs_reconfigure'] else host
            after_host_pub = [public_gpu(g) for g in host['gpus']]
        else:
            after_host_pub = []
            for g in host['gpus']:
                g2 = dict(g, **after_host.get(g['id'], {}))
                if vm is not None and vm_plan is not None:
                    names = [n for n in g['attached_to'] if n != vm['name']]
                    if any(w['type'] == 'directpath' and w['id'] == g['id'] for w in vm_plan['after_vm']['gpus']):
                        names.append(vm['name'])
                    g2['attached_to'] = sorted(names)
                after_host_pub.append(public_gpu(g2))

        result = dict(
            changed=bool(self.changes),
            changes=self.changes,
            tasks=self.tasks,
            reconfigure_count=self.reconfigure_count,
            power_cycled=power_cycled,
            vm_skipped=vm is not None and self.p['scope'] in ('all', 'vm') and vm_plan is None,
            host=dict(name=host['name'], gpus=after_host_pub, enabled=host_plan['enable'],
                      reboot_required=reboot_required, rebooted=rebooted),
        )
        diff_before = {'host': {'name': host['name'], 'passthrough': before_host}}
        diff_after = {'host': {'name': host['name'], 'passthrough': after_host}}
        if vm_plan is not None:
            if check:
                vm_after = dict(vm_plan['after'], name=vm['name'])
            else:
                vm_after = dict(eg.vm_state(ev.read_vm(self.si, vm['_obj'])), name=vm['name']) \
                    if vm_plan['needs_reconfigure'] else dict(vm_plan['after'], name=vm['name'])
            result['vm'] = vm_after
            result['mmio_size_gb'] = vm_plan['mmio_size_gb']
            result['gpu_memory_gb'] = vm_plan['gpu_memory_gb']
            diff_before['vm'] = dict(vm_plan['before'], name=vm['name'])
            diff_after['vm'] = dict(vm_after)
            if not check and vm_plan['needs_reconfigure']:
                mismatch = [k for k in ('gpus', 'firmware', 'secure_boot', 'memory_mb', 'memory_reservation_locked_to_max',
                                        'extra_config') if vm_after[k] != vm_plan['after'][k]]
                if mismatch:
                    self.warnings.append('read-back of VM %s differs from the plan in: %s' % (vm['name'], ', '.join(mismatch)))
        if self.module._diff:
            result['diff'] = {'before': diff_before, 'after': diff_after}
        return result

    def apply_vm(self, vm, host, plan):
        p = self.p
        system_ids = None
        if any(w['type'] == 'directpath' for w in plan['add']):
            system_ids = ev.config_target(host)
        spec = ev.build_config_spec(plan, vm, host, system_ids, p['secure_boot'])
        power_cycled = False
        if vm['power_state'] == 'poweredOn':
            if plan['offline_changes']:
                if not plan['power_cycle']:  # guarded in plan(); never send device changes to a running VM
                    raise eg.GpuError('VM %s is powered on; power_cycle=false' % vm['name'])
                ev.power_off(vm, p['power_timeout'], self.tasks)
                power_cycled = True
        ev.wait_task(vm['_obj'].ReconfigVM_Task(spec=spec), p['power_timeout'])
        self.tasks.append('ReconfigVM_Task')
        self.reconfigure_count += 1
        if power_cycled:
            after = ev.read_vm(self.si, vm['_obj'])
            if after['gpus'] and not eg.full_reservation(after):
                raise eg.GpuError('VM %s holds passthrough GPU(s) without a full memory reservation; not powering it on '
                                  '(vSphere would refuse)' % vm['name'])
            ev.power_on(vm, p['power_timeout'], self.tasks)
            self.changes.append('power VM %s off and on again' % vm['name'])
        return power_cycled


def main():
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
