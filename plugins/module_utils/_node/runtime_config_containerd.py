# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan the containerd configuration changes for an extra OCI runtime (NVIDIA's), config versions 2, 3 and 4.

Three ways to apply them:

* ``inline``: edit the runtime's tables in config.toml itself (section-level, every other line kept);
* ``dropin``: write a drop-in file with only the runtime's tables and make sure config.toml imports it.
  containerd merges an imported file plugin by plugin, **replacing** a plugin's whole table (containerd
  issue 5837; checked in the lab with containerd 1.6.20: a drop-in with only the nvidia runtime made
  ``config dump`` lose the runc runtime and a custom sandbox_image). A drop-in is therefore only safe when
  the main config does not configure the CRI plugin itself; ``auto`` picks ``dropin`` in exactly that case;
* ``template``: edit an RKE2 / k3s ``config.toml.tmpl`` like ``inline`` (Go template lines are kept).
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_toml import (
    TomlDocument, TomlEditError, toml_path)

# config version 4 (containerd 2.3's `config default`) moved only server properties into plugins: the CRI runtime
# plugin keeps version 3's name and layout (docs/conformance/nvidia-container-toolkit.md, NCT-18)
CRI_PLUGIN = {2: 'io.containerd.grpc.v1.cri', 3: 'io.containerd.cri.v1.runtime', 4: 'io.containerd.cri.v1.runtime'}
RKE2_TEMPLATE_HEAD = '{{ template "base" . }}\n'


class ContainerdConfigError(Exception):
    """The containerd config cannot be changed safely."""


def cri_path(version: int) -> list[str]:
    return ['plugins', CRI_PLUGIN[version]]


def runtime_path(version: int, name: str) -> list[str]:
    return cri_path(version) + ['containerd', 'runtimes', name]


def detect_version(doc: TomlDocument, default: int | None = None) -> Any:
    """The config version written in the file (2, 3 or 4); default when the file has none."""
    try:
        v = doc.get([], 'version')
    except TomlEditError as e:
        raise ContainerdConfigError('cannot read "version": %s' % e)
    if v is None:
        return default
    if v not in CRI_PLUGIN:
        raise ContainerdConfigError('config version %r is not supported (2, 3 and 4 are); migrate it with '
                                    '`containerd config migrate` first' % (v,))
    return v


def apply_runtime(doc: TomlDocument, version: int, name: str, binary: str, set_as_default: bool,
                  systemd_cgroup: bool | None, cdi: bool, cdi_spec_dirs: Iterable[str], state: str = 'present',
                  add_runc: bool = True, enable_cdi_key: bool = True) -> list[str]:
    """Edit doc (a TomlDocument) in place; returns a list of changes.

    With cdi, ``enable_cdi = true`` and ``cdi_spec_dirs`` are written; without enable_cdi_key (containerd 2.4 on,
    where CDI is always on and the key is gone: containerd would warn about it at every start) only cdi_spec_dirs.

    containerd replaces its built-in runtimes map (with runc) by the file's as soon as the file names any
    runtime, so with add_runc the runc runtime is written too when the document has none (checked in the
    lab: Debian's shipped config.toml plus an nvidia table alone left containerd without runc). Templates
    (add_runc=False) get runc from RKE2's / k3s's base template."""
    changes: list[str] = []
    rpath = runtime_path(version, name)
    opath = rpath + ['options']
    containerd = cri_path(version) + ['containerd']

    def setk(path: list[str], key: str, value: Any, raw: bool = False) -> None:
        if doc.set(path, key, value, raw=raw):
            changes.append('%s.%s = %s' % (toml_path(path), key, value if raw else repr(value)))

    def val(path: list[str], key: str) -> Any:
        try:
            return doc.get(path, key)
        except TomlEditError:  # a template expression
            return doc.get_raw(path, key)

    if state == 'present':
        runc = runtime_path(version, 'runc')
        if add_runc and name != 'runc' and not doc.has_table_under(runc):
            setk(runc, 'runtime_type', 'io.containerd.runc.v2')
            if systemd_cgroup is not None:
                setk(runc + ['options'], 'SystemdCgroup', bool(systemd_cgroup))
        setk(rpath, 'runtime_type', 'io.containerd.runc.v2')
        setk(opath, 'BinaryName', binary)
        if systemd_cgroup is None:
            # follow the runc runtime, as kubelet's cgroup driver must match on both
            runc_cgroup = doc.get_raw(runtime_path(version, 'runc') + ['options'], 'SystemdCgroup')
            if runc_cgroup is not None and doc.get_raw(opath, 'SystemdCgroup') is None:
                # raw copy: a template's "{{ .SystemdCgroup }}" stays a template expression
                setk(opath, 'SystemdCgroup', runc_cgroup, raw=True)
        else:
            setk(opath, 'SystemdCgroup', bool(systemd_cgroup))
        if name != 'runc':
            for sub, key, value, raw in runc_settings(doc, version):
                if doc.get_raw(rpath + sub, key) is None:
                    setk(rpath + sub, key, value, raw=raw)
        if set_as_default:
            setk(containerd, 'default_runtime_name', name)
        elif val(containerd, 'default_runtime_name') == name:
            setk(containerd, 'default_runtime_name', 'runc')
        if cdi:
            if enable_cdi_key:
                setk(cri_path(version), 'enable_cdi', True)
            setk(cri_path(version), 'cdi_spec_dirs', list(cdi_spec_dirs))
    else:
        if val(containerd, 'default_runtime_name') == name:
            setk(containerd, 'default_runtime_name', 'runc')
        if doc.remove_tables(rpath):
            changes.append('%s removed' % toml_path(rpath))
    return changes


# the runc runtime's keys that are the NVIDIA runtime's own (the shim type and the binary; SystemdCgroup follows
# the systemd_cgroup option above)
OWN_KEYS = ((), 'runtime_type'), (('options',), 'BinaryName'), (('options',), 'SystemdCgroup')


def runc_settings(doc: TomlDocument, version: int) -> list[tuple[list[str], str, Any, bool]]:
    """[(sub-path, key, value, raw)] of every other key of the runc runtime's table and its options table. The NVIDIA
    runtime wraps runc, so it gets runc's settings (privileged_without_host_devices, base_runtime_spec, snapshotter,
    cgroup_writable, pod_annotations, options.Root, ...) where it sets none of its own: what `nvidia-ctk runtime
    configure` does (NVIDIA/nvidia-container-toolkit v1.20.0, pkg/config/engine/containerd/config.go, AddRuntime
    copies the low-level runtime's whole table), docs/conformance/nvidia-container-toolkit.md NCT-23. A Go template
    expression (config.toml.tmpl) is copied as it is written."""
    out: list[tuple[list[str], str, Any, bool]] = []
    for sub in ([], ['options']):
        t = doc.table(runtime_path(version, 'runc') + sub)
        if t is None:
            continue
        for k in t.keys:
            if len(k[0]) != 1 or (tuple(sub), k[0][0]) in OWN_KEYS:
                continue
            key = k[0][0]
            try:
                out.append((sub, key, doc.get(t.path, key), False))
            except TomlEditError:
                out.append((sub, key, doc.get_raw(t.path, key), True))
    return out


def render_dropin(version: int, name: str, binary: str, set_as_default: bool, systemd_cgroup: bool | None, cdi: bool,
                  cdi_spec_dirs: Iterable[str], enable_cdi_key: bool = True) -> str:
    """Complete text of the drop-in file (owned by the collection)."""
    doc = TomlDocument('# Managed by gpuops.k8s_gpu (nvidia_container_runtime); local changes are overwritten.\n'
                       'version = %d\n' % version)
    apply_runtime(doc, version, name, binary, set_as_default, systemd_cgroup, cdi, cdi_spec_dirs,
                  enable_cdi_key=enable_cdi_key)
    return doc.text()


def imports_cover(imports: Iterable[str], path: str) -> bool:
    return any(i == path or fnmatch.fnmatchcase(path, i) for i in imports)


def ensure_import(doc: TomlDocument, dropin_path: str, version: int) -> list[str]:
    """Make sure the root table imports dropin_path; returns a list of changes."""
    try:
        imports = doc.get([], 'imports', None)
    except TomlEditError as e:
        raise ContainerdConfigError('cannot read "imports": %s' % e)
    changes: list[str] = []
    if doc.get([], 'version') is None:
        doc.set([], 'version', version)
        changes.append('version = %d' % version)
    if imports is None:
        imports = []
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise ContainerdConfigError('"imports" must be an array of strings')
    if not imports_cover(imports, dropin_path):
        doc.set([], 'imports', imports + [dropin_path])
        changes.append('imports += %s' % dropin_path)
    return changes


def remove_import(doc: TomlDocument, dropin_path: str) -> list[str]:
    """Remove dropin_path itself (not a glob that covers it) from the root table's imports; returns a list of changes.

    The "imports" key goes when nothing else is left in it; every other entry stays."""
    try:
        imports = doc.get([], 'imports', None)
    except TomlEditError as e:
        raise ContainerdConfigError('cannot read "imports": %s' % e)
    if imports is None:
        return []
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise ContainerdConfigError('"imports" must be an array of strings')
    if dropin_path not in imports:
        return []
    rest = [i for i in imports if i != dropin_path]
    if rest:
        doc.set([], 'imports', rest)
    else:
        doc.remove_key([], 'imports')
    return ['imports -= %s' % dropin_path]


def choose_mode(mode: str, doc: TomlDocument, version: int) -> str:
    """Resolve mode auto: dropin unless the main config configures the CRI plugin itself."""
    if mode != 'auto':
        return mode
    return 'inline' if doc.has_table_under(cri_path(version)) else 'dropin'
