#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_doctor
short_description: Diagnose the known failures of NVIDIA GPU nodes
version_added: 0.1.0
description:
  - Probes the node like M(gpuops.k8s_gpu.gpu_info) and runs the doctor's checks over the result.
  - Each finding has an id, a severity (V(critical), V(warning), V(info)), evidence and a remediation.
  - "Node checks: C(nouveau_loaded); C(secure_boot) (Secure Boot on with an unsigned module); C(driver)
    (NVIDIA device present but driver not loaded or not installed); C(version_mismatch) (NVML/driver);
    C(fabricmanager) (NVSwitch present and fabricmanager missing, inactive or not the driver's exact version);
    C(persistence) (persistence mode off); C(vmware_consumer_gpu) (GeForce card in a VMware VM that shows the
    hypervisor); C(runtime) (nvidia runtime missing from docker/containerd, or not the default where the
    strategy needs it); C(strategy) (the requested sharing strategy is impossible on this hardware)."
  - "Readiness for Kubernetes, C(readiness): no container engine, no NVIDIA Container Toolkit, no nvidia runtime in
    CRI-O's config, no CDI spec where O(cdi_required); with an NVIDIA device plugin O(strategy) where nvidia is not
    the engine's default runtime and CDI is not used, an info finding that GPU pods must set runtimeClassName nvidia."
  - "GPU health from NVML and the kernel log (read-only): C(gpu_lost) (fallen off the bus); C(xid) (Xid events since
    boot in the kernel log - from the driver's last load on, and per GPU from its last Xid 154 back to recovery
    action None on - and those NVML delivers during O(xid_wait_ms); Xid 154 by the recovery action its line
    names, an Xid without guidance critical); C(recovery_action) (NVML's GPU recovery action on 570+ drivers, anything
    but none critical); C(pending_reset) (a MIG or ECC mode change that waits for a GPU reset); C(ecc) (uncorrectable ECC errors, volatile
    and aggregate); C(memory_repair) (row remapping pending or failed, banks without spare rows, retired pages);
    C(throttle) (HW slowdown, thermal, power brake); C(pcie) (link width or generation below the maximum);
    C(virtualization) (passthrough or vGPU, from NVML's virtualization mode, and what that means for GPU resets);
    C(fabric) (NVLink fabric registration of Hopper and newer GPUs on NVSwitch systems not started, in progress or
    failed, from NVML's fabric info); C(temperature) (GPU temperature at or past its slowdown threshold critical,
    within 5 C of it a warning); C(power) (power usage over the enforced limit beyond the reading's 5% tolerance
    critical, at the limit a warning, an enforced limit below the default info); C(inforom) (NVML's InfoROM
    validation answers corrupted, critical); C(nvlink) (inactive NVLinks critical on NVSwitch systems, a warning
    elsewhere, replay, recovery or CRC error counters warning; GPUs without NVLink are not applicable); C(sxid)
    (NVSwitch SXid lines in the kernel log since the driver's last load, fatal critical, others warning)."
  - "NVSwitch and NVLink5 systems: C(fabricmanager) also on an NVLink5 system (HGX B200/B300, GB200: an InfiniBand
    device with SW_MNG in its VPD), where the C(ib_umad) kernel module must be loaded (C(fabricmanager_ib_umad_missing));
    C(nvlink) counts all links down as a fault there. C(imex): the collection does not install IMEX (NVIDIA's DRA driver
    runs the IMEX daemons of its ComputeDomains); a host C(nvidia-imex.service) enabled or running on a node of a DRA
    pool (O(dra) given) is critical, one enabled but not running elsewhere a warning."
  - "Dynamic Resource Allocation, C(dra), for a node of a pool served by NVIDIA's DRA driver (O(dra) given): the API
    server serves C(resource.k8s.io/v1) (C(dra_api_not_served)); the driver's ResourceSlices exist for this node
    (C(dra_driver_not_publishing)) and cover every GPU NVML sees (C(dra_gpus_not_published)); no NVIDIA device plugin
    beside it - a C(nvidia-*.sock) in the kubelet's device-plugins directory or C(nvidia.com/gpu) allocatable
    (C(dra_device_plugin_beside)); containerd has CDI on as its release reads its config - none before 1.7
    (C(dra_cdi_unsupported)), off on 1.7 unless C(enable_cdi = true), on from 2.0 unless C(enable_cdi = false)
    (C(dra_cdi_disabled)); the release is C(containerd --version) of the containerd on PATH."
  - docs/doctor.md lists every check, its source and severity; docs/conformance/doctor-health.md the upstream facts.
  - Read-only.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
options:
  strategy:
    description:
      - The sharing strategy planned for this node, to check the hardware and runtime allow it.
      - V(gpushare), V(volcano) and V(hami) need nvidia as the container runtime's default runtime. V(exclusive),
        V(time-slicing), V(mps) and V(mig) run their pods with RuntimeClass C(nvidia) instead, so they need the nvidia
        runtime under that handler name, not as the default.
    type: str
    choices: [exclusive, time-slicing, mps, mig, gpushare, volcano, hami, gpu-manager]  # make generate: gpu_strategy.NODE_STRATEGIES
  checks:
    description: Run only these checks (default all).
    type: list
    elements: str
    choices: [nouveau_loaded, secure_boot, driver, version_mismatch, fabricmanager, persistence,
              vmware_consumer_gpu, runtime, readiness, gpu_lost, xid, recovery_action, pending_reset, ecc,
              memory_repair, throttle, pcie, fabric, temperature, power, inforom, nvlink, sxid, imex,
              virtualization, strategy, scheduler_config, extender, cluster_images, dra]
  cdi_required:
    description:
      - The site runs the NVIDIA Container Toolkit in CDI mode (role variable C(nvidia_container_runtime_cdi)), so
        a node without a CDI spec naming C(nvidia.com/gpu) is not ready.
    type: bool
    default: false
  kernel_log:
    description:
      - Where the kernel log is read for Xid and SXid lines and the hypervisor's name, the character device C(/dev/kmsg)
        (read without blocking, needs root where C(kernel.dmesg_restrict) is 1) or a file of C(dmesg) output.
    type: path
    default: /dev/kmsg
  xid_wait_ms:
    description:
      - How long NVML is asked for Xid events (all GPUs at once). NVML reports only the events that happen during
        this wait; the kernel log holds those since boot. V(0) does not wait.
    type: int
    default: 100
  remediation_severity:
    description:
      - The least severity of a GPU's own finding that puts the GPU into RV(remediation) (the remediation loop's
        input, M(gpuops.k8s_gpu.gpu_remediation)).
    type: str
    choices: [critical, warning]
    default: critical
  kubernetes_version:
    description: The cluster's Kubernetes version (for example V(v1.29.4)), for the C(scheduler_config) check.
    type: str
  scheduler_config_path:
    description:
      - Path of the kube-scheduler config (KubeSchedulerConfiguration YAML or Policy JSON) on this node.
      - Checked against O(kubernetes_version). A missing file is a finding.
    type: path
  extender_urls:
    description:
      - Scheduler extender URL prefixes (for example V(http://127.0.0.1:32766/gpushare-scheduler)) to probe
        with a TCP connection from this node.
    type: list
    elements: str
    default: []
  cluster_images:
    description:
      - Container images running in the cluster (gather them with M(kubernetes.core.k8s_info)); each is compared
        with the images known to fail.
    type: list
    elements: str
    default: []
  dra:
    description:
      - The node is in a pool served by NVIDIA's DRA driver (C(gpu.nvidia.com)); what the controller read from the
        cluster for the C(dra) check. Without it the check does nothing.
    type: dict
    suboptions:
      node_name:
        description: The node's Kubernetes name (only its own slices count).
        type: str
      api_versions:
        description:
          - The group versions the API server serves (for example the keys of M(kubernetes.core.k8s_cluster_info)'s
            C(apis), or C(kubectl api-versions)). Not given, the API is not checked.
        type: list
        elements: str
      resource_slices:
        description:
          - The node's ResourceSlices (M(kubernetes.core.k8s_info) with C(api_version=resource.k8s.io/v1),
            C(kind=ResourceSlice), C(field_selectors=[spec.nodeName=<node>])). Not given, the slices are not checked.
        type: list
        elements: dict
      allocatable:
        description: The node's C(status.allocatable), to see an NVIDIA device plugin's C(nvidia.com/gpu).
        type: dict
  fail_on:
    description:
      - Fail the task when a finding of this severity or worse exists. V(never) only reports.
    type: str
    choices: [never, critical, warning]
    default: never
requirements:
  - nvidia-ml-py (C(pynvml)) for the NVML part, as M(gpuops.k8s_gpu.gpu_info)
  - PyYAML when O(scheduler_config_path) is set
seealso:
  - module: gpuops.k8s_gpu.gpu_info
  - module: gpuops.k8s_gpu.kube_scheduler_config
'''

EXAMPLES = r'''
- name: Diagnose the node for a gpushare pool
  gpuops.k8s_gpu.gpu_doctor:
    strategy: gpushare
  register: doctor

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ doctor.table.split('\n') }}"

- name: Stop on critical problems
  gpuops.k8s_gpu.gpu_doctor:
    fail_on: critical
'''

RETURN = r'''
healthy:
  description: True when no critical or warning finding exists.
  returned: always
  type: bool
findings:
  description: The findings, critical first.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Stable identifier of the check that fired.
      type: str
      sample: fabricmanager_missing
    severity:
      description: V(critical), V(warning) or V(info).
      type: str
    summary:
      description: What is wrong.
      type: str
    evidence:
      description: What the doctor saw.
      type: list
      elements: str
    remediation:
      description: How to fix it.
      type: str
counts:
  description: Number of findings per severity.
  returned: always
  type: dict
  sample: {critical: 1, warning: 0, info: 0}
table:
  description: A readable table of the findings.
  returned: always
  type: str
probe:
  description: The M(gpuops.k8s_gpu.gpu_info) facts the diagnosis used.
  returned: always
  type: dict
remediation:
  description:
    - The GPUs that need the remediation loop, by UUID - the doctor's GPU health checks run on one GPU at a time - each
      with C(index), C(pci_bus_id), C(findings) (at or above O(remediation_severity)) and C(repair) (C(action) -
      V(reset), V(reboot), V(vm_reboot), V(host), V(rma) or V(manual) -, C(allowed), C(why), C(note)). Empty when
      every GPU is healthy or no health check ran.
  returned: always
  type: dict
'''

from typing import Any

import glob
import json
import os
import re
import socket
import traceback

try:
    from urllib.parse import urlparse
except ImportError:  # pragma: no cover
    from urlparse import urlparse  # type: ignore

YAML_IMPORT_ERROR = None
try:
    import yaml
    HAS_YAML = True
except ImportError:
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_facts import gather
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_remediation
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvidia_driver
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as checks
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NODE_STRATEGIES, mig_partitioned

LIB_DIRS = ('/usr/lib/x86_64-linux-gnu', '/usr/lib/x86_64-linux-gnu/nvidia/current', '/usr/lib64', '/usr/lib',
            '/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/local/lib')


DEVICE_PLUGIN_DIR = '/var/lib/kubelet/device-plugins'   # k8s.io/kubelet pkg/apis/deviceplugin/v1beta1 DevicePluginPath


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


def nvml_library_version() -> str | None:
    """Version of the installed libnvidia-ml (from the file name the .so.1 link resolves to)."""
    for d in LIB_DIRS:
        link = os.path.join(d, 'libnvidia-ml.so.1')
        if os.path.exists(link):
            m = re.search(r'libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$', os.path.realpath(link))
            if m:
                return m.group(1)
    for d in LIB_DIRS:
        for path in sorted(glob.glob(os.path.join(d, 'libnvidia-ml.so.[0-9]*.*'))):
            m = re.search(r'libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$', path)
            if m:
                return m.group(1)
    return None


def gather_extra(module: AnsibleModule, facts: dict[str, Any], log_lines: Any = None) -> dict[str, Any]:
    extra = {
        'kernel_log_readable': log_lines is not None,
        'kernel_xids': node_probe.xids_from_log(log_lines),
        'kernel_sxids': node_probe.sxids_from_log(log_lines),
        'cdi_required': module.params['cdi_required'],
        'nvidia_taint': _read('/sys/module/nvidia/taint'),
        'nvml_library_version': nvml_library_version(),
        'hypervisor_cpu_flag': ' hypervisor' in (_read('/proc/cpuinfo') or ''),
        'machine': os.uname()[4],
        # the dkms module name as registered (nvidia-srv, nvidia-current, nvidia) for the driver_not_loaded advice
        'dkms_module': nvidia_driver.dkms_state('/', os.uname()[2])['module'],
    }
    if facts.get('node', {}).get('imex_unit') not in (None, 'not-found'):
        systemctl = module.get_bin_path('systemctl')
        if systemctl:
            rc, out, err = module.run_command([systemctl, 'is-active', 'nvidia-imex.service'])
            extra['imex_active'] = out.strip() or 'unknown'
    if facts.get('node', {}).get('fabricmanager_required'):
        systemctl = module.get_bin_path('systemctl')
        if systemctl and facts['node'].get('fabricmanager_unit') != 'not-found':
            rc, out, err = module.run_command([systemctl, 'is-active', 'nvidia-fabricmanager.service'])
            extra['fabricmanager_active'] = out.strip() or 'unknown'
        fm = module.get_bin_path('nv-fabricmanager')
        if fm:
            rc, out, err = module.run_command([fm, '--version'])
            m = re.search(r'(\d+\.\d+\.\d+)', out + err)
            extra['fabricmanager_version'] = m.group(1) if m else None
    return extra


def probe_url(url: str, timeout: float = 3.0) -> str | None:
    """None when a TCP connection to the URL's host and port succeeds, else the error text."""
    parsed = urlparse(url)
    if parsed.scheme not in ('http', 'https') or not parsed.hostname:
        return 'not an http(s) URL'
    port = parsed.port or (443 if parsed.scheme == 'https' else 80)
    try:
        conn = socket.create_connection((parsed.hostname, port), timeout=timeout)
        conn.close()
        return None
    except (OSError, socket.error) as exc:
        return str(exc)


def cluster_extra(module: AnsibleModule) -> dict[str, Any]:
    extra = {}
    p = module.params
    if p['kubernetes_version']:
        extra['kubernetes_version'] = p['kubernetes_version']
    if p['scheduler_config_path']:
        extra['scheduler_config_path'] = p['scheduler_config_path']
        text = _read(p['scheduler_config_path'])
        if text is None:
            extra['scheduler_config'] = {'kind': 'missing', 'apiVersion': 'missing'}
        else:
            try:
                extra['scheduler_config'] = json.loads(text) if text.lstrip().startswith('{') else yaml.safe_load(text)
            except Exception as exc:  # pylint: disable=broad-except
                module.fail_json(msg='scheduler_config_path: %s is neither JSON nor YAML: %s' % (p['scheduler_config_path'], exc))
    extra['extender_probes'] = dict((u, probe_url(u)) for u in p['extender_urls'])
    extra['cluster_images'] = p['cluster_images']
    if p['dra']:
        extra['dra'] = p['dra']
        # the NVIDIA device plugin's sockets (k8s-device-plugin internal/plugin/server.go: nvidia-<name>.sock)
        extra['device_plugin_sockets'] = sorted(glob.glob(os.path.join(DEVICE_PLUGIN_DIR, 'nvidia-*.sock')))
    return extra


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            strategy=dict(type='str', choices=list(NODE_STRATEGIES)),
            checks=dict(type='list', elements='str', choices=list(checks.CHECK_NAMES)),
            fail_on=dict(type='str', default='never', choices=['never', 'critical', 'warning']),
            kubernetes_version=dict(type='str'),
            scheduler_config_path=dict(type='path'),
            extender_urls=dict(type='list', elements='str', default=[]),
            cluster_images=dict(type='list', elements='str', default=[]),
            cdi_required=dict(type='bool', default=False),
            kernel_log=dict(type='path', default='/dev/kmsg'),
            xid_wait_ms=dict(type='int', default=100),
            remediation_severity=dict(type='str', choices=['critical', 'warning'], default='critical'),
            dra=dict(type='dict', options=dict(
                node_name=dict(type='str'),
                api_versions=dict(type='list', elements='str'),
                resource_slices=dict(type='list', elements='dict'),
                allocatable=dict(type='dict'),
            )),
        ),
        supports_check_mode=True,
    )
    if module.params['scheduler_config_path'] and not HAS_YAML:
        module.fail_json(msg=missing_required_lib('PyYAML'), exception=YAML_IMPORT_ERROR)
    p = module.params
    if p['xid_wait_ms'] < 0:
        module.fail_json(msg='xid_wait_ms: %s is negative; allowed: 0 or more milliseconds' % p['xid_wait_ms'])
    wanted = set(p['checks'] or checks.CHECK_NAMES)
    health = bool(wanted & set(checks.HEALTH_CHECKS))
    log_lines = node_probe.kernel_log('/', p['kernel_log']) if wanted & set(('xid', 'sxid', 'virtualization')) else None
    # the GPU-instance profiles only matter to the strategy that partitions GPUs (mig; elsewhere the catalogue answers
    # the same)
    facts = gather(mig_profiles=mig_partitioned(p['strategy']), health=health,
                   xid_wait_ms=p['xid_wait_ms'] if 'xid' in wanted else None, log_lines=log_lines,
                   run=module.run_command)
    extra = gather_extra(module, facts, log_lines)
    extra.update(cluster_extra(module))
    findings = checks.diagnose(facts, extra, strategy=module.params['strategy'], checks=module.params['checks'])
    counts = dict((s, len([f for f in findings if f['severity'] == s])) for s in checks.SEVERITIES)
    host = os.uname()[1]
    result = dict(
        changed=False,
        healthy=counts['critical'] == 0 and counts['warning'] == 0,
        findings=findings,
        counts=counts,
        table=checks.render_table(host, findings),
        probe=facts,
        remediation=gpu_doctor_remediation.assess(facts, extra, p['remediation_severity']) if health else {},
    )
    fail_on = module.params['fail_on']
    if (fail_on == 'critical' and counts['critical']) or (fail_on == 'warning' and (counts['critical'] or counts['warning'])):
        module.fail_json(msg='gpu_doctor found %d critical and %d warning problem(s): %s'
                         % (counts['critical'], counts['warning'], ', '.join(f['id'] for f in findings)), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
