"""GPU kwok nodes for lab tests, made from what a real lab node published (issue #36): the one place a lab test gets a
GPU kwok node or writes what a GPU node's agents publish. Nothing here is written from probe facts.

* ``bare_node``: a GPU machine before its sharing stack. Of the recorded shape's labels (lab/node/recordings/
  gpu-nodes.json, made by lab/tests/integration/test_node_daemonset_real.py on a real lab node: kubelet, containerd,
  NVIDIA's device plugin and GFD on the NVML simulator) it carries those the collection's node layer writes too
  (lab/kube/real.py SHAPE_LABELS, and nvidia.com/gpu.present), and no GPU resource: no device plugin runs yet (gpushare
  refuses a node that already advertises nvidia.com/gpu).
* ``agents_node``/``agents_published``: a node whose pool's agents run (exclusive, time-slicing; mps: GFD's labels,
  no resource), every GFD label and extended resource as the real node published them (RECORDED_AGENTS).
* ``mig_published``: what NVIDIA's device plugin and GFD published on a real node once a MIG geometry was applied
  (the recorded MIG shapes, lab/kube/real.py RECORDED_MIG); None where no real node recorded that geometry.
  ``mig_node``: a whole kwok node of a recorded MIG shape (every GFD label, the MIG devices).
* ``PAINTED``: what lab tests still write on GPU nodes by hand because no real node recorded it: each entry names the
  agent, what is written and every file that writes it ('; '-separated). The painted_* functions (painted_mig,
  painted_mig_state) are those stand-ins; a file calling one must be named in PAINTED. The tooling test
  lab/tests/tooling/test_no_painted_nodes.py checks both and lists the test files still painting GPU nodes (its
  allow-list only shrinks).
* ``NOT_RECORDED``/``NOT_BUILT``: the strategies whose node agents no real lab node runs, and why: the Go module
  proxy, the lab's only source of Go programs, refuses each of their modules with "403 Forbidden ... This module
  version is not available." (the exact answers below, and in docs/lab.md).
"""
from __future__ import annotations

import os
import sys

_KUBE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'kube')
if _KUBE not in sys.path:
    sys.path.insert(0, _KUBE)

import real  # noqa: E402  lab/kube/real.py: the recording and the shapes

GFD_MIG_STRATEGY = 'nvidia.com/mig.strategy'
# the MIG manager's state label (its values: pending, rebooting, success, failed)
MIG_STATE = 'nvidia.com/mig.config.state'

# agent -> (what lab tests write by hand, where, why no recording gives it)
PAINTED = {
    'nvidia-mig-manager': ('the label nvidia.com/mig.config.state=success once a geometry is applied (painted_mig_state)',
                           'lab/tests/integration/test_lifecycle_suite_real.py mig_manager; '
                           'lab/tests/integration/test_gpu_sharing_stack_real.py stack_node; '
                           'lab/bench/cluster_real/bench.py kwok_node',
                           'no real lab node runs the MIG manager (no MIG reconfiguration on the NVML simulator), and '
                           'it cannot be built here: the Go module proxy answers `go mod download -json '
                           'github.com/NVIDIA/mig-parted@v0.13.0` (and @v0.12.1) with "403 Forbidden ... This module '
                           'version is not available"'),
    'nvidia-device-plugin (MIG geometries not recorded)': (
        'the MIG devices a geometry other than a recorded one (lab/kube/real.py RECORDED_MIG) publishes, and GFD\'s '
        'nvidia.com/mig.strategy label, taken from the readiness the collection asks for',
        'lab/tests/integration/test_lifecycle_suite_real.py mig_manager (via painted_mig)',
        'the recording has a100x8-mig-single (1g.10gb x 7, single) and h100x2-mig-mixed only'),
    'HAMi device plugin': ('the node registration annotations hami.io/node-nvidia-register, node-handshake, '
                           'node-nvidia-score', 'lab/tests/integration/test_lifecycle_real.py HAMI_REGISTRATION',
                           'HAMi\'s device plugin does not run on a real lab node: it cannot be built here (NOT_BUILT '
                           '\'hami\')'),
}


def shape(name):
    """The recorded shape ``name`` (a key of the recording's shapes); an unknown name fails, naming the shapes."""
    shapes = real.load_recording()['shapes']
    if name not in shapes:
        raise KeyError('no recorded shape %r (recorded: %s in %s)' % (name, ', '.join(sorted(shapes)), real.RECORDING))
    return shapes[name]


def agrees(facts, shape_name):
    """Fails when the probe facts a test hands the collection (gpu_sharing_stack_facts) describe other GPUs than the
    recorded shape its node is made of: GPU count and memory."""
    rec = shape(shape_name)['labels']
    gpus = facts['gpus']
    got = (str(len(gpus)), str(gpus[0].get('memory_total_mib')))
    want = (rec['nvidia.com/gpu.count'], rec['nvidia.com/gpu.memory'])
    if got != want:
        raise AssertionError('facts %s (count, memory MiB) disagree with the recorded shape %s %s'
                             % (got, shape_name, want))


def bare_node(name, shape_name, facts=None, labels=None):
    """A kwok node of the recorded shape before its stack: the recorded labels the node layer writes too, no GPU
    resource. ``facts``: the probe facts the test gives the collection for it (checked against the shape);
    ``labels``: more labels (not GPU ones: those come from the recording)."""
    if facts is not None:
        agrees(facts, shape_name)
    node = real.layer_node(name, shape(shape_name))
    node['metadata']['labels'].update(labels or {})
    return node


def bare_sharing_node(name, sharing_shape, facts=None, labels=None):
    """A kwok node of the GPUs of a recorded time-slicing/MPS shape (real.RECORDED_SHARING: two A100s) before its
    stack, as bare_node: the shape's labels the node layer writes, no GPU resource; but the product label GFD writes
    without sharing, taken from the recorded plain shape of the same inventory (GFD appends -SHARED to the product
    only while a sharing config is active; the recording has no plain two-A100 shape)."""
    if sharing_shape not in real.RECORDED_SHARING:
        raise KeyError('%r is no recorded sharing shape (recorded: %s)'
                       % (sharing_shape, ', '.join(sorted(real.RECORDED_SHARING))))
    node = bare_node(name, sharing_shape, facts=facts, labels=labels)
    rec = shape(sharing_shape)
    plain = [n for n, other in sorted(real.load_recording()['shapes'].items())
             if other['inventory'] == rec['inventory'] and not other.get('sharing_strategy')
             and not other.get('mig_strategy')]
    if not plain:
        raise KeyError('no recorded plain shape of the inventory %s' % rec['inventory'])
    node['metadata']['labels']['nvidia.com/gpu.product'] = shape(plain[0])['labels']['nvidia.com/gpu.product']
    return node


def plain_node(name, labels=None, taints=None):
    """A kwok node without GPUs (a control-plane node): the recorded nodes' base, no nvidia.com label or resource."""
    node = bare_node(name, 't4x1')
    node['metadata']['labels'] = dict((k, v) for k, v in node['metadata']['labels'].items()
                                      if not k.startswith('nvidia.com/'))
    node['metadata']['labels'].update(labels or {})
    if taints:
        node['spec'] = {'taints': list(taints)}
    return node


def mig_shape(shape_name, strategy, devices):
    """The recorded MIG shape of the same GPUs as ``shape_name`` for a MIG strategy and the collection's devices
    (profile -> instances per GPU), or None."""
    inventory = shape(shape_name)['inventory']
    for name, (strat, devs, _instances) in sorted(real.RECORDED_MIG.items()):
        rec = shape(name)
        if strat == strategy and devs == devices and rec['inventory'] == inventory \
                and rec['gpus'] == shape(shape_name)['gpus']:
            return name
    return None


def mig_published(shape_name, strategy, devices):
    """What the device plugin and GFD published on a real node of ``shape_name``'s GPUs under this MIG geometry:
    {'labels': {GFD's mig.strategy}, 'capacity': ..., 'allocatable': ...}, or None where no real node recorded it."""
    name = mig_shape(shape_name, strategy, devices)
    if name is None:
        return None
    rec = shape(name)
    return {'shape': name, 'labels': {GFD_MIG_STRATEGY: rec['labels'][GFD_MIG_STRATEGY]},
            'capacity': dict(rec['capacity']), 'allocatable': dict(rec['allocatable'])}


# strategy -> what a real lab node recorded of its node agents (gpu-nodes.json, test_node_daemonset_real.py): the
# labels GFD wrote and the extended resources the kubelet published with them. exclusive: NVIDIA's device plugin
# v0.19.1 without a config, as the collection's exclusive pool runs it (test_node_strategies_real.py), on every plain
# shape; time-slicing and mps: the shapes of lab/kube/real.py RECORDED_SHARING (2 A100s, 3 replicas, the config the
# collection renders). MIG: mig_published; DRA: lab/node/recordings/dra-slices.json.
RECORDED_AGENTS = {
    'exclusive': 'nvidia-device-plugin v0.19.1 (no config): the shape\'s nvidia.com/gpu',
    'time-slicing': 'the collection\'s own time-slicing DaemonSet on a real node (a100x2-time-slicing): GFD\'s '
                    'gpu.replicas=3, gpu.sharing-strategy=time-slicing, the -SHARED product, nvidia.com/gpu = GPUs x 3; '
                    'a T4 with the pool\'s config of 4 replicas (t4x1-time-slicing): nvidia.com/gpu 4',
    'mps': 'GFD with the pool\'s MPS config (a100x2-mps): gpu.replicas, gpu.sharing-strategy=mps, the -SHARED product; '
           'no extended resource: the plugin stops at the MPS daemon\'s health check (the shape\'s not_published)',
}
# the strategies whose node agents no real lab node recorded: a lab test publishes nothing for them
NOT_RECORDED = ('gpushare', 'volcano', 'hami', 'gpu-manager', 'gpu-operator')
# why: none of their node agents can be built here from the Go module proxy (the lab's only source of Go programs).
# Strategy -> (the module and versions asked, the proxy's exact answer), checked 2026-11-29 with `go mod download -json
# <module>@<version>` from an empty directory (GOPROXY=https://proxy.golang.org,direct, GOFLAGS=-mod=mod); docs/lab.md
# says the same. A version of `latest` means the proxy has no version list of the module at all.
_FORBIDDEN = '403 Forbidden\n\tserver response: This module version is not available.'
NOT_BUILT = {
    'gpushare': ('github.com/AliyunContainerService/gpushare-device-plugin@latest',
                 'reading https://proxy.golang.org/github.com/%21aliyun%21container%21service/gpushare-device-plugin'
                 '/@v/list: ' + _FORBIDDEN),
    'volcano': ('github.com/volcano-sh/devices@v1.10.0 (and volcano.sh/k8s-device-plugin@latest)',
                'reading https://proxy.golang.org/github.com/volcano-sh/devices/@v/v1.10.0.info: ' + _FORBIDDEN),
    'hami': ('github.com/Project-HAMi/HAMi@v2.7.1+incompatible (and @v2.6.1+incompatible)',
             'reading https://proxy.golang.org/github.com/%21project-%21h%21a%21mi/%21h%21a%21mi/@v/'
             'v2.7.1+incompatible.info: ' + _FORBIDDEN),
    'gpu-manager': ('github.com/tkestack/gpu-manager@latest',
                    'reading https://proxy.golang.org/github.com/tkestack/gpu-manager/@v/list: ' + _FORBIDDEN),
    'gpu-operator': ('github.com/NVIDIA/gpu-operator@v26.7.0 (its MIG manager: github.com/NVIDIA/mig-parted@v0.13.0, '
                     '@v0.12.1, the same answer)',
                     'reading https://proxy.golang.org/github.com/%21n%21v%21i%21d%21i%21a/gpu-operator/@v/'
                     'v26.7.0.info: ' + _FORBIDDEN),
}


def agents_shape(shape_name, strategy):
    """The recorded shape of ``shape_name``'s GPUs whose agents are those of ``strategy``'s pool, or None: exclusive -
    the plain shape itself; time-slicing, mps - the shape of real.RECORDED_SHARING of that strategy on the same
    inventory and GPU count (``shape_name`` may be that shape)."""
    if strategy not in RECORDED_AGENTS:
        return None
    rec = shape(shape_name)
    if strategy == 'exclusive':
        return shape_name if not rec.get('mig_strategy') and not rec.get('sharing_strategy') else None
    for name in sorted(real.RECORDED_SHARING):
        other = shape(name)
        if other.get('sharing_strategy') == strategy and (other['inventory'], other['gpus']) == (
                rec['inventory'], rec['gpus']):
            return name
    return None


def agents_published(shape_name, strategy, replicas=None):
    """The extended resources a pool's node agents published on a real node of the shape ({'capacity',
    'allocatable'}), or None where no real node recorded that strategy's agents on those GPUs (NOT_RECORDED, or
    another shape). ``replicas``: the pool's time-slicing/MPS replicas; the recording holds one count
    (real.RECORDED_SHARING), so another count is not recorded (None)."""
    name = agents_shape(shape_name, strategy)
    if name is None:
        return None
    if replicas is not None and name in real.RECORDED_SHARING and real.RECORDED_SHARING[name][1] != replicas:
        return None
    rec = shape(name)
    return {'capacity': dict(rec['capacity']), 'allocatable': dict(rec['allocatable'])}


def agents_labels(shape_name, strategy, replicas=None):
    """The labels GFD wrote on a real node of the shape's GPUs with ``strategy``'s agents running (every nvidia.com/
    label of the recorded agents shape but nvidia.com/gpu.present, which the node layer writes), or None where no real
    node recorded them (as agents_published, ``replicas`` included)."""
    if agents_published(shape_name, strategy, replicas=replicas) is None:
        return None
    rec = shape(agents_shape(shape_name, strategy))
    return dict((k, v) for k, v in rec['labels'].items()
                if k.startswith('nvidia.com/') and k != 'nvidia.com/gpu.present')


def agents_node(name, shape_name, strategy, labels=None):
    """A kwok node of ``shape_name``'s GPUs with its pool's agents running, all of it from the recording: every label
    GFD wrote and every extended resource the kubelet published with the pool's device plugin (agents_shape), plus
    the node layer's nvidia.com/gpu.present; ``labels``: more labels (not GPU ones). No recording: KeyError naming
    what there is."""
    found = agents_shape(shape_name, strategy)
    if found is None:
        raise KeyError('no real node recorded the %s agents on the GPUs of %s (recorded: %s; not recorded: %s)'
                       % (strategy, shape_name, ', '.join(sorted(RECORDED_AGENTS)), ', '.join(NOT_RECORDED)))
    node = real.recorded_node(name, shape(found))
    node['metadata']['labels'].pop('gpuops.io/lab')
    node['metadata']['labels'].update(labels or {})
    return node


def painted_mig(strategy, allocatable):
    """PAINTED['nvidia-device-plugin (MIG geometries not recorded)']: the MIG devices the collection's readiness asks
    for, as a device plugin would advertise them, for a geometry no real node recorded."""
    return {'shape': None, 'labels': {GFD_MIG_STRATEGY: strategy},
            'capacity': dict(allocatable), 'allocatable': dict(allocatable)}


def mig_node(name, shape_name, labels=None):
    """A kwok node of the recorded MIG shape ``shape_name`` (lab/kube/real.py RECORDED_MIG) once its geometry is
    applied: every label GFD wrote and every MIG device the kubelet published with NVIDIA's plugin under the
    collection's MIG config; ``labels``: more labels (not GPU ones). The MIG manager's own state label is not in it
    (painted_mig_state: no recording gives it)."""
    if shape_name not in real.RECORDED_MIG:
        raise KeyError('%s is no recorded MIG shape (recorded: %s)' % (shape_name, ', '.join(sorted(real.RECORDED_MIG))))
    node = real.recorded_node(name, shape(shape_name))
    node['metadata']['labels'].pop('gpuops.io/lab')
    node['metadata']['labels'].update(labels or {})
    return node


def painted_mig_state():
    """PAINTED['nvidia-mig-manager']: the label NVIDIA's MIG manager writes once it applied the geometry the node's
    nvidia.com/mig.config names. No real lab node runs the MIG manager, so this one label is written by hand; each file
    that calls this is named in PAINTED['nvidia-mig-manager'] (lab/tests/tooling/test_no_painted_nodes.py checks it)."""
    return {MIG_STATE: 'success'}
