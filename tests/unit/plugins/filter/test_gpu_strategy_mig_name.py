# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpu_strategy hands the mig-parted config name (gpu_strategy.mig_config_name) to role gpu_node_sharing."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter.gpu_strategy import gpu_strategy


def test_mig_config_name_from_the_devices_or_the_site():
    assert gpu_strategy('mig', mig_devices={'1g.10gb': 7}, mig_config_name='')['mig_config_name'] == 'gpuops-1g-10gb-7'
    assert gpu_strategy('mig', mig_devices={'1g.10gb': 7}, mig_config_name='site')['mig_config_name'] == 'site'
    # what the role passes for a pool of another strategy (no devices): the name is not used, but must not fail
    assert gpu_strategy('exclusive', mig_devices={}, mig_config_name='')['mig_config_name'] == 'gpuops-'
    assert 'mig_config_name' not in gpu_strategy('mig')


def test_mig_devices_must_be_a_mapping():
    with pytest.raises(AnsibleFilterError, match='mig_devices must be a mapping'):
        gpu_strategy('mig', mig_devices=['1g.10gb'])
