#!/usr/bin/env bash
# Run ansible-test sanity or units for this collection with a given venv, offline apart from PyPI.
#
#   lab/bin/ansible-test.sh VENV sanity|units [extra ansible-test args...]
#   e.g. lab/bin/ansible-test.sh .venv sanity
#        lab/bin/ansible-test.sh .venv-2.16 units
#        lab/bin/ansible-test.sh .venv sanity --test pylint --test validate-modules
#
# 1. copies the collection (git ls-files -co --exclude-standard, minus lab/ .ci/ molecule/ build outputs) into
#    build/ansible_collections/gpuops/k8s_gpu/ (a real copy: ansible-test resolves the real cwd);
# 2. writes ansible-test's pip bootstrap script into ~/.ansible/test/cache (lab/ansible_test/prepare_offline.py),
#    so nothing is fetched from ci-files.testing.ansible.com; packages come from PyPI with pip;
# 3. runs `ansible-test <kind> --local --python 3.12 --requirements --color no` there (sanity also --junit; units
#    with --num-workers 1 unless given another count);
# 4. writes build/test-results/<venv>-<kind>.xml (JUnit) and .txt (summary) and .log (full output).
# Exit status: non-zero when ansible-test fails, a test fails, a sanity test did not run (missing tool/venv),
# a default sanity test has no result, or units collected no tests.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
usage() { echo "usage: $0 VENV sanity|units [ansible-test args...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
VENV_ARG=$1 KIND=$2; shift 2
case "$KIND" in sanity|units) ;; *) usage ;; esac
case "$VENV_ARG" in /*) VENV=$VENV_ARG ;; *) VENV=$ROOT/$VENV_ARG ;; esac
VENV=$(cd "$VENV" 2>/dev/null && pwd) || { echo "ERROR: venv $VENV_ARG not found (run lab/bin/bootstrap.sh)" >&2; exit 2; }
PY=$VENV/bin/python
ANSIBLE_TEST=$VENV/bin/ansible-test
[ -x "$ANSIBLE_TEST" ] || { echo "ERROR: $ANSIBLE_TEST missing" >&2; exit 2; }
NAME=$(basename "$VENV")   # .venv, .venv-2.16 -> build/test-results/.venv-sanity.xml etc. (names lab/bin/run-tests.py reads)
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$PYVER" = 3.12 ] || { echo "ERROR: $PY is Python $PYVER, expected 3.12" >&2; exit 2; }

NS=gpuops COLL=k8s_gpu
DEST=$ROOT/build/ansible_collections/$NS/$COLL
RESULTS=$ROOT/build/test-results
mkdir -p "$RESULTS"
LOG=$RESULTS/$NAME-$KIND.log
log() { printf '[ansible-test.sh %s %s] %s\n' "$NAME" "$KIND" "$*" >&2; }
rm -f "$RESULTS/$NAME-$KIND".{xml,txt,log}

# --- 1. copy the collection -------------------------------------------------------------------------------
# A fresh tree per run, so files deleted in the repo and stale tests/output results cannot leak into a run.
# Runs of different venvs/kinds must not share the tree concurrently; a lock serialises them.
exec 9>"$ROOT/build/.ansible-test.lock"
flock 9
LIST=$(mktemp); trap 'rm -f "$LIST"' EXIT
( cd "$ROOT" && git ls-files -z -co --exclude-standard ) \
  | grep -zvE '^(lab|\.ci|\.config|molecule|build|tests/output|\.venv[^/]*|\.cache|changelogs/\.plugin-cache\.yaml)(/|$)|\.tar\.gz$' > "$LIST" || true
[ -s "$LIST" ] || { echo "ERROR: no collection files found in $ROOT" >&2; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST"
rsync -a --from0 --files-from="$LIST" --ignore-missing-args "$ROOT/" "$DEST/"
# ansible-test looks for .git upwards from the collection root to list its files; without one here it would find
# this repository, where build/ is ignored, and see no files at all.  A private (empty) git repo makes it list
# the copied files (untracked, honouring the collection's .gitignore).
git -C "$DEST" init -q
log "copied $(tr -cd '\0' < "$LIST" | wc -c) files into ${DEST#"$ROOT"/}"

# kubernetes.core beside the collection for the units that take it as their oracle (test_k8s_native.py): a venv
# without the ansible package (ansible-core 2.16 alone) gets the main venv's copy; one that has it uses its own.
rm -rf "$ROOT/build/ansible_collections/kubernetes"
if [ "$KIND" = units ] && ! "$PY" -c 'import ansible_collections.kubernetes.core' 2>/dev/null; then
  CORE=$ROOT/.venv/lib/python$PYVER/site-packages/ansible_collections/kubernetes/core
  [ -d "$CORE" ] || { echo "ERROR: kubernetes.core not found in $VENV nor at $CORE (run lab/bin/bootstrap.sh)" >&2; exit 2; }
  mkdir -p "$ROOT/build/ansible_collections/kubernetes"
  ln -s "$CORE" "$ROOT/build/ansible_collections/kubernetes/core"
  log "kubernetes.core for the units: ${CORE#"$ROOT"/}"
fi

# --- 2. offline stand-ins ---------------------------------------------------------------------------------
"$PY" "$ROOT/lab/ansible_test/prepare_offline.py" --work-dir "$ROOT/build/ansible_test_cache" >&2

# --- 3. run -------------------------------------------------------------------------------------------------
export PATH="$VENV/bin:$PATH"
unset ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_CONFIG
COMMON=(--local --python 3.12 --requirements --color no)
rc=0
start=$(date +%s)
cd "$DEST"
if [ "$KIND" = sanity ]; then
  command -v shellcheck >/dev/null || { echo "ERROR: shellcheck not installed (apt-get install shellcheck); the shellcheck sanity test cannot run" >&2; exit 2; }
  if find . -name '*.ps1' -o -name '*.psm1' -o -name '*.psd1' | grep -q . && ! command -v pwsh >/dev/null; then
    echo "ERROR: the collection has PowerShell files but pwsh is not installed; pslint cannot run" >&2; exit 2
  fi
  # tests selected by the caller (--test X) or ansible-test's default list; each must produce a result
  EXPECTED=$RESULTS/$NAME-sanity.expected
  "$ANSIBLE_TEST" sanity --list-tests "${COMMON[@]}" "$@" 2>/dev/null | sed -n 's/^\([a-z0-9_.-]\+\)$/\1/p' > "$EXPECTED"
  [ -s "$EXPECTED" ] || { echo "ERROR: ansible-test sanity --list-tests returned nothing" >&2; exit 2; }
  log "sanity tests: $(tr '\n' ' ' < "$EXPECTED")"
  "$ANSIBLE_TEST" sanity "${COMMON[@]}" --junit -v "$@" 2>&1 | tee "$LOG" || rc=$?
else
  # One pytest-xdist worker, not ansible-test's `-n auto` (two here): each worker collects and imports every test
  # module again, and ansible-test forks every test from its worker anyway (its ansible_forked plugin), so a second
  # worker only buys wall time on a machine the whole of make test keeps busy. Measured back to back (docs/lab.md,
  # "Session 20"): CPU of the units step, not wall, is what make test's run time follows. A caller's --num-workers wins.
  WORKERS=(--num-workers 1)
  for a in "$@"; do case "$a" in --num-workers|--num-workers=*) WORKERS=() ;; esac; done
  "$ANSIBLE_TEST" units "${COMMON[@]}" "${WORKERS[@]}" -v "$@" 2>&1 | tee "$LOG" || rc=$?
fi
cd "$ROOT"
log "ansible-test $KIND exited $rc after $(( $(date +%s) - start ))s"

# --- 4. results -------------------------------------------------------------------------------------------
JUNIT=$DEST/tests/output/junit
rrc=0
if [ "$KIND" = sanity ]; then
  "$PY" "$ROOT/lab/ansible_test/results.py" sanity --junit-dir "$JUNIT" --expected-tests "$EXPECTED" --log "$LOG" \
     --name "$NAME-sanity" --xml "$RESULTS/$NAME-sanity.xml" --txt "$RESULTS/$NAME-sanity.txt" || rrc=$?
else
  "$PY" "$ROOT/lab/ansible_test/results.py" units --junit-dir "$JUNIT" \
     --name "$NAME-units" --xml "$RESULTS/$NAME-units.xml" --txt "$RESULTS/$NAME-units.txt" || rrc=$?
fi
log "results: ${RESULTS#"$ROOT"/}/$NAME-$KIND.{xml,txt,log}; ansible-test outputs: ${DEST#"$ROOT"/}/tests/output/"
[ "$rc" = 0 ] && [ "$rrc" = 0 ] && exit 0
log "FAILED (ansible-test rc=$rc, results rc=$rrc)"
exit 1
