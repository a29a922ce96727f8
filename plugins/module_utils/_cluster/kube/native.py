# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API server reached over urllib3 alone, for the ways of connecting that need nothing else.

Importing the kubernetes Python package (kubernetes.core's client configuration imports it whole: its config loaders
pull requests, oauthlib, pydantic and more) costs about 0.3 CPU-s, more than the rest of a module run that reads a few
objects. Most sites connect with what this module reads itself: a kubeconfig whose user has client certificates, a
bearer token (``token`` or ``tokenFile``) or a user name and password, or the in-cluster service account (AWX in a
pod). For those, settings() works out the connection exactly as kubernetes.core's get_api_client and the kubernetes
client's loaders do (which options win, the in-cluster account before the default kubeconfig, kubeconfig files merged
in order, files relative to the kubeconfig that names them, ``-data`` fields over files, ``insecure-skip-tls-verify``,
``tls-server-name``; docs/conformance/kubernetes-core.md, K8S-18 to K8S-20; the unit tests compare both for every
case) and NativeApiClient sends the requests with urllib3, as the client's REST layer does.

Anything else raises Unsupported and the caller (kube/access) takes kubernetes.core's route unchanged: an ``exec``
credential plugin (EKS, GKE, kubelogin), an ``auth-provider``, a proxy (the ``proxy`` option, a kubeconfig
``proxy-url``, HTTP(S)_PROXY in the environment, K8S_AUTH_PROXY_HEADERS_*), or GPUOPS_K8S_TRANSPORT=kubernetes.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from typing import Any
from urllib.parse import quote

TRANSPORT_ENV = 'GPUOPS_K8S_TRANSPORT'
TRANSPORTS = ('auto', 'kubernetes')
SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'   # the in-cluster service account (token, ca.crt)
DEFAULT_HOST = 'http://localhost'                           # the kubernetes client Configuration's default host
USER_AGENT = 'gpuops.k8s_gpu'
# kubernetes.core AUTH_ARG_MAP: the client attribute name -> the option name (args_common.py)
AUTH_NAMES = (('kubeconfig', 'kubeconfig'), ('context', 'context'), ('host', 'host'), ('api_key', 'api_key'),
              ('username', 'username'), ('password', 'password'), ('verify_ssl', 'validate_certs'),
              ('ssl_ca_cert', 'ca_cert'), ('cert_file', 'client_cert'), ('key_file', 'client_key'),
              ('proxy', 'proxy'), ('no_proxy', 'no_proxy'), ('persist_config', 'persist_config'))
PROXY_HEADER_ENV = ('K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH', 'K8S_AUTH_PROXY_HEADERS_BASIC_AUTH',
                    'K8S_AUTH_PROXY_HEADERS_USER_AGENT')


class Unsupported(Exception):
    """This connection needs the kubernetes client (kubernetes.core's route): the message says why."""


class ConfigError(Exception):
    """The configuration cannot be loaded (as the kubernetes client's ConfigException)."""


class ApiError(Exception):
    """An answer of the API server outside 2xx: ``status``, ``reason``, ``body`` (text), ``headers``; shown as the
    kubernetes client's ApiException shows itself."""

    status: int | None = None
    reason: str | None = None
    body: Any = None
    headers: Any = None

    def __init__(self, status: int | None = None, reason: str | None = None, body: Any = None,
                 headers: Any = None) -> None:
        super(ApiError, self).__init__(reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers

    def __str__(self) -> str:
        text = '(%s)\nReason: %s\n' % (self.status, self.reason)
        if self.headers:
            text += 'HTTP response headers: %s\n' % (dict(self.headers),)
        if self.body:
            text += 'HTTP response body: %s\n' % (self.body,)
        return text


class NotFound(ApiError):
    """404: the object (or the API) is not there (as the kubernetes dynamic client's NotFoundError)."""

    status = 404


class ResourceNotFound(Exception):
    """The API server does not serve this kind (as the kubernetes dynamic client's ResourceNotFoundError)."""


def transport(environ: Any = None) -> str:
    """GPUOPS_K8S_TRANSPORT: ``auto`` (default: this module where it can) or ``kubernetes`` (always the client)."""
    value = ((environ if environ is not None else os.environ).get(TRANSPORT_ENV) or 'auto').strip().lower()
    if value not in TRANSPORTS:
        raise ConfigError('%s must be one of %s, got %r' % (TRANSPORT_ENV, ', '.join(TRANSPORTS), value))
    return value


# ------------------------------------------------------------------------------------------------ the settings
class Settings(object):
    """What a connection needs: ``host``; ``verify`` (bool); ``ca`` / ``cert`` / ``key``: ('file', path) or
    ('data', bytes) or None; ``authorization`` (the header's value) or None; ``tls_server_name``; ``headers``:
    [(name, value)] sent with every request (impersonation)."""

    def __init__(self) -> None:
        self.host = DEFAULT_HOST
        self.verify = True
        self.ca: tuple[str, Any] | None = None
        self.cert: tuple[str, Any] | None = None
        self.key: tuple[str, Any] | None = None
        self.authorization: str | None = None
        self.tls_server_name: str | None = None
        self.headers: list[tuple[str, str]] = []


def _bool_env(value: str) -> bool:
    return value.lower() not in ('0', 'false', 'no')


def auth_spec(kwargs: dict[str, Any], environ: Any) -> dict[str, Any]:
    """The options as kubernetes.core's _create_auth_spec collects them: given ones, else K8S_AUTH_<OPTION> or
    K8S_AUTH_<ATTRIBUTE> from the environment."""
    auth: dict[str, Any] = {}
    for attr, option in AUTH_NAMES:
        if kwargs.get(option) is not None:
            auth[attr] = kwargs[option]
        elif kwargs.get(attr) is not None:
            auth[attr] = kwargs[attr]
        else:
            value = environ.get('K8S_AUTH_' + option.upper()) or environ.get('K8S_AUTH_' + attr.upper())
            if value is not None:
                auth[attr] = _bool_env(value) if option == 'validate_certs' else value
    return auth


def _env_proxies(environ: Any) -> list[str]:
    return sorted(k for k, v in environ.items() if k.lower() in ('http_proxy', 'https_proxy', 'all_proxy') and v)


def settings(kwargs: dict[str, Any], environ: Any = None, sa_dir: str = SA_DIR,
             default_kubeconfig: str | None = None) -> Settings:
    """The connection for kube/access's keyword arguments (the module's connection options that are set).

    Raises Unsupported (the kubernetes client must do it), or ConfigError / OSError / ValueError as the client's
    loaders would fail (kube/access names the kubeconfig in its message)."""
    environ = os.environ if environ is None else environ
    if transport(environ) == 'kubernetes':
        raise Unsupported('%s=kubernetes' % TRANSPORT_ENV)
    proxies = _env_proxies(environ)
    if proxies:
        raise Unsupported('a proxy in the environment (%s)' % ', '.join(proxies))
    if any(environ.get(k) is not None for k in PROXY_HEADER_ENV):
        raise Unsupported('proxy headers (K8S_AUTH_PROXY_HEADERS_*)')
    auth = auth_spec(kwargs, environ)
    if auth.get('proxy'):
        raise Unsupported('the proxy option')
    if auth.get('host'):
        auth['host'] = auth['host'].rstrip('/')

    def given(*names: str) -> bool:
        return all(auth.get(n) for n in names)

    if given('username', 'password', 'host') or given('api_key', 'host') or given('cert_file', 'key_file', 'host'):
        s = Settings()
    elif given('kubeconfig') or given('context'):
        s = load_kubeconfig(auth.get('kubeconfig'), auth.get('context'), environ, default_kubeconfig)
    else:
        try:
            s = load_incluster(environ, sa_dir)
        except ConfigError:
            s = load_kubeconfig(auth.get('kubeconfig'), auth.get('context'), environ, default_kubeconfig)
    if s.authorization and (auth.get('host') or auth.get('api_key')):
        # the client re-applies a loaded token and its server before every request (its refresh hook), over these
        # options: what it then sends is the client's to decide
        raise Unsupported('the host or api_key option over a token of the kubeconfig or the service account')
    # the options over what was loaded (kubernetes.core's _create_configuration)
    if auth.get('host') is not None:
        s.host = auth['host']
    if auth.get('api_key') is not None:
        s.authorization = 'Bearer %s' % auth['api_key']   # replaces the kubeconfig's credential, as the client does
    if auth.get('verify_ssl') is not None:
        s.verify = bool(auth['verify_ssl'])
    if auth.get('ssl_ca_cert') is not None:
        s.ca = ('file', auth['ssl_ca_cert'])
    if auth.get('cert_file') is not None:
        s.cert = ('file', auth['cert_file'])
    if auth.get('key_file') is not None:
        s.key = ('file', auth['key_file'])
    # username and password options: the client (24 to 37) sets them but sends no basic authentication for them
    s.headers = impersonation_headers(kwargs, environ)
    return s


def impersonation_headers(kwargs: dict[str, Any], environ: Any) -> list[tuple[str, str]]:
    """Impersonate-User and one Impersonate-Group per group (kubernetes.core's _create_headers)."""
    out: list[tuple[str, str]] = []
    user = kwargs.get('impersonate_user')
    if user is None:
        user = environ.get('K8S_AUTH_IMPERSONATE_USER')
    if user:
        out.append(('Impersonate-User', user))
    groups = kwargs.get('impersonate_groups')
    if groups is None:
        env = environ.get('K8S_AUTH_IMPERSONATE_GROUPS')
        groups = [g for g in env.split(',') if g != ''] if env is not None else None
    for group in groups or []:
        out.append(('Impersonate-Group', group))
    return out


def load_incluster(environ: Any, sa_dir: str = SA_DIR) -> Settings:
    """The pod's service account, as the client's in-cluster loader reads it (ConfigError when not in a pod)."""
    host, port = environ.get('KUBERNETES_SERVICE_HOST'), environ.get('KUBERNETES_SERVICE_PORT')
    if host is None or port is None:
        raise ConfigError('Service host/port is not set.')
    if not host or not port:
        raise ConfigError('Service host/port is set but empty.')
    token_file, ca_file = os.path.join(sa_dir, 'token'), os.path.join(sa_dir, 'ca.crt')
    if not os.path.isfile(token_file):
        raise ConfigError('Service token file does not exist.')
    with open(token_file) as f:
        token = f.read()
    if not token:
        raise ConfigError('Token file exists but empty.')
    if not os.path.isfile(ca_file):
        raise ConfigError('Service certification file does not exist.')
    with open(ca_file) as f:
        if not f.read():
            raise ConfigError('Cert file exists but empty.')
    s = Settings()
    s.host = 'https://' + ('[%s]:%s' if (':' in host or '%' in host) else '%s:%s') % (host, port)
    s.ca = ('file', ca_file)
    s.authorization = 'bearer ' + token
    return s


class _Item(object):
    """A cluster, context or user entry of a merged kubeconfig and the file that gave it (None: a dict)."""

    def __init__(self, value: Any, path: str | None) -> None:
        self.value = value
        self.path = path


def _merge(paths: str) -> tuple[dict[str, Any], dict[str, list[_Item]]]:
    """The kubeconfig files of a path list merged as the client merges them: entries by name, the first file that
    names one wins; top-level keys from the first file; ``current-context`` from the last file that sets it."""
    top: dict[str, Any] | None = None
    lists: dict[str, list[_Item]] = {'clusters': [], 'contexts': [], 'users': []}
    for path in paths.split(':'):
        if not path:
            continue
        path = os.path.expanduser(path)
        if not os.path.exists(path):
            continue
        import yaml  # only here: a module run that never reads a kubeconfig does not pay for it
        with open(path) as f:
            config = yaml.safe_load(f)
        if config is None:
            raise ConfigError('Invalid kube-config. %s file is empty' % path)
        if top is None:
            top = dict(config)
        for name in lists:
            for entry in config.get(name, []) or []:
                if not any(e.value['name'] == entry['name'] for e in lists[name]):
                    lists[name].append(_Item(entry, path))
        if 'current-context' in config:
            top['current-context'] = config['current-context']
    if top is None:
        raise ConfigError('Invalid kube-config file. No configuration found.')
    return top, lists


def _get(node: Any, key: Any, where: str) -> Any:
    value = node.get(key) if isinstance(node, dict) else None
    if value is None:
        raise ConfigError('Invalid kube-config file. Expected key %s in %s' % (key, where))
    return value


def _named(items: list[_Item], name: Any, where: str, safe: bool = False) -> _Item | None:
    found = None
    for item in items:
        if 'name' not in item.value:
            raise ConfigError("Invalid kube-config file. Expected all values in %s list to have 'name' key" % where)
        if item.value['name'] == name:
            if found is not None:
                raise ConfigError('Invalid kube-config file. Expected only one object with name %s in %s list'
                                  % (name, where))
            found = item
    if found is None and not safe:
        raise ConfigError('Invalid kube-config file. Expected object with name %s in %s list' % (name, where))
    return found


def _required(items: list[_Item], name: Any, where: str) -> _Item:
    found = _named(items, name, where)
    if found is None:  # _named raised already; for the type checker
        raise ConfigError('Invalid kube-config file. Expected object with name %s in %s list' % (name, where))
    return found


def _file_or_data(obj: Any, file_key: str, data_key: str, base: str) -> tuple[str, Any] | None:
    """('data', bytes) from ``data_key`` (base64) when present, else ('file', path) relative to ``base``; None when
    neither (or the data is empty); a named file that does not exist is an error, as in the client."""
    if not obj:
        return None
    if data_key in obj:
        data = obj[data_key]
        if not data:
            return None
        return 'data', base64.standard_b64decode(data.encode() if isinstance(data, str) else data)
    if file_key in obj:
        path = os.path.normpath(os.path.join(base, obj[file_key]))
        if not os.path.isfile(path):
            raise ConfigError('File does not exist: %s' % path)
        return 'file', path
    return None


def load_kubeconfig(kubeconfig: Any, context: str | None, environ: Any,
                    default_kubeconfig: str | None = None) -> Settings:
    """A kubeconfig (a path list or a dict; None: KUBECONFIG, else ~/.kube/config) as the client loads it."""
    if isinstance(kubeconfig, dict):
        top: dict[str, Any] = dict(kubeconfig)
        lists = dict((name, [_Item(e, None) for e in (kubeconfig.get(name) or [])])
                     for name in ('clusters', 'contexts', 'users'))
    else:
        if not kubeconfig:
            kubeconfig = default_kubeconfig or environ.get('KUBECONFIG', '~/.kube/config')
        top, lists = _merge(kubeconfig)
    if context is None:
        context = _get(top, 'current-context', 'kube-config')
    ctx = _required(lists['contexts'], context, 'kube-config/contexts')
    ctx_body = _get(ctx.value, 'context', 'kube-config/contexts[name=%s]' % context)
    user_item = None
    if ctx_body.get('user') and lists['users']:
        user_item = _named(lists['users'], ctx_body['user'], 'kube-config/users', safe=True)
    user = _get(user_item.value, 'user', 'users[name=%s]' % ctx_body['user']) if user_item else None
    cluster_item = _required(lists['clusters'], _get(ctx_body, 'cluster', 'context'), 'kube-config/clusters')
    cluster = _get(cluster_item.value, 'cluster', 'clusters')

    s = Settings()
    if user:   # the client's order: auth-provider, token / tokenFile, exec, username and password
        if 'auth-provider' in user:
            raise Unsupported("the kubeconfig user's auth-provider")
        token = None
        if 'token' in user:
            token = user['token']
        elif 'tokenFile' in user:
            base = os.path.abspath(os.path.dirname(user_item.path)) if user_item and user_item.path else ''
            with open(os.path.normpath(os.path.join(base, user['tokenFile']))) as f:
                token = f.read()
        if token:
            s.authorization = 'Bearer %s' % token
        elif 'exec' in user:
            raise Unsupported("the kubeconfig user's exec credential plugin")
        elif 'username' in user and 'password' in user:
            s.authorization = 'Basic ' + base64.b64encode(
                ('%s:%s' % (user['username'], user['password'])).encode('latin-1')).decode()
    if 'server' in cluster:
        s.host = cluster['server'].rstrip('/')
        if s.host.startswith('https'):
            # files relative to the kubeconfig that names the cluster (the client does so for the user's files too)
            base = os.path.abspath(os.path.dirname(cluster_item.path)) if cluster_item.path else ''
            s.ca = _file_or_data(cluster, 'certificate-authority', 'certificate-authority-data', base)
            s.cert = _file_or_data(user, 'client-certificate', 'client-certificate-data', base)
            s.key = _file_or_data(user, 'client-key', 'client-key-data', base)
    if 'insecure-skip-tls-verify' in cluster:
        s.verify = not cluster['insecure-skip-tls-verify']
    if 'tls-server-name' in cluster:
        s.tls_server_name = cluster['tls-server-name']
    if 'proxy-url' in cluster:
        raise Unsupported("the kubeconfig cluster's proxy-url")
    return s


# ------------------------------------------------------------------------------------------------ the client
def ssl_context(s: Settings) -> Any:
    """The TLS context of the settings: the CA, client certificate and key loaded once (``-data`` through a private
    directory removed at once; the client instead leaves such files in /tmp until the process ends)."""
    import ssl
    from urllib3.util.ssl_ import create_urllib3_context
    ctx = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if s.verify else ssl.CERT_NONE)
    if not s.verify:
        ctx.check_hostname = False
    tmp = None
    try:
        def path_of(item: tuple[str, Any], name: str) -> str:
            nonlocal tmp
            if item[0] == 'file':
                return item[1]
            if tmp is None:
                tmp = tempfile.mkdtemp(prefix='gpuops-k8s-')
            path = os.path.join(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, 'wb') as f:
                f.write(item[1])
            return path

        if s.verify:
            if s.ca:
                ctx.load_verify_locations(cafile=path_of(s.ca, 'ca.crt'))
            else:
                ctx.load_default_certs()
        if s.cert:
            ctx.load_cert_chain(path_of(s.cert, 'client.crt'), path_of(s.key, 'client.key') if s.key else None)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return ctx


class NativeRest(object):
    """The REST layer (``request``, ``pool_manager``) kube/access's retry policy wraps, as it wraps the client's."""

    def __init__(self, s: Settings) -> None:
        import urllib3
        urllib3.disable_warnings()   # as kubernetes.core does: validate_certs false is the user's choice, said once
        kw: dict[str, Any] = {'maxsize': 4}
        if s.host.startswith('https'):
            kw['ssl_context'] = ssl_context(s)
            if s.tls_server_name:
                kw['server_hostname'] = s.tls_server_name
            if not s.verify:
                kw['assert_hostname'] = False
        self.pool_manager = urllib3.PoolManager(**kw)

    def request(self, method: str, url: str, headers: Any = None, body: Any = None, **kwargs: Any) -> Any:
        return self.pool_manager.request(method, url, body=body, headers=headers, preload_content=True)


class NativeApiClient(object):
    """What kube/rest needs of an ApiClient: ``configuration.host`` and one request at a time (``native_request``)."""

    gpuops_native = True

    def __init__(self, s: Settings) -> None:
        self.settings = s
        self.configuration = s   # .host, as the client's Configuration
        self.rest_client = NativeRest(s)

    def native_request(self, method: str, path: str, query: list[tuple[str, Any]] | None = None,
                       headers: dict[str, str] | None = None, body: Any = None) -> Any:
        """One request; the urllib3 response (``status``, ``data``). An answer outside 2xx raises ApiError."""
        try:
            from urllib3 import HTTPHeaderDict
        except ImportError:  # urllib3 1.26
            from urllib3._collections import HTTPHeaderDict
        url = self.settings.host + path
        if query:
            url += '?' + '&'.join('%s=%s' % (k, quote(_query_value(v))) for k, v in query)
        h = HTTPHeaderDict()
        h['User-Agent'] = USER_AGENT
        for name, value in (headers or {}).items():
            h[name] = value
        if self.settings.authorization:
            h['Authorization'] = self.settings.authorization
        for name, value in self.settings.headers:
            h.add(name, value)
        data = None
        if body is not None:
            if 'Content-Type' not in h:
                h['Content-Type'] = 'application/json'
            data = json.dumps(body).encode('utf-8')
        response = self.rest_client.request(method, url, headers=h, body=data)
        if not 200 <= response.status <= 299:
            text = response.data.decode('utf-8', 'replace') if isinstance(response.data, bytes) else response.data
            cls = NotFound if response.status == 404 else ApiError
            raise cls(status=response.status, reason=response.reason, body=text, headers=response.headers)
        return response


# ------------------------------------------------------------------------------------------------ the dynamic client
class Resource(object):
    """A kind the API server serves (from its discovery document): where its objects are. As the dynamic client's
    Resource, its get / create / patch / replace / delete call the client that found it with the resource first."""

    def __init__(self, api_version: str, kind: str, plural: str, namespaced: bool, client: Any = None) -> None:
        self.api_version = self.group_version = api_version
        self.kind = kind
        self.name = plural
        self.namespaced = namespaced
        self.client = client

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.get(self, *args, **kwargs)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.create(self, *args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.patch(self, *args, **kwargs)

    def replace(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.replace(self, *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.delete(self, *args, **kwargs)

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        base = '/api/v1' if self.api_version == 'v1' else '/apis/' + self.api_version
        if self.namespaced and namespace:
            base += '/namespaces/' + quote(namespace, safe='')
        base += '/' + self.name
        return base + ('/' + quote(name, safe='') if name else '')


class Instance(object):
    """An answer of the dynamic client (``to_dict()``, as its ResourceInstance)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def to_dict(self) -> dict[str, Any]:
        return self._data


class _Resources(object):
    """``resources.get(api_version=, kind=)`` over the API server's discovery: one request per group/version, the
    first time a run needs it (no cache on disk)."""

    def __init__(self, api: NativeApiClient, client: Any = None) -> None:
        self.api = api
        self.client = client
        self.lists: dict[str, list[dict[str, Any]]] = {}

    def get(self, api_version: str, kind: str) -> Resource:
        if api_version not in self.lists:
            path = '/api/v1' if api_version == 'v1' else '/apis/' + api_version
            try:
                doc = json.loads(self.api.native_request('GET', path, headers={'Accept': 'application/json'}).data)
            except NotFound:
                doc = {}
            self.lists[api_version] = doc.get('resources') or []
        for r in self.lists[api_version]:
            if r.get('kind') == kind and '/' not in (r.get('name') or '/'):
                return Resource(api_version, kind, r['name'], bool(r.get('namespaced')), self.client)
        raise ResourceNotFound('%s %s' % (api_version, kind))


class NativeDynamicClient(object):
    """The calls kube/converger makes of the kubernetes dynamic client (get, create, patch, replace, delete and
    ``resources.get``), with the same paths, query parameters (in the same order) and content types; ``client`` is the
    NativeApiClient (kube/access installs the retry policy there)."""

    QUERY = (('_continue', 'continue'), ('field_selector', 'fieldSelector'), ('label_selector', 'labelSelector'),
             ('limit', 'limit'), ('resource_version', 'resourceVersion'), ('grace_period_seconds', 'gracePeriodSeconds'),
             ('propagation_policy', 'propagationPolicy'), ('dry_run', 'dryRun'), ('field_manager', 'fieldManager'),
             ('force_conflicts', 'force'))

    def __init__(self, api: NativeApiClient) -> None:
        self.client = api
        self.resources = _Resources(api, self)

    def request(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                **params: Any) -> Instance:
        unknown = set(params) - set(k for k, _q in self.QUERY)
        if unknown:
            raise TypeError('unexpected keyword argument(s) %s' % ', '.join(sorted(unknown)))
        query = [(q, params[k]) for k, q in self.QUERY if params.get(k) is not None]
        headers = {'Accept': 'application/json', 'Content-Type': content_type or 'application/json'}
        response = self.client.native_request(method, path, query, headers, body)
        return Instance(json.loads(response.data) if response.data else {})

    @staticmethod
    def _namespace(resource: Resource, namespace: str | None, body: Any) -> str | None:
        if not resource.namespaced:
            return namespace
        namespace = namespace or ((body or {}).get('metadata') or {}).get('namespace')
        if not namespace:
            raise ValueError('Namespace is required for %s.%s' % (resource.group_version, resource.kind))
        return namespace

    def get(self, resource: Resource, name: str | None = None, namespace: str | None = None, **params: Any) -> Instance:
        return self.request('GET', resource.path(name=name, namespace=namespace), **params)

    def create(self, resource: Resource, body: Any = None, namespace: str | None = None, **params: Any) -> Instance:
        namespace = self._namespace(resource, namespace, body)
        return self.request('POST', resource.path(namespace=namespace), body=body, **params)

    def replace(self, resource: Resource, body: Any = None, name: str | None = None, namespace: str | None = None,
                **params: Any) -> Instance:
        name = name or ((body or {}).get('metadata') or {}).get('name')
        namespace = self._namespace(resource, namespace, body)
        return self.request('PUT', resource.path(name=name, namespace=namespace), body=body, **params)

    def patch(self, resource: Resource, body: Any = None, name: str | None = None, namespace: str | None = None,
              content_type: str = 'application/strategic-merge-patch+json', **params: Any) -> Instance:
        name = name or ((body or {}).get('metadata') or {}).get('name')
        namespace = self._namespace(resource, namespace, body)
        return self.request('PATCH', resource.path(name=name, namespace=namespace), body=body,
                            content_type=content_type, **params)

    def delete(self, resource: Resource, name: str | None = None, namespace: str | None = None, body: Any = None,
               **params: Any) -> Instance:
        if resource.namespaced and not namespace:
            raise ValueError('Namespace is required for %s.%s' % (resource.group_version, resource.kind))
        return self.request('DELETE', resource.path(name=name, namespace=namespace), body=body, **params)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)
