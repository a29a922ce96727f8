"""lab/bench/node/bench.py groups playbooks/node.yml's tasks by role: included roles fold into the role that
includes them (nvidia_driver's gpu_probe check), the final probe is "gpu_probe again", play-level tasks go to the
next role, and wall time runs from a segment's first task start to its last task end.

Run: .venv/bin/pytest lab/tests/tooling/test_bench_node_roles.py
"""
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, 'lab', 'bench'))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'bench', 'node'))
import bench  # noqa: E402


def task(name, start, end, skipped=False, changed=False):
    return {'task': {'name': name, 'duration': {'start': '2026-11-23T07:00:%06.3fZ' % start,
                                                 'end': '2026-11-23T07:00:%06.3fZ' % end}},
            'hosts': {'n1': {'skipped': skipped, 'changed': changed}}}


def test_by_role_folds_included_roles_and_names_the_second_probe():
    g, d, r, s = ('gpuops.k8s_gpu.%s : ' % x for x in ('gpu_probe', 'nvidia_driver', 'nvidia_container_runtime',
                                                      'gpu_node_sharing'))
    tasks = [task('Gather facts', 0, 1),
             task(g + 'Probe', 1, 2, changed=True), task(g + 'Write report', 2, 3),
             task(d + 'Install', 3, 10, changed=True),
             task('Probe the GPUs with gpu_info', 10, 10.5),          # include_role inside nvidia_driver: no prefix
             task(g + 'Probe', 10.5, 11), task(g + 'Install bindings', 11, 11.2, skipped=True),
             task(d + 'Diagnose', 11.2, 12),
             task(r + 'Add repo', 12, 13), task(r + 'Restart containerd', 13, 14, changed=True),
             task(s + 'MIG', 14, 15),
             task('Probe the GPUs again after the node\'s changes', 15, 15.1),   # play post_task include
             task(g + 'Probe', 15.1, 16)]
    segs = bench.by_role({'plays': [{'tasks': tasks}]})
    assert list(segs) == ['facts', 'gpu_probe', 'nvidia_driver', 'nvidia_container_runtime', 'gpu_node_sharing',
                          'gpu_probe again']
    assert segs['nvidia_driver'] == {'wall': 9.0, 'tasks': 4, 'changed': 1, 'skipped': 1}
    assert segs['gpu_probe'] == {'wall': 2.0, 'tasks': 2, 'changed': 1, 'skipped': 0}
    assert segs['gpu_probe again']['tasks'] == 2 and abs(segs['gpu_probe again']['wall'] - 1.0) < 1e-6
    assert segs['nvidia_container_runtime']['changed'] == 1 and segs['facts']['wall'] == 1.0
