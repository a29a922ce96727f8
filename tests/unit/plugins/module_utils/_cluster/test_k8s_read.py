# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_objects_info's engine on fake typed APIs: one request per query, no discovery, Secrets without data."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import read as R


class Raw(object):
    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class ApiError(Exception):
    def __init__(self, status, reason):
        super(ApiError, self).__init__(reason)
        self.status, self.reason = status, reason


class FakeApi(object):
    """Answers read_*/list_* from a store {(kind, namespace, name): obj}; records every call."""

    def __init__(self, store, calls, fail=None, unserved=()):
        self.store, self.calls, self.fail, self.unserved = store, calls, fail or {}, unserved

    def _kind(self, method):
        return {'node': 'Node', 'namespaced_config_map': 'ConfigMap', 'namespaced_secret': 'Secret',
                'runtime_class': 'RuntimeClass', 'device_class': 'DeviceClass',
                'resource_slice': 'ResourceSlice'}[method.split('_', 1)[1]]

    def __getattr__(self, method):
        if method == 'get_code':
            def code(**kw):
                self.calls.append(('version', kw))
                return Raw({'gitVersion': 'v1.34.2', 'major': '1', 'minor': '34'})
            return code
        kind = self._kind(method)

        def call(*args, **kw):
            self.calls.append((method, args, kw))
            if method in self.fail:
                raise self.fail[method]
            if kind in self.unserved:
                raise ApiError(404, 'Not Found')
            if method.startswith('read_'):
                key = (kind, args[1] if len(args) > 1 else None, args[0])
                if key not in self.store:
                    raise ApiError(404, 'Not Found')
                return Raw(self.store[key])
            ns = args[0] if args else None
            items = [o for (k, n, dummy), o in sorted(self.store.items()) if k == kind and n == ns]
            fields = kw.get('field_selector')
            if fields:
                want_f = [f.split('=') for f in fields.split(',')]
                items = [o for o in items if all(o['spec'].get(path.split('.')[1]) == v for path, v in want_f)]
            sel = kw.get('label_selector')
            if sel:
                want = dict(s.split('=') for s in sel.split(','))
                items = [o for o in items if all(o['metadata'].get('labels', {}).get(a) == b for a, b in want.items())]
            bare = [dict((k, v) for k, v in o.items() if k not in ('apiVersion', 'kind')) for o in items]
            return Raw({'kind': kind + 'List', 'items': bare})
        return call


STORE = {
    ('Node', None, 'gpu-1'): {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'gpu-1', 'labels': {'a': '1'}}},
    ('Node', None, 'gpu-2'): {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'gpu-2', 'labels': {'a': '2'}}},
    ('ConfigMap', 'kube-system', 'kube-proxy'): {'metadata': {'name': 'kube-proxy'}, 'data': {'config.conf': 'mode: ipvs'}},
    ('Secret', 'kube-system', 'tls'): {'metadata': {'name': 'tls'}, 'type': 'kubernetes.io/tls',
                                       'data': {'tls.key': 'c2VjcmV0'}, 'stringData': {'x': 'y'}},
    ('RuntimeClass', None, 'nvidia'): {'metadata': {'name': 'nvidia'}, 'handler': 'nvidia'},
    ('DeviceClass', None, 'gpu.nvidia.com'): {'metadata': {'name': 'gpu.nvidia.com'},
                                              'spec': {'extendedResourceName': 'nvidia.com/gpu'}},
    ('ResourceSlice', None, 'gpu-1-gpu.nvidia.com-a'): {'metadata': {'name': 'gpu-1-gpu.nvidia.com-a'},
                                                        'spec': {'nodeName': 'gpu-1', 'driver': 'gpu.nvidia.com'}},
    ('ResourceSlice', None, 'gpu-2-gpu.nvidia.com-b'): {'metadata': {'name': 'gpu-2-gpu.nvidia.com-b'},
                                                        'spec': {'nodeName': 'gpu-2', 'driver': 'gpu.nvidia.com'}},
}


def apis(calls, **kw):
    api = FakeApi(STORE, calls, **kw)
    return {'CoreV1Api': api, 'NodeV1Api': api, 'ResourceV1Api': api, 'VersionApi': api}


def test_K8S_08_one_request_per_query_and_the_version():
    calls = []
    out = R.read(apis(calls), [
        {'key': 'nodes', 'kind': 'Node'},
        {'key': 'rc', 'api_version': 'node.k8s.io/v1', 'kind': 'RuntimeClass'},
        {'key': 'proxy', 'kind': 'ConfigMap', 'name': 'kube-proxy', 'namespace': 'kube-system'},
        {'key': 'missing', 'kind': 'ConfigMap', 'name': 'nope', 'namespace': 'kube-system'},
    ], version=True)
    assert [c[0] for c in calls] == ['list_node', 'list_runtime_class', 'read_namespaced_config_map',
                                     'read_namespaced_config_map', 'version']
    assert all(c[-1].get('_preload_content') is False for c in calls)
    assert [n['metadata']['name'] for n in out['objects']['nodes']] == ['gpu-1', 'gpu-2']
    # list items get the apiVersion and kind the server leaves out of them
    assert out['objects']['rc'] == [{'apiVersion': 'node.k8s.io/v1', 'kind': 'RuntimeClass',
                                     'metadata': {'name': 'nvidia'}, 'handler': 'nvidia'}]
    assert out['objects']['proxy'][0]['data'] == {'config.conf': 'mode: ipvs'}
    assert out['objects']['missing'] == [] and out['api_found']['missing'] is True
    assert out['version']['gitVersion'] == 'v1.34.2'


def test_no_version_unless_asked_and_label_selectors():
    calls = []
    out = R.read(apis(calls), [{'key': 'n', 'kind': 'Node', 'label_selectors': ['a=2']}])
    assert 'version' not in out
    assert calls == [('list_node', (), {'_preload_content': False, 'label_selector': 'a=2'})]
    assert [n['metadata']['name'] for n in out['objects']['n']] == ['gpu-2']


def test_K8S_08_secret_comes_back_without_its_data():
    out = R.read(apis([]), [{'key': 's', 'kind': 'Secret', 'name': 'tls', 'namespace': 'kube-system'}])
    assert out['objects']['s'] == [{'apiVersion': 'v1', 'kind': 'Secret', 'metadata': {'name': 'tls'},
                                    'type': 'kubernetes.io/tls'}]


def test_DRAX_15_device_classes_are_listed_and_a_server_without_resource_v1_answers_none():
    calls = []
    out = R.read(apis(calls), [{'key': 'dc', 'api_version': 'resource.k8s.io/v1', 'kind': 'DeviceClass'}])
    assert [c[0] for c in calls] == ['list_device_class']
    assert out['objects']['dc'] == [{'apiVersion': 'resource.k8s.io/v1', 'kind': 'DeviceClass',
                                     'metadata': {'name': 'gpu.nvidia.com'},
                                     'spec': {'extendedResourceName': 'nvidia.com/gpu'}}]
    # Kubernetes 1.32/1.33 serve no resource.k8s.io/v1: the list answers 404, which reads as nothing there
    out = R.read(apis([], unserved=('DeviceClass',)),
                 [{'key': 'dc', 'api_version': 'resource.k8s.io/v1', 'kind': 'DeviceClass'}])
    assert out == {'objects': {'dc': []}, 'api_found': {'dc': False}}


def test_resource_slices_of_one_node_by_field_selectors():
    """migrate_to_dra and doctor read a node's (or a driver's) ResourceSlices: one list with the field selectors
    joined by commas, as kubernetes.core.k8s_info sends them."""
    calls = []
    q = {'key': 's', 'api_version': 'resource.k8s.io/v1', 'kind': 'ResourceSlice',
         'field_selectors': ['spec.nodeName=gpu-2', 'spec.driver=gpu.nvidia.com']}
    out = R.read(apis(calls), [q])
    assert calls == [('list_resource_slice', (), {'_preload_content': False,
                                                  'field_selector': 'spec.nodeName=gpu-2,spec.driver=gpu.nvidia.com'})]
    assert [o['metadata']['name'] for o in out['objects']['s']] == ['gpu-2-gpu.nvidia.com-b']
    assert out['objects']['s'][0]['kind'] == 'ResourceSlice' and out['api_found'] == {'s': True}
    assert R.check_queries([dict(q, name='x')]) == ['queries[0] (s): field_selectors and name exclude each other']


def test_K8S_08_a_list_the_server_does_not_serve_is_empty_and_not_found():
    out = R.read(apis([], unserved=('RuntimeClass',)),
                 [{'key': 'rc', 'api_version': 'node.k8s.io/v1', 'kind': 'RuntimeClass'}])
    assert out == {'objects': {'rc': []}, 'api_found': {'rc': False}}


def test_other_errors_name_the_object():
    with pytest.raises(R.ReadError) as e:
        R.read(apis([], fail={'read_namespaced_config_map': ApiError(403, 'Forbidden')}),
               [{'key': 'p', 'kind': 'ConfigMap', 'name': 'kube-proxy', 'namespace': 'kube-system'}])
    assert str(e.value) == 'reading ConfigMap kube-system/kube-proxy failed: Forbidden'
    with pytest.raises(R.ReadError) as e:
        R.read(apis([], fail={'list_node': ApiError(401, 'Unauthorized')}), [{'key': 'n', 'kind': 'Node'}])
    assert 'Node (list) failed: Unauthorized' in str(e.value)


@pytest.mark.parametrize('query, message', [
    ({'kind': 'Node'}, 'queries[0] has no key'),
    ({'key': 'x', 'kind': 'Pod'}, 'kind Pod v1 is not one this module reads; supported: ConfigMap v1, '
                                  'CustomResourceDefinition apiextensions.k8s.io/v1, DeviceClass resource.k8s.io/v1, '
                                  'Node v1, ResourceSlice resource.k8s.io/v1, RuntimeClass node.k8s.io/v1, Secret v1'),
    ({'key': 'x', 'kind': 'RuntimeClass'}, 'kind RuntimeClass v1 is not one'),
    ({'key': 'x', 'kind': 'ConfigMap', 'name': 'a'}, 'ConfigMap is namespaced; set namespace'),
    ({'key': 'x', 'kind': 'Node', 'namespace': 'default'}, 'Node is cluster-scoped; namespace default makes no sense'),
    ({'key': 'x', 'kind': 'Node', 'name': 'a', 'label_selectors': ['a=b']}, 'label_selectors and name exclude each other'),
    ({'key': 'x', 'kind': 'Node', 'label_selectors': 'a=b'}, 'label_selectors must be a list of strings'),
    ({'key': 'x', 'kind': 'Node', 'field_selectors': [3]}, 'field_selectors must be a list of strings'),
    ({'key': 'x', 'kind': 'Node', 'colour': 'red'}, 'unknown option(s) colour'),
    ('Node', 'queries[0] must be a dictionary, got str'),
])
def test_bad_queries_are_refused_before_any_request(query, message):
    problems = R.check_queries([query])
    assert any(message in p for p in problems), problems


def test_duplicate_keys_are_refused():
    assert R.check_queries([{'key': 'a', 'kind': 'Node'}, {'key': 'a', 'kind': 'Node'}]) == [
        'queries[1]: key a is used twice']
    assert R.check_queries([]) == []


def test_typed_apis_share_one_client():
    class Mod(object):
        pass
    mod = Mod()
    names = ('CoreV1Api', 'NodeV1Api', 'ResourceV1Api', 'ApiextensionsV1Api', 'AdmissionregistrationV1Api', 'VersionApi')
    for name in names:
        setattr(mod, name, lambda client, name=name: (name, client))
    got = R.typed_apis(mod, 'the-client')
    assert got == dict((name, (name, 'the-client')) for name in names)


NODE = {'apiVersion': 'v1', 'kind': 'Node',
        'metadata': {'name': 'gpu-1', 'labels': {'a': '1'}, 'annotations': {'big': 'x' * 100}, 'managedFields': [{}]},
        'status': {'allocatable': {'nvidia.com/gpu': '1'}, 'images': [{'names': ['i']}], 'conditions': []}}


def test_project_keeps_only_the_named_paths_and_the_identity():
    objects = {'nodes': [NODE, {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'bare'}}], 'cm': [{'data': {'k': 'v'}}]}
    out = R.project(objects, {'nodes': ['metadata.labels', 'status.allocatable']})
    assert out['nodes'] == [
        {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'gpu-1', 'labels': {'a': '1'}},
         'status': {'allocatable': {'nvidia.com/gpu': '1'}}},
        {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'bare'}}]
    # keys not named come back whole; the input is not changed
    assert out['cm'] == [{'data': {'k': 'v'}}]
    assert 'managedFields' in NODE['metadata'] and 'images' in NODE['status']


def test_project_without_fields_returns_the_objects_as_they_are():
    objects = {'nodes': [NODE]}
    assert R.project(objects, {}) is objects
    assert R.project(objects, {'nodes': []})['nodes'] == [NODE]


def test_project_skips_a_path_through_a_non_dict():
    out = R.project({'n': [{'metadata': {'name': 'x'}, 'spec': 'odd'}]}, {'n': ['spec.taints']})
    assert out['n'] == [{'metadata': {'name': 'x'}}]


@pytest.mark.parametrize('fields, message', [
    ({'pods': ['metadata.labels']}, 'fields: pods is not the key of a query; keys: nodes'),
    ({'nodes': 'metadata.labels'}, "fields.nodes must be a list of dotted paths (e.g. metadata.labels); got 'metadata.labels'"),
    ({'nodes': ['metadata..labels']}, "fields.nodes must be a list of dotted paths (e.g. metadata.labels); got ['metadata..labels']"),
])
def test_check_fields_names_the_problem(fields, message):
    assert R.check_fields(fields, [{'key': 'nodes', 'kind': 'Node'}]) == [message]


def test_check_fields_accepts_paths_of_known_keys():
    assert R.check_fields({'nodes': ['metadata.labels', 'status.allocatable']}, [{'key': 'nodes', 'kind': 'Node'}]) == []
    assert R.check_fields({}, []) == []
