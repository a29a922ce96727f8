# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster plans, pool_plan and label_plan: the sharing pools of the GPU nodes and the node-label plans (what
the Jinja templates sharing_pools.json.j2, static_plan.json.j2 and live_plan.json.j2 did), every branch."""
import json

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import sharing_pools
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan import (
    label_live_plan, label_static_plan, stack_node_labels,
)

T4_LABELS = {'nvidia.com/gpu.product': 'Tesla-T4', 'nvidia.com/gpu.count': 1}


def inv(pools, extra_groups=None, hostvars=None):
    """pools: group -> {host: vars}; returns (groups, hostvars) as Ansible gives them."""
    groups = {'all': [], 'ungrouped': [], 'gpu_nodes': [], 'kube_control_plane': ['cp']}
    hv = {}
    for g, hosts in pools.items():
        groups[g] = list(hosts)
        for h, v in hosts.items():
            if h not in groups['gpu_nodes']:
                groups['gpu_nodes'].append(h)
            hv.setdefault(h, {'group_names': []})
            hv[h]['group_names'].append(g)
            hv[h].update(v)
    for g, hosts in (extra_groups or {}).items():
        groups[g] = list(hosts)
        for h in hosts:
            hv.setdefault(h, {'group_names': []})['group_names'].append(g)
    for h, v in (hostvars or {}).items():
        hv.setdefault(h, {'group_names': []}).update(v)
    for h in hv:
        hv[h]['group_names'] = sorted(set(hv[h]['group_names'] + ['gpu_nodes']))
    groups['all'] = sorted(hv)
    return groups, hv


def test_pools_from_child_groups_sorted_with_settings_and_facts():
    groups, hv = inv({'pool_ts': {'n1': {'gpuops_sharing_strategy': 'time-slicing', 'gpu_probe_facts': {'x': 1},
                                         'gpu_sharing_stack_namespace': 'gpu'},
                                  'n2': {'gpuops_sharing_strategy': 'time-slicing', 'gpu_node_labels_node_name': 'k2'}},
                      'Pool_A': {'n3': {'gpuops_sharing_strategy': 'gpushare'}}})
    out = sharing_pools(groups, hv, settings=['gpu_sharing_stack_namespace', 'gpu_sharing_stack_mps'])
    assert out['errors'] == []
    assert [(p['name'], p['group'], p['strategy'], p['hosts'], p['nodes'], p['first']) for p in out['pools']] == [
        ('pool-a', 'Pool_A', 'gpushare', ['n3'], ['n3'], 'n3'),
        ('pool-ts', 'pool_ts', 'time-slicing', ['n1', 'n2'], ['n1', 'k2'], 'n1')]
    assert out['pools'][1]['settings'] == {'gpu_sharing_stack_namespace': 'gpu'}
    assert out['pools'][1]['facts'] == {'n1': {'x': 1}}
    assert out['unprobed'] == ['n2', 'n3'] or sorted(out['unprobed']) == ['n2', 'n3']
    assert out['settings'] == ['gpu_sharing_stack_namespace', 'gpu_sharing_stack_mps']
    assert out['label_pools'] == [{'name': 'pool-a', 'strategy': 'gpushare', 'nodes': ['n3']},
                                  {'name': 'pool-ts', 'strategy': 'time-slicing', 'nodes': ['n1', 'n2']}]
    assert out['needs_extender'] is True


def test_pool_default_is_the_node_group_and_strategy_exclusive():
    groups = {'all': ['n1'], 'gpu_nodes': ['n1']}
    out = sharing_pools(groups, {'n1': {'group_names': ['gpu_nodes']}})
    assert [(p['name'], p['strategy']) for p in out['pools']] == [('gpu-nodes', 'exclusive')]
    assert out['needs_extender'] is False


def test_layer_groups_and_groups_reaching_outside_are_not_pools():
    # 'site' holds a host outside gpu_nodes: not a pool; 'racks' is declared a layer group
    groups, hv = inv({'pool_x': {'n1': {}}}, extra_groups={'site': ['n1', 'cp'], 'racks': ['n1']})
    out = sharing_pools(groups, hv, layer_groups=['racks'])
    assert out['errors'] == [] and [p['name'] for p in out['pools']] == ['pool-x']


def test_gpuops_sharing_pool_wins_over_groups():
    groups, hv = inv({'pool_a': {'n1': {'gpuops_sharing_pool': 'special'}}, 'pool_b': {'n1': {}}})
    out = sharing_pools(groups, hv)
    assert out['errors'] == [] and [p['name'] for p in out['pools']] == ['special']


def test_pool_errors_several_groups_bad_strategy_mixed_and_bad_name():
    groups, hv = inv({'pool_a': {'n1': {}, 'n2': {'gpuops_sharing_strategy': 'mig'}},
                      'pool_b': {'n1': {}}, 'bad.name': {'n3': {'gpuops_sharing_strategy': 'timeslicing'}}})
    errors = sharing_pools(groups, hv)['errors']
    assert 'n1 is in several pool groups (pool_a, pool_b); set gpuops_sharing_pool for it' in errors
    assert any(e.startswith('n3: gpuops_sharing_strategy is timeslicing; allowed: exclusive, time-slicing') for e in errors)
    assert 'pool bad.name of n3 gives the Kubernetes pool name bad.name, not a DNS label' in errors
    groups, hv = inv({'pool_a': {'n1': {'gpuops_sharing_strategy': 'mps'}, 'n2': {'gpuops_sharing_strategy': 'mig'}}})
    assert sharing_pools(groups, hv)['errors'] == ['pool pool-a mixes strategies: n1 has mps, n2 has mig']


def test_gpu_operator_pools_get_no_node_labels():
    groups, hv = inv({'op': {'n1': {'gpuops_sharing_strategy': 'gpu-operator'}}})
    out = sharing_pools(groups, hv)
    assert [p['name'] for p in out['pools']] == ['op'] and out['label_pools'] == []


FACTS = {'labels': T4_LABELS, 'sharing': {'mig': {'allowed': False, 'reason': 'not MIG capable'},
                                          'mps': {'allowed': True}}}


def static(pools=None, hostvars=None, **kw):
    groups = {'gpu_nodes': ['a', 'b'], 'grp': ['b'], 'all': ['a', 'b']}
    hv = {'a': {'gpu_probe_facts': FACTS}, 'b': {'gpu_probe_facts': FACTS, 'gpu_node_labels_node_name': 'node-b'}}
    hv.update(hostvars or {})
    return label_static_plan(groups, hv, pools=pools, **kw)


def test_static_plan_merges_facts_extra_and_pool_labels():
    out = static([{'name': 'gs', 'strategy': 'gpushare', 'group': 'grp', 'labels': {'flag': True, 'n': 4}},
                  {'name': 'ts', 'strategy': 'time-slicing', 'nodes': ['a'], 'device_plugin_config': 'ts-4'}],
                 extra={'team': 'ml'})
    assert out['errors'] == []
    a, b = out['nodes']
    assert a == {'host': 'a', 'node': 'a', 'strategy': 'time-slicing', 'pools': ['ts'], 'labels': {
        'nvidia.com/gpu.product': 'Tesla-T4', 'nvidia.com/gpu.count': '1', 'team': 'ml',
        'gpuops.io/sharing-strategy': 'time-slicing', 'nvidia.com/device-plugin.config': 'ts-4'},
        'defaults': {}, 'claimed': []}
    assert b['node'] == 'node-b' and b['labels']['gpushare'] == 'true' and b['labels']['flag'] == 'true'
    assert b['labels']['n'] == '4'


def test_static_plan_input_errors():
    out = static([{'name': 'p', 'strategy': 'mps', 'nodes': ['zz'], 'group': 'nogroup'},
                  {'name': 'p', 'strategy': 'mig', 'nodes': ['a']}], group='gpu_nodes')
    assert 'gpu_node_labels_pools: pool name p is used twice' in out['errors']
    assert 'gpu_node_labels_pools: pool p: inventory group nogroup does not exist' in out['errors']
    assert 'gpu_node_labels_pools: pool p: host zz is not in gpu_node_labels_group (gpu_nodes)' in out['errors']
    assert 'a: strategy mig (pool p) is not possible on this node: not MIG capable' in out['errors']
    out = static([{'name': 'p', 'strategy': 'mps', 'nodes': ['a']}, {'name': 'q', 'strategy': 'mig', 'nodes': ['a']}])
    assert out['errors'][0] == ('a: conflicting sharing strategies - pool p says mps, pool q says mig; a node has exactly '
                                'one strategy (gpu-mem and whole-GPU accounting must not share GPUs)')
    assert static(group='nope')['errors'] == ['gpu_node_labels_group: inventory group nope does not exist']


def test_static_plan_label_conflicts_and_validation():
    out = static([{'name': 'x', 'strategy': 'mps', 'nodes': ['a'], 'device_plugin_config': 'c1'},
                  {'name': 'y', 'strategy': 'mps', 'nodes': ['a'], 'device_plugin_config': 'c2'}],
                 extra={'bad key!': 'v', 'ok': 'not valid!', 'p/q/r': 'x', 'UP.per/x': 'y', 'long': 'v' * 64})
    e = out['errors']
    assert 'a: pools x and y set label nvidia.com/device-plugin.config to different values (c1, c2)' in e
    assert any(x.startswith('a: label key bad key! is not a valid Kubernetes label key') for x in e)
    assert any(x.startswith('a: label key p/q/r is not') for x in e)
    assert any(x.startswith('a: label key UP.per/x is not') for x in e)
    assert any(x.startswith('a: label ok value not valid! is not a valid Kubernetes label value') for x in e)
    assert any(x.startswith('a: label long value') for x in e)


def test_static_plan_facts_required_or_not_and_absent_ignores_node_errors():
    no_facts = {'a': {}, 'b': {}}
    assert static(hostvars=no_facts)['errors'][0].startswith('a: no gpu_probe_facts.labels')
    assert static(hostvars=no_facts, require_facts=False)['errors'] == []
    out = static(hostvars=no_facts, gfd_labels=False)
    assert out['errors'] == [] and out['nodes'][0]['labels'] == {}
    assert static(hostvars=no_facts, state='absent')['errors'] == []
    # capability check off, or facts without 'sharing': no refusal
    assert static([{'name': 'm', 'strategy': 'mig', 'nodes': ['a']}], check_capabilities=False)['errors'] == []
    assert static([{'name': 'm', 'strategy': 'mig', 'nodes': ['a']}],
                  hostvars={'a': {'gpu_probe_facts': {'labels': {}}}})['errors'] == []


def node(name, labels=None, annotations=None, allocatable=None, status=True):
    obj = {'metadata': {'name': name, 'labels': labels or {}, 'annotations': annotations}}
    if status:
        obj['status'] = {'allocatable': allocatable or {'cpu': '8'}}
    return obj


def want(name='a', strategy='gpushare', labels=None):
    return {'nodes': [{'host': name, 'node': name, 'strategy': strategy, 'pools': ['p'],
                       'labels': labels if labels is not None else {'gpuops.io/sharing-strategy': strategy, 'x': '1'}}],
            'errors': []}


def test_live_plan_patches_only_what_differs_and_records():
    out = label_live_plan(want(), [node('a', {'x': '0', 'team': 'ml'})])
    n = out['nodes'][0]
    assert out['errors'] == [] and n['changed'] and n['set'] == ['gpuops.io/sharing-strategy', 'x']
    meta = n['patch']['metadata']
    assert meta['labels'] == {'gpuops.io/sharing-strategy': 'gpushare', 'x': '1'}
    assert json.loads(meta['annotations']['gpuops.io/managed-labels']) == {
        'gpuops.io/sharing-strategy': {'previous': None, 'value': 'gpushare'}, 'x': {'previous': '0', 'value': '1'}}
    # re-run on the patched node: nothing to do
    live = node('a', {'x': '1', 'team': 'ml', 'gpuops.io/sharing-strategy': 'gpushare'},
                {'gpuops.io/managed-labels': meta['annotations']['gpuops.io/managed-labels']})
    again = label_live_plan(want(), [live])['nodes'][0]
    assert not again['changed'] and again['patch']['metadata'] == {'name': 'a'}
    # absent: removes what had no previous value, restores the rest
    gone = label_live_plan(want(), [live], state='absent')['nodes'][0]
    assert gone['removed'] == ['gpuops.io/sharing-strategy'] and gone['restored'] == ['x']
    assert gone['patch']['metadata']['labels'] == {'gpuops.io/sharing-strategy': None, 'x': '0'}
    assert gone['patch']['metadata']['annotations'] == {'gpuops.io/managed-labels': None}
    # a label changed by someone else since: kept
    live['metadata']['labels']['x'] = 'theirs'
    kept = label_live_plan(want(), [live], state='absent')['nodes'][0]
    assert kept['kept'] == ['x']


def test_live_plan_missing_nodes():
    out = label_live_plan(want(), [])
    assert out['errors'][0].startswith('a: node a is not in the cluster')
    out = label_live_plan(want(), [], fail_on_missing_nodes=False)
    assert out['errors'] == [] and out['nodes'] == [{'host': 'a', 'node': 'a', 'found': False, 'changed': False}]


def test_live_plan_refusals_strategy_label_record_resources_hami():
    out = label_live_plan(want(), [node('a', {'gpuops.io/sharing-strategy': 'mps'})])
    assert 'already has gpuops.io/sharing-strategy=mps, set by someone else' in out['errors'][0]
    out = label_live_plan(want(), [node('a', annotations={'gpuops.io/managed-labels': 'not json'})])
    assert 'is not the JSON object this role writes' in out['errors'][0]
    out = label_live_plan(want(), [node('a', allocatable={'nvidia.com/gpu': '1', 'aliyun.com/gpu-mem': '15'})])
    assert out['errors'] == ['a: node a advertises nvidia.com/gpu=1, which belongs to another GPU accounting than '
                             'gpushare (gpu-mem and whole-GPU accounting must not share GPUs); remove that device plugin '
                             'first or set gpu_node_labels_check_resources=false']
    assert label_live_plan(want(), [node('a', allocatable={'nvidia.com/gpu': '1'})], check_resources=False)['errors'] == []
    assert label_live_plan(want(), [node('a', allocatable={'nvidia.com/gpu': '0'})])['errors'] == []
    assert label_live_plan(want(), [node('a', status=False)])['errors'] == []
    hami = {'hami.io/node-nvidia-register': 'GPU-1'}
    out = label_live_plan(want(strategy='exclusive'), [node('a', annotations=hami)])
    assert out['errors'] == ['a: node a is registered with HAMi (annotation hami.io/node-nvidia-register); refusing '
                             'strategy exclusive']
    assert label_live_plan(want(strategy='hami'), [node('a', annotations=hami)])['errors'] == []
    # our own strategy label with another value: we may switch it
    rec = json.dumps({'gpuops.io/sharing-strategy': {'value': 'mps', 'previous': None}})
    out = label_live_plan(want(), [node('a', {'gpuops.io/sharing-strategy': 'mps'}, {'gpuops.io/managed-labels': rec})])
    assert out['errors'] == [] and out['nodes'][0]['set'] == ['gpuops.io/sharing-strategy', 'x']


def test_pool_host_vars_reads_only_inventory_hosts_and_defined_vars():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import pool_host_vars
    hv = {'n1': {'gpu_probe_facts': {'gpu_count': 1}, 'gpu_sharing_stack_strategy': 'mps'},
          'n2': {'nvidia_container_runtime_cdi_spec_ready': True}}
    want = {'facts': {'n1': {'gpu_count': 1}}, 'node_strategies': {'n1': 'mps'}, 'cdi_spec_ready': {'n2': True},
            'cdi_enabled': {}}
    assert pool_host_vars(['n1', 'n2', 'not-a-host'], hv) == want
    assert pool_host_vars([], hv) == {'facts': {}, 'node_strategies': {}, 'cdi_spec_ready': {}, 'cdi_enabled': {}}


def test_unprobed_hosts_keeps_order():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import unprobed_hosts
    hv = {'a': {}, 'b': {'gpu_probe_facts': {}}, 'c': {'x': 1}}
    assert unprobed_hosts(['c', 'b', 'a'], hv) == ['c', 'a']
    assert unprobed_hosts([], hv) == []


# ---- the stacks' labels join the one label plan (role gpu_node_labels is the one writer of Node labels) ----------
DP = 'nvidia.com/gpu.deploy.device-plugin'
MIG_STACK = {'node_labels': {'a': {'gpuops.io/sharing-pool': 'm', 'gpuops.io/sharing-strategy': 'mig',
                                   'nvidia.com/mig.config': 'gpuops-1g-10gb-7', DP: 'true'},
                             'zz': {'gpuops.io/sharing-pool': 'm'}},
             'node_label_defaults': {'a': {DP: 'true'}, 'zz': {DP: 'true'}}}


def test_stack_labels_join_the_plan_defaults_apart_and_claimed():
    out = static([{'name': 'm', 'strategy': 'mig', 'nodes': ['a']}], stacks={'m': MIG_STACK}, check_capabilities=False)
    assert out['errors'] == []
    a = out['nodes'][0]
    assert a['labels']['nvidia.com/mig.config'] == 'gpuops-1g-10gb-7' and a['labels']['gpuops.io/sharing-pool'] == 'm'
    assert a['labels']['nvidia.com/gpu.product'] == 'Tesla-T4'        # GPU facts and stack labels in one plan
    assert DP not in a['labels'] and a['defaults'] == {DP: 'true'}
    assert a['claimed'] == ['gpuops.io/sharing-pool', 'gpuops.io/sharing-strategy', 'nvidia.com/mig.config']
    # a stack node that is no host of the group (the stack role used alone): its own entry, stack labels only
    zz = [n for n in out['nodes'] if n['node'] == 'zz'][0]
    assert zz == {'host': 'zz', 'node': 'zz', 'strategy': '', 'pools': ['m'],
                  'labels': {'gpuops.io/sharing-pool': 'm'}, 'defaults': {DP: 'true'}, 'claimed': ['gpuops.io/sharing-pool']}
    # an empty group: only the stacks' nodes
    only = label_static_plan({'all': []}, {}, group='', stacks={'m': MIG_STACK})
    assert only['errors'] == [] and [n['node'] for n in only['nodes']] == ['a', 'zz']


def test_stack_label_conflicts_are_refused():
    # a pool sets the strategy label to another value than the stack needs
    out = static([{'name': 'x', 'strategy': 'mps', 'nodes': ['a']}], stacks={'m': MIG_STACK}, check_capabilities=False)
    assert ('a: pool x sets label gpuops.io/sharing-strategy to mps but the stack of pool m needs mig' in out['errors'])
    # two stacks give one node's label two values
    labels, errors = stack_node_labels({'p': {'node_labels': {'n': {'k': 'v1'}}}, 'q': {'node_labels': {'n': {'k': 'v2'}}}})
    assert errors == ['n: the stacks of pools p and q set label k to different values (v1, v2)']
    assert stack_node_labels(['x'])[1][0].startswith('gpu_node_labels_stacks must be a mapping')
    assert stack_node_labels({'p': 'x'})[1] == ['gpu_node_labels_stacks: pool p is not a render result of gpu_stack_manifests']
    # invalid values from a stack are refused like any other label
    bad = static(stacks={'p': {'node_labels': {'a': {'k': 'not valid!'}}}})
    assert any(e.startswith('a: label k value not valid! is not a valid') for e in bad['errors'])


def mig_plan(**kw):
    return static([{'name': 'm', 'strategy': 'mig', 'nodes': ['a']}], stacks={'m': MIG_STACK}, check_capabilities=False,
                  hostvars={'a': {'gpu_probe_facts': {'labels': {}}}, 'b': {'gpu_probe_facts': {'labels': {}}}}, **kw)


def test_MIGM_13_deploy_label_is_a_default_mig_manager_and_false_are_never_overridden():
    """mig-parted's reconfigure leaves false alone (an outside owner) and flips any other value to
    paused-for-mig-change and back to true: the plan sets true only where the node has none, never changes false or
    paused-for-mig-change, and absent removes it only while it is the true we set."""
    plan = mig_plan()
    site_false = label_live_plan(plan, [node('a', {DP: 'false'}), node('node-b')])['nodes'][0]
    assert DP not in (site_false['patch']['metadata'].get('labels') or {})
    assert DP not in json.loads(site_false['patch']['metadata']['annotations']['gpuops.io/managed-labels'])
    paused = label_live_plan(plan, [node('a', {DP: 'paused-for-mig-change'}), node('node-b')])['nodes'][0]
    assert DP not in (paused['patch']['metadata'].get('labels') or {})
    missing = label_live_plan(plan, [node('a'), node('node-b')])['nodes'][0]
    assert missing['patch']['metadata']['labels'][DP] == 'true'
    # absent on the site's false: not recorded, so kept
    record = site_false['patch']['metadata']['annotations']['gpuops.io/managed-labels']
    live = node('a', dict(site_false['patch']['metadata']['labels'], **{DP: 'false'}), {'gpuops.io/managed-labels': record})
    gone = label_live_plan(mig_plan(state='absent'), [live, node('node-b')], state='absent')['nodes'][0]
    assert DP not in gone['patch']['metadata']['labels'] and DP not in gone['removed']


def test_stack_labels_set_recorded_zero_patches_on_rerun_and_removed_on_absent():
    plan = mig_plan()
    first = label_live_plan(plan, [node('a', {'team': 'ml'}), node('node-b')])['nodes'][0]
    assert first['changed'] and first['patch']['metadata']['labels'][DP] == 'true'
    assert first['patch']['metadata']['labels']['nvidia.com/mig.config'] == 'gpuops-1g-10gb-7'
    record = first['patch']['metadata']['annotations']['gpuops.io/managed-labels']
    assert json.loads(record)[DP] == {'previous': None, 'value': 'true'}
    live = node('a', dict(first['patch']['metadata']['labels'], team='ml'), {'gpuops.io/managed-labels': record})
    assert not label_live_plan(plan, [live, node('node-b')])['nodes'][0]['changed']
    # mig-manager pauses the device plugin: the default label is theirs now - no patch, the record is kept
    live['metadata']['labels'][DP] = 'paused-for-mig-change'
    paused = label_live_plan(plan, [live, node('node-b')])['nodes'][0]
    assert not paused['changed'] and paused['patch']['metadata'] == {'name': 'a'}
    gone = label_live_plan(mig_plan(state='absent'), [live, node('node-b')], state='absent')['nodes'][0]
    assert gone['kept'] == [DP]                                        # paused: not ours to remove
    assert set(gone['removed']) == {'gpuops.io/sharing-pool', 'gpuops.io/sharing-strategy', 'nvidia.com/mig.config'}
    assert 'team' not in gone['patch']['metadata']['labels']          # the site's label stays
    # back to true: absent removes it too
    live['metadata']['labels'][DP] = 'true'
    assert DP in label_live_plan(mig_plan(state='absent'), [live, node('node-b')], state='absent')['nodes'][0]['removed']
    # a default label someone removed is set again
    del live['metadata']['labels'][DP]
    again = label_live_plan(plan, [live, node('node-b')])['nodes'][0]
    assert again['patch']['metadata']['labels'] == {DP: 'true'}


def test_stack_labels_already_in_place_are_claimed_once():
    """An earlier release let the stack role write its labels itself, unrecorded: they are recorded once (one
    annotation write), so state=absent removes them; then nothing to do."""
    plan = mig_plan()
    labels = {'gpuops.io/sharing-pool': 'm', 'gpuops.io/sharing-strategy': 'mig', 'nvidia.com/mig.config': 'gpuops-1g-10gb-7',
              DP: 'true', 'team': 'ml'}
    first = label_live_plan(plan, [node('a', dict(labels)), node('node-b')])['nodes'][0]
    assert first['changed'] and 'labels' not in first['patch']['metadata']
    record = json.loads(first['patch']['metadata']['annotations']['gpuops.io/managed-labels'])
    assert record['nvidia.com/mig.config'] == {'previous': None, 'value': 'gpuops-1g-10gb-7'}
    assert DP not in record and 'team' not in record                   # a default or the site's label: not claimed
    live = node('a', dict(labels), {'gpuops.io/managed-labels': json.dumps(record, sort_keys=True)})
    assert not label_live_plan(plan, [live, node('node-b')])['nodes'][0]['changed']
    # a GPU-facts label already in place is not claimed (the site may own it)
    plain = label_live_plan(static(), [node('a', {'nvidia.com/gpu.product': 'Tesla-T4', 'nvidia.com/gpu.count': '1'}),
                                       node('node-b')])['nodes'][0]
    assert not plain['changed']
