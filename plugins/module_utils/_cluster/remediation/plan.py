# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's cluster decisions (issue #41), pure functions: no I/O here (remediation/kube.py does the
API calls). Which GPUs are unhealthy and what repair they need is the doctor's (_doctor/gpu_doctor_remediation.py).

plan     how to quarantine it: in a DRA pool a DeviceTaintRule for that one device (resource.k8s.io/v1, served from
         Kubernetes 1.37 on: docs/conformance/remediation.md REM-01, REM-03), first with effect None (a dry run whose
         status counts the pods a NoExecute would evict), then the effect asked; in a device-plugin pool, or where the
         API is not served, a node taint and a cordon.
record   one node annotation (RECORD_ANNOTATION, JSON) says what this loop made, why (the findings and their
         evidence) and since when; release removes exactly that, never a taint or cordon it did not make.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.quantity import parse_count
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
def device_of(slices: list[dict[str, Any]] | None, uuid: str, driver: str = DRA_DRIVER,
              node: str | None = None) -> tuple[str, str | None, str | None] | None:
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


def rule_name(node: str, uuid: str) -> str:
    """The DeviceTaintRule's name: the node and the UUID's tail, lowercase (a DNS subdomain of at most 253)."""
    tail = re.sub(r'[^a-z0-9-]', '-', uuid.lower())
    return ('gpuops-%s-%s' % (re.sub(r'[^a-z0-9.-]', '-', node.lower()), tail))[:253].strip('-.')


def device_taint_rule(name: str, device: Sequence[str | None], effect: str, reason: object) -> dict[str, Any]:
    driver, pool, dev = device
    return {'apiVersion': '%s/%s' % (DRA_API_GROUP, DRA_API_VERSION), 'kind': 'DeviceTaintRule',
            'metadata': {'name': name, 'labels': {'app.kubernetes.io/managed-by': MANAGED_BY}},
            'spec': {'deviceSelector': {'driver': driver, 'pool': pool, 'device': dev},
                     'taint': {'key': TAINT_KEY, 'value': _label_value(reason), 'effect': effect}}}


def _label_value(text: object) -> str:
    v = re.sub(r'[^A-Za-z0-9_.-]', '-', str(text))[:63].strip('-_.')
    return v or 'unhealthy'


def quarantine_plan(node: str, unhealthy: dict[str, list[dict[str, Any]]], slices: list[dict[str, Any]] | None,
                    dra_served: bool, mode: str = 'auto', driver: str = DRA_DRIVER) -> list[dict[str, Any]]:
    """[{'uuid', 'kind': 'dra'|'node', 'device', 'rule', 'why'}] for the unhealthy GPUs of ``node``.

    ``unhealthy``: {uuid: [finding]}. mode auto: DRA where a slice of ``driver`` publishes the UUID and the server
    serves DeviceTaintRule (``dra_served``), else the node; dra: refuse a GPU that cannot be tainted by device."""
    if mode not in MODES:
        raise PlanError('mode: %r is not one of %s' % (mode, ', '.join(MODES)))
    out: list[dict[str, Any]] = []
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


def node_taint(reason: object) -> dict[str, str]:
    return {'key': TAINT_KEY, 'value': _label_value(reason), 'effect': 'NoSchedule'}


def read_record(node_obj: dict[str, Any] | None) -> dict[str, Any]:
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


def write_record(rec: dict[str, Any]) -> str:
    return json.dumps(rec, sort_keys=True, separators=(',', ':'))


def node_changes(node_obj: dict[str, Any] | None, record: dict[str, Any],
                 quarantine_kinds: Iterable[str]) -> dict[str, bool]:
    """What the node itself needs for a record: (taints to add, cordon?) for a quarantine, given the GPUs quarantined
    at node level. A taint or cordon the site made stays the site's: the record says only what this loop made."""
    spec = (node_obj or {}).get('spec') or {}
    taints = spec.get('taints') or []
    has_taint = any(t.get('key') == TAINT_KEY and t.get('effect') == 'NoSchedule' for t in taints)
    want = any(k == 'node' for k in quarantine_kinds)
    return {'add_taint': want and not has_taint, 'cordon': want and not spec.get('unschedulable'),
            'site_cordoned': bool(spec.get('unschedulable')) and not record.get('cordoned'),
            'site_tainted': has_taint and not record.get('tainted')}


def release_changes(node_obj: dict[str, Any] | None, record: dict[str, Any],
                    uuids: Iterable[str] | None = None) -> dict[str, Any]:
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
def dra_holders(claims: list[dict[str, Any]] | None, device: Sequence[str | None]) -> list[tuple[str, str]]:
    """[(namespace, pod)] of the pods a DRA device is allocated to (claims' status.allocation and reservedFor)."""
    driver, pool, dev = device
    out: set[tuple[str, str]] = set()
    for c in claims or []:
        st = c.get('status') or {}
        results = ((st.get('allocation') or {}).get('devices') or {}).get('results') or []
        if not any(r.get('driver') == driver and r.get('pool') == pool and r.get('device') == dev for r in results):
            continue
        ns = (c.get('metadata') or {}).get('namespace')
        for ref in st.get('reservedFor') or []:
            if ref.get('resource') == 'pods' and not ref.get('apiGroup'):
                out.add((ns or '', ref.get('name') or ''))
    return sorted(out)


def device_plugin_holders(allocations: list[dict[str, Any]] | None, uuid: str,
                          pods: list[dict[str, Any]] | None = None) -> list[tuple[str, str]]:
    """[(namespace, pod)] holding ``uuid`` in the kubelet's device-plugin allocations: entries with ``namespace``,
    ``name`` and ``devices`` (GPU UUIDs), or with ``pod_uid`` and ``devices`` (module gpu_device_allocations, from the
    kubelet's checkpoint) which ``pods`` (the node's Pod objects) name; a UID no pod of the node has (a pod gone since
    the checkpoint was written) holds nothing."""
    by_uid = dict(((p.get('metadata') or {}).get('uid'), p) for p in pods or [])
    out: set[tuple[str, str]] = set()
    for a in allocations or []:
        if uuid not in (a.get('devices') or []):
            continue
        if a.get('name'):
            out.add((a.get('namespace') or '', a['name']))
        elif a.get('pod_uid') in by_uid:
            meta = by_uid[a['pod_uid']].get('metadata') or {}
            out.add((meta.get('namespace') or '', meta.get('name') or ''))
    return sorted(out)


def allocations_error(allocations: list[Any] | None) -> str | None:
    """The first allocation entry that names no pod (neither name and namespace nor pod_uid) or no devices list; None
    when fine."""
    for i, a in enumerate(allocations or []):
        if (not isinstance(a, dict) or not (a.get('name') or a.get('pod_uid')) or not isinstance(a.get('devices'), list)
                or (a.get('name') and not a.get('namespace'))):
            return ('allocations[%d]: %r needs name (and namespace) or pod_uid, and devices (a list of GPU UUIDs), as '
                    'gpu_device_allocations returns them' % (i, a))
    return None


# ------------------------------------------------------------------------------------------------ validate (step 6)
VALIDATION_LABEL = 'gpuops.io/gpu-validation'
UUID_ENV = 'GPUOPS_VALIDATE_UUID'
UNSCHEDULABLE_TAINT = 'node.kubernetes.io/unschedulable'
POD_DONE = ('Succeeded', 'Failed')
# container states that do not get better by waiting (the kubelet keeps retrying them, the validation would not end)
STUCK_REASONS = ('ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull', 'CreateContainerError',
                 'CreateContainerConfigError', 'RunContainerError')


def validation_name(node: str, uuid: str) -> str:
    """The validation pod's (and claim's) name: like the rule's, prefixed gpuops-validate-."""
    return ('gpuops-validate-' + rule_name(node, uuid)[len('gpuops-'):])[:253].strip('-.')


def free_units(node_obj: dict[str, Any] | None, pods: list[dict[str, Any]] | None, resource: str) -> int:
    """How many units of the extended ``resource`` the node's allocatable has left: allocatable minus what the
    node's pods that have not ended ask for (containers' requests, else limits; the largest init container's if
    larger - the kubelet's effective request). 0 when the node publishes none. The amounts are Kubernetes quantities
    (kube/quantity.py): the API server writes 2000 units as "2k"."""
    allocatable = parse_count((((node_obj or {}).get('status') or {}).get('allocatable') or {}).get(resource) or 0)
    if allocatable is None:
        return 0
    used = 0
    for p in pods or []:
        if (p.get('status') or {}).get('phase') in POD_DONE:
            continue
        spec = p.get('spec') or {}

        def ask(c: dict[str, Any]) -> int:
            res = c.get('resources') or {}
            v = (res.get('requests') or {}).get(resource, (res.get('limits') or {}).get(resource, 0))
            return parse_count(v) or 0
        used += max([sum(ask(c) for c in spec.get('containers') or [])]
                    + [ask(c) for c in spec.get('initContainers') or []])
    return max(allocatable - used, 0)


def _validation_container(uuid: str, image: str, command: Sequence[str] | None, limits: dict[str, str] | None = None,
                          claims: list[dict[str, str]] | None = None,
                          mounts: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    ctr: dict[str, Any]
    ctr = {'name': 'validate', 'image': image, 'imagePullPolicy': 'IfNotPresent',
           'env': [{'name': UUID_ENV, 'value': uuid}], 'resources': {}}
    if command:
        ctr['command'] = list(command)
    if mounts:
        ctr['volumeMounts'] = [dict(m) for m in mounts]
    if limits:
        ctr['resources']['limits'] = limits
    if claims:
        ctr['resources']['claims'] = claims
    return ctr


def validation_objects(entry: dict[str, Any], node: str, namespace: str, image: str,
                       command: Sequence[str] | None = None, resource: str = 'nvidia.com/gpu', count: int = 1,
                       device_class: str = DRA_DRIVER, tolerations: Iterable[dict[str, Any]] | None = (),
                       runtime_class: str | None = None, pull_secrets: Iterable[str] | None = (),
                       volumes: Iterable[dict[str, Any]] | None = (),
                       volume_mounts: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The objects of one GPU's validation workload (step 6): [ResourceClaim (DRA only), Pod]. The only branch on the
    quarantine's kind.

    node level (device-plugin pool): the pod is bound to the node (spec.nodeName: the cordon and NoSchedule taints do
    not apply, the kubelet admits it and its device manager allocates) and asks ``count`` units of ``resource`` -
    every free unit of the node, so the repaired GPU, the one the plugin lists again, is among them; the check
    command finds the GPU by ``GPUOPS_VALIDATE_UUID`` in what it was given (NVIDIA_VISIBLE_DEVICES).
    dra: a ResourceClaim for exactly that device (CEL on the driver's uuid attribute), tolerating the loop's own
    device taint (the rule stays until the release); the scheduler allocates it, the pod is kept to the node by node
    affinity and tolerates the cordon."""
    name = validation_name(node, entry['uuid'])
    labels = {'app.kubernetes.io/managed-by': MANAGED_BY, VALIDATION_LABEL: _label_value(entry['uuid'])}
    meta = {'name': name, 'namespace': namespace, 'labels': labels}
    spec: dict[str, Any]
    spec = {'restartPolicy': 'Never', 'automountServiceAccountToken': False, 'terminationGracePeriodSeconds': 5,
            'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists'}] + [dict(t) for t in tolerations or []]}
    if runtime_class:
        spec['runtimeClassName'] = runtime_class
    if pull_secrets:
        spec['imagePullSecrets'] = [{'name': s} for s in pull_secrets]
    if volumes:
        spec['volumes'] = [dict(v) for v in volumes]
    out: list[dict[str, Any]] = []
    if entry['kind'] == 'dra':
        driver, _pool, _dev = entry['device']
        cel = 'device.driver == "%s" && device.attributes["%s"].uuid == "%s"' % (driver, driver, entry['uuid'])
        out.append({'apiVersion': '%s/%s' % (DRA_API_GROUP, DRA_API_VERSION), 'kind': 'ResourceClaim',
                    'metadata': dict(meta, labels=dict(labels)),
                    'spec': {'devices': {'requests': [{'name': 'gpu', 'exactly': {
                        'deviceClassName': device_class, 'allocationMode': 'ExactCount', 'count': 1,
                        'selectors': [{'cel': {'expression': cel}}],
                        'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists'}]}}]}}})
        spec['tolerations'].append({'key': UNSCHEDULABLE_TAINT, 'operator': 'Exists', 'effect': 'NoSchedule'})
        spec['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
            {'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': [node]}]}]}}}
        spec['resourceClaims'] = [{'name': 'gpu', 'resourceClaimName': name}]
        spec['containers'] = [_validation_container(entry['uuid'], image, command, claims=[{'name': 'gpu'}],
                                                    mounts=volume_mounts)]
    else:
        spec['nodeName'] = node
        spec['containers'] = [_validation_container(entry['uuid'], image, command, limits={resource: str(count)},
                                                    mounts=volume_mounts)]
    out.append({'apiVersion': 'v1', 'kind': 'Pod', 'metadata': meta, 'spec': spec})
    return out


def validation_verdict(pod: dict[str, Any] | None) -> tuple[str, str]:
    """('passed'|'failed'|'running', why) of a validation pod: Succeeded passes; Failed (the check's exit status, or
    the kubelet's refusal such as OutOfnvidia.com/gpu or UnexpectedAdmissionError) and a container stuck in a state
    waiting cannot mend (STUCK_REASONS) fail, with the reason."""
    st = (pod or {}).get('status') or {}
    phase = st.get('phase')
    if phase == 'Succeeded':
        return 'passed', 'the validation pod succeeded'
    statuses = st.get('containerStatuses') or []
    if phase == 'Failed':
        for c in statuses:
            term = (c.get('state') or {}).get('terminated') or {}
            if term:
                return 'failed', 'the check exited %s (%s)%s' % (
                    term.get('exitCode'), term.get('reason') or 'Error',
                    ': %s' % term['message'][:300] if term.get('message') else '')
        return 'failed', 'the pod failed: %s%s' % (st.get('reason') or 'Failed',
                                                   ' - %s' % st['message'][:300] if st.get('message') else '')
    for c in statuses:
        wait = (c.get('state') or {}).get('waiting') or {}
        if wait.get('reason') in STUCK_REASONS:
            return 'failed', 'the container cannot start: %s%s' % (
                wait['reason'], ' - %s' % wait['message'][:300] if wait.get('message') else '')
    return 'running', 'the pod is %s' % (phase or 'not yet started')


def validate_settings_error(v: dict[str, Any] | None) -> str | None:
    """The first bad key of the module's ``validate`` option, named; None when fine."""
    if not v:
        return None
    if not isinstance(v.get('image'), str) or not re.match(r'^[A-Za-z0-9][A-Za-z0-9._/:@-]*$', v['image'] or ''):
        return 'validate.image: %r is not a container image reference' % (v.get('image'),)
    ref = v['image'].rsplit('/', 1)[-1]
    if '@' not in ref and (':' not in ref or ref.endswith(':latest')):
        return 'validate.image: %r must pin a tag other than latest, or a digest' % v['image']
    if v.get('command') is not None and (not isinstance(v['command'], list) or not all(
            isinstance(x, str) for x in v['command'])):
        return 'validate.command: %r must be a list of strings (the container command)' % (v['command'],)
    for key in ('timeout',):
        if not isinstance(v.get(key), int) or v[key] <= 0:
            return 'validate.%s: %r must be a positive number of seconds' % (key, v.get(key))
    if not re.match(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', v.get('namespace') or '') or len(v['namespace']) > 63:
        return 'validate.namespace: %r is not a namespace name' % (v.get('namespace'),)
    return None
