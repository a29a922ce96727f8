# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the NVML probe's error handling with a stand-in pynvml object.

The probe is tested against the real nvidia-ml-py bindings and the lab's NVML simulator in
lab/tests/integration/test_gpu_info_sim.py; here only the mapping of failures is pinned down.
"""
import types

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe


class NVMLError(Exception):
    pass


def _fake(init_error=None, name_error=None):
    m = types.SimpleNamespace()
    m.NVMLError = NVMLError
    classes = {}
    for cls in ('NVMLError_DriverNotLoaded', 'NVMLError_LibRmVersionMismatch', 'NVMLError_LibraryNotFound',
                'NVMLError_NoPermission', 'NVMLError_GpuIsLost', 'NVMLError_NotSupported', 'NVMLError_Unknown'):
        classes[cls] = type(cls, (NVMLError,), {})
        setattr(m, cls, classes[cls])
    m.NVML_FEATURE_ENABLED = 1
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.NVML_GPU_INSTANCE_PROFILE_COUNT = 0
    calls = []

    def init():
        calls.append('init')
        if init_error:
            raise classes[init_error]('init failed')
    m.nvmlInit = init
    m.nvmlShutdown = lambda: calls.append('shutdown')
    m.nvmlSystemGetDriverVersion = lambda: b'535.183.01'
    m.nvmlSystemGetNVMLVersion = lambda: '12.535.183.01'
    m.nvmlSystemGetCudaDriverVersion = lambda: 12020
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i

    def name(h):
        if name_error and h == 1:
            raise classes[name_error]('lost')
        return 'Tesla T4'
    m.nvmlDeviceGetName = name
    m.nvmlDeviceGetUUID = lambda h: 'GPU-%d' % h
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=b'00000000:3B:00.0', pciDeviceId=0x1EB810DE,
                                                             pciSubSystemId=0x12A210DE)
    m.nvmlMemory_v2 = 0x02000028
    m.nvmlDeviceGetMemoryInfo = lambda h, version=None: types.SimpleNamespace(total=15360 * 1024 * 1024)
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (7, 5)
    m.nvmlDeviceGetArchitecture = lambda h: 6
    m.nvmlDeviceGetBAR1MemoryInfo = lambda h: types.SimpleNamespace(bar1Total=256 * 1024 * 1024)
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetComputeMode = lambda h: 0

    def mig(h):
        raise classes['NVMLError_NotSupported']('no MIG')
    m.nvmlDeviceGetMigMode = mig
    m.calls = calls
    return m


@pytest.mark.parametrize('error,status', [
    ('NVMLError_DriverNotLoaded', 'driver_not_loaded'),
    ('NVMLError_LibRmVersionMismatch', 'version_mismatch'),
    ('NVMLError_LibraryNotFound', 'not_installed'),
    ('NVMLError_NoPermission', 'no_permission'),
    ('NVMLError_Unknown', 'error'),
])
def test_init_failures_are_reported_not_raised(monkeypatch, error, status):
    monkeypatch.setattr(nvml_probe, 'pynvml', _fake(init_error=error))
    monkeypatch.setattr(nvml_probe, 'HAS_PYNVML', True)
    result = nvml_probe.probe()
    assert result['status'] == status
    assert result['gpus'] == []
    assert result['error']


def test_missing_bindings(monkeypatch):
    monkeypatch.setattr(nvml_probe, 'HAS_PYNVML', False)
    assert nvml_probe.probe()['status'] == 'bindings_missing'


def test_lost_gpu_is_marked_and_others_probed(monkeypatch):
    fake = _fake(name_error='NVMLError_GpuIsLost')
    monkeypatch.setattr(nvml_probe, 'pynvml', fake)
    monkeypatch.setattr(nvml_probe, 'HAS_PYNVML', True)
    result = nvml_probe.probe()
    assert result['status'] == 'ok'
    assert result['gpus'][1] == {'index': 1, 'error': 'gpu_lost'}
    g = result['gpus'][0]
    assert g['name'] == 'Tesla T4'
    assert g['pci_device_id'] == '0x1eb8'
    assert g['memory_total_mib'] == 15360
    assert g['bar1_total_mib'] == 256
    assert g['architecture'] == 'turing'
    assert g['mig_capable'] is False
    assert result['driver_version'] == '535.183.01'
    assert result['cuda_driver_version'] == '12.2'
    assert fake.calls == ['init', 'shutdown']


def test_DRV_27_old_binding_without_calls_answers_instead_of_traceback(monkeypatch):
    # Ubuntu 22.04's python3-pynvml (API of 2015): no compute capability, MIG, architecture or CUDA version calls
    fake = _fake()
    for name in ('nvmlDeviceGetCudaComputeCapability', 'nvmlDeviceGetMigMode', 'nvmlDeviceGetArchitecture',
                 'nvmlSystemGetCudaDriverVersion', 'NVML_DEVICE_MIG_ENABLE'):
        delattr(fake, name)
    monkeypatch.setattr(nvml_probe, 'pynvml', fake)
    monkeypatch.setattr(nvml_probe, 'HAS_PYNVML', True)
    result = nvml_probe.probe()
    assert result['status'] == 'ok'
    assert result['cuda_driver_version'] is None
    assert result['gpus'][0]['compute_capability'] is None and result['gpus'][0]['mig_capable'] is False
    assert fake.calls == ['init', 'shutdown']


def test_DRV_27_binding_breaking_inside_a_call_reports_bindings_outdated(monkeypatch):
    fake = _fake()

    def old_memory(h, version=None):
        raise AttributeError("module 'pynvml' has no attribute 'c_nvmlMemory_v2_t'")
    fake.nvmlDeviceGetMemoryInfo = old_memory
    monkeypatch.setattr(nvml_probe, 'pynvml', fake)
    monkeypatch.setattr(nvml_probe, 'HAS_PYNVML', True)
    monkeypatch.setattr(nvml_probe, 'bindings_version', lambda: '7.352.0')
    result = nvml_probe.probe()
    assert result['status'] == 'bindings_outdated'
    assert '7.352.0' in result['error'] and 'nvidia-ml-py' in result['error']
    assert result['gpus'] == []
    assert fake.calls == ['init', 'shutdown']


def test_health_with_debians_binding_answers_instead_of_bindings_outdated(monkeypatch):
    """Debian's python3-pynvml 11.525.112 takes nvmlDeviceGetGspFirmwareVersion(handle, version) with a buffer: the
    health probe raised TypeError, the whole probe said bindings_outdated with no GPU, and the doctor judged
    "strategy impossible: no NVIDIA GPU found" on every lab node (the demo's node layer gated all three). A health
    call the binding answers differently now gives None for that field; the GPUs stay."""
    fake = _fake()
    fake.NVML_GSP_FIRMWARE_VERSION_BUF_SIZE = 0x40

    def gsp(handle, version):
        version.value = b'535.183.01'
        return 0
    fake.nvmlDeviceGetGspFirmwareVersion = gsp

    def differs(*args):
        raise TypeError('takes 2 positional arguments but 1 was given')
    fake.nvmlDeviceGetEccMode = differs
    fake.nvmlDeviceGetVirtualizationMode = lambda h: 1
    monkeypatch.setattr(nvml_probe, 'pynvml', fake)
    monkeypatch.setattr(nvml_probe, 'HAS_PYNVML', True)
    result = nvml_probe.probe(include_mig_profiles=False, include_health=True)
    assert result['status'] == 'ok', result.get('error')
    health = result['gpus'][0]['health']
    assert health['gsp_firmware_version'] == '535.183.01'
    assert health['ecc_enabled'] is None and health['virtualization_mode'] == 'passthrough'
