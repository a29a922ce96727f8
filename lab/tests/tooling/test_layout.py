"""The module_utils layers (docs/layout.md): _common imports nothing of ours; _node, _esxi and _cluster import
_common (and their own layer) only; _doctor may import every layer. Every module_utils file lives in a layer
package. (The one-off lab/bin/regroup-module-utils.py that made the layers, issue #17, is gone: its work is in the
tree and this rule is what lasts.)

Run: .venv/bin/pytest -q lab/tests/tooling/test_layout.py
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MU = 'plugins/module_utils'
PKG = 'ansible_collections.gpuops.k8s_gpu.plugins.module_utils'
LAYERS = ('_common', '_node', '_esxi', '_cluster', '_doctor')
# What a layer's module_utils may import from the collection's own module_utils (besides its own layer).
ALLOWED_IMPORTS = {
    '_common': (),
    '_node': ('_common',),
    '_esxi': ('_common',),
    '_cluster': ('_common',),
    '_doctor': ('_common', '_node', '_esxi', '_cluster'),
}

# file (without .py) -> layer, from the tree: a flat or relative import names a file, whose layer is its package
# (a layer may group its files in sub-packages: _cluster/stacks, scheduler, report, kube)
LAYER_OF = dict((p.stem, p.relative_to(Path(ROOT, MU)).parts[0]) for p in Path(ROOT, MU).glob('_*/**/*.py')
                if p.name != '__init__.py')


def layer_of_file(root, path):
    """(layer, stem) of a module_utils file, from its layer package (or a sub-package of it, one level down)."""
    rel = Path(path).relative_to(Path(root) / MU)
    assert len(rel.parts) in (2, 3) and rel.parts[0] in LAYERS, '%s: module_utils has only the layer packages %s' % (
        rel, LAYERS)
    return rel.parts[0], rel.stem


def imported_layers(source, own_layer):
    """The layers of the collection's module_utils that a source imports: [(layer, name, line)]."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PKG + '.'):
                        out.append(resolve(alias.name[len(PKG) + 1:].split('.'), None, node.lineno))
            continue
        if node.level:  # relative: from .x import / from .._layer.x import
            parts = (node.module or '').split('.') if node.module else []
            if node.level == 1:
                out.extend(resolve(parts or [a.name], own_layer, node.lineno) for a in node.names)
            else:
                out.extend(resolve(parts + ([] if parts[1:] else [a.name]), None, node.lineno) for a in node.names)
            continue
        if node.module == PKG:
            out.extend(resolve([a.name], None, node.lineno) for a in node.names)
        elif node.module and node.module.startswith(PKG + '.'):
            parts = node.module[len(PKG) + 1:].split('.')
            if len(parts) == 1 and parts[0] in LAYERS:
                out.extend(resolve([parts[0], a.name], None, node.lineno) for a in node.names)
            else:
                out.append(resolve(parts, None, node.lineno))
    return out


def resolve(parts, own_layer, line):
    if parts[0] in LAYERS:
        return parts[0], parts[1] if len(parts) > 1 else '', line
    name = parts[0]
    return LAYER_OF.get(name, own_layer or '?'), name, line


def rule_violations(root):
    bad = []
    for path in sorted(Path(root, MU).rglob('*.py')):
        if path.name == '__init__.py':
            continue
        layer, stem = layer_of_file(root, path)
        for dep_layer, name, line in imported_layers(path.read_text(encoding='utf-8'), layer):
            if dep_layer != layer and dep_layer not in ALLOWED_IMPORTS[layer]:
                bad.append('%s:%d: %s (%s) imports %s from %s; %s may import %s' % (
                    path.relative_to(root), line, stem, layer, name, dep_layer, layer,
                    ', '.join(ALLOWED_IMPORTS[layer]) or 'nothing of ours'))
    return bad


def test_layer_import_rule_holds_here():
    assert rule_violations(ROOT) == []


def test_layer_import_rule_checker_sees_a_violation():
    src = ('from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe\n'
           'from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import common, gpu_catalog\n'
           'from .gpu_sharing_config import SharingError\n')
    assert [x[:2] for x in imported_layers(src, '_common')] == [
        ('_node', 'nvml_probe'), ('_cluster', 'common'), ('_common', 'gpu_catalog'),
        ('_node', 'gpu_sharing_config')]


def test_every_layer_is_known_and_only_lower_layers_are_allowed():
    assert set(p.name for p in Path(ROOT, MU).iterdir() if p.is_dir() and p.name != '__pycache__') == set(LAYERS)
    assert ALLOWED_IMPORTS['_common'] == ()
    for layer in ('_node', '_esxi', '_cluster'):
        assert ALLOWED_IMPORTS[layer] == ('_common',)
