"""Playbook migrate_to_dra (issue #40) across a mixed pool of TWO real lab nodes (conftest.real_node: kubelet +
containerd + runc each) on the shared 1.37 control plane, node by node, with user pods of several owners (row DRAX-11
of docs/conformance/dra-driver-nvidia-gpu.md):

* both nodes start in one device-plugin pool (exclusive; nvidia-device-plugin v0.19.1 on each node's simulated T4,
  the config the collection renders), each running a pod of a user DaemonSet (a node agent: no GPU); a bare pod asking
  ``nvidia.com/gpu: 1`` (no controller) runs on node 2, a Deployment's pod asking the same on node 1 (a
  PodDisruptionBudget maxUnavailable 1);
* run 1, batch 1 over both nodes, ``gpuops_migrate_drain_pods: all``: node 1 is cordoned, drained (its DaemonSet pod
  left, as kubectl drain --ignore-daemonsets), switched, NVIDIA's gpu-kubelet-plugin v0.5.0 publishes its slice,
  uncordoned, the Deployment's pod comes back on its DRA device (the container lists /dev/nvidia0); node 2's drain
  refuses the bare pod (as kubectl drain without --force: nothing would recreate it) and the move stops there, node 2
  cordoned on its pool, nothing evicted from it;
* run 2, the same with ``gpuops_migrate_force: true``, first in check mode (the plan: node 1 skip, node 2 migrate; no
  write of the playbook's user in the audit log), then for real: node 1 skipped, node 2 drained (the bare pod evicted: the drain
  asked), switched, uncordoned;
* run 3, the way back for node 1 alone.

After every run: the audit log's evictions of the playbook's own user are exactly the pods that left (no pod lost
that the drain did not ask for), the DaemonSet's two pods are the same pods (never evicted, never recreated), no pod
was refused by a kubelet, the Deployment's template is unchanged, and gpu_share_report counts each node's GPU once.
The plugins are host processes: a thread of this file starts and stops each node's two from that node's labels alone,
with the selectors the collection renders (as test_dra_migrate_node_real.py, the one-node run, does).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_migrate_pool_real.py
"""
from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
import types

import pytest

from conftest import KUBE, NODE_PY, gpu_extended_mapping, real_node, run_module, wait_until as wait

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dra_slices  # noqa: E402  (lab/kube)
import node as lab_node  # noqa: E402  (lab/node)
from dp_node_plugin import Plugin  # noqa: E402
from dra_node_plugin import DraPlugin  # noqa: E402
from test_dra_migrate_real import migrate as migrate_playbook  # noqa: E402
from test_gpu_sharing_stack_real import failures  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'oracles'))
from oracle_util import _collections_path, build_nvml_sim, probe_facts  # noqa: E402

SUFFIX = '%d' % os.getpid()
NODES = ['lab-drax-pool-%s-%d' % (SUFFIX, i) for i in (1, 2)]
NS = 'drax-pool-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-drax-pool-%s' % SUFFIX
DP_POOL, DRA_POOL = 'dp-p%s' % SUFFIX, 'dra-p%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
INVENTORY = 't4.json'
STRATEGY, POOL = 'gpuops.io/sharing-strategy', 'gpuops.io/sharing-pool'
USER = 'gpuops-drax-pool-%s' % SUFFIX
GROUP_LABEL = {'example.com/node-group': 'drax-pool-%s' % SUFFIX}
TOLERATE = [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}]
SHOW = 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; ls /dev | grep nvidia; echo done; sleep 3600'


def container(gpu):
    c = {'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never', 'command': ['sh', '-c', SHOW]}
    if gpu:
        c['resources'] = {'limits': {'nvidia.com/gpu': '1'}}
    return c


def pod_spec(gpu, **more):
    spec = {'hostNetwork': True, 'automountServiceAccountToken': False, 'terminationGracePeriodSeconds': 1,
            'tolerations': TOLERATE, 'containers': [container(gpu)]}
    spec.update(more)
    return spec


def render_pool(facts):
    """The collection's device-plugin pool on the two nodes: (config text of each node, container env, the device
    plugin DaemonSet's nodeSelector, each node's pool labels)."""
    _collections_path()
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
    out = render.render(dict(strategy='exclusive', pool=DP_POOL, nodes=NODES,
                             facts=dict((n, facts) for n in NODES)))
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'
          and m['metadata']['name'].startswith('nvidia-device-plugin-')][0]
    ctr = [c for c in ds['spec']['template']['spec']['containers'] if c['name'] == 'nvidia-device-plugin-ctr'][0]
    env = dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e)
    configs = dict((n, cm['data'][out['node_labels'][n]['nvidia.com/device-plugin.config']]) for n in NODES)
    return configs, env, ds['spec']['template']['spec']['nodeSelector'], out['node_labels']


class DaemonSets(threading.Thread):
    """The DaemonSet controller of the two plugins on each node: a plugin runs on a node while the node's labels match
    its selector (the device plugin's nodeSelector, the DRA chart's gpuops.io/sharing-strategy In [dra]), only then."""

    def __init__(self, core, plugins, dp_selector):
        super().__init__(daemon=True)
        self.core, self.plugins = core, plugins     # {node: (Plugin, config text, env, DraPlugin)}
        self.dp_selects = lambda labels: all(labels.get(k) == v for k, v in dp_selector.items())
        self.stop, self.error, self.events = threading.Event(), None, []

    def run(self):
        from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import common
        assert common.STRATEGY_LABEL == STRATEGY   # the default label (the pools here do not change it)
        while not self.stop.is_set():
            try:
                for name, (dp, config, env, dra) in self.plugins.items():
                    labels = self.core.read_node(name).metadata.labels or {}
                    dp_on = dp.proc is not None and dp.proc.poll() is None
                    if self.dp_selects(labels) and not dp_on:
                        dp.start(config, env)
                        self.events.append((name, 'device-plugin started'))
                    elif not self.dp_selects(labels) and dp_on:
                        dp.stop()
                        self.events.append((name, 'device-plugin stopped'))
                    dra_on = labels.get(STRATEGY) == 'dra'
                    if dra_on and not dra.running():
                        dra.start()
                        self.events.append((name, 'dra-plugin started'))
                    elif not dra_on and dra.running():
                        dra.stop()
                        self.events.append((name, 'dra-plugin stopped'))
            except Exception as exc:  # reported by the test
                self.error = exc
            self.stop.wait(0.5)

    def halt(self):
        self.stop.set()
        self.join(10)
        for dp, _config, _env, dra in self.plugins.values():
            dp.stop()
            dra.stop()


class Pods(threading.Thread):
    """Every pod of the namespace seen while the test runs ({uid: (name, owner kind)}), and every pod that ended
    Failed without being deleted (a pod a kubelet refused, e.g. UnexpectedAdmissionError)."""

    def __init__(self, core):
        super().__init__(daemon=True)
        self.core, self.stop, self.seen, self.failed, self.error = core, threading.Event(), {}, {}, None

    def sample(self):
        for p in self.core.list_namespaced_pod(NS).items:
            refs = p.metadata.owner_references or []
            self.seen[p.metadata.uid] = (p.metadata.name, refs[0].kind if refs else None)
            if p.status.phase == 'Failed' and not p.metadata.deletion_timestamp:
                self.failed[p.metadata.name] = (p.status.reason, p.status.message)

    def run(self):
        while not self.stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # reported by the test
                self.error = exc
            self.stop.wait(0.3)


@pytest.fixture(scope='module')
def lab(kube_real, tmp_path_factory, collections_path):
    from kubernetes import client
    sys.path.insert(0, collections_path)
    api = kube_real.api()
    core, apps, policy, co = (client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api),
                              client.CustomObjectsApi(api))
    work = tmp_path_factory.mktemp('drax-pool')
    inventory = dra_slices.inventory_path(INVENTORY)
    build_nvml_sim()
    facts = probe_facts(inventory, work / 'probe-state.json')
    configs, env, selector, labels = render_pool(facts)
    with real_node(kube_real, tmp_path_factory.mktemp('node1'), NODES[0], TAINT_KEY, nvidia_devices=1,
                   labels=['%s=%s' % kv for kv in sorted(dict(labels[NODES[0]], **GROUP_LABEL).items())]) as s1, \
            real_node(kube_real, tmp_path_factory.mktemp('node2'), NODES[1], TAINT_KEY, nvidia_devices=1,
                      labels=['%s=%s' % kv for kv in sorted(dict(labels[NODES[1]], **GROUP_LABEL).items())]) as s2:
        plugins = {}
        for name, state in zip(NODES, (s1, s2)):
            # the pool labels as gpu_node_labels records them (the switch keeps what it recorded)
            record = dict((k, {'value': v, 'previous': None}) for k, v in labels[name].items())
            core.patch_node(name, {'metadata': {'annotations': {
                'gpuops.io/managed-labels': json.dumps(record, sort_keys=True)}}})
            (work / name / 'dp').mkdir(parents=True)
            (work / name / 'dra').mkdir()
            plugins[name] = (Plugin(work / name / 'dp', state, inventory), configs[name], env,
                             DraPlugin(kube_real, work / name / 'dra', state, name, INVENTORY))
        ds = DaemonSets(core, plugins, selector)
        gpu_extended_mapping(co)  # the lab's shared class (conftest: why one, never deleted)
        core.create_namespace({'metadata': {'name': NS}})
        pods = Pods(core)
        try:
            wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
                NS, field_selector='metadata.name=default').items, 60)
            ds.start()
            pods.start()
            apps.create_namespaced_daemon_set(NS, {
                'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'metadata': {'name': 'node-agent'},
                'spec': {'selector': {'matchLabels': {'app': 'node-agent'}}, 'template': {
                    'metadata': {'labels': {'app': 'node-agent'}},
                    'spec': pod_spec(False, nodeSelector=GROUP_LABEL)}}})
            # the bare pod first, on node 2 (its GPU); then the Deployment's pod finds node 1's
            core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'bare-gpu'},
                                            'spec': pod_spec(True, nodeSelector={'kubernetes.io/hostname': NODES[1]})})
            for name in NODES:
                wait('nvidia.com/gpu allocatable 1 on %s' % name, lambda n=name: (
                    core.read_node(n).status.allocatable or {}).get('nvidia.com/gpu') == '1', 120)
            wait('the bare pod Running', lambda: core.read_namespaced_pod('bare-gpu', NS).status.phase == 'Running',
                 120)
            policy.create_namespaced_pod_disruption_budget(NS, {
                'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget', 'metadata': {'name': 'gpu-app'},
                'spec': {'maxUnavailable': 1, 'selector': {'matchLabels': {'app': 'gpu-app'}}}})
            apps.create_namespaced_deployment(NS, {
                'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': 'gpu-app'},
                'spec': {'replicas': 1, 'selector': {'matchLabels': {'app': 'gpu-app'}}, 'template': {
                    'metadata': {'labels': {'app': 'gpu-app'}}, 'spec': pod_spec(True, nodeSelector=GROUP_LABEL)}}})
            with open(inventory) as f:
                uuid = json.load(f)['gpus'][0]['uuid']
            yield {'kube': kube_real, 'core': core, 'apps': apps, 'co': co, 'ds': ds, 'pods': pods, 'labels': labels,
                   'uuid': uuid, 'user': types.SimpleNamespace(kubeconfig=kube_real.user(USER))}
        finally:
            try:
                pods.stop.set()
                core.delete_namespace(NS)
                wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 90)
            finally:
                ds.halt()
                for name in NODES:
                    for s in dra_slices.slices_of(api, name):
                        co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])


def migrate(lab, tmp_path, source, target, nodes, *args):
    """The playbook as this file's own user (its writes are found in the audit log by that name); (rc, json)."""
    run = tmp_path / ('run-%d' % len(list(tmp_path.iterdir())))
    run.mkdir()
    return migrate_playbook({'kube': lab['user']}, run, source, target, *args, nodes=nodes, ready_timeout=120)


def evicted(lab, start, end):
    """The pods the playbook's user evicted between two audit marks (names; each eviction the API server allowed)."""
    out = []
    for e in lab['kube'].events(start, end, user=USER):
        ref = e.get('objectRef') or {}
        if (e['verb'], ref.get('resource'), ref.get('subresource')) == ('create', 'pods', 'eviction'):
            assert ref.get('namespace') == NS, e
            if e.get('responseStatus', {}).get('code') in (200, 201):
                out.append(ref['name'])
    return sorted(out)


def deleted_by_user(lab, start, end):
    return [e['objectRef'].get('name') for e in lab['kube'].events(start, end, user=USER)
            if e['verb'] == 'delete' and (e.get('objectRef') or {}).get('resource') == 'pods']


def live(lab):
    """{name: pod} of the namespace's pods not being deleted."""
    return dict((p.metadata.name, p) for p in lab['core'].list_namespaced_pod(NS).items
                if not p.metadata.deletion_timestamp)


def shown(lab, pod):
    """The device lines the pod's container printed (its NVIDIA_VISIBLE_DEVICES line and /dev entries), None until
    it printed them all."""
    try:
        log = lab['core'].read_namespaced_pod_log(pod.metadata.name, NS)
    except Exception:  # pylint: disable=broad-except  (the container just started)
        return None
    return log.splitlines()[:-1] if 'done' in log else None


def app_running(lab, node, dra):
    """The Deployment's one pod Running on ``node``, backed by DRA (``dra``) or by the device plugin, its container
    past its device listing: (pod, lines); None until then."""
    pods = [p for p in live(lab).values() if (p.metadata.labels or {}).get('app') == 'gpu-app']
    if len(pods) != 1 or pods[0].status.phase != 'Running' or pods[0].spec.node_name != node:
        return None
    if (pods[0].status.extended_resource_claim_status is not None) != dra:
        return None
    lines = shown(lab, pods[0])
    return (pods[0], lines) if lines is not None else None


def agents(lab):
    """{node: uid} of the DaemonSet's Running pods."""
    return dict((p.spec.node_name, p.metadata.uid) for p in live(lab).values()
                if (p.metadata.labels or {}).get('app') == 'node-agent' and p.status.phase == 'Running')


def counted(lab, collections_path):
    """{node: how many times gpu_share_report counts its GPU}: the device plugin's nvidia.com/gpu it shows the node
    advertising (an exclusive pool: one per GPU) plus the DRA devices it lists for the node; and the report."""
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_share_report',
                     json.dumps({'kubeconfig': lab['kube'].kubeconfig, 'namespace': NS}))
    assert not res.get('failed'), res
    out = {}
    for n in res['nodes']:
        if n['name'] in NODES:
            dp = (n['resources'].get('nvidia.com/gpu') or {}).get('allocatable') or 0
            out[n['name']] = dp + sum(((n.get('dra') or {}).get('devices') or {}).values())
    return out, res


def view(lab, name):
    n = lab['core'].read_node(name)
    labels = n.metadata.labels or {}
    return (labels.get(STRATEGY), labels.get(POOL), bool(n.spec.unschedulable),
            (n.metadata.annotations or {}).get('gpuops.io/strategy-migration'))


def claim_device(lab, pod):
    st = pod.status.extended_resource_claim_status
    assert [(m.container_name, m.resource_name) for m in st.request_mappings] == [('main', 'nvidia.com/gpu')]
    claim = lab['co'].get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims', st.resource_claim_name)
    return [(r['driver'], r['pool'], r['device']) for r in claim['status']['allocation']['devices']['results']]


def check_nothing_lost(lab, before, start, end):
    """Every pod that was live at ``before`` ({name: uid}) and is not now was evicted by the playbook between the two
    marks; the playbook deleted no pod; no pod was refused by a kubelet. Returns the evicted names."""
    out = evicted(lab, start, end)
    now = dict((n, p.metadata.uid) for n, p in live(lab).items())
    gone = sorted(n for n, uid in before.items() if now.get(n) != uid)
    assert gone == out, (gone, out)
    assert deleted_by_user(lab, start, end) == []
    assert lab['pods'].failed == {} and lab['pods'].error is None, (lab['pods'].failed, lab['pods'].error)
    assert lab['ds'].error is None, lab['ds'].error
    return out


def test_DRAX_11_pool_of_two_real_nodes_moves_node_by_node_pods_kept(lab, tmp_path, collections_path):
    t_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    core, apps, kube = lab['core'], lab['apps'], lab['kube']
    n1, n2 = NODES
    dp = {'pool': DP_POOL, 'strategy': 'exclusive',
          'labels': dict((k, v) for k, v in lab['labels'][n1].items() if k not in (STRATEGY, POOL))}
    dra = {'pool': DRA_POOL, 'strategy': 'dra'}
    took = {}

    # 0. the device-plugin pool: the Deployment's pod on node 1, the bare pod on node 2, an agent on each
    first, lines = wait('the Deployment pod on node 1 (device plugin)', lambda: app_running(lab, n1, False), 120)
    assert lines[0] == 'NVIDIA_VISIBLE_DEVICES=%s' % lab['uuid'], lines
    agents0 = wait('the DaemonSet pod Running on each node', lambda: (lambda a: a if sorted(a) == NODES else None)(
        agents(lab)), 120)
    bare = core.read_namespaced_pod('bare-gpu', NS)
    assert bare.spec.node_name == n2 and bare.status.phase == 'Running'
    template = apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict()
    assert counted(lab, collections_path)[0] == {n1: 1, n2: 1}

    # 1. batch 1 over both nodes: node 1 moves; node 2's drain refuses the bare pod and the move stops there
    before = dict((n, p.metadata.uid) for n, p in live(lab).items())
    start = kube.mark()
    t = time.time()
    rc, doc = migrate(lab, tmp_path, dp, dra, NODES, '-e', '{"gpuops_migrate_drain_pods": "all"}')
    took['run 1 (node 1 moved, node 2 refused)'] = time.time() - t
    assert rc != 0
    msgs = ' '.join(str(m) for _t, m in failures(doc))
    assert 'Pods that declare no controller' in msgs and '%s/bare-gpu' % NS in msgs and 'gpuops_migrate_force' in msgs, \
        failures(doc)
    assert view(lab, n1) == ('dra', DRA_POOL, False, None)
    assert view(lab, n2) == ('exclusive', DP_POOL, True, DRA_POOL)
    pod, lines = wait('the Deployment pod back on node 1, on a DRA device', lambda: app_running(lab, n1, True), 120)
    end = kube.mark()
    assert check_nothing_lost(lab, before, start, end) == [first.metadata.name]
    assert claim_device(lab, pod) == [(DRIVER, n1, 'gpu-0')]
    assert 'nvidia0' in lines[1:], lines
    assert agents(lab) == agents0
    assert core.read_namespaced_pod('bare-gpu', NS).metadata.uid == bare.metadata.uid
    counts, res = counted(lab, collections_path)
    assert counts == {n1: 1, n2: 1}, counts
    assert [(c['extended_resources'], [p['name'] for p in c['pods']]) for c in res['dra']['claims']] == [
        (['nvidia.com/gpu'], [pod.metadata.name])]

    # 2. resumed, the bare pod's eviction allowed: check mode shows node 1 skipped and node 2 to move, writes nothing;
    # then node 1 is skipped and node 2 moves
    resume = '{"gpuops_migrate_drain_pods": "all", "gpuops_migrate_force": true}'
    before = dict((n, p.metadata.uid) for n, p in live(lab).items())
    start = kube.mark()
    rc, doc = migrate(lab, tmp_path, dp, dra, NODES, '--check', '-e', resume)
    assert rc == 0, failures(doc)
    [plan] = [r.get('msg') for play in doc['plays'] for t in play['tasks'] if t['task']['name'] == 'Show the plan'
              for r in t['hosts'].values()]
    assert [line.split(': ')[:2] for line in plan] == [[n1, 'skip'], [n2, 'migrate']], plan
    assert kube.writes(start, kube.mark(), user=USER) == []
    t = time.time()
    rc, doc = migrate(lab, tmp_path, dp, dra, NODES, '-e', resume)
    took['run 2 (node 2 moved)'] = time.time() - t
    assert rc == 0, failures(doc)
    assert [view(lab, n) for n in NODES] == [('dra', DRA_POOL, False, None)] * 2
    wait('node 2 on DRA: its slice', lambda: dra_slices.slices_of(kube.api(), n2), 60)
    end = kube.mark()
    assert check_nothing_lost(lab, before, start, end) == ['bare-gpu']
    assert app_running(lab, n1, True)[0].metadata.uid == pod.metadata.uid
    assert agents(lab) == agents0
    assert counted(lab, collections_path)[0] == {n1: 1, n2: 1}

    # 3. the way back for node 1 alone: the Deployment's pod goes where a GPU is (node 2's DRA device is free)
    before = dict((n, p.metadata.uid) for n, p in live(lab).items())
    start = kube.mark()
    t = time.time()
    rc, doc = migrate(lab, tmp_path, dra, dp, [n1], '-e', '{"gpuops_migrate_drain_pods": "all"}')
    took['run 3 (node 1 back)'] = time.time() - t
    assert rc == 0, failures(doc)
    assert view(lab, n1) == ('exclusive', DP_POOL, False, None)
    assert view(lab, n2) == ('dra', DRA_POOL, False, None)

    def back():
        for node, on_dra in ((n1, False), (n2, True)):
            got = app_running(lab, node, on_dra)
            if got:
                return got
        return None
    pod3, lines = wait('the Deployment pod Running again', back, 120)
    end = kube.mark()
    assert check_nothing_lost(lab, before, start, end) == [pod.metadata.name]
    if pod3.spec.node_name == n1:
        assert lines[0] == 'NVIDIA_VISIBLE_DEVICES=%s' % lab['uuid'], lines
    else:
        assert claim_device(lab, pod3) == [(DRIVER, n2, 'gpu-0')]
        assert 'nvidia0' in lines[1:], lines
    assert agents(lab) == agents0
    assert apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict() == template
    assert counted(lab, collections_path)[0] == {n1: 1, n2: 1}
    events = lab['ds'].events
    # the device plugin's start and the DRA plugin's stop of one label switch come in one pass, in either order
    assert sorted(e for n, e in events if n == n1) == sorted([
        'device-plugin started', 'device-plugin stopped', 'dra-plugin started', 'dra-plugin stopped',
        'device-plugin started']), events
    assert sorted(e for n, e in events if n == n2) == ['device-plugin started', 'device-plugin stopped',
                                                      'dra-plugin started'], events
    # every pod of the test ever seen: the pods of the Deployment, the DaemonSet's two, the bare one
    lab['pods'].sample()
    kinds = sorted(set(k for _n, k in lab['pods'].seen.values()), key=str)
    assert kinds == sorted(['ReplicaSet', 'DaemonSet', None], key=str), lab['pods'].seen
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print('%s; test %.1f s wall, %.1f CPU-s of its children' % (
        ', '.join('%s %.1f s' % kv for kv in took.items()), time.time() - t0,
        cpu.ru_utime + cpu.ru_stime - t_cpu.ru_utime - t_cpu.ru_stime))
