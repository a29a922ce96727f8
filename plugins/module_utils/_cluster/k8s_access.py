# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way this collection reaches the Kubernetes API.

Every module that talks to the API takes the options of AUTH_ARG_SPEC (documented by the doc fragment
gpuops.k8s_gpu.k8s_auth_options) and gets its client from get_client(), which hands them to kubernetes.core's
get_api_client: the same option names, K8S_AUTH_* environment variables, kubeconfig / in-cluster order and client
cache as the kubernetes.core modules.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import traceback

CORE_IMPORT_ERROR = None
try:
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as _core_client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client as _core_get_api_client
except ImportError:
    _core_client = _core_get_api_client = None
    CORE_IMPORT_ERROR = traceback.format_exc()

KUBERNETES_IMPORT_ERROR = None
try:
    from kubernetes.client import ApiClient
except ImportError:
    ApiClient = None
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

# Names, types, aliases and environment variables as kubernetes.core's AUTH_ARG_SPEC (args_common.py); validate_certs
# defaults to true here.  proxy_headers and persist_config are not offered.
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type='raw', fallback=('K8S_AUTH_KUBECONFIG',)),
    context=dict(type='str', fallback=('K8S_AUTH_CONTEXT',)),
    host=dict(type='str', fallback=('K8S_AUTH_HOST',)),
    api_key=dict(type='str', no_log=True, fallback=('K8S_AUTH_API_KEY',)),
    username=dict(type='str', fallback=('K8S_AUTH_USERNAME',)),
    password=dict(type='str', no_log=True, fallback=('K8S_AUTH_PASSWORD',)),
    validate_certs=dict(type='bool', default=True, aliases=['verify_ssl'], fallback=('K8S_AUTH_VERIFY_SSL',)),
    ca_cert=dict(type='path', aliases=['ssl_ca_cert'], fallback=('K8S_AUTH_SSL_CA_CERT',)),
    client_cert=dict(type='path', aliases=['cert_file'], fallback=('K8S_AUTH_CERT_FILE',)),
    client_key=dict(type='path', aliases=['key_file'], no_log=False, fallback=('K8S_AUTH_KEY_FILE',)),
    proxy=dict(type='str', fallback=('K8S_AUTH_PROXY',)),
    no_proxy=dict(type='str', fallback=('K8S_AUTH_NO_PROXY',)),
    impersonate_user=dict(type='str', fallback=('K8S_AUTH_IMPERSONATE_USER',)),
    impersonate_groups=dict(type='list', elements='str', fallback=('K8S_AUTH_IMPERSONATE_GROUPS',)),
)


class KubeError(Exception):
    """A failure reaching or talking to the API server, with a message fit for the user."""


def auth_arg_spec(env_fallback):
    """AUTH_ARG_SPEC (a fresh copy) with Ansible's env_fallback function filled in."""
    spec = {}
    for name, opts in AUTH_ARG_SPEC.items():
        opts = dict(opts)
        opts['fallback'] = (env_fallback, list(opts['fallback']))
        if 'aliases' in opts:
            opts['aliases'] = list(opts['aliases'])
        spec[name] = opts
    return spec


def check_kubeconfig(value):
    """(kubeconfig, error): a path (``~`` expanded; every file of a path list must exist), a dict, or None."""
    if value is None or value == '':
        return None, None
    if isinstance(value, dict):
        return value, None
    if not isinstance(value, str):
        return None, 'kubeconfig must be a path (string) or a dictionary, got %s' % type(value).__name__
    paths = [os.path.expanduser(p) for p in value.split(os.pathsep) if p]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing or not paths:
        return None, 'kubeconfig: file %s does not exist' % (missing[0] if missing else value)
    return os.pathsep.join(paths), None


def connection_kwargs(params):
    """The connection options that are set, as get_api_client takes them."""
    return dict((name, params[name]) for name in AUTH_ARG_SPEC if params.get(name) is not None)


def _missing_core():
    return KubeError('the kubernetes.core collection is needed to reach the Kubernetes API '
                     '(ansible-galaxy collection install kubernetes.core): %s' % (CORE_IMPORT_ERROR or '').strip())


def _kwargs(params):
    kubeconfig, error = check_kubeconfig(params.get('kubeconfig'))
    if error:
        raise KubeError(error)
    kwargs = connection_kwargs(params)
    if kubeconfig is not None:
        kwargs['kubeconfig'] = kubeconfig
    return kwargs


def _config_error(kwargs, e):
    kubeconfig = kwargs.get('kubeconfig')
    default = 'default: K8S_AUTH_KUBECONFIG, KUBECONFIG, ~/.kube/config or the in-cluster service account'
    where = '(dict)' if isinstance(kubeconfig, dict) else (kubeconfig or default)
    return KubeError('cannot configure the Kubernetes client from kubeconfig %s: %s' % (where, e))


def get_client(params, get_api_client=None):
    """A kubernetes DynamicClient for the connection options in params: kubernetes.core's get_api_client.

    Raises KubeError when kubernetes.core is missing or the configuration cannot be loaded.
    get_api_client replaces kubernetes.core's (tests).
    """
    factory = get_api_client or _core_get_api_client
    if factory is None:
        raise _missing_core()
    kwargs = _kwargs(params)
    try:
        wrapper = factory(module=None, **kwargs)
    except Exception as e:  # ConfigException, CoreException, YAML and file errors: kubeconfig problems come in many types
        raise _config_error(kwargs, e)
    return getattr(wrapper, 'client', wrapper)


def api_client(params, core=None, api_client_class=None):
    """A plain kubernetes ApiClient (for k8s_rest's requests) with kubernetes.core's configuration.

    Same options, environment variables, kubeconfig / in-cluster order and impersonation headers as get_client, but
    without the dynamic client's API discovery, so a read-only module sends only its own requests. core and
    api_client_class replace kubernetes.core's client module and kubernetes.client.ApiClient (tests).
    """
    core = core or _core_client
    if core is None:
        raise _missing_core()
    api_client_class = api_client_class or ApiClient
    if api_client_class is None:
        raise KubeError('the kubernetes Python client is needed to reach the Kubernetes API: %s'
                        % (KUBERNETES_IMPORT_ERROR or '').strip())
    kwargs = _kwargs(params)
    try:
        # kubernetes.core's own steps of get_api_client (k8s/client.py, 3.0.0 to 6.x), minus the dynamic client
        configuration = core._create_configuration(core._create_auth_spec(None, **kwargs))
        headers = core._create_headers(None, **kwargs)
    except Exception as e:  # as in get_client
        raise _config_error(kwargs, e)
    client = api_client_class(configuration)
    for header, value in headers.items():
        core._set_header(client, header, value)
    return client
