"""playbooks/upgrade_driver.yml in the lab (lab/tests/upgrade_lab.py): a drain that cannot finish stops the roll at
node 2 - an eviction a PodDisruptionBudget refuses (UPG-01), a pod a finalizer holds past the drain timeout (UPG-02) -
the node cordoned with its driver untouched, node 1 rolled, node 3 untouched; and a node an operator cordoned before
the roll stays cordoned after its upgrade (UPG-09). Its own lab, so that it runs next to
test_upgrade_driver.py and test_upgrade_driver_wait_mig_stops.py on another xdist worker.

Run: .venv/bin/pytest -q lab/tests/integration/test_upgrade_driver_drain_stops.py   (needs root, dockerd, the node image)
"""
import pytest

from conftest import emulator_get
from upgrade_lab import (NEW, NODES, api, assert_stopped_at_node_2, failures, installer_log, k8s_nodes, make_lab,
                         node_events, pod, reported_version, roll, stand_down, upgrade)


@pytest.fixture(scope='module')
def lab(tmp_path_factory, collections_path):
    yield from make_lab(tmp_path_factory, collections_path, 'upg-drain')


def test_UPG_01_drain_refused_by_a_disruption_budget_stops_the_roll(lab):
    emu = lab['emu']
    stand_down(lab)
    n1, n2 = NODES[0][2], NODES[1][2]
    api(emu, 'POST', '/apis/policy/v1/namespaces/default/poddisruptionbudgets',
        {'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget',
         'metadata': {'name': 'train-%s' % n2, 'namespace': 'default'},
         'spec': {'maxUnavailable': 0, 'selector': {'matchLabels': {'app': 'train-%s' % n2}}}})
    installs = installer_log(lab, NODES[1][0])
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab, '-e', 'gpuops_upgrade_drain_timeout=2', '-e', 'gpuops_upgrade_poll_interval=1')
    assert rc != 0
    msg = failures(doc)
    assert 'the drain did not finish' in msg and 'disruption budget' in msg and 'stays cordoned' in msg, msg
    assert 'default/train-%s (eviction refused: PodDisruptionBudget)' % n2 in msg, msg
    # the refused eviction (429) is tried again until the drain timeout (as kubectl drain does), and the refused
    # evictions are the last writes for node 2
    events = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    retries = len(events) - len(roll(n1)) - 2
    assert retries >= 2, events
    assert_stopped_at_node_2(lab, doc, since, [('mark', n2), ('cordon', n2)] + [('evict', 'train-%s' % n2)] * retries,
                             installs)


def test_UPG_02_drain_that_times_out_stops_the_roll(lab):
    """The defect: k8s_drain only warns when its wait runs out, and the driver was swapped under the pod."""
    emu = lab['emu']
    stand_down(lab)
    n2 = NODES[1][2]
    held = pod('held-%s' % n2, n2, 'ReplicaSet')
    held['metadata']['finalizers'] = ['gpuops.io/lab-hold']  # evicted, but it stays (terminating) until released
    api(emu, 'POST', '/api/v1/namespaces/default/pods', held)
    installs = installer_log(lab, NODES[1][0])
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab, '-e', 'gpuops_upgrade_drain_timeout=3', '-e', 'gpuops_upgrade_poll_interval=1')
    assert rc != 0
    msg = failures(doc)
    assert 'the drain did not finish' in msg and 'default/held-%s' % n2 in msg and 'after 3s' in msg, msg
    assert_stopped_at_node_2(lab, doc, since, [('mark', n2), ('cordon', n2), ('evict', 'held-%s' % n2),
                                               ('evict', 'train-%s' % n2)], installs)


def test_UPG_09_a_node_cordoned_before_the_roll_stays_cordoned(lab):
    """The defect: the playbook uncordoned every node after its upgrade, also one an operator had cordoned before."""
    emu = lab['emu']
    stand_down(lab)
    n1, n2, n3 = [n for _h, _i, n in NODES]
    api(emu, 'PATCH', '/api/v1/nodes/%s' % n3, {'spec': {'unschedulable': True}}, 'application/merge-patch+json')
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab)
    assert rc == 0, failures(doc)
    marks = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    # node 3: marked, drained and upgraded, neither cordoned nor uncordoned by the roll
    assert marks == roll(n1) + roll(n2) + [('mark', n3), ('evict', 'train-%s' % n3), ('unmark', n3)], marks
    nodes = k8s_nodes(emu)
    assert nodes[n3]['spec'].get('unschedulable') is True
    assert not nodes[n1]['spec'].get('unschedulable') and not nodes[n2]['spec'].get('unschedulable')
    assert all(reported_version(lab, h) == NEW for h, _i, _n in NODES)
