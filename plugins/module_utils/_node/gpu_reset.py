# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's repair on the node (issue #41): a GPU reset with ``nvidia-smi -r -i <uuid>``, bounded tries.

NVML has no public reset call; nvidia-smi's reset refuses while any client holds the GPU ("In use by another client",
"is currently in use by another process": CUDA processes, nvidia-persistenced, Fabric Manager, the nvidia_drm module;
NVIDIA/gpu-operator#118, NVIDIA/mig-parted#181) and answers "Resetting GPU <bus> is not supported." where the GPU
cannot be reset from here, as for a GPU passed through to a VM (NVIDIA/gpu-operator#1606). docs/conformance/
remediation.md REM-06, REM-10.

``run`` is ``module.run_command``-like: run(argv) -> (rc, stdout, stderr); ``sleep`` is replaceable in tests.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

RESET_OK = 'reset'
IN_USE = 'in_use'
NOT_SUPPORTED = 'not_supported'
ERROR = 'error'
_OK_RE = re.compile(r'was successfully reset', re.I)
_IN_USE_RE = re.compile(r'in use by another client|currently in use by another process|'
                        r'currently being used by one or more other processes', re.I)
_NOT_SUPPORTED_RE = re.compile(r'(resetting gpu .* is )?not supported', re.I)
UUID_RE = re.compile(r'^GPU-[0-9A-Fa-f-]+$')


class ResetError(ValueError):
    pass


def classify(rc: int, out: str | None, err: str | None) -> str:
    """RESET_OK, IN_USE, NOT_SUPPORTED or ERROR for one ``nvidia-smi -r`` answer."""
    text = '%s\n%s' % (out or '', err or '')
    if rc == 0 and _OK_RE.search(text):
        return RESET_OK
    if _IN_USE_RE.search(text):
        return IN_USE
    if _NOT_SUPPORTED_RE.search(text):
        return NOT_SUPPORTED
    return RESET_OK if rc == 0 else ERROR


def compute_apps(run: Callable[..., Any], nvidia_smi: str) -> dict[str, list[tuple[str, str]]]:
    """{gpu uuid: [(pid, name)]} of the compute processes nvidia-smi lists; raises ResetError when it cannot."""
    rc, out, err = run([nvidia_smi, '--query-compute-apps=gpu_uuid,pid,process_name', '--format=csv,noheader'])
    if rc != 0:
        raise ResetError('%s --query-compute-apps failed (rc=%s): %s' % (nvidia_smi, rc, (err or out).strip()))
    apps: dict[str, list[tuple[str, str]]] = {}
    for line in (out or '').splitlines():
        parts = [p.strip() for p in line.split(',')]
        if len(parts) >= 3 and parts[0].startswith('GPU-'):
            apps.setdefault(parts[0], []).append((parts[1], ','.join(parts[2:])))
    return apps


def reset_gpus(run: Callable[..., Any], uuids: Sequence[str], nvidia_smi: str = 'nvidia-smi', tries: int = 3,
               delay: float = 5, check_mode: bool = False,
               sleep: Callable[[float], Any] = time.sleep) -> list[dict[str, Any]]:
    """Reset each GPU of ``uuids``: refused up front when a compute process runs on it; ``tries`` attempts, ``delay``
    seconds apart, while nvidia-smi answers that the GPU is in use; none more after "not supported" or another error.

    Returns [{'uuid', 'result', 'tries', 'message'}], result one of RESET_OK, IN_USE, NOT_SUPPORTED, ERROR or
    'would_reset' (check mode) or 'processes' (compute processes on it)."""
    for u in uuids:
        if not UUID_RE.match(u):
            raise ResetError('uuids: %r is not a GPU UUID (GPU-..., as nvidia-smi -L prints it; a MIG device is reset '
                             'with its GPU)' % u)
    if tries < 1 or delay < 0:
        raise ResetError('tries must be 1 or more and delay 0 or more (got tries=%s, delay=%s)' % (tries, delay))
    apps = compute_apps(run, nvidia_smi)
    out = []
    for u in uuids:
        if apps.get(u):
            out.append({'uuid': u, 'result': 'processes', 'tries': 0, 'message': 'compute processes on the GPU: %s'
                        % ', '.join('%s (%s)' % p for p in apps[u])})
            continue
        if check_mode:
            out.append({'uuid': u, 'result': 'would_reset', 'tries': 0, 'message': ''})
            continue
        n, result, message = 0, ERROR, ''
        while n < tries:
            n += 1
            rc, so, se = run([nvidia_smi, '-r', '-i', u])
            result, message = classify(rc, so, se), ((so or '') + (se or '')).strip()
            if result != IN_USE or n >= tries:
                break
            sleep(delay)
        out.append({'uuid': u, 'result': result, 'tries': n, 'message': message[:500]})
    return out
