#!/usr/bin/env python3
"""Measure issue #39 target 1: how many files a maintainer edits by hand for each change docs/extending.md describes,
and how many the tools (`make generate`, bump-pin.py) write, by doing the change in a scratch copy of the tree.

    .venv/bin/python lab/bin/measure-extension.py                 every scenario, guard tests included
    .venv/bin/python lab/bin/measure-extension.py kube pin        some scenarios
    .venv/bin/python lab/bin/measure-extension.py --no-tests      counts only (seconds instead of minutes)
    .venv/bin/python lab/bin/measure-extension.py --json FILE     the results as JSON too

Each scenario runs in its own `git worktree add --detach` of the commit (--rev, default HEAD; uncommitted changes are
not measured) under /tmp, removed afterwards (--keep leaves it). The scenario edits the files docs/extending.md tells
a maintainer to edit (the hand edits), runs the tools it names (bump-pin.py --write; then what `make generate` runs:
gen-from-model.py, gen-role-readmes.py, gen-variables-doc.py), and counts the files `git status` shows changed:

  hand       the files the scenario edited itself (a file a tool also rewrote counts here);
  generated  the files only the tools wrote;
  counted    hand edits the scenario cannot do without reading upstream or building the lab (the new release's
             conformance rows, the lab's control-plane set): named and counted, not performed.

Then the guard tests run in the scratch tree (lab/tests/tooling and the homes' unit tests): they pass only when the
hand edits plus the tools left the tree consistent, which is what shows the count is complete. Exit status 1 when a
scenario's edit no longer applies (its text moved: the scenario is out of date) or a guard test fails.

Scenarios (docs/extending.md): kube (Kubernetes 1.<MAX_MINOR + 1>), pin (a pin bump: nvidia-device-plugin to a made-up
next patch release), distro (Ubuntu 26.04, a release of a known family). A new strategy is not scripted: its renderer,
Stack and tests are code a maintainer writes (docs/extending.md lists its files).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATE = (['lab/bin/gen-from-model.py'], ['lab/bin/gen-role-readmes.py'], ['lab/bin/gen-variables-doc.py'])
UNIT_GUARDS = ('tests/unit/plugins/module_utils/_common', 'tests/unit/plugins/module_utils/_cluster',
               'tests/unit/plugins/modules')
TOOLING_GUARDS = ('lab/tests/tooling',)


EDITED = set()  # the files the scenario edited itself (its hand edits), per run


class Stale(Exception):
    """A scenario's edit did not apply: the text it edits moved (update the scenario with docs/extending.md)."""


def sh(args, cwd, env=None, check=True):
    p = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if check and p.returncode:
        raise RuntimeError('%s failed (%d):\n%s' % (' '.join(args), p.returncode, p.stdout[-3000:]))
    return p


def edit(tree, rel, pattern, repl, count=1):
    """Replace pattern (a regex) by repl in tree/rel exactly count times, else Stale."""
    path = os.path.join(tree, rel)
    with open(path, encoding='utf-8') as f:
        text = f.read()
    new, n = re.subn(pattern, repl, text)
    if count is not None and n != count:
        raise Stale('%s: %r matched %d times, expected %d' % (rel, pattern, n, count))
    with open(path, 'w', encoding='utf-8') as f:
        f.write(new)
    if new != text:
        EDITED.add(rel)


def changed(tree):
    out = sh(['git', 'status', '--porcelain', '--untracked-files=all'], tree).stdout
    return sorted(line[3:] for line in out.splitlines() if line[3:] and not line[3:].startswith('build/'))


def load(tree, name):
    """A _common home of the scratch tree, as a fresh module."""
    import importlib.util
    path = os.path.join(tree, 'plugins', 'module_utils', '_common', name + '.py')
    spec = importlib.util.spec_from_file_location('measure_' + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- scenarios: (hand edits) -> (tool commands, counted)

def scenario_kube(tree):
    """Kubernetes 1.<MAX_MINOR + 1>: docs/extending.md "A new Kubernetes minor"."""
    kv = load(tree, 'kube_versions')
    old, new = kv.MAX_MINOR, kv.MAX_MINOR + 1
    lo, hi = kv.UPSTREAM_SUPPORTED
    edit(tree, 'plugins/module_utils/_common/kube_versions.py', r'\nMAX_MINOR = %d\n' % old, '\nMAX_MINOR = %d\n' % new)
    edit(tree, 'plugins/module_utils/_common/kube_versions.py', r'\nUPSTREAM_SUPPORTED = \(%d, %d\)' % (lo, hi),
         '\nUPSTREAM_SUPPORTED = (%d, %d)' % (lo + 1, hi + 1))

    def after_generate():
        # what make generate left: every file outside lab/, tests/ and changelogs/ still stating a range that ends at
        # the old MAX_MINOR (test_kube_versions.py names them), edited by hand
        rx = re.compile(_RANGE % ('|'.join(str(s) for s in range_starts(kv)), old))
        for rel in hand_ranges(tree, kv):
            edit(tree, rel, rx.pattern, lambda m: m.group(0)[:-len(str(old))] + str(new), count=None)
            # a quoted refusal of the first minor past the range ("Kubernetes 1.38 is not supported")
            edit(tree, rel, r'Kubernetes 1\.%d is not supported' % new,
                 'Kubernetes 1.%d is not supported' % (new + 1), count=None)
    counted = ['docs/conformance/kube-scheduler.md (the new release\'s scheduler config types read, its row added)',
               'lab/kube/validate.py SUPPORTED_MINORS (the 1.%d schemas of kubernetes-validate)' % new]
    return list(GENERATE), counted, 'Kubernetes 1.%d' % new, after_generate


def range_starts(kv):
    return (kv.MIN_MINOR, kv.SUPPORTED_MIN_MINOR, kv.SCHEDULER_CONFIG_RENDERED[0][0])


_RANGE = r'\bv?1\.(%s)(?: to | - | \u2013 |-|\u2013| through )v?1\.%d\b(?!\.\d)'


def _unmarked_ranges(text, kv):
    """The range statements ending at MAX_MINOR outside <!-- gen:kube --> markers (what make generate leaves)."""
    text = re.sub(r'<!-- gen:kube [a-z0-9-]+ -->[^<]*<!-- /gen -->', '', text)
    return re.findall(_RANGE % ('|'.join(str(s) for s in range_starts(kv)), kv.MAX_MINOR), text)


def hand_ranges(tree, kv):
    """Files outside lab/, tests/ and changelogs/ (and the generated READMEs and variables.md) with a range statement
    ending at MAX_MINOR outside the markers."""
    out = []
    for rel in sh(['git', 'ls-files'], tree).stdout.splitlines():
        if rel.startswith(('lab/', 'tests/', 'changelogs/')) or rel.endswith('README.md') and rel != 'README.md':
            continue
        if rel == 'docs/variables.md' or not rel.endswith(('.py', '.yml', '.yaml', '.md')):
            continue
        with open(os.path.join(tree, rel), encoding='utf-8') as f:
            text = f.read()
        if _unmarked_ranges(text, kv):
            out.append(rel)
    return out


PIN = 'nvidia-device-plugin'


def _next_patch(tag):
    m = re.match(r'^(v?\d+\.\d+\.)(\d+)$', tag)
    if not m:
        raise Stale('pin %s: tag %r is no vX.Y.Z' % (PIN, tag))
    return '%s%d' % (m.group(1), int(m.group(2)) + 1)


def scenario_pin(tree):
    """A pin bump: docs/extending.md "An image or chart bump" (bump-pin.py --write, then the conformance rows read
    again at the new release, by hand)."""
    pins = load(tree, 'pins')
    pin = pins.PINS[PIN]
    old, new = pin['tag'], _next_patch(pin['tag'])
    tools = [['lab/bin/bump-pin.py', PIN, new, '--write']] + list(GENERATE)

    def after_tools():
        # upstream_ref names the release the facts were read from: by hand where bump-pin left it
        if load(tree, 'pins').PINS[PIN]['upstream_ref'] != new:
            edit(tree, 'plugins/module_utils/_common/pins.py', r"(upstream='%s', upstream_ref=')%s(')" % (
                re.escape(pin['upstream']), re.escape(pin['upstream_ref'])), r'\g<1>%s\g<2>' % new)
        # the conformance rows read again at the new release (a maintainer reads upstream; here the rows that cite the
        # old release are taken to hold at the new one)
        edit(tree, pin['conformance'], r'(%s,[^|;]*?)\b%s\b' % (re.escape(pin['upstream']), re.escape(old)),
             r'\g<1>%s' % new, count=None)
    return tools, [], '%s %s -> %s' % (PIN, old, new), after_tools


def scenario_distro(tree):
    """Ubuntu 26.04 (resolute): docs/extending.md "A new Linux distribution", a release of a known family."""
    edit(tree, 'plugins/module_utils/_common/platforms.py', r"('versions': \('jammy', 'noble')\)",
         r"\g<1>, 'resolute')")
    return list(GENERATE), [], 'Ubuntu 26.04 (resolute)', None


SCENARIOS = {'kube': scenario_kube, 'pin': scenario_pin, 'distro': scenario_distro}


# ---------------------------------------------------------------- running one

def guards(tree, py):
    """Run the guard tests in the scratch tree: [(what, passed, seconds, summary line)]."""
    out = []
    pytest = os.path.join(os.path.dirname(py), 'pytest')
    # unit tests import the collection as ansible_collections.gpuops.k8s_gpu
    ac = tempfile.mkdtemp(prefix='gpuops-measure-ac-')
    try:
        os.makedirs(os.path.join(ac, 'ansible_collections', 'gpuops'))
        os.symlink(tree, os.path.join(ac, 'ansible_collections', 'gpuops', 'k8s_gpu'))
        coll = os.path.join(ac, 'ansible_collections', 'gpuops', 'k8s_gpu')
        env = dict(os.environ, PYTHONPATH=ac)
        runs = [(UNIT_GUARDS, coll, env, ['-p', 'no:cacheprovider', '--import-mode=importlib', '--rootdir', ac]),
                (TOOLING_GUARDS, tree, dict(os.environ), ['-p', 'no:cacheprovider'])]
        for paths, cwd, e, extra in runs:
            t = time.time()
            p = sh([pytest, '-q'] + extra + list(paths), cwd, env=e, check=False)
            lines = [x for x in p.stdout.splitlines() if re.search(r'\d+ (passed|failed|error)', x)]
            out.append((' '.join(paths), p.returncode == 0, round(time.time() - t, 1),
                        lines[-1] if lines else p.stdout[-2000:]))
            if p.returncode:
                fails = [x for x in p.stdout.splitlines() if x.startswith(('FAILED', 'ERROR', 'E  '))]
                out[-1] = out[-1][:3] + (out[-1][3] + '\n' + '\n'.join(fails[:20]),)
    finally:
        shutil.rmtree(ac, ignore_errors=True)
    return out


def run(name, rev, run_tests, keep):
    tree = tempfile.mkdtemp(prefix='gpuops-measure-%s-' % name)
    os.rmdir(tree)
    sh(['git', 'worktree', 'add', '--detach', '-q', tree, rev], ROOT)
    try:
        # the ignored venvs (make setup's: .venv, .venv-2.16), as make generate and the tooling tests use them
        for venv in sorted(os.listdir(ROOT)):
            if venv.startswith('.venv') and os.path.isdir(os.path.join(ROOT, venv)):
                os.symlink(os.path.realpath(os.path.join(ROOT, venv)), os.path.join(tree, venv))
        py = os.path.join(tree, '.venv', 'bin', 'python')
        if changed(tree):
            raise RuntimeError('the scratch tree is not clean: %s' % changed(tree))
        EDITED.clear()
        tools, counted, what, after = SCENARIOS[name](tree)
        t = time.time()
        for cmd in tools:
            sh([py] + cmd, tree)
        if after:
            # the hand edits the tools leave (named by the guard tests), then make generate again
            after()
            for cmd in GENERATE:
                sh([py] + cmd, tree)
        tool_s = round(time.time() - t, 1)
        hand = sorted(EDITED)
        generated = [p for p in changed(tree) if p not in EDITED]
        result = {'scenario': name, 'change': what, 'hand': hand, 'counted': counted, 'generated': generated,
                  'tools': [' '.join(c) for c in tools], 'tool_seconds': tool_s}
        if run_tests:
            result['guards'] = [{'tests': g[0], 'passed': g[1], 'seconds': g[2], 'summary': g[3]}
                                for g in guards(tree, py)]
        return result
    finally:
        if keep:
            print('kept %s (git worktree remove --force %s)' % (tree, tree))
        else:
            sh(['git', 'worktree', 'remove', '--force', tree], ROOT, check=False)
            shutil.rmtree(tree, ignore_errors=True)
            sh(['git', 'worktree', 'prune'], ROOT, check=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('scenarios', nargs='*', help='kube, pin, distro (default: all)')
    ap.add_argument('--rev', default='HEAD', help='the commit to measure (default HEAD)')
    ap.add_argument('--no-tests', action='store_true', help='count only, do not run the guard tests')
    ap.add_argument('--keep', action='store_true', help='leave the scratch worktrees')
    ap.add_argument('--json', help='write the results here too')
    args = ap.parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        ap.error('unknown scenario %s (known: %s)' % (', '.join(bad), ', '.join(SCENARIOS)))
    commit = sh(['git', 'rev-parse', '--short', args.rev], ROOT).stdout.strip()
    print('measuring %s at %s' % (', '.join(names), commit))
    results, rc = [], 0
    for name in names:
        t = time.time()
        try:
            r = run(name, args.rev, not args.no_tests, args.keep)
        except Stale as e:
            print('%s: STALE scenario: %s' % (name, e))
            rc = 1
            continue
        r['seconds'] = round(time.time() - t, 1)
        r['commit'] = commit
        results.append(r)
        print('\n== %s: %s' % (name, r['change']))
        print('hand %d + counted %d (by hand, not performed) + generated %d' % (
            len(r['hand']), len(r['counted']), len(r['generated'])))
        for p in r['hand']:
            print('  hand       %s' % p)
        for p in r['counted']:
            print('  counted    %s' % p)
        for p in r['generated']:
            print('  generated  %s' % p)
        for g in r.get('guards', ()):
            print('  guard %s %s (%.1f s): %s' % ('PASS' if g['passed'] else 'FAIL', g['tests'], g['seconds'],
                                                 g['summary']))
            rc = rc or (0 if g['passed'] else 1)
        print('  %.1f s (tools %.1f s)' % (r['seconds'], r['tool_seconds']))
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(results, f, indent=1)
    return rc


if __name__ == '__main__':
    sys.exit(main())
