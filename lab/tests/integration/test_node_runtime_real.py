"""The collection's node layer on a real node (issue #36, a first piece): module container_runtime_config adds the
`nvidia` runtime (with CDI) to the real node's containerd 2.3.4 config (lab/node/node.py: its config version 3 file),
containerd is restarted and loads it, the kubelet publishes the handler in the Node's status.runtimeHandlers, and a
pod whose RuntimeClass is the collection's (gpu_stack_nvidia.runtime_class: handler `nvidia`) runs through it.

What stands in: the `nvidia` runtime's binary (the module's runtime_path) is a script that notes each call and runs
the node's runc (the lab's oom_score_adj wrapper, lab/node/README.md), not nvidia-container-runtime, which is not built here (its CDI mode needs a CDI spec of
the GPUs, its legacy mode libnvidia-container). The RuntimeClass carries the pid in its name (handler `nvidia`): a
cluster object, on the shared cluster.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_runtime_real.py
"""
from __future__ import annotations

import os
import sys
import tomllib

import pytest

from conftest import NODE_PY, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)

# the nvidia handler's binary: notes each call, then runs the node's runc (no nvidia-container-runtime is built here)
STANDIN = '''#!/bin/sh
echo "$*" >> %(calls)s
exec %(runc)s "$@"
'''
SUFFIX = '%d' % os.getpid()
NAME = 'lab-rt-node-%s' % SUFFIX
NS = 'node-rt-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-runtime-real-%s' % SUFFIX
RUNTIME_CLASS = 'nvidia-lab-%s' % SUFFIX


@pytest.fixture(scope='module')
def rt_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, node_api = client.CoreV1Api(api), client.NodeV1Api(api)
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY) as state:
        core.create_namespace({'metadata': {'name': NS}})
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        try:
            yield {'state': state, 'core': core, 'node_api': node_api, 'kube': kube_real}
        finally:
            core.delete_namespace(NS)
            wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
            try:
                node_api.delete_runtime_class(RUNTIME_CLASS)
            except client.ApiException as exc:
                assert exc.status == 404, exc


def handlers(core):
    return sorted(h.name for h in core.read_node(NAME).status.runtime_handlers or [])


def test_module_adds_nvidia_runtime_containerd_loads_it(rt_node):
    state, core = rt_node['state'], rt_node['core']
    assert 'nvidia' not in handlers(core)
    config = os.path.join(state, 'containerd.toml')
    containerd_dir = os.path.dirname(lab_node.programs(rt_node['kube'].version)['containerd'])
    standin = os.path.join(state, 'bin', 'nvidia-container-runtime')
    with open(standin, 'w') as f:
        f.write(STANDIN % {'calls': os.path.join(state, 'logs', 'nvidia-runtime.calls'),
                           'runc': os.path.join(state, 'bin', 'runc')})
    os.chmod(standin, 0o755)
    result = run_module(lab_collections_path(), 'gpuops.k8s_gpu.container_runtime_config',
                        'engine=containerd path=%s runtime_name=nvidia runtime_path=%s cdi=true backup=false'
                        % (config, standin),
                        env={'PATH': containerd_dir + os.pathsep + os.environ['PATH']})
    assert result.get('changed') is True and not result.get('failed'), result
    with open(config, 'rb') as f:
        doc = tomllib.load(f)
    runtimes = doc['plugins']['io.containerd.cri.v1.runtime']['containerd']['runtimes']
    assert runtimes['nvidia']['options']['BinaryName'] == standin
    assert runtimes['nvidia']['options']['SystemdCgroup'] is False   # copied from runc's, as the kubelet's driver
    assert doc['plugins']['io.containerd.cri.v1.images']['pinned_images']['sandbox'] == lab_node.PAUSE_IMAGE
    lab_node.restart_containerd(state)
    wait('runtime handler nvidia in the Node status', lambda: 'nvidia' in handlers(core), 60)
    assert handlers(core) == ['', 'nvidia', 'runc'], handlers(core)


def test_pod_of_the_collections_runtime_class_runs(rt_node):
    core, node_api = rt_node['core'], rt_node['node_api']
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpu_stack_nvidia
    rc = gpu_stack_nvidia.runtime_class(RUNTIME_CLASS)
    assert rc['handler'] == 'nvidia'
    node_api.create_runtime_class(rc)
    core.create_namespaced_pod(NS, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'rt'},
        'spec': {'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                 'runtimeClassName': RUNTIME_CLASS, 'terminationGracePeriodSeconds': 1,
                 'nodeSelector': {'kubernetes.io/hostname': NAME},
                 'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                                 'command': ['sh', '-c', 'echo through the nvidia handler']}]}})

    def ended():
        p = core.read_namespaced_pod('rt', NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    p = wait('pod rt ended', ended, 120)
    assert p.status.phase == 'Succeeded', p.status
    assert core.read_namespaced_pod_log('rt', NS) == 'through the nvidia handler\n'
    # the shim ran the nvidia handler's binary (the stand-in) for the pod's sandbox and its container
    with open(os.path.join(rt_node['state'], 'logs', 'nvidia-runtime.calls')) as f:
        creates = [line.split() for line in f if line.split()[:1] == ['create'] or ' create ' in line]
    assert len(creates) == 2, creates
