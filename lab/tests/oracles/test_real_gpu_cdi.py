"""nvidia-ctk on a real GPU: what the lab's nvidia-ctk build (lab/go/nvidia-ctk, NVIDIA/nvidia-container-toolkit
v1.20.0) generated on a real H100 (driver 580.159.04, VM passthrough, MIG off) in the read-only device run of
2026-11-27 (lab/realgpu/device-run.sh; lab/realgpu/samples/h100-580/check-2026-11-27), beside gpu_info and the
doctor of the same run. The same assertions test_nvidia_ctk.py's NCT-17 makes on the NVML simulator hold on the real
driver: kind nvidia.com/gpu, one device per GPU by index and by UUID (gpu_info's UUID), and "all". The real GPU's NVLink
fabric answer (not supported: a PCIe H100 on no NVSwitch) gives no fabric finding, as the simulator's default does.
Run: .venv/bin/pytest -q lab/tests/oracles/test_real_gpu_cdi.py
"""
import json
import os

import yaml

from oracle_util import ROOT

CHECK = os.path.join(ROOT, 'lab', 'realgpu', 'samples', 'h100-580', 'check-2026-11-27')


def _json(name):
    with open(os.path.join(CHECK, name)) as f:
        return json.load(f)


def test_real_h100_cdi_spec_names_the_gpu_as_the_collection_expects():
    with open(os.path.join(CHECK, 'nvidia-ctk-cdi-generate.yaml')) as f:
        spec = yaml.safe_load(f)
    with open(os.path.join(CHECK, 'nvidia-ctk-version.txt')) as f:
        assert 'version 1.20.0' in f.read()
    info = _json('gpu_info.json')
    assert spec['kind'] == 'nvidia.com/gpu'
    gpus = info['gpus']
    expected = sorted([str(g['index']) for g in gpus] + [g['uuid'] for g in gpus] + ['all'])
    assert sorted(d['name'] for d in spec['devices']) == expected
    nodes = dict((d['name'], [n['path'] for n in d['containerEdits']['deviceNodes']]) for d in spec['devices'])
    for g in gpus:
        assert nodes[str(g['index'])] == nodes[g['uuid']]
    common = [n['path'] for n in spec['containerEdits']['deviceNodes']]
    assert '/dev/nvidiactl' in common


def test_real_h100_fabric_not_supported_gives_no_finding():
    answer = _json('gpu_doctor-exclusive.json')
    assert answer['probe']['gpus'][0]['health']['fabric']['state'] == 'not_supported'
    assert not [f for f in answer['findings'] if f['id'].startswith('fabric')]
    assert [f['id'] for f in answer['findings'] if f['severity'] == 'critical'] == [
        'container_engine_missing', 'nvidia_toolkit_missing']
