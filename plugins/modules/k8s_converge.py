#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: k8s_converge
short_description: Bring Kubernetes objects to a desired state with no write request when they already match
version_added: 0.1.0
description:
  - Reads each object of O(definitions) and compares the desired fields with the live object. Only when they differ
    does it write, with server-side apply (field manager O(field_manager), conflicts forced), so a re-run against an
    unchanged cluster issues read requests only.
  - Every applied object carries an annotation (O(hash_annotation)) with a hash of its desired state, so fields dropped
    from the desired state are noticed and removed by the next apply.
  - Kinds in O(labels_only_kinds) (by default V(Node)) are never created or deleted; only the labels given in the
    definition are added (V(present)) or removed (V(absent)) with a JSON merge patch.
  - With O(state=absent), objects that exist are deleted, but only those carrying O(hash_annotation) (objects this
    module applied) unless O(delete_unmanaged=true).
  - Used by role M(gpuops.k8s_gpu.gpu_sharing_stack); C(kubernetes.core.k8s) sends a write request per object on every
    run, which this module avoids.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes
  - gpuops.k8s_gpu.attributes.actionable
options:
  definitions:
    description:
      - Kubernetes objects (dictionaries with C(apiVersion), C(kind), C(metadata.name), and C(metadata.namespace) for
        namespaced kinds).
      - Quantities should be strings (V("1"), not V(1)), as the API server returns them; numbers are compared by
        their string form anyway.
    type: list
    elements: dict
    required: true
  state:
    description: Whether the objects (or, for O(labels_only_kinds), the labels) should exist.
    type: str
    choices: [present, absent]
    default: present
  field_manager:
    description: Server-side apply field manager name.
    type: str
    default: gpuops-k8s-gpu
  hash_annotation:
    description: Annotation that records the hash of the desired state on applied objects.
    type: str
    default: gpuops.io/desired-hash
  labels_only_kinds:
    description: Kinds whose objects are never created or deleted; only their labels are managed.
    type: list
    elements: str
    default: [Node]
  delete_unmanaged:
    description: With O(state=absent), also delete objects that do not carry O(hash_annotation).
    type: bool
    default: false
  backup:
    description:
      - Before the first change to an existing object that this module did not apply (no O(hash_annotation)), keep a
        copy of it in a ConfigMap named C(gpuops-backup-<kind>-<name>) in O(backup_namespace) (key C(object.json)).
        An existing backup is never overwritten.
    type: bool
    default: true
  backup_namespace:
    description: Namespace of the backup ConfigMaps; by default the object's own namespace (V(kube-system) for
      cluster-scoped objects).
    type: str
  kubeconfig:
    description: Path of a kubeconfig file. Defaults to E(K8S_AUTH_KUBECONFIG), then E(KUBECONFIG), then C(~/.kube/config),
      then the in-cluster configuration.
    type: path
  context:
    description: Kubeconfig context. Defaults to E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description: API server URL (instead of a kubeconfig). Defaults to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description: Bearer token for O(host). Defaults to E(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description: Verify the API server's certificate. Defaults to E(K8S_AUTH_VERIFY_SSL).
    type: bool
  ca_cert:
    description: CA bundle for the API server's certificate. Defaults to E(K8S_AUTH_SSL_CA_CERT).
    type: path
requirements:
  - kubernetes (the Kubernetes Python client) >= 12.0.0
notes:
  - Check mode sends read requests only.
  - Objects are handled in the given order for V(present) and in reverse order for V(absent).
seealso:
  - module: gpuops.k8s_gpu.gpu_stack_manifests
'''

EXAMPLES = r'''
- name: Apply rendered manifests (no write when nothing changed)
  gpuops.k8s_gpu.k8s_converge:
    definitions: "{{ stack.manifests }}"
  register: applied

- name: Label nodes without touching anything else on them
  gpuops.k8s_gpu.k8s_converge:
    definitions:
      - apiVersion: v1
        kind: Node
        metadata:
          name: gpu-node-1
          labels:
            gpushare: "true"

- name: Remove the objects again
  gpuops.k8s_gpu.k8s_converge:
    definitions: "{{ stack.manifests }}"
    state: absent
'''

RETURN = r'''
created:
  description: Number of objects created.
  returned: always
  type: int
  sample: 7
updated:
  description: Number of objects (or node label sets) changed.
  returned: always
  type: int
  sample: 1
deleted:
  description: Number of objects deleted (or node label sets removed).
  returned: always
  type: int
  sample: 0
unchanged:
  description: Number of objects already in the desired state.
  returned: always
  type: int
  sample: 3
backups:
  description: Backup ConfigMaps written (namespace/name).
  returned: always
  type: list
  elements: str
  sample: [volcano-system/gpuops-backup-configmap-volcano-scheduler-configmap]
objects:
  description: What happened to each object.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: DaemonSet, namespace: kube-system, name: nvidia-device-plugin-pool-a, action: created}
    - {kind: Node, namespace: null, name: gpu-node-1, action: unchanged}
warnings_list:
  description: Problems that did not stop the run (e.g. a node to label that does not exist).
  returned: always
  type: list
  elements: str
'''

import copy
import hashlib
import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

KUBERNETES_IMP_ERR = None
try:
    from kubernetes import config as k8s_config
    from kubernetes.client import Configuration
    from kubernetes.client.api_client import ApiClient
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
    HAS_KUBERNETES = True
except ImportError:
    KUBERNETES_IMP_ERR = traceback.format_exc()
    HAS_KUBERNETES = False

NOISY_METADATA = ('managedFields', 'resourceVersion', 'uid', 'creationTimestamp', 'generation', 'selfLink')


def _scalar_equal(want, have):
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if isinstance(want, (int, float)) or isinstance(have, (int, float)):
        return str(want) == str(have)
    return want == have


def is_subset(want, have):
    """True when every field of want is in have with the same value (lists: same length, element-wise)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(k in have and is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return False
        return all(is_subset(w, h) for w, h in zip(want, have))
    return _scalar_equal(want, have)


def desired_hash(obj, annotation):
    o = copy.deepcopy(obj)
    meta = o.get('metadata') or {}
    if annotation in (meta.get('annotations') or {}):
        del meta['annotations'][annotation]
        if not meta['annotations']:
            del meta['annotations']
    return hashlib.sha256(json.dumps(o, sort_keys=True, separators=(',', ':')).encode('utf-8')).hexdigest()[:20]


def with_hash(obj, annotation):
    o = copy.deepcopy(obj)
    h = desired_hash(o, annotation)
    o.setdefault('metadata', {}).setdefault('annotations', {})[annotation] = h
    return o


def clean(obj):
    if not obj:
        return {}
    o = copy.deepcopy(obj)
    meta = o.get('metadata') or {}
    for k in NOISY_METADATA:
        meta.pop(k, None)
    o.pop('status', None)
    return o


def ident(d):
    meta = d.get('metadata') or {}
    return d.get('kind'), meta.get('namespace'), meta.get('name')


def make_client(params):
    cfg = Configuration()
    if params['host']:
        cfg.host = params['host']
        if params['api_key']:
            cfg.api_key = {'authorization': 'Bearer ' + params['api_key']}
    else:
        kubeconfig = params['kubeconfig'] or (os.environ.get('KUBECONFIG') or '').split(os.pathsep)[0] or \
            os.path.join(os.environ.get('HOME', '/'), '.kube', 'config')
        if params['kubeconfig'] or os.path.exists(kubeconfig):
            k8s_config.load_kube_config(config_file=kubeconfig, context=params['context'], client_configuration=cfg)
        else:
            k8s_config.load_incluster_config(client_configuration=cfg)
    if params['validate_certs'] is not None:
        cfg.verify_ssl = params['validate_certs']
    if params['ca_cert']:
        cfg.ssl_ca_cert = params['ca_cert']
    return DynamicClient(ApiClient(cfg))


class Converger(object):
    def __init__(self, module, client):
        self.module = module
        self.client = client
        self.p = module.params
        self.counts = dict(created=0, updated=0, deleted=0, unchanged=0)
        self.objects = []
        self.diffs = []
        self.backups = []
        self.warnings = []

    def resource(self, d):
        try:
            return self.client.resources.get(api_version=d['apiVersion'], kind=d['kind'])
        except ResourceNotFoundError:
            self.module.fail_json(msg='the cluster does not serve %s %s (needed for %s); install its CRD first'
                                  % (d['apiVersion'], d['kind'], ident(d)[2]), **self.result())

    def get(self, res, d):
        kind, ns, name = ident(d)
        try:
            return self.client.get(res, name=name, namespace=ns if res.namespaced else None).to_dict()
        except NotFoundError:
            return None

    def record(self, d, action, before=None, after=None):
        kind, ns, name = ident(d)
        self.counts[action] += 1
        self.objects.append({'kind': kind, 'namespace': ns, 'name': name, 'action': action})
        if action != 'unchanged' and self.module._diff:
            label = '%s %s%s' % (kind, (ns + '/') if ns else '', name)
            self.diffs.append({'before_header': label, 'after_header': label,
                               'before': clean(before), 'after': clean(after)})

    def backup(self, res, d, live):
        kind, ns, name = ident(d)
        bns = self.p['backup_namespace'] or (ns if res.namespaced else 'kube-system')
        bname = ('gpuops-backup-%s-%s' % (kind.lower(), name))[:253]
        cm_res = self.client.resources.get(api_version='v1', kind='ConfigMap')
        try:
            self.client.get(cm_res, name=bname, namespace=bns)
            return
        except NotFoundError:
            pass
        body = {'apiVersion': 'v1', 'kind': 'ConfigMap',
                'metadata': {'name': bname, 'namespace': bns,
                             'labels': {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu', 'gpuops.io/backup-of-kind': kind}},
                'data': {'object.json': json.dumps(clean(live), indent=2, sort_keys=True)}}
        if not self.module.check_mode:
            self.client.create(cm_res, body=body, namespace=bns)
        self.backups.append('%s/%s' % (bns, bname))

    def present(self, d):
        res = self.resource(d)
        kind, ns, name = ident(d)
        live = self.get(res, d)
        if kind in self.p['labels_only_kinds']:
            return self.labels(res, d, live, present=True)
        want = with_hash(d, self.p['hash_annotation']) if self.p['hash_annotation'] else copy.deepcopy(d)
        if live is not None and is_subset(want, live):
            return self.record(d, 'unchanged')
        if live is not None and self.p['backup'] and self.p['hash_annotation'] and \
                self.p['hash_annotation'] not in ((live.get('metadata') or {}).get('annotations') or {}):
            self.backup(res, d, live)
        after = want
        if not self.module.check_mode:
            after = self.client.patch(res, body=want, name=name, namespace=ns if res.namespaced else None,
                                      content_type='application/apply-patch+yaml', field_manager=self.p['field_manager'],
                                      force_conflicts=True).to_dict()
        self.record(d, 'created' if live is None else 'updated', live, after)

    def labels(self, res, d, live, present):
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
        if not self.module.check_mode:
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

    def absent(self, d):
        res = self.resource(d)
        kind, ns, name = ident(d)
        live = self.get(res, d)
        if kind in self.p['labels_only_kinds']:
            return self.labels(res, d, live, present=False)
        if live is None:
            return self.record(d, 'unchanged')
        annotations = (live.get('metadata') or {}).get('annotations') or {}
        if not self.p['delete_unmanaged'] and self.p['hash_annotation'] and self.p['hash_annotation'] not in annotations:
            self.warnings.append('%s %s%s was not applied by this module (no %s annotation); left in place'
                                 % (kind, (ns + '/') if ns else '', name, self.p['hash_annotation']))
            self.objects.append({'kind': kind, 'namespace': ns, 'name': name, 'action': 'kept'})
            return
        if not self.module.check_mode:
            try:
                self.client.delete(res, name=name, namespace=ns if res.namespaced else None,
                                   body={'propagationPolicy': 'Background'})
            except NotFoundError:
                pass
        self.record(d, 'deleted', live, None)

    def result(self):
        r = dict(changed=bool(self.counts['created'] or self.counts['updated'] or self.counts['deleted'] or self.backups),
                 objects=self.objects, backups=self.backups, warnings_list=self.warnings, **self.counts)
        if self.module._diff:
            r['diff'] = self.diffs
        return r


def main():
    module = AnsibleModule(
        argument_spec=dict(
            definitions=dict(type='list', elements='dict', required=True),
            state=dict(type='str', choices=['present', 'absent'], default='present'),
            field_manager=dict(type='str', default='gpuops-k8s-gpu'),
            hash_annotation=dict(type='str', default='gpuops.io/desired-hash'),
            labels_only_kinds=dict(type='list', elements='str', default=['Node']),
            delete_unmanaged=dict(type='bool', default=False),
            backup=dict(type='bool', default=True),
            backup_namespace=dict(type='str'),
            kubeconfig=dict(type='path', fallback=(env_fallback, ['K8S_AUTH_KUBECONFIG'])),
            context=dict(type='str', fallback=(env_fallback, ['K8S_AUTH_CONTEXT'])),
            host=dict(type='str', fallback=(env_fallback, ['K8S_AUTH_HOST'])),
            api_key=dict(type='str', no_log=True, fallback=(env_fallback, ['K8S_AUTH_API_KEY'])),
            validate_certs=dict(type='bool', fallback=(env_fallback, ['K8S_AUTH_VERIFY_SSL'])),
            ca_cert=dict(type='path', fallback=(env_fallback, ['K8S_AUTH_SSL_CA_CERT'])),
        ),
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_IMP_ERR)
    defs = module.params['definitions']
    for i, d in enumerate(defs):
        kind, ns, name = ident(d)
        if not d.get('apiVersion') or not kind or not name:
            module.fail_json(msg='definitions[%d] needs apiVersion, kind and metadata.name; got %s' % (i, json.dumps(d)[:300]))
    try:
        client = make_client(module.params)
    except Exception as e:  # kubeconfig errors come in many types
        module.fail_json(msg='cannot configure the Kubernetes client: %s' % e)
    conv = Converger(module, client)
    order = defs if module.params['state'] == 'present' else list(reversed(defs))
    for d in order:
        try:
            if module.params['state'] == 'present':
                conv.present(d)
            else:
                conv.absent(d)
        except ApiException as e:
            kind, ns, name = ident(d)
            where = '%s %s%s' % (kind, (ns + '/') if ns else '', name)
            module.fail_json(msg='%s: API error %s %s: %s' % (where, e.status, e.reason, (e.body or '')[:1000]), **conv.result())
    for w in conv.warnings:
        module.warn(w)
    module.exit_json(**conv.result())


if __name__ == '__main__':
    main()
