"""Two DeviceClasses mapping one extended resource name (KEP-5004, DRAExtendedResource) on the lab's real
kube-scheduler v1.37.2, and the collection's refusal of that clash before it writes anything (rows DRAX-14, DRAX-15
of docs/conformance/dra-driver-nvidia-gpu.md).

* The oracle (DRAX-14): the subject is the scheduler's extended resource cache (k8s.io/dynamic-resource-allocation
  v0.37.2 deviceclass/extendedresourcecache), which maps an extended resource name to the DeviceClass that backs it,
  and noderesources Fit, which asks that cache. What the scheduler reads is the API server's objects: a kwok node,
  a ResourceSlice this file writes for it (a driver name of its own, so no other class selects its devices), the
  classes and the pods. No kubelet is needed: the scheduler binds the pods and makes their claims. It runs on a
  control plane of this file's own (conftest.private_kube), not on the lab's shared one: some of its steps assert
  that a Pending pod is NOT requeued, and on the shared plane any other test's Node Add requeues it once the cache
  maps the name again (noderesources Fit's isSchedulableAfterNodeChange queues on an Add that fits, and Fits leaves a
  DRA-backed name no node lists to the DRA plugin; the pod's nodeSelector is not Fit's concern; fit.go v1.37.2) -
  CI of stop 50 failed so.
* The refusal (DRAX-15): role gpu_sharing_stack for a dra pool refuses, before any write, when a DeviceClass that is
  neither the chart release's nor the collection's maps a name the release or the pool's classes map. The site class
  mapping nvidia.com/gpu is made on the same private plane (classes mapping nvidia.com/gpu must not reach the shared
  plane: they would disturb every other test's pods - that is the bug).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_extended_clash_real.py
"""
from __future__ import annotations

import os
import sys
import time

import pytest

from conftest import new_namespace, private_kube, wait_until as wait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_kwok_nodes import bare_node, plain_node  # noqa: E402
from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_real import failures, run_play, task_results  # noqa: E402

SUFFIX = '%d' % os.getpid()
NODE = 'lab-drax-clash-%s' % SUFFIX
NS = 'drax-clash-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-drax-clash-%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'clash-%s.lab.gpuops.io' % SUFFIX
RESOURCE = 'example.com/clash-%s' % SUFFIX
CLASS_A = 'clash-a-%s.lab.gpuops.io' % SUFFIX
CLASS_B = 'clash-b-%s.lab.gpuops.io' % SUFFIX
DEVICES = 12  # the test's five pods and its four sync pods (settled)
# how long a pod must stay Pending to count as "not requeued" (the scheduler acts on an event in milliseconds; the
# unschedulable pods are flushed only after 5 min, podMaxInUnschedulablePodsDuration)
SETTLE = 6


def device_class(name, resource=RESOURCE):
    return {'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'DeviceClass', 'metadata': {'name': name},
            'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s'" % DRIVER}}],
                     'extendedResourceName': resource}}


def create_newer(co, body, than=None):
    """Create a class whose creationTimestamp (whole seconds) is later than ``than``'s: the cache orders clashing
    classes by it, and by name on a tie."""
    if than is not None:
        ts = co.get_cluster_custom_object(GROUP, VERSION, 'deviceclasses', than)['metadata']['creationTimestamp']
        while time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()) <= ts:
            time.sleep(0.1)
    return co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', body)


def delete_class(co, name):
    from kubernetes.client import ApiException
    try:
        co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture(scope='module')
def plane(tmp_path_factory):
    """This file's own 1.37 control plane (both tests run in one xdist worker: --dist loadfile)."""
    with private_kube(tmp_path_factory.mktemp('kube-clash'), '1.37') as kube:
        assert kube.version.startswith('1.37'), kube.version
        yield kube


@pytest.fixture
def clash(plane):
    """A tainted node with a ResourceSlice of DEVICES devices of this file's driver, and a namespace; all removed
    after the test."""
    from kubernetes import client
    api = plane.api()
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    node = core.create_node(plain_node(NODE, taints=[{'key': TAINT_KEY, 'effect': 'NoSchedule'}]))
    new_namespace(core, NS)
    co.create_cluster_custom_object(GROUP, VERSION, 'resourceslices', {
        'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'ResourceSlice',
        'metadata': {'name': 'clash-%s' % SUFFIX,
                     'ownerReferences': [{'apiVersion': 'v1', 'kind': 'Node', 'name': NODE,
                                          'uid': node.metadata.uid, 'controller': True}]},
        'spec': {'driver': DRIVER, 'nodeName': NODE, 'pool': {'name': NODE, 'generation': 1, 'resourceSliceCount': 1},
                 'devices': [{'name': 'dev-%d' % i} for i in range(DEVICES)]}})
    sync = []
    try:
        yield {'core': core, 'co': co, 'sync': sync}
    finally:
        for name in [CLASS_A, CLASS_B] + sync:
            delete_class(co, name)
        core.delete_namespace(NS)
        co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', 'clash-%s' % SUFFIX)
        core.delete_node(NODE)


def make_pod(core, name, resource=RESOURCE):
    core.create_namespaced_pod(NS, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name},
        'spec': {'nodeSelector': {'kubernetes.io/hostname': NODE}, 'terminationGracePeriodSeconds': 0,
                 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'containers': [{'name': 'main', 'image': 'registry.invalid/clash:1',
                                 'resources': {'limits': {resource: '1'}}}]}})


def settled(clash, tag):
    """Return once kube-scheduler's extended resource cache has taken every DeviceClass event made before: a class
    of its own (an extended resource name of its own, no clash) is created and a pod asking that name is bound through
    it. The scheduler's DeviceClass informer hands the cache its events in order, so the earlier Adds, Updates and
    Deletes were taken first (a sleep instead would be a race with a loaded scheduler)."""
    name, resource = 'sync-%s-%s.lab.gpuops.io' % (tag, SUFFIX), 'example.com/sync-%s-%s' % (tag, SUFFIX)
    clash['co'].create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', device_class(name, resource))
    clash['sync'].append(name)
    make_pod(clash['core'], 'sync-%s' % tag, resource)
    assert scheduled_class(clash, 'sync-%s' % tag) == name


def scheduled_class(dra, name, timeout=60):
    """Wait until pod ``name`` is bound; the DeviceClass its scheduler-made claim's request names."""
    core, co = dra['core'], dra['co']

    def bound():
        p = core.read_namespaced_pod(name, NS)
        st = p.status.extended_resource_claim_status
        return (p.spec.node_name, st.resource_claim_name) if p.spec.node_name and st else None
    node, claim_name = wait('pod %s bound with its extended resource claim' % name, bound, timeout)
    assert node == NODE
    claim = co.get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims', claim_name)
    [req] = claim['spec']['devices']['requests']
    return req['exactly']['deviceClassName']


def unschedulable(core, name):
    """The PodScheduled=False message of pod ``name``, or None while it has none."""
    p = core.read_namespaced_pod(name, NS)
    for c in p.status.conditions or []:
        if c.type == 'PodScheduled' and c.status == 'False':
            return c.message
    return None


def pending_for(core, name, seconds):
    """Assert pod ``name`` stays unbound for ``seconds``; its last PodScheduled=False message."""
    end = time.time() + seconds
    msg = None
    while time.time() < end:
        p = core.read_namespaced_pod(name, NS)
        assert not p.spec.node_name, 'pod %s was scheduled (to %s)' % (name, p.spec.node_name)
        msg = unschedulable(core, name) or msg
        time.sleep(0.3)
    return msg


def mapping(co, name):
    return co.get_cluster_custom_object(GROUP, VERSION, 'deviceclasses', name)['spec'].get('extendedResourceName')


def test_DRAX_14_deleting_either_clashing_class_drops_the_mapping_of_both(clash):
    """kube-scheduler v1.37.2: with classes A (older) and B (newer) mapping one name, a pod asking the name gets a
    device through B. Deleting B leaves A mapping the name, yet a new pod asking it stays Pending with Fit's
    "Insufficient <name>"; an annotation-only Update of A does not requeue it, but (the cache takes A back on any
    Update of A) a pod created afterwards is scheduled through A; an Update of A that moves its extendedResourceName
    away and back requeues the Pending pod, which is then scheduled through A. The other order: with B created again
    (newer, the cache's pick), deleting A - the class the cache did not pick - drops the mapping too; re-creating A
    (an Add) restores it and requeues the Pending pod. Each step fails if upstream changes (kubernetes#141103, fixed
    on master by #141110: then revisit DRAX-14 and the collection's refusal, DRAX-15)."""
    core, co = clash['core'], clash['co']
    insufficient = 'Insufficient %s' % RESOURCE
    create_newer(co, device_class(CLASS_A))
    create_newer(co, device_class(CLASS_B), than=CLASS_A)
    settled(clash, 'a')
    # (a) the newer class backs the name
    make_pod(core, 'p1')
    assert scheduled_class(clash, 'p1') == CLASS_B
    # (b) B deleted: A still maps the name, the scheduler does not
    delete_class(co, CLASS_B)
    settled(clash, 'b')
    assert mapping(co, CLASS_A) == RESOURCE
    make_pod(core, 'p2')
    msg = wait('p2 unschedulable', lambda: unschedulable(core, 'p2'), 30)
    assert insufficient in msg, msg
    # (c) an annotation-only Update of A: p2 is not requeued (Fit's hint skips an unchanged extendedResourceName) ...
    co.patch_cluster_custom_object(GROUP, VERSION, 'deviceclasses', CLASS_A,
                                   {'metadata': {'annotations': {'lab.gpuops.io/touch': SUFFIX}}})
    msg = pending_for(core, 'p2', SETTLE)
    assert insufficient in msg, msg
    # ... yet the cache took A back: a new pod is scheduled through A while p2 waits
    make_pod(core, 'p3')
    assert scheduled_class(clash, 'p3') == CLASS_A
    pending_for(core, 'p2', 2)
    # the extendedResourceName moved away and back: p2 requeued and scheduled through A
    for name in ('example.com/clash-away-%s' % SUFFIX, RESOURCE):
        co.patch_cluster_custom_object(GROUP, VERSION, 'deviceclasses', CLASS_A, {'spec': {'extendedResourceName': name}})
    assert scheduled_class(clash, 'p2') == CLASS_A
    # the other order: B again (newer: the cache's pick), then A - the class the cache did not pick - deleted
    create_newer(co, device_class(CLASS_B), than=CLASS_A)
    settled(clash, 'c')
    make_pod(core, 'p4')
    assert scheduled_class(clash, 'p4') == CLASS_B
    delete_class(co, CLASS_A)
    settled(clash, 'd')
    assert mapping(co, CLASS_B) == RESOURCE
    make_pod(core, 'p5')
    msg = wait('p5 unschedulable', lambda: unschedulable(core, 'p5'), 30)
    assert insufficient in msg, msg
    pending_for(core, 'p5', 2)
    # re-creating A (an Add; newer than B now): the mapping is back and p5 requeued, through A
    create_newer(co, device_class(CLASS_A), than=CLASS_B)
    assert scheduled_class(clash, 'p5') == CLASS_A


# ---------------------------------------------------------------------------------------------- the refusal (DRAX-15)
ROLE_NODE = 'drax-clash-role-%s' % SUFFIX
ROLE_POOL = 'drax-clash-%s' % SUFFIX
SITE_GPU = 'site-gpu-%s.example.com' % SUFFIX
SITE_SHARED = 'site-shared-%s.example.com' % SUFFIX
SHARED_CLASS = 'gpu.shared.nvidia.com.extended.gpuops.io'


def role_vars(state='present', accept=()):
    """A dra pool with a time-sliced nvidia.com/gpu.shared class, as cluster.yml runs it (no Helm install); the
    Kubernetes version and the DeviceClasses are read from the API server."""
    return {'gpu_sharing_stack_strategy': 'dra', 'gpu_sharing_stack_state': state, 'gpu_sharing_stack_pool': ROLE_POOL,
            'gpu_sharing_stack_nodes': [ROLE_NODE], 'gpu_sharing_stack_facts': {ROLE_NODE: T4},
            'gpu_sharing_stack_helm_install': False,
            'gpu_sharing_stack_dra': {
                'chart_path': '/srv/charts/dra-driver-nvidia-gpu-0.5.0.tgz', 'chart_version': '0.5.0',
                'assume_cdi_enabled': True, 'feature_gates': {'TimeSlicingSettings': True},
                'extended_resources': [{'name': 'nvidia.com/gpu.shared', 'kind': 'time-slicing'}],
                'workload_resources': ['nvidia.com/gpu', 'nvidia.com/gpu.shared'],
                'accept_extended_resource_classes': list(accept)}}


def test_DRAX_15_role_refuses_a_site_class_mapping_a_name_of_ours_before_any_write(plane, collections_path,
                                                                                    tmp_path_factory):
    """On the 1.37 control plane of this file's own (classes mapping nvidia.com/gpu must not reach the shared plane):
    two classes of the site's map nvidia.com/gpu and nvidia.com/gpu.shared. Role gpu_sharing_stack for a dra pool
    (the chart's gpu.nvidia.com maps nvidia.com/gpu, the pool's extended_resources nvidia.com/gpu.shared) reads the
    DeviceClasses and refuses, naming both classes, both names and the variables, and writes nothing. With both
    classes in accept_extended_resource_classes the check-mode run passes and names them in its notes; a check-mode
    removal with the chart's class present warns that deleting it drops the scheduler's mapping for the site's class."""
    from kubernetes import client
    kube = plane
    api = kube.api()
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_node(bare_node(ROLE_NODE, 't4x1', facts=T4))
    co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', device_class(SITE_GPU, 'nvidia.com/gpu'))
    co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses',
                                    device_class(SITE_SHARED, 'nvidia.com/gpu.shared'))
    user = 'gpuops-test-drax-clash-%s' % SUFFIX
    cl = (kube, kube.user(user, reads=True))
    start = kube.mark()
    rc, result = run_play(cl, tmp_path_factory.mktemp('play-refused'),
                          [{'name': 'present', 'block': stack_steps(role_vars())}])
    end = kube.mark()
    assert rc != 0
    [(task, msg)] = failures(result)
    assert 'Render the stack' in task, (task, msg)
    for words in ('DeviceClass %s maps nvidia.com/gpu (spec.extendedResourceName), which gpu_sharing_stack_strategy '
                  'dra (its chart\'s DeviceClass gpu.nvidia.com maps nvidia.com/gpu' % SITE_GPU,
                  'DeviceClass %s maps nvidia.com/gpu.shared (spec.extendedResourceName), which '
                  'gpu_sharing_stack_dra.extended_resources[0] maps too (DeviceClass %s): this run would create '
                  '%s, the newer class' % (SITE_SHARED, SHARED_CLASS, SHARED_CLASS),
                  'kubernetes/kubernetes#141103', 'Nothing was changed',
                  'gpu_sharing_stack_dra.accept_extended_resource_classes'):
        assert words in msg, (words, msg)
    assert kube.writes(start, end, user=user) == []
    reads = kube.requests(start, end, user=user)
    assert ('list', '/apis/resource.k8s.io/v1/deviceclasses', 200) in reads, reads
    # accepted by name: the check-mode run goes through and says so; then a check-mode removal with the chart's
    # class present (a stand-in named as the chart names it: this plane runs no release) warns
    co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', device_class('gpu.nvidia.com', 'nvidia.com/gpu'))
    start = kube.mark()
    rc, result = run_play(cl, tmp_path_factory.mktemp('play-accepted'), [
        {'name': 'present', 'check_mode': True,
         'block': stack_steps(role_vars(accept=(SITE_GPU, SITE_SHARED)))},
        {'name': 'absent', 'check_mode': True, 'block': stack_steps(role_vars('absent'))}])
    end = kube.mark()
    assert rc == 0, failures(result)
    present, absent = [r for n, r in task_results(result) if 'Render the stack' in n]
    notes = [n for n in present['notes'] if 'accept_extended_resource_classes' in n]
    assert [n.split(' maps ')[0] for n in notes] == ['gpu_sharing_stack_dra: DeviceClass %s' % SITE_GPU,
                                                     'gpu_sharing_stack_dra: DeviceClass %s' % SITE_SHARED], notes
    [warning] = [w for w in absent.get('warnings') or [] if 'Removing pool' in w]
    assert warning.startswith(
        "Removing pool %s deletes DeviceClass gpu.nvidia.com (the chart's, removed with the Helm release by the "
        "last dra pool), which maps nvidia.com/gpu like the site's DeviceClass %s" % (ROLE_POOL, SITE_GPU)), warning
    assert 'Afterwards restart kube-scheduler' in warning
    assert kube.writes(start, end, user=user) == []
