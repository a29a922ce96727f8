# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_gate as gate
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.cluster_plan import sharing_pools

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
