# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strategy dra: two DeviceClasses mapping one extended resource name (rows DRAX-14, DRAX-15 of
docs/conformance/dra-driver-nvidia-gpu.md). A class of the site's that maps a name the chart's release or the pool's
extended_resources map refuses the pool before anything changes, unless accepted by name; a removal that deletes a
class of ours mapping such a name warns. lab/tests/integration/test_dra_extended_clash_real.py shows the scheduler's
behaviour on the lab's real kube-scheduler v1.37.2 and the refusal on a real API server."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError

SHARED = {'name': 'nvidia.com/gpu.shared', 'kind': 'time-slicing'}
SHARED_CLASS = 'gpu.shared.nvidia.com.extended.gpuops.io'
OURS = {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu', 'gpuops.io/sharing-stack': 'dra',
        'gpuops.io/sharing-scope': 'shared'}


def device_class(name, ern=None, ts='2026-11-30T01:00:00Z', labels=None):
    obj = {'apiVersion': 'resource.k8s.io/v1', 'kind': 'DeviceClass',
           'metadata': {'name': name, 'creationTimestamp': ts}, 'spec': {'selectors': []}}
    if labels:
        obj['metadata']['labels'] = dict(labels)
    if ern:
        obj['spec']['extendedResourceName'] = ern
    return obj


def render(live_classes, settings=None, **params):
    s = {'chart_path': '/charts/dra-driver-nvidia-gpu', 'chart_version': 'v0.5.0', 'kube_version': 'v1.37.2',
         'feature_gates': {'TimeSlicingSettings': True}}
    s.update(settings or {})
    p = {'strategy': 'dra', 'pool': 'p1', 'nodes': ['n1'], 'settings': {'dra': s}, 'cdi_enabled': {'n1': True},
         'live': {'objects': {'nodes': [], 'dra_device_classes': live_classes}}}
    p.update(params)
    return r.render(p)


def test_DRAX_15_a_site_class_mapping_nvidia_gpu_refuses_the_pool_naming_class_name_and_variable():
    with pytest.raises(StackError) as e:
        render([device_class('site-gpu', 'nvidia.com/gpu')])
    msg = str(e.value)
    assert msg.startswith(
        'DeviceClass site-gpu maps nvidia.com/gpu (spec.extendedResourceName), which gpu_sharing_stack_strategy dra '
        "(its chart's DeviceClass gpu.nvidia.com maps nvidia.com/gpu on resource.k8s.io/v1; no chart value switches "
        'that off) maps too (DeviceClass gpu.nvidia.com): this run would create gpu.nvidia.com, the newer class, so '
        'kube-scheduler would back it with that one instead of site-gpu.'), msg
    for words in ('kube-scheduler backs the name with the newer one only (creationTimestamp, then the smaller name)',
                  'on Kubernetes 1.36 and 1.37 (1.36.6 and 1.37.2 included) deleting either class later drops the '
                  'scheduler\'s mapping for both, so pods asking nvidia.com/gpu stay Pending ("Insufficient '
                  'nvidia.com/gpu")',
                  'kubernetes/kubernetes#141103, fixed on master by #141110', 'Nothing was changed',
                  'list the class in gpu_sharing_stack_dra.accept_extended_resource_classes'):
        assert words in msg, (words, msg)


def test_DRAX_15_a_site_class_mapping_an_entrys_name_names_the_entry_and_which_class_the_scheduler_uses():
    live = [device_class(SHARED_CLASS, 'nvidia.com/gpu.shared', ts='2026-11-30T01:00:00Z', labels=OURS),
            device_class('site-shared', 'nvidia.com/gpu.shared', ts='2026-11-30T02:00:00Z'),
            device_class('site-other', 'nvidia.com/gpu.shared', ts='2026-11-30T00:00:00Z')]
    with pytest.raises(StackError) as e:
        render(live, settings={'extended_resources': [SHARED]})
    msg = str(e.value)
    # both site classes named, each with the variable and our class; the newest of the three backs the name now
    assert ('DeviceClass site-other maps nvidia.com/gpu.shared (spec.extendedResourceName), which '
            'gpu_sharing_stack_dra.extended_resources[0] maps too (DeviceClass %s): kube-scheduler backs it with '
            'site-shared now; DeviceClass site-shared maps nvidia.com/gpu.shared' % SHARED_CLASS) in msg, msg
    assert 'pods asking nvidia.com/gpu.shared stay Pending ("Insufficient nvidia.com/gpu.shared")' in msg


def test_DRAX_15_the_release_and_the_collection_classes_and_other_names_are_no_clash():
    live = [device_class('gpu.nvidia.com', 'nvidia.com/gpu', labels={'app.kubernetes.io/managed-by': 'Helm'}),
            device_class('mig.nvidia.com'),
            device_class(SHARED_CLASS, 'nvidia.com/gpu.shared', labels=OURS),
            device_class('site-a', 'example.com/fpga'), device_class('site-b')]
    res = render(live, settings={'extended_resources': [SHARED]})
    assert [m['metadata']['name'] for m in res['manifests'] if m['kind'] == 'DeviceClass'] == [SHARED_CLASS]
    assert not [t for t in res['warnings'] + res['notes'] if 'maps nvidia.com' in t]
    # a class of our class's very name without our labels is the one object the run applies, not a second class
    render([device_class(SHARED_CLASS, 'nvidia.com/gpu.shared')], settings={'extended_resources': [SHARED]})
    # not read (a render without the live read, or a server without resource.k8s.io/v1): nothing to compare
    render(None)
    render([])


def test_DRAX_15_a_class_of_another_tool_with_our_name_pattern_but_not_our_labels_is_a_clash():
    with pytest.raises(StackError, match='DeviceClass %s maps nvidia.com/gpu.shared' % 'x.extended.gpuops.io'):
        render([device_class('x.extended.gpuops.io', 'nvidia.com/gpu.shared',
                             labels={'app.kubernetes.io/managed-by': 'someone-else'})],
               settings={'extended_resources': [SHARED]})


def test_DRAX_15_an_accepted_class_is_a_note_and_a_bad_entry_is_refused_by_name():
    res = render([device_class('site-gpu', 'nvidia.com/gpu')],
                 settings={'accept_extended_resource_classes': ['site-gpu']})
    [note] = [n for n in res['notes'] if 'site-gpu' in n]
    assert note.startswith('gpu_sharing_stack_dra: DeviceClass site-gpu maps nvidia.com/gpu like gpu.nvidia.com '), note
    assert 'accepted by gpu_sharing_stack_dra.accept_extended_resource_classes' in note
    assert not [w for w in res['warnings'] if 'site-gpu' in w]
    # accepting one class does not accept another
    with pytest.raises(StackError, match='DeviceClass site-b maps nvidia.com/gpu'):
        render([device_class('site-gpu', 'nvidia.com/gpu'), device_class('site-b', 'nvidia.com/gpu')],
               settings={'accept_extended_resource_classes': ['site-gpu']})
    for bad in (['Site_GPU'], [''], [3]):
        with pytest.raises(StackError, match=r'gpu_sharing_stack_dra.accept_extended_resource_classes\[0\] must be '
                                             'a DeviceClass name'):
            render([], settings={'accept_extended_resource_classes': bad})


def test_DRAX_15_removal_warns_for_each_class_of_ours_it_deletes_beside_a_site_class():
    live = [device_class('gpu.nvidia.com', 'nvidia.com/gpu'), device_class('site-gpu', 'nvidia.com/gpu'),
            device_class('site-shared', 'nvidia.com/gpu.shared')]
    res = render(live, settings={'extended_resources': [SHARED],
                                 'accept_extended_resource_classes': ['site-gpu']}, check_conflicts=False)
    [warning] = [w for w in res['warnings'] if 'Removing pool' in w]
    assert warning.startswith(
        "Removing pool p1 deletes DeviceClass gpu.nvidia.com (the chart's, removed with the Helm release by the last "
        "dra pool), which maps nvidia.com/gpu like the site's DeviceClass site-gpu: on Kubernetes 1.36 and 1.37 "
        "(1.36.6 and 1.37.2 included) that deletion drops kube-scheduler's mapping of nvidia.com/gpu for site-gpu as "
        "well"), warning
    for words in ('Afterwards restart kube-scheduler', "update site-gpu's spec.extendedResourceName to another name "
                  'and back (the scheduler takes the class back and retries the Pending pods)',
                  'or delete and re-create site-gpu', 'an update of its labels or annotations alone retries no Pending '
                  'pod'):
        assert words in warning, (words, warning)
    # our shared class is not live: its removal deletes nothing, so no word about site-shared
    assert not [w for w in res['warnings'] if 'site-shared' in w]
    # and removal refuses nothing (a site class not accepted either)
    res = render(live + [device_class(SHARED_CLASS, 'nvidia.com/gpu.shared', labels=OURS)],
                 settings={'extended_resources': [SHARED]}, check_conflicts=False)
    assert len([w for w in res['warnings'] if 'Removing pool' in w]) == 2


def test_DRAX_14_the_scheduler_takes_the_newer_class_and_on_a_tie_the_smaller_name():
    a, b = device_class('a', 'x/y', ts='2026-11-30T01:00:00Z'), device_class('b', 'x/y', ts='2026-11-30T01:00:01Z')
    assert dra._scheduler_pick([a, b]) == 'b'
    assert dra._scheduler_pick([device_class('b', 'x/y'), device_class('a', 'x/y')]) == 'a'


def test_DRAX_15_clashes_function_bad_accepted_type():
    with pytest.raises(StackError, match='v must be a list of DeviceClass names'):
        dra.extended_resource_clashes([], {}, 'site-gpu', 'v')
