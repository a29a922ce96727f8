# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""stacks/common.stack_readiness and filter stack_readiness: the MIG manager's readiness, decided in Python (was a
Jinja map/selectattr/zip chain in role gpu_sharing_stack)."""
from ansible_collections.gpuops.k8s_gpu.plugins.filter.stack_readiness import FilterModule
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import stack_readiness

STATE = 'nvidia.com/mig.config.state'
READY = {'label': STATE, 'value': 'success', 'failed_value': 'failed', 'nodes': ['n1', 'n2']}


def node(name, state=None):
    labels = {'gpuops.io/sharing-pool': 'p'}
    if state is not None:
        labels[STATE] = state
    return {'metadata': {'name': name, 'labels': labels}}


def test_no_readiness_is_ready():
    assert stack_readiness([], None) == {'ready': True, 'done': True, 'failed': [], 'states': {}, 'waiting': {},
                                         'msg': ''}


def test_ready_only_when_every_node_reports_success():
    out = stack_readiness([node('n1', 'success'), node('n2', 'success')], READY)
    assert out['ready'] and out['done'] and out['msg'] == ''
    out = stack_readiness([node('n1', 'success'), node('n2', 'pending')], READY)
    assert not out['ready'] and not out['done']
    # a node of the pool that is not listed yet counts as not done
    out = stack_readiness([node('n1', 'success'), node('x', 'success')], READY)
    assert not out['ready'] and not out['done']


def test_failed_ends_the_wait_at_once_and_the_message_names_node_value_expected_and_hint():
    out = stack_readiness([node('n1', 'failed'), node('n2')], READY, pool='p', namespace='kube-system', retries=60,
                          delay=10)
    assert out['done'] and not out['ready'] and out['failed'] == ['n1']
    assert out['states'] == {'n1': 'failed', 'n2': ''}
    assert out['msg'] == (
        'The MIG manager has not applied the geometry  on every node of pool p within 60 x 10 s: node label '
        'nvidia.com/mig.config.state is, per node, {\'n1\': \'failed\', \'n2\': \'\'} (expected success on n1, n2; "" = '
        'not set yet); not ready yet: n1: nvidia.com/mig.config.state=\'failed\'; n2: nvidia.com/mig.config.state=\'\'. '
        'A success left from the previous geometry is not taken: the node must carry the geometry asked for and publish '
        'its MIG devices. Read the logs of the pool\'s nvidia-mig-manager pods (kubectl -n kube-system logs -l '
        'app.kubernetes.io/name=nvidia-mig-manager) and of its device plugin; raise gpu_sharing_stack_mig_state_retries '
        'for slow GPU resets.')


def test_node_without_labels_counts_as_not_set():
    out = stack_readiness([{'metadata': {'name': 'n1'}}], READY)
    assert out['states'] == {'n1': ''} and not out['done']


def test_filter_is_thin():
    f = FilterModule().filters()['stack_readiness']
    nodes = [node('n1', 'success'), node('n2', 'failed')]
    assert f(nodes, READY, pool='p', namespace='ns', retries=2, delay=0) == stack_readiness(
        nodes, READY, pool='p', namespace='ns', retries=2, delay=0)


# issue 36: success is also what a node says from the previous geometry until the MIG manager has seen the new
# nvidia.com/mig.config (it sets pending only after it has reacted: NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go
# Run); the node must carry the geometry asked for and publish its MIG devices
GEOMETRY = dict(READY, nodes=['n1'], config_label='nvidia.com/mig.config', config_value='gpuops-1g-10gb-7',
                allocatable={'n1': {'nvidia.com/gpu': '14'}})


def mig_node(state, config, allocatable):
    n = node('n1', state)
    n['metadata']['labels']['nvidia.com/mig.config'] = config
    n['status'] = {'allocatable': allocatable}
    return n


def test_MIGM_14_a_stale_success_of_the_previous_geometry_is_not_ready():
    # the role has just written the new geometry; the manager has not reacted: state success, devices of the old one
    stale = stack_readiness([mig_node('success', 'gpuops-1g-10gb-7', {'nvidia.com/gpu': '4'})], GEOMETRY, pool='p')
    assert not stale['ready'] and not stale['done']
    assert stale['waiting'] == {'n1': "allocatable {'nvidia.com/gpu': '4'}, not {'nvidia.com/gpu': '14'}"}
    # the label still names the previous geometry (another writer, or the labels step has not run)
    old = stack_readiness([mig_node('success', 'gpuops-3g-40gb-2', {'nvidia.com/gpu': '14'})], GEOMETRY)
    assert not old['ready'] and "nvidia.com/mig.config='gpuops-3g-40gb-2', not 'gpuops-1g-10gb-7'" in old['waiting']['n1']
    # applied: state success, the geometry's label and its devices published
    done = stack_readiness([mig_node('success', 'gpuops-1g-10gb-7', {'nvidia.com/gpu': '14', 'cpu': '8'})], GEOMETRY)
    assert done['ready'] and done['done'] and done['waiting'] == {}


def test_mixed_strategy_counts_each_profile_and_a_missing_resource_counts_as_zero():
    mixed = dict(GEOMETRY, allocatable={'n1': {'nvidia.com/mig-1g.10gb': '4', 'nvidia.com/mig-2g.20gb': '2'}})
    out = stack_readiness([mig_node('success', 'gpuops-1g-10gb-7', {'nvidia.com/mig-1g.10gb': '4'})], mixed)
    assert out['waiting'] == {'n1': "allocatable {'nvidia.com/mig-2g.20gb': '0'}, not {'nvidia.com/mig-2g.20gb': '2'}"}
