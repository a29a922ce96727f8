#!/usr/bin/env python3
"""Where a whole `make test` spends the machine's CPU, process by process: a BSD process accounting file split.

    apt-get install acct            # Debian's accton and dump-acct (a measuring tool, not part of `make test`)
    touch /tmp/pacct && accton /tmp/pacct && make test; accton off
    lab/bin/cpu-split.py /tmp/pacct [--top 25] [--json OUT.json]

The kernel writes one record for every process that ends (the containers' processes too: one kernel), with its own
user + system CPU, its pid, parent pid and start time, so unlike lab/bin/cpu-sample.py nothing short-lived is missed;
what has not ended when accounting stops (daemons that outlive the run, the kernel's threads) is not in it. Parents are
found by pid and start time (pids are reused: pid_max is 32768 here), and each process is put in one class: the
ansible-core processes (main process or forked task worker), module runs on the controller (the venv's python under
ansible) or in a container (under containerd-shim), ansible-test, molecule, ansible-lint, the control planes' and
real nodes' programs, and the rest by command name. docs/lab.md ("Session 28") has a whole run's table.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time

HZ = 100.0   # dump-acct prints CPU and elapsed times in clock ticks (AHZ)
ANSIBLE = ('ansible-playboo', 'ansible')   # the kernel's 15-character command names
TOOLS = ('ansible-test', 'molecule', 'ansible-lint')
PLANE = ('kube-apiserver', 'etcd', 'kube-controller', 'kube-scheduler', 'kwok')
NODE = ('kubelet', 'containerd', 'containerd-shim', 'runc', 'docker')


def parse(text):
    """dump-acct's lines as records: comm, cpu (s), elapsed (s), pid, ppid, start (epoch s), index."""
    recs = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split('|')]
        if len(f) < 15 or f[1] != 'v3':
            continue
        start = time.mktime(time.strptime(f[14], '%a %b %d %H:%M:%S %Y'))
        recs.append({'comm': f[0], 'cpu': (float(f[2]) + float(f[3])) / HZ, 'elapsed': float(f[4]) / HZ,
                     'pid': int(f[9]), 'ppid': int(f[10]), 'start': start, 'i': len(recs), 'parent': None})
    return recs


def link(recs):
    """Set each record's parent: the latest process of its parent pid that had started (start times are whole
    seconds) and not yet ended when it started."""
    by_pid = collections.defaultdict(list)
    for r in recs:
        by_pid[r['pid']].append(r)
    for r in recs:
        best = None
        for c in by_pid.get(r['ppid'], ()):
            if c is not r and c['start'] <= r['start'] + 1 and c['start'] + c['elapsed'] >= r['start'] - 1:
                if best is None or c['start'] > best['start']:
                    best = c
        r['parent'] = best
    return recs


def ancestors(r):
    out, seen = [], set()
    p = r['parent']
    while p is not None and p['i'] not in seen:
        seen.add(p['i'])
        out.append(p['comm'])
        p = p['parent']
    return out


def kind(r):
    """The class of one record (see the module's text)."""
    comm, up = r['comm'], ancestors(r)
    if comm in ANSIBLE:
        worker = bool(up) and up[0] == comm
        return '%s %s' % ('ansible-playbook' if comm == ANSIBLE[0] else 'ansible', 'worker' if worker else 'main')
    if 'containerd-shim' in up:
        return 'module run in a container' if comm.startswith('python') else 'other process in a container'
    for tool in TOOLS:
        if tool in up or comm == tool:
            return tool
    if comm.startswith('python') and any(a in ANSIBLE for a in up):
        return 'module run on the controller'
    if comm in PLANE:
        return 'control plane: ' + comm
    if comm in NODE:
        return 'node and docker: ' + comm
    return 'other: ' + comm


def split(recs):
    """{class: [processes, CPU-s]}, largest first, and the total."""
    out = collections.defaultdict(lambda: [0, 0.0])
    for r in recs:
        k = out[kind(r)]
        k[0] += 1
        k[1] += r['cpu']
    rows = sorted(([k, n, round(c, 1)] for k, (n, c) in out.items()), key=lambda x: -x[2])
    return rows, round(sum(r['cpu'] for r in recs), 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('pacct')
    ap.add_argument('--top', type=int, default=25)
    ap.add_argument('--json')
    a = ap.parse_args(argv)
    text = subprocess.run(['dump-acct', a.pacct], check=True, capture_output=True, text=True).stdout
    recs = link(parse(text))
    rows, total = split(recs)
    print('%d processes, %.1f CPU-s' % (len(recs), total))
    for k, n, c in rows[:a.top]:
        print('%9.1f %8d  %s' % (c, n, k))
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'processes': len(recs), 'cpu_s': total, 'classes': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
