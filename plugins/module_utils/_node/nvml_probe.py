# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe NVIDIA GPUs through NVML (nvidia-ml-py's ``pynvml``). No subprocess on this path."""

from __future__ import annotations

import ctypes
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_catalog import (
    architecture_name,
    mig_catalog_facts,
)
# nvmlClocksEventReason* bits (nvml.h): one table with the doctor's (_common/gpu_health.py)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_health import CLOCK_EVENT_REASONS

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


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    return value


def failure_reason(exc: BaseException) -> str:
    """Map an NVML exception to a short, stable reason string."""
    return FAILURE_REASONS.get(type(exc).__name__, 'error')


def _optional(func: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    """Call an NVML getter; return (value, None) or (None, reason) when the GPU cannot answer."""
    try:
        return func(*args), None
    except pynvml.NVMLError as exc:
        return None, failure_reason(exc)


def _call(name: str, *args: Any) -> tuple[Any, str | None]:
    """Call the NVML getter called name; (value, None), or (None, reason) when the GPU cannot answer or the
    installed binding has no such call (an old pynvml, e.g. Ubuntu 22.04's python3-pynvml)."""
    func = getattr(pynvml, name, None)
    if func is None:
        return None, 'binding_lacks_call'
    return _optional(func, *args)


def _health_call(name: str, *args: Any) -> tuple[Any, str | None]:
    """_call for the health answers, which are optional: a binding whose call takes other arguments (Debian's
    python3-pynvml 11.525) answers (None, 'binding_differs') instead of failing the whole probe."""
    try:
        return _call(name, *args)
    except (TypeError, AttributeError, ctypes.ArgumentError):
        return None, 'binding_differs'


def _gsp_firmware_version(handle: Any) -> Any:
    """nvidia-ml-py returns the version; older bindings (Debian's 11.525) want a buffer to fill."""
    value, err = _health_call('nvmlDeviceGetGspFirmwareVersion', handle)
    if err != 'binding_differs':
        return _text(value)
    buf = ctypes.create_string_buffer(_const('NVML_GSP_FIRMWARE_VERSION_BUF_SIZE', 0x40))
    done, err = _health_call('nvmlDeviceGetGspFirmwareVersion', handle, buf)
    return _text(buf.value) if err is None and buf.value else None


def _const(name: str, default: Any) -> Any:
    return getattr(pynvml, name, default)


def bindings_version() -> str | None:
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


def _memory_total(handle: Any) -> int:
    """Total memory in bytes; prefer the v2 structure (it needs its version field, pynvml sets it)."""
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).total
    except (pynvml.NVMLError, AttributeError, TypeError):
        return pynvml.nvmlDeviceGetMemoryInfo(handle).total


def _mig_devices(handle: Any) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    count, err = _call('nvmlDeviceGetMaxMigDeviceCount', handle)
    if err or not count:
        return devices
    for i in range(count):
        try:
            mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except pynvml.NVMLError:
            continue  # NOT_FOUND: that slot is empty
        entry: dict[str, Any] = {'index': i}
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


def _mig_profiles(handle: Any) -> list[dict[str, Any]]:
    """GPU-instance profiles the driver reports. Drivers of branch 580 answer them with MIG disabled too (a real H100,
    docs/conformance/doctor-health.md); drivers that refuse leave the list empty and the catalogue answers."""
    profiles: list[dict[str, Any]] = []
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


def _nvlinks(handle: Any) -> tuple[int, set[str]]:
    """(active link count, set of NVSwitch PCI bus ids those links lead to)."""
    active, switches = 0, set()  # type: (int, set[str])
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


# nvmlGpuFabricState_t (NVML_GPU_FABRIC_STATE_*): the GPU's registration with the NVLink fabric (fabric manager)
FABRIC_STATES = {0: 'not_supported', 1: 'not_started', 2: 'in_progress', 3: 'completed'}
# the binding's structure for nvmlDeviceGetGpuFabricInfoV (v2; its constructor sets the version)
_FABRIC_V = ('c_nvmlGpuFabricInfo_v2_t', 'c_nvmlGpuFabricInfoV_t')


def fabric_info(handle: Any) -> dict[str, Any] | None:
    """The GPU's NVLink fabric registration: {'state', 'status' (NVML return code; judged only when completed),
    'status_text'}, or None where the GPU or the binding cannot answer (NOT_SUPPORTED: no fabric, pre-Hopper).
    The binding hands the structure to the C call as given, so it is passed by reference here."""
    info = None
    for name in _FABRIC_V:
        cls = getattr(pynvml, name, None)
        if cls is not None and hasattr(pynvml, 'nvmlDeviceGetGpuFabricInfoV'):
            info = cls()
            try:
                pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
            except (pynvml.NVMLError, TypeError):
                return None
            break
    else:
        cls = getattr(pynvml, 'c_nvmlGpuFabricInfo_t', None)
        if cls is None or not hasattr(pynvml, 'nvmlDeviceGetGpuFabricInfo'):
            return None
        info = cls()
        try:
            pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        except (pynvml.NVMLError, TypeError):
            return None
    state = FABRIC_STATES.get(int(info.state), 'unknown_%s' % int(info.state))
    status = int(info.status)
    text = None
    if status:
        try:
            text = _text(pynvml.nvmlErrorString(status))
        except (pynvml.NVMLError, AttributeError, TypeError):
            text = None
    return {'state': state, 'status': status, 'status_text': text}


# nvmlGpuVirtualizationMode_t
VIRTUALIZATION_MODES = {0: 'none', 1: 'passthrough', 2: 'vgpu', 3: 'host_vgpu', 4: 'host_vsga'}
XID_CRITICAL_EVENT = 0x8  # nvmlEventTypeXidCriticalError


def clock_event_reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]


def gpu_health(handle: Any) -> dict[str, Any]:
    """Read-only health answers of one GPU (None where the GPU or the binding cannot answer)."""
    health: dict[str, Any] = {}
    ecc, err = _health_call('nvmlDeviceGetEccMode', handle)
    health['ecc_enabled'] = None if ecc is None else ecc[0] == _const('NVML_FEATURE_ENABLED', 1)
    # the mode the GPU takes at its next reset (nvmlDeviceGetEccMode's pending value)
    health['ecc_pending'] = None if ecc is None else ecc[1] == _const('NVML_FEATURE_ENABLED', 1)
    uncorrected = _const('NVML_MEMORY_ERROR_TYPE_UNCORRECTED', 1)
    health['ecc_uncorrected_volatile'] = _health_call('nvmlDeviceGetTotalEccErrors', handle, uncorrected,
                                                      _const('NVML_VOLATILE_ECC', 0))[0]
    health['ecc_uncorrected_aggregate'] = _health_call('nvmlDeviceGetTotalEccErrors', handle, uncorrected,
                                                       _const('NVML_AGGREGATE_ECC', 1))[0]
    rows, err = _health_call('nvmlDeviceGetRemappedRows', handle)
    health['remapped_rows'] = None if rows is None else {
        'correctable': int(rows[0]), 'uncorrectable': int(rows[1]), 'pending': bool(rows[2]), 'failure': bool(rows[3])}
    hist, err = _health_call('nvmlDeviceGetRowRemapperHistogram', handle)
    health['row_remapper_histogram'] = None if hist is None else dict(
        (k, int(getattr(hist, k))) for k in ('max', 'high', 'partial', 'low', 'none'))
    pending, err = _health_call('nvmlDeviceGetRetiredPagesPendingStatus', handle)
    if pending is None:
        health['retired_pages'] = None
    else:
        sbe = _health_call('nvmlDeviceGetRetiredPages', handle, _const('NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS', 0))[0]
        dbe = _health_call('nvmlDeviceGetRetiredPages', handle, _const('NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR', 1))[0]
        health['retired_pages'] = {'single_bit': len(sbe or []), 'double_bit': len(dbe or []),
                                   'pending': pending == _const('NVML_FEATURE_ENABLED', 1)}
    reasons, err = _health_call('nvmlDeviceGetCurrentClocksEventReasons', handle)
    if reasons is None and err == 'binding_lacks_call':
        reasons, err = _health_call('nvmlDeviceGetCurrentClocksThrottleReasons', handle)
    health['clocks_event_reasons'] = None if reasons is None else clock_event_reason_names(int(reasons))
    pcie: dict[str, Any] = {}
    for key, call in (('gen', 'nvmlDeviceGetCurrPcieLinkGeneration'), ('width', 'nvmlDeviceGetCurrPcieLinkWidth'),
                      ('max_gen', 'nvmlDeviceGetMaxPcieLinkGeneration'), ('max_width', 'nvmlDeviceGetMaxPcieLinkWidth'),
                      ('gpu_max_gen', 'nvmlDeviceGetGpuMaxPcieLinkGeneration'), ('replay', 'nvmlDeviceGetPcieReplayCounter')):
        pcie[key] = _health_call(call, handle)[0]
    health['pcie'] = pcie
    virt, err = _health_call('nvmlDeviceGetVirtualizationMode', handle)
    health['virtualization_mode'] = None if virt is None else VIRTUALIZATION_MODES.get(virt, 'unknown_%s' % virt)
    health['fabric'] = fabric_info(handle)
    health['gsp_firmware_version'] = _gsp_firmware_version(handle)
    health['recovery_action'] = recovery_action(handle)
    health['temperature'] = temperature(handle)
    health['power'] = power(handle)
    health['inforom_valid'] = inforom_valid(handle)
    health['inforom_image'] = _text(_health_call('nvmlDeviceGetInforomImageVersion', handle)[0])
    health['nvlink'] = nvlink_health(handle)
    return health


# nvml.h nvmlTemperatureSensors_t / nvmlTemperatureThresholds_t
TEMPERATURE_GPU = 0
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN = 0, 1


def temperature(handle: Any) -> dict[str, Any] | None:
    """{'gpu', 'slowdown', 'shutdown'} in degrees C (nvmlDeviceGetTemperature, nvmlDeviceGetTemperatureThreshold;
    a threshold the GPU does not answer is None), or None where the GPU has no temperature reading."""
    gpu, err = _health_call('nvmlDeviceGetTemperature', handle, _const('NVML_TEMPERATURE_GPU', TEMPERATURE_GPU))
    if gpu is None:
        return None
    out: dict[str, Any] = {'gpu': int(gpu)}
    for key, const, default in (('slowdown', 'NVML_TEMPERATURE_THRESHOLD_SLOWDOWN', THRESHOLD_SLOWDOWN),
                                ('shutdown', 'NVML_TEMPERATURE_THRESHOLD_SHUTDOWN', THRESHOLD_SHUTDOWN)):
        value, err = _health_call('nvmlDeviceGetTemperatureThreshold', handle, _const(const, default))
        out[key] = None if value is None else int(value)
    return out


def power(handle: Any) -> dict[str, Any] | None:
    """{'usage_mw', 'enforced_limit_mw', 'default_limit_mw'} (nvmlDeviceGetPowerUsage - averaged over one second on
    Ampere and newer except GA100 - nvmlDeviceGetEnforcedPowerLimit, which counts every limiter including the
    out-of-band one, nvmlDeviceGetPowerManagementDefaultLimit), or None where the GPU reads no power."""
    usage, err = _health_call('nvmlDeviceGetPowerUsage', handle)
    if usage is None:
        return None
    limit = _health_call('nvmlDeviceGetEnforcedPowerLimit', handle)[0]
    default = _health_call('nvmlDeviceGetPowerManagementDefaultLimit', handle)[0]
    return {'usage_mw': int(usage), 'enforced_limit_mw': None if limit is None else int(limit),
            'default_limit_mw': None if default is None else int(default)}


NVML_ERROR_CORRUPTED_INFOROM = 14


def inforom_valid(handle: Any) -> bool | None:
    """nvmlDeviceValidateInforom (reads the InfoROM from flash and verifies its checksums): True when it answers
    success, False for NVML_ERROR_CORRUPTED_INFOROM, None where the GPU or the binding cannot answer."""
    func = getattr(pynvml, 'nvmlDeviceValidateInforom', None)
    if func is None:
        return None
    try:
        func(handle)
    except pynvml.NVMLError as exc:
        if type(exc).__name__ == 'NVMLError_CorruptedInforom' or getattr(exc, 'value', None) == NVML_ERROR_CORRUPTED_INFOROM:
            return False
        return None
    except (TypeError, AttributeError, ctypes.ArgumentError):
        return None
    return True


# nvmlNvLinkErrorCounter_t (nvml.h): data link replay, recovery, flit CRC and data CRC counters
NVLINK_ERROR_COUNTERS = (('replay', 0), ('recovery', 1), ('crc_flit', 2), ('crc_data', 3))


def nvlink_health(handle: Any) -> dict[str, Any]:
    """Each NVLink's state and error counters: {'applicable': True, 'links': [{'link', 'active', 'errors': {replay,
    recovery, crc_flit, crc_data} (a counter the GPU does not answer is None)}]}; {'applicable': False, 'reason': ...,
    'links': []} where the GPU answers NOT_SUPPORTED for link 0 (no NVLink: PCIe boards, a GPU passed through alone, as
    the real H100 of the 580 capture) or the binding lacks the calls."""
    if not hasattr(pynvml, 'nvmlDeviceGetNvLinkState'):
        return {'applicable': False, 'reason': 'binding_lacks_call', 'links': []}
    links: list[dict[str, Any]] = []
    for link in range(getattr(pynvml, 'NVML_NVLINK_MAX_LINKS', MAX_NVLINKS)):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            if link == 0:
                reason = 'not_supported' if type(exc).__name__ == 'NVMLError_NotSupported' else failure_reason(exc)
                return {'applicable': False, 'reason': reason, 'links': []}
            break   # INVALID_ARGUMENT: past the GPU's last link
        except (TypeError, AttributeError, ctypes.ArgumentError):
            return {'applicable': False, 'reason': 'binding_differs', 'links': []}
        errors: dict[str, Any] = {}
        for name, counter in NVLINK_ERROR_COUNTERS:
            value = _health_call('nvmlDeviceGetNvLinkErrorCounter', handle, link, counter)[0]
            errors[name] = None if value is None else int(value)
        links.append({'link': link, 'active': state == _const('NVML_FEATURE_ENABLED', 1), 'errors': errors})
    return {'applicable': True, 'links': links}


# nvml.h (570+): field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, values nvmlDeviceGpuRecoveryAction_t
GPU_RECOVERY_ACTION_FIELD = 230
RECOVERY_ACTIONS = {0: 'none', 1: 'gpu_reset', 2: 'node_reboot', 3: 'drain_p2p', 4: 'drain_and_reset',
                    5: 'recover_imex_domain', 6: 'bus_reset', 7: 'system_reboot'}


def recovery_action(handle: Any) -> str | None:
    """The driver's GPU recovery action (nvmlDeviceGetFieldValues, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; what
    nvidia-smi -q prints as "GPU Recovery Action"): 'none', 'gpu_reset', 'node_reboot', ... or 'unknown_<n>'; None
    where the driver (before 570), the GPU or the binding cannot answer."""
    field = _const('NVML_FI_DEV_GET_GPU_RECOVERY_ACTION', GPU_RECOVERY_ACTION_FIELD)
    values, err = _health_call('nvmlDeviceGetFieldValues', handle, [field])
    try:
        value = values[0] if values is not None else None
        if value is None or value.nvmlReturn != 0:
            return None
        code = int(value.value.uiVal)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return RECOVERY_ACTIONS.get(code, 'unknown_%d' % code)


def xid_events(handles: Sequence[tuple[int, Any]], wait_ms: int = 100,
               limit: int = 64) -> tuple[list[dict[str, Any]] | None, str | None]:
    """Critical Xid events NVML delivers while it is asked: one event set for all GPUs, ``wait_ms`` for the first event.

    NVML reports only events that happen after the registration, so this sees an Xid storm going on now; the
    kernel log holds the Xids since boot. Returns (events [{'gpu', 'xid'}], None) or (None, reason)."""
    if not hasattr(pynvml, 'nvmlEventSetCreate'):
        return None, 'binding_lacks_call'
    try:
        event_set = pynvml.nvmlEventSetCreate()
    except pynvml.NVMLError as exc:
        return None, failure_reason(exc)
    events, registered = [], 0  # type: (list[dict[str, Any]], int)
    try:
        for index, handle in handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_EVENT, event_set)
                registered += 1
            except pynvml.NVMLError:
                continue  # NOT_SUPPORTED on GPUs without Xid events
        if not registered:
            return None, 'not_supported'
        timeout = wait_ms
        while len(events) < limit:
            try:
                data = pynvml.nvmlEventSetWait_v2(event_set, timeout)
            except pynvml.NVMLError:
                break  # TIMEOUT: nothing (more) happened
            gpu, err = _call('nvmlDeviceGetIndex', data.device)
            events.append({'gpu': gpu, 'xid': int(data.eventData)})
            timeout = 0
    finally:
        try:
            pynvml.nvmlEventSetFree(event_set)
        except pynvml.NVMLError:
            pass
    return events, None


def probe_gpu(index: int, include_mig_profiles: bool = True, switches: set[str] | None = None,
              include_health: bool = False, profile_cache: dict[Any, Any] | None = None) -> dict[str, Any]:
    """Facts for one GPU by NVML index. ``profile_cache``: {(name, PCI device id, MIG on): profiles} shared by the GPUs
    of one probe, so identical GPUs in the same MIG mode are asked once (the profiles are the model's)."""
    gpu: dict[str, Any] = {'index': index}
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
        profiles: list[dict[str, Any]] = []
        if include_mig_profiles:
            # with MIG off a driver may not answer the profiles (before 580) while the same model with MIG on does
            key = (gpu['name'], pci.pciDeviceId if pci is not None else None, gpu['mig_current'])
            if profile_cache is not None and key in profile_cache:
                profiles = [dict(p) for p in profile_cache[key]]
            else:
                profiles = _mig_profiles(handle)
                if profile_cache is not None:
                    profile_cache[key] = [dict(p) for p in profiles]
        gpu.update(mig_catalog_facts(gpu['name'], pci.pciDeviceId if pci is not None else None, profiles))
    if include_health:
        gpu['health'] = gpu_health(handle)
    return gpu


COMPUTE_MODES = {0: 'default', 1: 'exclusive_thread', 2: 'prohibited', 3: 'exclusive_process'}


def _compute_mode_name(value: int | None) -> str | None:
    if value is None:
        return None
    return COMPUTE_MODES.get(value, 'unknown_%s' % value)


def probe(include_mig_profiles: bool = True, include_health: bool = False, xid_wait_ms: int | None = None) -> dict[str, Any]:
    """Probe every GPU NVML sees. ``include_health``: each GPU gets ``health`` (gpu_health); ``xid_wait_ms``: the
    result gets ``xid_events`` (NVML events during that wait; None when NVML cannot deliver them).

    Returns a dict with ``status`` ('ok' or a failure reason), driver/CUDA/NVML versions and ``gpus``.
    Never raises for NVML errors: a node without a driver is a normal case for this collection.
    """
    result = {'status': 'ok', 'driver_version': None, 'cuda_driver_version': None, 'nvml_version': None,
              'gpus': [], 'error': None, 'nvswitches': [], 'bindings_version': None}  # type: dict[str, Any]
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
        return _probe_initialised(result, include_mig_profiles, include_health, xid_wait_ms)
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


def _probe_initialised(result: dict[str, Any], include_mig_profiles: bool, include_health: bool = False,
                       xid_wait_ms: int | None = None) -> dict[str, Any]:
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
    switches, cache = set(), {}  # type: (set[str], dict[Any, Any])
    for i in range(count):
        result['gpus'].append(probe_gpu(i, include_mig_profiles, switches, include_health, cache))
    result['nvswitches'] = sorted(switches)
    if xid_wait_ms is not None:
        handles: list[tuple[int, Any]] = []
        for gpu in result['gpus']:
            if not gpu.get('error'):
                handles.append((gpu['index'], pynvml.nvmlDeviceGetHandleByIndex(gpu['index'])))
        try:
            result['xid_events'], result['xid_events_error'] = xid_events(handles, xid_wait_ms)
        except (TypeError, AttributeError, ctypes.ArgumentError):
            result['xid_events'], result['xid_events_error'] = None, 'binding_differs'
    return result
