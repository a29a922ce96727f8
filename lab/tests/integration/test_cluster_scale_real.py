"""Flat cost of playbooks/cluster.yml on upstream's real API server (lab/kube/real.py): what the scale benchmark
(lab/bench/cluster_real) measures at 100 to 5,000 nodes, checked here on 10 and 30 kwok GPU nodes in two pools
(exclusive, time-slicing), without timing anything:
  * a re-run writes nothing and reports changed=0, at 10 and at 30 nodes;
  * the API requests of a re-run do not grow with the nodes: 30 nodes send at most READ_BOUND more requests than 10
    (the nodes are read with one list, not one request per node);
  * growing the fleet from 10 to 30 nodes writes exactly one label patch per new node and nothing else.
Requests are counted from the API server's audit log by this test's own user, which is in group gpuops:audit-reads
(lab/kube/audit-policy.yaml logs every request of that group, reads included).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_cluster_scale_real.py
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

from conftest import ANSIBLE_TESTS_CFG, PLAY_TIMEOUT, ROOT, VENV_BIN

SUFFIX = 'flat%d' % os.getpid()
USER = 'gpuops-test-cluster-scale-%d' % os.getpid()
READ_BOUND = 1  # extra requests a re-run may send for 20 more nodes (0.05 per node); today it sends none
SIZES = (10, 30)


def _bench():
    spec = importlib.util.spec_from_file_location('gpuops_bench_cluster_real',
                                                  os.path.join(ROOT, 'lab', 'bench', 'cluster_real', 'bench.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _bench()
POOLS = [p for p in bench.POOLS if p[1] in ('exclusive', 'time-slicing')]


def env_of(kubeconfig=None):
    return dict(os.environ, ANSIBLE_STDOUT_CALLBACK='json', ANSIBLE_LOAD_CALLBACK_PLUGINS='1',
               ANSIBLE_LOCALHOST_WARNING='false', ANSIBLE_INVENTORY_UNPARSED_WARNING='false', ANSIBLE_NOCOLOR='1',
               ANSIBLE_PIPELINING='1', ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'),
               ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG, **({'K8S_AUTH_KUBECONFIG': kubeconfig} if kubeconfig else {}))


def run_cluster(kube, kubeconfig, inv_path):
    env = env_of()
    start = kube.mark()
    p = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), '-i', inv_path,
                        os.path.join(ROOT, 'playbooks', 'cluster.yml')],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=PLAY_TIMEOUT)
    end = kube.mark()
    try:
        doc = json.loads(p.stdout[p.stdout.index('{'):])
    except ValueError:
        pytest.fail('cluster.yml output is not JSON rc=%s\n%s\n%s' % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    assert p.returncode == 0, 'cluster.yml failed:\n%s' % '\n'.join(
        '%s | %s | %s' % (h, t['task']['name'], str(r.get('msg'))[:300])
        for play in doc['plays'] for t in play['tasks'] for h, r in t['hosts'].items() if r.get('failed'))
    events = kube.events(start, end, user=USER)
    return {'requests': len(events), 'writes': kube.writes(start, end, user=USER),
            'changed': sum(s.get('changed', 0) for s in doc['stats'].values())}


@pytest.fixture(scope='module')
def runs(kube_real, tmp_path_factory):
    from kubernetes import client
    kubeconfig = kube_real.user(USER, groups=('system:masters', 'gpuops:audit-reads'))
    core = client.CoreV1Api(kube_real.api())
    names = []
    tmp = tmp_path_factory.mktemp('cluster-scale')
    out = {}
    try:
        for i in range(SIZES[-1]):
            doc = bench.kwok_node(i, POOLS, prefix=SUFFIX)
            core.create_node(doc)
            names.append(doc['metadata']['name'])
        for n in SIZES:
            inv = tmp / ('inv-%d.json' % n)
            inv.write_text(json.dumps(bench.inventory(n, POOLS, kubeconfig, prefix=SUFFIX)))
            out[n] = {'converge': run_cluster(kube_real, kubeconfig, str(inv)),
                      'rerun': run_cluster(kube_real, kubeconfig, str(inv))}
        yield out
    finally:
        remove_stacks(kubeconfig, tmp)
        for name in names:
            try:
                core.delete_node(name)
            except client.ApiException:
                pass


def remove_stacks(kubeconfig, tmp):
    """The test's pools' stacks go (role gpu_sharing_stack, state absent), so that the shared cluster keeps no object
    of this test (the NVIDIA strategies' RuntimeClass is shared by pools)."""
    import yaml
    tasks = [{'name': 'remove %s' % p[0], 'ansible.builtin.include_role': {'name': 'gpuops.k8s_gpu.gpu_sharing_stack'},
              'vars': {'gpu_sharing_stack_strategy': p[1], 'gpu_sharing_stack_state': 'absent',
                       'gpu_sharing_stack_pool': '%s-%s' % (SUFFIX, p[0]),
                       'gpu_sharing_stack_nodes': [bench.node_name(i, SUFFIX) for i in range(SIZES[-1])
                                                   if bench.pool_of(i, POOLS) == p],
                       'gpu_sharing_stack_facts': {}}} for p in POOLS]
    pb = tmp / 'absent.yml'
    pb.write_text(yaml.safe_dump([{'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
                                   'tasks': tasks}]))
    p = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), '-i', 'localhost,', str(pb),
                        '-e', 'ansible_python_interpreter=%s' % os.path.join(VENV_BIN, 'python')],
                       cwd=ROOT, env=env_of(kubeconfig), capture_output=True, text=True, timeout=PLAY_TIMEOUT)
    assert p.returncode == 0, 'removing the stacks failed:\n%s' % p.stdout[-3000:]


@pytest.mark.parametrize('n', SIZES)
def test_rerun_writes_nothing_and_changes_nothing(runs, n):
    assert runs[n]['rerun']['writes'] == [], runs[n]['rerun']['writes']
    assert runs[n]['rerun']['changed'] == 0


def test_rerun_requests_do_not_grow_with_the_nodes(runs):
    small, big = runs[SIZES[0]]['rerun']['requests'], runs[SIZES[-1]]['rerun']['requests']
    assert small > 0, 'no request of %s in the audit log: is group gpuops:audit-reads logged?' % USER
    assert big - small <= READ_BOUND, (
        'a re-run sent %d requests at %d nodes and %d at %d nodes (%.2f per pool): the nodes are read one by one?'
        % (small, SIZES[0], big, SIZES[-1], big / float(len(POOLS))))


def test_new_nodes_cost_one_label_patch_each(runs):
    writes = runs[SIZES[-1]]['converge']['writes']
    new = set(bench.node_name(i, SUFFIX) for i in range(SIZES[0], SIZES[-1]))
    patched = [uri.split('?')[0].rsplit('/', 1)[-1] for verb, uri, code in writes
               if verb == 'patch' and '/api/v1/nodes/' in uri]
    assert sorted(patched) == sorted(new), writes
    assert len(writes) == len(new), [w for w in writes if w[0] != 'patch' or '/api/v1/nodes/' not in w[1]]
