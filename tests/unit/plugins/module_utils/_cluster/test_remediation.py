# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop (issue #41), its cluster side: the quarantine plan, the
record, the release of exactly what the loop made, and the API calls on a fake API server (remediation_kube)."""
import copy
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import remediation_kube as rk
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import remediation_plan as plan
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_remediation

U0, U1 = 'GPU-00000000-0000-4000-8000-000000000000', 'GPU-11111111-1111-4111-8111-111111111111'


# ------------------------------------------------------------------------------------------------ plan
SLICE = {'spec': {'driver': 'gpu.nvidia.com', 'nodeName': 'n1', 'pool': {'name': 'n1'},
                  'devices': [{'name': 'gpu-0', 'attributes': {'uuid': {'string': U0}}},
                              {'name': 'gpu-1', 'attributes': {'uuid': {'string': U1}}}]}}
BAD = {U0: [{'id': 'xid_48', 'evidence': ['NVML event: Xid 48 on GPU 0']}]}


def test_REM_01_REM_03_dra_by_device_where_served_else_node():
    dra = plan.quarantine_plan('n1', BAD, [SLICE], True)
    assert dra == [{'uuid': U0, 'kind': 'dra', 'device': ['gpu.nvidia.com', 'n1', 'gpu-0'],
                    'rule': 'gpuops-n1-' + U0.lower(), 'why': ['xid_48']}]
    assert plan.quarantine_plan('n1', BAD, [SLICE], False)[0]['kind'] == 'node'      # 1.34: not served (REM-03)
    assert plan.quarantine_plan('n1', BAD, [], True)[0]['kind'] == 'node'            # device-plugin pool
    assert plan.quarantine_plan('n1', BAD, [SLICE], True, mode='node')[0]['kind'] == 'node'
    assert plan.quarantine_plan('n2', BAD, [SLICE], True)[0]['kind'] == 'node'       # another node's slice
    with pytest.raises(plan.PlanError, match='mode: dra, but GPU .* does not serve DeviceTaintRule'):
        plan.quarantine_plan('n1', BAD, [SLICE], False, mode='dra')
    with pytest.raises(plan.PlanError, match='is in no ResourceSlice of driver gpu.nvidia.com'):
        plan.quarantine_plan('n1', BAD, [], True, mode='dra')
    with pytest.raises(plan.PlanError, match="mode: 'pool' is not one of auto, dra, node"):
        plan.quarantine_plan('n1', BAD, [], True, mode='pool')
    rule = plan.device_taint_rule('r', ('gpu.nvidia.com', 'n1', 'gpu-0'), 'None', 'xid_48 and more!')
    assert rule['spec']['taint'] == {'key': plan.TAINT_KEY, 'value': 'xid_48-and-more', 'effect': 'None'}


def test_REM_04_holders_dra_claims_and_device_plugin_allocations():
    claims = [{'metadata': {'namespace': 'ml', 'name': 'c0'},
               'status': {'allocation': {'devices': {'results': [
                   {'driver': 'gpu.nvidia.com', 'pool': 'n1', 'device': 'gpu-0', 'request': 'gpu'}]}},
                   'reservedFor': [{'resource': 'pods', 'name': 'train-0', 'uid': 'x'}]}},
              {'metadata': {'namespace': 'ml', 'name': 'c1'},
               'status': {'allocation': {'devices': {'results': [
                   {'driver': 'gpu.nvidia.com', 'pool': 'n1', 'device': 'gpu-1', 'request': 'gpu'}]}},
                   'reservedFor': [{'resource': 'pods', 'name': 'train-1', 'uid': 'y'}]}}]
    assert plan.dra_holders(claims, ('gpu.nvidia.com', 'n1', 'gpu-0')) == [('ml', 'train-0')]
    allocs = [{'namespace': 'a', 'name': 'p0', 'devices': [U0]}, {'namespace': 'a', 'name': 'p1', 'devices': [U1]}]
    assert plan.device_plugin_holders(allocs, U1) == [('a', 'p1')]


def test_REM_08_release_takes_back_only_what_the_record_says():
    site = {'key': 'site/maintenance', 'effect': 'NoSchedule'}
    ours = plan.node_taint('xid_48')
    node = {'metadata': {}, 'spec': {'unschedulable': True, 'taints': [site, ours]}}
    rec = {'gpus': {U0: {'kind': 'node', 'rule': None}, U1: {'kind': 'dra', 'rule': 'r1'}}, 'tainted': True}
    ch = plan.release_changes(node, rec)
    # the cordon was the site's (not recorded): it stays; our taint goes
    assert ch['untaint'] and not ch['uncordon'] and ch['rules'] == ['r1'] and ch['record'] is None
    # releasing only the DRA GPU keeps the node-level quarantine of the other
    part = plan.release_changes(node, rec, [U1])
    assert part['rules'] == ['r1'] and not part['untaint'] and part['record']['gpus'] == {U0: {'kind': 'node', 'rule': None}}
    with pytest.raises(plan.PlanError, match='is not JSON'):
        plan.read_record({'metadata': {'annotations': {plan.RECORD_ANNOTATION: 'site text'}}})
    assert plan.node_changes(node, {}, ['node'])['site_cordoned'] is True


# ------------------------------------------------------------------------------------------------ the API calls
class ApiError(Exception):
    def __init__(self, status):
        super(ApiError, self).__init__('status %d' % status)
        self.status = status


class FakeApi(object):
    """A few API paths in memory; ``calls`` lists the writes as (method, path)."""

    def __init__(self, node, slices=(), claims=(), served=True, pdb_refuses=()):
        self.node = node
        self.slices = list(slices)
        self.claims = list(claims)
        self.rules = {}
        self.served = served
        self.pdb_refuses = set(pdb_refuses)
        self.calls = []
        self.evicted = []

    def call(self, method, path, query=None, body=None, content_type=None):
        if method != 'GET':
            self.calls.append((method, path))
        name = path.rsplit('/', 1)[-1]
        if path == '/api/v1/nodes/' + self.node['metadata']['name']:
            if method == 'PATCH':
                _merge(self.node, body)
            return copy.deepcopy(self.node)
        if path == '/apis/resource.k8s.io/v1':
            if not self.served:
                return {'resources': [{'name': 'resourceslices'}]}
            return {'resources': [{'name': 'resourceslices'}, {'name': 'devicetaintrules'}]}
        if path == rk.SLICES:
            return {'items': self.slices}
        if path == rk.CLAIMS:
            return {'items': self.claims}
        if path == rk.RULES and method == 'POST':
            rule = copy.deepcopy(body)
            rule['metadata']['generation'] = 1
            rule['status'] = {'conditions': [{'type': 'EvictionInProgress', 'observedGeneration': 1, 'reason': 'NoEffect',
                                              'message': '1 pod would be evicted in 1 namespace'}]}
            self.rules[rule['metadata']['name']] = rule
            return rule
        if path.startswith(rk.RULES + '/'):
            if name not in self.rules:
                raise ApiError(404)
            if method == 'PATCH':
                _merge(self.rules[name], body)
            if method == 'DELETE':
                return self.rules.pop(name)
            return copy.deepcopy(self.rules[name])
        if path.endswith('/eviction'):
            ns, pod = path.split('/')[4], path.split('/')[6]
            if (ns, pod) in self.pdb_refuses:
                raise ApiError(429)
            self.evicted.append('%s/%s' % (ns, pod))
            return {}
        if path.endswith('/events'):
            return body
        raise AssertionError('unexpected %s %s' % (method, path))


def _merge(target, patch):
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def node(taints=None, unschedulable=False):
    return {'metadata': {'name': 'n1', 'annotations': {}}, 'spec': dict(
        {'taints': taints} if taints else {}, **({'unschedulable': True} if unschedulable else {}))}


CLAIMS = [{'metadata': {'namespace': 'ml', 'name': 'c0'},
           'status': {'allocation': {'devices': {'results': [{'driver': 'gpu.nvidia.com', 'pool': 'n1', 'device': 'gpu-0'}]}},
                      'reservedFor': [{'resource': 'pods', 'name': 'train-0'}]}}]


def run(api, check=False):
    worker = rk.Remediator(api, 'n1', check_mode=check, sleep=lambda s: None, clock=lambda: 1000.0)
    entries, diff = worker.quarantine(BAD, 'auto', 'NoSchedule', 'gpu.nvidia.com', 5)
    evicted, left = worker.drain(worker.holders(entries), 0)
    return worker, entries, diff, evicted, left


def test_REM_02_REM_08_dra_quarantine_dry_run_then_effect_drain_only_holders_rerun_writes_nothing():
    api = FakeApi(node(), [SLICE], CLAIMS)
    w, entries, diff, evicted, left = run(api)
    name = entries[0]['rule']
    assert w.actions[:2] == ['create DeviceTaintRule %s (effect None: dry run) for gpu.nvidia.com/n1/gpu-0' % name,
                             'set DeviceTaintRule %s effect NoSchedule' % name]
    assert w.dry_runs == {name: '1 pod would be evicted in 1 namespace'}
    assert api.rules[name]['spec']['taint']['effect'] == 'NoSchedule'
    assert evicted == ['ml/train-0'] and left == [] and api.evicted == ['ml/train-0']
    rec = json.loads(api.node['metadata']['annotations'][plan.RECORD_ANNOTATION])
    assert rec['gpus'][U0]['why'] == ['xid_48'] and rec['gpus'][U0]['since'] == '1970-01-01T00:16:40Z'
    assert 'tainted' not in rec and not api.node['spec'].get('unschedulable')     # DRA: the node stays in service
    assert [e['reason'] for e in w.events] == ['GPUQuarantined']
    assert diff['before']['rules'] == [] and diff['after']['rules'] == [name]
    # a re-run: nothing written (the holder is gone)
    api.claims = []
    api.calls = []
    w2, _e, _d, evicted2, _l = run(api)
    assert w2.actions == [] and api.calls == [] and evicted2 == []
    # release: the rule and the record go, an Event stays
    rel = rk.Remediator(api, 'n1', clock=lambda: 2000.0)
    released, diff = rel.release()
    assert released == [U0] and api.rules == {} and plan.RECORD_ANNOTATION not in api.node['metadata']['annotations']
    assert [e['reason'] for e in rel.events] == ['GPUReleased']
    api.calls = []
    again = rk.Remediator(api, 'n1')
    assert again.release(keep=[U0])[0] == []
    assert again.release()[0] == [] and api.calls == []


def test_REM_05_node_level_fallback_keeps_the_sites_taint_and_cordon():
    site = {'key': 'site/maintenance', 'value': 'x', 'effect': 'NoSchedule'}
    api = FakeApi(node([site], unschedulable=True), [SLICE], CLAIMS, served=False)
    w, entries, diff, evicted, left = run(api)
    assert entries[0]['kind'] == 'node'
    assert rk.Remediator(api, 'n1').release(keep=[U0])[0] == []       # still unhealthy: stays quarantined
    assert api.node['spec']['taints'] == [site, plan.node_taint('xid_48')]
    rec = json.loads(api.node['metadata']['annotations'][plan.RECORD_ANNOTATION])
    assert rec['tainted'] is True and 'cordoned' not in rec       # the cordon was the site's
    assert evicted == []                                          # holders unknown without allocations
    rk.Remediator(api, 'n1').release()
    assert api.node['spec']['taints'] == [site] and api.node['spec']['unschedulable'] is True


def test_REM_05_node_level_cordon_and_uncordon_of_our_own():
    api = FakeApi(node(), [], [], served=True)
    w, entries, diff, evicted, left = run(api)
    assert api.node['spec']['unschedulable'] is True and diff['after']['unschedulable'] is True
    w = rk.Remediator(api, 'n1', sleep=lambda s: None, clock=lambda: 1.0)
    holders = w.holders(entries, [{'namespace': 'a', 'name': 'p0', 'devices': [U0]},
                                  {'namespace': 'a', 'name': 'p1', 'devices': [U1]}])
    assert holders == {U0: [('a', 'p0')]}
    rk.Remediator(api, 'n1').release()
    assert api.node['spec']['unschedulable'] is False and api.node['spec']['taints'] == []


def test_REM_04_REM_08_check_mode_writes_nothing_and_pdb_refusal_is_reported():
    api = FakeApi(node(), [SLICE], CLAIMS)
    w, entries, diff, evicted, left = run(api, check=True)
    assert api.calls == [] and len(w.actions) == 4 and w.actions[-1] == 'evict pod ml/train-0'
    assert diff['after']['rules'] == [entries[0]['rule']]
    api = FakeApi(node(), [SLICE], CLAIMS, pdb_refuses=[('ml', 'train-0')])
    w, entries, diff, evicted, left = run(api)
    assert evicted == [] and left == ['ml/train-0'] and 'evict pod ml/train-0' not in w.actions


def test_REM_08_a_rule_that_is_not_ours_is_refused():
    api = FakeApi(node(), [SLICE], CLAIMS)
    name = plan.rule_name('n1', U0)
    api.rules[name] = {'metadata': {'name': name, 'labels': {}}, 'spec': {'taint': {'effect': 'NoExecute'}}}
    with pytest.raises(plan.PlanError, match='is not managed by gpuops.k8s_gpu.gpu_remediation'):
        run(api)
    assert api.calls == []


def test_REM_09_bad_input_is_named_before_anything_changes():
    base = {'gpus': {}, 'uuids': [], 'dry_run_timeout': 15, 'drain_timeout': 300}
    assert gpu_remediation.check_params(base) is None
    assert "gpus: 'gpu0' is not a GPU UUID" in gpu_remediation.check_params(dict(base, gpus={'gpu0': {}}))
    assert 'needs findings' in gpu_remediation.check_params(dict(base, gpus={U0: {'findings': []}}))
    assert 'is not a doctor finding' in gpu_remediation.check_params(dict(base, gpus={U0: {'findings': ['x']}}))
    assert "uuids: 'x' is not a GPU UUID" in gpu_remediation.check_params(dict(base, uuids=['x']))
    assert 'drain_timeout: -1 must be 0 or more' in gpu_remediation.check_params(dict(base, drain_timeout=-1))


def test_REM_14_holders_from_the_checkpoint_by_pod_uid():
    """gpu_device_allocations' entries (pod_uid, devices): the node's pods name them; a UID gone holds nothing."""
    pods = [{'metadata': {'namespace': 'a', 'name': 'p0', 'uid': 'u0'}},
            {'metadata': {'namespace': 'a', 'name': 'p1', 'uid': 'u1'}}]
    allocs = [{'pod_uid': 'u0', 'devices': [U0]}, {'pod_uid': 'u1', 'devices': [U1]},
              {'pod_uid': 'gone', 'devices': [U0]}]
    assert plan.device_plugin_holders(allocs, U0, pods) == [('a', 'p0')]
    assert plan.device_plugin_holders(allocs, U1, pods) == [('a', 'p1')]

    class PodsApi(FakeApi):
        def call(self, method, path, query=None, body=None, content_type=None):
            if path == '/api/v1/pods':
                assert query == [('fieldSelector', 'spec.nodeName=n1')]
                return {'items': pods}
            return FakeApi.call(self, method, path, query, body, content_type)
    api = PodsApi(node(), [], [], served=True)
    w, entries, diff, evicted, left = run(api)
    w = rk.Remediator(api, 'n1', sleep=lambda s: None, clock=lambda: 1.0)
    holders = w.holders(entries, allocs)
    assert holders == {U0: [('a', 'p0')]}
    assert w.drain(holders, 0) == (['a/p0'], []) and api.evicted == ['a/p0']


@pytest.mark.parametrize('allocs', [[{'devices': [U0]}], [{'pod_uid': 'u0'}], [{'pod_uid': 'u0', 'devices': U0}]])
def test_REM_14_an_allocation_without_a_pod_or_devices_is_refused(allocs):
    assert plan.allocations_error(allocs).startswith('allocations[0]: ')
    assert plan.allocations_error([{'pod_uid': 'u0', 'devices': [U0]}, {'namespace': 'a', 'name': 'p', 'devices': []}]) is None
