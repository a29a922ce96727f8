# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import ssl

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_gpu as eg
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_vsphere as ev

# pyVmomi comes from the collection's requirements.txt (lab/bin/bootstrap.sh installs it into both venvs):
# without it these tests must fail, not skip
from pyVmomi import vim  # noqa: E402  pylint: disable=wrong-import-position

Passthrough = vim.vm.device.VirtualPCIPassthrough


def test_connection_spec_defaults_and_no_log():
    spec = ev.connection_argument_spec()
    assert spec['validate_certs']['default'] is True
    assert spec['password']['no_log'] is True
    assert spec['port']['default'] == 443
    assert spec['hostname']['fallback'][1] == ['VMWARE_HOST']


def test_connect_needs_credentials():
    with pytest.raises(ev.VSphereError, match='hostname, password'):
        ev.connect(dict(hostname=None, username='u', password=None, port=443, validate_certs=True))


@pytest.mark.parametrize('validate', [True, False])
def test_connect_always_passes_a_context(monkeypatch, validate):
    seen = {}

    def fake(**kw):
        seen.update(kw)
        return 'si'
    monkeypatch.setattr(ev, 'SmartConnect', fake)
    assert ev.connect(dict(hostname='127.0.0.1', username='u', password='p', port=443, validate_certs=validate)) == 'si'
    ctx = seen['sslContext']
    assert (ctx.verify_mode == ssl.CERT_REQUIRED) is validate and ctx.check_hostname is validate


def test_vm_gpu_parsing():
    direct = Passthrough(key=5, backing=Passthrough.DeviceBackingInfo(id='0000:3B:00.0', deviceId='1eb8', systemId='s',
                                                                      vendorId=0x10DE, deviceName='T4'))
    g = ev._vm_gpu(direct)
    assert (g['type'], g['id'], g['device_id'], g['system_id'], g['nvidia']) == ('directpath', '0000:3b:00.0', 0x1EB8, 's', True)
    dyn = Passthrough(key=6, backing=Passthrough.DynamicBackingInfo(
        allowedDevice=[Passthrough.AllowedDevice(vendorId=0x10DE, deviceId=0x20F1)], customLabel='a100'))
    g = ev._vm_gpu(dyn)
    assert (g['type'], g['device_ids'], g['label'], g['nvidia']) == ('dynamic', [0x20F1], 'a100', True)
    nic = Passthrough(key=7, backing=Passthrough.DeviceBackingInfo(id='0000:5e:00.0', deviceId='1572', vendorId=0x8086))
    assert ev._vm_gpu(nic)['nvidia'] is False
    assert ev._vm_gpu(vim.vm.device.VirtualDisk(key=1)) is None


def test_build_config_spec_single_spec():
    old = Passthrough(key=5, backing=Passthrough.DeviceBackingInfo(id='0000:3b:00.0'))
    plan = {'remove': [{'_obj': old}],
            'add': [{'type': 'directpath', 'id': '0000:3c:00.0', 'device_id': 0x1EB8, 'device_name': 'TU104GL [Tesla T4]'},
                    {'type': 'dynamic', 'device_ids': [0x20F1], 'label': 'a100'}],
            'extra_config': {eg.KEY_CPUID: 'FALSE', eg.KEY_MMIO_SIZE: '64'}, 'firmware': 'efi', 'secure_boot': None,
            'memory_mb': 65536, 'reservation_locked': True}
    spec = ev.build_config_spec(plan, {}, {'name': 'esx1'}, {'0000:3c:00.0': 'sysid'}, False)
    ops = [(c.operation, type(c.device.backing).__name__) for c in spec.deviceChange]
    assert ops == [('remove', 'vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo'),
                   ('add', 'vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo'),
                   ('add', 'vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo')]
    b = spec.deviceChange[1].device.backing
    assert (b.id, b.deviceId, b.systemId, b.vendorId) == ('0000:3c:00.0', '1eb8', 'sysid', 0x10DE)
    assert spec.deviceChange[1].device.key < 0 and spec.deviceChange[2].device.key < 0
    assert spec.deviceChange[1].device.key != spec.deviceChange[2].device.key
    assert spec.deviceChange[2].device.backing.allowedDevice[0].deviceId == 0x20F1
    assert sorted((o.key, o.value) for o in spec.extraConfig) == [(eg.KEY_CPUID, 'FALSE'), (eg.KEY_MMIO_SIZE, '64')]
    assert spec.firmware == 'efi' and spec.bootOptions.efiSecureBootEnabled is False
    assert spec.memoryMB == 65536 and spec.memoryReservationLockedToMax is True


def test_build_config_spec_needs_active_device():
    plan = {'remove': [], 'add': [{'type': 'directpath', 'id': '0000:3c:00.0', 'device_id': 0x1EB8}], 'extra_config': {},
            'firmware': None, 'secure_boot': None, 'memory_mb': None, 'reservation_locked': None}
    with pytest.raises(ev.VSphereError, match='not an active passthrough device'):
        ev.build_config_spec(plan, {}, {'name': 'esx1'}, {}, False)


def test_build_config_spec_minimal():
    plan = {'remove': [], 'add': [], 'extra_config': {}, 'firmware': None, 'secure_boot': None, 'memory_mb': None,
            'reservation_locked': True}
    spec = ev.build_config_spec(plan, {}, None, None, False)
    assert spec.memoryReservationLockedToMax is True
    assert not spec.deviceChange and not spec.extraConfig and spec.firmware is None and spec.bootOptions is None


class _Info(object):
    def __init__(self, state, error=None):
        self.state, self.error, self.descriptionId, self.result = state, error, 'host.enterMaintenanceMode', None


class _MaintenanceTask(object):
    """A task that stays running (a powered-on VM that cannot move), or ends with vSphere's Timedout fault."""
    def __init__(self, fault=None):
        self.fault, self.cancelled = fault, 0

    @property
    def info(self):
        if self.cancelled:
            return _Info(vim.TaskInfo.State.error, vim.fault.RequestCanceled(msg='The task was canceled by a user.'))
        if self.fault:
            return _Info(vim.TaskInfo.State.error, self.fault)
        return _Info(vim.TaskInfo.State.running)

    def CancelTask(self):  # noqa: N802  (the vSphere method name)
        self.cancelled += 1


class _Host(object):
    def __init__(self, task):
        self.task, self.calls = task, []

    def EnterMaintenanceMode_Task(self, timeout):  # noqa: N802
        self.calls.append(('EnterMaintenanceMode_Task', timeout))
        return self.task

    def RebootHost_Task(self, force):  # noqa: N802
        self.calls.append(('RebootHost_Task', force))
        raise AssertionError('no reboot without maintenance mode')


def _fake_collect(vms):
    def collect(si, objs, obj_type, props):
        if obj_type is vim.HostSystem:
            return dict((o, {'vm': list(vms)}) for o in objs)
        return dict((name, {'name': name, 'runtime.powerState': state}) for name, state in vms.items())
    return collect


@pytest.mark.parametrize('fault', [None, vim.fault.Timedout(msg='Operation timed out.')], ids=['still-running', 'timedout'])
def test_ESX_13_maintenance_mode_bounded_cancelled_and_blockers_named(monkeypatch, fault):
    """Before: EnterMaintenanceMode_Task(timeout=0) (vSphere: no timeout), never cancelled, the error named no VM.
    Now: the host_reboot_timeout goes to vSphere, a task still running after it is cancelled (Task.CancelTask), the
    powered-on VMs still on the host are named, and the host is not rebooted."""
    monkeypatch.setattr(ev, 'MAINTENANCE_GRACE', 0)
    monkeypatch.setattr(ev.time, 'sleep', lambda s: None)
    monkeypatch.setattr(ev, 'collect', _fake_collect({'gpu-vm-1': 'poweredOn', 'db-2': 'poweredOn',
                                                      'template-3': 'poweredOff'}))
    task = _MaintenanceTask(fault)
    host = _Host(task)
    tasks = []
    with pytest.raises(ev.VSphereError) as err:
        ev.reboot_host('si', {'name': 'esx1', '_obj': host, 'in_maintenance': False, 'boot_time': None}, 0.01, tasks)
    msg = str(err.value)
    assert host.calls == [('EnterMaintenanceMode_Task', 1)]     # a bound, never 0 (vSphere: 0 is no timeout)
    assert 'powered-on VMs still on the host: db-2, gpu-vm-1' in msg and 'template-3' not in msg
    assert 'host_reboot_timeout' in msg and 'esx1' in msg
    assert ('the task was cancelled' in msg) is (fault is None) and task.cancelled == (1 if fault is None else 0)
    assert tasks == [] and ('RebootHost_Task', False) not in host.calls


def test_ESX_13_maintenance_timeout_is_given_to_vsphere(monkeypatch):
    monkeypatch.setattr(ev, 'collect', _fake_collect({}))
    task = _MaintenanceTask(vim.fault.Timedout(msg='Operation timed out.'))
    host = _Host(task)
    with pytest.raises(ev.VSphereError, match='no powered-on VM is left on the host'):
        ev.enter_maintenance('si', {'name': 'esx1', '_obj': host}, 1800)
    assert host.calls == [('EnterMaintenanceMode_Task', 1800)]
