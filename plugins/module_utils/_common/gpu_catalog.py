# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Static knowledge about NVIDIA GPUs: architectures, MPS limits, MIG profile tables.

Facts come from NVIDIA's public documentation (CUDA compute capabilities, the MPS guide and the
MIG user guide). Nothing here talks to hardware.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NODE_STRATEGIES

# nvmlDeviceArchitecture_t values (nvml.h) -> name
ARCHITECTURES = {
    2: 'kepler',
    3: 'maxwell',
    4: 'pascal',
    5: 'volta',
    6: 'turing',
    7: 'ampere',
    8: 'ada',
    9: 'hopper',
    10: 'blackwell',
}

# Compute capability major -> architecture, used when NVML cannot tell (old driver, PCI-only probe).
_CC_ARCH = [
    ((3, 0), 'kepler'),
    ((5, 0), 'maxwell'),
    ((6, 0), 'pascal'),
    ((7, 0), 'volta'),
    ((7, 5), 'turing'),
    ((8, 0), 'ampere'),
    ((8, 9), 'ada'),
    ((9, 0), 'hopper'),
    ((10, 0), 'blackwell'),
]

# NVIDIA PCI device id ranges per chip family, for the architecture of a GPU seen only on the PCI bus (no driver yet;
# the driver role's open/proprietary choice). Checked id by id (tests/unit/plugins/module_utils/_common/test_gpu_catalog_pci_ids.py)
# against the PCI ID Repository's pci.ids 2023.04.10 (Debian's pci.ids 0.0~2023.04.11-1, NVIDIA's 10de section:
# every GK..AD/GH display id) and against the supported-GPU table of NVIDIA/open-gpu-kernel-modules README.md at tag
# 595.45.04 (Turing to Blackwell, including GH200, GB200, B200, B300, RTX PRO 6000). Fermi and Tesla-generation ids
# (GF1xx, GT2xx, some of them between Kepler's) are 'unknown': no supported branch drives them.
# The device ids of the MIG products below are checked against these ranges by the unit tests.
# (first, last, architecture); checked in order, so the narrower ranges come first.
PCI_ID_RANGES = (
    (0x2340, 0x234f, 'grace-hopper'),   # GH200
    (0x2300, 0x233f, 'hopper'),         # GH100 (H100, H200, H800, H20)
    (0x1db0, 0x1dbf, 'volta'),          # GV100 (V100)
    (0x1df0, 0x1dff, 'volta'),          # GV100 (V100S, V100 SXM3)
    (0x1d80, 0x1d8f, 'volta'),          # GV100 (TITAN V)
    (0x15f0, 0x15ff, 'pascal'),         # GP100 (P100)
    (0x1720, 0x172f, 'pascal'),         # GP100 (inside Maxwell's ids)
    (0x0fc0, 0x103f, 'kepler'),         # GK107, GK110 (K20, K40, K80)
    (0x1180, 0x11ff, 'kepler'),         # GK104, GK106
    (0x1280, 0x12ff, 'kepler'),         # GK208
    (0x1300, 0x17ff, 'maxwell'),
    (0x1b00, 0x1dff, 'pascal'),
    (0x1e00, 0x1fff, 'turing'),
    (0x2080, 0x20ff, 'ampere'),         # GA100 (A100, A30, A800)
    (0x2180, 0x21ff, 'turing'),         # TU116
    (0x2200, 0x25ff, 'ampere'),         # GA10x (A10, A40, A16, A2)
    (0x2600, 0x28ff, 'ada'),            # AD10x (L40, L40S, L4, L20)
    (0x2900, 0x31ff, 'blackwell'),      # GB100/GB110/GB20x (B200, B300, GB200, GB300, RTX PRO 6000 Blackwell)
)


# Consumer-class GPUs (GeForce, TITAN; the RTX x050-x090 gaming numbers), by marketing or PCI name: the class whose
# driver refused to start under a hypervisor before R465 ("Code 43"), so a VM hides the hypervisor for them
# (hypervisor.cpuid.v0 = FALSE). Data-centre and workstation GPUs (Tesla, A/H/B/L series, Quadro, RTX A4000,
# RTX 4000/5000/6000 Ada, RTX PRO) never needed it (docs/conformance/esxi_gpu_passthrough.md ESX-14).
CONSUMER_GPU_RE = re.compile(r'GEFORCE|TITAN|\bRTX [2-5]0[5-9]0\b', re.IGNORECASE)


def is_consumer_gpu(name: str | None) -> bool:
    """Whether a GPU name (NVML's "NVIDIA GeForce RTX 4090" or the PCI database's "AD102 [GeForce RTX 4090]") is
    of the consumer class (CONSUMER_GPU_RE)."""
    return bool(CONSUMER_GPU_RE.search(name or ''))


def architecture_from_pci_id(device_id: object) -> str:
    """Architecture of an NVIDIA PCI device id ('0x2330' or '2330'), or 'unknown'."""
    try:
        value = int(str(device_id), 16)
    except (TypeError, ValueError):
        return 'unknown'
    for first, last, arch in PCI_ID_RANGES:
        if first <= value <= last:
            return arch
    return 'unknown'


SHARING_STRATEGIES = NODE_STRATEGIES  # the node-level strategies of the strategy model (gpu_strategy)

# MPS: supported by the NVIDIA device plugin and the MPS control daemon from Volta (CC 7.0).
# Client limit per device: 48 from Volta on; NVIDIA's MPS guide gives 16 for pre-Volta GPUs.
MPS_MIN_CC = (7, 0)


def architecture_from_cc(major: int | None, minor: int | None) -> str:
    """Best architecture name for a compute capability, or 'unknown'."""
    if major is None:
        return 'unknown'
    name = 'unknown'
    for (cc, arch) in _CC_ARCH:
        if (major, minor or 0) >= cc:
            name = arch
    return name


def architecture_name(nvml_arch: object, major: int | None = None, minor: int | None = None) -> str:
    """Architecture name from NVML's enum, falling back to the compute capability."""
    if nvml_arch in ARCHITECTURES:
        return ARCHITECTURES[nvml_arch]
    return architecture_from_cc(major, minor)


def mps_max_clients(major: int | None, minor: int | None) -> int:
    """Maximum MPS clients per GPU, or 0 when MPS is not supported for Kubernetes sharing."""
    if major is None:
        return 0
    if (major, minor or 0) < MPS_MIN_CC:
        return 0
    return 48


# MIG catalogue. Sources (see docs/conformance/mig-profiles.md): NVIDIA's MIG user guide ("Supported MIG Profiles"),
# NVIDIA/mig-parted v0.15.0 deployments/systemd/config-default.yaml (profile names, counts and the PCI device ids
# each table applies to) and nvml.h as vendored there (NVML_GPU_INSTANCE_PROFILE_* constants).
#
# NVML_GPU_INSTANCE_PROFILE_* values: the profile *index* passed to nvmlDeviceGetGpuInstanceProfileInfo.
NVML_GPU_INSTANCE_PROFILES = {
    '1_SLICE': 0x0, '2_SLICE': 0x1, '3_SLICE': 0x2, '4_SLICE': 0x3, '7_SLICE': 0x4, '8_SLICE': 0x5, '6_SLICE': 0x6,
    '1_SLICE_REV1': 0x7, '2_SLICE_REV1': 0x8, '1_SLICE_REV2': 0x9, '1_SLICE_GFX': 0xA, '2_SLICE_GFX': 0xB,
    '4_SLICE_GFX': 0xC, '1_SLICE_NO_ME': 0xD, '2_SLICE_NO_ME': 0xE, '1_SLICE_ALL_ME': 0xF, '2_SLICE_ALL_ME': 0x10,
    '3_SLICE_GFX': 0x11,
}

# Placements in memory slices (start positions, size), as nvidia-smi mig -lgipp lists them.
_P8 = {
    '1': ([0, 1, 2, 3, 4, 5, 6], 1), '1x2': ([0, 2, 4, 6], 2), '2': ([0, 2, 4], 2), '3': ([0, 4], 4),
    '4': ([0], 4), '7': ([0], 8),
}
_P4 = {'1': ([0, 1, 2, 3], 1), '2': ([0, 2], 2), '4': ([0], 4)}


def _row(name: str, pid: int | None, nvml: str, count: int, mem: int, slices: int,
         place: tuple[list[int], int]) -> dict:
    return {'name': name, 'id': pid, 'nvml_profile': 'NVML_GPU_INSTANCE_PROFILE_' + nvml,
            'nvml_profile_index': NVML_GPU_INSTANCE_PROFILES[nvml], 'max_instances': count, 'memory_gib': mem,
            'slices': slices, 'placements': list(place[0]), 'placement_size': place[1]}


def _seven_slice(small: int, double: int, half: int, full: int) -> list[dict]:
    """The 7-compute-slice / 8-memory-slice table shared by A100, H100, H200, GH200, H20, B200, GB200, B300, GB300.

    Memory sizes in the names: 1g.<small>gb, 1g.<double>gb = 2g.<double>gb, 3g.<half>gb = 4g.<half>gb, 7g.<full>gb.
    The GPU-instance profile ids are the ones nvidia-smi mig -lgip shows for these GPUs (19, 20, 15, 14, 9, 5, 0).
    """
    return [
        _row('1g.%dgb' % small, 19, '1_SLICE', 7, small, 1, _P8['1']),
        _row('1g.%dgb+me' % small, 20, '1_SLICE_REV1', 1, small, 1, _P8['1']),
        _row('1g.%dgb' % double, 15, '1_SLICE_REV2', 4, double, 1, _P8['1x2']),
        _row('2g.%dgb' % double, 14, '2_SLICE', 3, double, 2, _P8['2']),
        _row('3g.%dgb' % half, 9, '3_SLICE', 2, half, 3, _P8['3']),
        _row('4g.%dgb' % half, 5, '4_SLICE', 1, half, 4, _P8['4']),
        _row('7g.%dgb' % full, 0, '7_SLICE', 1, full, 7, _P8['7']),
    ]


_A30 = [
    _row('1g.6gb', 14, '1_SLICE', 4, 6, 1, _P4['1']),
    _row('1g.6gb+me', 21, '1_SLICE_REV1', 1, 6, 1, _P4['1']),
    _row('2g.12gb', 5, '2_SLICE', 2, 12, 2, _P4['2']),
    _row('2g.12gb+me', 6, '2_SLICE_REV1', 1, 12, 2, _P4['2']),
    _row('4g.24gb', 0, '4_SLICE', 1, 24, 4, _P4['4']),
]

# RTX PRO 6000 Blackwell: 4 slices, media-extension variants (+me.all: all media engines, -me: none) and graphics
# (+gfx) profiles. mig-parted's default config names them; their nvidia-smi profile ids are not given there, so
# the id is None: NVML reports it once MIG mode is on (the catalogue is only used while NVML cannot answer).
_RTX_PRO_6000 = [
    _row('1g.24gb', None, '1_SLICE', 4, 24, 1, _P4['1']),
    _row('1g.24gb+me.all', None, '1_SLICE_ALL_ME', 1, 24, 1, _P4['1']),
    _row('1g.24gb-me', None, '1_SLICE_NO_ME', 4, 24, 1, _P4['1']),
    _row('1g.24gb+gfx', None, '1_SLICE_GFX', 4, 24, 1, _P4['1']),
    _row('2g.48gb', None, '2_SLICE', 2, 48, 2, _P4['2']),
    _row('2g.48gb+me.all', None, '2_SLICE_ALL_ME', 1, 48, 2, _P4['2']),
    _row('2g.48gb-me', None, '2_SLICE_NO_ME', 2, 48, 2, _P4['2']),
    _row('2g.48gb+gfx', None, '2_SLICE_GFX', 2, 48, 2, _P4['2']),
    _row('4g.96gb', None, '4_SLICE', 1, 96, 4, _P4['4']),
    _row('4g.96gb+gfx', None, '4_SLICE_GFX', 1, 96, 4, _P4['4']),
]

# Products: key, PCI device ids (the device part of NVML's pciDeviceId; mig-parted's device-filter values are
# device << 16 | 0x10DE), name rules (every token of one rule must be a token of the product name; first product
# whose rule matches wins, so the more specific products come first), table.
MIG_PRODUCTS = [
    ('A30-24GB', [0x20B7], [('A30',)], _A30),
    ('A100-80GB', [0x20B2, 0x20B5, 0x20F3, 0x20F5], [('A100', '80GB'), ('A800', '80GB')], _seven_slice(10, 20, 40, 80)),
    ('A100-40GB', [0x20B0, 0x20B1, 0x20F1, 0x20F6], [('A100',), ('A800',)], _seven_slice(5, 10, 20, 40)),
    ('H100-94GB', [0x2321, 0x233A], [('H100', 'NVL'), ('H800', 'NVL'), ('H100', '94GB')], _seven_slice(12, 24, 47, 94)),
    ('H100-96GB', [0x233D, 0x2342, 0x20B6, 0x2329],
     [('H100', '96GB'), ('GH200', '96GB'), ('GH200', '480GB'), ('H20',), ('PG506', '96GB')], _seven_slice(12, 24, 48, 96)),
    ('H100-80GB', [0x2330, 0x2331, 0x2322, 0x2324], [('H100',), ('H800',)], _seven_slice(10, 20, 40, 80)),
    ('GH200-144GB', [0x2348], [('GH200', '144G'), ('GH200', '144GB'), ('GH200', '624GB')], _seven_slice(18, 36, 72, 144)),
    ('H200-141GB', [0x2335, 0x233B], [('H200',)], _seven_slice(18, 35, 71, 141)),
    ('GB200', [0x2941], [('GB200',)], _seven_slice(23, 47, 93, 186)),
    ('B200', [0x2901], [('B200',)], _seven_slice(23, 45, 90, 180)),
    ('GB300', [0x31C2], [('GB300',)], _seven_slice(35, 70, 139, 278)),
    ('B300', [0x3182], [('B300',)], _seven_slice(34, 67, 135, 269)),
    ('RTX-PRO-6000-Blackwell', [0x2BB5], [('RTX', 'PRO', '6000', 'BLACKWELL')], _RTX_PRO_6000),
]  # type: list[tuple[str, list[int], list[tuple[str, ...]], list]]


def pci_device_part(value: object) -> int | None:
    """The 16-bit PCI device id from NVML's pciDeviceId (device << 16 | vendor), a '0x2330' string or an int."""
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, int):
        try:
            value = int(str(value).strip(), 16)
        except ValueError:
            return None
    if value > 0xFFFF:
        return (value >> 16) & 0xFFFF
    return value


def _hex_device(value: object) -> str:
    dev = pci_device_part(value)
    return 'unknown' if dev is None else '0x%04x' % dev


def _tokens(name: object) -> set[str]:
    return set(t for t in re.split(r'[^A-Z0-9]+', str(name or '').upper()) if t)


def mig_catalog_match(product_name: str | None = None, pci_device_id: object = None) -> dict:
    """Which catalogue product a GPU is: ``{'product': key or None, 'matched_by': 'pci_device_id'|'name'|None}``.

    The PCI device id decides when the catalogue knows it; the name is only used when it does not (so GH200 never
    takes the H200 table: 'GH200' and 'H200' are different tokens).
    """
    dev = pci_device_part(pci_device_id)
    if dev is not None:
        for key, ids, dummy, dummy2 in MIG_PRODUCTS:
            if dev in ids:
                return {'product': key, 'matched_by': 'pci_device_id'}
    tokens = _tokens(product_name)
    if tokens:
        for key, dummy_ids, rules, dummy2 in MIG_PRODUCTS:
            for rule in rules:
                if all(t in tokens for t in rule):
                    return {'product': key, 'matched_by': 'name'}
    return {'product': None, 'matched_by': None}


def mig_table(product: str | None) -> list[dict]:
    for key, dummy, dummy2, table in MIG_PRODUCTS:
        if key == product:
            return table
    return []


def mig_profiles_for(product_name: str | None, pci_device_id: object = None) -> list[dict]:
    """Known MIG profiles for a GPU (PCI device id first, product name second), as a list of dicts.

    Empty when the GPU is not in the catalogue. Each dict: name, id (nvidia-smi's GPU-instance profile id, None
    where the catalogue does not know it), nvml_profile (NVML_GPU_INSTANCE_PROFILE_* name), nvml_profile_index,
    max_instances, memory_gib, slices, placements, placement_size, source ('catalog').
    """
    match = mig_catalog_match(product_name, pci_device_id)
    out = []
    for row in mig_table(match['product']):
        entry = dict(row)
        entry['placements'] = list(row['placements'])
        entry['source'] = 'catalog'
        out.append(entry)
    return out


def mig_catalog_facts(product_name: str | None, pci_device_id: object, nvml_profiles: list | None) -> dict:
    """gpu_info's MIG profile keys for a MIG-capable GPU: NVML's profiles when it lists them, else the catalogue's.

    Returns ``mig_profiles``, ``mig_catalog`` (catalogue product or None), ``mig_catalog_match`` and, when neither
    NVML nor the catalogue knows the profiles, ``mig_profiles_unknown`` with the reason (never a guessed table).
    """
    match = mig_catalog_match(product_name, pci_device_id)
    out = {'mig_catalog': match['product'], 'mig_catalog_match': match['matched_by']}
    if nvml_profiles:
        out['mig_profiles'] = nvml_profiles
    else:
        out['mig_profiles'] = mig_profiles_for(product_name, pci_device_id)
    if not out['mig_profiles']:
        out['mig_profiles_unknown'] = (
            "GPU %s (PCI device id %s) is not in the collection's MIG catalogue and NVML lists no MIG profiles "
            "(MIG mode is off); enable MIG mode to let NVML report them"
            % (product_name, _hex_device(pci_device_id)))
    return out


def label_value(text: object) -> str:
    """Sanitise a string into a Kubernetes label value (the way GPU feature discovery does)."""

    value = re.sub(r'[^A-Za-z0-9._-]+', '-', str(text or '')).strip('-_.')
    return value[:63].rstrip('-_.')


def sharing_capabilities(gpus: list[dict]) -> dict[str, dict]:
    """Which sharing strategies the hardware allows, with the reason when not."""
    # every node strategy of the model; mps and mig have hardware conditions (below)
    caps = dict((name, {'allowed': bool(gpus)}) for name in NODE_STRATEGIES)  # type: dict[str, dict]
    if not gpus:
        for v in caps.values():
            v['reason'] = 'no NVIDIA GPU found'
    blockers = []
    limits = []
    for g in gpus:
        major, minor = g.get('compute_capability_major'), g.get('compute_capability_minor')
        n = mps_max_clients(major, minor)
        if n == 0:
            blockers.append('GPU %s (%s) has compute capability %s; MPS needs >= %d.%d'
                            % (g.get('index'), g.get('name'), g.get('compute_capability'), MPS_MIN_CC[0], MPS_MIN_CC[1]))
        limits.append(n)
    caps['mps'] = {'allowed': bool(gpus) and not blockers, 'max_clients': min(limits) if limits and not blockers else 0}
    if blockers or not gpus:
        caps['mps']['reason'] = '; '.join(blockers) or 'no NVIDIA GPU found'
    mig = [g for g in gpus if g.get('mig_capable') and g.get('mig_profiles')]
    caps['mig'] = {
        'allowed': bool(gpus) and len(mig) == len(gpus),
        'gpus': [g.get('index') for g in mig],
        'profiles': dict((str(g.get('index')), [p['name'] for p in g.get('mig_profiles', [])]) for g in mig),
    }
    if not caps['mig']['allowed']:
        others = [str(g.get('index')) for g in gpus if not g.get('mig_capable')]
        unknown = [str(g.get('index')) for g in gpus if g.get('mig_capable') and not g.get('mig_profiles')]
        reasons = []
        if others:
            reasons.append('GPU(s) %s are not MIG capable' % ', '.join(others))
        if unknown:
            reasons.append('GPU(s) %s are MIG capable but their MIG profiles are unknown (not in the MIG catalogue, '
                           'and NVML lists none while MIG mode is off)' % ', '.join(unknown))
        caps['mig']['reason'] = '; '.join(reasons) if gpus else 'no NVIDIA GPU found'
    return caps


# GPU feature discovery's nvidia.com/gpu.family: from the compute capability major (and minor for 7.x and 8.x), not
# from NVML's architecture enum (NVIDIA/k8s-device-plugin internal/lm/resource.go getArchFamily, v0.20.0; 13 is new
# there, v0.19.1 says undefined). docs/conformance/gpu-feature-discovery.md GFD-01.
_GFD_FAMILY = {1: 'tesla', 2: 'fermi', 3: 'kepler', 5: 'maxwell', 6: 'pascal', 9: 'hopper', 10: 'blackwell',
               12: 'blackwell', 13: 'rubin'}


def gfd_family(major: int | None, minor: int) -> str:
    """GPU feature discovery's family name for a compute capability ('undefined' for an unknown major)."""
    if major == 7:
        return 'volta' if minor < 5 else 'turing'
    if major == 8:
        return 'ampere' if minor < 9 else 'ada-lovelace'
    return 'undefined' if major is None else _GFD_FAMILY.get(major, 'undefined')


def gfd_sanitise(text: object) -> str:
    """GPU feature discovery's product sanitising (internal/lm/resource.go sanitise, v0.20.0): characters other than
    letters, digits, '-', '_', '.' and space are dropped, then runs of white space become one '-'. Cut to a valid label
    value (63 characters; GFD does not cut, and a longer value would be refused by the API server)."""
    value = '-'.join(re.sub(r'[^A-Za-z0-9_. -]', '', str(text or '')).split())
    value = value[:63]
    return re.sub(r'^[^A-Za-z0-9]+|[^A-Za-z0-9]+$', '', value)


def node_labels(gpus: list[dict], driver_version: str | None = None, cuda_driver_version: str | None = None) -> dict[str, str]:
    """Node labels in the names and values GPU feature discovery writes with --mig-strategy=none, from probed GPU
    facts. The whole-GPU labels describe the first GPU's product, as GFD describes one product (docs/conformance/
    gpu-feature-discovery.md GFD-01..05): count is the number of GPUs of that product, mig.capable is true when any
    GPU is MIG capable."""
    if not gpus:
        return {}
    first = gpus[0]
    labels = {
        'nvidia.com/gpu.present': 'true',
        'nvidia.com/gpu.count': str(sum(1 for g in gpus if g.get('name') == first.get('name'))),
        'nvidia.com/gpu.product': gfd_sanitise(first.get('name')),
        'nvidia.com/mig.capable': 'true' if any(g.get('mig_capable') for g in gpus) else 'false',
    }
    if first.get('memory_total_mib'):
        labels['nvidia.com/gpu.memory'] = str(first['memory_total_mib'])
    major, minor = first.get('compute_capability_major'), first.get('compute_capability_minor')
    if major:
        labels['nvidia.com/gpu.compute.major'] = str(major)
        labels['nvidia.com/gpu.compute.minor'] = str(minor)
        labels['nvidia.com/gpu.family'] = gfd_family(major, minor or 0)
    if driver_version:
        parts = str(driver_version).split('.')
        for key, value in zip(('major', 'minor', 'rev'), parts):
            labels['nvidia.com/cuda.driver.%s' % key] = label_value(value)
    if cuda_driver_version:
        parts = str(cuda_driver_version).split('.')
        for key, value in zip(('major', 'minor'), parts):
            labels['nvidia.com/cuda.runtime.%s' % key] = label_value(value)
    return labels
