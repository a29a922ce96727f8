# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG catalogue and profile names against upstream (docs/conformance/mig-profiles.md, rows MIGP-*)."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog as cat
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_config as conf
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_plan as plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError


def table(pci):
    return dict((p['name'], p) for p in cat.mig_profiles_for(None, pci))


def brief(pci):
    """name -> (nvidia-smi id, max instances, compute slices, memory GiB, placements, placement size)"""
    return dict((n, (p['id'], p['max_instances'], p['slices'], p['memory_gib'], p['placements'], p['placement_size']))
                for n, p in table(pci).items())


P8_1 = [0, 1, 2, 3, 4, 5, 6]


def seven(small, double, half, full):
    return {
        '1g.%dgb' % small: (19, 7, 1, small, P8_1, 1),
        '1g.%dgb+me' % small: (20, 1, 1, small, P8_1, 1),
        '1g.%dgb' % double: (15, 4, 1, double, [0, 2, 4, 6], 2),
        '2g.%dgb' % double: (14, 3, 2, double, [0, 2, 4], 2),
        '3g.%dgb' % half: (9, 2, 3, half, [0, 4], 4),
        '4g.%dgb' % half: (5, 1, 4, half, [0], 4),
        '7g.%dgb' % full: (0, 1, 7, full, [0], 8),
    }


def test_MIGP_01_a30():
    assert brief(0x20B710DE) == {
        '1g.6gb': (14, 4, 1, 6, [0, 1, 2, 3], 1), '1g.6gb+me': (21, 1, 1, 6, [0, 1, 2, 3], 1),
        '2g.12gb': (5, 2, 2, 12, [0, 2], 2), '2g.12gb+me': (6, 1, 2, 12, [0, 2], 2), '4g.24gb': (0, 1, 4, 24, [0], 4),
    }


@pytest.mark.parametrize('pci', [0x20B0, 0x20B1, 0x20F1, 0x20F6])
def test_MIGP_02_a100_40gb(pci):
    assert brief(pci) == seven(5, 10, 20, 40)


@pytest.mark.parametrize('pci', [0x20B2, 0x20B5, 0x20F3, 0x20F5, 0x2330, 0x2331, 0x2322, 0x2324])
def test_MIGP_03_a100_h100_80gb(pci):
    assert brief(pci) == seven(10, 20, 40, 80)


@pytest.mark.parametrize('pci', [0x2321, 0x233A])
def test_MIGP_04_h100_nvl_94gb(pci):
    assert brief(pci) == seven(12, 24, 47, 94)


@pytest.mark.parametrize('pci', [0x233D, 0x2342, 0x20B6, 0x2329])
def test_MIGP_05_h100_96gb_gh200_96gb_h20(pci):
    assert brief(pci) == seven(12, 24, 48, 96)


@pytest.mark.parametrize('pci', [0x2335, 0x233B])
def test_MIGP_06_h200_141gb(pci):
    assert brief(pci) == seven(18, 35, 71, 141)


def test_MIGP_07_gh200_144gb_is_not_h200():
    assert brief(0x2348) == seven(18, 36, 72, 144)
    # by name too: GH200 must never take the H200 table
    assert cat.mig_catalog_match('NVIDIA GH200 144G HBM3e')['product'] == 'GH200-144GB'
    assert cat.mig_catalog_match('NVIDIA GH200 480GB')['product'] == 'H100-96GB'
    assert cat.mig_catalog_match('NVIDIA GH200')['product'] is None
    assert cat.mig_catalog_match('NVIDIA H200')['product'] == 'H200-141GB'
    assert cat.mig_catalog_match('NVIDIA H200 NVL')['product'] == 'H200-141GB'


def test_MIGP_08_b200():
    assert brief(0x290110DE) == seven(23, 45, 90, 180)


def test_MIGP_09_gb200():
    assert brief(0x294110DE) == seven(23, 47, 93, 186)


def test_MIGP_10_b300():
    assert brief(0x318210DE) == seven(34, 67, 135, 269)


def test_MIGP_11_gb300():
    assert brief(0x31C210DE) == seven(35, 70, 139, 278)


def test_MIGP_12_rtx_pro_6000_blackwell():
    got = brief(0x2BB510DE)
    p1, p2 = [0, 1, 2, 3], [0, 2]
    assert got == {
        '1g.24gb': (None, 4, 1, 24, p1, 1), '1g.24gb+me.all': (None, 1, 1, 24, p1, 1),
        '1g.24gb-me': (None, 4, 1, 24, p1, 1), '1g.24gb+gfx': (None, 4, 1, 24, p1, 1),
        '2g.48gb': (None, 2, 2, 48, p2, 2), '2g.48gb+me.all': (None, 1, 2, 48, p2, 2),
        '2g.48gb-me': (None, 2, 2, 48, p2, 2), '2g.48gb+gfx': (None, 2, 2, 48, p2, 2),
        '4g.96gb': (None, 1, 4, 96, [0], 4), '4g.96gb+gfx': (None, 1, 4, 96, [0], 4),
    }
    # the workstation edition's device id is not in mig-parted's config: it is matched by name
    assert cat.mig_catalog_match('NVIDIA RTX PRO 6000 Blackwell Workstation Edition', 0x2BB110DE) == {
        'product': 'RTX-PRO-6000-Blackwell', 'matched_by': 'name'}


# nvml.h (go-nvml as vendored by mig-parted v0.15.0): NVML_GPU_INSTANCE_PROFILE_* values
NVML_H = {
    '1_SLICE': 0x0, '2_SLICE': 0x1, '3_SLICE': 0x2, '4_SLICE': 0x3, '7_SLICE': 0x4, '8_SLICE': 0x5, '6_SLICE': 0x6,
    '1_SLICE_REV1': 0x7, '2_SLICE_REV1': 0x8, '1_SLICE_REV2': 0x9, '1_SLICE_GFX': 0x0A, '2_SLICE_GFX': 0x0B,
    '4_SLICE_GFX': 0x0C, '1_SLICE_NO_ME': 0x0D, '2_SLICE_NO_ME': 0x0E, '1_SLICE_ALL_ME': 0x0F, '2_SLICE_ALL_ME': 0x10,
    '3_SLICE_GFX': 0x11,
}


def test_MIGP_13_nvml_profile_constants_and_attributes():
    assert cat.NVML_GPU_INSTANCE_PROFILES == NVML_H
    import pynvml  # the bindings the modules use must agree (fails loudly when they are missing)
    for name, value in NVML_H.items():
        assert getattr(pynvml, 'NVML_GPU_INSTANCE_PROFILE_' + name) == value
    # go-nvlib's NewMigProfile: REV1 -> +me, ALL_ME -> +me.all, GFX -> +gfx, NO_ME -> -me; slices from the constant
    suffix = {'REV1': '+me', 'ALL_ME': '+me.all', 'GFX': '+gfx', 'NO_ME': '-me', 'REV2': '', '': ''}
    for key, ids, rules, rows in cat.MIG_PRODUCTS:
        for row in rows:
            const = row['nvml_profile'][len('NVML_GPU_INSTANCE_PROFILE_'):]
            slices, dummy, rest = const.partition('_SLICE')
            assert int(slices) == row['slices'], (key, row['name'])
            assert row['name'].endswith(suffix[rest.lstrip('_')]), (key, row['name'], const)
            assert row['nvml_profile_index'] == NVML_H[const]
            assert conf.parse_profile_name(row['name'])['name'] == row['name']


@pytest.mark.parametrize('name,pci,product,by', [
    ('NVIDIA H200', 0x234810DE, 'GH200-144GB', 'pci_device_id'),     # PCI id wins over the name
    ('NVIDIA GH200 144G HBM3e', None, 'GH200-144GB', 'name'),
    ('NVIDIA H100 NVL', '0x2321', 'H100-94GB', 'pci_device_id'),
    ('NVIDIA H100 NVL', 0xFFFF10DE, 'H100-94GB', 'name'),             # unknown id: the name decides
    ('NVIDIA H20', None, 'H100-96GB', 'name'),
    ('NVIDIA B200', None, 'B200', 'name'),
    ('NVIDIA GB200', None, 'GB200', 'name'),
    ('NVIDIA A100-SXM4-80GB', None, 'A100-80GB', 'name'),
    ('NVIDIA A100-PCIE-40GB', None, 'A100-40GB', 'name'),
    ('Tesla T4', 0x1EB810DE, None, None),
    ('NVIDIA L40S', None, None, None),
])
def test_MIGP_14_match_pci_first_then_name(name, pci, product, by):
    assert cat.mig_catalog_match(name, pci) == {'product': product, 'matched_by': by}


def test_MIGP_14_unknown_gpu_is_reported_not_guessed():
    facts = cat.mig_catalog_facts('NVIDIA Future X1', 0x3FFF10DE, [])
    assert facts['mig_profiles'] == [] and facts['mig_catalog'] is None
    assert 'not in the collection\'s MIG catalogue' in facts['mig_profiles_unknown']
    assert '0x3fff' in facts['mig_profiles_unknown']
    caps = cat.sharing_capabilities([dict(index=0, name='NVIDIA Future X1', mig_capable=True, compute_capability='10.0',
                                          compute_capability_major=10, compute_capability_minor=0, **facts)])
    assert caps['mig']['allowed'] is False
    assert 'MIG capable but their MIG profiles are unknown' in caps['mig']['reason']
    assert 'not MIG capable' not in caps['mig']['reason']
    nvml = [{'name': '1g.10gb', 'id': 19, 'source': 'nvml'}]
    assert cat.mig_catalog_facts('NVIDIA Future X1', None, nvml)['mig_profiles'] == nvml


@pytest.mark.parametrize('name,canonical', [
    ('1g.24gb+me', '1g.24gb+me'), ('1g.24gb+me.all', '1g.24gb+me.all'), ('1g.24gb-me', '1g.24gb-me'),
    ('1g.24gb+gfx', '1g.24gb+gfx'), ('MIG 2g.48gb+me.all', '2g.48gb+me.all'), ('4g.96gb+gfx', '4g.96gb+gfx'),
    ('1g.10gb+me,gfx', '1g.10gb+gfx,me'), ('1c.2g.20gb', '1c.2g.20gb'), ('2c.2g.20gb', '2g.20gb'),
])
def test_MIGP_15_profile_grammar_accepts(name, canonical):
    assert conf.parse_profile_name(name)['name'] == canonical


@pytest.mark.parametrize('name,why', [
    ('1g.24gb+me-x', "both '+' and '-'"), ('1g.24gb+', 'attribute'), ('1g.24gb+me,me', 'twice'),
    ('1g.24gb+1me', 'starting with a letter'), ('1g.24gb+me.', 'starting with a letter'), ('1g24gb', "'<G>g.<GB>gb'"),
    ('g.24gb', "'<G>g.<GB>gb'"), ('', 'empty'), ('1g.24gb+m_e', 'letters'),
])
def test_MIGP_15_profile_grammar_refuses(name, why):
    with pytest.raises(ValueError) as err:
        conf.parse_profile_name(name)
    assert why in str(err.value)


def _cfg(devices):
    return {'version': 'v1', 'mig-configs': {'c': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': devices}]}}


def test_MIGP_15_geometry_parser_refuses_unknown_attributes_with_allowed_values():
    with pytest.raises(SharingError) as err:
        conf.parse_mig_config(_cfg({'1g.24gb+foo': 1}), 'c')
    assert "'1g.24gb+foo'" in str(err.value) and '+me, +me.all, +gfx, -me' in str(err.value)
    with pytest.raises(SharingError) as err:
        conf.parse_mig_config(_cfg({'1g.24gb-gfx': 1}), 'c')
    assert "only '-me'" in str(err.value)


# mig-parted v0.15.0 deployments/systemd/config-default.yaml: device-filter -> mig-devices of its configs for that GPU
MIG_PARTED_DEFAULTS = [
    (0x20B710DE, [{'1g.6gb': 4}, {'1g.6gb+me': 1}, {'2g.12gb': 2}, {'2g.12gb+me': 1}, {'4g.24gb': 1},
                  {'1g.6gb': 2, '2g.12gb': 1}]),
    (0x20B010DE, [{'1g.5gb': 7}, {'1g.5gb+me': 1}, {'2g.10gb': 3}, {'3g.20gb': 2}, {'4g.20gb': 1}, {'7g.40gb': 1},
                  {'1g.10gb': 4}, {'1g.5gb': 2, '2g.10gb': 1, '3g.20gb': 1}]),
    (0x233010DE, [{'1g.10gb': 7}, {'1g.10gb+me': 1}, {'1g.20gb': 4}, {'2g.20gb': 3}, {'3g.40gb': 2}, {'4g.40gb': 1},
                  {'7g.80gb': 1}, {'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1}]),
    (0x232110DE, [{'1g.12gb': 7}, {'1g.12gb+me': 1}, {'1g.24gb': 4}, {'2g.24gb': 3}, {'3g.47gb': 2}, {'4g.47gb': 1},
                  {'7g.94gb': 1}, {'1g.12gb': 2, '2g.24gb': 1, '3g.47gb': 1}]),
    (0x232910DE, [{'1g.12gb': 7}, {'3g.48gb': 2}, {'4g.48gb': 1}, {'7g.96gb': 1}, {'1g.12gb': 2, '2g.24gb': 1, '3g.48gb': 1}]),
    (0x233510DE, [{'1g.18gb': 7}, {'1g.18gb+me': 1}, {'1g.35gb': 4}, {'2g.35gb': 3}, {'3g.71gb': 2}, {'4g.71gb': 1},
                  {'7g.141gb': 1}, {'1g.18gb': 2, '2g.35gb': 1, '3g.71gb': 1}]),
    (0x234810DE, [{'1g.18gb': 7}, {'1g.36gb': 4}, {'2g.36gb': 3}, {'3g.72gb': 2}, {'4g.72gb': 1}, {'7g.144gb': 1},
                  {'1g.18gb': 2, '2g.36gb': 1, '3g.72gb': 1}]),
    (0x290110DE, [{'1g.23gb': 7}, {'1g.23gb+me': 1}, {'1g.45gb': 4}, {'2g.45gb': 3}, {'3g.90gb': 2}, {'4g.90gb': 1},
                  {'7g.180gb': 1}, {'1g.23gb': 2, '2g.45gb': 1, '3g.90gb': 1}]),
    (0x294110DE, [{'1g.23gb': 7}, {'1g.23gb+me': 1}, {'1g.47gb': 4}, {'2g.47gb': 3}, {'3g.93gb': 2}, {'4g.93gb': 1},
                  {'7g.186gb': 1}, {'1g.23gb': 2, '2g.47gb': 1, '3g.93gb': 1}]),
    (0x318210DE, [{'1g.34gb': 7}, {'1g.34gb+me': 1}, {'1g.67gb': 4}, {'2g.67gb': 3}, {'3g.135gb': 2}, {'4g.135gb': 1},
                  {'7g.269gb': 1}, {'1g.34gb': 2, '2g.67gb': 1, '3g.135gb': 1}]),
    (0x31C210DE, [{'1g.35gb': 7}, {'1g.35gb+me': 1}, {'1g.70gb': 4}, {'2g.70gb': 3}, {'3g.139gb': 2}, {'4g.139gb': 1},
                  {'7g.278gb': 1}, {'1g.35gb': 2, '2g.70gb': 1, '3g.139gb': 1}]),
    (0x2BB510DE, [{'1g.24gb+gfx': 4}, {'1g.24gb+me.all': 1}, {'1g.24gb-me': 4}, {'2g.48gb': 2}, {'2g.48gb+gfx': 2},
                  {'2g.48gb+me.all': 1}, {'2g.48gb-me': 2}, {'4g.96gb': 1}, {'4g.96gb+gfx': 1}, {'1g.24gb': 4},
                  {'1g.24gb': 2, '2g.48gb': 1}]),
]


@pytest.mark.parametrize('pci,configs', MIG_PARTED_DEFAULTS)
def test_MIGP_16_every_mig_parted_default_config_parses_and_fits(pci, configs):
    profiles = dict((n, dict(p, memory_mib=p['memory_gib'] * 1024)) for n, p in table(pci).items())
    assert profiles
    gpu = {'index': 0, 'name': 'GPU 0x%08X' % pci}
    for devices in configs:
        entry = conf.parse_mig_config(_cfg(devices), 'c')[0]
        plan.validate_geometry(gpu, entry['mig_devices'], profiles)


def test_MIGP_17_counts_above_the_guides_maximum_are_refused_with_the_limit():
    profiles = dict((n, dict(p, memory_mib=p['memory_gib'] * 1024)) for n, p in table(0x2BB510DE).items())
    with pytest.raises(SharingError) as err:
        plan.validate_geometry({'index': 0, 'name': 'RTX PRO 6000'}, {'1g.24gb+me.all': 2}, profiles)
    assert 'at most 1' in str(err.value)
    with pytest.raises(SharingError) as err:
        plan.validate_geometry({'index': 0, 'name': 'B200'}, {'1g.24gb': 1}, dict(
            (n, dict(p, memory_mib=p['memory_gib'] * 1024)) for n, p in table(0x290110DE).items()))
    assert "'1g.24gb' is not available" in str(err.value) and '1g.23gb+me' in str(err.value)


def test_MIGP_18_profile_ids_published_carried_over_or_none():
    ids = {'1g': 19, '1g+me': 20, '1g-double': 15, '2g': 14, '3g': 9, '4g': 5, '7g': 0}
    # A100 80GB / H100 80GB: the published -lgip listing; every other 7-slice table carries the same ids over
    for pci in (0x20B210DE, 0x233010DE, 0x232110DE, 0x233D10DE, 0x233510DE, 0x234810DE, 0x290110DE, 0x294110DE,
                0x318210DE, 0x31C210DE):
        rows = table(pci)
        by_kind = {}
        for name, row in rows.items():
            g = name.split('g.', 1)[0] + 'g'
            kind = g + ('+me' if name.endswith('+me') else '')
            if g == '1g' and not name.endswith('+me') and row['max_instances'] == 4:
                kind = '1g-double'
            by_kind[kind] = row['id']
        assert by_kind == ids, (hex(pci), by_kind)
    # RTX PRO 6000 Blackwell: no source gives its ids - None, never a guess
    assert set(row['id'] for row in table(0x2BB510DE).values()) == {None}
