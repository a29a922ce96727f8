# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_gate as gate
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import sharing_pools

CRITICAL = {'findings': [{'id': 'nvidia_toolkit_missing', 'severity': 'critical'},
                         {'id': 'gpu_passthrough', 'severity': 'info'}]}
WARNING = {'findings': [{'id': 'row_remap_pending', 'severity': 'warning'}]}


def test_enforce_gates_a_critical_node():
    v = gate.verdict(CRITICAL)
    assert v['gated'] is True and v['critical'] == ['nvidia_toolkit_missing']
    assert 'left out of its pool' in v['message']
    assert gate.health_column(v) == 'CRITICAL (gated)'


def test_warn_reports_only_and_warnings_never_gate():
    v = gate.verdict(CRITICAL, 'warn')
    assert v['gated'] is False and 'kept in its pool (gpuops_doctor_gate: warn)' in v['message']
    assert gate.verdict(WARNING)['gated'] is False
    assert gate.health_column(gate.verdict(WARNING)) == 'warning'
    assert gate.health_column(gate.verdict({'findings': []})) == 'ok'


def test_off_or_skipped_is_not_diagnosed():
    v = gate.verdict({'skipped': True, 'changed': False}, 'off')
    assert (v['ran'], v['gated']) == (False, False)
    assert gate.health_column(v) == '-'


def test_bad_gate_value_names_the_variable():
    with pytest.raises(gate.GateError, match="gpuops_doctor_gate is 'strict'; allowed: enforce, warn, off"):
        gate.verdict(CRITICAL, 'strict')


def test_sharing_pools_leave_gated_nodes_out_of_the_labels():
    groups = {'gpu_nodes': ['n1', 'n2']}
    hostvars = {'n1': {'group_names': ['gpu_nodes'], 'gpuops_sharing_strategy': 'time-slicing',
                       'gpuops_doctor_verdict': gate.verdict(CRITICAL)},
                'n2': {'group_names': ['gpu_nodes'], 'gpuops_sharing_strategy': 'time-slicing',
                       'gpuops_doctor_verdict': gate.verdict(CRITICAL, 'warn')}}
    plan = sharing_pools(groups, hostvars)
    assert plan['label_pools'] == [{'name': 'gpu-nodes', 'strategy': 'time-slicing', 'nodes': ['n2']}]
    assert [g['host'] for g in plan['gated']] == ['n1']
    assert plan['gated'][0]['message'].startswith('n1 left out of pool gpu-nodes by the doctor: 1 critical finding(s)')
    # without a verdict (the doctor did not run in this run) nobody is gated
    del hostvars['n1']['gpuops_doctor_verdict']
    assert sharing_pools(groups, hostvars)['label_pools'][0]['nodes'] == ['n1', 'n2']


def test_health_by_node_keys_the_verdicts_by_kubernetes_node_name():
    """The report's node_health (filter doctor_health): verdicts by node name (gpu_node_labels_node_name, else the
    inventory name); hosts without a verdict are left out; info ids are kept for the report's notes."""
    from ansible_collections.gpuops.k8s_gpu.plugins.filter.doctor_health import doctor_health
    crit = gate.verdict(CRITICAL)
    hostvars = {'h1': {'gpuops_doctor_verdict': crit, 'gpu_node_labels_node_name': 'node-1'},
                'h2': {'gpuops_doctor_verdict': gate.verdict(WARNING)},
                'h3': {}}
    out = doctor_health(['h1', 'h2', 'h3', 'absent'], hostvars)
    assert sorted(out) == ['h2', 'node-1']
    assert out['node-1']['info'] == ['gpu_passthrough'] and gate.health_column(out['node-1']) == 'CRITICAL (gated)'
    assert gate.health_notes(out['node-1']) == []
    v = gate.verdict({'findings': [{'id': 'runtime_class_nvidia_required', 'severity': 'info'}]})
    assert 'runtimeClassName: nvidia' in gate.health_notes(v)[0]
    assert gate.health_notes(gate.verdict(None)) == []
