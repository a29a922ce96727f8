# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""File helpers shared by the modules that write files: read what is there, back it up, write atomically.

Every module that writes a file goes through these: read_text/read_bytes (the "before" of the diff),
replace_file (back up when asked, then write atomically or delete), write_atomic and backup_copy."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Protocol

from ansible.module_utils.common.text.converters import to_text


class Mover(Protocol):
    """What these helpers use of an AnsibleModule: its atomic_move."""

    def atomic_move(self, src: str, dest: str, unsafe_writes: bool = False) -> None:
        """Move src over dest atomically, keeping dest's mode and owner."""


def read_bytes(path):
    # type: (str) -> bytes | None
    """The file's bytes, or None when it does not exist or cannot be read."""
    try:
        with open(path, 'rb') as f:
            return f.read()
    except (IOError, OSError):
        return None


def read_text(path):
    # type: (str) -> str | None
    """The file's text (UTF-8; undecodable bytes kept as surrogates), or None when it does not exist. Read errors of
    an existing file propagate (unlike read_bytes): a module must not take an unreadable file for a missing one."""
    if not os.path.exists(path):
        return None
    with open(path, 'rb') as f:
        return to_text(f.read(), errors='surrogate_or_strict')


def write_atomic(module: Mover, path: str, data: bytes, mode: int | None = None, stage_dir: str | None = None) -> None:
    """Write data (bytes) to path through a temporary file and module.atomic_move.

    The temporary file lives next to path, or in stage_dir (created 0700) for directories whose every file a
    program reads (the kubelet's static pod manifests). The directory is created (0755) when missing. With mode,
    the file gets that mode; without, an existing file keeps its mode and owner (atomic_move copies them) and a new
    one gets 0644.
    """
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    stage = stage_dir or directory
    if not os.path.isdir(stage):
        os.makedirs(stage, 0o700)
    fd, tmp = tempfile.mkstemp(dir=stage, prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
        if mode is None and not os.path.exists(path):
            os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path, unsafe_writes=False)
        if mode is not None:
            os.chmod(path, mode)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def backup_copy(path: str, directory: str | None = None, dir_mode: int = 0o700) -> str:
    """Copy path to DIRECTORY/NAME.PID.TIMESTAMP~ (directory: the file's own by default, created with dir_mode) and
    return the copy's path. Tools that read every file of a drop-in folder (apt, CRI-O) need the copy outside it."""
    directory = directory or os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, dir_mode)
    stamp = time.strftime('%Y-%m-%d@%H:%M:%S', time.localtime())
    dest = os.path.join(directory, '%s.%d.%s~' % (os.path.basename(path), os.getpid(), stamp))
    shutil.copy2(path, dest)
    return dest


def replace_file(module: Mover, path: str, data: bytes | None, backup: bool = False, backup_dir: str | None = None,
                 stage_dir: str | None = None, mode: int | None = None, backup_dir_mode: int = 0o700) -> str | None:
    """Put data (bytes; None removes the file) at path, backing the current file up first when backup is true.

    The one "back up, then write atomically or delete" step of the modules; the caller has read the current
    content (read_text/read_bytes), computed the diff and honoured check mode. backup_dir (default: the file's own,
    see backup_copy) keeps backups out of drop-in directories; stage_dir likewise the temporary file (write_atomic).
    Returns the backup's path or None.
    """
    backup_file = None
    if backup and os.path.exists(path):
        backup_file = backup_copy(path, backup_dir, backup_dir_mode)
    if data is None:
        if os.path.exists(path):
            os.unlink(path)
    else:
        write_atomic(module, path, data, mode, stage_dir)
    return backup_file
