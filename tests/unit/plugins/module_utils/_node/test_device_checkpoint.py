# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubelet's device-manager checkpoint read for the remediation loop's holders (issue #41, REM-13/14): its shape
(k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go), NVIDIA's device plugin ids
(k8s-device-plugin v0.19.1 internal/rm/devices.go), and the module gpu_device_allocations."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import device_checkpoint as dc
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_device_allocations
from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import capture_exit, run_main

G0, G1 = 'GPU-00000000-0000-4000-8000-000000000000', 'GPU-11111111-1111-4111-8111-111111111111'
M0 = 'MIG-aaaaaaaa-0000-4000-8000-000000000000'
GPUS = [{'index': 0, 'uuid': G0, 'mig_devices': [{'index': 0, 'uuid': M0}]}, {'index': 1, 'uuid': G1}]


def entry(uid, resource, ids, container='main'):
    return {'PodUID': uid, 'ContainerName': container, 'ResourceName': resource, 'DeviceIDs': ids,
            'AllocResp': 'Cg4KBA=='}


def checkpoint(entries, registered=None):
    return {'Data': {'PodDeviceEntries': entries, 'RegisteredDevices': registered or {}}, 'Checksum': 12345}


def test_REM_13_per_numa_ids_uuids_replicas_and_other_resources():
    data = checkpoint([entry('u-a', 'nvidia.com/gpu', {'0': [G0]}),
                       entry('u-b', 'nvidia.com/gpu', {'0': [G1 + '::2'], '1': [G1 + '::0']}, 'c1'),
                       entry('u-b', 'nvidia.com/gpu', {'0': [G1 + '::1']}, 'c2'),
                       entry('u-c', 'example.com/nic', {'0': ['nic-0']})],
                      {'nvidia.com/gpu': [G1, G0], 'example.com/nic': ['nic-0']})
    allocs, unmapped = dc.allocations(data)
    assert allocs == [
        {'pod_uid': 'u-a', 'containers': ['main'], 'resources': ['nvidia.com/gpu'], 'device_ids': [G0], 'devices': [G0]},
        {'pod_uid': 'u-b', 'containers': ['c1', 'c2'], 'resources': ['nvidia.com/gpu'],
         'device_ids': [G1 + '::0', G1 + '::1', G1 + '::2'], 'devices': [G1]}]
    assert unmapped == []
    assert dc.registered(data) == {'nvidia.com/gpu': [G0, G1]}
    assert [a['pod_uid'] for a in dc.allocations(data, prefix='example.com/')[0]] == ['u-c']


def test_REM_13_old_list_ids_mig_uuid_and_index_ids_need_the_gpu_facts():
    data = checkpoint([entry('u-m', 'nvidia.com/mig-1g.10gb', [M0]), entry('u-i', 'nvidia.com/gpu', ['1']),
                       entry('u-j', 'nvidia.com/gpu', ['0:0'])])
    allocs, unmapped = dc.allocations(data)
    assert unmapped == ['0:0', '1', M0]
    assert [a['devices'] for a in allocs] == [[], [], [M0]]      # the MIG device named, its GPU not
    allocs, unmapped = dc.allocations(data, GPUS)
    assert unmapped == []
    assert dict((a['pod_uid'], a['devices']) for a in allocs) == {'u-i': [G1], 'u-j': [G0], 'u-m': [G0, M0]}


def test_REM_13_read_missing_bad_and_the_real_file(tmp_path):
    assert dc.read(str(tmp_path)) is None
    (tmp_path / 'device-plugins').mkdir()
    path = tmp_path / 'device-plugins' / 'kubelet_internal_checkpoint'
    path.write_text('{not json')
    with pytest.raises(dc.CheckpointError, match='not the kubelet.s device-manager checkpoint'):
        dc.read(str(tmp_path))
    path.write_text('[]')
    with pytest.raises(dc.CheckpointError, match='no Data object'):
        dc.read(str(tmp_path))
    path.write_text(json.dumps(checkpoint([entry('u-a', 'nvidia.com/gpu', {'0': [G0]})])))
    assert dc.read(str(tmp_path))['Data']['PodDeviceEntries'][0]['PodUID'] == 'u-a'


@pytest.fixture
def run(monkeypatch):
    capture_exit(monkeypatch)
    return lambda args: run_main(gpu_device_allocations.main, args)


def test_REM_13_module_reads_and_changes_nothing(run, tmp_path):
    out = run({'kubelet_root_dir': str(tmp_path)})
    assert out['failed'] is False and out['changed'] is False and out['found'] is False and out['allocations'] == []
    (tmp_path / 'device-plugins').mkdir()
    path = tmp_path / 'device-plugins' / 'kubelet_internal_checkpoint'
    path.write_text(json.dumps(checkpoint([entry('u-m', 'nvidia.com/gpu', {'0': [M0]})], {'nvidia.com/gpu': [M0]})))
    before = path.read_text()
    out = run({'kubelet_root_dir': str(tmp_path), 'gpus': GPUS, '_ansible_check_mode': True})
    assert out['found'] is True and out['allocations'][0]['devices'] == [G0, M0] and out['unmapped'] == []
    assert out['registered'] == {'nvidia.com/gpu': [M0]} and path.read_text() == before
    out = run({'kubelet_root_dir': str(tmp_path / 'nope')})
    assert out['failed'] is True and out['msg'].startswith("kubelet_root_dir: '%s' is not a directory" % (tmp_path / 'nope'))
    path.write_text('x')
    out = run({'kubelet_root_dir': str(tmp_path)})
    assert out['failed'] is True and 'kubelet_internal_checkpoint: not the kubelet' in out['msg']
