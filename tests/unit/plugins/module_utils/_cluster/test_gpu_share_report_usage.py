# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""report/usage: dcgm-exporter's series (as Prometheus answers /api/v1/query) joined with the report's pods."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model, render, usage


def node(name, resources):
    status = {'capacity': resources, 'allocatable': resources, 'addresses': []}
    return {'metadata': {'name': name, 'labels': {}}, 'status': status}


def pod(ns, name, node_name, requests, phase='Running'):
    return {'metadata': {'namespace': ns, 'name': name}, 'spec': {'nodeName': node_name, 'containers': [
        {'name': 'c', 'resources': {'limits': requests, 'requests': requests}}]}, 'status': {'phase': phase}}


def answer(series):
    """A Prometheus instant-vector answer: series = [(labels, value)]."""
    return {'status': 'success', 'data': {'resultType': 'vector', 'result': [
        {'metric': labels, 'value': [1796040000.0, str(value)]} for labels, value in series]}}


def gpu_labels(host, index, uuid, model_name='NVIDIA H100 80GB HBM3', **extra):
    labels = {'__name__': 'x', 'gpu': str(index), 'UUID': uuid, 'device': 'nvidia%d' % index,
              'modelName': model_name, 'Hostname': host}
    labels.update(extra)
    return labels


def vectors(per_query):
    return dict((name, usage.vector(answer(series), name)) for name, series in per_query.items())


def report_of(nodes, pods):
    return model.analyse(nodes, pods)


def test_queries_and_urls_name_the_exporters_fields_and_the_window():
    q = usage.queries('30m')
    assert q == {'memory_used': 'avg_over_time(DCGM_FI_DEV_FB_USED[30m])',
                 'memory_used_max': 'max_over_time(DCGM_FI_DEV_FB_USED[30m])',
                 'memory_free': 'avg_over_time(DCGM_FI_DEV_FB_FREE[30m])',
                 'gr_active': 'avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[30m])',
                 'gpu_util': 'avg_over_time(DCGM_FI_DEV_GPU_UTIL[30m])',
                 'hami_host_memory_used': 'avg_over_time(hami_host_gpu_memory_used_bytes[30m])',
                 'hami_host_active': 'avg_over_time(hami_host_gpu_utilization_ratio[30m])',
                 'hami_memory_used': 'avg_over_time(hami_vgpu_memory_used_bytes[30m])',
                 'hami_memory_limit': 'max_over_time(hami_vgpu_memory_limit_bytes[30m])',
                 'hami_active': 'avg_over_time(hami_container_device_utilization_ratio[30m])'}
    urls = usage.query_urls('https://prom.example:9090/', '30m', at='2026-11-30T12:00:00Z')
    u = urlsplit(urls['gr_active'])
    assert (u.scheme, u.netloc, u.path) == ('https', 'prom.example:9090', '/api/v1/query')
    assert parse_qs(u.query) == {'query': [q['gr_active']], 'time': ['2026-11-30T12:00:00Z']}
    assert 'time' not in parse_qs(urlsplit(usage.query_urls('http://p', '1h')['memory_used']).query)


@pytest.mark.parametrize('url,window,at,idle,needle', [
    ('prom:9090', '1h', None, 1.0, "prometheus_url must be an http:// or https:// URL"),
    ('http://p', '1 hour', None, 1.0, "usage_window must be a Prometheus duration"),
    ('http://p', '', None, 1.0, "usage_window must be a Prometheus duration"),
    ('http://p', 'h', None, 1.0, "usage_window must be a Prometheus duration"),
    ('http://p', '30m1h', None, 1.0, "usage_window must be a Prometheus duration"),
    ('http://p', '1h', 'yesterday', 1.0, "usage_time must be an RFC 3339 time"),
    ('http://p', '1h', None, 101, "usage_idle_percent must be between 0 and 100, got 101"),
])
def test_bad_options_are_refused_by_name_value_and_form(url, window, at, idle, needle):
    errors = usage.check_options(url, window, at, idle)
    assert len(errors) == 1 and needle in errors[0], errors
    assert repr(window if 'window' in needle else url if 'url' in needle else at if 'time' in needle else idle) in \
        errors[0]


@pytest.mark.parametrize('window', ['1h', '30m', '1d12h', '90s', '1w', '500ms'])
def test_good_options_pass(window):
    assert usage.check_options('https://p:9090', window, '1796040000', 0) == []
    assert usage.check_options(None, window, '2026-11-30T12:00:00+01:00', 100) == []


def test_an_error_answer_or_a_matrix_is_refused():
    with pytest.raises(usage.AnswerError, match='refused the query gr_active: parse error'):
        usage.vector({'status': 'error', 'errorType': 'bad_data', 'error': 'parse error'}, 'gr_active')
    with pytest.raises(usage.AnswerError, match='with a matrix, not an instant vector'):
        usage.vector({'status': 'success', 'data': {'resultType': 'matrix', 'result': []}}, 'x')
    with pytest.raises(usage.AnswerError, match='no value'):
        usage.vector({'status': 'success', 'data': {'resultType': 'vector', 'result': [{'metric': {}}]}}, 'x')


def test_exclusive_pods_used_idle_and_unseen():
    nodes = [node('n1', {'nvidia.com/gpu': '2'}), node('n2', {'nvidia.com/gpu': '1'})]
    pods = [pod('ml', 'train', 'n1', {'nvidia.com/gpu': '1'}), pod('ml', 'notebook', 'n1', {'nvidia.com/gpu': '1'}),
            pod('ml', 'elsewhere', 'n2', {'nvidia.com/gpu': '1'}),
            pod('ml', 'waiting', None, {'nvidia.com/gpu': '1'}, phase='Pending')]
    g0 = gpu_labels('n1', 0, 'GPU-aaa', pod='train', namespace='ml', container='c')
    g1 = gpu_labels('n1', 1, 'GPU-bbb', pod='notebook', namespace='ml', container='c')
    u = usage.join(report_of(nodes, pods), vectors({
        'memory_used': [(g0, 40000.0), (g1, 512.0)], 'memory_used_max': [(g0, 61000.0), (g1, 512.0)],
        'memory_free': [(g0, 41000.0), (g1, 80488.0)], 'gr_active': [(g0, 0.83), (g1, 0.002)],
        'gpu_util': [(g0, 97.0), (g1, 0.0)]}), '1h', idle_percent=1.0, source='http://p')
    by = dict((p['name'], p) for p in u['pods'])
    assert by['train']['gpus'] == ['GPU-aaa'] and by['train']['memory_used_mib'] == 40000.0
    assert by['train']['active_percent'] == 83.0 and by['train']['idle'] is False and by['train']['shared'] is False
    assert by['notebook']['active_percent'] == 0.2 and by['notebook']['idle'] is True
    assert by['elsewhere']['idle'] is None and by['elsewhere']['gpus'] == []
    assert 'waiting' not in by                        # not running: nothing to measure
    assert u['idle'] == ['ml/notebook'] and u['unseen'] == ['ml/elsewhere']
    g = u['gpus'][0]
    assert (g['node'], g['index'], g['uuid'], g['memory_total_mib'], g['memory_used_max_mib']) == \
        ('n1', '0', 'GPU-aaa', 81000.0, 61000.0)
    assert g['activity_source'] == usage.GR_ACTIVE and g['holders'] == ['ml/train']
    assert any('ml/elsewhere' in n for n in u['notes'])
    text = render.table(dict(report_of(nodes, pods), usage=u))
    assert 'Usage over 1h (dcgm-exporter via Prometheus):' in text
    assert 'Idle allocations (active < 1%): ml/notebook' in text
    md = render.render(dict(report_of(nodes, pods), usage=u), 'markdown')
    assert '## Usage' in md and '| ml | notebook | n1 | nvidia.com/gpu=1 | 512 MiB | 0.2% | idle |' in md


def test_time_slicing_shared_gpu_is_measured_as_a_whole_and_said_so():
    nodes = [node('ts', {'nvidia.com/gpu': '4'})]
    pods = [pod('a', 'p1', 'ts', {'nvidia.com/gpu': '1'}), pod('b', 'p2', 'ts', {'nvidia.com/gpu': '1'})]
    s1 = gpu_labels('ts', 0, 'GPU-ts', 'Tesla T4', pod='p1', namespace='a', container='c', vgpu='0')
    s2 = gpu_labels('ts', 0, 'GPU-ts', 'Tesla T4', pod='p2', namespace='b', container='c', vgpu='1')
    u = usage.join(report_of(nodes, pods), vectors({
        'memory_used': [(s1, 3000.0), (s2, 3000.0)], 'memory_free': [(s1, 12000.0), (s2, 12000.0)],
        'gpu_util': [(s1, 35.0), (s2, 35.0)]}), '1h')
    assert len(u['gpus']) == 1 and u['gpus'][0]['holders'] == ['a/p1', 'b/p2'] and u['gpus'][0]['shared']
    assert u['gpus'][0]['activity_source'] == usage.GPU_UTIL    # a T4 has no profiling metrics
    assert all(p['shared'] and p['active_percent'] == 35.0 for p in u['pods'])
    assert any('measured as a whole' in n for n in u['notes'])
    assert any('DCGM_FI_DEV_GPU_UTIL' in n for n in u['notes'])


def test_mig_instances_are_their_own_entities():
    nodes = [node('mig', {'nvidia.com/mig-1g.10gb': '7'})]
    pods = [pod('x', 'small', 'mig', {'nvidia.com/mig-1g.10gb': '1'})]
    base = dict(GPU_I_PROFILE='1g.10gb')
    i1 = gpu_labels('mig', 0, 'GPU-mig', GPU_I_ID='7', pod='small', namespace='x', container='c', **base)
    i2 = gpu_labels('mig', 0, 'GPU-mig', GPU_I_ID='8', **base)
    u = usage.join(report_of(nodes, pods), vectors({
        'memory_used': [(i1, 800.0), (i2, 0.0)], 'memory_free': [(i1, 9000.0), (i2, 9800.0)],
        'gr_active': [(i1, 0.5), (i2, 0.0)]}), '2h')
    assert [(g['mig_instance'], g['holders']) for g in u['gpus']] == [('7', ['x/small']), ('8', [])]
    assert u['pods'][0]['gpus'] == ['GPU-mig/7'] and u['pods'][0]['active_percent'] == 50.0
    assert u['unattributed'] == []                  # the idle instance with no pod is not "used by nobody"


def test_an_active_gpu_no_pod_holds_is_named():
    nodes = [node('n1', {'nvidia.com/gpu': '1'})]
    g = gpu_labels('n1', 0, 'GPU-ccc')
    u = usage.join(report_of(nodes, []), vectors({'memory_used': [(g, 9000.0)], 'gpu_util': [(g, 70.0)]}), '1h')
    assert u['unattributed'] == ['n1 GPU 0 (GPU-ccc)']


def test_no_series_at_all_is_a_note_not_an_error():
    u = usage.join(report_of([node('n1', {'nvidia.com/gpu': '1'})], []), {}, '1h')
    assert u['gpus'] == [] and 'no DCGM_FI_DEV_FB_USED series in the last 1h' in u['notes'][0]


def test_nan_samples_are_skipped():
    ans = {'status': 'success', 'data': {'resultType': 'vector', 'result': [
        {'metric': {'UUID': 'a'}, 'value': [1, 'NaN']}, {'metric': {'UUID': 'b'}, 'value': [1, '2']}]}}
    assert usage.vector(ans, 'x') == [({'UUID': 'b'}, 2.0)]


def test_the_fields_read_are_in_the_exporters_counters():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dcgm
    assert set(usage.METRICS) <= set(dcgm.COUNTERS)


def hami_labels(ns, pod_name, uuid, index='0'):
    return {'namespace': ns, 'pod': pod_name, 'container': 'c', 'vdevice_index': index, 'device_uuid': uuid,
            'zone': 'vGPU'}


def test_hami_pods_show_their_own_use_against_their_limit():
    """A HAMi GPU shared by two pods: the vGPU monitor gives each container's own memory and SM use (bytes, percent),
    the GPU's memory and utilisation per node; one pod is busy, the other idle - only the idle one is listed, and no
    'measured as a whole' note (that is DCGM's limit)."""
    gib = 1024.0 ** 3
    nodes = [node('hn', {'nvidia.com/gpu': '8'})]
    pods = [pod('a', 'busy', 'hn', {'nvidia.com/gpu': '1', 'nvidia.com/gpumem': '20000'}),
            pod('b', 'idle', 'hn', {'nvidia.com/gpu': '1', 'nvidia.com/gpumem': '10000'}),
            pod('c', 'elsewhere', 'hn', {'nvidia.com/gpu': '1'})]
    host = {'node': 'hn', 'device_index': '0', 'device_uuid': 'GPU-hami-0', 'device_type': 'NVIDIA-A100-SXM4-80GB',
            'zone': 'vGPU'}
    busy, idle = hami_labels('a', 'busy', 'GPU-hami-0'), hami_labels('b', 'idle', 'GPU-hami-0')
    u = usage.join(report_of(nodes, pods), vectors({
        'hami_host_memory_used': [(host, 24 * gib)], 'hami_host_active': [(host, 61.0)],
        'hami_memory_used': [(busy, 16 * gib), (idle, 2 * gib)],
        'hami_memory_limit': [(busy, 20000 * 1024.0 ** 2), (idle, 10000 * 1024.0 ** 2)],
        'hami_active': [(busy, 58.0), (idle, 0.0)]}), '1h')
    [g] = u['gpus']
    assert (g['node'], g['uuid'], g['index'], g['model']) == ('hn', 'GPU-hami-0', '0', 'NVIDIA-A100-SXM4-80GB')
    assert g['memory_used_mib'] == 24576.0 and g['active_percent'] == 61.0
    assert g['activity_source'] == usage.HAMI_HOST_UTIL and g['holders'] == ['a/busy', 'b/idle'] and g['shared']
    by = dict((p['name'], p) for p in u['pods'])
    assert (by['busy']['memory_used_mib'], by['busy']['memory_limit_mib'], by['busy']['active_percent']) == (
        16384.0, 20000.0, 58.0)
    assert (by['idle']['memory_used_mib'], by['idle']['memory_limit_mib'], by['idle']['idle']) == (2048.0, 10000.0, True)
    assert by['busy']['measured'] == by['idle']['measured'] == 'pod' and by['busy']['idle'] is False
    assert u['idle'] == ['b/idle'] and u['unseen'] == ['c/elsewhere']
    assert not any('measured as a whole' in n for n in u['notes'])
    assert any('HAMi' in n and 'their own use' in n for n in u['notes'])


def test_the_hami_fields_read_are_those_the_stack_scrapes():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import rules
    assert set(rules.HAMI_METRICS) <= set(usage.HAMI_METRICS)


def test_a_hami_pods_row_shows_its_limit():
    row = {'namespace': 'a', 'name': 'busy', 'node': 'hn', 'requests': {'nvidia.com/gpumem': '20000'},
           'memory_used_mib': 16384.0, 'memory_limit_mib': 20000.0, 'active_percent': 58.0, 'shared': True,
           'idle': False, 'measured': 'pod'}
    assert render._usage_pod_rows({'pods': [row]})[0][4] == '16384 MiB of 20000 MiB'
    assert render._usage_pod_rows({'pods': [dict(row, memory_limit_mib=None)]})[0][4] == '16384 MiB'
