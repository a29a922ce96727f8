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
