"""Extended resources backed by DRA (Kubernetes KEP-5004, feature gate DRAExtendedResource; issue #40) on the lab's
real control planes and a real node: a pod asking plain ``nvidia.com/gpu: 1`` (or ``nvidia.com/gpu.shared: 1``) with
no ResourceClaim in its spec gets a DRA device of NVIDIA's kubelet plugin, its container sees it, and the report
counts it once.

* Facts (rows DRAX-01, DRAX-02 of docs/conformance/dra-driver-nvidia-gpu.md): the gate's stage and state as each API
  server reports it (its kubernetes_feature_enabled metric), and whether a DeviceClass's spec.extendedResourceName
  survives a round trip: on the shared 1.37 control plane, and on a 1.34 control plane of this file's own
  (conftest.private_kube; the 1.34 set of lab/go/kube-1.34 is the one the lab builds).
* The classes are the collection's (stacks/dra.extended_resource_classes) plus, for nvidia.com/gpu, the chart's
  own gpu.nvidia.com class as deviceclass-gpu.yaml of dra-driver-nvidia-gpu v0.5.0 renders it on resource.k8s.io/v1,
  under a name with this file's pid: the chart's release belongs to test_dra_real.py on the shared cluster.
* The node is a real one (conftest.real_node: kubelet + containerd + runc) with gpu-kubelet-plugin v0.5.0 on the NVML
  simulator (as test_node_dra_real.py), its TimeSlicingSettings gate on, and an nvidia-smi of the lab's that records
  the calls the plugin makes (there is no GPU: the call is what the driver would do to one). The last test restarts
  the plugin on the node with h100-mig.json (a plain nvidia.com/mig-1g.10gb pod prepared on a MIG device), then the
  T4 one again.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_extended_real.py
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import (KUBE, LAB_GPU_CLASS, NODE_PY, gpu_extended_mapping, lab_collections_path, private_kube, real_node,
                      run_module, wait_until as wait)

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dra_slices  # noqa: E402  (lab/kube)
import node as lab_node  # noqa: E402  (lab/node)
import yaml  # noqa: E402
lab_collections_path(importable=True)   # test_gpu_sharing_stack_dra_real imports the collection's Python at import
from test_dra_real import _collection_dra, _wait_alone  # noqa: E402
from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_real import failures, live_object, rendered, run_play, task_results  # noqa: E402
from gpu_kwok_nodes import bare_node  # noqa: E402  (recorded nodes before their stack)
from dra_node_plugin import DraPlugin, cap_minor  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-drax-node-%s' % SUFFIX
NS = 'drax-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-drax-real-%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
INVENTORY = 't4.json'
GATE = 'DRAExtendedResource'
# the classes that map nvidia.com/gpu on the shared plane, both with the selector of the chart's gpu.nvidia.com
# (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml, v0.5.0, resourceApiVersion resource.k8s.io/v1):
# the lab's one shared class (conftest.gpu_extended_mapping: no file makes and deletes one of its own, kubernetes#141103)
# and the chart's own while test_dra_real.py's release is installed; the scheduler takes the newer
GPU_CLASSES = (LAB_GPU_CLASS, 'gpu.nvidia.com')
EXTENDED = [{'name': 'nvidia.com/gpu.shared', 'kind': 'time-slicing', 'interval': 'Long'},
            {'name': 'nvidia.com/mig-1g.10gb', 'kind': 'mig'}]


def feature_metric(kube, gate=GATE):
    """The API server's kubernetes_feature_enabled line of ``gate``: (stage, value)."""
    api = kube.api()
    resp = api.rest_client.request('GET', api.configuration.host + '/metrics')
    resp.read()
    for line in resp.data.decode().splitlines():
        if line.startswith('kubernetes_feature_enabled{') and 'name="%s"' % gate in line:
            labels, value = line.rsplit(' ', 1)
            stage = labels.split('stage="', 1)[1].split('"', 1)[0]
            return stage, int(value)
    return None


def device_class(name, ern):
    return {'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'DeviceClass', 'metadata': {'name': name},
            'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s' && device.attributes['%s'].type == "
                                                          "'gpu'" % (DRIVER, DRIVER)}}],
                     'extendedResourceName': ern}}


def round_trip(kube, name):
    """Create a DeviceClass naming an extended resource and read it back: what the server kept of the name."""
    from kubernetes import client
    co = client.CustomObjectsApi(kube.api())
    co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', device_class(name, 'example.com/%s' % name[:40]))
    try:
        return co.get_cluster_custom_object(GROUP, VERSION, 'deviceclasses', name)['spec'].get('extendedResourceName')
    finally:
        co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', name)


def test_DRAX_01_gate_ga_on_1_37_and_the_name_kept(kube_real):
    """1.37: the gate is GA (the metric's stage is empty for GA) and on; a DeviceClass keeps extendedResourceName."""
    assert kube_real.version.startswith('1.37')
    assert feature_metric(kube_real) == ('', 1)
    assert round_trip(kube_real, 'drax-probe-%s' % SUFFIX) == 'example.com/drax-probe-%s' % SUFFIX


def test_DRAX_04_collection_classes_pass_the_servers_validation(kube_real):
    """The collection's classes (a time-sliced nvidia.com/gpu.shared with its GpuConfig, a MIG profile with its CEL
    selector) pass the 1.37 server's validation (CEL compiled) with strict field validation, unchanged."""
    from kubernetes import client
    co = client.CustomObjectsApi(kube_real.api())
    objs = _collection_dra().extended_resource_classes(EXTENDED, gates={'TimeSlicingSettings': True}, minor=37)
    assert [o['spec']['extendedResourceName'] for o in objs] == ['nvidia.com/gpu.shared', 'nvidia.com/mig-1g.10gb']
    for obj in objs:
        got = co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', obj, dry_run='All',
                                              field_validation='Strict')
        assert got['spec'] == obj['spec']


def test_DRAX_05_the_server_accepts_two_classes_mapping_one_name(kube_real):
    """The API server does not refuse a second DeviceClass with the same extendedResourceName (the scheduler then
    takes the newer one): the collection has to refuse it itself."""
    from kubernetes import client
    co = client.CustomObjectsApi(kube_real.api())
    a, b = ('drax-dup-a-%s' % SUFFIX, 'drax-dup-b-%s' % SUFFIX)
    co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', device_class(a, 'example.com/dup-%s' % SUFFIX))
    try:
        got = co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses',
                                              device_class(b, 'example.com/dup-%s' % SUFFIX), dry_run='All')
        assert got['spec']['extendedResourceName'] == 'example.com/dup-%s' % SUFFIX
    finally:
        co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', a)


ROLE_NODE = 'drax-role-%s' % SUFFIX
ROLE_POOL = 'drax-role-%s' % SUFFIX


def role_vars(state='present', extended=EXTENDED[:1]):
    """A dra pool with extended resources, as cluster.yml runs it (no Helm install: the chart's release belongs to
    test_dra_real.py); the Kubernetes version is read from the API server."""
    return {'gpu_sharing_stack_strategy': 'dra', 'gpu_sharing_stack_state': state, 'gpu_sharing_stack_pool': ROLE_POOL,
            'gpu_sharing_stack_nodes': [ROLE_NODE], 'gpu_sharing_stack_facts': {ROLE_NODE: T4},
            'gpu_sharing_stack_helm_install': False,
            'gpu_sharing_stack_dra': {
                'chart_path': '/srv/charts/dra-driver-nvidia-gpu-0.5.0.tgz', 'chart_version': '0.5.0',
                'assume_cdi_enabled': True, 'feature_gates': {'TimeSlicingSettings': True},
                'extended_resources': extended, 'workload_resources': ['nvidia.com/gpu', 'nvidia.com/gpu.shared'],
                # the lab's shared class mapping nvidia.com/gpu on this plane (conftest LAB_GPU_CLASS) maps a name of
                # the chart's: accepted, else the pool is refused (DRAX-15)
                'accept_extended_resource_classes': [LAB_GPU_CLASS],
                # a shared object kept while another file's dra pool is on this plane (test_dra_real.py tests it)
                'resourceslice_policy': False}}


def test_DRAX_03_role_applies_the_classes_reruns_and_removes(kube_real, tmp_path):
    """Role gpu_sharing_stack on 1.37 (version read from the server): the pool's classes for nvidia.com/gpu.shared and
    nvidia.com/mig-1g.10gb are created, the first with its GpuConfig and name, a re-run changes nothing; with the MIG
    entry dropped from extended_resources the next run deletes that class (the pool released it: before the fix it
    stayed, mapping the name to DRA for ever) and writes nothing else; state absent removes the other."""
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    core.create_node(bare_node(ROLE_NODE, 't4x1', facts=T4))
    try:
        cl = (kube_real, kube_real.kubeconfig)
        rc, result = run_play(cl, tmp_path, [{'name': 'present', 'block': stack_steps(role_vars(extended=EXTENDED))}])
        assert rc == 0, failures(result)
        want = dict((k, d) for k, d in rendered(result).items() if k[0] == 'DeviceClass')
        assert sorted(k[2] for k in want) == ['gpu.shared.nvidia.com.extended.gpuops.io',
                                              'mig-1g.10gb.nvidia.com.extended.gpuops.io']
        live = dict((k[2], live_object(kube_real, d)) for k, d in want.items())
        shared = live['gpu.shared.nvidia.com.extended.gpuops.io']
        assert shared['spec']['extendedResourceName'] == 'nvidia.com/gpu.shared'
        assert shared['spec']['config'][0]['opaque']['parameters']['sharing']['strategy'] == 'TimeSlicing'
        assert live['mig-1g.10gb.nvidia.com.extended.gpuops.io']['spec']['extendedResourceName'] == \
            'nvidia.com/mig-1g.10gb'
        rc, again = run_play(cl, tmp_path, [{'name': 'again', 'block': stack_steps(role_vars(extended=EXTENDED))}])
        assert rc == 0, failures(again)
        assert [n for n, r in task_results(again) if r.get('changed')] == []
        rc, dropped = run_play(cl, tmp_path, [{'name': 'dropped', 'block': stack_steps(role_vars())}])
        assert rc == 0, failures(dropped)
        [release] = [r for n, r in task_results(dropped) if 'Release the shared objects the pool no longer uses' in n]
        assert [(o['kind'], o['name'], o['action']) for o in release['objects']] == [
            ('DeviceClass', 'mig-1g.10gb.nvidia.com.extended.gpuops.io', 'deleted')], release['objects']
        assert [k[2] for k, d in want.items() if live_object(kube_real, d) is not None] == [
            'gpu.shared.nvidia.com.extended.gpuops.io']
        # the removal keeps the class while another file's dra pool is on the shared plane (keep_shared, as it keeps
        # the release: test_dra_real.py runs one beside this file): then the class stays and this pool's record on it
        # goes, and the removal runs again once no other dra pool is left (this node no longer labelled, so neither
        # file waits for the other)
        remaining = [d for k, d in want.items() if k[2] == 'gpu.shared.nvidia.com.extended.gpuops.io']
        for dummy in range(5):
            rc, gone = run_play(cl, tmp_path, [{'name': 'absent', 'block': stack_steps(role_vars('absent'))}])
            assert rc == 0, failures(gone)
            [render] = [r for n, r in task_results(gone) if n.endswith('Render the stack and check the input')]
            if not render['other_pools']:
                break
            [kept] = [live_object(kube_real, d) for d in remaining]
            assert 'user.gpuops.io/%s' % ROLE_POOL not in (kept['metadata'].get('annotations') or {}), kept['metadata']
            _wait_alone(core, own=ROLE_POOL)
        else:
            pytest.fail('five removals in a row met another file\'s dra pool: %s' % render['other_pools'])
        assert [k for k, d in want.items() if live_object(kube_real, d) is not None] == []
    finally:
        core.delete_node(ROLE_NODE)


def test_DRAX_02_gate_alpha_off_on_1_34_and_the_name_dropped(tmp_path_factory):
    """1.34: the gate is alpha and off, and the API server drops spec.extendedResourceName from a DeviceClass (so the
    chart's gpu.nvidia.com maps nothing there): the collection refuses extended resources on 1.34."""
    from kubernetes import client
    with private_kube(tmp_path_factory.mktemp('kube-134'), '1.34') as kube:
        assert kube.version.startswith('1.34')
        assert feature_metric(kube) == ('ALPHA', 0)
        assert round_trip(kube, 'drax-probe-%s' % SUFFIX) is None
        # the role refuses the pool there, naming the minor and the gate, and writes nothing
        client.CoreV1Api(kube.api()).create_node(bare_node(ROLE_NODE, 't4x1', facts=T4))
        user = 'gpuops-test-drax-%s' % SUFFIX
        kc = kube.user(user, reads=True)
        start = kube.mark()
        rc, result = run_play((kube, kc), tmp_path_factory.mktemp('play-134'),
                              [{'name': 'present', 'block': stack_steps(role_vars())}])
        assert rc != 0
        [(dummy, msg)] = failures(result)
        assert ('gpu_sharing_stack_dra.extended_resources: Kubernetes 1.34 cannot back extended resources with DRA: '
                'its feature gate DRAExtendedResource is alpha and off by default') in msg, msg
        assert kube.requests(start, kube.mark(), user=user), 'the role read nothing: the version was not read'
        assert kube.writes(start, kube.mark(), user=user) == []


@pytest.fixture(scope='module')
def dra_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    work = tmp_path_factory.mktemp('drax')
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1) as state:
        plugin = DraPlugin(kube_real, work, state, NAME, INVENTORY, feature_gates='TimeSlicingSettings=true')
        smi_log = work / 'nvidia-smi.log'
        with open(os.path.join(plugin.dirs['driver'], 'usr', 'bin', 'nvidia-smi'), 'w') as f:
            f.write('#!/bin/sh\necho "$*" >> %s\nexit 0\n' % smi_log)
        proc, cdi = plugin.start(), plugin.cdi
        gpu_extended_mapping(co)
        classes = _collection_dra().extended_resource_classes(EXTENDED, gates={'TimeSlicingSettings': True}, minor=37)
        for obj in classes:
            co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', obj)
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            dra = {'state': state, 'core': core, 'co': co, 'proc': proc, 'log': work / 'plugin.log', 'cdi': cdi,
                   'smi_log': smi_log, 'kube': kube_real, 'plugin': plugin}
            yield dra
        finally:
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            dra_slices.stop_plugin(dra['proc'] if 'dra' in locals() else proc)
            for obj in classes:
                co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', obj['metadata']['name'])
            for s in slices(co):
                co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])


def slices(co):
    return [s for s in co.list_cluster_custom_object(GROUP, VERSION, 'resourceslices',
                                                     field_selector='spec.driver=%s' % DRIVER)['items']
            if s['spec'].get('nodeName') == NAME]


def tail(dra):
    return dra['log'].read_text()[-4000:] if dra['log'].exists() else ''


def run_pod(dra, name, resource, script='ls /dev | grep nvidia'):
    """A pod asking ``resource: 1`` in its limits (no ResourceClaim in its spec), Running on the node; returns it.
    Its container runs ``script`` then prints done."""
    core = dra['core']
    core.create_namespaced_pod(NS, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name},
        'spec': {'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                 'terminationGracePeriodSeconds': 1, 'nodeSelector': {'kubernetes.io/hostname': NAME},
                 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                 'command': ['sh', '-c', script + '; echo done; sleep 3600'],
                                 'resources': {'limits': {resource: '1'}}}]}})

    def running():
        p = core.read_namespaced_pod(name, NS)
        if p.status.phase in ('Failed', 'Succeeded'):
            raise AssertionError('pod ended: %s' % p.status)
        return p if p.status.phase == 'Running' else None
    try:
        return wait('pod %s Running' % name, running, 120)
    except AssertionError as exc:
        ev = [(e.reason, e.message) for e in core.list_namespaced_event(NS).items]
        raise AssertionError('%s\nevents %s\n%s' % (exc, ev, tail(dra)))


def pod_claim(dra, pod):
    """The claim the scheduler made for the pod's extended resources (status.extendedResourceClaimStatus)."""
    st = pod.status.extended_resource_claim_status
    assert st is not None, pod.status
    return st, dra['co'].get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims', st.resource_claim_name)


def container_devices(dra, name):
    log = wait('the log of %s' % name, lambda: (lambda t: t if 'done' in t else None)(
        dra['core'].read_namespaced_pod_log(name, NS)), 30)
    return log.splitlines()[:-1]


def report(dra, collections_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_share_report',
                     json.dumps({'kubeconfig': dra['kube'].kubeconfig, 'namespace': NS}))
    assert not res.get('failed'), res
    return res


def end_pod(dra, name, claim):
    core, co = dra['core'], dra['co']
    core.delete_namespaced_pod(name, NS)
    wait('pod %s gone' % name, lambda: not core.list_namespaced_pod(NS, field_selector='metadata.name=%s' % name).items,
         60)
    wait('its claim %s gone (owned by the pod)' % claim, lambda: claim not in [
        c['metadata']['name'] for c in co.list_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims')['items']],
        60)
    wait('the claim\'s CDI spec removed (NodeUnprepareResources)', lambda: not os.listdir(dra['cdi']), 30)


def test_DRAX_03_and_DRAX_07_plain_gpu_pod_gets_a_dra_device_counted_once(dra_node, collections_path):
    """A pod asking nvidia.com/gpu: 1 in its limits, no claim in its spec, on a node whose only GPU is the DRA
    plugin's: the real scheduler makes a claim for it (annotated, owned by the pod, the class that maps the name),
    allocates the node's gpu-0, the kubelet prepares it, the container sees /dev/nvidia0. The report shows it once:
    as the claim's DRA device and the pod's dra_extended, not as device-plugin nvidia.com/gpu (before the fix the node
    showed nvidia.com/gpu 1/- and the cluster 1/N against the kwok nodes' device-plugin GPUs, besides the claim)."""
    co = dra_node['co']
    wait('the slice', lambda: slices(co), 90)
    pod = run_pod(dra_node, 'plain', 'nvidia.com/gpu')
    st, claim = pod_claim(dra_node, pod)
    assert [(m.container_name, m.resource_name) for m in st.request_mappings] == [('main', 'nvidia.com/gpu')]
    assert claim['metadata']['annotations'] == {'resource.kubernetes.io/extended-resource-claim': 'true'}
    assert [(o['kind'], o['name'], o.get('controller')) for o in claim['metadata']['ownerReferences']] == [
        ('Pod', 'plain', True)]
    [req] = claim['spec']['devices']['requests']
    assert req['exactly']['deviceClassName'] in GPU_CLASSES, req
    assert [(r['driver'], r['pool'], r['device']) for r in claim['status']['allocation']['devices']['results']] == [
        (DRIVER, NAME, 'gpu-0')]
    assert 'nvidia0' in container_devices(dra_node, 'plain')
    res = report(dra_node, collections_path)
    [node] = [n for n in res['nodes'] if n['name'] == NAME]
    assert 'nvidia.com/gpu' not in node['resources'], node['resources']
    assert node['dra'] == {'devices': {DRIVER: 1}, 'allocated': {DRIVER: 1}}
    [rec] = node['pods']
    assert rec['requests'] == {'nvidia.com/gpu': 1}  # expected, not written
    assert rec['dra_extended'] == {  # expected, not written
        'claim': claim['metadata']['name'], 'resources': {'nvidia.com/gpu': 1}}  # expected, not written
    assert (res['cluster']['resources'].get('nvidia.com/gpu') or {}).get('allocated', 0) == 0, res['cluster']
    [c] = res['dra']['claims']
    assert (c['name'], c['state'], c['extended_resources']) == (claim['metadata']['name'], 'allocated',
                                                               ['nvidia.com/gpu'])
    assert [(d['node'], d['device']) for d in c['devices']] == [(NAME, 'gpu-0')]
    assert [p['name'] for p in c['pods']] == ['plain']
    end_pod(dra_node, 'plain', claim['metadata']['name'])


def test_DRAX_03_and_DRAX_07_shared_pod_gets_the_class_gpu_config(dra_node, collections_path):
    """nvidia.com/gpu.shared: 1 maps to the collection's time-slicing class: the plugin receives the class's GpuConfig
    (source FromClass) and applies it - it runs nvidia-smi to set the compute mode and the time slice (Long = 3) on
    the GPU of the claim (recorded by the lab's nvidia-smi); the container sees the device; the report counts it once."""
    co = dra_node['co']
    wait('the slice', lambda: slices(co), 90)
    pod = run_pod(dra_node, 'shared', 'nvidia.com/gpu.shared')
    st, claim = pod_claim(dra_node, pod)
    [req] = claim['spec']['devices']['requests']
    assert req['exactly']['deviceClassName'] == 'gpu.shared.nvidia.com.extended.gpuops.io'
    [cfg] = claim['status']['allocation']['devices']['config']
    assert cfg['source'] == 'FromClass'
    assert cfg['opaque']['parameters']['sharing'] == {'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': 'Long'}}
    assert 'nvidia0' in container_devices(dra_node, 'shared')
    with open(dra_slices.inventory_path(INVENTORY)) as f:
        uuid = json.load(f)['gpus'][0]['uuid']
    calls = dra_node['smi_log'].read_text().splitlines()
    assert '-i %s -c DEFAULT' % uuid in calls and 'compute-policy -i %s --set-timeslice 3' % uuid in calls, calls
    res = report(dra_node, collections_path)
    [node] = [n for n in res['nodes'] if n['name'] == NAME]
    assert not [k for k in node['resources'] if k.startswith('nvidia.com/gpu')], node['resources']
    assert node['dra']['allocated'] == {DRIVER: 1}
    [c] = res['dra']['claims']
    assert c['extended_resources'] == ['nvidia.com/gpu.shared']
    end_pod(dra_node, 'shared', claim['metadata']['name'])


MIG_NODE = 'drax-mig-kwok-%s' % SUFFIX


def test_DRAX_04_mig_profile_pods_get_mig_devices_of_that_profile(dra_node, collections_path, tmp_path):
    """nvidia.com/mig-1g.10gb maps to the collection's MIG class (CEL on type mig and the profile): on a kwok node whose
    ResourceSlice is the H100 MIG inventory's (lab/kube/dra_slices.py: GPU 0 with a 3g.40gb and two 1g.10gb devices),
    the real scheduler gives two plain mig-1g.10gb pods the two 1g.10gb devices and leaves a third Pending; the report
    counts each once. (kwok runs the pods: no container here; the real node's MIG pod is the test below.)"""
    core, co = dra_node['core'], dra_node['co']
    api = dra_node['kube'].api()
    # the node of the slice's GPUs (the recorded h100x2-mig-mixed shape, as the lab's kwok-dra-h100-1): it was a T4
    # node publishing an H100 MIG slice, a node that cannot exist
    body = bare_node(MIG_NODE, 'h100x2-mig-mixed')
    body['spec'] = {'taints': [{'key': TAINT_KEY, 'effect': 'NoSchedule'}]}
    core.create_node(body)
    try:
        dra_slices.publish(api, MIG_NODE, 'h100-mig.json', str(tmp_path))
        for i in range(3):
            core.create_namespaced_pod(NS, {
                'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'mig-%d' % i},
                'spec': {'nodeSelector': {'kubernetes.io/hostname': MIG_NODE}, 'terminationGracePeriodSeconds': 0,
                         'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                         'containers': [{'name': 'main', 'image': 'registry.invalid/cuda-app:1',
                                         'resources': {'limits': {'nvidia.com/mig-1g.10gb': '1'}}}]}})

        def placed():
            pods = [core.read_namespaced_pod('mig-%d' % i, NS) for i in range(3)]
            running = [p for p in pods if p.status.phase == 'Running']
            pending = [p for p in pods if p.status.phase == 'Pending' and any(
                c.type == 'PodScheduled' and c.status == 'False' for c in p.status.conditions or [])]
            return (running, pending) if len(running) == 2 and len(pending) == 1 else None
        running, [pending] = wait('two mig pods Running and one Pending', placed, 90)
        slice_devices = dict((d['name'], d['attributes']) for s in dra_slices.slices_of(api, MIG_NODE)
                             for d in s['spec']['devices'])
        got = []
        for p in running:
            claim = co.get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims',
                                                    p.status.extended_resource_claim_status.resource_claim_name)
            [res] = claim['status']['allocation']['devices']['results']
            assert (res['driver'], res['pool']) == (DRIVER, MIG_NODE)
            assert slice_devices[res['device']]['profile'] == {'string': '1g.10gb'}
            got.append(res['device'])
        assert len(set(got)) == 2
        res = report(dra_node, collections_path)
        [node] = [n for n in res['nodes'] if n['name'] == MIG_NODE]
        assert 'nvidia.com/mig-1g.10gb' not in node['resources']
        assert node['dra']['allocated'] == {DRIVER: 2}
        mig_claims = [c for c in res['dra']['claims'] if c.get('extended_resources') == ['nvidia.com/mig-1g.10gb']]
        assert sorted(d['profile'] for c in mig_claims for d in c['devices']) == ['1g.10gb', '1g.10gb']
    finally:
        for i in range(3):
            core.delete_namespaced_pod('mig-%d' % i, NS)
        wait('the mig pods gone', lambda: not [p for p in core.list_namespaced_pod(NS).items
                                               if p.metadata.name.startswith('mig-')], 60)
        for s in dra_slices.slices_of(api, MIG_NODE):
            co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])
        core.delete_node(MIG_NODE)


MIG_INVENTORY = 'h100-mig.json'


def test_DRAX_04_mig_pod_on_the_real_node_sees_its_mig_device(dra_node, collections_path, tmp_path):
    """The real node's plugin restarted on h100-mig.json (GPU 0 in MIG mode: a 3g.40gb and two 1g.10gb devices; the
    plugin in a /proc of its own with the kernel module's capability files, lab/tests/dra_node_plugin.py): a plain
    nvidia.com/mig-1g.10gb: 1 pod gets a 1g.10gb MIG device through the collection's class; the kubelet's
    NodePrepareResources makes the plugin write the claim's CDI spec with the parent GPU's /dev/nvidia0 and the MIG
    device's two capability nodes /dev/nvidia-caps/nvidia-cap<GI minor> and nvidia-cap<CI minor> (cdi.go
    GetDevNodesForMigDevice, v0.5.0; the minors those of the device's GPU and compute instance ids), containerd
    injects them and the container sees exactly those; the report counts the device once, as its profile."""
    co, kube = dra_node['co'], dra_node['kube']
    view = dra_slices.nvml_view(MIG_INVENTORY, str(tmp_path))
    migs = dict((m['uuid'], dict(m, parent_minor=g['minor'])) for g in view['gpus'] for m in g['migs'])
    assert sorted(m['name'] for m in migs.values()) == ['MIG 1g.10gb', 'MIG 1g.10gb', 'MIG 3g.40gb'], view
    dra_slices.stop_plugin(dra_node['proc'])
    work = tmp_path / 'mig'
    work.mkdir()
    plugin = DraPlugin(kube, work, dra_node['state'], NAME, MIG_INVENTORY)
    plugin.start()
    try:
        try:
            wait('the slice of the MIG devices', lambda: [s for s in slices(co) if sorted(
                d['attributes']['uuid']['string'] for d in s['spec']['devices']) == sorted(migs)], 90)
        except AssertionError:
            raise AssertionError('%s\n%s' % (slices(co), plugin.log.read_text()[-4000:]))
        log_of = dict(dra_node, log=plugin.log)
        pod = run_pod(log_of, 'mig', 'nvidia.com/mig-1g.10gb',
                      'ls /dev | grep nvidia; ls /dev/nvidia-caps; env | grep NVIDIA_')
        st, claim = pod_claim(dra_node, pod)
        assert [(m.container_name, m.resource_name) for m in st.request_mappings] == [('main', 'nvidia.com/mig-1g.10gb')]
        [req] = claim['spec']['devices']['requests']
        assert req['exactly']['deviceClassName'] == 'mig-1g.10gb.nvidia.com.extended.gpuops.io'
        [res] = claim['status']['allocation']['devices']['results']
        assert (res['driver'], res['pool']) == (DRIVER, NAME)
        [dev] = [d for s in slices(co) for d in s['spec']['devices'] if d['name'] == res['device']]
        assert dev['attributes']['type'] == {'string': 'mig'} and dev['attributes']['profile'] == {'string': '1g.10gb'}
        mig = migs[dev['attributes']['uuid']['string']]
        gi, ci = cap_minor(mig['parent_minor'], mig['gi_id']), cap_minor(mig['parent_minor'], mig['gi_id'], mig['ci_id'])
        # the claim's CDI spec (NodePrepareResources): the parent's device node and the MIG device's two cap nodes
        [spec_file] = os.listdir(dra_node['cdi'])
        with open(os.path.join(dra_node['cdi'], spec_file)) as f:
            spec = yaml.safe_load(f)
        [cdev] = spec['devices']
        nodes = cdev['containerEdits']['deviceNodes']
        assert [n['path'] for n in nodes] == ['/dev/nvidia%d' % mig['parent_minor'], '/dev/nvidia-caps/nvidia-cap%d'
                                              % gi, '/dev/nvidia-caps/nvidia-cap%d' % ci], cdev
        assert [(n['type'], n['major'], n['minor'], n['fileMode']) for n in nodes[1:]] == [
            ('c', lab_node.NVIDIA_CAPS_MAJOR, m, 0o444) for m in (gi, ci)], cdev
        lines = container_devices(dra_node, 'mig')
        assert 'nvidia%d' % mig['parent_minor'] in lines and 'nvidia-caps' in lines, lines
        assert sorted(ln for ln in lines if ln.startswith('nvidia-cap') and ln != 'nvidia-caps') == sorted(
            ['nvidia-cap%d' % gi, 'nvidia-cap%d' % ci]), lines
        assert 'NVIDIA_VISIBLE_DEVICES=void' in lines, lines
        rep = report(dra_node, collections_path)
        [node] = [n for n in rep['nodes'] if n['name'] == NAME]
        assert not [k for k in node['resources'] if k.startswith('nvidia.com/')], node['resources']
        assert node['dra'] == {'devices': {DRIVER: 3}, 'allocated': {DRIVER: 1}}, node['dra']
        [c] = rep['dra']['claims']
        assert (c['name'], c['extended_resources']) == (claim['metadata']['name'], ['nvidia.com/mig-1g.10gb'])
        assert [(d['node'], d['device'], d['profile']) for d in c['devices']] == [(NAME, res['device'], '1g.10gb')]
        end_pod(dra_node, 'mig', claim['metadata']['name'])
    finally:
        plugin.stop()
        dra_node['proc'] = dra_node['plugin'].start()
