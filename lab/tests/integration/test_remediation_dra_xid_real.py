"""NVIDIA's DRA kubelet plugin's own Xid taints on a real lab node (issue #41, row REM-18 of
docs/conformance/remediation.md): gpu-kubelet-plugin v0.5.0 (lab/go dra-driver-nvidia-gpu, a host process registered
with the node's real kubelet, lab/tests/dra_node_plugin.py) with its feature gate NVMLDeviceHealthCheck on, on the NVML
simulator whose GPUs deliver Xid events (xid_events): the device of the GPU with Xid 48 gets the device taint
gpu.nvidia.com/xid=48:NoSchedule in the plugin's ResourceSlice on the real 1.37 API server, the GPU with Xid 13 (an
application error the plugin skips) gpu.nvidia.com/xid=13 with effect None. The plugin never takes a taint back:
after a reset (the lab's nvidia-smi on the plugin's simulator state) the taint stays until the plugin restarts, and
the restarted plugin publishes the device without it (no Xid of before the reset is delivered again; the other GPU's
Xid 13 happens again and taints its device again). The simulator delivers the Xids 3 s after the plugin registered for
events (xid_events_after_ms), after its first publish: at once they race v0.5.0's first publish (REM-18). The loop's own
quarantine of that GPU is a DeviceTaintRule beside the plugin's taint (gpu_remediation, mode auto on 1.37); the
release validates the GPU first (REM-16 in a DRA pool): a ResourceClaim selecting exactly that device by its uuid and
tolerating the rule, scheduled by the real scheduler, prepared by the plugin (CDI), and the lab's check in the pod
reading the GPU through the simulator.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_remediation_dra_xid_real.py
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import KUBE, NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait
from dra_node_plugin import DraPlugin
from test_remediation_device_plugin_real import CHECK_IMAGE, MIRROR, check_image

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)
import registry as lab_registry  # noqa: E402  (lab/node)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-rem-dra-xid-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-rem-dra-xid-%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
GATES = 'NVMLDeviceHealthCheck=true'
CLASS = 'gpuops-rem-xid-%s' % SUFFIX     # the validation claim's DeviceClass (cluster-scoped: this file's own)
NS = 'rem-dra-xid-%s' % SUFFIX
XID_AFTER_MS = 3000


@pytest.fixture(scope='module')
def dra_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    work = tmp_path_factory.mktemp('dra-xid')
    with open(os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', 'hgx-a100-80gb.json')) as f:
        inv = json.load(f)
    inv['gpus'] = inv['gpus'][:2]
    inv['gpus'][0]['xid_events'] = [13]     # Graphics Engine Exception: an application error, skipped
    inv['gpus'][1]['xid_events'] = [48]     # double-bit ECC error
    # the Xids happen 3 s after the plugin registered for events (GPUs failing while it runs), after its first publish:
    # delivered at once they raced v0.5.0's first publish, which drops a taint handled before it (REM-18; a whole run
    # on 2026-12-01 lost both taints that way at the first start)
    for g in inv['gpus']:
        g['xid_events_after_ms'] = XID_AFTER_MS
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    os.symlink('nvml-sim-state.json', str(work / 'state.json'))   # the simulator's default state name in the pod
    registry = lab_registry.Registry(str(work / 'registry'))
    registry.start()
    host, path = MIRROR.split('/', 1)
    registry.push(check_image(work), path + '/gpu-check', CHECK_IMAGE.rsplit(':', 1)[1])
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=2,
                   extra=('--mirror', '%s=%s' % (host, registry.url))) as state:
        plugin = DraPlugin(kube_real, work, state, NAME, str(inventory), feature_gates=GATES)
        # the second GPU's device node under the driver root (dra_node_plugin makes nvidia0): without it its CDI
        # device has no edits and the kubelet cannot start a container with it
        os.mknod(os.path.join(plugin.dirs['driver'], 'dev', 'nvidia1'), 0o666 | stat.S_IFCHR, os.makedev(195, 1))
        plugin.start()
        co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', {
            'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'DeviceClass', 'metadata': {'name': CLASS},
            'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s'" % DRIVER}}]}})
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'co': co, 'core': core, 'plugin': plugin, 'work': work, 'inventory': inventory,
                   'kube': kube_real, 'bad': inv['gpus'][1]['uuid'], 'good': inv['gpus'][0]['uuid']}
        finally:
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', CLASS)
            plugin.stop()
            registry.stop()
            for s in slices(client.CustomObjectsApi(api)):
                client.CustomObjectsApi(api).delete_cluster_custom_object(GROUP, VERSION, 'resourceslices',
                                                                          s['metadata']['name'])


def slices(co):
    return [s for s in co.list_cluster_custom_object(GROUP, VERSION, 'resourceslices')['items']
            if s['spec'].get('nodeName') == NAME and s['spec'].get('driver') == DRIVER]


def taints(co):
    """{uuid: [(key, value, effect)]} of the node's published GPU devices."""
    out = {}
    for s in slices(co):
        for d in s['spec'].get('devices') or []:
            uuid = ((d.get('attributes') or {}).get('uuid') or {}).get('string')
            if uuid:
                out[uuid] = sorted((t['key'], t.get('value'), t['effect']) for t in d.get('taints') or [])
    return out


def test_REM_16_REM_18_the_dra_plugin_taints_the_device_of_an_xid_and_keeps_it_until_a_restart(dra_node):
    co, plugin, bad, good = dra_node['co'], dra_node['plugin'], dra_node['bad'], dra_node['good']
    want = {bad: [('gpu.nvidia.com/xid', '48', 'NoSchedule')], good: [('gpu.nvidia.com/xid', '13', 'None')]}
    try:
        wait('the Xid taints in the ResourceSlice', lambda: taints(co) == want, 90)
    except AssertionError:
        raise AssertionError('taints %r\n%s' % (taints(co), plugin.log.read_text()[-4000:]))

    # the loop's own quarantine of that GPU: a DeviceTaintRule for its device, beside the plugin's taint
    kc = dra_node['kube'].user('gpuops-test-rem-dra-xid-%s' % SUFFIX)
    finding = {'id': 'xid_48', 'severity': 'critical', 'evidence': ['NVML event: Xid 48']}
    rem = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_remediation', json.dumps({
        'kubeconfig': kc, 'node': NAME, 'gpus': {bad: {'findings': [finding]}}, 'dry_run_timeout': 0}))
    assert rem.get('failed') is not True and rem['plan'][0]['kind'] == 'dra', rem

    # the reset clears the GPU's fault, not the plugin's taint: v0.5.0 has no code that removes a device taint
    smi = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(lab_node.NVML_SIM_LIB), NVML_SIM_LIB=lab_node.NVML_SIM_LIB,
               NVML_SIM_INVENTORY=str(dra_node['inventory']), NVML_SIM_STATE=str(dra_node['work'] / 'nvml-sim-state.json'))
    out = subprocess.run([os.path.join(ROOT, 'lab', 'nvml_sim', 'nvidia-smi'), '-r', '-i', bad], env=smi,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and 'was successfully reset' in out.stdout, out
    time.sleep(5)
    assert taints(co)[bad] == want[bad]
    # the restarted plugin publishes the device without it (the Xid was before the reset)
    plugin.stop()
    plugin.start()
    # No reset of the other GPU: its Xid 13 happens again for the restarted plugin's new event set (XID_AFTER_MS after
    # it registered, after its first publish), so that device is tainted again; the Xid 48 was before the reset, so
    # the restarted plugin publishes that device without a taint, for good
    def settled():
        t = taints(co)
        return t if t == {bad: [], good: want[good]} else None

    try:
        wait('the device republished without the Xid 48 taint and the other with its Xid 13', settled, 90)
        time.sleep(XID_AFTER_MS / 1000.0 + 1)
        assert settled()
    except AssertionError:
        raise AssertionError('taints %r\n%s' % (taints(co), plugin.log.read_text()[-4000:]))

    # REM-16 in a DRA pool: the validation claim selects exactly that device by its uuid and tolerates the loop's
    # rule; the real scheduler allocates it on this node, the plugin prepares it (CDI), the check passes, the release
    volume = {'name': 'nvml', 'hostPath': {'path': str(dra_node['work']), 'type': 'Directory'}}
    validate = {'image': CHECK_IMAGE, 'registry': MIRROR, 'command': ['gpu-check'], 'namespace': NS, 'timeout': 45,
                'device_class': CLASS, 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                'volumes': [volume], 'volume_mounts': [{'name': 'nvml', 'mountPath': '/etc/nvml-sim', 'readOnly': True},
                                                       {'name': 'nvml', 'mountPath': '/var/lib/nvml-sim'}]}
    rel = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_remediation', json.dumps({
        'kubeconfig': kc, 'node': NAME, 'state': 'released', 'validate': validate}))
    assert rel.get('failed') is not True and rel['released'] == [bad], (rel.get('msg'), [
        (e.involved_object.name, e.reason, e.message) for e in dra_node['core'].list_namespaced_event(NS).items])
    v = rel['validation'][bad]
    assert v['passed'] is True and 'PASS %s' % bad in v['log'], v
    assert 'create validation ResourceClaim %s/%s for GPU %s' % (NS, v['pod'], bad) in rel['actions'], rel['actions']
    core = dra_node['core']
    wait('the validation pod and claim deleted', lambda: not core.list_namespaced_pod(NS).items and not dra_node[
        'co'].list_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims')['items'], 60)
