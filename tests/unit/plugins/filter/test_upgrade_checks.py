# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters behind playbooks/upgrade_driver.yml's stop decisions: pods left after a drain, problems after the
upgrade (driver, GPU count, NVML, fabricmanager, a MIG pool's geometry)."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter.upgrade_pods_left import upgrade_pods_left, FilterModule as PodsFM
from ansible_collections.gpuops.k8s_gpu.plugins.filter.upgrade_verify import (
    upgrade_verify, FilterModule as VerifyFM)


def pod(name, phase='Running', owner=None, annotations=None, deleting=False):
    meta = {'name': name, 'namespace': 'ns'}
    if owner:
        meta['ownerReferences'] = [{'kind': owner, 'name': 'x', 'controller': True}]
    if annotations:
        meta['annotations'] = annotations
    if deleting:
        meta['deletionTimestamp'] = '2026-11-24T00:00:00Z'
    return {'metadata': meta, 'status': {'phase': phase}}


def test_UPG_02_a_pod_being_deleted_still_holds_the_node():
    pods = [pod('held', owner='ReplicaSet', deleting=True), pod('done', 'Succeeded', 'Job'),
            pod('failed', 'Failed', 'Job'), pod('ds', owner='DaemonSet'),
            pod('static', annotations={'kubernetes.io/config.mirror': 'abc'}), pod('bare'), pod('pending', 'Pending')]
    assert upgrade_pods_left(pods) == ['ns/bare', 'ns/held', 'ns/pending']
    assert upgrade_pods_left(pods, False) == ['ns/bare', 'ns/ds', 'ns/held', 'ns/pending']
    assert upgrade_pods_left([]) == []
    assert PodsFM().filters()['upgrade_pods_left'] is upgrade_pods_left


def test_UPG_02_pods_left_refuses_what_is_not_a_list():
    with pytest.raises(AnsibleFilterError, match='expected a list of pods'):
        upgrade_pods_left({'resources': []})


def after(status='ok', version='550.90.07', count=1, gpus=None, node=None):
    return {'nvml': {'status': status, 'driver_version': version}, 'gpu_count': count,
            'gpus': gpus if gpus is not None else [{'index': 0, 'uuid': 'GPU-0', 'mig_capable': False}],
            'node': node or {}}


def mig_gpu(index, profiles, current=True, capable=True, want=None):
    """One entry of gpu_sharing mig_verify's mismatched_gpus."""
    have = {}
    for p in profiles:
        have[p] = have.get(p, 0) + 1
    return {'index': index, 'uuid': 'GPU-%d' % index, 'name': 'NVIDIA H100 80GB HBM3', 'mig_capable': capable,
            'mig_current': current, 'mig_devices': have, 'wanted_mig_enabled': True,
            'wanted_mig_devices': want, 'problems': ['GPU %d differs' % index]}


def mig_check(*mismatched):
    return {'changed': False, 'mig_match': not mismatched, 'mismatches': ['x'] * len(mismatched),
            'mismatched_gpus': list(mismatched)}


EXPECT = {'driver_version': '550.90.07', 'gpu_count': 1}


def test_UPG_05_a_node_as_expected_has_no_problem():
    assert upgrade_verify(after(), EXPECT) == []
    assert VerifyFM().filters()['upgrade_verify'] is upgrade_verify


def test_UPG_05_driver_version_gpu_count_and_nvml_are_checked():
    assert upgrade_verify(after(version='550.54.15'), EXPECT) == ['the driver is 550.54.15, not 550.90.07']
    assert upgrade_verify(after(count=0, gpus=[]), EXPECT) == ['0 GPU(s) seen, 1 before the upgrade']
    probs = upgrade_verify(dict(after(status='driver_not_loaded'), nvml={'status': 'driver_not_loaded', 'error': 'x'}),
                           EXPECT)
    assert probs == ['NVML does not work (status "driver_not_loaded": x)']


def test_UPG_06_fabricmanager_must_be_active_on_nvswitch_nodes():
    node = {'fabricmanager_required': True, 'nvswitch_count': 4}
    assert upgrade_verify(after(node=node), dict(EXPECT, fabricmanager_active=False)) == \
        ['4 NVSwitch(es) but nvidia-fabricmanager is not active']
    assert upgrade_verify(after(node=node), dict(EXPECT, fabricmanager_active=True)) == []
    # no NVSwitch: fabricmanager is not needed, whatever its state
    assert upgrade_verify(after(), dict(EXPECT, fabricmanager_active=False)) == []


def test_UPG_04_mig_node_with_no_mig_devices_fails():
    want = {'3g.40gb': 2}
    expect = dict(EXPECT, gpu_count=2, mig_verify=mig_check())
    assert upgrade_verify(after(count=2), expect) == []
    gone = mig_check(mig_gpu(0, [], want=want))
    assert upgrade_verify(after(count=2), dict(expect, mig_verify=gone)) == \
        ['GPU 0 (GPU-0) has MIG devices none, the pool geometry is 2x 3g.40gb']


def test_UPG_04_mig_mode_off_other_geometry_and_not_capable_fail():
    want = {'1g.10gb': 7}
    check = mig_check(mig_gpu(0, ['1g.10gb'] * 7, current=False, want=want), mig_gpu(1, ['3g.40gb', '1g.10gb'], want=want),
                      dict(mig_gpu(2, [], capable=False, want=want), mig_current=None))
    expect = dict(EXPECT, gpu_count=3, mig_verify=check)
    assert upgrade_verify(after(count=3), expect) == [
        'GPU 0 (GPU-0) has MIG mode off, the pool needs MIG devices 7x 1g.10gb',
        'GPU 1 (GPU-1) has MIG devices 1x 1g.10gb, 1x 3g.40gb, the pool geometry is 7x 1g.10gb',
        'GPU 2 (GPU-2) is not MIG capable, the pool needs MIG devices 7x 1g.10gb']
    # not a MIG pool: MIG devices are not looked at; NVML down: only NVML is reported
    assert upgrade_verify(after(count=3), dict(EXPECT, gpu_count=3)) == []
    assert upgrade_verify(after(status='error', count=3), expect) == ['NVML does not work (status "error")']


def test_UPG_04_mig_check_that_could_not_run_or_was_skipped():
    failed = {'failed': True, 'msg': 'NVML failed while reading the GPUs: x'}
    assert upgrade_verify(after(), dict(EXPECT, mig_verify=failed)) == [
        'the MIG check could not run: NVML failed while reading the GPUs: x']
    assert upgrade_verify(after(), dict(EXPECT, mig_verify={'skipped': True, 'changed': False})) == []
    with pytest.raises(AnsibleFilterError, match='mig_verify must be'):
        upgrade_verify(after(), dict(EXPECT, mig_verify=['x']))


def test_UPG_05_bad_input_is_refused():
    with pytest.raises(AnsibleFilterError):
        upgrade_verify([], EXPECT)
