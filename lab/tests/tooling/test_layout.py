"""The module_utils layers (docs/layout.md) and the one-off that made them (lab/bin/regroup-module-utils.py).

* the import rule: _common imports nothing of ours; _node, _esxi and _cluster import _common (and their own layer)
  only; _doctor may import every layer. Checked on the files as they are, flat or regrouped: a flat file's layer
  comes from the script's table, so a new module_utils file without a layer fails here too;
* the script on a throwaway clone of this checkout's HEAD: everything moves, nothing flat or stale is left,
  the rule holds, and a second run changes nothing; an unplaced file stops it before any change.

Run: .venv/bin/pytest -q lab/tests/tooling/test_layout.py
"""
import ast
import importlib.util
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / 'lab' / 'bin' / 'regroup-module-utils.py'
MU = 'plugins/module_utils'


def load_script():
    spec = importlib.util.spec_from_file_location('regroup_module_utils', str(SCRIPT))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RG = load_script()


def layer_of_file(root, path):
    """(layer, stem) of a module_utils file, from its directory or, while flat, from the script's table."""
    rel = Path(path).relative_to(Path(root) / MU)
    if len(rel.parts) == 2 and rel.parts[0] in RG.LAYERS:
        return rel.parts[0], rel.stem
    assert len(rel.parts) == 1, '%s: module_utils has only the layer packages %s' % (rel, RG.LAYERS)
    assert rel.stem in RG.LAYER_OF, ('plugins/module_utils/%s has no layer: add it to LAYER_OF in %s'
                                     % (rel, SCRIPT.relative_to(ROOT)))
    return RG.LAYER_OF[rel.stem], rel.stem


def imported_layers(source, own_layer):
    """The layers of the collection's module_utils that a source imports: [(layer, name, line)]."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(RG.PKG + '.'):
                        out.append(resolve(alias.name[len(RG.PKG) + 1:].split('.'), None, node.lineno))
            continue
        if node.level:  # relative: from .x import / from .._layer.x import
            parts = (node.module or '').split('.') if node.module else []
            if node.level == 1:
                out.extend(resolve(parts or [a.name], own_layer, node.lineno) for a in node.names)
            else:
                out.extend(resolve(parts + ([] if parts[1:] else [a.name]), None, node.lineno) for a in node.names)
            continue
        if node.module == RG.PKG:
            out.extend(resolve([a.name], None, node.lineno) for a in node.names)
        elif node.module and node.module.startswith(RG.PKG + '.'):
            parts = node.module[len(RG.PKG) + 1:].split('.')
            if len(parts) == 1 and parts[0] in RG.LAYERS:
                out.extend(resolve([parts[0], a.name], None, node.lineno) for a in node.names)
            else:
                out.append(resolve(parts, None, node.lineno))
    return out


def resolve(parts, own_layer, line):
    if parts[0] in RG.LAYERS:
        return parts[0], parts[1] if len(parts) > 1 else '', line
    name = parts[0]
    return RG.LAYER_OF.get(name, own_layer or '?'), name, line


def rule_violations(root):
    bad = []
    for path in sorted(Path(root, MU).rglob('*.py')):
        if path.name == '__init__.py':
            continue
        layer, stem = layer_of_file(root, path)
        for dep_layer, name, line in imported_layers(path.read_text(encoding='utf-8'), layer):
            if dep_layer != layer and dep_layer not in RG.ALLOWED_IMPORTS[layer]:
                bad.append('%s:%d: %s (%s) imports %s from %s; %s may import %s' % (
                    path.relative_to(root), line, stem, layer, name, dep_layer, layer,
                    ', '.join(RG.ALLOWED_IMPORTS[layer]) or 'nothing of ours'))
    return bad


def test_layer_import_rule_holds_here():
    assert rule_violations(ROOT) == []


def test_layer_import_rule_checker_sees_a_violation():
    src = ('from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe\n'
           'from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import gpu_stack_common, gpu_catalog\n'
           'from .gpu_sharing_config import SharingError\n')
    assert [x[:2] for x in imported_layers(src, '_common')] == [
        ('_node', 'nvml_probe'), ('_cluster', 'gpu_stack_common'), ('_common', 'gpu_catalog'),
        ('_node', 'gpu_sharing_config')]


def test_every_layer_is_known_and_only_lower_layers_are_allowed():
    assert set(RG.LAYER_OF.values()) <= set(RG.LAYERS) and set(RG.TEST_LAYER_OF.values()) <= set(RG.LAYERS)
    assert RG.ALLOWED_IMPORTS['_common'] == ()
    for layer in ('_node', '_esxi', '_cluster'):
        assert RG.ALLOWED_IMPORTS[layer] == ('_common',)


def test_rewrite_splits_mixed_imports_and_is_stable():
    text = ('from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import gpu_catalog, node_probe as np\n'
            "    mock.patch('ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi.esxi_vsphere.connect')\n"
            'see `plugins/module_utils/_cluster/gpu_stack_hami.py` and tests/unit/plugins/module_utils/\n'
            'test_gpu_share_report_{model,render}.py; os.path.join(R, "module_utils", "_node", "gpu_facts.py")\n')
    once = RG.rewrite_text(text, RG.LAYER_OF, RG.LAYER_OF)
    assert once == (
        'from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog\n'
        'from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe as np\n'
        "    mock.patch('ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi.esxi_vsphere.connect')\n"
        'see `plugins/module_utils/_cluster/gpu_stack_hami.py` and tests/unit/plugins/module_utils/\n'
        '_cluster/test_gpu_share_report_{model,render}.py; os.path.join(R, "module_utils", "_node", "gpu_facts.py")\n')
    assert RG.rewrite_text(once, RG.LAYER_OF, RG.LAYER_OF) == once


@pytest.fixture(scope='module')
def clone(tmp_path_factory):
    """A throwaway clone of HEAD with this checkout's script (git is required: fails loudly without)."""
    dest = tmp_path_factory.mktemp('layout') / 'repo'
    subprocess.run(['git', 'clone', '-q', '--no-hardlinks', str(ROOT), str(dest)], check=True)
    shutil.copy(str(SCRIPT), str(dest / 'lab' / 'bin' / SCRIPT.name))
    return dest


def test_regroup_on_a_clone_moves_everything_and_a_second_run_changes_nothing(clone):
    first = io.StringIO()
    RG.run(str(clone), out=first)
    flat = [n for n in os.listdir(str(clone / MU)) if n.endswith('.py') and n != '__init__.py']
    assert flat == []
    assert not [n for n in os.listdir(str(clone / 'tests/unit' / MU)) if n.startswith('test_')]
    for layer in set(RG.LAYER_OF.values()):
        if (clone / MU / layer).is_dir():
            assert (clone / MU / layer / '__init__.py').read_text() == ''
    assert rule_violations(clone) == []
    stale = subprocess.run(['git', 'grep', '-nE', r'module_utils(\.|/)(%s)\b' % '|'.join(RG.LAYER_OF), '--',
                            '.', ':!changelogs', ':!lab/bin/regroup-module-utils.py'],
                           cwd=str(clone), stdout=subprocess.PIPE, universal_newlines=True).stdout
    assert stale == ''
    second = io.StringIO()
    assert RG.run(str(clone), out=second) == 0, second.getvalue()
    assert second.getvalue() == '0 change(s)\n'


def test_regroup_refuses_an_unplaced_file_before_any_change(tmp_path):
    mu = tmp_path / MU
    mu.mkdir(parents=True)
    (mu / 'gpu_catalog.py').write_text('')
    (mu / 'brand_new.py').write_text('')
    (tmp_path / 'tests/unit' / MU).mkdir(parents=True)
    (tmp_path / 'tests/unit' / MU / 'test_other_new.py').write_text('')
    with pytest.raises(RG.RegroupError) as e:
        RG.run(str(tmp_path), out=io.StringIO())
    assert 'plugins/module_utils/brand_new.py' in str(e.value) and 'test_other_new.py' in str(e.value)
    assert sorted(os.listdir(str(mu))) == ['brand_new.py', 'gpu_catalog.py']
    assert RG.run(str(tmp_path), extra_map={'brand_new': '_cluster', 'other_new': '_node'}, dry_run=True,
                  out=io.StringIO()) == 3
