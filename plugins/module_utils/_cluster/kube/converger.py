# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_converge's engine: apply Kubernetes objects only when they differ from the live ones.

Works on a kubernetes DynamicClient (kube/access.get_client); reads first, writes (server-side apply, or a JSON merge
patch of labels for labels-only kinds) only when the desired fields are not already live.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import time
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import native

# The errors of both dynamic clients kube/access.get_client hands out: kube/native's (these names), and the kubernetes
# client's (its ApiException, NotFoundError, ResourceNotFoundError) once that client is loaded - it is not imported
# here, so that a run on kube/native never pays for it. The handlers below call these functions when an error comes.
ApiException = native.ApiError
NotFoundError = native.NotFound
ResourceNotFoundError = native.ResourceNotFound


def _with_client(ours: type[BaseException], module: str, name: str) -> tuple[Any, ...]:
    loaded = sys.modules.get(module)
    theirs = getattr(loaded, name, None) if loaded is not None else None
    return (ours, theirs) if isinstance(theirs, type) and issubclass(theirs, BaseException) else (ours,)


def api_errors() -> tuple[Any, ...]:
    """An answer of the API server (the dynamic clients' errors are ones)."""
    return _with_client(ApiException, 'kubernetes.client.rest', 'ApiException')


def not_found() -> tuple[Any, ...]:
    return _with_client(NotFoundError, 'kubernetes.dynamic.exceptions', 'NotFoundError')


def resource_not_found() -> tuple[Any, ...]:
    return _with_client(ResourceNotFoundError, 'kubernetes.dynamic.exceptions', 'ResourceNotFoundError')


USER_PREFIX = 'user.gpuops.io/'


class ConvergeError(Exception):
    """A problem that stops the run; the counts so far stay on the Converger."""


NOISY_METADATA = ('managedFields', 'resourceVersion', 'uid', 'creationTimestamp', 'generation', 'selfLink')


def _scalar_equal(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if isinstance(want, (int, float)) or isinstance(have, (int, float)):
        return str(want) == str(have)
    return want == have


# A Pod's lists that kube-apiserver's admission plugins append to when the pod is created: DefaultTolerationSeconds
# (spec.tolerations: node.kubernetes.io/not-ready and /unreachable, NoExecute, 300 s) and ServiceAccount (spec.volumes:
# kube-api-access-*; volumeMounts of every container and init container). The live list starts with what was sent.
# docs/conformance/kubernetes-core.md K8S-10, K8S-11.
POD_APPENDED_LISTS = frozenset([('spec', 'tolerations'), ('spec', 'volumes'), ('spec', 'containers', 'volumeMounts'),
                                ('spec', 'initContainers', 'volumeMounts')])


def is_subset(want: Any, have: Any, prefix_lists: frozenset[tuple[str, ...]] = frozenset(),
              path: tuple[str, ...] = ()) -> bool:
    """True when every field of want is in have with the same value (lists: same length, element-wise; a list whose
    path (field names from the top, list positions left out) is in prefix_lists: want's elements start have)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(k in have and is_subset(v, have[k], prefix_lists, path + (k,)) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list):
            return False
        if len(want) > len(have) or (len(want) != len(have) and path not in prefix_lists):
            return False
        return all(is_subset(w, h, prefix_lists, path) for w, h in zip(want, have))
    return _scalar_equal(want, have)


def differing(want: Any, have: Any, prefix_lists: frozenset[tuple[str, ...]] = frozenset(),
              path: tuple[str, ...] = ()) -> list[str]:
    """The dotted paths of want's fields that have lacks or holds with another value (is_subset's answer, named)."""
    if isinstance(want, dict) and isinstance(have, dict):
        out = []
        for k, v in sorted(want.items()):
            if k not in have:
                out.append('.'.join(path + (k,)))
            else:
                out.extend(differing(v, have[k], prefix_lists, path + (k,)))
        return out
    if is_subset(want, have, prefix_lists, path):
        return []
    return ['.'.join(path) or '(the object)']


# The fields of a Pod's spec an update may change (k8s.io/kubernetes pkg/apis/core/validation ValidatePodUpdate:
# "pod updates may not change fields other than spec.containers[*].image, spec.initContainers[*].image,
# spec.activeDeadlineSeconds, spec.tolerations (only additions to existing tolerations),
# spec.terminationGracePeriodSeconds"; kube-apiserver v1.37.2 answers 422 with that message).
POD_MUTABLE_FIELDS = ('tolerations', 'activeDeadlineSeconds', 'terminationGracePeriodSeconds')


def pod_update_allowed(want: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether the API server accepts an update of a Pod from spec ``live`` to spec ``want`` (as far as want says):
    want agrees with live on every field but the mutable ones (containers' and init containers' images, the fields
    of POD_MUTABLE_FIELDS)."""
    rest = dict((k, v) for k, v in want.items() if k not in POD_MUTABLE_FIELDS)
    for field in ('containers', 'initContainers'):
        if isinstance(rest.get(field), list) and isinstance(live.get(field), list) \
                and len(rest[field]) == len(live[field]):
            rest[field] = [dict(w, image=h['image']) if isinstance(w, dict) and isinstance(h, dict) and 'image' in h
                           else w for w, h in zip(rest[field], live[field])]
    return is_subset({'spec': rest}, {'spec': live}, POD_APPENDED_LISTS)


def appended_lists(d: dict[str, Any]) -> frozenset[tuple[str, ...]]:
    """The lists the API server may have appended to in the live copy of definition d (see POD_APPENDED_LISTS)."""
    return POD_APPENDED_LISTS if d.get('apiVersion') == 'v1' and d.get('kind') == 'Pod' else frozenset()


def desired_hash(obj: dict[str, Any], annotation: str) -> str:
    o = copy.deepcopy(obj)
    meta = o.get('metadata') or {}
    if annotation in (meta.get('annotations') or {}):
        del meta['annotations'][annotation]
        if not meta['annotations']:
            del meta['annotations']
    return hashlib.sha256(json.dumps(o, sort_keys=True, separators=(',', ':')).encode('utf-8')).hexdigest()[:20]


def with_hash(obj: dict[str, Any], annotation: str) -> dict[str, Any]:
    o = copy.deepcopy(obj)
    h = desired_hash(o, annotation)
    o.setdefault('metadata', {}).setdefault('annotations', {})[annotation] = h
    return o


def clean(obj: dict[str, Any] | None) -> dict[str, Any]:
    if not obj:
        return {}
    o = copy.deepcopy(obj)
    meta = o.get('metadata') or {}
    for k in NOISY_METADATA:
        meta.pop(k, None)
    o.pop('status', None)
    return o


def ident(d: dict[str, Any]) -> tuple[Any, Any, Any]:
    meta = d.get('metadata') or {}
    return d.get('kind'), meta.get('namespace'), meta.get('name')


class Converger(object):
    def __init__(self, params: dict[str, Any], client: Any, check_mode: bool = False, diff: bool = False) -> None:
        self.client = client
        self.p = params
        self.check_mode = check_mode
        self.diff = diff
        self.counts = dict(created=0, updated=0, deleted=0, unchanged=0)
        self.objects: list[dict[str, Any]] = []
        self.diffs: list[dict[str, Any]] = []
        self.backups: list[str] = []
        self.warnings: list[str] = []
        self.users: list[dict[str, Any]] = []

    # Objects several runs share (a strategy's RuntimeClass, shared by every pool of the NVIDIA family): each run that
    # applies one records its user (params 'user', e.g. the pool) in an annotation of its own, prefix
    # 'user_annotation_prefix', written with a JSON merge patch (not server-side apply: another user's apply with the
    # same field manager would drop it). An 'absent' run removes its own record and deletes the object only when no
    # other user is recorded and 'keep' is false, with the resourceVersion it decided on as a precondition: a user
    # recorded meanwhile (a concurrent run of another inventory, team or AWX slice) makes the delete fail (409) and the
    # decision is taken again. 'user_labels' picks the definitions that carry this record (all when empty).
    def user_key(self) -> str | None:
        return (self.p.get('user_annotation_prefix') or USER_PREFIX) + self.p['user'] if self.p.get('user') else None

    def shared(self, d: dict[str, Any]) -> bool:
        if not self.p.get('user'):
            return False
        labels = (d.get('metadata') or {}).get('labels') or {}
        return all(labels.get(k) == str(v) for k, v in (self.p.get('user_labels') or {}).items())

    def users_of(self, live: dict[str, Any] | None) -> list[str]:
        prefix = self.p.get('user_annotation_prefix') or USER_PREFIX
        annotations = ((live or {}).get('metadata') or {}).get('annotations') or {}
        return sorted(k[len(prefix):] for k in annotations if k.startswith(prefix))

    def foreign_users(self, live: dict[str, Any]) -> list[str]:
        """The users recorded on ``live`` that this run does not speak for: not its own, not in 'known_users'."""
        known = set(self.p.get('known_users') or []) | {self.p['user']}
        return [u for u in self.users_of(live) if u not in known]

    def check_shared(self, defs: list[dict[str, Any]]) -> None:
        """Before anything is written (state=present, 'user' and 'known_users' given): refuse to change a shared
        object on which users this run does not know recorded themselves (pools of another inventory, team or AWX
        job that applied it with other settings: the last run would win, and each run would undo the other's). The
        error names each object, its other users and the fields that would change."""
        if not self.p.get('user') or self.p.get('known_users') is None:
            return
        problems: list[str] = []
        for d in defs:
            if not self.shared(d) or d.get('kind') in self.p['labels_only_kinds']:
                continue
            live = self.get(self.resource(d), d)
            foreign = self.foreign_users(live) if live is not None else []
            if not foreign:
                continue
            want = with_hash(d, self.p['hash_annotation']) if self.p['hash_annotation'] else copy.deepcopy(d)
            hash_path = 'metadata.annotations.%s' % self.p['hash_annotation']
            paths = [x for x in differing(want, live, appended_lists(d)) if x != hash_path]
            if not paths and is_subset(want, live, appended_lists(d)):
                continue
            kind, ns, name = ident(d)
            problems.append('%s %s%s (recorded users %s) would change in %s' % (
                kind, (ns + '/') if ns else '', name, ', '.join(foreign), ', '.join(paths[:8]) or 'its hash only'))
        if problems:
            raise ConvergeError(
                'Refusing to change shared objects that users this run does not know (%s) recorded themselves on: %s. '
                'Another inventory, team or AWX job applies them with other settings, and each run would undo the '
                'other\'s. Give the pools that share them the same settings everywhere, or uninstall the other users '
                'first (their records go with them); nothing was changed.'
                % (', '.join(sorted(set(self.p.get('known_users') or []) | {self.p['user']})), '; '.join(problems)))

    def note_user(self, d: dict[str, Any], action: str) -> None:
        kind, ns, name = ident(d)
        self.users.append({'kind': kind, 'namespace': ns, 'name': name, 'user': self.p['user'], 'action': action})

    def register(self, res: Any, d: dict[str, Any], live: dict[str, Any] | None) -> None:
        """Record this run's user on ``d`` (``live``: the object as the apply left it, None if it is not there)."""
        kind, ns, name = ident(d)
        key = self.user_key()
        for _attempt in range(3):
            if live is not None and self.p['user'] in self.users_of(live):
                return
            if self.check_mode:
                return self.note_user(d, 'registered')
            if live is None:  # removed by a concurrent run since this one applied it: apply it again
                self.apply(res, d)
            try:
                self.client.patch(res, body={'metadata': {'annotations': {key: 'true'}}}, name=name,
                                  namespace=ns if res.namespaced else None, content_type='application/merge-patch+json',
                                  field_manager=self.p['field_manager'])
                return self.note_user(d, 'registered')
            except not_found():
                live = None
        raise ConvergeError('%s %s%s was deleted three times while this run recorded its user %s on it'
                            % (kind, (ns + '/') if ns else '', name, self.p['user']))

    def release(self, res: Any, d: dict[str, Any], live: dict[str, Any] | None) -> None:
        """state=absent for a shared object: delete it when no other user is recorded (and not 'keep'), else remove
        this run's record. The decision is made on one read and the delete carries that read's resourceVersion; this
        run writes nothing to the object before it (its own write would make the object's controller write too, and
        the precondition fail)."""
        kind, ns, name = ident(d)
        where = '%s %s%s' % (kind, (ns + '/') if ns else '', name)
        for _attempt in range(5):
            if live is None:
                return self.record(d, 'unchanged')
            users = self.users_of(live)
            others = [u for u in users if u != self.p['user']]
            if others or self.p.get('keep'):
                if self.p['user'] in users:
                    if not self.check_mode:
                        try:
                            self.client.patch(res, body={'metadata': {'annotations': {self.user_key(): None}}},
                                              name=name, namespace=ns if res.namespaced else None,
                                              content_type='application/merge-patch+json',
                                              field_manager=self.p['field_manager'])
                        except not_found():
                            return self.record(d, 'unchanged')
                    self.note_user(d, 'released')
                self.objects.append({'kind': kind, 'namespace': ns, 'name': name, 'action': 'kept', 'users': others})
                return
            if not self.managed(d, live):
                return
            if self.check_mode:
                return self.record(d, 'deleted', live, None)
            try:
                self.client.delete(res, name=name, namespace=ns if res.namespaced else None,
                                   body={'propagationPolicy': 'Background',
                                         'preconditions': {'resourceVersion': live['metadata']['resourceVersion']}})
                return self.record(d, 'deleted', live, None)
            except not_found():
                return self.record(d, 'unchanged')
            except api_errors() as e:
                if e.status != 409:
                    raise
                live = self.get(res, d)  # changed since this run read it (a user recorded meanwhile?): decide again
        raise ConvergeError('%s changed five times while this run decided whether to delete it; nothing deleted' % where)

    def resource(self, d: dict[str, Any]) -> Any:
        try:
            return self.client.resources.get(api_version=d['apiVersion'], kind=d['kind'])
        except resource_not_found():
            raise ConvergeError('the cluster does not serve %s %s (needed for %s); install its CRD first'
                                % (d['apiVersion'], d['kind'], ident(d)[2]))

    def get(self, res: Any, d: dict[str, Any]) -> dict[str, Any] | None:
        kind, ns, name = ident(d)
        try:
            return self.client.get(res, name=name, namespace=ns if res.namespaced else None).to_dict()
        except not_found():
            return None

    def record(self, d: dict[str, Any], action: str, before: dict[str, Any] | None = None,
               after: dict[str, Any] | None = None) -> None:
        kind, ns, name = ident(d)
        self.counts[action] += 1
        self.objects.append({'kind': kind, 'namespace': ns, 'name': name, 'action': action})
        if action != 'unchanged' and self.diff:
            label = '%s %s%s' % (kind, (ns + '/') if ns else '', name)
            self.diffs.append({'before_header': label, 'after_header': label,
                               'before': clean(before), 'after': clean(after)})

    def backup(self, res: Any, d: dict[str, Any], live: dict[str, Any]) -> None:
        kind, ns, name = ident(d)
        bns = self.p['backup_namespace'] or (ns if res.namespaced else 'kube-system')
        bname = ('gpuops-backup-%s-%s' % (kind.lower(), name))[:253]
        cm_res = self.client.resources.get(api_version='v1', kind='ConfigMap')
        try:
            self.client.get(cm_res, name=bname, namespace=bns)
            return
        except not_found():
            pass
        body = {'apiVersion': 'v1', 'kind': 'ConfigMap',
                'metadata': {'name': bname, 'namespace': bns,
                             'labels': {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu', 'gpuops.io/backup-of-kind': kind}},
                'data': {'object.json': json.dumps(clean(live), indent=2, sort_keys=True)}}
        if not self.check_mode:
            self.create_once(cm_res, body, bname, bns)
        self.backups.append('%s/%s' % (bns, bname))

    def create_once(self, res: Any, body: dict[str, Any], name: str, namespace: str | None) -> None:
        """POST a new object so that it exists once: a create is not idempotent, so the retry policy (kube/access)
        does not resend one that may have landed (connection lost after sending: status 0). Re-read then: there
        means it landed; absent means send it again, once. A conflict (409, already exists: an earlier try that
        landed, or another writer) is settled by reading what is there."""
        for attempt in (1, 2):
            try:
                self.client.create(res, body=body, namespace=namespace)
                return
            except api_errors() as e:
                if e.status not in (0, 409):
                    raise
                try:
                    self.client.get(res, name=name, namespace=namespace)
                    return  # it is there
                except not_found():
                    if attempt == 2 or e.status == 409:
                        raise

    def present(self, d: dict[str, Any]) -> dict[str, Any] | None:
        res = self.resource(d)
        kind, ns, name = ident(d)
        live = self.get(res, d)
        if kind in self.p['labels_only_kinds']:
            self.labels(res, d, live, present=True)
            return None
        want = with_hash(d, self.p['hash_annotation']) if self.p['hash_annotation'] else copy.deepcopy(d)
        if live is not None and is_subset(want, live, appended_lists(d)):
            self.record(d, 'unchanged')
            return live
        if live is not None and self.p['backup'] and self.p['hash_annotation'] and \
                self.p['hash_annotation'] not in ((live.get('metadata') or {}).get('annotations') or {}):
            self.backup(res, d, live)
        if live is not None and self.replaces(d, live):
            after = want if self.check_mode else self.replace(res, d, live)
        else:
            after = want if self.check_mode else self.apply(res, d)
        self.record(d, 'created' if live is None else 'updated', live, after)
        return after

    def replaces(self, d: dict[str, Any], live: dict[str, Any]) -> bool:
        """Whether ``d`` must replace ``live`` instead of updating it: a Pod (v1) this module applied (its hash
        annotation) whose spec differs, since kube-apiserver refuses a change of a Pod's spec but for a few fields
        (pod updates may not change fields other than spec.containers[*].image, ...: 422; the validation workloads of
        role gpu_sharing_stack after a changed RuntimeClass name or MIG geometry). A Pod the module did not apply is
        never replaced (the apply then fails with the API server's message)."""
        workload = (d.get('apiVersion'), d.get('kind')) == ('apps/v1', 'Deployment')
        if (d.get('apiVersion') != 'v1' or d.get('kind') != 'Pod') and not workload:
            return False
        annotations = (live.get('metadata') or {}).get('annotations') or {}
        if not self.p['hash_annotation'] or self.p['hash_annotation'] not in annotations:
            return False
        if workload:
            # a Deployment's selector cannot change (apps/v1: 422 field is immutable): one this module applied
            # whose selector changed is replaced (a pool's validation Deployment, whose selector names its pool since
            # pools of one strategy share a namespace)
            return ((d.get('spec') or {}).get('selector') or {}) != ((live.get('spec') or {}).get('selector') or {})
        return not pod_update_allowed(d.get('spec') or {}, live.get('spec') or {})

    def replace(self, res: Any, d: dict[str, Any], live: dict[str, Any]) -> dict[str, Any] | None:
        """Delete ``live`` (this uid only, no grace period: the object is gone at once) and create ``d``."""
        kind, ns, name = ident(d)
        body: dict[str, Any] = {'gracePeriodSeconds': 0, 'propagationPolicy': 'Background'}
        if (live.get('metadata') or {}).get('uid'):
            body['preconditions'] = {'uid': live['metadata']['uid']}
        try:
            self.client.delete(res, name=name, namespace=ns, body=body)
        except not_found():
            pass
        for _attempt in range(50):
            if self.get(res, d) is None:
                break
            time.sleep(0.2)
        else:
            raise ConvergeError('%s %s/%s: still there 10 s after its deletion (to replace it: a Pod\'s spec cannot be '
                                'changed)' % (kind, ns, name))
        want = with_hash(d, self.p['hash_annotation']) if self.p['hash_annotation'] else copy.deepcopy(d)
        self.create_once(res, want, name, ns)
        return self.get(res, d)

    def apply(self, res: Any, d: dict[str, Any]) -> dict[str, Any]:
        kind, ns, name = ident(d)
        want = with_hash(d, self.p['hash_annotation']) if self.p['hash_annotation'] else copy.deepcopy(d)
        return self.client.patch(res, body=want, name=name, namespace=ns if res.namespaced else None,
                                 content_type='application/apply-patch+yaml', field_manager=self.p['field_manager'],
                                 force_conflicts=True).to_dict()

    def labels(self, res: Any, d: dict[str, Any], live: dict[str, Any] | None, present: bool) -> None:
        kind, ns, name = ident(d)
        want = (d.get('metadata') or {}).get('labels') or {}
        if live is None:
            self.warnings.append('%s %s does not exist; its labels were not %s' % (kind, name, 'set' if present else 'removed'))
            self.objects.append({'kind': kind, 'namespace': ns, 'name': name, 'action': 'missing'})
            return
        have = (live.get('metadata') or {}).get('labels') or {}
        if present:
            patch = dict((k, str(v)) for k, v in want.items() if have.get(k) != str(v))
        else:
            patch = dict((k, None) for k in want if k in have)
        if not patch:
            return self.record(d, 'unchanged')
        after = copy.deepcopy(live)
        if not self.check_mode:
            after = self.client.patch(res, body={'metadata': {'labels': patch}}, name=name,
                                      namespace=ns if res.namespaced else None,
                                      content_type='application/merge-patch+json',
                                      field_manager=self.p['field_manager']).to_dict()
        else:
            labels = after.setdefault('metadata', {}).setdefault('labels', {})
            for k, v in patch.items():
                if v is None:
                    labels.pop(k, None)
                else:
                    labels[k] = v
        before = {'metadata': {'name': name, 'labels': have}}
        self.record(d, 'updated' if present else 'deleted', before,
                    {'metadata': {'name': name, 'labels': (after.get('metadata') or {}).get('labels') or {}}})

    def absent(self, d: dict[str, Any]) -> None:
        res = self.resource(d)
        kind, ns, name = ident(d)
        live = self.get(res, d)
        if kind in self.p['labels_only_kinds']:
            return self.labels(res, d, live, present=False)
        if self.shared(d):
            return self.release(res, d, live)
        if live is None:
            return self.record(d, 'unchanged')
        if not self.managed(d, live):
            return
        if not self.check_mode:
            try:
                self.client.delete(res, name=name, namespace=ns if res.namespaced else None,
                                   body={'propagationPolicy': 'Background'})
            except not_found():
                pass
        self.record(d, 'deleted', live, None)

    def managed(self, d: dict[str, Any], live: dict[str, Any]) -> bool:
        """Whether absent may delete ``live``: applied by this module (its hash annotation), or delete_unmanaged."""
        kind, ns, name = ident(d)
        annotations = (live.get('metadata') or {}).get('annotations') or {}
        if not self.p['delete_unmanaged'] and self.p['hash_annotation'] and self.p['hash_annotation'] not in annotations:
            self.warnings.append('%s %s%s was not applied by this module (no %s annotation); left in place'
                                 % (kind, (ns + '/') if ns else '', name, self.p['hash_annotation']))
            self.objects.append({'kind': kind, 'namespace': ns, 'name': name, 'action': 'kept'})
            return False
        return True

    def result(self) -> dict[str, Any]:
        r = dict(changed=bool(self.counts['created'] or self.counts['updated'] or self.counts['deleted'] or self.backups
                              or self.users),
                 objects=self.objects, backups=self.backups, warnings_list=self.warnings, users=self.users, **self.counts)
        if self.diff:
            r['diff'] = self.diffs
        return r


def validate_definitions(defs: list[dict[str, Any]]) -> str | None:
    """None, or the error for the first definition without apiVersion, kind or metadata.name."""
    for i, d in enumerate(defs):
        kind, ns, name = ident(d)
        if not d.get('apiVersion') or not kind or not name:
            return 'definitions[%d] needs apiVersion, kind and metadata.name; got %s' % (i, json.dumps(d)[:300])
    return None


def prune(conv: Converger, defs: list[dict[str, Any]], rules: list[dict[str, Any]] | None) -> dict[str, Any]:
    """After a present run: for each rule ({label_selector, kinds: [{api_version, kind}]}), delete the objects of its
    kinds that carry its labels and are not among ``defs`` - what a caller rendered before and no longer renders (a
    pool's MIG manager switched off, a strategy's shared objects of a changed registration mode, a previous namespace).
    Only objects this module applied (its hash annotation) go, as with state=absent; every namespace is listed; a kind
    the cluster does not serve has nothing to prune. Returns conv.result()."""
    for rule in rules or []:
        _prune(conv, defs, rule['label_selector'], rule['kinds'])
    return conv.result()


def _prune(conv: Converger, defs: list[dict[str, Any]], label_selector: str, kinds: list[dict[str, str]]) -> None:
    want = set(ident(d) for d in defs)
    for k in kinds:
        probe = {'apiVersion': k['api_version'], 'kind': k['kind'], 'metadata': {'name': '-'}}
        try:
            res = conv.resource(probe)
        except ConvergeError:
            continue
        try:
            items = conv.client.get(res, label_selector=label_selector).to_dict().get('items') or []
        except api_errors() as e:
            raise ConvergeError('listing %s %s with %s: API error %s %s'
                                % (k['api_version'], k['kind'], label_selector, e.status, e.reason))
        for item in items:
            meta = item.get('metadata') or {}
            named: dict[str, Any] = {'name': meta.get('name')}
            if meta.get('namespace'):
                named['namespace'] = meta['namespace']
            d: dict[str, Any] = {'apiVersion': k['api_version'], 'kind': k['kind'], 'metadata': named}
            if ident(d) in want or k['kind'] in conv.p['labels_only_kinds']:
                continue
            if not conv.managed(d, item):
                continue
            if not conv.check_mode:
                try:
                    conv.client.delete(res, name=d['metadata']['name'], namespace=meta.get('namespace'),
                                       body={'propagationPolicy': 'Background'})
                except not_found():
                    continue
            conv.record(d, 'deleted', item, None)


def converge(conv: Converger, defs: list[dict[str, Any]], state: str) -> dict[str, Any]:
    """Run conv over defs (reverse order for absent). Raises ConvergeError naming the object on an API error."""
    order = defs if state == 'present' else list(reversed(defs))
    if state == 'present':
        try:
            conv.check_shared(defs)
        except api_errors() as e:
            raise ConvergeError('reading the shared objects: API error %s %s: %s' % (e.status, e.reason, (e.body or '')[:1000]))
    for d in order:
        try:
            if state == 'present':
                live = conv.present(d)
                if conv.shared(d) and d.get('kind') not in conv.p['labels_only_kinds']:
                    conv.register(conv.resource(d), d, live)
            else:
                conv.absent(d)
        except api_errors() as e:
            kind, ns, name = ident(d)
            where = '%s %s%s' % (kind, (ns + '/') if ns else '', name)
            raise ConvergeError('%s: API error %s %s: %s' % (where, e.status, e.reason, (e.body or '')[:1000]))
    return conv.result()
