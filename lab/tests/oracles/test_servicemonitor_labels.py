"""The labels a dcgm-exporter series keeps when the Prometheus Operator scrapes it through the collection's
ServiceMonitor, on upstream's Prometheus 3.16.0 (lab/go/prometheus). Row DCGMX-23 of docs/conformance/dcgm-exporter.md.

The Operator (v0.85.0, pkg/prometheus/promcfg.go generateServiceMonitorConfig) gives every target of a ServiceMonitor
endpoint the labels `namespace`, `service`, `pod` and `container` of the scraped pod - the exporter's own - and sets
`honor_labels` from the endpoint's `honorLabels` (default false). dcgm-exporter puts the workload's `namespace`, `pod`
and `container` on a GPU's series; with honor_labels false Prometheus renames a scraped label that the target also has
to `exported_<name>` (v0.316.0 scrape/scrape.go), so the dashboard, the alerts and the report would read the exporter's
pod. The Operator itself does not run here: the scrape jobs below are what it generates for the collection's rendered
endpoint (its relabelings, honorLabels, path), with the exporter pod's meta labels given as the target's labels; a
small HTTP server serves series in dcgm-exporter's form.

1. The rendered endpoint (honorLabels true): the series keeps the workload's pod, namespace and container, and gets
   the pool label from the exporter pod's label (the endpoint's relabeling).
2. The same endpoint with honorLabels false (the Operator's default; dcgm-exporter's chart leaves it false): the
   workload's labels become exported_pod, ... - the oracle tells the two apart.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/oracles/test_servicemonitor_labels.py
"""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import lab_collections_path
from gpu_kwok_nodes import real  # lab/kube/real.py
from oracle_util import go_set, stop_process

SERIES = ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-5b2d1c7e-0000-4000-8000-000000000001",pci_bus_id="00000000:18:00.0",'
          'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",container="main",'
          'namespace="team-a",pod="train-1"} 40960\n')
# the exporter pod as Kubernetes discovery describes it (what the Operator's relabelings read)
EXPORTER_POD = {'__meta_kubernetes_namespace': 'kube-system', '__meta_kubernetes_pod_name': 'dcgm-exporter-h100-x7k2p',
                '__meta_kubernetes_pod_container_name': 'exporter', '__meta_kubernetes_service_name': 'dcgm-exporter-h100',
                '__meta_kubernetes_pod_label_gpuops_io_sharing_pool': 'h100'}


def _endpoint():
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
    out = exporter.render({'strategy': 'exclusive', 'pool': 'h100', 'monitoring_api': True})
    [sm] = [o for o in out['objects'] if o['kind'] == 'ServiceMonitor']
    [ep] = sm['spec']['endpoints']
    return ep


def _job(name, ep, target, honor):
    """The scrape job the Operator generates for endpoint ``ep`` (the relabelings that matter here, in its order:
    its own target labels, then the endpoint's relabelings)."""
    relabel = [{'source_labels': [src], 'target_label': dst} for src, dst in (
        ('__meta_kubernetes_namespace', 'namespace'), ('__meta_kubernetes_service_name', 'service'),
        ('__meta_kubernetes_pod_name', 'pod'), ('__meta_kubernetes_pod_container_name', 'container'))]
    for r in ep.get('relabelings') or []:
        relabel.append({'action': r['action'], 'source_labels': r['sourceLabels'], 'target_label': r['targetLabel']})
    return {'job_name': name, 'honor_labels': honor, 'metrics_path': ep['path'], 'scrape_interval': '1s',
            'static_configs': [{'targets': [target], 'labels': dict(EXPORTER_POD)}], 'relabel_configs': relabel}


@pytest.fixture(scope='module')
def scraped(tmp_path_factory):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = SERIES.encode()
            self.send_response(200)
            self.send_header('Content-Type', 'text/plain; version=0.0.4')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(('127.0.0.1', real.free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tmp_path_factory.mktemp('sm-labels')
    ep = _endpoint()
    target = '127.0.0.1:%d' % server.server_address[1]
    cfg = tmp / 'prometheus.yml'
    cfg.write_text(yaml.safe_dump({'global': {'scrape_interval': '1s'}, 'scrape_configs': [
        _job('rendered', ep, target, ep.get('honorLabels', False)), _job('default', ep, target, False)]}))
    port = real.free_port()
    base = 'http://127.0.0.1:%d' % port
    prom = os.path.join(go_set('prometheus'), 'prometheus')
    log = open(tmp / 'prometheus.log', 'w')
    proc = subprocess.Popen([prom, '--config.file=%s' % cfg, '--storage.tsdb.path=%s' % (tmp / 'data'),
                             '--web.listen-address=127.0.0.1:%d' % port], stdout=log, stderr=subprocess.STDOUT)

    def query(q):
        url = base + '/api/v1/query?' + urllib.parse.urlencode({'query': q})
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read().decode())['data']['result']
    try:
        deadline, got = time.time() + 60, {}
        while time.time() < deadline and len(got) < 2:
            assert proc.poll() is None, (tmp / 'prometheus.log').read_text()[-3000:]
            try:
                got = dict((s['metric']['job'], s['metric']) for s in query('DCGM_FI_DEV_FB_USED'))
            except OSError:
                pass
            time.sleep(0.5)
        assert len(got) == 2, 'no series from both jobs in 60 s: %r\n%s' % (got, (tmp / 'prometheus.log').read_text()[-3000:])
        yield {'endpoint': ep, 'series': got}
    finally:
        stop_process(proc)
        server.shutdown()


def test_DCGMX_23_the_rendered_servicemonitor_keeps_the_workloads_labels(scraped):
    assert scraped['endpoint']['honorLabels'] is True
    s = scraped['series']['rendered']
    assert (s['namespace'], s['pod'], s['container']) == ('team-a', 'train-1', 'main'), s
    assert s['gpuops_io_sharing_pool'] == 'h100' and s['service'] == 'dcgm-exporter-h100', s
    assert not [k for k in s if k.startswith('exported_')], s


def test_DCGMX_23_without_honor_labels_the_exporter_pod_wins(scraped):
    s = scraped['series']['default']
    assert (s['namespace'], s['pod'], s['container']) == ('kube-system', 'dcgm-exporter-h100-x7k2p', 'exporter'), s
    assert (s['exported_namespace'], s['exported_pod'], s['exported_container']) == ('team-a', 'train-1', 'main'), s
