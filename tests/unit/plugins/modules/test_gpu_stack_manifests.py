# -*- coding: utf-8 -*-
import pytest

from ansible.module_utils import basic

from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_stack_manifests
from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args


class Exit(Exception):
    pass


def run(monkeypatch, args):
    out = {}

    def exit_json(self, **kw):
        out.update(kw)
        raise Exit()

    def fail_json(self, **kw):
        out.update(kw)
        out['failed'] = True
        raise Exit()
    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)
    with module_args(args):
        with pytest.raises(Exit):
            gpu_stack_manifests.main()
    return out


def test_renders_time_slicing(monkeypatch):
    out = run(monkeypatch, {'strategy': 'time-slicing', 'pool': 'a', 'nodes': ['n1'],
                            'settings': {'time_slicing': {'replicas': 2}}})
    assert not out.get('failed') and out['changed'] is False
    assert any(m['kind'] == 'DaemonSet' for m in out['manifests'])
    assert out['node_manifests'][0]['metadata']['labels']['gpuops.io/sharing-pool'] == 'a'


def test_bad_input_fails_naming_the_variable(monkeypatch):
    out = run(monkeypatch, {'strategy': 'time-slicing', 'pool': 'a', 'nodes': ['n1'],
                            'settings': {'time_slicing': {'replicas': 1}}})
    assert out['failed'] and 'gpu_sharing_stack_time_slicing.replicas' in out['msg']


def test_pool_name_checked(monkeypatch):
    out = run(monkeypatch, {'strategy': 'exclusive', 'pool': 'Bad_Pool', 'nodes': ['n1']})
    assert out['failed'] and 'gpu_sharing_stack_pool' in out['msg']
