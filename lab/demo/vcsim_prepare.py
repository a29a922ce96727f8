#!/usr/bin/env python3
"""LAB ONLY (make demo): give three VMs of the vSphere simulator the names of the lab's GPU nodes.

    vcsim_prepare.py STATE_JSON NAME...

The simulator names its VMs DC0_C0_RP0_VM<n>. The demo's inventory addresses the VMs by the GPU nodes' names
(esxi_gpu_passthrough_vm_name defaults to the inventory name), so each name is given to one VM, on hosts of
their own where the simulator has enough. Idempotent: a VM that already has the name is kept. Nothing here is part of the collection.
"""
import json
import sys
from pathlib import Path

from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vcsim"))
from vcsim_task import wait_task  # noqa: E402


def main():
    state = json.load(open(sys.argv[1]))
    names = sys.argv[2:]
    si = SmartConnect(host=state['host'], port=int(state['port']), user=state['username'], pwd=state['password'],
                      disableSslCertValidation=True)  # loopback simulator with a self-signed certificate
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        vms = list(view.view)
        have = dict((vm.name, vm) for vm in vms)
        used_hosts = set(have[n].runtime.host.name for n in names if n in have)
        free = sorted((vm for vm in vms if vm.name not in names), key=lambda vm: vm.name)
        for name in names:
            if name in have:
                print('%s: already there (host %s)' % (name, have[name].runtime.host.name))
                continue
            # a host of its own when there is one (every host has the same GPUs, so sharing one also works)
            pick = next((vm for vm in free if vm.runtime.host.name not in used_hosts), free[0] if free else None)
            if pick is None:
                sys.exit('the simulator has no free VM for %s' % name)
            free.remove(pick)
            old, host = pick.name, pick.runtime.host.name
            used_hosts.add(host)
            wait_task(pick.Rename_Task(newName=name))
            print('%s: was %s (host %s)' % (name, old, host))
    finally:
        Disconnect(si)


if __name__ == '__main__':
    main()
