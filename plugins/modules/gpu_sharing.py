#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_sharing
short_description: Set node-side GPU sharing state - persistence and compute mode, MIG mode and geometry, MPS unit
version_added: 0.1.0
description:
  - Sets the persistence mode and the compute mode of NVIDIA GPUs through NVML (the C(pynvml) module of the
    C(nvidia-ml-py) package).
  - Enables or disables MIG mode, and applies a MIG geometry given in the file format of NVIDIA's C(mig-parted)
    (C(version=v1), C(mig-configs)), creating and destroying GPU instances and compute instances so that the GPU
    ends up with exactly the GPU instances listed, each with one compute instance spanning it. A second run changes nothing.
  - Writes a systemd unit for the CUDA MPS control daemon (C(nvidia-cuda-mps-control)) for hosts that run MPS
    outside Kubernetes, and creates its pipe and log directories.
  - The whole request is validated before anything is changed. Every refusal names the GPU, the value and what is
    allowed - unknown MIG profiles, too many instances, geometries that do not fit, MIG on GPUs without MIG, MPS on
    GPUs older than compute capability 7.0, GPU indexes out of range, malformed MIG configurations.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
options:
  gpus:
    description:
      - The GPUs to manage - V(all), NVML indexes (V(0)) or GPU UUIDs (V(GPU-...)).
      - All other options only act on these GPUs. A MIG configuration's C(devices) are matched against all GPUs of
        the node (an index out of range is refused) and then limited to this selection.
    type: list
    elements: str
    default: [all]
  persistence_mode:
    description:
      - Enable (V(true)) or disable (V(false)) persistence mode. Omit to leave it as it is.
      - NVIDIA recommends the C(nvidia-persistenced) daemon over NVML's persistence mode on current drivers;
        this option sets the driver's legacy persistence mode.
    type: bool
  compute_mode:
    description:
      - Compute mode. V(exclusive_process) is usual with MPS, V(prohibited) keeps CUDA off the GPU. Omit to leave it.
    type: str
    choices: [default, exclusive_process, prohibited]
  mig_mode:
    description:
      - Enable or disable MIG mode on the selected MIG-capable GPUs, leaving the MIG geometry alone.
      - V(enabled) on a GPU without MIG is refused; V(disabled) on such a GPU is already true and does nothing.
      - Disabling MIG first destroys the GPU's compute and GPU instances.
      - A mode change usually stays pending until the GPU is reset (see RV(reboot_required)).
    type: str
    choices: [enabled, disabled]
  mig_config:
    description:
      - A MIG configuration in C(mig-parted)'s format, as a dict - C(version=v1) and C(mig-configs), a mapping of
        configuration names to lists of entries. Each entry has C(devices) (V(all) or a list of GPU indexes),
        C(mig-enabled) (bool), C(mig-devices) (a mapping of GPU-instance profile, for example V(1g.10gb) or
        V(MIG 3g.40gb), to a count) and optionally C(device-filter) (PCI device id(s) such as V(0x20B210DE)).
      - The GPUs an entry selects get MIG mode as given and exactly the GPU instances listed, each with one
        compute instance of the full size. GPUs no entry selects are left alone. Compute-instance profiles
        (C(1c.3g.40gb)) are not supported.
      - Profiles, counts and fit are checked against what NVML reports for the GPU; while MIG mode is off,
        against the collection's catalogue of NVIDIA's MIG tables.
      - Mutually exclusive with O(mig_mode).
    type: dict
  mig_config_name:
    description:
      - Which entry of O(mig_config)'s C(mig-configs) to apply, for example V(all-1g.10gb).
      - May be omitted when O(mig_config) holds a single configuration.
    type: str
  mig_busy_timeout:
    description:
      - Before a MIG mode or MIG device change, the module checks that no process runs on the GPUs it changes. With
        processes still there after this many seconds, the run is refused before any change, naming the GPUs and
        the process ids (drain the GPU pods and stop the GPU clients first). V(0) checks once.
    type: int
    default: 0
  mig_verify:
    description:
      - Only compare the selected GPUs with O(mig_config) / O(mig_config_name) (or O(mig_mode)) and change nothing.
      - Fails with a message naming each GPU whose MIG mode or MIG devices differ (for example MIG on but no MIG
        devices after a reboot), and returns RV(mig_match) and RV(mismatches) either way.
      - Not combinable with O(persistence_mode), O(compute_mode) or O(mps).
    type: bool
    default: false
  mps:
    description:
      - The systemd unit for the CUDA MPS control daemon. The module writes the unit and creates the directories;
        it does not run C(systemctl). When RV(mps_unit_changed) is V(true), run C(systemctl daemon-reload) and
        (re)start the unit (for example from a handler).
      - Refused when a selected GPU has compute capability below 7.0; leave such GPUs out with O(gpus).
      - When O(gpus) does not select all GPUs, the unit sets C(CUDA_VISIBLE_DEVICES) to the selected GPUs' UUIDs.
    type: dict
    suboptions:
      state:
        description: V(present) writes the unit, V(absent) removes it (the directories are kept).
        type: str
        choices: [present, absent]
        default: present
      pipe_directory:
        description: C(CUDA_MPS_PIPE_DIRECTORY); clients must use the same value.
        type: path
        default: /tmp/nvidia-mps
      log_directory:
        description: C(CUDA_MPS_LOG_DIRECTORY).
        type: path
        default: /var/log/nvidia-mps
      active_thread_percentage:
        description:
          - Default active thread percentage for MPS servers (1-100), set with the control command
            C(set_default_active_thread_percentage) after the daemon starts. Omit for MPS's default (100).
        type: int
      pinned_device_mem_limit:
        description:
          - Default pinned device memory limit per device, C(DEVICE=SIZE) items separated by commas, for example
            V(0=2G) or V(0=2G,1=4096M), set with C(set_default_device_pinned_mem_limit).
          - DEVICE is the CUDA device ordinal the daemon sees (counted within O(gpus) when that is not V(all)).
        type: str
      unit_path:
        description: Where the unit is written.
        type: path
        default: /etc/systemd/system/nvidia-mps.service
      user:
        description: The user the daemon runs as; the directories are given to this user.
        type: str
        default: root
      control_binary:
        description: Path of C(nvidia-cuda-mps-control).
        type: path
        default: /usr/bin/nvidia-cuda-mps-control
      backup:
        description: Keep a timestamped copy of the previous unit when it is replaced or removed.
        type: bool
        default: false
requirements:
  - nvidia-ml-py (provides C(pynvml)) and a loaded NVIDIA driver on the managed node.
notes:
  - Changing MIG mode normally needs a GPU reset (C(nvidia-smi -r) with no process on the GPU) or a reboot. NVML has
    no reset call and this module does not reset GPUs or reboot; it reports RV(reboot_required) and
    RV(gpu_reset_pending) and does not touch the geometry of a GPU whose MIG mode is pending. Reset or reboot
    (for example with M(ansible.builtin.reboot)) and run the task again to apply the geometry.
  - GPU instances are created largest first at placements the module computes from NVML's possible placements, so
    valid layouts are not lost to fragmentation. GPU instances of wanted profiles that already have exactly one
    full-size compute instance are kept when the rest still fits; otherwise all are rebuilt.
  - Processes using a MIG device that is destroyed lose it; drain the node first.
  - In check mode, a MIG mode change is predicted to stay pending, and the geometry of such a GPU is reported as
    deferred.
seealso:
  - module: gpuops.k8s_gpu.gpu_info
  - name: NVIDIA MIG user guide
    description: MIG profiles, placements and GPU reset.
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
  - name: NVIDIA mig-parted
    description: The MIG configuration file format used by O(mig_config).
    link: https://github.com/NVIDIA/mig-parted
  - name: NVIDIA Multi-Process Service
    description: The MPS control daemon and its commands.
    link: https://docs.nvidia.com/deploy/mps/
'''

EXAMPLES = r'''
- name: Persistence mode on, exclusive-process compute mode on every GPU
  gpuops.k8s_gpu.gpu_sharing:
    persistence_mode: true
    compute_mode: exclusive_process

- name: Seven 1g.10gb MIG devices on every A100 80GB
  gpuops.k8s_gpu.gpu_sharing:
    mig_config:
      version: v1
      mig-configs:
        all-disabled:
          - devices: all
            mig-enabled: false
        all-1g.10gb:
          - device-filter: "0x20B210DE"
            devices: all
            mig-enabled: true
            mig-devices:
              "1g.10gb": 7
        mixed:
          - devices: [0, 1]
            mig-enabled: true
            mig-devices:
              "3g.40gb": 1
              "2g.20gb": 1
              "1g.10gb": 2
    mig_config_name: all-1g.10gb
  register: mig

- name: Reset the GPUs by rebooting when enabling MIG is pending
  ansible.builtin.reboot:
  when: mig.reboot_required

- name: Apply the geometry after the reboot
  gpuops.k8s_gpu.gpu_sharing:
    mig_config: "{{ lookup('ansible.builtin.file', 'mig-config.yaml') | from_yaml }}"
    mig_config_name: all-1g.10gb

- name: After a reboot, check that the MIG devices are the pool's geometry (changes nothing)
  gpuops.k8s_gpu.gpu_sharing:
    mig_config: "{{ lookup('ansible.builtin.file', 'mig-config.yaml') | from_yaml }}"
    mig_config_name: all-1g.10gb
    mig_verify: true

- name: MPS control daemon unit for the GPUs 0 and 1
  gpuops.k8s_gpu.gpu_sharing:
    gpus: [0, 1]
    compute_mode: exclusive_process
    mps:
      active_thread_percentage: 50
      pinned_device_mem_limit: "0=8G,1=8G"
  notify: Restart MPS   # a handler running systemctl daemon-reload and restarting nvidia-mps.service
'''

RETURN = r'''
actions:
  description: What was done (or, in check mode, would be done), one line per change, in order.
  returned: always
  type: list
  elements: str
  sample:
    - "GPU 0: destroy compute instance 1g.10gb (id 0) in GPU instance 1g.10gb (id 7)"
    - "GPU 0: destroy GPU instance 1g.10gb (id 7, placement 0)"
    - "GPU 0: create GPU instance 3g.40gb at placement 0 with compute instance 3g.40gb"
gpus:
  description:
    - The selected GPUs after the run (predicted in check mode).
    - C(mig_devices) counts GPU instances with one full-size compute instance per profile;
      C(mig_instances) describes every GPU instance as C(profile@placement [compute instances]).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA A100-SXM4-80GB
      uuid: GPU-b3452919-409d-74ec-138a-6dfdff94f611
      compute_capability: '8.0'
      persistence_mode: true
      compute_mode: default
      mig_capable: true
      mig_current: true
      mig_pending: true
      mig_devices: {3g.40gb: 2}
      mig_instances: ['3g.40gb@0 [3g.40gb]', '3g.40gb@4 [3g.40gb]']
reboot_required:
  description: V(true) when a selected GPU's MIG mode change is pending until a GPU reset or reboot.
  returned: always
  type: bool
  sample: true
gpu_reset_pending:
  description: Indexes of the selected GPUs whose MIG mode is pending.
  returned: always
  type: list
  elements: int
  sample: [0, 1]
mps_unit_changed:
  description: V(true) when the MPS unit was written or removed (reload systemd and restart the unit then).
  returned: always
  type: bool
  sample: false
mps_unit_path:
  description: Path of the MPS unit.
  returned: when O(mps) is given
  type: str
  sample: /etc/systemd/system/nvidia-mps.service
backup_file:
  description: The copy of the previous MPS unit.
  returned: when O(mps.backup=true) and the unit was replaced or removed
  type: str
  sample: /etc/systemd/system/nvidia-mps.service.12345.2026-11-23@10:00:00~
mig_match:
  description: With O(mig_verify=true), V(true) when every selected GPU has the wanted MIG mode and MIG devices.
  returned: when O(mig_verify=true)
  type: bool
  sample: false
mismatches:
  description: With O(mig_verify=true), one line per difference found.
  returned: when O(mig_verify=true)
  type: list
  elements: str
  sample:
    - "GPU 0 (NVIDIA A100-SXM4-80GB): MIG devices are no MIG devices, the geometry wants 7x 1g.10gb"
mismatched_gpus:
  description:
    - With O(mig_verify=true), one entry per GPU that differs - C(index), C(uuid), C(name), C(mig_capable),
      C(mig_current), C(mig_devices) (profile to count it has), C(wanted_mig_enabled), C(wanted_mig_devices) (profile
      to count wanted, null when the geometry is left alone) and C(problems) (its lines of RV(mismatches)).
  returned: when O(mig_verify=true)
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-b3452919-409d-74ec-138a-6dfdff94f611
      name: NVIDIA A100-SXM4-80GB
      mig_capable: true
      mig_current: true
      mig_devices: {}
      wanted_mig_enabled: true
      wanted_mig_devices: {1g.10gb: 7}
      problems: ["GPU 0 (NVIDIA A100-SXM4-80GB): MIG devices are no MIG devices, the geometry wants 7x 1g.10gb"]
diff:
  description: Before and after - the selected GPUs' state, and the MPS unit's text when O(mps) is given.
  returned: always
  type: list
  elements: dict
'''

from typing import Any

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_engine as engine
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_nvml as nvml
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import read_bytes, replace_file
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.nvml_probe import failure_reason

MPS_SPEC = dict(
    state=dict(type='str', choices=['present', 'absent'], default='present'),
    pipe_directory=dict(type='path', default='/tmp/nvidia-mps'),
    log_directory=dict(type='path', default='/var/log/nvidia-mps'),
    active_thread_percentage=dict(type='int'),
    pinned_device_mem_limit=dict(type='str'),
    unit_path=dict(type='path', default='/etc/systemd/system/nvidia-mps.service'),
    user=dict(type='str', default='root'),
    control_binary=dict(type='path', default='/usr/bin/nvidia-cuda-mps-control'),
    backup=dict(type='bool', default=False),
)


def manage_mps(module: AnsibleModule, mps: dict[str, Any], result: dict[str, Any]) -> None:
    """Write or remove the MPS unit and create its directories. Updates ``result`` in place."""
    path = mps['unit_path']
    result['mps_unit_path'] = path
    current = read_bytes(path)
    current = None if current is None else to_text(current, errors='surrogate_or_strict')
    want = mps['content']
    actions = result['actions']
    unit_changed = False
    if mps['state'] == 'present':
        for directory in (mps['pipe_directory'], mps['log_directory']):
            if not os.path.isdir(directory):
                actions.append('create directory %s' % directory)
                result['changed'] = True
                if not module.check_mode:
                    os.makedirs(directory, 0o755)
            if not module.check_mode and os.path.isdir(directory):
                result['changed'] = module.set_owner_if_different(directory, mps['user'], result['changed'])
        if current != want:
            unit_changed = True
            actions.append('%s MPS unit %s' % ('write' if current is None else 'update', path))
            if not module.check_mode:
                backup_file = replace_file(module, path, to_bytes(want), backup=mps['backup'])
                if backup_file:
                    result['backup_file'] = backup_file
    elif current is not None:
        unit_changed = True
        actions.append('remove MPS unit %s' % path)
        if not module.check_mode:
            backup_file = replace_file(module, path, None, backup=mps['backup'])
            if backup_file:
                result['backup_file'] = backup_file
    result['mps_unit_changed'] = unit_changed
    result['changed'] = result['changed'] or unit_changed
    result['diff'].append({'before_header': path, 'after_header': path,
                           'before': current or '', 'after': want or ''})


def verify(module: AnsibleModule, backend: Any) -> None:
    """O(mig_verify): compare, never change; exits the module."""
    if module.params['mig_config'] is None and module.params['mig_mode'] is None:
        backend.shutdown()
        module.fail_json(msg='mig_verify needs mig_config (with mig_config_name) or mig_mode to compare with')
    try:
        result = engine.verify(backend, module.params)
    except SharingError as exc:
        module.fail_json(msg=str(exc), changed=False)
    except nvml.pynvml.NVMLError as exc:
        module.fail_json(msg='NVML failed while reading the GPUs: %s' % exc, nvml_status=failure_reason(exc), changed=False)
    finally:
        backend.shutdown()
    if result['mismatches']:
        module.fail_json(msg='MIG state differs from the wanted geometry: %s' % '; '.join(result['mismatches']),
                         changed=False, **result)
    module.exit_json(changed=False, **result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type='list', elements='str', default=['all']),
            persistence_mode=dict(type='bool'),
            compute_mode=dict(type='str', choices=['default', 'exclusive_process', 'prohibited']),
            mig_mode=dict(type='str', choices=['enabled', 'disabled']),
            mig_config=dict(type='dict'),
            mig_config_name=dict(type='str'),
            mps=dict(type='dict', options=MPS_SPEC),
            mig_verify=dict(type='bool', default=False),
            mig_busy_timeout=dict(type='int', default=0),
        ),
        mutually_exclusive=[('mig_mode', 'mig_config'), ('mig_verify', 'persistence_mode'), ('mig_verify', 'compute_mode'),
                            ('mig_verify', 'mps')],
        required_by={'mig_config_name': 'mig_config'},
        supports_check_mode=True,
    )
    if not nvml.HAS_PYNVML:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py'), exception=nvml.PYNVML_IMPORT_ERROR)

    backend = nvml.NvmlBackend()
    try:
        backend.init()
    except nvml.pynvml.NVMLError as exc:
        module.fail_json(msg='NVML could not be initialised: %s' % exc, nvml_status=failure_reason(exc))
    if module.params['mig_verify']:
        verify(module, backend)
    try:
        result = engine.run(backend, module.params, module.check_mode)
    except SharingError as exc:
        module.fail_json(msg=str(exc), changed=False, actions=[])
    except engine.ApplyError as exc:
        module.fail_json(msg=str(exc), changed=bool(exc.done), actions=exc.done)
    except nvml.pynvml.NVMLError as exc:
        module.fail_json(msg='NVML failed while reading the GPUs: %s' % exc, nvml_status=failure_reason(exc),
                         changed=False, actions=[])
    finally:
        backend.shutdown()

    for warning in result.pop('warnings'):
        module.warn(warning)
    mps = result.pop('mps')
    result['diff'] = [result['diff']]
    result['mps_unit_changed'] = False
    if mps is not None:
        manage_mps(module, mps, result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
