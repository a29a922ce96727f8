# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop (issue #41), its cluster side: the quarantine plan, the
record, the release of exactly what the loop made, and the API calls on a fake API server (remediation/kube)."""
import copy
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import kube as rk
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import plan
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
        # (namespace, name) -> the pods a GET of that name answers after its eviction, one per GET (then 404):
        # a pod still terminating, or its replacement (another uid)
        self.after_eviction = {}

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
        parts = path.split('/')
        if method == 'GET' and len(parts) == 7 and parts[:4] == ['', 'api', 'v1', 'namespaces'] and parts[5] == 'pods':
            ns, pod = parts[4], parts[6]
            if '%s/%s' % (ns, pod) not in self.evicted:
                return {'metadata': {'namespace': ns, 'name': pod, 'uid': 'uid-' + pod}, 'status': {'phase': 'Running'}}
            answers = self.after_eviction.get((ns, pod)) or []
            if answers:
                return answers.pop(0)
            raise ApiError(404)
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


# ------------------------------------------------------------------------------------------------ validate, restart
VALIDATE = {'image': 'gpuops.lab/gpu-check:1', 'command': ['gpu-check'], 'namespace': 'ops', 'timeout': 30,
            'resource': 'nvidia.com/gpu'}


def _gpu_pod(name, n, phase='Running'):
    return {'metadata': {'namespace': 'a', 'name': name}, 'status': {'phase': phase},
            'spec': {'containers': [{'resources': {'limits': {'nvidia.com/gpu': str(n)}}}]}}


def test_REM_16_free_units_and_the_validation_objects_per_kind():
    n = {'status': {'allocatable': {'nvidia.com/gpu': '4'}, 'capacity': {'nvidia.com/gpu': '4'}}}
    init = {'metadata': {}, 'status': {}, 'spec': {
        'containers': [{'resources': {'requests': {'nvidia.com/gpu': 1}}}],
        'initContainers': [{'resources': {'limits': {'nvidia.com/gpu': 2}}}]}}
    pods = [_gpu_pod('p0', 1), _gpu_pod('p1', 2, 'Succeeded'), init]
    assert plan.free_units(n, pods, 'nvidia.com/gpu') == 1            # 4 - 1 - max(1, init 2); the ended pod frees
    assert plan.free_units({}, [], 'nvidia.com/gpu') == 0
    node_entry = {'uuid': U0, 'kind': 'node', 'device': None}
    objs = plan.validation_objects(node_entry, 'n1', 'ops', 'img:1', ['gpu-check'], count=3,
                                   tolerations=[{'key': 'site', 'operator': 'Exists'}], runtime_class='nvidia',
                                   volumes=[{'name': 'd', 'hostPath': {'path': '/x'}}],
                                   volume_mounts=[{'name': 'd', 'mountPath': '/y'}])
    assert [o['kind'] for o in objs] == ['Pod']
    spec = objs[0]['spec']
    assert spec['nodeName'] == 'n1' and 'affinity' not in spec and spec['runtimeClassName'] == 'nvidia'
    ctr = spec['containers'][0]
    assert ctr['resources'] == {'limits': {'nvidia.com/gpu': '3'}} and ctr['command'] == ['gpu-check']
    assert {'name': plan.UUID_ENV, 'value': U0} in ctr['env'] and ctr['volumeMounts'] == [{'name': 'd', 'mountPath': '/y'}]
    assert spec['volumes'] == [{'name': 'd', 'hostPath': {'path': '/x'}}]
    assert spec['tolerations'] == [{'key': plan.TAINT_KEY, 'operator': 'Exists'}, {'key': 'site', 'operator': 'Exists'}]
    assert objs[0]['metadata']['name'] == 'gpuops-validate-n1-' + U0.lower()
    assert objs[0]['metadata']['labels']['app.kubernetes.io/managed-by'] == plan.MANAGED_BY
    dra = plan.validation_objects({'uuid': U1, 'kind': 'dra', 'device': ['gpu.nvidia.com', 'n1', 'gpu-1']}, 'n1',
                                  'ops', 'img:1')
    claim, pod = dra
    req = claim['spec']['devices']['requests'][0]['exactly']
    assert claim['kind'] == 'ResourceClaim' and req['deviceClassName'] == 'gpu.nvidia.com' and req['count'] == 1
    assert req['selectors'][0]['cel']['expression'] == \
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].uuid == "%s"' % U1
    assert req['tolerations'] == [{'key': plan.TAINT_KEY, 'operator': 'Exists'}]       # the rule stays till release
    assert 'nodeName' not in pod['spec'] and pod['spec']['resourceClaims'] == [
        {'name': 'gpu', 'resourceClaimName': claim['metadata']['name']}]
    assert pod['spec']['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution'][
        'nodeSelectorTerms'][0]['matchFields'][0] == {'key': 'metadata.name', 'operator': 'In', 'values': ['n1']}
    assert {'key': plan.UNSCHEDULABLE_TAINT, 'operator': 'Exists', 'effect': 'NoSchedule'} in pod['spec']['tolerations']
    assert 'command' not in pod['spec']['containers'][0]            # the image's own (the CUDA sample)


def test_REM_16_verdicts():
    assert plan.validation_verdict({'status': {'phase': 'Succeeded'}})[0] == 'passed'
    v = plan.validation_verdict({'status': {'phase': 'Failed', 'containerStatuses': [
        {'state': {'terminated': {'exitCode': 1, 'reason': 'Error'}}}]}})
    assert v == ('failed', 'the check exited 1 (Error)')
    v = plan.validation_verdict({'status': {'phase': 'Failed', 'reason': 'UnexpectedAdmissionError',
                                            'message': 'Allocate failed'}})
    assert v == ('failed', 'the pod failed: UnexpectedAdmissionError - Allocate failed')
    v = plan.validation_verdict({'status': {'phase': 'Pending', 'containerStatuses': [
        {'state': {'waiting': {'reason': 'ImagePullBackOff', 'message': 'not found'}}}]}})
    assert v == ('failed', 'the container cannot start: ImagePullBackOff - not found')
    assert plan.validation_verdict({'status': {'phase': 'Pending'}})[0] == 'running'
    assert plan.validation_verdict({})[0] == 'running'


def test_REM_16_bad_validate_settings_are_named():
    base = {'gpus': {}, 'uuids': [], 'dry_run_timeout': 15, 'drain_timeout': 300, 'device_plugin_timeout': 120}
    assert gpu_remediation.check_params(dict(base, validate=dict(VALIDATE))) is None
    assert 'must pin a tag other than latest' in gpu_remediation.check_params(
        dict(base, validate=dict(VALIDATE, image='nvcr.io/nvidia/k8s/cuda-sample')))
    assert 'must pin a tag other than latest' in gpu_remediation.check_params(
        dict(base, validate=dict(VALIDATE, image='busybox:latest')))
    assert "validate.timeout: 0 must be a positive" in gpu_remediation.check_params(
        dict(base, validate=dict(VALIDATE, timeout=0)))
    assert "validate.namespace: 'Ops' is not a namespace" in gpu_remediation.check_params(
        dict(base, validate=dict(VALIDATE, namespace='Ops')))
    assert 'device_plugin_timeout: -1' in gpu_remediation.check_params(dict(base, device_plugin_timeout=-1))


class ClusterApi(FakeApi):
    """FakeApi with pods: the validation pod ends as ``verdict`` says ('Succeeded', 'Failed') once read ``after``
    times; the device plugin's pod, deleted, comes back and the node's allocatable returns to its capacity."""

    def __init__(self, n, verdict='Succeeded', after=2, pods=(), **kw):
        FakeApi.__init__(self, n, **kw)
        self.pods = dict(((p['metadata']['namespace'], p['metadata']['name']), p) for p in pods)
        self.verdict, self.after, self.reads = verdict, after, 0

    def text(self, path, query=None):
        return 'GPU %s: NVIDIA A100\nPASS %s\n' % (U0, U0) if self.verdict == 'Succeeded' else 'FAIL volatile ECC: 2\n'

    def call(self, method, path, query=None, body=None, content_type=None):
        if path == '/api/v1/pods':
            items = list(self.pods.values())
            sel = dict(query or []).get('labelSelector')
            if sel:
                k, v = sel.split('=')
                items = [p for p in items if (p['metadata'].get('labels') or {}).get(k) == v]
            return {'items': copy.deepcopy(items)}
        if path.startswith('/api/v1/namespaces/') and '/pods' in path and not path.endswith('/events'):
            if method != 'GET':
                self.calls.append((method, path))
            parts = path.split('/')
            ns = parts[4]
            if method == 'POST':
                pod = copy.deepcopy(body)
                pod['status'] = {'phase': 'Pending'}
                self.pods[(ns, pod['metadata']['name'])] = pod
                return pod
            key = (ns, parts[6])
            if key not in self.pods:
                raise ApiError(404)
            if method == 'DELETE':
                gone = self.pods.pop(key)
                if (gone['metadata'].get('labels') or {}).get('app') == 'plugin':
                    self.node['status']['allocatable'] = dict(self.node['status']['capacity'])
                return {}
            pod = self.pods[key]
            if (pod['metadata'].get('labels') or {}).get(plan.VALIDATION_LABEL):
                self.reads += 1
                if self.reads >= self.after:
                    pod['status'] = {'phase': self.verdict, 'containerStatuses': [] if self.verdict == 'Succeeded' else [
                        {'state': {'terminated': {'exitCode': 1, 'reason': 'Error'}}}]}
            return copy.deepcopy(pod)
        return FakeApi.call(self, method, path, query, body, content_type)


def _quarantined(api):
    w = rk.Remediator(api, 'n1', sleep=lambda s: None, clock=lambda: 1000.0)
    w.quarantine(BAD, 'node', 'NoSchedule', 'gpu.nvidia.com', 5)
    api.calls = []


def test_REM_16_REM_17_restart_the_plugin_validate_then_release():
    n = node()
    n['status'] = {'capacity': {'nvidia.com/gpu': '2'}, 'allocatable': {'nvidia.com/gpu': '1'}}
    plugin_pod = {'metadata': {'namespace': 'kube-system', 'name': 'nvidia-device-plugin-x', 'labels': {'app': 'plugin'}},
                  'spec': {'containers': [{}]}, 'status': {'phase': 'Running'}}
    api = ClusterApi(n, pods=[plugin_pod, _gpu_pod('other', 1)])
    _quarantined(api)
    w = rk.Remediator(api, 'n1', sleep=lambda s: None, clock=lambda: 1000.0)
    pending = w.to_release(keep=[])
    assert pending == [{'uuid': U0, 'kind': 'node', 'device': None}]
    # REM-17: allocatable below capacity: the plugin's pod on the node is deleted, allocatable comes back
    out = w.restart_device_plugin('app=plugin', 'nvidia.com/gpu', 10)
    assert out == {'restarted': ['kube-system/nvidia-device-plugin-x'], 'before': ['2', '1'], 'after': ['2', '2']}
    # REM-16: the validation pod asks the one free GPU (the other pod holds one), passes, is deleted
    res = w.validate(pending, dict(VALIDATE))
    assert res[U0]['passed'] is True and 'PASS' in res[U0]['log'], res
    name = plan.validation_name('n1', U0)
    assert ('POST', '/api/v1/namespaces/ops/pods') in api.calls
    assert ('DELETE', '/api/v1/namespaces/ops/pods/%s' % name) in api.calls and ('ops', name) not in api.pods
    released, _diff = w.release(keep=[])
    assert released == [U0]
    # a re-run on the healthy node: nothing to release, so no restart, no validation, no write
    api.calls = []
    w2 = rk.Remediator(api, 'n1', sleep=lambda s: None, clock=lambda: 1000.0)
    assert w2.to_release() == [] and w2.restart_device_plugin('app=plugin', 'nvidia.com/gpu', 10)['restarted'] == []
    assert api.calls == [] and w2.actions == []


def test_REM_16_a_failed_validation_keeps_the_quarantine_and_says_why():
    n = node()
    n['status'] = {'capacity': {'nvidia.com/gpu': '2'}, 'allocatable': {'nvidia.com/gpu': '2'}}
    api = ClusterApi(n, verdict='Failed')
    _quarantined(api)
    clock = iter(range(1000, 2000))
    w = rk.Remediator(api, 'n1', sleep=lambda s: None, clock=lambda: float(next(clock)))
    res = w.validate(w.to_release(), dict(VALIDATE))
    assert res[U0]['passed'] is False and res[U0]['why'] == 'the check exited 1 (Error)' and 'FAIL' in res[U0]['log']
    # no free unit at all: failed before any pod is made
    n2 = node()
    n2['status'] = {'capacity': {'nvidia.com/gpu': '2'}, 'allocatable': {'nvidia.com/gpu': '1'}}
    api2 = ClusterApi(n2, pods=[_gpu_pod('other', 1)])
    _quarantined(api2)
    w2 = rk.Remediator(api2, 'n1', sleep=lambda s: None, clock=lambda: 1000.0)
    res2 = w2.validate(w2.to_release(), dict(VALIDATE))
    assert res2[U0]['passed'] is False and 'has no free nvidia.com/gpu' in res2[U0]['why'] and api2.calls == []
    # no verdict in time
    api3 = ClusterApi(node(), after=10 ** 6)
    api3.node['status'] = {'allocatable': {'nvidia.com/gpu': '1'}}
    _quarantined(api3)
    clock3 = iter(range(0, 10 ** 6, 7))
    w3 = rk.Remediator(api3, 'n1', sleep=lambda s: None, clock=lambda: float(next(clock3)))
    assert w3.validate(w3.to_release(), dict(VALIDATE))[U0]['why'].startswith('no verdict within 30s')
    # a pod of that name that is not ours is refused
    api4 = ClusterApi(n, pods=[{'metadata': {'namespace': 'ops', 'name': plan.validation_name('n1', U0)}}])
    _quarantined(api4)
    w4 = rk.Remediator(api4, 'n1', sleep=lambda s: None, clock=lambda: 1000.0)
    with pytest.raises(plan.PlanError, match='is not managed by'):
        w4.validate(w4.to_release(), dict(VALIDATE))
    # check mode: nothing made, nothing passed
    api5 = ClusterApi(n)
    _quarantined(api5)
    w5 = rk.Remediator(api5, 'n1', check_mode=True, sleep=lambda s: None, clock=lambda: 1000.0)
    res5 = w5.validate(w5.to_release(), dict(VALIDATE))
    assert res5[U0]['passed'] is None and api5.calls == [] and w5.actions[0].startswith('create validation Pod')


def test_REM_14_an_allocation_with_a_name_needs_its_namespace():
    """Found typing remediation/ (issue #39): an entry with a name and no namespace passed the check, and the holders
    of a GPU, sorted as (namespace, name), then compared None with a namespace: TypeError. Refused up front now."""
    allocs = [{'name': 'p1', 'devices': [U0]}, {'namespace': 'a', 'name': 'p2', 'devices': [U0]}]
    assert plan.allocations_error(allocs).startswith('allocations[0]: ')
    assert plan.device_plugin_holders(allocs[1:], U0) == [('a', 'p2')]


def test_REM_04_check_mode_reports_the_evicted_pods_as_a_real_run_does():
    """Found typing remediation/ (issue #39): in check mode drain gave (namespace, name) pairs, a real run
    'namespace/name' strings (the module's RV evicted: a list of str); both give the strings now."""
    w = rk.Remediator(FakeApi(node(), [SLICE], CLAIMS), 'n1', check_mode=True, sleep=lambda s: None,
                      clock=lambda: 1000.0)
    assert w.drain({U0: [('a', 'p0')], U1: None}, 0) == (['a/p0'], [])
    assert w.actions == ['evict pod a/p0']


def test_REM_16_free_units_reads_quantities():
    """The API server writes an extended resource's 1000 units as "1k" (kube/quantity.py): it was read as no unit
    free, and the validation pod was not run."""
    n = {'status': {'allocatable': {'nvidia.com/gpu': '1k'}}}
    pods = [{'spec': {'containers': [{'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}, 'status': {}}]
    assert plan.free_units(n, pods, 'nvidia.com/gpu') == 999


def test_REM_04_drain_waits_until_the_evicted_pods_are_gone():
    """An evicted pod holds its GPU until its containers stop (a lab run: the validation found no free unit, and on
    a real GPU the reset would find it in use): drain waits until each evicted pod is deleted, ended or replaced (another
    uid), within drain_timeout; one still terminating then is named in pods_left."""
    terminating = {'metadata': {'uid': 'uid-p0', 'deletionTimestamp': '2026-11-30T20:40:00Z'},
                   'status': {'phase': 'Running'}}
    clock = [1000.0]

    def worker(api):
        return rk.Remediator(api, 'n1', sleep=lambda s: clock.__setitem__(0, clock[0] + s), clock=lambda: clock[0])
    # terminating for two reads, then gone
    api = FakeApi(node())
    api.after_eviction[('a', 'p0')] = [dict(terminating), dict(terminating)]
    assert worker(api).drain({U0: [('a', 'p0')]}, 60) == (['a/p0'], [])
    assert api.after_eviction[('a', 'p0')] == [] and clock[0] == 1004.0       # two polls of 2 s
    # replaced by a pod of the same name (a StatefulSet's): gone at once; ended (Succeeded): gone
    api = FakeApi(node())
    api.after_eviction[('a', 'p0')] = [{'metadata': {'uid': 'uid-new'}, 'status': {'phase': 'Pending'}}]
    api.after_eviction[('a', 'p1')] = [{'metadata': {'uid': 'uid-p1'}, 'status': {'phase': 'Succeeded'}}]
    assert worker(api).drain({U0: [('a', 'p0')], U1: [('a', 'p1')]}, 60) == (['a/p0', 'a/p1'], [])
    # still terminating when drain_timeout ends: named with the pods a budget refuses
    api = FakeApi(node(), pdb_refuses=[('a', 'p1')])
    api.after_eviction[('a', 'p0')] = [dict(terminating)] * 50
    assert worker(api).drain({U0: [('a', 'p0')], U1: [('a', 'p1')]}, 10) == (['a/p0'], ['a/p0', 'a/p1'])
