# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read several Kubernetes objects (and the server version) in one module run.

A role that needs the Nodes, a RuntimeClass list and two ConfigMaps used to pay one module process (Python start-up,
the kubernetes client import, API discovery) per kind. This reads them all through one plain ApiClient with the
typed API calls of kube/rest (plain requests, without the client's typed API classes), without discovery: one request
per query. Only the kinds in KINDS are served (those the collection
reads); anything else is refused before any request. Secrets come back without their data.

Pure logic on ApiClient-like objects (the typed API classes are passed in), so the unit tests use fakes.
"""

from __future__ import annotations

import json
from typing import Any

# (apiVersion, kind) -> (typed API class name, read method, list method, namespaced)
KINDS = {
    ('v1', 'Node'): ('CoreV1Api', 'read_node', 'list_node', False),
    ('v1', 'ConfigMap'): ('CoreV1Api', 'read_namespaced_config_map', 'list_namespaced_config_map', True),
    ('v1', 'Secret'): ('CoreV1Api', 'read_namespaced_secret', 'list_namespaced_secret', True),
    ('node.k8s.io/v1', 'RuntimeClass'): ('NodeV1Api', 'read_runtime_class', 'list_runtime_class', False),
    ('resource.k8s.io/v1', 'DeviceClass'): ('ResourceV1Api', 'read_device_class', 'list_device_class', False),
    ('resource.k8s.io/v1', 'ResourceSlice'): ('ResourceV1Api', 'read_resource_slice', 'list_resource_slice', False),
    ('apiextensions.k8s.io/v1', 'CustomResourceDefinition'): (
        'ApiextensionsV1Api', 'read_custom_resource_definition', 'list_custom_resource_definition', False),
    ('admissionregistration.k8s.io/v1', 'ValidatingAdmissionPolicy'): (
        'AdmissionregistrationV1Api', 'read_validating_admission_policy', 'list_validating_admission_policy', False),
}
# Fields of a Secret that are never returned (the module's result may be printed or registered).
SECRET_HIDDEN = ('data', 'stringData')


class ReadError(Exception):
    """A request failed for another reason than "not found"."""


def kinds_text() -> str:
    return ', '.join('%s %s' % (k, a) for a, k in sorted(KINDS, key=lambda ak: ak[1]))


def check_queries(queries: list[Any] | None) -> list[str]:
    """Problems with the queries, before any request: a list of messages (empty when all is well)."""
    problems: list[str] = []
    keys = set()
    for i, q in enumerate(queries or []):
        if not isinstance(q, dict):
            problems.append('queries[%d] must be a dictionary, got %s' % (i, type(q).__name__))
            continue
        key = q.get('key')
        if not key or not isinstance(key, str):
            problems.append('queries[%d] has no key (the name of its result)' % i)
        elif key in keys:
            problems.append('queries[%d]: key %s is used twice' % (i, key))
        keys.add(key)
        unknown = sorted(set(q) - set(['key', 'api_version', 'kind', 'name', 'namespace', 'label_selectors',
                                       'field_selectors']))
        if unknown:
            problems.append('queries[%d] (%s): unknown option(s) %s; allowed: key, api_version, kind, name, namespace, '
                            'label_selectors, field_selectors' % (i, key, ', '.join(unknown)))
        kind = (q.get('api_version') or 'v1', q.get('kind'))
        if kind not in KINDS:
            problems.append('queries[%d] (%s): kind %s %s is not one this module reads; supported: %s'
                            % (i, key, kind[1], kind[0], kinds_text()))
            continue
        namespaced = KINDS[kind][3]
        if namespaced and not q.get('namespace'):
            problems.append('queries[%d] (%s): %s is namespaced; set namespace' % (i, key, kind[1]))
        if not namespaced and q.get('namespace'):
            problems.append('queries[%d] (%s): %s is cluster-scoped; namespace %s makes no sense'
                            % (i, key, kind[1], q['namespace']))
        for option in ('label_selectors', 'field_selectors'):
            selectors = q.get(option) or []
            if not isinstance(selectors, list) or not all(isinstance(s, str) for s in selectors):
                problems.append('queries[%d] (%s): %s must be a list of strings' % (i, key, option))
            elif selectors and q.get('name'):
                problems.append('queries[%d] (%s): %s and name exclude each other' % (i, key, option))
    return problems


def body(resp: Any) -> Any:
    """The JSON document of a raw response (_preload_content=False): its .data decoded; a dict passes through."""
    data = getattr(resp, 'data', resp)
    if isinstance(data, bytes):
        data = data.decode('utf-8')
    return json.loads(data) if isinstance(data, str) else data


def _status(e: BaseException) -> Any:
    return getattr(e, 'status', None)


def _hide(kind: str, obj: Any) -> Any:
    if kind == 'Secret' and isinstance(obj, dict):
        obj = dict((k, v) for k, v in obj.items() if k not in SECRET_HIDDEN)
    return obj


def read_one(apis: dict[str, Any], q: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """(resources, api_found) for one query: a named object gives a list of zero or one; otherwise the list."""
    kind_key = (q.get('api_version') or 'v1', q['kind'])
    api_name, read_m, list_m, namespaced = KINDS[kind_key]
    api = apis[api_name]
    ns = (q.get('namespace'),) if namespaced else ()
    try:
        if q.get('name'):
            items = [body(getattr(api, read_m)(q['name'], *ns, _preload_content=False))]
        else:
            kwargs: dict[str, Any] = {'_preload_content': False}
            if q.get('label_selectors'):
                kwargs['label_selector'] = ','.join(q['label_selectors'])
            if q.get('field_selectors'):
                kwargs['field_selector'] = ','.join(q['field_selectors'])
            items = body(getattr(api, list_m)(*ns, **kwargs)).get('items') or []
    except Exception as e:  # ApiException or a connection error
        if _status(e) == 404:
            # a named object that does not exist, or (for a list) an API the server does not serve
            return [], bool(q.get('name'))
        raise ReadError('reading %s %s%s failed: %s' % (
            q['kind'], (q['namespace'] + '/') if q.get('namespace') else '', q.get('name') or '(list)',
            getattr(e, 'reason', None) or e))
    out = []
    for obj in items:
        obj = _hide(q['kind'], obj)
        # list items carry no apiVersion/kind: give them what k8s_info gives
        obj.setdefault('apiVersion', kind_key[0])
        obj.setdefault('kind', q['kind'])
        out.append(obj)
    return out, True


def read(apis: dict[str, Any], queries: list[dict[str, Any]] | None, version: bool = False) -> dict[str, Any]:
    """{objects: {key: [resource, ...]}, api_found: {key: bool}, version: {...} (when asked)}.

    apis: typed API objects by class name (CoreV1Api, NodeV1Api, ResourceV1Api, VersionApi) over one ApiClient.
    """
    objects: dict[str, list[dict[str, Any]]] = {}
    found: dict[str, bool] = {}
    for q in queries or []:
        objects[q['key']], found[q['key']] = read_one(apis, q)
    result: dict[str, Any] = {'objects': objects, 'api_found': found}
    if version:
        try:
            result['version'] = body(apis['VersionApi'].get_code(_preload_content=False))
        except Exception as e:
            raise ReadError('reading the API server version (/version) failed: %s' % (getattr(e, 'reason', None) or e))
    return result


def project(objects: dict[str, list[dict[str, Any]]],
            fields: dict[str, list[str]] | None) -> dict[str, list[dict[str, Any]]]:
    """objects ({key: [resource, ...]}, as read() returns them) with the resources of each key named in ``fields``
    cut down to the dotted paths listed for it (e.g. {'nodes': ['metadata.labels', 'status.allocatable']}); apiVersion,
    kind and metadata.name are always kept, a path a resource does not have is left out, keys not in ``fields`` are
    returned whole. A new dict: the resources passed in are not changed. Keeps a registered result small when the
    caller needs a few fields of many objects (every Node of a large cluster)."""
    if not fields:
        return objects
    out = dict(objects)
    for key, paths in fields.items():
        if key not in out or not paths:
            continue
        wanted = [p.split('.') for p in ['apiVersion', 'kind', 'metadata.name'] + list(paths)]
        cut = []
        for obj in out[key]:
            small: dict[str, Any] = {}
            for path in wanted:
                src: Any = obj
                for part in path:
                    if not isinstance(src, dict) or part not in src:
                        break
                    src = src[part]
                else:
                    dst = small
                    for part in path[:-1]:
                        dst = dst.setdefault(part, {})
                    dst[path[-1]] = src
            cut.append(small)
        out[key] = cut
    return out


def check_fields(fields: dict[str, Any] | None, queries: list[Any] | None) -> list[str]:
    """Problems with the fields option (a list of messages): every key must be a query's key, every path a string."""
    keys = set(q.get('key') for q in queries or [] if isinstance(q, dict))
    problems = []
    for key, paths in sorted((fields or {}).items()):
        if key not in keys:
            problems.append('fields: %s is not the key of a query; keys: %s' % (key, ', '.join(sorted(k for k in keys if k)) or 'none'))
        if not isinstance(paths, list) or not all(isinstance(p, str) and p and not p.startswith('.')
                                                  and not p.endswith('.') and '..' not in p for p in paths):
            problems.append('fields.%s must be a list of dotted paths (e.g. metadata.labels); got %r' % (key, paths))
    return problems


def typed_apis(client_module: Any, api_client: Any) -> dict[str, Any]:
    """The typed APIs read() uses, over one ApiClient (client_module: kube/rest, or a fake in tests)."""
    names = ('CoreV1Api', 'NodeV1Api', 'ResourceV1Api', 'ApiextensionsV1Api', 'AdmissionregistrationV1Api', 'VersionApi')
    return dict((name, getattr(client_module, name)(api_client)) for name in names)
