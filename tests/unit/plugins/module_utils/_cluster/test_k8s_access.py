# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes access layer (kube/access) with a fake kubernetes.core get_api_client (no cluster, no network).

The build_client tests that lived in test_gpu_share_report_kube.py moved here: the client is now built by
kubernetes.core, so they check what the layer hands to it and what it does with the answer.
"""
import os

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.doc_fragments.k8s_auth_options import ModuleDocFragment
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access

# kubernetes.core's AUTH_ARG_SPEC (plugins/module_utils/args_common.py, tags 3.0.0 and 6.5.0), written down as facts:
# name -> (type, aliases, no_log).  proxy_headers and persist_config are the two this collection does not offer.
UPSTREAM_AUTH = {
    'kubeconfig': ('raw', [], False),
    'context': ('str', [], False),
    'host': ('str', [], False),
    'api_key': ('str', [], True),
    'username': ('str', [], False),
    'password': ('str', [], True),
    'validate_certs': ('bool', ['verify_ssl'], False),
    'ca_cert': ('path', ['ssl_ca_cert'], False),
    'client_cert': ('path', ['cert_file'], False),
    'client_key': ('path', ['key_file'], False),
    'proxy': ('str', [], False),
    'no_proxy': ('str', [], False),
    'impersonate_user': ('str', [], False),
    'impersonate_groups': ('list', [], False),
}
# kubernetes.core's client.py reads K8S_AUTH_<OPTION> (or K8S_AUTH_<client attribute>) when an option is not given.
UPSTREAM_ENV = dict((name, 'K8S_AUTH_%s' % name.upper()) for name in UPSTREAM_AUTH)
UPSTREAM_ENV.update(validate_certs='K8S_AUTH_VERIFY_SSL', ca_cert='K8S_AUTH_SSL_CA_CERT',
                    client_cert='K8S_AUTH_CERT_FILE', client_key='K8S_AUTH_KEY_FILE')


class FakeDynamic(object):
    def __init__(self):
        self.client = 'api-client'


class FakeCore(object):
    """Stands in for kubernetes.core's get_api_client: records its arguments, returns a K8SClient-like wrapper."""

    def __init__(self, error=None):
        self.calls = []
        self.error = error

    def __call__(self, module=None, **kwargs):
        self.calls.append((module, kwargs))
        if self.error:
            raise self.error
        wrapper = type('K8SClient', (object,), {})()
        wrapper.client = FakeDynamic()
        return wrapper


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / 'kubeconfig'
    path.write_text(u'apiVersion: v1\nkind: Config\n')
    return str(path)


def test_K8S_01_options_are_kubernetes_core_auth_options():
    assert sorted(access.AUTH_ARG_SPEC) == sorted(UPSTREAM_AUTH)
    for name, (typ, aliases, secret) in UPSTREAM_AUTH.items():
        opts = access.AUTH_ARG_SPEC[name]
        assert opts['type'] == typ, name
        assert opts.get('aliases', []) == aliases, name
        assert bool(opts.get('no_log')) is secret, name
    assert access.AUTH_ARG_SPEC['impersonate_groups']['elements'] == 'str'


def test_K8S_01_doc_fragment_matches_the_spec():
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['options']
    assert sorted(doc) == sorted(access.AUTH_ARG_SPEC)
    for name, opts in access.AUTH_ARG_SPEC.items():
        assert doc[name]['type'] == opts['type'], name
        assert doc[name].get('aliases', []) == opts.get('aliases', []), name
        assert doc[name].get('default') == opts.get('default'), name
        assert doc[name].get('elements') == opts.get('elements'), name
    assert doc['validate_certs']['default'] is True


def test_K8S_02_environment_fallbacks():
    marker = object()
    spec = access.auth_arg_spec(marker)
    for name, env in UPSTREAM_ENV.items():
        assert spec[name]['fallback'] == (marker, [env]), name
    assert spec['validate_certs']['default'] is True
    assert access.AUTH_ARG_SPEC['kubeconfig']['fallback'] == ('K8S_AUTH_KUBECONFIG',)   # not modified
    spec['ca_cert']['aliases'].append('x')
    assert access.AUTH_ARG_SPEC['ca_cert']['aliases'] == ['ssl_ca_cert']


def test_K8S_03_secrets_are_no_log():
    spec = access.auth_arg_spec(object())
    assert spec['api_key']['no_log'] is True and spec['password']['no_log'] is True


def test_K8S_04_client_from_kubernetes_core_with_overrides(kubeconfig):
    core = FakeCore()
    dyn = access.get_client({'kubeconfig': kubeconfig, 'context': 'c', 'host': 'https://h:6443', 'api_key': 'tok',
                             'validate_certs': False, 'ca_cert': '/ca', 'client_cert': '/crt',
                             'client_key': '/key', 'definitions': [{}], 'proxy': None}, get_api_client=core)
    assert isinstance(dyn, FakeDynamic)
    assert core.calls == [(None, {'kubeconfig': kubeconfig, 'context': 'c', 'host': 'https://h:6443', 'api_key': 'tok',
                                  'validate_certs': False, 'ca_cert': '/ca', 'client_cert': '/crt',
                                  'client_key': '/key'})]


class FakeCoreModule(object):
    """Stands in for kubernetes.core's k8s/client.py module: the steps get_api_client takes, recorded."""

    def __init__(self, error=None):
        self.calls = []
        self.error = error

    def _create_auth_spec(self, module=None, **kwargs):
        self.calls.append(('auth', module, kwargs))
        return dict(kwargs, built=True)

    def _create_configuration(self, auth):
        self.calls.append(('configuration', auth))
        if self.error:
            raise self.error
        return {'auth': auth}

    def _create_headers(self, module=None, **kwargs):
        return {'Impersonate-User': kwargs['impersonate_user']} if kwargs.get('impersonate_user') else {}

    def _set_header(self, client, header, value):
        client.headers[header] = value


class FakeApiClient(object):
    def __init__(self, configuration):
        self.configuration = configuration
        self.headers = {}


def test_K8S_04_typed_api_client_uses_kubernetes_core_configuration(kubeconfig):
    core = FakeCoreModule()
    api = access.api_client({'kubeconfig': kubeconfig, 'api_key': 'tok', 'impersonate_user': 'u',
                             'validate_certs': True}, core=core, api_client_class=FakeApiClient)
    want = {'kubeconfig': kubeconfig, 'api_key': 'tok', 'impersonate_user': 'u', 'validate_certs': True}
    assert core.calls == [('auth', None, want), ('configuration', dict(want, built=True))]
    assert api.configuration == {'auth': dict(want, built=True)} and api.headers == {'Impersonate-User': 'u'}
    with pytest.raises(access.KubeError, match='from kubeconfig %s: bad yaml' % kubeconfig):
        access.api_client({'kubeconfig': kubeconfig}, core=FakeCoreModule(ValueError('bad yaml')),
                          api_client_class=FakeApiClient)


def test_K8S_04_default_connection_is_left_to_kubernetes_core():
    core = FakeCore()
    access.get_client({'kubeconfig': None, 'validate_certs': True}, get_api_client=core)
    assert core.calls == [(None, {'validate_certs': True})]


def test_K8S_04_errors_name_the_kubeconfig(kubeconfig):
    with pytest.raises(access.KubeError, match='cannot configure the Kubernetes client from kubeconfig %s: yaml error'
                       % kubeconfig):
        access.get_client({'kubeconfig': kubeconfig}, get_api_client=FakeCore(ValueError('yaml error')))
    with pytest.raises(access.KubeError, match='in-cluster service account: no config'):
        access.get_client({}, get_api_client=FakeCore(IOError('no config')))


def test_K8S_04_missing_kubernetes_core(monkeypatch):
    # the kubernetes client's route (kube/native serves a kubeconfig or service account without kubernetes.core)
    monkeypatch.setenv('GPUOPS_K8S_TRANSPORT', 'kubernetes')
    monkeypatch.setattr(access, '_core_get_api_client', None)
    monkeypatch.setattr(access, '_core_client', None)
    with pytest.raises(access.KubeError, match='kubernetes.core collection is needed'):
        access.get_client({})
    with pytest.raises(access.KubeError, match='kubernetes.core collection is needed'):
        access.api_client({}, api_client_class=FakeApiClient)


def test_K8S_07_kubeconfig_path_list_or_dict(tmp_path, kubeconfig):
    other = tmp_path / 'other'
    other.write_text(u'{}')
    both = kubeconfig + os.pathsep + str(other)
    assert access.check_kubeconfig(both) == (both, None)
    assert access.check_kubeconfig({'clusters': []}) == ({'clusters': []}, None)
    assert access.check_kubeconfig('') == (None, None)
    assert access.check_kubeconfig('/nonexistent') == (None, 'kubeconfig: file /nonexistent does not exist')
    assert access.check_kubeconfig(kubeconfig + os.pathsep + '/gone')[1] == 'kubeconfig: file /gone does not exist'
    assert access.check_kubeconfig(5)[1] == 'kubeconfig must be a path (string) or a dictionary, got int'
    core = FakeCore()
    access.get_client({'kubeconfig': {'clusters': []}}, get_api_client=core)
    assert core.calls[0][1]['kubeconfig'] == {'clusters': []}
    with pytest.raises(access.KubeError, match='kubeconfig: file /nonexistent does not exist'):
        access.get_client({'kubeconfig': '/nonexistent'}, get_api_client=core)
    assert len(core.calls) == 1


def test_K8S_05_action_group():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, '..', '..', '..', '..', '..'))
    with open(os.path.join(root, 'meta', 'runtime.yml')) as f:
        groups = yaml.safe_load(f)['action_groups']
    k8s = groups['k8s']
    assert {'metadata': {'extend_group': ['kubernetes.core.k8s']}} in k8s
    ours = sorted(m for m in k8s if isinstance(m, str))
    assert ours == ['gpu_node_drain', 'gpu_node_labels_apply', 'gpu_remediation', 'gpu_share_report', 'k8s_converge',
                    'k8s_objects_info']
    # every module of the group takes the connection options (the doc fragment) and nothing else claims to
    modules = os.path.join(root, 'plugins', 'modules')
    users = sorted(n[:-3] for n in os.listdir(modules) if n.endswith('.py')
                   and 'gpuops.k8s_gpu.k8s_auth_options' in open(os.path.join(modules, n)).read())
    assert users == ours
