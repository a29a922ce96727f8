# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter plugins of the cluster-layer planning are thin: each returns what its module_utils function returns."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import pool_host_vars, sharing_pools
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan import (
    label_live_plan, label_static_plan,
)
from ansible_collections.gpuops.k8s_gpu.plugins.action.gpu_stack_manifests import with_inventory_vars
from ansible_collections.gpuops.k8s_gpu.plugins.filter.gpu_strategy import FilterModule as StrategyFM
from ansible_collections.gpuops.k8s_gpu.plugins.filter.node_labels_patch import FilterModule as PatchFM
from ansible_collections.gpuops.k8s_gpu.plugins.filter.node_labels_plan import FilterModule as PlanFM
from ansible_collections.gpuops.k8s_gpu.plugins.filter.pool_host_vars import FilterModule as HostVarsFM
from ansible_collections.gpuops.k8s_gpu.plugins.filter.sharing_pools import FilterModule as PoolsFM

GROUPS = {'all': ['n1'], 'gpu_nodes': ['n1'], 'p': ['n1']}
HOSTVARS = {'n1': {'group_names': ['gpu_nodes', 'p'], 'gpuops_sharing_strategy': 'mps',
                   'gpu_probe_facts': {'labels': {'nvidia.com/gpu.count': '1'}}}}


def test_sharing_pools_filter():
    f = PoolsFM().filters()['sharing_pools']
    assert f(GROUPS, HOSTVARS, settings=['x']) == sharing_pools(GROUPS, HOSTVARS, settings=['x'])
    with pytest.raises(AnsibleFilterError, match='expected the groups mapping'):
        f(['n1'], HOSTVARS)
    assert f(GROUPS, HOSTVARS, facts='renamed') == sharing_pools(GROUPS, HOSTVARS, facts='renamed')
    assert f(GROUPS, HOSTVARS, facts='renamed')['pools'][0]['facts'] == {}
    with pytest.raises(AnsibleFilterError, match="facts is 'every'; allowed: all, renamed"):
        f(GROUPS, HOSTVARS, facts='every')


def test_node_labels_filters():
    plan = PlanFM().filters()['node_labels_plan'](GROUPS, HOSTVARS, pools=[{'name': 'p', 'strategy': 'mps',
                                                                            'nodes': ['n1']}])
    assert plan == label_static_plan(GROUPS, HOSTVARS, pools=[{'name': 'p', 'strategy': 'mps', 'nodes': ['n1']}])
    live = [{'metadata': {'name': 'n1'}}]
    assert PatchFM().filters()['node_labels_patch'](plan, live) == label_live_plan(plan, live)


def test_pool_host_vars_filter():
    assert HostVarsFM().filters()['pool_host_vars'](['n1'], HOSTVARS) == pool_host_vars(['n1'], HOSTVARS)


def test_gpu_strategy_filter():
    f = StrategyFM().filters()['gpu_strategy']
    assert f('mps')['runtime_class'] is True and f('mps')['family'] == 'whole-gpu' and f('mps')['name'] == 'mps'
    assert f('gpushare')['scheduler_extender'] is True and f('gpushare')['runtime_class'] is False
    with pytest.raises(AnsibleFilterError, match='allowed: exclusive'):
        f('timeslicing')


def test_gpu_strategy_filter_compute_mode_setting():
    """Role gpu_node_sharing asks the filter for the compute mode instead of keeping its own list of strategies."""
    f = StrategyFM().filters()['gpu_strategy']
    assert f('hami')['compute_mode'] == 'default' and f('mps')['compute_mode'] is None
    assert f('hami', compute_mode_setting='auto')['compute_mode'] == 'default'
    assert f('hami', compute_mode_setting='keep')['compute_mode'] is None
    assert f('mig', compute_mode_setting='auto')['compute_mode'] is None
    assert f('mig', compute_mode_setting='prohibited')['compute_mode'] == 'prohibited'
    assert f('gpushare')['default_runtime'] is True and f('volcano')['title'] == 'Volcano'
    with pytest.raises(AnsibleFilterError, match="compute_mode_setting 'Default' is not a compute mode setting"):
        f('mps', compute_mode_setting='Default')


def test_unprobed_hosts_filter():
    from ansible_collections.gpuops.k8s_gpu.plugins.filter.unprobed_hosts import FilterModule
    assert FilterModule().filters()['unprobed_hosts'](['n1', 'n2'], dict(HOSTVARS, n2={})) == ['n2']


def test_gpu_strategy_filter_documentation_names_the_model():
    import re
    import yaml
    from ansible_collections.gpuops.k8s_gpu.plugins.filter import gpu_strategy as flt
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs
    doc = yaml.safe_load(flt.DOCUMENTATION)
    assert tuple(re.findall(r'C\(([a-z-]+)\)', doc['options']['_input']['description'])) == gs.STRATEGIES
    returned = ' '.join(yaml.safe_load(flt.RETURN)['_value']['description'])
    assert set(re.findall(r'C\(([a-z_]+)\)', returned)) == set(gs.strategy('exclusive')) | {'name'}


def inv(pools):
    """pools: group -> {host: vars}; (groups, hostvars) as Ansible gives them (as test_cluster_plan.inv)."""
    groups = {'all': [], 'ungrouped': [], 'gpu_nodes': []}
    hv = {}
    for g, hosts in pools.items():
        groups[g] = list(hosts)
        for h, v in hosts.items():
            groups['gpu_nodes'].append(h)
            hv[h] = dict(v, group_names=sorted(['gpu_nodes', g]))
    groups['all'] = sorted(hv)
    return groups, hv


def test_pools_facts_renamed_keeps_only_what_the_render_cannot_read_from_hostvars():
    """facts='renamed' (cluster.yml, uninstall.yml): a pool's facts hold only the hosts whose Kubernetes node name is
    not their inventory name; the render (gpu_stack_manifests with inventory_vars, its given facts winning) then sees
    the same facts for every node as with facts='all'."""
    groups, hv = inv({'pool_ts': {'n1': {'gpuops_sharing_strategy': 'time-slicing', 'gpu_probe_facts': {'x': 1}},
                                  'n2': {'gpuops_sharing_strategy': 'time-slicing', 'gpu_probe_facts': {'x': 2},
                                         'gpu_node_labels_node_name': 'k2'},
                                  # renamed to the inventory name of another host (n4, in another pool)
                                  'n3': {'gpuops_sharing_strategy': 'time-slicing', 'gpu_probe_facts': {'x': 3},
                                         'gpu_node_labels_node_name': 'n4'},
                                  'n5': {'gpuops_sharing_strategy': 'time-slicing'}},
                      'pool_mps': {'n4': {'gpuops_sharing_strategy': 'mps', 'gpu_probe_facts': {'x': 4},
                                          'gpu_node_labels_node_name': 'k4'},
                                   'n6': {'gpuops_sharing_strategy': 'mps', 'gpu_probe_facts': {'x': 6}}}})
    full = sharing_pools(groups, hv)
    slim = sharing_pools(groups, hv, facts='renamed')
    assert [p['facts'] for p in slim['pools']] == [{'k4': {'x': 4}}, {'k2': {'x': 2}, 'n4': {'x': 3}}]
    assert [p['facts'] for p in full['pools']] == [{'k4': {'x': 4}, 'n6': {'x': 6}},
                                                   {'n1': {'x': 1}, 'k2': {'x': 2}, 'n4': {'x': 3}}]
    for a, b in zip(full['pools'], slim['pools']):
        assert dict((k, v) for k, v in a.items() if k != 'facts') == dict((k, v) for k, v in b.items() if k != 'facts')
        seen = [with_inventory_vars({'nodes': p['nodes'], 'facts': p['facts']}, hv)['facts'] for p in (a, b)]
        assert seen[0] == seen[1] and set(seen[0]) <= set(a['nodes']) | set(a['facts'])
    for key in ('label_pools', 'errors', 'unprobed', 'gated', 'needs_extender'):
        assert full[key] == slim[key], key
    with pytest.raises(ValueError, match="facts is 'some'; allowed: all, renamed"):
        sharing_pools(groups, hv, facts='some')
