# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take a GPU node out of service (a MIG change, a driver upgrade) and give it back (module gpu_node_drain).

The decisions (which pods are GPU pods, which GPU-client labels to flip and to what) are plain functions tested on
their own; ``Drainer`` makes the API calls with the kubernetes Python client.

The GPU-client pause follows NVIDIA's k8s-mig-manager (NVIDIA/mig-parted, pkg/mig/reconfigure/reconfigure.go,
v0.15.0): the node labels that the GPU clients' DaemonSets select on are set to ``paused-for-mig-change`` (a label
that says ``false`` stays ``false``), the DaemonSet controller then removes those pods, and after the change each
label is set to ``true`` (``false`` stays ``false``). Unlike mig-manager, labels the node does not carry are left
absent: no DaemonSet selecting on them runs on the node.

Which pods may be evicted follows kubectl's drain library (kubernetes/kubectl, pkg/drain/filters.go and drain.go,
v0.36.3; docs/conformance/mig-change.md, rows KD-*): DaemonSet pods are refused unless ignored, mirror pods are
skipped, unfinished pods with an emptyDir volume or without a controller are refused unless allowed, and any refusal
fails the drain before the first eviction. Evictions go through policy/v1 Eviction (a 429 from a disruption budget is
tried again until the timeout; a 404 means gone), or are plain deletions when eviction is disabled; a pod is gone
when the API no longer has it or has another pod (another UID) under its name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy

# the GPU-client deploy labels mig-manager pauses, in its order (reconfigure.go, v0.15.0)
CLIENT_DEPLOY_LABELS = (
    'nvidia.com/gpu.deploy.device-plugin',
    'nvidia.com/gpu.deploy.gpu-feature-discovery',
    'nvidia.com/gpu.deploy.dcgm-exporter',
    'nvidia.com/gpu.deploy.dcgm',
    'nvidia.com/gpu.deploy.nvsm',
    'nvidia.com/gpu.deploy.client',
)
PAUSED = 'paused-for-mig-change'


def default_gpu_resources() -> tuple[str, ...]:
    """The extended resources that make a pod a GPU pod, as name prefixes: those of every sharing strategy of the
    strategy model (gpu_strategy.resource_prefixes), read when called."""
    return gpu_strategy.resource_prefixes()


# the same, as the model is when this module loads
DEFAULT_GPU_RESOURCES = default_gpu_resources()

MIRROR_ANNOTATION = 'kubernetes.io/config.mirror'
# set with the cordon and removed with the uncordon: a node this module cordoned in a run that stopped (a busy GPU,
# a MIG mode change waiting for a reset) is uncordoned by the run that finishes the change
CORDON_ANNOTATION = 'gpuops.io/mig-change'
# kubectl's reasons for refusing a pod (pkg/drain/filters.go), worded with this module's option names
REFUSED_DAEMONSET = 'DaemonSet-managed Pods (set ignore_daemonsets to ignore them)'
REFUSED_LOCAL_STORAGE = 'Pods with local storage (set delete_emptydir_data to evict them)'
REFUSED_UNMANAGED = 'Pods that declare no controller (set force to evict them)'
FINISHED_PHASES = ('Succeeded', 'Failed')


def pause_labels(node_labels: dict[str, str] | None) -> dict[str, str]:
    """{label: value} that pauses the GPU clients: only labels the node carries, ``false`` stays ``false``."""
    node_labels = node_labels or {}
    return dict((k, 'false' if node_labels[k] == 'false' else PAUSED) for k in CLIENT_DEPLOY_LABELS if k in node_labels)


def restore_labels(original: dict[str, str] | None) -> dict[str, str]:
    """{label: value} that gives the GPU clients back: ``true``, except a label that said ``false``."""
    return dict((k, 'false' if v == 'false' else 'true') for k, v in (original or {}).items())


def _requests_gpu(pod: dict[str, Any], prefixes: Iterable[str]) -> bool:
    """A GPU pod: it requests or limits a resource named with one of ``prefixes``, or holds DRA devices - a
    ResourceClaim in spec.resourceClaims, or extended resources the scheduler backed with DRA
    (status.extendedResourceClaimStatus, Kubernetes 1.36+; DRAX-08): a claim's devices are the node's, so a move off
    the DRA driver must evict it whatever its resources are named."""
    return bool(gpu_held(pod, prefixes))


def gpu_held(pod: dict[str, Any], prefixes: Iterable[str]) -> list[str]:
    """What GPU the pod holds, sorted: each resource it requests or limits named with one of ``prefixes``, and
    ``ResourceClaim`` when it holds DRA devices (spec.resourceClaims, status.extendedResourceClaimStatus)."""
    spec = pod.get('spec') or {}
    held = set()
    if spec.get('resourceClaims') or (pod.get('status') or {}).get('extendedResourceClaimStatus'):
        held.add('ResourceClaim')
    for c in (spec.get('containers') or []) + (spec.get('initContainers') or []):
        res = c.get('resources') or {}
        for kind in ('requests', 'limits'):
            held.update(name for name in (res.get(kind) or {}) if any(name.startswith(p) for p in prefixes))
    return sorted(held)


def _owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    for ref in (pod.get('metadata') or {}).get('ownerReferences') or []:
        if ref.get('controller'):
            return ref
    return None


def _owner_kind(pod: dict[str, Any]) -> str | None:
    ref = _owner(pod)
    return ref.get('kind') if ref else None


def daemonset_gpu_pods_of(pods: list[dict[str, Any]], prefixes: Iterable[str],
                          paused_keys: Iterable[str] = ()) -> list[tuple[dict[str, Any], list[str]]]:
    """[(pod, what it holds)] for the unfinished DaemonSet pods that hold a GPU (gpu_held), in the order given: a
    drain keeps DaemonSet pods (kubectl --ignore-daemonsets) and the kubelet keeps a running container's devices, so
    such a pod goes on using its GPU after the drain. Mirror pods and the pods of a GPU client whose label is paused
    (its DaemonSet removes them) are not counted."""
    out = []
    for pod in pods:
        if _finished(pod) or _owner_kind(pod) != 'DaemonSet' or is_client_pod(pod, paused_keys):
            continue
        if MIRROR_ANNOTATION in ((pod.get('metadata') or {}).get('annotations') or {}):
            continue
        held = gpu_held(pod, prefixes)
        if held:
            out.append((pod, held))
    return out


def daemonset_gpu_refusal(name: str, found: list[tuple[dict[str, Any], list[str]]]) -> str:
    """The message that stops a drain without ``keep_gpu_daemonset_pods``: each pod, its DaemonSet, what it holds,
    and what to do."""
    named = []
    for pod, held in found:
        ref = _owner(pod) or {}
        named.append('%s (DaemonSet %s/%s) holds %s' % (pod_name(pod), (pod.get('metadata') or {}).get('namespace'),
                                                        ref.get('name'), ', '.join(held)))
    return ('drain of node %s refused before anything changed (not cordoned, nothing evicted) - DaemonSet pods that '
            'hold a GPU stay on the node (a drain keeps DaemonSet pods; the kubelet keeps a running container\'s '
            'devices), so a plugin that takes the node over would hand the same GPU to another pod: %s. Move the '
            'DaemonSet off the node (a nodeSelector or node affinity that excludes its pool) or let it ask the '
            'resource of the strategy the node moves to, then run again; or set keep_gpu_daemonset_pods=true to accept it'
            % (name, '; '.join(named)))


def _has_local_storage(pod: dict[str, Any]) -> bool:
    return any('emptyDir' in (v or {}) for v in (pod.get('spec') or {}).get('volumes') or [])


def _finished(pod: dict[str, Any]) -> bool:
    return (pod.get('status') or {}).get('phase') in FINISHED_PHASES


def pod_name(pod: dict[str, Any]) -> str:
    meta = pod.get('metadata') or {}
    return '%s/%s' % (meta.get('namespace'), meta.get('name'))


def is_client_pod(pod: dict[str, Any], paused_keys: Iterable[str]) -> bool:
    """A pod of a GPU client DaemonSet the pause removes: its nodeSelector names a paused deploy label."""
    selector = (pod.get('spec') or {}).get('nodeSelector') or {}
    return any(k in selector for k in paused_keys)


def select_pods(pods: list[dict[str, Any]], mode: str, prefixes: Iterable[str], paused_keys: Iterable[str] = (),
                ignore_daemonsets: bool = True, delete_emptydir_data: bool = True, force: bool = True
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """Split the node's pods into (evict, wait_for, kept, refused) lists; ``refused`` is [(reason, pod)].

    ``mode``: ``gpu`` evicts pods that request or limit a resource whose name starts with one of ``prefixes``;
    ``all`` evicts every pod. Checked in this order, the first that applies decides: finished pods are left alone;
    pods of a GPU client whose label was paused are waited for (their DaemonSet removes them); DaemonSet pods are
    kept (refused unless ``ignore_daemonsets``); mirror (static) pods are kept; pods the mode does not select are
    kept; selected pods already being deleted are waited for; an emptyDir volume is refused unless ``delete_emptydir_data``, a
    pod without a controller unless ``force`` (kubectl's filters, pkg/drain/filters.go); the rest is evicted.
    """
    evict: list[dict[str, Any]] = []
    wait: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    refused: list[tuple[str, dict[str, Any]]] = []
    for pod in pods:
        meta = pod.get('metadata') or {}
        if _finished(pod):
            continue
        if is_client_pod(pod, paused_keys):
            wait.append(pod)
            continue
        if _owner_kind(pod) == 'DaemonSet':
            if ignore_daemonsets:
                kept.append(pod)
            else:
                refused.append((REFUSED_DAEMONSET, pod))
            continue
        if MIRROR_ANNOTATION in (meta.get('annotations') or {}):
            kept.append(pod)
            continue
        if not (mode == 'all' or _requests_gpu(pod, prefixes)):
            kept.append(pod)
            continue
        if meta.get('deletionTimestamp'):
            wait.append(pod)
            continue
        if _has_local_storage(pod) and not delete_emptydir_data:
            refused.append((REFUSED_LOCAL_STORAGE, pod))
        elif _owner_kind(pod) is None and not force:
            refused.append((REFUSED_UNMANAGED, pod))
        else:
            evict.append(pod)
    return evict, wait, kept, refused


def pods_holding(pods: list[dict[str, Any]], ignore_daemonsets: bool = True) -> list[str]:
    """``namespace/name`` of the pods that still hold a node, sorted: not finished, not mirror pods, and not DaemonSet
    pods when ``ignore_daemonsets``; a pod being deleted still holds it."""
    left = []
    for pod in pods:
        meta = pod.get('metadata') or {}
        if _finished(pod) or MIRROR_ANNOTATION in (meta.get('annotations') or {}):
            continue
        if ignore_daemonsets and _owner_kind(pod) == 'DaemonSet':
            continue
        left.append(pod_name(pod))
    return sorted(left)


def _api_message(error: Any) -> str:
    """The Status message of an ApiException (its body), else its text."""
    try:
        return json.loads(error.body).get('message') or str(error)
    except Exception:
        return str(error)


class DrainError(Exception):
    """The node could not be drained; ``done`` lists what was changed before."""

    def __init__(self, msg: str, done: list[str] | None = None, restore: dict[str, Any] | None = None,
                 pods_left: list[str] | None = None) -> None:
        super(DrainError, self).__init__(msg)
        self.done = done or []
        self.restore = restore
        self.pods_left = pods_left or []


class Drainer(object):
    """API calls of gpu_node_drain (a CoreV1Api-like object: kube/rest.CoreApi). ``sleep``/``clock`` are replaceable in tests."""

    def __init__(self, core: Any, check_mode: bool = False, sleep: Callable[[float], Any] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core = core
        self.check_mode = check_mode
        self.sleep = sleep
        self.clock = clock
        self.actions: list[str] = []
        self.refusals: dict[str, str] = {}

    def _json(self, response: Any) -> Any:
        return json.loads(response.data)

    def node(self, name: str) -> dict[str, Any] | None:
        """The Node as a dict, None when the cluster has no such node."""
        try:
            return self._json(self.core.read_node(name, _preload_content=False))
        except Exception as e:  # ApiException: 404 means not (yet) in the cluster
            if getattr(e, 'status', None) == 404:
                return None
            raise

    def pods_on(self, name: str, selector: str | None = None) -> list[dict[str, Any]]:
        kwargs = {'field_selector': 'spec.nodeName=%s' % name, '_preload_content': False}
        if selector:
            kwargs['label_selector'] = selector
        return self._json(self.core.list_pod_for_all_namespaces(**kwargs)).get('items') or []

    def patch_node(self, name: str, body: dict[str, Any], action: str) -> None:
        self.actions.append(action)
        if not self.check_mode:
            self.core.patch_node(name, body, _preload_content=False)

    def evict(self, pod: dict[str, Any], grace_period: Any = None, disable_eviction: bool = False) -> bool:
        """True when the pod is on its way out (or gone); False when a disruption budget refused it (429)."""
        meta = pod['metadata']
        delete_options = {} if grace_period is None else {'gracePeriodSeconds': int(grace_period)}
        try:
            if disable_eviction:  # kubectl --disable-eviction: a plain DELETE, disruption budgets are not asked
                self.core.delete_namespaced_pod(meta['name'], meta['namespace'], body=dict(delete_options),
                                                _preload_content=False)
            else:
                body: dict[str, Any] = {'apiVersion': 'policy/v1', 'kind': 'Eviction',
                                        'metadata': {'name': meta['name'], 'namespace': meta['namespace']}}
                if delete_options:
                    body['deleteOptions'] = delete_options
                self.core.create_namespaced_pod_eviction(meta['name'], meta['namespace'], body, _preload_content=False)
            return True
        except Exception as e:
            status = getattr(e, 'status', None)
            if status == 404:
                return True
            if status == 429 and not disable_eviction:  # a PodDisruptionBudget: try again until the timeout
                self.refusals[pod_name(pod)] = _api_message(e)
                return False
            raise

    def mark(self, name: str, node: dict[str, Any], mark: dict[str, Any]) -> None:
        """Set the annotation ``mark['annotation']`` to ``mark['value']`` (its own patch; nothing when it is set)."""
        annotations = (node.get('metadata') or {}).get('annotations') or {}
        key, value = mark['annotation'], str(mark['value'])
        if annotations.get(key) != value:
            self.patch_node(name, {'metadata': {'annotations': {key: value}}}, 'mark node %s: %s=%s' % (name, key, value))

    def wait_for_pods(self, name: str, wait: dict[str, Any], poll: float) -> list[str]:
        """Wait until no pod of ``wait['pod_selector']`` holds the node; returns the pods that still do at the end."""
        deadline = self.clock() + max(0, int(wait['timeout']))
        while True:
            left = pods_holding(self.pods_on(name, wait['pod_selector']))
            if not left or self.check_mode or self.clock() >= deadline:
                return left
            self.sleep(poll)

    def drain(self, name: str, mode: str, prefixes: Iterable[str], timeout: Any, poll: float,
              pod_selector: str | None = None, wait_for: dict[str, Any] | None = None,
              mark: dict[str, Any] | None = None, pause_gpu_clients: bool = True, ignore_daemonsets: bool = True,
              delete_emptydir_data: bool = True, force: bool = True, disable_eviction: bool = False,
              grace_period: Any = None, keep_gpu_daemonset_pods: bool = True) -> dict[str, Any]:
        """Mark, cordon, pause the GPU clients, wait for the jobs, evict the selected pods and wait for them and the
        clients to be gone.

        Returns a result dict; raises DrainError (with what to restore and the pods left) when pods stay past
        ``timeout``, when jobs outlive ``wait_for`` with ``on_timeout=stop``, or when pods may not be evicted.
        Unless ``keep_gpu_daemonset_pods`` a DaemonSet pod that holds a GPU (daemonset_gpu_pods_of()) raises
        DrainError before anything is written - no mark, no cordon.
        """
        self.refusals = {}
        node = self.node(name)
        if node is None:
            return {'node_found': False, 'restore': {}, 'evicted': [], 'paused': {}, 'pods_left': []}
        labels = (node.get('metadata') or {}).get('labels') or {}
        annotations = (node.get('metadata') or {}).get('annotations') or {}
        cordoned = (node.get('spec') or {}).get('unschedulable')
        if not keep_gpu_daemonset_pods:
            planned = pause_labels(labels) if pause_gpu_clients else {}
            found = daemonset_gpu_pods_of(self.pods_on(name), prefixes,
                                          [k for k, v in planned.items() if v == PAUSED])
            if found:
                raise DrainError(daemonset_gpu_refusal(name, found), done=[], restore={},
                                 pods_left=sorted(pod_name(p) for p, _h in found))
        if mark:
            self.mark(name, node, mark)
        # cordoned by someone else: stays cordoned afterwards; by an earlier run of ours: uncordoned afterwards
        cordoned_here = not cordoned or CORDON_ANNOTATION in annotations
        if not cordoned:
            self.patch_node(name, {'metadata': {'annotations': {CORDON_ANNOTATION: 'cordoned'}},
                                   'spec': {'unschedulable': True}}, 'cordon node %s' % name)
        pause = pause_labels(labels) if pause_gpu_clients else {}
        original = dict((k, labels[k]) for k in pause)
        flips = dict((k, v) for k, v in pause.items() if labels.get(k) != v)
        if flips:
            self.patch_node(name, {'metadata': {'labels': flips}}, 'pause GPU clients on %s: %s' % (
                name, ', '.join('%s=%s' % kv for kv in sorted(flips.items()))))
        restore: dict[str, Any] = {'uncordon': cordoned_here, 'labels': original}
        if mark:
            restore['mark'] = mark['annotation']
        waited_jobs: list[str] = []
        if wait_for and wait_for.get('pod_selector'):
            waited_jobs = self.wait_for_pods(name, wait_for, poll)
            if waited_jobs and not self.check_mode and wait_for.get('on_timeout') == 'stop':
                raise DrainError('GPU jobs still run after %ss (wait_for_jobs on_timeout=stop): %s'
                                 % (int(wait_for['timeout']), ', '.join(waited_jobs)),
                                 done=list(self.actions), restore=restore, pods_left=waited_jobs)
        every = self.pods_on(name)
        candidates = self.pods_on(name, pod_selector) if pod_selector else every
        paused_keys = [k for k, v in pause.items() if v == PAUSED]
        clients = [p for p in every if not _finished(p) and is_client_pod(p, paused_keys)]
        client_names = set(pod_name(p) for p in clients)
        evict, wait, kept, refused = select_pods([p for p in candidates if pod_name(p) not in client_names], mode,
                                                 prefixes, (), ignore_daemonsets, delete_emptydir_data, force)
        wait = clients + wait
        result = {'node_found': True, 'restore': restore, 'paused': flips,
                  'evicted': [pod_name(p) for p in evict], 'waited_for': [pod_name(p) for p in wait],
                  'kept': [pod_name(p) for p in kept], 'jobs_left': waited_jobs, 'pods_left': []}
        if refused:
            reasons: list[str] = []
            for reason in [REFUSED_DAEMONSET, REFUSED_LOCAL_STORAGE, REFUSED_UNMANAGED]:
                names = [pod_name(p) for r, p in refused if r == reason]
                if names:
                    reasons.append('cannot evict %s: %s' % (reason, ', '.join(names)))
            raise DrainError('drain of node %s refused before any eviction - %s' % (name, '; '.join(reasons)),
                             done=list(self.actions), restore=restore, pods_left=sorted(pod_name(p) for _r, p in refused))
        if self.check_mode:
            self.actions.extend('evict pod %s' % pod_name(p) for p in evict)
            return result
        deadline = self.clock() + max(0, int(timeout))
        pending = list(evict)
        watched = dict((pod_name(p), (p.get('metadata') or {}).get('uid')) for p in evict + wait)
        verb = 'delete' if disable_eviction else 'evict'
        while True:
            still: list[dict[str, Any]] = []
            for pod in pending:
                if self.evict(pod, grace_period, disable_eviction):
                    self.actions.append('%s pod %s' % (verb, pod_name(pod)))
                else:
                    still.append(pod)
            pending = still
            current = dict((pod_name(p), (p.get('metadata') or {}).get('uid')) for p in self.pods_on(name))
            left = sorted(n for n, uid in watched.items() if n in current and current[n] == uid)
            if not left:
                return result
            if self.clock() >= deadline:
                blocked = set(pod_name(p) for p in pending)
                named = ', '.join(n + (' (eviction refused: PodDisruptionBudget)' if n in blocked else '') for n in left)
                why = ''
                if blocked:
                    why = ' - a disruption budget refused each eviction (HTTP 429, tried again every %ss): %s' % (
                        int(poll), '; '.join(sorted(set(self.refusals[n] for n in blocked if n in self.refusals))))
                raise DrainError('pods still on node %s after %ds: %s%s' % (name, int(timeout), named, why),
                                 done=list(self.actions), restore=restore, pods_left=left)
            self.sleep(poll)

    def restore(self, name: str, restore: dict[str, Any]) -> None:
        """Give the GPU clients back (labels), uncordon when this drain cordoned the node, then remove the mark.

        ``restore`` is what drain() returned; without ``uncordon`` (a run that resumes a stopped one and did not
        drain) the node is uncordoned when it carries the annotation this module sets with its cordon.
        """
        node = self.node(name)
        if node is None:
            return
        labels = (node.get('metadata') or {}).get('labels') or {}
        annotations = (node.get('metadata') or {}).get('annotations') or {}
        want = restore_labels(restore.get('labels'))
        flips = dict((k, v) for k, v in want.items() if labels.get(k) != v)
        if flips:
            self.patch_node(name, {'metadata': {'labels': flips}}, 'restart GPU clients on %s: %s' % (
                name, ', '.join('%s=%s' % kv for kv in sorted(flips.items()))))
        ours = CORDON_ANNOTATION in annotations
        uncordon = restore.get('uncordon') if 'uncordon' in restore else ours
        if uncordon and ((node.get('spec') or {}).get('unschedulable') or ours):
            self.patch_node(name, {'metadata': {'annotations': {CORDON_ANNOTATION: None}},
                                   'spec': {'unschedulable': None}}, 'uncordon node %s' % name)
        if restore.get('mark') and restore['mark'] in annotations:
            self.patch_node(name, {'metadata': {'annotations': {restore['mark']: None}}},
                            'unmark node %s: %s' % (name, restore['mark']))
