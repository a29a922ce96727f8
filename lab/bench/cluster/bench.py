#!/usr/bin/env python3
"""Benchmark: Kubernetes API requests of the cluster layer on first converge and on re-converge.

One Kubernetes API emulator (lab/kube) seeded with a control-plane node, eight GPU nodes, Volcano's scheduler
ConfigMap and kubeadm's ClusterConfiguration. One ansible-playbook run applies, for every sharing strategy, the role
gpu_sharing_stack twice (first converge, re-converge) on its own node, then kube_scheduler_extender (kubeadm adapter,
files in a temporary directory) and gpu_node_labels (eight nodes) twice each. Between steps a task reads the
emulator's request-log sequence number, so each step's reads and writes are counted exactly from
/_emulator/requests (`write` = a non-dry-run POST/PUT/PATCH/DELETE; `mutated` = it changed stored state).
The counts are deterministic: one repetition. Wall seconds per step come from the same run (one sample).

  .venv/bin/python lab/bench/cluster/bench.py [--smoke]     # --smoke: time-slicing and node labels only
Env: GPUOPS_BENCH_PREFIX (default gpuops-bench) prefixes the emulator name.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as c  # noqa: E402

ROOT = c.ROOT
PREFIX = os.environ.get('GPUOPS_BENCH_PREFIX', 'gpuops-bench')
FIXTURES = os.path.join(ROOT, 'tests', 'unit', 'plugins', 'module_utils', 'fixtures', 'scheduler')

T4 = c.T4_PROBE_FACTS
A100 = {'gpu_count': 8, 'gpus': [{'index': i, 'name': 'A100-SXM4-80GB', 'memory_total_mib': 81920} for i in range(8)],
        'labels': {'nvidia.com/gpu.present': 'true', 'nvidia.com/gpu.count': '8',
                   'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB', 'nvidia.com/gpu.memory': '81920',
                   'nvidia.com/mig.capable': 'true'},
        'sharing': {'exclusive': {'allowed': True}, 'time-slicing': {'allowed': True}, 'gpushare': {'allowed': True},
                    'mps': {'allowed': True, 'max_clients': 48},
                    'mig': {'allowed': True, 'gpus': list(range(8)),
                            'profiles': dict((str(i), ['1g.10gb', '2g.20gb', '3g.40gb', '7g.80gb']) for i in range(8))}}}
# strategy -> (node, facts, extra role vars); the settings of lab/tests/integration/test_gpu_sharing_stack.py
CASES = [
    ('exclusive', 'gpu-1', T4, {}),
    ('time-slicing', 'gpu-2', T4, {'gpu_sharing_stack_time_slicing': {'replicas': 4, 'rename_by_default': False}}),
    ('mps', 'gpu-3', T4, {'gpu_sharing_stack_mps': {'replicas': 8}}),
    ('mig', 'gpu-4', A100, {'gpu_sharing_stack_mig': {'strategy': 'single', 'devices': {'1g.10gb': 7}}}),
    # gpushare refuses upstream's known-bad images: these stand for images built from the fixing commits
    ('gpushare', 'gpu-5', A100, {'gpu_sharing_stack_gpushare': {
        'extender_image': 'registry.example.com/acs/k8s-gpushare-schd-extender:86f6025',
        'device_plugin_image': 'registry.example.com/acs/k8s-gpushare-plugin:45fb8b8'}}),
    ('volcano', 'gpu-6', T4, {'gpu_sharing_stack_volcano': {'version': '1.15'}}),
    ('hami', 'gpu-7', T4, {'gpu_sharing_stack_hami': {'device_split_count': 4, 'device_memory_scaling': 1.5}}),
    # gpu-manager is refused (it cannot work from what the collection renders): no step
]
VOLCANO_CONF = {'actions': 'enqueue, allocate, backfill',
                'tiers': [{'plugins': [{'name': 'priority'}, {'name': 'gang'}]},
                          {'plugins': [{'name': 'drf'}, {'name': 'predicates'}]}]}


def node(name, labels=None):
    return {'apiVersion': 'v1', 'kind': 'Node',
            'metadata': {'name': name, 'labels': dict({'kubernetes.io/hostname': name}, **(labels or {}))},
            'status': {'capacity': {'cpu': '32'}, 'allocatable': {'cpu': '32'}}}


def seed():
    cm = yaml.safe_load(open(os.path.join(FIXTURES, 'kubeadm-config-configmap.yaml')))
    return [node('cp-1', {'node-role.kubernetes.io/control-plane': ''})] + [node('gpu-%d' % i) for i in range(1, 9)] + [
        {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'volcano-system'}},
        {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'volcano-scheduler-configmap',
                                                               'namespace': 'volcano-system'},
         'data': {'volcano-scheduler.conf': yaml.safe_dump(VOLCANO_CONF)}}, cm]


def mark(name):
    return [{'name': 'mark %s' % name, 'ansible.builtin.uri': {
        'url': '{{ bench_emu_url }}/_emulator/requests?since=999999999', 'return_content': True},
        'register': 'bench_m', 'check_mode': False},
        {'name': 'record %s' % name, 'ansible.builtin.set_fact': {'bench_seq': '{{ bench_m.json.seq }}'}}]


def stack_task(strategy, node_name, facts, extra):
    v = {'gpu_sharing_stack_strategy': strategy, 'gpu_sharing_stack_pool': 'pool-' + strategy,
         'gpu_sharing_stack_nodes': [node_name], 'gpu_sharing_stack_facts': {node_name: facts},
         'gpu_sharing_stack_registry': 'registry.example.com/mirror'}
    v.update(extra)
    return {'name': 'stack %s' % strategy, 'ansible.builtin.include_role': {'name': 'gpuops.k8s_gpu.gpu_sharing_stack'},
            'vars': v}


def build(tmp, smoke):
    steps, tasks = [], []
    cases = CASES[1:2] if smoke else CASES
    for strategy, node_name, facts, extra in cases:
        steps.append('gpu_sharing_stack ' + strategy)
        for phase in ('first', 'rerun'):
            tasks += mark('%s|%s' % (steps[-1], phase)) + [stack_task(strategy, node_name, facts, extra)]
    manifests = os.path.join(tmp, 'manifests')
    os.makedirs(manifests)
    shutil.copy(os.path.join(FIXTURES, 'kubeadm-kube-scheduler.yaml'), os.path.join(manifests, 'kube-scheduler.yaml'))
    if not smoke:
        steps.append('kube_scheduler_extender (kubeadm)')
    for phase in ('first', 'rerun') if not smoke else ():
        tasks += mark('%s|%s' % (steps[-1], phase)) + [{
            'name': 'scheduler extender', 'ansible.builtin.include_role': {'name': 'gpuops.k8s_gpu.kube_scheduler_extender'},
            'vars': {'kube_scheduler_extender_distribution': 'kubeadm',
                     'kube_scheduler_extender_config_path': os.path.join(tmp, 'gpuops', 'scheduler-config.yaml'),
                     'kube_scheduler_extender_kubeadm_manifest': os.path.join(manifests, 'kube-scheduler.yaml'),
                     'kube_scheduler_extender_kubeadm_tmp_dir': os.path.join(tmp, 'stage'),
                     'kube_scheduler_extender_api_kubeconfig': '{{ bench_kubeconfig }}'}}]
    steps.append('gpu_node_labels (8 nodes)')
    for phase in ('first', 'rerun'):
        tasks += mark('%s|%s' % (steps[-1], phase)) + [{
            'name': 'node labels', 'ansible.builtin.include_role': {'name': 'gpuops.k8s_gpu.gpu_node_labels'},
            'vars': {'gpu_node_labels_extra': {'gpuops.io/managed': 'true'},
                     # the one writer of Node labels also writes the labels the stacks above published
                     'gpu_node_labels_stacks': '{{ gpu_sharing_stack_rendered | default({}) }}'}}]
    tasks += mark('end|end')
    play = [{'name': 'Cluster layer benchmark', 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]
    inv = {'all': {'hosts': {'localhost': {'ansible_connection': 'local',
                                           'ansible_python_interpreter': os.path.join(c.VENV_BIN, 'python')}},
                   'children': {'gpu_nodes': {'hosts': dict(
                       (n, {'gpu_probe_facts': f}) for s, n, f, e in CASES)}}}}
    return steps, play, inv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--smoke', action='store_true')
    a = ap.parse_args()
    name = '%s-cluster-%d' % (PREFIX, os.getpid())
    with tempfile.TemporaryDirectory(prefix='bench-cluster-') as tmp:
        with c.kube_emulator(name, seed(), tmp) as (kubeconfig, url):
            steps, play, inv = build(tmp, a.smoke)
            for fn, doc in (('play.json', play), ('inv.json', inv)):
                with open(os.path.join(tmp, fn), 'w') as f:
                    json.dump(doc, f)
            wall, doc, p = c.run_json_playbook(['-i', os.path.join(tmp, 'inv.json'), os.path.join(tmp, 'play.json'),
                                                '-e', 'bench_emu_url=%s bench_kubeconfig=%s' % (url, kubeconfig)],
                                               env={'K8S_AUTH_KUBECONFIG': kubeconfig, 'ANSIBLE_PIPELINING': '1'}, cwd=tmp)
            if p.returncode != 0 or doc is None:
                raise SystemExit('cluster benchmark play failed:\n%s\n%s' % ('\n'.join(c.failures(doc)), p.stderr[-3000:]))
            entries = c.emulator_requests(url)
    # marks: (label, seq, start time of the mark task); changed tasks between marks
    marks, changed, cur = [], {}, None
    for t in doc['plays'][0]['tasks']:
        r = t['hosts']['localhost']
        if t['task']['name'].startswith('mark '):
            cur = t['task']['name'][5:]
            marks.append((cur, r['json']['seq'], c.parse_ts(t['task']['duration']['start'])))
            changed[cur] = 0
        elif cur and r.get('changed') and not r.get('skipped'):
            changed[cur] += 1
    res = {}
    for (label, lo, t0), (dummy, hi, t1) in zip(marks, marks[1:]):
        es = [e for e in entries if lo < e['seq'] <= hi]
        res[label] = {'reads': sum(1 for e in es if e['class'] == 'read'), 'writes': sum(1 for e in es if e['write']),
                      'mutated': sum(1 for e in es if e.get('mutated')), 'wall': t1 - t0, 'changed': changed[label]}
    rows = []
    for s in steps:
        f, r = res[s + '|first'], res[s + '|rerun']
        rows.append([s, f['reads'], f['writes'], f['mutated'], '%.1f' % f['wall'], r['reads'], r['writes'],
                     r['mutated'], '%.1f' % r['wall'], r['changed']])
    lines = ['## Cluster layer: Kubernetes API requests per strategy', '',
             'Kubernetes API emulator (lab/kube, v1.29.4), requests counted from its request log between steps of one '
             'ansible-playbook run (kubernetes.core through the collection\'s `k8s_converge`). Counts are deterministic '
             '(same input, same requests), so one repetition; the wall seconds are one sample on a loaded machine. '
             'reads = GET/LIST (discovery included), writes = non-dry-run POST/PUT/PATCH/DELETE, mutated = writes that '
             'changed stored state. %s' % ('Smoke run: time-slicing and node labels only.' if a.smoke else ''), '']
    lines += c.table(['step', 'first: reads', 'writes', 'mutated', 's', 're-converge: reads', 'writes', 'mutated', 's',
                      'changed tasks on re-converge'], rows)
    total_re_writes = sum(res[s + '|rerun']['writes'] for s in steps)
    lines += ['', 'Write requests on re-converge over every step: %d (target 0). The first step of the run also pays '
              'for the Kubernetes client\'s API discovery (%d extra reads here, once per ansible-playbook run); after that '
              'a step reads each object it manages once (GET) and, on a re-converge, writes nothing.' % (
                  total_re_writes, res[steps[0] + '|first']['reads'] - res[steps[0] + '|rerun']['reads'])]
    text = '\n'.join(lines) + '\n'
    c.write_section('cluster', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
