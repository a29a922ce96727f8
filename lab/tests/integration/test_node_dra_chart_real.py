"""The DRA driver's chart on a real lab node (issue #36): NVIDIA's chart dra-driver-nvidia-gpu v0.5.0 (the Go module
cache's sigs.k8s.io/dra-driver-nvidia-gpu@v0.5.0 deployments/helm) installed by upstream's helm (lab/go helm) with the
values the collection renders for a dra pool (stacks/render.render strategy dra: computeDomains off, the image through
the mirror prefix, the node's driver root as driver_root), its kubelet-plugin DaemonSet's pod running on a real node
(lab/node/node.py) from the image the lab builds (node.dra_plugin_image, pushed to the lab registry and pulled by the
kubelet through the mirror's name).

The shared control plane holds test_dra_real.py's release of the same chart: this file's release is named with the pid
in a namespace of its own, with nameOverride so that its cluster-wide RBAC and ValidatingAdmissionPolicy names are its
own, and a helm post-renderer (this file's) leaves out the objects whose names the chart fixes - its DeviceClasses
(gpu.nvidia.com maps the extended resource nvidia.com/gpu: conftest's comment on kubernetes#141103; the class here is
this file's own) and the compute-domain daemon's ClusterRole and binding - and --skip-crds leaves the CRDs alone.
The node is tainted with a key of this file's and the DaemonSet pinned to it (nodeSelector), so that no other release
lands there and this one lands nowhere else.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_dra_chart_real.py
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import KUBE, NODE_PY, VENV_BIN, lab_collections_path, real_node, wait_until as wait
from dra_node_plugin import node_slices, start_claim_pod
from test_gpu_sharing_stack_dra_real import chart_dir, helm_on_path

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'oracles'))
import node as lab_node  # noqa: E402  (lab/node)
import registry as lab_registry  # noqa: E402  (lab/node)
from oracle_util import INVENTORIES, probe_facts  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-dra-chart-%s' % SUFFIX
NS = 'node-dra-chart-%s' % SUFFIX
RELEASE = 'dra-chart-%s' % SUFFIX
NAME_OVERRIDE = 'dra-chart-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-dra-chart-real-%s' % SUFFIX
CLASS = 'gpu-chart-%s.lab.gpuops.io' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
INVENTORY = 't4.json'
MIRROR = 'mirror.gpuops.lab/nvcr'
# the chart's objects whose names the chart fixes (no nameOverride): the shared plane's release owns them
FIXED_NAMES = {('DeviceClass', 'gpu.nvidia.com'), ('DeviceClass', 'mig.nvidia.com'),
               ('DeviceClass', 'vfio.gpu.nvidia.com'), ('ServiceAccount', 'compute-domain-daemon-service-account'),
               ('ClusterRole', 'compute-domain-daemon-role'),
               ('ClusterRoleBinding', 'compute-domain-daemon-role-binding')}
POST_RENDERER = '''import sys, yaml
fixed, drop_init = %r, %r
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
kept = [d for d in docs if (d['kind'], d['metadata']['name']) not in {tuple(f) for f in fixed}]
for d in kept:
    if drop_init and d['kind'] == 'DaemonSet':
        d['spec']['template']['spec'].pop('initContainers')
sys.stdout.write(yaml.safe_dump_all(kept))
'''


PLUGIN_ACCOUNT = '%s-service-account-kubeletplugin' % RELEASE  # fullname = the release name (it holds nameOverride)
VAP_PLURAL = {'ValidatingAdmissionPolicy': 'validatingadmissionpolicies',
              'ValidatingAdmissionPolicyBinding': 'validatingadmissionpolicybindings'}


def dra_stack():
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra
    return dra


def plugin_token(state, pod):
    """The service account token the kubelet projected into the pod (bound to the pod, so naming its node): read
    through the node's first process's root, the kubelet's mounts being in the node's mount namespace."""
    base = '/proc/%d/root/var/lib/kubelet/pods/%s/volumes/kubernetes.io~projected' % (lab_node.ns_pid(state),
                                                                                     pod.metadata.uid)
    [vol] = [v for v in os.listdir(base) if v.startswith('kube-api-access-')]
    with open(os.path.join(base, vol, 'token')) as f:
        return f.read().strip()


def render(facts, driver_root):
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    return stacks_render.render(dict(
        strategy='dra', pool='dch%s' % SUFFIX, nodes=[NAME], facts={NAME: facts}, registry=MIRROR,
        settings={'dra': {'chart_path': chart_dir(), 'chart_version': '0.5.0', 'kube_version': 'v1.37.2',
                          'release_name': RELEASE, 'namespace': NS, 'driver_root': driver_root,
                          # containerd 2.3.4 has CDI on without a switch (lab/node/README.md)
                          'assume_cdi_enabled': True}}))


def helm(*args, timeout=300):
    proc = subprocess.run(['helm'] + list(args), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, 'helm %s: %s%s' % (' '.join(args), proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def pods(core):
    return core.list_namespaced_pod(NS, label_selector='%s-component=kubelet-plugin' % NAME_OVERRIDE).items


def story(core, pod):
    logs = {}
    for c in (pod.spec.init_containers or []) + pod.spec.containers:
        try:
            logs[c.name] = (core.read_namespaced_pod_log(pod.metadata.name, NS, container=c.name) or '')[-2500:]
        except Exception as exc:  # pylint: disable=broad-except
            logs[c.name] = str(exc)[:300]
    events = [(e.reason, e.message) for e in core.list_namespaced_event(
        NS, field_selector='involvedObject.name=%s' % pod.metadata.name).items]
    return 'status %s\nevents %s\nlogs %s' % (pod.status, events, json.dumps(logs, indent=1))


def slices(co):
    return node_slices(co, NAME, DRIVER, GROUP, VERSION)


@pytest.fixture(scope='module')
def chart_node(kube_real, tmp_path_factory):
    """One real node (one simulated T4, NVIDIA's driver root of node.nvidia_toolkit), the lab registry holding the
    DRA driver's image under the mirrored name the collection renders, the chart installed by helm with the
    collection's values; yields once the release is installed (the pod's fate is the tests')."""
    from kubernetes import client
    api = kube_real.api()
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    work = tmp_path_factory.mktemp('drachart')
    inventory = os.path.join(INVENTORIES, INVENTORY)
    facts = probe_facts(inventory, work / 'probe-state.json')
    registry = lab_registry.Registry(str(work / 'registry'))
    registry.start()
    try:
        image = render(facts, '/')['images']
        assert len(image) == 1, image
        image = image[0]
        host, path = image.split('/', 1)
        registry.push(lab_node.dra_plugin_image(str(work), image, inventory), *path.rsplit(':', 1))
        with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1,
                       extra=('--mirror', '%s=%s' % (host, registry.url))) as state:
            # the node's driver root: the simulator as libnvidia-ml.so.<version>, NVIDIA's nvidia-smi (Debian's)
            lab_node.nvidia_toolkit(state, inventory)
            # where the GPU operator's driver container puts it, /run/nvidia/driver: the chart mounts the driver
            # root's parent with mountPropagation HostToContainer, which containerd refuses on a private mount
            # ('path "STATE" is mounted on "/" but it is not a shared or slave mount'); the node's /run is rshared
            driver = '/run/nvidia/driver'
            host_driver = os.path.join(state, 'run', 'nvidia', 'driver')
            shutil.copytree(os.path.join(state, 'driver'), host_driver, symlinks=True)
            lib = os.path.join(host_driver, 'usr', 'lib', 'x86_64-linux-gnu')
            with open(inventory) as f:
                version = json.load(f)['driver_version']
            # the links the driver's installer (ldconfig) makes next to the versioned libraries
            for so in ('libnvidia-ml.so', 'libcuda.so'):
                os.symlink('%s.%s' % (so, version), os.path.join(lib, so + '.1'))
            out = render(facts, driver)
            values = out['helm']['values']
            assert values['resources']['computeDomains'] == {'enabled': False}, values
            assert values['nvidiaDriverRoot'] == driver and values['image']['repository'] == image.rsplit(':', 1)[0]
            # on the shared plane: names of this file's own, the node pinned, its taint tolerated
            values = dict(values, nameOverride=NAME_OVERRIDE)
            values['kubeletPlugin'] = dict(values['kubeletPlugin'], nodeSelector={'kubernetes.io/hostname': NAME},
                                           tolerations=values['kubeletPlugin']['tolerations'] + [
                                               {'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                                           # lab deviation (a chart value): no gRPC health service and probe - the
                                           # kubelet probes the pod's address, and a lab pod's eth0 leads nowhere
                                           # (lab/node/README.md); a negative port disables both (values.yaml)
                                           containers={'gpus': {'healthcheckPort': -1}})
            for k, v in out['node_labels'][NAME].items():
                core.patch_node(NAME, {'metadata': {'labels': {k: v}}})
            # the collection's admission policy for the kubelet plugin's account (DRA-14), as the render gives it for
            # this release but for the account: the chart's fullname here is the release name (nameOverride is in it),
            # which the collection never sets - so the plugin this pod runs writes its slices under the policy
            policy = [m for m in out['shared_manifests'] if m['kind'].startswith('ValidatingAdmissionPolicy')]
            assert [m['kind'] for m in policy] == ['ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding']
            [cond] = policy[0]['spec']['matchConditions']
            assert cond['expression'].endswith('"%s"' % dra_stack().kubelet_plugin_account(RELEASE, NS)), cond
            cond['expression'] = 'request.userInfo.username == "system:serviceaccount:%s:%s"' % (NS, PLUGIN_ACCOUNT)
            for m in policy:
                co.create_cluster_custom_object('admissionregistration.k8s.io', 'v1', VAP_PLURAL[m['kind']], m)
            (work / 'values.yaml').write_text(yaml.safe_dump(values))
            renderers = {}
            for drop_init in (False, True):
                renderers[drop_init] = work / ('post-render-%s' % ('no-init' if drop_init else 'chart'))
                renderers[drop_init].write_text('#!%s\n%s' % (os.path.join(VENV_BIN, 'python'), POST_RENDERER % (
                    sorted(FIXED_NAMES), drop_init)))
                renderers[drop_init].chmod(0o755)
            co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', {
                'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'DeviceClass', 'metadata': {'name': CLASS},
                'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s' && device.attributes['%s']"
                                                              ".type == 'gpu'" % (DRIVER, DRIVER)}}]}})
            try:
                with helm_on_path():
                    helm('install', RELEASE, out['helm']['chart_ref'], '--namespace', NS, '--create-namespace',
                         '--skip-crds', '--values', str(work / 'values.yaml'), '--post-renderer', str(renderers[False]),
                         '--kubeconfig', kube_real.kubeconfig)

                    def without_init():
                        helm('upgrade', RELEASE, out['helm']['chart_ref'], '--namespace', NS, '--skip-crds',
                             '--values', str(work / 'values.yaml'), '--post-renderer', str(renderers[True]),
                             '--kubeconfig', kube_real.kubeconfig)
                    try:
                        yield {'state': state, 'core': core, 'co': co, 'driver': driver, 'version': version,
                               'cdi': os.path.join(state, 'run', 'cdi'), 'image': image,
                               'without_init': without_init}
                    finally:
                        helm('uninstall', RELEASE, '--namespace', NS, '--wait', '--kubeconfig', kube_real.kubeconfig)
                        core.delete_namespace(NS)
                        wait('namespace %s gone' % NS, lambda: NS not in [
                            n.metadata.name for n in core.list_namespace().items], 120)
            finally:
                for m in policy:
                    co.delete_cluster_custom_object('admissionregistration.k8s.io', 'v1', VAP_PLURAL[m['kind']],
                                                    m['metadata']['name'])
                co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', CLASS)
                for s in slices(co):
                    co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])
    finally:
        registry.stop()


def test_chart_init_container_stops_at_nvidia_smi_on_the_simulator(chart_node):
    """The pod as the chart renders it: its init container runs upstream's kubelet-plugin-prestart.sh from the lab's
    image (bash, busybox's find/ln/env/date, the image's glibc) and finds the node's driver root at
    /run/nvidia/driver - NVIDIA's nvidia-smi (Debian's 535.261.03) and libnvidia-ml.so.1 (the NVML simulator) -, runs
    `nvidia-smi --version` with the simulator preloaded, and nvidia-smi refuses the simulator (exit 255, 'Mismatch in
    versions between nvidia-smi and NVML.': the private nvmlInternalGetExportTable, docs/lab.md). The script retries
    every 10 s and leaves only on exit 0, and no chart value skips it: the gpus container never starts."""
    core = chart_node['core']

    def refused():
        ps = pods(core)
        if len(ps) != 1:
            return None
        try:
            log = core.read_namespaced_pod_log(ps[0].metadata.name, NS, container='init-container')
        except Exception:  # pylint: disable=broad-except  (400 until the container starts)
            return None
        return (ps[0], log) if 'exit code: 255' in log else None
    try:
        pod, log = wait('the init container\'s nvidia-smi check', refused, 120)
    except AssertionError as exc:
        raise AssertionError('%s\n%s' % (exc, '\n'.join(story(core, p) for p in pods(core))))
    assert pod.spec.node_name == NAME
    assert ("nvidia-smi: '/driver-root/usr/bin/nvidia-smi', libnvidia-ml.so.1: "
            "'/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1'") in log, log
    assert ('invoke: env -i LD_PRELOAD=/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 '
            '/driver-root/usr/bin/nvidia-smi --version') in log, log
    assert 'Mismatch in versions between nvidia-smi and NVML.' in log, log
    pod = core.read_namespaced_pod(pod.metadata.name, NS)
    assert pod.status.phase == 'Pending', story(core, pod)
    assert [c.state.waiting.reason for c in pod.status.container_statuses] == ['PodInitializing'], story(core, pod)


def test_kubelet_plugin_pod_without_the_check_registers_and_publishes_the_slice(chart_node):
    """Lab deviation: the release upgraded with the init container left out (the post-renderer; the check is all it
    does - its /driver-root link is in its own filesystem), the rest as the chart renders it. The gpus container runs
    `bash -c ... gpu-kubelet-plugin -v 4` from the lab's image, privileged, with the node's driver root, kubelet
    directories and CDI directory as hostPath volumes; it reaches the API server with its ServiceAccount through the
    node's CNI forwarder, registers with the kubelet (plugins_registry) and publishes the node's ResourceSlice: the
    simulator's T4, owned by the Node, written by nothing of the lab."""
    core, co = chart_node['core'], chart_node['co']
    chart_node['without_init']()

    def running():
        ps = pods(core)
        if len(ps) == 1 and not ps[0].spec.init_containers and ps[0].status.phase == 'Running' and all(
                c.ready for c in ps[0].status.container_statuses or []):
            return ps[0]
        return None
    try:
        pod = wait('the kubelet-plugin pod Running', running, 120)
        got = wait('the plugin\'s ResourceSlice for %s' % NAME, lambda: slices(co), 90)
    except AssertionError as exc:
        raise AssertionError('%s\n%s' % (exc, '\n'.join(story(core, p) for p in pods(core))))
    assert pod.spec.node_name == NAME
    assert [c.name for c in pod.spec.containers] == ['gpus']
    assert len(got) == 1
    spec = got[0]['spec']
    assert [d['name'] for d in spec['devices']] == ['gpu-0'], spec
    with open(os.path.join(INVENTORIES, INVENTORY)) as f:
        uuid = json.load(f)['gpus'][0]['uuid']
    assert spec['devices'][0]['attributes']['uuid'] == {'string': uuid}
    owner = got[0]['metadata']['ownerReferences'][0]
    assert (owner['kind'], owner['name']) == ('Node', NAME)
    klog = open(os.path.join(chart_node['state'], 'logs', 'kubelet.log')).read()
    assert 'RegisterPlugin started' in klog and '/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock' in klog
    chart_node['pod'] = pod.metadata.name



def test_DRA_14_the_real_plugin_writes_its_slice_under_the_collections_policy_and_no_other_node(chart_node):
    """The test above published the node's slice from the chart's real kubelet plugin pod while the collection's
    admission policy for the plugin's account was in force (the fixture applies it, DRA-14): the pod runs as that
    account, and the token the kubelet projected into it - the one the plugin used - is refused another node's slice
    (403, the policy's message naming both nodes)."""
    from kubernetes import client
    core = chart_node['core']
    [pod] = [p for p in pods(core) if p.metadata.name == chart_node['pod']]
    assert pod.spec.service_account_name == PLUGIN_ACCOUNT
    assert slices(chart_node['co']), 'the node has no slice of the plugin'
    conf = client.Configuration()
    api = chart_node['co'].api_client.configuration
    conf.host, conf.ssl_ca_cert = api.host, api.ssl_ca_cert
    conf.api_key = {'authorization': 'Bearer ' + plugin_token(chart_node['state'], pod)}
    as_plugin = client.CustomObjectsApi(client.ApiClient(configuration=conf))
    other = 'dra14-elsewhere-%s' % SUFFIX
    with pytest.raises(client.ApiException) as exc:
        as_plugin.create_cluster_custom_object(GROUP, VERSION, 'resourceslices', {
            'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'ResourceSlice', 'metadata': {'name': other},
            'spec': {'driver': DRIVER, 'nodeName': other, 'devices': [],
                     'pool': {'name': other, 'generation': 1, 'resourceSliceCount': 1}}})
    assert exc.value.status == 403 and 'on node %s may not write the ResourceSlices of node %s' % (NAME, other) in (
        exc.value.body), exc.value.body


def test_claim_prepared_by_the_pod_container_sees_device_and_unprepared_on_delete(chart_node):
    """A pod with a claim of the node's GPU (this file's DeviceClass): the kubelet's NodePrepareResources reaches the
    plugin in the chart's pod, which writes the claim's CDI spec into the node's /var/run/cdi (its hostPath volume);
    containerd injects it and the container lists the claim's device nodes; deleting the pod unprepares: the spec goes."""
    core, co = chart_node['core'], chart_node['co']
    assert chart_node.get('pod'), 'the plugin pod did not run (previous test)'
    p = start_claim_pod(core, co, NS, NAME, TAINT_KEY, CLASS, lab_node.BUSYBOX_IMAGE, GROUP, VERSION,
                        on_timeout=lambda: 'plugin %s' % core.read_namespaced_pod_log(
                            chart_node['pod'], NS, container='gpus')[-4000:])
    claim = co.get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims',
                                            p.status.resource_claim_statuses[0].resource_claim_name)
    uid = claim['metadata']['uid']
    assert [(r['driver'], r['pool'], r['device']) for r in claim['status']['allocation']['devices']['results']] == [
        (DRIVER, NAME, 'gpu-0')]
    spec_file = 'k8s.gpu.nvidia.com-claim_%s.yaml' % uid
    cdi = chart_node['cdi']
    assert spec_file in os.listdir(cdi), os.listdir(cdi)
    with open(os.path.join(cdi, spec_file)) as f:
        spec = yaml.safe_load(f)
    assert spec['kind'] == 'k8s.gpu.nvidia.com/claim'
    assert [(d['name'], [n['path'] for n in d['containerEdits']['deviceNodes']]) for d in spec['devices']] == [
        ('%s-gpu-0' % uid, ['/dev/nvidia0'])]
    log = wait('the container\'s log', lambda: (lambda t: t if 'done' in t else None)(
        core.read_namespaced_pod_log('dra', NS)), 30)
    lines = log.splitlines()
    assert 'nvidia0' in lines and 'nvidiactl' in lines, log
    assert 'NVIDIA_VISIBLE_DEVICES=void' in lines, log
    core.delete_namespaced_pod('dra', NS)
    wait('pod dra gone', lambda: not core.list_namespaced_pod(NS, field_selector='metadata.name=dra').items, 60)
    wait('the claim\'s CDI spec removed (NodeUnprepareResources)', lambda: spec_file not in os.listdir(cdi), 30)
