# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the doctor answered on a real H100 (driver 580.159.04, VM passthrough, no container engine) in the read-only
real-GPU check of 2026-11-26 (lab/bin/real-gpu-check.sh; fixtures/real_h100_580/check-2026-11-26, one answer per
strategy): the checks judge the facts the real probe gathered exactly as they did there, and the health the probe read
through NVML on the real driver equals what pynvml answered directly in the earlier capture (nvml-health.json)."""
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import NODE_STRATEGIES
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'real_h100_580')
CHECK = os.path.join(FIX, 'check-2026-11-26')


def _answer(strategy):
    with open(os.path.join(CHECK, 'gpu_doctor-%s.json' % strategy)) as f:
        return json.load(f)


def test_every_strategy_was_asked_on_the_real_gpu():
    names = sorted(n[len('gpu_doctor-'):-len('.json')] for n in os.listdir(CHECK) if n.startswith('gpu_doctor-'))
    assert names == sorted(NODE_STRATEGIES)


@pytest.mark.parametrize('strategy', NODE_STRATEGIES)
def test_real_gpu_answer_is_not_ready_and_says_why(strategy):
    answer = _answer(strategy)
    assert answer['healthy'] is False
    critical = [f['id'] for f in answer['findings'] if f['severity'] == 'critical']
    assert critical == ['container_engine_missing', 'nvidia_toolkit_missing']
    assert [f['id'] for f in answer['findings'] if f['severity'] == 'info'] == ['gpu_passthrough']
    assert answer['probe']['node']['hypervisor'] == 'kvm'


@pytest.mark.parametrize('strategy', NODE_STRATEGIES)
def test_checks_judge_the_real_probe_as_they_did_on_the_gpu(strategy):
    answer = _answer(strategy)
    extra = {'kernel_xids': [], 'kernel_log_readable': True}  # the node's kernel log had no Xid (kernel-nvrm.txt)
    found = dc.diagnose(answer['probe'], extra, strategy=strategy)
    assert [(f['id'], f['severity']) for f in found] == [(f['id'], f['severity']) for f in answer['findings']]


def test_real_probe_health_equals_the_raw_nvml_capture():
    health = _answer('exclusive')['probe']['gpus'][0]['health']
    with open(os.path.join(FIX, 'nvml-health.json')) as f:
        raw = json.load(f)
    rows = [int(x) for x in raw['remapped_rows']]
    assert health['remapped_rows'] == {'correctable': rows[0], 'uncorrectable': rows[1], 'pending': bool(rows[2]),
                                       'failure': bool(rows[3])}
    assert health['row_remapper_histogram'] == raw['row_remapper_histogram']
    assert health['ecc_uncorrected_volatile'] == raw['ecc_uncorrected_volatile']
    assert health['ecc_uncorrected_aggregate'] == raw['ecc_uncorrected_aggregate']
    assert health['pcie'] == {'gen': raw['pcie_gen_current'], 'width': raw['pcie_width_current'],
                              'max_gen': raw['pcie_gen_max'], 'max_width': raw['pcie_width_max'],
                              'gpu_max_gen': raw['pcie_gen_gpu_max'], 'replay': raw['pcie_replay_counter']}
    assert health['virtualization_mode'] == nvml_probe.VIRTUALIZATION_MODES[raw['virtualization_mode']]
    assert health['clocks_event_reasons'] == nvml_probe.clock_event_reason_names(raw['clocks_event_reasons'])
