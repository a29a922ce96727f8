#!/usr/bin/env python3
"""Run every check of `make test` in order, keep going after failures, and print one summary.

Each step is a command. Steps that write JUnit XML (pytest, ansible-test units, the sanity and lint
wrappers) are counted test by test; other steps count as one check each. The last line is
``tests: N passed, N failed, N skipped`` and the exit status is non-zero when anything failed, when a step
that must produce tests produced none, or when a name given to run some steps names none. A skipped test counts as
failed (a test that cannot run fails loudly), except in the sanity steps, whose JUnit records a skip for a sanity test
with nothing to check (SKIPS_ARE_RESULTS); those are the skipped the last line counts.

Steps run in lanes: the lanes ``lab`` (pytest over lab/tests with pytest-xdist), ``checks`` (lint, sanity,
units, collection build, antsibull-docs and Galaxy's importer on the tarball, then the benchmark smoke run and the
README's demo) and ``molecule`` (the scenarios one after another) run at the same time, because their containers,
emulators, apt repository servers and state directories never collide (each names its own; the demo and the benches serve their own apt repository). Steps
put in the ``final`` lane would run alone after the others; none needs to today. A lane's steps run one after
another. Output of concurrent steps goes to
build/test-results/<step>.log and is printed whole when the step ends. ``--serial`` runs everything one
step at a time with the output streamed, as before. ``GPUOPS_LAB_WORKERS`` sets pytest-xdist's worker count
for the lab step (default 3: the lab lane waits more than it computes - its real control plane, kwok, node
containers and drains - so a third worker shortens it (1758 s with 2, 1510 s with 3, measured 2026-11-29) though
the whole run costs more CPU (2869 CPU-seconds with 2 workers against 3025 with 3, measured 2026-11-24); 0 runs the
lab without xdist). The lab files in
LAB_IN_OTHER_LANES run at the end of the checks and molecule lanes (steps lab-checks-lane, lab-molecule-lane),
which otherwise end first.
"""
import argparse
import glob
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, 'build', 'test-results')
VENV = os.path.join(ROOT, '.venv', 'bin')


def junit_counts(path):
    """(passed, failed, skipped) from a JUnit XML file."""
    tree = ET.parse(path)
    passed = failed = skipped = 0
    for case in tree.iter('testcase'):
        if case.find('failure') is not None or case.find('error') is not None:
            failed += 1
        elif case.find('skipped') is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def skipped_cases(path):
    """'classname::name' of every skipped case of a JUnit XML file."""
    return ['%s::%s' % (case.get('classname'), case.get('name')) for case in ET.parse(path).iter('testcase')
            if case.find('skipped') is not None and case.find('failure') is None and case.find('error') is None]


def failed_cases(path):
    """['classname::name: first line of the failure'] of every failed or erroring case of a JUnit XML file."""
    out = []
    for case in ET.parse(path).iter('testcase'):
        bad = case.find('failure')
        if bad is None:
            bad = case.find('error')
        if bad is not None:
            msg = (bad.get('message') or bad.text or '').strip().splitlines()
            out.append('%s::%s: %s' % (case.get('classname'), case.get('name'), (msg[0] if msg else '')[:300]))
    return out


def machine_cpu():
    """(busy, total) CPU seconds of the whole machine since boot (/proc/stat): what every process used, the node
    containers' included, which a step's own wait4 does not see."""
    try:
        with open('/proc/stat') as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf('SC_CLK_TCK')
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields) - idle) / hz, sum(fields) / hz


# Inotify instances per user (fs.inotify.max_user_instances, 128 on a fresh Debian 12): every kubelet of the lab's
# real nodes holds 6, each node container's systemd 5, containerd, dbus and logind more. A whole run peaked at 111 of
# 128 (session 23, lab/bin/cpu-sample.py beside make test; the demo's five real nodes at the end of the checks lane);
# over the limit containerd's CRI plugin fails to start ("failed to create fsnotify watcher: too many open files",
# session 22). kind documents the same limit for its node containers. The run raises it for the machine when lower.
INOTIFY_INSTANCES = 1024
INOTIFY_PATH = '/proc/sys/fs/inotify/max_user_instances'


def ensure_inotify_instances(path=INOTIFY_PATH, want=INOTIFY_INSTANCES):
    """Raise ``path`` to ``want`` when lower; returns a line saying what it did (or could not do)."""
    try:
        with open(path) as f:
            have = int(f.read().strip())
    except (OSError, ValueError) as exc:
        return 'inotify: cannot read %s (%s)' % (path, exc)
    if have >= want:
        return 'inotify: %s is %d' % (path, have)
    try:
        with open(path, 'w') as f:
            f.write('%d\n' % want)
    except OSError as exc:
        return ('inotify: %s is %d and cannot be raised to %d (%s): real-node tests may fail with "too many open '
                'files"' % (path, have, want, exc))
    return 'inotify: %s raised from %d to %d for the lab\'s real nodes' % (path, have, want)


def molecule_scenarios():
    names = []
    for path in sorted(glob.glob(os.path.join(ROOT, 'molecule', '*', 'molecule.yml'))):
        name = os.path.basename(os.path.dirname(path))
        if not name.startswith('_'):
            names.append(name)
    return names


# Lab test files that run at the end of another lane (steps lab-checks-lane and lab-molecule-lane, one file after
# another) instead of in the lab step: the whole run is CPU-bound, and the lab lane ended last, 270 and 350 s after
# the other two, while the machine had idle cycles (measured 2026-11-24). Every lab file keeps its own containers,
# emulators and simulators, so any of them can run in any lane.
# 2026-11-29: with three lab workers the lab lane ends near 1510 s and the checks lane (antsibull-docs, Galaxy's
# importer, the benchmark smoke run and the demo joined it) near 1650 s, the molecule lane near 1000 s: every file
# moved to the molecule lane, the checks lane has none.
LAB_IN_OTHER_LANES = {
    'checks': [],
    'molecule': ['lab/tests/integration/test_awx_runner.py',
                 'lab/tests/integration/test_esxi_gpu_passthrough.py',
                 'lab/tests/integration/test_kube_scheduler_config.py'],
}


# Lab test files make test leaves to make test-kube: test_dra_kube133_real.py needs the kube-1.33 set (upstream's
# control plane at 1.33), a third full k8s.io/kubernetes build beside 1.37 and 1.34 that a fresh machine would pay for
# inside the lab step (about 25 minutes measured on the loaded 2-core machine, 2026-11-29): run it with
# `make test-kube KUBE_VERSION=1.33`. DRA on 1.32/1.33 stays in make test through the renderer's unit tests and the
# schema test (lab/tests/integration/test_dra_claims_schema.py).
NOT_IN_MAKE_TEST = ['lab/tests/integration/test_dra_kube133_real.py']


def lab_in_lane_cmd(lane):
    name = 'lab-%s-lane' % lane
    return [os.path.join(VENV, 'pytest'), '-q', '-p', 'no:xdist', '--junitxml',
            os.path.join(RESULTS, name + '.xml')] + LAB_IN_OTHER_LANES[lane]


def lab_cmd():
    cmd = [os.path.join(VENV, 'pytest'), '-q', 'lab/tests', '--junitxml', os.path.join(RESULTS, 'lab.xml')]
    cmd += ['--ignore=' + f for files in LAB_IN_OTHER_LANES.values() for f in files]
    cmd += ['--ignore=' + f for f in NOT_IN_MAKE_TEST]
    workers = int(os.environ.get('GPUOPS_LAB_WORKERS', '3'))
    if workers > 0:
        # one xdist group per test file except the ones lab/tests/conftest.py lets split; heaviest files first
        cmd += ['-n', str(workers), '--dist', 'loadfile', '--no-loadscope-reorder']
    return cmd


def steps(only=None):
    """[(name, command, junit file or None, lane)] in summary order."""
    s = [
        ('lint', ['bash', 'lab/bin/lint.sh'], 'lint.xml', 'checks'),
        # mypy on module_utils/_common and _node, ruff on plugins/ and lab/ (seconds; lab/bin/pycheck.sh)
        ('pycheck', ['bash', 'lab/bin/pycheck.sh'], None, 'checks'),
        ('sanity-2.21', ['bash', 'lab/bin/ansible-test.sh', '.venv', 'sanity'], '.venv-sanity.xml', 'checks'),
        ('sanity-2.16', ['bash', 'lab/bin/ansible-test.sh', '.venv-2.16', 'sanity'], '.venv-2.16-sanity.xml',
         'checks'),
        ('units-2.21', ['bash', 'lab/bin/ansible-test.sh', '.venv', 'units'], '.venv-units.xml', 'checks'),
        ('units-2.16', ['bash', 'lab/bin/ansible-test.sh', '.venv-2.16', 'units'], '.venv-2.16-units.xml', 'checks'),
        # the real control plane's programs (lab/go: kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
        # kwok; GPUOPS_KUBE_VERSION picks 1.37 or 1.34) built once per machine, before the lab step that uses them:
        # minutes on a fresh machine (docs/lab.md), a second when cached
        ('kube-build', [os.path.join(VENV, 'python'), 'lab/kube/real.py', 'build'], None, 'lab'),
        # the other lab/go sets (oracles, vSphere simulator) likewise, in one step instead of inside the first test
        # that asks for one
        ('go-build', ['bash', 'lab/go/build-all.sh'], None, 'lab'),
        ('lab', lab_cmd(), 'lab.xml', 'lab'),
        ('collection-build', ['bash', 'lab/bin/collection-build-test.sh'], None, 'checks'),
        # the ecosystem's own checks on the built tarball (lab/bin/eco-check.py, .venv-eco): antsibull-docs'
        # lint-collection-docs --plugin-docs (what the Ansible docsite builds from) and Galaxy's importer with its
        # ansible-lint (ansible-test off); in the checks lane, which ends first (measured 2026-11-29 alone on the
        # 2-core machine at load 12 from other sessions: 91 s wall / 25 CPU-s and 290 s wall / 47 CPU-s)
        ('antsibull-docs', [os.path.join(VENV, 'python'), 'lab/bin/eco-check.py', 'docs'], None, 'checks'),
        ('galaxy-importer', [os.path.join(VENV, 'python'), 'lab/bin/eco-check.py', 'importer'], None, 'checks'),
    ]
    for name in molecule_scenarios():
        s.append(('molecule-' + name, ['bash', 'lab/docker/molecule.sh', 'test', '-s', name], None, 'molecule'))
    s.append(('lab-molecule-lane', lab_in_lane_cmd('molecule'), 'lab-molecule-lane.xml', 'molecule'))
    # The checks lane ends long before the lab and molecule lanes: the smoke run of the benchmarks fills it (a
    # smoke run proves the benchmarks run; its seconds are not measurements).
    s.append(('bench-smoke', [os.path.join(VENV, 'python'), 'lab/bench/run.py', '--smoke'], None, 'checks'))
    # The README's first command, end to end (includes its own idempotence check), then its nodes go. In the checks
    # lane, after the benchmark smoke run: that lane ends first, and every lane shares the same two cores (the whole run
    # is CPU-bound), so the lanes end closest together this way (measured: checks 650 s, lab 1437 s, molecule 1476 s
    # plus the demo's 128 s before the move).
    s.append(('demo', ['bash', 'lab/bin/demo.sh'], None, 'checks'))
    s.append(('demo-clean', ['bash', 'lab/bin/demo.sh', 'clean'], None, 'checks'))
    if LAB_IN_OTHER_LANES['checks']:
        s.append(('lab-checks-lane', lab_in_lane_cmd('checks'), 'lab-checks-lane.xml', 'checks'))
    if only:
        unknown = [o for o in only if not any(x[0].startswith(o) for x in s)]
        if unknown:
            raise UnknownSteps('no step of the suite starts with %s; the steps: %s'
                               % (', '.join(repr(o) for o in unknown), ' '.join(x[0] for x in s)))
        s = [x for x in s if any(x[0].startswith(o) for o in only)]
    return s


class UnknownSteps(Exception):
    """A name given to make test-only (STEPS) that names no step: nothing would run, and nothing must pass."""


# Steps whose JUnit files may record skipped tests. ansible-test's sanity JUnit records a skipped case for every
# sanity test that has nothing to check in this collection (for example a test of a file type it does not have): that
# is a result, not a test that could not run. Everywhere else a skipped test is one that could not run, and the lab's
# rule is that such a test fails loudly: it counts as failed, named in the step's note.
SKIPS_ARE_RESULTS = ('sanity-2.21', 'sanity-2.16')


def run_step(name, cmd, junit, env, log=None):
    """Run one step; return its summary row (name, passed, failed, skipped, seconds, cpu seconds, note).

    With ``log`` the output goes to that file (printed by the caller), else it is streamed."""
    if junit:
        jpath = os.path.join(RESULTS, junit)
        if os.path.exists(jpath):
            os.unlink(jpath)
    start = time.time()
    if log:
        with open(log, 'w') as out:
            out.write('===== %s: %s\n' % (name, ' '.join(cmd)))
            out.flush()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    else:
        print('\n===== %s: %s' % (name, ' '.join(cmd)), flush=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    # wait4: the exit status and the CPU time of the step's process tree (what it waited for; not containers)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    took = time.time() - start
    cpu = usage.ru_utime + usage.ru_stime
    p = f = sk = 0
    note = ''
    if junit and os.path.exists(os.path.join(RESULTS, junit)):
        p, f, sk = junit_counts(os.path.join(RESULTS, junit))
        if sk and name not in SKIPS_ARE_RESULTS:
            f += sk
            note = '%d skipped: a test that cannot run fails (%s)' % (sk, ', '.join(skipped_cases(
                os.path.join(RESULTS, junit))[:5]))
            sk = 0
        if rc != 0 and f == 0:
            f += 1
            note = 'exit %d with no failing test recorded' % rc
        if p + f == 0:
            f += 1
            note = 'no test ran'
    elif junit:
        f = 1
        note = 'no results file (exit %d)' % rc
    elif rc == 0:
        p = 0 if name.endswith('-clean') else 1  # a clean-up step counts only when it fails
    else:
        f = 1
        note = 'exit %d' % rc
    return (name, p, f, sk, took, cpu, note)


def suite_env(base):
    """The environment every step runs with: ``base`` plus the venv on PATH, the collections path, no colour, and
    lab/ansible-tests.cfg for ansible runs that bring no configuration of their own (speed only; the file says why).
    What ``base`` sets for ANSIBLE_COLLECTIONS_PATH or ANSIBLE_CONFIG is kept."""
    env = dict(base)
    env['PATH'] = VENV + os.pathsep + env.get('PATH', '')
    env.setdefault('ANSIBLE_COLLECTIONS_PATH', os.path.join(ROOT, 'build', 'collections'))
    env['ANSIBLE_FORCE_COLOR'] = '0'
    env['PY_COLORS'] = '0'
    env.setdefault('ANSIBLE_CONFIG', os.path.join(ROOT, 'lab', 'ansible-tests.cfg'))
    # one real control plane (lab/kube/real.py) shared by every lab test that uses it, in any lane: the first test
    # that needs it starts it (lab/tests/conftest.py kube_real); main() stops it at the end, and it stops by itself
    # should this process die (its owner pid)
    env.setdefault('GPUOPS_KUBE_REAL_STATE', os.path.join(ROOT, 'build', 'kube-real', 'run-%d' % os.getpid()))
    env.setdefault('GPUOPS_KUBE_REAL_OWNER', str(os.getpid()))
    # a measuring run (GPUOPS_TASK_CPU_DIR=DIR make test): every ansible-playbook writes its controller CPU per task
    # into DIR (lab/profile/gpuops_task_cpu.py; lab/bin/task-cpu-report.py sums them); off otherwise
    if env.get('GPUOPS_TASK_CPU_DIR'):
        env['GPUOPS_TASK_CPU_DIR'] = os.path.abspath(env['GPUOPS_TASK_CPU_DIR'])
        env['ANSIBLE_CALLBACK_PLUGINS'] = os.path.join(ROOT, 'lab', 'profile')
        env['ANSIBLE_CALLBACKS_ENABLED'] = 'gpuops_task_cpu'
    return env


def kube_real_down(env):
    """Stop the shared real control plane of this run (if a test started it) and remove its state."""
    state = env.get('GPUOPS_KUBE_REAL_STATE')
    if state and os.path.isdir(state):
        subprocess.call([os.path.join(VENV, 'python'), os.path.join(ROOT, 'lab', 'kube', 'real.py'), 'down', '--state',
                         state], cwd=ROOT)
        if not os.environ.get('GPUOPS_KUBE_REAL_KEEP'):
            import shutil
            shutil.rmtree(state, ignore_errors=True)
    if state and os.path.exists(state.rstrip('/') + '.lock'):
        os.unlink(state.rstrip('/') + '.lock')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('only', nargs='*', help='run only steps whose name starts with one of these')
    ap.add_argument('--serial', action='store_true', help='one step at a time, output streamed (no lanes)')
    args = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    env = suite_env(os.environ)
    try:
        todo = steps(args.only)
    except UnknownSteps as exc:
        print('run-tests.py: %s' % exc, file=sys.stderr)
        return 2
    print(ensure_inotify_instances(), flush=True)
    # the collections symlink once, before steps that all read it start at the same time
    subprocess.check_call(['bash', 'lab/bin/collections-path.sh'], cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.time()
    cpu0 = machine_cpu()
    rows = {}
    try:
        run_all(args, todo, rows, env)
    finally:
        kube_real_down(env)
    return report(todo, rows, time.time() - wall, args, cpu0)


def run_all(args, todo, rows, env):
    """Run the steps (lanes at once, or one by one with --serial), filling ``rows``."""
    if args.serial:
        for name, cmd, junit, _lane in todo:
            rows[name] = run_step(name, cmd, junit, env)
    else:
        lanes = {}
        for step in todo:
            lanes.setdefault(step[3], []).append(step)
        printing = threading.Lock()

        def run_lane(lane_steps):
            for name, cmd, junit, _lane in lane_steps:
                log = os.path.join(RESULTS, name + '.log')
                try:
                    row = run_step(name, cmd, junit, env, log)
                except Exception as exc:  # pylint: disable=broad-except  # a broken step must not hide the others
                    row = (name, 0, 1, 0, 0.0, 0.0, 'runner error: %s' % exc)
                rows[name] = row
                with printing:
                    with open(log) as f:
                        sys.stdout.write('\n' + f.read())
                    print('===== %s done: %d passed, %d failed in %.0f s' % (name, row[1], row[2], row[4]), flush=True)

        threads = [threading.Thread(target=run_lane, args=(steps_,)) for lane, steps_ in lanes.items()
                   if lane != 'final']
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run_lane(lanes.get('final', []))


def report(todo, rows, wall, args, cpu0=None):
    total_pass = total_fail = total_skip = 0
    print('\n%-28s %7s %7s %7s %9s %9s  %s' % ('step', 'passed', 'failed', 'skipped', 'seconds', 'cpu-s', 'note'))
    for name, _cmd, _junit, _lane in todo:
        name, p, f, sk, took, cpu, note = rows.get(name, (name, 0, 1, 0, 0.0, 0.0, 'did not run'))
        total_pass += p
        total_fail += f
        total_skip += sk
        print('%-28s %7d %7d %7d %9.1f %9.1f  %s' % (name, p, f, sk, took, cpu, note))
    print('wall: %.1f s%s' % (wall, ' (serial)' if args.serial else ' (lanes run concurrently; see the seconds per step)'))
    cpu1 = machine_cpu()
    if cpu0 and cpu1 and cpu1[1] > cpu0[1]:
        busy, total = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        print('machine: %.0f CPU-s busy of %.0f (%.0f%%, %d cores; every process, node containers included)'
              % (busy, total, 100.0 * busy / total, os.cpu_count() or 0))
    # the failing tests by name, last: CI shows the end of this output
    for name, _cmd, junit, _lane in todo:
        if junit and rows.get(name, (0, 0, 0))[2] and os.path.exists(os.path.join(RESULTS, junit)):
            for line in failed_cases(os.path.join(RESULTS, junit))[:20]:
                print('FAILED %s: %s' % (name, line))
    # the closing line; skipped tests that are results (SKIPS_ARE_RESULTS) are shown, the others are counted as failed
    print('tests: %d passed, %d failed, %d skipped' % (total_pass, total_fail, total_skip))
    return 1 if total_fail else 0


if __name__ == '__main__':
    sys.exit(main())
