# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take a GPU node out of service around a MIG change and give it back (module gpu_node_drain).

The decisions (which pods are GPU pods, which GPU-client labels to flip and to what) are plain functions tested on
their own; ``Drainer`` makes the API calls with the kubernetes Python client.

The GPU-client pause follows NVIDIA's k8s-mig-manager (NVIDIA/mig-parted, pkg/mig/reconfigure/reconfigure.go,
v0.15.0): the node labels that the GPU clients' DaemonSets select on are set to ``paused-for-mig-change`` (a label
that says ``false`` stays ``false``), the DaemonSet controller then removes those pods, and after the change each
label is set to ``true`` (``false`` stays ``false``). Unlike mig-manager, labels the node does not carry are left
absent: no DaemonSet selecting on them runs on the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

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
# extended resources of the sharing strategies a node may leave for MIG (prefix match on the resource name)
DEFAULT_GPU_RESOURCES = ('nvidia.com/', 'aliyun.com/gpu', 'volcano.sh/vgpu', 'tencent.com/vcuda')
MIRROR_ANNOTATION = 'kubernetes.io/config.mirror'
# set with the cordon and removed with the uncordon: a node this module cordoned in a run that stopped (a busy GPU,
# a MIG mode change waiting for a reset) is uncordoned by the run that finishes the change
CORDON_ANNOTATION = 'gpuops.io/mig-change'


def pause_labels(node_labels):
    """{label: value} that pauses the GPU clients: only labels the node carries, ``false`` stays ``false``."""
    node_labels = node_labels or {}
    return dict((k, 'false' if node_labels[k] == 'false' else PAUSED) for k in CLIENT_DEPLOY_LABELS if k in node_labels)


def restore_labels(original):
    """{label: value} that gives the GPU clients back: ``true``, except a label that said ``false``."""
    return dict((k, 'false' if v == 'false' else 'true') for k, v in (original or {}).items())


def _requests_gpu(pod, prefixes):
    spec = pod.get('spec') or {}
    for c in (spec.get('containers') or []) + (spec.get('initContainers') or []):
        res = c.get('resources') or {}
        for kind in ('requests', 'limits'):
            for name in (res.get(kind) or {}):
                if any(name.startswith(p) for p in prefixes):
                    return True
    return False


def _owner_kind(pod):
    for ref in (pod.get('metadata') or {}).get('ownerReferences') or []:
        if ref.get('controller'):
            return ref.get('kind')
    return None


def pod_name(pod):
    meta = pod.get('metadata') or {}
    return '%s/%s' % (meta.get('namespace'), meta.get('name'))


def is_client_pod(pod, paused_keys):
    """A pod of a GPU client DaemonSet the pause removes: its nodeSelector names a paused deploy label."""
    selector = (pod.get('spec') or {}).get('nodeSelector') or {}
    return any(k in selector for k in paused_keys)


def select_pods(pods, mode, prefixes, paused_keys=()):
    """Split the node's pods into (evict, wait_for, kept) lists of pods.

    ``mode``: ``gpu`` evicts pods that request or limit a resource whose name starts with one of ``prefixes``;
    ``all`` evicts every pod. Never evicted: finished pods, mirror (static) pods, DaemonSet pods (they would come
    back at once; GPU clients among them go through the label pause and are waited for) and pods already being
    deleted (waited for).
    """
    evict, wait, kept = [], [], []
    for pod in pods:
        meta = pod.get('metadata') or {}
        if (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
            continue
        if is_client_pod(pod, paused_keys):
            wait.append(pod)
            continue
        if MIRROR_ANNOTATION in (meta.get('annotations') or {}) or _owner_kind(pod) == 'DaemonSet':
            kept.append(pod)
            continue
        gpu = _requests_gpu(pod, prefixes)
        if mode == 'all' or gpu:
            (wait if meta.get('deletionTimestamp') else evict).append(pod)
        else:
            kept.append(pod)
    return evict, wait, kept


class DrainError(Exception):
    """The node could not be drained; ``done`` lists what was changed before."""

    def __init__(self, msg, done=None, restore=None):
        super(DrainError, self).__init__(msg)
        self.done = done or []
        self.restore = restore


class Drainer(object):
    """API calls of gpu_node_drain (kubernetes.client.CoreV1Api). ``sleep``/``clock`` are replaceable in tests."""

    def __init__(self, core, check_mode=False, sleep=time.sleep, clock=time.monotonic):
        self.core = core
        self.check_mode = check_mode
        self.sleep = sleep
        self.clock = clock
        self.actions = []

    def _json(self, response):
        return json.loads(response.data)

    def node(self, name):
        """The Node as a dict, None when the cluster has no such node."""
        try:
            return self._json(self.core.read_node(name, _preload_content=False))
        except Exception as e:  # ApiException: 404 means not (yet) in the cluster
            if getattr(e, 'status', None) == 404:
                return None
            raise

    def pods_on(self, name):
        resp = self.core.list_pod_for_all_namespaces(field_selector='spec.nodeName=%s' % name, _preload_content=False)
        return self._json(resp).get('items') or []

    def patch_node(self, name, body, action):
        self.actions.append(action)
        if not self.check_mode:
            self.core.patch_node(name, body, _preload_content=False)

    def evict(self, pod):
        meta = pod['metadata']
        body = {'apiVersion': 'policy/v1', 'kind': 'Eviction',
                'metadata': {'name': meta['name'], 'namespace': meta['namespace']}}
        try:
            self.core.create_namespaced_pod_eviction(meta['name'], meta['namespace'], body, _preload_content=False)
            return True
        except Exception as e:
            status = getattr(e, 'status', None)
            if status == 404:
                return True
            if status == 429:  # a PodDisruptionBudget: try again until the timeout
                return False
            raise

    def drain(self, name, mode, prefixes, timeout, poll):
        """Cordon, pause the GPU clients, evict the selected pods and wait for them and the clients to be gone.

        Returns a result dict; raises DrainError (with what to restore) when pods stay past ``timeout``.
        """
        node = self.node(name)
        if node is None:
            return {'node_found': False, 'restore': {}, 'evicted': [], 'paused': {}}
        labels = (node.get('metadata') or {}).get('labels') or {}
        annotations = (node.get('metadata') or {}).get('annotations') or {}
        cordoned = (node.get('spec') or {}).get('unschedulable')
        # cordoned by someone else: stays cordoned afterwards; by an earlier run of ours: uncordoned afterwards
        cordoned_here = not cordoned or CORDON_ANNOTATION in annotations
        if not cordoned:
            self.patch_node(name, {'metadata': {'annotations': {CORDON_ANNOTATION: 'cordoned'}},
                                   'spec': {'unschedulable': True}}, 'cordon node %s' % name)
        pause = pause_labels(labels)
        original = dict((k, labels[k]) for k in pause)
        flips = dict((k, v) for k, v in pause.items() if labels.get(k) != v)
        if flips:
            self.patch_node(name, {'metadata': {'labels': flips}}, 'pause GPU clients on %s: %s' % (
                name, ', '.join('%s=%s' % kv for kv in sorted(flips.items()))))
        restore = {'uncordon': cordoned_here, 'labels': original}
        evict, wait, kept = select_pods(self.pods_on(name), mode, prefixes, [k for k, v in pause.items() if v == PAUSED])
        result = {'node_found': True, 'restore': restore, 'paused': flips,
                  'evicted': [pod_name(p) for p in evict], 'waited_for': [pod_name(p) for p in wait],
                  'kept': [pod_name(p) for p in kept]}
        if self.check_mode:
            self.actions.extend('evict pod %s' % pod_name(p) for p in evict)
            return result
        deadline = self.clock() + max(0, int(timeout))
        pending = list(evict)
        watched = dict((pod_name(p), (p.get('metadata') or {}).get('uid')) for p in evict + wait)
        while True:
            still = []
            for pod in pending:
                if self.evict(pod):
                    self.actions.append('evict pod %s' % pod_name(pod))
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
                raise DrainError('pods still on node %s after %d s: %s' % (name, int(timeout), named),
                                 done=list(self.actions), restore=restore)
            self.sleep(poll)

    def restore(self, name, restore):
        """Give the GPU clients back (labels) and uncordon when this drain cordoned the node."""
        node = self.node(name)
        if node is None:
            return
        labels = (node.get('metadata') or {}).get('labels') or {}
        want = restore_labels(restore.get('labels'))
        flips = dict((k, v) for k, v in want.items() if labels.get(k) != v)
        if flips:
            self.patch_node(name, {'metadata': {'labels': flips}}, 'restart GPU clients on %s: %s' % (
                name, ', '.join('%s=%s' % kv for kv in sorted(flips.items()))))
        if restore.get('uncordon') and ((node.get('spec') or {}).get('unschedulable')
                                        or CORDON_ANNOTATION in ((node.get('metadata') or {}).get('annotations') or {})):
            self.patch_node(name, {'metadata': {'annotations': {CORDON_ANNOTATION: None}},
                                   'spec': {'unschedulable': None}}, 'uncordon node %s' % name)
