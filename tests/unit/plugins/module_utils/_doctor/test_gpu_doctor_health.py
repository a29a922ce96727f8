# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The doctor's readiness, health and virtualization checks, and its findings on the real H100 capture
(fixtures/real_h100_580: gpu_info's result, the raw NVML health answers and the node's signals, read 2026-11-26)."""
import ctypes
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe, nvml_probe
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NODE_STRATEGIES

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'real_h100_580')


def _load(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def health_from_capture(raw):
    """nvml-health.json (pynvml's raw answers) -> nvml_probe.gpu_health()'s shape."""
    rows = [int(x) for x in raw['remapped_rows']]
    return {
        'ecc_enabled': raw['ecc_mode'][0] == '1',
        'ecc_pending': raw['ecc_mode'][1] == '1',
        'ecc_uncorrected_volatile': raw['ecc_uncorrected_volatile'],
        'ecc_uncorrected_aggregate': raw['ecc_uncorrected_aggregate'],
        'remapped_rows': {'correctable': rows[0], 'uncorrectable': rows[1], 'pending': bool(rows[2]),
                          'failure': bool(rows[3])},
        'row_remapper_histogram': raw['row_remapper_histogram'],
        'retired_pages': None,  # NotSupported on H100
        'clocks_event_reasons': nvml_probe.clock_event_reason_names(raw['clocks_event_reasons']),
        'pcie': {'gen': raw['pcie_gen_current'], 'width': raw['pcie_width_current'], 'max_gen': raw['pcie_gen_max'],
                 'max_width': raw['pcie_width_max'], 'gpu_max_gen': raw['pcie_gen_gpu_max'],
                 'replay': raw['pcie_replay_counter']},
        'virtualization_mode': nvml_probe.VIRTUALIZATION_MODES[raw['virtualization_mode']],
        'gsp_firmware_version': '580.159.04',
        # nvidia-smi -q of the same capture (lab/realgpu/samples/h100-580/nvidia-smi-q.txt): GPU Recovery Action None
        'recovery_action': 'none',
    }


def signals_root(tmp_path):
    """A root directory with what node-signals.txt shows: CPU hypervisor flag, kvm-clock, no DMI, no /sys/hypervisor."""
    (tmp_path / 'proc').mkdir(parents=True)
    (tmp_path / 'proc' / 'cpuinfo').write_text('processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n')
    clock = tmp_path / 'sys/devices/system/clocksource/clocksource0'
    clock.mkdir(parents=True)
    (clock / 'available_clocksource').write_text('tsc kvm-clock \n')
    return str(tmp_path)


def kernel_lines():
    text = _load('node-signals.txt')
    block = text.split('## dmesg hypervisor/NVRM/Xid\n', 1)[1].split('\n## ', 1)[0]
    return [node_probe._DMESG_PREFIX.sub('', line) for line in block.splitlines()]


@pytest.fixture
def capture(tmp_path):
    info = json.loads(_load('gpu_info-mig_profiles.json'))
    info['gpus'][0]['health'] = health_from_capture(json.loads(_load('nvml-health.json')))
    hv, ev = node_probe.hypervisor_evidence(signals_root(tmp_path), kernel_lines())
    info['node']['hypervisor'], info['node']['hypervisor_evidence'] = hv, ev
    info['nvml']['xid_events'] = []  # the 200 ms wait timed out
    extra = {'kernel_xids': node_probe.xids_from_log(kernel_lines()), 'kernel_log_readable': True}
    return info, extra


def ids(findings):
    return [f['id'] for f in findings]


@pytest.mark.parametrize('strategy', NODE_STRATEGIES)
def test_DH_04_real_h100_capture_is_not_ready_for_a_gpu_pod(capture, strategy):
    info, extra = capture
    found = dc.diagnose(info, extra, strategy=strategy)
    critical = [f['id'] for f in found if f['severity'] == 'critical']
    assert critical == ['container_engine_missing', 'nvidia_toolkit_missing']
    assert 'gpu_passthrough' in ids(found)
    assert dc.render_table('h100', found) != 'h100: no problem found'
    # the GPU itself is healthy: no health finding
    assert not set(ids(found)) & set(['gpu_lost', 'ecc_uncorrectable', 'row_remap_pending', 'row_remap_failure',
                                      'clocks_throttled', 'pcie_link_degraded'])
    assert not [i for i in ids(found) if i.startswith('xid_')]


def test_DH_07_real_h100_signals_name_kvm_and_the_fbhub_line_is_no_xid(capture, tmp_path):
    info, extra = capture
    assert info['node']['hypervisor'] == 'kvm'
    assert info['node']['hypervisor_evidence'] == 'kernel log: Hypervisor detected: KVM'
    assert any('FBHUB' in line for line in kernel_lines())
    assert extra['kernel_xids'] == []
    # without the kernel log, the clock source still names KVM (the old DMI-only answer was "unknown")
    assert node_probe.hypervisor_evidence(signals_root(tmp_path / 'x'), None) == ('kvm', 'clock source kvm-clock')


def test_ready_node_has_no_readiness_finding(capture):
    info, extra = capture
    info['node']['container_runtimes'] = {'installed': ['containerd', 'nvidia-container-runtime', 'nvidia-ctk'],
                                          'containerd_nvidia_runtime': True, 'cdi_specs': []}
    found = dc.diagnose(info, extra, strategy='time-slicing')
    assert [f for f in found if f['severity'] != 'info'] == []
    extra['cdi_required'] = True
    assert ids(dc.diagnose(info, extra, strategy='time-slicing', checks=['readiness'])) == ['cdi_spec_missing']
    info['node']['container_runtimes']['cdi_specs'] = ['/var/run/cdi/nvidia.yaml']
    assert dc.diagnose(info, extra, checks=['readiness']) == []


def test_crio_without_nvidia_runtime(capture):
    info, extra = capture
    info['node']['container_runtimes'] = {'installed': ['cri-o', 'nvidia-ctk'], 'crio_nvidia_runtime': False}
    assert ids(dc.diagnose(info, extra, checks=['readiness'])) == ['crio_nvidia_runtime_missing']


def _h(info):
    return info['gpus'][0]['health']


@pytest.mark.parametrize('mutate,expected,severity', [
    (lambda i: _h(i).update(ecc_uncorrected_volatile=2, ecc_uncorrected_aggregate=2), 'ecc_uncorrectable', 'critical'),
    (lambda i: _h(i).update(ecc_uncorrected_aggregate=3), 'ecc_uncorrectable_history', 'warning'),
    (lambda i: _h(i)['remapped_rows'].update(uncorrectable=1, pending=True), 'row_remap_pending', 'warning'),
    (lambda i: _h(i)['remapped_rows'].update(failure=True), 'row_remap_failure', 'critical'),
    (lambda i: _h(i)['row_remapper_histogram'].update(none=2, max=2558), 'row_remap_exhausted', 'warning'),
    (lambda i: _h(i).update(retired_pages={'single_bit': 1, 'double_bit': 0, 'pending': True}),
     'retired_pages_pending', 'warning'),
    (lambda i: _h(i).update(retired_pages={'single_bit': 50, 'double_bit': 10, 'pending': False}),
     'retired_pages_rma', 'critical'),
    (lambda i: _h(i).update(clocks_event_reasons=['hw_slowdown', 'hw_thermal_slowdown']), 'clocks_throttled', 'warning'),
    (lambda i: _h(i)['pcie'].update(width=8), 'pcie_link_degraded', 'warning'),
    (lambda i: (_h(i)['pcie'].update(gen=3), _h(i).update(clocks_event_reasons=[])), 'pcie_link_degraded', 'warning'),
    (lambda i: i['gpus'][0].update(error='gpu_lost'), 'gpu_lost', 'critical'),
    (lambda i: i['nvml'].update(xid_events=[{'gpu': 0, 'xid': 79}]), 'xid_79', 'critical'),
    (lambda i: i['nvml'].update(xid_events=[{'gpu': 0, 'xid': 94}]), 'xid_94', 'warning'),
    (lambda i: i['nvml'].update(xid_events=[{'gpu': 0, 'xid': 13}]), 'xid_13', 'info'),
    # an Xid without guidance is critical (DH-11; it was a warning, and the gate kept the node)
    (lambda i: i['nvml'].update(xid_events=[{'gpu': 0, 'xid': 999}]), 'xid_999', 'critical'),
    (lambda i: _h(i).update(recovery_action='gpu_reset'), 'gpu_recovery_action', 'critical'),
])
def test_DH_02_each_health_fault_is_one_finding(capture, mutate, expected, severity):
    info, extra = capture
    mutate(info)
    found = [f for f in dc.diagnose(info, extra, checks=list(dc.HEALTH_CHECKS) + ['gpu_lost', 'xid'])
             if f['id'] != 'gpu_passthrough']
    assert [(f['id'], f['severity']) for f in found] == [(expected, severity)]
    assert found[0]['evidence'] and found[0]['remediation']


def test_pcie_generation_drop_at_idle_is_no_fault(capture):
    info, extra = capture
    _h(info)['pcie']['gen'] = 1  # idle power saving
    assert dc.diagnose(info, extra, checks=['pcie']) == []


def test_DH_01_kernel_log_xids_since_boot(tmp_path):
    log = tmp_path / 'dmesg.txt'
    log.write_text('[    1.246058] NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100: FBHUB Interrupt detected.\n'
                   '[ 8812.000001] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python, GPU has fallen off the bus.\n')
    lines = node_probe.kernel_log('/', str(log))
    xids = node_probe.xids_from_log(lines)
    assert xids == [{'pci': '0000:00:06', 'xid': 79, 'text': 'pid=1234, name=python, GPU has fallen off the bus.'}]
    found = dc.check_xid({'nvml': {}}, {'kernel_xids': xids})
    assert ids(found) == ['xid_79'] and 'kernel log' in found[0]['evidence'][0]
    assert node_probe.kernel_log('/', str(tmp_path / 'missing')) is None


def test_kmsg_records_lose_their_prefix():
    assert node_probe._KMSG_PREFIX.sub('', '4,512,1246058,-;NVRM: Xid (PCI:0000:00:06): 48, DBE') == \
        'NVRM: Xid (PCI:0000:00:06): 48, DBE'


def test_vgpu_guest(capture):
    info, extra = capture
    _h(info)['virtualization_mode'] = 'vgpu'
    assert ids(dc.diagnose(info, extra, checks=['virtualization'])) == ['gpu_vgpu_guest']
    _h(info)['virtualization_mode'] = 'none'
    assert dc.diagnose(info, extra, checks=['virtualization']) == []


def test_DH_08_cdi_specs_and_crio_config_are_read(tmp_path):
    (tmp_path / 'etc/cdi').mkdir(parents=True)
    (tmp_path / 'etc/cdi/nvidia.yaml').write_text('cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n')
    (tmp_path / 'etc/cdi/other.yaml').write_text('kind: vendor.com/device\n')
    (tmp_path / 'etc/crio/crio.conf.d').mkdir(parents=True)
    (tmp_path / 'etc/crio/crio.conf.d/99-nvidia.conf').write_text('[crio.runtime.runtimes.nvidia]\nruntime_path = "x"\n')
    rt = node_probe.container_runtimes(str(tmp_path))
    assert rt['cdi_specs'] == ['/etc/cdi/nvidia.yaml']
    assert rt['crio_nvidia_runtime'] is True


def _fabric_facts(*states):
    gpus = []
    for i, f in enumerate(states):
        gpus.append({'index': i, 'name': 'NVIDIA H100 80GB HBM3', 'pci_bus_id': '00000000:%02X:00.0' % (0x18 + i),
                     'health': {'fabric': f}})
    return {'nvml': {'status': 'ok'}, 'gpus': gpus,
            'node': {'pci_gpus': [{'name': 'GH100'}], 'fabricmanager_unit': 'enabled', 'nvswitch_count': 4}}


def test_DH_09_fabric_registration_states():
    """NVML's fabric info (go-nvml nvml.h: state NOT_SUPPORTED/NOT_STARTED/IN_PROGRESS/COMPLETED, status to be read
    only when completed): not started critical, in progress warning, completed with an error critical."""
    ok = {'state': 'completed', 'status': 0, 'status_text': None}
    assert dc.diagnose(_fabric_facts(ok, ok, None), checks=['fabric']) == []
    assert dc.diagnose(_fabric_facts({'state': 'not_supported', 'status': 0}), checks=['fabric']) == []
    out = dc.diagnose(_fabric_facts(ok, {'state': 'not_started', 'status': 0}), extra={'fabricmanager_active': 'inactive'},
                      checks=['fabric'])
    assert [(f['id'], f['severity']) for f in out] == [('fabric_registration_not_started', 'critical')]
    assert 'GPU 1 (NVIDIA H100 80GB HBM3, 00000000:19:00.0)' in out[0]['evidence'][0]
    assert 'nvidia-fabricmanager: unit enabled, inactive' in out[0]['evidence']
    out = dc.diagnose(_fabric_facts({'state': 'in_progress', 'status': 0}), checks=['fabric'])
    assert [(f['id'], f['severity']) for f in out] == [('fabric_registration_in_progress', 'warning')]
    out = dc.diagnose(_fabric_facts({'state': 'completed', 'status': 10, 'status_text': 'Timeout'}), checks=['fabric'])
    assert [(f['id'], f['severity']) for f in out] == [('fabric_registration_failed', 'critical')]
    assert 'status 10 (Timeout)' in out[0]['evidence'][0]
    # status is not judged before the registration completes
    assert dc.diagnose(_fabric_facts({'state': 'in_progress', 'status': 10}), checks=['fabric'])[0]['id'] == \
        'fabric_registration_in_progress'


class _FabricV2(ctypes.Structure):
    _fields_ = [('version', ctypes.c_uint), ('state', ctypes.c_uint), ('status', ctypes.c_uint)]


def test_DH_09_probe_fabric_info_from_the_versioned_call(monkeypatch):
    """nvml_probe.fabric_info asks nvmlDeviceGetGpuFabricInfoV with the binding's v2 structure (the H100 capture's
    script called the unversioned call without a structure: TypeError); NOT_SUPPORTED -> None."""
    calls = []

    def get_v(handle, ref):
        calls.append(handle)
        info = ref._obj   # passed by reference: the binding hands the argument to the C call as it is
        if handle == 'nosupport':
            raise nvml_probe.pynvml.NVMLError(nvml_probe.pynvml.NVML_ERROR_NOT_SUPPORTED)
        info.state, info.status = 3, 10 if handle == 'bad' else 0

    monkeypatch.setattr(nvml_probe.pynvml, 'c_nvmlGpuFabricInfo_v2_t', _FabricV2, raising=False)
    monkeypatch.setattr(nvml_probe.pynvml, 'nvmlDeviceGetGpuFabricInfoV', get_v, raising=False)
    monkeypatch.setattr(nvml_probe.pynvml, 'nvmlErrorString', lambda rc: b'Timeout', raising=False)
    assert nvml_probe.fabric_info('ok') == {'state': 'completed', 'status': 0, 'status_text': None}
    assert nvml_probe.fabric_info('bad') == {'state': 'completed', 'status': 10, 'status_text': 'Timeout'}
    assert nvml_probe.fabric_info('nosupport') is None
    assert calls == ['ok', 'bad', 'nosupport']


# Kernel log lines as the driver prints Xid 154 (catalogue: "GPU recovery action changed from 0x0 (None) to 0x2 (Node
# Reboot Required)"), with what came before it
_XID_154 = ['NVRM: Xid (PCI:0000:97:00): 119, pid=5220, name=cache_mgr_main, Timeout after 45s of waiting for RPC '
            'response from GPU6 GSP! Expected function 76 (GSP_RM_CONTROL) sequence 3661611 (0x208f1105 0x8).',
            'NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)']


def test_DH_11_xid_154_is_critical_by_the_action_it_names(capture):
    """Xid 154 had no entry: a warning, and the default gate kept a node whose driver asked for a reboot."""
    info, extra = capture
    extra['kernel_xids'] = node_probe.xids_from_log(_XID_154)
    found = dict((f['id'], f) for f in dc.diagnose(info, extra, checks=['xid']))
    assert found['xid_154']['severity'] == 'critical' and found['xid_119']['severity'] == 'critical'
    assert 'Node Reboot Required on 0000:97:00' in found['xid_154']['summary']
    assert found['xid_154']['remediation'].startswith('Drain the node and reboot it')
    # a later line back to None: only information
    extra['kernel_xids'] = node_probe.xids_from_log(
        _XID_154[1:] + ['NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x2 (Node Reboot '
                        'Required) to 0x0 (None)'])
    assert [(f['id'], f['severity']) for f in dc.diagnose(info, extra, checks=['xid'])] == [('xid_154', 'info')]
    # GPU Reset Required on one GPU: reset advice; an NVML event of 154 (no label) counts as a reboot
    reset = _XID_154[1].replace('0x2 (Node Reboot Required)', '0x1 (GPU Reset Required)')
    extra['kernel_xids'] = node_probe.xids_from_log([reset])
    f = dc.diagnose(info, extra, checks=['xid'])[0]
    assert (f['id'], f['severity']) == ('xid_154', 'critical') and 'reset the GPU' in f['remediation']
    info['nvml']['xid_events'] = [{'gpu': 1, 'xid': 154}]
    f = dc.diagnose(info, extra, checks=['xid'])[0]
    assert f['remediation'].startswith('Drain the node and reboot it') and '? on GPU 1' in f['summary']


def test_DH_11_unknown_xid_is_critical_and_excluded_by_the_gate(capture):
    info, extra = capture
    extra['kernel_xids'] = node_probe.xids_from_log(['NVRM: Xid (PCI:0000:97:00): 171, some new fault'])
    found = dc.diagnose(info, extra, checks=['xid'])
    assert [(f['id'], f['severity']) for f in found] == [('xid_171', 'critical')]


class _Field(object):
    def __init__(self, ret, value):
        self.nvmlReturn = ret
        self.value = type('V', (), {'uiVal': value})()


class _FieldNvml(object):
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230

    class NVMLError(Exception):
        pass

    def __init__(self, answer):
        self.answer, self.asked = answer, []

    def nvmlDeviceGetFieldValues(self, handle, ids):  # noqa: N802 (NVML's name)
        self.asked.append(list(ids))
        if isinstance(self.answer, Exception):
            raise self.answer
        return [self.answer]


@pytest.mark.parametrize('answer, expected', [
    (_Field(0, 0), 'none'),            # the real H100 on 580 (nvidia-smi -q: GPU Recovery Action None)
    (_Field(0, 2), 'node_reboot'),
    (_Field(0, 4), 'drain_and_reset'),
    (_Field(0, 42), 'unknown_42'),
    (_Field(3, 0), None),              # the value's own NVML_ERROR_NOT_SUPPORTED (a driver before 570)
])
def test_DH_12_recovery_action_from_nvml_field_230(monkeypatch, answer, expected):
    fake = _FieldNvml(answer)
    monkeypatch.setattr(nvml_probe, 'pynvml', fake)
    assert nvml_probe.recovery_action('h') == expected and fake.asked == [[230]]


def test_DH_12_recovery_action_not_none_is_critical(capture):
    info, extra = capture
    assert dc.diagnose(info, extra, checks=['recovery_action']) == []       # the real H100: none
    _h(info)['recovery_action'] = 'node_reboot'
    found = dc.diagnose(info, extra, checks=['recovery_action'])
    assert [(f['id'], f['severity']) for f in found] == [('gpu_recovery_action', 'critical')]
    assert 'node_reboot on GPU 0' in found[0]['summary'] and found[0]['remediation'].startswith('Drain the node and reboot')
    _h(info)['recovery_action'] = None                                      # not answered: no finding
    assert dc.diagnose(info, extra, checks=['recovery_action']) == []


def test_DH_13_xids_count_from_the_last_driver_load_or_recovery_of_that_gpu(capture):
    """An Xid finding stayed until the next boot even after the advised reset: now the Xids before the driver's
    last load ("NVRM: loading ...", as the real H100's log shows it) and, per GPU, before its Xid 154 back to None
    no longer count."""
    info, extra = capture
    loaded = [line for line in kernel_lines() if line.startswith('NVRM: loading NVIDIA')]
    assert loaded   # the real driver's line, from the capture
    log = (['NVRM: Xid (PCI:0000:97:00): 79, pid=1, name=python, GPU has fallen off the bus.'] + loaded
           + ['NVRM: Xid (PCI:0000:98:00): 48, pid=2, name=python, DBE'])
    assert [(e['pci'], e['xid']) for e in node_probe.xids_from_log(log)] == [('0000:98:00', 48)]
    # GPU 97 reset as advised: the driver's recovery action went back to None; GPU 98 still owes its reset
    log = ['NVRM: Xid (PCI:0000:97:00): 119, pid=5, name=x, Timeout after 45s of waiting for RPC response',
           'NVRM: Xid (PCI:0000:98:00): 95, pid=6, name=y, Uncontained error',
           'NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)',
           'NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)']
    xids = node_probe.xids_from_log(log)
    assert [(e['pci'], e['xid']) for e in xids] == [('0000:98:00', 95), ('0000:97:00', 154)]
    extra['kernel_xids'] = xids
    found = [(f['id'], f['severity']) for f in dc.diagnose(info, extra, checks=['xid'])]
    assert found == [('xid_95', 'critical'), ('xid_154', 'info')]


def test_DH_14_every_form_the_driver_prints_an_xid_in(capture):
    """The driver prints an Xid in three forms (kernel_rc.c): the device only, and on a MIG GPU with the GPU instance,
    or the GPU and compute instance. The MIG forms were not read at all (a MIG node's Xids went unseen)."""
    info, extra = capture
    log = ['NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=python, MMU Fault',
           'NVRM: Xid (PCI:0000:3b:00 GPU-I:02): 43, pid=8, name=python, Ch 00000008',
           'NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 48, pid=9, name=python, DBE',
           'NVRM: Xid (PCI:0000:3b:00): 62, 0000(0000) 00000000 00000000']
    xids = node_probe.xids_from_log(log)
    assert [(e['pci'], e['xid'], e.get('gpu_instance'), e.get('compute_instance')) for e in xids] == [
        ('0000:3b:00', 31, None, None), ('0000:3b:00', 43, 2, None), ('0000:3b:00', 48, 1, 0),
        ('0000:3b:00', 62, None, None)]
    assert xids[1]['text'] == 'pid=8, name=python, Ch 00000008'
    extra['kernel_xids'] = xids
    found = dict((f['id'], f) for f in dc.diagnose(info, extra, checks=['xid']))
    assert found['xid_48']['severity'] == 'critical'
    assert found['xid_48']['evidence'][0].startswith('kernel log: NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 48')


def test_DH_15_mig_or_ecc_mode_change_waiting_for_a_reset(capture):
    """A MIG or ECC mode change waits for a GPU reset (current differs from pending): the doctor said nothing."""
    info, extra = capture
    assert dc.diagnose(info, extra, checks=['pending_reset']) == []     # the real H100: ECC on/on, MIG off/off
    g = info['gpus'][0]
    g['mig_current'], g['mig_pending'] = False, True
    _h(info)['ecc_pending'] = False
    found = dc.diagnose(info, extra, checks=['pending_reset'])
    assert [(f['id'], f['severity']) for f in found] == [('gpu_reset_pending', 'warning')]
    assert found[0]['evidence'] == ['GPU 0 (NVIDIA H100 80GB HBM3, 00000000:00:06.0): MIG mode off now, on after a reset',
                                    'GPU 0 (NVIDIA H100 80GB HBM3, 00000000:00:06.0): ECC on now, off after a reset']


class _EccNvml(object):
    NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetEccMode(self, handle):  # noqa: N802 (NVML's name)
        return [1, 0]


def test_DH_15_ecc_pending_read_from_nvml(monkeypatch):
    monkeypatch.setattr(nvml_probe, 'pynvml', _EccNvml())
    h = nvml_probe.gpu_health('h')
    assert (h['ecc_enabled'], h['ecc_pending']) == (True, False)
