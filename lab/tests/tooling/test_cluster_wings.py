"""The import rule between the wings of plugins/module_utils/_cluster (docs/layout.md, issue #39 target 4), checked like
the layer rule (test_layout.py): parsed imports, absolute and relative, of every file under plugins/.

Wings: kube/ (the one Kubernetes access layer), stacks/, scheduler/, the plans at the top of _cluster (pool_plan,
label_plan, gpu_sharing_drain, node_labels_apply, strategy_migration), report/, remediation/ and metrics/ (the
exporter per pool, dcgm-exporter's counters, the alert rules, the dashboard). Inside
_cluster a wing imports its own wing and the wings below it (ALLOWED_WINGS), so the graph has no cycle. Outside _cluster, report/ and
remediation/ are read only by the plugins that render or run them (LEAF_READERS); nothing reaches into a strategy's own
stack module (stacks/<stack>.py) but the stacks/ wing: the other wings ask the Stack interface (stacks/ FACE).

Run: .venv/bin/pytest -q lab/tests/tooling/test_cluster_wings.py
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = 'plugins/module_utils/_cluster'
PKG = 'ansible_collections.gpuops.k8s_gpu.plugins'
TOP = 'plans'  # the files at the top of _cluster
WINGS = ('kube', 'scheduler', 'stacks', TOP, 'report', 'remediation', 'metrics')
# what a wing of _cluster may import of _cluster besides itself: only wings listed before it in WINGS
ALLOWED_WINGS = {
    'kube': (),
    'scheduler': ('kube',),
    'stacks': ('kube',),
    TOP: ('kube', 'stacks'),
    'report': ('kube', 'stacks'),
    'remediation': ('kube', 'stacks'),
    'metrics': ('kube', 'stacks'),
}
# the plugins outside _cluster that may import the leaf wings (a report is rendered by its module only)
LEAF_READERS = {
    'report': ('plugins/modules/gpu_share_report.py',),
    'remediation': ('plugins/modules/gpu_remediation.py',),
}
# the face of stacks/: what other wings and plugins may import of it; every other file of stacks/ is one stack's own
# module (stacks/<stack>.py, named by the model's `stack`), reached through stacks/registry
FACE = ('base', 'registry', 'common', 'render', 'live',
        'shared')
# the layer that may import every layer (test_layout.py): the doctor judges the gpushare releases it reads from that
# stack's module; counted in docs/extending.md, not a crossing of the wings
EXEMPT = ('plugins/module_utils/_doctor/',)


def cluster_modules(root):
    """{dotted name under _cluster (e.g. 'kube.access', 'pool_plan'): wing}"""
    out = {}
    for p in Path(root, CLUSTER).rglob('*.py'):
        if p.name == '__init__.py':
            continue
        rel = p.relative_to(Path(root, CLUSTER)).with_suffix('').parts
        out['.'.join(rel)] = rel[0] if len(rel) > 1 else TOP
    return out


def wing_of(path, root=ROOT):
    rel = Path(path).resolve().relative_to(Path(root).resolve())
    parts = rel.parts
    if '/'.join(parts[:3]) != CLUSTER:
        return None
    return parts[3] if len(parts) > 4 else TOP


def imported_cluster_modules(source, path, modules):
    """[(dotted name under _cluster, line)] that a source at ``path`` (relative to the root) imports."""
    pkg = list(Path(path).parent.parts)  # plugins/module_utils/_cluster/<wing>
    out = []

    def add(dotted, names, line):
        parts = dotted.split('.')
        if parts[:3] != ['plugins', 'module_utils', '_cluster']:
            return
        under = parts[3:]
        hits = ['.'.join(under + [n]) for n in names if '.'.join(under + [n]) in modules]
        if hits:
            out.extend((h, line) for h in hits)
        elif '.'.join(under) in modules:
            out.append(('.'.join(under), line))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PKG + '.'):
                    add('plugins.' + alias.name[len(PKG) + 1:], [], node.lineno)
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)]
                add('.'.join(base + ((node.module or '').split('.') if node.module else [])), names, node.lineno)
            elif node.module and node.module.startswith(PKG + '.'):
                add('plugins.' + node.module[len(PKG) + 1:], names, node.lineno)
    return out


def crossings(root, files=None):
    """Every import that breaks the rule: ['path:line: message']."""
    root = Path(root)
    modules = cluster_modules(root)
    bad = []
    for p in sorted(files if files is not None else root.joinpath('plugins').rglob('*.py')):
        rel = Path(p).relative_to(root).as_posix()
        if any(rel.startswith(e) for e in EXEMPT):
            continue
        mine = wing_of(root / rel, root)
        for target, line in imported_cluster_modules(Path(root, rel).read_text(encoding='utf-8'), rel, modules):
            wing = modules[target]
            stem = target.split('.')[-1]
            if mine == wing:
                continue
            where = '%s:%d: %s' % (rel, line, mine + '/' if mine else 'plugin')
            if wing == 'stacks' and stem not in FACE:
                bad.append('%s imports %s, one stack\'s own module: ask its Stack through stacks/registry, or move '
                           'the fact to _common' % (where, target))
            elif mine is not None and wing not in ALLOWED_WINGS[mine]:
                bad.append('%s imports %s (wing %s); %s may import %s' % (
                    where, target, wing, mine, ', '.join(ALLOWED_WINGS[mine]) or 'nothing of _cluster'))
            elif mine is None and wing in LEAF_READERS and rel not in LEAF_READERS[wing]:
                bad.append('%s imports %s (wing %s), which only %s read: take what it needs from kube/ or stacks/' % (
                    where, target, wing, ', '.join(LEAF_READERS[wing])))
    return bad


def test_the_wings_are_the_tree():
    """Every sub-package of _cluster is a wing, and the rule allows only wings listed earlier (no cycle)."""
    here = set(p.name for p in Path(ROOT, CLUSTER).iterdir() if p.is_dir() and p.name != '__pycache__')
    assert here | {TOP} == set(WINGS)
    for wing, allowed in ALLOWED_WINGS.items():
        assert all(WINGS.index(a) < WINGS.index(wing) for a in allowed), wing
    stacks = set(p.stem for p in Path(ROOT, CLUSTER, 'stacks').glob('*.py')) - {'__init__'}
    assert set(FACE) <= stacks
    for leaf, readers in LEAF_READERS.items():
        for r in readers:
            assert Path(ROOT, r).is_file(), r


def test_every_stack_module_is_in_the_registry():
    """The stack modules outside the face are exactly those stacks/registry imports (its REGISTRY)."""
    modules = cluster_modules(ROOT)
    path = Path(CLUSTER, 'stacks', 'registry.py')
    imported = set(t.split('.')[-1] for t, _ in imported_cluster_modules(
        Path(ROOT, path).read_text(encoding='utf-8'), path.as_posix(), modules))
    own = set(t.split('.')[-1] for t, w in modules.items() if w == 'stacks') - set(FACE)
    assert own and own <= imported, own - imported


def test_no_crossing_between_the_wings():
    assert crossings(ROOT) == []


def _tree(tmp_path, files):
    for rel in ('kube/access', 'kube/rest', 'stacks/registry', 'stacks/hami',
                'report/kube', 'remediation/plan', 'scheduler/plan',
                'pool_plan'):
        p = tmp_path / CLUSTER / (rel + '.py')
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()
    out = []
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        out.append(p)
    return out


def test_the_checker_sees_each_kind_of_crossing(tmp_path):
    mu = 'from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster'
    files = _tree(tmp_path, {
        # a plugin taking its client from report/ (gpu_node_drain did)
        'plugins/modules/gpu_node_drain.py': mu + '.report import kube\n',
        # the report's own module may
        'plugins/modules/gpu_share_report.py': mu + '.report import kube\n',
        # a lower wing importing a higher one, relative and absolute
        CLUSTER + '/kube/read.py': 'from ..stacks import registry\nfrom . import rest\n',
        CLUSTER + '/stacks/live.py': mu + ' import pool_plan\n' + mu + '.kube import access\n',
        # one stack's own module from another wing (the report did), and a plain import of one
        CLUSTER + '/report/model.py': (
            mu + '.stacks.hami import REGISTRATION_ANNOTATIONS\n' + mu + '.stacks import registry\n'
            'import ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation.plan\n'),
        CLUSTER + '/scheduler/render.py': mu + '.scheduler import plan\n',
    })
    found = crossings(tmp_path, files)
    assert len(found) == 5, found
    assert found[0].startswith('plugins/module_utils/_cluster/kube/read.py:1: kube/ imports stacks.registry')
    assert 'report/model.py:1: report/ imports stacks.hami, one stack\'s own' in found[1]
    assert 'report/model.py:3: report/ imports remediation.plan' in found[2]
    assert 'stacks/live.py:1: stacks/ imports pool_plan (wing plans); stacks may import kube' in found[3]
    assert found[4].startswith('plugins/modules/gpu_node_drain.py:1: plugin imports report.kube '
                               '(wing report), which only plugins/modules/gpu_share_report.py read')


def documented_rule(text):
    """{wing: (allowed wings)} from the table of docs/layout.md 'What a wing of `_cluster` may import'."""
    section = text.split('## What a wing of `_cluster` may import', 1)[1].split('\n## ', 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) != 2 or not line.startswith('| ') or cells[0] in ('wing', '---'):
            continue
        wing = TOP if cells[0].startswith('the plans') else cells[0].strip('`/')
        out[wing] = () if cells[1] == 'nothing' else tuple(c.strip().strip('`/') for c in cells[1].split(','))
    return out


def test_the_documented_rule_is_the_checked_one():
    """docs/layout.md's table of the wings states ALLOWED_WINGS, row by row and in the order of WINGS."""
    doc = documented_rule(Path(ROOT, 'docs', 'layout.md').read_text(encoding='utf-8'))
    assert list(doc) == list(WINGS)
    assert doc == ALLOWED_WINGS
    # the parser reads a changed row as changed
    changed = '## What a wing of `_cluster` may import\n\n| wing | may import |\n|---|---|\n| `kube/` | `stacks/` |\n'
    assert documented_rule(changed) == {'kube': ('stacks',)}
