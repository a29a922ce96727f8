# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CUDA MPS outside Kubernetes: validation and the systemd unit for ``nvidia-cuda-mps-control``.

Facts from NVIDIA's MPS documentation: the control daemon is started with ``nvidia-cuda-mps-control -d``,
finds its pipes and logs through ``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY``, takes the commands
``set_default_active_thread_percentage <pct>``, ``set_default_device_pinned_mem_limit <dev> <limit>`` and
``quit`` on its standard input, and MPS needs compute capability 7.0 (Volta) or newer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_catalog import MPS_MIN_CC
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError

MPS_DEFAULTS = {
    'state': 'present',
    'pipe_directory': '/tmp/nvidia-mps',
    'log_directory': '/var/log/nvidia-mps',
    'active_thread_percentage': None,
    'pinned_device_mem_limit': None,
    'unit_path': '/etc/systemd/system/nvidia-mps.service',
    'user': 'root',
    'control_binary': '/usr/bin/nvidia-cuda-mps-control',
}

_LIMIT_RE = re.compile(r'^(\d+)\s*=\s*(\d+)\s*([KMGT]?)B?$', re.IGNORECASE)
_SAFE_PATH_RE = re.compile(r'^/[A-Za-z0-9._/@+-]*$')
_USER_RE = re.compile(r'^[a-z_][a-z0-9_-]*[$]?$')


def check_compute_capability(gpus: Iterable[Mapping[str, Any]]) -> None:
    """Refuse MPS when a GPU is older than Volta. ``gpus``: dicts with index, name, compute_capability (major, minor)."""
    bad = []
    for g in gpus:
        cc = g.get('compute_capability')
        if cc is None or cc[0] is None:
            bad.append('GPU %s (%s): compute capability unknown' % (g.get('index'), g.get('name')))
        elif tuple(cc) < MPS_MIN_CC:
            bad.append('GPU %s (%s) has compute capability %d.%d' % (g.get('index'), g.get('name'), cc[0], cc[1]))
    if bad:
        raise SharingError('mps: refused; %s; MPS needs compute capability >= %d.%d (Volta or newer). '
                           'Leave such GPUs out with the gpus option.' % ('; '.join(bad), MPS_MIN_CC[0], MPS_MIN_CC[1]))


def parse_pinned_limits(value: Any, device_count: int) -> list[tuple[int, str]]:
    """'0=2G,1=4096M' (or a list of such items) -> [(0, '2G'), (1, '4096M')], validated."""
    if value is None or value == '' or value == []:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(',')
    out: list[tuple[int, str]] = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        m = _LIMIT_RE.match(text)
        if not m:
            raise SharingError("mps.pinned_device_mem_limit: '%s' is not allowed; use DEVICE=SIZE with a size in "
                               "K, M, G or T, for example '0=2G' or '0=2G,1=4096M'" % text)
        dev, num, unit = int(m.group(1)), int(m.group(2)), (m.group(3) or '').upper()
        if dev >= device_count:
            raise SharingError("mps.pinned_device_mem_limit: device %d in '%s' is out of range; the MPS daemon sees %d "
                               "GPU(s), CUDA device ordinals 0-%d" % (dev, text, device_count, device_count - 1))
        if num <= 0:
            raise SharingError("mps.pinned_device_mem_limit: '%s' is not allowed; the size must be > 0" % text)
        if dev in [d for d, dummy in out]:
            raise SharingError("mps.pinned_device_mem_limit: device %d is given twice" % dev)
        out.append((dev, '%d%s' % (num, unit)))
    return out


def validate(mps: Mapping[str, Any], device_count: int) -> list[tuple[int, str]]:
    """Check the ``mps`` option (defaults applied); returns the pinned limits list."""
    pct = mps.get('active_thread_percentage')
    if pct is not None and not 1 <= int(pct) <= 100:
        raise SharingError('mps.active_thread_percentage: %s is not allowed; use 1-100' % pct)
    for key in ('pipe_directory', 'log_directory', 'unit_path', 'control_binary'):
        path = mps.get(key)
        if not path or not _SAFE_PATH_RE.match(path) or '/../' in path + '/':
            raise SharingError("mps.%s: '%s' is not allowed; use an absolute path of letters, digits and ._/@+-"
                               % (key, path))
    if not _USER_RE.match(mps.get('user') or ''):
        raise SharingError("mps.user: '%s' is not a valid user name" % mps.get('user'))
    if not mps['unit_path'].endswith('.service'):
        raise SharingError("mps.unit_path: '%s' is not allowed; a systemd service unit ends in .service" % mps['unit_path'])
    return parse_pinned_limits(mps.get('pinned_device_mem_limit'), device_count)


def render_unit(mps: Mapping[str, Any], limits: Iterable[tuple[int, str]],
                visible_devices: Sequence[str] | None = None) -> str:
    """The systemd unit text for the MPS control daemon."""
    ctl = mps['control_binary']
    pipe = mps['pipe_directory']
    log = mps['log_directory']
    user = mps.get('user') or 'root'
    lines = [
        '# Managed by Ansible (gpuops.k8s_gpu.gpu_sharing); local changes are overwritten.',
        '[Unit]',
        'Description=NVIDIA CUDA MPS control daemon',
        'After=nvidia-persistenced.service',
        '',
        '[Service]',
        'Type=forking',
        'User=%s' % user,
    ]
    if visible_devices:
        lines.append('Environment=CUDA_VISIBLE_DEVICES=%s' % ','.join(visible_devices))
    lines += [
        'Environment=CUDA_MPS_PIPE_DIRECTORY=%s' % pipe,
        'Environment=CUDA_MPS_LOG_DIRECTORY=%s' % log,
        # '+': run with full privileges, so a non-root daemon gets its directories after a reboot cleared /tmp
        'ExecStartPre=+/usr/bin/install -d -m 0755 -o %s %s %s' % (user, pipe, log),
        'ExecStart=%s -d' % ctl,
    ]
    pct = mps.get('active_thread_percentage')
    if pct is not None:
        lines.append("ExecStartPost=/bin/sh -c 'echo set_default_active_thread_percentage %d | %s'" % (int(pct), ctl))
    for dev, size in limits:
        lines.append("ExecStartPost=/bin/sh -c 'echo set_default_device_pinned_mem_limit %d %s | %s'" % (dev, size, ctl))
    lines += [
        "ExecStop=/bin/sh -c 'echo quit | %s'" % ctl,
        'Restart=on-failure',
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
    ]
    return '\n'.join(lines)
