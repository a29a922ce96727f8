"""A MIG change on a node with GPU workloads, end to end: a systemd node container with the NVML simulator (stand-in
for the driver), the lab's Kubernetes API emulator holding the node, a GPU pod, a pod without GPUs and the NVIDIA
device plugin's pod, and role gpu_node_sharing changing the pool's geometry.

Checked against the emulator's request log and objects: the node is cordoned, the device plugin is paused through
its deploy label (paused-for-mig-change, as NVIDIA's k8s-mig-manager does) and its pod waited for, only the GPU pod
is evicted (through the Eviction subresource), a host GPU client (a stand-in nvidia-dcgm.service) is stopped and
started again, the geometry is applied, the label is set back to true and the node uncordoned. A second run with
the same geometry sends no write at all. The emulator has no DaemonSet controller: a labelled stand-in thread in
this test deletes the plugin's pod when its node no longer matches its nodeSelector, as the controller would.
Needs the lab's docker engine and node image, like test_mig_persistence.py.
"""
import json
import os
import sys
import threading
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import (ansible_env, dexec, emulator_get, failed_tasks, kube_emulator, lab_node, nvml_sim_state,
                      run_playbook, sh)

NODE = 'migc-1'
DP_LABEL = 'nvidia.com/gpu.deploy.device-plugin'
DCGM_STAND_IN = ('[Unit]\nDescription=lab stand-in for nvidia-dcgm (a GPU client on the host; runs sleep)\n'
                 '[Service]\nExecStart=/bin/sleep infinity\n')


def pod(name, ns='default', gpu=False, owner='ReplicaSet', extra_spec=None, labels=None):
    spec = {'nodeName': NODE, 'containers': [dict({'name': 'c', 'image': 'registry.example/app:1'},
                                                  **({'resources': {'limits': {'nvidia.com/gpu': '1'}}} if gpu else {}))]}
    spec.update(extra_spec or {})
    return {'apiVersion': 'v1', 'kind': 'Pod',
            'metadata': {'name': name, 'namespace': ns, 'labels': labels or {'app': name},
                         'ownerReferences': [{'apiVersion': 'apps/v1', 'kind': owner, 'name': name + '-owner',
                                              'uid': '00000000-0000-0000-0000-%012d' % (len(name) * 7919),
                                              'controller': True}]},
            'spec': spec, 'status': {'phase': 'Running'}}


def seed():
    return [{'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'gpu-operator'}},
            {'apiVersion': 'v1', 'kind': 'Node',
             'metadata': {'name': NODE, 'labels': {'kubernetes.io/hostname': NODE, DP_LABEL: 'true'}},
             'spec': {}, 'status': {'capacity': {'nvidia.com/gpu': '2'}, 'allocatable': {'nvidia.com/gpu': '2'}}},
            pod('train', gpu=True), pod('web'),
            pod('dp', 'gpu-operator', owner='DaemonSet', labels={'app': 'nvidia-device-plugin-daemonset'},
                extra_spec={'nodeSelector': {DP_LABEL: 'true'}})]


class DaemonSetControllerStandIn(threading.Thread):
    """Lab stand-in for the DaemonSet controller: deletes a DaemonSet pod on NODE whose nodeSelector the node no
    longer matches (what takes the device plugin away when its deploy label is paused)."""

    def __init__(self, emu):
        super().__init__(daemon=True)
        self.emu = emu
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.05):
            labels = emulator_get(self.emu, '/api/v1/nodes/%s' % NODE)['metadata'].get('labels') or {}
            for p in emulator_get(self.emu, '/api/v1/pods?fieldSelector=spec.nodeName%%3D%s' % NODE)['items']:
                sel = p['spec'].get('nodeSelector') or {}
                if sel and any(labels.get(k) != v for k, v in sel.items()):
                    req = urllib.request.Request('%s/api/v1/namespaces/%s/pods/%s' % (
                        self.emu['url'], p['metadata']['namespace'], p['metadata']['name']), method='DELETE')
                    try:
                        urllib.request.urlopen(req, timeout=10).read()
                    except urllib.error.HTTPError as e:  # gone meanwhile
                        if e.code != 404:
                            raise


@pytest.fixture(scope='module')
def lab(collections_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp('migc')
    with lab_node('i16-migc-%d' % os.getpid(), NODE, network='none', nvml_profile='h100-mig') as name:
        unit = tmp / 'nvidia-dcgm.service'
        unit.write_text(DCGM_STAND_IN)
        sh('docker', 'cp', str(unit), '%s:/etc/systemd/system/nvidia-dcgm.service' % name)
        dexec(name, 'systemctl', 'daemon-reload')
        dexec(name, 'systemctl', 'start', 'nvidia-dcgm.service')
        with kube_emulator(tmp, 'i16-migc', seed()) as emu:
            controller = DaemonSetControllerStandIn(emu)
            controller.start()
            try:
                yield {'node': name, 'emu': emu, 'tmp': tmp, 'collections_path': collections_path}
            finally:
                controller.stop.set()
                controller.join(5)


def geometry(name):
    return [sorted((g['profile_id'], len(g['compute_instances'])) for g in gpu['gpu_instances'])
            for gpu in nvml_sim_state(name)['gpus']]


def run_role(lab, devices, **extra):
    tmp = lab['tmp']
    inv = tmp / 'hosts.yml'
    inv.write_text(yaml.safe_dump({'all': {
        'hosts': {'localhost': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}},
        'children': {'gpu_nodes': {'hosts': {NODE: {
            'ansible_host': lab['node'], 'ansible_connection': 'community.docker.docker',
            'ansible_python_interpreter': '/usr/bin/python3'}}}},
        'vars': {'gpuops_become': False, 'gpuops_kubeconfig': lab['emu']['kubeconfig']}}}))
    play = tmp / 'play.yml'
    variables = dict({'gpu_node_sharing_strategy': 'mig', 'gpu_sharing_stack_mig': {'devices': devices},
                      'gpu_node_sharing_refresh_facts': False, 'gpu_node_sharing_mig_persist': False,
                      'gpu_node_sharing_mig_drain_timeout': 30}, **extra)
    play.write_text(yaml.safe_dump([{'hosts': 'gpu_nodes', 'gather_facts': False, 'roles': [
        {'role': 'gpuops.k8s_gpu.gpu_node_sharing', 'vars': variables}]}]))
    proc, doc = run_playbook(inv, play, ansible_env(lab['collections_path']))
    return proc.returncode, doc, failed_tasks(doc)


def writes(emu, since):
    """The role's write requests (the stand-in controller's pod DELETEs left out), in order."""
    out = []
    for r in emulator_get(emu, '/_emulator/requests?since=%d&writes=1' % since)['items']:
        if r['method'] == 'DELETE':
            continue
        body = json.loads(r['body'] or '{}')
        if r['path'].endswith('/eviction'):
            out.append(('evict', r['path'].split('/')[-2], body.get('kind'), body.get('apiVersion')))
        elif r['method'] == 'PATCH' and r['path'] == '/api/v1/nodes/%s' % NODE:
            if 'spec' in body:
                out.append(('cordon' if body['spec']['unschedulable'] else 'uncordon',))
            if (body.get('metadata') or {}).get('labels'):
                out.append(('labels', body['metadata']['labels']))
        else:
            out.append((r['method'], r['path']))
    return out


def pods(emu):
    return sorted(p['metadata']['name'] for p in emulator_get(emu, '/api/v1/pods')['items'])


def dcgm_start(name):
    return dexec(name, 'systemctl', 'show', 'nvidia-dcgm.service', '-p', 'ExecMainStartTimestampMonotonic').stdout


def converge(lab, devices):
    """Run the role for devices on the lab's node; it must succeed. Returns the emulator's request log position and the
    DCGM service's start time, both taken before the run, and the run's document."""
    since = emulator_get(lab['emu'], '/_emulator/requests')['seq']
    dcgm_before = dcgm_start(lab['node'])
    rc, doc, fails = run_role(lab, devices)
    assert rc == 0, fails
    return since, dcgm_before, doc


def test_MIGC_05_mig_change_cordons_pauses_evicts_applies_and_gives_the_node_back(lab):
    emu, name = lab['emu'], lab['node']
    since, dcgm_before, doc = converge(lab, {'3g.40gb': 2})
    assert geometry(name) == [[(9, 1), (9, 1)], [(9, 1), (9, 1)]]
    events = writes(emu, since)
    assert events == [('cordon',), ('labels', {DP_LABEL: 'paused-for-mig-change'}),
                      ('evict', 'train', 'Eviction', 'policy/v1'),
                      ('labels', {DP_LABEL: 'true'}), ('uncordon',)], events
    # only the GPU pod was evicted; the plugin's pod went with its label (the stand-in controller)
    assert pods(emu) == ['web']
    node = emulator_get(emu, '/api/v1/nodes/%s' % NODE)
    assert node['metadata']['labels'][DP_LABEL] == 'true'
    assert not node['spec'].get('unschedulable')
    assert 'gpuops.io/mig-change' not in (node['metadata'].get('annotations') or {})
    # the host GPU client was stopped and started again
    assert dexec(name, 'systemctl', 'is-active', 'nvidia-dcgm.service').stdout.strip() == 'active'
    assert dcgm_start(name) != dcgm_before
    drained = [r for p in doc['plays'] for t in p['tasks'] for r in t['hosts'].values()
               if t['task']['name'].endswith('evict its GPU pods')]
    assert drained and drained[0]['evicted'] == ['default/train'] and drained[0]['kept'] == ['default/web']


def test_MIGC_06_same_geometry_again_sends_no_write_and_does_not_cordon(lab):
    emu, name = lab['emu'], lab['node']
    since, dcgm_before, doc = converge(lab, {'3g.40gb': 2})
    assert writes(emu, since) == []
    assert dcgm_start(name) == dcgm_before
    changed = [t['task']['name'] for p in doc['plays'] for t in p['tasks'] for r in t['hosts'].values()
               if r.get('changed')]
    assert changed == [], changed


def test_MIGC_07_a_pod_that_cannot_be_evicted_stops_with_the_node_cordoned_and_geometry_untouched(lab):
    emu, name = lab['emu'], lab['node']
    body = pod('held', gpu=True, labels={'app': 'held'})
    req = urllib.request.Request(emu['url'] + '/api/v1/namespaces/default/pods', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'}, method='POST')
    urllib.request.urlopen(req, timeout=10).read()
    pdb = {'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget', 'metadata': {'name': 'held', 'namespace': 'default'},
           'spec': {'maxUnavailable': 0, 'selector': {'matchLabels': {'app': 'held'}}}}
    req = urllib.request.Request(emu['url'] + '/apis/policy/v1/namespaces/default/poddisruptionbudgets',
                                 data=json.dumps(pdb).encode(), headers={'Content-Type': 'application/json'}, method='POST')
    urllib.request.urlopen(req, timeout=10).read()
    before = geometry(name)
    rc, doc, fails = run_role(lab, {'1g.10gb': 7}, gpu_node_sharing_mig_drain_timeout=2)
    assert rc != 0
    msg = '\n'.join(fails)
    assert 'default/held (eviction refused: PodDisruptionBudget)' in msg and 'The node stays cordoned' in msg, msg
    assert geometry(name) == before
    node = emulator_get(emu, '/api/v1/nodes/%s' % NODE)
    assert node['spec'].get('unschedulable') is True
    assert node['metadata']['labels'][DP_LABEL] == 'true'  # the GPU clients were given back
    assert dexec(name, 'systemctl', 'is-active', 'nvidia-dcgm.service').stdout.strip() == 'active'
    # the pod is let go: the next run finishes the change and uncordons the node it cordoned
    req = urllib.request.Request(emu['url'] + '/apis/policy/v1/namespaces/default/poddisruptionbudgets/held',
                                 method='DELETE')
    urllib.request.urlopen(req, timeout=10).read()
    since, _, _ = converge(lab, {'1g.10gb': 7})
    assert geometry(name) == [[(19, 1)] * 7, [(19, 1)] * 7]
    events = writes(emu, since)
    assert ('evict', 'held', 'Eviction', 'policy/v1') in events and events[-1] == ('uncordon',), events
    assert ('cordon',) not in events  # it was still cordoned from the stopped run
    assert not emulator_get(emu, '/api/v1/nodes/%s' % NODE)['spec'].get('unschedulable')
