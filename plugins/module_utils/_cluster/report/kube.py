# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read Nodes and Pods for gpu_share_report through kube/rest (read-only: list calls only), and, where the API server
serves resource.k8s.io/v1 (Dynamic Resource Allocation), ResourceClaims and ResourceSlices.

The connection comes from kube/access (kube/native, else kubernetes.core's client). The DRA part costs one discovery request and one
paginated list of each kind, whatever the number of nodes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import rest

# CoreV1Api as plain requests (kube/rest): the typed API classes of the client cost ~0.5 CPU-s to import
k8s_client = rest.client_module(access.ApiClient)

KUBERNETES_IMPORT_ERROR = access.KUBERNETES_IMPORT_ERROR
KubeError = access.KubeError


def build_client(params: dict[str, Any]) -> Any:
    """The ApiClient of the collection's one Kubernetes access layer (kube/access, on kubernetes.core)."""
    return access.api_client(params)


def _list_all(call: Callable[..., Any], what: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        args = dict(kwargs, limit=500, _preload_content=False)
        if token:
            args['_continue'] = token
        try:
            response = call(**args)
        except Exception as e:  # ApiException (HTTP status) or a connection/TLS error
            if access.is_api_error(e):
                raise KubeError('listing %s failed: %s %s %s' % (what, getattr(e, 'status'), getattr(e, 'reason', ''),
                                                                 (getattr(e, 'body', '') or '')[:500]))
            raise KubeError('listing %s failed: %s' % (what, e))
        data = json.loads(response.data)
        items.extend(data.get('items') or [])
        token = (data.get('metadata') or {}).get('continue')
        if not token:
            return items


def read_cluster(api_client: Any, node_selector: str | None = None, nodes: list[str] | None = None,
                 namespace: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, pods) as plain dicts in API field names. Pods that finished are filtered out by the server."""
    core = k8s_client.CoreV1Api(api_client)
    kwargs: dict[str, Any] = {}
    if node_selector:
        kwargs['label_selector'] = node_selector
    node_items = _list_all(core.list_node, 'nodes', **kwargs)
    if nodes:
        wanted = set(nodes)
        node_items = [n for n in node_items if (n.get('metadata') or {}).get('name') in wanted]
    selector = 'status.phase!=Succeeded,status.phase!=Failed'
    if namespace:
        pod_items = _list_all(core.list_namespaced_pod, 'pods in namespace %s' % namespace, namespace=namespace,
                              field_selector=selector)
    else:
        pod_items = _list_all(core.list_pod_for_all_namespaces, 'pods', field_selector=selector)
    return node_items, pod_items


# Dynamic Resource Allocation (resource.k8s.io/v1: GA in Kubernetes 1.34)
DRA_GROUP = 'resource.k8s.io'
DRA_VERSION = 'v1'
DRA_PREFIX = '/apis/%s/%s' % (DRA_GROUP, DRA_VERSION)


class ResourceApi(rest.CoreApi):
    """The resource.k8s.io/v1 list calls the report makes, as plain requests (kube/rest): the ResourceClaims here,
    the ResourceSlices from kube/rest.CoreApi."""

    def list_resource_claim_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._call('GET', DRA_PREFIX + '/resourceclaims', kwargs)

    def list_namespaced_resource_claim(self, namespace: str, **kwargs: Any) -> Any:
        return self._call('GET', '%s/namespaces/%s/resourceclaims' % (DRA_PREFIX, rest.quote(namespace, safe='')),
                          kwargs)
    # list_resource_slice: kube/rest.CoreApi's (k8s_objects_info reads ResourceSlices too)


def dra_served(api_client: Any, send: Callable[..., Any] | None = None) -> bool:
    """Whether the API server serves resource.k8s.io/v1: one discovery request (GET /apis/resource.k8s.io).
    404 means not served (Kubernetes before 1.34 without the beta APIs, or the group switched off)."""
    send = send or rest.request
    try:
        response = send(api_client, 'GET', '/apis/%s' % DRA_GROUP)
    except Exception as e:  # ApiException (HTTP status) or a connection/TLS error
        if access.is_api_error(e) and getattr(e, 'status', None) == 404:
            return False
        raise KubeError('discovery of %s failed: %s %s' % (DRA_GROUP, getattr(e, 'status', '') or '', e))
    data = json.loads(response.data)
    return any(v.get('version') == DRA_VERSION for v in data.get('versions') or [])


def read_dra(api_client: Any, namespace: str | None = None, send: Callable[..., Any] | None = None) -> dict[str, Any]:
    """{'served': bool, 'claims': [...], 'slices': [...], 'error': str or None} for the report's DRA part.

    Not served: no list request at all. A list the credentials may not make (403) is reported in ``error`` (the rest of
    the report does not depend on it), any other failure raises KubeError."""
    if not dra_served(api_client, send):
        return {'served': False, 'claims': [], 'slices': [], 'error': None}
    api = ResourceApi(api_client, send) if send else ResourceApi(api_client)
    out: dict[str, Any] = {'served': True, 'claims': [], 'slices': [], 'error': None}
    try:
        if namespace:
            out['claims'] = _list_all(lambda **kw: api.list_namespaced_resource_claim(namespace, **kw),
                                      'resourceclaims in namespace %s' % namespace)
        else:
            out['claims'] = _list_all(api.list_resource_claim_for_all_namespaces, 'resourceclaims')
        out['slices'] = _list_all(api.list_resource_slice, 'resourceslices')
    except KubeError as e:
        if ' 403 ' not in str(e):
            raise
        out['error'] = str(e)
    return out
