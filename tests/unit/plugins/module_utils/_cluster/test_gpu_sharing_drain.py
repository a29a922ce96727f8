# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node_drain's decisions and API calls (module_utils gpu_sharing_drain), with a fake CoreV1Api."""
import copy
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain

DP = 'nvidia.com/gpu.deploy.device-plugin'
DCGM = 'nvidia.com/gpu.deploy.dcgm-exporter'


def pod(name, ns='default', gpu=None, owner=None, node_selector=None, phase='Running', annotations=None, uid=None,
        labels=None, empty_dir=False, deleting=False):
    p = {'metadata': {'name': name, 'namespace': ns, 'uid': uid or 'uid-' + name, 'labels': labels or {'app': name}},
         'spec': {'nodeName': 'n1', 'containers': [{'name': 'c'}]}, 'status': {'phase': phase}}
    if empty_dir:
        p['spec']['volumes'] = [{'name': 'scratch', 'emptyDir': {}}]
    if deleting:
        p['metadata']['deletionTimestamp'] = '2026-11-24T08:00:00Z'
    if gpu:
        p['spec']['containers'][0]['resources'] = {'limits': {gpu: '1'}}
    if owner:
        p['metadata']['ownerReferences'] = [{'kind': owner, 'name': 'x', 'controller': True}]
    if node_selector:
        p['spec']['nodeSelector'] = node_selector
    if annotations:
        p['metadata']['annotations'] = annotations
    return p


class Resp(object):
    def __init__(self, doc):
        self.data = json.dumps(doc)


class ApiErr(Exception):
    def __init__(self, status, message=None):
        super(ApiErr, self).__init__('HTTP %s' % status)
        self.status = status
        self.body = json.dumps({'kind': 'Status', 'message': message}) if message else None


BUDGET_MSG = "Cannot evict pod as it would violate the pod's disruption budget."


def selects(selector, labels):
    """A label selector of equality terms (k=v, k!=v, comma-separated), as the API server applies it."""
    for term in (selector or '').split(','):
        if '!=' in term:
            k, v = term.split('!=', 1)
            if labels.get(k) == v:
                return False
        elif '=' in term:
            k, v = term.split('=', 1)
            if labels.get(k) != v:
                return False
    return True


class FakeCore(object):
    """Nodes and pods in memory; ``controller`` runs after each pod list (a DaemonSet controller stand-in)."""

    def __init__(self, node, pods, pdb=(), finishes=None, recreate=()):
        self.nodes = {node['metadata']['name']: node} if node else {}
        self.pods = pods
        self.pdb = set(pdb)
        self.calls = []
        self.finishes = finishes or {}  # pod name -> lists until its job finishes (then phase Succeeded)
        self.recreate = set(recreate)   # evicted pods a controller puts back at once under the same name (new uid)
        self.lists = 0

    def read_node(self, name, _preload_content=False):
        self.calls.append(('get', name))
        if name not in self.nodes:
            raise ApiErr(404)
        return Resp(self.nodes[name])

    def patch_node(self, name, body, _preload_content=True):
        assert _preload_content is False  # raw JSON: the typed Node model refuses a sparse status
        self.calls.append(('patch', name, copy.deepcopy(body)))
        node = self.nodes[name]
        for key in ('labels', 'annotations'):
            for k, v in ((body.get('metadata') or {}).get(key) or {}).items():
                target = node['metadata'].setdefault(key, {})
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v
        if 'spec' in body:
            node.setdefault('spec', {})['unschedulable'] = body['spec']['unschedulable']

    def list_pod_for_all_namespaces(self, field_selector, label_selector=None, _preload_content=True):
        assert _preload_content is False
        self.calls.append(('list', field_selector) + ((label_selector,) if label_selector else ()))
        self.lists += 1
        for p in self.pods:
            if self.finishes.get(p['metadata']['name']) is not None and self.lists > self.finishes[p['metadata']['name']]:
                p['status']['phase'] = 'Succeeded'
        listed = Resp({'items': [copy.deepcopy(p) for p in self.pods
                                 if selects(label_selector, p['metadata'].get('labels') or {})]})
        # the DaemonSet controller, a little later: pods whose nodeSelector the node no longer matches go
        labels = self.nodes['n1']['metadata'].get('labels') or {} if 'n1' in self.nodes else {}
        self.pods = [p for p in self.pods if all(labels.get(k) == v for k, v in
                                                 ((p.get('spec') or {}).get('nodeSelector') or {}).items())]
        return listed

    def create_namespaced_pod_eviction(self, name, namespace, body, _preload_content=True):
        assert _preload_content is False
        self.calls.append(('evict', '%s/%s' % (namespace, name), body['kind'], body['apiVersion']) +
                          ((body['deleteOptions'],) if 'deleteOptions' in body else ()))
        if '%s/%s' % (namespace, name) in self.pdb:
            raise ApiErr(429, BUDGET_MSG)
        self._remove(namespace, name)

    def delete_namespaced_pod(self, name, namespace, body=None, _preload_content=True):
        assert _preload_content is False
        self.calls.append(('delete', '%s/%s' % (namespace, name), body))
        self._remove(namespace, name)

    def _remove(self, namespace, name):
        if not any((p['metadata']['namespace'], p['metadata']['name']) == (namespace, name) for p in self.pods):
            raise ApiErr(404)
        gone = [p for p in self.pods if (p['metadata']['namespace'], p['metadata']['name']) == (namespace, name)]
        self.pods = [p for p in self.pods if (p['metadata']['namespace'], p['metadata']['name']) != (namespace, name)]
        if name in self.recreate:
            again = copy.deepcopy(gone[0])
            again['metadata']['uid'] = 'uid-again-' + name
            self.pods.append(again)


class Clock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def node(labels=None, unschedulable=False, annotations=None):
    return {'metadata': {'name': 'n1', 'labels': labels or {}, 'annotations': annotations or {}},
            'spec': {'unschedulable': True} if unschedulable else {}}


def drainer(core, check_mode=False):
    clock = Clock()
    return drain.Drainer(core, check_mode=check_mode, sleep=clock.sleep, clock=clock)


def test_MIGC_01_pause_sets_paused_for_mig_change_and_keeps_false():
    labels = {DP: 'true', DCGM: 'false', 'nvidia.com/gpu.deploy.client': 'true', 'other': 'x'}
    assert drain.pause_labels(labels) == {DP: drain.PAUSED, DCGM: 'false',
                                          'nvidia.com/gpu.deploy.client': 'paused-for-mig-change'}
    assert drain.PAUSED == 'paused-for-mig-change'
    assert drain.CLIENT_DEPLOY_LABELS == (
        'nvidia.com/gpu.deploy.device-plugin', 'nvidia.com/gpu.deploy.gpu-feature-discovery',
        'nvidia.com/gpu.deploy.dcgm-exporter', 'nvidia.com/gpu.deploy.dcgm', 'nvidia.com/gpu.deploy.nvsm',
        'nvidia.com/gpu.deploy.client')


def test_MIGC_02_restore_sets_true_and_keeps_false():
    assert drain.restore_labels({DP: 'true', DCGM: 'false', 'nvidia.com/gpu.deploy.dcgm': drain.PAUSED}) == {
        DP: 'true', DCGM: 'false', 'nvidia.com/gpu.deploy.dcgm': 'true'}


def test_MIGC_03_labels_the_node_does_not_carry_stay_absent():
    assert drain.pause_labels({'kubernetes.io/hostname': 'n1'}) == {}
    core = FakeCore(node({'kubernetes.io/hostname': 'n1'}), [])
    res = drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert res['paused'] == {} and res['restore']['labels'] == {}
    assert not [c for c in core.calls if c[0] == 'patch' and 'labels' in c[2].get('metadata', {})]


def test_MIGC_04_waits_for_the_paused_clients_pods_and_evicts_gpu_pods_only():
    pods = [pod('dp', 'gpu-operator', owner='DaemonSet', node_selector={DP: 'true'}),
            pod('train', gpu='nvidia.com/gpu'), pod('mig', gpu='nvidia.com/mig-1g.10gb'),
            pod('share', gpu='aliyun.com/gpu-mem'), pod('web'), pod('ds', owner='DaemonSet', gpu='nvidia.com/gpu'),
            pod('static', annotations={drain.MIRROR_ANNOTATION: 'x'}, gpu='nvidia.com/gpu'),
            pod('done', gpu='nvidia.com/gpu', phase='Succeeded')]
    core = FakeCore(node({DP: 'true'}), pods)
    res = drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert sorted(res['evicted']) == ['default/mig', 'default/share', 'default/train']
    assert res['waited_for'] == ['gpu-operator/dp']
    assert sorted(res['kept']) == ['default/ds', 'default/static', 'default/web']
    assert [c[1] for c in core.calls if c[0] == 'evict'] == ['default/train', 'default/mig', 'default/share']
    assert all(c[2:] == ('Eviction', 'policy/v1') for c in core.calls if c[0] == 'evict')
    # order: cordon (with the mark), pause, then evictions
    patches = [c[2] for c in core.calls if c[0] == 'patch']
    assert patches[0] == {'metadata': {'annotations': {drain.CORDON_ANNOTATION: 'cordoned'}}, 'spec': {'unschedulable': True}}
    assert patches[1] == {'metadata': {'labels': {DP: 'paused-for-mig-change'}}}
    assert res['restore'] == {'uncordon': True, 'labels': {DP: 'true'}}


def test_MIGC_04_mode_all_evicts_every_pod_but_daemonset_and_mirror_pods():
    pods = [pod('train', gpu='nvidia.com/gpu'), pod('web'), pod('ds', owner='DaemonSet')]
    res = drainer(FakeCore(node(), pods)).drain('n1', 'all', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert sorted(res['evicted']) == ['default/train', 'default/web'] and res['kept'] == ['default/ds']


def test_MIGC_07_pdb_blocked_pod_fails_after_the_timeout_naming_it():
    core = FakeCore(node({DP: 'true'}), [pod('train', gpu='nvidia.com/gpu')], pdb=['default/train'])
    with pytest.raises(drain.DrainError) as err:
        drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 5, 1)
    assert 'default/train (eviction refused: PodDisruptionBudget)' in str(err.value)
    assert err.value.restore == {'uncordon': True, 'labels': {DP: 'true'}}
    assert 'cordon node n1' in err.value.done
    assert len([c for c in core.calls if c[0] == 'evict']) == 6  # tried again each poll (0..5 s)


def test_MIGC_08_restore_gives_labels_back_and_uncordons_only_what_it_cordoned():
    core = FakeCore(node({DP: 'true'}), [])
    d = drainer(core)
    res = d.drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    d.restore('n1', res['restore'])
    n = core.nodes['n1']
    assert n['metadata']['labels'][DP] == 'true' and not n['spec']['unschedulable']
    assert drain.CORDON_ANNOTATION not in n['metadata']['annotations']
    # cordoned by someone else: stays cordoned
    core = FakeCore(node({DP: 'true'}, unschedulable=True), [])
    d = drainer(core)
    res = d.drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert res['restore']['uncordon'] is False
    d.restore('n1', res['restore'])
    assert core.nodes['n1']['spec']['unschedulable'] is True


def test_MIGC_08_a_run_that_stopped_is_finished_by_the_next_one():
    # an earlier run cordoned (with the mark) and paused the plugin, then stopped
    core = FakeCore(node({DP: drain.PAUSED}, unschedulable=True, annotations={drain.CORDON_ANNOTATION: 'cordoned'}), [])
    d = drainer(core)
    res = d.drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert res['restore'] == {'uncordon': True, 'labels': {DP: drain.PAUSED}}
    d.restore('n1', res['restore'])
    n = core.nodes['n1']
    assert n['metadata']['labels'][DP] == 'true' and n['spec']['unschedulable'] is None


def test_MIGC_09_node_not_in_the_cluster_is_left_alone():
    core = FakeCore(None, [])
    res = drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert res['node_found'] is False and [c[0] for c in core.calls] == ['get']


def test_MIGC_10_check_mode_reads_only():
    core = FakeCore(node({DP: 'true'}), [pod('train', gpu='nvidia.com/gpu')])
    d = drainer(core, check_mode=True)
    res = d.drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1)
    assert res['evicted'] == ['default/train']
    assert d.actions == ['cordon node n1', 'pause GPU clients on n1: %s=paused-for-mig-change' % DP,
                         'evict pod default/train']
    assert set(c[0] for c in core.calls) == {'get', 'list'}


# --- kubectl's drain rules (kubernetes/kubectl pkg/drain, v0.36.3) and the driver upgrade's options -------------

def evicts(core):
    return [c[1] for c in core.calls if c[0] == 'evict']


def upgrade_drain(core, timeout=10, **kw):
    """The options playbooks/upgrade_driver.yml passes (every pod, no GPU-client pause, kubectl's defaults)."""
    opts = dict(pause_gpu_clients=False, ignore_daemonsets=True, delete_emptydir_data=True, force=False,
                mark={'annotation': 'gpuops.io/driver-upgrade', 'value': '580.105.08'})
    opts.update(kw)
    d = drainer(core)
    return d, d.drain('n1', 'all', drain.DEFAULT_GPU_RESOURCES, timeout, 1, **opts)


def test_KD_01_refused_pods_fail_the_drain_before_any_eviction_named_by_reason():
    pods = [pod('train', owner='ReplicaSet'), pod('ds', owner='DaemonSet'), pod('cache', owner='ReplicaSet', empty_dir=True),
            pod('bare'), pod('bare-done', phase='Succeeded')]
    core = FakeCore(node(), pods)
    with pytest.raises(drain.DrainError) as err:
        upgrade_drain(core, ignore_daemonsets=False, delete_emptydir_data=False, force=False)
    msg = str(err.value)
    assert 'cannot evict DaemonSet-managed Pods (set ignore_daemonsets to ignore them): default/ds' in msg
    assert 'cannot evict Pods with local storage (set delete_emptydir_data to evict them): default/cache' in msg
    assert 'cannot evict Pods that declare no controller (set force to evict them): default/bare' in msg
    assert 'bare-done' not in msg  # a finished pod holds nothing
    assert evicts(core) == [] and err.value.pods_left == ['default/bare', 'default/cache', 'default/ds']
    # the node was cordoned (and marked) first, as kubectl cordons before it lists the pods
    assert 'cordon node n1' in err.value.done and err.value.restore['uncordon'] is True


def test_KD_02_daemonset_pods_stay_when_ignored_and_mirror_pods_are_skipped():
    pods = [pod('ds', owner='DaemonSet'), pod('static', annotations={drain.MIRROR_ANNOTATION: 'x'}),
            pod('train', owner='ReplicaSet')]
    core = FakeCore(node(), pods)
    _d, res = upgrade_drain(core)
    assert res['evicted'] == ['default/train'] and sorted(res['kept']) == ['default/ds', 'default/static']
    assert evicts(core) == ['default/train'] and res['pods_left'] == []


def test_KD_03_local_storage_and_unmanaged_pods_are_evicted_when_allowed():
    pods = [pod('cache', owner='ReplicaSet', empty_dir=True), pod('bare')]
    core = FakeCore(node(), pods)
    _d, res = upgrade_drain(core, delete_emptydir_data=True, force=True)
    assert sorted(evicts(core)) == ['default/bare', 'default/cache']


def test_KD_04_a_budget_refusal_is_retried_until_the_timeout_and_named():
    core = FakeCore(node(), [pod('train', owner='ReplicaSet')], pdb=['default/train'])
    with pytest.raises(drain.DrainError) as err:
        upgrade_drain(core, timeout=3)
    msg = str(err.value)
    assert msg.startswith('pods still on node n1 after 3s: default/train (eviction refused: PodDisruptionBudget)')
    assert 'disruption budget refused each eviction (HTTP 429' in msg and BUDGET_MSG in msg
    assert evicts(core) == ['default/train'] * 4 and err.value.pods_left == ['default/train']


def test_KD_04_an_eviction_the_budget_allows_later_goes_through():
    core = FakeCore(node(), [pod('train', owner='ReplicaSet')], pdb=['default/train'])
    d = drainer(core)
    real_sleep = d.sleep

    def sleep(s):
        core.pdb.clear()  # the budget allows a disruption again (another replica became ready)
        real_sleep(s)
    d.sleep = sleep
    res = d.drain('n1', 'all', drain.DEFAULT_GPU_RESOURCES, 10, 1, pause_gpu_clients=False)
    assert evicts(core) == ['default/train', 'default/train'] and res['pods_left'] == []


def test_KD_05_a_pod_gone_404_or_replaced_by_another_uid_is_done():
    core = FakeCore(node(), [pod('train', owner='ReplicaSet'), pod('web', owner='StatefulSet')], recreate=['web'])
    real = core.create_namespaced_pod_eviction

    def evict(name, namespace, body, _preload_content=True):
        if name == 'train':  # deleted by someone else between the list and the eviction
            core.pods = [p for p in core.pods if p['metadata']['name'] != 'train']
        return real(name, namespace, body, _preload_content=_preload_content)
    core.create_namespaced_pod_eviction = evict
    _d, res = upgrade_drain(core, timeout=0)
    assert sorted(res['evicted']) == ['default/train', 'default/web'] and res['pods_left'] == []
    # the StatefulSet put web back under its name at once: another pod (uid), not the one evicted
    assert [p['metadata']['uid'] for p in core.pods] == ['uid-again-web']


def test_KD_06_other_eviction_errors_fail_at_once():
    core = FakeCore(node(), [pod('train', owner='ReplicaSet')])

    def evict(name, namespace, body, _preload_content=True):
        raise ApiErr(403, 'forbidden')
    core.create_namespaced_pod_eviction = evict
    with pytest.raises(ApiErr):
        upgrade_drain(core)


def test_KD_07_evictions_are_policy_v1_with_the_grace_period_and_disable_eviction_deletes():
    core = FakeCore(node(), [pod('train', owner='ReplicaSet')])
    upgrade_drain(core, grace_period=30)
    assert [c for c in core.calls if c[0] == 'evict'] == [
        ('evict', 'default/train', 'Eviction', 'policy/v1', {'gracePeriodSeconds': 30})]
    core = FakeCore(node(), [pod('train', owner='ReplicaSet')], pdb=['default/train'])
    d, res = upgrade_drain(core, disable_eviction=True, grace_period=0)
    assert [c for c in core.calls if c[0] in ('evict', 'delete')] == [('delete', 'default/train', {'gracePeriodSeconds': 0})]
    assert 'delete pod default/train' in d.actions and res['pods_left'] == []


def test_KD_08_pod_selector_limits_the_drain_to_matching_pods():
    pods = [pod('train', owner='ReplicaSet', labels={'app': 'train'}), pod('web', owner='ReplicaSet', labels={'app': 'web'})]
    core = FakeCore(node(), pods)
    _d, res = upgrade_drain(core, pod_selector='app=train,app!=web')
    assert res['evicted'] == ['default/train'] and evicts(core) == ['default/train']
    assert ('list', 'spec.nodeName=n1', 'app=train,app!=web') in core.calls
    assert [p['metadata']['name'] for p in core.pods] == ['web']


def test_KD_09_gpu_mode_with_a_selector_evicts_matching_gpu_pods_only():
    pods = [pod('train', owner='ReplicaSet', gpu='nvidia.com/gpu', labels={'tier': 'batch'}),
            pod('infer', owner='ReplicaSet', gpu='nvidia.com/gpu', labels={'tier': 'online'}),
            pod('etl', owner='ReplicaSet', labels={'tier': 'batch'})]
    core = FakeCore(node(), pods)
    res = drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1, pod_selector='tier=batch')
    assert res['evicted'] == ['default/train'] and res['kept'] == ['default/etl']


def test_UPG_07_wait_for_jobs_then_drain_or_stop_on_timeout():
    job = pod('job', owner='Job', labels={'gpuops.io/gpu-job': 'true'})
    done = pod('done', owner='Job', labels={'gpuops.io/gpu-job': 'true'}, phase='Succeeded')
    wait = {'pod_selector': 'gpuops.io/gpu-job=true', 'timeout': 2, 'on_timeout': 'stop'}
    # the job outlives its wait: stop, nothing evicted, the node cordoned and marked
    core = FakeCore(node(), [copy.deepcopy(job), done, pod('train', owner='ReplicaSet')])
    with pytest.raises(drain.DrainError) as err:
        upgrade_drain(core, wait_for=wait)
    assert str(err.value) == 'GPU jobs still run after 2s (wait_for_jobs on_timeout=stop): default/job'
    assert evicts(core) == [] and err.value.pods_left == ['default/job']
    assert [c[2] for c in core.calls if c[0] == 'list'] == ['gpuops.io/gpu-job=true'] * 3  # 0, 1, 2 s
    # on_timeout=drain: the job is evicted with the others
    core = FakeCore(node(), [copy.deepcopy(job), pod('train', owner='ReplicaSet')])
    _d, res = upgrade_drain(core, wait_for=dict(wait, on_timeout='drain'))
    assert res['jobs_left'] == ['default/job'] and sorted(evicts(core)) == ['default/job', 'default/train']
    # the job finishes during the wait (second look): nothing left to wait for, it is not evicted
    core = FakeCore(node(), [copy.deepcopy(job), pod('train', owner='ReplicaSet')], finishes={'job': 1})
    _d, res = upgrade_drain(core, wait_for=wait)
    assert res['jobs_left'] == [] and evicts(core) == ['default/train']


def test_UPG_07_check_mode_does_not_wait_for_jobs():
    core = FakeCore(node(), [pod('job', owner='Job', labels={'gpuops.io/gpu-job': 'true'})])
    d = drainer(core, check_mode=True)
    res = d.drain('n1', 'all', drain.DEFAULT_GPU_RESOURCES, 10, 1, pause_gpu_clients=False,
                  wait_for={'pod_selector': 'gpuops.io/gpu-job=true', 'timeout': 60, 'on_timeout': 'stop'})
    assert res['jobs_left'] == ['default/job'] and d.clock() == 0
    assert set(c[0] for c in core.calls) == {'get', 'list'}


def test_UPG_08_mark_before_the_cordon_and_removed_after_the_uncordon():
    core = FakeCore(node({drain.CLIENT_DEPLOY_LABELS[0]: 'true'}), [pod('train', owner='ReplicaSet')])
    d, res = upgrade_drain(core)
    patches = [c[2] for c in core.calls if c[0] == 'patch']
    # two patches, in this order: the mark alone, then the cordon; no GPU-client label is touched
    assert patches == [{'metadata': {'annotations': {'gpuops.io/driver-upgrade': '580.105.08'}}},
                       {'metadata': {'annotations': {drain.CORDON_ANNOTATION: 'cordoned'}}, 'spec': {'unschedulable': True}}]
    assert res['restore'] == {'uncordon': True, 'labels': {}, 'mark': 'gpuops.io/driver-upgrade'}
    d.restore('n1', res['restore'])
    patches = [c[2] for c in core.calls if c[0] == 'patch'][2:]
    assert patches == [{'metadata': {'annotations': {drain.CORDON_ANNOTATION: None}}, 'spec': {'unschedulable': None}},
                       {'metadata': {'annotations': {'gpuops.io/driver-upgrade': None}}}]
    assert core.nodes['n1']['metadata']['annotations'] == {}


def test_UPG_08_a_stopped_roll_resumes_from_the_mark():
    # an earlier run marked and cordoned the node, then stopped: the mark is not written again, nor the cordon
    n = node(unschedulable=True, annotations={'gpuops.io/driver-upgrade': '580.105.08', drain.CORDON_ANNOTATION: 'cordoned'})
    core = FakeCore(n, [pod('train', owner='ReplicaSet')])
    d, res = upgrade_drain(core)
    assert [c for c in core.calls if c[0] == 'patch'] == [] and res['restore']['uncordon'] is True
    # another target version: the mark says the new one
    core = FakeCore(copy.deepcopy(n), [])
    upgrade_drain(core, mark={'annotation': 'gpuops.io/driver-upgrade', 'value': '580.126.09'})
    assert [c[2] for c in core.calls if c[0] == 'patch'] == [
        {'metadata': {'annotations': {'gpuops.io/driver-upgrade': '580.126.09'}}}]
    # a run that resumes after the drain (driver already swapped) restores without a drain of its own: it uncordons
    # because the node carries this module's cordon annotation, then removes the mark
    core = FakeCore(copy.deepcopy(n), [])
    d = drainer(core)
    d.restore('n1', {'mark': 'gpuops.io/driver-upgrade'})
    assert d.actions == ['uncordon node n1', 'unmark node n1: gpuops.io/driver-upgrade']


def test_UPG_09_a_node_cordoned_before_the_upgrade_stays_cordoned():
    # cordoned by someone else before the roll: marked, not cordoned again, and after the upgrade it stays cordoned
    core = FakeCore(node(unschedulable=True), [pod('train', owner='ReplicaSet')])
    d, res = upgrade_drain(core)
    assert res['restore']['uncordon'] is False
    d.restore('n1', res['restore'])
    assert d.actions == ['mark node n1: gpuops.io/driver-upgrade=580.105.08', 'evict pod default/train',
                         'unmark node n1: gpuops.io/driver-upgrade']
    assert core.nodes['n1']['spec']['unschedulable'] is True
    # the same when a later run resumes it (no annotation of ours on the node): the mark goes, the cordon stays
    core = FakeCore(node(unschedulable=True, annotations={'gpuops.io/driver-upgrade': '580.105.08'}), [])
    d = drainer(core)
    d.restore('n1', {'mark': 'gpuops.io/driver-upgrade'})
    assert d.actions == ['unmark node n1: gpuops.io/driver-upgrade'] and core.nodes['n1']['spec']['unschedulable'] is True


def test_UPG_02_pods_holding_counts_terminating_pods_and_skips_finished_mirror_and_daemonset_pods():
    pods = [pod('a', owner='ReplicaSet', deleting=True), pod('b', owner='ReplicaSet', phase='Failed'),
            pod('c', annotations={drain.MIRROR_ANNOTATION: 'x'}), pod('d', owner='DaemonSet')]
    assert drain.pods_holding(pods) == ['default/a']
    assert drain.pods_holding(pods, ignore_daemonsets=False) == ['default/a', 'default/d']


def test_UPG_02_a_terminating_pod_is_waited_for_not_evicted_again():
    core = FakeCore(node(), [pod('held', owner='ReplicaSet', deleting=True)])
    with pytest.raises(drain.DrainError) as err:
        upgrade_drain(core, timeout=2)
    assert str(err.value) == 'pods still on node n1 after 2s: default/held' and evicts(core) == []


def test_pause_gpu_clients_false_leaves_the_deploy_labels_alone():
    core = FakeCore(node({drain.CLIENT_DEPLOY_LABELS[0]: 'true'}), [])
    res = drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1, pause_gpu_clients=False)
    assert res['paused'] == {} and res['restore'] == {'uncordon': True, 'labels': {}}
    assert not [c for c in core.calls if c[0] == 'patch' and 'labels' in c[2].get('metadata', {})]


def test_the_default_gpu_resources_are_the_strategy_models():
    """The drain's default is derived from the strategy registry, not a list of its own: every resource of every
    strategy makes a pod a GPU pod, and so does a Volcano gpu-share pod (volcano.sh/gpu-memory, which the former
    hand-written list volcano.sh/vgpu missed)."""
    assert drain.DEFAULT_GPU_RESOURCES == gs.resource_prefixes() == drain.default_gpu_resources()
    assert drain.DEFAULT_GPU_RESOURCES == ('nvidia.com/gpu', 'nvidia.com/mig-', 'aliyun.com/gpu', 'volcano.sh/',
                                           'tencent.com/vcuda')
    for name in gs.STRATEGIES:
        for res, dummy, dummy in gs.stack_info(name)['resources']:
            evict = drain.select_pods([pod('p', gpu=res + ('1g.10gb' if res.endswith('-') else ''), owner='ReplicaSet')],
                                      'gpu', drain.default_gpu_resources())[0]
            assert [drain.pod_name(p) for p in evict] == ['default/p'], (name, res)
    assert drain.select_pods([pod('p', gpu='example.com/fpga', owner='ReplicaSet')], 'gpu',
                             drain.default_gpu_resources())[0] == []


def test_a_new_strategy_reaches_the_drain_without_editing_it(monkeypatch):
    """A strategy registered in the model (gpu_strategy's own _entry, on a copy of the registry) makes its resource a
    GPU resource of the drain: the drain's default is read from the registry."""
    fpga = pod('fpga', gpu='example.com/fpga-mem', owner='ReplicaSet')
    assert drain.select_pods([fpga], 'gpu', drain.default_gpu_resources())[0] == []
    monkeypatch.setattr(gs, '_STACKS', dict(gs._STACKS))
    gs._entry('fpga-share', gs._props('FPGA share', 'fpga-mem', (('example.com/fpga-mem', 'FPGA memory', 'MiB'),),
                                      'fpga', ('fpga',)))
    assert 'example.com/fpga-mem' in drain.default_gpu_resources()
    assert drain.select_pods([fpga], 'gpu', drain.default_gpu_resources())[0] == [fpga]


# --- DaemonSet pods that hold a GPU (DRAX-13) --------------------------------------------------------------------

def ds_pod(name, gpu=None, claims=False, **kw):
    p = pod(name, gpu=gpu, owner='DaemonSet', **kw)
    p['metadata']['ownerReferences'][0]['name'] = name + '-ds'
    if claims:
        p['spec']['resourceClaims'] = [{'name': 'gpu', 'resourceClaimTemplateName': 'gpu'}]
    return p


def test_DRAX_13_daemonset_gpu_pods_of_names_what_each_holds():
    pods = [ds_pod('agent', gpu='nvidia.com/gpu'), ds_pod('claims', claims=True), ds_pod('plain'),
            ds_pod('done', gpu='nvidia.com/gpu', phase='Succeeded'), pod('train', gpu='nvidia.com/gpu', owner='ReplicaSet'),
            ds_pod('static', gpu='nvidia.com/gpu', annotations={drain.MIRROR_ANNOTATION: 'x'}),
            ds_pod('client', gpu='nvidia.com/gpu', node_selector={DP: 'true'})]
    found = drain.daemonset_gpu_pods_of(pods, ['nvidia.com/gpu'], [DP])
    assert [(drain.pod_name(p), held) for p, held in found] == [
        ('default/agent', ['nvidia.com/gpu']), ('default/claims', ['ResourceClaim'])]
    # a client whose label is not paused stays counted
    assert 'default/client' in [drain.pod_name(p) for p, _h in drain.daemonset_gpu_pods_of(pods, ['nvidia.com/gpu'])]


@pytest.mark.parametrize('check_mode', [False, True])
def test_DRAX_13_a_gpu_daemonset_pod_refuses_the_drain_before_any_write(check_mode):
    pods = [ds_pod('agent', gpu='nvidia.com/gpu', ns='mon'), ds_pod('plain'), pod('train', gpu='nvidia.com/gpu', owner='ReplicaSet')]
    core = FakeCore(node({DP: 'true'}), pods)
    d = drainer(core, check_mode=check_mode)
    with pytest.raises(drain.DrainError) as err:
        d.drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1, pause_gpu_clients=False, force=False,
                mark={'annotation': 'gpuops.io/strategy-migration', 'value': 'dra'}, keep_gpu_daemonset_pods=False)
    msg = str(err.value)
    assert 'mon/agent (DaemonSet mon/agent-ds) holds nvidia.com/gpu' in msg and 'plain' not in msg
    assert 'nodeSelector or node affinity' in msg and 'keep_gpu_daemonset_pods=true' in msg
    assert err.value.done == [] and err.value.pods_left == ['mon/agent'] and d.actions == []
    assert set(c[0] for c in core.calls) == {'get', 'list'}  # not marked, not cordoned, nothing evicted


def test_DRAX_13_kept_as_today_by_default_and_without_a_gpu():
    # the default (kubectl --ignore-daemonsets): the GPU DaemonSet pod stays, the Deployment's pod is evicted
    core = FakeCore(node(), [ds_pod('agent', gpu='nvidia.com/gpu'), pod('train', gpu='nvidia.com/gpu', owner='ReplicaSet')])
    res = drainer(core).drain('n1', 'gpu', drain.DEFAULT_GPU_RESOURCES, 10, 1, pause_gpu_clients=False)
    assert res['kept'] == ['default/agent'] and res['evicted'] == ['default/train']
    # refusing: a DaemonSet pod that asks no GPU is kept as before
    core = FakeCore(node(), [ds_pod('plain'), pod('train', gpu='nvidia.com/gpu', owner='ReplicaSet')])
    res = drainer(core).drain('n1', 'all', drain.DEFAULT_GPU_RESOURCES, 10, 1, pause_gpu_clients=False,
                              keep_gpu_daemonset_pods=False)
    assert res['kept'] == ['default/plain'] and res['evicted'] == ['default/train']
