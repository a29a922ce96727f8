"""Shared lab of the driver-upgrade tests (lab/tests/integration/test_upgrade_driver*.py): playbooks/upgrade_driver.yml
end to end with three node containers with simulated GPUs (NVML simulator), the Kubernetes API emulator holding their
Node objects and pods, and the nvidia_driver role's runfile method fed from a file:// gpuops_mirror.files of stand-in
.run installers (lab/upgrade/nvidia-runfile-stand-in.sh) that make the simulator report the installed version.

Each test file builds its own lab with make_lab() (a module-scoped fixture), so the files run on different pytest-xdist
workers at the same time. Node 2 is a MIG pool node (lab/upgrade/nvml-h100-mig.json, 2x 3g.40gb). What the lab cannot
prove: a real reboot, a kernel module load, real package holds (the runfile method holds nothing) - see
docs/upgrade_driver.md.
"""
import json
import os
import subprocess
import sys
import urllib.request

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


def make_lab(tmp_path_factory, collections_path, tag):
    """The three-node lab of a test file (a module-scoped fixture yields from it): node containers with the NVML
    simulator and the stand-in runfiles, every node on OLD through the role, and a Kubernetes API emulator seeded with
    the nodes and their workload pods. ``tag`` names the containers and the emulator (one lab per file, so files run
    on different xdist workers at the same time)."""
    tmp = tmp_path_factory.mktemp('upgrade-' + tag)
    sh(os.path.join(DOCKER_DIR, 'engine.sh'), 'up', timeout=300)
    sh(os.path.join(DOCKER_DIR, 'node-image.sh'), timeout=1200)
    assert os.path.exists(PYNVML), PYNVML
    tag = '%s-%d' % (tag, os.getpid())
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
        with kube_emulator(tmp, tag, seed()) as emu:
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


def setup(ctx, hosts=None):
    """Every node (or only ``hosts``) on OLD through the collection's role, no fault injected; every node then
    reports OLD."""
    for host, name in ctx['containers'].items():
        if hosts is None or host in hosts:
            dexec(name, 'rm', '-f', '/etc/gpuops-lab/report-driver-version')
    limit = ['--limit', ','.join(hosts)] if hosts is not None else []
    if hosts is None or hosts:
        rc, doc = playbook(ctx, os.path.join(ROOT, 'lab', 'upgrade', 'setup.yml'), '-e', 'lab_start_driver_version=%s' % OLD,
                           *limit)
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
    # the role runs again only where the last roll changed something (a node still on OLD is already set up)
    setup(lab, [h for h, _i, _n in NODES if reported_version(lab, h) != OLD or installed_versions(lab, h) != [OLD]])
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
