"""lab/bin/gen-from-model.py (make generate): the report's resource table and role gpu_sharing_stack's stack settings
options are generated from the strategy model and the renderers' schemas, and the restatements of the other homes
(strategy choices, roles' metadata platforms, Kubernetes ranges in the docs) from gpu_strategy.py, platforms.py and
kube_versions.py; the committed files are what it writes. The tests compare with the homes, not with literals."""
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


def load_gen():
    spec = importlib.util.spec_from_file_location('gen_from_model', SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def copy_tree(tmp_path):
    for rel in [DOC, SPECS] + [rel for rel, _kind in load_gen().generated_files(ROOT)]:
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
    gen = load_gen()
    gs, render = gen.load_model()
    hami = render.STACKS['hami'].HAMI_SCHEMA
    monkeypatch.setitem(hami, 'device_split_count', dict(hami['device_split_count'], default=11,
                                                         description='Tasks per GPU.'))
    monkeypatch.setitem(hami, 'node_scheduler_policy', dict(hami['node_scheduler_policy'],
                                                            choices=['binpack', 'spread', 'topology']))
    out = yaml.safe_load(gen.render_argspecs(read(ROOT, SPECS), gs, render))
    options = out['argument_specs']['main']['options']['gpu_sharing_stack_hami']['options']
    assert options['device_split_count'] == {'description': 'Tasks per GPU.', 'type': 'int', 'default': 11}
    assert options['node_scheduler_policy']['choices'] == ['binpack', 'spread', 'topology']
    monkeypatch.setitem(hami, 'new_key', dict(type=int, default=1))
    with pytest.raises(gen.GenError, match=r"stacks/hami.SETTINGS\['hami'\]: new_key have no description"):
        gen.render_argspecs(read(ROOT, SPECS), gs, render)


def _choices(rel, *keys):
    with open(os.path.join(ROOT, rel)) as f:
        text = f.read()
    if rel.endswith('.py'):
        text = text.split('DOCUMENTATION = r\'\'\'', 1)[1].split("\'\'\'", 1)[0]
    node = yaml.safe_load(text)
    for k in keys:
        node = node[k]
    return tuple(node['choices'])


def test_the_generated_restatements_are_the_homes():
    """What make generate wrote, read back and compared with the homes themselves (gpu_strategy, platforms,
    kube_versions), not with literals."""
    gen = load_gen()
    gs, _render = gen.load_model()
    kv, pf = gen.load_homes()
    main = ('argument_specs', 'main', 'options')
    assert _choices(SPECS, *main, 'gpu_sharing_stack_strategy') == gs.STRATEGIES
    assert _choices('roles/gpu_node_sharing/meta/argument_specs.yml', *main, 'gpu_node_sharing_strategy') == gs.STRATEGIES
    assert _choices('roles/gpu_node_sharing/meta/argument_specs.yml', *main,
                    'gpu_node_sharing_compute_mode') == gs.COMPUTE_MODE_SETTINGS
    assert _choices('roles/gpu_node_labels/meta/argument_specs.yml', *main, 'gpu_node_labels_pools', 'options',
                    'strategy') == gs.LABELLED_STRATEGIES
    assert _choices('plugins/modules/gpu_stack_manifests.py', 'options', 'strategy') == gs.STRATEGIES
    assert _choices('plugins/modules/gpu_doctor.py', 'options', 'strategy') == gs.NODE_STRATEGIES
    kinds = dict(gen.generated_files(ROOT))
    platforms = [rel for rel, kind in kinds.items() if kind == 'platforms']
    node_roles = []
    for rel in platforms:
        meta = yaml.safe_load(read(ROOT, rel))['galaxy_info']['platforms']
        if meta != [{'name': 'GenericLinux', 'versions': ['all']}]:
            assert meta == pf.galaxy_platforms(), rel
            assert gen.PLATFORMS_MARK in read(ROOT, rel), rel
            node_roles.append(rel.split('/')[1])
    assert len(node_roles) >= 6, node_roles
    # the module DOCUMENTATION and argument_specs that state the range carry the kube_versions comment
    yaml_ranges = sorted(rel for rel, kind in kinds.items() if kind == 'yaml-ranges')
    assert yaml_ranges == ['plugins/modules/kube_scheduler_config.py',
                           'roles/kube_scheduler_extender/meta/argument_specs.yml'], yaml_ranges
    docs = [rel for rel, kind in kinds.items() if kind == 'ranges']
    assert 'docs/cluster.md' in docs and 'docs/conformance/kube-scheduler.md' in docs, docs
    cluster = read(ROOT, 'docs/cluster.md')
    assert '<!-- gen:kube scheduler-v1 -->1.%d \u2013 1.%d<!-- /gen -->' % (
        kv.SCHEDULER_CONFIG_RENDERED[0][0], kv.MAX_MINOR) in cluster


def test_a_new_minor_strategy_and_release_reach_every_restatement(monkeypatch):
    """Kubernetes MAX_MINOR + 1, a new strategy and a new release of a known family: the generator writes them
    everywhere it restates them (the files a maintainer no longer edits by hand)."""
    gen = load_gen()
    gs, _render = gen.load_model()
    kv, pf = gen.load_homes()
    new_minor = kv.MAX_MINOR + 1
    monkeypatch.setattr(kv, 'MAX_MINOR', new_minor)
    monkeypatch.setattr(kv, 'UPSTREAM_SUPPORTED', (kv.UPSTREAM_SUPPORTED[0] + 1, new_minor))
    text = gen.render_ranges(read(ROOT, 'docs/cluster.md'), 'docs/cluster.md', kv)
    assert '<!-- gen:kube scheduler-v1 -->1.%d \u2013 1.%d<!-- /gen -->' % (
        kv.SCHEDULER_CONFIG_RENDERED[0][0], new_minor) in text
    text = gen.render_ranges(read(ROOT, 'README.md'), 'README.md', kv)
    assert '-->1.%d\u20131.%d<!--' % (kv.SUPPORTED_MIN_MINOR, new_minor) in text, 'README.md'
    with pytest.raises(gen.GenError, match='unknown range'):
        gen.render_ranges('<!-- gen:kube nosuch -->1.1-1.2<!-- /gen -->', 'x.md', kv)
    # a quoted message between markers: its one range is rewritten, the rest of the code span stays
    rel = 'docs/scheduler_extender.md'
    text = gen.render_ranges(read(ROOT, rel), rel, kv)
    assert '<!-- gen:kube accepted -->`kubernetes_version: Kubernetes 1.%d is not supported; supported versions are ' \
        '1.%d-1.%d ...`<!-- /gen -->' % (kv.MIN_MINOR - 1, kv.MIN_MINOR, new_minor) in text, rel
    with pytest.raises(gen.GenError, match='holds 2 ranges'):
        gen.render_ranges('<!-- gen:kube accepted -->`1.1-1.2 and 1.3-1.4`<!-- /gen -->', 'x.md', kv)
    # YAML prose (module DOCUMENTATION, argument_specs): the item after the kube_versions comment, range by range
    rel = 'plugins/modules/kube_scheduler_config.py'
    text = ' '.join(gen.render_yaml_ranges(read(ROOT, rel), rel, kv).split())
    assert 'for 1.%d to 1.%d, C(' % (kv.MIN_MINOR, kv.POLICY_LAST_MINOR) in text
    assert 'from 1.%d to 1.%d. Other versions are refused. 1.%d to 1.%d is the supported range; 1.%d to 1.%d are ' \
        'accepted for legacy' % (kv.SCHEDULER_CONFIG_RENDERED[0][0], new_minor, kv.SUPPORTED_MIN_MINOR, new_minor,
                                 kv.MIN_MINOR, kv.SUPPORTED_MIN_MINOR - 1) in text, rel
    assert '1.%d to 1.%d are accepted (1.%d to 1.%d only for legacy clusters)' % (
        kv.MIN_MINOR, new_minor, kv.MIN_MINOR, kv.SUPPORTED_MIN_MINOR - 1) in text, rel
    rel = 'roles/kube_scheduler_extender/meta/argument_specs.yml'
    text = gen.render_yaml_ranges(read(ROOT, rel), rel, kv)
    opt = yaml.safe_load(text)['argument_specs']['main']['options']['kube_scheduler_extender_kubernetes_version']
    assert opt['description'][0].startswith('Kubernetes version (1.%d to 1.%d; 1.%d to 1.%d only for legacy' % (
        kv.SUPPORTED_MIN_MINOR, new_minor, kv.MIN_MINOR, kv.SUPPORTED_MIN_MINOR - 1)), opt
    # the comment names as many ranges as the item states, each known
    item = '  # make generate: kube_versions supported\n  - From 1.2 to 1.3, and 1.4-1.5.\n  - next\n'
    with pytest.raises(gen.GenError, match='names 1 ranges .supported., the item states 2'):
        gen.render_yaml_ranges(item, 'x.yml', kv)
    assert gen.render_yaml_ranges(item.replace('supported', 'supported legacy'), 'x.yml', kv) == (
        '  # make generate: kube_versions supported legacy\n  - From 1.%d to 1.%d, and 1.%d-1.%d.\n  - next\n' % (
            kv.SUPPORTED_MIN_MINOR, new_minor, kv.MIN_MINOR, kv.SUPPORTED_MIN_MINOR - 1))
    with pytest.raises(gen.GenError, match='unknown range'):
        gen.render_yaml_ranges('# make generate: kube_versions nosuch\n- 1.1-1.2\n', 'x.yml', kv)

    monkeypatch.setattr(gs, 'STRATEGIES', gs.STRATEGIES + ('new-one',))
    out = gen.render_lists(read(ROOT, SPECS), SPECS, gs)
    assert yaml.safe_load(out)['argument_specs']['main']['options']['gpu_sharing_stack_strategy']['choices'][-1] == \
        'new-one'

    family = pf.SUPPORTED_FAMILIES[0]
    monkeypatch.setitem(pf.FAMILIES, family, dict(pf.FAMILIES[family],
                                                   versions=tuple(pf.FAMILIES[family]['versions']) + ('next',)))
    rel = 'roles/nvidia_driver/meta/main.yml'
    out = yaml.safe_load(gen.render_platforms(read(ROOT, rel), rel, pf))['galaxy_info']['platforms']
    assert out == pf.galaxy_platforms() and 'next' in out[0]['versions'], out
