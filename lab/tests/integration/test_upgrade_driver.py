"""playbooks/upgrade_driver.yml end to end in the lab (lab/tests/upgrade_lab.py): the rolling upgrade and its re-run,
a node that fails verification and the re-run that resumes from it, the input check, and the nvidia_driver role's
unhold entry point. The rolls that must stop (a drain that cannot finish, GPU jobs that outlive their wait, MIG devices
gone after the reboot, a node cordoned before the roll) are in test_upgrade_driver_stops.py, with its own lab so that
the two files run on different xdist workers.

What this proves: the roll goes one node at a time (the real API server's audit log orders cordon/evict/uncordon),
pods are evicted through the real eviction API (the ReplicaSet controller replaces them, the DaemonSet pods stay),
nodes are uncordoned, the driver and the version NVML reports change,
a re-run drains nothing and changes nothing, and a node that fails verification stops the roll and stays cordoned
while the next node is not touched.

Run: .venv/bin/pytest -q lab/tests/integration/test_upgrade_driver.py   (needs root, dockerd, the node image, the Debian mirror)
"""
import json
import os

import pytest
import yaml

from conftest import ROOT, sh
from upgrade_lab import (NEW, NODES, OLD, USER, dexec, failures, installed_versions, k8s_nodes, k8s_pods, make_lab,
                         node_events, playbook, pod_uids, reported_version, reseed_pods, restore, roll, upgrade)


@pytest.fixture(scope='module')
def lab(tmp_path_factory, collections_path, kube_real):
    yield from make_lab(tmp_path_factory, collections_path, 'upg-roll', kube_real)


def test_input_is_checked_before_anything_changes(lab):
    since = lab['emu'].mark()
    rc, doc = playbook(lab, os.path.join(ROOT, 'playbooks', 'upgrade_driver.yml'), '-e', 'gpuops_upgrade_driver_version=550.90',
                       '-e', 'gpuops_kubeconfig=%s' % lab['emu'].kubeconfig, '-e', 'gpuops_upgrade_serial=0')
    assert rc != 0
    assert 'gpuops_upgrade_serial must be a positive' in failures(doc)
    assert lab['emu'].kube.writes(since, lab['emu'].mark(), user=USER) == []
    assert all(reported_version(lab, h) == OLD for h in lab['containers'])


def test_rolling_upgrade_one_node_at_a_time_then_rerun_changes_nothing(lab):
    emu = lab['emu']
    before = pod_uids(emu)
    since = emu.mark()
    rc, doc = upgrade(lab)
    assert rc == 0, failures(doc)
    events = node_events(emu, since)
    names = [n for _h, _i, n in NODES]
    # one node at a time, in inventory order: cordon N < its evictions < uncordon N < cordon N+1
    marks = [(kind, node or p) for _s, node, kind, p in events]
    assert marks == roll(names[0]) + roll(names[1]) + roll(names[2]), events
    # the DaemonSet pods stay (ignore_daemonsets: the same pods), the ReplicaSet pods were evicted (the ReplicaSet
    # controller replaced each one; the replacement waits for the uncordon, then the scheduler puts it back)
    after = pod_uids(emu)
    assert all(after.get((n, 'dp-%s' % n)) == before[(n, 'dp-%s' % n)] for n in names), (before, after)
    assert not set(before[(n, 'train-%s' % n)] for n in names) & set(after.values()), (before, after)
    nodes = k8s_nodes(emu)
    assert all(not nodes[n]['spec'].get('unschedulable') for n in names), nodes
    assert all('gpuops.io/driver-upgrade' not in (nodes[n]['metadata'].get('annotations') or {}) for n in names), nodes
    for host in lab['containers']:
        assert reported_version(lab, host) == NEW
        assert installed_versions(lab, host) == [NEW]
    # re-run: nothing drained, nothing changed
    reseed_pods(emu)
    since = emu.mark()
    rc, doc = upgrade(lab)
    assert rc == 0, failures(doc)
    assert emu.kube.writes(since, emu.mark(), user=USER) == []
    assert all(s['changed'] == 0 for s in doc['stats'].values()), doc['stats']
    assert len(k8s_pods(emu)) == 2 * len(NODES)


def test_failed_node_stops_the_roll_and_stays_cordoned(lab):
    emu = lab['emu']
    # back to OLD everywhere, as the role left the nodes in make_lab (its pass from OLD to NEW is the roll's own)
    restore(lab)
    assert all(reported_version(lab, h) == OLD and installed_versions(lab, h) == [OLD] for h in lab['containers'])
    reseed_pods(emu)
    host2 = NODES[1][0]
    # node 2's GPUs come up on another driver than the one installed
    dexec(lab['containers'][host2], 'sh', '-c', 'echo 550.40.07 > /etc/gpuops-lab/report-driver-version')
    since = emu.mark()
    try:
        rc, doc = upgrade(lab)
    finally:
        dexec(lab['containers'][host2], 'rm', '-f', '/etc/gpuops-lab/report-driver-version')
    assert rc != 0
    msg = failures(doc)
    assert 'failed verification' in msg and '550.40.07' in msg and 'gpu_doctor' in msg, msg
    n1, n2, n3 = [n for _h, _i, n in NODES]
    marks = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    assert marks == roll(n1) + roll(n2)[:3], marks
    nodes = k8s_nodes(emu)
    assert not nodes[n1]['spec'].get('unschedulable')
    assert nodes[n2]['spec'].get('unschedulable') is True
    assert not nodes[n3]['spec'].get('unschedulable')
    assert (n3, 'train-%s' % n3) in k8s_pods(emu)
    assert reported_version(lab, NODES[0][0]) == NEW
    assert installed_versions(lab, NODES[2][0]) == [OLD] and reported_version(lab, NODES[2][0]) == OLD
    assert NODES[2][0] not in set(h for play in doc['plays'][1:] for t in play['tasks'] for h in t['hosts'])
    # node 2 is fixed (its GPUs now report the installed driver, as after a reboot); the re-run resumes the roll:
    # node 1 untouched, node 2 verified and uncordoned without a second install, node 3 upgraded
    inv = json.loads(dexec(lab['containers'][host2], 'cat', '/etc/nvml-sim/inventory.json').stdout)
    inv['driver_version'], inv['nvml_version'] = NEW, '12.' + NEW
    fixed = lab['tmp'] / 'fixed.json'
    fixed.write_text(json.dumps(inv))
    sh('docker', 'cp', str(fixed), '%s:/etc/nvml-sim/inventory.json' % lab['containers'][host2])
    installs = dexec(lab['containers'][host2], 'cat', '/var/log/gpuops-lab-nvidia-installer.log').stdout
    since = emu.mark()
    rc, doc = upgrade(lab)
    assert rc == 0, failures(doc)
    marks = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    assert marks == [('uncordon', n2), ('unmark', n2)] + roll(n3), marks
    nodes = k8s_nodes(emu)
    assert not any(nodes[n]['spec'].get('unschedulable') for n in (n1, n2, n3)), nodes
    assert installed_versions(lab, NODES[2][0]) == [NEW] and reported_version(lab, NODES[2][0]) == NEW
    assert dexec(lab['containers'][host2], 'cat', '/var/log/gpuops-lab-nvidia-installer.log').stdout == installs


def test_unhold_entry_point_releases_only_held_packages(lab):
    """The dpkg branch of the nvidia_driver role's unhold entry point (the runfile roll above holds nothing): a held
    package of the role's list is released, a package that is not installed is left alone, a re-run changes nothing.
    `less` stands in for the driver packages (nvidia_driver_packages) - Debian's real ones are not installed here."""
    name = lab['containers'][NODES[0][0]]
    dexec(name, 'apt-mark', 'hold', 'less')
    play = lab['tmp'] / 'unhold.yml'
    play.write_text(yaml.safe_dump([{
        'name': 'unhold', 'hosts': NODES[0][0], 'gather_facts': True, 'gather_subset': ['min'],
        'tasks': [{'ansible.builtin.include_role': {'name': 'gpuops.k8s_gpu.nvidia_driver', 'tasks_from': 'unhold'},
                   'vars': {'nvidia_driver_method': 'distro', 'nvidia_driver_branch': '550',
                            'nvidia_driver_packages': ['less', 'gpuops-not-installed'],
                            'nvidia_driver_fabricmanager_packages': []}}]}]))
    rc, doc = playbook(lab, str(play))
    assert rc == 0, failures(doc)
    assert doc['stats'][NODES[0][0]]['changed'] == 1
    assert dexec(name, 'apt-mark', 'showhold').stdout.split() == []
    assert 'gpuops-not-installed' not in dexec(name, 'dpkg', '--get-selections').stdout
    rc, doc = playbook(lab, str(play))
    assert rc == 0 and doc['stats'][NODES[0][0]]['changed'] == 0, doc['stats']
