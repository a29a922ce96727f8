#!/usr/bin/env python3
"""Benchmark: check-mode run of the node layer (NVML part) and the cluster layer over 1, 10 and 50 simulated hosts.

Host model (fits a 2-core machine): every host is `ansible_connection: local`; its GPUs are the NVML simulator's
(host library lab/.build/nvml_sim) with a per-host inventory (T4 or HGX A100 80GB, alternating) and a per-host state
file, selected by the environment variables NVML_SIM_INVENTORY / NVML_SIM_STATE that the play sets from host
variables. The cluster layer (time-slicing stack for the T4 pool, MIG stack for the A100 pool, node labels) talks to
one Kubernetes API emulator seeded with one Node per host. Playbook: lab/bench/fleet/fleet.yml, always --check.

Settings tried at the largest size, interleaved round by round: forks 5 (ansible's default), 10, 25; pipelining;
gather_subset min; jsonfile fact cache with gathering=smart (after a warm-up run that fills the cache).
Controller cost = user+sys CPU seconds of ansible-playbook and its children (the modules run on the same machine with
a local connection, so module CPU is included; with SSH that part moves to the nodes).

  .venv/bin/python lab/bench/fleet/bench.py [--sizes 1,10,50] [--reps 2] [--smoke]
Env: GPUOPS_BENCH_PREFIX (default gpuops-bench) prefixes the emulator name.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as c  # noqa: E402

ROOT = c.ROOT
HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = os.environ.get('GPUOPS_BENCH_PREFIX', 'gpuops-bench')
SIM = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
INVS = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')

# label -> (ansible env, extra vars, fact cache: None | 'fill' (write the jsonfile cache) | 'use' (gathering=smart))
BASE = {'ANSIBLE_FORKS': '5', 'ANSIBLE_PIPELINING': '0'}
DEFAULT = 'forks 5 (ansible default), no pipelining, full facts'
BEST = 'forks 25 + pipelining + gather_subset min'
CACHED = 'forks 25 + pipelining + jsonfile fact cache, gathering=smart (warm cache)'
SETTINGS = dict([
    (DEFAULT, (dict(BASE), {}, None)),
    ('forks 10', (dict(BASE, ANSIBLE_FORKS='10'), {}, None)),
    ('forks 10 + pipelining', (dict(BASE, ANSIBLE_FORKS='10', ANSIBLE_PIPELINING='1'), {}, None)),
    (BEST, (dict(BASE, ANSIBLE_FORKS='25', ANSIBLE_PIPELINING='1'), {'bench_gather_subset': ['min']}, 'fill')),
    (CACHED, (dict(BASE, ANSIBLE_FORKS='25', ANSIBLE_PIPELINING='1'), {'bench_gather_subset': ['min']}, 'use')),
])
# (hosts, setting): growth 1 -> 10 -> 50 with BEST, the settings sweep at 10 hosts (the CACHED run follows the BEST
# run of the same size, which fills the cache), the default at 1 host
PLAN = [(1, BEST), (10, DEFAULT), (10, 'forks 10'), (10, 'forks 10 + pipelining'), (10, BEST),
        (10, CACHED), (50, BEST)]


def inventory(n, tmp):
    hosts, ts, mig = {}, [], []
    for i in range(n):
        name = 'host-%03d' % i
        a100 = i % 2 == 1
        (mig if a100 else ts).append(name)
        hosts[name] = {'bench_nvml_inventory': os.path.join(INVS, 'hgx-a100-80gb.json' if a100 else 't4.json'),
                       'bench_nvml_state': os.path.join(tmp, 'nvml', name + '.json'),
                       'gpu_probe_report_path': os.path.join(tmp, 'reports', name + '.json')}
    return {'all': {'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': os.path.join(c.VENV_BIN, 'python'),
                             'bench_nvml_lib': SIM},
                    'hosts': {'localhost': {}},
                    'children': {'gpu_nodes': {'hosts': hosts, 'children': {
                        'pool-ts': {'hosts': dict((h, {}) for h in ts)},
                        'pool-mig': {'hosts': dict((h, {}) for h in mig)}}}}}}


def start_emulator(tmp, n):
    seed = [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'host-%03d' % i, 'labels': {
        'kubernetes.io/hostname': 'host-%03d' % i}}, 'status': {'capacity': {'cpu': '32'}, 'allocatable': {'cpu': '32'}}}
        for i in range(n)]
    with open(os.path.join(tmp, 'seed.yaml'), 'w') as f:
        yaml.safe_dump_all(seed, f)
    name = '%s-fleet-%d' % (PREFIX, os.getpid())
    out = subprocess.run([os.path.join(ROOT, 'lab/kube/start.sh'), '--name', name, '--seed', os.path.join(tmp, 'seed.yaml')],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit('kube start.sh failed:\n%s\n%s' % (out.stdout, out.stderr))
    return name, out.stdout.strip().splitlines()[-1]


def run(n, label, tmp, kubeconfig):
    env, extra, cache = SETTINGS[label]
    inv = os.path.join(tmp, 'inv-%d.json' % n)
    with open(inv, 'w') as f:
        json.dump(inventory(n, tmp), f)
    e = dict(env, K8S_AUTH_KUBECONFIG=kubeconfig)
    cdir = os.path.join(tmp, 'factcache-%d' % n)
    if cache == 'fill':
        shutil.rmtree(cdir, ignore_errors=True)
    if cache:
        e.update(ANSIBLE_CACHE_PLUGIN='ansible.builtin.jsonfile', ANSIBLE_CACHE_PLUGIN_CONNECTION=cdir,
                 ANSIBLE_CACHE_PLUGIN_TIMEOUT='86400')
    if cache == 'use':
        e['ANSIBLE_GATHERING'] = 'smart'
    args = ['-i', inv, os.path.join(HERE, 'fleet.yml'), '--check', '-e', json.dumps(dict(extra, bench_cache=cache or ''))]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, doc, p = c.run_json_playbook(args, env=e)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 or doc is None:
        raise SystemExit('fleet run (%d hosts, %s) failed:\n%s\n%s' % (n, label, '\n'.join(c.failures(doc))[:4000],
                                                                       p.stderr[-3000:]))
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    node_play, cluster_play = doc['plays'][0], doc['plays'][1]
    gathered = sum(1 for t in node_play['tasks'] if t['task']['name'] == 'Gathering Facts' for h in t['hosts'])
    return {'wall': wall, 'cpu': cpu, 'node': c.play_summary(node_play)['wall'],
            'cluster': c.play_summary(cluster_play)['wall'], 'gathered': gathered}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--sizes', default='1,10,50')
    ap.add_argument('--reps', type=int, default=1, help='rounds for the runs below the largest size')
    ap.add_argument('--big-reps', type=int, default=1, help='rounds at the largest size (a 50-host run takes minutes)')
    ap.add_argument('--smoke', action='store_true', help='1 host, one setting, one repetition')
    a = ap.parse_args()
    sizes = [1] if a.smoke else [int(s) for s in a.sizes.split(',')]
    reps = 1 if a.smoke else a.reps
    big = max(sizes)
    subprocess.run(['bash', os.path.join(ROOT, 'lab/nvml_sim/build.sh')], check=True, capture_output=True)
    plan = [(n, label) for n, label in PLAN if n in sizes]
    if a.smoke:
        plan = [(1, BEST)]   # a smoke run proves the script works; one setting is enough (make test's CPU)
    if big not in [n for n, dummy in plan]:
        plan.append((big, BEST))
    results = dict((k, []) for k in plan)
    with tempfile.TemporaryDirectory(prefix='bench-fleet-') as tmp:
        name, kubeconfig = start_emulator(tmp, big)
        try:
            for rep in range(reps):          # interleaved: every configuration once per round
                for n, label in plan:
                    if n == big and rep >= a.big_reps:
                        continue
                    r = run(n, label, tmp, kubeconfig)
                    results[(n, label)].append(r)
                    print('  round %d: %d hosts, %s: %.1fs wall, %.1fs cpu' % (rep, n, label, r['wall'], r['cpu']),
                          file=sys.stderr)
        finally:
            subprocess.run([os.path.join(ROOT, 'lab/kube/stop.sh'), '--name', name], capture_output=True, timeout=60)
            shutil.rmtree(os.path.dirname(kubeconfig), ignore_errors=True)
    rows = []
    for n, label in plan:
        rs = results[(n, label)]
        w, cpu = c.Stat(r['wall'] for r in rs), c.Stat(r['cpu'] for r in rs)
        rows.append([n, label, w.n, w.fmt(), c.Stat(r['node'] for r in rs).fmt(), c.Stat(r['cluster'] for r in rs).fmt(),
                     cpu.fmt(), '%.2f' % (cpu.median / n), '%.2f' % (w.median / n), rs[0]['gathered']])
    lines = ['## Fleet: check mode over %s simulated hosts' % ', '.join(str(s) for s in sizes), '',
             'Playbook `lab/bench/fleet/fleet.yml` with `--check`: node layer = facts + `gpu_probe` (gpu_info) + '
             '`gpu_sharing` (persistence; MIG geometry on the A100 half) per host; cluster layer = time-slicing stack '
             '(T4 pool) + MIG stack (A100 pool) + `gpu_node_labels`, against one Kubernetes API emulator. Host model: '
             '`ansible_connection: local` with a per-host NVML simulator inventory/state chosen by environment variables '
             '(T4 and HGX A100 80GB alternating). The driver and runtime roles are not in this run: with a local '
             'connection they would act 50 times on the controller\'s own apt and systemd, which measures nothing about '
             'a fleet (their per-node cost is in the node-layer section). %d round(s), configurations interleaved '
             'round by round; median (min-max). CPU = user+sys seconds of ansible-playbook and its children on this '
             '%d-core machine (module CPU included, see above).' % (reps, os.cpu_count()), '']
    lines += c.table(['hosts', 'settings', 'runs', 'wall s', 'node play s', 'cluster play s', 'controller CPU s',
                      'CPU s per host', 'wall s per host', 'hosts that gathered facts'], rows)
    if not a.smoke and len(sizes) > 1:
        lo, hi = min(sizes), big
        w = dict((n, c.Stat(r['wall'] for r in results[(n, BEST)]).median) for n in sizes if (n, BEST) in results)
        cp = dict((n, c.Stat(r['cpu'] for r in results[(n, BEST)]).median) for n in sizes if (n, BEST) in results)
        lines += ['', 'Growth with "%s": %s. Per extra host: %.2f s wall and %.2f CPU s (from %d to %d hosts); fixed part '
                  'about %.1f s (ansible start-up, inventory, the cluster play\'s API discovery).' % (
                      BEST, ', '.join('%.1f s for %d host(s)' % (w[n], n) for n in sorted(w)),
                      (w[hi] - w[lo]) / (hi - lo), (cp[hi] - cp[lo]) / (hi - lo), lo, hi, w[lo])]
        mid = [n for n in sizes if (n, 'forks 10') in results]
        if mid:
            n = mid[0]
            ws = sorted((c.Stat(r['wall'] for r in results[(n, lab)]).median, lab) for lab in SETTINGS if (n, lab) in results)
            cs = sorted((c.Stat(r['cpu'] for r in results[(n, lab)]).median, lab) for lab in SETTINGS if (n, lab) in results)
            lines += ['', 'Settings at %d hosts, by wall time: %s. By controller CPU: %s.' % (
                n, '; '.join('%s %.1f s' % (lab, t) for t, lab in ws), '; '.join('%s %.1f s' % (lab, t) for t, lab in cs)),
                '', 'How to read this: with %d round(s) on a machine shared with other jobs, differences below about 15 %% '
                'are noise; CPU seconds are steadier than wall time. What holds by mechanism and shows here: the work '
                'is CPU-bound on 2 cores (every module is a local process), so forks above the core count buy little; '
                'the cluster play grows with the fleet (it renders plans over every host\'s facts) and is the part '
                'the control node pays for alone; a warm jsonfile fact cache with gathering=smart skips fact gathering '
                'on every host (last column) and gather_subset min gathers less. Pipelining changes little with a '
                'local connection (no file transfer to save); over SSH it removes one transfer per task. Recommended '
                'for real fleets: pipelining on, gather_subset min (all these roles read), a jsonfile fact cache with '
                'gathering=smart for repeated runs, forks 25-50 over SSH (network-bound) but no more than the control '
                'node can run at once (here about %.1f CPU s per host and run).' % (
                    reps, (cp[hi] - cp[lo]) / (hi - lo))]
    text = '\n'.join(lines) + '\n'
    c.write_section('fleet', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
