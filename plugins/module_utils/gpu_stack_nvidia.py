# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA k8s-device-plugin stacks: exclusive, time-slicing, MPS, MIG (with mig-parted config)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.gpu_stack_common import (
    GPU_TOLERATION, StackError, check_name, cluster_role, cluster_role_binding, config_map, daemonset,
    hostpath_volume, node_name_env, pod_spec_common, service_account, validate_settings,
)

CONFIG_LABEL = 'nvidia.com/device-plugin.config'
MIG_CONFIG_LABEL = 'nvidia.com/mig.config'
MPS_CAPABLE_LABEL = 'nvidia.com/mps.capable'

DEVICE_PLUGIN_IMAGE = 'nvcr.io/nvidia/k8s-device-plugin:v0.17.1'
MIG_MANAGER_IMAGE = 'nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.10.0-ubuntu20.04'

NVIDIA_SCHEMA = {
    'image': dict(type=str, default=DEVICE_PLUGIN_IMAGE),
    'fail_on_init_error': dict(type=bool, default=True),
    'device_list_strategy': dict(type=str, default='envvar',
                                 choices=['envvar', 'volume-mounts', 'cdi-annotations', 'cdi-cri']),
    'pass_device_specs': dict(type=bool, default=False),
    'priority_class_name': dict(type=str, default='system-node-critical'),
    'extra_configs': dict(type=dict, default={}),
    'node_configs': dict(type=dict, default={}),
}
TIME_SLICING_SCHEMA = {
    'replicas': dict(type=int, default=4, min=2),
    'rename_by_default': dict(type=bool, default=False),
    'fail_requests_greater_than_one': dict(type=bool, default=True),
    'resource_name': dict(type=str, default='nvidia.com/gpu'),
}
MPS_SCHEMA = {
    'replicas': dict(type=int, default=4, min=2),
    'rename_by_default': dict(type=bool, default=False),
    'fail_requests_greater_than_one': dict(type=bool, default=True),
    'resource_name': dict(type=str, default='nvidia.com/gpu'),
    'mps_root': dict(type=str, default='/run/nvidia/mps'),
}
MIG_SCHEMA = {
    'strategy': dict(type=str, default='single', choices=['single', 'mixed']),
    'config_name': dict(type=str, default=''),
    'devices': dict(type=dict, default={}),
    'manager': dict(type=bool, default=True),
    'manager_image': dict(type=str, default=MIG_MANAGER_IMAGE),
    'with_reboot': dict(type=bool, default=False),
}


def _plugin_config(nv, mig_strategy='none', sharing=None):
    cfg = {'version': 'v1',
           'flags': {'migStrategy': mig_strategy, 'failOnInitError': nv['fail_on_init_error'],
                     'plugin': {'passDeviceSpecs': nv['pass_device_specs'],
                                'deviceListStrategy': [nv['device_list_strategy']]}}}
    if sharing:
        cfg['sharing'] = sharing
    return cfg


def _replicated(settings):
    return {'renameByDefault': settings['rename_by_default'],
            'failRequestsGreaterThanOne': settings['fail_requests_greater_than_one'],
            'resources': [{'name': settings['resource_name'], 'replicas': settings['replicas']}]}


def _to_yaml_text(obj):
    # JSON is valid YAML; sorted keys keep the text stable between runs (zero writes on re-run).
    return json.dumps(obj, indent=2, sort_keys=True) + '\n'


def _config_manager(image, oneshot, default_config, process):
    env = [
        {'name': 'ONESHOT', 'value': 'true' if oneshot else 'false'},
        {'name': 'KUBECONFIG', 'value': ''},
        node_name_env(),
        {'name': 'NODE_LABEL', 'value': CONFIG_LABEL},
        {'name': 'CONFIG_FILE_SRCDIR', 'value': '/available-configs'},
        {'name': 'CONFIG_FILE_DST', 'value': '/config/config.yaml'},
        {'name': 'DEFAULT_CONFIG', 'value': default_config},
        {'name': 'FALLBACK_STRATEGIES', 'value': 'named,single'},
        {'name': 'SEND_SIGNAL', 'value': 'false' if oneshot else 'true'},
        {'name': 'SIGNAL', 'value': '' if oneshot else '1'},
        {'name': 'PROCESS_TO_SIGNAL', 'value': '' if oneshot else process},
    ]
    return {'name': 'config-manager-init' if oneshot else 'config-manager', 'image': image,
            'command': ['config-manager'], 'env': env,
            'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
            'volumeMounts': [{'name': 'available-configs', 'mountPath': '/available-configs'},
                             {'name': 'config', 'mountPath': '/config'}]}


def _check_facts(ctx, strategy, nodes, facts, require_facts):
    """MPS/MIG need hardware support: refuse with the node, GPU and reason from gpu_info's facts."""
    problems = []
    for node in nodes:
        f = facts.get(node)
        if not f:
            if require_facts:
                problems.append('%s: no gpu_probe_facts (run role gpuops.k8s_gpu.gpu_probe on it first, or set %s: false)'
                                % (node, ctx.var('require_facts')))
            continue
        share = (f.get('sharing') or {}).get(strategy) or {}
        if not share.get('allowed'):
            problems.append('%s: %s' % (node, share.get('reason') or '%s not allowed by the probed hardware' % strategy))
    if problems:
        raise StackError('%s=%s is not possible on pool %s: %s' % (ctx.var('strategy'), strategy, ctx.pool, '; '.join(problems)))


def render(ctx, strategy, settings, nodes, facts, require_facts=True):
    """Return (manifests, node_labels, resource_names, validation_limits)."""
    nv = validate_settings(settings.get('nvidia'), NVIDIA_SCHEMA, ctx.var('nvidia'))
    image = ctx.image(nv['image'], ctx.var('nvidia') + '.image')
    mig_strategy = 'none'
    sharing = None
    resources = ['nvidia.com/gpu']
    limits = {'nvidia.com/gpu': '1'}
    extra = []
    node_labels = {}
    mps = None
    if strategy == 'exclusive':
        cfg_name = 'exclusive'
    elif strategy == 'time-slicing':
        ts = validate_settings(settings.get('time_slicing'), TIME_SLICING_SCHEMA, ctx.var('time_slicing'))
        sharing = {'timeSlicing': _replicated(ts)}
        cfg_name = 'time-slicing'
        res = ts['resource_name'] + ('.shared' if ts['rename_by_default'] else '')
        resources, limits = [res], {res: '1'}
    elif strategy == 'mps':
        mps = validate_settings(settings.get('mps'), MPS_SCHEMA, ctx.var('mps'))
        _check_facts(ctx, 'mps', nodes, facts, require_facts)
        for node in nodes:
            mc = ((facts.get(node) or {}).get('sharing') or {}).get('mps', {}).get('max_clients')
            if mc and mps['replicas'] > mc:
                raise StackError('%s.replicas is %d but %s allows at most %d MPS clients per GPU'
                                 % (ctx.var('mps'), mps['replicas'], node, mc))
        sharing = {'mps': _replicated(mps)}
        cfg_name = 'mps'
        res = mps['resource_name'] + ('.shared' if mps['rename_by_default'] else '')
        resources, limits = [res], {res: '1'}
    elif strategy == 'mig':
        mig = validate_settings(settings.get('mig'), MIG_SCHEMA, ctx.var('mig'))
        _check_facts(ctx, 'mig', nodes, facts, require_facts)
        mig_strategy = mig['strategy']
        cfg_name = 'mig-' + mig_strategy
        extra, mig_label, resources, limits = _mig(ctx, mig, nodes, facts)
        for node in nodes:
            node_labels.setdefault(node, {})[MIG_CONFIG_LABEL] = mig_label
    else:
        raise StackError('internal: %s is not an NVIDIA device plugin strategy' % strategy)

    configs = {cfg_name: _plugin_config(nv, mig_strategy, sharing)}
    for name, cfg in sorted(nv['extra_configs'].items()):
        check_name(name, '%s.extra_configs key' % ctx.var('nvidia'))
        if not isinstance(cfg, dict) or cfg.get('version') != 'v1':
            raise StackError('%s.extra_configs.%s must be a device plugin configuration dictionary with version: v1'
                             % (ctx.var('nvidia'), name))
        configs[name] = cfg
    for node, name in nv['node_configs'].items():
        if name not in configs:
            raise StackError('%s.node_configs.%s names config %r; the pool has: %s'
                             % (ctx.var('nvidia'), node, name, ', '.join(sorted(configs))))
    for node in nodes:
        node_labels.setdefault(node, {})[CONFIG_LABEL] = nv['node_configs'].get(node, cfg_name)
        if strategy == 'mps':
            node_labels[node][MPS_CAPABLE_LABEL] = 'true'

    base = 'nvidia-device-plugin-' + ctx.pool
    manifests = []
    manifests.append(config_map(ctx, base + '-configs', dict((k, _to_yaml_text(v)) for k, v in configs.items())))
    manifests.append(service_account(ctx, base))
    # config-manager reads its own node's label: read-only access to nodes is all it needs
    manifests.append(cluster_role(ctx, base, [{'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']}]))
    manifests.append(cluster_role_binding(ctx, base, base, base))

    volumes = [hostpath_volume('device-plugin', '/var/lib/kubelet/device-plugins'),
               {'name': 'available-configs', 'configMap': {'name': base + '-configs'}},
               {'name': 'config', 'emptyDir': {}}]
    mounts = [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'},
              {'name': 'config', 'mountPath': '/config'}]
    env = [node_name_env(), {'name': 'CONFIG_FILE', 'value': '/config/config.yaml'}]
    if strategy == 'mig':
        env.append({'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'})
    if mps is not None:
        env.append({'name': 'MPS_ROOT', 'value': mps['mps_root']})
        volumes += [hostpath_volume('mps-root', mps['mps_root'], 'DirectoryOrCreate'),
                    hostpath_volume('mps-shm', mps['mps_root'] + '/shm')]
        mounts += [{'name': 'mps-root', 'mountPath': '/mps'}, {'name': 'mps-shm', 'mountPath': '/dev/shm'}]
    plugin = {'name': 'nvidia-device-plugin-ctr', 'image': image, 'command': ['nvidia-device-plugin'], 'env': env,
              'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
              'volumeMounts': mounts}
    spec = {'serviceAccountName': base, 'priorityClassName': nv['priority_class_name'], 'shareProcessNamespace': True,
            'nodeSelector': ctx.pool_selector(),
            'initContainers': [_config_manager(image, True, cfg_name, '')],
            'containers': [plugin, _config_manager(image, False, cfg_name, 'nvidia-device-plugin')],
            'volumes': volumes}
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    manifests.append(daemonset(ctx, base, 'nvidia-device-plugin', spec))
    if mps is not None:
        manifests.append(_mps_daemon(ctx, nv, image, mps, cfg_name, base))
    manifests.extend(extra)
    return manifests, node_labels, resources, limits


def _mps_daemon(ctx, nv, image, mps, cfg_name, base):
    root = mps['mps_root']
    mounts = [{'name': 'mps-root', 'mountPath': '/mps'}, {'name': 'mps-shm', 'mountPath': '/dev/shm'},
              {'name': 'config', 'mountPath': '/config'}]
    init_mounts = {'name': 'mps-control-daemon-mounts', 'image': image, 'command': ['mps-control-daemon', 'mount-shm'],
                   'securityContext': {'privileged': True},
                   'volumeMounts': [{'name': 'mps-root', 'mountPath': '/mps', 'mountPropagation': 'Bidirectional'}]}
    daemon = {'name': 'mps-control-daemon-ctr', 'image': image, 'command': ['mps-control-daemon'],
              'env': [node_name_env(), {'name': 'CONFIG_FILE', 'value': '/config/config.yaml'},
                      {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'},
                      {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'},
                      {'name': 'NVIDIA_DRIVER_CAPABILITIES', 'value': 'compute,utility'}],
              'securityContext': {'privileged': True}, 'volumeMounts': mounts}
    selector = ctx.pool_selector()
    selector[MPS_CAPABLE_LABEL] = 'true'
    spec = {'serviceAccountName': base, 'priorityClassName': nv['priority_class_name'], 'shareProcessNamespace': True,
            'hostPID': True, 'nodeSelector': selector,
            'initContainers': [init_mounts, _config_manager(image, True, cfg_name, '')],
            'containers': [daemon, _config_manager(image, False, cfg_name, '/usr/bin/mps-control-daemon')],
            'volumes': [hostpath_volume('mps-root', root, 'DirectoryOrCreate'), hostpath_volume('mps-shm', root + '/shm'),
                        {'name': 'available-configs', 'configMap': {'name': base + '-configs'}},
                        {'name': 'config', 'emptyDir': {}}]}
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    return daemonset(ctx, 'nvidia-mps-control-daemon-' + ctx.pool, 'nvidia-mps-control-daemon', spec)


def _mig(ctx, mig, nodes, facts):
    devices = mig['devices']
    var = ctx.var('mig')
    if not devices:
        raise StackError('%s.devices must name the MIG profiles and counts per GPU, e.g. {"1g.10gb": 7}' % var)
    for prof, count in devices.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise StackError('%s.devices.%s must be a positive integer; got %r' % (var, prof, count))
    if mig['strategy'] == 'single' and len(devices) != 1:
        raise StackError('%s.strategy single needs one MIG profile in %s.devices (every GPU split the same way); got %s. '
                         'Use strategy mixed for several profiles.' % (var, var, ', '.join(sorted(devices))))
    for node in nodes:
        prof = ((facts.get(node) or {}).get('sharing') or {}).get('mig', {}).get('profiles') or {}
        for gpu, names in sorted(prof.items()):
            missing = [p for p in devices if p not in names]
            if missing:
                raise StackError('%s.devices asks for MIG profile(s) %s but GPU %s of %s offers only: %s'
                                 % (var, ', '.join(missing), gpu, node, ', '.join(names)))
    name = mig['config_name'] or 'gpuops-' + '-'.join('%s-%s' % (k.replace('.', '-'), v) for k, v in sorted(devices.items()))
    check_name(name, var + '.config_name')
    parted = {'version': 'v1', 'mig-configs': {
        'all-disabled': [{'devices': 'all', 'mig-enabled': False}],
        name: [{'devices': 'all', 'mig-enabled': True, 'mig-devices': dict((k, v) for k, v in sorted(devices.items()))}]}}
    cm_name = 'mig-parted-config-' + ctx.pool
    out = [config_map(ctx, cm_name, {'config.yaml': _to_yaml_text(parted)})]
    if mig['strategy'] == 'single':
        resources = ['nvidia.com/gpu']
        limits = {'nvidia.com/gpu': '1'}
    else:
        resources = ['nvidia.com/mig-' + p for p in sorted(devices)]
        limits = {resources[0]: '1'}
    if mig['manager']:
        image = ctx.image(mig['manager_image'], var + '.manager_image')
        mgr = 'nvidia-mig-manager-' + ctx.pool
        out.append(service_account(ctx, mgr))
        out.append(cluster_role(ctx, mgr, [
            {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'patch', 'update']},
            {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'delete']}]))
        out.append(cluster_role_binding(ctx, mgr, mgr, mgr))
        env = [node_name_env(), {'name': 'CONFIG_FILE', 'value': '/mig-parted-config/config.yaml'},
               {'name': 'HOST_ROOT_MOUNT', 'value': '/host'},
               {'name': 'DEFAULT_GPU_CLIENTS_NAMESPACE', 'value': ctx.namespace},
               {'name': 'WITH_REBOOT', 'value': 'true' if mig['with_reboot'] else 'false'}]
        spec = {'serviceAccountName': mgr, 'priorityClassName': 'system-node-critical', 'hostPID': True, 'hostIPC': True,
                'nodeSelector': ctx.pool_selector(),
                'containers': [{'name': 'nvidia-mig-manager', 'image': image, 'env': copy.deepcopy(env),
                                'securityContext': {'privileged': True},
                                'volumeMounts': [{'name': 'host-root', 'mountPath': '/host'},
                                                 {'name': 'mig-parted-config', 'mountPath': '/mig-parted-config'}]}],
                'volumes': [hostpath_volume('host-root', '/'),
                            {'name': 'mig-parted-config', 'configMap': {'name': cm_name}}]}
        pod_spec_common(ctx, spec, [GPU_TOLERATION])
        out.append(daemonset(ctx, mgr, 'nvidia-mig-manager', spec))
    else:
        ctx.warn('%s.manager is false: apply the MIG geometry %s on the nodes yourself (module gpuops.k8s_gpu.gpu_sharing '
                 'or nvidia-mig-parted apply with ConfigMap %s)' % (var, name, cm_name))
    return out, name, resources, limits
