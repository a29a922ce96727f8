# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metrics/dashboard: the Grafana dashboard model (its queries run on upstream's Prometheus in
lab/tests/integration/test_report_usage_real.py)."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard, dcgm

FIELDS = ('DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_FB_FREE', 'DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
          'DCGM_FI_PROF_SM_ACTIVE')


def exprs(d):
    return [t['expr'] for p in d['panels'] for t in p['targets']] + [
        v['query']['query'] for v in d['templating']['list'] if v['type'] == 'query']


def test_every_query_names_only_the_exporters_fields_and_labels():
    d = dashboard.dashboard()
    for e in exprs(d):
        assert set(re.findall(r'DCGM_FI_[A-Z_]+', e)) <= set(FIELDS), e
        for label in re.findall(r'(\w+)=~?"', e) + re.findall(r'by \(([^)]*)\)', e):
            for name in [x.strip() for x in label.split(',')]:
                assert name in ('Hostname', 'gpu', 'UUID', 'GPU_I_ID', 'namespace', 'pod', dashboard.POOL_LABEL), e


def test_the_fields_are_in_the_exporters_counters_and_the_pool_label_is_the_sanitised_one():
    assert set(FIELDS) <= set(dcgm.COUNTERS)
    assert dashboard.POOL_LABEL == 'gpuops_io_sharing_pool'


def test_panels_fit_the_grid_and_do_not_overlap():
    d = dashboard.dashboard()
    cells = set()
    ids = [p['id'] for p in d['panels']]
    assert len(ids) == len(set(ids))
    for p in d['panels']:
        g = p['gridPos']
        assert 0 <= g['x'] and g['x'] + g['w'] <= 24
        for x in range(g['x'], g['x'] + g['w']):
            for y in range(g['y'], g['y'] + g['h']):
                assert (x, y) not in cells, p['title']
                cells.add((x, y))


def test_every_panel_filters_by_pool_and_node_and_reads_the_datasource_variable():
    d = dashboard.dashboard()
    for p in d['panels']:
        assert p['datasource'] == {'type': 'prometheus', 'uid': '${datasource}'}
        for t in p['targets']:
            assert '$pool' in t['expr'], t['expr']
            # HAMi's container series carry no node label (v2.10.0): those panels filter by pool only
            assert '$node' in t['expr'] or 'hami_' in t['expr'], t['expr']
    names = [v['name'] for v in d['templating']['list']]
    assert names == ['datasource', 'pool', 'node']
    assert json.loads(json.dumps(d)) == d                          # plain JSON


def test_options_reach_the_queries():
    d = dashboard.dashboard(pool_label='pool', idle_percent=5, idle_for='30m', uid='x', title='T')
    assert (d['uid'], d['title']) == ('x', 'T')
    idle = [p for p in d['panels'] if p['title'] == 'Idle allocations'][0]['targets'][0]['expr']
    assert '[30m]' in idle and idle.endswith('< 5.0') and 'pool=~"$pool"' in idle


def test_activity_prefers_the_profiling_field():
    e = dashboard.activity('{x="1"}', 'pod')
    assert e.index('DCGM_FI_PROF_GR_ENGINE_ACTIVE') < e.index(' or ') < e.index('DCGM_FI_DEV_GPU_UTIL')


def test_GRAF_03_the_sidecar_label_is_the_grafana_charts():
    """The dashboard ConfigMap's label is the one conformance row GRAF-03 states: the Grafana chart's default sidecar
    label (any value), with the value kube-prometheus-stack asks."""
    import os
    cm = dashboard.config_map('gpuops-gpu-dashboard', 'monitoring', {'team': 'gpu'})
    assert cm['metadata']['labels'] == {'team': 'gpu', dashboard.SIDECAR_LABEL: dashboard.SIDECAR_VALUE}
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), *(['..'] * 6)))
    with open(os.path.join(root, 'docs', 'conformance', 'grafana-dashboard.md')) as f:
        [row] = [line for line in f if line.startswith('| GRAF-03 |')]
    upstream = row.split(' | ')[1]
    assert 'label`, default `%s`' % dashboard.SIDECAR_LABEL in upstream
    assert 'label `%s`, labelValue `"%s"`' % (dashboard.SIDECAR_LABEL, dashboard.SIDECAR_VALUE) in upstream
    assert '`%s: "%s"`' % (dashboard.SIDECAR_LABEL, dashboard.SIDECAR_VALUE) in row.split(' | ')[3]


def test_hami_panels_read_the_series_the_report_and_the_rules_read():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import usage
    hami = [t['expr'] for p in dashboard.dashboard()['panels'] if p['title'].startswith('HAMi') for t in p['targets']]
    assert len(hami) == 3
    read = set(m for e in hami for m in usage.HAMI_METRICS if m + '{' in e)
    assert read == {usage.HAMI_USED, usage.HAMI_LIMIT, usage.HAMI_ACTIVE}


@pytest.mark.parametrize('key, value, match', [
    ('title', ' ', '^title must be a non-empty string'), ('uid', 'x' * 41, '^uid must be letters'),
    ('pool_label', 'gpuops.io/pool', '^pool_label must be a Prometheus label name'),
    ('idle_percent', 0, '^idle_percent'), ('idle_percent', 101, '^idle_percent'), ('idle_percent', True, '^idle_percent'),
    ('idle_for', '1 hour', '^idle_for must be a Prometheus duration'), ('idle_for', '30m1h', '^idle_for'),
])
def test_bad_options_are_refused_naming_them(key, value, match):
    options = {'title': 'GPUs', 'uid': 'gpus', 'pool_label': 'pool', 'idle_percent': 1.0, 'idle_for': '1h'}
    dashboard.dashboard(**options)
    options[key] = value
    with pytest.raises(dashboard.DashboardError, match=match):
        dashboard.dashboard(**options)
