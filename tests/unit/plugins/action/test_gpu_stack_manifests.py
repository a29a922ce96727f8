# -*- coding: utf-8 -*-
"""The action plugin gpu_stack_manifests against the module of the same name: same arguments, same result."""
import copy
import json

import pytest

from unittest.mock import MagicMock

from ansible.errors import AnsibleActionFail

from ansible_collections.gpuops.k8s_gpu.plugins.action import gpu_stack_manifests as action
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_stack_manifests as module
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import Exit, capture_exit, module_args

NAME = 'gpuops.k8s_gpu.gpu_stack_manifests'
T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}],
      'sharing': {'mps': {'allowed': True, 'max_clients': 48}, 'mig': {'allowed': False, 'reason': 'GPU(s) 0 are not MIG capable'}}}
A100 = {'gpus': [{'index': i, 'memory_total_mib': 81920} for i in range(8)],
        'sharing': {'mps': {'allowed': True, 'max_clients': 48},
                    'mig': {'allowed': True, 'profiles': dict((str(i), ['1g.10gb', '3g.40gb']) for i in range(8))}}}
GPUSHARE_OK = {'extender_image': 'reg.example/acs/k8s-gpushare-schd-extender:86f6025',
               'device_plugin_image': 'reg.example/acs/k8s-gpushare-plugin:45fb8b8'}
SELECTOR_ONLY = {'strategy': 'volcano', 'pool': 'v', 'node_selector': {'gpu': 'volcano'}}

GOOD = {
    'time-slicing': {'strategy': 'time-slicing', 'pool': 'a', 'nodes': ['n1', 'n2'], 'registry': 'mirror.example:5000',
                     'image_pull_secrets': ['regcred'], 'settings': {'time_slicing': {'replicas': 4}},
                     'facts': {'n1': T4, 'n2': T4}},
    'mig': {'strategy': 'mig', 'pool': 'm', 'nodes': ['n1'], 'facts': {'n1': A100},
            'settings': {'mig': {'devices': {'1g.10gb': 7}}}},
    'gpushare-validation': {'strategy': 'gpushare', 'pool': 'g', 'nodes': ['n1'], 'facts': {'n1': T4},
                            'settings': {'gpushare': GPUSHARE_OK}, 'validation': {'enabled': True}},
    'hami': {'strategy': 'hami', 'pool': 'h', 'nodes': 'n1,n2', 'settings': {'hami': {'kube_version': 'v1.33.2'}},
             'require_facts': 'no', 'check_conflicts': 'yes'},
    'selector-only': SELECTOR_ONLY,
    # a site's own strategy label (role gpu_node_labels' gpu_node_labels_strategy_label, #36)
    'strategy-label': {'strategy': 'time-slicing', 'pool': 'a', 'nodes': ['n1'], 'facts': {'n1': T4},
                       'strategy_label': 'example.com/gpu-strategy'},
}


def make_action(args, check_mode=False, async_val=0):
    task = MagicMock()
    task.args = copy.deepcopy(args)
    task.action = NAME
    task.check_mode = check_mode
    task.async_val = async_val
    connection = MagicMock()
    plugin = action.ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return plugin, connection


def run_action(args, **kw):
    plugin, connection = make_action(args, **kw)
    result = plugin.run(task_vars={})
    # it renders in the controller process: nothing is called on the connection (no module, no file, no command)
    assert connection.mock_calls == []
    return result


def run_module(monkeypatch, args):
    """The module's result as the controller gets it (through JSON), and as the action plugin gives it back: the
    bookkeeping key failed only on failure and an empty warnings list left out (the controller drops it)."""
    capture_exit(monkeypatch)
    # the controller passes the task's action name; AnsibleModule names it in "Unsupported parameters for (...)"
    with module_args(dict(copy.deepcopy(args), _ansible_module_name=NAME)):
        with pytest.raises(Exit) as e:
            module.main()
    out = json.loads(json.dumps(e.value.args[0]))
    if not out['failed']:
        del out['failed']
    if not out.get('warnings'):
        out.pop('warnings', None)
    return out


@pytest.mark.parametrize('case', sorted(GOOD))
def test_render_equals_the_module(monkeypatch, case):
    got = run_action(GOOD[case])
    assert not got.get('failed') and got['changed'] is False
    # what the module returns, types included (a tuple where the module has a list would not be equal)
    assert got == run_module(monkeypatch, GOOD[case])
    assert got['manifests']


def test_arguments_are_checked_with_the_module_spec():
    # one argument specification for both
    assert module.argument_spec is render.argument_spec
    spec = render.argument_spec()
    assert spec['strategy']['required'] and spec['pool']['required']
    # a new dict every time: a default list is never shared between runs
    assert render.argument_spec()['nodes']['default'] is not spec['nodes']['default']


@pytest.mark.parametrize('args, named', [
    (dict(GOOD['time-slicing'], bogus=1), 'Unsupported parameters for (%s) module: bogus. Supported parameters include: ' % NAME),
    (dict(GOOD['time-slicing'], require_facts='maybe'), 'require_facts'),
    (dict(GOOD['time-slicing'], facts='n1'), "argument 'facts' is of type"),
    (dict(GOOD['time-slicing'], strategy='sharing'), 'value of strategy must be one of: '),
    (dict((k, v) for k, v in GOOD['time-slicing'].items() if k != 'pool'), 'missing required arguments: pool'),
])
def test_invalid_arguments_fail_naming_the_parameter_as_the_module_does(monkeypatch, args, named):
    got = run_action(args)
    assert got['failed'] is True and got['changed'] is False
    assert named in got['msg']
    assert 'manifests' not in got
    mod = run_module(monkeypatch, args)
    assert mod['failed'] and got['msg'] == mod['msg']


def test_stack_error_fails_with_its_message(monkeypatch):
    args = dict(GOOD['time-slicing'], settings={'time_slicing': {'replicas': 1}})
    got = run_action(args)
    assert got['failed'] is True and got['changed'] is False
    assert 'gpu_sharing_stack_time_slicing.replicas' in got['msg']
    mod = run_module(monkeypatch, args)
    assert mod['failed'] and got['msg'] == mod['msg']


def test_a_custom_strategy_label_is_the_nodes_label_and_a_bad_one_is_refused(monkeypatch):
    got = run_action(GOOD['strategy-label'])
    assert got['node_labels']['n1']['example.com/gpu-strategy'] == 'time-slicing'
    assert 'gpuops.io/sharing-strategy' not in got['node_labels']['n1']
    bad = dict(GOOD['strategy-label'], strategy_label='a/b/c')
    got = run_action(bad)
    assert got['failed'] is True
    assert got['msg'].startswith("strategy_label: 'a/b/c' is not a valid Kubernetes label key ([prefix/]name")
    assert got['msg'] == run_module(monkeypatch, bad)['msg']


def test_stack_error_uses_var_prefix():
    got = run_action({'strategy': 'exclusive', 'pool': 'Bad_Pool', 'nodes': ['n1'], 'var_prefix': 'my_'})
    assert got['failed'] and got['msg'].startswith('my_pool must be a DNS label')


def test_warnings_come_back():
    got = run_action(SELECTOR_ONLY)
    assert not got.get('failed')
    assert len(got['warnings']) == 1 and 'gpu_sharing_stack_nodes is empty' in got['warnings'][0]
    # none: no warnings key, as for a module
    assert 'warnings' not in run_action(GOOD['time-slicing'])


def test_check_mode_renders_the_same():
    for args in GOOD.values():
        got = run_action(args, check_mode=True)
        assert not got.get('failed') and not got.get('skipped') and got['changed'] is False
        assert got == run_action(args)


def test_task_args_are_not_changed():
    plugin = make_action(GOOD['hami'])[0]
    plugin.run(task_vars={})
    assert plugin._task.args == GOOD['hami']


def test_async_is_refused():
    plugin = make_action(GOOD['time-slicing'], async_val=10)[0]
    with pytest.raises(AnsibleActionFail, match='async'):
        plugin.run(task_vars={})


def test_inventory_vars_read_the_pool_host_vars_from_hostvars():
    # n1's facts from the inventory, n2's given in the arguments (they win over the inventory's), n3 no inventory host
    hostvars = {'n1': {'gpu_probe_facts': T4, 'gpu_sharing_stack_strategy': 'time-slicing'},
                'n2': {'gpu_probe_facts': {'gpus': []}, 'nvidia_container_runtime_cdi': True}}
    args = dict(GOOD['time-slicing'], facts={'n2': T4}, inventory_vars=True)
    plugin, connection = make_action(args)
    got = plugin.run(task_vars={'hostvars': hostvars})
    assert connection.mock_calls == [] and not got.get('failed')
    # the same render as with every value templated into the arguments (what role gpu_sharing_stack did before)
    assert got == run_action(dict(GOOD['time-slicing'], facts={'n1': T4, 'n2': T4},
                                  node_strategies={'n1': 'time-slicing'}, cdi_enabled={'n2': True}))
    merged = action.with_inventory_vars(dict(args, nodes=['n1', 'n2', 'n3'], node_strategies={}, cdi_spec_ready={},
                                             cdi_enabled={}), hostvars)
    assert merged['facts'] == {'n1': T4, 'n2': T4}
    assert merged['node_strategies'] == {'n1': 'time-slicing'} and merged['cdi_enabled'] == {'n2': True}
    assert merged['cdi_spec_ready'] == {} and args['facts'] == {'n2': T4}


def test_inventory_vars_facts_missing_fail_as_without_them():
    # a node of the pool without facts anywhere: the same refusal as when the role templated the (empty) facts in
    args = dict(GOOD['mig'], facts={})
    plugin = make_action(dict(args, inventory_vars=True))[0]
    got = plugin.run(task_vars={'hostvars': {'n1': {}}})
    assert got['failed'] and 'n1' in got['msg'] and got == run_action(args)


def test_inventory_vars_in_a_module_run_fail_clearly(monkeypatch):
    mod = run_module(monkeypatch, dict(GOOD['time-slicing'], inventory_vars=True))
    assert mod['failed'] and mod['msg'].startswith('inventory_vars is read by the action plugin of gpuops.k8s_gpu.gpu_stack_manifests')
