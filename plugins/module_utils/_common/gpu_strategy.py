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

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
#   (dra: its family 'dra' has no extended resource: a node that advertises any GPU resource belongs to another
#   family, so the one rule below keeps the DRA driver off the device plugins' nodes)


def _props(title, family, resources, nvidia_plugin=False, scheduler_extender=False, runtime_class=False,
           default_runtime=False, compute_mode=None, node_strategy=True, node_labels=True):
    return {'title': title, 'family': family, 'resources': resources, 'nvidia_plugin': nvidia_plugin,
            'scheduler_extender': scheduler_extender, 'runtime_class': runtime_class,
            'default_runtime': default_runtime, 'compute_mode': compute_mode, 'node_strategy': node_strategy,
            'node_labels': node_labels}


STRATEGY_MODEL = (
    ('exclusive', _props('exclusive', WHOLE_GPU, ('nvidia.com/gpu',), nvidia_plugin=True, runtime_class=True)),
    ('time-slicing', _props('time-slicing', WHOLE_GPU, ('nvidia.com/gpu', 'nvidia.com/gpu.shared'), nvidia_plugin=True,
                            runtime_class=True, compute_mode='default')),
    ('mps', _props('mps', WHOLE_GPU, ('nvidia.com/gpu', 'nvidia.com/gpu.shared'), nvidia_plugin=True,
                   runtime_class=True)),
    ('mig', _props('mig', WHOLE_GPU, ('nvidia.com/gpu', 'nvidia.com/mig-'), nvidia_plugin=True, runtime_class=True)),
    ('gpushare', _props('gpushare', 'aliyun-gpu-mem', ('aliyun.com/gpu-mem', 'aliyun.com/gpu-count'),
                        scheduler_extender=True, default_runtime=True, compute_mode='default')),
    ('volcano', _props('Volcano', 'volcano-gpu-mem', ('volcano.sh/',), default_runtime=True, compute_mode='default')),
    ('hami', _props('HAMi', 'hami', ('nvidia.com/gpu', 'nvidia.com/gpumem', 'nvidia.com/gpucores',
                                     'nvidia.com/gpumem-percentage'), default_runtime=True, compute_mode='default')),
    ('gpu-manager', _props('gpu-manager', 'tencent-vcuda', ('tencent.com/vcuda-core', 'tencent.com/vcuda-memory'),
                           compute_mode='default')),
    ('gpu-operator', _props('GPU operator', WHOLE_GPU, ('nvidia.com/gpu', 'nvidia.com/gpu.shared', 'nvidia.com/mig-'),
                            node_strategy=False, node_labels=False)),
    # Dynamic Resource Allocation (NVIDIA's DRA driver): devices are claimed through ResourceClaims, not extended
    # resources, so it is an accounting of its own that no device plugin sees; the driver shares GPUs itself
    # (time-slicing, MPS, MIG per claim), hence no node-level strategy; its nodes get the pool's labels
    ('dra', _props('DRA', 'dra', (), node_strategy=False)),
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
DEFAULT_STRATEGY = 'exclusive'
# what role gpu_node_sharing accepts as its compute mode: auto (the strategy's), keep (leave it alone) or a mode
COMPUTE_MODES = ('default', 'exclusive_process', 'prohibited')
COMPUTE_MODE_SETTINGS = ('auto',) + COMPUTE_MODES + ('keep',)


def strategy(name):
    """The properties of a strategy (KeyError for an unknown name)."""
    return _MODEL[name]


def titles(names):
    """The strategies' names as messages spell them, joined: 'gpushare, Volcano and HAMi'."""
    words = [_MODEL[n]['title'] for n in names]
    return ' and '.join([', '.join(words[:-1]), words[-1]]) if len(words) > 1 else ''.join(words)


def node_compute_mode(name, setting='auto'):
    """The compute mode to set on a node of strategy ``name``: the strategy's own for ``auto`` (None: leave it alone),
    None for ``keep``, else the mode ``setting`` names. ValueError for an unknown strategy or setting."""
    if name not in _MODEL:
        raise ValueError('%r is not a strategy; allowed: %s' % (name, ', '.join(STRATEGIES)))
    if setting not in COMPUTE_MODE_SETTINGS:
        raise ValueError('%r is not a compute mode setting; allowed: %s' % (setting, ', '.join(COMPUTE_MODE_SETTINGS)))
    if setting == 'auto':
        return _MODEL[name]['compute_mode']
    return None if setting == 'keep' else setting


def mig_config_name(devices, config_name=''):
    """The mig-parted config name of a mig pool: ``config_name`` when given, else one made of the geometry
    ({'1g.10gb': 2, '3g.40gb': 1} -> 'gpuops-1g-10gb-2-3g-40gb-1'). The stack's MIG manager selects it and role
    gpu_node_sharing writes it (filter gpu_strategy's mig_config_name): one name, computed here only."""
    if config_name:
        return config_name
    return 'gpuops-' + '-'.join('%s-%s' % (k.replace('.', '-'), v) for k, v in sorted((devices or {}).items()))


def family(name):
    """Accounting family of a strategy."""
    return _MODEL[name]['family']


def resource_family(name):
    """Accounting family of an extended resource name, or None when it is not a GPU resource.

    nvidia.com/gpu is whole-GPU accounting (HAMi advertises it too, but a node whose strategy is already hami is not
    checked against its own resources: see foreign_resources)."""
    if name in ('nvidia.com/gpu', 'nvidia.com/gpu.shared') or name.startswith('nvidia.com/mig-'):
        return WHOLE_GPU
    if name.startswith('aliyun.com/gpu'):
        return 'aliyun-gpu-mem'
    if name.startswith('volcano.sh/'):
        return 'volcano-gpu-mem'
    if name.startswith('tencent.com/vcuda'):
        return 'tencent-vcuda'
    if name in ('nvidia.com/gpumem', 'nvidia.com/gpucores', 'nvidia.com/gpumem-percentage'):
        return 'hami'
    return None


def positive_quantity(value):
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


def foreign_resources(name, allocatable, current=None):
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


def families_conflict(names):
    """THE rule over strategies found on one node: the accounting families they use, when more than one (else [])."""
    fams = []
    for n in names:
        f = family(n) if n in _MODEL else None
        if f is not None and f not in fams:
            fams.append(f)
    return fams if len(fams) > 1 else []
