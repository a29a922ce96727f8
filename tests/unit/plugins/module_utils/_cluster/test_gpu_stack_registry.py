# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The strategy registry: each strategy of the model names its renderer, its settings and its resources; the render
dispatches by that table; the settings schemas and role gpu_sharing_stack's argument_specs cannot drift apart."""
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as report
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))
TYPES = {str: 'str', int: 'int', float: 'float', bool: 'bool', list: 'list', dict: 'dict'}
# keys the role never sets: the render fills them from the cluster (stacks/live)
INTERNAL = {('gpushare', 'kube_proxy_config')}


def _role_options(entry='main'):
    with open(os.path.join(ROOT, 'roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')) as f:
        return yaml.safe_load(f)['argument_specs'][entry]['options']


@pytest.mark.parametrize('name', gs.STRATEGIES)
def test_every_strategy_has_a_renderer_settings_and_resources(name):
    info = gs.stack_info(name)
    module = render.STACKS[info['stack']]
    assert callable(module.render_stack), name
    assert info['settings'] and set(info['settings']) <= set(module.SETTINGS), name
    # a strategy may advertise no extended resource (its devices are claimed otherwise); each one it has is complete
    for res, description, unit in info['resources']:
        assert re.match(r'^[a-z0-9.-]+/[a-z0-9.-]*$', res) and description and unit, (name, res)
    assert gs.strategy(name)['resources'] == tuple(r[0] for r in info['resources'])
    assert render.stack_renderer(name) is module


def test_every_renderer_serves_a_strategy_and_every_settings_key_a_strategy():
    assert set(render.STACKS) == set(gs.stack_info(n)['stack'] for n in gs.STRATEGIES)
    for stack, module in render.STACKS.items():
        used = set(k for n in gs.STRATEGIES if gs.stack_info(n)['stack'] == stack for k in gs.stack_info(n)['settings'])
        assert used == set(module.SETTINGS), stack
    assert set(gs.SETTINGS_KEYS) == set(render.all_settings_schemas())


def test_the_render_dispatches_by_the_table(monkeypatch):
    """A strategy's render goes to the module the model names, with the one signature."""
    calls = []

    class Fake(object):
        SETTINGS = {'hami': {}}

        @staticmethod
        def render_stack(ctx, strategy, settings, nodes, facts, inputs):
            calls.append((strategy, sorted(inputs)))
            return {'manifests': [], 'labels': {}, 'resources': ['x/y'], 'limits': {}, 'scheduler_name': 'fake'}

    monkeypatch.setitem(render.STACKS, 'hami', Fake)
    out = render.render({'strategy': 'hami', 'pool': 'p', 'nodes': ['n1']})
    assert calls == [('hami', ['cdi_enabled', 'cdi_spec_ready', 'live_nodes', 'live_objects', 'live_runtime_classes',
                               'node_state', 'removing', 'require_facts'])]
    assert out['resources'] == ['x/y'] and out['scheduler_name'] == 'fake' and out['helm'] is None


def test_the_report_reads_the_resources_of_the_model():
    assert report.KNOWN_RESOURCES is gs.RESOURCES
    assert report.KNOWN_RESOURCES['nvidia.com/gpu'][0] is None          # whole-GPU strategies and HAMi advertise it
    assert report.KNOWN_RESOURCES['nvidia.com/gpu.shared'][0] == 'time-slicing'
    assert report.KNOWN_RESOURCES['tencent.com/vcuda-memory'] == ('gpu-manager', 'vCUDA memory (gpu-manager, 256 MiB '
                                                                  'units)', '256MiB')
    for name, (owner, description, unit) in gs.RESOURCES.items():
        assert owner is None or name in gs.strategy(owner)['resources'], name


def test_the_role_has_one_option_per_settings_key():
    """Role gpu_sharing_stack's strategy settings variables are the model's settings keys, no more, no less."""
    options = _role_options()
    with_options = set(n for n, o in options.items() if o.get('type') == 'dict' and o.get('options'))
    assert with_options == set('gpu_sharing_stack_' + k for k in gs.SETTINGS_KEYS)


@pytest.mark.parametrize('key', gs.SETTINGS_KEYS)
def test_settings_schema_and_argument_specs_cannot_drift(key):
    """One declaration per stack setting: the renderer's schema (what is checked) and the role's argument_specs
    (what is documented and what ansible-doc shows) have the same keys, types, defaults and choices."""
    schema = render.all_settings_schemas()[key]
    options = _role_options()['gpu_sharing_stack_' + key]['options']
    assert set(options) == set(k for k in schema if (key, k) not in INTERNAL), key
    for name, spec in options.items():
        s = schema[name]
        assert spec['type'] == TYPES[s['type']], (key, name)
        assert spec.get('default') == s.get('default'), (key, name)
        assert spec.get('choices') == (list(s['choices']) if s.get('choices') is not None else None), (key, name)
        assert spec.get('description'), (key, name)


def test_a_changed_schema_is_caught(monkeypatch):
    """The drift test fails on a schema that disagrees with argument_specs (it cannot pass on nothing)."""
    monkeypatch.setitem(render.STACKS['hami'].HAMI_SCHEMA, 'device_split_count',
                        dict(render.STACKS['hami'].HAMI_SCHEMA['device_split_count'], default=11))
    with pytest.raises(AssertionError):
        test_settings_schema_and_argument_specs_cannot_drift('hami')
