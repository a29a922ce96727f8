"""playbooks/upgrade_driver.yml end to end in the lab: three node containers with simulated GPUs (NVML simulator),
the Kubernetes API emulator holding their Node objects and pods, and the nvidia_driver role's runfile method fed
from a file:// gpuops_mirror.files of stand-in .run installers (lab/upgrade/nvidia-runfile-stand-in.sh) that make
the simulator report the installed version.

What this proves: the roll goes one node at a time (the emulator's request log orders cordon/evict/uncordon),
pods are evicted through the eviction API, nodes are uncordoned, the driver and the version NVML reports change,
a re-run drains nothing and changes nothing, and a node that fails verification stops the roll and stays cordoned
while the next node is not touched. What it cannot prove: a real reboot, a kernel module load, real package holds
(the runfile method holds nothing) - see docs/upgrade_driver.md.

Run: .venv/bin/pytest -q lab/tests/test_upgrade_driver.py   (needs root, dockerd, the node image, the Debian mirror)
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
NODES = [('upg-1', 't4', 'gpu-node-1'), ('upg-2', 'v100', 'gpu-node-2'), ('upg-3', 'p100', 'gpu-node-3')]


def dexec(container, *cmd, check=True):
    return sh('docker', 'exec', container, *cmd, check=check)


def pod(name, node, owner_kind):
    return {'apiVersion': 'v1', 'kind': 'Pod',
            'metadata': {'name': name, 'namespace': 'default',
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
                'hosts': dict((h, {'ansible_host': containers[h], 'gpuops_upgrade_node_name': n}) for h, _i, n in NODES),
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
