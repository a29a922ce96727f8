"""playbooks/upgrade_driver.yml end to end in the lab: three node containers with simulated GPUs (NVML simulator),
the Kubernetes API emulator holding their Node objects and pods, and the nvidia_driver role's runfile method fed
from a file:// gpuops_mirror.files of stand-in .run installers (lab/upgrade/nvidia-runfile-stand-in.sh) that make
the simulator report the installed version.

What this proves: the roll goes one node at a time (the emulator's request log orders cordon/evict/uncordon),
pods are evicted through the eviction API, nodes are uncordoned, the driver and the version NVML reports change,
a re-run drains nothing and changes nothing, and a node that fails verification stops the roll and stays cordoned
while the next node is not touched. Node 2 is a MIG pool node (lab/upgrade/nvml-h100-mig.json, 2x 3g.40gb): a drain
the emulator cannot finish (a PodDisruptionBudget, a pod held by a finalizer), GPU jobs that outlive their wait, and
MIG devices gone after the "reboot" each stop the roll there, the node cordoned, later nodes untouched. What it cannot prove: a real reboot, a kernel module load, real package holds
(the runfile method holds nothing) - see docs/upgrade_driver.md.

Run: .venv/bin/pytest -q lab/tests/integration/test_upgrade_driver.py   (needs root, dockerd, the node image, the Debian mirror)
"""
import json
import os
import subprocess
import sys
import urllib.request

import pytest
import yaml

from conftest import ROOT, emulator_get, kube_emulator, sh

VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
DOCKER_DIR = os.path.join(ROOT, 'lab', 'docker')
STAND_IN = os.path.join(ROOT, 'lab', 'upgrade', 'nvidia-runfile-stand-in.sh')
PYNVML = os.path.join(os.path.dirname(os.path.dirname(yaml.__file__)), 'pynvml.py')
OLD, NEW = '550.54.15', '550.90.07'
# inventory host -> (NVML simulator inventory, Kubernetes node name: deliberately not the inventory name)
MIG_INVENTORY = os.path.join(ROOT, 'lab', 'upgrade', 'nvml-h100-mig.json')
NODES = [('upg-1', 't4', 'gpu-node-1'), ('upg-2', MIG_INVENTORY, 'gpu-node-2'), ('upg-3', 'p100', 'gpu-node-3')]
# node 2's pool: MIG with this geometry per GPU (what the upgrade verifies after the reboot)
MIG_HOST_VARS = {'gpuops_sharing_strategy': 'mig', 'gpu_node_sharing_mig_devices': {'3g.40gb': 2}}


def dexec(container, *cmd, check=True):
    return sh('docker', 'exec', container, *cmd, check=check)


def pod(name, node, owner_kind, labels=None):
    return {'apiVersion': 'v1', 'kind': 'Pod',
            'metadata': {'name': name, 'namespace': 'default', 'labels': labels or {'app': name},
                         'ownerReferences': [{'apiVersion': 'apps/v1', 'kind': owner_kind, 'name': name.rsplit('-', 1)[0],
                                              'uid': '00000000-0000-0000-0000-%012d' % abs(hash(name) % 10 ** 12),
                                              'controller': True}]},
            'spec': {'nodeName': node, 'containers': [{'name': 'c', 'image': 'registry.example/app:1'}]},
            'status': {'phase': 'Running'}}


def workload_pods(node):
    return [pod('train-%s' % node, node, 'ReplicaSet'), pod('dp-%s' % node, node, 'DaemonSet')]


def seed():
    docs = []
    for _h, _inv, node in NODES:
        docs.append({'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': node, 'labels': {'kubernetes.io/hostname': node}},
                     'spec': {}, 'status': {'capacity': {'nvidia.com/gpu': '1'}, 'allocatable': {'nvidia.com/gpu': '1'}}})
        docs.extend(workload_pods(node))
    return docs


@pytest.fixture(scope='module')
def lab(tmp_path_factory, collections_path):
    tmp = tmp_path_factory.mktemp('upgrade')
    sh(os.path.join(DOCKER_DIR, 'engine.sh'), 'up', timeout=300)
    sh(os.path.join(DOCKER_DIR, 'node-image.sh'), timeout=1200)
    assert os.path.exists(PYNVML), PYNVML
    tag = 'h2-upg-%d' % os.getpid()
    containers = {}
    try:
        for host, inv, _node in NODES:
            name = '%s-%s' % (tag, host[-1])
            containers[host] = name
            sh(os.path.join(DOCKER_DIR, 'node.sh'), 'up', name, '--hostname', host)
            sh(os.path.join(ROOT, 'lab', 'nvml_sim', 'install.sh'), name, inv)
            # NVML's real Python bindings (nvidia-ml-py, as in .venv): gpu_probe_bindings_method=none below
            sh('docker', 'cp', PYNVML, '%s:/usr/lib/python3/dist-packages/pynvml.py' % name)
            for version in (OLD, NEW):
                run = tmp / ('NVIDIA-Linux-x86_64-%s.run' % version)
                run.write_text(open(STAND_IN).read().replace('@VERSION@', version))
                dexec(name, 'mkdir', '-p', '/srv/gpuops-mirror/files/%s' % version, '/etc/gpuops-lab')
                sh('docker', 'cp', str(run), '%s:/srv/gpuops-mirror/files/%s/' % (name, version))
        inventory = {'all': {
            'hosts': {'localhost': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}},
            'children': {'gpu_nodes': {
                'hosts': dict((h, dict({'ansible_host': containers[h], 'gpuops_upgrade_node_name': n},
                                       **(MIG_HOST_VARS if i == MIG_INVENTORY else {}))) for h, i, n in NODES),
                'vars': {'ansible_connection': 'community.docker.docker', 'ansible_python_interpreter': '/usr/bin/python3',
                         'gpuops_become': False, 'nvidia_driver_method': 'runfile',
                         'gpuops_mirror': {'files': 'file:///srv/gpuops-mirror/files'},
                         # the stand-in runfiles are of branch 550, which NVIDIA ended: accepted by name
                         'nvidia_driver_accept_eol_branch': OLD.split('.')[0],
                         'gpu_probe_bindings_method': 'none'}}}}}
        inv_path = tmp / 'hosts.yml'
        inv_path.write_text(yaml.safe_dump(inventory))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
                   ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_HOST_KEY_CHECKING='0', ANSIBLE_FORKS='3',
                   ANSIBLE_PIPELINING='1', PATH='%s:%s' % (VENV_BIN, os.environ.get('PATH', '')))
        ctx = {'inventory': str(inv_path), 'env': env, 'containers': containers, 'tmp': tmp}
        setup(ctx)
        with kube_emulator(tmp, 'h2-upgrade', seed()) as emu:
            ctx['emu'] = emu
            yield ctx
    finally:
        for name in containers.values():
            sh(os.path.join(DOCKER_DIR, 'node.sh'), 'down', name, check=False)


def playbook(ctx, path, *extra):
    cmd = [os.path.join(VENV_BIN, 'ansible-playbook'), '-i', ctx['inventory'], path] + list(extra)
    proc = subprocess.run(cmd, env=ctx['env'], capture_output=True, text=True, cwd=ROOT, timeout=1800)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible output is not JSON (rc=%s):\n%s\n%s' % (proc.returncode, proc.stdout[-6000:], proc.stderr[-4000:]))
    return proc.returncode, doc


def setup(ctx):
    """Every node on OLD through the collection's role, no fault injected."""
    for name in ctx['containers'].values():
        dexec(name, 'rm', '-f', '/etc/gpuops-lab/report-driver-version')
    rc, doc = playbook(ctx, os.path.join(ROOT, 'lab', 'upgrade', 'setup.yml'), '-e', 'lab_start_driver_version=%s' % OLD)
    assert rc == 0, json.dumps(doc.get('stats'), indent=1) + failures(doc)
    for host in ctx['containers']:
        assert reported_version(ctx, host) == OLD


def failures(doc):
    out = []
    for play in doc.get('plays', []):
        for task in play['tasks']:
            for host, res in task['hosts'].items():
                if res.get('failed') or res.get('unreachable'):
                    out.append('%s | %s: %s' % (host, task['task']['name'], res.get('msg', '')[:3000]))
    return '\n' + '\n'.join(out)


def reported_version(ctx, host):
    inv = json.loads(dexec(ctx['containers'][host], 'cat', '/etc/nvml-sim/inventory.json').stdout)
    return inv['driver_version']


def installed_versions(ctx, host):
    out = dexec(ctx['containers'][host], 'sh', '-c', 'ls /usr/lib/x86_64-linux-gnu/ | grep "^libnvidia-ml.so.5" || true').stdout
    return sorted(line[len('libnvidia-ml.so.'):] for line in out.split())


def k8s_nodes(emu):
    state = emulator_get(emu, '/_emulator/state')
    objs = state.get('objects', state.get('items', []))
    return dict((o['metadata']['name'], o) for o in objs if o.get('kind') == 'Node')


def k8s_pods(emu):
    state = emulator_get(emu, '/_emulator/state')
    objs = state.get('objects', state.get('items', []))
    return sorted((o['spec'].get('nodeName'), o['metadata']['name']) for o in objs if o.get('kind') == 'Pod')


def node_events(emu, since):
    """[(seq, node, 'mark'|'cordon'|'uncordon'|'unmark'|'evict', pod)] from the request log, in order."""
    events = []
    for r in emulator_get(emu, '/_emulator/requests?since=%d&writes=1' % since)['items']:
        path = r['path']
        if r['method'] == 'PATCH' and path.startswith('/api/v1/nodes/'):
            body = json.loads(r['body'] or '{}')
            node = path.rsplit('/', 1)[1]
            if 'unschedulable' in body.get('spec', {}):
                events.append((r['seq'], node, 'cordon' if body['spec']['unschedulable'] else 'uncordon', None))
            else:
                marker = body['metadata']['annotations']['gpuops.io/driver-upgrade']
                events.append((r['seq'], node, 'mark' if marker else 'unmark', None))
        elif path.endswith('/eviction'):
            events.append((r['seq'], None, 'evict', path.split('/')[-2]))
        else:
            events.append((r['seq'], None, r['method'] + ' ' + path, None))
    return events


def roll(node, evict=True):
    """The write requests the playbook sends for one node, in order."""
    return [('mark', node), ('cordon', node)] + ([('evict', 'train-%s' % node)] if evict else []) + \
        [('uncordon', node), ('unmark', node)]


def reseed_pods(emu):
    for _h, _i, node in NODES:
        for p in workload_pods(node):
            req = urllib.request.Request(emu['url'] + '/api/v1/namespaces/default/pods', data=json.dumps(p).encode(),
                                         headers={'Content-Type': 'application/json'}, method='POST')
            try:
                urllib.request.urlopen(req, timeout=10).close()
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise


def upgrade(ctx, *extra):
    return playbook(ctx, os.path.join(ROOT, 'playbooks', 'upgrade_driver.yml'), '-e', 'gpuops_upgrade_driver_version=%s' % NEW,
                    '-e', 'gpuops_kubeconfig=%s' % ctx['emu']['kubeconfig'], *extra)


def test_input_is_checked_before_anything_changes(lab):
    since = emulator_get(lab['emu'], '/_emulator/requests')['seq']
    rc, doc = playbook(lab, os.path.join(ROOT, 'playbooks', 'upgrade_driver.yml'), '-e', 'gpuops_upgrade_driver_version=550.90',
                       '-e', 'gpuops_kubeconfig=%s' % lab['emu']['kubeconfig'], '-e', 'gpuops_upgrade_serial=0')
    assert rc != 0
    assert 'gpuops_upgrade_serial must be a positive' in failures(doc)
    assert emulator_get(lab['emu'], '/_emulator/requests?since=%d&writes=1' % since)['items'] == []
    assert all(reported_version(lab, h) == OLD for h in lab['containers'])


def test_rolling_upgrade_one_node_at_a_time_then_rerun_changes_nothing(lab):
    emu = lab['emu']
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab)
    assert rc == 0, failures(doc)
    events = node_events(emu, since)
    names = [n for _h, _i, n in NODES]
    # one node at a time, in inventory order: cordon N < its evictions < uncordon N < cordon N+1
    marks = [(kind, node or p) for _s, node, kind, p in events]
    assert marks == roll(names[0]) + roll(names[1]) + roll(names[2]), events
    # the DaemonSet pods stay (ignore_daemonsets), the ReplicaSet pods were evicted
    assert k8s_pods(emu) == sorted((n, 'dp-%s' % n) for n in names)
    nodes = k8s_nodes(emu)
    assert all(not nodes[n]['spec'].get('unschedulable') for n in names), nodes
    assert all('gpuops.io/driver-upgrade' not in (nodes[n]['metadata'].get('annotations') or {}) for n in names), nodes
    for host in lab['containers']:
        assert reported_version(lab, host) == NEW
        assert installed_versions(lab, host) == [NEW]
    # re-run: nothing drained, nothing changed
    reseed_pods(emu)
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab)
    assert rc == 0, failures(doc)
    assert emulator_get(emu, '/_emulator/requests?since=%d&writes=1' % since)['items'] == []
    assert all(s['changed'] == 0 for s in doc['stats'].values()), doc['stats']
    assert len(k8s_pods(emu)) == 2 * len(NODES)


def test_failed_node_stops_the_roll_and_stays_cordoned(lab):
    emu = lab['emu']
    setup(lab)   # back to OLD everywhere through the role (the stand-in installer uninstalls NEW first)
    reseed_pods(emu)
    host2 = NODES[1][0]
    # node 2's GPUs come up on another driver than the one installed
    dexec(lab['containers'][host2], 'sh', '-c', 'echo 550.40.07 > /etc/gpuops-lab/report-driver-version')
    since = emulator_get(emu, '/_emulator/requests')['seq']
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
    since = emulator_get(emu, '/_emulator/requests')['seq']
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


# --- a roll that must stop: drain that cannot finish, GPU jobs that outlive their wait, MIG devices gone ---------

def api(emu, method, path, body=None, ctype='application/json'):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(emu['url'] + path, data=data, headers={'Content-Type': ctype}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        if e.code == 404 and method == 'DELETE':
            return 404
        raise


def stand_down(lab):
    """Back to the start of a roll: every node on OLD, uncordoned and unmarked, the workload pods only, no PDB."""
    emu = lab['emu']
    for _h, _i, node in NODES:
        api(emu, 'PATCH', '/api/v1/nodes/%s' % node,
            {'spec': {'unschedulable': None}, 'metadata': {'annotations': {'gpuops.io/driver-upgrade': None}}},
            'application/merge-patch+json')
    api(emu, 'DELETE', '/apis/policy/v1/namespaces/default/poddisruptionbudgets/train-gpu-node-2')
    for node, name in k8s_pods(emu):
        if not name.startswith(('train-', 'dp-')):
            api(emu, 'PATCH', '/api/v1/namespaces/default/pods/%s' % name, {'metadata': {'finalizers': None}},
                'application/merge-patch+json')
            api(emu, 'DELETE', '/api/v1/namespaces/default/pods/%s' % name)
    for name in lab['containers'].values():
        dexec(name, 'rm', '-f', '/etc/gpuops-lab/report-driver-version', '/etc/gpuops-lab/drop-mig-instances')
    sh(os.path.join(ROOT, 'lab', 'nvml_sim', 'install.sh'), lab['containers'][NODES[1][0]], MIG_INVENTORY)
    setup(lab)
    reseed_pods(emu)


def installer_log(lab, host):
    return dexec(lab['containers'][host], 'sh', '-c', 'cat /var/log/gpuops-lab-nvidia-installer.log || true').stdout


def assert_stopped_at_node_2(lab, doc, since, node2_events, installs):
    """Node 1 rolled, node 2 stayed cordoned with what node2_events says happened to it, node 3 untouched."""
    emu = lab['emu']
    n1, n2, n3 = [n for _h, _i, n in NODES]
    marks = [(kind, node or p) for _s, node, kind, p in node_events(emu, since)]
    assert marks == roll(n1) + node2_events, marks
    nodes = k8s_nodes(emu)
    assert nodes[n2]['spec'].get('unschedulable') is True
    assert not nodes[n1]['spec'].get('unschedulable') and not nodes[n3]['spec'].get('unschedulable')
    assert (n3, 'train-%s' % n3) in k8s_pods(emu)
    assert reported_version(lab, NODES[0][0]) == NEW
    assert installed_versions(lab, NODES[2][0]) == [OLD] and reported_version(lab, NODES[2][0]) == OLD
    assert NODES[2][0] not in set(h for play in doc['plays'][1:] for t in play['tasks'] for h in t['hosts'])
    if installs is not None:  # the drain stopped the node before its driver was touched
        assert installer_log(lab, NODES[1][0]) == installs
        assert installed_versions(lab, NODES[1][0]) == [OLD] and reported_version(lab, NODES[1][0]) == OLD


def test_UPG_01_drain_refused_by_a_disruption_budget_stops_the_roll(lab):
    emu = lab['emu']
    stand_down(lab)
    n2 = NODES[1][2]
    api(emu, 'POST', '/apis/policy/v1/namespaces/default/poddisruptionbudgets',
        {'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget',
         'metadata': {'name': 'train-%s' % n2, 'namespace': 'default'},
         'spec': {'maxUnavailable': 0, 'selector': {'matchLabels': {'app': 'train-%s' % n2}}}})
    installs = installer_log(lab, NODES[1][0])
    since = emulator_get(emu, '/_emulator/requests')['seq']
    rc, doc = upgrade(lab)
    assert rc != 0
    msg = failures(doc)
    assert 'the drain did not finish' in msg and 'disruption budget' in msg and 'stays cordoned' in msg, msg
    # the refused eviction (429) is the last write for node 2
    assert_stopped_at_node_2(lab, doc, since, [('mark', n2), ('cordon', n2), ('evict', 'train-%s' % n2)], installs)


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
    # node 2 resumes (marked again, already cordoned): only its selected GPU pod is evicted
    assert marks[:4] == [('mark', n2), ('evict', 'train-%s' % n2), ('uncordon', n2), ('unmark', n2)], marks
    assert marks[4:] == [('mark', n3), ('cordon', n3), ('uncordon', n3), ('unmark', n3)], marks
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
