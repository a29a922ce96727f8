"""gpu_share_report joins what the GPUs were used for (NVIDIA dcgm-exporter's series in a real Prometheus) with what
the real kube-scheduler allocated (the shared `kube_real` cluster).

* The nodes are kwok nodes with what real lab nodes published (lab/node/recordings/gpu-nodes.json: a100x8 exclusive,
  t4x1-time-slicing, h100x2-mig-mixed, p100x1), each with a NoSchedule taint of this file; the pods are placed by the
  real scheduler (nodeSelector on the hostname) and made Running by kwok.
* The series are written here in the form dcgm-exporter 4.5.3-4.8.2 emits them (docs/conformance/dcgm-exporter.md:
  names from etc/default-counters.csv, labels gpu/UUID/device/modelName/Hostname and, with its Kubernetes attribution,
  pod/namespace/container; GPU_I_ID/GPU_I_PROFILE per MIG instance; no DCGM profiling fields on the Pascal P100),
  for the GPUs of the recorded nodes' NVML inventories (their UUIDs and models). No exporter runs: DCGM needs a GPU.
  They are two hours of samples, backfilled with upstream's `promtool tsdb create-blocks-from openmetrics` into the
  storage of upstream's Prometheus (github.com/prometheus/prometheus v0.316.0, lab/go/prometheus), which the module
  then queries over its HTTP API, as it would a site's.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_report_usage_real.py
Nothing here skips: a Prometheus that cannot be built or started is a failure.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import new_namespace, run_module, wait_until

sys.path.insert(0, os.path.join(str(Path(__file__).resolve().parents[1]), 'oracles'))
from oracle_util import go_set  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_kwok_nodes  # noqa: E402  (lab/tests: GPU kwok nodes from what real nodes published)

ROOT = Path(__file__).resolve().parents[3]
S = '%d' % os.getpid()
USER = 'gpuops-test-report-usage-%s' % S
MINE = 'gpuops.io/report-usage'
NS = 'usage-%s' % S
TAINT = {'key': MINE, 'value': S, 'effect': 'NoSchedule'}
RECORDED = json.loads((ROOT / 'lab' / 'node' / 'recordings' / 'gpu-nodes.json').read_text())['shapes']
INVENTORIES = ROOT / 'lab' / 'nvml_sim' / 'inventories'
STEP = 60              # one sample a minute, two hours of them
HOURS = 2


def n(short):
    return '%s-%s' % (short, S)


def gpus_of(shape):
    inv = json.loads((INVENTORIES / RECORDED[shape]['inventory']).read_text())
    return inv['gpus'][:RECORDED[shape]['gpus']]


def node(short, shape, strategy='exclusive'):
    """A kwok node of the recorded shape with its pool's agents running (lab/tests/gpu_kwok_nodes.py: every label and
    resource as the real node published them), this file's label and taint added."""
    made = gpu_kwok_nodes.mig_node(n(short), shape, labels={MINE: S}) if strategy == 'mig' else \
        gpu_kwok_nodes.agents_node(n(short), shape, strategy, labels={MINE: S})
    made['spec'] = {'taints': [TAINT]}
    return made


def pod(name, short, resources):
    """A GPU pod on this file's node ``short``; ``resources``: its container's {'limits': ...} (requests the same)."""
    return {'metadata': {'name': name, 'namespace': NS},
            'spec': {'nodeSelector': {'kubernetes.io/hostname': n(short)}, 'tolerations': [dict(TAINT, operator='Equal')],
                     'containers': [{'name': 'main', 'image': 'registry.example/cuda:12', 'resources': dict(
                         resources, requests=resources['limits'])}]}}


NODES = [node('ex', 'a100x8'), node('ts', 't4x1-time-slicing', 'time-slicing'), node('mig', 'h100x2-mig-mixed', 'mig'),
         node('old', 'p100x1')]
PODS = [pod('train', 'ex', {'limits': {'nvidia.com/gpu': '1'}}), pod('notebook', 'ex', {'limits': {'nvidia.com/gpu': '1'}}),
        pod('ts-a', 'ts', {'limits': {'nvidia.com/gpu': '1'}}), pod('ts-b', 'ts', {'limits': {'nvidia.com/gpu': '1'}}),
        pod('mig-small', 'mig', {'limits': {'nvidia.com/mig-1g.10gb': '1'}}),
        pod('pascal', 'old', {'limits': {'nvidia.com/gpu': '1'}}),
        pod('no-exporter', 'ex', {'limits': {'nvidia.com/gpu': '1'}}),
        # in HAMi's form (its vGPU monitor): no HAMi node was recorded (its device plugin cannot run here), so these two
        # pods hold GPUs of the A100 node and their series are the monitor's for its fourth GPU; the join reads the
        # series and the pods, not the node's strategy
        pod('hami-busy', 'ex', {'limits': {'nvidia.com/gpu': '1'}}), pod('hami-idle', 'ex', {'limits': {'nvidia.com/gpu': '1'}})]

POOL_LABEL = 'gpuops_io_sharing_pool'
POOLS = {n('ex'): 'h100-train', n('ts'): 't4-shared', n('mig'): 'h100-mig', n('old'): 'p100'}
A100, T4, H100M, P100 = gpus_of('a100x8'), gpus_of('t4x1-time-slicing'), gpus_of('h100x2-mig-mixed'), gpus_of('p100x1')


def series():
    """[(metric, labels, [(offset seconds before the end, value)])] as dcgm-exporter emits them with its Kubernetes
    attribution: a series per GPU (per MIG instance) and holder."""
    out = []
    span = range(0, HOURS * 3600 + 1, STEP)

    def gpu(host, index, g, holders, used, active, prof=True, mig=None, fb_total=None):
        # the pool as the collection's ServiceMonitor copies it from the exporter pod (podTargetLabels)
        base = {'gpu': str(index), 'UUID': g['uuid'], 'device': 'nvidia%d' % index, 'modelName': g['name'],
                'Hostname': host, POOL_LABEL: POOLS[host]}
        if mig:
            base.update(GPU_I_ID=mig[0], GPU_I_PROFILE=mig[1])
        total = fb_total or (g['memory_total_mib'] - g['memory_reserved_mib'])
        for holder in holders or [None]:
            labels = dict(base, **({'pod': holder, 'namespace': NS, 'container': 'main'} if holder else {}))
            # the last hour is what the report reads (usage_window 1h): the hour before is different on purpose
            out.append(('DCGM_FI_DEV_FB_USED', labels, [(t, used if t <= 3600 else 5) for t in span]))
            out.append(('DCGM_FI_DEV_FB_FREE', labels, [(t, total - (used if t <= 3600 else 5)) for t in span]))
            if not mig:
                out.append(('DCGM_FI_DEV_GPU_UTIL', labels, [(t, round(active * 100) if t <= 3600 else 0)
                                                             for t in span]))
            if prof:
                out.append(('DCGM_FI_PROF_GR_ENGINE_ACTIVE', labels, [(t, active if t <= 3600 else 0.9)
                                                                      for t in span]))
                out.append(('DCGM_FI_PROF_SM_ACTIVE', labels, [(t, round(0.7 * active, 4) if t <= 3600 else 0.6)
                                                               for t in span]))
    gpu(n('ex'), 0, A100[0], ['train'], 60000, 0.8)
    gpu(n('ex'), 1, A100[1], ['notebook'], 700, 0.002)
    gpu(n('ex'), 2, A100[2], [], 30000, 0.5)               # in use by something no pod holds
    gpu(n('ts'), 0, T4[0], ['ts-a', 'ts-b'], 9000, 0.35)   # time-slicing: both pods see the whole GPU
    gpu(n('mig'), 0, H100M[0], ['mig-small'], 4000, 0.4, mig=('7', '1g.10gb'), fb_total=9856)
    gpu(n('mig'), 0, H100M[0], [], 0, 0.0, mig=('8', '1g.10gb'), fb_total=9856)
    gpu(n('old'), 0, P100[0], ['pascal'], 2000, 0.25, prof=False)
    # HAMi's vGPU monitor (HAMi v2.10.0 cmd/vGPUmonitor/metrics.go): the GPU, and each container's own use and limit
    g, mib = A100[3], 1024 * 1024
    host = {'node': n('ex'), 'device_index': '3', 'device_uuid': g['uuid'], 'device_type': g['name'], 'zone': 'vGPU',
            POOL_LABEL: 'a100-hami'}
    out.append(('hami_host_gpu_memory_used_bytes', host, [(t, (13000 if t <= 3600 else 100) * mib) for t in span]))
    out.append(('hami_host_gpu_utilization_ratio', host, [(t, 45 if t <= 3600 else 0) for t in span]))
    for name, used, limit, active in (('hami-busy', 12000, 20000, 45), ('hami-idle', 1000, 10000, 0)):
        ctr = {'namespace': NS, 'pod': name, 'container': 'main', 'vdevice_index': '0', 'device_uuid': g['uuid'],
               'zone': 'vGPU', POOL_LABEL: 'a100-hami'}
        out.append(('hami_vgpu_memory_used_bytes', ctr, [(t, (used if t <= 3600 else 50) * mib) for t in span]))
        out.append(('hami_vgpu_memory_limit_bytes', ctr, [(t, limit * mib) for t in span]))
        out.append(('hami_container_device_utilization_ratio', ctr, [(t, active if t <= 3600 else 70) for t in span]))
    return out


def openmetrics(end):
    """OpenMetrics text of series() ending at ``end`` (one family after another, samples in time order)."""
    lines = []
    fams = {}
    for metric, labels, samples in series():
        fams.setdefault(metric, []).append((labels, samples))
    for metric, items in fams.items():
        lines.append('# TYPE %s gauge' % metric)
        for labels, samples in items:
            lab = ','.join('%s="%s"' % (k, v) for k, v in sorted(labels.items()))
            for offset, value in sorted(samples, key=lambda s: -s[0]):
                lines.append('%s{%s} %s %d' % (metric, lab, value, end - offset))
    lines.append('# EOF')
    return '\n'.join(lines) + '\n'


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='module')
def prometheus(tmp_path_factory):
    """Upstream's Prometheus serving the backfilled series; yields (url, the end of the series)."""
    d = go_set('prometheus')
    tmp = tmp_path_factory.mktemp('prom')
    end = (int(time.time()) // STEP) * STEP - 300
    (tmp / 'series.om').write_text(openmetrics(end))
    data = tmp / 'data'
    proc = subprocess.run([os.path.join(d, 'promtool'), 'tsdb', 'create-blocks-from', 'openmetrics',
                           str(tmp / 'series.om'), str(data)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tmp / 'prometheus.yml').write_text('global: {scrape_interval: 1m}\n')
    port = free_port()
    log = open(tmp / 'prometheus.log', 'w')
    server = subprocess.Popen([os.path.join(d, 'prometheus'), '--config.file', str(tmp / 'prometheus.yml'),
                               '--storage.tsdb.path', str(data), '--web.listen-address', '127.0.0.1:%d' % port,
                               '--storage.tsdb.retention.time', '15d'], stdout=log, stderr=subprocess.STDOUT)
    url = 'http://127.0.0.1:%d' % port
    try:
        def ready():
            assert server.poll() is None, (tmp / 'prometheus.log').read_text()[-3000:]
            try:
                return urllib.request.urlopen(url + '/-/ready', timeout=2).status == 200
            except OSError:
                return False
        wait_until('Prometheus ready', ready, 60)
        yield url, end
    finally:
        server.terminate()
        server.wait(30)
        log.close()


@pytest.fixture(scope='module')
def cluster(kube_real):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    for d in NODES:
        core.create_node(d)
    new_namespace(core, NS)
    try:
        wait_until('kwok made this file\'s nodes Ready', lambda: all(
            [c.status for c in (core.read_node(d['metadata']['name']).status.conditions or []) if c.type == 'Ready']
            == ['True'] for d in NODES))
        for p in PODS:
            core.create_namespaced_pod(NS, p)
        wait_until('every pod Running on its node', lambda: sorted(
            (p.metadata.name, p.spec.node_name, p.status.phase) for p in core.list_namespaced_pod(NS).items) == sorted(
            (p['metadata']['name'], p['spec']['nodeSelector']['kubernetes.io/hostname'], 'Running') for p in PODS), 90)
        yield {'kube': kube_real, 'kubeconfig': kube_real.user(USER, reads=True)}
    finally:
        core.delete_namespace(NS)
        for d in NODES:
            core.delete_node(d['metadata']['name'])


def report(collections_path, cluster, **args):
    args = dict({'node_selector': '%s=%s' % (MINE, S), 'namespace': NS}, **args)
    return run_module(collections_path, 'gpuops.k8s_gpu.gpu_share_report', json.dumps(args),
                      env={'K8S_AUTH_KUBECONFIG': cluster['kubeconfig']})


def test_usage_joined_with_the_allocations(collections_path, cluster, prometheus):
    url, end = prometheus
    res = report(collections_path, cluster, prometheus_url=url, usage_window='1h', usage_time=str(end))
    assert not res.get('failed'), res.get('msg')
    u = res['usage']
    pods = dict((p['name'], p) for p in u['pods'])
    assert set(pods) == set(p['metadata']['name'] for p in PODS)
    # exclusive: the training pod's GPU worked (80 % of the hour on average), the notebook's did not
    assert (pods['train']['gpus'], pods['train']['memory_used_mib'], pods['train']['active_percent'],
            pods['train']['idle'], pods['train']['shared']) == ([A100[0]['uuid']], 60000.0, 80.0, False, False)
    assert (pods['notebook']['active_percent'], pods['notebook']['idle']) == (0.2, True)
    assert pods['notebook']['requests'] == {'nvidia.com/gpu': 1}  # expected, not written
    # time-slicing: both pods on the one T4, each shown with the whole GPU's use, marked shared
    for name in ('ts-a', 'ts-b'):
        assert (pods[name]['gpus'], pods[name]['active_percent'], pods[name]['shared'], pods[name]['idle']) == (
            [T4[0]['uuid']], 35.0, True, False), pods[name]
    # MIG: the instance the pod holds (7), not the GPU
    assert (pods['mig-small']['gpus'], pods['mig-small']['memory_used_mib'], pods['mig-small']['active_percent']) == (
        [H100M[0]['uuid'] + '/7'], 4000.0, 40.0)
    # Pascal: no DCGM profiling fields, activity from GPU utilisation
    assert (pods['pascal']['active_percent'], pods['pascal']['idle']) == (25.0, False)
    by_uuid = dict(((g['uuid'], g['mig_instance']), g) for g in u['gpus'])
    assert by_uuid[(P100[0]['uuid'], None)]['activity_source'] == 'DCGM_FI_DEV_GPU_UTIL'
    assert by_uuid[(A100[0]['uuid'], None)]['activity_source'] == 'DCGM_FI_PROF_GR_ENGINE_ACTIVE'
    assert by_uuid[(A100[0]['uuid'], None)]['memory_total_mib'] == A100[0]['memory_total_mib'] - A100[0][
        'memory_reserved_mib']
    # HAMi: each pod's own memory against its limit and its own SM use; the GPU as HAMi's monitor sees it
    assert (pods['hami-busy']['gpus'], pods['hami-busy']['memory_used_mib'], pods['hami-busy']['memory_limit_mib'],
            pods['hami-busy']['active_percent'], pods['hami-busy']['measured'], pods['hami-busy']['idle']) == (
        [A100[3]['uuid']], 12000.0, 20000.0, 45.0, 'pod', False)
    assert (pods['hami-idle']['memory_used_mib'], pods['hami-idle']['memory_limit_mib'], pods['hami-idle']['idle']) == (
        1000.0, 10000.0, True)
    hg = by_uuid[(A100[3]['uuid'], None)]
    assert (hg['memory_used_mib'], hg['active_percent'], hg['activity_source'], hg['holders']) == (
        13000.0, 45.0, 'hami_host_gpu_utilization_ratio', ['%s/hami-busy' % NS, '%s/hami-idle' % NS])
    assert pods['train']['measured'] == 'gpu'
    assert '12000 MiB of 20000 MiB' in res['table']
    # the pod no series names, the idle allocations, the busy GPU no pod holds
    assert u['unseen'] == ['%s/no-exporter' % NS] and pods['no-exporter']['idle'] is None
    assert u['idle'] == ['%s/hami-idle' % NS, '%s/notebook' % NS]
    assert u['unattributed'] == ['%s GPU 2 (%s)' % (n('ex'), A100[2]['uuid'])]
    assert 'Idle allocations (active < 1%%): %s/hami-idle, %s/notebook' % (NS, NS) in res['table']


def test_an_earlier_window_reads_the_hour_before(collections_path, cluster, prometheus):
    url, end = prometheus
    res = report(collections_path, cluster, prometheus_url=url, usage_window='30m', usage_time=str(end - 5400))
    assert not res.get('failed'), res.get('msg')
    pods = dict((p['name'], p) for p in res['usage']['pods'])
    # in the hour before, every A100 was busy (90 %) with 5 MiB: the notebook was not idle then
    assert (pods['notebook']['active_percent'], pods['notebook']['memory_used_mib'], pods['notebook']['idle']) == (
        90.0, 5.0, False)
    assert res['usage']['idle'] == ['%s/pascal' % NS]      # the P100's utilisation was 0 in that hour
    assert pods['hami-idle']['active_percent'] == 70.0      # HAMi's idle pod was busy in the hour before


def test_prometheus_errors_are_clear(collections_path, cluster, prometheus):
    res = report(collections_path, cluster, prometheus_url='http://127.0.0.1:%d' % free_port())
    assert res.get('failed') and 'prometheus_url: cannot read http://127.0.0.1:' in res['msg'], res
    url, _end = prometheus
    # a base URL with a path Prometheus does not serve (a proxy prefix forgotten or added): its 404 page is no JSON
    res = report(collections_path, cluster, prometheus_url=url + '/prometheus')
    assert res.get('failed') and 'prometheus_url: %s/prometheus answered HTTP 404 to %s/prometheus/api/v1/query?' % (
        url, url) in res['msg'], res


# ------------------------------------------------------------------------------------------------------- dashboard
def _dashboard():
    from conftest import lab_collections_path
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard
    return dashboard


def test_every_dashboard_query_answers_on_the_real_prometheus(prometheus):
    """Each panel's PromQL (with the variables at All) is valid to upstream's Prometheus and answers from the series;
    the pool and node variables list the pools and nodes."""
    sys.path.insert(0, str(ROOT / 'lab' / 'metrics'))
    import draw_dashboard
    url, end = prometheus
    dash = _dashboard().dashboard()
    data = draw_dashboard.fill(dash, url, end)
    by_title = dict((p['title'], data[p['id']]) for p in dash['panels'])
    assert all(by_title.values()), [t for t, rows in by_title.items() if not rows]
    assert by_title['GPUs reporting'] == [('value', 7.0)]        # 3 A100s, the T4, 2 MIG instances, the P100
    assert by_title['GPUs held by pods'] == [('value', 5.0)]
    [(who, active)] = by_title['Idle allocations']
    assert who == 'namespace=%s, pod=notebook' % NS and active == pytest.approx(0.2)
    mem = dict(by_title['Memory used per pod (MiB; a shared GPU counts whole)'])
    assert mem['%s/train' % NS][-1][1] == 60000.0 and mem['%s/ts-a' % NS][-1][1] == 9000.0
    hami = dict(by_title['HAMi pools: memory per pod, used and limit (MiB)'])
    assert (hami['%s/hami-busy used' % NS][-1][1], hami['%s/hami-busy limit' % NS][-1][1]) == (12000.0, 20000.0)
    assert dict(by_title['HAMi pools: SM use per pod (%)'])['%s/hami-idle' % NS][-1][1] == 0.0
    for var, want in (('pool', sorted(set(POOLS.values()))), ('node', sorted(POOLS))):
        q = [v for v in dash['templating']['list'] if v['name'] == var][0]['query']['query']
        inner = q[len('label_values('):-1]
        match, label = inner.rsplit(', ', 1)
        match = match.replace('$pool', '.*')
        got = json.loads(urllib.request.urlopen('%s/api/v1/label/%s/values?%s' % (
            url, label, urllib.parse.urlencode({'match[]': match})), timeout=10).read())['data']
        assert got == want, (var, got)
    picture = draw_dashboard.svg(dash, data).replace('-' + S, '')   # this run's pid out of node and namespace names
    doc = ROOT / 'docs' / 'observability-dashboard.svg'
    if os.environ.get('GPUOPS_WRITE_DASHBOARD_SVG') == '1':
        doc.write_text(picture)
    assert doc.read_text() == picture, 'docs/observability-dashboard.svg is not what the dashboard draws now: ' \
        'rerun this test with GPUOPS_WRITE_DASHBOARD_SVG=1'
