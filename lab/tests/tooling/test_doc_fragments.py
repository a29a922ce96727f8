"""The plugins' repeated documentation lives in doc fragments: each module names one support level of
plugins/doc_fragments/attributes.py (check mode, diff mode, platform described there) and the inventory filters take
their hostvars/groups options from plugins/doc_fragments/inventory_vars.py. ansible-doc (ansible-core 2.21 and 2.16,
the two venvs `make setup` builds) must render every module and filter with the fragments applied.

Run: .venv/bin/pytest -q lab/tests/tooling/test_doc_fragments.py   (seconds; no simulator)
"""
import glob
import json
import os
import subprocess

import pytest
import yaml

from conftest import ROOT

LEVELS = ('gpuops.k8s_gpu.attributes.actionable', 'gpuops.k8s_gpu.attributes.info_module')
# added to a level, not one itself: the module's action plugin runs it in the controller process (action, async)
ADDONS = {'gpuops.k8s_gpu.attributes.controller': 'gpuops.k8s_gpu.attributes.info_module'}


def plugins(kind):
    return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'plugins', kind, '*.py'))
                  if not os.path.basename(p).startswith('_'))


def own_doc(kind, name):
    """The plugin's own DOCUMENTATION (before fragments), read from its source."""
    import ast
    with open(os.path.join(ROOT, 'plugins', kind, name + '.py')) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', None) == 'DOCUMENTATION':
            return yaml.safe_load(node.value.value)
    raise AssertionError('%s %s has no DOCUMENTATION' % (kind, name))


def ansible_doc(venv, collections, kind, names):
    exe = os.path.join(ROOT, venv, 'bin', 'ansible-doc')
    assert os.path.exists(exe), '%s is missing: run make setup (it builds .venv and .venv-2.16)' % exe
    proc = subprocess.run([exe, '--json', '-t', kind] + ['gpuops.k8s_gpu.' + n for n in names],
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections), capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = json.loads(proc.stdout)
    assert sorted(docs) == sorted('gpuops.k8s_gpu.' + n for n in names), sorted(docs)
    return dict((k.split('.')[-1], v['doc']) for k, v in docs.items())


def test_every_module_names_one_support_level_and_restates_no_description():
    for name in plugins('modules'):
        doc = own_doc('modules', name)
        fragments = doc.get('extends_documentation_fragment') or []
        levels = [f for f in fragments if f.startswith('gpuops.k8s_gpu.attributes') and f not in ADDONS]
        assert len(levels) == 1 and levels[0] in LEVELS, (name, fragments)
        for addon, level in ADDONS.items():
            assert addon not in fragments or levels[0] == level, (name, addon, 'goes with', level)
        for attr, body in (doc.get('attributes') or {}).items():
            assert 'description' not in body, '%s restates the description of attribute %s' % (name, attr)


def test_no_filter_describes_hostvars_itself():
    for name in plugins('filter'):
        doc = own_doc('filter', name)
        assert 'hostvars' not in (doc.get('options') or {}), name
        if (doc.get('options') or {}).get('_input', {}).get('description', '').startswith('The inventory groups'):
            raise AssertionError('%s describes the groups input itself (fragment inventory_vars.groups)' % name)


def fragment(module, var):
    """One variable of a doc fragment of the collection, parsed."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('frag', os.path.join(ROOT, 'plugins', 'doc_fragments', module + '.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return yaml.safe_load(getattr(mod.ModuleDocFragment, var))


@pytest.mark.parametrize('venv', ['.venv', '.venv-2.16'])
def test_ansible_doc_renders_every_module_with_its_attributes(venv, collections_path):
    descriptions = fragment('attributes', 'ACTIONABLE')['attributes']
    assert fragment('attributes', 'INFO_MODULE')['attributes']['platform'] == descriptions['platform']
    controller = fragment('attributes', 'CONTROLLER')['attributes']
    docs = ansible_doc(venv, collections_path, 'module', plugins('modules'))
    for name, doc in docs.items():
        attrs = doc['attributes']
        assert set(attrs) >= {'check_mode', 'diff_mode', 'platform'}, (name, sorted(attrs))
        for attr in ('check_mode', 'diff_mode', 'platform'):
            assert attrs[attr]['description'] == descriptions[attr]['description'], (name, attr)
            assert attrs[attr]['support'] in ('full', 'partial', 'none', 'N/A'), (name, attr)
        assert attrs['platform']['platforms'] == 'posix', name
        # what the module says itself wins over its support level
        own = own_doc('modules', name).get('attributes') or {}
        for attr, body in own.items():
            for key, value in body.items():
                assert attrs[attr][key] == value, (name, attr, key)
    # the levels as the modules state them
    assert docs['gpu_info']['attributes']['diff_mode']['support'] == 'N/A'
    assert docs['gpu_sharing']['attributes']['diff_mode']['support'] == 'full'
    assert docs['gpu_node_drain']['attributes']['diff_mode']['support'] == 'none'
    # run by its action plugin in the controller process
    for attr in ('action', 'async'):
        assert docs['gpu_stack_manifests']['attributes'][attr] == controller[attr], attr
    assert docs['gpu_stack_manifests']['attributes']['action']['support'] == 'full'


@pytest.mark.parametrize('venv', ['.venv', '.venv-2.16'])
def test_ansible_doc_renders_every_filter_with_the_inventory_options(venv, collections_path):
    groups = fragment('inventory_vars', 'GROUPS')['options']
    docs = ansible_doc(venv, collections_path, 'filter', plugins('filter'))
    users = [n for n in plugins('filter') if 'gpuops.k8s_gpu.inventory_vars' in ' '.join(
        own_doc('filter', n).get('extends_documentation_fragment') or [])]
    assert sorted(users) == ['doctor_health', 'fleet_report', 'node_labels_plan', 'pool_host_vars', 'sharing_pools',
                            'unprobed_hosts'], users
    for name in users:
        assert docs[name]['options']['hostvars'] == groups['hostvars'], name
    for name in ('node_labels_plan', 'sharing_pools'):
        assert docs[name]['options']['_input'] == groups['_input'], name
    for name in ('doctor_health', 'fleet_report', 'pool_host_vars', 'unprobed_hosts'):
        assert docs[name]['options']['_input']['type'] == 'list', name
