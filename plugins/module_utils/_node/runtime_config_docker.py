# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merge an OCI runtime into Docker's /etc/docker/daemon.json, keeping every other key."""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any


class DaemonJsonError(Exception):
    """daemon.json cannot be merged safely."""


def _indent_of(text: str) -> int | str:
    """The indentation the file uses (spaces or a tab), 2 spaces when it cannot be told."""
    m = re.search(r'\n([ \t]+)"', text)
    if not m:
        return 2
    ws = m.group(1)
    return '\t' if ws.startswith('\t') else len(ws)


def merge_daemon_json(text: str | None, runtime_name: str = 'nvidia', runtime_path: str = 'nvidia-container-runtime',
                      runtime_args: Sequence[str] | None = None, set_as_default: bool = False,
                      state: str = 'present') -> tuple[str | None, list[str]]:
    """Return (new_text, changes) for daemon.json text.

    changes is a list of human-readable strings; empty when the file already is as wanted, in which case
    new_text is text unchanged (byte for byte). Only `runtimes.<runtime_name>` and `default-runtime` are
    touched; all other keys, their order and values are kept. Keys inside the runtime's own entry other than
    `path` (and `runtimeArgs` when runtime_args is given) are kept too.
    """
    data: Any
    if text is None or not text.strip():
        data = {}
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise DaemonJsonError('is not valid JSON (%s); fix or remove it first, nothing was changed' % e)
    if not isinstance(data, dict):
        raise DaemonJsonError('must hold a JSON object, found %s; nothing was changed' % type(data).__name__)
    new = copy.deepcopy(data)
    changes = []
    runtimes = new.get('runtimes')
    if runtimes is not None and not isinstance(runtimes, dict):
        raise DaemonJsonError('key "runtimes" must be an object, found %s; nothing was changed' % type(runtimes).__name__)

    if state == 'present':
        if runtimes is None:
            runtimes = new['runtimes'] = {}
        entry = runtimes.get(runtime_name)
        if entry is not None and not isinstance(entry, dict):
            raise DaemonJsonError('runtimes.%s must be an object, found %s; nothing was changed'
                                  % (runtime_name, type(entry).__name__))
        entry = dict(entry or {})
        if entry.get('path') != runtime_path:
            changes.append('runtimes.%s.path: %s -> %s' % (runtime_name, entry.get('path'), runtime_path))
            entry['path'] = runtime_path
        if runtime_args is not None and entry.get('runtimeArgs', []) != list(runtime_args):
            changes.append('runtimes.%s.runtimeArgs: %s -> %s' % (runtime_name, entry.get('runtimeArgs'), list(runtime_args)))
            if runtime_args:
                entry['runtimeArgs'] = list(runtime_args)
            else:
                entry.pop('runtimeArgs', None)
        runtimes[runtime_name] = entry
        if set_as_default and new.get('default-runtime') != runtime_name:
            changes.append('default-runtime: %s -> %s' % (new.get('default-runtime'), runtime_name))
            new['default-runtime'] = runtime_name
    else:
        if runtimes is not None and runtime_name in runtimes:
            changes.append('runtimes.%s removed' % runtime_name)
            del runtimes[runtime_name]
            if not runtimes:
                del new['runtimes']
    if not set_as_default or state == 'absent':
        if new.get('default-runtime') == runtime_name:
            changes.append('default-runtime: %s removed (Docker falls back to runc)' % runtime_name)
            del new['default-runtime']

    if new == data:
        return text, []
    return json.dumps(new, indent=_indent_of(text or '')) + '\n', changes
