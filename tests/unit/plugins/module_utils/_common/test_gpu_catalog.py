# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog as cat


@pytest.mark.parametrize('major,minor,arch', [
    (3, 7, 'kepler'), (5, 2, 'maxwell'), (6, 0, 'pascal'), (7, 0, 'volta'), (7, 5, 'turing'),
    (8, 0, 'ampere'), (8, 6, 'ampere'), (8, 9, 'ada'), (9, 0, 'hopper'), (10, 0, 'blackwell'), (None, None, 'unknown'),
])
def test_architecture_from_cc(major, minor, arch):
    assert cat.architecture_from_cc(major, minor) == arch


def test_architecture_prefers_nvml_enum():
    assert cat.architecture_name(9, 8, 0) == 'hopper'
    assert cat.architecture_name(0xFFFFFFFF, 7, 5) == 'turing'


@pytest.mark.parametrize('major,minor,clients', [(6, 0, 0), (6, 1, 0), (7, 0, 48), (7, 5, 48), (9, 0, 48)])
def test_mps_clients(major, minor, clients):
    assert cat.mps_max_clients(major, minor) == clients


@pytest.mark.parametrize('name,first,count', [
    ('NVIDIA A100-SXM4-80GB', '1g.10gb', 7),
    ('NVIDIA A100-PCIE-40GB', '1g.5gb', 7),
    ('NVIDIA A30', '1g.6gb', 5),
    ('NVIDIA H100 80GB HBM3', '1g.10gb', 7),
    ('NVIDIA H100 NVL', '1g.12gb', 7),
    ('NVIDIA H200', '1g.18gb', 7),
])
def test_mig_tables(name, first, count):
    profiles = cat.mig_profiles_for(name)
    assert profiles[0]['name'] == first
    assert len(profiles) == count
    assert all(p['source'] == 'catalog' for p in profiles)


def test_no_mig_for_t4():
    assert cat.mig_profiles_for('Tesla T4') == []
    assert cat.mig_profiles_for(None) == []


def test_label_value_sanitises():
    assert cat.label_value('NVIDIA A100-SXM4-80GB') == 'NVIDIA-A100-SXM4-80GB'
    assert cat.label_value('Tesla T4 (rev a1)') == 'Tesla-T4-rev-a1'
    assert len(cat.label_value('x' * 100)) == 63


def _gpu(index, name, major, minor, mig=False, mem=15360):
    return {'index': index, 'name': name, 'compute_capability_major': major, 'compute_capability_minor': minor,
            'compute_capability': '%d.%d' % (major, minor), 'mig_capable': mig,
            'mig_profiles': cat.mig_profiles_for(name) if mig else [], 'memory_total_mib': mem,
            'architecture': cat.architecture_from_cc(major, minor)}


def test_sharing_refuses_mps_on_pascal_and_names_the_gpu():
    caps = cat.sharing_capabilities([_gpu(0, 'Tesla T4', 7, 5), _gpu(1, 'Tesla P100-PCIE-16GB', 6, 0)])
    assert caps['time-slicing']['allowed'] is True
    assert caps['mps']['allowed'] is False
    assert 'GPU 1 (Tesla P100-PCIE-16GB)' in caps['mps']['reason']
    assert '6.0' in caps['mps']['reason']
    assert caps['mig']['allowed'] is False


def test_sharing_allows_mig_on_a100():
    caps = cat.sharing_capabilities([_gpu(0, 'NVIDIA A100-SXM4-80GB', 8, 0, mig=True)])
    assert caps['mig']['allowed'] is True
    assert '3g.40gb' in caps['mig']['profiles']['0']
    assert caps['mps'] == {'allowed': True, 'max_clients': 48}


def test_sharing_without_gpus():
    caps = cat.sharing_capabilities([])
    assert not any(v['allowed'] for v in caps.values())


def test_node_labels_gfd_names():
    labels = cat.node_labels([_gpu(0, 'Tesla T4', 7, 5), _gpu(1, 'Tesla T4', 7, 5)], '535.183.01', '12.2')
    assert labels['nvidia.com/gpu.product'] == 'Tesla-T4'
    assert labels['nvidia.com/gpu.count'] == '2'
    assert labels['nvidia.com/gpu.memory'] == '15360'
    assert labels['nvidia.com/gpu.compute.major'] == '7'
    assert labels['nvidia.com/gpu.compute.minor'] == '5'
    assert labels['nvidia.com/mig.capable'] == 'false'
    assert labels['nvidia.com/gpu.family'] == 'turing'
    assert labels['nvidia.com/cuda.driver.major'] == '535'
    assert labels['nvidia.com/cuda.driver.rev'] == '01'
    assert labels['nvidia.com/cuda.runtime.minor'] == '2'
    assert cat.node_labels([]) == {}


def test_sharing_capabilities_cover_every_node_strategy_of_the_model():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NODE_STRATEGIES
    assert tuple(cat.sharing_capabilities([])) == NODE_STRATEGIES
    assert tuple(cat.sharing_capabilities([_gpu(0, 'Tesla T4', 7, 5)])) == NODE_STRATEGIES


# --- GFD-01..04 (docs/conformance/gpu-feature-discovery.md): the labels gpu_info writes the way GPU feature discovery
# writes them (NVIDIA/k8s-device-plugin internal/lm, v0.20.0; lab/tests/oracles/test_gfd_labels.py runs GFD v0.19.1)
@pytest.mark.parametrize('major,minor,family', [
    (1, 3, 'tesla'), (2, 1, 'fermi'), (3, 7, 'kepler'), (5, 2, 'maxwell'), (6, 0, 'pascal'), (7, 0, 'volta'),
    (7, 2, 'volta'), (7, 5, 'turing'), (8, 0, 'ampere'), (8, 6, 'ampere'), (8, 9, 'ada-lovelace'), (9, 0, 'hopper'),
    (10, 0, 'blackwell'), (12, 0, 'blackwell'), (13, 0, 'rubin'), (4, 0, 'undefined'), (11, 0, 'undefined'),
])
def test_GFD_01_family_from_the_compute_capability(major, minor, family):
    labels = cat.node_labels([_gpu(0, 'GPU', major, minor)])
    assert labels['nvidia.com/gpu.family'] == family


def test_GFD_01_no_family_without_a_compute_capability():
    gpu = dict(_gpu(0, 'NVIDIA L4', 8, 9), compute_capability_major=None, compute_capability_minor=None)
    labels = cat.node_labels([gpu])
    assert 'nvidia.com/gpu.family' not in labels and 'nvidia.com/gpu.compute.major' not in labels


def test_GFD_02_mig_capable_when_any_gpu_is():
    labels = cat.node_labels([_gpu(0, 'Tesla T4', 7, 5), _gpu(1, 'NVIDIA A100-PCIE-40GB', 8, 0, mig=True)])
    assert labels['nvidia.com/mig.capable'] == 'true'


def test_GFD_03_count_is_that_of_the_labelled_product():
    labels = cat.node_labels([_gpu(0, 'Tesla V100-SXM2-16GB', 7, 0), _gpu(1, 'Tesla V100-SXM2-32GB', 7, 0),
                              _gpu(2, 'Tesla V100-SXM2-16GB', 7, 0)])
    assert labels['nvidia.com/gpu.product'] == 'Tesla-V100-SXM2-16GB'
    assert labels['nvidia.com/gpu.count'] == '2'


@pytest.mark.parametrize('name,value', [
    ('NVIDIA A100-SXM4-80GB', 'NVIDIA-A100-SXM4-80GB'),
    ('Tesla T4 (rev a1)', 'Tesla-T4-rev-a1'),
    ('NVIDIA  RTX/A6000 x', 'NVIDIA-RTXA6000-x'),
    ('NVIDIA GeForce RTX 4090 D', 'NVIDIA-GeForce-RTX-4090-D'),
    ('a_b.c', 'a_b.c'),
])
def test_GFD_04_product_sanitised_as_gfd_does(name, value):
    assert cat.node_labels([_gpu(0, name, 8, 0)])['nvidia.com/gpu.product'] == value
