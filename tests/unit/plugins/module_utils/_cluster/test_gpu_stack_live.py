# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a stack reads before it renders (one k8s_objects_info run) and how the renderer takes the answers."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import live as L
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import STRATEGIES

NODES = {'key': 'nodes', 'kind': 'Node'}
RC = {'key': 'runtime_classes', 'api_version': 'node.k8s.io/v1', 'kind': 'RuntimeClass'}


@pytest.mark.parametrize('strategy', ['exclusive', 'time-slicing', 'mps', 'mig'])
def test_nvidia_device_plugin_strategies_read_nodes_and_runtime_classes(strategy):
    assert L.queries(strategy) == {'queries': [NODES, RC], 'version': False}
    assert L.queries(strategy, state='absent') == {'queries': [NODES, RC], 'version': False}


def test_every_strategy_reads_the_nodes_and_an_unknown_one_only_them():
    for s in STRATEGIES:
        assert L.queries(s)['queries'][0] == NODES
    assert L.queries('vgpu-magic') == {'queries': [NODES], 'version': False}


def test_volcano_reads_its_scheduler_configmap_unless_given():
    q = L.queries('volcano', settings={'volcano': {'namespace': 'vc'}})['queries']
    assert q[-1] == {'key': 'volcano_conf', 'kind': 'ConfigMap', 'name': 'volcano-scheduler-configmap', 'namespace': 'vc'}
    assert L.queries('volcano', settings={'volcano': {}})['queries'][-1]['namespace'] == 'volcano-system'
    assert L.queries('volcano', settings={'volcano': {'existing_conf': 'actions: x'}})['queries'] == [NODES]
    assert L.queries('volcano', state='absent')['queries'] == [NODES]


def test_gpushare_reads_kube_proxy_only_for_node_port_registration():
    kp = {'key': 'kube_proxy', 'kind': 'ConfigMap', 'name': 'kube-proxy', 'namespace': 'kube-system'}
    assert L.queries('gpushare', settings={'gpushare': {}})['queries'] == [NODES, kp]
    assert L.queries('gpushare', settings={'gpushare': {'registration': 'node-port'}})['queries'] == [NODES, kp]
    assert L.queries('gpushare', settings={'gpushare': {'registration': 'host-network'}})['queries'] == [NODES]
    assert L.queries('gpushare', settings={'gpushare': {'kube_proxy_mode': 'iptables'}})['queries'] == [NODES]
    assert L.queries('gpushare', state='absent')['queries'] == [NODES]


def test_hami_reads_the_version_unless_given_and_its_webhook_secret():
    assert L.queries('hami', settings={'hami': {}}) == {'queries': [NODES], 'version': True}
    assert L.queries('hami', state='absent') == {'queries': [NODES], 'version': True}
    assert L.queries('hami', settings={'hami': {'kube_version': 'v1.33.1'}})['version'] is False
    q = L.queries('hami', settings={'hami': {'webhook_tls_secret': 'tls'}}, namespace='gpu')['queries']
    assert q == [NODES, {'key': 'hami_webhook_secret', 'kind': 'Secret', 'name': 'tls', 'namespace': 'gpu'}]
    assert L.queries('hami', state='absent', settings={'hami': {'webhook_tls_secret': 'tls'}})['queries'] == [NODES]


def test_merge_fills_the_renderer_inputs_and_keeps_the_rest():
    params = {'strategy': 'volcano', 'namespace': 'kube-system', 'live_nodes': [{'old': 1}],
              'settings': {'volcano': {'version': '1.15'}, 'nvidia': {'x': 1}}}
    live = {'objects': {'nodes': [{'metadata': {'name': 'gpu-1'}}], 'runtime_classes': [{'metadata': {'name': 'nv'}}],
                        'volcano_conf': [{'data': {'volcano-scheduler.conf': 'actions: a', 'other': 'b'}}]},
            'changed': False}
    out = L.merge(params, live)
    assert out['live_nodes'] == [{'metadata': {'name': 'gpu-1'}}]
    assert out['live_runtime_classes'] == [{'metadata': {'name': 'nv'}}]
    assert out['settings'] == {'volcano': {'version': '1.15', 'existing_conf': 'actions: a'}, 'nvidia': {'x': 1}}
    assert params['live_nodes'] == [{'old': 1}] and 'existing_conf' not in params['settings']['volcano']


def test_merge_without_the_answers_changes_nothing():
    params = {'strategy': 'volcano', 'settings': {'volcano': {}}, 'live_nodes': [{'a': 1}]}
    assert L.merge(params, {'objects': {'volcano_conf': []}}) == params
    # a ConfigMap without the scheduler's key is not a configuration to merge into
    assert L.merge(params, {'objects': {'volcano_conf': [{'data': {'x': 'y'}}]}}) == params


def test_merge_gpushare_kube_proxy_and_hami_version():
    out = L.merge({'strategy': 'gpushare', 'settings': {'gpushare': {'registration': 'node-port'}}},
                  {'objects': {'kube_proxy': [{'data': {'config.conf': 'mode: ipvs'}}]}})
    assert out['settings']['gpushare'] == {'registration': 'node-port', 'kube_proxy_config': 'mode: ipvs'}
    out = L.merge({'strategy': 'gpushare', 'settings': {}}, {'objects': {'kube_proxy': [{'metadata': {}}]}})
    assert out['settings']['gpushare'] == {'kube_proxy_config': ''}
    out = L.merge({'strategy': 'hami', 'settings': {'hami': {'device_split_count': 4}}},
                  {'objects': {}, 'version': {'gitVersion': 'v1.34.2'}})
    assert out['settings']['hami'] == {'device_split_count': 4, 'kube_version': 'v1.34.2'}
    # a version given by the user wins
    out = L.merge({'strategy': 'hami', 'settings': {'hami': {'kube_version': 'v1.30.1'}}},
                  {'objects': {}, 'version': {'gitVersion': 'v1.34.2'}})
    assert out['settings']['hami'] == {'kube_version': 'v1.30.1'}


def test_merge_refuses_a_missing_hami_webhook_secret():
    with pytest.raises(StackError) as e:
        L.merge({'strategy': 'hami', 'namespace': 'gpu', 'settings': {'hami': {'webhook_tls_secret': 'tls'}}},
                {'objects': {'hami_webhook_secret': []}})
    assert str(e.value) == ('gpu_sharing_stack_hami.webhook_tls_secret names Secret gpu/tls, which does not exist; '
                            'create a kubernetes.io/tls Secret (e.g. with cert-manager) first.')
    out = L.merge({'strategy': 'hami', 'namespace': 'gpu', 'settings': {'hami': {'webhook_tls_secret': 'tls'}}},
                  {'objects': {'hami_webhook_secret': [{'metadata': {'name': 'tls'}}]}})
    assert out['settings']['hami'] == {'webhook_tls_secret': 'tls'}


T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360, 'compute_capability': '7.5'}],
      'sharing': {'mps': {'allowed': True, 'max_clients': 48}, 'mig': {'allowed': False, 'gpus': []}}}


def test_render_with_live_equals_render_with_the_separate_inputs():
    """The renderer's result is the same whether the answers come in live or in the older separate options."""
    node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'gpu-1', 'labels': {}},
            'status': {'allocatable': {'cpu': '8'}}}
    site_rc = {'apiVersion': 'node.k8s.io/v1', 'kind': 'RuntimeClass', 'metadata': {'name': 'nvidia'}, 'handler': 'nvidia'}
    base = {'strategy': 'time-slicing', 'pool': 'p', 'nodes': ['gpu-1'], 'facts': {'gpu-1': T4},
            'settings': {'time_slicing': {'replicas': 4}}}
    separate = render.render(dict(base, live_nodes=[node], live_runtime_classes=[site_rc]))
    merged = render.render(dict(base, live={'objects': {'nodes': [node], 'runtime_classes': [site_rc]}}))
    assert merged == separate
    # and the site's RuntimeClass really changed the result (it is not rendered again)
    assert merged != render.render(dict(base, live={'objects': {'nodes': [node], 'runtime_classes': []}}))


def test_render_hami_takes_the_cluster_version_from_live():
    base = {'strategy': 'hami', 'pool': 'p', 'nodes': ['gpu-1'], 'facts': {'gpu-1': T4}, 'settings': {'hami': {}}}
    with pytest.raises(StackError):
        render.render(base)  # no version: the kube-scheduler image cannot be chosen
    out = render.render(dict(base, live={'objects': {'nodes': []}, 'version': {'gitVersion': 'v1.34.2'}}))
    assert any('v1.34.2' in img for img in out['images']), out['images']
