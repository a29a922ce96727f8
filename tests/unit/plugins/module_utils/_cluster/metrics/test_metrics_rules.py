# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The alert rules from the doctor's knowledge (module_utils _cluster/metrics/rules.py). Upstream's promtool and
Prometheus prove them in lab/tests/oracles/test_prometheus_rules.py."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dcgm, rules
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_health as health
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as doctor
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor.gpu_doctor_remediation import REBOOT_XIDS


def _rules(options=None):
    doc = rules.alert_rules(options)
    assert list(doc) == ['groups'] and len(doc['groups']) == 1
    return doc['groups'][0]['rules']


def _by(rs, alert):
    return [r for r in rs if r['alert'] == alert]


def test_counters_and_labels_are_the_shared_constant():
    assert dcgm.COUNTERS[0] == 'DCGM_FI_DEV_XID_ERRORS' and len(dcgm.COUNTERS) == 14 == len(set(dcgm.COUNTERS))
    assert 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS' in dcgm.COUNTERS
    assert dcgm.LABELS == ('gpu', 'UUID', 'device', 'modelName', 'Hostname', 'pod', 'namespace', 'container',
                           'GPU_I_PROFILE', 'GPU_I_ID')


def test_every_expression_names_only_known_metrics():
    known = set(dcgm.COUNTERS) | set(rules.HAMI_METRICS)
    rs = _rules({'selector': 'job="dcgm-exporter"', 'hami_selector': 'job="hami"', 'share_tolerance': 0.1})
    assert rs
    for r in rs:
        names = rules.expr_metrics(r['expr'])
        assert names, r['expr']
        assert names <= known, (r['alert'], names - known)
        if r['alert'] == 'GpuOpsGpuShareExceeded':
            assert names == set(rules.HAMI_METRICS)
        else:
            assert names <= set(dcgm.COUNTERS)


def test_every_alert_has_its_shape():
    rs = _rules()
    names = sorted(set(r['alert'] for r in rs))
    assert names == ['GpuOpsClocksThrottled', 'GpuOpsEccUncorrectable', 'GpuOpsGpuAllocatedIdle',
                     'GpuOpsGpuShareExceeded', 'GpuOpsRowRemapFailure', 'GpuOpsRowRemapPending', 'GpuOpsXidCritical',
                     'GpuOpsXidUnknown']
    for r in rs:
        assert r['alert'].startswith('GpuOps')
        assert r['labels']['severity'] in ('critical', 'warning')
        assert set(r['annotations']) == {'summary', 'description'}
        if r['alert'] != 'GpuOpsGpuShareExceeded':
            for label in ('$labels.Hostname', '$labels.gpu', '$labels.UUID'):
                assert label in r['annotations']['summary'] and label in r['annotations']['description'], r
        else:
            assert '$labels.pod' in r['annotations']['description']


def test_ALR_01_xid_rules_follow_the_doctors_table():
    rs = _rules()
    crit = sorted(x for x, v in doctor.XID_GUIDE.items() if v[0] == 'critical')
    xr = _by(rs, 'GpuOpsXidCritical')
    assert [int(r['labels']['xid']) for r in xr] == crit
    for r in xr:
        xid = int(r['labels']['xid'])
        assert r['expr'] == 'DCGM_FI_DEV_XID_ERRORS == %d' % xid
        assert doctor.XID_GUIDE[xid][2] in r['annotations']['description'].lower() or \
            doctor.XID_GUIDE[xid][2][1:] in r['annotations']['description']
        # the reboot Xids of the doctor's remediation are the rules' action=reboot ones
        assert (r['labels']['action'] == 'reboot') == (xid in REBOOT_XIDS), r
        assert r['labels']['action'] in ('reboot', 'reset')
    unknown = _by(rs, 'GpuOpsXidUnknown')[0]
    assert unknown['labels']['severity'] == doctor.XID_UNKNOWN[0]
    for x in list(doctor.XID_GUIDE) + [doctor.XID_154]:
        assert ' != %d' % x in unknown['expr']


def test_changing_the_doctors_tables_changes_the_rules(monkeypatch):
    guide = dict(health.XID_GUIDE)
    guide[31] = ('critical', 'a page fault the doctor now fears', 'reset the GPU now')
    del guide[48]
    guide[200] = ('warning', 'a new warning', 'watch it')
    monkeypatch.setattr(health, 'XID_GUIDE', guide)
    monkeypatch.setattr(health, 'SEVERE_CLOCK_REASONS', ('sw_power_cap',))
    rs = _rules()
    xids = [r['labels']['xid'] for r in _by(rs, 'GpuOpsXidCritical')]
    assert '31' in xids and '48' not in xids
    assert 'a page fault the doctor now fears' in _by(rs, 'GpuOpsXidCritical')[0]['annotations']['summary']
    unknown = _by(rs, 'GpuOpsXidUnknown')[0]['expr']
    assert ' != 200' in unknown and ' != 48' not in unknown
    th = _by(rs, 'GpuOpsClocksThrottled')
    assert [r['labels']['reason'] for r in th] == ['sw_power_cap']
    assert th[0]['expr'] == 'floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS / 4) % 2 == 1'


def test_ALR_03_remediation_words_are_the_doctors(monkeypatch):
    rs = _rules()
    ecc = _by(rs, 'GpuOpsEccUncorrectable')[0]
    found = doctor.check_ecc({'gpus': [{'health': {'ecc_uncorrected_volatile': 1}}]}, {})[0]
    assert found['remediation'] in ecc['annotations']['description']
    assert ecc['labels']['severity'] == found['severity'] == 'critical'
    assert _by(rs, 'GpuOpsRowRemapFailure')[0]['labels'] == {'severity': 'critical', 'action': 'rma'}
    assert _by(rs, 'GpuOpsRowRemapPending')[0]['labels'] == {'severity': 'warning', 'action': 'reset'}

    # the doctor's own findings carry the same words (gpu_health.ADVICE is their one place)
    fail_found = doctor.check_memory_repair({'gpus': [{'health': {'remapped_rows': {
        'correctable': 0, 'uncorrectable': 1, 'failure': True}}}]}, {})[0]
    assert fail_found['remediation'] in _by(rs, 'GpuOpsRowRemapFailure')[0]['annotations']['description']
    throttle_found = doctor.check_throttle({'gpus': [{'health': {'clocks_event_reasons': ['hw_slowdown']}}]}, {})[0]
    for r in _by(rs, 'GpuOpsClocksThrottled'):
        assert throttle_found['remediation'] in r['annotations']['description']
        assert r['labels']['severity'] == throttle_found['severity']

    louder = dict((k, (sev, fix + ' Call the on-call engineer.')) for k, (sev, fix) in health.ADVICE.items())
    monkeypatch.setattr(health, 'ADVICE', louder)
    for r in _rules():
        if r['alert'] in ('GpuOpsEccUncorrectable', 'GpuOpsRowRemapFailure', 'GpuOpsRowRemapPending',
                          'GpuOpsClocksThrottled'):
            assert 'Call the on-call engineer.' in r['annotations']['description'], r['alert']


def test_ALR_06_throttle_bits_are_nvml_h():
    # nvml.h: nvmlClocksThrottleReasonHwSlowdown 0x8, nvmlClocksEventReasonSwThermalSlowdown 0x20,
    # nvmlClocksThrottleReasonHwThermalSlowdown 0x40, nvmlClocksThrottleReasonHwPowerBrakeSlowdown 0x80
    assert dict(rules.severe_clock_bits()) == {'hw_slowdown': 0x8, 'sw_thermal_slowdown': 0x20,
                                               'hw_thermal_slowdown': 0x40, 'hw_power_brake_slowdown': 0x80}


def test_unknown_clock_reason_is_refused(monkeypatch):
    monkeypatch.setattr(health, 'SEVERE_CLOCK_REASONS', ('hw_slowdown', 'melting'))
    with pytest.raises(rules.RulesError, match='melting'):
        rules.alert_rules()


def test_options_shape_the_rules():
    rs = _rules({'selector': 'job="dcgm-exporter", namespace=~"gpu-.*",', 'idle_for': '2h', 'throttle_for': '10m',
                 'xid_for': '1m', 'extra_labels': {'team': 'gpu'}, 'group': 'g', 'hami': False,
                 'row_remap_window': '30m'})
    assert not _by(rs, 'GpuOpsGpuShareExceeded')
    for r in rs:
        assert r['labels']['team'] == 'gpu'
        assert 'job="dcgm-exporter", namespace=~"gpu-.*"' in r['expr']
    assert _by(rs, 'GpuOpsGpuAllocatedIdle')[0]['for'] == '2h'
    assert 'pod!=""' in _by(rs, 'GpuOpsGpuAllocatedIdle')[0]['expr']
    assert _by(rs, 'GpuOpsClocksThrottled')[0]['for'] == '10m'
    assert _by(rs, 'GpuOpsXidCritical')[0]['for'] == '1m'
    assert 'for' not in _by(rs, 'GpuOpsEccUncorrectable')[0]
    assert '[30m]' in _by(rs, 'GpuOpsRowRemapPending')[0]['expr']
    assert rules.alert_rules({'group': 'g'})['groups'][0]['name'] == 'g'
    share = _by(_rules({'share_tolerance': 0.05}), 'GpuOpsGpuShareExceeded')[0]
    assert share['expr'].endswith('(hami_vgpu_memory_limit_bytes > 0) * 1.05')
    assert _by(_rules(), 'GpuOpsGpuShareExceeded')[0]['expr'].endswith('(hami_vgpu_memory_limit_bytes > 0)')


def test_defaults_are_not_changed_by_a_call():
    rules.alert_rules({'extra_labels': {'a': 'b'}})
    assert rules.DEFAULTS['extra_labels'] == {}
    assert 'a' not in _rules()[0]['labels']


@pytest.mark.parametrize('options, words', [
    ({'idle_for': '1 hour'}, ["idle_for: '1 hour' is not a Prometheus duration", 'allowed']),
    ({'idle_for': ''}, ['idle_for', 'allowed']),
    ({'throttle_for': 5}, ['throttle_for: 5 is not a Prometheus duration']),
    ({'row_remap_window': '0s'}, ['row_remap_window', 'above 0']),
    ({'selector': 'job=dcgm'}, ["selector: 'job=dcgm' is not a list of PromQL label matchers", 'allowed']),
    ({'selector': '}) or vector(1) #'}, ['selector']),
    ({'hami_selector': 'job="a" or'}, ['hami_selector']),
    ({'extra_labels': {'severity': 'page'}}, ["extra_labels: 'severity' is set by the rules", 'allowed']),
    ({'extra_labels': {'bad-name': 'x'}}, ["extra_labels: 'bad-name' is not a Prometheus label name"]),
    ({'extra_labels': {'__x': 'x'}}, ['not starting with __']),
    ({'extra_labels': {'team': 3}}, ['extra_labels.team: 3 is not a string']),
    ({'extra_labels': ['team']}, ['extra_labels', 'is not a dict']),
    ({'share_tolerance': -0.1}, ['share_tolerance: -0.1', 'from 0 to 10']),
    ({'share_tolerance': 'a'}, ['share_tolerance']),
    ({'share_tolerance': True}, ['share_tolerance']),
    ({'hami': 'yes'}, ["hami: 'yes' is not a boolean"]),
    ({'group': ''}, ['group']),
    ({'idle_after': '1h'}, ['unknown key(s) idle_after', 'allowed keys:', 'idle_for']),
    ('idle_for=1h', ['options', 'not a dict']),
])
def test_bad_options_are_refused(options, words):
    with pytest.raises(rules.RulesError) as e:
        rules.alert_rules(options)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_expr_metrics():
    assert rules.expr_metrics('increase(A{job="x", pod!="on(y)"}[5m]) > 0 or floor(B / 2) % 2 == 1 '
                              'unless on(Hostname, gpu) C') == {'A', 'B', 'C'}


def test_a_metric_missing_from_the_counters_is_refused(monkeypatch):
    monkeypatch.setattr(dcgm, 'COUNTERS', tuple(c for c in dcgm.COUNTERS if c != 'DCGM_FI_DEV_ROW_REMAP_FAILURE'))
    with pytest.raises(rules.RulesError, match='GpuOpsRowRemapFailure reads DCGM_FI_DEV_ROW_REMAP_FAILURE, not in'):
        rules.alert_rules()


def test_annotations_name_only_labels_the_series_carry():
    import re
    for r in _rules():
        used = set(re.findall(r'\$labels\.(\w+)', r['annotations']['summary'] + r['annotations']['description']))
        allowed = set(rules.HAMI_LABELS) if r['alert'] == 'GpuOpsGpuShareExceeded' else set(dcgm.LABELS)
        assert used and used <= allowed, (r['alert'], used - allowed)
