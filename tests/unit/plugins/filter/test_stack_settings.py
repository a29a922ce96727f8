# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter stack_settings: a pool's settings travel as one dict, defaulted once from role gpu_sharing_stack's
argument_specs."""
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter.stack_settings import FilterModule, pool_setting_names
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
f = FilterModule().filters()['stack_settings']


def _yaml(*path):
    with open(os.path.join(ROOT, *path)) as fh:
        return yaml.safe_load(fh)


def test_defaults_come_from_argument_specs():
    out = f({})
    assert tuple(out) == pool_setting_names()
    assert out['gpu_sharing_stack_namespace'] == 'kube-system'
    assert out['gpu_sharing_stack_hami'] == {} and out['gpu_sharing_stack_helm_install'] is True
    assert out['gpu_sharing_stack_validation_image'].startswith('nvcr.io/nvidia/k8s/cuda-sample:')
    assert out['gpu_sharing_stack_registry'] is None          # no default in argument_specs: the role's variable


def test_the_pool_wins_over_the_variables_which_win_over_the_defaults():
    out = f({'gpu_sharing_stack_hami': {'device_split_count': 4}},
            variables={'gpu_sharing_stack_hami': {'x': 1}, 'gpu_sharing_stack_namespace': 'gpu',
                       'gpu_sharing_stack_registry': 'mirror.local'})
    assert out['gpu_sharing_stack_hami'] == {'device_split_count': 4}
    assert out['gpu_sharing_stack_namespace'] == 'gpu' and out['gpu_sharing_stack_registry'] == 'mirror.local'
    assert out['gpu_sharing_stack_validation'] is False


def test_bad_input_names_the_variable():
    with pytest.raises(AnsibleFilterError, match=r'unknown key\(s\) gpu_sharing_stack_hamii'):
        f({'gpu_sharing_stack_hamii': {}})
    with pytest.raises(AnsibleFilterError, match='gpu_sharing_stack_hami'):
        f({'gpu_sharing_stack_hami': 'not a dict'})
    with pytest.raises(AnsibleFilterError, match='gpu_sharing_stack_allow_mixed_accounting'):
        f({'gpu_sharing_stack_allow_mixed_accounting': 'maybe'})
    with pytest.raises(AnsibleFilterError, match='must be a dictionary'):
        f(['gpu_sharing_stack_hami'])


def test_render_keys_are_the_models_settings_keys():
    out = f(f({'gpu_sharing_stack_mps': {'replicas': 3}}), render=True)
    assert tuple(out) == gs.SETTINGS_KEYS and out['mps'] == {'replicas': 3} and out['nvidia'] == {}


def test_every_pool_setting_is_a_role_option_and_a_playbook_pool_setting():
    """The names the filter returns are options of role gpu_sharing_stack (main), and the playbooks collect exactly
    those from each pool's hosts (uninstall leaves out gpu_sharing_stack_validation: removal renders it anyway)."""
    options = _yaml('roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert set(pool_setting_names()) <= set(options)
    for playbook, var, left_out in (('cluster.yml', 'gpuops_cluster_pool_settings', set()),
                                    ('uninstall.yml', 'gpuops_uninstall_pool_settings',
                                     {'gpu_sharing_stack_validation'})):
        with open(os.path.join(ROOT, 'playbooks', playbook)) as fh:
            text = fh.read()
        block = text[text.index(var + ':'):]
        block = block[:block.index(']')]
        assert set(re.findall(r'gpu_sharing_stack_[a-z_]+', block)) == set(pool_setting_names()) - left_out, playbook


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
    assert out['gpu_sharing_stack_mps'] == {'replicas': 4} and not isinstance(out['gpu_sharing_stack_mps'], _CostlyToCopy)
    assert out['gpu_sharing_stack_image_pull_secrets'] == ['regcred']
    assert out['gpu_sharing_stack_volcano'] == {'version': '1.15'}
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
