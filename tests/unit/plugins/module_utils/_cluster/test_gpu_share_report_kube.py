# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_share_report's client side, with fakes (the unit venv need not have the kubernetes package)."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import kube


def test_build_client_is_the_access_layer(monkeypatch):
    """The report's client comes from kube/access (its tests: test_k8s_access.py, moved from here)."""
    seen = []
    monkeypatch.setattr(kube.access, 'api_client', lambda params: seen.append(params) or 'api')
    assert kube.build_client({'host': 'http://h'}) == 'api' and seen == [{'host': 'http://h'}]
    assert kube.KubeError is kube.access.KubeError


class Resp(object):
    def __init__(self, data):
        self.data = json.dumps(data).encode()


def test_list_all_pages():
    calls = []

    def call(**kwargs):
        calls.append(kwargs)
        if '_continue' not in kwargs:
            return Resp({'items': [{'n': 1}], 'metadata': {'continue': 'tok'}})
        return Resp({'items': [{'n': 2}], 'metadata': {}})

    assert kube._list_all(call, 'nodes', label_selector='a=b') == [{'n': 1}, {'n': 2}]
    assert calls[0] == {'label_selector': 'a=b', 'limit': 500, '_preload_content': False}
    assert calls[1]['_continue'] == 'tok'


def test_list_all_errors(monkeypatch):
    class Boom(Exception):  # an error of either client: an HTTP status is what makes it an answer of the server
        status, reason, body = 403, 'Forbidden', 'nodes is forbidden'

    def denied(**kwargs):
        raise Boom()

    with pytest.raises(kube.KubeError, match='listing nodes failed: 403 Forbidden nodes is forbidden'):
        kube._list_all(denied, 'nodes')

    def refused(**kwargs):
        raise OSError('connection refused')

    with pytest.raises(kube.KubeError, match='listing pods failed: connection refused'):
        kube._list_all(refused, 'pods')


def test_read_cluster(monkeypatch):
    seen = {}

    class Core(object):
        def __init__(self, api):
            pass

        def list_node(self, **kw):
            seen['node'] = kw
            return Resp({'items': [{'metadata': {'name': 'a'}}, {'metadata': {'name': 'b'}}]})

        def list_pod_for_all_namespaces(self, **kw):
            seen['pods'] = kw
            return Resp({'items': [{'metadata': {'name': 'p'}}]})

        def list_namespaced_pod(self, **kw):
            seen['nspods'] = kw
            return Resp({'items': []})

    class Client(object):
        CoreV1Api = Core

    monkeypatch.setattr(kube, 'k8s_client', Client)
    nodes, pods = kube.read_cluster(None, node_selector='x=y', nodes=['b'])
    assert [n['metadata']['name'] for n in nodes] == ['b'] and len(pods) == 1
    assert seen['node']['label_selector'] == 'x=y'
    assert seen['pods']['field_selector'] == 'status.phase!=Succeeded,status.phase!=Failed'
    kube.read_cluster(None, namespace='ml')
    assert seen['nspods']['namespace'] == 'ml'
