# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nvidia_driver role installs: branch, kernel module flavour and package names, as pure functions.

The tables below are written from NVIDIA's and the distributions' own documents; docs/nvidia_driver.md and
docs/conformance/nvidia-driver.md cite them row by row. Nothing here reads the node: nvidia_driver_info passes
in what it observed (PCI device ids, os-release, kernel release, Secure Boot) and returns the result.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import platforms
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_catalog import architecture_from_pci_id

FLAVOURS = ('auto', 'open', 'proprietary')
METHODS = ('distro', 'cuda_repo', 'runfile')

# NVIDIA's data center driver lifecycle ("Supported Drivers and CUDA Toolkit Versions" of the NVIDIA Data Center
# Drivers documentation, versions 580, 615 and 620 of that page). type: ltsb (long term support branch),
# production, new-feature. eol: last month of support (YYYY-MM), None where NVIDIA gives no date.
_SRC_580 = 'docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html (v580)'
_SRC_615 = 'docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html'
_SRC_620 = 'docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-toolkit-versions.html'
BRANCHES = {
    '535': {'type': 'ltsb', 'eol': '2026-06', 'source': _SRC_615},
    '550': {'type': 'production', 'eol': None, 'ended': True, 'source': _SRC_580},
    '560': {'type': 'new-feature', 'eol': None, 'ended': True, 'source': _SRC_580},
    '565': {'type': 'new-feature', 'eol': None, 'ended': True, 'source': _SRC_580},
    '570': {'type': 'production', 'eol': '2026-02', 'source': _SRC_580},
    '575': {'type': 'new-feature', 'eol': None, 'ended': True, 'source': _SRC_580},
    '580': {'type': 'ltsb', 'eol': '2028-06', 'source': _SRC_620},
    '590': {'type': 'new-feature', 'eol': None, 'ended': True, 'source': _SRC_615},
    '595': {'type': 'production', 'eol': '2027-03', 'source': _SRC_620},
    '610': {'type': 'new-feature', 'eol': '2026-08', 'source': _SRC_615},
    '620': {'type': 'ltsb', 'eol': '2029-09', 'source': _SRC_620},
}  # type: dict[str, dict]
# 580: long term support until June 2028, the last branch that drives Maxwell, Pascal and Volta (NVIDIA's
# "CUDA Toolkit, Driver, and Architecture Matrix"), packaged by Ubuntu (-server), RHEL module streams and the
# CUDA repositories. 595 ends in March 2027; 620 (LTSB to September 2029) drops every GPU before Turing.
DEFAULT_BRANCH = '580'

# Architectures, oldest first. Open kernel modules: Turing and newer only; required on Grace Hopper and
# Blackwell; NVIDIA's default from R560 (driver installation guide, "Kernel Modules").
ARCH_ORDER = ('kepler', 'maxwell', 'pascal', 'volta', 'turing', 'ampere', 'ada', 'hopper', 'grace-hopper',
              'blackwell')
OPEN_MIN_ARCH = 'turing'
OPEN_REQUIRED_ARCHS = ('grace-hopper', 'blackwell')
OPEN_DEFAULT_FROM_BRANCH = 560
# The last branch that drives an architecture (NVIDIA's "CUDA Toolkit, Driver, and Architecture Matrix").
LAST_BRANCH_FOR_ARCH = {'kepler': 470, 'maxwell': 580, 'pascal': 580, 'volta': 580}
# The first branch that drives an architecture (Blackwell: CUDA 12.8, driven from R570).
FIRST_BRANCH_FOR_ARCH = {'blackwell': 570}
# The last branch that ships the proprietary flavour: the R610 installation guide still describes both
# flavours, the R620 one only the open modules.
PROPRIETARY_LAST_BRANCH = 610
OPEN_FIRST_BRANCH = 515

SUPPORTED_FAMILIES = platforms.SUPPORTED_FAMILIES   # _common/platforms.py


class SelectionError(ValueError):
    """A variable combination the role refuses before changing anything."""


def _branch_int(branch: str | int | None) -> int:
    return int(branch) if branch and str(branch).isdigit() else 0


def _month_end(ym: str) -> datetime.date:
    year, month = [int(x) for x in ym.split('-')]
    if month == 12:
        return datetime.date(year, 12, 31)
    return datetime.date(year, month + 1, 1) - datetime.timedelta(days=1)


def branch_status(branch: str | int | None, today: datetime.date) -> dict[str, Any]:
    """{'branch', 'known', 'type', 'eol', 'source', 'supported'} for a branch on date today."""
    info = BRANCHES.get(str(branch))
    if info is None:
        return {'branch': str(branch), 'known': False, 'type': None, 'eol': None, 'source': None,
                'supported': False}
    if info.get('eol'):
        supported = today <= _month_end(info['eol'])
    else:
        supported = not info.get('ended')
    return {'branch': str(branch), 'known': True, 'type': info['type'], 'eol': info.get('eol'),
            'source': info['source'], 'supported': supported}


def supported_branches(today: datetime.date) -> list[str]:
    return sorted(b for b in BRANCHES if branch_status(b, today)['supported'])


def check_branch(branch: str | int | None, accept_eol: object, today: datetime.date) -> dict[str, Any]:
    """The branch's status; raises SelectionError for an EOL or unknown branch unless accept_eol names it."""
    if not re.match(r'^[0-9]{3}$', str(branch or '')):
        raise SelectionError('nvidia_driver_branch must be a three-digit driver branch, got %r; supported now: %s'
                             % (branch, ', '.join(supported_branches(today))))
    status = branch_status(branch, today)
    if status['supported']:
        return status
    if str(accept_eol or '') == str(branch):
        status['accepted_eol'] = True
        return status
    if status['known']:
        why = ('reached end of life in %s' % status['eol']) if status['eol'] else 'is no longer supported'
        raise SelectionError(
            'nvidia_driver_branch %s (%s branch) %s according to NVIDIA (%s). Supported branches now: %s. '
            'To install it anyway set nvidia_driver_accept_eol_branch: "%s".'
            % (branch, status['type'], why, status['source'], ', '.join(supported_branches(today)), branch))
    raise SelectionError(
        'nvidia_driver_branch %s is not in the role\'s branch table (NVIDIA\'s lifecycle page lists %s as '
        'supported now). To install it anyway set nvidia_driver_accept_eol_branch: "%s".'
        % (branch, ', '.join(supported_branches(today)), branch))


def _arch_index(arch: str) -> int:
    """arch: one of ARCH_ORDER (the callers keep only those)."""
    return ARCH_ORDER.index(arch)


def decide_flavour(flavour: str, branch: str | int | None, archs: Iterable[str]) -> tuple[str, str]:
    """(flavour 'open'|'proprietary', reason) for the requested flavour, branch and the GPUs' architectures.

    Raises SelectionError for impossible pairs: open before Turing or before R515, proprietary on Grace Hopper
    or Blackwell or on a branch that no longer ships it, a branch that does not drive a GPU, mixed GPUs that
    need both flavours.
    """
    if flavour not in FLAVOURS:
        raise SelectionError('nvidia_driver_kernel_module_type must be one of %s, got %r'
                             % (', '.join(FLAVOURS), flavour))
    b = _branch_int(branch)
    known = sorted(set(a for a in archs if a in ARCH_ORDER), key=_arch_index)
    for arch in known:
        last = LAST_BRANCH_FOR_ARCH.get(arch)
        if last and b > last:
            raise SelectionError('nvidia_driver_branch %s does not drive %s GPUs (their last branch is R%d); '
                                 'choose nvidia_driver_branch "%d" or older' % (branch, arch, last, last))
        first = FIRST_BRANCH_FOR_ARCH.get(arch)
        if first and b < first:
            raise SelectionError('nvidia_driver_branch %s does not drive %s GPUs (first branch R%d); choose a '
                                 'supported branch from R%d' % (branch, arch, first, first))
    needs_open = [a for a in known if a in OPEN_REQUIRED_ARCHS]
    cannot_open = [a for a in known if _arch_index(a) < _arch_index(OPEN_MIN_ARCH)]
    if needs_open and cannot_open:
        raise SelectionError('this node mixes GPUs that need the open kernel modules (%s) with GPUs that cannot '
                             'use them (%s); no nvidia_driver_kernel_module_type fits both'
                             % (', '.join(needs_open), ', '.join(cannot_open)))
    if flavour == 'open':
        if cannot_open:
            raise SelectionError('nvidia_driver_kernel_module_type "open" is impossible on %s GPUs (open kernel '
                                 'modules need Turing or newer); allowed here: proprietary, auto'
                                 % ', '.join(cannot_open))
        if b < OPEN_FIRST_BRANCH:
            raise SelectionError('nvidia_driver_kernel_module_type "open" needs branch %d or newer, got %s'
                                 % (OPEN_FIRST_BRANCH, branch))
        return 'open', 'nvidia_driver_kernel_module_type is open'
    if flavour == 'proprietary':
        if needs_open:
            raise SelectionError('nvidia_driver_kernel_module_type "proprietary" is impossible on %s GPUs (NVIDIA '
                                 'requires the open kernel modules there); allowed here: open, auto'
                                 % ', '.join(needs_open))
        if b > PROPRIETARY_LAST_BRANCH:
            raise SelectionError('nvidia_driver_kernel_module_type "proprietary" is not shipped from branch %d on '
                                 '(got nvidia_driver_branch %s); allowed here: open, auto'
                                 % (PROPRIETARY_LAST_BRANCH + 1, branch))
        return 'proprietary', 'nvidia_driver_kernel_module_type is proprietary'
    # auto
    if needs_open:
        return 'open', 'auto: NVIDIA requires the open kernel modules on %s' % ', '.join(needs_open)
    if cannot_open:
        return 'proprietary', 'auto: %s GPUs cannot use the open kernel modules' % ', '.join(cannot_open)
    if b > PROPRIETARY_LAST_BRANCH:
        return 'open', 'auto: branch %s ships only the open kernel modules' % branch
    if b >= OPEN_DEFAULT_FROM_BRANCH:
        if known:
            return 'open', 'auto: %s GPUs, open kernel modules are NVIDIA\'s default from R%d' % (
                ', '.join(known), OPEN_DEFAULT_FROM_BRANCH)
        return 'open', 'auto: no GPU architecture known, open kernel modules are NVIDIA\'s default from R%d' % (
            OPEN_DEFAULT_FROM_BRANCH)
    return 'proprietary', 'auto: branch %s is older than R%d, where open became the default' % (
        branch, OPEN_DEFAULT_FROM_BRANCH)


def check_os(family: str | None, major: str | int | None) -> None:
    """Refuse what the role cannot install on, before anything changes."""
    if family not in SUPPORTED_FAMILIES:
        raise SelectionError('gpuops.k8s_gpu.nvidia_driver supports %s, not %s'
                             % (', '.join(SUPPORTED_FAMILIES), family))
    if family == 'RedHat' and _branch_int(major) and _branch_int(major) < 8:
        raise SelectionError('RHEL/CentOS %s is not supported: it is past its end of maintenance and NVIDIA\'s '
                             'current driver branches are not packaged for it; use RHEL 8, 9 or 10' % major)


_KERNEL_ABI = re.compile(r'^\d+\.\d+\.\d+-\d+-(.+)$')           # 6.8.0-45-generic -> generic
_VERSIONED_IMAGE = re.compile(r'^linux-image-(?:unsigned-)?\d')   # linux-image-6.8.0-45-generic: not a metapackage


def parse_dpkg_depends(out: str | None) -> dict[str, list[str]]:
    """dpkg-query -W -f '${Package}\t${db:Status-Abbrev}\t${Depends}\n' output -> {installed package: [the
    package names it depends on]} (version constraints and alternatives dropped)."""
    found: dict[str, list[str]] = {}
    for line in (out or '').splitlines():
        parts = line.split('\t')
        if len(parts) != 3 or parts[1][1:2] != 'i':   # 'ii ' / 'hi ' (held): installed
            continue
        names: list[str] = []
        for dep in parts[2].split(','):
            for alt in dep.split('|'):
                name = alt.strip().split(' ')[0].split(':')[0]
                if name:
                    names.append(name)
        found[parts[0]] = names
    return found


def ubuntu_kernel_flavour(installed_depends: Mapping[str, Sequence[str]] | None, kernel_release: str | None) -> str | None:
    """The kernel flavour metapackage's name without ``linux-image-`` (generic, generic-hwe-24.04, aws, ...) that
    carries the running kernel's flavour forward, or None.

    As ubuntu-drivers finds it (canonical/ubuntu-drivers-common UbuntuDrivers/kerneldetection.py
    ``_get_linux_metapackage('image')``, used by detect.py ``get_linux_modules_metapackage``): the installed
    ``linux-image-*`` packages that depend on a versioned kernel image package, greatest name first; here only those
    whose kernel has the running kernel's flavour (the part of ``uname -r`` after the ABI). None when the kernel has
    no such metapackage (a kernel apt does not move: the running kernel's own packages are enough)."""
    match = _KERNEL_ABI.match(kernel_release or '')
    if not match:
        return None
    suffix = '-' + match.group(1)
    metas = sorted((name for name, deps in (installed_depends or {}).items()
                    if name.startswith('linux-image-') and not _VERSIONED_IMAGE.match(name)
                    and any(_VERSIONED_IMAGE.match(d) and d.endswith(suffix) for d in deps)), reverse=True)
    return metas[0][len('linux-image-'):] if metas else None


def precompiled_module_packages(branch: str | int | None, opn: bool, kernel_release: str, machine: str | None,
                                kernel_flavour: str | None = None) -> list[str]:
    """Canonical's signed precompiled module packages for the running kernel (NVIDIA's precompiled driver container,
    ubuntu24.04/precompiled/nvidia-driver `_install_driver`): named after `uname -r` itself, so that HWE kernels
    (flavour metapackages -generic-hwe-22.04/-24.04), arm64 -64k kernels and a running ABI that is not the
    archive's newest get the package of the kernel that runs; the proprietary flavour adds linux-objects-nvidia-*,
    and x86_64 the Secure Boot signatures package (none is built for arm64).

    With kernel_flavour (ubuntu_kernel_flavour: generic, generic-hwe-24.04, ...) the flavour's metapackage too,
    ``linux-modules-nvidia-<branch>-server[-open]-<flavour>``, the package ubuntu-drivers installs
    (ubuntu-drivers-common detect.py ``get_linux_modules_metapackage``): it depends on the modules of the
    flavour's newest kernel, so the next kernel update brings its signed NVIDIA modules with it and the node
    still has a module after the reboot."""
    if not kernel_release:
        raise SelectionError('Ubuntu\'s precompiled NVIDIA modules are named after the running kernel, which could '
                             'not be read; set nvidia_driver_ubuntu_precompiled: "false" to build with dkms')
    if opn:
        names = ['linux-modules-nvidia-%s-server-open-%s' % (branch, kernel_release)]
    else:
        names = ['linux-objects-nvidia-%s-server-%s' % (branch, kernel_release),
                 'linux-modules-nvidia-%s-server-%s' % (branch, kernel_release)]
    if machine in ('x86_64', 'amd64'):
        names.append('linux-signatures-nvidia-%s' % kernel_release)
    if kernel_flavour:
        names.append('linux-modules-nvidia-%s-server%s-%s' % (branch, '-open' if opn else '', kernel_flavour))
    return names


def _fm_names(branch: str | int | None, family: str | None, method: str) -> list[str]:
    """fabricmanager and NSCQ packages (NVIDIA's driver container; CUDA repository names change at R580)."""
    b = _branch_int(branch)
    if family == 'RedHat':
        return (['nvidia-fabricmanager', 'libnvidia-nscq'] if b >= 580
                else ['nvidia-fabric-manager', 'libnvidia-nscq-%s' % branch])
    if family == 'Debian' and method == 'distro':
        return []
    if method == 'cuda_repo' and b >= 580:
        return ['nvidia-fabricmanager', 'libnvidia-nscq']
    return ['nvidia-fabricmanager-%s' % branch, 'libnvidia-nscq-%s' % branch]


def _nvlink5_names(branch: str | int | None, family: str | None, method: str, machine: str | None) -> tuple[list[str], list[str]]:
    """(pinned, unpinned) packages for NVLink5 systems: libnvsdm (x86_64 only) pinned, nvlsm and infiniband-diags.

    From NVIDIA's driver container (gpu-driver-container @06a208ca: ubuntu24.04/precompiled/nvidia-driver,
    rhel9/install.sh, rhel9/precompiled/Dockerfile): NVLink5 packages from R570; libnvsdm unversioned from R580,
    libnvsdm-<branch> before (R560-R579) on apt and on RHEL alike.
    """
    b = _branch_int(branch)
    if b < 570 or (family in ('Debian', 'Ubuntu') and method == 'distro'):   # not in their archives: nvlink5_refusal
        return [], []
    pinned: list[str] = []
    if machine in ('x86_64', 'amd64'):
        pinned = ['libnvsdm'] if b >= 580 else ['libnvsdm-%s' % branch]
    return pinned, ['nvlsm', 'infiniband-diags']


NVLINK5_KERNEL_MODULES = ('ib_umad',)


def nvlink5_wanted(detected: object, fabricmanager: str = 'auto') -> bool:
    """Whether the NVLink5 packages belong on this node: an NVLink5 system was detected and fabricmanager is not
    switched off (nvidia_driver_fabricmanager never). Decided from the detection on every run, not from whether
    this run installs the driver, so that a node converged by an older release gains them too."""
    return bool(detected) and fabricmanager != 'never'


def secure_boot_refusal(family: str | None, method: str, precompiled: bool, secure_boot: str | None,
                        mok_enrolled: bool = False) -> str | None:
    """Why the role refuses this node before installing anything, or None: Secure Boot is on and the chosen method
    builds the NVIDIA kernel modules on the node (DKMS on Ubuntu without the precompiled modules, Debian, RHEL and
    NVIDIA's CUDA repository; the runfile) - modules nobody signed, which a kernel booted with Secure Boot refuses
    to load (docs/conformance/nvidia-driver.md DRV-35). Not refused when the site says a Machine Owner Key that
    signs the built modules is enrolled (mok_enrolled), or Secure Boot is not known to be on."""
    if secure_boot != 'enabled' or precompiled or mok_enrolled:
        return None
    builder = 'the runfile' if method == 'runfile' else 'DKMS'
    ways: list[str] = []
    if family == 'Ubuntu' and method == 'distro':
        ways.append('nvidia_driver_ubuntu_precompiled: auto or "true" (Canonical\'s signed precompiled modules)')
    elif family == 'Ubuntu':
        ways.append('nvidia_driver_method: distro with nvidia_driver_ubuntu_precompiled: auto (Canonical\'s signed '
                    'precompiled modules)')
    ways.append('sign the modules %s builds with a Machine Owner Key enrolled in the firmware (mokutil --import; '
                'DKMS signs with /var/lib/dkms/mok.key on Debian and Ubuntu, set it with mok_signing_key in '
                '/etc/dkms/framework.conf on RHEL) and set nvidia_driver_secure_boot_mok_enrolled: true' % builder)
    ways.append('turn Secure Boot off in the firmware (an ESXi VM: its boot options)')
    return ('Secure Boot is on and nvidia_driver_method %s on %s builds the NVIDIA kernel modules with %s: unsigned '
            'modules, which the kernel refuses to load, so the node would have no GPU driver after the install. '
            'Nothing was installed. Ways out: %s.' % (method, family, builder, '; '.join(ways)))


def nvlink5_refusal(family: str | None, method: str, branch: str | int | None, machine: str | None, wanted: bool) -> str | None:
    """Why the role refuses this node before installing anything, or None: an NVLink5 system (HGX B200/B300)
    whose NVLink5 packages are wanted but cannot come from the chosen method.

    libnvsdm and nvlsm come from NVIDIA's CUDA repository (NVIDIA's driver container adds that repository to
    install them next to Canonical's precompiled modules: gpu-driver-container ubuntu24.04/precompiled/Dockerfile
    and local-repo.sh @06a208ca; NVSDM's installation guide installs libnvsdm from the CUDA repository); neither
    Ubuntu's nor Debian's own archive carries them. The role does not add NVIDIA's repository next to the
    distribution's driver (apt could then take the driver itself from it), so method distro is refused there.
    """
    if not wanted or method != 'distro' or family not in ('Debian', 'Ubuntu') or _branch_int(branch) < 570:
        return None
    pinned, unpinned = _nvlink5_names(branch, family, 'cuda_repo', machine)
    missing = pinned + [n for n in unpinned if n == 'nvlsm']
    return ('nvidia_driver_method is "distro", but this %s node is an NVLink5 system (HGX B200/B300: an '
            'InfiniBand device with SW_MNG in its VPD) and needs %s with fabricmanager, which only NVIDIA\'s CUDA '
            'repository ships, not %s\'s own archive; the role stops before installing anything. Set '
            'nvidia_driver_method: cuda_repo (the driver, fabricmanager and %s from NVIDIA\'s repository). '
            '(nvidia_driver_fabricmanager: never is no way out here: without fabric manager the NVLink fabric is '
            'never set up and the GPUs of an NVSwitch system do not run CUDA work.)'
            % (family, ' and '.join(missing), family, ' and '.join(missing)))


def package_plan(family: str | None, major: str | int | None, method: str, branch: str | int | None, flavour: str, precompiled: bool = False,
                 kernel_release: str = '', machine: str | None = 'x86_64', kernel_flavour: str | None = None) -> dict[str, Any]:
    """Package names for one node.

    Returns {'pinned': [...] (installed at the driver's version, held), 'unpinned': [...] (installed, not version
    pinned: precompiled module packages follow the kernel's version), 'version_package': the package whose
    version is the driver's, 'fabricmanager': [...], 'nvlink5': {'pinned': [...], 'unpinned': [...], 'wanted': bool (set by select)},
    'dnf_module_stream': 'nvidia-driver:<branch>-open' or None, 'versionlock_pattern': str or None,
    'apt_pin_branch': branch or None}.
    """
    b = _branch_int(branch)
    opn = flavour == 'open'
    plan = {'pinned': [], 'unpinned': [], 'version_package': None, 'dnf_module_stream': None,
            'versionlock_pattern': None, 'apt_pin_branch': None, 'branch_lock': None}  # type: dict[str, Any]
    if method == 'runfile':
        plan['runfile_kernel_module_type'] = 'open' if opn else 'proprietary'
    elif family == 'Ubuntu' and method == 'distro':
        sfx = '-open' if opn else ''
        common = ['nvidia-utils-%s-server' % branch, 'nvidia-compute-utils-%s-server' % branch,
                  'libnvidia-compute-%s-server' % branch]
        if precompiled:
            plan['pinned'] = ['nvidia-headless-no-dkms-%s-server%s' % (branch, sfx)] + common
            plan['unpinned'] = precompiled_module_packages(branch, opn, kernel_release, machine, kernel_flavour)
        else:
            plan['pinned'] = ['nvidia-headless-%s-server%s' % (branch, sfx), 'nvidia-dkms-%s-server%s' % (branch, sfx)] + common
        plan['version_package'] = 'libnvidia-compute-%s-server' % branch
    elif family == 'Debian' and method == 'distro':
        plan['pinned'] = ['nvidia-driver', 'nvidia-open-kernel-dkms' if opn else 'nvidia-kernel-dkms',
                          'nvidia-kernel-support', 'nvidia-smi', 'libnvidia-ml1', 'libcuda1', 'firmware-nvidia-gsp']
        plan['version_package'] = 'nvidia-driver'
    elif family in ('Debian', 'Ubuntu'):   # NVIDIA's CUDA repository
        # NVIDIA's driver installation guide ("Recent Updates", "Version locking"): a pinning package per branch,
        # then the unversioned metapackage; from R590 Ubuntu's package names lose the branch
        # (libnvidia-compute-580 -> libnvidia-compute, cuda-drivers-580 removed).
        # The pinning package locks the branch: it goes in before the driver, in an apt run of its own (with the
        # role's apt preferences), never in the driver's transaction, where apt resolves the driver first.
        plan['branch_lock'] = {'kind': 'apt', 'packages': ['nvidia-driver-pinning-%s' % branch]}
        plan['pinned'] = ['nvidia-open' if opn else 'cuda-drivers']
        if family == 'Ubuntu':
            plan['pinned'].append('libnvidia-compute' if b >= 590 else 'libnvidia-compute-%s' % branch)
            plan['version_package'] = plan['pinned'][-1]
        else:
            plan['version_package'] = plan['pinned'][0]
        plan['apt_pin_branch'] = str(branch)
    elif family == 'RedHat':
        nvml = 'libnvidia-ml' if b >= 560 else 'nvidia-driver-NVML'
        kmod = 'kmod-nvidia-open-dkms' if opn else 'kmod-nvidia-latest-dkms'
        plan['pinned'] = ['nvidia-driver', 'nvidia-driver-cuda', 'nvidia-driver-cuda-libs' if b >= 560
                          else 'nvidia-driver-libs', nvml, kmod, 'nvidia-persistenced']
        plan['version_package'] = 'nvidia-driver'
        if _branch_int(major) >= 10:
            # NVIDIA's R620 guide, "Install a specific branch" on RHEL 10: versionlock the branch, then install
            plan['install'] = ['nvidia-open' if opn else 'cuda-drivers']
            plan['versionlock_pattern'] = '*nvidia*%s*' % branch
            plan['branch_lock'] = {'kind': 'dnf_versionlock', 'pattern': plan['versionlock_pattern']}
        else:
            plan['dnf_module_stream'] = 'nvidia-driver:%s-%s' % (branch, 'open' if opn else 'dkms')
            plan['install'] = ['nvidia-open' if opn else 'cuda-drivers']
    plan['fabricmanager'] = _fm_names(branch, family, method) if method != 'runfile' else []
    pinned, unpinned = _nvlink5_names(branch, family, method, machine) if method != 'runfile' else ([], [])
    # infiniband-diags is InfiniBand's general tool set that a site may have had before: never removed by the role
    plan['nvlink5'] = {'pinned': pinned, 'unpinned': unpinned, 'wanted': False,
                       'keep_on_removal': [n for n in unpinned if n == 'infiniband-diags']}
    return plan


def parse_dnf_enabled_stream(text: str | None, module: str = 'nvidia-driver') -> str | None:
    """The enabled stream of a dnf module from `dnf module list --enabled <module>` output, or None."""
    for line in (text or '').splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == module and '[e]' in line:
            return parts[1].replace('[d]', '').replace('[e]', '')
    return None


def versionlock_covers(list_text: str | None, pattern: str | None) -> bool:
    """Whether dnf's versionlock list (/etc/dnf/plugins/versionlock.list) already holds entries that the branch's
    pattern ('*nvidia*580*') added: then `dnf versionlock add` is not run again (it would add the same entries)."""
    if not pattern:
        return False
    for line in (list_text or '').splitlines():
        entry = line.strip()
        if entry and not entry.startswith('#') and not entry.startswith('!') and fnmatch.fnmatchcase(entry, pattern):
            return True
    return False


def module_stream_reset(current: str | None, wanted: str | None) -> bool:
    """Whether another stream of the nvidia-driver module is enabled than the one wanted (the stream must switch)."""
    return bool(current and wanted and ('nvidia-driver:%s' % current) != wanted)


def module_stream_switch(current: str | None, wanted: str | None) -> list[str] | None:
    """The command that moves an enabled nvidia-driver stream to the wanted one, or None when none is needed.

    NVIDIA's driver installation guide (R580, R590, R595 "Advanced Options", "Switching between Driver Module
    Flavors", RHEL 8/9 and Rocky/Oracle/Alma 8/9): ``dnf -y module switch-to nvidia-driver:<stream> --allowerasing``.
    dnf's ``module switch-to`` resets the module, enables the new stream and distro-syncs the installed packages to
    it, so a LOWER branch's packages replace the installed newer ones (a ``dnf module reset`` followed by ``dnf module
    install`` left the newer packages installed: dnf never downgrades on install) - the same for a higher branch or
    another flavour. --allowerasing lets dnf remove the packages of the old stream that conflict with the new one
    (kmod-nvidia-latest-dkms against kmod-nvidia-open-dkms)."""
    if not module_stream_reset(current, wanted):
        return None
    return ['dnf', '-y', 'module', 'switch-to', str(wanted), '--allowerasing']


def apt_pin_file(branch: str | int | None, version: str | None = '') -> str:
    """The apt preferences that keep NVIDIA's CUDA repository on one driver branch (or version)."""
    pin = ('%s*' % version) if version else ('%s.*' % branch)
    return ('# Managed by gpuops.k8s_gpu.nvidia_driver: the NVIDIA driver stays on branch %s.\n'
            'Package: src:*nvidia*:any src:cuda-drivers*:any\n'
            'Pin: version %s\n'
            'Pin-Priority: 1000\n' % (branch, pin))


def persistenced_dropin(unit_text: str | None, binary: str = '/usr/bin/nvidia-persistenced') -> str | None:
    """A systemd drop-in that runs nvidia-persistenced with persistence mode on, or None when not needed.

    Ubuntu's unit starts the daemon with --no-persistence-mode, so persistence stays off although the daemon
    runs. The drop-in clears ExecStart and sets it again without that flag (and with --persistence-mode),
    keeping the unit's other arguments (its --user).
    """
    exec_start = None
    for line in (unit_text or '').splitlines():
        s = line.strip()
        if s.startswith('ExecStart=') and s != 'ExecStart=':
            exec_start = s[len('ExecStart='):]
    if not exec_start or '--no-persistence-mode' not in exec_start.split():
        return None
    args = [a for a in exec_start.split() if a != '--no-persistence-mode']
    if '--persistence-mode' not in args:
        args.insert(1, '--persistence-mode')
    return ('# Managed by gpuops.k8s_gpu.nvidia_driver: the packaged unit turns persistence mode off.\n'
            '[Service]\nExecStart=\nExecStart=%s\n' % ' '.join(args))


def nvlink5_detected(vpd_texts: Iterable[str | None]) -> bool:
    """NVLink5 system (HGX B200/B300, GB200): an InfiniBand device whose VPD carries SW_MNG (NVIDIA's driver
    container checks /sys/class/infiniband/*/device/vpd the same way). vpd_texts: list of VPD contents."""
    return any('SW_MNG' in (t or '') for t in vpd_texts)


def installed_driver_packages(versions: Mapping[str, str] | None, upstream: str | None) -> list[str]:
    """The installed packages at the driver's upstream version among versions ({name: package version}): what
    is really installed, so it is what gets held (a transitional package pulls another branch's names)."""
    if not upstream:
        return []
    out: list[str] = []
    for name, ver in sorted((versions or {}).items()):
        v = ver.split(':', 1)[1] if ':' in ver else ver
        if v == upstream or v.startswith(upstream + '-') or v.startswith(upstream + '.'):
            out.append(name)
    return out


# Names of the packages that carry the NVIDIA driver's own version (epoch and revision aside), across the
# distributions' and NVIDIA's packaging; used to tell which driver version a node has when the role's names for the
# requested branch are not installed (Ubuntu names its packages after the branch: nvidia-headless-570-server).
_DRIVER_VERSIONED = re.compile(r'^(nvidia-|libnvidia-|libcuda|cuda-drivers|kmod-nvidia|xserver-xorg-video-nvidia|'
                               r'firmware-nvidia)')


def _version_tuple(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r'[0-9]+', v or ''))


def installed_driver_version(versions: Mapping[str, str] | None) -> str | None:
    """The upstream driver version most of the installed NVIDIA driver packages carry ({name: package version}),
    or None. Only versions of a driver branch (three digits, then a dot) count: nvidia-container-toolkit's 1.x and
    the like are never taken for a driver."""
    counts: dict[str, int] = {}
    for name, ver in (versions or {}).items():
        if not _DRIVER_VERSIONED.match(name):
            continue
        v = ver.split(':', 1)[1] if ':' in ver else ver
        m = re.match(r'^([0-9]{3}\.[0-9]+(?:\.[0-9]+)?)', v)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    if not counts:
        return None
    return sorted(counts, key=lambda k: (counts[k], _version_tuple(k)))[-1]


def branch_change(installed_upstream: str | None, branch: str | int | None, version: str | None,
                  installed_versions: Mapping[str, str] | None, selections: Mapping[str, str] | None, family: str | None,
                  versionlock_list: str | None = None) -> dict[str, Any]:
    """What must go before the packages of another driver branch or version are installed.

    installed_upstream: the driver version installed now (installed_driver_version), None on a fresh node.
    branch, version: what the role was asked for. installed_versions: {name: version} of the installed NVIDIA
    packages; selections: dpkg's {name: selection}. family: Debian, Ubuntu or RedHat.
    versionlock_list: /etc/dnf/plugins/versionlock.list (RHEL).

    Returns {'direction': 'fresh'|'none'|'up'|'down', 'from', 'to', 'release_holds' (dpkg holds on the installed
    version's packages: the role's own holds, which apt will not change: Ubuntu's packages of every branch Conflict
    with the virtual names all branches Provide, so installing 580's removes 570's; Debian and NVIDIA's repository
    keep the names and change the version), 'release_versionlocks' (RHEL: the installed version's names, locked at
    that version), 'old_branch_lock' (RHEL 10: '*nvidia*<old branch>*' when the versionlock list holds entries of it),
    'remove_first' (apt: the CUDA repository's pinning package of another branch), 'allow_downgrade',
    'downgrade_specs' (apt, down to nvidia_driver_version: every installed package of the driver's version at the
    requested one, 'name=<version>*': apt takes the newest candidate for a dependency, which an exact
    '(= <version>)' of the packages asked for then cannot meet, so a downgrade names them all)}.
    """
    branch = str(branch or '')
    out: dict[str, Any] = {'direction': 'fresh', 'from': installed_upstream, 'to': version or branch, 'release_holds': [],
                           'release_versionlocks': [], 'old_branch_lock': None, 'remove_first': [], 'allow_downgrade': False,
                           'downgrade_specs': []}
    if not installed_upstream or not branch:
        return out
    old_branch = installed_upstream.split('.')[0]
    if version:
        have, want = _version_tuple(installed_upstream), _version_tuple(version)
    else:
        have, want = (_branch_int(old_branch),), (_branch_int(branch),)
    if have == want:
        out['direction'] = 'none'
        return out
    out['direction'] = 'up' if want > have else 'down'
    out['allow_downgrade'] = out['direction'] == 'down'
    old = installed_driver_packages(installed_versions, installed_upstream)
    out['release_holds'] = [n for n in old if (selections or {}).get(n) == 'hold']
    if out['direction'] == 'down' and version and family != 'RedHat':
        out['downgrade_specs'] = ['%s=%s*' % (n, version) for n in old]
    if family == 'RedHat':
        out['release_versionlocks'] = old
        if old_branch != branch:
            pattern = '*nvidia*%s*' % old_branch
            out['old_branch_lock'] = pattern if versionlock_covers(versionlock_list, pattern) else None
    if old_branch != branch:
        out['remove_first'] = sorted(n for n in (installed_versions or {})
                                     if n.startswith('nvidia-driver-pinning-') and n != 'nvidia-driver-pinning-%s' % branch)
    return out


def runfile_module_flags(branch: str | int | None, flavour: str) -> list[str]:
    """The runfile's kernel module choice: --kernel-module-type from R560, -m=kernel-open / -m=kernel before."""
    if _branch_int(branch) >= 560:
        return ['--kernel-module-type=%s' % flavour]
    return ['-m=kernel-open' if flavour == 'open' else '-m=kernel']


def verify_installed(branch: str | int | None, version: str | None, installed_upstream: str | None) -> tuple[bool, str]:
    """(ok, message): the installed driver belongs to the requested branch (and version)."""
    if not installed_upstream:
        return False, 'no installed NVIDIA driver version could be read'
    inst_branch = installed_upstream.split('.')[0]
    if version and installed_upstream != version:
        return False, ('nvidia_driver_version is %s but %s is installed' % (version, installed_upstream))
    if str(branch) != inst_branch:
        return False, ('nvidia_driver_branch is %s but the packages installed driver %s (branch %s): the '
                       'distribution\'s %s packages are transitional to another branch; choose '
                       'nvidia_driver_branch "%s" or the cuda_repo method'
                       % (branch, installed_upstream, inst_branch, branch, inst_branch))
    return True, 'driver %s matches branch %s' % (installed_upstream, branch)


def select(params: Mapping[str, Any], obs: Mapping[str, Any], today: datetime.date | None = None) -> dict[str, Any]:
    """Everything the role needs to know before it changes anything, or SelectionError.

    params: branch, version, kernel_module_type, accept_eol_branch, method, precompiled (auto|true|false),
    fabricmanager (auto|always|never), secure_boot_mok_enrolled (bool).
    obs: family, major, kernel_release, machine, gpu_pci_ids (list), secure_boot ('enabled'...), nvlink5 (bool),
    kernel_image_depends ({installed linux-image-* package: [its dependencies]}, parse_dpkg_depends).
    """
    today = today or datetime.date.today()
    check_os(obs.get('family'), obs.get('major'))
    branch = str(params.get('branch') or DEFAULT_BRANCH)
    status = check_branch(branch, params.get('accept_eol_branch'), today)
    version = params.get('version') or ''
    if version and version.split('.')[0] != branch:
        raise SelectionError('nvidia_driver_version %s is not in nvidia_driver_branch %s' % (version, branch))
    method = params.get('method') or 'distro'
    if method not in METHODS:
        raise SelectionError('nvidia_driver_method must be one of %s, got %r' % (', '.join(METHODS), method))
    archs = [architecture_from_pci_id(i) for i in (obs.get('gpu_pci_ids') or [])]
    flavour, reason = decide_flavour(params.get('kernel_module_type') or 'auto', branch, archs)
    if obs.get('family') == 'Debian' and method == 'distro' and flavour == 'open' and _branch_int(branch) < 530:
        raise SelectionError('Debian\'s open kernel module package needs branch 530 or newer')
    pre = params.get('precompiled')
    pre = 'auto' if pre is None else pre
    if pre in (True, 'true', 'yes'):
        precompiled = True
        pre_reason = 'nvidia_driver_ubuntu_precompiled is true'
    elif pre in (False, 'false', 'no'):
        precompiled = False
        pre_reason = 'nvidia_driver_ubuntu_precompiled is false'
    else:
        precompiled = obs.get('secure_boot') == 'enabled'
        pre_reason = ('Secure Boot is on: Canonical\'s signed precompiled modules' if precompiled
                      else 'Secure Boot is off: dkms')
    if obs.get('family') != 'Ubuntu' or method != 'distro':
        precompiled, pre_reason = False, 'precompiled modules only with Ubuntu\'s packages (method distro)'
    kernel_flavour = (ubuntu_kernel_flavour(obs.get('kernel_image_depends'), obs.get('kernel_release'))
                      if precompiled else None)
    plan = package_plan(obs.get('family'), obs.get('major'), method, branch, flavour, precompiled,
                        obs.get('kernel_release') or '', obs.get('machine') or 'x86_64', kernel_flavour)
    plan['nvlink5']['wanted'] = nvlink5_wanted(obs.get('nvlink5'), params.get('fabricmanager') or 'auto')
    # kernel modules NVIDIA's driver container waits for before it starts fabric manager on an NVLink5 system
    # (ubuntu24.04/precompiled/nvidia-driver _ensure_nvlink5_prerequisites: mlx5_core, which the ConnectX devices
    # load by their PCI ids, and ib_umad, which nothing loads by itself): loaded and kept in modules-load.d
    plan['nvlink5']['kernel_modules'] = list(NVLINK5_KERNEL_MODULES) if plan['nvlink5']['wanted'] else []
    refusal = (secure_boot_refusal(obs.get('family'), method, precompiled, obs.get('secure_boot'),
                                   params.get('secure_boot_mok_enrolled') in (True, 'true', 'yes'))
               or nvlink5_refusal(obs.get('family'), method, branch, obs.get('machine') or 'x86_64',
                                  plan['nvlink5']['wanted']))
    return {
        'branch': status,
        'flavour': {'requested': params.get('kernel_module_type') or 'auto', 'effective': flavour, 'reason': reason,
                    'architectures': sorted(set(archs))},
        # kernel_flavour: the flavour metapackage's suffix whose linux-modules-nvidia-* metapackage is installed
        # too (None: none found, only the running kernel's packages)
        'precompiled': {'effective': precompiled, 'reason': pre_reason, 'kernel_flavour': kernel_flavour},
        'packages': plan,
        # why the role must not install on this node (asserted by the role unless it removes the driver), or None
        'refusal': refusal,
        'apt_pin_file': apt_pin_file(branch, version) if plan.get('apt_pin_branch') else None,
        'runfile_flags': runfile_module_flags(branch, flavour) if method == 'runfile' else [],
        'dnf_module_current': obs.get('dnf_module_current'),
        'dnf_module_reset': module_stream_reset(obs.get('dnf_module_current'), plan.get('dnf_module_stream')),
        # NVIDIA's way to move an enabled stream, up, DOWN or to the other flavour (argv), or None
        'dnf_module_switch': module_stream_switch(obs.get('dnf_module_current'), plan.get('dnf_module_stream')),
        # the branch lock that goes in before the driver: apt (pinning package + apt preferences) or dnf versionlock
        'branch_lock': plan['branch_lock'],
        'branch_lock_present': (versionlock_covers(obs.get('versionlock_list'), plan['versionlock_pattern'])
                                if plan['branch_lock'] and plan['branch_lock']['kind'] == 'dnf_versionlock' else None),
    }
