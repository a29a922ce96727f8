# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_doctor's node extras: the registered dkms module name (for the driver_not_loaded advice) and the machine
(for the Secure Boot advice's signatures package)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
