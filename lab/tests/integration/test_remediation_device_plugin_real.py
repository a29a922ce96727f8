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

REM-16/REM-17, the loop's last steps on the same node: a GPU with Xid 48 and volatile uncorrectable ECC errors, marked
unhealthy by the plugin and quarantined at node level; module gpu_remediation's release with ``validate`` first
refuses (the plugin still lists the GPU unhealthy, so the node has no free nvidia.com/gpu: it stays quarantined and
says why); gpu_reset resets it on the simulator (the lab's nvidia-smi); the allocatable does NOT come back by itself
(v0.19.1 never lists a GPU healthy again), a restart of the plugin brings it back (the simulator delivers no Xid of
before the reset to an event set registered after it, as NVML does); then the validation pod - bound to the node,
asking its free GPU, image gpu-check (lab/nvml_sim/gpu-check, built here FROM scratch and pulled through the mirror
prefix from the lab registry) reading the GPU through the NVML simulator - fails while it reads a state without the
reset (the errors persist: the GPU stays quarantined, the check's own lines in the message) and passes with the
node's state, and only then is the GPU released. The plugin here is a host process (see test_node_device_plugin_real),
so the test restarts it where the module, given device_plugin_selector, deletes the DaemonSet's pod (unit-tested).
Then the role end to end (REM-11/16): playbooks/remediate.yml with this node as its inventory host runs the whole
loop for a GPU with ECC errors - detect, quarantine, drain of the holder only, reset, doctor, validation pod,
release - and a re-run changes nothing.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_remediation_device_plugin_real.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)
import registry as lab_registry  # noqa: E402  (lab/node)
from oracle_util import build_nvml_sim, probe_facts, sim_env  # noqa: E402
from test_node_device_plugin_real import Plugin, first_gpus, render  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-rem-dp-%s' % SUFFIX
NS = 'rem-dp-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-rem-dp-real-%s' % SUFFIX
GPUS = 2
FINDING = {'id': 'ecc_uncorrectable', 'severity': 'critical', 'evidence': ['volatile uncorrectable ECC: 2']}
# the validation image: the lab's check under a name of its own, pulled through the mirror prefix (gpuops_mirror)
CHECK_IMAGE = 'gpuops.lab/gpu-check:1.0.0'
MIRROR = 'mirror.gpuops.lab/lab'
CHECK_SRC = os.path.join(ROOT, 'lab', 'nvml_sim', 'gpu-check', 'gpu-check.c')


def check_image(work):
    """gpu-check FROM scratch: the program (compiled here), the C library and loader it and the NVML simulator link,
    and the simulator as libnvidia-ml.so.1 - the stand-in for the driver library NVIDIA's runtime would mount; its
    inventory and state come from the node (hostPath), as a real GPU's state is the node's."""
    build_nvml_sim()
    binary = os.path.join(str(work), 'gpu-check')
    subprocess.run(['gcc', '-O2', '-Wall', '-Wextra', '-Werror', '-o', binary, CHECK_SRC, '-ldl'], check=True)
    files = {'usr/bin/gpu-check': binary, 'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1': lab_node.NVML_SIM_LIB}
    for lib in sorted(set(lab_node._ldd(binary) + lab_node._ldd(lab_node.NVML_SIM_LIB))):
        files[lib.lstrip('/')] = os.path.realpath(lib)
    dirs = set(['etc/nvml-sim', 'var/lib/nvml-sim', 'dev', 'proc', 'sys', 'tmp'])
    for arc in list(files) + list(dirs):
        d = os.path.dirname(arc)
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    entries = [(d, 'dir', None, 0o755) for d in sorted(dirs)]
    for arc, src in sorted(files.items()):
        with open(src, 'rb') as f:
            entries.append((arc, 'file', f.read(), 0o755))
    return lab_node.oci_archive(os.path.join(str(work), 'gpu-check.tar'), CHECK_IMAGE, entries, {
        'Env': ['PATH=/usr/bin', 'LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu'], 'Entrypoint': ['/usr/bin/gpu-check']})


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
    registry = lab_registry.Registry(str(work / 'registry'))
    registry.start()
    host, path = MIRROR.split('/', 1)
    registry.push(check_image(work), path + '/gpu-check', CHECK_IMAGE.rsplit(':', 1)[1])
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY,
                   extra=('--mirror', '%s=%s' % (host, registry.url))) as state:
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
            registry.stop()


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
    try:
        wait('pod %s Running with its GPU' % name, lambda: phase(core, name) == 'Running' and given_uuid(core, name),
             120)
    except AssertionError:
        pod = core.read_namespaced_pod(name, NS)
        events = [(e.reason, e.message) for e in core.list_namespaced_event(
            NS, field_selector='involvedObject.name=%s' % name).items]
        raise AssertionError('pod %s: %s\nevents %s' % (name, pod.status, events))
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


def test_REM_16_REM_17_restart_the_plugin_validate_on_the_gpu_then_release(gpu_node, tmp_path):
    core = gpu_node['core']
    for p in gpu_node['plugins']:
        p.stop()
    for pod in core.list_namespaced_pod(NS).items:
        core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
    # the node's "driver": inventory and simulator state in one directory (the pod mounts it as the node's)
    inv = json.loads(json.dumps(gpu_node['inv']))
    inv['gpus'][1].update(xid_events=[48], ecc_errors={'uncorrected_volatile': 2, 'uncorrected_aggregate': 2})
    bad, good = inv['gpus'][1]['uuid'], inv['gpus'][0]['uuid']
    inventory = tmp_path / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    os.symlink('nvml-state.json', str(tmp_path / 'state.json'))    # the simulator's default state name in the pod
    plugin = Plugin(tmp_path, gpu_node['state'], str(inventory))
    gpu_node['plugins'].append(plugin)
    config, env = render('exclusive', {}, gpu_node['facts'])

    def status():
        st = core.read_node(NAME).status
        return (st.capacity or {}).get('nvidia.com/gpu'), (st.allocatable or {}).get('nvidia.com/gpu')
    # the stopped plugin's GPUs leave the allocatable first (so what follows is the new plugin's)
    wait('allocatable 0 with the plugin stopped', lambda: status()[1] == '0', 90)
    plugin.start(config, env)
    try:
        wait('allocatable 1 of capacity 2 (Xid 48)', lambda: status() == (str(GPUS), str(GPUS - 1))
             and 'device marked unhealthy: %s' % bad in plugin.tail(), 90)
    except AssertionError:
        raise AssertionError('capacity, allocatable %r\n%s' % (status(), plugin.tail()))
    # a pod holds the healthy GPU (the only one the plugin lists)
    _uid, held = start_holder(core, 'hold-good')
    assert held == good, held

    # quarantine the bad GPU at node level (nobody holds it)
    allocs = allocations(gpu_node)['allocations']
    rem = remediation(gpu_node, gpus={bad: {'findings': [FINDING]}}, mode='node', allocations=allocs, drain_timeout=30)
    assert rem.get('failed') is not True and rem['holders'] == {bad: []} and rem['evicted'] == [], rem

    volume = {'name': 'nvml', 'hostPath': {'path': str(tmp_path), 'type': 'Directory'}}
    validate = {'image': CHECK_IMAGE, 'registry': MIRROR, 'command': ['gpu-check'], 'namespace': NS, 'timeout': 90,
                'volumes': [volume], 'volume_mounts': [{'name': 'nvml', 'mountPath': '/etc/nvml-sim', 'readOnly': True},
                                                       {'name': 'nvml', 'mountPath': '/var/lib/nvml-sim'}]}
    # REM-16: before the repair the plugin lists the GPU unhealthy: no free GPU for the validation, it stays
    early = remediation(gpu_node, state='released', validate=validate)
    assert early.get('failed') is True and early['released'] == [], early
    assert 'has no free nvidia.com/gpu' in early['msg'] and bad in early['msg'], early['msg']
    assert early['validation'][bad]['pod'] is None and core.read_node(NAME).spec.unschedulable is True

    # the repair: gpu_reset through the lab's nvidia-smi on the node's simulator state
    smi_env = sim_env(str(inventory), str(tmp_path / 'nvml-state.json'))
    smi_env['NVML_SIM_LIB'] = lab_node.NVML_SIM_LIB
    reset = run_module(lab_collections_path(), 'gpuops.k8s_gpu.gpu_reset', json.dumps({
        'uuids': [bad], 'nvidia_smi': os.path.join(ROOT, 'lab', 'nvml_sim', 'nvidia-smi'), 'delay': 0}), env=smi_env)
    assert reset.get('failed') is not True and reset['changed'] is True, reset
    # REM-17: v0.19.1 does not list the GPU healthy again by itself ...
    time.sleep(8)
    assert status() == (str(GPUS), str(GPUS - 1)), status()
    # ... a restart does (the DaemonSet's new pod, here the host process started again)
    plugin.stop()
    wait('allocatable 0 with the plugin stopped', lambda: status()[1] == '0', 90)
    plugin.start(config, env)
    try:
        wait('allocatable back to 2 after the restart', lambda: status() == (str(GPUS), str(GPUS)), 90)
    except AssertionError:
        raise AssertionError('capacity, allocatable %r\n%s' % (status(), plugin.tail()))

    # REM-16: a check that reads a state without the reset (only the inventory mounted): the errors persist, it fails
    stale = dict(validate, volume_mounts=validate['volume_mounts'][:1])
    failed = remediation(gpu_node, state='released', validate=stale)
    assert failed.get('failed') is True and failed['released'] == [], failed
    v = failed['validation'][bad]
    assert v['passed'] is False and v['why'] == 'the check exited 1 (Error)', v
    assert 'FAIL volatile uncorrectable ECC errors: 2' in v['log'] and 'FAIL volatile' in failed['msg'], failed
    node = core.read_node(NAME)
    assert node.spec.unschedulable is True and 'gpuops.io/gpu-unhealthy' in [t.key for t in node.spec.taints]

    # with the node's state: the pod gets the repaired GPU (the only free one), the check passes, the GPU is released
    ok = remediation(gpu_node, state='released', validate=validate)
    assert ok.get('failed') is not True and ok['released'] == [bad], ok
    v = ok['validation'][bad]
    assert v['passed'] is True and 'PASS %s' % bad in v['log'] and 'volatile uncorrectable ECC errors: 0' in v['log'], v
    assert 'create validation Pod %s/%s for GPU %s' % (NS, v['pod'], bad) in ok['actions'], ok['actions']
    node = core.read_node(NAME)
    assert not node.spec.unschedulable and [t.key for t in node.spec.taints or []] == [TAINT_KEY]
    wait('the validation pod deleted', lambda: phase(core, v['pod']) is None, 60)
    assert phase(core, 'hold-good') == 'Running'
    # a re-run on the healthy node: nothing to release, no validation pod, no write
    again = remediation(gpu_node, state='released', validate=validate)
    assert again.get('failed') is not True and again['changed'] is False and again['actions'] == [], again
    assert 'validation' not in again
    delete_pod(core, 'hold-good')


def playbook(gpu_node, work, *extra):
    """playbooks/remediate.yml (role gpu_remediation) with this real node as its inventory host: a local connection
    whose NVML is the simulator of the node's device plugin (same inventory, same state), the node's kubelet root
    directory (its device-plugin checkpoint), the lab's nvidia-smi for the reset, the lab's check as the validation
    image through the mirror prefix. Returns ansible-playbook's output."""
    from conftest import VENV_BIN
    (work / 'dmesg.txt').write_text('')
    (work / 'hosts.yml').write_text(json.dumps({'gpu_nodes': {'hosts': {'rem-dp-host': {
        'ansible_connection': 'local', 'ansible_python_interpreter': os.path.join(VENV_BIN, 'python'),
        'gpu_remediation_node_name': NAME}}}}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=lab_collections_path(),
               ANSIBLE_CONFIG=os.path.join(ROOT, 'lab', 'ansible.cfg'), ANSIBLE_LOCALHOST_WARNING='0',
               LD_LIBRARY_PATH=os.path.dirname(lab_node.NVML_SIM_LIB), NVML_SIM_LIB=lab_node.NVML_SIM_LIB,
               NVML_SIM_INVENTORY=str(work / 'inventory.json'), NVML_SIM_STATE=str(work / 'nvml-state.json'))
    volume = {'name': 'nvml', 'hostPath': {'path': str(work), 'type': 'Directory'}}
    cmd = [os.path.join(VENV_BIN, 'ansible-playbook'), '-i', str(work / 'hosts.yml'), 'playbooks/remediate.yml',
           '-e', json.dumps({
               'gpuops_become': False, 'gpuops_k8s_kubeconfig': gpu_node['kubeconfig'],
               'gpuops_mirror': {'registry': MIRROR},
               'gpu_remediation_kernel_log': str(work / 'dmesg.txt'),
               'gpu_remediation_kubelet_root_dir': os.path.join(gpu_node['state'], 'var-lib', 'kubelet'),
               'gpu_remediation_nvidia_smi': os.path.join(ROOT, 'lab', 'nvml_sim', 'nvidia-smi'),
               'gpu_remediation_reset_delay': 0, 'gpu_remediation_dry_run_timeout': 0,
               'gpu_remediation_drain_timeout': 60,
               'gpu_remediation_validate_image': CHECK_IMAGE, 'gpu_remediation_validate_command': ['gpu-check'],
               'gpu_remediation_validate_namespace': NS, 'gpu_remediation_validate_timeout': 90,
               'gpu_remediation_validate_volumes': [volume],
               'gpu_remediation_validate_volume_mounts': [
                   {'name': 'nvml', 'mountPath': '/etc/nvml-sim', 'readOnly': True},
                   {'name': 'nvml', 'mountPath': '/var/lib/nvml-sim'}]})] + list(extra)
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    return proc.stdout


def recap(out):
    line = [x for x in out.splitlines() if x.startswith('rem-dp-host')][-1]
    return dict(kv.split('=') for kv in line.split(':', 1)[1].split())


def test_REM_11_REM_16_the_role_end_to_end_on_the_real_node(gpu_node, tmp_path):
    """The whole loop from ansible-playbook for a device-plugin pool: the doctor finds volatile uncorrectable ECC
    errors on one GPU through the simulator (no Xid: the plugin keeps it allocatable); the reader names the pods from
    the kubelet's checkpoint; the node is quarantined (taint, cordon) and only the pod holding that GPU is evicted; the
    lab's nvidia-smi resets it; the doctor finds it healthy; the validation pod on the repaired GPU passes; the GPU is
    released. Check mode before writes nothing; a re-run on the healthy node changes nothing."""
    core = gpu_node['core']
    for p in gpu_node['plugins']:
        p.stop()
    for pod in core.list_namespaced_pod(NS).items:
        core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
    wait('allocatable 0 with the plugin stopped', lambda: (
        core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == '0', 90)
    inv = json.loads(json.dumps(gpu_node['inv']))
    inv['gpus'][1].update(ecc_errors={'uncorrected_volatile': 2, 'uncorrected_aggregate': 2})
    bad, good = inv['gpus'][1]['uuid'], inv['gpus'][0]['uuid']
    (tmp_path / 'inventory.json').write_text(json.dumps(inv))
    os.symlink('nvml-state.json', str(tmp_path / 'state.json'))
    plugin = Plugin(tmp_path, gpu_node['state'], str(tmp_path / 'inventory.json'))
    gpu_node['plugins'].append(plugin)
    config, env = render('exclusive', {}, gpu_node['facts'])
    plugin.start(config, env)
    try:
        wait('nvidia.com/gpu allocatable %d' % GPUS, lambda: (
            core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == str(GPUS), 90)
    except AssertionError:
        raise AssertionError('allocatable %r\n%s' % (core.read_node(NAME).status.allocatable, plugin.tail()))
    held = dict(start_holder(core, n)[::-1] for n in ('hold-1', 'hold-2'))
    holder = dict((uuid, [n for n in ('hold-1', 'hold-2') if given_uuid(core, n) == uuid][0]) for uuid in held)
    assert sorted(holder) == sorted([bad, good]), holder

    dry = playbook(gpu_node, tmp_path, '--check', '--diff')
    assert recap(dry)['failed'] == '0', dry
    node = core.read_node(NAME)
    assert not node.spec.unschedulable and plan_record(node) is None
    assert phase(core, holder[bad]) == 'Running'

    out = playbook(gpu_node, tmp_path)
    assert recap(out)['failed'] == '0' and int(recap(out)['changed']) >= 3, out
    # only the holder of the failing GPU was evicted; the other runs on
    wait('pod %s evicted' % holder[bad], lambda: phase(core, holder[bad]) is None, 60)
    assert phase(core, holder[good]) == 'Running'
    node = core.read_node(NAME)
    assert not node.spec.unschedulable and [t.key for t in node.spec.taints or []] == [TAINT_KEY], node.spec.taints
    assert plan_record(node) is None
    reasons = [e.reason for e in core.list_namespaced_event('default', field_selector='involvedObject.name=%s' % NAME)
               .items if e.source and e.source.component == 'gpuops.k8s_gpu.gpu_remediation']
    assert 'GPUQuarantined' in reasons and 'GPUReleased' in reasons, reasons
    with open(tmp_path / 'nvml-state.json') as f:
        assert '"resets": 1' in f.read()
    # the validation pod ran on the node (the kubelet's events of its container) and is gone
    vname = 'gpuops-validate-%s-%s' % (NAME, bad.lower())
    started = [e.reason for e in core.list_namespaced_event(NS, field_selector='involvedObject.name=%s' % vname).items]
    assert 'Started' in started, started
    assert not [p for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith('gpuops-validate-')]

    again = playbook(gpu_node, tmp_path)
    assert recap(again)['changed'] == '0' and recap(again)['failed'] == '0', again
    delete_pod(core, holder[good])


def plan_record(node):
    return (node.metadata.annotations or {}).get('gpuops.io/gpu-remediation')


def test_REM_16_dra_validation_objects_are_accepted_by_the_real_api_server(gpu_node):
    """The DRA side of the validation (not run on a DRA node here): the ResourceClaim selecting one device by its uuid
    attribute with a toleration of the loop's device taint, and its pod, pass the real 1.37 API server's validation
    (server-side dry run: schema, CEL compilation, the pod's claim reference)."""
    from kubernetes import client
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import plan
    uuid = gpu_node['uuids'][0]
    claim, pod = plan.validation_objects({'uuid': uuid, 'kind': 'dra', 'device': ['gpu.nvidia.com', NAME, 'gpu-0']},
                                         NAME, NS, CHECK_IMAGE, ['gpu-check'])
    api = gpu_node['kube'].api()
    made = client.CustomObjectsApi(api).create_namespaced_custom_object(
        'resource.k8s.io', 'v1', NS, 'resourceclaims', claim, dry_run='All')
    exact = made['spec']['devices']['requests'][0]['exactly']
    assert exact['tolerations'][0]['key'] == 'gpuops.io/gpu-unhealthy' and uuid in exact['selectors'][0]['cel'][
        'expression'], made
    made_pod = client.CoreV1Api(api).create_namespaced_pod(NS, pod, dry_run='All')
    assert made_pod.spec.resource_claims[0].resource_claim_name == claim['metadata']['name']
    # a CEL expression that does not compile is refused by the same server (the dry run checks it)
    claim['spec']['devices']['requests'][0]['exactly']['selectors'][0]['cel']['expression'] = 'device.uuid =='
    with pytest.raises(client.ApiException) as exc:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            'resource.k8s.io', 'v1', NS, 'resourceclaims', claim, dry_run='All')
    assert exc.value.status == 422, exc.value
