# -*- coding: utf-8 -*-
"""NVIDIA device plugin and MIG manager stacks against upstream at the pinned tags.

Rows of docs/conformance/nvidia-device-plugin.md (DP-nn) and docs/conformance/mig-manager.md (MIGM-nn): each test
names its row; the upstream file each row comes from is in the tables."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import nvidia as nvd
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import registry
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import pins

T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4'}],
      'sharing': {'mps': {'allowed': True, 'max_clients': 48}, 'mig': {'allowed': False, 'reason': 'not MIG capable'}}}
A100 = {'gpus': [{'index': i} for i in range(2)],
        'sharing': {'mps': {'allowed': True, 'max_clients': 48},
                    'mig': {'allowed': True, 'profiles': {'0': ['1g.10gb', '3g.40gb'], '1': ['1g.10gb', '3g.40gb']}}}}
MIG = {'mig': {'devices': {'1g.10gb': 7}}}


def render(strategy, settings=None, **kw):
    p = dict(strategy=strategy, pool='p1', nodes=['n1'], facts={'n1': A100 if strategy == 'mig' else T4},
             settings=dict(MIG, **(settings or {})))
    p.update(kw)
    return r.render(p)


def objs(out, kind):
    return [m for m in out['manifests'] if m['kind'] == kind]


def ds(out, prefix):
    return [m for m in objs(out, 'DaemonSet') if m['metadata']['name'].startswith(prefix)][0]


def pod(out, prefix):
    return ds(out, prefix)['spec']['template']['spec']


def ctr(spec, name):
    return [c for c in spec['containers'] if c['name'] == name][0]


def env(container):
    return dict((e['name'], e.get('value')) for e in container.get('env', []))


def mounts(container):
    return dict((m['mountPath'], m) for m in container.get('volumeMounts', []))


def volumes(spec):
    return dict((v['name'], v) for v in spec['volumes'])


NV = ['exclusive', 'time-slicing', 'mps', 'mig']


# ---------------------------------------------------------------------------------------------------- device plugin
def test_DP_01_device_plugin_image_is_the_current_release():
    # the pin's home (pins.py), not a literal: a pin bump is bump-pin.py alone
    assert nvd.DEVICE_PLUGIN_IMAGE == pins.ref('nvidia-device-plugin')
    assert pins.ref('nvidia-device-plugin') == 'nvcr.io/nvidia/k8s-device-plugin:' + pins.tag('nvidia-device-plugin')
    for strategy in NV:
        out = render(strategy)
        assert ctr(pod(out, 'nvidia-device-plugin-'), 'nvidia-device-plugin-ctr')['image'] == nvd.DEVICE_PLUGIN_IMAGE
    out = render('exclusive', registry='reg.example/m')
    assert 'reg.example/m/nvidia/k8s-device-plugin:' + pins.tag('nvidia-device-plugin') in out['images']


@pytest.mark.parametrize('strategy', NV)
def test_DP_02_every_device_plugin_pod_names_the_runtime_class(strategy):
    out = render(strategy)
    for d in objs(out, 'DaemonSet'):
        assert d['spec']['template']['spec']['runtimeClassName'] == 'nvidia', d['metadata']['name']
    # empty disables it: the pods then rely on nvidia being the default runtime
    out = render(strategy, settings={'nvidia': {'runtime_class_name': ''}})
    for d in objs(out, 'DaemonSet'):
        assert 'runtimeClassName' not in d['spec']['template']['spec']
    assert objs(out, 'RuntimeClass') == []
    assert any('runtime_class_name is empty' in n for n in out['notes'])


def test_DP_03_runtime_class_rendered_unless_one_exists():
    out = render('exclusive')
    rc = objs(out, 'RuntimeClass')
    assert [(o['metadata']['name'], o['handler'], o['apiVersion']) for o in rc] == [('nvidia', 'nvidia', 'node.k8s.io/v1')]
    assert out['manifests'][0]['kind'] == 'RuntimeClass'  # before the pods that name it
    assert rc[0] in out['shared_manifests']
    # the same object whatever the strategy or pool: pools of several NVIDIA strategies never rewrite it
    assert objs(render('mig', pool='other'), 'RuntimeClass') == rc
    # one made by someone else (e.g. role nvidia_container_runtime, or by hand) is left alone
    foreign = {'metadata': {'name': 'nvidia', 'labels': {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu'}}, 'handler': 'nvidia'}
    assert objs(render('exclusive', live_runtime_classes=[foreign]), 'RuntimeClass') == []
    odd = {'metadata': {'name': 'nvidia'}, 'handler': 'nvidia-cdi'}
    out = render('exclusive', live_runtime_classes=[odd])
    assert objs(out, 'RuntimeClass') == [] and any('handler nvidia-cdi' in w for w in out['warnings'])
    # ours, live: rendered again (zero writes) so that removal can take it
    assert objs(render('exclusive', live_runtime_classes=rc), 'RuntimeClass') == rc
    assert objs(render('exclusive', settings={'nvidia': {'runtime_class_create': False}}), 'RuntimeClass') == []
    # removal: only ours, only when no other NVIDIA pool is left
    gone = render('exclusive', check_conflicts=False, live_runtime_classes=[foreign])
    assert gone['shared_manifests'] == []
    live = [{'metadata': {'name': 'n2', 'labels': {'gpuops.io/sharing-pool': 'p2', 'gpuops.io/sharing-strategy': 'mig'}}}]
    assert render('exclusive', check_conflicts=False, live_runtime_classes=rc, live_nodes=live)['other_pools'] == ['p2']
    with pytest.raises(StackError, match='gpu_sharing_stack_nvidia.runtime_class_name'):
        render('exclusive', settings={'nvidia': {'runtime_class_name': 'Bad_Name'}})


def test_DP_04_mps_control_daemon_host_pid_without_share_process_namespace():
    spec = pod(render('mps'), 'nvidia-mps-control-daemon-')
    assert spec['hostPID'] is True
    assert 'shareProcessNamespace' not in spec  # the API server refuses both on one pod


def test_DP_05_mps_control_daemon_placement_and_privileges():
    spec = pod(render('mps'), 'nvidia-mps-control-daemon-')
    assert spec['nodeSelector']['nvidia.com/mps.capable'] == 'true'
    assert ctr(spec, 'mps-control-daemon-ctr')['securityContext'] == {'privileged': True}
    init = spec['initContainers'][0]
    assert init['command'] == ['mps-control-daemon', 'mount-shm'] and init['securityContext'] == {'privileged': True}
    assert init['volumeMounts'][0]['mountPropagation'] == 'Bidirectional'
    assert render('mps')['node_labels']['n1']['nvidia.com/mps.capable'] == 'true'
    e = env(ctr(spec, 'mps-control-daemon-ctr'))
    assert e['NVIDIA_VISIBLE_DEVICES'] == 'all' and e['NVIDIA_DRIVER_CAPABILITIES'] == 'compute,utility'
    assert 'NVIDIA_MIG_MONITOR_DEVICES' not in e  # only where some config has a MIG strategy


@pytest.mark.parametrize('strategy', ['exclusive', 'time-slicing', 'mps'])
def test_DP_06_plugin_drops_every_capability_without_mig(strategy):
    spec = pod(render(strategy), 'nvidia-device-plugin-')
    want = {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}}
    assert ctr(spec, 'nvidia-device-plugin-ctr')['securityContext'] == want
    assert ctr(spec, 'config-manager')['securityContext'] == want
    assert 'NVIDIA_MIG_MONITOR_DEVICES' not in env(ctr(spec, 'nvidia-device-plugin-ctr'))


def test_DP_07_mig_monitor_devices_gets_cap_sys_admin():
    spec = pod(render('mig'), 'nvidia-device-plugin-')
    plugin = ctr(spec, 'nvidia-device-plugin-ctr')
    assert env(plugin)['NVIDIA_MIG_MONITOR_DEVICES'] == 'all'
    assert plugin['securityContext'] == {'capabilities': {'add': ['SYS_ADMIN']}}
    assert ctr(spec, 'config-manager')['securityContext'] == {'capabilities': {'add': ['SYS_ADMIN']}}
    # a MIG config among the extra configs a node may switch to counts too
    extra = {'mig-mixed': {'version': 'v1', 'flags': {'migStrategy': 'mixed'}}}
    spec = pod(render('time-slicing', settings={'nvidia': {'extra_configs': extra}}), 'nvidia-device-plugin-')
    assert ctr(spec, 'nvidia-device-plugin-ctr')['securityContext'] == {'capabilities': {'add': ['SYS_ADMIN']}}
    assert env(ctr(spec, 'nvidia-device-plugin-ctr'))['NVIDIA_MIG_MONITOR_DEVICES'] == 'all'


def test_DP_08_volume_mounts_strategy_gets_cap_sys_admin():
    spec = pod(render('exclusive', settings={'nvidia': {'device_list_strategy': 'volume-mounts'}}), 'nvidia-device-plugin-')
    assert ctr(spec, 'nvidia-device-plugin-ctr')['securityContext'] == {'capabilities': {'add': ['SYS_ADMIN']}}


def test_DP_09_pass_device_specs_runs_privileged():
    out = render('exclusive', settings={'nvidia': {'pass_device_specs': True}})
    spec = pod(out, 'nvidia-device-plugin-')
    assert ctr(spec, 'nvidia-device-plugin-ctr')['securityContext'] == {'privileged': True}
    cfg = json.loads(objs(out, 'ConfigMap')[0]['data']['exclusive'])
    assert cfg['flags']['plugin']['passDeviceSpecs'] is True


@pytest.mark.parametrize('strategy', NV)
def test_DP_10_cdi_root_mounted(strategy):
    spec = pod(render(strategy), 'nvidia-device-plugin-')
    assert volumes(spec)['cdi-root']['hostPath'] == {'path': '/var/run/cdi', 'type': 'DirectoryOrCreate'}
    assert mounts(ctr(spec, 'nvidia-device-plugin-ctr'))['/var/run/cdi']['name'] == 'cdi-root'


@pytest.mark.parametrize('mode', ['cdi-annotations', 'cdi-cri'])
def test_DP_11_cdi_modes_mount_the_driver_root(mode):
    out = render('exclusive', settings={'nvidia': {'device_list_strategy': mode, 'driver_root': '/run/nvidia/driver'}},
                 cdi_spec_ready={'n1': True})
    spec = pod(out, 'nvidia-device-plugin-')
    plugin = ctr(spec, 'nvidia-device-plugin-ctr')
    assert env(plugin)['NVIDIA_DRIVER_ROOT'] == '/run/nvidia/driver'
    assert mounts(plugin)['/driver-root'] == {'name': 'driver-root', 'mountPath': '/driver-root', 'readOnly': True}
    assert volumes(spec)['driver-root']['hostPath'] == {'path': '/run/nvidia/driver', 'type': 'Directory'}
    cfg = json.loads(objs(out, 'ConfigMap')[0]['data']['exclusive'])
    assert cfg['flags']['plugin']['deviceListStrategy'] == [mode]
    # envvar mode mounts no driver root
    assert '/driver-root' not in mounts(ctr(pod(render('exclusive'), 'nvidia-device-plugin-'), 'nvidia-device-plugin-ctr'))


def test_DP_12_cdi_modes_refused_without_a_cdi_spec_on_every_node():
    s = {'nvidia': {'device_list_strategy': 'cdi-cri'}}
    with pytest.raises(StackError, match=r'gpu_sharing_stack_nvidia.device_list_strategy=cdi-cri .*no '
                                         r'nvidia_container_runtime_cdi_spec_ready fact for n1: run playbooks/node.yml'):
        render('exclusive', settings=s)
    with pytest.raises(StackError, match=r'n2 report nvidia_container_runtime_cdi_spec_ready=False'):
        render('exclusive', settings=s, nodes=['n1', 'n2'], facts={'n1': T4, 'n2': T4},
               cdi_spec_ready={'n1': True, 'n2': False})
    with pytest.raises(StackError, match=r'assume_cdi_spec_ready'):
        render('exclusive', settings=s, nodes=[], node_selector={'pool': 'x'})
    assert render('exclusive', settings=s, cdi_spec_ready={'n1': True})['manifests']
    out = render('exclusive', settings={'nvidia': {'device_list_strategy': 'cdi-cri', 'assume_cdi_spec_ready': True}})
    assert any('assume_cdi_spec_ready' in w for w in out['warnings'])
    # removal never needs the facts
    assert render('exclusive', settings=s, check_conflicts=False)['manifests']


def test_DP_13_config_manager_and_shared_process_namespace():
    out = render('time-slicing')
    spec = pod(out, 'nvidia-device-plugin-')
    assert spec['shareProcessNamespace'] is True and 'hostPID' not in spec
    init = env(spec['initContainers'][0])
    side = env(ctr(spec, 'config-manager'))
    for e in (init, side):
        assert e['NODE_LABEL'] == 'nvidia.com/device-plugin.config'
        assert e['CONFIG_FILE_SRCDIR'] == '/available-configs' and e['CONFIG_FILE_DST'] == '/config/config.yaml'
        assert e['FALLBACK_STRATEGIES'] == 'named,single' and e['DEFAULT_CONFIG'] == 'time-slicing'
    assert (init['ONESHOT'], init['SEND_SIGNAL']) == ('true', 'false')
    assert (side['ONESHOT'], side['SEND_SIGNAL'], side['SIGNAL'], side['PROCESS_TO_SIGNAL']) == \
        ('false', 'true', '1', 'nvidia-device-plugin')
    assert out['node_labels']['n1']['nvidia.com/device-plugin.config'] == 'time-slicing'


@pytest.mark.parametrize('strategy', NV)
def test_DP_27_config_file_target_is_mounted_where_the_config_is_read(strategy):
    """config-manager makes CONFIG_FILE_DST a symlink to CONFIG_FILE_SRCDIR/<name>: every container that reads
    /config/config.yaml must mount the ConfigMap at /available-configs too, or the link dangles (the plugin failed
    with 'open /config/config.yaml: no such file or directory' on a real lab node)."""
    out = render(strategy)
    for prefix, name in (('nvidia-device-plugin-', 'nvidia-device-plugin-ctr'),
                         ('nvidia-mps-control-daemon-', 'mps-control-daemon-ctr')):
        if prefix == 'nvidia-mps-control-daemon-' and strategy != 'mps':
            continue
        mounts = dict((m['name'], m['mountPath']) for m in ctr(pod(out, prefix), name)['volumeMounts'])
        assert mounts.get('config') == '/config', mounts
        assert mounts.get('available-configs') == '/available-configs', (name, mounts)


@pytest.mark.parametrize('strategy', NV)
def test_DP_14_plugin_env_visible_devices_and_capabilities(strategy):
    e = env(ctr(pod(render(strategy), 'nvidia-device-plugin-'), 'nvidia-device-plugin-ctr'))
    assert e['NVIDIA_VISIBLE_DEVICES'] == 'all' and e['NVIDIA_DRIVER_CAPABILITIES'] == 'compute,utility'
    assert e['CONFIG_FILE'] == '/config/config.yaml'


def test_DP_15_plugin_rbac_reads_nodes_only():
    out = render('exclusive')
    roles = [m for m in objs(out, 'ClusterRole') if m['metadata']['name'].startswith('nvidia-device-plugin-')]
    assert roles[0]['rules'] == [{'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']}]


def test_DP_16_mps_fail_requests_greater_than_one_only_where_it_has_an_effect():
    cfg = json.loads(objs(render('mps'), 'ConfigMap')[0]['data']['mps'])
    assert cfg['sharing']['mps']['failRequestsGreaterThanOne'] is True
    out = render('mps', settings={'mps': {'fail_requests_greater_than_one': False}})
    assert json.loads(objs(out, 'ConfigMap')[0]['data']['mps'])['sharing']['mps']['failRequestsGreaterThanOne'] is False
    old = {'nvidia': {'image': 'nvcr.io/nvidia/k8s-device-plugin:v0.17.1'}, 'mps': {'fail_requests_greater_than_one': False}}
    with pytest.raises(StackError, match=r'gpu_sharing_stack_mps.fail_requests_greater_than_one: false has no effect with '
                                         r'gpu_sharing_stack_nvidia.image nvcr.io/nvidia/k8s-device-plugin:v0.17.1'):
        render('mps', settings=old)
    digest = {'nvidia': {'image': 'nvcr.io/nvidia/k8s-device-plugin@sha256:' + 'a' * 64},
              'mps': {'fail_requests_greater_than_one': False}}
    with pytest.raises(StackError, match='before v0.20.0 force it on'):
        render('mps', settings=digest)
    assert nvd.image_version('nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.10.0-ubuntu20.04') == (0, 10, 0)


def test_DP_17_kubelet_device_plugins_dir():
    spec = pod(render('exclusive'), 'nvidia-device-plugin-')
    assert volumes(spec)['device-plugin']['hostPath'] == {'path': '/var/lib/kubelet/device-plugins', 'type': 'Directory'}
    assert '/var/lib/kubelet/device-plugins' in mounts(ctr(spec, 'nvidia-device-plugin-ctr'))


# ------------------------------------------------------------------------------------------------------ mig-manager
def test_MIGM_01_mig_manager_image_is_the_current_release():
    assert nvd.MIG_MANAGER_IMAGE == pins.ref('mig-manager')
    assert ctr(pod(render('mig'), 'nvidia-mig-manager-'), 'nvidia-mig-manager')['image'] == nvd.MIG_MANAGER_IMAGE


def test_MIGM_02_host_namespaces_and_privileged():
    spec = pod(render('mig'), 'nvidia-mig-manager-')
    assert spec['hostPID'] is True and spec['hostIPC'] is True and 'shareProcessNamespace' not in spec
    assert ctr(spec, 'nvidia-mig-manager')['securityContext'] == {'privileged': True}


def test_MIGM_03_host_mounts():
    spec = pod(render('mig'), 'nvidia-mig-manager-')
    m = mounts(ctr(spec, 'nvidia-mig-manager'))
    v = volumes(spec)
    assert v[m['/host']['name']]['hostPath']['path'] == '/' and m['/host']['mountPropagation'] == 'HostToContainer'
    assert v[m['/sys']['name']]['hostPath'] == {'path': '/sys', 'type': 'Directory'}
    assert v[m['/var/run/cdi']['name']]['hostPath'] == {'path': '/var/run/cdi', 'type': 'DirectoryOrCreate'}
    assert v[m['/mig-parted-config']['name']]['configMap']['name'] == 'mig-parted-config-p1'


def test_MIGM_04_environment():
    spec = pod(render('mig', namespace='gpu-system'), 'nvidia-mig-manager-')
    c = ctr(spec, 'nvidia-mig-manager')
    e = env(c)
    assert e['CONFIG_FILE'] == '/mig-parted-config/config.yaml' and e['HOST_ROOT_MOUNT'] == '/host'
    assert e['DEFAULT_GPU_CLIENTS_NAMESPACE'] == 'gpu-system' and e['WITH_REBOOT'] == 'false'
    refs = dict((x['name'], x['valueFrom']['fieldRef']['fieldPath']) for x in c['env'] if 'valueFrom' in x)
    assert refs == {'NODE_NAME': 'spec.nodeName', 'POD_NAME': 'metadata.name', 'POD_NAMESPACE': 'metadata.namespace'}


def test_MIGM_05_rbac_is_what_the_reconfigure_flow_calls():
    out = render('mig', namespace='gpu-system')
    cr = [m for m in objs(out, 'ClusterRole') if m['metadata']['name'] == 'nvidia-mig-manager-p1'][0]
    assert cr['rules'] == [{'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'patch']},
                           {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list']}]
    role = objs(out, 'Role')[0]
    assert role['metadata']['namespace'] == 'gpu-system'
    assert role['rules'] == [{'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list', 'delete']}]
    rb = objs(out, 'RoleBinding')[0]
    assert rb['roleRef']['name'] == role['metadata']['name']
    assert rb['subjects'] == [{'kind': 'ServiceAccount', 'name': 'nvidia-mig-manager-p1', 'namespace': 'gpu-system'}]
    assert pod(out, 'nvidia-mig-manager-')['serviceAccountName'] == 'nvidia-mig-manager-p1'


def test_MIGM_06_device_plugin_pods_carry_the_label_mig_manager_waits_on():
    out = render('mig', namespace='gpu-system')
    d = ds(out, 'nvidia-device-plugin-')
    assert d['spec']['template']['metadata']['labels']['app'] == 'nvidia-device-plugin-daemonset'
    assert 'app' not in d['spec']['selector']['matchLabels']  # the selector of a live DaemonSet cannot change
    assert d['metadata']['namespace'] == env(ctr(pod(out, 'nvidia-mig-manager-'), 'nvidia-mig-manager'))['DEFAULT_GPU_CLIENTS_NAMESPACE']


def test_MIGM_07_device_plugin_paused_through_the_deploy_label():
    out = render('mig')
    assert pod(out, 'nvidia-device-plugin-')['nodeSelector']['nvidia.com/gpu.deploy.device-plugin'] == 'true'
    assert out['node_labels']['n1']['nvidia.com/gpu.deploy.device-plugin'] == 'true'
    # while mig-manager holds the plugin paused, a re-run must not resume it
    paused = {'n1': {'labels': {'nvidia.com/gpu.deploy.device-plugin': 'paused-for-mig-change'}}}
    out = render('mig', node_state=paused)
    assert 'nvidia.com/gpu.deploy.device-plugin' not in out['node_labels']['n1']
    # for role gpu_node_labels (the one writer): a label to set only where the node has none, paused or not
    assert out['node_label_defaults'] == {'n1': {'nvidia.com/gpu.deploy.device-plugin': 'true'}}
    # removal takes the label away
    assert render('mig', node_state=paused, check_conflicts=False)['node_labels']['n1'][
        'nvidia.com/gpu.deploy.device-plugin'] == 'true'
    # without the manager nothing pauses the plugin: no deploy label, no selector on it
    out = render('mig', settings={'mig': {'devices': {'1g.10gb': 7}, 'manager': False}})
    assert 'nvidia.com/gpu.deploy.device-plugin' not in pod(out, 'nvidia-device-plugin-')['nodeSelector']
    assert 'nvidia.com/gpu.deploy.device-plugin' not in out['node_labels']['n1']
    assert out['node_label_defaults'] == {}
    assert out['readiness'] is None


def test_MIGM_08_mig_manager_node_selector():
    out = render('mig')
    assert pod(out, 'nvidia-mig-manager-')['nodeSelector'] == {'gpuops.io/sharing-pool': 'p1',
                                                               'nvidia.com/gpu.deploy.mig-manager': 'true'}
    assert out['node_labels']['n1']['nvidia.com/gpu.deploy.mig-manager'] == 'true'


def test_MIGM_09_mig_config_label_and_parted_config():
    out = render('mig')
    assert out['node_labels']['n1']['nvidia.com/mig.config'] == 'gpuops-1g-10gb-7'
    cm = [m for m in objs(out, 'ConfigMap') if m['metadata']['name'] == 'mig-parted-config-p1'][0]
    parted = json.loads(cm['data']['config.yaml'])
    assert parted['version'] == 'v1'
    assert parted['mig-configs']['gpuops-1g-10gb-7'] == [{'devices': 'all', 'mig-enabled': True,
                                                          'mig-devices': {'1g.10gb': 7}}]
    assert parted['mig-configs']['all-disabled'] == [{'devices': 'all', 'mig-enabled': False}]


def test_MIGM_10_readiness_is_mig_config_state_success():
    out = render('mig', nodes=['n1', 'n2'], facts={'n1': A100, 'n2': A100})
    assert out['readiness'] == {'label': 'nvidia.com/mig.config.state', 'value': 'success', 'failed_value': 'failed',
                                'nodes': ['n1', 'n2'], 'config_label': 'nvidia.com/mig.config',
                                'config_value': 'gpuops-1g-10gb-7',
                                'allocatable': {'n1': {'nvidia.com/gpu': '14'}, 'n2': {'nvidia.com/gpu': '14'}}}
    # mixed: per profile, times the node's MIG-capable GPUs; a node without probe facts is not checked for devices
    mixed = render('mig', nodes=['n1', 'n2'], facts={'n1': A100},
                   settings={'mig': {'strategy': 'mixed', 'devices': {'1g.10gb': 2, '3g.40gb': 1}}}, require_facts=False)
    assert mixed['readiness']['allocatable'] == {'n1': {'nvidia.com/mig-1g.10gb': '4', 'nvidia.com/mig-3g.40gb': '2'}}
    for strategy in ('exclusive', 'time-slicing', 'mps'):
        assert render(strategy)['readiness'] is None


def test_MIGM_11_mig_manager_runs_with_the_nvidia_runtime_class():
    assert pod(render('mig'), 'nvidia-mig-manager-')['runtimeClassName'] == 'nvidia'
    out = render('mig', settings={'mig': {'devices': {'1g.10gb': 7}}, 'nvidia': {'runtime_class_name': ''}})
    assert 'runtimeClassName' not in pod(out, 'nvidia-mig-manager-')


def _tmpl_annotations(out, prefix):
    return ds(out, prefix)['spec']['template']['metadata'].get('annotations') or {}


@pytest.mark.parametrize('strategy,settings,changed', [
    ('time-slicing', {}, {'time_slicing': {'replicas': 8}}),
    ('mps', {}, {'mps': {'replicas': 8}}),
    ('exclusive', {}, {'nvidia': {'extra_configs': {'ts': {'version': 'v1', 'sharing': {'timeSlicing': {
        'resources': [{'name': 'nvidia.com/gpu', 'replicas': 2}]}}}}}}),
    ('mig', {}, {'mig': {'devices': {'3g.40gb': 2}}, 'nvidia': {}}),
])
def test_DP_21_a_changed_config_rolls_the_pods(strategy, settings, changed):
    """Issue #27 3.2: config-manager reacts to the node label only, so a changed config under the same name must change
    the pod template (upstream's chart: checksum/config); same config, same template (no write on re-run)."""
    before = render(strategy, settings)
    again = render(strategy, settings)
    after = render(strategy, changed)
    prefixes = ['nvidia-device-plugin-'] + (['nvidia-mps-control-daemon-'] if strategy == 'mps' else []) + \
        (['nvidia-mig-manager-'] if strategy == 'mig' else [])
    for prefix in prefixes:
        a = _tmpl_annotations(before, prefix)
        assert len(a.get('checksum/config', '')) == 64, prefix
        assert a == _tmpl_annotations(again, prefix), prefix
    changed_prefixes = ['nvidia-mig-manager-'] if strategy == 'mig' else prefixes
    for prefix in changed_prefixes:
        assert _tmpl_annotations(after, prefix)['checksum/config'] != _tmpl_annotations(before, prefix)['checksum/config'], prefix


# --- DP-22..24: a config the device plugin refuses at start is refused before anything is applied (the plugin v0.19.1
# on the NVML simulator refused each of these: lab/tests/oracles/test_device_plugin.py)
@pytest.mark.parametrize('strategy,name', [
    ('time-slicing', 'example.com/gpu'), ('time-slicing', 'nvidia.com/GPU'), ('mps', 'nvidia.com/gpu_x'),
    ('time-slicing', 'nvidia.com/' + 'g' * 60),
])
def test_DP_22_resource_name_the_plugin_refuses_is_refused(strategy, name):
    key = strategy.replace('-', '_')
    with pytest.raises(StackError) as e:
        render(strategy, settings={key: {'resource_name': name}})
    assert 'gpu_sharing_stack_%s.resource_name' % key in str(e.value) and name in str(e.value)


TS_OK = {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 2}]}


@pytest.mark.parametrize('cfg,words', [
    ({'version': 'v1', 'flags': {'migStrategy': 'foo'}}, ['flags.migStrategy', 'foo', 'none, single, mixed']),
    ({'version': 'v1', 'flags': {'plugin': {'deviceListStrategy': ['foo']}}},
     ['flags.plugin.deviceListStrategy', 'foo', 'envvar']),
    ({'version': 'v1', 'flags': {'plugin': {'deviceIDStrategy': 'serial'}}}, ['deviceIDStrategy', 'serial', 'uuid, index']),
    ({'version': 'v1', 'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 1}]}}},
     ['sharing.timeSlicing.resources[0].replicas', 'at least 2']),
    ({'version': 'v1', 'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu'}]}}},
     ['sharing.timeSlicing.resources[0].replicas']),
    ({'version': 'v1', 'sharing': {'timeSlicing': {'renameByDefault': True}}}, ['sharing.timeSlicing.resources']),
    ({'version': 'v1', 'sharing': {'timeSlicing': {'resources': [{'name': 'example.com/gpu', 'replicas': 2}]}}},
     ['sharing.timeSlicing.resources[0].name', 'example.com/gpu']),
    ({'version': 'v1', 'sharing': {'timeSlicing': dict(TS_OK, failRequestsGreaterThanOne='yes')}},
     ['sharing.timeSlicing.failRequestsGreaterThanOne', 'true or false']),
    ({'version': 'v1', 'sharing': {'timeSlicing': {'resources': [dict(TS_OK['resources'][0], devices='some')]}}},
     ['sharing.timeSlicing.resources[0].devices', 'some']),
], ids=['mig-strategy', 'list-strategy', 'id-strategy', 'replicas-1', 'no-replicas', 'no-resources', 'resource-name',
        'fail-requests-type', 'devices'])
def test_DP_23_extra_configs_the_plugin_refuses_are_refused(cfg, words):
    with pytest.raises(StackError) as e:
        render('time-slicing', settings={'nvidia': {'extra_configs': {'bad': cfg}}})
    msg = str(e.value)
    assert 'gpu_sharing_stack_nvidia.extra_configs.bad' in msg, msg
    for w in words:
        assert w in msg, msg


def test_DP_24_mps_config_outside_an_mps_pool_or_with_mixed_mig_refused():
    mps = {'version': 'v1', 'sharing': {'mps': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 2}]}}}
    # a time-slicing pool runs no MPS daemon and gives the plugin no MPS root: the plugin refuses to start
    with pytest.raises(StackError) as e:
        render('time-slicing', settings={'nvidia': {'extra_configs': {'m': mps}}})
    assert 'gpu_sharing_stack_nvidia.extra_configs.m' in str(e.value) and 'mps' in str(e.value)
    # MPS with migStrategy mixed is refused by the plugin whatever the pool
    with pytest.raises(StackError) as e:
        render('mps', settings={'nvidia': {'extra_configs': {'m': dict(mps, flags={'migStrategy': 'mixed'})}}})
    assert 'mixed' in str(e.value)
    # in an MPS pool an MPS config is fine, as are unknown keys (the plugin ignores them)
    out = render('mps', settings={'nvidia': {'extra_configs': {'m': dict(mps, extra_key=1)}}})
    assert 'm' in [m for m in out['manifests'] if m['kind'] == 'ConfigMap'][0]['data']


# ---- the replicas per GPU the pool configured, recorded on its nodes (issue #36: the share report had none without
# GPU feature discovery, which the collection does not deploy)

REPLICAS_RECORD = 'gpuops.io/sharing-replicas'


@pytest.mark.parametrize('strategy, settings, want', [
    ('time-slicing', {'time_slicing': {'replicas': 3}}, '3'),
    ('time-slicing', {'time_slicing': {'replicas': 2, 'rename_by_default': True}}, '2'),
    ('mps', {'mps': {'replicas': 5}}, '5'),
    ('exclusive', {}, None),
])
def test_the_pools_replicas_per_gpu_are_recorded_on_its_nodes(strategy, settings, want):
    out = render(strategy, settings=settings)
    assert out['node_labels']['n1'].get(REPLICAS_RECORD) == want


def test_a_node_config_records_the_replicas_of_the_config_it_selects():
    ts4 = {'version': 'v1', 'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 4}]}}}
    # two resources, or replicas on some GPUs only: no one number per GPU, no record
    two = {'version': 'v1', 'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 4},
                                                                      {'name': 'nvidia.com/gpu.big', 'replicas': 2}]}}}
    some = {'version': 'v1', 'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 4,
                                                                        'devices': [0]}]}}}
    out = render('exclusive', nodes=['n1', 'n2', 'n3', 'n4'],
                 facts=dict((n, T4) for n in ('n1', 'n2', 'n3', 'n4')),
                 settings={'nvidia': {'extra_configs': {'ts4': ts4, 'two': two, 'some': some},
                                      'node_configs': {'n2': 'ts4', 'n3': 'two', 'n4': 'some'}}})
    assert [out['node_labels'][n].get(REPLICAS_RECORD) for n in ('n1', 'n2', 'n3', 'n4')] == [None, '4', None, None]


def test_the_replicas_record_leaves_with_a_move_off_the_pool_and_comes_from_the_settings():
    s = registry.stack('time-slicing')
    assert REPLICAS_RECORD in s.migration_label_keys() and REPLICAS_RECORD in s.migration_settings_labels()
    assert REPLICAS_RECORD in registry.stack('exclusive').migration_label_keys()
