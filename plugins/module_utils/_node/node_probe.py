# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe a node without NVML: sysfs PCI devices, kernel modules, Secure Boot, hypervisor, runtimes.

Every function takes ``root`` (default ``/``) so the same code can inspect a mounted image.
Only files are read here; nothing is executed, except through a ``run`` callable the caller hands in (a module's
run_command): ``containerd --version``, for the containerd version.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable
from typing import Any, overload

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import containerd_cdi
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_distributions
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.nvidia_driver_select import nvlink5_detected

NVIDIA_VENDOR = '0x10de'
PCI_CLASS_VGA = '0x0300'
PCI_CLASS_3D = '0x0302'
PCI_CLASS_BRIDGE_OTHER = '0x0680'
PCI_IDS_PATHS = ('usr/share/misc/pci.ids', 'usr/share/hwdata/pci.ids', 'usr/share/pci.ids')
SECURE_BOOT_VAR = 'sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c'


def _path(root: str | None, rel: str) -> str:
    return os.path.join(root or '/', rel.lstrip('/'))


@overload
def _read(root: str | None, rel: str) -> str | None:
    ...


@overload
def _read(root: str | None, rel: str, default: str) -> str:
    ...


def _read(root: str | None, rel: str, default: str | None = None) -> str | None:
    try:
        with open(_path(root, rel), 'r') as f:
            return f.read().strip()
    except (IOError, OSError):
        return default


def _read_bytes(root: str | None, rel: str) -> bytes | None:
    try:
        with open(_path(root, rel), 'rb') as f:
            return f.read()
    except (IOError, OSError):
        return None


def pci_names(root: str = '/', device_ids: Iterable[str] | None = None) -> dict[str, str]:
    """Names of NVIDIA devices from the pci.ids database: {'0x1eb8': 'TU104GL [Tesla T4]'}."""
    wanted = set(d.lower() for d in device_ids) if device_ids else None
    names: dict[str, str] = {}
    for rel in PCI_IDS_PATHS:
        path = _path(root, rel)
        if not os.path.exists(path):
            continue
        in_nvidia = False
        with open(path, 'rb') as f:
            for raw in f:
                if raw.startswith(b'#') or not raw.strip():
                    continue
                line = raw.decode('utf-8', 'replace').rstrip('\n')
                if not line.startswith('\t'):
                    if in_nvidia:
                        break  # vendor sections are contiguous; we are past NVIDIA's
                    in_nvidia = line.lower().startswith('10de ')
                    continue
                if in_nvidia and not line.startswith('\t\t'):
                    dev, _sep, name = line.strip().partition(' ')
                    key = '0x' + dev.lower()
                    if wanted is None or key in wanted:
                        names[key] = name.strip()
        break
    return names


def pci_devices(root: str = '/') -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """NVIDIA PCI functions from sysfs: GPUs (VGA / 3D controller) and NVSwitches (bridge)."""
    base = _path(root, 'sys/bus/pci/devices')
    gpus, switches = [], []  # type: (list[dict[str, Any]], list[dict[str, Any]])
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return gpus, switches
    for addr in entries:
        vendor = _read(root, 'sys/bus/pci/devices/%s/vendor' % addr, '')
        if vendor.lower() != NVIDIA_VENDOR:
            continue
        pclass = (_read(root, 'sys/bus/pci/devices/%s/class' % addr, '') or '').lower()
        klass = pclass[:6] if pclass.startswith('0x') else pclass
        dev: dict[str, Any] = {
            'pci_bus_id': addr,
            'pci_device_id': (_read(root, 'sys/bus/pci/devices/%s/device' % addr, '') or '').lower(),
            'pci_class': klass,
            'driver': None,
        }
        link = os.path.join(base, addr, 'driver')
        if os.path.islink(link):
            dev['driver'] = os.path.basename(os.readlink(link))
        if klass in (PCI_CLASS_VGA, PCI_CLASS_3D):
            gpus.append(dev)
        elif klass == PCI_CLASS_BRIDGE_OTHER:
            switches.append(dev)
    ids = [d['pci_device_id'] for d in gpus + switches]
    names = pci_names(root, ids) if ids else {}
    for d in gpus + switches:
        d['name'] = names.get(d['pci_device_id'])
    return gpus, switches


def loaded_modules(root: str = '/') -> set[str]:
    """Names of loaded kernel modules (from /proc/modules)."""
    text = _read(root, 'proc/modules', '') or ''
    return set(line.split(' ', 1)[0] for line in text.splitlines() if line)


def driver_version_from_proc(root: str = '/') -> str | None:
    """Kernel module version from /proc/driver/nvidia/version, or None."""
    text = _read(root, 'proc/driver/nvidia/version')
    if not text:
        return None
    m = re.search(r'Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+\.[0-9]+(?:\.[0-9]+)?)', text)
    return m.group(1) if m else None


def secure_boot(root: str = '/') -> str:
    """'enabled', 'disabled' or 'unsupported' (legacy BIOS / no efivars)."""
    data = _read_bytes(root, SECURE_BOOT_VAR)
    if data is None:
        if os.path.isdir(_path(root, 'sys/firmware/efi')):
            return 'disabled'
        return 'unsupported'
    # efivarfs: 4 bytes of attributes, then the value byte
    return 'enabled' if len(data) >= 5 and data[4:5] == b'\x01' else 'disabled'


_HYPERVISOR_VENDORS = (
    ('vmware', 'vmware'), ('qemu', 'kvm'), ('kvm', 'kvm'), ('microsoft', 'hyperv'),
    ('xen', 'xen'), ('amazon ec2', 'kvm'), ('innotek', 'virtualbox'), ('google', 'kvm'),
)


# the kernel's "Hypervisor detected: <name>" (arch/x86/kernel/cpu/hypervisor.c, each hypervisor's name field)
_KERNEL_HYPERVISORS = (('kvm', 'kvm'), ('vmware', 'vmware'), ('hyper-v', 'hyperv'), ('xen', 'xen'), ('acrn', 'acrn'),
                       ('jailhouse', 'jailhouse'), ('bhyve', 'bhyve'))
# paravirtual clock sources of the guest kernels (/sys/devices/system/clocksource/clocksource0/available_clocksource)
_CLOCKSOURCES = (('kvm-clock', 'kvm'), ('hyperv_clocksource', 'hyperv'), ('xen', 'xen'))
CLOCKSOURCES_FILE = 'sys/devices/system/clocksource/clocksource0/available_clocksource'


def hypervisor_evidence(root: str = '/', log_lines: Iterable[str] | None = None) -> tuple[str | None, str]:
    """(hypervisor, evidence): DMI vendor, /sys/hypervisor/type, the kernel log's "Hypervisor detected", the
    paravirtual clock source, else 'unknown' when the CPU's hypervisor flag is set; (None, ...) on bare metal."""
    cpuinfo = _read(root, 'proc/cpuinfo', '') or ''
    flagged = any(line.startswith('flags') and ' hypervisor' in line for line in cpuinfo.splitlines())
    hv_type = _read(root, 'sys/hypervisor/type')
    vendor = ' '.join(filter(None, [_read(root, 'sys/class/dmi/id/sys_vendor'),
                                    _read(root, 'sys/class/dmi/id/product_name')])).lower()
    for needle, name in _HYPERVISOR_VENDORS:
        if needle in vendor:
            return name, 'DMI: %s' % vendor
    if hv_type:
        return hv_type, '/sys/hypervisor/type: %s' % hv_type
    for line in log_lines or []:
        m = re.search(r'Hypervisor detected: (.+)$', line)
        if m:
            detected = m.group(1).strip()
            for needle, name in _KERNEL_HYPERVISORS:
                if needle in detected.lower():
                    return name, 'kernel log: Hypervisor detected: %s' % detected
    clocks = (_read(root, CLOCKSOURCES_FILE, '') or '').split()
    for needle, name in _CLOCKSOURCES:
        for clock in clocks:
            if clock.startswith(needle):
                return name, 'clock source %s' % clock
    if flagged:
        return 'unknown', 'CPU hypervisor flag set; no DMI tables, no /sys/hypervisor, no kernel log line'
    return None, 'bare metal (no CPU hypervisor flag)'


def hypervisor(root: str = '/', log_lines: Iterable[str] | None = None) -> str | None:
    """Which hypervisor the node runs under (None on bare metal)."""
    return hypervisor_evidence(root, log_lines)[0]


KMSG = 'dev/kmsg'
_KMSG_PREFIX = re.compile(r'^\d+,\d+,\d+,[^;]*;')
_DMESG_PREFIX = re.compile(r'^\[\s*\d+\.\d+\]\s?')
# The driver's three forms (src/nvidia/src/kernel/gpu/rc/kernel_rc.c, XID_PRINT_WITH_ATTR): "(PCI:<d>:<b>:<d>)", and
# on a MIG GPU "(PCI:... GPU-I:<gi>)" or "(PCI:... GPU-I:<gi> GPU-CI:<ci>)" (docs/conformance/doctor-health.md DH-14)
XID_RE = re.compile(r'NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)(?: GPU-I:(\d+))?(?: GPU-CI:(\d+))?\): (\d+),\s*(.*)$')


def kernel_log(root: str = '/', path: str | None = None, limit: int = 200000) -> list[str] | None:
    """The kernel log's messages since boot, as far as the ring buffer holds them: /dev/kmsg read without blocking
    (one record per read; needs root where kernel.dmesg_restrict is 1), or a file of dmesg output. None when it
    cannot be read."""
    full = _path(root, path or KMSG)
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records: list[str] = []
    try:
        if stat.S_ISCHR(os.fstat(fd).st_mode):
            while len(records) < limit:
                try:
                    chunk = os.read(fd, 8192)
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        continue  # records overwritten while reading: go on with the next one
                    break  # EAGAIN: the end of the buffer
                if not chunk:
                    break
                records.append(chunk.decode('utf-8', 'replace').split('\n', 1)[0])
        else:
            data = b''
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
            records = data.decode('utf-8', 'replace').splitlines()[:limit]
    finally:
        os.close(fd)
    return [_DMESG_PREFIX.sub('', _KMSG_PREFIX.sub('', r)) for r in records]


# The driver's line when its module loads (kernel-open/nvidia/nv.c: "NVRM: loading <NVRM_ID>"; the real H100's log:
# "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ..."): every GPU is initialised afresh.
DRIVER_LOAD_RE = re.compile(r'NVRM: loading NVIDIA ')
# Xid 154 whose new recovery action is None: the driver says the recovery the GPU's earlier Xids needed is done
_RECOVERED_RE = re.compile(r'recovery action changed from .* to\s+\S+\s*\(\s*None\s*\)\s*$', re.I)


def xids_from_log(lines: Iterable[str] | None) -> list[dict[str, Any]]:
    """The NVRM Xid lines of a kernel log that still count: [{'pci', 'xid', 'text'}] (other NVRM lines, like the
    FBHUB one an H100 logs at boot, are no Xid).

    Only those after the driver's last load (a reload after ``modprobe -r`` re-initialises every GPU), and per GPU
    only those from its last Xid 154 whose new recovery action is None on (that line itself is kept: the doctor
    reports it as information), so a GPU that was reset as advised loses the finding without a reboot."""
    out: list[dict[str, Any]] = []
    for line in lines or []:
        if DRIVER_LOAD_RE.search(line):
            out = []
            continue
        m = XID_RE.search(line)
        if m:
            pci, xid, text = m.group(1).lower(), int(m.group(4)), m.group(5).strip()
            if xid == 154 and _RECOVERED_RE.search(text):
                out = [e for e in out if e['pci'] != pci]
            entry: dict[str, Any] = {'pci': pci, 'xid': xid, 'text': text}
            if m.group(2) is not None:   # MIG: the GPU instance (and compute instance) the driver attributed it to
                entry['gpu_instance'] = int(m.group(2))
                if m.group(3) is not None:
                    entry['compute_instance'] = int(m.group(3))
            out.append(entry)
    return out


# The NVSwitch driver (part of nvidia.ko: kernel-open/nvidia/linux_nvswitch.c) prints each switch error as
# "nvidia-<device name>: SXid (PCI:%04x:%02x:%02x.%x): %05d, <message>" (NVSWITCH_PRINT_SXID, device names
# "nvswitch<n>"). The interrupt reports start the message with the driver's own word for the severity: "Fatal, ..."
# (NVSWITCH_REPORT_FATAL, _PRI_ERROR_FATAL, "Fatal, Unexpected PRI error", "Fatal, unhandled interrupt in ...",
# "Fatal, Firmware initialization failure ..."), "Non-fatal, ..." (NVSWITCH_REPORT_NONFATAL, _NONFATAL_LINK,
# _PRI_ERROR_NONFATAL) or "Correctable, ..." (NVSWITCH_REPORT_CORRECTABLE, _CORRECTABLE_DEVICE_DATA/_LINK_DATA). The
# thermal, SOE, cable (CCI), TNVL and link-training events have no such word: their severity is in what the message
# says the switch did (NVIDIA/open-gpu-kernel-modules 580.95.05: src/common/nvswitch/kernel/inc/common_nvswitch.h,
# inc/intr_nvswitch.h, inc/error_nvswitch.h, ls10/therm_ls10.c, ls10/soe_ls10.c, ls10/heartbeat_ls10.c,
# lr10/soe_lr10.c, cci/, ls10/tnvl_ls10.c; docs/conformance/doctor-health.md DH-20, DH-24).
SXID_RE = re.compile(r'nvidia-(nvswitch\d+): SXid \(PCI:([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\): '
                     r'(\d+),\s*(.*)$')
# the driver's word at the start of the message
_SXID_WORD = re.compile(r'^(Fatal|Non-fatal|Correctable),', re.I)
# a message without the word that says the switch (or its SOE management controller, or its cables' thermal
# protection) stopped: over-temperature shutdown ("TSENSE/PMGR OVERT Threshold reached. Shutting Down", "OSFP Thermal
# Overt Activated", "OSFP Thermal SOE Heartbeat Shutdown"), the SOE halted or its watchdog fired, or it never started
# ("SOE init failed(n)", "Failed to boot SOE(n)", "Failed to reset SOE(n)", "SOE reset timeout error(n)")
_SXID_STOPS = re.compile(r'Shutting Down|Heartbeat Shutdown|Overt Activated|SOE HALTED|SOE Watchdog|SOE init failed|'
                         r'Failed to (?:boot|reset) SOE|SOE reset timeout', re.I)
# the end of a thermal event the driver reported when it started ("Thermal slowdown Disengaged[ | ...]", "OSFP Thermal
# Warn/Overt Deactivated", the temperature line printed with THERMAL_EVENT_END): no finding of its own
_SXID_ENDS = re.compile(r'Disengaged|Deactivated', re.I)


def sxid_severity(text: str) -> str:
    """The severity of one SXid message by the driver's own word, else by what the message says happened: 'fatal',
    'non-fatal', 'correctable', 'ended' (a thermal event's end) or 'event' (a wordless event that stopped nothing:
    thermal slowdown, SOE command timeouts, cable module or link-training failures, TNVL)."""
    m = _SXID_WORD.match(text)
    if m:
        return m.group(1).lower()
    if _SXID_STOPS.search(text):
        return 'fatal'
    if _SXID_ENDS.search(text):
        return 'ended'
    return 'event'


def sxids_from_log(lines: Iterable[str] | None) -> list[dict[str, Any]]:
    """The NVSwitch SXid lines since the driver's last load: [{'switch', 'pci', 'sxid', 'severity', 'fatal', 'text'}]
    (severity: sxid_severity; fatal: severity 'fatal')."""
    out: list[dict[str, Any]] = []
    for line in lines or []:
        if DRIVER_LOAD_RE.search(line):
            out = []
            continue
        m = SXID_RE.search(line)
        if m:
            text = m.group(4).strip()
            severity = sxid_severity(text)
            out.append({'switch': m.group(1), 'pci': m.group(2).lower(), 'sxid': int(m.group(3)),
                        'severity': severity, 'fatal': severity == 'fatal', 'text': text})
    return out


def kernel_headers_installed(root: str = '/', release: str | None = None) -> bool:
    release = release or os.uname()[2]
    return os.path.exists(_path(root, 'lib/modules/%s/build' % release))


_RUNTIME_BINARIES = {
    'docker': ('usr/bin/dockerd', 'usr/sbin/dockerd', 'usr/local/bin/dockerd'),
    'containerd': ('usr/bin/containerd', 'usr/local/bin/containerd'),
    'cri-o': ('usr/bin/crio', 'usr/local/bin/crio'),
    'rke2': ('usr/local/bin/rke2', 'usr/bin/rke2', 'opt/rke2/bin/rke2'),
    'k3s': ('usr/local/bin/k3s', 'usr/bin/k3s'),
    'nvidia-container-runtime': ('usr/bin/nvidia-container-runtime', 'usr/local/bin/nvidia-container-runtime'),
    'nvidia-ctk': ('usr/bin/nvidia-ctk', 'usr/local/bin/nvidia-ctk'),
}


def parse_containerd_version(text: str | None) -> tuple[int, int, int] | None:
    """The release in ``containerd --version``'s output as a (major, minor, patch) tuple, or None.

    containerd prints "containerd <package> <version> <revision>": Debian's 1.6.20 "containerd
    github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", upstream's "containerd
    github.com/containerd/containerd/v2 v2.3.4 <commit>", Docker's packages "containerd containerd.io 1.7.27 <commit>"."""
    for token in (text or '').split()[1:]:
        version = containerd_cdi.parse_version(token)
        if version:
            return version
    return None


def containerd_version(root: str = '/', run: Callable[..., Any] | None = None) -> str | None:
    """The version of the node's containerd as 'major.minor.patch', or None when there is none, no ``run`` was given
    (nothing is executed without it) or the output is not understood. The binary is the containerd on PATH (on the
    running system, root '/', as container_runtime_config finds it), else the first of its usual paths that exists.
    ``run(argv)`` returns (rc, stdout, stderr), as AnsibleModule.run_command does."""
    if run is None:
        return None
    on_path = shutil.which('containerd') if (root or '/') == '/' else None
    for binary in ([on_path] if on_path else []) + [_path(root, rel) for rel in _RUNTIME_BINARIES['containerd']]:
        if os.path.exists(binary):
            try:
                rc, out, dummy = run([binary, '--version'])
            except (IOError, OSError):
                return None
            version = parse_containerd_version(out) if rc == 0 else None
            return '%d.%d.%d' % version if version else None
    return None


CONTAINERD_CONFIGS = (('etc/containerd/config.toml', 'etc/containerd/conf.d/99-nvidia.toml')
                      + tuple(p.lstrip('/') for p in kube_distributions.containerd_rendered_configs()))


def container_runtimes(root: str = '/', run: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Container runtimes installed, and how docker is configured for NVIDIA; containerd_version with ``run``
    (containerd_version())."""
    found = sorted(name for name, paths in _RUNTIME_BINARIES.items()
                   if any(os.path.exists(_path(root, p)) for p in paths))
    info: dict[str, Any] = {'installed': found, 'docker_nvidia_runtime': None, 'docker_default_runtime': None,
                            'containerd_nvidia_runtime': None, 'containerd_default_runtime': None, 'crio_nvidia_runtime': None,
                            'containerd_enable_cdi': None, 'containerd_version': containerd_version(root, run),
                            'cdi_specs': cdi_specs(root)}
    daemon = _read(root, 'etc/docker/daemon.json')
    if daemon is not None:
        try:
            cfg = json.loads(daemon) if daemon else {}
            info['docker_nvidia_runtime'] = 'nvidia' in (cfg.get('runtimes') or {})
            info['docker_default_runtime'] = cfg.get('default-runtime', 'runc')
        except ValueError:
            info['docker_nvidia_runtime'] = None
            info['docker_daemon_json_invalid'] = True
    # containerd's own config and the collection's drop-in, then the configs RKE2 and k3s render for their
    # embedded containerd (their containerd never reads /etc/containerd); the files read are named in
    # containerd_config_files
    info['containerd_config_files'] = []
    for rel in CONTAINERD_CONFIGS:
        text = _read(root, rel)
        if text is not None:
            info['containerd_config_files'].append('/' + rel)
            hit = re.search(r'runtimes\.["\']?nvidia["\']?\]', text) is not None
            info['containerd_nvidia_runtime'] = bool(info['containerd_nvidia_runtime']) or hit
            # the CRI plugin's default_runtime_name (runc when no file sets it); the drop-in, read last, wins
            names = re.findall(r'^\s*default_runtime_name\s*=\s*["\']([^"\']*)["\']', text, re.M)
            if names:
                info['containerd_default_runtime'] = names[-1]
            elif info['containerd_default_runtime'] is None:
                info['containerd_default_runtime'] = 'runc'
            # the CRI plugin's enable_cdi where a file sets it (None: containerd's default, on from 2.0)
            cdi = re.findall(r'^\s*enable_cdi\s*=\s*(true|false)\b', text, re.M)
            if cdi:
                info['containerd_enable_cdi'] = cdi[-1] == 'true'
    crio = [_read(root, 'etc/crio/crio.conf')]
    try:
        crio += [_read(root, 'etc/crio/crio.conf.d/' + n) for n in sorted(os.listdir(_path(root, 'etc/crio/crio.conf.d')))]
    except OSError:
        pass
    crio_texts = [t for t in crio if t is not None]
    if crio_texts:
        info['crio_nvidia_runtime'] = any(re.search(r'crio\.runtime\.runtimes\.["\']?nvidia["\']?\]', t) for t in crio_texts)
    return info


CDI_DIRS = ('etc/cdi', 'var/run/cdi')


def cdi_specs(root: str = '/') -> list[str]:
    """CDI spec files that name NVIDIA devices (kind nvidia.com/gpu), in the directories the toolkit writes to."""
    found: list[str] = []
    for d in CDI_DIRS:
        try:
            names = sorted(os.listdir(_path(root, d)))
        except OSError:
            continue
        for n in names:
            if n.endswith(('.yaml', '.yml', '.json')) and 'nvidia.com/gpu' in (_read(root, '%s/%s' % (d, n), '') or ''):
                found.append('/%s/%s' % (d, n))
    return found


def systemd_unit_state(root: str, unit: str) -> str:
    """'enabled' / 'disabled' / 'not-found' from unit files (no systemctl call)."""
    found = False
    for d in ('etc/systemd/system', 'lib/systemd/system', 'usr/lib/systemd/system'):
        if os.path.exists(_path(root, '%s/%s' % (d, unit))):
            found = True
            break
    if not found:
        return 'not-found'
    for wants in ('etc/systemd/system/multi-user.target.wants', 'etc/systemd/system/default.target.wants'):
        if os.path.exists(_path(root, '%s/%s' % (wants, unit))):
            return 'enabled'
    return 'disabled'


def infiniband_vpds(root: str = '/') -> list[str]:
    """VPD contents of the InfiniBand devices (/sys/class/infiniband/*/device/vpd), bytes decoded loosely."""
    out: list[str] = []
    for path in sorted(glob.glob(_path(root, 'sys/class/infiniband/*/device/vpd'))):
        try:
            with open(path, 'rb') as f:
                out.append(f.read().decode('latin-1'))
        except (IOError, OSError):
            continue
    return out


def node_facts(root: str = '/', log_lines: Iterable[str] | None = None, run: Callable[..., Any] | None = None) -> dict[str, Any]:
    """The node's facts; ``log_lines``: the kernel log (kernel_log()) where the caller read it, for the hypervisor;
    ``run``: a command runner for the containerd version (container_runtimes())."""
    modules = loaded_modules(root)
    hv, hv_evidence = hypervisor_evidence(root, log_lines)
    gpus, switches = pci_devices(root)
    release = os.uname()[2]
    nvlink5 = nvlink5_detected(infiniband_vpds(root))
    return {
        'kernel_release': release,
        'kernel_headers_installed': kernel_headers_installed(root, release),
        'nouveau_loaded': 'nouveau' in modules,
        'nvidia_module_loaded': 'nvidia' in modules,
        'nvidia_module_version': driver_version_from_proc(root),
        'secure_boot': secure_boot(root),
        'hypervisor': hv,
        'hypervisor_evidence': hv_evidence,
        'pci_gpus': gpus,
        'nvswitches': switches,
        'nvswitch_count': len(switches),
        # an NVLink5 system (HGX B200/B300, GB200: its NVSwitches are not PCI devices of the host) needs fabric manager
        # too, and ib_umad loaded before it starts (docs/conformance/doctor-health.md DH-22)
        'nvlink5': nvlink5,
        'ib_umad_loaded': 'ib_umad' in modules,
        'fabricmanager_required': len(switches) > 0 or nvlink5,
        'fabricmanager_unit': systemd_unit_state(root, 'nvidia-fabricmanager.service'),
        'imex_unit': systemd_unit_state(root, 'nvidia-imex.service'),
        'persistenced_unit': systemd_unit_state(root, 'nvidia-persistenced.service'),
        'container_runtimes': container_runtimes(root, run),
    }
