# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_gpu as eg


def gpu(pci, device_id=0x1EB8, name='TU104GL [Tesla T4]', enabled=True, active=True, capable=True, attached=()):
    return {'id': pci, 'vendor_id': 0x10DE, 'device_id': device_id, 'device_name': name, 'capable': capable,
            'enabled': enabled, 'active': active, 'system_id': None, 'attached_to': list(attached)}


def vm(**kw):
    base = {'name': 'vm1', 'power_state': 'poweredOff', 'memory_mb': 65536, 'firmware': 'efi', 'secure_boot': False,
            'reservation_locked': True, 'reservation_mb': 0, 'has_disk': True, 'tools_running': False,
            'extra_config': {'hypervisor.cpuid.v0': 'FALSE', 'pciPassthru.use64bitMMIO': 'TRUE',
                             'pciPassthru.64bitMMIOSizeGB': '32'},
            'gpus': []}
    base.update(kw)
    return base


PARAMS = dict(hide_hypervisor=True, mmio_size_gb=32, firmware='efi', secure_boot=False, reserve_memory=True, memory_mb=None)
HOST = [gpu('0000:3b:00.0'), gpu('0000:3c:00.0', enabled=False, active=False),
        gpu('0000:3d:00.0', 0x20F1, 'GA100 [A100 PCIe 40GB]'), gpu('0000:3e:00.0', 0x20F1, 'GA100 [A100 PCIe 40GB]'),
        gpu('0000:41:00.0', 0x1DB4, 'GV100GL [Tesla V100 PCIe 16GB]')]


# ------------------------------------------------------------------------------------------------ rules

@pytest.mark.parametrize('mems,size', [([16], 32), ([16, 16], 64), ([80], 256), ([40], 128), ([40, 40], 256),
                                       ([80] * 4, 1024), ([8], 16), ([24], 64), ([], 0)])
def test_mmio_rule(mems, size):
    assert eg.mmio_size_gb(mems) == size


def test_required_memory():
    assert eg.required_memory_mb([16], 1.5) == 24576
    assert eg.required_memory_mb([40, 40], 1.5) == 122880


@pytest.mark.parametrize('device_id,name,override,expected', [
    (0x1EB8, 'TU104GL [Tesla T4]', None, 16), (0x20B5, '', None, 80), (0x9999, 'GX [Future 96GB]', None, 96),
    (0x9999, 'mystery', None, None), (0x9999, 'mystery', 12, 12), (0x1EB8, '', 15, 15)])
def test_gpu_memory(device_id, name, override, expected):
    assert eg.gpu_memory_gb(device_id, name, override) == expected


@pytest.mark.parametrize('value,expected', [('3B:00.0', '0000:3b:00.0'), ('0000:af:1f.7', '0000:af:1f.7'),
                                            (' 0000:3b:00.0 ', '0000:3b:00.0')])
def test_pci_id(value, expected):
    assert eg.normalize_pci_id(value, 'x') == expected


@pytest.mark.parametrize('value', ['3b:00', '0000:3b:00.8', 'gpu0', '00000:3b:00.0'])
def test_bad_pci_id(value):
    with pytest.raises(eg.GpuError, match='gpus.0..pci_id'):
        eg.normalize_pci_id(value, 'gpus[0].pci_id')


@pytest.mark.parametrize('value,expected', [('0x20F1', 0x20F1), ('20f1', 0x20F1), (8433, 0x20F1), ('0X1db4', 0x1DB4)])
def test_device_id(value, expected):
    assert eg.parse_device_id(value, 'x') == expected


@pytest.mark.parametrize('value', ['0xZZ', '', True, 0, 0x10000, '0x12345'])
def test_bad_device_id(value):
    with pytest.raises(eg.GpuError, match='device_id'):
        eg.parse_device_id(value, 'gpus[0].device_id')


@pytest.mark.parametrize('model,name,hit', [('T4', 'TU104GL [Tesla T4]', True), ('t4', 'TU104GL [Tesla T4]', True),
                                            ('V100', 'GV100GL [Tesla V100 PCIe 16GB]', True),
                                            ('V100', 'GV100GL [Tesla V100S]', False),
                                            ('A100', 'GA100 [A100 PCIe 40GB]', True), ('A10', 'GA100 [A100 PCIe 40GB]', False),
                                            ('A100 PCIe 40GB', 'GA100 [A100 PCIe 40GB]', True)])
def test_model_matches(model, name, hit):
    assert eg.model_matches(model, name) is hit


# ------------------------------------------------------------------------------------------------ input

@pytest.mark.parametrize('gpus,ptype,match', [
    ([{'model': 'T4', 'pci_id': '3b:00.0'}], 'directpath', r'gpus\[0\]: give exactly one of'),
    ([{}], 'directpath', r'gpus\[0\]: give exactly one of pci_id, device_id, model \(got none\)'),
    ([{'model': 'T4', 'colour': 'red'}], 'directpath', r'gpus\[0\]: unknown key\(s\) colour'),
    ([{'pci_id': '3b:00.0', 'count': 2}], 'directpath', r'gpus\[0\].count: must be 1'),
    ([{'model': 'T4', 'count': 0}], 'directpath', r'gpus\[0\].count: must be >= 1'),
    ([{'model': 'T4', 'memory_gb': 0}], 'directpath', r'gpus\[0\].memory_gb'),
    ([{'model': 'T4', 'custom_label': 'x'}], 'directpath', r'custom_label: only used with passthrough_type=dynamic'),
    ([{'pci_id': '3b:00.0'}], 'dynamic', r'gpus\[0\].pci_id: Dynamic DirectPath'),
    (['T4'], 'directpath', r'gpus\[0\]: expected a dict'),
])
def test_bad_requests(gpus, ptype, match):
    with pytest.raises(eg.GpuError, match=match):
        eg.normalize_requests(gpus, ptype, True)


def test_requests_defaults():
    reqs = eg.normalize_requests([{'model': 'T4'}, {'device_id': '0x20f1', 'count': 2}, {'pci_id': '3B:00.0'}], 'directpath', True)
    assert [(r['model'], r['device_id'], r['pci_id'], r['count']) for r in reqs] == [
        ('T4', None, None, 1), (None, 0x20F1, None, 2), (None, None, '0000:3b:00.0', 1)]
    # without a VM (host part only) count stays unset: every matching GPU
    assert eg.normalize_requests([{'model': 'T4'}], 'directpath', False)[0]['count'] is None


# ------------------------------------------------------------------------------------------------ selection

def select(gpus, host=None, vm_name='vm1'):
    return [g['id'] for r, g in eg.select_gpus(eg.normalize_requests(gpus, 'directpath', vm_name is not None),
                                               host or HOST, 'esx1', vm_name)]


def test_select_prefers_attached_then_active():
    host = [gpu('0000:3b:00.0', active=False), gpu('0000:3c:00.0'), gpu('0000:3d:00.0', attached=['vm1'])]
    assert select([{'model': 'T4'}], host) == ['0000:3d:00.0']
    assert select([{'model': 'T4', 'count': 2}], host) == ['0000:3d:00.0', '0000:3c:00.0']


def test_select_skips_and_refuses_taken():
    host = [gpu('0000:3b:00.0', attached=['other']), gpu('0000:3c:00.0')]
    assert select([{'model': 'T4'}], host) == ['0000:3c:00.0']
    with pytest.raises(eg.GpuError, match=r'gpus\[0\]: GPU 0000:3b:00.0 .* is taken: attached to VM\(s\) other'):
        select([{'pci_id': '0000:3b:00.0'}], host)
    with pytest.raises(eg.GpuError, match=r'2 GPU\(s\) with model .T4. wanted on host esx1 but only 1 free; taken: 0000:3b:00.0'):
        select([{'model': 'T4', 'count': 2}], host)


def test_select_pci_first_and_no_double_use():
    assert select([{'model': 'T4'}, {'pci_id': '0000:3b:00.0'}]) == ['0000:3b:00.0', '0000:3c:00.0']


def test_select_unknown_model_lists_inventory():
    with pytest.raises(eg.GpuError, match=r'no NVIDIA GPU with model .H100. on host esx1; .*0x1eb8 TU104GL \[Tesla T4\]'):
        select([{'model': 'H100'}])


def test_select_not_capable():
    with pytest.raises(eg.GpuError, match='not passthrough-capable'):
        select([{'model': 'T4'}], [gpu('0000:3b:00.0', capable=False)])


def test_select_host_only_takes_all_matches():
    assert select([{'device_id': '0x20F1'}], vm_name=None) == ['0000:3d:00.0', '0000:3e:00.0']


def test_dynamic_targets():
    reqs = eg.normalize_requests([{'model': 'A100', 'count': 2, 'custom_label': 'a100'}], 'dynamic', True)
    targets = eg.dynamic_targets(reqs, HOST, 'esx1')
    assert [(t['device_ids'], t['label'], t['memory_gb']) for t in targets] == [([0x20F1], 'a100', 40)] * 2
    with pytest.raises(eg.GpuError, match='only 2 passthrough-capable'):
        eg.dynamic_targets(eg.normalize_requests([{'model': 'A100', 'count': 3}], 'dynamic', True), HOST, 'esx1')


def test_memory_of_unknown_gpu_names_option():
    chosen = [(eg.normalize_requests([{'model': 'X'}], 'directpath', True)[0], gpu('0000:3b:00.0', 0x9999, 'X'))]
    with pytest.raises(eg.GpuError, match=r'set gpus\[0\].memory_gb'):
        eg.memory_of(chosen)


# ------------------------------------------------------------------------------------------------ plan

def directpath(pci, key=9000, device_id=0x1EB8):
    return {'key': key, 'type': 'directpath', 'id': pci, 'device_id': device_id, 'system_id': 'sys', 'nvidia': True}


def want(pci):
    return {'type': 'directpath', 'id': pci, 'device_id': 0x1EB8, 'device_name': 'T4'}


def test_plan_converged_is_empty():
    plan = eg.plan_vm(vm(gpus=[directpath('0000:3b:00.0')]), [want('0000:3b:00.0')], PARAMS)
    assert plan['changes'] == [] and not plan['needs_reconfigure'] and plan['before'] == plan['after']


def test_plan_boolean_values_compare_case_insensitively():
    ec = {'hypervisor.cpuid.v0': 'false', 'pciPassthru.use64bitMMIO': 'true', 'pciPassthru.64bitMMIOSizeGB': '32'}
    v = vm(gpus=[directpath('0000:3b:00.0')], extra_config=ec)
    assert eg.plan_vm(v, [want('0000:3b:00.0')], PARAMS)['changes'] == []


def test_plan_fresh_vm():
    v = vm(firmware='bios', reservation_locked=False, extra_config={}, memory_mb=64)
    plan = eg.plan_vm(v, [want('0000:3b:00.0')], dict(PARAMS, memory_mb=32768))
    assert plan['changes'] == [
        'add GPU directpath:0000:3b:00.0', 'set hypervisor.cpuid.v0 = FALSE (was unset)',
        'set pciPassthru.use64bitMMIO = TRUE (was unset)', 'set pciPassthru.64bitMMIOSizeGB = 32 (was unset)',
        'firmware bios -> efi', 'memory 64 MB -> 32768 MB', 'lock the memory reservation to the VM memory']
    assert 'lock the memory reservation to the VM memory' not in plan['offline_changes']
    assert len(plan['offline_changes']) == 6
    assert plan['after'] == {'power_state': 'poweredOff', 'gpus': ['directpath:0000:3b:00.0'], 'firmware': 'efi',
                             'secure_boot': False, 'memory_mb': 32768, 'memory_reservation_locked_to_max': True,
                             'extra_config': {'hypervisor.cpuid.v0': 'FALSE', 'pciPassthru.64bitMMIOSizeGB': '32',
                                              'pciPassthru.use64bitMMIO': 'TRUE'}}


def test_plan_exact_set():
    v = vm(gpus=[directpath('0000:3b:00.0', 1), directpath('0000:3c:00.0', 2)])
    plan = eg.plan_vm(v, [want('0000:3c:00.0'), want('0000:3d:00.0')], PARAMS)
    assert [d['key'] for d in plan['remove']] == [1]
    assert [d['id'] for d in plan['add']] == ['0000:3d:00.0']
    assert plan['after']['gpus'] == ['directpath:0000:3c:00.0', 'directpath:0000:3d:00.0']


def test_plan_directpath_to_dynamic():
    v = vm(gpus=[directpath('0000:3d:00.0', 1, 0x20F1)])
    plan = eg.plan_vm(v, [{'type': 'dynamic', 'device_ids': [0x20F1], 'label': 'a100'}], PARAMS)
    assert plan['changes'][:2] == ['remove GPU directpath:0000:3d:00.0', 'add GPU dynamic:0x20f1:a100']


def test_plan_secure_boot_and_keep_firmware():
    v = vm(firmware='bios', secure_boot=False)
    assert eg.plan_vm(v, [], dict(PARAMS, firmware='keep', mmio_size_gb=0))['changes'] == []
    v = vm(secure_boot=True)
    assert eg.plan_vm(v, [], dict(PARAMS, mmio_size_gb=0))['changes'] == ['secure boot on -> off']


def test_plan_leaves_options_alone():
    v = vm(extra_config={}, reservation_locked=False)
    plan = eg.plan_vm(v, [], dict(PARAMS, hide_hypervisor=False, mmio_size_gb=0, reserve_memory=False))
    assert plan['changes'] == []


def test_bios_to_efi():
    v = vm(firmware='bios')
    plan = eg.plan_vm(v, [], dict(PARAMS, mmio_size_gb=0))
    with pytest.raises(eg.GpuError, match='may not boot.*bios_to_efi=warn'):
        eg.check_bios_to_efi(v, plan, 'fail')
    assert 'may not boot' in eg.check_bios_to_efi(v, plan, 'warn')
    fresh = vm(firmware='bios', has_disk=False)
    assert eg.check_bios_to_efi(fresh, eg.plan_vm(fresh, [], PARAMS), 'fail') is None


def test_memory_check():
    assert eg.check_memory(24576, [16], 1.5, 'fail', 'vm1') is None
    with pytest.raises(eg.GpuError, match='at least 24576 MB; raise memory_mb, or set memory_check=warn or ignore'):
        eg.check_memory(16384, [16], 1.5, 'fail', 'vm1')
    assert '24576' in eg.check_memory(16384, [16], 1.5, 'warn', 'vm1')
    assert eg.check_memory(16, [16], 1.5, 'ignore', 'vm1') is None


def test_full_reservation():
    assert eg.full_reservation(vm(reservation_locked=True))
    assert eg.full_reservation(vm(reservation_locked=False, reservation_mb=65536))
    assert not eg.full_reservation(vm(reservation_locked=False, reservation_mb=1024))


def test_select_picks_pending_reboot_gpus_last():
    """An enabled GPU waiting for a reboot may be meant for another VM waiting for the same reboot."""
    host = [gpu('0000:3b:00.0', enabled=True, active=False), gpu('0000:3c:00.0', enabled=False, active=False),
            gpu('0000:3d:00.0', enabled=True, active=True)]
    assert select([{'model': 'T4', 'count': 3}], host) == ['0000:3d:00.0', '0000:3c:00.0', '0000:3b:00.0']


# ------------------------------------------------------------------------------------------------ reservations

def reserved(pci, by, enabled=True, active=False, **kw):
    g = gpu(pci, 0x20F1, 'GA100 [A100 PCIe 40GB]', enabled=enabled, active=active, **kw)
    g['reserved_by'] = list(by)
    return g


A100_FREE = dict(device_id=0x20F1, name='GA100 [A100 PCIe 40GB]', enabled=False, active=False)


def test_ESX_04_own_reserved_gpus_come_first_and_others_are_taken():
    """The two-step flow: vm1's earlier run enabled (and reserved) 3d/3e; its next run takes those, not 3b/3c."""
    host = [gpu('0000:3b:00.0', **A100_FREE), gpu('0000:3c:00.0', **A100_FREE),
            reserved('0000:3d:00.0', ['vm1']), reserved('0000:3e:00.0', ['vm1'])]
    assert select([{'model': 'A100', 'count': 2}], host, 'vm1') == ['0000:3d:00.0', '0000:3e:00.0']
    # another VM leaves them alone and takes the free ones
    assert select([{'model': 'A100', 'count': 2}], host, 'vm2') == ['0000:3b:00.0', '0000:3c:00.0']
    with pytest.raises(eg.GpuError, match=r'only 2 free; taken: 0000:3d:00.0 \(VM vm1\)'):
        select([{'model': 'A100', 'count': 3}], host, 'vm2')
    with pytest.raises(eg.GpuError, match=r'reserved by VM\(s\) vm1, waiting for the host reboot'):
        select([{'pci_id': '3e:00.0'}], host, 'vm2')
    # the host part alone (no VM) is not bound by reservations
    assert select([{'model': 'A100'}], host, None) == ['0000:3b:00.0', '0000:3c:00.0', '0000:3d:00.0', '0000:3e:00.0']


def test_ESX_04_reserved_value_parsing():
    assert eg.parse_reserved('0000:3E:00.0, 3d:00.0,,junk') == ['0000:3d:00.0', '0000:3e:00.0']
    assert eg.parse_reserved(None) == [] and eg.parse_reserved('') == []


def test_ESX_04_attaching_clears_the_reservation():
    v = vm(extra_config=dict(vm()['extra_config'], **{eg.RESERVED_KEY: '0000:3d:00.0'}))
    want = [{'type': 'directpath', 'id': '0000:3d:00.0', 'device_id': 0x20F1, 'device_name': 'A100'}]
    plan = eg.plan_vm(v, want, PARAMS)
    assert plan['extra_config'][eg.RESERVED_KEY] == ''
    assert 'clear %s (was 0000:3d:00.0)' % eg.RESERVED_KEY in plan['changes']
    assert 'clear %s (was 0000:3d:00.0)' % eg.RESERVED_KEY not in plan['offline_changes']
    # without a reservation nothing about it is planned
    assert eg.RESERVED_KEY not in eg.plan_vm(vm(), want, PARAMS)['extra_config']


def test_ESX_15_the_rebooting_call_takes_the_gpus_enabled_for_the_reboot():
    """Two-step flow: the first call (pending_reboot=skip_vm) enabled 3b and 3c; the second call (host_reboot=true,
    without chosen_gpus) took 3d and 3e, enabled them too and left 3b/3c in passthrough for nobody. The call that
    reboots now takes the enabled-and-pending GPUs no VM holds."""
    host = [gpu('0000:3b:00.0', enabled=True, active=False), gpu('0000:3c:00.0', enabled=True, active=False),
            gpu('0000:3d:00.0', enabled=False, active=False), gpu('0000:3e:00.0', enabled=False, active=False)]
    got = eg.select_gpus(eg.normalize_requests([{'model': 'T4', 'count': 2}], 'directpath', True), host, 'esx1',
                         'vm1', prefer_pending=True)
    assert [g['id'] for dummy, g in got] == ['0000:3b:00.0', '0000:3c:00.0']
    # an active free GPU still comes first (nothing to reboot for); one another VM holds is never taken
    host[3].update(enabled=True, active=True)
    host[0]['attached_to'] = ['vm2']
    got = eg.select_gpus(eg.normalize_requests([{'model': 'T4', 'count': 2}], 'directpath', True), host, 'esx1',
                         'vm1', prefer_pending=True)
    assert [g['id'] for dummy, g in got] == ['0000:3e:00.0', '0000:3c:00.0']


def test_ESX_16_every_gpu_the_catalogue_knows_has_a_memory_for_the_mmio_rule():
    """Every PCI device id the collection's MIG catalogue knows resolves to a GPU memory in the ESXi module (20 did
    not: B200, B300, GB200, GB300, GH200, H100 96GB/H20, A100 variants, RTX PRO 6000 - their PCI names carry no
    '<n>GB', so passthrough failed asking for memory_gb)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
    missing = [(key, hex(i)) for key, ids, dummy, dummy_table in gpu_catalog.MIG_PRODUCTS for i in ids
               if not eg.gpu_memory_gb(i, 'GB100 [B200]')]
    assert missing == []
    assert eg.gpu_memory_gb(0x2901, 'GB100 [B200]') == 180 and eg.gpu_memory_gb(0x3182) == 269
    assert eg.gpu_memory_gb(0x20B0) == 40                        # the datasheet table first
    assert eg.mmio_size_gb([eg.gpu_memory_gb(0x2901)] * 8) == 4096
