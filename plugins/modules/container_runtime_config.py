#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: container_runtime_config
short_description: Add the NVIDIA runtime to Docker's daemon.json or containerd's config, keeping everything else
version_added: 0.1.0
description:
  - Merges an OCI runtime (by default NVIDIA's C(nvidia-container-runtime)) into the configuration of
    Docker (C(/etc/docker/daemon.json)) or containerd (C(config.toml), config versions 2 and 3, or an
    RKE2 / k3s C(config.toml.tmpl)).
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
  - gpuops.k8s_gpu.attributes
  - gpuops.k8s_gpu.attributes.actionable
options:
  engine:
    description: Which container engine's configuration to change.
    type: str
    required: true
    choices: [docker, containerd]
  path:
    description:
      - The configuration file. Defaults to C(/etc/docker/daemon.json) for Docker and
        C(/etc/containerd/config.toml) for containerd.
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
      - V(template) edits an RKE2 / k3s C(config.toml.tmpl) like V(inline); a missing template is created with
        C({{ template "base" . }}) first.
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
    type: str
    choices: [auto, '2', '3']
    default: auto
  systemd_cgroup:
    description:
      - containerd only. C(SystemdCgroup) of the runtime. When not given, the value of the C(runc) runtime is copied
        (if it has one), as kubelet's cgroup driver must match every runtime.
    type: bool
  cdi:
    description: containerd only. Enable the Container Device Interface in the CRI plugin (C(enable_cdi), C(cdi_spec_dirs)).
    type: bool
    default: false
  cdi_spec_dirs:
    description: containerd only. Directories with CDI specifications, used with O(cdi=true).
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
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

- name: RKE2 agent
  gpuops.k8s_gpu.container_runtime_config:
    engine: containerd
    mode: template
    config_version: '2'
    path: /var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl
'''

RETURN = r'''
path:
  description: The main configuration file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
config_mode:
  description: How the file was written - containerd's mode (V(auto) resolved) or V(json) for Docker.
  returned: always
  type: str
  sample: dropin
config_version:
  description: containerd - the config version written.
  returned: when O(engine=containerd)
  type: int
  sample: 2
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
'''

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.file_utils import write_atomic
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.runtime_config_docker import (
    DaemonJsonError, merge_daemon_json)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.runtime_config_containerd import (
    RKE2_TEMPLATE_HEAD, ContainerdConfigError, apply_runtime, choose_mode, cri_path, detect_version,
    ensure_import, remove_import, render_dropin)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.runtime_config_toml import TomlDocument, TomlEditError

DEFAULT_PATHS = {'docker': '/etc/docker/daemon.json', 'containerd': '/etc/containerd/config.toml'}


def read_text(path):
    if not os.path.exists(path):
        return None
    with open(path, 'rb') as f:
        return to_text(f.read(), errors='surrogate_or_strict')


def write_text(module, path, text):
    """Write atomically, keeping mode and owner of an existing file; new files get 0644."""
    write_atomic(module, path, to_bytes(text))


def containerd_major(module):
    binary = module.get_bin_path('containerd')
    if not binary:
        return None
    rc, out, err = module.run_command([binary, '--version'])
    m = re.search(r'\bv?(\d+)\.\d+', out or '')
    return int(m.group(1)) if rc == 0 and m else None


def plan_containerd(module, p, before):
    """Return (mode, version, main_after, dropin_before, dropin_after, changes)."""
    mode = p['mode']
    text = before
    if mode == 'template' and not (before or '').strip():
        text = RKE2_TEMPLATE_HEAD
    try:
        doc = TomlDocument(text or '', append_only=(mode == 'template'))
        default = None if p['config_version'] == 'auto' else int(p['config_version'])
        found = detect_version(doc, None)
    except (TomlEditError, ContainerdConfigError) as e:
        module.fail_json(msg='%s: %s; nothing was changed' % (p['path'], to_native(e)))
    if found is not None and default is not None and found != default:
        module.fail_json(msg='config_version is %d but %s is a version %d config; nothing was changed'
                         % (default, p['path'], found))
    version = found or default
    if version is None and p['state'] == 'absent' and mode != 'template' and not (text or '').strip():
        version = 2  # nothing inline to remove from an empty or missing file; only the drop-in may be left
    if version is None:
        if mode == 'template':
            module.fail_json(msg='config_version must be 2 or 3 for mode=template when %s has no "version" line '
                                 '(containerd 1.7: 2, containerd 2.x: 3)' % p['path'])
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
    try:
        mode = choose_mode(mode, doc, version)
        if p['state'] == 'absent' and mode != 'template':
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
            dropin_after = render_dropin(*args)
            if dropin_after != dropin_before:
                changes.append('%s written' % p['dropin_path'])
            return mode, version, doc.text(), dropin_before, dropin_after, changes
        changes = apply_runtime(doc, *args, state=p['state'], add_runc=(mode != 'template'))
    except (TomlEditError, ContainerdConfigError) as e:
        module.fail_json(msg='%s: %s; nothing was changed' % (p['path'], to_native(e)))
    return mode, version, doc.text(), None, None, changes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine=dict(type='str', required=True, choices=['docker', 'containerd']),
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
            backup=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not re.match(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$', p['runtime_name']):
        module.fail_json(msg='runtime_name %r is invalid: letters, digits, ".", "_" and "-" only' % p['runtime_name'])
    if p['engine'] == 'docker':
        bad = [k for k in ('systemd_cgroup', 'cdi') if p[k]] + (['mode'] if p['mode'] != 'auto' else [])
        if bad:
            module.fail_json(msg='option(s) %s apply to engine=containerd only' % ', '.join(bad))
    elif p['runtime_args'] is not None:
        module.fail_json(msg='runtime_args applies to engine=docker only')
    p['path'] = p['path'] or DEFAULT_PATHS[p['engine']]
    if os.path.isdir(p['path']):
        module.fail_json(msg='path %s is a directory' % p['path'])

    try:
        before = read_text(p['path'])
    except (IOError, OSError, UnicodeError) as e:
        module.fail_json(msg='cannot read %s: %s' % (p['path'], to_native(e)))

    result = dict(changed=False, path=p['path'])
    dropin_before = dropin_after = None
    if p['engine'] == 'docker':
        result['config_mode'] = 'json'
        try:
            after, changes = merge_daemon_json(before, p['runtime_name'], p['runtime_path'], p['runtime_args'],
                                               p['set_as_default'], p['state'])
        except DaemonJsonError as e:
            module.fail_json(msg='%s %s' % (p['path'], to_native(e)))
    else:
        mode, version, after, dropin_before, dropin_after, changes = plan_containerd(module, p, before)
        result.update(config_mode=mode, config_version=version)
        if mode == 'dropin':
            result['dropin_path'] = p['dropin_path']

    if before is None and after == '' or (before is None and p['state'] == 'absent' and not changes):
        after = None  # nothing to create
    main_changed = after is not None and after != before
    dropin_changed = dropin_after != dropin_before
    result['changes'] = changes
    result['changed'] = main_changed or dropin_changed
    diff = []
    if main_changed:
        diff.append(dict(before=before or '', after=after, before_header=p['path'], after_header=p['path']))
    if dropin_changed:
        diff.append(dict(before=dropin_before or '', after=dropin_after or '',
                         before_header=p['dropin_path'], after_header=p['dropin_path']))
    if module._diff:
        result['diff'] = diff

    if result['changed'] and not module.check_mode:
        try:
            if main_changed:
                if p['backup'] and before is not None:
                    result['backup_file'] = module.backup_local(p['path'])
                write_text(module, p['path'], after)
            if dropin_changed:
                if p['backup'] and dropin_before is not None:
                    result['dropin_backup_file'] = module.backup_local(p['dropin_path'])
                if dropin_after is None:
                    os.unlink(p['dropin_path'])
                else:
                    write_text(module, p['dropin_path'], dropin_after)
        except (IOError, OSError) as e:
            module.fail_json(msg='cannot write the configuration: %s' % to_native(e), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
