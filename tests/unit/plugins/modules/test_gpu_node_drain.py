# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_node_drain module's main(): option checks, the options reaching the drain, failures with pods_left."""
import re

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import Exit, capture_exit, module_args
from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.module_utils._cluster.test_gpu_sharing_drain import (
    FakeCore, node, pod)
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_node_drain
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy

MARK = {'annotation': 'gpuops.io/driver-upgrade', 'value': '580.105.08'}


class FakeClientModule(object):
    def __init__(self, core):
        self.core = core

    def CoreV1Api(self, api):
        return self.core


@pytest.fixture
def run(monkeypatch):
    capture_exit(monkeypatch)
    monkeypatch.setattr(access, 'KUBERNETES_IMPORT_ERROR', None)
    monkeypatch.setattr(access, 'api_client', lambda params: 'api')

    def _run(args, core):
        monkeypatch.setattr(gpu_node_drain, 'k8s_client', FakeClientModule(core))
        with module_args(dict(args, host='https://k8s.invalid')):
            with pytest.raises(Exit) as e:
                gpu_node_drain.main()
        return e.value.args[0]
    return _run


@pytest.mark.parametrize('args, msg', [
    ({'grace_period': -1}, 'grace_period must be 0 or more (got -1)'),
    ({'wait_for_jobs': {'pod_selector': 'a=b', 'timeout': -5}}, 'wait_for_jobs.timeout must be 0 or more (got -5)'),
    ({'wait_for_jobs': {'pod_selector': 'a=b', 'on_timeout': 'wait'}}, 'on_timeout'),
    ({'mark': {'annotation': 'gpuops.io/driver-upgrade'}}, 'value'),
])
def test_bad_options_fail_before_any_call(run, args, msg):
    core = FakeCore(node(), [pod('train', owner='ReplicaSet')])
    res = run(dict({'name': 'n1'}, **args), core)
    assert res['failed'] and msg in res['msg'] and core.calls == []


def test_KD_07_module_options_reach_the_drain(run):
    core = FakeCore(node(), [pod('train', owner='ReplicaSet', labels={'app': 'train'}),
                             pod('web', owner='ReplicaSet', labels={'app': 'web'})])
    res = run({'name': 'n1', 'pods': 'all', 'pod_selector': 'app=train', 'pause_gpu_clients': False,
               'disable_eviction': True, 'grace_period': 5, 'mark': MARK, 'timeout': 0}, core)
    assert not res['failed'] and res['changed'] is True
    assert res['evicted'] == ['default/train'] and res['pods_left'] == []
    assert res['actions'] == ['mark node n1: gpuops.io/driver-upgrade=580.105.08', 'cordon node n1',
                              'delete pod default/train']
    assert ('delete', 'default/train', {'gracePeriodSeconds': 5}) in core.calls
    assert res['restore'] == {'uncordon': True, 'labels': {}, 'mark': 'gpuops.io/driver-upgrade'}


def test_KD_01_module_fails_with_the_pods_left_and_what_to_restore(run):
    core = FakeCore(node(), [pod('bare')])
    res = run({'name': 'n1', 'pods': 'all', 'force': False, 'mark': MARK}, core)
    assert res['failed'] and 'Pods that declare no controller (set force to evict them): default/bare' in res['msg']
    assert res['pods_left'] == ['default/bare'] and res['changed'] is True
    assert res['restore']['mark'] == 'gpuops.io/driver-upgrade'


def test_UPG_08_module_restores_a_resumed_node_without_uncordon_key(run):
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain
    core = FakeCore(node(unschedulable=True, annotations={'gpuops.io/driver-upgrade': 'x', drain.CORDON_ANNOTATION: 'cordoned'}), [])
    res = run({'name': 'n1', 'state': 'restored', 'restore': {'mark': 'gpuops.io/driver-upgrade'}}, core)
    assert not res['failed'] and res['actions'] == ['uncordon node n1', 'unmark node n1: gpuops.io/driver-upgrade']
    assert core.nodes['n1']['metadata']['annotations'] == {}


def test_gpu_resources_unset_are_the_strategy_models(run, monkeypatch):
    """Without gpu_resources the module drains by the strategy model's resources (read when it runs); its
    documentation names the same prefixes."""
    seen = []
    real = gpu_node_drain.drain.Drainer.drain

    def spy(self, name, mode, prefixes, *args, **kwargs):
        seen.append(tuple(prefixes))
        return real(self, name, mode, prefixes, *args, **kwargs)

    monkeypatch.setattr(gpu_node_drain.drain.Drainer, 'drain', spy)
    core = FakeCore(node(), [pod('train', owner='ReplicaSet', gpu='volcano.sh/gpu-memory'),
                             pod('web', owner='ReplicaSet')])
    res = run({'name': 'n1', 'pause_gpu_clients': False, 'timeout': 0}, core)
    assert not res['failed'] and res['evicted'] == ['default/train'], res
    assert seen == [gpu_strategy.resource_prefixes()]
    res = run({'name': 'n1', 'pause_gpu_clients': False, 'timeout': 0, 'gpu_resources': ['nvidia.com/']},
              FakeCore(node(), [pod('train', owner='ReplicaSet', gpu='volcano.sh/gpu-memory')]))
    assert res['evicted'] == [] and seen[-1] == ('nvidia.com/',)
    doc = yaml.safe_load(gpu_node_drain.DOCUMENTATION)['options']['gpu_resources']
    assert 'default' not in doc
    assert re.findall(r'C\(([^)]+)\)', doc['description'][1]) == list(gpu_strategy.resource_prefixes())
