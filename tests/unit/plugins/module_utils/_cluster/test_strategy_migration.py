# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Playbook migrate_to_dra's plan (module_utils _cluster/strategy_migration.py; row DRAX-08): each node's step and the
label plan gpu_node_labels_apply applies; lab/tests/integration/test_dra_migrate_real.py runs the playbook."""
import json
import re

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import label_plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import strategy_migration as sm

TS = {'pool': 'ts', 'strategy': 'time-slicing', 'labels': {'nvidia.com/device-plugin.config': 'ts'}}
DRA = {'pool': 'dra', 'strategy': 'dra'}


def node(name, strategy, pool, extra=None, marked=False, record=None):
    labels = {'gpuops.io/sharing-strategy': strategy, 'gpuops.io/sharing-pool': pool,
              'nvidia.com/gpu.product': 'Tesla-T4'}
    labels.update(extra or {})
    if record is None:
        record = dict((k, {'value': v, 'previous': None}) for k, v in labels.items())
    ann = {'gpuops.io/managed-labels': json.dumps(record)}
    if marked:
        ann[sm.MARK_ANNOTATION] = 'dra'
    return {'metadata': {'name': name, 'labels': labels, 'annotations': ann}, 'status': {'allocatable': {}}}


def test_DRAX_08_step_per_node_and_the_label_switch():
    nodes = [node('n1', 'time-slicing', 'ts', {'nvidia.com/device-plugin.config': 'ts'}),
             node('n2', 'dra', 'dra', {'nvidia.com/gpu.deploy.device-plugin': 'false'}),
             node('n3', 'dra', 'dra', marked=True)]
    out = sm.migration_plan(nodes, [{'host': h, 'node': h} for h in ('n1', 'n2', 'n3')], TS, DRA)
    assert out['errors'] == []
    s1, s2, s3 = out['steps']
    assert (s1['action'], s2['action'], s3['action']) == ('migrate', 'skip', 'resume')
    assert s1['wait'] == {'kind': 'slice', 'driver': 'gpu.nvidia.com'} and s2['labels'] is None
    # role gpu_node_labels' plan from the step (no inventory group: the stack's labels only)
    static = label_plan.label_static_plan({}, {}, group='', stacks=s1['stacks'])
    assert static['errors'] == []
    [want] = static['nodes']
    assert want['labels'] == s1['labels'] == {'gpuops.io/sharing-strategy': 'dra', 'gpuops.io/sharing-pool': 'dra',
                                              'nvidia.com/gpu.deploy.device-plugin': 'false',
                                              'nvidia.com/gpu.product': 'Tesla-T4'}
    assert want['node'] == 'n1' and want['pools'] == ['dra']
    # what gpu_node_labels_apply then patches: the source stack's label removed, the record rewritten
    live = label_plan.label_live_plan(static, nodes)
    assert live['errors'] == []
    [p] = live['nodes']
    assert p['patch']['metadata']['labels'] == {'gpuops.io/sharing-strategy': 'dra', 'gpuops.io/sharing-pool': 'dra',
                                                'nvidia.com/gpu.deploy.device-plugin': 'false',
                                                'nvidia.com/device-plugin.config': None}
    record = json.loads(p['patch']['metadata']['annotations']['gpuops.io/managed-labels'])
    assert sorted(record) == ['gpuops.io/sharing-pool', 'gpuops.io/sharing-strategy',
                              'nvidia.com/gpu.deploy.device-plugin', 'nvidia.com/gpu.product']


def test_DRAX_08_and_back_waits_for_the_device_plugins_resource():
    n = node('n1', 'dra', 'dra', {'nvidia.com/gpu.deploy.device-plugin': 'false'})
    [s] = sm.migration_plan([n], [{'host': 'h1', 'node': 'n1'}], DRA, TS)['steps']
    assert s['action'] == 'migrate' and s['wait'] == {'kind': 'resource', 'resource': 'nvidia.com/gpu'}
    assert s['labels'] == {'gpuops.io/sharing-strategy': 'time-slicing',
                           'gpuops.io/sharing-pool': 'ts', 'nvidia.com/device-plugin.config': 'ts',
                           'nvidia.com/gpu.product': 'Tesla-T4'}


def test_DRAX_09_each_step_waits_for_the_source_plugin_to_leave():
    """Found on a real lab node (lab/tests/integration/test_dra_migrate_node_real.py): the kubelet keeps a stopped DRA
    plugin's ResourceSlices 30 s (kubelet 1.37 pkg/kubelet/cm/dra/manager.go defaultWipingDelay) and a stopped device
    plugin's resource in the capacity 5 min (allocatable 0 at once: devicemanager PluginDisconnected). Uncordoning
    before the source plugin's devices left lets both hand out the GPU; every step waits for them first."""
    to_dra = sm.migration_plan([node('n1', 'time-slicing', 'ts', {'nvidia.com/device-plugin.config': 'ts'})],
                               [{'host': 'h1', 'node': 'n1'}], TS, DRA)['steps'][0]
    assert to_dra['leave'] == {'kind': 'resource', 'resource': 'nvidia.com/gpu'}
    back = sm.migration_plan([node('n1', 'dra', 'dra', {'nvidia.com/gpu.deploy.device-plugin': 'false'})],
                             [{'host': 'h1', 'node': 'n1'}], DRA, dict(TS, resource='nvidia.com/gpu.shared'))
    assert back['steps'][0]['leave'] == {'kind': 'slice', 'driver': 'gpu.nvidia.com'}
    assert back['steps'][0]['wait'] == {'kind': 'resource', 'resource': 'nvidia.com/gpu.shared'}
    # a resumed node waits the same way; a skipped one too (nothing to wait for once it left)
    resumed = sm.migration_plan([node('n1', 'dra', 'dra', marked=True)], [{'host': 'h1', 'node': 'n1'}], TS,
                                DRA)['steps'][0]
    assert (resumed['action'], resumed['leave']) == ('resume', {'kind': 'resource', 'resource': 'nvidia.com/gpu'})


@pytest.mark.parametrize('src,dst,match', [
    (TS, dict(TS, pool='ts2'), 'one side of the migration must be a dra pool'),
    (DRA, dict(DRA, pool='dra2'), 'one side of the migration must be a dra pool'),
    (dict(TS, strategy='vgpu'), DRA, r'gpuops_migrate_from.strategy must be one of .*; got .vgpu.'),
    (dict(TS, pool=''), DRA, 'gpuops_migrate_from.pool must be the name of a sharing pool'),
    (TS, dict(DRA, labels={'gpuops.io/sharing-pool': 'x'}), 'gpuops_migrate_to.labels must not hold'),
    (TS, dict(DRA, colour='red'), r'gpuops_migrate_to: unknown key\(s\) colour'),
])
def test_DRAX_08_bad_sides_refused_by_name(src, dst, match):
    out = sm.migration_plan([], [], src, dst)
    assert out['steps'] == [] and len(out['errors']) == 1
    assert re.search(match, out['errors'][0]), out['errors']


def test_DRAX_08_node_in_neither_pool_or_missing_refused():
    out = sm.migration_plan([node('n1', 'mig', 'other')], [{'host': 'h1', 'node': 'n1'}, {'host': 'h2', 'node': 'gone'}],
                            TS, DRA)
    assert out['errors'] == [
        'h1: node n1 is on pool other (strategy mig), neither the source pool ts (time-slicing) nor the target pool '
        'dra (dra); nothing was changed',
        'h2: its node is not in the cluster (set gpuops_migrate_node_name for the host)']


def test_DRAX_08_drain_takes_the_pods_holding_dra_devices():
    """gpu_node_drain (mode gpu) evicts the pods that hold DRA devices whatever their resources are named: a pod
    with a ResourceClaim and a pod whose extended resource the scheduler backed with DRA; not a CPU pod."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import gpu_sharing_drain as drain

    def pod(name, spec=None, status=None):
        return {'metadata': {'name': name, 'namespace': 'ml', 'ownerReferences': [{'kind': 'ReplicaSet'}]},
                'spec': dict({'containers': [{'name': 'c'}]}, **(spec or {})),
                'status': dict({'phase': 'Running'}, **(status or {}))}
    pods = [pod('claim', spec={'resourceClaims': [{'name': 'gpu', 'resourceClaimTemplateName': 'gpu'}]}),
            pod('extended', spec={'containers': [{'name': 'c', 'resources': {'limits': {'example.com/small-gpu': '1'}}}]},
                status={'extendedResourceClaimStatus': {'resourceClaimName': 'extended-extended-resources-a',
                                                        'requestMappings': [{'containerName': 'c',
                                                                             'resourceName': 'example.com/small-gpu',
                                                                             'requestName': 'container-0-request-0'}]}}),
            pod('web')]
    evict, wait, kept, refused = drain.select_pods(pods, 'gpu', drain.DEFAULT_GPU_RESOURCES)
    assert [p['metadata']['name'] for p in evict] == ['claim', 'extended']
    assert [p['metadata']['name'] for p in kept] == ['web'] and not wait and not refused


def shared(name, replicas, allocatable, resource='nvidia.com/gpu'):
    n = node(name, 'time-slicing', 'ts', {'nvidia.com/device-plugin.config': 'ts',
                                          'nvidia.com/gpu.replicas': str(replicas)})
    n['status']['allocatable'] = {resource: str(allocatable)}
    return n


def test_DRAX_10_a_move_that_holds_fewer_pods_is_refused_unless_accepted():
    """Time-slicing 4 ways on one T4: 4 pods ran on the node; under DRA each pod's claim takes the whole GPU: 1."""
    hosts = [{'host': 'h1', 'node': 'n1'}]
    out = sm.migration_plan([shared('n1', 4, 4)], hosts, TS, DRA)
    assert out['steps'] == []
    [err] = out['errors']
    assert 'h1: node n1 shares each GPU 4 ways on pool ts (nvidia.com/gpu.replicas=4): nvidia.com/gpu 4' in err
    assert 'the same pods get 1' in err and 'gpuops_migrate_accept_capacity_loss' in err and 'nothing was changed' in err
    [s] = sm.migration_plan([shared('n1', 4, 4)], hosts, TS, DRA, accept_capacity_loss=True)['steps']
    assert s['action'] == 'migrate' and s['capacity'] == {'resource': 'nvidia.com/gpu', 'before': 4, 'after': 1,
                                                          'replicas': 4}
    assert s['reason'].endswith('nvidia.com/gpu 4 -> 1 pods (accepted)')
    # the resource the pool's pods ask for (renamed by the device plugin: nvidia.com/gpu.shared), 8 GPUs x 2
    ts_shared = dict(TS, resource='nvidia.com/gpu.shared')
    [s] = sm.migration_plan([shared('n1', 2, 16, 'nvidia.com/gpu.shared')], hosts, ts_shared, DRA,
                            accept_capacity_loss=True)['steps']
    assert s['capacity'] == {'resource': 'nvidia.com/gpu.shared', 'before': 16, 'after': 8, 'replicas': 2}


@pytest.mark.parametrize('replicas,allocatable', [('1', '1'), (None, '1'), ('4', None), ('x', '4'), ('4', '0'),
                                                  ('4', '1')])
def test_DRAX_10_no_loss_no_refusal(replicas, allocatable):
    """One pod per GPU before (replicas 1, or no GFD label), or nothing advertised: nothing to accept."""
    n = node('n1', 'time-slicing', 'ts', {'nvidia.com/device-plugin.config': 'ts'})
    if replicas is not None:
        n['metadata']['labels']['nvidia.com/gpu.replicas'] = replicas
    if allocatable is not None:
        n['status']['allocatable'] = {'nvidia.com/gpu': allocatable}
    out = sm.migration_plan([n], [{'host': 'h1', 'node': 'n1'}], TS, DRA)
    assert out['errors'] == [] and out['steps'][0]['capacity'] is None


def test_DRAX_10_back_to_the_device_plugin_never_loses():
    """From a dra pool to a time-slicing pool the device plugin gives N units per GPU: no loss, no question."""
    n = node('n1', 'dra', 'dra', {'nvidia.com/gpu.deploy.device-plugin': 'false', 'nvidia.com/gpu.replicas': '4'})
    [s] = sm.migration_plan([n], [{'host': 'h1', 'node': 'n1'}], DRA, TS)['steps']
    assert s['action'] == 'migrate' and s['capacity'] is None


@pytest.mark.parametrize('allocatable,before,after', [('2k', 2000, 8), ('1k', 1000, 4), ('1e3', 1000, 4)])
def test_DRAX_10_allocatable_read_as_a_quantity(allocatable, before, after):
    """The API server writes a quantity in its canonical form, the largest suffix without a fraction: a device plugin
    sharing 8 GPUs 250 ways advertises nvidia.com/gpu 2000, which the Node holds as "2k" (k8s.io/apimachinery
    pkg/api/resource, v0.37.2: "1000" is canonical "1k"). Read as a plain integer it was no count, and the move that
    leaves 8 pods of 2000 went ahead unasked; read as a quantity (kube/quantity.py) it is refused unless accepted."""
    hosts = [{'host': 'h1', 'node': 'n1'}]
    out = sm.migration_plan([shared('n1', 250, allocatable)], hosts, TS, DRA)
    assert out['steps'] == [] and len(out['errors']) == 1
    [s] = sm.migration_plan([shared('n1', 250, allocatable)], hosts, TS, DRA, accept_capacity_loss=True)['steps']
    assert s['capacity'] == {'resource': 'nvidia.com/gpu', 'before': before, 'after': after, 'replicas': 250}


T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4'}],
      'sharing': {'mps': {'allowed': True, 'max_clients': 48}, 'mig': {'allowed': False, 'reason': 'not MIG capable'}}}
DRA_SETTINGS = {'dra': {'chart_path': '/charts/dra-driver-nvidia-gpu', 'chart_version': 'v0.5.0', 'kube_version': 'v1.34.2'}}


def _rendered(strategy, pool):
    """The node labels cluster.yml gives node n1 of pool ``pool`` (the stack's render, as gpu_sharing_stack publishes
    it to gpu_node_labels)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
    out = render.render({'strategy': strategy, 'pool': pool, 'nodes': ['n1'], 'facts': {'n1': T4},
                         'settings': DRA_SETTINGS if strategy == 'dra' else {},
                         'cdi_enabled': {'n1': True}})
    return out['node_labels']['n1']


def _apply(n, static):
    """Node ``n`` after gpu_node_labels_apply's merge patch of ``static``."""
    [p] = label_plan.label_live_plan(static, [n])['nodes']
    meta = n['metadata']
    labels = dict(meta['labels'])
    for k, v in (p['patch']['metadata'].get('labels') or {}).items():
        if v is None:
            labels.pop(k, None)
        else:
            labels[k] = v
    ann = dict(meta['annotations'])
    ann.update(p['patch']['metadata'].get('annotations') or {})
    return {'metadata': {'name': meta['name'], 'labels': labels, 'annotations': ann}, 'status': n['status']}


def _cluster_yml(strategy, pool, n=None):
    """Node n1 as cluster.yml leaves it on pool ``pool``: GFD's label and the pool stack's labels, recorded."""
    gfd = {'nvidia.com/gpu.product': 'Tesla-T4'}
    n = n or {'metadata': {'name': 'n1', 'labels': dict(gfd), 'annotations': {}}, 'status': {'allocatable': {}}}
    hv = {'n1': {'gpu_probe_facts': {'labels': gfd}}}
    stacks = {pool: {'node_labels': {'n1': _rendered(strategy, pool)}, 'node_label_defaults': {}}}
    return _apply(n, label_plan.label_static_plan({'gpu_nodes': ['n1']}, hv, stacks=stacks))


@pytest.mark.parametrize('strategy', ['exclusive', 'time-slicing', 'mps', 'dra'])
def test_DRAX_08_pool_labels_are_the_renders(strategy):
    """The default side labels are the node labels the pool's render gives (with the GPU operator's confinement)."""
    labels, keys, unknown = sm.pool_labels(strategy)
    rendered = _rendered(strategy, 'p1')
    # the replicas per GPU (time-slicing, mps: gpuops.io/sharing-replicas, issue #36) come from the pool's settings:
    # unknown to the switch, which names them (the render's default of 4 here)
    own = {'gpuops.io/sharing-replicas': '4'} if strategy in ('time-slicing', 'mps') else {}
    assert dict(labels, **dict(own, **{'gpuops.io/sharing-strategy': strategy, 'gpuops.io/sharing-pool': 'p1'})) == rendered
    assert set(labels) <= set(keys) and unknown == sorted(own)
    assert set(unknown) <= set(keys)


def test_DRAX_08_the_switch_leaves_the_labels_cluster_yml_gives():
    """Found by the lifecycle suite (lab/tests/integration/test_lifecycle_suite_real.py, SWITCH_LEFTOVERS): the switch
    of an exclusive pool's node to a dra pool kept the exclusive stack's nvidia.com/device-plugin.config and the GPU
    operator's confinement nvidia.com/gpu.deploy.operands=false (recorded by cluster.yml, not the side's labels); a move
    back did not set them. After each switch the node carries what cluster.yml with the moved inventory gives it."""
    ex = _cluster_yml('exclusive', 'ex')
    assert ex['metadata']['labels']['nvidia.com/gpu.deploy.operands'] == 'false'
    src, dst = {'pool': 'ex', 'strategy': 'exclusive'}, {'pool': 'dra', 'strategy': 'dra'}
    [step] = sm.migration_plan([ex], [{'host': 'n1', 'node': 'n1'}], src, dst)['steps']
    assert step['action'] == 'migrate'
    moved = _apply(ex, label_plan.label_static_plan({}, {}, group='', stacks=step['stacks']))
    assert moved['metadata']['labels'] == _cluster_yml('dra', 'dra', moved)['metadata']['labels'] == dict(
        _rendered('dra', 'dra'), **{'nvidia.com/gpu.product': 'Tesla-T4'})
    # and back: the exclusive stack's labels set again
    [back] = sm.migration_plan([moved], [{'host': 'n1', 'node': 'n1'}], dst, src)['steps']
    again = _apply(moved, label_plan.label_static_plan({}, {}, group='', stacks=back['stacks']))
    assert again['metadata']['labels'] == _cluster_yml('exclusive', 'ex', again)['metadata']['labels'] == dict(
        _rendered('exclusive', 'ex'), **{'nvidia.com/gpu.product': 'Tesla-T4'})
    # cluster.yml afterwards writes nothing
    [p] = label_plan.label_live_plan(label_plan.label_static_plan(
        {'gpu_nodes': ['n1']}, {'n1': {'gpu_probe_facts': {'labels': {'nvidia.com/gpu.product': 'Tesla-T4'}}}},
        stacks={'ex': {'node_labels': {'n1': _rendered('exclusive', 'ex')}, 'node_label_defaults': {}}}), [again])['nodes']
    assert p['changed'] is False, p['patch']
    assert step['unset'] == back['unset'] == []


def test_DRAX_08_a_target_label_from_the_pools_settings_is_named():
    """A mig pool's labels (its geometry's config, the MIG manager's deploy labels) come from its settings: the switch
    onto it cannot set them and says so in the step's reason; given as gpuops_migrate_to.labels they are set."""
    n = node('n1', 'dra', 'dra', {'nvidia.com/gpu.deploy.device-plugin': 'false'})
    [s] = sm.migration_plan([n], [{'host': 'h1', 'node': 'n1'}], DRA, {'pool': 'm', 'strategy': 'mig'})['steps']
    assert 'nvidia.com/mig.config' in s['unset'] and 'nvidia.com/gpu.deploy.operands' in s['unset']
    assert re.search(r"not set, their values come from pool m's settings .*: .*nvidia\.com/mig\.config", s['reason'])
    assert s['labels'] == {'gpuops.io/sharing-strategy': 'mig', 'gpuops.io/sharing-pool': 'm',
                           'nvidia.com/gpu.product': 'Tesla-T4'}
    [s] = sm.migration_plan([n], [{'host': 'h1', 'node': 'n1'}], DRA,
                            {'pool': 'm', 'strategy': 'mig', 'labels': {'nvidia.com/mig.config': 'all-1g.10gb'}})['steps']
    assert s['unset'] == [] and s['labels']['nvidia.com/mig.config'] == 'all-1g.10gb' and 'not set' not in s['reason']


def test_a_custom_strategy_label_is_read_and_switched():
    """A site whose gpu_node_labels_strategy_label is its own key (#36): the node's pool is read from that key and the
    switch writes it; the default key is neither read nor written."""
    custom = 'example.com/gpu-strategy'
    n = node('n1', 'time-slicing', 'ts', {'nvidia.com/device-plugin.config': 'ts'})
    labels = n['metadata']['labels']
    labels[custom] = labels.pop('gpuops.io/sharing-strategy')
    record = json.loads(n['metadata']['annotations']['gpuops.io/managed-labels'])
    record[custom] = record.pop('gpuops.io/sharing-strategy')
    n['metadata']['annotations']['gpuops.io/managed-labels'] = json.dumps(record)
    out = sm.migration_plan([n], [{'host': 'n1', 'node': 'n1'}], TS, DRA, strategy_label=custom)
    assert out['errors'] == []
    [s] = out['steps']
    assert s['action'] == 'migrate'
    assert s['labels'] == {custom: 'dra', 'gpuops.io/sharing-pool': 'dra', 'nvidia.com/gpu.deploy.device-plugin': 'false',
                           'nvidia.com/gpu.product': 'Tesla-T4'}
    # by the default key the node is in no pool: refused, nothing changed
    out = sm.migration_plan([n], [{'host': 'n1', 'node': 'n1'}], TS, DRA)
    assert 'is on pool ts (strategy -)' in out['errors'][0]
    # a side's labels must not hold the site's strategy key either
    out = sm.migration_plan([n], [{'host': 'n1', 'node': 'n1'}], TS, dict(DRA, labels={custom: 'x'}),
                            strategy_label=custom)
    assert out['errors'] == ['gpuops_migrate_to.labels must not hold %s or gpuops.io/sharing-pool (they come from '
                             'strategy and pool)' % custom]


def test_DRAX_10_without_gfd_the_collections_replicas_record_tells_the_loss():
    """The collection's stacks do not deploy GFD: a time-slicing node of its own pool has no nvidia.com/gpu.replicas,
    only the replicas its stack configured (gpuops.io/sharing-replicas, issue #36). The move that holds fewer pods is
    refused by that record too; GFD's label wins where both exist."""
    hosts = [{'host': 'h1', 'node': 'n1'}]
    n = node('n1', 'time-slicing', 'ts', {'nvidia.com/device-plugin.config': 'ts', 'gpuops.io/sharing-replicas': '3'})
    n['status']['allocatable'] = {'nvidia.com/gpu': '6'}
    [err] = sm.migration_plan([n], hosts, TS, DRA)['errors']
    assert 'h1: node n1 shares each GPU 3 ways on pool ts (gpuops.io/sharing-replicas=3): nvidia.com/gpu 6' in err
    assert 'the same pods get 2' in err
    n['metadata']['labels']['nvidia.com/gpu.replicas'] = '1'
    out = sm.migration_plan([n], hosts, TS, DRA)
    assert out['errors'] == [] and out['steps'][0]['capacity'] is None
