# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of role nvidia_driver (entry point upgrade_check): what is wrong with a GPU node after a driver upgrade
(the decisions in Python, the role reports them)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: upgrade_verify
short_description: What is wrong with a GPU node after a driver upgrade
version_added: 0.1.0
description:
  - From M(gpuops.k8s_gpu.gpu_info)'s result after the upgrade, one sentence per problem - NVML not working, another
    driver version than the target, fewer or more GPUs than before, NVSwitches without an active
    C(nvidia-fabricmanager), and for a MIG pool each GPU that M(gpuops.k8s_gpu.gpu_sharing) O(gpuops.k8s_gpu.gpu_sharing#module:mig_verify)
    found different from the pool's geometry (after a reboot GPU and compute instances are gone unless re-created);
    the comparison is the module's, the filter only words it.
  - Used by the C(upgrade_check) entry point of role C(gpuops.k8s_gpu.nvidia_driver), which playbook
    C(gpuops.k8s_gpu.upgrade_driver) runs - any problem stops the roll.
positional: expect
options:
  _input:
    description: The registered result of M(gpuops.k8s_gpu.gpu_info).
    type: dict
    required: true
  expect:
    description:
      - What the node must show - C(driver_version) (str), C(gpu_count) (int), C(fabricmanager_active) (bool, the unit's
        state; checked only when gpu_info reports NVSwitches), C(mig_verify) (the registered result of
        M(gpuops.k8s_gpu.gpu_sharing) with O(gpuops.k8s_gpu.gpu_sharing#module:mig_verify=true), run with
        C(failed_when=false); missing or null - not a MIG pool; a skipped task - nothing to check).
    type: dict
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Problems after the upgrade
  ansible.builtin.set_fact:
    problems: >-
      {{ after | gpuops.k8s_gpu.upgrade_verify({'driver_version': '550.90.07', 'gpu_count': 8,
         'fabricmanager_active': true, 'mig_verify': mig_check}) }}
'''

RETURN = r'''
_value:
  description: One sentence per problem found; empty when the node is what O(expect) says.
  type: list
  elements: str
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError


def mig_geometry_problems(check: Any) -> list[str]:
    """Word M(gpuops.k8s_gpu.gpu_sharing)'s O(mig_verify) result for the roll's report: one sentence per GPU that differs.

    The comparison is the module's (``mismatched_gpus``); this only says it in the playbook's words.
    """
    if not isinstance(check, dict):
        raise AnsibleFilterError('upgrade_verify: mig_verify must be the registered result of gpu_sharing (mig_verify)')
    if check.get('skipped'):
        return []
    if 'mig_match' not in check:
        return ['the MIG check could not run: %s' % (check.get('msg') or 'no result')]
    problems = []
    for gpu in check.get('mismatched_gpus') or []:
        where = 'GPU %s (%s)' % (gpu.get('index'), gpu.get('uuid') or 'no uuid')
        want = gpu.get('wanted_mig_devices') or {}
        if not gpu.get('wanted_mig_enabled'):
            problems.append('%s: %s' % (where, '; '.join(gpu.get('problems') or ['MIG differs'])))
        elif not gpu.get('mig_capable'):
            problems.append('%s is not MIG capable, the pool needs MIG devices %s' % (where, _fmt(want)))
        elif not gpu.get('mig_current'):
            problems.append('%s has MIG mode off, the pool needs MIG devices %s' % (where, _fmt(want)))
        else:
            have = _fmt(gpu.get('mig_devices') or {})
            problems.append('%s has MIG devices %s, the pool geometry is %s' % (where, have, _fmt(want)))
    return problems


def _fmt(counts: dict[str, int]) -> str:
    if not counts:
        return 'none'
    return ', '.join('%sx %s' % (counts[k], k) for k in sorted(counts))


def upgrade_verify(after: Any, expect: Any) -> list[str]:
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
    mig = expect.get('mig_verify')
    if mig is not None and nvml.get('status') == 'ok':
        problems.extend(mig_geometry_problems(mig))
    return problems


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'upgrade_verify': upgrade_verify}
