# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the NVIDIA Container Toolkit comes from and which package specs install it, for apt (Debian/Ubuntu) and
dnf (RHEL/Rocky 8, 9, 10). Pure functions; docs/conformance/nvidia-container-toolkit.md (NCT-06..NCT-09).

NVIDIA's repository (nvidia.github.io/libnvidia-container, or a mirror of it) has one tree per package format:
  <base>/libnvidia-container/stable/deb/<dpkg arch>/   flat apt repository (suite "/"), Release signed
  <base>/libnvidia-container/stable/rpm/<rpm arch>/    yum/dnf repository, repodata signed and every RPM signed
  <base>/libnvidia-container/gpgkey                    the one key for both
The four packages carry the same version; the Debian revision and the RPM release are both "1" (versions.mk
PACKAGE_REVISION), so one pin "1.20.0-1" names the same release in both formats: apt spells it name=1.20.0-1,
dnf name-1.20.0-1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import pins, platforms

# The newest toolkit release whose sources were read (NVIDIA/nvidia-container-toolkit tag v1.20.0).
DEFAULT_VERSION = pins.ref('nvidia-container-toolkit')
PACKAGES = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools',
            'libnvidia-container1')
APT_ARCH = {'x86_64': 'amd64', 'amd64': 'amd64', 'aarch64': 'arm64', 'arm64': 'arm64'}
RPM_ARCH = {'x86_64': 'x86_64', 'amd64': 'x86_64', 'aarch64': 'aarch64', 'arm64': 'aarch64'}
# RHEL-family major releases still supported by their vendors in late 2026 (7 ended in 2024): _common/platforms.py
RPM_MAJORS = platforms.RPM_MAJORS
_VERSION_RE = re.compile(r'^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.+~]+)?$')
_PKG_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9+._-]*$')


class ToolkitRepoError(Exception):
    """Bad input; the message names the variable, its value and what is allowed."""


def package_family(os_family, major=None):
    # type: (str, object) -> str
    """'apt' for Debian/Ubuntu, 'rpm' for RHEL/Rocky/Alma 8-10; anything else is refused."""
    if platforms.OS_FAMILY_PKG_MGR.get(os_family) == 'apt':
        return 'apt'
    if platforms.OS_FAMILY_PKG_MGR.get(os_family) == 'dnf':
        if major is not None and str(major) not in RPM_MAJORS:
            raise ToolkitRepoError(
                'ansible_facts.distribution_major_version is %r; the toolkit RPM path supports RHEL-family %s '
                '(older releases are end of life)' % (str(major), ', '.join(RPM_MAJORS)))
        return 'rpm'
    raise ToolkitRepoError('ansible_facts.os_family is %r; the toolkit install supports Debian (apt) and RedHat '
                           '(dnf, RHEL/Rocky %s); set nvidia_container_runtime_install=false and install it yourself'
                           % (os_family, ', '.join(RPM_MAJORS)))


def repo_arch(family, machine):
    # type: (str, str) -> str
    table = APT_ARCH if family == 'apt' else RPM_ARCH
    if machine not in table:
        raise ToolkitRepoError('ansible_facts.architecture is %r; NVIDIA publishes the toolkit for %s'
                               % (machine, ', '.join(sorted(set(table.values())))))
    return table[machine]


def check_version(version):
    # type: (object) -> str
    """'' (the newest in the repository) or a full version such as 1.20.0-1."""
    if version in (None, ''):
        return ''
    if not _VERSION_RE.match(str(version)):
        raise ToolkitRepoError('nvidia_container_runtime_version is %r; it must be empty or a package version such as '
                               '%s (upstream version and revision/release)' % (version, DEFAULT_VERSION))
    return str(version)


def package_specs(family, packages, version):
    # type: (str, list[str], object) -> list[str]
    """Every package pinned to VERSION in the package manager's spelling; unpinned names when VERSION is empty."""
    version = check_version(version)
    if not packages:
        raise ToolkitRepoError('nvidia_container_runtime_packages is empty; it must name the toolkit packages '
                               '(default %s)' % ', '.join(PACKAGES))
    for name in packages:
        if not _PKG_RE.match(name or '') or '=' in name:
            raise ToolkitRepoError('nvidia_container_runtime_packages: %r is not a plain package name (give the version '
                                   'in nvidia_container_runtime_version)' % (name,))
    if not version:
        return list(packages)
    sep = '=' if family == 'apt' else '-'
    return ['%s%s%s' % (name, sep, version) for name in packages]


def repo_urls(family, base_url, machine):
    # type: (str, str, str) -> dict[str, str]
    """The repository URL for the node's package format and architecture, and the signing key's URL."""
    base = (base_url or '').strip().rstrip('/')
    if not re.match(r'^(https?|file)://\S+$', base):
        raise ToolkitRepoError('nvidia_container_runtime_repo_base_url is %r; it must be an http(s) or file URL '
                               '(set gpuops_mirror.apt for a mirror)' % (base_url,))
    arch = repo_arch(family, machine)
    return {'repo_url': '%s/libnvidia-container/stable/%s/%s' % (base, 'deb' if family == 'apt' else 'rpm', arch),
            'key_url': '%s/libnvidia-container/gpgkey' % base}


def install_plan(os_family, major, machine, base_url, version, packages, repo_url='', key_url=''):
    # type: (str, object, str, str, object, list[str], str, str) -> dict
    """Everything the role's install step needs: family, repo_url, key_url, package specs, and for dnf the
    yum_repository settings (signed metadata and signed packages). Every broken rule is listed in 'errors'."""
    errors = []

    def attempt(func: Callable[..., Any], *args: Any) -> Any:
        try:
            return func(*args)
        except ToolkitRepoError as exc:
            errors.append(str(exc) + '.')
            return None

    family = attempt(package_family, os_family, major)
    urls = attempt(repo_urls, family or 'apt', base_url, machine) or {}
    for name, value in (('nvidia_container_runtime_repo_url', repo_url), ('nvidia_container_runtime_repo_key_url', key_url)):
        if value and not re.match(r'^(https?|file)://\S+$', value.strip()):
            errors.append('%s is %r; it must be an http(s) or file URL (or empty: derived from '
                          'nvidia_container_runtime_repo_base_url).' % (name, value))
    specs = attempt(package_specs, family or 'apt', packages, version)
    if errors:
        return {'family': family or '', 'repo_url': '', 'key_url': '', 'packages': [], 'version': '', 'errors': errors}
    plan = {'family': family,
            'repo_url': (repo_url or '').strip() or urls['repo_url'],
            'key_url': (key_url or '').strip() or urls['key_url'],
            'packages': specs,
            'version': check_version(version),
            'errors': []}
    if family == 'rpm':
        # upstream's .repo turns gpgcheck off; NVIDIA signs every RPM (rpmsign) with the same key, so both checks on
        plan['yum_repository'] = {'name': 'nvidia-container-toolkit', 'description': 'nvidia-container-toolkit',
                                  'baseurl': plan['repo_url'], 'gpgkey': plan['key_url'], 'gpgcheck': True,
                                  'repo_gpgcheck': True, 'enabled': True}
    return plan
