# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_share_report's client side, with a fake kubernetes package (the unit venv need not have the real one)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils import gpu_share_report_kube as kube


class FakeConfiguration(object):
    def __init__(self):
        self.host = 'http://localhost'
        self.api_key = {}
        self.verify_ssl = True
        self.ssl_ca_cert = self.cert_file = self.key_file = None


class FakeClientModule(object):
    Configuration = FakeConfiguration

    class ApiClient(object):
        def __init__(self, configuration):
            self.configuration = configuration


class FakeConfigModule(object):
    calls = []
    fail_default = False

    @classmethod
    def load_kube_config(cls, config_file=None, context=None, client_configuration=None):
        cls.calls.append(('file', config_file, context))
        if config_file is None and cls.fail_default:
            raise IOError('no ~/.kube/config')
        if config_file == '/broken':
            raise ValueError('yaml error')
        client_configuration.host = 'https://from-kubeconfig:6443'

    @classmethod
    def load_kube_config_from_dict(cls, config_dict, context=None, client_configuration=None):
        cls.calls.append(('dict', sorted(config_dict), context))
        client_configuration.host = 'https://from-dict:6443'

    @classmethod
    def load_incluster_config(cls, client_configuration=None):
        cls.calls.append(('incluster',))
        raise IOError('not in a pod')


@pytest.fixture
def fake(monkeypatch):
    FakeConfigModule.calls = []
    FakeConfigModule.fail_default = False
    monkeypatch.setattr(kube, 'k8s_client', FakeClientModule)
    monkeypatch.setattr(kube, 'k8s_config', FakeConfigModule)
    return FakeConfigModule


def test_auth_arg_spec_fallbacks():
    marker = object()
    spec = kube.auth_arg_spec(marker)
    assert spec['kubeconfig']['fallback'] == (marker, ['K8S_AUTH_KUBECONFIG'])
    assert spec['api_key']['no_log'] is True
    assert spec['validate_certs']['default'] is True
    assert kube.AUTH_ARG_SPEC['kubeconfig']['fallback'] == ('K8S_AUTH_KUBECONFIG',)   # not modified


def test_build_client_from_file_with_overrides(fake):
    api = kube.build_client({'kubeconfig': '/k', 'context': 'c', 'host': 'https://h:6443', 'api_key': 'tok',
                             'validate_certs': False, 'ca_cert': '/ca', 'client_cert': '/crt', 'client_key': '/key'})
    cfg = api.configuration
    assert fake.calls == [('file', '/k', 'c')]
    assert cfg.host == 'https://h:6443' and cfg.api_key == {'authorization': 'Bearer tok'}
    assert cfg.verify_ssl is False and (cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file) == ('/ca', '/crt', '/key')


def test_build_client_from_dict_and_default(fake):
    assert kube.build_client({'kubeconfig': {'clusters': []}}).configuration.host == 'https://from-dict:6443'
    assert kube.build_client({}).configuration.host == 'https://from-kubeconfig:6443'
    assert fake.calls == [('dict', ['clusters'], None), ('file', None, None)]


def test_build_client_host_only_skips_kubeconfig(fake):
    cfg = kube.build_client({'host': 'http://127.0.0.1:1'}).configuration
    assert cfg.host == 'http://127.0.0.1:1' and fake.calls == []


def test_build_client_errors(fake):
    with pytest.raises(kube.KubeError, match='cannot load the kubeconfig /broken: yaml error'):
        kube.build_client({'kubeconfig': '/broken'})
    fake.fail_default = True
    with pytest.raises(kube.KubeError, match='no in-cluster service account'):
        kube.build_client({})


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
    class Boom(Exception):
        status, reason, body = 403, 'Forbidden', 'nodes is forbidden'

    monkeypatch.setattr(kube, 'ApiException', Boom)

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
