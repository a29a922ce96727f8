# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The doctor's deeper health checks (issue #38): temperature and power against their limits, InfoROM validity, NVLink
state and error counters, NVSwitch SXid lines; each over the real H100's recorded answers (fixtures/real_h100_580: no
finding) and over fake NVML answers for each fault (docs/conformance/doctor-health.md DH-16..DH-20)."""
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_remediation as rem
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe, nvml_probe

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'real_h100_580')
NEW_CHECKS = ['temperature', 'power', 'inforom', 'nvlink', 'sxid', 'imex', 'fabricmanager']
pynvml = nvml_probe.pynvml


def _raw():
    with open(os.path.join(FIX, 'nvml-health.json')) as f:
        return json.load(f)


def real_health():
    """The new health answers of the real H100 (nvml-health.json; the enforced and default power limit 700 W as its
    nvidia-smi -q printed them, "Current Power Limit" and "Default Power Limit"), in nvml_probe.gpu_health's shape."""
    raw = _raw()
    assert raw['nvlink_state_0'] == {'error': 'NVMLError_NotSupported: Not Supported'}
    assert raw['inforom_valid'] is None     # pynvml's nvmlDeviceValidateInforom returned (NVML_SUCCESS), no error
    return {
        'temperature': {'gpu': raw['temperature_gpu'], 'slowdown': raw['temperature_threshold_slowdown'],
                        'shutdown': raw['temperature_threshold_shutdown']},
        'power': {'usage_mw': raw['power_usage_mw'], 'enforced_limit_mw': 700000, 'default_limit_mw': 700000},
        'inforom_valid': True,
        'inforom_image': raw['inforom_image'],
        'nvlink': {'applicable': False, 'reason': 'not_supported', 'links': []},
    }


@pytest.fixture
def facts():
    with open(os.path.join(FIX, 'gpu_info-mig_profiles.json')) as f:
        info = json.load(f)
    info['gpus'][0]['health'] = real_health()
    return info


def _h(info):
    return info['gpus'][0]['health']


def _found(info, extra=None):
    return [(f['id'], f['severity']) for f in dc.diagnose(info, extra or {'kernel_sxids': []}, checks=NEW_CHECKS)]


def test_DH_21_real_h100_answers_give_no_finding(facts):
    """Never a false finding on what the real H100 on 580 answered: 34 C of 89/95, 102.7 W of 700 W, InfoROM valid,
    no NVLink (NOT_SUPPORTED: not applicable), a kernel log without SXid."""
    with open(os.path.join(FIX, 'node-signals.txt')) as f:
        text = f.read()
    block = text.split('## dmesg hypervisor/NVRM/Xid\n', 1)[1].split('\n## ', 1)[0]
    sxids = node_probe.sxids_from_log([node_probe._DMESG_PREFIX.sub('', x) for x in block.splitlines()])
    assert sxids == []
    assert _found(facts, {'kernel_sxids': sxids}) == []
    assert set(NEW_CHECKS) <= set(dc.CHECK_NAMES)
    assert set(NEW_CHECKS) - set(['sxid', 'imex', 'fabricmanager']) <= set(dc.HEALTH_CHECKS)


@pytest.mark.parametrize('mutate,expected', [
    (lambda h: h['temperature'].update(gpu=84), [('gpu_temperature_high', 'warning')]),
    (lambda h: h['temperature'].update(gpu=83), []),
    (lambda h: h['temperature'].update(gpu=89), [('gpu_temperature_slowdown', 'critical')]),
    (lambda h: h['temperature'].update(gpu=96), [('gpu_temperature_slowdown', 'critical')]),
    # a GPU that reports no slowdown threshold is not judged
    (lambda h: h['temperature'].update(gpu=120, slowdown=None, shutdown=None), []),
])
def test_DH_16_temperature_against_the_gpus_own_thresholds(facts, mutate, expected):
    mutate(_h(facts))
    found = dc.diagnose(facts, {}, checks=['temperature'])
    assert [(f['id'], f['severity']) for f in found] == expected
    if expected:
        assert 'slowdown threshold 89 C, shutdown threshold 95 C' in found[0]['evidence'][0]
    if _h(facts)['temperature']['gpu'] == 96:
        assert 'shutdown threshold (95 C)' in found[0]['summary']


@pytest.mark.parametrize('usage,limit,default,expected', [
    (700000, 700000, 700000, [('gpu_power_at_limit', 'warning')]),
    (734999, 700000, 700000, [('gpu_power_at_limit', 'warning')]),     # within the reading's 5% tolerance
    (735001, 700000, 700000, [('gpu_power_over_limit', 'critical')]),
    (699999, 700000, 700000, []),
    (300000, 400000, 700000, [('gpu_power_limit_reduced', 'info')]),
    (300000, None, 700000, []),                                         # no enforced limit answered: not judged
])
def test_DH_17_power_against_the_enforced_limit(facts, usage, limit, default, expected):
    _h(facts)['power'] = {'usage_mw': usage, 'enforced_limit_mw': limit, 'default_limit_mw': default}
    found = dc.diagnose(facts, {}, checks=['power'])
    assert [(f['id'], f['severity']) for f in found] == expected


def test_DH_18_inforom_corrupted_is_critical(facts):
    _h(facts)['inforom_valid'] = False
    found = dc.diagnose(facts, {}, checks=['inforom'])
    assert [(f['id'], f['severity']) for f in found] == [('inforom_corrupted', 'critical')]
    assert 'G520.0200.00.05' in found[0]['evidence'][0] and 'nvidia-bug-report' in found[0]['remediation']
    _h(facts)['inforom_valid'] = None       # not answered: nothing judged
    assert dc.diagnose(facts, {}, checks=['inforom']) == []


def _links(n, down=(), errors=None):
    errors = errors or {}
    return {'applicable': True, 'links': [
        {'link': i, 'active': i not in down,
         'errors': dict({'replay': 0, 'recovery': 0, 'crc_flit': 0, 'crc_data': 0}, **errors.get(i, {}))}
        for i in range(n)]}


def test_DH_19_nvlink_state_and_error_counters(facts):
    _h(facts)['nvlink'] = _links(18)
    assert dc.diagnose(facts, {}, checks=['nvlink']) == []
    _h(facts)['nvlink'] = _links(18, down=(3, 7))
    found = dc.diagnose(facts, {}, checks=['nvlink'])
    # no NVSwitch: a link no NVLink bridge covers is down by design, so a warning only
    assert [(f['id'], f['severity']) for f in found] == [('nvlink_inactive', 'warning')]
    assert found[0]['evidence'] == ['NVLink state: links 3, 7 inactive, 16 active', 'NVSwitch or NVLink5 system: no']
    facts['nvml']['nvswitches'] = ['00000000:c4:00.0']
    found = dc.diagnose(facts, {}, checks=['nvlink'])
    assert [(f['id'], f['severity']) for f in found] == [('nvlink_inactive', 'critical')]
    del facts['nvml']['nvswitches']
    _h(facts)['nvlink'] = _links(18, errors={2: {'replay': 4, 'crc_flit': 1}, 5: {'recovery': 1}})
    found = dc.diagnose(facts, {}, checks=['nvlink'])
    assert [(f['id'], f['severity']) for f in found] == [('nvlink_errors', 'warning')]
    assert found[0]['evidence'] == ['link 2: crc_flit 1, replay 4', 'link 5: recovery 1']
    # every link down: only on an NVSwitch system is that a fault (a board may report links it never trained)
    _h(facts)['nvlink'] = _links(4, down=(0, 1, 2, 3))
    assert dc.diagnose(facts, {}, checks=['nvlink']) == []
    facts['node']['nvswitch_count'] = 4
    assert [f['id'] for f in dc.diagnose(facts, {}, checks=['nvlink'])] == ['nvlink_inactive']
    # no NVLink (the real H100): not applicable, whatever else the node has
    _h(facts)['nvlink'] = {'applicable': False, 'reason': 'not_supported', 'links': []}
    assert dc.diagnose(facts, {}, checks=['nvlink']) == []


# The forms of NVSWITCH_PRINT_SXID (NVIDIA/open-gpu-kernel-modules 580.95.05, common_nvswitch.h / intr_nvswitch.h),
# as the kernel log shows them with dmesg's time stamp
_SXID_LOG = [
    '[  12.000001] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build',
    '[  99.000000] nvidia-nvswitch3: SXid (PCI:0000:c4:00.0): 12028, Fatal, Link 32 egress non-posted PRIV error (First)',
    '[ 100.000000] nvidia-nvswitch3: SXid (PCI:0000:c4:00.0): 12028, Data {0x00000000, 0x00000000}',
    '[ 120.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build',
    '[ 130.000000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Non-fatal, Link 08 LTSSM Fault Up (First)',
    '[ 131.000000] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 11004, Fatal, Link 02 ingress invalid ACL',
    '[ 132.000000] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 10004, Fatal, Unexpected PRI error',
    '[ 133.000000] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 00019, TSENSE OVERT Threshold reached. Shutting Down',
    '[ 134.000000] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 00020, Thermal Slowdown Engaged | PMGR WARN Threshold reached',
    '[ 135.000000] NVRM: Xid (PCI:0000:18:00): 74, pid=1, name=x, NVLink: fatal error detected on link 3',
]


def test_DH_20_sxid_lines_since_the_last_driver_load():
    lines = [node_probe._DMESG_PREFIX.sub('', x) for x in _SXID_LOG]
    got = node_probe.sxids_from_log(lines)
    assert [(e['switch'], e['pci'], e['sxid'], e['fatal']) for e in got] == [
        ('nvswitch0', '0000:05:00.0', 20034, False), ('nvswitch1', '0000:06:00.0', 11004, True),
        ('nvswitch1', '0000:06:00.0', 10004, True), ('nvswitch2', '0000:07:00.0', 19, True),
        ('nvswitch2', '0000:07:00.0', 20, False)]
    assert got[0]['text'] == 'Non-fatal, Link 08 LTSSM Fault Up (First)'
    # the Xid line is no SXid; the kernel's /dev/kmsg prefix is removed as for Xids
    assert node_probe.sxids_from_log(['6,1234,99,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 22013, Non-fatal, x']) \
        == [{'switch': 'nvswitch0', 'pci': '0000:05:00.0', 'sxid': 22013, 'severity': 'non-fatal', 'fatal': False,
             'text': 'Non-fatal, x'}]
    found = dc.diagnose({'gpus': []}, {'kernel_sxids': got}, checks=['sxid'])
    assert [(f['id'], f['severity']) for f in found] == [('nvswitch_sxid_fatal', 'critical'), ('nvswitch_sxid', 'warning')]
    assert 'SXid 19, 10004, 11004' in found[0]['summary']
    assert found[0]['evidence'][0] == ('kernel log: nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 11004, Fatal, Link 02 '
                                       'ingress invalid ACL')


# Every form of an SXid message in NVIDIA/open-gpu-kernel-modules 580.95.05 (src/common/nvswitch/kernel: the macros
# of inc/intr_nvswitch.h and inc/error_nvswitch.h, and each direct NVSWITCH_PRINT_SXID call's format string), as the
# driver prints it, with the severity the doctor must give it (DH-20, DH-24). Every line carries the SAME SXid number:
# the severity comes from the message, never from a table of numbers.
_SXID_FORMS = [
    # (source, message as printed, severity)
    ('intr_nvswitch.h NVSWITCH_REPORT_FATAL', 'Fatal, Link 32 egress non-posted PRIV error (First)', 'fatal'),
    ('intr_nvswitch.h NVSWITCH_REPORT_FATAL', 'Fatal, Link 02 ingress invalid ACL', 'fatal'),
    ('intr_nvswitch.h NVSWITCH_REPORT_PRI_ERROR_FATAL', 'Fatal, PRI error, instance=1, chiplet=0', 'fatal'),
    ('intr_nvswitch.h NVSWITCH_UNHANDLED_CHECK', 'Fatal, unhandled interrupt in _nvswitch_service_nvldl_fatal_ls10(4521)',
     'fatal'),
    ('ls10/intr_ls10.c, lr10/intr_lr10.c', 'Fatal, Unexpected PRI error', 'fatal'),
    ('ls10/ls10.c', 'Fatal, Firmware initialization failure (0x1/0x0, 0x0, 0x0, 0x0/0x0, 0x0, 0x0, 0x0, 0x0', 'fatal'),
    ('intr_nvswitch.h NVSWITCH_REPORT_NONFATAL', 'Non-fatal, Link 08 LTSSM Fault Up (First)', 'non-fatal'),
    ('intr_nvswitch.h NVSWITCH_REPORT_PRI_ERROR_NONFATAL', 'Non-fatal, PRI error, instance=3, chiplet=1', 'non-fatal'),
    ('error_nvswitch.h NVSWITCH_REPORT_NONFATAL_LINK', 'Non-fatal, Link 17 MINION Link DLREQ interrupt', 'non-fatal'),
    ('intr_nvswitch.h NVSWITCH_REPORT_CORRECTABLE', 'Correctable, Link 05 RX Short Error Rate (First)', 'correctable'),
    ('error_nvswitch.h NVSWITCH_REPORT_CORRECTABLE_DEVICE_DATA', 'Correctable, soe DMEM ECC', 'correctable'),
    ('error_nvswitch.h NVSWITCH_REPORT_CORRECTABLE_LINK_DATA', 'Correctable, Link 11 NVLW ECC', 'correctable'),
    ('ls10/therm_ls10.c THERMAL_SHUTDOWN', 'TSENSE OVERT Threshold reached. Shutting Down', 'fatal'),
    ('ls10/therm_ls10.c PMGR shutdown', 'PMGR OVERT Threshold reached. Shutting Down', 'fatal'),
    ('ls10/heartbeat_ls10.c', 'OSFP Thermal Overt Activated', 'fatal'),
    ('ls10/heartbeat_ls10.c', 'OSFP Thermal SOE Heartbeat Shutdown', 'fatal'),
    ('ls10/soe_ls10.c, lr10/soe_lr10.c', 'SOE HALTED', 'fatal'),
    ('ls10/soe_ls10.c, lr10/soe_lr10.c', 'SOE Watchdog error', 'fatal'),
    ('ls10/soe_ls10.c', 'SOE init Failed(0)', 'fatal'),
    ('ls10/soe_ls10.c', 'SOE init failed(4)', 'fatal'),
    ('lr10/soe_lr10.c', 'Failed to boot SOE(2)', 'fatal'),
    ('lr10/soe_lr10.c', 'Failed to reset SOE(1)', 'fatal'),
    ('lr10/soe_lr10.c', 'SOE reset timeout error(0)', 'fatal'),
    ('ls10/therm_ls10.c THERMAL_EVENT_START', 'NVSWITCH Temperature 96C | TSENSE WARN Threshold 95C', 'event'),
    ('ls10/therm_ls10.c', 'Thermal Slowdown Engaged | Temp higher than WARN Threshold', 'event'),
    ('ls10/therm_ls10.c', 'Thermal Slowdown Engaged | PMGR WARN Threshold reached', 'event'),
    ('ls10/therm_ls10.c', 'Thermal Slowdown Engaged | Links Thermal Mode ON', 'event'),
    ('ls10/therm_ls10.c THERMAL_SHUTDOWN (printed before the Shutting Down line)',
     'NVSWITCH Temperature 111C | OVERT Threshold 110C', 'event'),
    ('ls10/heartbeat_ls10.c', 'OSFP Thermal Warn Activated', 'event'),
    ('ls10/soe_ls10.c, lr10/soe_lr10.c', 'SOE EXTERR', 'event'),
    ('ls10/soe_ls10.c, lr10/soe_lr10.c', 'Failed to register SOE events', 'event'),
    ('flcn/flcn_call_hal_nvswitch.c', 'Failed to post command to SOE. Data {0x00000001, 0x00000002, 0x00000003, '
     '0x00000004, 0x00000005, 0x00000006}', 'event'),
    ('flcn/flcn_call_hal_nvswitch.c', 'Timed out while waiting for SOE command completion. Data {0x00000001, '
     '0x00000002, 0x00000003, 0x00000004, 0x00000005, 0x00000006}', 'event'),
    ('cci/cables/cci_error.c', 'Module 3 boot failure', 'event'),
    ('cci/cables/cci_error.c', 'Module 3 Image A recovery failure', 'event'),
    ('cci/cables/cci_common.c', 'Module 3 faulty', 'event'),
    ('cci/cables/cci_common.c', 'Failed to re-enable ALI for module 3 links.', 'event'),
    ('cci/cci_nvswitch.c', 'Failed to init CCI(1)', 'event'),
    ('ls10/cci_ls10.c', 'Module 3 access error', 'event'),
    ('ls10/link_ls10.c', 'ALI Training failure. Info 0x0000000', 'event'),
    ('ls10/tnvl_ls10.c', 'TNVL mode is locked', 'event'),
    ('nvswitch.c', 'IO failure', 'event'),
    ('ls10/therm_ls10.c THERMAL_EVENT_END', 'Thermal slowdown Disengaged', 'ended'),
    ('ls10/therm_ls10.c THERMAL_EVENT_END', 'Thermal Slowdown Disengaged | Links Thermal Mode OFF', 'ended'),
    ('ls10/heartbeat_ls10.c', 'OSFP Thermal Warn Deactivated', 'ended'),
    ('ls10/heartbeat_ls10.c', 'OSFP Thermal Overt Deactivated', 'ended'),
]


@pytest.mark.parametrize('source,message,severity', _SXID_FORMS, ids=['%02d' % i for i in range(len(_SXID_FORMS))])
def test_DH_24_every_sxid_form_classified_by_the_drivers_word(source, message, severity):
    line = '[  99.000000] nvidia-nvswitch3: SXid (PCI:0000:c4:00.0): 12028, %s' % message
    got = node_probe.sxids_from_log([node_probe._DMESG_PREFIX.sub('', line)])
    assert got == [{'switch': 'nvswitch3', 'pci': '0000:c4:00.0', 'sxid': 12028, 'severity': severity,
                    'fatal': severity == 'fatal', 'text': message}], source
    found = [(f['id'], f['severity']) for f in dc.diagnose({'gpus': []}, {'kernel_sxids': got}, checks=['sxid'])]
    assert found == {'fatal': [('nvswitch_sxid_fatal', 'critical')], 'ended': []}.get(
        severity, [('nvswitch_sxid', 'warning')]), source


def test_DH_24_the_sxid_number_never_decides():
    """The same message gives the same severity under any SXid number, and the same number gives each message's own."""
    for number in (1, 19, 10004, 12028, 20034, 99999):
        for dummy, message, severity in _SXID_FORMS:
            got = node_probe.sxids_from_log(['nvidia-nvswitch0: SXid (PCI:0000:05:00.0): %05d, %s' % (number, message)])
            assert got[0]['severity'] == severity, (number, message)


def test_new_gpu_findings_reach_the_remediation_loop_with_a_persons_action(facts):
    _h(facts)['temperature']['gpu'] = 91
    _h(facts)['inforom_valid'] = False
    out = rem.assess(facts, {})
    entries = list(out.values())
    assert len(entries) == 1
    entry = entries[0]
    assert sorted(f['id'] for f in entry['findings']) == ['gpu_temperature_slowdown', 'inforom_corrupted']
    assert entry['repair']['action'] == 'manual'


def _err(code):
    return pynvml.NVMLError(code)


def test_DH_16_DH_17_DH_18_DH_19_probe_reads_temperature_power_inforom_and_nvlink(monkeypatch):
    """nvml_probe.gpu_health's new answers through pynvml's calls, as the real H100 answered them and as faults."""
    answers = {
        'nvmlDeviceGetTemperature': lambda h, s: 34 if s == 0 else None,
        'nvmlDeviceGetTemperatureThreshold': lambda h, t: {1: 89, 0: 95}[t],
        'nvmlDeviceGetPowerUsage': lambda h: 102716,
        'nvmlDeviceGetEnforcedPowerLimit': lambda h: 700000,
        'nvmlDeviceGetPowerManagementDefaultLimit': lambda h: 700000,
        'nvmlDeviceValidateInforom': lambda h: None,
    }

    def nvlink_state(h, link):
        if h == 'real':
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= 4:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 0 if link == 2 else 1

    def nvlink_counter(h, link, counter):
        if counter == 3:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 5 if (link, counter) == (1, 0) else 0

    for name, func in answers.items():
        monkeypatch.setattr(pynvml, name, func)
    monkeypatch.setattr(pynvml, 'nvmlDeviceGetNvLinkState', nvlink_state)
    monkeypatch.setattr(pynvml, 'nvmlDeviceGetNvLinkErrorCounter', nvlink_counter)
    assert nvml_probe.temperature('real') == {'gpu': 34, 'slowdown': 89, 'shutdown': 95}
    assert nvml_probe.power('real') == {'usage_mw': 102716, 'enforced_limit_mw': 700000, 'default_limit_mw': 700000}
    assert nvml_probe.inforom_valid('real') is True
    assert nvml_probe.nvlink_health('real') == {'applicable': False, 'reason': 'not_supported', 'links': []}
    nv = nvml_probe.nvlink_health('hgx')
    assert [(lk['link'], lk['active']) for lk in nv['links']] == [(0, True), (1, True), (2, False), (3, True)]
    assert nv['links'][1]['errors'] == {'replay': 5, 'recovery': 0, 'crc_flit': 0, 'crc_data': None}

    def corrupted(h):
        raise _err(nvml_probe.NVML_ERROR_CORRUPTED_INFOROM)
    monkeypatch.setattr(pynvml, 'nvmlDeviceValidateInforom', corrupted)
    assert nvml_probe.inforom_valid('bad') is False

    def not_supported(*a):
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    for name in ('nvmlDeviceValidateInforom', 'nvmlDeviceGetTemperature', 'nvmlDeviceGetPowerUsage'):
        monkeypatch.setattr(pynvml, name, not_supported)
    assert (nvml_probe.inforom_valid('x'), nvml_probe.temperature('x'), nvml_probe.power('x')) == (None, None, None)
    monkeypatch.setattr(pynvml, 'nvmlDeviceGetTemperature', lambda h, s: 50)
    monkeypatch.setattr(pynvml, 'nvmlDeviceGetTemperatureThreshold', not_supported)
    assert nvml_probe.temperature('x') == {'gpu': 50, 'slowdown': None, 'shutdown': None}


def _write(root, rel, data, mode='w'):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == 'wb':
        path.write_bytes(data)
    else:
        path.write_text(data)


def test_DH_22_nvlink5_node_needs_fabricmanager_and_ib_umad(tmp_path):
    """An NVLink5 system (an InfiniBand device with SW_MNG in its VPD, as NVIDIA's driver container detects it) has no
    NVSwitch on the host's PCI bus: fabric manager is required all the same, and ib_umad must be loaded for it."""
    _write(tmp_path, 'sys/class/infiniband/mlx5_0/device/vpd', b'\x82\x10PN:MCX750500B-0D00 SW_MNG\x78', 'wb')
    _write(tmp_path, 'sys/class/infiniband/mlx5_1/device/vpd', b'\x82\x08CX7 NIC\x78', 'wb')
    _write(tmp_path, 'proc/modules', 'mlx5_core 2412544 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n')
    _write(tmp_path, 'lib/systemd/system/nvidia-fabricmanager.service', '[Unit]\n')
    node = node_probe.node_facts(str(tmp_path))
    assert (node['nvlink5'], node['nvswitch_count'], node['fabricmanager_required']) == (True, 0, True)
    assert (node['ib_umad_loaded'], node['fabricmanager_unit'], node['imex_unit']) == (False, 'disabled', 'not-found')
    facts = {'node': node, 'gpus': [], 'nvml': {'driver_version': '580.95.05'}}
    found = dc.diagnose(facts, {'fabricmanager_active': 'active', 'fabricmanager_version': '580.95.05'},
                        checks=['fabricmanager'])
    assert [(f['id'], f['severity']) for f in found] == [('fabricmanager_ib_umad_missing', 'critical')]
    assert 'NVLink5 system' in found[0]['evidence'][1] and 'modprobe ib_umad' in found[0]['remediation']
    node['ib_umad_loaded'] = True
    assert dc.diagnose(facts, {'fabricmanager_active': 'active', 'fabricmanager_version': '580.95.05'},
                       checks=['fabricmanager']) == []
    assert [f['id'] for f in dc.diagnose(facts, {'fabricmanager_active': 'failed'}, checks=['fabricmanager'])] == \
        ['fabricmanager_inactive']
    # NVLink up: on an NVLink5 system every link of a GPU down is a fault (no NVSwitch on PCI to say so)
    facts['gpus'] = [{'index': 0, 'name': 'NVIDIA B200', 'health': {'nvlink': _links(18, down=range(18))}}]
    assert [f['id'] for f in dc.diagnose(facts, {}, checks=['nvlink'])] == ['nvlink_inactive']
    # without SW_MNG: no NVLink5, no fabric manager needed
    (tmp_path / 'sys/class/infiniband/mlx5_0/device/vpd').write_bytes(b'\x82\x08CX7 NIC\x78')
    assert node_probe.node_facts(str(tmp_path))['fabricmanager_required'] is False


@pytest.mark.parametrize('unit,active,dra,expected', [
    ('not-found', None, None, []),
    ('enabled', 'active', {'node_name': 'n1'}, [('imex_host_service_with_dra', 'critical')]),
    ('disabled', 'active', {'node_name': 'n1'}, [('imex_host_service_with_dra', 'critical')]),
    ('disabled', 'inactive', {'node_name': 'n1'}, []),        # disabled (masked) as NVIDIA asks for the DRA driver
    ('enabled', 'active', None, []),
    ('enabled', 'failed', None, [('imex_inactive', 'warning')]),
])
def test_DH_23_imex_is_checked_not_installed(tmp_path, unit, active, dra, expected):
    facts = {'node': {'imex_unit': unit}, 'gpus': []}
    extra = {'imex_active': active}
    if dra:
        extra['dra'] = dra
    assert [(f['id'], f['severity']) for f in dc.diagnose(facts, extra, checks=['imex'])] == expected
    if unit != 'not-found':
        _write(tmp_path, 'lib/systemd/system/nvidia-imex.service', '[Unit]\n')
        if unit == 'enabled':
            _write(tmp_path, 'etc/systemd/system/multi-user.target.wants/nvidia-imex.service', '')
        assert node_probe.node_facts(str(tmp_path))['imex_unit'] == unit
