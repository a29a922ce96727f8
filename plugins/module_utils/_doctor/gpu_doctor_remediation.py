# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's detection (issue #41), pure functions: gpu_doctor's ``remediation`` return value.

detect   per GPU (by UUID): the doctor's health checks run on one GPU at a time (gpu_doctor_checks), so a finding
         belongs to the GPU it was seen on; the findings at or above the trigger severity make the GPU unhealthy.
repair   what the findings need: a GPU reset, a node (or VM) reboot, an RMA or a person; and whether the loop may do
         it here (a passthrough GPU or a vGPU cannot be reset from the guest; a reboot only when asked).
The cluster side (quarantine, drain, release) is _cluster/remediation.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as checks

SEVERITY_RANK = {'critical': 2, 'warning': 1, 'info': 0}

# The doctor's checks that speak about single GPUs, in the doctor's order
GPU_CHECKS = (checks.check_gpu_lost, checks.check_xid, checks.check_recovery_action, checks.check_pending_reset,
              checks.check_ecc, checks.check_memory_repair, checks.check_fabric, checks.check_temperature,
              checks.check_power, checks.check_inforom, checks.check_nvlink)

# repair actions, most demanding last: a GPU with several findings gets the most demanding one
ACTIONS = ('reset', 'manual', 'reboot', 'rma')
# finding id -> action; a finding not listed needs a reset (the doctor's advice for ECC, Xid 48/64/74/95/140, ...)
REBOOT_XIDS = (62, 79, 119, 120)      # the doctor's XID_GUIDE says reboot for these (halt, off the bus, GSP)
FINDING_ACTIONS = {
    'gpu_lost': 'reboot',
    'row_remap_failure': 'rma',
    'retired_pages_rma': 'rma',
    'fabric_registration_not_started': 'manual',
    'fabric_registration_in_progress': 'manual',
    'fabric_registration_failed': 'manual',
    # cooling, power delivery and the InfoROM are a person's work (a reset changes none of them)
    'gpu_temperature_slowdown': 'manual',
    'gpu_temperature_high': 'manual',
    'gpu_power_over_limit': 'manual',
    'gpu_power_at_limit': 'manual',
    'inforom_corrupted': 'manual',
}
# NVML recovery actions (nvml_probe.RECOVERY_ACTIONS) that a GPU reset satisfies; the others need a reboot or a person
RESET_RECOVERY_ACTIONS = ('gpu_reset', 'drain_and_reset')
_PCI = re.compile(r'^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)', re.I)


class PlanError(ValueError):
    pass


def _pci_key(text: object) -> tuple[int, ...] | None:
    """(domain, bus, device) of '00000000:07:00.0' (NVML) or '0000:07:00' (the kernel's Xid line)."""
    m = _PCI.match(str(text or '').strip())
    return tuple(int(x, 16) for x in m.groups()) if m else None


def _one_gpu(facts: dict[str, Any], extra: dict[str, Any] | None,
             gpu: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """facts and extra as the doctor would see them on a node with only this GPU."""
    f = copy.deepcopy(facts)
    f['gpus'] = [gpu]
    nvml = f.setdefault('nvml', {})
    if nvml.get('status') == 'gpu_lost' and gpu.get('error') != 'gpu_lost':
        nvml['status'] = 'ok'
    nvml['xid_events'] = [e for e in nvml.get('xid_events') or [] if str(e.get('gpu')) == str(gpu.get('index'))]
    e = dict(extra or {})
    key = _pci_key(gpu.get('pci_bus_id'))
    e['kernel_xids'] = [x for x in (extra or {}).get('kernel_xids') or [] if key and _pci_key(x.get('pci')) == key]
    return f, e


def gpu_findings(facts: dict[str, Any], extra: dict[str, Any] | None = None,
                 severity: str = 'critical') -> dict[str, list[dict[str, Any]]]:
    """{uuid: [finding]} for each GPU with a finding at or above ``severity`` (the doctor's own findings, run one GPU
    at a time). GPUs without a UUID cannot be quarantined by device and are left out."""
    if severity not in SEVERITY_RANK:
        raise PlanError('severity: %r is not one of %s' % (severity, ', '.join(SEVERITY_RANK)))
    out: dict[str, list[dict[str, Any]]] = {}
    for g in facts.get('gpus') or []:
        if not g.get('uuid'):
            continue
        f, e = _one_gpu(facts, extra, g)
        found: list[dict[str, Any]] = []
        for check in GPU_CHECKS:
            found.extend(check(f, e))
        found = [x for x in found if SEVERITY_RANK[x['severity']] >= SEVERITY_RANK[severity]]
        if found:
            out[g['uuid']] = found
    return out


def assess(facts: dict[str, Any], extra: dict[str, Any] | None = None, severity: str = 'critical',
           allow_reboot: bool = False) -> dict[str, dict[str, Any]]:
    """{uuid: {'index', 'pci_bus_id', 'findings', 'repair'}} of the GPUs that need the loop (gpu_doctor's
    ``remediation`` return value)."""
    by_uuid = dict((g.get('uuid'), g) for g in facts.get('gpus') or [])
    out: dict[str, dict[str, Any]] = {}
    for uuid, found in gpu_findings(facts, extra, severity).items():
        g = by_uuid[uuid]
        out[uuid] = {'index': g.get('index'), 'pci_bus_id': g.get('pci_bus_id'), 'findings': found,
                     'repair': repair(found, g, allow_reboot)}
    return out


def _action_of(finding: dict[str, Any], gpu: dict[str, Any]) -> str:
    fid = finding['id']
    if fid in FINDING_ACTIONS:
        return FINDING_ACTIONS[fid]
    if fid.startswith('xid_'):
        try:
            xid = int(fid[4:])
        except ValueError:
            return 'reboot'
        if xid in REBOOT_XIDS:
            return 'reboot'
        if xid == checks.XID_154:
            return 'reboot' if 'reboot' in finding.get('remediation', '').lower().split('reset')[0] else 'reset'
        return 'reset'
    if fid == 'gpu_recovery_action':
        action = (gpu.get('health') or {}).get('recovery_action')
        return 'reset' if action in RESET_RECOVERY_ACTIONS else 'reboot'
    return 'reset'


def repair(findings: list[dict[str, Any]], gpu: dict[str, Any], allow_reboot: bool = False) -> dict[str, Any]:
    """What the GPU needs: {'action', 'allowed', 'why'}.

    action: reset (nvidia-smi -r on the node), reboot (the node), vm_reboot (passthrough: the guest cannot reset the
    GPU), host (a vGPU: the hypervisor host resets it), rma or manual (fabric manager, a person). allowed: whether the
    loop may do it (a reset where the virtualization mode permits it; a reboot only with ``allow_reboot``)."""
    actions = [_action_of(f, gpu) for f in findings] or ['reset']
    action = max(actions, key=ACTIONS.index)
    why = sorted(set(f['id'] for f, a in zip(findings, actions) if a == action))
    mode = (gpu.get('health') or {}).get('virtualization_mode')
    if action == 'reset' and mode == 'passthrough':
        return {'action': 'vm_reboot', 'allowed': allow_reboot, 'why': why,
                'note': 'the GPU is passed through to this VM: a reset from the guest is refused (reboot the VM)'}
    if action == 'reset' and mode == 'vgpu':
        return {'action': 'host', 'allowed': False, 'why': why,
                'note': 'the GPU is a vGPU: only the hypervisor host can reset it'}
    if action == 'reset' and gpu.get('mig_current'):
        return {'action': 'reset', 'allowed': True, 'why': why,
                'note': 'MIG is enabled: the reset needs every GPU instance on it gone (no process on any MIG device)'}
    if action == 'reboot':
        return {'action': 'reboot', 'allowed': allow_reboot, 'why': why,
                'note': 'a reboot is done only when asked (allow_reboot)' if not allow_reboot else ''}
    return {'action': action, 'allowed': action == 'reset', 'why': why, 'note': ''}
