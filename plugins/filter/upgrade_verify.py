# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of playbooks/upgrade_driver.yml: what is wrong with a GPU node after the driver upgrade (the decisions in
Python, the playbook reports them)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: upgrade_verify
short_description: What is wrong with a GPU node after a driver upgrade
version_added: 0.2.0
description:
  - From M(gpuops.k8s_gpu.gpu_info)'s result after the upgrade, one sentence per problem - NVML not working, another
    driver version than the target, fewer or more GPUs than before, NVSwitches without an active
    C(nvidia-fabricmanager), and for a MIG pool a GPU whose MIG mode is off or whose MIG devices, counted by profile,
    differ from the pool's geometry (after a reboot GPU and compute instances are gone unless re-created).
  - Used by playbook C(gpuops.k8s_gpu.upgrade_driver) - any problem stops the roll.
positional: expect
options:
  _input:
    description: The registered result of M(gpuops.k8s_gpu.gpu_info).
    type: dict
    required: true
  expect:
    description:
      - What the node must show - C(driver_version) (str), C(gpu_count) (int), C(fabricmanager_active) (bool, the unit's
        state; checked only when gpu_info reports NVSwitches), C(mig_devices) (MIG profile to count per GPU; empty or
        missing - not a MIG pool).
    type: dict
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Problems after the upgrade
  ansible.builtin.set_fact:
    problems: >-
      {{ after | gpuops.k8s_gpu.upgrade_verify({'driver_version': '550.90.07', 'gpu_count': 8,
         'fabricmanager_active': true, 'mig_devices': {'3g.40gb': 2}}) }}
'''

RETURN = r'''
_value:
  description: One sentence per problem found; empty when the node is what O(expect) says.
  type: list
  elements: str
'''

from ansible.errors import AnsibleFilterError


def mig_profile_of(device):
    """'1g.10gb' from a MIG device's NVML name ('NVIDIA H100 80GB HBM3 MIG 1g.10gb'), None when unknown."""
    name = device.get('name') or ''
    marker = ' MIG '
    if marker not in name:
        return None
    return name.rsplit(marker, 1)[1].strip() or None


def mig_geometry_problems(gpus, expected):
    """Per GPU: MIG mode on and its MIG devices, counted by profile, equal to ``expected`` ({profile: count})."""
    problems = []
    want = dict((str(k), int(v)) for k, v in expected.items() if int(v) > 0)
    for gpu in gpus:
        where = 'GPU %s (%s)' % (gpu.get('index'), gpu.get('uuid', 'no uuid'))
        if not gpu.get('mig_capable'):
            problems.append('%s is not MIG capable, the pool needs MIG devices %s' % (where, _fmt(want)))
            continue
        if not gpu.get('mig_current'):
            problems.append('%s has MIG mode off, the pool needs MIG devices %s' % (where, _fmt(want)))
            continue
        have = {}
        for dev in gpu.get('mig_devices') or []:
            prof = mig_profile_of(dev) or 'unknown'
            have[prof] = have.get(prof, 0) + 1
        if have != want:
            problems.append('%s has MIG devices %s, the pool geometry is %s' % (where, _fmt(have), _fmt(want)))
    return problems


def _fmt(counts):
    if not counts:
        return 'none'
    return ', '.join('%sx %s' % (counts[k], k) for k in sorted(counts))


def upgrade_verify(after, expect):
    """One sentence per problem of the node after the upgrade; [] when it is what ``expect`` says."""
    if not isinstance(after, dict) or not isinstance(expect, dict):
        raise AnsibleFilterError('upgrade_verify: expected gpu_info\'s result and a dict of expectations')
    problems = []
    nvml = after.get('nvml') or {}
    if nvml.get('status') != 'ok':
        problems.append('NVML does not work (status "%s"%s)' % (
            nvml.get('status', 'unknown'), ': %s' % nvml['error'] if nvml.get('error') else ''))
    elif expect.get('driver_version') and nvml.get('driver_version') != expect['driver_version']:
        problems.append('the driver is %s, not %s' % (nvml.get('driver_version') or 'unknown', expect['driver_version']))
    if expect.get('gpu_count') is not None and int(after.get('gpu_count') or 0) != int(expect['gpu_count']):
        problems.append('%s GPU(s) seen, %s before the upgrade' % (after.get('gpu_count') or 0, expect['gpu_count']))
    node = after.get('node') or {}
    if node.get('fabricmanager_required') and expect.get('fabricmanager_active') is False:
        problems.append('%s NVSwitch(es) but nvidia-fabricmanager is not active' % node.get('nvswitch_count', 'some'))
    mig = expect.get('mig_devices')
    if mig and nvml.get('status') == 'ok':
        problems.extend(mig_geometry_problems(after.get('gpus') or [], mig))
    return problems


class FilterModule(object):
    def filters(self):
        return {'upgrade_verify': upgrade_verify}
