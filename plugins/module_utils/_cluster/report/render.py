# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Text forms of a gpu_share_report analysis: a kubectl-inspect-gpushare style table, Markdown and HTML.

The output depends only on the analysis (no timestamps), so an unchanged cluster gives an unchanged report file.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the report's records (report/model), for the type checker only
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report.model import (
        DraClaim, GpuRecord, Holder, NodeRecord, PodRecord, Report)

GPUSHARE_MEM = 'aliyun.com/gpu-mem'

# the analysis report/model.analyze returns: the module's JSON result
# a block of the Markdown and HTML writers: (h1|h2|h3|p, text), (ul, [text]) or (table, ([head], [[cell]]))
Block = tuple[str, Any]


def fmt(value: object) -> str:
    """12 -> '12', 2.5 -> '2.5', 1/3 -> '0.33', None -> '-'."""
    if value is None:
        return '-'
    if isinstance(value, float):
        text = ('%.2f' % value).rstrip('0').rstrip('.')
        return text or '0'
    return str(value)


def fmt_pct(value: int | None) -> str:
    return '-' if value is None else '%d%%' % value


def _columns(rows: list[list[str]]) -> list[str]:
    """Left-aligned columns separated by two spaces (like Go's tabwriter in kubectl plugins)."""
    widths = [0] * max(len(r) for r in rows)
    for r in rows:
        for i, cell in enumerate(r):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for r in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(r)]
        lines.append('  '.join(cells).rstrip())
    return lines


def _gpushare_table(report: Report) -> list[str]:
    nodes = [n for n in report['nodes'] if 'gpushare' in n]
    if not nodes:
        return []
    unit = nodes[0]['gpushare']['memory_unit']
    width = max([len([g for g in n['gpus'] if g['index'] is not None]) for n in nodes] + [0])
    pending = any(n['gpushare']['memory_pending'] for n in nodes)
    header = ['NAME', 'IPADDRESS'] + ['GPU%d(Allocated/Total)' % i for i in range(width)]
    if pending:
        header.append('PENDING(Allocated)')
    header.append('GPU Memory(%s)' % unit)
    health = any('health' in n for n in report['nodes'])
    if health:
        header.append('HEALTH')
    rows = [header]
    for n in nodes:
        row = [n['name'], n['address'] or '-']
        by_index = dict((g['index'], g) for g in n['gpus'] if g['index'] is not None)
        for i in range(width):
            g = by_index.get(i)
            row.append('%s/%s' % (fmt(g['memory_allocated']), fmt(g['memory_total'])) if g else '')
        if pending:
            row.append(fmt(n['gpushare']['memory_pending']) if n['gpushare']['memory_pending'] else '')
        row.append('%s/%s' % (fmt(n['gpushare']['memory_allocated']), fmt(n['gpushare']['memory_total'])))
        if health:
            row.append(n.get('health', '-'))
        rows.append(row)
    lines = _columns(rows)
    cl = report['cluster']['gpushare']
    lines.append('-' * max(len(x) for x in lines))
    lines.append('Allocated/Total GPU Memory In Cluster:')
    lines.append('%s/%s (%s)' % (fmt(cl['memory_allocated']), fmt(cl['memory_total']), fmt_pct(cl['memory_percent'])))
    return lines


# the NVIDIA device plugin's resources whose units are GPUs x replicas (time-slicing, MPS; renamed or not)
REPLICATED_RESOURCES = ('nvidia.com/gpu', 'nvidia.com/gpu.shared')


def _replicas_cell(n: NodeRecord, resource: str) -> str:
    """The REPLICAS/GPU cell of a node's resource row: GFD's count as it is, the collection's record marked."""
    if resource not in REPLICATED_RESOURCES or not n.get('replicas'):
        return '-'
    return '%d%s' % (n['replicas'], ' (record)' if n.get('replicas_source') == 'record' else '')


def _resource_table(report: Report) -> list[str]:
    health = any('health' in n for n in report['nodes'])
    replicas = any(n.get('replicas') for n in report['nodes'])
    rows = [['NAME', 'IPADDRESS', 'STRATEGY', 'RESOURCE', 'ALLOCATED/ALLOCATABLE', 'PERCENT']
            + (['REPLICAS/GPU'] if replicas else []) + (['HEALTH'] if health else [])]
    for n in report['nodes']:
        for name, r in sorted(n['resources'].items()):
            if name == GPUSHARE_MEM:
                continue
            rows.append([n['name'], n['address'] or '-', ','.join(n['strategies']) or '-', name,
                         '%s/%s' % (fmt(r['allocated']), fmt(r['allocatable'])), fmt_pct(r['percent'])]
                        + ([_replicas_cell(n, name)] if replicas else [])
                        + ([n.get('health', '-')] if health else []))
    if len(rows) == 1:
        return []
    lines = _columns(rows)
    totals = [[name, '%s/%s' % (fmt(r['allocated']), fmt(r['allocatable'])), '(%s)' % fmt_pct(r['percent'])]
              for name, r in sorted(report['cluster']['resources'].items()) if name != GPUSHARE_MEM]
    lines.append('-' * max(len(x) for x in lines))
    lines.append('Allocated/Allocatable In Cluster:')
    lines.extend(_columns(totals))
    return lines


def _claim_pods(c: DraClaim) -> str:
    return ','.join('%s/%s' % (p['namespace'], p['name']) for p in c['pods']) or '-'


def _dra_rows(report: Report) -> list[list[str]]:
    """One row per device of an allocated claim, one per pending claim: claim, state, node, driver, pool, device,
    uuid, product (with the MIG profile), pods."""
    rows: list[list[str]] = []
    dra = report.get('dra')
    for c in (dra.get('claims') or [] if dra else []):
        name = '%s/%s' % (c['namespace'], c['name'])
        if c['state'] != 'allocated' or not c['devices']:
            rows.append([name, c['state'], '-', '-', '-', '-', '-', '-', _claim_pods(c)])
            continue
        for d in c['devices']:
            product = d['product'] or '-'
            if d.get('profile'):
                product = '%s MIG %s' % (product, d['profile'])
            rows.append([name, c['state'] + (' (shared)' if c['shared'] else ''), d['node'] or '-', d['driver'] or '-',
                         d['pool'] or '-', d['device'] or '-', d['uuid'] or '-', product, _claim_pods(c)])
    return rows


def _dra_table(report: Report) -> list[str]:
    rows = _dra_rows(report)
    if not rows:
        return []
    lines = _columns([['CLAIM', 'STATE', 'NODE', 'DRIVER', 'POOL', 'DEVICE', 'UUID', 'PRODUCT', 'PODS']] + rows)
    for c in report['dra']['claims']:
        if c['state'] == 'pending':
            lines.append('Pending claim %s/%s: %s' % (c['namespace'], c['name'], c['reason']))
    return lines


def _mib(value: float | None) -> str:
    return '-' if value is None else '%s MiB' % fmt(value)


def _usage_gpu_rows(usage: dict[str, Any]) -> list[list[str]]:
    return [[g['node'] or '-', fmt(g['index']) + ('/%s' % g['mig_instance'] if g['mig_instance'] else ''),
             g['mig_profile'] or g['model'] or '-', '%s/%s' % (_mib(g['memory_used_mib']), _mib(g['memory_total_mib'])),
             _mib(g['memory_used_max_mib']), '-' if g['active_percent'] is None else '%s%%' % fmt(g['active_percent']),
             ', '.join(g['holders']) or '-'] for g in usage['gpus']]


def _usage_pod_rows(usage: dict[str, Any]) -> list[list[str]]:
    return [[p['namespace'], p['name'], p['node'] or '-',
             ', '.join('%s=%s' % (k, fmt(v)) for k, v in sorted((p['requests'] or {}).items())) or '-',
             _mib(p['memory_used_mib']) + (' of %s' % _mib(p['memory_limit_mib']) if p.get('memory_limit_mib') else ''),
             '-' if p['active_percent'] is None else '%s%%' % fmt(p['active_percent']),
             'idle' if p['idle'] else ('no data' if p['idle'] is None else ('shared GPU' if p['shared'] else '-'))]
            for p in usage['pods']]


USAGE_GPU_HEAD = ['Node', 'GPU', 'Model', 'Memory used/total (avg)', 'Memory peak', 'Active', 'Pods']
USAGE_POD_HEAD = ['Namespace', 'Pod', 'Node', 'Allocated', 'Memory used (avg)', 'Active', 'Note']


def _usage_table(report: Report) -> list[str]:
    usage = report.get('usage')
    if not usage:
        return []
    lines = ['Usage over %s%s (dcgm-exporter via Prometheus):' % (
        usage['window'], ' to %s' % usage['time'] if usage['time'] else '')]
    if usage['gpus']:
        lines.extend(_columns([[h.upper() for h in USAGE_GPU_HEAD]] + _usage_gpu_rows(usage)))
    if usage['pods']:
        lines.append('')
        lines.extend(_columns([[h.upper() for h in USAGE_POD_HEAD]] + _usage_pod_rows(usage)))
    if usage['idle']:
        lines.append('Idle allocations (active < %s%%): %s' % (fmt(usage['idle_percent']), ', '.join(usage['idle'])))
    if usage['unattributed']:
        lines.append('Active GPUs no pod holds: %s' % ', '.join(usage['unattributed']))
    return lines


def table(report: Report) -> str:
    """The readable table: the gpushare part first (as kubectl-inspect-gpushare prints it), then every other GPU
    resource per node, then the DRA claims (resource.k8s.io), then conflicts and unscheduled pods."""
    parts: list[str] = []
    gs = _gpushare_table(report)
    if gs:
        parts.append('\n'.join(gs))
    rt = _resource_table(report)
    if rt:
        parts.append('\n'.join(rt))
    dt = _dra_table(report)
    if dt:
        parts.append('\n'.join(dt))
    ut = _usage_table(report)
    if ut:
        parts.append('\n'.join(ut))
    extra: list[str] = []
    for n in report['nodes']:
        for c in n['conflicts']:
            extra.append('CONFLICT %s: %s' % (n['name'], c))
    if report['unscheduled']:
        extra.append('Pods requesting GPU resources without a node: %s' % ', '.join(
            '%s/%s' % (p['namespace'], p['name']) for p in report['unscheduled']))
    if extra:
        parts.append('\n'.join(extra))
    if not parts:
        return 'No GPU resources found on %d node(s).' % report['cluster']['nodes']
    return '\n\n'.join(parts) + '\n'


def _amount(h: Holder) -> str:
    bits: list[str] = []
    if h.get('memory') is not None:
        bits.append('mem %s' % fmt(h['memory']))
    if h.get('cores') is not None:
        bits.append('cores %s%%' % fmt(h['cores']))
    if h.get('container') is not None and h.get('resource') == 'gpu-manager':
        bits.append('container %s' % h['container'])
    if h.get('assigned') is False:
        bits.append('not yet assigned')
    return ', '.join(bits)


def _holders(g: GpuRecord) -> list[str]:
    return ['%s/%s (%s)' % (h['namespace'], h['pod'], _amount(h)) if _amount(h) else '%s/%s' % (h['namespace'], h['pod'])
            for h in g['holders']]


def _requests(p: PodRecord) -> str:
    return ', '.join('%s=%s' % (k, fmt(v)) for k, v in sorted(p['requests'].items()))


def _pod_gpus(p: PodRecord) -> str:
    out: list[str] = []
    for g in p['gpus']:
        if g.get('pending'):
            out.append('pending')
        elif g.get('index') is not None:
            out.append('GPU%s' % g['index'])
        elif g.get('uuid'):
            out.append(g['uuid'])
    return ', '.join(out)


def _sections(report: Report) -> list[Block]:
    """The report as (kind, payload) blocks shared by the Markdown and HTML writers."""
    blocks: list[Block] = [('h1', 'GPU share report')]
    cl = report['cluster']
    blocks.append(('p', '%d node(s), %d with GPU resources; %d pod(s) hold GPU resources, %d without a node.' % (
        cl['nodes'], cl['gpu_nodes'], cl['pods'], cl['unscheduled_pods'])))
    blocks.append(('h2', 'Cluster'))
    if cl['resources']:
        blocks.append(('table', (['Resource', 'Allocated', 'Allocatable', 'Free', 'Percent'],
                                 [[k, fmt(r['allocated']), fmt(r['allocatable']), fmt(r['free']), fmt_pct(r['percent'])]
                                  for k, r in sorted(cl['resources'].items())])))
    else:
        blocks.append(('p', 'No GPU resources found.'))
    if 'gpushare' in cl:
        g = cl['gpushare']
        blocks.append(('p', 'gpushare GPU memory: %s/%s %s (%s)' % (
            fmt(g['memory_allocated']), fmt(g['memory_total']), g['memory_unit'], fmt_pct(g['memory_percent']))))
    blocks.append(('h2', 'Nodes'))
    for n in report['nodes']:
        if not n['resources'] and not n['pods'] and not n.get('dra'):
            continue
        title = n['name'] + (' (%s)' % n['address'] if n['address'] else '')
        blocks.append(('h3', title))
        blocks.append(('p', 'Strategies: %s' % (', '.join(n['strategies']) or 'none detected')))
        if n.get('replicas'):
            blocks.append(('p', 'Replicas per GPU: %d, %s; %s physical GPU(s)' % (
                n['replicas'], "the collection's record (label gpuops.io/sharing-replicas)"
                if n.get('replicas_source') == 'record' else 'from GPU feature discovery (label nvidia.com/gpu.replicas)',
                fmt(n.get('physical_gpus')))))
        if 'health' in n:
            blocks.append(('p', 'Health (gpu_doctor): %s%s' % (
                n['health'], ' - %s' % ', '.join(n['health_findings']) if n.get('health_findings') else '')))
        for c in n['conflicts']:
            blocks.append(('p', 'CONFLICT: %s' % c))
        if n['resources']:
            blocks.append(('table', (['Resource', 'Allocated', 'Allocatable', 'Free', 'Percent'],
                                     [[k, fmt(r['allocated']), fmt(r['allocatable']), fmt(r['free']),
                                       fmt_pct(r['percent'])] for k, r in sorted(n['resources'].items())])))
        if n['gpus']:
            blocks.append(('table', (['GPU', 'UUID', 'Type', 'Memory allocated/total', 'Holders'],
                                     [[fmt(g['index']), g['uuid'] or '-', g['type'] or '-',
                                       '%s/%s %s' % (fmt(g['memory_allocated']), fmt(g['memory_total']),
                                                     g['memory_unit'] or ''),
                                       '; '.join(_holders(g)) or '-'] for g in n['gpus']])))
        if n.get('gpushare', {}).get('memory_pending'):
            blocks.append(('p', 'gpushare memory requested by pods without a GPU index yet: %s %s' % (
                fmt(n['gpushare']['memory_pending']), n['gpushare']['memory_unit'])))
        if n.get('dra'):
            blocks.append(('p', 'DRA devices (ResourceSlices): %s' % ', '.join(
                '%s %d published, %d allocated' % (drv, cnt, n['dra']['allocated'].get(drv, 0))
                for drv, cnt in sorted(n['dra']['devices'].items()))))
        if n['notes']:
            blocks.append(('ul', n['notes']))
    dra = report.get('dra')
    if dra and dra.get('served'):
        blocks.append(('h2', 'Dynamic Resource Allocation'))
        rows = _dra_rows(report)
        if rows:
            blocks.append(('table', (['Claim', 'State', 'Node', 'Driver', 'Pool', 'Device', 'UUID', 'Product',
                                      'Pods'], rows)))
            pending = ['%s/%s: %s' % (c['namespace'], c['name'], c['reason'])
                       for c in dra['claims'] if c['state'] == 'pending']
            if pending:
                blocks.append(('p', 'Pending claims:'))
                blocks.append(('ul', pending))
        else:
            blocks.append(('p', 'No ResourceClaims.'))
    blocks.append(('h2', 'Pods'))
    if report['pods']:
        blocks.append(('table', (['Namespace', 'Pod', 'Node', 'Phase', 'Requests', 'GPUs'],
                                 [[p['namespace'], p['name'], p['node'] or '-', p['phase'], _requests(p) or '-',
                                   _pod_gpus(p) or '-'] for p in report['pods']])))
    else:
        blocks.append(('p', 'No pod holds GPU resources.'))
    usage = report.get('usage')
    if usage:
        blocks.append(('h2', 'Usage'))
        blocks.append(('p', 'Over %s%s, from dcgm-exporter\'s series in Prometheus (%s); idle: active below %s%%.' % (
            usage['window'], ' to %s' % usage['time'] if usage['time'] else '', usage['source'] or '-',
            fmt(usage['idle_percent']))))
        if usage['gpus']:
            blocks.append(('table', (USAGE_GPU_HEAD, _usage_gpu_rows(usage))))
        if usage['pods']:
            blocks.append(('table', (USAGE_POD_HEAD, _usage_pod_rows(usage))))
        if usage['idle']:
            blocks.append(('p', 'Idle allocations: %s' % ', '.join(usage['idle'])))
        if usage['unattributed']:
            blocks.append(('p', 'Active GPUs no pod holds: %s' % ', '.join(usage['unattributed'])))
        if usage['notes']:
            blocks.append(('ul', usage['notes']))
    if report['notes']:
        blocks.append(('h2', 'Notes'))
        blocks.append(('ul', report['notes']))
    return blocks


def _md_cell(text: object) -> str:
    return str(text).replace('|', '\\|').replace('\n', ' ')


def markdown(report: Report) -> str:
    out: list[str] = []
    for kind, payload in _sections(report):
        if kind == 'h1':
            out.append('# %s\n' % payload)
        elif kind == 'h2':
            out.append('## %s\n' % payload)
        elif kind == 'h3':
            out.append('### %s\n' % payload)
        elif kind == 'p':
            out.append('%s\n' % payload)
        elif kind == 'ul':
            out.append('\n'.join('- %s' % x for x in payload) + '\n')
        elif kind == 'table':
            head, rows = payload
            lines = ['| %s |' % ' | '.join(_md_cell(h) for h in head), '|%s' % ('---|' * len(head))]
            lines.extend('| %s |' % ' | '.join(_md_cell(c) for c in r) for r in rows)
            out.append('\n'.join(lines) + '\n')
    return '\n'.join(out)


def html_report(report: Report) -> str:
    esc = html.escape
    out = ['<!DOCTYPE html>', '<html lang="en">', '<head>', '<meta charset="utf-8">', '<title>GPU share report</title>',
           '<style>body{font-family:sans-serif}table{border-collapse:collapse;margin:0.5em 0}'
           'td,th{border:1px solid #999;padding:2px 6px;text-align:left}</style>', '</head>', '<body>']
    for kind, payload in _sections(report):
        if kind in ('h1', 'h2', 'h3', 'p'):
            out.append('<%s>%s</%s>' % (kind, esc(payload), kind))
        elif kind == 'ul':
            out.append('<ul>%s</ul>' % ''.join('<li>%s</li>' % esc(x) for x in payload))
        elif kind == 'table':
            head, rows = payload
            out.append('<table>')
            out.append('<tr>%s</tr>' % ''.join('<th>%s</th>' % esc(h) for h in head))
            for r in rows:
                out.append('<tr>%s</tr>' % ''.join('<td>%s</td>' % esc(str(c)) for c in r))
            out.append('</table>')
    out.extend(['</body>', '</html>', ''])
    return '\n'.join(out)


def render(report: Report, fmt_name: str) -> str:
    if fmt_name == 'html':
        return html_report(report)
    return markdown(report)
