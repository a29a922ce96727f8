# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_converge's engine (module_utils/_cluster/k8s_converger) on a fake DynamicClient: writes only when something differs."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import k8s_converger as K

PARAMS = dict(field_manager='gpuops-k8s-gpu', hash_annotation='gpuops.io/desired-hash', labels_only_kinds=['Node'],
              delete_unmanaged=False, backup=True, backup_namespace=None)
CM = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cfg', 'namespace': 'ns'}, 'data': {'k': 'v'}}
NODE = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n1', 'labels': {'gpushare': 'true'}}}


class Res(object):
    def __init__(self, kind):
        self.kind = kind
        self.namespaced = kind != 'Node'


class Obj(object):
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return copy.deepcopy(self.d)


def not_found(cls):
    return cls.__new__(cls)


class FakeDynamic(object):
    """The few DynamicClient calls the converger makes, over an in-memory store; records every write."""

    def __init__(self, objects=(), served=('ConfigMap', 'Node')):
        self.store = dict(((o['kind'], o['metadata'].get('namespace'), o['metadata']['name']), copy.deepcopy(o))
                          for o in objects)
        self.served = served
        self.writes = []
        outer = self

        class Resources(object):
            def get(self, api_version, kind):
                if kind not in outer.served:
                    raise not_found(K.ResourceNotFoundError)
                return Res(kind)

        self.resources = Resources()

    def get(self, res, name, namespace=None):
        if (res.kind, namespace, name) not in self.store:
            raise not_found(K.NotFoundError)
        return Obj(self.store[(res.kind, namespace, name)])

    def patch(self, res, body, name, namespace=None, content_type=None, field_manager=None, force_conflicts=None):
        self.writes.append(('patch', res.kind, name, content_type))
        key = (res.kind, namespace, name)
        if content_type == 'application/merge-patch+json':
            labels = self.store[key]['metadata'].setdefault('labels', {})
            for k, v in body['metadata']['labels'].items():
                if v is None:
                    labels.pop(k, None)
                else:
                    labels[k] = v
        else:
            live = copy.deepcopy(body)
            live['metadata']['resourceVersion'] = '1'
            self.store[key] = live
        return Obj(self.store[key])

    def create(self, res, body, namespace=None):
        self.writes.append(('create', res.kind, body['metadata']['name'], None))
        self.store[(res.kind, namespace, body['metadata']['name'])] = copy.deepcopy(body)
        return Obj(body)

    def delete(self, res, name, namespace=None, body=None):
        self.writes.append(('delete', res.kind, name, None))
        del self.store[(res.kind, namespace, name)]


def run(client, defs, state='present', check_mode=False, **params):
    conv = K.Converger(dict(PARAMS, **params), client, check_mode=check_mode, diff=True)
    return K.converge(conv, defs, state)


def test_create_then_rerun_writes_nothing():
    client = FakeDynamic()
    first = run(client, [CM])
    assert first['created'] == 1 and first['changed'] and client.writes == [
        ('patch', 'ConfigMap', 'cfg', 'application/apply-patch+yaml')]
    second = run(client, [CM])
    assert second['unchanged'] == 1 and not second['changed'] and len(client.writes) == 1


def test_check_mode_reads_only():
    client = FakeDynamic()
    result = run(client, [CM], check_mode=True)
    assert result['created'] == 1 and result['changed'] and client.writes == []
    assert result['diff'][0]['before_header'] == 'ConfigMap ns/cfg'


def test_site_owned_object_is_backed_up_before_the_first_change():
    client = FakeDynamic([dict(CM, data={'k': 'site'})])
    result = run(client, [CM])
    assert result['updated'] == 1 and result['backups'] == ['ns/gpuops-backup-configmap-cfg']
    assert client.writes[0][:3] == ('create', 'ConfigMap', 'gpuops-backup-configmap-cfg')
    assert '"site"' in client.store[('ConfigMap', 'ns', 'gpuops-backup-configmap-cfg')]['data']['object.json']


def test_node_labels_are_merge_patched_and_other_labels_kept():
    client = FakeDynamic([{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n1', 'labels': {'site': 'x'}}}])
    result = run(client, [NODE])
    assert result['updated'] == 1 and client.writes == [('patch', 'Node', 'n1', 'application/merge-patch+json')]
    assert client.store[('Node', None, 'n1')]['metadata']['labels'] == {'site': 'x', 'gpushare': 'true'}
    assert not run(client, [NODE])['changed'] and len(client.writes) == 1
    removed = run(client, [NODE], state='absent')
    assert removed['deleted'] == 1 and client.store[('Node', None, 'n1')]['metadata']['labels'] == {'site': 'x'}


def test_missing_node_is_a_warning_not_a_create():
    client = FakeDynamic()
    result = run(client, [NODE])
    assert not result['changed'] and client.writes == [] and 'n1 does not exist' in result['warnings_list'][0]


def test_absent_keeps_objects_it_did_not_apply():
    client = FakeDynamic([CM])
    result = run(client, [CM], state='absent')
    assert result['objects'][0]['action'] == 'kept' and client.writes == []
    assert run(client, [CM], state='absent', delete_unmanaged=True)['deleted'] == 1


def test_unserved_kind_stops_with_a_clear_error():
    with pytest.raises(K.ConvergeError, match='does not serve v1 ConfigMap'):
        run(FakeDynamic(served=('Node',)), [CM])


def test_validate_definitions():
    assert K.validate_definitions([CM, NODE]) is None
    assert K.validate_definitions([CM, {'kind': 'X'}]).startswith('definitions[1] needs apiVersion, kind and metadata.name')
