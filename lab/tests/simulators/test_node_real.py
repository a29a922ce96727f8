"""A real node in the lab (issue #36): upstream's kubelet (kube-1.37 in `make test`, kube-1.34 in `make test-kube
KUBE_VERSION=1.34`) against containerd 2.3.4, its runc shim and Debian's runc, run by lab/node/node.py as a host
process tree in namespaces of its own, registered with the shared real control plane (lab/kube/real.py). Unlike the
kwok nodes, nothing on this Node is written by the lab: the kubelet registers it and reports its status, pulls nothing
(the images are the lab's, imported with ctr), starts the pod's containers through CRI and serves their logs.
lab/node/README.md lists what differs from a real node.

Isolation on the shared cluster: the Node and the namespace carry this process's pid; the Node has a NoSchedule taint
of its own that only this file's pods tolerate; the teardown stops the node (no process, mount or cgroup left,
asserted), deletes the Node object and the namespace.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/simulators/test_node_real.py
"""
from __future__ import annotations

import os
import sys

import pytest

from conftest import NODE_PY, real_node, wait_until as wait

sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-node-%s' % SUFFIX
NS = 'node-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-real-%s' % SUFFIX


@pytest.fixture(scope='module')
def node(kube_real, tmp_path_factory):
    """The real node, up once for the file; stopped, with its Node object deleted, at the end."""
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY) as state:
        core.create_namespace({'metadata': {'name': NS}})
        # a pod made before its namespace's default ServiceAccount exists is refused
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'state': state, 'core': core, 'kube': kube_real}
        finally:
            # while the kubelet runs: it stops the containers and the pods go (the namespace follows)
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)


def pod(name, command, **spec):
    """A host-network pod for this file's node (its taint tolerated), the lab's busybox image, never pulled."""
    body = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'namespace': NS},
            'spec': dict({'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                          'nodeSelector': {'kubernetes.io/hostname': NAME},
                          'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                          'terminationGracePeriodSeconds': 1,
                          'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                          'command': ['sh', '-c', command]}]}, **spec)}
    return body


def run_pod(node, body, timeout=120):
    """Create the pod, wait until it ended (Succeeded or Failed), return (pod, its container's log)."""
    core = node['core']
    core.create_namespaced_pod(NS, body)
    name = body['metadata']['name']

    def ended():
        p = core.read_namespaced_pod(name, NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    p = wait('pod %s ended' % name, ended, timeout)
    return p, core.read_namespaced_pod_log(name, NS, container='main')


def test_node_registered_by_its_kubelet(node):
    """The Node object is the kubelet's: its version, containerd's, the machine's address (a kubelet refuses a loopback
    node IP, which kwok nodes carry), Ready, the taint asked for; no GPU."""
    n = node['core'].read_node(NAME)
    info = n.status.node_info
    assert info.kubelet_version == 'v%s.%s' % (node['kube'].version, {'1.37': '2', '1.34': '4'}[node['kube'].version])
    assert info.container_runtime_version == 'containerd://2.3.4'   # CRI's version, without the tag's v
    assert [a.address for a in n.status.addresses if a.type == 'InternalIP'] == [lab_node.host_ip()]
    assert any(c.type == 'Ready' and c.status == 'True' for c in n.status.conditions)
    # the node-lifecycle controller takes node.kubernetes.io/not-ready off shortly after the kubelet says Ready
    want = [(TAINT_KEY, 'NoSchedule')]
    n = wait('taints of %s settled' % NAME, lambda: (lambda m: m if [(t.key, t.effect) for t in m.spec.taints or []]
                                                      == want else None)(node['core'].read_node(NAME)), 60)
    assert [(t.key, t.effect) for t in n.spec.taints or []] == want
    assert 'nvidia.com/gpu' not in n.status.allocatable
    assert n.metadata.annotations.get('kwok.x-k8s.io/node') is None
    assert int(n.status.allocatable['pods']) == 110


def test_pod_container_runs_and_logs(node):
    """The real scheduler places the pod, the kubelet starts its container through containerd and runc, and its log
    comes back through the API server from the kubelet."""
    p, log = run_pod(node, pod('hello', 'echo "hello from $(hostname) pid $$"; cat /proc/self/cgroup | grep memory'))
    assert p.status.phase == 'Succeeded', p.status
    assert p.spec.node_name == NAME
    cs = p.status.container_statuses[0]
    assert cs.state.terminated.exit_code == 0 and cs.image == lab_node.BUSYBOX_IMAGE, cs
    assert cs.container_id.startswith('containerd://')
    lines = log.splitlines()
    assert lines[0].startswith('hello from '), log
    # the container's memory cgroup is under the node's cgroup root, in the pod's QoS class (BestEffort)
    assert '/%s%s/kubepods/besteffort/pod%s/' % (lab_node.CGROUP_PREFIX, NAME, p.metadata.uid) in lines[1], log


def test_failing_container_is_reported(node):
    """An exit status other than 0 reaches the pod's status as the kubelet saw it."""
    p, log = run_pod(node, pod('fails', 'echo about to fail; exit 3'))
    assert p.status.phase == 'Failed'
    assert p.status.container_statuses[0].state.terminated.exit_code == 3
    assert log == 'about to fail\n'


def test_runc_wrapper_adds_the_proc_driver_hook_on_create_of_a_mig_node(tmp_path):
    """The node's runc wrapper (node.py RUNC_WRAPPER; no node needed: Debian's runc is replaced by echo): the
    oomScoreAdj clamp on every call; the createContainer hook that shows STATE/proc-driver at the container's
    /proc/driver only on `create` and only once the node has STATE/proc-driver/nvidia-caps/mig-minors (a MIG node),
    first in the list beside hooks already there (NVIDIA's runtime puts its CDI hooks there), added once."""
    import json
    import subprocess
    state = tmp_path / 'st'
    (state / 'bin').mkdir(parents=True)
    wrapper = state / 'bin' / 'runc'
    real_runc = lab_node.RUNC
    try:
        lab_node.RUNC = 'echo runc'
        wrapper.write_text(lab_node.runc_wrapper(str(state)))
    finally:
        lab_node.RUNC = real_runc
    wrapper.chmod(0o755)
    bundle = tmp_path / 'bundle'
    bundle.mkdir()
    hook = {'path': str(wrapper), 'args': ['runc', 'gpuops-lab-proc-driver', str(state / lab_node.PROC_DRIVER)]}

    def run(config, *args):
        (bundle / 'config.json').write_text(json.dumps(config, separators=(',', ':')))
        proc = subprocess.run([str(wrapper), '--root', '/run/x'] + list(args), capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.startswith('runc --root /run/x'), proc
        return json.loads((bundle / 'config.json').read_text())

    plain = {'ociVersion': '1.2.0', 'process': {'oomScoreAdj': -998}}
    create = ('create', '--bundle', str(bundle), 'cid')
    assert run(plain, *create) == {'ociVersion': '1.2.0', 'process': {'oomScoreAdj': 0}}   # no mig-minors: no hook
    minors = state / lab_node.PROC_DRIVER / 'nvidia-caps' / 'mig-minors'
    minors.parent.mkdir(parents=True)
    minors.write_text('config 1\n')
    assert run(plain, *create)['hooks'] == {'createContainer': [hook]}
    nvidia = {'path': '/usr/bin/nvidia-cdi-hook', 'args': ['nvidia-cdi-hook', 'update-ldcache']}
    got = run(dict(plain, hooks={'createContainer': [nvidia], 'poststop': [{'path': '/x'}]}), *create)['hooks']
    assert got == {'createContainer': [hook, nvidia], 'poststop': [{'path': '/x'}]}, got
    assert run(dict(plain, hooks={'poststop': [{'path': '/x'}]}), *create)['hooks'] == {
        'createContainer': [hook], 'poststop': [{'path': '/x'}]}
    assert run(dict(plain, hooks={'createContainer': [hook]}), *create)['hooks'] == {'createContainer': [hook]}
    assert 'hooks' not in run(plain, 'start', '--bundle', str(bundle), 'cid')   # only create
