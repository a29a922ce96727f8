"""NVIDIA's DRA kubelet plugin (gpu-kubelet-plugin v0.5.0, lab/go dra-driver-nvidia-gpu) on the NVML simulator, as a
host process registered with a real lab node's kubelet (lab/node/node.py): what test_node_dra_real.py,
test_dra_extended_real.py and test_dra_migrate_node_real.py run on their nodes. The plugin's kubelet registry and
plugin directories and the CDI root are the node's; its driver root, nvidia-cdi-hook stand-in and simulator library
are lab/kube/dra_slices.py's plugin_dirs under the caller's work directory."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

from conftest import KUBE, NODE_PY

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(NODE_PY))
import dra_slices  # noqa: E402  (lab/kube)
import node as lab_node  # noqa: E402  (lab/node)


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
