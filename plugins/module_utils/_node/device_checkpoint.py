# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pod holds which GPU through a device plugin, from the kubelet's device-manager checkpoint (module
gpu_device_allocations; the remediation loop's holders at node level, docs/remediation.md).

The file (facts from k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go and
pkg/kubelet/cm/devicemanager/manager.go): ``<kubelet root dir>/device-plugins/kubelet_internal_checkpoint``, JSON
``{"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"}],
"RegisteredDevices": {resource: [device id]}}, "Checksum": n}``. ``DeviceIDs`` maps a NUMA node id (a JSON object key)
to the device ids; kubelets before 1.20 wrote a plain list, which is read too. The checksum is the kubelet's hash of
its Go structure (not reproducible here); it is not verified - the file is only read.

Device ids (facts from NVIDIA k8s-device-plugin v0.19.1 internal/rm/devices.go and device_map.go): with the default
deviceIDStrategy ``uuid`` a full GPU's id is its UUID (``GPU-...``) and a MIG device's its MIG UUID (``MIG-...``);
a shared (time-slicing, MPS) replica is ``<id>::<replica>`` (NewAnnotatedID); with deviceIDStrategy ``index`` the id
is the GPU's index (``0``) or ``<gpu index>:<mig index>``. A MIG device and an index need the node's GPU facts
(gpu_info: ``gpus[].index``, ``uuid``, ``mig_devices[].index``, ``uuid``) to name their GPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

CHECKPOINT = os.path.join('device-plugins', 'kubelet_internal_checkpoint')
DEFAULT_PREFIX = 'nvidia.com/'


class CheckpointError(Exception):
    pass


def checkpoint_path(root_dir: str) -> str:
    return os.path.join(root_dir, CHECKPOINT)


def read(root_dir: str) -> dict[str, Any] | None:
    """The checkpoint's decoded JSON; None when the kubelet has written none (no device plugin ever registered)."""
    path = checkpoint_path(root_dir)
    try:
        with open(path) as f:
            text = f.read()
    except (IOError, OSError) as e:
        if not os.path.exists(path):
            return None
        raise CheckpointError('%s: cannot read the kubelet\'s device-manager checkpoint: %s' % (path, e))
    try:
        data = json.loads(text)
    except ValueError as e:
        raise CheckpointError('%s: not the kubelet\'s device-manager checkpoint (JSON): %s' % (path, e))
    if not isinstance(data, dict) or not isinstance(data.get('Data'), dict):
        raise CheckpointError('%s: not the kubelet\'s device-manager checkpoint (no Data object)' % path)
    return data


def device_ids(value: Any) -> list[Any]:
    """The ids of one entry's DeviceIDs: {numa: [ids]} (kubelet 1.20 and later) or [ids] (before)."""
    if isinstance(value, dict):
        out = []  # type: list
        for numa in sorted(value, key=str):
            out.extend(value[numa] or [])
        return out
    return list(value or [])


def gpu_index(gpus: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    """{device id or MIG UUID: GPU UUID} from gpu_info's gpus: an index id, a MIG index id, a MIG UUID."""
    out: dict[str, str] = {}
    for g in gpus or []:
        uuid = g.get('uuid')
        if not uuid:
            continue
        if g.get('index') is not None:
            out[str(g['index'])] = uuid
        for m in g.get('mig_devices') or []:
            if m.get('uuid'):
                out[m['uuid']] = uuid
            if g.get('index') is not None and m.get('index') is not None:
                out['%s:%s' % (g['index'], m['index'])] = uuid
    return out


def map_id(device_id: str, index: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(GPU UUID or None, device UUID or None) for one device plugin id; a replica suffix ``::n`` is dropped."""
    base = device_id.split('::', 1)[0]
    if base.startswith('GPU-'):
        return base, base
    if base.startswith('MIG-'):
        return index.get(base), base
    parent = index.get(base)
    return parent, None


def allocations(data: Mapping[str, Any] | None, gpus: Iterable[Mapping[str, Any]] | None = None,
                prefix: str = DEFAULT_PREFIX) -> tuple[list[dict[str, Any]], list[str]]:
    """(allocations, unmapped): per pod, ``pod_uid``, ``containers``, ``resources``, ``device_ids`` (as the plugin
    named them) and ``devices`` (the GPU UUIDs, and the MIG UUIDs, they are on) for the resources starting with
    ``prefix``; ``unmapped``: device ids no GPU could be named for (a MIG UUID or an index without ``gpus``)."""
    index = gpu_index(gpus)
    entries = ((data or {}).get('Data') or {}).get('PodDeviceEntries') or []
    pods = {}  # type: dict
    unmapped = set()  # type: set
    for e in entries:
        resource = e.get('ResourceName') or ''
        if not resource.startswith(prefix) or not e.get('PodUID'):
            continue
        pod = pods.setdefault(e['PodUID'], {'pod_uid': e['PodUID'], 'containers': set(), 'resources': set(),
                                            'device_ids': set(), 'devices': set()})
        pod['containers'].add(e.get('ContainerName') or '')
        pod['resources'].add(resource)
        for i in device_ids(e.get('DeviceIDs')):
            pod['device_ids'].add(i)
            parent, dev = map_id(i, index)
            if parent:
                pod['devices'].add(parent)
            else:
                unmapped.add(i)
            if dev:
                pod['devices'].add(dev)
    out = []
    for uid in sorted(pods):
        p = pods[uid]
        out.append(dict((k, sorted(v) if isinstance(v, set) else v) for k, v in p.items()))
    return out, sorted(unmapped)


def registered(data: Mapping[str, Any] | None, prefix: str = DEFAULT_PREFIX) -> dict[str, list[str]]:
    """{resource: [device ids]} the kubelet had registered from the plugins, for the resources of ``prefix``."""
    reg = ((data or {}).get('Data') or {}).get('RegisteredDevices') or {}
    return dict((r, sorted(ids or [])) for r, ids in reg.items() if r.startswith(prefix))
