"""The layer playbooks (playbooks/*.yml) and the role gpu_node_sharing: structure, tags, batches, facts between layers.

Run: .venv/bin/pytest -q lab/tests/integration/test_playbooks.py
Fast checks: syntax of every layer playbook with both inventories, the contract's tags, site.yml's order, the node
play's batches (serial / max_fail_percentage, run for real on local hosts), the sharing pools computed from an
inventory, cluster.yml run alone probing first (NVML simulator + the real control plane, lab/kube/real.py), and gpu_node_sharing on the
simulator (MIG geometry through a GPU reset command, refusals). Nothing here skips: a missing tool is a failure.
The whole demo (lab/bin/demo.sh) is a step of its own in `make test`.
"""
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import PLAY_TIMEOUT, ROOT, VENV_BIN, ansible_cli

import gpu_kwok_nodes  # noqa: E402  (lab/tests: the recorded GPU kwok nodes)

PLAYBOOKS = os.path.join(ROOT, 'playbooks')
LAYERS = ['esxi', 'node', 'cluster', 'report']
SIM_DIR = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
INV_DIR = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')
CTL = os.path.join(ROOT, 'lab', 'nvml_sim', 'nvml-sim-ctl')
CONTRACT_TAGS = {'esxi', 'node', 'probe', 'driver', 'runtime', 'sharing', 'cluster', 'scheduler', 'stacks', 'labels',
                 'report'}


def playbook(collections_path, *args, env=None, json_out=False, timeout=PLAY_TIMEOUT):
    e = dict(os.environ)
    e.update(env or {})
    e['ANSIBLE_COLLECTIONS_PATH'] = collections_path
    e['ANSIBLE_CONFIG'] = os.path.join(ROOT, 'lab', 'ansible.cfg')
    e['ANSIBLE_LOCALHOST_WARNING'] = '0'
    e['ANSIBLE_FORCE_COLOR'] = '0'
    if json_out:
        e['ANSIBLE_STDOUT_CALLBACK'] = 'ansible.builtin.json'
        e['ANSIBLE_LOAD_CALLBACK_PLUGINS'] = '1'
    proc = ansible_cli([os.path.join(VENV_BIN, 'ansible-playbook')] + list(args), env=e, cwd=ROOT, timeout=timeout)
    if json_out:
        out = proc.stdout
        try:
            doc = json.loads(out[out.index('{'):])
        except ValueError:
            raise AssertionError('no JSON from ansible-playbook (rc=%s):\n%s\n%s' % (proc.returncode, out[-3000:],
                                                                                    proc.stderr[-3000:]))
        return proc, doc
    return proc


def task_results(doc, name):
    """{host: result} of the task called ``name``, with or without its role prefix (later occurrences win)."""
    got = {}
    for play in doc['plays']:
        for task in play['tasks']:
            if task['task']['name'] == name or task['task']['name'].endswith(' : ' + name):
                got.update(task['hosts'])
    return got


def local_inventory(tmp_path, hosts, groups=None, extra=None):
    """A YAML inventory whose hosts run locally with .venv's python (pynvml, kubernetes client)."""
    inv = {'all': {'vars': dict({'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                                 'gpuops_become': False}, **(extra or {})),
                   'children': groups or {'gpu_nodes': {'hosts': dict((h, {}) for h in hosts)}}}}
    path = tmp_path / 'inventory.yml'
    path.write_text(yaml.safe_dump(inv))
    return str(path)


@pytest.fixture(scope='module')
def simulator():
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    assert os.path.exists(os.path.join(SIM_DIR, 'libnvidia-ml.so.1'))


def sim_env(inventory, state):
    return {'LD_LIBRARY_PATH': SIM_DIR, 'NVML_SIM_INVENTORY': os.path.join(INV_DIR, inventory + '.json'),
            'NVML_SIM_STATE': str(state)}


# ------------------------------------------------------------------------------------------------ structure

@pytest.mark.parametrize('inventory', ['inventory/lab/hosts.yml', 'inventory/example/hosts.yml'])
def test_syntax_check(collections_path, inventory):
    """site.yml, every layer and doctor.yml pass --syntax-check with the inventory: one ansible-playbook run checks
    them all (it stops with an error at the first one that fails) and names each one it checked."""
    names = ['site'] + LAYERS + ['doctor']
    proc = playbook(collections_path, '-i', inventory, '--syntax-check', *['playbooks/%s.yml' % n for n in names])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = [line.split('playbook: ', 1)[1].strip() for line in proc.stdout.splitlines() if line.startswith('playbook: ')]
    assert checked == ['playbooks/%s.yml' % n for n in names], proc.stdout


def test_site_imports_the_layers_in_order():
    site = yaml.safe_load(open(os.path.join(PLAYBOOKS, 'site.yml')))
    assert [p['ansible.builtin.import_playbook'] for p in site] == [x + '.yml' for x in LAYERS]


_TAGS = {}


def list_tags(collections_path, name, inventory='inventory/example/hosts.yml'):
    """The tags `--list-tags` shows for playbooks/<name>.yml. One ansible-playbook run lists site.yml and every layer
    (a section per playbook, each starting with its `playbook:` line); the sections are kept for the other tests."""
    key = (collections_path, inventory)
    if key not in _TAGS:
        names = ['site'] + LAYERS
        proc = playbook(collections_path, '-i', inventory, '--list-tags', *['playbooks/%s.yml' % n for n in names])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        sections, current = {}, None
        for line in proc.stdout.splitlines():
            if line.startswith('playbook: '):
                current = sections.setdefault(line.split('playbook: ', 1)[1].strip(), set())
            elif 'TAGS: [' in line:
                assert current is not None, proc.stdout
                current.update(t.strip() for t in line.split('TAGS: [', 1)[1].rstrip(']').split(',') if t.strip())
        assert sorted(sections) == sorted('playbooks/%s.yml' % n for n in names), proc.stdout
        _TAGS[key] = sections
    return _TAGS[key]['playbooks/%s.yml' % name]


def test_site_has_every_contract_tag(collections_path):
    tags = list_tags(collections_path, 'site')
    assert CONTRACT_TAGS <= tags, CONTRACT_TAGS - tags


@pytest.mark.parametrize('name,tags', [('esxi', {'esxi'}), ('node', {'node', 'probe', 'driver', 'runtime', 'sharing'}),
                                       ('cluster', {'cluster', 'scheduler', 'stacks', 'labels'}),
                                       ('report', {'report'})])
def test_each_layer_carries_its_tags(collections_path, name, tags):
    got = list_tags(collections_path, name)
    assert tags <= got, tags - got


@pytest.mark.parametrize('tag,expect,absent', [
    ('driver', ['nvidia_driver'], ['nvidia_container_runtime :', 'gpu_node_sharing :', 'gpu_sharing_stack']),
    ('runtime', ['nvidia_container_runtime'], ['nvidia_driver :', 'gpu_node_sharing :']),
    ('sharing', ['gpu_node_sharing'], ['nvidia_driver :', 'nvidia_container_runtime :']),
    ('scheduler', ['Register the scheduler extender'], ['Deploy the sharing stack', 'Label the GPU nodes']),
    # a stack's labels are written by gpu_node_labels (the one writer), so stacks and labels select the same three steps
    ('stacks', ['Deploy the sharing stack', 'Label the GPU nodes', 'Finish the sharing stack'],
     ['Register the scheduler extender', 'nvidia_driver :']),
    ('labels', ['Deploy the sharing stack', 'Label the GPU nodes', 'Finish the sharing stack'],
     ['Register the scheduler extender', 'nvidia_driver :']),
])
def test_list_tasks_by_tag(collections_path, tag, expect, absent):
    proc = playbook(collections_path, '-i', 'inventory/example/hosts.yml', '--list-tasks', '--tags', tag,
                    'playbooks/site.yml')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every role's argument validation is tagged always; the layer's own tasks are what the tag selects
    listed = '\n'.join(line for line in proc.stdout.splitlines() if 'Validating arguments' not in line)
    for word in expect:
        assert word in listed, (word, listed)
    for word in absent:
        assert word not in listed, (word, listed)


def test_node_play_batches_and_role_order():
    play = yaml.safe_load(open(os.path.join(PLAYBOOKS, 'node.yml')))[0]
    assert play['serial'] == "{{ gpuops_node_serial | default('100%') }}"
    assert play['max_fail_percentage'] == '{{ gpuops_node_max_fail_percentage | default(0) }}'
    assert [r['role'] for r in play['roles']] == ['gpuops.k8s_gpu.gpu_probe', 'gpuops.k8s_gpu.nvidia_driver',
                                                 'gpuops.k8s_gpu.nvidia_container_runtime',
                                                 'gpuops.k8s_gpu.gpu_node_sharing']
    switches = [r.get('when') for r in play['roles']]
    assert switches[1:] == ['gpuops_node_driver | default(true) | bool', 'gpuops_node_runtime | default(true) | bool',
                            'gpuops_node_sharing | default(true) | bool']


def node_layer_probe_only(collections_path, tmp_path, env, *extra, min_gpus=None, hosts=None):
    """node.yml on local hosts (n1..n3, or ``hosts``: {name: host vars}) with the driver, runtime and sharing layers
    switched off: the probe, the doctor gate and the play's batches."""
    hosts = hosts or dict((h, {}) for h in ('n1', 'n2', 'n3'))
    if min_gpus:
        hosts['n2'] = {'gpu_probe_min_gpus': min_gpus}
    inv = local_inventory(tmp_path, [], groups={'gpu_nodes': {'hosts': hosts}},
                          extra={'gpuops_node_driver': False, 'gpuops_node_runtime': False,
                                 'gpuops_node_sharing': False, 'gpu_probe_bindings_method': 'none',
                                 'gpu_probe_report_path': ''})
    return playbook(collections_path, '-i', inv, 'playbooks/node.yml', *extra, env=env, json_out=True)


# The doctor gate's settings and a dra pool's node, one per host of one node.yml run (the gate and the pool's strategy
# are host variables: the same reading as -e, one run instead of four); the run also shows the default batch.
GATE_HOSTS = {'gate-enforce': {'gpuops_doctor_gate': 'enforce'}, 'gate-warn': {'gpuops_doctor_gate': 'warn'},
              'gate-off': {'gpuops_doctor_gate': 'off'},
              'dra-node': {'gpuops_sharing_strategy': 'dra', 'nvidia_container_runtime_cdi': True}}


@pytest.fixture(scope='module')
def gate_run(collections_path, tmp_path_factory, simulator):
    tmp_path = tmp_path_factory.mktemp('gate-run')
    env = sim_env('t4', tmp_path / 'state.json')
    return node_layer_probe_only(collections_path, tmp_path, env, hosts=json.loads(json.dumps(GATE_HOSTS)))


def test_node_layer_rolls_in_batches_and_stops_on_the_first_failure(collections_path, tmp_path, simulator, gate_run):
    env = sim_env('t4', tmp_path / 'state.json')
    proc, doc = gate_run                     # node.yml without gpuops_node_serial
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(doc['plays']) == 1            # default: one batch ("100%")
    proc, doc = node_layer_probe_only(collections_path, tmp_path, env, '-e', 'gpuops_node_serial=1')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(doc['plays']) == 3            # one batch per host
    assert all(doc['stats'][h]['failures'] == 0 for h in ('n1', 'n2', 'n3'))
    assert task_results(doc, 'Probe the GPUs')['n3']['gpus'][0]['name'] == 'Tesla T4'
    # n2 wants 2 GPUs and has 1: with max_fail_percentage 0 the roll stops after n2's batch, n3 is never touched
    proc, doc = node_layer_probe_only(collections_path, tmp_path, env, '-e', 'gpuops_node_serial=1', min_gpus=2)
    assert proc.returncode != 0
    assert doc['stats']['n2']['failures'] == 1
    assert 'n3' not in doc['stats'], doc['stats']
    # a tolerated failure percentage lets the roll go on (1 of 2 in the batch = 50%, not above 50; Ansible always
    # stops when a whole batch fails)
    proc, doc = node_layer_probe_only(collections_path, tmp_path, env, '-e', 'gpuops_node_serial=2',
                                      '-e', 'gpuops_node_max_fail_percentage=50', min_gpus=2)
    assert 'n3' in doc['stats'] and doc['stats']['n3']['failures'] == 0, doc['stats']


def test_node_layer_gathers_facts_for_a_single_tag(collections_path, tmp_path, simulator):
    """--tags probe still gathers the OS facts the roles need (gpu_probe picks apt or pip from the OS family)."""
    env = sim_env('t4', tmp_path / 'state.json')
    proc, doc = node_layer_probe_only(collections_path, tmp_path, env, '--tags', 'probe')
    assert proc.returncode == 0, proc.stderr[-3000:]
    setup = task_results(doc, "Gather the node's facts (OS family, distribution, architecture) for every role of the layer")
    assert sorted(setup) == ['n1', 'n2', 'n3']
    assert all(r['ansible_facts']['ansible_os_family'] for r in setup.values())
    assert task_results(doc, 'Probe the GPUs')['n1']['gpus'][0]['name'] == 'Tesla T4'


def test_pools_from_the_lab_inventory(collections_path, tmp_path):
    play = [{'hosts': 'localhost', 'gather_facts': False, 'tasks': [{'ansible.builtin.debug': {
        'msg': "{{ lookup('ansible.builtin.template', '%s/templates/sharing_pools.json.j2') | from_json }}" % PLAYBOOKS}}]}]
    (tmp_path / 'p.yml').write_text(yaml.safe_dump(play))
    proc, doc = playbook(collections_path, '-i', 'inventory/lab/hosts.yml', str(tmp_path / 'p.yml'), json_out=True)
    assert proc.returncode == 0, proc.stderr
    msg = doc['plays'][0]['tasks'][0]['hosts']['localhost']['msg']
    assert msg['errors'] == []
    assert [(p['name'], p['strategy'], p['hosts']) for p in msg['pools']] == [
        ('lab-pool-a100', 'mig', ['lab-a100']),
        ('lab-pool-h100', 'dra', ['lab-h100']), ('lab-pool-mps', 'mps', ['lab-mps']),
        ('lab-pool-p100', 'exclusive', ['lab-p100']), ('lab-pool-t4', 'time-slicing', ['lab-t4']),
        ('lab-pool-v100', 'gpushare', ['lab-v100'])]
    assert [p['name'] for p in msg['label_pools']] == ['lab-pool-a100', 'lab-pool-h100', 'lab-pool-mps', 'lab-pool-p100',
                                                       'lab-pool-t4', 'lab-pool-v100']


@pytest.mark.parametrize('groups,needle', [
    ({'gpu_nodes': {'children': {'pool_a': {'hosts': {'n1': {}}, 'vars': {'gpuops_sharing_strategy': 'mps'}},
                                 'pool_b': {'hosts': {'n1': {}}}}}},
     'n1 is in several pool groups (pool_a, pool_b); set gpuops_sharing_pool'),
    ({'gpu_nodes': {'children': {'pool_a': {'hosts': {'n1': {}, 'n2': {'gpuops_sharing_strategy': 'mig'}},
                                            'vars': {'gpuops_sharing_strategy': 'mps'}}}}},
     'pool pool-a mixes strategies'),
    ({'gpu_nodes': {'children': {'pool_a': {'hosts': {'n1': {}}, 'vars': {'gpuops_sharing_strategy': 'timeslicing'}}}}},
     'gpuops_sharing_strategy is timeslicing; allowed: exclusive, time-slicing'),
])
def test_cluster_refuses_inconsistent_pools_before_any_api_call(collections_path, tmp_path, groups, needle):
    inv = local_inventory(tmp_path, [], groups=groups, extra={'gpu_probe_facts': {}})
    proc = playbook(collections_path, '-i', inv, 'playbooks/cluster.yml', env={'K8S_AUTH_KUBECONFIG': '/nonexistent'})
    assert proc.returncode != 0
    assert 'The sharing pools are not consistent, nothing was changed' in proc.stdout, proc.stdout[-3000:]
    assert needle in proc.stdout, proc.stdout[-3000:]


# cluster.yml against the real control plane (lab/kube/real.py, the shared `kube_real` cluster): the node is a kwok
# node named with this file's pid (so the DaemonSet controller places the pool's pods on it and kwok makes them Ready),
# the pool too; requests are counted from the audit log by this file's own user, whose reads are logged as well.
S = '%d' % os.getpid()
USER = 'gpuops-test-playbooks-%s' % S
HOST = 'lab-t4-%s' % S
POOL_GROUP = 'pool_t4_%s' % S


def kwok_t4(name):
    """The T4 machine as Kubernetes sees it before the collection ran on it (no node.yml in these runs): the recorded
    t4x1 node's base (gpu_kwok_nodes.plain_node) - no GPU label, no GPU resource: neither the node layer nor a
    sharing stack's GFD and device plugin ran yet. Its nvidia.com labels are then the cluster layer's, from the
    read-only probe's facts (the test reads them)."""
    return gpu_kwok_nodes.plain_node(name)


@pytest.fixture
def kube_node(kube_real):
    """A kwok node for the pool's host; removed afterwards, with everything the tests' pool left."""
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    core.create_node(kwok_t4(HOST))
    try:
        yield {'kube': kube_real, 'kubeconfig': kube_real.user(USER, reads=True)}
    finally:
        core.delete_node(HOST)


def test_cluster_alone_probes_first_then_deploys_and_labels(collections_path, tmp_path, simulator, kube_node):
    """cluster.yml without node.yml in the same run: the node has no gpu_probe_facts, so it is probed read-only first,
    and the facts reach the stack and the labels. A second run writes nothing (audit log)."""
    from kubernetes import client
    kube = kube_node['kube']
    env = sim_env('t4', tmp_path / 'state.json')
    groups = {'gpu_nodes': {'children': {POOL_GROUP: {'hosts': {HOST: {}},
                                                      'vars': {'gpuops_sharing_strategy': 'time-slicing'}}}}}
    pool = POOL_GROUP.replace('_', '-')
    inv = local_inventory(tmp_path, [], groups=groups, extra={'gpuops_kubeconfig': kube_node['kubeconfig']})
    try:
        proc, doc = playbook(collections_path, '-i', inv, 'playbooks/cluster.yml', env=env, json_out=True)
        assert proc.returncode == 0, json.dumps(doc['stats']) + proc.stderr[-3000:]
        probe = task_results(doc, 'Probe the GPUs read-only (no facts from node.yml in this run)')[HOST]
        assert not probe.get('skipped') and not probe['changed']
        assert probe['gpus'][0]['name'] == 'Tesla T4'
        core, apps = client.CoreV1Api(kube.api()), client.AppsV1Api(kube.api())
        labels = core.read_node(HOST).metadata.labels
        assert labels['gpuops.io/sharing-strategy'] == 'time-slicing'
        assert labels['gpuops.io/sharing-pool'] == pool
        assert labels['nvidia.com/gpu.product'] == 'Tesla-T4'       # from the facts of the read-only probe
        ds = apps.list_namespaced_daemon_set('kube-system').items
        mine = [d for d in ds if pool in d.metadata.name]
        assert mine, [d.metadata.name for d in ds]
        start = kube.mark()
        proc, doc = playbook(collections_path, '-i', inv, 'playbooks/cluster.yml', env=env, json_out=True)
        end = kube.mark()
        assert proc.returncode == 0
        assert all(s['changed'] == 0 for s in doc['stats'].values()), doc['stats']
        writes = kube.writes(start, end, user=USER)
        assert writes == [], writes
    finally:
        remove_pool(kube, pool)


def remove_pool(kube, pool):
    """Delete what the stack made for ``pool`` (the shared cluster outlives this file)."""
    from kubernetes import dynamic
    dyn = dynamic.DynamicClient(kube.api())
    for api_version, kind in [('apps/v1', 'DaemonSet'), ('apps/v1', 'Deployment'), ('v1', 'ConfigMap'),
                              ('v1', 'ServiceAccount'), ('v1', 'Service'), ('rbac.authorization.k8s.io/v1', 'Role'),
                              ('rbac.authorization.k8s.io/v1', 'RoleBinding'),
                              ('rbac.authorization.k8s.io/v1', 'ClusterRole'),
                              ('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding')]:
        res = dyn.resources.get(api_version=api_version, kind=kind)
        for item in dyn.get(res, label_selector='gpuops.io/sharing-pool=%s' % pool).items:
            dyn.delete(res, name=item.metadata.name, namespace=item.metadata.namespace)


def test_cluster_alone_without_nvml_bindings_stops_before_any_api_call(collections_path, tmp_path, simulator,
                                                                       kube_node):
    """cluster.yml alone on a node that never ran node.yml and has no nvidia-ml-py: the read-only probe sees no NVML,
    so the layer stops with a message that says to run the node layer first, and the API gets no request at all (the
    audit log records every request of this file's user, reads included)."""
    kube = kube_node['kube']
    env = sim_env('t4', tmp_path / 'state.json')
    groups = {'gpu_nodes': {'children': {POOL_GROUP: {'hosts': {HOST: {}},
                                                      'vars': {'gpuops_sharing_strategy': 'time-slicing'}}}}}
    start = kube.mark()
    # /usr/bin/python3: Debian's python without nvidia-ml-py, as on a node that never ran the node layer
    inv = local_inventory(tmp_path, [], groups=groups, extra={'gpuops_kubeconfig': kube_node['kubeconfig'],
                                                              'ansible_python_interpreter': '/usr/bin/python3'})
    proc, doc = playbook(collections_path, '-i', inv, 'playbooks/cluster.yml', env=env, json_out=True)
    end = kube.mark()
    assert proc.returncode != 0
    probe = task_results(doc, 'Probe the GPUs read-only (no facts from node.yml in this run)')[HOST]
    assert probe['nvml']['status'] == 'bindings_missing', probe['nvml']
    stop = task_results(doc, 'Stop when the read-only probe had no NVML bindings (the node layer installs them)')
    assert stop[HOST]['failed'] is True
    msg = stop[HOST]['msg']
    assert 'no NVML Python bindings' in msg and 'Run the node layer first' in msg and '--tags probe' in msg, msg
    assert [p['play']['name'] for p in doc['plays']] == [
        'Cluster layer - GPU facts of the nodes (read-only probe when this run has none)']
    assert kube.requests(start, end, user=USER) == []


# ------------------------------------------------------------------------------------------------ gpu_node_sharing

def sharing_play(tmp_path, variables):
    play = [{'hosts': 'gpu_nodes', 'gather_facts': False, 'roles': [
        {'role': 'gpuops.k8s_gpu.gpu_node_sharing', 'vars': variables}]}]
    path = tmp_path / 'sharing.yml'
    path.write_text(yaml.safe_dump(play))
    return str(path)


def test_node_sharing_mig_geometry_through_a_gpu_reset(collections_path, tmp_path, simulator):
    env = sim_env('hgx-a100-80gb', tmp_path / 'state.json')
    inv = local_inventory(tmp_path, ['a100'])
    pb = sharing_play(tmp_path, {'gpu_node_sharing_strategy': 'mig',
                                 'gpu_sharing_stack_mig': {'devices': {'1g.10gb': 7}},
                                 'gpu_node_sharing_mig_reset': 'command',
                                 'gpu_node_sharing_mig_reset_command': [CTL, 'reset-gpu', '{index}'],
                                 # the boot unit needs systemd (this play runs on the lab host itself);
                                 # it is tested in a node container: lab/tests/integration/test_mig_persistence.py
                                 'gpu_node_sharing_mig_persist': False,
                                 'gpu_probe_bindings_method': 'none', 'gpu_probe_report_path': ''})
    proc, doc = playbook(collections_path, '-i', inv, pb, env=env, json_out=True)
    assert proc.returncode == 0, json.dumps(doc['stats']) + proc.stderr[-3000:]
    first = task_results(doc, 'Set persistence mode, compute mode, MIG geometry and the MPS unit')['a100']
    assert first['reboot_required'] and first['gpu_reset_pending'] == list(range(8))
    resets = task_results(doc, 'Reset the pending GPUs')['a100']
    assert len(resets['results']) == 8
    applied = task_results(doc, 'Apply the MIG geometry now that MIG mode is active')['a100']
    assert applied['changed'] and not applied['reboot_required']
    state = json.loads((tmp_path / 'state.json').read_text())
    assert all(g['mig_current'] for g in state['gpus'])
    # facts were refreshed: the probe sees MIG on and 7 MIG devices per GPU
    verified = task_results(doc, "Check that the GPUs hold the pool's MIG geometry")['a100']
    assert verified['mig_match'] is True and verified['changed'] is False
    probe = task_results(doc, 'Probe the GPUs')['a100']
    assert all(g['mig_current'] and len(g['mig_devices']) == 7 for g in probe['gpus']), probe['gpus'][0]
    proc, doc = playbook(collections_path, '-i', inv, pb, env=env, json_out=True)
    assert proc.returncode == 0
    assert doc['stats']['a100']['changed'] == 0, doc['stats']


@pytest.mark.parametrize('variables,needle', [
    ({'gpu_node_sharing_strategy': 'mig'}, 'a mig pool needs a MIG geometry'),
    ({'gpu_node_sharing_strategy': 'mps', 'gpu_node_sharing_mps_daemon': True},
     "NVIDIA's device plugin runs its own MPS control daemon"),
    ({'gpu_node_sharing_strategy': 'mig', 'gpu_node_sharing_mig_config_name': 'nope',
      'gpu_node_sharing_mig_config': {'version': 'v1', 'mig-configs': {'all-1g.10gb': [
          {'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}}},
     "gpu_node_sharing_mig_config_name 'nope' is not one of gpu_node_sharing_mig_config's mig-configs (all-1g.10gb)"),
    ({'gpu_node_sharing_strategy': 'sliced'}, 'gpu_node_sharing_strategy'),
])
def test_node_sharing_refuses_before_any_change(collections_path, tmp_path, simulator, variables, needle):
    env = sim_env('hgx-a100-80gb', tmp_path / 'state.json')
    subprocess.run([CTL, 'reset-gpu', 'all'], env=dict(os.environ, **env), check=True, capture_output=True)
    before = (tmp_path / 'state.json').read_bytes()
    inv = local_inventory(tmp_path, ['a100'])
    proc = playbook(collections_path, '-i', inv, sharing_play(tmp_path, variables), env=env)
    assert proc.returncode != 0
    assert needle in proc.stdout, proc.stdout[-3000:]
    assert (tmp_path / 'state.json').read_bytes() == before


def test_node_sharing_time_slicing_sets_default_compute_mode(collections_path, tmp_path, simulator):
    env = sim_env('t4', tmp_path / 'state.json')
    inv = local_inventory(tmp_path, ['t4'])
    pb = sharing_play(tmp_path, {'gpu_node_sharing_strategy': 'time-slicing', 'gpu_node_sharing_refresh_facts': False})
    subprocess.run([CTL, 'reset-gpu', 'all'], env=dict(os.environ, **env), check=True, capture_output=True)
    state = json.loads((tmp_path / 'state.json').read_text())
    state['gpus'][0]['compute_mode'] = 3          # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    (tmp_path / 'state.json').write_text(json.dumps(state))
    proc, doc = playbook(collections_path, '-i', inv, pb, env=env, json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    state = json.loads((tmp_path / 'state.json').read_text())
    assert state['gpus'][0]['compute_mode'] in (0, 'default')      # NVML_COMPUTEMODE_DEFAULT
    assert state['gpus'][0]['persistence_mode'] in (1, True)


def test_node_sharing_state_absent_puts_back_the_compute_mode_it_set_then_changes_nothing(
        collections_path, tmp_path, simulator):
    env = sim_env('t4', tmp_path / 'state.json')
    inv = local_inventory(tmp_path, ['t4'])
    subprocess.run([CTL, 'reset-gpu', 'all'], env=dict(os.environ, **env), check=True, capture_output=True)
    # paths of the MIG boot files in tmp: this play runs on the lab host itself
    common = {'gpu_node_sharing_strategy': 'exclusive', 'gpu_node_sharing_compute_mode': 'exclusive_process',
              'gpu_node_sharing_refresh_facts': False,
              'gpu_node_sharing_mig_config_path': str(tmp_path / 'mig' / 'config.json'),
              'gpu_node_sharing_mig_persist_script': str(tmp_path / 'libexec' / 'gpuops-mig-apply.py'),
              'gpu_node_sharing_mps': {'unit_path': str(tmp_path / 'nvidia-mps.service')}}
    proc, doc = playbook(collections_path, '-i', inv, sharing_play(tmp_path, common), env=env, json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert json.loads((tmp_path / 'state.json').read_text())['gpus'][0]['compute_mode'] in (3, 'exclusive_process')
    absent = dict(common, gpu_node_sharing_state='absent')
    proc, doc = playbook(collections_path, '-i', inv, sharing_play(tmp_path, absent), env=env, json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert task_results(doc, 'Put the compute mode back to Default')['t4']['changed'] is True
    state = json.loads((tmp_path / 'state.json').read_text())
    assert state['gpus'][0]['compute_mode'] in (0, 'default')
    assert state['gpus'][0]['persistence_mode'] in (1, True)     # persistence mode stays
    # nothing of the present path ran
    assert task_results(doc, 'Set persistence mode, compute mode, MIG geometry and the MPS unit') == {}
    proc, doc = playbook(collections_path, '-i', inv, sharing_play(tmp_path, absent), env=env, json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert doc['stats']['t4']['changed'] == 0, doc['stats']
    assert (tmp_path / 'state.json').read_text() == json.dumps(state) or json.loads(
        (tmp_path / 'state.json').read_text()) == state


def test_node_layer_records_the_doctor_gate(collections_path, tmp_path, simulator, gate_run):
    """node.yml runs the doctor after the driver and runtime layers and records gpuops_doctor_verdict; enforce gates a
    node exactly when it has a critical finding, warn never gates, off skips the doctor, another value is refused
    before anything runs on the node."""
    proc, doc = gate_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    for gate in ('enforce', 'warn', 'off'):
        host = 'gate-' + gate
        doctor = task_results(doc, 'Diagnose the node after the driver and runtime layers (the gate of its pool)')[host]
        verdict = task_results(doc, "Record the doctor's verdict as a host fact (cluster.yml leaves gated nodes out of "
                                    "their pools)")[host]['ansible_facts']['gpuops_doctor_verdict']
        assert verdict['gate'] == gate
        if gate == 'off':
            assert doctor.get('skipped') is True and verdict['ran'] is False and verdict['gated'] is False
            continue
        critical = [f['id'] for f in doctor['findings'] if f['severity'] == 'critical']
        assert verdict['critical'] == critical
        assert verdict['gated'] is (gate == 'enforce' and bool(critical))
    env = sim_env('t4', tmp_path / 'state.json')
    proc, doc = node_layer_probe_only(collections_path, tmp_path, env, '-e', 'gpuops_doctor_gate=strict')
    assert proc.returncode != 0
    assert 'gpuops_doctor_gate is strict; allowed: enforce, warn, off' in json.dumps(doc)
    # refused first: no fact gathering, no probe on any node
    assert task_results(doc, "Gather the node's facts (OS family, distribution, architecture) for every role of the "
                             "layer") == {}
    assert task_results(doc, 'Probe the GPUs') == {}


def test_node_layer_doctor_gate_on_a_dra_node(collections_path, tmp_path, simulator, gate_run):
    """A node of a dra pool goes through node.yml's doctor gate: dra is a pool strategy, not one of gpu_doctor's node
    strategies, so the gate omits it (as doctor.yml does); with nvidia_container_runtime_cdi the CDI check runs. Found
    by make demo's dra pool: the gate failed the node with 'value of strategy must be one of: ..., got: dra'."""
    proc, doc = gate_run                     # host dra-node: gpuops_sharing_strategy dra, nvidia_container_runtime_cdi
    assert proc.returncode == 0, json.dumps(doc.get('stats'))[-3000:] + proc.stderr[-3000:]
    doctor = task_results(doc, 'Diagnose the node after the driver and runtime layers (the gate of its pool)')['dra-node']
    assert not doctor.get('failed'), doctor.get('msg')
    # the runtime layer is off here, so no CDI spec: the finding shows cdi_required reached the doctor
    assert 'cdi_spec_missing' in [f['id'] for f in doctor['findings']], doctor['findings']
