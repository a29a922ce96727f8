#!/usr/bin/env python3
"""Where a `make test` spends the machine's CPU outside the steps' own process trees: sample every process beside it.

    lab/bin/cpu-sample.py OUT.json [--interval S] [--until-pid PID]

Every ``--interval`` seconds (default 2) it reads ``/proc/<pid>/stat`` of every process (utime + stime, the command
name, the parent) and ``/proc/<pid>/cgroup`` once per process (a docker container's processes carry ``/docker/<id>``),
keeping the last value of each process (pid + start time, so a reused pid is another process). It stops on SIGINT or
SIGTERM, or when ``--until-pid`` has exited, and writes OUT.json: the machine's busy CPU-s over the window (from
/proc/stat), the CPU-s the sampled processes used within it per command name, split into host processes and the
processes of docker containers, the docker cgroup's own counter (cpuacct.usage: every container, removed ones
included, as cgroup v1 charges its ancestors) and the CPU of the processes it saw start and end between two samples
(none: those reach their parents' children time, so the tree of the step that waited for them), and the most
inotify instances open at once (every fifth sample), by command. What a process used
before the sampler started is left out. Reading /proc costs about 1-2 % of one core at a 2 s interval with 500
processes; it is a measuring tool, not part of `make test`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import time

TICK = os.sysconf('SC_CLK_TCK')
DOCKER_CPUACCT = '/sys/fs/cgroup/cpuacct/docker/cpuacct.usage'


def machine_busy():
    """Busy CPU-s of the whole machine since boot (user + nice + system + irq + softirq + steal of /proc/stat)."""
    with open('/proc/stat') as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


def docker_usage():
    try:
        with open(DOCKER_CPUACCT) as f:
            return int(f.read()) / 1e9
    except OSError:
        return None


def read_proc(pid):
    """(start ticks, comm, cpu-s) of one process, or None when it is gone."""
    try:
        with open('/proc/%s/stat' % pid) as f:
            raw = f.read()
    except OSError:
        return None
    head, _, tail = raw.rpartition(')')
    comm = head.partition('(')[2]
    rest = tail.split()
    # fields after the comm: state(0) ppid(1) ... utime(11) stime(12) ... starttime(19)
    return int(rest[19]), comm, (int(rest[11]) + int(rest[12])) / TICK


def container_of(pid):
    try:
        with open('/proc/%s/cgroup' % pid) as f:
            for line in f:
                path = line.rstrip('\n').split(':', 2)[2]
                if '/docker/' in path:
                    return path.split('/docker/', 1)[1][:12]
    except OSError:
        return None
    return ''


def inotify_instances():
    """Open inotify instances per command name (the kernel's fs.inotify.max_user_instances counts them per user: a
    containerd or kubelet that cannot get one fails with "too many open files")."""
    count = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            n = sum(1 for fd in os.listdir('/proc/%s/fd' % pid)
                    if os.readlink('/proc/%s/fd/%s' % (pid, fd)) == 'anon_inode:inotify')
            if n:
                with open('/proc/%s/comm' % pid) as f:
                    comm = f.read().strip()
                count[comm] = count.get(comm, 0) + n
        except OSError:
            continue
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('out')
    ap.add_argument('--interval', type=float, default=2.0)
    ap.add_argument('--until-pid', type=int)
    args = ap.parse_args()
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    t0, busy0, docker0 = time.time(), machine_busy(), docker_usage()
    first = {}   # (pid, start) -> cpu-s at the first sample (what it used before the window)
    last = {}    # (pid, start) -> (comm, container, cpu-s)
    initial = True
    peak, peak_at, rounds = {}, None, 0
    while not stop:
        if rounds % 5 == 0:
            now = inotify_instances()
            if sum(now.values()) > sum(peak.values()):
                peak, peak_at = now, round(time.time() - t0, 1)
        rounds += 1
        for pid in os.listdir('/proc'):
            if not pid.isdigit():
                continue
            got = read_proc(pid)
            if got is None:
                continue
            start, comm, cpu = got
            key = (int(pid), start)
            if key not in last:
                first[key] = cpu if initial else 0.0
                last[key] = (comm, container_of(pid), cpu)
            else:
                last[key] = (last[key][0], last[key][1], cpu)
        initial = False
        if args.until_pid and not os.path.exists('/proc/%d' % args.until_pid):
            break
        time.sleep(args.interval)
    busy = machine_busy() - busy0
    docker = docker_usage()
    by = {'host': {}, 'containers': {}}
    for key, (comm, container, cpu) in last.items():
        used = cpu - first[key]
        if used <= 0:
            continue
        side = by['containers' if container else 'host']
        side[comm] = side.get(comm, 0.0) + used
    report = {
        'wall_s': round(time.time() - t0, 1),
        'machine_busy_cpu_s': round(busy, 1),
        'docker_cgroup_cpu_s': None if docker is None or docker0 is None else round(docker - docker0, 1),
        'sampled_cpu_s': {side: round(sum(v.values()), 1) for side, v in by.items()},
        'by_command': {side: dict(sorted(((k, round(v, 1)) for k, v in d.items()), key=lambda kv: -kv[1]))
                       for side, d in by.items()},
        'inotify_peak': {'instances': sum(peak.values()), 'at_s': peak_at,
                         'limit': int(open('/proc/sys/fs/inotify/max_user_instances').read()),
                         'by_command': dict(sorted(peak.items(), key=lambda kv: -kv[1]))},
        'note': 'processes that started and ended between two samples are not here: their CPU is in the parent '
                'that waited for them (a step\'s tree); sampled per command name, the first sample\'s CPU subtracted',
    }
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
