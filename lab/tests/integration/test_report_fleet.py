"""playbooks/report.yml's fleet report costs no task per node when the nodes' GPU facts are given (the scale benchmark,
lab/bench/cluster_real: a skipped task costs a worker per host, 5,000 nodes took minutes), and prints the same report:
once, every host of the play (--limit applies), a probed host as the probe saw it.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_report_fleet.py
"""
import os

import yaml

from test_playbooks import PLAYBOOKS, playbook, sim_env, simulator, task_results  # noqa: F401 (simulator: fixture)

T4 = {'source': 'nvml', 'gpu_count': 1, 'nvml': {'status': 'ok', 'driver_version': '580.95.05'},
      'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}],
      'sharing': {'mig': {'allowed': False}, 'mps': {'allowed': True}}}
PROBE = 'Probe the GPUs read-only (no facts from node.yml in this run)'
SHARE = 'Share the probe like role gpu_probe does'


def inventory(tmp_path, facts):
    import sys
    hosts = dict((h, {'gpu_probe_facts': f} if f else {}) for h, f in facts.items())
    inv = {'all': {'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                            'gpuops_become': False},
                   'children': {'gpu_nodes': {'hosts': hosts}}}}
    path = tmp_path / 'inventory.yml'
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def report_lines(doc):
    printed = task_results(doc, 'Print the fleet report')
    assert list(printed) == ['localhost'], printed  # once, on the controller
    return printed['localhost']['msg']


def test_facts_given_no_task_per_node(collections_path, tmp_path):
    inv = inventory(tmp_path, {'node-a': T4, 'node-b': T4, 'node-c': T4})
    proc, doc = playbook(collections_path, '-i', inv, os.path.join(PLAYBOOKS, 'report.yml'), json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    # no per-host result at all for the probe tasks (not even skipped ones: each would cost a worker)
    assert task_results(doc, PROBE) == {} and task_results(doc, SHARE) == {}
    lines = report_lines(doc)
    assert lines[0].split() == ['host', 'source', 'gpus', 'model', 'driver', 'MiB', 'total', 'MIG', 'MPS', 'NVML']
    rows = [x.split() for x in lines[1:] if x.strip()]
    assert rows == [[h, 'nvml', '1', 'Tesla', 'T4', '580.95.05', '15360', 'no', 'yes', 'ok']
                    for h in ('node-a', 'node-b', 'node-c')], lines


def test_limit_applies_to_the_report(collections_path, tmp_path):
    inv = inventory(tmp_path, {'node-a': T4, 'node-b': T4, 'node-c': T4})
    proc, doc = playbook(collections_path, '-i', inv, os.path.join(PLAYBOOKS, 'report.yml'),
                         '--limit', 'node-a,node-c,localhost', json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [x.split()[0] for x in report_lines(doc)[1:] if x.strip()] == ['node-a', 'node-c']


def test_only_the_nodes_without_facts_are_probed(collections_path, tmp_path, simulator):  # noqa: F811
    inv = inventory(tmp_path, {'node-a': T4, 'node-b': None})
    proc, doc = playbook(collections_path, '-i', inv, os.path.join(PLAYBOOKS, 'report.yml'),
                         env=sim_env('t4', tmp_path / 'state.json'), json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert list(task_results(doc, PROBE)) == ['node-b'] and list(task_results(doc, SHARE)) == ['node-b']
    rows = dict((x.split()[0], x.split()) for x in report_lines(doc)[1:] if x.strip())
    assert sorted(rows) == ['node-a', 'node-b']
    assert rows['node-b'][1:5] == ['nvml', '1', 'Tesla', 'T4'], rows['node-b']
