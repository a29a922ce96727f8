"""Lab only: a bytecode cache for modules that Python imports from zip files (AnsiballZ payloads).

ansible-core runs every module from a zip it builds on the controller (AnsiballZ) and Python imports the module and
its module_utils from that zip with ``zipimport``, which compiles every source file each time and never caches
bytecode: ``ansible.module_utils.basic`` and its imports cost 60-170 ms per module run, more than the rest of a
short module. This hook keeps the code objects that ``zipimport`` compiles in a directory, keyed by the interpreter's
bytecode magic number, its optimisation level and the source's SHA-256, so a later run with the same source loads
them instead of compiling. Nothing else changes: the same sources run, and ``co_filename`` is set to the path in the
zip of the run that loads them, as a compile would.

Since 2026-12-01 it also keeps what ansible-core's AnsiballZ builder puts into each module's payload, so a later
ansible process with the same module and sources does not parse them again (below, ``_ModuleCommonHook``).

The lab installs it into its own virtual environments (lab/bin/bootstrap.sh) and into its node containers
(lab/docker/node.sh) through a ``.pth`` file; the collection never imports it. ``GPUOPS_LAB_PYC_CACHE`` names the
directory (default ``~/.cache/gpuops/pyc``); ``off`` disables the hook. A directory that cannot be written only
turns the cache off for that process. Writes are atomic (a temporary file, then a rename), so processes and
containers can share the directory.
"""

import os

_DIR = os.environ.get('GPUOPS_LAB_PYC_CACHE') or os.path.join(
    os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'), 'gpuops', 'pyc')


def _install():
    import zipimport

    compile_source = getattr(zipimport, '_compile_source', None)
    if compile_source is None or getattr(compile_source, '_gpuops_lab', False):
        return
    import sys

    try:
        magic = zipimport._bootstrap_external.MAGIC_NUMBER
    except AttributeError:  # pragma: no cover - every CPython 3.x has it
        return
    prefix = magic + b'O%d\0' % sys.flags.optimize

    def cached_compile_source(pathname, source):
        import hashlib  # here, not at start-up: most processes never import from a zip

        path = os.path.join(_DIR, hashlib.sha256(prefix + source).hexdigest())
        return _cached_code(path, pathname, lambda: compile_source(pathname, source))

    cached_compile_source._gpuops_lab = True
    zipimport._compile_source = cached_compile_source
    sys.meta_path.insert(0, _CollectionLoaderHook(magic + b'A%d\0' % sys.flags.optimize))
    if os.environ.get('GPUOPS_LAB_ANSIBALLZ_CACHE') != 'off':
        sys.meta_path.insert(0, _ModuleCommonHook())


def _store(path, write, *errors):
    """Write a cache entry atomically (a file of this pid, then renamed): concurrent processes never read half of one."""
    tmp = '%s.%d.tmp' % (path, os.getpid())
    try:
        os.makedirs(_DIR, exist_ok=True)
        with open(tmp, 'wb') as fh:
            write(fh)
        os.replace(tmp, path)
    except (OSError,) + errors:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _cached_code(path, filename, compile_it):
    """The code object cached at path (its co_filename set to filename), else compile_it()'s, stored there."""
    import _imp
    import marshal

    try:
        with open(path, 'rb') as fh:
            code = marshal.load(fh)
    except (OSError, EOFError, ValueError, TypeError):
        code = compile_it()
        _store(path, lambda fh: marshal.dump(code, fh))
        return code
    _imp._fix_co_filename(code, filename)
    return code


# ansible-core's collection loader (_AnsibleCollectionPkgLoaderBase.get_code in
# ansible/utils/collection_loader/_collection_finder.py) compiles every Python file of a collection it imports with the
# builtin compile() and caches no bytecode either: every ansible-playbook process, and every task worker that loads a
# filter plugin its parent had not loaded yet, compiles the collection's action and filter plugins and the module_utils
# they import again. The hook below waits for that module's import (a finder first on sys.meta_path, used once) and
# gives it a compile() of its own that keeps the code objects of exec-mode compiles in the same directory, keyed like
# the zip's; every other name of the module, and every other module's compile(), is left as it is.
_COLLECTION_FINDER = 'ansible.utils.collection_loader._collection_finder'


class _ImportHook(object):
    """A finder first on sys.meta_path for one module (``target``): it lets the path finder load it, then calls
    ``patch`` on the executed module, and leaves sys.meta_path at the first import of that name."""
    target = None

    def patch(self, module):
        raise NotImplementedError

    def find_spec(self, name, path=None, target=None):
        if name != self.target:
            return None
        import sys
        from importlib.machinery import PathFinder

        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = PathFinder.find_spec(name, path)
        loader = getattr(spec, 'loader', None)
        if loader is None or not hasattr(loader, 'exec_module'):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            self.patch(module)

        loader.exec_module = exec_and_patch
        return spec


class _CollectionLoaderHook(_ImportHook):
    target = _COLLECTION_FINDER

    def __init__(self, prefix):
        self.prefix = prefix

    def patch(self, module):
        module.compile = _cached_compile(self.prefix)
        meta = getattr(module, '_meta_yml_to_dict', None)
        if meta is not None:
            module._meta_yml_to_dict = _cached_meta(meta)


def _cached_compile(prefix):
    import builtins

    def cached_compile(source, filename, mode, flags=0, dont_inherit=False, *args, **kwargs):
        if mode != 'exec' or flags or not dont_inherit or args or kwargs or not isinstance(source, (str, bytes)):
            return builtins.compile(source, filename, mode, flags, dont_inherit, *args, **kwargs)
        import hashlib

        data = source.encode('utf-8', 'surrogateescape') if isinstance(source, str) else source
        path = os.path.join(_DIR, hashlib.sha256(prefix + (b's' if isinstance(source, str) else b'b') + data).hexdigest())
        return _cached_code(path, filename, lambda: builtins.compile(source, filename, mode, flags, dont_inherit))

    cached_compile._gpuops_lab = True
    return cached_compile


# Every ansible process also parses ansible-core's own routing table (ansible/config/ansible_builtin_runtime.yml,
# 370 KB) and each collection's meta/runtime.yml with PyYAML (0.11-0.16 CPU-s for the first); the loader's function for
# that is meant to be replaced ("may be monkeypatched ... content_id ... to allow other implementations to cache the
# output", ansible/utils/collection_loader/_collection_meta.py). Its result, plain dicts, lists and strings, is kept
# pickled in the same directory, keyed by the YAML's SHA-256; each call gets a fresh copy (5 ms to load).
def _cached_meta(meta_yml_to_dict):
    def cached_meta_yml_to_dict(yaml_string_data, content_id):
        if not isinstance(yaml_string_data, (str, bytes)):
            return meta_yml_to_dict(yaml_string_data, content_id)
        import hashlib
        import pickle

        data = yaml_string_data.encode('utf-8', 'surrogateescape') if isinstance(yaml_string_data, str) else yaml_string_data
        path = os.path.join(_DIR, 'meta-' + hashlib.sha256(b'gpuops-lab-meta-1\0' + data).hexdigest())
        try:
            with open(path, 'rb') as fh:
                return pickle.load(fh)
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
            pass
        result = meta_yml_to_dict(yaml_string_data, content_id)
        _store(path, lambda fh: pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL), pickle.PicklingError)
        return result

    cached_meta_yml_to_dict._gpuops_lab = True
    return cached_meta_yml_to_dict


# Every ansible-playbook (and ad-hoc ansible) process builds the AnsiballZ payload of each module it runs again:
# ansible-core's cache of the payloads (ansible/executor/module_common.py, _find_module_utils: the "ansiballz_cache"
# directory) lives in the process's own local temporary directory, so it serves that one run's later workers only.
# Building one means recursive_finder: parsing the module and every module_utils file it pulls in to find their imports
# (0.14-0.35 CPU-s a module; the suite's several hundred runs build most modules again each). The hook below keeps
# what recursive_finder wrote into the zip and the metadata it returned, keyed by ansible-core's version and location,
# the module search paths, the module's name and source; an entry is used only when every file it came from (each
# written source carries its path, ansible-core's Origin tag) has the size, mtime and inode it had, so an edited, moved
# or replaced module_utils file makes a miss. A build whose zip holds anything else than those files, the two package
# stubs ansible-core writes itself and empty package inits (an embedded resource) is not kept, nor one with an
# AnsiballZ extension (debugger, coverage). Nothing else changes: the replay writes the same names and bytes into the
# zip, with the run's own date. GPUOPS_LAB_ANSIBALLZ_CACHE=off leaves this part out.
_MODULE_COMMON = 'ansible.executor.module_common'
_STUBS = ('ansible/__init__.py', 'ansible/module_utils/__init__.py')


class _ModuleCommonHook(_ImportHook):
    target = _MODULE_COMMON

    def patch(self, module):
        finder = getattr(module, 'recursive_finder', None)
        if finder is not None:
            module.recursive_finder = _cached_finder(finder, module)


def _cached_finder(recursive_finder, mc):
    import inspect

    try:
        params = list(inspect.signature(recursive_finder).parameters)
        from ansible import __file__ as ansible_file, __version__ as ansible_version
        from ansible._internal._datatag._tags import Origin
        from ansible.utils.collection_loader._collection_config import AnsibleCollectionConfig
        make_zinfo = mc._make_zinfo
    except Exception:  # another ansible-core: its own build, unchanged
        return recursive_finder
    if params != ['name', 'module_fqn', 'module_data', 'zf', 'date_time', 'extension_manager']:
        return recursive_finder

    def stat(path):
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ino)

    def cached_recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager):
        if extension_manager.extension_names or extension_manager.debugger_enabled:
            return recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager)
        import hashlib
        import pickle

        try:
            # the directories that exist, as recursive_finder looks only there: a playbook's own (module_utils,
            # collections next to it) are in the list whether they exist or not, and every lab test has its own
            paths = [str(p) for p in mc.module_utils_loader._get_paths(subdirs=False)]
            paths += [str(p) for p in AnsibleCollectionConfig.collection_paths or []]
            paths = [p for p in paths if os.path.isdir(p)]
        except Exception:
            return recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager)
        key = hashlib.sha256(b'\0'.join([b'gpuops-lab-ansiballz-1', ansible_version.encode(), ansible_file.encode(),
                                         '\n'.join(paths).encode('utf-8', 'surrogateescape'), name.encode(),
                                         module_fqn.encode(), bytes(module_data)])).hexdigest()
        path = os.path.join(_DIR, 'ansiballz-' + key)
        try:
            with open(path, 'rb') as fh:
                metadata, files = pickle.load(fh)
        except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError, pickle.UnpicklingError):
            files = None
        if files is not None and all(src is None or stat(src) == st for dummy, dummy, src, st in files):
            for arcname, data, dummy, dummy in files:
                zf.writestr(make_zinfo(arcname, date_time, zf=zf), data)
            return metadata
        written = []
        writestr = zf.writestr

        def recording_writestr(zinfo, data, *args, **kwargs):
            written.append((getattr(zinfo, 'filename', zinfo), data))
            return writestr(zinfo, data, *args, **kwargs)

        zf.writestr = recording_writestr
        try:
            metadata = recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager)
        finally:
            del zf.writestr
        files = []
        for arcname, data in written:
            origin = Origin.get_tag(data)
            src = getattr(origin, 'path', None) if origin is not None else None
            if src is None and data and arcname not in _STUBS:
                return metadata  # a file of unknown origin (an embed): not kept
            # (a package init the collection loader made up carries the path it would have: kept as absent)
            files.append((arcname, bytes(data), src, stat(src) if src is not None else None))
        _store(path, lambda fh: pickle.dump((metadata, files), fh, protocol=pickle.HIGHEST_PROTOCOL),
               pickle.PicklingError, TypeError, AttributeError)
        return metadata

    cached_recursive_finder._gpuops_lab = True
    return cached_recursive_finder


if _DIR != 'off':
    _install()
