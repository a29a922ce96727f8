"""Claim templates with prioritized alternatives (``first_available``; issue #40, row DRAX-12 of
docs/conformance/dra-driver-nvidia-gpu.md) on the lab's real 1.37 control plane and its real scheduler:

* the template the collection renders for "a 1g.10gb MIG device, else a time-sliced GPU" is accepted by the real API
  server and read back with its two subrequests and the GpuConfig naming ``<request>/<subrequest>`` (a field a gate
  switched off would be dropped on create);
* "a 1g.10gb MIG device, else a 3g.40gb one": three pods one after the other, each with its own claim from the
  template, on a kwok node whose ResourceSlice is the H100 MIG inventory's (lab/kube/dra_slices.py: a 3g.40gb and two
  1g.10gb devices): the scheduler gives the first two the 1g.10gb devices (the first alternative, though the 3g.40gb
  one is free too) and the third the 3g.40gb one (the second), each claim's result naming its subrequest.

The rendered requests name the chart's DeviceClasses (mig.nvidia.com, gpu.nvidia.com); the chart's release belongs to
test_dra_real.py, so this file creates two classes of its own with the chart's selectors (deviceclass-mig.yaml and
deviceclass-gpu.yaml, dra-driver-nvidia-gpu v0.5.0) and points the rendered requests at them.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_first_available_real.py
"""
from __future__ import annotations

import copy
import os
import sys

import pytest

from conftest import KUBE, lab_collections_path, wait_until as wait

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dra_slices  # noqa: E402  (lab/kube)
from gpu_kwok_nodes import bare_node  # noqa: E402  (recorded nodes before their stack)

SUFFIX = '%d' % os.getpid()
NS = 'drax-first-%s' % SUFFIX
NODE = 'drax-first-kwok-%s' % SUFFIX
TAINT_KEY = 'gpuops.io/test-drax-first-%s' % SUFFIX
GROUP, VERSION = 'resource.k8s.io', 'v1'
DRIVER = 'gpu.nvidia.com'
CLASSES = {'mig.nvidia.com': ('mig-%s.drax-first.lab.gpuops.io' % SUFFIX, 'mig'),
           'gpu.nvidia.com': ('gpu-%s.drax-first.lab.gpuops.io' % SUFFIX, 'gpu')}


def render(spec):
    sys.path.insert(0, lab_collections_path())
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra
    [obj] = dra.claim_templates([spec], NS, gates={'TimeSlicingSettings': True, 'MPSSupport': True})
    return obj


def own_classes(obj):
    """The template with its requests pointed at this file's classes."""
    obj = copy.deepcopy(obj)
    for req in obj['spec']['spec']['devices']['requests']:
        for sub in req['firstAvailable']:
            sub['deviceClassName'] = CLASSES[sub['deviceClassName']][0]
    return obj


@pytest.fixture(scope='module')
def lab(kube_real):
    from kubernetes import client
    api = kube_real.api()
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for name, kind in CLASSES.values():
        co.create_cluster_custom_object(GROUP, VERSION, 'deviceclasses', {
            'apiVersion': '%s/%s' % (GROUP, VERSION), 'kind': 'DeviceClass', 'metadata': {'name': name},
            'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s' && device.attributes['%s'].type == "
                                                          "'%s'" % (DRIVER, DRIVER, kind)}}]}})
    core.create_namespace({'metadata': {'name': NS}})
    try:
        wait('ServiceAccount %s/default' % NS, lambda: core.list_namespaced_service_account(
            NS, field_selector='metadata.name=default').items, 60)
        yield {'kube': kube_real, 'api': api, 'core': core, 'co': co}
    finally:
        core.delete_namespace(NS)
        wait('the pods of %s gone' % NS, lambda: not core.list_namespaced_pod(NS).items, 90)
        for name, _kind in CLASSES.values():
            co.delete_cluster_custom_object(GROUP, VERSION, 'deviceclasses', name)


def test_DRAX_12_mig_else_time_sliced_template_accepted_as_rendered(lab):
    obj = render({'name': 'mig-else-shared', 'first_available': [
        {'kind': 'mig', 'mig_profile': '1g.10gb'}, {'name': 'shared', 'kind': 'time-slicing', 'interval': 'Short'}]})
    got = lab['co'].create_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaimtemplates', obj)
    # the server kept every field the collection wrote (nothing dropped by a gate, nothing defaulted away)
    sent, kept = obj['spec']['spec']['devices'], got['spec']['spec']['devices']
    assert [s['name'] for s in kept['requests'][0]['firstAvailable']] == ['mig-0', 'shared']
    assert kept['config'] == sent['config'] and kept['config'][0]['requests'] == ['mig-else-shared/shared']
    for s_sent, s_kept in zip(sent['requests'][0]['firstAvailable'], kept['requests'][0]['firstAvailable']):
        assert dict((k, s_kept[k]) for k in s_sent) == s_sent, (s_sent, s_kept)


def test_DRAX_12_scheduler_takes_the_first_alternative_it_can_allocate(lab, tmp_path):
    core, co, api = lab['core'], lab['co'], lab['api']
    obj = own_classes(render({'name': 'small-mig', 'first_available': [
        {'kind': 'mig', 'mig_profile': '1g.10gb'}, {'kind': 'mig', 'mig_profile': '3g.40gb'}]}))
    co.create_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaimtemplates', obj)
    body = bare_node(NODE, 'h100x2-mig-mixed')
    body['spec'] = {'taints': [{'key': TAINT_KEY, 'effect': 'NoSchedule'}]}
    core.create_node(body)
    try:
        dra_slices.publish(api, NODE, 'h100-mig.json', str(tmp_path))
        profiles = dict((d['name'], d['attributes'].get('profile', {}).get('string'))
                        for s in dra_slices.slices_of(api, NODE) for d in s['spec']['devices'])
        assert sorted(p for p in profiles.values() if p) == ['1g.10gb', '1g.10gb', '3g.40gb'], profiles
        got = []
        for i in range(3):
            # one pod at a time: the first finds every device free and must still get the first alternative
            core.create_namespaced_pod(NS, {
                'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'app-%d' % i},
                'spec': {'nodeSelector': {'kubernetes.io/hostname': NODE}, 'terminationGracePeriodSeconds': 0,
                         'tolerations': [{'key': TAINT_KEY, 'operator': 'Exists', 'effect': 'NoSchedule'}],
                         'resourceClaims': [{'name': 'gpu', 'resourceClaimTemplateName': 'small-mig'}],
                         'containers': [{'name': 'main', 'image': 'registry.invalid/cuda-app:1',
                                         'resources': {'claims': [{'name': 'gpu'}]}}]}})

            def allocated(pod='app-%d' % i):
                st = core.read_namespaced_pod(pod, NS).status.resource_claim_statuses or []
                if not st or not st[0].resource_claim_name:
                    return None
                c = co.get_namespaced_custom_object(GROUP, VERSION, NS, 'resourceclaims', st[0].resource_claim_name)
                return c if (c.get('status') or {}).get('allocation') else None
            claim = wait('the claim of app-%d allocated' % i, allocated, 90)
            [r] = claim['status']['allocation']['devices']['results']
            assert r['pool'] == NODE, r
            got.append((r['request'], profiles[r['device']]))
        # each result names the claim's request and the subrequest the scheduler took
        assert got == [('small-mig/mig-0', '1g.10gb'), ('small-mig/mig-0', '1g.10gb'),
                       ('small-mig/mig-1', '3g.40gb')], got
    finally:
        for i in range(3):
            core.delete_namespaced_pod('app-%d' % i, NS)
        wait('the pods gone', lambda: not core.list_namespaced_pod(NS).items, 60)
        for s in dra_slices.slices_of(api, NODE):
            co.delete_cluster_custom_object(GROUP, VERSION, 'resourceslices', s['metadata']['name'])
        core.delete_node(NODE)
