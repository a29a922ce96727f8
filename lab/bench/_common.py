"""Helpers shared by the benchmark scripts under lab/bench/ (lab only; not a benchmark itself).

run.py skips files whose name starts with an underscore.
"""
import contextlib
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')


def collections_path():
    return subprocess.run(['bash', os.path.join(ROOT, 'lab/bin/collections-path.sh')], check=True,
                          capture_output=True, text=True).stdout.strip()


# gpu_probe_facts of one Tesla T4 as gpu_info returns them for the NVML simulator's t4 inventory, reduced to what
# the cluster layer reads (the cluster benchmarks give them so that no node is probed)
T4_PROBE_FACTS = {
    'gpu_count': 1, 'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360, 'compute_capability': '7.5'}],
    'labels': {'nvidia.com/gpu.present': 'true', 'nvidia.com/gpu.count': '1', 'nvidia.com/gpu.product': 'Tesla-T4',
               'nvidia.com/gpu.memory': '15360', 'nvidia.com/mig.capable': 'false'},
    'sharing': {'exclusive': {'allowed': True}, 'time-slicing': {'allowed': True}, 'gpushare': {'allowed': True},
                'mps': {'allowed': True, 'max_clients': 48},
                'mig': {'allowed': False, 'gpus': [], 'reason': 'GPU(s) 0 are not MIG capable'}}}


@contextlib.contextmanager
def kube_emulator(name, seed_docs, workdir, timeout=120):
    """The lab's Kubernetes API emulator (lab/kube) named ``name``, seeded with ``seed_docs`` (written to
    ``workdir``/seed.yaml). Yields (kubeconfig, base URL); stops it and removes its state afterwards."""
    seed = os.path.join(workdir, 'seed.yaml')
    with open(seed, 'w') as f:
        yaml.safe_dump_all(seed_docs, f)
    out = subprocess.run([os.path.join(ROOT, 'lab/kube/start.sh'), '--name', name, '--seed', seed],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit('kube start.sh failed:\n%s\n%s' % (out.stdout, out.stderr))
    kubeconfig = out.stdout.strip().splitlines()[-1]
    state = os.path.dirname(kubeconfig)
    try:
        with open(os.path.join(state, 'port')) as f:
            url = 'http://127.0.0.1:%s' % f.read().strip()
        yield kubeconfig, url
    finally:
        subprocess.run([os.path.join(ROOT, 'lab/kube/stop.sh'), '--name', name], capture_output=True, timeout=60)
        shutil.rmtree(state, ignore_errors=True)


def emulator_seq(url):
    """The emulator's request-log sequence number now."""
    with urllib.request.urlopen(url + '/_emulator/requests?since=999999999', timeout=30) as r:
        return json.loads(r.read())['seq']


def emulator_requests(url, since=None):
    """The emulator's request log (after sequence number ``since``)."""
    query = '' if since is None else '?since=%d' % since
    with urllib.request.urlopen(url + '/_emulator/requests' + query, timeout=60) as r:
        return json.loads(r.read())['items']


def quartiles(values):
    v = sorted(values)
    if len(v) < 4:
        return v[0], v[-1]
    q = statistics.quantiles(v, n=4, method='inclusive')
    return q[0], q[2]


class Stat(object):
    """median, min, max, IQR and the number of samples of a list of numbers."""

    def __init__(self, values):
        self.values = list(values)
        self.n = len(self.values)
        self.median = statistics.median(self.values) if self.values else float('nan')
        self.min = min(self.values) if self.values else float('nan')
        self.max = max(self.values) if self.values else float('nan')

    def fmt(self, spec='%.1f', unit=''):
        """'median (min-max)' or just the value when there is one sample."""
        if self.n == 1:
            return (spec % self.median) + unit
        return '%s%s (%s-%s)' % (spec % self.median, unit, spec % self.min, spec % self.max)


def parse_ts(s):
    """json callback timestamps: 2026-11-23T04:35:01.123456Z -> epoch seconds."""
    s = s.rstrip('Z')
    return datetime.datetime.strptime(s, '%Y-%m-%dT%H:%M:%S.%f').replace(tzinfo=datetime.timezone.utc).timestamp()


def run_json_playbook(args, env=None, cwd=ROOT, timeout=1800):
    """ansible-playbook with the json callback. Returns (wall seconds, parsed document, CompletedProcess)."""
    e = dict(os.environ)
    e.update({'ANSIBLE_COLLECTIONS_PATH': collections_path(), 'ANSIBLE_STDOUT_CALLBACK': 'ansible.builtin.json',
              'ANSIBLE_LOAD_CALLBACK_PLUGINS': '1', 'ANSIBLE_LOCALHOST_WARNING': '0',
              'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0', 'ANSIBLE_DEPRECATION_WARNINGS': '0',
              'ANSIBLE_RETRY_FILES_ENABLED': '0', 'ANSIBLE_NOCOLOR': '1'})
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook')] + list(args), cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    try:
        doc = json.loads(p.stdout[p.stdout.index('{'):])
    except ValueError:
        doc = None
    return wall, doc, p


def failures(doc):
    out = []
    for play in (doc or {}).get('plays', []):
        for t in play['tasks']:
            for host, r in t['hosts'].items():
                if r.get('failed') or r.get('unreachable'):
                    out.append('%s | %s | %s' % (host, t['task']['name'], str(r.get('msg', ''))[:400]))
    return out


def play_summary(play):
    """{'wall': s, 'tasks': n executed (not skipped), 'changed': n, 'skipped': n} for one play of a json doc."""
    d = play['play'].get('duration') or {}
    wall = parse_ts(d['end']) - parse_ts(d['start']) if d.get('end') and d.get('start') else float('nan')
    return dict(count_results(play['tasks']), wall=wall)


def count_results(tasks):
    """{'tasks': host results that ran (not skipped), 'changed': n, 'skipped': n} over json callback tasks."""
    n = changed = skipped = 0
    for t in tasks:
        for r in t['hosts'].values():
            if r.get('skipped'):
                skipped += 1
                continue
            n += 1
            if r.get('changed'):
                changed += 1
    return {'tasks': n, 'changed': changed, 'skipped': skipped}


def _diff_keys(r):
    """For a changed file task run with --diff: the top-level JSON keys whose values differ, if both sides are JSON."""
    keys = set()
    diffs = r.get('diff') or []
    for d in diffs if isinstance(diffs, list) else [diffs]:
        try:
            before, after = json.loads(d.get('before') or ''), json.loads(d.get('after') or '')
        except (ValueError, TypeError, AttributeError):
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            keys.update(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return sorted(keys)


def changed_tasks(doc):
    out = []
    for play in doc.get('plays', []):
        for t in play['tasks']:
            for host, r in t['hosts'].items():
                if r.get('changed'):
                    keys = _diff_keys(r)
                    out.append('%s: %s%s' % (host, t['task']['name'], (' (JSON keys that differ: %s)' % ', '.join(keys))
                                             if keys else ''))
    return out


def table(head, rows):
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '|'.join('---' for _ in head) + '|']
    lines += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
    return lines


def write_section(name, text):
    os.makedirs(os.path.join(ROOT, 'build', 'bench'), exist_ok=True)
    with open(os.path.join(ROOT, 'build', 'bench', name + '.md'), 'w') as f:
        f.write(text)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


# a benchmark stopped with SIGTERM (timeout, Ctrl-C from make) still runs its finally blocks: containers,
# simulators and emulators it started are removed
signal.signal(signal.SIGTERM, _terminate)
