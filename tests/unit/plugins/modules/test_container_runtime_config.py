# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""container_runtime_config main(): files on disk, backup, check mode, diff, refusals before any change."""
import json
import os
import shutil

import pytest


from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import container_runtime_config as mod


FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'module_utils', 'fixtures', 'runtime')


def run(capsys, args):
    with module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def copy_fixture(tmp_path, name, dest):
    path = str(tmp_path / dest)
    shutil.copy(os.path.join(FIXTURES, name), path)
    return path


def read(path):
    with open(path) as f:
        return f.read()


def test_docker_merge_backup_and_noop(tmp_path, capsys):
    path = copy_fixture(tmp_path, 'daemon-mirrors-logopts.json', 'daemon.json')
    original = read(path)
    res = run(capsys, {'engine': 'docker', 'path': path, 'set_as_default': True, '_ansible_diff': True})
    assert res['changed'] is True
    assert read(res['backup_file']) == original
    data = json.loads(read(path))
    assert data['runtimes']['nvidia'] == {'path': '/usr/bin/nvidia-container-runtime'}
    assert data['registry-mirrors'] == json.loads(original)['registry-mirrors']
    assert res['diff'][0]['before'] == original and res['diff'][0]['after'] == read(path)
    res2 = run(capsys, {'engine': 'docker', 'path': path, 'set_as_default': True})
    assert res2['changed'] is False and 'backup_file' not in res2 and res2['changes'] == []


def test_docker_check_mode_changes_nothing(tmp_path, capsys):
    path = copy_fixture(tmp_path, 'daemon-mirrors-logopts.json', 'daemon.json')
    original = read(path)
    res = run(capsys, {'engine': 'docker', 'path': path, '_ansible_check_mode': True, '_ansible_diff': True})
    assert res['changed'] is True and 'nvidia' in res['diff'][0]['after']
    assert read(path) == original and os.listdir(str(tmp_path)) == ['daemon.json']


def test_docker_invalid_json_refused(tmp_path, capsys):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as f:
        f.write('{"a": 1,}')
    res = run(capsys, {'engine': 'docker', 'path': path})
    assert res['failed'] is True and 'not valid JSON' in res['msg'] and read(path) == '{"a": 1,}'


def test_docker_missing_file_created(tmp_path, capsys):
    path = str(tmp_path / 'etc' / 'docker' / 'daemon.json')
    res = run(capsys, {'engine': 'docker', 'path': path})
    assert res['changed'] is True and 'backup_file' not in res
    assert json.loads(read(path)) == {'runtimes': {'nvidia': {'path': '/usr/bin/nvidia-container-runtime'}}}
    assert oct(os.stat(path).st_mode & 0o777) == '0o644'


def test_containerd_default_inline(tmp_path, capsys):
    path = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'config.toml')
    res = run(capsys, {'engine': 'containerd', 'path': path, 'dropin_path': str(tmp_path / 'conf.d' / '99.toml')})
    assert res['changed'] is True and res['config_mode'] == 'inline' and res['config_version'] == 2
    assert 'runtimes.nvidia.options]' in read(path) and os.path.exists(res['backup_file'])
    assert not os.path.exists(str(tmp_path / 'conf.d'))
    assert run(capsys, {'engine': 'containerd', 'path': path})['changed'] is False


def test_containerd_dropin_and_refusal(tmp_path, capsys):
    path = str(tmp_path / 'config.toml')
    with open(path, 'w') as f:
        f.write('version = 2\nroot = "/var/lib/containerd"\n')
    dropin = str(tmp_path / 'conf.d' / '99-nvidia.toml')
    res = run(capsys, {'engine': 'containerd', 'path': path, 'dropin_path': dropin, '_ansible_diff': True})
    assert res['changed'] is True and res['config_mode'] == 'dropin' and len(res['diff']) == 2
    assert 'imports = ["%s"]' % dropin in read(path) and 'BinaryName' in read(dropin)
    assert run(capsys, {'engine': 'containerd', 'path': path, 'dropin_path': dropin})['changed'] is False
    cfg = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'full.toml')
    before = read(cfg)
    res = run(capsys, {'engine': 'containerd', 'path': cfg, 'mode': 'dropin', 'dropin_path': dropin})
    assert res['failed'] is True and 'replace that whole table' in res['msg'] and read(cfg) == before


def test_containerd_version_checks(tmp_path, capsys):
    path = str(tmp_path / 'config.toml')
    with open(path, 'w') as f:
        f.write('root = "/var/lib/containerd"\n')
    res = run(capsys, {'engine': 'containerd', 'path': path})
    assert res['failed'] is True and 'version 1' in res['msg']
    cfg = copy_fixture(tmp_path, 'containerd-2.x-v3-site.toml', 'v3.toml')
    res = run(capsys, {'engine': 'containerd', 'path': cfg, 'config_version': '2'})
    assert res['failed'] is True and 'version 3 config' in res['msg']
    # a runtime RKE2/k3s do not detect themselves needs tables, hence a version
    res = run(capsys, {'engine': 'containerd', 'mode': 'template', 'path': str(tmp_path / 'new.tmpl'),
                       'runtime_path': '/opt/nvidia/bin/nvidia-container-runtime'})
    assert res['failed'] is True and 'config_version must be 2 or 3' in res['msg']


def test_rke2_template_created(tmp_path, capsys):
    # a runtime the base template does not render (RKE2/k3s do not look in /opt): its tables after the base line
    path = str(tmp_path / 'config.toml.tmpl')
    args = {'engine': 'containerd', 'mode': 'template', 'config_version': '2', 'path': path,
            'runtime_path': '/opt/nvidia/bin/nvidia-container-runtime'}
    res = run(capsys, args)
    assert res['changed'] is True
    assert read(path).startswith('{{ template "base" . }}\n') and 'runtimes.runc' not in read(path)
    assert 'runtimes.nvidia]' in read(path)
    assert run(capsys, args)['changed'] is False


@pytest.mark.parametrize('args,msg', [
    ({'engine': 'docker', 'cdi': True}, 'containerd only'),
    ({'engine': 'containerd', 'runtime_args': ['x']}, 'docker only'),
    ({'engine': 'docker', 'runtime_name': 'bad name'}, 'runtime_name'),
    ({'engine': 'podman'}, 'engine'),
])
def test_bad_arguments(tmp_path, capsys, args, msg):
    args = dict(args, path=str(tmp_path / 'x'))
    res = run(capsys, args)
    assert res['failed'] is True and msg in res['msg'] and not os.path.exists(str(tmp_path / 'x'))


def test_containerd_absent_removes_dropin_and_import_keeps_the_rest(tmp_path, capsys):
    path = str(tmp_path / 'config.toml')
    original = 'version = 2\nimports = ["/etc/containerd/certs.d/*.toml"]\nroot = "/var/lib/containerd"\n'
    with open(path, 'w') as f:
        f.write(original)
    dropin = str(tmp_path / 'conf.d' / '99-nvidia.toml')
    args = {'engine': 'containerd', 'path': path, 'dropin_path': dropin}
    assert run(capsys, args)['changed'] is True and os.path.exists(dropin)
    absent = dict(args, state='absent')
    res = run(capsys, dict(absent, _ansible_check_mode=True))
    assert res['changed'] is True and os.path.exists(dropin) and dropin in read(path)
    res = run(capsys, absent)
    assert res['changed'] is True
    assert res['changes'] == ['imports -= %s' % dropin, '%s removed' % dropin]
    assert read(path) == original and not os.path.exists(dropin)
    assert dropin in read(res['backup_file']) and 'BinaryName' in read(res['dropin_backup_file'])
    res = run(capsys, absent)
    assert res['changed'] is False and res['changes'] == []


def test_containerd_absent_inline_and_missing_file(tmp_path, capsys):
    path = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'config.toml')
    original = read(path)
    args = {'engine': 'containerd', 'path': path, 'dropin_path': str(tmp_path / '99.toml'), 'set_as_default': True}
    assert run(capsys, args)['changed'] is True
    res = run(capsys, dict(args, state='absent'))
    assert res['changed'] is True and 'runtimes.nvidia' not in read(path)
    assert 'default_runtime_name = "runc"' in read(path)
    assert run(capsys, dict(args, state='absent'))['changed'] is False
    assert read(path).count('\n') >= original.count('\n') - 1
    missing = {'engine': 'containerd', 'path': str(tmp_path / 'none.toml'), 'dropin_path': str(tmp_path / 'no.toml'),
               'state': 'absent'}
    res = run(capsys, missing)
    assert res['changed'] is False and not os.path.exists(missing['path'])


# ---- CDI needs containerd 1.7 or later (docs/conformance/containerd.md CTD-01)
def test_CTD_01_cdi_refused_on_containerd_1_6_before_anything_changes(tmp_path, capsys, monkeypatch):
    path = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'config.toml')
    original = read(path)
    monkeypatch.setattr(mod, 'containerd_version', lambda module: '1.6.20')
    res = run(capsys, {'engine': 'containerd', 'path': path, 'cdi': True})
    assert res['failed'] is True and res['containerd_version'] == '1.6.20'
    for part in ('cdi=true', 'nvidia_container_runtime_cdi', 'containerd 1.6.20', '1.7 or later', 'nothing was changed'):
        assert part in res['msg'], res['msg']
    assert read(path) == original and sorted(os.listdir(str(tmp_path))) == ['config.toml']
    # check mode (the role's preflight) refuses the same
    res = run(capsys, {'engine': 'containerd', 'path': path, 'cdi': True, '_ansible_check_mode': True})
    assert res['failed'] is True and 'containerd 1.6.20' in res['msg']


@pytest.mark.parametrize('version', ['1.7.0', '2.3.4', None])
def test_CTD_01_cdi_taken_from_1_7_on_or_when_containerd_is_unknown(tmp_path, capsys, monkeypatch, version):
    path = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'config.toml')
    monkeypatch.setattr(mod, 'containerd_version', lambda module: version)
    res = run(capsys, {'engine': 'containerd', 'path': path, 'cdi': True})
    assert not res.get('failed') and res['changed'] is True and res['containerd_version'] == version
    assert 'enable_cdi = true' in read(path)


@pytest.mark.parametrize('fixture', ['containerd-2.x-v3-site.toml', 'containerd-1.6.20-config-default.toml'])
def test_CTD_05_cdi_on_containerd_2_4_writes_the_spec_dirs_only(tmp_path, capsys, monkeypatch, fixture):
    """containerd 2.4 removed enable_cdi (CDI always on; the key is read with a warning at every start): with 2.4 on
    PATH cdi=true writes cdi_spec_dirs and no enable_cdi, inline and in a drop-in; with 2.3 both keys, as before; a
    re-run changes nothing."""
    path = copy_fixture(tmp_path, fixture, 'config.toml')
    own = [line for line in read(path).splitlines() if 'enable_cdi' in line]   # the site's (v3-site: false)
    monkeypatch.setattr(mod, 'containerd_version', lambda module: '2.4.2')
    args = {'engine': 'containerd', 'path': path, 'cdi': True, 'dropin_path': str(tmp_path / 'conf.d' / '99-nvidia.toml')}
    res = run(capsys, args)
    assert not res.get('failed') and res['changed'] is True and res['containerd_version'] == '2.4.2', res
    text = read(path)
    if res['config_mode'] == 'dropin':
        text += read(res['dropin_path'])
    assert [line for line in text.splitlines() if 'enable_cdi' in line] == own and 'cdi_spec_dirs' in text
    assert not [c for c in res['changes'] if 'enable_cdi' in c], res['changes']
    res = run(capsys, args)
    assert res['changed'] is False, res
    monkeypatch.setattr(mod, 'containerd_version', lambda module: '2.3.4')
    path = copy_fixture(tmp_path, fixture, 'config-2.3.toml')
    res = run(capsys, {'engine': 'containerd', 'path': path, 'cdi': True,
                       'dropin_path': str(tmp_path / 'conf.d-2.3' / '99-nvidia.toml')})
    text = read(path) + (read(res['dropin_path']) if res['config_mode'] == 'dropin' else '')
    assert 'enable_cdi = true' in text and 'cdi_spec_dirs' in text
    assert [c for c in res['changes'] if 'enable_cdi' in c], res['changes']


def test_CTD_05_cdi_on_containerd_2_4_leaves_the_files_enable_cdi(tmp_path, capsys, monkeypatch):
    """A file that already sets enable_cdi (the site's, or this module's before containerd went to 2.4) keeps it: the
    module does not remove a site's key, and containerd 2.4 ignores it either way."""
    path = tmp_path / 'config.toml'
    path.write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    monkeypatch.setattr(mod, 'containerd_version', lambda module: '2.4.2')
    res = run(capsys, {'engine': 'containerd', 'path': str(path), 'cdi': True})
    assert not res.get('failed') and res['changed'] is True, res
    assert 'enable_cdi = false' in read(str(path)) and 'cdi_spec_dirs' in read(str(path))


def test_CTD_01_containerd_not_asked_without_cdi_or_for_removal(tmp_path, capsys, monkeypatch):
    path = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'config.toml')

    def boom(module):
        raise AssertionError('containerd asked')
    monkeypatch.setattr(mod, 'containerd_version', boom)
    res = run(capsys, {'engine': 'containerd', 'path': path})
    assert res['changed'] is True and 'containerd_version' not in res
    res = run(capsys, {'engine': 'containerd', 'path': path, 'cdi': True, 'state': 'absent'})
    assert not res.get('failed') and 'containerd_version' not in res


def test_CTD_01_containerd_version_from_the_binary_on_path(tmp_path, capsys, monkeypatch):
    """The module's own lookup: `containerd --version` of the containerd on PATH (a LAB STAND-IN script printing
    Debian 12's 1.6.20 line; lab/tests/integration/test_containerd_cdi_real.py runs Debian's real one)."""
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    stand_in = bindir / 'containerd'
    stand_in.write_text('#!/bin/sh\n# LAB STAND-IN for containerd --version\n'
                        'echo "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"\n')
    os.chmod(str(stand_in), 0o755)
    monkeypatch.setenv('PATH', str(bindir))
    path = copy_fixture(tmp_path, 'containerd-1.6.20-config-default.toml', 'config.toml')
    res = run(capsys, {'engine': 'containerd', 'path': path, 'cdi': True})
    assert res['failed'] is True and res['containerd_version'] == '1.6.20'
