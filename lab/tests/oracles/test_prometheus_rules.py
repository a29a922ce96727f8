"""Upstream's Prometheus as the oracle of the collection's alert rules (module_utils _cluster/metrics/rules.py,
docs/observability.md).

Prometheus and promtool are upstream's own (github.com/prometheus/prometheus v0.316.0, Prometheus 3.16.0, built by
lab/go/build.sh prometheus; a set that cannot be built fails the test).

1. `promtool check rules` accepts the rendered rule file and refuses one with a broken expression (the oracle can fail).
2. `promtool test rules` with a unit-test file made here: for every alert, input series named and labelled as
   dcgm-exporter 4.5.3-4.8.2 emits them (gpu, UUID, pci_bus_id, device, modelName, Hostname, pod, namespace,
   container; HAMi's vGPU monitor's for the share alert) that fire it at the expected time with the expected labels
   and annotations, and series that must not fire it (a non-fatal Xid, a throttle bit outside the doctor's severe
   set, an idle GPU no pod holds, ...).
3. Prometheus itself loads a configuration naming the rule file and reports every rule healthy (/api/v1/rules).
4. The clock event reason bits the rules test are nvml.h's (the header the lab's NVML simulator builds on).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/oracles/test_prometheus_rules.py
"""
import glob
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest
import yaml

from conftest import lab_collections_path
from gpu_kwok_nodes import real  # lab/kube/real.py
from oracle_util import ROOT, go_set, stop_process

VERSION = '3.16.0'
SELECTOR = 'job="dcgm-exporter"'
HAMI_SELECTOR = 'job="hami"'
OPTIONS = {'selector': SELECTOR, 'hami_selector': HAMI_SELECTOR, 'extra_labels': {'team': 'gpu'}}


def _collection():
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dcgm, rules
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_health
    return dcgm, rules, gpu_health, gpu_health


@pytest.fixture(scope='module')
def progs():
    d = go_set('prometheus')
    out = {}
    for name in ('prometheus', 'promtool'):
        path = os.path.join(d, name)
        assert os.access(path, os.X_OK), 'lab/go/build.sh prometheus made no %s in %s' % (name, d)
        ver = subprocess.run([path, '--version'], capture_output=True, text=True, timeout=30)
        assert VERSION in ver.stdout + ver.stderr, ver.stdout + ver.stderr
        out[name] = path
    return out


@pytest.fixture(scope='module')
def rule_doc():
    return _collection()[1].alert_rules(OPTIONS)


@pytest.fixture(scope='module')
def rule_file(tmp_path_factory, rule_doc):
    path = tmp_path_factory.mktemp('rules') / 'gpuops-rules.yml'
    path.write_text(yaml.safe_dump(rule_doc, sort_keys=False, width=1000))
    return str(path)


def _run(cmd, cwd=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)


# --------------------------------------------------------------------------------------------------- check rules
def test_promtool_check_rules(progs, rule_file, rule_doc):
    proc = _run([progs['promtool'], 'check', 'rules', rule_file])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'SUCCESS: %d rules found' % len(rule_doc['groups'][0]['rules']) in proc.stdout + proc.stderr


def test_promtool_refuses_a_broken_expression(progs, rule_doc, tmp_path):
    broken = json.loads(json.dumps(rule_doc))
    broken['groups'][0]['rules'][0]['expr'] = 'DCGM_FI_DEV_XID_ERRORS{%s} ==' % SELECTOR
    path = tmp_path / 'broken.yml'
    path.write_text(yaml.safe_dump(broken, sort_keys=False, width=1000))
    proc = _run([progs['promtool'], 'check', 'rules', str(path)])
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert 'FAILED' in proc.stdout + proc.stderr and 'parse error' in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------------- test rules
GPU0 = {'gpu': '0', 'UUID': 'GPU-5c3e0d4a-1111-2222-3333-444455556666', 'pci_bus_id': '00000000:18:00.0',
        'device': 'nvidia0', 'modelName': 'NVIDIA H100 80GB HBM3', 'Hostname': 'gpu-node-1', 'job': 'dcgm-exporter'}
GPU1 = dict(GPU0, gpu='1', UUID='GPU-5c3e0d4a-1111-2222-3333-777788889999', pci_bus_id='00000000:2A:00.0',
            device='nvidia1')
POD = {'pod': 'train-0', 'namespace': 'ml', 'container': 'trainer'}
# a container's series as HAMi v2.10.0's vGPU monitor labels it (zone: its collector's wrapping registerer; job: ours)
HAMI = {'namespace': 'ml', 'pod': 'infer-0', 'container': 'server', 'vdevice_index': '0',
        'device_uuid': GPU0['UUID'], 'zone': 'vGPU', 'job': 'hami'}


def _series(name, labels, values):
    return {'series': '%s{%s}' % (name, ', '.join('%s="%s"' % kv for kv in sorted(labels.items()))), 'values': values}


def _render(text, labels, value):
    """The annotation Prometheus renders: {{ $labels.X }} and {{ $value }} (a whole number prints as one)."""
    text = re.sub(r'\{\{\s*\$labels\.(\w+)\s*\}\}', lambda m: labels.get(m.group(1), ''), text)
    return re.sub(r'\{\{\s*\$value\s*\}\}', value, text)


def _expect(rule, series_labels, value=''):
    labels = dict((k, v) for k, v in series_labels.items())
    labels.update(rule['labels'])
    return {'exp_labels': labels,
            'exp_annotations': dict((k, _render(v, labels, value)) for k, v in rule['annotations'].items())}


def _case(name, series, evals):
    """One test group of promtool's unit-test file; evals: [(time, alertname, [expected alerts])]."""
    return {'name': name, 'interval': '1m', 'input_series': series,
            'alert_rule_test': [{'eval_time': t, 'alertname': a, 'exp_alerts': exp} for t, a, exp in evals]}


def _cases(rule_doc):
    """{alert: [test groups]}: the groups that fire (or must not fire) that alert."""
    dummy, rules, doctor, dummy2 = _collection()
    rs = rule_doc['groups'][0]['rules']

    def one(alert, **labels):
        found = [r for r in rs if r['alert'] == alert and all(r['labels'].get(k) == v for k, v in labels.items())]
        assert len(found) == 1, (alert, labels, found)
        return found[0]

    g0p = dict(GPU0, **POD)
    cases = {}

    def add(alert, case):
        cases.setdefault(alert, []).append(case)
    crit, other = rules.xid_split()
    for xid in crit:
        add('GpuOpsXidCritical', _case('fatal Xid %d' % xid, [_series('DCGM_FI_DEV_XID_ERRORS', g0p, '0 0 %dx10' % xid)], [
            ('1m', 'GpuOpsXidCritical', []),
            ('5m', 'GpuOpsXidCritical', [_expect(one('GpuOpsXidCritical', xid=str(xid)), g0p)]),
            ('5m', 'GpuOpsXidUnknown', [])]))
    for xid in other + [doctor.XID_154, 0]:
        add('GpuOpsXidCritical', _case('Xid %d is not fatal' % xid, [_series('DCGM_FI_DEV_XID_ERRORS', GPU0, '%dx10' % xid)], [
            ('5m', 'GpuOpsXidCritical', []), ('5m', 'GpuOpsXidUnknown', [])]))
    add('GpuOpsXidUnknown', _case('an Xid the doctor does not know', [_series('DCGM_FI_DEV_XID_ERRORS', GPU0, '0 0 999x10')], [
        ('5m', 'GpuOpsXidUnknown', [_expect(one('GpuOpsXidUnknown'), GPU0, '999')]),
        ('5m', 'GpuOpsXidCritical', [])]))
    add('GpuOpsEccUncorrectable', _case('uncorrectable ECC', [
        _series('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', GPU0, '0 0 2x10'),
        _series('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', GPU1, '0x12'),
        _series('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL', GPU1, '0 5 10 20x10')], [
        ('1m', 'GpuOpsEccUncorrectable', []),
        ('5m', 'GpuOpsEccUncorrectable', [_expect(one('GpuOpsEccUncorrectable'), GPU0, '2')])]))
    add('GpuOpsRowRemapFailure', _case('row remapping failure', [
        _series('DCGM_FI_DEV_ROW_REMAP_FAILURE', GPU0, '0 0 1x10'),
        _series('DCGM_FI_DEV_ROW_REMAP_FAILURE', GPU1, '0x12')], [
        ('5m', 'GpuOpsRowRemapFailure', [_expect(one('GpuOpsRowRemapFailure'), GPU0)])]))
    add('GpuOpsRowRemapPending', _case('uncorrectable remapped rows pending', [
        _series('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS', GPU0, '0 0 1x10'),
        _series('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS', GPU1, '3x100'),      # old remaps, nothing new
        _series('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS', GPU1, '0 1 2 3x100')], [
        ('5m', 'GpuOpsRowRemapPending', [_expect(one('GpuOpsRowRemapPending'), GPU0)]),
        ('90m', 'GpuOpsRowRemapPending', [])]))
    severe = rules.severe_clock_bits()
    for name, bit in severe:
        add('GpuOpsClocksThrottled', _case('clocks throttled: %s' % name, [
            _series('DCGM_FI_DEV_CLOCKS_EVENT_REASONS', GPU0, '0 0 %dx20' % (bit | 0x1))], [
            ('4m', 'GpuOpsClocksThrottled', []),   # pending: throttle_for 5m
            ('9m', 'GpuOpsClocksThrottled', [_expect(one('GpuOpsClocksThrottled', reason=name), GPU0)])]))
    (n1, b1), (n2, b2) = severe[0], severe[1]
    add('GpuOpsClocksThrottled', _case('two severe reasons at once', [
        _series('DCGM_FI_DEV_CLOCKS_EVENT_REASONS', GPU0, '%dx20' % (b1 | b2))], [
        ('9m', 'GpuOpsClocksThrottled', [_expect(one('GpuOpsClocksThrottled', reason=n1), GPU0),
                                         _expect(one('GpuOpsClocksThrottled', reason=n2), GPU0)])]))
    mild = sum(bit for bit, name in _collection()[3].CLOCK_EVENT_REASONS if name not in doctor.SEVERE_CLOCK_REASONS)
    add('GpuOpsClocksThrottled', _case('clock event reasons outside the severe set', [
        _series('DCGM_FI_DEV_CLOCKS_EVENT_REASONS', GPU0, '%dx20' % mild)], [('9m', 'GpuOpsClocksThrottled', [])]))
    g1p = dict(GPU1, pod='train-1', namespace='ml', container='trainer')
    idle = one('GpuOpsGpuAllocatedIdle')
    add('GpuOpsGpuAllocatedIdle', _case('allocated and idle', [
        _series('DCGM_FI_PROF_GR_ENGINE_ACTIVE', g0p, '0x80'),                  # held, idle: fires
        _series('DCGM_FI_DEV_GPU_UTIL', g0p, '0x80'),
        _series('DCGM_FI_PROF_GR_ENGINE_ACTIVE', g1p, '0.5x80'),                # held, busy by the engine metric:
        _series('DCGM_FI_DEV_GPU_UTIL', g1p, '0x80'),                           # GPU_UTIL 0 does not count
        _series('DCGM_FI_PROF_GR_ENGINE_ACTIVE', dict(GPU0, gpu='2', UUID='GPU-2', device='nvidia2'), '0x80'),  # no pod
    ], [('50m', 'GpuOpsGpuAllocatedIdle', []),
        ('65m', 'GpuOpsGpuAllocatedIdle', [_expect(idle, g0p)])]))
    add('GpuOpsGpuAllocatedIdle', _case('allocated and idle, no profiling metrics (GPU_UTIL)', [
        _series('DCGM_FI_DEV_GPU_UTIL', g0p, '0x80'),
        _series('DCGM_FI_DEV_GPU_UTIL', g1p, '0x30 40x50'),                     # busy again after 30 min
        _series('DCGM_FI_DEV_GPU_UTIL', GPU1, '0x80')], [                     # no pod holds it
        ('65m', 'GpuOpsGpuAllocatedIdle', [_expect(idle, g0p)])]))
    share = one('GpuOpsGpuShareExceeded')
    other_pod = dict(HAMI, pod='infer-1')
    unknown_share = dict(HAMI, pod='infer-2')
    add('GpuOpsGpuShareExceeded', _case('beyond the HAMi share', [
        _series('hami_vgpu_memory_used_bytes', HAMI, '500 2000x20'),
        _series('hami_vgpu_memory_limit_bytes', HAMI, '1000x21'),
        _series('hami_vgpu_memory_used_bytes', other_pod, '900x20'),
        _series('hami_vgpu_memory_limit_bytes', other_pod, '1000x20'),
        _series('hami_vgpu_memory_used_bytes', unknown_share, '5000x20'),
        _series('hami_vgpu_memory_limit_bytes', unknown_share, '0x20')], [
        ('3m', 'GpuOpsGpuShareExceeded', []),
        ('8m', 'GpuOpsGpuShareExceeded', [_expect(share, HAMI, '2000')])]))
    return cases


def _promtool_test(progs, rule_file, cases, tmp_path, name='gpuops-rules-test.yml'):
    doc = {'rule_files': [rule_file], 'evaluation_interval': '1m', 'tests': cases}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return _run([progs['promtool'], 'test', 'rules', str(path)])


def _fires(progs, rule_file, rule_doc, tmp_path, alert):
    """promtool test rules passes the cases of alert; they expect every rule of that alert to fire at least once."""
    cases = _cases(rule_doc)[alert]
    rules_of = [r for r in rule_doc['groups'][0]['rules'] if r['alert'] == alert]
    fired = set()
    for c in cases:
        for t in c['alert_rule_test']:
            assert t['alertname'] == alert or not t['exp_alerts'], (c['name'], t['alertname'])
            for a in (t['exp_alerts'] if t['alertname'] == alert else []):
                fired.add(tuple(sorted((k, v) for k, v in a['exp_labels'].items() if k in ('xid', 'reason'))))
    assert len(fired) == len(rules_of), (alert, fired)
    proc = _promtool_test(progs, rule_file, cases, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert 'SUCCESS' in proc.stdout + proc.stderr


def test_every_alert_has_its_cases(rule_doc):
    assert sorted(_cases(rule_doc)) == sorted(set(r['alert'] for r in rule_doc['groups'][0]['rules']))


def test_ALR_01_fatal_xids_fire_and_the_others_do_not(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsXidCritical')


def test_ALR_02_an_xid_the_doctor_does_not_know_fires(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsXidUnknown')


def test_ALR_03_uncorrectable_ecc_fires(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsEccUncorrectable')


def test_ALR_04_row_remap_failure_fires(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsRowRemapFailure')


def test_ALR_05_row_remap_pending_fires(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsRowRemapPending')


def test_ALR_06_severe_clock_reasons_fire(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsClocksThrottled')


def test_ALR_07_allocated_idle_gpu_fires(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsGpuAllocatedIdle')


def test_ALR_08_beyond_the_hami_share_fires(progs, rule_file, rule_doc, tmp_path):
    _fires(progs, rule_file, rule_doc, tmp_path, 'GpuOpsGpuShareExceeded')


def test_STKM_02_the_share_case_uses_series_as_hami_names_them(rule_doc):
    """The ALR-08 case above drives the alert with the names and labels HAMi v2.10.0's vGPU monitor serves
    (metrics/stack_metrics, STKM-02), not with names of our own."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import stack_metrics
    case = _cases(rule_doc)['GpuOpsGpuShareExceeded'][0]
    names = {re.match(r'^([A-Za-z_:][A-Za-z0-9_:]*)', s['series']).group(1) for s in case['input_series']}
    assert names == {'hami_vgpu_memory_used_bytes', 'hami_vgpu_memory_limit_bytes'}
    for name in names:
        assert set(HAMI) - {'job'} == set(stack_metrics.HAMI_MONITOR_METRICS[name]) | {stack_metrics.HAMI_ZONE[0]}
    assert HAMI[stack_metrics.HAMI_ZONE[0]] == stack_metrics.HAMI_ZONE[1]


def test_promtool_test_rules_can_fail(progs, rule_file, rule_doc, tmp_path):
    """A case that expects the wrong labels fails: the unit-test run above is a real check."""
    cases = _cases(rule_doc)['GpuOpsXidCritical'][:1]
    cases[0]['alert_rule_test'][1]['exp_alerts'][0]['exp_labels']['severity'] = 'warning'
    proc = _promtool_test(progs, rule_file, cases, tmp_path, 'wrong.yml')
    assert proc.returncode != 0 and 'FAILED' in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------- Prometheus loads them
def _get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode()


def test_prometheus_loads_the_rules(progs, rule_file, rule_doc, tmp_path):
    cfg = tmp_path / 'prometheus.yml'
    cfg.write_text(yaml.safe_dump({'global': {'evaluation_interval': '1s'}, 'rule_files': [rule_file]}))
    port = real.free_port()   # below the ephemeral range, as the lab's daemons listen (lab/kube/real.py)
    base = 'http://127.0.0.1:%d' % port
    log = open(tmp_path / 'prometheus.log', 'w')
    proc = subprocess.Popen([progs['prometheus'], '--config.file=%s' % cfg, '--storage.tsdb.path=%s' % (tmp_path / 'data'),
                             '--web.listen-address=127.0.0.1:%d' % port], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        groups = None
        while time.time() < deadline:
            assert proc.poll() is None, 'prometheus exited %s: %s' % (proc.returncode,
                                                                      (tmp_path / 'prometheus.log').read_text()[-3000:])
            try:
                if _get(base + '/-/ready')[0] == 200:
                    groups = json.loads(_get(base + '/api/v1/rules')[1])['data']['groups']
                    rs = [r for g in groups for r in g['rules']]
                    if rs and all(r.get('health') == 'ok' for r in rs):
                        break
            except OSError:
                pass
            time.sleep(0.5)
        assert groups, 'prometheus was not ready in 60 s: %s' % (tmp_path / 'prometheus.log').read_text()[-3000:]
        assert [g['name'] for g in groups] == [rule_doc['groups'][0]['name']]
        loaded = groups[0]['rules']
        want = rule_doc['groups'][0]['rules']
        assert [(r['name'], r['labels']) for r in loaded] == [(r['alert'], r['labels']) for r in want]
        for r in loaded:
            assert r['type'] == 'alerting' and r['health'] == 'ok', r
            assert r['state'] == 'inactive', r    # no series: nothing fires
    finally:
        stop_process(proc)
        log.close()


# --------------------------------------------------------------------------------------------- nvml.h's bits
def _nvml_h():
    found = sorted(glob.glob(os.path.join(ROOT, '.venv', 'lib', '*', 'site-packages', 'nvidia', '*', 'include',
                                          'nvml.h')))
    assert found, 'nvml.h not found under .venv (wheel nvidia-nvml-dev, as lab/nvml_sim/build.sh needs)'
    return found[-1]


def test_ALR_06_clock_reason_bits_are_nvml_h():
    dummy, rules, dummy2, nvml_probe = _collection()
    text = open(_nvml_h()).read()
    macros = dict(re.findall(r'^#define\s+(nvmlClocks(?:Event|Throttle)Reason\w+)\s+(\S+)', text, re.M))

    def value(name):
        v = macros[name]
        return int(v.rstrip('LlUu'), 16) if v.startswith('0x') else value(v)
    for name, bit in rules.severe_clock_bits():
        camel = ''.join(w.capitalize() for w in name.split('_'))
        names = [m for m in ('nvmlClocksEventReason' + camel, 'nvmlClocksThrottleReason' + camel) if m in macros]
        assert names, 'nvml.h has no nvmlClocks*Reason%s' % camel
        assert set(value(m) for m in names) == {bit}, (name, names, bit)
    for bit, name in nvml_probe.CLOCK_EVENT_REASONS:
        camel = ''.join(w.capitalize() for w in name.split('_'))
        names = [m for m in ('nvmlClocksEventReason' + camel, 'nvmlClocksThrottleReason' + camel) if m in macros]
        assert names and set(value(m) for m in names) == {bit}, (name, bit)
