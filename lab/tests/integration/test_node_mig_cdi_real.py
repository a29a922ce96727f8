"""A MIG device through NVIDIA's container runtime on a real lab node (issue #36; the demo's lab-a100 does the same):
the node's GPU in MIG mode (the recorded shape h100x1-mig-single: one H100, two 3g.40gb), NVIDIA's toolkit on it
(lab/node/node.py nvidia_toolkit: `nvidia-ctk cdi generate` v1.20.0 on the NVML simulator, with the mig-minors file
and the /dev/nvidia-caps capability devices the NVIDIA kernel module would make - lab/node/nvcaps.py), the `nvidia`
runtime added by the collection's container_runtime_config, NVIDIA's device plugin v0.19.1 with the config the
collection renders for a MIG pool (strategy single) as a host process (lab/tests/dp_node_plugin.py), and a pod asking
nvidia.com/gpu through a RuntimeClass of that handler: the kubelet allocates one MIG device, the runtime resolves
NVIDIA_VISIBLE_DEVICES=<MIG UUID> to that CDI device, and the container sees exactly its device nodes: the parent
GPU's, its GPU instance's and compute instance's capability devices, and the spec's common ones.

Before lab/node/nvcaps.py the toolkit step failed on MIG GPUs (`error getting MIG capability device paths`: the node's
procfs has no /proc/driver/nvidia-caps/mig-minors) and the demo's MIG node got a spec of whole GPUs, with no device
its validation pod could be given.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_mig_cdi_real.py
"""
from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
import node as lab_node  # noqa: E402  (lab/node)
import real  # noqa: E402  (lab/kube)
from dp_node_plugin import Plugin  # noqa: E402  (lab/tests)
from oracle_util import build_nvml_sim, cap_minor, probe_facts  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-mig-cdi-%s' % SUFFIX
NS = 'node-mig-cdi-%s' % SUFFIX
RUNTIME_CLASS = 'nvidia-mig-cdi-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-mig-cdi-%s' % SUFFIX
SHAPE = 'h100x1-mig-single'   # lab/kube/real.py RECORDED_MIG: 3g.40gb at placements 0 and 4
COMMON = ['nvidia-uvm', 'nvidia-uvm-tools', 'nvidiactl']   # the spec's nodes of every container (containerEdits)


def render_mig(facts):
    """(config, container env) the collection renders for a MIG pool of this node (strategy single)."""
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    strategy, devices = real.RECORDED_MIG[SHAPE][:2]
    out = stacks_render.render(dict(strategy='mig', pool='mc' + SUFFIX, nodes=[NAME], facts={NAME: facts},
                                    settings={'mig': {'strategy': strategy, 'devices': devices}}))
    label = out['node_labels'][NAME]['nvidia.com/device-plugin.config']
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'][0]
    ctr = [c for c in ds['spec']['template']['spec']['containers'] if c['name'] == 'nvidia-device-plugin-ctr'][0]
    return cm['data'][label], dict((e['name'], e['value']) for e in ctr['env'] if 'value' in e)


@pytest.fixture(scope='module')
def mig_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, node_api = client.CoreV1Api(api), client.NodeV1Api(api)
    work = tmp_path_factory.mktemp('migcdi')
    build_nvml_sim()
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(real.recorded_inventory(SHAPE)))
    facts = probe_facts(str(inventory), work / 'probe-state.json')
    gpu = facts['gpus'][0]
    assert gpu['mig_current'] and len(gpu['mig_devices']) == 2, gpu
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1) as state:
        plugin = Plugin(work, state, str(inventory))
        core.create_namespace({'metadata': {'name': NS}})
        node_api.create_runtime_class({'metadata': {'name': RUNTIME_CLASS}, 'handler': 'nvidia'})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'state': state, 'core': core, 'kube': kube_real, 'inventory': str(inventory), 'facts': facts,
                   'plugin': plugin}
        finally:
            plugin.stop()
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            node_api.delete_runtime_class(RUNTIME_CLASS)


def spec_devices(state):
    with open(os.path.join(state, 'run', 'cdi', 'nvidia.yaml')) as f:
        spec = yaml.safe_load(f)
    # (path, major, minor); the spec leaves a minor of 0 out (omitempty)
    return spec, {d['name']: [(n['path'], n.get('major'), n.get('minor', 0)) for n in d['containerEdits']['deviceNodes']]
                  for d in spec['devices']}


def test_cdi_spec_has_one_device_per_mig_device(mig_node):
    """nvidia_toolkit on the MIG GPU: nvidia-ctk's spec names each MIG device by UUID and by <gpu>:<mig index> with the
    GPU's node and its GPU instance's and compute instance's capability devices (made in the node's /dev: nvidia-ctk
    reads their numbers from there, the caps major of lab/node/node.py); no device of the whole GPU."""
    state = mig_node['state']
    lab_node.nvidia_toolkit(state, mig_node['inventory'])
    spec, devices = spec_devices(state)
    gpu = mig_node['facts']['gpus'][0]
    minor = real.recorded_inventory(SHAPE)['gpus'][0].get('minor_number', 0)
    want = {}
    for j, m in enumerate(gpu['mig_devices']):
        nodes = [('/dev/nvidia%d' % minor, 195, minor)] + [
            ('/dev/nvidia-caps/nvidia-cap%d' % c, lab_node.NVIDIA_CAPS_MAJOR, c) for c in (
                cap_minor(minor, m['gpu_instance_id']), cap_minor(minor, m['gpu_instance_id'], m['compute_instance_id']))]
        want[m['uuid']] = want['0:%d' % j] = nodes
    assert {k: v for k, v in devices.items() if k != 'all'} == want, devices
    assert gpu['uuid'] not in devices and '0' not in devices
    assert sorted(n['path'][len('/dev/'):] for n in spec['containerEdits']['deviceNodes']) == COMMON


def test_pod_gets_exactly_its_mig_device(mig_node):
    """The collection's `nvidia` runtime on the node, NVIDIA's plugin with the collection's MIG config: nvidia.com/gpu 2
    published; a pod asking one, through the RuntimeClass, sees the nodes of the MIG device the kubelet allocated -
    the CDI device NVIDIA's runtime made of the plugin's NVIDIA_VISIBLE_DEVICES - and no other."""
    state, core = mig_node['state'], mig_node['core']
    runtime = lab_node.nvidia_toolkit(state, mig_node['inventory'])['nvidia-container-runtime']
    containerd_dir = os.path.dirname(lab_node.programs(mig_node['kube'].version)['containerd'])
    result = run_module(lab_collections_path(), 'gpuops.k8s_gpu.container_runtime_config',
                        'engine=containerd path=%s runtime_name=nvidia runtime_path=%s cdi=true backup=false'
                        % (os.path.join(state, 'containerd.toml'), runtime),
                        env={'PATH': containerd_dir + os.pathsep + os.environ['PATH']})
    assert result.get('changed') is True and not result.get('failed'), result
    lab_node.restart_containerd(state)
    wait('runtime handler nvidia in the Node status', lambda: 'nvidia' in [
        h.name for h in core.read_node(NAME).status.runtime_handlers or []], 60)
    plugin = mig_node['plugin']
    plugin.start(*render_mig(mig_node['facts']))
    try:
        wait('nvidia.com/gpu allocatable 2', lambda: (core.read_node(NAME).status.allocatable or {}).get(
            'nvidia.com/gpu') == '2', 90)
    except AssertionError:
        raise AssertionError('allocatable %s\n%s' % (core.read_node(NAME).status.allocatable, plugin.tail()))
    core.create_namespaced_pod(NS, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'mig'},
        'spec': {'restartPolicy': 'Never', 'automountServiceAccountToken': False, 'hostNetwork': True,
                 'runtimeClassName': RUNTIME_CLASS, 'terminationGracePeriodSeconds': 1,
                 'nodeSelector': {'kubernetes.io/hostname': NAME},
                 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                 'command': ['sh', '-c', 'cd /dev && find nvidia* -type c | sort'],
                                 'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}})

    def ended():
        p = core.read_namespaced_pod('mig', NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    pod = wait('pod mig ended', ended, 120)
    events = [(e.reason, e.message) for e in core.list_namespaced_event(
        NS, field_selector='involvedObject.name=mig').items]
    assert pod.status.phase == 'Succeeded', (pod.status, events)
    seen = core.read_namespaced_pod_log('mig', NS).split()
    entries = [e for e in lab_node.device_checkpoint(state).get('PodDeviceEntries') or []
               if e['PodUID'] == pod.metadata.uid]
    ids = [i for e in entries for v in e['DeviceIDs'].values() for i in v]
    migs = [m['uuid'] for m in mig_node['facts']['gpus'][0]['mig_devices']]
    assert len(ids) == 1 and ids[0] in migs, (entries, migs)
    _spec, devices = spec_devices(state)
    assert sorted(seen) == sorted(COMMON + [p[len('/dev/'):] for p, _ma, _mi in devices[ids[0]]]), (seen, ids)
    msgs = [json.loads(line).get('msg', '') for line in open(os.path.join(
        state, 'var-log', os.path.basename(lab_node.NVIDIA_RUNTIME_LOG))) if line.startswith('{')]
    assert 'Creating CDI modifier for devices: [nvidia.com/gpu=%s]' % ids[0] in msgs, msgs[-20:]
