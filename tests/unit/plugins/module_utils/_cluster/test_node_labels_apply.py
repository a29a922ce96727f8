# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node_labels_apply's engine on a fake CoreV1Api: one merge patch per node, dry run in check mode."""
import copy
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import node_labels_apply as L


class Raw(object):
    """What the client returns with _preload_content=False: the response body as bytes in .data."""

    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class FakeCore(object):
    """A CoreV1Api stand-in: read_node / patch_node with JSON merge patch semantics on metadata."""

    def __init__(self, nodes, fail_on=None):
        self.nodes = nodes
        self.calls = []
        self.fail_on = fail_on

    def read_node(self, name, **kwargs):
        self.calls.append(('read', name))
        assert kwargs == {'_preload_content': False}
        return Raw(self.nodes[name])

    def patch_node(self, name, body, **kwargs):
        self.calls.append(('patch', name, copy.deepcopy(body), kwargs))
        if name == self.fail_on:
            raise RuntimeError('admission webhook said no')
        node = copy.deepcopy(self.nodes[name])
        for part in ('labels', 'annotations'):
            have = node['metadata'].setdefault(part, {})
            for k, v in (body['metadata'].get(part) or {}).items():
                if v is None:
                    have.pop(k, None)
                else:
                    have[k] = v
        if kwargs.get('dry_run') != 'All':
            self.nodes[name] = node
        return Raw(node)


def nodes():
    return {'a': {'metadata': {'name': 'a', 'labels': {'team': 'ml', 'gpuops.io/old': 'x'}}},
            'b': {'metadata': {'name': 'b', 'labels': {}, 'annotations': {'keep': '1'}}}}


def patch(node, labels, annotations=None):
    meta = {'name': node, 'labels': labels}
    if annotations is not None:
        meta['annotations'] = annotations
    return {'node': node, 'patch': {'apiVersion': 'v1', 'kind': 'Node', 'metadata': meta}}


def test_merge_patch_per_node_labels_and_annotations_only():
    api = FakeCore(nodes())
    res = L.apply(api, [patch('a', {'gpuops.io/old': None, 'gpuops.io/pool': 'p'}), patch('b', {'x': 'y'}, {'n': 'v'})])
    assert [r['node'] for r in res] == ['a', 'b'] and all(r['changed'] for r in res)
    patches = [c for c in api.calls if c[0] == 'patch']
    assert patches[0][2] == {'metadata': {'labels': {'gpuops.io/old': None, 'gpuops.io/pool': 'p'}}}
    assert patches[0][3] == {'_content_type': 'application/merge-patch+json', '_preload_content': False}
    assert api.nodes['a']['metadata']['labels'] == {'team': 'ml', 'gpuops.io/pool': 'p'}
    assert api.nodes['b']['metadata']['annotations'] == {'keep': '1', 'n': 'v'}
    assert res[0]['diff']['before']['labels'] == {'team': 'ml', 'gpuops.io/old': 'x'}
    assert res[0]['diff']['after']['labels'] == {'team': 'ml', 'gpuops.io/pool': 'p'}


def test_check_mode_sends_dry_run_and_stores_nothing():
    api = FakeCore(nodes())
    before = copy.deepcopy(api.nodes)
    res = L.apply(api, [patch('a', {'gpuops.io/pool': 'p'})], check_mode=True)
    assert res[0]['changed'] and res[0]['diff']['after']['labels']['gpuops.io/pool'] == 'p'
    assert [c[3].get('dry_run') for c in api.calls if c[0] == 'patch'] == ['All']
    assert api.nodes == before


def test_a_patch_that_changes_nothing_is_not_changed():
    api = FakeCore(nodes())
    assert L.apply(api, [patch('a', {'team': 'ml'})])[0]['changed'] is False


def test_a_failed_patch_names_the_node_and_keeps_what_was_done():
    api = FakeCore(nodes(), fail_on='b')
    with pytest.raises(L.PatchError) as e:
        L.apply(api, [patch('a', {'z': '1'}), patch('b', {'z': '1'})])
    assert 'node b' in str(e.value) and 'admission webhook said no' in str(e.value)
    assert [r['node'] for r in e.value.results] == ['a']


@pytest.mark.parametrize('item, words', [
    ({'patch': {'metadata': {}}}, 'no node name'),
    ({'node': 'a', 'patch': {}}, 'no patch.metadata'),
    ({'node': 'a', 'patch': {'metadata': {'labels': {}, 'finalizers': []}}}, 'metadata.finalizers'),
])
def test_bad_patches_are_refused_before_any_request(item, words):
    problems = L.check_patches([item])
    assert len(problems) == 1 and words in problems[0]


def test_good_patches_pass_the_check():
    assert L.check_patches([patch('a', {'k': 'v'}, {'n': 'v'})]) == []


# ---- plan mode: read, plan and patch in one module run (role gpu_node_labels) ----------------------------------------
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import label_plan  # noqa: E402

OPTIONS = {'state': 'present', 'strategy_label': 'gpuops.io/sharing-strategy',
           'record_annotation': 'gpuops.io/managed-labels', 'check_resources': True, 'fail_on_missing_nodes': True}


class ListingCore(FakeCore):
    def list_node(self, **kwargs):
        self.calls.append(('list',))
        assert kwargs == {'_preload_content': False}
        return Raw({'kind': 'NodeList', 'items': [self.nodes[n] for n in sorted(self.nodes)]})


def static(*entries):
    return {'nodes': [{'host': h, 'node': n, 'strategy': s, 'pools': ['p'], 'labels': labels, 'defaults': {},
                       'claimed': []} for h, n, s, labels in entries], 'errors': []}


def test_plan_mode_reads_once_plans_like_the_filter_and_patches_only_what_differs():
    api = ListingCore(nodes())
    plan_in = static(('host-a', 'a', 'time-slicing', {'gpuops.io/sharing-strategy': 'time-slicing'}),
                     ('host-b', 'b', 'time-slicing', {'gpuops.io/sharing-strategy': 'time-slicing'}))
    expected = label_plan.label_live_plan(plan_in, [nodes()['a'], nodes()['b']], **OPTIONS)
    plan, results = L.plan_and_apply(api, plan_in, OPTIONS)
    assert plan == expected
    assert api.calls[0] == ('list',) and [c[0] for c in api.calls].count('list') == 1
    assert [r['node'] for r in results] == ['a', 'b'] and all(r['changed'] for r in results)
    assert api.nodes['a']['metadata']['labels']['gpuops.io/sharing-strategy'] == 'time-slicing'
    # again: the plan finds nothing to change, so nothing is patched (one list request only)
    api.calls = []
    plan, results = L.plan_and_apply(api, plan_in, OPTIONS)
    assert results == [] and api.calls == [('list',)]
    assert not any(n['changed'] for n in plan['nodes'])


def test_plan_mode_refuses_conflicts_before_any_patch():
    api = ListingCore(nodes())
    api.nodes['a']['metadata']['labels']['gpuops.io/sharing-strategy'] = 'hami'  # set by someone else, no record
    plan_in = static(('host-a', 'a', 'time-slicing', {'gpuops.io/sharing-strategy': 'time-slicing'}),
                     ('host-b', 'b', 'time-slicing', {'gpuops.io/sharing-strategy': 'time-slicing'}),
                     ('host-c', 'c', 'time-slicing', {}))
    plan, results = L.plan_and_apply(api, plan_in, OPTIONS)
    assert results is None and api.calls == [('list',)]
    assert any('node c is not in the cluster' in e for e in plan['errors']), plan['errors']
    assert len(plan['errors']) >= 2, plan['errors']


def test_plan_mode_check_mode_is_a_dry_run():
    api = ListingCore(nodes())
    before = copy.deepcopy(api.nodes)
    plan, results = L.plan_and_apply(api, static(('h', 'b', 'mps', {'x': 'y'})), OPTIONS, check_mode=True)
    assert [r['changed'] for r in results] == [True]
    assert [c[3].get('dry_run') for c in api.calls if c[0] == 'patch'] == ['All']
    assert api.nodes == before


def test_plan_mode_names_a_failed_list():
    class Broken(ListingCore):
        def list_node(self, **kwargs):
            raise RuntimeError('connection refused')
    with pytest.raises(L.PatchError) as e:
        L.plan_and_apply(Broken(nodes()), static(), OPTIONS)
    assert str(e.value) == 'reading the nodes failed: connection refused' and e.value.results == []


@pytest.mark.parametrize('plan, message', [
    (None, 'plan must be the output of the filter gpuops.k8s_gpu.node_labels_plan'),
    ({'nodes': 'a'}, 'plan must be the output'),
    ({'nodes': [{'host': 'h'}]}, 'plan.nodes[0] has no host or node name'),
    ({'nodes': [{'host': 'h', 'node': 'n', 'labels': ['x']}]}, 'plan.nodes[0] (node n): labels and defaults must be'),
    ({'nodes': [], 'errors': ['h: bad pool']}, 'h: bad pool'),
])
def test_check_plan(plan, message):
    assert any(message in p for p in L.check_plan(plan)), L.check_plan(plan)
    assert L.check_plan(static(('h', 'n', 'mps', {}))) == []


class StatusCore(ListingCore):
    """Also the status subresource, with JSON patch (remove) semantics."""

    def patch_node_status(self, name, ops, **kwargs):
        self.calls.append(('patch_status', name, copy.deepcopy(ops), kwargs))
        assert kwargs['_content_type'] == 'application/json-patch+json'
        node = copy.deepcopy(self.nodes[name])
        for op in ops:
            assert op['op'] == 'remove'
            dummy, top, field, key = op['path'].split('/')
            del node[top][field][key.replace('~1', '/').replace('~0', '~')]
        if kwargs.get('dry_run') != 'All':
            self.nodes[name] = node
        return Raw(node)


SL = 'gpuops.io/sharing-strategy'


def absent_clears(strategy, status, annotations):
    """Issue #37 item 6: gpushare's and Volcano's device plugins patch their GPU count into the Node's status, HAMi's
    and Volcano's vGPU plugin annotate the Node; none of it goes with their DaemonSets, and gpu_node_labels then
    refused the node for the next strategy. State absent clears exactly that (gpu_strategy.node_state)."""
    api = StatusCore({'n': {'metadata': {'name': 'n', 'labels': {'team': 'ml'}, 'annotations': {'keep': '1'}},
                            'status': {'capacity': {'cpu': '8'}, 'allocatable': {'cpu': '8'}}}})
    plan, results = L.plan_and_apply(api, static(('n', 'n', strategy, {SL: strategy})), OPTIONS)
    assert not plan['errors'] and results[0]['changed']
    # what the stack's agents write while they run
    node = api.nodes['n']
    node['metadata']['annotations'].update(annotations)
    for field in ('capacity', 'allocatable'):
        node['status'][field].update(status)
    # the next strategy is refused while it is there
    plan, results = L.plan_and_apply(api, static(('n', 'n', 'time-slicing', {SL: 'time-slicing'})), OPTIONS)
    assert results is None and plan['errors'], plan
    # state absent of the pool: labels, record, and what the agents left (only theirs: cpu, keep stay)
    absent = dict(OPTIONS, state='absent')
    plan, results = L.plan_and_apply(api, static(('n', 'n', strategy, {})), absent, check_mode=True)
    assert results[0]['changed'] and api.nodes['n'] is node  # check mode: dry runs only
    plan, results = L.plan_and_apply(api, static(('n', 'n', strategy, {})), absent)
    node = api.nodes['n']
    assert node['metadata']['annotations'] == {'keep': '1'}
    left = dict((r, q) for r, q in status.items() if r in ('aliyun.com/gpu-mem', 'nvidia.com/gpu'))
    for field in ('capacity', 'allocatable'):
        assert node['status'][field] == dict({'cpu': '8'}, **left), field  # the kubelet's own resources are its
    want = ['annotation %s' % a for a in annotations]
    want += ['status.%s %s' % (f, r) for r in status if r not in left for f in ('capacity', 'allocatable')]
    assert sorted(results[0]['cleared']) == sorted(want)
    # a re-run finds nothing to do, and the next strategy is no longer refused over it
    plan, results = L.plan_and_apply(api, static(('n', 'n', strategy, {})), absent)
    assert results == []
    if strategy != 'hami':
        for field in ('capacity', 'allocatable'):
            node['status'][field] = {'cpu': '8'}  # the kubelet drops a device plugin's resources once it is gone
    plan, results = L.plan_and_apply(api, static(('n', 'n', 'time-slicing', {SL: 'time-slicing'})), OPTIONS)
    assert not plan['errors'] and results[0]['changed']


def test_GSH_12_absent_clears_what_the_stack_agents_left_on_the_node_so_another_strategy_is_not_refused():
    absent_clears('gpushare', {'aliyun.com/gpu-count': '1', 'aliyun.com/gpu-mem': '15'}, {})


def test_VOL_16_absent_clears_what_the_stack_agents_left_on_the_node_so_another_strategy_is_not_refused():
    absent_clears('volcano', {'volcano.sh/gpu-number': '1'},
                  {'volcano.sh/node-vgpu-register': 'x', 'volcano.sh/node-vgpu-handshake': 'y',
                   'volcano.sh/mutex.lock': '2026-11-29T00:00:00Z'})


def test_HAMI_17_absent_clears_what_the_stack_agents_left_on_the_node_so_another_strategy_is_not_refused():
    absent_clears('hami', {'nvidia.com/gpu': '0'},
                  {'hami.io/node-nvidia-register': 'GPU-1,10,15360,100,NVIDIA-Tesla T4,0,true:',
                   'hami.io/node-handshake': 'Reported now', 'hami.io/node-nvidia-score': '[]'})


def test_absent_clears_the_mig_managers_state_label_and_keeps_other_labels():
    """Found by the lifecycle suite's ready step (lab/tests/integration/test_lifecycle_suite_real.py): NVIDIA's MIG
    manager reports the geometry in nvidia.com/mig.config.state (what the ready step waits for) and the label outlived
    the mig pool's uninstall. State absent removes it, and only it (a site's own labels stay)."""
    api = StatusCore({'n': {'metadata': {'name': 'n', 'labels': {'team': 'ml'}, 'annotations': {}},
                            'status': {'capacity': {'cpu': '8'}, 'allocatable': {'cpu': '8'}}}})
    plan, results = L.plan_and_apply(api, static(('n', 'n', 'mig', {SL: 'mig'})), OPTIONS)
    assert not plan['errors'] and results[0]['changed']
    api.nodes['n']['metadata']['labels']['nvidia.com/mig.config.state'] = 'success'  # the MIG manager's report
    plan, results = L.plan_and_apply(api, static(('n', 'n', 'mig', {})), dict(OPTIONS, state='absent'))
    assert results[0]['cleared'] == ['label nvidia.com/mig.config.state']
    assert api.nodes['n']['metadata']['labels'] == {'team': 'ml'}
    assert L.plan_and_apply(api, static(('n', 'n', 'mig', {})), dict(OPTIONS, state='absent'))[1] == []
    # a pool of another strategy leaves the label alone (it is not its agents')
    api.nodes['n']['metadata']['labels'].update({SL: 'time-slicing', 'nvidia.com/mig.config.state': 'success'})
    plan, results = L.plan_and_apply(api, static(('n', 'n', 'time-slicing', {})), dict(OPTIONS, state='absent'))
    assert 'nvidia.com/mig.config.state' in api.nodes['n']['metadata']['labels']
