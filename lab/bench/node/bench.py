#!/usr/bin/env python3
"""Benchmark: the node layer on a lab node container, first converge vs no-op re-converge, per role.

Each repetition starts a fresh node container (lab/docker/node.sh) with the NVML simulator (2x A100-SXM4-80GB whose
MIG mode applies at once), installs Debian's containerd (untimed prepare) and runs the collection's own
playbooks/node.yml twice against it, the node in a MIG pool (geometry 3g.40gb x2): facts -> gpu_probe ->
nvidia_driver (Debian's real 535 packages) -> nvidia_container_runtime (containerd, stand-in toolkit from
lab/apt_repo) -> gpu_node_sharing (persistence, MIG geometry) -> gpu_probe again. The json callback's task times are
grouped by role (consecutive tasks of one role; a role that comes back after another is "<role> again"); per role it
records the wall time (first task start to last task end), the tasks that ran (not skipped) and the changed ones.

Package downloads: the node's /var/cache/apt/archives is a host directory (build/bench/apt-archives) kept between
repetitions and runs, so after the very first run every .deb comes from that cache ("packages in a nearby mirror");
`apt update` still asks deb.debian.org for its lists on the first converge (network).

  .venv/bin/python lab/bench/node/bench.py [--reps 3] [--smoke]
Env: GPUOPS_BENCH_PREFIX (default gpuops-bench) prefixes the container names; GPUOPS_BENCH_DUMP=PATH-PREFIX writes
each run's json callback document to PATH-PREFIX-<phase>.json (to see where the time goes, task by task).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as c  # noqa: E402

ROOT = c.ROOT
PLAYBOOK = os.path.join(ROOT, 'playbooks', 'node.yml')
PREFIX = os.environ.get('GPUOPS_BENCH_PREFIX', 'gpuops-bench')
CACHE = os.path.join(ROOT, 'build', 'bench', 'apt-archives')
A100 = os.path.join(ROOT, 'molecule', 'gpu_sharing', 'files', 'a100-apply-immediately.json')
ROLES = ['facts', 'gpu_probe', 'nvidia_driver', 'nvidia_container_runtime', 'gpu_node_sharing', 'gpu_probe again']
ISSUE4_ROLES = ('nvidia_driver', 'nvidia_container_runtime')   # the roles issue 4 sets the 20 % target for
SMOKE_ROLES = ['facts', 'gpu_probe', 'gpu_node_sharing', 'gpu_probe again']

PREPARE = [{'name': 'Bench prepare (untimed)', 'hosts': 'gpu_nodes', 'gather_facts': False, 'tasks': [
    {'name': "Install Debian's containerd (the engine the runtime role configures)",
     'ansible.builtin.apt': {'name': ['containerd'], 'install_recommends': False}}]}]


def inventory(name, repo_url, smoke):
    """playbooks/node.yml's inventory contract: gpu_nodes with one pool child group (docs/playbooks.md)."""
    return {'gpu_nodes': {
        'children': {'bench_pool_mig': {'hosts': {name: {}}, 'vars': {
            'gpuops_sharing_strategy': 'mig',
            'gpu_sharing_stack_mig': {'strategy': 'single', 'devices': {'3g.40gb': 2}, 'manager': False}}}},
        'vars': {
            'ansible_connection': 'community.docker.docker', 'ansible_python_interpreter': '/usr/bin/python3',
            'gpuops_node_driver': not smoke, 'gpuops_node_runtime': not smoke,
            'nvidia_driver_method': 'distro', 'nvidia_driver_version': '535.309.01',
            'nvidia_driver_branch': '535', 'nvidia_driver_accept_eol_branch': '535',   # Debian 12's only branch (EOL)
            'nvidia_container_runtime_repo_base_url': repo_url,
            'nvidia_container_runtime_version': '1.20.0-1~gpuopslab1',
            'nvidia_container_runtime_engines': ['containerd']}}}


def by_role(doc):
    """Group the json callback's tasks (one host) into role segments, in order.

    A task's name is "<role fqcn> : <task>" inside a role. Consecutive tasks of one role form a segment; a segment
    sandwiched between two segments of one other role is a role that one includes (nvidia_driver's check runs
    gpu_probe) and counts as the outer role's; a role that comes back after other roles is "<role> again". Tasks
    outside roles (the play's pre_tasks, the include that probes again) belong to 'facts' before the first role and
    to the next role's segment after it. Returns {segment: {'wall', 'tasks', 'changed', 'skipped'}}.
    """
    raw, pending = [], []
    for play in doc['plays']:
        for t in play['tasks']:
            name = t['task']['name']
            role = name.split(' : ', 1)[0].rsplit('.', 1)[-1] if ' : ' in name else None
            if role is None:
                if raw:
                    pending.append(t)
                else:
                    raw.append(['facts', [t]])
                continue
            if raw and raw[-1][0] == role:
                raw[-1][1].extend(pending + [t])
            else:
                raw.append([role, pending + [t]])
            pending = []
    # fold included roles into the role that includes them: Y X Y -> Y, innermost (rightmost) first, so that
    # gpu_probe, nvidia_driver, gpu_probe (its check), nvidia_driver folds the check and not the driver
    folded = [[role, list(tasks)] for role, tasks in raw]
    i = len(folded) - 3
    while i >= 0:
        y, x, y2 = folded[i], folded[i + 1], folded[i + 2]
        if y[0] == y2[0] and x[0] not in (y[0], 'facts'):
            y[1].extend(x[1] + y2[1])
            del folded[i + 1:i + 3]
            i = min(i, len(folded) - 3)
        else:
            i -= 1
    out, seen = {}, set()
    for role, tasks in folded:
        key = role + ' again' if role in seen else role
        seen.add(role)
        if key in out:
            raise SystemExit('role %s runs a third time in playbooks/node.yml; the bench cannot name it' % role)
        times = [(c.parse_ts(d['start']), c.parse_ts(d['end'])) for d in (t['task'].get('duration') or {} for t in tasks)
                 if d.get('start') and d.get('end')]
        out[key] = dict(c.count_results(tasks),
                        wall=(max(e for _s, e in times) - min(s for s, _e in times)) if times else 0.0)
    return out


def sh(cmd, timeout=600):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit('%s failed (rc %d):\n%s\n%s' % (' '.join(cmd), r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r.stdout


def one(rep, tmp, repo_url, roles, third, smoke):
    name = '%s-node-%d' % (PREFIX, rep)
    inv = os.path.join(tmp, 'inv-%d.json' % rep)
    with open(inv, 'w') as f:
        json.dump(inventory(name, repo_url, smoke), f)
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
        for phase in ('first', 'rerun', 'third') if third else ('first', 'rerun'):
            wall, doc, p = c.run_json_playbook(['-i', inv, PLAYBOOK, '--diff'], env=env)
            if p.returncode != 0 or doc is None:
                raise SystemExit('playbooks/node.yml (%s) failed:\n%s\n%s' % (
                    phase, '\n'.join(c.failures(doc)), p.stderr[-3000:]))
            segs = by_role(doc)
            if os.environ.get('GPUOPS_BENCH_DUMP'):
                with open(os.environ['GPUOPS_BENCH_DUMP'] + '-' + phase + '.json', 'w') as f:
                    json.dump(doc, f)
            unexpected = [k for k, v in segs.items() if k not in roles and v['tasks'] > 0]
            if unexpected or any(r not in segs for r in roles):
                raise SystemExit('playbooks/node.yml ran roles %s; the bench expects %s' % (list(segs), roles))
            res[phase] = {'wall': wall, 'roles': dict((r, segs[r]) for r in roles),
                          'changed_tasks': c.changed_tasks(doc) if phase != 'first' else []}
            print('  rep %d %s: %.1fs %s' % (rep, phase, wall, ' '.join('%s=%.1fs/%dt/%dc' % (
                r, segs[r]['wall'], segs[r]['tasks'], segs[r]['changed']) for r in roles)), file=sys.stderr)
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
                runs.append(one(rep, tmp, repo_url, roles, third=rep == 0 and not a.smoke, smoke=a.smoke))
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
                     ('met' if ratio.median <= 0.20 and max(pick('rerun', 'changed')) == 0 else 'not met')
                     if role in ISSUE4_ROLES else '-'])
    leftover = sorted(set(t for r in runs for t in r['rerun']['changed_tasks']))
    re_wall = c.Stat(r['rerun']['wall'] for r in runs).median
    re_tasks = c.Stat(sum(s['tasks'] for s in r['rerun']['roles'].values()) for r in runs).median
    layer_ratio = c.Stat(r['rerun']['wall'] / r['first']['wall'] for r in runs).median
    cached_after = len([f for f in os.listdir(CACHE) if f.endswith('.deb')])
    lines = ['## Node layer: first converge vs no-op re-converge', '',
             'One lab node container per repetition (Debian 12, systemd; NVML simulator with 2x A100-SXM4-80GB, MIG '
             'applied at once), the collection\'s own `playbooks/node.yml` with the node in a MIG pool (geometry '
             '3g.40gb x2): facts, `gpu_probe`, `nvidia_driver` (Debian\'s real 535 packages, distro method), '
             '`nvidia_container_runtime` (containerd; stand-in toolkit from the lab\'s signed apt repo), '
             '`gpu_node_sharing` (persistence, MIG geometry), `gpu_probe` again. Per role: the json callback\'s task '
             'times, first task start to last task end (nvidia_driver includes its own gpu_probe check). Connection '
             '`community.docker.docker` with pipelining. %d repetition(s); wall seconds as median (min-max); '
             'ratio = re-converge / first converge per repetition. Tasks (not skipped) and changed are per run '
             '(median; re-run changed is the maximum over repetitions).' % reps, '',
             '**Packages come from a nearby cache**: the node\'s `/var/cache/apt/archives` is a host directory '
             '(`build/bench/apt-archives`, %d .debs before this run, %d after) kept between repetitions and runs, so the '
             'first converge installs from local .debs (no download), but `apt update` still fetches the Debian '
             'indexes over the network. In a container the driver packages install but no kernel module is built or '
             'loaded (dkms finds no headers for the host kernel) and there is no reboot; on a real machine the dkms '
             'build (minutes) and the reboot dominate the first converge.' % (cached_before, cached_after), '']
    lines += c.table(['play (role)', 'first converge s', 're-converge s', 're/first', 'tasks first / re',
                      'changed first / re (max)', 'issue 4 target (<= 0.20, changed=0)'], rows)
    lines += ['', 'Changed on a re-converge: %s.' % ('; '.join(leftover) if leftover else 'nothing (changed=0 on every repetition)')]
    noop = dict((r, (c.Stat(x['rerun']['roles'][r]['wall'] for x in runs).median,
                     c.Stat(x['rerun']['roles'][r]['tasks'] for x in runs).median)) for r in roles)
    lines += ['', 'Reading the ratios: a no-op re-converge still runs every check (%d tasks here, %.2f s each on '
              'average through `docker exec` on this machine: re-converge wall / tasks). A task that runs a module on '
              'the node costs a few tenths of a second even when it changes nothing, a controller-side check a few '
              'hundredths. So a role\'s floor is its number of remote calls: `nvidia_container_runtime` makes two on a '
              'converged node (`apt_signed_repo`: keyring, source and the installed package versions in one call; '
              'one `container_runtime_config` merge per engine) and its re-converge took %.1f s; `nvidia_driver` '
              'took %.1f s for %d tasks. Roles whose first converge is that short (gpu_probe, gpu_node_sharing) cannot '
              'reach 20 %% of it, and no target is set for them. Here packages come from a local cache and no kernel '
              'module is built; on a real node the downloads, the dkms build and the reboot make the first converge '
              'minutes long, and the same %.0f s layer re-converge (%.0f %% here) is far below 20 %%.'
              % (re_tasks, re_wall / max(re_tasks, 1),
                 noop.get('nvidia_container_runtime', (float('nan'), 0))[0],
                 noop.get('nvidia_driver', (float('nan'), 0))[0], noop.get('nvidia_driver', (0, 0))[1],
                 re_wall, 100.0 * layer_ratio)]
    if 'third' in runs[0]:
        third = runs[0]['third']
        lines += ['', 'A third converge (repetition 1 only): %.1f s, changed tasks: %s.' % (
            third['wall'], '; '.join(third['changed_tasks']) or 'none')]
    text = '\n'.join(lines) + '\n'
    c.write_section('node', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
