# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_share_report accounting: quantities, effective pod requests, strategy detection, per-GPU holders."""
from decimal import Decimal

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import quantity as q
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as m


def node(name, res, labels=None, annotations=None, ip='10.0.0.1'):
    return {'metadata': {'name': name, 'labels': labels or {}, 'annotations': annotations or {}},
            'status': {'capacity': dict(res), 'allocatable': dict(res),
                       'addresses': [{'type': 'Hostname', 'address': name}, {'type': 'InternalIP', 'address': ip}]}}


def pod(name, node_name, limits=None, requests=None, phase='Running', annotations=None, ns='ml', **spec):
    c = {'name': 'c', 'resources': {}}
    if limits:
        c['resources']['limits'] = limits
    if requests:
        c['resources']['requests'] = requests
    s = dict({'containers': [c]}, **spec)
    if node_name:
        s['nodeName'] = node_name
    return {'metadata': {'name': name, 'namespace': ns, 'annotations': annotations or {}}, 'spec': s,
            'status': {'phase': phase}}


def test_number_and_percent():
    assert m.number(Decimal('4')) == 4 and isinstance(m.number(Decimal('4.0')), int)
    assert m.number(Decimal('2.5')) == 2.5
    assert m.percent(Decimal(3), Decimal(8)) == 37
    assert m.percent(1, 0) is None and m.percent(1, None) is None


def test_pod_requests_limits_init_sidecar_overhead():
    p = pod('a', 'n', limits={'nvidia.com/gpu': '1', 'cpu': '2'})
    p['spec']['initContainers'] = [
        {'name': 'i1', 'resources': {'limits': {'nvidia.com/gpu': '3'}}},
        {'name': 'side', 'restartPolicy': 'Always', 'resources': {'requests': {'aliyun.com/gpu-mem': '2'}}},
    ]
    p['spec']['overhead'] = {'aliyun.com/gpu-mem': '1', 'cpu': '100m'}
    assert m.pod_requests(p) == {'nvidia.com/gpu': Decimal(3), 'aliyun.com/gpu-mem': Decimal(3)}


def test_pod_requests_prefers_requests_and_notes_bad_quantities():
    notes = []
    p = pod('a', 'n', limits={'nvidia.com/gpu': '2', 'aliyun.com/gpu-mem': 'lots'}, requests={'nvidia.com/gpu': '2'})
    assert m.pod_requests(p, notes) == {'nvidia.com/gpu': Decimal(2)}
    assert notes == ["ml/a: resource aliyun.com/gpu-mem has an unreadable quantity 'lots'; not counted"]


def test_hami_memory_and_cores_are_per_device():
    p = pod('a', 'n', limits={'nvidia.com/gpu': '2', 'nvidia.com/gpumem': '1000', 'nvidia.com/gpucores': '20'})
    assert m.pod_requests(p) == {'nvidia.com/gpu': 2, 'nvidia.com/gpumem': 2000, 'nvidia.com/gpucores': 40}


@pytest.mark.parametrize('phase, counts', [('Running', True), ('Pending', True), ('Unknown', True),
                                           ('Succeeded', False), ('Failed', False), (None, True)])
def test_pod_counts(phase, counts):
    p = pod('a', 'n')
    p['status']['phase'] = phase
    assert m.pod_counts(p) is counts


@pytest.mark.parametrize('res, labels, annotations, expected', [
    ({'nvidia.com/gpu': '4'}, {}, {}, ['exclusive']),
    ({'nvidia.com/gpu': '8'}, {'nvidia.com/gpu.replicas': '4'}, {}, ['time-slicing']),
    ({'nvidia.com/gpu': '8'}, {'nvidia.com/gpu.sharing-strategy': 'mps', 'nvidia.com/gpu.replicas': '4'}, {}, ['mps']),
    ({'nvidia.com/gpu.shared': '8'}, {}, {}, ['time-slicing']),
    ({'nvidia.com/gpu': '7'}, {'nvidia.com/mig.strategy': 'single'}, {}, ['mig']),
    ({'nvidia.com/mig-1g.10gb': '7'}, {}, {}, ['mig']),
    ({'nvidia.com/gpu': '20'}, {}, {'hami.io/node-nvidia-register': 'x'}, ['hami']),
    ({'aliyun.com/gpu-mem': '30', 'aliyun.com/gpu-count': '2'}, {}, {}, ['gpushare']),
    ({'volcano.sh/vgpu-number': '20'}, {}, {}, ['volcano']),
    ({'tencent.com/vcuda-core': '200'}, {}, {}, ['gpu-manager']),
    ({'nvidia.com/gpu': '0', 'cpu': '4'}, {}, {}, []),
])
def test_node_strategies(res, labels, annotations, expected):
    n = node('n', res, labels, annotations)
    amounts = dict((k, q.parse_quantity(v)) for k, v in res.items() if m.is_gpu_resource(k))
    assert m.node_strategies(n, amounts) == expected


def test_node_conflicts():
    assert m.node_conflicts(['gpushare']) == []
    assert m.node_conflicts(['mig', 'time-slicing']) == []
    assert 'gpu-mem accounting' in m.node_conflicts(['exclusive', 'gpushare'])[0]
    assert m.node_conflicts(['gpushare', 'hami'])[0].startswith('HAMi vGPU accounting and gpushare')
    assert m.node_conflicts(['hami', 'volcano']) == ['Volcano GPU accounting and hami on the same node']


def test_hami_node_register_forms():
    devs, err = m.parse_hami_node_register('GPU-a,10,15360,100,NVIDIA-T4,0,true:GPU-b,10,15360,100,NVIDIA-T4,0,false,5:')
    assert err is None
    assert [(d['uuid'], d['index'], d['health'], d['memory_mib']) for d in devs] == [
        ('GPU-a', 0, True, 15360), ('GPU-b', 5, False, 15360)]
    devs, err = m.parse_hami_node_register('[{"id": "GPU-a", "count": 4, "devmem": 40960, "devcore": 100, '
                                           '"type": "A100", "index": 1}]')
    assert err is None and devs[0]['index'] == 1 and devs[0]['split'] == 4
    assert m.parse_hami_node_register('GPU-a,ten,1,1,T4:')[1].startswith('entry 0')
    assert m.parse_hami_node_register('[{')[1].startswith('not valid JSON')
    assert m.parse_hami_node_register('[1]')[1] == 'entry 0 is not an object'
    assert m.parse_hami_node_register('') == ([], None)


def test_hami_pod_devices():
    devs, err = m.parse_hami_pod_devices('GPU-a,NVIDIA,3000,30:;GPU-b,NVIDIA,1000,0:')
    assert err is None
    assert [(d['container'], d['uuid'], d['memory_mib'], d['cores']) for d in devs] == [
        (0, 'GPU-a', 3000, 30), (1, 'GPU-b', 1000, 0)]
    assert m.parse_hami_pod_devices('GPU-a,NVIDIA,x,1:')[1] == "container 0 entry 'GPU-a,NVIDIA,x,1' has non-numeric memory/cores"


def test_node_address_order():
    n = {'status': {'addresses': [{'type': 'Hostname', 'address': 'h'}, {'type': 'ExternalIP', 'address': '1.2.3.4'}]}}
    assert m.node_address(n) == '1.2.3.4'
    assert m.node_address({}) == ''


def test_analyse_gpushare():
    nodes = [node('gs', {'aliyun.com/gpu-mem': '32', 'aliyun.com/gpu-count': '2'})]
    pods = [
        pod('a', 'gs', limits={'aliyun.com/gpu-mem': '4'},
            annotations={'ALIYUN_COM_GPU_MEM_IDX': '1', 'ALIYUN_COM_GPU_MEM_ASSIGNED': 'true'}),
        pod('b', 'gs', limits={'aliyun.com/gpu-mem': '6'}, annotations={'ALIYUN_COM_GPU_MEM_IDX': '0,1'}),
        pod('c', 'gs', limits={'aliyun.com/gpu-mem': '2'}, phase='Pending'),
        pod('d', 'gs', limits={'aliyun.com/gpu-mem': '2'}, annotations={'ALIYUN_COM_GPU_MEM_IDX': 'x'}),
        pod('e', 'gs', limits={'aliyun.com/gpu-mem': '9'}, annotations={'ALIYUN_COM_GPU_MEM_IDX': '0'}, phase='Failed'),
        pod('f', 'gs', annotations={'ALIYUN_COM_GPU_MEM_IDX': '0', 'ALIYUN_COM_GPU_MEM_POD': '1'}),
    ]
    r = m.analyse(nodes, pods)
    n = r['nodes'][0]
    g = dict((x['index'], x) for x in n['gpus'])
    assert g[0]['memory_total'] == 16 and g[0]['memory_allocated'] == 4   # b: 3 + f: 1 (annotation only)
    assert g[1]['memory_allocated'] == 7 and g[1]['memory_percent'] == 43
    assert n['gpushare'] == {'memory_total': 32, 'memory_allocated': 15, 'memory_pending': 4, 'memory_percent': 46,
                             'memory_unit': 'GiB'}
    assert any('split evenly' in x for x in n['notes'])
    assert any("ALIYUN_COM_GPU_MEM_IDX='x'" in x for x in n['notes'])
    assert [p['name'] for p in r['pods']] == ['a', 'b', 'c', 'd', 'f']
    assert r['cluster']['gpushare']['memory_percent'] == 46


def test_analyse_gpushare_without_count_and_unknown_gpu():
    nodes = [node('gs', {'aliyun.com/gpu-mem': '16'})]
    pods = [pod('a', 'gs', limits={'aliyun.com/gpu-mem': '4'}, annotations={'ALIYUN_COM_GPU_MEM_IDX': '3'})]
    n = m.analyse(nodes, pods, gpushare_memory_unit='MiB')['nodes'][0]
    assert 'aliyun.com/gpu-mem has no aliyun.com/gpu-count; per-GPU totals unknown' in n['notes']
    assert any('GPU 3 is referenced' in x for x in n['notes'])
    assert n['gpus'][0]['memory_unit'] == 'MiB' and n['gpus'][0]['memory_total'] is None


def test_analyse_unscheduled_restricted_and_unknown_node():
    nodes = [node('a', {'nvidia.com/gpu': '2'})]
    pods = [pod('p1', None, limits={'nvidia.com/gpu': '1'}, phase='Pending'),
            pod('p2', 'gone', limits={'nvidia.com/gpu': '1'}),
            pod('p3', 'a', limits={'cpu': '1'})]
    r = m.analyse(nodes, pods)
    assert [p['name'] for p in r['unscheduled']] == ['p1', 'p2']
    assert r['unscheduled'][1]['note'] == 'node gone is not in the report'
    r = m.analyse(nodes, pods, restricted=True)
    assert [p['name'] for p in r['unscheduled']] == ['p1']
    assert r['cluster']['resources']['nvidia.com/gpu'] == {'allocatable': 2, 'allocated': 0, 'free': 2, 'percent': 0,
                                                           'unit': 'GPU'}


def test_analyse_hami_volcano_tke():
    reg = 'GPU-a,10,16000,100,T4,0,true:GPU-b,10,16000,100,T4,0,true:'
    nodes = [node('h', {'nvidia.com/gpu': '20'}, annotations={'hami.io/node-nvidia-register': reg}),
             node('v', {'volcano.sh/gpu-memory': '20000', 'volcano.sh/gpu-number': '2'}),
             node('t', {'tencent.com/vcuda-core': '200', 'tencent.com/vcuda-memory': '120'}),
             node('bad', {'nvidia.com/gpu': '4'}, annotations={'hami.io/node-nvidia-register': 'junk'})]
    pods = [
        pod('h1', 'h', limits={'nvidia.com/gpu': '1', 'nvidia.com/gpumem': '4000'},
            annotations={'hami.io/vgpu-devices-allocated': 'GPU-b,NVIDIA,4000,0:;'}),
        pod('h2', 'h', limits={'nvidia.com/gpu': '1'}, annotations={'hami.io/vgpu-devices-allocated': 'GPU-z,NVIDIA,1,0:'}),
        pod('v1', 'v', limits={'volcano.sh/gpu-memory': '1000'}, annotations={'volcano.sh/gpu-index': '0'}),
        pod('v2', 'v', limits={'volcano.sh/gpu-memory': '1000'}),
        pod('v3', 'v', limits={'volcano.sh/gpu-memory': '1000'}, annotations={'volcano.sh/gpu-index': 'no'}),
        pod('t1', 't', limits={'tencent.com/vcuda-core': '50', 'tencent.com/vcuda-memory': '10'},
            annotations={'tencent.com/predicate-gpu-idx-0': '1', 'tencent.com/predicate-gpu-idx-1': 'bad'}),
    ]
    r = m.analyse(nodes, pods)
    nodes_out = dict((n['name'], n) for n in r['nodes'])
    h = dict((g['uuid'], g) for g in nodes_out['h']['gpus'])
    assert h['GPU-b']['memory_allocated'] == 4000 and h['GPU-b']['index'] == 1
    assert h['GPU-z']['index'] is None
    assert any('GPU-z which the node does not register' in x for x in nodes_out['h']['notes'])
    v = dict((g['index'], g) for g in nodes_out['v']['gpus'])
    assert v[0]['memory_allocated'] == 1000 and v[0]['memory_total'] == 10000
    vp = dict((p['name'], p) for p in nodes_out['v']['pods'])
    assert vp['v2']['gpus'][0]['pending'] is True
    assert any("volcano.sh/gpu-index='no'" in x for x in nodes_out['v']['notes'])
    t = nodes_out['t']
    assert t['strategies'] == ['gpu-manager'] and t['gpus'][0]['index'] == 1
    assert t['resources']['tencent.com/vcuda-core']['percent'] == 25
    assert any("predicate-gpu-idx-1='bad'" in x for x in t['notes'])
    assert any('junk' in x or 'not understood' in x for x in nodes_out['bad']['notes'])
    assert r['cluster']['resources']['nvidia.com/gpumem']['allocatable'] == 32000


def test_analyse_replicas_and_conflict_notes():
    nodes = [node('ts', {'nvidia.com/gpu': '8'}, {'nvidia.com/gpu.replicas': '4'}),
             node('x', {'nvidia.com/gpu': '1', 'aliyun.com/gpu-mem': '16', 'aliyun.com/gpu-count': '1'}),
             node('bad', {'nvidia.com/gpu': 'many'})]
    r = m.analyse(nodes, [])
    n = dict((x['name'], x) for x in r['nodes'])
    assert n['ts']['replicas'] == 4 and n['ts']['physical_gpus'] == 2
    assert n['x']['conflicts'] and any(x.startswith('node x: gpu-mem accounting') for x in r['notes'])
    assert "node bad: nvidia.com/gpu has an unreadable quantity 'many'; ignored" in r['notes']


# The collection's own record of a node's pool (role gpu_node_labels: gpuops.io/sharing-strategy) classifies an
# NVIDIA device plugin node where GPU feature discovery's labels are absent (the collection does not deploy GFD;
# issue #36: the demo's time-slicing and MIG nodes read as exclusive). What the agents publish wins: GFD's labels
# when present, MIG resources, the renamed nvidia.com/gpu.shared, a HAMi registration.
OWN = 'gpuops.io/sharing-strategy'
GFD_TS = {'nvidia.com/gpu.sharing-strategy': 'time-slicing', 'nvidia.com/gpu.replicas': '4',
          'nvidia.com/mig.strategy': 'none'}
GFD_NONE = {'nvidia.com/gpu.sharing-strategy': 'none', 'nvidia.com/gpu.replicas': '1', 'nvidia.com/mig.strategy': 'none'}


@pytest.mark.parametrize('res, labels, annotations, expected', [
    # only the collection's labels and the plugin's resource
    ({'nvidia.com/gpu': '4'}, {OWN: 'time-slicing', 'nvidia.com/device-plugin.config': 'time-slicing'}, {},
     ['time-slicing']),
    ({'nvidia.com/gpu': '4'}, {OWN: 'mps', 'nvidia.com/device-plugin.config': 'mps'}, {}, ['mps']),
    ({'nvidia.com/gpu': '56'}, {OWN: 'mig', 'nvidia.com/device-plugin.config': 'mig-single'}, {}, ['mig']),
    ({'nvidia.com/gpu': '1'}, {OWN: 'exclusive', 'nvidia.com/device-plugin.config': 'exclusive'}, {}, ['exclusive']),
    ({'nvidia.com/gpu.shared': '4'}, {OWN: 'mps'}, {}, ['mps']),
    # a label of another family on a device plugin node: the resource says exclusive
    ({'nvidia.com/gpu': '1'}, {OWN: 'gpushare'}, {}, ['exclusive']),
    # GFD present and agreeing
    ({'nvidia.com/gpu': '4'}, dict(GFD_TS, **{OWN: 'time-slicing'}), {}, ['time-slicing']),
    ({'nvidia.com/gpu': '56'}, {OWN: 'mig', 'nvidia.com/mig.strategy': 'single'}, {}, ['mig']),
    # GFD present and disagreeing: GFD wins
    ({'nvidia.com/gpu': '1'}, dict(GFD_NONE, **{OWN: 'time-slicing'}), {}, ['exclusive']),
    ({'nvidia.com/gpu': '4'}, dict(GFD_TS, **{OWN: 'mig'}), {}, ['time-slicing']),
    # MIG devices (mixed) whatever the label says
    ({'nvidia.com/mig-1g.10gb': '7'}, {OWN: 'time-slicing'}, {}, ['mig']),
    # a HAMi-registered node stays HAMi's
    ({'nvidia.com/gpu': '20'}, {OWN: 'hami'}, {'hami.io/node-nvidia-register': 'x'}, ['hami']),
    ({'nvidia.com/gpu': '20'}, {OWN: 'time-slicing'}, {'hami.io/node-nvidia-register': 'x'}, ['hami']),
])
def test_node_strategies_from_the_collections_label(res, labels, annotations, expected):
    n = node('n', res, labels, annotations)
    amounts = dict((k, q.parse_quantity(v)) for k, v in res.items() if m.is_gpu_resource(k))
    assert m.node_strategies(n, amounts) == expected


def test_node_strategies_follow_the_configured_label():
    n = node('n', {'nvidia.com/gpu': '4'}, {'example.com/pool-strategy': 'time-slicing', OWN: 'exclusive'})
    amounts = {'nvidia.com/gpu': Decimal(4)}
    assert m.node_strategies(n, amounts, strategy_label='example.com/pool-strategy') == ['time-slicing']
    assert m.node_strategies(n, amounts) == ['exclusive']


def _report(labels, res=None, annotations=None, **kw):
    return m.analyse([node('n', res or {'nvidia.com/gpu': '4'}, labels, annotations)], [], **kw)


def test_the_demo_nodes_read_as_their_pools():
    # issue #36: lab-t4 (1 T4 x 4 replicas) and lab-a100 (8 A100 x 7 1g.10gb, MIG single), no GFD labels
    t4 = node('lab-t4', {'nvidia.com/gpu': '4'}, {OWN: 'time-slicing', 'nvidia.com/device-plugin.config': 'time-slicing'})
    a100 = node('lab-a100', {'nvidia.com/gpu': '56'}, {OWN: 'mig', 'nvidia.com/device-plugin.config': 'mig-single'})
    report = m.analyse([t4, a100], [])
    assert [(n['name'], n['strategies'], n['conflicts'], n['notes']) for n in report['nodes']] == [
        ('lab-a100', ['mig'], [], []), ('lab-t4', ['time-slicing'], [], [])]
    assert report['notes'] == []


def test_agreement_has_no_note():
    report = _report(dict(GFD_TS, **{OWN: 'time-slicing'}))
    assert report['nodes'][0]['strategies'] == ['time-slicing'] and report['nodes'][0]['notes'] == []
    assert report['notes'] == [] and report['nodes'][0]['conflicts'] == []


def test_disagreement_is_a_visible_note():
    report = _report(dict(GFD_NONE, **{OWN: 'time-slicing'}), res={'nvidia.com/gpu': '1'})
    want = ('label gpuops.io/sharing-strategy=time-slicing (the pool gpu_node_labels recorded) but the node\'s '
            'resources and GPU feature discovery labels show exclusive; the report follows what the node publishes')
    assert report['nodes'][0]['strategies'] == ['exclusive']
    assert report['nodes'][0]['notes'] == [want]
    assert report['notes'] == ['node n: ' + want]
    # not an accounting conflict: one scheduler counts the GPUs
    assert report['nodes'][0]['conflicts'] == []


def test_no_note_for_labels_outside_the_device_plugin_family():
    # a dra pool mid-migration, a HAMi pool, a node without GPU resources: no device plugin strategy to compare
    assert _report({OWN: 'dra'}, res={'cpu': '4'})['notes'] == []
    assert _report({OWN: 'hami'}, annotations={'hami.io/node-nvidia-register': 'x'})['notes'] == []
    assert _report({OWN: 'time-slicing'}, res={'nvidia.com/gpu': '0'})['notes'] == []


# The replicas per GPU the collection configured (label gpuops.io/sharing-replicas, written by the NVIDIA stack with
# the pool's labels): shown where GFD's nvidia.com/gpu.replicas is absent (the collection does not deploy GFD; issue
# #36: the report showed only the plugin's total), marked as the collection's record; GFD's label wins when both exist
# and a disagreement is a note.
RECORD = 'gpuops.io/sharing-replicas'


def test_replicas_per_gpu_from_the_collections_record_without_gfd():
    report = _report({OWN: 'time-slicing', RECORD: '3'}, res={'nvidia.com/gpu': '6'})
    (n,) = report['nodes']
    assert (n['replicas'], n['physical_gpus'], n['replicas_source']) == (3, 2, 'record')
    assert n['notes'] == [] and report['notes'] == []


def test_gfds_replicas_win_over_the_record_and_a_disagreement_is_a_note():
    report = _report(dict(GFD_TS, **{OWN: 'time-slicing', RECORD: '4'}), res={'nvidia.com/gpu': '8'})
    (n,) = report['nodes']
    assert (n['replicas'], n['physical_gpus'], n['replicas_source']) == (4, 2, 'gfd')
    assert n['notes'] == [] and report['notes'] == []
    report = _report(dict(GFD_TS, **{OWN: 'time-slicing', RECORD: '2'}), res={'nvidia.com/gpu': '8'})
    (n,) = report['nodes']
    assert (n['replicas'], n['replicas_source']) == (4, 'gfd')
    want = ('label gpuops.io/sharing-replicas=2 (the replicas per GPU the pool\'s stack configured) but GPU feature '
            'discovery\'s nvidia.com/gpu.replicas=4; the report follows GPU feature discovery')
    assert n['notes'] == [want] and report['notes'] == ['node n: ' + want]
    # GFD says 1 (exclusive): no replicas, the record's disagreement noted
    report = _report(dict(GFD_NONE, **{OWN: 'exclusive', RECORD: '4'}), res={'nvidia.com/gpu': '1'})
    (n,) = report['nodes']
    assert 'replicas' not in n and 'replicas_source' not in n
    assert n['notes'] == ['label gpuops.io/sharing-replicas=4 (the replicas per GPU the pool\'s stack configured) but '
                          'GPU feature discovery\'s nvidia.com/gpu.replicas=1; the report follows GPU feature discovery']


def test_a_record_that_is_no_count_above_one_is_not_shown():
    for value in ('1', '0', 'x', ''):
        (n,) = _report({OWN: 'time-slicing', RECORD: value})['nodes']
        assert 'replicas' not in n and 'replicas_source' not in n


def test_gfds_replicas_alone_are_marked_as_gfds():
    (n,) = m.analyse([node('ts', {'nvidia.com/gpu': '8'}, {'nvidia.com/gpu.replicas': '4'})], [])['nodes']
    assert (n['replicas'], n['replicas_source']) == (4, 'gfd')
