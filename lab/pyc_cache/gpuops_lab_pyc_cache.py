"""Lab only: a bytecode cache for modules that Python imports from zip files (AnsiballZ payloads).

ansible-core runs every module from a zip it builds on the controller (AnsiballZ) and Python imports the module and
its module_utils from that zip with ``zipimport``, which compiles every source file each time and never caches
bytecode: ``ansible.module_utils.basic`` and its imports cost 60-170 ms per module run, more than the rest of a
short module. This hook keeps the code objects that ``zipimport`` compiles in a directory, keyed by the interpreter's
bytecode magic number, its optimisation level and the source's SHA-256, so a later run with the same source loads
them instead of compiling. Nothing else changes: the same sources run, and ``co_filename`` is set to the path in the
zip of the run that loads them, as a compile would.

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


class _CollectionLoaderHook(object):
    def __init__(self, prefix):
        self.prefix = prefix

    def find_spec(self, name, path=None, target=None):
        if name != _COLLECTION_FINDER:
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
        exec_module, prefix = loader.exec_module, self.prefix

        def exec_and_patch(module):
            exec_module(module)
            module.compile = _cached_compile(prefix)
            meta = getattr(module, '_meta_yml_to_dict', None)
            if meta is not None:
                module._meta_yml_to_dict = _cached_meta(meta)

        loader.exec_module = exec_and_patch
        return spec


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


if _DIR != 'off':
    _install()
