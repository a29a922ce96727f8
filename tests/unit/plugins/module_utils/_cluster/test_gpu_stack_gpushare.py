# -*- coding: utf-8 -*-
"""gpushare stack against AliyunContainerService/gpushare-scheduler-extender (c0b6141) and gpushare-device-plugin
(45fb8b8) (rows of docs/conformance/gpushare.md; gpu-manager: test_gpu_stack_gpu_manager.py)."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpushare as gs
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError

T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}], 'sharing': {}}
GOOD = {'extender_image': 'reg.example/acs/k8s-gpushare-schd-extender:86f6025',
        'device_plugin_image': 'reg.example/acs/k8s-gpushare-plugin:45fb8b8'}


def render(strategy='gpushare', **settings):
    key = 'gpushare'
    removing = settings.pop('removing', False)
    return r.render(dict(strategy=strategy, pool='p1', nodes=['n1'], facts={'n1': T4}, settings={key: settings},
                         check_conflicts=not removing))


def objs(out, kind):
    return [m for m in out['manifests'] if m['kind'] == kind]


def test_GSH_01_upstream_default_images_refused_with_the_fixing_commits():
    with pytest.raises(StackError) as e:
        render()
    msg = str(e.value)
    for needle in ('1.11-d170d8a', 'v2-1.11-aff8a23', '4e418f19fa9c9d1f792705d98e672e532372b6cc',
                   'dcd90b4c58123a28b9140a561f1791c4c26e1762', 'docker build', 'accept_known_bad_images',
                   'gpu_sharing_stack_strategy: hami'):
        assert needle in msg, needle
    # naming a known-bad image explicitly is refused too (through a mirror as well)
    with pytest.raises(StackError, match='extender_image reg.example/m/acs/k8s-gpushare-schd-extender:1.11-d170d8a'):
        render(extender_image='reg.example/m/acs/k8s-gpushare-schd-extender:1.11-d170d8a',
               device_plugin_image=GOOD['device_plugin_image'])


def test_GSH_02_accepting_the_risk_deploys_upstream_images_with_a_warning():
    out = render(accept_known_bad_images=True)
    assert gs.EXTENDER_IMAGE in out['images'] and gs.PLUGIN_IMAGE in out['images']
    assert len([w for w in out['warnings'] if 'known-bad image' in w]) == 2


def test_GSH_03_named_images_deploy_without_warning():
    out = render(**GOOD)
    assert out['images'] == [GOOD['extender_image'], GOOD['device_plugin_image']]
    assert not [w for w in out['warnings'] if 'known-bad' in w]


def test_GSH_04_extender_as_upstream():
    out = render(**GOOD)
    d = objs(out, 'Deployment')[0]['spec']['template']['spec']
    assert d['hostNetwork'] is True
    assert d['containers'][0]['ports'][0]['containerPort'] == 12345
    svc = objs(out, 'Service')[0]['spec']
    assert svc['type'] == 'NodePort' and svc['ports'][0]['nodePort'] == 32766 and svc['ports'][0]['port'] == 12345


def test_GSH_05_registration_node_port_host_network_or_cluster_ip():
    out = render(**GOOD)
    assert out['extender_url'] == 'http://127.0.0.1:32766/gpushare-scheduler'
    assert any('iptables mode only' in n for n in out['notes'])
    out = render(registration='host-network', **GOOD)
    assert out['extender_url'] == 'http://127.0.0.1:12345/gpushare-scheduler'
    ds = [m for m in objs(out, 'DaemonSet') if m['metadata']['name'] == 'gpushare-schd-extender'][0]
    assert ds['spec']['template']['spec']['hostNetwork'] is True
    assert not objs(out, 'Deployment') and not objs(out, 'Service')
    out = render(registration='cluster-ip', extender_cluster_ip='10.96.0.50', **GOOD)
    assert out['extender_url'] == 'http://10.96.0.50:12345/gpushare-scheduler'
    assert objs(out, 'Service')[0]['spec'] == {'type': 'ClusterIP', 'clusterIP': '10.96.0.50', 'ports': [
        {'name': 'http', 'port': 12345, 'targetPort': 12345, 'protocol': 'TCP'}],
        'selector': {'app.kubernetes.io/name': 'gpushare-schd-extender'}}
    with pytest.raises(StackError, match='extender_cluster_ip, a free IPv4 address'):
        render(registration='cluster-ip', **GOOD)
    with pytest.raises(StackError, match='only used with'):
        render(extender_cluster_ip='10.96.0.50', **GOOD)
    with pytest.raises(StackError, match='needs gpu_sharing_stack_gpushare.extender_host_network: true'):
        render(registration='host-network', extender_host_network=False, **GOOD)


def test_GSH_06_device_plugin_as_upstream():
    out = render(**GOOD)
    ds = [m for m in objs(out, 'DaemonSet') if m['metadata']['name'] == 'gpushare-device-plugin-p1'][0]['spec']['template']['spec']
    c = ds['containers'][0]
    assert c['command'] == ['gpushare-device-plugin-v2', '-logtostderr', '--v=5', '--memory-unit=GiB']
    assert c['resources']['limits'] == {'cpu': '1', 'memory': '300Mi'} == c['resources']['requests']
    assert ds['hostNetwork'] is True and ds['nodeSelector']['gpushare'] == 'true'


def test_GSH_07_device_plugin_rbac_reads_pods_from_the_api_server():
    out = render(**GOOD)
    rules = [m for m in objs(out, 'ClusterRole') if m['metadata']['name'] == 'gpushare-device-plugin-p1'][0]['rules']
    # without --query-kubelet (default false, not set by upstream's DaemonSet) pods come from the API server
    for verb in ('get', 'list', 'watch'):
        assert any('pods' in ru['resources'] and verb in ru['verbs'] for ru in rules), verb
    plugin = [m for m in objs(out, 'DaemonSet') if m['metadata']['name'] == 'gpushare-device-plugin-p1'][0]
    assert not any('query-kubelet' in a for c in plugin['spec']['template']['spec']['containers']
                   for a in c.get('command', []) + c.get('args', []))
    assert any('nodes/proxy' in ru['resources'] and 'get' in ru['verbs'] for ru in rules)
    assert any('nodes/status' in ru['resources'] and 'patch' in ru['verbs'] for ru in rules)
    assert any('pods' in ru['resources'] and 'update' in ru['verbs'] for ru in rules)


def test_GSH_08_doctor_names_the_commits_and_the_build():
    out = dc.diagnose({'gpus': [], 'driver': {}}, extra={'cluster_images': [
        'reg.example/m/acs/k8s-gpushare-schd-extender:1.11-d170d8a', 'reg.example/m/acs/k8s-gpushare-plugin:v2-1.11-aff8a23']})
    found = dict((f['id'], f) for f in out if f['id'].startswith('gpushare_'))
    assert sorted(found) == ['gpushare_extender_bad_image', 'gpushare_plugin_bad_image']
    assert '4e418f19fa9c9d1f792705d98e672e532372b6cc' in found['gpushare_extender_bad_image']['remediation']
    assert 'dcd90b4c58123a28b9140a561f1791c4c26e1762' in found['gpushare_plugin_bad_image']['remediation']
    assert 'hami' in found['gpushare_plugin_bad_image']['remediation']


@pytest.mark.parametrize('mode', ['ipvs', 'nftables'])
def test_GSH_09_node_port_refused_when_kube_proxy_does_not_answer_on_loopback(mode):
    with pytest.raises(StackError, match='kube-proxy in %s mode' % mode):
        render(kube_proxy_config='apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: %s\n' % mode,
               **GOOD)
    with pytest.raises(StackError, match='registration to host-network or cluster-ip'):
        render(kube_proxy_mode=mode, **GOOD)
    assert render(registration='host-network', kube_proxy_mode=mode, **GOOD)['extender_url'].endswith(':12345/gpushare-scheduler')
    # iptables (or "" = kube-proxy's default, iptables on Linux) keeps the NodePort
    for ok in ('mode: iptables\n', 'mode: ""\n', ''):
        assert render(kube_proxy_config=ok, **GOOD)['extender_url'].endswith(':32766/gpushare-scheduler')


def test_GSH_10_a_pool_with_upstream_images_can_still_be_removed():
    out = render(removing=True)
    assert {m['metadata']['name'] for m in objs(out, 'DaemonSet')} == {'gpushare-device-plugin-p1'}
    assert gs.EXTENDER_IMAGE in out['images']


def test_GSH_11_extender_rbac_grants_exactly_the_calls_it_makes():
    # informers (list/watch) of nodes, pods and configmaps (configmaps at c0b6141 only); pods get and patch (c0b6141),
    # update (the published image, commit d170d8a); pods/binding create. No event is recorded (the recorder is wired
    # to a sink but never called), nodes and configmaps are read from the informers' caches, the legacy `bindings`
    # resource is not used: upstream's ClusterRole grants those, this one does not.
    for registration in ('node-port', 'host-network'):
        out = render(registration=registration, extender_host_network=registration == 'host-network', **GOOD)
        rules = [m for m in objs(out, 'ClusterRole') if m['metadata']['name'] == 'gpushare-schd-extender'][0]['rules']
        granted = sorted((g, res, v) for ru in rules for g in ru['apiGroups'] for res in ru['resources'] for v in ru['verbs'])
        assert granted == sorted([
            ('', 'nodes', 'list'), ('', 'nodes', 'watch'),
            ('', 'pods', 'get'), ('', 'pods', 'list'), ('', 'pods', 'watch'), ('', 'pods', 'patch'), ('', 'pods', 'update'),
            ('', 'pods/binding', 'create'),
            ('', 'configmaps', 'list'), ('', 'configmaps', 'watch')]), registration
        binding = [m for m in objs(out, 'ClusterRoleBinding') if m['metadata']['name'] == 'gpushare-schd-extender'][0]
        assert binding['roleRef']['name'] == 'gpushare-schd-extender'
        assert binding['subjects'][0]['name'] == 'gpushare-schd-extender'
