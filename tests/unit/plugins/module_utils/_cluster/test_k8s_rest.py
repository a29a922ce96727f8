# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube/rest: the typed API calls the collection makes, as plain requests over both generations of ApiClient.

The fakes take exactly the arguments the real ApiClients take (kubernetes-client/python
kubernetes/client/api_client.py: call_api at v24.2.0 and v36.0.0; param_serialize, call_api and
response_deserialize at v37.0.2), so a call this module makes that the real client would not accept fails here.
The lab runs the same calls against the API emulator with the real client 37 (test_k8s_access.py and the files of
the modules that use them).
"""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import rest as R


class ApiError(Exception):
    def __init__(self, status):
        super(ApiError, self).__init__('status %s' % status)
        self.status = status


class Urllib3Response(object):
    def __init__(self, status, data=b'{}'):
        self.status, self.data = status, data


class LegacyClient(object):
    """ApiClient of client 24.2 to 36: call_api with these parameters; the REST layer raises for an error status."""

    def __init__(self, status=200):
        self.calls, self.status = [], status

    def call_api(self, resource_path, method, path_params=None, query_params=None, header_params=None, body=None,
                 post_params=None, files=None, response_type=None, auth_settings=None, async_req=None,
                 _return_http_data_only=None, collection_formats=None, _preload_content=True, _request_timeout=None,
                 _host=None):
        self.calls.append(dict(path=resource_path, method=method, query=query_params, headers=header_params, body=body,
                               auth=auth_settings, preload=_preload_content))
        if not 200 <= self.status <= 299:
            raise ApiError(self.status)
        return Urllib3Response(self.status)


class RestResponse(object):
    def __init__(self, status):
        self.status, self.data, self.response = status, None, Urllib3Response(status)

    def read(self):
        self.data = self.response.data
        return self.data


class ModernClient(object):
    """ApiClient of client 37: param_serialize, then call_api(*request); response_deserialize raises for an error."""

    def __init__(self, status=200):
        self.calls, self.status = [], status

    def param_serialize(self, method, resource_path, path_params=None, query_params=None, header_params=None,
                        body=None, post_params=None, files=None, auth_settings=None, collection_formats=None,
                        _host=None, _request_auth=None):
        self.calls.append(dict(path=resource_path, method=method, query=query_params, headers=header_params, body=body,
                               auth=auth_settings))
        return method, 'https://api' + resource_path, header_params, body, post_params

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        return RestResponse(self.status)

    def response_deserialize(self, response_data, response_types_map=None):
        assert response_data.data is not None, 'read() must come first'
        if not 200 <= response_data.status <= 299:
            raise ApiError(response_data.status)
        return None


@pytest.mark.parametrize('client_class', [LegacyClient, ModernClient])
def test_K8S_09_a_list_is_one_get_with_the_api_servers_query_names(client_class):
    client = client_class()
    resp = R.CoreApi(client).list_pod_for_all_namespaces(field_selector='spec.nodeName=n1', label_selector='a=b',
                                                         limit=500, _continue='tok', _preload_content=False)
    assert resp.status == 200 and resp.data == b'{}'
    (call,) = client.calls
    assert call['method'] == 'GET' and call['path'] == '/api/v1/pods'
    assert sorted(call['query']) == [('continue', 'tok'), ('fieldSelector', 'spec.nodeName=n1'),
                                     ('labelSelector', 'a=b'), ('limit', 500)]
    assert call['headers'] == {'Accept': 'application/json'} and call['body'] is None
    assert call['auth'] == ['BearerToken']
    if client_class is LegacyClient:
        assert call['preload'] is False


@pytest.mark.parametrize('client_class', [LegacyClient, ModernClient])
def test_K8S_09_an_error_status_raises_the_clients_exception(client_class):
    with pytest.raises(ApiError) as e:
        R.CoreApi(client_class(status=404)).read_node('gone')
    assert e.value.status == 404


@pytest.mark.parametrize('body,ctype,want', [
    ({'spec': {'unschedulable': True}}, None, 'application/strategic-merge-patch+json'),
    ([{'op': 'remove', 'path': '/spec/unschedulable'}], None, 'application/json-patch+json'),
    ({'metadata': {'labels': {'a': None}}}, 'application/merge-patch+json', 'application/merge-patch+json'),
])
def test_K8S_09_patch_node_content_type_as_the_client_sends_it(body, ctype, want):
    client = ModernClient()
    kwargs = {'_content_type': ctype} if ctype else {}
    R.CoreApi(client).patch_node('n 1', body, dry_run='All', **kwargs)
    (call,) = client.calls
    assert call['method'] == 'PATCH' and call['path'] == '/api/v1/nodes/n%201'
    assert call['headers']['Content-Type'] == want and call['body'] == body
    assert call['query'] == [('dryRun', 'All')]


def test_K8S_09_every_path_the_collection_calls():
    client = LegacyClient()
    api = R.CoreApi(client)
    api.read_node('n1')
    api.list_node(label_selector='x')
    api.list_namespaced_pod('ns1', field_selector='f')
    api.delete_namespaced_pod('p1', 'ns1', body={'gracePeriodSeconds': 5})
    api.create_namespaced_pod_eviction('p1', 'ns1', {'apiVersion': 'policy/v1', 'kind': 'Eviction'})
    api.read_namespaced_config_map('cm', 'kube-system')
    api.list_namespaced_config_map('kube-system')
    api.read_namespaced_secret('s', 'hami')
    api.list_namespaced_secret('hami')
    api.read_runtime_class('nvidia')
    api.list_runtime_class()
    api.read_device_class('gpu.nvidia.com')
    api.list_device_class()
    api.read_custom_resource_definition('servicemonitors.monitoring.coreos.com')
    api.list_custom_resource_definition()
    api.read_validating_admission_policy('gpuops-dra-resourceslices-dra')
    api.list_validating_admission_policy(label_selector='x')
    api.get_code()
    api.patch_node_status('n1', [{'op': 'remove', 'path': '/status/capacity/aliyun.com~1gpu-count'}])
    assert [(c['method'], c['path']) for c in client.calls] == [
        ('GET', '/api/v1/nodes/n1'),
        ('GET', '/api/v1/nodes'),
        ('GET', '/api/v1/namespaces/ns1/pods'),
        ('DELETE', '/api/v1/namespaces/ns1/pods/p1'),
        ('POST', '/api/v1/namespaces/ns1/pods/p1/eviction'),
        ('GET', '/api/v1/namespaces/kube-system/configmaps/cm'),
        ('GET', '/api/v1/namespaces/kube-system/configmaps'),
        ('GET', '/api/v1/namespaces/hami/secrets/s'),
        ('GET', '/api/v1/namespaces/hami/secrets'),
        ('GET', '/apis/node.k8s.io/v1/runtimeclasses/nvidia'),
        ('GET', '/apis/node.k8s.io/v1/runtimeclasses'),
        ('GET', '/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com'),
        ('GET', '/apis/resource.k8s.io/v1/deviceclasses'),
        ('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/servicemonitors.monitoring.coreos.com'),
        ('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'),
        ('GET', '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpuops-dra-resourceslices-dra'),
        ('GET', '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies'),
        ('GET', '/version/'),
        ('PATCH', '/api/v1/nodes/n1/status'),
    ]
    assert client.calls[-1]['headers']['Content-Type'] == 'application/json-patch+json'
    delete, evict = client.calls[3], client.calls[4]
    assert 'Content-Type' not in delete['headers'] and delete['body'] == {'gracePeriodSeconds': 5}
    assert 'Content-Type' not in evict['headers'] and evict['body']['kind'] == 'Eviction'


def test_an_argument_the_api_does_not_take_is_refused_before_any_request():
    client = LegacyClient()
    with pytest.raises(TypeError, match='watch'):
        R.CoreApi(client).list_node(watch=True)
    assert client.calls == []


def test_the_typed_api_names_are_this_module_and_none_without_the_client():
    assert R.CoreV1Api is R.CoreApi and R.NodeV1Api is R.CoreApi and R.VersionApi is R.CoreApi
    assert R.ResourceV1Api is R.CoreApi and R.ApiextensionsV1Api is R.CoreApi
    assert R.client_module(object) is R
    assert R.client_module(None) is None
