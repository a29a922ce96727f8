# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pyVmomi side of gpuops.k8s_gpu.esxi_gpu_passthrough: connection, inventory look-ups, reading hosts and
VMs into the plain dicts of esxi_gpu.py, building one ConfigSpec from a plan, tasks, power and host reboot.
Depends on nothing but pyVmomi (pyVim ships in the same package)."""

from __future__ import annotations

import ssl
import time
import traceback
from typing import Any, Callable

from ansible.module_utils.basic import env_fallback

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi.esxi_gpu import NVIDIA_VENDOR_ID, RESERVED_KEY, GpuError, parse_reserved

PYVMOMI_IMP_ERR = None
try:
    from pyVim.connect import SmartConnect, Disconnect
    from pyVmomi import vim, vmodl
    HAS_PYVMOMI = True
except ImportError:
    PYVMOMI_IMP_ERR = traceback.format_exc()
    HAS_PYVMOMI = False


def connection_argument_spec() -> dict[str, dict]:
    return dict(
        hostname=dict(type='str', fallback=(env_fallback, ['VMWARE_HOST'])),
        username=dict(type='str', aliases=['user'], fallback=(env_fallback, ['VMWARE_USER'])),
        password=dict(type='str', aliases=['pass', 'pwd'], no_log=True, fallback=(env_fallback, ['VMWARE_PASSWORD'])),
        port=dict(type='int', default=443, fallback=(env_fallback, ['VMWARE_PORT'])),
        validate_certs=dict(type='bool', default=True, fallback=(env_fallback, ['VMWARE_VALIDATE_CERTS'])),
    )


class VSphereError(Exception):
    pass


def fault_text(exc: BaseException) -> str:
    msg = getattr(exc, 'msg', None) or getattr(exc, 'faultMessage', None) or str(exc)
    return '%s: %s' % (type(exc).__name__, msg)


def connect(params: dict) -> Any:
    """Log in to vCenter or ESXi. Returns the ServiceInstance."""
    missing = [k for k in ('hostname', 'username', 'password') if not params.get(k)]
    if missing:
        raise VSphereError('missing connection option(s): %s (or environment VMWARE_HOST, VMWARE_USER, VMWARE_PASSWORD)'
                           % ', '.join(missing))
    kwargs = dict(host=params['hostname'], user=params['username'], pwd=params['password'], port=params['port'])
    # Always pass a context: without one, pyVmomi silently skips certificate checks for localhost/127.0.0.1.
    if params['validate_certs']:
        ctx = ssl.create_default_context()
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    kwargs['sslContext'] = ctx
    try:
        return SmartConnect(**kwargs)
    except vim.fault.InvalidLogin as exc:
        raise VSphereError('login to %s:%s as %s failed: %s'
                           % (params['hostname'], params['port'], params['username'], fault_text(exc)))
    except ssl.SSLError as exc:
        raise VSphereError('TLS error talking to %s:%s: %s (for a self-signed certificate set validate_certs=false)'
                           % (params['hostname'], params['port'], exc))
    except Exception as exc:  # pylint: disable=broad-except
        raise VSphereError('cannot connect to %s:%s: %s' % (params['hostname'], params['port'], exc))


def disconnect(si: Any) -> None:
    try:
        Disconnect(si)
    except Exception:  # pylint: disable=broad-except
        pass


def collect(si: Any, objs: list, obj_type: Any, props: list[str]) -> dict[Any, dict[str, Any]]:
    """RetrievePropertiesEx for many objects at once -> {obj: {prop: value}} (one round trip per page)."""
    if not objs:
        return {}
    pc = si.content.propertyCollector
    spec = vmodl.query.PropertyCollector.FilterSpec(
        objectSet=[vmodl.query.PropertyCollector.ObjectSpec(obj=o) for o in objs],
        propSet=[vmodl.query.PropertyCollector.PropertySpec(type=obj_type, pathSet=list(props))])
    out = {}
    res = pc.RetrievePropertiesEx([spec], vmodl.query.PropertyCollector.RetrieveOptions())
    while res:
        for oc in res.objects:
            out[oc.obj] = dict((p.name, p.val) for p in (oc.propSet or []))
        res = pc.ContinueRetrievePropertiesEx(res.token) if res.token else None
    return out


def find_by_name(si: Any, obj_type: Any, name: str, datacenter: str | None = None) -> list:
    """All inventory objects of a type with this name (under a datacenter when given)."""
    content = si.content
    root = content.rootFolder
    if datacenter:
        dcs = [d for d, p in collect(si, list_view(si, root, vim.Datacenter), vim.Datacenter, ['name']).items()
               if p.get('name') == datacenter]
        if not dcs:
            raise GpuError('datacenter: %r not found' % datacenter)
        root = dcs[0]
    objs = list_view(si, root, obj_type)
    return [o for o, p in collect(si, objs, obj_type, ['name']).items() if p.get('name') == name]


def list_view(si: Any, root: Any, obj_type: Any) -> list:
    view = si.content.viewManager.CreateContainerView(root, [obj_type], True)
    try:
        return list(view.view)
    finally:
        view.DestroyView()


def api_major(si: Any) -> int:
    try:
        return int(str(si.content.about.apiVersion).split('.', 1)[0])
    except (ValueError, AttributeError):
        return 0


def wait_task(task: Any, timeout: float = 3600) -> Any:
    """Wait for a vSphere task; raise VSphereError with the fault text on error."""
    delay = 0.01
    end = time.time() + timeout
    while True:
        info = task.info
        if info.state == vim.TaskInfo.State.success:
            return info.result
        if info.state == vim.TaskInfo.State.error:
            raise VSphereError(fault_text(info.error) if info.error else 'task %s failed' % info.descriptionId)
        if time.time() > end:
            raise VSphereError('task %s did not finish within %ss' % (info.descriptionId, timeout))
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


# ------------------------------------------------------------------------------------------------ reading

def _vm_gpu(dev: Any) -> dict[str, Any] | None:
    """A VirtualPCIPassthrough device -> dict, or None for other devices."""
    if not isinstance(dev, vim.vm.device.VirtualPCIPassthrough):
        return None
    b = dev.backing
    if isinstance(b, vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo):
        allowed = list(b.allowedDevice or [])
        return {'key': dev.key, 'type': 'dynamic', '_obj': dev,
                'device_ids': sorted(set(a.deviceId & 0xFFFF for a in allowed if (a.vendorId & 0xFFFF) == NVIDIA_VENDOR_ID)),
                'label': b.customLabel or '',
                'nvidia': any((a.vendorId & 0xFFFF) == NVIDIA_VENDOR_ID for a in allowed)}
    if isinstance(b, vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo):
        try:
            device_id = int(str(b.deviceId), 16)
        except (TypeError, ValueError):
            device_id = 0
        return {'key': dev.key, 'type': 'directpath', '_obj': dev, 'id': str(b.id).lower(), 'device_id': device_id,
                'system_id': b.systemId, 'nvidia': ((b.vendorId or 0) & 0xFFFF) == NVIDIA_VENDOR_ID}
    return {'key': dev.key, 'type': 'other', '_obj': dev, 'nvidia': False}


VM_PROPS = ['name', 'runtime.powerState', 'runtime.host', 'config.hardware.memoryMB', 'config.hardware.device',
            'config.firmware', 'config.bootOptions', 'config.memoryReservationLockedToMax',
            'config.memoryAllocation', 'config.extraConfig', 'guest.toolsRunningStatus']


def read_vm(si: Any, vm: Any) -> dict[str, Any]:
    p = collect(si, [vm], vim.VirtualMachine, VM_PROPS).get(vm, {})
    devices = p.get('config.hardware.device') or []
    gpus = [g for g in (_vm_gpu(d) for d in devices) if g and g['nvidia']]
    boot = p.get('config.bootOptions')
    alloc = p.get('config.memoryAllocation')
    return {
        'name': p.get('name'),
        '_obj': vm,
        '_host': p.get('runtime.host'),
        'power_state': str(p.get('runtime.powerState')),
        'memory_mb': p.get('config.hardware.memoryMB') or 0,
        'firmware': p.get('config.firmware') or 'bios',
        'secure_boot': bool(boot and boot.efiSecureBootEnabled),
        'reservation_locked': bool(p.get('config.memoryReservationLockedToMax')),
        'reservation_mb': (alloc.reservation if alloc is not None and alloc.reservation else 0),
        'extra_config': dict((o.key, o.value) for o in (p.get('config.extraConfig') or [])),
        'has_disk': any(isinstance(d, vim.vm.device.VirtualDisk) for d in devices),
        'tools_running': p.get('guest.toolsRunningStatus') == 'guestToolsRunning',
        'gpus': gpus,
    }


HOST_PROPS = ['name', 'hardware.pciDevice', 'config.pciPassthruInfo', 'vm', 'parent', 'runtime.bootTime',
              'runtime.inMaintenanceMode', 'runtime.connectionState']


def read_host(si: Any, host: Any) -> dict[str, Any]:
    """The host's NVIDIA GPUs with passthrough state and the VMs (on this host) holding them."""
    p = collect(si, [host], vim.HostSystem, HOST_PROPS).get(host, {})
    info = dict((x.id, x) for x in (p.get('config.pciPassthruInfo') or []))
    attached: dict[str, list] = {}
    reserved: dict[str, list] = {}
    for vm, vp in collect(si, list(p.get('vm') or []), vim.VirtualMachine,
                          ['name', 'config.hardware.device', 'config.extraConfig']).items():
        for dev in vp.get('config.hardware.device') or []:
            g = _vm_gpu(dev)
            if g and g['type'] == 'directpath':
                attached.setdefault(g['id'], []).append(vp.get('name'))
        for opt in vp.get('config.extraConfig') or []:
            if opt.key == RESERVED_KEY:
                for i in parse_reserved(opt.value):
                    reserved.setdefault(i, []).append(vp.get('name'))
    gpus = []
    for d in p.get('hardware.pciDevice') or []:
        if (d.vendorId & 0xFFFF) != NVIDIA_VENDOR_ID:
            continue
        pt = info.get(d.id)
        gpus.append({
            'id': str(d.id).lower(),
            'vendor_id': d.vendorId & 0xFFFF,
            'device_id': d.deviceId & 0xFFFF,
            'device_name': d.deviceName,
            'capable': bool(pt and pt.passthruCapable),
            'enabled': bool(pt and pt.passthruEnabled),
            'active': bool(pt and pt.passthruActive),
            'system_id': None,
            'attached_to': sorted(attached.get(str(d.id).lower(), [])),
            'reserved_by': sorted(reserved.get(str(d.id).lower(), [])),
        })
    gpus.sort(key=lambda g: g['id'])
    return {'name': p.get('name'), '_obj': host, 'parent': p.get('parent'), 'boot_time': p.get('runtime.bootTime'),
            'in_maintenance': bool(p.get('runtime.inMaintenanceMode')), 'gpus': gpus}


def config_target(host_info: dict) -> dict[str, str]:
    """{pci id: (systemId, name)} of the host's active passthrough devices (QueryConfigTarget)."""
    parent = host_info['parent']
    env = parent.environmentBrowser
    if isinstance(parent, vim.ClusterComputeResource):
        target = env.QueryConfigTarget(host=host_info['_obj'])
    else:
        target = env.QueryConfigTarget()
    out = {}
    for p in (target.pciPassthrough or []) if target else []:
        if isinstance(p, vim.vm.PciPassthroughInfo) and p.pciDevice is not None:
            out[str(p.pciDevice.id).lower()] = p.systemId
    return out


# ------------------------------------------------------------------------------------------------ changing

def enable_passthrough(host_info: dict, ids: list[str], apply_now: bool = False) -> None:
    """UpdatePassthruConfig; with apply_now (vSphere 7.0 API) the host applies it at once where the device allows it."""
    pss = host_info['_obj'].configManager.pciPassthruSystem
    extra = {'applyNow': True} if apply_now else {}
    try:
        pss.UpdatePassthruConfig([vim.host.PciPassthruConfig(id=i, passthruEnabled=True, **extra) for i in ids])
    except vmodl.MethodFault as exc:
        raise VSphereError('enabling passthrough for %s on host %s failed: %s'
                           % (', '.join(ids), host_info['name'], fault_text(exc)))


# seconds the module waits past the timeout it gives vSphere, for the server's own Timedout fault to arrive
MAINTENANCE_GRACE = 30


def cancel_task(task: Any) -> bool:
    """Cancel a vSphere task that is still queued or running (Task.CancelTask). Returns True when the cancel was
    accepted, False when the task had ended or the server refused (a task that is not cancelable)."""
    try:
        if task.info.state not in (vim.TaskInfo.State.queued, vim.TaskInfo.State.running):
            return False
        task.CancelTask()
        return True
    except vmodl.MethodFault:
        return False


def powered_on_vms(si: Any, host: Any) -> list:
    """Names of the VMs registered on the host that are powered on (what keeps it out of maintenance mode when
    they cannot be moved)."""
    vms = collect(si, [host], vim.HostSystem, ['vm']).get(host, {}).get('vm') or []
    props = collect(si, list(vms), vim.VirtualMachine, ['name', 'runtime.powerState'])
    return sorted(p.get('name') for p in props.values() if str(p.get('runtime.powerState')) == 'poweredOn')


def enter_maintenance(si: Any, host_info: dict, timeout: int) -> None:
    """EnterMaintenanceMode_Task bounded by `timeout` seconds (the vSphere API's own timeout: the task ends with a
    Timedout fault when it expires; 0 would mean no timeout and a host that keeps trying). When it fails or does not
    end in time the task is cancelled (Task.CancelTask) if it still runs, and the error names the powered-on VMs
    still on the host - what a host in a cluster without DRS, or a standalone host, cannot evacuate itself."""
    host = host_info['_obj']
    bound = max(1, int(timeout))   # never 0: vSphere reads 0 or less as no timeout
    task = host.EnterMaintenanceMode_Task(timeout=bound)
    try:
        wait_task(task, timeout + MAINTENANCE_GRACE)
    except VSphereError as exc:
        cancelled = cancel_task(task)
        try:
            blocking = powered_on_vms(si, host)
        except vmodl.MethodFault:
            blocking = None
        raise VSphereError(
            'host %s did not enter maintenance mode within host_reboot_timeout=%ss (%s)%s; %s. Nothing was rebooted: '
            'power off or migrate those VMs (or let DRS do it in a fully automated cluster), or raise '
            'host_reboot_timeout, then run again'
            % (host_info['name'], timeout, exc, '; the task was cancelled' if cancelled else '',
               'powered-on VMs still on the host: %s' % ', '.join(blocking) if blocking
               else ('no powered-on VM is left on the host' if blocking is not None
                     else 'the VMs on the host could not be read')))


def reboot_host(si: Any, host_info: dict, timeout: int, tasks: list, reconnect: Callable[[], Any] | None = None) -> tuple[Any, Any]:
    """Maintenance mode (if not in it), reboot, wait until it is back with a new boot time, leave maintenance.

    A standalone ESXi host ends the session when it reboots: with `reconnect` (a callable returning a new
    ServiceInstance) the wait logs in again. Returns (si, host) - possibly new ones."""
    host = host_info['_obj']
    entered = False
    if not host_info['in_maintenance']:
        enter_maintenance(si, host_info, timeout)
        tasks.append('EnterMaintenanceMode_Task')
        entered = True
    boot0 = host_info['boot_time']
    wait_task(host.RebootHost_Task(force=False), timeout)
    tasks.append('RebootHost_Task')
    end = time.time() + timeout
    delay = 0.05
    lost = False
    while True:
        try:
            if lost and reconnect is not None:
                si = reconnect()
                host = vim.HostSystem(host._moId, si._stub)
                lost = False
            p = collect(si, [host], vim.HostSystem, ['runtime.connectionState', 'runtime.bootTime'])[host]
            if str(p.get('runtime.connectionState')) == 'connected' and (boot0 is None or p.get('runtime.bootTime') != boot0):
                break
        except Exception:  # pylint: disable=broad-except
            lost = True  # the host (standalone ESXi) or the network is down while it reboots
        if time.time() > end:
            raise VSphereError('host %s did not come back within %ss after the reboot' % (host_info['name'], timeout))
        time.sleep(delay)
        delay = min(delay * 2, 10.0)
    if entered:
        wait_task(host.ExitMaintenanceMode_Task(timeout=0), timeout)
        tasks.append('ExitMaintenanceMode_Task')
    return si, host


def build_config_spec(plan: dict, vm: dict, host_info: dict | None = None, system_ids: dict | None = None,
                      secure_boot: bool = False) -> Any:
    """One ConfigSpec with every change of the plan."""
    spec = vim.vm.ConfigSpec()
    changes = []
    for dev in plan['remove']:
        changes.append(vim.vm.device.VirtualDeviceSpec(operation=vim.vm.device.VirtualDeviceSpec.Operation.remove,
                                                       device=dev['_obj']))
    for n, want in enumerate(plan['add']):
        if want['type'] == 'directpath':
            system_id = (system_ids or {}).get(want['id'])
            if not system_id:
                raise VSphereError('GPU %s on host %s is not an active passthrough device (QueryConfigTarget does not '
                                   'list it): reboot the host after enabling passthrough'
                                   % (want['id'], host_info['name'] if host_info else '?'))
            backing: Any = vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo(
                id=want['id'], deviceId=format(want['device_id'] & 0xFFFF, 'x'), systemId=system_id,
                vendorId=NVIDIA_VENDOR_ID, deviceName=want.get('device_name') or '')
        else:
            backing = vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo(
                allowedDevice=[vim.vm.device.VirtualPCIPassthrough.AllowedDevice(vendorId=NVIDIA_VENDOR_ID, deviceId=d)
                               for d in want['device_ids']],
                customLabel=want.get('label') or '', deviceName='', useAutoDetect=False)
        device = vim.vm.device.VirtualPCIPassthrough(key=-100 - n, backing=backing)
        changes.append(vim.vm.device.VirtualDeviceSpec(operation=vim.vm.device.VirtualDeviceSpec.Operation.add,
                                                       device=device))
    if changes:
        spec.deviceChange = changes
    if plan['extra_config']:
        spec.extraConfig = [vim.option.OptionValue(key=k, value=v) for k, v in sorted(plan['extra_config'].items())]
    if plan['firmware']:
        spec.firmware = plan['firmware']
    if plan['secure_boot'] is not None or (plan['firmware'] == 'efi' and not secure_boot):
        spec.bootOptions = vim.vm.BootOptions(efiSecureBootEnabled=bool(plan['secure_boot'])
                                              if plan['secure_boot'] is not None else bool(secure_boot))
    if plan['memory_mb']:
        spec.memoryMB = plan['memory_mb']
    if plan['reservation_locked']:
        spec.memoryReservationLockedToMax = True
    return spec


def power_off(vm_info: dict, timeout: int, tasks: list) -> None:
    """Guest shutdown when VMware Tools run (waits up to timeout), otherwise a hard power-off."""
    vm = vm_info['_obj']
    if vm_info['tools_running']:
        vm.ShutdownGuest()
        tasks.append('ShutdownGuest')
        end = time.time() + timeout
        delay = 0.05
        while str(vm.runtime.powerState) != 'poweredOff':
            if time.time() > end:
                raise VSphereError('VM %s did not shut down within %ss (guest shutdown)' % (vm_info['name'], timeout))
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        return
    wait_task(vm.PowerOffVM_Task(), timeout)
    tasks.append('PowerOffVM_Task')


def power_on(vm_info: dict, timeout: int, tasks: list) -> None:
    wait_task(vm_info['_obj'].PowerOnVM_Task(), timeout)
    tasks.append('PowerOnVM_Task')
