# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube/native against its oracle: for every way of connecting it serves, the connection it works out is the one
kubernetes.core's _create_configuration / _create_headers and the kubernetes client's loaders give (the same
installed code the modules fall back to), compared over everything a request carries: the URL's host, TLS
verification, the CA, client certificate and key (their bytes), the Authorization header as the client computes it
before each request (its refresh hook included), the SNI name and the extra headers. Every other way is Unsupported.
"""
import base64
import json
import os

import pytest
import yaml

# the oracle: kubernetes.core and the kubernetes client, as installed beside the collection (never skipped)
from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as core
from kubernetes.client import Configuration
from kubernetes.config import incluster_config, kube_config

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import native

CA, CERT, KEY = b'-----CA-----\n', b'-----CERT-----\n', b'-----KEY-----\n'
KEY2 = b'-----OTHER KEY-----\n'


def b64(data):
    return base64.standard_b64encode(data).decode()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A home without ~/.kube/config, no K8S_AUTH_*, KUBECONFIG or proxy in the environment, the files a kubeconfig
    names, and a service account directory that is not there yet."""
    for name in list(os.environ):
        if name.startswith('K8S_AUTH_') or name in ('KUBECONFIG', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT',
                                                    native.TRANSPORT_ENV) or name.lower().endswith('_proxy'):
            monkeypatch.delenv(name)
    home = tmp_path / 'home'
    (home / '.kube').mkdir(parents=True)
    monkeypatch.setenv('HOME', str(home))
    pki = tmp_path / 'pki'
    pki.mkdir()
    for name, data in (('ca.crt', CA), ('client.crt', CERT), ('client.key', KEY), ('other.key', KEY2)):
        (pki / name).write_bytes(data)
    (pki / 'token').write_text('file-token')
    sa = tmp_path / 'sa'
    monkeypatch.setattr(incluster_config, 'SERVICE_TOKEN_FILENAME', str(sa / 'token'))
    monkeypatch.setattr(incluster_config, 'SERVICE_CERT_FILENAME', str(sa / 'ca.crt'))
    return {'tmp': tmp_path, 'home': home, 'pki': pki, 'sa': sa, 'monkeypatch': monkeypatch}


def kubeconfig(server='https://api.example:6443', user=None, cluster_extra=None, contexts=None, current='main',
               cluster='main', user_name='main'):
    c = dict({'server': server}, **(cluster_extra or {}))
    cfg = {'apiVersion': 'v1', 'kind': 'Config', 'current-context': current,
           'clusters': [{'name': cluster, 'cluster': c}],
           'contexts': contexts or [{'name': 'main', 'context': {'cluster': cluster, 'user': user_name}}],
           'users': [{'name': user_name, 'user': user}] if user is not None else []}
    return cfg


def write(path, cfg):
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _read(value):
    if value is None:
        return None
    with open(value, 'rb') as f:
        return f.read()


def oracle(site, kwargs):
    """What the kubernetes client sends: kubernetes.core's configuration steps, then the Authorization header and the
    host as the client reads them for a request (auth first: its refresh hook may set both again)."""
    mp = site['monkeypatch']
    mp.setattr(kube_config, 'KUBE_CONFIG_DEFAULT_LOCATION', os.environ.get('KUBECONFIG', '~/.kube/config'))
    mp.setattr(Configuration, '_default', None)
    conf = core._create_configuration(core._create_auth_spec(None, **kwargs))
    auth = conf.auth_settings().get('BearerToken', {}).get('value')
    headers = []
    for name, value in core._create_headers(None, **kwargs).items():
        headers.extend((name, v) for v in (value if isinstance(value, list) else [value]))
    return {'host': conf.host, 'verify': bool(conf.verify_ssl), 'ca': _read(conf.ssl_ca_cert),
            'cert': _read(conf.cert_file), 'key': _read(conf.key_file), 'authorization': auth,
            'tls_server_name': conf.tls_server_name or None, 'headers': headers}


def ours(site, kwargs):
    s = native.settings(kwargs, environ=dict(os.environ), sa_dir=str(site['sa']))

    def content(item):
        if item is None:
            return None
        return item[1] if item[0] == 'data' else _read(item[1])
    return {'host': s.host, 'verify': s.verify, 'ca': content(s.ca), 'cert': content(s.cert), 'key': content(s.key),
            'authorization': s.authorization, 'tls_server_name': s.tls_server_name, 'headers': s.headers}


def same(site, kwargs, **expect):
    want = oracle(site, kwargs)
    got = ours(site, kwargs)
    assert got == want
    for key, value in expect.items():
        assert got[key] == value, key
    return got


CERT_USER = {'client-certificate': '../../pki/client.crt', 'client-key': '../../pki/client.key'}  # from home/.kube


def test_K8S_18_client_certificates_relative_to_the_kubeconfig(site):
    path = write(site['home'] / '.kube' / 'config', kubeconfig(
        user=dict(CERT_USER), cluster_extra={'certificate-authority': '../../pki/ca.crt'}))
    for kwargs in ({'kubeconfig': path}, {}, {'kubeconfig': path, 'validate_certs': True},
                   {'kubeconfig': path, 'context': 'main'}):
        same(site, kwargs, host='https://api.example:6443', ca=CA, cert=CERT, key=KEY, authorization=None)


def test_K8S_18_data_fields_win_over_files(site):
    user = dict(CERT_USER, **{'client-certificate-data': b64(CERT), 'client-key-data': b64(KEY2)})
    path = write(site['tmp'] / 'kc', kubeconfig(
        user=user, cluster_extra={'certificate-authority-data': b64(CA), 'certificate-authority': '/nonexistent'}))
    got = same(site, {'kubeconfig': path}, ca=CA, cert=CERT, key=KEY2)
    assert native.settings({'kubeconfig': path}, environ={}).ca[0] == 'data'


@pytest.mark.parametrize('user, header', [
    ({'token': 'abc'}, 'Bearer abc'),
    ({'tokenFile': 'pki/token'}, 'Bearer file-token'),
    ({'token': 'abc', 'tokenFile': 'pki/token'}, 'Bearer abc'),
    ({'token': 'abc', 'exec': {'command': 'never-run', 'apiVersion': 'client.authentication.k8s.io/v1'}}, 'Bearer abc'),
    ({'username': 'admin', 'password': 'pä:ss'}, None),
    ({}, None),
])
def test_K8S_18_user_credentials(site, user, header):
    path = write(site['tmp'] / 'kc', kubeconfig(user=user, cluster_extra={'certificate-authority-data': b64(CA)}))
    got = same(site, {'kubeconfig': path})
    if header:
        assert got['authorization'] == header
    elif 'username' in user:
        assert got['authorization'] == 'Basic ' + base64.b64encode('admin:pä:ss'.encode('latin-1')).decode()
    else:
        assert got['authorization'] is None


def test_K8S_18_tls_settings_and_the_options_over_them(site):
    path = write(site['tmp'] / 'kc', kubeconfig(
        user=dict(CERT_USER, **{'client-certificate': 'pki/client.crt', 'client-key': 'pki/client.key'}),
        cluster_extra={'insecure-skip-tls-verify': True, 'tls-server-name': 'kubernetes.default'}))
    same(site, {'kubeconfig': path}, verify=False, tls_server_name='kubernetes.default')
    same(site, {'kubeconfig': path, 'validate_certs': True}, verify=True)     # the option (default true) wins
    same(site, {'kubeconfig': path, 'validate_certs': False, 'ca_cert': str(site['pki'] / 'ca.crt'),
                'client_key': str(site['pki'] / 'other.key')}, verify=False, ca=CA, key=KEY2)
    # a client-certificate kubeconfig: host and api_key options apply
    same(site, {'kubeconfig': path, 'host': 'https://other:6443/', 'api_key': 'tok'},
         host='https://other:6443', authorization='Bearer tok')
    same(site, {'kubeconfig': path, 'impersonate_user': 'alice', 'impersonate_groups': ['g1', 'g2']},
         headers=[('Impersonate-User', 'alice'), ('Impersonate-Group', 'g1'), ('Impersonate-Group', 'g2')])


def test_K8S_18_http_server_loads_no_tls_files(site):
    path = write(site['tmp'] / 'kc', kubeconfig(server='http://127.0.0.1:8080/', user=dict(CERT_USER),
                                                cluster_extra={'certificate-authority': '/nonexistent'}))
    same(site, {'kubeconfig': path}, host='http://127.0.0.1:8080', ca=None, cert=None)


def test_K8S_18_contexts_and_missing_users(site):
    cfg = kubeconfig(user={'token': 'main-token'}, contexts=[
        {'name': 'main', 'context': {'cluster': 'main', 'user': 'main'}},
        {'name': 'nouser', 'context': {'cluster': 'main', 'user': 'ghost'}},
        {'name': 'anon', 'context': {'cluster': 'main'}}])
    path = write(site['tmp'] / 'kc', cfg)
    same(site, {'kubeconfig': path}, authorization='Bearer main-token')
    same(site, {'kubeconfig': path, 'context': 'nouser'}, authorization=None)
    same(site, {'kubeconfig': path, 'context': 'anon'}, authorization=None)
    same(site, {'kubeconfig': cfg, 'context': 'main'}, authorization='Bearer main-token')   # a dict


def test_K8S_19_kubeconfig_path_lists_merge_as_the_client_merges(site):
    a = write(site['tmp'] / 'a.yaml', kubeconfig(server='https://a:6443', user={'token': 'from-a'}, current='main'))
    bdir = site['tmp'] / 'b'
    bdir.mkdir()
    (bdir / 'ca.crt').write_bytes(b'-----B CA-----\n')
    b = kubeconfig(server='https://b:6443', user={'token': 'from-b'}, cluster='bc', user_name='bu', current='b',
                   cluster_extra={'certificate-authority': 'ca.crt'},
                   contexts=[{'name': 'b', 'context': {'cluster': 'bc', 'user': 'bu'}},
                             {'name': 'main', 'context': {'cluster': 'bc', 'user': 'bu'}}])
    b = write(bdir / 'b.yaml', b)
    both = a + ':' + b
    # current-context from the last file that sets one; context "b" and its entries from b.yaml (CA relative to it)
    same(site, {'kubeconfig': both}, host='https://b:6443', authorization='Bearer from-b', ca=b'-----B CA-----\n')
    # a name both files define: the first file's entry
    same(site, {'kubeconfig': both, 'context': 'main'}, host='https://a:6443', authorization='Bearer from-a')
    site['monkeypatch'].setenv('KUBECONFIG', both + ':/nonexistent')
    same(site, {}, host='https://b:6443')


def test_K8S_19_options_and_environment_only(site):
    write(site['home'] / '.kube' / 'config', kubeconfig(server='https://default:6443', user={'token': 't'}))
    mp = site['monkeypatch']
    same(site, {'host': 'https://h:6443', 'api_key': 'k'}, host='https://h:6443', authorization='Bearer k')
    same(site, {'host': 'https://h:6443', 'client_cert': str(site['pki'] / 'client.crt'),
                'client_key': str(site['pki'] / 'client.key'), 'ca_cert': str(site['pki'] / 'ca.crt')},
         cert=CERT, key=KEY, ca=CA, authorization=None)
    mp.setenv('K8S_AUTH_HOST', 'https://env:6443')
    mp.setenv('K8S_AUTH_API_KEY', 'env-key')
    mp.setenv('K8S_AUTH_VERIFY_SSL', 'no')
    same(site, {}, host='https://env:6443', authorization='Bearer env-key', verify=False)
    same(site, {'validate_certs': True}, verify=True)


def test_K8S_20_in_cluster_service_account_before_the_default_kubeconfig(site):
    write(site['home'] / '.kube' / 'config', kubeconfig(server='https://default:6443', user={'token': 't'}))
    mp = site['monkeypatch']
    same(site, {}, host='https://default:6443')            # not in a pod: the default kubeconfig
    site['sa'].mkdir()
    (site['sa'] / 'token').write_text('sa-token')
    (site['sa'] / 'ca.crt').write_bytes(CA)
    mp.setenv('KUBERNETES_SERVICE_HOST', '10.96.0.1')
    mp.setenv('KUBERNETES_SERVICE_PORT', '443')
    same(site, {}, host='https://10.96.0.1:443', authorization='bearer sa-token', ca=CA)
    mp.setenv('KUBERNETES_SERVICE_HOST', 'fd00::1')
    same(site, {}, host='https://[fd00::1]:443')
    same(site, {'validate_certs': True, 'impersonate_user': 'bob'}, headers=[('Impersonate-User', 'bob')])
    # a kubeconfig named explicitly is read instead
    path = write(site['tmp'] / 'kc', kubeconfig(server='https://named:6443', user={'token': 'n'}))
    same(site, {'kubeconfig': path}, host='https://named:6443')
    (site['sa'] / 'token').write_text('')
    same(site, {}, host='https://default:6443')             # an empty token: not in a pod


@pytest.mark.parametrize('case', ['missing_ca_file', 'missing_context', 'no_kubeconfig', 'empty_file',
                                  'no_current_context'])
def test_K8S_18_both_refuse_what_cannot_be_loaded(site, case):
    kwargs = {}
    if case == 'missing_ca_file':
        cfg = kubeconfig(cluster_extra={'certificate-authority': 'x.crt'}, user={})
        kwargs = {'kubeconfig': write(site['tmp'] / 'kc', cfg)}
    elif case == 'missing_context':
        kwargs = {'kubeconfig': write(site['tmp'] / 'kc', kubeconfig(user={})), 'context': 'ghost'}
    elif case == 'empty_file':
        (site['tmp'] / 'kc').write_text('')
        kwargs = {'kubeconfig': str(site['tmp'] / 'kc')}
    elif case == 'no_current_context':
        cfg = kubeconfig(user={})
        del cfg['current-context']
        kwargs = {'kubeconfig': write(site['tmp'] / 'kc', cfg)}
    with pytest.raises(Exception):
        oracle(site, kwargs)
    with pytest.raises(Exception) as e:
        ours(site, kwargs)
    assert not isinstance(e.value, native.Unsupported)


@pytest.mark.parametrize('case, why', [
    ('exec', 'exec credential plugin'),
    ('auth_provider', 'auth-provider'),
    ('proxy_url', 'proxy-url'),
    ('proxy_option', 'the proxy option'),
    ('proxy_env', 'a proxy in the environment (HTTPS_PROXY)'),
    ('proxy_headers_env', 'K8S_AUTH_PROXY_HEADERS'),
    ('token_and_host', 'the host or api_key option over a token'),
    ('in_cluster_and_api_key', 'the host or api_key option over a token'),
    ('transport', 'GPUOPS_K8S_TRANSPORT=kubernetes'),
])
def test_K8S_20_what_native_leaves_to_the_kubernetes_client(site, case, why):
    mp = site['monkeypatch']
    user, extra, kwargs = {'token': 't'}, {}, {}
    if case == 'exec':
        user = {'exec': {'command': 'aws', 'apiVersion': 'client.authentication.k8s.io/v1'}}
    elif case == 'auth_provider':
        user = {'auth-provider': {'name': 'oidc', 'config': {'id-token': 'x'}}}
    elif case == 'proxy_url':
        extra = {'proxy-url': 'http://proxy:3128'}
    elif case == 'proxy_option':
        kwargs = {'proxy': 'http://proxy:3128'}
    elif case == 'proxy_env':
        mp.setenv('HTTPS_PROXY', 'http://proxy:3128')
    elif case == 'proxy_headers_env':
        mp.setenv('K8S_AUTH_PROXY_HEADERS_USER_AGENT', 'x')
    elif case == 'token_and_host':
        kwargs = {'host': 'https://other:6443'}
    elif case == 'transport':
        mp.setenv(native.TRANSPORT_ENV, 'kubernetes')
    path = write(site['tmp'] / 'kc', kubeconfig(user=user, cluster_extra=extra))
    kwargs = dict(kwargs, kubeconfig=path)
    if case == 'in_cluster_and_api_key':
        site['sa'].mkdir()
        (site['sa'] / 'token').write_text('sa-token')
        (site['sa'] / 'ca.crt').write_bytes(CA)
        mp.setenv('KUBERNETES_SERVICE_HOST', '10.96.0.1')
        mp.setenv('KUBERNETES_SERVICE_PORT', '443')
        kwargs = {'api_key': 'k'}
    with pytest.raises(native.Unsupported, match=why.replace('(', r'\(').replace(')', r'\)')):
        native.settings(kwargs, environ=dict(os.environ), sa_dir=str(site['sa']))


def test_transport_setting_is_checked():
    assert native.transport({}) == 'auto'
    assert native.transport({native.TRANSPORT_ENV: ' Kubernetes '}) == 'kubernetes'
    with pytest.raises(native.ConfigError, match="GPUOPS_K8S_TRANSPORT must be one of auto, kubernetes, got 'fast'"):
        native.transport({native.TRANSPORT_ENV: 'fast'})


def test_requests_carry_the_settings(monkeypatch):
    """What NativeApiClient sends: the URL with the query as the client quotes it, the credential, the impersonation
    headers (one per group), JSON bodies; an answer outside 2xx raises ApiError with the client's fields."""
    s = native.Settings()
    s.host, s.authorization = 'http://127.0.0.1:1', 'Bearer t'
    s.headers = [('Impersonate-User', 'u'), ('Impersonate-Group', 'a'), ('Impersonate-Group', 'b')]
    client = native.NativeApiClient(s)
    sent = []

    class Response(object):
        def __init__(self, status, data=b'{}', reason='OK'):
            self.status, self.data, self.reason, self.headers = status, data, reason, {'Content-Type': 'application/json'}

    answers = [Response(200), Response(404, b'{"reason":"NotFound"}', 'Not Found')]

    def request(method, url, body=None, headers=None, preload_content=True):
        sent.append((method, url, body, headers))
        return answers.pop(0)

    monkeypatch.setattr(client.rest_client.pool_manager, 'request', request)
    client.native_request('PATCH', '/api/v1/nodes/n', [('labelSelector', 'a=b,c in (x y)'), ('dryRun', True)],
                          {'Accept': 'application/json', 'Content-Type': 'application/merge-patch+json'}, {'x': 1})
    method, url, body, headers = sent[0]
    assert (method, url, body) == ('PATCH', 'http://127.0.0.1:1/api/v1/nodes/n?labelSelector=a%3Db%2Cc%20in%20%28x%20y%29'
                                   '&dryRun=true', b'{"x": 1}')
    assert headers['Authorization'] == 'Bearer t' and headers['Content-Type'] == 'application/merge-patch+json'
    assert headers.getlist('Impersonate-Group') == ['a', 'b'] and headers['Impersonate-User'] == 'u'
    with pytest.raises(native.ApiError) as e:
        client.native_request('GET', '/api/v1/nodes/gone')
    assert (e.value.status, e.value.reason, e.value.body) == (404, 'Not Found', '{"reason":"NotFound"}')
    assert str(e.value).startswith('(404)\nReason: Not Found\n')


def test_dynamic_client_paths_queries_and_discovery(monkeypatch):
    """The dynamic client's calls kube/converger (and the lab's lifecycle suite) make: discovery by group/version,
    the paths of namespaced and cluster kinds, the query parameters in the kubernetes dynamic client's order, the
    Resource's own methods, 404 as NotFound, an unserved kind as ResourceNotFound."""
    s = native.Settings()
    s.host = 'http://127.0.0.1:1'
    api = native.NativeApiClient(s)
    dyn = native.NativeDynamicClient(api)
    sent = []
    docs = {'/api/v1': {'resources': [{'name': 'configmaps', 'kind': 'ConfigMap', 'namespaced': True},
                                      {'name': 'pods/status', 'kind': 'Pod', 'namespaced': True},
                                      {'name': 'nodes', 'kind': 'Node', 'namespaced': False}]},
            '/apis/node.k8s.io/v1': {'resources': [{'name': 'runtimeclasses', 'kind': 'RuntimeClass',
                                                    'namespaced': False}]}}

    class Response(object):
        def __init__(self, status, data, reason='OK'):
            self.status, self.data, self.reason, self.headers = status, json.dumps(data).encode(), reason, {}

    def request(method, url, body=None, headers=None, preload_content=True):
        sent.append((method, url, headers.get('Content-Type'), body))
        path = url[len(s.host):].split('?')[0]
        if path in docs:
            return Response(200, docs[path])
        if path.endswith('/gone') or path.startswith('/apis/example.com'):
            return Response(404, {'reason': 'NotFound'}, 'Not Found')
        return Response(200, {'kind': 'Thing', 'metadata': {'name': path.rsplit('/', 1)[-1]}})

    monkeypatch.setattr(api.rest_client.pool_manager, 'request', request)
    cm = dyn.resources.get(api_version='v1', kind='ConfigMap')
    assert (cm.name, cm.namespaced) == ('configmaps', True)
    assert dyn.resources.get(api_version='v1', kind='Node').namespaced is False
    with pytest.raises(native.ResourceNotFound):
        dyn.resources.get(api_version='v1', kind='Pod')          # only its subresource is listed
    with pytest.raises(native.ResourceNotFound):
        dyn.resources.get(api_version='example.com/v1', kind='Widget')
    assert [u for m, u, c, b in sent] == ['http://127.0.0.1:1/api/v1', 'http://127.0.0.1:1/apis/example.com/v1']
    del sent[:]
    rc = dyn.resources.get(api_version='node.k8s.io/v1', kind='RuntimeClass')
    assert dyn.patch(cm, body={'metadata': {'name': 'a'}}, name='a', namespace='ns',
                     content_type='application/apply-patch+yaml', field_manager='fm', force_conflicts=True).to_dict() \
        == {'kind': 'Thing', 'metadata': {'name': 'a'}}
    cm.get(label_selector='x=y', field_selector='f=g')
    rc.get(name='nvidia')
    dyn.create(cm, body={'metadata': {'name': 'b', 'namespace': 'ns2'}})
    dyn.delete(rc, name='nvidia', body={'propagationPolicy': 'Background'})
    with pytest.raises(native.NotFound) as e:
        dyn.get(cm, name='gone', namespace='ns')
    assert e.value.status == 404
    with pytest.raises(ValueError):
        dyn.create(cm, body={'metadata': {'name': 'c'}})         # a namespaced kind needs its namespace
    assert [(m, u[len(s.host):], c) for m, u, c, b in sent] == [
        ('GET', '/apis/node.k8s.io/v1', None),
        ('PATCH', '/api/v1/namespaces/ns/configmaps/a?fieldManager=fm&force=true', 'application/apply-patch+yaml'),
        ('GET', '/api/v1/configmaps?fieldSelector=f%3Dg&labelSelector=x%3Dy', 'application/json'),
        ('GET', '/apis/node.k8s.io/v1/runtimeclasses/nvidia', 'application/json'),
        ('POST', '/api/v1/namespaces/ns2/configmaps', 'application/json'),
        ('DELETE', '/apis/node.k8s.io/v1/runtimeclasses/nvidia', 'application/json'),
        ('GET', '/api/v1/namespaces/ns/configmaps/gone', 'application/json')]
    assert sent[1][3] == b'{"metadata": {"name": "a"}}'
