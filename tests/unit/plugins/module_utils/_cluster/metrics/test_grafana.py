# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metrics/grafana: the dashboard through Grafana's dashboard.grafana.app API, against a fake that keeps objects as
Kubernetes' API server library does (resourceVersion per write, 409 on a stale one, 404 when absent). The lab runs the
same code against a real kube-apiserver serving that API group (lab/tests/integration/test_grafana_dashboard_real.py)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard, grafana

BASE = '/apis/dashboard.grafana.app/v1/namespaces/default/dashboards'


class FakeGrafana:
    def __init__(self, versions=('v1', 'v1beta1'), status=None):
        self.versions = list(versions)
        self.objects = {}
        self.rv = 100
        self.calls = []
        self.status = status   # force every answer to this status (auth errors)

    def __call__(self, method, path, body):
        self.calls.append((method, path))
        if self.status:
            return self.status, {'kind': 'Status', 'message': 'forbidden by the fake'}
        if path == '/apis/dashboard.grafana.app':
            if not self.versions:
                return 404, None
            return 200, {'kind': 'APIGroup', 'versions': [{'version': v} for v in self.versions]}
        assert path.startswith('/apis/dashboard.grafana.app/')
        name = path.rsplit('/', 1)[1] if path.count('/') == 7 else None
        if method == 'GET':
            if name not in self.objects:
                return 404, {'kind': 'Status', 'message': 'dashboards "%s" not found' % name}
            return 200, copy.deepcopy(self.objects[name])
        if method == 'POST':
            name = body['metadata']['name']
            if name in self.objects:
                return 409, {'message': 'already exists'}
            self.rv += 1
            obj = copy.deepcopy(body)
            obj['metadata']['resourceVersion'] = str(self.rv)
            obj['spec']['version'] = 1   # something the server adds
            self.objects[name] = obj
            return 201, copy.deepcopy(obj)
        if method == 'PUT':
            if body['metadata'].get('resourceVersion') != self.objects[name]['metadata']['resourceVersion']:
                return 409, {'message': 'the object has been modified'}
            self.rv += 1
            obj = copy.deepcopy(body)
            obj['metadata']['resourceVersion'] = str(self.rv)
            self.objects[name] = obj
            return 200, copy.deepcopy(obj)
        if method == 'DELETE':
            self.objects.pop(name, None)
            return 200, {'kind': 'Status', 'status': 'Success'}
        raise AssertionError(method)


def writes(fake):
    return [c for c in fake.calls if c[0] in ('POST', 'PUT', 'DELETE')]


def test_create_rerun_update_and_delete():
    g, board = FakeGrafana(), dashboard.dashboard()
    r = grafana.converge(g, board, folder='gpu-team')
    assert (r['changed'], r['operation'], r['api_version'], r['uid']) == (True, 'created', 'v1', board['uid'])
    obj = g.objects[board['uid']]
    assert obj['metadata']['labels'] == {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu'}
    assert obj['metadata']['annotations'] == {'grafana.app/folder': 'gpu-team'}
    assert 'uid' not in obj['spec'] and obj['spec']['title'] == board['title']
    assert r['diff']['before'] == {} and r['diff']['after']['folder'] == 'gpu-team'

    n = len(writes(g))
    r = grafana.converge(g, board, folder='gpu-team')
    assert (r['changed'], r['operation']) == (False, 'none') and len(writes(g)) == n
    assert r['diff']['before'] == r['diff']['after']

    # a key only Grafana's copy has is left alone; a key of ours that differs is written back
    g.objects[board['uid']]['spec']['graphTooltip'] = 0
    assert grafana.converge(g, board, folder='gpu-team')['changed'] is False
    g.objects[board['uid']]['spec']['title'] = 'edited in Grafana'
    g.objects[board['uid']]['metadata']['labels']['team'] = 'gpu'
    r = grafana.converge(g, board, folder='gpu-team')
    assert (r['changed'], r['operation']) == (True, 'updated')
    assert r['diff']['before']['spec']['title'] == 'edited in Grafana'
    assert g.objects[board['uid']]['spec']['title'] == board['title']
    assert g.objects[board['uid']]['metadata']['labels']['team'] == 'gpu'   # other labels kept

    # moving it to the root
    r = grafana.converge(g, board, folder=None)
    assert r['operation'] == 'updated' and 'grafana.app/folder' not in (
        g.objects[board['uid']]['metadata'].get('annotations') or {})

    r = grafana.converge(g, board, state='absent')
    assert (r['changed'], r['operation']) == (True, 'deleted') and board['uid'] not in g.objects
    r = grafana.converge(g, board, state='absent')
    assert (r['changed'], r['operation']) == (False, 'none')


def test_check_mode_writes_nothing():
    g, board = FakeGrafana(), dashboard.dashboard()
    r = grafana.converge(g, board, check_mode=True)
    assert (r['changed'], r['operation']) == (True, 'created') and not writes(g) and not g.objects
    grafana.converge(g, board)
    g.objects[board['uid']]['spec']['refresh'] = '5s'
    n = len(writes(g))
    assert grafana.converge(g, board, check_mode=True)['operation'] == 'updated'
    assert grafana.converge(g, board, state='absent', check_mode=True)['operation'] == 'deleted'
    assert len(writes(g)) == n and g.objects[board['uid']]['spec']['refresh'] == '5s'


def test_the_sites_dashboard_is_refused_unless_forced():
    g, board = FakeGrafana(), dashboard.dashboard()
    g.objects[board['uid']] = {'metadata': {'name': board['uid'], 'resourceVersion': '7'},
                               'spec': {'title': 'Our own GPU board'}}
    for state in ('present', 'absent'):
        with pytest.raises(grafana.GrafanaError, match="gpuops-gpu-sharing \\('Our own GPU board'\\) in default was "
                           'not made by gpuops.k8s_gpu.*set force to'):
            grafana.converge(g, board, state=state)
    assert not writes(g)
    r = grafana.converge(g, board, force=True)
    assert r['operation'] == 'updated' and grafana._owned(g.objects[board['uid']])


def test_a_change_made_meanwhile_fails_instead_of_being_overwritten():
    g, board = FakeGrafana(), dashboard.dashboard()
    grafana.converge(g, board)
    g.objects[board['uid']]['spec']['title'] = 'x'
    real = g.__call__

    def racing(method, path, body):
        if method == 'PUT':   # someone saves in Grafana between our read and our write
            g.objects[board['uid']]['metadata']['resourceVersion'] = '999'
        return real(method, path, body)
    with pytest.raises(grafana.GrafanaError, match='changed in Grafana while this run read it.*run again'):
        grafana.converge(racing, board)


def test_versions_and_a_grafana_without_the_api():
    board = dashboard.dashboard()
    assert grafana.converge(FakeGrafana(versions=('v1beta1',)), board)['api_version'] == 'v1beta1'
    assert grafana.converge(FakeGrafana(), board, api_version='v1beta1')['api_version'] == 'v1beta1'
    with pytest.raises(grafana.GrafanaError, match='v1 is not served by this Grafana \\(it serves v1beta1\\)'):
        grafana.converge(FakeGrafana(versions=('v1beta1',)), board, api_version='v1')
    with pytest.raises(grafana.GrafanaError, match='does not serve dashboard.grafana.app \\(Grafana 12 and later'):
        grafana.converge(FakeGrafana(versions=()), board)
    with pytest.raises(grafana.GrafanaError, match='serves v0alpha1 of dashboard.grafana.app, none of v1, v1beta1'):
        grafana.converge(FakeGrafana(versions=('v0alpha1',)), board)
    with pytest.raises(grafana.GrafanaError, match='token: Grafana refused the discovery.*HTTP 403 forbidden'):
        grafana.converge(FakeGrafana(status=403), board)


@pytest.mark.parametrize('args, match', [
    (('ftp://g', 'default', '', 'auto'), 'url must be an http:// or https:// URL'),
    (('https://g?x=1', 'default', '', 'auto'), 'url must be'),
    (('https://g', 'org1', '', 'auto'), 'namespace must be "default", "org-<id>" or "stacks-<id>".*org1'),
    (('https://g', 'default', 'a b', 'auto'), 'folder must be a folder uid'),
    (('https://g', 'default', 'x' * 41, 'auto'), 'folder must be a folder uid'),
    (('https://g', 'default', '', 'v2'), 'api_version must be one of auto, v1, v1beta1'),
])
def test_bad_options_are_refused_naming_them(args, match):
    with pytest.raises(grafana.GrafanaError, match=match):
        grafana.check_options(*args, dashboard=dashboard.dashboard())


def test_good_options_and_the_models_uid_and_title():
    grafana.check_options('https://example.com/grafana/', 'org-2', 'gpu_team-1', 'v1', dashboard.dashboard())
    grafana.check_options('http://127.0.0.1:3000', 'stacks-12345', '', 'auto', dashboard.dashboard())
    for board, match in (({'title': 't'}, 'dashboard.uid must be set'), ({'uid': 'a/b', 'title': 't'}, 'dashboard.uid'),
                         ({'uid': 'ok'}, 'dashboard.title must be'), ([], 'dashboard must be a dashboard model')):
        with pytest.raises(grafana.GrafanaError, match=match):
            grafana.check_options('https://g', 'default', '', 'auto', board)
