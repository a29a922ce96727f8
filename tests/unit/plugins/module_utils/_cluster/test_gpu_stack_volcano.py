# -*- coding: utf-8 -*-
"""Volcano stack against upstream volcano-sh/volcano v1.15.1, volcano-sh/devices v1.0.0 and
Project-HAMi/volcano-vgpu-device-plugin v1.12.0 (rows of docs/conformance/volcano.md)."""
import json

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import live as stacks_live
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import volcano as vol
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError


def render(**vs):
    return r.render(dict(strategy='volcano', pool='p1', nodes=['n1'], settings={'volcano': vs}))


def obj(out, kind, name):
    found = [m for m in out['manifests'] if m['kind'] == kind and m['metadata']['name'] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def conf(out):
    return json.loads(obj(out, 'ConfigMap', 'volcano-scheduler-configmap')['data']['volcano-scheduler.conf'])


def plugin_args(c, name):
    return [p for t in c['tiers'] for p in t['plugins'] if p['name'] == name][0].get('arguments') or {}


def plugin_container(out):
    return obj(out, 'DaemonSet', 'volcano-device-plugin-p1')['spec']['template']['spec']['containers'][0]


def rules_allow(rules, resource, verb):
    return any('' in ru['apiGroups'] and resource in ru['resources'] and verb in ru['verbs'] for ru in rules)


def test_VOL_01_current_volcano_uses_deviceshare():
    out = render()
    assert vol.VOLCANO_SCHEMA['version']['default'] == '1.15'
    args = plugin_args(conf(out), 'deviceshare')
    assert args == {'deviceshare.GPUSharingEnable': False, 'deviceshare.VGPUEnable': True}


def test_VOL_02_default_mode_is_vgpu_and_gpu_share_is_flagged():
    out = render()
    assert 'volcano.sh/vgpu-memory' in out['resources']
    assert not any('deprecated' in w for w in out['warnings'])
    out = render(mode='gpu-share', accept_known_bad_images=True)
    assert any('deprecated upstream since Volcano 1.9' in w for w in out['warnings'])


def test_VOL_03_predicates_up_to_1_8_2_deviceshare_after():
    assert plugin_args(vol.scheduler_conf(vol.parse_version('1.8.2', 'v'), 'gpu-share'), 'predicates') == \
        {'predicate.GPUSharingEnable': True}
    after = vol.scheduler_conf(vol.parse_version('v1.8.3', 'v'), 'gpu-share')
    assert plugin_args(after, 'deviceshare')['deviceshare.GPUSharingEnable'] is True
    with pytest.raises(StackError, match='needs Volcano >= 1.9'):
        render(version='1.8', mode='vgpu')


def test_VOL_04_gpu_number_enable_is_dropped_when_merging():
    live = {'actions': 'enqueue, allocate', 'tiers': [{'plugins': [
        {'name': 'deviceshare', 'arguments': {'deviceshare.GPUNumberEnable': True, 'deviceshare.SchedulePolicy': 'binpack'}},
        {'name': 'predicates', 'arguments': {'predicate.GPUNumberEnable': True, 'x': 1}}]}]}
    for mode in ('vgpu', 'gpu-share'):
        out = render(mode=mode, existing_conf=yaml.safe_dump(live), accept_known_bad_images=True)
        c = conf(out)
        args = plugin_args(c, 'deviceshare')
        assert 'deviceshare.GPUNumberEnable' not in args
        assert args['deviceshare.SchedulePolicy'] == 'binpack'
        assert plugin_args(c, 'predicates') == {'x': 1}
        assert any('deviceshare.GPUNumberEnable' in w for w in out['warnings'])


def test_VOL_05_volcano_device_plugin_v1_0_0_gets_no_flags():
    c = plugin_container(render(mode='gpu-share', accept_known_bad_images=True))
    assert c['image'] == 'docker.io/volcanosh/volcano-device-plugin:v1.0.0'
    assert 'args' not in c and 'command' not in c


def test_VOL_06_gpu_share_plugin_rbac():
    rules = obj(render(mode='gpu-share', accept_known_bad_images=True), 'ClusterRole', 'volcano-device-plugin-p1')['rules']
    for res, verb in [('nodes', 'get'), ('nodes/status', 'patch'), ('pods', 'list'), ('pods', 'update')]:
        assert rules_allow(rules, res, verb), (res, verb)


def test_VOL_07_vgpu_plugin_image_is_current():
    assert plugin_container(render())['image'] == 'docker.io/projecthami/volcano-vgpu-device-plugin:v1.12.0'


def test_VOL_08_vgpu_plugin_rbac_nodes_update_patch():
    rules = obj(render(), 'ClusterRole', 'volcano-device-plugin-p1')['rules']
    for res, verb in [('nodes', 'update'), ('nodes', 'patch'), ('nodes/status', 'patch'), ('pods', 'patch'),
                      ('configmaps', 'get')]:
        assert rules_allow(rules, res, verb), (res, verb)


def test_VOL_09_isolation_library_installed_on_the_node():
    out = render()
    c = plugin_container(out)
    assert c['lifecycle']['postStart']['exec']['command'] == ['/bin/sh', '-c', 'cp -f /k8s-vgpu/lib/nvidia/* /usr/local/vgpu/']
    vols = dict((v['name'], v) for v in obj(out, 'DaemonSet', 'volcano-device-plugin-p1')['spec']['template']['spec']['volumes'])
    assert vols['lib']['hostPath']['path'] == '/usr/local/vgpu'
    assert {'name': 'lib', 'mountPath': '/usr/local/vgpu'} in c['volumeMounts']


def test_VOL_10_vgpu_device_config_in_kube_system():
    cm = obj(render(device_split_count=4), 'ConfigMap', 'volcano-vgpu-device-config')
    assert cm['metadata']['namespace'] == 'kube-system'
    dev = json.loads(cm['data']['device-config.yaml'])['nvidia']
    assert dev['resourceCountName'] == 'volcano.sh/vgpu-number' and dev['resourceMemoryName'] == 'volcano.sh/vgpu-memory'
    assert dev['deviceSplitCount'] == 4


def test_VOL_11_vgpu_container_as_upstream():
    c = plugin_container(render(device_split_count=4))
    assert c['args'] == ['--device-split-count=4']
    assert c['securityContext']['privileged'] is True and 'SYS_ADMIN' in c['securityContext']['capabilities']['add']
    env = dict((e['name'], e.get('value')) for e in c['env'])
    assert env['HOOK_PATH'] == '/usr/local/vgpu' and env['NVIDIA_VISIBLE_DEVICES'] == 'all'
    assert env['NVIDIA_DRIVER_CAPABILITIES'] == 'utility'
    assert {m['mountPath'] for m in c['volumeMounts']} >= {'/config', '/var/lib/kubelet/device-plugins', '/tmp'}


def test_VOL_12_a_changed_vgpu_device_config_rolls_the_device_plugin():
    """Issue #27 3.2: the vGPU plugin loads volcano-vgpu-device-config once, at start (LoadNvidiaConfig)."""
    def ann(out):
        return obj(out, 'DaemonSet', 'volcano-device-plugin-p1')['spec']['template']['metadata'].get('annotations') or {}
    before, again, after = render(), render(), render(device_split_count=4)
    assert len(ann(before)['checksum/config']) == 64
    assert ann(before) == ann(again)
    assert ann(after)['checksum/config'] != ann(before)['checksum/config']


@pytest.mark.parametrize('kube,ok', [('v1.23.0', True), ('v1.35.1', True), ('v1.36.0', False), ('v1.37.2+k3s1', False),
                                     ('v1.22.5', False)])
def test_VOL_13_kubernetes_outside_volcanos_compatibility_table_refused(kube, ok):
    """Issue #27 3.7: Volcano 1.15's compatibility table lists Kubernetes 1.23 to 1.35."""
    if ok:
        render(kube_version=kube)
    else:
        with pytest.raises(StackError, match='compatible with Kubernetes 1.23 to 1.35.*accept_untested_kubernetes'):
            render(kube_version=kube)
        out = render(kube_version=kube, accept_untested_kubernetes=True)
        assert any('accepted by' in w for w in out['warnings'])
    # Volcano 1.14 ends at 1.34
    if kube.startswith('v1.35'):
        with pytest.raises(StackError, match='1.23 to 1.34'):
            render(kube_version=kube, version='1.14')
    # the role reads the version from the API server
    assert stacks_live.queries('volcano', settings={})['version'] is True
    merged = stacks_live.merge({'strategy': 'volcano', 'settings': {}}, {'version': {'gitVersion': kube}})
    assert merged['settings']['volcano']['kube_version'] == kube


def test_VOL_14_gpu_share_device_plugin_v1_0_0_refused_unless_accepted():
    """Issue #27 3.5: volcano-device-plugin v1.0.0 updates pods at Allocate with a Kubernetes 1.18 client."""
    with pytest.raises(StackError, match='Kubernetes 1.18 client.*seccompProfile.*accept_known_bad_images'):
        render(mode='gpu-share')
    with pytest.raises(StackError, match='accept_known_bad_images'):
        render(mode='gpu-share', device_plugin_image='reg.example/m/volcanosh/volcano-device-plugin:v1.0.0')
    out = render(mode='gpu-share', accept_known_bad_images=True)
    assert any('Kubernetes 1.18 client' in w for w in out['warnings'])
    out = render(mode='gpu-share', device_plugin_image='reg.example/volcano-device-plugin:v1.0.0-k8s1.33')
    assert not any('1.18 client' in w for w in out['warnings'])
    # a pool deployed earlier stays removable
    r.render(dict(strategy='volcano', pool='p1', nodes=['n1'], settings={'volcano': {'mode': 'gpu-share'}},
                  check_conflicts=False))


def test_VOL_15_a_changed_vgpu_device_config_restarts_volcano_scheduler():
    """Issue #27 3.6: volcano-scheduler loads the vGPU device config once per process (sync.Once)."""
    before, after = render(), render(device_split_count=4)
    (rs,) = before['restarts']
    assert (rs['kind'], rs['namespace'], rs['name']) == ('Deployment', 'volcano-system', 'volcano-scheduler')
    assert rs['when_changed'] == {'kind': 'ConfigMap', 'namespace': 'kube-system', 'name': 'volcano-vgpu-device-config'}
    assert rs['value'] != after['restarts'][0]['value']
    assert render(scheduler_deployment='vc-scheduler', namespace='vc')['restarts'][0]['name'] == 'vc-scheduler'
    # gpu-share has no device config; removal restarts nothing
    assert render(mode='gpu-share', accept_known_bad_images=True)['restarts'] == []
    assert r.render(dict(strategy='volcano', pool='p1', nodes=['n1'], settings={'volcano': {}},
                         check_conflicts=False))['restarts'] == []


def test_scheduler_configmap_name_is_a_setting_like_the_deployment():
    """Issue #37 item 9: the scheduler Deployment's name was a setting, its ConfigMap's was fixed (and written twice)."""
    out = render(scheduler_configmap='vc-sched-conf', scheduler_deployment='vc-sched')
    cms = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and vol.CONF_KEY in (m.get('data') or {})]
    assert [m['metadata']['name'] for m in cms] == ['vc-sched-conf']
    assert render()['adopted_manifests'][0]['metadata']['name'] == 'volcano-scheduler-configmap'
    q = stacks_live.queries('volcano', settings={'volcano': {'scheduler_configmap': 'vc-sched-conf'}})
    assert [x['name'] for x in q['queries'] if x['key'] == 'volcano_conf'] == ['vc-sched-conf']
    q = stacks_live.queries('volcano', settings={'volcano': {}})
    assert [x['name'] for x in q['queries'] if x['key'] == 'volcano_conf'] == ['volcano-scheduler-configmap']
    with pytest.raises(StackError, match='scheduler_configmap'):
        render(scheduler_configmap='Bad Name')
