# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""runtime_toolkit_repo and the toolkit_install_plan filter: where the NVIDIA Container Toolkit comes from (apt or
dnf), pinned packages, signed repositories; and the role's RPM tasks use the plan
(docs/conformance/nvidia-container-toolkit.md NCT-06..NCT-09). No RHEL-family node exists here: the dnf tasks are
checked by their plan and their task file, not run."""
import os

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import runtime_toolkit_repo as r
from ansible_collections.gpuops.k8s_gpu.plugins.filter.toolkit_install_plan import FilterModule

ROLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), '..', '..', '..', '..', 'roles', 'nvidia_container_runtime')
PKGS = list(r.PACKAGES)
RHEL9 = {'os_family': 'RedHat', 'distribution_major_version': '9', 'architecture': 'x86_64'}
plan_filter = FilterModule().filters()['toolkit_install_plan']


def load(*path):
    with open(os.path.join(ROLE, *path)) as f:
        return yaml.safe_load(f)


def test_NCT_06_rpm_repository_layout_and_signed_repo_file():
    plan = plan_filter(RHEL9, 'https://nvidia.github.io', '1.20.0-1', PKGS)
    assert plan['errors'] == [] and plan['family'] == 'rpm'
    # upstream stable/rpm/nvidia-container-toolkit.repo: baseurl .../stable/rpm/$basearch, gpgkey .../gpgkey
    assert plan['repo_url'] == 'https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64'
    assert plan['yum_repository'] == {
        'name': 'nvidia-container-toolkit', 'description': 'nvidia-container-toolkit',
        'baseurl': 'https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64',
        'gpgkey': 'https://nvidia.github.io/libnvidia-container/gpgkey',
        'gpgcheck': True, 'repo_gpgcheck': True, 'enabled': True}
    # the mirror setting (gpuops_mirror.apt feeds the base URL) and aarch64
    plan = plan_filter(dict(RHEL9, architecture='aarch64'), 'http://mirror.local/nv/', '', PKGS)
    assert plan['repo_url'] == 'http://mirror.local/nv/libnvidia-container/stable/rpm/aarch64'
    assert plan['key_url'] == 'http://mirror.local/nv/libnvidia-container/gpgkey'
    # an explicit repository URL wins; Debian keeps the apt layout the role used before
    plan = plan_filter(RHEL9, 'https://nvidia.github.io', '', PKGS, 'https://repo.site/ctk', '')
    assert plan['yum_repository']['baseurl'] == 'https://repo.site/ctk'
    deb = plan_filter({'os_family': 'Debian', 'architecture': 'aarch64'}, 'https://nvidia.github.io', '', PKGS)
    assert deb['family'] == 'apt' and 'yum_repository' not in deb
    assert deb['repo_url'] == 'https://nvidia.github.io/libnvidia-container/stable/deb/arm64'


def test_NCT_07_one_pin_both_spellings_all_four_packages():
    rpm = plan_filter(RHEL9, 'https://nvidia.github.io', '1.20.0-1', PKGS)
    assert rpm['packages'] == ['nvidia-container-toolkit-1.20.0-1', 'nvidia-container-toolkit-base-1.20.0-1',
                               'libnvidia-container-tools-1.20.0-1', 'libnvidia-container1-1.20.0-1']
    deb = plan_filter({'os_family': 'Debian', 'architecture': 'x86_64'}, 'https://nvidia.github.io', '1.20.0-1', PKGS)
    assert deb['packages'] == ['nvidia-container-toolkit=1.20.0-1', 'nvidia-container-toolkit-base=1.20.0-1',
                               'libnvidia-container-tools=1.20.0-1', 'libnvidia-container1=1.20.0-1']
    assert r.package_specs('rpm', PKGS, '') == PKGS       # empty: the newest
    for bad in ('1.20', 'latest', '1.20.0 -1'):
        with pytest.raises(r.ToolkitRepoError, match='nvidia_container_runtime_version is'):
            r.package_specs('rpm', PKGS, bad)
    with pytest.raises(r.ToolkitRepoError, match='not a plain package name'):
        r.package_specs('apt', ['nvidia-container-toolkit=1.20.0-1'], '1.20.0-1')


def test_NCT_08_supported_systems_and_refusals_name_the_value():
    for major in ('8', '9', '10'):
        assert plan_filter(dict(RHEL9, distribution_major_version=major), 'https://x', '', PKGS)['family'] == 'rpm'
    plan = plan_filter(dict(RHEL9, distribution_major_version='7'), 'https://x', '', PKGS)
    assert plan['packages'] == [] and "distribution_major_version is '7'" in plan['errors'][0]
    assert 'end of life' in plan['errors'][0]
    plan = plan_filter({'os_family': 'Suse', 'architecture': 'x86_64'}, 'https://x', '', PKGS)
    assert "os_family is 'Suse'" in plan['errors'][0] and 'nvidia_container_runtime_install=false' in plan['errors'][0]
    plan = plan_filter(dict(RHEL9, architecture='ppc64le'), 'https://x', '', PKGS)
    assert "architecture is 'ppc64le'" in plan['errors'][0]
    # every broken rule is listed, not only the first
    plan = plan_filter({}, 'mirror.local', 'x', PKGS, 'ftp://a', '')
    assert len(plan['errors']) == 4, plan['errors']
    assert "os_family is 'unknown'" in plan['errors'][0]
    assert "nvidia_container_runtime_repo_base_url is 'mirror.local'" in plan['errors'][1]
    assert "nvidia_container_runtime_repo_url is 'ftp://a'" in plan['errors'][2]


def test_NCT_09_default_pin_and_role_rpm_tasks_use_the_plan():
    defaults = load('defaults', 'main.yml')
    assert defaults['nvidia_container_runtime_version'] == r.DEFAULT_VERSION == '1.20.0-1'
    specs = load('meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert specs['nvidia_container_runtime_version']['default'] == r.DEFAULT_VERSION
    assert defaults['nvidia_container_runtime_packages'] == PKGS
    tasks = load('tasks', 'install.yml')
    rpm = [t for t in tasks if t.get('when') == "nvidia_container_runtime__plan.family == 'rpm'"]
    assert len(rpm) == 1
    mods = [next(k for k in t if k.startswith('ansible.builtin.')) for t in rpm[0]['block']]
    assert mods == ['ansible.builtin.yum_repository', 'ansible.builtin.dnf']   # no shell, no command
    repo = rpm[0]['block'][0]['ansible.builtin.yum_repository']
    for key in ('baseurl', 'gpgkey', 'gpgcheck', 'repo_gpgcheck', 'enabled', 'name'):
        assert repo[key] == '{{ nvidia_container_runtime__plan.yum_repository.%s }}' % key
    dnf = rpm[0]['block'][1]['ansible.builtin.dnf']
    assert dnf['name'] == '{{ nvidia_container_runtime__package_specs }}' and dnf['state'] == 'present'
    assert 'toolkit_install_plan' in load('vars', 'main.yml')['nvidia_container_runtime__plan']
