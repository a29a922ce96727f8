"""The collection's node layer on a real node with NVIDIA's real container runtime (issue #36): module
container_runtime_config adds the `nvidia` runtime (with CDI) to the real node's containerd 2.3.4 config
(lab/node/node.py: its config version 3 file), its BinaryName being nvidia-container-runtime of
NVIDIA/nvidia-container-toolkit v1.20.0 (lab/go set nvidia-container-runtime, built from the Go module proxy) in CDI
mode; containerd is restarted and loads it, the kubelet publishes the handler in the Node's status.runtimeHandlers, and
a pod whose RuntimeClass is the collection's (stacks/nvidia.runtime_class: handler `nvidia`) runs through it.

The node's CDI spec is what `nvidia-ctk cdi generate --mode=nvml` (the same toolkit build) writes on the NVML
simulator (lab/nvml_sim, inventory t4.json) with a driver root of the lab (node.py nvidia_toolkit): the simulator is
the driver's libnvidia-ml.so.<version>, the device nodes are the lab's (node.py --nvidia-devices). A pod asking for GPU
0 as the collection's device plugin does by default (deviceListStrategy envvar: NVIDIA_VISIBLE_DEVICES) gets
/dev/nvidia0, /dev/nvidiactl and that library injected by the runtime (its busybox image has none of them), and the
runtime's own log shows the CDI modification; the same pod without the runtime class gets nothing.

What remains a stand-in: the driver (the NVML simulator; libcuda is an empty file, no CUDA call can be made) and the
device nodes (mknod of NVIDIA's majors; opening one fails with ENXIO). The RuntimeClass carries the pid in its name
(handler `nvidia`): a cluster object, on the shared cluster.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_runtime_real.py
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib

import pytest

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)

SUFFIX = '%d' % os.getpid()
NAME = 'lab-rt-node-%s' % SUFFIX
NS = 'node-rt-real-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-node-runtime-real-%s' % SUFFIX
RUNTIME_CLASS = 'nvidia-lab-%s' % SUFFIX
INVENTORY = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', 't4.json')
LIBDIR = '/usr/lib/x86_64-linux-gnu'
# what the container reports: each path it has (with a checksum for files), and NVIDIA_VISIBLE_DEVICES
PROBE = ('for f in /dev/nvidia0 /dev/nvidiactl %(lib)s/libnvidia-ml.so.%(v)s %(lib)s/libcuda.so.%(v)s '
         '%(lib)s/libnvidia-ml.so.1 %(lib)s/libcuda.so; do '
         'if [ -L "$f" ]; then echo "link $f $(readlink "$f")"; elif [ -c "$f" ]; then echo "dev $f"; '
         'elif [ -f "$f" ]; then echo "file $f $(md5sum < "$f" | cut -d" " -f1)"; '
         'fi; done; if [ -s /etc/ld.so.cache ]; then echo ldcache; fi; '
         'echo "env NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-unset}"')


@pytest.fixture(scope='module')
def rt_node(kube_real, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    core, node_api = client.CoreV1Api(api), client.NodeV1Api(api)
    with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=1) as state:
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


def driver_version():
    with open(INVENTORY) as f:
        return json.load(f)['driver_version']


def test_NCT_21_module_adds_the_real_nvidia_runtime_containerd_loads_it(rt_node):
    state, core = rt_node['state'], rt_node['core']
    assert 'nvidia' not in handlers(core)
    progs = lab_node.nvidia_toolkit(state, INVENTORY)
    runtime = progs['nvidia-container-runtime']
    # NVIDIA's own runtime, not a stand-in: the toolkit's build from the module proxy, reporting the pinned release
    assert os.path.basename(os.path.dirname(runtime)).startswith('nvidia-container-runtime-'), runtime
    version = subprocess.run([runtime, '--version'], capture_output=True, text=True, timeout=30)
    assert 'NVIDIA Container Runtime version 1.20.0' in version.stdout, version.stdout + version.stderr
    with open(os.path.join(state, 'run', 'cdi', 'nvidia.yaml')) as f:
        spec = f.read()
    assert 'kind: nvidia.com/gpu' in spec and '- name: "0"' in spec and progs['nvidia-cdi-hook'] in spec, spec
    config = os.path.join(state, 'containerd.toml')
    containerd_dir = os.path.dirname(lab_node.programs(rt_node['kube'].version)['containerd'])
    result = run_module(lab_collections_path(), 'gpuops.k8s_gpu.container_runtime_config',
                        'engine=containerd path=%s runtime_name=nvidia runtime_path=%s cdi=true backup=false'
                        % (config, runtime),
                        env={'PATH': containerd_dir + os.pathsep + os.environ['PATH']})
    assert result.get('changed') is True and not result.get('failed'), result
    with open(config, 'rb') as f:
        doc = tomllib.load(f)
    cri = doc['plugins']['io.containerd.cri.v1.runtime']
    runtimes = cri['containerd']['runtimes']
    assert runtimes['nvidia']['options']['BinaryName'] == runtime
    assert runtimes['nvidia']['options']['SystemdCgroup'] is False   # copied from runc's, as the kubelet's driver
    assert cri['enable_cdi'] is True
    assert doc['plugins']['io.containerd.cri.v1.images']['pinned_images']['sandbox'] == lab_node.PAUSE_IMAGE
    lab_node.restart_containerd(state)
    wait('runtime handler nvidia in the Node status', lambda: 'nvidia' in handlers(core), 60)
    assert handlers(core) == ['', 'nvidia', 'runc'], handlers(core)


def run_pod(rt_node, name, runtime_class):
    core = rt_node['core']
    spec = {'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
            'terminationGracePeriodSeconds': 1, 'nodeSelector': {'kubernetes.io/hostname': NAME},
            'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
            'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                            'env': [{'name': 'NVIDIA_VISIBLE_DEVICES', 'value': '0'}],
                            'command': ['sh', '-c', PROBE % {'lib': LIBDIR, 'v': driver_version()}]}]}
    if runtime_class:
        spec['runtimeClassName'] = runtime_class
    core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name}, 'spec': spec})

    def ended():
        p = core.read_namespaced_pod(name, NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    p = wait('pod %s ended' % name, ended, 120)
    log = core.read_namespaced_pod_log(name, NS)
    assert p.status.phase == 'Succeeded', (p.status, log)
    return log.splitlines()


def runtime_log(state):
    path = os.path.join(state, 'var-log', os.path.basename(lab_node.NVIDIA_RUNTIME_LOG))
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith('{')]


def test_NCT_22_pod_of_the_collections_runtime_class_gets_the_gpu_from_the_toolkit(rt_node):
    node_api, state = rt_node['node_api'], rt_node['state']
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import nvidia
    rc = nvidia.runtime_class(RUNTIME_CLASS)
    assert rc['handler'] == 'nvidia'
    node_api.create_runtime_class(rc)
    with open(lab_node.NVML_SIM_LIB, 'rb') as f:
        sim_md5 = hashlib.md5(f.read()).hexdigest()
    v = driver_version()
    lines = run_pod(rt_node, 'rt', RUNTIME_CLASS)
    # injected by the toolkit from the CDI spec (the image has none of these): the GPU's device node and the control
    # device, the driver's libraries (the NVML simulator, byte for byte; libcuda empty), what its createContainer
    # hooks (nvidia-cdi-hook) made in the container - the soname link by update-ldcache (ldconfig; the simulator's
    # SONAME is libnvidia-ml.so.1), the libcuda.so link by create-symlinks, the ld cache - and the spec's env edit
    assert lines == ['dev /dev/nvidia0', 'dev /dev/nvidiactl',
                     'file %s/libnvidia-ml.so.%s %s' % (LIBDIR, v, sim_md5),
                     'file %s/libcuda.so.%s %s' % (LIBDIR, v, hashlib.md5(b'').hexdigest()),
                     'link %s/libnvidia-ml.so.1 libnvidia-ml.so.%s' % (LIBDIR, v),
                     'link %s/libcuda.so libcuda.so.1' % LIBDIR,
                     'ldcache', 'env NVIDIA_VISIBLE_DEVICES=void'], lines
    # the runtime's own log: the shim ran nvidia-container-runtime, which turned the envvar into a CDI device request
    msgs = [e.get('msg', '') for e in runtime_log(state)]
    assert 'Creating CDI modifier for devices: [nvidia.com/gpu=0]' in msgs, msgs[-40:]
    assert 'No devices requested; no modification required.' in msgs, msgs[-40:]   # the pod's sandbox (pause)


def test_NCT_22_pod_without_the_runtime_class_gets_no_gpu(rt_node):
    before = len(runtime_log(rt_node['state']))
    lines = run_pod(rt_node, 'plain', None)
    assert lines == ['env NVIDIA_VISIBLE_DEVICES=0'], lines   # runc alone: the variable is just a variable
    assert len(runtime_log(rt_node['state'])) == before       # and NVIDIA's runtime was not called
