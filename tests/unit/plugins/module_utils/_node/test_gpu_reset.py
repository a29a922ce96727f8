# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's GPU reset (gpu_reset): nvidia-smi's answers as NVIDIA's trackers record them, the refusal
when compute processes run, bounded tries while the GPU is in use, no retry when the reset is not supported."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_reset as gr

U0, U1 = 'GPU-b3452919-409d-74ec-138a-6dfdff94f611', 'GPU-2b1c7a2e-5d3f-4a8e-9c11-0f6e3a9d2b40'
OK = 'GPU 00000000:07:00.0 was successfully reset.\nAll done.\n'
IN_USE = ('GPU 00000000:07:00.0 is currently in use by another process.\n\n1 device is currently being used by one or '
          'more other processes (e.g., Fabric Manager, CUDA application, ...). Please first kill all processes using '
          'this device and all compute applications running in the system.\n')
NOT_SUPPORTED = '\nResetting GPU 00000000:00:04.0 is not supported.\n'


class Smi(object):
    """nvidia-smi answering from a script: apps (the --query-compute-apps lines), then per -r call the next answer."""

    def __init__(self, answers, apps=''):
        self.answers = list(answers)
        self.apps = apps
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[1].startswith('--query-compute-apps'):
            return 0, self.apps, ''
        return self.answers.pop(0)


@pytest.mark.parametrize('rc,out,err,result', [
    (0, OK, '', gr.RESET_OK),
    (255, IN_USE, '', gr.IN_USE),
    (255, '', 'GPU 00000000:01:00.0: In use by another client\n', gr.IN_USE),
    (3, NOT_SUPPORTED, '', gr.NOT_SUPPORTED),
    (15, 'GPU 00000000:07:00.0: Unknown Error\n', '', gr.ERROR),
])
def test_REM_10_classify_nvidia_smi_answers(rc, out, err, result):
    assert gr.classify(rc, out, err) == result


def test_REM_10_bounded_tries_while_in_use_then_success():
    smi = Smi([(255, IN_USE, ''), (0, OK, '')])
    slept = []
    res = gr.reset_gpus(smi, [U0], '/usr/bin/nvidia-smi', tries=3, delay=7, sleep=slept.append)
    assert res == [{'uuid': U0, 'result': 'reset', 'tries': 2, 'message': OK.strip()}]
    assert slept == [7] and smi.calls[1] == ['/usr/bin/nvidia-smi', '-r', '-i', U0]


def test_REM_10_in_use_every_time_stops_after_tries_and_not_supported_is_not_retried():
    smi = Smi([(255, IN_USE, '')] * 3 + [(3, NOT_SUPPORTED, '')])
    res = gr.reset_gpus(smi, [U0, U1], 'nvidia-smi', tries=3, delay=0, sleep=lambda s: None)
    assert [(r['result'], r['tries']) for r in res] == [('in_use', 3), ('not_supported', 1)]


def test_REM_10_compute_processes_refuse_and_check_mode_runs_no_reset():
    smi = Smi([], apps='%s, 4242, python3\n' % U0)
    res = gr.reset_gpus(smi, [U0, U1], 'nvidia-smi', check_mode=True)
    assert [r['result'] for r in res] == ['processes', 'would_reset'] and '4242 (python3)' in res[0]['message']
    assert len(smi.calls) == 1


def test_REM_10_bad_input_before_any_call():
    smi = Smi([])
    with pytest.raises(gr.ResetError, match="uuids: 'MIG-1' is not a GPU UUID"):
        gr.reset_gpus(smi, ['MIG-1'], 'nvidia-smi')
    with pytest.raises(gr.ResetError, match='tries must be 1 or more'):
        gr.reset_gpus(smi, [U0], 'nvidia-smi', tries=0)
    assert smi.calls == []
