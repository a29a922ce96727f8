# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One MIG planner: the boot script of role gpu_node_sharing (gpuops-mig-apply.py) plans with the module's own
gpu_sharing_plan.py, which the role installs beside it; the planner is dependency-free so that it runs there; the
mig-parted config name is computed in Python only (gpu_strategy.mig_config_name; the filter that hands it to
the role is tested in tests/unit/plugins/filter/test_gpu_strategy_mig_name.py)."""
import ast
import importlib.util
import os
import subprocess
import sys
import types

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import mig_config_name
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_config as config
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_plan as plan

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))
PLAN = os.path.join(ROOT, 'plugins', 'module_utils', '_node', 'gpu_sharing_plan.py')
SCRIPT = os.path.join(ROOT, 'roles', 'gpu_node_sharing', 'files', 'gpuops-mig-apply.py')
ROLE_TASKS = os.path.join(ROOT, 'roles', 'gpu_node_sharing', 'tasks')


def _tree(path):
    with open(path) as f:
        return ast.parse(f.read())


def test_the_planner_imports_only_the_standard_library():
    modules = set()
    for node in ast.walk(_tree(PLAN)):
        if isinstance(node, ast.Import):
            modules.update(a.name.split('.')[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or '').split('.')[0])
    # typing and collections.abc: its annotations (issue #39), standard library like re
    assert modules <= set(['__future__', 're', 'typing', 'collections']), modules


def test_the_planner_runs_alone_beside_the_boot_script(tmp_path):
    """As installed by the role: the planner file in a directory of its own, no collection on the path."""
    (tmp_path / 'gpu_sharing_plan.py').write_text(open(PLAN).read())
    code = ('import sys; sys.path.insert(0, %r); import gpu_sharing_plan as p; '
            'print(p.fit_placements(["1g.10gb"], {"1g.10gb": {"name": "1g.10gb", "slices": 1, "placement_size": 1, '
            '"placements": [0, 1]}}), p.canonical_profile_name("MIG 1g.24gb+me.all"))' % str(tmp_path))
    env = dict((k, v) for k, v in os.environ.items() if k != 'PYTHONPATH')
    out = subprocess.run([sys.executable, '-I', '-c', code], cwd=str(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[('1g.10gb', 0)] 1g.24gb+me.all"


def test_the_config_module_re_exports_the_planner_names():
    assert config.SharingError is plan.SharingError
    assert config.parse_profile_name is plan.parse_profile_name
    assert config.canonical_profile_name is plan.canonical_profile_name


def _load_script():
    fake = types.ModuleType('pynvml')
    saved = sys.modules.get('pynvml')
    sys.modules['pynvml'] = fake
    try:
        spec = importlib.util.spec_from_file_location('gpuops_mig_apply', SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if saved is None:
            del sys.modules['pynvml']
        else:
            sys.modules['pynvml'] = saved
    return mod


def test_the_boot_script_keeps_no_planner_of_its_own():
    own = set(n.name for n in _tree(SCRIPT).body if isinstance(n, ast.FunctionDef))
    planner = set(n.name for n in _tree(PLAN).body if isinstance(n, ast.FunctionDef))
    assert not own & planner, own & planner
    # the functions it used to re-implement (profile names, device filter, placement, geometry text) are gone
    assert not own & set(['canonical', '_filter_ok', 'fit', 'describe']), own
    assert own == set(['log', 'load_entries', 'wanted_for', 'gi_profiles', '_text', 'ci_profiles',
                       'compute_instances', 'gpu_instances', 'apply_gpu', 'main']), own


def test_the_boot_script_selects_with_the_planner():
    mod = _load_script()
    assert mod.plan.fit_placements is plan.fit_placements or mod.plan.__file__.endswith('gpu_sharing_plan.py')
    entries = [{'devices': [1], 'mig-enabled': True, 'mig-devices': {'MIG 1g.24gb+me.all': 1}},
               {'devices': 'all', 'device-filter': '0x233010DE', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}},
               {'devices': 'all', 'device-filter': ['0x20B2'], 'mig-enabled': 'true', 'mig-devices': {'1G.10GB': 7,
                                                                                                      '2g.20gb': 0}}]
    assert mod.wanted_for(entries, 1, 0x233010DE) == (True, {'1g.24gb+me.all': 1})
    assert mod.wanted_for(entries, 0, 0x233010DE) == (True, {'3g.40gb': 2})
    assert mod.wanted_for(entries, 0, 0x20B210DE) == (True, {'1g.10gb': 7})
    assert mod.wanted_for(entries, 0, 0x20F110DE) is None


def test_the_mig_config_name_is_computed_in_python_only():
    assert mig_config_name({'3g.40gb': 1, '2g.20gb': 1, '1g.10gb': 2}) == 'gpuops-1g-10gb-2-2g-20gb-1-3g-40gb-1'
    assert mig_config_name({'1g.10gb': 7}, 'site-name') == 'site-name'
    assert mig_config_name({}) == 'gpuops-'
    for name in os.listdir(ROLE_TASKS):
        with open(os.path.join(ROLE_TASKS, name)) as f:
            text = f.read()
        assert "'gpuops-' ~" not in text and "map('replace', '.', '-')" not in text, name
