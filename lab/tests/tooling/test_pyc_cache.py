"""lab/pyc_cache: the bytecode cache for what Python imports from zip files (AnsiballZ payloads).

Each case runs a fresh interpreter that loads the hook the way the lab's .pth file does and imports a module from a
zip, as AnsiballZ does: the first run compiles and stores, a later run with the same source loads the stored code
(with its file name set to the new zip), a changed source is compiled anew, ``off`` writes nothing, and a directory
that cannot be written leaves imports working.
"""
import json
import os
import subprocess
import sys
import zipfile

from conftest import ROOT

HOOK_DIR = os.path.join(ROOT, 'lab', 'pyc_cache')
PROBE = (
    'import sys, zipimport; sys.path.insert(0, sys.argv[1]); import gpuops_lab_pyc_cache; '
    'import payload_mod; print(payload_mod.VALUE, payload_mod.where(), '
    'getattr(zipimport._compile_source, "_gpuops_lab", False))'
)


def make_zip(path, value):
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr('payload_mod.py', 'VALUE = %r\n\ndef where():\n    return where.__code__.co_filename\n' % value)
    return str(path)


def run(zip_path, cache):
    env = dict(os.environ, GPUOPS_LAB_PYC_CACHE=str(cache), PYTHONPATH=HOOK_DIR)
    out = subprocess.run([sys.executable, '-c', PROBE, zip_path], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    value, where, active = out.stdout.split()
    return value, where, active


def test_the_second_import_of_the_same_source_loads_the_stored_code(tmp_path):
    cache = tmp_path / 'cache'
    first = make_zip(tmp_path / 'one.zip', 'a')
    assert run(first, cache) == ('a', os.path.join(first, 'payload_mod.py'), 'True')
    stored = sorted(os.listdir(cache))
    assert len(stored) == 1
    mtime = os.stat(cache / stored[0]).st_mtime_ns
    second = make_zip(tmp_path / 'two.zip', 'a')
    # same source, another zip: loaded from the cache (not rewritten), file name of the zip that imports it
    assert run(second, cache) == ('a', os.path.join(second, 'payload_mod.py'), 'True')
    assert sorted(os.listdir(cache)) == stored and os.stat(cache / stored[0]).st_mtime_ns == mtime


def test_a_changed_source_is_compiled_again(tmp_path):
    cache = tmp_path / 'cache'
    run(make_zip(tmp_path / 'one.zip', 'a'), cache)
    assert run(make_zip(tmp_path / 'two.zip', 'b'), cache)[0] == 'b'
    assert len(os.listdir(cache)) == 2


def test_off_writes_nothing_and_leaves_zipimport_alone(tmp_path):
    env = dict(os.environ, GPUOPS_LAB_PYC_CACHE='off', PYTHONPATH=HOOK_DIR, HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, '-c', PROBE, make_zip(tmp_path / 'one.zip', 'a')], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[2] == 'False'
    assert not (tmp_path / 'gpuops').exists()


def test_a_cache_that_cannot_be_written_leaves_imports_working(tmp_path):
    blocker = tmp_path / 'not-a-dir'
    blocker.write_text('a file where the cache directory would be')
    assert run(make_zip(tmp_path / 'one.zip', 'a'), blocker / 'cache')[0] == 'a'


def test_the_lab_installs_it_for_the_controller_and_the_nodes():
    with open(os.path.join(HOOK_DIR, 'gpuops_lab_pyc_cache.pth')) as f:
        assert f.read().strip() == 'import gpuops_lab_pyc_cache'
    with open(os.path.join(ROOT, 'lab', 'bin', 'bootstrap.sh')) as f:
        assert 'install_pyc_cache .venv' in f.read()
    with open(os.path.join(ROOT, 'lab', 'docker', 'node.sh')) as f:
        text = f.read()
    assert 'gpuops_lab_pyc_cache.pth:$site/gpuops_lab_pyc_cache.pth:ro' in text
    assert '"${PYC_CACHE_ARGS[@]}"' in text


# ansible-core's collection loader: a plugin of a collection, imported through ansible's own finder as ansible-playbook
# does, in a fresh interpreter each time; the hook gives the loader's module a compile() of its own.
COLLECTION_PROBE = (
    'import sys; sys.path.insert(0, sys.argv[2]); import gpuops_lab_pyc_cache; '
    'from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder; '
    'import ansible.utils.collection_loader._collection_finder as cf; '
    '_AnsibleCollectionFinder(paths=[sys.argv[1]])._install(); '
    'from ansible_collections.labtest.probe.plugins.filter import probe_filter as m; '
    'print(m.VALUE, m.where(), getattr(getattr(cf, "compile", None), "_gpuops_lab", False))'
)


def make_collection(root, value):
    d = root / 'ansible_collections' / 'labtest' / 'probe' / 'plugins' / 'filter'
    d.mkdir(parents=True)
    (d / 'probe_filter.py').write_text('VALUE = %r\n\ndef where():\n    return where.__code__.co_filename\n' % value)
    return str(root), str(d / 'probe_filter.py')


def run_collection(root, cache, off=False):
    env = dict(os.environ, GPUOPS_LAB_PYC_CACHE='off' if off else str(cache), PYTHONPATH=HOOK_DIR)
    out = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'python'), '-c', COLLECTION_PROBE, root, HOOK_DIR],
                         env=env, capture_output=True, text=True, timeout=120, cwd=str(cache.parent))
    assert out.returncode == 0, out.stderr
    return tuple(out.stdout.split())


def test_ansible_collection_loader_compiles_a_plugin_once(tmp_path):
    cache = tmp_path / 'cache'
    root1, file1 = make_collection(tmp_path / 'one', 'a')
    assert run_collection(root1, cache) == ('a', file1, 'True')
    stored = sorted(os.listdir(cache))
    assert stored, 'the collection loader stored nothing'
    mtimes = [os.stat(cache / s).st_mtime_ns for s in stored]
    # the same source in another collection path: loaded from the cache, named after the file that imports it
    root2, file2 = make_collection(tmp_path / 'two', 'a')
    assert run_collection(root2, cache) == ('a', file2, 'True')
    assert sorted(os.listdir(cache)) == stored and [os.stat(cache / s).st_mtime_ns for s in stored] == mtimes
    # a changed source is compiled anew
    root3, file3 = make_collection(tmp_path / 'three', 'b')
    assert run_collection(root3, cache) == ('b', file3, 'True')
    assert len(os.listdir(cache)) > len(stored)


def test_off_leaves_the_collection_loader_alone(tmp_path):
    root, file1 = make_collection(tmp_path / 'one', 'a')
    assert run_collection(root, tmp_path / 'cache', off=True) == ('a', file1, 'False')
    assert not (tmp_path / 'cache').exists()


# ansible-core's routing table (ansible.builtin's meta/runtime.yml), read through the collection loader as every ansible
# process reads it: the parsed table is kept once and read back unchanged.
META_PROBE = (
    'import sys, json, hashlib; sys.path.insert(0, sys.argv[1]); import gpuops_lab_pyc_cache; '
    'from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder; '
    'import ansible.utils.collection_loader._collection_finder as cf; '
    '_AnsibleCollectionFinder(paths=[])._install(); '
    'import ansible_collections.ansible.builtin as b; '
    'print(hashlib.sha256(json.dumps(b._collection_meta, sort_keys=True, default=str).encode()).hexdigest(), '
    'len(b._collection_meta["plugin_routing"]["modules"]), getattr(cf._meta_yml_to_dict, "_gpuops_lab", False))'
)


def run_meta(cache, off=False):
    env = dict(os.environ, GPUOPS_LAB_PYC_CACHE='off' if off else str(cache), PYTHONPATH=HOOK_DIR)
    out = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'python'), '-c', META_PROBE, HOOK_DIR], env=env,
                         capture_output=True, text=True, timeout=120, cwd=str(cache.parent))
    assert out.returncode == 0, out.stderr
    return tuple(out.stdout.split())


def test_ansible_routing_table_is_parsed_once_and_read_back_the_same(tmp_path):
    cache = tmp_path / 'cache'
    digest, modules, active = run_meta(cache, off=True)
    assert active == 'False' and int(modules) > 100
    assert run_meta(cache) == (digest, modules, 'True')
    stored = sorted(f for f in os.listdir(cache) if f.startswith('meta-'))
    assert len(stored) == 1, stored
    mtime = os.stat(cache / stored[0]).st_mtime_ns
    # the second process reads the stored table (not rewritten) and sees exactly what the YAML says
    assert run_meta(cache) == (digest, modules, 'True')
    assert os.stat(cache / stored[0]).st_mtime_ns == mtime


# ---- the AnsiballZ payload cache (the same hook: recursive_finder of ansible.executor.module_common) ---------------
BUILD = r'''
import datetime, io, json, os, sys, zipfile
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
from ansible.executor import module_common as mc
path = sys.argv[1]
zf = zipfile.ZipFile(io.BytesIO(), 'w', compression=zipfile.ZIP_DEFLATED)
meta = mc.recursive_finder('m', 'ansible_collections.labt.azb.plugins.modules.m', open(path, 'rb').read(), zf,
                           datetime.datetime(2026, 12, 1), mc._builder.ExtensionManager.create(task_vars={}))
print(json.dumps({'wrapped': getattr(mc.recursive_finder, '_gpuops_lab', False), 'profile': meta.serialization_profile,
                  'files': dict((n, zf.read(n).decode()) for n in zf.namelist() if n.startswith('ansible_collections'))}))
'''


def collection(tmp_path):
    base = tmp_path / 'collections' / 'ansible_collections' / 'labt' / 'azb' / 'plugins'
    (base / 'modules').mkdir(parents=True)
    (base / 'module_utils').mkdir()
    (base / 'modules' / 'm.py').write_text(
        'from ansible.module_utils.basic import AnsibleModule\n'
        'from ansible_collections.labt.azb.plugins.module_utils.u import VALUE\n')
    (base / 'module_utils' / 'u.py').write_text('VALUE = 1\n')
    return base


def build(base, cache, mode='on', extra_path=None):
    paths = [str(base.parents[3])] + ([str(extra_path)] if extra_path else [])
    env = dict(os.environ, GPUOPS_LAB_PYC_CACHE=str(cache), GPUOPS_LAB_ANSIBALLZ_CACHE=mode,
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(paths), PYTHONPATH=HOOK_DIR)
    out = subprocess.run([sys.executable, '-c', 'import gpuops_lab_pyc_cache\n' + BUILD, str(base / 'modules' / 'm.py')],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def entries(cache):
    return sorted(n for n in os.listdir(cache) if n.startswith('ansiballz-')) if cache.exists() else []


def test_ansiballz_a_later_build_replays_the_stored_payload_and_an_edited_module_util_rebuilds(tmp_path):
    base, cache = collection(tmp_path), tmp_path / 'cache'
    first = build(base, cache)
    assert first['wrapped'] is True and first['profile'] == 'legacy'
    util = 'ansible_collections/labt/azb/plugins/module_utils/u.py'
    assert first['files'][util] == 'VALUE = 1\n'
    [entry] = entries(cache)
    mtime = os.stat(cache / entry).st_mtime_ns
    # the same module and sources: the stored payload, not a new build (the entry is not written again)
    assert build(base, cache) == first
    assert entries(cache) == [entry] and os.stat(cache / entry).st_mtime_ns == mtime
    # a search directory that does not exist (a playbook's own collections/ next to it: every lab test has one) is
    # not part of the key - the first fresh run missed every time for it
    assert build(base, cache, extra_path=tmp_path / 'no-such-collections') == first
    assert entries(cache) == [entry]
    # a module_util edited (and one more imported): the entry no longer fits its sources, the payload is built anew
    (base / 'module_utils' / 'v.py').write_text('OTHER = 3\n')
    (base / 'module_utils' / 'u.py').write_text(
        'from ansible_collections.labt.azb.plugins.module_utils.v import OTHER\nVALUE = 2\n')
    again = build(base, cache)
    assert again['files'][util].endswith('VALUE = 2\n')
    assert again['files']['ansible_collections/labt/azb/plugins/module_utils/v.py'] == 'OTHER = 3\n'
    assert os.stat(cache / entry).st_mtime_ns != mtime


def test_ansiballz_off_leaves_recursive_finder_alone(tmp_path):
    base, cache = collection(tmp_path), tmp_path / 'cache'
    out = build(base, cache, mode='off')
    assert out['wrapped'] is False and 'ansible_collections/labt/azb/plugins/module_utils/u.py' in out['files']
    assert entries(cache) == []
