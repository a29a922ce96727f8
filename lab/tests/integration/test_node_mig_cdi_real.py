"""A MIG device through NVIDIA's container runtime on a real lab node (issue #36; the demo's lab-a100 does the same):
the node's GPU in MIG mode (the recorded shape h100x1-mig-single: one H100, two 3g.40gb), NVIDIA's toolkit on it
(lab/node/node.py nvidia_toolkit: `nvidia-ctk cdi generate` v1.20.0 on the NVML simulator, with the mig-minors file
and the /dev/nvidia-caps capability devices the NVIDIA kernel module would make - lab/node/nvcaps.py), the `nvidia`
runtime added by the collection's container_runtime_config, NVIDIA's device plugin v0.19.1 as **the collection's own
DaemonSet pod** of a MIG pool (strategy single; its image under the mirror prefix, pulled from the lab registry as in
test_node_daemonset_real), and a pod asking nvidia.com/gpu through the pool's RuntimeClass: the kubelet allocates one
MIG device, the runtime resolves NVIDIA_VISIBLE_DEVICES=<MIG UUID> to that CDI device, and the container sees exactly
its device nodes: the parent GPU's, its GPU instance's and compute instance's capability devices, and the spec's
common ones. Then the node's `nvidia.com/device-plugin.config` label moves to the config the collection renders for
the same node under migStrategy mixed: the DaemonSet's config-manager sidecar writes it and signals the plugin, and
the kubelet's allocatable follows (nvidia.com/mig-3g.40gb 2, nvidia.com/gpu 0).

The plugin reads /proc/driver/nvidia-caps/mig-minors, which only the NVIDIA kernel module writes: the node's runc
wrapper shows the node's copy at every container's /proc/driver (lab/node/node.py RUNC_WRAPPER: an OCI
createContainer hook). Without it the pod crash-loops (`error building MIG device map: ... missing MIG GPU instance
capability path: /proc/driver/nvidia/capabilities/gpu0/mig/gi7/access`), and the plugin ran as a host process with a
private /proc instead (lab/tests/dp_node_plugin.py), which no config change of the DaemonSet could reach.
Before lab/node/nvcaps.py the toolkit step failed on MIG GPUs (`error getting MIG capability device paths`: the node's
procfs has no /proc/driver/nvidia-caps/mig-minors) and the demo's MIG node got a spec of whole GPUs, with no device
its validation pod could be given.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_mig_cdi_real.py
"""
from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
import node as lab_node  # noqa: E402  (lab/node)
import real  # noqa: E402  (lab/kube)
import registry as lab_registry  # noqa: E402  (lab/node)
from oracle_util import build_nvml_sim, cap_minor, probe_facts  # noqa: E402
from test_node_daemonset_real import apply, delete, pod_story  # noqa: E402  (the collection's DaemonSet on a node)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-mig-cdi-%s' % SUFFIX
NS = 'node-mig-cdi-%s' % SUFFIX
POOL = 'mc%s' % SUFFIX
RUNTIME_CLASS = 'nvidia-mig-cdi-%s' % SUFFIX
# the taint NVIDIA's GPU nodes carry and the collection's DaemonSet tolerates (keeps other tests' pods off the node)
TAINT_KEY = 'nvidia.com/gpu'
MIRROR = 'mirror.gpuops.lab/nvcr'
SHAPE = 'h100x1-mig-single'   # lab/kube/real.py RECORDED_MIG: 3g.40gb at placements 0 and 4
COMMON = ['nvidia-uvm', 'nvidia-uvm-tools', 'nvidiactl']   # the spec's nodes of every container (containerEdits)


def render_mig(facts, strategy=None):
    """The MIG pool the collection renders for this node (strategy: the recorded shape's, single, unless given): its
    images under the mirror prefix, its RuntimeClass named RUNTIME_CLASS."""
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    shape_strategy, devices = real.RECORDED_MIG[SHAPE][:2]
    return stacks_render.render(dict(strategy='mig', pool=POOL, nodes=[NAME], facts={NAME: facts}, registry=MIRROR,
                                     settings={'mig': {'strategy': strategy or shape_strategy, 'devices': devices},
                                               'nvidia': {'runtime_class_name': RUNTIME_CLASS}}))


def plugin_manifests(out):
    """The device plugin's part of the pool (its RuntimeClass, ConfigMap of configs, RBAC, DaemonSet); not the MIG
    manager's (the GPU is in MIG mode already: the simulator's inventory)."""
    return [m for m in out['manifests'] if m['kind'] == 'RuntimeClass'
            or m['metadata']['name'].startswith('nvidia-device-plugin-')]


def configs(out):
    return [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]


@pytest.fixture(scope='module')
def mig_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core = client.CoreV1Api(api)
    work = tmp_path_factory.mktemp('migcdi')
    build_nvml_sim()
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(real.recorded_inventory(SHAPE)))
    facts = probe_facts(str(inventory), work / 'probe-state.json')
    gpu = facts['gpus'][0]
    assert gpu['mig_current'] and len(gpu['mig_devices']) == 2, gpu
    out = render_mig(facts)
    ds = [m for m in plugin_manifests(out) if m['kind'] == 'DaemonSet'][0]
    image = ds['spec']['template']['spec']['containers'][0]['image']
    assert image.startswith(MIRROR + '/nvidia/k8s-device-plugin:'), image
    # the image (no NVML library in it: NVIDIA's runtime injects the node's) through the lab registry as the mirror
    registry = lab_registry.Registry(str(work / 'registry'))
    registry.start()
    try:
        archive = lab_node.device_plugin_image(str(work), image, str(inventory), nvml=False)
        host, path = image.split('/', 1)
        registry.push(archive, *path.rsplit(':', 1))
        with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1,
                       extra=('--mirror', '%s=%s' % (host, registry.url))) as state:
            core.create_namespace({'metadata': {'name': NS}})
            wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
                NS, field_selector='metadata.name=default').items, 60)
            try:
                yield {'state': state, 'api': api, 'core': core, 'kube': kube_real, 'inventory': str(inventory),
                       'facts': facts, 'out': out, 'image': image}
            finally:
                delete(api, plugin_manifests(out))
                wait('the pool DaemonSet pod gone', lambda: not ds_pods(core), 60)
                core.delete_namespace(NS)
                wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
    finally:
        registry.stop()


def ds_pods(core):
    return core.list_namespaced_pod('kube-system', label_selector='gpuops.io/sharing-pool=%s' % POOL).items


def story(core):
    return '\n'.join(pod_story(core, p, 'kube-system') for p in ds_pods(core)) or 'no pod of the DaemonSet'


def allocatable(core):
    return {k: v for k, v in (core.read_node(NAME).status.allocatable or {}).items() if k.startswith('nvidia.com/')}


def running(core):
    """The pool DaemonSet's pod on the node with every container ready, or None; fails at once when its plugin
    container has ended (it crash-loops: no use waiting)."""
    pods = ds_pods(core)
    for p in pods:
        for c in p.status.container_statuses or []:
            ended = c.last_state.terminated or (c.state and c.state.terminated)
            if c.name == 'nvidia-device-plugin-ctr' and ended:
                try:   # the ended instance's own log (the story's is the running one's, often empty)
                    last = core.read_namespaced_pod_log(p.metadata.name, 'kube-system', container=c.name,
                                                        previous=bool(c.last_state.terminated))[-3000:]
                except Exception as exc:  # pylint: disable=broad-except
                    last = str(exc)[:300]
                raise AssertionError('the device plugin container ended (%s), its log ends:\n%s\n%s' % (
                    ended, last, story(core)))
    if len(pods) == 1 and pods[0].status.phase == 'Running' and all(
            c.ready for c in pods[0].status.container_statuses or []):
        return pods[0]
    return None


def plugin_log(core, pod):
    return core.read_namespaced_pod_log(pod.metadata.name, 'kube-system', container='nvidia-device-plugin-ctr')


def spec_devices(state):
    with open(os.path.join(state, 'run', 'cdi', 'nvidia.yaml')) as f:
        spec = yaml.safe_load(f)
    # (path, major, minor); the spec leaves a minor of 0 out (omitempty)
    return spec, {d['name']: [(n['path'], n.get('major'), n.get('minor', 0)) for n in d['containerEdits']['deviceNodes']]
                  for d in spec['devices']}


def test_cdi_spec_has_one_device_per_mig_device(mig_node):
    """nvidia_toolkit on the MIG GPU: nvidia-ctk's spec names each MIG device by UUID and by <gpu>:<mig index> with the
    GPU's node and its GPU instance's and compute instance's capability devices (made in the node's /dev: nvidia-ctk
    reads their numbers from there, the caps major of lab/node/node.py); no device of the whole GPU."""
    state = mig_node['state']
    lab_node.nvidia_toolkit(state, mig_node['inventory'])
    spec, devices = spec_devices(state)
    gpu = mig_node['facts']['gpus'][0]
    minor = real.recorded_inventory(SHAPE)['gpus'][0].get('minor_number', 0)
    want = {}
    for j, m in enumerate(gpu['mig_devices']):
        nodes = [('/dev/nvidia%d' % minor, 195, minor)] + [
            ('/dev/nvidia-caps/nvidia-cap%d' % c, lab_node.NVIDIA_CAPS_MAJOR, c) for c in (
                cap_minor(minor, m['gpu_instance_id']), cap_minor(minor, m['gpu_instance_id'], m['compute_instance_id']))]
        want[m['uuid']] = want['0:%d' % j] = nodes
    assert {k: v for k, v in devices.items() if k != 'all'} == want, devices
    assert gpu['uuid'] not in devices and '0' not in devices
    assert sorted(n['path'][len('/dev/'):] for n in spec['containerEdits']['deviceNodes']) == COMMON


def test_pod_gets_exactly_its_mig_device(mig_node):
    """The collection's `nvidia` runtime on the node, the pool's DaemonSet (its device plugin part) applied as
    rendered: its pod runs on the node (config-manager-init picks the node label's config, mig-single), the plugin in
    it registers, and the kubelet publishes the recorded shape's nvidia.com/gpu 2; a pod asking one, through the pool's
    RuntimeClass, sees the nodes of the MIG device the kubelet allocated - the CDI device NVIDIA's runtime made of the
    plugin's NVIDIA_VISIBLE_DEVICES - and no other."""
    state, core = mig_node['state'], mig_node['core']
    runtime = lab_node.nvidia_toolkit(state, mig_node['inventory'])['nvidia-container-runtime']
    containerd_dir = os.path.dirname(lab_node.programs(mig_node['kube'].version)['containerd'])
    result = run_module(lab_collections_path(), 'gpuops.k8s_gpu.container_runtime_config',
                        'engine=containerd path=%s runtime_name=nvidia runtime_path=%s cdi=true backup=false'
                        % (os.path.join(state, 'containerd.toml'), runtime),
                        env={'PATH': containerd_dir + os.pathsep + os.environ['PATH']})
    assert result.get('changed') is True and not result.get('failed'), result
    lab_node.restart_containerd(state)
    wait('runtime handler nvidia in the Node status', lambda: 'nvidia' in [
        h.name for h in core.read_node(NAME).status.runtime_handlers or []], 60)
    out = mig_node['out']
    assert 'nvidia.com/gpu' not in allocatable(core)
    apply(mig_node['api'], plugin_manifests(out))
    core.patch_node(NAME, {'metadata': {'labels': out['node_labels'][NAME]}})
    assert out['node_labels'][NAME]['nvidia.com/device-plugin.config'] == 'mig-single', out['node_labels']
    ds_pod = wait('the DaemonSet pod Running on %s' % NAME, lambda: running(core), 180)
    assert ds_pod.spec.node_name == NAME and ds_pod.spec.runtime_class_name == RUNTIME_CLASS
    events = [e.message for e in core.list_namespaced_event(
        'kube-system', field_selector='involvedObject.name=%s' % ds_pod.metadata.name).items]
    assert any(m.startswith('Successfully pulled image "%s"' % mig_node['image']) for m in events), events
    # what the kubelet publishes from the plugin in that pod: the recorded shape's (lab/node/recordings)
    want = real.load_recording()['shapes'][SHAPE]['allocatable']
    assert want == {'nvidia.com/gpu': '2'}, want  # expected, not written
    try:
        wait('allocatable %s' % want, lambda: allocatable(core) == want, 90)
    except AssertionError:
        raise AssertionError('allocatable %s\n%s' % (allocatable(core), story(core)))
    log = plugin_log(core, ds_pod)
    assert '"migStrategy": "single"' in log and "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in log, \
        log[-3000:]
    init_log = core.read_namespaced_pod_log(ds_pod.metadata.name, 'kube-system', container='config-manager-init')
    assert 'mig-single' in init_log, init_log[-2000:]
    core.create_namespaced_pod(NS, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'mig'},
        'spec': {'restartPolicy': 'Never', 'automountServiceAccountToken': False, 'hostNetwork': True,
                 'runtimeClassName': RUNTIME_CLASS, 'terminationGracePeriodSeconds': 1,
                 'nodeSelector': {'kubernetes.io/hostname': NAME},
                 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                 'command': ['sh', '-c', 'cd /dev && find nvidia* -type c | sort'],
                                 'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}})

    def ended():
        p = core.read_namespaced_pod('mig', NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    pod = wait('pod mig ended', ended, 120)
    events = [(e.reason, e.message) for e in core.list_namespaced_event(
        NS, field_selector='involvedObject.name=mig').items]
    assert pod.status.phase == 'Succeeded', (pod.status, events)
    seen = core.read_namespaced_pod_log('mig', NS).split()
    entries = [e for e in lab_node.device_checkpoint(state).get('PodDeviceEntries') or []
               if e['PodUID'] == pod.metadata.uid]
    ids = [i for e in entries for v in e['DeviceIDs'].values() for i in v]
    migs = [m['uuid'] for m in mig_node['facts']['gpus'][0]['mig_devices']]
    assert len(ids) == 1 and ids[0] in migs, (entries, migs)
    _spec, devices = spec_devices(state)
    assert sorted(seen) == sorted(COMMON + [p[len('/dev/'):] for p, _ma, _mi in devices[ids[0]]]), (seen, ids)
    msgs = [json.loads(line).get('msg', '') for line in open(os.path.join(
        state, 'var-log', os.path.basename(lab_node.NVIDIA_RUNTIME_LOG))) if line.startswith('{')]
    assert 'Creating CDI modifier for devices: [nvidia.com/gpu=%s]' % ids[0] in msgs, msgs[-20:]


def test_config_change_reaches_the_daemonset_plugin(mig_node):
    """The node's nvidia.com/device-plugin.config label moves to the config the collection renders for this node under
    migStrategy mixed (its ConfigMap entry added beside mig-single first): the DaemonSet's config-manager sidecar writes
    it and signals the plugin (shareProcessNamespace), which restarts with it, and the kubelet's allocatable follows:
    nvidia.com/mig-3g.40gb 2 (one per MIG device of that profile), nvidia.com/gpu 0."""
    core, state = mig_node['core'], mig_node['state']
    pod = running(core)
    assert pod, story(core)
    mixed = render_mig(mig_node['facts'], 'mixed')
    label = mixed['node_labels'][NAME]['nvidia.com/device-plugin.config']
    assert label == 'mig-mixed' and label not in configs(mig_node['out'])['data'], label
    entry = configs(mixed)['data'][label]
    assert '"migStrategy": "mixed"' in entry, entry
    core.patch_namespaced_config_map(configs(mixed)['metadata']['name'], 'kube-system', {'data': {label: entry}})
    # the kubelet refreshes the pod's ConfigMap volume (the config-manager reads its files there)
    volume = os.path.join(state, 'var-lib', 'kubelet', 'pods', pod.metadata.uid, 'volumes', 'kubernetes.io~configmap',
                          'available-configs', label)
    wait('%s in the pod\'s available-configs' % label, lambda: os.path.exists(volume), 120)
    core.patch_node(NAME, {'metadata': {'labels': {'nvidia.com/device-plugin.config': label}}})
    # one resource per MIG profile, as many devices as the GPU has of it (the facts' MIG device names end with it)
    profiles = [m['name'].rsplit(' ', 1)[1] for m in mig_node['facts']['gpus'][0]['mig_devices']]
    want = {'nvidia.com/mig-%s' % p: str(profiles.count(p)) for p in set(profiles)}
    assert want == {'nvidia.com/mig-3g.40gb': '2'}, want  # expected, not written

    def followed():
        got = allocatable(core)
        return got if {k: v for k, v in got.items() if v != '0'} == want else None
    try:
        got = wait('allocatable %s' % want, followed, 120)
    except AssertionError:
        raise AssertionError('allocatable %s\n%s' % (allocatable(core), story(core)))
    assert got.get('nvidia.com/gpu', '0') == '0', got
    after = running(core)
    assert after and after.metadata.uid == pod.metadata.uid, 'the same pod, its plugin signalled: %s' % story(core)
    log = plugin_log(core, after)
    assert '"migStrategy": "mixed"' in log and \
        "Registered device plugin for 'nvidia.com/mig-3g.40gb' with Kubelet" in log, log[-3000:]
    sidecar = core.read_namespaced_pod_log(after.metadata.name, 'kube-system', container='config-manager')
    assert label in sidecar, sidecar[-2000:]
