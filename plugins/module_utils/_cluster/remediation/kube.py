# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop's API calls (module gpu_remediation): quarantine a GPU (DeviceTaintRule or node taint and
cordon), drain only the pods that hold it, release exactly what the loop made, leave Events. The decisions are
remediation/plan's; this file only reads and writes.

``api`` is anything with ``call(method, path, query=None, body=None, content_type=None)`` returning the decoded JSON
(RestApi over the kubernetes client's ApiClient; the unit tests give a fake). Errors carry ``status`` as the
client's ApiException does.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import rest
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.remediation import plan

RULES = '/apis/%s/%s/devicetaintrules' % (plan.DRA_API_GROUP, plan.DRA_API_VERSION)
SLICES = '/apis/%s/%s/resourceslices' % (plan.DRA_API_GROUP, plan.DRA_API_VERSION)
CLAIMS = '/apis/%s/%s/resourceclaims' % (plan.DRA_API_GROUP, plan.DRA_API_VERSION)
DRY_RUN_CONDITION = 'EvictionInProgress'
EVENT_NAMESPACE = 'default'
MERGE_PATCH = 'application/merge-patch+json'

Query = Sequence[tuple[str, Any]]
# (namespace, pod name)
PodRef = tuple[str, str]


class Api(Protocol):
    """What the Remediator calls: RestApi, or the unit tests' fake."""

    def call(self, method: str, path: str, query: Query | None = None, body: Any = None,
             content_type: str | None = None) -> Any:
        ...

    def text(self, path: str, query: Query | None = None) -> str:
        ...


class RestApi(object):
    """JSON requests over the ApiClient (kube/rest.request)."""

    def __init__(self, api_client: Any, send: Callable[..., Any] = rest.request) -> None:
        self.api_client = api_client
        self._send = send

    def call(self, method: str, path: str, query: Query | None = None, body: Any = None,
             content_type: str | None = None) -> Any:
        if body is not None and content_type is None:
            content_type = rest.JSON
        response = self._send(self.api_client, method, path, list(query or []), body, content_type)
        data = getattr(response, 'data', b'') or b'{}'
        return json.loads(data.decode('utf-8') if isinstance(data, bytes) else data)

    def text(self, path: str, query: Query | None = None) -> str:
        """A GET whose answer is text (a pod's log)."""
        response = self._send(self.api_client, 'GET', path, list(query or []), None, None)
        data = getattr(response, 'data', b'') or b''
        return data.decode('utf-8', 'replace') if isinstance(data, bytes) else str(data)


def _status(exc: BaseException) -> int | None:
    return getattr(exc, 'status', None)


def now_rfc3339(clock: Callable[[], float] | None = None) -> str:
    t = datetime.datetime.fromtimestamp(clock() if clock else time.time(), tz=datetime.timezone.utc)
    return t.strftime('%Y-%m-%dT%H:%M:%SZ')


class Remediator(object):
    """One run on one node. ``actions`` lists what was (or, in check mode, would be) written; ``diff`` the node's
    taints, cordon and the rules before and after."""

    def __init__(self, api: Api, node: str, check_mode: bool = False, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.node_name = node
        self.check_mode = check_mode
        self.sleep = sleep
        self.clock = clock
        self.actions: list[str] = []
        self.events: list[dict[str, str]] = []
        self.dry_runs: dict[str, str | None] = {}

    # ------------------------------------------------------------------------------------------------ reads
    def node(self) -> dict[str, Any] | None:
        try:
            return self.api.call('GET', '/api/v1/nodes/%s' % self.node_name)
        except Exception as e:
            if _status(e) == 404:
                return None
            raise

    def dra_served(self) -> bool:
        """Whether resource.k8s.io/v1 serves devicetaintrules (REM-01 at 1.37, REM-03: not at 1.34)."""
        try:
            res = self.api.call('GET', '/apis/%s/%s' % (plan.DRA_API_GROUP, plan.DRA_API_VERSION))
        except Exception as e:
            if _status(e) == 404:
                return False
            raise
        return any(r.get('name') == 'devicetaintrules' for r in res.get('resources') or [])

    def slices(self, driver: str) -> list[dict[str, Any]]:
        try:
            return self.api.call('GET', SLICES, [('fieldSelector', 'spec.driver=%s' % driver)]).get('items') or []
        except Exception as e:
            if _status(e) == 404:
                return []
            raise

    def rule(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.call('GET', '%s/%s' % (RULES, name))
        except Exception as e:
            if _status(e) == 404:
                return None
            raise

    def claims(self) -> list[dict[str, Any]]:
        return self.api.call('GET', CLAIMS).get('items') or []

    def pods_on_node(self) -> list[dict[str, Any]]:
        return self.api.call('GET', '/api/v1/pods', [('fieldSelector', 'spec.nodeName=%s' % self.node_name)]).get(
            'items') or []

    # ------------------------------------------------------------------------------------------------ writes
    def _write(self, action: str, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        self.actions.append(action)
        if self.check_mode:
            return None
        return self.api.call(method, path, body=body, content_type=content_type)

    def event(self, reason: str, message: str, kind: str = 'Normal') -> None:
        """An Event on the Node (core/v1), as kubectl describe node shows it: like the kubelet's node events its
        involvedObject uid is the node's name, which kubectl's node describer looks the events up by
        (k8s.io/kubectl v0.37.2 pkg/describe/describe.go)."""
        self.events.append({'reason': reason, 'message': message, 'type': kind})
        if self.check_mode:
            return
        stamp = now_rfc3339(self.clock)
        name = '%s.gpuops-%x' % (self.node_name, int(self.clock() * 1e6))
        self.api.call('POST', '/api/v1/namespaces/%s/events' % EVENT_NAMESPACE, body={
            'apiVersion': 'v1', 'kind': 'Event', 'metadata': {'name': name, 'namespace': EVENT_NAMESPACE},
            'involvedObject': {'apiVersion': 'v1', 'kind': 'Node', 'name': self.node_name, 'uid': self.node_name},
            'reason': reason, 'message': message[:1024], 'type': kind, 'count': 1,
            'firstTimestamp': stamp, 'lastTimestamp': stamp,
            'source': {'component': plan.MANAGED_BY}, 'reportingComponent': plan.MANAGED_BY,
            'reportingInstance': plan.MANAGED_BY})

    def _patch_node(self, action: str, body: dict[str, Any]) -> Any:
        return self._write(action, 'PATCH', '/api/v1/nodes/%s' % self.node_name, body, rest.STRATEGIC_MERGE_PATCH)

    def apply_rule(self, name: str, device: Sequence[str], effect: str, reason: str, dry_run_timeout: float) -> bool:
        """Create the rule with effect None and wait for the controller's dry-run count, then set ``effect``. An
        existing rule of ours with the effect asked is left alone; one that is not ours is refused."""
        current = self.rule(name)
        if current is not None:
            labels = (current.get('metadata') or {}).get('labels') or {}
            if labels.get('app.kubernetes.io/managed-by') != plan.MANAGED_BY:
                raise plan.PlanError('DeviceTaintRule %s exists and is not managed by %s: refusing to change it'
                                     % (name, plan.MANAGED_BY))
            if ((current.get('spec') or {}).get('taint') or {}).get('effect') == effect:
                return False
        else:
            body = plan.device_taint_rule(name, device, 'None', reason)
            self._write('create DeviceTaintRule %s (effect None: dry run) for %s' % (name, '/'.join(device)),
                        'POST', RULES, body)
            self.dry_runs[name] = self.wait_dry_run(name, dry_run_timeout)
        self._write('set DeviceTaintRule %s effect %s' % (name, effect), 'PATCH', '%s/%s' % (RULES, name),
                    {'spec': {'taint': {'effect': effect}}}, MERGE_PATCH)
        return True

    def wait_dry_run(self, name: str, timeout: float) -> str | None:
        """The device-taint-eviction controller's count for an effect None rule (condition EvictionInProgress,
        reason NoEffect): its message, or None when it did not come within ``timeout`` seconds."""
        if self.check_mode or timeout <= 0:
            return None
        end = self.clock() + timeout
        while True:
            rule = self.rule(name) or {}
            gen = (rule.get('metadata') or {}).get('generation')
            for c in (rule.get('status') or {}).get('conditions') or []:
                if c.get('type') == DRY_RUN_CONDITION and c.get('observedGeneration') == gen:
                    return c.get('message')
            if self.clock() >= end:
                return None
            self.sleep(1)

    def delete_rule(self, name: str) -> bool:
        if self.rule(name) is None:
            return False
        self._write('delete DeviceTaintRule %s' % name, 'DELETE', '%s/%s' % (RULES, name))
        return True

    def evict(self, namespace: str, name: str) -> bool:
        """True when the pod is on its way out or gone, False when a PodDisruptionBudget refused it (429)."""
        try:
            self._write('evict pod %s/%s' % (namespace, name), 'POST',
                        '/api/v1/namespaces/%s/pods/%s/eviction' % (namespace, name),
                        {'apiVersion': 'policy/v1', 'kind': 'Eviction',
                         'metadata': {'name': name, 'namespace': namespace}})
            return True
        except Exception as e:
            if _status(e) == 404:
                return True
            if _status(e) == 429:
                self.actions.pop()
                return False
            raise

    # ------------------------------------------------------------------------------------------------ the loop's steps
    def quarantine(self, unhealthy: dict[str, list[dict[str, Any]]], mode: str, effect: str, driver: str,
                   dry_run_timeout: float, repairs: dict[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """Quarantine the GPUs of ``unhealthy`` ({uuid: [finding]}); returns the plan entries."""
        node = self.node()
        if node is None:
            raise plan.PlanError('node %s: no such Node in the cluster' % self.node_name)
        record = plan.read_record(node)
        served = self.dra_served() if mode != 'node' else False
        slices = self.slices(driver) if served or mode == 'dra' else []
        entries = plan.quarantine_plan(self.node_name, unhealthy, slices, served, mode, driver)
        gpus = dict(record.get('gpus') or {})
        changed_gpus: list[str] = []
        for e in entries:
            reason = '-'.join(e['why'][:2])
            if e['kind'] == 'dra':
                self.apply_rule(e['rule'], tuple(e['device']), effect, reason, dry_run_timeout)
            old = gpus.get(e['uuid']) or {}
            entry = {'kind': e['kind'], 'rule': e['rule'], 'device': e['device'], 'effect': effect if e['kind'] == 'dra'
                     else 'NoSchedule', 'why': e['why'], 'evidence': _evidence(unhealthy[e['uuid']]),
                     'repair': (repairs or {}).get(e['uuid']), 'since': old.get('since') or now_rfc3339(self.clock)}
            if old != entry:
                gpus[e['uuid']] = entry
                changed_gpus.append(e['uuid'])
        changes = plan.node_changes(node, record, [e['kind'] for e in entries])
        new_record = dict(record, gpus=gpus)
        spec = node.get('spec') or {}
        body: dict[str, Any] = {}
        if changes['add_taint']:
            taints = list(spec.get('taints') or []) + [plan.node_taint('-'.join(
                sorted(set(w for e in entries if e['kind'] == 'node' for w in e['why'])))[:63])]
            body.setdefault('spec', {})['taints'] = taints
            new_record['tainted'] = True
        if changes['cordon']:
            body.setdefault('spec', {})['unschedulable'] = True
            new_record['cordoned'] = True
        text = plan.write_record(new_record)
        if text != (((node.get('metadata') or {}).get('annotations') or {}).get(plan.RECORD_ANNOTATION)):
            body.setdefault('metadata', {})['annotations'] = {plan.RECORD_ANNOTATION: text}
        if body:
            what = []
            if changes['add_taint']:
                what.append('taint %s:NoSchedule' % plan.TAINT_KEY)
            if changes['cordon']:
                what.append('cordon')
            what.append('record %s' % ', '.join(changed_gpus) if changed_gpus else 'record')
            self._patch_node('node %s: %s' % (self.node_name, ', '.join(what)), body)
        for uuid in changed_gpus:
            g = gpus[uuid]
            self.event('GPUQuarantined', 'GPU %s quarantined (%s%s) by %s: %s; evidence: %s' % (
                uuid, 'DeviceTaintRule %s, effect %s' % (g['rule'], g['effect']) if g['kind'] == 'dra'
                else 'node taint %s and cordon' % plan.TAINT_KEY,
                '; dry run: %s' % self.dry_runs[g['rule']] if self.dry_runs.get(g['rule']) else '',
                plan.MANAGED_BY, ', '.join(g['why']), '; '.join(g['evidence'])[:400]), 'Warning')
        return entries, {'before': _view(node, record), 'after': _after_view(node, new_record, body)}

    def holders(self, entries: list[dict[str, Any]], allocations: list[dict[str, Any]] | None = None
                ) -> dict[str, list[PodRef] | None]:
        """{uuid: [(namespace, pod)]}: DRA claims for a rule's device; device-plugin allocations (when given) for a
        node-level GPU. A node-level GPU without allocations: every running pod on the node that holds any GPU
        resource of the node is not assumed - None (unknown)."""
        out: dict[str, list[PodRef] | None] = {}
        claims: list[dict[str, Any]] | None = None
        pods: list[dict[str, Any]] | None = None
        if any(a.get('pod_uid') and not a.get('name') for a in allocations or []):
            pods = self.pods_on_node()
        for e in entries:
            if e['kind'] == 'dra':
                if claims is None:
                    claims = self.claims()
                out[e['uuid']] = plan.dra_holders(claims, tuple(e['device']))
            elif allocations is not None:
                out[e['uuid']] = plan.device_plugin_holders(allocations, e['uuid'], pods)
            else:
                out[e['uuid']] = None
        return out

    def drain(self, holders: dict[str, list[PodRef] | None], timeout: float, poll: float = 2
              ) -> tuple[list[str], list[str]]:
        """Evict the pods of ``holders`` through the Eviction API (PodDisruptionBudgets honoured) and wait until each
        evicted pod is gone - deleted, ended, or replaced by a pod of the same name (another UID) - or ``timeout``;
        returns (evicted, left): left names the pods a budget still refuses and those still terminating. An evicted
        pod keeps its GPU until its containers stop (its grace period): a reset then finds the GPU in use, and the
        validation pod finds no free unit (a real node's kubelet took its time in a lab run)."""
        pods = sorted(set(p for v in holders.values() if v for p in v))
        evicted: list[str] = []
        pending = list(pods)
        if self.check_mode:
            self.actions.extend('evict pod %s/%s' % p for p in pods)
            return ['%s/%s' % p for p in pods], []
        uids = dict((p, self._pod_uid(*p)) for p in pods)
        terminating: list[PodRef] = []
        end = self.clock() + timeout
        while True:
            still: list[PodRef] = []
            for ns, name in pending:
                if self.evict(ns, name):
                    evicted.append('%s/%s' % (ns, name))
                    terminating.append((ns, name))
                else:
                    still.append((ns, name))
            pending = still
            terminating = [p for p in terminating if not self._pod_gone(p[0], p[1], uids.get(p))]
            if (not pending and not terminating) or self.clock() >= end:
                return evicted, ['%s/%s' % p for p in sorted(pending + terminating)]
            self.sleep(poll)

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when there is none of that name (404)."""
        try:
            return self.api.call('GET', '/api/v1/namespaces/%s/pods/%s' % (namespace, name)) or {}
        except Exception as e:
            if _status(e) == 404:
                return None
            raise

    def _pod_uid(self, namespace: str, name: str) -> str | None:
        return ((self._pod(namespace, name) or {}).get('metadata') or {}).get('uid')

    def _pod_gone(self, namespace: str, name: str, uid: str | None) -> bool:
        """The evicted pod no longer holds its GPU: deleted, ended, or a new pod of that name (another UID)."""
        pod = self._pod(namespace, name)
        if pod is None:
            return True
        if uid and (pod.get('metadata') or {}).get('uid') not in (None, uid):
            return True
        return (pod.get('status') or {}).get('phase') in plan.POD_DONE

    # ------------------------------------------------------------------------------------------------ after the repair
    def restart_device_plugin(self, selector: str | None, resource: str, timeout: float, poll: float = 2
                              ) -> dict[str, list[str]]:
        """NVIDIA's device plugin (v0.19.1) never lists a GPU it marked unhealthy as healthy again (REM-17): when the
        Node's allocatable of ``resource`` is below its capacity, delete the plugin's pods on this node (``selector``,
        a label selector; their DaemonSet starts new ones, which list every GPU healthy) and wait until allocatable
        equals capacity or ``timeout``. Returns {'restarted': [pods], 'before': (capacity, allocatable), 'after': ...};
        nothing is done when allocatable already equals capacity."""
        def counts() -> tuple[str, str]:
            st = (self.node() or {}).get('status') or {}
            return (str((st.get('capacity') or {}).get(resource, '0')), str((st.get('allocatable') or {}).get(resource, '0')))
        before = counts()
        out: dict[str, list[str]] = {'restarted': [], 'before': list(before), 'after': list(before)}
        if before[0] == before[1] or not selector:
            return out
        pods = self.api.call('GET', '/api/v1/pods', [('fieldSelector', 'spec.nodeName=%s' % self.node_name),
                                                     ('labelSelector', selector)]).get('items') or []
        for p in pods:
            meta = p.get('metadata') or {}
            self._write('delete device plugin pod %s/%s (it lists a repaired GPU healthy only after a restart)' % (
                meta.get('namespace'), meta.get('name')), 'DELETE',
                '/api/v1/namespaces/%s/pods/%s' % (meta.get('namespace'), meta.get('name')))
            out['restarted'].append('%s/%s' % (meta.get('namespace'), meta.get('name')))
        if self.check_mode or not pods:
            return out
        end = self.clock() + timeout
        while True:
            now = counts()
            out['after'] = list(now)
            if now[0] == now[1] or self.clock() >= end:
                return out
            self.sleep(poll)

    def validate(self, entries: list[dict[str, Any]], settings: dict[str, Any], poll: float = 2
                 ) -> dict[str, dict[str, Any]]:
        """Run each GPU's validation workload (remediation/plan.validation_objects) in ``settings['namespace']`` and
        wait for its verdict; the objects are deleted afterwards. ``entries``: [{'uuid', 'kind', 'device'}] of the
        record. Returns {uuid: {'passed', 'why', 'log', 'pod'}}; check mode runs nothing and passes nothing."""
        results: dict[str, dict[str, Any]] = {}
        ns = settings['namespace']
        resource = settings.get('resource') or 'nvidia.com/gpu'
        for e in entries:
            count = 1
            if e['kind'] != 'dra':
                count = plan.free_units(self.node(), self.pods_on_node(), resource)
                if count == 0:
                    results[e['uuid']] = {'passed': False, 'pod': None, 'log': '', 'why': (
                        'node %s has no free %s for the validation pod (the device plugin may still list the GPU '
                        'unhealthy, or other pods hold every unit)' % (self.node_name, resource))}
                    continue
            objs = plan.validation_objects(
                e, self.node_name, ns, settings['image'], settings.get('command'), resource, count,
                settings.get('device_class') or plan.DRA_DRIVER, settings.get('tolerations') or [],
                settings.get('runtime_class'), settings.get('pull_secrets') or [], settings.get('volumes') or [],
                settings.get('volume_mounts') or [])
            pod = objs[-1]
            name = pod['metadata']['name']
            for o in objs:
                self._delete_validation(o, wait=True)
                self._write('create validation %s %s/%s for GPU %s' % (o['kind'], ns, name, e['uuid']), 'POST',
                            _validation_path(o, ns), o)
            if self.check_mode:
                results[e['uuid']] = {'passed': None, 'pod': name, 'log': '', 'why': 'check mode: not run'}
                continue
            end = self.clock() + settings['timeout']
            while True:
                try:
                    live = self.api.call('GET', '/api/v1/namespaces/%s/pods/%s' % (ns, name))
                except Exception as exc:
                    if _status(exc) != 404:
                        raise
                    live = {}
                verdict, why = plan.validation_verdict(live)
                if verdict != 'running':
                    break
                if self.clock() >= end:
                    verdict, why = 'failed', 'no verdict within %ss: %s' % (settings['timeout'], why)
                    break
                self.sleep(poll)
            log = ''
            try:
                log = self.api.text('/api/v1/namespaces/%s/pods/%s/log' % (ns, name), [('tailLines', '20')])
            except Exception:  # pylint: disable=broad-except
                log = ''   # no log: the container never started
            results[e['uuid']] = {'passed': verdict == 'passed', 'why': why, 'log': log[-2000:], 'pod': name}
            for o in reversed(objs):
                self._delete_validation(o)
        return results

    def _delete_validation(self, obj: dict[str, Any], wait: bool = False) -> None:
        """Delete a validation object left from an earlier run (of ours: its managed-by label) or made now."""
        ns = obj['metadata']['namespace']
        path = '%s/%s' % (_validation_path(obj, ns), obj['metadata']['name'])
        if self.check_mode:
            return
        try:
            live = self.api.call('GET', path)
        except Exception as exc:
            if _status(exc) == 404:
                return
            raise
        if ((live.get('metadata') or {}).get('labels') or {}).get('app.kubernetes.io/managed-by') != plan.MANAGED_BY:
            raise plan.PlanError('%s %s/%s exists and is not managed by %s: refusing to replace it' % (
                obj['kind'], ns, obj['metadata']['name'], plan.MANAGED_BY))
        self._write('delete validation %s %s/%s' % (obj['kind'], ns, obj['metadata']['name']), 'DELETE', path,
                    {'apiVersion': 'v1', 'kind': 'DeleteOptions', 'gracePeriodSeconds': 0})
        end = self.clock() + 60
        while wait and self.clock() < end:
            try:
                self.api.call('GET', path)
            except Exception as exc:
                if _status(exc) == 404:
                    return
                raise
            self.sleep(1)

    def to_release(self, uuids: Iterable[str] | None = None, keep: Iterable[str] = ()) -> list[dict[str, Any]]:
        """[{'uuid', 'kind', 'device'}] of the recorded GPUs a release of ``uuids`` (all when None) would give back,
        ``keep`` left out."""
        node = self.node()
        if node is None:
            raise plan.PlanError('node %s: no such Node in the cluster' % self.node_name)
        gpus = plan.read_record(node).get('gpus') or {}
        chosen = sorted(gpus) if uuids is None else [u for u in uuids if u in gpus]
        return [{'uuid': u, 'kind': gpus[u].get('kind'), 'device': gpus[u].get('device')}
                for u in chosen if u not in set(keep)]

    def release(self, uuids: Iterable[str] | None = None, keep: Iterable[str] = ()
                ) -> tuple[list[str], dict[str, dict[str, Any]]]:
        """Take back what the record says this loop made for ``uuids`` (all when None), except the GPUs of ``keep``
        (those the doctor still finds unhealthy)."""
        node = self.node()
        if node is None:
            raise plan.PlanError('node %s: no such Node in the cluster' % self.node_name)
        record = plan.read_record(node)
        if not record:
            return [], {'before': _view(node, record), 'after': _view(node, record)}
        chosen = sorted(record.get('gpus') or {}) if uuids is None else list(uuids)
        ch = plan.release_changes(node, record, [u for u in chosen if u not in set(keep)])
        for name in ch['rules']:
            self.delete_rule(name)
        spec = node.get('spec') or {}
        body: dict[str, Any] = {}
        if ch['untaint']:
            body.setdefault('spec', {})['taints'] = [t for t in spec.get('taints') or [] if t.get('key') != plan.TAINT_KEY]
        if ch['uncordon']:
            body.setdefault('spec', {})['unschedulable'] = False
        if ch['released'] or body:
            body.setdefault('metadata', {})['annotations'] = {
                plan.RECORD_ANNOTATION: plan.write_record(ch['record']) if ch['record'] else None}
            what = (['untaint %s' % plan.TAINT_KEY] if ch['untaint'] else []) + (['uncordon'] if ch['uncordon'] else [])
            self._patch_node('node %s: %s' % (self.node_name, ', '.join(what + ['record']) or 'record'), body)
        for uuid in ch['released']:
            self.event('GPUReleased', 'GPU %s released by %s: %s' % (
                uuid, plan.MANAGED_BY, 'DeviceTaintRule %s deleted' % record['gpus'][uuid]['rule']
                if record['gpus'][uuid].get('rule') else 'node quarantine of this GPU ended'))
        after = ch['record'] or {}
        return ch['released'], {'before': _view(node, record), 'after': _after_view(node, after, body)}


def _validation_path(obj: dict[str, Any], namespace: str) -> str:
    if obj['kind'] == 'ResourceClaim':
        return '/apis/%s/%s/namespaces/%s/resourceclaims' % (plan.DRA_API_GROUP, plan.DRA_API_VERSION, namespace)
    return '/api/v1/namespaces/%s/pods' % namespace


def _evidence(findings: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for f in findings:
        out.extend(f.get('evidence') or [])
    return out[:8]


def _view(node: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    spec = node.get('spec') or {}
    return {'taints': list(spec.get('taints') or []), 'unschedulable': bool(spec.get('unschedulable')),
            'rules': sorted(g['rule'] for g in (record.get('gpus') or {}).values() if g.get('rule')),
            'quarantined': sorted((record.get('gpus') or {}))}


def _after_view(node: dict[str, Any], record: dict[str, Any] | None, body: dict[str, Any]) -> dict[str, Any]:
    spec = dict(node.get('spec') or {})
    spec.update(body.get('spec') or {})
    return _view({'spec': spec}, record or {})
