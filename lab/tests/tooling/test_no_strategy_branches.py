"""The shared code names no strategy (issue #37): what a strategy shares, where its agents go, what it leaves on a node,
what the render reads for it and how its pods and migrations look are answered by its Stack (plugins/module_utils/
_cluster/stacks/base.py, one per strategy, stacks/registry). This test fails when a shared file compares
anything against a strategy's name again (==, !=, in, not in against the name or a tuple, list or set holding it), or
keys a dict literal by strategy names (a table per strategy), so the branches cannot come back. Strategy names in
messages and comments are fine. The strategy names are read from the model (gpu_strategy.py), not restated here."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODEL = os.path.join(ROOT, 'plugins', 'module_utils', '_common', 'gpu_strategy.py')
CLUSTER = os.path.join('plugins', 'module_utils', '_cluster')
# the files that serve every strategy: they ask the Stacks and must not branch on a strategy's name
SHARED_FILES = (
    os.path.join(CLUSTER, 'stacks', 'base.py'),
    os.path.join(CLUSTER, 'stacks', 'common.py'),
    os.path.join(CLUSTER, 'stacks', 'live.py'),
    os.path.join(CLUSTER, 'stacks', 'registry.py'),
    os.path.join(CLUSTER, 'stacks', 'render.py'),
    os.path.join(CLUSTER, 'stacks', 'shared.py'),
    os.path.join(CLUSTER, 'pool_plan.py'),
    os.path.join(CLUSTER, 'label_plan.py'),
    os.path.join(CLUSTER, 'strategy_migration.py'),
    os.path.join(CLUSTER, 'report', 'kube.py'),
    os.path.join(CLUSTER, 'report', 'model.py'),
    os.path.join('plugins', 'modules', 'gpu_doctor.py'),
)
# not yet listed: report/render.py (its gpushare memory table and gpu-manager's container column are
# sections of the report's output keyed by those names) and remediation/ (its 'dra' is a remediation mode, a
# DeviceTaintRule, not the strategy)
# the one table that maps the model's stack names (some equal to strategy names) to their modules
TABLE_OK = {os.path.join(CLUSTER, 'stacks', 'registry.py')}
OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def strategy_names():
    with open(MODEL) as f:
        names = re.findall(r"_entry\('([^']+)'", f.read())
    assert len(names) >= 10, 'no strategies read from %s' % MODEL
    return frozenset(names)


def _names_in(node, names):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
    return []


def branches(source, names, table_ok=False):
    """[(line, text)] of the comparisons against a strategy name in ``source`` (and dict literals keyed by them)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, OPS) for op in node.ops):
            found = []
            for side in [node.left] + list(node.comparators):
                found.extend(_names_in(side, names))
            if found:
                out.append((node.lineno, 'compares against %s' % ', '.join(sorted(set(found)))))
        elif isinstance(node, ast.Dict) and not table_ok:
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
            if len(keys) > 1:
                out.append((node.lineno, 'a table keyed by strategies %s' % ', '.join(keys)))
    return sorted(out)


@pytest.mark.parametrize('path', SHARED_FILES)
def test_shared_file_names_no_strategy(path):
    with open(os.path.join(ROOT, path)) as f:
        found = branches(f.read(), strategy_names(), table_ok=path in TABLE_OK)
    assert found == [], '%s branches on strategy names (ask the strategy\'s Stack instead, stacks/base.Stack): %s' \
        % (path, '; '.join('line %d %s' % lt for lt in found))


@pytest.mark.parametrize('code', [
    "if strategy == 'hami':\n    pass\n",
    "x = 'dra' != pool['strategy']\n",
    "ok = strategy in ('mps', 'time-slicing')\n",
    "ok = p.get('strategy') not in ['gpu-operator']\n",
    "family = {'gpushare': 1, 'volcano': 2}\n",
])
def test_the_check_finds_a_branch(code):
    """It cannot pass on nothing: each form of a strategy branch is found."""
    assert branches(code, strategy_names())


def test_the_check_leaves_messages_and_other_names_alone():
    code = ("msg = 'pool %s (strategy hami)' % p\nif kind == 'slice':\n    pass\nx = settings.get('nvidia')\n"
            "ok = s.name == name\n")
    assert branches(code, strategy_names()) == []


def test_every_shared_file_exists():
    for path in SHARED_FILES:
        assert os.path.isfile(os.path.join(ROOT, path)), path
