# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus alert rules from the doctor's knowledge (docs/observability.md).

``alert_rules(options)`` returns a Prometheus rule file as a dict (``{'groups': [...]}``, dump it as YAML). Its alerts
come from the doctor's own tables (``_common/gpu_health``, which ``_doctor/gpu_doctor_checks`` judges with: XID_GUIDE,
XID_UNKNOWN, SEVERE_CLOCK_REASONS, CLOCK_EVENT_REASONS and the ADVICE of its ECC, row remapping and throttle
findings), imported, not copied: when the doctor learns something, the alerts follow. The series are dcgm-exporter's
(``dcgm.COUNTERS``, labels ``dcgm.LABELS``) and, for the share alert, HAMi's vGPU monitor (``HAMI_METRICS``).

Not alerted: the doctor's TEMPERATURE_NEAR_C, POWER_TOLERANCE and RETIRED_PAGES_RMA compare a reading with the GPU's
own slowdown threshold, enforced power limit and retired page counts, none of which is in ``dcgm.COUNTERS``.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dcgm, stack_metrics
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_health as doctor


class RulesError(Exception):
    """Bad options. The message names the option, the value and what is allowed."""


# HAMi's vGPU monitor (Project-HAMi/HAMi v2.10.0, the collection's pin 'hami': cmd/vGPUmonitor/metrics.go; the facts
# are metrics/stack_metrics.HAMI_MONITOR_METRICS): a container's device memory in use and its limit (its share), both
# labelled namespace, pod, container, vdevice_index, device_uuid (and zone="vGPU")
HAMI_METRICS = ('hami_vgpu_memory_used_bytes', 'hami_vgpu_memory_limit_bytes')
HAMI_LABELS = stack_metrics.HAMI_MONITOR_METRICS[HAMI_METRICS[0]]

# the Xid whose meaning the doctor reads from the kernel log's recovery label (not in the exporter's value)
XID_RECOVERY = doctor.XID_154

DEFAULTS: dict[str, Any] = {
    'group': 'gpuops-gpu-health',
    'selector': '',            # PromQL label matchers added to every exporter series, e.g. job="dcgm-exporter"
    'hami_selector': '',       # the same for HAMi's series
    'extra_labels': {},        # added to every alert's labels
    'xid_for': '0s',
    'ecc_for': '0s',
    'row_remap_for': '0s',
    'row_remap_window': '1h',  # a new uncorrectable remapped row within this window: a remapping waits for a reset
    'throttle_for': '5m',
    'idle_for': '1h',
    'share_for': '5m',
    'share_tolerance': 0.0,    # used above limit * (1 + this)
    'hami': True,
}
DURATION = re.compile(r'^(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?$')
LABEL_NAME = re.compile(r'^[a-zA-Z_][a-zA-Z0-9_]*$')
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
_SELECTOR = re.compile(r'^(?:%s(?:,%s)*,?)?\s*$' % (_MATCHER, _MATCHER))
_RESERVED_LABELS = ('severity', 'alertname', 'xid', 'reason', 'action')


def _duration(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value or not DURATION.match(value):
        raise RulesError('%s: %r is not a Prometheus duration; allowed: a string such as 30s, 5m, 1h, 1h30m, 1d '
                         '(units ms, s, m, h, d, w, y, largest first)' % (name, value))
    return value


def _selector(name: str, value: Any) -> str:
    if not isinstance(value, str) or not _SELECTOR.match(value):
        raise RulesError('%s: %r is not a list of PromQL label matchers; allowed: "" or matchers such as '
                         'job="dcgm-exporter", namespace=~"gpu-.*" (name, one of = != =~ !~, a double-quoted value)'
                         % (name, value))
    return value.strip().rstrip(',').strip()


def _options(options: dict[str, Any] | None) -> dict[str, Any]:
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise RulesError('options: %r is not a dict; allowed keys: %s' % (options, ', '.join(sorted(DEFAULTS))))
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise RulesError('options: unknown key(s) %s; allowed keys: %s' % (', '.join(map(str, unknown)),
                                                                           ', '.join(sorted(DEFAULTS))))
    o = copy.deepcopy(DEFAULTS)
    o.update(options)
    if not isinstance(o['group'], str) or not o['group'].strip():
        raise RulesError('group: %r is not a group name; allowed: a non-empty string' % (o['group'],))
    for key in ('xid_for', 'ecc_for', 'row_remap_for', 'row_remap_window', 'throttle_for', 'idle_for', 'share_for'):
        _duration(key, o[key])
    if o['row_remap_window'] in ('0s', '0m', '0h', '0ms', '0d'):
        raise RulesError('row_remap_window: %r is empty; allowed: a duration above 0 such as 1h' % o['row_remap_window'])
    o['selector'] = _selector('selector', o['selector'])
    o['hami_selector'] = _selector('hami_selector', o['hami_selector'])
    tol = o['share_tolerance']
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol <= 10:
        raise RulesError('share_tolerance: %r is not a fraction; allowed: a number from 0 to 10 (0.05: 5%% above '
                         'the share)' % (tol,))
    if not isinstance(o['hami'], bool):
        raise RulesError('hami: %r is not a boolean; allowed: true, false' % (o['hami'],))
    extra = o['extra_labels']
    if not isinstance(extra, dict):
        raise RulesError('extra_labels: %r is not a dict; allowed: label name -> string value' % (extra,))
    for k, v in extra.items():
        if not isinstance(k, str) or not LABEL_NAME.match(k) or k.startswith('__'):
            raise RulesError('extra_labels: %r is not a Prometheus label name; allowed: [a-zA-Z_][a-zA-Z0-9_]*, '
                             'not starting with __' % (k,))
        if k in _RESERVED_LABELS:
            raise RulesError('extra_labels: %r is set by the rules themselves; allowed: any other label name (not %s)'
                             % (k, ', '.join(_RESERVED_LABELS)))
        if not isinstance(v, str):
            raise RulesError('extra_labels.%s: %r is not a string; allowed: a string value' % (k, v))
    return o


def _sel(selector: str, *more: str) -> str:
    parts = [p for p in (selector,) + more if p]
    return '{%s}' % ', '.join(parts) if parts else ''


def _gpu(extra: str = '') -> str:
    return ('GPU {{ $labels.gpu }} ({{ $labels.UUID }}, {{ $labels.modelName }}) on {{ $labels.Hostname }}' + extra)


def _finding(check_id: str) -> dict[str, str]:
    """The severity and remediation words of the doctor's finding check_id."""
    severity, remediation = doctor.ADVICE[check_id]
    return {'severity': severity, 'remediation': remediation}


def _action(fix: str) -> str:
    """What the doctor's remediation words ask of the GPU: reboot (a reboot is the fix, not an alternative to a
    reset: "reset the GPU (reboot)", "reboot it"), reset, rma, or none."""
    low = fix.lower()
    if 'reboot' in low and 'or reboot' not in low:
        return 'reboot'
    if 'reset' in low:
        return 'reset'
    return 'rma' if 'rma' in low.split() or 'rma the gpu' in low else 'none'


def _rule(o: dict[str, Any], alert: str, expr: str, duration: str, labels: dict[str, str],
          summary: str, description: str) -> dict[str, Any]:
    lab = dict(o['extra_labels'])
    lab.update(labels)
    rule: dict[str, Any] = {'alert': alert, 'expr': expr}
    if duration not in ('0s', '0m', '0h', '0ms', '0d'):
        rule['for'] = duration
    rule['labels'] = lab
    rule['annotations'] = {'summary': summary, 'description': description}
    return rule


def severe_clock_bits() -> list[tuple[str, int]]:
    """(name, bit) of each clock event reason the doctor calls severe, in the doctor's order; the bits are nvml.h's
    nvmlClocksEventReason* / nvmlClocksThrottleReason* values (gpu_health.CLOCK_EVENT_REASONS)."""
    bits = dict((name, bit) for bit, name in doctor.CLOCK_EVENT_REASONS)
    missing = [r for r in doctor.SEVERE_CLOCK_REASONS if r not in bits]
    if missing:
        raise RulesError('the doctor\'s SEVERE_CLOCK_REASONS name(s) %s have no nvml.h bit; known: %s'
                         % (', '.join(missing), ', '.join(bits)))
    return [(r, bits[r]) for r in doctor.SEVERE_CLOCK_REASONS]


def xid_split() -> tuple[list[int], list[int]]:
    """(the Xids the doctor's XID_GUIDE calls critical, the Xids it knows as not critical)."""
    crit = sorted(x for x, (sev, dummy, dummy2) in doctor.XID_GUIDE.items() if sev == 'critical')
    other = sorted(x for x, (sev, dummy, dummy2) in doctor.XID_GUIDE.items() if sev != 'critical')
    return crit, other


def _xid_rules(o: dict[str, Any]) -> list[dict[str, Any]]:
    metric = 'DCGM_FI_DEV_XID_ERRORS' + _sel(o['selector'])
    crit, other = xid_split()
    out = []
    for xid in crit:
        dummy, what, fix = doctor.XID_GUIDE[xid]
        out.append(_rule(
            o, 'GpuOpsXidCritical', '%s == %d' % (metric, xid), o['xid_for'],
            {'severity': 'critical', 'xid': str(xid), 'action': _action(fix)},
            'Xid %d (%s) on %s' % (xid, what, _gpu()),
            'The last Xid of %s is %d: %s. %s.' % (_gpu(), xid, what, fix[0].upper() + fix[1:])))
    # an Xid the table does not know is critical for the doctor too (XID_UNKNOWN); 0 is "no Xid" and the recovery
    # Xid's severity comes from its kernel log text, which the exporter's value does not carry
    known = sorted(set(crit) | set(other) | {XID_RECOVERY})
    sev, what, fix = doctor.XID_UNKNOWN
    out.append(_rule(
        o, 'GpuOpsXidUnknown', '%s > 0%s' % (metric, ''.join(' != %d' % x for x in known)), o['xid_for'],
        {'severity': sev, 'action': _action(fix)},
        'Xid {{ $value }} (%s) on %s' % (what, _gpu()),
        'The last Xid of %s is {{ $value }}, %s. %s.' % (_gpu(), what, fix[0].upper() + fix[1:])))
    return out


def _memory_rules(o: dict[str, Any]) -> list[dict[str, Any]]:
    s = o['selector']
    ecc, fail, pend = _finding('ecc_uncorrectable'), _finding('row_remap_failure'), _finding('row_remap_pending')
    return [
        # the volatile count starts at 0 when the driver loads (a GPU reset or reboot): any value above 0 is an
        # increase since then, and the doctor's ecc_uncorrectable holds until that reset
        _rule(o, 'GpuOpsEccUncorrectable', 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL%s > 0' % _sel(s), o['ecc_for'],
              {'severity': ecc['severity'], 'action': _action(ecc['remediation'])},
              'Uncorrectable ECC errors on %s' % _gpu(),
              '%s had {{ $value }} uncorrectable (double-bit) ECC error(s) since the driver loaded. %s'
              % (_gpu(), ecc['remediation'])),
        _rule(o, 'GpuOpsRowRemapFailure', 'DCGM_FI_DEV_ROW_REMAP_FAILURE%s > 0' % _sel(s), o['row_remap_for'],
              {'severity': fail['severity'], 'action': _action(fail['remediation'])},
              'Row remapping failed on %s' % _gpu(),
              '%s: a row remapping failed; its memory cannot repair itself any more. %s'
              % (_gpu(), fail['remediation'])),
        _rule(o, 'GpuOpsRowRemapPending',
              'increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS%s[%s]) > 0' % (_sel(s), o['row_remap_window']),
              o['row_remap_for'],
              {'severity': pend['severity'], 'action': _action(pend['remediation'])},
              'Uncorrectable-error row remapping pending on %s' % _gpu(),
              '%s remapped more row(s) after uncorrectable errors within %s; a remapping takes effect '
              'at the next GPU reset. %s' % (_gpu(), o['row_remap_window'], pend['remediation'])),
    ]


def _throttle_rules(o: dict[str, Any]) -> list[dict[str, Any]]:
    metric = 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS' + _sel(o['selector'])
    out = []
    for name, bit in severe_clock_bits():
        f = _finding('clocks_throttled')
        # PromQL has no bit operators: bit b of v is floor(v / b) % 2
        out.append(_rule(
            o, 'GpuOpsClocksThrottled', 'floor(%s / %d) %% 2 == 1' % (metric, bit), o['throttle_for'],
            {'severity': f['severity'], 'reason': name},
            '%s runs slowed down by %s' % (_gpu(), name),
            '%s runs slowed down by %s (clock event reason bit 0x%x) for %s. %s'
            % (_gpu(), name, bit, o['throttle_for'], f['remediation'])))
    return out


def _idle_rules(o: dict[str, Any]) -> list[dict[str, Any]]:
    s = o['selector']
    held = _sel(s, 'pod!=""')
    # DCGM_FI_PROF_GR_ENGINE_ACTIVE where the GPU reports it (profiling metrics: data-center GPUs), else
    # DCGM_FI_DEV_GPU_UTIL
    expr = ('(DCGM_FI_PROF_GR_ENGINE_ACTIVE%s == 0) or (DCGM_FI_DEV_GPU_UTIL%s == 0 unless on(Hostname, gpu, UUID) '
            'DCGM_FI_PROF_GR_ENGINE_ACTIVE%s)' % (held, held, _sel(s)))
    return [_rule(
        o, 'GpuOpsGpuAllocatedIdle', expr, o['idle_for'], {'severity': 'warning'},
        '%s is held by pod {{ $labels.namespace }}/{{ $labels.pod }} and idle' % _gpu(),
        '%s is allocated to pod {{ $labels.namespace }}/{{ $labels.pod }} (container {{ $labels.container }}) and its '
        'graphics engine has been idle for %s. Ask its owner to release it (end the pod) or share the GPU '
        '(gpuops.k8s_gpu.gpu_sharing: time-slicing, MPS, MIG or HAMi) so that idle allocations cost less.'
        % (_gpu(), o['idle_for']))]


def _share_rules(o: dict[str, Any]) -> list[dict[str, Any]]:
    if not o['hami']:
        return []
    used, limit = HAMI_METRICS
    s = o['hami_selector']
    factor = '' if not o['share_tolerance'] else ' * %s' % repr(1 + float(o['share_tolerance']))
    # one-to-one on all labels (both series of a container come from the same monitor): the alert keeps them all
    # (an on(...) list would keep only those)
    expr = '%s%s > (%s%s > 0)%s' % (used, _sel(s), limit, _sel(s), factor)
    return [_rule(
        o, 'GpuOpsGpuShareExceeded', expr, o['share_for'], {'severity': 'warning'},
        'Pod {{ $labels.namespace }}/{{ $labels.pod }} uses more GPU memory than its HAMi share',
        'Container {{ $labels.container }} of pod {{ $labels.namespace }}/{{ $labels.pod }} uses {{ $value }} bytes of '
        'device memory on vGPU {{ $labels.vdevice_index }} of GPU {{ $labels.device_uuid }}, above its limit '
        '(hami_vgpu_memory_limit_bytes) for %s. HAMi-core should hold it at the limit: check that the container runs '
        'with HAMi\'s library (its LD_PRELOAD) and raise the pod\'s nvidia.com/gpumem if the work needs more.'
        % o['share_for'])]


def alert_rules(options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Prometheus rule file (a dict) of the collection's GPU alerts; options: see DEFAULTS (RulesError on bad
    ones)."""
    o = _options(options)
    rules = _xid_rules(o) + _memory_rules(o) + _throttle_rules(o) + _idle_rules(o) + _share_rules(o)
    for r in rules:  # the exporter's counters ConfigMap must list every series an alert reads
        stray = expr_metrics(r['expr']) - set(dcgm.COUNTERS) - set(HAMI_METRICS)
        if stray:
            raise RulesError('alert %s reads %s, not in dcgm.COUNTERS' % (r['alert'], ', '.join(sorted(stray))))
    return {'groups': [{'name': o['group'], 'rules': rules}]}


_IDENT = re.compile(r'\b([A-Za-z_:][A-Za-z0-9_:]*)\b')
_PROMQL_WORDS = frozenset(('floor', 'increase', 'on', 'unless', 'or', 'and', 'ignoring', 'group_left', 'group_right',
                           'bool', 'by', 'without'))


def expr_metrics(expr: str) -> set[str]:
    """The metric names an expression of these rules reads (its identifiers less PromQL's words, label matchers,
    `on(...)` label lists and range windows)."""
    text = re.sub(r'\{[^}]*\}', '', expr)
    text = re.sub(r'\b(?:on|ignoring|by|without)\s*\([^)]*\)', '', text)
    text = re.sub(r'\[[^\]]*\]', '', text)
    return set(w for w in _IDENT.findall(text) if w not in _PROMQL_WORDS)
