# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU sharing strategies, defined once: names, resource names, accounting families and the rule that two
accountings never share a GPU.

Plain Python (no Ansible imports): modules, module_utils, filter and action plugins all read it.

Accounting family: how a strategy's scheduler counts a node's GPUs. Whole-GPU strategies count nvidia.com/gpu (or its
time-slicing/MPS replicas, or MIG devices); gpushare, Volcano, gpu-manager and HAMi count GPU memory (or vGPU shares)
with their own resource names. Two families on one node do not see each other's allocations: a pod holding
nvidia.com/gpu: 1 and a pod holding aliyun.com/gpu-mem: 8 land on the same GPU. So a node has one family.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

WHOLE_GPU = 'whole-gpu'

# name -> properties. Order is the order users see in messages and documentation.
#   title:             the name in messages (the project's own spelling)
#   family:            accounting family (see above)
#   resources:         extended resources the strategy's device plugin advertises (a name ending in '-' is a prefix)
#   nvidia_plugin:     deployed with NVIDIA's k8s-device-plugin (one DaemonSet per pool, a config per strategy)
#   scheduler_extender: needs the kube-scheduler extender (gpushare's HTTP extender)
#   runtime_class:     its pods run with RuntimeClass nvidia (else nvidia must be the container runtime's default)
#   default_runtime:   its device plugin's pods name no RuntimeClass, so nvidia must be the container runtime's
#                      default runtime on its nodes (the doctor checks docker's default-runtime)
#   compute_mode:      the GPU compute mode its nodes want (role gpu_node_sharing with compute mode auto): 'default'
#                      where the processes of several containers share one GPU; None leaves the mode alone (the
#                      device plugin's MPS daemon manages what MPS needs; exclusive and MIG need nothing)
#   node_strategy:     a node-level strategy (gpu_info/gpu_node_sharing know it); gpu-operator is a whole cluster stack
#   node_labels:       role gpu_node_labels labels the pool's nodes (the GPU operator labels its own nodes)
#   stack:             its renderer: module plugins/module_utils/_cluster/stacks/gpu_stack_<stack>.py, whose render_stack (one
#                      signature for every stack) stacks/render.STACKS dispatches to
#   settings:          the keys of its settings (gpu_stack_manifests' settings, role gpu_sharing_stack's variables
#                      gpu_sharing_stack_<key>); each key's schema is the renderer's SETTINGS[key]
#   resources:         the extended resources its device plugin advertises, each (name, description, unit); a name
#                      ending in '-' is a prefix (nvidia.com/mig-<profile>). The report's units and descriptions, the
#                      resource families and the names gpu_strategy returns are read from here
#   prefixes:          more names of its family, as prefixes (resource_family)
#   (dra: its family 'dra' has no extended resource: a node that advertises any GPU resource belongs to another
#   family, so the one rule below keeps the DRA driver off the device plugins' nodes)

#   node_state:        what its agents write on a Node outside the kubelet's device plugin registration, which
#                      outlives them: {'status': resources they patch into status.capacity and status.allocatable
#                      themselves (the kubelet never removes them), 'annotations': annotations they set, 'labels':
#                      node labels they set (mig: NVIDIA's MIG manager reports its state in nvidia.com/mig.config.state,
#                      stacks/nvidia MIG_STATE_LABEL, what the ready step waits for; the lifecycle suite found it
#                      left after uninstall)}. Role
#                      gpu_node_labels clears them with state absent (node_state below)

# resources that several strategies advertise: declared once
GPU = ('nvidia.com/gpu', 'GPUs', 'GPU')
GPU_SHARED = ('nvidia.com/gpu.shared', 'shared GPU replicas', 'replica')
MIG_DEVICES = ('nvidia.com/mig-', 'MIG devices', 'MIG device')
# a MIG device resource of NVIDIA's device plugin with MIG strategy mixed: nvidia.com/mig-<profile>, `.shared` when
# time-sliced (k8s-device-plugin v0.20.0); read by the nvidia stack and the share report
MIG_RESOURCE = re.compile(r'^' + re.escape(MIG_DEVICES[0]) + r'(\d+g\.\d+gb|\d+c\.\d+g\.\d+gb)(\.shared)?$')
# the name of NVIDIA's DRA driver (its ResourceSlices' spec.driver, its DeviceClass, the domain of its device
# attributes; k8s-dra-driver-gpu api/nvidia.com/resource/v1beta1 api.go GroupName; DRA-05): the dra stack, the share
# report, remediation and the doctor read it
NVIDIA_DRA_DRIVER = 'gpu.nvidia.com'


# the stack of each strategy: name -> {'stack', 'settings', 'resources' (the triples), 'prefixes'} (stack_info)
_STACKS = {}  # type: dict[str, dict]


def _props(title: str, family: str, resources: tuple, stack: str, settings: tuple, nvidia_plugin: bool = False,
           scheduler_extender: bool = False, runtime_class: bool = False, default_runtime: bool = False,
           compute_mode: str | None = None, node_strategy: bool = True, node_labels: bool = True,
           prefixes: tuple = (), node_status: tuple = (), node_annotations: tuple = (),
           shared_prune: bool = False, node_agent_labels: tuple = ()) -> tuple[dict, dict]:
    props = {'title': title, 'family': family, 'resources': tuple(r[0] for r in resources),
             'shared_prune': shared_prune,
             'nvidia_plugin': nvidia_plugin, 'scheduler_extender': scheduler_extender, 'runtime_class': runtime_class,
             'default_runtime': default_runtime, 'compute_mode': compute_mode, 'node_strategy': node_strategy,
             'node_labels': node_labels,
             'node_state': {'status': tuple(node_status), 'annotations': tuple(node_annotations),
                            'labels': tuple(node_agent_labels)}}
    return props, {'stack': stack, 'settings': tuple(settings), 'resources': tuple(resources),
                   'prefixes': tuple(prefixes), 'family': family}


def _entry(name: str, props_and_stack: tuple[dict, dict]) -> tuple[str, dict]:
    props, stack = props_and_stack
    _STACKS[name] = stack
    return name, props


STRATEGY_MODEL = (
    _entry('exclusive', _props(
        'exclusive', WHOLE_GPU, (GPU,), 'nvidia', ('nvidia',), nvidia_plugin=True, runtime_class=True)),
    _entry('time-slicing', _props(
        'time-slicing', WHOLE_GPU, (GPU, GPU_SHARED), 'nvidia', ('nvidia', 'time_slicing'), nvidia_plugin=True,
        runtime_class=True, compute_mode='default')),
    _entry('mps', _props(
        'mps', WHOLE_GPU, (GPU, GPU_SHARED), 'nvidia', ('nvidia', 'mps'), nvidia_plugin=True, runtime_class=True)),
    _entry('mig', _props(
        'mig', WHOLE_GPU, (GPU, MIG_DEVICES), 'nvidia', ('nvidia', 'mig'), nvidia_plugin=True, runtime_class=True,
        node_agent_labels=('nvidia.com/mig.config.state',))),
    _entry('gpushare', _props(
        'gpushare', 'aliyun-gpu-mem', (
            ('aliyun.com/gpu-mem', 'GPU memory (gpushare)', 'GiB'),
            ('aliyun.com/gpu-count', 'GPUs (gpushare)', 'GPU'),
        ), 'gpushare', ('gpushare',), scheduler_extender=True, default_runtime=True, compute_mode='default',
        prefixes=('aliyun.com/gpu',), shared_prune=True,
        # the device plugin patches aliyun.com/gpu-count into the Node's status itself (AliyunContainerService/
        # gpushare-device-plugin pkg/gpu/nvidia/podmanager.go patchGPUCount, 45fb8b8; GSH-12)
        node_status=('aliyun.com/gpu-count',))),
    _entry('volcano', _props(
        'Volcano', 'volcano-gpu-mem', (
            ('volcano.sh/gpu-memory', 'GPU memory (Volcano gpu-share)', 'MiB'),
            ('volcano.sh/gpu-number', 'GPUs (Volcano gpu-share)', 'GPU'),
            ('volcano.sh/vgpu-number', 'vGPUs (Volcano)', 'vGPU'),
            ('volcano.sh/vgpu-memory', 'vGPU memory (Volcano)', 'MiB'),
            ('volcano.sh/vgpu-cores', 'vGPU cores (Volcano)', '%'),
        ), 'volcano', ('volcano',), default_runtime=True, compute_mode='default', prefixes=('volcano.sh/',),
        shared_prune=True,
        # gpu-share: volcano.sh/gpu-number patched into the Node's status (volcano-sh/devices pkg/plugin/nvidia/
        # kube_interactor.go PatchGPUResourceOnNode, v1.0.0); vGPU: the registration and handshake annotations and
        # the node lock (Project-HAMi/volcano-vgpu-device-plugin pkg/util/types.go, pkg/plugin/register.go, v1.12.0;
        # VOL-16)
        node_status=('volcano.sh/gpu-number',),
        node_annotations=('volcano.sh/node-vgpu-register', 'volcano.sh/node-vgpu-handshake', 'volcano.sh/mutex.lock'))),
    _entry('hami', _props(
        'HAMi', 'hami', (
            GPU,
            ('nvidia.com/gpumem', 'vGPU memory (HAMi)', 'MiB'),
            ('nvidia.com/gpucores', 'vGPU cores (HAMi)', '%'),
            ('nvidia.com/gpumem-percentage', 'vGPU memory share (HAMi)', '%'),
        ), 'hami', ('hami',), default_runtime=True, compute_mode='default', shared_prune=True,
        # the device plugin's registration and GPU pair scores, the scheduler's handshake, the node lock
        # (Project-HAMi/HAMi pkg/device/nvidia/device.go, pkg/device-plugin/nvidiadevice/nvinternal/plugin/
        # register.go, pkg/util/nodelock/nodelock.go, v2.10.0; HAMI-17)
        node_annotations=('hami.io/node-nvidia-register', 'hami.io/node-nvidia-score', 'hami.io/node-handshake',
                          'hami.io/mutex.lock'))),
    _entry('gpu-manager', _props(
        'gpu-manager', 'tencent-vcuda', (
            ('tencent.com/vcuda-core', 'vCUDA cores (gpu-manager, 100 per GPU)', 'core'),
            ('tencent.com/vcuda-memory', 'vCUDA memory (gpu-manager, 256 MiB units)', '256MiB'),
        ), 'gpu_manager', ('gpu_manager',), compute_mode='default', prefixes=('tencent.com/vcuda',),
        shared_prune=True)),
    _entry('gpu-operator', _props(
        'GPU operator', WHOLE_GPU, (GPU, GPU_SHARED, MIG_DEVICES), 'operator', ('gpu_operator',),
        node_strategy=False, node_labels=False)),
    # Dynamic Resource Allocation (NVIDIA's DRA driver): devices are claimed through ResourceClaims, not extended
    # resources, so it is an accounting of its own that no device plugin sees; the driver shares GPUs itself
    # (time-slicing, MPS, MIG per claim), hence no node-level strategy; its nodes get the pool's labels
    _entry('dra', _props('DRA', 'dra', (), 'dra', ('dra',), node_strategy=False)),
)
_MODEL = dict(STRATEGY_MODEL)

# every strategy a pool can have (the stacks)
STRATEGIES = tuple(name for name, dummy in STRATEGY_MODEL)
# strategies of one node (gpu_info's sharing capabilities, gpu_node_sharing, gpu_node_labels pools)
NODE_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['node_strategy'])
# whole-GPU accounting strategies a node can have
WHOLE_GPU_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['family'] == WHOLE_GPU and p['node_strategy'])
# deployed with NVIDIA's k8s-device-plugin
NVIDIA_PLUGIN_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['nvidia_plugin'])
# pods run with RuntimeClass nvidia
RUNTIME_CLASS_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['runtime_class'])
# need the kube-scheduler extender
EXTENDER_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['scheduler_extender'])
# their nodes get gpu_node_labels' labels
LABELLED_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['node_labels'])
# need nvidia as the container runtime's default runtime
DEFAULT_RUNTIME_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['default_runtime'])
# want GPU compute mode Default on their nodes
DEFAULT_COMPUTE_MODE_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['compute_mode'] == 'default')
# the strategies whose shared objects have fixed names and belong to the strategy alone, all of whose pools agree on
# them: role gpu_sharing_stack prunes what a changed setting drops among them (stacks/render.prune_rules); the
# NVIDIA family's RuntimeClass is released by its records instead, the operator's and the DRA driver's shared objects
# are their Helm releases
SHARED_PRUNE_STRATEGIES = tuple(name for name, p in STRATEGY_MODEL if p['shared_prune'])
DEFAULT_STRATEGY = 'exclusive'
# every settings key of a pool (role gpu_sharing_stack's gpu_sharing_stack_<key>), in model order
SETTINGS_KEYS = ()  # type: tuple[str, ...]
# the GPU resources by exact name: name -> (strategy, description, unit); strategy None when strategies of two
# families advertise it (nvidia.com/gpu: the whole-GPU strategies and HAMi). The report reads it
RESOURCES = {}  # type: dict[str, tuple[str | None, str, str]]
_RESOURCE_FAMILY = {}   # exact name -> family of the first strategy that advertises it
_PREFIX_FAMILY = []     # (prefix, family)
for _name, _p in STRATEGY_MODEL:
    SETTINGS_KEYS += tuple(k for k in _STACKS[_name]['settings'] if k not in SETTINGS_KEYS)
    for _res, _desc, _unit in _STACKS[_name]['resources']:
        if _res.endswith('-'):
            _PREFIX_FAMILY.append((_res, _p['family']))
        elif _res not in RESOURCES:
            RESOURCES[_res] = (_name, _desc, _unit)
            _RESOURCE_FAMILY[_res] = _p['family']
        elif _RESOURCE_FAMILY[_res] != _p['family']:
            RESOURCES[_res] = (None,) + RESOURCES[_res][1:]
    _PREFIX_FAMILY.extend((_pre, _p['family']) for _pre in _STACKS[_name]['prefixes'])
del _name, _p, _res, _desc, _unit
# what role gpu_node_sharing accepts as its compute mode: auto (the strategy's), keep (leave it alone) or a mode
COMPUTE_MODES = ('default', 'exclusive_process', 'prohibited')
COMPUTE_MODE_SETTINGS = ('auto',) + COMPUTE_MODES + ('keep',)


def strategy(name: str) -> dict:
    """The properties of a strategy (KeyError for an unknown name)."""
    return _MODEL[name]


def stack_info(name: str) -> dict:
    """The stack of a strategy: its renderer ('stack', plugins/module_utils/_cluster/stacks/gpu_stack_<stack>.py), its
    settings keys and its resources as (name, description, unit). KeyError for an unknown name."""
    return _STACKS[name]


def titles(names: Iterable[str]) -> str:
    """The strategies' names as messages spell them, joined: 'gpushare, Volcano and HAMi'."""
    words = [_MODEL[n]['title'] for n in names]
    return ' and '.join([', '.join(words[:-1]), words[-1]]) if len(words) > 1 else ''.join(words)


def node_compute_mode(name: str, setting: str = 'auto') -> str | None:
    """The compute mode to set on a node of strategy ``name``: the strategy's own for ``auto`` (None: leave it alone),
    None for ``keep``, else the mode ``setting`` names. ValueError for an unknown strategy or setting."""
    if name not in _MODEL:
        raise ValueError('%r is not a strategy; allowed: %s' % (name, ', '.join(STRATEGIES)))
    if setting not in COMPUTE_MODE_SETTINGS:
        raise ValueError('%r is not a compute mode setting; allowed: %s' % (setting, ', '.join(COMPUTE_MODE_SETTINGS)))
    if setting == 'auto':
        return _MODEL[name]['compute_mode']
    return None if setting == 'keep' else setting


def mig_config_name(devices: dict | None, config_name: str = '') -> str:
    """The mig-parted config name of a mig pool: ``config_name`` when given, else one made of the geometry
    ({'1g.10gb': 2, '3g.40gb': 1} -> 'gpuops-1g-10gb-2-3g-40gb-1'). The stack's MIG manager selects it and role
    gpu_node_sharing writes it (filter gpu_strategy's mig_config_name): one name, computed here only."""
    if config_name:
        return config_name
    return 'gpuops-' + '-'.join('%s-%s' % (k.replace('.', '-'), v) for k, v in sorted((devices or {}).items()))


def resource_prefixes() -> tuple[str, ...]:
    """The name prefixes that make a pod a GPU pod (the drain's default, gpu_sharing_drain): every resource and prefix
    of every strategy, in model order, less a name that another one already starts (nvidia.com/gpu covers
    nvidia.com/gpu.shared and HAMi's nvidia.com/gpumem; gpushare's prefix aliyun.com/gpu its two resources). Read from
    the registry when called, so a strategy added to the model reaches the drain without a second list."""
    names = []
    for stack in _STACKS.values():
        for name in tuple(r[0] for r in stack['resources']) + stack['prefixes']:
            if name not in names:
                names.append(name)
    return tuple(n for n in names if not any(o != n and n.startswith(o) for o in names))


def mig_partitioned(name: str | None) -> bool:
    """Whether a node of strategy ``name`` partitions its GPUs into MIG devices itself: a node-level strategy that
    advertises MIG devices (mig; the GPU operator's MIG manager is a whole-cluster stack). The doctor reads the
    GPU-instance profiles only for it. False for None or an unknown name."""
    props = _MODEL.get(name) if name else None
    return bool(props and props['node_strategy'] and MIG_DEVICES[0] in props['resources'])


def node_state(name: str) -> dict:
    """What strategy ``name``'s agents leave on a Node: {'status': resource names they put into status.capacity and
    status.allocatable themselves, 'annotations': annotation names, 'labels': label names}; empty tuples for an
    unknown name."""
    props = _MODEL.get(name)
    return props['node_state'] if props else {'status': (), 'annotations': (), 'labels': ()}


def family(name: str) -> str:
    """Accounting family of a strategy."""
    return _MODEL[name]['family']


def resource_family(name: str) -> str | None:
    """Accounting family of an extended resource name, or None when it is not a GPU resource.

    nvidia.com/gpu is whole-GPU accounting (HAMi advertises it too, but a node whose strategy is already hami is not
    checked against its own resources: see foreign_resources)."""
    if name in _RESOURCE_FAMILY:
        return _RESOURCE_FAMILY[name]
    for prefix, fam in _PREFIX_FAMILY:
        if name.startswith(prefix):
            return fam
    return None


def positive_quantity(value: object) -> bool:
    """True when a resource quantity is more than zero ('0', '', '0m', 0 are not)."""
    try:
        text = str(value).strip()
        if text.endswith('k'):
            text = text[:-1]
        if text.endswith('m'):
            text = text[:-1]
        return float(text) > 0
    except ValueError:
        return bool(value)


def foreign_resources(name: str, allocatable: dict | None, current: str | None = None) -> list[tuple[str, object]]:
    """THE rule: memory-based and whole-GPU accounting never share a GPU.

    The GPU resources (name, quantity) of a node's allocatable that belong to another accounting family than strategy
    ``name``, sorted by resource name; only quantities above zero count. A node that already runs ``name``
    (``current``, its strategy label) is not checked: its own device plugin advertises what it advertises (HAMi
    advertises nvidia.com/gpu)."""
    if current and current == name:
        return []
    mine = family(name)
    out = []
    for res, qty in sorted((allocatable or {}).items()):
        fam = resource_family(res)
        if fam is not None and fam != mine and positive_quantity(qty):
            out.append((res, qty))
    return out


def families_conflict(names: Iterable[str]) -> list[str]:
    """THE rule over strategies found on one node: the accounting families they use, when more than one (else [])."""
    fams = []
    for n in names:
        f = family(n) if n in _MODEL else None
        if f is not None and f not in fams:
            fams.append(f)
    return fams if len(fams) > 1 else []
