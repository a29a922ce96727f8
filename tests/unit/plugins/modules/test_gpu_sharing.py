# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_sharing module's main(): argument handling, refusals, the MPS unit file, check and diff output."""
import json

import pytest


from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_sharing
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_nvml


class Backend(object):
    """Two GPUs: a T4 (CC 7.5) and a P100 (CC 6.0); neither has MIG."""
    calls = []

    def init(self):
        pass

    def shutdown(self):
        pass

    def gpus(self):
        return [self.gpu(0), self.gpu(1)]

    def gpu(self, index):
        name, cc = (('Tesla T4', (7, 5)), ('Tesla P100-PCIE-16GB', (6, 0)))[index]
        return {'index': index, 'name': name, 'uuid': 'GPU-%d' % index, 'pci_device_id': 0, 'compute_capability': cc,
                'persistence_mode': True, 'compute_mode': 'default', 'mig_capable': False, 'mig_current': None,
                'mig_pending': None, 'mig_profiles': {}, 'mig_profile_source': None, 'mig_instances': []}

    def set_compute_mode(self, index, mode):
        Backend.calls.append(('compute_mode', index, mode))


def run(monkeypatch, capsys, args):
    monkeypatch.setattr(gpu_sharing_nvml, 'HAS_PYNVML', True)
    monkeypatch.setattr(gpu_sharing_nvml, 'NvmlBackend', Backend)
    Backend.calls = []
    with module_args(args):
        with pytest.raises(SystemExit):
            gpu_sharing.main()
    return json.loads(capsys.readouterr().out)


def test_missing_pynvml_names_the_package(monkeypatch, capsys):
    monkeypatch.setattr(gpu_sharing_nvml, 'HAS_PYNVML', False)
    with module_args({}):
        with pytest.raises(SystemExit):
            gpu_sharing.main()
    res = json.loads(capsys.readouterr().out)
    assert res['failed'] is True and 'nvidia-ml-py' in res['msg']


def test_mps_refused_on_p100_changes_nothing(monkeypatch, capsys, tmp_path):
    unit = tmp_path / 'nvidia-mps.service'
    res = run(monkeypatch, capsys, {'compute_mode': 'exclusive_process', 'mps': {'unit_path': str(unit)}})
    assert res['failed'] is True and res['changed'] is False
    assert 'GPU 1 (Tesla P100-PCIE-16GB) has compute capability 6.0' in res['msg']
    assert Backend.calls == [] and not unit.exists()


def test_mps_unit_check_mode_then_write_then_idempotent(monkeypatch, capsys, tmp_path):
    unit = tmp_path / 'etc' / 'nvidia-mps.service'
    mps = {'unit_path': str(unit), 'pipe_directory': str(tmp_path / 'pipe'), 'log_directory': str(tmp_path / 'log'),
           'pinned_device_mem_limit': '0=1G'}
    args = {'gpus': ['0'], 'compute_mode': 'exclusive_process', 'mps': mps}
    res = run(monkeypatch, capsys, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert res['changed'] is True and res['mps_unit_changed'] is True and not unit.exists()
    assert Backend.calls == []
    assert res['actions'][0] == 'GPU 0: set compute mode exclusive_process (was default)'
    assert 'create directory %s' % (tmp_path / 'pipe') in res['actions']
    assert 'set_default_device_pinned_mem_limit 0 1G' in res['diff'][1]['after']
    res = run(monkeypatch, capsys, {'gpus': ['0'], 'mps': mps})
    assert res['changed'] is True and unit.exists() and (tmp_path / 'pipe').is_dir()
    assert 'CUDA_VISIBLE_DEVICES=GPU-0' in unit.read_text()
    res = run(monkeypatch, capsys, {'gpus': ['0'], 'mps': mps})
    assert res['changed'] is False and res['mps_unit_changed'] is False and res['actions'] == []


def test_mig_mode_and_mig_config_are_exclusive(monkeypatch, capsys):
    res = run(monkeypatch, capsys, {'mig_mode': 'enabled', 'mig_config': {'version': 'v1'}})
    assert res['failed'] is True and 'mutually exclusive' in res['msg']


def test_mig_on_t4_refused(monkeypatch, capsys):
    res = run(monkeypatch, capsys, {'gpus': ['GPU-0'], 'mig_mode': 'enabled'})
    assert res['failed'] is True and 'GPU 0 (Tesla T4)' in res['msg'] and 'MIG-capable GPUs on this node: none' in res['msg']
