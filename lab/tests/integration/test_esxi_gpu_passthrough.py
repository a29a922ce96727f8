"""gpuops.k8s_gpu.esxi_gpu_passthrough (module and role) against the lab's vSphere simulator, in both models:
vCenter with a cluster (3 hosts) and a standalone ESXi host.

Run: /work/main/.venv/bin/pytest lab/tests/integration/test_esxi_gpu_passthrough.py
Every module run goes through the `ansible` CLI; every setting is read back with pyVmomi, and the number of
ReconfigVM_Task calls is counted on the simulator's TaskManager, independently of what the module reports.
Nothing here skips: a simulator that cannot be built or started is an error.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyVmomi import vim

from conftest import PLAY_TIMEOUT, run_playbook
from vcsim_lab import start_vcsim, stop_vcsim, wait_task

ROOT = Path(__file__).resolve().parents[3]
VCSIM = ROOT / "lab" / "vcsim"
VENV_BIN = Path(sys.executable).parent
MODULE = "gpuops.k8s_gpu.esxi_gpu_passthrough"
NVIDIA = 0x10DE
T4, A100, V100 = 0x1EB8, 0x20F1, 0x1DB4
# Not "pass": Ansible masks a no_log value wherever it appears in the output ("passthrough" -> "********through").
PASSWORD = "Lab-Secret-42"
GB = 1024
DirectBacking = vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo
DynamicBacking = vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo


VMS_PER_HOST = 4


def make_vms(sim):
    """VMs gpu-h<H>-vm<I> (64 MB, BIOS, one disk) created on each host, so every test knows where its VMs are
    (the simulator places its own VMs at random, and RelocateVM_Task does not update host.vm)."""
    dc = sim.content.rootFolder.childEntity[0]
    for h, host in enumerate(sim.all(vim.HostSystem)):
        for i in range(VMS_PER_HOST):
            disk = vim.vm.device.VirtualDisk(
                key=-1, controllerKey=1000, unitNumber=0, capacityInKB=1024,
                backing=vim.vm.device.VirtualDisk.FlatVer2BackingInfo(diskMode="persistent", fileName=""))
            spec = vim.vm.ConfigSpec(name="gpu-h%d-vm%d" % (h, i), memoryMB=64, numCPUs=1, guestId="otherGuest",
                                     files=vim.vm.FileInfo(vmPathName="[LocalDS_0]"),
                                     deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", fileOperation="create",
                                                                                   device=disk)])
            wait_task(dc.vmFolder.CreateVM_Task(config=spec, pool=host.parent.resourcePool, host=host))


def start_sim(tmp_path_factory, model, extra=()):
    sim = start_vcsim(tmp_path_factory, model, "esxi-gpu", extra=("-password", PASSWORD) + tuple(extra))
    make_vms(sim)
    return sim


stop_sim = stop_vcsim


@pytest.fixture(scope="module")
def vcenter(tmp_path_factory):
    sim = start_sim(tmp_path_factory, "vcenter", ("-hosts", "3"))
    yield sim
    stop_sim(sim)


@pytest.fixture(scope="module")
def esx(tmp_path_factory):
    sim = start_sim(tmp_path_factory, "esx")
    yield sim
    stop_sim(sim)


@pytest.fixture(params=["vcenter", "esx"])
def sim(request):
    return request.getfixturevalue(request.param)


def ansible_env(collections_path):
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOCALHOST_WARNING="0",
                ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                ANSIBLE_DEPRECATION_WARNINGS="0")


def run(sim, collections_path, check=False, diff=False, **args):
    """Run the module once with the ansible CLI; returns its result dict."""
    params = dict(sim.conn(), **args)
    cmd = [str(VENV_BIN / "ansible"), "localhost", "-c", "local", "-m", MODULE, "-a", json.dumps(params)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    r = subprocess.run(cmd, cwd=ROOT, env=ansible_env(collections_path), capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        raise AssertionError("not JSON (rc=%s):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
    res = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert PASSWORD not in r.stdout + r.stderr
    return res


def run_many(sim, collections_path, cases):
    """Run the module once per case, all in one ansible-playbook run (one controller start-up instead of one per case:
    the lab step is CPU-bound). ``cases`` are (check, args); every case runs whatever the others did (ignore_errors)
    and its result dict comes back in order, as run() returns it."""
    tasks = [{"name": "case %d" % i, MODULE: dict(sim.conn(), **args), "check_mode": check, "ignore_errors": True}
             for i, (check, args) in enumerate(cases)]
    play = Path(sim.state_dir) / "cases.yml"
    play.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]))
    proc, doc = run_playbook("localhost,", play, ansible_env(collections_path))
    results = [t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]]
    assert len(results) == len(cases), [t["task"]["name"] for t in doc["plays"][0]["tasks"]]
    assert PASSWORD not in proc.stdout + proc.stderr
    return results


def ok(res):
    assert not res.get("failed"), res.get("msg", res)
    return res


def failed(res, *words):
    assert res.get("failed") is True, res
    for w in words:
        assert w in res["msg"], res["msg"]
    return res["msg"]


# ------------------------------------------------------------------------------------------------ read-back

def pci_devices(vm):
    return [d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualPCIPassthrough)]


def extra(vm):
    return dict((o.key, o.value) for o in vm.config.extraConfig)


def passthru(host):
    return dict((p.id, p) for p in host.config.pciPassthruInfo)


def host_gpu_ids(host, device_id):
    return sorted(d.id for d in host.hardware.pciDevice if d.vendorId == NVIDIA and d.deviceId == device_id)


def snapshot(vm):
    """Everything the module manages on a VM, from pyVmomi."""
    cfg = vm.config
    return dict(power=vm.runtime.powerState, firmware=cfg.firmware,
                secure_boot=bool(cfg.bootOptions and cfg.bootOptions.efiSecureBootEnabled),
                memory=cfg.hardware.memoryMB, locked=bool(cfg.memoryReservationLockedToMax),
                extra=dict((k, v) for k, v in extra(vm).items() if k != "govcsim"),
                devices=sorted((type(d.backing).__name__, getattr(d.backing, "id", None)) for d in pci_devices(vm)))


def assert_converged(vm, ids, memory_mb, mmio):
    cfg = vm.config
    assert cfg.firmware == "efi"
    assert cfg.bootOptions.efiSecureBootEnabled is False
    assert cfg.memoryReservationLockedToMax is True
    assert cfg.hardware.memoryMB == memory_mb
    ec = extra(vm)
    # data-centre GPUs (T4, A100): the hypervisor stays visible (ESX-14; it was hidden for every GPU before)
    assert "hypervisor.cpuid.v0" not in ec
    assert ec["pciPassthru.use64bitMMIO"] == "TRUE"
    assert ec["pciPassthru.64bitMMIOSizeGB"] == str(mmio)
    devs = pci_devices(vm)
    assert sorted(d.backing.id for d in devs) == sorted(ids)
    for d in devs:
        assert isinstance(d.backing, DirectBacking)
        assert d.backing.vendorId == NVIDIA and d.backing.systemId and d.backing.deviceName


def vm_on(sim, host_name, index=0):
    """The test VM number `index` created on that host."""
    h = [x.name for x in sim.all(vim.HostSystem)].index(host_name)
    return "gpu-h%d-vm%d" % (h, index)


def first_host(sim):
    return sim.all(vim.HostSystem)[0].name


# ------------------------------------------------------------------------------------------------ host part

def test_host_lists_nvidia_gpus_only(sim, collections_path):
    host = sim.all(vim.HostSystem)[-1]
    res = ok(run(sim, collections_path, scope="host", esxi_hostname=host.name))
    assert res["changed"] is False and res["tasks"] == [] and res["reconfigure_count"] == 0
    gpus = res["host"]["gpus"]
    ids = sorted(d.id for d in host.hardware.pciDevice if d.vendorId == NVIDIA)
    assert sorted(g["id"] for g in gpus) == ids and len(ids) == 7
    assert sorted(g["device_id"] for g in gpus) == ["0x1db4"] + ["0x1eb8"] * 2 + ["0x20f1"] * 4
    p = passthru(host)
    for g in gpus:
        assert (g["capable"], g["enabled"], g["active"]) == (p[g["id"]].passthruCapable, p[g["id"]].passthruEnabled,
                                                             p[g["id"]].passthruActive)


def test_host_enable_then_reboot(vcenter, collections_path):
    """Host part alone: enable (pending reboot), check mode predicts, a second run is a no-op, reboot activates."""
    host = vcenter.all(vim.HostSystem)[2]
    v100 = host_gpu_ids(host, V100)
    args = dict(scope="host", esxi_hostname=host.name, gpus=[{"device_id": "0x1DB4"}])
    res = ok(run(vcenter, collections_path, check=True, diff=True, **args))
    assert res["changed"] is True and res["tasks"] == []
    assert res["diff"]["before"]["host"]["passthrough"] == {v100[0]: {"enabled": False, "active": False}}
    assert res["diff"]["after"]["host"]["passthrough"] == {v100[0]: {"enabled": True, "active": False}}
    assert passthru(host)[v100[0]].passthruEnabled is False
    res = ok(run(vcenter, collections_path, **args))
    assert res["tasks"] == ["UpdatePassthruConfig"] and res["host"]["reboot_required"] is True
    assert (passthru(host)[v100[0]].passthruEnabled, passthru(host)[v100[0]].passthruActive) == (True, False)
    res = ok(run(vcenter, collections_path, **args))
    assert res["changed"] is False and res["host"]["reboot_required"] is True
    boot0 = host.runtime.bootTime
    res = ok(run(vcenter, collections_path, host_reboot=True, **args))
    assert res["tasks"] == ["EnterMaintenanceMode_Task", "RebootHost_Task", "ExitMaintenanceMode_Task"]
    assert res["host"]["rebooted"] is True and res["host"]["reboot_required"] is False
    assert passthru(host)[v100[0]].passthruActive is True
    assert host.runtime.bootTime >= boot0 and host.runtime.inMaintenanceMode is False
    assert ok(run(vcenter, collections_path, host_reboot=True, **args))["changed"] is False


# ------------------------------------------------------------------------------------------------ converge

def test_converge_check_idempotence_readback(sim, collections_path):
    host = first_host(sim)
    name = vm_on(sim, host, 0)
    vm = sim.vm(name)
    t4 = host_gpu_ids(sim.host(host), T4)
    args = dict(name=name, gpus=[{"model": "T4"}], memory_mb=32 * GB, host_reboot=True, bios_to_efi="warn")

    before = snapshot(vm)
    tasks0 = sim.reconfig_tasks(vm)
    res = ok(run(sim, collections_path, check=True, diff=True, **args))
    assert res["changed"] is True and res["tasks"] == [] and res["reconfigure_count"] == 0
    assert snapshot(vm) == before and sim.reconfig_tasks(vm) == tasks0   # check mode changed nothing
    after = res["diff"]["after"]["vm"]
    assert after["gpus"] == ["directpath:%s" % t4[0]] and after["firmware"] == "efi"
    assert after["extra_config"] == {"pciPassthru.64bitMMIOSizeGB": "32", "pciPassthru.use64bitMMIO": "TRUE"}
    assert res["hide_hypervisor"]["effective"] is False and "TU104GL [Tesla T4]" in res["hide_hypervisor"]["reason"]
    assert res["diff"]["before"]["vm"]["gpus"] == [] and res["diff"]["before"]["vm"]["firmware"] == "bios"
    assert any("may not boot" in w for w in res.get("warnings", []))

    res = ok(run(sim, collections_path, diff=True, **args))
    assert res["changed"] is True and res["reconfigure_count"] == 1
    assert res["tasks"] == ["UpdatePassthruConfig", "EnterMaintenanceMode_Task", "RebootHost_Task",
                            "ExitMaintenanceMode_Task", "ReconfigVM_Task"]
    assert len(sim.reconfig_tasks(vm) - tasks0) == 1                     # counted on the simulator
    assert res["mmio_size_gb"] == 32 and res["gpu_memory_gb"] == 16
    assert res["vm"] == after                                            # check mode predicted the result
    assert_converged(vm, [t4[0]], 32 * GB, 32)
    p = passthru(sim.host(host))[t4[0]]
    assert (p.passthruEnabled, p.passthruActive) == (True, True)

    tasks1 = sim.reconfig_tasks(vm)
    for check in (False, True):
        res = ok(run(sim, collections_path, check=check, diff=True, **args))
        assert res["changed"] is False and res["tasks"] == [] and res["reconfigure_count"] == 0, res["changes"]
        assert res["diff"]["before"] == res["diff"]["after"]
    assert sim.reconfig_tasks(vm) == tasks1                              # no reconfigure at all on re-run
    assert [g for g in res["host"]["gpus"] if g["id"] == t4[0]][0]["attached_to"] == [name]


def test_exact_set_multi_gpu_mmio_and_shrink(vcenter, collections_path):
    """Two A100 40GB -> MMIO 256 (2 x 40 x 2 = 160 -> 256); asking for one removes exactly one, in one reconfigure."""
    host = vcenter.all(vim.HostSystem)[1].name
    name = vm_on(vcenter, host, 0)
    vm = vcenter.vm(name)
    a100 = host_gpu_ids(vcenter.host(host), A100)
    args = dict(name=name, memory_mb=128 * GB, host_reboot=True, bios_to_efi="warn")
    res = ok(run(vcenter, collections_path, gpus=[{"device_id": "0x20F1", "count": 2}], **args))
    assert res["reconfigure_count"] == 1 and res["mmio_size_gb"] == 256
    assert_converged(vm, a100[:2], 128 * GB, 256)
    t0 = vcenter.reconfig_tasks(vm)
    res = ok(run(vcenter, collections_path, gpus=[{"pci_id": a100[1]}], **args))
    assert res["reconfigure_count"] == 1 and res["changes"] == [
        "remove GPU directpath:%s" % a100[0], "set pciPassthru.64bitMMIOSizeGB = 128 (was 256)"]
    assert_converged(vm, [a100[1]], 128 * GB, 128)
    assert len(vcenter.reconfig_tasks(vm) - t0) == 1
    # mmio_size_gb overrides the rule; 0 leaves it alone
    res = ok(run(vcenter, collections_path, gpus=[{"pci_id": a100[1]}], mmio_size_gb=512, **args))
    assert res["changes"] == ["set pciPassthru.64bitMMIOSizeGB = 512 (was 128)"]
    assert ok(run(vcenter, collections_path, gpus=[{"pci_id": a100[1]}], mmio_size_gb=0, **args))["changed"] is False
    # an empty list removes the NVIDIA GPUs and touches nothing else
    res = ok(run(vcenter, collections_path, gpus=[], firmware="keep", hide_hypervisor=False, **args))
    assert res["changes"] == ["remove GPU directpath:%s" % a100[1]] and pci_devices(vm) == []


def test_dynamic_directpath(sim, collections_path):
    host = sim.all(vim.HostSystem)[0].name
    name = vm_on(sim, host, 1)
    vm = sim.vm(name)
    args = dict(name=name, passthrough_type="dynamic", gpus=[{"model": "A100", "custom_label": "a100"}],
                memory_mb=64 * GB, host_reboot=True, bios_to_efi="warn")
    res = ok(run(sim, collections_path, **args))
    assert res["reconfigure_count"] == 1 and res["mmio_size_gb"] == 128
    devs = pci_devices(vm)
    assert len(devs) == 1 and isinstance(devs[0].backing, DynamicBacking)
    assert devs[0].backing.customLabel == "a100"
    assert [(a.vendorId, a.deviceId) for a in devs[0].backing.allowedDevice] == [(NVIDIA, A100)]
    assert res["vm"]["gpus"] == ["dynamic:0x20f1:a100"]
    t = sim.reconfig_tasks(vm)
    res = ok(run(sim, collections_path, **args))
    assert res["changed"] is False and sim.reconfig_tasks(vm) == t
    failed(run(sim, collections_path, **dict(args, gpus=[{"pci_id": "0000:3b:00.0"}])),
           "gpus[0].pci_id", "Dynamic DirectPath")


# ------------------------------------------------------------------------------------------------ power

def test_powered_on_vm(vcenter, collections_path):
    """The simulator would accept device changes on a running VM; the module powers it off first or refuses."""
    host = vcenter.all(vim.HostSystem)[0].name
    name = vm_on(vcenter, host, 2)
    vm = vcenter.vm(name)
    wait_task(vm.PowerOnVM_Task())
    args = dict(name=name, gpus=[{"model": "T4"}], memory_mb=32 * GB, host_reboot=True, bios_to_efi="warn")
    before = snapshot(vm)
    msg = failed(run(vcenter, collections_path, **args), "powered on", "power_cycle=true")
    assert "add GPU" in msg
    assert snapshot(vm) == before
    # the rule the simulator does not enforce: no power-on with a passthrough GPU and no full reservation
    failed(run(vcenter, collections_path, power_cycle=True, reserve_memory=False, **args), "not fully reserved",
           "reserve_memory")
    assert snapshot(vm) == before
    res = ok(run(vcenter, collections_path, check=True, power_cycle=True, **args))
    assert res["power_cycled"] is True and res["tasks"] == [] and snapshot(vm) == before
    res = ok(run(vcenter, collections_path, power_cycle=True, **args))
    assert res["power_cycled"] is True and res["reconfigure_count"] == 1
    # the VM runs on the host that reboots for the T4: it goes off before maintenance mode, which it would block
    # (issue 38: the simulator now keeps a host with a running VM out of maintenance mode, as vSphere does)
    tasks = res["tasks"]
    assert tasks.index("PowerOffVM_Task") < tasks.index("EnterMaintenanceMode_Task"), tasks
    assert tasks[-2:] == ["ReconfigVM_Task", "PowerOnVM_Task"], tasks
    assert vm.runtime.powerState == "poweredOn"
    res = ok(run(vcenter, collections_path, power_cycle=True, **args))
    assert res["changed"] is False and res["power_cycled"] is False and res["tasks"] == []
    # locking the reservation alone is allowed on a running VM: no power cycle
    wait_task(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(memoryReservationLockedToMax=False)))
    res = ok(run(vcenter, collections_path, **args))
    assert res["changes"] == ["lock the memory reservation to the VM memory"] and res["power_cycled"] is False
    wait_task(vm.PowerOffVM_Task())


# ------------------------------------------------------------------------------------------------ errors

def test_errors_before_any_change(sim, collections_path):
    host = sim.all(vim.HostSystem)[-1]
    name = vm_on(sim, host.name, 3)
    vm = sim.vm(name)
    good = dict(name=name, gpus=[{"model": "T4"}], memory_mb=32 * GB, host_reboot=True, bios_to_efi="warn")
    before, pt_before = snapshot(vm), dict((k, (v.passthruEnabled, v.passthruActive)) for k, v in passthru(host).items())

    # (check mode, module arguments, words the error names); words None: the run must succeed
    cases = [
        (False, dict(good, name="no-such-vm"), ("name", "no-such-vm", "not found")),
        (False, dict(scope="host", esxi_hostname="no-such-host"), ("esxi_hostname", "not found")),
        (False, dict(good, gpus=[{"model": "H100"}]), ("gpus[0]", "no NVIDIA GPU", "Tesla T4")),
        (False, dict(good, gpus=[{"model": "T4", "count": 3}]), ("gpus[0]", "3 GPU(s)", "free")),
        (False, dict(good, gpus=[{"model": "T4", "pci_id": "0000:3b:00.0"}]), ("gpus[0]", "exactly one of")),
        (False, dict(good, gpus=[{"pci_id": "3b:00"}]), ("gpus[0].pci_id", "PCI address")),
        (False, dict(good, gpus=[{"device_id": "0xZZ"}]), ("gpus[0].device_id",)),
        (False, dict(good, passthrough_type="sideways"), ("passthrough_type", "directpath", "dynamic")),
        (False, dict(good, memory_check="maybe"), ("memory_check", "fail", "warn", "ignore")),
        (False, dict(good, host_reboot=False), ("host reboot", "host_reboot=true")),
        (False, dict(good, enable_passthrough=False), ("not passthrough-enabled", "enable_passthrough")),
        (False, dict(good, scope="vm"), ("not passthrough-active",)),
        (False, dict(good, bios_to_efi="fail"), ("may not boot", "bios_to_efi=warn")),
        (False, dict(good, memory_mb=16 * GB), ("memory_mb", "24576 MB")),
        (True, dict(good, memory_mb=16 * GB, memory_check="warn"), None),
        (False, dict(gpus=[{"model": "T4"}]), ("name", "scope=all")),
        (False, dict(good, password="wrong"), ("login",)),
        (False, dict(good, validate_certs=True), ("certificate",)),
    ]
    results = run_many(sim, collections_path, [(check, args) for check, args, _words in cases])
    for (_check, _args, words), res in zip(cases, results):
        if words is None:
            ok(res)
            assert any("24576 MB" in w for w in res["warnings"])
        else:
            failed(res, *words)
    assert snapshot(vm) == before
    assert dict((k, (v.passthruEnabled, v.passthruActive)) for k, v in passthru(host).items()) == pt_before


def test_gpu_taken_by_another_vm(vcenter, collections_path):
    host = vcenter.all(vim.HostSystem)[1].name
    first, second = vm_on(vcenter, host, 1), vm_on(vcenter, host, 2)
    t4 = host_gpu_ids(vcenter.host(host), T4)
    base = dict(memory_mb=32 * GB, host_reboot=True, bios_to_efi="warn")
    ok(run(vcenter, collections_path, name=first, gpus=[{"pci_id": t4[0]}], **base))
    before = snapshot(vcenter.vm(second))
    failed(run(vcenter, collections_path, name=second, gpus=[{"pci_id": t4[0]}], **base), "taken", first)
    # by model, the free one is chosen
    res = ok(run(vcenter, collections_path, name=second, gpus=[{"model": "T4"}], **base))
    assert res["vm"]["gpus"] == ["directpath:%s" % t4[1]]
    failed(run(vcenter, collections_path, name=vm_on(vcenter, host, 3), gpus=[{"model": "T4"}], **base),
           "only 0 free", "taken")
    assert before["devices"] == []
    # esxi_hostname must be the VM's host
    other = vcenter.all(vim.HostSystem)[0].name
    failed(run(vcenter, collections_path, name=second, esxi_hostname=other, gpus=[{"model": "T4"}], **base),
           "esxi_hostname", "does not migrate")


# ------------------------------------------------------------------------------------------------ role

def write_role_inventory(path, sim, hosts, memory_mb):
    """A JSON inventory at path for playbook esxi.yml: group esxi_gpu_vms with hosts (VM name: host vars), run locally
    against sim, VM memory memory_mb, host reboots allowed, BIOS VMs warned about."""
    c = sim.conn()
    inv = {"esxi_gpu_vms": {
        "hosts": hosts,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "esxi_gpu_passthrough_hostname": c["hostname"], "esxi_gpu_passthrough_port": c["port"],
                 "esxi_gpu_passthrough_username": c["username"], "esxi_gpu_passthrough_password": c["password"],
                 "esxi_gpu_passthrough_validate_certs": False, "esxi_gpu_passthrough_memory_mb": memory_mb,
                 "esxi_gpu_passthrough_host_reboot": True, "esxi_gpu_passthrough_bios_to_efi": "warn"}}}
    path.write_text(json.dumps(inv))


def test_role_playbook(vcenter, collections_path, tmp_path):
    """playbooks/esxi.yml for 3 VMs on one host: one host reboot, one reconfigure per VM, then a no-op re-run."""
    host = vcenter.all(vim.HostSystem)[2].name
    names = [vm_on(vcenter, host, i) for i in range(3)]
    write_role_inventory(tmp_path / "inv.json", vcenter,
                         dict((n, {"esxi_gpu_passthrough_gpus": [{"model": "A100"}]}) for n in names), 64 * GB)
    env = ansible_env(collections_path)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.default"
    boot0 = vcenter.host(host).runtime.bootTime

    def play(*extra_args, rc=0):
        r = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp_path / "inv.json"),
                            "gpuops.k8s_gpu.esxi", *extra_args], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=PLAY_TIMEOUT)
        assert r.returncode == rc, r.stdout[-4000:] + r.stderr[-2000:]
        print(r.stdout)
        assert PASSWORD not in r.stdout + r.stderr
        recap = dict((line.split()[0], line) for line in r.stdout.splitlines() if line.startswith(tuple(names)))
        return recap, r.stdout

    play("--check")
    assert all(pci_devices(vcenter.vm(n)) == [] for n in names)
    # rebooting not allowed: the role stops with a message naming the host; no VM is changed - not even an
    # advanced setting (issue 28: skip_vm wrote gpuops.passthrough.reserved, kept by VM name with no expiry)
    t_fail = vcenter.reconfig_tasks()
    recap, out = play("-e", "{\"esxi_gpu_passthrough_host_reboot\": false}", rc=2)
    assert "must reboot before passthrough is active" in out and host in out
    assert all("failed=1" in recap[n] for n in names)
    assert all(pci_devices(vcenter.vm(n)) == [] for n in names)
    assert vcenter.reconfig_tasks() == t_fail
    assert all("gpuops.passthrough.reserved" not in extra(vcenter.vm(n)) for n in names)
    pending = enabled_ids(vcenter.host(host), A100)
    assert len(pending) == 3, pending
    # the user reboots the host, as the message says; the run after it gives the VMs those (now active) GPUs
    ok(run(vcenter, collections_path, scope="host", esxi_hostname=host, gpus=[{"pci_id": i} for i in pending],
           host_reboot=True, enable_passthrough=False))
    t0 = vcenter.reconfig_tasks()
    recap, dummy = play()
    assert all("failed=0" in recap[n] for n in names)
    assert len(vcenter.reconfig_tasks() - t0) == 3
    got = sorted(pci_devices(vcenter.vm(n))[0].backing.id for n in names)
    assert got == host_gpu_ids(vcenter.host(host), A100)[:3] or len(set(got)) == 3
    # passthrough only for the GPUs the VMs were given; no reservation left behind
    assert enabled_ids(vcenter.host(host), A100) == got
    assert all("gpuops.passthrough.reserved" not in extra(vcenter.vm(n)) for n in names)
    assert vcenter.host(host).runtime.bootTime >= boot0
    t1 = vcenter.reconfig_tasks()
    recap, dummy = play()
    assert all("changed=0" in recap[n] and "failed=0" in recap[n] for n in names), recap
    assert vcenter.reconfig_tasks() == t1
    # esxi_gpu_passthrough_state=absent: every GPU comes off the VMs, passthrough on the host stays; a re-run of the
    # removal sends no reconfigure
    recap, dummy = play("-e", "{\"esxi_gpu_passthrough_state\": \"absent\"}")
    assert all("failed=0" in recap[n] and "changed=0" not in recap[n] for n in names), recap
    assert all(pci_devices(vcenter.vm(n)) == [] for n in names)
    assert enabled_ids(vcenter.host(host), A100) == got
    t2 = vcenter.reconfig_tasks()
    recap, dummy = play("-e", "{\"esxi_gpu_passthrough_state\": \"absent\"}")
    assert all("changed=0" in recap[n] and "failed=0" in recap[n] for n in names), recap
    assert vcenter.reconfig_tasks() == t2


# ------------------------------------------------------------------------------------------------ reboot decision
# A standalone ESXi host of its own: 8 A100s whose passthrough waits for a reboot, 2 L4s (0x27B8) that vSphere 7+
# activates at once (the simulator's activateNow).

GPUS_ESX3 = {"devices": [
    {"deviceId": "0x20F1", "deviceName": "GA100 [A100 PCIe 40GB]", "subDeviceId": "0x145F", "count": 8},
    {"deviceId": "0x27B8", "deviceName": "AD104GL [L4]", "subDeviceId": "0x16CA", "count": 2, "activateNow": True}]}
L4 = 0x27B8


@pytest.fixture(scope="module")
def esx3(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("esx3-gpus") / "gpus.json"
    cfg.write_text(json.dumps(GPUS_ESX3))
    sim = start_vcsim(tmp_path_factory, "esx", "esxi-gpu3", extra=("-password", PASSWORD), gpus=cfg)
    make_vms(sim)
    yield sim
    stop_sim(sim)


def enabled_ids(host, device_id):
    p = passthru(host)
    return [i for i in host_gpu_ids(host, device_id) if p[i].passthruEnabled]


def test_ESX_03_no_reboot_when_the_host_activates_passthrough_at_once(esx3, collections_path):
    """The defect: the reboot was decided before enabling; a device vSphere activates at once skipped the VM part."""
    host = esx3.all(vim.HostSystem)[0]
    name = vm_on(esx3, host.name, 0)
    boot0 = host.runtime.bootTime
    args = dict(name=name, gpus=[{"model": "L4"}], memory_mb=64 * GB, bios_to_efi="warn", pending_reboot="skip_vm")
    res = ok(run(esx3, collections_path, **args))
    assert res["vm_skipped"] is False and res["host"]["reboot_required"] is False and res["host"]["rebooted"] is False
    assert res["tasks"] == ["UpdatePassthruConfig", "ReconfigVM_Task"], res["tasks"]
    l4 = host_gpu_ids(host, L4)
    assert [d.backing.id for d in pci_devices(esx3.vm(name))] == [l4[0]]
    assert (passthru(host)[l4[0]].passthruEnabled, passthru(host)[l4[0]].passthruActive) == (True, True)
    assert host.runtime.bootTime == boot0 and "gpuops.passthrough.reserved" not in extra(esx3.vm(name))
    assert ok(run(esx3, collections_path, **args))["changed"] is False


def test_ESX_04_two_step_flow_gives_the_vm_the_gpus_its_first_run_enabled(esx3, collections_path):
    """Module alone: 2 of the A100s asked; runs before the reboot take the same 2; after it exactly 2 are in passthrough."""
    host = esx3.all(vim.HostSystem)[0]
    name, other = vm_on(esx3, host.name, 1), vm_on(esx3, host.name, 2)
    a100 = host_gpu_ids(host, A100)
    args = dict(name=name, gpus=[{"model": "A100", "count": 2}], memory_mb=128 * GB, bios_to_efi="warn")
    res = ok(run(esx3, collections_path, pending_reboot="skip_vm", **args))
    assert res["vm_skipped"] is True and res["host"]["reboot_required"] is True
    # the host part only: nothing is written to the VM (issue 28), the chosen GPUs come back to the caller
    assert res["host"]["enabled"] == a100[:2] and res["tasks"] == ["UpdatePassthruConfig"]
    assert res["chosen_gpus"] == a100[:2]
    assert "gpuops.passthrough.reserved" not in extra(esx3.vm(name))
    chosen = res["chosen_gpus"]
    # the same run again before the reboot, with the GPUs carried: the same two, nothing enabled on top
    res = ok(run(esx3, collections_path, pending_reboot="skip_vm", chosen_gpus=chosen, **args))
    assert res["changed"] is False and res["vm_skipped"] is True and res["host"]["enabled"] == []
    assert enabled_ids(host, A100) == a100[:2]
    # another VM of the host picks free GPUs before enabled ones waiting for a reboot (check mode: what it would pick)
    res = ok(run(esx3, collections_path, check=True, name=other, gpus=[{"model": "A100", "count": 2}],
                 memory_mb=128 * GB, bios_to_efi="warn", pending_reboot="skip_vm"))
    assert res["host"]["enabled"] == a100[2:4]
    # the reboot, then the VM part with the carried GPUs: exactly those 2 A100s in passthrough
    res = ok(run(esx3, collections_path, host_reboot=True, chosen_gpus=chosen, **args))
    assert res["host"]["rebooted"] is True and res["host"]["enabled"] == []
    assert sorted(d.backing.id for d in pci_devices(esx3.vm(name))) == a100[:2]
    assert enabled_ids(host, A100) == a100[:2]
    assert "gpuops.passthrough.reserved" not in extra(esx3.vm(name))
    assert ok(run(esx3, collections_path, host_reboot=True, **args))["changed"] is False


GPUS_ESX4 = {"devices": [
    {"deviceId": "0x20F1", "deviceName": "GA100 [A100 PCIe 40GB]", "subDeviceId": "0x145F", "count": 4}]}


@pytest.fixture(scope="module")
def esx4(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("esx4-gpus") / "gpus.json"
    cfg.write_text(json.dumps(GPUS_ESX4))
    sim = start_vcsim(tmp_path_factory, "esx", "esxi-gpu4", extra=("-password", PASSWORD), gpus=cfg)
    make_vms(sim)
    yield sim
    stop_sim(sim)


def test_ESX_15_second_step_attaches_the_gpus_the_first_step_enabled(esx4, collections_path):
    """Issue 38: two GPUs asked on a host of four. The first run (pending_reboot=skip_vm) enables two and writes
    nothing to the VM; the second run (host_reboot=true, no chosen_gpus) took the other two, enabled and attached
    them, and left the first two in passthrough for nobody. Now it reads the host - enabled, not active, held by no
    VM - and attaches exactly the two the first run enabled."""
    host = esx4.all(vim.HostSystem)[0]
    name = vm_on(esx4, host.name, 0)
    a100 = host_gpu_ids(host, A100)
    assert len(a100) == 4 and enabled_ids(host, A100) == []
    args = dict(name=name, gpus=[{"model": "A100", "count": 2}], memory_mb=128 * GB, bios_to_efi="warn")
    first = ok(run(esx4, collections_path, pending_reboot="skip_vm", **args))
    assert first["vm_skipped"] is True and first["host"]["reboot_required"] is True
    assert first["host"]["enabled"] == a100[:2] and enabled_ids(host, A100) == a100[:2]
    assert pci_devices(esx4.vm(name)) == [] and "gpuops.passthrough.reserved" not in extra(esx4.vm(name))
    second = ok(run(esx4, collections_path, host_reboot=True, **args))
    assert second["host"]["rebooted"] is True and second["host"]["enabled"] == []
    assert sorted(d.backing.id for d in pci_devices(esx4.vm(name))) == a100[:2]
    assert enabled_ids(host, A100) == a100[:2]         # no GPU left in passthrough for nobody
    assert ok(run(esx4, collections_path, host_reboot=True, **args))["changed"] is False


def test_ESX_13_maintenance_mode_blocked_by_a_running_vm_is_bounded_and_named(esx4, collections_path):
    """A powered-on VM that cannot move keeps the host out of maintenance mode (the simulator models a standalone
    host: the task runs until its timeout). Before: requested with no timeout, the module gave up only after
    host_reboot_timeout and the host kept trying. Now vSphere gets the timeout, the error names the VM, nothing is
    rebooted, and the host is not left entering maintenance mode."""
    host = esx4.all(vim.HostSystem)[0]
    name, running = vm_on(esx4, host.name, 2), vm_on(esx4, host.name, 3)
    wait_task(esx4.vm(running).PowerOnVM_Task())
    boot0 = host.runtime.bootTime
    args = dict(name=name, gpus=[{"model": "A100"}], memory_mb=64 * GB, bios_to_efi="warn", host_reboot=True,
                host_reboot_timeout=2)
    try:
        msg = failed(run(esx4, collections_path, **args), "did not enter maintenance mode within host_reboot_timeout=2s",
                     "powered-on VMs still on the host: %s" % running, "Nothing was rebooted")
        assert "Timedout" in msg, msg
        assert host.runtime.inMaintenanceMode is False and host.runtime.bootTime == boot0
        assert pci_devices(esx4.vm(name)) == []
    finally:
        wait_task(esx4.vm(running).PowerOffVM_Task())
    # the VM off: the same call goes through
    res = ok(run(esx4, collections_path, **args))
    assert res["host"]["rebooted"] is True and len(pci_devices(esx4.vm(name))) == 1
    assert res["tasks"][:3] == ["UpdatePassthruConfig", "EnterMaintenanceMode_Task", "RebootHost_Task"] or \
        res["tasks"][:2] == ["EnterMaintenanceMode_Task", "RebootHost_Task"], res["tasks"]


def test_ESX_04_role_two_step_flow_enables_only_the_gpus_it_gives(esx3, collections_path, tmp_path):
    """The role: first call enables (nothing written to the VM), the reboot call takes the same GPUs (chosen_gpus
    carried), the VM gets them; 2 of 4 free."""
    host = esx3.all(vim.HostSystem)[0]
    name = vm_on(esx3, host.name, 3)
    before = enabled_ids(host, A100)
    write_role_inventory(tmp_path / "inv.json", esx3,
                         {name: {"esxi_gpu_passthrough_gpus": [{"model": "A100", "count": 2}]}}, 128 * GB)
    r = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp_path / "inv.json"), "gpuops.k8s_gpu.esxi"],
                       cwd=ROOT, env=dict(ansible_env(collections_path), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default"),
                       capture_output=True, text=True, timeout=PLAY_TIMEOUT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    got = sorted(d.backing.id for d in pci_devices(esx3.vm(name)))
    assert len(got) == 2 and not set(got) & set(before)
    assert enabled_ids(host, A100) == sorted(before + got)      # exactly the 2 it was given on top
    assert "gpuops.passthrough.reserved" not in extra(esx3.vm(name))
