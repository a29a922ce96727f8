#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: apt_signed_repo
short_description: Add an apt repository signed by its own keyring, and say which packages still need installing
version_added: 0.1.0
description:
  - Stores the repository's signing key as a C(signed-by) keyring (never C(apt-key)), writes a deb822
    C(/etc/apt/sources.list.d/<name>.sources) that names it, and reads with C(dpkg-query) which of O(packages) are
    not installed at the wanted version - all in one call, so that a converged node costs one round trip where
    C(file) + C(get_url) + C(copy) + C(apt) cost four or five.
  - The key is downloaded only when the keyring file is missing, or always with O(key_refresh=true) (then replaced
    only when its content differs), like M(ansible.builtin.get_url) without C(force).
  - apt reads a keyring ending in C(.asc) as ASCII-armored and any other as binary; an armored key is
    de-armored for a C(.gpg) keyring (what C(gpg --dearmor) does), and a binary key for a C(.asc) keyring is refused.
  - It does not install packages; pass RV(packages_missing) to M(ansible.builtin.apt), with
    C(update_cache) set to RV(cache_update_needed).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
options:
  name:
    description: Base name of the source file, C(/etc/apt/sources.list.d/<name>.sources).
    type: str
    required: true
  state:
    description: V(present) adds the keyring and the source; V(absent) removes both files.
    type: str
    choices: [present, absent]
    default: present
  uris:
    description: Repository URLs (C(URIs:)); http(s), ftp or file. Required with O(state=present).
    type: list
    elements: str
  suites:
    description:
      - C(Suites:). An exact path ends in C(/) (NVIDIA's flat repositories use V(/)) and then takes no
        O(components).
    type: list
    elements: str
    default: ['/']
  components:
    description: C(Components:), required when O(suites) are distribution names.
    type: list
    elements: str
    default: []
  architectures:
    description: C(Architectures:), left out when empty.
    type: list
    elements: str
    default: []
  comment:
    description: Comment lines at the top of the source file.
    type: str
    default: Managed by gpuops.k8s_gpu
  key_url:
    description:
      - URL of the signing key (http(s) or file).
      - Without it, O(keyring) must be a keyring already on the node (as Debian's
        C(/usr/share/keyrings/debian-archive-keyring.gpg), which the C(debian-archive-keyring) package keeps); the
        source names it and the module neither downloads, rewrites nor changes the mode of it. With O(state=present)
        and no such file the module fails before any change.
    type: str
  keyring:
    description: Where the key is stored and what C(Signed-By:) names. C(.asc) keeps the key armored.
    type: path
    required: true
  key_refresh:
    description: Download the key on every run and replace the keyring when the key changed. Requires O(key_url).
    type: bool
    default: false
  supersedes:
    description:
      - File names in C(/etc/apt/sources.list.d) that this source replaces (for example the one-line
        C(<name>.list) an earlier release wrote with M(ansible.builtin.apt_repository)); apt would otherwise read the
        same repository twice and warn that it is configured multiple times.
      - Each one that exists is backed up to C(/etc/apt/gpuops-backups/) and removed, after the source is written
        (or found in place), with O(state=present) only. Other files are never touched.
      - Plain file names ending in C(.list) or C(.sources), not the module's own source file.
    type: list
    elements: str
    default: []
  packages:
    description:
      - Packages to check, as V(name) or V(name=version) (the version may use C(*) wildcards, matched as
        M(ansible.builtin.apt) matches it).
    type: list
    elements: str
    default: []
  existing_sources:
    description:
      - What to do with sources already on the node (C(/etc/apt/sources.list), C(*.list) and C(*.sources) of
        C(/etc/apt/sources.list.d)) for the same URI and suite with another C(Signed-By) - as NVIDIA's install
        guide leaves C(nvidia-container-toolkit.list) or CUDA's C(cuda-keyring) package its source. apt refuses every
        source when one URI has two C(Signed-By) values, so exactly one may stay.
      - V(replace) backs such a file up to C(/etc/apt/gpuops-backups/) (outside apt's directories) and disables
        the entries - one-line entries are commented out, deb822 stanzas get an C(Enabled) field set to C(no), a
        file with nothing else in it is removed. V(fail) stops before any change and names the files.
      - Ignored with O(state=absent).
    type: str
    choices: [replace, fail]
    default: replace
  unsigned_sources:
    description:
      - How O(existing_sources) counts an entry of the same URI and suite without C(Signed-By).
      - V(conflict) treats it like another C(Signed-By) (it is replaced or stops the module, as O(existing_sources)
        says), so that an apt-key era entry of the same repository is cleaned up.
      - V(keep) leaves it alone. apt reads such an entry next to this source and refuses only two different
        C(Signed-By) values (checked with bookworm's apt 2.6.1); use it where the other entries are the node's own,
        as Debian's C(/etc/apt/sources.list) of the same archive with other components.
    type: str
    choices: [conflict, keep]
    default: conflict
  validate_certs:
    description: Verify the TLS certificate of an https O(key_url).
    type: bool
    default: true
  timeout:
    description: Seconds to wait for O(key_url).
    type: int
    default: 30
notes:
  - Files are written atomically with mode C(0644) (the keyring must be readable by apt's C(_apt) user); the keyring
    directory is created with mode C(0755).
  - In check mode a missing keyring is reported as a change without downloading the key.
  - In check mode the files of O(supersedes) are reported (RV(superseded), the diff) and left in place.
seealso:
  - module: ansible.builtin.deb822_repository
  - module: ansible.builtin.apt
'''

EXAMPLES = r'''
- name: NVIDIA's container toolkit repository (flat, suite "/")
  gpuops.k8s_gpu.apt_signed_repo:
    name: nvidia-container-toolkit
    uris: [https://nvidia.github.io/libnvidia-container/stable/deb/amd64]
    key_url: https://nvidia.github.io/libnvidia-container/gpgkey
    keyring: /etc/apt/keyrings/nvidia-container-toolkit.asc
    packages: [nvidia-container-toolkit=1.17.8-1, nvidia-container-toolkit-base=1.17.8-1]
  register: repo

- name: Install only what is missing
  ansible.builtin.apt:
    name: "{{ repo.packages_missing }}"
    update_cache: "{{ repo.cache_update_needed }}"
  when: repo.packages_missing | length > 0
'''

RETURN = r'''
sources_file:
  description: Path of the source file.
  returned: always
  type: str
  sample: /etc/apt/sources.list.d/nvidia-container-toolkit.sources
keyring:
  description: Path of the keyring.
  returned: always
  type: str
source_changed:
  description: Whether the source file was (or in check mode would be) written or removed.
  returned: always
  type: bool
keyring_changed:
  description: Whether the keyring was (or would be) written or removed.
  returned: always
  type: bool
cache_update_needed:
  description: Whether apt's lists are stale for this repository (the source or the key changed).
  returned: always
  type: bool
packages:
  description: Installed version of each package of O(packages) that is installed.
  returned: always
  type: dict
  sample: {nvidia-container-toolkit: 1.17.8-1}
packages_missing:
  description: The entries of O(packages) that are not installed or not at a matching version.
  returned: always
  type: list
  elements: str
superseded:
  description:
    - The files of O(supersedes) that were (or in check mode would be) removed, and where each was backed up
      (no C(backup) in check mode).
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/apt/sources.list.d/gpuops-nvidia-cuda.list,
            backup: /etc/apt/gpuops-backups/gpuops-nvidia-cuda.list.2026-11-30@06:00:00~}]
existing_sources:
  description: Other sources of the same URI with another C(Signed-By), and what was (or would be) done to them.
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/apt/sources.list.d/nvidia-container-toolkit.list, signed_by: [/usr/share/keyrings/x.gpg],
            action: removed, backup: /etc/apt/gpuops-backups/nvidia-container-toolkit.list.2026-11-24@00:00:00~}]
'''

from collections.abc import Iterable
from typing import Any

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import apt_source
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import read_bytes, replace_file

SOURCES_DIR = '/etc/apt/sources.list.d'


def argument_spec() -> dict[str, Any]:
    return dict(
        name=dict(type='str', required=True),
        state=dict(type='str', default='present', choices=['present', 'absent']),
        uris=dict(type='list', elements='str'),
        suites=dict(type='list', elements='str', default=['/']),
        components=dict(type='list', elements='str', default=[]),
        architectures=dict(type='list', elements='str', default=[]),
        comment=dict(type='str', default='Managed by gpuops.k8s_gpu'),
        key_url=dict(type='str', no_log=False),
        keyring=dict(type='path', required=True, no_log=False),
        key_refresh=dict(type='bool', default=False, no_log=False),
        supersedes=dict(type='list', elements='str', default=[]),
        packages=dict(type='list', elements='str', default=[]),
        existing_sources=dict(type='str', default='replace', choices=['replace', 'fail']),
        unsigned_sources=dict(type='str', default='conflict', choices=['conflict', 'keep']),
        validate_certs=dict(type='bool', default=True),
        timeout=dict(type='int', default=30),
    )


def _mode_wrong(path: str) -> bool:
    try:
        return (os.stat(path).st_mode & 0o7777) != 0o644
    except OSError:
        return False


def http_get(module: AnsibleModule, url: str, timeout: float) -> Any:
    # imported here: ansible.module_utils.urls (http.client, ssl, ...) costs ~50 ms per run, and a converged node
    # never downloads the key again
    from ansible.module_utils.urls import fetch_url
    return fetch_url(module, url, timeout=timeout)


def fetch_key(module: AnsibleModule, url: str) -> bytes:
    if url.startswith('file://'):
        data = read_bytes(url[len('file://'):])
        if data is None:
            module.fail_json(msg='key_url %s: the file cannot be read' % url)
        return data
    resp, info = http_get(module, url, timeout=module.params['timeout'])
    if info.get('status') != 200 or resp is None:
        module.fail_json(msg='key_url %s could not be downloaded: %s (HTTP %s); set gpuops_mirror.apt (or the '
                             "role's repo key URL) to a reachable mirror" % (url, info.get('msg'), info.get('status')))
    return resp.read()


def dpkg_arch(module: AnsibleModule) -> str | None:
    dpkg = module.get_bin_path('dpkg')
    if not dpkg:
        return None
    rc, out, err = module.run_command([dpkg, '--print-architecture'])
    return out.strip() if rc == 0 and out.strip() else None


def other_sources(sources_file: str, skip: Iterable[str] = ()) -> Any:
    """[(path, text)] of apt's other source files (less the paths of skip: the files the source supersedes)."""
    apt_dir = os.path.dirname(SOURCES_DIR)
    paths = [os.path.join(apt_dir, 'sources.list')]
    if os.path.isdir(SOURCES_DIR):
        paths += [os.path.join(SOURCES_DIR, n) for n in sorted(os.listdir(SOURCES_DIR))
                  if n.endswith(('.list', '.sources'))]
    out = []
    for path in paths:
        if os.path.abspath(path) in [os.path.abspath(sources_file)] + [os.path.abspath(s) for s in skip] \
                or not os.path.isfile(path):
            continue
        data = read_bytes(path)
        if data is not None:
            out.append((path, to_text(data, errors='replace')))
    return out


def plan_existing(module: AnsibleModule, p: dict[str, Any], sources_file: str, keyring: str,
                  superseded: Iterable[str] = ()) -> Any:
    """[(path, old text, new text or None, signed-by values)] for the conflicting sources; fails for fail."""
    files = other_sources(sources_file, superseded)
    texts = dict(files)
    found = apt_source.conflicting_sources(files, p['uris'], p['suites'], keyring, dpkg_arch(module),
                                           unsigned=p['unsigned_sources'] == 'conflict')
    if found and p['existing_sources'] == 'fail':
        module.fail_json(msg='existing_sources=fail: %s already define %s with another Signed-By (%s); apt would '
                             'refuse every source. Remove them or use existing_sources=replace; nothing was changed'
                             % (', '.join(f[0] for f in found), ' '.join(p['uris']),
                                ', '.join(sorted(set(str(k) for f in found for k in f[3])))))
    return [(path, texts[path], apt_source.disable_entries(texts[path], kind, hits), keys)
            for path, kind, hits, keys in found]


def backup_dir() -> str:
    """/etc/apt/gpuops-backups/: apt reads sources.list.d, so a backup there would be a source."""
    return os.path.join(os.path.dirname(SOURCES_DIR), 'gpuops-backups')


def read_installed(module: AnsibleModule, names: Iterable[str]) -> dict[str, Any]:
    installed = apt_source.dpkg_installed(module, names)
    if installed is None:
        module.fail_json(msg='dpkg-query was not found: apt_signed_repo manages Debian/Ubuntu nodes only')
    return installed


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True,
                           required_if=[('state', 'present', ('uris',)), ('key_refresh', True, ('key_url',))])
    p = module.params
    keyring = p['keyring']
    try:
        apt_source.check_name(p['name'])
        specs = apt_source.parse_package_specs(p['packages'])
        if not os.path.isabs(keyring):
            raise apt_source.AptSourceError('keyring %r must be an absolute path' % keyring)
        text = None
        supersedes = [os.path.join(SOURCES_DIR, n) for n in apt_source.check_supersedes(p['supersedes'], p['name'])]
        if p['state'] == 'present':
            if p['key_url'] is None:
                if not os.path.isfile(keyring):
                    raise apt_source.AptSourceError(
                        'keyring %s does not exist and key_url is not set: without key_url the keyring must already be '
                        'on the node (install the package that ships it, or set key_url); nothing was changed' % keyring)
            elif not p['key_url'].startswith(('http://', 'https://', 'file://')):
                raise apt_source.AptSourceError('key_url %r must be an http(s) or file URL' % p['key_url'])
            text = apt_source.render_deb822(p['uris'], p['suites'], p['components'], keyring,
                                            p['architectures'], p['comment'])
    except apt_source.AptSourceError as e:
        module.fail_json(msg=to_native(e))

    sources_file = os.path.join(SOURCES_DIR, p['name'] + '.sources')
    old_source = read_bytes(sources_file)
    old_key = read_bytes(keyring)
    diff: dict[str, Any] = dict(before={}, after={})
    result = dict(changed=False, sources_file=sources_file, keyring=keyring, source_changed=False,
                  keyring_changed=False, cache_update_needed=False, packages={}, packages_missing=[],
                  existing_sources=[], superseded=[])
    existing = plan_existing(module, p, sources_file, keyring, supersedes) if p['state'] == 'present' else []

    if p['state'] == 'absent':
        for path, old, key in ((sources_file, old_source, 'source_changed'), (keyring, old_key, 'keyring_changed')):
            if old is None:
                continue
            result[key] = True
            diff['before'][path] = to_text(old, errors='replace') if path == sources_file else '<keyring, %d bytes>' % len(old)
            diff['after'][path] = '<absent>'
            if not module.check_mode:
                os.unlink(path)
    else:
        new_key = None
        if p['key_url'] is None:
            pass  # the node's own keyring, only referenced (checked above that it exists)
        elif old_key is None or p['key_refresh']:
            if old_key is None and module.check_mode:
                result['keyring_changed'] = True
            else:
                try:
                    new_key = apt_source.keyring_bytes(fetch_key(module, p['key_url']), keyring)
                except apt_source.AptSourceError as e:
                    module.fail_json(msg=to_native(e))
                result['keyring_changed'] = new_key != old_key
        if p['key_url'] is not None and not result['keyring_changed'] and _mode_wrong(keyring):
            result['keyring_changed'] = True
            new_key = old_key
        if result['keyring_changed']:
            diff['before'][keyring] = '<absent>' if old_key is None else '<keyring, %d bytes>' % len(old_key)
            diff['after'][keyring] = '<keyring from %s>' % p['key_url']
            if not module.check_mode:
                replace_file(module, keyring, new_key, mode=0o644)
        for path, old, new, keys in existing:
            entry = dict(path=path, signed_by=keys, action='removed' if new is None else 'entries disabled')
            result['source_changed'] = True
            diff['before'][path] = old
            diff['after'][path] = '<absent>' if new is None else new
            if not module.check_mode:
                entry['backup'] = replace_file(module, path, None if new is None else to_bytes(new), backup=True,
                                               backup_dir=backup_dir(), backup_dir_mode=0o755)
            result['existing_sources'].append(entry)
        new_source = to_bytes(text)
        if new_source != old_source or _mode_wrong(sources_file):
            result['source_changed'] = True
            diff['before'][sources_file] = '<absent>' if old_source is None else to_text(old_source, errors='replace')
            diff['after'][sources_file] = text
            if not module.check_mode:
                replace_file(module, sources_file, new_source, mode=0o644)
        # the files this source replaces go only once it is in place (written above, or already there)
        for path in supersedes:
            old = read_bytes(path)
            if old is None:
                continue
            result['source_changed'] = True
            entry = dict(path=path)
            diff['before'][path] = to_text(old, errors='replace')
            diff['after'][path] = '<absent>'
            if not module.check_mode:
                entry['backup'] = replace_file(module, path, None, backup=True, backup_dir=backup_dir(),
                                               backup_dir_mode=0o755)
            result['superseded'].append(entry)
        result['cache_update_needed'] = result['source_changed'] or result['keyring_changed']
        installed = read_installed(module, sorted(set(name for name, _version in specs)))
        result['packages'] = installed
        result['packages_missing'] = apt_source.missing_packages(p['packages'], installed)

    result['changed'] = result['source_changed'] or result['keyring_changed']
    if module._diff and result['changed']:
        result['diff'] = dict(before='\n'.join('%s:\n%s' % kv for kv in sorted(diff['before'].items())) + '\n',
                              after='\n'.join('%s:\n%s' % kv for kv in sorted(diff['after'].items())) + '\n')
    module.exit_json(**result)


if __name__ == '__main__':
    main()
