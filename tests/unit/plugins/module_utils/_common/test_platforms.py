# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""platforms: the one list of Linux distribution families. The roles dispatch their package tasks by the package
manager it computes, load per-family vars files, and state the platforms it names in their metadata."""
import glob
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import platforms as P
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver_select
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import runtime_toolkit_repo

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))
FACTS = {
    'Debian': {'distribution': 'Debian', 'os_family': 'Debian', 'distribution_major_version': '12'},
    'Ubuntu': {'distribution': 'Ubuntu', 'os_family': 'Debian', 'distribution_major_version': '24'},
    'RedHat': {'distribution': 'Rocky', 'os_family': 'RedHat', 'distribution_major_version': '9'},
}
# roles whose tasks are the same on every Linux (Kubernetes API, vCenter, AWX): GenericLinux
GENERIC_ROLES = ('awx_config', 'esxi_gpu_passthrough', 'gpu_sharing_stack')
# the per-family vars files a role loads, and the package-manager task files a role dispatches to
VARS_ROLES = {'nvidia_driver': False, 'gpu_probe': True}   # role -> has vars/default.yml (runs on any family)
DISPATCH = {'nvidia_driver': ('install-%s.yml', 'repositories-%s.yml'),
            'nvidia_container_runtime': ('repository-absent-%s.yml',)}


def _yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def _roles():
    return sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
                  for p in glob.glob(os.path.join(ROOT, 'roles', '*', 'meta', 'main.yml')))


def test_one_list_of_families():
    assert set(P.SUPPORTED_FAMILIES) == set(P.FAMILIES)
    assert nvidia_driver_select.SUPPORTED_FAMILIES is P.SUPPORTED_FAMILIES
    assert runtime_toolkit_repo.RPM_MAJORS == P.FAMILIES['RedHat']['versions']
    assert set(f['pkg_mgr'] for f in P.FAMILIES.values()) == set(P.OS_FAMILY_PKG_MGR.values()) == set(P.CUDA_REPO_KEY)
    for fam, facts in FACTS.items():
        assert P.family(facts) == fam
        assert runtime_toolkit_repo.package_family(facts['os_family'], facts['distribution_major_version']) == (
            'apt' if P.pkg_mgr(facts) == 'apt' else 'rpm')


@pytest.mark.parametrize('role', _roles())
def test_role_metadata_platforms_are_what_the_code_supports(role):
    platforms = _yaml(os.path.join(ROOT, 'roles', role, 'meta', 'main.yml'))['galaxy_info']['platforms']
    if role in GENERIC_ROLES:
        assert platforms == [{'name': 'GenericLinux', 'versions': ['all']}], role
    else:
        assert platforms == P.galaxy_platforms(), (role, platforms)
    spec = _yaml(os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml'))
    assert 'platforms' not in str(spec), 'argument_specs of %s states platforms: compare them here' % role


@pytest.mark.parametrize('role', sorted(VARS_ROLES))
def test_per_family_vars_files_resolve_for_every_supported_family(role):
    vars_dir = os.path.join(ROOT, 'roles', role, 'vars')
    keys = None
    for fam, facts in FACTS.items():
        found = [f for f in P.vars_files(facts) if os.path.isfile(os.path.join(vars_dir, f))]
        assert found, (role, fam)
        got = set(_yaml(os.path.join(vars_dir, found[0])))
        assert keys is None or got == keys, (role, fam, got ^ keys)   # every family file sets the same variables
        keys = got
    assert os.path.isfile(os.path.join(vars_dir, 'default.yml')) == VARS_ROLES[role]
    # every file the role has is one a family resolves to
    names = set(os.listdir(vars_dir)) - {'main.yml'}
    reachable = set(f for facts in FACTS.values() for f in P.vars_files(facts))
    assert names <= reachable, names - reachable


@pytest.mark.parametrize('role', sorted(DISPATCH))
def test_package_tasks_exist_for_every_package_manager(role):
    pkg_mgrs = sorted(set(f['pkg_mgr'] for f in P.FAMILIES.values()))
    for pattern in DISPATCH[role]:
        for pm in pkg_mgrs:
            assert os.path.isfile(os.path.join(ROOT, 'roles', role, 'tasks', pattern % pm)), (role, pattern % pm)


# what still names a distribution family inside a role (not dispatch): the default that a user overrides (rendered
# against CUDA_REPO_KEY by tests/unit/plugins/filter/test_node_platform.py, where Ansible's templating is there)
FAMILY_TEST = re.compile(r"os_family'\]( \| default\('[^']*'\))? (==|!=)|__family (==|!=|in \[)")
ALLOWED = {('nvidia_driver/defaults/main.yml', 'nvidia_driver_cuda_repo_key_url')}


def test_no_inline_distribution_conditions_in_the_roles():
    found = set()
    for path in glob.glob(os.path.join(ROOT, 'roles', '*', '*', '*.yml')):
        rel = os.path.relpath(path, os.path.join(ROOT, 'roles'))
        with open(path) as f:
            for line in f:
                if FAMILY_TEST.search(line) and not line.lstrip().startswith('#'):
                    found.add((rel, line.split(':')[0].strip()))
    assert found == ALLOWED, found - ALLOWED
