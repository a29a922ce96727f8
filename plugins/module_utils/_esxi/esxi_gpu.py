# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure-Python logic of gpuops.k8s_gpu.esxi_gpu_passthrough: input checks, GPU selection, MMIO sizing,
memory rule and the plan of VM changes. Works on plain dicts so it is unit-testable without pyVmomi
(plugins/module_utils/_esxi/esxi_vsphere.py turns vSphere objects into these dicts and plans into specs).

Host GPU dict: id ('0000:3b:00.0'), vendor_id, device_id (int), device_name, capable, enabled, active,
system_id (str or None), custom_label, attached_to (list of VM names holding it with a DirectPath backing),
reserved_by (list of VM names whose RESERVED_KEY lists it).

VM dict: name, power_state, memory_mb, firmware, secure_boot, reservation_locked, reservation_mb,
extra_config (managed keys only), has_disk, gpus (list of dicts: key, type 'directpath'|'dynamic', id,
device_id, device_ids, label, system_id).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog

NVIDIA_VENDOR_ID = 0x10DE

# PCI device id -> GPU memory in GB (NVIDIA datasheets). Used for the MMIO size and the memory rule;
# unknown ids fall back to a "<n>GB" in the PCI device name, then to gpus[].memory_gb.
GPU_MEMORY_GB = {
    0x1BB3: 8,     # Tesla P4
    0x1B38: 24,    # Tesla P40
    0x15F7: 12,    # Tesla P100 PCIe 12GB
    0x15F8: 16,    # Tesla P100 PCIe 16GB
    0x15F9: 16,    # Tesla P100 SXM2 16GB
    0x1DB1: 16,    # Tesla V100 SXM2 16GB
    0x1DB4: 16,    # Tesla V100 PCIe 16GB
    0x1DB5: 32,    # Tesla V100 SXM2 32GB
    0x1DB6: 32,    # Tesla V100 PCIe 32GB
    0x1DF6: 32,    # Tesla V100S PCIe 32GB
    0x1EB8: 16,    # Tesla T4
    0x20B0: 40,    # A100 SXM4 40GB
    0x20B2: 80,    # A100 SXM4 80GB
    0x20B5: 80,    # A100 PCIe 80GB
    0x20F1: 40,    # A100 PCIe 40GB
    0x20B7: 24,    # A30
    0x2235: 48,    # A40
    0x2236: 24,    # A10
    0x25B6: 16,    # A16 (per GPU)
    0x2230: 48,    # RTX A6000
    0x26B5: 48,    # L40
    0x26B9: 48,    # L40S
    0x27B8: 24,    # L4
    0x2330: 80,    # H100 SXM5 80GB
    0x2331: 80,    # H100 PCIe 80GB
    0x2321: 94,    # H100 NVL
    0x2335: 141,   # H200 SXM
    0x233B: 141,   # H200 NVL
}

# VM advanced setting naming the GPUs (PCI ids, comma-separated) this VM's run enabled while the host must reboot
# before they are active: its next run takes those again, other VMs' runs leave them alone; cleared when the GPUs
# are attached.
RESERVED_KEY = 'gpuops.passthrough.reserved'

KEY_CPUID = 'hypervisor.cpuid.v0'
KEY_MMIO = 'pciPassthru.use64bitMMIO'
KEY_MMIO_SIZE = 'pciPassthru.64bitMMIOSizeGB'
MANAGED_KEYS = (KEY_CPUID, KEY_MMIO, KEY_MMIO_SIZE)

PASSTHROUGH_TYPES = ('directpath', 'dynamic')
MEMORY_CHECKS = ('fail', 'warn', 'ignore')
BIOS_TO_EFI = ('fail', 'warn')
FIRMWARES = ('efi', 'keep')
SCOPES = ('all', 'host', 'vm')

_PCI_RE = re.compile(r'^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$')
_HEX_RE = re.compile(r'^(?:0x)?([0-9a-f]{1,4})$')
_MEM_RE = re.compile(r'(\d+)\s*GB', re.IGNORECASE)


class GpuError(Exception):
    """A problem with the input or the inventory; the message names the option or the object."""


def normalize_pci_id(value: object, option: str) -> str:
    """'3B:00.0' / '0000:3b:00.0' -> '0000:3b:00.0' (vSphere's HostPciDevice.id format)."""
    text = str(value).strip().lower()
    m = _PCI_RE.match(text)
    if not m:
        raise GpuError('%s: %r is not a PCI address; expected DDDD:BB:SS.F or BB:SS.F in hex, e.g. 0000:3b:00.0'
                       % (option, value))
    return '%s:%s:%s.%s' % (m.group(1) or '0000', m.group(2), m.group(3), m.group(4))


def parse_device_id(value: object, option: str) -> int:
    """PCI device id from an int (its value) or a hex string ('0x20F1', '20f1') -> int."""
    if isinstance(value, bool):
        raise GpuError('%s: %r is not a PCI device id; expected a hex string such as 0x20F1' % (option, value))
    if isinstance(value, int):
        if 0 < value <= 0xFFFF:
            return value
        raise GpuError('%s: %r is out of range; a PCI device id is 0x0001-0xFFFF' % (option, value))
    m = _HEX_RE.match(str(value).strip().lower())
    if not m or int(m.group(1), 16) == 0:
        raise GpuError('%s: %r is not a PCI device id; expected a hex string such as 0x20F1' % (option, value))
    return int(m.group(1), 16)


def hex_id(value: int) -> str:
    return '0x%04x' % (value & 0xFFFF)


def model_matches(model: str, device_name: str | None) -> bool:
    """Case-insensitive match of a model ('T4', 'A100 PCIe 40GB') as a whole word in a PCI device name."""
    pattern = r'(?<![a-z0-9])' + re.escape(model.strip().lower()) + r'(?![a-z0-9])'
    return re.search(pattern, (device_name or '').lower()) is not None


def _mig_catalogue_memory_gb(device_id: int) -> int | None:
    """The memory of the whole-GPU MIG profile of a GPU the collection's MIG catalogue knows by PCI device id (the
    GPUs the table above lacks: A100/H100 variants, GH200, B200, B300, GB200, GB300, RTX PRO 6000), or None. It is
    the memory a VM can use, slightly under the board's, which is close enough for the MMIO size and memory rule."""
    for dummy, ids, dummy_rules, table in gpu_catalog.MIG_PRODUCTS:
        if device_id in ids:
            return max(row['memory_gib'] for row in table)
    return None


def gpu_memory_gb(device_id: int, device_name: str | None = None, override: int | None = None) -> int | None:
    """GPU memory in GB: the override, else the table above, else the MIG catalogue's whole-GPU profile, else
    '<n>GB' in the name, else None."""
    if override:
        return override
    if device_id in GPU_MEMORY_GB:
        return GPU_MEMORY_GB[device_id]
    mig = _mig_catalogue_memory_gb(device_id)
    if mig:
        return mig
    m = _MEM_RE.search(device_name or '')
    if m:
        return int(m.group(1))
    return None


def next_power_of_two(value: int) -> int:
    value = int(math.ceil(value))
    if value <= 1:
        return 1
    return 1 << (value - 1).bit_length()


def mmio_size_gb(memories_gb: list[int]) -> int:
    """The MMIO rule: 64bitMMIOSizeGB = next power of two >= 2 x (sum of the GPUs' memory in GB).

    The GPU's large BAR (BAR1 on data-centre GPUs) is as large as its memory and must fit, power-of-two
    aligned, in the VM's 64-bit MMIO window along with the other BARs; twice the total memory, rounded
    up to a power of two, is the sizing VMware and NVIDIA document. 1x16 GB -> 32, 2x16 GB -> 64,
    1x40 GB -> 128, 1x80 GB -> 256, 4x80 GB -> 1024. Returns 0 for no GPUs.
    """
    total = sum(memories_gb)
    if total <= 0:
        return 0
    return next_power_of_two(total * 2)


def required_memory_mb(memories_gb: list[int], ratio: float) -> int:
    """The memory rule: VM memory >= ratio x total GPU memory (GB taken as GiB, 1 GB = 1024 MB)."""
    return int(math.ceil(sum(memories_gb) * 1024 * ratio))


# ------------------------------------------------------------------------------------------------ input

def normalize_requests(gpus: list | None, passthrough_type: str, has_vm: bool) -> list[dict[str, Any]]:
    """Check and normalise the gpus option. Each entry has exactly one of pci_id, device_id, model."""
    out = []
    for i, item in enumerate(gpus or []):
        opt = 'gpus[%d]' % i
        if not isinstance(item, dict):
            raise GpuError('%s: expected a dict with one of pci_id, device_id, model; got %r' % (opt, item))
        unknown = sorted(set(item) - set(('pci_id', 'device_id', 'model', 'count', 'memory_gb', 'custom_label')))
        if unknown:
            raise GpuError('%s: unknown key(s) %s; allowed: pci_id, device_id, model, count, memory_gb, custom_label'
                           % (opt, ', '.join(unknown)))
        given = [k for k in ('pci_id', 'device_id', 'model') if item.get(k) not in (None, '')]
        if len(given) != 1:
            raise GpuError('%s: give exactly one of pci_id, device_id, model (got %s)' % (opt, ', '.join(given) or 'none'))
        req: dict[str, Any] = {'index': i, 'option': opt, 'pci_id': None, 'device_id': None, 'model': None,
                               'count': item.get('count'), 'memory_gb': item.get('memory_gb'), 'custom_label': item.get('custom_label') or ''}
        if given[0] == 'pci_id':
            req['pci_id'] = normalize_pci_id(item['pci_id'], opt + '.pci_id')
            if passthrough_type == 'dynamic' and has_vm:
                raise GpuError('%s.pci_id: Dynamic DirectPath (passthrough_type=dynamic) picks a device at power-on; '
                               'choose GPUs by device_id or model, or use passthrough_type=directpath' % opt)
            if req['count'] not in (None, 1):
                raise GpuError('%s.count: must be 1 (or unset) with pci_id, got %r' % (opt, req['count']))
            req['count'] = 1
        elif given[0] == 'device_id':
            req['device_id'] = parse_device_id(item['device_id'], opt + '.device_id')
        else:
            req['model'] = str(item['model']).strip()
        if req['count'] is not None:
            try:
                req['count'] = int(req['count'])
            except (TypeError, ValueError):
                raise GpuError('%s.count: %r is not an integer' % (opt, req['count']))
            if req['count'] < 1:
                raise GpuError('%s.count: must be >= 1, got %d' % (opt, req['count']))
        elif has_vm:
            req['count'] = 1
        if req['memory_gb'] is not None:
            try:
                req['memory_gb'] = int(req['memory_gb'])
            except (TypeError, ValueError):
                raise GpuError('%s.memory_gb: %r is not an integer' % (opt, req['memory_gb']))
            if req['memory_gb'] < 1:
                raise GpuError('%s.memory_gb: must be >= 1, got %d' % (opt, req['memory_gb']))
        if req['custom_label'] and passthrough_type != 'dynamic':
            raise GpuError('%s.custom_label: only used with passthrough_type=dynamic' % opt)
        out.append(req)
    return out


def _describe(gpu: dict) -> str:
    return '%s %s (%s)' % (gpu['id'], gpu['device_name'], hex_id(gpu['device_id']))


def _matches(req: dict, gpu: dict) -> bool:
    if req['pci_id']:
        return gpu['id'] == req['pci_id']
    if req['device_id'] is not None:
        return gpu['device_id'] == req['device_id']
    return model_matches(req['model'], gpu['device_name'])


def _what(req: dict) -> str:
    if req['pci_id']:
        return 'pci_id %s' % req['pci_id']
    if req['device_id'] is not None:
        return 'device_id %s' % hex_id(req['device_id'])
    return 'model %r' % req['model']


def _inventory(host_gpus: list[dict]) -> str:
    models: dict[tuple, list] = {}
    for g in host_gpus:
        models.setdefault((g['device_id'], g['device_name']), []).append(g['id'])
    return '; '.join('%s %s: %s' % (hex_id(k[0]), k[1], ', '.join(v)) for k, v in sorted(models.items())) or 'none'


def parse_reserved(value: object) -> list[str]:
    """RESERVED_KEY's value -> sorted PCI ids (unparseable entries are dropped)."""
    out = set()
    for part in str(value or '').split(','):
        part = part.strip()
        if not part:
            continue
        try:
            out.add(normalize_pci_id(part, RESERVED_KEY))
        except GpuError:
            continue
    return sorted(out)


def _others(gpu: dict, vm_name: str | None) -> list[str]:
    """VMs other than vm_name that hold the GPU or reserved it while waiting for a host reboot."""
    return sorted(set(v for v in list(gpu['attached_to']) + list(gpu.get('reserved_by') or []) if v != vm_name))


def select_gpus(requests: list[dict], host_gpus: list[dict], host_name: str, vm_name: str | None = None,
                prefer_pending: bool = False) -> list[tuple[dict, dict]]:
    """Pick host GPUs for the requests. Returns [(request, gpu), ...].

    With a VM (DirectPath): GPUs already on the VM are kept first, then the ones this VM's earlier run reserved
    (enabled for it, waiting for the host reboot), then free ones (no other VM holds or reserved them): active ones,
    then ones without passthrough, then enabled ones waiting for a reboot; by PCI address within each.
    With prefer_pending (the call that reboots the host: host_reboot), free GPUs whose passthrough is enabled and
    waits for that reboot come before the ones without passthrough: they are what an earlier call
    (pending_reboot=skip_vm) enabled, and the reboot activates them; taking others would enable more GPUs and leave
    those in passthrough for nobody (the host holds that state: enabled, not active, held by no VM).
    A GPU held or reserved by another VM is refused.
    Without a VM (host part only): every matching GPU, or the first `count` of them.
    """
    chosen = []
    used = set()
    ordered = sorted(requests, key=lambda r: 0 if r['pci_id'] else 1)
    for req in ordered:
        matching = [g for g in host_gpus if _matches(req, g) and g['id'] not in used]
        if not matching and not any(_matches(req, g) for g in host_gpus):
            raise GpuError('%s: no NVIDIA GPU with %s on host %s; its NVIDIA GPUs are: %s'
                           % (req['option'], _what(req), host_name, _inventory(host_gpus)))
        if vm_name is None:
            picked = matching if req['count'] is None else matching[:req['count']]
        else:
            for g in matching:
                if req['pci_id'] and _others(g, vm_name):
                    held = [v for v in g['attached_to'] if v != vm_name]
                    resv = [v for v in g.get('reserved_by') or [] if v != vm_name]
                    raise GpuError('%s: GPU %s is taken: %s' % (req['option'], _describe(g), '; '.join(
                        (['attached to VM(s) %s' % ', '.join(held)] if held else []) +
                        (['reserved by VM(s) %s, waiting for the host reboot (%s)' % (', '.join(resv), RESERVED_KEY)]
                         if resv else []))))
            free = [g for g in matching if not _others(g, vm_name)]
            # this VM's own GPUs first (attached, then reserved by its earlier run); enabled-but-not-active GPUs
            # nobody reserved come last (a VM of an older run may wait for the same host reboot)
            if prefer_pending:
                free.sort(key=lambda g: (vm_name not in g['attached_to'], vm_name not in (g.get('reserved_by') or []),
                                         not g['active'], not g['enabled'], g['id']))
            else:
                free.sort(key=lambda g: (vm_name not in g['attached_to'], vm_name not in (g.get('reserved_by') or []),
                                         not g['active'], g['enabled'] and not g['active'], g['id']))
            if len(free) < req['count']:
                taken = ['%s (VM %s)' % (g['id'], ', '.join(_others(g, vm_name))) for g in matching if g not in free]
                raise GpuError('%s: %d GPU(s) with %s wanted on host %s but only %d free%s'
                               % (req['option'], req['count'], _what(req), host_name, len(free),
                                  '; taken: ' + ', '.join(taken) if taken else ''))
            picked = free[:req['count']]
        for g in picked:
            if not g['capable']:
                raise GpuError('%s: GPU %s on host %s is not passthrough-capable (check the BIOS: VT-d/IOMMU, SR-IOV)'
                               % (req['option'], _describe(g), host_name))
            used.add(g['id'])
            chosen.append((req, g))
    return chosen


def dynamic_targets(requests: list[dict], host_gpus: list[dict], host_name: str) -> list[dict[str, Any]]:
    """Dynamic DirectPath: one entry per device to add: {'device_ids', 'label', 'memory_gb', 'request', 'gpus'}.

    A model may match several device ids; all of them go into allowedDevice. The host must have at least as
    many capable GPUs of those ids as requested in total (vSphere picks a free active one at power-on).
    """
    out = []
    for req in requests:
        matching = [g for g in host_gpus if _matches(req, g)]
        if not matching:
            raise GpuError('%s: no NVIDIA GPU with %s on host %s; its NVIDIA GPUs are: %s'
                           % (req['option'], _what(req), host_name, _inventory(host_gpus)))
        usable = [g for g in matching if g['capable']]
        if len(usable) < req['count']:
            raise GpuError('%s: %d GPU(s) with %s wanted but host %s has only %d passthrough-capable'
                           % (req['option'], req['count'], _what(req), host_name, len(usable)))
        ids = sorted(set(g['device_id'] for g in matching))
        mem = max(gpu_memory_gb(g['device_id'], g['device_name'], req['memory_gb']) or 0 for g in matching)
        for dummy in range(req['count']):
            out.append({'device_ids': ids, 'label': req['custom_label'], 'memory_gb': mem, 'request': req,
                        'gpus': usable})
    return out


def memory_of(chosen: list[tuple[dict, dict]]) -> list[int]:
    """GPU memory (GB) for each chosen (request, gpu); raises naming gpus[i].memory_gb when unknown."""
    out = []
    for req, g in chosen:
        mem = gpu_memory_gb(g['device_id'], g['device_name'], req['memory_gb'])
        if not mem:
            raise GpuError('%s: the memory of GPU %s is unknown to the collection; set %s.memory_gb'
                           % (req['option'], _describe(g), req['option']))
        out.append(mem)
    return out


# ------------------------------------------------------------------------------------------------ VM plan

def _bool_str(value: object) -> str:
    return 'TRUE' if value else 'FALSE'


def _same_value(current: object, wanted: str) -> bool:
    if current is None:
        return False
    if wanted.upper() in ('TRUE', 'FALSE'):
        return str(current).strip().upper() == wanted.upper()
    return str(current).strip() == wanted


def gpu_label(dev: dict) -> str:
    if dev['type'] == 'directpath':
        return 'directpath:%s' % dev['id']
    ids = ','.join(hex_id(i) for i in dev.get('device_ids') or [])
    return 'dynamic:%s%s' % (ids, (':' + dev['label']) if dev.get('label') else '')


def vm_state(vm: dict) -> dict[str, Any]:
    """The managed settings of a VM dict, as shown in diff before/after and in the result."""
    return {
        'power_state': vm['power_state'],
        'gpus': sorted(gpu_label(d) for d in vm['gpus']),
        'firmware': vm['firmware'],
        'secure_boot': bool(vm['secure_boot']),
        'memory_mb': vm['memory_mb'],
        'memory_reservation_locked_to_max': bool(vm['reservation_locked']),
        'extra_config': dict((k, v) for k, v in sorted(vm['extra_config'].items()) if k in MANAGED_KEYS),
    }


def hide_hypervisor_decision(requested: object, gpu_names: list[str]) -> tuple[bool, str]:
    """(effective, reason) for hypervisor.cpuid.v0 = FALSE: the option as given, or with None by GPU class - only
    consumer GPUs (GeForce, TITAN: gpu_catalog.is_consumer_gpu) need the hypervisor hidden (their driver refused to
    start in a VM before R465); data-centre and workstation GPUs never did (docs/conformance/esxi_gpu_passthrough.md
    ESX-14)."""
    if requested is not None:
        return bool(requested), 'hide_hypervisor is %s' % ('true' if requested else 'false')
    names = sorted(set(n for n in gpu_names if n))
    consumer = [n for n in names if gpu_catalog.is_consumer_gpu(n)]
    if consumer:
        return True, 'auto: consumer GPU(s) %s (their driver refused to start under a hypervisor before R465)' % (
            ', '.join(consumer))
    return False, 'auto: data-centre GPU(s) %s never needed it' % (', '.join(names) or 'none chosen')


def plan_vm(vm: dict, wanted_gpus: list[dict], params: dict) -> dict[str, Any]:
    """Compare a VM with what is wanted. Returns a plan dict:

    remove: VM device dicts to remove; add: wanted GPU dicts to add; extra_config: {key: value};
    firmware / secure_boot / reservation_locked / memory_mb: new value or None; changes: list of
    human-readable changes; offline_changes: the subset that needs the VM powered off; warnings; after: vm_state
    after the change.

    wanted_gpus: [{'type': 'directpath', 'id', 'device_id', 'system_id', 'device_name', 'vendor_id'}] or
    [{'type': 'dynamic', 'device_ids', 'label'}].
    params: manage_gpus, hide_hypervisor, mmio_size_gb (0 = leave alone), firmware ('efi'|'keep'),
    secure_boot (bool), reserve_memory (bool), memory_mb (None or int).
    """
    plan: dict[str, Any] = {'remove': [], 'add': [], 'extra_config': {}, 'firmware': None, 'secure_boot': None,
                            'reservation_locked': None, 'memory_mb': None, 'changes': [], 'offline_changes': [],
                            'warnings': []}
    if params.get('manage_gpus', True):
        current = [d for d in vm['gpus'] if d.get('nvidia', True)]
        pending = list(wanted_gpus)
        for dev in current:
            match = None
            for want in pending:
                if want['type'] != dev['type']:
                    continue
                if want['type'] == 'directpath' and want['id'] == dev['id'] and \
                        (not want.get('system_id') or not dev.get('system_id') or want['system_id'] == dev['system_id']):
                    match = want
                    break
                if want['type'] == 'dynamic' and sorted(want['device_ids']) == sorted(dev.get('device_ids') or []) \
                        and (want.get('label') or '') == (dev.get('label') or ''):
                    match = want
                    break
            if match is None:
                plan['remove'].append(dev)
            else:
                pending.remove(match)
        plan['add'] = pending
        for dev in plan['remove']:
            plan['changes'].append('remove GPU %s' % gpu_label(dev))
            plan['offline_changes'].append('remove GPU %s' % gpu_label(dev))
        for dev in plan['add']:
            plan['changes'].append('add GPU %s' % gpu_label(dev))
            plan['offline_changes'].append('add GPU %s' % gpu_label(dev))

    wanted_ec = {}
    if params.get('hide_hypervisor'):
        wanted_ec[KEY_CPUID] = 'FALSE'
    if params.get('mmio_size_gb'):
        wanted_ec[KEY_MMIO] = _bool_str(True)
        wanted_ec[KEY_MMIO_SIZE] = str(int(params['mmio_size_gb']))
    for key in MANAGED_KEYS:
        if key in wanted_ec and not _same_value(vm['extra_config'].get(key), wanted_ec[key]):
            plan['extra_config'][key] = wanted_ec[key]
            text = 'set %s = %s (was %s)' % (key, wanted_ec[key], vm['extra_config'].get(key, 'unset'))
            plan['changes'].append(text)
            plan['offline_changes'].append(text)

    if params.get('firmware') == 'efi':
        if vm['firmware'] != 'efi':
            plan['firmware'] = 'efi'
            text = 'firmware %s -> efi' % vm['firmware']
            plan['changes'].append(text)
            plan['offline_changes'].append(text)
        want_sb = bool(params.get('secure_boot'))
        if bool(vm['secure_boot']) != want_sb:
            plan['secure_boot'] = want_sb
            text = 'secure boot %s -> %s' % ('on' if vm['secure_boot'] else 'off', 'on' if want_sb else 'off')
            plan['changes'].append(text)
            plan['offline_changes'].append(text)

    if params.get('memory_mb') and int(params['memory_mb']) != vm['memory_mb']:
        new_mb = int(params['memory_mb'])
        plan['memory_mb'] = new_mb
        text = 'memory %d MB -> %d MB' % (vm['memory_mb'], new_mb)
        plan['changes'].append(text)
        plan['offline_changes'].append(text)

    if params.get('manage_gpus', True) and vm['extra_config'].get(RESERVED_KEY):
        # the GPUs this VM's earlier run reserved are attached now (allowed on a running VM)
        plan['extra_config'][RESERVED_KEY] = ''
        plan['changes'].append('clear %s (was %s)' % (RESERVED_KEY, vm['extra_config'][RESERVED_KEY]))

    if params.get('reserve_memory') and not vm['reservation_locked']:
        plan['reservation_locked'] = True
        plan['changes'].append('lock the memory reservation to the VM memory')  # allowed on a running VM

    after = dict(vm)
    after['gpus'] = [d for d in vm['gpus'] if not any(d is r for r in plan['remove'])] + list(plan['add'])
    after['extra_config'] = dict(vm['extra_config'], **plan['extra_config'])
    if plan['firmware']:
        after['firmware'] = plan['firmware']
    if plan['secure_boot'] is not None:
        after['secure_boot'] = plan['secure_boot']
    if plan['memory_mb']:
        after['memory_mb'] = plan['memory_mb']
    if plan['reservation_locked']:
        after['reservation_locked'] = True
    plan['after_vm'] = after
    plan['after'] = vm_state(after)
    plan['before'] = vm_state(vm)
    plan['needs_reconfigure'] = bool(plan['changes'])
    return plan


def check_bios_to_efi(vm: dict, plan: dict, policy: str) -> str | None:
    """Switching a BIOS VM with an installed guest (it has a virtual disk) to EFI: 'fail' or 'warn'."""
    if plan['firmware'] != 'efi' or vm['firmware'] != 'bios' or not vm.get('has_disk'):
        return None
    text = ('VM %s has firmware bios and a virtual disk: a guest installed for BIOS may not boot with EFI '
            '(convert its disk to GPT/EFI first, or reinstall)' % vm['name'])
    if policy == 'warn':
        return text
    raise GpuError(text + '; set bios_to_efi=warn to switch anyway')


def check_memory(memory_mb: int, gpu_memories_gb: list[int], ratio: float, policy: str, vm_name: str) -> str | None:
    """The memory rule: returns a warning text, None, or raises (policy 'fail')."""
    if policy == 'ignore' or not gpu_memories_gb:
        return None
    need = required_memory_mb(gpu_memories_gb, ratio)
    if memory_mb >= need:
        return None
    text = ('VM %s has %d MB of memory but its GPUs have %d GB in total; the rule memory >= %s x GPU memory '
            'needs at least %d MB' % (vm_name, memory_mb, sum(gpu_memories_gb), ratio, need))
    if policy == 'warn':
        return text
    raise GpuError(text + '; raise memory_mb, or set memory_check=warn or ignore')


def full_reservation(vm: dict) -> bool:
    """vSphere powers on a VM with a DirectPath device only with its whole memory reserved."""
    return bool(vm['reservation_locked']) or (vm.get('reservation_mb') or 0) >= vm['memory_mb']
