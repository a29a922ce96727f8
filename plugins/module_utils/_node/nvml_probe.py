# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe NVIDIA GPUs through NVML (nvidia-ml-py's ``pynvml``). No subprocess on this path."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_catalog import (
    architecture_name,
    mig_catalog_facts,
)

PYNVML_IMPORT_ERROR = None
try:
    import pynvml
    HAS_PYNVML = True
except ImportError:  # pragma: no cover - exercised through the module's fallback path
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()

# Why NVML could not be used, keyed by the pynvml exception class name.
FAILURE_REASONS = {
    'NVMLError_LibraryNotFound': 'not_installed',
    'NVMLError_DriverNotLoaded': 'driver_not_loaded',
    'NVMLError_LibRmVersionMismatch': 'version_mismatch',
    'NVMLError_NoPermission': 'no_permission',
    'NVMLError_Uninitialized': 'uninitialized',
    'NVMLError_GpuIsLost': 'gpu_lost',
    'NVMLError_FunctionNotFound': 'function_not_found',
}


def _text(value):
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    return value


def failure_reason(exc):
    """Map an NVML exception to a short, stable reason string."""
    return FAILURE_REASONS.get(type(exc).__name__, 'error')


def _optional(func, *args):
    """Call an NVML getter; return (value, None) or (None, reason) when the GPU cannot answer."""
    try:
        return func(*args), None
    except pynvml.NVMLError as exc:
        return None, failure_reason(exc)


def _call(name, *args):
    """Call the NVML getter called name; (value, None), or (None, reason) when the GPU cannot answer or the
    installed binding has no such call (an old pynvml, e.g. Ubuntu 22.04's python3-pynvml)."""
    func = getattr(pynvml, name, None)
    if func is None:
        return None, 'binding_lacks_call'
    return _optional(func, *args)


def _const(name, default):
    return getattr(pynvml, name, default)


def bindings_version():
    """Version of the installed NVML Python binding distribution (nvidia-ml-py or pynvml), or None."""
    try:
        from importlib import metadata as importlib_metadata
    except ImportError:  # Python < 3.8
        return None
    for dist in ('nvidia-ml-py', 'nvidia_ml_py', 'pynvml'):
        try:
            return importlib_metadata.version(dist)
        except Exception:  # pylint: disable=broad-except
            continue
    return None


def _memory_total(handle):
    """Total memory in bytes; prefer the v2 structure (it needs its version field, pynvml sets it)."""
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).total
    except (pynvml.NVMLError, AttributeError, TypeError):
        return pynvml.nvmlDeviceGetMemoryInfo(handle).total


def _mig_devices(handle):
    devices = []
    count, err = _call('nvmlDeviceGetMaxMigDeviceCount', handle)
    if err or not count:
        return devices
    for i in range(count):
        try:
            mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except pynvml.NVMLError:
            continue  # NOT_FOUND: that slot is empty
        entry = {'index': i}
        entry['uuid'] = _text(_call('nvmlDeviceGetUUID', mh)[0])
        entry['name'] = _text(_call('nvmlDeviceGetName', mh)[0])
        entry['gpu_instance_id'] = _call('nvmlDeviceGetGpuInstanceId', mh)[0]
        entry['compute_instance_id'] = _call('nvmlDeviceGetComputeInstanceId', mh)[0]
        mem = None
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(mh).total
        except pynvml.NVMLError:
            pass
        entry['memory_total_mib'] = mem // (1024 * 1024) if mem is not None else None
        devices.append(entry)
    return devices


def _mig_profiles(handle):
    """GPU-instance profiles the driver reports (needs MIG mode enabled on real drivers)."""
    profiles = []
    count = getattr(pynvml, 'NVML_GPU_INSTANCE_PROFILE_COUNT', 0)
    for idx in range(count):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, idx)
        except pynvml.NVMLError:
            continue
        except Exception:  # pylint: disable=broad-except
            continue
        name = _text(getattr(info, 'name', b'') or b'')
        name = name.replace('MIG ', '') if name else 'profile-%d' % idx
        profiles.append({
            'name': name,
            'id': int(info.id),
            'max_instances': int(info.instanceCount),
            'memory_mib': int(info.memorySizeMB),
            'slices': int(info.sliceCount),
            'source': 'nvml',
        })
    return profiles


NVLINK_DEVICE_TYPE_SWITCH = 2  # nvmlIntNvLinkDeviceType_t NVML_NVLINK_DEVICE_TYPE_SWITCH
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS


def _nvlinks(handle):
    """(active link count, set of NVSwitch PCI bus ids those links lead to)."""
    active, switches = 0, set()
    if not hasattr(pynvml, 'nvmlDeviceGetNvLinkState'):
        return active, switches
    for link in range(getattr(pynvml, 'NVML_NVLINK_MAX_LINKS', MAX_NVLINKS)):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
        except pynvml.NVMLError:
            break  # NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT (past the last link)
        active += 1
        try:
            if pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == NVLINK_DEVICE_TYPE_SWITCH:
                switches.add(_text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
        except (pynvml.NVMLError, AttributeError):
            continue
    return active, switches


def probe_gpu(index, include_mig_profiles=True, switches=None):
    """Facts for one GPU by NVML index."""
    gpu = {'index': index}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as exc:
        gpu['error'] = failure_reason(exc)
        return gpu
    name, err = _call('nvmlDeviceGetName', handle)
    if err == 'gpu_lost':
        gpu['error'] = err
        return gpu
    gpu['name'] = _text(name)
    gpu['uuid'] = _text(_call('nvmlDeviceGetUUID', handle)[0])
    pci, err = _call('nvmlDeviceGetPciInfo', handle)
    if pci is not None:
        gpu['pci_bus_id'] = _text(pci.busId)
        gpu['pci_device_id'] = '0x%04x' % ((pci.pciDeviceId >> 16) & 0xFFFF)
        gpu['pci_subsystem_id'] = '0x%08x' % pci.pciSubSystemId
    try:
        gpu['memory_total_mib'] = _memory_total(handle) // (1024 * 1024)
    except pynvml.NVMLError as exc:
        gpu['memory_total_mib'] = None
        gpu.setdefault('warnings', []).append('memory: %s' % failure_reason(exc))
    cc, err = _call('nvmlDeviceGetCudaComputeCapability', handle)
    major, minor = (cc if cc else (None, None))
    gpu['compute_capability'] = '%s.%s' % (major, minor) if major is not None else None
    gpu['compute_capability_major'] = major
    gpu['compute_capability_minor'] = minor
    arch = None
    if hasattr(pynvml, 'nvmlDeviceGetArchitecture'):
        arch, err = _call('nvmlDeviceGetArchitecture', handle)
    gpu['architecture'] = architecture_name(arch, major, minor)
    links, remote_switches = _nvlinks(handle)
    gpu['nvlinks'] = links
    gpu['nvswitch_links'] = len(remote_switches)
    if switches is not None:
        switches.update(remote_switches)
    bar1, err = _call('nvmlDeviceGetBAR1MemoryInfo', handle)
    gpu['bar1_total_mib'] = bar1.bar1Total // (1024 * 1024) if bar1 is not None else None
    pm, err = _call('nvmlDeviceGetPersistenceMode', handle)
    gpu['persistence_mode'] = None if pm is None else (pm == _const('NVML_FEATURE_ENABLED', 1))
    cm, err = _call('nvmlDeviceGetComputeMode', handle)
    gpu['compute_mode'] = _compute_mode_name(cm)
    mig, err = _call('nvmlDeviceGetMigMode', handle)
    if mig is None:
        gpu['mig_capable'] = False
        gpu['mig_current'] = None
        gpu['mig_pending'] = None
        gpu['mig_devices'] = []
        gpu['mig_profiles'] = []
    else:
        gpu['mig_capable'] = True
        gpu['mig_current'] = mig[0] == _const('NVML_DEVICE_MIG_ENABLE', 1)
        gpu['mig_pending'] = mig[1] == _const('NVML_DEVICE_MIG_ENABLE', 1)
        gpu['mig_devices'] = _mig_devices(handle) if gpu['mig_current'] else []
        profiles = _mig_profiles(handle) if include_mig_profiles else []
        gpu.update(mig_catalog_facts(gpu['name'], pci.pciDeviceId if pci is not None else None, profiles))
    return gpu


COMPUTE_MODES = {0: 'default', 1: 'exclusive_thread', 2: 'prohibited', 3: 'exclusive_process'}


def _compute_mode_name(value):
    if value is None:
        return None
    return COMPUTE_MODES.get(value, 'unknown_%s' % value)


def probe(include_mig_profiles=True):
    """Probe every GPU NVML sees.

    Returns a dict with ``status`` ('ok' or a failure reason), driver/CUDA/NVML versions and ``gpus``.
    Never raises for NVML errors: a node without a driver is a normal case for this collection.
    """
    result = {'status': 'ok', 'driver_version': None, 'cuda_driver_version': None, 'nvml_version': None,
              'gpus': [], 'error': None, 'nvswitches': [], 'bindings_version': None}
    if not HAS_PYNVML:
        result['status'] = 'bindings_missing'
        result['error'] = 'Python module pynvml (PyPI package nvidia-ml-py) is not installed'
        return result
    result['bindings_version'] = bindings_version()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        result['status'] = failure_reason(exc)
        result['error'] = str(exc)
        return result
    try:
        return _probe_initialised(result, include_mig_profiles)
    except (AttributeError, TypeError) as exc:
        # a binding older than the calls this module makes (seen: Ubuntu 22.04's python3-pynvml, API of 2015)
        result['status'] = 'bindings_outdated'
        result['error'] = ('the installed NVML Python binding (%s) lacks a call or structure this probe needs (%s); '
                           'install nvidia-ml-py from the package index or the mirror (gpu_probe_bindings_method: '
                           'pip)' % (result['bindings_version'] or 'version unknown', exc))
        result['gpus'] = []
        return result
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # pylint: disable=broad-except
            pass


def _probe_initialised(result, include_mig_profiles):
    result['driver_version'] = _text(_call('nvmlSystemGetDriverVersion')[0])
    result['nvml_version'] = _text(_call('nvmlSystemGetNVMLVersion')[0])
    cuda, err = _call('nvmlSystemGetCudaDriverVersion')
    if cuda:
        result['cuda_driver_version'] = '%d.%d' % (cuda // 1000, (cuda % 1000) // 10)
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        result['status'] = failure_reason(exc)
        result['error'] = str(exc)
        return result
    switches = set()
    for i in range(count):
        result['gpus'].append(probe_gpu(i, include_mig_profiles, switches))
    result['nvswitches'] = sorted(switches)
    return result
