"""The collection's own device-plugin DaemonSet on a real node (issue #36): a time-slicing pool rendered by
stacks/render.render (what the role's gpu_stack_manifests action runs), its images rewritten through the mirror
prefix (gpuops_mirror.registry -> gpu_sharing_stack_registry), applied on the lab's real control plane; the
DaemonSet's pod runs on a real lab node (lab/node/node.py: kubelet, containerd 2.3.4, runc), not on kwok: the
config-manager init container reads the node's nvidia.com/device-plugin.config label through the API server, the
device plugin in its container registers with the kubelet, and the Node's capacity and allocatable of
nvidia.com/gpu (GPUs x replicas) come from it; a pod asking nvidia.com/gpu runs through the pool's RuntimeClass and
its container sees the GPU the plugin allocated (NVIDIA_VISIBLE_DEVICES, the pool's deviceListStrategy envvar).

The image under the mirrored pinned name is built here FROM scratch (lab/node/node.py device_plugin_image): the
k8s-device-plugin v0.19.1 programs of lab/go (the proxy's newest; the collection pins v0.20.0), glibc, and this test's
inventory for the NVML simulator - but NOT the simulator library: it is pulled through the mirror from the lab's
registry. The `nvidia` handler of the node's containerd is added by the collection's container_runtime_config; its
binary is NVIDIA's real nvidia-container-runtime 1.20.0 in CDI mode (lab/node/node.py nvidia_toolkit: the CDI spec
nvidia-ctk generates on the simulator, whose library is the driver root's libnvidia-ml.so.<version>), so the
plugin's container (NVIDIA_VISIBLE_DEVICES=all, as the collection renders it) gets libnvidia-ml and the device nodes
injected by the toolkit, and a GPU pod gets the device node of the GPU the plugin allocated. What stays a stand-in:
the driver (the NVML simulator; no CUDA) and the device nodes (mknod; opening one fails).
Pods reach the API server through the node's CNI stand-in (lab/node/cni.py). GFD: not part of a device-plugin pool's
render (the collection deploys it only through the gpu-operator's chart). The last test records what the node
published (GFD's labels and the kubelet's extended resources) for each recorded shape - the time-slicing pool of this
file among them - into lab/node/recordings/gpu-nodes.json, from which the lab's kwok GPU nodes are made.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_daemonset_real.py
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import tarfile

import pytest

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)
import registry as lab_registry  # noqa: E402  (lab/node)
from oracle_util import INVENTORIES, build_nvml_sim, probe_facts  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-ds-node-%s' % SUFFIX
POOL = 'ds%s' % SUFFIX
NS = 'node-ds-real-%s' % SUFFIX
RUNTIME_CLASS = 'nvidia-ds-%s' % SUFFIX
# the taint NVIDIA's GPU nodes carry and the collection's DaemonSet tolerates (keeps other tests' pods off the node)
TAINT_KEY = 'nvidia.com/gpu'
MIRROR = 'mirror.gpuops.lab/nvcr'
GPUS = 2
REPLICAS = 3


def render(facts):
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    return stacks_render.render(dict(
        strategy='time-slicing', pool=POOL, nodes=[NAME], facts={NAME: facts}, registry=MIRROR,
        settings={'time_slicing': {'replicas': REPLICAS}, 'nvidia': {'runtime_class_name': RUNTIME_CLASS}}))


def daemonset(out):
    return [m for m in out['manifests'] if m['kind'] == 'DaemonSet'][0]


def apply(api, manifests):
    from kubernetes import utils
    for m in manifests:
        utils.create_from_dict(api, m)


def delete(api, manifests):
    from kubernetes import client, dynamic
    dyn = dynamic.DynamicClient(api)
    for m in reversed(manifests):
        res = dyn.resources.get(api_version=m['apiVersion'], kind=m['kind'])
        try:
            res.delete(name=m['metadata']['name'], namespace=m['metadata'].get('namespace'))
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        except Exception as exc:  # pylint: disable=broad-except  (dynamic client's NotFoundError)
            if getattr(exc, 'status', None) != 404:
                raise


def image_files(archive):
    """The paths in the layers of an OCI image layout archive (node.py oci_archive)."""
    names = []
    with tarfile.open(archive) as oci:
        index = json.load(oci.extractfile('index.json'))
        blob = lambda desc: oci.extractfile('blobs/sha256/' + desc['digest'].split(':', 1)[1])  # noqa: E731
        manifest = json.load(blob(index['manifests'][0]))
        for layer in manifest['layers']:
            with tarfile.open(fileobj=blob(layer)) as tar:
                names += tar.getnames()
    return names


@pytest.fixture(scope='module')
def ds_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    work = tmp_path_factory.mktemp('ds')
    # the simulator the probe loads (run alone in a fresh checkout, the probe found no GPU: 'no NVIDIA GPU found')
    build_nvml_sim()
    with open(os.path.join(INVENTORIES, 'hgx-a100-80gb.json')) as f:
        inv = json.load(f)
    inv['gpus'] = inv['gpus'][:GPUS]
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    facts = probe_facts(str(inventory), work / 'probe-state.json')
    out = render(facts)
    image = daemonset(out)['spec']['template']['spec']['containers'][0]['image']
    # the image goes into the lab registry; the node's containerd knows the mirror's host as that registry
    registry = lab_registry.Registry(str(work / 'registry'))
    registry.start()
    archive = lab_node.device_plugin_image(str(work), image, str(inventory), nvml=False)
    # no NVIDIA library in the image: the plugin's NVML can only come from NVIDIA's runtime (fails if it comes back)
    files = image_files(archive)
    assert 'usr/bin/nvidia-device-plugin' in files and not [f for f in files if 'libnvidia-ml' in f], files
    host, path = image.split('/', 1)
    registry.push(archive, *path.rsplit(':', 1))
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=GPUS,
                   extra=('--mirror', '%s=%s' % (host, registry.url))) as state:
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'state': state, 'api': api, 'core': core, 'apps': apps, 'kube': kube_real, 'out': out,
                   'image': image, 'uuids': sorted(g['uuid'] for g in inv['gpus']), 'inventory': str(inventory),
                   'minors': {g['uuid']: g.get('minor_number', i) for i, g in enumerate(inv['gpus'])}}
        finally:
            delete(api, out['manifests'])
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            registry.stop()


def ds_pods(core):
    return core.list_namespaced_pod('kube-system', label_selector='gpuops.io/sharing-pool=%s' % POOL).items


def pod_story(core, pod, ns):
    events = [(e.reason, e.message) for e in core.list_namespaced_event(
        ns, field_selector='involvedObject.name=%s' % pod.metadata.name).items]
    logs = {}
    for c in (pod.spec.init_containers or []) + pod.spec.containers:
        try:
            logs[c.name] = core.read_namespaced_pod_log(pod.metadata.name, ns, container=c.name)[-1500:]
        except Exception as exc:  # pylint: disable=broad-except
            logs[c.name] = str(exc)[:300]
    return 'status %s\nevents %s\nlogs %s' % (pod.status, events, json.dumps(logs, indent=1))


def test_nvidia_runtime_handler_from_the_collection(ds_node):
    """The node layer first: container_runtime_config adds the `nvidia` handler the pool's RuntimeClass names."""
    state, core = ds_node['state'], ds_node['core']
    config = os.path.join(state, 'containerd.toml')
    containerd_dir = os.path.dirname(lab_node.programs(ds_node['kube'].version)['containerd'])
    # NVIDIA's runtime, not a stand-in: the toolkit v1.20.0 build of lab/go, with the node's CDI spec for its GPUs
    runtime = lab_node.nvidia_toolkit(state, ds_node['inventory'])['nvidia-container-runtime']
    assert os.path.basename(os.path.dirname(runtime)).startswith('nvidia-container-runtime-'), runtime
    result = run_module(lab_collections_path(), 'gpuops.k8s_gpu.container_runtime_config',
                        'engine=containerd path=%s runtime_name=nvidia runtime_path=%s cdi=true backup=false'
                        % (config, runtime), env={'PATH': containerd_dir + os.pathsep + os.environ['PATH']})
    assert result.get('changed') is True and not result.get('failed'), result
    lab_node.restart_containerd(state)
    wait('runtime handler nvidia in the Node status', lambda: 'nvidia' in [
        h.name for h in core.read_node(NAME).status.runtime_handlers or []], 60)


def test_daemonset_pod_runs_on_the_real_node_and_its_plugin_publishes_allocatable(ds_node):
    """The pool's manifests applied as rendered, the node labelled as gpu_node_labels would: the DaemonSet's pod is
    Running on the real node with every container ready, and nvidia.com/gpu capacity = allocatable = GPUs x replicas,
    published by the kubelet from the plugin in that pod (before it: none)."""
    core, out = ds_node['core'], ds_node['out']
    node = core.read_node(NAME)
    assert 'nvidia.com/gpu' not in (node.status.allocatable or {})
    ds = daemonset(out)
    assert ds['spec']['template']['spec']['containers'][0]['image'] == ds_node['image']
    assert ds_node['image'].startswith(MIRROR + '/nvidia/k8s-device-plugin:'), ds_node['image']
    assert 'hostNetwork' not in ds['spec']['template']['spec']
    apply(ds_node['api'], out['manifests'])
    core.patch_node(NAME, {'metadata': {'labels': out['node_labels'][NAME]}})

    def running():
        pods = ds_pods(core)
        if len(pods) == 1 and pods[0].status.phase == 'Running' and all(
                c.ready for c in pods[0].status.container_statuses or []):
            return pods[0]
        return None
    try:
        pod = wait('the DaemonSet pod Running on %s' % NAME, running, 180)
    except AssertionError:
        pods = ds_pods(core)
        raise AssertionError('\n'.join(pod_story(core, p, 'kube-system') for p in pods) or 'no pod')
    assert pod.spec.node_name == NAME
    # its image was pulled through the mirror's name from the lab registry (nothing imported on this node)
    events = [e.message for e in core.list_namespaced_event(
        'kube-system', field_selector='involvedObject.name=%s' % pod.metadata.name).items]
    assert any(m.startswith('Successfully pulled image "%s"' % ds_node['image']) for m in events), events
    assert pod.spec.runtime_class_name == RUNTIME_CLASS
    assert pod.status.pod_ip and pod.status.pod_ip.startswith('10.244.'), pod.status.pod_ip
    want = str(GPUS * REPLICAS)
    try:
        wait('nvidia.com/gpu allocatable %s' % want, lambda: (
            core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == want, 90)
    except AssertionError:
        raise AssertionError('allocatable %s\n%s' % (core.read_node(NAME).status.allocatable,
                                                      pod_story(core, ds_pods(core)[0], 'kube-system')))
    assert core.read_node(NAME).status.capacity['nvidia.com/gpu'] == want
    plugin_log = core.read_namespaced_pod_log(pod.metadata.name, 'kube-system', container='nvidia-device-plugin-ctr')
    assert 'Registered device plugin for \'nvidia.com/gpu\' with Kubelet' in plugin_log, plugin_log[-3000:]
    init_log = core.read_namespaced_pod_log(pod.metadata.name, 'kube-system', container='config-manager-init')
    assert 'time-slicing' in init_log, init_log[-2000:]
    # the kubelet's registration socket of the plugin, in the node's device plugin directory
    socks = os.listdir(os.path.join(ds_node['state'], 'var-lib', 'kubelet', 'device-plugins'))
    assert 'nvidia-gpu.sock' in socks, socks
    # the plugin's NVML is the simulator library the toolkit injected (the image has none): the runtime's own log
    assert 'Creating CDI modifier for devices: [nvidia.com/gpu=all]' in runtime_msgs(ds_node['state'])
    # the collection's share report reads the node as its pool (issue #36: it said exclusive): the node carries the
    # collection's labels (gpuops.io/sharing-strategy=time-slicing, as gpu_node_labels records the pool) and the
    # plugin's GPUs x replicas, and no GFD label (the pool's render has no GFD)
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model, render as report_render
    node = ds_node['api'].sanitize_for_serialization(core.read_node(NAME))
    labels = node['metadata']['labels']
    assert labels['gpuops.io/sharing-strategy'] == 'time-slicing', labels
    assert not [k for k in labels if k in ('nvidia.com/mig.strategy', 'nvidia.com/gpu.sharing-strategy',
                                           'nvidia.com/gpu.replicas')], labels
    # the replicas per GPU the pool's stack configured, recorded with the pool's labels (issue #36: without GFD the
    # report showed only the plugin's total)
    assert labels['gpuops.io/sharing-replicas'] == str(REPLICAS), labels
    report = model.analyse([node], [])
    (entry,) = report['nodes']
    assert (entry['strategies'], entry['conflicts'], entry['notes']) == (['time-slicing'], [], []), entry
    assert entry['resources']['nvidia.com/gpu']['allocatable'] == GPUS * REPLICAS, entry['resources']
    assert (entry['replicas'], entry['replicas_source'], entry['physical_gpus']) == (REPLICAS, 'record', GPUS), entry
    row = [line.split() for line in report_render.table(report).splitlines() if line.startswith(NAME)]
    assert row and row[0][2:5] == ['time-slicing', 'nvidia.com/gpu', '0/%d' % (GPUS * REPLICAS)], row
    # the table's REPLICAS/GPU column: the plugin's replicas per GPU, marked as the collection's record
    assert row[0][6:] == [str(REPLICAS), '(record)'], row


def runtime_msgs(state):
    """The messages of NVIDIA's runtime's own log on the node (node.py nvidia_toolkit: debug level)."""
    path = os.path.join(state, 'var-log', os.path.basename(lab_node.NVIDIA_RUNTIME_LOG))
    with open(path) as f:
        return [json.loads(line).get('msg', '') for line in f if line.startswith('{')]


def test_pod_asking_a_gpu_runs_and_sees_the_allocated_gpu(ds_node):
    core = ds_node['core']
    core.create_namespaced_pod(NS, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'gpu'},
        'spec': {'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                 'runtimeClassName': RUNTIME_CLASS, 'terminationGracePeriodSeconds': 1,
                 'nodeSelector': {'kubernetes.io/hostname': NAME},
                 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                 'command': ['sh', '-c', 'ls /dev | grep nvidia; '
                                             'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"'],
                                 'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}})

    def ended():
        p = core.read_namespaced_pod('gpu', NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    try:
        p = wait('pod gpu ended', ended, 120)
    except AssertionError:
        raise AssertionError(pod_story(core, core.read_namespaced_pod('gpu', NS), NS))
    assert p.status.phase == 'Succeeded', pod_story(core, p, NS)
    lines = core.read_namespaced_pod_log('gpu', NS).splitlines()
    # the plugin answered one GPU's UUID in NVIDIA_VISIBLE_DEVICES; NVIDIA's runtime turned it into that CDI device
    # and injected its device node only (the other GPU's not), with the spec's common nodes nvidiactl, nvidia-uvm,
    # nvidia-uvm-tools; the spec's env edit leaves NVIDIA_VISIBLE_DEVICES=void
    asked = [m for m in runtime_msgs(ds_node['state']) if m.startswith('Creating CDI modifier for devices: [nvidia.com/gpu=GPU-')]
    assert asked, runtime_msgs(ds_node['state'])[-30:]
    uuid = asked[-1].split('=', 1)[1].rstrip(']')
    assert uuid in ds_node['uuids'], asked
    assert lines == sorted(['nvidia%d' % ds_node['minors'][uuid], 'nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools']) + [
        'NVIDIA_VISIBLE_DEVICES=void'], lines


# ------------------------------------------------------------------------------------------------------ recording
# Regenerate lab/node/recordings/gpu-nodes.json (the kwok GPU nodes' labels and capacity, lab/kube/real.py gpu_node):
#   GPUOPS_RECORD_NODES=1 .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_daemonset_real.py
RECORD = os.environ.get('GPUOPS_RECORD_NODES') == '1'


def _run_to_end(core, name, spec, timeout=120):
    core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name}, 'spec': spec})

    def ended():
        p = core.read_namespaced_pod(name, NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    p = wait('pod %s ended' % name, ended, timeout)
    assert p.status.phase == 'Succeeded', pod_story(core, p, NS)
    core.delete_namespaced_pod(name, NS)


def _pod_spec(image, command, env, volumes):
    # through the pool's RuntimeClass with NVIDIA_VISIBLE_DEVICES=all: NVIDIA's runtime injects the simulator library
    # (the image has none)
    env = dict(env, NVIDIA_VISIBLE_DEVICES='all')
    return {'restartPolicy': 'Never', 'automountServiceAccountToken': False, 'hostNetwork': True,
            'runtimeClassName': RUNTIME_CLASS,
            'terminationGracePeriodSeconds': 1, 'nodeSelector': {'kubernetes.io/hostname': NAME},
            'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
            'volumes': [{'name': n, 'hostPath': {'path': p, 'type': 'Directory'}} for n, p, _m in volumes],
            'containers': [{'name': 'main', 'image': image, 'imagePullPolicy': 'Never', 'command': command,
                            'env': [{'name': k, 'value': v} for k, v in sorted(env.items())],
                            'volumeMounts': [{'name': n, 'mountPath': m} for n, _p, m in volumes]}]}


def _registered(state):
    """The devices the kubelet's device manager holds as healthy, by resource (its checkpoint; a stopped plugin's
    devices leave it: they are unhealthy)."""
    got = lab_node.device_checkpoint(state).get('RegisteredDevices') or {}
    return {k: sorted(v) for k, v in got.items() if v}


# Labels GFD writes that differ from run to run, left out of the recording (each is checked to be there):
VARYING_LABELS = {'nvidia.com/gfd.timestamp': 'the time GFD labelled the node (Unix seconds): another in every run'}
# The node's own resources, reported by the kubelet whatever runs on it: not recorded (the kwok nodes have their own)
NODE_RESOURCES = ('cpu', 'memory', 'pods', 'ephemeral-storage')


def _extended(resources):
    return {k: v for k, v in (resources or {}).items() if k not in NODE_RESOURCES and not k.startswith('hugepages-')}


def _expected_devices(inventory):
    """The device IDs NVIDIA's plugin lists for these GPUs (deviceIDStrategy uuid): the GPUs' UUIDs, or for GPUs in
    MIG mode their MIG devices' (a GPU instance with a compute instance) as gpu_info's facts list them."""
    facts = probe_facts(inventory, inventory + '.probe-state.json')
    ids = []
    for g in facts['gpus']:
        migs = g.get('mig_devices') or []
        ids += [m['uuid'] for m in migs] if g.get('mig_current') else [g['uuid']]
    return sorted(ids), facts


def _render_mig(facts, strategy, devices):
    """The device plugin config (the ConfigMap entry the node's label selects) and container environment the
    collection renders for a MIG pool on this node."""
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    out = stacks_render.render(dict(strategy='mig', pool=POOL + 'mig', nodes=[NAME], facts={NAME: facts},
                                    registry=MIRROR, settings={'mig': {'strategy': strategy, 'devices': devices}}))
    label = out['node_labels'][NAME]['nvidia.com/device-plugin.config']
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    ctr = [c for c in daemonset(out)['spec']['template']['spec']['containers']
           if c['name'] == 'nvidia-device-plugin-ctr'][0]
    return cm['data'][label], dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e)


def _config(out):
    """The device plugin config of the rendered pool on this node: the ConfigMap entry its node label selects."""
    label = out['node_labels'][NAME]['nvidia.com/device-plugin.config']
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    return cm['data'][label]


def _gfd(core, image, rec, shape, args, env):
    """GFD's labels for a shape: gpu-feature-discovery --oneshot in a pod of the node (VARYING_LABELS checked and
    left out)."""
    _run_to_end(core, 'gfd-' + shape, _pod_spec(image, [
        'gpu-feature-discovery', '--oneshot', '--use-node-feature-api=false',
        '--output-file=/rec/%s.labels' % shape, '--machine-type-file=/rec/product_name'] + args,
        env, [('rec', str(rec), '/rec')]))
    labels = dict(line.split('=', 1) for line in (rec / (shape + '.labels')).read_text().splitlines() if line)
    for k in VARYING_LABELS:
        assert labels.pop(k, '').isdigit(), (shape, k, labels)
    return dict(sorted(labels.items()))


def _published(core, state, want, story):
    """Once the kubelet's device manager holds exactly the devices ``want`` (resource -> sorted IDs), the extended
    resources of a Node status the kubelet wrote after it: (capacity, allocatable) of the registered resources; an
    earlier plugin's resource still listed must have no device allocatable."""
    try:
        wait('the kubelet holds %s' % want, lambda: _registered(state) == want, 90)
        since = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
        wait('a Node status after the devices registered', lambda: [
            c for c in core.read_node(NAME).status.conditions
            if c.type == 'Ready' and c.last_heartbeat_time > since], 60)
    except AssertionError as exc:
        raise AssertionError('%s (held: %s)\n%s' % (exc, _registered(state), story()))
    resources = sorted(_registered(state))
    assert resources == sorted(want), (resources, want)
    status = core.read_node(NAME).status
    capacity, allocatable = _extended(status.capacity), _extended(status.allocatable)
    stale = {k: allocatable.get(k) for k in capacity if k not in resources}
    assert set(stale.values()) <= {'0'}, (want, stale)
    return {k: capacity[k] for k in resources}, {k: allocatable[k] for k in resources}


def _render_mps(facts):
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    return stacks_render.render(dict(
        strategy='mps', pool=POOL + 'mps', nodes=[NAME], facts={NAME: facts}, registry=MIRROR,
        settings={'mps': {'replicas': REPLICAS}, 'nvidia': {'runtime_class_name': RUNTIME_CLASS}}))


def _sharing_shapes(ds_node, core, state, rec, only):
    """The shared pools' shapes (real.RECORDED_SHARING) on this node's GPUs (2 A100s): GFD with the pool's config the
    collection renders, and what the kubelet published - time-slicing: with this file's pool DaemonSet running (its
    plugin, the config-manager's config; GPUs x replicas devices); mps: NVIDIA's plugin in a pod with the pool's MPS
    config stops at the MPS daemon's health check (MPS_PLUGIN_ERROR: the driver root's nvidia-cuda-mps-control finds no
    control daemon, none having started one) and registers nothing: no extended resource, recorded as such
    (not_published)."""
    import real  # noqa: E402  (lab/kube)
    from test_node_strategies_real import MPS_PLUGIN_ERROR  # the exact error, asserted there on the MPS pool too
    with open(ds_node['inventory']) as f:
        inventory = json.load(f)
    got = {}
    for shape, (strategy, replicas) in sorted(real.RECORDED_SHARING.items()):
        if strategy != only or shape in _POD_SHAPES:
            continue
        # the recorded shape is this node's GPUs, and the pool's replicas those of the recording
        assert real.recorded_inventory(shape) == inventory, shape
        assert (real.RECORDED_SHAPES[shape], replicas) == (('hgx-a100-80gb.json', GPUS), REPLICAS), shape
        (rec / (shape + '.json')).write_text(json.dumps(inventory))
        out = ds_node['out'] if strategy == 'time-slicing' else _render_mps(_expected_devices(
            str(rec / (shape + '.json')))[1])
        (rec / (shape + '.yaml')).write_text(_config(out))
        env = {'NVML_SIM_INVENTORY': '/rec/%s.json' % shape, 'NVML_SIM_STATE': '/tmp/nvml-sim.json'}
        labels = _gfd(core, ds_node['image'], rec, shape, ['--config-file=/rec/%s.yaml' % shape], env)
        got[shape] = {'inventory': real.RECORDED_SHAPES[shape][0], 'gpus': real.RECORDED_SHAPES[shape][1],
                      'labels': labels, 'sharing_strategy': strategy, 'replicas': replicas}
        if strategy == 'time-slicing':
            # the pool's own DaemonSet (applied by the test above): its plugin's devices, <uuid>::<replica>
            want = {'nvidia.com/gpu': sorted(  # expected, not written
                '%s::%d' % (u, i) for u in ds_node['uuids'] for i in range(replicas))}
            got[shape]['capacity'], got[shape]['allocatable'] = _published(
                core, state, want, lambda: '\n'.join(pod_story(core, p, 'kube-system') for p in ds_pods(core)))
            continue
        # the plugin as the pool's DaemonSet runs it: the environment the collection renders for its container
        # (MPS_ROOT among it; the config file is the pool's entry, not the config-manager's copy), /mps its root
        ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'
              and m['metadata']['name'] == 'nvidia-device-plugin-' + out['pool']][0]
        ctr = [c for c in ds['spec']['template']['spec']['containers'] if c['name'] == 'nvidia-device-plugin-ctr'][0]
        env = dict(env, **dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e
                               and e['name'] != 'CONFIG_FILE'))
        assert 'MPS_ROOT' in env, ctr['env']
        (rec / 'mps').mkdir()
        name = 'dp-' + shape
        dp_dir = '/var/lib/kubelet/device-plugins'
        core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name},
                                        'spec': _pod_spec(ds_node['image'], [
                                            'nvidia-device-plugin', '--config-file=/rec/%s.yaml' % shape], env, [
                                            ('rec', str(rec), '/rec'), ('dp', dp_dir, dp_dir),
                                            ('mps', str(rec / 'mps'), '/mps')])})

        def log():
            try:
                return core.read_namespaced_pod_log(name, NS) or ''
            except Exception:  # pylint: disable=broad-except  (not started yet)
                return ''
        try:
            text = wait('the plugin stops at nvidia-cuda-mps-control', lambda: (
                lambda t: t if MPS_PLUGIN_ERROR in t else '')(log()), 120)
        except AssertionError as exc:
            raise AssertionError('%s\n%s' % (exc, pod_story(core, core.read_namespaced_pod(name, NS), NS)))
        assert '"replicas": %d' % replicas in text, text[-3000:]
        # the plugin's pod still there (it retries every 30 s), nothing of these GPUs registered, and in a Node status
        # after its error no extended resource allocatable (an earlier plugin's stays listed at 0 until the kubelet's
        # grace period ends): nothing published
        since = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
        wait('a Node status after the plugin stopped', lambda: [
            c for c in core.read_node(NAME).status.conditions
            if c.type == 'Ready' and c.last_heartbeat_time > since], 60)
        uuids = set(g['uuid'] for g in inventory['gpus'])
        held = [d for v in _registered(state).values() for d in v if d.split('::')[0] in uuids]
        allocatable = _extended(core.read_node(NAME).status.allocatable)
        assert held == [] and set(allocatable.values()) <= {'0'}, (held, allocatable)
        assert core.read_namespaced_pod(name, NS).status.phase == 'Running'
        got[shape]['capacity'], got[shape]['allocatable'] = {}, {}
        got[shape]['not_published'] = ('nvidia-device-plugin with the pool\'s MPS config: %s' % MPS_PLUGIN_ERROR)
        core.delete_namespaced_pod(name, NS)
        wait('pod %s gone' % name, lambda: not [p for p in core.list_namespaced_pod(NS).items
                                                if p.metadata.name == name], 60)
    return got


# Time-slicing shapes of other GPUs than this node's (real.RECORDED_SHARING): the T4 of the demo's and the lifecycle
# tests' time-slicing pools (1 x T4, 4 replicas). Recorded after this file's pool DaemonSet is gone: GFD and NVIDIA's
# plugin in pods with the shape's inventory (NVML_SIM_INVENTORY) and the config the collection renders for a pool of
# those GPUs, the plugin with its container's environment from the rendered DaemonSet.
_POD_SHAPES = ('t4x1-time-slicing',)


def _render_time_slicing(facts, replicas):
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    return stacks_render.render(dict(
        strategy='time-slicing', pool=POOL + 'tsp', nodes=[NAME], facts={NAME: facts}, registry=MIRROR,
        settings={'time_slicing': {'replicas': replicas}, 'nvidia': {'runtime_class_name': RUNTIME_CLASS}}))


def _time_slicing_pod_shapes(ds_node, core, state, rec):
    import real  # noqa: E402  (lab/kube)
    got = {}
    dp_dir = '/var/lib/kubelet/device-plugins'
    for shape in _POD_SHAPES:
        strategy, replicas = real.RECORDED_SHARING[shape]
        assert strategy == 'time-slicing', shape
        inventory = rec / (shape + '.json')
        inventory.write_text(json.dumps(real.recorded_inventory(shape)))
        uuids, facts = _expected_devices(str(inventory))
        out = _render_time_slicing(facts, replicas)
        (rec / (shape + '.yaml')).write_text(_config(out))
        env = {'NVML_SIM_INVENTORY': '/rec/%s.json' % shape, 'NVML_SIM_STATE': '/tmp/nvml-sim.json'}
        labels = _gfd(core, ds_node['image'], rec, shape, ['--config-file=/rec/%s.yaml' % shape], env)
        ctr = [c for c in daemonset(out)['spec']['template']['spec']['containers']
               if c['name'] == 'nvidia-device-plugin-ctr'][0]
        env = dict(env, **dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e
                               and e['name'] != 'CONFIG_FILE'))
        name = 'dp-' + shape
        core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name},
                                        'spec': dict(_pod_spec(ds_node['image'], [
                                            'nvidia-device-plugin', '--config-file=/rec/%s.yaml' % shape], env, [
                                            ('rec', str(rec), '/rec'), ('dp', dp_dir, dp_dir)]),
                                            restartPolicy='Always')})
        want = {'nvidia.com/gpu': sorted(  # expected, not written
            '%s::%d' % (u, i) for u in uuids for i in range(replicas))}
        capacity, allocatable = _published(core, state, want, lambda: pod_story(
            core, core.read_namespaced_pod(name, NS), NS))
        got[shape] = {'inventory': real.RECORDED_SHAPES[shape][0], 'gpus': real.RECORDED_SHAPES[shape][1],
                      'labels': labels, 'sharing_strategy': strategy, 'replicas': replicas,
                      'capacity': capacity, 'allocatable': allocatable}
        core.delete_namespaced_pod(name, NS)
        wait('pod %s gone' % name, lambda: not [p for p in core.list_namespaced_pod(NS).items
                                                if p.metadata.name == name], 60)
    return got


def test_recording_of_what_the_real_node_publishes(ds_node, tmp_path):
    """For each GPU shape recorded for the lab's kwok nodes (lab/kube/real.py RECORDED_SHAPES), the real node runs the
    image's gpu-feature-discovery (oneshot, in a pod) and NVIDIA's device plugin on the simulator with those GPUs;
    every label GFD wrote (but VARYING_LABELS) and every extended resource the kubelet then publishes (capacity and
    allocatable) equal the recording the kwok nodes are made from (lab/kube/real.py gpu_node, recorded_node).
    GPUOPS_RECORD_NODES=1 writes it instead.

    Without MIG: GFD --mig-strategy=none, the plugin as a pod of the image with no config (exclusive). The MIG shapes
    (RECORDED_MIG): GFD with the shape's --mig-strategy, the plugin as a pod of the image with the config and
    environment the collection renders for a MIG pool of that strategy (migStrategy single / mixed), the node's
    containers given the shape's driver/nvidia-caps/mig-minors in /proc (the NVIDIA kernel module's file: the node's
    runc wrapper shows it; without it the plugin exits with 'missing MIG GPU instance capability path:
    /proc/driver/nvidia/capabilities/...'), after GFD ran, and taken away before the next shape.
    The shared pools (RECORDED_SHARING, _sharing_shapes): time-slicing while this file's pool DaemonSet still runs
    (GPUs x replicas), mps after the others (GFD's MPS labels; the plugin stops at the MPS daemon: nothing published,
    its error kept in the shape's not_published)."""
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
    import real  # noqa: E402  (lab/kube)
    core, state, api = ds_node['core'], ds_node['state'], ds_node['api']
    rec = tmp_path / 'rec'
    rec.mkdir()
    os.chmod(rec, 0o755)
    (rec / 'product_name').write_text('lab\n')   # GFD's machine type (the host's DMI otherwise)
    # the time-slicing pool while its DaemonSet runs, then the DaemonSet goes: one plugin of nvidia.com/gpu per node
    got = _sharing_shapes(ds_node, core, state, rec, 'time-slicing')
    delete(api, [daemonset(ds_node['out'])])
    wait('the pool DaemonSet pod gone', lambda: not ds_pods(core), 60)
    dp_dir = '/var/lib/kubelet/device-plugins'
    for shape in sorted(set(real.RECORDED_SHAPES) - set(real.RECORDED_SHARING)):
        inventory = rec / (shape + '.json')
        inventory.write_text(json.dumps(real.recorded_inventory(shape)))
        mig = real.RECORDED_MIG.get(shape)
        env = {'NVML_SIM_INVENTORY': '/rec/%s.json' % shape, 'NVML_SIM_STATE': '/tmp/nvml-sim.json'}
        labels = _gfd(core, ds_node['image'], rec, shape, ['--mig-strategy=%s' % (mig[0] if mig else 'none')], env)
        uuids, facts = _expected_devices(str(inventory))
        command = ['nvidia-device-plugin']
        if mig:
            # the config and container environment the collection renders for a MIG pool of the shape's strategy
            # (the config file the pool's config-manager would write, as --config-file), and in every container of
            # the node a /proc/driver carrying the shape's mig-minors (node.py mig_cap_devices: the node's runc
            # wrapper shows it, as the NVIDIA kernel module does on a MIG node); taken away after the shape
            config, mig_env = _render_mig(facts, mig[0], mig[1])
            (rec / (shape + '.yaml')).write_text(config)
            lab_node.mig_cap_devices(state, real.recorded_inventory(shape))
            env = dict(env, **{k: v for k, v in mig_env.items() if k != 'CONFIG_FILE'})
            command.append('--config-file=/rec/%s.yaml' % shape)
        core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'dp-' + shape},
                                        'spec': dict(_pod_spec(ds_node['image'], command, env, [
                                            ('rec', str(rec), '/rec'), ('dp', dp_dir, dp_dir)]),
                                            restartPolicy='Always')})
        # this plugin's devices in the kubelet's device manager, then the Node status the kubelet publishes for them
        # (the previous shape's devices stay in the Node's capacity, unhealthy, until the kubelet's next status: the
        # status is read from a heartbeat after this plugin's devices were registered)
        try:
            try:
                wait('the kubelet holds %s devices' % shape, lambda: sorted(
                    d for v in _registered(state).values() for d in v) == uuids, 90)
                since = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
                wait('a Node status after %s registered' % shape, lambda: [
                    c for c in core.read_node(NAME).status.conditions
                    if c.type == 'Ready' and c.last_heartbeat_time > since], 60)
            except AssertionError:
                raise AssertionError(pod_story(core, core.read_namespaced_pod('dp-' + shape, NS), NS))
            resources = sorted(_registered(state))
            status = core.read_node(NAME).status
            capacity, allocatable = _extended(status.capacity), _extended(status.allocatable)
            # an earlier shape's resource the kubelet still lists (its plugin stopped: no device allocatable) is not
            # this shape's
            stale = {k: allocatable.get(k) for k in capacity if k not in resources}
            assert set(stale.values()) <= {'0'}, (shape, stale)
        finally:
            if mig:
                os.unlink(os.path.join(state, lab_node.PROC_DRIVER, 'nvidia-caps', 'mig-minors'))
        got[shape] = {'inventory': real.RECORDED_SHAPES[shape][0], 'gpus': real.RECORDED_SHAPES[shape][1],
                      'labels': dict(sorted(labels.items())),
                      'capacity': {k: capacity[k] for k in resources},
                      'allocatable': {k: allocatable[k] for k in resources}}
        if mig:
            got[shape].update(mig_strategy=mig[0], mig_devices=mig[1])
        core.delete_namespaced_pod('dp-' + shape, NS)
        wait('pod dp-%s gone' % shape, lambda: not [p for p in core.list_namespaced_pod(NS).items
                                                      if p.metadata.name == 'dp-' + shape], 60)
    got.update(_time_slicing_pod_shapes(ds_node, core, state, rec))
    got.update(_sharing_shapes(ds_node, core, state, rec, 'mps'))
    doc = {'what': 'every label gpu-feature-discovery wrote (but the not_recorded ones) and every extended resource\'s '
                   'capacity/allocatable the kubelet published with nvidia-device-plugin (exclusive; MIG shapes: '
                   'the collection\'s mig config, migStrategy single/mixed; sharing shapes: GFD and the plugin '
                   'with the config the collection renders for the pool, time-slicing from the pool\'s own '
                   'DaemonSet, mps: nothing published, see not_published) on a real lab node (lab/node), '
                   'k8s-device-plugin v0.19.1 on the NVML simulator; the kwok GPU nodes of lab/kube/real.py are made '
                   'from it',
           'not_recorded': VARYING_LABELS,
           'regenerate': 'GPUOPS_RECORD_NODES=1 .venv/bin/pytest -q -p no:xdist '
                         'lab/tests/integration/test_node_daemonset_real.py',
           'shapes': got}
    if RECORD:
        os.makedirs(os.path.dirname(real.RECORDING), exist_ok=True)
        with open(real.RECORDING, 'w') as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write('\n')
    assert real.load_recording() == doc, 'the real node now publishes other values: regenerate with %s' % doc[
        'regenerate']
    # the kwok nodes are made from it, all of it: every GFD label and extended resource of their shape (and their
    # shapes agree with it: gpu_node refuses a drift)
    for name, spec in sorted(real.GPU_NODES.items()):
        node = real.gpu_node(name, *spec)
        shape = got[real.RECORDED_NODES[name]]
        assert _extended(node['status']['capacity']) == shape['capacity'], name
        assert _extended(node['status']['allocatable']) == shape['allocatable'], name
        assert {k: v for k, v in node['metadata']['labels'].items() if k.startswith('nvidia.com/')
                and k != 'nvidia.com/gpu.present'} == shape['labels'], name
    # what reads those labels and resources - the collection's gpu_share_report - sees each recorded shape as what it
    # runs: the exclusive plugin's GPUs (gpu.sharing-strategy=none, gpu.replicas=1), the MIG shapes as mig (single:
    # nvidia.com/gpu with mig.strategy=single; mixed: nvidia.com/mig-<profile>), with the recorded capacity; the
    # time-slicing pool as time-slicing (GFD's gpu.sharing-strategy and gpu.replicas with the plugin's 6); the MPS
    # node, which publishes no resource, as no pool at all
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model
    nodes = [real.recorded_node('rec-' + shape, shape) for shape in sorted(got)]
    report = model.analyse(nodes, [])
    assert {n['name']: n['strategies'] for n in report['nodes']} == {
        'rec-' + shape: ['mig'] if rec.get('mig_strategy') else ['time-slicing'] if rec.get('sharing_strategy') ==
        'time-slicing' else [] if rec.get('sharing_strategy') == 'mps' else ['exclusive'] for shape, rec in got.items()}
