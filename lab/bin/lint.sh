#!/usr/bin/env bash
# ansible-lint (profile production, offline) and yamllint over the collection, with .venv, plus the role variables
# check (lab/bin/gen-variables-doc.py --check: docs/variables.md current, defaults/ and argument_specs agree).
#   lab/bin/lint.sh [extra ansible-lint args]
# Writes build/test-results/lint.txt (summary + all findings), lint.xml (JUnit: one testcase per tool),
# ansible-lint.log, yamllint.log, variables-doc.log.  Exit status non-zero when any of them fails or cannot run.
# Never reaches Galaxy: .ansible-lint sets offline: true (no requirements.yml install, no schema refresh,
# no version check); collections come from the `ansible` package in .venv and this collection from
# build/collections (lab/bin/collections-path.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VENV=$ROOT/.venv
RESULTS=$ROOT/build/test-results
mkdir -p "$RESULTS"
rm -f "$RESULTS"/lint.{txt,xml} "$RESULTS"/{ansible-lint,yamllint,variables-doc}.log
for t in ansible-lint yamllint; do
  [ -x "$VENV/bin/$t" ] || { echo "ERROR: $VENV/bin/$t missing (run lab/bin/bootstrap.sh)" >&2; exit 2; }
done
{ [ -f .ansible-lint ] && [ -f .yamllint ]; } || { echo "ERROR: .ansible-lint or .yamllint missing" >&2; exit 2; }
grep -qE '^offline:[[:space:]]*true' .ansible-lint || { echo "ERROR: .ansible-lint must set offline: true" >&2; exit 2; }

export PATH="$VENV/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH
ANSIBLE_COLLECTIONS_PATH=$(bash "$ROOT/lab/bin/collections-path.sh")
export ANSIBLE_LINT_NODEPS=0 NO_COLOR=1 ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
# ansible-lint offline keeps its module stubs (mock_modules: awx.awx) under $ANSIBLE_HOME (default ~/.ansible, shared
# by every checkout of the machine) and removes them when it ends: a second ansible-lint ending meanwhile (another
# checkout's lint) took them away under this one ("Unexpected error code 4 from ... --syntax-check" on the awx_config
# role, session 25). Each checkout's lint has its own.
export ANSIBLE_HOME="$ROOT/build/ansible-lint-home"
mkdir -p "$ANSIBLE_HOME"

yrc=0 arc=0 vrc=0
start=$(date +%s)
yamllint --strict -f parsable -c .yamllint . > "$RESULTS/yamllint.log" 2>&1 || yrc=$?
ystart=$(date +%s)
ansible-lint --offline -c .ansible-lint -f pep8 --nocolor "$@" > "$RESULTS/ansible-lint.log" 2>&1 || arc=$?
end=$(date +%s)
"$VENV/bin/python" lab/bin/gen-variables-doc.py --check > "$RESULTS/variables-doc.log" 2>&1 || vrc=$?
vend=$(date +%s)

# ansible-lint prints findings as "path:line[:col]: rule: message" with -f pep8; anything else is chatter
# (and, on a crash, the traceback, which the exit status catches).
python3 - "$RESULTS" "$yrc" "$arc" "$((ystart - start))" "$((end - ystart))" "$vrc" "$((vend - end))" <<'PY'
import os, re, sys, xml.etree.ElementTree as ET
results, yrc, arc, yt, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
vrc, vt = int(sys.argv[6]), sys.argv[7]
def read(n):
    with open(os.path.join(results, n), errors='replace') as f:
        return f.read()
ylog, alog, vlog = read('yamllint.log'), read('ansible-lint.log'), read('variables-doc.log')
finding = re.compile(r'^[^\s:][^:]*:\d+(:\d+)?: ')
yf = [l for l in ylog.splitlines() if finding.match(l)]
af = [l for l in alog.splitlines() if finding.match(l)]
# gen-variables-doc.py prints "path:line: variables-doc: ..." per problem ("path:line: warning: ..." does not fail)
vf = [l for l in vlog.splitlines() if finding.match(l) and ': variables-doc: ' in l]
tools = [('yamllint', yrc, yf, ylog, yt), ('ansible-lint', arc, af, alog, at), ('variables-doc', vrc, vf, vlog, vt)]
suite = ET.Element('testsuite', name='lint', tests=str(len(tools)), failures=str(sum(1 for t in tools if t[1])), errors='0', skipped='0')
out = []
for name, rc, finds, log, secs in tools:
    tc = ET.SubElement(suite, 'testcase', classname='lint', name=name, time=secs)
    status = 'PASS' if rc == 0 else 'FAIL'
    out.append(f'{status:5} {name} (exit {rc}, {len(finds)} findings, {secs}s)')
    out.extend('        ' + l for l in finds)
    if name == 'variables-doc':
        out.extend('        ' + l for l in log.splitlines() if finding.match(l) and ': warning: ' in l)
    if rc:
        # exit status without findings = the tool itself failed (bad config, crash, Galaxy access, ...)
        detail = '\n'.join(finds) if finds else log[-4000:]
        if not finds:
            out.extend('        ' + l for l in log.splitlines()[-40:])
        el = ET.SubElement(tc, 'failure', message=f'{name} exited {rc} with {len(finds)} findings')
        el.text = detail
root = ET.Element('testsuites', name='lint'); root.append(suite); ET.indent(root)
ET.ElementTree(root).write(os.path.join(results, 'lint.xml'), encoding='utf-8', xml_declaration=True)
with open(os.path.join(results, 'lint.txt'), 'w') as f:
    f.write('\n'.join(out) + '\n')
print('\n'.join(out))
PY
[ "$yrc" = 0 ] && [ "$arc" = 0 ] && [ "$vrc" = 0 ]
