# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_signed_repo on brownfield nodes (docs/conformance/nvidia-container-toolkit.md): a source of the same URI with
another Signed-By - NVIDIA's install guide's nvidia-container-toolkit.list, CUDA's cuda-keyring source - is backed
up outside apt's directories and disabled, so exactly one Signed-By stays per URI. The real apt-get update run on
such a node is lab/tests/test_nvidia_container_runtime_brownfield.py."""
import os

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import apt_source
from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules import test_apt_signed_repo as base

URI, args, read, run = base.URI, base.args, base.read, base.run
env = base.env  # the pytest fixture of test_apt_signed_repo (sources dir under tmp, dpkg-query answered)

GUIDE_KEYRING = '/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg'
# NVIDIA's install guide: the repository's nvidia-container-toolkit.list with [signed-by=...] put in by sed
GUIDE_LIST = ('deb [signed-by=%s] %s /\n#deb [signed-by=%s] %s /\n'
              % (GUIDE_KEYRING, URI.replace('/amd64', '/$(ARCH)'), GUIDE_KEYRING,
                 URI.replace('stable', 'experimental').replace('/amd64', '/$(ARCH)')))


def seed(env, name, text):
    d = env['dir'] / 'sources.list.d'
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d / name


def test_NCT_01_guide_list_is_backed_up_and_removed(env, capsys, monkeypatch):
    monkeypatch.setattr('ansible_collections.gpuops.k8s_gpu.plugins.modules.apt_signed_repo.dpkg_arch',
                        lambda module: 'amd64')
    guide = seed(env, 'nvidia-container-toolkit.list', GUIDE_LIST)
    res = run(capsys, args(env))
    assert res['changed'] is True and res['cache_update_needed'] is True
    assert not guide.exists()
    [entry] = res['existing_sources']
    assert entry['action'] == 'removed' and entry['signed_by'] == [GUIDE_KEYRING]
    assert read(entry['backup']) == GUIDE_LIST
    assert 'sources.list.d' not in os.path.dirname(entry['backup'])
    again = run(capsys, args(env))
    assert again['changed'] is False and again['existing_sources'] == []


def test_NCT_02_other_entries_stay_deb822_disabled(env, capsys, monkeypatch):
    monkeypatch.setattr('ansible_collections.gpuops.k8s_gpu.plugins.modules.apt_signed_repo.dpkg_arch',
                        lambda module: 'amd64')
    mixed = seed(env, 'site.list', 'deb http://deb.debian.org/debian bookworm main\n'
                 'deb [arch=amd64 signed-by=/etc/apt/keyrings/old.gpg] %s /\n' % URI)
    stanza = seed(env, 'old-nvidia.sources', 'Types: deb\nURIs: %s/\nSuites: /\nSigned-By: /k/old.gpg\n\n'
                  'Types: deb\nURIs: http://example.org/x\nSuites: /\n' % URI)
    res = run(capsys, args(env))
    assert sorted(e['action'] for e in res['existing_sources']) == ['entries disabled', 'entries disabled']
    text = mixed.read_text()
    assert text.startswith('deb http://deb.debian.org/debian bookworm main\n' + apt_source.DISABLED_MARK + 'deb [')
    stanzas = apt_source.deb822_stanzas(stanza.read_text())
    assert stanzas[0][2]['enabled'] == 'no' and 'enabled' not in stanzas[1][2]
    # exactly one enabled Signed-By per URI is left
    files = [(str(p), p.read_text()) for p in (env['dir'] / 'sources.list.d').iterdir()]
    assert apt_source.conflicting_sources(files, [URI], ['/'], args(env)['keyring'], 'amd64') == []


def test_NCT_03_fail_and_check_mode_change_nothing(env, capsys, monkeypatch):
    monkeypatch.setattr('ansible_collections.gpuops.k8s_gpu.plugins.modules.apt_signed_repo.dpkg_arch',
                        lambda module: 'amd64')
    guide = seed(env, 'nvidia-container-toolkit.list', GUIDE_LIST)
    res = run(capsys, args(env, existing_sources='fail'))
    assert res['failed'] is True and 'nvidia-container-toolkit.list' in res['msg'] and GUIDE_KEYRING in res['msg']
    assert guide.read_text() == GUIDE_LIST and not os.path.exists(args(env)['keyring'])
    res = run(capsys, dict(args(env), _ansible_check_mode=True, _ansible_diff=True))
    assert res['changed'] is True and guide.read_text() == GUIDE_LIST
    assert res['existing_sources'][0]['action'] == 'removed' and 'backup' not in res['existing_sources'][0]
    # same keyring: no conflict; another suite or URI: none either
    assert apt_source.conflicting_sources([('a.list', 'deb [signed-by=/k.asc] %s /\n' % URI)], [URI], ['/'],
                                          '/k.asc', 'amd64') == []
    assert apt_source.conflicting_sources([('a.list', 'deb [signed-by=/x] %s/other /\n' % URI)], [URI], ['/'],
                                          '/k.asc', 'amd64') == []


def test_NCT_04_cuda_keyring_source(env, capsys, monkeypatch):
    """cuda-keyring's one-line source for the CUDA repository, when the same URI is asked with another keyring."""
    monkeypatch.setattr('ansible_collections.gpuops.k8s_gpu.plugins.modules.apt_signed_repo.dpkg_arch',
                        lambda module: 'amd64')
    cuda = 'https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64'
    src = seed(env, 'cuda-debian12-x86_64.list',
               'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] %s/ /\n' % cuda)
    res = run(capsys, args(env, name='cuda', uris=[cuda], packages=[]))
    assert not src.exists() and res['existing_sources'][0]['signed_by'] == [
        '/usr/share/keyrings/cuda-archive-keyring.gpg']
