#!/usr/bin/env python3
"""Draw the collection's Grafana dashboard (module_utils _cluster/metrics/dashboard.py) as an SVG picture, each panel
filled by running its own PromQL on a Prometheus (query_range for time series, an instant query for stats and
tables), with the dashboard's variables at "All". No Grafana runs here (it is AGPL and not in the lab): the picture
shows what the queries answer, laid out on the dashboard's grid, not Grafana's rendering.

  draw_dashboard.py --prometheus URL --end UNIX [--hours 2] [--out FILE]

lab/tests/integration/test_report_usage_real.py draws it from upstream's Prometheus serving the lab's series and
compares it with docs/observability-dashboard.svg (regenerate: GPUOPS_WRITE_DASHBOARD_SVG=1 with that test).
"""
from __future__ import annotations

import argparse
import html
import json
import sys
import urllib.parse
import urllib.request

COL, ROW = 50, 30           # pixels per grid column (24 columns) and per grid row
COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22',
          '#17becf']


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        doc = json.loads(r.read())
    if doc.get('status') != 'success':
        raise RuntimeError('Prometheus refused %s: %s' % (url, doc))
    return doc['data']


def _expr(expr, variables):
    for name, value in variables.items():
        expr = expr.replace('$' + name, value)
    return expr


def _legend(fmt, labels):
    if not fmt:
        return ', '.join('%s=%s' % kv for kv in sorted(labels.items())) or 'value'
    out = fmt
    for k, v in labels.items():
        out = out.replace('{{%s}}' % k, v)
    while '{{' in out:
        a = out.index('{{')
        b = out.index('}}', a)
        out = out[:a] + out[b + 2:]
    return ' '.join(out.split())


def fill(dash, prometheus, end, hours=2.0, step=120):
    """{panel id: [(legend, [(t, v)])]} for time series, {panel id: [(legend, value)]} for stats and tables."""
    variables = {'pool': '.*', 'node': '.*'}
    out = {}
    for p in dash['panels']:
        rows = []
        for t in p['targets']:
            expr = _expr(t['expr'], variables)
            if p['type'] == 'timeseries':
                q = urllib.parse.urlencode({'query': expr, 'start': end - hours * 3600, 'end': end, 'step': step})
                for s in _get('%s/api/v1/query_range?%s' % (prometheus, q))['result']:
                    rows.append((_legend(t.get('legendFormat'), s['metric']),
                                 [(float(ts) - end, float(v)) for ts, v in s['values']]))
            else:
                q = urllib.parse.urlencode({'query': expr, 'time': end})
                for s in _get('%s/api/v1/query?%s' % (prometheus, q))['result']:
                    rows.append((_legend(t.get('legendFormat'), s['metric']), float(s['value'][1])))
        out[p['id']] = sorted(rows, key=lambda r: r[0])
    return out


def _num(v, unit):
    if unit == 'percentunit':
        return '%.0f%%' % (v * 100)
    if unit == 'percent':
        return '%.1f%%' % v
    if unit == 'decmbytes':
        return '%.0f MiB' % v if v < 10240 else '%.1f GiB' % (v / 1024)
    return ('%d' % v) if v == int(v) else '%.2f' % v


def svg(dash, data, hours=2.0):
    width = 24 * COL
    height = max(p['gridPos']['y'] + p['gridPos']['h'] for p in dash['panels']) * ROW + 40
    e = html.escape
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (width, height), '<rect width="100%" height="100%" fill="#f4f5f5"/>',
           '<text x="8" y="24" font-size="16" font-weight="bold">%s</text>' % e(dash['title']),
           '<text x="%d" y="24" text-anchor="end" fill="#555">pool: All, node: All; last %gh</text>' % (width - 8, hours)]
    for p in dash['panels']:
        g = p['gridPos']
        x0, y0, w, h = g['x'] * COL + 4, g['y'] * ROW + 36, g['w'] * COL - 8, g['h'] * ROW - 8
        unit = p['fieldConfig']['defaults']['unit']
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#ccc"/>' % (x0, y0, w, h))
        out.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (x0 + 6, y0 + 15, e(p['title'])))
        rows = data.get(p['id']) or []
        if p['type'] == 'stat':
            text = _num(rows[0][1], unit) if rows else 'No data'
            out.append('<text x="%d" y="%d" font-size="30" text-anchor="middle" fill="#2a7">%s</text>'
                       % (x0 + w // 2, y0 + h // 2 + 18, e(text)))
        elif p['type'] == 'table':
            out.append('<text x="%d" y="%d" fill="#555">%s</text>' % (x0 + 8, y0 + 32, 'Pod / value'))
            for i, (legend, value) in enumerate(rows[:8]):
                out.append('<text x="%d" y="%d">%s</text><text x="%d" y="%d" text-anchor="end">%s</text>' % (
                    x0 + 8, y0 + 50 + 16 * i, e(legend), x0 + w - 10, y0 + 50 + 16 * i, e(_num(value, unit))))
            if not rows:
                out.append('<text x="%d" y="%d" fill="#999">No data</text>' % (x0 + 8, y0 + 50))
        else:
            px0, py0, pw, ph = x0 + 56, y0 + 24, w - 66, h - 24 - 18 - 14 * min(3, (len(rows) + 1) // 2)
            vals = [v for _l, pts in rows for _t, v in pts]
            top = max(vals) if vals else 1.0
            top = top * 1.1 if top > 0 else 1.0
            out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>' % (px0, py0 + ph, px0 + pw, py0 + ph))
            out.append('<text x="%d" y="%d" text-anchor="end" fill="#555">%s</text>' % (px0 - 4, py0 + 8,
                                                                                      e(_num(top, unit))))
            out.append('<text x="%d" y="%d" text-anchor="end" fill="#555">0</text>' % (px0 - 4, py0 + ph))
            for frac, label in ((0, '-%gh' % hours), (0.5, '-%gh' % (hours / 2)), (1, 'now')):
                out.append('<text x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>'
                           % (px0 + frac * pw, py0 + ph + 12, label))
            for i, (legend, pts) in enumerate(rows):
                c = COLORS[i % len(COLORS)]
                path = ' '.join('%.1f,%.1f' % (px0 + (t / (hours * 3600) + 1) * pw, py0 + ph - v / top * ph)
                                for t, v in pts)
                out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (c, path))
                if i < 6:
                    lx, ly = x0 + 8 + (i % 2) * (w // 2), y0 + h - 8 - 14 * (min(3, (len(rows) + 1) // 2) - 1 - i // 2)
                    out.append('<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d">%s</text>'
                               % (lx, ly - 4, c, lx + 14, ly, e(legend[:48])))
            if not rows:
                out.append('<text x="%d" y="%d" fill="#999">No data</text>' % (px0 + 8, py0 + 20))
    out.append('</svg>')
    return '\n'.join(out) + '\n'


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--prometheus', required=True)
    ap.add_argument('--end', type=float, required=True)
    ap.add_argument('--hours', type=float, default=2.0)
    ap.add_argument('--dashboard', help='dashboard JSON file (default: the collection\'s, through lab_collections)')
    ap.add_argument('--out', default='-')
    a = ap.parse_args(argv)
    if a.dashboard:
        with open(a.dashboard) as f:
            dash = json.load(f)
    else:
        sys.path.insert(0, __file__.rsplit('/lab/', 1)[0] + '/lab/tests')
        from conftest import lab_collections_path
        lab_collections_path(importable=True)
        from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard
        dash = dashboard.dashboard()
    text = svg(dash, fill(dash, a.prometheus.rstrip('/'), a.end, a.hours), a.hours)
    if a.out == '-':
        sys.stdout.write(text)
    else:
        with open(a.out, 'w') as f:
            f.write(text)


if __name__ == '__main__':
    main()
