# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_strategy: the one strategy model and the one mixed-accounting rule."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs


def test_the_strategies_and_their_groups():
    assert gs.STRATEGIES == ('exclusive', 'time-slicing', 'mps', 'mig', 'gpushare', 'volcano', 'hami', 'gpu-manager',
                             'gpu-operator', 'dra')
    assert gs.NODE_STRATEGIES == gs.STRATEGIES[:-2]
    assert gs.WHOLE_GPU_STRATEGIES == gs.NVIDIA_PLUGIN_STRATEGIES == gs.RUNTIME_CLASS_STRATEGIES == (
        'exclusive', 'time-slicing', 'mps', 'mig')
    assert gs.EXTENDER_STRATEGIES == ('gpushare',)
    assert 'gpu-operator' not in gs.LABELLED_STRATEGIES and len(gs.LABELLED_STRATEGIES) == 9
    assert 'dra' in gs.LABELLED_STRATEGIES
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


def test_dra_is_an_accounting_of_its_own():
    """DRA claims devices through ResourceClaims: no extended resource is its own, so a node that advertises any GPU
    resource (a device plugin) is foreign to it, and it conflicts with every device plugin family."""
    assert gs.family('dra') == 'dra' and gs.strategy('dra')['resources'] == ()
    assert gs.foreign_resources('dra', {'nvidia.com/gpu': '1', 'cpu': '4'}) == [('nvidia.com/gpu', '1')]
    assert gs.foreign_resources('dra', {'nvidia.com/gpu': '0', 'aliyun.com/gpu-mem': '0'}) == []
    assert gs.families_conflict(['dra', 'time-slicing']) == ['dra', 'whole-gpu']
    assert not gs.strategy('dra')['node_strategy'] and gs.strategy('dra')['compute_mode'] is None
    assert not gs.strategy('dra')['runtime_class'] and not gs.strategy('dra')['default_runtime']


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
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan import label_live_plan
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as report
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.render import check_conflicts

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


# ---- the attributes the doctor and role gpu_node_sharing read (they used to keep their own lists)

def _root():
    import os
    return os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))


def _yaml(*path):
    import os
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor('!unsafe', lambda loader, node: loader.construct_scalar(node))
    with open(os.path.join(_root(), *path)) as f:
        return yaml.load(f, Loader=Loader)


def test_every_strategy_has_every_attribute():
    keys = set(gs.strategy('exclusive'))
    assert keys == {'title', 'family', 'resources', 'nvidia_plugin', 'scheduler_extender', 'runtime_class',
                    'default_runtime', 'compute_mode', 'node_strategy', 'node_labels', 'node_state',
                    'shared_prune'}
    for name in gs.STRATEGIES:
        assert set(gs.strategy(name)) == keys, name
        assert gs.strategy(name)['compute_mode'] in (None,) + gs.COMPUTE_MODES, name


def test_default_runtime_strategies():
    """gpushare, Volcano and HAMi name no RuntimeClass: nvidia must be the default runtime; a strategy either uses
    RuntimeClass nvidia or needs the default runtime, never both."""
    assert gs.DEFAULT_RUNTIME_STRATEGIES == ('gpushare', 'volcano', 'hami')
    assert not set(gs.DEFAULT_RUNTIME_STRATEGIES) & set(gs.RUNTIME_CLASS_STRATEGIES)


def test_compute_mode_strategies():
    """The strategies whose nodes share one GPU between the processes of several containers want compute mode
    Default; MPS (the device plugin's daemon), exclusive, MIG and the GPU operator leave it alone."""
    assert gs.DEFAULT_COMPUTE_MODE_STRATEGIES == ('time-slicing', 'gpushare', 'volcano', 'hami', 'gpu-manager')
    for name in ('exclusive', 'mps', 'mig', 'gpu-operator'):
        assert gs.strategy(name)['compute_mode'] is None


@pytest.mark.parametrize('name,setting,mode', [
    ('time-slicing', 'auto', 'default'), ('hami', 'auto', 'default'), ('mps', 'auto', None), ('mig', 'auto', None),
    ('exclusive', 'auto', None), ('gpushare', 'keep', None), ('mps', 'exclusive_process', 'exclusive_process'),
    ('volcano', 'prohibited', 'prohibited'), ('exclusive', 'default', 'default')])
def test_node_compute_mode(name, setting, mode):
    assert gs.node_compute_mode(name, setting) == mode


def test_node_compute_mode_refuses_unknown_input():
    with pytest.raises(ValueError, match="'exclusive-process' is not a compute mode setting; allowed: auto, default"):
        gs.node_compute_mode('mps', 'exclusive-process')
    with pytest.raises(ValueError, match="'timeslicing' is not a strategy; allowed: exclusive"):
        gs.node_compute_mode('timeslicing')


def test_titles():
    assert [gs.strategy(n)['title'] for n in gs.STRATEGIES] == [
        'exclusive', 'time-slicing', 'mps', 'mig', 'gpushare', 'Volcano', 'HAMi', 'gpu-manager', 'GPU operator', 'DRA']
    assert gs.titles(gs.DEFAULT_RUNTIME_STRATEGIES) == 'gpushare, Volcano and HAMi'
    assert gs.titles(['hami']) == 'HAMi' and gs.titles([]) == ''


def test_gpu_node_sharing_argument_specs_are_the_model():
    spec = _yaml('roles', 'gpu_node_sharing', 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert tuple(spec['gpu_node_sharing_strategy']['choices']) == gs.STRATEGIES
    assert tuple(spec['gpu_node_sharing_compute_mode']['choices']) == gs.COMPUTE_MODE_SETTINGS
    # the prose that names the strategies wanting compute mode Default names exactly the model's
    text = ' '.join(spec['gpu_node_sharing_compute_mode']['description'])
    named = [n for n in gs.STRATEGIES if (' %s,' % n) in text or (' %s ' % n) in text]
    assert tuple(named) == gs.DEFAULT_COMPUTE_MODE_STRATEGIES, text


def test_gpu_node_sharing_asks_the_model_for_the_compute_mode():
    tasks = _yaml('roles', 'gpu_node_sharing', 'tasks', 'present.yml')
    facts = [t['ansible.builtin.set_fact'] for t in tasks if 'gpu_node_sharing__compute_mode' in
             t.get('ansible.builtin.set_fact', {})][0]
    expr = facts['gpu_node_sharing__compute_mode']
    assert 'gpuops.k8s_gpu.gpu_strategy(compute_mode_setting=gpu_node_sharing_compute_mode)' in expr
    assert not [n for n in gs.STRATEGIES if "'%s'" % n in expr]


def test_awx_doctor_survey_choices_are_the_model():
    templates = _yaml('roles', 'awx_config', 'vars', 'main.yml')
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get('variable') == 'gpuops_sharing_strategy':
                found.append(tuple(node['choices']))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(templates)
    assert found and all(c == gs.NODE_STRATEGIES for c in found), found


def test_gpu_doctor_documentation_names_the_default_runtime_strategies():
    import re
    import yaml
    from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_doctor
    desc = yaml.safe_load(gpu_doctor.DOCUMENTATION)['options']['strategy']['description']
    sentence = [d for d in desc if 'default runtime' in d][0]
    before, after = sentence.split('need nvidia as', 1)
    assert tuple(re.findall(r'V\(([a-z-]+)\)', before)) == gs.DEFAULT_RUNTIME_STRATEGIES
    assert tuple(re.findall(r'V\(([a-z-]+)\)', after)) == gs.RUNTIME_CLASS_STRATEGIES


@pytest.mark.parametrize('playbook,var', [('cluster.yml', 'gpuops_cluster_pool_settings'),
                                          ('uninstall.yml', 'gpuops_uninstall_pool_settings')])
def test_playbook_pool_settings_cover_every_strategy(playbook, var):
    """The playbooks pass each strategy's settings variable of role gpu_sharing_stack to the pools (NVIDIA's plugin
    strategies read gpu_sharing_stack_nvidia too): they take the names from the model (filter stack_settings,
    names=true, whose names are the settings keys of gpu_strategy; tests/unit/plugins/filter/test_stack_settings.py),
    and the model's keys name every strategy's variable."""
    import os
    with open(os.path.join(_root(), 'playbooks', playbook)) as f:
        text = f.read()
    start = text.index(var + ':')
    block = text[start:text.index('tags:', start)]
    assert 'gpuops.k8s_gpu.stack_settings(names=true)' in block, (playbook, block)
    model = {'gpu_sharing_stack_' + k for k in gs.SETTINGS_KEYS}
    for name in gs.STRATEGIES:
        wanted = ['gpu_sharing_stack_' + name.replace('-', '_')] if name != 'exclusive' else []
        if gs.strategy(name)['nvidia_plugin']:
            wanted.append('gpu_sharing_stack_nvidia')
        for w in wanted:
            assert w in model, (playbook, name, w)


def test_no_other_list_of_strategies_in_the_collection():
    """Any list or tuple literal of two or more strategy names outside the model is a copy of it. The one exception:
    the report reads the values of NVIDIA's label nvidia.com/gpu.sharing-strategy ('time-slicing', 'mps'), which are
    the label's values, not the collection's strategies."""
    import os
    import re
    names = '|'.join(re.escape(n) for n in gs.STRATEGIES)
    pattern = re.compile(r"""[\[(]\s*(['"])(%s)\1\s*,\s*(['"])(%s)\3""" % (names, names))
    allowed = {('plugins/module_utils/_cluster/stacks/nvidia.py', "if sharing in ('time-slicing', 'mps'):")}
    found = []
    root = _root()
    for top in ('plugins', 'roles', 'playbooks'):
        for d, dummy, files in os.walk(os.path.join(root, top)):
            for name in files:
                path = os.path.join(d, name)
                rel = os.path.relpath(path, root).replace(os.sep, '/')
                if not name.endswith(('.py', '.yml', '.yaml', '.j2')) or rel.endswith('_common/gpu_strategy.py'):
                    continue
                with open(path) as f:
                    for line in f:
                        if pattern.search(line) and (rel, line.strip()) not in allowed:
                            found.append((rel, line.strip()))
    assert found == []


def test_mig_partitioned_only_mig():
    """gpu_doctor reads the GPU-instance profiles for the strategy the model says partitions GPUs: mig only (the GPU
    operator advertises MIG devices but is no node-level strategy)."""
    assert [n for n in gs.STRATEGIES if gs.mig_partitioned(n)] == ['mig']
    assert gs.mig_partitioned(None) is False and gs.mig_partitioned('') is False
    assert gs.mig_partitioned('vgpu-magic') is False
