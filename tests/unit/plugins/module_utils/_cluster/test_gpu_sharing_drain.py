# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node_drain's decisions and API calls (module_utils gpu_sharing_drain), with a fake CoreV1Api."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain

DP = 'nvidia.com/gpu.deploy.device-plugin'
DCGM = 'nvidia.com/gpu.deploy.dcgm-exporter'


def pod(name, ns='default', gpu=None, owner=None, node_selector=None, phase='Running', annotations=None, uid=None):
    p = {'metadata': {'name': name, 'namespace': ns, 'uid': uid or 'uid-' + name},
         'spec': {'nodeName': 'n1', 'containers': [{'name': 'c'}]}, 'status': {'phase': phase}}
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
    def __init__(self, status):
        super(ApiErr, self).__init__('HTTP %s' % status)
        self.status = status


class FakeCore(object):
    """Nodes and pods in memory; ``controller`` runs after each pod list (a DaemonSet controller stand-in)."""

    def __init__(self, node, pods, pdb=()):
        self.nodes = {node['metadata']['name']: node} if node else {}
        self.pods = pods
        self.pdb = set(pdb)
        self.calls = []

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

    def list_pod_for_all_namespaces(self, field_selector, _preload_content=False):
        self.calls.append(('list', field_selector))
        listed = Resp({'items': copy.deepcopy(self.pods)})
        # the DaemonSet controller, a little later: pods whose nodeSelector the node no longer matches go
        labels = self.nodes['n1']['metadata'].get('labels') or {} if 'n1' in self.nodes else {}
        self.pods = [p for p in self.pods if all(labels.get(k) == v for k, v in
                                                 ((p.get('spec') or {}).get('nodeSelector') or {}).items())]
        return listed

    def create_namespaced_pod_eviction(self, name, namespace, body, _preload_content=True):
        assert _preload_content is False
        self.calls.append(('evict', '%s/%s' % (namespace, name), body['kind'], body['apiVersion']))
        if '%s/%s' % (namespace, name) in self.pdb:
            raise ApiErr(429)
        self.pods = [p for p in self.pods if (p['metadata']['namespace'], p['metadata']['name']) != (namespace, name)]


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
