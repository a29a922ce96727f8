"""NVIDIA's device plugin with a real kubelet (issue #36): nvidia-device-plugin v0.19.1 (lab/go nvidia-device-plugin) on
the NVML simulator registers with the kubelet of a real lab node (lab/node/node.py), the kubelet publishes the
allocatable the plugin reports with the collection's own config (exclusive, then time-slicing: a config change
reaches the Node's allocatable), the real scheduler places pods asking for nvidia.com/gpu, the kubelet calls the
plugin's Allocate and starts the container with what it answered, and the container prints it (read from its log).

What the container sees: the plugin's answer as the collection configures it (deviceListStrategy envvar, the
default): NVIDIA_VISIBLE_DEVICES=<GPU UUID>, nothing else. Without a GPU there is no NVIDIA container runtime hook to
turn that into device nodes and driver libraries (lab/node/README.md).

The plugin runs as a host process, not as the collection's DaemonSet pod (no image of it is built): in a mount
namespace of its own where /var/lib/kubelet/device-plugins is the node's (the kubelet's fixed socket directory) and
/proc carries driver/nvidia-caps/mig-minors, as in lab/tests/oracles/test_device_plugin.py; the config file is the
one the collection renders for the node (its ConfigMap entry), the environment the DaemonSet container's.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_device_plugin_real.py
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import NODE_PY, ROOT, real_node, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)
from oracle_util import INVENTORIES, _collections_path, probe_facts  # noqa: E402
from dp_node_plugin import Plugin  # noqa: E402  (lab/tests)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-gpu-node-%s' % SUFFIX
NS = 'node-dp-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-dp-real-%s' % SUFFIX
GPUS = 2     # two A100s of hgx-a100-80gb.json
REPLICAS = 3


def render(strategy, settings, facts):
    """(config text, container environment) the collection renders for the node: its ConfigMap entry, its env."""
    _collections_path()
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    out = stacks_render.render(dict(strategy=strategy, pool='p1', nodes=[NAME], facts={NAME: facts},
                                    settings=settings))
    label = out['node_labels'][NAME]['nvidia.com/device-plugin.config']
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'
          and m['metadata']['name'].startswith('nvidia-device-plugin-')][0]
    ctr = [c for c in ds['spec']['template']['spec']['containers'] if c['name'] == 'nvidia-device-plugin-ctr'][0]
    return cm['data'][label], dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e)


def first_gpus(work, count, name='hgx-a100-80gb.json'):
    """An inventory of the simulator's ``name`` with its first ``count`` GPUs, written as work/inventory.json."""
    with open(os.path.join(INVENTORIES, name)) as f:
        inv = json.load(f)
    inv['gpus'] = inv['gpus'][:count]
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    return inventory


@pytest.fixture(scope='module')
def gpu_node(kube_real, tmp_path_factory):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    work = tmp_path_factory.mktemp('dp')
    inventory = first_gpus(work, GPUS)
    inv = json.loads(inventory.read_text())
    facts = probe_facts(str(inventory), work / 'probe-state.json')
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY) as state:
        plugin = Plugin(work, state, str(inventory))
        core.create_namespace({'metadata': {'name': NS}})
        # a pod made before its namespace's default ServiceAccount exists is refused
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'state': state, 'core': core, 'plugin': plugin, 'facts': facts,
                   'uuids': sorted(g['uuid'] for g in inv['gpus'])}
        finally:
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            plugin.stop()


def allocatable(core):
    return core.read_node(NAME).status.allocatable.get('nvidia.com/gpu')


def gpu_pod(name, gpus=1):
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                     'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                     'nodeSelector': {'kubernetes.io/hostname': NAME}, 'terminationGracePeriodSeconds': 1,
                     'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                     'command': ['sh', '-c', 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; '
                                                 'ls /dev | grep -c nvidia || true'],
                                     'resources': {'limits': {'nvidia.com/gpu': str(gpus)}}}]}}


def run_pods(core, names, timeout=120):
    """Create the pods, wait until each ended; {name: (phase, log lines)}."""
    for n in names:
        core.create_namespaced_pod(NS, gpu_pod(n))

    def ended():
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items if p.metadata.name in names}
        return pods if all(p.status.phase in ('Succeeded', 'Failed') for p in pods.values()) else None
    pods = wait('pods %s ended' % names, ended, timeout)
    out = {}
    for n, p in pods.items():
        try:
            out[n] = (p.status.phase, core.read_namespaced_pod_log(n, NS).splitlines())
        except Exception:  # pylint: disable=broad-except
            events = [(e.reason, e.message) for e in core.list_namespaced_event(
                NS, field_selector='involvedObject.name=%s' % n).items]
            raise AssertionError('pod %s: no log; status %s\nevents %s' % (n, p.status, events))
    return out


def delete_pods(core, names):
    for n in names:
        core.delete_namespaced_pod(n, NS)
    wait('pods %s deleted' % names, lambda: not [p for p in core.list_namespaced_pod(NS).items
                                                 if p.metadata.name in names], 60)


def test_exclusive_allocatable_comes_from_the_plugin(gpu_node):
    """Before the plugin: no nvidia.com/gpu at all. With the collection's exclusive config: one per GPU, from the
    plugin's ListAndWatch, through the kubelet."""
    core, plugin = gpu_node['core'], gpu_node['plugin']
    assert allocatable(core) is None
    config, env = render('exclusive', {}, gpu_node['facts'])
    plugin.start(config, env)
    try:
        wait('nvidia.com/gpu allocatable %d' % GPUS, lambda: allocatable(core) == str(GPUS), 90)
    except AssertionError:
        raise AssertionError('allocatable %r\n%s' % (allocatable(core), plugin.tail()))
    assert (core.read_node(NAME).status.capacity or {}).get('nvidia.com/gpu') == str(GPUS)


def test_exclusive_pods_get_one_gpu_each(gpu_node):
    """Two pods asking one GPU each run at once, each container sees one GPU UUID of the inventory, not the same."""
    core = gpu_node['core']
    got = run_pods(core, ['ex-a', 'ex-b'])
    seen = []
    for name, (phase, lines) in sorted(got.items()):
        assert phase == 'Succeeded', (name, lines)
        assert lines[0].startswith('NVIDIA_VISIBLE_DEVICES='), lines
        seen.append(lines[0].split('=', 1)[1])
        assert lines[1] == '0', lines   # no device node: no NVIDIA runtime hook without a GPU
    assert sorted(seen) == gpu_node['uuids'], got
    # the kubelet's own record of the allocation (its device manager checkpoint)
    entries = lab_node.device_checkpoint(gpu_node['state'])['PodDeviceEntries']
    assert sorted(e['ResourceName'] for e in entries) == ['nvidia.com/gpu'] * 2, entries
    delete_pods(core, ['ex-a', 'ex-b'])


def test_time_slicing_config_change_reaches_allocatable(gpu_node):
    """The collection's time-slicing config (3 replicas) given to the running plugin (SIGHUP, as the config manager
    sidecar signals it): the Node's allocatable becomes GPUs x replicas, and a pod's container gets one GPU's UUID."""
    core, plugin = gpu_node['core'], gpu_node['plugin']
    config, _env = render('time-slicing', {'time_slicing': {'replicas': REPLICAS}}, gpu_node['facts'])
    plugin.reload(config)
    try:
        wait('nvidia.com/gpu allocatable %d' % (GPUS * REPLICAS),
             lambda: allocatable(core) == str(GPUS * REPLICAS), 90)
    except AssertionError:
        raise AssertionError('allocatable %r\n%s' % (allocatable(core), plugin.tail()))
    got = run_pods(core, ['ts-a'])
    phase, lines = got['ts-a']
    assert phase == 'Succeeded', lines
    assert lines[0].split('=', 1)[1] in gpu_node['uuids'], lines


def test_mig_single_devices_reach_allocatable(gpu_node, tmp_path):
    """The same GPUs in MIG mode (seven 1g.10gb each, the simulator's MIG devices) with the collection's mig config
    (strategy single): the plugin, restarted on them, makes the Node's allocatable 14 nvidia.com/gpu, and a pod's
    container gets one MIG device's UUID."""
    core = gpu_node['core']
    gpu_node['plugin'].stop()
    with open(os.path.join(INVENTORIES, 'hgx-a100-80gb.json')) as f:
        inv = json.load(f)
    inv['gpus'] = [dict(g, mig_mode=True, mig_instances=[{'profile': '1g.10gb'}] * 7) for g in inv['gpus'][:GPUS]]
    inventory = tmp_path / 'mig.json'
    inventory.write_text(json.dumps(inv))
    facts = probe_facts(str(inventory), tmp_path / 'probe-state.json')
    migs = sorted(m['uuid'] for g in facts['gpus'] for m in g.get('mig_devices') or [])
    assert len(migs) == 7 * GPUS, facts['gpus'][0].keys()
    config, env = render('mig', {'mig': {'strategy': 'single', 'devices': {'1g.10gb': 7}}}, facts)
    plugin = Plugin(tmp_path, gpu_node['state'], str(inventory))
    plugin.start(config, env)
    try:
        try:
            wait('nvidia.com/gpu allocatable %d' % (7 * GPUS), lambda: allocatable(core) == str(7 * GPUS), 90)
        except AssertionError:
            raise AssertionError('allocatable %r\n%s' % (allocatable(core), plugin.tail()))
        got = run_pods(core, ['mig-a'])
        phase, lines = got['mig-a']
        assert phase == 'Succeeded', lines
        assert lines[0].split('=', 1)[1] in migs, (lines, migs)
    finally:
        plugin.stop()
