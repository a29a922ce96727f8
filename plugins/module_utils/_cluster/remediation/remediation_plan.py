# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's cluster decisions (issue #41), pure functions: no I/O here (remediation_kube.py does the
API calls). Which GPUs are unhealthy and what repair they need is the doctor's (_doctor/gpu_doctor_remediation.py).

plan     how to quarantine it: in a DRA pool a DeviceTaintRule for that one device (resource.k8s.io/v1, served from
         Kubernetes 1.37 on: docs/conformance/remediation.md REM-01, REM-03), first with effect None (a dry run whose
         status counts the pods a NoExecute would evict), then the effect asked; in a device-plugin pool, or where the
         API is not served, a node taint and a cordon.
record   one node annotation (RECORD_ANNOTATION, JSON) says what this loop made, why (the findings and their
         evidence) and since when; release removes exactly that, never a taint or cordon it did not make.
"""

import json
import re

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NVIDIA_DRA_DRIVER

RECORD_ANNOTATION = 'gpuops.io/gpu-remediation'
TAINT_KEY = 'gpuops.io/gpu-unhealthy'
MANAGED_BY = 'gpuops.k8s_gpu.gpu_remediation'
DRA_API_GROUP = 'resource.k8s.io'
DRA_API_VERSION = 'v1'
DRA_DRIVER = NVIDIA_DRA_DRIVER
EFFECTS = ('NoSchedule', 'NoExecute')
MODES = ('auto', 'dra', 'node')


class PlanError(Exception):
    pass


# ------------------------------------------------------------------------------------------------ quarantine plan
def device_of(slices, uuid, driver=DRA_DRIVER, node=None):
    """(driver, pool, device) of the ResourceSlice device whose attribute uuid is ``uuid`` (on ``node`` when given);
    None when no slice of ``driver`` publishes it (a device-plugin node)."""
    for s in slices or []:
        spec = s.get('spec') or {}
        if spec.get('driver') != driver or (node and spec.get('nodeName') not in (None, node)):
            continue
        for d in spec.get('devices') or []:
            attr = (d.get('attributes') or {}).get('uuid') or {}
            if attr.get('string') == uuid:
                return (driver, (spec.get('pool') or {}).get('name'), d.get('name'))
    return None


def rule_name(node, uuid):
    """The DeviceTaintRule's name: the node and the UUID's tail, lowercase (a DNS subdomain of at most 253)."""
    tail = re.sub(r'[^a-z0-9-]', '-', uuid.lower())
    return ('gpuops-%s-%s' % (re.sub(r'[^a-z0-9.-]', '-', node.lower()), tail))[:253].strip('-.')


def device_taint_rule(name, device, effect, reason):
    driver, pool, dev = device
    return {'apiVersion': '%s/%s' % (DRA_API_GROUP, DRA_API_VERSION), 'kind': 'DeviceTaintRule',
            'metadata': {'name': name, 'labels': {'app.kubernetes.io/managed-by': MANAGED_BY}},
            'spec': {'deviceSelector': {'driver': driver, 'pool': pool, 'device': dev},
                     'taint': {'key': TAINT_KEY, 'value': _label_value(reason), 'effect': effect}}}


def _label_value(text):
    v = re.sub(r'[^A-Za-z0-9_.-]', '-', str(text))[:63].strip('-_.')
    return v or 'unhealthy'


def quarantine_plan(node, unhealthy, slices, dra_served, mode='auto', driver=DRA_DRIVER):
    """[{'uuid', 'kind': 'dra'|'node', 'device', 'rule', 'why'}] for the unhealthy GPUs of ``node``.

    ``unhealthy``: {uuid: [finding]}. mode auto: DRA where a slice of ``driver`` publishes the UUID and the server
    serves DeviceTaintRule (``dra_served``), else the node; dra: refuse a GPU that cannot be tainted by device."""
    if mode not in MODES:
        raise PlanError('mode: %r is not one of %s' % (mode, ', '.join(MODES)))
    out = []
    for uuid in sorted(unhealthy):
        why = [f['id'] for f in unhealthy[uuid]]
        device = device_of(slices, uuid, driver, node) if mode != 'node' else None
        if mode == 'dra' and not (device and dra_served):
            raise PlanError('mode: dra, but GPU %s on node %s %s' % (
                uuid, node, 'is in no ResourceSlice of driver %s' % driver if not device
                else 'cannot be tainted: the server does not serve DeviceTaintRule (%s/%s)' % (
                    DRA_API_GROUP, DRA_API_VERSION)))
        if device and dra_served:
            out.append({'uuid': uuid, 'kind': 'dra', 'device': list(device), 'rule': rule_name(node, uuid), 'why': why})
        else:
            out.append({'uuid': uuid, 'kind': 'node', 'device': None, 'rule': None, 'why': why})
    return out


def node_taint(reason):
    return {'key': TAINT_KEY, 'value': _label_value(reason), 'effect': 'NoSchedule'}


def read_record(node_obj):
    """The loop's record on a Node (RECORD_ANNOTATION), {} when none; a record that is not ours is refused."""
    text = (((node_obj or {}).get('metadata') or {}).get('annotations') or {}).get(RECORD_ANNOTATION)
    if not text:
        return {}
    try:
        rec = json.loads(text)
    except ValueError:
        raise PlanError('node annotation %s is not JSON: %r' % (RECORD_ANNOTATION, text[:200]))
    if not isinstance(rec, dict) or not isinstance(rec.get('gpus', {}), dict):
        raise PlanError('node annotation %s is not a record of this loop: %r' % (RECORD_ANNOTATION, text[:200]))
    return rec


def write_record(rec):
    return json.dumps(rec, sort_keys=True, separators=(',', ':'))


def node_changes(node_obj, record, quarantine_kinds):
    """What the node itself needs for a record: (taints to add, cordon?) for a quarantine, given the GPUs quarantined
    at node level. A taint or cordon the site made stays the site's: the record says only what this loop made."""
    spec = (node_obj or {}).get('spec') or {}
    taints = spec.get('taints') or []
    has_taint = any(t.get('key') == TAINT_KEY and t.get('effect') == 'NoSchedule' for t in taints)
    want = any(k == 'node' for k in quarantine_kinds)
    return {'add_taint': want and not has_taint, 'cordon': want and not spec.get('unschedulable'),
            'site_cordoned': bool(spec.get('unschedulable')) and not record.get('cordoned'),
            'site_tainted': has_taint and not record.get('tainted')}


def release_changes(node_obj, record, uuids=None):
    """What releasing ``uuids`` (all recorded GPUs when None) takes back: {'rules': [names], 'untaint', 'uncordon',
    'record': the record left (None when empty)}. Only what the record says this loop made."""
    gpus = dict(record.get('gpus') or {})
    chosen = sorted(gpus) if uuids is None else [u for u in uuids if u in gpus]
    rules = sorted(gpus[u]['rule'] for u in chosen if gpus[u].get('rule'))
    for u in chosen:
        gpus.pop(u)
    node_level_left = any(g.get('kind') == 'node' for g in gpus.values())
    spec = (node_obj or {}).get('spec') or {}
    untaint = bool(record.get('tainted')) and not node_level_left and any(
        t.get('key') == TAINT_KEY for t in spec.get('taints') or [])
    uncordon = bool(record.get('cordoned')) and not node_level_left and bool(spec.get('unschedulable'))
    left = dict(record, gpus=gpus)
    if not node_level_left:
        left.pop('tainted', None)
        left.pop('cordoned', None)
    return {'rules': rules, 'untaint': untaint, 'uncordon': uncordon, 'released': chosen,
            'record': left if gpus else None}


# ------------------------------------------------------------------------------------------------ who holds the GPU
def dra_holders(claims, device):
    """[(namespace, pod)] of the pods a DRA device is allocated to (claims' status.allocation and reservedFor)."""
    driver, pool, dev = device
    out = set()
    for c in claims or []:
        st = c.get('status') or {}
        results = ((st.get('allocation') or {}).get('devices') or {}).get('results') or []
        if not any(r.get('driver') == driver and r.get('pool') == pool and r.get('device') == dev for r in results):
            continue
        ns = (c.get('metadata') or {}).get('namespace')
        for ref in st.get('reservedFor') or []:
            if ref.get('resource') == 'pods' and not ref.get('apiGroup'):
                out.add((ns, ref.get('name')))
    return sorted(out)


def device_plugin_holders(allocations, uuid, pods=None):
    """[(namespace, pod)] holding ``uuid`` in the kubelet's device-plugin allocations: entries with ``namespace``,
    ``name`` and ``devices`` (GPU UUIDs), or with ``pod_uid`` and ``devices`` (module gpu_device_allocations, from the
    kubelet's checkpoint) which ``pods`` (the node's Pod objects) name; a UID no pod of the node has (a pod gone since
    the checkpoint was written) holds nothing."""
    by_uid = dict(((p.get('metadata') or {}).get('uid'), p) for p in pods or [])
    out = set()
    for a in allocations or []:
        if uuid not in (a.get('devices') or []):
            continue
        if a.get('name'):
            out.add((a.get('namespace'), a.get('name')))
        elif a.get('pod_uid') in by_uid:
            meta = by_uid[a['pod_uid']].get('metadata') or {}
            out.add((meta.get('namespace'), meta.get('name')))
    return sorted(out)


def allocations_error(allocations):
    """The first allocation entry that names no pod (neither name nor pod_uid) or no devices list; None when fine."""
    for i, a in enumerate(allocations or []):
        if not isinstance(a, dict) or not (a.get('name') or a.get('pod_uid')) or not isinstance(a.get('devices'), list):
            return ('allocations[%d]: %r needs name (and namespace) or pod_uid, and devices (a list of GPU UUIDs), as '
                    'gpu_device_allocations returns them' % (i, a))
    return None
