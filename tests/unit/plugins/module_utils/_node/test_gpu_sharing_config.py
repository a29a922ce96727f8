# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig-parted configuration parsing and GPU selection."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import (
    SharingError, assign_entries, normalize_profile_name, parse_mig_config, select_gpus)

GPUS = [{'index': i, 'uuid': 'GPU-%d' % i, 'pci_device_id': 0x20B210DE} for i in range(4)]


def cfg(entries, name='c'):
    return {'version': 'v1', 'mig-configs': {name: entries}}


def test_parse_full_entry():
    entries = parse_mig_config(cfg([{'devices': [0, 1], 'device-filter': ['0x20B210DE', '0x20B2'],
                                     'mig-enabled': True, 'mig-devices': {'MIG 1g.10gb': 2, '3g.40gb': 1, '2g.20gb': 0}}]), 'c')
    assert entries == [{'where': "mig_config 'c' entry 0", 'devices': [0, 1],
                        'device_filter': [(0x20B210DE, True), (0x20B2, False)], 'mig_enabled': True,
                        'mig_devices': {'1g.10gb': 2, '3g.40gb': 1}}]


def test_single_config_needs_no_name_and_devices_all():
    entries = parse_mig_config(cfg([{'devices': 'all', 'mig-enabled': False}], name='only'), None)
    assert entries[0]['devices'] == 'all' and entries[0]['mig_devices'] == {}


def test_normalize_profile_name():
    assert normalize_profile_name('MIG 1g.10gb+me') == '1g.10gb+me'
    assert normalize_profile_name(' 3G.40GB ') == '3g.40gb'


@pytest.mark.parametrize('config,name,needles', [
    ('not a dict', 'c', ['mapping', 'str']),
    ({'version': 'v2', 'mig-configs': {'c': []}}, 'c', ["'v2'", "'v1'"]),
    ({'version': 'v1'}, 'c', ['mig-configs']),
    ({'version': 'v1', 'mig-configs': {'c': []}, 'extra': 1}, 'c', ['extra']),
    (cfg([{'devices': 'all', 'mig-enabled': True}]), 'nope', ["'nope'", 'available: c']),
    ({'version': 'v1', 'mig-configs': {'a': [], 'b': []}}, None, ['mig_config_name is required', 'a, b']),
    (cfg([]), 'c', ['non-empty list']),
    (cfg(['x']), 'c', ['entry 0', 'mapping']),
    (cfg([{'devices': 'all'}]), 'c', ["'mig-enabled' is required"]),
    (cfg([{'devices': 'all', 'mig-enabled': 'maybe'}]), 'c', ["'maybe'", 'true or false']),
    (cfg([{'mig-enabled': True}]), 'c', ["'devices' is required"]),
    (cfg([{'devices': 'some', 'mig-enabled': True}]), 'c', ["'some'", "'all'"]),
    (cfg([{'devices': [-1], 'mig-enabled': True}]), 'c', ['-1', '>= 0']),
    (cfg([{'devices': ['x'], 'mig-enabled': True}]), 'c', ["'x'", 'GPU index']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'typo': 1}]), 'c', ['typo', 'mig-devices']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': ['1g.10gb']}]), 'c', ['mapping of MIG profile']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 'seven'}}]), 'c', ["'seven'", "'1g.10gb'", 'integer']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': -1}}]), 'c', ['-1', 'integer >= 0']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': True}}]), 'c', ['True']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'big': 1}}]), 'c', ["'big' is not a MIG profile name"]),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1c.3g.40gb': 1}}]), 'c', ['compute-instance profile']),
    (cfg([{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1, 'MIG 1g.10gb': 1}}]), 'c', ['twice']),
    (cfg([{'devices': 'all', 'mig-enabled': False, 'mig-devices': {'1g.10gb': 1}}]), 'c', ['mig-enabled false']),
    (cfg([{'devices': 'all', 'device-filter': 'zz', 'mig-enabled': True}]), 'c', ["'zz'", '0x20B210DE']),
])
def test_malformed_configs_are_refused(config, name, needles):
    with pytest.raises(SharingError) as err:
        parse_mig_config(config, name)
    for needle in needles:
        assert needle in str(err.value)


def test_assign_out_of_range_names_index_and_range():
    entries = parse_mig_config(cfg([{'devices': [1, 7], 'mig-enabled': True}]), 'c')
    with pytest.raises(SharingError) as err:
        assign_entries(entries, GPUS)
    assert 'GPU index 7 is out of range' in str(err.value) and 'indexes 0-3' in str(err.value)


def test_assign_overlap_refused():
    entries = parse_mig_config(cfg([{'devices': 'all', 'mig-enabled': True}, {'devices': [2], 'mig-enabled': False}]), 'c')
    with pytest.raises(SharingError) as err:
        assign_entries(entries, GPUS)
    assert 'GPU 2 is also selected by' in str(err.value)


def test_assign_device_filter():
    gpus = GPUS[:2] + [{'index': 2, 'uuid': 'GPU-2', 'pci_device_id': 0x1EB810DE}]
    entries = parse_mig_config(cfg([{'devices': 'all', 'device-filter': '0x20B2', 'mig-enabled': True},
                                    {'devices': 'all', 'device-filter': ['0x1EB810DE'], 'mig-enabled': False}]), 'c')
    got = assign_entries(entries, gpus)
    assert sorted(got) == [0, 1, 2]
    assert got[0]['mig_enabled'] is True and got[2]['mig_enabled'] is False


def test_select_gpus():
    assert select_gpus(['all'], GPUS) == [0, 1, 2, 3]
    assert select_gpus(['2', 'GPU-0', '2'], GPUS) == [0, 2]
    assert select_gpus(None, GPUS) == [0, 1, 2, 3]
    with pytest.raises(SharingError) as err:
        select_gpus(['4'], GPUS)
    assert 'GPU index 4 is out of range' in str(err.value) and '4 GPU(s), indexes 0-3' in str(err.value)
    with pytest.raises(SharingError) as err:
        select_gpus(['GPU-x'], GPUS)
    assert "'GPU-x'" in str(err.value) and 'GPU-0' in str(err.value)
