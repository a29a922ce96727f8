"""NVIDIA's device plugin (nvidia-device-plugin v0.19.1, lab/go nvidia-device-plugin) on the NVML simulator as a host
process registered with a real lab node's kubelet (lab/node/node.py): what test_node_device_plugin_real.py and
test_dra_migrate_pool_real.py run beside their nodes. It runs in a mount namespace of
its own where /var/lib/kubelet/device-plugins is the node's (the kubelet's fixed socket directory) and /proc carries
driver/nvidia-caps/mig-minors (as in lab/tests/oracles/test_device_plugin.py), which the NVIDIA kernel module
writes and the plugin reads for MIG devices. On a MIG node (node.py nvidia_toolkit on a MIG inventory) the node's
runc wrapper gives every container that file too, and the plugin runs as the collection's DaemonSet pod
(test_node_mig_cdi_real.py, the demo's MIG node), or as a pod (test_node_daemonset_real.py's recording of the MIG
shapes, the file written for the shape's GPUs); on other nodes a pod of it fails on MIG GPUs with 'error getting
device paths: missing MIG GPU instance capability path: /proc/driver/nvidia/capabilities/gpu0/mig/gi7/access'."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
from oracle_util import PRIVATE_PROC, build_nvml_sim, go_set, mig_minors_lines, sim_env  # noqa: E402

# the plugin in its own mount namespace: the node's device plugin directory at the kubelet's fixed path
SCRIPT = PRIVATE_PROC + (
    'mount -t tmpfs gpuops-lab-dp /var/lib; mkdir -p /var/lib/kubelet/device-plugins; '
    'mount --bind "$NODE_DP" /var/lib/kubelet/device-plugins; exec "$@"')


class Plugin(object):
    """nvidia-device-plugin on the simulator, against the node's kubelet; SIGHUP makes it reload its config file."""

    def __init__(self, work, node_state, inventory):
        self.work, self.node_state, self.inventory = work, node_state, inventory
        self.binary = os.path.join(go_set('nvidia-device-plugin'), 'nvidia-device-plugin')
        self.config = work / 'config.yaml'
        self.log = work / 'plugin.log'
        self.proc = None

    def start(self, config_text, env):
        build_nvml_sim()
        self.config.write_text(config_text)
        with open(self.inventory) as f:
            inv = json.load(f)
        (self.work / 'mig-minors').write_text('\n'.join(mig_minors_lines(inv)) + '\n')
        (self.work / 'realproc').mkdir(exist_ok=True)
        e = sim_env(self.inventory, self.work / 'nvml-state.json')
        e.update(env)
        e.update(CONFIG_FILE=str(self.config), REALPROC=str(self.work / 'realproc'),
                 MINORS=str(self.work / 'mig-minors'),
                 NODE_DP=os.path.join(self.node_state, 'var-lib', 'kubelet', 'device-plugins'))
        e.pop('NVIDIA_VISIBLE_DEVICES', None)
        out = open(self.log, 'ab')
        self.proc = subprocess.Popen(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', SCRIPT, 'sh',
                                      self.binary], env=e, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def reload(self, config_text):
        self.config.write_text(config_text)
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def tail(self):
        return self.log.read_text()[-4000:] if self.log.exists() else ''
