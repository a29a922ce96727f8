# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG geometry validation and planning (current -> wanted)."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_plan as plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError

# A100-SXM4-80GB as NVML reports it: (name, id, slices, max instances, placement size, placements)
_TABLE = [('1g.10gb', 19, 1, 7, 1, [0, 1, 2, 3, 4, 5, 6]), ('1g.10gb+me', 20, 1, 1, 1, [0, 1, 2, 3, 4, 5, 6]),
          ('1g.20gb', 15, 1, 4, 2, [0, 2, 4, 6]), ('2g.20gb', 14, 2, 3, 2, [0, 2, 4]), ('3g.40gb', 9, 3, 2, 4, [0, 4]),
          ('4g.40gb', 5, 4, 1, 4, [0]), ('7g.80gb', 0, 7, 1, 8, [0])]
PROFILES = dict((n, {'name': n, 'id': i, 'slices': s, 'max_instances': m, 'memory_mib': 10240 * ps,
                     'placement_size': ps, 'placements': pl}) for n, i, s, m, ps, pl in _TABLE)
GPU = {'index': 0, 'name': 'NVIDIA A100-SXM4-80GB'}


def gi(gid, profile, start, cis='full'):
    p = PROFILES[profile]
    if cis == 'full':
        cis = [{'id': 0, 'profile_id': 99, 'slices': p['slices'], 'full': True, 'name': profile}]
    return {'id': gid, 'profile': profile, 'profile_id': p['id'], 'start': start, 'size': p['placement_size'], 'cis': cis}


def test_validate_unknown_profile_names_gpu_and_allowed():
    with pytest.raises(SharingError) as err:
        plan.validate_geometry(GPU, {'1g.5gb': 1}, PROFILES)
    msg = str(err.value)
    assert "GPU 0 (NVIDIA A100-SXM4-80GB): MIG profile '1g.5gb' is not available" in msg
    assert 'allowed profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb' in msg


def test_validate_count_over_max():
    with pytest.raises(SharingError) as err:
        plan.validate_geometry(GPU, {'3g.40gb': 3}, PROFILES)
    assert "3 x MIG profile '3g.40gb'" in str(err.value) and 'at most 2' in str(err.value)


def test_validate_slices_and_fit():
    with pytest.raises(SharingError) as err:
        plan.validate_geometry(GPU, {'4g.40gb': 1, '2g.20gb': 2}, PROFILES)
    assert 'needs 8 compute slices; this GPU has 7' in str(err.value)
    with pytest.raises(SharingError) as err:     # 7 compute slices, but 4g@0-3 leaves room for two 1g.20gb only
        plan.validate_geometry(GPU, {'4g.40gb': 1, '1g.20gb': 3}, PROFILES)
    assert 'does not fit' in str(err.value)
    for ok in ({'1g.10gb': 7}, {'3g.40gb': 2}, {'4g.40gb': 1, '2g.20gb': 1, '1g.10gb': 1}, {'7g.80gb': 1}, {}):
        plan.validate_geometry(GPU, ok, PROFILES)


def test_plan_noop():
    current = [gi(1, '3g.40gb', 0), gi(2, '3g.40gb', 4)]
    p = plan.plan_geometry(GPU, current, {'3g.40gb': 2}, PROFILES)
    assert p['changed'] is False and p['actions'] == []


def test_plan_create_from_empty_largest_first():
    p = plan.plan_geometry(GPU, [], {'1g.10gb': 1, '4g.40gb': 1, '2g.20gb': 1}, PROFILES)
    assert p['create_gis'] == [('4g.40gb', 0), ('2g.20gb', 4), ('1g.10gb', 6)]
    assert p['destroy_cis'] == [] and p['destroy_gis'] == []
    assert p['actions'][0] == 'GPU 0: create GPU instance 4g.40gb at placement 0 with compute instance 4g.40gb'


def test_plan_destroy_cis_first_then_gis():
    current = [gi(7, '1g.10gb', 0), gi(8, '1g.10gb', 1)]
    p = plan.plan_geometry(GPU, current, {}, PROFILES)
    assert p['destroy_cis'] == [(7, 0, '1g.10gb'), (8, 0, '1g.10gb')]
    assert p['destroy_gis'] == [(7, '1g.10gb', 0), (8, '1g.10gb', 1)]
    assert [a.split(' ')[2] for a in p['actions']] == ['destroy', 'destroy', 'destroy', 'destroy']
    assert 'compute instance' in p['actions'][0] and 'GPU instance 1g.10gb (id 7, placement 0)' in p['actions'][2]


def test_plan_mixed_keeps_what_fits_and_fixes_cis():
    current = [gi(1, '3g.40gb', 0), gi(11, '1g.10gb', 4), gi(12, '1g.10gb', 5), gi(13, '1g.10gb', 6, cis=[])]
    p = plan.plan_geometry(GPU, current, {'4g.40gb': 1, '1g.10gb': 3}, PROFILES)
    assert p['destroy_gis'] == [(1, '3g.40gb', 0)]
    assert p['fix_gis'] == [13]
    assert p['create_gis'] == [('4g.40gb', 0)]
    assert p['actions'] == [
        'GPU 0: destroy compute instance 3g.40gb (id 0) in GPU instance 3g.40gb (id 1)',
        'GPU 0: destroy GPU instance 3g.40gb (id 1, placement 0)',
        'GPU 0: create compute instance 1g.10gb in GPU instance 1g.10gb (id 13)',
        'GPU 0: create GPU instance 4g.40gb at placement 0 with compute instance 4g.40gb',
    ]


def test_plan_partial_cis_replaced():
    partial = [{'id': 0, 'profile_id': 0, 'slices': 1, 'full': False, 'name': '1c.3g.40gb'},
               {'id': 1, 'profile_id': 1, 'slices': 2, 'full': False, 'name': '2c.3g.40gb'}]
    p = plan.plan_geometry(GPU, [gi(1, '3g.40gb', 0, cis=partial)], {'3g.40gb': 1}, PROFILES)
    assert p['destroy_cis'] == [(1, 0, '1c.3g.40gb'), (1, 1, '2c.3g.40gb')]
    assert p['fix_gis'] == [1] and p['destroy_gis'] == [] and p['create_gis'] == []


def test_plan_rebuilds_when_keeping_fragments():
    # keeping the 1g.10gb at placement 1 would block 4g.40gb (placement 0 only): everything is rebuilt
    current = [gi(8, '1g.10gb', 1)]
    p = plan.plan_geometry(GPU, current, {'4g.40gb': 1, '1g.10gb': 3}, PROFILES)
    assert p['destroy_gis'] == [(8, '1g.10gb', 1)]
    assert p['create_gis'] == [('4g.40gb', 0), ('1g.10gb', 4), ('1g.10gb', 5), ('1g.10gb', 6)]


def test_fit_without_placement_data_lets_nvml_choose():
    profiles = dict((n, dict(p, placements=None, placement_size=None)) for n, p in PROFILES.items())
    assert plan.fit_placements(['1g.10gb', '3g.40gb'], profiles) == [('3g.40gb', None), ('1g.10gb', None)]


def test_geometry_helpers():
    current = [gi(1, '3g.40gb', 0), gi(13, '1g.10gb', 6, cis=[])]
    assert plan.geometry_of(current) == {'3g.40gb': 1}
    assert plan.describe_instances(current) == ['3g.40gb@0 [3g.40gb]', '1g.10gb@6 [no compute instance]']
    assert plan.format_geometry({'1g.10gb': 2, '3g.40gb': 1}) == '2x 1g.10gb + 1x 3g.40gb'
    assert plan.format_geometry({}) == 'no MIG devices'
