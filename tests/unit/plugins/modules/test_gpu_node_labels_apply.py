# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node_labels_apply's main() in plan mode: one run reads, plans, refuses conflicts and patches."""
import pytest

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import capture_exit, main_runner
from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_node_labels_apply as mod
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import node_labels_apply as labels

PLAN = {'nodes': [{'host': 'h', 'node': 'n', 'strategy': 'mps', 'pools': ['p'], 'labels': {'a': 'b'}, 'defaults': {},
                   'claimed': []}], 'errors': []}


class Client(object):
    def CoreV1Api(self, client):
        return ('core', client)


@pytest.fixture
def run(monkeypatch):
    calls = []
    capture_exit(monkeypatch)
    monkeypatch.setattr(mod, 'k8s_client', Client())
    monkeypatch.setattr(access, 'api_client', lambda params: 'c')

    def plan_and_apply(api, static, options, check_mode=False):
        calls.append(('plan', api, static, options, check_mode))
        if static['nodes'][0]['node'] == 'conflict':
            return {'nodes': [{'node': 'conflict', 'found': True, 'changed': False}], 'errors': ['n: someone else']}, None
        return ({'nodes': [{'node': 'n', 'found': True, 'changed': True}], 'errors': []},
                [{'node': 'n', 'changed': True, 'diff': {'before': {}, 'after': {}}}])

    monkeypatch.setattr(labels, 'plan_and_apply', plan_and_apply)

    return main_runner(mod.main, calls)


def test_plan_mode_returns_the_plan_and_the_patches(run):
    res = run({'plan': PLAN, 'state': 'present'}, check=True)
    assert res['failed'] is False and res['changed'] is True
    assert res['nodes'] == [{'node': 'n', 'found': True, 'changed': True}]
    assert res['results'] == [{'node': 'n', 'changed': True}]      # no diff unless asked
    (name, api, static, options, check_mode), = run.calls
    assert api == ('core', 'c') and static == PLAN and check_mode is True
    assert options == {'state': 'present', 'strategy_label': 'gpuops.io/sharing-strategy',
                       'record_annotation': 'gpuops.io/managed-labels', 'check_resources': True,
                       'fail_on_missing_nodes': True}


def test_plan_conflicts_fail_with_the_role_message_and_patch_nothing(run):
    plan = {'nodes': [dict(PLAN['nodes'][0], node='conflict')], 'errors': []}
    res = run({'plan': plan})
    assert res['failed'] and res['msg'] == 'gpu_node_labels refused, nothing was changed: n: someone else'
    assert res['errors'] == ['n: someone else'] and res['results'] == []


@pytest.mark.parametrize('args, message', [
    ({}, 'one of the following is required: patches, plan'),
    ({'plan': PLAN, 'patches': []}, 'parameters are mutually exclusive: patches|plan'),
    ({'plan': {'nodes': [], 'errors': ['h: bad pool']}}, 'gpu_node_labels_apply refused, nothing was sent: h: bad pool'),
    ({'plan': PLAN, 'state': 'gone'}, 'value of state must be one of: present, absent'),
])
def test_bad_arguments_fail_before_any_request(run, args, message):
    res = run(args)
    assert res['failed'] and message in res['msg'], res['msg']
    assert run.calls == []
