#!/usr/bin/env python3
"""Record what a real NVIDIA driver answers through NVML, read-only, for the lab's fixtures.

    python3 lab/realgpu/nvml_record.py OUTDIR [--load-seconds N]

Writes, per run:
  nvml-raw.json     system versions and, per GPU, the device fields the NVML simulator is calibrated on (the shape of
                    lab/realgpu/samples/h100-580/nvml-raw.json), GPU-instance profiles 0-17 with their possible
                    placements (answered with MIG disabled too)
  nvml-health.json  the health answers the doctor reads (remapped rows, ECC, clock event reasons, PCIe, temperatures,
                    virtualization mode, fabric info, a 200 ms wait for critical Xid events), first GPU
  nvml-usage.json   what a metrics exporter reads (utilization, memory, power, clocks, running compute processes,
                    per-process utilization, GPM metrics where the GPU has GPM): samples while idle, then, with
                    --load-seconds N > 0, while a short PyTorch matrix product runs on GPU 0, then after it

It only queries. It never calls a set* function (no MIG mode, clocks, persistence, compute mode, GPM streaming); the
load is an ordinary CUDA program of this machine's PyTorch (skipped, and said so, when torch is not importable).
Every answer that raises is kept as {"error": "<NVMLError name>: <text>"} so that "not supported" is recorded too.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

import pynvml as N

LOAD = r'''
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
n = 0
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    n += 20
print(n)
'''

GPM_METRICS = ('GRAPHICS_UTIL', 'SM_UTIL', 'SM_OCCUPANCY', 'INTEGER_UTIL', 'ANY_TENSOR_UTIL', 'DFMA_TENSOR_UTIL',
               'HMMA_TENSOR_UTIL', 'IMMA_TENSOR_UTIL', 'DRAM_BW_UTIL', 'FP64_UTIL', 'FP32_UTIL', 'FP16_UTIL',
               'PCIE_TX_PER_SEC', 'PCIE_RX_PER_SEC', 'NVLINK_TOTAL_RX_PER_SEC', 'NVLINK_TOTAL_TX_PER_SEC')


def err(e):
    return {'error': '%s: %s' % (type(e).__name__, e)}


def call(fn, *args):
    try:
        value = fn(*args)
    except Exception as e:  # every NVML error is an answer worth recording
        return err(e)
    return plain(value)


def plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, _ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if hasattr(value, 'value') and isinstance(value, ctypes._SimpleCData):
        return value.value
    if type(value).__name__ == 'nvmlFriendlyObject':
        return {k: plain(v) for k, v in vars(value).items()}
    return value


def placements(handle, profile_id):
    try:
        count = ctypes.c_uint(0)
        N.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
        arr = (N.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        N.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr, ctypes.byref(count))
        return [{'start': arr[i].start, 'size': arr[i].size} for i in range(count.value)]
    except Exception as e:
        return err(e)


def gi_profiles(handle):
    out = []
    for index in range(18):
        row = {'index': index}
        info = call(N.nvmlDeviceGetGpuInstanceProfileInfo, handle, index)
        row['nvmlDeviceGetGpuInstanceProfileInfo'] = info
        if hasattr(N, 'nvmlDeviceGetGpuInstanceProfileInfoV'):
            row['nvmlDeviceGetGpuInstanceProfileInfoV'] = call(N.nvmlDeviceGetGpuInstanceProfileInfoV, handle, index)
        if isinstance(info, dict) and 'id' in info:
            row['placements'] = placements(handle, info['id'])
        out.append(row)
    return out


def fabric(handle):
    for name in ('c_nvmlGpuFabricInfo_v3_t', 'c_nvmlGpuFabricInfo_v2_t'):
        struct = getattr(N, name, None)
        if struct is None:
            continue
        try:
            info = struct()
            version = getattr(N, 'nvmlGpuFabricInfo_v3' if 'v3' in name else 'nvmlGpuFabricInfo_v2', None)
            if version is not None and hasattr(info, 'version'):
                info.version = version
            N.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
            d = plain(info)
            d['struct'] = name
            return d
        except Exception as e:
            last = err(e)
    try:
        info = N.c_nvmlGpuFabricInfo_t()
        N.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        return dict(plain(info), struct='c_nvmlGpuFabricInfo_t')
    except Exception as e:
        return {'V': last, 'plain': err(e)} if 'last' in locals() else err(e)


def device_raw(index):
    h = N.nvmlDeviceGetHandleByIndex(index)
    d = {'index': index}
    for key, fn in (('name', N.nvmlDeviceGetName), ('uuid', N.nvmlDeviceGetUUID), ('serial', N.nvmlDeviceGetSerial),
                    ('board_part', N.nvmlDeviceGetBoardPartNumber), ('vbios', N.nvmlDeviceGetVbiosVersion),
                    ('arch', N.nvmlDeviceGetArchitecture), ('cc', N.nvmlDeviceGetCudaComputeCapability),
                    ('mig_mode', N.nvmlDeviceGetMigMode), ('persistence', N.nvmlDeviceGetPersistenceMode),
                    ('compute_mode', N.nvmlDeviceGetComputeMode), ('max_mig', N.nvmlDeviceGetMaxMigDeviceCount),
                    ('virt_mode', N.nvmlDeviceGetVirtualizationMode), ('gsp_fw', N.nvmlDeviceGetGspFirmwareVersion),
                    ('gsp_mode', N.nvmlDeviceGetGspFirmwareMode), ('power_limit', N.nvmlDeviceGetPowerManagementLimit),
                    ('ecc', N.nvmlDeviceGetEccMode), ('brand', N.nvmlDeviceGetBrand), ('minor', N.nvmlDeviceGetMinorNumber),
                    ('module_id', getattr(N, 'nvmlDeviceGetModuleId', None)),
                    ('numa', getattr(N, 'nvmlDeviceGetNumaNodeId', None)),
                    ('board_id', N.nvmlDeviceGetBoardId), ('multi_gpu_board', N.nvmlDeviceGetMultiGpuBoard),
                    ('num_cores', getattr(N, 'nvmlDeviceGetNumGpuCores', None)),
                    ('power_limit_default', N.nvmlDeviceGetPowerManagementDefaultLimit),
                    ('power_limit_constraints', N.nvmlDeviceGetPowerManagementLimitConstraints),
                    ('enforced_power_limit', N.nvmlDeviceGetEnforcedPowerLimit)):
        d[key] = call(fn, h) if fn else {'error': 'not in this nvidia-ml-py'}
    pci = call(N.nvmlDeviceGetPciInfo, h)
    if isinstance(pci, dict):
        d['pci'] = {k: (('0x%08x' % v) if k in ('pciDeviceId', 'pciSubSystemId') else v) for k, v in pci.items()
                    if k in ('busId', 'pciDeviceId', 'pciSubSystemId', 'domain', 'bus', 'device')}
    else:
        d['pci'] = pci
    d['mem_v1'] = call(N.nvmlDeviceGetMemoryInfo, h)
    d['mem_v2'] = call(N.nvmlDeviceGetMemoryInfo, h, N.nvmlMemory_v2) if hasattr(N, 'nvmlMemory_v2') else None
    d['bar1'] = call(N.nvmlDeviceGetBAR1MemoryInfo, h)
    d['nvlink_states'] = [call(N.nvmlDeviceGetNvLinkState, h, link) for link in range(18)]
    d['gi_profiles'] = gi_profiles(h)
    return d


def health(h):
    def hist(x):
        return {k: getattr(x, k) for k in ('max', 'high', 'partial', 'low', 'none')}

    out = {'remapped_rows': call(N.nvmlDeviceGetRemappedRows, h)}
    try:
        out['row_remapper_histogram'] = hist(N.nvmlDeviceGetRowRemapperHistogram(h))
    except Exception as e:
        out['row_remapper_histogram'] = err(e)
    for key, fn, args in (
            ('retired_pages_sbe', N.nvmlDeviceGetRetiredPages, (N.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,)),
            ('retired_pages_dbe', N.nvmlDeviceGetRetiredPages, (N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,)),
            ('retired_pages_pending', N.nvmlDeviceGetRetiredPagesPendingStatus, ()),
            ('ecc_mode', N.nvmlDeviceGetEccMode, ()),
            ('ecc_uncorrected_volatile', N.nvmlDeviceGetTotalEccErrors, (N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC)),
            ('ecc_uncorrected_aggregate', N.nvmlDeviceGetTotalEccErrors, (N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_AGGREGATE_ECC)),
            ('ecc_corrected_volatile', N.nvmlDeviceGetTotalEccErrors, (N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC)),
            ('ecc_corrected_aggregate', N.nvmlDeviceGetTotalEccErrors, (N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_AGGREGATE_ECC)),
            ('clocks_event_reasons', N.nvmlDeviceGetCurrentClocksEventReasons, ()),
            ('supported_clocks_event_reasons', N.nvmlDeviceGetSupportedClocksEventReasons, ()),
            ('pcie_gen_current', N.nvmlDeviceGetCurrPcieLinkGeneration, ()),
            ('pcie_gen_max', N.nvmlDeviceGetMaxPcieLinkGeneration, ()),
            ('pcie_gen_gpu_max', N.nvmlDeviceGetGpuMaxPcieLinkGeneration, ()),
            ('pcie_width_current', N.nvmlDeviceGetCurrPcieLinkWidth, ()),
            ('pcie_width_max', N.nvmlDeviceGetMaxPcieLinkWidth, ()),
            ('pcie_replay_counter', N.nvmlDeviceGetPcieReplayCounter, ()),
            ('temperature_gpu', N.nvmlDeviceGetTemperature, (N.NVML_TEMPERATURE_GPU,)),
            ('temperature_threshold_slowdown', N.nvmlDeviceGetTemperatureThreshold, (N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,)),
            ('temperature_threshold_shutdown', N.nvmlDeviceGetTemperatureThreshold, (N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,)),
            ('temperature_threshold_mem_max', N.nvmlDeviceGetTemperatureThreshold, (N.NVML_TEMPERATURE_THRESHOLD_MEM_MAX,)),
            ('power_usage_mw', N.nvmlDeviceGetPowerUsage, ()),
            ('performance_state', N.nvmlDeviceGetPerformanceState, ()),
            ('virtualization_mode', N.nvmlDeviceGetVirtualizationMode, ()),
            ('host_vgpu_mode', N.nvmlDeviceGetHostVgpuMode, ()),
            ('inforom_image', N.nvmlDeviceGetInforomImageVersion, ()),
            ('supported_event_types', N.nvmlDeviceGetSupportedEventTypes, ()),
            ('display_active', N.nvmlDeviceGetDisplayActive, ()),
            ('memory_bus_width', N.nvmlDeviceGetMemoryBusWidth, ()),
            ('max_clock_graphics', N.nvmlDeviceGetMaxClockInfo, (N.NVML_CLOCK_GRAPHICS,)),
            ('max_clock_sm', N.nvmlDeviceGetMaxClockInfo, (N.NVML_CLOCK_SM,)),
            ('max_clock_mem', N.nvmlDeviceGetMaxClockInfo, (N.NVML_CLOCK_MEM,)),
            ('app_clock_graphics', N.nvmlDeviceGetApplicationsClock, (N.NVML_CLOCK_GRAPHICS,)),
            ('total_energy_mj', N.nvmlDeviceGetTotalEnergyConsumption, ()),
            ('accounting_mode', N.nvmlDeviceGetAccountingMode, ()),
    ):
        out[key] = call(fn, h, *args)
    out['fabric_info'] = fabric(h)
    out['conf_compute_state'] = call(N.nvmlSystemGetConfComputeState)
    out['excluded_device_count'] = call(N.nvmlGetExcludedDeviceCount)
    # a 200 ms wait for the critical Xid event type (the doctor's health check waits the same way)
    try:
        es = N.nvmlEventSetCreate()
        try:
            N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
            try:
                ev = N.nvmlEventSetWait_v2(es, 200)
                out['xid_wait_200ms'] = {'eventType': ev.eventType, 'eventData': ev.eventData}
            except N.NVMLError as e:
                out['xid_wait_200ms'] = '%s: %s' % (type(e).__name__, e)
        finally:
            N.nvmlEventSetFree(es)
    except Exception as e:
        out['xid_wait_200ms'] = err(e)
    return out


def gpm_support(h):
    try:
        return bool(N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    except Exception as e:
        return err(e)


def gpm_metrics(h, interval=0.5):
    """GPM metrics over one interval (two samples): what DCGM's profiling fields rest on, on Hopper and later."""
    s1 = s2 = None
    try:
        s1 = N.nvmlGpmSampleAlloc()
        s2 = N.nvmlGpmSampleAlloc()
        N.nvmlGpmSampleGet(h, s1)
        time.sleep(interval)
        N.nvmlGpmSampleGet(h, s2)
        get = N.c_nvmlGpmMetricsGet_t()
        get.version = N.NVML_GPM_METRICS_GET_VERSION
        get.sample1 = s1
        get.sample2 = s2
        names = [m for m in GPM_METRICS if hasattr(N, 'NVML_GPM_METRIC_' + m)]
        get.numMetrics = len(names)
        for i, m in enumerate(names):
            get.metrics[i].metricId = getattr(N, 'NVML_GPM_METRIC_' + m)
        N.nvmlGpmMetricsGet(get)
        out = {}
        for i, m in enumerate(names):
            r = get.metrics[i]
            out[m] = {'value': r.value, 'nvmlReturn': r.nvmlReturn} if r.nvmlReturn else r.value
        return out
    except Exception as e:
        return err(e)
    finally:
        for s in (s1, s2):
            if s is not None:
                try:
                    N.nvmlGpmSampleFree(s)
                except Exception:
                    pass


def usage_sample(h, last_ts):
    s = {'t': round(time.time(), 3)}
    s['utilization'] = call(N.nvmlDeviceGetUtilizationRates, h)
    s['memory'] = call(N.nvmlDeviceGetMemoryInfo, h)
    s['power_mw'] = call(N.nvmlDeviceGetPowerUsage, h)
    s['sm_clock_mhz'] = call(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_SM)
    s['mem_clock_mhz'] = call(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_MEM)
    s['temperature'] = call(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU)
    s['clocks_event_reasons'] = call(N.nvmlDeviceGetCurrentClocksEventReasons, h)
    s['pstate'] = call(N.nvmlDeviceGetPerformanceState, h)
    s['encoder'] = call(N.nvmlDeviceGetEncoderUtilization, h)
    s['decoder'] = call(N.nvmlDeviceGetDecoderUtilization, h)
    s['energy_mj'] = call(N.nvmlDeviceGetTotalEnergyConsumption, h)
    procs = call(N.nvmlDeviceGetComputeRunningProcesses, h)
    if isinstance(procs, list):
        procs = [{k: p[k] for k in ('pid', 'usedGpuMemory', 'gpuInstanceId', 'computeInstanceId') if k in p}
                 for p in procs]
    s['compute_processes'] = procs
    util = call(N.nvmlDeviceGetProcessUtilization, h, last_ts)
    if isinstance(util, list):
        util = [{k: u[k] for k in ('pid', 'timeStamp', 'smUtil', 'memUtil', 'encUtil', 'decUtil') if k in u}
                for u in util]
    s['process_utilization'] = util
    s['gpm'] = gpm_metrics(h)
    return s


def usage(h, load_seconds):
    out = {'gpm_supported': gpm_support(h), 'samples': []}
    start_ts = int(time.time() * 1e6)

    def sample(phase):
        s = usage_sample(h, start_ts)
        s['phase'] = phase
        out['samples'].append(s)

    for _ in range(2):
        sample('idle')
    if load_seconds > 0:
        try:
            proc = subprocess.Popen([sys.executable, '-c', LOAD, str(load_seconds)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        except Exception as e:
            out['load'] = err(e)
            proc = None
        if proc is not None:
            out['load'] = {'pid': proc.pid, 'what': 'torch bf16 8192x8192 matmul loop, %ss' % load_seconds}
            time.sleep(min(4.0, load_seconds / 3.0))  # CUDA context and the first products
            end = time.time() + load_seconds
            while proc.poll() is None and time.time() < end + 30:
                sample('load')
                time.sleep(0.5)
            stdout, stderr = proc.communicate(timeout=60)
            out['load'].update({'rc': proc.returncode, 'products': stdout.strip(), 'stderr': stderr[-2000:]})
    for _ in range(2):
        time.sleep(1)
        sample('after')
    return out


def main(argv):
    outdir = argv[1]
    load_seconds = float(argv[argv.index('--load-seconds') + 1]) if '--load-seconds' in argv else 0.0
    os.makedirs(outdir, exist_ok=True)
    N.nvmlInit()
    try:
        raw = {'bindings': getattr(N, '__version__', None), 'driver': call(N.nvmlSystemGetDriverVersion),
               'cuda_driver': call(N.nvmlSystemGetCudaDriverVersion_v2),
               'nvml_version': call(N.nvmlSystemGetNVMLVersion), 'count': N.nvmlDeviceGetCount()}
        raw['gpus'] = [device_raw(i) for i in range(raw['count'])]
        h0 = N.nvmlDeviceGetHandleByIndex(0)
        with open(os.path.join(outdir, 'nvml-raw.json'), 'w') as f:
            json.dump(raw, f, indent=1, sort_keys=True)
        with open(os.path.join(outdir, 'nvml-health.json'), 'w') as f:
            json.dump(health(h0), f, indent=1, sort_keys=True)
        with open(os.path.join(outdir, 'nvml-usage.json'), 'w') as f:
            json.dump(usage(h0, load_seconds), f, indent=1, sort_keys=True)
    finally:
        N.nvmlShutdown()
    print('nvml_record: wrote nvml-raw.json, nvml-health.json, nvml-usage.json to %s' % outdir)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
