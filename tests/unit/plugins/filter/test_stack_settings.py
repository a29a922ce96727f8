# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter stack_settings: a pool's settings travel as one dict, validated once with Ansible's own validator, every
default filled there (the pool-wide settings declared in role gpu_sharing_stack's argument_specs, the settings blocks'
argument spec built in process from the renderers' schemas)."""
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter.stack_settings import (
    POOL_WIDE, PREFIX, FilterModule, pool_setting_names)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import validate_settings
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
f = FilterModule().filters()['stack_settings']


def _yaml(*path):
    with open(os.path.join(ROOT, *path)) as fh:
        return yaml.safe_load(fh)


def test_defaults_come_from_argument_specs_and_the_schemas():
    out = f({})
    assert tuple(out) == tuple(PREFIX + n for n in POOL_WIDE) + ('settings',)
    assert tuple(out['settings']) == gs.SETTINGS_KEYS
    assert out['gpu_sharing_stack_namespace'] == 'kube-system'
    assert out['gpu_sharing_stack_helm_install'] is True
    # every block whole: each key of its schema, its default where the pool gives none
    for key, schema in registry.settings_schemas().items():
        assert out['settings'][key] == dict((k, s.get('default')) for k, s in schema.items()), key
    assert out['settings']['time_slicing']['replicas'] == 4
    assert out['gpu_sharing_stack_validation_image'].startswith('nvcr.io/nvidia/k8s/cuda-sample:')
    assert out['gpu_sharing_stack_registry'] is None          # no default in argument_specs: the role's variable


def test_the_pool_wins_over_the_variables_which_win_over_the_defaults():
    out = f({'gpu_sharing_stack_hami': {'device_split_count': 4}},
            variables={'gpu_sharing_stack_hami': {'x': 1}, 'gpu_sharing_stack_namespace': 'gpu',
                       'gpu_sharing_stack_registry': 'mirror.local'})
    assert out['settings']['hami']['device_split_count'] == 4
    assert out['gpu_sharing_stack_namespace'] == 'gpu' and out['gpu_sharing_stack_registry'] == 'mirror.local'
    assert out['gpu_sharing_stack_validation'] is False


def test_a_variable_fills_a_whole_block_not_single_keys():
    """The pool's block replaces the role variable's block (as before): keys the pool leaves out take the schema's
    defaults, not the variable's."""
    out = f({'gpu_sharing_stack_time_slicing': {'replicas': 6}},
            variables={'gpu_sharing_stack_time_slicing': {'replicas': 3, 'rename_by_default': True},
                       'gpu_sharing_stack_mps': {'replicas': 8}})
    assert out['settings']['time_slicing']['replicas'] == 6
    assert out['settings']['time_slicing']['rename_by_default'] is False
    assert out['settings']['mps']['replicas'] == 8 and out['settings']['mps']['mps_root'] == '/run/nvidia/mps'


def test_bad_input_names_the_variable():
    with pytest.raises(AnsibleFilterError, match=r'unknown key\(s\) gpu_sharing_stack_hamii'):
        f({'gpu_sharing_stack_hamii': {}})
    with pytest.raises(AnsibleFilterError, match='gpu_sharing_stack_hami'):
        f({'gpu_sharing_stack_hami': 'not a dict'})
    with pytest.raises(AnsibleFilterError, match='gpu_sharing_stack_allow_mixed_accounting'):
        f({'gpu_sharing_stack_allow_mixed_accounting': 'maybe'})
    with pytest.raises(AnsibleFilterError, match='must be a dictionary'):
        f(['gpu_sharing_stack_hami'])


@pytest.mark.parametrize('settings, needles', [
    # a key inside a block: the variable, the key, the value and the allowed values
    ({'gpu_sharing_stack_time_slicing': {'replicas': 'four'}},
     ["gpu_sharing_stack_time_slicing.replicas must be an integer; got 'four'"]),
    ({'gpu_sharing_stack_time_slicing': {'replicas': True}},
     ['gpu_sharing_stack_time_slicing.replicas must be an integer; got True']),
    ({'gpu_sharing_stack_mig': {'strategy': 'both'}},
     ['value of strategy must be one of: single, mixed, got: both found in gpu_sharing_stack_mig']),
    ({'gpu_sharing_stack_mig': {'stratgy': 'single'}},
     ['gpu_sharing_stack_mig.stratgy', 'Supported parameters include: ', 'strategy']),
    ({'gpu_sharing_stack_nvidia': {'image': {'repo': 'x'}}},
     ["gpu_sharing_stack_nvidia.image must be a string; got {'repo': 'x'}"]),
    ({'gpu_sharing_stack_mig': {'devices': ['1g.10gb']}},
     ["gpu_sharing_stack_mig.devices must be a dict; got ['1g.10gb']"]),
])
def test_a_bad_key_inside_a_block_names_the_variable_the_value_and_what_is_allowed(settings, needles):
    with pytest.raises(AnsibleFilterError) as e:
        f(settings)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_the_blocks_checks_are_the_renders_own():
    """The boundary converts and refuses as the render's validate_settings does: each schema key, a good value and
    bad ones (a bool for an int, a dict for a string) give the same answer in both; ranges stay the render's."""
    samples = {int: ('7', 3.0, True, 'x'), float: ('1.5', 2, True, 'x'), bool: ('yes', 'off', 1, 'maybe'),
               str: (5, 'a', {'a': 1}, ['a']), dict: ({}, {'a': 1}, [], 'a'), list: ([], ['a'], {}, 'a')}
    compared = 0
    for key, schema in registry.settings_schemas().items():
        for name, spec in schema.items():
            if spec.get('choices') is not None or spec.get('min') is not None or spec.get('max') is not None:
                continue
            for value in samples[spec['type']]:
                try:
                    expected = validate_settings({name: value}, schema, PREFIX + key)[name]
                except Exception:  # noqa: BLE001 - the render refuses it; so must the boundary
                    expected = AnsibleFilterError
                if expected is AnsibleFilterError:
                    with pytest.raises(AnsibleFilterError):
                        f({PREFIX + key: {name: value}})
                else:
                    assert f({PREFIX + key: {name: value}})['settings'][key][name] == expected, (key, name, value)
                compared += 1
    assert compared > 300


def test_the_render_fills_no_default_after_the_boundary():
    """validate_settings on the filter's blocks finds every key present: what it returns is what it was given."""
    out = f({'gpu_sharing_stack_mps': {'replicas': 3}})['settings']
    for key, schema in registry.settings_schemas().items():
        block = out[key]
        assert set(block) == set(schema)
        assert validate_settings(block, schema, PREFIX + key) == block


def test_render_returns_the_settings_of_a_result():
    cfg = f({'gpu_sharing_stack_mps': {'replicas': 3}})
    out = f(cfg, render=True)
    assert out is cfg['settings'] and tuple(out) == gs.SETTINGS_KEYS and out['mps']['replicas'] == 3


def test_names_are_the_pool_settings_from_the_model():
    names = f({}, names=True)
    assert names == list(pool_setting_names())
    assert [n for n in names if n[len(PREFIX):] in gs.SETTINGS_KEYS] == [PREFIX + k for k in gs.SETTINGS_KEYS]


def test_every_pool_setting_is_a_role_option_and_the_playbooks_take_the_names_from_the_model():
    """The names the filter returns are options of role gpu_sharing_stack (main), and the playbooks collect them from
    each pool's hosts through the filter (names=true), with no list of their own (uninstall leaves out
    gpu_sharing_stack_validation: removal renders it anyway)."""
    options = _yaml('roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert set(pool_setting_names()) <= set(options)
    for playbook, var in (('cluster.yml', 'gpuops_cluster_pool_settings'),
                          ('uninstall.yml', 'gpuops_uninstall_pool_settings')):
        with open(os.path.join(ROOT, 'playbooks', playbook)) as fh:
            text = fh.read()
        block = text[text.index(var + ':'):]
        block = block[:block.index('}}') + 2]
        assert '{} | gpuops.k8s_gpu.stack_settings(names=true)' in block, playbook
        # no pool setting named in the playbook (comments aside) but gpu_sharing_stack_validation: uninstall's one
        # exclusion, and the switch cluster.yml sets from gpuops_cluster_validation
        code = '\n'.join(line for line in text.splitlines() if not line.strip().startswith('#'))
        named = set(re.findall(r'gpu_sharing_stack_[a-z_]+', code)) & set(pool_setting_names())
        assert named == {'gpu_sharing_stack_validation'}, (playbook, named)


@pytest.mark.parametrize('playbook', ['cluster.yml', 'uninstall.yml'])
def test_the_playbooks_pass_the_settings_whole(playbook):
    """No pool setting is mapped one by one into the role: the pool's settings travel as gpu_sharing_stack_settings."""
    with open(os.path.join(ROOT, 'playbooks', playbook)) as fh:
        text = fh.read()
    assert 'gpu_sharing_stack_settings: "{{ gpuops_pool.settings }}"' in text
    for name in pool_setting_names():
        assert not re.search(r'^\s+%s:' % name, text, re.M) or name == 'gpu_sharing_stack_validation', (playbook, name)


def test_every_pool_setting_has_a_role_default():
    """The role reads its own variables by name (query vars in tasks/settings.yml): each must have a default."""
    defaults = _yaml('roles', 'gpu_sharing_stack', 'defaults', 'main.yml')
    assert set(pool_setting_names()) <= set(defaults)
    assert defaults['gpu_sharing_stack_settings'] == {}


class _CostlyToCopy(dict):
    """Stands for Ansible's lazy template containers: their deep copy copies the templar with every variable of the
    task (at 5,000 inventory hosts, minutes and gigabytes per pool in cluster.yml's settings task)."""

    def __deepcopy__(self, memo):
        raise AssertionError('stack_settings deep-copied a templated container')


class _CostlyList(list):
    def __deepcopy__(self, memo):
        raise AssertionError('stack_settings deep-copied a templated container')


def test_templated_settings_are_validated_as_plain_data_without_deep_copies():
    settings = {'gpu_sharing_stack_mps': _CostlyToCopy(replicas=4),
                'gpu_sharing_stack_image_pull_secrets': _CostlyList(['regcred'])}
    out = f(settings, variables={'gpu_sharing_stack_volcano': _CostlyToCopy(version='1.15')})
    mps = out['settings']['mps']
    assert mps['replicas'] == 4 and not isinstance(mps, _CostlyToCopy)
    assert out['gpu_sharing_stack_image_pull_secrets'] == ['regcred']
    assert out['settings']['volcano']['version'] == '1.15'
    assert out == f({'gpu_sharing_stack_mps': {'replicas': 4}, 'gpu_sharing_stack_image_pull_secrets': ['regcred']},
                    variables={'gpu_sharing_stack_volcano': {'version': '1.15'}})


def test_argument_specs_are_read_once_per_process_and_file_version(tmp_path, monkeypatch):
    """A role pass calls the filter three times in one worker (settings.yml): the 800-line argument_specs.yml is parsed
    once (libyaml's loader: the Python one took 0.12 CPU-s a parse), the same options as a plain safe_load, and read
    again when the file changes; a default handed out is a copy (the cache is not changed through a result)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.filter import stack_settings as mod
    path = os.path.join(ROOT, 'roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')
    assert mod.role_options(path) == _yaml('roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')[
        'argument_specs']['main']['options']
    loads = []
    real_load = yaml.load
    monkeypatch.setattr(yaml, 'load', lambda stream, Loader: loads.append(Loader) or real_load(stream, Loader=Loader))
    copy = tmp_path / 'argument_specs.yml'
    copy.write_text(open(path).read())
    first = mod.role_options(str(copy))
    assert mod.role_options(str(copy)) is first and len(loads) == 1
    assert loads[0] is getattr(yaml, 'CSafeLoader', yaml.SafeLoader)
    out = f({}, options=first)
    out['gpu_sharing_stack_image_pull_secrets'].append('x')
    assert first['gpu_sharing_stack_image_pull_secrets'].get('default') in (None, [])
    text = copy.read_text().replace("default: kube-system", "default: gpu-system", 1)
    assert text != copy.read_text()
    copy.write_text(text + '\n# changed\n')
    assert mod.role_options(str(copy))['gpu_sharing_stack_namespace']['default'] == 'gpu-system' and len(loads) == 2
