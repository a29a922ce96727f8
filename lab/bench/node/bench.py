#!/usr/bin/env python3
"""Benchmark: the node layer on a lab node container, first converge vs no-op re-converge, per role.

Each repetition starts a fresh node container (lab/docker/node.sh) with the NVML simulator (2x A100-SXM4-80GB whose
MIG mode applies at once), installs Debian's containerd (untimed prepare) and runs lab/bench/node/node.yml twice:
facts -> gpu_probe -> nvidia_driver (Debian's real 535 packages) -> nvidia_container_runtime (containerd, stand-in
toolkit from lab/apt_repo) -> gpu_sharing (persistence, MIG geometry). Per play (= per role) it records the wall time,
the tasks that ran (not skipped) and the changed ones from the json callback.

Package downloads: the node's /var/cache/apt/archives is a host directory (build/bench/apt-archives) kept between
repetitions and runs, so after the very first run every .deb comes from that cache ("packages in a nearby mirror");
`apt update` still asks deb.debian.org for its lists on the first converge (network).

  .venv/bin/python lab/bench/node/bench.py [--reps 3] [--smoke]
Env: GPUOPS_BENCH_PREFIX (default gpuops-bench) prefixes the container names.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as c  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = c.ROOT
PREFIX = os.environ.get('GPUOPS_BENCH_PREFIX', 'gpuops-bench')
CACHE = os.path.join(ROOT, 'build', 'bench', 'apt-archives')
A100 = os.path.join(ROOT, 'molecule', 'gpu_sharing', 'files', 'a100-apply-immediately.json')
ROLES = ['facts', 'gpu_probe', 'nvidia_driver', 'nvidia_container_runtime', 'gpu_sharing', 'gpu_probe again']
TAGS = {'facts': '', 'gpu_probe': 'probe', 'nvidia_driver': 'driver', 'nvidia_container_runtime': 'runtime',
        'gpu_sharing': 'sharing', 'gpu_probe again': 'probe'}
SMOKE_ROLES = ['facts', 'gpu_probe', 'gpu_sharing', 'gpu_probe again']

PREPARE = [{'name': 'Bench prepare (untimed)', 'hosts': 'bench_nodes', 'gather_facts': False, 'tasks': [
    {'name': "Install Debian's containerd (the engine the runtime role configures)",
     'ansible.builtin.apt': {'name': ['containerd'], 'install_recommends': False}}]}]


def sh(cmd, timeout=600):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit('%s failed (rc %d):\n%s\n%s' % (' '.join(cmd), r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r.stdout


def one(rep, tmp, repo_url, roles, third):
    name = '%s-node-%d' % (PREFIX, rep)
    inv = os.path.join(tmp, 'inv-%d.json' % rep)
    with open(inv, 'w') as f:
        json.dump({'bench_nodes': {'hosts': {name: {}}, 'vars': {
            'ansible_connection': 'community.docker.docker', 'ansible_python_interpreter': '/usr/bin/python3',
            'bench_apt_repo': repo_url}}}, f)
    env = {'ANSIBLE_PIPELINING': '1', 'ANSIBLE_HOST_KEY_CHECKING': '0', 'ANSIBLE_TIMEOUT': '30'}
    sh([os.path.join(ROOT, 'lab/docker/node.sh'), 'down', name])
    sh([os.path.join(ROOT, 'lab/docker/node.sh'), 'up', name, '--hostname', name, '--',
        '-v', '%s:/var/cache/apt/archives' % CACHE, '--label', 'gpuops.bench=node'])
    try:
        sh([os.path.join(ROOT, 'lab/nvml_sim/install.sh'), name, A100])
        if 'nvidia_container_runtime' in roles:
            prep = os.path.join(tmp, 'prepare.json')
            with open(prep, 'w') as f:
                json.dump(PREPARE, f)
            wall, doc, p = c.run_json_playbook(['-i', inv, prep], env=env)
            if p.returncode != 0:
                raise SystemExit('prepare failed:\n%s\n%s' % ('\n'.join(c.failures(doc)), p.stderr[-3000:]))
        res = {}
        tags = ','.join(TAGS[r] for r in roles if TAGS[r])
        for phase in ('first', 'rerun', 'third') if third else ('first', 'rerun'):
            wall, doc, p = c.run_json_playbook(['-i', inv, os.path.join(HERE, 'node.yml'), '--tags', tags, '--diff'], env=env)
            if p.returncode != 0 or doc is None:
                raise SystemExit('node.yml (%s) failed:\n%s\n%s' % (phase, '\n'.join(c.failures(doc)), p.stderr[-3000:]))
            plays = dict((pl['play']['name'].replace('Bench - ', ''), c.play_summary(pl)) for pl in doc['plays'])
            res[phase] = {'wall': wall, 'roles': dict((r, plays[r]) for r in roles),
                          'changed_tasks': c.changed_tasks(doc) if phase != 'first' else []}
            print('  rep %d %s: %.1fs %s' % (rep, phase, wall, ' '.join('%s=%.1fs/%dt/%dc' % (
                r, plays[r]['wall'], plays[r]['tasks'], plays[r]['changed']) for r in roles)), file=sys.stderr)
        return res
    finally:
        subprocess.run([os.path.join(ROOT, 'lab/docker/node.sh'), 'down', name], cwd=ROOT, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--smoke', action='store_true', help='one repetition, without the driver and runtime roles')
    a = ap.parse_args()
    reps = 1 if a.smoke else a.reps
    roles = SMOKE_ROLES if a.smoke else ROLES
    os.makedirs(CACHE, exist_ok=True)
    sh(['bash', os.path.join(ROOT, 'lab/docker/engine.sh'), 'up'])
    cached_before = len([f for f in os.listdir(CACHE) if f.endswith('.deb')])
    runs = []
    with tempfile.TemporaryDirectory(prefix='bench-node-') as tmp:
        # a private instance of the lab apt repository server (its own state dir), stopped at the end
        os.environ['LAB_APT_REPO_STATE'] = os.path.join(tmp, 'apt_repo')
        repo_url = sh([os.path.join(ROOT, 'lab/apt_repo/serve.sh'), 'start']).strip().splitlines()[-1]
        try:
            for rep in range(reps):
                runs.append(one(rep, tmp, repo_url, roles, third=rep == 0 and not a.smoke))
        finally:
            subprocess.run([os.path.join(ROOT, 'lab/apt_repo/serve.sh'), 'stop'], cwd=ROOT, capture_output=True)
    rows = []
    for role in roles + ['total']:
        def pick(phase, key, role=role):
            if role == 'total':
                return [r[phase]['wall'] if key == 'wall' else sum(s[key] for s in r[phase]['roles'].values()) for r in runs]
            return [r[phase]['roles'][role][key] for r in runs]
        f, s = c.Stat(pick('first', 'wall')), c.Stat(pick('rerun', 'wall'))
        ratio = c.Stat([b / a for a, b in zip(f.values, s.values)])
        rows.append([role if role != 'total' else '**whole playbook (ansible-playbook wall)**', f.fmt(), s.fmt(),
                     ratio.fmt('%.2f'),
                     '%d / %d' % (c.Stat(pick('first', 'tasks')).median, c.Stat(pick('rerun', 'tasks')).median),
                     '%d / %d' % (c.Stat(pick('first', 'changed')).median, max(pick('rerun', 'changed'))),
                     '-' if role == 'facts' else
                     ('met' if ratio.median <= 0.20 and max(pick('rerun', 'changed')) == 0 else 'not met')])
    leftover = sorted(set(t for r in runs for t in r['rerun']['changed_tasks']))
    re_wall = c.Stat(r['rerun']['wall'] for r in runs).median
    re_tasks = c.Stat(sum(s['tasks'] for s in r['rerun']['roles'].values()) for r in runs).median
    layer_ratio = c.Stat(r['rerun']['wall'] / r['first']['wall'] for r in runs).median
    cached_after = len([f for f in os.listdir(CACHE) if f.endswith('.deb')])
    lines = ['## Node layer: first converge vs no-op re-converge', '',
             'One lab node container per repetition (Debian 12, systemd; NVML simulator with 2x A100-SXM4-80GB, MIG '
             'applied at once), playbook `lab/bench/node/node.yml`: facts, `gpu_probe`, `nvidia_driver` (Debian\'s real '
             '535 packages, distro method), `nvidia_container_runtime` (containerd; stand-in toolkit from the lab\'s '
             'signed apt repo), `gpu_sharing` module (persistence, MIG geometry all-3g.40gb). Connection '
             '`community.docker.docker` with pipelining. %d repetition(s); wall seconds as median (min-max); '
             'ratio = re-converge / first converge per repetition. Tasks and changed are per run (median; re-run '
             'changed is the maximum over repetitions).' % reps, '',
             '**Packages come from a nearby cache**: the node\'s `/var/cache/apt/archives` is a host directory '
             '(`build/bench/apt-archives`, %d .debs before this run, %d after) kept between repetitions and runs, so the '
             'first converge installs from local .debs (no download), but `apt update` still fetches the Debian '
             'indexes over the network. In a container the driver packages install but no kernel module is built or '
             'loaded (dkms finds no headers for the host kernel) and there is no reboot; on a real machine the dkms '
             'build (minutes) and the reboot dominate the first converge.' % (cached_before, cached_after), '']
    lines += c.table(['play (role)', 'first converge s', 're-converge s', 're/first', 'tasks first / re',
                      'changed first / re (max)', 'issue 4 target (<= 0.20, changed=0)'], rows)
    lines += ['', 'Changed on a re-converge: %s.' % ('; '.join(leftover) if leftover else 'nothing (changed=0 on every repetition)')]
    lines += ['', 'Reading the ratios: a no-op re-converge still runs every task (%d here), and each costs about %.2f s of '
              'Ansible overhead through `docker exec` on this machine (re-converge wall / tasks), so roles whose first '
              'converge is short (gpu_sharing, gpu_probe, the runtime role) cannot reach 20 %% of it; the layer as a '
              'whole (%.0f %%) can only when its first converge is dominated by real work. Here the packages come '
              'from a local cache and no kernel module is built; on a real node the downloads, the dkms build and the '
              'reboot make the first converge minutes long, and the same %.0f s re-converge is far below 20 %%.'
              % (re_tasks, re_wall / max(re_tasks, 1), 100.0 * layer_ratio, re_wall)]
    if 'third' in runs[0]:
        third = runs[0]['third']
        lines += ['', 'A third converge (repetition 1 only): %.1f s, changed tasks: %s.' % (
            third['wall'], '; '.join(third['changed_tasks']) or 'none')]
    if any('Write the probe report' in t for t in leftover):
        lines += ['', 'Why the probe report changes once: gpu_probe runs before gpu_sharing (the order of '
                  'playbooks/node.yml), so the first converge writes the report before the MIG geometry exists and '
                  'the re-converge writes it again with MIG enabled; the change is real, not noise, and the third '
                  'converge is clean. Probing again after gpu_sharing changed MIG (or writing the report at the end of '
                  'the node layer) would make the second converge clean.']
    text = '\n'.join(lines) + '\n'
    c.write_section('node', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
