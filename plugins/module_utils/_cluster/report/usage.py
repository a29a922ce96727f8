# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the GPUs were used for, joined with what the report says was allocated: NVIDIA dcgm-exporter's series read from
a Prometheus (HTTP API ``/api/v1/query``), per GPU, per pod, and the allocations that stayed idle.

Pure functions over Prometheus' JSON answers and the report (report/model.analyse); gpu_share_report does the HTTP.

What the exporter emits (NVIDIA/dcgm-exporter 4.5.3-4.8.2, docs/conformance/dcgm-exporter.md): one series per GPU (and
per MIG instance, labels ``GPU_I_ID``/``GPU_I_PROFILE``) with ``gpu`` (index), ``UUID``, ``device``, ``modelName`` and
``Hostname`` (the node, from NODE_NAME in Kubernetes); with its Kubernetes attribution on, the series of a GPU a pod
holds carry ``pod``, ``namespace``, ``container`` (internal/pkg/transformation/const.go) - one series per holder, each
with the GPU's value. DCGM measures the GPU, not the process: on a GPU that several pods share (time-slicing, MPS) the
value is the whole GPU's, so a pod's "used" there is its GPU's use, and the report says the GPU is shared.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# the exporter's field names (dcgm-exporter etc/default-counters.csv and the collection's counters, metrics/dcgm.py)
FB_USED = 'DCGM_FI_DEV_FB_USED'          # MiB
FB_FREE = 'DCGM_FI_DEV_FB_FREE'          # MiB
GPU_UTIL = 'DCGM_FI_DEV_GPU_UTIL'        # percent
GR_ACTIVE = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE'   # ratio 0..1 (DCGM profiling: data-center GPUs only)
METRICS = (FB_USED, FB_FREE, GPU_UTIL, GR_ACTIVE)
# HAMi's vGPU monitor (Project-HAMi/HAMi v2.10.0 cmd/vGPUmonitor/metrics.go; docs/conformance/dcgm-exporter.md STKM
# rows): per GPU (node, device_index, device_uuid, device_type) and per container (namespace, pod, container,
# vdevice_index, device_uuid) - a container's own memory and SM use, which DCGM cannot see on a shared GPU
HAMI_HOST_USED = 'hami_host_gpu_memory_used_bytes'            # bytes
HAMI_HOST_UTIL = 'hami_host_gpu_utilization_ratio'            # percent (0-100)
HAMI_USED = 'hami_vgpu_memory_used_bytes'                     # bytes
HAMI_LIMIT = 'hami_vgpu_memory_limit_bytes'                   # bytes
HAMI_ACTIVE = 'hami_container_device_utilization_ratio'       # the container's SM use, percent
HAMI_METRICS = (HAMI_HOST_USED, HAMI_HOST_UTIL, HAMI_USED, HAMI_LIMIT, HAMI_ACTIVE)
MIB = 1024.0 * 1024.0

# Prometheus' duration form (model/time.go ParseDuration: units ms s m h d w y, largest first)
_DURATION = re.compile(r'^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$')
_RFC3339 = re.compile(r'^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$')
_UNIX = re.compile(r'^\d+(\.\d+)?$')


def check_options(url: str | None, window: str, at: str | None, idle_percent: float) -> list[str]:
    """Errors for bad usage options, each naming the option, the value and what is allowed."""
    errors: list[str] = []
    if url is not None and not re.match(r'^https?://[^/\s]+', url):
        errors.append('prometheus_url must be an http:// or https:// URL of a Prometheus (its API is under '
                      '/api/v1), got %r' % url)
    m = _DURATION.match(window or '')
    if not window or not m or not any(m.groups()):
        errors.append("usage_window must be a Prometheus duration such as '1h', '30m' or '1d12h' (units ms, s, m, "
                      'h, d, w, y, largest first), got %r' % window)
    if at is not None and not (_RFC3339.match(at) or _UNIX.match(at)):
        errors.append("usage_time must be an RFC 3339 time such as '2026-11-30T12:00:00Z' or Unix seconds, got %r"
                      % at)
    if not 0 <= idle_percent <= 100:
        errors.append('usage_idle_percent must be between 0 and 100, got %r' % idle_percent)
    return errors


def queries(window: str) -> dict[str, str]:
    """The instant queries (PromQL) the join needs, by name: averages over the window, and the peak memory; the same
    ten whatever the fleet (HAMi's come back empty where no HAMi pool is scraped)."""
    return {
        'memory_used': 'avg_over_time(%s[%s])' % (FB_USED, window),
        'memory_used_max': 'max_over_time(%s[%s])' % (FB_USED, window),
        'memory_free': 'avg_over_time(%s[%s])' % (FB_FREE, window),
        'gr_active': 'avg_over_time(%s[%s])' % (GR_ACTIVE, window),
        'gpu_util': 'avg_over_time(%s[%s])' % (GPU_UTIL, window),
        'hami_host_memory_used': 'avg_over_time(%s[%s])' % (HAMI_HOST_USED, window),
        'hami_host_active': 'avg_over_time(%s[%s])' % (HAMI_HOST_UTIL, window),
        'hami_memory_used': 'avg_over_time(%s[%s])' % (HAMI_USED, window),
        'hami_memory_limit': 'max_over_time(%s[%s])' % (HAMI_LIMIT, window),
        'hami_active': 'avg_over_time(%s[%s])' % (HAMI_ACTIVE, window),
    }


class AnswerError(Exception):
    """A Prometheus answer that is not a successful instant vector."""


def vector(answer: Any, name: str) -> list[tuple[dict[str, str], float]]:
    """[(labels, value)] of a /api/v1/query answer; AnswerError when it is an error or not a vector."""
    if not isinstance(answer, dict) or answer.get('status') != 'success':
        detail = answer.get('error') if isinstance(answer, dict) else None
        raise AnswerError('Prometheus refused the query %s: %s' % (name, detail or repr(answer)[:200]))
    data = answer.get('data') or {}
    if data.get('resultType') != 'vector':
        raise AnswerError('Prometheus answered the query %s with a %s, not an instant vector'
                          % (name, data.get('resultType')))
    out: list[tuple[dict[str, str], float]] = []
    for item in data.get('result') or []:
        try:
            value = float(item['value'][1])
        except (KeyError, IndexError, TypeError, ValueError):
            raise AnswerError('Prometheus answered the query %s with a sample that has no value: %r'
                              % (name, item))
        if math.isnan(value):   # no sample in the window for that series
            continue
        out.append((dict(item.get('metric') or {}), value))
    return out


def _entity(labels: dict[str, str]) -> tuple[str, str, str]:
    """A GPU or MIG instance: (node, UUID, MIG instance id or '')."""
    return (labels.get('Hostname') or '', labels.get('UUID') or labels.get('uuid') or '',
            labels.get('GPU_I_ID') or '')


def _holder(labels: dict[str, str]) -> tuple[str, str] | None:
    ns = labels.get('namespace') or labels.get('pod_namespace')
    pod = labels.get('pod') or labels.get('pod_name')
    return (ns, pod) if ns and pod else None


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def join(report: Mapping[str, Any], answers: dict[str, list[tuple[dict[str, str], float]]], window: str,
         at: str | None = None, idle_percent: float = 1.0, source: str = '') -> dict[str, Any]:
    """The report's ``usage`` part from the vectors of queries() (by name) and the report's pods.

    Activity is DCGM's graphics-engine activity where the GPU has it (profiling metrics), else its utilisation; a pod
    is idle when every GPU it was seen on was active below ``idle_percent`` on average over the window."""
    gpus: dict[tuple[str, str, str], dict[str, Any]] = {}

    def gpu(labels: dict[str, str]) -> dict[str, Any]:
        key = _entity(labels)
        if key not in gpus:
            gpus[key] = {'node': key[0], 'uuid': key[1], 'index': labels.get('gpu'), 'model': labels.get('modelName'),
                         'mig_instance': key[2] or None, 'mig_profile': labels.get('GPU_I_PROFILE'),
                         'memory_used_mib': None, 'memory_used_max_mib': None, 'memory_total_mib': None,
                         'active_percent': None, 'activity_source': None, 'holders': set()}
        return gpus[key]

    free: dict[tuple[str, str, str], float] = {}
    for labels, value in answers.get('memory_used', []):
        gpu(labels)['memory_used_mib'] = value
    for labels, value in answers.get('memory_used_max', []):
        gpu(labels)['memory_used_max_mib'] = value
    for labels, value in answers.get('memory_free', []):
        gpu(labels)
        free[_entity(labels)] = value
    for labels, value in answers.get('gpu_util', []):
        g = gpu(labels)
        if g['activity_source'] != GR_ACTIVE:
            g['active_percent'], g['activity_source'] = value, GPU_UTIL
    for labels, value in answers.get('gr_active', []):
        g = gpu(labels)
        g['active_percent'], g['activity_source'] = value * 100, GR_ACTIVE
    for name in ('memory_used', 'memory_used_max', 'memory_free', 'gr_active', 'gpu_util'):
        for labels, _value in answers.get(name, []):
            holder = _holder(labels)
            if holder:
                gpu(labels)['holders'].add(holder)

    # HAMi: its GPUs as the monitor names them, and each container's own use (summed per pod)
    by_uuid: dict[str, dict[str, str]] = {}
    for name in ('hami_host_memory_used', 'hami_host_active'):
        for labels, value in answers.get(name, []):
            dcgm_form = dict((k, v) for k, v in (('Hostname', labels.get('node') or ''),
                                                 ('UUID', labels.get('device_uuid') or ''),
                                                 ('gpu', labels.get('device_index')),
                                                 ('modelName', labels.get('device_type'))) if v is not None)
            by_uuid[dcgm_form['UUID']] = dcgm_form
            g = gpu(dcgm_form)
            if name == 'hami_host_memory_used':
                g['memory_used_mib'] = value / MIB
            elif g['activity_source'] != GR_ACTIVE:
                g['active_percent'], g['activity_source'] = value, HAMI_HOST_UTIL
    own: dict[tuple[str, str], dict[str, Any]] = {}
    for name in ('hami_memory_used', 'hami_memory_limit', 'hami_active'):
        for labels, value in answers.get(name, []):
            holder = _holder(labels)
            if not holder:
                continue
            uuid = labels.get('device_uuid') or ''
            o = own.setdefault(holder, {'used': 0.0, 'limit': 0.0, 'active': [], 'uuids': set()})
            o['uuids'].add(uuid)
            if name == 'hami_memory_used':
                o['used'] += value / MIB
            elif name == 'hami_memory_limit':
                o['limit'] += value / MIB
            else:
                o['active'].append(value)
            gpu(by_uuid.get(uuid) or {'UUID': uuid})['holders'].add(holder)
    for key, g in gpus.items():
        if g['memory_used_mib'] is not None and key in free:
            g['memory_total_mib'] = g['memory_used_mib'] + free[key]

    by_pod: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for g in gpus.values():
        for holder in g['holders']:
            by_pod.setdefault(holder, []).append(g)

    pods: list[dict[str, Any]] = []
    idle: list[str] = []
    unseen: list[str] = []
    for p in report.get('pods') or []:
        if p.get('phase') != 'Running':
            continue
        pkey = (p['namespace'], p['name'])
        seen = sorted(by_pod.get(pkey, []), key=lambda g: (g['node'], str(g['index']), g['mig_instance'] or ''))
        name = '%s/%s' % pkey
        row = {'namespace': pkey[0], 'name': pkey[1], 'node': p.get('node'), 'requests': p.get('requests'),
               'gpus': [], 'memory_used_mib': None, 'memory_limit_mib': None, 'active_percent': None,
               'measured': None, 'shared': False, 'idle': None}
        if not seen:
            unseen.append(name)
            pods.append(row)
            continue
        mine = own.get(pkey)
        if mine:   # HAMi: the pod's own use, not its GPUs'
            actives = list(mine['active'])
            used: list[float] = [mine['used']]
            row.update(memory_limit_mib=_round(mine['limit']) if mine['limit'] else None, measured='pod')
        else:      # DCGM: its GPUs' use
            actives = [g['active_percent'] for g in seen if g['active_percent'] is not None]
            used = [g['memory_used_mib'] for g in seen if g['memory_used_mib'] is not None]
            row['measured'] = 'gpu'
        is_idle = bool(actives) and max(actives) < idle_percent
        if is_idle:
            idle.append(name)
        row.update(gpus=[g['uuid'] + ('/' + g['mig_instance'] if g['mig_instance'] else '') for g in seen],
                   memory_used_mib=_round(sum(used)) if used else None,
                   active_percent=_round(max(actives)) if actives else None,
                   shared=any(len(g['holders']) > 1 for g in seen), idle=is_idle)
        pods.append(row)

    known = set((p['namespace'], p['name']) for p in report.get('pods') or [])
    gpu_rows: list[dict[str, Any]] = []
    unattributed: list[str] = []
    for key in sorted(gpus, key=lambda k: (k[0], str(gpus[k]['index']), k[1], k[2])):
        g = gpus[key]
        holders = sorted('%s/%s' % h for h in g['holders'])
        row = dict(g, holders=holders, shared=len(holders) > 1,
                   memory_used_mib=_round(g['memory_used_mib']), memory_used_max_mib=_round(g['memory_used_max_mib']),
                   memory_total_mib=_round(g['memory_total_mib']), active_percent=_round(g['active_percent']))
        row['unknown_holders'] = sorted('%s/%s' % h for h in g['holders'] if h not in known)
        gpu_rows.append(row)
        if not holders and (g['active_percent'] or 0) >= idle_percent:
            unattributed.append('%s GPU %s (%s)' % (g['node'] or '?', g['index'], g['uuid']))

    notes: list[str] = []
    if not gpus:
        notes.append('Prometheus has no %s series in the last %s: no dcgm-exporter scraped (or none of these nodes)'
                     % (FB_USED, window))
    elif any(g['activity_source'] == GPU_UTIL for g in gpus.values()):
        notes.append('activity is %s (the share of time a kernel ran) where the GPU has no %s (DCGM profiling '
                     'metrics: data-center GPUs only)' % (GPU_UTIL, GR_ACTIVE))
    if any(r['shared'] and r['uuid'] not in by_uuid for r in gpu_rows):   # DCGM's; HAMi's pods show their own
        notes.append('a shared GPU (several pods on one GPU: time-slicing, MPS) is measured as a whole: each of '
                     'its pods shows the GPU\'s use, not its own')
    if own:
        notes.append('pods of HAMi pools show their own use (HAMi\'s vGPU monitor: memory used against the limit, '
                     'SM use), not their GPU\'s')
    if unseen:
        notes.append('running pods that hold GPU resources but no dcgm-exporter series names: %s' % ', '.join(unseen))
    return {'source': source, 'window': window, 'time': at, 'idle_percent': idle_percent, 'gpus': gpu_rows,
            'pods': pods, 'idle': idle, 'unseen': unseen, 'unattributed': unattributed, 'notes': notes}


def query_urls(base_url: str, window: str, at: str | None = None) -> dict[str, str]:
    """The GET URL of each query of queries() on the Prometheus at base_url (its /api/v1/query, evaluated at ``at``
    or at the server's now)."""
    from urllib.parse import urlencode
    base = base_url.rstrip('/')
    out = {}
    for name, query in queries(window).items():
        params = [('query', query)] + ([('time', at)] if at else [])
        out[name] = '%s/api/v1/query?%s' % (base, urlencode(params))
    return out
