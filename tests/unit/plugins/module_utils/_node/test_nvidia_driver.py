# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the nvidia_driver role (module_utils/_node/nvidia_driver.py)."""
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver as nd


def _write(root, rel, text=''):
    path = os.path.join(str(root), rel)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    with open(path, 'w') as f:
        f.write(text)


def obs(**kw):
    base = dict(container=False, container_evidence=[], kernel_release='6.1.0-28-amd64', nouveau_loaded=False,
                nvidia_loaded=False, loaded_version=None, installed_version='535.309.01-0+deb12u1',
                runfile_versions=[], dkms={'module': 'nvidia-current', 'version': '535.309.01', 'registered': True,
                                           'installed_for_kernel': True}, nvswitch_count=0)
    base.update(kw)
    return base


def params(**kw):
    base = dict(kernel_module='auto', fabricmanager='auto', version='', reboot=True, local_connection=False,
                method='distro', os_family='Debian')
    base.update(kw)
    return base


@pytest.mark.parametrize('pkg, up', [
    ('535.309.01-0+deb12u1', '535.309.01'),
    ('3:535.183.01-1.el9', '535.183.01'),
    ('535.230.02-0ubuntu0.22.04.3', '535.230.02'),
    ('550.54.15-1', '550.54.15'),
    ('', None),
    (None, None),
])
def test_upstream_version(pkg, up):
    assert nd.upstream_version(pkg) == up


def test_parse_selections_and_rpm():
    assert nd.parse_dpkg_selections('nvidia-driver\t\t\thold\nlibnvidia-ml1:amd64\tinstall\n') == {
        'nvidia-driver': 'hold', 'libnvidia-ml1': 'install'}
    assert nd.parse_rpm_query('nvidia-driver\t3:535.183.01-1.el9\n') == {'nvidia-driver': '3:535.183.01-1.el9'}


def test_detect_container(tmp_path):
    assert nd.detect_container(str(tmp_path), 'none') == (False, [])
    _write(tmp_path, '.dockerenv')
    _write(tmp_path, 'proc/1/environ', 'PATH=/bin\0container=docker\0')
    found, ev = nd.detect_container(str(tmp_path), 'docker\n')
    assert found
    assert ev == ['systemd-detect-virt --container: docker', '/.dockerenv exists', 'PID 1 has container=docker']


def test_detect_podman(tmp_path):
    _write(tmp_path, 'run/.containerenv')
    assert nd.detect_container(str(tmp_path)) == (True, ['/run/.containerenv exists'])


def test_dkms_state(tmp_path):
    root = str(tmp_path)
    assert nd.dkms_state(root, '6.1.0-28-amd64')['registered'] is False
    os.makedirs(os.path.join(root, 'var/lib/dkms/nvidia-current/535.309.01'))
    os.makedirs(os.path.join(root, 'var/lib/dkms/nvidia-current/kernel-6.1.0-27-amd64-x86_64'))
    s = nd.dkms_state(root, '6.1.0-28-amd64')
    assert s == {'module': 'nvidia-current', 'version': '535.309.01', 'registered': True,
                 'installed_for_kernel': False, 'kernel': '6.1.0-28-amd64'}
    _write(tmp_path, 'lib/modules/6.1.0-28-amd64/updates/dkms/nvidia-current.ko.xz')
    assert nd.dkms_state(root, '6.1.0-28-amd64')['installed_for_kernel'] is True
    assert nd.dkms_state(root, '6.1.0-28-amd64', '550.54.15')['registered'] is False


def test_nvml_library_versions(tmp_path):
    _write(tmp_path, 'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.183.01')
    _write(tmp_path, 'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1')
    assert nd.nvml_library_versions(str(tmp_path)) == ['535.183.01']


def test_auto_in_container_skips_everything_kernel():
    r = nd.plan(params(), obs(container=True, container_evidence=['/.dockerenv exists'], nouveau_loaded=True,
                              dkms={'registered': True, 'installed_for_kernel': False}))
    assert r['kernel_module']['effective'] == 'skip'
    assert 'container detected (/.dockerenv exists)' in r['kernel_module']['reason']
    assert r['dkms']['rebuild'] is False
    assert r['load_module'] is False
    assert r['reboot'] == {'required': False, 'reasons': [], 'allowed': False, 'will_reboot': False,
                           'reason': 'kernel module skipped: ' + r['kernel_module']['reason']}
    assert r['warnings'] == []


def test_required_in_container_warns():
    r = nd.plan(params(kernel_module='required'), obs(container=True, container_evidence=['x']))
    assert r['kernel_module']['effective'] == 'required'
    assert 'container' in r['warnings'][0]


def test_skip_on_bare_metal():
    r = nd.plan(params(kernel_module='skip'), obs(nouveau_loaded=True))
    assert r['kernel_module'] == {'mode': 'skip', 'effective': 'skip', 'reason': 'nvidia_driver_kernel_module is skip'}
    assert r['reboot']['required'] is False


def test_dkms_rebuild_after_kernel_update():
    r = nd.plan(params(), obs(dkms={'module': 'nvidia-current', 'version': '535.309.01', 'registered': True,
                                    'installed_for_kernel': False}))
    assert r['dkms']['rebuild'] is True
    r = nd.plan(params(), obs())
    assert r['dkms']['rebuild'] is False


def test_reboot_for_nouveau():
    r = nd.plan(params(), obs(nouveau_loaded=True))
    assert r['reboot']['required'] and r['reboot']['will_reboot']
    assert 'nouveau' in r['reboot']['reasons'][0]
    assert r['load_module'] is False


def test_reboot_for_version_mismatch():
    r = nd.plan(params(), obs(nvidia_loaded=True, loaded_version='535.183.01'))
    assert r['reboot']['reasons'] == ['the loaded nvidia module is 535.183.01 but 535.309.01 is installed']
    r = nd.plan(params(), obs(nvidia_loaded=True, loaded_version='535.309.01'))
    assert r['reboot']['required'] is False and r['load_module'] is False


def test_reboot_blocked_by_variable_and_local_connection():
    r = nd.plan(params(reboot=False), obs(nouveau_loaded=True))
    assert r['reboot']['required'] and not r['reboot']['will_reboot']
    assert r['reboot']['reason'] == 'nvidia_driver_reboot is false'
    r = nd.plan(params(local_connection=True), obs(nouveau_loaded=True))
    assert not r['reboot']['will_reboot'] and 'local connection' in r['reboot']['reason']


def test_load_module_when_installed_not_loaded():
    assert nd.plan(params(), obs())['load_module'] is True
    assert nd.plan(params(), obs(installed_version=None))['load_module'] is False


@pytest.mark.parametrize('mode, switches, wanted', [
    ('auto', 0, False), ('auto', 6, True), ('always', 0, True), ('never', 6, False)])
def test_fabricmanager(mode, switches, wanted):
    r = nd.plan(params(fabricmanager=mode), obs(nvswitch_count=switches))
    assert r['fabricmanager']['wanted'] is wanted
    assert r['fabricmanager']['version'] == '535.309.01'


def test_version_match_and_runfile():
    assert nd.plan(params(version='535.309.01'), obs())['version_matches'] is True
    assert nd.plan(params(version='550.54.15'), obs())['version_matches'] is False
    r = nd.plan(params(method='runfile', version='550.54.15'),
                obs(installed_version=None, runfile_versions=['550.54.15']))
    assert r['installed_upstream'] == '550.54.15' and r['version_matches'] is True


def test_initramfs_command():
    assert nd.plan(params(), obs())['initramfs_command'] == ['update-initramfs', '-u', '-k', 'all']
    assert nd.plan(params(os_family='RedHat'), obs())['initramfs_command'][0] == 'dracut'


def test_bad_modes():
    with pytest.raises(ValueError, match='kernel_module must be one of auto, required, skip'):
        nd.plan(params(kernel_module='maybe'), obs())
    with pytest.raises(ValueError, match='fabricmanager'):
        nd.plan(params(fabricmanager='x'), obs())


def test_DRV_32_ubuntu_server_dkms_module_is_nvidia_srv(tmp_path):
    """Ubuntu's proprietary -server dkms package registers nvidia-srv (its modules are still nvidia*.ko): the
    rebuild check must see it, and must not "rebuild" once nvidia.ko is there for the running kernel."""
    root = str(tmp_path)
    os.makedirs(os.path.join(root, 'var/lib/dkms/nvidia-srv/580.126.20'))
    s = nd.dkms_state(root, '6.8.0-90-generic', '580.126.20')
    assert s['module'] == 'nvidia-srv'
    assert s['registered'] is True
    assert s['installed_for_kernel'] is False
    r = nd.plan(params(), obs(kernel_release='6.8.0-90-generic', dkms=s))
    assert r['dkms']['rebuild'] is True
    _write(tmp_path, 'lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko.zst')
    s = nd.dkms_state(root, '6.8.0-90-generic', '580.126.20')
    assert s['installed_for_kernel'] is True
    assert nd.plan(params(), obs(kernel_release='6.8.0-90-generic', dkms=s))['dkms']['rebuild'] is False


def test_DRV_32_ubuntu_server_open_dkms_module_is_nvidia(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, 'var/lib/dkms/nvidia/580.126.20'))
    _write(tmp_path, 'lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko.zst')
    s = nd.dkms_state(root, '6.8.0-90-generic')
    assert (s['module'], s['installed_for_kernel']) == ('nvidia', True)


def test_DRV_32_doctor_dkms_advice_names_the_registered_module():
    """The doctor's driver_not_loaded advice: the dkms module name as registered (nvidia-srv on Ubuntu's
    proprietary -server drivers), never a fixed `-m nvidia` that fails there."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as checks
    facts = {'nvml': {'status': 'driver_not_loaded'},
             'node': {'pci_gpus': [{'name': 'H100', 'driver': None, 'vendor_id': '10de'}], 'gpu_present': True}}
    out = checks.check_driver_loaded(facts, {'dkms_module': 'nvidia-srv'})
    assert out and 'dkms install -m nvidia-srv -v <version>' in out[0]['remediation']
    generic = checks.check_driver_loaded(facts, {})[0]['remediation']
    assert 'dkms install -m nvidia -v' not in generic
    assert 'nvidia-srv' in generic and 'nvidia-current' in generic
    assert nd.dkms_install_advice('nvidia-current') == 'dkms install -m nvidia-current -v <version>'
