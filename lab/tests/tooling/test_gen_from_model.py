"""lab/bin/gen-from-model.py: the report's resource table and role gpu_sharing_stack's stack settings options are
generated from the strategy model and the renderers' schemas; the committed files are what it writes."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, 'lab', 'bin', 'gen-from-model.py')
DOC = os.path.join('docs', 'gpu_share_report.md')
SPECS = os.path.join('roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')
# the stack settings whose argument_specs options are generated: all ten (the unit drift test
# test_gpu_stack_registry.py still compares both sides)
GENERATED = ['dra', 'gpu_manager', 'gpu_operator', 'gpushare', 'hami', 'mig', 'mps', 'nvidia', 'time_slicing', 'volcano']


def run(root, *args):
    return subprocess.run([sys.executable, SCRIPT, '--root', str(root)] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)


def copy_tree(tmp_path):
    for rel in (DOC, SPECS):
        os.makedirs(os.path.join(str(tmp_path), os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(str(tmp_path), rel))
    return tmp_path


def read(root, rel):
    with open(os.path.join(str(root), rel)) as f:
        return f.read()


def test_the_committed_files_are_the_generated_ones():
    out = run(ROOT, '--check')
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'argument_specs options generated for %s; hand-written: none' % ', '.join(GENERATED) in out.stdout
    assert 'up to date' in out.stdout
    doc = read(ROOT, DOC)
    assert '| `volcano.sh/gpu-memory` | GPU memory (Volcano gpu-share) | MiB | Volcano |' in doc
    assert '| `nvidia.com/mig-<profile>` | MIG devices | MIG device | mig, GPU operator |' in doc
    specs = yaml.safe_load(read(ROOT, SPECS))['argument_specs']['main']['options']
    assert specs['gpu_sharing_stack_hami']['options']['device_split_count'] == {
        'description': 'Tasks per GPU (deviceSplitCount).', 'type': 'int', 'default': 10}


def test_an_edited_generated_part_is_stale_and_regenerated(tmp_path):
    root = copy_tree(tmp_path)
    spec_path = os.path.join(str(root), SPECS)
    text = read(root, SPECS)
    edited = text.replace('            description: Tasks per GPU (deviceSplitCount).\n            type: int\n'
                          '            default: 10\n',
                          '            description: Tasks per GPU (deviceSplitCount).\n            type: int\n'
                          '            default: 11\n')
    assert edited != text
    with open(spec_path, 'w') as f:
        f.write(edited)
    doc_path = os.path.join(str(root), DOC)
    doc = read(root, DOC)
    with open(doc_path, 'w') as f:
        f.write(doc.replace('| `aliyun.com/gpu-mem` | GPU memory (gpushare) | GiB |', '| `aliyun.com/gpu-mem` | GPU memory | MiB |'))
    out = run(root, '--check')
    assert out.returncode == 1
    assert '%s, %s stale: run .venv/bin/python lab/bin/gen-from-model.py' % (DOC, SPECS) in out.stdout, out.stdout
    assert '-            default: 11' in out.stdout and '+            default: 10' in out.stdout, out.stdout
    out = run(root)
    assert out.returncode == 0, out.stdout + out.stderr
    assert read(root, SPECS) == text and read(root, DOC) == doc


def test_markers_missing_is_an_error(tmp_path):
    root = copy_tree(tmp_path)
    with open(os.path.join(str(root), DOC), 'w') as f:
        f.write('# no markers\n')
    out = run(root, '--check')
    assert out.returncode == 1 and 'docs/gpu_share_report.md: needs one <!-- GENERATED' in out.stdout, out.stdout


def test_a_schema_change_reaches_argument_specs(monkeypatch):
    """The direction of the generation: a changed schema entry (default, choices, description) is what argument_specs
    gets, and a key added to a schema without a description is refused by name."""
    spec = importlib.util.spec_from_file_location('gen_from_model', SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gs, render = gen.load_model()
    hami = render.gpu_stack_hami.HAMI_SCHEMA
    monkeypatch.setitem(hami, 'device_split_count', dict(hami['device_split_count'], default=11,
                                                         description='Tasks per GPU.'))
    monkeypatch.setitem(hami, 'node_scheduler_policy', dict(hami['node_scheduler_policy'],
                                                            choices=['binpack', 'spread', 'topology']))
    out = yaml.safe_load(gen.render_argspecs(read(ROOT, SPECS), gs, render))
    options = out['argument_specs']['main']['options']['gpu_sharing_stack_hami']['options']
    assert options['device_split_count'] == {'description': 'Tasks per GPU.', 'type': 'int', 'default': 11}
    assert options['node_scheduler_policy']['choices'] == ['binpack', 'spread', 'topology']
    monkeypatch.setitem(hami, 'new_key', dict(type=int, default=1))
    with pytest.raises(gen.GenError, match=r"gpu_stack_hami.SETTINGS\['hami'\]: new_key have no description"):
        gen.render_argspecs(read(ROOT, SPECS), gs, render)
