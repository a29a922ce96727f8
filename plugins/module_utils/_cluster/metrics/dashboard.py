# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's Grafana dashboard: GPU sharing per pool and for the fleet, from NVIDIA dcgm-exporter's series, the
same panels for every strategy (exclusive, time-slicing, MPS, MIG, DRA, HAMi, ...): per physical GPU (and MIG
instance) memory used against its total and its activity, per pod the same for the GPUs the exporter attributes to it,
and the allocations that stay idle; on HAMi pools (whose stack serves its own metrics instead of dcgm-exporter) each
pod's own memory against its limit and its SM use.

Plain data (a dashboard JSON model of Grafana's dashboard schema version 42, the one the lab checks it against:
grafana-foundation-sdk v0.0.22's strict decoder, lab/go/grafana-dashboard) built from the PromQL of ``panel_queries``;
``docs/observability.md`` shows it, drawn by the lab from these very queries against upstream's Prometheus.

The pool comes from the exporter's scrape target: the collection's ServiceMonitor copies the exporter pods' label
``gpuops.io/sharing-pool`` to the series (prometheus-operator ``podTargetLabels``; the label name as Prometheus
sanitises it, ``gpuops_io_sharing_pool``); a Prometheus that scrapes by annotations needs the same relabelling (the
dashboard's pool variable then lists nothing and every panel shows the fleet).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import rules
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics.exporter import SERIES_POOL_LABEL

POOL_LABEL = SERIES_POOL_LABEL
# HAMi's vGPU monitor, per container (Project-HAMi/HAMi v2.10.0 cmd/vGPUmonitor/metrics.go): bytes, bytes, percent
HAMI_USED, HAMI_LIMIT, HAMI_ACTIVE = ('hami_vgpu_memory_used_bytes', 'hami_vgpu_memory_limit_bytes',
                                      'hami_container_device_utilization_ratio')
UID = 'gpuops-gpu-sharing'
# a dashboard uid: at most 40 characters (Grafana's limit) of letters, digits, '-' and '_' (also a name Grafana's
# dashboard API takes: metrics/grafana)
UID_FORM = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$')


class DashboardError(ValueError):
    """A bad option of dashboard(); the message names the option, the value and what is allowed."""


def check_options(title: Any, uid: Any, pool_label: Any, idle_percent: Any, idle_for: Any) -> None:
    if not isinstance(title, str) or not title.strip():
        raise DashboardError('title must be a non-empty string; got %r' % (title,))
    if not isinstance(uid, str) or not UID_FORM.match(uid):
        raise DashboardError('uid must be letters, digits, "-", "_", at most 40 characters; got %r' % (uid,))
    if not isinstance(pool_label, str) or not rules.LABEL_NAME.match(pool_label):
        raise DashboardError('pool_label must be a Prometheus label name; got %r' % (pool_label,))
    if isinstance(idle_percent, bool) or not isinstance(idle_percent, (int, float)) or not 0 < idle_percent <= 100:
        raise DashboardError('idle_percent must be a number above 0 and at most 100; got %r' % (idle_percent,))
    if not isinstance(idle_for, str) or not idle_for or not rules.DURATION.match(idle_for):
        raise DashboardError('idle_for must be a Prometheus duration such as 30m or 1h (largest unit first); got %r'
                             % (idle_for,))


# the schema version the model is written in: Grafana migrates a model of an older version when it loads it
SCHEMA_VERSION = 42

# Grafana's own annotation query (the alerts and the annotations made in Grafana, on every time panel), as Grafana
# gives a new dashboard; the schema requires the dashboard's `annotations` (the lab's oracle: GRAF-01)
BUILT_IN_ANNOTATIONS = {'builtIn': 1, 'datasource': {'type': 'grafana', 'uid': '-- Grafana --'}, 'enable': True,
                        'hide': True, 'iconColor': 'rgba(0, 211, 255, 1)', 'name': 'Annotations & Alerts',
                        'type': 'dashboard'}

# per GPU or MIG instance, as the exporter names them (metrics/dcgm.LABELS)
ENTITY = 'Hostname, gpu, UUID, GPU_I_ID'
HOLDER = 'namespace, pod'


def _sel(extra: str = '', pool_label: str = POOL_LABEL) -> str:
    parts = ['Hostname=~"$node"', '%s=~"$pool"' % pool_label]
    if extra:
        parts.append(extra)
    return '{%s}' % ','.join(parts)


def activity(sel: str, by: str) -> str:
    """Percent active per ``by``: DCGM's graphics-engine activity where the GPU has it, else its utilisation."""
    return ('max by (%s) (DCGM_FI_PROF_GR_ENGINE_ACTIVE%s * 100) or max by (%s) (DCGM_FI_DEV_GPU_UTIL%s)'
            % (by, sel, by, sel))


def panel_queries(pool_label: str = POOL_LABEL, idle_percent: float = 1.0, idle_for: str = '1h') -> list[dict[str, Any]]:
    """Each panel: id, title, type (stat|timeseries|table), unit, and its targets [(refId, PromQL, legend)]."""
    every = _sel(pool_label=pool_label)
    hami = '{%s=~"$pool"}' % pool_label   # a container's series has no node label (HAMi v2.10.0 vGPU monitor)
    held = _sel('pod!=""', pool_label=pool_label)
    idle_expr = ('max by (%s) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE%s[%s]) * 100 or '
                 'avg_over_time(DCGM_FI_DEV_GPU_UTIL%s[%s])) < %s' % (HOLDER, held, idle_for, held, idle_for,
                                                                      repr(float(idle_percent))))
    return [
        {'id': 1, 'title': 'GPUs reporting', 'type': 'stat', 'unit': 'none',
         'targets': [('A', 'count(count by (UUID, GPU_I_ID) (DCGM_FI_DEV_FB_USED%s))' % every, '')]},
        {'id': 2, 'title': 'GPUs held by pods', 'type': 'stat', 'unit': 'none',
         'targets': [('A', 'count(count by (UUID, GPU_I_ID) (DCGM_FI_DEV_FB_USED%s))' % held, '')]},
        {'id': 3, 'title': 'Idle pods (active < %g%% for %s)' % (idle_percent, idle_for),
         'type': 'stat', 'unit': 'none', 'targets': [('A', 'count(%s)' % idle_expr, '')]},
        {'id': 4, 'title': 'Fleet memory used', 'type': 'stat', 'unit': 'percentunit',
         'targets': [('A', 'sum(DCGM_FI_DEV_FB_USED%s) / (sum(DCGM_FI_DEV_FB_USED%s) + sum(DCGM_FI_DEV_FB_FREE%s))'
                      % (every, every, every), '')]},
        {'id': 5, 'title': 'Memory used per GPU (MiB)', 'type': 'timeseries', 'unit': 'decmbytes',
         'targets': [('A', 'max by (%s) (DCGM_FI_DEV_FB_USED%s)' % (ENTITY, every),
                      '{{Hostname}} GPU {{gpu}} {{GPU_I_ID}}')]},
        {'id': 6, 'title': 'Memory total per GPU (MiB)', 'type': 'timeseries', 'unit': 'decmbytes',
         'targets': [('A', 'max by (%s) (DCGM_FI_DEV_FB_USED%s + DCGM_FI_DEV_FB_FREE%s)' % (ENTITY, every, every),
                      '{{Hostname}} GPU {{gpu}} {{GPU_I_ID}}')]},
        {'id': 7, 'title': 'Activity per GPU (%)', 'type': 'timeseries', 'unit': 'percent',
         'targets': [('A', activity(every, ENTITY), '{{Hostname}} GPU {{gpu}} {{GPU_I_ID}}')]},
        {'id': 8, 'title': 'SM active per GPU (%)', 'type': 'timeseries', 'unit': 'percent',
         'targets': [('A', 'max by (%s) (DCGM_FI_PROF_SM_ACTIVE%s * 100)' % (ENTITY, every),
                      '{{Hostname}} GPU {{gpu}} {{GPU_I_ID}}')]},
        {'id': 9, 'title': 'Memory used per pod (MiB; a shared GPU counts whole)', 'type': 'timeseries',
         'unit': 'decmbytes', 'targets': [('A', 'sum by (%s) (DCGM_FI_DEV_FB_USED%s)' % (HOLDER, held),
                                           '{{namespace}}/{{pod}}')]},
        {'id': 10, 'title': 'Activity per pod (%; a shared GPU counts whole)', 'type': 'timeseries', 'unit': 'percent',
         'targets': [('A', activity(held, HOLDER), '{{namespace}}/{{pod}}')]},
        {'id': 11, 'title': 'Idle allocations', 'type': 'table', 'unit': 'percent',
         'targets': [('A', idle_expr, '')]},
        # HAMi pools (no dcgm-exporter there): each pod's own use from HAMi's vGPU monitor, which DCGM cannot give
        {'id': 12, 'title': 'HAMi pools: memory per pod, used and limit (MiB)', 'type': 'timeseries',
         'unit': 'decmbytes',
         'targets': [('A', 'sum by (%s) (%s%s) / 1048576' % (HOLDER, HAMI_USED, hami), '{{namespace}}/{{pod}} used'),
                     ('B', 'sum by (%s) (%s%s) / 1048576' % (HOLDER, HAMI_LIMIT, hami),
                      '{{namespace}}/{{pod}} limit')]},
        {'id': 13, 'title': 'HAMi pools: SM use per pod (%)', 'type': 'timeseries', 'unit': 'percent',
         'targets': [('A', 'max by (%s) (%s%s)' % (HOLDER, HAMI_ACTIVE, hami), '{{namespace}}/{{pod}}')]},
    ]


_GRID = {'stat': (6, 4), 'timeseries': (12, 8), 'table': (24, 8)}


def _layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    x = y = row_h = 0
    for p in panels:
        w, h = _GRID[p['type']]
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p['gridPos'] = {'x': x, 'y': y, 'w': w, 'h': h}
        x += w
        row_h = max(row_h, h)
    return panels


def dashboard(title: str = 'GPU sharing (gpuops.k8s_gpu)', uid: str = UID, pool_label: str = POOL_LABEL,
              idle_percent: float = 1.0, idle_for: str = '1h') -> dict[str, Any]:
    """The dashboard JSON model (what Grafana's dashboard API and file provisioning take)."""
    check_options(title, uid, pool_label, idle_percent, idle_for)
    ds = {'type': 'prometheus', 'uid': '${datasource}'}
    panels = []
    for q in panel_queries(pool_label, idle_percent, idle_for):
        panel: dict[str, Any] = {
            'id': q['id'], 'title': q['title'], 'type': q['type'], 'datasource': ds,
            'fieldConfig': {'defaults': {'unit': q['unit']}, 'overrides': []},
            'targets': [dict({'refId': ref, 'expr': expr, 'datasource': ds},
                             **({'legendFormat': legend} if legend else {}),
                             **({'instant': True, 'format': 'table'} if q['type'] != 'timeseries' else {}))
                        for ref, expr, legend in q['targets']],
        }
        if q['type'] == 'timeseries':
            panel['options'] = {'legend': {'calcs': [], 'displayMode': 'list', 'placement': 'bottom',
                                           'showLegend': True},
                                'tooltip': {'mode': 'multi', 'sort': 'desc'}}
        panels.append(panel)
    variables = [
        {'name': 'datasource', 'label': 'Prometheus', 'type': 'datasource', 'query': 'prometheus'},
        {'name': 'pool', 'label': 'Pool', 'type': 'query', 'datasource': ds, 'includeAll': True, 'multi': True,
         'allValue': '.*', 'refresh': 2, 'sort': 1,
         'definition': 'label_values(DCGM_FI_DEV_FB_USED, %s)' % pool_label,
         'query': {'query': 'label_values(DCGM_FI_DEV_FB_USED, %s)' % pool_label, 'refId': 'pool'}},
        {'name': 'node', 'label': 'Node', 'type': 'query', 'datasource': ds, 'includeAll': True, 'multi': True,
         'allValue': '.*', 'refresh': 2, 'sort': 1,
         'definition': 'label_values(DCGM_FI_DEV_FB_USED{%s=~"$pool"}, Hostname)' % pool_label,
         'query': {'query': 'label_values(DCGM_FI_DEV_FB_USED{%s=~"$pool"}, Hostname)' % pool_label,
                   'refId': 'node'}},
    ]
    return {'uid': uid, 'title': title, 'tags': ['gpu', 'gpuops', 'dcgm'], 'timezone': 'browser', 'editable': True,
            'schemaVersion': SCHEMA_VERSION, 'version': 1, 'refresh': '1m',
            'time': {'from': 'now-6h', 'to': 'now'}, 'templating': {'list': variables},
            'annotations': {'list': [BUILT_IN_ANNOTATIONS]}, 'panels': _layout(panels)}


# The label the Grafana chart's dashboard sidecar collects ConfigMaps by (grafana/helm-charts charts/grafana/values.yaml
# sidecar.dashboards.label, default "grafana_dashboard"; labelValue empty by default: any value) and the value
# kube-prometheus-stack asks (its grafana.sidecar.dashboards.labelValue "1"): a Grafana deployed by either provisions
# the ConfigMap's JSON files. Conformance row GRAF-03 (docs/conformance/grafana-dashboard.md).
SIDECAR_LABEL = 'grafana_dashboard'
SIDECAR_VALUE = '1'
FILE_NAME = 'gpuops-gpu-sharing.json'


def config_map(name: str, namespace: str, labels: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
    """The dashboard as a ConfigMap a Grafana dashboard sidecar provisions (``options``: those of dashboard())."""
    meta_labels = dict(labels or {})
    meta_labels[SIDECAR_LABEL] = SIDECAR_VALUE
    return {'apiVersion': 'v1', 'kind': 'ConfigMap',
            'metadata': {'name': name, 'namespace': namespace, 'labels': meta_labels},
            'data': {FILE_NAME: json.dumps(dashboard(**options), indent=1, sort_keys=True) + '\n'}}
