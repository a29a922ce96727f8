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

Standalone on purpose: it runs on the node without Ansible, with the same pynvml the collection's modules use.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json
import os
import sys

try:
    import pynvml
except ImportError:  # pragma: no cover - the role installs the bindings first
    pynvml = None

MAX = 32


def log(msg):
    sys.stdout.write('gpuops-mig-apply: %s\n' % msg)
    sys.stdout.flush()


def canonical(name):
    """'MIG 1g.24gb+me.all' -> '1g.24gb+me.all'; attributes sorted (as mig-parted compares them)."""
    text = str(name).strip()
    if text.upper().startswith('MIG '):
        text = text[4:].strip()
    text = text.lower()
    for sep in ('+', '-'):
        if sep in text:
            base, attrs = text.split(sep, 1)
            return base + sep + ','.join(sorted(attrs.split(',')))
    return text


def load_entries(path, name):
    with open(path) as f:
        doc = json.load(f)
    configs = doc.get('mig-configs') or {}
    if name not in configs:
        raise ValueError("configuration '%s' is not in %s (available: %s)" % (name, path, ', '.join(sorted(configs))))
    entries = configs[name]
    return entries if isinstance(entries, list) else [entries]


def _filter_ok(entry, pci_device_id):
    filters = entry.get('device-filter')
    if filters is None:
        return True
    for item in (filters if isinstance(filters, list) else [filters]):
        text = str(item).strip()
        value = int(text, 16)
        digits = len(text[2:]) if text.lower().startswith('0x') else len(text)
        if (digits > 4 and value == pci_device_id) or (digits <= 4 and value == (pci_device_id >> 16) & 0xFFFF):
            return True
    return False


def wanted_for(entries, index, pci_device_id):
    """(mig enabled, {profile: count}) of the entry selecting GPU ``index``, or None."""
    for entry in entries:
        devices = entry.get('devices')
        if devices != 'all' and index not in [int(d) for d in (devices if isinstance(devices, list) else [devices])]:
            continue
        if not _filter_ok(entry, pci_device_id):
            continue
        enabled = entry.get('mig-enabled') in (True, 'true', 'True', 'yes', 1)
        devs = dict((canonical(k), int(v)) for k, v in (entry.get('mig-devices') or {}).items() if int(v) > 0)
        return enabled, devs
    return None


def gi_profiles(handle):
    """name -> {'id', 'slices', 'starts', 'size'} for the GPU-instance profiles NVML lists."""
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
        out[canonical(name)] = {
            'id': int(info.id), 'slices': int(info.sliceCount), 'starts': starts,
            'size': int(arr[0].size) if count.value else 0}
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
    """[(gi handle, profile name, complete)] - complete: exactly one compute instance spanning the GI."""
    out = []
    for name, prof in profiles.items():
        arr = (pynvml.c_nvmlGpuInstance_t * MAX)()
        count = ctypes.c_uint(MAX)
        pynvml.nvmlDeviceGetGpuInstances(handle, prof['id'], arr, ctypes.byref(count))
        for i in range(count.value):
            cis = compute_instances(arr[i])
            out.append((arr[i], name, len(cis) == 1 and cis[0][1] == prof['slices']))
    return out


def fit(items, profiles):
    """Placements for ``items`` (profile names), largest first, backtracking; None when they do not fit."""
    order = sorted(items, key=lambda n: (-profiles[n]['size'], -profiles[n]['slices'], n))
    placed = []

    def place(pos, mask):
        if pos == len(order):
            return True
        prof = profiles[order[pos]]
        for start in prof['starts']:
            bits = ((1 << prof['size']) - 1) << start
            if mask & bits:
                continue
            placed.append((order[pos], start))
            if place(pos + 1, mask | bits):
                return True
            placed.pop()
        return False

    return placed if place(0, 0) else None


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
    counts = {}
    for dummy, name, complete in have:
        if complete:
            counts[name] = counts.get(name, 0) + 1
    if counts == want and all(c for dummy, dummy2, c in have):
        log('GPU %d: MIG devices already match (%s)' % (index, describe(want)))
        return None
    items = []
    for name, count in want.items():
        items.extend([name] * count)
    layout = fit(items, profiles)
    if layout is None:
        return 'GPU %d: the geometry %s does not fit this GPU' % (index, describe(want))
    for gi, name, dummy in have:
        for ci, dummy2 in compute_instances(gi):
            pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(gi)
    for name, start in layout:
        prof = profiles[name]
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = prof['size']
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, prof['id'], ctypes.byref(placement))
        for cpid, slices in ci_profiles(gi):
            if slices == prof['slices']:
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, cpid)
                break
    log('GPU %d: MIG devices re-created (%s; %d GPU instance(s) removed first)' % (index, describe(want), len(have)))
    return None


def describe(counts):
    return ' + '.join('%dx %s' % (counts[n], n) for n in sorted(counts)) or 'no MIG devices'


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
