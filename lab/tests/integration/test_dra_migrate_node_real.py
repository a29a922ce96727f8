"""Playbook migrate_to_dra (issue #40) on ONE real lab node (conftest.real_node: kubelet + containerd + runc) and the
shared 1.37 control plane: the node first serves nvidia.com/gpu through NVIDIA's device plugin, a user Deployment's pod
runs on it; the playbook moves the node to a dra pool (cordon, drain through the Eviction API under a
PodDisruptionBudget, the pool labels switched, NVIDIA's DRA kubelet plugin publishes the node's ResourceSlice,
uncordon) and the SAME pod template is scheduled by the real scheduler onto the node's DRA device (DRAExtendedResource,
GA in 1.37), the kubelet prepares it and the container sees /dev/nvidia0; then back. After each step gpu_share_report
counts the node's one GPU once (row DRAX-09 of docs/conformance/dra-driver-nvidia-gpu.md).

* The two plugins are host processes on the node, not DaemonSet pods (no images of them are built here): the device
  plugin nvidia-device-plugin v0.19.1 (lab/go) as test_node_device_plugin_real.py runs it, with the config the
  collection renders for the pool; NVIDIA's gpu-kubelet-plugin v0.5.0 as test_dra_extended_real.py runs it. Both
  see the same simulated T4 (lab/nvml_sim, inventory t4.json). A thread of this test is the DaemonSet controller:
  it starts or stops each plugin from the node's labels alone, with the selectors the collection renders - the
  device plugin DaemonSet's nodeSelector from stacks/render.render (gpuops.io/sharing-pool of the pool) and the DRA
  chart's kubeletPlugin affinity from stacks/dra (gpuops.io/sharing-strategy In [dra]). So the playbook's label
  switch is the only thing that moves the node from one plugin to the other; the test never stops a plugin itself.
* The user Deployment (one replica; a PodDisruptionBudget maxUnavailable 1) asks plain nvidia.com/gpu: 1 and
  tolerates the node's taint (a key of this file's own, so no other test's pod lands here); its node selector is the
  user's own node-group label (the lab's kwok nodes of other files advertise nvidia.com/gpu too), not a pool label:
  the switch keeps it. No ResourceClaim. hostNetwork: the lab node's pods reach nothing else here (lab/node/README.md).
* nvidia.com/gpu is mapped by a DeviceClass as the chart's gpu.nvidia.com renders it (deviceclass-gpu.yaml,
  dra-driver-nvidia-gpu v0.5.0): the lab's one shared class (conftest.gpu_extended_mapping, never deleted: deleting a
  class that maps nvidia.com/gpu drops the 1.37.2 scheduler's mapping for every class, kubernetes#141103).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_migrate_node_real.py
"""
from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import (KUBE, NODE_PY, gpu_extended_mapping, real_node, run_module,
                      wait_until as wait)

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dra_slices  # noqa: E402  (lab/kube)
import node as lab_node  # noqa: E402  (lab/node)
from test_gpu_sharing_stack_real import failures  # noqa: E402
from test_node_device_plugin_real import Plugin  # noqa: E402
from dra_node_plugin import DraPlugin  # noqa: E402
from test_dra_migrate_real import migrate as migrate_playbook  # noqa: E402

sys.path.insert(0, os.path.join(str(Path(__file__).resolve().parents[1]), 'oracles'))
from oracle_util import build_nvml_sim, probe_facts  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SUFFIX = '%d' % os.getpid()
NAME = 'lab-drax-mig-%s' % SUFFIX
NS = 'drax-mig-node-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-drax-mig-node-%s' % SUFFIX
DP_POOL, DRA_POOL = 'dp-n%s' % SUFFIX, 'dra-n%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
INVENTORY = 't4.json'
STRATEGY, POOL = 'gpuops.io/sharing-strategy', 'gpuops.io/sharing-pool'
# the device-plugin pool: exclusive (one nvidia.com/gpu per GPU; a time-slicing pool's replicas reach the report only
# through GPU feature discovery's nvidia.com/gpu.replicas label, and no GFD runs on a device-plugin pool's node)
SOURCE_STRATEGY = 'exclusive'
APP = {'app': 'drax-mig-node'}
# the user's own node group (not a pool label, not recorded by the collection): what the workload selects, kept by
# the switch; the lab's kwok nodes of other files advertise nvidia.com/gpu too
GROUP_LABEL = {'example.com/node-group': 'drax-mig-node-%s' % SUFFIX}


def render_pool(facts):
    """What the collection renders for the device-plugin pool on the node: (config text, container env, the device
    plugin DaemonSet's nodeSelector, the node's pool labels)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
    out = render.render(dict(strategy=SOURCE_STRATEGY, pool=DP_POOL, nodes=[NAME], facts={NAME: facts}))
    labels = out['node_labels'][NAME]
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'
          and m['metadata']['name'].startswith('nvidia-device-plugin-')][0]
    ctr = [c for c in ds['spec']['template']['spec']['containers'] if c['name'] == 'nvidia-device-plugin-ctr'][0]
    env = dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e)
    return (cm['data'][labels['nvidia.com/device-plugin.config']], env, ds['spec']['template']['spec']['nodeSelector'],
            labels)


def dra_affinity():
    """The DRA kubelet plugin's node affinity as the collection gives the chart (stacks/dra's helm values)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import common
    assert common.STRATEGY_LABEL == STRATEGY   # the default label (the pools here do not change it)
    return lambda labels: labels.get(STRATEGY) == 'dra'


class DaemonSets(threading.Thread):
    """The DaemonSet controller of the two plugins on the node: each runs while the node's labels match its
    selector, and only then."""

    def __init__(self, core, dp, dp_config, dp_env, dp_selector, dra, dra_selects):
        super().__init__(daemon=True)
        self.core, self.dp, self.dp_config, self.dp_env = core, dp, dp_config, dp_env
        self.dp_selects = lambda labels: all(labels.get(k) == v for k, v in dp_selector.items())
        self.dra, self.dra_selects = dra, dra_selects
        self.stop, self.error, self.events = threading.Event(), None, []

    def run(self):
        while not self.stop.is_set():
            try:
                labels = self.core.read_node(NAME).metadata.labels or {}
                dp_on = self.dp.proc is not None and self.dp.proc.poll() is None
                if self.dp_selects(labels) and not dp_on:
                    self.dp.start(self.dp_config, self.dp_env)
                    self.events.append('device-plugin started')
                elif not self.dp_selects(labels) and dp_on:
                    self.dp.stop()
                    self.events.append('device-plugin stopped')
                if self.dra_selects(labels) and not self.dra.running():
                    self.dra.start()
                    self.events.append('dra-plugin started')
                elif not self.dra_selects(labels) and self.dra.running():
                    self.dra.stop()
                    self.events.append('dra-plugin stopped')
            except Exception as exc:  # reported by the test
                self.error = exc
            self.stop.wait(0.5)

    def halt(self):
        self.stop.set()
        self.join(10)
        self.dp.stop()
        self.dra.stop()


@pytest.fixture(scope='module')
def lab(kube_real, tmp_path_factory, collections_path):
    from kubernetes import client
    sys.path.insert(0, collections_path)
    api = kube_real.api()
    core, apps, policy, co = (client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api),
                              client.CustomObjectsApi(api))
    work = tmp_path_factory.mktemp('drax-mig-node')
    inventory = dra_slices.inventory_path(INVENTORY)
    build_nvml_sim()
    facts = probe_facts(inventory, work / 'probe-state.json')
    config, env, selector, labels = render_pool(facts)
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1,
                   labels=['%s=%s' % kv for kv in sorted(dict(labels, **GROUP_LABEL).items())]) as state:
        # the pool labels as gpu_node_labels records them (the switch keeps what it recorded and is not the pool's)
        record = dict((k, {'value': v, 'previous': None}) for k, v in labels.items())
        core.patch_node(NAME, {'metadata': {'annotations': {'gpuops.io/managed-labels': json.dumps(record,
                                                                                                   sort_keys=True)}}})
        dp_work = work / 'dp'
        dp_work.mkdir()
        dra_work = work / 'dra'
        dra_work.mkdir()
        ds = DaemonSets(core, Plugin(dp_work, state, inventory), config, env, selector,
                        DraPlugin(kube_real, dra_work, state, NAME, INVENTORY), dra_affinity())
        gpu_extended_mapping(co)  # the lab's shared class (conftest: why one, never deleted)
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        ds.start()
        policy.create_namespaced_pod_disruption_budget(NS, {
            'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget', 'metadata': {'name': 'gpu-app'},
            'spec': {'maxUnavailable': 1, 'selector': {'matchLabels': APP}}})
        apps.create_namespaced_deployment(NS, {
            'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': 'gpu-app'},
            'spec': {'replicas': 1, 'selector': {'matchLabels': APP}, 'template': {
                'metadata': {'labels': APP},
                'spec': {'hostNetwork': True, 'automountServiceAccountToken': False, 'nodeSelector': GROUP_LABEL,
                         'terminationGracePeriodSeconds': 1,
                         'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                         'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                         'command': ['sh', '-c', 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES";'
                                                     ' ls /dev | grep nvidia; echo done; sleep 3600'],
                                         'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}}}})
        with open(inventory) as f:
            uuid = json.load(f)['gpus'][0]['uuid']
        try:
            yield {'kube': kube_real, 'core': core, 'apps': apps, 'co': co, 'ds': ds, 'labels': labels,
                   'uuid': uuid, 'work': work}
        finally:
            try:
                core.delete_namespace(NS)
                wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 90)
            finally:
                ds.halt()
                for s in dra_slices.slices_of(api, NAME):
                    co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])


def migrate(lab, tmp_path, source, target):
    """The playbook over this file's one real node (test_dra_migrate_real's run of it)."""
    return migrate_playbook(lab, tmp_path, source, target, nodes=[NAME], ready_timeout=120)


class Watch(threading.Thread):
    """Samples the Deployment's pods while a move runs (the PDB lets its one replica go: the drain's eviction is
    allowed, so no replica is lost beyond it as long as no pod fails): every pod that ended Failed not being deleted (a pod the kubelet refused: the device plugin's resource gone
    under it, UnexpectedAdmissionError)."""

    def __init__(self, core):
        super().__init__(daemon=True)
        self.core, self.stop, self.failed, self.error = core, threading.Event(), {}, None

    def run(self):
        while not self.stop.is_set():
            try:
                pods = self.core.list_namespaced_pod(NS, label_selector='app=drax-mig-node').items
                for p in pods:
                    # an evicted pod ends Failed too, with its deletion under way: not a refused one
                    if p.status.phase == 'Failed' and not p.metadata.deletion_timestamp:
                        self.failed[p.metadata.name] = (p.status.reason, p.status.message)
            except Exception as exc:  # reported by the test
                self.error = exc
            self.stop.wait(0.5)


def app_pod(lab, dra):
    """The Deployment's one pod, Running on the node, its container past its device listing, backed by a DRA claim
    (``dra``) or by the device plugin; None until then."""
    pods = [p for p in lab['core'].list_namespaced_pod(NS, label_selector='app=drax-mig-node').items
            if not p.metadata.deletion_timestamp and p.status.phase != 'Failed']
    if len(pods) != 1 or pods[0].status.phase != 'Running':
        return None
    p = pods[0]
    assert p.spec.node_name == NAME, p.spec.node_name
    if (p.status.extended_resource_claim_status is not None) != dra:
        return None
    try:
        log = lab['core'].read_namespaced_pod_log(p.metadata.name, NS)
    except Exception:  # pylint: disable=broad-except  (the container just started)
        return None
    return (p, log.splitlines()[:-1]) if 'done' in log else None


def report(lab, collections_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_share_report',
                     json.dumps({'kubeconfig': lab['kube'].kubeconfig, 'namespace': NS}))
    assert not res.get('failed'), res
    [node] = [n for n in res['nodes'] if n['name'] == NAME]
    return res, node


def gpus_counted(res, node):
    """How many times the report counts the node's GPU: the device plugin's nvidia.com/gpu it shows the node
    advertising (an exclusive pool: one per GPU) plus the DRA devices it lists for the node."""
    dp = (node['resources'].get('nvidia.com/gpu') or {}).get('allocatable') or 0
    return dp + sum(((node.get('dra') or {}).get('devices') or {}).values())


def node_view(lab):
    n = lab['core'].read_node(NAME)
    labels = n.metadata.labels or {}
    return {'strategy': labels.get(STRATEGY), 'pool': labels.get(POOL), 'unschedulable': bool(n.spec.unschedulable),
            'mark': (n.metadata.annotations or {}).get('gpuops.io/strategy-migration'),
            'allocatable': (n.status.allocatable or {}).get('nvidia.com/gpu')}


def test_DRAX_09_real_node_moves_to_dra_and_back_same_pod_template(lab, tmp_path, collections_path):
    t_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    core, apps, co = lab['core'], lab['apps'], lab['co']
    dp = {'pool': DP_POOL, 'strategy': SOURCE_STRATEGY,
          'labels': dict((k, v) for k, v in lab['labels'].items() if k not in (STRATEGY, POOL))}
    dra = {'pool': DRA_POOL, 'strategy': 'dra'}

    # 1. the device plugin serves the node, the Deployment's pod runs on it with the GPU the plugin gave
    wait('nvidia.com/gpu allocatable 1 from the device plugin', lambda: node_view(lab)['allocatable'] == '1', 120)
    first, lines = wait('the pod on the device plugin GPU', lambda: app_pod(lab, dra=False), 120)
    assert lines[0] == 'NVIDIA_VISIBLE_DEVICES=%s' % lab['uuid'], lines
    template = apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict()
    res, node = report(lab, collections_path)
    assert node['resources']['nvidia.com/gpu']['allocated'] == 1, node
    assert gpus_counted(res, node) == 1, node

    # 2. to the dra pool
    watch = Watch(core)
    watch.start()
    t1 = time.time()
    rc, doc = migrate(lab, tmp_path, dp, dra)
    took_to = time.time() - t1
    assert rc == 0, failures(doc)
    view = node_view(lab)
    assert (view['strategy'], view['pool'], view['unschedulable'], view['mark']) == ('dra', DRA_POOL, False, None)
    pod, lines = wait('the same template on a DRA device', lambda: app_pod(lab, dra=True), 120)
    watch.stop.set()
    watch.join(5)
    assert watch.error is None and lab['ds'].error is None, (watch.error, lab['ds'].error)
    assert watch.failed == {}, watch.failed
    assert pod.metadata.uid != first.metadata.uid
    assert apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict() == template
    st = pod.status.extended_resource_claim_status
    assert [(m.container_name, m.resource_name) for m in st.request_mappings] == [('main', 'nvidia.com/gpu')]
    claim = co.get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims', st.resource_claim_name)
    assert [(r['driver'], r['pool'], r['device']) for r in claim['status']['allocation']['devices']['results']] == [
        (DRIVER, NAME, 'gpu-0')]
    assert 'nvidia0' in lines[1:], lines
    res, node = report(lab, collections_path)
    assert node['dra']['allocated'] == {DRIVER: 1}, node
    assert gpus_counted(res, node) == 1, node
    [c] = res['dra']['claims']
    assert (c['extended_resources'], [p['name'] for p in c['pods']]) == (['nvidia.com/gpu'], [pod.metadata.name])

    # 3. and back
    watch = Watch(core)
    watch.start()
    t2 = time.time()
    rc, doc = migrate(lab, tmp_path, dra, dp)
    took_back = time.time() - t2
    assert rc == 0, failures(doc)
    view = node_view(lab)
    assert (view['strategy'], view['pool'], view['unschedulable'], view['mark']) == (
        SOURCE_STRATEGY, DP_POOL, False, None)
    back, lines = wait('the same template back on the device plugin GPU', lambda: app_pod(lab, dra=False), 120)
    watch.stop.set()
    watch.join(5)
    assert watch.error is None and lab['ds'].error is None, (watch.error, lab['ds'].error)
    assert watch.failed == {}, watch.failed
    assert lines[0] == 'NVIDIA_VISIBLE_DEVICES=%s' % lab['uuid'], lines
    assert apps.read_namespaced_deployment('gpu-app', NS).spec.template.to_dict() == template
    res, node = report(lab, collections_path)
    assert node['resources']['nvidia.com/gpu']['allocated'] == 1, node
    assert gpus_counted(res, node) == 1, node
    events = lab['ds'].events
    assert ([e for e in events if e.startswith('device-plugin')], [e for e in events if e.startswith('dra-plugin')]) == (
        ['device-plugin started', 'device-plugin stopped', 'device-plugin started'],
        ['dra-plugin started', 'dra-plugin stopped']), events
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print('real node to dra: %.1f s, back: %.1f s; test %.1f s wall, %.1f CPU-s of its children'
          % (took_to, took_back, time.time() - t0,
             cpu.ru_utime + cpu.ru_stime - t_cpu.ru_utime - t_cpu.ru_stime))
