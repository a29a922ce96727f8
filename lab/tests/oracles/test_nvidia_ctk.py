"""nvidia-ctk as the oracle (NVIDIA/nvidia-container-toolkit v1.20.0, the collection's pinned toolkit, built from the
Go module proxy by lab/go/build.sh nvidia-ctk).

1. `nvidia-ctk runtime configure --runtime=docker|containerd|crio` and the collection's container_runtime_config
   module get the same input files (the module's unit-test fixtures, tests/unit/plugins/module_utils/fixtures/runtime,
   and bare containerd files of config versions 2 and 3) with the same asks (set as default or not, CDI or not). The
   WHOLE output of both is compared key by key (containerd: the configuration the main file and its imports make
   together), and the difference must be exactly the table INTENDED below: every difference there is on purpose, with
   who is right and its effect (docs/lab.md "Oracles"); any other difference fails.
2. `nvidia-ctk cdi generate --mode=nvml` against the NVML simulator (lab/nvml_sim: each inventory without MIG mode) and
   a driver root made here: the spec's kind and device names are what the collection relies on (kind
   nvidia.com/gpu; one device per GPU by index and by UUID, and "all").

Run: .venv/bin/pytest -q lab/tests/oracles/test_nvidia_ctk.py
"""
import glob
import json
import os
import shlex
import shutil
import subprocess

import pytest
import yaml

from conftest import run_role_on_localhost
from oracle_util import (NVIDIA_RUNTIME, PRIVATE_PROC, ROOT, RUNTIME_FIXTURES, cap_minor, dig, go_program,
                         mig_minors_lines, read_toml, run_ours, without)

CRI = {2: 'io.containerd.grpc.v1.cri', 3: 'io.containerd.cri.v1.runtime'}


@pytest.fixture(scope='module')
def ctk():
    return go_program('nvidia-ctk', 'version 1.20.0')


@pytest.fixture(scope='module')
def containerd():
    """containerd v2.3.4 (lab/go/containerd) first on PATH for the module, which refuses cdi on a containerd older than
    1.7 (this machine's Debian 1.6.20)."""
    return go_program('containerd', ' v2.3.4 ')


def configure(ctk, *args):
    proc = subprocess.run([ctk, 'runtime', 'configure'] + list(args), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# ------------------------------------------------------------------------------------------------- whole output
ABSENT = '<absent>'


def flat(doc, prefix=()):
    """{key path: leaf value} of a parsed document (lists are leaves; an empty table is a leaf {})."""
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def whole_diff(ours, theirs):
    """{key path: (module's value, nvidia-ctk's value)} for every key where the two documents differ."""
    fo, ft = flat(ours), flat(theirs)
    return {k: (fo.get(k, ABSENT), ft.get(k, ABSENT)) for k in set(fo) | set(ft) if fo.get(k, ABSENT) != ft.get(k, ABSENT)}


def merged(a, b):
    """b merged into a, table by table (containerd 2.x's merge of an imported file; for the files compared here
    containerd 1.x's replacement of a plugin's table gives the same: nvidia-ctk's drop-in holds a copy of the main
    file's whole CRI table, the module's drop-in is written only when the main file has none)."""
    out = json.loads(json.dumps(a))
    for k, v in b.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def containerd_effective(main, under):
    """The configuration containerd makes of main and the files it imports that lie under the directory under (the
    tests' own; a fixture's other imports, e.g. /etc/containerd/certs.d/*.toml, are not this machine's to read)."""
    doc = read_toml(main)
    for pattern in doc.get('imports', []):
        if str(pattern).startswith(str(under)):
            for f in sorted(glob.glob(pattern)):
                doc = merged(doc, read_toml(f))
    return doc


class Intended:
    """One difference on purpose: on cases where applies(case) holds, the key path (a function of the case) has the
    module's value ours(case) and nvidia-ctk's theirs(case) (ABSENT: no such key). why: who is right and the effect."""

    def __init__(self, name, engine, applies, path, ours, theirs, why):
        self.name, self.engine, self.applies, self.path = name, engine, applies, path
        self.ours, self.theirs, self.why = ours, theirs, why


def _cri(c, *rest):
    return ('plugins', CRI[c['version']]) + rest


def _nvidia_fallback(key, value):
    return Intended(
        'containerd-nvidia-%s' % key, 'containerd', lambda c: c['mode'] == 'dropin',
        lambda c: _cri(c, 'containerd', 'runtimes', 'nvidia', key), lambda c: ABSENT, lambda c: value,
        'no runc table to copy (a bare file): nvidia-ctk falls back to writing this key with containerd\'s own default '
        '(GetDefaultRuntimeOptions, pkg/config/engine/containerd/config.go), the module leaves it to containerd: '
        'no effect')


INTENDED = [
    Intended('docker-args', 'docker', lambda c: True, lambda c: ('runtimes', 'nvidia', 'args'),
             lambda c: ABSENT, lambda c: [],
             'nvidia-ctk writes "args": [] (pkg/config/engine/docker/docker.go); Docker reads a runtime\'s arguments '
             'from "runtimeArgs", not "args": no effect; the module writes only "path" (and runtimeArgs when asked)'),
    Intended('containerd-imports', 'containerd', lambda c: True, lambda c: ('imports',),
             lambda c: (c['before'].get('imports', []) + [c['ours_dropin']] if c['mode'] == 'dropin'
                        else c['before'].get('imports', ABSENT)),
             lambda c: c['before'].get('imports', []) + [c['theirs_glob']],
             'nvidia-ctk always writes its drop-in (a copy of the main file\'s whole CRI table) and imports every '
             '*.toml of the drop-in\'s directory; the module edits the main file when it configures the CRI plugin '
             '(no import) and otherwise imports the one drop-in it owns: the same configuration takes effect '
             '(both right; with nvidia-ctk any other *.toml put in that directory is loaded too)'),
    Intended('containerd-cdi-spec-dirs', 'containerd', lambda c: c['cdi'] and 'cdi_spec_dirs' not in dig(
                 c['before'], ['plugins', CRI[c['version']]], {}),
             lambda c: _cri(c, 'cdi_spec_dirs'), lambda c: ['/etc/cdi', '/var/run/cdi'], lambda c: ABSENT,
             'with CDI the module writes cdi_spec_dirs too (containerd\'s own default dirs, explicit, where the '
             'role\'s nvidia_container_runtime_cdi_spec_dirs can change them); nvidia-ctk sets enable_cdi alone: no '
             'effect with the defaults'),
    Intended('containerd-runc-in-dropin', 'containerd', lambda c: c['mode'] == 'dropin',
             lambda c: _cri(c, 'containerd', 'runtimes', 'runc', 'runtime_type'),
             lambda c: 'io.containerd.runc.v2', lambda c: ABSENT,
             'the module\'s drop-in names runc too: containerd 1.x replaces its built-in runtimes map (with runc) by '
             'a file\'s as soon as the file names a runtime; containerd 2.x merges and keeps runc either way (NCT-20)'),
    _nvidia_fallback('privileged_without_host_devices', False),
    _nvidia_fallback('runtime_engine', ''),
    _nvidia_fallback('runtime_root', ''),
    Intended('crio-inherit-default-runtime', 'crio', lambda c: 'inherit_default_runtime' in c['base_runtime'],
             lambda c: ('crio', 'runtime', 'runtimes', 'nvidia', 'inherit_default_runtime'),
             lambda c: ABSENT, lambda c: c['base_runtime']['inherit_default_runtime'],
             'nvidia-ctk copies the default runtime\'s whole table, inherit_default_runtime too; set to true, CRI-O '
             'would give the NVIDIA runtime the default runtime\'s runtime_path (cri-o docs/crio.conf.5.md): the '
             'module never copies it (CRI-O\'s default false)'),
    Intended('crio-platform-runtime-paths', 'crio', lambda c: 'platform_runtime_paths' in c['base_runtime'],
             lambda c: ('crio', 'runtime', 'runtimes', 'nvidia', 'platform_runtime_paths'),
             lambda c: ABSENT, lambda c: c['base_runtime']['platform_runtime_paths'],
             'nvidia-ctk copies the default runtime\'s whole table, its platform_runtime_paths too: CRI-O runs the '
             'path a matching image platform names INSTEAD of runtime_path (cri-o v1.34.0 internal/oci/oci.go '
             'PlatformRuntimePath, server/container_create.go), so the NVIDIA runtime would be bypassed (crun run '
             'directly, no GPU) for those images; the module never copies it'),
]


def intended(engine, case):
    """The differences the table INTENDED allows for this case: {key path: (module's value, nvidia-ctk's value)}."""
    out = {}
    for d in INTENDED:
        if d.engine == engine and d.applies(case):
            ours, theirs = d.ours(case), d.theirs(case)
            if ours != theirs and isinstance(theirs, dict) and ours is ABSENT:
                # a whole sub-table one side leaves out: its leaves, as whole_diff compares them
                out.update((tuple(d.path(case)) + k, (ABSENT, v)) for k, v in flat(theirs).items())
            elif ours != theirs:
                out[tuple(d.path(case))] = (ours, theirs)
    return out


def test_NCT_24_intended_differences_are_named_once_explained_and_documented():
    """Each difference on purpose has one name, a reason, and is listed in docs/lab.md's Oracles section."""
    names = [d.name for d in INTENDED]
    assert len(names) == len(set(names)) and all(len(d.why) > 40 for d in INTENDED)
    with open(os.path.join(ROOT, 'docs', 'lab.md')) as f:
        oracles = f.read().split('\n## Oracles\n', 1)[1].split('\n## ', 1)[0]
    assert [n for n in names if '`%s`' % n not in oracles] == []


# ------------------------------------------------------------------------------------------------------------ docker
DOCKER_INPUTS = {
    'site': os.path.join(RUNTIME_FIXTURES, 'daemon-mirrors-logopts.json'),
    'missing': None,
}


@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
@pytest.mark.parametrize('name', sorted(DOCKER_INPUTS))
def test_NCT_11_docker_daemon_json_same_runtime_default_and_other_keys(ctk, tmp_path, name, default):
    src = DOCKER_INPUTS[name]
    ours, theirs = tmp_path / 'ours.json', tmp_path / 'theirs.json'
    before = {}
    if src:
        shutil.copy(src, ours)
        shutil.copy(src, theirs)
        with open(src) as f:
            before = json.load(f)
    res = run_ours({'engine': 'docker', 'path': str(ours), 'set_as_default': default, 'backup': False})
    assert not res.get('failed'), res
    # the same binary on both sides: nvidia-ctk's default for Docker is the bare name (resolved on PATH by dockerd),
    # the module's an absolute path; either works, the comparison is of everything else
    configure(ctk, '--runtime=docker', '--config=%s' % theirs, '--nvidia-runtime-path=%s' % NVIDIA_RUNTIME,
              *(['--set-as-default'] if default else []))
    o, t = json.loads(ours.read_text()), json.loads(theirs.read_text())
    # the whole daemon.json: only the differences of the table INTENDED
    assert whole_diff(o, t) == intended('docker', {})
    assert o['runtimes']['nvidia']['path'] == t['runtimes']['nvidia']['path'] == NVIDIA_RUNTIME
    assert o.get('default-runtime') == t.get('default-runtime') == ('nvidia' if default else before.get('default-runtime'))
    # every other key (mirrors, log options, other runtimes, ...) kept, by both
    keep = [['runtimes', 'nvidia'], ['default-runtime']]
    assert without(o, *keep) == without(t, *keep) == without(before, *keep)
    # on purpose different: nvidia-ctk also writes "args": [] (a key Docker does not read: its runtime option is
    # "runtimeArgs"); the module writes only "path" (and runtimeArgs when asked)
    assert t['runtimes']['nvidia'] == {'path': NVIDIA_RUNTIME, 'args': []}
    assert o['runtimes']['nvidia'] == {'path': NVIDIA_RUNTIME}


def test_NCT_12_docker_cdi_and_reset_default_differences(ctk, tmp_path):
    """Where the two answer differently on purpose (docs/lab.md, Oracles): nvidia-ctk --cdi.enabled sets Docker's
    features.cdi, which the module does not offer for Docker (it refuses cdi there); a default-runtime naming the
    runtime stays with nvidia-ctk when --set-as-default is not given, while the module (set_as_default=false, a
    declared state) removes it so Docker falls back to runc."""
    src = json.loads(open(DOCKER_INPUTS['site']).read())
    src['default-runtime'] = 'nvidia'
    ours, theirs = tmp_path / 'ours.json', tmp_path / 'theirs.json'
    ours.write_text(json.dumps(src))
    theirs.write_text(json.dumps(src))
    configure(ctk, '--runtime=docker', '--config=%s' % theirs, '--cdi.enabled')
    t = json.loads(theirs.read_text())
    assert t['features'] == {'cdi': True} and t['default-runtime'] == 'nvidia'
    res = run_ours({'engine': 'docker', 'path': str(ours), 'backup': False})
    assert 'default-runtime' not in json.loads(ours.read_text()), res
    res = run_ours({'engine': 'docker', 'path': str(ours), 'cdi': True, 'backup': False})
    assert res.get('failed') and 'containerd only' in res['msg'], res


def test_NCT_13_docker_ctk_cdi_drops_other_features(ctk, tmp_path):
    """Upstream defect of the pinned 1.20.0, fixed in 1.20.2 (pkg/config/engine/docker/docker.go EnableCDI reads
    "features" as map[string]bool, which a decoded JSON object never is, and starts a new map;
    TestEnableCDIPreservesFeaturesFromFile added at v1.20.2): --cdi.enabled throws away Docker's other feature flags.
    The module keeps every key of daemon.json (it does not write features at all)."""
    cfg = tmp_path / 'daemon.json'
    cfg.write_text(json.dumps({'features': {'containerd-snapshotter': True}}))
    configure(ctk, '--runtime=docker', '--config=%s' % cfg, '--cdi.enabled')
    assert json.loads(cfg.read_text())['features'] == {'cdi': True}
    cfg.with_name('ours.json').write_text(json.dumps({'features': {'containerd-snapshotter': True}}))
    res = run_ours({'engine': 'docker', 'path': str(cfg.with_name('ours.json')), 'backup': False})
    assert not res.get('failed'), res
    assert json.loads(cfg.with_name('ours.json').read_text())['features'] == {'containerd-snapshotter': True}


# -------------------------------------------------------------------------------------------------------- containerd
CONTAINERD_INPUTS = {
    'v2-containerd-1.6.20-default': os.path.join(RUNTIME_FIXTURES, 'containerd-1.6.20-config-default.toml'),
    'v3-site': os.path.join(RUNTIME_FIXTURES, 'containerd-2.x-v3-site.toml'),
    'v2-bare': 'version = 2\n',
    'v3-bare': 'version = 3\n',
    # a site's runc with settings of its own (hardening, a base spec, a runc root): both copy them (NCT-23)
    'v3-runc-site': ('version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n'
                     'runtime_type = "io.containerd.runc.v2"\nprivileged_without_host_devices = true\n'
                     'base_runtime_spec = "/etc/containerd/base-spec.json"\ncgroup_writable = true\n'
                     '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]\n'
                     'BinaryName = "/opt/runc/bin/runc"\nRoot = "/run/site-runc"\nSystemdCgroup = true\n'),
}


def _input_text(name):
    src = CONTAINERD_INPUTS[name]
    if src.endswith('.toml'):
        with open(src) as f:
            return f.read()
    return src


def runtime_view(doc, version):
    """What both must agree on: the nvidia runtime's type, binary and cgroup driver, the default runtime (containerd's
    own default is runc) and CDI."""
    cri = dig(doc, ['plugins', CRI[version]], {})
    rt = dig(cri, ['containerd', 'runtimes', 'nvidia'], {})
    return {'runtime_type': rt.get('runtime_type'), 'BinaryName': dig(rt, ['options', 'BinaryName']),
            'SystemdCgroup': dig(rt, ['options', 'SystemdCgroup']),
            'default': dig(cri, ['containerd', 'default_runtime_name']) or 'runc',
            'enable_cdi': cri.get('enable_cdi')}


@pytest.mark.parametrize('cdi', [False, True], ids=['no-cdi', 'cdi'])
@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
@pytest.mark.parametrize('name', sorted(CONTAINERD_INPUTS))
def test_NCT_14_containerd_same_runtime_default_cdi_and_other_keys(ctk, containerd, tmp_path, name, default, cdi):
    """nvidia-ctk 1.20 always writes a drop-in (its default /etc/containerd/conf.d/99-nvidia.toml; here one under
    tmp_path) holding a copy of the main file's whole CRI plugin table with its changes, and makes the main file
    import <dir>/*.toml. The module writes a drop-in only when the main file has no CRI plugin table, and otherwise
    edits the main file (mode auto). So the CRI plugin table that takes effect is compared: the drop-in's where one
    was written, else the main file's."""
    text = _input_text(name)
    version = 3 if 'version = 3' in text else 2
    cri = ['plugins', CRI[version]]
    before = read_toml_text(tmp_path, text)
    sides = {}
    for side in ('ours', 'theirs'):
        d = tmp_path / side
        (d / 'conf.d').mkdir(parents=True)
        (d / 'config.toml').write_text(text)
        sides[side] = d
    ours_dropin, theirs_dropin = (sides[s] / 'conf.d' / '99-nvidia.toml' for s in ('ours', 'theirs'))
    res = run_ours({'engine': 'containerd', 'path': str(sides['ours'] / 'config.toml'),
                    'dropin_path': str(ours_dropin), 'set_as_default': default, 'cdi': cdi, 'backup': False},
                   containerd=containerd)
    assert not res.get('failed'), res
    mode = res['config_mode']
    # the module's auto mode: a drop-in exactly when the main file does not configure the CRI plugin
    assert mode == ('dropin' if name.endswith('bare') else 'inline')
    configure(ctk, '--runtime=containerd', '--config=%s' % (sides['theirs'] / 'config.toml'),
              '--drop-in-config=%s' % theirs_dropin, *(['--set-as-default'] if default else []),
              *(['--cdi.enabled'] if cdi else []))
    o_main, t_main = read_toml(sides['ours'] / 'config.toml'), read_toml(sides['theirs'] / 'config.toml')
    # the whole configuration each side makes (main file and the drop-in it imports): only the differences of the
    # table INTENDED
    case = {'version': version, 'mode': mode, 'cdi': cdi, 'before': before, 'ours_dropin': str(ours_dropin),
            'theirs_glob': str(sides['theirs'] / 'conf.d' / '*.toml')}
    assert whole_diff(containerd_effective(sides['ours'] / 'config.toml', tmp_path),
                      containerd_effective(sides['theirs'] / 'config.toml', tmp_path)) == intended('containerd', case)
    t_rt = read_toml(theirs_dropin)
    o_rt = read_toml(ours_dropin) if mode == 'dropin' else o_main
    assert t_rt['version'] == version
    assert t_main['imports'] == before.get('imports', []) + [str(sides['theirs'] / 'conf.d' / '*.toml')]
    if mode == 'dropin':
        assert o_main['imports'] == before.get('imports', []) + [str(ours_dropin)]
        assert o_rt['version'] == version
    view_o, view_t = runtime_view(o_rt, version), runtime_view(t_rt, version)
    runc_cgroup = dig(before, cri + ['containerd', 'runtimes', 'runc', 'options', 'SystemdCgroup'])
    assert view_o == view_t == {
        'runtime_type': 'io.containerd.runc.v2', 'BinaryName': NVIDIA_RUNTIME, 'SystemdCgroup': runc_cgroup,
        'default': 'nvidia' if default else 'runc', 'enable_cdi': True if cdi else dig(before, cri + ['enable_cdi'])}
    # every other key kept by both: the CRI plugin table that takes effect, apart from the runtime's own keys ...
    touched = [['containerd', 'runtimes', 'nvidia'], ['containerd', 'default_runtime_name'], ['enable_cdi']]
    if cdi:
        touched.append(['cdi_spec_dirs'])
    if mode == 'dropin':
        touched.append(['containerd', 'runtimes', 'runc'])  # the module's drop-in names runc (below)
    assert without(dig(o_rt, cri, {}), *touched) == without(dig(t_rt, cri, {}), *touched) == without(
        dig(before, cri, {}), *touched)
    # ... and the rest of the main file (nvidia-ctk leaves it alone but for the import)
    rest = [cri, ['imports'], ['version']]
    assert without(o_main, *rest) == without(t_main, *rest) == without(before, *rest)
    assert without(t_main, ['imports']) == without(before, ['imports'])
    # on purpose different: with cdi the module also writes cdi_spec_dirs (containerd's default dirs, explicit);
    # nvidia-ctk sets enable_cdi alone
    if cdi:
        assert dig(o_rt, cri + ['cdi_spec_dirs']) == ['/etc/cdi', '/var/run/cdi']
        assert dig(t_rt, cri + ['cdi_spec_dirs']) == dig(before, cri + ['cdi_spec_dirs'])
    if mode == 'dropin':
        # on purpose different: the module's drop-in also names runc (containerd 1.x replaces the runtimes map by
        # the file's; test_containerd.py shows what containerd 2.x makes of nvidia-ctk's drop-in without it)
        assert dig(o_rt, cri + ['containerd', 'runtimes', 'runc', 'runtime_type']) == 'io.containerd.runc.v2'
        assert dig(t_rt, cri + ['containerd', 'runtimes', 'runc']) is None


@pytest.mark.parametrize('name', ['v2-containerd-1.6.20-default', 'v3-site'])
def test_NCT_15_containerd_ctk_without_dropin_loses_the_runtime(ctk, tmp_path, name):
    """Upstream defect (nvidia-ctk 1.20.0, also 1.20.2): `--drop-in-config=""` (the flag's documented way to change
    the main file) writes the drop-in content to the main file and then overwrites it with the untouched main file
    plus an import of the main file's own directory (<dir>/*.toml): the nvidia runtime is lost. The module's inline
    mode is what the collection uses for such files instead."""
    cfg = tmp_path / 'config.toml'
    cfg.write_text(_input_text(name))
    before = read_toml(cfg)
    configure(ctk, '--runtime=containerd', '--config=%s' % cfg, '--drop-in-config=', '--set-as-default')
    after = read_toml(cfg)
    assert after['imports'] == before['imports'] + [str(tmp_path / '*.toml')]
    assert without(after, ['imports']) == without(before, ['imports'])
    version = after['version']
    assert runtime_view(after, version)['BinaryName'] is None


def read_toml_text(tmp_path, text):
    p = tmp_path / 'input.toml'
    p.write_text(text)
    return read_toml(p)


# ------------------------------------------------------------------------------------------------------------- CRI-O
def _subtables_as_tables(src, tmp_path):
    """The sub-tables fixture with default_annotations written as a [crio.runtime.runtimes.crun.default_annotations]
    table and platform_runtime_paths as dotted keys instead of inline tables (both valid TOML, same values)."""
    text = open(src).read()
    lines = text.split('\n')
    out = []
    for line in lines:
        if line.startswith('platform_runtime_paths = '):
            out += ['platform_runtime_paths.%s = %s' % (k.strip(), v.strip()) for k, v in
                    (p.split('=') for p in line.split('{', 1)[1].rstrip('}').split(','))]
        elif line.startswith('default_annotations = '):
            table = line.split('{', 1)[1].rstrip('}')
        else:
            out.append(line)
    out += ['[crio.runtime.runtimes.crun.default_annotations]'] + [p.strip() for p in table.split(',')] + ['']
    path = tmp_path / 'crio-subtables-as-tables.conf'
    path.write_text('\n'.join(out))
    return str(path)


@pytest.mark.parametrize('source', ['crio-1.36-default.conf', 'crio-1.36-crun-subtables.conf', 'as-tables'])
@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
def test_NCT_16_crio_dropin_same_runtime_default_and_copied_options(ctk, tmp_path, default, source):
    """Also with the default runtime's sub-tables (CRIO-10): platform_runtime_paths and default_annotations as
    `crio config` writes them (inline tables) and as a table / dotted keys."""
    if source == 'as-tables':
        src = _subtables_as_tables(os.path.join(RUNTIME_FIXTURES, 'crio-1.36-crun-subtables.conf'), tmp_path)
    else:
        src = os.path.join(RUNTIME_FIXTURES, source)
    out = {}
    for side in ('ours', 'theirs'):
        d = tmp_path / side
        (d / 'crio.conf.d').mkdir(parents=True)
        shutil.copy(src, d / 'crio.conf')
        out[side] = d / 'crio.conf.d' / '99-nvidia.toml'
    res = run_ours({'engine': 'crio', 'path': str(out['ours']), 'crio_config': str(tmp_path / 'ours' / 'crio.conf'),
                    'crio_config_dir': str(tmp_path / 'ours' / 'crio.conf.d'), 'set_as_default': default,
                    'backup': False})
    assert not res.get('failed'), res
    configure(ctk, '--runtime=crio', '--config=%s' % (tmp_path / 'theirs' / 'crio.conf'),
              '--drop-in-config=%s' % out['theirs'], *(['--set-as-default'] if default else []))
    o, t = read_toml(out['ours']), read_toml(out['theirs'])
    o_rt, t_rt = o['crio']['runtime']['runtimes']['nvidia'], t['crio']['runtime']['runtimes']['nvidia']
    assert o_rt['runtime_path'] == t_rt['runtime_path'] == NVIDIA_RUNTIME
    assert o_rt['runtime_type'] == t_rt['runtime_type'] == 'oci'
    assert dig(o, ['crio', 'runtime', 'default_runtime']) == dig(t, ['crio', 'runtime', 'default_runtime']) == (
        'nvidia' if default else None)
    # the whole drop-in: only the differences of the table INTENDED (both copy the default runtime's, crun's, table)
    base = read_toml(src)['crio']['runtime']['runtimes']['crun']
    assert whole_diff(o, t) == intended('crio', {'base_runtime': base})
    assert {k: v for k, v in o_rt.items() if k not in ('runtime_path', 'runtime_type')} == {
        k: v for k, v in base.items() if k not in ('runtime_path', 'runtime_type', 'inherit_default_runtime',
                                                   'platform_runtime_paths')}
    if source != 'crio-1.36-default.conf':
        # the sub-table both copy, parsed: the same annotations as crun's
        assert o_rt['default_annotations'] == t_rt['default_annotations'] == {
            'io.kubernetes.cri-o.Devices': '', 'run.oci.keep_original_groups': '1'}
        assert t_rt['platform_runtime_paths'] == base['platform_runtime_paths'] and \
            'platform_runtime_paths' not in o_rt
    # both leave crio.conf as it was
    for side in ('ours', 'theirs'):
        assert (tmp_path / side / 'crio.conf').read_bytes() == open(src, 'rb').read()


# --------------------------------------------------------------------------------------------------- cdi generate
INVENTORIES = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')
CAPS_MAJOR = 511  # any character-device major: nvidia-ctk takes the caps devices' numbers from the nodes themselves


def _inventories():
    return sorted(n for n in os.listdir(INVENTORIES) if n.endswith('.json'))


@pytest.fixture(scope='module')
def nvml_sim():
    proc = subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return os.path.join(ROOT, 'lab', '.build', 'nvml_sim')


def driver_root(tmp_path, inv):
    """A driver root with what `cdi generate` needs to find: libcuda and libnvidia-ml of the inventory's driver
    version (empty files), the device nodes (/dev/nvidiactl, /dev/nvidia<minor>, real character devices) and, for
    MIG, /dev/nvidia-caps/nvidia-cap<minor> and the mig-minors file that the kernel module would put in
    /proc/driver/nvidia-caps (returned as its path, mounted there by run_generate)."""
    root = tmp_path / 'driver'
    lib = root / 'usr' / 'lib' / 'x86_64-linux-gnu'
    lib.mkdir(parents=True)
    for name in ('libcuda.so.', 'libnvidia-ml.so.'):
        (lib / (name + inv['driver_version'])).write_bytes(b'')
    (root / 'dev' / 'nvidia-caps').mkdir(parents=True)
    nodes = [('nvidiactl', 195, 255)] + [('nvidia%d' % g.get('minor_number', i), 195, g.get('minor_number', i))
                                          for i, g in enumerate(inv['gpus'])]
    lines = mig_minors_lines(inv)
    for line in lines:
        m = int(line.split()[1])
        nodes.append(('nvidia-caps/nvidia-cap%d' % m, CAPS_MAJOR, m))
    for name, major, minor in nodes:
        os.mknod(str(root / 'dev' / name), 0o666 | 0o020000, os.makedev(major, minor))
    minors = tmp_path / 'mig-minors'
    minors.write_text('\n'.join(lines) + '\n')
    return root, minors


def run_generate(ctk, tmp_path, root, minors, env, spec_path):
    """nvidia-ctk cdi generate in a private mount namespace whose /proc is a tmpfs with links to a fresh procfs and a
    driver/nvidia-caps/mig-minors of our own (the path is fixed in nvidia-ctk, internal/nvcaps/nvcaps.go, and only the
    NVIDIA kernel module writes it). Needs root (mount); fails, never skips, without it."""
    realproc = tmp_path / 'realproc'
    realproc.mkdir()
    script = PRIVATE_PROC + 'exec "$@"'
    env = dict(env, REALPROC=str(realproc), MINORS=str(minors))
    return subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script, 'sh', ctk, 'cdi',
                           'generate', '--mode=nvml', '--driver-root=%s' % root, '--output=%s' % spec_path],
                          env=env, capture_output=True, text=True, timeout=120)


NVML_VIEW = r"""
import json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    try:
        mig = pynvml.nvmlDeviceGetMigMode(h)[0] == 1
    except pynvml.NVMLError:
        mig = False
    migs = []
    if mig:
        for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except pynvml.NVMLError:
                continue
            migs.append({'uuid': pynvml.nvmlDeviceGetUUID(m), 'gi': pynvml.nvmlDeviceGetGpuInstanceId(m),
                         'ci': pynvml.nvmlDeviceGetComputeInstanceId(m)})
    out.append({'uuid': pynvml.nvmlDeviceGetUUID(h), 'minor': pynvml.nvmlDeviceGetMinorNumber(h), 'mig': mig,
                'migs': migs})
print(json.dumps(out))
"""


@pytest.mark.parametrize('inventory', _inventories())
def test_NCT_17_cdi_generate_on_the_nvml_simulator(ctk, nvml_sim, tmp_path, inventory):
    with open(os.path.join(INVENTORIES, inventory)) as f:
        inv = json.load(f)
    root, minors = driver_root(tmp_path, inv)
    env = dict(os.environ, LD_LIBRARY_PATH=nvml_sim, NVML_SIM_INVENTORY=os.path.join(INVENTORIES, inventory),
               NVML_SIM_STATE=str(tmp_path / 'state.json'))
    # what NVML (the simulator, through pynvml) shows: GPUs, MIG mode, MIG devices with their GI/CI ids
    view = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'python'), '-c', NVML_VIEW], env=env,
                          capture_output=True, text=True, timeout=60)
    assert view.returncode == 0, view.stderr
    gpus = json.loads(view.stdout)
    spec_path = tmp_path / 'nvidia.yaml'
    proc = run_generate(ctk, tmp_path, root, minors, env, spec_path)
    if all(g['mig'] and not g['migs'] for g in gpus):
        # upstream behaviour: MIG mode on everywhere and no MIG device yet (rtx-pro-6000-mig.json) leaves nothing to
        # put in a spec, and nvidia-ctk refuses to write one (its `all` device would be empty)
        assert proc.returncode != 0 and 'failed add device \\"all\\": invalid device, empty device edits' in proc.stderr, \
            proc.stderr[-3000:]
        assert not spec_path.exists()
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'Using driver version %s' % inv['driver_version'] in proc.stderr
    spec = yaml.safe_load(spec_path.read_text())
    assert spec['kind'] == 'nvidia.com/gpu'
    devices = {d['name']: [n['path'] for n in d['containerEdits']['deviceNodes']] for d in spec['devices']}
    want, every = {}, set()
    for i, g in enumerate(gpus):
        node = '/dev/nvidia%d' % g['minor']
        if not g['mig']:
            every.add(node)
            # a GPU without MIG mode: by index and by UUID
            want[str(i)] = want[g['uuid']] = [node]
            continue
        # MIG mode: no device for the whole GPU; one per MIG device, by <gpu>:<mig index> and by MIG UUID, with the
        # GPU's node and its GPU-instance and compute-instance capability devices
        for j, m in enumerate(g['migs']):
            nodes = [node, '/dev/nvidia-caps/nvidia-cap%d' % cap_minor(g['minor'], m['gi']),
                     '/dev/nvidia-caps/nvidia-cap%d' % cap_minor(g['minor'], m['gi'], m['ci'])]
            want['%d:%d' % (i, j)] = want[m['uuid']] = nodes
            every.update(nodes)
    assert {k: v for k, v in devices.items() if k != 'all'} == want
    assert sorted(devices['all']) == sorted(every)
    assert [n['path'] for n in spec['containerEdits']['deviceNodes']] == ['/dev/nvidiactl']


# ------------------------------------------------------------------------------------- the role's CDI spec (NCT-25)
def ctk_wrapper(tmp_path, ctk, root, minors, inventory, state):
    """A program that the role runs as nvidia_container_runtime_ctk: the real nvidia-ctk 1.20.0 on the NVML simulator
    (the inventory), with the driver root made here and, in a private mount namespace, our mig-minors (run_generate);
    the role's own arguments (`cdi generate --output=...`) are passed on, `--mode=nvml --driver-root=...` added."""
    realproc = tmp_path / 'realproc'
    realproc.mkdir(exist_ok=True)
    env = {'LD_LIBRARY_PATH': os.path.join(ROOT, 'lab', '.build', 'nvml_sim'), 'NVML_SIM_INVENTORY': str(inventory),
           'NVML_SIM_STATE': str(state), 'REALPROC': str(realproc), 'MINORS': str(minors)}
    wrapper = tmp_path / 'bin' / 'nvidia-ctk'
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text('#!/bin/sh\n' + ''.join('export %s=%s\n' % (k, shlex.quote(v)) for k, v in env.items()) +
                       'exec unshare --mount --propagation private sh -c %s sh %s "$@" --mode=nvml --driver-root=%s\n'
                       % (shlex.quote(PRIVATE_PROC + 'exec "$@"'), shlex.quote(ctk), shlex.quote(str(root))))
    os.chmod(str(wrapper), 0o755)
    return wrapper


def run_role_cdi(collections_path, tmp_path, wrapper, spec):
    """Role nvidia_container_runtime with a toolkit that has no refresh units (an empty unit dir): it runs the
    wrapper's `cdi generate` into a scratch directory and installs the spec when it differs. Returns the tasks' results."""
    variables = {
        'nvidia_container_runtime_install': False, 'nvidia_container_runtime_engines': ['containerd'],
        'nvidia_container_runtime_restart': False, 'nvidia_container_runtime_cdi_spec': True,
        'nvidia_container_runtime_containerd_config': str(tmp_path / 'containerd' / 'config.toml'),
        'nvidia_container_runtime_containerd_config_version': '2',
        'nvidia_container_runtime_containerd_dropin': str(tmp_path / 'containerd' / 'conf.d' / '99-nvidia.toml'),
        'nvidia_container_runtime_ctk': str(wrapper),
        'nvidia_container_runtime_cdi_unit_dirs': [str(tmp_path / 'units')],
        'nvidia_container_runtime_cdi_spec_path': str(spec)}
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict((t['task']['name'].split(' : ', 1)[-1], t['hosts']['localhost']) for p in doc['plays']
                for t in p['tasks'] if 'localhost' in t['hosts'])


INSTALL = 'Install the generated spec when it differs (a changed driver gives a changed spec)'


def test_NCT_25_role_installs_exactly_what_nvidia_ctk_generates_rerun_writes_nothing(ctk, nvml_sim, collections_path,
                                                                                     tmp_path):
    """The collection writes no CDI spec of its own and post-processes none: with the toolkit's refresh units (1.18+)
    nvidia-ctk writes /var/run/cdi/nvidia.yaml itself (NCT-10); without them the role runs `nvidia-ctk cdi generate`
    and installs its output (NCT-05). So the spec the role installs must be nvidia-ctk's, byte for byte (the table of
    differences on purpose is empty), on the NVML simulator (h100-mig: MIG devices on GPU 0); a re-run writes nothing.
    (A driver change giving a new spec: NCT-05, with a stand-in that names files as nvidia-ctk does.)"""
    with open(os.path.join(INVENTORIES, 'h100-mig.json')) as f:
        inv = json.load(f)
    root, minors = driver_root(tmp_path, inv)
    (tmp_path / 'units').mkdir()
    (tmp_path / 'containerd' / 'conf.d').mkdir(parents=True)
    inventory = tmp_path / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    wrapper = ctk_wrapper(tmp_path, ctk, root, minors, inventory, tmp_path / 'state.json')
    spec = tmp_path / 'cdi' / 'nvidia.yaml'

    tasks = run_role_cdi(collections_path, tmp_path, wrapper, spec)
    assert tasks[INSTALL]['changed'] is True
    oracle = tmp_path / 'oracle.yaml'
    proc = subprocess.run([str(wrapper), 'cdi', 'generate', '--output=%s' % oracle], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = oracle.read_bytes()
    assert spec.read_bytes() == want
    doc = yaml.safe_load(want)
    assert doc['kind'] == 'nvidia.com/gpu' and {'all', '0:0', '0:1'} <= {d['name'] for d in doc['devices']}
    # the whole document, parsed: the edits every device shares are nvidia-ctk's driver files of this driver root
    assert any(m['hostPath'].endswith('libcuda.so.%s' % inv['driver_version'])
               for m in doc['containerEdits'].get('mounts', [])), doc['containerEdits']
    assert os.listdir(str(spec.parent)) == ['nvidia.yaml']   # no scratch file where a runtime loads specs
    mtime = spec.stat().st_mtime_ns
    tasks = run_role_cdi(collections_path, tmp_path, wrapper, spec)
    assert tasks[INSTALL]['changed'] is False and spec.stat().st_mtime_ns == mtime
