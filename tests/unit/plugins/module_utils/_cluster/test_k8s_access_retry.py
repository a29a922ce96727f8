# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube/access's retry policy (issue #31) on a fake REST layer: what is retried, after how long, how often, and what
the caller sees when it stops. Both generations of the kubernetes client's REST layer: 24 to 36 raise ApiException
for an error status, 37 and later return the response."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access as A

try:
    from urllib3.exceptions import NewConnectionError, ProtocolError
except ImportError:  # pragma: no cover
    NewConnectionError = ProtocolError = None


class Clock(object):
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s

    def __call__(self):
        return self.now


class Resp(object):
    """A client-37 RESTResponse: status, reason, headers, a body read on demand."""

    def __init__(self, status, headers=None, data=b'{}'):
        self.status, self.reason, self._headers, self.data = status, 'R%d' % status, headers or {}, None
        self._data = data
        self.released = False
        self.response = self

    def getheaders(self):
        return self._headers

    def read(self):
        self.data = self._data
        return self.data

    def drain_conn(self):
        self.released = True


def refused():
    return NewConnectionError(None, 'Failed to establish a new connection: [Errno 111] Connection refused')


def reset():
    return ProtocolError('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))


def old_client_error(status, headers=None):
    """What client 24 to 36 raise for an error status."""
    e = A.ApiException(status=status, reason='R%d' % status)
    e.headers, e.body = headers or {}, '{"kind":"Status"}'
    return e


class Script(object):
    """A REST layer's request(): answers (responses, or exceptions to raise) in order; records each call."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        self.calls.append((method, url))
        a = self.answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a


def wrap(script, **kw):
    clock = Clock()
    policy = A.RetryPolicy(sleep=clock.sleep, clock=clock, jitter=lambda: 1.0, **kw)
    return A.retrying_request(script, policy), policy, clock


URL = 'https://k:6443/api/v1/nodes/n1'
MERGE = {'Content-Type': 'application/merge-patch+json'}


def test_K8S_13_429_is_retried_after_retry_after_for_any_method():
    """APF's 429 (the request was not run): retried for a POST too, after exactly the server's Retry-After."""
    script = Script(Resp(429, {'Retry-After': '3'}), Resp(429, {'Retry-After': '1'}), Resp(201))
    request, policy, clock = wrap(script)
    assert request('POST', 'https://k:6443/api/v1/namespaces/ns/configmaps', headers={}).status == 201
    assert clock.slept == [3.0, 1.0] and len(script.calls) == 3
    assert [e['cause'] for e in policy.log] == ['HTTP 429', 'HTTP 429']


def test_K8S_15_503_and_resets_are_retried_for_idempotent_requests_with_backoff():
    script = Script(Resp(503), reset(), Resp(200))
    request, _policy, clock = wrap(script, base_delay=0.5)
    assert request('PATCH', URL, headers=MERGE).status == 200
    assert clock.slept == [0.5, 1.0]  # exponential (jitter pinned to its top)


def test_503_of_a_post_is_not_resent():
    """A POST answered 503 may have been run: the answer goes to the caller as it came."""
    r = Resp(503)
    request, policy, _clock = wrap(Script(r))
    assert request('POST', 'https://k:6443/api/v1/namespaces/ns/configmaps', headers={}) is r
    assert policy.log == []


def test_K8S_15_reset_after_a_post_was_sent_is_not_resent_and_says_it_may_have_landed():
    request, _policy, _clock = wrap(Script(reset()))
    with pytest.raises(A.RetriesExhausted) as err:
        request('POST', 'https://k:6443/api/v1/namespaces/ns/configmaps', headers={})
    assert err.value.status == 0 and err.value.may_have_landed
    assert 'may have run it' in err.value.reason and 'POST /api/v1/namespaces/ns/configmaps' in err.value.reason


def test_json_patch_is_not_idempotent_but_merge_and_apply_patches_are():
    assert not A.RetryPolicy.idempotent('PATCH', 'application/json-patch+json', URL)
    for ctype in ('application/merge-patch+json', 'application/strategic-merge-patch+json',
                  'application/apply-patch+yaml'):
        assert A.RetryPolicy.idempotent('PATCH', ctype, URL)
    for method in ('GET', 'HEAD', 'PUT', 'DELETE'):
        assert A.RetryPolicy.idempotent(method, None, URL)


def test_connection_refused_is_retried_for_a_post_nothing_was_sent():
    script = Script(refused(), refused(), Resp(201))
    request, _policy, _clock = wrap(script)
    assert request('POST', 'https://k:6443/api/v1/namespaces/ns/configmaps', headers={}).status == 201


def test_K8S_14_an_evictions_429_is_a_disruption_budget_and_goes_to_the_caller():
    """policy/v1 Eviction answers 429 (Retry-After 10) when a PodDisruptionBudget refuses: gpu_node_drain waits on it
    with its own poll, so the policy passes it through; a reset of an eviction is retried (evicting twice is
    harmless: the pod is on its way out or gone, 404)."""
    url = 'https://k:6443/api/v1/namespaces/ns/pods/p/eviction'
    r = Resp(429, {'Retry-After': '10'})
    request, _policy, clock = wrap(Script(r))
    assert request('POST', url, headers={}) is r and clock.slept == []
    request, _policy, _clock = wrap(Script(reset(), Resp(201)))
    assert request('POST', url, headers={}).status == 201


def test_other_error_statuses_go_to_the_caller_unchanged():
    for status in (400, 403, 404, 409, 422, 500):
        r = Resp(status)
        request, policy, _clock = wrap(Script(r))
        assert request('GET', URL, headers={}) is r and policy.log == []


def test_retries_are_bounded_by_count():
    script = Script(*[Resp(503) for dummy in range(5)])
    request, policy, _clock = wrap(script, max_retries=3, max_total=1000)
    with pytest.raises(A.RetriesExhausted) as err:
        request('GET', URL, headers={})
    assert len(script.calls) == 4 and len(policy.log) == 3
    assert err.value.status == 503 and 'gave up' in err.value.reason and '3 retries' in err.value.reason
    assert 'GET /api/v1/nodes/n1' in err.value.reason


def test_K8S_13_retries_are_bounded_by_time_and_a_retry_after_beyond_it_stops_at_once():
    script = Script(Resp(429, {'Retry-After': '60'}))
    request, _policy, clock = wrap(script, max_retries=10, max_total=30)
    with pytest.raises(A.RetriesExhausted) as err:
        request('GET', URL, headers={})
    assert clock.slept == [] and err.value.status == 429
    assert 'next wait 60.0 s' in err.value.reason and '30 s per request' in err.value.reason


def test_the_backoff_is_capped():
    policy = A.RetryPolicy(base_delay=0.5, max_delay=8, jitter=lambda: 1.0, max_retries=1, max_total=1)
    assert [policy.backoff(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 8, 8]


def test_client_24_to_36_error_statuses_raise_and_are_retried_the_same_way():
    script = Script(old_client_error(429, {'Retry-After': '2'}), Resp(200))
    request, _policy, clock = wrap(script)
    assert request('GET', URL, None, {}).status == 200  # positional (query_params, headers) as client 24 to 36 call it
    assert clock.slept == [2.0]
    script = Script(old_client_error(404))
    request, _policy, _clock = wrap(script)
    with pytest.raises(A.ApiException) as err:
        request('GET', URL, headers={})
    assert err.value.status == 404 and not isinstance(err.value, A.RetriesExhausted)


def test_released_before_retry():
    first = Resp(503)
    request, _policy, _clock = wrap(Script(first, Resp(200)))
    request('GET', URL, headers={})
    assert first.released


def test_environment_sets_the_limits(monkeypatch):
    monkeypatch.setenv('GPUOPS_K8S_RETRIES', '2')
    monkeypatch.setenv('GPUOPS_K8S_RETRY_TOTAL', '7.5')
    policy = A.RetryPolicy()
    assert (policy.max_retries, policy.max_total) == (2, 7.5)
    monkeypatch.setenv('GPUOPS_K8S_RETRIES', 'many')
    with pytest.raises(A.KubeError) as err:
        A.RetryPolicy()
    assert 'GPUOPS_K8S_RETRIES' in str(err.value) and 'many' in str(err.value)


def test_K8S_15_defaults_follow_client_go():
    policy = A.RetryPolicy()
    assert (policy.max_retries, policy.max_total) == (10, 120.0)


def test_retry_after_parsing():
    assert A.retry_after_seconds('5') == 5.0
    assert A.retry_after_seconds(None) is None
    assert A.retry_after_seconds('Wed, 21 Oct 2015 07:28:00 GMT') is None


class FakeRest(object):
    def __init__(self):
        import urllib3
        self.pool_manager = urllib3.PoolManager()
        self.request = Script(Resp(200))


class FakeApiClient(object):
    def __init__(self):
        self.rest_client = FakeRest()


def test_K8S_16_install_wraps_once_and_switches_urllib3_retries_off():
    api = FakeApiClient()
    policy = A.install_retries(api)
    assert policy is not None and A.install_retries(api) is policy
    retries = api.rest_client.pool_manager.connection_pool_kw['retries']
    assert retries.total is False  # urllib3 retries nothing itself: the policy is the only one
    dyn = type('Dyn', (), {})()
    dyn.client = api
    assert A.install_retries(dyn) is policy


def test_api_client_and_get_client_install_the_policy(monkeypatch, tmp_path):
    """Both ways to a client (plain ApiClient for kube/rest, DynamicClient for k8s_converge) carry the policy, the
    dynamic client's API discovery included (it runs on the wrapped ApiClient)."""
    class Core(object):
        @staticmethod
        def _create_auth_spec(_module, **kw):
            return kw

        @staticmethod
        def _create_configuration(auth):
            return auth

        @staticmethod
        def _create_headers(_module, **kw):
            return {}

        @staticmethod
        def _set_header(client, header, value):
            pass

    made = []

    class Api(FakeApiClient):
        def __init__(self, configuration):
            FakeApiClient.__init__(self)
            made.append(self)

    class Dyn(object):
        def __init__(self, client):
            self.client = client
            assert getattr(client.rest_client.request, 'gpuops_retry_policy', None) is not None  # before discovery

    api = A.api_client({}, core=Core, api_client_class=Api)
    assert getattr(api.rest_client.request, 'gpuops_retry_policy', None) is not None
    dyn = A.get_client({}, core=Core, api_client_class=Api, dynamic_client_class=Dyn)
    assert dyn.client is made[-1]


def test_discovery_that_gives_up_is_a_kube_error_naming_the_server():
    """k8s_converge's DynamicClient discovers the API when it is made: a failure there is one clear KubeError (the
    modules report KubeError), not a traceback."""
    class Core(object):
        _create_auth_spec = staticmethod(lambda _m, **kw: kw)
        _create_configuration = staticmethod(lambda auth: type('Conf', (), {'host': 'https://k:6443'})())
        _create_headers = staticmethod(lambda _m, **kw: {})
        _set_header = staticmethod(lambda c, h, v: None)

    class Api(FakeApiClient):
        def __init__(self, configuration):
            FakeApiClient.__init__(self)
            self.configuration = configuration

    class Dyn(object):
        def __init__(self, client):
            raise A.RetriesExhausted(0, 'GET /version failed 3 time(s); gave up')

    with pytest.raises(A.KubeError) as err:
        A.get_client({}, core=Core, api_client_class=Api, dynamic_client_class=Dyn)
    assert str(err.value) == 'API discovery at https://k:6443 failed: GET /version failed 3 time(s); gave up'
