# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_share_report module's main(): argument checks, report file (check, diff, mode, backup), failures."""
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import capture_exit, main_runner
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_share_report
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import kube, usage


NODES = [{'metadata': {'name': 'gs'}, 'status': {'capacity': {'aliyun.com/gpu-mem': '30', 'aliyun.com/gpu-count': '2'},
                                                 'allocatable': {'aliyun.com/gpu-mem': '30'}}}]
PODS = [{'metadata': {'name': 'a', 'namespace': 'ml', 'annotations': {'ALIYUN_COM_GPU_MEM_IDX': '0'}},
         'spec': {'nodeName': 'gs', 'containers': [{'name': 'c', 'resources': {'limits': {'aliyun.com/gpu-mem': '6'}}}]},
         'status': {'phase': 'Running'}}]


@pytest.fixture
def run(monkeypatch):
    calls = []

    capture_exit(monkeypatch)
    monkeypatch.setattr(kube, 'KUBERNETES_IMPORT_ERROR', None)
    monkeypatch.setattr(kube, 'build_client', lambda params: calls.append(('client', params.get('host'))) or 'api')

    def read_cluster(api, node_selector=None, nodes=None, namespace=None):
        calls.append(('read', node_selector, nodes, namespace))
        return list(NODES), list(PODS)

    monkeypatch.setattr(kube, 'read_cluster', read_cluster)
    # a cluster without resource.k8s.io/v1 (the DRA part: test_dra_claims_in_the_result)
    monkeypatch.setattr(kube, 'read_dra', lambda api, namespace=None: {'served': False, 'claims': [], 'slices': [],
                                                                       'error': None})

    return main_runner(gpu_share_report.main, calls)


def test_report_without_file(run):
    res = run({'host': 'http://x'})
    assert res['changed'] is False and not res['failed']
    assert res['cluster']['gpushare']['memory_allocated'] == 6
    assert res['table'].splitlines()[1].split() == ['gs', '-', '6/15', '0/15', '6/30']
    assert run.calls == [('client', 'http://x'), ('read', None, None, None)]


def test_report_file_lifecycle(run, tmp_path):
    path = str(tmp_path / 'r.md')
    res = run({'report_path': path, '_ansible_check_mode': True})
    assert res['changed'] is True and not os.path.exists(path)
    res = run({'report_path': path, '_ansible_diff': True})
    assert res['changed'] is True and res['diff']['after'] == open(path).read()
    assert oct(os.stat(path).st_mode & 0o777) == '0o644'
    assert run({'report_path': path})['changed'] is False
    os.chmod(path, 0o600)
    res = run({'report_path': path, '_ansible_check_mode': True})
    assert res['changed'] is True and oct(os.stat(path).st_mode & 0o777) == '0o600'
    assert run({'report_path': path})['changed'] is True and oct(os.stat(path).st_mode & 0o777) == '0o644'
    res = run({'report_path': path, 'report_format': 'html', 'backup': True, 'report_mode': '0640'})
    assert res['changed'] is True and open(res['backup_file']).read().startswith('# GPU share report')
    assert open(path).read().startswith('<!DOCTYPE html>') and oct(os.stat(path).st_mode & 0o777) == '0o640'


@pytest.mark.parametrize('args, message', [
    ({'report_mode': 'rw'}, "report_mode must be an octal file mode such as '0644', got 'rw'"),
    ({'report_mode': '77777'}, 'report_mode must be an octal file mode'),
    ({'report_path': '/nonexistent-dir/r.md'}, 'report_path: directory /nonexistent-dir does not exist'),
    ({'kubeconfig': '/nonexistent-kubeconfig'}, 'kubeconfig: file /nonexistent-kubeconfig does not exist'),
    ({'kubeconfig': 5}, 'kubeconfig must be a path (string) or a dictionary, got int'),
    ({'report_format': 'pdf'}, 'report_format'),
])
def test_bad_input_fails_before_the_cluster(run, args, message):
    res = run(args)
    assert res['failed'] and message in res['msg']
    assert run.calls == []


def test_report_path_is_a_directory(run, tmp_path):
    res = run({'report_path': str(tmp_path)})
    assert res['failed'] and 'is a directory' in res['msg'] and run.calls == []


def test_missing_library(run, monkeypatch):
    monkeypatch.setattr(kube, 'KUBERNETES_IMPORT_ERROR', 'Traceback')
    res = run({})
    assert res['failed'] and 'kubernetes' in res['msg'] and run.calls == []


def test_unknown_node_and_kube_error(run, monkeypatch):
    res = run({'nodes': ['gs', 'nope'], 'node_selector': 'a=b'})
    assert res['failed'] and res['msg'] == 'nodes: nope not found in the cluster (with node_selector a=b)'

    def boom(api, **kw):
        raise kube.KubeError('listing nodes failed: 403 Forbidden')

    monkeypatch.setattr(kube, 'read_cluster', boom)
    res = run({})
    assert res['failed'] and res['msg'] == 'listing nodes failed: 403 Forbidden'


def test_env_fallback(run, monkeypatch):
    monkeypatch.setenv('K8S_AUTH_HOST', 'http://from-env')
    run({})
    assert run.calls[0] == ('client', 'http://from-env')


def test_health_column_from_the_doctor_verdicts(run, monkeypatch):
    """Issue #30: the report's health column, each node's cell from its doctor verdict (gpuops_doctor_verdict);
    issue #27: the RuntimeClass note where the doctor saw nvidia is not the default runtime."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor.gpu_doctor_gate import verdict
    ex = {'metadata': {'name': 'ex'}, 'status': {'allocatable': {'nvidia.com/gpu': '2'}}}
    other = {'metadata': {'name': 'zz'}, 'status': {'allocatable': {'nvidia.com/gpu': '1'}}}
    monkeypatch.setattr(kube, 'read_cluster', lambda api, **kw: (NODES + [ex, other], list(PODS)))
    gated = verdict({'findings': [{'id': 'gpu_lost', 'severity': 'critical'},
                                  {'id': 'runtime_class_nvidia_required', 'severity': 'info'}]}, 'enforce')
    ok = verdict({'findings': []}, 'enforce')
    res = run({'host': 'http://x', 'node_health': {'gs': ok, 'ex': gated}})
    by_name = dict((n['name'], n) for n in res['nodes'])
    assert [by_name[n]['health'] for n in ('gs', 'ex', 'zz')] == ['ok', 'CRITICAL (gated)', '-']
    assert by_name['ex']['health_findings'] == ['gpu_lost']
    lines = res['table'].splitlines()
    assert lines[0].split()[-1] == 'HEALTH' and lines[1].split()[-1] == 'ok'      # the gpushare table
    rows = [x.split() for x in lines if x.startswith(('ex ', 'zz '))]
    assert rows == [['ex', '-', 'exclusive', 'nvidia.com/gpu', '0/2', '0%', 'CRITICAL', '(gated)'],
                    ['zz', '-', 'exclusive', 'nvidia.com/gpu', '0/1', '0%', '-']], rows
    assert any('runtimeClassName: nvidia' in x and x.startswith('node ex:') for x in res['notes'])
    assert any('runtimeClassName: nvidia' in x for x in by_name['ex']['notes'])
    assert 'Health (gpu_doctor): CRITICAL (gated) - gpu_lost' in gpu_share_report.render.render(
        {'nodes': res['nodes'], 'pods': res['pods'], 'unscheduled': [], 'cluster': res['cluster'],
         'notes': res['notes']}, 'markdown')
    # without node_health the report is as before: no health column
    res = run({'host': 'http://x'})
    assert 'HEALTH' not in res['table'] and all('health' not in n for n in res['nodes'])


def test_dra_claims_in_the_result(run, monkeypatch):
    """Where resource.k8s.io/v1 is served: read once with the module's namespace, the claims in RV(dra), the DRA
    device-plugin conflict in RV(conflicts) (model and text: test_gpu_share_report_dra.py)."""
    seen = []
    dp = {'metadata': {'name': 'gpu-1'}, 'status': {'allocatable': {'nvidia.com/gpu': '1'}}}
    monkeypatch.setattr(kube, 'read_cluster', lambda api, **kw: (NODES + [dp], list(PODS)))
    slices = [{'spec': {'driver': 'gpu.nvidia.com', 'nodeName': 'gpu-1', 'pool': {'name': 'gpu-1'},
                        'devices': [{'name': 'gpu-0', 'attributes': {'uuid': {'string': 'GPU-1'}}}]}}]
    claims = [{'metadata': {'name': 'c', 'namespace': 'ml'}, 'status': {'allocation': {'devices': {'results': [
        {'request': 'gpu', 'driver': 'gpu.nvidia.com', 'pool': 'gpu-1', 'device': 'gpu-0'}]}}}}]
    monkeypatch.setattr(kube, 'read_dra', lambda api, namespace=None: seen.append(namespace) or {
        'served': True, 'claims': claims, 'slices': slices, 'error': None})
    res = run({'host': 'http://x', 'namespace': 'ml'})
    assert seen == ['ml'] and res['dra']['served'] is True
    assert [(c['name'], c['devices'][0]['uuid']) for c in res['dra']['claims']] == [('c', 'GPU-1')]
    assert res['conflicts'] == ['gpu-1 - DRA driver gpu.nvidia.com publishes 1 device(s) and the device plugin '
                                'advertises 1 nvidia.com/gpu on the same node: both hand out the same GPUs']
    assert 'ml/c' in res['table']


@pytest.mark.parametrize('label', ['bad key', 'a/b/c', '-x', 'UPPER.example/x', ''])
def test_strategy_label_must_be_a_label_key(run, label):
    res = run({'strategy_label': label})
    assert res['failed'] and res['msg'].startswith('strategy_label: %r is not a valid Kubernetes label key' % label)
    assert run.calls == []


def test_strategy_label_classifies_the_nodes(run, monkeypatch):
    t4 = [{'metadata': {'name': 't4', 'labels': {'example.com/strategy': 'time-slicing'}},
           'status': {'capacity': {'nvidia.com/gpu': '4'}, 'allocatable': {'nvidia.com/gpu': '4'}}}]
    monkeypatch.setattr(kube, 'read_cluster', lambda api, node_selector=None, nodes=None, namespace=None: (t4, []))
    assert run({})['nodes'][0]['strategies'] == ['exclusive']
    res = run({'strategy_label': 'example.com/strategy'})
    assert res['nodes'][0]['strategies'] == ['time-slicing'] and 'time-slicing' in res['table'].splitlines()[1].split()


class _Resp:
    def __init__(self, body):
        self.body = body

    def read(self):
        return self.body


def test_usage_from_prometheus_joined_with_the_pods(run, monkeypatch):
    import json
    seen = []
    series = [{'metric': {'Hostname': 'gs', 'gpu': '0', 'UUID': 'GPU-0', 'pod': 'a', 'namespace': 'ml'},
               'value': [1.0, '0.0']}]

    def open_url(url, headers=None, validate_certs=None, ca_path=None, timeout=None, http_agent=None):
        seen.append((url, headers, validate_certs, ca_path, http_agent))
        return _Resp(json.dumps({'status': 'success', 'data': {'resultType': 'vector', 'result': series}}).encode())

    monkeypatch.setattr(gpu_share_report, 'open_url', open_url)
    res = run({'prometheus_url': 'https://prom:9090', 'prometheus_token': 's3cret', 'prometheus_ca_cert': '/ca.pem',
               'usage_window': '2h', 'usage_time': '1796040000'})
    assert not res['failed'], res
    assert len(seen) == len(usage.queries('2h')) == 10 and all(s[0].startswith('https://prom:9090/api/v1/query?query=') for s in seen)
    assert all('2h' in s[0].replace('%5B', '[') and 'time=1796040000' in s[0] for s in seen)
    assert seen[0][1]['Authorization'] == 'Bearer s3cret' and seen[0][2:] == (True, '/ca.pem', 'gpuops.k8s_gpu')
    assert res['usage']['idle'] == ['ml/a'] and res['usage']['window'] == '2h'
    assert 'Idle allocations' in res['table']


def test_usage_prometheus_error_fails_with_its_words(run, monkeypatch):
    from ansible.module_utils.six.moves.urllib.error import HTTPError
    import io

    def open_url(url, **kw):
        raise HTTPError(url, 400, 'Bad Request', {}, io.BytesIO(b'{"status":"error","errorType":"bad_data",'
                                                                b'"error":"invalid parameter \\"query\\""}'))

    monkeypatch.setattr(gpu_share_report, 'open_url', open_url)
    res = run({'prometheus_url': 'http://prom:9090'})
    assert res['failed'] and 'prometheus_url: Prometheus refused the query memory_used: invalid parameter' in res['msg']


def test_usage_bad_window_fails_before_the_cluster(run):
    res = run({'prometheus_url': 'http://prom:9090', 'usage_window': 'an hour'})
    assert res['failed'] and "usage_window must be a Prometheus duration" in res['msg'] and "'an hour'" in res['msg']
    assert run.calls == []
