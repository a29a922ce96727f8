# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read and change GPU sharing state through NVML (nvidia-ml-py's ``pynvml``).

:class:`NvmlBackend` is the only place of the gpu_sharing module that talks to NVML; the planning code works on
the plain dicts it returns, so it can be tested with a stand-in backend.
"""

from __future__ import annotations

import ctypes
import traceback
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_catalog import mig_profiles_for
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import canonical_profile_name
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.nvml_probe import failure_reason

PYNVML_IMPORT_ERROR = None
try:
    import pynvml
    HAS_PYNVML = True
except ImportError:  # pragma: no cover - depends on the managed node
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()

COMPUTE_MODES = {0: 'default', 1: 'exclusive_thread', 2: 'prohibited', 3: 'exclusive_process'}
COMPUTE_MODE_VALUES = {'default': 0, 'prohibited': 2, 'exclusive_process': 3}
_MAX_PLACEMENTS = 32
_MAX_INSTANCES = 32


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    return value


def _profile_name(raw: Any) -> str:
    name = _text(raw) or ''
    if not name.strip():
        return ''
    return canonical_profile_name(name)


def _ci_profile_name(raw: Any) -> str:
    name = (_text(raw) or '').strip()
    if name.upper().startswith('MIG '):
        name = name[4:]
    return name.strip().lower()


def nvml_error_text(exc: BaseException) -> str:
    """'Insufficient Resources (insufficient_resources)'-style text for an NVML exception."""
    return '%s (%s)' % (exc, failure_reason(exc) if failure_reason(exc) != 'error' else type(exc).__name__)


class NvmlBackend(object):
    """Thin, stateless wrapper: every method looks the GPU up again by index."""

    def __init__(self, nvml: Any = None) -> None:
        self.nvml = nvml if nvml is not None else pynvml

    # -- session -------------------------------------------------------------------------------------
    def init(self) -> None:
        self.nvml.nvmlInit()

    def shutdown(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _handle(self, index: int) -> Any:
        return self.nvml.nvmlDeviceGetHandleByIndex(index)

    def _optional(self, func: Callable[..., Any], *args: Any) -> Any:
        try:
            return func(*args)
        except self.nvml.NVMLError:
            return None

    # -- reading -------------------------------------------------------------------------------------
    def count(self) -> int:
        return self.nvml.nvmlDeviceGetCount()

    def gpus(self) -> list[dict[str, Any]]:
        return [self.gpu(i) for i in range(self.count())]

    def gpu(self, index: int) -> dict[str, Any]:
        nv = self.nvml
        h = self._handle(index)
        gpu: dict[str, Any] = {'index': index, 'name': _text(nv.nvmlDeviceGetName(h)), 'uuid': _text(nv.nvmlDeviceGetUUID(h))}
        pci = self._optional(nv.nvmlDeviceGetPciInfo, h)
        gpu['pci_device_id'] = int(pci.pciDeviceId) if pci is not None else None
        cc = self._optional(nv.nvmlDeviceGetCudaComputeCapability, h)
        gpu['compute_capability'] = (int(cc[0]), int(cc[1])) if cc else None
        pm = self._optional(nv.nvmlDeviceGetPersistenceMode, h)
        gpu['persistence_mode'] = None if pm is None else pm == nv.NVML_FEATURE_ENABLED
        cm = self._optional(nv.nvmlDeviceGetComputeMode, h)
        gpu['compute_mode'] = None if cm is None else COMPUTE_MODES.get(cm, 'unknown_%s' % cm)
        mig = self._optional(nv.nvmlDeviceGetMigMode, h)
        gpu['mig_capable'] = mig is not None
        gpu['mig_current'] = None if mig is None else mig[0] == nv.NVML_DEVICE_MIG_ENABLE
        gpu['mig_pending'] = None if mig is None else mig[1] == nv.NVML_DEVICE_MIG_ENABLE
        gpu['mig_profiles'] = {}
        gpu['mig_profile_source'] = None
        gpu['mig_instances'] = []
        if gpu['mig_capable']:
            # NVML's profiles with MIG on, and with MIG off where the driver answers them (580 does: the real H100
            # and H200, lab/realgpu/samples); the catalogue only where NVML refuses (drivers before 580, MIG off)
            profiles = self._nvml_profiles(h)
            source = 'nvml'  # type: str | None
            if not profiles:
                profiles = self._catalog_profiles(h, gpu['name'], gpu['pci_device_id'])
                source = 'catalog' if profiles else None
            gpu['mig_profiles'] = profiles
            gpu['mig_profile_source'] = source
            if gpu['mig_current']:
                gpu['mig_instances'] = self._instances(h, profiles)
        return gpu

    def _placements(self, handle: Any, profile_id: int) -> tuple[list[int] | None, int | None]:
        nv = self.nvml
        arr = (nv.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
        count = ctypes.c_uint(_MAX_PLACEMENTS)
        try:
            nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr, ctypes.byref(count))
        except (nv.NVMLError, AttributeError, TypeError):
            return None, None
        starts = sorted(int(arr[i].start) for i in range(count.value))
        size = int(arr[0].size) if count.value else None
        return starts, size

    def _nvml_profiles(self, handle: Any) -> dict[str, dict[str, Any]]:
        nv = self.nvml
        out: dict[str, dict[str, Any]] = {}
        for idx in range(getattr(nv, 'NVML_GPU_INSTANCE_PROFILE_COUNT', 0)):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, idx)
            except nv.NVMLError:
                continue
            name = _profile_name(getattr(info, 'name', b''))
            if not name:
                continue
            starts, size = self._placements(handle, int(info.id))
            out[name] = {'name': name, 'id': int(info.id), 'index': idx, 'slices': int(info.sliceCount),
                         'max_instances': int(info.instanceCount), 'memory_mib': int(info.memorySizeMB),
                         'placements': starts, 'placement_size': size}
        return out

    def _catalog_profiles(self, handle: Any, name: str, pci_device_id: int | None = None) -> dict[str, dict[str, Any]]:
        """Profiles from the catalogue (MIG off); placements from NVML where it answers, else the catalogue's."""
        out: dict[str, dict[str, Any]] = {}
        for p in mig_profiles_for(name, pci_device_id):
            starts, size = (None, None)
            if p['id'] is not None:
                starts, size = self._placements(handle, p['id'])
            if not starts:
                starts, size = list(p['placements']), p['placement_size']
            out[p['name']] = {'name': p['name'], 'id': p['id'], 'index': p['nvml_profile_index'], 'slices': p['slices'],
                              'max_instances': p['max_instances'], 'memory_mib': p['memory_gib'] * 1024,
                              'placements': starts, 'placement_size': size}
        return out

    def _ci_profiles(self, gi: Any) -> list[tuple[int, int, str]]:
        """Compute-instance profiles of a GPU instance: list of (profile id, slices, name)."""
        nv = self.nvml
        out: list[tuple[int, int, str]] = []
        for idx in range(getattr(nv, 'NVML_COMPUTE_INSTANCE_PROFILE_COUNT', 0)):
            try:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, idx, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except nv.NVMLError:
                continue
            out.append((int(info.id), int(info.sliceCount), _ci_profile_name(getattr(info, 'name', b''))))
        return out

    def _instances(self, handle: Any, profiles: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        nv = self.nvml
        by_id = dict((p['id'], p) for p in profiles.values())
        out: list[dict[str, Any]] = []
        for pid, prof in sorted(by_id.items()):
            arr = (nv.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
            count = ctypes.c_uint(_MAX_INSTANCES)
            nv.nvmlDeviceGetGpuInstances(handle, pid, arr, ctypes.byref(count))
            for i in range(count.value):
                gi = arr[i]
                info = nv.nvmlGpuInstanceGetInfo(gi)
                entry: dict[str, Any] = {'id': int(info.id), 'profile': prof['name'], 'profile_id': pid,
                                         'start': int(info.placement.start), 'size': int(info.placement.size), 'cis': []}
                for cpid, slices, cname in self._ci_profiles(gi):
                    carr = (nv.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
                    ccount = ctypes.c_uint(_MAX_INSTANCES)
                    nv.nvmlGpuInstanceGetComputeInstances(gi, cpid, carr, ctypes.byref(ccount))
                    for k in range(ccount.value):
                        cinfo = nv.nvmlComputeInstanceGetInfo(carr[k])
                        entry['cis'].append({'id': int(cinfo.id), 'profile_id': cpid, 'slices': slices,
                                             'name': cname or '%dc.%s' % (slices, prof['name']),
                                             'full': slices == prof['slices']})
                entry['cis'].sort(key=lambda c: c['id'])
                out.append(entry)
        out.sort(key=lambda g: g['id'])
        return out

    def processes(self, index: int) -> list[int]:
        """PIDs of the compute and graphics processes on the GPU (and, for root, on its MIG devices)."""
        nv = self.nvml
        h = self._handle(index)
        pids: set[int] = set()
        for name in ('nvmlDeviceGetComputeRunningProcesses', 'nvmlDeviceGetGraphicsRunningProcesses'):
            func = getattr(nv, name, None)
            if func is None:
                continue
            try:
                pids.update(int(p.pid) for p in func(h))
            except nv.NVMLError:
                continue
        return sorted(pids)

    # -- changing ------------------------------------------------------------------------------------
    def set_persistence_mode(self, index: int, enabled: bool) -> None:
        nv = self.nvml
        nv.nvmlDeviceSetPersistenceMode(self._handle(index), nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED)

    def set_compute_mode(self, index: int, mode: str) -> None:
        self.nvml.nvmlDeviceSetComputeMode(self._handle(index), COMPUTE_MODE_VALUES[mode])

    def set_mig_mode(self, index: int, enabled: bool) -> bool:
        """Returns True when the new mode is active now, False when it waits for a GPU reset."""
        nv = self.nvml
        mode = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        activation = nv.nvmlDeviceSetMigMode(self._handle(index), mode)
        return activation == nv.NVML_SUCCESS

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None:
        nv = self.nvml
        gi = nv.nvmlDeviceGetGpuInstanceById(self._handle(index), gi_id)
        nv.nvmlComputeInstanceDestroy(nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None:
        nv = self.nvml
        nv.nvmlGpuInstanceDestroy(nv.nvmlDeviceGetGpuInstanceById(self._handle(index), gi_id))

    def create_gpu_instance(self, index: int, profile: dict[str, Any], start: int | None = None) -> int:
        """Create a GI of ``profile`` (dict) at ``start`` (or where NVML chooses); returns its id."""
        nv = self.nvml
        h = self._handle(index)
        if start is not None and profile.get('placement_size'):
            placement = nv.c_nvmlGpuInstancePlacement_t()
            placement.start = start
            placement.size = profile['placement_size']
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile['id'], ctypes.byref(placement))
        else:
            gi = nv.nvmlDeviceCreateGpuInstance(h, profile['id'])
        return int(nv.nvmlGpuInstanceGetInfo(gi).id)

    def create_full_compute_instance(self, index: int, gi_id: int, gi_slices: int) -> int:
        """Create the compute instance that spans the whole GI; returns its id."""
        nv = self.nvml
        gi = nv.nvmlDeviceGetGpuInstanceById(self._handle(index), gi_id)
        for cpid, slices, dummy in self._ci_profiles(gi):
            if slices == gi_slices:
                ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, cpid)
                return int(nv.nvmlComputeInstanceGetInfo(ci).id)
        raise nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)
