"""gpu_info against Debian's REAL libnvidia-ml1 (non-free) on a machine without the NVIDIA kernel module.

This is the true "driver not loaded" behaviour, not a simulation: the library is NVIDIA's own build from
Debian, fetched and unpacked by lab/nvidia_real/fetch.sh.
"""
import os
import subprocess

from conftest import ROOT, run_module


def _real_lib_dir():
    return subprocess.run(['bash', os.path.join(ROOT, 'lab/nvidia_real/fetch.sh')], check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]


def test_real_libnvidia_ml_reports_driver_not_loaded(collections_path):
    libdir = _real_lib_dir()
    assert os.path.exists(os.path.join(libdir, 'libnvidia-ml.so.1'))
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env={'LD_LIBRARY_PATH': libdir}, check=True)
    assert res.get('failed') is not True, res
    assert res['changed'] is False
    assert res['nvml']['status'] == 'driver_not_loaded'
    assert res['source'] == 'pci'
    assert res['node']['nvidia_module_loaded'] is False


def test_no_library_reports_not_installed(collections_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', env={'LD_LIBRARY_PATH': '/nonexistent'})
    assert res['nvml']['status'] == 'not_installed'
    assert res['gpu_count'] == len(res['node']['pci_gpus'])


def test_real_nvidia_smi_fails_the_same_way():
    _real_lib_dir()
    base = os.path.join(ROOT, 'lab/.build/nvidia_real/root/usr')
    smi = os.path.join(base, 'lib/nvidia/current/nvidia-smi')
    proc = subprocess.run([smi], capture_output=True, text=True,
                          env={'LD_LIBRARY_PATH': os.path.join(base, 'lib/x86_64-linux-gnu/nvidia/current')})
    assert proc.returncode == 9  # NVML_ERROR_DRIVER_NOT_LOADED
    assert "couldn't communicate with the NVIDIA driver" in proc.stdout
