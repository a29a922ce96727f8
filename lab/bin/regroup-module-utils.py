#!/usr/bin/env python3
"""One-off that grouped plugins/module_utils by layer (issue #17); kept as the record of how the layout was made.

    python3 lab/bin/regroup-module-utils.py                  # regroup the checkout it lives in
    python3 lab/bin/regroup-module-utils.py --root DIR       # regroup another checkout (a throwaway clone)
    python3 lab/bin/regroup-module-utils.py --dry-run        # list what it would do, change nothing
    python3 lab/bin/regroup-module-utils.py --map NAME=_layer # place a file the table below does not know yet

What it does, in this order (nothing is touched before every file is placed):
  1. checks that every plugins/module_utils/*.py and tests/unit/plugins/module_utils/test_*.py has a layer in
     LAYER_OF / TEST_LAYER_OF (or --map); an unplaced file fails the run and is named, with the command to place it;
  2. ``git mv`` plugins/module_utils/NAME.py to plugins/module_utils/<layer>/NAME.py and the unit tests to
     tests/unit/plugins/module_utils/<layer>/test_*.py (the tests' ``os.path.dirname(__file__)`` becomes the parent
     directory, so the shared fixtures/ stay where the lab and the module tests find them);
  3. writes an empty ``__init__.py`` in each layer package (ansible-test's empty-init rule);
  4. rewrites every reference of the old names in plugins/, tests/, lab/, roles/, playbooks/, docs/ and the
     top-level *.md files: dotted paths (``...plugins.module_utils.NAME`` and ``mock.patch`` strings),
     ``from ...plugins.module_utils import a, b as c`` (split per layer when the names live in different layers),
     relative imports (``from .NAME``, ``from ..module_utils.NAME``), and file paths
     (``plugins/module_utils/NAME.py``, ``'module_utils', 'NAME.py'``, ``/ 'module_utils' / 'NAME.py'``).
Idempotent: a second run finds nothing to move or rewrite and says so. changelogs/ (history) is left alone.

The layers (docs/layout.md): _common imports nothing of ours; _node, _esxi and _cluster import _common only;
_doctor (diagnoses facts of every layer) may import all of them. lab/tests/tooling/test_layout.py enforces it.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ROOT = os.path.dirname(os.path.dirname(HERE))

LAYERS = ('_common', '_node', '_esxi', '_cluster', '_doctor')
# What a layer's module_utils may import from the collection's own module_utils (besides its own layer).
ALLOWED_IMPORTS = {
    '_common': (),
    '_node': ('_common',),
    '_esxi': ('_common',),
    '_cluster': ('_common',),
    '_doctor': ('_common', '_node', '_esxi', '_cluster'),
}

# module_utils file (without .py) -> layer. Decided per file from who imports it and where it runs:
#   _common  - pure data/helpers any layer uses (catalogue, strategy model, file helper);
#   _node    - code that runs on a GPU node and touches the host (probes, driver, runtime files, sharing);
#   _esxi    - the vSphere/ESXi side of GPU passthrough;
#   _cluster - controller/cluster code: manifests, scheduler config, report, the Kubernetes access layer;
#   _doctor  - the doctor's checks, which judge facts of every layer.
LAYER_OF = {
    # _common
    'file_utils': '_common',
    'gpu_catalog': '_common',
    'gpu_strategy': '_common',          # strategy model (issue #17 item 2; created by another branch)
    # _node
    'apt_source': '_node',
    'gpu_facts': '_node',
    'node_probe': '_node',
    'nvml_probe': '_node',
    'nvidia_driver': '_node',
    'nvidia_driver_select': '_node',
    'gpu_sharing_config': '_node',
    'gpu_sharing_engine': '_node',
    'gpu_sharing_mps': '_node',
    'gpu_sharing_nvml': '_node',
    'gpu_sharing_plan': '_node',
    'runtime_config_containerd': '_node',
    'runtime_config_crio': '_node',
    'runtime_config_docker': '_node',
    'runtime_config_rancher': '_node',
    'runtime_config_toml': '_node',
    'runtime_toolkit_repo': '_node',    # NVIDIA toolkit repository per distribution (issue #15 branch)
    # _esxi
    'esxi_gpu': '_esxi',
    'esxi_vsphere': '_esxi',
    'esxi_passthrough': '_esxi',        # esxi_gpu_passthrough's runner
    # _cluster
    'gpu_share_report_kube': '_cluster',
    'gpu_share_report_model': '_cluster',
    'gpu_share_report_render': '_cluster',
    'gpu_stack_common': '_cluster',
    'gpu_stack_gpu_manager': '_cluster',
    'gpu_stack_gpushare': '_cluster',
    'gpu_stack_hami': '_cluster',
    'gpu_stack_nvidia': '_cluster',
    'gpu_stack_operator': '_cluster',
    'gpu_stack_render': '_cluster',
    'gpu_stack_volcano': '_cluster',
    'kube_scheduler_adapters': '_cluster',
    'kube_scheduler_render': '_cluster',
    'kube_scheduler_plan': '_cluster',  # kube_scheduler_config's planning
    'k8s_access': '_cluster',           # Kubernetes access layer (issue #17 item 4; created by another branch)
    'k8s_converger': '_cluster',        # k8s_converge's engine (issue #17 item 4; another branch)
    'cluster_plan': '_cluster',         # pool and node-label planning (issue #17 item 3; another branch)
    'gpu_sharing_drain': '_cluster',    # GPU pod drain through the API, module gpu_node_drain (issue #16 branch)
    # _doctor
    'gpu_doctor_checks': '_doctor',
}

# Unit tests whose name is not test_<module_utils name>.py.
TEST_LAYER_OF = {
    'test_gpu_stack_converge': '_cluster',
    'test_kube_scheduler_absent': '_cluster',
    'test_kube_scheduler_conformance': '_cluster',
    'test_kube_scheduler_site_config': '_cluster',
    'test_mig_catalog_conformance': '_common',
    'test_gpu_catalog_pci_ids': '_common',
}

# Trees whose text files get their references rewritten; changelogs/ (history) and .git are not among them.
SCAN_DIRS = ('plugins', 'tests', 'lab', 'roles', 'playbooks', 'docs', 'meta', 'molecule', 'extensions')
SCAN_EXT = ('.py', '.md', '.yml', '.yaml', '.txt', '.j2', '.cfg', '.ini', '.toml', '.sh', '.json', '.rst')
PKG = 'ansible_collections.gpuops.k8s_gpu.plugins.module_utils'
SELF = os.path.join('lab', 'bin', 'regroup-module-utils.py')


class RegroupError(Exception):
    pass


def test_layer(stem, layer_of):
    """Layer of a unit test file stem (test_x), or None."""
    if stem in TEST_LAYER_OF:
        return TEST_LAYER_OF[stem]
    return layer_of.get(stem[len('test_'):])


def flat_files(root, rel, pattern):
    d = os.path.join(root, rel)
    if not os.path.isdir(d):
        return []
    return sorted(n[:-3] for n in os.listdir(d) if re.match(pattern, n) and os.path.isfile(os.path.join(d, n)))


def unplaced(root, layer_of):
    """Flat files with no layer: fail loudly rather than leave them behind."""
    missing = []
    for stem in flat_files(root, 'plugins/module_utils', r'^(?!__init__)\w+\.py$'):
        if stem not in layer_of:
            missing.append('plugins/module_utils/%s.py' % stem)
    for stem in flat_files(root, 'tests/unit/plugins/module_utils', r'^test_\w+\.py$'):
        if test_layer(stem, layer_of) is None:
            missing.append('tests/unit/plugins/module_utils/%s.py' % stem)
    return missing


def git(root, *args):
    subprocess.run(('git',) + args, cwd=root, check=True, stdout=subprocess.DEVNULL)


def moves(root, layer_of):
    """(old, new, is_test) for every file still at its flat place."""
    out = []
    for stem in flat_files(root, 'plugins/module_utils', r'^(?!__init__)\w+\.py$'):
        out.append(('plugins/module_utils/%s.py' % stem,
                    'plugins/module_utils/%s/%s.py' % (layer_of[stem], stem), False))
    for stem in flat_files(root, 'tests/unit/plugins/module_utils', r'^test_\w+\.py$'):
        out.append(('tests/unit/plugins/module_utils/%s.py' % stem,
                    'tests/unit/plugins/module_utils/%s/%s.py' % (test_layer(stem, layer_of), stem), True))
    return out


def _read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def _write(path, text):
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def rewrite_test_dirname(text):
    """A test moved one directory down keeps finding ../fixtures and ../../../../roles: its base is the parent."""
    return text.replace('os.path.dirname(__file__)', 'os.path.dirname(os.path.dirname(__file__))')


def _split_names(body):
    names = []
    for part in body.replace('(', ' ').replace(')', ' ').replace('\\\n', ' ').split(','):
        part = ' '.join(part.split())
        if part:
            names.append(part)
    return names


def rewrite_text(text, layer_of, all_names):
    """Rewrite every reference of a flat module_utils name; returns the new text."""
    names_re = '|'.join(sorted((re.escape(n) for n in all_names), key=len, reverse=True))
    test_names = set('test_' + n for n in all_names) | set(TEST_LAYER_OF)

    # 1. from PKG import a, b as c  /  from PKG import (\n a,\n b,\n)
    imp_re = re.compile(r'^([ \t]*)from ' + re.escape(PKG) + r' import (\([^)]*\)|[^\n]*)$', re.M)

    def imp(m):
        indent, body = m.group(1), m.group(2)
        names = _split_names(body)
        groups = {}
        for n in names:
            base = n.split(' as ')[0].strip()
            if base not in layer_of:
                raise RegroupError('cannot place %r imported from %s' % (base, PKG))
            groups.setdefault(layer_of[base], []).append(n)
        if len(groups) == 1:
            layer = list(groups)[0]
            return '%sfrom %s.%s import %s' % (indent, PKG, layer, body)
        return '\n'.join('%sfrom %s.%s import %s' % (indent, PKG, layer, ', '.join(groups[layer]))
                         for layer in LAYERS if layer in groups)

    text = imp_re.sub(imp, text)

    # 2. dotted: module_utils.NAME (imports, mock.patch strings, prose)
    text = re.sub(r'\bmodule_utils\.(%s)\b' % names_re, lambda m: 'module_utils.%s.%s' % (layer_of[m.group(1)],
                                                                                         m.group(1)), text)
    # 3. paths: module_utils/NAME.py and module_utils/NAME (no extension: docs)
    text = re.sub(r'\bmodule_utils/(%s)\b' % names_re, lambda m: 'module_utils/%s/%s' % (layer_of[m.group(1)],
                                                                                        m.group(1)), text)

    # 4. unit test paths: tests/unit/plugins/module_utils/test_x.py, also split over a line and {a,b} forms
    def test_path(m):
        sep, stem = m.group(1), m.group(2)
        stems = [stem]
        brace = re.match(r'^(\w*)\{([\w,]+)\}$', stem)
        if brace:
            stems = [brace.group(1) + s for s in brace.group(2).split(',')]
        layers = set(test_layer(s, layer_of) for s in stems)
        if len(layers) != 1 or None in layers:
            return m.group(0)
        return 'module_utils/%s%s/%s' % (sep, layers.pop(), stem)

    text = re.sub(r'\bmodule_utils/(\s*)(test_\w*(?:\{[\w,]+\})?)(?=\.py|\b)',
                  lambda m: test_path(m) if (m.group(2) in test_names or '{' in m.group(2)) else m.group(0), text)

    # 5. os.path.join(..., 'module_utils', 'NAME.py') and Path / 'module_utils' / 'NAME.py'
    text = re.sub(r"""(['"])module_utils\1(\s*,\s*)(['"])(%s)\.py\3""" % names_re,
                  lambda m: '%smodule_utils%s%s%s%s%s%s%s.py%s' % (
                      m.group(1), m.group(1), m.group(2), m.group(3), layer_of[m.group(4)], m.group(3), m.group(2),
                      m.group(3) + m.group(4), m.group(3)), text)
    text = re.sub(r"""(['"])module_utils\1(\s*/\s*)(['"])(%s)\.py\3""" % names_re,
                  lambda m: '%smodule_utils%s%s%s%s%s%s%s.py%s' % (
                      m.group(1), m.group(1), m.group(2), m.group(3), layer_of[m.group(4)], m.group(3), m.group(2),
                      m.group(3) + m.group(4), m.group(3)), text)
    return text


def rewrite_relative(text, layer_of, own_layer):
    """In a module_utils file: ``from .NAME import`` of another layer becomes ``from .._layer.NAME import``."""
    def rel(m):
        name = m.group(2)
        layer = layer_of[name]
        if own_layer == layer:
            return m.group(0)
        return '%sfrom ..%s.%s import' % (m.group(1), layer, name)

    names_re = '|'.join(sorted((re.escape(n) for n in layer_of), key=len, reverse=True))
    return re.sub(r'^([ \t]*)from \.(%s) import' % names_re, rel, text, flags=re.M)


def scan_files(root):
    for top in SCAN_DIRS:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith('.') and d not in ('__pycache__', 'node_modules')]
            for fn in filenames:
                if fn.endswith(SCAN_EXT):
                    yield os.path.relpath(os.path.join(dirpath, fn), root)
    for fn in sorted(os.listdir(root)):
        if fn.endswith('.md') and os.path.isfile(os.path.join(root, fn)):
            yield fn


def run(root, extra_map=None, dry_run=False, out=sys.stdout):
    """Regroup the checkout at root. Returns the number of changes (0 on a second run)."""
    layer_of = dict(LAYER_OF)
    layer_of.update(extra_map or {})
    bad = {n: layer for n, layer in layer_of.items() if layer not in LAYERS}
    if bad:
        raise RegroupError('unknown layer(s) %s; allowed: %s' % (bad, ', '.join(LAYERS)))
    missing = unplaced(root, layer_of)
    if missing:
        raise RegroupError(
            'no layer for: %s. Add each to LAYER_OF / TEST_LAYER_OF in %s or pass --map NAME=LAYER (layers: %s)'
            % (', '.join(missing), SELF, ', '.join(LAYERS)))
    changes = 0
    todo = moves(root, layer_of)
    for old, new, is_test in todo:
        out.write('move %s -> %s\n' % (old, new))
        changes += 1
        if dry_run:
            continue
        os.makedirs(os.path.join(root, os.path.dirname(new)), exist_ok=True)
        git(root, 'mv', old, new)
        if is_test:
            path = os.path.join(root, new)
            _write(path, rewrite_test_dirname(_read(path)))
    for layer in sorted(set(layer_of.values())):
        init = os.path.join(root, 'plugins', 'module_utils', layer, '__init__.py')
        if os.path.isdir(os.path.dirname(init)) and not os.path.exists(init):
            out.write('create %s\n' % os.path.relpath(init, root))
            changes += 1
            if not dry_run:
                _write(init, '')
                git(root, 'add', os.path.relpath(init, root))
    for rel in sorted(set(scan_files(root))):
        if rel == SELF:
            continue
        path = os.path.join(root, rel)
        try:
            text = _read(path)
        except (UnicodeDecodeError, OSError):
            continue
        new = rewrite_text(text, layer_of, layer_of)
        parts = rel.split(os.sep)
        if parts[:2] == ['plugins', 'module_utils'] and len(parts) == 4 and parts[2] in LAYERS:
            new = rewrite_relative(new, layer_of, parts[2])
        if new != text:
            out.write('rewrite %s\n' % rel)
            changes += 1
            if not dry_run:
                _write(path, new)
    out.write('%d change(s)%s\n' % (changes, ' (dry run)' if dry_run else ''))
    return changes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=DEFAULT_ROOT, help='checkout to regroup (default: this one)')
    ap.add_argument('--dry-run', action='store_true', help='list what would change, change nothing')
    ap.add_argument('--map', action='append', default=[], metavar='NAME=LAYER',
                    help='layer of a module_utils file the table does not know (repeatable)')
    args = ap.parse_args(argv)
    extra = {}
    for item in args.map:
        name, sep, layer = item.partition('=')
        if not sep or not name:
            ap.error('--map wants NAME=LAYER, got %r' % item)
        extra[name.strip()] = layer.strip()
    try:
        run(os.path.abspath(args.root), extra, args.dry_run)
    except RegroupError as e:
        sys.stderr.write('regroup-module-utils: %s\n' % e)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
