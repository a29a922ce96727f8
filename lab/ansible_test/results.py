#!/usr/bin/env python3
"""Turn ansible-test's output into one result file per run for the lead's aggregator.

  results.py sanity --junit-dir DIR --expected-tests FILE --log LOG --name NAME --xml OUT.xml --txt OUT.txt
  results.py units  --junit-dir DIR --name NAME --xml OUT.xml --txt OUT.txt

sanity: ansible-test `sanity --junit` writes one JUnit file per sanity test (ansible-test-sanity-<test>[-python-X.Y].xml);
        they are merged into a single <testsuite> with exactly one <testcase> per sanity test name.  A test named by
        `--list-tests` without a result file becomes a failure ("no result"), and so does a test that ansible-test
        skipped for a reason other than "no applicable targets" (missing tool, missing venv support, missing libyaml),
        detected from ansible-test's warnings in LOG.
units:  the pytest JUnit files (python<ver>-<context>-units.xml, one per context) are merged; zero tests is a failure.
Exit status: 0 all passed, 1 failures/errors, 2 the results could not be read.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

# ansible-test warnings that mean a sanity test did not really run (see commands/sanity/__init__.py and
# find_executable(required='warning') in util.py).  Matched against the log; group 1 names the test or tool.
SKIP_WARNINGS = [
    re.compile(r'WARNING: Skipping sanity test "([^"]+)"'),
    re.compile(r'WARNING: Sanity test "([^"]+)" .*(?:skipp|missing)', re.I),
]
TOOL_WARNING = re.compile(r'WARNING: (?:Required program|Unable to find) "?([\w.-]+)"?')
TOOL_TO_TEST = {'shellcheck': 'shellcheck', 'pwsh': 'pslint'}


def parse_all(junit_dir: pathlib.Path, pattern: str) -> list[tuple[pathlib.Path, ET.Element]] | None:
    """(file, root element) of each JUnit file matching pattern, by name; None (said on stderr) when one does not parse."""
    roots = []
    for f in sorted(junit_dir.glob(pattern)):
        try:
            roots.append((f, ET.parse(f).getroot()))
        except ET.ParseError as ex:
            print(f'ERROR: cannot parse {f}: {ex}', file=sys.stderr)
            return None
    return roots


def write(cases: list[tuple[str, str, str, str]], name: str, xml_out: pathlib.Path, txt_out: pathlib.Path, classname: str) -> int:
    """cases: (test name, status pass|fail|skip|error, message, detail)."""
    suite = ET.Element('testsuite', name=name, tests=str(len(cases)),
                       failures=str(sum(c[1] == 'fail' for c in cases)),
                       errors=str(sum(c[1] == 'error' for c in cases)),
                       skipped=str(sum(c[1] == 'skip' for c in cases)))
    for test, status, message, detail in cases:
        tc = ET.SubElement(suite, 'testcase', classname=classname, name=test)
        if status in ('fail', 'error', 'skip'):
            tag = {'fail': 'failure', 'error': 'error', 'skip': 'skipped'}[status]
            el = ET.SubElement(tc, tag, message=message[:500])
            el.text = detail or message
    root = ET.Element('testsuites', name=name)
    root.append(suite)
    ET.indent(root)
    xml_out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(xml_out, encoding='utf-8', xml_declaration=True)
    lines = []
    for test, status, message, detail in cases:
        lines.append(f'{status.upper():5} {test}' + (f'  -- {message}' if message and status != 'pass' else ''))
        if status in ('fail', 'error') and detail and detail != message:
            lines.extend('        ' + d for d in detail.splitlines()[:50])
    counts = {s: sum(c[1] == s for c in cases) for s in ('pass', 'fail', 'error', 'skip')}
    lines.append(f'# {name}: {len(cases)} tests, {counts["pass"]} passed, {counts["fail"]} failed, '
                 f'{counts["error"]} errors, {counts["skip"]} skipped')
    txt_out.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    print('\n'.join(lines))
    return 1 if counts['fail'] or counts['error'] else 0


def case_status(tc: ET.Element) -> tuple[str, str, str]:
    for tag, status in (('failure', 'fail'), ('error', 'error'), ('skipped', 'skip')):
        els = tc.findall(tag)
        if els:
            msg = '; '.join(filter(None, (e.get('message') or '' for e in els))) or (els[0].text or '').strip()[:200]
            detail = '\n'.join(filter(None, ((e.text or '').strip() for e in els)))
            return status, msg, detail.strip()
    return 'pass', '', ''


def sanity(a: argparse.Namespace) -> int:
    expected = [l.strip() for l in a.expected_tests.read_text().splitlines() if l.strip()]
    log = a.log.read_text(errors='replace') if a.log and a.log.exists() else ''
    bad_skips: dict[str, str] = {}
    for line in log.splitlines():
        for rx in SKIP_WARNINGS:
            m = rx.search(line)
            if m:
                bad_skips[m.group(1)] = line.strip()
        m = TOOL_WARNING.search(line)
        if m:
            test = TOOL_TO_TEST.get(m.group(1), m.group(1))
            bad_skips[test] = line.strip()
    results: dict[str, tuple[str, str, str]] = {}
    roots = parse_all(a.junit_dir, 'ansible-test-sanity-*.xml')
    if roots is None:
        return 2
    for f, root in roots:
        for tc in root.iter('testcase'):
            # names look like "pylint" or "import-python-3.12"; the sanity test name is the file's stem
            test = f.stem[len('ansible-test-sanity-'):]
            test = re.sub(r'-python-\d+\.\d+$', '', test)
            status, msg, detail = case_status(tc)
            prev = results.get(test)
            if prev and prev[0] == 'fail':
                continue
            results[test] = (status, msg, detail)
    cases = []
    for test in expected + sorted(set(results) - set(expected)):
        status, msg, detail = results.get(test, ('fail', 'no result written by ansible-test', ''))
        if status == 'skip' and test in bad_skips:
            status, msg, detail = 'fail', f'did not run: {bad_skips[test]}', bad_skips[test]
        cases.append((test, status, msg, detail))
    for test, why in bad_skips.items():
        if test not in results and test not in expected:
            cases.append((test, 'fail', f'did not run: {why}', why))
    return write(cases, a.name, a.xml, a.txt, 'sanity')


def units(a: argparse.Namespace) -> int:
    cases = []
    roots = parse_all(a.junit_dir, '*-units.xml')
    if roots is None:
        return 2
    for _f, root in roots:
        for tc in root.iter('testcase'):
            name = f"{tc.get('classname', '')}::{tc.get('name', '')}".lstrip(':')
            status, msg, detail = case_status(tc)
            cases.append((name, status, msg, detail))
    if not cases:
        cases.append(('units', 'error', f'no unit test results in {a.junit_dir} (no tests collected, or ansible-test failed early)', ''))
    return write(cases, a.name, a.xml, a.txt, 'units')


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('kind', choices=('sanity', 'units'))
    ap.add_argument('--junit-dir', type=pathlib.Path, required=True)
    ap.add_argument('--expected-tests', type=pathlib.Path)
    ap.add_argument('--log', type=pathlib.Path)
    ap.add_argument('--name', required=True)
    ap.add_argument('--xml', type=pathlib.Path, required=True)
    ap.add_argument('--txt', type=pathlib.Path, required=True)
    a = ap.parse_args()
    if a.kind == 'sanity':
        if not a.expected_tests:
            ap.error('--expected-tests is required for sanity')
        return sanity(a)
    return units(a)


if __name__ == '__main__':
    sys.exit(main())
