"""No lab test paints a GPU node by hand any more, but the files named here (issue #36): a lab test gets its GPU kwok
nodes from lab/tests/gpu_kwok_nodes.py (what a real lab node published, lab/node/recordings), and what a stack's
agents still publish by hand is named there (gpu_kwok_nodes.PAINTED).

A file paints a GPU node when it writes nodes (create_node, patch_node, patch_node_status, replace_node[_status])
and holds a dict literal keyed by a GPU node label GFD, the operator or the MIG manager write (nvidia.com/gpu.product,
.count, .memory, .present, nvidia.com/mig.config.state, nvidia.com/mig.strategy) or by a GPU extended resource
(nvidia.com/gpu, nvidia.com/mig-<profile>) outside a pod's limits/requests or a selector, or when it imports
kwok_node from test_gpu_sharing_stack_real (its factory of nodes written from probe facts). A dict that only states what a
real node is expected to show carries the comment '# expected, not written' on its first line.

PAINTING is the allow-list: it only shrinks. A file that paints and is not listed fails (make its nodes with
gpu_kwok_nodes); a listed file that no longer paints fails too (take it off the list)."""
from __future__ import annotations

import ast
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests'))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))

SCANNED = ('lab/tests', 'lab/bench')
# the one place GPU kwok nodes are made (from the recording) and painted stand-ins are named
ALLOWED_PLACE = 'lab/tests/gpu_kwok_nodes.py'
LABEL_KEYS = {'nvidia.com/gpu.product', 'nvidia.com/gpu.count', 'nvidia.com/gpu.memory', 'nvidia.com/gpu.present',
              'nvidia.com/mig.config.state', 'nvidia.com/mig.strategy'}
NOT_NODES = {'nodeSelector', 'matchLabels', 'limits', 'requests'}
NODE_WRITES = {'create_node', 'patch_node', 'patch_node_status', 'replace_node', 'replace_node_status'}
EXPECTED = '# expected, not written'
# the factory of GPU kwok nodes written from probe facts (lab/kube/real.py gpu_node and the scale bench's kwok_node
# are made from the recording)
PAINTED_FACTORY = ('test_gpu_sharing_stack_real', 'kwok_node')

# file -> what it still paints, and why no recording gives it (2026-11-29, issue #36: shrink it; 14 files that day,
# 9 after test_gpu_node_drain_real, test_dra_kube133_real, test_dra_real, test_doctor_dra_real and
# test_dra_extended_real took their nodes from the recording (gpu_kwok_nodes))
PAINTING = {
    'lab/tests/upgrade_lab.py': 'its own kwok_node: nvidia.com/gpu 1 on the kwok twins of its three docker nodes (T4, '
                                'an H100 with 3g.40gb x 2, a P100); only the T4 is a recorded shape (t4x1): no real lab '
                                'node ran the P100 or that MIG geometry',
    'lab/tests/integration/test_dra_migrate_real.py': 'kwok_node and its Plugins thread: a time-slicing pool on T4 kwok '
                                                      'nodes whose nvidia.com/gpu (1 <-> 0) and DRA slice switch with '
                                                      'the pool labels; no real node recorded a time-slicing pool on a '
                                                      'T4 (DRAX-10\'s node is the recorded a100x2-time-slicing)',
    'lab/tests/integration/test_faults_real.py': 'its gpu_node: nvidia.com/gpu capacity written by hand',
    'lab/tests/integration/test_gpu_node_labels.py': 'GFD labels written by hand (the label role\'s own tests)',
    'lab/tests/integration/test_gpu_share_report.py': 'report fixtures: GPU labels and resources by hand',
    'lab/tests/integration/test_gpu_sharing_stack_real.py': 'kwok_node (its definition) and the MIG node\'s state',
    'lab/tests/integration/test_playbooks.py': 'GFD labels written by hand',
    'lab/tests/simulators/test_kube_emulator.py': 'the API emulator\'s own tests: GPU nodes by hand',
    'lab/bench/cluster_real/bench.py': 'nvidia.com/mig.config.state of pool-mig (mig-manager: no recording)',
}


def _str(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _resource(key):
    return key == 'nvidia.com/gpu' or (key or '').startswith('nvidia.com/mig-')


def paints(path):
    """Why the file at ``path`` paints GPU nodes (empty: it does not)."""
    with open(path) as f:
        text = f.read()
    lines = text.splitlines()
    tree = ast.parse(text)
    not_nodes = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict):
            for k, v in zip(n.keys, n.values):
                if _str(k) in NOT_NODES and isinstance(v, ast.Dict):
                    not_nodes.add(id(v))
    calls, hits, factory = set(), [], False
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == PAINTED_FACTORY[0] \
                and PAINTED_FACTORY[1] in [a.name for a in n.names]:
            factory = True
        if isinstance(n, ast.Call):
            calls.add(n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, 'id', None))
        if isinstance(n, ast.Dict) and id(n) not in not_nodes and EXPECTED not in lines[n.lineno - 1] \
                and any(_str(k) in LABEL_KEYS or _resource(_str(k)) for k in n.keys):
            hits.append(n.lineno)
    why = []
    if factory:
        why.append('uses %s.%s' % PAINTED_FACTORY)
    if hits and calls & NODE_WRITES:
        why.append('writes nodes (%s) and GPU labels/resources by hand at lines %s'
                   % (', '.join(sorted(calls & NODE_WRITES)), sorted(set(hits))))
    return why


def painting_files():
    found = {}
    for base in SCANNED:
        for d, dirs, files in os.walk(os.path.join(ROOT, base)):
            dirs[:] = sorted(x for x in dirs if x != '__pycache__')
            for f in sorted(files):
                if f.endswith('.py'):
                    rel = os.path.relpath(os.path.join(d, f), ROOT)
                    why = paints(os.path.join(d, f))
                    if why and rel != ALLOWED_PLACE:
                        found[rel] = why
    return found


def test_no_new_painted_gpu_nodes_and_the_allow_list_shrinks():
    found = painting_files()
    new = sorted(set(found) - set(PAINTING))
    assert not new, ('lab tests that build GPU nodes by hand (make them with %s from the recording; a stand-in that '
                     'no recording gives goes into its PAINTED): %s'
                     % (ALLOWED_PLACE, '; '.join('%s: %s' % (f, ', '.join(found[f])) for f in new)))
    gone = sorted(set(PAINTING) - set(found))
    assert not gone, 'these files no longer paint GPU nodes: take them off PAINTING: %s' % gone


def test_the_rule_sees_painting(tmp_path):
    """The scan is no test that cannot fail: a node written by hand is seen, an expected dict and a pod's limits
    are not."""
    painted = tmp_path / 'painted.py'
    painted.write_text('def f(core):\n    core.create_node({"metadata": {"labels": {"nvidia.com/gpu.product": "T4"}}})\n')
    assert paints(str(painted)), 'a GPU label written on a created node is not seen'
    status = tmp_path / 'status.py'
    status.write_text('def f(core):\n    res = {"nvidia.com/mig-1g.10gb": "2"}\n    core.patch_node_status("n", res)\n')
    assert paints(str(status))
    fine = tmp_path / 'fine.py'
    fine.write_text('def f(core):\n    core.create_pod({"resources": {"limits": {"nvidia.com/gpu": "1"}}})\n'
                    '    want = {"nvidia.com/gpu.product": "T4"}  %s\n    core.patch_node("n", {})\n' % EXPECTED)
    assert paints(str(fine)) == []
    factory = tmp_path / 'factory.py'
    factory.write_text('from test_gpu_sharing_stack_real import kwok_node\nkwok_node("n", {})\n')
    assert paints(str(factory)) == ['uses test_gpu_sharing_stack_real.kwok_node']
    recorded = tmp_path / 'recorded.py'
    recorded.write_text('import bench\nbench.kwok_node(1, [])\n')
    assert paints(str(recorded)) == []


def test_painted_stand_ins_are_named_where_they_are():
    """gpu_kwok_nodes.PAINTED names each stand-in still written by hand and the file that writes it: the file exists
    and names the stand-in's PAINTED entry."""
    import gpu_kwok_nodes
    for agent, (what, where, why) in gpu_kwok_nodes.PAINTED.items():
        path = where.split()[0]
        assert os.path.exists(os.path.join(ROOT, path)), (agent, where)
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        assert 'PAINTED' in text and agent.split(' (')[0] in text, (agent, path)


def test_bare_nodes_come_from_the_recording():
    """gpu_kwok_nodes.bare_node: the recorded shape's node-layer labels, no GPU resource, no gpuops.io label; facts of
    other GPUs than the shape's are refused; the recorded MIG geometry is found, another is not (painted)."""
    import gpu_kwok_nodes
    import real
    rec = real.load_recording()['shapes']
    node = gpu_kwok_nodes.bare_node('n', 'a100x8')
    labels = node['metadata']['labels']
    gpu = dict((k, v) for k, v in labels.items() if k.startswith('nvidia.com/'))
    assert gpu == dict({'nvidia.com/gpu.present': 'true'},
                       **dict((k, rec['a100x8']['labels'][k]) for k in real.SHAPE_LABELS)), gpu
    assert not [k for k in labels if k.startswith('gpuops.io/')], labels
    assert not [r for f in ('capacity', 'allocatable') for r in node['status'][f] if r.startswith('nvidia.com/')]
    t4 = {'gpus': [{'name': 'Tesla T4', 'memory_total_mib': 15360}]}
    gpu_kwok_nodes.bare_node('n', 't4x1', facts=t4)
    try:
        gpu_kwok_nodes.bare_node('n', 'a100x8', facts=t4)
    except AssertionError as e:
        assert 'a100x8' in str(e)
    else:
        raise AssertionError('T4 facts on an a100x8 node were taken')
    assert gpu_kwok_nodes.mig_published('a100x8', 'single', {'1g.10gb': 7})['capacity'] \
        == rec['a100x8-mig-single']['capacity']
    assert gpu_kwok_nodes.mig_published('a100x8', 'single', {'3g.40gb': 2}) is None
    assert not [k for k in gpu_kwok_nodes.plain_node('cp')['metadata']['labels'] if k.startswith('nvidia.com/')]


def test_every_strategy_says_whether_a_real_node_recorded_its_agents():
    """Each strategy of the model is recorded (gpu_kwok_nodes.RECORDED_AGENTS; mig: the recorded MIG shapes; dra:
    lab/node/recordings/dra-slices.json) or listed as not recorded (NOT_RECORDED): no strategy is left unsaid."""
    import gpu_kwok_nodes
    from test_no_strategy_branches import strategy_names
    said = set(gpu_kwok_nodes.RECORDED_AGENTS) | set(gpu_kwok_nodes.NOT_RECORDED) | {'mig', 'dra'}
    assert set(strategy_names()) == said, (sorted(set(strategy_names()) - said), sorted(said - set(strategy_names())))
    assert not set(gpu_kwok_nodes.RECORDED_AGENTS) & set(gpu_kwok_nodes.NOT_RECORDED)
    t4 = gpu_kwok_nodes.agents_published('t4x1', 'exclusive')
    assert t4 == {'capacity': {'nvidia.com/gpu': '1'}, 'allocatable': {'nvidia.com/gpu': '1'}}, t4
    assert [s for s in gpu_kwok_nodes.NOT_RECORDED if gpu_kwok_nodes.agents_published('t4x1', s)] == []


def test_shared_pools_come_from_the_recording():
    """The time-slicing and MPS agents are the recorded a100x2 shapes' (test_node_daemonset_real.py): the node a test
    gets carries every GFD label and extended resource of the shape and nothing of the lab's own; the MPS node
    publishes no resource and says why; another shape's GPUs get none (no recording on them)."""
    import gpu_kwok_nodes
    import real
    rec = real.load_recording()['shapes']
    assert set(real.RECORDED_SHARING) <= set(rec), sorted(rec)
    node = gpu_kwok_nodes.agents_node('n', 'a100x2-time-slicing', 'time-slicing', labels={'x': 'y'})
    labels = node['metadata']['labels']
    assert dict((k, v) for k, v in labels.items() if k.startswith('nvidia.com/') and k != 'nvidia.com/gpu.present') \
        == rec['a100x2-time-slicing']['labels']
    assert labels['x'] == 'y' and 'gpuops.io/lab' not in labels
    ts = gpu_kwok_nodes.agents_published('a100x2-time-slicing', 'time-slicing')
    assert ts == {'capacity': {'nvidia.com/gpu': '6'}, 'allocatable': {'nvidia.com/gpu': '6'}}, ts
    assert labels['nvidia.com/gpu.replicas'] == '3' and labels['nvidia.com/gpu.count'] == '2'
    assert gpu_kwok_nodes.agents_published('a100x2-mps', 'mps') == {'capacity': {}, 'allocatable': {}}
    assert 'nvidia-cuda-mps-control' in rec['a100x2-mps']['not_published']
    assert rec['a100x2-mps']['labels']['nvidia.com/gpu.sharing-strategy'] == 'mps'
    for shape in ('t4x1', 'a100x8'):
        assert gpu_kwok_nodes.agents_published(shape, 'time-slicing') is None, shape
        try:
            gpu_kwok_nodes.agents_node('n', shape, 'mps')
        except KeyError as e:
            assert shape in str(e)
        else:
            raise AssertionError('an mps node of %s was made without a recording' % shape)
    # a fleet's node (real.gpu_node by its labels) never takes a shared pool's shape: its agents are not the fleet's
    try:
        real.gpu_node('scale-x', 2, 'NVIDIA-A100-SXM4-80GB-SHARED', 81920, (8, 0), True)
    except SystemExit as e:
        assert 'no recorded shape' in str(e), e
    else:
        raise AssertionError('a scale node took the recorded time-slicing shape')


def test_shared_pools_publish_only_the_recorded_replicas():
    """The lifecycle suite's two-A100 machines (issue #37): bare_sharing_node is the recorded sharing shape as the node
    layer leaves it, with GFD's product of the same inventory's plain shape (no -SHARED, no replicas, no resource);
    agents_published/agents_labels give the recording for its replica count only, and nothing for another."""
    import gpu_kwok_nodes
    import real
    rec = real.load_recording()['shapes']
    node = gpu_kwok_nodes.bare_sharing_node('n', 'a100x2-time-slicing')
    labels = node['metadata']['labels']
    assert labels['nvidia.com/gpu.product'] == rec['a100x8']['labels']['nvidia.com/gpu.product'], labels
    assert not labels['nvidia.com/gpu.product'].endswith('-SHARED')
    assert labels['nvidia.com/gpu.count'] == '2' and 'nvidia.com/gpu.replicas' not in labels, labels
    assert not [r for r in node['status']['allocatable'] if r.startswith('nvidia.com/')], node['status']
    try:
        gpu_kwok_nodes.bare_sharing_node('n', 'a100x8')
    except KeyError as e:
        assert 'a100x8' in str(e)
    else:
        raise AssertionError('a plain shape was taken as a sharing shape')
    replicas = real.RECORDED_SHARING['a100x2-time-slicing'][1]
    assert gpu_kwok_nodes.agents_published('a100x2-time-slicing', 'time-slicing', replicas=replicas) \
        == gpu_kwok_nodes.agents_published('a100x2-time-slicing', 'time-slicing')
    assert gpu_kwok_nodes.agents_published('a100x2-time-slicing', 'time-slicing', replicas=replicas + 1) is None
    assert gpu_kwok_nodes.agents_labels('a100x2-time-slicing', 'mps', replicas=replicas + 1) is None
    ts = gpu_kwok_nodes.agents_labels('a100x2-time-slicing', 'time-slicing', replicas=replicas)
    assert ts == dict((k, v) for k, v in rec['a100x2-time-slicing']['labels'].items()
                      if k.startswith('nvidia.com/') and k != 'nvidia.com/gpu.present'), ts
    assert gpu_kwok_nodes.agents_labels('a100x2-time-slicing', 'mps')['nvidia.com/gpu.sharing-strategy'] == 'mps'
