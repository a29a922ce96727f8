# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/migrate_to_dra.yml's drain task, templated by ansible-core as the play does, run through the drain
(DRAX-11, DRAX-13). Here and not beside test_strategy_migration.py: these tests import ansible-core's templating,
which ansible-test's units do not offer to tests under tests/unit/plugins/module_utils."""
from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import strategy_migration as sm


def _drain_task():
    """The playbook's gpu_node_drain task that drains a node (the block's one task) and the play's settings check."""
    import os
    import yaml
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
    with open(os.path.join(root, 'playbooks', 'migrate_to_dra.yml')) as f:
        plays = yaml.safe_load(f)
    [block] = [t for t in plays[1]['tasks'] if 'block' in t]
    [task] = [t for t in block['block'] if 'gpuops.k8s_gpu.gpu_node_drain' in t]
    [check] = [t for t in plays[0]['tasks'] if t.get('name') == "Check the move's settings"]
    return task, block['rescue'][0], check


def _templated(args, keys, variables):
    """The task arguments ``keys`` as ansible-core templates them with the play's ``variables``."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    try:   # ansible-core 2.19+: only trusted strings are templated
        from ansible.template import trust_as_template
    except ImportError:   # older ansible-core: every string is a template
        def trust_as_template(value):
            return value
    templar = Templar(loader=DataLoader(), variables=variables)
    return dict((k, templar.template(trust_as_template(args[k]))) for k in keys)


@pytest.mark.parametrize('variables, forced', [({}, False), ({'gpuops_migrate_force': True}, True),
                                               ({'gpuops_migrate_force': 'false'}, False)])
def test_DRAX_11_the_drain_refuses_a_bare_gpu_pod_unless_forced(variables, forced):
    """A pod that declares no controller is not evicted by the move unless gpuops_migrate_force (as kubectl drain
    without --force; kubernetes/kubectl pkg/drain/filters.go unreplicatedFilter, v0.37.0-beta.0). Before the fix the
    task gave no force, the module's default (true) evicted the pod and nothing recreated it (the run over two real
    lab nodes, lab/tests/integration/test_dra_migrate_pool_real.py)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain
    task, rescue, check = _drain_task()
    args = task['gpuops.k8s_gpu.gpu_node_drain']
    assert 'force' in args, args
    force = _templated(args, ('force',), variables)['force']
    assert force is forced
    bare = {'metadata': {'name': 'bare', 'namespace': 'team'},
            'spec': {'containers': [{'name': 'c', 'resources': {'limits': {'nvidia.com/gpu': '1'}}}]},
            'status': {'phase': 'Running'}}
    evict, _wait, _kept, refused = drain.select_pods([bare], 'all', ['nvidia.com/gpu'], force=force)
    assert (len(evict), [r for r, _p in refused]) == ((1, []) if forced else (0, [drain.REFUSED_UNMANAGED]))
    assert 'gpuops_migrate_force' in rescue['ansible.builtin.fail']['msg']
    assert any('gpuops_migrate_force' in c for c in check['ansible.builtin.assert']['that'])


class _Core(object):
    """One node and its pods in memory (CoreV1Api as gpu_sharing_drain calls it); records every call."""

    def __init__(self, pods):
        self.node = {'metadata': {'name': 'n1', 'labels': {}, 'annotations': {}}, 'spec': {}}
        self.pods = pods
        self.calls = []

    def read_node(self, name, _preload_content=False):
        self.calls.append('get')
        return type('R', (), {'data': json.dumps(self.node)})()

    def list_pod_for_all_namespaces(self, field_selector, label_selector=None, _preload_content=False):
        self.calls.append('list')
        return type('R', (), {'data': json.dumps({'items': self.pods})})()

    def patch_node(self, name, body, _preload_content=False):
        self.calls.append('patch')
        self.node['spec'].update(body.get('spec') or {})

    def create_namespaced_pod_eviction(self, name, namespace, body, _preload_content=False):
        self.calls.append('evict %s/%s' % (namespace, name))
        self.pods = [p for p in self.pods if p['metadata']['name'] != name]


def _ds_pod(name, gpu):
    res = {'limits': {'nvidia.com/gpu': '1'}} if gpu else {}
    return {'metadata': {'name': name, 'namespace': 'mon', 'uid': name,
                         'ownerReferences': [{'kind': 'DaemonSet', 'name': name + '-ds', 'controller': True}]},
            'spec': {'containers': [{'name': 'c', 'resources': res}]}, 'status': {'phase': 'Running'}}


@pytest.mark.parametrize('variables, gpu, refused', [({}, True, True), ({}, False, False),
                                                     ({'gpuops_migrate_accept_daemonset_gpus': True}, True, False),
                                                     ({'gpuops_migrate_accept_daemonset_gpus': 'false'}, True, True)])
def test_DRAX_13_a_daemonset_pod_holding_a_gpu_stops_the_move_unless_accepted(variables, gpu, refused):
    """A DaemonSet pod is kept by the move's drain (kubectl drain --ignore-daemonsets) and the kubelet keeps a running
    container's devices, while the target's plugin publishes the same GPU: a DaemonSet pod with ``limits:
    nvidia.com/gpu: 1`` stops the move at its node before anything is written (not marked, not cordoned, nothing
    evicted), named with its DaemonSet, unless gpuops_migrate_accept_daemonset_gpus; one without a GPU is kept as
    before. Before the fix the task kept every DaemonSet pod and moved the node."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain
    task, rescue, check = _drain_task()
    args = task['gpuops.k8s_gpu.gpu_node_drain']
    opts = _templated(args, ('keep_gpu_daemonset_pods', 'force'), variables)
    train = {'metadata': {'name': 'train', 'namespace': 'team', 'uid': 't',
                          'ownerReferences': [{'kind': 'ReplicaSet', 'name': 'train', 'controller': True}]},
             'spec': {'containers': [{'name': 'c', 'resources': {'limits': {'nvidia.com/gpu': '1'}}}]},
             'status': {'phase': 'Running'}}
    core = _Core([_ds_pod('agent', gpu), train])
    worker = drain.Drainer(core, sleep=lambda s: None)
    run = dict(mark={'annotation': sm.MARK_ANNOTATION, 'value': 'dra'}, pause_gpu_clients=False, **opts)
    if refused:
        with pytest.raises(drain.DrainError) as err:
            worker.drain('n1', 'gpu', drain.default_gpu_resources(), 10, 1, **run)
        assert 'mon/agent (DaemonSet mon/agent-ds) holds nvidia.com/gpu' in str(err.value)
        assert core.calls == ['get', 'list'] and err.value.done == []
    else:
        res = worker.drain('n1', 'gpu', drain.default_gpu_resources(), 10, 1, **run)
        assert res['kept'] == ['mon/agent'] and res['evicted'] == ['team/train']
    assert 'gpuops_migrate_accept_daemonset_gpus' in rescue['ansible.builtin.fail']['msg']
    assert any('gpuops_migrate_accept_daemonset_gpus' in c for c in check['ansible.builtin.assert']['that'])
