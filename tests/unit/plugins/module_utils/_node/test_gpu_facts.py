# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_facts
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe, nvml_probe


def test_pci_fallback_when_driver_not_loaded(monkeypatch):
    monkeypatch.setattr(nvml_probe, 'probe', lambda include_mig_profiles=True: {
        'status': 'driver_not_loaded', 'driver_version': None, 'cuda_driver_version': None,
        'nvml_version': None, 'gpus': [], 'error': 'Driver Not Loaded'})
    monkeypatch.setattr(node_probe, 'node_facts', lambda root='/', log_lines=None, run=None: {
        'pci_gpus': [{'pci_bus_id': '0000:3b:00.0', 'pci_device_id': '0x1eb8', 'name': 'TU104GL [Tesla T4]',
                      'driver': None, 'pci_class': '0x0302'}],
        'nvswitches': []})
    facts = gpu_facts.gather()
    assert facts['source'] == 'pci'
    assert facts['gpu_count'] == 1
    assert facts['gpus'][0]['name'] == 'TU104GL [Tesla T4]'
    assert facts['labels'] == {}
    assert facts['sharing']['time-slicing']['allowed'] is False


def test_nvml_source_derives_labels(monkeypatch):
    gpu = {'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360, 'compute_capability': '7.5',
           'compute_capability_major': 7, 'compute_capability_minor': 5, 'architecture': 'turing',
           'mig_capable': False, 'mig_profiles': []}
    monkeypatch.setattr(nvml_probe, 'probe', lambda include_mig_profiles=True: {
        'status': 'ok', 'driver_version': '535.183.01', 'cuda_driver_version': '12.2', 'nvml_version': '12.535',
        'gpus': [gpu], 'error': None})
    facts = gpu_facts.gather(with_node=False)
    assert facts['node'] == {}
    assert facts['source'] == 'nvml'
    assert facts['labels']['nvidia.com/gpu.product'] == 'Tesla-T4'
    assert facts['sharing']['mps']['allowed'] is True
