"""NVIDIA's DRA kubelet plugin's own Xid taints on a real lab node (issue #41, row REM-18 of
docs/conformance/remediation.md): gpu-kubelet-plugin v0.5.0 (lab/go dra-driver-nvidia-gpu, a host process registered
with the node's real kubelet, lab/tests/dra_node_plugin.py) with its feature gate NVMLDeviceHealthCheck on, on the NVML
simulator whose GPUs deliver Xid events (xid_events): the device of the GPU with Xid 48 gets the device taint
gpu.nvidia.com/xid=48:NoSchedule in the plugin's ResourceSlice on the real 1.37 API server, the GPU with Xid 13 (an
application error the plugin skips) gpu.nvidia.com/xid=13 with effect None. The plugin never takes a taint back:
after a reset (the lab's nvidia-smi on the plugin's simulator state) the taint stays until the plugin restarts, and
the restarted plugin publishes the device without it (no Xid of before the reset is delivered again). The loop's own
quarantine of that GPU is a DeviceTaintRule beside the plugin's taint (gpu_remediation, mode auto on 1.37).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_remediation_dra_xid_real.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import KUBE, NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait
from dra_node_plugin import DraPlugin

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-rem-dra-xid-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-rem-dra-xid-%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
GATES = 'NVMLDeviceHealthCheck=true'


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
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=2) as state:
        plugin = DraPlugin(kube_real, work, state, NAME, str(inventory), feature_gates=GATES)
        plugin.start()
        try:
            yield {'co': client.CustomObjectsApi(api), 'plugin': plugin, 'work': work, 'inventory': inventory,
                   'kube': kube_real, 'bad': inv['gpus'][1]['uuid'], 'good': inv['gpus'][0]['uuid']}
        finally:
            plugin.stop()
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


def test_REM_18_the_dra_plugin_taints_the_device_of_an_xid_and_keeps_it_until_a_restart(dra_node):
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
    try:
        wait('the device republished without the Xid 48 taint', lambda: taints(co).get(bad) == [], 90)
    except AssertionError:
        raise AssertionError('taints %r\n%s' % (taints(co), plugin.log.read_text()[-4000:]))
    assert taints(co)[good] == want[good]      # no reset of that GPU: its Xid 13 comes again (effect None)

    rel = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_remediation', json.dumps({
        'kubeconfig': kc, 'node': NAME, 'state': 'released'}))
    assert rel.get('failed') is not True and rel['released'] == [bad], rel
