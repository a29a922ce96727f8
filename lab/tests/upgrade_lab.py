"""Shared lab of the driver-upgrade tests (lab/tests/integration/test_upgrade_driver*.py): playbooks/upgrade_driver.yml
end to end with three node containers with simulated GPUs (NVML simulator), the nvidia_driver role's runfile method fed
from a file:// gpuops_mirror.files of stand-in .run installers (lab/upgrade/nvidia-runfile-stand-in.sh) that make the
simulator report the installed version, and the cluster side on the real control plane (lab/kube/real.py, the shared
`kube_real` cluster): the three Kubernetes nodes are kwok nodes (named with the pid, tainted so that only this lab's
pods land there), each runs the pod of a ReplicaSet `train-<node>` (the real ReplicaSet controller replaces an evicted
pod: Pending while the node is cordoned, back on its node after the uncordon, through the real kube-scheduler) and of
a DaemonSet `dp-<node>`; evictions go through the real eviction API with PodDisruptionBudgets the real disruption
controller keeps current. The playbook's requests are read from the API server's audit log (its own client identity):
the order of mark / cordon / evict / uncordon / unmark per node. Pods are named by their owner (`train-<node>`) where a
controller generated the name.

test_upgrade_driver.py builds the lab with make_lab() (a module-scoped fixture) once for all its tests. Node 2 is a MIG
pool node (lab/upgrade/nvml-h100-mig.json, 2x 3g.40gb). What the lab cannot
prove: a real reboot, a kernel module load, real package holds (the runfile method holds nothing) - see
docs/upgrade_driver.md.
"""
import json
import os
import sys

import yaml

from conftest import ROOT, ansible_cli, sh, wait_until

import gpu_kwok_nodes  # lab/tests: the recorded GPU kwok nodes
from gpu_kwok_nodes import real  # lab/kube/real.py

VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
DOCKER_DIR = os.path.join(ROOT, 'lab', 'docker')
STAND_IN = os.path.join(ROOT, 'lab', 'upgrade', 'nvidia-runfile-stand-in.sh')
PYNVML = os.path.join(os.path.dirname(os.path.dirname(yaml.__file__)), 'pynvml.py')
OLD, NEW = '550.54.15', '550.90.07'
# inventory host -> (NVML simulator inventory, Kubernetes node name: deliberately not the inventory name)
MIG_INVENTORY = os.path.join(ROOT, 'lab', 'upgrade', 'nvml-h100-mig.json')
SUFFIX = '%d' % os.getpid()
NODES = [('upg-1', 't4', 'gpu-node-1-' + SUFFIX), ('upg-2', MIG_INVENTORY, 'gpu-node-2-' + SUFFIX),
         ('upg-3', 'p100', 'gpu-node-3-' + SUFFIX)]
# node 2's pool: MIG with this geometry per GPU (what the upgrade verifies after the reboot)
MIG_HOST_VARS = {'gpuops_sharing_strategy': 'mig', 'gpu_node_sharing_mig_devices': {'3g.40gb': 2}}
NS = 'upgrade-' + SUFFIX                 # the workload pods' namespace
USER = 'gpuops-test-upgrade-' + SUFFIX   # the playbook's client identity (its requests in the audit log)
TAINT = {'key': 'gpuops.io/upgrade-lab', 'value': SUFFIX, 'effect': 'NoSchedule'}


def dexec(container, *cmd, check=True):
    return sh('docker', 'exec', container, *cmd, check=check)


def pod_spec(node):
    return {'nodeSelector': {'kubernetes.io/hostname': node}, 'tolerations': [dict(TAINT, operator='Equal')],
            'terminationGracePeriodSeconds': 0, 'containers': [{'name': 'c', 'image': 'registry.example/app:1'}]}


def replicaset(name, node, labels=None, finalizers=None):
    """A ReplicaSet of one pod on ``node`` (its pod template may carry ``finalizers``: the pods get them)."""
    labels = labels or {'app': name}
    meta = {'labels': labels}
    if finalizers:
        meta['finalizers'] = list(finalizers)
    return {'apiVersion': 'apps/v1', 'kind': 'ReplicaSet', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'replicas': 1, 'selector': {'matchLabels': labels},
                     'template': {'metadata': meta, 'spec': pod_spec(node)}}}


def daemonset(name, node):
    labels = {'app': name}
    return {'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'selector': {'matchLabels': labels}, 'template': {'metadata': {'labels': labels},
                                                                     'spec': pod_spec(node)}}}


def bare_pod(name, node, labels=None, phase=None):
    """A pod without a controller (a GPU job's pod as wait_for_jobs selects it by label; a real Job's pods would be
    completed at once by kwok). ``phase``: set through the status subresource once kwok runs it."""
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'namespace': NS, 'labels': labels or {}},
            'spec': pod_spec(node), '_phase': phase}


# inventory -> the recorded shape of the same GPUs (lab/node/recordings/gpu-nodes.json, lab/tests/gpu_kwok_nodes.py):
# the T4 and the P100 as NVIDIA's device plugin serves them (exclusive), the H100 with its two 3g.40gb under the MIG
# pool's single strategy (the collection's default) as a real lab node published it with that geometry applied
KWOK_SHAPES = {'t4': 't4x1', 'p100': 'p100x1', MIG_INVENTORY: 'h100x1-mig-single'}


def kwok_node(node, inventory):
    """The kwok twin of a docker node: what a real lab node of the same GPUs published (every GFD label, the device
    plugin's extended resources), with this lab's taint."""
    shape = KWOK_SHAPES[inventory]
    # the twin's GPUs are the docker node's: the same simulator inventory, or for the MIG node the same GPUs with the
    # same MIG instances (a drift of either file fails here)
    if inventory == MIG_INVENTORY:
        with open(MIG_INVENTORY) as f:
            ours = json.load(f)['gpus']
        rec = real.recorded_inventory(shape)['gpus']
        assert [(g['name'], g['mig_instances']) for g in ours] == [(g['name'], g['mig_instances']) for g in rec], (
            shape, ours, rec)
    else:
        assert gpu_kwok_nodes.shape(shape)['inventory'] == inventory + '.json', (shape, inventory)
    if shape in real.RECORDED_MIG:
        doc = gpu_kwok_nodes.mig_node(node, shape)
    else:
        doc = gpu_kwok_nodes.agents_node(node, shape, 'exclusive')
    doc['spec'] = {'taints': [TAINT]}
    return doc


class Cluster(object):
    """This lab's side of the shared real cluster: clients, the playbook's kubeconfig, the audit log."""

    def __init__(self, kube):
        from kubernetes import client
        self.kube = kube
        self.api = kube.api()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.kubeconfig = kube.user(USER)

    def create(self, doc):
        doc = dict((k, v) for k, v in doc.items() if not k.startswith('_'))
        if doc['kind'] == 'ReplicaSet':
            return self.apps.create_namespaced_replica_set(NS, doc)
        if doc['kind'] == 'DaemonSet':
            return self.apps.create_namespaced_daemon_set(NS, doc)
        if doc['kind'] == 'PodDisruptionBudget':
            return self.policy.create_namespaced_pod_disruption_budget(NS, doc)
        return self.core.create_namespaced_pod(NS, doc)

    def mark(self):
        return self.kube.mark()


def owner_name(pod):
    refs = pod.metadata.owner_references or []
    return refs[0].name if refs else pod.metadata.name


def seed(cl):
    for _h, inv, node in NODES:
        cl.core.create_node(kwok_node(node, inv))
    cl.core.create_namespace({'metadata': {'name': NS}})
    wait_until('ServiceAccount default in %s' % NS, lambda: [
        s for s in cl.core.list_namespaced_service_account(NS).items if s.metadata.name == 'default'])
    for _h, _inv, node in NODES:
        cl.create(replicaset('train-%s' % node, node))
        cl.create(daemonset('dp-%s' % node, node))
    reseed_pods(cl)


def unseed(cl):
    from kubernetes import client
    for p in cl.core.list_namespaced_pod(NS).items:
        if p.metadata.finalizers:
            cl.core.patch_namespaced_pod(p.metadata.name, NS, {'metadata': {'finalizers': None}})
    cl.core.delete_namespace(NS)
    for _h, _inv, node in NODES:
        try:
            cl.core.delete_node(node)
        except client.ApiException:
            pass
    # a later lab of the same worker (pid) reuses these names: its namespace must not meet this one still terminating
    wait_until('namespace %s gone' % NS, lambda: NS not in [n.metadata.name for n in cl.core.list_namespace().items], 120)


def make_lab(tmp_path_factory, collections_path, tag, kube_real):
    """The three-node lab of a test file (a module-scoped fixture yields from it): node containers with the NVML
    simulator and the stand-in runfiles, every node on OLD through the role, and on the real control plane
    ``kube_real`` the nodes and their workload pods. ``tag`` names the containers (with the pid, as the Kubernetes
    names)."""
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
        snapshot(ctx)
        cl = Cluster(kube_real)
        ctx['emu'] = cl
        try:
            seed(cl)
            yield ctx
        finally:
            unseed(cl)
    finally:
        for name in containers.values():
            sh(os.path.join(DOCKER_DIR, 'node.sh'), 'down', name, check=False)


def playbook(ctx, path, *extra):
    cmd = [os.path.join(VENV_BIN, 'ansible-playbook'), '-i', ctx['inventory'], path] + list(extra)
    proc = ansible_cli(cmd, env=ctx['env'], cwd=ROOT, timeout=1800)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible output is not JSON (rc=%s):\n%s\n%s' % (proc.returncode, proc.stdout[-6000:], proc.stderr[-4000:]))
    return proc.returncode, doc


def setup(ctx):
    """Every node on OLD through the collection's role (lab/upgrade/setup.yml), no fault injected; every node then
    reports and has installed OLD."""
    rc, doc = playbook(ctx, os.path.join(ROOT, 'lab', 'upgrade', 'setup.yml'), '-e', 'lab_start_driver_version=%s' % OLD)
    assert rc == 0, json.dumps(doc.get('stats'), indent=1) + failures(doc)
    for host in ctx['containers']:
        assert reported_version(ctx, host) == OLD and installed_versions(ctx, host) == [OLD], host


# What a roll (the nvidia_driver role, the stand-in installer, the NVML simulator) and a test's fault injection change
# on a node, relative to /: the stand-in's library, programs and log, the simulator's inventory and state, the role's
# download directory and report, the lab's fault files. snapshot() keeps them as the role left them on OLD (make_lab);
# restore() puts them back - what the role produces on OLD, without running it again (measured in docs/lab.md: the
# role's pass to OLD was most of stand_down()). Anything else a roll changed makes restore() fail, naming it.
RESTORED = ('etc/nvml-sim', 'var/lib/nvml-sim', 'etc/gpuops-lab', 'var/lib/gpuops', 'var/cache/gpuops',
            'usr/bin/nvidia-uninstall', 'usr/bin/nvidia-persistenced', 'var/log/gpuops-lab-nvidia-installer.log',
            'etc/systemd/system/nvidia-persistenced.service')
LIBS = 'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.5*'   # the stand-in's libnvidia-ml.so.<version> (installed_versions)
SNAPSHOT, STAMP = '/var/tmp/gpuops-lab-old.tar', '/var/tmp/gpuops-lab-old.stamp'
# scratch of Ansible and the OS that a roll writes and nothing reads back (other mounts are outside find -xdev)
SCRATCH = ('/proc', '/sys', '/dev', '/run', '/tmp', '/var/tmp', '/root/.ansible')


def snapshot(ctx):
    """Keep on every node what RESTORED and LIBS hold now (every node on OLD through the role)."""
    script = 'set -e; cd /; tar -cpf %s $(for p in %s %s; do [ -e "$p" ] && echo "$p"; done); touch %s' % (
        SNAPSHOT, ' '.join(RESTORED), LIBS, STAMP)
    for name in ctx['containers'].values():
        dexec(name, 'sh', '-c', script)


def restore(ctx):
    """Every node back to what snapshot() kept; fails naming any other file changed since."""
    prune = ' -o '.join('-path %s' % p for p in SCRATCH)
    allowed = ' | '.join(['/' + p + ' | /' + p + '/*' for p in RESTORED] + ['/' + LIBS])
    script = ('set -e; cd /; for f in $(find / -xdev \\( %s \\) -prune -o ! -type d -newer %s -print); do '
              'case "$f" in %s) ;; *) echo "restore: $f changed since the snapshot and is not restored" >&2; '
              'exit 3;; esac; done; rm -rf %s %s; tar -xpf %s' % (prune, STAMP, allowed, ' '.join(RESTORED), LIBS, SNAPSHOT))
    for name in ctx['containers'].values():
        dexec(name, 'sh', '-c', script)


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
    """{name: Node as the API server returns it} of this lab's nodes."""
    return dict((node, emu.api.sanitize_for_serialization(emu.core.read_node(node))) for _h, _i, node in NODES)


def k8s_pods(emu):
    """[(node, owner name or pod name)] of this lab's pods that are not being deleted, sorted (node None: a pod no
    node took yet, e.g. an evicted pod's replacement while its node is cordoned)."""
    return sorted(((p.spec.node_name, owner_name(p)) for p in emu.core.list_namespaced_pod(NS).items
                   if p.metadata.deletion_timestamp is None), key=lambda t: (t[0] or '', t[1]))


def pod_uids(emu):
    """{(node, owner name): pod uid} of the pods on a node."""
    return dict(((p.spec.node_name, owner_name(p)), p.metadata.uid) for p in emu.core.list_namespaced_pod(NS).items
                if p.spec.node_name and p.metadata.deletion_timestamp is None)


def pod_of(emu, owner):
    """The name of the (not deleted) pod of ``owner``."""
    names = [p.metadata.name for p in emu.core.list_namespaced_pod(NS).items
             if owner_name(p) == owner and p.metadata.deletion_timestamp is None]
    assert len(names) == 1, (owner, names)
    return names[0]


def _logical(pod_name):
    """train-<node>-x7k2p -> train-<node> (a controller's generated pod name to its owner's name)."""
    for _h, _i, node in NODES:
        for prefix in ('train-', 'dp-', 'web-', 'held-'):
            if pod_name.startswith(prefix + node + '-'):
                return prefix + node
    return pod_name


def node_events(emu, since, end=None):
    """[(offset, node, 'mark'|'cordon'|'uncordon'|'unmark'|'evict', pod)] of the playbook's write requests (audit log,
    its own user) after mark ``since``, in order."""
    events = []
    if end is None:
        end = emu.mark()
    for i, e in enumerate(emu.kube.events(since, end, user=USER)):
        if e['verb'] not in ('create', 'update', 'patch', 'delete', 'deletecollection'):
            continue
        ref = e.get('objectRef') or {}
        body = e.get('requestObject') or {}
        if e['verb'] == 'patch' and ref.get('resource') == 'nodes' and not ref.get('subresource'):
            node = ref['name']
            if 'unschedulable' in (body.get('spec') or {}):
                events.append((i, node, 'cordon' if body['spec']['unschedulable'] else 'uncordon', None))
            else:
                marker = body['metadata']['annotations']['gpuops.io/driver-upgrade']
                events.append((i, node, 'mark' if marker else 'unmark', None))
        elif ref.get('subresource') == 'eviction':
            events.append((i, None, 'evict', _logical(ref['name'])))
        else:
            events.append((i, None, '%s %s' % (e['verb'], e['requestURI']), None))
    return events


def roll(node, evict=True):
    """The write requests the playbook sends for one node, in order."""
    return [('mark', node), ('cordon', node)] + ([('evict', 'train-%s' % node)] if evict else []) + \
        [('uncordon', node), ('unmark', node)]


def reseed_pods(emu):
    """Every train-<node> ReplicaSet's pod and every dp-<node> DaemonSet's pod Running and Ready on its node (the
    ReplicaSet controller replaced what was evicted; the scheduler placed it back after the uncordon)."""
    want = sorted([(n, 'dp-%s' % n) for _h, _i, n in NODES] + [(n, 'train-%s' % n) for _h, _i, n in NODES])

    def placed():
        got = sorted((p.spec.node_name, owner_name(p)) for p in emu.core.list_namespaced_pod(NS).items
                     if p.metadata.deletion_timestamp is None and p.status.phase == 'Running'
                     and owner_name(p).startswith(('dp-', 'train-')))
        return got == want and got
    wait_until('the train and dp pods Running on their nodes', placed, 90)


def upgrade(ctx, *extra):
    return playbook(ctx, os.path.join(ROOT, 'playbooks', 'upgrade_driver.yml'), '-e', 'gpuops_upgrade_driver_version=%s' % NEW,
                    '-e', 'gpuops_kubeconfig=%s' % ctx['emu'].kubeconfig, *extra)


def stand_down(lab):
    """Back to the start of a roll: every node on OLD, uncordoned and unmarked, the workload pods only, no PDB."""
    from kubernetes import client
    emu = lab['emu']
    for _h, _i, node in NODES:
        emu.core.patch_node(node, {'spec': {'unschedulable': None},
                                   'metadata': {'annotations': {'gpuops.io/driver-upgrade': None}}})
    for pdb in emu.policy.list_namespaced_pod_disruption_budget(NS).items:
        emu.policy.delete_namespaced_pod_disruption_budget(pdb.metadata.name, NS)
    for rs in emu.apps.list_namespaced_replica_set(NS).items:
        if not rs.metadata.name.startswith('train-'):
            emu.apps.delete_namespaced_replica_set(rs.metadata.name, NS, propagation_policy='Background')
    for p in emu.core.list_namespaced_pod(NS).items:
        if not owner_name(p).startswith(('train-', 'dp-')) or p.metadata.finalizers:
            if p.metadata.finalizers:
                emu.core.patch_namespaced_pod(p.metadata.name, NS, {'metadata': {'finalizers': None}})
            try:
                emu.core.delete_namespaced_pod(p.metadata.name, NS, grace_period_seconds=0)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
    # every node as the role left it on OLD in make_lab (the fault files, the simulator's inventory and state too);
    # a pass of the role back to OLD would take the runfile path every roll takes to NEW, at the cost of a roll
    restore(lab)
    for host in lab['containers']:
        assert reported_version(lab, host) == OLD and installed_versions(lab, host) == [OLD], host
    reseed_pods(emu)
    wait_until('only the train and dp pods left', lambda: all(
        o.startswith(('train-', 'dp-')) for _n, o in k8s_pods(emu)) and len(k8s_pods(emu)) == 2 * len(NODES), 60)


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
