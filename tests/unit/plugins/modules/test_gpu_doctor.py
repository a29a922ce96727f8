# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_doctor's node extras: the registered dkms module name (for the driver_not_loaded advice) and the machine
(for the Secure Boot advice's signatures package)."""
import os

from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_doctor as mod


class FakeModule(object):
    params = {'cdi_required': False}

    def get_bin_path(self, name):
        return None


def test_DRV_32_gather_extra_names_the_registered_dkms_module(monkeypatch):
    calls = []

    def dkms_state(root, kernel_release, version=None):
        calls.append((root, kernel_release))
        return {'module': 'nvidia-srv', 'registered': True}

    monkeypatch.setattr(mod.nvidia_driver, 'dkms_state', dkms_state)
    extra = mod.gather_extra(FakeModule(), {'node': {}}, None)
    assert extra['dkms_module'] == 'nvidia-srv'
    assert calls == [('/', os.uname()[2])]
    assert extra['machine'] == os.uname()[4]


class ClusterModule(object):
    def __init__(self, **params):
        self.params = dict({'kubernetes_version': None, 'scheduler_config_path': None, 'extender_urls': [],
                            'cluster_images': [], 'dra': None}, **params)


def test_DRAL_14_cluster_extra_passes_dra_and_the_device_plugin_sockets(monkeypatch, tmp_path):
    """Given dra, the NVIDIA device plugin's sockets in the kubelet's device-plugins directory (nvidia-<name>.sock)
    go to the dra check; other plugins' sockets do not. Without dra nothing is read."""
    for name in ('nvidia-gpu.sock', 'nvidia-mig-1g.10gb.sock', 'kubelet.sock', 'other-vendor.sock'):
        (tmp_path / name).write_text('')
    monkeypatch.setattr(mod, 'DEVICE_PLUGIN_DIR', str(tmp_path))
    assert 'dra' not in mod.cluster_extra(ClusterModule())
    dra = {'node_name': 'n', 'api_versions': ['resource.k8s.io/v1'], 'resource_slices': None, 'allocatable': None}
    extra = mod.cluster_extra(ClusterModule(dra=dra))
    assert extra['dra'] == dra
    assert extra['device_plugin_sockets'] == [str(tmp_path / 'nvidia-gpu.sock'),
                                              str(tmp_path / 'nvidia-mig-1g.10gb.sock')]
