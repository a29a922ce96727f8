# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MPS validation and unit rendering."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_mps as mps
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError


def settings(**kw):
    out = dict(mps.MPS_DEFAULTS)
    out.update(kw)
    return out


def test_cc_below_7_refused_names_gpu_value_and_rule():
    gpus = [{'index': 0, 'name': 'Tesla T4', 'compute_capability': (7, 5)},
            {'index': 2, 'name': 'Tesla P100-PCIE-16GB', 'compute_capability': (6, 0)}]
    with pytest.raises(SharingError) as err:
        mps.check_compute_capability(gpus)
    msg = str(err.value)
    assert 'GPU 2 (Tesla P100-PCIE-16GB) has compute capability 6.0' in msg
    assert '>= 7.0' in msg and 'Tesla T4' not in msg
    mps.check_compute_capability(gpus[:1])   # T4 (7.5) is fine


def test_cc_unknown_refused():
    with pytest.raises(SharingError) as err:
        mps.check_compute_capability([{'index': 0, 'name': 'x', 'compute_capability': None}])
    assert 'unknown' in str(err.value)


def test_pinned_limits():
    assert mps.parse_pinned_limits('0=2G, 1=4096m', 2) == [(0, '2G'), (1, '4096M')]
    assert mps.parse_pinned_limits(None, 1) == []
    for bad, needle in (('0:2G', 'DEVICE=SIZE'), ('2=1G', 'out of range'), ('0=0G', '> 0'), ('0=1G,0=2G', 'twice')):
        with pytest.raises(SharingError) as err:
            mps.parse_pinned_limits(bad, 2)
        assert needle in str(err.value)


@pytest.mark.parametrize('kw,needle', [
    ({'active_thread_percentage': 0}, '1-100'),
    ({'active_thread_percentage': 101}, '1-100'),
    ({'pipe_directory': 'relative'}, 'pipe_directory'),
    ({'log_directory': '/var/log/a b'}, 'log_directory'),
    ({'unit_path': '/etc/systemd/system/nvidia-mps'}, '.service'),
    ({'user': 'Bad User'}, 'user'),
    ({'control_binary': '/usr/bin/../x'}, 'control_binary'),
])
def test_validate_refusals(kw, needle):
    with pytest.raises(SharingError) as err:
        mps.validate(settings(**kw), 1)
    assert needle in str(err.value)


def test_render_unit():
    text = mps.render_unit(settings(active_thread_percentage=40, user='mps'), [(0, '2G')], ['GPU-a', 'GPU-b'])
    lines = text.splitlines()
    assert '[Service]' in lines and '[Install]' in lines and 'WantedBy=multi-user.target' in lines
    assert 'User=mps' in lines
    assert 'Environment=CUDA_VISIBLE_DEVICES=GPU-a,GPU-b' in lines
    assert 'Environment=CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps' in lines
    assert 'Environment=CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps' in lines
    assert 'ExecStartPre=+/usr/bin/install -d -m 0755 -o mps /tmp/nvidia-mps /var/log/nvidia-mps' in lines
    assert 'ExecStart=/usr/bin/nvidia-cuda-mps-control -d' in lines
    assert "ExecStartPost=/bin/sh -c 'echo set_default_active_thread_percentage 40 | /usr/bin/nvidia-cuda-mps-control'" in lines
    assert "ExecStartPost=/bin/sh -c 'echo set_default_device_pinned_mem_limit 0 2G | /usr/bin/nvidia-cuda-mps-control'" in lines
    assert "ExecStop=/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'" in lines
    assert text.endswith('\n')


def test_render_unit_minimal_is_stable():
    a = mps.render_unit(settings(), [])
    assert a == mps.render_unit(settings(), [])
    assert 'ExecStartPost' not in a and 'CUDA_VISIBLE_DEVICES' not in a
