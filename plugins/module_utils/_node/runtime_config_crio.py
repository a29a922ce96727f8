# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CRI-O: the NVIDIA runtime as a drop-in file of /etc/crio/crio.conf.d.

Facts (docs/conformance/cri-o.md): CRI-O reads /etc/crio/crio.conf first and then every file of
/etc/crio/crio.conf.d in lexical order, a later file's option winning over an earlier one's (cri-o
docs/crio.conf.d.5.md), so a drop-in that names only the runtime's options leaves every other setting alone -
unlike containerd's imports, which replace a plugin's whole table; but a file that names a runtime replaces that
runtime's whole entry (CRIO-11, as CRI-O v1.34.0 reads its files). Runtimes are ``[crio.runtime.runtimes.<name>]``
with ``runtime_path`` and ``runtime_type`` (``oci``); the default is ``crio.runtime.default_runtime`` (crun since
CRI-O 1.31; runc before). NVIDIA's own ``nvidia-ctk runtime configure --runtime=crio`` writes
/etc/crio/crio.conf.d/99-nvidia.toml, copying the default runtime's options and then setting runtime_path and
runtime_type.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_toml import (
    TomlDocument, TomlEditError)

DEFAULT_DROPIN = '/etc/crio/crio.conf.d/99-nvidia.toml'
DEFAULT_RUNTIME = 'crun'
# the NVIDIA runtime wraps the same low-level runtime and is watched by the same monitor: it gets every option of the
# default runtime's table (runtime_root, monitor_*, allowed_annotations, privileged_without_host_devices, ...) and its
# sub-tables (default_annotations, written by CRI-O's `crio config` as an inline table, or as a [...default_annotations]
# table or dotted keys by hand), as nvidia-ctk copies the whole table (NVIDIA/nvidia-container-toolkit v1.20.0,
# pkg/config/engine/crio/crio.go GetDefaultRuntimeOptions: options.Copy() of the whole subtree; docs/conformance/
# cri-o.md CRIO-02, CRIO-09, CRIO-10), except its own runtime_path and runtime_type, inherit_default_runtime, which
# would make CRI-O replace the runtime's path by the default runtime's (cri-o/cri-o v1.36.3, docs/crio.conf.5.md), and
# platform_runtime_paths: the low-level runtime's binary per image platform, which CRI-O runs INSTEAD of runtime_path
# for a matching image (cri-o/cri-o v1.34.0 internal/oci/oci.go PlatformRuntimePath, server/container_create.go) -
# copied, the NVIDIA runtime would be bypassed for those images (nvidia-ctk copies it: an intended difference, NCT-24)
NOT_COPIED = ('runtime_path', 'runtime_type', 'inherit_default_runtime', 'platform_runtime_paths')
HEADER = '# Managed by gpuops.k8s_gpu (nvidia_container_runtime); local changes are overwritten.\n'


class CrioConfigError(Exception):
    """The CRI-O configuration cannot be merged safely."""


def effective(texts: Iterable[tuple[str, str | None]]) -> tuple[Any, dict[str, dict[str, Any]]]:
    """(default runtime name, {runtime: {option: value}}) of CRI-O's files read in its order (texts: [(path, text)]).
    ``default_runtime`` is a plain option: a later file's value wins. A runtime is not: a file that names a runtime
    (its table or one of its sub-tables) REPLACES that runtime's whole entry, options and sub-tables, with what the
    file says of it - CRI-O decodes each file into its runtimes map, whose entry for the name is made anew (cri-o
    v1.34.0 `crio config` over crio.conf and a drop-in that sets one option of crun: crun's other options read back
    empty; docs/conformance/cri-o.md CRIO-11). A sub-table of a runtime (``[crio.runtime.runtimes.<name>.<option>]``,
    dotted keys ``<option>.<key> = ...`` or an inline table, as CRI-O's ``crio config`` writes one) is one option whose
    value is a dict, merged key by key within its file."""
    default = None
    runtimes: dict[str, dict[str, Any]] = {}
    for path, text in texts:
        try:
            doc = TomlDocument(text or '')
        except TomlEditError as e:
            raise CrioConfigError('%s: %s' % (path, e))
        named: set[str] = set()   # the runtimes this file names: their entries start anew
        for t in doc.tables:
            if t.array:
                continue
            if t.path == ['crio', 'runtime']:
                for k in t.keys:
                    if k[0] == ['default_runtime']:
                        default = doc.get(t.path, 'default_runtime')
            if len(t.path) < 4 or t.path[:3] != ['crio', 'runtime', 'runtimes']:
                continue
            if len(t.path) > 5:
                raise CrioConfigError('%s: [%s] is nested deeper than CRI-O reads a runtime\'s options (cri-o '
                                      'pkg/config/config.go RuntimeHandler); edit it by hand' % (path, '.'.join(t.path)))
            if t.path[3] not in named:
                named.add(t.path[3])
                runtimes[t.path[3]] = {}
            opts = runtimes[t.path[3]]
            if len(t.path) == 5 and not isinstance(opts.get(t.path[4]), dict):
                opts[t.path[4]] = {}
            for k in t.keys:
                rel = t.path[4:] + k[0]   # the option's path under the runtime's table
                try:
                    value = doc.key_value(k)
                except TomlEditError as e:
                    raise CrioConfigError('%s: %s' % (path, e))
                if len(rel) > 2 or (len(rel) == 2 and isinstance(value, dict)):
                    raise CrioConfigError('%s: %s is nested deeper than CRI-O reads a runtime\'s options (cri-o '
                                          'pkg/config/config.go RuntimeHandler); edit it by hand'
                                          % (path, '.'.join(t.path + k[0])))
                if len(rel) == 2:
                    if not isinstance(opts.get(rel[0]), dict):
                        opts[rel[0]] = {}
                    opts[rel[0]][rel[1]] = value
                elif isinstance(value, dict) and isinstance(opts.get(rel[0]), dict):
                    opts[rel[0]].update(value)
                else:
                    opts[rel[0]] = value
    return default, runtimes


def render_dropin(name: str, binary: str, set_as_default: bool, others: Iterable[tuple[str, str | None]]) -> str:
    """Text of the drop-in: the runtime's table (with the default runtime's shared options from the other files,
    others: [(path, text)] in CRI-O's order) and, when asked, the default runtime."""
    default, runtimes = effective(others)
    # the low-level runtime the NVIDIA runtime wraps: the default one, unless that is this runtime itself
    base: dict[str, Any] = {}
    for cand in (default, DEFAULT_RUNTIME, 'runc'):
        if cand and cand != name and cand in runtimes:
            base = runtimes[cand]
            break
    doc = TomlDocument(HEADER)
    path = ['crio', 'runtime', 'runtimes', name]
    if set_as_default:
        doc.set(['crio', 'runtime'], 'default_runtime', name)
    doc.set(path, 'runtime_path', binary)
    doc.set(path, 'runtime_type', 'oci')
    for key, value in base.items():
        if key in NOT_COPIED:
            continue
        if isinstance(value, dict):
            # a sub-table (default_annotations): its own [crio.runtime.runtimes.<name>.<option>] table
            doc.ensure_table(path + [key])
            for sub, subvalue in value.items():
                if isinstance(subvalue, dict):
                    raise CrioConfigError('%s.%s.%s is nested deeper than CRI-O reads a runtime\'s options; edit it '
                                          'by hand' % ('.'.join(path), key, sub))
                doc.set(path + [key], sub, subvalue)
        else:
            doc.set(path, key, value)
    return doc.text()


def default_elsewhere(name: str, others: Iterable[tuple[str, str | None]]) -> str | None:
    """The default runtime that the other files set, when it names this runtime (to be reset), else None."""
    default, _runtimes = effective(others)
    return default if default == name else None
