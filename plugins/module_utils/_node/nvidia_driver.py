# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the nvidia_driver role, as pure functions over what the node looks like.

Everything that reads the node lives in observe(); everything that decides lives in plan(). The module
nvidia_driver_info glues the two together; unit tests call plan() with hand-made observations.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import platforms

KERNEL_MODULE_MODES = ('auto', 'required', 'skip')
FABRICMANAGER_MODES = ('auto', 'always', 'never')

# dkms module names used by the NVIDIA driver packages, with the file name of the main module each builds:
# Debian's nvidia-kernel-dkms registers "nvidia-current" (the module file is nvidia-current.ko, aliased to "nvidia"
# in modprobe.d); Ubuntu's proprietary -server packages (nvidia-dkms-<b>-server) register "nvidia-srv" and build
# nvidia.ko (canonical/nvidia-graphics-drivers, branches 535-server..595-server, debian/dkms_nvidia.conf:
# PACKAGE_NAME); Ubuntu's -server-open packages, NVIDIA's CUDA repository and the runfile's --dkms register "nvidia".
DKMS_NAMES = ('nvidia-current', 'nvidia-srv', 'nvidia')
DKMS_MODULE_FILES = {'nvidia-current': 'nvidia-current', 'nvidia-srv': 'nvidia', 'nvidia': 'nvidia'}

DKMS_MODULE_DIRS = ('updates/dkms', 'extra')

LIB_DIRS = ('usr/lib/x86_64-linux-gnu', 'usr/lib/aarch64-linux-gnu', 'usr/lib64', 'usr/lib')


def _path(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip('/'))


def _read(root: str, rel: str) -> str | None:
    try:
        with open(_path(root, rel), 'r') as f:
            return f.read()
    except (IOError, OSError):
        return None


def upstream_version(version: str | None) -> str | None:
    """NVIDIA's version from a package version: drop the epoch and the distribution revision.

    '535.309.01-0+deb12u1' -> '535.309.01'; '3:535.183.01-1.el9' -> '535.183.01';
    '535.230.02-0ubuntu0.22.04.3' -> '535.230.02'; '' / None -> None.
    """
    if not version:
        return None
    v = version.split(':', 1)[1] if ':' in version else version
    if '-' in v:
        v = v.rsplit('-', 1)[0]
    m = re.match(r'^([0-9]+(?:\.[0-9]+){1,2})', v)
    return m.group(1) if m else v


def parse_dpkg_selections(text: str | None) -> dict[str, str]:
    """Output of dpkg --get-selections -> {name: selection}."""
    out: dict[str, str] = {}
    for line in (text or '').splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0].split(':', 1)[0]] = parts[1]
    return out


def parse_rpm_query(text: str | None) -> dict[str, str]:
    """Output of rpm -q --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n' -> {name: version}."""
    out: dict[str, str] = {}
    for line in (text or '').splitlines():
        parts = line.split('\t')
        if len(parts) == 2 and parts[1].strip():
            out[parts[0]] = parts[1].strip()
    return out


def detect_container(root: str = '/', detect_virt: str | None = None) -> tuple[bool, list[str]]:
    """(is_container, evidence list). detect_virt is systemd-detect-virt --container's answer or None."""
    evidence: list[str] = []
    if detect_virt and detect_virt.strip() not in ('', 'none'):
        evidence.append('systemd-detect-virt --container: %s' % detect_virt.strip())
    for marker in ('.dockerenv', 'run/.containerenv'):
        if os.path.exists(_path(root, marker)):
            evidence.append('/%s exists' % marker)
    environ = _read(root, 'proc/1/environ') or ''
    for var in environ.split('\0'):
        if var.startswith('container=') and var != 'container=':
            evidence.append('PID 1 has %s' % var)
    return bool(evidence), evidence


def dkms_state(root: str, kernel_release: str, version: str | None = None) -> dict[str, Any]:
    """Which NVIDIA dkms module is registered and whether it is installed for kernel_release.

    Returns {'module', 'version', 'registered', 'installed_for_kernel', 'kernel'}; 'module' is None when
    no NVIDIA dkms source is registered. With version, only that version is considered.
    """
    state: dict[str, Any] = {'module': None, 'version': None, 'registered': False, 'installed_for_kernel': False,
                             'kernel': kernel_release}
    for name in DKMS_NAMES:
        base = _path(root, 'var/lib/dkms/%s' % name)
        try:
            versions = sorted(v for v in os.listdir(base) if re.match(r'^[0-9]', v))
        except OSError:
            continue
        if version:
            versions = [v for v in versions if v == version]
        if not versions:
            continue
        state.update(module=name, version=versions[-1], registered=True)
        # Debian's and Ubuntu's dkms install into updates/dkms, RHEL's into extra (a module found in neither
        # would be "rebuilt" on every run)
        for sub in DKMS_MODULE_DIRS:
            mod_dir = _path(root, 'lib/modules/%s/%s' % (kernel_release, sub))
            if glob.glob(os.path.join(mod_dir, '%s.ko*' % DKMS_MODULE_FILES[name])):
                state['installed_for_kernel'] = True
                state['module_dir'] = '/lib/modules/%s/%s' % (kernel_release, sub)
                break
        break
    return state


def dkms_install_advice(module: str | None = None) -> str:
    """The dkms command that builds the NVIDIA module for the running kernel, with the module name as registered
    (dkms_state()['module']); without it, the names the driver packages use, so the advice never fails on a node
    whose packages register another name (nvidia-srv on Ubuntu's proprietary -server drivers)."""
    if module:
        return 'dkms install -m %s -v <version>' % module
    return ('dkms install -m <module> -v <version>, with the module name that dkms status shows: nvidia-srv for '
            'Ubuntu\'s -server drivers, nvidia-current for Debian\'s, nvidia otherwise')


def nvml_library_versions(root: str = '/') -> list[str]:
    """Versions of libnvidia-ml.so.<version> files in the usual library directories (runfile installs)."""
    found: set[str] = set()
    for d in LIB_DIRS:
        for p in glob.glob(os.path.join(_path(root, d), 'libnvidia-ml.so.*.*')):
            m = re.search(r'libnvidia-ml\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)$', p)
            if m:
                found.add(m.group(1))
    return sorted(found)


def module_version_from_sys(root: str = '/') -> str | None:
    """Version of the loaded nvidia kernel module from /sys/module/nvidia/version, or None."""
    text = _read(root, 'sys/module/nvidia/version')
    return text.strip() if text and text.strip() else None


def plan(params: Mapping[str, Any], obs: Mapping[str, Any]) -> dict[str, Any]:
    """Decide what the role has to do.

    params: kernel_module (auto|required|skip), fabricmanager (auto|always|never), version (upstream or ''),
            reboot (bool), local_connection (bool), method (distro|cuda_repo|runfile), os_family.
    obs: container (bool), container_evidence (list), kernel_release, nouveau_loaded, nvidia_loaded,
         loaded_version, installed_version (package version or None), runfile_versions (list),
         dkms (dkms_state() result), nvswitch_count.
    """
    mode = params.get('kernel_module') or 'auto'
    if mode not in KERNEL_MODULE_MODES:
        raise ValueError('kernel_module must be one of %s, got %r' % (', '.join(KERNEL_MODULE_MODES), mode))
    fm_mode = params.get('fabricmanager') or 'auto'
    if fm_mode not in FABRICMANAGER_MODES:
        raise ValueError('fabricmanager must be one of %s, got %r' % (', '.join(FABRICMANAGER_MODES), fm_mode))

    warnings: list[str] = []
    container = bool(obs.get('container'))
    if mode == 'skip':
        effective, reason = 'skip', 'nvidia_driver_kernel_module is skip'
    elif mode == 'required':
        effective, reason = 'required', 'nvidia_driver_kernel_module is required'
        if container:
            warnings.append('nvidia_driver_kernel_module is required but this node is a container (%s); '
                            'a container cannot load kernel modules'
                            % '; '.join(obs.get('container_evidence') or []))
    elif container:
        effective = 'skip'
        reason = ('container detected (%s): it shares the host kernel, so no kernel headers, dkms build, '
                  'modprobe or reboot' % '; '.join(obs.get('container_evidence') or []))
    else:
        effective, reason = 'required', 'not a container'

    method = params.get('method') or 'distro'
    if method == 'runfile':
        installed_upstream = (params.get('version') if params.get('version') in (obs.get('runfile_versions') or [])
                              else (sorted(obs.get('runfile_versions') or []) or [None])[-1])
    else:
        installed_upstream = upstream_version(obs.get('installed_version'))

    # dkms: a registered module that is not installed for the running kernel (kernel update) is rebuilt
    dkms = dict(obs.get('dkms') or {})
    dkms['rebuild'] = bool(effective == 'required' and dkms.get('registered') and not dkms.get('installed_for_kernel'))

    # reboot: nouveau still loaded, or a loaded module that is not the installed driver
    reasons = []
    if effective == 'required':
        if obs.get('nouveau_loaded'):
            reasons.append('nouveau is loaded (blacklisted now, it goes away only with a reboot)')
        loaded = obs.get('loaded_version')
        if obs.get('nvidia_loaded') and loaded and installed_upstream and loaded != installed_upstream:
            reasons.append('the loaded nvidia module is %s but %s is installed' % (loaded, installed_upstream))
    required = bool(reasons)
    if effective == 'skip':
        allowed, why = False, 'kernel module skipped: %s' % reason
    elif not params.get('reboot', True):
        allowed, why = False, 'nvidia_driver_reboot is false'
    elif params.get('local_connection'):
        allowed, why = False, 'the play runs with a local connection on the control node; never rebooted'
    else:
        allowed, why = True, 'allowed'

    # modprobe: the module is installed, not loaded, and nothing forces a reboot first
    load_module = bool(effective == 'required' and not obs.get('nvidia_loaded') and not required
                       and installed_upstream)

    nvswitches = int(obs.get('nvswitch_count') or 0)
    if fm_mode == 'always':
        fm = {'wanted': True, 'reason': 'nvidia_driver_fabricmanager is always'}
    elif fm_mode == 'never':
        fm = {'wanted': False, 'reason': 'nvidia_driver_fabricmanager is never'}
    elif obs.get('nvlink5'):
        fm = {'wanted': True, 'reason': 'NVLink5 system (InfiniBand device with SW_MNG in its VPD)'}
    elif nvswitches:
        fm = {'wanted': True, 'reason': '%d NVSwitch(es) found' % nvswitches}
    else:
        fm = {'wanted': False, 'reason': 'no NVSwitch found'}
    fm['version'] = params.get('version') or installed_upstream
    fm['nvlink5'] = bool(obs.get('nvlink5')) and fm['wanted']

    version_ok = None
    if params.get('version') and installed_upstream:
        version_ok = params['version'] == installed_upstream

    return {
        'kernel_module': {'mode': mode, 'effective': effective, 'reason': reason},
        'installed_upstream': installed_upstream,
        'version_matches': version_ok,
        'dkms': dkms,
        'load_module': load_module,
        'reboot': {'required': required, 'reasons': reasons, 'allowed': allowed, 'reason': why,
                   'will_reboot': required and allowed},
        'fabricmanager': fm,
        'initramfs_command': platforms.initramfs_command(params.get('os_family') or ''),
        'warnings': warnings,
    }
