"""kube/native against the lab's real kube-apiserver (the shared control plane): each way of connecting it serves
reaches the server as the kubernetes client's route does (same requests in the audit log, same objects, same refusals),
TLS verification refuses what the client refuses, and what it leaves to the client (an exec credential plugin) takes
the client's route and works. Every Kubernetes module run of the lab's other tests goes through kube/native too (the
lab's kubeconfigs are client-certificate ones): this file pins the ways those do not use.
"""
from __future__ import annotations

import base64
import json
import os
import stat

import pytest
import yaml

from conftest import lab_collections_path

lab_collections_path(importable=True)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access, native, rest  # noqa: E402

AUDIT_MARK = 'gpuops-audit-mark'   # ConfigMap default/gpuops-audit-mark, which STATE/marker.token may read (real.py)
KUBERNETES = {native.TRANSPORT_ENV: 'kubernetes'}


def client(params, route):
    """kube/access's client for ``params`` by ``route`` ('native' or 'kubernetes'), checked to be that route's."""
    if route == 'kubernetes':
        old = os.environ.get(native.TRANSPORT_ENV)
        os.environ[native.TRANSPORT_ENV] = 'kubernetes'
        try:
            api = access.api_client(dict(params))
        finally:
            if old is None:
                del os.environ[native.TRANSPORT_ENV]
            else:
                os.environ[native.TRANSPORT_ENV] = old
        assert not getattr(api, 'gpuops_native', False)
    else:
        api = access.api_client(dict(params))
        assert isinstance(api, native.NativeApiClient), type(api)
    return rest.CoreApi(api)


def names(response):
    return sorted(i['metadata']['name'] for i in json.loads(response.data)['items'])


def kubeconfig_doc(path):
    with open(path) as f:
        return yaml.safe_load(f)


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def outcome(call):
    """('ok', value) or ('api', status) or ('error', type name) of one call."""
    try:
        return 'ok', call()
    except Exception as e:  # pylint: disable=broad-except
        if access.is_api_error(e):
            return 'api', e.status
        return 'error', type(e).__name__


def test_K8S_18_client_certificates_same_requests_as_the_client(kube_real, tmp_path):
    """A client-certificate user (files, then -data fields): the same objects, and the same requests in the audit log
    (verb, URI with its query, answer), sent under the collection's user agent."""
    from kubernetes import client as k8s
    user = 'gpuops-test-native-' + str(os.getpid())
    path = kube_real.user(user, reads=True)
    params = {'kubeconfig': path, 'validate_certs': True}
    # Node objects of this test's own, selected by a label of its own: other tests add and remove nodes of the shared
    # plane meanwhile (a list of every node differed between the two routes in a whole run)
    mine = 'gpuops.io/native-test'
    admin = k8s.CoreV1Api(kube_real.api())
    own = ['gpuops-native-node-%d-%d' % (os.getpid(), i) for i in (1, 2)]
    for name in own:
        admin.create_node({'metadata': {'name': name, 'labels': {mine: str(os.getpid()), 'kubernetes.io/os': 'linux'}}})
    try:
        seen = _list_by_both_routes(kube_real, params, user, '%s=%d,kubernetes.io/os in (linux,windows)'
                                    % (mine, os.getpid()))
    finally:
        for name in own:
            admin.delete_node(name)
    assert seen['native'] == seen['kubernetes']
    assert seen['native'][0] == own and seen['native'][1] == ('api', 404)
    # the same user with its certificate, key and CA inline (base64 -data fields)
    doc = kubeconfig_doc(path)
    u, c = doc['users'][0]['user'], doc['clusters'][0]['cluster']
    for key, data_key in (('client-certificate', 'client-certificate-data'), ('client-key', 'client-key-data')):
        u[data_key] = base64.b64encode(open(u.pop(key), 'rb').read()).decode()
    c['certificate-authority-data'] = base64.b64encode(open(c.pop('certificate-authority'), 'rb').read()).decode()
    inline = write(tmp_path, 'inline.kubeconfig', doc)
    assert outcome(lambda: client({'kubeconfig': inline}, 'native').list_node(limit=1))[0] == 'ok'
    assert not [p for p in os.listdir('/tmp') if p.startswith('gpuops-k8s-')]   # the -data files are gone at once


def _list_by_both_routes(kube_real, params, user, selector):
    seen = {}
    for route in ('native', 'kubernetes'):
        api = client(params, route)
        start = kube_real.mark()
        listed = names(api.list_node(label_selector=selector, limit=500))
        missing = outcome(lambda: api.read_namespaced_config_map('gpuops-no-such-map', 'default'))
        end = kube_real.mark()
        seen[route] = (listed, missing, kube_real.requests(start, end, user=user))
        events = kube_real.events(start, end, user=user)
        assert events and all(e.get('userAgent', '').startswith(
            'gpuops.k8s_gpu' if route == 'native' else 'OpenAPI-Generator') for e in events), events
    return seen


def test_K8S_18_bearer_tokens_and_the_authorizer(kube_real, tmp_path):
    """A service account token (real.py's marker token: it may get one ConfigMap) as ``token``, as ``tokenFile`` and as
    the api_key option: what RBAC allows works, what it refuses is a 403, the same by both routes."""
    token_file = os.path.join(kube_real.state, 'marker.token')
    token = open(token_file).read()
    doc = kubeconfig_doc(kube_real.kubeconfig)
    doc['users'][0]['user'] = {'token': token}
    with_token = write(tmp_path, 'token.kubeconfig', doc)
    doc['users'][0]['user'] = {'tokenFile': token_file}
    with_file = write(tmp_path, 'tokenfile.kubeconfig', doc)
    options = {'host': kube_real.server, 'api_key': token, 'ca_cert': kube_real.ca}
    for params in ({'kubeconfig': with_token}, {'kubeconfig': with_file}, options):
        for route in ('native', 'kubernetes'):
            api = client(params, route)
            got = outcome(lambda: json.loads(api.read_namespaced_config_map(AUDIT_MARK, 'default').data)['metadata'])
            assert got[0] == 'ok' and got[1]['name'] == AUDIT_MARK, (params, route, got)
            assert outcome(api.list_node) == ('api', 403), (params, route)


def test_K8S_18_impersonation_reaches_the_authorizer(kube_real):
    """Impersonate-User and one Impersonate-Group per group: a user in system:masters (the first of two groups) may
    list the nodes, the same user without it may not."""
    for groups, want in ((['system:masters', 'gpuops-b'], 'ok'), (['gpuops-a', 'gpuops-b'], 'api')):
        params = {'kubeconfig': kube_real.kubeconfig, 'impersonate_user': 'gpuops-nobody', 'impersonate_groups': groups}
        for route in ('native', 'kubernetes'):
            got = outcome(client(params, route).list_node)
            assert got[0] == want and (want == 'ok' or got[1] == 403), (groups, route, got)


def _other_ca(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import datetime
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'not the cluster CA')])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    path = tmp_path / 'other-ca.crt'
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def test_K8S_18_tls_verification_as_the_client(kube_real, tmp_path):
    """The server's certificate names 127.0.0.1 and kubernetes.default but not wrong.example; a CA that did not sign it
    is refused unless validate_certs is false: each outcome the same by both routes."""
    other_ca = _other_ca(tmp_path)
    base = kubeconfig_doc(kube_real.kubeconfig)
    cases = {}
    for label, cluster_extra, params in (
            ('sni kubernetes.default', {'tls-server-name': 'kubernetes.default'}, {}),
            ('sni wrong.example', {'tls-server-name': 'wrong.example'}, {}),
            ('other CA', {}, {'ca_cert': other_ca}),
            ('other CA, not verified', {}, {'ca_cert': other_ca, 'validate_certs': False}),
            ('skip verify in kubeconfig, option true', {'insecure-skip-tls-verify': True}, {'ca_cert': other_ca,
                                                                                            'validate_certs': True})):
        doc = json.loads(json.dumps(base))
        doc['clusters'][0]['cluster'].update(cluster_extra)
        path = write(tmp_path, 'kc-%d' % len(cases), doc)
        p = dict(params, kubeconfig=path)
        got = dict((route, outcome(lambda: names(client(p, route).list_node()))) for route in ('native', 'kubernetes'))
        cases[label] = [got['native'][0], got['kubernetes'][0]]
        assert got['native'][0] == got['kubernetes'][0], (label, got)
    assert cases == {'sni kubernetes.default': ['ok', 'ok'], 'sni wrong.example': ['error', 'error'],
                     'other CA': ['error', 'error'], 'other CA, not verified': ['ok', 'ok'],
                     'skip verify in kubeconfig, option true': ['error', 'error']}


def test_K8S_20_exec_credential_plugin_takes_the_clients_route(kube_real, tmp_path):
    """An exec plugin (as EKS's and GKE's kubeconfigs use): kube/native leaves it to the client, which runs the plugin
    and reaches the server with the credential it printed."""
    token = open(os.path.join(kube_real.state, 'marker.token')).read()
    plugin = tmp_path / 'credential-plugin'
    plugin.write_text('#!/bin/sh\ncat <<EOF\n%s\nEOF\n' % json.dumps({
        'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', 'status': {'token': token}}))
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc = kubeconfig_doc(kube_real.kubeconfig)
    doc['users'][0]['user'] = {'exec': {'apiVersion': 'client.authentication.k8s.io/v1', 'command': str(plugin),
                                        'interactiveMode': 'Never'}}
    path = write(tmp_path, 'exec.kubeconfig', doc)
    with pytest.raises(native.Unsupported, match='exec credential plugin'):
        native.settings({'kubeconfig': path})
    api = access.api_client({'kubeconfig': path})
    assert not getattr(api, 'gpuops_native', False)
    got = json.loads(rest.CoreApi(api).read_namespaced_config_map(AUDIT_MARK, 'default').data)
    assert got['metadata']['name'] == AUDIT_MARK


def test_K8S_18_converger_sends_the_same_requests_by_both_routes(kube_real):
    """kube/converger (module k8s_converge's engine) on kube/native's dynamic client and on the kubernetes client's:
    create by server-side apply, a label on a Node, a re-run that writes nothing, a change, and absent; the same
    requests (verb, URI with its query, answer) in the audit log, API discovery left out (the client's discoverer
    reads /api and /apis and keeps a cache on disk; kube/native reads one group/version document when it needs it)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import converger
    from kubernetes import client as k8s
    # a Node object of this test's own (no kubelet: it only carries labels); the shared plane's other nodes come and go
    node = 'gpuops-conv-node-%d' % os.getpid()
    admin = k8s.CoreV1Api(kube_real.api())
    admin.create_node({'metadata': {'name': node}})
    try:
        seen = converge_by_both_routes(kube_real, converger, node)
    finally:
        admin.delete_node(node)
    assert seen['native'] == seen['kubernetes']
    assert seen['native'][0] == [{'created': 2, 'updated': 1, 'deleted': 0, 'unchanged': 0},
                                 {'created': 0, 'updated': 0, 'deleted': 0, 'unchanged': 3},
                                 {'created': 0, 'updated': 1, 'deleted': 0, 'unchanged': 2},
                                 {'created': 0, 'updated': 0, 'deleted': 3, 'unchanged': 0}]


def converge_by_both_routes(kube_real, converger, node):
    seen = {}
    for route in ('native', 'kubernetes'):
        user = 'gpuops-test-native-conv-%s-%d' % (route, os.getpid())
        params = {'kubeconfig': kube_real.user(user, reads=True)}
        if route == 'kubernetes':
            os.environ[native.TRANSPORT_ENV] = 'kubernetes'
        try:
            dyn = access.get_client(params)
        finally:
            os.environ.pop(native.TRANSPORT_ENV, None)
        assert isinstance(dyn, native.NativeDynamicClient) == (route == 'native')
        name = 'gpuops-conv-' + route
        defs = [{'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'namespace': 'default'},
                 'data': {'k': 'v'}},
                {'apiVersion': 'node.k8s.io/v1', 'kind': 'RuntimeClass', 'metadata': {'name': name}, 'handler': 'h'},
                {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': node, 'labels': {'gpuops.io/conv-' + route: 'x'}}}]
        p = dict(field_manager='gpuops-k8s-gpu', hash_annotation='gpuops.io/desired-hash', labels_only_kinds=['Node'],
                 delete_unmanaged=False, backup=True, backup_namespace=None)
        results = []
        start = kube_real.mark()
        for defs_now, state in ((defs, 'present'), (defs, 'present'), ([dict(defs[0], data={'k': 'w'})] + defs[1:],
                                                                           'present'), (defs, 'absent')):
            conv = converger.Converger(dict(p), dyn, check_mode=False, diff=False)
            r = converger.converge(conv, json.loads(json.dumps(defs_now)), state)
            results.append(dict((k, r[k]) for k in ('created', 'updated', 'deleted', 'unchanged')))
        end = kube_real.mark()
        requests = [(v, u.replace(route, 'ROUTE'), c) for v, u, c in kube_real.requests(start, end, user=user)
                    if not _discovery(u)]
        seen[route] = (results, requests)
    return seen


def _discovery(uri):
    path = uri.split('?', 1)[0].rstrip('/')
    parts = [p for p in path.split('/') if p]
    return parts in (['api'], ['apis'], ['api', 'v1']) or (len(parts) in (2, 3) and parts[0] == 'apis')

