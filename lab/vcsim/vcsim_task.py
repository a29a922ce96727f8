"""LAB ONLY: wait for a task of the vSphere simulator.

pyVim's WaitForTask reads ``task.info.name.info.name`` whenever it sees the task still running; the simulator names
its tasks with methods pyVmomi does not know (an ``UnknownManagedMethod`` without ``info``), so WaitForTask raises
AttributeError whenever the machine is loaded enough that the first poll finds the task running (CI of stop 44:
lab/bench/esxi/bench.py, CreateVM_Task). This wait reads only the state, and raises the task's fault as WaitForTask
does. Nothing of the collection imports it (the collection has its own wait in module_utils/_esxi/esxi_vsphere.py).
"""
import time

from pyVmomi import vim


def wait_task(task, timeout=120.0):
    """The task's result once it succeeded; its fault (a vim.fault.* exception) when it failed."""
    delay, end = 0.01, time.monotonic() + timeout
    while True:
        info = task.info
        if info.state == vim.TaskInfo.State.success:
            return info.result
        if info.state == vim.TaskInfo.State.error:
            raise info.error
        if time.monotonic() > end:
            raise TimeoutError("vSphere simulator task %s (%s) not finished in %s s" % (info.key, info.descriptionId,
                                                                                       timeout))
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
