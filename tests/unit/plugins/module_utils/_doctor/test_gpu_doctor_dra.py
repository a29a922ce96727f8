# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The doctor's DRA check (check dra): for a node of a pool served by NVIDIA's DRA driver, the API served, the
driver's ResourceSlices for the node covering its GPUs, no NVIDIA device plugin beside it, CDI not off in containerd.
Slices shaped as gpu-kubelet-plugin v0.5.0 publishes them (lab/tests/integration/test_dra_real.py)."""
import copy

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc

GPU0 = {'index': 0, 'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-1e353c32-a7f7-c25e-7829-0711fd13d460'}
GPU1 = {'index': 1, 'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-2f4e6a10-0000-4000-8000-000000000001'}
FACTS = {'gpus': [GPU0, GPU1],
         'node': {'container_runtimes': {'installed': ['containerd'], 'containerd_enable_cdi': None}}}
APIS = ['v1', 'apps/v1', 'resource.k8s.io/v1', 'resource.k8s.io/v1beta2']


def rslice(node, devices, driver='gpu.nvidia.com'):
    return {'spec': {'driver': driver, 'nodeName': node, 'pool': {'name': node}, 'devices': devices}}


def full(uuid, name='gpu-0'):
    return {'name': name, 'attributes': {'type': {'string': 'gpu'}, 'uuid': {'string': uuid}}}


def mig(parent, name='gpu-1-mig-1g10gb-19-4'):
    return {'name': name, 'attributes': {'type': {'string': 'mig'}, 'uuid': {'string': 'MIG-x'},
                                         'parentUUID': {'string': parent}}}


def ids(found):
    return sorted(f['id'] for f in found)


def run(facts=None, sockets=(), **dra):
    extra = {'dra': dict({'node_name': 'h100-1'}, **dra), 'device_plugin_sockets': list(sockets)}
    return dc.check_dra(facts or copy.deepcopy(FACTS), extra)


def test_DRAL_14_healthy_dra_node_has_no_finding():
    assert run(api_versions=APIS, resource_slices=[rslice('h100-1', [full(GPU0['uuid']), mig(GPU1['uuid'])])],
               allocatable={'cpu': '64'}) == []
    # nothing given: nothing judged; not a DRA node: the check does nothing
    assert run() == [] and dc.check_dra(FACTS, {}) == []
    assert 'dra' in dc.CHECK_NAMES
    assert [f['id'] for f in dc.diagnose(FACTS, {'dra': {'api_versions': ['v1']}}, checks=['dra'])] == [
        'dra_api_not_served']


def test_DRAL_14_api_not_served():
    [f] = run(api_versions=['v1', 'resource.k8s.io/v1beta1', 'resource.k8s.io/v1beta2'])
    assert f['id'] == 'dra_api_not_served' and f['severity'] == 'critical'
    assert f['evidence'] == ['resource.k8s.io versions served: resource.k8s.io/v1beta1, resource.k8s.io/v1beta2']
    assert '1.34' in f['remediation']


def test_DRAL_14_driver_not_publishing_for_this_node():
    other = [rslice('t4-1', [full('GPU-x')]), rslice('h100-1', [{'name': 'nic'}], driver='net.example.com')]
    [f] = run(resource_slices=other)
    assert f['id'] == 'dra_driver_not_publishing' and f['severity'] == 'critical'
    assert f['evidence'] == ['ResourceSlices of gpu.nvidia.com for h100-1: none (of 2 given)']


def test_DRAL_14_gpu_not_published():
    """GPU 1 is neither a published full GPU nor the parent of a published MIG device (MIG mode on, no MIG device)."""
    [f] = run(resource_slices=[rslice('h100-1', [full(GPU0['uuid'])])])
    assert f['id'] == 'dra_gpus_not_published' and f['severity'] == 'warning'
    assert f['evidence'][0] == 'not published: %s (NVIDIA H100 80GB HBM3)' % GPU1['uuid']
    # attributes qualified with the driver's domain count the same
    qualified = {'name': 'gpu-1', 'attributes': {'gpu.nvidia.com/uuid': {'string': GPU1['uuid']}}}
    assert run(resource_slices=[rslice('h100-1', [full(GPU0['uuid']), qualified])]) == []


def test_DRAL_14_device_plugin_beside_the_driver():
    [f] = run(sockets=['/var/lib/kubelet/device-plugins/nvidia-gpu.sock'])
    assert f['id'] == 'dra_device_plugin_beside' and f['severity'] == 'critical'
    assert f['evidence'] == ['/var/lib/kubelet/device-plugins/nvidia-gpu.sock registered with the kubelet']
    [f] = run(allocatable={'nvidia.com/gpu': '8'})
    assert f['evidence'] == ['node allocatable nvidia.com/gpu: 8']
    assert run(allocatable={'nvidia.com/gpu': '0'}) == []


def test_DRAL_14_containerd_cdi_off():
    f = copy.deepcopy(FACTS)
    f['node']['container_runtimes']['containerd_enable_cdi'] = False
    [found] = run(f)
    assert found['id'] == 'dra_cdi_disabled' and found['severity'] == 'critical'
    f['node']['container_runtimes']['containerd_enable_cdi'] = True
    assert run(f) == []


def runtimes(version, enable):
    f = copy.deepcopy(FACTS)
    f['node']['container_runtimes'].update(containerd_version=version, containerd_enable_cdi=enable)
    return f


def test_CTD_01_containerd_before_1_7_cannot_do_cdi():
    for enable in (None, True, False):
        [found] = run(runtimes('1.6.20', enable))
        assert found['id'] == 'dra_cdi_unsupported' and found['severity'] == 'critical'
        assert 'containerd 1.6.20 cannot do CDI' in found['summary']
        assert 'containerd --version: 1.6.20' in found['evidence']
    [found] = run(runtimes('1.6.20', True))
    assert 'containerd CRI config: enable_cdi = true (ignored by this release)' in found['evidence']


def test_CTD_02_containerd_1_7_cdi_off_unless_set():
    [found] = run(runtimes('1.7.27', None))
    assert found['id'] == 'dra_cdi_disabled' and 'containerd 1.7.27 without enable_cdi = true' in found['summary']
    assert found['evidence'][0] == 'containerd --version: 1.7.27 (enable_cdi defaults to false)'
    assert run(runtimes('1.7.27', True)) == []
    [found] = run(runtimes('1.7.27', False))
    assert found['id'] == 'dra_cdi_disabled' and 'enable_cdi = false' in found['summary']


def test_CTD_05_containerd_2_4_cdi_on_even_with_a_leftover_false():
    """containerd 2.4 removed enable_cdi (CDI always on): a file that still sets it to false is no finding."""
    for enable in (None, True, False):
        assert run(runtimes('2.4.2', enable)) == [], enable
    [found] = run(runtimes('2.3.9', False))
    assert found['id'] == 'dra_cdi_disabled'


def test_CTD_03_containerd_2_cdi_on_unless_false():
    assert run(runtimes('2.0.0', None)) == [] and run(runtimes('2.3.4', True)) == []
    [found] = run(runtimes('2.3.4', False))
    assert found['id'] == 'dra_cdi_disabled'
    # release unknown: only an explicit false is reported, as before
    assert run(runtimes(None, None)) == []
