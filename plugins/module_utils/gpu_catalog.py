# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Static knowledge about NVIDIA GPUs: architectures, MPS limits, MIG profile tables.

Facts come from NVIDIA's public documentation (CUDA compute capabilities, the MPS guide and the
MIG user guide). Nothing here talks to hardware.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

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

SHARING_STRATEGIES = ('exclusive', 'time-slicing', 'mps', 'mig', 'gpushare', 'volcano', 'hami', 'gpu-manager')

# MPS: supported by the NVIDIA device plugin and the MPS control daemon from Volta (CC 7.0).
# Client limit per device: 48 from Volta on; NVIDIA's MPS guide gives 16 for pre-Volta GPUs.
MPS_MIN_CC = (7, 0)


def architecture_from_cc(major, minor):
    """Best architecture name for a compute capability, or 'unknown'."""
    if major is None:
        return 'unknown'
    name = 'unknown'
    for (cc, arch) in _CC_ARCH:
        if (major, minor or 0) >= cc:
            name = arch
    return name


def architecture_name(nvml_arch, major=None, minor=None):
    """Architecture name from NVML's enum, falling back to the compute capability."""
    if nvml_arch in ARCHITECTURES:
        return ARCHITECTURES[nvml_arch]
    return architecture_from_cc(major, minor)


def mps_max_clients(major, minor):
    """Maximum MPS clients per GPU, or 0 when MPS is not supported for Kubernetes sharing."""
    if major is None:
        return 0
    if (major, minor or 0) < MPS_MIN_CC:
        return 0
    return 48


# MIG profiles per product, from NVIDIA's MIG user guide ("Supported MIG Profiles").
# Each entry: (profile name, GPU-instance profile id, max instances, memory GiB, compute slices)
_A100_40 = [
    ('1g.5gb', 19, 7, 5, 1), ('1g.5gb+me', 20, 1, 5, 1), ('1g.10gb', 15, 4, 10, 1),
    ('2g.10gb', 14, 3, 10, 2), ('3g.20gb', 9, 2, 20, 3), ('4g.20gb', 5, 1, 20, 4), ('7g.40gb', 0, 1, 40, 7),
]
_A100_80 = [
    ('1g.10gb', 19, 7, 10, 1), ('1g.10gb+me', 20, 1, 10, 1), ('1g.20gb', 15, 4, 20, 1),
    ('2g.20gb', 14, 3, 20, 2), ('3g.40gb', 9, 2, 40, 3), ('4g.40gb', 5, 1, 40, 4), ('7g.80gb', 0, 1, 80, 7),
]
_A30 = [
    ('1g.6gb', 14, 4, 6, 1), ('1g.6gb+me', 21, 1, 6, 1), ('2g.12gb', 5, 2, 12, 2),
    ('2g.12gb+me', 6, 1, 12, 2), ('4g.24gb', 0, 1, 24, 4),
]
_H100_94 = [
    ('1g.12gb', 19, 7, 12, 1), ('1g.12gb+me', 20, 1, 12, 1), ('1g.24gb', 15, 4, 24, 1),
    ('2g.24gb', 14, 3, 24, 2), ('3g.47gb', 9, 2, 47, 3), ('4g.47gb', 5, 1, 47, 4), ('7g.94gb', 0, 1, 94, 7),
]
_H200_141 = [
    ('1g.18gb', 19, 7, 18, 1), ('1g.18gb+me', 20, 1, 18, 1), ('1g.35gb', 15, 4, 35, 1),
    ('2g.35gb', 14, 3, 35, 2), ('3g.71gb', 9, 2, 71, 3), ('4g.71gb', 5, 1, 71, 4), ('7g.141gb', 0, 1, 141, 7),
]

# Matched in order against the upper-cased product name; first match wins.
_MIG_TABLES = [
    (('A100', '80GB'), _A100_80),
    (('A800', '80GB'), _A100_80),
    (('A100',), _A100_40),
    (('A800',), _A100_40),
    (('A30',), _A30),
    (('H100', 'NVL'), _H100_94),
    (('H100', '94GB'), _H100_94),
    (('H100',), _A100_80),
    (('H800',), _A100_80),
    (('H200',), _H200_141),
    (('GH200',), _H100_94),
]


def mig_profiles_for(product_name):
    """Known MIG profiles for a product name, as a list of dicts (empty when MIG is unknown)."""
    if not product_name:
        return []
    upper = product_name.upper()
    for keys, table in _MIG_TABLES:
        if all(k in upper for k in keys):
            return [
                {'name': n, 'id': pid, 'max_instances': count, 'memory_gib': mem, 'slices': sl, 'source': 'catalog'}
                for (n, pid, count, mem, sl) in table
            ]
    return []


def label_value(text):
    """Sanitise a string into a Kubernetes label value (the way GPU feature discovery does)."""

    value = re.sub(r'[^A-Za-z0-9._-]+', '-', str(text or '')).strip('-_.')
    return value[:63].rstrip('-_.')


def sharing_capabilities(gpus):
    """Which sharing strategies the hardware allows, with the reason when not."""
    caps = {
        'exclusive': {'allowed': bool(gpus)},
        'time-slicing': {'allowed': bool(gpus)},
        'gpushare': {'allowed': bool(gpus)},
        'hami': {'allowed': bool(gpus)},
        'volcano': {'allowed': bool(gpus)},
        'gpu-manager': {'allowed': bool(gpus)},
    }
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
        others = [str(g.get('index')) for g in gpus if g not in mig]
        caps['mig']['reason'] = ('GPU(s) %s are not MIG capable' % ', '.join(others)) if gpus else 'no NVIDIA GPU found'
    return caps


def node_labels(gpus, driver_version=None, cuda_driver_version=None):
    """Node labels in the names GPU feature discovery uses, from probed GPU facts."""
    if not gpus:
        return {}
    first = gpus[0]
    labels = {
        'nvidia.com/gpu.present': 'true',
        'nvidia.com/gpu.count': str(len(gpus)),
        'nvidia.com/gpu.product': label_value(first.get('name')),
        'nvidia.com/mig.capable': 'true' if first.get('mig_capable') else 'false',
    }
    if first.get('memory_total_mib') is not None:
        labels['nvidia.com/gpu.memory'] = str(first['memory_total_mib'])
    if first.get('compute_capability_major') is not None:
        labels['nvidia.com/gpu.compute.major'] = str(first['compute_capability_major'])
        labels['nvidia.com/gpu.compute.minor'] = str(first['compute_capability_minor'])
    if first.get('architecture') and first['architecture'] != 'unknown':
        labels['nvidia.com/gpu.family'] = first['architecture']
    if driver_version:
        parts = str(driver_version).split('.')
        for key, value in zip(('major', 'minor', 'rev'), parts):
            labels['nvidia.com/cuda.driver.%s' % key] = label_value(value)
    if cuda_driver_version:
        parts = str(cuda_driver_version).split('.')
        for key, value in zip(('major', 'minor'), parts):
            labels['nvidia.com/cuda.runtime.%s' % key] = label_value(value)
    return labels
