# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The doctor as a node health gate: gpu_doctor's result and gpuops_doctor_gate -> the node's verdict (a host fact,
gpuops_doctor_verdict), which the pool planning (pool_plan.sharing_pools) reads to leave gated nodes out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the report's records, for the type checker only (nothing of _cluster is imported at run time)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report.model import Report

GATE_MODES = ('enforce', 'warn', 'off')
DEFAULT_GATE = 'enforce'


class GateError(ValueError):
    pass


def check_gate(gate: str) -> str:
    if gate not in GATE_MODES:
        raise GateError('gpuops_doctor_gate is %r; allowed: %s' % (gate, ', '.join(GATE_MODES)))
    return gate


def verdict(result: Mapping[str, Any] | None, gate: str = DEFAULT_GATE) -> dict[str, Any]:
    """{'gate', 'gated', 'healthy', 'critical', 'warning', 'message'} from a gpu_doctor result (or a skipped task)."""
    check_gate(gate)
    result = result or {}
    findings = result.get('findings') or []
    critical = [f['id'] for f in findings if f.get('severity') == 'critical']
    warning = [f['id'] for f in findings if f.get('severity') == 'warning']
    info = [f['id'] for f in findings if f.get('severity') == 'info']
    ran = 'findings' in result
    gated = gate == 'enforce' and bool(critical)
    if not ran:
        message = 'doctor not run (gpuops_doctor_gate: %s)' % gate
    elif critical:
        message = '%d critical finding(s): %s%s' % (
            len(critical), ', '.join(critical),
            ' - left out of its pool (gpuops_doctor_gate: enforce)' if gated else
            ' - kept in its pool (gpuops_doctor_gate: %s)' % gate)
    elif warning:
        message = 'healthy enough; %d warning(s): %s' % (len(warning), ', '.join(warning))
    else:
        message = 'no problem found'
    return {'gate': gate, 'gated': gated, 'ran': ran, 'healthy': ran and not critical and not warning,
            'critical': critical, 'warning': warning, 'info': info, 'message': message}


def health_column(v: Mapping[str, Any] | None) -> str:
    """The report's health cell of a node: 'ok', 'warning', 'CRITICAL (gated)', 'CRITICAL' or '-' (not diagnosed)."""
    if not v or not v.get('ran'):
        return '-'
    if v.get('critical'):
        return 'CRITICAL (gated)' if v.get('gated') else 'CRITICAL'
    return 'warning' if v.get('warning') else 'ok'


# the doctor's findings that the share report repeats as notes (what a GPU pod on the node must do)
REPORT_NOTES = {
    'runtime_class_nvidia_required': 'nvidia is not the container runtime\'s default and CDI is not used: GPU pods '
                                     'must set runtimeClassName: nvidia (the collection\'s stacks do for their own pods)',
}


def health_notes(v: Mapping[str, Any] | None) -> list[str]:
    """The report's notes for a node's verdict (doctor findings that concern the pods placed on it)."""
    if not v or not v.get('ran'):
        return []
    ids = (v.get('critical') or []) + (v.get('warning') or []) + (v.get('info') or [])
    return [REPORT_NOTES[i] for i in ids if i in REPORT_NOTES]


def health_by_node(hosts: Iterable[str] | None, hostvars: Any) -> dict[str, dict[str, Any]]:
    """{Kubernetes node name: verdict} for the hosts that carry a verdict (gpuops_doctor_verdict); the node name is
    gpu_node_labels_node_name, else the inventory name, as the pool planning names nodes."""
    out: dict[str, dict[str, Any]] = {}
    for h in hosts or []:
        try:
            hv = hostvars[h]
        except (KeyError, TypeError):
            continue
        try:
            v = hv['gpuops_doctor_verdict']
        except (KeyError, TypeError):
            continue
        if not isinstance(v, Mapping):
            continue
        try:
            node = hv['gpu_node_labels_node_name']
        except (KeyError, TypeError):
            node = h
        out[str(node)] = dict(v)
    return out


def apply_health(report: Report, node_health: Mapping[str, Mapping[str, Any]] | None) -> Report:
    """Each node's health cell (gpu_doctor_gate.health_column) from its doctor verdict (the host fact
    gpuops_doctor_verdict, keyed by Kubernetes node name), and the doctor's notes that concern the node's pods.
    Nodes without a verdict read '-' (not diagnosed); a report without node_health has no health column."""
    if node_health is None:
        return report
    for n in report['nodes']:
        v = node_health.get(n['name'])
        n['health'] = health_column(v)
        if v and v.get('ran') and (v.get('critical') or v.get('warning')):
            n['health_findings'] = list(v.get('critical') or []) + list(v.get('warning') or [])
        for note in health_notes(v):
            n['notes'].append('doctor: %s' % note)
            report['notes'].append('node %s: %s' % (n['name'], note))
    return report
