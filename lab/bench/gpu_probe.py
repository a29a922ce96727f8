#!/usr/bin/env python3
"""Benchmark the GPU probe (issue: gpu_info must be fast).

1. NVML part: nvml_probe.probe() in-process against the NVML simulator with 1, 8 and 16 GPUs
   (real nvidia-ml-py bindings), repeated; median and spread in milliseconds; then the probe per query group
   (base, + MIG profiles, + health, + Xid events, all) so the cost of each group is visible.
2. Task cost: a playbook with N gpu_info tasks and N ansible.builtin.ping tasks on localhost; per-task
   wall time from the json callback; ratio gpu_info / ping.

Writes a Markdown section to stdout and to build/bench/gpu_probe.md. --smoke runs one repetition.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Stat  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, '.venv', 'bin')
SIM = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
INV = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')

PROBE_SNIPPET = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe
reps = int(sys.argv[2])
# query groups (argv[3], default "default": probe() as gpu_info calls it, MIG profiles on, no health)
groups = {'default': {}, 'base': {'include_mig_profiles': False},
          'mig_profiles': {'include_mig_profiles': True},
          'health': {'include_mig_profiles': False, 'include_health': True},
          'xid_events': {'include_mig_profiles': False, 'xid_wait_ms': 0},
          'all': {'include_mig_profiles': True, 'include_health': True, 'xid_wait_ms': 0}}
kwargs = groups[sys.argv[3] if len(sys.argv) > 3 else 'default']
nvml_probe.probe(**kwargs)  # load the library once, like a module's first call would
times = []
for _ in range(reps):
    t = time.perf_counter()
    r = nvml_probe.probe(**kwargs)
    times.append((time.perf_counter() - t) * 1000.0)
assert r['status'] == 'ok', r
print(json.dumps({'gpus': len(r['gpus']), 'times_ms': times}))
'''
# the query groups the table shows, in order; each adds one group of NVML calls to the base probe
GROUPS = ('base', 'mig_profiles', 'health', 'xid_events', 'all')


def collections_path():
    return subprocess.run(['bash', os.path.join(ROOT, 'lab/bin/collections-path.sh')], check=True,
                          capture_output=True, text=True).stdout.strip()


INVENTORIES = ('t4', 'hgx-a100-80gb', 'bench-16', 'h100-real-580')


def _run_snippet(name, reps, group=None):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LD_LIBRARY_PATH=SIM, NVML_SIM_INVENTORY=os.path.join(INV, name + '.json'),
                   NVML_SIM_STATE=os.path.join(tmp, 'state.json'))
        out = subprocess.run([os.path.join(VENV, 'python'), '-c', PROBE_SNIPPET, collections_path(), str(reps)]
                             + ([group] if group else []), env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def nvml_part(reps):
    rows = []
    for name in INVENTORIES[:3]:
        d = _run_snippet(name, reps)
        t = d['times_ms']
        rows.append((name, d['gpus'], statistics.median(t), min(t), max(t), len(t)))
    return rows


def group_part(reps):
    """Median ms of the probe per query group and inventory: what each group of NVML calls costs on top of the base
    probe (GPU identity, memory, MIG mode/devices, NVLinks)."""
    rows = []
    for name in INVENTORIES:
        medians = {}
        for group in GROUPS:
            d = _run_snippet(name, reps, group)
            medians[group] = statistics.median(d['times_ms'])
        rows.append((name, d['gpus'], medians))
    return rows


def task_cost(n_tasks, reps):
    play = [{'hosts': 'localhost', 'connection': 'local', 'gather_facts': False, 'tasks':
             [t for i in range(n_tasks) for t in ({'name': 'gpu_info %d' % i, 'gpuops.k8s_gpu.gpu_info': {}},
                                                  {'name': 'ping %d' % i, 'ansible.builtin.ping': {}})]}]
    ratios, gi, pg = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'play.json')
        with open(path, 'w') as f:
            json.dump(play, f)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
                   ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_PYTHON_INTERPRETER=os.path.join(VENV, 'python'),
                   LD_LIBRARY_PATH=SIM, NVML_SIM_INVENTORY=os.path.join(INV, 't4.json'),
                   NVML_SIM_STATE=os.path.join(tmp, 'state.json'))
        for _ in range(reps):
            out = subprocess.run([os.path.join(VENV, 'ansible-playbook'), path], env=env, check=True,
                                 capture_output=True, text=True).stdout
            doc = json.loads(out)
            durs = {'gpu_info': [], 'ping': []}
            for task in doc['plays'][0]['tasks']:
                d = task['task']['duration']
                start = time.mktime(time.strptime(d['start'][:19], '%Y-%m-%dT%H:%M:%S')) + float('0' + d['start'][19:26])
                end = time.mktime(time.strptime(d['end'][:19], '%Y-%m-%dT%H:%M:%S')) + float('0' + d['end'][19:26])
                durs[task['task']['name'].split()[0]].append((end - start) * 1000.0)
            g, p = statistics.median(durs['gpu_info']), statistics.median(durs['ping'])
            gi.append(g)
            pg.append(p)
            ratios.append(g / p)
    return gi, pg, ratios


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--smoke', action='store_true', help='one repetition, fewer tasks')
    args = ap.parse_args()
    subprocess.run(['bash', os.path.join(ROOT, 'lab/nvml_sim/build.sh')], check=True, capture_output=True)
    reps = 1 if args.smoke else 200
    rows = nvml_part(reps)
    groups = group_part(reps)
    n_tasks, runs = (3, 1) if args.smoke else (10, 5)
    g, p, r = (Stat(v) for v in task_cost(n_tasks, runs))
    lines = ['## GPU probe (gpu_info)', '',
             'NVML part: `nvml_probe.probe()` in-process, real nvidia-ml-py against the NVML simulator '
             '(%d repetitions after one warm-up call; the simulator\'s calls cost far less than a real driver\'s).' % reps, '',
             '| inventory | GPUs | median ms | min ms | max ms | target |', '|---|---:|---:|---:|---:|---|']
    for name, n, med, lo, hi, _ in rows:
        lines.append('| %s | %d | %.2f | %.2f | %.2f | %s |' % (name, n, med, lo, hi, '<= 5 ms for 16' if n == 16 else ''))
    lines += ['', 'Query groups: the same probe, median ms per call (%d repetitions), with one group of NVML calls at a '
              'time on top of the base probe (no MIG profiles, no health): `mig_profiles` (GPU-instance profiles, asked '
              'once per GPU model), `health` (ECC, remapped rows, retired pages, clock event reasons, PCIe, '
              'virtualization, NVLink fabric, GSP firmware), `xid_events` (an event set registered and read with '
              'xid_wait_ms 0), `all` (everything the doctor asks). The doctor asks MIG profiles only for the mig '
              'strategy and health only when a health check runs.' % reps, '',
              '| inventory | GPUs | %s |' % ' | '.join(GROUPS), '|---|---:|%s' % ('---:|' * len(GROUPS))]
    for name, n, med in groups:
        lines.append('| %s | %d | %s |' % (name, n, ' | '.join('%.2f' % med[gr] for gr in GROUPS)))
    lines += ['', 'Task cost: per-task wall time on localhost (json callback durations). %d ansible-playbook run(s) of '
              '%d gpu_info and %d ping tasks, interleaved (gpu_info, ping, gpu_info, ...); per run the median of each, '
              'then median (min-max) over the runs. The ratio is taken per run, side by side.' % (runs, n_tasks, n_tasks), '',
              '| task | ms per task, median (min-max) over runs |', '|---|---:|',
              '| gpuops.k8s_gpu.gpu_info (T4) | %s |' % g.fmt(), '| ansible.builtin.ping | %s |' % p.fmt(), '',
              'Ratio gpu_info / ping: %s over %d run(s); target <= 1.2.' % (r.fmt('%.2f'), r.n)]
    text = '\n'.join(lines) + '\n'
    os.makedirs(os.path.join(ROOT, 'build', 'bench'), exist_ok=True)
    with open(os.path.join(ROOT, 'build', 'bench', 'gpu_probe.md'), 'w') as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
