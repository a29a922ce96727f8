#!/usr/bin/env python3
"""Sum what lab/profile/gpuops_task_cpu.py wrote during a make test (GPUOPS_TASK_CPU_DIR=DIR make test).

    lab/bin/task-cpu-report.py DIR [--top N] [--json OUT]

Prints the ansible-playbook runs' controller CPU (the process and the children it reaped: local modules included,
modules inside containers not) in all, their start-up share, and the heaviest test files (or molecule scenarios),
playbooks and tasks. A measuring tool, not part of make test."""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os


def load(directory):
    runs = []
    for path in sorted(glob.glob(os.path.join(directory, '*.json'))):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def where(run):
    """The test file, molecule scenario or command line that ran this playbook."""
    if run.get('test'):
        return run['test'].split('::', 1)[0]
    if run.get('scenario'):
        return 'molecule ' + run['scenario']
    return 'other: ' + os.path.basename(run.get('playbook') or '?')


def summarize(runs, top=25):
    by_where, by_playbook, by_task = collections.Counter(), collections.Counter(), collections.Counter()
    runs_where, runs_playbook, task_count = collections.Counter(), collections.Counter(), collections.Counter()
    startup = 0.0
    for run in runs:
        w, pb = where(run), os.path.basename(run.get('playbook') or '?')
        by_where[w] += run['total']
        runs_where[w] += 1
        by_playbook[pb] += run['total']
        runs_playbook[pb] += 1
        for row in run['rows']:
            if row['task'] == '<startup>':
                startup += row['cpu']
            by_task[row['task']] += row['cpu']
            task_count[row['task']] += 1

    def table(counter, counts):
        return [{'name': k, 'cpu_s': round(v, 1), 'n': counts[k]} for k, v in counter.most_common(top)]
    return {'runs': len(runs), 'cpu_s': round(sum(r['total'] for r in runs), 1), 'startup_cpu_s': round(startup, 1),
            'task_results': sum(task_count.values()), 'by_where': table(by_where, runs_where),
            'by_playbook': table(by_playbook, runs_playbook), 'by_task': table(by_task, task_count)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('directory')
    ap.add_argument('--top', type=int, default=25)
    ap.add_argument('--json')
    args = ap.parse_args()
    s = summarize(load(args.directory), args.top)
    print('%d ansible-playbook runs, %.1f CPU-s (start-up %.1f), %d tasks started'
          % (s['runs'], s['cpu_s'], s['startup_cpu_s'], s['task_results']))
    for title, key in (('by test file / scenario', 'by_where'), ('by playbook', 'by_playbook'), ('by task', 'by_task')):
        print('\n%s (CPU-s, runs)' % title)
        for row in s[key]:
            print('%8.1f %5d  %s' % (row['cpu_s'], row['n'], row['name'][:150]))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
