"""Playbook migrate_to_dra (issue #40) on the lab's real 1.37 control plane with kwok nodes: a Deployment whose pods
ask plain ``nvidia.com/gpu: 1`` moves with its nodes from a device-plugin pool to a dra pool, node by node, and back,
its pod template untouched, no replica lost (row DRAX-08 of docs/conformance/dra-driver-nvidia-gpu.md).

* Two kwok nodes of this file's own (named with the pid, tainted with a key only its pods tolerate) start on an
  exclusive pool: the pool labels as gpu_node_labels records them, one device-plugin GPU each - the recorded T4 node
  (gpu_kwok_nodes: the labels the node layer writes, and allocatable nvidia.com/gpu 1 as NVIDIA's device plugin
  published it on a real lab node of that T4, shape t4x1). They used to be a time-slicing pool whose nodes advertised
  one GPU and no nvidia.com/gpu.replicas label: a state no time-slicing pool publishes (its plugin shares each GPU
  replicas ways, GFD says so; DRAX-10's node is such a pool, recorded). A PodDisruptionBudget (maxUnavailable 1) covers the Deployment's two replicas; the drain goes
  through the Eviction API, so the real disruption controller and API server decide.
* kwok runs no DaemonSet, so a thread of this test does what the two plugins do when a node's pool labels switch:
  on a node labelled strategy dra it takes the device plugin's GPU away (allocatable 0, as the kubelet shows once the
  device plugin is gone: test_node_daemonset_real and test_node_strategies_real see it on a real node) and publishes
  the node's ResourceSlice (lab/kube/dra_slices.py, the Python stand-in checked
  against NVIDIA's gpu-kubelet-plugin v0.5.0 in test_dra_real.py); on a node back on the device-plugin pool it deletes
  the slice and gives the GPU back (the recorded resources again).
* nvidia.com/gpu is mapped by a DeviceClass as the chart's gpu.nvidia.com renders it (deviceclass-gpu.yaml, v0.5.0),
  the lab's one shared class (conftest.gpu_extended_mapping: never deleted, kubernetes#141103). The real scheduler backs the
  pods' plain requests with the slices' devices there (DRAX-03).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_migrate_real.py
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import (ANSIBLE_TESTS_CFG, KUBE, PLAY_TIMEOUT, VENV_BIN, ansible_cli, gpu_extended_mapping, play_json,
                      wait_until as wait)

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dra_slices  # noqa: E402  (lab/kube)
from test_gpu_sharing_stack import T4  # noqa: E402
from test_gpu_sharing_stack_real import failures  # noqa: E402
from gpu_kwok_nodes import agents_node, agents_published, bare_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SUFFIX = '%d' % os.getpid()
NODES = ['drax-mig-%s-%d' % (SUFFIX, i) for i in (1, 2)]
NS = 'drax-mig-%s' % SUFFIX
TAINT = 'gpuops.io/test-drax-mig-%s' % SUFFIX
SELECT = {'gpuops.io/test-drax-mig': SUFFIX}
TS_POOL, DRA_POOL = 'ts-%s' % SUFFIX, 'dra-%s' % SUFFIX
TS = {'pool': TS_POOL, 'strategy': 'time-slicing', 'labels': {'nvidia.com/device-plugin.config': TS_POOL}}
EX_POOL = 'ex-%s' % SUFFIX
EX = {'pool': EX_POOL, 'strategy': 'exclusive', 'labels': {}}
# the nodes DRAX-08 moves: the recorded T4 (lab/node/recordings/gpu-nodes.json) and what NVIDIA's device plugin
# published on it, without a config (the exclusive pool's plugin)
NODE_SHAPE = 't4x1'
PUBLISHED = agents_published(NODE_SHAPE, 'exclusive')
assert PUBLISHED == {'capacity': {'nvidia.com/gpu': '1'}, 'allocatable': {'nvidia.com/gpu': '1'}}, PUBLISHED  # expected, not written
DRA = {'pool': DRA_POOL, 'strategy': 'dra'}
GROUP, VERSION = 'resource.k8s.io', 'v1'
# the time-slicing node DRAX-10 moves: as a real lab node published it (lab/node/recordings/gpu-nodes.json)
SHARED_SHAPE = 'a100x2-time-slicing'
STRATEGY, POOL = 'gpuops.io/sharing-strategy', 'gpuops.io/sharing-pool'


def pool_labels(side):
    out = {STRATEGY: side['strategy'], POOL: side['pool']}
    out.update(side['labels'] if 'labels' in side else {'nvidia.com/gpu.deploy.device-plugin': 'false'})
    return out


class Plugins(threading.Thread):
    """What the device plugin DaemonSet and the DRA kubelet plugin do on a node whose pool labels switched."""

    def __init__(self, api, state_dir):
        super().__init__(daemon=True)
        self.api, self.state_dir, self.stop, self.error = api, state_dir, threading.Event(), None
        self.hold = set()   # nodes whose DRA plugin does not come (a stopped move)

    def run(self):
        from kubernetes import client
        core = client.CoreV1Api(self.api)
        while not self.stop.is_set():
            try:
                for name in NODES:
                    n = core.read_node(name)
                    dra = (n.metadata.labels or {}).get(STRATEGY) == 'dra'
                    mine = dict((k, (n.status.allocatable or {}).get(k, '0')) for k in PUBLISHED['allocatable'])
                    have = dra_slices.slices_of(self.api, name)
                    gone = dict.fromkeys(PUBLISHED['allocatable'], '0')
                    if dra and mine != gone:
                        core.patch_node_status(name, {'status': {'allocatable': gone}})
                    if dra and not have and name not in self.hold:
                        dra_slices.publish(self.api, name, 't4.json', self.state_dir)
                    if not dra and have:
                        for s in have:
                            client.CustomObjectsApi(self.api).delete_cluster_custom_object(
                                GROUP, VERSION, 'resourceslices', s['metadata']['name'])
                    if not dra and mine != PUBLISHED['allocatable']:
                        core.patch_node_status(name, {'status': dict(PUBLISHED)})
            except Exception as exc:  # reported by the test
                self.error = exc
            self.stop.wait(0.5)


@pytest.fixture(scope='module')
def lab(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    co = client.CustomObjectsApi(api)
    for name in NODES:
        labels = dict(SELECT, **pool_labels(EX))
        # the recorded T4 node before its stack (its labels the node layer's, gpu_kwok_nodes.bare_node); the Plugins
        # thread publishes what the exclusive pool's device plugin published on it
        body = bare_node(name, NODE_SHAPE, facts=T4, labels=labels)
        record = dict((k, {'value': v, 'previous': None}) for k, v in labels.items() if k != 'kubernetes.io/hostname'
                      and k in pool_labels(EX))
        body['metadata']['annotations']['gpuops.io/managed-labels'] = json.dumps(record, sort_keys=True)
        body['spec'] = {'taints': [{'key': TAINT, 'effect': 'NoSchedule'}]}
        core.create_node(body)
    gpu_extended_mapping(co)  # the lab's shared class (conftest: why one, never deleted)
    core.create_namespace({'metadata': {'name': NS}})
    wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
        NS, field_selector='metadata.name=default').items, 60)
    plugins = Plugins(api, str(tmp_path_factory.mktemp('nvml')))
    plugins.start()
    app = {'app': 'drax-mig'}
    policy.create_namespaced_pod_disruption_budget(NS, {
        'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget', 'metadata': {'name': 'gpu-app'},
        'spec': {'maxUnavailable': 1, 'selector': {'matchLabels': app}}})
    apps.create_namespaced_deployment(NS, {
        'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': 'gpu-app'},
        'spec': {'replicas': 2, 'selector': {'matchLabels': app}, 'template': {
            'metadata': {'labels': app},
            'spec': {'nodeSelector': SELECT, 'tolerations': [{'key': TAINT, 'operator': 'Exists'}],
                     'terminationGracePeriodSeconds': 0,
                     'containers': [{'name': 'main', 'image': 'registry.invalid/cuda-app:1',
                                     'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}}}})
    try:
        yield {'kube': kube_real, 'core': core, 'apps': apps, 'co': co, 'plugins': plugins}
    finally:
        plugins.stop.set()
        plugins.join(5)
        core.delete_namespace(NS)
        wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
        for name in NODES:
            for s in dra_slices.slices_of(api, name):
                co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])
            core.delete_node(name)


def migrate(lab, tmp_path, source, target, *args, nodes=None, ready_timeout=60):
    """playbooks/migrate_to_dra.yml from ``source`` to ``target`` over ``nodes`` (default NODES); (rc, json)."""
    inv = tmp_path / 'inventory.yml'
    inv.write_text(yaml.safe_dump({'all': {'hosts': dict((n, {}) for n in nodes or NODES), 'vars': {
        'ansible_connection': 'local', 'ansible_python_interpreter': str(Path(VENV_BIN) / 'python')}}}))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK='json', ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_NOCOLOR='1',
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / 'build' / 'collections'), ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG,
               PATH='%s:%s' % (VENV_BIN, os.environ.get('PATH', '')))
    extra = {'gpuops_node_hosts': 'all', 'gpuops_kubeconfig': lab['kube'].kubeconfig, 'gpuops_migrate_from': source,
             'gpuops_migrate_to': target, 'gpuops_migrate_poll_interval': 1, 'gpuops_migrate_drain_timeout': 120,
             'gpuops_migrate_ready_timeout': ready_timeout}
    p = ansible_cli([str(Path(VENV_BIN) / 'ansible-playbook'), '-i', str(inv),
                        str(ROOT / 'playbooks' / 'migrate_to_dra.yml'), '-e', json.dumps(extra)] + list(args),
                       cwd=tmp_path, env=env, timeout=PLAY_TIMEOUT)
    return p.returncode, play_json(p)


def nodes_state(lab):
    out = {}
    for name in NODES:
        n = lab['core'].read_node(name)
        labels = n.metadata.labels or {}
        out[name] = {'labels': dict((k, labels.get(k)) for k in (STRATEGY, POOL, 'nvidia.com/device-plugin.config',
                                                                  'nvidia.com/gpu.deploy.device-plugin')),
                     'unschedulable': bool(n.spec.unschedulable),
                     'mark': (n.metadata.annotations or {}).get('gpuops.io/strategy-migration'),
                     'rv': n.metadata.resource_version}
    return out


def app_pods(lab):
    return [p for p in lab['core'].list_namespaced_pod(NS, label_selector='app=drax-mig').items
            if not p.metadata.deletion_timestamp]


def running_on(lab, dra):
    """The Deployment's two pods Running on the two nodes, each backed by DRA (``dra``) or by the device plugin."""
    pods = app_pods(lab)
    if len(pods) != 2 or any(p.status.phase != 'Running' for p in pods):
        return None
    if sorted(p.spec.node_name for p in pods) != NODES:
        return None
    if any((p.status.extended_resource_claim_status is not None) != dra for p in pods):
        return None
    return pods


def test_DRAX_10_a_move_that_holds_fewer_pods_is_refused_before_anything_changes(lab, tmp_path):
    """A node of the time-slicing pool whose device plugin shares each GPU N ways - the node a real lab node recorded
    with the collection's time-slicing DaemonSet (gpu_kwok_nodes.agents_node, shape a100x2-time-slicing: 2 A100s,
    GFD's nvidia.com/gpu.replicas=3, nvidia.com/gpu 6): under DRA the same pods get one GPU each (6 -> 2) - the
    playbook refuses at its plan, naming the numbers, and writes nothing to the node (labels, annotations, cordon,
    taints); with gpuops_migrate_accept_capacity_loss in check mode the plan shows the accepted loss and still writes
    nothing."""
    name = 'drax-mig-%s-shared' % SUFFIX
    labels = pool_labels(TS)
    body = agents_node(name, SHARED_SHAPE, 'time-slicing', labels=labels)
    replicas = int(body['metadata']['labels']['nvidia.com/gpu.replicas'])
    gpus = int(body['status']['allocatable']['nvidia.com/gpu'])
    assert (replicas, gpus, body['metadata']['labels']['nvidia.com/gpu.count']) == (3, 6, '2'), body
    body['metadata']['annotations']['gpuops.io/managed-labels'] = json.dumps(
        dict((k, {'value': v, 'previous': None}) for k, v in labels.items()), sort_keys=True)
    body['spec'] = {'taints': [{'key': TAINT, 'effect': 'NoSchedule'}]}
    lab['core'].create_node(body)
    try:
        def seen():
            # what the playbook would write (the controllers add beta.kubernetes.io/os and the not-ready taint, kwok
            # updates the status)
            n = lab['core'].read_node(name)
            ours = ('gpuops.io/', 'nvidia.com/')
            return ({k: v for k, v in (n.metadata.labels or {}).items() if k.startswith(ours)},
                    {k: v for k, v in (n.metadata.annotations or {}).items() if k.startswith(ours)},
                    n.spec.unschedulable, [t.key for t in n.spec.taints or [] if t.key.startswith(ours)])

        before = seen()
        rc, doc = migrate(lab, tmp_path, TS, DRA, nodes=[name])
        assert rc != 0
        [(task, msg)] = failures(doc)
        assert task == 'Refuse the move before anything changes', (task, msg)
        assert ('node %s shares each GPU %d ways on pool %s (nvidia.com/gpu.replicas=%d): nvidia.com/gpu %d'
                % (name, replicas, TS_POOL, replicas, gpus) in msg and 'the same pods get %d ' % (gpus // replicas)
                in msg), msg
        rc, doc = migrate(lab, tmp_path, TS, DRA, '--check', '-e', 'gpuops_migrate_accept_capacity_loss=true',
                          nodes=[name])
        assert rc == 0, failures(doc)
        shown = [r.get('msg') for play in doc['plays'] for t in play['tasks'] if t['task']['name'] == 'Show the plan'
                 for r in t['hosts'].values()]
        assert shown[0] == ['%s: migrate: pool %s (time-slicing) -> pool %s (dra), nvidia.com/gpu %d -> %d pods '
                            '(accepted)' % (name, TS_POOL, DRA_POOL, gpus, gpus // replicas)], shown
        # nothing written by the playbook (kwok's own status updates change the resourceVersion)
        assert seen() == before and not before[2]
    finally:
        lab['core'].delete_node(name)


def test_DRAX_13_a_daemonset_pod_holding_a_gpu_stops_the_move_before_anything_is_written(lab, tmp_path):
    """A node of the exclusive pool (the recorded T4 with its device plugin's nvidia.com/gpu 1) runs the pod of a user
    DaemonSet that asks nvidia.com/gpu: 1 - placed by the real DaemonSet controller and scheduler. The drain would keep
    it on its GPU while the DRA driver publishes that GPU: the move stops at the node, naming the pod and its
    DaemonSet, and writes nothing to the node (not marked, not cordoned, labels unchanged), in check mode too; with
    gpuops_migrate_accept_daemonset_gpus (in check mode) the move goes on and the pod is the same pod."""
    from kubernetes import client
    core, apps = lab['core'], lab['apps']
    name = 'drax-mig-%s-ds' % SUFFIX
    labels = dict(pool_labels(EX), **{'gpuops.io/test-drax13': SUFFIX})
    body = agents_node(name, NODE_SHAPE, 'exclusive', labels=labels)
    assert body['status']['allocatable'].get('nvidia.com/gpu') == '1', body['status']
    body['metadata']['annotations']['gpuops.io/managed-labels'] = json.dumps(
        dict((k, {'value': v, 'previous': None}) for k, v in pool_labels(EX).items()), sort_keys=True)
    body['spec'] = {'taints': [{'key': TAINT, 'effect': 'NoSchedule'}]}
    core.create_node(body)
    ds = 'gpu-agent'
    try:
        core.patch_node_status(name, {'status': dict(PUBLISHED)})
        sel = {'app': 'drax13'}
        apps.create_namespaced_daemon_set(NS, {'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'metadata': {'name': ds},
                                               'spec': {'selector': {'matchLabels': sel}, 'template': {
                                                   'metadata': {'labels': sel},
                                                   'spec': {'nodeSelector': {'gpuops.io/test-drax13': SUFFIX},
                                                            'tolerations': [{'key': TAINT, 'operator': 'Exists'}],
                                                            'terminationGracePeriodSeconds': 0,
                                                            'containers': [{'name': 'main',
                                                                            'image': 'registry.invalid/gpu-agent:1',
                                                                            'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}}}})

        def running():
            pods = [p for p in core.list_namespaced_pod(NS, label_selector='app=drax13').items
                    if p.spec.node_name == name and p.status.phase == 'Running']
            return pods[0] if pods else None

        agent = wait('the DaemonSet pod Running on its GPU', running, 60)

        def seen():
            n = core.read_node(name)
            ours = ('gpuops.io/', 'nvidia.com/')
            return ({k: v for k, v in (n.metadata.labels or {}).items() if k.startswith(ours)},
                    {k: v for k, v in (n.metadata.annotations or {}).items() if k.startswith(ours)},
                    n.spec.unschedulable, [t.key for t in n.spec.taints or [] if t.key.startswith(ours)])

        before = seen()
        for args in ([], ['--check']):
            rc, doc = migrate(lab, tmp_path, EX, DRA, *args, nodes=[name])
            assert rc != 0, args
            msgs = ' '.join(str(m) for _t, m in failures(doc))
            assert ('%s/%s (DaemonSet %s/%s) holds nvidia.com/gpu' % (NS, agent.metadata.name, NS, ds) in msgs
                    and 'not cordoned' in msgs and 'gpuops_migrate_accept_daemonset_gpus' in msgs), failures(doc)
            assert seen() == before and not before[2], (args, seen())
        rc, doc = migrate(lab, tmp_path, EX, DRA, '--check', '-e', 'gpuops_migrate_accept_daemonset_gpus=true',
                          nodes=[name])
        assert rc == 0, failures(doc)
        assert seen() == before
        assert running().metadata.uid == agent.metadata.uid
    finally:
        try:
            apps.delete_namespaced_daemon_set(ds, NS)
        except client.ApiException:
            pass
        core.delete_node(name)


def test_DRAX_08_migrate_node_by_node_and_back_no_pod_lost(lab, tmp_path):
    apps = lab['apps']
    first = wait('the Deployment on the device plugin GPUs', lambda: running_on(lab, dra=False), 90)
    template = apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict()
    before = nodes_state(lab)

    # check mode: the plan, nothing written
    rc, doc = migrate(lab, tmp_path, EX, DRA, '--check')
    assert rc == 0, failures(doc)
    shown = [r.get('msg') for play in doc['plays'] for t in play['tasks'] if t['task']['name'] == 'Show the plan'
             for r in t['hosts'].values()]
    assert shown == [['%s: migrate: pool %s (exclusive) -> pool %s (dra)' % (n, EX_POOL, DRA_POOL) for n in NODES]]
    assert nodes_state(lab) == before

    t0 = time.time()
    rc, doc = migrate(lab, tmp_path, EX, DRA)
    took = time.time() - t0
    assert rc == 0, failures(doc)
    assert lab['plugins'].error is None, lab['plugins'].error
    after = nodes_state(lab)
    for name in NODES:
        assert after[name]['labels'] == {STRATEGY: 'dra', POOL: DRA_POOL, 'nvidia.com/device-plugin.config': None,
                                         'nvidia.com/gpu.deploy.device-plugin': 'false'}, after
        assert (after[name]['unschedulable'], after[name]['mark']) == (False, None)
    pods = wait('the Deployment on DRA devices', lambda: running_on(lab, dra=True), 90)
    assert not set(p.metadata.uid for p in pods) & set(p.metadata.uid for p in first)   # rescheduled, not kept
    for p in pods:
        claim = lab['co'].get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims',
                                                       p.status.extended_resource_claim_status.resource_claim_name)
        [res] = claim['status']['allocation']['devices']['results']
        assert (res['driver'], res['pool']) == ('gpu.nvidia.com', p.spec.node_name)
    assert apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict() == template
    print('migrate to dra: %.1f s for %d nodes' % (took, len(NODES)))

    # a re-run skips both nodes and writes nothing (the audit log: no write to a Node, a pod or an eviction)
    start = lab['kube'].mark()
    rc, doc = migrate(lab, tmp_path, EX, DRA)
    assert rc == 0, failures(doc)
    writes = [w for w in lab['kube'].writes(start, lab['kube'].mark())
              if ('/nodes/drax-mig-%s' % SUFFIX in w[1] and not w[1].split('?')[0].endswith('/status'))
              or '/namespaces/%s/' % NS in w[1]]
    assert writes == []
    assert [v['labels'] for v in nodes_state(lab).values()] == [v['labels'] for v in after.values()]

    # and back
    rc, doc = migrate(lab, tmp_path, DRA, EX)
    assert rc == 0, failures(doc)
    back = nodes_state(lab)
    for name in NODES:
        assert back[name]['labels'] == {STRATEGY: 'exclusive', POOL: EX_POOL,
                                        'nvidia.com/device-plugin.config': None,
                                        'nvidia.com/gpu.deploy.device-plugin': None}, back
        assert (back[name]['unschedulable'], back[name]['mark']) == (False, None)
    wait('the Deployment back on the device plugin GPUs', lambda: running_on(lab, dra=False), 90)
    assert apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict() == template
    assert lab['plugins'].error is None, lab['plugins'].error


def test_DRAX_08_a_move_that_stops_resumes_from_its_node(lab, tmp_path):
    """The DRA plugin of the first node does not come within gpuops_migrate_ready_timeout: the move stops there with
    that node switched, cordoned and marked, the second node untouched. Once the plugin is there, a re-run resumes the
    first node (waits, uncordons, unmarks: not drained again) and moves the second; no replica lost."""
    wait('the Deployment on the device plugin GPUs', lambda: running_on(lab, dra=False), 90)
    lab['plugins'].hold.add(NODES[0])
    try:
        rc, doc = migrate(lab, tmp_path, EX, DRA, '-e', 'gpuops_migrate_ready_timeout=4')
    finally:
        lab['plugins'].hold.discard(NODES[0])
    assert rc != 0
    [(task, dummy)] = failures(doc)
    assert task == "Wait for the DRA driver's ResourceSlice of the node"
    stopped = nodes_state(lab)
    assert stopped[NODES[0]]['labels'][STRATEGY] == 'dra'
    assert (stopped[NODES[0]]['unschedulable'], stopped[NODES[0]]['mark']) == (True, DRA_POOL)
    assert stopped[NODES[1]]['labels'][STRATEGY] == 'exclusive'
    assert (stopped[NODES[1]]['unschedulable'], stopped[NODES[1]]['mark']) == (False, None)
    rc, doc = migrate(lab, tmp_path, EX, DRA)
    assert rc == 0, failures(doc)
    shown = [r.get('msg') for play in doc['plays'] for t in play['tasks'] if t['task']['name'] == 'Show the plan'
             for r in t['hosts'].values()]
    assert shown[0][0].startswith('%s: resume: ' % NODES[0]) and shown[0][1].startswith('%s: migrate: ' % NODES[1])
    drains = [h for play in doc['plays'] for t in play['tasks']
              if t['task']['name'] == 'Mark, cordon and evict the GPU pods (PodDisruptionBudgets honoured)'
              for h, r in t['hosts'].items() if not r.get('skipped')]
    assert drains == [NODES[1]]
    done = nodes_state(lab)
    for name in NODES:
        assert done[name]['labels'][STRATEGY] == 'dra'
        assert (done[name]['unschedulable'], done[name]['mark']) == (False, None)
    wait('the Deployment on DRA devices', lambda: running_on(lab, dra=True), 90)
