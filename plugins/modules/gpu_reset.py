#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_reset
short_description: Reset GPUs with nvidia-smi, a bounded number of tries
version_added: 0.1.0
description:
  - The repair step of the remediation loop (docs/remediation.md), on the GPU node, after
    M(gpuops.k8s_gpu.gpu_remediation) has quarantined the GPUs and evicted their pods.
  - Runs C(nvidia-smi -r -i <uuid>) per GPU of O(uuids). A GPU on which C(nvidia-smi --query-compute-apps) lists a
    compute process is not reset (RV(results) says C(processes)).
  - While nvidia-smi answers that the GPU is in use by another client (nvidia-persistenced, Fabric Manager, the
    nvidia_drm module, a monitoring agent), it tries again, O(tries) times in all, O(delay) seconds apart; an answer
    that the reset is not supported (a GPU passed through to a VM) or another error is not retried.
  - The module fails when a GPU was not reset, naming each GPU and nvidia-smi's answer; the GPUs then stay
    quarantined.
  - NVML has no public reset call; this module never reboots.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
attributes:
  check_mode:
    details:
      - Only the compute processes are read; RV(results) says C(would_reset) per GPU that would be reset.
  diff_mode:
    support: none
    details:
      - A reset changes no file.
options:
  uuids:
    description: The GPUs to reset, by UUID (C(GPU-...), as C(nvidia-smi -L) prints it).
    type: list
    elements: str
    required: true
  tries:
    description: Attempts per GPU while nvidia-smi answers that the GPU is in use.
    type: int
    default: 3
  delay:
    description: Seconds between two attempts.
    type: int
    default: 5
  nvidia_smi:
    description: The nvidia-smi program (looked up on PATH when it has no slash).
    type: str
    default: nvidia-smi
notes:
  - Needs root on the node.
seealso:
  - module: gpuops.k8s_gpu.gpu_remediation
  - module: gpuops.k8s_gpu.gpu_doctor
'''

EXAMPLES = r'''
- name: Reset the GPUs the doctor says a reset repairs
  gpuops.k8s_gpu.gpu_reset:
    uuids: "{{ doctor.remediation | dict2items | selectattr('value.repair.action', 'equalto', 'reset')
               | selectattr('value.repair.allowed') | map(attribute='key') | list }}"
  become: true
'''

RETURN = r'''
results:
  description: Per GPU - C(uuid), C(result) (V(reset), V(in_use), V(not_supported), V(error), V(processes) or, in check mode,
    V(would_reset)), C(tries) and nvidia-smi's C(message).
  returned: always
  type: list
  elements: dict
  sample: [{uuid: GPU-b3452919-409d-74ec-138a-6dfdff94f611, result: reset, tries: 1,
            message: GPU 00000000:07:00.0 was successfully reset.}]
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_reset


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            uuids=dict(type='list', elements='str', required=True),
            tries=dict(type='int', default=3),
            delay=dict(type='int', default=5),
            nvidia_smi=dict(type='str', default='nvidia-smi'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    smi = p['nvidia_smi']
    if '/' not in smi:
        smi = module.get_bin_path(smi)
        if not smi:
            module.fail_json(msg='nvidia_smi: %r is not on PATH (the NVIDIA driver\'s utilities are needed to reset a '
                             'GPU)' % p['nvidia_smi'])
    try:
        results = gpu_reset.reset_gpus(module.run_command, p['uuids'], smi, p['tries'], p['delay'],
                                       check_mode=module.check_mode)
    except gpu_reset.ResetError as e:
        module.fail_json(msg=str(e))
    done = [r for r in results if r['result'] == gpu_reset.RESET_OK]
    bad = [r for r in results if r['result'] not in (gpu_reset.RESET_OK, 'would_reset')]
    out = dict(changed=bool(done) or (module.check_mode and any(r['result'] == 'would_reset' for r in results)),
               results=results)
    if bad:
        module.fail_json(msg='GPU reset not done for %s' % '; '.join(
            '%s: %s after %d tries (%s)' % (r['uuid'], r['result'], r['tries'], r['message'] or '-') for r in bad), **out)
    module.exit_json(**out)


if __name__ == '__main__':
    main()
