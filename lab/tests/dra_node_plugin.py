"""NVIDIA's DRA kubelet plugin (gpu-kubelet-plugin v0.5.0, lab/go dra-driver-nvidia-gpu) on the NVML simulator, as a
host process registered with a real lab node's kubelet (lab/node/node.py): what test_node_dra_real.py,
test_dra_extended_real.py and test_dra_migrate_node_real.py run on their nodes. The plugin's kubelet registry and
plugin directories and the CDI root are the node's; its driver root, nvidia-cdi-hook stand-in and simulator library
are lab/kube/dra_slices.py's plugin_dirs under the caller's work directory.

On an inventory with a GPU in MIG mode the plugin runs in a mount namespace of its own whose /proc carries what the
NVIDIA kernel module writes and its MIG prepare path reads (dra-driver-nvidia-gpu v0.5.0, cmd/gpu-kubelet-plugin/
cdi.go GetDevNodesForMigDevice, internal/common/nvcaps.go ParseNVCapDeviceInfo / GetDeviceMajor): the capability
files driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access and .../gi<G>/ci<C>/access ('DeviceFileMinor: N',
'DeviceFileMode: 292', 'DeviceFileModify: 1'), and a devices file whose character devices list nvidia-caps. Without
them NodePrepareResources fails: 'failed to construct MIG device DeviceNode edits: failed to parse GI capabilities
file /proc/driver/nvidia/capabilities/gpu0/mig/gi12/access: open ...: no such file or directory'."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

from conftest import KUBE, NODE_PY, wait_until

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
import dra_slices  # noqa: E402  (lab/kube)
import node as lab_node  # noqa: E402  (lab/node)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'oracles'))
from oracle_util import cap_minor  # noqa: E402  (the lab's numbering of the capability minors, as mig-minors)

# the plugin in its own mount namespace, /proc a tmpfs with links to a fresh procfs ($REALPROC) but for driver/ and
# devices, copied from $NVPROC (needs root: fails, never skips, without it)
PRIVATE_PROC = ('set -e; mount -t proc proc "$REALPROC"; mount -t tmpfs gpuops-lab-proc /proc; '
                'for e in "$REALPROC"/*; do ln -s "$e" "/proc/${e##*/}"; done; rm -f /proc/driver /proc/devices; '
                'cp -r "$NVPROC/driver" /proc/driver; cp "$NVPROC/devices" /proc/devices; exec "$@"')


def mig_inventory(inventory):
    with open(dra_slices.inventory_path(inventory)) as f:
        return any(g.get('mig_mode') for g in json.load(f)['gpus'])


def nvidia_proc(root, inventory):
    """Under ``root``: driver/nvidia/capabilities as the NVIDIA kernel module writes it for the inventory's GPUs (the
    mig config and monitor capabilities; every GPU instance and compute instance capability of each GPU's MIG slots,
    numbered as the lab's mig-minors: lab/tests/oracles/oracle_util.py cap_minor) and devices: this host's
    /proc/devices with nvidia-frontend (195), nvidia-uvm and nvidia-caps (lab/node/node.py's majors) among its
    character devices, as on a host with the driver loaded."""
    with open(dra_slices.inventory_path(inventory)) as f:
        gpus = json.load(f)['gpus']
    caps = os.path.join(root, 'driver', 'nvidia', 'capabilities')

    def access(path, minor):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write('DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n' % minor)
    access(os.path.join(caps, 'mig', 'config'), 1)
    access(os.path.join(caps, 'mig', 'monitor'), 2)
    for i, g in enumerate(gpus):
        minor = g.get('minor_number', i)
        for gi in range(15):
            access(os.path.join(caps, 'gpu%d' % minor, 'mig', 'gi%d' % gi, 'access'), cap_minor(minor, gi))
            for ci in range(8):
                access(os.path.join(caps, 'gpu%d' % minor, 'mig', 'gi%d' % gi, 'ci%d' % ci, 'access'),
                       cap_minor(minor, gi, ci))
    with open('/proc/devices') as f:
        lines = f.read().splitlines()
    ours = {195: 'nvidia-frontend', lab_node.NVIDIA_UVM_MAJOR: 'nvidia-uvm', lab_node.NVIDIA_CAPS_MAJOR: 'nvidia-caps'}
    block = lines.index('Block devices:')
    chars = [ln for ln in lines[1:block] if ln.strip() and int(ln.split()[0]) not in ours]
    chars += ['%3d %s' % kv for kv in ours.items()]
    chars.sort(key=lambda ln: int(ln.split()[0]))
    with open(os.path.join(root, 'devices'), 'w') as f:
        f.write('\n'.join(['Character devices:'] + chars + [''] + lines[block:]) + '\n')


def driver_libs(driver_root, inventory):
    """The driver's libraries by their versioned names, which NodePrepareResources looks for to write the CDI spec's
    mounts ('failed to locate "libcuda.so.": libcuda.so.535.183.01: not found' without them): the NVML simulator as
    libnvidia-ml.so.VERSION, and as the stand-in of libcuda.so.VERSION (nothing loads it in the container: busybox).
    Returns the inventory's driver version."""
    with open(dra_slices.inventory_path(inventory)) as f:
        version = json.load(f)['driver_version']
    lib = os.path.join(driver_root, 'usr', 'lib', 'x86_64-linux-gnu')
    for name in ('libnvidia-ml.so.%s' % version, 'libcuda.so.%s' % version):
        shutil.copy(os.path.join(lib, 'libnvidia-ml.so.1'), os.path.join(lib, name))
    os.symlink('libcuda.so.%s' % version, os.path.join(lib, 'libcuda.so.1'))
    # the device nodes under the driver root (the plugin's dev root): a claim's CDI device has no edits without them
    # ('invalid CDI Spec: failed add device "<claim>-gpu-0": invalid device, empty device edits')
    dev = os.path.join(driver_root, 'dev')
    os.makedirs(os.path.join(dev, 'nvidia-caps'), exist_ok=True)
    for name, major, minor in (('nvidiactl', 195, 255), ('nvidia0', 195, 0),
                               ('nvidia-uvm', lab_node.NVIDIA_UVM_MAJOR, 0),
                               ('nvidia-uvm-tools', lab_node.NVIDIA_UVM_MAJOR, 1)):
        os.mknod(os.path.join(dev, name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return version


class DraPlugin(object):
    """The plugin of node ``name`` (its state directory ``state``, as conftest.real_node yields it) on the simulator's
    ``inventory``; ``work`` a directory of the caller's (pathlib.Path); ``feature_gates`` the plugin's
    --feature-gates (e.g. 'TimeSlicingSettings=true'). start() / stop() / running(); the log is ``log``."""

    def __init__(self, kube, work, state, name, inventory, feature_gates=None):
        self.kube, self.work, self.state, self.name, self.inventory = kube, work, state, name, inventory
        self.feature_gates, self.proc = feature_gates, None
        self.dirs = dra_slices.plugin_dirs(str(work))
        driver_libs(self.dirs['driver'], inventory)
        self.log = work / 'plugin.log'
        self.kubelet = os.path.join(state, 'var-lib', 'kubelet')
        self.cdi = os.path.join(state, 'run', 'cdi')
        os.makedirs(self.cdi, exist_ok=True)

    def start(self):
        d = self.dirs
        env = dict(os.environ, NVML_SIM_INVENTORY=dra_slices.inventory_path(self.inventory),
                   NVML_SIM_STATE=str(self.work / 'nvml-sim-state.json'))
        for k in ('NODE_NAME', 'NAMESPACE', 'CDI_ROOT', 'NVIDIA_DRIVER_ROOT', 'FEATURE_GATES', 'KUBECONFIG'):
            env.pop(k, None)
        cmd = [dra_slices.plugin_binary(), '--kubeconfig', self.kube.kubeconfig, '--node-name', self.name,
               '--image-name', 'gpuops.invalid/lab-none:v0.5.0']
        if self.feature_gates:
            cmd += ['--feature-gates', self.feature_gates]
        cmd += ['--nvidia-driver-root', d['driver'], '--container-driver-root', d['driver'], '--host-root', d['host'],
                '--nvidia-cdi-hook-path', str(self.work / 'nvidia-cdi-hook'), '--cdi-root', self.cdi,
                '--kubelet-registrar-directory-path', os.path.join(self.kubelet, 'plugins_registry'),
                '--kubelet-plugins-directory-path', os.path.join(self.kubelet, 'plugins'), '-v', '4']
        if mig_inventory(self.inventory):
            nvproc, realproc = self.work / 'nvidia-proc', self.work / 'realproc'
            if not nvproc.exists():
                nvidia_proc(str(nvproc), self.inventory)
            realproc.mkdir(exist_ok=True)
            env.update(NVPROC=str(nvproc), REALPROC=str(realproc))
            cmd = ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', PRIVATE_PROC, 'sh'] + cmd
        with open(self.log, 'ab') as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=str(self.work), env=env)
        return self.proc

    def stop(self):
        if self.proc is not None:
            dra_slices.stop_plugin(self.proc)
            self.proc = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None


def start_claim_pod(core, co, ns, node, taint_key, device_class, image, group='resource.k8s.io', version='v1',
                    timeout=120, on_timeout=None):
    """A ResourceClaimTemplate ``gpu`` (one device of ``device_class``) and the pod ``dra`` of namespace ``ns`` that
    claims it on the real node ``node`` (host network, the node's taint tolerated); its container lists the /dev
    entries with nvidia in their names and the NVIDIA_* environment, prints ``done`` and sleeps. Waits until the pod
    runs and returns it; a pod that ends or does not run within ``timeout`` s fails with the namespace's events and
    what ``on_timeout()`` returns (the plugin's log)."""
    co.create_namespaced_custom_object(group, version, ns, 'resourceclaimtemplates', {
        'apiVersion': '%s/%s' % (group, version), 'kind': 'ResourceClaimTemplate', 'metadata': {'name': 'gpu'},
        'spec': {'spec': {'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': device_class}}]}}}})
    core.create_namespaced_pod(ns, {
        'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'dra'},
        'spec': {'hostNetwork': True, 'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                 'terminationGracePeriodSeconds': 1, 'nodeSelector': {'kubernetes.io/hostname': node},
                 'tolerations': [{'key': taint_key, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                 'resourceClaims': [{'name': 'gpu', 'resourceClaimTemplateName': 'gpu'}],
                 'containers': [{'name': 'main', 'image': image, 'imagePullPolicy': 'Never',
                                 'command': ['sh', '-c', 'ls /dev | grep nvidia; env | grep ^NVIDIA | sort; '
                                             'echo done; sleep 3600'],
                                 'resources': {'claims': [{'name': 'gpu'}]}}]}})

    def running():
        p = core.read_namespaced_pod('dra', ns)
        if p.status.phase in ('Failed', 'Succeeded'):
            raise AssertionError('pod ended: %s' % p.status)
        return p if p.status.phase == 'Running' else None
    try:
        return wait_until('pod dra Running', running, timeout)
    except AssertionError as exc:
        ev = [(e.reason, e.message) for e in core.list_namespaced_event(ns).items]
        raise AssertionError('%s\nevents %s\n%s' % (exc, ev, on_timeout() if on_timeout else ''))


def node_slices(co, node, driver, group='resource.k8s.io', version='v1'):
    """The ResourceSlices of ``driver`` that the real node ``node`` publishes (spec.nodeName)."""
    return [s for s in co.list_cluster_custom_object(group, version, 'resourceslices',
                                                     field_selector='spec.driver=%s' % driver)['items']
            if s['spec'].get('nodeName') == node]
