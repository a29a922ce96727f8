#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
  - Read-only.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes
  - gpuops.k8s_gpu.attributes.info_module
options:
  strategy:
    description:
      - The sharing strategy planned for this node, to check the hardware and runtime allow it.
      - V(gpushare), V(volcano) and V(hami) need nvidia as the container runtime's default runtime.
    type: str
    choices: [exclusive, time-slicing, mps, mig, gpushare, volcano, hami, gpu-manager]
  checks:
    description: Run only these checks (default all).
    type: list
    elements: str
    choices: [nouveau_loaded, secure_boot, driver, version_mismatch, fabricmanager, persistence,
              vmware_consumer_gpu, runtime, strategy]
  fail_on:
    description:
      - Fail the task when a finding of this severity or worse exists. V(never) only reports.
    type: str
    choices: [never, critical, warning]
    default: never
seealso:
  - module: gpuops.k8s_gpu.gpu_info
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
'''

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.gpu_facts import gather
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import gpu_doctor_checks as checks

LIB_DIRS = ('/usr/lib/x86_64-linux-gnu', '/usr/lib/x86_64-linux-gnu/nvidia/current', '/usr/lib64', '/usr/lib',
            '/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/local/lib')


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


def nvml_library_version():
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


def gather_extra(module, facts):
    extra = {
        'nvidia_taint': _read('/sys/module/nvidia/taint'),
        'nvml_library_version': nvml_library_version(),
        'hypervisor_cpu_flag': ' hypervisor' in (_read('/proc/cpuinfo') or ''),
    }
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            strategy=dict(type='str', choices=['exclusive', 'time-slicing', 'mps', 'mig', 'gpushare', 'volcano',
                                               'hami', 'gpu-manager']),
            checks=dict(type='list', elements='str', choices=list(checks.CHECK_NAMES)),
            fail_on=dict(type='str', default='never', choices=['never', 'critical', 'warning']),
        ),
        supports_check_mode=True,
    )
    facts = gather()
    extra = gather_extra(module, facts)
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
    )
    fail_on = module.params['fail_on']
    if (fail_on == 'critical' and counts['critical']) or (fail_on == 'warning' and (counts['critical'] or counts['warning'])):
        module.fail_json(msg='gpu_doctor found %d critical and %d warning problem(s): %s'
                         % (counts['critical'], counts['warning'], ', '.join(f['id'] for f in findings)), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
