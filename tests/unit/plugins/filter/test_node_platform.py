# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter node_platform (controller side): the family, package manager and per-family vars files it computes from
ansible_facts, and the role default that still names a family, rendered with Ansible's templating against the one
table (module_utils/_common/platforms.py; tests/unit/plugins/module_utils/_common/test_platforms.py has the rest)."""
import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.gpuops.k8s_gpu.plugins.filter.node_platform import FilterModule
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import platforms as P

try:   # ansible-core 2.19+: only trusted strings are templated
    from ansible.template import trust_as_template
except ImportError:   # older ansible-core: every string is a template
    def trust_as_template(value):
        return value

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
FACTS = {
    'Debian': {'distribution': 'Debian', 'os_family': 'Debian', 'distribution_major_version': '12'},
    'Ubuntu': {'distribution': 'Ubuntu', 'os_family': 'Debian', 'distribution_major_version': '24'},
    'RedHat': {'distribution': 'Rocky', 'os_family': 'RedHat', 'distribution_major_version': '9'},
}


def _yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize('facts, family, pkg_mgr, supported, files', [
    (FACTS['Ubuntu'], 'Ubuntu', 'apt', True, ['Ubuntu_24.yml', 'Ubuntu.yml', 'Debian.yml', 'default.yml']),
    (FACTS['Debian'], 'Debian', 'apt', True, ['Debian_12.yml', 'Debian.yml', 'default.yml']),
    (FACTS['RedHat'], 'RedHat', 'dnf', True, ['RedHat_9.yml', 'RedHat.yml', 'default.yml']),
    ({'distribution': 'Linuxmint', 'os_family': 'Debian'}, 'Debian', 'apt', True, ['Debian.yml', 'default.yml']),
    ({'distribution': 'openSUSE Leap', 'os_family': 'Suse', 'distribution_major_version': '15'}, 'Suse', '', False,
     ['Suse_15.yml', 'Suse.yml', 'default.yml']),
    ({}, '', '', False, ['default.yml']),
    (None, '', '', False, ['default.yml']),
])
def test_node_platform_filter(facts, family, pkg_mgr, supported, files):
    got = FilterModule().filters()['node_platform'](facts)
    assert got == {'family': family, 'os_family': (facts or {}).get('os_family', ''), 'pkg_mgr': pkg_mgr,
                   'supported': supported, 'supported_families': list(P.SUPPORTED_FAMILIES), 'vars_files': files}


@pytest.mark.parametrize('fam', sorted(FACTS))
def test_cuda_repo_key_default_is_the_tables(fam):
    expr = _yaml(os.path.join(ROOT, 'roles', 'nvidia_driver', 'defaults', 'main.yml'))['nvidia_driver_cuda_repo_key_url']
    variables = {'nvidia_driver_cuda_repo_url': 'https://x/', 'ansible_facts': FACTS[fam]}
    got = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))
    assert got == 'https://x/' + P.CUDA_REPO_KEY[P.pkg_mgr(FACTS[fam])]
