# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_share_report text forms: the kubectl-inspect-gpushare style table, Markdown and HTML."""
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as m
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import render as r


def node(name, res, ip):
    return {'metadata': {'name': name}, 'status': {'capacity': res, 'allocatable': res,
                                                   'addresses': [{'type': 'InternalIP', 'address': ip}]}}


def pod(name, node_name, limits, annotations=None, ns='default'):
    return {'metadata': {'name': name, 'namespace': ns, 'annotations': annotations or {}},
            'spec': {'nodeName': node_name, 'containers': [{'name': 'c', 'resources': {'limits': limits}}]},
            'status': {'phase': 'Running'}}


def sample():
    nodes = [node('node-a', {'aliyun.com/gpu-mem': '30', 'aliyun.com/gpu-count': '2'}, '192.168.0.71'),
             node('node-b', {'aliyun.com/gpu-mem': '30', 'aliyun.com/gpu-count': '2'}, '192.168.0.70'),
             node('node-c', {'nvidia.com/gpu': '4'}, '192.168.0.72'),
             node('cpu', {'cpu': '4'}, '192.168.0.73')]
    pods = [pod('a', 'node-a', {'aliyun.com/gpu-mem': '6'}, {'ALIYUN_COM_GPU_MEM_IDX': '0'}),
            pod('b', 'node-b', {'aliyun.com/gpu-mem': '3'}, {'ALIYUN_COM_GPU_MEM_IDX': '0'}),
            pod('c<x>', 'node-c', {'nvidia.com/gpu': '1'}, ns='a|b')]
    return m.analyse(nodes, pods)


def test_fmt():
    assert r.fmt(None) == '-' and r.fmt(3) == '3' and r.fmt(2.5) == '2.5' and r.fmt(1 / 3.0) == '0.33'
    assert r.fmt(0.0) == '0' and r.fmt_pct(None) == '-' and r.fmt_pct(15) == '15%'


def test_table_matches_inspect_layout():
    lines = r.table(sample()).splitlines()
    assert lines[0] == 'NAME    IPADDRESS     GPU0(Allocated/Total)  GPU1(Allocated/Total)  GPU Memory(GiB)'
    assert lines[1] == 'node-a  192.168.0.71  6/15                   0/15                   6/30'
    assert lines[2] == 'node-b  192.168.0.70  3/15                   0/15                   3/30'
    assert set(lines[3]) == set('-')
    assert lines[4:6] == ['Allocated/Total GPU Memory In Cluster:', '9/60 (15%)']
    assert lines[7].split() == ['NAME', 'IPADDRESS', 'STRATEGY', 'RESOURCE', 'ALLOCATED/ALLOCATABLE', 'PERCENT']
    assert ['node-c', '192.168.0.72', 'exclusive', 'nvidia.com/gpu', '1/4', '25%'] in [x.split() for x in lines]


def test_table_without_gpus():
    rep = m.analyse([node('cpu', {'cpu': '4'}, '10.0.0.1')], [])
    assert r.table(rep) == 'No GPU resources found on 1 node(s).'


def test_markdown_escapes_and_is_stable():
    rep = sample()
    md = r.markdown(rep)
    assert md == r.markdown(sample())
    assert md.startswith('# GPU share report\n')
    assert '| a\\|b | c<x> | node-c | Running | nvidia.com/gpu=1 | - |' in md
    assert '| 0 | - | - | 6/15 GiB | default/a (mem 6) |' in md
    assert 'gpushare GPU memory: 9/60 GiB (15%)' in md


def test_html_escapes():
    doc = r.render(sample(), 'html')
    assert doc.startswith('<!DOCTYPE html>') and doc.endswith('</html>\n')
    assert '<td>c&lt;x&gt;</td>' in doc and '<h3>node-a (192.168.0.71)</h3>' in doc
    assert r.render(sample(), 'markdown') == r.markdown(sample())


def labelled(name, res, ip, labels):
    n = node(name, res, ip)
    n['metadata']['labels'] = labels
    return n


def replicas_sample():
    # a node of the collection's time-slicing pool without GFD (its record: 3 per GPU) and one with GFD's label
    return m.analyse([labelled('ts', {'nvidia.com/gpu': '6'}, '10.0.0.1', {
        'gpuops.io/sharing-strategy': 'time-slicing', 'gpuops.io/sharing-replicas': '3'}),
        labelled('gfd', {'nvidia.com/gpu': '8'}, '10.0.0.2', {'nvidia.com/gpu.replicas': '4'}),
        node('whole', {'nvidia.com/gpu': '2'}, '10.0.0.3')], [])


def test_table_shows_replicas_per_gpu_and_whose_they_are():
    rows = [x.split() for x in r.table(replicas_sample()).splitlines()]
    assert rows[0] == ['NAME', 'IPADDRESS', 'STRATEGY', 'RESOURCE', 'ALLOCATED/ALLOCATABLE', 'PERCENT', 'REPLICAS/GPU']
    assert ['ts', '10.0.0.1', 'time-slicing', 'nvidia.com/gpu', '0/6', '0%', '3', '(record)'] in rows
    assert ['gfd', '10.0.0.2', 'time-slicing', 'nvidia.com/gpu', '0/8', '0%', '4'] in rows
    assert ['whole', '10.0.0.3', 'exclusive', 'nvidia.com/gpu', '0/2', '0%', '-'] in rows


def test_markdown_shows_replicas_per_gpu_and_whose_they_are():
    md = r.markdown(replicas_sample())
    assert ('Replicas per GPU: 3, the collection\'s record (label gpuops.io/sharing-replicas); 2 physical GPU(s)'
            in md)
    assert 'Replicas per GPU: 4, from GPU feature discovery (label nvidia.com/gpu.replicas); 2 physical GPU(s)' in md
    assert md.count('Replicas per GPU') == 2
