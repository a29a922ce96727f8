"""The collection's own device-plugin DaemonSets of the strategies `exclusive` and `mps` on a real node (issue #36),
the way test_node_daemonset_real runs the time-slicing one: each pool rendered by stacks/render.render (what the
role's gpu_stack_manifests action runs), its images rewritten through the mirror prefix (gpuops_mirror.registry),
applied on the lab's real control plane, its pods run by a real lab node (lab/node/node.py: kubelet, containerd 2.3.4,
runc) through the pool's RuntimeClass, whose `nvidia` handler the collection's container_runtime_config adds with
NVIDIA's real nvidia-container-runtime 1.20.0 in CDI mode (node.py nvidia_toolkit) - the image pulled from the lab's
registry through the mirror's name.

exclusive: the plugin publishes nvidia.com/gpu = the GPUs (capacity and allocatable), and a pod asking two gets the
device nodes of two GPUs.

mps: what runs and what cannot. The node's driver root carries NVIDIA's driver programs as a real one does - Debian
bookworm non-free's nvidia-smi and nvidia-cuda-mps-control/-server 535.261.03 (lab/nvidia_real/fetch.sh, node.py
nvidia_toolkit) - and the CDI spec mounts them into the pool's containers. The pool's config (config-manager, from
the node's nvidia.com/device-plugin.config label) reaches both DaemonSets; the MPS control daemon (k8s-device-plugin
v0.19.1 `mps-control-daemon`) starts by setting the GPUs' compute mode with `nvidia-smi -i UUID -c EXCLUSIVE_PROCESS`:
the real nvidia-smi loads the node's libnvidia-ml (the NVML simulator), asks it for `nvmlInternalGetExportTable` - a
private entry point of NVIDIA's library that nvml.h does not declare, so the simulator has none - and exits 255
("Mismatch in versions between nvidia-smi and NVML."); the daemon never reaches `nvidia-cuda-mps-control -d`. The
plugin, with MPS sharing in its config, checks the daemon's health with the real nvidia-cuda-mps-control, which finds
no control daemon (exit 1): no nvidia.com/gpu is published. Both exact errors are asserted (a change in either shows
here). What NVIDIA's MPS programs do without a GPU is shown beside the node
(test_nvidia_driver_programs_on_the_nvml_simulator): the control daemon starts and answers every command the
device plugin sends it; nvidia-smi refuses the simulator and leaves its compute mode alone. GFD, run on the node
with the pool's MPS config (the pool's own ConfigMap), writes the MPS labels (gpu.sharing-strategy=mps,
gpu.replicas, the -SHARED product), asserted against what the collection's report reads. The plugin's half with
NVIDIA's real control daemon, started by the lab in place of the MPS daemon that cannot (a deviation, written down in
test_mps_plugin_registers_with_nvidia_control_daemon_started_by_the_lab): it registers GPUs x replicas and a pod
gets the MPS pipe directory and CUDA_MPS_PIPE_DIRECTORY.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_node_strategies_real.py
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
import yaml

from conftest import NODE_PY, ROOT, lab_collections_path, real_node, run_module, wait_until as wait

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
sys.path.insert(0, os.path.dirname(NODE_PY))
import node as lab_node  # noqa: E402  (lab/node)
import registry as lab_registry  # noqa: E402  (lab/node)
from oracle_util import INVENTORIES, probe_facts  # noqa: E402

SUFFIX = '%d' % os.getpid()
NAME = 'lab-st-node-%s' % SUFFIX
NS = 'node-st-real-%s' % SUFFIX
RUNTIME_CLASS = 'nvidia-st-%s' % SUFFIX
TAINT_KEY = 'nvidia.com/gpu'
MIRROR = 'mirror.gpuops.lab/nvcr'
GPUS = 2
MPS_REPLICAS = 3


def render(facts, strategy, settings):
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    return stacks_render.render(dict(
        strategy=strategy, pool='st%s%s' % (strategy[:3], SUFFIX), nodes=[NAME], facts={NAME: facts},
        registry=MIRROR, settings=dict(settings, nvidia={'runtime_class_name': RUNTIME_CLASS})))


def daemonsets(out):
    return {m['metadata']['name']: m for m in out['manifests'] if m['kind'] == 'DaemonSet'}


def apply(api, manifests):
    from kubernetes import utils
    for m in manifests:
        utils.create_from_dict(api, m)


def delete(api, manifests):
    from kubernetes import client, dynamic
    dyn = dynamic.DynamicClient(api)
    for m in reversed(manifests):
        res = dyn.resources.get(api_version=m['apiVersion'], kind=m['kind'])
        try:
            res.delete(name=m['metadata']['name'], namespace=m['metadata'].get('namespace'))
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        except Exception as exc:  # pylint: disable=broad-except  (dynamic client's NotFoundError)
            if getattr(exc, 'status', None) != 404:
                raise


def pod_story(core, pod, ns):
    events = [(e.reason, e.message) for e in core.list_namespaced_event(
        ns, field_selector='involvedObject.name=%s' % pod.metadata.name).items]
    logs = {}
    for c in (pod.spec.init_containers or []) + pod.spec.containers:
        try:
            logs[c.name] = (core.read_namespaced_pod_log(pod.metadata.name, ns, container=c.name) or "")[-1500:]
        except Exception as exc:  # pylint: disable=broad-except
            logs[c.name] = str(exc)[:300]
    return 'status %s\nevents %s\nlogs %s' % (pod.status, events, json.dumps(logs, indent=1))


def pool_pods(core, out, name=None):
    pods = core.list_namespaced_pod('kube-system', label_selector='gpuops.io/sharing-pool=%s' % out['pool']).items
    return [p for p in pods if name is None or p.metadata.name.startswith(name + '-')]


def runtime_msgs(state):
    path = os.path.join(state, 'var-log', os.path.basename(lab_node.NVIDIA_RUNTIME_LOG))
    with open(path) as f:
        return [json.loads(line).get('msg', '') for line in f if line.startswith('{')]


@pytest.fixture(scope='module')
def st_node(kube_real, tmp_path_factory):
    """One real node with two A100s (the simulator), the lab registry holding the device-plugin image under the
    mirrored pinned name, and the collection's `nvidia` runtime handler on the node's containerd."""
    from kubernetes import client
    api = kube_real.api()
    core = client.CoreV1Api(api)
    work = tmp_path_factory.mktemp('st')
    with open(os.path.join(INVENTORIES, 'hgx-a100-80gb.json')) as f:
        inv = json.load(f)
    inv['gpus'] = inv['gpus'][:GPUS]
    inventory = work / 'inventory.json'
    inventory.write_text(json.dumps(inv))
    facts = probe_facts(str(inventory), work / 'probe-state.json')
    image = daemonsets(render(facts, 'exclusive', {}))['nvidia-device-plugin-st%s%s' % ('exc', SUFFIX)][
        'spec']['template']['spec']['containers'][0]['image']
    registry = lab_registry.Registry(str(work / 'registry'))
    registry.start()
    archive = lab_node.device_plugin_image(str(work), image, str(inventory), nvml=False)
    host, path = image.split('/', 1)
    registry.push(archive, *path.rsplit(':', 1))
    try:
        with real_node(kube_real, tmp_path_factory.mktemp('node'), NAME, TAINT_KEY, nvidia_devices=GPUS,
                       extra=('--mirror', '%s=%s' % (host, registry.url))) as state:
            config = os.path.join(state, 'containerd.toml')
            containerd_dir = os.path.dirname(lab_node.programs(kube_real.version)['containerd'])
            runtime = lab_node.nvidia_toolkit(state, str(inventory))['nvidia-container-runtime']
            result = run_module(lab_collections_path(), 'gpuops.k8s_gpu.container_runtime_config',
                                'engine=containerd path=%s runtime_name=nvidia runtime_path=%s cdi=true backup=false'
                                % (config, runtime), env={'PATH': containerd_dir + os.pathsep + os.environ['PATH']})
            assert result.get('changed') is True and not result.get('failed'), result
            lab_node.restart_containerd(state)
            wait('runtime handler nvidia in the Node status', lambda: 'nvidia' in [
                h.name for h in core.read_node(NAME).status.runtime_handlers or []], 60)
            core.create_namespace({'metadata': {'name': NS}})
            wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
                NS, field_selector='metadata.name=default').items, 60)
            try:
                yield {'state': state, 'api': api, 'core': core, 'facts': facts, 'image': image,
                       'uuids': sorted(g['uuid'] for g in inv['gpus']),
                       'minors': {g['uuid']: g.get('minor_number', i) for i, g in enumerate(inv['gpus'])}}
            finally:
                core.delete_namespace(NS)
                wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 60)
    finally:
        registry.stop()


def deploy(st, out):
    """Apply the pool's manifests as rendered and label the node as gpu_node_labels would."""
    apply(st['api'], out['manifests'])
    st['core'].patch_node(NAME, {'metadata': {'labels': out['node_labels'][NAME]}})


def undeploy(st, out):
    core = st['core']
    delete(st['api'], out['manifests'])
    core.patch_node(NAME, {'metadata': {'labels': {k: None for k in out['node_labels'][NAME]}}})
    wait('the pods of pool %s gone' % out['pool'], lambda: not pool_pods(core, out), 90)


def run_pod(core, name, spec, timeout=120):
    core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name}, 'spec': spec})

    def ended():
        p = core.read_namespaced_pod(name, NS)
        return p if p.status.phase in ('Succeeded', 'Failed') else None
    try:
        p = wait('pod %s ended' % name, ended, timeout)
    except AssertionError:
        raise AssertionError(pod_story(core, core.read_namespaced_pod(name, NS), NS))
    assert p.status.phase == 'Succeeded', pod_story(core, p, NS)
    return core.read_namespaced_pod_log(name, NS)


def pod_spec(command, gpus=0, env=None, volumes=()):
    spec = {'restartPolicy': 'Never', 'automountServiceAccountToken': False, 'runtimeClassName': RUNTIME_CLASS,
            'terminationGracePeriodSeconds': 1, 'nodeSelector': {'kubernetes.io/hostname': NAME},
            'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
            'volumes': [v for v, _m in volumes],
            'containers': [{'name': 'main', 'image': lab_node.BUSYBOX_IMAGE, 'imagePullPolicy': 'Never',
                            'command': command, 'env': [{'name': k, 'value': v} for k, v in sorted((env or {}).items())],
                            'volumeMounts': [m for _v, m in volumes]}]}
    if gpus:
        spec['containers'][0]['resources'] = {'limits': {'nvidia.com/gpu': str(gpus)}}
    return spec


def test_exclusive_pool_publishes_whole_gpus_and_a_pod_gets_two(st_node):
    """exclusive: the DaemonSet's pod Running on the real node, nvidia.com/gpu capacity = allocatable = the GPUs
    (no replicas), the config-manager chose the pool's `exclusive` config; a pod asking 2 sees both GPUs' device
    nodes (NVIDIA's runtime turned the plugin's two UUIDs into those CDI devices)."""
    core = st_node['core']
    out = render(st_node['facts'], 'exclusive', {})
    assert out['node_labels'][NAME]['nvidia.com/device-plugin.config'] == 'exclusive', out['node_labels']
    ds = daemonsets(out)
    assert list(ds) == ['nvidia-device-plugin-' + out['pool']], list(ds)
    assert (core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') in (None, '0')
    deploy(st_node, out)
    try:
        def running():
            pods = pool_pods(core, out)
            ok = len(pods) == 1 and pods[0].status.phase == 'Running' and all(
                c.ready for c in pods[0].status.container_statuses or [])
            return pods[0] if ok else None
        try:
            pod = wait('the exclusive DaemonSet pod Running', running, 180)
        except AssertionError:
            raise AssertionError('\n'.join(pod_story(core, p, 'kube-system') for p in pool_pods(core, out)) or 'none')
        assert pod.spec.node_name == NAME and pod.spec.runtime_class_name == RUNTIME_CLASS
        try:
            wait('nvidia.com/gpu allocatable %d' % GPUS, lambda: (
                core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == str(GPUS), 90)
        except AssertionError:
            raise AssertionError('allocatable %s\n%s' % (core.read_node(NAME).status.allocatable,
                                                          pod_story(core, pool_pods(core, out)[0], 'kube-system')))
        assert core.read_node(NAME).status.capacity['nvidia.com/gpu'] == str(GPUS)
        init_log = core.read_namespaced_pod_log(pod.metadata.name, 'kube-system', container='config-manager-init')
        assert 'Successfully updated to config: exclusive' in init_log, init_log[-2000:]
        plugin_log = core.read_namespaced_pod_log(pod.metadata.name, 'kube-system',
                                                  container='nvidia-device-plugin-ctr')
        assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in plugin_log, plugin_log[-3000:]
        lines = run_pod(core, 'excl', pod_spec(['sh', '-c', 'ls /dev | grep nvidia'], gpus=2)).splitlines()
        assert lines == sorted(['nvidia%d' % st_node['minors'][u] for u in st_node['uuids']]
                               + ['nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools']), lines
        asked = [m for m in runtime_msgs(st_node['state'])
                 if m.startswith('Creating CDI modifier for devices: [nvidia.com/gpu=GPU-')]
        assert asked and sorted(asked[-1].split('[', 1)[1].rstrip(']').replace('nvidia.com/gpu=', '').split(
            ' ')) == st_node['uuids'], asked
        core.delete_namespaced_pod('excl', NS)
    finally:
        undeploy(st_node, out)
    # the plugin gone: its devices leave the allocatable (0), the kubelet keeps the resource name in capacity
    wait('nvidia.com/gpu allocatable 0 after the pool is gone', lambda: (
        core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') in (None, '0'), 90)



# What stops the MPS pool on this node (k8s-device-plugin v0.19.1 cmd/mps-control-daemon/mps/daemon.go setComputeMode,
# EchoPipeToControl): the driver's own programs, mounted from the node's driver root by NVIDIA's runtime, run in the
# pool's containers - nvidia-smi refuses the NVML simulator (exit 255), nvidia-cuda-mps-control finds no control
# daemon (exit 1), as the daemon never got to start it.
MPS_DAEMON_ERROR = ('Failed to start MPS daemon: error setting compute mode EXCLUSIVE_PROCESS: error running '
                    'nvidia-smi: exit status 255')
SMI_ON_THE_SIMULATOR = ('Mismatch in versions between nvidia-smi and NVML.\n'
                        'Are you sure you are using nvidia-smi provided with the driver?\n')
MPS_PLUGIN_ERROR = ('Failed to start plugin: error waiting for MPS daemon: error checking MPS daemon health: failed to '
                    'send command to MPS daemon: exit status 1')
NOT_FOUND = 'executable file not found in $PATH'   # what the node gave them before its driver root had the programs


def sim_env(inventory, state):
    return dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(lab_node.NVML_SIM_LIB), NVML_SIM_INVENTORY=str(inventory),
                NVML_SIM_STATE=str(state))


def sim_compute_modes(env):
    """The simulator's compute mode of each GPU, read through NVML (pynvml) in a process of its own."""
    code = ('import json, pynvml; pynvml.nvmlInit(); print(json.dumps([pynvml.nvmlDeviceGetComputeMode('
            'pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]))')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_nvidia_driver_programs_on_the_nvml_simulator(tmp_path):
    """Debian bookworm non-free's nvidia-smi and nvidia-cuda-mps-control 535.261.03 (the node's driver root has these
    files) beside the node, as the MPS control daemon and the plugin run them. nvidia-smi on the simulator (2 A100s):
    `-i UUID -c EXCLUSIVE_PROCESS` exits 255 with its version-mismatch text, after looking up nvmlInternalGetExportTable
    (NVIDIA's private table, not in nvml.h: the simulator has no such symbol) - with the inventory's driver version
    and with the program's own - and the GPUs' compute mode stays DEFAULT (NVML's own nvmlDeviceSetComputeMode sets
    it: shown after). nvidia-cuda-mps-control without a GPU: a client before the daemon exits 1 (`Cannot find MPS
    control daemon process`, what the plugin meets on the node); `-d` starts the control daemon (its pipe directory:
    control sockets, log pipe) and it answers exactly the plugin's and the daemon's commands for the pool (3
    replicas of an 80 GiB GPU): get_default_active_thread_percentage 100.0, set_default_device_pinned_mem_limit
    0 27306M, set_default_active_thread_percentage 33 -> 33.0, then quit ends it."""
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvidia_real', 'fetch.sh')], check=True, capture_output=True,
                   timeout=600)
    programs = {p: os.path.join(lab_node.NVIDIA_REAL_ROOT, rel) for p, rel in lab_node.DRIVER_PROGRAMS.items()}
    if not os.path.exists(lab_node.NVML_SIM_LIB):
        subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    with open(os.path.join(INVENTORIES, 'hgx-a100-80gb.json')) as f:
        inv = json.load(f)
    inv['gpus'] = inv['gpus'][:GPUS]
    own = dict(inv, driver_version='535.261.03', nvml_version='12.535.261.03')   # the programs' own version
    for name, doc in (('inventory', inv), ('own-version', own)):
        inventory = tmp_path / (name + '.json')
        inventory.write_text(json.dumps(doc))
        env = sim_env(inventory, tmp_path / (name + '-state.json'))
        assert sim_compute_modes(env) == [0] * GPUS          # NVML_COMPUTEMODE_DEFAULT
        smi = subprocess.run([programs['nvidia-smi'], '-i', inv['gpus'][0]['uuid'], '-c', 'EXCLUSIVE_PROCESS'],
                             env=env, capture_output=True, text=True, timeout=60)
        assert (smi.returncode, smi.stdout, smi.stderr) == (255, SMI_ON_THE_SIMULATOR, ''), (name, smi)
        assert sim_compute_modes(env) == [0] * GPUS, name    # nothing set
        debug = subprocess.run([programs['nvidia-smi'], '-L'], env=dict(env, LD_DEBUG='symbols'),
                               capture_output=True, text=True, timeout=60)
        assert debug.returncode == 255 and 'undefined symbol: nvmlInternalGetExportTable' in debug.stderr, (
            name, debug.stderr[-2000:])
    # the counterpart: the simulator's nvmlDeviceSetComputeMode (what nvidia-smi -c calls on a driver) does set it
    code = ('import pynvml; pynvml.nvmlInit(); pynvml.nvmlDeviceSetComputeMode(pynvml.nvmlDeviceGetHandleByIndex(0), '
            'pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)')
    subprocess.run([sys.executable, '-c', code], env=env, check=True, capture_output=True, timeout=60)
    assert sim_compute_modes(env) == [3] + [0] * (GPUS - 1)   # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS

    # the MPS control daemon (a unix socket path has at most 107 bytes: a short directory)
    root = tempfile.mkdtemp(prefix='mps-%s-' % SUFFIX, dir='/tmp')
    mps_env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=os.path.join(root, 'pipe'),
                   CUDA_MPS_LOG_DIRECTORY=os.path.join(root, 'log'))
    os.makedirs(mps_env['CUDA_MPS_PIPE_DIRECTORY'])
    os.makedirs(mps_env['CUDA_MPS_LOG_DIRECTORY'])

    def control(command):
        p = subprocess.run([programs['nvidia-cuda-mps-control']], input=command, env=mps_env, capture_output=True,
                           text=True, timeout=30)
        return p.returncode, p.stdout, p.stderr

    daemon_pid = None
    try:
        assert control('get_default_active_thread_percentage') == (1, '', 'Cannot find MPS control daemon process\n')
        d = subprocess.run([programs['nvidia-cuda-mps-control'], '-d'], env=mps_env, capture_output=True, text=True,
                           timeout=30)
        assert d.returncode == 0, d
        log = os.path.join(mps_env['CUDA_MPS_LOG_DIRECTORY'], 'control.log')
        started = wait('the MPS control daemon started', lambda: os.path.exists(log) and (
            lambda t: t if 'Starting control daemon using socket' in t else '')(open(log).read()), 30)
        daemon_pid = int(started.split('Control ', 1)[1].split(']', 1)[0])
        assert sorted(os.listdir(mps_env['CUDA_MPS_PIPE_DIRECTORY'])) == [
            'control', 'control_lock', 'control_privileged', 'log'], os.listdir(mps_env['CUDA_MPS_PIPE_DIRECTORY'])
        limit = '%dM' % (inv['gpus'][0]['memory_total_mib'] * 1024 * 1024 // MPS_REPLICAS // 1024 // 1024)
        assert limit == '27306M'
        assert control('get_default_active_thread_percentage') == (0, '100.0\n', '')
        assert control('set_default_device_pinned_mem_limit 0 %s' % limit) == (0, '', '')
        assert control('set_default_active_thread_percentage %d' % (100 // MPS_REPLICAS)) == (0, '33.0\n', '')
        assert control('get_default_active_thread_percentage') == (0, '33.0\n', '')
        text = open(log).read()
        for cmd in ('get_default_active_thread_percentage', 'set_default_device_pinned_mem_limit 0 27306M',
                    'set_default_active_thread_percentage 33'):
            assert 'Cmd:' + cmd in text, text
        assert control('quit') == (0, '', '')
        wait('the MPS control daemon gone', lambda: not os.path.exists('/proc/%d' % daemon_pid), 30)
        assert 'Exit with status 0' in open(log).read()
        daemon_pid = None
    finally:
        if daemon_pid is not None and os.path.exists('/proc/%d' % daemon_pid):
            os.kill(daemon_pid, signal.SIGKILL)   # the daemon this test started
        shutil.rmtree(root, ignore_errors=True)


def container_status(pod, name):
    return [c for c in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
            if c.name == name][0]


def test_mps_pool_runs_to_the_mps_daemon_and_gfd_labels_it(st_node, tmp_path):
    """mps: the rendered pool (plugin DaemonSet + MPS control daemon DaemonSet, node labels mps.capable and the
    `mps` config) applied; on the real node the daemon pod's mount-shm init container mounts the MPS shm (exit 0; it
    needs a shared /run: node.py), both config-manager inits select `mps`, the plugin runs with the pool's MPS sharing
    (replicas, mpsRoot). NVIDIA's driver programs are in the node's CDI spec (mounted from its driver root) and run
    in the pool's containers - and stop there: the daemon's nvidia-smi refuses the NVML simulator (MPS_DAEMON_ERROR,
    its output SMI_ON_THE_SIMULATOR in the daemon's log), the plugin's nvidia-cuda-mps-control finds no control
    daemon (MPS_PLUGIN_ERROR): no nvidia.com/gpu is allocatable. GFD on the node with the pool's config labels the
    node as an MPS node: gpu.sharing-strategy=mps, gpu.replicas, the product with -SHARED."""
    core = st_node['core']
    out = render(st_node['facts'], 'mps', {'mps': {'replicas': MPS_REPLICAS}})
    labels = out['node_labels'][NAME]
    assert labels['nvidia.com/device-plugin.config'] == 'mps' and labels['nvidia.com/mps.capable'] == 'true', labels
    ds = daemonsets(out)
    assert sorted(ds) == ['nvidia-device-plugin-' + out['pool'], 'nvidia-mps-control-daemon-' + out['pool']], list(ds)
    config = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith(
        '-configs')][0]['data']['mps']
    # the node's CDI spec mounts NVIDIA's driver programs from its driver root at the paths a real node has them
    with open(os.path.join(st_node['state'], 'run', 'cdi', os.path.basename(lab_node.NVIDIA_CDI_SPEC))) as f:
        cdi = yaml.safe_load(f)
    mounts = {m['containerPath']: m['hostPath'] for m in cdi['containerEdits'].get('mounts', [])}
    driver_bin = os.path.join(st_node['state'], 'driver', 'usr', 'bin')
    for prog in lab_node.DRIVER_PROGRAMS:
        assert mounts.get('/usr/bin/' + prog) == os.path.join(driver_bin, prog), sorted(mounts)
    deploy(st_node, out)
    try:
        def logs(prefix, container):
            pods = pool_pods(core, out, prefix + out['pool'])
            if len(pods) != 1:
                return ''
            try:
                # the client answers None for an empty log (a container that has not written yet)
                return core.read_namespaced_pod_log(pods[0].metadata.name, 'kube-system', container=container) or ''
            except Exception:  # pylint: disable=broad-except  (not started yet)
                return ''

        def story():
            return '\n'.join(pod_story(core, p, 'kube-system') for p in pool_pods(core, out)) or 'no pod'
        try:
            daemon_log = wait('the MPS daemon stops at nvidia-smi', lambda: (lambda t: t if MPS_DAEMON_ERROR in t
                              else '')(logs('nvidia-mps-control-daemon-', 'mps-control-daemon-ctr')), 150)
            plugin_log = wait('the plugin stops at nvidia-cuda-mps-control', lambda: (lambda t: t if MPS_PLUGIN_ERROR
                              in t else '')(logs('nvidia-device-plugin-', 'nvidia-device-plugin-ctr')), 60)
        except AssertionError as exc:
            raise AssertionError('%s\n%s' % (exc, story()))
        # the real programs ran in the containers (mounted by NVIDIA's runtime): nvidia-smi's own words on the simulator
        # (klog writes the output after a newline), for the first GPU the daemon asked
        assert SMI_ON_THE_SIMULATOR in daemon_log and NOT_FOUND not in daemon_log, daemon_log[-3000:]
        assert NOT_FOUND not in plugin_log and 'MPS daemon is healthy' not in plugin_log, plugin_log[-3000:]
        # what ran before: the pool's MPS sharing reached both (config-manager, from the node's label)
        for prefix in ('nvidia-mps-control-daemon-', 'nvidia-device-plugin-'):
            assert 'Successfully updated to config: mps' in logs(prefix, 'config-manager-init'), story()
        assert '"replicas": %d' % MPS_REPLICAS in daemon_log and '"replicas": %d' % MPS_REPLICAS in plugin_log
        assert '"mpsRoot": "/run/nvidia/mps"' in plugin_log, plugin_log[-3000:]
        daemon_pod = pool_pods(core, out, 'nvidia-mps-control-daemon-' + out['pool'])[0]
        shm = container_status(daemon_pod, 'mps-control-daemon-mounts').state.terminated
        assert shm is not None and shm.exit_code == 0, story()
        # nothing registered: no nvidia.com/gpu allocatable (the exclusive test's name may stay in capacity, at 0)
        assert (core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') in (None, '0'), story()
        # GFD (not part of a device-plugin pool's render) with the pool's MPS config, on the node's GPUs, through
        # the pool's RuntimeClass
        rec = tmp_path / 'gfd'
        rec.mkdir()
        os.chmod(rec, 0o755)
        (rec / 'product_name').write_text('lab\n')
        (rec / 'config.yaml').write_text(config)
        spec = pod_spec(['gpu-feature-discovery', '--oneshot', '--use-node-feature-api=false',
                         '--output-file=/rec/labels', '--machine-type-file=/rec/product_name',
                         '--config-file=/rec/config.yaml'], env={'NVIDIA_VISIBLE_DEVICES': 'all'},
                        volumes=[({'name': 'rec', 'hostPath': {'path': str(rec), 'type': 'Directory'}},
                                  {'name': 'rec', 'mountPath': '/rec'})])
        spec['containers'][0].update(image=st_node['image'], imagePullPolicy='IfNotPresent')
        run_pod(core, 'gfd-mps', spec)
        gfd = dict(line.split('=', 1) for line in (rec / 'labels').read_text().splitlines() if line)
        want = {'nvidia.com/gpu.sharing-strategy': 'mps', 'nvidia.com/gpu.replicas': str(MPS_REPLICAS),  # expected, not written
                'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB-SHARED', 'nvidia.com/gpu.count': str(GPUS)}
        assert {k: gfd.get(k) for k in want} == want, gfd
        core.delete_namespaced_pod('gfd-mps', NS)
    finally:
        undeploy(st_node, out)


MPS_RESOURCE_DIR = '/run/nvidia/mps/nvidia.com/gpu'   # in the node: the pool's mpsRoot, the resource's directory


def node_mps_control(state, command=None, env=None):
    """Debian's nvidia-cuda-mps-control of the node's driver root, run in the node's mount and pid namespaces (the
    pipe directory the plugin's container mounts is the node's /run/nvidia/mps: its socket path is short there);
    `-d` when command is None, else the command on its stdin."""
    prog = os.path.join(state, 'driver', 'usr', 'bin', 'nvidia-cuda-mps-control')
    argv = ['nsenter', '-t', str(lab_node.ns_pid(state)), '-m', '-p', '--', 'env',
            'CUDA_MPS_PIPE_DIRECTORY=%s/pipe' % MPS_RESOURCE_DIR, 'CUDA_MPS_LOG_DIRECTORY=%s/log' % MPS_RESOURCE_DIR,
            prog] + (['-d'] if command is None else [])
    p = subprocess.run(argv, input=command, env=env, capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_mps_plugin_registers_with_nvidia_control_daemon_started_by_the_lab(st_node):
    """The plugin's half of the MPS pool with NVIDIA's real control daemon. Deviation, and why: NVIDIA's MPS daemon
    (mps-control-daemon) cannot start one here (its nvidia-smi refuses the simulator, above), so the lab starts Debian's
    `nvidia-cuda-mps-control -d` itself on the node, with the pipe and log directories that daemon gives it
    (mpsRoot/nvidia.com/gpu/{pipe,log}), and the pool is applied without the mps-control-daemon DaemonSet (its retry
    would `quit` the lab's daemon); the GPUs' compute mode stays DEFAULT (not EXCLUSIVE_PROCESS) and the shm
    directory is a plain directory (mount-shm would mount a tmpfs there). Then, all real: the plugin's health check
    (`get_default_active_thread_percentage`) reaches the daemon through the pool's /mps hostPath, `MPS daemon is
    healthy`, it registers nvidia.com/gpu = GPUs x replicas (6); a pod asking one gets CUDA_MPS_PIPE_DIRECTORY and the
    daemon's pipe directory (its sockets) and the MPS shm directory mounted as the plugin answers; a pod asking two is
    refused by the plugin's Allocate at admission (MPS replicas: always one per container, internal/rm/rm.go)."""
    core, state = st_node['core'], st_node['state']
    out = render(st_node['facts'], 'mps', {'mps': {'replicas': MPS_REPLICAS}})
    daemon_ds = 'nvidia-mps-control-daemon-' + out['pool']
    manifests = [m for m in out['manifests'] if not (m['kind'] == 'DaemonSet' and m['metadata']['name'] == daemon_ds)]
    assert len(manifests) == len(out['manifests']) - 1
    host_dir = os.path.join(state, 'run', MPS_RESOURCE_DIR.split('/run/', 1)[1])
    # in the node's mount namespace: its /run/nvidia/mps/shm may be the tmpfs an earlier mount-shm left (as on a node)
    in_node = ['nsenter', '-t', str(lab_node.ns_pid(state)), '-m', '--', 'sh', '-c']
    marker = '/run/nvidia/mps/shm/marker-%s' % SUFFIX
    subprocess.run(in_node + ['mkdir -p %(d)s/pipe %(d)s/log /run/nvidia/mps/shm && echo "mps shm of the node" > %(m)s'
                              % {'d': MPS_RESOURCE_DIR, 'm': marker}], check=True, timeout=30)
    assert node_mps_control(state)[0] == 0
    try:
        assert node_mps_control(state, 'get_default_active_thread_percentage') == (0, '100.0\n', '')
        assert sorted(os.listdir(os.path.join(host_dir, 'pipe'))) == [
            'control', 'control_lock', 'control_privileged', 'log']
        apply(st_node['api'], manifests)
        core.patch_node(NAME, {'metadata': {'labels': out['node_labels'][NAME]}})
        try:
            def plugin_log():
                pods = pool_pods(core, out, 'nvidia-device-plugin-' + out['pool'])
                try:
                    return core.read_namespaced_pod_log(pods[0].metadata.name, 'kube-system',
                                                        container='nvidia-device-plugin-ctr') or '' if pods else ''
                except Exception:  # pylint: disable=broad-except  (not started yet)
                    return ''

            def story():
                return '\n'.join(pod_story(core, p, 'kube-system') for p in pool_pods(core, out)) or 'no pod'
            try:
                wait('nvidia.com/gpu allocatable %d' % (GPUS * MPS_REPLICAS), lambda: (
                    core.read_node(NAME).status.allocatable or {}).get('nvidia.com/gpu') == str(GPUS * MPS_REPLICAS),
                    150)
            except AssertionError as exc:
                raise AssertionError('%s\nallocatable %s\n%s' % (exc, core.read_node(NAME).status.allocatable,
                                                                 story()))
            text = plugin_log()
            assert 'MPS daemon is healthy' in text and MPS_PLUGIN_ERROR not in text, text[-3000:]
            assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in text, text[-3000:]
            assert core.read_node(NAME).status.capacity['nvidia.com/gpu'] == str(GPUS * MPS_REPLICAS)
            with open(os.path.join(host_dir, 'log', 'control.log')) as f:
                assert 'Cmd:get_default_active_thread_percentage' in f.read()
            lines = run_pod(core, 'mps-one', pod_spec(['sh', '-c', 'env | grep ^CUDA_MPS | sort; ls /mps/nvidia.com/gpu/pipe; '
                                                       'cat /dev/shm/marker-%s' % SUFFIX], gpus=1)).splitlines()
            assert lines == ['CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe', 'control', 'control_lock',
                             'control_privileged', 'log', 'mps shm of the node'], lines
            core.delete_namespaced_pod('mps-one', NS)
            # two replicas in one container: refused by the plugin's Allocate at the kubelet's admission
            core.create_namespaced_pod(NS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'mps-two'},
                                            'spec': pod_spec(['true'], gpus=2)})
            failed = wait('pod mps-two refused', lambda: (lambda p: p if p.status.phase == 'Failed' else None)(
                core.read_namespaced_pod('mps-two', NS)), 90)
            assert failed.status.reason == 'UnexpectedAdmissionError', failed.status
            assert 'maximum request size for shared resources is 1; found 2' in (failed.status.message or ''), \
                failed.status.message
            core.delete_namespaced_pod('mps-two', NS)
        finally:
            delete(st_node['api'], manifests)
            core.patch_node(NAME, {'metadata': {'labels': {k: None for k in out['node_labels'][NAME]}}})
            wait('the pods of pool %s gone' % out['pool'], lambda: not pool_pods(core, out), 90)
    finally:
        rc = node_mps_control(state, 'quit')
        assert rc == (0, '', ''), rc
        subprocess.run(in_node + ['rm -rf %s %s' % (MPS_RESOURCE_DIR, marker)], check=True, timeout=30)
