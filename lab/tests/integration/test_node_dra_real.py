"""NVIDIA's DRA kubelet plugin with a real kubelet (issue #36): gpu-kubelet-plugin v0.5.0 (lab/go dra-driver-nvidia-gpu)
on the NVML simulator registers with the kubelet of a real lab node (lab/node/node.py) through the kubelet's plugin
registry (/var/lib/kubelet/plugins_registry of the node) and publishes the node's ResourceSlice itself: no slice is
written by the lab. The real scheduler allocates a claim against it, the kubelet calls NodePrepareResources, the plugin
writes the claim's CDI spec into the node's CDI directory (/var/run/cdi), containerd injects it (CDI on) and the
container sees the device; deleting the pod makes the kubelet call NodeUnprepareResources and the spec goes.

The node has /dev/nvidia* device nodes of its own (node.py --nvidia-devices: mknod in the node's /dev overlay; opening
them fails with ENXIO, there is no driver). The plugin runs as a host process with the driver root, nvidia-cdi-hook
stand-in and simulator library of lab/kube/dra_slices.py (plugin_dirs), its kubelet and CDI directories the node's.
The DeviceClass is this file's own (the chart's gpu.nvidia.com selector under a name with the pid): the chart's
release belongs to test_dra_real.py on the shared cluster.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_dra_real.py
"""
from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from conftest import KUBE, NODE_PY, real_node, wait_until as wait
from dra_node_plugin import DraPlugin, node_slices, start_claim_pod

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
import dra_slices  # noqa: E402  (lab/kube)
import node as lab_node  # noqa: E402  (lab/node)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-dra-node-%s' % SUFFIX
NS = 'node-dra-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-dra-real-%s' % SUFFIX
CLASS = 'gpu-%s.lab.gpuops.io' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
INVENTORY = 't4.json'


@pytest.fixture(scope='module')
def dra_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    work = tmp_path_factory.mktemp('dra')
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1) as state:
        plugin = DraPlugin(kube_real, work, state, NAME, INVENTORY)
        proc, kubelet, cdi = plugin.start(), plugin.kubelet, plugin.cdi
        co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', {
            'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'DeviceClass', 'metadata': {'name': CLASS},
            'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s' && "
                                                          "device.attributes['%s'].type == 'gpu'" % (DRIVER, DRIVER)}}]}})
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'state': state, 'core': core, 'co': co, 'proc': proc, 'log': work / 'plugin.log', 'cdi': cdi,
                   'kubelet': kubelet}
        finally:
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            dra_slices.stop_plugin(proc)
            co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', CLASS)
            for s in slices(co):
                co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])


def slices(co):
    return node_slices(co, NAME, DRIVER, GROUP, VERSION)


def tail(dra):
    return dra['log'].read_text()[-4000:] if dra['log'].exists() else ''


def test_plugin_registers_with_the_kubelet_and_publishes_the_slice(dra_node):
    """The kubelet finds the plugin's registration socket and connects (its log says so); the slice of this node is
    the plugin's, with the simulator's T4, owned by the Node."""
    co = dra_node['co']
    try:
        got = wait('the plugin\'s ResourceSlice for %s' % NAME, lambda: slices(co), 90)
    except AssertionError:
        raise AssertionError(tail(dra_node))
    assert len(got) == 1
    spec = got[0]['spec']
    assert [d['name'] for d in spec['devices']] == ['gpu-0'], spec
    attrs = spec['devices'][0]['attributes']
    with open(dra_slices.inventory_path(INVENTORY)) as f:
        uuid = json.load(f)['gpus'][0]['uuid']
    assert attrs['uuid'] == {'string': uuid}, attrs   # the simulator's T4
    owner = got[0]['metadata']['ownerReferences'][0]
    assert (owner['kind'], owner['name']) == ('Node', NAME)
    klog = open(os.path.join(dra_node['state'], 'logs', 'kubelet.log')).read()
    assert 'RegisterPlugin started' in klog and '/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock' in klog
    assert dra_node['proc'].poll() is None, tail(dra_node)


def test_claim_prepared_container_sees_device_and_unprepared_on_delete(dra_node):
    """A pod with a claim of the node's GPU: the kubelet's NodePrepareResources makes the plugin write the claim's CDI
    spec (the GPU's /dev/nvidia0 as the claim's device, nvidiactl and nvidia-uvm as common edits, the driver's
    hooks), containerd injects it, the container lists exactly those device nodes and the spec's environment; deleting
    the pod makes the kubelet call NodeUnprepareResources: the spec is gone."""
    core, co = dra_node['core'], dra_node['co']
    wait('the slice', lambda: slices(co), 90)
    p = start_claim_pod(core, co, NS, NAME, TAINT_KEY, CLASS, lab_node.BUSYBOX_IMAGE, GROUP, VERSION,
                        on_timeout=lambda: tail(dra_node))
    claim = co.get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims',
                                            p.status.resource_claim_statuses[0].resource_claim_name)
    uid = claim['metadata']['uid']
    assert [(r['driver'], r['pool'], r['device']) for r in claim['status']['allocation']['devices']['results']] == [
        (DRIVER, NAME, 'gpu-0')]
    spec_file = 'k8s.gpu.nvidia.com-claim_%s.yaml' % uid
    assert os.listdir(dra_node['cdi']) == [spec_file]
    with open(os.path.join(dra_node['cdi'], spec_file)) as f:
        spec = yaml.safe_load(f)
    assert spec['kind'] == 'k8s.gpu.nvidia.com/claim'
    assert [(d['name'], [n['path'] for n in d['containerEdits']['deviceNodes']]) for d in spec['devices']] == [
        ('%s-gpu-0' % uid, ['/dev/nvidia0'])]
    log = wait('the container\'s log', lambda: (lambda t: t if 'done' in t else None)(
        core.read_namespaced_pod_log('dra', NS)), 30)
    lines = log.splitlines()
    assert lines[:4] == ['nvidia-uvm', 'nvidia-uvm-tools', 'nvidia0', 'nvidiactl'], log
    assert 'NVIDIA_VISIBLE_DEVICES=void' in lines, log   # the CDI spec's env: devices come from CDI, not the hook
    core.delete_namespaced_pod('dra', NS)
    wait('pod dra gone', lambda: not core.list_namespaced_pod(NS, field_selector='metadata.name=dra').items, 60)
    wait('the claim\'s CDI spec removed (NodeUnprepareResources)', lambda: not os.listdir(dra_node['cdi']), 30)


def _uuids(view):
    """The UUIDs the plugin's devices carry for an NVML view: whole GPUs without MIG mode, MIG devices of the others."""
    return sorted(m['uuid'] for g in view['gpus'] for m in g['migs']) + sorted(
        g['uuid'] for g in view['gpus'] if not g['mig'])


def _quantities(devices):
    from kubernetes.utils import parse_quantity
    return [dict(d, capacity={k: parse_quantity(v['value']) for k, v in d['capacity'].items()}) for d in devices]


def test_recording_of_the_slice_the_real_node_published(dra_node, kube_real, tmp_path):
    """The devices of the slice the plugin published through the real node, for each inventory of the lab's kwok DRA
    nodes (lab/kube/dra_slices.py LAB_NODES: the T4 of the fixture's plugin, then the plugin restarted on the node with
    the A100s and with the H100s in MIG mode), equal lab/node/recordings/dra-slices.json, from which
    lab/kube/dra_slices.py publishes the kwok nodes' slices. GPUOPS_RECORD_NODES=1 writes it instead (the command: the
    file's `regenerate`). dra_slices.py's computed devices (from NVML, as the plugin's source does: what it publishes
    for an inventory not recorded) equal the recording on each."""
    co = dra_node['co']
    assert sorted(set(dra_slices.LAB_NODES.values())) == sorted(dra_slices.RECORDED_INVENTORIES)
    got = {}
    for inventory, shape in sorted(dra_slices.RECORDED_INVENTORIES.items(), key=lambda kv: kv[0] != INVENTORY):
        view = dra_slices.nvml_view(inventory, str(tmp_path))
        plugin = None
        if inventory != INVENTORY:
            # the node's plugin, restarted on these GPUs: it replaces the node's slice (same pool, the node's name)
            dra_slices.stop_plugin(dra_node['proc'])
            work = tmp_path / shape
            work.mkdir()
            plugin = DraPlugin(kube_real, work, dra_node['state'], NAME, inventory)
            plugin.start()
        try:
            try:
                devices = wait('the slice of %s' % shape, lambda: [s['spec']['devices'] for s in slices(co) if sorted(
                    d['attributes']['uuid']['string'] for d in s['spec']['devices']) == _uuids(view)], 90)[0]
            except AssertionError:
                raise AssertionError('%s\n%s' % (slices(co), plugin.log.read_text()[-4000:] if plugin else tail(
                    dra_node)))
        finally:
            if plugin:
                plugin.stop()
        assert len(slices(co)) == 1
        # recorded in name order: without DynamicMIG v0.5.0 lists the devices in Go map order (driver.go
        # publishResources ranges over perGPUAllocatable.allocatablesMap), another order in each run
        devices = sorted(devices, key=lambda d: d['name'])
        got[shape] = {'inventory': inventory, 'devices': devices}
        # the fallback, checked: the devices dra_slices.py computes for this inventory are the plugin's (capacities as
        # quantities: the API server writes 16106127360 as 15Gi)
        assert _quantities(dra_slices.devices(view)) == _quantities(devices), shape
    doc = {'what': 'the devices of the ResourceSlice NVIDIA\'s DRA kubelet plugin v0.5.0 published through a real lab '
                   'node (lab/node) on the NVML simulator; lab/kube/dra_slices.py publishes them for the kwok nodes of '
                   'the same inventory',
           'regenerate': 'GPUOPS_RECORD_NODES=1 .venv/bin/pytest -q -p no:xdist '
                         'lab/tests/integration/test_node_dra_real.py',
           'shapes': got}
    if os.environ.get('GPUOPS_RECORD_NODES') == '1':
        with open(dra_slices.RECORDING, 'w') as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write('\n')
    with open(dra_slices.RECORDING) as f:
        assert json.load(f) == doc, 'the real node now publishes another slice: regenerate with ' + doc['regenerate']
    # the kwok nodes' slice bodies carry exactly these devices, for every kwok DRA node of the lab
    for node, inventory in sorted(dra_slices.LAB_NODES.items()):
        devices = got[dra_slices.RECORDED_INVENTORIES[inventory]]['devices']
        assert dra_slices.recorded_devices(inventory) == devices
        body = dra_slices.resource_slice(node, None, 'uid', dra_slices.recorded_devices(inventory))
        assert body['spec']['devices'] == devices and body['spec']['pool']['name'] == node
