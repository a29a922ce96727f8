# -*- coding: utf-8 -*-
"""Pools of one strategy share cluster objects: their settings that enter them must agree (issue #37 item 4)."""
import copy
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import sharing_pools
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import shared
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError

POOL_SETTINGS = ['gpu_sharing_stack_node_selector', 'gpu_sharing_stack_namespace', 'gpu_sharing_stack_registry',
                 'gpu_sharing_stack_image_pull_secrets', 'gpu_sharing_stack_hami', 'gpu_sharing_stack_volcano',
                 'gpu_sharing_stack_gpushare', 'gpu_sharing_stack_gpu_manager', 'gpu_sharing_stack_gpu_operator']


def two_pools(strategy, a_settings, b_settings):
    groups = {'gpu_nodes': ['a', 'b'], 'pool_a': ['a'], 'pool_b': ['b']}
    hv = {'a': dict({'group_names': ['gpu_nodes', 'pool_a'], 'gpuops_sharing_strategy': strategy}, **a_settings),
          'b': dict({'group_names': ['gpu_nodes', 'pool_b'], 'gpuops_sharing_strategy': strategy}, **b_settings)}
    return sharing_pools(groups, hv, settings=POOL_SETTINGS)['errors']


def test_hami_pools_that_differ_are_refused_naming_pools_settings_and_values():
    [err] = two_pools('hami', {'gpu_sharing_stack_hami': {'device_split_count': 4}},
                      {'gpu_sharing_stack_hami': {'device_split_count': 8, 'device_memory_scaling': 1.5},
                       'gpu_sharing_stack_registry': 'mirror.example.com/m'})
    assert err.startswith("hami pools pool-a, pool-b share HAMi's scheduler (hami-scheduler Deployment"), err
    assert 'gpu_sharing_stack_hami.device_split_count (pool-a: 4, pool-b: 8)' in err
    assert 'gpu_sharing_stack_hami.device_memory_scaling (pool-a: 1.0, pool-b: 1.5)' in err
    assert 'gpu_sharing_stack_registry (pool-a: unset, pool-b: "mirror.example.com/m")' in err
    # the same settings, a default spelt out or left out: nothing to refuse
    assert two_pools('hami', {'gpu_sharing_stack_hami': {'device_split_count': 10}}, {}) == []


@pytest.mark.parametrize('strategy,var,a,b,key', [
    ('volcano', 'gpu_sharing_stack_volcano', {'device_split_count': 4}, {'device_split_count': 2}, 'device_split_count'),
    ('gpushare', 'gpu_sharing_stack_gpushare', {}, {'extender_node_port': 32000}, 'extender_node_port'),
    ('gpu-manager', 'gpu_sharing_stack_gpu_manager', {'admission_image': 'r/a:1'}, {'admission_image': 'r/a:2'},
     'admission_image'),
    ('gpu-operator', 'gpu_sharing_stack_gpu_operator', {'sharing': 'time-slicing', 'replicas': 4},
     {'sharing': 'time-slicing', 'replicas': 8}, 'replicas'),
])
def test_pools_of_a_strategy_that_differ_in_a_shared_setting_are_refused(strategy, var, a, b, key):
    [err] = two_pools(strategy, {var: a}, {var: b})
    assert err.startswith('%s pools pool-a, pool-b share ' % strategy), err
    assert '%s.%s (pool-a: ' % (var, key) in err
    assert two_pools(strategy, {var: a}, {var: dict(a)}) == []


def test_what_is_the_pools_own_may_differ():
    # the operator's MIG geometry is a label of the pool's nodes; a node selector selects the pool's own nodes
    assert two_pools('gpu-operator', {'gpu_sharing_stack_gpu_operator': {'mig_config': 'all-1g.10gb'}},
                     {'gpu_sharing_stack_gpu_operator': {'mig_config': 'all-disabled'},
                      'gpu_sharing_stack_node_selector': {'x': 'y'}}) == []
    assert two_pools('volcano', {'gpu_sharing_stack_volcano': {'device_plugin_image': 'r/a:1'}}, {}) == []
    # pools of different strategies share nothing here
    groups = {'gpu_nodes': ['a', 'b'], 'pool_a': ['a'], 'pool_b': ['b']}
    hv = {'a': {'group_names': ['gpu_nodes', 'pool_a'], 'gpuops_sharing_strategy': 'hami',
                'gpu_sharing_stack_hami': {'device_split_count': 3}},
          'b': {'group_names': ['gpu_nodes', 'pool_b'], 'gpuops_sharing_strategy': 'volcano'}}
    assert sharing_pools(groups, hv, settings=POOL_SETTINGS)['errors'] == []


# ---- every setting that changes a shared object is declared shared (the declaration cannot drift from the renderer)

T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}], 'sharing': {}}
BASE = {'hami': {'kube_version': 'v1.34.2'},
        'volcano': {'version': '1.15', 'kube_version': 'v1.34.2', 'existing_conf': 'actions: "enqueue, allocate"\ntiers: []\n'},
        'gpushare': {'kube_proxy_mode': 'iptables', 'accept_known_bad_images': True},
        'gpu_operator': {'chart_path': '/c-v26.7.0.tgz', 'sharing': 'time-slicing'},
        'gpu_manager': {'accept_unmaintained': True, 'admission_image': 'r/x:1'}}
POOL_PARAMS = {'gpu_sharing_stack_namespace': ('namespace', 'other-ns'),
               'gpu_sharing_stack_registry': ('registry', 'mirror.example.com'),
               'gpu_sharing_stack_image_pull_secrets': ('image_pull_secrets', ['rs']),
               'gpu_sharing_stack_node_selector': ('node_selector', {'a': 'b'})}


def _shared_output(strategy, settings, pool='a', node='n1', **params):
    p = dict(strategy=strategy, pool=pool, nodes=[node], facts={node: T4}, settings=settings, require_facts=False)
    p.update(params)
    res = r.render(p)
    return json.dumps([res['shared_manifests'], res['adopted_manifests'], res['helm'], res['extender'],
                       res['restarts'], res['scheduler_name']], sort_keys=True)


def _alternatives(spec):
    default, kind = spec.get('default'), spec.get('type')
    if spec.get('choices'):
        return [c for c in spec['choices'] if c != default]
    if kind is bool:
        return [True, False] if default is None else [not default]
    if kind is int:
        return [(default or spec.get('min') or 0) + 1]
    if kind is float:
        return [(default or 1.0) + 0.5]
    if kind is str:
        return ['alt-x1', 'registry.example.com/a/b:1', 'v1.33.1', '1.14', '3', '10.96.0.9']
    if kind is dict:
        return [{'x': 'y'}]
    return [['a']]


@pytest.mark.parametrize('strategy', sorted(shared.OWNERS))
def test_every_setting_that_changes_a_shared_object_is_declared_shared(strategy):
    module = shared.OWNERS[strategy]
    key = module.SHARED['settings']
    base = _shared_output(strategy, BASE)
    # two pools of the same settings render the same shared objects (a re-run of both writes nothing)
    assert _shared_output(strategy, BASE, pool='b', node='n2') == base
    undeclared = []
    for name, spec in module.SETTINGS[key].items():
        for alt in _alternatives(spec):
            settings = copy.deepcopy(BASE)
            settings[key][name] = alt
            try:
                out = _shared_output(strategy, settings)
            except StackError:
                continue
            if out != base and name not in module.SHARED['keys']:
                undeclared.append(name)
            break
    for var, (param, value) in POOL_PARAMS.items():
        if _shared_output(strategy, BASE, **{param: value}) != base and var not in module.SHARED['pool_variables']:
            undeclared.append(var)
    assert undeclared == []
    assert set(module.SHARED['keys']) <= set(module.SETTINGS[key])


def test_uninstall_is_not_refused_over_disagreeing_pools():
    """Playbook uninstall passes agreement=false: removing the pools is how a site gets out of that state."""
    groups = {'gpu_nodes': ['a', 'b'], 'pool_a': ['a'], 'pool_b': ['b']}
    hv = {'a': {'group_names': ['gpu_nodes', 'pool_a'], 'gpuops_sharing_strategy': 'hami',
                'gpu_sharing_stack_hami': {'device_split_count': 3}},
          'b': {'group_names': ['gpu_nodes', 'pool_b'], 'gpuops_sharing_strategy': 'hami'}}
    assert sharing_pools(groups, hv, settings=POOL_SETTINGS)['errors']
    assert sharing_pools(groups, hv, settings=POOL_SETTINGS, agreement=False)['errors'] == []


def test_every_stack_words_a_deploy_label_conflict(monkeypatch):
    """Found typing the _cluster wing (issue #39): operator_mix asks the stack that places_on_every_gpu_node for
    deploy_label_conflict, which only the GPU operator's Stack had: any other such stack raised AttributeError. The
    Stack interface has it now (the operator keeps its own words)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import base as stacks_base, registry

    class Everywhere(stacks_base.Stack):
        places_on_every_gpu_node = True

    class Follower(stacks_base.Stack):
        def pool_follows_deploy_labels(self, pool_settings):
            return True

    # two strategies of the model, with these stacks in place of their own
    stacks = {'hami': Everywhere('hami'), 'mig': Follower('mig')}
    monkeypatch.setattr(registry, 'stacks', lambda: list(stacks.values()))
    monkeypatch.setattr(registry, 'find', stacks.get)
    [err] = shared.operator_mix([{'name': 'p1', 'strategy': 'hami'}, {'name': 'p2', 'strategy': 'mig'}])
    assert err.startswith('hami pool(s) p1 and pool(s) p2 cannot share a cluster')
    monkeypatch.undo()
    assert 'gpu-operator' in registry.stack('gpu-operator').deploy_label_conflict(['a'], ['b'])
