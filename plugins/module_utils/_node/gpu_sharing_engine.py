# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_sharing module's logic: validate the whole request, plan per GPU, then apply.

Works on a backend object (see gpu_sharing_nvml.NvmlBackend) so it can be unit tested with a stand-in.
Everything is validated before the first change; a refusal raises SharingError and changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_config as config
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_mps as mps_util
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_plan as planner
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError


class ApplyError(Exception):
    """A change failed half way; ``done`` lists what was applied before."""

    def __init__(self, msg: str, done: list[str]) -> None:
        super(ApplyError, self).__init__(msg)
        self.done = done


def label(gpu: Mapping[str, Any]) -> str:
    return 'GPU %s (%s)' % (gpu['index'], gpu.get('name') or 'unknown')


def public_state(gpu: Mapping[str, Any]) -> dict[str, Any]:
    """What the module returns about a GPU (and what diffs compare)."""
    cc = gpu.get('compute_capability')
    return {
        'index': gpu['index'],
        'name': gpu.get('name'),
        'uuid': gpu.get('uuid'),
        'compute_capability': '%d.%d' % tuple(cc) if cc else None,
        'persistence_mode': gpu.get('persistence_mode'),
        'compute_mode': gpu.get('compute_mode'),
        'mig_capable': gpu.get('mig_capable'),
        'mig_current': gpu.get('mig_current'),
        'mig_pending': gpu.get('mig_pending'),
        'mig_devices': planner.geometry_of(gpu.get('mig_instances') or []),
        'mig_instances': planner.describe_instances(gpu.get('mig_instances') or []),
    }


def _mig_capable_list(gpus: Iterable[Mapping[str, Any]]) -> str:
    caps = ['%s (%s)' % (g['index'], g.get('name')) for g in gpus if g.get('mig_capable')]
    return ', '.join(caps) if caps else 'none'


def desired_mig(params: Mapping[str, Any], all_gpus: Sequence[Mapping[str, Any]], selected: Iterable[int]) -> dict[int, dict[str, Any]]:
    """GPU index -> {'enabled': bool, 'devices': {profile: count} or None (leave the geometry)}."""
    out: dict[int, dict[str, Any]] = {}
    if params.get('mig_config') is not None:
        entries = config.parse_mig_config(params['mig_config'], params.get('mig_config_name'))
        assigned = config.assign_entries(entries, all_gpus)
        for idx in selected:
            if idx in assigned:
                out[idx] = {'enabled': assigned[idx]['mig_enabled'], 'devices': assigned[idx]['mig_devices'],
                            'where': assigned[idx]['where']}
    elif params.get('mig_mode') is not None:
        for idx in selected:
            out[idx] = {'enabled': params['mig_mode'] == 'enabled', 'devices': None, 'where': 'mig_mode'}
    return out


def validate(params: Mapping[str, Any], all_gpus: Sequence[Mapping[str, Any]]) -> tuple[list[int], dict[int, dict[str, Any]], dict[str, Any] | None, list[str]]:
    """Check the whole request against the node. Returns (selected indexes, mig wishes, mps settings, warnings)."""
    warnings: list[str] = []
    selected = config.select_gpus(params.get('gpus'), all_gpus)
    by_index = dict((g['index'], g) for g in all_gpus)
    mig = desired_mig(params, all_gpus, selected)
    for idx in sorted(mig):
        gpu, want = by_index[idx], mig[idx]
        if not gpu.get('mig_capable'):
            if want['enabled']:
                raise SharingError("%s: MIG mode 'enabled' (%s) is not possible, this GPU does not support MIG; "
                                   "MIG-capable GPUs on this node: %s" % (label(gpu), want['where'], _mig_capable_list(all_gpus)))
            continue
        if want['devices'] is None:
            continue
        if gpu['mig_profiles']:
            planner.validate_geometry(gpu, want['devices'], gpu['mig_profiles'])
        elif gpu.get('mig_current'):
            raise SharingError('%s: MIG mode is enabled but NVML lists no MIG profiles for this GPU, so the geometry %s '
                               'cannot be checked or applied' % (label(gpu), planner.format_geometry(want['devices'])))
        elif want['devices']:
            warnings.append('%s: no MIG profile table is known while MIG is disabled; the profiles %s are checked '
                            'once MIG mode is active' % (label(gpu), ', '.join(sorted(want['devices']))))
    mps: dict[str, Any] | None = None
    if params.get('mps') is not None:
        mps = dict(mps_util.MPS_DEFAULTS)
        mps.update(dict((k, v) for k, v in params['mps'].items() if v is not None))
        sel = [by_index[i] for i in selected]
        if mps['state'] == 'present':
            mps_util.check_compute_capability(sel)
            limits = mps_util.validate(mps, len(sel))
            visible = None if len(sel) == len(all_gpus) else [g['uuid'] for g in sel]
            mps['content'] = mps_util.render_unit(mps, limits, visible)
        else:
            mps['content'] = None
    return selected, mig, mps, warnings


def _pending_warning(gpu: Mapping[str, Any]) -> str:
    return ('%s: MIG mode change is pending (current %s, pending %s); it takes effect after a GPU reset '
            '(nvidia-smi -r -i %s with no processes on the GPU) or a reboot, which this module does not do. '
            'The MIG geometry is applied when this task runs again after that.'
            % (label(gpu), 'enabled' if gpu.get('mig_current') else 'disabled',
               'enabled' if gpu.get('mig_pending') else 'disabled', gpu['index']))


def plan_gpu(gpu: Mapping[str, Any], params: Mapping[str, Any], want_mig: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Operations for one GPU, in execution order. Each op: dict(kind, action text, ...)."""
    ops: list[dict[str, Any]] = []
    idx = gpu['index']
    pm = params.get('persistence_mode')
    if pm is not None and gpu.get('persistence_mode') != pm:
        ops.append({'kind': 'persistence', 'value': pm,
                    'action': 'GPU %s: set persistence mode %s' % (idx, 'enabled' if pm else 'disabled')})
    cm = params.get('compute_mode')
    if cm is not None and gpu.get('compute_mode') != cm:
        ops.append({'kind': 'compute_mode', 'value': cm,
                    'action': 'GPU %s: set compute mode %s (was %s)' % (idx, cm, gpu.get('compute_mode'))})
    if not want_mig or not gpu.get('mig_capable'):
        return ops
    enabled = want_mig['enabled']
    if enabled:
        if not gpu['mig_pending']:
            ops.append({'kind': 'mig_mode', 'value': True, 'action': 'GPU %s: enable MIG mode' % idx})
        if want_mig['devices'] is not None:
            if gpu['mig_current']:
                ops.extend(_geometry_ops(gpu, want_mig['devices']))
            else:
                ops.append({'kind': 'geometry_deferred', 'value': want_mig['devices'], 'action': None})
    else:
        if gpu['mig_pending']:
            if gpu['mig_current'] and gpu.get('mig_instances'):
                ops.extend(_geometry_ops(gpu, {}))
            ops.append({'kind': 'mig_mode', 'value': False, 'action': 'GPU %s: disable MIG mode' % idx})
    return ops


def _geometry_ops(gpu: Mapping[str, Any], wanted: Mapping[str, int]) -> list[dict[str, Any]]:
    plan = planner.plan_geometry(gpu, gpu.get('mig_instances') or [], wanted, gpu['mig_profiles'])
    if not plan['changed']:
        return []
    return [{'kind': 'geometry', 'value': wanted, 'plan': plan, 'action': None}]


def op_actions(op: Mapping[str, Any]) -> list[str]:
    if op['kind'] == 'geometry':
        return list(op['plan']['actions'])
    if op.get('action'):
        return [op['action']]
    return []


def predict(gpu: Mapping[str, Any], ops: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The GPU state after ``ops`` (used for check mode and for the diff's 'after' in check mode)."""
    after = copy.deepcopy(public_state(gpu))
    for op in ops:
        if op['kind'] == 'persistence':
            after['persistence_mode'] = op['value']
        elif op['kind'] == 'compute_mode':
            after['compute_mode'] = op['value']
        elif op['kind'] == 'mig_mode':
            after['mig_pending'] = op['value']
            if not op['value']:
                after['mig_devices'] = {}
                after['mig_instances'] = []
        elif op['kind'] == 'geometry':
            after['mig_devices'] = dict(op['value'])
            after['mig_instances'] = ['%s@%s [%s]' % (n, s, n) for n, s in _after_layout(gpu, op['plan'])]
    return after


def _after_layout(gpu: Mapping[str, Any], plan: Mapping[str, Any]) -> list[tuple[str, int | None]]:
    kept = [(g['profile'], g.get('start')) for g in gpu.get('mig_instances') or []
            if g['id'] not in [d[0] for d in plan['destroy_gis']]]
    layout = kept + list(plan['create_gis'])
    return sorted(layout, key=lambda x: (x[1] if x[1] is not None else 99, x[0]))


def execute_gpu(backend: Any, gpu: Mapping[str, Any], ops: Iterable[Mapping[str, Any]], done: list[str]) -> bool:
    """Apply ``ops`` to one GPU; appends action texts to ``done``. Returns True when MIG became active now."""
    idx = gpu['index']
    activated = False
    for op in ops:
        kind = op['kind']
        if kind == 'persistence':
            _call(done, op['action'], backend.set_persistence_mode, idx, op['value'])
        elif kind == 'compute_mode':
            _call(done, op['action'], backend.set_compute_mode, idx, op['value'])
        elif kind == 'mig_mode':
            now = _call(done, op['action'], backend.set_mig_mode, idx, op['value'])
            activated = bool(now) and op['value'] and not gpu['mig_current']
        elif kind == 'geometry':
            apply_geometry(backend, gpu, op['plan'], done)
    return activated


def apply_geometry(backend: Any, gpu: Mapping[str, Any], plan: Mapping[str, Any], done: list[str]) -> None:
    idx = gpu['index']
    profiles = gpu['mig_profiles']
    texts = iter(plan['actions'])
    for gi_id, ci_id, dummy in plan['destroy_cis']:
        _call(done, next(texts), backend.destroy_compute_instance, idx, gi_id, ci_id)
    for gi_id, dummy, dummy2 in plan['destroy_gis']:
        _call(done, next(texts), backend.destroy_gpu_instance, idx, gi_id)
    slices = dict((g['id'], profiles[g['profile']]['slices']) for g in gpu.get('mig_instances') or [])
    for gi_id in plan['fix_gis']:
        _call(done, next(texts), backend.create_full_compute_instance, idx, gi_id, slices[gi_id])
    for name, start in plan['create_gis']:
        text = next(texts)
        prof = profiles[name]
        gi_id = _call(done, text, backend.create_gpu_instance, idx, prof, start, record=False)
        try:
            backend.create_full_compute_instance(idx, gi_id, prof['slices'])
        except Exception as exc:  # pylint: disable=broad-except
            done.append('GPU %s: create GPU instance %s (id %s) - its compute instance failed' % (idx, name, gi_id))
            raise ApplyError('%s failed: %s' % (text, exc), list(done))
        done.append(text)


def _call(done: list[str], text: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one change; on success append ``text`` to ``done`` (unless record=False), on failure raise ApplyError."""
    try:
        result = func(*args)
    except Exception as exc:  # pylint: disable=broad-except
        raise ApplyError('%s failed: %s' % (text, exc), list(done))
    if kwargs.get('record', True):
        done.append(text)
    return result


def run(backend: Any, params: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    """Plan and (unless check_mode) apply the GPU part. Returns a result dict (without the MPS file part).

    Raises SharingError (nothing changed) or ApplyError (something failed after changes).
    """
    all_gpus = backend.gpus()
    selected, mig, mps, warnings = validate(params, all_gpus)
    by_index = dict((g['index'], g) for g in all_gpus)
    plans: dict[int, list[dict[str, Any]]] = {}
    for idx in selected:
        plans[idx] = plan_gpu(by_index[idx], params, mig.get(idx))
    if not check_mode:
        wait_until_idle(backend, [by_index[i] for i in selected if _touches_mig(plans[i])],
                        params.get('mig_busy_timeout') or 0)
    actions: list[str] = []
    for idx in selected:
        for op in plans[idx]:
            actions.extend(op_actions(op))
    before = [public_state(by_index[i]) for i in selected]
    done: list[str] = []
    after_gpus: list[dict[str, Any]] = []
    for idx in selected:
        gpu, ops = by_index[idx], plans[idx]
        deferred = [op for op in ops if op['kind'] == 'geometry_deferred']
        if check_mode:
            after_gpus.append(predict(gpu, ops))
            if deferred:
                warnings.append('%s: MIG mode is not active yet; the geometry %s would be applied after the GPU reset '
                                'that enabling MIG needs' % (label(gpu), planner.format_geometry(deferred[0]['value'])))
            continue
        activated = execute_gpu(backend, gpu, [op for op in ops if op['kind'] != 'geometry_deferred'], done)
        if deferred and activated:
            # MIG became active at once (no reset needed): plan against what NVML now reports
            fresh = backend.gpu(idx)
            try:
                planner.validate_geometry(fresh, deferred[0]['value'], fresh['mig_profiles'])
            except SharingError as exc:
                raise ApplyError(str(exc), done)
            for op in _geometry_ops(fresh, deferred[0]['value']):
                apply_geometry(backend, fresh, op['plan'], done)
        after_gpus.append(public_state(backend.gpu(idx)))
    pending = [g['index'] for g in after_gpus if g.get('mig_capable') and g.get('mig_current') != g.get('mig_pending')]
    warnings.extend(_pending_warning(g) for g in after_gpus if g['index'] in pending)
    result = {
        'changed': bool(actions) if check_mode else bool(done),
        'actions': actions if check_mode else done,
        'gpus': after_gpus,
        'reboot_required': bool(pending),
        'gpu_reset_pending': pending,
        'warnings': warnings,
        'diff': {'before': {'gpus': before}, 'after': {'gpus': after_gpus}},
        'mps': mps,
    }
    return result


def _touches_mig(ops: Iterable[Mapping[str, Any]]) -> bool:
    """True when the ops destroy or create MIG instances or change MIG mode (what running processes lose)."""
    return any(op['kind'] in ('geometry', 'mig_mode') for op in ops)


def wait_until_idle(backend: Any, gpus: Sequence[Mapping[str, Any]], timeout: float) -> None:
    """Refuse (SharingError, nothing changed) when a GPU whose MIG state is about to change runs processes.

    Waits up to ``timeout`` seconds for them to end, polling every 2 s. ``backend.processes(index)`` lists the PIDs
    of compute and graphics processes on the GPU and its MIG devices; backends without it are not checked. The
    backend may provide ``sleep`` and ``clock`` (tests); otherwise time.sleep / time.monotonic are used.
    """
    if not gpus or not hasattr(backend, 'processes'):
        return
    import time
    sleep = getattr(backend, 'sleep', time.sleep)
    clock = getattr(backend, 'clock', time.monotonic)
    deadline = clock() + max(0, int(timeout))
    while True:
        busy = [(g, backend.processes(g['index'])) for g in gpus]
        busy = [(g, pids) for g, pids in busy if pids]
        if not busy:
            return
        if clock() >= deadline:
            raise SharingError(
                'MIG change refused, nothing was changed: %s. Changing MIG mode or MIG devices would take the GPU from '
                'them. Drain the GPU pods from the node, stop the node\'s GPU clients (device plugin, DCGM, '
                'nvidia-persistenced where it holds the GPU) and run again, or wait longer with mig_busy_timeout '
                '(was %d s).' % ('; '.join('%s is busy (process(es) %s)' % (label(g), ', '.join(str(p) for p in pids))
                                           for g, pids in busy), int(timeout)))
        sleep(2)


def mig_mismatches(gpu: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """What differs between one GPU (backend dict) and its wanted MIG state; an empty list when it matches.

    ``want``: ``{'enabled': bool, 'devices': {profile: count} or None}`` (see desired_mig). Checks the MIG mode
    (current and pending), that the MIG devices are exactly the wanted ones, and that no GPU instance lacks its
    full-size compute instance (as after a reboot: MIG on, no MIG devices).
    """
    out: list[str] = []
    lab = label(gpu)
    if not gpu.get('mig_capable'):
        if want['enabled']:
            out.append('%s: the geometry wants MIG mode enabled, but this GPU does not support MIG' % lab)
        return out
    state = 'enabled' if want['enabled'] else 'disabled'
    if bool(gpu.get('mig_current')) != want['enabled']:
        out.append('%s: MIG mode is %s, the geometry wants it %s' % (lab, 'enabled' if gpu.get('mig_current') else 'disabled', state))
        return out
    if bool(gpu.get('mig_pending')) != want['enabled']:
        out.append('%s: MIG mode is %s but a change to %s is pending' % (lab, state, 'enabled' if gpu.get('mig_pending') else 'disabled'))
    if not want['enabled'] or want['devices'] is None:
        return out
    instances = gpu.get('mig_instances') or []
    have = planner.geometry_of(instances)
    if have != want['devices']:
        out.append('%s: MIG devices are %s, the geometry wants %s'
                   % (lab, planner.format_geometry(have), planner.format_geometry(want['devices'])))
    broken = [gi for gi in instances if not planner.is_complete(gi)]
    if broken:
        out.append('%s: GPU instance(s) %s have no full-size compute instance'
                   % (lab, ', '.join('%s (id %s)' % (gi['profile'], gi['id']) for gi in broken)))
    return out


def verify(backend: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """Compare the node with the wanted MIG state without changing anything.

    Returns ``{'mig_match': bool, 'mismatches': [str], 'mismatched_gpus': [dict], 'gpus': [public state]}``;
    ``mismatched_gpus`` has, per GPU that differs, what it has and what is wanted (for callers that word it).
    Raises SharingError for a request that is invalid in itself (same checks as a run).
    """
    all_gpus = backend.gpus()
    selected, mig, dummy, dummy2 = validate(params, all_gpus)
    by_index = dict((g['index'], g) for g in all_gpus)
    mismatches: list[str] = []
    mismatched: list[dict[str, Any]] = []
    for idx in selected:
        if idx in mig:
            found = mig_mismatches(by_index[idx], mig[idx])
            mismatches.extend(found)
            if found:
                state = public_state(by_index[idx])
                mismatched.append({'index': idx, 'uuid': state['uuid'], 'name': state['name'],
                                   'mig_capable': state['mig_capable'], 'mig_current': state['mig_current'],
                                   'mig_devices': state['mig_devices'], 'wanted_mig_enabled': mig[idx]['enabled'],
                                   'wanted_mig_devices': mig[idx]['devices'], 'problems': found})
    return {'mig_match': not mismatches, 'mismatches': mismatches, 'mismatched_gpus': mismatched,
            'gpus': [public_state(by_index[i]) for i in selected]}
