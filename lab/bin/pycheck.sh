#!/usr/bin/env bash
# Type check and small lint of the collection's Python, with .venv (the `pycheck` step of make test; seconds):
#   mypy (lab/mypy.ini) on plugins/module_utils/_common, _node, _doctor and _esxi (and _cluster/kube, remediation, report, scheduler, stacks, metrics and the plans (pool_plan, label_plan, strategy_migration, gpu_sharing_drain, node_labels_apply), plugins/modules, filter and action), the code that runs on the
#   GPU nodes, the doctor's checks, the vSphere engine and the data every layer shares (and what they import), checked as Python 3.10 code (tests/config.yml's floor);
#   ruff (lab/ruff.toml) on plugins/ and lab/.
#   lab/bin/pycheck.sh
# Exit status non-zero when either finds something or cannot run. ansible-test's pep8/pylint sanity stay the style
# checks; ruff's rule set does not overlap them where they disagree (lab/ruff.toml says which rules are off and why).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VENV=$ROOT/.venv
for t in mypy ruff; do
  [ -x "$VENV/bin/$t" ] || { echo "ERROR: $VENV/bin/$t missing (run make setup: lab/requirements-dev.txt pins it)" >&2; exit 2; }
done
# the collection as ansible_collections.gpuops.k8s_gpu (a link to this checkout), as the modules import it
COLLECTIONS=$(bash "$ROOT/lab/bin/collections-path.sh")
rc=0
echo "== mypy (lab/mypy.ini): plugins/module_utils/_common, _node, _doctor, _esxi, _cluster/kube, remediation, report, scheduler, stacks, metrics and the plans (pool_plan, label_plan, strategy_migration, gpu_sharing_drain, node_labels_apply), plugins/modules, filter and action"
MYPYPATH=$COLLECTIONS "$VENV/bin/mypy" --config-file lab/mypy.ini \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks \
  -p ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics \
  -m ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan \
  -m ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan \
  -m ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.strategy_migration \
  -m ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.gpu_sharing_drain \
  -m ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.node_labels_apply \
  -p ansible_collections.gpuops.k8s_gpu.plugins.modules \
  -p ansible_collections.gpuops.k8s_gpu.plugins.filter \
  -p ansible_collections.gpuops.k8s_gpu.plugins.action || rc=1
# older pylint (ansible-test sanity on ansible-core 2.16) parses type comments and stops at one it cannot place:
# one after the opening bracket of a multi-line statement instead of at its end
echo "== type comments where Python's parser takes them: plugins/"
"$VENV/bin/python" - <<'PY' || rc=1
import ast, glob, sys
bad = 0
for path in sorted(glob.glob('plugins/**/*.py', recursive=True)):
    with open(path, encoding='utf-8') as f:
        try:
            ast.parse(f.read(), path, type_comments=True)
        except SyntaxError as e:
            bad += 1
            print('%s:%s: a type comment Python cannot place (move it to the end of the statement): %s' % (path, e.lineno, e.msg))
sys.exit(1 if bad else 0)
PY
echo "== ruff (lab/ruff.toml): plugins/ lab/"
"$VENV/bin/ruff" check --config lab/ruff.toml --no-cache plugins lab || rc=1
exit $rc
