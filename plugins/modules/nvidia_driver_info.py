#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: nvidia_driver_info
short_description: Read the NVIDIA driver state of a node and decide what the nvidia_driver role must do
version_added: 0.1.0
description:
  - Reads whether the node is a container, the running kernel, nouveau and nvidia kernel modules, installed driver
    package versions and hold selections, the NVIDIA dkms module and whether it is installed for the running kernel,
    runfile-installed NVML libraries and NVSwitches.
  - Decides whether the kernel module is handled (V(skip) in a container when O(kernel_module=auto)), whether dkms
    must rebuild the module for the running kernel, whether the module can be loaded with modprobe, whether a reboot
    is needed and allowed, and whether fabricmanager is wanted.
  - Read-only; used by the role P(gpuops.k8s_gpu.nvidia_driver#role).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
options:
  kernel_module:
    description:
      - V(auto) handles the kernel module (headers, dkms build, modprobe, reboot) unless the node is a container,
        detected by C(systemd-detect-virt --container), C(/.dockerenv), C(/run/.containerenv) or C(container=) in
        PID 1's environment. V(required) always handles it, V(skip) never does.
    type: str
    choices: [auto, required, skip]
    default: auto
  fabricmanager:
    description:
      - V(auto) wants fabricmanager when NVSwitches are found in sysfs; V(always) and V(never) force it.
      - With O(select), the NVLink5 packages are wanted (C(selection.packages.nvlink5.wanted) in RV(selection))
        on an NVLink5 system unless this is V(never).
    type: str
    choices: [auto, always, never]
    default: auto
  method:
    description: The install method; with V(runfile) the installed version is read from the NVML library files.
    type: str
    choices: [distro, cuda_repo, runfile]
    default: distro
  version:
    description: The driver version asked for (NVIDIA's version, for example C(535.309.01)); empty for any.
    type: str
    default: ''
  packages:
    description: Packages whose installed versions (and, with dpkg, hold selections) are returned.
    type: list
    elements: str
    default: []
  package_specs:
    description:
      - Packages as V(name) or V(name=version) (the version may use C(*) wildcards); those not installed, or
        installed at a version that does not match, are returned in RV(packages_missing), matched as
        M(ansible.builtin.apt) matches them, so that the role runs apt only when something is missing.
    type: list
    elements: str
    default: []
  prerequisites:
    description:
      - Packages a step installs before the driver (the initramfs tool, what dkms needs); which of them are
        installed, at any version, is returned in RV(prerequisites_installed), so that the role runs the package
        manager for them only when one is missing. They are not part of RV(packages) or RV(selections).
    type: list
    elements: str
    default: []
  driver_package:
    description: The package whose installed version is the driver's version.
    type: str
    default: ''
  select:
    description:
      - Decide the driver branch, the kernel module flavour and the package names (RV(selection)) from the
        options below and what the node shows (PCI device ids of the GPUs, Secure Boot, kernel release), and fail
        before anything changes on an end-of-life branch, an impossible flavour or an unsupported OS.
    type: bool
    default: false
  branch:
    description: The driver branch asked for (with O(select)).
    type: str
    default: ''
  kernel_module_type:
    description: V(auto), V(open) or V(proprietary) kernel modules (with O(select)).
    type: str
    choices: [auto, open, proprietary]
    default: auto
  accept_eol_branch:
    description: A branch accepted although it is end of life or not in the branch table (with O(select)).
    type: str
    default: ''
  precompiled:
    description: Ubuntu's signed precompiled modules instead of dkms; V(auto) when Secure Boot is on.
    type: str
    choices: [auto, 'true', 'false']
    default: auto
  secure_boot_mok_enrolled:
    description:
      - With O(select) - the site signs the kernel modules DKMS (or the runfile) builds with a Machine Owner Key
        enrolled in the firmware. Without it, Secure Boot on and a method that builds the modules on the node give
        a C(selection.refusal) (the kernel would refuse the unsigned modules).
    type: bool
    default: false
  os_family:
    description: V(Debian), V(Ubuntu) or V(RedHat) (the role passes the gathered facts; with O(select)).
    type: str
    default: ''
  os_major:
    description: The distribution's major version (with O(select)).
    type: str
    default: ''
  discover_installed:
    description:
      - Also list every installed dpkg/rpm package whose name contains C(nvidia), C(libcuda) or C(libnv) and whose
        version is the installed driver's (RV(driver_packages_installed)) - what is really installed, to hold or to
        release and remove. Their hold selections join RV(selections).
    type: bool
    default: false
  reboot:
    description: Whether the caller allows a reboot.
    type: bool
    default: true
  local_connection:
    description: Whether the play reaches this node with a local connection (a reboot is then never allowed).
    type: bool
    default: false
notes:
  - The NVSwitch count comes from sysfs PCI like M(gpuops.k8s_gpu.gpu_info).
seealso:
  - module: gpuops.k8s_gpu.gpu_info
'''

EXAMPLES = r'''
- name: Read the driver state
  gpuops.k8s_gpu.nvidia_driver_info:
    packages: [nvidia-driver, nvidia-kernel-dkms, nvidia-smi]
    driver_package: nvidia-driver
  register: drv

- name: Rebuild the module for the running kernel
  ansible.builtin.command: dkms install -m {{ drv.dkms.module }} -v {{ drv.dkms.version }} -k {{ drv.kernel_release }}
  changed_when: true
  when: drv.dkms.rebuild
'''

RETURN = r'''
container:
  description: Whether the node is a container, and why.
  returned: always
  type: dict
  sample: {detected: true, evidence: ["/.dockerenv exists", "PID 1 has container=docker"]}
kernel_module:
  description: The requested mode, the effective one (V(required) or V(skip)) and the reason.
  returned: always
  type: dict
  sample: {mode: auto, effective: skip, reason: "container detected (...)"}
kernel_release:
  description: The running kernel.
  returned: always
  type: str
nouveau_loaded:
  description: Whether nouveau is loaded.
  returned: always
  type: bool
nvidia_loaded:
  description: Whether the nvidia kernel module is loaded.
  returned: always
  type: bool
loaded_version:
  description: Version of the loaded nvidia module, or null.
  returned: always
  type: str
packages:
  description: Installed version of each package of O(packages) and O(package_specs) that is installed.
  returned: always
  type: dict
  sample: {nvidia-driver: 535.309.01-0+deb12u1}
selections:
  description: dpkg selection (V(install), V(hold), ...) of each installed package of O(packages) (dpkg only).
  returned: always
  type: dict
packages_missing:
  description: The entries of O(package_specs) that are not installed, or not at a matching version.
  returned: always
  type: list
  elements: str
prerequisites_installed:
  description: The names of O(prerequisites) that are installed (any version), sorted.
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver=535.309.01*]
installed_version:
  description: Installed version of O(driver_package), or null.
  returned: always
  type: str
installed_upstream:
  description: NVIDIA's version of the installed driver (package or runfile), or null.
  returned: always
  type: str
  sample: 535.309.01
version_matches:
  description: Whether the installed driver is O(version); null when either is unknown.
  returned: always
  type: bool
runfile_versions:
  description: Versions of C(libnvidia-ml.so.<version>) files found.
  returned: always
  type: list
  elements: str
dkms:
  description: NVIDIA dkms module name, version, whether it is installed for the running kernel, and V(rebuild).
  returned: always
  type: dict
  sample: {module: nvidia-current, version: 535.309.01, registered: true, installed_for_kernel: false, rebuild: true}
load_module:
  description: Whether the module is installed but not loaded and can be loaded without a reboot.
  returned: always
  type: bool
reboot:
  description: Whether a reboot is required, why, whether it is allowed and whether the role will reboot.
  returned: always
  type: dict
  sample: {required: true, reasons: ["nouveau is loaded ..."], allowed: true, reason: allowed, will_reboot: true}
nvswitch_count:
  description: NVSwitches found in sysfs PCI.
  returned: always
  type: int
fabricmanager:
  description: Whether fabricmanager is wanted, why, and the driver version it must match.
  returned: always
  type: dict
selection:
  description:
    - With O(select), the branch's lifecycle status, the kernel module flavour and the package names.
    - C(branch_lock) is what locks the branch before the driver is installed (C(kind=apt) - the CUDA repository's
      pinning package, installed on its own before the driver; C(kind=dnf_versionlock) - RHEL 10's versionlock
      pattern), C(branch_lock_present) whether dnf's versionlock list already holds that pattern's entries.
    - C(precompiled.kernel_flavour) is the kernel flavour (V(generic), V(generic-hwe-24.04), ...) whose
      C(linux-modules-nvidia-*-<flavour>) metapackage is installed next to the running kernel's precompiled
      modules (Ubuntu, read from the installed C(linux-image-*) metapackages), or null.
    - C(refusal) is why the role must not install on this node, or null (Secure Boot on and a method that builds
      unsigned modules on the node, see O(secure_boot_mok_enrolled); an NVLink5 system with O(method=distro)
      on Ubuntu or Debian, whose archives lack libnvsdm and nvlsm, found only in NVIDIA's CUDA repository); the
      role fails with it before installing anything.
  returned: when select is true
  type: dict
  sample: {branch: {branch: "580", type: ltsb, eol: "2028-06", supported: true},
           flavour: {effective: open, reason: "auto: ..."}, packages: {pinned: [], version_package: ""}}
nvlink5:
  description: Whether an NVLink5 system (an InfiniBand device whose VPD carries SW_MNG) was found.
  returned: always
  type: bool
persistenced_dropin:
  description: The systemd drop-in that turns persistence mode on, or null when the packaged unit needs none.
  returned: always
  type: str
branch_check:
  description: Whether the installed driver belongs to O(branch) (and O(version)), and why; null without both.
  returned: always
  type: dict
branch_change:
  description:
    - With O(branch) (not with O(select), not with the runfile method), what must go before the driver of
      O(branch) (and O(version)) replaces the installed one, in either direction (C(direction) is C(fresh),
      C(none), C(up) or C(down), from C(from) to C(to)).
    - C(release_holds) the dpkg holds on the installed version's packages, C(release_versionlocks) (RHEL) the
      names locked at that version, C(old_branch_lock) (RHEL 10) the old branch's versionlock pattern when the list
      holds it, C(remove_first) the CUDA repository's pinning package of another branch, C(allow_downgrade) whether
      the package manager must be allowed to downgrade.
  returned: always
  type: dict
driver_packages_installed:
  description: With O(discover_installed), the installed NVIDIA packages at the installed driver's version.
  returned: always
  type: list
  elements: str
initramfs_command:
  description: The command that rebuilds the initramfs on this OS family.
  returned: always
  type: list
  elements: str
'''

from typing import Any

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import apt_source
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver as nd
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver_select as sel
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import read_bytes


def argument_spec() -> dict[str, Any]:
    return dict(
        kernel_module=dict(type='str', choices=list(nd.KERNEL_MODULE_MODES), default='auto'),
        fabricmanager=dict(type='str', choices=list(nd.FABRICMANAGER_MODES), default='auto'),
        method=dict(type='str', choices=['distro', 'cuda_repo', 'runfile'], default='distro'),
        version=dict(type='str', default=''),
        packages=dict(type='list', elements='str', default=[]),
        package_specs=dict(type='list', elements='str', default=[]),
        prerequisites=dict(type='list', elements='str', default=[]),
        driver_package=dict(type='str', default=''),
        select=dict(type='bool', default=False),
        branch=dict(type='str', default=''),
        kernel_module_type=dict(type='str', choices=list(sel.FLAVOURS), default='auto'),
        accept_eol_branch=dict(type='str', default=''),
        precompiled=dict(type='str', choices=['auto', 'true', 'false'], default='auto'),
        secure_boot_mok_enrolled=dict(type='bool', default=False),
        os_family=dict(type='str', default=''),
        os_major=dict(type='str', default=''),
        discover_installed=dict(type='bool', default=False),
        reboot=dict(type='bool', default=True),
        local_connection=dict(type='bool', default=False),
    )


def read_packages(module: AnsibleModule, names: list[str]) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """({name: version}, {name: selection}, os_family) for the installed packages among names."""
    versions = apt_source.dpkg_installed(module, names)
    if versions is not None:
        selections = {}
        if versions:
            rc, out, err = module.run_command([module.get_bin_path('dpkg', required=True), '--get-selections']
                                              + sorted(versions))
            selections = nd.parse_dpkg_selections(out)
        return versions, selections, 'Debian'
    rpm = module.get_bin_path('rpm')
    if rpm:
        if not names:
            return {}, {}, 'RedHat'
        rc, out, err = module.run_command([rpm, '-q', '--qf', '%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n'] + names)
        return nd.parse_rpm_query('\n'.join(line for line in out.splitlines() if '\t' in line)), {}, 'RedHat'
    return {}, {}, None


PERSISTENCED_UNITS = ('etc/systemd/system/nvidia-persistenced.service', 'lib/systemd/system/nvidia-persistenced.service',
                      'usr/lib/systemd/system/nvidia-persistenced.service')


infiniband_vpds = node_probe.infiniband_vpds   # one home: node_probe (the doctor reads them too)


def discover_installed(module: AnsibleModule) -> dict[str, Any]:
    """{name: version} of the installed packages whose name looks like the NVIDIA driver's."""
    pattern = re.compile(r'(nvidia|libcuda|libnv)')
    dpkg_query = module.get_bin_path('dpkg-query')
    if dpkg_query:
        rc, out, err = module.run_command([dpkg_query, '-W', '-f', '${Package}\t${Version}\t${db:Status-Abbrev}\n'])
        found = {}
        for line in out.splitlines():
            parts = line.split('\t')
            if len(parts) == 3 and parts[2][1:2] == 'i' and pattern.search(parts[0]):  # 'ii ' or 'hi ' (held)
                found[parts[0]] = parts[1]
        return found
    rpm = module.get_bin_path('rpm')
    if rpm:
        rc, out, err = module.run_command([rpm, '-qa', '--qf', '%{NAME}\t%{VERSION}-%{RELEASE}\n'])
        return dict((k, v) for k, v in nd.parse_rpm_query(out).items() if pattern.search(k))
    return {}


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    gpus, switches = node_probe.pci_devices('/')
    selection = None
    if p['select']:
        dnf_current = None
        dnf = module.get_bin_path('dnf')
        if dnf and p['os_family'] == 'RedHat':
            rc, out, err = module.run_command([dnf, '-q', 'module', 'list', '--enabled', 'nvidia-driver'])
            dnf_current = sel.parse_dnf_enabled_stream(out) if rc == 0 else None
        # RHEL 10's branch lock (dnf versionlock of *nvidia*<branch>*): already in the list, or to be added
        lock_list = read_bytes('/etc/dnf/plugins/versionlock.list') if p['os_family'] == 'RedHat' else None
        # Ubuntu: the installed kernel image packages and what they depend on (the flavour metapackage of the
        # precompiled modules, nvidia_driver_select.ubuntu_kernel_flavour)
        image_depends = None
        dpkg_query = module.get_bin_path('dpkg-query') if p['os_family'] == 'Ubuntu' else None
        if dpkg_query:
            rc, out, err = module.run_command([dpkg_query, '-W', '-f', '${Package}\t${db:Status-Abbrev}\t${Depends}\n',
                                               'linux-image-*'])
            image_depends = sel.parse_dpkg_depends(out) if rc == 0 else None
        try:
            selection = sel.select(
                dict(branch=p['branch'], version=p['version'], kernel_module_type=p['kernel_module_type'],
                     accept_eol_branch=p['accept_eol_branch'], method=p['method'], precompiled=p['precompiled'],
                     secure_boot_mok_enrolled=p['secure_boot_mok_enrolled'],
                     fabricmanager=p['fabricmanager']),
                dict(family=p['os_family'], major=p['os_major'], kernel_release=os.uname()[2],
                     machine=os.uname()[4], gpu_pci_ids=[g['pci_device_id'] for g in gpus],
                     secure_boot=node_probe.secure_boot('/'), dnf_module_current=dnf_current,
                     nvlink5=sel.nvlink5_detected(infiniband_vpds('/')),
                     versionlock_list=to_native(lock_list) if lock_list else None,
                     kernel_image_depends=image_depends))
        except sel.SelectionError as e:
            module.fail_json(msg=to_native(e))
    detect_virt = None
    sdv = module.get_bin_path('systemd-detect-virt')
    if sdv:
        rc, out, err = module.run_command([sdv, '--container'])
        detect_virt = out.strip() if rc == 0 else None
    container, evidence = nd.detect_container('/', detect_virt)
    release = os.uname()[2]
    modules = node_probe.loaded_modules('/')
    try:
        specs = apt_source.parse_package_specs(p['package_specs'], 'package_specs')
    except apt_source.AptSourceError as e:
        module.fail_json(msg=to_native(e))
    names = list(p['packages']) + [name for name, _version in specs if name not in p['packages']]
    versions, selections, family = read_packages(module, names)
    prerequisites = sorted(read_packages(module, p['prerequisites'])[0]) if p['prerequisites'] else []
    installed = versions.get(p['driver_package']) if p['driver_package'] else None
    loaded_version = nd.module_version_from_sys('/') or node_probe.driver_version_from_proc('/')
    dkms = nd.dkms_state('/', release, nd.upstream_version(installed) if installed else None)
    nvlink5 = sel.nvlink5_detected(infiniband_vpds('/'))
    obs = dict(nvlink5=nvlink5, container=container, container_evidence=evidence, kernel_release=release,
               nouveau_loaded='nouveau' in modules, nvidia_loaded='nvidia' in modules or 'nvidia_current' in modules,
               loaded_version=loaded_version, installed_version=installed,
               runfile_versions=nd.nvml_library_versions('/'), dkms=dkms, nvswitch_count=len(switches))
    decided = nd.plan(dict(p, os_family=family), obs)
    for w in decided.pop('warnings'):
        module.warn(w)
    unit = None
    for rel in PERSISTENCED_UNITS:
        data = read_bytes(os.path.join('/', rel))
        unit = to_native(data) if data else None
        if unit:
            break
    branch_check = None
    if p['branch'] and decided['installed_upstream']:
        ok, why = sel.verify_installed(p['branch'], p['version'], decided['installed_upstream'])
        branch_check = {'ok': ok, 'message': why}
    discovered = []
    wants_change = bool(p['branch'] and p['method'] != 'runfile' and not p['select'])
    all_installed = discover_installed(module) if (p['discover_installed'] or wants_change) else {}
    if p['discover_installed']:
        discovered = sel.installed_driver_packages(all_installed, decided['installed_upstream'])
        extra = [n for n in discovered if n not in versions]
        if extra:
            # their hold selections join the others (to release them); RV(packages) keeps the names asked for
            _more_versions, more_selections, _family = read_packages(module, extra)
            selections.update(more_selections)
    change = None
    if wants_change:
        # another branch or version installed now: its holds, version locks and pinning package go first
        # (nvidia_driver_select.branch_change); the role's names for the new branch may not be installed at all
        now = decided['installed_upstream'] or sel.installed_driver_version(all_installed)
        old = [n for n in sel.installed_driver_packages(all_installed, now) if n not in selections]
        if old and family == 'Debian':
            selections.update(read_packages(module, old)[1])
        lock_list = read_bytes('/etc/dnf/plugins/versionlock.list') if family == 'RedHat' else None
        change = sel.branch_change(now, p['branch'], p['version'], all_installed, selections,
                                   p['os_family'] or family, to_native(lock_list) if lock_list else None)
    module.exit_json(changed=False, container={'detected': container, 'evidence': evidence},
                     kernel_release=release, nouveau_loaded=obs['nouveau_loaded'], nvidia_loaded=obs['nvidia_loaded'],
                     loaded_version=loaded_version, packages=versions, selections=selections,
                     packages_missing=apt_source.missing_packages(p['package_specs'], versions),
                     prerequisites_installed=prerequisites,
                     installed_version=installed, runfile_versions=obs['runfile_versions'],
                     nvswitch_count=len(switches), selection=selection, nvlink5=nvlink5,
                     persistenced_dropin=sel.persistenced_dropin(unit), branch_check=branch_check,
                     driver_packages_installed=discovered, branch_change=change,
                     **decided)


if __name__ == '__main__':
    main()
