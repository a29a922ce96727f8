#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

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
  - A Pod (V(v1)) this module applied (it carries O(hash_annotation)) whose spec differs in a field no update may
    change (anything but the containers' images, C(activeDeadlineSeconds), added tolerations and
    C(terminationGracePeriodSeconds)) is deleted without a grace period and created again, since the API server
    refuses such an update; any other Pod is only updated.
  - Used by role P(gpuops.k8s_gpu.gpu_sharing_stack#role); C(kubernetes.core.k8s) sends a write request per object on every
    run, which this module avoids.
  - The connection is kubernetes.core's (see the connection options); the engine is in the collection's
    C(kube/converger) module_utils.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
  - gpuops.k8s_gpu.k8s_auth_options
options:
  definitions:
    description:
      - Kubernetes objects (dictionaries with C(apiVersion), C(kind), C(metadata.name), and C(metadata.namespace) for
        namespaced kinds).
      - Quantities should be strings in the form the API server stores (V("1"), not V(1); V("3k"), not V("3000")).
        Numbers are compared by their string form, so another form of the same quantity is applied again on every
        run.
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
  user:
    description:
      - For objects that several runs share (a strategy's RuntimeClass is shared by every pool of the NVIDIA device
        plugin strategies), the name of the user this run speaks for, for example the pool.
      - With O(state=present) the run records it on each such object as the annotation
        C(<user_annotation_prefix><user>) (JSON merge patch, once; re-applied if a concurrent run deleted the object
        meanwhile).
      - With O(state=absent) the run removes its own record and deletes the object only when no other user is
        recorded on it and O(keep) is false, with the object's resourceVersion as a precondition, so a user recorded
        by a concurrent run after the decision stops the delete (the decision is then taken again).
      - Must be a valid annotation name (at most 63 characters of letters, digits, V(-), V(_) and V(.), beginning and
        ending with a letter or digit). Labels-only kinds never carry it.
    type: str
  known_users:
    description:
      - With O(user) and O(state=present), the users this run knows agree with it (for example every pool of the
        inventory, whose pools of one strategy playbook C(cluster.yml) checks for the same shared settings before
        role P(gpuops.k8s_gpu.gpu_sharing_stack#role) applies any).
      - Before anything is written, a shared object that another user recorded itself on - one neither O(user) nor
        in this list, such as a pool of another inventory, team or AWX job - and that this run would change fails the
        run, naming the object, its other users and the fields that differ; nothing is changed. Without this option
        (the default) no such check is made.
    type: list
    elements: str
  user_labels:
    description: With O(user), only the definitions whose C(metadata.labels) contain all of these are shared objects;
      by default all definitions are.
    type: dict
    default: {}
  user_annotation_prefix:
    description: Prefix (ending with C(/)) of the annotations that record an object's users.
    type: str
    default: user.gpuops.io/
  keep:
    description: With O(user) and O(state=absent), keep the shared objects even when no other user is recorded on
      them (users that the caller knows of otherwise, such as pools whose nodes still carry the strategy's labels and
      that were installed before users were recorded); this run's record is removed all the same.
    type: bool
    default: false
  prune:
    description:
      - With O(state=present), after the objects are applied, for each entry list the objects of its C(kinds) that
        carry every label of its C(label_selector) (in every namespace) and delete those that are not among
        O(definitions) and carry O(hash_annotation) - what a caller rendered before and no longer renders. Role
        P(gpuops.k8s_gpu.gpu_sharing_stack#role) prunes a pool's own objects this way (the MIG manager switched off, the
        pool's previous namespace) and the shared objects of HAMi, Volcano, gpushare and gpu-manager (gpu-admission's
        registration mode changed).
      - A kind the cluster does not serve is skipped. Deleted objects are reported with action V(deleted).
    type: list
    elements: dict
    default: []
    suboptions:
      label_selector:
        description: Label selector (V(key=value) pairs joined by commas) of the objects to consider.
        type: str
        required: true
      kinds:
        description: The kinds to list.
        type: list
        elements: dict
        required: true
        suboptions:
          api_version:
            description: API version of the kind.
            type: str
            required: true
          kind:
            description: The kind.
            type: str
            required: true
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
  description:
    - What happened to each object (C(action) one of V(created), V(updated), V(deleted), V(unchanged), V(missing),
      V(kept)).
    - A shared object kept by O(state=absent) has C(users), the other users recorded on it (empty when O(keep) or
      the missing hash annotation kept it).
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: DaemonSet, namespace: kube-system, name: nvidia-device-plugin-pool-a, action: created}
    - {kind: Node, namespace: null, name: gpu-node-1, action: unchanged}
    - {kind: RuntimeClass, namespace: null, name: nvidia, action: kept, users: [pool-b]}
users:
  description: The user records this run added (V(registered)) or removed (V(released)) on shared objects (O(user)).
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: RuntimeClass, namespace: null, name: nvidia, user: pool-a, action: registered}
warnings_list:
  description: Problems that did not stop the run (e.g. a node to label that does not exist).
  returned: always
  type: list
  elements: str
'''

from typing import Any

import re

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.converger import (
    Converger, ConvergeError, converge, prune, validate_definitions)


def argument_spec() -> dict[str, Any]:
    spec = access.auth_arg_spec(env_fallback)
    spec.update(
        definitions=dict(type='list', elements='dict', required=True),
        state=dict(type='str', choices=['present', 'absent'], default='present'),
        field_manager=dict(type='str', default='gpuops-k8s-gpu'),
        hash_annotation=dict(type='str', default='gpuops.io/desired-hash'),
        labels_only_kinds=dict(type='list', elements='str', default=['Node']),
        delete_unmanaged=dict(type='bool', default=False),
        backup=dict(type='bool', default=True),
        backup_namespace=dict(type='str'),
        user=dict(type='str'),
        known_users=dict(type='list', elements='str'),
        user_labels=dict(type='dict', default={}),
        user_annotation_prefix=dict(type='str', default='user.gpuops.io/'),
        keep=dict(type='bool', default=False),
        prune=dict(type='list', elements='dict', default=[], options=dict(
            label_selector=dict(type='str', required=True),
            kinds=dict(type='list', elements='dict', required=True, options=dict(
                api_version=dict(type='str', required=True),
                kind=dict(type='str', required=True))))),
    )
    return spec


USER_NAME = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')


def check_user(params: dict[str, Any]) -> str | None:
    """None, or the error for a user or prefix that cannot form an annotation name."""
    if params.get('user') is not None and not USER_NAME.match(params['user']):
        return ('user must be a valid annotation name (at most 63 letters, digits, "-", "_" or ".", beginning and '
                'ending with a letter or digit); got %r' % params['user'])
    if not (params.get('user_annotation_prefix') or '').endswith('/'):
        return 'user_annotation_prefix must end with "/"; got %r' % params.get('user_annotation_prefix')
    return None


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    error = validate_definitions(module.params['definitions']) or check_user(module.params)
    if error:
        module.fail_json(msg=error)
    if access.KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=access.KUBERNETES_IMPORT_ERROR)
    try:
        client = access.get_client(module.params)
    except access.KubeError as e:
        module.fail_json(msg=str(e))
    conv = Converger(module.params, client, check_mode=module.check_mode, diff=module._diff)
    try:
        result = converge(conv, module.params['definitions'], module.params['state'])
        if module.params['prune'] and module.params['state'] == 'present':
            result = prune(conv, module.params['definitions'], module.params['prune'])
    except ConvergeError as e:
        module.fail_json(msg=str(e), **conv.result())
    for w in conv.warnings:
        module.warn(w)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
