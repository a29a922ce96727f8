# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's detection (issue #41): the doctor's findings per GPU UUID and the repair they need, with
its refusals (gpu_doctor's ``remediation`` return value)."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_remediation as plan

U0, U1 = 'GPU-00000000-0000-4000-8000-000000000000', 'GPU-11111111-1111-4111-8111-111111111111'


def gpu(index, uuid, **health):
    return {'index': index, 'uuid': uuid, 'name': 'NVIDIA H100 80GB HBM3', 'pci_bus_id': '00000000:%02X:00.0' % (7 + index),
            'health': dict({'recovery_action': 'none', 'virtualization_mode': 'none'}, **health)}


def facts(*gpus):
    return {'gpus': list(gpus), 'nvml': {'status': 'ok', 'xid_events': []}, 'node': {}}


# ------------------------------------------------------------------------------------------------ detect
def test_REM_07_findings_belong_to_the_gpu_they_were_seen_on():
    f = facts(gpu(0, U0, ecc_uncorrected_volatile=2, ecc_uncorrected_aggregate=2), gpu(1, U1))
    extra = {'kernel_xids': [{'pci': '0000:08:00', 'xid': 79, 'text': 'GPU has fallen off the bus.'},
                             {'pci': '0000:07:00', 'xid': 13, 'text': 'Graphics Exception'}]}
    out = plan.gpu_findings(f, extra)
    assert sorted(out) == [U0, U1]
    assert [x['id'] for x in out[U0]] == ['ecc_uncorrectable']          # Xid 13 is info: not a trigger
    assert [x['id'] for x in out[U1]] == ['xid_79']
    # NVML events by index
    f['nvml']['xid_events'] = [{'gpu': 1, 'xid': 48}]
    assert [x['id'] for x in plan.gpu_findings(f, {})[U1]] == ['xid_48']


def test_REM_07_healthy_fleet_and_severity():
    f = facts(gpu(0, U0), gpu(1, U1, remapped_rows={'correctable': 0, 'uncorrectable': 1, 'pending': True,
                                                    'failure': False}))
    assert plan.gpu_findings(f, {}) == {}                                # row remap pending is a warning
    assert [x['id'] for x in plan.gpu_findings(f, {}, 'warning')[U1]] == ['row_remap_pending']
    assert plan.assess(facts(gpu(0, U0)), {}) == {}
    with pytest.raises(plan.PlanError, match="severity: 'fatal' is not one of critical, warning, info"):
        plan.gpu_findings(f, {}, 'fatal')


# ------------------------------------------------------------------------------------------------ repair
@pytest.mark.parametrize('health,extra,action,allowed', [
    ({'ecc_uncorrected_volatile': 1, 'ecc_uncorrected_aggregate': 1}, {}, 'reset', True),
    ({'recovery_action': 'gpu_reset'}, {}, 'reset', True),
    ({'recovery_action': 'node_reboot'}, {}, 'reboot', False),
    ({}, {'kernel_xids': [{'pci': '0000:07:00', 'xid': 79, 'text': 'GPU has fallen off the bus.'}]}, 'reboot', False),
    ({'remapped_rows': {'correctable': 0, 'uncorrectable': 3, 'pending': False, 'failure': True}}, {}, 'rma', False),
    ({'fabric': {'state': 'not_started'}}, {}, 'manual', False),
    ({'ecc_uncorrected_volatile': 1, 'virtualization_mode': 'passthrough'}, {}, 'vm_reboot', False),
    ({'ecc_uncorrected_volatile': 1, 'virtualization_mode': 'vgpu'}, {}, 'host', False),
])
def test_REM_06_REM_07_repair_by_the_findings_recovery_action(health, extra, action, allowed):
    g = gpu(0, U0, **health)
    out = plan.assess(facts(g), extra)
    assert out[U0]['repair']['action'] == action, out
    assert out[U0]['repair']['allowed'] is allowed


def test_REM_06_reboot_only_when_asked_and_the_worst_action_wins():
    g = gpu(0, U0, ecc_uncorrected_volatile=1, recovery_action='node_reboot')
    found = plan.gpu_findings(facts(g), {})[U0]
    r = plan.repair(found, g)
    assert r['action'] == 'reboot' and not r['allowed'] and r['why'] == ['gpu_recovery_action']
    assert plan.repair(found, g, allow_reboot=True)['allowed'] is True
    mig = dict(gpu(0, U0, ecc_uncorrected_volatile=1), mig_current=True)
    assert 'MIG is enabled' in plan.repair(plan.gpu_findings(facts(mig), {})[U0], mig)['note']
