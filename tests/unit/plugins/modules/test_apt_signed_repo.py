# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_signed_repo main(): files on disk (sources dir and keyring under tmp), key download from file://, check mode,
diff, the package check, state=absent, refusals before any change."""
import json
import os
import stat

import pytest

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import apt_signed_repo as mod

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'module_utils', 'fixtures', 'apt')
URI = 'http://127.0.0.1:8080/libnvidia-container/stable/deb/amd64'


def fixture(name):
    with open(os.path.join(FIXTURES, name), 'rb') as f:
        return f.read()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """SOURCES_DIR under tmp, dpkg-query answered from a dict (env['installed']), and the calls recorded."""
    state = {'installed': {}, 'queries': [], 'dir': tmp_path}
    monkeypatch.setattr(mod, 'SOURCES_DIR', str(tmp_path / 'sources.list.d'))

    def fake_read_installed(module, names):
        state['queries'].append(list(names))
        return dict((n, v) for n, v in state['installed'].items() if n in names)
    monkeypatch.setattr(mod, 'read_installed', fake_read_installed)
    return state


def run(capsys, args):
    with module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def args(env, **kw):
    a = {'name': 'nvidia-container-toolkit', 'uris': [URI],
         'key_url': 'file://' + os.path.join(FIXTURES, 'key.asc'),
         'keyring': str(env['dir'] / 'keyrings' / 'nvidia-container-toolkit.asc'),
         'comment': 'Managed by gpuops.k8s_gpu (nvidia_container_runtime)',
         'packages': ['nvidia-container-toolkit=1.17.8-1~gpuopslab1', 'nvidia-container-toolkit-base=1.17.8-1~gpuopslab1']}
    a.update(kw)
    return a


def read(path, mode='r'):
    with open(path, mode) as f:
        return f.read()


def test_first_run_writes_keyring_and_source_then_noop(env, capsys):
    a = args(env, _ansible_diff=True)
    res = run(capsys, a)
    assert res['changed'] is True and res['source_changed'] is True and res['keyring_changed'] is True
    assert res['cache_update_needed'] is True
    assert res['packages_missing'] == a['packages'] and res['packages'] == {}
    assert read(a['keyring'], 'rb') == fixture('key.asc')
    src = read(res['sources_file'])
    assert src.startswith('# Managed by gpuops.k8s_gpu (nvidia_container_runtime)\nTypes: deb\n')
    assert 'Suites: /\n' in src and 'Signed-By: %s\n' % a['keyring'] in src and 'URIs: %s\n' % URI in src
    for path in (a['keyring'], res['sources_file']):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.dirname(a['keyring'])).st_mode) == 0o755
    assert '<absent>' in res['diff']['before'] and src in res['diff']['after']
    # installed now: the re-run changes nothing, needs no apt run, and still checks the packages
    env['installed'] = {'nvidia-container-toolkit': '1.17.8-1~gpuopslab1', 'nvidia-container-toolkit-base': '1.17.8-1~gpuopslab1'}
    res2 = run(capsys, a)
    assert res2['changed'] is False and res2['cache_update_needed'] is False and res2['packages_missing'] == []
    assert 'diff' not in res2
    assert env['queries'][-1] == ['nvidia-container-toolkit', 'nvidia-container-toolkit-base']


def test_wrong_version_installed_is_reported_missing(env, capsys):
    run(capsys, args(env))
    env['installed'] = {'nvidia-container-toolkit': '1.17.7-1', 'nvidia-container-toolkit-base': '1.17.8-1~gpuopslab1'}
    res = run(capsys, args(env))
    assert res['changed'] is False and res['packages_missing'] == ['nvidia-container-toolkit=1.17.8-1~gpuopslab1']


def test_check_mode_writes_nothing_and_does_not_download(env, capsys):
    a = args(env, key_url='file:///nonexistent/key', _ansible_check_mode=True, _ansible_diff=True)
    res = run(capsys, a)
    assert res['changed'] is True and res['keyring_changed'] is True and res['source_changed'] is True
    assert not os.path.exists(a['keyring']) and not os.path.exists(res['sources_file'])


def test_mirror_change_rewrites_only_the_source(env, capsys):
    run(capsys, args(env))
    res = run(capsys, args(env, uris=['https://mirror.corp/libnvidia-container/stable/deb/amd64'], _ansible_diff=True))
    assert res['source_changed'] is True and res['keyring_changed'] is False and res['cache_update_needed'] is True
    assert URI in res['diff']['before'] and 'mirror.corp' in res['diff']['after']


def test_hand_edited_source_and_mode_drift_are_repaired(env, capsys):
    a = args(env)
    res = run(capsys, a)
    with open(res['sources_file'], 'a') as f:
        f.write('Enabled: no\n')
    os.chmod(a['keyring'], 0o600)
    res2 = run(capsys, a)
    assert res2['source_changed'] is True and res2['keyring_changed'] is True
    assert 'Enabled' not in read(res['sources_file'])
    assert stat.S_IMODE(os.stat(a['keyring']).st_mode) == 0o644
    assert read(a['keyring'], 'rb') == fixture('key.asc')


def test_existing_keyring_is_not_downloaded_again_unless_refresh(env, capsys):
    a = args(env)
    run(capsys, a)
    # an unreachable key URL does not matter while the keyring exists ...
    assert run(capsys, dict(a, key_url='file:///nonexistent/key'))['changed'] is False
    # ... but key_refresh downloads it, and replaces the keyring only when the key differs
    assert run(capsys, dict(a, key_refresh=True))['changed'] is False
    with open(a['keyring'], 'wb') as f:
        f.write(fixture('key-with-headers.asc'))
    res = run(capsys, dict(a, key_refresh=True))
    assert res['keyring_changed'] is True and read(a['keyring'], 'rb') == fixture('key.asc')


def test_armored_key_is_dearmored_for_a_gpg_keyring(env, capsys):
    a = args(env, keyring=str(env['dir'] / 'keyrings' / 'cuda.gpg'))
    run(capsys, a)
    assert read(a['keyring'], 'rb') == fixture('key.gpg')


def test_refusals_before_any_change(env, capsys):
    cases = [
        (args(env, keyring=str(env['dir'] / 'k.asc'), key_url='file://' + os.path.join(FIXTURES, 'key.gpg')), 'ends in .asc'),
        (args(env, key_url='file:///nonexistent/key'), 'cannot be read'),
        (args(env, name='../evil'), 'plain file name'),
        (args(env, uris=['mirror/x']), 'is not an http(s)'),
        (args(env, key_url='ftp://x/key'), 'key_url'),
        (args(env, packages=['foo>=1']), 'packages:'),
        (args(env, suites=['bookworm']), 'components must name'),
        (args(env, keyring='relative.asc'), 'absolute path'),
    ]
    for a, needle in cases:
        res = run(capsys, a)
        assert res.get('failed') is True and needle in res['msg'], (a, res)
    assert not os.path.exists(mod.SOURCES_DIR) or os.listdir(mod.SOURCES_DIR) == []
    assert not os.path.exists(str(env['dir'] / 'k.asc'))


def test_present_requires_uris_and_key_url_or_a_keyring_in_place(env, capsys):
    res = run(capsys, {'name': 'x', 'keyring': '/tmp/x.asc'})
    assert res['failed'] is True and 'uris' in res['msg']
    # no key_url: the keyring must already be on the node (tests/.../test_apt_signed_repo_upgrade.py: when it is)
    missing = str(env['dir'] / 'keyrings' / 'missing.gpg')
    res = run(capsys, {'name': 'x', 'keyring': missing, 'uris': [URI]})
    assert res['failed'] is True and 'key_url' in res['msg'] and missing in res['msg']
    assert not os.path.exists(mod.SOURCES_DIR)


def test_absent_removes_both_and_then_is_a_noop(env, capsys):
    a = args(env)
    res = run(capsys, a)
    absent = {'name': a['name'], 'keyring': a['keyring'], 'state': 'absent', '_ansible_diff': True}
    res_check = run(capsys, dict(absent, _ansible_check_mode=True))
    assert res_check['changed'] is True and os.path.exists(a['keyring'])
    res2 = run(capsys, absent)
    assert res2['changed'] is True and res2['source_changed'] is True and res2['keyring_changed'] is True
    assert not os.path.exists(a['keyring']) and not os.path.exists(res['sources_file'])
    assert 'Types: deb' in res2['diff']['before'] and '<absent>' in res2['diff']['after']
    assert run(capsys, absent)['changed'] is False


def test_http_key_download_error_names_the_mirror_setting(env, capsys, monkeypatch):
    monkeypatch.setattr(mod, 'http_get', lambda module, url, timeout: (None, {'status': 404, 'msg': 'Not Found'}))
    res = run(capsys, args(env, key_url='https://nvidia.github.io/libnvidia-container/gpgkey'))
    assert res['failed'] is True and 'HTTP 404' in res['msg'] and 'gpuops_mirror.apt' in res['msg']
    assert not os.path.exists(mod.SOURCES_DIR)


def test_http_key_download(env, capsys, monkeypatch):
    class Resp(object):
        def read(self):
            return fixture('key.asc')
    seen = []

    def fake_fetch(module, url, timeout):
        seen.append((url, timeout, module.params['validate_certs']))
        return Resp(), {'status': 200, 'msg': 'OK'}
    monkeypatch.setattr(mod, 'http_get', fake_fetch)
    a = args(env, key_url='https://nvidia.github.io/libnvidia-container/gpgkey')
    assert run(capsys, a)['keyring_changed'] is True
    assert seen == [('https://nvidia.github.io/libnvidia-container/gpgkey', 30, True)]
