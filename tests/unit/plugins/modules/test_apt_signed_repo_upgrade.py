# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_signed_repo for role nvidia_driver's move off ansible.builtin.apt_repository (deprecated in ansible-core 2.21):
a keyring already on the node referenced without key_url (Debian's archive keyring), and supersedes - the one-line
.list files the role's earlier releases wrote under the same names, backed up outside apt's directories and removed
once the deb822 .sources is in place, and nothing else touched."""
import os
import stat

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules import test_apt_signed_repo as base

URI, read, run = base.URI, base.read, base.run
env = base.env  # the pytest fixture of test_apt_signed_repo (sources dir under tmp, dpkg-query answered)

DEBIAN = 'http://deb.debian.org/debian'
# what ansible.builtin.apt_repository (filename: gpuops-nvidia-debian) wrote for the role's previous release
OLD_LIST = ''.join('deb [signed-by=%%s] %s %s contrib non-free non-free-firmware\n' % (uri, suite)
                   for uri, suite in ((DEBIAN, 'bookworm'), (DEBIAN, 'bookworm-updates'),
                                      (DEBIAN + '-security', 'bookworm-security')))


def node_keyring(env, mode=0o644):
    """Debian's archive keyring, as the debian-archive-keyring package leaves it (a binary keyring)."""
    d = env['dir'] / 'usr-share-keyrings'
    d.mkdir(exist_ok=True)
    k = d / 'debian-archive-keyring.gpg'
    k.write_bytes(base.fixture('key.gpg'))
    os.chmod(str(k), mode)
    return str(k)


def seed(env, name, text):
    d = env['dir'] / 'sources.list.d'
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d / name


def debian_args(keyring, **kw):
    a = {'name': 'gpuops-nvidia-debian', 'uris': [DEBIAN], 'suites': ['bookworm', 'bookworm-updates'],
         'components': ['contrib', 'non-free', 'non-free-firmware'], 'keyring': keyring,
         'existing_sources': 'fail', 'supersedes': ['gpuops-nvidia-debian.list'],
         'comment': 'Managed by gpuops.k8s_gpu (nvidia_driver)'}
    a.update(kw)
    return a


def test_keyring_on_the_node_is_referenced_not_downloaded_nor_touched(env, capsys):
    keyring = node_keyring(env, mode=0o600)  # even a mode the module would fix on its own keyring stays
    before = read(keyring, 'rb')
    a = debian_args(keyring, supersedes=[], _ansible_diff=True)
    res = run(capsys, a)
    assert res['changed'] is True and res['source_changed'] is True and res['keyring_changed'] is False
    src = read(res['sources_file'])
    assert src == ('# Managed by gpuops.k8s_gpu (nvidia_driver)\nTypes: deb\nURIs: %s\nSuites: bookworm bookworm-updates\n'
                   'Components: contrib non-free non-free-firmware\nSigned-By: %s\n' % (DEBIAN, keyring))
    assert keyring not in res['diff']['before'].split(':\n')[0]
    assert read(keyring, 'rb') == before and stat.S_IMODE(os.stat(keyring).st_mode) == 0o600
    assert run(capsys, a)['changed'] is False


def test_key_refresh_needs_key_url(env, capsys):
    res = run(capsys, debian_args(node_keyring(env), key_refresh=True))
    assert res['failed'] is True and 'key_url' in res['msg'] and 'key_refresh' in res['msg']


def test_DRV_43_old_one_line_list_is_backed_up_and_removed_once_the_sources_is_written(env, capsys):
    keyring = node_keyring(env)
    old_text = OLD_LIST.replace('%s', keyring)
    old = seed(env, 'gpuops-nvidia-debian.list', old_text)
    other = seed(env, 'someone-else.list', 'deb [signed-by=%s] %s bookworm contrib\n' % (keyring, DEBIAN))
    a = debian_args(keyring, _ansible_diff=True)
    # check mode: reported, in the diff, nothing written nor removed
    res = run(capsys, dict(a, _ansible_check_mode=True))
    assert res['changed'] is True and res['superseded'] == [{'path': str(old)}]
    assert str(old) in res['diff']['before'] and old_text in res['diff']['before']
    assert old.exists() and not os.path.exists(res['sources_file'])
    res = run(capsys, a)
    assert res['changed'] is True and res['cache_update_needed'] is True and res['existing_sources'] == []
    assert os.path.isfile(res['sources_file']) and not old.exists()
    [entry] = res['superseded']
    assert entry['path'] == str(old) and read(entry['backup']) == old_text
    assert os.path.dirname(entry['backup']) == str(env['dir'] / 'gpuops-backups')
    # another file with the same repository and key is not the role's: it stays as it was
    assert other.exists() and other.read_text().startswith('deb [signed-by=')
    again = run(capsys, a)
    assert again['changed'] is False and again['superseded'] == [] and again['cache_update_needed'] is False


def test_cuda_list_superseded_with_the_key_download(env, capsys):
    """cuda_repo: the old .list named the same keyring; the .sources replaces it, the keyring is downloaded once."""
    keyring = str(env['dir'] / 'keyrings' / 'gpuops-nvidia-cuda.asc')
    cuda = 'https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/'
    old = seed(env, 'gpuops-nvidia-cuda.list', 'deb [signed-by=%s] %s /\n' % (keyring, cuda))
    a = {'name': 'gpuops-nvidia-cuda', 'uris': [cuda], 'keyring': keyring,
         'key_url': 'file://' + os.path.join(base.FIXTURES, 'key.asc'), 'supersedes': ['gpuops-nvidia-cuda.list']}
    res = run(capsys, a)
    assert res['keyring_changed'] is True and not old.exists() and len(res['superseded']) == 1
    assert 'Signed-By: %s\n' % keyring in read(res['sources_file'])
    assert run(capsys, a)['changed'] is False


def test_supersedes_refuses_what_is_not_a_plain_list_or_sources_name(env, capsys):
    keyring = node_keyring(env)
    for bad, needle in ((['../sources.list'], 'plain file name'), (['x.conf'], 'ending in .list'),
                        (['gpuops-nvidia-debian.sources'], 'the source file this module writes')):
        res = run(capsys, debian_args(keyring, supersedes=bad))
        assert res['failed'] is True and 'supersedes' in res['msg'] and needle in res['msg'], res
    assert not os.path.exists(os.path.join(str(env['dir']), 'sources.list.d'))


def test_supersedes_is_ignored_with_state_absent(env, capsys):
    keyring = node_keyring(env)
    old = seed(env, 'gpuops-nvidia-debian.list', OLD_LIST.replace('%s', keyring))
    res = run(capsys, {'name': 'gpuops-nvidia-debian', 'keyring': str(env['dir'] / 'k.gpg'), 'state': 'absent',
                       'supersedes': ['gpuops-nvidia-debian.list']})
    assert res['changed'] is False and old.exists()


def test_nodes_own_sources_kept_unsigned_and_refused_with_another_key(env, capsys, monkeypatch):
    """unsigned_sources=keep with existing_sources=fail (the role's Debian source): a stock sources.list line of the
    same archive without signed-by stays as it is (apt 2.6.1 reads both); another Signed-By stops before any change."""
    monkeypatch.setattr(base.mod, 'dpkg_arch', lambda module: 'amd64')
    keyring = node_keyring(env)
    stock = 'deb http://deb.debian.org/debian/ bookworm main non-free-firmware\n'
    (env['dir'] / 'sources.list').write_text(stock)
    a = debian_args(keyring, unsigned_sources='keep')
    res = run(capsys, a)
    assert res['changed'] is True and res['existing_sources'] == []
    assert (env['dir'] / 'sources.list').read_text() == stock
    # the default still counts it as a conflict (nvidia_container_runtime cleans an apt-key era entry up)
    os.unlink(res['sources_file'])
    res = run(capsys, debian_args(keyring))
    assert res['failed'] is True and 'existing_sources=fail' in res['msg'] and 'sources.list' in res['msg']
    other = 'deb [signed-by=/usr/share/keyrings/other.gpg] http://deb.debian.org/debian bookworm main\n'
    (env['dir'] / 'sources.list').write_text(other)
    res = run(capsys, a)
    assert res['failed'] is True and '/usr/share/keyrings/other.gpg' in res['msg']
    assert (env['dir'] / 'sources.list').read_text() == other
    assert not os.path.exists(os.path.join(str(env['dir']), 'sources.list.d', 'gpuops-nvidia-debian.sources'))
