"""gpu_doctor end to end against the NVML simulator and Debian's real libnvidia-ml (through Ansible)."""
import os
import subprocess

import pytest

from conftest import ROOT, run_module

SIM_DIR = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
INV = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')


@pytest.fixture(scope='module', autouse=True)
def built_simulator():
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)


def _env(inv, tmp_path, errors=None):
    env = {'LD_LIBRARY_PATH': SIM_DIR, 'NVML_SIM_INVENTORY': os.path.join(INV, inv + '.json'),
           'NVML_SIM_STATE': str(tmp_path / 'state.json')}
    if errors:
        env['NVML_SIM_ERRORS'] = errors
    return env


def _ids(res):
    return [f['id'] for f in res['findings']]


def test_mps_on_pascal_is_impossible(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'strategy=mps checks=strategy',
                     env=_env('mixed', tmp_path), check=True)
    assert res['changed'] is False
    assert _ids(res) == ['strategy_impossible']
    assert 'Tesla P100-PCIE-16GB' in res['findings'][0]['evidence'][0]
    assert res['healthy'] is False
    assert 'strategy_impossible' in res['table']


def test_mps_on_t4_is_fine(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'strategy=mps checks=strategy,version_mismatch',
                     env=_env('t4', tmp_path))
    assert res['findings'] == []


def test_version_mismatch_from_nvml(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'checks=version_mismatch',
                     env=_env('t4', tmp_path, 'nvmlInit=LIB_RM_VERSION_MISMATCH'))
    assert _ids(res) == ['nvml_version_mismatch']
    assert res['findings'][0]['severity'] == 'critical'


def test_persistence_off_is_a_warning(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'checks=persistence', env=_env('mixed', tmp_path))
    assert _ids(res) == ['persistence_mode_off']
    assert res['counts'] == {'critical': 0, 'warning': 1, 'info': 0}


def test_fail_on_critical_fails_the_task(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'strategy=mig checks=strategy fail_on=critical',
                     env=_env('t4', tmp_path))
    assert res['failed'] is True
    assert 'strategy_impossible' in res['msg']


def test_real_library_without_gpus_finds_nothing_to_blame(collections_path):
    libdir = subprocess.run(['bash', os.path.join(ROOT, 'lab/nvidia_real/fetch.sh')], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()[-1]
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'checks=driver,version_mismatch',
                     env={'LD_LIBRARY_PATH': libdir})
    assert res['probe']['nvml']['status'] == 'driver_not_loaded'
    # this machine has no NVIDIA PCI device: "driver not loaded" is no problem here
    assert res['findings'] == []


def test_hgx_without_fabricmanager_is_critical(collections_path, tmp_path):
    # the hgx inventory's GPUs reach 6 NVSwitches over NVLink; this machine has no fabricmanager unit
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'checks=fabricmanager',
                     env=_env('hgx-a100-80gb', tmp_path))
    assert _ids(res) == ['fabricmanager_missing']
    assert 'NVSwitch devices: 6' in res['findings'][0]['evidence']
    assert '535.183.01' in res['findings'][0]['remediation']


def test_no_fabricmanager_needed_without_nvswitch(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', 'checks=fabricmanager', env=_env('t4', tmp_path))
    assert res['findings'] == []


def test_cluster_checks_end_to_end(collections_path, tmp_path):
    """Scheduler config vs version, an extender that does not answer, and the known-bad gpushare image."""
    import socket
    cfg = tmp_path / 'scheduler-config.yaml'
    cfg.write_text('apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n')
    srv = socket.socket()
    srv.bind(('127.0.0.1', 0))
    srv.listen(1)
    live = 'http://127.0.0.1:%d/gpushare-scheduler' % srv.getsockname()[1]
    probe = socket.socket()
    probe.bind(('127.0.0.1', 0))
    dead = 'http://127.0.0.1:%d/gpushare-scheduler' % probe.getsockname()[1]
    probe.close()  # nothing listens there any more
    try:
        args = ('checks=scheduler_config,extender,cluster_images kubernetes_version=v1.29.4 scheduler_config_path=%s '
                'extender_urls=%s,%s cluster_images=registry.example.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a'
                % (cfg, live, dead))
        res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor', args, env=_env('t4', tmp_path))
    finally:
        srv.close()
    assert sorted(_ids(res)) == ['extender_unreachable', 'gpushare_extender_bad_image', 'scheduler_config_api_removed']
    unreachable = [f for f in res['findings'] if f['id'] == 'extender_unreachable']
    assert len(unreachable) == 1 and dead in unreachable[0]['evidence'][0]
    cfg.write_text('apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n')
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor',
                     'checks=scheduler_config kubernetes_version=v1.29.4 scheduler_config_path=%s' % cfg,
                     env=_env('t4', tmp_path))
    assert res['findings'] == []
