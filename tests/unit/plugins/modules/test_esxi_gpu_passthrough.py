# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_gpu as eg
from ansible_collections.gpuops.k8s_gpu.plugins.modules import esxi_gpu_passthrough as mod


def params(**kw):
    p = dict((k, v.get('default')) for k, v in mod.argument_spec().items())
    p.update(hostname='vc', username='u', password='p', name='vm1')
    p.update(kw)
    p['gpus'] = [dict(dict((k, None) for k in ('pci_id', 'device_id', 'model', 'count', 'memory_gb', 'custom_label')), **g)
                 for g in p['gpus']]
    return p


class FakeModule(object):
    def __init__(self, p, check=False):
        self.params = p
        self.check_mode = check
        self._diff = True


class FakeSi(object):
    class content(object):  # noqa: N801 (mimics the pyVmomi attribute)
        class about(object):  # noqa: N801
            apiVersion = '7.0.3.0'


def gpu(pci, enabled=True, active=True, attached=()):
    return {'id': pci, 'vendor_id': 0x10DE, 'device_id': 0x1EB8, 'device_name': 'TU104GL [Tesla T4]', 'capable': True,
            'enabled': enabled, 'active': active, 'system_id': None, 'attached_to': list(attached)}


def vm(**kw):
    base = {'name': 'vm1', 'power_state': 'poweredOff', 'memory_mb': 32768, 'firmware': 'efi', 'secure_boot': False,
            'reservation_locked': True, 'reservation_mb': 0, 'has_disk': True, 'tools_running': False, 'gpus': [],
            'extra_config': {}}
    base.update(kw)
    return base


def plan(p, the_vm, host_gpus, check=False):
    runner = mod.Runner(FakeModule(p, check), mod.check_params(p))
    runner.si = FakeSi()
    return runner, runner.plan(the_vm, {'name': 'esx1', 'gpus': host_gpus})


def test_argument_spec_safe_defaults():
    spec = mod.argument_spec()
    assert spec['validate_certs']['default'] is True
    assert spec['password']['no_log'] is True
    assert spec['power_cycle']['default'] is False and spec['host_reboot']['default'] is False
    assert spec['memory_check']['choices'] == ['fail', 'warn', 'ignore']


@pytest.mark.parametrize('kw,match', [
    (dict(name=None), 'name: required with scope=all'),
    (dict(mmio_size_gb=-1), 'mmio_size_gb: must be >= 0'),
    (dict(memory_mb=1001), 'memory_mb: must be a positive multiple of 4'),
    (dict(memory_ratio=0.0), 'memory_ratio: must be > 0'),
    (dict(power_timeout=0), 'power_timeout: must be >= 1'),
    (dict(gpus=[{'model': 'T4', 'device_id': '0x1eb8'}]), r'gpus\[0\]: give exactly one of'),
])
def test_check_params(kw, match):
    with pytest.raises(eg.GpuError, match=match):
        mod.check_params(params(**kw))


def test_plan_converged_vm_needs_nothing():
    v = vm(gpus=[{'key': 1, 'type': 'directpath', 'id': '0000:3b:00.0', 'device_id': 0x1EB8, 'nvidia': True}],
           extra_config={'hypervisor.cpuid.v0': 'FALSE', 'pciPassthru.use64bitMMIO': 'TRUE', 'pciPassthru.64bitMMIOSizeGB': '32'})
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4'}]), v, [gpu('0000:3b:00.0', attached=['vm1'])])
    assert host_plan == {'enable': [], 'reboot': False, 'ids': ['0000:3b:00.0']}
    assert vm_plan['changes'] == [] and vm_plan['mmio_size_gb'] == 32 and vm_plan['gpu_memory_gb'] == 16


def test_plan_reboot_needed_but_not_allowed():
    with pytest.raises(eg.GpuError, match='need a host reboot; set host_reboot=true'):
        plan(params(gpus=[{'model': 'T4'}]), vm(), [gpu('0000:3b:00.0', enabled=False, active=False)])
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4'}], host_reboot=True), vm(),
                                       [gpu('0000:3b:00.0', enabled=False, active=False)])
    assert host_plan['enable'] == ['0000:3b:00.0'] and host_plan['reboot'] is True
    assert 'add GPU directpath:0000:3b:00.0' in vm_plan['changes']


def test_plan_enable_not_allowed():
    with pytest.raises(eg.GpuError, match='not passthrough-enabled; set enable_passthrough=true'):
        plan(params(gpus=[{'model': 'T4'}], enable_passthrough=False, host_reboot=True), vm(),
             [gpu('0000:3b:00.0', enabled=False, active=False)])


def test_plan_powered_on_vm():
    on = vm(power_state='poweredOn')
    with pytest.raises(eg.GpuError, match='powered on and these changes need it powered off: add GPU'):
        plan(params(gpus=[{'model': 'T4'}]), on, [gpu('0000:3b:00.0')])
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4'}], power_cycle=True), on, [gpu('0000:3b:00.0')])
    assert vm_plan['power_cycle'] is True
    # the rule the simulator does not enforce: no power-on without a full reservation
    with pytest.raises(eg.GpuError, match='not fully reserved'):
        plan(params(gpus=[{'model': 'T4'}], power_cycle=True, reserve_memory=False), dict(on, reservation_locked=False),
             [gpu('0000:3b:00.0')])


def test_plan_memory_rule_and_dynamic_api():
    with pytest.raises(eg.GpuError, match='at least 24576 MB'):
        plan(params(gpus=[{'model': 'T4'}]), vm(memory_mb=16384), [gpu('0000:3b:00.0')])
    runner, (dummy, vm_plan) = plan(params(gpus=[{'model': 'T4'}], memory_check='warn'), vm(memory_mb=16384),
                                    [gpu('0000:3b:00.0')])
    assert any('24576' in w for w in runner.warnings)
    p = params(gpus=[{'model': 'T4'}], passthrough_type='dynamic')
    runner = mod.Runner(FakeModule(p), mod.check_params(p))
    runner.si = FakeSi()
    runner.si.content.about.apiVersion = '6.7.3'
    try:
        with pytest.raises(eg.GpuError, match='dynamic needs vSphere 7.0'):
            runner.plan(vm(), {'name': 'esx1', 'gpus': [gpu('0000:3b:00.0')]})
    finally:
        FakeSi.content.about.apiVersion = '7.0.3.0'


def test_ESX_03_skip_vm_defers_the_reboot_decision_to_after_the_change():
    """pending_reboot=skip_vm: the plan only enables; whether the host must reboot is read after the change."""
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4'}], pending_reboot='skip_vm'), vm(),
                                       [gpu('0000:3b:00.0', enabled=False, active=False)])
    assert host_plan['enable'] == ['0000:3b:00.0'] and host_plan['defer_vm'] is True and vm_plan is None
    # nothing pending: nothing deferred
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4'}], pending_reboot='skip_vm'), vm(),
                                       [gpu('0000:3b:00.0')])
    assert 'defer_vm' not in host_plan and vm_plan is not None


def test_ESX_12_skip_vm_writes_nothing_to_the_vm_and_returns_the_chosen_gpus(monkeypatch):
    """pending_reboot=skip_vm with a reboot pending: the host part only - no VM reconfigure (the advanced setting
    gpuops.passthrough.reserved is not written); the chosen GPUs come back for the call after the reboot."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_passthrough as ep
    pending = [gpu('0000:3b:00.0', enabled=False, active=False), gpu('0000:3c:00.0', enabled=False, active=False)]
    after = [dict(g, enabled=True) for g in pending]
    calls = []
    monkeypatch.setattr(ep.ev, 'api_major', lambda si: 7)
    monkeypatch.setattr(ep.ev, 'enable_passthrough', lambda host, ids, apply_now: calls.append(('enable', ids)))
    monkeypatch.setattr(ep.ev, 'read_host', lambda si, obj: {'name': 'esx1', 'gpus': after, '_obj': obj})
    monkeypatch.setattr(ep.ev, 'set_reservation', lambda *a, **k: calls.append(('reserve',)), raising=False)
    monkeypatch.setattr(ep.ev, 'read_vm', lambda si, obj: calls.append(('read_vm',)))
    p = params(gpus=[{'model': 'T4'}], pending_reboot='skip_vm')
    runner = mod.Runner(FakeModule(p), mod.check_params(p))
    runner.si = FakeSi()
    the_vm = vm(power_state='poweredOn', _obj=object())
    monkeypatch.setattr(runner, 'find', lambda: (the_vm, {'name': 'esx1', 'gpus': pending, '_obj': 'host'}))
    res = runner._run()
    assert res['vm_skipped'] is True and res['host']['reboot_required'] is True
    assert res['tasks'] == ['UpdatePassthruConfig'] and res['reconfigure_count'] == 0
    assert ('reserve',) not in calls
    assert res['chosen_gpus'] == ['0000:3b:00.0']
    assert not [c for c in res['changes'] if 'reserve' in c]


def test_ESX_12_chosen_gpus_of_the_first_call_are_taken_again():
    """The call after the reboot takes the GPUs the first call chose (chosen_gpus), not other free ones."""
    host_gpus = [gpu('0000:3b:00.0'), gpu('0000:3c:00.0'), gpu('0000:3d:00.0')]
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4', 'count': 2}], chosen_gpus=['3d:00.0', '3c:00.0'], memory_check='ignore'),
                                       vm(), host_gpus)
    assert host_plan['ids'] == ['0000:3c:00.0', '0000:3d:00.0']
    assert sorted(w['id'] for w in vm_plan['add']) == ['0000:3c:00.0', '0000:3d:00.0']
    # a GPU another VM holds by now is not taken: the next free one is
    host_gpus[2]['attached_to'] = ['vm2']
    dummy, (host_plan, vm_plan) = plan(params(gpus=[{'model': 'T4', 'count': 2}], chosen_gpus=['3d:00.0', '3c:00.0'], memory_check='ignore'),
                                       vm(), host_gpus)
    assert host_plan['ids'] == ['0000:3c:00.0', '0000:3b:00.0']
    with pytest.raises(eg.GpuError, match='chosen_gpus'):
        mod.check_params(params(chosen_gpus=['not-a-pci-id']))


def _consumer(pci):
    return dict(gpu(pci), device_id=0x2204, device_name='GA102 [GeForce RTX 3090]')


@pytest.mark.parametrize('requested, host, model, hidden', [
    (None, [gpu('0000:3b:00.0')], 'T4', False),              # data-centre: never needed it (was: always set)
    (None, [_consumer('0000:3b:00.0')], 'RTX 3090', True),   # consumer: the pre-R465 driver refused without it
    (True, [gpu('0000:3b:00.0')], 'T4', True),               # as given
    (False, [_consumer('0000:3b:00.0')], 'RTX 3090', False),
])
def test_ESX_14_hide_hypervisor_defaults_by_gpu_class(requested, host, model, hidden):
    p = params(gpus=[{'model': model, 'memory_gb': 24}], host_reboot=True, memory_check='ignore')
    if requested is not None:
        p['hide_hypervisor'] = requested
    assert mod.argument_spec()['hide_hypervisor'].get('default') is None
    dummy, (host_plan, vm_plan) = plan(p, vm(), host)
    assert vm_plan['hide_hypervisor']['effective'] is hidden
    assert ('hypervisor.cpuid.v0' in vm_plan['extra_config']) is hidden
    if requested is None:
        assert vm_plan['hide_hypervisor']['reason'].startswith('auto: ' + ('consumer' if hidden else 'data-centre'))
    # a value the site set stays: not hiding never removes it
    v = vm(extra_config={'hypervisor.cpuid.v0': 'FALSE'})
    dummy, (host_plan, vm_plan) = plan(p, v, host)
    assert 'hypervisor.cpuid.v0' not in vm_plan['extra_config']


def test_ESX_14_consumer_class_names():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
    consumer = ['NVIDIA GeForce RTX 4090', 'AD102 [GeForce RTX 4090]', 'NVIDIA TITAN RTX', 'RTX 3060 Ti']
    other = ['TU104GL [Tesla T4]', 'GA100 [A100 PCIe 40GB]', 'AD104GL [RTX 4000 SFF Ada Generation]',
             'NVIDIA RTX 5000 Ada Generation', 'GA102GL [RTX A6000]', 'NVIDIA RTX PRO 6000 Blackwell', 'Quadro RTX 8000',
             'NVIDIA H100 80GB HBM3', 'AD104GL [L4]']
    assert [n for n in consumer if not gpu_catalog.is_consumer_gpu(n)] == []
    assert [n for n in other if gpu_catalog.is_consumer_gpu(n)] == []


def _reboot_runner(monkeypatch, reboot_error=None):
    """A run that adds a T4 to a powered-on VM on a host that must reboot for it; returns (runner, calls)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_passthrough as ep
    calls = []
    pending = [gpu('0000:3b:00.0', enabled=False, active=False)]

    def reboot_host(si, host, timeout, tasks, reconnect=None):
        calls.append('reboot')
        if reboot_error:
            raise ep.ev.VSphereError(reboot_error)
        tasks.extend(['EnterMaintenanceMode_Task', 'RebootHost_Task', 'ExitMaintenanceMode_Task'])
        return si, host['_obj']
    monkeypatch.setattr(ep.ev, 'api_major', lambda si: 7)
    monkeypatch.setattr(ep.ev, 'enable_passthrough', lambda host, ids, apply_now: calls.append('enable'))
    monkeypatch.setattr(ep.ev, 'read_host', lambda si, obj: {'name': 'esx1', '_obj': obj, 'gpus': [
        dict(pending[0], enabled=True, active='reboot' in calls and not reboot_error)]})
    monkeypatch.setattr(ep.ev, 'reboot_host', reboot_host)
    monkeypatch.setattr(ep.ev, 'power_off', lambda vm, t, tasks: (calls.append('off'), tasks.append('PowerOffVM_Task')))
    monkeypatch.setattr(ep.ev, 'power_on', lambda vm, t, tasks: (calls.append('on'), tasks.append('PowerOnVM_Task')))
    monkeypatch.setattr(ep.Runner, 'apply_vm', lambda self, vm, host, plan, power_on_after=False:
                        calls.append(('apply', vm['power_state'], power_on_after)) or power_on_after)
    monkeypatch.setattr(ep.ev, 'read_vm', lambda si, obj: vm(power_state='poweredOn'))
    p = params(gpus=[{'model': 'T4'}], host_reboot=True, power_cycle=True, memory_check='ignore')
    runner = mod.Runner(FakeModule(p), mod.check_params(p))
    runner.si = FakeSi()
    the_vm = vm(power_state='poweredOn', _obj=object())
    monkeypatch.setattr(runner, 'find', lambda: (the_vm, {'name': 'esx1', 'gpus': pending, '_obj': 'host'}))
    return runner, calls


def test_ESX_13_a_running_target_vm_goes_off_before_maintenance_mode(monkeypatch):
    """The VM that gets the GPU runs on the host that reboots for it: it would keep the host out of maintenance mode
    (it hung until host_reboot_timeout before); it is powered off first and powered on after the reconfigure."""
    runner, calls = _reboot_runner(monkeypatch)
    res = runner._run()
    assert calls == ['enable', 'off', 'reboot', ('apply', 'poweredOff', True)]
    assert res['host']['rebooted'] is True and res['power_cycled'] is True
    assert res['changes'][:3] == ['enable passthrough for 0000:3b:00.0 on esx1', 'power VM vm1 off for the host reboot',
                                  'reboot host esx1 to activate passthrough']


def test_ESX_13_a_failed_maintenance_mode_powers_the_vm_on_again(monkeypatch):
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_passthrough as ep
    runner, calls = _reboot_runner(monkeypatch, reboot_error='host esx1 did not enter maintenance mode within ...')
    with pytest.raises(ep.ev.VSphereError, match='VM vm1 was powered on again'):
        runner._run()
    assert calls == ['enable', 'off', 'reboot', 'on']
