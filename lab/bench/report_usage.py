#!/usr/bin/env python3
"""Benchmark: the controller's work for GPU usage as fleets grow (issue #42).

1. The report's usage join (plugins/module_utils/_cluster/report/usage.py join): the five instant vectors Prometheus
   answers (one series per GPU each, labelled as dcgm-exporter labels them, one pod per GPU) joined with the report's
   running pods, for 100, 1,000 and 5,000 nodes of 8 GPUs; CPU seconds and microseconds per GPU (median of the
   repetitions; again with the cyclic garbage collector off, to show what grows). The five queries are the same whatever the fleet size (usage.queries); Prometheus' own time to answer
   them is not measured here.
2. The metrics role's render per pool (module gpu_metrics_manifests' exporter.render) and the cluster's objects
   (rules and dashboard): per pool, not per node, so flat in the fleet size; CPU milliseconds per call.

In-process, no cluster. Writes a Markdown section to stdout and to build/bench/report_usage.md. --smoke: 100 nodes,
one repetition.
"""
import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as c  # noqa: E402

sys.path.insert(0, c.collections_path())
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import cluster, exporter  # noqa: E402
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import usage  # noqa: E402

QUERIES = ('memory_used', 'memory_used_max', 'memory_free', 'gr_active', 'gpu_util')


def fleet(nodes, gpus=8):
    """(report, answers) for ``nodes`` nodes of ``gpus`` H100s, each GPU held by one running pod."""
    answers = dict((q, []) for q in QUERIES)
    pods = []
    for n in range(nodes):
        node = 'gpu-node-%05d' % n
        for g in range(gpus):
            pod = 'train-%05d-%d' % (n, g)
            labels = {'Hostname': node, 'UUID': 'GPU-%08d-%04d' % (n, g), 'gpu': str(g), 'device': 'nvidia%d' % g,
                      'modelName': 'NVIDIA H100 80GB HBM3', 'pci_bus_id': '00000000:%02X:00.0' % (g + 16),
                      'namespace': 'team-a', 'pod': pod, 'container': 'main',
                      exporter.SERIES_POOL_LABEL: 'h100'}
            for i, q in enumerate(QUERIES):
                answers[q].append((labels, 1000.0 + n % 7 + i))
            pods.append({'namespace': 'team-a', 'name': pod, 'phase': 'Running', 'node': node,
                         'requests': {'nvidia.com/gpu': '1'}})
    return {'pods': pods}, answers


def cpu(fn, reps):
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--smoke', action='store_true')
    args = ap.parse_args()
    sizes, reps = ((100,), 1) if args.smoke else ((100, 1000, 5000), 3)
    rows = []
    for nodes in sizes:
        report, answers = fleet(nodes)
        out = {}

        def run():
            out['u'] = usage.join(report, answers, '1h')
        seconds = cpu(run, reps)
        assert len(out['u']['gpus']) == nodes * 8 and not out['u']['unseen'], 'the join lost GPUs or pods'
        gc.collect()
        gc.disable()
        try:
            no_gc = cpu(run, reps)
        finally:
            gc.enable()
        rows.append((nodes, nodes * 8, len(usage.queries('1h')), '%.3f' % seconds,
                     '%.1f' % (seconds / (nodes * 8) * 1e6), '%.1f' % (no_gc / (nodes * 8) * 1e6)))
    lines = ['## GPU usage: the report\'s join and the metrics render (issue #42)', '',
             'In-process, %d repetition(s), median; %s.' % (reps, time.strftime('%Y-%m-%d')), '',
             '**The report\'s usage join** (five Prometheus instant vectors, one series per GPU, joined with the '
             'running pods; one pod per GPU):', '']
    lines += c.table(('nodes', 'GPUs', 'queries', 'join CPU-s', 'us per GPU', 'us per GPU, cyclic GC off'), rows)
    lines += ['', 'What grows per GPU with the fleet is mostly Python\'s cyclic garbage collector walking the join\'s '
              'growing set of live rows (the last column: the same join with it off).']
    pools = [('ts', 'time-slicing'), ('mig', 'mig'), ('dra', 'dra'), ('ex', 'exclusive')]
    render_ms = cpu(lambda: [exporter.render({'pool': p, 'strategy': s, 'monitoring_api': True}) for p, s in pools],
                    reps) / len(pools) * 1000
    cluster_ms = cpu(lambda: cluster.objects(monitoring_api=True), reps) * 1000
    lines += ['', '**The metrics render** is per pool and per cluster, never per node: one pool\'s exporter objects '
              '%.2f ms of CPU, the cluster\'s rules and dashboard %.2f ms, whatever the fleet size.'
              % (render_ms, cluster_ms), '']
    text = '\n'.join(lines) + '\n'
    c.write_section('report_usage', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
