# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Linux distributions the node roles install on, defined once: each family, its package manager and the
releases the collection supports.

Plain Python (no Ansible imports, no other module_utils). The roles read it through the filter
``gpuops.k8s_gpu.node_platform`` (the family, the package manager and the per-family vars files to load, computed
once from ``ansible_facts``); ``nvidia_driver_select`` and ``runtime_toolkit_repo`` import it; the role metadata
``platforms`` is compared with ``galaxy_platforms()`` by tests/unit/plugins/module_utils/_common/test_platforms.py.
Adding a distribution: docs/extending.md, "A new Linux distribution".
"""

# family -> facts. The family is ansible_facts.distribution for Ubuntu (its driver packages differ from Debian's)
# and ansible_facts.os_family otherwise. pkg_mgr names the task files a role dispatches to (install-<pkg_mgr>.yml);
# galaxy and versions are the role metadata's platforms entry. Release floors: the node-side modules need Python
# 3.10 (tests/config.yml: Debian 12, Ubuntu 22.04); RHEL 7 is past its end of maintenance (nvidia_driver_select,
# runtime_toolkit_repo refuse it).
# initramfs_command rebuilds every kernel's initramfs (the nouveau blacklist must reach it: nvidia_driver's handler).
_UPDATE_INITRAMFS = ('update-initramfs', '-u', '-k', 'all')
FAMILIES = {
    'Debian': {'os_family': 'Debian', 'pkg_mgr': 'apt', 'galaxy': 'Debian', 'versions': ('bookworm',),
               'initramfs_command': _UPDATE_INITRAMFS},
    'Ubuntu': {'os_family': 'Debian', 'pkg_mgr': 'apt', 'galaxy': 'Ubuntu', 'versions': ('jammy', 'noble'),
               'initramfs_command': _UPDATE_INITRAMFS},
    'RedHat': {'os_family': 'RedHat', 'pkg_mgr': 'dnf', 'galaxy': 'EL', 'versions': ('8', '9', '10'),
               'initramfs_command': ('dracut', '-f', '--regenerate-all')},
}  # type: dict[str, dict]
SUPPORTED_FAMILIES = ('Debian', 'Ubuntu', 'RedHat')
# the package managers the roles have task files for, from the os_family of a family the table does not name
# (a Debian or RHEL derivative: apt or dnf as its parent)
OS_FAMILY_PKG_MGR = {'Debian': 'apt', 'RedHat': 'dnf'}
# RHEL-family majors (the RPM paths of the driver and the toolkit)
RPM_MAJORS = FAMILIES['RedHat']['versions']
# NVIDIA's CUDA repository signing key file per package manager (docs/conformance/nvidia-driver.md; role default
# nvidia_driver_cuda_repo_key_url states it and test_platforms.py compares it)
CUDA_REPO_KEY = {'apt': '3bf863cc.pub', 'dnf': 'D42D0685.pub'}


def family(facts):
    # type: (dict) -> str
    """The family of a node from its ansible_facts ('' without facts)."""
    facts = facts or {}
    if facts.get('distribution') == 'Ubuntu':
        return 'Ubuntu'
    return str(facts.get('os_family') or '')


def pkg_mgr(facts):
    # type: (dict) -> str
    """apt or dnf; '' for a family the roles have no package tasks for."""
    fam = family(facts)
    if fam in FAMILIES:
        return FAMILIES[fam]['pkg_mgr']
    return OS_FAMILY_PKG_MGR.get(str((facts or {}).get('os_family') or ''), '')


def vars_files(facts):
    # type: (dict) -> list
    """The per-family vars files a role loads with first_found, most specific first (devsec.hardening's order):
    <family>_<major>.yml, <family>.yml, <os_family>.yml, default.yml."""
    facts = facts or {}
    fam, os_fam = family(facts), str(facts.get('os_family') or '')
    major = str(facts.get('distribution_major_version') or '')
    names = []
    for name in ([fam + '_' + major] if fam and major else []) + [fam, os_fam]:
        if name and name + '.yml' not in names:
            names.append(name + '.yml')
    return names + ['default.yml']


def node_platform(facts):
    # type: (dict) -> dict
    """What a role needs to know about the node's distribution, computed once."""
    fam = family(facts)
    return {'family': fam, 'os_family': str((facts or {}).get('os_family') or ''), 'pkg_mgr': pkg_mgr(facts),
            'supported': fam in SUPPORTED_FAMILIES, 'supported_families': list(SUPPORTED_FAMILIES),
            'vars_files': vars_files(facts)}


def initramfs_command(family_name):
    # type: (str) -> list
    """The command that rebuilds the initramfs on a family (update-initramfs for a family the table does not name)."""
    return list((FAMILIES.get(family_name) or FAMILIES['Debian'])['initramfs_command'])


def galaxy_platforms():
    # type: () -> list
    """The role metadata platforms (meta/main.yml galaxy_info.platforms) of a role that installs on the node."""
    return [{'name': FAMILIES[f]['galaxy'], 'versions': list(FAMILIES[f]['versions'])} for f in SUPPORTED_FAMILIES]
