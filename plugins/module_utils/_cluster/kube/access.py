# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way this collection reaches the Kubernetes API.

Every module that talks to the API takes the options of AUTH_ARG_SPEC (documented by the doc fragment
gpuops.k8s_gpu.k8s_auth_options) and gets its client from get_client(), which hands them to kubernetes.core's
get_api_client: the same option names, K8S_AUTH_* environment variables, kubeconfig / in-cluster order and client
cache as the kubernetes.core modules.

Every request of those clients goes through one retry policy (RetryPolicy, install_retries; docs/troubleshooting.md,
"API server throttling and dropped connections"), and urllib3's own retries are switched off under it, so that the
policy is the only one and its bounds hold:
 * 429 Too Many Requests (API Priority and Fairness, max-in-flight, a server shutting down: the request was not run)
   is retried for every method, after the server's Retry-After;
 * 502/503/504 and a connection dropped after the request was sent are retried only for requests that may run twice
   with the same result: GET, HEAD, OPTIONS, PUT, DELETE, PATCH other than a JSON patch, and the Eviction subresource
   (evicting a pod twice evicts it once; a pod already gone answers 404). A POST that may have landed is not resent:
   the error says so (may_have_landed) and the caller re-reads (kube/converger's backups);
 * a connection that could not be opened (refused, connect timeout) is retried for every method (nothing was sent);
 * 429 of an Eviction is a disruption budget's answer, not throttling: it goes to the caller (gpu_node_drain waits);
 * bounded: at most ``max_retries`` retries and ``max_total`` seconds of waiting per request; a Retry-After that does
   not fit in what is left stops at once with a message that names the request, the answers and the limits.
Environment: GPUOPS_K8S_RETRIES (retries per request, default 10 as client-go), GPUOPS_K8S_RETRY_TOTAL (seconds per
request, default 120).
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import native

# kubernetes.core and the kubernetes package are imported only when a connection needs them (kube/native serves the
# others without them): importing the package costs about 0.3 CPU-s per module run. These names stay for the modules
# and the unit tests; _UNLOADED means "not imported yet".
_UNLOADED: Any = object()
CORE_IMPORT_ERROR: str | None = None
_core_client: Any = _UNLOADED
_core_get_api_client: Any = _UNLOADED
K8SDynamicClient: Any = _UNLOADED
LazyDiscoverer: Any = _UNLOADED


def _find(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


KUBERNETES_IMPORT_ERROR: str | None = None if _find('kubernetes') else "No module named 'kubernetes'"


def _kubernetes_api_client_class() -> Any:
    from kubernetes.client import ApiClient as _ApiClient
    return _ApiClient


# What kube/rest.client_module() is given: None when the kubernetes package is missing (then no typed API is offered),
# else the loader of kubernetes.client.ApiClient (not imported before a connection needs it).
ApiClient: Any = None if KUBERNETES_IMPORT_ERROR else _kubernetes_api_client_class

# Every answer of the API server outside 2xx from kube/native, and the retry policy's RetriesExhausted, are ApiError;
# the kubernetes client raises its own ApiException (callers read ``status`` of either: is_api_error()).
ApiError = native.ApiError
ApiException = ApiError


def is_api_error(error: BaseException) -> bool:
    """True for an answer of the API server (an HTTP status), whichever client raised it."""
    status = getattr(error, 'status', None)
    return isinstance(status, int) and not isinstance(status, bool) and status > 0


def _load_core() -> None:
    """Import kubernetes.core's client configuration (and with it the kubernetes package) once."""
    global _core_client, _core_get_api_client, CORE_IMPORT_ERROR, K8SDynamicClient, LazyDiscoverer
    if _core_client is _UNLOADED:
        try:
            from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as core_client
            _core_client, _core_get_api_client = core_client, core_client.get_api_client
        except ImportError:
            _core_client = _core_get_api_client = None
            CORE_IMPORT_ERROR = traceback.format_exc()
    if K8SDynamicClient is _UNLOADED:
        try:
            from ansible_collections.kubernetes.core.plugins.module_utils.k8sdynamicclient import K8SDynamicClient as kdc
            from ansible_collections.kubernetes.core.plugins.module_utils.client.discovery import LazyDiscoverer as ld
            K8SDynamicClient, LazyDiscoverer = kdc, ld
        except ImportError:
            K8SDynamicClient = LazyDiscoverer = None


try:
    from urllib3.util.retry import Retry as _Urllib3Retry
except ImportError:
    _Urllib3Retry = None

# Names, types, aliases and environment variables as kubernetes.core's AUTH_ARG_SPEC (args_common.py); validate_certs
# defaults to true here.  proxy_headers and persist_config are not offered.
AUTH_ARG_SPEC: dict[str, dict[str, Any]] = dict(
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


def auth_arg_spec(env_fallback: Callable[..., Any]) -> dict[str, dict[str, Any]]:
    """AUTH_ARG_SPEC (a fresh copy) with Ansible's env_fallback function filled in."""
    spec = {}
    for name, opts in AUTH_ARG_SPEC.items():
        opts = dict(opts)
        opts['fallback'] = (env_fallback, list(opts['fallback']))
        if 'aliases' in opts:
            opts['aliases'] = list(opts['aliases'])
        spec[name] = opts
    return spec


def check_kubeconfig(value: Any) -> tuple[str | dict | None, str | None]:
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


def connection_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """The connection options that are set, as get_api_client takes them."""
    return dict((name, params[name]) for name in AUTH_ARG_SPEC if params.get(name) is not None)


def _missing_core() -> KubeError:
    return KubeError('the kubernetes.core collection is needed to reach the Kubernetes API '
                     '(ansible-galaxy collection install kubernetes.core): %s' % (CORE_IMPORT_ERROR or '').strip())


def _kwargs(params: dict[str, Any]) -> dict[str, Any]:
    kubeconfig, error = check_kubeconfig(params.get('kubeconfig'))
    if error:
        raise KubeError(error)
    kwargs = connection_kwargs(params)
    if kubeconfig is not None:
        kwargs['kubeconfig'] = kubeconfig
    return kwargs


def _config_error(kwargs: dict[str, Any], e: Exception) -> KubeError:
    kubeconfig = kwargs.get('kubeconfig')
    default = 'default: K8S_AUTH_KUBECONFIG, KUBECONFIG, ~/.kube/config or the in-cluster service account'
    where = '(dict)' if isinstance(kubeconfig, dict) else (kubeconfig or default)
    return KubeError('cannot configure the Kubernetes client from kubeconfig %s: %s' % (where, e))


def get_client(params: dict[str, Any], get_api_client: Callable[..., Any] | None = None, core: Any = None,
               api_client_class: Any = None, dynamic_client_class: Any = None) -> Any:
    """A dynamic client for the connection options in params, with the retry policy on every request: kube/native's
    where it serves the connection (no kubernetes import), else a kubernetes DynamicClient built as kubernetes.core's
    get_api_client builds it (its configuration steps, K8SDynamicClient and LazyDiscoverer), on the ApiClient of
    kubernetes_api_client(), so that the API discovery's requests are retried as well. Raises
    KubeError when kubernetes.core is missing or the configuration cannot be loaded. get_api_client replaces that route
    with a factory (tests); core, api_client_class and dynamic_client_class replace kubernetes.core's modules (tests).
    """
    if get_api_client is None and core is None and api_client_class is None and dynamic_client_class is None:
        api = _native_client(params)
        if api is not None:
            return native.NativeDynamicClient(api)
    if get_api_client is None and dynamic_client_class is None:
        _load_core()
    if get_api_client is None and (dynamic_client_class or K8SDynamicClient) is not None:
        api = kubernetes_api_client(params, core=core, api_client_class=api_client_class)
        cls = dynamic_client_class or K8SDynamicClient
        try:
            return cls(api, discoverer=LazyDiscoverer) if dynamic_client_class is None else cls(api)
        except Exception as e:  # pylint: disable=broad-except
            if is_api_error(e) or isinstance(e, ApiError):  # discovery: the server's answer, or the policy giving up
                where = getattr(getattr(api, 'configuration', None), 'host', None) or 'the API server'
                raise KubeError('API discovery at %s failed: %s' % (where, getattr(e, 'reason', None) or e))
            raise _config_error(_kwargs(params), e)  # a discovery cache that cannot be written, ...
    factory = get_api_client or _core_get_api_client
    if factory is None or factory is _UNLOADED:
        raise _missing_core()
    kwargs = _kwargs(params)
    try:
        wrapper = factory(module=None, **kwargs)
    except Exception as e:  # ConfigException, CoreException, YAML and file errors: kubeconfig problems come in many types
        raise _config_error(kwargs, e)
    client = getattr(wrapper, 'client', wrapper)
    install_retries(client)
    return client


def api_client(params: dict[str, Any], core: Any = None, api_client_class: Any = None,
               environ: Any = None) -> Any:
    """A client for kube/rest's requests: kube/native's where it serves the connection (no kubernetes import), else a
    plain kubernetes ApiClient with kubernetes.core's configuration (kubernetes_api_client). Either carries the retry
    policy. core and api_client_class (tests) take the kubernetes route."""
    if core is None and api_client_class is None:
        client = _native_client(params, environ)
        if client is not None:
            return client
    return kubernetes_api_client(params, core=core, api_client_class=api_client_class)


def _native_client(params: dict[str, Any], environ: Any = None) -> Any:
    """kube/native's client with the retry policy, or None when the connection is the kubernetes client's to make."""
    kwargs = _kwargs(params)
    try:
        settings = native.settings(kwargs, environ=environ)
    except native.Unsupported:
        return None
    except Exception as e:  # ConfigError, YAML and file errors: as the kubernetes route reports them
        raise _config_error(kwargs, e)
    try:
        client = native.NativeApiClient(settings)
    except Exception as e:  # a CA or key that cannot be loaded
        raise _config_error(kwargs, e)
    install_retries(client)
    return client


def kubernetes_api_client(params: dict[str, Any], core: Any = None, api_client_class: Any = None) -> Any:
    """A plain kubernetes ApiClient with kubernetes.core's configuration.

    Same options, environment variables, kubeconfig / in-cluster order and impersonation headers as get_client, but
    without the dynamic client's API discovery, so a read-only module sends only its own requests. core and
    api_client_class replace kubernetes.core's client module and kubernetes.client.ApiClient (tests).
    """
    if core is None:
        _load_core()
        core = _core_client
    if core is None or core is _UNLOADED:
        raise _missing_core()
    if api_client_class is None:
        if KUBERNETES_IMPORT_ERROR:
            raise KubeError('the kubernetes Python client is needed to reach the Kubernetes API: %s'
                            % (KUBERNETES_IMPORT_ERROR or '').strip())
        api_client_class = _kubernetes_api_client_class()
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
    install_retries(client)
    return client


# ------------------------------------------------------------------------------------------------ retry policy
RETRY_ANY_METHOD = frozenset([429])
RETRY_IF_IDEMPOTENT = frozenset([502, 503, 504])
IDEMPOTENT_METHODS = frozenset(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'])
NON_IDEMPOTENT_PATCH = 'application/json-patch+json'
DEFAULT_MAX_RETRIES = 10
DEFAULT_MAX_TOTAL = 120.0


def _env_number(name: str, default: float, cast: Callable[[str], float]) -> float:
    value = os.environ.get(name)
    if value in (None, ''):
        return default
    try:
        number = cast(value)
    except ValueError:
        number = -1
    if number < 0:
        raise KubeError('%s must be a number of 0 or more, got %r' % (name, value))
    return number


def _is_eviction(url: str) -> bool:
    return url.split('?', 1)[0].rstrip('/').endswith('/eviction')


def _header(headers: Any, name: str) -> Any:
    if not headers:
        return None
    getter = getattr(headers, 'get', None)
    if getter is None:
        return None
    value = getter(name)
    if value is None:
        for key in list(headers.keys()) if hasattr(headers, 'keys') else []:
            if key.lower() == name.lower():
                return headers[key]
    return value


def retry_after_seconds(value: Any) -> float | None:
    """Seconds of a Retry-After header (an integer of seconds, as the API server sends it); None when absent or not
    a number (an HTTP date is not sent by kube-apiserver and counts as absent)."""
    if value is None:
        return None
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return None
    return max(seconds, 0.0)


def _connection_not_opened(error: BaseException) -> bool:
    """True when the request never reached the server: the connection could not be opened."""
    names = set(type(e).__name__ for e in _causes(error))
    return bool(names & set(['NewConnectionError', 'ConnectTimeoutError', 'ConnectionRefusedError', 'NameResolutionError']))


def _connection_dropped(error: BaseException) -> bool:
    """True for a connection dropped or reset while the request was on its way or its answer was."""
    names = set(type(e).__name__ for e in _causes(error))
    return bool(names & set(['ProtocolError', 'ConnectionResetError', 'ConnectionAbortedError', 'BrokenPipeError',
                             'RemoteDisconnected', 'IncompleteRead', 'ReadTimeoutError', 'SSLEOFError',
                             'SSLZeroReturnError', 'MaxRetryError', 'ConnectionError']))


def _causes(error: BaseException) -> list[BaseException]:
    """The error and the errors it wraps (urllib3's reason / original_error, exception chaining, exception args)."""
    out: list[BaseException] = []
    todo: list[Any] = [error]
    while todo and len(out) < 16:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or any(e is o for o in out):
            continue
        out.append(e)
        todo.extend([getattr(e, 'reason', None), getattr(e, 'original_error', None), e.__cause__, e.__context__])
        todo.extend(getattr(e, 'args', ()) or ())
    return out


class RetryPolicy(object):
    """Which requests are retried, after how long, and how often (see the module's docstring).

    sleep, clock and jitter are replaced by the unit tests; ``log`` keeps one entry per retry (method, path, cause,
    delay), which the lab's fault tests compare with the proxy's record.
    """

    def __init__(self, max_retries: int | None = None, max_total: float | None = None, base_delay: float = 0.5,
                 max_delay: float = 8.0, sleep: Callable[[float], Any] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, jitter: Callable[[], float] | None = None) -> None:
        self.max_retries = _env_number('GPUOPS_K8S_RETRIES', DEFAULT_MAX_RETRIES, int) \
            if max_retries is None else max_retries
        self.max_total = _env_number('GPUOPS_K8S_RETRY_TOTAL', DEFAULT_MAX_TOTAL, float) \
            if max_total is None else max_total
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.sleep = sleep
        self.clock = clock
        self.jitter = jitter if jitter is not None else random.random
        self.log: list[dict[str, Any]] = []

    def backoff(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (1, 2, ...) when the server named none: exponential, capped, with jitter."""
        delay = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return delay * (0.5 + self.jitter() / 2)

    @staticmethod
    def idempotent(method: str | None, content_type: str | None, url: str) -> bool:
        method = (method or '').upper()
        if method in IDEMPOTENT_METHODS:
            return True
        if method == 'PATCH':
            return (content_type or '').split(';')[0].strip() != NON_IDEMPOTENT_PATCH
        return method == 'POST' and _is_eviction(url)

    def decide(self, method: str | None, url: str, content_type: str | None, status: int | None = None,
               retry_after: float | None = None, error: BaseException | None = None) -> tuple[bool, float | None, str]:
        """(retry, delay or None, why): what to do with one failed attempt (an HTTP status or a connection error)."""
        if error is not None:
            if _connection_not_opened(error):
                return True, None, 'connection not opened (%s)' % _short(error)
            if _connection_dropped(error):
                if self.idempotent(method, content_type, url):
                    return True, None, 'connection dropped (%s)' % _short(error)
                return False, None, 'connection dropped (%s) after the request was sent' % _short(error)
            return False, None, _short(error)
        if status in RETRY_ANY_METHOD:
            if (method or '').upper() == 'POST' and _is_eviction(url):
                return False, None, 'a disruption budget refused the eviction'
            return True, retry_after, 'HTTP %s' % status
        if status in RETRY_IF_IDEMPOTENT and self.idempotent(method, content_type, url):
            return True, retry_after, 'HTTP %s' % status
        return False, None, 'HTTP %s' % status

    def describe(self, method: str, url: str) -> str:
        return '%s %s' % (method, _path(url))


def _short(error: BaseException) -> str:
    text = str(error)
    return (type(error).__name__ + ': ' + text)[:300]


def _path(url: str) -> str:
    if '://' in url:
        url = '/' + url.split('://', 1)[1].split('/', 1)[-1] if '/' in url.split('://', 1)[1] else '/'
    return url


class RetriesExhausted(ApiException):
    """The request failed and the policy stopped retrying it (limit reached, or not safe to resend).

    ``status``: the last HTTP status (0 for a connection error); ``reason``: the message for the user;
    ``may_have_landed``: True when a non-idempotent request may have been run by the server (re-read before resending).
    """

    def __init__(self, status: int, reason: str, body: Any = None, headers: Any = None,
                 may_have_landed: bool = False) -> None:
        ApiException.__init__(self, status=status, reason=reason)
        self.body = body
        self.headers = headers
        self.may_have_landed = may_have_landed

    def __str__(self) -> str:
        return '(%s) %s' % (self.status, self.reason)


def _response_status(result: Any) -> Any:
    """The HTTP status of what rest_client.request returned (client 37 returns errors instead of raising)."""
    return getattr(result, 'status', None)


def _response_headers(result: Any) -> Any:
    getheaders = getattr(result, 'getheaders', None)
    if getheaders is not None:
        try:
            return getheaders()
        except Exception:  # pylint: disable=broad-except
            return None
    return getattr(result, 'headers', None)


def _discard(result: Any) -> None:
    """Read and release the body of an answer that will be retried, so that its connection goes back to the pool."""
    raw = getattr(result, 'response', result)
    for name in ('drain_conn', 'release_conn'):
        fn = getattr(raw, name, None)
        if fn is not None:
            try:
                fn()
            except Exception:  # pylint: disable=broad-except
                pass


def _body_of(result: Any) -> Any:
    read = getattr(result, 'read', None)
    if read is not None and getattr(result, 'data', None) is None:
        try:
            read()
        except Exception:  # pylint: disable=broad-except
            pass
    data = getattr(result, 'data', None) or getattr(result, 'body', None)
    if isinstance(data, bytes):
        data = data.decode('utf-8', 'replace')
    return data


def retrying_request(request: Callable[..., Any], policy: RetryPolicy,
                     exhausted: type[RetriesExhausted] | None = None) -> Callable[..., Any]:
    """rest_client.request wrapped by ``policy``: the kubernetes client's REST layer, both generations (client 24 to
    36 raise ApiException for an error status, 37 and later return the response). ``exhausted``: the class raised when
    the policy gives up (default RetriesExhausted)."""
    give_up = exhausted or RetriesExhausted

    def wrapped(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        headers = kwargs.get('headers')
        if headers is None and len(args) >= 2 and isinstance(args[1], dict):  # client 24 to 36: query_params, headers
            headers = args[1]
        if headers is None and args and isinstance(args[0], dict):  # client 37: headers
            headers = args[0]
        content_type = _header(headers, 'Content-Type')
        start = policy.clock()
        attempt = 0
        answers: list[str] = []
        while True:
            status = error = result = None
            resp_headers = body = None
            try:
                result = request(method, url, *args, **kwargs)
                status = _response_status(result)
                if status is None or 200 <= status <= 399:
                    return result
                resp_headers = _response_headers(result)
            except Exception as e:  # pylint: disable=broad-except
                if is_api_error(e):  # client 24 to 36 raise ApiException for an error status
                    status, resp_headers, body, result = e.status, getattr(e, 'headers', None), getattr(e, 'body', None), e  # type: ignore[attr-defined]
                else:  # urllib3 and socket errors; status 0: a TLS error the client turned into ApiException
                    error = e
            retry_after = retry_after_seconds(_header(resp_headers, 'Retry-After')) if error is None else None
            retry, delay, why = policy.decide(method, url, content_type, status=status, retry_after=retry_after,
                                              error=error)
            answers.append(why + ('' if retry_after is None else ', Retry-After %gs' % retry_after))
            if not retry:
                if error is None:  # an answer the caller handles (404, 409, 422, an eviction's 429...): as it came
                    if isinstance(result, BaseException):
                        raise result
                    return result
                if not _connection_dropped(error):
                    raise error
                landed = not policy.idempotent(method, content_type, url)
                raise give_up(0, _give_up_message(policy, method, url, answers, start, landed),
                              may_have_landed=landed)
            attempt += 1
            wait = delay if delay is not None else policy.backoff(attempt)
            if attempt > policy.max_retries or policy.clock() - start + wait > policy.max_total:
                raise give_up(status or 0, _give_up_message(policy, method, url, answers, start, False,
                                                            limit=True, next_wait=wait),
                              body=body if body is not None else _body_of(result), headers=resp_headers)
            if result is not None and not isinstance(result, BaseException):
                _discard(result)
            policy.log.append({'method': method, 'path': _path(url), 'cause': why, 'retry_after': retry_after,
                               'delay': round(wait, 3), 'attempt': attempt})
            policy.sleep(wait)

    setattr(wrapped, 'gpuops_retry_policy', policy)
    return wrapped


def _give_up_message(policy: RetryPolicy, method: str, url: str, answers: list[str], start: float, landed: bool,
                     limit: bool = False, next_wait: float | None = None) -> str:
    elapsed = policy.clock() - start
    what = policy.describe(method, url)
    seen: list[list[Any]] = []
    for answer in answers:
        if seen and seen[-1][0] == answer:
            seen[-1][1] += 1
        else:
            seen.append([answer, 1])
    said = '; '.join(a if n == 1 else '%s (x%d)' % (a, n) for a, n in seen[-3:])
    if limit:
        return ('%s failed %d time(s) in %.1f s (%s); gave up: the retry limits are %d retries and %g s per request '
                '(next wait %.1f s; GPUOPS_K8S_RETRIES, GPUOPS_K8S_RETRY_TOTAL). The API server is overloaded or '
                'unreachable; run again when it answers'
                % (what, len(answers), elapsed, said, policy.max_retries, policy.max_total, next_wait or 0))
    if landed:
        return ('%s: %s; not sent again: the server may have run it (a %s is not idempotent). Run again: the next run '
                'reads what is there first' % (what, said, method))
    return '%s failed after %d attempt(s) in %.1f s: %s' % (what, len(answers), elapsed, said)


def no_urllib3_retries() -> Any:
    """A urllib3 Retry that retries nothing (the collection's policy is the only one); None without urllib3."""
    if _Urllib3Retry is None:
        return None
    return _Urllib3Retry(total=False, redirect=5, raise_on_status=False)


_K8S_EXHAUSTED: list[type[RetriesExhausted]] = []


def _exhausted_class(api: Any) -> type[RetriesExhausted]:
    """RetriesExhausted, and for a kubernetes ApiClient one that is also the client's ApiException: the dynamic client
    and kube/converger handle it as they handle every error of the client (kube/native raises the plain one)."""
    if getattr(api, 'gpuops_native', False) or 'kubernetes.client.rest' not in sys.modules:
        return RetriesExhausted
    if not _K8S_EXHAUSTED:
        client_error = getattr(sys.modules['kubernetes.client.rest'], 'ApiException', None)
        if not isinstance(client_error, type) or not issubclass(client_error, BaseException):
            return RetriesExhausted
        _K8S_EXHAUSTED.append(type('RetriesExhausted', (RetriesExhausted, client_error), {}))
    return _K8S_EXHAUSTED[0]


def install_retries(client: Any, policy: RetryPolicy | None = None) -> RetryPolicy | None:
    """Wrap the REST layer of a kubernetes ApiClient (or of the ApiClient inside a DynamicClient) with the retry policy
    and switch off urllib3's own retries under it; the policy (its ``log``) is returned. A second call does nothing."""
    api = getattr(client, 'client', client)  # DynamicClient -> ApiClient
    rest = getattr(api, 'rest_client', None)
    if rest is None:
        return None
    current = getattr(rest.request, 'gpuops_retry_policy', None)
    if current is not None:
        return current
    policy = policy or RetryPolicy()
    pool = getattr(rest, 'pool_manager', None)
    retries = no_urllib3_retries()
    if pool is not None and retries is not None and hasattr(pool, 'connection_pool_kw'):
        pool.connection_pool_kw['retries'] = retries
        pool.clear()
    rest.request = retrying_request(rest.request, policy, exhausted=_exhausted_class(api))
    return policy
