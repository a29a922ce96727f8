# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's dashboard in a Grafana named by its URL (module grafana_dashboard), through Grafana's dashboard API
of Grafana 12 and later: ``/apis/dashboard.grafana.app/<version>/namespaces/<namespace>/dashboards[/<uid>]`` (version
v1 from Grafana 13, v1beta1 in 12; the namespace ``default`` for the first organisation of a Grafana of one's own,
``org-<id>`` for the others, ``stacks-<id>`` on Grafana Cloud). Grafana serves that API with Kubernetes' API server
library: objects with ``metadata`` (name = the dashboard's uid, labels, the folder in annotation
``grafana.app/folder``, ``resourceVersion``) and the dashboard model in ``spec``; discovery under
``/apis/dashboard.grafana.app``; errors as Kubernetes ``Status`` objects. The legacy ``/api/dashboards/db`` (deprecated
since Grafana 13) is not used; a Grafana without the new API is refused with what to do instead.

A dashboard the collection made carries the label ``app.kubernetes.io/managed-by: gpuops.k8s_gpu``; one with the same
uid that lacks it is the site's: refused (named) unless ``force``. An update sends the resourceVersion it read, so a
change made meanwhile (409 Conflict) fails instead of being overwritten.

No Ansible import: the module gives ``request(method, path, body) -> (status, answer)``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics.dashboard import UID_FORM
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import MANAGED_BY

GROUP = 'dashboard.grafana.app'
VERSIONS = ('v1', 'v1beta1')   # newest first: what auto takes
API_VERSIONS = ('auto',) + VERSIONS
FOLDER_ANNOTATION = 'grafana.app/folder'
OWNER_LABEL = 'app.kubernetes.io/managed-by'
# what Grafana assigns itself (the uid is the object's name): never sent, never compared
SERVER_KEYS = frozenset(('id', 'uid', 'version'))
_UID = UID_FORM   # a dashboard's uid, also a folder's
_NAMESPACE = re.compile(r'^(default|org-[0-9]+|stacks-[0-9]+)$')
_URL = re.compile(r'^https?://[^\s/?#]+(/[^\s?#]*)?$')

Request = Callable[[str, str, Any], 'tuple[int, Any]']


class GrafanaError(Exception):
    """Bad input or an answer that stops the run; the message names the option or the request."""


def check_options(url: Any, namespace: Any, folder: Any, api_version: Any, dashboard: Any) -> None:
    if not isinstance(url, str) or not _URL.match(url):
        raise GrafanaError('url must be an http:// or https:// URL of the Grafana (path allowed, no query); got %r'
                           % (url,))
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise GrafanaError('namespace must be "default", "org-<id>" or "stacks-<id>" (the organisation or Grafana '
                           'Cloud stack of the dashboard API); got %r' % (namespace,))
    if folder is not None and folder != '' and (not isinstance(folder, str) or not _UID.match(folder)):
        raise GrafanaError('folder must be a folder uid (letters, digits, "-", "_", at most 40) or empty for the '
                           'root; got %r' % (folder,))
    if api_version not in API_VERSIONS:
        raise GrafanaError('api_version must be one of %s; got %r' % (', '.join(API_VERSIONS), api_version))
    if not isinstance(dashboard, dict):
        raise GrafanaError('dashboard must be a dashboard model (a dictionary); got %r' % (type(dashboard).__name__,))
    uid = dashboard.get('uid')
    if not isinstance(uid, str) or not _UID.match(uid):
        raise GrafanaError('dashboard.uid must be set: letters, digits, "-", "_", at most 40 characters; got %r'
                           % (uid,))
    if not isinstance(dashboard.get('title'), str) or not dashboard['title'].strip():
        raise GrafanaError('dashboard.title must be a non-empty string; got %r' % (dashboard.get('title'),))


def collection_path(version: str, namespace: str) -> str:
    return '/apis/%s/%s/namespaces/%s/dashboards' % (GROUP, version, namespace)


def _reason(status: int, answer: Any) -> str:
    if isinstance(answer, dict) and answer.get('message'):
        return 'HTTP %d %s' % (status, answer['message'])
    return 'HTTP %d' % status


def discover_version(request: Request, wanted: str) -> str:
    """The API version to use: ``wanted`` if it is served, or with ``auto`` the newest of VERSIONS served."""
    status, answer = request('GET', '/apis/%s' % GROUP, None)
    if status == 404:
        raise GrafanaError('url: this Grafana does not serve %s (Grafana 12 and later do): provision the dashboard '
                           'with the ConfigMap the role makes for a dashboard sidecar, or import it by hand'
                           % GROUP)
    if status in (401, 403):
        raise GrafanaError('token: Grafana refused the discovery of %s (%s)' % (GROUP, _reason(status, answer)))
    if status != 200 or not isinstance(answer, dict):
        raise GrafanaError('url: discovery of %s failed (%s)' % (GROUP, _reason(status, answer)))
    served = [str(v.get('version')) for v in answer.get('versions') or [] if isinstance(v, dict)]
    if wanted != 'auto':
        if wanted not in served:
            raise GrafanaError('api_version: %s is not served by this Grafana (it serves %s)'
                               % (wanted, ', '.join(served) or 'none'))
        return wanted
    for v in VERSIONS:
        if v in served:
            return v
    raise GrafanaError('api_version: this Grafana serves %s of %s, none of %s'
                       % (', '.join(served) or 'no version', GROUP, ', '.join(VERSIONS)))


def desired_object(dashboard: dict[str, Any], version: str, folder: str | None) -> dict[str, Any]:
    spec = dict((k, v) for k, v in dashboard.items() if k not in SERVER_KEYS)   # the uid is the object's name
    meta: dict[str, Any] = {'name': dashboard['uid'], 'labels': {OWNER_LABEL: MANAGED_BY}}
    if folder:
        meta['annotations'] = {FOLDER_ANNOTATION: folder}
    return {'apiVersion': '%s/%s' % (GROUP, version), 'kind': 'Dashboard', 'metadata': meta, 'spec': spec}


def _spec_differs(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a key of ours has another value in Grafana. Keys only Grafana's copy has (defaults it may add when it
    stores a dashboard, links a user added) are left alone: comparing them would write on every run."""
    return any(current.get(k) != v for k, v in wanted.items() if k not in SERVER_KEYS)


def _folder(obj: dict[str, Any]) -> str:
    return ((obj.get('metadata') or {}).get('annotations') or {}).get(FOLDER_ANNOTATION) or ''


def _owned(obj: dict[str, Any]) -> bool:
    return ((obj.get('metadata') or {}).get('labels') or {}).get(OWNER_LABEL) == MANAGED_BY


def _view(obj: dict[str, Any] | None, keys: Any = None) -> dict[str, Any]:
    if obj is None:
        return {}
    spec = obj.get('spec') or {}
    return {'folder': _folder(obj),
            'spec': dict((k, v) for k, v in spec.items() if k not in SERVER_KEYS and (keys is None or k in keys))}


def converge(request: Request, dashboard: dict[str, Any], namespace: str = 'default', folder: str | None = None,
             state: str = 'present', api_version: str = 'auto', force: bool = False,
             check_mode: bool = False) -> dict[str, Any]:
    """Make the dashboard ``state`` in the Grafana behind ``request``. Returns {changed, operation (created, updated,
    deleted, none), uid, api_version, namespace, resource_version, diff {before, after}}."""
    if state not in ('present', 'absent'):
        raise GrafanaError('state must be present or absent; got %r' % (state,))
    version = discover_version(request, api_version)
    base = collection_path(version, namespace)
    uid = dashboard['uid']
    status, current = request('GET', '%s/%s' % (base, uid), None)
    if status == 404:
        current = None
    elif status in (401, 403):
        raise GrafanaError('token: Grafana refused to read dashboard %s in %s (%s)'
                           % (uid, namespace, _reason(status, current)))
    elif status != 200 or not isinstance(current, dict):
        raise GrafanaError('url: reading dashboard %s failed (%s)' % (uid, _reason(status, current)))
    result: dict[str, Any] = {'changed': False, 'operation': 'none', 'uid': uid, 'api_version': version,
                              'namespace': namespace, 'resource_version': None}
    if current is not None:
        result['resource_version'] = (current.get('metadata') or {}).get('resourceVersion')
        if not _owned(current) and not force:
            title = (current.get('spec') or {}).get('title')
            raise GrafanaError('dashboard %s (%r) in %s was not made by %s (no label %s=%s): the site owns it; '
                               'choose another dashboard.uid, or set force to %s it'
                               % (uid, title, namespace, MANAGED_BY, OWNER_LABEL, MANAGED_BY,
                                  'replace' if state == 'present' else 'delete'))
    if state == 'absent':
        before = _view(current)
        if current is None:
            result['diff'] = {'before': {}, 'after': {}}
            return result
        result.update(changed=True, operation='deleted', diff={'before': before, 'after': {}})
        if not check_mode:
            status, answer = request('DELETE', '%s/%s' % (base, uid), None)
            if status not in (200, 202, 404):
                raise GrafanaError('deleting dashboard %s failed (%s)' % (uid, _reason(status, answer)))
        return result

    wanted = desired_object(dashboard, version, folder)
    before, after = _view(current, wanted['spec']), _view(wanted)
    if current is None:
        result.update(changed=True, operation='created', diff={'before': {}, 'after': after})
        if not check_mode:
            status, answer = request('POST', base, wanted)
            if status not in (200, 201, 202):
                raise GrafanaError('creating dashboard %s failed (%s)' % (uid, _reason(status, answer)))
            result['resource_version'] = ((answer or {}).get('metadata') or {}).get('resourceVersion')
        return result
    labels = (current.get('metadata') or {}).get('labels') or {}
    if (not _spec_differs(current.get('spec') or {}, wanted['spec']) and _folder(current) == (folder or '')
            and labels.get(OWNER_LABEL) == MANAGED_BY):
        result['diff'] = {'before': before, 'after': before}
        return result
    result.update(changed=True, operation='updated', diff={'before': before, 'after': after})
    if not check_mode:
        meta = wanted['metadata']
        # keep the other labels and annotations the dashboard has (Grafana's own among them)
        meta['labels'] = dict(labels, **meta['labels'])
        annotations = dict((current.get('metadata') or {}).get('annotations') or {})
        annotations.pop(FOLDER_ANNOTATION, None)
        annotations.update(meta.get('annotations') or {})
        if annotations:
            meta['annotations'] = annotations
        meta['resourceVersion'] = result['resource_version']
        status, answer = request('PUT', '%s/%s' % (base, uid), wanted)
        if status == 409:
            raise GrafanaError('dashboard %s changed in Grafana while this run read it (%s): run again'
                               % (uid, _reason(status, answer)))
        if status not in (200, 201):
            raise GrafanaError('updating dashboard %s failed (%s)' % (uid, _reason(status, answer)))
        result['resource_version'] = ((answer or {}).get('metadata') or {}).get('resourceVersion')
    return result
