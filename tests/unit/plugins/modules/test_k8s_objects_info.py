# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_objects_info's main(): bad queries are refused before a client exists; reads and failures come back whole."""
import pytest

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import capture_exit, main_runner
from ansible_collections.gpuops.k8s_gpu.plugins.modules import k8s_objects_info
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access, read as kube_read


@pytest.fixture
def run(monkeypatch):
    calls = []
    capture_exit(monkeypatch)
    monkeypatch.setattr(k8s_objects_info, 'k8s_client', object())
    monkeypatch.setattr(access, 'api_client', lambda params: calls.append(('client', params.get('host'))) or 'c')
    monkeypatch.setattr(kube_read, 'typed_apis', lambda module, client: {'client': client})

    def read(apis, queries, version=False):
        calls.append(('read', queries, version))
        if any(q.get('name') == 'forbidden' for q in queries):
            raise kube_read.ReadError('reading ConfigMap kube-system/forbidden failed: Forbidden')
        return {'objects': dict((q['key'], []) for q in queries), 'api_found': dict((q['key'], True) for q in queries)}

    monkeypatch.setattr(kube_read, 'read', read)

    return main_runner(k8s_objects_info.main, calls)


def test_reads_with_defaults_filled_and_none_options_dropped(run):
    res = run({'queries': [{'key': 'nodes', 'kind': 'Node'}], 'version': True, 'host': 'https://api:6443'})
    assert res['failed'] is False and res['changed'] is False
    assert res['objects'] == {'nodes': []} and res['api_found'] == {'nodes': True}
    assert run.calls == [('client', 'https://api:6443'), ('read', [{'key': 'nodes', 'kind': 'Node', 'api_version': 'v1'}], True)]


@pytest.mark.parametrize('query, message', [
    ({'key': 'p', 'kind': 'Pod'}, 'kind Pod v1 is not one this module reads'),
    ({'key': 'c', 'kind': 'ConfigMap', 'name': 'x'}, 'ConfigMap is namespaced; set namespace'),
])
def test_bad_queries_fail_before_any_client(run, query, message):
    res = run({'queries': [query]})
    assert res['failed'] and res['msg'].startswith('k8s_objects_info refused, nothing was read: ') and message in res['msg']
    assert run.calls == []


def test_a_failed_read_names_the_object(run):
    res = run({'queries': [{'key': 'x', 'kind': 'ConfigMap', 'name': 'forbidden', 'namespace': 'kube-system'}]})
    assert res['failed'] and res['msg'] == 'reading ConfigMap kube-system/forbidden failed: Forbidden'


def test_missing_library(run, monkeypatch):
    monkeypatch.setattr(k8s_objects_info, 'k8s_client', None)
    res = run({'queries': [{'key': 'nodes', 'kind': 'Node'}]})
    assert res['failed'] and 'kubernetes' in res['msg'] and run.calls == []


def test_api_key_is_no_log():
    spec = k8s_objects_info.argument_spec()
    assert spec['api_key']['no_log'] is True and spec['password']['no_log'] is True
    assert spec['validate_certs']['default'] is True


def test_fields_cut_the_objects_returned(run, monkeypatch):
    node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n1', 'labels': {'a': '1'}, 'uid': 'u'},
            'status': {'allocatable': {'cpu': '4'}, 'images': []}}
    monkeypatch.setattr(kube_read, 'read', lambda apis, queries, version=False: {
        'objects': {'nodes': [node]}, 'api_found': {'nodes': True}})
    res = run({'queries': [{'key': 'nodes', 'kind': 'Node'}], 'fields': {'nodes': ['metadata.labels', 'status.allocatable']}})
    assert res['failed'] is False
    assert res['objects'] == {'nodes': [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n1', 'labels': {'a': '1'}},
                                         'status': {'allocatable': {'cpu': '4'}}}]}


def test_fields_of_an_unknown_key_are_refused_before_any_client(run):
    res = run({'queries': [{'key': 'nodes', 'kind': 'Node'}], 'fields': {'pods': ['metadata.labels']}})
    assert res['failed'] and res['msg'] == ('k8s_objects_info refused, nothing was read: '
                                            'fields: pods is not the key of a query; keys: nodes')
    assert run.calls == []
