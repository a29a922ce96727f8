# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who holds which GPU: pure accounting over Kubernetes Node and Pod objects (plain dicts, API field names).

Used by the gpu_share_report module. Nothing here talks to a cluster, so it is unit-tested with literal objects.

Sources of truth, per sharing strategy:

* gpushare (Alibaba gpushare-scheduler-extender / device plugin): node resources ``aliyun.com/gpu-mem`` (device
  memory, GiB unless the plugin runs with MiB) and ``aliyun.com/gpu-count``; pod annotations
  ``ALIYUN_COM_GPU_MEM_IDX`` (GPU index), ``ALIYUN_COM_GPU_MEM_POD`` (memory requested), ``ALIYUN_COM_GPU_MEM_DEV``
  (memory of the device), ``ALIYUN_COM_GPU_MEM_ASSIGNED`` (``true`` once the device plugin allocated it),
  ``ALIYUN_COM_GPU_MEM_ASSUME_TIME``. Per-GPU totals are node gpu-mem / gpu-count, like kubectl-inspect-gpushare.
* NVIDIA device plugin: ``nvidia.com/gpu`` (whole GPUs, or GPUs x replicas with time-slicing/MPS sharing; GFD
  labels ``nvidia.com/gpu.replicas`` and ``nvidia.com/gpu.sharing-strategy``), ``nvidia.com/gpu.shared`` (renamed
  shared resource), MIG ``nvidia.com/mig-<profile>`` (mixed strategy) or ``nvidia.com/gpu`` with
  ``nvidia.com/mig.strategy=single``. The device plugin does not publish which GPU a pod got. The collection's stacks
  do not deploy GFD: on a node without GFD labels, ``nvidia.com/gpu`` takes the strategy gpu_node_labels recorded
  for the node's pool (label ``gpuops.io/sharing-strategy``, or the one given as ``strategy_label``) when it is
  time-slicing, mps or mig. What the node publishes (its resources, GFD labels when present, a HAMi registration)
  wins over that record; a record it contradicts is a node note. The replicas per GPU likewise: GFD's
  ``nvidia.com/gpu.replicas``, else the collection's ``gpuops.io/sharing-replicas`` (the replicas the pool's stack
  configured, written with the pool's labels), marked as its record; a record GFD contradicts is a note.
* HAMi: ``nvidia.com/gpu`` (vGPUs), ``nvidia.com/gpumem`` (MiB), ``nvidia.com/gpumem-percentage``,
  ``nvidia.com/gpucores`` (percent); node annotation ``hami.io/node-nvidia-register`` (devices), pod annotation
  ``hami.io/vgpu-devices-allocated`` (``UUID,Type,MemMiB,Cores:`` per device, ``;`` between containers).
* Volcano: ``volcano.sh/gpu-memory`` / ``volcano.sh/gpu-number`` (gpu-share, pod annotation
  ``volcano.sh/gpu-index``) and ``volcano.sh/vgpu-number`` / ``vgpu-memory`` / ``vgpu-cores`` (vGPU).
* tkestack gpu-manager: ``tencent.com/vcuda-core`` (100 per GPU) and ``tencent.com/vcuda-memory`` (256 MiB units);
  pod annotations ``tencent.com/predicate-gpu-idx-<container>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, TypedDict, cast

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (  # noqa: F401 (WHOLE_GPU_STRATEGIES is re-exported)
    MIG_RESOURCE, NVIDIA_DRA_DRIVER, NVIDIA_PLUGIN_STRATEGIES, RESOURCES, WHOLE_GPU_STRATEGIES, families_conflict)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.quantity import parse_quantity
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import REPLICAS_LABEL, STRATEGY_LABEL
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry

GPUSHARE_MEM = 'aliyun.com/gpu-mem'
GPUSHARE_COUNT = 'aliyun.com/gpu-count'
ANN_IDX = 'ALIYUN_COM_GPU_MEM_IDX'
ANN_POD = 'ALIYUN_COM_GPU_MEM_POD'
ANN_DEV = 'ALIYUN_COM_GPU_MEM_DEV'
ANN_ASSIGNED = 'ALIYUN_COM_GPU_MEM_ASSIGNED'
ANN_ASSUME_TIME = 'ALIYUN_COM_GPU_MEM_ASSUME_TIME'

# HAMi's device plugin registers a node's GPUs in these annotations: read from its Stack (stacks/hami, their home)
HAMI_NODE_REGISTER = registry.stack('hami').registration_annotations
HAMI_POD_ALLOCATED = 'hami.io/vgpu-devices-allocated'
HAMI_POD_NODE = 'hami.io/vgpu-node'

VOLCANO_GPU_MEM = 'volcano.sh/gpu-memory'
VOLCANO_GPU_NUMBER = 'volcano.sh/gpu-number'
VOLCANO_GPU_INDEX = 'volcano.sh/gpu-index'

TKE_IDX_PREFIX = 'tencent.com/predicate-gpu-idx-'

# resource name -> (strategy, description, unit): the strategy model's resources (gpu_strategy.RESOURCES)
KNOWN_RESOURCES = RESOURCES
# resources requested per device (HAMi, Volcano vGPU): the container's amount is this times the device count
PER_DEVICE_RESOURCES = {
    'nvidia.com/gpu': ('nvidia.com/gpumem', 'nvidia.com/gpucores'),
    'volcano.sh/vgpu-number': ('volcano.sh/vgpu-memory', 'volcano.sh/vgpu-cores'),
}
# strategies whose accounting counts whole GPUs (or replicas of them) with nvidia.com/gpu: from the strategy model

ACTIVE_PHASES_EXCLUDED = ('Succeeded', 'Failed')

# Node, Pod, ResourceClaim, ResourceSlice objects as the API answers them, and the report's parts (the module's JSON)
KubeObject = dict[str, Any]
Amounts = dict[str, Decimal]


class HamiDevice(TypedDict):
    """A GPU of HAMi's node register annotation (parse_hami_node_register)."""
    uuid: str
    split: int
    memory_mib: int
    cores: int
    type: Any
    index: int
    health: bool


class HamiPodDevice(TypedDict):
    """A device HAMi allocated to a pod's container (parse_hami_pod_devices)."""
    container: int
    uuid: str
    type: str
    memory_mib: int
    cores: int


# ---- the report's records (issue #39 target 2: typed records). Plain dicts at run time (the module returns them as
# JSON), typed for mypy; the keys a record has only sometimes are in a total=False subclass (NotRequired is Python
# 3.11+, the modules run on 3.10).
class PodGpu(TypedDict, total=False):
    """One GPU (or pending share) a pod holds, in the pod's ``gpus`` list."""
    index: int | None
    resource: str
    uuid: str
    memory: int | float | None
    memory_unit: str
    cores: int
    pending: bool


class Holder(TypedDict, total=False):
    """A pod holding (part of) a GPU, in the GPU's ``holders`` list."""
    namespace: str
    pod: str | None
    phase: str
    resource: str
    memory: int | float | None
    cores: int
    container: int | str
    assigned: bool | None


class GpushareInfo(TypedDict, total=False):
    """A gpushare pod's annotations as read (the pod record's ``gpushare``)."""
    assigned: bool | None
    annotated_memory: int | float | None
    device_memory: str
    assume_time: str


class DraExtended(TypedDict):
    """The claim and resources the scheduler backed with DRA for a pod's extended resource requests."""
    claim: str | None
    resources: dict[str, int | float | None]


class _PodRecord(TypedDict):
    namespace: str
    name: str | None
    node: str | None
    phase: str
    requests: dict[str, int | float | None]
    gpus: list[PodGpu]


class PodRecord(_PodRecord, total=False):
    """A pod that asks for or holds GPU resources (the report's ``pods`` and ``unscheduled``, a node's ``pods``)."""
    dra_extended: DraExtended
    note: str
    gpushare: GpushareInfo


class _GpuRecord(TypedDict):
    index: int | None
    uuid: str | None
    type: Any
    memory_total: int | float | None
    memory_allocated: int | float | None
    memory_unit: str | None
    memory_percent: int | None
    holders: list[Holder]


class GpuRecord(_GpuRecord, total=False):
    """One GPU of a node (``gpus``): its memory and cores, allocated and total, and who holds it."""
    cores_total: int | float | None
    cores_allocated: int | float | None
    split: int


class _ResourceRow(TypedDict):
    allocatable: int | float | None
    allocated: int | float | None
    free: int | float | None
    percent: int | None
    unit: str


class ResourceRow(_ResourceRow, total=False):
    """One resource of a node or of the cluster: allocatable, allocated, free, percent and unit."""
    source: str


class _GpushareTotals(TypedDict):
    memory_total: int | float | None
    memory_allocated: int | float | None
    memory_percent: int | None
    memory_unit: str


class GpushareTotals(_GpushareTotals, total=False):
    """gpushare device memory of a node (with ``memory_pending``) or of the cluster."""
    memory_pending: int | float | None


class DraNode(TypedDict):
    """A node's DRA devices per driver: published (ResourceSlices) and allocated (claims)."""
    devices: dict[str | None, int]
    allocated: dict[str | None, int]


class PodView(TypedDict, total=False):
    """A pod (or another consumer of a claim: ``resource``) as the DRA part names it."""
    namespace: str
    name: str | None
    node: str | None
    phase: str | None
    resource: str


class DraDevice(TypedDict, total=False):
    """A device a ResourceSlice publishes, and the request of the claim it is allocated to."""
    driver: Any
    pool: Any
    device: Any
    node: Any
    uuid: Any
    product: Any
    type: Any
    profile: Any
    request: str | None


class _DraClaim(TypedDict):
    namespace: str
    name: str | None
    devices: list[DraDevice]
    reason: str | None


class DraClaim(_DraClaim, total=False):
    """A ResourceClaim: allocated (its devices and the pods that hold it) or pending (the scheduler's reason)."""
    state: str
    pods: list[PodView]
    shared: bool
    extended_resources: list[str | None]


class DraPart(TypedDict):
    """The report's ``dra``: whether the API serves DRA, the claims, the nodes' devices, notes."""
    served: bool
    claims: list[DraClaim]
    nodes: dict[str, DraNode]
    notes: list[str]


class _NodeRecord(TypedDict):
    name: str
    address: str
    strategies: list[str]
    conflicts: list[str]
    resources: dict[str, ResourceRow]
    gpus: list[GpuRecord]
    pods: list[PodRecord]
    notes: list[str]


class NodeRecord(_NodeRecord, total=False):
    """One node of the report; ``health`` and ``health_findings`` are the doctor's (gpu_doctor_gate.apply_health)."""
    replicas: int
    # where replicas comes from: 'gfd' (GFD's nvidia.com/gpu.replicas) or 'record' (the collection's
    # gpuops.io/sharing-replicas, the replicas the pool's stack configured)
    replicas_source: str
    physical_gpus: int | float | None
    gpushare: GpushareTotals
    dra: DraNode
    health: str
    health_findings: list[str]


class _ClusterTotals(TypedDict):
    nodes: int
    gpu_nodes: int
    resources: dict[str, ResourceRow]
    pods: int
    unscheduled_pods: int


class ClusterTotals(_ClusterTotals, total=False):
    """The report's ``cluster``: node, pod and resource totals (DRA claim counts after add_dra)."""
    gpushare: GpushareTotals
    dra_claims: int
    dra_pending_claims: int


class _Report(TypedDict):
    nodes: list[NodeRecord]
    pods: list[PodRecord]
    unscheduled: list[PodRecord]
    cluster: ClusterTotals
    notes: list[str]


class Report(_Report, total=False):
    """What analyse() returns and add_dra() completes (``dra``): the module's JSON result; ``usage`` when the module
    joined a Prometheus' dcgm-exporter series (report/usage.join)."""
    dra: DraPart
    usage: dict[str, Any]


class _NodeEntry(TypedDict):
    """analyse()'s working state for a node (not in the report: _finish makes its NodeRecord)."""
    name: str
    address: str
    node: KubeObject
    capacity: Amounts
    allocatable: Amounts
    allocated: Amounts
    gpus: list[_Gpu]
    pods: list[PodRecord]
    notes: list[str]
    pending_memory: Decimal
    gpushare_used: Decimal
    derived: Amounts
    strategies: list[str]
    conflicts: list[str]
    record_notes: list[str]
    replicas: int | None
    replicas_source: str | None


def number(value: Decimal | None) -> int | float | None:
    """A Decimal as int when whole, float otherwise (JSON-friendly)."""
    if value is None:
        return None
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def percent(used: Decimal | int, total: Decimal | int | None) -> int | None:
    """Whole percent, rounded down like kubectl-inspect-gpushare; None when there is no total."""
    if not total:
        return None
    return int(Decimal(used) * 100 / Decimal(total))


def is_gpu_resource(name: str) -> bool:
    return name in KNOWN_RESOURCES or bool(MIG_RESOURCE.match(name)) or name.startswith('nvidia.com/')


def _container_amounts(container: KubeObject, notes: list[str], where: str) -> Amounts:
    res = container.get('resources') or {}
    requests = res.get('requests') or {}
    limits = res.get('limits') or {}
    out: Amounts = {}
    for name in set(requests) | set(limits):
        if not is_gpu_resource(name):
            continue
        raw = requests.get(name, limits.get(name))
        try:
            out[name] = parse_quantity(raw)
        except ValueError:
            notes.append('%s: resource %s has an unreadable quantity %r; not counted' % (where, name, raw))
    # HAMi and Volcano vGPU: memory and cores are asked per device, so a container with 2 vGPUs holds twice as much
    for count_name, per_device in PER_DEVICE_RESOURCES.items():
        if out.get(count_name):
            for name in per_device:
                if name in out:
                    out[name] = out[name] * out[count_name]
    return out


def pod_requests(pod: KubeObject, notes: list[str] | None = None) -> Amounts:
    """Effective GPU resource requests of a pod, the way the scheduler computes them.

    Extended resources have requests == limits (a limit alone implies the request). The pod's request is the sum over
    its containers (and restartable init containers, i.e. sidecars) or the largest regular init container, whichever
    is larger, plus ``spec.overhead``.
    """
    notes = notes if notes is not None else []
    spec = pod.get('spec') or {}
    where = pod_key(pod)
    total: Amounts = {}
    for c in spec.get('containers') or []:
        for k, v in _container_amounts(c, notes, where).items():
            total[k] = total.get(k, Decimal(0)) + v
    init_max: Amounts = {}
    for c in spec.get('initContainers') or []:
        amounts = _container_amounts(c, notes, where)
        if c.get('restartPolicy') == 'Always':
            for k, v in amounts.items():
                total[k] = total.get(k, Decimal(0)) + v
        else:
            for k, v in amounts.items():
                init_max[k] = max(init_max.get(k, Decimal(0)), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (spec.get('overhead') or {}).items():
        if is_gpu_resource(k):
            try:
                total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
            except ValueError:
                notes.append('%s: overhead %s has an unreadable quantity %r; not counted' % (where, k, v))
    return dict((k, v) for k, v in total.items() if v)


# Extended resources backed by DRA (Kubernetes KEP-5004, GA in 1.37): when a DeviceClass maps the extended resource a
# pod asks for and the node advertises none of it, the scheduler allocates DRA devices for it in a ResourceClaim it
# creates (annotated resource.kubernetes.io/extended-resource-claim: "true", owned by the pod) and records it in the
# pod's status.extendedResourceClaimStatus ({resourceClaimName, requestMappings: [{containerName, resourceName,
# requestName}]}) - k8s.io/kubernetes v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/
# extendeddynamicresources.go, k8s.io/api v0.37.2 core/v1 types.go. Such a request holds a DRA device, not a device
# plugin's resource: the report counts it once, in the claim's devices (DRAX-07).
EXTENDED_RESOURCE_CLAIM_ANNOTATION = 'resource.kubernetes.io/extended-resource-claim'


def dra_extended(pod: KubeObject) -> tuple[str | None, Amounts]:
    """(claim name, {resource: amount}) of the pod's extended resources that the scheduler backed with DRA devices
    (status.extendedResourceClaimStatus), the amounts from the pod's requests; (None, {}) when there are none."""
    st = (pod.get('status') or {}).get('extendedResourceClaimStatus') or {}
    names = set(m.get('resourceName') for m in st.get('requestMappings') or [] if m.get('resourceName'))
    if not st.get('resourceClaimName') or not names:
        return None, {}
    requests = pod_requests(pod)
    return st['resourceClaimName'], dict((k, v) for k, v in requests.items() if k in names)


def pod_key(pod: KubeObject) -> str:
    meta = pod.get('metadata') or {}
    return '%s/%s' % (meta.get('namespace') or 'default', meta.get('name'))


def pod_counts(pod: KubeObject) -> bool:
    """Whether a pod holds resources: everything except Succeeded and Failed pods."""
    return ((pod.get('status') or {}).get('phase') or 'Pending') not in ACTIVE_PHASES_EXCLUDED


def _int_list(text: object) -> list[int]:
    """'0' / '0,1' / ' 2 ' -> [0] / [0, 1] / [2]; ValueError otherwise."""
    items = [p.strip() for p in str(text).split(',') if p.strip()]
    if not items:
        raise ValueError('empty')
    return [int(p) for p in items]


def parse_hami_node_register(text: str | None) -> tuple[list[HamiDevice], str | None]:
    """Devices from HAMi's node register annotation.

    Two forms are known: ``UUID,count,devmem,devcore,type,numa,health[,index[,mode]]:`` entries joined with ``:``, and
    a JSON list of objects (``id``, ``count``, ``devmem``, ``devcore``, ``type``, ``numa``, ``health``, ``index``).
    Returns (devices, error); error is None when the text was understood.
    """
    text = (text or '').strip()
    if not text:
        return [], None
    devices: list[HamiDevice] = []
    if text.startswith('['):
        try:
            data = json.loads(text)
        except ValueError as e:
            return [], 'not valid JSON (%s)' % e
        for pos, item in enumerate(data):
            if not isinstance(item, dict):
                return [], 'entry %d is not an object' % pos
            low = dict((str(k).lower(), v) for k, v in item.items())
            try:
                devices.append({
                    'uuid': str(low.get('id') or low.get('uuid')),
                    'split': int(low.get('count', 0)),
                    'memory_mib': int(low.get('devmem', 0)),
                    'cores': int(low.get('devcore', 100)),
                    'type': low.get('type'),
                    'index': int(low['index']) if low.get('index') is not None else pos,
                    'health': bool(low.get('health', True)),
                })
            except (TypeError, ValueError):
                return [], 'entry %d has non-numeric count/devmem/devcore/index' % pos
        return devices, None
    for pos, entry in enumerate([e for e in text.split(':') if e.strip()]):
        items = entry.split(',')
        if len(items) < 5:
            return [], 'entry %d (%r) has fewer than 5 fields' % (pos, entry)
        try:
            dev: HamiDevice
            dev = {'uuid': items[0], 'split': int(items[1]), 'memory_mib': int(items[2]), 'cores': int(items[3]),
                   'type': items[4], 'index': pos, 'health': True}
            if len(items) > 6:
                dev['health'] = items[6].strip().lower() == 'true'
            if len(items) > 7 and items[7].strip():
                dev['index'] = int(items[7])
        except ValueError:
            return [], 'entry %d (%r) has non-numeric count/devmem/devcore/index' % (pos, entry)
        devices.append(dev)
    return devices, None


def parse_hami_pod_devices(text: str | None) -> tuple[list[HamiPodDevice], str | None]:
    """HAMi's ``hami.io/vgpu-devices-allocated``: ``UUID,Type,MemMiB,Cores:`` per device, ``;`` between containers.

    Returns (list of {container, uuid, type, memory_mib, cores}, error).
    """
    out: list[HamiPodDevice] = []
    for cpos, part in enumerate((text or '').split(';')):
        for entry in [e for e in part.split(':') if e.strip()]:
            items = entry.split(',')
            if len(items) < 4:
                return [], 'container %d entry %r has fewer than 4 fields' % (cpos, entry)
            try:
                out.append({'container': cpos, 'uuid': items[0], 'type': items[1], 'memory_mib': int(items[2]),
                            'cores': int(items[3])})
            except ValueError:
                return [], 'container %d entry %r has non-numeric memory/cores' % (cpos, entry)
    return out, None


def node_address(node: KubeObject) -> str:
    addresses = (node.get('status') or {}).get('addresses') or []
    for kind in ('InternalIP', 'ExternalIP', 'Hostname'):
        for a in addresses:
            if a.get('type') == kind and a.get('address'):
                return a['address']
    return ''


def _quantities(mapping: dict[str, Any] | None, notes: list[str], where: str) -> Amounts:
    out: Amounts = {}
    for k, v in (mapping or {}).items():
        if not is_gpu_resource(k):
            continue
        try:
            out[k] = parse_quantity(v)
        except ValueError:
            notes.append('%s: %s has an unreadable quantity %r; ignored' % (where, k, v))
    return out


def _label_int(labels: dict[str, str], key: str) -> int | None:
    value = labels.get(key)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def node_strategies(node: KubeObject, resources: Amounts, strategy_label: str = STRATEGY_LABEL) -> list[str]:
    """The sharing strategies a node's resources, labels and annotations show, sorted (each Stack's node_shows; the
    node's ``strategy_label`` value, the pool gpu_node_labels recorded, where the agents' own signs do not tell)."""
    meta = node.get('metadata') or {}
    labels = meta.get('labels') or {}
    annotations = meta.get('annotations') or {}
    recorded = labels.get(strategy_label)
    stacks = registry.stacks()
    registered = [s.name for s in stacks if any(a in annotations for a in s.registration_annotations)]
    return sorted(s.name for s in stacks if s.node_shows(labels, annotations, resources, registered, recorded))


def record_notes(node: KubeObject, strategies: list[str], strategy_label: str = STRATEGY_LABEL) -> list[str]:
    """A note when the pool the collection recorded (an NVIDIA device plugin strategy in ``strategy_label``) is not
    what the node's resources and GFD labels show (another device plugin strategy): the report follows the node; the
    note makes the disagreement visible (a stale label, a plugin config that did not take, GFD's view of it)."""
    labels = (node.get('metadata') or {}).get('labels') or {}
    recorded = labels.get(strategy_label)
    shown = [s for s in strategies if s in NVIDIA_PLUGIN_STRATEGIES]
    if recorded not in NVIDIA_PLUGIN_STRATEGIES or not shown or recorded in shown:
        return []
    return ["label %s=%s (the pool gpu_node_labels recorded) but the node's resources and GPU feature discovery "
            "labels show %s; the report follows what the node publishes" % (strategy_label, recorded, ', '.join(shown))]


# GPU feature discovery's label of the replicas per GPU (k8s-device-plugin v0.19.1 internal/lm/resource.go; GFD-07)
GFD_REPLICAS_LABEL = 'nvidia.com/gpu.replicas'


def node_replicas(node: KubeObject) -> tuple[int | None, str | None, str | None]:
    """(replicas per GPU above one or None, its source, a note or None). GFD's nvidia.com/gpu.replicas wins where
    the node has it ('gfd'); else the collection's record of the replicas its stack configured for the pool
    (REPLICAS_LABEL, 'record'; the collection's stacks do not deploy GFD). A record GFD's label contradicts is a
    note, as record_notes does for the strategy: the report follows GFD."""
    labels = (node.get('metadata') or {}).get('labels') or {}
    gfd = _label_int(labels, GFD_REPLICAS_LABEL)
    record = _label_int(labels, REPLICAS_LABEL)
    if gfd is None:
        return (record, 'record', None) if record and record > 1 else (None, None, None)
    note = None
    if record and record > 1 and record != gfd:
        note = ("label %s=%d (the replicas per GPU the pool's stack configured) but GPU feature discovery's %s=%d; "
                "the report follows GPU feature discovery" % (REPLICAS_LABEL, record, GFD_REPLICAS_LABEL, gfd))
    return (gfd, 'gfd', note) if gfd > 1 else (None, None, note)


def node_conflicts(strategies: Iterable[str]) -> list[str]:
    """Accounting conflicts: several schedulers count the same GPUs independently. DRA beside a device plugin is
    dra_conflicts' one message (with the devices published and the resource advertised), never a second one here."""
    conflicts: list[str] = []
    # a strategy that claims devices (dra) is never counted here
    strategies = [s for s in strategies if not getattr(registry.find(s), 'claims_devices', False)]
    if not families_conflict(strategies):
        return conflicts
    whole = [s for s in strategies if s in WHOLE_GPU_STRATEGIES]
    # each present strategy's own words, in the order of the strategy model
    for stack in registry.stacks():
        if stack.name in strategies:
            conflicts.extend(stack.accounting_conflicts(strategies, whole))
    if not conflicts:
        conflicts.append('several GPU accountings on the same node (%s): their schedulers hand out the same GPUs'
                         % ', '.join(strategies))
    return conflicts


class _Gpu(object):
    def __init__(self, index: int | None, uuid: str | None = None, memory_total: Decimal | None = None,
                 memory_unit: str | None = None, cores_total: Decimal | None = None, gpu_type: Any = None,
                 split: int | None = None) -> None:
        self.index = index
        self.uuid = uuid
        self.memory_total = memory_total
        self.memory_unit = memory_unit
        self.cores_total = cores_total
        self.type = gpu_type
        self.split = split
        self.memory_allocated = Decimal(0)
        self.cores_allocated = Decimal(0)
        self.holders: list[Holder] = []

    def as_dict(self) -> GpuRecord:
        out: GpuRecord = {
            'index': self.index, 'uuid': self.uuid, 'type': self.type,
            'memory_total': number(self.memory_total), 'memory_allocated': number(self.memory_allocated),
            'memory_unit': self.memory_unit,
            'memory_percent': percent(self.memory_allocated, self.memory_total),
            'holders': self.holders}
        if self.cores_total is not None:
            out['cores_total'] = number(self.cores_total)
            out['cores_allocated'] = number(self.cores_allocated)
        if self.split is not None:
            out['split'] = self.split
        return out


def _gpu_for(gpus: list[_Gpu], index: int | None = None, uuid: str | None = None) -> _Gpu | None:
    """The GPU of ``gpus`` with ``uuid`` (when given), else with ``index``; None when there is none."""
    for g in gpus:
        if (uuid is not None and g.uuid == uuid) or (uuid is None and index is not None and g.index == index):
            return g
    return None


def _gpu_made(gpus: list[_Gpu], make: Callable[[], _Gpu], index: int | None = None, uuid: str | None = None) -> _Gpu:
    """_gpu_for's GPU, or a new one (``make``) added to ``gpus``."""
    g = _gpu_for(gpus, index, uuid)
    if g is None:
        g = make()
        gpus.append(g)
    return g


def analyse(nodes: list[KubeObject], pods: list[KubeObject], gpushare_memory_unit: str = 'GiB',
            restricted: bool = False, strategy_label: str = STRATEGY_LABEL) -> Report:
    """The whole report (without table/report text) from lists of Node and Pod dicts.

    ``strategy_label``: the node label gpu_node_labels records the pool's strategy in (node_strategies, record_notes).

    With ``restricted`` (the nodes were filtered), pods on nodes outside the list are left out instead of being
    reported as held by an unknown node.
    """
    notes: list[str] = []
    report_nodes: list[_NodeEntry] = []
    by_name: dict[str, _NodeEntry] = {}
    for node in sorted(nodes, key=lambda n: (n.get('metadata') or {}).get('name') or ''):
        meta = node.get('metadata') or {}
        name: str = meta.get('name') or ''
        status = node.get('status') or {}
        where = 'node %s' % name
        capacity = _quantities(status.get('capacity'), notes, where)
        allocatable = _quantities(status.get('allocatable'), notes, where)
        entry: _NodeEntry = {
            'name': name, 'address': node_address(node), 'node': node, 'capacity': capacity,
            'allocatable': allocatable, 'allocated': {}, 'gpus': [], 'pods': [], 'notes': [],
            'pending_memory': Decimal(0), 'gpushare_used': Decimal(0), 'derived': {},
            'strategies': node_strategies(node, dict(capacity, **allocatable), strategy_label), 'conflicts': [],
            'record_notes': [], 'replicas': None, 'replicas_source': None,
        }
        # the collection's record of the node's pool against what the node shows: a node note, and a cluster note
        entry['record_notes'] = record_notes(node, entry['strategies'], strategy_label)
        entry['replicas'], entry['replicas_source'], replicas_note = node_replicas(node)
        if replicas_note:
            entry['record_notes'].append(replicas_note)
        entry['notes'].extend(entry['record_notes'])
        by_name[name] = entry
        report_nodes.append(entry)
        annotations = meta.get('annotations') or {}
        # gpushare devices
        if allocatable.get(GPUSHARE_MEM):
            count = capacity.get(GPUSHARE_COUNT) or allocatable.get(GPUSHARE_COUNT)
            if count:
                per = (capacity.get(GPUSHARE_MEM) or allocatable[GPUSHARE_MEM]) / count
                for i in range(int(count)):
                    entry['gpus'].append(_Gpu(i, memory_total=per, memory_unit=gpushare_memory_unit))
            else:
                entry['notes'].append('%s has no %s; per-GPU totals unknown' % (GPUSHARE_MEM, GPUSHARE_COUNT))
        # Volcano gpu-share devices
        elif allocatable.get(VOLCANO_GPU_MEM) and allocatable.get(VOLCANO_GPU_NUMBER):
            count = allocatable[VOLCANO_GPU_NUMBER]
            per = (capacity.get(VOLCANO_GPU_MEM) or allocatable[VOLCANO_GPU_MEM]) / count
            for i in range(int(count)):
                entry['gpus'].append(_Gpu(i, memory_total=per, memory_unit='MiB'))
        # HAMi devices
        for key in HAMI_NODE_REGISTER:
            if key in annotations:
                devices, error = parse_hami_node_register(annotations[key])
                if error:
                    entry['notes'].append('annotation %s not understood (%s); HAMi per-GPU view skipped' % (key, error))
                if devices:
                    entry['derived']['nvidia.com/gpumem'] = sum((Decimal(d['memory_mib']) for d in devices), Decimal(0))
                    entry['derived']['nvidia.com/gpucores'] = sum((Decimal(d['cores']) for d in devices), Decimal(0))
                for d in devices:
                    entry['gpus'].append(_Gpu(d['index'], uuid=d['uuid'], memory_total=Decimal(d['memory_mib']),
                                              memory_unit='MiB', cores_total=Decimal(d['cores']), gpu_type=d['type'],
                                              split=d['split']))
                break

    unscheduled: list[PodRecord] = []
    report_pods: list[PodRecord] = []
    for pod in sorted(pods, key=pod_key):
        if not pod_counts(pod):
            continue
        meta = pod.get('metadata') or {}
        annotations = meta.get('annotations') or {}
        spec = pod.get('spec') or {}
        requests = pod_requests(pod, notes)
        hami_alloc = annotations.get(HAMI_POD_ALLOCATED)
        if not requests and ANN_IDX not in annotations and not hami_alloc:
            continue
        node_name = spec.get('nodeName')
        if restricted and node_name and node_name not in by_name:
            continue
        rec: PodRecord = {
            'namespace': meta.get('namespace') or 'default', 'name': meta.get('name'), 'node': node_name,
            'phase': (pod.get('status') or {}).get('phase') or 'Pending',
            'requests': dict((k, number(v)) for k, v in sorted(requests.items())),
            'gpus': [],
        }
        claim, backed = dra_extended(pod)
        if backed:
            # held as DRA devices (the claim is in the report's DRA part), not from a device plugin's allocatable
            rec['dra_extended'] = {'claim': claim, 'resources': dict((k, number(v)) for k, v in sorted(backed.items()))}
        report_pods.append(rec)
        on_node = by_name.get(node_name) if node_name else None
        if on_node is None:
            if node_name:
                rec['note'] = 'node %s is not in the report' % node_name
            unscheduled.append(rec)
            continue
        on_node['pods'].append(rec)
        for k, v in requests.items():
            if k in backed:
                continue
            on_node['allocated'][k] = on_node['allocated'].get(k, Decimal(0)) + v
        _place_gpushare(on_node, rec, annotations, requests, gpushare_memory_unit)
        _place_volcano(on_node, rec, annotations, requests)
        _place_hami(on_node, rec, hami_alloc)
        _place_tke(on_node, rec, annotations)

    for entry in report_nodes:
        entry['conflicts'] = node_conflicts(entry['strategies'])
    return _finish(report_nodes, report_pods, unscheduled, notes, gpushare_memory_unit)


def _holder(rec: PodRecord, **extra: Any) -> Holder:
    # extra: Holder's optional keys (resource, memory, cores, container, assigned), each given only where it applies
    return cast(Holder, dict({'namespace': rec['namespace'], 'pod': rec['name'], 'phase': rec['phase']}, **extra))


def _place_gpushare(entry: _NodeEntry, rec: PodRecord, annotations: dict[str, str], requests: Amounts,
                    unit: str) -> None:
    mem = requests.get(GPUSHARE_MEM)
    if mem is None and ANN_IDX not in annotations:
        return
    assigned = annotations.get(ANN_ASSIGNED)
    info: GpushareInfo = {'assigned': None if assigned is None else str(assigned).strip().lower() == 'true'}
    if ANN_POD in annotations:
        try:
            ann_mem = parse_quantity(annotations[ANN_POD])
            info['annotated_memory'] = number(ann_mem)
            if mem is None:
                mem = ann_mem
        except ValueError:
            entry['notes'].append('%s/%s: %s=%r is not a number' % (rec['namespace'], rec['name'], ANN_POD,
                                                                    annotations[ANN_POD]))
    if ANN_DEV in annotations:
        info['device_memory'] = annotations[ANN_DEV]
    if ANN_ASSUME_TIME in annotations:
        info['assume_time'] = annotations[ANN_ASSUME_TIME]
    mem = mem or Decimal(0)
    entry['gpushare_used'] += mem
    rec['gpushare'] = info
    idx_text = annotations.get(ANN_IDX)
    indexes = None
    if idx_text is not None:
        try:
            indexes = _int_list(idx_text)
        except ValueError:
            entry['notes'].append('%s/%s: %s=%r is not a GPU index (or a comma-separated list of them); counted as '
                                  'pending' % (rec['namespace'], rec['name'], ANN_IDX, idx_text))
    if not indexes:
        entry['pending_memory'] += mem
        rec['gpus'].append({'index': None, 'resource': GPUSHARE_MEM, 'memory': number(mem), 'memory_unit': unit,
                            'pending': True})
        return
    share = mem / len(indexes)
    if len(indexes) > 1:
        entry['notes'].append('%s/%s holds GPUs %s; its %s %s are split evenly between them in this report' % (
            rec['namespace'], rec['name'], ','.join(str(i) for i in indexes), number(mem), unit))
    for i in indexes:
        gpu = _gpu_made(entry['gpus'], lambda: _Gpu(i, memory_unit=unit), index=i)
        gpu.memory_allocated += share
        gpu.holders.append(_holder(rec, memory=number(share), resource=GPUSHARE_MEM, assigned=info['assigned']))
        rec['gpus'].append({'index': i, 'resource': GPUSHARE_MEM, 'memory': number(share), 'memory_unit': unit})
        if gpu.memory_total is None:
            entry['notes'].append('GPU %d is referenced by %s/%s but the node does not list it' % (
                i, rec['namespace'], rec['name']))


def _place_volcano(entry: _NodeEntry, rec: PodRecord, annotations: dict[str, str], requests: Amounts) -> None:
    mem = requests.get(VOLCANO_GPU_MEM)
    if mem is None:
        return
    idx_text = annotations.get(VOLCANO_GPU_INDEX)
    try:
        indexes = _int_list(idx_text) if idx_text is not None else []
    except ValueError:
        entry['notes'].append('%s/%s: %s=%r is not a GPU index' % (
            rec['namespace'], rec['name'], VOLCANO_GPU_INDEX, idx_text))
        indexes = []
    if not indexes:
        rec['gpus'].append({'index': None, 'resource': VOLCANO_GPU_MEM, 'memory': number(mem), 'memory_unit': 'MiB',
                            'pending': True})
        return
    share = mem / len(indexes)
    for i in indexes:
        gpu = _gpu_made(entry['gpus'], lambda: _Gpu(i, memory_unit='MiB'), index=i)
        gpu.memory_allocated += share
        gpu.holders.append(_holder(rec, memory=number(share), resource=VOLCANO_GPU_MEM))
        rec['gpus'].append({'index': i, 'resource': VOLCANO_GPU_MEM, 'memory': number(share), 'memory_unit': 'MiB'})


def _place_hami(entry: _NodeEntry, rec: PodRecord, text: str | None) -> None:
    if not text:
        return
    devices, error = parse_hami_pod_devices(text)
    if error:
        entry['notes'].append('%s/%s: annotation %s not understood (%s); its GPUs are unknown' % (
            rec['namespace'], rec['name'], HAMI_POD_ALLOCATED, error))
        return
    for d in devices:
        gpu = _gpu_for(entry['gpus'], uuid=d['uuid'])
        if gpu is None:
            entry['notes'].append('%s/%s holds HAMi device %s which the node does not register' % (
                rec['namespace'], rec['name'], d['uuid']))
            gpu = _Gpu(None, uuid=d['uuid'], memory_unit='MiB', gpu_type=d['type'])
            entry['gpus'].append(gpu)
        gpu.memory_allocated += d['memory_mib']
        gpu.cores_allocated += d['cores']
        gpu.holders.append(_holder(rec, memory=d['memory_mib'], cores=d['cores'], container=d['container'],
                                   resource='hami'))
        rec['gpus'].append({'index': gpu.index, 'uuid': d['uuid'], 'resource': 'hami', 'memory': d['memory_mib'],
                            'memory_unit': 'MiB', 'cores': d['cores']})


def _place_tke(entry: _NodeEntry, rec: PodRecord, annotations: dict[str, str]) -> None:
    for key in sorted(annotations):
        if not key.startswith(TKE_IDX_PREFIX):
            continue
        try:
            indexes = _int_list(annotations[key])
        except ValueError:
            entry['notes'].append('%s/%s: %s=%r is not a GPU index' % (
                rec['namespace'], rec['name'], key, annotations[key]))
            continue
        for i in indexes:
            gpu = _gpu_made(entry['gpus'], lambda: _Gpu(i), index=i)
            gpu.holders.append(_holder(rec, resource='gpu-manager', container=key[len(TKE_IDX_PREFIX):]))
            rec['gpus'].append({'index': i, 'resource': 'gpu-manager'})


def _resource_rows(allocatable: Amounts, allocated: Amounts, derived: Amounts | None = None
                   ) -> dict[str, ResourceRow]:
    rows: dict[str, ResourceRow] = {}
    derived = derived or {}
    for name in sorted(set(allocatable) | set(allocated)):
        total = allocatable.get(name)
        source = None
        if total is None and name in derived:
            total, source = derived[name], 'hami.io/node-nvidia-register'
        used = allocated.get(name, Decimal(0))
        meta = KNOWN_RESOURCES.get(name)
        rows[name] = {
            'allocatable': number(total) if total is not None else None,
            'allocated': number(used),
            'free': number(total - used) if total is not None else None,
            'percent': percent(used, total),
            'unit': meta[2] if meta else ('MIG device' if MIG_RESOURCE.match(name) else 'unit'),
        }
        if source:
            rows[name]['source'] = source
    return rows


def _finish(report_nodes: list[_NodeEntry], report_pods: list[PodRecord],
            unscheduled: list[PodRecord], notes: list[str], unit: str) -> Report:
    cluster_alloc: Amounts = {}
    cluster_used: Amounts = {}
    out_nodes: list[NodeRecord] = []
    cluster_notes = list(notes)
    for entry in report_nodes:
        gpus = sorted(entry['gpus'], key=lambda g: (g.index is None, g.index if g.index is not None else 0, g.uuid or ''))
        for k, v in entry['allocatable'].items():
            cluster_alloc[k] = cluster_alloc.get(k, Decimal(0)) + v
        for k, v in entry['derived'].items():
            if k not in entry['allocatable']:
                cluster_alloc[k] = cluster_alloc.get(k, Decimal(0)) + v
        for k, v in entry['allocated'].items():
            cluster_used[k] = cluster_used.get(k, Decimal(0)) + v
        resources = _resource_rows(entry['allocatable'], entry['allocated'], entry['derived'])
        node_out: NodeRecord = {
            'name': entry['name'], 'address': entry['address'], 'strategies': entry['strategies'],
            'conflicts': entry['conflicts'], 'resources': resources,
            'gpus': [g.as_dict() for g in gpus],
            'pods': entry['pods'], 'notes': entry['notes'],
        }
        replicas = entry['replicas']
        if replicas:
            node_out['replicas'] = replicas
            node_out['replicas_source'] = entry['replicas_source'] or 'gfd'
            total = entry['allocatable'].get('nvidia.com/gpu')
            if total:
                node_out['physical_gpus'] = number(total / replicas)
        gs_total = entry['allocatable'].get(GPUSHARE_MEM)
        if gs_total is not None or entry['gpushare_used']:
            used = entry['gpushare_used']
            node_out['gpushare'] = {'memory_total': number(gs_total or Decimal(0)), 'memory_allocated': number(used),
                                    'memory_pending': number(entry['pending_memory']),
                                    'memory_percent': percent(used, gs_total), 'memory_unit': unit}
        for c in entry['conflicts'] + entry['record_notes']:
            cluster_notes.append('node %s: %s' % (entry['name'], c))
        out_nodes.append(node_out)
    # the nodes with a gpushare memory section (a key of the report's output, not a strategy decision)
    gs_nodes = [n['gpushare'] for n in out_nodes if n.get('gpushare') is not None]
    cluster: ClusterTotals = {
        'nodes': len(out_nodes),
        'gpu_nodes': len([n for n in out_nodes if n['resources']]),
        'resources': _resource_rows(cluster_alloc, cluster_used),
        'pods': len(report_pods),
        'unscheduled_pods': len(unscheduled),
    }
    if gs_nodes:
        total = sum((Decimal(str(n['memory_total'])) for n in gs_nodes), Decimal(0))
        used = sum((Decimal(str(n['memory_allocated'])) for n in gs_nodes), Decimal(0))
        cluster['gpushare'] = {'memory_total': number(total), 'memory_allocated': number(used),
                               'memory_percent': percent(used, total), 'memory_unit': unit}
    return {'nodes': out_nodes, 'pods': report_pods, 'unscheduled': unscheduled, 'cluster': cluster,
            'notes': cluster_notes}


# ------------------------------------------------------------------------------------ Dynamic Resource Allocation
# resource.k8s.io/v1 (Kubernetes 1.34+): a ResourceSlice lists a driver's devices of one node (spec.driver,
# spec.nodeName, spec.pool.name, spec.devices[].name/attributes/capacity); a ResourceClaim's status.allocation names
# the devices the scheduler gave it (devices.results[]: request, driver, pool, device) and status.reservedFor the pods
# that use it. Attributes without a domain belong to the driver's domain (NVIDIA's gpu.nvidia.com: uuid, productName,
# type gpu|mig, profile; docs/conformance/dra-driver-nvidia-gpu-lab.md).
DEVICE_PLUGIN_RESOURCE = 'nvidia.com/gpu'


def _attr(device: dict[str, Any], driver: str | None, name: str) -> Any:
    """The value of a device attribute (unqualified or qualified with the driver's domain), whatever its type."""
    attrs = device.get('attributes') or {}
    value = attrs.get(name, attrs.get('%s/%s' % (driver, name)))
    if not isinstance(value, dict):
        return None
    for kind in ('string', 'version', 'int', 'bool'):
        if kind in value:
            return value[kind]
    return None


def _index_slices(slices: list[KubeObject] | None
                  ) -> tuple[dict[tuple[Any, Any, Any], DraDevice], dict[str, dict[str | None, int]]]:
    """{(driver, pool, device): device view} and {node: {driver: device count}} from ResourceSlices."""
    devices: dict[tuple[Any, Any, Any], DraDevice] = {}
    per_node: dict[str, dict[str | None, int]] = {}
    for s in slices or []:
        spec = s.get('spec') or {}
        driver = spec.get('driver')
        pool = (spec.get('pool') or {}).get('name')
        node = spec.get('nodeName')
        for d in spec.get('devices') or []:
            view: DraDevice = {'driver': driver, 'pool': pool, 'device': d.get('name'), 'node': node,
                               'uuid': _attr(d, driver, 'uuid'), 'product': _attr(d, driver, 'productName'),
                               'type': _attr(d, driver, 'type'), 'profile': _attr(d, driver, 'profile')}
            devices[(driver, pool, d.get('name'))] = view
            if node:
                counts = per_node.setdefault(node, {})
                counts[driver] = counts.get(driver, 0) + 1
    return devices, per_node


def _claim_users(pods: list[KubeObject] | None) -> dict[tuple[str, str | None], list[KubeObject]]:
    """{(namespace, claim name): [pod]} from the pods' claim references (spec.resourceClaims[].resourceClaimName, and
    status.resourceClaimStatuses[].resourceClaimName for the claims the controller made from a template)."""
    users: dict[tuple[str, str | None], list[KubeObject]] = {}
    for pod in pods or []:
        if not pod_counts(pod):
            continue
        meta = pod.get('metadata') or {}
        ns = meta.get('namespace') or 'default'
        names = [c.get('resourceClaimName') for c in (pod.get('spec') or {}).get('resourceClaims') or []]
        names += [c.get('resourceClaimName') for c in (pod.get('status') or {}).get('resourceClaimStatuses') or []]
        for n in sorted(set(x for x in names if x)):
            users.setdefault((ns, n), []).append(pod)
    return users


def _pod_view(pod: KubeObject) -> PodView:
    meta = pod.get('metadata') or {}
    return {'namespace': meta.get('namespace') or 'default', 'name': meta.get('name'),
            'node': (pod.get('spec') or {}).get('nodeName'), 'phase': (pod.get('status') or {}).get('phase') or 'Pending'}


def _unschedulable_reason(pods: list[KubeObject]) -> str | None:
    """The scheduler's reason from the first of ``pods`` whose PodScheduled condition is False."""
    for pod in pods:
        for c in (pod.get('status') or {}).get('conditions') or []:
            if c.get('type') == 'PodScheduled' and c.get('status') == 'False':
                return '%s: %s' % (c.get('reason') or 'Unschedulable', c.get('message') or '')
    return None


def analyse_dra(dra: dict[str, Any] | None, pods: list[KubeObject] | None, report_nodes: list[str] | None = None,
                restricted: bool = False) -> DraPart:
    """The report's DRA part from read_dra's answer ({'served', 'claims', 'slices', 'error'}) and the pods.

    Returns {'served', 'claims': [...], 'nodes': {node: {'devices': {driver: n}, 'allocated': {driver: n}}},
    'notes': [...]}: one entry per claim with its state (allocated or pending), its devices (driver, pool, device,
    node, and uuid/product/type/profile from the slices), the pods that hold it (status.reservedFor) or wait for it,
    whether it is shared (more than one pod), and for a pending claim the scheduler's reason from its pods' PodScheduled
    condition. With ``restricted``, allocated claims whose devices are all on nodes outside ``report_nodes`` are left
    out (pending claims have no node and stay)."""
    out: DraPart = {'served': bool(dra and dra.get('served')), 'claims': [], 'nodes': {}, 'notes': []}
    if not dra or not out['served']:
        return out
    if dra.get('error'):
        out['notes'].append('DRA: %s; ResourceClaims and ResourceSlices are not in this report' % dra['error'])
        return out
    devices, per_node = _index_slices(dra.get('slices'))
    wanted = set(report_nodes) if report_nodes is not None else None
    for node, counts in per_node.items():
        if wanted is None or node in wanted:
            out['nodes'][node] = {'devices': dict(counts), 'allocated': {}}
    users = _claim_users(pods)
    pods_by_uid: dict[str, KubeObject] = {}
    for pod in pods or []:
        uid = (pod.get('metadata') or {}).get('uid')
        if uid:
            pods_by_uid[uid] = pod
    for claim in sorted(dra.get('claims') or [], key=lambda c: ((c.get('metadata') or {}).get('namespace') or '',
                                                                (c.get('metadata') or {}).get('name') or '')):
        meta = claim.get('metadata') or {}
        ns, name = meta.get('namespace') or 'default', meta.get('name')
        status = claim.get('status') or {}
        alloc = status.get('allocation')
        waiting = users.get((ns, name), [])
        holders: list[PodView] = []
        for ref in status.get('reservedFor') or []:
            if ref.get('resource') not in (None, 'pods'):
                holders.append({'namespace': ns, 'name': ref.get('name'), 'resource': ref.get('resource')})
                continue
            held = pods_by_uid.get(ref.get('uid'))
            holders.append(_pod_view(held) if held else {'namespace': ns, 'name': ref.get('name'), 'node': None,
                                                         'phase': None})
        entry: DraClaim = {'namespace': ns, 'name': name, 'devices': [], 'reason': None}
        if (meta.get('annotations') or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == 'true':
            # the scheduler's claim for a pod's plain extended resource requests: which resources it backs
            entry['extended_resources'] = sorted(set(
                m.get('resourceName') for p in pods or []
                if ((p.get('status') or {}).get('extendedResourceClaimStatus') or {}).get('resourceClaimName') == name
                and ((p.get('metadata') or {}).get('namespace') or 'default') == ns
                for m in p['status']['extendedResourceClaimStatus'].get('requestMappings') or []
                if m.get('resourceName')))
        if alloc:
            entry['state'] = 'allocated'
            entry['pods'] = holders or [_pod_view(p) for p in waiting]
            for r in ((alloc.get('devices') or {}).get('results') or []):
                key = (r.get('driver'), r.get('pool'), r.get('device'))
                view: DraDevice = dict(devices.get(key) or {  # type: ignore[assignment]  # a copy: dict() of a TypedDict
                    'driver': key[0], 'pool': key[1], 'device': key[2], 'node': None, 'uuid': None, 'product': None,
                    'type': None, 'profile': None})
                view['request'] = r.get('request')
                if key not in devices:
                    out['notes'].append('DRA: claim %s/%s holds %s/%s/%s, which no ResourceSlice lists' % (
                        ns, name, key[0], key[1], key[2]))
                entry['devices'].append(view)
            nodes = set(d['node'] for d in entry['devices'] if d['node'])
            if restricted and wanted is not None and nodes and not nodes & wanted:
                continue
            for d in entry['devices']:
                n = out['nodes'].get(d['node'])
                if n is not None:
                    n['allocated'][d['driver']] = n['allocated'].get(d['driver'], 0) + 1
        else:
            entry['state'] = 'pending'
            entry['pods'] = [_pod_view(p) for p in waiting]
            entry['reason'] = _unschedulable_reason(waiting) or ('no pod uses it yet' if not waiting else
                                                                 'waiting for the scheduler')
        entry['shared'] = len(entry['pods']) > 1
        out['claims'].append(entry)
    return out


def dra_conflicts(node_out: NodeRecord, dra_nodes: dict[str, DraNode]) -> list[str]:
    """A node where NVIDIA's DRA driver publishes devices and the device plugin advertises nvidia.com/gpu: both hand
    out the same GPUs (the DRA driver must not run beside the device plugin)."""
    dra_node = dra_nodes.get(node_out['name'])
    published = (dra_node.get('devices') if dra_node else None) or {}
    row = node_out['resources'].get(DEVICE_PLUGIN_RESOURCE)
    advertised = row.get('allocatable') if row else None
    if published.get(NVIDIA_DRA_DRIVER) and advertised:
        return ['DRA driver %s publishes %d device(s) and the device plugin advertises %s %s on the same node: both '
                'hand out the same GPUs' % (NVIDIA_DRA_DRIVER, published[NVIDIA_DRA_DRIVER], advertised,
                                            DEVICE_PLUGIN_RESOURCE)]
    return []


def _nvidia_dra_devices(node: NodeRecord) -> int:
    """How many devices NVIDIA's DRA driver publishes on a report node (0 without a DRA part)."""
    dra_node = node.get('dra')
    return (dra_node.get('devices', {}) if dra_node else {}).get(NVIDIA_DRA_DRIVER) or 0


def add_dra(report: Report, dra: dict[str, Any] | None, pods: list[KubeObject] | None,
            restricted: bool = False) -> Report:
    """Attach the DRA part to an analyse() report: report['dra'], each node's 'dra' (published and allocated devices
    per driver), the device-plugin-beside-DRA conflicts (node and cluster notes), and in the cluster totals the nodes
    with NVIDIA DRA devices among the GPU nodes and the number of claims (all, pending)."""
    part = analyse_dra(dra, pods, [n['name'] for n in report['nodes']], restricted)
    report['dra'] = part
    for n in report['nodes']:
        if n['name'] in part['nodes']:
            n['dra'] = part['nodes'][n['name']]
        for c in dra_conflicts(n, part['nodes']):
            n['conflicts'].append(c)
            report['notes'].append('node %s: %s' % (n['name'], c))
    report['notes'].extend(part['notes'])
    report['cluster']['gpu_nodes'] = len([n for n in report['nodes'] if n['resources'] or _nvidia_dra_devices(n)])
    report['cluster']['dra_claims'] = len(part['claims'])
    report['cluster']['dra_pending_claims'] = len([c for c in part['claims'] if c['state'] == 'pending'])
    return report
