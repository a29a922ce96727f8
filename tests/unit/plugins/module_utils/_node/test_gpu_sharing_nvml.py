# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NvmlBackend with a stand-in pynvml object (the real bindings are exercised in lab/tests/integration/test_gpu_sharing_sim.py)."""
import ctypes
import types

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_nvml import NvmlBackend


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class Placement(ctypes.Structure):
    _fields_ = [('start', ctypes.c_uint), ('size', ctypes.c_uint)]


def fake_nvml(mig):
    """One GPU; with ``mig`` an A100 with MIG on and one 3g.40gb GI (id 1) holding a full CI, else a T4."""
    m = types.SimpleNamespace(NVMLError=NVMLError, NVML_FEATURE_ENABLED=1, NVML_FEATURE_DISABLED=0,
                              NVML_DEVICE_MIG_ENABLE=1, NVML_DEVICE_MIG_DISABLE=0, NVML_SUCCESS=0,
                              NVML_ERROR_NOT_SUPPORTED=3, NVML_GPU_INSTANCE_PROFILE_COUNT=3,
                              NVML_COMPUTE_INSTANCE_PROFILE_COUNT=3, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED=0,
                              c_nvmlGpuInstancePlacement_t=Placement, c_nvmlGpuInstance_t=ctypes.c_void_p,
                              c_nvmlComputeInstance_t=ctypes.c_void_p)
    calls = []
    m.calls = calls
    m.nvmlDeviceGetHandleByIndex = lambda i: 'h%d' % i
    m.nvmlDeviceGetName = lambda h: b'NVIDIA A100-SXM4-80GB' if mig else b'Tesla T4'
    m.nvmlDeviceGetUUID = lambda h: 'GPU-0'
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(pciDeviceId=0x20B210DE)
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (8, 0) if mig else (7, 5)
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetComputeMode = lambda h: 3

    def mig_mode(h):
        if not mig:
            raise NVMLError_NotSupported('Not Supported')
        return (1, 1)
    m.nvmlDeviceGetMigMode = mig_mode
    # GI profile index -> (id, name, slices, instances, placement starts, size)
    gi_profiles = {0: (19, b'MIG 1g.10gb', 1, 7, [0, 1, 2, 3, 4, 5, 6], 1), 2: (9, b'MIG 3g.40gb', 3, 2, [0, 4], 4)}

    def profile_info(h, idx):
        if idx not in gi_profiles:
            raise NVMLError_NotSupported('Not Supported')
        p = gi_profiles[idx]
        return types.SimpleNamespace(id=p[0], name=p[1], sliceCount=p[2], instanceCount=p[3], memorySizeMB=10240 * p[2])
    m.nvmlDeviceGetGpuInstanceProfileInfo = profile_info

    def placements(h, pid, arr, count):
        p = [v for v in gi_profiles.values() if v[0] == pid][0]
        for i, st in enumerate(p[4]):
            arr[i].start, arr[i].size = st, p[5]
        count._obj.value = len(p[4])
    m.nvmlDeviceGetGpuInstancePossiblePlacements = placements

    def gpu_instances(h, pid, arr, count):
        count._obj.value = 0
        if pid == 9:
            arr[0] = 1
            count._obj.value = 1
    m.nvmlDeviceGetGpuInstances = gpu_instances
    m.nvmlGpuInstanceGetInfo = lambda gi: types.SimpleNamespace(id=gi, profileId=9,
                                                                placement=types.SimpleNamespace(start=0, size=4))

    def ci_profile(gi, idx, eng):
        slices = {0: 1, 1: 2, 2: 3}[idx]
        name = b'MIG 3g.40gb' if slices == 3 else ('MIG %dc.3g.40gb' % slices).encode()
        return types.SimpleNamespace(id=idx, sliceCount=slices, name=name)
    m.nvmlGpuInstanceGetComputeInstanceProfileInfo = ci_profile

    def compute_instances(gi, cpid, arr, count):
        count._obj.value = 0
        if cpid == 2:
            arr[0] = 100
            count._obj.value = 1
    m.nvmlGpuInstanceGetComputeInstances = compute_instances
    m.nvmlComputeInstanceGetInfo = lambda ci: types.SimpleNamespace(id=0 if ci in (100, 'ci') else ci, profileId=2)
    m.nvmlDeviceSetPersistenceMode = lambda h, v: calls.append(('pm', h, v))
    m.nvmlDeviceSetComputeMode = lambda h, v: calls.append(('cm', h, v))
    m.nvmlDeviceSetMigMode = lambda h, v: calls.append(('mig', h, v)) or 3
    m.nvmlDeviceGetGpuInstanceById = lambda h, gid: gid
    m.nvmlGpuInstanceGetComputeInstanceById = lambda gi, cid: 'ci'
    m.nvmlComputeInstanceDestroy = lambda ci: calls.append(('destroy_ci', ci))
    m.nvmlGpuInstanceDestroy = lambda gi: calls.append(('destroy_gi', gi))

    def create_with_placement(h, pid, placement):
        calls.append(('create_gi', pid, placement._obj.start, placement._obj.size))
        return 2
    m.nvmlDeviceCreateGpuInstanceWithPlacement = create_with_placement
    m.nvmlDeviceCreateGpuInstance = lambda h, pid: calls.append(('create_gi', pid)) or 3
    m.nvmlGpuInstanceCreateComputeInstance = lambda gi, cpid: calls.append(('create_ci', gi, cpid)) or 'ci'
    return m


def test_gpu_without_mig():
    g = NvmlBackend(fake_nvml(False)).gpu(0)
    assert g['name'] == 'Tesla T4' and g['compute_capability'] == (7, 5)
    assert g['mig_capable'] is False and g['mig_profiles'] == {} and g['mig_instances'] == []
    assert g['persistence_mode'] is True and g['compute_mode'] == 'exclusive_process'


def test_gpu_with_mig_reads_profiles_and_instances():
    g = NvmlBackend(fake_nvml(True)).gpu(0)
    assert g['mig_profile_source'] == 'nvml'
    assert g['mig_profiles']['3g.40gb'] == {'name': '3g.40gb', 'id': 9, 'index': 2, 'slices': 3, 'max_instances': 2,
                                            'memory_mib': 30720, 'placements': [0, 4], 'placement_size': 4}
    assert g['mig_instances'] == [{'id': 1, 'profile': '3g.40gb', 'profile_id': 9, 'start': 0, 'size': 4,
                                   'cis': [{'id': 0, 'profile_id': 2, 'slices': 3, 'name': '3g.40gb', 'full': True}]}]


def test_changes_map_to_nvml_calls():
    nv = fake_nvml(True)
    be = NvmlBackend(nv)
    be.set_persistence_mode(0, False)
    be.set_compute_mode(0, 'prohibited')
    assert be.set_mig_mode(0, True) is False          # activation status IN_USE: pending
    be.destroy_compute_instance(0, 1, 0)
    be.destroy_gpu_instance(0, 1)
    prof = be.gpu(0)['mig_profiles']['3g.40gb']
    assert be.create_gpu_instance(0, prof, 4) == 2
    assert be.create_full_compute_instance(0, 2, 3) == 0
    assert nv.calls == [('pm', 'h0', 0), ('cm', 'h0', 2), ('mig', 'h0', 1), ('destroy_ci', 'ci'), ('destroy_gi', 1),
                        ('create_gi', 9, 4, 4), ('create_ci', 2, 2)]


def _real_h200_nvml():
    """A stand-in pynvml answering as the real NVIDIA H200 on driver 580.159.04 did with MIG disabled
    (fixtures/real_h200_580/nvml-raw.json): MIG mode off, yet every GPU-instance profile and its placements answered."""
    import json
    import os
    fix = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'real_h200_580')
    with open(os.path.join(fix, 'nvml-raw.json')) as f:
        raw = json.load(f)['gpus'][0]
    m = fake_nvml(True)
    m.NVML_GPU_INSTANCE_PROFILE_COUNT = 17
    m.nvmlDeviceGetName = lambda h: raw['name'].encode()
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(pciDeviceId=int(raw['pci']['pciDeviceId'], 16))
    m.nvmlDeviceGetMigMode = lambda h: (0, 0)
    rows = dict((p['index'], p) for p in raw['gi_profiles'] if 'error' not in p['nvmlDeviceGetGpuInstanceProfileInfo'])

    def profile_info(h, idx):
        if idx not in rows:
            raise NVMLError_NotSupported('Not Supported')
        return types.SimpleNamespace(**rows[idx]['nvmlDeviceGetGpuInstanceProfileInfo'])
    m.nvmlDeviceGetGpuInstanceProfileInfo = profile_info

    def placements(h, pid, arr, count):
        row = [p for p in rows.values() if p['nvmlDeviceGetGpuInstanceProfileInfo']['id'] == pid][0]
        for i, pl in enumerate(row['placements']):
            arr[i].start, arr[i].size = pl['start'], pl['size']
        count._obj.value = len(row['placements'])
    m.nvmlDeviceGetGpuInstancePossiblePlacements = placements
    return m, rows


def test_mig_off_takes_the_profiles_the_real_580_driver_answers():
    """The real H200 (and H100) on 580 answer GPU-instance profile info with MIG off: the node engine takes NVML's
    profiles then (memory as NVML counts it: 1g.18gb is 16384 MiB, not the 18 GB of its name), not the catalogue's.
    Failed before: the catalogue's 18 * 1024 MiB, source 'catalog'."""
    m, rows = _real_h200_nvml()
    g = NvmlBackend(m).gpu(0)
    assert g['mig_current'] is False and g['mig_profile_source'] == 'nvml' and g['mig_instances'] == []
    assert sorted(g['mig_profiles']) == ['1g.18gb', '1g.18gb+me', '1g.35gb', '2g.35gb', '3g.71gb', '4g.71gb',
                                         '7g.141gb']
    for idx, row in rows.items():
        info = row['nvmlDeviceGetGpuInstanceProfileInfo']
        got = g['mig_profiles'][info['name'][len('MIG '):]]
        assert (got['id'], got['index'], got['slices'], got['max_instances'], got['memory_mib']) == (
            info['id'], idx, info['sliceCount'], info['instanceCount'], info['memorySizeMB'])
        assert got['placements'] == [p['start'] for p in row['placements']]
        assert got['placement_size'] == row['placements'][0]['size']


def test_mig_off_falls_back_to_the_catalogue_where_nvml_refuses():
    """Drivers before 580 refuse profile info with MIG off: the catalogue's profiles, placements from NVML."""
    m, dummy = _real_h200_nvml()

    def refuse(h, idx):
        raise NVMLError_NotSupported('Not Supported')
    m.nvmlDeviceGetGpuInstanceProfileInfo = refuse
    g = NvmlBackend(m).gpu(0)
    assert g['mig_profile_source'] == 'catalog'
    assert g['mig_profiles']['1g.18gb']['placements'] == [0, 1, 2, 3, 4, 5, 6]
