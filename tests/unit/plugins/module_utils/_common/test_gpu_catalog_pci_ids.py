# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_catalog.PCI_ID_RANGES, checked id by id: the architecture the driver role's `auto` kernel module flavour
starts from, for a GPU seen only on the PCI bus (row DRV-29 of docs/conformance/nvidia-driver.md).

The table is written from two sources (read 2026-11-24):
  P: the PCI ID Repository's pci.ids, Version 2023.04.10 (Debian package pci.ids 0.0~2023.04.11-1,
     /usr/share/misc/pci.ids), vendor 10de: the chip name (GP100, GV100, TU104, GA100, AD102, GH100, ...) of each id.
  R: NVIDIA/open-gpu-kernel-modules README.md at tag 595.45.04, the table of GPUs the open kernel modules support
     (product name and PCI device id; Turing and newer, so it names GH200, GB200, B200, B300, RTX PRO 6000, H20 ...
     that pci.ids 2023 does not know yet).
"""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver_select as sel

# (device id, product / chip as the source names it, architecture, source)
TABLE = [
    # Kepler
    ('1023', 'GK110BGL Tesla K40m', 'kepler', 'P'),
    ('102d', 'GK210GL Tesla K80', 'kepler', 'P'),
    ('1180', 'GK104 GeForce GTX 680', 'kepler', 'P'),
    ('1287', 'GK208B GeForce GT 730', 'kepler', 'P'),
    # Maxwell
    ('13bd', 'GM107GL Tesla M10', 'maxwell', 'P'),
    ('13f2', 'GM204GL Tesla M60', 'maxwell', 'P'),
    ('17fd', 'GM200GL Tesla M40', 'maxwell', 'P'),
    # Pascal
    ('15f7', 'GP100GL Tesla P100 PCIe 12GB', 'pascal', 'P'),
    ('15f9', 'GP100GL Tesla P100 SXM2 16GB', 'pascal', 'P'),
    ('1725', 'GP100 (an id inside Maxwell\'s block)', 'pascal', 'P'),
    ('172f', 'GP100', 'pascal', 'P'),
    ('1b38', 'GP102GL Tesla P40', 'pascal', 'P'),
    ('1bb3', 'GP104GL Tesla P4', 'pascal', 'P'),
    # Volta
    ('1d81', 'GV100 TITAN V', 'volta', 'P'),
    ('1db1', 'GV100GL Tesla V100 SXM2 16GB', 'volta', 'P'),
    ('1db6', 'GV100GL Tesla V100 PCIe 32GB', 'volta', 'P'),
    ('1df6', 'GV100GL Tesla V100S PCIe 32GB', 'volta', 'P'),
    # Turing
    ('1e02', 'NVIDIA TITAN RTX', 'turing', 'R'),
    ('1eb8', 'Tesla T4', 'turing', 'R'),
    ('2182', 'TU116 GeForce GTX 1660 Ti', 'turing', 'P'),
    # Ampere
    ('20b0', 'NVIDIA A100-SXM4-40GB', 'ampere', 'R'),
    ('20b5', 'NVIDIA A100 80GB PCIe', 'ampere', 'R'),
    ('20b7', 'NVIDIA A30', 'ampere', 'R'),
    ('20f3', 'NVIDIA A800-SXM4-80GB', 'ampere', 'R'),
    ('20f5', 'NVIDIA A800 80GB PCIe', 'ampere', 'R'),
    ('2235', 'NVIDIA A40', 'ampere', 'R'),
    ('2236', 'NVIDIA A10', 'ampere', 'R'),
    ('25b0', 'NVIDIA RTX A1000', 'ampere', 'R'),
    # Ada
    ('26b5', 'NVIDIA L40', 'ada', 'R'),
    ('26b9', 'NVIDIA L40S', 'ada', 'R'),
    ('26ba', 'NVIDIA L20', 'ada', 'R'),
    ('27b8', 'NVIDIA L4', 'ada', 'R'),
    ('2822', 'NVIDIA GeForce RTX 3050 A Laptop GPU (an Ada chip)', 'ada', 'R'),
    # Hopper
    ('2321', 'NVIDIA H100 NVL', 'hopper', 'R'),
    ('2322', 'NVIDIA H800 PCIe', 'hopper', 'R'),
    ('2324', 'NVIDIA H800', 'hopper', 'R'),
    ('2329', 'NVIDIA H20', 'hopper', 'R'),
    ('230e', 'NVIDIA H20 NVL16', 'hopper', 'R'),
    ('2330', 'NVIDIA H100 80GB HBM3', 'hopper', 'R'),
    ('2331', 'NVIDIA H100 PCIe', 'hopper', 'R'),
    ('2335', 'NVIDIA H200', 'hopper', 'R'),
    ('233b', 'NVIDIA H200 NVL', 'hopper', 'R'),
    # Grace Hopper
    ('2342', 'NVIDIA GH200 120GB', 'grace-hopper', 'R'),
    ('2348', 'NVIDIA GH200 144G HBM3e', 'grace-hopper', 'R'),
    # Blackwell
    ('2901', 'NVIDIA B200', 'blackwell', 'R'),
    ('2941', 'NVIDIA GB200', 'blackwell', 'R'),
    ('2b85', 'NVIDIA GeForce RTX 5090', 'blackwell', 'R'),
    ('2bb1', 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition', 'blackwell', 'R'),
    ('2bb5', 'NVIDIA RTX PRO 6000 Blackwell Server Edition', 'blackwell', 'R'),
    ('2c34', 'NVIDIA RTX PRO 4000 Blackwell', 'blackwell', 'R'),
    ('2e12', 'NVIDIA GB10', 'blackwell', 'R'),
    ('3182', 'NVIDIA B300 SXM6 AC', 'blackwell', 'R'),
    ('31c2', 'NVIDIA GB300', 'blackwell', 'R'),
]

# ids that pci.ids 2023.04.10 names as older chips (Fermi GF1xx, Tesla-generation GT2xx) lying between Kepler's
# blocks: no supported branch drives them, so they must not count as Kepler
PRE_KEPLER = [
    ('1040', 'GF119 GeForce GT 520'),
    ('1094', 'GF110GL Tesla M2075'),
    ('10c3', 'GT218 GeForce 8400 GS Rev. 3'),
    ('1140', 'GF117M GeForce 610M'),
    ('1200', 'GF114 GeForce GTX 560 Ti'),
    ('1251', 'GF116M GeForce GT 560M'),
]


@pytest.mark.parametrize('device_id, name, arch, source', TABLE, ids=[row[0] + ' ' + row[1] for row in TABLE])
def test_DRV_29_pci_device_id_architecture(device_id, name, arch, source):
    assert gpu_catalog.architecture_from_pci_id(device_id) == arch
    assert gpu_catalog.architecture_from_pci_id('0x' + device_id.upper()) == arch


@pytest.mark.parametrize('device_id, name', PRE_KEPLER)
def test_DRV_29_pre_kepler_ids_are_not_kepler(device_id, name):
    assert gpu_catalog.architecture_from_pci_id(device_id) == 'unknown'


def test_DRV_29_table_spans_every_architecture_the_role_decides_on():
    assert set(row[2] for row in TABLE) == set(sel.ARCH_ORDER)


def test_DRV_29_auto_flavour_from_the_table():
    # the architectures above drive the auto flavour: P100 is not Turing (proprietary), GH200 needs open
    assert sel.decide_flavour('auto', '580', [gpu_catalog.architecture_from_pci_id('1725')])[0] == 'proprietary'
    assert sel.decide_flavour('auto', '580', [gpu_catalog.architecture_from_pci_id('2342')])[0] == 'open'
    with pytest.raises(sel.SelectionError):
        sel.decide_flavour('open', '580', [gpu_catalog.architecture_from_pci_id('172f')])
