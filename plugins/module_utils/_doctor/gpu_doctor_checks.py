# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The doctor's checks: pure functions from probe facts to findings (no I/O here).

Each finding: id, severity (critical / warning / info), summary, evidence, remediation.
The facts are gpu_info's result plus a few extras the doctor gathers (see gpu_doctor.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.gpushare import (
    EXTENDER_FIX_COMMITS, PLUGIN_FIX_COMMITS, known_bad_extender, known_bad_plugin,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.nvidia_driver import dkms_install_advice
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
# the doctor's health tables, in _common so that the alert rules (_cluster/metrics/rules.py) read the same
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_health import (
    ADVICE, POWER_TOLERANCE, RETIRED_PAGES_RMA, SEVERE_CLOCK_REASONS, TEMPERATURE_NEAR_C, XID_154, XID_GUIDE,
    XID_UNKNOWN,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.containerd_cdi import cdi_default, cdi_effective
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.kube_versions import (
    POLICY_LAST_MINOR, SCHEDULER_CONFIG_WINDOWS, minor_of as _minor)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.nvidia_driver_select import (
    SelectionError, precompiled_module_packages,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (
    DEFAULT_RUNTIME_STRATEGIES, NVIDIA_DRA_DRIVER, RUNTIME_CLASS_STRATEGIES, titles,
)

SEVERITIES = ('critical', 'warning', 'info')
# From the strategy model: the strategies whose device plugins need nvidia as the container runtime's *default* runtime
# (they name no RuntimeClass), and the NVIDIA device plugin stacks, which run their pods with RuntimeClass nvidia
# (handler nvidia) instead, as NVIDIA's chart and GPU operator do: the nvidia runtime must exist under that name; it
# need not be the default.
_RUNTIME_NEEDS = ('The NVIDIA device plugin stacks (%s) run their pods with RuntimeClass nvidia, whose handler is this '
                  'runtime; %s need it as the default runtime.'
                  % (', '.join(RUNTIME_CLASS_STRATEGIES), titles(DEFAULT_RUNTIME_STRATEGIES)))
# gpu_info's NVML status when the Python binding, not the node, is the problem
BINDINGS_UNUSABLE = ('bindings_missing', 'bindings_outdated')


def finding(check_id: str, severity: str, summary: str, evidence: list[str], remediation: str) -> dict[str, Any]:
    return {'id': check_id, 'severity': severity, 'summary': summary, 'evidence': evidence,
            'remediation': remediation}


def _gpu_names(facts: dict[str, Any]) -> list[str]:
    names = [g.get('name') for g in facts.get('gpus', []) if g.get('name')]
    if not names:
        names = [g.get('name') for g in facts.get('node', {}).get('pci_gpus', []) if g.get('name')]
    return names


def _has_gpu(facts: dict[str, Any]) -> bool:
    return bool(facts.get('gpus')) or bool(facts.get('node', {}).get('pci_gpus'))


def check_nouveau(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    node = facts.get('node', {})
    if node.get('nouveau_loaded'):
        return [finding(
            'nouveau_loaded', 'critical',
            'The open-source nouveau driver is loaded and holds the GPU; the NVIDIA driver cannot bind.',
            ['/proc/modules lists nouveau'],
            'Blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: "blacklist nouveau" and '
            '"options nouveau modeset=0"), rebuild the initramfs (update-initramfs -u / dracut -f) and reboot. '
            'The gpuops.k8s_gpu.nvidia_driver role does this.')]
    return []


def _precompiled_advice(kernel_release: str, extra: dict[str, Any]) -> str:
    """The signed precompiled module packages for the running kernel (named after `uname -r`, as the nvidia_driver
    role installs them): the branch from the installed libnvidia-ml where there is one, both kernel module flavours."""
    version = extra.get('nvml_library_version') or ''
    branch = version.split('.')[0] if re.match(r'^[0-9]{3}\.', version) else '<branch>'
    try:
        opn = precompiled_module_packages(branch, True, kernel_release, extra.get('machine'))
        prop = precompiled_module_packages(branch, False, kernel_release, extra.get('machine'))
    except SelectionError:
        return 'linux-modules-nvidia-<branch>-server-open-$(uname -r), or for the proprietary flavour ' \
            'linux-objects-nvidia-<branch>-server-$(uname -r) and linux-modules-nvidia-<branch>-server-$(uname -r)'
    return 'open kernel modules: %s; proprietary: %s' % (' '.join(opn), ' '.join(prop))


def check_secure_boot(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    node = facts.get('node', {})
    if node.get('secure_boot') != 'enabled' or not _has_gpu(facts):
        return []
    taint = extra.get('nvidia_taint') or ''
    if not node.get('nvidia_module_loaded'):
        return [finding(
            'secure_boot_unsigned_module', 'critical',
            'Secure Boot is on and the NVIDIA kernel module is not loaded: an unsigned (DKMS-built) module is refused.',
            ['Secure Boot: enabled', 'nvidia module loaded: no'],
            'On Ubuntu install Canonical\'s signed precompiled modules for the running kernel instead of DKMS '
            '(%s; gpuops.k8s_gpu.nvidia_driver does so when Secure Boot is on, nvidia_driver_ubuntu_precompiled). '
            'Elsewhere sign the module with a Machine '
            'Owner Key enrolled through mokutil (DKMS can sign with /var/lib/dkms/mok.key), or turn Secure Boot off '
            'in the firmware (for ESXi VMs: VM options, Boot options, Secure Boot off).'
            % _precompiled_advice(node.get('kernel_release'), extra))]
    if 'E' in taint:
        return [finding(
            'secure_boot_unsigned_module', 'warning',
            'An unsigned NVIDIA module is loaded (kernel taint E) while Secure Boot is on.',
            ['Secure Boot: enabled', '/sys/module/nvidia/taint: %s' % taint],
            'Sign the module with an enrolled MOK so a kernel with lockdown enforcement keeps loading it, or on '
            'Ubuntu use Canonical\'s signed precompiled modules (nvidia_driver_ubuntu_precompiled: "true").')]
    return []


def check_driver_loaded(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    status = facts.get('nvml', {}).get('status')
    if status == 'driver_not_loaded' and _has_gpu(facts):
        ev = ['NVML: Driver Not Loaded',
              'PCI: %d NVIDIA GPU(s) (%s)' % (len(facts['node'].get('pci_gpus', [])), ', '.join(_gpu_names(facts)) or 'names unknown')]
        drivers = sorted(set(str(g.get('driver')) for g in facts['node'].get('pci_gpus', [])))
        ev.append('kernel driver bound to the GPUs: %s' % ', '.join(drivers))
        return [finding(
            'driver_not_loaded', 'critical',
            'NVIDIA GPUs are present but the NVIDIA kernel driver is not loaded.',
            ev,
            'Install the driver for the running kernel (gpuops.k8s_gpu.nvidia_driver), make sure the module is '
            'built for it (dkms status; %s), then modprobe nvidia or reboot.'
            % dkms_install_advice(extra.get('dkms_module')))]
    if status in BINDINGS_UNUSABLE and _has_gpu(facts):
        return [finding(
            'nvml_bindings_unusable', 'warning',
            'The NVML Python binding on this node cannot answer the probe, so the doctor cannot judge the GPUs '
            '(the strategy and health checks are skipped).',
            ['NVML probe: %s' % status, facts.get('nvml', {}).get('error') or 'no detail'],
            'Install nvidia-ml-py (gpuops.k8s_gpu.gpu_probe does so with gpu_probe_bindings_method: pip, or by '
            'itself when the distribution\'s binding is outdated), then diagnose again.')]
    if status == 'not_installed' and _has_gpu(facts):
        return [finding(
            'driver_not_installed', 'critical',
            'NVIDIA GPUs are present but no NVIDIA driver (libnvidia-ml) is installed.',
            ['NVML library not found', 'PCI: %s' % ', '.join(_gpu_names(facts)) or 'NVIDIA device'],
            'Install the NVIDIA driver (gpuops.k8s_gpu.nvidia_driver).')]
    return []


def check_version_mismatch(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    nvml = facts.get('nvml', {})
    module_version = facts.get('node', {}).get('nvidia_module_version')
    lib_version = extra.get('nvml_library_version')
    if nvml.get('status') == 'version_mismatch':
        return [finding(
            'nvml_version_mismatch', 'critical',
            'NVML library and kernel module versions differ (Failed to initialize NVML: Driver/library version mismatch).',
            ['kernel module: %s' % (module_version or 'unknown'), 'libnvidia-ml: %s' % (lib_version or 'unknown')],
            'Reboot to load the kernel module that matches the installed user-space driver, or reinstall the '
            'driver version that matches the loaded module; hold the driver packages so unattended upgrades '
            'cannot split them again.')]
    driver = nvml.get('driver_version')
    if nvml.get('status') == 'ok' and module_version and driver and module_version != driver:
        return [finding(
            'nvml_version_mismatch', 'warning',
            'The loaded kernel module and the NVML driver version differ.',
            ['kernel module: %s' % module_version, 'NVML driver version: %s' % driver],
            'Reboot the node in a maintenance window so both sides run the same driver version.')]
    return []


def check_fabricmanager(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    node = facts.get('node', {})
    if not node.get('fabricmanager_required'):
        return []
    ev = ['NVSwitch devices: %d' % node.get('nvswitch_count', 0)]
    if node.get('nvlink5'):
        ev.append('NVLink5 system: an InfiniBand device carries SW_MNG in its VPD (HGX B200/B300, GB200)')
    unit = node.get('fabricmanager_unit')
    active = extra.get('fabricmanager_active')
    fm_version = extra.get('fabricmanager_version')
    driver = facts.get('nvml', {}).get('driver_version') or node.get('nvidia_module_version')
    remediation = ('Install nvidia-fabricmanager of exactly the driver version (%s), hold it with the driver, and '
                   'enable and start nvidia-fabricmanager.service before running CUDA jobs '
                   '(CUDA error 802 "system not yet initialized" otherwise).' % (driver or 'the driver'))
    if unit == 'not-found':
        ev.append('nvidia-fabricmanager.service: not installed')
        return [finding('fabricmanager_missing', 'critical',
                        'NVSwitch system without nvidia-fabricmanager: CUDA fails with error 802.', ev, remediation)]
    if active is not None and active != 'active':
        ev.append('nvidia-fabricmanager.service: %s (%s)' % (active, unit))
        return [finding('fabricmanager_inactive', 'critical',
                        'nvidia-fabricmanager is installed but not running: CUDA fails with error 802.', ev, remediation)]
    if node.get('nvlink5') and node.get('ib_umad_loaded') is False:
        ev.append('kernel module ib_umad: not loaded (/proc/modules)')
        return [finding('fabricmanager_ib_umad_missing', 'critical',
                        'NVLink5 system without the ib_umad kernel module: fabric manager cannot reach the NVLink '
                        'switches through NVLSM, so the NVLink fabric does not come up (CUDA error 802).', ev,
                        'Load it now (modprobe ib_umad) and at every boot (/etc/modules-load.d), then restart '
                        'nvidia-fabricmanager; gpuops.k8s_gpu.nvidia_driver does both on NVLink5 systems.')]
    if fm_version and driver and fm_version != driver:
        ev.extend(['fabricmanager: %s' % fm_version, 'driver: %s' % driver])
        return [finding('fabricmanager_version', 'critical',
                        'fabricmanager and driver versions differ; fabricmanager refuses to start or fails CUDA (802).',
                        ev, remediation)]
    return []


def check_persistence(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    off = [str(g.get('index')) for g in facts.get('gpus', []) if g.get('persistence_mode') is False]
    if not off or facts.get('source') != 'nvml':
        return []
    return [finding(
        'persistence_mode_off', 'warning',
        'Persistence mode is off: the driver re-initialises the GPUs for every new client '
        '(slow starts; GPU-Util stuck at 100% with nothing running).',
        ['GPUs with persistence mode off: %s' % ', '.join(off)],
        'Enable nvidia-persistenced (systemctl enable --now nvidia-persistenced); if its unit starts it with '
        '--no-persistence-mode (Ubuntu\'s does), override ExecStart in a drop-in without that flag '
        '(gpuops.k8s_gpu.nvidia_driver does, nvidia_driver_persistence_mode), or set persistence mode with '
        'gpuops.k8s_gpu.gpu_sharing (persistence_mode: true).')]


def check_vmware_consumer_gpu(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    node = facts.get('node', {})
    if node.get('hypervisor') != 'vmware':
        return []
    consumer = [n for n in _gpu_names(facts) if gpu_catalog.is_consumer_gpu(n)]
    if not consumer or not extra.get('hypervisor_cpu_flag', True):
        return []
    return [finding(
        'vmware_consumer_gpu_hypervisor_visible', 'critical',
        'A GeForce-class GPU is passed through to a VMware VM that shows the hypervisor to the guest: '
        'the driver refuses to start (Code 43 / "RmInitAdapter failed").',
        ['hypervisor: vmware (CPUID hypervisor bit visible)', 'GPUs: %s' % ', '.join(consumer)],
        'Set the VM advanced setting hypervisor.cpuid.v0 = FALSE with the VM powered off '
        '(gpuops.k8s_gpu.esxi_gpu_passthrough does this).')]


def check_runtime(facts: dict[str, Any], extra: dict[str, Any], strategy: str | None = None) -> list[dict[str, Any]]:
    rt = facts.get('node', {}).get('container_runtimes', {})
    installed = rt.get('installed', [])
    out: list[dict[str, Any]] = []
    if not _has_gpu(facts):
        return out
    if 'docker' in installed and rt.get('docker_nvidia_runtime') is not True:
        out.append(finding(
            'docker_nvidia_runtime_missing', 'critical',
            'Docker is installed but /etc/docker/daemon.json has no "nvidia" runtime.',
            ['/etc/docker/daemon.json runtimes: nvidia missing'],
            'Add the nvidia runtime (gpuops.k8s_gpu.nvidia_container_runtime merges it into daemon.json, keeping '
            'every other key) and restart docker. Every sharing stack needs it: the NVIDIA device plugin stacks '
            '(%s) run their pods with RuntimeClass nvidia (handler nvidia, which cri-dockerd passes to docker); %s '
            'need it as the default runtime.' % (', '.join(RUNTIME_CLASS_STRATEGIES), titles(DEFAULT_RUNTIME_STRATEGIES))))
    elif ('docker' in installed and strategy in DEFAULT_RUNTIME_STRATEGIES
          and rt.get('docker_default_runtime') != 'nvidia'):
        out.append(finding(
            'docker_nvidia_not_default', 'critical',
            'Strategy %s needs nvidia as docker\'s default runtime.' % strategy,
            ['default-runtime: %s' % rt.get('docker_default_runtime')],
            'Set "default-runtime": "nvidia" in /etc/docker/daemon.json (nvidia_container_runtime with '
            'nvidia_container_runtime_set_as_default: true) and restart docker.'))
    containerd = ('containerd' in installed or 'rke2' in installed or 'k3s' in installed) and 'docker' not in installed
    if containerd and rt.get('containerd_nvidia_runtime') is not True:
        out.append(finding(
            'containerd_nvidia_runtime_missing', 'critical',
            'containerd is installed but its configuration has no nvidia runtime.',
            ['containerd config: no runtimes.nvidia section in %s'
             % (', '.join(rt.get('containerd_config_files') or []) or 'any file read (none found)')],
            'Configure the nvidia runtime for containerd (gpuops.k8s_gpu.nvidia_container_runtime) and restart it. '
            + _RUNTIME_NEEDS))
    return out


def check_strategy(facts: dict[str, Any], extra: dict[str, Any], strategy: str | None = None) -> list[dict[str, Any]]:
    if not strategy or facts.get('nvml', {}).get('status') in BINDINGS_UNUSABLE:
        return []   # without the binding the GPUs are unknown: nvml_bindings_unusable says so
    caps = facts.get('sharing', {}).get(strategy)
    if caps is None:
        return [finding('strategy_unknown', 'critical', 'Unknown sharing strategy %s.' % strategy,
                        ['strategy: %s' % strategy], 'Use one of: %s.' % ', '.join(sorted(facts.get('sharing', {}))))]
    if caps.get('allowed'):
        return []
    return [finding(
        'strategy_impossible', 'critical',
        'The requested sharing strategy %s is not possible on this hardware.' % strategy,
        [caps.get('reason', 'not allowed')],
        'Choose another strategy for this node pool, or move the node to a pool whose strategy its GPUs support.')]


def check_scheduler_config(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The scheduler's config document against the cluster's Kubernetes version."""
    doc = extra.get('scheduler_config')
    minor = _minor(extra.get('kubernetes_version'))
    if not doc or minor is None:
        return []
    path = extra.get('scheduler_config_path', 'the scheduler config')
    kind, api = doc.get('kind'), doc.get('apiVersion')
    ev = ['%s: kind %s, apiVersion %s' % (path, kind, api), 'Kubernetes: %s' % extra.get('kubernetes_version')]
    fix = ('Render the config for this version with gpuops.k8s_gpu.kube_scheduler_config (Policy below 1.23, '
           'kubescheduler.config.k8s.io/v1beta3 for 1.23-1.24, v1 from 1.25).')
    if kind == 'Policy':
        if minor > POLICY_LAST_MINOR:
            return [finding('scheduler_config_api_removed', 'critical',
                            'The scheduler extender is configured with a Policy file, which Kubernetes removed in 1.23: '
                            'kube-scheduler does not start (or ignores the extender).', ev, fix)]
        return []
    window = SCHEDULER_CONFIG_WINDOWS.get(api)
    if window is None:
        return [finding('scheduler_config_api_unknown', 'critical',
                        'The scheduler config has an apiVersion no supported Kubernetes serves.', ev, fix)]
    first, last = window
    if minor < first or (last is not None and minor > last):
        return [finding('scheduler_config_api_removed', 'critical',
                        'Kubernetes 1.%d does not serve %s: kube-scheduler fails to start with this config.' % (minor, api),
                        ev, fix)]
    return []


def check_extender(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for url, error in sorted((extra.get('extender_probes') or {}).items()):
        if error:
            out.append(finding(
                'extender_unreachable', 'critical',
                'The scheduler extender does not answer: pods requesting its resources stay Pending '
                '(or every bind fails when the extender is not ignorable).',
                ['%s: %s' % (url, error)],
                'Check the extender Deployment/Service (gpushare: kube-system gpushare-schd-extender, NodePort 32766) '
                'and that urlPrefix in the scheduler config points at it from the control-plane node. A NodePort on '
                '127.0.0.1 answers only with kube-proxy in iptables mode; with ipvs or nftables set '
                'gpu_sharing_stack_gpushare.registration to host-network (an extender on every control-plane node, '
                'http://127.0.0.1:12345/gpushare-scheduler) or cluster-ip (extender_cluster_ip, a fixed Service '
                'address) and register the URL the role returns (extender_url).'))
    return out


def _commits(fixes: Iterable[tuple[str, str, str]]) -> str:
    return ', '.join('%s@%s (%s)' % f for f in fixes)


def check_cluster_images(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Images known to fail; the lists live with the gpushare stack (stacks/gpushare.KNOWN_BAD_*_TAGS)."""
    out = []
    build = ('git clone the repository, git checkout that commit (or a later one), docker build with its Dockerfile, '
             'push to your registry, then set %s in gpu_sharing_stack_gpushare to that image and re-run the cluster '
             'play. For new deployments prefer gpu_sharing_stack_strategy: hami (maintained, enforces memory limits).')
    for image in sorted(set(extra.get('cluster_images') or [])):
        reason = known_bad_extender(image)
        if reason:
            out.append(finding(
                'gpushare_extender_bad_image', 'critical',
                'The gpushare scheduler extender image is known to fail: %s.' % reason,
                ['image in the cluster: %s' % image],
                'Build the extender from upstream commit %s: %s' % (_commits(EXTENDER_FIX_COMMITS), build % 'extender_image')))
        reason = known_bad_plugin(image)
        if reason:
            out.append(finding(
                'gpushare_plugin_bad_image', 'critical',
                'The gpushare device plugin image is known to fail: %s.' % reason,
                ['image in the cluster: %s' % image],
                'Build the device plugin from upstream commit %s: %s'
                % (_commits(PLUGIN_FIX_COMMITS), build % 'device_plugin_image')))
    return out


# ------------------------------------------------------------------------------------------------ Kubernetes readiness
ENGINES = ('docker', 'containerd', 'cri-o', 'rke2', 'k3s')


def _runtime_class_needed(rt: dict[str, Any], installed: list[str], strategy: str | None,
                          extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue #27 item 1: the NVIDIA device plugin stacks (strategy model: runtime_class) start GPU pods through
    RuntimeClass nvidia; where nvidia is not the engine's default runtime and the site does not use CDI, a pod
    without runtimeClassName: nvidia gets no GPU from the runtime."""
    if strategy not in RUNTIME_CLASS_STRATEGIES or extra.get('cdi_required'):
        return []
    if 'docker' in installed:
        engine, has_nvidia, default = 'docker', rt.get('docker_nvidia_runtime'), rt.get('docker_default_runtime')
        where = '/etc/docker/daemon.json default-runtime: %s' % default
    elif 'containerd' in installed or 'rke2' in installed or 'k3s' in installed:
        engine, has_nvidia, default = 'containerd', rt.get('containerd_nvidia_runtime'), rt.get('containerd_default_runtime')
        where = 'containerd default_runtime_name: %s' % default
    else:
        return []
    if has_nvidia is not True or default in (None, 'nvidia'):
        return []   # no nvidia runtime: the runtime check says so; default unknown: nothing to judge
    return [finding(
        'runtime_class_nvidia_required', 'info',
        'nvidia is not %s\'s default runtime: GPU pods of strategy %s must set runtimeClassName: nvidia.'
        % (engine, strategy),
        [where, 'strategy %s: NVIDIA device plugin stack (RuntimeClass nvidia)' % strategy],
        'The collection\'s stacks create RuntimeClass nvidia and set it on their own pods; set '
        'spec.runtimeClassName: nvidia on your GPU workloads, or make nvidia the default runtime '
        '(nvidia_container_runtime_set_as_default: true), or run the toolkit in CDI mode '
        '(nvidia_container_runtime_cdi: true).')]


def check_readiness(facts: dict[str, Any], extra: dict[str, Any], strategy: str | None = None) -> list[dict[str, Any]]:
    """What a GPU pod needs on the node whatever the strategy: a container engine, the NVIDIA Container Toolkit,
    the nvidia runtime in CRI-O's config, and a CDI spec where the site runs the toolkit in CDI mode."""
    if not _has_gpu(facts):
        return []
    rt = facts.get('node', {}).get('container_runtimes', {})
    installed = rt.get('installed', [])
    out = []
    for_whom = 'strategy %s' % strategy if strategy else 'every sharing strategy'
    engines = [e for e in ENGINES if e in installed]
    if not engines:
        out.append(finding(
            'container_engine_missing', 'critical',
            'No container engine is installed: the node cannot run a pod, GPU or not (%s needs one).' % for_whom,
            ['none of dockerd, containerd, crio, rke2, k3s found in /usr/bin, /usr/sbin, /usr/local/bin'],
            'Join the node to the cluster with its engine (containerd, CRI-O or Docker with cri-dockerd; RKE2/k3s bring '
            'containerd), then run the node layer again (playbooks/node.yml) so gpuops.k8s_gpu.nvidia_container_runtime '
            'configures the nvidia runtime.'))
    if 'nvidia-container-runtime' not in installed and 'nvidia-ctk' not in installed:
        out.append(finding(
            'nvidia_toolkit_missing', 'critical',
            'The NVIDIA Container Toolkit is not installed: containers cannot get the GPUs (%s needs it).' % for_whom,
            ['neither nvidia-container-runtime nor nvidia-ctk found in /usr/bin or /usr/local/bin'],
            'Install and configure the toolkit with gpuops.k8s_gpu.nvidia_container_runtime (playbooks/node.yml, tag '
            'runtime); it adds the nvidia runtime to the engine\'s config, keeping every other key.'))
    if 'cri-o' in installed and rt.get('crio_nvidia_runtime') is not True:
        out.append(finding(
            'crio_nvidia_runtime_missing', 'critical',
            'CRI-O is installed but its configuration has no nvidia runtime.',
            ['/etc/crio/crio.conf(.d): no crio.runtime.runtimes.nvidia table'],
            'Configure the nvidia runtime for CRI-O (gpuops.k8s_gpu.nvidia_container_runtime) and restart crio. '
            + _RUNTIME_NEEDS))
    out += _runtime_class_needed(rt, installed, strategy, extra)
    if extra.get('cdi_required') and not rt.get('cdi_specs'):
        out.append(finding(
            'cdi_spec_missing', 'critical',
            'The site runs the toolkit in CDI mode but no CDI spec names the NVIDIA GPUs: pods asking for '
            'nvidia.com/gpu devices fail to start ("unresolvable CDI devices").',
            ['no file in /etc/cdi or /var/run/cdi names kind nvidia.com/gpu'],
            'Generate the spec (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml, or the toolkit\'s '
            'nvidia-cdi-refresh units from 1.18): gpuops.k8s_gpu.nvidia_container_runtime does so with '
            'nvidia_container_runtime_cdi: true.'))
    return out


# ------------------------------------------------------------------------------------------------ GPU health (NVML)
# XID_GUIDE, XID_UNKNOWN, XID_154, RETIRED_PAGES_RMA, SEVERE_CLOCK_REASONS, TEMPERATURE_NEAR_C, POWER_TOLERANCE and the
# advice of the ECC, row remapping and throttle findings: _common/gpu_health.py (the alert rules read them too)
# Xid 154's recovery label -> what to do; a label not listed is treated as a reboot
_REBOOT_FIX = 'drain the node and reboot it'
RECOVERY_LABELS: dict[str, str | None] = {
    'none': None,
    'drain p2p': 'stop the peer-to-peer work on the GPU (drain the node) until the driver reports None again',
    'drain and reset': 'drain the node, then reset the GPU (nvidia-smi -r with no process on it)',
    'gpu reset required': 'drain the node and reset the GPU (nvidia-smi -r with no process on it, or reboot; '
                          'a VM reboot where it is passed through)',
    'node reboot required': _REBOOT_FIX,
}
_RECOVERY_CHANGE = re.compile(r'recovery action changed from\s+\S+\s*\(([^)]*)\)\s*to\s+\S+\s*\(([^)]*)\)', re.I)


def _gpu_label(g: dict[str, Any]) -> str:
    return 'GPU %s (%s, %s)' % (g.get('index'), g.get('name') or 'unknown', g.get('pci_bus_id') or 'bus unknown')


def check_gpu_lost(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    lost = [g for g in facts.get('gpus', []) if g.get('error') == 'gpu_lost']
    if facts.get('nvml', {}).get('status') == 'gpu_lost':
        lost = lost or [{'index': '?'}]
    if not lost:
        return []
    return [finding(
        'gpu_lost', 'critical',
        'A GPU has fallen off the bus (NVML: GPU is lost): nothing can run on it until the node is rebooted.',
        ['NVML: GPU is lost for %s' % _gpu_label(g) for g in lost],
        'Drain the node and reboot it (where the GPU is passed through to a VM, reboot the VM; a GPU reset from the '
        'guest is not possible); check power, cooling and PCIe seating; RMA the GPU if it recurs (Xid 79).')]


def _xid_154(kernel_xids: list[dict[str, Any]], nvml_events: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(severity, what, fix) for Xid 154 from the last recovery action each GPU's kernel log line names: info when
    every GPU is back to None, else critical with the advice of the most demanding label (an unknown label or an NVML
    event without one counts as a reboot)."""
    latest = {}
    for e in kernel_xids:
        if e['xid'] == XID_154:
            m = _RECOVERY_CHANGE.search(e.get('text') or '')
            latest[e['pci']] = m.group(2).strip() if m else '?'
    for e in nvml_events:
        if e['xid'] == XID_154:
            latest.setdefault('GPU %s' % e['gpu'], '?')
    pending = dict((k, v) for k, v in latest.items() if v.lower() != 'none')
    if not pending:
        return ('info', 'GPU recovery action changed, and is back to None', 'nothing')
    order = list(RECOVERY_LABELS)
    worst = max(pending.values(), key=lambda v: order.index(v.lower()) if v.lower() in order else len(order))
    fix = RECOVERY_LABELS.get(worst.lower()) or _REBOOT_FIX
    return ('critical', 'GPU recovery action required by the driver: %s'
            % ', '.join('%s on %s' % (v, k) for k, v in sorted(pending.items())), fix)


def check_xid(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Xids from the kernel log since boot, the driver's last load or the GPU's last recovery (node_probe.xids_from_log)
    and from NVML's event wait."""
    seen: dict[int, list[str]] = {}
    for e in extra.get('kernel_xids') or []:
        where = e['pci'] + ''.join(' %s:%02d' % (label, e[key]) for key, label in
                                   (('gpu_instance', 'GPU-I'), ('compute_instance', 'GPU-CI')) if key in e)
        seen.setdefault(e['xid'], []).append('kernel log: NVRM: Xid (PCI:%s): %s, %s' % (where, e['xid'], e['text']))
    for e in facts.get('nvml', {}).get('xid_events') or []:
        seen.setdefault(e['xid'], []).append('NVML event: Xid %s on GPU %s' % (e['xid'], e['gpu']))
    out = []
    for xid in sorted(seen):
        if xid == XID_154:
            severity, what, fix = _xid_154(extra.get('kernel_xids') or [], facts.get('nvml', {}).get('xid_events') or [])
        else:
            severity, what, fix = XID_GUIDE.get(xid, XID_UNKNOWN)
        ev = seen[xid][:5] + (['... %d more' % (len(seen[xid]) - 5)] if len(seen[xid]) > 5 else [])
        out.append(finding('xid_%d' % xid, severity, 'Xid %d since boot (or the GPU\'s last recovery): %s.' % (xid, what), ev,
                           fix[0].upper() + fix[1:] + '.'))
    return out


# nvml_probe.RECOVERY_ACTIONS names -> what to do (nvml.h nvmlDeviceGpuRecoveryAction_t); not listed: a reboot
RECOVERY_ACTION_FIX = {
    'gpu_reset': RECOVERY_LABELS['gpu reset required'],
    'node_reboot': RECOVERY_LABELS['node reboot required'],
    'drain_p2p': RECOVERY_LABELS['drain p2p'],
    'drain_and_reset': RECOVERY_LABELS['drain and reset'],
    'recover_imex_domain': 'drain the node and recover the IMEX domain (restart nvidia-imex on the domain\'s nodes)',
    'bus_reset': 'drain the node and reset the GPU\'s PCIe bus (reboot the node)',
    'system_reboot': RECOVERY_LABELS['node reboot required'],
}


def check_recovery_action(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """NVML's GPU recovery action (570+): anything but none means the driver wants the GPU drained, reset or the
    node rebooted before it runs work again (NVIDIA's device plugin marks such a GPU unhealthy)."""
    asked = [(g, (g.get('health') or {}).get('recovery_action')) for g in facts.get('gpus', [])]
    owed: list[tuple[dict[str, Any], str]] = [(g, a) for g, a in asked if a and a != 'none']
    if not owed:
        return []
    fixes: list[str] = []
    for dummy, a in owed:
        fix = RECOVERY_ACTION_FIX.get(a) or _REBOOT_FIX
        if fix not in fixes:
            fixes.append(fix)
    return [finding(
        'gpu_recovery_action', 'critical',
        'The driver asks for a recovery action before the GPU runs work again: %s.'
        % ', '.join('%s on %s' % (a, _gpu_label(g)) for g, a in owed),
        ['NVML GPU recovery action (nvidia-smi -q "GPU Recovery Action"): %s for %s' % (a, _gpu_label(g))
         for g, a in owed],
        '; '.join(f[0].upper() + f[1:] for f in fixes) + '. Read the Xids in the kernel log for the cause.')]


def check_pending_reset(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """A MIG or ECC mode change that waits for a GPU reset (nvmlDeviceGetMigMode / nvmlDeviceGetEccMode: current
    differs from pending): the GPU runs in the old mode until it is reset or the node reboots."""
    owed = []
    for g in facts.get('gpus', []):
        h = g.get('health') or {}
        if g.get('mig_current') is not None and g.get('mig_pending') is not None and g['mig_current'] != g['mig_pending']:
            owed.append('%s: MIG mode %s now, %s after a reset' % (
                _gpu_label(g), 'on' if g['mig_current'] else 'off', 'on' if g['mig_pending'] else 'off'))
        if h.get('ecc_enabled') is not None and h.get('ecc_pending') is not None and h['ecc_enabled'] != h['ecc_pending']:
            owed.append('%s: ECC %s now, %s after a reset' % (
                _gpu_label(g), 'on' if h['ecc_enabled'] else 'off', 'on' if h['ecc_pending'] else 'off'))
    if not owed:
        return []
    return [finding(
        'gpu_reset_pending', 'warning',
        'A MIG or ECC mode change waits for a GPU reset: the GPU runs in its old mode until then.', owed,
        'Drain the node and reset the GPU (nvidia-smi -r with no process on it) or reboot the node (a VM reboot where '
        'the GPU is passed through); gpuops.k8s_gpu.gpu_sharing does this for the MIG mode of a mig pool.')]


def check_ecc(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for g in facts.get('gpus', []):
        h = g.get('health') or {}
        vol, agg = h.get('ecc_uncorrected_volatile'), h.get('ecc_uncorrected_aggregate')
        if vol:
            out.append(finding(
                'ecc_uncorrectable', ADVICE['ecc_uncorrectable'][0],
                '%s had %d uncorrectable ECC error(s) since the driver loaded.' % (_gpu_label(g), vol),
                ['volatile uncorrectable ECC: %d' % vol, 'aggregate uncorrectable ECC: %s' % agg],
                ADVICE['ecc_uncorrectable'][1]))
        elif agg:
            out.append(finding(
                'ecc_uncorrectable_history', 'warning',
                '%s has %d uncorrectable ECC error(s) in its lifetime (none since the driver loaded).' % (_gpu_label(g), agg),
                ['aggregate uncorrectable ECC: %d' % agg, 'volatile uncorrectable ECC: %s' % vol],
                'Check the row-remapping or retired-page state (nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT); '
                'RMA when the remapper reports a failure or no spare rows are left.'))
    return out


def check_memory_repair(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Row remapping (Ampere and newer) and page retirement (older GPUs)."""
    out = []
    for g in facts.get('gpus', []):
        h = g.get('health') or {}
        rows = h.get('remapped_rows')
        hist = h.get('row_remapper_histogram') or {}
        if rows and rows.get('failure'):
            out.append(finding(
                'row_remap_failure', ADVICE['row_remap_failure'][0],
                '%s: a row remapping failed: its memory cannot repair itself any more.' % _gpu_label(g),
                ['remapped rows: correctable %(correctable)s, uncorrectable %(uncorrectable)s, failure occurred' % rows],
                ADVICE['row_remap_failure'][1]))
        elif rows and rows.get('pending'):
            out.append(finding(
                'row_remap_pending', ADVICE['row_remap_pending'][0],
                '%s: a row remapping is pending; it takes effect at the next GPU reset.' % _gpu_label(g),
                ['remapped rows: correctable %(correctable)s, uncorrectable %(uncorrectable)s, pending' % rows],
                ADVICE['row_remap_pending'][1]))
        if hist.get('none'):
            out.append(finding(
                'row_remap_exhausted', 'warning',
                '%s: %d memory bank(s) have no spare rows left.' % (_gpu_label(g), hist['none']),
                ['row-remapper histogram: %s' % ', '.join('%s %s' % (k, hist[k]) for k in ('max', 'high', 'partial', 'low', 'none'))],
                'Plan an RMA: the next uncorrectable error in such a bank cannot be repaired.'))
        pages = h.get('retired_pages')
        if pages and pages.get('pending'):
            out.append(finding(
                'retired_pages_pending', 'warning',
                '%s: a page retirement is pending; it takes effect at the next driver reload.' % _gpu_label(g),
                ['retired pages: single-bit %(single_bit)s, double-bit %(double_bit)s, pending' % pages],
                'At the next drain reset the GPU or reboot the node.'))
        if pages and pages['single_bit'] + pages['double_bit'] >= RETIRED_PAGES_RMA:
            out.append(finding(
                'retired_pages_rma', 'critical',
                '%s has %d retired pages, at or above NVIDIA\'s RMA threshold of %d.'
                % (_gpu_label(g), pages['single_bit'] + pages['double_bit'], RETIRED_PAGES_RMA),
                ['retired pages: single-bit %(single_bit)s, double-bit %(double_bit)s' % pages],
                'Drain the node and RMA the GPU.'))
    return out


def check_throttle(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for g in facts.get('gpus', []):
        reasons = (g.get('health') or {}).get('clocks_event_reasons') or []
        bad = [r for r in reasons if r in SEVERE_CLOCK_REASONS]
        if bad:
            out.append(finding(
                'clocks_throttled', ADVICE['clocks_throttled'][0],
                '%s runs slowed down by %s.' % (_gpu_label(g), ', '.join(bad)),
                ['current clock event reasons: %s' % ', '.join(reasons)],
                ADVICE['clocks_throttled'][1]))
    return out


# ------------------------------------------------------------------- temperature, power, InfoROM, NVLink, NVSwitch


def check_temperature(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """GPU temperature against the thresholds the GPU itself reports (nvmlDeviceGetTemperatureThreshold): at or past
    slowdown critical (the hardware slows the clocks by half or more; at shutdown the GPU switches off), within
    TEMPERATURE_NEAR_C below it a warning. A GPU without thresholds is not judged."""
    out = []
    for g in facts.get('gpus', []):
        t = (g.get('health') or {}).get('temperature') or {}
        temp, slow, shut = t.get('gpu'), t.get('slowdown'), t.get('shutdown')
        if temp is None or not slow:
            continue
        ev = ['GPU temperature %s C; slowdown threshold %s C, shutdown threshold %s C (nvmlDeviceGetTemperatureThreshold)'
              % (temp, slow, shut if shut is not None else 'not reported')]
        fix = ('Check the cooling now: fans and their speed in the BMC, airflow and blanking panels, inlet temperature, '
               'dust; move work off the GPU until it is below %d C. If it stays hot with the cooling in order, drain the '
               'node and contact the system vendor (thermal paste, heat sink).' % (slow - TEMPERATURE_NEAR_C))
        if temp >= slow:
            at_shutdown = shut is not None and temp >= shut
            out.append(finding(
                'gpu_temperature_slowdown', 'critical',
                '%s is at %s C, %s its %s threshold (%s C): %s.' % (
                    _gpu_label(g), temp, 'at or past', 'shutdown' if at_shutdown else 'slowdown',
                    shut if at_shutdown else slow,
                    'the GPU switches itself off' if at_shutdown else 'the hardware slows its clocks'),
                ev, fix))
        elif temp >= slow - TEMPERATURE_NEAR_C:
            out.append(finding(
                'gpu_temperature_high', 'warning',
                '%s is at %s C, within %d C of its slowdown threshold (%s C).'
                % (_gpu_label(g), temp, TEMPERATURE_NEAR_C, slow),
                ev, fix))
    return out


def _watts(mw: float) -> str:
    return '%.1f W' % (mw / 1000.0)


def check_power(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Power usage against the enforced limit (nvmlDeviceGetEnforcedPowerLimit, every limiter counted): over it by
    more than the reading's tolerance critical (the limiter does not hold the GPU), at it a warning (clocks capped:
    expected under full load, not at low load); an enforced limit below the default limit is reported as info."""
    out = []
    for g in facts.get('gpus', []):
        p = (g.get('health') or {}).get('power') or {}
        usage, limit, default = p.get('usage_mw'), p.get('enforced_limit_mw'), p.get('default_limit_mw')
        if usage is None or not limit:
            continue
        ev = ['power usage %s, enforced power limit %s, default limit %s' % (
            _watts(usage), _watts(limit), _watts(default) if default else 'not reported')]
        if usage > limit * (1 + POWER_TOLERANCE):
            out.append(finding(
                'gpu_power_over_limit', 'critical',
                '%s draws %s, more than its enforced power limit of %s: the power limiter does not hold it.'
                % (_gpu_label(g), _watts(usage), _watts(limit)),
                ev, 'Drain the node and check the power supply and the GPU\'s power delivery (BMC sensors and event '
                    'log); reset the GPU and, if it recurs, contact the system vendor.'))
        elif usage >= limit:
            out.append(finding(
                'gpu_power_at_limit', 'warning',
                '%s is at its enforced power limit (%s of %s): its clocks are capped (SW power cap).'
                % (_gpu_label(g), _watts(usage), _watts(limit)),
                ev, 'Expected while the GPU runs at full load; at low load check the power limit (nvidia-smi -q -d POWER) '
                    'and what sets it below the board\'s default (nvidia-smi -pl, the BMC\'s out-of-band limit).'))
        if default and limit < default:
            out.append(finding(
                'gpu_power_limit_reduced', 'info',
                '%s has an enforced power limit of %s, below its default of %s: it runs slower under load.'
                % (_gpu_label(g), _watts(limit), _watts(default)),
                ev, 'If that is not intended, restore the limit (nvidia-smi -pl <watts>, or the BMC\'s power capping).'))
    return out


def check_inforom(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """nvmlDeviceValidateInforom: NVML_ERROR_CORRUPTED_INFOROM means the checksums of the GPU's InfoROM (which keeps the
    ECC, page-retirement and row-remapping records and the error history) do not match."""
    bad = [g for g in facts.get('gpus', []) if (g.get('health') or {}).get('inforom_valid') is False]
    if not bad:
        return []
    return [finding(
        'inforom_corrupted', 'critical',
        'The InfoROM of %d GPU(s) is corrupted: the records of its memory errors and repairs cannot be trusted '
        '(nvidia-smi warns "infoROM is corrupted").' % len(bad),
        ['nvmlDeviceValidateInforom: NVML_ERROR_CORRUPTED_INFOROM for %s (InfoROM image %s)' % (
            _gpu_label(g), (g.get('health') or {}).get('inforom_image') or 'unknown')
         for g in bad],
        'Drain the node, run nvidia-bug-report.sh and open a case with the system vendor or NVIDIA support: the InfoROM '
        'is rewritten with the vendor\'s tools or the GPU is returned (NVIDIA\'s RMA process asks for the bug report).')]


def check_nvlink(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Per link state and error counters (nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkErrorCounter). A GPU without
    NVLink (NOT_SUPPORTED) is not applicable. Inactive links on an NVSwitch or NVLink5 system: critical (NVIDIA's
    health validation: no inactive NVLink is tolerated); some links down on a board without NVSwitch (NVLink bridges):
    warning (a link no bridge covers is down by design); all down there: not judged. Replay, recovery or CRC errors counted since
    the driver loaded: warning (the link corrected them; Xid 74 reports the ones it could not)."""
    out = []
    node = facts.get('node', {})
    nvswitch = bool(node.get('nvswitch_count') or node.get('nvlink5') or facts.get('nvml', {}).get('nvswitches'))
    for g in facts.get('gpus', []):
        nv = (g.get('health') or {}).get('nvlink') or {}
        links = nv.get('links') or []
        if not nv.get('applicable') or not links:
            continue
        down = [lk['link'] for lk in links if not lk.get('active')]
        if down and (len(down) < len(links) or nvswitch):
            # on a board with NVLink bridges (no NVSwitch) a link may be down because no bridge covers it
            out.append(finding(
                'nvlink_inactive', 'critical' if nvswitch else 'warning',
                '%s: %d of its %d NVLinks are not active: %s.' % (
                    _gpu_label(g), len(down), len(links),
                    'the NVLink fabric cannot use them (slower collectives, or no fabric registration)' if nvswitch
                    else 'peer-to-peer traffic over them is gone, unless no NVLink bridge is meant to cover them'),
                ['NVLink state: links %s inactive, %d active'
                 % (', '.join(str(x) for x in down), len(links) - len(down)),
                 'NVSwitch or NVLink5 system: %s' % ('yes' if nvswitch else 'no')],
                'Drain the node and reset the GPU (nvidia-smi -r, or reboot); if the links stay down, reboot the node, '
                'then have the baseboard or NVLink bridge serviced.'))
        errs = []
        for lk in links:
            counts = dict((k, v) for k, v in (lk.get('errors') or {}).items() if v)
            if counts:
                errs.append('link %s: %s' % (lk['link'], ', '.join('%s %s' % (k, counts[k]) for k in sorted(counts))))
        if errs:
            out.append(finding(
                'nvlink_errors', 'warning',
                '%s: NVLink error counters are not zero since the driver loaded (%d link(s)).' % (_gpu_label(g), len(errs)),
                errs[:5] + (['... %d more' % (len(errs) - 5)] if len(errs) > 5 else []),
                'The links corrected these (replays, recoveries, CRC); watch whether they grow (nvidia-smi nvlink -e). '
                'Growing counts or Xid 74: drain, reset the GPU, and have the link serviced if they come back.'))
    return out


def check_sxid(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """NVSwitch errors (SXid) in the kernel log since the driver's last load (node_probe.sxids_from_log): fatal ones
    critical - the switch's partition needs its GPUs and switches reset - others warning; the end of a thermal event
    (severity 'ended') gives no finding of its own (its start did)."""
    fatal = [e for e in extra.get('kernel_sxids') or [] if e.get('fatal')]
    other = [e for e in extra.get('kernel_sxids') or [] if not e.get('fatal') and e.get('severity') != 'ended']

    def lines(entries: list[dict[str, Any]]) -> list[str]:
        ev = ['kernel log: nvidia-%s: SXid (PCI:%s): %05d, %s' % (e['switch'], e['pci'], e['sxid'], e['text'])
              for e in entries[:5]]
        return ev + (['... %d more' % (len(entries) - 5)] if len(entries) > 5 else [])
    out = []
    if fatal:
        out.append(finding(
            'nvswitch_sxid_fatal', 'critical',
            '%d fatal NVSwitch error(s) (SXid %s) since the driver loaded: the GPUs behind the switch cannot use the '
            'NVLink fabric until the switch and its GPUs are reset.' % (
                len(fatal), ', '.join(str(x) for x in sorted(set(e['sxid'] for e in fatal)))),
            lines(fatal),
            'Drain the node, then reset the NVSwitches and GPUs together (reboot the node; nvidia-fabricmanager '
            'reconfigures the fabric when it starts); read nvidia-fabricmanager\'s log (/var/log/fabricmanager.log); '
            'contact support if the same SXid returns.'))
    if other:
        out.append(finding(
            'nvswitch_sxid', 'warning',
            '%d non-fatal NVSwitch error(s) (SXid %s) since the driver loaded.' % (
                len(other), ', '.join(str(x) for x in sorted(set(e['sxid'] for e in other)))),
            lines(other),
            'The switch corrected or contained these; watch whether they repeat, and reset the fabric (reboot) at the '
            'next drain if they do; a thermal SXid needs the chassis cooling checked.'))
    return out


def check_imex(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's nvidia-imex service. The collection does not install or run IMEX: on multi-node NVLink systems
    (GB200/GB300 NVL72) NVIDIA's DRA driver starts the IMEX daemons of each ComputeDomain itself, and with a host
    driver NVIDIA asks for the host unit to be disabled and masked. A host unit enabled on a node of a DRA pool
    conflicts (critical); an enabled unit that is not active elsewhere is a warning."""
    unit = facts.get('node', {}).get('imex_unit')
    active = extra.get('imex_active')
    if unit in (None, 'not-found'):
        return []
    ev = ['nvidia-imex.service: unit %s%s' % (unit, ', %s' % active if active else '')]
    if extra.get('dra') and (unit == 'enabled' or active == 'active'):
        return [finding(
            'imex_host_service_with_dra', 'critical',
            'The host\'s nvidia-imex service runs beside NVIDIA\'s DRA driver, which starts the IMEX daemons of each '
            'ComputeDomain itself: the two compete for the IMEX channels.',
            ev, 'Disable and mask it on every GPU node of the pool (systemctl disable --now nvidia-imex.service; '
                'systemctl mask nvidia-imex.service), as NVIDIA\'s DRA prerequisites ask.')]
    if unit == 'enabled' and active not in (None, 'active'):
        return [finding(
            'imex_inactive', 'warning',
            'nvidia-imex.service is enabled but not running: multi-node NVLink memory sharing (IMEX channels) fails.',
            ev, 'Read its log (journalctl -u nvidia-imex, /var/log/nvidia-imex.log), check /etc/nvidia-imex/nodes_config.cfg '
                'lists the domain\'s nodes, and start it; or disable it where the node is in no multi-node NVLink domain.')]
    return []


def check_fabric(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """NVLink fabric registration (nvmlDeviceGetGpuFabricInfo(V), Hopper and newer on NVSwitch systems): until the
    fabric manager has registered a GPU (state completed, status success) CUDA cannot use it (error 802, "system not
    yet initialized"). Not started: critical; in progress: warning (it finishes on its own after fabricmanager
    starts); completed with an error status: critical. GPUs that answer NOT_SUPPORTED carry no fabric state."""
    out = []
    waiting, failed, progress = [], [], []
    for g in facts.get('gpus', []):
        f = (g.get('health') or {}).get('fabric')
        if not f:
            continue
        if f.get('state') == 'not_started':
            waiting.append(g)
        elif f.get('state') == 'in_progress':
            progress.append(g)
        elif f.get('state') == 'completed' and f.get('status'):
            failed.append((g, f))
    fm = 'nvidia-fabricmanager: unit %s%s' % (
        facts.get('node', {}).get('fabricmanager_unit', 'unknown'),
        ', %s' % extra['fabricmanager_active'] if extra.get('fabricmanager_active') else '')
    if waiting:
        out.append(finding(
            'fabric_registration_not_started', 'critical',
            'The NVLink fabric registration of %d GPU(s) has not started: CUDA cannot use them (error 802, "system not '
            'yet initialized").' % len(waiting),
            ['NVML fabric state: not started for %s' % _gpu_label(g) for g in waiting] + [fm],
            'Start nvidia-fabricmanager (of exactly the driver\'s version) and check its log '
            '(/var/log/fabricmanager.log); the GPUs register when it runs.'))
    if progress:
        out.append(finding(
            'fabric_registration_in_progress', 'warning',
            'The NVLink fabric registration of %d GPU(s) is in progress: CUDA waits until it completes.' % len(progress),
            ['NVML fabric state: in progress for %s' % _gpu_label(g) for g in progress] + [fm],
            'Wait and diagnose again; if it stays in progress, check nvidia-fabricmanager\'s log.'))
    if failed:
        out.append(finding(
            'fabric_registration_failed', 'critical',
            'The NVLink fabric registration of %d GPU(s) completed with an error.' % len(failed),
            ['NVML fabric state: completed, status %s%s for %s' % (
                f.get('status'), ' (%s)' % f['status_text'] if f.get('status_text') else '', _gpu_label(g))
             for g, f in failed] + [fm],
            'Check nvidia-fabricmanager\'s log and the NVSwitches (Xid 74, SXid in the kernel log); restart '
            'fabricmanager and reset the GPUs (reboot) in a drain; contact support if it recurs.'))
    return out


def check_pcie(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for g in facts.get('gpus', []):
        h = g.get('health') or {}
        p = h.get('pcie') or {}
        idle = 'gpu_idle' in (h.get('clocks_event_reasons') or [])
        narrow = p.get('width') is not None and p.get('max_width') and p['width'] < p['max_width']
        slow = p.get('gen') is not None and p.get('max_gen') and p['gen'] < p['max_gen'] and not idle
        if narrow or slow:
            out.append(finding(
                'pcie_link_degraded', 'warning',
                '%s: the PCIe link runs below its maximum (%s).' % (_gpu_label(g), 'width' if narrow else 'generation'),
                ['PCIe link: gen %s x%s, maximum gen %s x%s' % (p.get('gen'), p.get('width'), p.get('max_gen'),
                                                                p.get('max_width')),
                 'replay counter: %s' % p.get('replay')],
                'Reseat the GPU or its riser, check the slot\'s BIOS link settings; a link that trains narrow after a '
                'reseat is an RMA case. (At idle the GPU may lower the generation to save power: that is not a fault.)'))
    return out


def check_virtualization(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """What the hypervisor means for MIG changes and GPU resets."""
    modes = sorted(set(m for m in ((g.get('health') or {}).get('virtualization_mode') for g in facts.get('gpus', []))
                       if m is not None and m != 'none'))
    hv = facts.get('node', {}).get('hypervisor')
    if not modes:
        return []
    ev = ['NVML virtualization mode: %s' % ', '.join(modes),
          'hypervisor: %s (%s)' % (hv or 'none seen', facts.get('node', {}).get('hypervisor_evidence') or '-')]
    if 'vgpu' in modes:
        return [finding(
            'gpu_vgpu_guest', 'info',
            'The GPUs are vGPUs of a host: MIG and the GPU\'s clocks, ECC and resets belong to the host.',
            ev, 'Change MIG geometry and reset GPUs on the hypervisor host; the mig strategy needs a MIG-backed vGPU '
                'profile chosen there.')]
    if 'passthrough' in modes:
        return [finding(
            'gpu_passthrough', 'info',
            'The GPUs are passed through to this VM: a GPU reset (MIG mode changes, remapping rows, clearing a lost '
            'GPU) may not be possible from the guest and then needs a VM reboot.',
            ev, 'Plan MIG mode changes and GPU resets as VM reboots (the mig strategy reboots the node when the reset '
                'is refused); after a GPU falls off the bus, reboot the VM, or power-cycle it from the hypervisor.')]
    return []


# ------------------------------------------------------------------------------- Dynamic Resource Allocation (dra)
# NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.5.0; docs/conformance/dra-driver-nvidia-gpu-lab.md):
# driver gpu.nvidia.com publishes the node's GPUs (type gpu, attribute uuid) and MIG devices (type mig, parentUUID) in
# ResourceSlices of resource.k8s.io/v1, and writes a CDI spec per prepared claim (kind k8s.gpu.nvidia.com/claim) that
# the container runtime injects; the NVIDIA device plugin registers /var/lib/kubelet/device-plugins/nvidia-<name>.sock.
DRA_DRIVER = NVIDIA_DRA_DRIVER
DRA_API = 'resource.k8s.io/v1'
DEVICE_PLUGIN_RESOURCE = 'nvidia.com/gpu'


def _slice_attr(device: dict[str, Any], name: str) -> str | None:
    attrs = device.get('attributes') or {}
    value = attrs.get(name, attrs.get('%s/%s' % (DRA_DRIVER, name))) or {}
    return value.get('string') if isinstance(value, dict) else None


def check_dra(facts: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """A node of a DRA pool (module option dra): the API served, the driver's ResourceSlices for this node covering its
    GPUs, no NVIDIA device plugin beside the driver, CDI not switched off in containerd."""
    dra = extra.get('dra')
    if not dra:
        return []
    out = []
    node = dra.get('node_name') or 'this node'
    versions = dra.get('api_versions')
    if versions is not None and DRA_API not in versions:
        served = sorted(v for v in versions if v.startswith('resource.k8s.io/'))
        out.append(finding(
            'dra_api_not_served', 'critical',
            'The API server does not serve %s: NVIDIA\'s DRA driver cannot publish devices and no claim is allocated.'
            % DRA_API,
            ['resource.k8s.io versions served: %s' % (', '.join(served) or 'none')],
            'Use Kubernetes 1.34 or later (DynamicResourceAllocation is GA and on by default there); on 1.32/1.33 '
            'enable the DynamicResourceAllocation feature gate on every component and --runtime-config for the '
            'resource.k8s.io beta API.'))
    slices = dra.get('resource_slices')
    if slices is not None:
        mine = [sl for sl in slices if (sl.get('spec') or {}).get('driver') == DRA_DRIVER
                and (not dra.get('node_name') or (sl.get('spec') or {}).get('nodeName') == dra['node_name'])]
        devices = [d for sl in mine for d in (sl.get('spec') or {}).get('devices') or []]
        if not mine:
            out.append(finding(
                'dra_driver_not_publishing', 'critical',
                'No ResourceSlice of driver %s for %s: its kubelet plugin is not running or cannot reach the API '
                'server, so no claim can get this node\'s GPUs.' % (DRA_DRIVER, node),
                ['ResourceSlices of %s for %s: none (of %d given)' % (DRA_DRIVER, node, len(slices))],
                'Check the driver\'s kubelet-plugin DaemonSet pod on this node (kubectl -n <namespace> logs ...), that '
                'the node carries the labels its nodeSelector asks for, and the driver root the chart names '
                '(nvidiaDriverRoot: / for a host driver, /run/nvidia/driver for the GPU operator\'s).'))
        else:
            published: set[str] = set()
            for d in devices:
                published.update(x for x in (_slice_attr(d, 'uuid'), _slice_attr(d, 'parentUUID')) if x)
            missing = ['%s (%s)' % (g.get('uuid'), g.get('name')) for g in facts.get('gpus', [])
                       if g.get('uuid') and g['uuid'] not in published]
            if missing:
                out.append(finding(
                    'dra_gpus_not_published', 'warning',
                    'GPUs of this node are in no ResourceSlice of %s: no claim can get them.' % DRA_DRIVER,
                    ['not published: %s' % ', '.join(missing),
                     '%d device(s) published in %d slice(s)' % (len(devices), len(mine))],
                    'A GPU in MIG mode is published only through its MIG devices (static MIG): create them, or turn '
                    'MIG mode off; otherwise restart the kubelet plugin so that it enumerates the GPUs again.'))
    sockets = extra.get('device_plugin_sockets') or []
    allocatable = (dra.get('allocatable') or {}).get(DEVICE_PLUGIN_RESOURCE)
    if sockets or allocatable not in (None, '0', 0):
        ev = ['%s registered with the kubelet' % s for s in sockets]
        if allocatable not in (None, '0', 0):
            ev.append('node allocatable %s: %s' % (DEVICE_PLUGIN_RESOURCE, allocatable))
        out.append(finding(
            'dra_device_plugin_beside', 'critical',
            'The NVIDIA device plugin runs beside NVIDIA\'s DRA driver on this node: both hand out the same GPUs.',
            ev,
            'Take the node out of every device plugin pool (the collection refuses a node in both) and remove the '
            'device plugin from it; the DRA pool\'s claims then own the GPUs.'))
    out.extend(_dra_cdi(facts.get('node', {}).get('container_runtimes', {})))
    return out


def _dra_cdi(rt: dict[str, Any]) -> list[dict[str, Any]]:
    """containerd's CDI as the node's release reads its config (docs/conformance/containerd.md CTD-01..CTD-05): none
    before 1.7 (enable_cdi is not a key there), off unless enable_cdi = true on 1.7, on unless enable_cdi = false from
    2.0, always on from 2.4 (the key is gone: a leftover enable_cdi = false is ignored); with the release unknown only
    an explicit enable_cdi = false is reported."""
    version = rt.get('containerd_version')
    enable = rt.get('containerd_enable_cdi')
    state = cdi_effective(version, enable)
    setting = 'not set' if enable is None else 'enable_cdi = %s' % str(enable).lower()
    if state == 'unsupported':
        return [finding(
            'dra_cdi_unsupported', 'critical',
            'containerd %s cannot do CDI (enable_cdi exists in its CRI plugin from 1.7 on): the CDI specs NVIDIA\'s DRA '
            'driver writes for each claim are not injected, so containers get no GPU.' % version,
            ['containerd --version: %s' % version, 'containerd CRI config: %s%s'
             % (setting, ' (ignored by this release)' if enable is not None else '')],
            'Upgrade containerd to 1.7 or later (2.0+ enables CDI by default; 1.7 needs enable_cdi = true, which '
            'gpuops.k8s_gpu.nvidia_container_runtime sets with nvidia_container_runtime_cdi: true).')]
    if state is False:
        ev = ['containerd CRI config: %s' % setting]
        if version:
            ev.insert(0, 'containerd --version: %s (enable_cdi defaults to %s)'
                      % (version, str(cdi_default(version)).lower()))
        return [finding(
            'dra_cdi_disabled', 'critical',
            'containerd has CDI off (%s): the CDI specs NVIDIA\'s DRA driver writes for each claim are not injected, '
            'so containers get no GPU.' % ('enable_cdi = false' if enable is False
                                           else 'containerd %s without enable_cdi = true' % version),
            ev,
            'Set enable_cdi = true in containerd\'s CRI plugin (containerd 2.x enables CDI unless it is set to '
            'false; 1.7 needs enable_cdi = true): gpuops.k8s_gpu.nvidia_container_runtime with '
            'nvidia_container_runtime_cdi: true sets it.')]
    return []


CHECKS: tuple[tuple[str, Callable[..., list[dict[str, Any]]]], ...] = (
    ('nouveau_loaded', check_nouveau),
    ('secure_boot', check_secure_boot),
    ('driver', check_driver_loaded),
    ('version_mismatch', check_version_mismatch),
    ('fabricmanager', check_fabricmanager),
    ('persistence', check_persistence),
    ('vmware_consumer_gpu', check_vmware_consumer_gpu),
    ('runtime', check_runtime),
    ('readiness', check_readiness),
    ('gpu_lost', check_gpu_lost),
    ('xid', check_xid),
    ('recovery_action', check_recovery_action),
    ('pending_reset', check_pending_reset),
    ('ecc', check_ecc),
    ('memory_repair', check_memory_repair),
    ('throttle', check_throttle),
    ('pcie', check_pcie),
    ('fabric', check_fabric),
    ('temperature', check_temperature),
    ('power', check_power),
    ('inforom', check_inforom),
    ('nvlink', check_nvlink),
    ('sxid', check_sxid),
    ('imex', check_imex),
    ('virtualization', check_virtualization),
    ('strategy', check_strategy),
    ('scheduler_config', check_scheduler_config),
    ('extender', check_extender),
    ('cluster_images', check_cluster_images),
    ('dra', check_dra),
)
CHECK_NAMES = tuple(name for name, _f in CHECKS)
# the checks that need each GPU's health answers from NVML
HEALTH_CHECKS = ('recovery_action', 'pending_reset', 'ecc', 'memory_repair', 'throttle', 'pcie', 'virtualization', 'fabric',
                 'temperature', 'power', 'inforom', 'nvlink')


def diagnose(facts: dict[str, Any], extra: dict[str, Any] | None = None, strategy: str | None = None,
             checks: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Run the checks and return findings sorted by severity (critical first)."""
    extra = extra or {}
    found: list[dict[str, Any]] = []
    for name, func in CHECKS:
        if checks and name not in checks:
            continue
        if name in ('runtime', 'strategy', 'readiness'):
            found.extend(func(facts, extra, strategy=strategy))
        else:
            found.extend(func(facts, extra))
    order = dict((s, i) for i, s in enumerate(SEVERITIES))
    return sorted(found, key=lambda f: (order[f['severity']], f['id']))


def render_table(host: str, findings: list[dict[str, Any]]) -> str:
    """A readable table of findings for one host."""
    if not findings:
        return '%s: no problem found' % host
    lines = ['%-9s %-40s %s' % ('severity', 'check', 'summary')]
    for f in findings:
        lines.append('%-9s %-40s %s' % (f['severity'], f['id'], f['summary']))
        for e in f['evidence']:
            lines.append('%-9s %-40s   evidence: %s' % ('', '', e))
        lines.append('%-9s %-40s   fix: %s' % ('', '', f['remediation']))
    return '\n'.join(lines)
