# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine of the esxi_gpu_passthrough module: input checks that need no vSphere, and the Runner that finds the
host and VM, plans the changes (esxi_gpu) and applies them through vSphere (esxi_vsphere)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_gpu as eg
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._esxi import esxi_vsphere as ev


def check_params(p: dict) -> list[dict[str, Any]]:
    """Input errors that need no vSphere (raised before connecting)."""
    if p['scope'] in ('all', 'vm') and not p['name']:
        raise eg.GpuError('name: required with scope=%s (the VM to give GPUs to)' % p['scope'])
    if p['mmio_size_gb'] is not None and p['mmio_size_gb'] < 0:
        raise eg.GpuError('mmio_size_gb: must be >= 0 (0 leaves the MMIO settings alone), got %d' % p['mmio_size_gb'])
    if p['memory_mb'] is not None and (p['memory_mb'] < 4 or p['memory_mb'] % 4):
        raise eg.GpuError('memory_mb: must be a positive multiple of 4, got %d' % p['memory_mb'])
    if p['memory_ratio'] <= 0:
        raise eg.GpuError('memory_ratio: must be > 0, got %s' % p['memory_ratio'])
    for opt in ('host_reboot_timeout', 'power_timeout'):
        if p[opt] < 1:
            raise eg.GpuError('%s: must be >= 1 second, got %d' % (opt, p[opt]))
    p['chosen_gpus'] = [eg.normalize_pci_id(i, 'chosen_gpus') for i in (p.get('chosen_gpus') or [])]
    # The suboptions come back with every key present; drop the unset ones for normalize_requests.
    gpus = [dict((k, v) for k, v in g.items() if v is not None) for g in p['gpus']]
    return eg.normalize_requests(gpus, p['passthrough_type'], bool(p['name']))


def public_gpu(g: dict) -> dict[str, Any]:
    return dict(id=g['id'], device_id=eg.hex_id(g['device_id']), device_name=g['device_name'], capable=g['capable'],
                enabled=g['enabled'], active=g['active'], attached_to=g['attached_to'], reserved_by=g.get('reserved_by') or [])


class Runner(object):
    def __init__(self, module: Any, requests: list[dict]) -> None:
        self.module = module
        self.p = module.params
        self.requests = requests
        self.si: Any = None  # the pyVmomi ServiceInstance once connected
        self.tasks: list = []
        self.changes: list[str] = []
        self.warnings: list[str] = []
        self.reconfigure_count = 0
        self.result: dict[str, Any] = {}

    # -------------------------------------------------------------- inventory
    def find(self) -> tuple[Any, dict]:  # (the VM (None with scope host), the host)
        p = self.p
        vm = None
        if p['name']:
            found = ev.find_by_name(self.si, ev.vim.VirtualMachine, p['name'], p['datacenter'])
            if not found:
                raise eg.GpuError('name: VM %r not found%s' % (p['name'], ' in datacenter %s' % p['datacenter'] if p['datacenter'] else ''))
            if len(found) > 1:
                raise eg.GpuError('name: %d VMs are called %r; set datacenter or rename them' % (len(found), p['name']))
            vm = ev.read_vm(self.si, found[0])
            host_obj = vm['_host']
            if host_obj is None:
                raise eg.GpuError('VM %r has no host (is it orphaned or inaccessible?)' % p['name'])
            host = ev.read_host(self.si, host_obj)
            if p['esxi_hostname'] and p['esxi_hostname'] != host['name']:
                raise eg.GpuError('esxi_hostname: VM %r runs on host %s, not %s (the module does not migrate VMs)'
                                  % (p['name'], host['name'], p['esxi_hostname']))
        else:
            hosts = ev.find_by_name(self.si, ev.vim.HostSystem, p['esxi_hostname'], p['datacenter']) if p['esxi_hostname'] \
                else ev.list_view(self.si, self.si.content.rootFolder, ev.vim.HostSystem)
            if not hosts:
                raise eg.GpuError('esxi_hostname: host %r not found' % p['esxi_hostname'])
            if len(hosts) > 1:
                raise eg.GpuError('esxi_hostname: required - this endpoint manages %d hosts' % len(hosts)
                                  if not p['esxi_hostname'] else 'esxi_hostname: %d hosts are called %r' % (len(hosts), p['esxi_hostname']))
            host = ev.read_host(self.si, hosts[0])
        return vm, host

    # -------------------------------------------------------------- planning (no changes)
    def plan(self, vm: dict | None, host: dict) -> tuple[dict, dict | None]:
        p = self.p
        dynamic = p['passthrough_type'] == 'dynamic' and vm is not None
        if dynamic and ev.api_major(self.si) < 7:
            raise eg.GpuError('passthrough_type: dynamic needs vSphere 7.0 or later; this endpoint has API %s'
                              % self.si.content.about.apiVersion)
        vm_name = vm['name'] if vm else None
        wanted, memories, host_gpus = [], [], []
        if dynamic:
            targets = eg.dynamic_targets(self.requests, host['gpus'], host['name'])
            # the host part enables `count` GPUs per request: already active/enabled ones first
            used = set()
            for req in self.requests:
                pool = [g for g in host['gpus'] if g['capable'] and g['id'] not in used and
                        not [v for v in g['attached_to'] if v != vm_name] and
                        any(g in t['gpus'] for t in targets if t['request'] is req)]
                pool.sort(key=lambda g: (not g['active'], not g['enabled'], g['id']))
                for g in pool[:req['count']]:
                    used.add(g['id'])
                    host_gpus.append(g)
            for t in targets:
                if not t['memory_gb']:
                    raise eg.GpuError('%s: the memory of device(s) %s is unknown to the collection; set %s.memory_gb'
                                      % (t['request']['option'], ', '.join(eg.hex_id(i) for i in t['device_ids']),
                                         t['request']['option']))
                wanted.append({'type': 'dynamic', 'device_ids': t['device_ids'], 'label': t['label']})
                memories.append(t['memory_gb'])
        else:
            gpus = host['gpus']
            if vm_name and p.get('chosen_gpus'):
                # the GPUs an earlier call chose for this VM (its RV chosen_gpus, carried by the caller across the
                # host reboot) rank like this VM's own: taken again unless another VM holds them by now
                gpus = [dict(g, reserved_by=sorted(set(list(g.get('reserved_by') or []) + [vm_name])))
                        if g['id'] in p['chosen_gpus'] else g for g in gpus]
            # the call allowed to reboot takes the GPUs an earlier skip_vm call enabled (enabled, not active, held by
            # no VM) before enabling others (ESX-15)
            chosen = eg.select_gpus(self.requests, gpus, host['name'], vm_name, prefer_pending=bool(p['host_reboot']))
            host_gpus = [g for dummy, g in chosen]
            if vm is not None:
                memories = eg.memory_of(chosen)
                wanted = [{'type': 'directpath', 'id': g['id'], 'device_id': g['device_id'], 'device_name': g['device_name']}
                          for dummy, g in chosen]

        # host part
        to_enable = [g for g in host_gpus if not g['enabled']]
        if to_enable and not p['enable_passthrough']:
            raise eg.GpuError('GPU(s) %s on host %s are not passthrough-enabled; set enable_passthrough=true or enable them '
                              'in the vSphere Client' % (', '.join(g['id'] for g in to_enable), host['name']))
        inactive = [g for g in host_gpus if not g['active']]
        host_plan = {'enable': [g['id'] for g in to_enable], 'reboot': bool(inactive), 'ids': [g['id'] for g in host_gpus]}
        if inactive and vm is not None and p['scope'] in ('all', 'vm'):
            if p['scope'] == 'vm':
                raise eg.GpuError('GPU(s) %s on host %s are not passthrough-active (%s); run with scope=all or host first'
                                  % (', '.join(g['id'] for g in inactive), host['name'],
                                     ', '.join('%s %s' % (g['id'], 'enabled, host reboot pending' if g['enabled'] else 'not enabled')
                                               for g in inactive)))
            if not p['host_reboot'] and p['pending_reboot'] == 'skip_vm':
                # whether the host must reboot is decided after enabling, from what it reports (vSphere 7+ activates
                # passthrough at once where the device allows it); _run plans the VM part again then
                host_plan['defer_vm'] = True
                return host_plan, None
            if not p['host_reboot']:
                raise eg.GpuError('GPU(s) %s on host %s are not passthrough-active yet and need a host reboot; set host_reboot=true, '
                                  'or run with scope=host, reboot the host and run again'
                                  % (', '.join(g['id'] for g in inactive), host['name']))

        vm_plan = None
        if vm is not None and p['scope'] in ('all', 'vm'):
            mmio = p['mmio_size_gb']
            if mmio is None:
                mmio = eg.mmio_size_gb(memories)
            if not wanted:
                mmio = 0
            names = [g.get('device_name') for g in host_gpus]
            if dynamic:
                names += [g.get('device_name') for t in targets for g in t['gpus']]
            hide, hide_reason = eg.hide_hypervisor_decision(p['hide_hypervisor'], names)
            vm_plan = eg.plan_vm(vm, wanted, dict(
                hide_hypervisor=hide, mmio_size_gb=mmio, firmware=p['firmware'], secure_boot=p['secure_boot'],
                reserve_memory=p['reserve_memory'], memory_mb=p['memory_mb']))
            vm_plan['mmio_size_gb'] = mmio
            vm_plan['hide_hypervisor'] = {'effective': hide, 'reason': hide_reason}
            vm_plan['gpu_memory_gb'] = sum(memories)
            warn = eg.check_memory(vm_plan['after_vm']['memory_mb'], memories, p['memory_ratio'], p['memory_check'], vm['name'])
            if warn:
                self.warnings.append(warn)
            warn = eg.check_bios_to_efi(vm, vm_plan, p['bios_to_efi'])
            if warn:
                self.warnings.append(warn)
            state = vm['power_state']
            vm_plan['power_cycle'] = False
            if state == 'suspended' and vm_plan['needs_reconfigure']:
                raise eg.GpuError('VM %s is suspended; resume and shut it down, or power it off, first' % vm['name'])
            if state == 'poweredOn' and vm_plan['offline_changes']:
                if not p['power_cycle']:
                    raise eg.GpuError('VM %s is powered on and these changes need it powered off: %s; set power_cycle=true '
                                      'to let the module power it off and on again' % (vm['name'], '; '.join(vm_plan['offline_changes'])))
                vm_plan['power_cycle'] = True
            # vSphere refuses to power on a VM holding a passthrough device without a full memory reservation (the lab
            # simulator does not): check it here, before anything changes.
            after = vm_plan['after_vm']
            if state == 'poweredOn' and after['gpus'] and not eg.full_reservation(after) and \
                    (vm_plan['power_cycle'] or vm_plan['remove'] or vm_plan['add']):
                raise eg.GpuError('VM %s holds passthrough GPU(s) but its memory is not fully reserved; vSphere will not power it on. '
                                  'Set reserve_memory=true' % vm['name'])
        return host_plan, vm_plan

    # -------------------------------------------------------------- run
    def run(self) -> dict[str, Any]:
        p = self.p
        self.si = ev.connect(p)
        try:
            return self._run()
        finally:
            ev.disconnect(self.si)

    def _run(self) -> dict[str, Any]:
        p = self.p
        check = self.module.check_mode
        vm, host = self.find()
        host_plan, vm_plan = self.plan(vm, host)
        before_host = dict((g['id'], {'enabled': g['enabled'], 'active': g['active']}) for g in host['gpus']
                           if g['id'] in host_plan['ids'])
        after_host = dict((k, dict(v)) for k, v in before_host.items())
        rebooted = False

        if host_plan['enable']:
            self.changes.append('enable passthrough for %s on %s' % (', '.join(host_plan['enable']), host['name']))
            for i in host_plan['enable']:
                after_host[i]['enabled'] = True
            if not check:
                ev.enable_passthrough(host, host_plan['enable'], apply_now=ev.api_major(self.si) >= 7)
                self.tasks.append('UpdatePassthruConfig')
                # decide on a reboot from what the host reports after the change, not before it
                host = ev.read_host(self.si, host['_obj'])
                for g in host['gpus']:
                    if g['id'] in after_host:
                        after_host[g['id']] = {'enabled': g['enabled'], 'active': g['active']}
        if check:
            reboot_required = host_plan['reboot']  # predicted: a GPU that is not active yet waits for a reboot
        else:
            reboot_required = any(g['enabled'] and not g['active'] for g in host['gpus'] if g['id'] in host_plan['ids'])
        off_for_reboot = False
        if reboot_required and p['host_reboot']:
            if vm is not None and vm['power_state'] == 'poweredOn' and vm_plan is not None and vm_plan['power_cycle']:
                # the VM runs on the host that reboots: it would keep the host out of maintenance mode (ESX-13);
                # it is power-cycled for its new GPUs anyway, so it goes off before and comes back after the reboot
                self.changes.append('power VM %s off for the host reboot' % vm['name'])
                if not check:
                    ev.power_off(vm, p['power_timeout'], self.tasks)
                    vm['power_state'] = 'poweredOff'
                    off_for_reboot = True
            self.changes.append('reboot host %s to activate passthrough' % host['name'])
            if not check:
                old_si = self.si
                try:
                    self.si, host_obj = ev.reboot_host(self.si, host, p['host_reboot_timeout'], self.tasks,
                                                       reconnect=lambda: ev.connect(p))
                except ev.VSphereError as exc:
                    if off_for_reboot and 'RebootHost_Task' not in self.tasks:
                        # maintenance mode failed before the reboot: the VM goes back on, as it was
                        ev.power_on(vm, p['power_timeout'], self.tasks)
                        raise ev.VSphereError('%s (VM %s was powered on again)' % (exc, vm['name']))
                    raise
                if self.si is not old_si:
                    ev.disconnect(old_si)
                    host['_obj'] = host_obj
                    if vm is not None:
                        vm['_obj'] = ev.vim.VirtualMachine(vm['_obj']._moId, self.si._stub)
            rebooted = True
            reboot_required = False
            for v in after_host.values():
                v['active'] = v['enabled']
        if not check and rebooted:
            host = ev.read_host(self.si, host['_obj'])
            reboot_required = any(g['enabled'] != g['active'] for g in host['gpus'] if g['id'] in before_host)

        if host_plan.get('defer_vm'):
            if not reboot_required:
                # every GPU is active without a reboot: the VM part runs now, with the GPUs just enabled
                vm = ev.read_vm(self.si, vm['_obj']) if not check else vm
                dummy, vm_plan = self.plan(vm, host)
            # else the VM part waits for the host reboot. Nothing is written to the VM: the chosen GPUs come back as
            # RV chosen_gpus, and the caller passes them to the call after the reboot (O(chosen_gpus)).

        power_cycled = False
        if vm_plan is not None and vm_plan['needs_reconfigure']:
            self.changes.extend(vm_plan['changes'])
            if not check:
                power_cycled = self.apply_vm(vm, host, vm_plan, power_on_after=off_for_reboot)
            elif vm_plan['power_cycle']:
                self.changes.append('power VM %s off and on again' % vm['name'])
                power_cycled = True
        if off_for_reboot and not power_cycled:
            ev.power_on(vm, p['power_timeout'], self.tasks)   # off for the reboot, nothing to reconfigure after it
            power_cycled = True

        if not check:
            host = ev.read_host(self.si, host['_obj']) if vm_plan is not None and vm_plan['needs_reconfigure'] else host
            after_host_pub = [public_gpu(g) for g in host['gpus']]
        else:
            after_host_pub = []
            for g in host['gpus']:
                g2 = dict(g, **after_host.get(g['id'], {}))
                if vm is not None and vm_plan is not None:
                    names = [n for n in g['attached_to'] if n != vm['name']]
                    if any(w['type'] == 'directpath' and w['id'] == g['id'] for w in vm_plan['after_vm']['gpus']):
                        names.append(vm['name'])
                    g2['attached_to'] = sorted(names)
                after_host_pub.append(public_gpu(g2))

        result = dict(
            changed=bool(self.changes),
            changes=self.changes,
            tasks=self.tasks,
            reconfigure_count=self.reconfigure_count,
            power_cycled=power_cycled,
            vm_skipped=vm is not None and self.p['scope'] in ('all', 'vm') and vm_plan is None,
            chosen_gpus=list(host_plan['ids']),
            host=dict(name=host['name'], gpus=after_host_pub, enabled=host_plan['enable'],
                      reboot_required=reboot_required, rebooted=rebooted),
        )
        diff_before = {'host': {'name': host['name'], 'passthrough': before_host}}
        diff_after = {'host': {'name': host['name'], 'passthrough': after_host}}
        if vm_plan is not None:
            if check:
                vm_after = dict(vm_plan['after'], name=vm['name'])
            else:
                vm_after = dict(eg.vm_state(ev.read_vm(self.si, vm['_obj'])), name=vm['name']) \
                    if vm_plan['needs_reconfigure'] else dict(vm_plan['after'], name=vm['name'])
            result['vm'] = vm_after
            result['mmio_size_gb'] = vm_plan['mmio_size_gb']
            result['hide_hypervisor'] = vm_plan['hide_hypervisor']
            result['gpu_memory_gb'] = vm_plan['gpu_memory_gb']
            diff_before['vm'] = dict(vm_plan['before'], name=vm['name'])
            diff_after['vm'] = dict(vm_after)
            if not check and vm_plan['needs_reconfigure']:
                mismatch = [k for k in ('gpus', 'firmware', 'secure_boot', 'memory_mb', 'memory_reservation_locked_to_max',
                                        'extra_config') if vm_after[k] != vm_plan['after'][k]]
                if mismatch:
                    self.warnings.append('read-back of VM %s differs from the plan in: %s' % (vm['name'], ', '.join(mismatch)))
        if self.module._diff:
            result['diff'] = {'before': diff_before, 'after': diff_after}
        return result

    def apply_vm(self, vm: dict, host: dict, plan: dict, power_on_after: bool = False) -> bool:
        """Reconfigure the VM; power_on_after: it was powered off for the host reboot and goes on again."""
        p = self.p
        system_ids = None
        if any(w['type'] == 'directpath' for w in plan['add']):
            system_ids = ev.config_target(host)
        spec = ev.build_config_spec(plan, vm, host, system_ids, p['secure_boot'])
        power_cycled = False
        if vm['power_state'] == 'poweredOn':
            if plan['offline_changes']:
                if not plan['power_cycle']:  # guarded in plan(); never send device changes to a running VM
                    raise eg.GpuError('VM %s is powered on; power_cycle=false' % vm['name'])
                ev.power_off(vm, p['power_timeout'], self.tasks)
                power_cycled = True
        ev.wait_task(vm['_obj'].ReconfigVM_Task(spec=spec), p['power_timeout'])
        self.tasks.append('ReconfigVM_Task')
        self.reconfigure_count += 1
        power_cycled = power_cycled or power_on_after
        if power_cycled:
            after = ev.read_vm(self.si, vm['_obj'])
            if after['gpus'] and not eg.full_reservation(after):
                raise eg.GpuError('VM %s holds passthrough GPU(s) without a full memory reservation; not powering it on '
                                  '(vSphere would refuse)' % vm['name'])
            ev.power_on(vm, p['power_timeout'], self.tasks)
            self.changes.append('power VM %s off and on again' % vm['name'])
        return power_cycled
