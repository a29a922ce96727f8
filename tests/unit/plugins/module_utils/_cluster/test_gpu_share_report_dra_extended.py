# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_share_report with extended resources backed by DRA (KEP-5004; row DRAX-07): a pod asking plain nvidia.com/gpu
that the scheduler satisfied with a DRA device is counted once, as its claim's device, never also as device-plugin
nvidia.com/gpu. The objects are shaped as the lab's real 1.37 control plane returned them
(lab/tests/integration/test_dra_extended_real.py)."""
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as m

UUID = 'GPU-3672890b-e127-9850-0c65-415ee8cf8a17'


def node(name, allocatable=None):
    return {'metadata': {'name': name, 'labels': {}}, 'status': {'allocatable': allocatable or {'cpu': '4'},
                                                                 'capacity': allocatable or {'cpu': '4'}}}


def pod(name, node_name, resource='nvidia.com/gpu', claim=None, ns='ml'):
    p = {'metadata': {'name': name, 'namespace': ns, 'uid': 'uid-' + name},
         'spec': {'nodeName': node_name, 'containers': [{'name': 'main', 'resources': {'limits': {resource: '1'}}}]},
         'status': {'phase': 'Running'}}
    if claim:
        p['status']['extendedResourceClaimStatus'] = {
            'resourceClaimName': claim,
            'requestMappings': [{'containerName': 'main', 'resourceName': resource, 'requestName': 'container-0-request-0'}]}
    return p


def claim(name, node_name, pod_name, ns='ml'):
    return {'metadata': {'name': name, 'namespace': ns,
                         'annotations': {m.EXTENDED_RESOURCE_CLAIM_ANNOTATION: 'true'},
                         'ownerReferences': [{'kind': 'Pod', 'name': pod_name, 'controller': True}]},
            'spec': {'devices': {'requests': [{'name': 'container-0-request-0',
                                               'exactly': {'deviceClassName': 'gpu.nvidia.com'}}]}},
            'status': {'allocation': {'devices': {'results': [{'request': 'container-0-request-0',
                                                               'driver': 'gpu.nvidia.com', 'pool': node_name,
                                                               'device': 'gpu-0'}]}},
                       'reservedFor': [{'resource': 'pods', 'name': pod_name, 'uid': 'uid-' + pod_name}]}}


def slices(node_name):
    return [{'metadata': {'name': 's-' + node_name},
             'spec': {'driver': 'gpu.nvidia.com', 'nodeName': node_name, 'pool': {'name': node_name},
                      'devices': [{'name': 'gpu-0', 'attributes': {'type': {'string': 'gpu'}, 'uuid': {'string': UUID},
                                                                   'productName': {'string': 'Tesla T4'}}}]}}]


def full(nodes, pods, claims, node_slices):
    rep = m.analyse(nodes, pods)
    return m.add_dra(rep, {'served': True, 'claims': claims, 'slices': node_slices, 'error': None}, pods)


def test_DRAX_07_dra_backed_extended_resource_counted_once():
    nodes = [node('dra-1'), node('dp-1', {'nvidia.com/gpu': '8'})]
    pods = [pod('plain', 'dra-1', claim='plain-extended-resources-x1'), pod('classic', 'dp-1')]
    rep = full(nodes, pods, [claim('plain-extended-resources-x1', 'dra-1', 'plain')], slices('dra-1'))
    dra_node = [n for n in rep['nodes'] if n['name'] == 'dra-1'][0]
    dp_node = [n for n in rep['nodes'] if n['name'] == 'dp-1'][0]
    # the DRA node: no device-plugin row, its one device allocated once
    assert 'nvidia.com/gpu' not in dra_node['resources']
    assert dra_node['dra'] == {'devices': {'gpu.nvidia.com': 1}, 'allocated': {'gpu.nvidia.com': 1}}
    [rec] = dra_node['pods']
    assert rec['requests'] == {'nvidia.com/gpu': 1}
    assert rec['dra_extended'] == {'claim': 'plain-extended-resources-x1', 'resources': {'nvidia.com/gpu': 1}}
    # the device-plugin pod is counted as before, and the cluster total holds it alone
    assert dp_node['resources']['nvidia.com/gpu']['allocated'] == 1
    assert rep['cluster']['resources']['nvidia.com/gpu']['allocated'] == 1
    assert rep['cluster']['resources']['nvidia.com/gpu']['allocatable'] == 8
    [c] = rep['dra']['claims']
    assert c['extended_resources'] == ['nvidia.com/gpu'] and c['state'] == 'allocated'
    assert [p['name'] for p in c['pods']] == ['plain'] and not c['shared']
    assert rep['cluster']['dra_claims'] == 1 and rep['cluster']['gpu_nodes'] == 2
    assert rep['nodes'] and not rep['notes']


def test_DRAX_07_without_the_status_the_request_is_the_device_plugins():
    """Before the scheduler has written the status (or on a cluster without the feature) nothing changes."""
    rep = full([node('dp-1', {'nvidia.com/gpu': '8'})], [pod('classic', 'dp-1')], [], [])
    [rec] = rep['pods']
    assert 'dra_extended' not in rec
    assert rep['cluster']['resources']['nvidia.com/gpu']['allocated'] == 1
    assert m.dra_extended(pod('p', 'n')) == (None, {})


def test_DRAX_07_only_the_mapped_resources_are_dra_backed():
    p = pod('mixed', 'dra-1', resource='nvidia.com/gpu.shared', claim='mixed-extended-resources-a')
    p['spec']['containers'].append({'name': 'side', 'resources': {'limits': {'nvidia.com/gpu': '2'}}})
    assert m.dra_extended(p) == ('mixed-extended-resources-a', {'nvidia.com/gpu.shared': 1})
    rep = full([node('dra-1', {'nvidia.com/gpu': '2'})], [p], [claim('mixed-extended-resources-a', 'dra-1', 'mixed')],
               slices('dra-1'))
    [n] = rep['nodes']
    assert n['resources']['nvidia.com/gpu']['allocated'] == 2
    assert 'nvidia.com/gpu.shared' not in n['resources']
    assert rep['dra']['claims'][0]['extended_resources'] == ['nvidia.com/gpu.shared']
