"""gpu_info end to end: the real module, run by Ansible, through the real nvidia-ml-py bindings, against
the NVML simulator loaded with every shipped inventory. Expected values are read from the inventory
files themselves, so a new inventory is covered without editing this file."""
import glob
import json
import os
import subprocess

import pytest

from conftest import ROOT, run_module

SIM_DIR = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
INVENTORIES = sorted(glob.glob(os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', '*.json')))


@pytest.fixture(scope='module', autouse=True)
def built_simulator():
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    assert os.path.exists(os.path.join(SIM_DIR, 'libnvidia-ml.so.1'))


def _env(inventory, state, errors=None):
    env = {'LD_LIBRARY_PATH': SIM_DIR, 'NVML_SIM_INVENTORY': inventory, 'NVML_SIM_STATE': str(state)}
    if errors:
        env['NVML_SIM_ERRORS'] = errors
    return env


def test_all_inventories_shipped():
    names = {os.path.basename(p)[:-5] for p in INVENTORIES}
    assert {'t4', 'v100', 'hgx-a100-80gb', 'h100-mig', 'mixed', 'p100', 'bench-16'} <= names


@pytest.mark.parametrize('inventory', INVENTORIES, ids=lambda p: os.path.basename(p)[:-5])
def test_gpu_info_reports_the_inventory(collections_path, tmp_path, inventory):
    with open(inventory) as f:
        want = json.load(f)
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env=_env(inventory, tmp_path / 's.json'),
                     check=True)
    assert res.get('failed') is not True, res
    assert res['changed'] is False
    assert res['nvml']['status'] == 'ok'
    assert res['source'] == 'nvml'
    assert res['nvml']['driver_version'] == want['driver_version']
    cuda = want['cuda_driver_version']
    assert res['nvml']['cuda_driver_version'] == '%d.%d' % (cuda // 1000, (cuda % 1000) // 10)
    assert res['gpu_count'] == len(want['gpus'])
    for got, exp in zip(res['gpus'], want['gpus']):
        assert got['name'] == exp['name']
        assert got['uuid'] == exp['uuid']
        assert got['pci_bus_id'].lower() == exp['pci_bus_id'].lower()
        assert got['pci_device_id'] == '0x%04x' % (int(exp['pci_device_id'], 16) >> 16)
        assert got['memory_total_mib'] == exp['memory_total_mib']
        assert got['compute_capability'] == exp['compute_capability']
        assert got['bar1_total_mib'] == exp['bar1_total_mib']
        assert got['mig_capable'] is bool(exp.get('mig_capable'))
        if exp.get('mig_capable'):
            assert got['mig_current'] is bool(exp.get('mig_mode'))
            assert got['mig_profiles'], 'a MIG-capable GPU must list its profiles'
        if want.get("nvswitches"):
            assert got["nvswitch_links"] >= 1
        if exp.get("mig_mode") and exp.get("mig_instances"):
            assert got['mig_devices'], 'MIG enabled with instances must list MIG devices'
            assert all(d['uuid'].startswith('MIG-') for d in got['mig_devices'])
    assert res['node']['nvswitch_count'] == len(want.get('nvswitches', []))
    assert res['node']['fabricmanager_required'] is bool(want.get('nvswitches'))
    labels = res['labels']
    assert labels['nvidia.com/gpu.count'] == str(len(want['gpus']))
    assert labels['nvidia.com/gpu.product'] == want['gpus'][0]['name'].replace(' ', '-')


def test_mps_refused_on_pascal_names_the_gpu(collections_path, tmp_path):
    inv = os.path.join(ROOT, 'lab/nvml_sim/inventories/mixed.json')
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env=_env(inv, tmp_path / 's.json'))
    mps = res['sharing']['mps']
    assert mps['allowed'] is False
    assert 'Tesla P100-PCIE-16GB' in mps['reason'] and '6.0' in mps['reason']
    assert res['sharing']['mig']['allowed'] is False
    assert res['sharing']['time-slicing']['allowed'] is True


def test_h100_mig_devices_and_profiles_from_nvml(collections_path, tmp_path):
    inv = os.path.join(ROOT, 'lab/nvml_sim/inventories/h100-mig.json')
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env=_env(inv, tmp_path / 's.json'))
    g = res['gpus'][0]
    assert g['mig_current'] is True
    assert {p['source'] for p in g['mig_profiles']} == {'nvml'}
    assert '3g.40gb' in {p['name'] for p in g['mig_profiles']}
    assert len(g['mig_devices']) >= 1


@pytest.mark.parametrize('error,status', [
    ('nvmlInit=DRIVER_NOT_LOADED', 'driver_not_loaded'),
    ('nvmlInit=LIB_RM_VERSION_MISMATCH', 'version_mismatch'),
    ('nvmlInit=NO_PERMISSION', 'no_permission'),
])
def test_init_errors_fall_back_to_pci(collections_path, tmp_path, error, status):
    inv = os.path.join(ROOT, 'lab/nvml_sim/inventories/t4.json')
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env=_env(inv, tmp_path / 's.json', error))
    assert res.get('failed') is not True, res
    assert res['nvml']['status'] == status
    assert res['source'] == 'pci'


def test_lost_gpu_is_reported_and_others_still_probed(collections_path, tmp_path):
    inv = os.path.join(ROOT, 'lab/nvml_sim/inventories/v100.json')
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env=_env(inv, tmp_path / 's.json', '*:1=GPU_IS_LOST'))
    assert res['nvml']['status'] == 'ok'
    assert res['gpus'][1]['error'] == 'gpu_lost'
    assert res['gpus'][0]['name'] == 'Tesla V100-SXM2-16GB'


def test_not_supported_getters_leave_gaps_not_failures(collections_path, tmp_path):
    inv = os.path.join(ROOT, 'lab/nvml_sim/inventories/t4.json')
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info',
                     env=_env(inv, tmp_path / 's.json', 'nvmlDeviceGetBAR1MemoryInfo:0=NOT_SUPPORTED'))
    assert res['gpus'][0]['bar1_total_mib'] is None
    assert res['gpus'][0]['name'] == 'Tesla T4'
