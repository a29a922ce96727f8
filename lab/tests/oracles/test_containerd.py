"""containerd as the oracle (containerd v2.3.4, the release k3s/RKE2 build their containerd from; built from the Go
module proxy by lab/go/build.sh containerd; and v2.4.2, lab/go/containerd-2.4, the regular release after that LTS):
`containerd --config FILE config dump` prints the configuration containerd runs with after its imports and its
migration to the current config version. The collection's
container_runtime_config module (and, beside it, nvidia-ctk 1.20.0) edit the same input files; containerd must then
see the nvidia runtime, the default runtime and CDI as asked, runc still there, and every other setting as before.

Run: .venv/bin/pytest -q lab/tests/oracles/test_containerd.py
"""
import os
import re
import subprocess
import tomllib

import pytest

from oracle_util import NVIDIA_RUNTIME, RUNTIME_FIXTURES, dig, go_program, run_ours, toml_output, without

RT = ['plugins', 'io.containerd.cri.v1.runtime']  # the CRI runtime plugin of config versions 3 and 4 (dump: latest)


@pytest.fixture(scope='module')
def containerd():
    return go_program('containerd', ' v2.3.4 ')


@pytest.fixture(scope='module')
def containerd24():
    """containerd v2.4.2 (lab/go/containerd-2.4): the regular release after the 2.3 LTS, which removed enable_cdi."""
    return go_program('containerd-2.4', ' v2.4.2 ', program='containerd')


@pytest.fixture(scope='module')
def ctk():
    return go_program('nvidia-ctk')


def dump(containerd, config):
    return toml_output([containerd, '--config', str(config), 'config', 'dump'])


def config_default(containerd):
    proc = subprocess.run([containerd, 'config', 'default'], capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


INPUTS = {
    'v2-containerd-1.6.20-default': 'containerd-1.6.20-config-default.toml',
    'v3-site': 'containerd-2.x-v3-site.toml',
    'v2-bare': 'version = 2\n',
    'v3-bare': 'version = 3\n',
    'v4-containerd-2.3.4-default': None,  # `containerd config default` of the oracle itself
}


def input_text(containerd, name):
    src = INPUTS[name]
    if src is None:
        return config_default(containerd)
    if src.endswith('.toml'):
        with open(os.path.join(RUNTIME_FIXTURES, src)) as f:
            return f.read()
    return src


def test_NCT_18_config_default_is_version_4(containerd):
    """containerd 2.3's own default configuration is config version 4 (cmd/containerd/server/config: ConfigVersion 4,
    server properties moved to plugins; the CRI runtime plugin keeps its v3 name and layout)."""
    doc = tomllib.loads(config_default(containerd))
    assert doc['version'] == 4
    assert dig(doc, RT + ['containerd', 'runtimes', 'runc', 'runtime_type']) == 'io.containerd.runc.v2'


def test_CTD_03_containerd_2_enables_cdi_by_default(containerd, tmp_path):
    """containerd 2.x turns CDI on unless a file sets enable_cdi = false (internal/cri/config/config_unix.go at v2.0.0
    and v2.3.4: EnableCDI true, CDISpecDirs /etc/cdi and /var/run/cdi): its own default, and what it runs with from a
    file that does not name the key."""
    rt = dig(tomllib.loads(config_default(containerd)), RT)
    assert rt['enable_cdi'] is True and rt['cdi_spec_dirs'] == ['/etc/cdi', '/var/run/cdi']
    bare = tmp_path / 'config.toml'
    bare.write_text('version = 3\n')
    assert dig(dump(containerd, bare), RT + ['enable_cdi']) is True
    bare.write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    assert dig(dump(containerd, bare), RT + ['enable_cdi']) is False


def effective(doc):
    rt = dig(doc, RT, {})
    nv = dig(rt, ['containerd', 'runtimes', 'nvidia'], {})
    return {'runtime_type': nv.get('runtime_type'), 'BinaryName': dig(nv, ['options', 'BinaryName']),
            'default': dig(rt, ['containerd', 'default_runtime_name']), 'enable_cdi': rt.get('enable_cdi'),
            'cdi_spec_dirs': rt.get('cdi_spec_dirs'),
            'runc': dig(rt, ['containerd', 'runtimes', 'runc', 'runtime_type'])}


TOUCHED = [RT + ['containerd', 'runtimes', 'nvidia'], RT + ['containerd', 'default_runtime_name'], RT + ['enable_cdi'],
           ['imports']]


@pytest.mark.parametrize('cdi', [False, True], ids=['no-cdi', 'cdi'])
@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
@pytest.mark.parametrize('name', sorted(INPUTS))
def test_NCT_19_module_result_as_containerd_reads_it(containerd, tmp_path, name, default, cdi):
    text = input_text(containerd, name)
    main = tmp_path / 'config.toml'
    main.write_text(text)
    before = dump(containerd, main)
    res = run_ours({'engine': 'containerd', 'path': str(main), 'dropin_path': str(tmp_path / 'conf.d' / '99-nvidia.toml'),
                    'set_as_default': default, 'cdi': cdi, 'backup': False}, containerd=containerd)
    assert not res.get('failed'), res
    after = dump(containerd, main)
    assert effective(after) == {
        'runtime_type': 'io.containerd.runc.v2', 'BinaryName': NVIDIA_RUNTIME,
        'default': 'nvidia' if default else 'runc',
        'enable_cdi': True if cdi else effective(before)['enable_cdi'],
        'cdi_spec_dirs': ['/etc/cdi', '/var/run/cdi'] if cdi else effective(before)['cdi_spec_dirs'],
        'runc': 'io.containerd.runc.v2'}
    # every other setting as containerd had it before (runc's own options included)
    assert without(after, *TOUCHED) == without(before, *TOUCHED)


@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
@pytest.mark.parametrize('name', sorted(INPUTS))
def test_NCT_20_nvidia_ctk_result_as_containerd_reads_it(containerd, ctk, tmp_path, name, default):
    """The same inputs through nvidia-ctk 1.20.0 (its drop-in: a copy of the main file's CRI plugin table plus the
    runtime, imported as <dir>/*.toml): containerd 2.x merges a drop-in's tables into the main file's, so runc
    stays although nvidia-ctk's drop-in names only nvidia when the main file has no CRI table."""
    text = input_text(containerd, name)
    main = tmp_path / 'config.toml'
    main.write_text(text)
    before = dump(containerd, main)
    proc = subprocess.run([ctk, 'runtime', 'configure', '--runtime=containerd', '--config=%s' % main,
                           '--drop-in-config=%s' % (tmp_path / 'conf.d' / '99-nvidia.toml')]
                          + (['--set-as-default'] if default else []), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    after = dump(containerd, main)
    got = effective(after)
    assert got['BinaryName'] == NVIDIA_RUNTIME and got['runc'] == 'io.containerd.runc.v2'
    assert got['default'] == ('nvidia' if default else 'runc')
    assert without(after, *TOUCHED) == without(before, *TOUCHED)


def warnings(containerd, config):
    """The warnings `config dump` logs for a file (their msg and key, no time stamps)."""
    proc = subprocess.run([containerd, '--config', str(config), 'config', 'dump'], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(set(re.sub(r'\b(time|t)="[^"]*" ?', '', line).strip() for line in proc.stderr.splitlines()
                      if 'level=warning' in line))


def test_CTD_05_containerd_2_4_has_no_enable_cdi(containerd24, tmp_path):
    """containerd 2.4 removed enable_cdi (RELEASES.md's deprecation table at v2.4.2: removed in v2.4, CDI then always
    on; no EnableCDI in internal/cri/config): its own default has no such key, the spec
    directories stay, and a file that still sets it - to false too - is read with a warning naming the key and runs
    with CDI, as there is no way to turn it off."""
    rt = dig(tomllib.loads(config_default(containerd24)), RT)
    assert 'enable_cdi' not in rt and rt['cdi_spec_dirs'] == ['/etc/cdi', '/var/run/cdi']
    conf = tmp_path / 'config.toml'
    for value in ('false', 'true'):
        conf.write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = %s\n' % value)
        assert 'enable_cdi' not in dig(dump(containerd24, conf), RT)
        assert [w for w in warnings(containerd24, conf) if 'Ignoring unknown key' in w and 'key=enable_cdi' in w], \
            warnings(containerd24, conf)


INPUTS_24 = dict((k, v) for k, v in INPUTS.items() if not k.startswith('v4-'))
INPUTS_24['v4-containerd-2.4.2-default'] = None   # `containerd config default` of v2.4.2


@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
@pytest.mark.parametrize('name', sorted(INPUTS_24))
def test_CTD_05_module_result_as_containerd_2_4_reads_it(containerd24, tmp_path, name, default):
    """The module with cdi=true and containerd 2.4.2 first on PATH: containerd sees the nvidia runtime, the default
    as asked, runc, the spec directories and every other setting as before, and logs no warning for the result that it
    did not log for the input (before the fix the module wrote enable_cdi = true, which 2.4 ignores with a warning at
    every start: this test failed on it for every input - by the changes it reported, by containerd's warning where
    the input had no enable_cdi, and for a bare v2 file, whose drop-in's key 2.4's migration drops silently, by the
    drop-in's text)."""
    text = INPUTS_24[name]
    if text is None:
        text = config_default(containerd24)
    elif text.endswith('.toml'):
        with open(os.path.join(RUNTIME_FIXTURES, text)) as f:
            text = f.read()
    main = tmp_path / 'config.toml'
    main.write_text(text)
    before, warned = dump(containerd24, main), warnings(containerd24, main)
    res = run_ours({'engine': 'containerd', 'path': str(main), 'dropin_path': str(tmp_path / 'conf.d' / '99-nvidia.toml'),
                    'set_as_default': default, 'cdi': True, 'backup': False}, containerd=containerd24)
    assert not res.get('failed') and res['containerd_version'] == '2.4.2', res
    assert not [c for c in res['changes'] if 'enable_cdi' in c], res['changes']
    if res['config_mode'] == 'dropin':   # a v2 drop-in's key would be dropped by 2.4's migration without a word
        assert 'enable_cdi' not in (tmp_path / 'conf.d' / '99-nvidia.toml').read_text()
    after = dump(containerd24, main)
    assert effective(after) == {
        'runtime_type': 'io.containerd.runc.v2', 'BinaryName': NVIDIA_RUNTIME, 'default': 'nvidia' if default else 'runc',
        'enable_cdi': None, 'cdi_spec_dirs': ['/etc/cdi', '/var/run/cdi'], 'runc': 'io.containerd.runc.v2'}
    assert without(after, *TOUCHED) == without(before, *TOUCHED)
    # no warning the input did not give: the nvidia runtime may carry only what runc's table carried (the module copies
    # runc's settings, as nvidia-ctk does, NCT-23: a 1.6 file's runtime_engine/runtime_root are warned for both)
    new = set(w.replace('runtimes nvidia ', 'runtimes runc ') for w in warnings(containerd24, main)) - set(warned)
    assert not new, (new, warned)
