"""lab/realgpu/real_gpu_check.py's comparison logic (the real-GPU check, lab/bin/real-gpu-check.sh) on WRITTEN samples
of nvidia-smi's output (lab/realgpu/samples, written from NVIDIA's nvsmi DTD; no GPU was available). Runs anywhere, fast.
"""
import copy
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'realgpu'))
import real_gpu_check as rgc  # noqa: E402

SAMPLES = os.path.join(ROOT, 'lab', 'realgpu', 'samples')


def sample(name):
    with open(os.path.join(SAMPLES, name)) as f:
        return f.read()


SMI = rgc.parse_smi_xml(sample('nvidia-smi-q-x.written.xml'))
CAPS = rgc.parse_compute_caps(sample('nvidia-smi-compute-cap.written.csv'))
LINKS = rgc.parse_nvlink_status(sample('nvidia-smi-nvlink-s.written.txt'))

# what gpu_info returns on that node (NVML's names and formats)
INFO = {'nvml': {'status': 'ok', 'driver_version': '570.195.03', 'cuda_driver_version': '12.8'}, 'gpu_count': 2,
        'gpus': [{'index': 0, 'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-0d5c6a0e-1111-2222-3333-444455556666',
                  'pci_bus_id': '00000000:18:00.0', 'pci_device_id': '0x2330', 'memory_total_mib': 81559,
                  'compute_capability': '9.0', 'nvlinks': 2, 'persistence_mode': True, 'mig_current': False},
                 {'index': 1, 'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-7a1e2b3c-aaaa-bbbb-cccc-ddddeeeeffff',
                  'pci_bus_id': '00000000:2A:00.0', 'pci_device_id': '0x2330', 'memory_total_mib': 81029,
                  'compute_capability': '9.0', 'nvlinks': 0, 'persistence_mode': True, 'mig_current': True}]}


def test_RGC_01_written_sample_parses_into_gpu_info_fields():
    assert SMI['driver_version'] == '570.195.03' and SMI['cuda_version'] == '12.8'
    g0, g1 = SMI['gpus']
    assert g0['pci_bus_id'] == '0000:18:00.0' and g0['pci_device_id'] == '0x2330'
    assert (g0['memory_total_mib'], g0['memory_reserved_mib']) == (81559, 530)
    assert (g0['mig_current'], g1['mig_current'], g0['persistence_mode']) == (False, True, True)
    assert g1['applications_clocks'] == (None, None) and g0['applications_clocks'] == ('1980 MHz', '2619 MHz')
    assert CAPS == {'0000:18:00.0': '9.0', '0000:2a:00.0': '9.0'}
    assert LINKS == {'GPU-0d5c6a0e-1111-2222-3333-444455556666': 2, 'GPU-7a1e2b3c-aaaa-bbbb-cccc-ddddeeeeffff': 0}


def test_RGC_01_every_field_agrees_on_a_matching_node():
    rows = rgc.compare(INFO, SMI, CAPS, LINKS)
    assert [r for r in rows if not r['ok']] == []
    fields = set(r['field'] for r in rows)
    assert fields == {'nvml.status', 'driver_version', 'cuda_driver_version', 'gpu_count', 'pci_bus_id', 'name', 'uuid',
                      'pci_device_id', 'memory_total_mib', 'compute_capability', 'nvlinks', 'mig_current',
                      'persistence_mode'}
    # GPU 1's NVML total excludes the reserved memory (81559 - 530), GPU 0's does not: both agree
    assert len([r for r in rows if r['field'] == 'memory_total_mib' and r['ok']]) == 2


@pytest.mark.parametrize('path,value,field', [
    (('gpus', 0, 'uuid'), 'GPU-00000000-0000-0000-0000-000000000000', 'uuid'),
    (('gpus', 1, 'mig_current'), False, 'mig_current'),
    (('gpus', 0, 'persistence_mode'), False, 'persistence_mode'),
    (('gpus', 0, 'pci_device_id'), '0x2331', 'pci_device_id'),
    (('gpus', 0, 'memory_total_mib'), 40000, 'memory_total_mib'),
    (('gpus', 1, 'compute_capability'), '8.0', 'compute_capability'),
    (('gpus', 0, 'nvlinks'), 18, 'nvlinks'),
    (('nvml', 'driver_version'), '550.127.05', 'driver_version'),
    (('nvml', 'cuda_driver_version'), '12.4', 'cuda_driver_version'),
    (('gpu_count',), 3, 'gpu_count'),
])
def test_RGC_02_a_difference_is_reported_on_its_field(path, value, field):
    info = copy.deepcopy(INFO)
    node = info
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    bad = [r for r in rgc.compare(info, SMI, CAPS, LINKS) if not r['ok']]
    assert [r['field'] for r in bad] == [field]
    assert bad[0]['gpu_info'] == value


def test_RGC_02_a_gpu_only_one_side_sees_is_reported():
    info = copy.deepcopy(INFO)
    info['gpus'] = info['gpus'][:1]
    info['gpu_count'] = 1
    bad = [r for r in rgc.compare(info, SMI, CAPS, LINKS) if not r['ok']]
    assert [(r['field'], r['nvidia_smi']) for r in bad] == [('gpu_count', 2), ('pci_bus_id', '0000:2a:00.0')]


def test_RGC_03_the_gpu_state_must_not_change():
    before = rgc.state_of(SMI)
    after_smi = copy.deepcopy(SMI)
    assert rgc.state_changes(before, rgc.state_of(after_smi)) == []
    after_smi['gpus'][1]['mig_pending'] = False
    after_smi['gpus'][0]['persistence_mode'] = False
    changes = rgc.state_changes(before, rgc.state_of(after_smi))
    assert len(changes) == 2 and changes[0].startswith('0000:18:00.0') and changes[1].startswith('0000:2a:00.0')


def test_RGC_03_report_and_refusal_on_the_simulator(monkeypatch):
    rows = rgc.compare(INFO, SMI, CAPS, LINKS)
    text = rgc.render(rows, {'healthy': True, 'findings': []}, {'gpus': 2, 'times_ms': [1.0, 2.0, 3.0]}, [], 'node1')
    assert 'differ' in text and '0 differ' in text and 'median 2.00 ms' in text and 'unchanged' in text
    monkeypatch.setenv('NVML_SIM_INVENTORY', '/x.json')
    assert rgc.main(['--out', '/nonexistent']) == 2


# ----------------------------------- the real captures (lab/realgpu/samples/h100-580, lab/realgpu/samples/h200-580)
# capture -> the GPU-instance profiles its GPU answered with MIG off
REAL_PROFILES = {
    'h100-580': ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb', '3g.40gb', '4g.40gb', '7g.80gb'],
    'h200-580': ['1g.18gb', '1g.18gb+me', '1g.35gb', '2g.35gb', '3g.71gb', '4g.71gb', '7g.141gb'],
}


def _real(capture, name):
    with open(os.path.join(SAMPLES, capture, name)) as f:
        return f.read()


@pytest.mark.parametrize('capture', sorted(REAL_PROFILES))
def test_RGC_real_capture_every_field_agrees(capture):
    import json
    smi = rgc.parse_smi_xml(_real(capture, 'nvidia-smi-q-x.xml'))
    info = json.loads(_real(capture, 'gpu_info-mig_profiles.json'))
    caps = links = None
    if os.path.exists(os.path.join(SAMPLES, capture, 'nvidia-smi-compute-cap.csv')):
        # the H200 run kept the compute capability query; `nvidia-smi nvlink -s` printed nothing (no NVLink)
        caps, links = rgc.parse_compute_caps(_real(capture, 'nvidia-smi-compute-cap.csv')), rgc.parse_nvlink_status('')
    rows = rgc.compare(info, smi, caps, links)
    assert [r for r in rows if not r['ok']] == [] and len(rows) == (13 if caps else 11)
    assert smi['driver_version'] == '580.159.04' and smi['gpus'][0]['mig_current'] is False


@pytest.mark.parametrize('capture', sorted(REAL_PROFILES))
def test_RGC_real_capture_nvml_profiles_match_the_catalogue(capture):
    import json
    info = json.loads(_real(capture, 'gpu_info-mig_profiles.json'))
    rgc._catalog_profiles(info, rgc._collections_path(__import__('tempfile').mkdtemp()))
    rows = rgc.compare_profiles(info)
    assert sorted(r['profile'] for r in rows) == REAL_PROFILES[capture]
    assert [r for r in rows if not r['ok']] == []


def test_RGC_real_h200_report_is_the_checks_own():
    """The H200 run's report (lab/bin/real-gpu-check.sh on the real GPU) says what the tests above recompute."""
    text = _real('h200-580', 'report.md')
    assert '13 field(s) compared, 0 differ' in text and '7 compared, 0 differ' in text
    assert 'median 23.69 ms (min 20.58, max 37.84)' in text and 'unchanged' in text


def test_RGC_modules_run_without_the_ansible_cli(tmp_path):
    """Item R: the check runs gpu_info and gpu_doctor with python alone (ansible-core importable, no ansible CLI on
    PATH, no callback collection), here against the simulator answering as the real H100."""
    import subprocess
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    env = dict(os.environ, PATH='/usr/bin:/bin', LD_LIBRARY_PATH=os.path.join(ROOT, 'lab', '.build', 'nvml_sim'),
               NVML_SIM_INVENTORY=os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', 'h100-real-580.json'),
               NVML_SIM_STATE=str(tmp_path / 'state.json'))
    env.pop('ANSIBLE_COLLECTIONS_PATH', None)
    cpath = rgc._collections_path(str(tmp_path / 'c'))
    info = rgc._module('gpu_info', {'mig_profiles': True}, cpath, env)
    assert info.get('failed') is not True, info
    assert info['gpus'][0]['name'] == 'NVIDIA H100 80GB HBM3'
    assert [p['source'] for p in info['gpus'][0]['mig_profiles']] == ['nvml'] * 7
    doctor = rgc._module('gpu_doctor', {'strategy': 'mig', 'kernel_log': str(tmp_path / 'none')}, cpath, env)
    assert doctor.get('failed') is not True, doctor
    assert doctor['probe']['gpus'][0]['health']['virtualization_mode'] == 'passthrough'


def test_RGC_probe_snippet_is_the_benchmarks_without_importing_it():
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'bench'))
    import gpu_probe  # noqa: E402
    assert rgc.probe_snippet() == gpu_probe.PROBE_SNIPPET
