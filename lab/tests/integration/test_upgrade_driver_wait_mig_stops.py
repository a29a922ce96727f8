"""playbooks/upgrade_driver.yml in the lab (lab/tests/upgrade_lab.py): the roll stops at node 2 when its GPU jobs
outlive their wait (UPG-03, with a GPU-pods-only drain by pod selector, then resumed) and when its MIG devices are gone
after the "reboot" (UPG-04); node 2 stays cordoned, node 1 rolled, node 3 untouched. Its own lab, so that it runs next
to test_upgrade_driver.py and test_upgrade_driver_drain_stops.py on another xdist worker.

Run: .venv/bin/pytest -q lab/tests/integration/test_upgrade_driver_wait_mig_stops.py   (needs root, dockerd, the node image)
"""
import pytest

from conftest import emulator_get
from upgrade_lab import (NEW, NODES, api, assert_stopped_at_node_2, dexec, failures, installer_log, k8s_pods, make_lab,
                         node_events, pod, reported_version, roll, stand_down, upgrade)


@pytest.fixture(scope='module')
def lab(tmp_path_factory, collections_path):
    yield from make_lab(tmp_path_factory, collections_path, 'upg-wait')


def test_UPG_03_gpu_pods_only_drain_and_wait_for_jobs_timeout_stops_the_roll(lab):
    """A pod selector drains only the GPU pods; GPU jobs still running after their wait stop the roll (on_timeout=stop)."""
    emu = lab['emu']
    stand_down(lab)
    n2 = NODES[1][2]
    api(emu, 'POST', '/api/v1/namespaces/default/pods', pod('web-%s' % n2, n2, 'ReplicaSet', {'app': 'web'}))
    api(emu, 'POST', '/api/v1/namespaces/default/pods', pod('job-%s' % n2, n2, 'Job', {'gpuops.io/gpu-job': 'true'}))
    api(emu, 'POST', '/api/v1/namespaces/default/pods', pod('done-%s' % NODES[0][2], NODES[0][2], 'Job', {'gpuops.io/gpu-job': 'true'}))
    api(emu, 'PATCH', '/api/v1/namespaces/default/pods/done-%s/status' % NODES[0][2], {'status': {'phase': 'Succeeded'}},
        'application/merge-patch+json')
    installs = installer_log(lab, NODES[1][0])
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab, '-e', 'gpuops_upgrade_drain_pod_selector=app=train-%s,app!=web' % n2,
                      '-e', 'gpuops_upgrade_wait_for_jobs_pod_selector=gpuops.io/gpu-job=true',
                      '-e', 'gpuops_upgrade_wait_for_jobs_timeout=2', '-e', 'gpuops_upgrade_poll_interval=1',
                      '-e', 'gpuops_upgrade_wait_for_jobs_on_timeout=stop')
    assert rc != 0
    msg = failures(doc)
    assert 'GPU jobs still run after 2s' in msg and 'default/job-%s' % n2 in msg and 'stays cordoned' in msg, msg
    # node 1: its finished job does not hold it, the selector drains nothing there (no GPU pod matches)
    n1 = NODES[0][2]
    marks = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    assert marks == [('mark', n1), ('cordon', n1), ('uncordon', n1), ('unmark', n1), ('mark', n2), ('cordon', n2)], marks
    assert (n2, 'web-%s' % n2) in k8s_pods(emu) and (n1, 'train-%s' % n1) in k8s_pods(emu)
    assert installer_log(lab, NODES[1][0]) == installs
    # the job ends: the resumed roll drains only the selected GPU pod on node 2 (web stays), and goes on
    api(emu, 'DELETE', '/api/v1/namespaces/default/pods/job-%s' % n2)
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab, '-e', 'gpuops_upgrade_drain_pod_selector=app=train-%s' % n2,
                      '-e', 'gpuops_upgrade_wait_for_jobs_pod_selector=gpuops.io/gpu-job=true',
                      '-e', 'gpuops_upgrade_wait_for_jobs_timeout=2', '-e', 'gpuops_upgrade_poll_interval=1',
                      '-e', 'gpuops_upgrade_wait_for_jobs_on_timeout=stop')
    assert rc == 0, failures(doc)
    marks = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    n3 = NODES[2][2]
    # node 2 resumes (already marked with this version and cordoned: neither is written again): only its selected
    # GPU pod is evicted
    assert marks[:3] == [('evict', 'train-%s' % n2), ('uncordon', n2), ('unmark', n2)], marks
    assert marks[3:] == [('mark', n3), ('cordon', n3), ('uncordon', n3), ('unmark', n3)], marks
    assert (n2, 'web-%s' % n2) in k8s_pods(emu) and (n3, 'train-%s' % n3) in k8s_pods(emu)


def test_UPG_04_mig_node_without_its_mig_devices_after_the_reboot_stops_the_roll(lab):
    """The defect: a MIG node that came back with MIG mode on and no MIG devices passed the verification."""
    emu = lab['emu']
    stand_down(lab)
    n2 = NODES[1][2]
    dexec(lab['containers'][NODES[1][0]], 'touch', '/etc/gpuops-lab/drop-mig-instances')
    since = emulator_get(emu, '/_emulator/requests')['seq']
    try:
        rc, doc = upgrade(lab)
    finally:
        dexec(lab['containers'][NODES[1][0]], 'rm', '-f', '/etc/gpuops-lab/drop-mig-instances')
    assert rc != 0
    msg = failures(doc)
    assert 'failed verification' in msg and 'has MIG devices none, the pool geometry is 2x 3g.40gb' in msg, msg
    assert_stopped_at_node_2(lab, doc, since, roll(n2)[:3], None)
    assert reported_version(lab, NODES[1][0]) == NEW
    stand_down(lab)
