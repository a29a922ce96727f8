"""The lab's real control plane (lab/kube/real.py): upstream kube-apiserver, kube-controller-manager, kube-scheduler,
etcd and kwok answer as a cluster should - TLS with the lab's CA, client-certificate and ServiceAccount token
authentication, RBAC and Node authorization, admission, the audit log that counts writes, kwok GPU nodes that are
Ready, the scheduler placing a GPU pod, the DaemonSet controller placing pods - and `down` leaves no process.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/simulators/test_kube_real.py
The cluster is the shared one (conftest.kube_real); nothing skips: a control plane that cannot be built or started
fails these tests with real.py's message.
"""
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import KUBE, ROOT, VENV_BIN, KubeReal, new_namespace, sh, wait_until as wait

NS = 'real-smoke-%d' % os.getpid()
USER = 'gpuops-test-real-smoke-%d' % os.getpid()


@pytest.fixture(scope='module')
def cl(kube_real):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    new_namespace(core, NS)  # and its default ServiceAccount: a test creating pods first would race the controller
    yield kube_real
    core.delete_namespace(NS)


def expected_version(minor):
    with open(os.path.join(ROOT, 'lab', 'go', 'kube-%s' % minor, 'version.ldflags')) as f:
        words = f.read().split()
    return [w.split('=', 1)[1] for w in words if w.startswith('k8s.io/component-base/version.gitVersion=')][0]


def test_version_tls_and_anonymous(cl):
    from kubernetes import client
    info = client.VersionApi(cl.api()).get_code()
    assert info.git_version == expected_version(cl.version)
    # serving certificate signed by the lab CA: a client without that CA refuses the server
    with pytest.raises(urllib.error.URLError) as exc:
        urllib.request.urlopen(cl.server + '/version', timeout=5)
    assert 'CERTIFICATE_VERIFY_FAILED' in str(exc.value)
    # anonymous (CA trusted, no client certificate): authenticated as system:anonymous, denied by RBAC
    ctx = ssl.create_default_context(cafile=cl.ca)
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(cl.server + '/api/v1/nodes', context=ctx, timeout=5)
    assert exc.value.code == 403
    assert 'system:anonymous' in exc.value.read().decode()


def test_rbac_and_node_authorizer(cl):
    from kubernetes import client
    authz = client.AuthorizationV1Api(cl.api())

    def allowed(user, groups, verb, resource, name=None, namespace=None, subresource=None):
        ra = {'verb': verb, 'resource': resource, 'group': ''}
        for k, v in (('name', name), ('namespace', namespace), ('subresource', subresource)):
            if v:
                ra[k] = v
        rev = authz.create_subject_access_review({'spec': {'user': user, 'groups': groups, 'resourceAttributes': ra}})
        return rev.status.allowed
    # a user without bindings is denied; system:masters is allowed
    assert not allowed('nobody', ['system:authenticated'], 'list', 'nodes')
    assert allowed('root', ['system:masters'], 'delete', 'nodes')
    # the Node authorizer: a kubelet may update its own node's status, not read an unrelated secret
    node = 'system:node:kwok-t4-1'
    assert allowed(node, ['system:nodes', 'system:authenticated'], 'patch', 'nodes', 'kwok-t4-1', subresource='status')
    assert not allowed(node, ['system:nodes', 'system:authenticated'], 'get', 'secrets', 'x', NS)
    # the bootstrap roles the controller manager's ServiceAccounts use exist
    rbac = client.RbacAuthorizationV1Api(cl.api())
    assert rbac.read_cluster_role('system:controller:daemon-set-controller').rules
    # a client-certificate user of no group: its kubeconfig works, RBAC denies it
    kc = cl.user('gpuops-test-nogroup', groups=())
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(cl.api(kc)).list_node()
    assert exc.value.status == 403 and 'gpuops-test-nogroup' in exc.value.body


def test_serviceaccount_token_signer_and_controllers(cl):
    """The ServiceAccount controller and root-CA publisher run; a TokenRequest token authenticates as the account."""
    from kubernetes import client
    core = client.CoreV1Api(cl.api())
    wait('default ServiceAccount in %s' % NS, lambda: [s for s in core.list_namespaced_service_account(NS).items
                                                        if s.metadata.name == 'default'])
    wait('kube-root-ca.crt in %s' % NS, lambda: [c for c in core.list_namespaced_config_map(NS).items
                                                  if c.metadata.name == 'kube-root-ca.crt'])
    tok = core.create_namespaced_service_account_token('default', NS, {'spec': {'expirationSeconds': 600}})
    conf = client.Configuration()
    conf.host = cl.server
    conf.ssl_ca_cert = cl.ca
    conf.api_key = {'authorization': 'Bearer ' + tok.status.token}
    review = client.AuthenticationV1Api(client.ApiClient(conf)).create_self_subject_review({})
    assert review.status.user_info.username == 'system:serviceaccount:%s:default' % NS


def test_admission_defaults_and_rejects(cl):
    """Admission and validation are upstream's: defaulting fills a pod; privileged pods are allowed (as kubeadm and
    RKE2 run the API server); a pod asking for a fraction of nvidia.com/gpu is refused."""
    from kubernetes import client
    core = client.CoreV1Api(cl.api())
    pod = {'metadata': {'name': 'frac'}, 'spec': {'containers': [{'name': 'c', 'image': 'x', 'resources': {
        'limits': {'nvidia.com/gpu': '500m'}}}]}}
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod(NS, pod, dry_run='All')
    assert exc.value.status == 422 and 'nvidia.com/gpu' in exc.value.body
    ok = core.create_namespaced_pod(NS, {'metadata': {'name': 'priv'}, 'spec': {'containers': [{
        'name': 'c', 'image': 'x', 'securityContext': {'privileged': True}}]}}, dry_run='All')
    assert ok.spec.containers[0].termination_message_path == '/dev/termination-log'
    assert ok.spec.service_account_name == 'default' and ok.spec.enable_service_links is True


def test_audit_log_counts_writes_of_one_user(cl):
    from kubernetes import client
    kc = cl.user(USER)
    core = client.CoreV1Api(cl.api(kc))
    m0 = cl.mark()
    core.create_namespaced_config_map(NS, {'metadata': {'name': 'a'}, 'data': {'k': 'v'}})
    core.create_namespaced_config_map(NS, {'metadata': {'name': 'b'}}, dry_run='All')
    core.read_namespaced_config_map('a', NS)
    core.patch_namespaced_config_map('a', NS, {'data': {'k': 'v'}})  # a no-op patch is still a write request
    core.delete_namespaced_config_map('a', NS)
    m1 = cl.mark()
    writes = cl.writes(m0, m1, user=USER)
    assert [w[0] for w in writes] == ['create', 'patch', 'delete'], writes
    assert writes[0][1] == '/api/v1/namespaces/%s/configmaps' % NS and writes[0][2] == 201
    # the dry run is logged but not counted; the read is not logged
    evs = cl.events(m0, m1, user=USER)
    assert len(evs) == 4 and any('dryRun=All' in e['requestURI'] for e in evs)
    # the request body is kept (level Request): the write can be inspected
    assert [e for e in evs if e['verb'] == 'create' and 'dryRun' not in e['requestURI']][0]['requestObject']['data'] \
        == {'k': 'v'}


def test_audit_log_records_every_request_of_the_reads_group(cl):
    """A user made with reads=True (group gpuops:audit-reads): its reads are in the audit log too (Metadata level),
    so a test can show that a run read only what it should, or made no request at all."""
    from kubernetes import client
    name = USER + '-reads'
    core = client.CoreV1Api(cl.api(cl.user(name, reads=True)))
    m0 = cl.mark()
    core.list_namespaced_config_map(NS, label_selector='a=b')
    core.read_namespace(NS)
    m1 = cl.mark()
    assert [(v, u.split('?')[0], c) for v, u, c in cl.requests(m0, m1, user=name)] == [
        ('list', '/api/v1/namespaces/%s/configmaps' % NS, 200), ('get', '/api/v1/namespaces/%s' % NS, 200)]
    assert cl.writes(m0, m1, user=name) == []
    assert cl.requests(m1, cl.mark(), user=name) == []


def test_kwok_gpu_nodes_scheduler_and_daemonset(cl):
    """kwok's GPU nodes, MIG ones included (real.MIG_NODES), are Ready with the extended resources and labels of their
    recorded shape (lab/node/recordings/gpu-nodes.json: what a real lab node published); the scheduler places a pod
    asking for 8 GPUs on a node with 8 whole GPUs or more, kwok runs it; the DaemonSet controller places one pod on
    each node of the selector and nowhere else."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
    import real  # noqa: E402  (lab/kube)
    from kubernetes import client
    core = client.CoreV1Api(cl.api())
    apps = client.AppsV1Api(cl.api())
    nodes = {n.metadata.name: n for n in core.list_node(label_selector='gpuops.io/lab=real').items}
    shapes = dict(real.RECORDED_NODES, **real.MIG_NODES)
    assert set(nodes) >= set(shapes) == {'kwok-t4-1', 'kwok-t4-2', 'kwok-a100-1', 'kwok-h100-1', 'kwok-a100-mig-1',
                                         'kwok-h100-mig-1'}
    recorded = real.load_recording()['shapes']
    for name, shape in sorted(shapes.items()):
        n, rec = nodes[name], recorded[shape]
        assert [c.status for c in n.status.conditions if c.type == 'Ready'] == ['True'], name
        assert {k: n.status.allocatable.get(k) for k in rec['allocatable']} == rec['allocatable'], name
        assert {k: n.metadata.labels.get(k) for k in rec['labels']} == rec['labels'], name
    # the MIG nodes as the recording has them: single - nvidia.com/gpu counts MIG devices (8 x 7); mixed - one
    # resource per profile, no nvidia.com/gpu
    assert nodes['kwok-a100-mig-1'].status.allocatable['nvidia.com/gpu'] == '56'
    assert nodes['kwok-a100-mig-1'].metadata.labels['nvidia.com/mig.strategy'] == 'single'
    mixed = nodes['kwok-h100-mig-1']
    assert 'nvidia.com/gpu' not in mixed.status.allocatable and mixed.metadata.labels['nvidia.com/mig.strategy'] == 'mixed'
    assert {k: v for k, v in mixed.status.allocatable.items() if k.startswith('nvidia.com/mig-')} == {
        'nvidia.com/mig-1g.10gb': '2', 'nvidia.com/mig-3g.40gb': '1'}
    # only the lab's kwok GPU nodes: other tests on the shared cluster add nodes of their own, and real lab nodes
    # whose GFD writes the same product label (a T4 node of another test once made this DaemonSet want 3 pods)
    core.create_namespaced_pod(NS, {'metadata': {'name': 'eight'}, 'spec': {
        'nodeSelector': {'gpuops.io/lab': 'real'},
        'tolerations': [{'key': 'kwok.x-k8s.io/node', 'operator': 'Exists'}],
        'containers': [{'name': 'c', 'image': 'registry.example.com/cuda:12', 'resources': {
            'limits': {'nvidia.com/gpu': '8'}}}]}})
    pod = wait('pod eight Running and Ready', lambda: (lambda p: p if p.status.phase == 'Running' and any(
        c.type == 'Ready' and c.status == 'True' for c in p.status.conditions or []) else None)(
        core.read_namespaced_pod('eight', NS)))
    assert pod.spec.node_name in ('kwok-a100-1', 'kwok-h100-1', 'kwok-a100-mig-1')
    ds = {'metadata': {'name': 't4-only'}, 'spec': {
        'selector': {'matchLabels': {'app': 't4-only'}},
        'template': {'metadata': {'labels': {'app': 't4-only'}}, 'spec': {
            'nodeSelector': {'nvidia.com/gpu.product': 'Tesla-T4', 'gpuops.io/lab': 'real'},
            'containers': [{'name': 'c', 'image': 'registry.example.com/x:1'}]}}}}
    apps.create_namespaced_daemon_set(NS, ds)
    wait('DaemonSet t4-only ready on both T4 nodes', lambda: (lambda d: d.status.number_ready == 2 and
                                                               d.status.desired_number_scheduled == 2)(
        apps.read_namespaced_daemon_set('t4-only', NS)))
    pods = core.list_namespaced_pod(NS, label_selector='app=t4-only').items
    assert sorted(p.spec.node_name for p in pods) == ['kwok-t4-1', 'kwok-t4-2']


def test_dra_kwok_nodes_are_dra_nodes_only(cl):
    """The kwok nodes of dra pools (real.DRA_NODES; issue #36 section 3) are Ready, carry the node layer's labels of
    their recorded shape and no nvidia.com/* extended resource (no device plugin runs beside NVIDIA's DRA kubelet
    plugin), and the slice the lab publishes for each (dra_slices.LAB_NODES) comes from its shape's inventory: before,
    kwok-t4-1 published nvidia.com/gpu and a DRA slice of the same GPU, and kwok-h100-1 (8 whole H100s) the slice of
    two H100s in MIG mode."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
    import dra_slices  # noqa: E402  (lab/kube)
    import real  # noqa: E402  (lab/kube)
    from kubernetes import client
    core = client.CoreV1Api(cl.api())
    nodes = {n.metadata.name: n for n in core.list_node(label_selector='gpuops.io/lab=real-dra').items}
    assert set(nodes) == set(real.DRA_NODES) == set(dra_slices.LAB_NODES)
    assert not set(real.DRA_NODES) & (set(real.GPU_NODES) | set(real.MIG_NODES))
    recorded = real.load_recording()['shapes']
    for name, shape in sorted(real.DRA_NODES.items()):
        n, rec = nodes[name], recorded[shape]
        assert [c.status for c in n.status.conditions if c.type == 'Ready'] == ['True'], name
        assert [k for k in n.status.allocatable if k.startswith('nvidia.com/')] == [], name
        assert {k: n.metadata.labels.get(k) for k in real.SHAPE_LABELS} == {
            k: rec['labels'].get(k) for k in real.SHAPE_LABELS}, name
        assert dra_slices.LAB_NODES[name] == real.RECORDED_SHAPES[shape][0], name


def test_up_down_leaves_no_process(tmp_path):
    """A second control plane in its own state directory: `down` stops the supervisor and every program it started."""
    state = tmp_path / 'cp'
    sh(os.path.join(VENV_BIN, 'python'), os.path.join(KUBE, 'real.py'), 'up', '--state', state, '--no-gpu-nodes',
       '--owner-pid', os.getpid(), timeout=600)
    other = KubeReal(state)
    ready = json.loads((state / 'ready').read_text())
    pids = [ready['pid']] + list(ready['pids'].values())
    assert sorted(ready['pids']) == ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok']
    for pid in pids:
        os.kill(pid, 0)
    from kubernetes import client
    assert client.VersionApi(other.api()).get_code().git_version == expected_version(other.version)
    sh(os.path.join(VENV_BIN, 'python'), os.path.join(KUBE, 'real.py'), 'down', '--state', state, timeout=60)
    left = [pid for pid in pids if os.path.exists('/proc/%d' % pid) and
            open('/proc/%d/stat' % pid).read().split(') ', 1)[1].split()[0] != 'Z']
    assert left == []
    out = subprocess.run(['pgrep', '-f', str(state)], capture_output=True, text=True)
    assert out.stdout.strip() == ''
