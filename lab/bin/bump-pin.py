#!/usr/bin/env python3
"""Print (and with --write apply) what bumping one pin of plugins/module_utils/_common/pins.py touches.

    lab/bin/bump-pin.py --list                 the pins: name, kind, what the collection writes, upstream and ref
    lab/bin/bump-pin.py NAME VERSION           every tracked line that names the pin at its current tag
    lab/bin/bump-pin.py NAME VERSION --write   rewrite those lines and pins.py's tag to VERSION (and upstream_ref:
                                               to VERSION where it was the old tag, or to --ref REF)

An image is found by the last part of its repository and its tag (k8s-device-plugin:vX.Y.Z, as docs write it
without the registry); a chart, package or release by its tag, in the files that name the pin. What the script cannot
do is listed at the end: the upstream facts of the new release (its conformance table rows) must be read again
(tests/unit/plugins/module_utils/_common/test_pins.py fails until a row cites the new upstream_ref), and a chart bump
needs the chart's table entry in stacks/operator.py. changelogs/ is history and is left alone. See docs/extending.md.
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINS_PY = os.path.join(ROOT, 'plugins', 'module_utils', '_common', 'pins.py')
SKIP = ('changelogs/',)


def load_pins():
    spec = importlib.util.spec_from_file_location('gpuops_pins', PINS_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tracked_files():
    out = subprocess.run(['git', '-C', ROOT, 'ls-files', '-co', '--exclude-standard'], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    return [p for p in out.splitlines() if p and not p.startswith(SKIP) and os.path.isfile(os.path.join(ROOT, p))]


def pattern_for(pin):
    """(regex of the pin at its current tag, the anchor a file must also name for a bare tag)."""
    if pin['kind'] == 'image':
        short = pin['repository'].rsplit('/', 1)[-1]
        return re.compile(r'(?<![A-Za-z0-9_.-])(%s:)%s(?![A-Za-z0-9_.-])' % (re.escape(short), re.escape(pin['tag']))), None
    anchor = pin['repository']
    return re.compile(r'(?<![A-Za-z0-9_.])()%s(?![A-Za-z0-9_])' % re.escape(pin['tag'])), anchor


def occurrences(name, pin):
    rx, anchor = pattern_for(pin)
    for path in tracked_files():
        if path == 'plugins/module_utils/_common/pins.py':
            continue
        try:
            with open(os.path.join(ROOT, path), encoding='utf-8') as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if anchor and anchor not in text and name not in text:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                yield path, n, line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('name', nargs='?')
    ap.add_argument('version', nargs='?')
    ap.add_argument('--write', action='store_true', help='apply the bump')
    ap.add_argument('--list', action='store_true', help='list the pins')
    ap.add_argument('--ref', help='upstream_ref to write (default: VERSION where upstream_ref is the old tag)')
    args = ap.parse_args(argv)
    mod = load_pins()
    if args.list or not args.name:
        for name, p in sorted(mod.PINS.items()):
            print('%-28s %-8s %-70s %s@%s' % (name, p['kind'], mod.ref(name), p['upstream'], p['upstream_ref']))
        return 0
    if args.name not in mod.PINS:
        print('ERROR: no pin %r; pins: %s' % (args.name, ', '.join(sorted(mod.PINS))), file=sys.stderr)
        return 2
    if not args.version or not re.match(r'^[A-Za-z0-9][A-Za-z0-9._-]*$', args.version):
        print('ERROR: VERSION %r is not a tag (letters, digits, . _ -)' % (args.version,), file=sys.stderr)
        return 2
    pin = mod.PINS[args.name]
    old, new = pin['tag'], args.version
    rx, _anchor = pattern_for(pin)
    found = list(occurrences(args.name, pin))
    rel_pins = os.path.relpath(PINS_PY, ROOT)
    print('pin %s: %s -> %s' % (args.name, old, new))
    print('%s: tag=%r -> tag=%r' % (rel_pins, old, new))
    for path, n, line in found:
        print('%s:%d: %s' % (path, n, line.strip()))
    files = sorted(set(p for p, _n, _l in found) | {rel_pins})
    print('%d files, %d lines besides pins.py' % (len(files), len(found)))
    ref = args.ref or (new if pin['upstream_ref'] == old else None)
    if ref:
        print('%s: upstream_ref=%r -> upstream_ref=%r' % (rel_pins, pin['upstream_ref'], ref))
        print('by hand: read %s at %s and update the rows of %s (test_pins.py fails until one cites %s)'
              % (pin['upstream'], ref, pin['conformance'] or 'the conformance tables', ref))
    else:
        print('by hand: upstream_ref %r is not the tag: give --ref REF (the tag or commit of %s read), then update the '
              'rows of %s' % (pin['upstream_ref'], pin['upstream'], pin['conformance'] or 'the conformance tables'))
    if pin['kind'] == 'chart':
        print('by hand: add the chart release to CHARTS and CHART_IMAGES in plugins/module_utils/_cluster/'
              'operator.py')
    if old == new or not args.write:
        return 0
    with open(PINS_PY, encoding='utf-8') as f:
        text = f.read()
    block = re.compile(r"(\n    '%s': dict\(.*?tag=')%s(')" % (re.escape(args.name), re.escape(old)), re.S)
    text, count = block.subn(lambda m: m.group(1) + new + m.group(2), text, count=1)
    if count != 1:
        print('ERROR: %s: the tag of %s not found' % (rel_pins, args.name), file=sys.stderr)
        return 1
    if ref:
        block = re.compile(r"(\n    '%s': dict\(.*?upstream_ref=')%s(')" % (re.escape(args.name),
                                                                         re.escape(pin['upstream_ref'])), re.S)
        text, count = block.subn(lambda m: m.group(1) + ref + m.group(2), text, count=1)
        if count != 1:
            print('ERROR: %s: the upstream_ref of %s not found' % (rel_pins, args.name), file=sys.stderr)
            return 1
    with open(PINS_PY, 'w', encoding='utf-8') as f:
        f.write(text)
    for path in sorted(set(p for p, _n, _l in found)):
        full = os.path.join(ROOT, path)
        with open(full, encoding='utf-8') as f:
            lines = f.read().split('\n')
        lines = [rx.sub(lambda m: m.group(1) + new, line) for line in lines]
        with open(full, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines))
    print('written: %d files' % len(files))
    return 0


if __name__ == '__main__':
    sys.exit(main())
