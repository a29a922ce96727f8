# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_share_report's Dynamic Resource Allocation part (resource.k8s.io/v1): reading (one discovery request, two
lists), the model (claims, devices, holders, pending reasons, per-node counts, the device-plugin conflict) and the
text forms. The objects are shaped as the lab's real control plane returns them (lab/tests/integration/
test_dra_real.py: NVIDIA's gpu-kubelet-plugin v0.5.0 slices, kube-scheduler allocations)."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import kube
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as m
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import render as r

A100_UUID = 'GPU-8a5b6c1e-0b0c-4f53-9f9b-2f1b6d3c1a01'
MIG_UUID = 'MIG-b2fd6a54-9383-50f0-ab27-4d244819a995'


def gpu_device(name, uuid, product='NVIDIA A100-SXM4-80GB'):
    return {'name': name, 'attributes': {'type': {'string': 'gpu'}, 'uuid': {'string': uuid},
                                         'productName': {'string': product},
                                         'driverVersion': {'version': '535.183.1'}},
            'capacity': {'memory': {'value': '80Gi'}}}


def mig_device(name, uuid, profile):
    return {'name': name, 'attributes': {'type': {'string': 'mig'}, 'uuid': {'string': uuid},
                                         'profile': {'string': profile},
                                         'productName': {'string': 'NVIDIA H100 80GB HBM3'}}}


def rslice(node, devices, driver='gpu.nvidia.com'):
    return {'metadata': {'name': '00000-%s-%s-abcde' % (driver, node)},
            'spec': {'driver': driver, 'nodeName': node, 'pool': {'name': node, 'generation': 1,
                                                                  'resourceSliceCount': 1}, 'devices': devices}}


def claim(name, results=None, reserved=(), ns='ml'):
    c = {'metadata': {'name': name, 'namespace': ns}, 'spec': {}, 'status': {}}
    if results is not None:
        c['status']['allocation'] = {'devices': {'results': [
            {'request': 'gpu', 'driver': 'gpu.nvidia.com', 'pool': pool, 'device': dev} for pool, dev in results]}}
    if reserved:
        c['status']['reservedFor'] = [{'resource': 'pods', 'name': p, 'uid': 'uid-' + p} for p in reserved]
    return c


def pod(name, node=None, claims=(), template_claims=(), phase='Running', ns='ml', unschedulable=None):
    p = {'metadata': {'name': name, 'namespace': ns, 'uid': 'uid-' + name},
         'spec': {'nodeName': node, 'containers': [{'name': 'c'}],
                  'resourceClaims': [{'name': c, 'resourceClaimName': c} for c in claims]},
         'status': {'phase': phase}}
    if template_claims:
        p['spec']['resourceClaims'] += [{'name': 'gpu', 'resourceClaimTemplateName': 't'}]
        p['status']['resourceClaimStatuses'] = [{'name': 'gpu', 'resourceClaimName': c} for c in template_claims]
    if unschedulable:
        p['status']['conditions'] = [{'type': 'PodScheduled', 'status': 'False', 'reason': 'Unschedulable',
                                      'message': unschedulable}]
    return p


REASON = ('0/5 nodes are available: 1 node(s) had untolerated taint, 4 cannot allocate all claims. preemption: '
          '0/5 nodes are available: 5 Preemption is not helpful for scheduling.')


def sample_dra():
    slices = [rslice('gpu-a100-1', [gpu_device('gpu-%d' % i, A100_UUID[:-1] + str(i)) for i in range(2)]),
              rslice('gpu-h100-1', [mig_device('gpu-0-mig-1g10gb-19-4', MIG_UUID, '1g.10gb'),
                                    mig_device('gpu-0-mig-3g40gb-9-0', 'MIG-x', '3g.40gb')]),
              rslice('gpu-a100-1', [{'name': 'nic-0'}], driver='net.example.com')]
    claims = [claim('train-gpu-x7k2p', [('gpu-a100-1', 'gpu-1')], ['train']),
              claim('shared', [('gpu-h100-1', 'gpu-0-mig-1g10gb-19-4')], ['a', 'b']),
              claim('b200'),
              claim('unused')]
    pods = [pod('train', 'gpu-a100-1', template_claims=['train-gpu-x7k2p']),
            pod('a', 'gpu-h100-1', claims=['shared']), pod('b', 'gpu-h100-1', claims=['shared']),
            pod('wants-b200', claims=['b200'], phase='Pending', unschedulable=REASON),
            pod('done', 'gpu-a100-1', claims=['train-gpu-x7k2p'], phase='Succeeded')]
    return {'served': True, 'claims': claims, 'slices': slices, 'error': None}, pods


def node(name, res=None):
    res = res or {'cpu': '4'}
    return {'metadata': {'name': name}, 'status': {'capacity': res, 'allocatable': res}}


# ------------------------------------------------------------------------------------------------------ model
def test_claims_devices_holders_and_pending_reason():
    dra, pods = sample_dra()
    part = m.analyse_dra(dra, pods)
    by = dict((c['name'], c) for c in part['claims'])
    assert [c['name'] for c in part['claims']] == ['b200', 'shared', 'train-gpu-x7k2p', 'unused']
    train = by['train-gpu-x7k2p']
    assert train['state'] == 'allocated' and train['shared'] is False and train['reason'] is None
    assert train['devices'] == [{'request': 'gpu', 'driver': 'gpu.nvidia.com', 'pool': 'gpu-a100-1',
                                 'device': 'gpu-1', 'node': 'gpu-a100-1', 'uuid': A100_UUID[:-1] + '1',
                                 'product': 'NVIDIA A100-SXM4-80GB', 'type': 'gpu', 'profile': None}]
    # the holder from status.reservedFor (the finished pod that also names the claim is not one)
    assert train['pods'] == [{'namespace': 'ml', 'name': 'train', 'node': 'gpu-a100-1', 'phase': 'Running'}]
    shared = by['shared']
    assert shared['shared'] is True and [p['name'] for p in shared['pods']] == ['a', 'b']
    assert (shared['devices'][0]['uuid'], shared['devices'][0]['profile']) == (MIG_UUID, '1g.10gb')
    assert by['b200']['state'] == 'pending' and by['b200']['reason'] == 'Unschedulable: ' + REASON
    assert [p['name'] for p in by['b200']['pods']] == ['wants-b200']
    assert by['unused']['reason'] == 'no pod uses it yet' and by['unused']['pods'] == []
    assert part['nodes'] == {'gpu-a100-1': {'devices': {'gpu.nvidia.com': 2, 'net.example.com': 1},
                                            'allocated': {'gpu.nvidia.com': 1}},
                             'gpu-h100-1': {'devices': {'gpu.nvidia.com': 2}, 'allocated': {'gpu.nvidia.com': 1}}}
    assert part['notes'] == []


def test_not_served_forbidden_and_unknown_device():
    assert m.analyse_dra({'served': False, 'claims': [], 'slices': [], 'error': None}, []) == {
        'served': False, 'claims': [], 'nodes': {}, 'notes': []}
    assert m.analyse_dra(None, [])['served'] is False
    denied = m.analyse_dra({'served': True, 'claims': [], 'slices': [], 'error': 'listing resourceslices failed: 403'},
                           [])
    assert denied['claims'] == [] and 'not in this report' in denied['notes'][0]
    part = m.analyse_dra({'served': True, 'claims': [claim('c', [('gone', 'gpu-9')], ['p'])], 'slices': [],
                          'error': None}, [pod('p', 'gone', claims=['c'])])
    assert part['claims'][0]['devices'][0]['uuid'] is None
    assert part['notes'] == ['DRA: claim ml/c holds gpu.nvidia.com/gone/gpu-9, which no ResourceSlice lists']
    # reservedFor a pod the pod list does not have (another namespace read, or gone): named, no node
    part = m.analyse_dra({'served': True, 'claims': [claim('c', [('gone', 'gpu-9')], ['ghost'])], 'slices': [],
                          'error': None}, [])
    assert part['claims'][0]['pods'] == [{'namespace': 'ml', 'name': 'ghost', 'node': None, 'phase': None}]


def test_qualified_attributes_and_other_value_types():
    d = {'attributes': {'gpu.nvidia.com/uuid': {'string': 'GPU-1'}, 'cudaComputeCapability': {'version': '9.0.0'},
                        'index': {'int': 3}, 'ok': {'bool': False}, 'odd': 'x'}}
    assert m._attr(d, 'gpu.nvidia.com', 'uuid') == 'GPU-1'
    assert m._attr(d, 'gpu.nvidia.com', 'cudaComputeCapability') == '9.0.0'
    assert m._attr(d, 'gpu.nvidia.com', 'index') == 3 and m._attr(d, 'gpu.nvidia.com', 'ok') is False
    assert m._attr(d, 'gpu.nvidia.com', 'odd') is None and m._attr(d, 'gpu.nvidia.com', 'missing') is None


def test_add_dra_restricted_nodes_and_device_plugin_conflict():
    dra, pods = sample_dra()
    nodes = [node('gpu-a100-1', {'nvidia.com/gpu': '8'})]
    report = m.analyse(nodes, pods, restricted=True)
    m.add_dra(report, dra, pods, restricted=True)
    # the h100 claim is on a node outside the report: left out; pending ones stay
    assert [c['name'] for c in report['dra']['claims']] == ['b200', 'train-gpu-x7k2p', 'unused']
    assert list(report['dra']['nodes']) == ['gpu-a100-1']
    [n] = report['nodes']
    assert n['dra'] == {'devices': {'gpu.nvidia.com': 2, 'net.example.com': 1}, 'allocated': {'gpu.nvidia.com': 1}}
    msg = ('DRA driver gpu.nvidia.com publishes 2 device(s) and the device plugin advertises 8 nvidia.com/gpu on the '
           'same node: both hand out the same GPUs')
    assert n['conflicts'] == [msg] and 'node gpu-a100-1: ' + msg in report['notes']


def test_no_conflict_without_the_device_plugin_resource():
    dra, pods = sample_dra()
    report = m.add_dra(m.analyse([node('gpu-a100-1'), node('gpu-h100-1')], pods), dra, pods)
    assert all(n['conflicts'] == [] for n in report['nodes'])
    assert len(report['dra']['claims']) == 4


# ------------------------------------------------------------------------------------------------------ render
def rendered():
    dra, pods = sample_dra()
    return m.add_dra(m.analyse([node('gpu-a100-1'), node('gpu-h100-1')], pods), dra, pods)


def test_table_lists_claims_devices_and_pending_reasons():
    text = r.table(rendered())
    lines = text.splitlines()
    head = [ln for ln in lines if ln.startswith('CLAIM')]
    assert head and head[0].split() == ['CLAIM', 'STATE', 'NODE', 'DRIVER', 'POOL', 'DEVICE', 'UUID', 'PRODUCT',
                                        'PODS']
    row = [ln for ln in lines if ln.startswith('ml/train-gpu-x7k2p')][0].split()
    assert row[:7] == ['ml/train-gpu-x7k2p', 'allocated', 'gpu-a100-1', 'gpu.nvidia.com', 'gpu-a100-1', 'gpu-1',
                       A100_UUID[:-1] + '1'] and row[-1] == 'ml/train'
    shared = [ln for ln in lines if ln.startswith('ml/shared')][0]
    assert 'allocated (shared)' in shared and 'NVIDIA H100 80GB HBM3 MIG 1g.10gb' in shared and 'ml/a,ml/b' in shared
    assert 'Pending claim ml/b200: Unschedulable: ' + REASON in lines
    assert 'Pending claim ml/unused: no pod uses it yet' in lines


def test_markdown_and_html_sections():
    md = r.markdown(rendered())
    assert '## Dynamic Resource Allocation' in md
    assert '| Claim | State | Node | Driver | Pool | Device | UUID | Product | Pods |' in md
    assert 'DRA devices (ResourceSlices): gpu.nvidia.com 2 published, 1 allocated, net.example.com 1 published, ' \
           '0 allocated' in md
    assert '- ml/b200: Unschedulable: ' + REASON in md
    html = r.html_report(rendered())
    assert '<h2>Dynamic Resource Allocation</h2>' in html and '<td>gpu-0-mig-1g10gb-19-4</td>' in html


def test_not_served_adds_nothing_to_the_text():
    pods = []
    report = m.add_dra(m.analyse([node('n', {'nvidia.com/gpu': '1'})], pods),
                       {'served': False, 'claims': [], 'slices': [], 'error': None}, pods)
    assert 'Dynamic Resource Allocation' not in r.markdown(report) and 'CLAIM' not in r.table(report)
    served_empty = m.add_dra(m.analyse([node('n')], pods), {'served': True, 'claims': [], 'slices': [], 'error': None},
                             pods)
    assert 'No ResourceClaims.' in r.markdown(served_empty)


# ------------------------------------------------------------------------------------------------------ reading
class Resp(object):
    def __init__(self, data):
        self.data = json.dumps(data).encode()


class Recorder(object):
    """A kube/rest.request stand-in: answers by path, records (method, path, query)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, api_client, method, path, query=None, body=None, content_type=None):
        self.calls.append((method, path, dict(query or [])))
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        return Resp(answer)


GROUP = {'kind': 'APIGroup', 'name': 'resource.k8s.io',
         'versions': [{'groupVersion': 'resource.k8s.io/v1', 'version': 'v1'}]}


def test_DRAL_09_one_discovery_and_two_lists_whatever_the_fleet():
    send = Recorder({'/apis/resource.k8s.io': GROUP,
                     '/apis/resource.k8s.io/v1/resourceclaims': {'items': [{'n': 1}], 'metadata': {}},
                     '/apis/resource.k8s.io/v1/resourceslices': {'items': [{'s': i} for i in range(300)],
                                                                 'metadata': {}}})
    out = kube.read_dra(None, send=send)
    assert out == {'served': True, 'claims': [{'n': 1}], 'slices': [{'s': i} for i in range(300)], 'error': None}
    assert [c[1] for c in send.calls] == ['/apis/resource.k8s.io', '/apis/resource.k8s.io/v1/resourceclaims',
                                          '/apis/resource.k8s.io/v1/resourceslices']
    assert send.calls[1][2] == {'limit': 500}
    ns = Recorder(dict(send.answers, **{'/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims': {'items': []}}))
    kube.read_dra(None, namespace='ml', send=ns)
    assert ns.calls[1][1] == '/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims'


class ApiErr(Exception):
    def __init__(self, status, reason=''):
        Exception.__init__(self, '%s %s' % (status, reason))
        self.status, self.reason, self.body = status, reason, reason


def test_read_dra_not_served_beta_only_forbidden_and_errors():
    # an error of either client: its HTTP status makes it an answer of the server (kube/access.is_api_error)
    send = Recorder({'/apis/resource.k8s.io': ApiErr(404, 'Not Found')})
    assert kube.read_dra(None, send=send) == {'served': False, 'claims': [], 'slices': [], 'error': None}
    assert len(send.calls) == 1
    beta = Recorder({'/apis/resource.k8s.io': {'versions': [{'version': 'v1beta2'}]}})
    assert kube.read_dra(None, send=beta)['served'] is False and len(beta.calls) == 1
    denied = Recorder({'/apis/resource.k8s.io': GROUP,
                       '/apis/resource.k8s.io/v1/resourceclaims': ApiErr(403, 'Forbidden')})
    out = kube.read_dra(None, send=denied)
    assert out['served'] is True and out['error'].startswith('listing resourceclaims failed: 403 Forbidden')
    broken = Recorder({'/apis/resource.k8s.io': GROUP,
                       '/apis/resource.k8s.io/v1/resourceclaims': ApiErr(500, 'Internal Server Error')})
    with pytest.raises(kube.KubeError, match='listing resourceclaims failed: 500'):
        kube.read_dra(None, send=broken)
    with pytest.raises(kube.KubeError, match='discovery of resource.k8s.io failed'):
        kube.read_dra(None, send=Recorder({'/apis/resource.k8s.io': ApiErr(401, 'Unauthorized')}))


def test_dra_beside_the_device_plugin_is_one_conflict_message():
    """dra is a strategy of its own accounting family (gpu_strategy.families_conflict names it beside whole-GPU), and the
    report says DRA-beside-device-plugin once: dra_conflicts' message, never node_conflicts' generic one too."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import families_conflict
    assert families_conflict(['dra', 'time-slicing'])
    assert m.node_conflicts(['dra', 'time-slicing']) == [] and m.node_conflicts(['dra']) == []
    dra, pods = sample_dra()
    report = m.analyse([node('gpu-a100-1', {'nvidia.com/gpu': '8'})], pods)
    report['nodes'][0]['strategies'].append('dra')
    report['nodes'][0]['conflicts'] = m.node_conflicts(report['nodes'][0]['strategies'])
    m.add_dra(report, dra, pods)
    [msg] = report['nodes'][0]['conflicts']
    assert msg.startswith('DRA driver gpu.nvidia.com publishes 2 device(s)')
