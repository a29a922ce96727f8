# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plain requests to the Kubernetes API over the kubernetes client's ApiClient (or kube/native's), without its typed API
classes.

The typed API classes of kubernetes-client/python 37 are built on pydantic: making CoreV1Api available costs about
0.5 CPU-s per process, as much as everything else a module run does. The collection calls a dozen endpoints, so
CoreApi offers exactly those, under the typed APIs' method names and keyword arguments; the engines that take a
"CoreV1Api-like" object (and their unit-test fakes) do not change. Each call is one request through the ApiClient
(its configuration, authentication, TLS and proxy settings, as the typed APIs use them) and returns the raw urllib3
response, as the typed APIs do with _preload_content=False; a status outside 2xx raises the client's ApiException.

kube/native's client (kube/access.api_client where it serves the connection) sends the request itself. Two generations
of the kubernetes client's ApiClient are served (docs/conformance/kubernetes-core.md, K8S-09):
 * client 24.2 to 36: ``call_api(resource_path, method, ..., _preload_content=False)`` returns the raw response and
   its REST layer raises ApiException for an error status;
 * client 37 and later: ``param_serialize(...)`` then ``call_api(*request)``; the error status is raised here through
   ``response_deserialize``, which raises ApiException for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

JSON = 'application/json'
STRATEGIC_MERGE_PATCH = 'application/strategic-merge-patch+json'
JSON_PATCH = 'application/json-patch+json'

# keyword arguments of the typed API methods -> query parameter names of the API server
QUERY_NAMES = {
    'label_selector': 'labelSelector',
    'field_selector': 'fieldSelector',
    'limit': 'limit',
    '_continue': 'continue',
    'dry_run': 'dryRun',
    'field_manager': 'fieldManager',
    'grace_period_seconds': 'gracePeriodSeconds',
}
# accepted for compatibility with the typed APIs' calls; responses are always raw
IGNORED = ('_preload_content',)


def _segment(value: object) -> str:
    return quote(str(value), safe='')


def request(api_client: Any, method: str, path: str, query: list[tuple[str, Any]] | None = None, body: Any = None,
            content_type: str | None = None) -> Any:
    """One request; the raw response (``.status``, ``.data``). An error status raises ApiException."""
    headers = {'Accept': JSON}
    if content_type:  # the typed APIs send none with a POST or DELETE body (the REST layer sends it as JSON)
        headers['Content-Type'] = content_type
    query = list(query or [])
    if getattr(api_client, 'gpuops_native', False):  # kube/native: urllib3 alone; an error status raises its ApiError
        return api_client.native_request(method, path, query, headers, body)
    if hasattr(api_client, 'param_serialize'):  # client 37 and later
        serialized = api_client.param_serialize(method, path, query_params=query, header_params=headers, body=body,
                                                auth_settings=['BearerToken'])
        response = api_client.call_api(*serialized)
        if not 200 <= response.status <= 299:
            response.read()
            api_client.response_deserialize(response, {})  # raises ApiException for the status
        return response.response
    return api_client.call_api(path, method, path_params={}, query_params=query, header_params=headers, body=body,
                               post_params=[], files={}, auth_settings=['BearerToken'], _return_http_data_only=True,
                               _preload_content=False)


class CoreApi(object):
    """The calls of CoreV1Api, NodeV1Api, ResourceV1Api, ApiextensionsV1Api, AdmissionregistrationV1Api and VersionApi that the
    collection makes, as plain requests."""

    def __init__(self, api_client: Any, send: Callable[..., Any] = request) -> None:
        self.api_client = api_client
        self._send = send

    def _call(self, method: str, path: str, kwargs: dict[str, Any], body: Any = None,
              content_type: str | None = None) -> Any:
        query = []
        for key in sorted(kwargs):
            value = kwargs[key]
            if key in IGNORED or value is None:
                continue
            if key not in QUERY_NAMES:
                raise TypeError('unexpected keyword argument %s for %s %s' % (key, method, path))
            query.append((QUERY_NAMES[key], value))
        return self._send(self.api_client, method, path, query, body, content_type)

    # Nodes
    def read_node(self, name: str, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/nodes/%s' % _segment(name), kwargs)

    def list_node(self, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/nodes', kwargs)

    def patch_node(self, name: str, body: Any, _content_type: str | None = None, **kwargs: Any) -> Any:
        # as the client does: a list is a JSON patch, an object a strategic merge patch (Nodes are a built-in kind)
        ctype = _content_type or (JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE_PATCH)
        return self._call('PATCH', '/api/v1/nodes/%s' % _segment(name), kwargs, body, ctype)

    def patch_node_status(self, name: str, body: Any, _content_type: str | None = None, **kwargs: Any) -> Any:
        ctype = _content_type or (JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE_PATCH)
        return self._call('PATCH', '/api/v1/nodes/%s/status' % _segment(name), kwargs, body, ctype)

    # Pods
    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/pods', kwargs)

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/namespaces/%s/pods' % _segment(namespace), kwargs)

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any = None, **kwargs: Any) -> Any:
        return self._call('DELETE', '/api/v1/namespaces/%s/pods/%s' % (_segment(namespace), _segment(name)), kwargs,
                          body)

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        return self._call('POST', '/api/v1/namespaces/%s/pods/%s/eviction' % (_segment(namespace), _segment(name)),
                          kwargs, body)

    # ConfigMaps and Secrets
    def read_namespaced_config_map(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/namespaces/%s/configmaps/%s' % (_segment(namespace), _segment(name)), kwargs)

    def list_namespaced_config_map(self, namespace: str, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/namespaces/%s/configmaps' % _segment(namespace), kwargs)

    def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/namespaces/%s/secrets/%s' % (_segment(namespace), _segment(name)), kwargs)

    def list_namespaced_secret(self, namespace: str, **kwargs: Any) -> Any:
        return self._call('GET', '/api/v1/namespaces/%s/secrets' % _segment(namespace), kwargs)

    # RuntimeClasses (node.k8s.io/v1)
    def read_runtime_class(self, name: str, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/node.k8s.io/v1/runtimeclasses/%s' % _segment(name), kwargs)

    def list_runtime_class(self, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/node.k8s.io/v1/runtimeclasses', kwargs)

    # DeviceClasses (resource.k8s.io/v1, Kubernetes 1.34+; a server without it answers 404)
    def read_device_class(self, name: str, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/resource.k8s.io/v1/deviceclasses/%s' % _segment(name), kwargs)

    def list_device_class(self, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/resource.k8s.io/v1/deviceclasses', kwargs)

    # ResourceSlices (resource.k8s.io/v1): what the DRA drivers publish per node
    def read_resource_slice(self, name: str, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/resource.k8s.io/v1/resourceslices/%s' % _segment(name), kwargs)

    def list_resource_slice(self, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/resource.k8s.io/v1/resourceslices', kwargs)

    # CustomResourceDefinitions (apiextensions.k8s.io/v1): whether an API such as monitoring.coreos.com/v1 is installed
    def read_custom_resource_definition(self, name: str, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s' % _segment(name), kwargs)

    def list_custom_resource_definition(self, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', kwargs)

    # ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30): the DRA stack's own
    def read_validating_admission_policy(self, name: str, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/%s'
                          % _segment(name), kwargs)

    def list_validating_admission_policy(self, **kwargs: Any) -> Any:
        return self._call('GET', '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies', kwargs)

    # /version/ (with the slash, as VersionApi.get_code sends it)
    def get_code(self, **kwargs: Any) -> Any:
        return self._call('GET', '/version/', kwargs)


# The typed API class names the collection's call sites use (kube/read.KINDS, the modules): one class serves them all.
CoreV1Api = NodeV1Api = ResourceV1Api = VersionApi = ApiextensionsV1Api = AdmissionregistrationV1Api = CoreApi


def client_module(api_client_class: type | None) -> Any:
    """This module where kubernetes.client would be used for its typed APIs; None when the client is missing
    (``api_client_class``: kube/access.ApiClient, None when ``kubernetes`` cannot be imported)."""
    import sys
    return sys.modules[__name__] if api_client_class is not None else None
