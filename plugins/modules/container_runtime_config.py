#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: container_runtime_config
short_description: Add the NVIDIA runtime to Docker's, containerd's (also RKE2 / k3s) or CRI-O's config, keeping everything else
version_added: 0.1.0
description:
  - Merges an OCI runtime (by default NVIDIA's C(nvidia-container-runtime)) into the configuration of
    Docker (C(/etc/docker/daemon.json)), containerd (C(config.toml), config versions 2, 3 and 4, or an
    RKE2 / k3s C(config.toml.tmpl) / C(config-v3.toml.tmpl)) or CRI-O (a drop-in of C(/etc/crio/crio.conf.d)).
  - RKE2 and k3s find C(nvidia-container-runtime) themselves (in C(/usr/local/nvidia/toolkit) or C(/usr/bin)) and
    their base template then renders the C(nvidia) runtime; with O(mode=template) no table is written for such a
    runtime (a table left by an earlier release is removed), because containerd refuses a table defined twice. The
    default runtime goes into their C(config.yaml) (C(default-runtime), O(distribution_config)).
  - Only the runtime's own entries are touched. Every other key (registry mirrors, insecure registries,
    log options, other runtimes, comments and layout of a TOML file) is kept. The original file is backed up
    before it is changed (O(backup)).
  - A file that cannot be merged safely (invalid JSON, an unsupported containerd config version, a table
    defined by dotted keys) is left untouched and the module fails with the reason.
  - The module does not restart the engine; restart it when the task reports a change (the role
    R(gpuops.k8s_gpu.nvidia_container_runtime,ansible_collections.gpuops.k8s_gpu.nvidia_container_runtime_role) does).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
options:
  engine:
    description: Which container engine's configuration to change.
    type: str
    required: true
    choices: [docker, containerd, crio]
  path:
    description:
      - The configuration file. Defaults to C(/etc/docker/daemon.json) for Docker,
        C(/etc/containerd/config.toml) for containerd and the drop-in C(/etc/crio/crio.conf.d/99-nvidia.toml)
        (the file NVIDIA's C(nvidia-ctk runtime configure --runtime=crio) writes) for CRI-O.
      - For CRI-O the drop-in belongs to this module and is written whole; CRI-O's other files are only read.
      - For O(mode=template), the RKE2 or k3s template, for example
        C(/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl).
      - A missing file is created.
    type: path
  state:
    description:
      - Whether the runtime is configured (V(present)) or removed (V(absent)).
      - V(absent) removes the runtime's tables (or C(runtimes.<name>) in C(daemon.json)), resets a default runtime
        that names it, and for containerd (not O(mode=template)) also deletes O(dropin_path) and its C(imports)
        entry, whichever O(mode) added them. Every other key stays; O(backup) copies the files first.
    type: str
    choices: [present, absent]
    default: present
  runtime_name:
    description: Name of the runtime (the RuntimeClass handler in Kubernetes).
    type: str
    default: nvidia
  runtime_path:
    description: The runtime binary (Docker C(path), containerd C(BinaryName)).
    type: str
    default: /usr/bin/nvidia-container-runtime
  runtime_args:
    description:
      - Docker only. Arguments for the runtime (C(runtimeArgs)). When not given, existing arguments are kept.
    type: list
    elements: str
  set_as_default:
    description:
      - Make the runtime the default (Docker C(default-runtime), containerd C(default_runtime_name)), as
        gpushare, Volcano's GPU sharing and HAMi need.
      - With V(false), a default that names this runtime is reset (Docker falls back to runc, containerd is
        set to C(runc)); any other default is left alone.
    type: bool
    default: false
  mode:
    description:
      - containerd only. How the change is written.
      - V(dropin) writes O(dropin_path) with the runtime's tables and adds it to C(imports) in O(path).
        containerd replaces a plugin's whole table with an imported file's, so this is refused when O(path)
        itself configures the CRI plugin (it would lose those settings).
      - V(inline) edits the runtime's tables in O(path) itself, keeping every other line.
      - V(template) edits an RKE2 / k3s C(config.toml.tmpl) (C(config-v3.toml.tmpl) on their containerd 2.x
        releases). When it renders C({{ template "base" . }}) (or is missing), only a runtime that RKE2/k3s do not
        detect themselves gets tables, appended at the end; a missing template is then created with the base
        line first. A full template without the base line is edited like V(inline).
      - V(auto) is V(dropin) when O(path) does not configure the CRI plugin and V(inline) otherwise.
    type: str
    choices: [auto, inline, dropin, template]
    default: auto
  dropin_path:
    description: containerd only. The drop-in file for O(mode=dropin).
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  config_version:
    description:
      - containerd only. Config version to write, V(2) (containerd 1.x) or V(3) (containerd 2.x).
      - V(auto) reads the C(version) of O(path); when the file has none it asks C(containerd --version)
        (except for O(mode=template), where it must then be given).
      - A file of config version 4 (what C(containerd config default) writes from containerd 2.3 on) is kept at
        version 4 with V(auto); its runtime tables are those of version 3.
    type: str
    choices: [auto, '2', '3']
    default: auto
  systemd_cgroup:
    description:
      - containerd only. C(SystemdCgroup) of the runtime. When not given, the value of the C(runc) runtime is copied
        (if it has one), as kubelet's cgroup driver must match every runtime.
    type: bool
  cdi:
    description:
      - containerd only. Enable the Container Device Interface in the CRI plugin (C(enable_cdi), C(cdi_spec_dirs)).
      - The CRI plugin has these keys from containerd 1.7 on; an older containerd reads them without an error and runs
        without CDI. With V(true) (except O(mode=template)) the module asks C(containerd --version) and refuses a
        containerd older than 1.7 before anything changes; a containerd that is not installed is not refused.
      - From containerd 2.4 on CDI is always on and C(enable_cdi) is no longer a key (containerd ignores it with a
        warning at every start), so with containerd 2.4 or later on PATH only C(cdi_spec_dirs) is written, and an
        C(enable_cdi) the file already has is left as it is.
    type: bool
    default: false
  cdi_spec_dirs:
    description: containerd only. Directories with CDI specifications, used with O(cdi=true).
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  distribution_config:
    description:
      - O(mode=template) only. RKE2's or k3s's C(config.yaml) (C(/etc/rancher/rke2/config.yaml),
        C(/etc/rancher/k3s/config.yaml)). With O(set_as_default=true) its C(default-runtime) key is set to
        O(runtime_name) (every other line kept); a C(default-runtime) naming the runtime is removed otherwise.
      - Needed for O(set_as_default=true) when the template renders the base template.
    type: path
  base_runtime_detection:
    description:
      - O(mode=template) only. Whether RKE2/k3s detect the runtime themselves when O(runtime_name) is C(nvidia)
        (or C(nvidia-experimental)) and O(runtime_path) is where they look. V(false) writes the tables anyway
        (only for a build of RKE2/k3s without that detection).
    type: bool
    default: true
  crio_config:
    description: CRI-O only. CRI-O's main file, read for the default runtime and its options.
    type: path
    default: /etc/crio/crio.conf
  crio_config_dir:
    description: CRI-O only. CRI-O's drop-in directory; its other files are read in CRI-O's (lexical) order.
    type: path
    default: /etc/crio/crio.conf.d
  backup:
    description: Keep a timestamped copy of each file before it is changed; its name is returned in RV(backup_file).
    type: bool
    default: true
notes:
  - Docker's C(daemon.json) is rewritten as indented JSON only when its content changes (key order is kept);
    an unchanged file is not touched.
  - No Python TOML library is needed on the managed node; the TOML text is edited line by line.
seealso:
  - name: NVIDIA Container Toolkit, configuration
    description: NVIDIA's instructions for Docker and containerd.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
'''

EXAMPLES = r'''
- name: Add the nvidia runtime to Docker and make it the default (gpushare, Volcano, HAMi)
  gpuops.k8s_gpu.container_runtime_config:
    engine: docker
    set_as_default: true
  register: docker_rt

- name: Restart Docker when the file changed
  ansible.builtin.systemd_service:
    name: docker
    state: restarted
  when: docker_rt.changed

- name: Add the nvidia runtime to containerd (drop-in when safe, otherwise in config.toml)
  gpuops.k8s_gpu.container_runtime_config:
    engine: containerd
    cdi: true

- name: RKE2 agent on containerd 2.x, nvidia as the default runtime (config.yaml default-runtime; no table is
    written, RKE2 renders the detected runtime itself)
  gpuops.k8s_gpu.container_runtime_config:
    engine: containerd
    mode: template
    config_version: '3'
    path: /var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl
    distribution_config: /etc/rancher/rke2/config.yaml
    set_as_default: true

- name: CRI-O drop-in
  gpuops.k8s_gpu.container_runtime_config:
    engine: crio
'''

RETURN = r'''
path:
  description: The main configuration file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
config_mode:
  description: How the file was written - containerd's mode (V(auto) resolved), V(json) for Docker, V(dropin) for CRI-O.
  returned: always
  type: str
  sample: dropin
config_version:
  description: containerd - the config version written.
  returned: when O(engine=containerd)
  type: int
  sample: 2
containerd_version:
  description: containerd - the release C(containerd --version) reports, asked when O(cdi=true) (null when none is installed).
  returned: when O(engine=containerd), O(cdi=true) and O(state=present), except O(mode=template)
  type: str
  sample: 1.7.27
dropin_path:
  description: The drop-in file, when one is used.
  returned: when RV(config_mode=dropin)
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
changes:
  description: What was (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: ["runtimes.nvidia.path: None -> /usr/bin/nvidia-container-runtime"]
backup_file:
  description: Backup of the main file, when it existed and was changed with O(backup=true).
  returned: changed and a backup was made
  type: str
  sample: /etc/docker/daemon.json.12345.2026-11-23@10:00:00~
dropin_backup_file:
  description: Backup of the drop-in file, when it existed and was changed with O(backup=true).
  returned: changed and a backup was made
  type: str
config_backup_file:
  description: Backup of O(distribution_config), when it existed and was changed with O(backup=true).
  returned: changed and a backup was made
  type: str
'''

from typing import Any

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.containerd_cdi import (
    cdi_supported, enable_cdi_removed, unsupported_message)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import read_text, replace_file
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.node_probe import parse_containerd_version
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_docker import (
    DaemonJsonError, merge_daemon_json)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_containerd import (
    RKE2_TEMPLATE_HEAD, ContainerdConfigError, apply_runtime, choose_mode, cri_path, detect_version,
    ensure_import, remove_import, render_dropin, runtime_path)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_crio import (
    DEFAULT_DROPIN as CRIO_DROPIN, CrioConfigError, default_elsewhere as crio_default_elsewhere,
    render_dropin as render_crio_dropin)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_rancher import (
    DEFAULT_RUNTIME_KEY, RancherConfigError, base_renders_runtime, template_uses_base, yaml_get, yaml_remove, yaml_set)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_toml import (
    TomlDocument, TomlEditError, toml_path)

DEFAULT_PATHS = {'docker': '/etc/docker/daemon.json', 'containerd': '/etc/containerd/config.toml',
                 'crio': CRIO_DROPIN}


def crio_backup_dir(conf_dir: str) -> str:
    """Where a CRI-O drop-in is backed up: CRI-O reads every file below crio.conf.d (any name, sub directories too),
    so a backup next to the drop-in would be read as configuration."""
    return os.path.join(os.path.dirname(os.path.normpath(conf_dir)), 'gpuops-backups')


def containerd_version(module: AnsibleModule) -> str | None:
    """The release of the containerd on PATH ('major.minor.patch', from `containerd --version`), or None."""
    binary = module.get_bin_path('containerd')
    if not binary:
        return None
    rc, out, dummy = module.run_command([binary, '--version'])
    version = parse_containerd_version(out) if rc == 0 else None
    return '%d.%d.%d' % version if version else None


def containerd_major(module: AnsibleModule) -> int | None:
    version = containerd_version(module)
    return int(version.split('.')[0]) if version else None


def refuse_cdi_without_support(module: AnsibleModule, p: dict[str, Any], result: dict[str, Any]) -> None:
    """cdi=true on a containerd older than 1.7 (no enable_cdi in its CRI plugin; it ignores the key): refused before
    anything changes (docs/conformance/containerd.md CTD-01, CTD-03). RKE2 / k3s (mode=template) bring their own
    containerd, which is not the one on PATH, and are not asked."""
    if p['engine'] != 'containerd' or p['mode'] == 'template' or p['state'] != 'present' or not p['cdi']:
        return
    found = containerd_version(module)
    result['containerd_version'] = found
    if cdi_supported(found) is False:
        module.fail_json(msg='%s, or set it to false; nothing was changed'
                         % unsupported_message(found, 'cdi=true (role variable nvidia_container_runtime_cdi)'),
                         **result)


def plan_containerd(module: AnsibleModule, p: dict[str, Any], before: str | None,
                    release: str | None = None) -> tuple[Any, ...]:
    """Return (mode, version, main_after, dropin_before, dropin_after, changes). ``release``: the containerd on PATH
    (refuse_cdi_without_support asked it when cdi is on); from 2.4 on cdi writes cdi_spec_dirs only (CTD-05)."""
    mode = p['mode']
    text = before
    try:
        doc = TomlDocument(text or '')
        default = None if p['config_version'] == 'auto' else int(p['config_version'])
        found = detect_version(doc, None)
    except (TomlEditError, ContainerdConfigError) as e:
        module.fail_json(msg='%s: %s; nothing was changed' % (p['path'], to_native(e)))
    if found is not None and default is not None and found != default:
        module.fail_json(msg='config_version is %d but %s is a version %d config; nothing was changed'
                         % (default, p['path'], found))
    version = found or default
    if version is None and p['state'] == 'absent' and not (text or '').strip():
        version = 2  # nothing inline to remove from an empty or missing file; only the drop-in may be left
    if version is None:
        if (text or '').strip():
            module.fail_json(msg='%s has no "version" line, i.e. it is a version 1 config, which is not supported; '
                                 'migrate it with `containerd config migrate` or set config_version' % p['path'])
        major = containerd_major(module)
        if major is None:
            module.fail_json(msg='config_version=auto needs `containerd --version` when %s is missing or empty; '
                                 'containerd was not found, set config_version to 2 or 3' % p['path'])
        version = 3 if major >= 2 else 2
    args = (version, p['runtime_name'], p['runtime_path'], p['set_as_default'], p['systemd_cgroup'], p['cdi'],
            p['cdi_spec_dirs'])
    enable_cdi_key = not enable_cdi_removed(release)
    try:
        mode = choose_mode(mode, doc, version)
        if p['state'] == 'absent':
            # whichever way it was added (drop-in + import, or inline tables): remove both
            changes = apply_runtime(doc, *args, state='absent')
            changes += remove_import(doc, p['dropin_path'])
            dropin_before = read_text(p['dropin_path'])
            if dropin_before is not None:
                changes.append('%s removed' % p['dropin_path'])
            return mode, version, doc.text(), dropin_before, None, changes
        if mode == 'dropin':
            if p['state'] == 'present' and doc.has_table_under(cri_path(version)):
                module.fail_json(msg='mode=dropin refused: %s configures the CRI plugin itself and containerd would '
                                     'replace that whole table with the drop-in\'s, losing those settings; '
                                     'use mode=inline or auto; nothing was changed' % p['path'])
            dropin_before = read_text(p['dropin_path'])
            changes = ensure_import(doc, p['dropin_path'], version)
            dropin_after = render_dropin(*args, enable_cdi_key=enable_cdi_key)
            if dropin_after != dropin_before:
                changes.append('%s written' % p['dropin_path'])
            return mode, version, doc.text(), dropin_before, dropin_after, changes
        changes = apply_runtime(doc, *args, state=p['state'], enable_cdi_key=enable_cdi_key)
    except (TomlEditError, ContainerdConfigError) as e:
        module.fail_json(msg='%s: %s; nothing was changed' % (p['path'], to_native(e)))
    return mode, version, doc.text(), None, None, changes


def plan_crio(module: AnsibleModule, p: dict[str, Any], before: str | None) -> tuple[str | None, list[str]]:
    """Return (after, changes): the drop-in's text (None: removed) and what changes. CRI-O's other files are read,
    never written."""
    others = []
    try:
        conf_dir = p['crio_config_dir']
        names = sorted(os.listdir(conf_dir)) if os.path.isdir(conf_dir) else []
        for path in [p['crio_config']] + [os.path.join(conf_dir, n) for n in names]:
            if os.path.abspath(path) == os.path.abspath(p['path']) or os.path.isdir(path):
                continue
            text = read_text(path)
            if text is not None:
                others.append((path, text))
    except (IOError, OSError, UnicodeError) as e:
        module.fail_json(msg='cannot read the CRI-O configuration: %s; nothing was changed' % to_native(e))
    changes = []
    try:
        if p['state'] == 'absent':
            after = None
            if before is not None:
                changes.append('%s removed' % p['path'])
        else:
            after = render_crio_dropin(p['runtime_name'], p['runtime_path'], p['set_as_default'], others)
            if after != before:
                changes.append('%s written' % p['path'])
        elsewhere = crio_default_elsewhere(p['runtime_name'], others)
    except (TomlEditError, CrioConfigError) as e:
        module.fail_json(msg='%s; nothing was changed' % to_native(e))
    if elsewhere and not (p['state'] == 'present' and p['set_as_default']):
        module.warn('another CRI-O file sets default_runtime = "%s"; it is not a file of this module and stays: '
                    'CRI-O keeps defaulting to this runtime' % elsewhere)
    return after, changes


def plan_template(module: AnsibleModule, p: dict[str, Any], before: str | None) -> tuple[list[tuple[Any, ...]], Any, list[str]]:
    """RKE2 / k3s config.toml.tmpl and config.yaml. Return ([(path, before, after, backup key)], version, changes)."""
    text = before or ''
    uses_base = template_uses_base(text)
    base_has_runtime = uses_base and p['base_runtime_detection'] and base_renders_runtime(
        p['runtime_name'], p['runtime_path'])
    try:
        doc = TomlDocument(text or RKE2_TEMPLATE_HEAD, append_only=True)
        found = detect_version(doc, None)
    except (TomlEditError, ContainerdConfigError) as e:
        module.fail_json(msg='%s: %s; nothing was changed' % (p['path'], to_native(e)))
    wanted = None if p['config_version'] == 'auto' else int(p['config_version'])
    if found is not None and wanted is not None and found != wanted:
        module.fail_json(msg='config_version is %d but %s is a version %d config; nothing was changed'
                         % (wanted, p['path'], found))
    version = found or wanted
    present = p['state'] == 'present'
    needs_tables = present and not base_has_runtime
    if version is None and (needs_tables or (text.strip() and not uses_base)):
        module.fail_json(msg='config_version must be 2 or 3 for mode=template when %s has no "version" line '
                             '(RKE2/k3s on containerd 1.7: 2 in config.toml.tmpl, on containerd 2.x: 3 in '
                             'config-v3.toml.tmpl)' % p['path'])
    if uses_base and p['set_as_default'] and present and not p['distribution_config']:
        module.fail_json(msg='set_as_default=true with an RKE2/k3s template that renders the base template needs '
                             'distribution_config (for example /etc/rancher/rke2/config.yaml): the base template '
                             'already defines the containerd table, so the default runtime is RKE2\'s/k3s\'s own '
                             '"default-runtime" setting; nothing was changed')
    if uses_base and present and p['cdi'] and version == 2:
        module.fail_json(msg='cdi=true cannot be added to a version 2 RKE2/k3s template that renders the base '
                             'template: the base already defines the CRI plugin table and a second one stops '
                             'containerd. Use a containerd 2.x based release (CDI is on by default there) or a '
                             'full template without {{ template "base" . }}; nothing was changed')
    changes = []
    try:
        if uses_base and (base_has_runtime or not present):
            # the base template renders this runtime: a table of ours would define it twice
            for v in [version] if version else [2, 3]:
                rpath = runtime_path(v, p['runtime_name'])
                containerd = cri_path(v) + ['containerd']
                if doc.remove_tables(rpath):
                    changes.append('%s removed (%s)' % (toml_path(rpath), 'the base template renders it'
                                                        if present else 'state=absent'))
                tbl = doc.table(containerd)
                if tbl is not None and [k[0] for k in tbl.keys] == [['default_runtime_name']]:
                    doc.remove_tables(containerd)  # added by an earlier release of this module; the base has it
                    changes.append('%s removed (the base template defines it)' % toml_path(containerd))
        elif uses_base:
            # present and the base does not render the runtime: needs_tables, so a missing version was refused above
            if version is None:
                raise AssertionError('containerd version unknown although the runtime tables are needed')
            rpath = runtime_path(version, p['runtime_name'])
            changes += apply_runtime(doc, version, p['runtime_name'], p['runtime_path'], False,
                                     p['systemd_cgroup'], False, p['cdi_spec_dirs'], add_runc=False)
            if p['systemd_cgroup'] is None and doc.set(rpath + ['options'], 'SystemdCgroup',
                                                       '{{ .SystemdCgroup }}', raw=True):
                changes.append('%s.SystemdCgroup = {{ .SystemdCgroup }} (as the base template\'s runc)'
                               % toml_path(rpath + ['options']))
        elif version is not None:
            changes += apply_runtime(doc, version, p['runtime_name'], p['runtime_path'], p['set_as_default'],
                                     p['systemd_cgroup'], p['cdi'], p['cdi_spec_dirs'], state=p['state'],
                                     add_runc=False)
    except (TomlEditError, ContainerdConfigError) as e:
        module.fail_json(msg='%s: %s; nothing was changed' % (p['path'], to_native(e)))
    after: str | None = doc.text()
    if before is None and after == RKE2_TEMPLATE_HEAD:
        after = None  # RKE2 / k3s render the base template alone when there is no template
    files: list[tuple[Any, str | None, str | None, str]] = [(p['path'], before, after, 'backup_file')]
    cfg = p['distribution_config']
    if cfg:
        try:
            cfg_before = read_text(cfg)
            current = yaml_get(cfg_before, DEFAULT_RUNTIME_KEY)
            cfg_after = cfg_before
            if present and p['set_as_default'] and uses_base:
                cfg_after = yaml_set(cfg_before, DEFAULT_RUNTIME_KEY, p['runtime_name'])
                if current not in (None, p['runtime_name']):
                    module.warn('%s: %s was "%s"; set to "%s" as set_as_default asks (the old file is backed up)'
                                % (cfg, DEFAULT_RUNTIME_KEY, current, p['runtime_name']))
            elif current == p['runtime_name']:
                cfg_after = yaml_remove(cfg_before, DEFAULT_RUNTIME_KEY)
        except (IOError, OSError, UnicodeError, RancherConfigError) as e:
            module.fail_json(msg='%s: %s; nothing was changed' % (cfg, to_native(e)))
        if cfg_after != cfg_before:
            changes.append('%s: %s: %s -> %s' % (cfg, DEFAULT_RUNTIME_KEY, current,
                                                 yaml_get(cfg_after, DEFAULT_RUNTIME_KEY)))
        files.append((cfg, cfg_before, cfg_after, 'config_backup_file'))
    return files, version, changes


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            engine=dict(type='str', required=True, choices=['docker', 'containerd', 'crio']),
            path=dict(type='path'),
            state=dict(type='str', default='present', choices=['present', 'absent']),
            runtime_name=dict(type='str', default='nvidia'),
            runtime_path=dict(type='str', default='/usr/bin/nvidia-container-runtime'),
            runtime_args=dict(type='list', elements='str'),
            set_as_default=dict(type='bool', default=False),
            mode=dict(type='str', default='auto', choices=['auto', 'inline', 'dropin', 'template']),
            dropin_path=dict(type='path', default='/etc/containerd/conf.d/99-nvidia.toml'),
            config_version=dict(type='str', default='auto', choices=['auto', '2', '3']),
            systemd_cgroup=dict(type='bool'),
            cdi=dict(type='bool', default=False),
            cdi_spec_dirs=dict(type='list', elements='path', default=['/etc/cdi', '/var/run/cdi']),
            distribution_config=dict(type='path'),
            base_runtime_detection=dict(type='bool', default=True),
            crio_config=dict(type='path', default='/etc/crio/crio.conf'),
            crio_config_dir=dict(type='path', default='/etc/crio/crio.conf.d'),
            backup=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not re.match(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$', p['runtime_name']):
        module.fail_json(msg='runtime_name %r is invalid: letters, digits, ".", "_" and "-" only' % p['runtime_name'])
    if p['engine'] in ('docker', 'crio'):
        bad = [k for k in ('systemd_cgroup', 'cdi') if p[k]] + (['mode'] if p['mode'] != 'auto' else [])
        if bad:
            module.fail_json(msg='option(s) %s apply to engine=containerd only' % ', '.join(bad))
    if p['engine'] != 'docker' and p['runtime_args'] is not None:
        module.fail_json(msg='runtime_args applies to engine=docker only')
    if p['distribution_config'] and p['mode'] != 'template':
        module.fail_json(msg='distribution_config applies to mode=template (RKE2 / k3s) only')
    p['path'] = p['path'] or DEFAULT_PATHS[p['engine']]
    if os.path.isdir(p['path']):
        module.fail_json(msg='path %s is a directory' % p['path'])

    try:
        before = read_text(p['path'])
    except (IOError, OSError, UnicodeError) as e:
        module.fail_json(msg='cannot read %s: %s' % (p['path'], to_native(e)))

    result = dict(changed=False, path=p['path'])
    refuse_cdi_without_support(module, p, result)
    files = []
    if p['engine'] == 'docker':
        result['config_mode'] = 'json'
        try:
            after, changes = merge_daemon_json(before, p['runtime_name'], p['runtime_path'], p['runtime_args'],
                                               p['set_as_default'], p['state'])
        except DaemonJsonError as e:
            module.fail_json(msg='%s %s' % (p['path'], to_native(e)))
        files.append((p['path'], before, after, 'backup_file'))
    elif p['engine'] == 'crio':
        result['config_mode'] = 'dropin'
        after, changes = plan_crio(module, p, before)
        files.append((p['path'], before, after, 'backup_file'))
    elif p['mode'] == 'template':
        files, version, changes = plan_template(module, p, before)
        result.update(config_mode='template', config_version=version)
    else:
        release = result.get('containerd_version')  # asked by refuse_cdi_without_support when cdi is on
        mode, version, after, dropin_before, dropin_after, changes = plan_containerd(module, p, before, release)
        result.update(config_mode=mode, config_version=version)
        if mode == 'dropin':
            result['dropin_path'] = p['dropin_path']
        files.append((p['path'], before, after, 'backup_file'))
        files.append((p['dropin_path'], dropin_before, dropin_after, 'dropin_backup_file'))

    if p['engine'] != 'crio' and p['mode'] != 'template':
        path, before, after, key = files[0]
        if before is None and after == '' or (before is None and p['state'] == 'absent' and not changes):
            files[0] = (path, before, None, key)  # nothing to create
    changed = [f for f in files if f[2] != f[1]]
    result['changes'] = changes
    result['changed'] = bool(changed)
    if module._diff:
        result['diff'] = [dict(before=b or '', after=a or '', before_header=path, after_header=path)
                          for path, b, a, key in changed]

    if result['changed'] and not module.check_mode:
        try:
            for path, b, a, key in changed:
                backup_file = replace_file(
                    module, path, None if a is None else to_bytes(a), backup=p['backup'] and b is not None,
                    backup_dir=crio_backup_dir(p['crio_config_dir']) if p['engine'] == 'crio' else None)
                if backup_file:
                    result[key] = backup_file
        except (IOError, OSError) as e:
            module.fail_json(msg='cannot write the configuration: %s' % to_native(e), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
