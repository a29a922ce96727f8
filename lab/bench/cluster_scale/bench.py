#!/usr/bin/env python3
"""Benchmark: controller CPU of playbooks/cluster.yml per GPU node, 10 to 1,000 nodes.

For each size N: a Kubernetes API emulator (lab/kube) seeded with a control-plane Node and N GPU Nodes; an inventory
whose group gpu_nodes has two pools (pool_ts: time-slicing, first half; pool_excl: exclusive, second half), every
node with its probe facts already given (gpu_probe_facts of a Tesla T4, as the NVML simulator's t4 inventory
reports them), so no node is probed. Two regimes:
  steady state: the Nodes are seeded with the labels (and the record annotation) role gpu_node_labels would have set
    (worked out with the collection's own planners, plugins/module_utils/_cluster/pool_plan.py and label_plan.py), as
    after a converge.
    1. cluster.yml --check: the measured run (controller CPU = user + sys of ansible-playbook and all its children,
       RUSAGE_CHILDREN around the run; API requests from the emulator's request log; label patches the run would send);
    2. cluster.yml for real, then 3. for real again: the second run must write nothing (0 non-dry-run writes) and
       report changed=0 on every host (the re-converge check).
  first converge (sizes up to --fresh-max): bare Nodes; cluster.yml --check. Role gpu_node_labels then patches every
    node (one merge patch per changed node, all sent by one gpu_node_labels_apply task).
CPU per node = total CPU / N; the marginal CPU per node is the slope between consecutive sizes, which takes out the
fixed cost of starting ansible-playbook and deploying the two stacks. One sample per size (CPU seconds, unlike wall
seconds, barely grow with the machine's load).

  .venv/bin/python lab/bench/cluster_scale/bench.py [--smoke] [--sizes 10,100,1000] [--fresh-max 100]
Env: GPUOPS_BENCH_PREFIX (default gpuops-bench) prefixes the emulator name.
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as c  # noqa: E402

ROOT = c.ROOT
PREFIX = os.environ.get('GPUOPS_BENCH_PREFIX', 'gpuops-bench')
# the facts gpu_info returns for the NVML simulator's t4 inventory (one Tesla T4), reduced to what the cluster layer reads
T4 = c.T4_PROBE_FACTS


def node_name(i):
    return 'gpu-%04d' % i


def converged_labels(n):
    """node name -> (labels, annotations) role gpu_node_labels sets on a converged cluster (the stacks' labels
    included), from the collection's own planner and renderer (the lab may import the collection; never the reverse)."""
    sys.path.insert(0, c.collections_path())
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import label_plan, pool_plan
    inv = inventory(n, '')['all']['children']['gpu_nodes']['children']
    groups, hostvars = {'gpu_nodes': []}, {}
    for g, body in inv.items():
        groups[g] = list(body['hosts'])
        groups['gpu_nodes'] += list(body['hosts'])
        for h, hv in body['hosts'].items():
            hostvars[h] = dict(hv, group_names=[g, 'gpu_nodes'], **body['vars'])
    pools = pool_plan.sharing_pools(groups, hostvars, settings=['gpu_sharing_stack_time_slicing'])
    # the labels each pool's stack needs (gpu_node_labels writes them too: gpu_node_labels_stacks)
    stacks = dict((p['name'], render.render({
        'strategy': p['strategy'], 'pool': p['name'], 'nodes': p['nodes'], 'facts': p['facts'],
        'settings': {'time_slicing': p['settings'].get('gpu_sharing_stack_time_slicing') or {}}}))
        for p in pools['pools'])
    static = label_plan.label_static_plan(groups, hostvars, pools=pools['label_pools'], stacks=stacks)
    live = [{'metadata': {'name': node_name(i), 'labels': {'kubernetes.io/hostname': node_name(i)}}}
            for i in range(n)]
    plan = label_plan.label_live_plan(static, live)
    if pools['errors'] or static['errors'] or plan['errors']:
        raise SystemExit('the benchmark inventory does not plan cleanly: %s' % (pools['errors'] + static['errors']
                                                                                   + plan['errors']))
    return dict((x['node'], (x['patch']['metadata'].get('labels') or {}, x['patch']['metadata'].get('annotations') or {}))
                for x in plan['nodes'])


def seed(n, converged=False):
    done = converged_labels(n) if converged else {}
    nodes = [{'apiVersion': 'v1', 'kind': 'Node',
              'metadata': {'name': 'cp-1', 'labels': {'kubernetes.io/hostname': 'cp-1',
                                                      'node-role.kubernetes.io/control-plane': ''}},
              'status': {'capacity': {'cpu': '32'}, 'allocatable': {'cpu': '32'}}}]
    for i in range(n):
        labels, annotations = done.get(node_name(i), ({}, {}))
        nodes.append({'apiVersion': 'v1', 'kind': 'Node',
                      'metadata': {'name': node_name(i), 'labels': dict({'kubernetes.io/hostname': node_name(i)},
                                                                          **labels),
                                   'annotations': annotations},
                      'status': {'capacity': {'cpu': '32'}, 'allocatable': {'cpu': '32'}}})
    return nodes


def inventory(n, kubeconfig):
    half = n // 2
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': os.path.join(c.VENV_BIN, 'python')}
    ts = dict((node_name(i), {'gpu_probe_facts': T4}) for i in range(half))
    ex = dict((node_name(i), {'gpu_probe_facts': T4}) for i in range(half, n))
    return {'all': {'hosts': {'localhost': local},
                    'vars': dict(local, gpuops_kubeconfig=kubeconfig, gpuops_become=False,
                                 gpuops_scheduler_extender=False),
                    'children': {'gpu_nodes': {'children': {
                        'pool_ts': {'hosts': ts, 'vars': {
                            'gpuops_sharing_strategy': 'time-slicing',
                            'gpu_sharing_stack_time_slicing': {'replicas': 4, 'rename_by_default': False}}},
                        'pool_excl': {'hosts': ex, 'vars': {'gpuops_sharing_strategy': 'exclusive'}}}},
                        'kube_control_plane': {'hosts': {}}}}}


def run_cluster(inv, check):
    """cluster.yml once. Returns (controller CPU seconds, wall seconds, json doc)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    args = ['-i', inv, os.path.join(ROOT, 'playbooks', 'cluster.yml')] + (['--check'] if check else [])
    wall, doc, p = c.run_json_playbook(args, env={'ANSIBLE_PIPELINING': '1'}, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 or doc is None:
        raise SystemExit('cluster.yml failed (%s):\n%s\n%s' % ('check' if check else 'apply',
                                                               '\n'.join(c.failures(doc)), p.stderr[-3000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, doc


def label_patches(doc):
    """Items of role gpu_node_labels' patch loop in a json callback document (nodes it patched or would patch)."""
    n = 0
    for play in doc.get('plays', []):
        for t in play['tasks']:
            if 'Patch the labels of the nodes that differ' in t['task']['name']:
                for r in t['hosts'].values():
                    n += len(r.get('results') or [])
    return n


def measure(n, converged, reconverge, tmp):
    name = '%s-cscale-%d-%d-%s' % (PREFIX, os.getpid(), n, 'steady' if converged else 'fresh')
    d = os.path.join(tmp, '%d-%s' % (n, converged))
    os.makedirs(d)
    with c.kube_emulator(name, seed(n, converged), d, timeout=300) as (kubeconfig, url):
        inv = os.path.join(d, 'inv.json')
        with open(inv, 'w') as f:
            json.dump(inventory(n, kubeconfig), f)
        seq = c.emulator_seq(url)
        cpu, wall, doc = run_cluster(inv, check=True)
        es = c.emulator_requests(url, seq)
        res = {'n': n, 'cpu': cpu, 'wall': wall, 'reads': sum(1 for e in es if e['class'] == 'read'),
               'writes': sum(1 for e in es if e['write']), 'requests': len(es), 'patches': label_patches(doc),
               'changed': sum(s['changed'] for s in doc['stats'].values())}
        if reconverge:
            run_cluster(inv, check=False)
            seq = c.emulator_seq(url)
            dummy, dummy2, doc = run_cluster(inv, check=False)
            es = c.emulator_requests(url, seq)
            res['re_writes'] = sum(1 for e in es if e['write'])
            res['re_changed'] = sum(s['changed'] for s in doc['stats'].values())
        return res


def rows_of(results):
    rows, prev = [], None
    for r in results:
        slope = '%.0f' % ((r['cpu'] - prev['cpu']) / (r['n'] - prev['n']) * 1000) if prev else '-'
        re = ('%d / %d' % (r['re_writes'], r['re_changed'])) if 're_writes' in r else 'not run'
        rows.append([r['n'], '%.1f' % r['cpu'], '%.0f' % (r['cpu'] / r['n'] * 1000), slope, '%.1f' % r['wall'],
                     r['requests'], r['writes'], r['patches'], r['changed'], re])
        prev = r
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--smoke', action='store_true',
                    help='10 nodes only, no re-converge check (make test: the smoke run of cluster_real applies '
                         'cluster.yml and applies it again on the real API server)')
    ap.add_argument('--sizes', default='10,100,1000')
    ap.add_argument('--fresh-max', type=int, default=1000, help='largest size measured in the first-converge regime')
    ap.add_argument('--no-reconverge', action='store_true', help='skip the re-converge check (two real runs)')
    a = ap.parse_args()
    sizes = [10] if a.smoke else [int(s) for s in a.sizes.split(',')]
    steady, fresh = [], []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix='bench-cscale-') as tmp:
        for n in sizes:
            # the smoke run (make test) leaves out the re-converge check's two real runs (half of this script's CPU
            # there): the same apply-then-apply-again regime runs in cluster_real's smoke run, on the real API server
            steady.append(measure(n, True, not (a.no_reconverge or a.smoke), tmp))
            sys.stderr.write('cluster_scale: %d nodes, steady state: %.1f s CPU\n' % (n, steady[-1]['cpu']))
        for n in sizes:
            if n <= a.fresh_max:
                fresh.append(measure(n, False, False, tmp))
                sys.stderr.write('cluster_scale: %d nodes, first converge: %.1f s CPU\n' % (n, fresh[-1]['cpu']))
    head = ['nodes', 'CPU s', 'CPU ms per node', 'marginal ms per node', 'wall s', 'API requests',
            'writes', 'label patches', 'changed (check)', 're-converge writes / changed']
    lines = ['## Cluster layer at scale: controller CPU per GPU node', '',
             '`playbooks/cluster.yml --check` with the probe facts given, against the Kubernetes API emulator (lab/kube) '
             'seeded with N GPU Nodes in two pools (time-slicing, exclusive). CPU = user + sys of ansible-playbook and '
             'its children; marginal = CPU slope from the previous size (the fixed cost of ansible-playbook and the two '
             'stacks taken out). API requests from the emulator\'s request log (check mode: dry-run writes are not '
             'writes). One sample per size. %s' % ('Smoke run: 10 nodes, no re-converge.' if a.smoke else ''), '',
             '**Steady state** (Nodes already carry the labels gpu_node_labels sets; re-converge: cluster.yml applied, '
             'then applied again, writes / changed tasks of the second run, target 0 / 0):', '']
    lines += c.table(head, rows_of(steady))
    if fresh:
        lines += ['', '**First converge** (bare Nodes: gpu_node_labels patches every node, one merge patch per node, all '
                  'sent by one gpu_node_labels_apply task):', '']
        lines += c.table(head, rows_of(fresh))
    lines += ['', 'Run time of this benchmark: %.0f s.' % (time.monotonic() - t0)]
    text = '\n'.join(lines) + '\n'
    c.write_section('cluster_scale', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
