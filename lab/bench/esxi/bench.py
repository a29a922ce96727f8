#!/usr/bin/env python3
"""Benchmark: GPU passthrough for N VMs with gpuops.k8s_gpu.esxi_gpu_passthrough (the module, and the role via
playbooks/esxi.yml) against the community.vmware chain (vmware_guest_powerstate off, vmware_host_passthrough,
vmware_guest memory + reservation lock + advanced settings, vmware_guest_boot_manager, vmware_guest_powerstate on),
on the lab's vSphere simulator (vCenter model, 3 hosts with 8 Tesla T4 each, passthrough active).

Every VM starts powered on, BIOS, 64 MB, no GPU. For each size and tool a fresh simulator is started, the playbook
runs twice (first run, re-run) and the ReconfigVM_Task calls per VM are counted on the simulator's TaskManager.

  .venv/bin/python lab/bench/esxi/bench.py            # 1, 5, 20 VMs, 3 repetitions, module vs chain
  .venv/bin/python lab/bench/esxi/bench.py --smoke    # 1 VM, 1 repetition
  .venv/bin/python lab/bench/esxi/bench.py --sizes 20 --reps 3 --forks 10 --tools "gpuops module,gpuops role,community.vmware chain"

Writes a Markdown table to stdout and to build/bench/esxi.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1].parent / "vcsim"))
from _common import Stat  # noqa: E402
from pyVim.connect import Disconnect, SmartConnect  # noqa: E402
from pyVmomi import vim  # noqa: E402
from vcsim_task import wait_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
PASSWORD = "Bench-Secret-7"
HOSTS, GPUS_PER_HOST = 3, 8
MEMORY_MB = 32768          # 1x T4 (16 GB) x 1.5 = 24 GB -> 32 GB
TOOLS = {
    "gpuops module": HERE / "gpuops_module.yml",
    "gpuops role": "gpuops.k8s_gpu.esxi",
    "community.vmware chain": HERE / "community_chain.yml",
}


def start_sim(state_dir):
    gpus = Path(state_dir) / "gpus.json"
    gpus.write_text(json.dumps({"devices": [{"deviceId": "0x1EB8", "deviceName": "TU104GL [Tesla T4]",
                                             "count": GPUS_PER_HOST, "passthruActive": True}]}))
    name = "%s-esxi-%s" % (os.environ.get("GPUOPS_BENCH_PREFIX", "gpuops-bench"), uuid.uuid4().hex[:6])
    env = dict(os.environ, VCSIM_STATE_DIR=str(state_dir))
    r = subprocess.run([str(ROOT / "lab/vcsim/start.sh"), "--model", "vcenter", "--name", name, "--gpus", str(gpus),
                        "--", "-hosts", str(HOSTS), "-vms", "0", "-password", PASSWORD],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit("start.sh failed:\n%s\n%s" % (r.stdout, r.stderr))
    return name, json.loads(r.stdout)


def stop_sim(state_dir, name):
    env = dict(os.environ, VCSIM_STATE_DIR=str(state_dir))
    subprocess.run([str(ROOT / "lab/vcsim/stop.sh"), "--name", name], cwd=ROOT, env=env, capture_output=True)


def make_vms(si, count):
    """count VMs bench-vm<NN>, round-robin over the hosts, powered on. Returns [(vm name, host name, pci id)]."""
    content = si.RetrieveContent()
    dc = content.rootFolder.childEntity[0]
    hosts = sorted(content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True).view,
                   key=lambda h: h.name)
    free = dict((h.name, sorted(d.id for d in h.hardware.pciDevice if d.vendorId == 0x10DE)) for h in hosts)
    out = []
    for i in range(count):
        host = hosts[i % len(hosts)]
        disk = vim.vm.device.VirtualDisk(key=-1, controllerKey=1000, unitNumber=0, capacityInKB=1024,
                                         backing=vim.vm.device.VirtualDisk.FlatVer2BackingInfo(diskMode="persistent",
                                                                                                fileName=""))
        spec = vim.vm.ConfigSpec(name="bench-vm%02d" % i, memoryMB=64, numCPUs=1, guestId="otherGuest",
                                 files=vim.vm.FileInfo(vmPathName="[LocalDS_0]"),
                                 deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", fileOperation="create",
                                                                               device=disk)])
        task = dc.vmFolder.CreateVM_Task(config=spec, pool=host.parent.resourcePool, host=host)
        wait_task(task)
        wait_task(task.info.result.PowerOnVM_Task())
        out.append(("bench-vm%02d" % i, host.name, free[host.name].pop(0)))
    return out


def task_keys(si):
    """{task key: descriptionId} of the simulator's recent VM reconfigure and power-off tasks (the last 200 tasks)."""
    tasks = si.RetrieveContent().taskManager.recentTask
    return dict((t.info.key, t.info.descriptionId) for t in tasks
                if t.info.descriptionId in ("VirtualMachine.reconfigVm", "VirtualMachine.powerOff"))


def inventory(state, vms, path):
    inv = {"bench_vms": {
        "hosts": dict((n, {"bench_esxi": h, "bench_pci_id": p,
                           "esxi_gpu_passthrough_gpus": [{"pci_id": p}]}) for n, h, p in vms),
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "bench_vc_host": state["host"], "bench_vc_port": state["port"], "bench_vc_user": state["username"],
                 "bench_vc_password": PASSWORD, "bench_memory_mb": MEMORY_MB,
                 # the same for the role
                 "esxi_gpu_passthrough_hostname": state["host"], "esxi_gpu_passthrough_port": state["port"],
                 "esxi_gpu_passthrough_username": state["username"], "esxi_gpu_passthrough_password": PASSWORD,
                 "esxi_gpu_passthrough_validate_certs": False, "esxi_gpu_passthrough_memory_mb": MEMORY_MB,
                 "esxi_gpu_passthrough_bios_to_efi": "warn", "esxi_gpu_passthrough_power_cycle": True,
                 # like for like: the chain does not wait for the guest either (the simulator has no guest)
                 "esxi_gpu_passthrough_wait_for_guest": False}}}
    Path(path).write_text(json.dumps(inv))


def run_playbook(playbook, inv, forks):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=subprocess.run(
        ["bash", str(ROOT / "lab/bin/collections-path.sh")], capture_output=True, text=True, check=True).stdout.strip(),
        ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_SYSTEM_WARNINGS="0", ANSIBLE_ACTION_WARNINGS="0")
    if isinstance(playbook, str):   # the role's playbook, for the group bench_vms
        args = [playbook, "-e", "esxi_gpu_vms_group=bench_vms"]
    else:
        args = [str(playbook)]
    t0 = time.monotonic()
    r = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", inv, "-f", str(forks)] + args,
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit("%s failed (rc %d):\n%s\n%s" % (playbook, r.returncode, r.stdout[-5000:], r.stderr[-3000:]))
    return wall, r.stdout


def check_state(si, vms, attach):
    """Every VM ends with the settings (and, for gpuops, its GPU), powered on. No hypervisor.cpuid.v0: the T4 is a
    data-centre GPU (ESX-14)."""
    content = si.RetrieveContent()
    by_name = dict((v.name, v) for v in content.viewManager.CreateContainerView(
        content.rootFolder, [vim.VirtualMachine], True).view)
    for name, dummy, pci in vms:
        vm = by_name[name]
        ec = dict((o.key, o.value) for o in vm.config.extraConfig)
        ok = (vm.runtime.powerState == "poweredOn" and vm.config.firmware == "efi"
              and vm.config.bootOptions.efiSecureBootEnabled is False and vm.config.memoryReservationLockedToMax
              and vm.config.hardware.memoryMB == MEMORY_MB and "hypervisor.cpuid.v0" not in ec
              and ec.get("pciPassthru.64bitMMIOSizeGB") == "32" and ec.get("pciPassthru.use64bitMMIO") == "TRUE")
        devs = [d.backing.id for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualPCIPassthrough)]
        if attach:
            ok = ok and devs == [pci]
        if not ok:
            raise SystemExit("VM %s does not have the expected settings after the run" % name)


def one(tool, size, forks):
    with tempfile.TemporaryDirectory(prefix="bench-esxi-") as tmp:
        name, state = start_sim(tmp)
        try:
            si = SmartConnect(host=state["host"], port=state["port"], user=state["username"], pwd=PASSWORD,
                              disableSslCertValidation=True)
            vms = make_vms(si, size)
            inv = os.path.join(tmp, "inv.json")
            inventory(state, vms, inv)
            res = {}
            for phase in ("first", "rerun"):
                keys0 = task_keys(si)
                wall, dummy = run_playbook(TOOLS[tool], inv, forks)
                keys1 = task_keys(si)
                # recentTask keeps the last 200 tasks: a run here makes at most ~4 per VM, 80 for 20 VMs
                new = [keys1[k] for k in set(keys1) - set(keys0)]
                res[phase] = {"wall": wall, "reconfig": new.count("VirtualMachine.reconfigVm"),
                              "poweroff": new.count("VirtualMachine.powerOff")}
                check_state(si, vms, attach=tool != "community.vmware chain")
            Disconnect(si)
            return res
        finally:
            stop_sim(tmp, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,5,20")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--big-reps", type=int, default=2, help="repetitions at the largest size (default 2: time budget)")
    ap.add_argument("--forks", type=int, default=10)
    ap.add_argument("--tools", default="gpuops module,community.vmware chain",
                    help="comma-separated, from: %s" % ", ".join(TOOLS))
    ap.add_argument("--smoke", action="store_true", help="1 VM, 1 repetition")
    ap.add_argument("--out", default=str(ROOT / "build/bench/esxi.md"))
    a = ap.parse_args()
    sizes = [1] if a.smoke else [int(s) for s in a.sizes.split(",")]
    reps = 1 if a.smoke else a.reps
    tools = [t for t in a.tools.split(",") if t]
    chain = "community.vmware chain"
    rows = []
    for size in sizes:
        runs = dict((t, []) for t in tools)
        for rep in range(min(reps, a.big_reps) if size == max(sizes) and len(sizes) > 1 else reps):
            # interleaved: every tool once per round, the order rotated round by round
            order = tools[rep % len(tools):] + tools[:rep % len(tools)]
            for tool in order:
                r = one(tool, size, a.forks)
                runs[tool].append(r)
                print("  %d VM(s) round %d %-24s first %.1fs re-run %.1fs reconfigure/VM %.2f / %.2f"
                      % (size, rep, tool, r["first"]["wall"], r["rerun"]["wall"], r["first"]["reconfig"] / float(size),
                         r["rerun"]["reconfig"] / float(size)), file=sys.stderr)
        for tool in tools:
            rs = runs[tool]
            first = Stat(r["first"]["wall"] for r in rs)
            rerun = Stat(r["rerun"]["wall"] for r in rs)
            rc1 = max(r["first"]["reconfig"] for r in rs) / float(size)
            rc2 = max(r["rerun"]["reconfig"] for r in rs) / float(size)
            po1 = max(r["first"]["poweroff"] for r in rs) / float(size)
            po2 = max(r["rerun"]["poweroff"] for r in rs) / float(size)
            row = [size, tool, "%.2f" % rc1, "%.2f" % rc2, "%.2f / %.2f" % (po1, po2), first.fmt(), rerun.fmt()]
            if chain in runs and tool != chain:
                # speed-up per round, side by side (same round = same machine load), then median (min-max)
                row += [Stat(b["first"]["wall"] / x["first"]["wall"] for x, b in zip(rs, runs[chain])).fmt("%.1f", "x"),
                        Stat(b["rerun"]["wall"] / x["rerun"]["wall"] for x, b in zip(rs, runs[chain])).fmt("%.1f", "x")]
            else:
                row += ["1.0x" if chain in runs else "-", "1.0x" if chain in runs else "-"]
            rows.append(row)
    head = ["VMs", "tool", "ReconfigVM_Task per VM (first run)", "per VM (re-run)", "power-offs per VM (first / re-run)",
            "wall s first run, median (min-max)", "wall s re-run", "speed-up vs chain (first)", "speed-up vs chain (re-run)"]
    lines = ["## ESXi GPU passthrough: this collection vs the community.vmware chain", "",
             "vSphere simulator (lab/vcsim, vCenter model, %d hosts x %d Tesla T4, passthrough active), a fresh simulator "
             "per run; VMs start powered on, BIOS, 64 MB, no GPU; each run is a first run and a re-run. forks=%d, "
             "%s repetition(s) per size and tool, tools interleaved round by round (order rotated); wall seconds as "
             "median (min-max); the speed-up is taken per round (chain / ours in the same round) and given as median "
             "(min-max). Task counts are deterministic (the maximum over repetitions is shown). The community.vmware "
             "chain cannot attach the GPU to the VM; it does the host passthrough, memory, reservation, advanced "
             "settings, EFI/Secure Boot and the power cycle; the role's wait for the guest is off (the chain has none). "
             "The simulator answers in microseconds: a real vCenter's task latency (seconds per task) multiplies the "
             "chain's extra tasks and power cycles."
             % (HOSTS, GPUS_PER_HOST, a.forks, ("%d (%d at %d VMs)" % (reps, min(reps, a.big_reps), max(sizes)))
                if len(sizes) > 1 and a.big_reps < reps else str(reps)), ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
