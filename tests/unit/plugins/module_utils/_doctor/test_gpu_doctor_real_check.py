# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the doctor answered on the real GPUs, one answer per strategy: a real H100 (driver 580.159.04, VM passthrough, no
container engine) in the read-only real-GPU check of 2026-11-26 (lab/bin/real-gpu-check.sh; fixtures/real_h100_580/
check-2026-11-26) and a real H200 (same driver, Firecracker VM passthrough, no container engine) in the device run of
2026-11-29 (lab/realgpu/device-run.sh; fixtures/real_h200_580): the checks judge the facts the real probe gathered
exactly as they did there, and the health the probe read through NVML on the real driver equals what pynvml answered
directly (nvml-health.json). The MIG catalogue's H200 table is compared with the profiles the real H200 answered."""
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NODE_STRATEGIES
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures')
# real GPU -> (fixture directory, the directory of its doctor answers)
REAL = {'h100': ('real_h100_580', 'check-2026-11-26'), 'h200': ('real_h200_580', '')}
CASES = [(gpu, strategy) for gpu in sorted(REAL) for strategy in NODE_STRATEGIES]


def _fix(gpu, *names):
    return os.path.join(FIXTURES, REAL[gpu][0], *names)


def _answer(strategy, gpu='h100'):
    with open(_fix(gpu, REAL[gpu][1], 'gpu_doctor-%s.json' % strategy)) as f:
        return json.load(f)


@pytest.mark.parametrize('gpu', sorted(REAL))
def test_every_strategy_was_asked_on_the_real_gpu(gpu):
    check = _fix(gpu, REAL[gpu][1])
    names = sorted(n[len('gpu_doctor-'):-len('.json')] for n in os.listdir(check) if n.startswith('gpu_doctor-'))
    assert names == sorted(NODE_STRATEGIES)


@pytest.mark.parametrize('gpu,strategy', CASES)
def test_real_gpu_answer_is_not_ready_and_says_why(gpu, strategy):
    answer = _answer(strategy, gpu)
    assert answer['healthy'] is False
    critical = [f['id'] for f in answer['findings'] if f['severity'] == 'critical']
    assert critical == ['container_engine_missing', 'nvidia_toolkit_missing']
    assert [f['id'] for f in answer['findings'] if f['severity'] == 'info'] == ['gpu_passthrough']
    assert [f['id'] for f in answer['findings'] if f['severity'] == 'warning'] == []
    assert answer['probe']['node']['hypervisor'] == 'kvm'


@pytest.mark.parametrize('gpu,strategy', CASES)
def test_checks_judge_the_real_probe_as_they_did_on_the_gpu(gpu, strategy):
    answer = _answer(strategy, gpu)
    extra = {'kernel_xids': [], 'kernel_log_readable': True}  # the node's kernel log had no Xid (kernel-nvrm.txt)
    found = dc.diagnose(answer['probe'], extra, strategy=strategy)
    assert [(f['id'], f['severity']) for f in found] == [(f['id'], f['severity']) for f in answer['findings']]


@pytest.mark.parametrize('gpu', sorted(REAL))
def test_real_probe_health_equals_the_raw_nvml_capture(gpu):
    health = _answer('exclusive', gpu)['probe']['gpus'][0]['health']
    with open(_fix(gpu, 'nvml-health.json')) as f:
        raw = json.load(f)
    rows = [int(x) for x in raw['remapped_rows']]
    assert health['remapped_rows'] == {'correctable': rows[0], 'uncorrectable': rows[1], 'pending': bool(rows[2]),
                                       'failure': bool(rows[3])}
    assert health['row_remapper_histogram'] == raw['row_remapper_histogram']
    assert health['ecc_uncorrected_volatile'] == raw['ecc_uncorrected_volatile']
    assert health['ecc_uncorrected_aggregate'] == raw['ecc_uncorrected_aggregate']
    assert health['pcie'] == {'gen': raw['pcie_gen_current'], 'width': raw['pcie_width_current'],
                              'max_gen': raw['pcie_gen_max'], 'max_width': raw['pcie_width_max'],
                              'gpu_max_gen': raw['pcie_gen_gpu_max'], 'replay': raw['pcie_replay_counter']}
    assert health['virtualization_mode'] == nvml_probe.VIRTUALIZATION_MODES[raw['virtualization_mode']]
    assert health['clocks_event_reasons'] == nvml_probe.clock_event_reason_names(raw['clocks_event_reasons'])


def test_real_h200_fabric_and_replay_as_the_raw_capture():
    """The H200's NVLink fabric info (v3: SUCCESS, state 0 = not supported, a PCIe-attached GPU on no NVSwitch) is read
    as not_supported and judged as nothing; its one PCIe replay since reset is no finding either."""
    health = _answer('exclusive', 'h200')['probe']['gpus'][0]['health']
    with open(_fix('h200', 'nvml-health.json')) as f:
        raw = json.load(f)
    assert (raw['fabric_info']['struct'], raw['fabric_info']['state'], raw['fabric_info']['status']) == (
        'c_nvmlGpuFabricInfo_v3_t', 0, 0)
    assert health['fabric'] == {'state': nvml_probe.FABRIC_STATES[raw['fabric_info']['state']],
                                'status': raw['fabric_info']['status'], 'status_text': None}
    assert health['pcie']['replay'] == raw['pcie_replay_counter'] == 1
    assert dc.diagnose(_answer('exclusive', 'h200')['probe'], {'kernel_xids': [], 'kernel_log_readable': True},
                       checks=['fabric', 'pcie']) == []


def _nvml_profiles(gpu):
    with open(_fix(gpu, 'nvml-raw.json')) as f:
        raw = json.load(f)['gpus'][0]
    return raw, [p for p in raw['gi_profiles'] if 'error' not in p['nvmlDeviceGetGpuInstanceProfileInfoV']]


def test_mig_catalogue_h200_is_what_the_real_h200_answered():
    """The catalogue's H200-141GB table (taken while NVML cannot answer) against the profiles the real H200 answered
    with MIG off: product by PCI id 0x2335, every profile's id, name, NVML profile index, instance count, slices and
    placements equal; the catalogue's memory_gib is the figure of the profile's name (NVIDIA names them 1g.18gb ..
    7g.141gb), NVML's memory is smaller (16384 MiB for 1g.18gb): the name's figure is never under NVML's GiB and at
    most 2.5 GiB over it (2g.35gb: 35 vs 32.5 GiB; whole GPU: 141 vs 140 GiB). SMs and engines are NVML's only (not
    in the catalogue)."""
    raw, answered = _nvml_profiles('h200')
    assert gpu_catalog.mig_catalog_match(raw['name'], raw['pci']['pciDeviceId']) == {
        'product': 'H200-141GB', 'matched_by': 'pci_device_id'}
    catalogue = dict((p['name'], p) for p in gpu_catalog.mig_profiles_for(raw['name'], raw['pci']['pciDeviceId']))
    assert sorted(catalogue) == sorted(p['nvmlDeviceGetGpuInstanceProfileInfoV']['name'][len('MIG '):]
                                       for p in answered)
    for row in answered:
        info = row['nvmlDeviceGetGpuInstanceProfileInfoV']
        cat = catalogue[info['name'][len('MIG '):]]
        assert (cat['id'], cat['nvml_profile_index'], cat['max_instances'], cat['slices']) == (
            info['id'], row['index'], info['instanceCount'], info['sliceCount']), info['name']
        assert cat['placements'] == [p['start'] for p in row['placements']], info['name']
        assert cat['placement_size'] == row['placements'][0]['size'], info['name']
        assert cat['name'].split('.')[1].startswith('%dgb' % cat['memory_gib'])
        assert 0 <= cat['memory_gib'] * 1024 - info['memorySizeMB'] <= 2.5 * 1024, info['name']
    # what NVML says of the profiles, for the record: SMs 16/16/26/32/60/64/132 and the media engines (+me: the OFA)
    sms = dict((r['nvmlDeviceGetGpuInstanceProfileInfoV']['name'], r['nvmlDeviceGetGpuInstanceProfileInfoV'])
               for r in answered)
    names = ('1g.18gb', '1g.18gb+me', '1g.35gb', '2g.35gb', '3g.71gb', '4g.71gb', '7g.141gb')
    assert [sms['MIG ' + n]['multiprocessorCount'] for n in names] == [16, 16, 26, 32, 60, 64, 132]
    assert [sms['MIG ' + n]['ofaCount'] for n in ('1g.18gb', '1g.18gb+me', '7g.141gb')] == [0, 1, 1]


def test_gpu_info_on_the_real_h200_took_nvmls_profiles():
    """gpu_info (mig_profiles: true) on the real H200 with MIG off listed NVML's profiles (source nvml, memory in MiB
    as NVML counts it), the catalogue named by PCI id."""
    with open(_fix('h200', 'gpu_info-mig_profiles.json')) as f:
        gpu = json.load(f)['gpus'][0]
    raw, answered = _nvml_profiles('h200')
    assert (gpu['mig_catalog'], gpu['mig_catalog_match'], gpu['mig_current']) == ('H200-141GB', 'pci_device_id', False)
    # the GPU as NVML names it: memory in MiB as NVML counts it (143771, not the 141 of the catalogue's key), the PCI
    # device and subsystem ids (0x2335, the id the catalogue and esxi_gpu know as the H200; subsystem 0x18bf)
    assert gpu['memory_total_mib'] == raw['mem_v2']['total'] // 2 ** 20 == 143771
    assert (gpu['pci_device_id'], gpu['pci_subsystem_id']) == ('0x%04x' % (int(raw['pci']['pciDeviceId'], 16) >> 16),
                                                               raw['pci']['pciSubSystemId']) == ('0x2335', '0x18bf10de')
    assert sorted((p['name'], p['id'], p['memory_mib'], p['source']) for p in gpu['mig_profiles']) == sorted(
        (r['nvmlDeviceGetGpuInstanceProfileInfoV']['name'][len('MIG '):], r['nvmlDeviceGetGpuInstanceProfileInfoV']['id'],
         r['nvmlDeviceGetGpuInstanceProfileInfoV']['memorySizeMB'], 'nvml') for r in answered)
