# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Volcano: GPU sharing in the scheduler configuration (per Volcano version) and the matching device plugin."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    HAS_YAML = False

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.gpu_stack_common import (
    GPU_TOLERATION, StackError, config_map, daemonset, hostpath_volume, node_name_env, pod_spec_common, rbac_for,
    validate_settings,
)

DEVICE_PLUGIN_IMAGE = 'docker.io/volcanosh/volcano-device-plugin:v1.0.0'
VGPU_DEVICE_PLUGIN_IMAGE = 'docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0'
CONFIGMAP = 'volcano-scheduler-configmap'
CONF_KEY = 'volcano-scheduler.conf'

VOLCANO_SCHEMA = {
    'version': dict(type=str, default='1.10'),
    'mode': dict(type=str, default='gpu-share', choices=['gpu-share', 'vgpu']),
    'namespace': dict(type=str, default='volcano-system'),
    'device_plugin_image': dict(type=str, default=''),
    'existing_conf': dict(type=str, default=''),
}

# Volcano's default scheduler configuration (volcano-scheduler.conf of the release manifests)
DEFAULT_CONF = {
    'actions': 'enqueue, allocate, backfill',
    'tiers': [
        {'plugins': [{'name': 'priority'}, {'name': 'gang', 'enablePreemptable': False}, {'name': 'conformance'}]},
        {'plugins': [{'name': 'overcommit'}, {'name': 'drf', 'enablePreemptable': False}, {'name': 'predicates'},
                     {'name': 'proportion'}, {'name': 'nodeorder'}, {'name': 'binpack'}]},
    ],
}


def parse_version(text, var):
    m = re.match(r'^v?(\d+)\.(\d+)(\.\d+)?$', str(text).strip())
    if not m:
        raise StackError('%s must be a Volcano version like 1.8 or v1.10.0; got %r' % (var, text))
    return int(m.group(1)), int(m.group(2))


def scheduler_conf(version, mode, existing=None):
    """Scheduler configuration with GPU sharing switched on, keeping every other plugin and argument of `existing`.

    Volcano <= 1.8: predicates plugin argument predicate.GPUSharingEnable.
    Volcano >= 1.9: deviceshare plugin with deviceshare.GPUSharingEnable or deviceshare.VGPUEnable.
    """
    conf = copy.deepcopy(existing) if existing else copy.deepcopy(DEFAULT_CONF)
    tiers = conf.setdefault('tiers', [])
    if not tiers:
        tiers.append({'plugins': []})
    plugins = [(t, p) for t in tiers for p in t.setdefault('plugins', []) or []]
    by_name = dict((p.get('name'), (t, p)) for t, p in plugins)
    old = version <= (1, 8)
    if old:
        if 'predicates' not in by_name:
            tiers[-1]['plugins'].append({'name': 'predicates'})
            by_name['predicates'] = (tiers[-1], tiers[-1]['plugins'][-1])
        args = by_name['predicates'][1].setdefault('arguments', {})
        args['predicate.GPUSharingEnable'] = True
    else:
        if 'deviceshare' not in by_name:
            tiers[-1]['plugins'].append({'name': 'deviceshare'})
            by_name['deviceshare'] = (tiers[-1], tiers[-1]['plugins'][-1])
        args = by_name['deviceshare'][1].setdefault('arguments', {})
        args['deviceshare.GPUSharingEnable'] = mode == 'gpu-share'
        args['deviceshare.VGPUEnable'] = mode == 'vgpu'
        if 'predicates' in by_name:
            pargs = by_name['predicates'][1].get('arguments') or {}
            pargs.pop('predicate.GPUSharingEnable', None)
            if 'arguments' in by_name['predicates'][1]:
                if pargs:
                    by_name['predicates'][1]['arguments'] = pargs
                else:
                    del by_name['predicates'][1]['arguments']
    return conf


def render(ctx, settings, nodes, facts):
    var = ctx.var('volcano')
    vs = validate_settings(settings.get('volcano'), VOLCANO_SCHEMA, var)
    version = parse_version(vs['version'], var + '.version')
    if vs['mode'] == 'vgpu' and version <= (1, 8):
        raise StackError('%s.mode vgpu needs Volcano >= 1.9 (deviceshare.VGPUEnable); %s.version is %s'
                         % (var, var, vs['version']))
    existing = None
    if vs['existing_conf']:
        if not HAS_YAML:
            raise StackError('PyYAML is needed to merge %s.existing_conf' % var)
        try:
            existing = yaml.safe_load(vs['existing_conf'])
        except yaml.YAMLError as e:
            raise StackError('%s.existing_conf (the live %s) is not YAML: %s' % (var, CONF_KEY, e))
        if not isinstance(existing, dict):
            raise StackError('%s.existing_conf must be a YAML mapping with actions and tiers' % var)
    conf = scheduler_conf(version, vs['mode'], existing)
    text = json.dumps(conf, indent=2, sort_keys=True) + '\n'
    out = [config_map(ctx, CONFIGMAP, {CONF_KEY: text}, scope='shared', namespace=vs['namespace'])]
    # this ConfigMap belongs to the Volcano installation: mark it so the role backs it up and never deletes it
    out[0]['metadata']['labels']['gpuops.io/sharing-scope'] = 'adopted'
    if vs['mode'] == 'vgpu':
        image_ref = vs['device_plugin_image'] or VGPU_DEVICE_PLUGIN_IMAGE
        resources = ['volcano.sh/vgpu-number', 'volcano.sh/vgpu-memory', 'volcano.sh/vgpu-cores']
        limits = {'volcano.sh/vgpu-number': '1', 'volcano.sh/vgpu-memory': '3000'}
    else:
        image_ref = vs['device_plugin_image'] or DEVICE_PLUGIN_IMAGE
        resources = ['volcano.sh/gpu-memory', 'volcano.sh/gpu-number']
        limits = {'volcano.sh/gpu-memory': '1024'}
    image = ctx.image(image_ref, var + '.device_plugin_image')
    name = 'volcano-device-plugin-' + ctx.pool
    out += rbac_for(ctx, name, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']},
        {'apiGroups': [''], 'resources': ['nodes/status'], 'verbs': ['patch', 'update']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch']},
    ])
    container = {'name': 'volcano-device-plugin', 'image': image, 'env': [node_name_env()],
                 'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
                 'volumeMounts': [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'}]}
    volumes = [hostpath_volume('device-plugin', '/var/lib/kubelet/device-plugins')]
    if vs['mode'] == 'gpu-share':
        container['args'] = ['--gpu-strategy=share']
    else:
        # HAMi-core libraries are copied to the host for hard isolation: needs a privileged container
        container['securityContext'] = {'privileged': True}
        container['env'].append({'name': 'HOOK_PATH', 'value': '/usr/local/vgpu'})
        container['volumeMounts'].append({'name': 'lib', 'mountPath': '/usr/local/vgpu'})
        volumes.append(hostpath_volume('lib', '/usr/local/vgpu', 'DirectoryOrCreate'))
    spec = {'serviceAccountName': name, 'priorityClassName': 'system-node-critical', 'nodeSelector': ctx.pool_selector(),
            'containers': [container], 'volumes': volumes}
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    out.append(daemonset(ctx, name, 'volcano-device-plugin', spec))
    ctx.note('volcano: only the scheduler configuration (GPU sharing) and the device plugin are managed here; install '
             'Volcano itself (%s) first. Pods use schedulerName: volcano.' % vs['version'])
    return out, {}, resources, limits
