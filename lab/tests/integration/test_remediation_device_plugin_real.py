"""The remediation loop's holders in a device-plugin pool, on a real lab node (issue #41 follow-up, rows REM-13 and
REM-14 of docs/conformance/remediation.md): NVIDIA's device plugin v0.19.1 on the NVML simulator registers two GPUs
with the node's real kubelet (as in test_node_device_plugin_real.py, whose Plugin and render this file reuses); two
pods hold one GPU each; module gpuops.k8s_gpu.gpu_device_allocations, run against that node's kubelet root directory,
names each pod (by UID) with the GPU UUID its container was given; module gpuops.k8s_gpu.gpu_remediation, given those
allocations, quarantines one GPU at node level and evicts only the pod that holds it - the other stays Running - and
the release gives the node back with its own taint. The reader also names the GPU of a time-slicing replica
(<uuid>::<n>) and, with the node's GPU facts, the parent GPU of a MIG device, as the real kubelet records them. Then
(REM-15) the device plugin's own health check: restarted on
an inventory whose GPUs deliver Xid events (the simulator's xid_events), it marks the GPU of Xid 48 unhealthy and not
the GPU of Xid 13 (an application error it ignores), and the real kubelet takes that GPU out of the Node's allocatable
(its capacity stays); the pod already running is left alone.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_remediation_device_plugin_real.py
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)
from oracle_util import build_nvml_sim, probe_facts  # noqa: E402
from test_node_device_plugin_real import Plugin, first_gpus, render  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-rem-dp-%s' % SUFFIX
NS = 'rem-dp-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-rem-dp-real-%s' % SUFFIX
GPUS = 2
FINDING = {'id': 'ecc_uncorrectable', 'severity': 'critical', 'evidence': ['volatile uncorrectable ECC: 2']}


@pytest.fixture(scope='module')
def gpu_node(kube_real, tmp_path_factory):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    work = tmp_path_factory.mktemp('remdp')
    inventory = first_gpus(work, GPUS)
    inv = json.loads(inventory.read_text())
    build_nvml_sim()
    facts = probe_facts(str(inventory), work / 'probe-state.json')
    assert len(facts.get('gpus') or []) == GPUS, facts
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY) as state:
        plugin = Plugin(work, state, str(inventory))
        plugins = [plugin]
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            config, env = render('exclusive', {}, facts)
            plugin.start(config, env)
            try:
                wait('nvidia.com/gpu allocatable %d' % GPUS, lambda: (
                    core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == str(GPUS), 90)
            except AssertionError:
                raise AssertionError('allocatable %r\n%s' % (core.read_node(NAME).status.allocatable, plugin.tail()))
            yield {'state': state, 'core': core, 'facts': facts, 'kube': kube_real, 'plugins': plugins, 'inv': inv,
                   'kubeconfig': kube_real.user('gpuops-test-rem-dp-%s' % SUFFIX),
                   'uuids': sorted(g['uuid'] for g in inv['gpus'])}
        finally:
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            for p in plugins:
                p.stop()


def holder_pod(name):
    """A pod that holds one nvidia.com/gpu until it is evicted, and prints what the plugin gave its container."""
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                     'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                     'nodeSelector': {'kubernetes.io/hostname': NAME}, 'terminationGracePeriodSeconds': 1,
                     'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                     'command': ['sh', '-c', 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; '
                                                 'exec sleep 3600'],
                                     'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}}


def phase(core, name):
    from kubernetes import client
    try:
        return core.read_namespaced_pod(name, NS).status.phase
    except client.ApiException as exc:
        assert exc.status == 404, exc
        return None


def given_uuid(core, name):
    """The GPU UUID the container was given (its first log line), once it printed it."""
    try:
        lines = core.read_namespaced_pod_log(name, NS).splitlines()
    except Exception:  # pylint: disable=broad-except  (not started yet)
        return None
    return lines[0].split('=', 1)[1] if lines and lines[0].startswith('NVIDIA_VISIBLE_DEVICES=') else None


def allocations(gpu_node, check=False):
    out = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_device_allocations', json.dumps({
        'kubelet_root_dir': os.path.join(gpu_node['state'], 'var-lib', 'kubelet'), 'gpus': gpu_node['facts']['gpus']}),
        check=check)
    assert out.get('failed') is not True, out
    return out


def remediation(gpu_node, **args):
    return run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_remediation',
                      json.dumps(dict(args, kubeconfig=gpu_node['kubeconfig'], node=NAME)))


def test_REM_13_REM_14_checkpoint_names_the_holders_and_only_the_holder_is_evicted(gpu_node):
    core = gpu_node['core']
    names = ('hold-a', 'hold-b')
    for n in names:
        core.create_namespaced_pod(NS, holder_pod(n))
    given = {}
    for n in names:
        wait('pod %s Running with its GPU' % n, lambda n=n: phase(core, n) == 'Running' and given_uuid(core, n), 120)
        given[n] = given_uuid(core, n)
    assert sorted(given.values()) == gpu_node['uuids'], given
    uids = dict((n, core.read_namespaced_pod(n, NS).metadata.uid) for n in names)

    # REM-13: the kubelet's checkpoint, read by the module, names each pod (UID) with the GPU its container got
    out = allocations(gpu_node)
    assert out['changed'] is False and out['found'] is True and out['unmapped'] == [], out
    assert out['checkpoint'].endswith('/var-lib/kubelet/device-plugins/kubelet_internal_checkpoint')
    by_uid = dict((a['pod_uid'], a) for a in out['allocations'])
    for n in names:
        a = by_uid[uids[n]]
        assert a['devices'] == [given[n]] and a['device_ids'] == [given[n]], (n, a)
        assert a['resources'] == ['nvidia.com/gpu'] and a['containers'] == ['main'], (n, a)
    assert sorted(out['registered']['nvidia.com/gpu']) == gpu_node['uuids'], out['registered']
    assert allocations(gpu_node, check=True)['allocations'] == out['allocations']

    # REM-14: node-level quarantine of hold-a's GPU with those allocations evicts hold-a only
    victim, keep = names
    uuid = given[victim]
    rem = remediation(gpu_node, gpus={uuid: {'findings': [FINDING]}}, mode='node', allocations=out['allocations'],
                      drain_timeout=30)
    assert rem.get('failed') is not True, rem
    assert rem['plan'][0]['kind'] == 'node' and rem['holders'] == {uuid: ['%s/%s' % (NS, victim)]}, rem
    assert rem['evicted'] == ['%s/%s' % (NS, victim)] and rem['pods_left'] == [], rem
    wait('pod %s evicted' % victim, lambda: phase(core, victim) is None, 60)
    assert phase(core, keep) == 'Running'
    node = core.read_node(NAME)
    assert node.spec.unschedulable is True
    assert {TAINT_KEY, 'gpuops.io/gpu-unhealthy'} <= set(t.key for t in node.spec.taints), node.spec.taints
    # a re-run (the holder gone) evicts nothing more and writes nothing
    again = remediation(gpu_node, gpus={uuid: {'findings': [FINDING]}}, mode='node',
                        allocations=allocations(gpu_node)['allocations'], drain_timeout=30)
    assert again.get('failed') is not True and again['changed'] is False and again['evicted'] == [], again
    assert phase(core, keep) == 'Running'

    rel = remediation(gpu_node, state='released')
    assert rel.get('failed') is not True and rel['released'] == [uuid], rel
    node = core.read_node(NAME)
    assert not node.spec.unschedulable and 'gpuops.io/gpu-unhealthy' not in [t.key for t in node.spec.taints or []]
    wait('only the node\'s own taint left', lambda: [t.key for t in core.read_node(NAME).spec.taints or []]
         == [TAINT_KEY], 60)



def start_holder(core, name):
    """Create a holder pod; once it runs, (its UID, the device the container was given)."""
    core.create_namespaced_pod(NS, holder_pod(name))
    wait('pod %s Running with its GPU' % name, lambda: phase(core, name) == 'Running' and given_uuid(core, name), 120)
    return core.read_namespaced_pod(name, NS).metadata.uid, given_uuid(core, name)


def delete_pod(core, name):
    core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    wait('pod %s deleted' % name, lambda: phase(core, name) is None, 60)


def test_REM_13_time_slicing_replica_ids_name_their_gpu(gpu_node):
    """The collection's time-slicing config (2 replicas) given to the running plugin: the kubelet records the replica
    id <uuid>::<n> for a new pod; the reader names the GPU of that UUID."""
    core, plugin = gpu_node['core'], gpu_node['plugins'][0]
    config, _env = render('time-slicing', {'time_slicing': {'replicas': 2}}, gpu_node['facts'])
    plugin.reload(config)
    try:
        wait('nvidia.com/gpu allocatable %d' % (GPUS * 2), lambda: (
            core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == str(GPUS * 2), 90)
    except AssertionError:
        raise AssertionError('allocatable %r\n%s' % (core.read_node(NAME).status.allocatable, plugin.tail()))
    uid, given = start_holder(core, 'hold-ts')
    assert given in gpu_node['uuids'], given
    a = [x for x in allocations(gpu_node)['allocations'] if x['pod_uid'] == uid]
    assert len(a) == 1 and a[0]['devices'] == [given], a
    assert len(a[0]['device_ids']) == 1 and a[0]['device_ids'][0].startswith(given + '::'), a
    delete_pod(core, 'hold-ts')


def test_REM_13_mig_devices_name_their_parent_gpu(gpu_node, tmp_path):
    """The same GPUs in MIG mode (seven 1g.10gb each) with the collection's mig config (strategy single): the kubelet
    records the MIG UUID; the reader, given the node's GPU facts, names the parent GPU and the MIG device; without the
    facts the MIG UUID is unmapped."""
    core = gpu_node['core']
    gpu_node['plugins'][0].stop()
    inv = json.loads(json.dumps(gpu_node['inv']))
    inv['gpus'] = [dict(g, mig_mode=True, mig_instances=[{'profile': '1g.10gb'}] * 7) for g in inv['gpus']]
    inventory = tmp_path / 'mig.json'
    inventory.write_text(json.dumps(inv))
    facts = probe_facts(str(inventory), tmp_path / 'probe-state.json')
    parent = dict((m['uuid'], g['uuid']) for g in facts['gpus'] for m in g.get('mig_devices') or [])
    assert len(parent) == 7 * GPUS, facts['gpus'][0].keys()
    config, env = render('mig', {'mig': {'strategy': 'single', 'devices': {'1g.10gb': 7}}}, facts)
    plugin = Plugin(tmp_path, gpu_node['state'], str(inventory))
    gpu_node['plugins'].append(plugin)
    plugin.start(config, env)
    try:
        wait('nvidia.com/gpu allocatable %d' % (7 * GPUS), lambda: (
            core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == str(7 * GPUS), 90)
    except AssertionError:
        raise AssertionError('allocatable %r\n%s' % (core.read_node(NAME).status.allocatable, plugin.tail()))
    uid, mig = start_holder(core, 'hold-mig')
    assert mig in parent, (mig, parent)
    out = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_device_allocations', json.dumps({
        'kubelet_root_dir': os.path.join(gpu_node['state'], 'var-lib', 'kubelet'), 'gpus': facts['gpus']}))
    a = [x for x in out['allocations'] if x['pod_uid'] == uid]
    assert len(a) == 1 and a[0]['device_ids'] == [mig] and a[0]['devices'] == sorted([parent[mig], mig]), a
    bare = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_device_allocations', json.dumps({
        'kubelet_root_dir': os.path.join(gpu_node['state'], 'var-lib', 'kubelet')}))
    assert mig in bare['unmapped'], bare
    delete_pod(core, 'hold-mig')
    plugin.stop()

def test_REM_15_the_device_plugin_marks_a_gpu_of_a_critical_xid_unhealthy(gpu_node, tmp_path):
    core = gpu_node['core']
    running = [p.metadata.name for p in core.list_namespaced_pod(NS).items if p.status.phase == 'Running']
    for p in gpu_node['plugins']:
        p.stop()
    inv = json.loads(json.dumps(gpu_node['inv']))
    inv['gpus'][0]['xid_events'] = [13]     # Graphics Engine Exception: an application error, ignored
    inv['gpus'][1]['xid_events'] = [48]     # double-bit ECC error: critical
    inventory = tmp_path / 'xid.json'
    inventory.write_text(json.dumps(inv))
    plugin = Plugin(tmp_path, gpu_node['state'], str(inventory))
    gpu_node['plugins'].append(plugin)
    config, env = render('exclusive', {}, gpu_node['facts'])
    plugin.start(config, env)
    bad, good = inv['gpus'][1]['uuid'], inv['gpus'][0]['uuid']

    def status():
        st = core.read_node(NAME).status
        return (st.capacity or {}).get('nvidia.com/gpu'), (st.allocatable or {}).get('nvidia.com/gpu')
    try:
        wait('allocatable %d of capacity %d' % (GPUS - 1, GPUS), lambda: status() == (str(GPUS), str(GPUS - 1)), 90)
    except AssertionError:
        raise AssertionError('capacity, allocatable %r\n%s' % (status(), plugin.tail()))
    log = plugin.tail()
    assert "device marked unhealthy: %s" % bad in log and "device marked unhealthy: %s" % good not in log, log
    # the plugin does not evict: what ran on the node before runs on
    assert all(phase(core, n) == 'Running' for n in running), running
