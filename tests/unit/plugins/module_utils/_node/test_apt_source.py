# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_source: deb822 text, OpenPGP key formats (de-armoring checked against `gpg --dearmor`), package specs."""
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import apt_source as a

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'fixtures', 'apt')


def fixture(name):
    with open(os.path.join(FIXTURES, name), 'rb') as f:
        return f.read()


def test_deb822_flat_repository_matches_what_the_role_wrote_before():
    text = a.render_deb822(['http://mirror.local/libnvidia-container/stable/deb/amd64'], ['/'], [],
                           '/etc/apt/keyrings/nvidia-container-toolkit.asc',
                           comment='Managed by gpuops.k8s_gpu (nvidia_container_runtime)')
    assert text == ('# Managed by gpuops.k8s_gpu (nvidia_container_runtime)\n'
                    'Types: deb\n'
                    'URIs: http://mirror.local/libnvidia-container/stable/deb/amd64\n'
                    'Suites: /\n'
                    'Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc\n')


def test_deb822_distribution_with_components_and_architectures():
    text = a.render_deb822(['https://a.example/debian', 'https://b.example/debian'], ['bookworm', 'bookworm-updates'],
                           ['main', 'non-free'], '/k.gpg', architectures=['amd64'])
    assert 'URIs: https://a.example/debian https://b.example/debian\n' in text
    assert 'Suites: bookworm bookworm-updates\nComponents: main non-free\nArchitectures: amd64\nSigned-By: /k.gpg\n' in text
    assert not text.startswith('#')


@pytest.mark.parametrize('uris,suites,components,needle', [
    ([], ['/'], [], 'uris must name'),
    (['mirror.local/x'], ['/'], [], "'mirror.local/x' is not an http(s)"),
    (['http://m/x'], [], [], 'suites must name'),
    (['http://m/x'], ['/'], ['main'], 'allows no components'),
    (['http://m/x'], ['bookworm'], [], 'components must name'),
])
def test_deb822_refusals_name_the_option(uris, suites, components, needle):
    with pytest.raises(a.AptSourceError) as e:
        a.render_deb822(uris, suites, components, '/k.asc')
    assert needle in str(e.value)


def test_check_name():
    assert a.check_name('nvidia-container-toolkit') == 'nvidia-container-toolkit'
    for bad in ('', '../x', 'a b', '-x'):
        with pytest.raises(a.AptSourceError):
            a.check_name(bad)


def test_key_formats():
    assert a.key_format(fixture('key.asc')) == 'armored'
    assert a.key_format(fixture('key-with-headers.asc')) == 'armored'
    assert a.key_format(fixture('key.gpg')) == 'binary'
    assert a.key_format(b'<html><body>404 Not Found</body></html>') is None
    assert a.key_format(b'') is None


@pytest.mark.parametrize('name', ['key.asc', 'key-with-headers.asc'])
def test_dearmor_equals_gpg_dearmor(name):
    # key.gpg was written by `gpg --dearmor < key.asc` (and equals `gpg --export` of the same key)
    assert a.dearmor(fixture(name)) == fixture('key.gpg')


def test_dearmor_crlf_line_endings():
    assert a.dearmor(fixture('key.asc').replace(b'\n', b'\r\n')) == fixture('key.gpg')


def test_keyring_bytes_follows_the_extension_apt_uses():
    asc, gpg = fixture('key.asc'), fixture('key.gpg')
    assert a.keyring_bytes(asc, '/etc/apt/keyrings/x.asc') == asc
    assert a.keyring_bytes(asc, '/etc/apt/keyrings/x.gpg') == gpg
    assert a.keyring_bytes(gpg, '/etc/apt/keyrings/x.gpg') == gpg
    with pytest.raises(a.AptSourceError) as e:
        a.keyring_bytes(gpg, '/etc/apt/keyrings/x.asc')
    assert 'ends in .asc' in str(e.value) and '.gpg' in str(e.value)
    with pytest.raises(a.AptSourceError) as e:
        a.keyring_bytes(b'<html>proxy login</html>', '/etc/apt/keyrings/x.asc')
    assert 'did not return a PGP public key' in str(e.value)


def test_dearmor_refuses_garbage():
    with pytest.raises(a.AptSourceError):
        a.dearmor(b'-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!not base64!!!\n-----END PGP PUBLIC KEY BLOCK-----\n')


def test_package_specs_and_missing():
    specs = ['nvidia-container-toolkit=1.17.8-1*', 'nvidia-container-toolkit-base=1.17.8-1~gpuopslab1', 'libfoo']
    assert a.parse_package_specs(specs) == [('nvidia-container-toolkit', '1.17.8-1*'),
                                            ('nvidia-container-toolkit-base', '1.17.8-1~gpuopslab1'), ('libfoo', None)]
    installed = {'nvidia-container-toolkit': '1.17.8-1~gpuopslab1', 'nvidia-container-toolkit-base': '1.17.7-1',
                 'libfoo': '2.0'}
    assert a.missing_packages(specs, installed) == ['nvidia-container-toolkit-base=1.17.8-1~gpuopslab1']
    assert a.missing_packages(specs, {}) == specs
    assert a.missing_packages(['libfoo'], installed) == []
    for bad in ('Foo', 'foo>=1.0', 'foo bar', ''):
        with pytest.raises(a.AptSourceError) as e:
            a.parse_package_specs([bad])
        assert 'packages:' in str(e.value)


def test_parse_dpkg_query_only_installed():
    text = ('nvidia-driver\tii \t535.309.01-0+deb12u1\n'
            'libnvidia-ml1:amd64\thi \t535.309.01-0+deb12u1\n'
            'nvidia-smi\tun \t\n'
            'nvidia-kernel-dkms\trc \t535.216.01-1\n')
    assert a.parse_dpkg_query(text) == {'nvidia-driver': '535.309.01-0+deb12u1',
                                        'libnvidia-ml1': '535.309.01-0+deb12u1'}
