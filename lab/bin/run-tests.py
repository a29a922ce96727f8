#!/usr/bin/env python3
"""Run every check of `make test` in order, keep going after failures, and print one summary.

Each step is a command. Steps that write JUnit XML (pytest, ansible-test units, the sanity and lint
wrappers) are counted test by test; other steps count as one check each. The last line is
``tests: N passed, N failed`` and the exit status is non-zero when anything failed or when a step
that must produce tests produced none.
"""
import argparse
import glob
import os
import subprocess
import sys
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


def molecule_scenarios():
    names = []
    for path in sorted(glob.glob(os.path.join(ROOT, 'molecule', '*', 'molecule.yml'))):
        name = os.path.basename(os.path.dirname(path))
        if not name.startswith('_'):
            names.append(name)
    return names


def steps(only=None):

    s = [
        ('lint', ['bash', 'lab/bin/lint.sh'], 'lint.xml'),
        ('sanity-2.21', ['bash', 'lab/bin/ansible-test.sh', '.venv', 'sanity'], '.venv-sanity.xml'),
        ('sanity-2.16', ['bash', 'lab/bin/ansible-test.sh', '.venv-2.16', 'sanity'], '.venv-2.16-sanity.xml'),
        ('units-2.21', ['bash', 'lab/bin/ansible-test.sh', '.venv', 'units'], '.venv-units.xml'),
        ('units-2.16', ['bash', 'lab/bin/ansible-test.sh', '.venv-2.16', 'units'], '.venv-2.16-units.xml'),
        ('lab', [os.path.join(VENV, 'pytest'), '-q', 'lab/tests', '--junitxml', os.path.join(RESULTS, 'lab.xml')],
         'lab.xml'),
        ('collection-build', ['bash', 'lab/bin/collection-build-test.sh'], None),
    ]
    for name in molecule_scenarios():
        s.append(('molecule-' + name, ['bash', 'lab/docker/molecule.sh', 'test', '-s', name], None))
    s.append(('bench-smoke', [os.path.join(VENV, 'python'), 'lab/bench/run.py', '--smoke'], None))
    # The README's first command, end to end (includes its own idempotence check), then its nodes go.
    s.append(('demo', ['bash', 'lab/bin/demo.sh'], None))
    s.append(('demo-clean', ['bash', 'lab/bin/demo.sh', 'clean'], None))
    if only:
        s = [x for x in s if any(x[0].startswith(o) for o in only)]

    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('only', nargs='*', help='run only steps whose name starts with one of these')
    args = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    env = dict(os.environ)
    env['PATH'] = VENV + os.pathsep + env.get('PATH', '')
    env.setdefault('ANSIBLE_COLLECTIONS_PATH', os.path.join(ROOT, 'build', 'collections'))
    env['ANSIBLE_FORCE_COLOR'] = '0'
    env['PY_COLORS'] = '0'
    total_pass = total_fail = total_skip = 0
    rows = []
    for name, cmd, junit in steps(args.only):
        if junit:
            jpath = os.path.join(RESULTS, junit)
            if os.path.exists(jpath):
                os.unlink(jpath)
        print('\n===== %s: %s' % (name, ' '.join(cmd)), flush=True)
        start = time.time()
        rc = subprocess.call(cmd, cwd=ROOT, env=env)
        took = time.time() - start
        p = f = sk = 0
        note = ''
        if junit and os.path.exists(os.path.join(RESULTS, junit)):
            p, f, sk = junit_counts(os.path.join(RESULTS, junit))
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
        total_pass += p
        total_fail += f
        total_skip += sk
        rows.append((name, p, f, sk, took, note))
    print('\n%-28s %7s %7s %7s %9s  %s' % ('step', 'passed', 'failed', 'skipped', 'seconds', 'note'))
    for name, p, f, sk, took, note in rows:
        print('%-28s %7d %7d %7d %9.1f  %s' % (name, p, f, sk, took, note))
    print('tests: %d passed, %d failed' % (total_pass, total_fail))
    return 1 if total_fail else 0


if __name__ == '__main__':
    sys.exit(main())
