# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_strategy: the one strategy model and the one mixed-accounting rule."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs


def test_the_strategies_and_their_groups():
    assert gs.STRATEGIES == ('exclusive', 'time-slicing', 'mps', 'mig', 'gpushare', 'volcano', 'hami', 'gpu-manager',
                             'gpu-operator')
    assert gs.NODE_STRATEGIES == gs.STRATEGIES[:-1]
    assert gs.WHOLE_GPU_STRATEGIES == gs.NVIDIA_PLUGIN_STRATEGIES == gs.RUNTIME_CLASS_STRATEGIES == (
        'exclusive', 'time-slicing', 'mps', 'mig')
    assert gs.EXTENDER_STRATEGIES == ('gpushare',)
    assert 'gpu-operator' not in gs.LABELLED_STRATEGIES and len(gs.LABELLED_STRATEGIES) == 8
    assert gs.DEFAULT_STRATEGY in gs.STRATEGIES


def test_every_strategy_resource_is_of_its_own_family():
    for name in gs.STRATEGIES:
        for res in gs.strategy(name)['resources']:
            probe = res + '1g.10gb' if res.endswith('-') else res + ('gpu-number' if res.endswith('/') else '')
            fam = gs.resource_family(probe)
            # HAMi advertises nvidia.com/gpu, counted as whole-GPU: the only cross-family name, handled by 'current'
            assert fam == gs.family(name) or (name == 'hami' and res == 'nvidia.com/gpu'), (name, res, fam)


@pytest.mark.parametrize('res,fam', [
    ('nvidia.com/gpu', 'whole-gpu'), ('nvidia.com/gpu.shared', 'whole-gpu'), ('nvidia.com/mig-1g.10gb', 'whole-gpu'),
    ('aliyun.com/gpu-mem', 'aliyun-gpu-mem'), ('volcano.sh/vgpu-memory', 'volcano-gpu-mem'),
    ('tencent.com/vcuda-core', 'tencent-vcuda'), ('nvidia.com/gpumem', 'hami'), ('cpu', None), ('memory', None)])
def test_resource_family(res, fam):
    assert gs.resource_family(res) == fam


def test_the_rule_memory_and_whole_gpu_accounting_never_share_a_gpu():
    alloc = {'nvidia.com/gpu': '2', 'aliyun.com/gpu-mem': '30', 'cpu': '8', 'volcano.sh/gpu-memory': '0'}
    assert gs.foreign_resources('gpushare', alloc) == [('nvidia.com/gpu', '2')]
    assert gs.foreign_resources('exclusive', alloc) == [('aliyun.com/gpu-mem', '30')]
    assert gs.foreign_resources('volcano', alloc) == [('aliyun.com/gpu-mem', '30'), ('nvidia.com/gpu', '2')]
    # a node that already runs the strategy is not checked against its own device plugin (HAMi: nvidia.com/gpu)
    assert gs.foreign_resources('hami', {'nvidia.com/gpu': '4'}, current='hami') == []
    assert gs.foreign_resources('hami', {'nvidia.com/gpu': '4'}) == [('nvidia.com/gpu', '4')]
    assert gs.foreign_resources('mig', {'nvidia.com/mig-1g.10gb': '7', 'nvidia.com/gpu': '0m'}) == []


def test_families_conflict():
    assert gs.families_conflict(['exclusive', 'mig', 'time-slicing']) == []
    assert gs.families_conflict(['gpushare', 'mps']) == ['aliyun-gpu-mem', 'whole-gpu']
    assert gs.families_conflict(['unknown', 'hami']) == []


@pytest.mark.parametrize('value,positive', [('0', False), ('', False), ('0m', False), (0, False), ('2', True),
                                            ('500m', True), ('16Gi', True), ('1k', True)])
def test_positive_quantity(value, positive):
    assert gs.positive_quantity(value) is positive


def _doc_choices(module, option):
    import yaml
    mod = __import__('ansible_collections.gpuops.k8s_gpu.plugins.modules.%s' % module, fromlist=['DOCUMENTATION'])
    return tuple(yaml.safe_load(mod.DOCUMENTATION)['options'][option]['choices'])


def test_module_documentation_choices_are_the_model():
    """ansible-test validate-modules compares DOCUMENTATION with the argument_spec (built from the model); this ties
    the literal DOCUMENTATION lists to the model."""
    assert _doc_choices('gpu_stack_manifests', 'strategy') == gs.STRATEGIES
    assert _doc_choices('gpu_doctor', 'strategy') == gs.NODE_STRATEGIES


def test_role_argument_specs_choices_are_the_model():
    import os
    import yaml
    root = os.path.join(os.path.dirname(os.path.dirname(__file__)), '..', '..', '..', '..')
    with open(os.path.join(root, 'roles', 'gpu_node_labels', 'meta', 'argument_specs.yml')) as f:
        spec = yaml.safe_load(f)['argument_specs']['main']['options']
    assert tuple(spec['gpu_node_labels_pools']['options']['strategy']['choices']) == gs.LABELLED_STRATEGIES
    with open(os.path.join(root, 'roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')) as f:
        spec = yaml.safe_load(f)['argument_specs']['main']['options']
    assert tuple(spec['gpu_sharing_stack_strategy']['choices']) == gs.STRATEGIES


def test_one_rule_in_the_label_plan_the_stack_and_the_report():
    """The three former versions of the rule now agree: defects of the old label table (a Volcano node advertising
    nvidia.com/gpu.shared, a whole-GPU node with HAMi's nvidia.com/gpumem, '0m' counted as advertised) and of the old
    report rule (Volcano next to MIG, HAMi next to a whole-GPU strategy, gpu-manager next to anything)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.cluster_plan import label_live_plan
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_share_report_model as report
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.gpu_stack_common import StackError
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.gpu_stack_render import check_conflicts

    def plan(strategy, alloc):
        static = {'nodes': [{'host': 'a', 'node': 'a', 'strategy': strategy, 'pools': ['p'], 'labels': {}}]}
        live = [{'metadata': {'name': 'a'}, 'status': {'allocatable': alloc}}]
        return label_live_plan(static, live)['errors']

    assert 'nvidia.com/gpu.shared=4' in plan('volcano', {'nvidia.com/gpu.shared': '4'})[0]
    assert 'nvidia.com/gpumem=15360' in plan('exclusive', {'nvidia.com/gpumem': '15360'})[0]
    assert plan('gpushare', {'nvidia.com/gpu': '0m'}) == []
    with pytest.raises(StackError, match='nvidia.com/gpu.shared=4'):
        check_conflicts('volcano', 'p', ['a'], {'a': {'labels': {}, 'allocatable': {'nvidia.com/gpu.shared': '4'}}},
                        {}, False, 'gpu_sharing_stack_')
    assert report.node_conflicts(['mig', 'volcano']) == ['Volcano GPU accounting and mig on the same node']
    assert report.node_conflicts(['exclusive', 'hami'])[0].startswith('several GPU accountings on the same node')
    assert report.node_conflicts(['gpu-manager', 'time-slicing'])
