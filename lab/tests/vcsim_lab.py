"""The lab's vSphere simulator (lab/vcsim) for the tests: start and stop one instance, read it with pyVmomi.
Lab code only; nothing of the collection imports it."""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from conftest import PLAY_TIMEOUT
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

ROOT = Path(__file__).resolve().parents[2]
VCSIM = ROOT / "lab" / "vcsim"
sys.path.insert(0, str(VCSIM))
from vcsim_task import wait_task  # noqa: E402,F401  (re-exported for the tests)


class VcSim:
    """One running simulator: its state (start.sh's JSON), a lazily opened pyVmomi session, lookups by name."""

    def __init__(self, state, state_dir, name):
        self.state, self.state_dir, self.name = state, state_dir, name
        self.model = state["model"]
        self.address, self.port = state["host"], state["port"]
        self.user, self.pwd = state["username"], state["password"]
        self.si = None
        self._content = None

    def connect(self):
        """A new session. The simulator is a self-signed https server on 127.0.0.1: no certificate to validate."""
        return SmartConnect(host=self.address, port=self.port, user=self.user, pwd=self.pwd,
                            disableSslCertValidation=True)

    @property
    def content(self):
        if self._content is None:
            if self.si is None:
                self.si = self.connect()
            self._content = self.si.RetrieveContent()
        return self._content

    def conn(self):
        """The connection options of the collection's ESXi module."""
        return dict(hostname=self.address, port=self.port, username=self.user, password=self.pwd, validate_certs=False)

    def all(self, kind):
        view = self.content.viewManager.CreateContainerView(self.content.rootFolder, [kind], True)
        try:
            return sorted(view.view, key=lambda o: o.name)
        finally:
            view.DestroyView()

    def vm(self, name):
        return next(v for v in self.all(vim.VirtualMachine) if v.name == name)

    def host(self, name):
        return next(h for h in self.all(vim.HostSystem) if h.name == name)

    def vms_on(self, host_name):
        return [v.name for v in self.all(vim.VirtualMachine) if v.runtime.host.name == host_name]

    def reconfig_tasks(self, vm=None):
        """Keys of the ReconfigVM tasks the simulator has recorded (for one VM, or all)."""
        return set(t.info.key for t in self.content.taskManager.recentTask
                   if t.info.descriptionId == "VirtualMachine.reconfigVm" and (vm is None or t.info.entity == vm))


def start_vcsim(tmp_path_factory, model, prefix, extra=(), gpus=None, expect_ok=True):
    """lab/vcsim/start.sh in a state directory of its own. Returns a VcSim, or with expect_ok=False the
    CompletedProcess (for tests of start.sh's refusals)."""
    state_dir = tmp_path_factory.mktemp("vcsim-%s" % model)
    name = "%s-%s-%s" % (prefix, model, uuid.uuid4().hex[:6])
    env = dict(os.environ, VCSIM_STATE_DIR=str(state_dir))
    cmd = [str(VCSIM / "start.sh"), "--model", model, "--name", name]
    if gpus:
        cmd += ["--gpus", str(gpus)]
    if extra:
        cmd += ["--", *extra]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=PLAY_TIMEOUT)
    if not expect_ok:
        return r
    assert r.returncode == 0, "start.sh failed (%s):\n%s\n%s" % (r.returncode, r.stdout, r.stderr)
    state = json.loads(r.stdout)
    assert state["host"] == "127.0.0.1" and state["pid"] > 0
    return VcSim(state, state_dir, name)


def stop_vcsim(sim):
    if sim.si is not None:
        try:
            Disconnect(sim.si)
        except Exception:
            pass
    env = dict(os.environ, VCSIM_STATE_DIR=str(sim.state_dir))
    r = subprocess.run([str(VCSIM / "stop.sh"), "--name", sim.name], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not (Path(sim.state_dir) / ("%s.pid" % sim.name)).exists()
