# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""File helpers shared by the modules that write configuration: read what is there, write atomically."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile
import time


def read_bytes(path):
    """The file's bytes, or None when it does not exist or cannot be read."""
    try:
        with open(path, 'rb') as f:
            return f.read()
    except (IOError, OSError):
        return None


def write_atomic(module, path, data, mode=None):
    """Write data (bytes) to path through a temporary file in the same directory and module.atomic_move.

    The directory is created (0755) when missing. With mode, the file gets that mode; without, an existing file
    keeps its mode and owner (atomic_move copies them) and a new one gets 0644.
    """
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path))
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


def backup_copy(path, directory=None, dir_mode=0o700):
    """Copy path to DIRECTORY/NAME.PID.TIMESTAMP~ (directory: the file's own by default, created with dir_mode) and
    return the copy's path. Tools that read every file of a drop-in folder (apt, CRI-O) need the copy outside it."""
    directory = directory or os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, dir_mode)
    stamp = time.strftime('%Y-%m-%d@%H:%M:%S', time.localtime())
    dest = os.path.join(directory, '%s.%d.%s~' % (os.path.basename(path), os.getpid(), stamp))
    shutil.copy2(path, dest)
    return dest
