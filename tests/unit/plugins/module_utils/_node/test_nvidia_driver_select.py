# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Branch, kernel module flavour and package names of the nvidia_driver role (module_utils/_node/nvidia_driver_select.py).

Row ids (DRV-xx) are those of docs/conformance/nvidia-driver.md.
"""
import datetime
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver as nd
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver_select as sel

LATE_2026 = datetime.date(2026, 11, 24)

H100 = '0x2330'
H200 = '0x2335'
B200 = '0x2901'
GH200 = '0x2342'
RTX_PRO_6000 = '0x2bb5'
A100 = '0x20b0'
L40S = '0x26b9'
T4 = '0x1eb8'
V100 = '0x1db1'
P100 = '0x15f7'


def select(family='Ubuntu', major='24', **params):
    obs = dict(family=family, major=major, kernel_release=params.pop('kernel_release', '6.8.0-45-generic'),
               machine=params.pop('machine', 'x86_64'), gpu_pci_ids=params.pop('gpus', [H100]),
               secure_boot=params.pop('secure_boot', 'disabled'),
               dnf_module_current=params.pop('dnf_module_current', None), nvlink5=params.pop('nvlink5', False),
               versionlock_list=params.pop('versionlock_list', None),
               kernel_image_depends=params.pop('kernel_image_depends', None))
    params.setdefault('secure_boot_mok_enrolled', False)
    base = dict(branch='580', version='', kernel_module_type='auto', accept_eol_branch='', method='distro',
                precompiled='auto', fabricmanager='auto')
    base.update(params)
    return sel.select(base, obs, today=LATE_2026)


# --- DRV-01/02/03: branches -------------------------------------------------------------------------------

@pytest.mark.parametrize('branch, btype, eol', [
    ('535', 'ltsb', '2026-06'), ('570', 'production', '2026-02'), ('580', 'ltsb', '2028-06'),
    ('595', 'production', '2027-03'), ('610', 'new-feature', '2026-08'), ('620', 'ltsb', '2029-09'),
])
def test_DRV_01_branch_table_from_nvidia_lifecycle(branch, btype, eol):
    status = sel.branch_status(branch, LATE_2026)
    assert (status['type'], status['eol']) == (btype, eol)
    assert status['source'].startswith('docs.nvidia.com/datacenter/tesla/drivers/')


def test_DRV_01_supported_branches_late_2026():
    assert sel.supported_branches(LATE_2026) == ['580', '595', '620']
    assert sel.branch_status('535', datetime.date(2026, 6, 30))['supported'] is True
    assert sel.branch_status('535', datetime.date(2026, 7, 1))['supported'] is False


def test_DRV_02_default_branch_is_supported_ltsb():
    status = sel.branch_status(sel.DEFAULT_BRANCH, LATE_2026)
    assert status['supported'] and status['type'] == 'ltsb'
    defaults = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), '../../../../roles/nvidia_driver/defaults/main.yml')).read()
    assert 'nvidia_driver_branch: "%s"' % sel.DEFAULT_BRANCH in defaults


@pytest.mark.parametrize('branch', ['535', '570', '550', '610'])
def test_DRV_03_eol_branch_refused_naming_branch_date_and_variable(branch):
    with pytest.raises(sel.SelectionError) as e:
        select(branch=branch, gpus=[A100], kernel_module_type='proprietary')
    msg = str(e.value)
    assert 'nvidia_driver_branch %s' % branch in msg
    assert 'nvidia_driver_accept_eol_branch: "%s"' % branch in msg
    assert '580, 595, 620' in msg
    if sel.BRANCHES[branch].get('eol'):
        assert sel.BRANCHES[branch]['eol'] in msg


def test_DRV_03_eol_branch_accepted_when_named():
    out = select(branch='535', accept_eol_branch='535', gpus=[A100], family='Debian', major='12')
    assert out['branch']['accepted_eol'] is True and out['branch']['supported'] is False
    with pytest.raises(sel.SelectionError):
        select(branch='535', accept_eol_branch='570', gpus=[A100])   # accepting another branch is no answer


def test_DRV_03_unknown_branch_refused():
    with pytest.raises(sel.SelectionError) as e:
        select(branch='999')
    assert 'not in the role' in str(e.value)
    with pytest.raises(sel.SelectionError) as e:
        select(branch='58')
    assert 'three-digit' in str(e.value)


# --- DRV-04..08: flavour ----------------------------------------------------------------------------------

@pytest.mark.parametrize('dev, arch', [
    (H100, 'hopper'), (H200, 'hopper'), (GH200, 'grace-hopper'), (B200, 'blackwell'), (RTX_PRO_6000, 'blackwell'),
    (A100, 'ampere'), (L40S, 'ada'), (T4, 'turing'), (V100, 'volta'), (P100, 'pascal'), ('0x1b38', 'pascal'),
    ('zz', 'unknown'), ('0x0001', 'unknown'),
])
def test_DRV_04_architecture_from_pci_device_id(dev, arch):
    assert sel.architecture_from_pci_id(dev) == arch


# The chip family of every device id the MIG catalogue names (written from mig-parted's device filters): the two
# sources of GPU knowledge must agree. 0x2342 is GH200 96 GB and 0x20B6 the GA100-based PG506, both listed under the
# 96 GB profile table because mig-parted groups device ids by profile set.
FAMILY_OF_PRODUCT = (('GH200', 'grace-hopper'), ('H', 'hopper'), ('A', 'ampere'), ('GB', 'blackwell'),
                     ('B', 'blackwell'), ('RTX-PRO', 'blackwell'))
FAMILY_EXCEPTIONS = {0x2342: 'grace-hopper', 0x20B6: 'ampere'}


def test_DRV_04_catalogue_device_ids_agree_with_the_architecture_ranges():
    checked = 0
    for key, ids, dummy, dummy2 in gpu_catalog.MIG_PRODUCTS:
        family = [fam for prefix, fam in FAMILY_OF_PRODUCT if key.startswith(prefix)][0]
        for dev in ids:
            want = FAMILY_EXCEPTIONS.get(dev, family)
            assert sel.architecture_from_pci_id('%x' % dev) == want, (key, hex(dev))
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize('gpu', [P100, V100])
def test_DRV_04_open_refused_before_turing(gpu):
    with pytest.raises(sel.SelectionError) as e:
        select(gpus=[gpu], kernel_module_type='open')
    assert 'nvidia_driver_kernel_module_type "open"' in str(e.value)
    assert 'allowed here: proprietary, auto' in str(e.value)


@pytest.mark.parametrize('gpu', [B200, GH200, RTX_PRO_6000])
def test_DRV_05_proprietary_refused_on_blackwell_and_grace_hopper(gpu):
    with pytest.raises(sel.SelectionError) as e:
        select(gpus=[gpu], kernel_module_type='proprietary')
    assert 'nvidia_driver_kernel_module_type "proprietary"' in str(e.value)
    assert 'allowed here: open, auto' in str(e.value)
    assert select(gpus=[gpu])['flavour']['effective'] == 'open'


@pytest.mark.parametrize('branch, gpus, flavour', [
    ('580', [H100], 'open'), ('580', [A100, A100], 'open'), ('580', [T4], 'open'), ('580', [L40S], 'open'),
    ('580', [V100], 'proprietary'), ('580', [P100], 'proprietary'), ('580', [], 'open'),
    ('535', [H100], 'proprietary'), ('535', [GH200], 'open'), ('620', [H100], 'open'),
])
def test_DRV_06_auto_flavour(branch, gpus, flavour):
    assert select(branch=branch, accept_eol_branch=branch, gpus=gpus)['flavour']['effective'] == flavour


def test_DRV_06_mixed_gpus_needing_both_flavours_refused():
    with pytest.raises(sel.SelectionError) as e:
        select(gpus=[B200, V100])
    assert 'no nvidia_driver_kernel_module_type fits both' in str(e.value)


def test_DRV_07_proprietary_not_shipped_from_620():
    with pytest.raises(sel.SelectionError) as e:
        select(branch='620', gpus=[H100], kernel_module_type='proprietary')
    assert 'not shipped from branch 611' in str(e.value)
    assert select(branch='595', gpus=[H100], kernel_module_type='proprietary')['flavour']['effective'] == 'proprietary'


def test_DRV_08_branch_after_580_refused_on_volta_and_older():
    with pytest.raises(sel.SelectionError) as e:
        select(branch='595', gpus=[V100])
    assert 'last branch is R580' in str(e.value)
    with pytest.raises(sel.SelectionError):
        select(branch='535', accept_eol_branch='535', gpus=[B200])   # Blackwell needs R570 or newer


def test_DRV_26_unknown_flavour_refused():
    with pytest.raises(sel.SelectionError) as e:
        select(kernel_module_type='closed')
    assert 'nvidia_driver_kernel_module_type must be one of auto, open, proprietary' in str(e.value)


# --- DRV-09..15, 24: package names ------------------------------------------------------------------------

def test_DRV_09_ubuntu_server_packages_dkms():
    p = select(gpus=[H100])['packages']
    assert p['pinned'] == ['nvidia-headless-580-server-open', 'nvidia-dkms-580-server-open', 'nvidia-utils-580-server',
                           'nvidia-compute-utils-580-server', 'libnvidia-compute-580-server']
    assert p['version_package'] == 'libnvidia-compute-580-server'
    p = select(gpus=[V100])['packages']
    assert p['pinned'][:2] == ['nvidia-headless-580-server', 'nvidia-dkms-580-server']
    assert p['unpinned'] == []


def test_DRV_10_ubuntu_precompiled_signed_modules_with_secure_boot():
    out = select(gpus=[H100], secure_boot='enabled', kernel_release='6.8.0-1012-aws')
    assert out['precompiled']['effective'] is True
    assert out['packages']['pinned'][0] == 'nvidia-headless-no-dkms-580-server-open'
    assert 'nvidia-dkms-580-server-open' not in out['packages']['pinned']
    # the module packages follow the kernel's version: installed, not pinned to the driver's
    assert out['packages']['unpinned'] == ['linux-modules-nvidia-580-server-open-6.8.0-1012-aws',
                                           'linux-signatures-nvidia-6.8.0-1012-aws']
    assert select(gpus=[H100], secure_boot='enabled', precompiled='false')['precompiled']['effective'] is False
    # only Ubuntu's archive has them
    assert select(family='Debian', major='12', gpus=[H100], secure_boot='enabled')['precompiled']['effective'] is False


@pytest.mark.parametrize('kernel, machine, flavour, expected', [
    # HWE kernels: the flavour metapackage would be ...-generic-hwe-22.04, never "generic"; the running ABI's
    # package is named after uname -r (NVIDIA's precompiled driver container installs exactly that)
    ('6.8.0-90-generic', 'x86_64', 'open', ['linux-modules-nvidia-580-server-open-6.8.0-90-generic',
                                            'linux-signatures-nvidia-6.8.0-90-generic']),
    ('6.8.0-90-generic', 'x86_64', 'proprietary', ['linux-objects-nvidia-580-server-6.8.0-90-generic',
                                                   'linux-modules-nvidia-580-server-6.8.0-90-generic',
                                                   'linux-signatures-nvidia-6.8.0-90-generic']),
    # arm64 64k-page kernels: the ABI carries -64k; no signatures package on arm64
    ('6.8.0-90-generic-64k', 'aarch64', 'open', ['linux-modules-nvidia-580-server-open-6.8.0-90-generic-64k']),
    ('6.5.0-45-generic', 'x86_64', 'open', ['linux-modules-nvidia-580-server-open-6.5.0-45-generic',
                                            'linux-signatures-nvidia-6.5.0-45-generic']),
])
def test_DRV_10_precompiled_packages_of_the_running_kernel(kernel, machine, flavour, expected):
    out = select(gpus=[H100 if flavour == 'open' else V100], secure_boot='enabled', kernel_release=kernel,
                 machine=machine, kernel_module_type=flavour)
    assert out['packages']['unpinned'] == expected


# dpkg-query -W -f '${Package}\t${db:Status-Abbrev}\t${Depends}\n' 'linux-image-*' on Ubuntu 24.04 nodes
DPKG_HWE = ('linux-image-6.8.0-45-generic\tii \tlinux-modules-6.8.0-45-generic, linux-base (>= 4.5ubuntu1~16.04.1)\n'
            'linux-image-6.11.0-29-generic\tii \tlinux-modules-6.11.0-29-generic, linux-base\n'
            'linux-image-generic-hwe-24.04\tii \tlinux-image-6.11.0-29-generic, linux-firmware\n'
            'linux-image-generic\trc \tlinux-image-6.8.0-45-generic\n'
            'linux-image-unsigned-6.8.0-45-generic\tun \t\n')
DPKG_GA_AND_HWE = ('linux-image-6.8.0-90-generic\tii \tlinux-modules-6.8.0-90-generic\n'
                   'linux-image-generic\tii \tlinux-image-6.8.0-90-generic, linux-firmware\n'
                   'linux-image-generic-hwe-24.04\thi \tlinux-image-generic (= 6.8.0-90.91)\n'
                   'linux-image-6.8.0-1012-aws\tii \tlinux-modules-6.8.0-1012-aws\n'
                   'linux-image-aws\tii \tlinux-image-6.8.0-1012-aws\n')


@pytest.mark.parametrize('dpkg, kernel, machine, flavour, expected', [
    # HWE: the metapackage depends on the newest HWE kernel; the running kernel is an older one of the flavour
    (DPKG_HWE, '6.8.0-45-generic', 'x86_64', 'open',
     ['linux-modules-nvidia-580-server-open-6.8.0-45-generic', 'linux-signatures-nvidia-6.8.0-45-generic',
      'linux-modules-nvidia-580-server-open-generic-hwe-24.04']),
    (DPKG_HWE, '6.11.0-29-generic', 'x86_64', 'proprietary',
     ['linux-objects-nvidia-580-server-6.11.0-29-generic', 'linux-modules-nvidia-580-server-6.11.0-29-generic',
      'linux-signatures-nvidia-6.11.0-29-generic', 'linux-modules-nvidia-580-server-generic-hwe-24.04']),
    # GA kernel: linux-image-generic (the HWE one here depends on the GA metapackage, not on a kernel image)
    (DPKG_GA_AND_HWE, '6.8.0-90-generic', 'x86_64', 'open',
     ['linux-modules-nvidia-580-server-open-6.8.0-90-generic', 'linux-signatures-nvidia-6.8.0-90-generic',
      'linux-modules-nvidia-580-server-open-generic']),
    # a cloud flavour: its own metapackage, never generic's
    (DPKG_GA_AND_HWE, '6.8.0-1012-aws', 'x86_64', 'open',
     ['linux-modules-nvidia-580-server-open-6.8.0-1012-aws', 'linux-signatures-nvidia-6.8.0-1012-aws',
      'linux-modules-nvidia-580-server-open-aws']),
    # no metapackage of the running flavour (a kernel apt does not move): the running kernel's packages only
    (DPKG_GA_AND_HWE, '6.8.0-90-generic-64k', 'aarch64', 'open',
     ['linux-modules-nvidia-580-server-open-6.8.0-90-generic-64k']),
])
def test_DRV_34_precompiled_flavour_metapackage_follows_kernel_updates(dpkg, kernel, machine, flavour, expected):
    """Secure Boot on Ubuntu: the running kernel's signed modules and the kernel flavour's linux-modules-nvidia
    metapackage, as ubuntu-drivers installs it, so that the next kernel update brings its modules (before: the
    running kernel's packages only, and no NVIDIA module after the update's reboot)."""
    out = select(gpus=[H100 if flavour == 'open' else V100], secure_boot='enabled', kernel_release=kernel,
                 machine=machine, kernel_module_type=flavour, kernel_image_depends=sel.parse_dpkg_depends(dpkg))
    assert out['packages']['unpinned'] == expected
    assert out['precompiled']['kernel_flavour'] == (expected[-1].split('-server-')[-1].replace('open-', '', 1)
                                                    if len(expected) > 2 else None)
    # without Secure Boot (dkms) nothing of it
    assert select(kernel_release=kernel, kernel_image_depends=sel.parse_dpkg_depends(dpkg))['packages']['unpinned'] == []


def test_DRV_34_parse_dpkg_depends_keeps_installed_only():
    deps = sel.parse_dpkg_depends(DPKG_HWE)
    assert sorted(deps) == ['linux-image-6.11.0-29-generic', 'linux-image-6.8.0-45-generic',
                            'linux-image-generic-hwe-24.04']
    assert deps['linux-image-generic-hwe-24.04'] == ['linux-image-6.11.0-29-generic', 'linux-firmware']
    assert sel.ubuntu_kernel_flavour(deps, 'not-a-release') is None
    assert sel.ubuntu_kernel_flavour(None, '6.8.0-45-generic') is None


def test_DRV_11_cuda_repo_apt_names_and_pin_file():
    out = select(method='cuda_repo', gpus=[H100])
    assert out['packages']['pinned'] == ['nvidia-open', 'libnvidia-compute-580']
    # the pinning package locks the branch before the driver: not in the driver's apt transaction (DRV-33)
    assert out['packages']['unpinned'] == []
    assert out['branch_lock'] == {'kind': 'apt', 'packages': ['nvidia-driver-pinning-580']}
    assert out['packages']['version_package'] == 'libnvidia-compute-580'
    assert 'Pin: version 580.*' in out['apt_pin_file'] and 'Pin-Priority: 1000' in out['apt_pin_file']
    out = select(method='cuda_repo', branch='595', gpus=[V100.replace('1db1', '2330')], kernel_module_type='proprietary')
    assert out['packages']['pinned'] == ['cuda-drivers', 'libnvidia-compute']   # R590 on: no branch in the names
    assert out['branch_lock']['packages'] == ['nvidia-driver-pinning-595']
    assert 'Pin: version 595.1.2*' in sel.apt_pin_file('595', '595.1.2')
    assert select(method='distro', gpus=[H100])['apt_pin_file'] is None


@pytest.mark.parametrize('current,branch,gpus,wanted', [
    ('595-open', '580', 'H100', 'nvidia-driver:580-open'),    # DOWN a branch (the case "not tried" before)
    ('580-open', '595', 'H100', 'nvidia-driver:595-open'),    # up
    ('580-dkms', '580', 'H100', 'nvidia-driver:580-open'),    # the other flavour, same branch
    ('595-open', '580', 'V100', 'nvidia-driver:580-dkms'),    # down and to proprietary
])
def test_DRV_41_rhel_stream_switched_as_nvidia_does_in_either_direction(current, branch, gpus, wanted):
    """NVIDIA's driver installation guide (R580/R590/R595 "Advanced Options", RHEL 8/9): `dnf -y module switch-to
    nvidia-driver:<stream> --allowerasing`. dnf's switch-to distro-syncs to the new stream, so a lower branch's
    packages replace the newer ones; the role's former `dnf module reset` + `dnf module install @stream` never
    downgraded (dnf keeps a newer installed package on install)."""
    out = select(family='RedHat', major='9', branch=branch, gpus=[{'H100': H100, 'V100': V100}[gpus]],
                 dnf_module_current=current)
    assert out['packages']['dnf_module_stream'] == wanted
    assert out['dnf_module_switch'] == ['dnf', '-y', 'module', 'switch-to', wanted, '--allowerasing']
    assert out['dnf_module_reset'] is True


def test_DRV_41_no_switch_on_the_same_stream_nor_without_streams():
    assert select(family='RedHat', major='9', gpus=[H100], dnf_module_current='580-open')['dnf_module_switch'] is None
    assert select(family='RedHat', major='9', gpus=[H100])['dnf_module_switch'] is None
    assert select(family='RedHat', major='10', gpus=[H100], dnf_module_current='580-open')['dnf_module_switch'] is None
    assert select(family='Ubuntu', major='24', gpus=[H100])['dnf_module_switch'] is None


def test_DRV_41_the_role_runs_the_switch_and_no_bare_reset():
    """The role's dnf path runs the plan's switch command (and no `dnf module reset` of its own that would leave a
    newer branch installed)."""
    import yaml
    path = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..', 'roles', 'nvidia_driver', 'tasks',
                        'install-dnf.yml')
    with open(path) as f:
        tasks = yaml.safe_load(f)
    switch = [t for t in tasks if 'dnf_module_switch' in str(t.get('ansible.builtin.command', {}).get('argv'))]
    assert len(switch) == 1 and switch[0]['when'] == 'nvidia_driver__selection.selection.dnf_module_switch is not none'
    assert not [t for t in tasks if 'reset' in str(t.get('ansible.builtin.command', {}).get('argv'))]
    names = [t['name'] for t in tasks]
    assert names.index(switch[0]['name']) < names.index("Install the driver's dnf module stream")


def test_DRV_12_rhel_module_streams_and_reset():
    out = select(family='RedHat', major='9', gpus=[H100])
    assert out['packages']['dnf_module_stream'] == 'nvidia-driver:580-open'
    assert out['dnf_module_reset'] is False
    out = select(family='RedHat', major='8', gpus=[V100], dnf_module_current='535-dkms')
    assert out['packages']['dnf_module_stream'] == 'nvidia-driver:580-dkms'
    assert out['dnf_module_reset'] is True
    assert select(family='RedHat', major='9', gpus=[H100], dnf_module_current='580-open')['dnf_module_reset'] is False
    text = ('Last metadata expiration check\nName           Stream        Profiles\n'
            'nvidia-driver  535-dkms [e]  default [d], fm, ks, src  Nvidia driver\n')
    assert sel.parse_dnf_enabled_stream(text) == '535-dkms'
    assert sel.parse_dnf_enabled_stream('nvidia-driver  latest-dkms  default [d]\n') is None


def test_DRV_13_rhel10_plain_packages_and_versionlock():
    out = select(family='RedHat', major='10', gpus=[H100])
    assert out['packages']['dnf_module_stream'] is None
    assert out['packages']['install'] == ['nvidia-open']
    assert out['packages']['versionlock_pattern'] == '*nvidia*580*'


def test_DRV_13_rhel10_branch_locked_before_install():
    """NVIDIA's R620 guide installs a specific branch on RHEL 10 by versionlocking *nvidia*<b>* first: select
    hands the role that lock (it runs before dnf install), and says whether the list already holds it."""
    out = select(family='RedHat', major='10', gpus=[H100])
    assert out['branch_lock'] == {'kind': 'dnf_versionlock', 'pattern': '*nvidia*580*'}
    assert out['branch_lock_present'] is False
    listed = ('# Added by versionlock\nkmod-nvidia-open-dkms-3:580.95.05-1.el10.*\nnvidia-open-3:580.95.05-1.el10.*\n')
    assert select(family='RedHat', major='10', gpus=[H100], versionlock_list=listed)['branch_lock_present'] is True
    other = 'nvidia-open-3:575.51-1.el10.*\n!nvidia-open-3:580.95.05-1.el10.*\n'
    assert select(family='RedHat', major='10', gpus=[H100], versionlock_list=other)['branch_lock_present'] is False
    # RHEL 8/9 lock the branch through the module stream; Ubuntu's own packages carry the branch in their names
    assert select(family='RedHat', major='9', gpus=[H100])['branch_lock'] is None
    assert select(gpus=[H100])['branch_lock'] is None


def test_DRV_14_rhel_libnvidia_ml_from_560():
    assert 'libnvidia-ml' in select(family='RedHat', major='9', gpus=[H100])['packages']['pinned']
    old = select(family='RedHat', major='9', gpus=[H100], branch='535', accept_eol_branch='535')['packages']['pinned']
    assert 'nvidia-driver-NVML' in old and 'libnvidia-ml' not in old
    assert 'kmod-nvidia-latest-dkms' in old
    assert 'kmod-nvidia-open-dkms' in select(family='RedHat', major='9', gpus=[H100])['packages']['pinned']


def test_DRV_15_fabricmanager_names_change_at_580():
    assert select(family='RedHat', major='9')['packages']['fabricmanager'] == ['nvidia-fabricmanager', 'libnvidia-nscq']
    assert select(family='RedHat', major='9', branch='570', accept_eol_branch='570')['packages']['fabricmanager'] == [
        'nvidia-fabric-manager', 'libnvidia-nscq-570']
    assert select(method='cuda_repo')['packages']['fabricmanager'] == ['nvidia-fabricmanager', 'libnvidia-nscq']
    assert select(method='cuda_repo', branch='570', accept_eol_branch='570')['packages']['fabricmanager'] == [
        'nvidia-fabricmanager-570', 'libnvidia-nscq-570']
    assert select()['packages']['fabricmanager'] == ['nvidia-fabricmanager-580', 'libnvidia-nscq-580']
    assert select(family='Debian', major='12', gpus=[A100])['packages']['fabricmanager'] == []


def test_DRV_24_debian_open_and_proprietary_dkms_packages():
    out = select(family='Debian', major='12', branch='535', accept_eol_branch='535', gpus=[H100],
                 kernel_module_type='open')
    assert 'nvidia-open-kernel-dkms' in out['packages']['pinned']
    assert 'nvidia-kernel-dkms' not in out['packages']['pinned']
    out = select(family='Debian', major='12', branch='535', accept_eol_branch='535', gpus=[H100])
    assert 'nvidia-kernel-dkms' in out['packages']['pinned']   # auto before R560: proprietary
    assert out['packages']['version_package'] == 'nvidia-driver'


# --- DRV-16..18: OS and methods -----------------------------------------------------------------------------

def test_DRV_16_dkms_module_found_under_extra(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, 'var/lib/dkms/nvidia/580.95.05'))
    os.makedirs(os.path.join(root, 'lib/modules/5.14.0-427.el9.x86_64/extra'))
    open(os.path.join(root, 'lib/modules/5.14.0-427.el9.x86_64/extra/nvidia.ko.xz'), 'w').close()
    state = nd.dkms_state(root, '5.14.0-427.el9.x86_64')
    assert state['installed_for_kernel'] is True
    assert state['module_dir'] == '/lib/modules/5.14.0-427.el9.x86_64/extra'


@pytest.mark.parametrize('major', ['7', '6'])
def test_DRV_17_rhel7_refused(major):
    with pytest.raises(sel.SelectionError) as e:
        select(family='RedHat', major=major)
    assert 'RHEL/CentOS %s is not supported' % major in str(e.value)
    with pytest.raises(sel.SelectionError):
        select(family='Suse', major='15')


def test_DRV_18_runfile_kernel_module_type():
    assert select(method='runfile', gpus=[H100])['runfile_flags'] == ['--kernel-module-type=open']
    assert select(method='runfile', gpus=[V100])['runfile_flags'] == ['--kernel-module-type=proprietary']
    assert sel.runfile_module_flags('535', 'open') == ['-m=kernel-open']
    assert sel.runfile_module_flags('535', 'proprietary') == ['-m=kernel']


# --- DRV-19..23: verify, hold, persistence, NVLink5 ---------------------------------------------------------

def test_DRV_19_transitional_branch_mismatch_fails_clearly():
    ok, msg = sel.verify_installed('535', '', '580.95.05')
    assert ok is False
    assert 'nvidia_driver_branch is 535 but the packages installed driver 580.95.05 (branch 580)' in msg
    assert 'transitional' in msg
    assert sel.verify_installed('580', '', '580.95.05')[0] is True
    assert sel.verify_installed('580', '580.95.05', '580.82.07')[0] is False
    assert sel.verify_installed('580', '', None)[0] is False


def test_DRV_20_hold_what_is_really_installed():
    versions = {'nvidia-headless-535-server': '580.95.05-0ubuntu0.24.04.1',
                'libnvidia-compute-580-server': '580.95.05-0ubuntu0.24.04.1',
                'nvidia-kernel-common-580-server': '580.95.05-0ubuntu0.24.04.1',
                'linux-modules-nvidia-580-server-open-generic': '6.8.0-45.45+1',
                'nvidia-container-toolkit': '1.17.8-1',
                'libnvidia-ml1': '1:580.95.05-1'}
    assert sel.installed_driver_packages(versions, '580.95.05') == [
        'libnvidia-compute-580-server', 'libnvidia-ml1', 'nvidia-headless-535-server', 'nvidia-kernel-common-580-server']
    assert sel.installed_driver_packages(versions, None) == []


UBUNTU_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true
Before=systemd-backlight@backlight:nvidia_0.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""


def test_DRV_21_persistenced_dropin_removes_no_persistence_mode():
    dropin = sel.persistenced_dropin(UBUNTU_UNIT)
    lines = dropin.splitlines()
    assert '[Service]' in lines
    assert lines.index('ExecStart=') < lines.index(
        'ExecStart=/usr/bin/nvidia-persistenced --persistence-mode --user nvidia-persistenced --verbose')
    assert '--no-persistence-mode' not in dropin
    # units that already turn persistence on need nothing
    assert sel.persistenced_dropin(UBUNTU_UNIT.replace(' --no-persistence-mode', '')) is None
    assert sel.persistenced_dropin(None) is None


def test_DRV_22_nvlink5_detected_from_infiniband_vpd():
    assert sel.nvlink5_detected(['PN MCX75310\x00SW_MNG\x00']) is True
    assert sel.nvlink5_detected(['PN MCX75310 ConnectX-7']) is False
    assert sel.nvlink5_detected([]) is False
    plan = nd.plan(dict(kernel_module='auto', fabricmanager='auto', method='distro'),
                   dict(nvlink5=True, nvswitch_count=0, dkms={}))
    assert plan['fabricmanager']['wanted'] is True and plan['fabricmanager']['nvlink5'] is True


def test_DRV_23_nvlink5_packages():
    p = select(family='Ubuntu', method='cuda_repo')['packages']['nvlink5']
    assert p == {'pinned': ['libnvsdm'], 'unpinned': ['nvlsm', 'infiniband-diags'], 'wanted': False,
                 'keep_on_removal': ['infiniband-diags'], 'kernel_modules': []}
    assert select(machine='aarch64')['packages']['nvlink5']['pinned'] == []   # no libnvsdm for arm64
    assert select(family='RedHat', major='9')['packages']['nvlink5']['unpinned'] == ['nvlsm', 'infiniband-diags']
    assert select(family='RedHat', major='9')['packages']['nvlink5']['pinned'] == ['libnvsdm']
    assert select(branch='535', accept_eol_branch='535', gpus=[A100])['packages']['nvlink5'] == {
        'pinned': [], 'unpinned': [], 'wanted': False, 'keep_on_removal': [], 'kernel_modules': []}


def test_DRV_23_nvlink5_libnvsdm_carries_the_branch_before_580_on_rhel_too():
    # gpu-driver-container rhel9/precompiled/Dockerfile: libnvsdm-<branch> for R570-R579, libnvsdm from R580
    assert select(family='RedHat', major='9', branch='570', accept_eol_branch='570',
                  gpus=[H100])['packages']['nvlink5']['pinned'] == ['libnvsdm-570']
    assert select(family='Ubuntu', method='cuda_repo', branch='570', accept_eol_branch='570',
                  gpus=[H100])['packages']['nvlink5']['pinned'] == ['libnvsdm-570']


@pytest.mark.parametrize('family, machine, missing', [
    ('Ubuntu', 'x86_64', 'libnvsdm and nvlsm'), ('Ubuntu', 'aarch64', 'nvlsm'), ('Debian', 'x86_64', 'libnvsdm and nvlsm'),
])
def test_DRV_23_nvlink5_with_the_distributions_own_packages_is_refused(family, machine, missing):
    # issue 28 item 4: libnvsdm and nvlsm are not in Ubuntu's (or Debian's) archive, only in NVIDIA's CUDA
    # repository; an HGX B200/B300 node with method distro is refused before anything is installed, naming the
    # variable, its value, the reason and the alternative, and nothing of NVLink5 is planned from the archive
    major = '12' if family == 'Debian' else '24'
    s = select(family=family, major=major, method='distro', nvlink5=True, gpus=[B200], machine=machine)
    msg = s['refusal']
    assert msg and 'nvidia_driver_method is "distro"' in msg and 'NVLink5' in msg, msg
    assert 'needs %s with fabricmanager' % missing in msg, msg
    assert 'nvidia_driver_method: cuda_repo' in msg, msg
    # issue 38: never offered as a way out (it leaves the GPUs of an NVSwitch system unusable), but named as none
    assert 'nvidia_driver_fabricmanager: never is no way out' in msg and 'do not run CUDA work' in msg, msg
    assert s['packages']['nvlink5']['pinned'] == [] and s['packages']['nvlink5']['unpinned'] == []


@pytest.mark.parametrize('kw', [
    dict(family='Ubuntu', method='distro', nvlink5=False),                        # no NVLink5 system
    dict(family='Ubuntu', method='distro', nvlink5=True, fabricmanager='never'),  # the site declines fabricmanager
    dict(family='Ubuntu', method='cuda_repo', nvlink5=True),                      # NVIDIA's repository has them
    dict(family='RedHat', major='9', method='distro', nvlink5=True),              # RHEL: CUDA repository names
])
def test_DRV_23_nvlink5_refusal_only_where_the_packages_cannot_come(kw):
    assert select(gpus=[B200], **kw)['refusal'] is None


@pytest.mark.parametrize('detected, fabricmanager, wanted', [
    (True, 'auto', True), (True, 'always', True), (True, 'never', False),
    (False, 'auto', False), (False, 'always', False),
])
def test_DRV_28_nvlink5_packages_wanted_from_the_detection(detected, fabricmanager, wanted):
    # decided by the selection (before the role's first read of the node's packages), on every run: a node
    # converged by an older release without nvlsm is then found missing it
    nv = select(family='Ubuntu', method='cuda_repo', nvlink5=detected,
                fabricmanager=fabricmanager)['packages']['nvlink5']
    assert nv['wanted'] is wanted
    assert nv['unpinned'] == ['nvlsm', 'infiniband-diags']


@pytest.mark.parametrize('family, major, method, where', [
    ('Debian', '12', 'distro', 'nvidia-open-kernel-dkms'),
    ('RedHat', '9', 'distro', 'kmod'),
    ('RedHat', '10', 'cuda_repo', 'nvidia-open'),
    ('Ubuntu', '24', 'cuda_repo', 'nvidia-open'),
    ('Ubuntu', '24', 'runfile', 'runfile'),
])
def test_DRV_35_secure_boot_with_modules_built_on_the_node_is_refused_up_front(family, major, method, where):
    """Before: Secure Boot with DKMS on RHEL and Debian (and the CUDA repository, the runfile) installed modules the
    kernel then refused; only the doctor said so afterwards. Now the selection carries a refusal the role asserts
    before installing anything, naming the variable and the ways out."""
    out = select(family=family, major=major, method=method, secure_boot='enabled')
    assert out['precompiled']['effective'] is False
    msg = out['refusal']
    assert msg and 'Secure Boot is on' in msg and 'nvidia_driver_method %s' % method in msg
    assert 'nvidia_driver_secure_boot_mok_enrolled: true' in msg and 'turn Secure Boot off' in msg
    assert ('the runfile' in msg) is (method == 'runfile')
    if family == 'Ubuntu':
        assert 'nvidia_driver_ubuntu_precompiled: auto' in msg
    # the site signs with an enrolled MOK: no refusal; Secure Boot off or not known: none either
    assert select(family=family, major=major, method=method, secure_boot='enabled',
                  secure_boot_mok_enrolled=True)['refusal'] is None
    assert select(family=family, major=major, method=method, secure_boot='disabled')['refusal'] is None
    assert select(family=family, major=major, method=method, secure_boot='unknown')['refusal'] is None


def test_DRV_35_ubuntu_precompiled_is_not_refused_but_dkms_by_choice_is():
    assert select(secure_boot='enabled')['refusal'] is None                      # auto: Canonical's signed modules
    msg = select(secure_boot='enabled', precompiled='false')['refusal']
    assert 'nvidia_driver_ubuntu_precompiled: auto or "true"' in msg


@pytest.mark.parametrize('detected, fabricmanager, modules', [
    (True, 'auto', ['ib_umad']), (True, 'never', []), (False, 'auto', []),
])
def test_DRV_36_nvlink5_loads_ib_umad_before_fabric_manager(detected, fabricmanager, modules):
    """NVIDIA's driver container waits for mlx5_core and ib_umad before it starts fabric manager on an NVLink5
    system; nothing loads ib_umad by itself, and the role never did (issue 38)."""
    s = select(family='Ubuntu', method='cuda_repo', nvlink5=detected, fabricmanager=fabricmanager, gpus=[B200])
    assert s['packages']['nvlink5']['kernel_modules'] == modules


# Branch changes in both directions (issue 38, "beyond the list"). Ubuntu's -server packages of every branch Conflict
# with the virtual names all branches Provide (libnvidia-compute, nvidia-dkms-kernel, nvidia-kernel-common,
# nvidia-utils, nvidia-headless, nvidia-compute-utils: canonical/nvidia-graphics-drivers, debian/control, 515-server
# @003cef0f), so installing 580's packages makes apt remove 570's; the role's holds on them must go first.
U570 = '570.195.03-0ubuntu0.24.04.1'
U580 = '580.95.05-0ubuntu0.24.04.1'
UBUNTU_570 = {'nvidia-headless-570-server': U570, 'nvidia-dkms-570-server': U570,
              'nvidia-utils-570-server': U570, 'libnvidia-compute-570-server': U570,
              'nvidia-compute-utils-570-server': U570, 'nvidia-kernel-common-570-server': U570,
              'nvidia-container-toolkit': '1.17.8-1'}
UBUNTU_580 = dict((k.replace('570', '580'), U580) for k in UBUNTU_570 if '570' in k)
UBUNTU_580['nvidia-container-toolkit'] = '1.17.8-1'


def test_DRV_37_installed_driver_version_when_the_role_names_another_branch():
    # the role's version package for 580 (libnvidia-compute-580-server) is not installed on a 570 node: the
    # installed driver is read from whatever NVIDIA packages are there; the toolkit's 1.x is never a driver
    assert sel.installed_driver_version(UBUNTU_570) == '570.195.03'
    assert sel.installed_driver_version({'nvidia-container-toolkit': '1.17.8-1', 'bash': '5.2'}) is None
    assert sel.installed_driver_version({'nvidia-driver': '3:580.65.06-1.el9', 'kmod-nvidia-open-dkms':
                                         '3:580.65.06-1.el9', 'nvidia-driver-cuda': '3:580.65.06-1.el9'}) == '580.65.06'


@pytest.mark.parametrize('have, branch, direction, allow_downgrade', [
    (UBUNTU_570, '580', 'up', False), (UBUNTU_580, '570', 'down', True)])
def test_DRV_37_ubuntu_branch_change_releases_the_old_branchs_holds(have, branch, direction, allow_downgrade):
    held = dict((k, 'hold') for k in have if k != 'nvidia-container-toolkit')
    held['nvidia-container-toolkit'] = 'hold'   # not the driver's: never released here
    now = sel.installed_driver_version(have)
    change = sel.branch_change(now, branch, '', have, held, 'Ubuntu')
    assert change['direction'] == direction and change['allow_downgrade'] is allow_downgrade, change
    old = sorted(k for k in have if k != 'nvidia-container-toolkit')
    assert change['release_holds'] == old, change
    assert change['release_versionlocks'] == [] and change['old_branch_lock'] is None


def test_DRV_37_same_branch_releases_nothing_and_fresh_node_has_nothing_to_release():
    held = dict((k, 'hold') for k in UBUNTU_580)
    same = sel.branch_change('580.95.05', '580', '', UBUNTU_580, held, 'Ubuntu')
    assert same['direction'] == 'none' and same['release_holds'] == [] and not same['allow_downgrade']
    fresh = sel.branch_change(None, '580', '', {}, {}, 'Ubuntu')
    assert fresh['direction'] == 'fresh' and fresh['release_holds'] == []


@pytest.mark.parametrize('now, version, direction', [
    ('535.247.01', '535.216.03', 'down'), ('535.216.03', '535.247.01', 'up'), ('535.247.01', '535.247.01', 'none')])
def test_DRV_38_debian_version_change_within_a_branch(now, version, direction):
    # Debian keeps the names (nvidia-driver, nvidia-kernel-dkms) and changes the version: the holds of the installed
    # version are released, and a lower version needs apt's --allow-downgrades
    have = {'nvidia-driver': now + '-1', 'nvidia-kernel-dkms': now + '-1', 'libnvidia-ml1': now + '-1'}
    change = sel.branch_change(now, '535', version, have, dict((k, 'hold') for k in have), 'Debian')
    assert change['direction'] == direction
    assert change['allow_downgrade'] is (direction == 'down')
    assert change['release_holds'] == ([] if direction == 'none' else sorted(have))
    # down: every installed package of the driver's version is asked for at the requested one (apt would keep the
    # newer dependencies that the packages asked for need at exactly the lower version)
    assert change['downgrade_specs'] == ([n + '=' + version + '*' for n in sorted(have)] if direction == 'down' else [])


@pytest.mark.parametrize('now, branch', [('570.195.03', '580'), ('580.65.06', '570')])
def test_DRV_39_rhel_branch_change_releases_version_locks_and_the_old_branch_pattern(now, branch):
    # the role version-locks the driver's names at the installed version (community.general.yum_versionlock) and on
    # RHEL 10 the branch pattern '*nvidia*<b>*' (NVIDIA's version-locking guide): dnf would keep the old version
    have = {'nvidia-driver': '3:%s-1.el10' % now, 'kmod-nvidia-open-dkms': '3:%s-1.el10' % now,
            'libnvidia-ml': '3:%s-1.el10' % now}
    old_branch = now.split('.')[0]
    lock_list = ('# Added by versionlock on Mon Nov 23\nnvidia-driver-3:%s-1.el10.*\nkmod-nvidia-open-dkms-3:%s-1.el10.*\n'
                 % (now, now))
    change = sel.branch_change(now, branch, '', have, {}, 'RedHat', lock_list)
    assert change['release_versionlocks'] == sorted(have)
    assert change['old_branch_lock'] == '*nvidia*%s*' % old_branch
    assert change['allow_downgrade'] is (int(branch) < int(old_branch))
    # no entries of the old pattern in the list (RHEL 8/9 module streams): nothing to delete
    assert sel.branch_change(now, branch, '', have, {}, 'RedHat', '')['old_branch_lock'] is None


def test_DRV_40_cuda_repo_branch_change_removes_the_old_pinning_package():
    # NVIDIA's CUDA repository (apt): one pinning package per branch (nvidia-driver-pinning-<b>, version-locking
    # guide); the old branch's would keep apt on it
    have = {'nvidia-open': '580.95.05-1', 'libnvidia-compute-580': '580.95.05-1',
            'nvidia-driver-pinning-580': '580.95.05-1'}
    down = sel.branch_change('580.95.05', '570', '', have, {'nvidia-open': 'hold'}, 'Ubuntu')
    assert down['remove_first'] == ['nvidia-driver-pinning-580'] and down['allow_downgrade'] is True
    assert down['release_holds'] == ['nvidia-open']
    assert sel.branch_change('580.95.05', '580', '', have, {}, 'Ubuntu')['remove_first'] == []
