# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Re-create this node's MIG devices at boot, before the kubelet starts (role gpuops.k8s_gpu.gpu_node_sharing).

GPU and compute instances do not survive a reboot: the GPU comes back with MIG mode on and no MIG devices. The
unit gpuops-mig-geometry.service runs this once per boot. It reads the geometry file the role writes (mig-parted's
format, JSON) and the configuration name from GPUOPS_MIG_CONFIG / GPUOPS_MIG_SELECTED_CONFIG, and for every GPU an
entry selects with MIG mode active makes the GPU instances exactly the listed ones, each with one full-size compute
instance. It never changes MIG mode (that needs a GPU reset: the role does it) and never touches a GPU whose
instances already match. Exit status 1 when a GPU could not be brought to its geometry (systemctl status says why).

It runs on the node without Ansible, with the same pynvml the collection's modules use, and plans with the
module's own planner: the role installs plugins/module_utils/_node/gpu_sharing_plan.py (dependency-free) beside it,
so profile names, the device filter, placement and the geometry count are the module's (one planner).
"""

import ctypes
import json
import os
import sys

try:
    import pynvml
except ImportError:  # pragma: no cover - the role installs the bindings first
    pynvml = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import gpu_sharing_plan as plan  # installed beside this script by the role
except ImportError:  # pragma: no cover - run from the collection itself
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_plan as plan

MAX = 32


def log(msg):
    sys.stdout.write('gpuops-mig-apply: %s\n' % msg)
    sys.stdout.flush()


def load_entries(path, name):
    with open(path) as f:
        doc = json.load(f)
    configs = doc.get('mig-configs') or {}
    if name not in configs:
        raise ValueError("configuration '%s' is not in %s (available: %s)" % (name, path, ', '.join(sorted(configs))))
    entries = configs[name]
    return entries if isinstance(entries, list) else [entries]


def wanted_for(entries, index, pci_device_id):
    """(mig enabled, {profile: count}) of the entry selecting GPU ``index``, or None."""
    for entry in entries:
        devices = entry.get('devices')
        if devices != 'all' and index not in [int(d) for d in (devices if isinstance(devices, list) else [devices])]:
            continue
        filters = entry.get('device-filter')
        if filters is not None:
            filters = [plan.parse_pci_device_id(f, 'device-filter')
                       for f in (filters if isinstance(filters, list) else [filters])]
        if not plan.filter_matches(filters, pci_device_id):
            continue
        enabled = entry.get('mig-enabled') in (True, 'true', 'True', 'yes', 1)
        devs = dict((plan.canonical_profile_name(k), int(v)) for k, v in (entry.get('mig-devices') or {}).items() if int(v) > 0)
        return enabled, devs
    return None


def gi_profiles(handle):
    """name -> the planner's profile ({'name', 'id', 'slices', 'placement_size', 'placements'}) of every GPU-instance
    profile NVML lists."""
    out = {}
    for idx in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, idx)
        except pynvml.NVMLError:
            continue
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * MAX)()
        count = ctypes.c_uint(MAX)
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, arr, ctypes.byref(count))
        starts = sorted(int(arr[i].start) for i in range(count.value))
        name = _text(getattr(info, 'name', b'') or b'')
        if not name:
            continue
        name = plan.canonical_profile_name(name)
        out[name] = {
            'name': name, 'id': int(info.id), 'slices': int(info.sliceCount), 'placements': starts,
            'placement_size': int(arr[0].size) if count.value else 0}
    return out


def _text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


def ci_profiles(gi):
    out = []
    for idx in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, idx, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        except pynvml.NVMLError:
            continue
        out.append((int(info.id), int(info.sliceCount)))
    return out


def compute_instances(gi):
    """[(ci handle, slices)] of a GPU instance."""
    out = []
    for cpid, slices in ci_profiles(gi):
        arr = (pynvml.c_nvmlComputeInstance_t * MAX)()
        count = ctypes.c_uint(MAX)
        pynvml.nvmlGpuInstanceGetComputeInstances(gi, cpid, arr, ctypes.byref(count))
        out.extend((arr[i], slices) for i in range(count.value))
    return out


def gpu_instances(handle, profiles):
    """[(gi handle, the planner's GI: {'id', 'profile', 'cis': [{'full'}]})]; plan.is_complete: exactly one compute
    instance spanning the GI."""
    out = []
    for name, prof in profiles.items():
        arr = (pynvml.c_nvmlGpuInstance_t * MAX)()
        count = ctypes.c_uint(MAX)
        pynvml.nvmlDeviceGetGpuInstances(handle, prof['id'], arr, ctypes.byref(count))
        for i in range(count.value):
            cis = compute_instances(arr[i])
            out.append((arr[i], {'id': len(out), 'profile': name,
                                 'cis': [{'full': slices == prof['slices']} for dummy, slices in cis]}))
    return out


def apply_gpu(index, want):
    """Bring GPU ``index`` to ``want`` ({profile: count}); returns a problem text or None."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return ('GPU %d: MIG mode is not active (pending: %s); run the gpu_node_sharing role (it resets the GPU)'
                % (index, 'enabled' if pending == pynvml.NVML_DEVICE_MIG_ENABLE else 'disabled'))
    profiles = gi_profiles(handle)
    unknown = sorted(n for n in want if n not in profiles)
    if unknown:
        return 'GPU %d: MIG profile(s) %s not offered by this GPU (it has: %s)' % (
            index, ', '.join(unknown), ', '.join(sorted(profiles)))
    have = gpu_instances(handle, profiles)
    instances = [gi for dummy, gi in have]
    if plan.geometry_of(instances) == want and all(plan.is_complete(gi) for gi in instances):
        log('GPU %d: MIG devices already match (%s)' % (index, plan.format_geometry(want)))
        return None
    items = []
    for name, count in want.items():
        items.extend([name] * count)
    layout = plan.fit_placements(items, profiles)
    if layout is None or any(start is None for dummy, start in layout):
        return 'GPU %d: the geometry %s does not fit this GPU' % (index, plan.format_geometry(want))
    for gi, dummy in have:
        for ci, dummy2 in compute_instances(gi):
            pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(gi)
    for name, start in layout:
        prof = profiles[name]
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = prof['placement_size']
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, prof['id'], ctypes.byref(placement))
        for cpid, slices in ci_profiles(gi):
            if slices == prof['slices']:
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, cpid)
                break
    log('GPU %d: MIG devices re-created (%s; %d GPU instance(s) removed first)'
        % (index, plan.format_geometry(want), len(have)))
    return None


def main():
    path = os.environ.get('GPUOPS_MIG_CONFIG', '/etc/gpuops/mig/config.json')
    name = os.environ.get('GPUOPS_MIG_SELECTED_CONFIG', '')
    if pynvml is None:
        log('the Python module pynvml (nvidia-ml-py) is missing')
        return 1
    try:
        entries = load_entries(path, name)
    except (IOError, OSError, ValueError) as exc:
        log('cannot read the geometry: %s' % exc)
        return 1
    pynvml.nvmlInit()
    problems = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            want = wanted_for(entries, index, int(pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId))
            if want is None or not want[0]:
                continue
            try:
                problem = apply_gpu(index, want[1])
            except pynvml.NVMLError as exc:
                problem = 'GPU %d: NVML failed: %s' % (index, exc)
            if problem:
                problems.append(problem)
                log(problem)
    finally:
        pynvml.nvmlShutdown()
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
