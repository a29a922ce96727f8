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
THIS = 'lab/tests/tooling/test_no_painted_nodes.py'
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
# test_dra_extended_real took their nodes from the recording (gpu_kwok_nodes); 4 after upgrade_lab (the recorded t4x1,
# p100x1 and h100x1-mig-single), test_faults_real (t4x1 exclusive), test_playbooks (plain_node: the T4 before the
# collection ran), test_gpu_sharing_stack_real (bare_node, mig_node) and the scale bench (its MIG state through
# gpu_kwok_nodes.painted_mig_state, named in PAINTED) did; 3 after test_dra_migrate_real's DRAX-08 nodes became
# the recorded T4 of an exclusive pool, their device plugin's resource the recorded one)
PAINTING = {
    'lab/tests/integration/test_gpu_node_labels.py': 'the label role\'s own tests (kwok nodes on the real cluster): a foreign '
                                                     'nvidia.com/gpu.product=Old-Product the role must overwrite and '
                                                     'restore (a value no agent writes, on purpose), a gpushare node\'s '
                                                     'aliyun.com resources (gpushare: NOT_RECORDED) and GPU counts the '
                                                     'role\'s facts name',
    'lab/tests/integration/test_gpu_share_report.py': 'report fixtures: the gpushare, HAMi and Volcano nodes (NOT_RECORDED: '
                                                      'their agents cannot be built here), a node with two accountings '
                                                      'at once (a fault no agent writes alone); its time-slicing and '
                                                      'MIG nodes are the recorded a100x2-time-slicing and '
                                                      'h100x2-mig-mixed',
    'lab/tests/simulators/test_kube_emulator.py': 'the API emulator\'s own tests: GPU nodes by hand (what it stores '
                                                  'and serves back, not what an agent publishes)',
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


def places_named(painted):
    """The files each PAINTED entry names (its 'where': '<path> <what in it>', several joined by '; ')."""
    return dict((agent, [w.split()[0] for w in where.split('; ')]) for agent, (_what, where, _why) in painted.items())


def stand_in_callers(names):
    """The scanned files that call one of ``names`` (gpu_kwok_nodes' painted_* functions: stand-ins no recording
    gives), by file: the functions called."""
    found = {}
    for base in SCANNED:
        for d, dirs, files in os.walk(os.path.join(ROOT, base)):
            dirs[:] = sorted(x for x in dirs if x != '__pycache__')
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(d, f), ROOT)
                # the place itself, and this file (it checks the functions)
                if not f.endswith('.py') or rel in (ALLOWED_PLACE, THIS):
                    continue
                with open(os.path.join(d, f)) as fh:
                    tree = ast.parse(fh.read())
                for n in ast.walk(tree):
                    name = n.func.attr if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) else \
                        getattr(getattr(n, 'func', None), 'id', None) if isinstance(n, ast.Call) else None
                    if name in names:
                        found.setdefault(rel, set()).add(name)
    return found


def test_painted_stand_ins_are_named_where_they_are():
    """gpu_kwok_nodes.PAINTED names each stand-in still written by hand and every file that writes it: each file
    exists and names the stand-in's PAINTED entry; and a file that calls one of gpu_kwok_nodes' painted_* functions
    is named by a PAINTED entry (a stand-in moved into a helper is still said where it is used)."""
    import gpu_kwok_nodes
    places = places_named(gpu_kwok_nodes.PAINTED)
    for agent, paths in places.items():
        for path in paths:
            assert os.path.exists(os.path.join(ROOT, path)), (agent, path)
            with open(os.path.join(ROOT, path)) as f:
                text = f.read()
            assert 'PAINTED' in text and agent.split(' (')[0] in text, (agent, path)
    named = set(p for paths in places.values() for p in paths)
    painted = set(n for n in dir(gpu_kwok_nodes) if n.startswith('painted_'))
    assert painted >= {'painted_mig', 'painted_mig_state'}, painted
    unnamed = dict((f, sorted(c)) for f, c in stand_in_callers(painted).items() if f not in named)
    assert not unnamed, 'files that call gpu_kwok_nodes.painted_* and no PAINTED entry names: %s' % unnamed


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
    assert 'failed to send command to MPS daemon: exit status 1' in rec['a100x2-mps']['not_published']
    assert rec['a100x2-mps']['labels']['nvidia.com/gpu.sharing-strategy'] == 'mps'
    # the T4 of the demo's time-slicing pool, 4 replicas (t4x1-time-slicing): that count only
    t4 = gpu_kwok_nodes.agents_published('t4x1', 'time-slicing', replicas=4)
    assert t4 == {'capacity': {'nvidia.com/gpu': '4'}, 'allocatable': {'nvidia.com/gpu': '4'}}, t4
    assert gpu_kwok_nodes.agents_published('t4x1', 'time-slicing', replicas=3) is None
    assert gpu_kwok_nodes.agents_labels('t4x1', 'time-slicing')['nvidia.com/gpu.product'] == 'Tesla-T4-SHARED'
    for shape in ('t4x1', 'a100x8'):
        if shape != 't4x1':
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


def test_recorded_mig_nodes_and_the_painted_mig_state():
    """gpu_kwok_nodes.mig_node: a recorded MIG shape's node (every GFD label, the MIG devices the kubelet published),
    never the MIG manager's state label, which only painted_mig_state writes (PAINTED['nvidia-mig-manager']); the
    driver-upgrade lab's H100 with two 3g.40gb is a recorded shape (h100x1-mig-single: nvidia.com/gpu 2, GFD's
    -MIG-3g.40gb product); a shape that is not a MIG one is refused."""
    import gpu_kwok_nodes
    import real
    rec = real.load_recording()['shapes']['h100x1-mig-single']
    node = gpu_kwok_nodes.mig_node('n', 'h100x1-mig-single', labels={'x': 'y'})
    labels = node['metadata']['labels']
    assert gpu_kwok_nodes.MIG_STATE not in labels and labels['x'] == 'y' and 'gpuops.io/lab' not in labels
    assert dict((k, v) for k, v in labels.items() if k.startswith('nvidia.com/') and k != 'nvidia.com/gpu.present') \
        == rec['labels']
    assert (rec['capacity'], rec['mig_devices'], labels['nvidia.com/gpu.product']) == (
        {'nvidia.com/gpu': '2'}, {'3g.40gb': 2}, 'NVIDIA-H100-80GB-HBM3-MIG-3g.40gb'), rec
    assert node['status']['allocatable']['nvidia.com/gpu'] == '2'
    assert gpu_kwok_nodes.painted_mig_state() == {'nvidia.com/mig.config.state': 'success'}
    assert 'painted_mig_state' in gpu_kwok_nodes.PAINTED['nvidia-mig-manager'][0]
    try:
        gpu_kwok_nodes.mig_node('n', 't4x1')
    except KeyError as e:
        assert 't4x1' in str(e)
    else:
        raise AssertionError('a MIG node of t4x1 was made')


def test_what_cannot_be_built_is_said_with_the_proxy_answer():
    """Each strategy of NOT_RECORDED says which module the Go module proxy refuses and its exact answer
    (gpu_kwok_nodes.NOT_BUILT), and docs/lab.md carries the same answer."""
    import gpu_kwok_nodes
    assert set(gpu_kwok_nodes.NOT_BUILT) == set(gpu_kwok_nodes.NOT_RECORDED)
    with open(os.path.join(ROOT, 'docs', 'lab.md')) as f:
        doc = f.read()
    for strategy, (module, answer) in gpu_kwok_nodes.NOT_BUILT.items():
        assert '403 Forbidden' in answer and 'This module version is not available.' in answer, strategy
        assert module.split('@')[0] in doc, (strategy, module)
