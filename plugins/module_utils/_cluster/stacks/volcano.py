# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Volcano: GPU sharing in the scheduler configuration (per Volcano version) and the matching device plugin.

What upstream requires (volcano-sh/volcano v1.15.1, volcano-sh/devices v1.0.0, Project-HAMi/volcano-vgpu-device-plugin
v1.12.0) is listed in docs/conformance/volcano.md."""

from __future__ import annotations

from typing import Any
import copy
import json
import re
import sys

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    HAS_YAML = False

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack, settings_of
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    GPU_TOLERATION, StackError, check_name, config_checksum, config_map, daemonset, hostpath_volume, node_name_env, pod_spec_common, rbac_for,
    split_image, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Rendered, Settings

DEVICE_PLUGIN_IMAGE = pins.ref('volcano-device-plugin')
VGPU_DEVICE_PLUGIN_IMAGE = pins.ref('volcano-vgpu-device-plugin')
# the vGPU plugin and Volcano's deviceshare plugin read this ConfigMap from kube-system (then volcano-system)
VGPU_DEVICE_CONFIG = 'volcano-vgpu-device-config'
VGPU_DEVICE_CONFIG_NAMESPACE = 'kube-system'
# the isolation library (HAMi-core) install step of upstream's DaemonSet: copy it from the image to the host
VGPU_LIB_INSTALL = 'cp -f /k8s-vgpu/lib/nvidia/* /usr/local/vgpu/'
# arguments that make volcano-scheduler exit beside the sharing mode we switch on (deviceshare.go enablePredicate)
CONFLICTING_ARGS = ('deviceshare.GPUNumberEnable',)
CONFIGMAP = 'volcano-scheduler-configmap'
CHECKSUM_ANNOTATION = 'checksum/config'
# pod template annotation the role sets on volcano-scheduler when the vGPU device config changes (a restart)
RESTART_ANNOTATION = 'gpuops.io/vgpu-device-config-checksum'
CONF_KEY = 'volcano-scheduler.conf'
# volcano-scheduler's metrics (v1.15.1): /metrics on --listen-address (default :8080) with --enable-metrics
# (cmd/scheduler/app/options/options.go, cmd/scheduler/app/server.go), behind the Service of Volcano's manifests and
# chart (installer/volcano-development.yaml, installer/helm/chart/volcano/templates/scheduler.yaml), which carries the
# prometheus.io annotations; metrics/stack_metrics scrapes it (STKM-05)
SCHEDULER_METRICS_PORT = 8080
SCHEDULER_METRICS_PORT_NAME = 'metrics'
SCHEDULER_METRICS_SERVICE = 'volcano-scheduler-service'
SCHEDULER_SERVICE_LABELS = {'app': 'volcano-scheduler'}
SCHEDULER_METRICS_FLAG = '--enable-metrics'

VOLCANO_SCHEMA = {
    'version': dict(type=str, default=pins.ref('volcano'),
                    description='Installed Volcano version; up to 1.8.2 predicate.GPUSharingEnable, after it the deviceshare plugin.'),
    'mode': dict(type=str, default='vgpu', choices=['gpu-share', 'vgpu'],
                 description=("V(vgpu) (deviceshare.VGPUEnable, HAMi's volcano-vgpu-device-plugin, Volcano >= 1.9) or V(gpu-share) (volcano.sh/gpu-memory, "
                              "deprecated upstream since Volcano 1.9).",)),
    'device_split_count': dict(type=int, default=10, min=1, max=100, description='Tasks per GPU of the vGPU device plugin (deviceSplitCount).'),
    'namespace': dict(type=str, default='volcano-system', description="Namespace of Volcano's scheduler ConfigMap."),
    'device_plugin_image': dict(type=str, default='', description='Device plugin image; empty for the default of the mode.'),
    'existing_conf': dict(type=str, default='', description='Scheduler configuration to merge into; the role reads the live one when empty.'),
    # the cluster's Kubernetes version (the role reads it from the API server); '' skips the compatibility check
    'kube_version': dict(type=str, default='',
                         description=("The cluster's Kubernetes version; the role reads it from the API server when empty. Checked against Volcano's "
                                      "compatibility table (Volcano 1.15 - Kubernetes 1.23 to 1.35).",)),
    'accept_untested_kubernetes': dict(type=bool, default=False,
                                       description="Deploy on a Kubernetes minor that the Volcano release's compatibility table does not list (warns)."),
    'scheduler_deployment': dict(type=str, default='volcano-scheduler',
                                 description=("Volcano's scheduler Deployment (in O(gpu_sharing_stack_volcano.namespace)), restarted when the vGPU device "
                                              "config changes (it reads it once per process); patched only if it exists.",)),
    'scheduler_configmap': dict(type=str, default=CONFIGMAP,
                                description=("Volcano's scheduler ConfigMap (in O(gpu_sharing_stack_volcano.namespace)), whose C(volcano-scheduler.conf) "
                                             'the role merges its device plugin into (backed up, never deleted); the name the scheduler Deployment '
                                             'mounts when Volcano was installed with another.',)),
    'accept_known_bad_images': dict(type=bool, default=False,
                                    description=('Deploy mode V(gpu-share) with volcano-device-plugin V(v1.0.0) anyway (warns). It updates pods with a '
                                                 'Kubernetes 1.18 client at Allocate and fails for pods with newer fields (seccompProfile).',)),
}
# volcano-device-plugin v1.0.0 (the last gpu-share release) vendors the Kubernetes 1.18 client (go.mod: k8s.io/api,
# client-go v0.18.2) and at Allocate reads and Updates the pod with it (pkg/plugin/nvidia/utils.go): fields newer
# than 1.18 are dropped from the Update (e.g. seccompProfile, which Pod Security "restricted" requires), so the
# update is refused and the allocation fails. No later release serves volcano.sh/gpu-memory.
KNOWN_BAD_DEVICE_PLUGIN = {'volcano-device-plugin': ('v1.0.0',)}

# Volcano's own Kubernetes compatibility table (README.md, "Kubernetes compatibility", volcano-sh/volcano v1.15.1):
# Volcano minor -> (oldest, newest) Kubernetes minor marked exactly compatible.
KUBE_COMPAT: dict[tuple[int, ...], tuple[int, int]] = {(1, 10): (21, 30), (1, 11): (21, 31), (1, 12): (21, 32), (1, 13): (23, 33), (1, 14): (23, 34),
                                                       (1, 15): (23, 35)}

# Volcano's default scheduler configuration (volcano-scheduler.conf of the release manifests)
DEFAULT_CONF: dict[str, Any] = {
    'actions': 'enqueue, allocate, backfill',
    'tiers': [
        {'plugins': [{'name': 'priority'}, {'name': 'gang', 'enablePreemptable': False}, {'name': 'conformance'}]},
        {'plugins': [{'name': 'overcommit'}, {'name': 'drf', 'enablePreemptable': False}, {'name': 'predicates'},
                     {'name': 'proportion'}, {'name': 'nodeorder'}, {'name': 'binpack'}]},
    ],
}


def parse_version(text: Any, var: str) -> tuple[int, ...]:
    m = re.match(r'^v?(\d+)\.(\d+)(?:\.(\d+))?$', str(text).strip())
    if not m:
        raise StackError('%s must be a Volcano version like 1.8 or v1.15.1; got %r' % (var, text))
    if m.group(3) is None:
        return int(m.group(1)), int(m.group(2))
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def scheduler_conf(version: tuple[int, ...], mode: str, existing: dict[str, Any] | None = None,
                   dropped: list[str] | None = None) -> dict[str, Any]:
    """Scheduler configuration with GPU sharing switched on, keeping every other plugin and argument of `existing`.

    Volcano <= 1.8.2: predicates plugin argument predicate.GPUSharingEnable.
    Volcano > 1.8.2: deviceshare plugin with deviceshare.GPUSharingEnable or deviceshare.VGPUEnable.  An argument that
    volcano-scheduler refuses beside them (deviceshare.GPUNumberEnable: true) is removed and named in `dropped`.
    """
    conf = copy.deepcopy(existing) if existing else copy.deepcopy(DEFAULT_CONF)
    tiers = conf.setdefault('tiers', [])
    if not tiers:
        tiers.append({'plugins': []})
    plugins = [(t, p) for t in tiers for p in t.setdefault('plugins', []) or []]
    by_name = dict((p.get('name'), (t, p)) for t, p in plugins)
    old = version <= (1, 8, 2)
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
        for key in CONFLICTING_ARGS:
            if key in args:
                if args.pop(key) and dropped is not None:
                    dropped.append(key)
        args['deviceshare.GPUSharingEnable'] = mode == 'gpu-share'
        args['deviceshare.VGPUEnable'] = mode == 'vgpu'
        if 'predicates' in by_name:
            pargs = by_name['predicates'][1].get('arguments') or {}
            pargs.pop('predicate.GPUSharingEnable', None)
            pargs.pop('predicate.GPUNumberEnable', None)
            if 'arguments' in by_name['predicates'][1]:
                if pargs:
                    by_name['predicates'][1]['arguments'] = pargs
                else:
                    del by_name['predicates'][1]['arguments']
    return conf


def _check_kubernetes(ctx: Ctx, vs: dict[str, Any], version: tuple[int, ...], var: str) -> None:
    """Refuse a Kubernetes minor that Volcano's compatibility table does not list for the Volcano release."""
    if not vs['kube_version'] or ctx.removing:
        return
    kminor = kube_versions.minor_of(vs['kube_version'])
    if kminor is None:
        raise StackError('%s.kube_version must be the cluster\'s Kubernetes version (e.g. v1.33.2); got %r'
                         % (var, vs['kube_version']))
    window = KUBE_COMPAT.get(tuple(version[:2]))
    if window is None:
        return
    if kube_versions.in_range(kminor, window):
        return
    msg = ('Volcano %s is marked compatible with Kubernetes 1.%d to 1.%d in its own compatibility table (README.md of '
           'volcano-sh/volcano v1.15.1); this cluster runs %s' % (vs['version'], window[0], window[1], vs['kube_version']))
    if vs['accept_untested_kubernetes']:
        ctx.warn('%s: %s (accepted by %s.accept_untested_kubernetes)' % (var, msg, var))
        return
    raise StackError('%s: %s. Use a Volcano release that lists it, or set %s.accept_untested_kubernetes: true to '
                     'deploy anyway' % (var, msg, var))


def _check_known_bad(ctx: Ctx, vs: dict[str, Any], image_ref: str, var: str) -> None:
    """gpu-share's device plugin v1.0.0 fails Allocate for pods with fields newer than Kubernetes 1.18."""
    _host, path, tag, _digest = split_image(image_ref)
    if tag not in KNOWN_BAD_DEVICE_PLUGIN.get(path.rsplit('/', 1)[-1], ()) or ctx.removing:
        return
    msg = ('%s.mode gpu-share runs %s, which updates pods at Allocate with the Kubernetes 1.18 client it vendors '
           '(volcano-sh/devices v1.0.0 go.mod): a pod with fields newer than 1.18, e.g. securityContext.seccompProfile '
           'as Pod Security "restricted" requires, cannot be updated and its GPU allocation fails. No later release '
           'serves volcano.sh/gpu-memory; use mode vgpu (HAMi\'s volcano-vgpu-device-plugin) or strategy hami'
           % (var, image_ref))
    if vs['accept_known_bad_images']:
        ctx.warn(msg + ' (deployed because %s.accept_known_bad_images is true)' % var)
        return
    raise StackError(msg + '. To deploy it anyway (no pod of the pool uses newer fields), set '
                     '%s.accept_known_bad_images: true, or name an image built with a newer client in '
                     '%s.device_plugin_image' % (var, var))


def render(ctx: Ctx, settings: Settings, nodes: list[str], facts: dict[str, Any]) -> Rendered:
    var = ctx.var('volcano')
    vs = validate_settings(settings.get('volcano'), VOLCANO_SCHEMA, var)
    version = parse_version(vs['version'], var + '.version')
    if vs['mode'] == 'vgpu' and version < (1, 9):
        raise StackError('%s.mode vgpu needs Volcano >= 1.9 (deviceshare.VGPUEnable); %s.version is %s'
                         % (var, var, vs['version']))
    if vs['mode'] == 'gpu-share' and version >= (1, 9):
        ctx.warn('%s.mode gpu-share is deprecated upstream since Volcano 1.9 (volcano.sh/gpu-memory, scheduling only); '
                 'use mode vgpu (HAMi\'s volcano-vgpu-device-plugin, enforced limits).' % var)
    _check_kubernetes(ctx, vs, version, var)
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
    dropped: list[str] = []
    conf = scheduler_conf(version, vs['mode'], existing, dropped)
    for key in dropped:
        ctx.warn('%s: removed %s: true from the live %s: volcano-scheduler exits when it is on beside %s'
                 % (var, key, CONF_KEY, 'deviceshare.VGPUEnable' if vs['mode'] == 'vgpu' else 'deviceshare.GPUSharingEnable'))
    text = json.dumps(conf, indent=2, sort_keys=True) + '\n'
    out = [config_map(ctx, check_name(vs['scheduler_configmap'], var + '.scheduler_configmap'), {CONF_KEY: text},
                      scope='shared', namespace=vs['namespace'])]
    # this ConfigMap belongs to the Volcano installation: mark it so the role backs it up and never deletes it
    out[0]['metadata']['labels']['gpuops.io/sharing-scope'] = 'adopted'
    name = 'volcano-device-plugin-' + ctx.pool
    volumes = [hostpath_volume('device-plugin', '/var/lib/kubelet/device-plugins', 'Directory')]
    mounts = [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'}]
    if vs['mode'] == 'vgpu':
        image_ref = vs['device_plugin_image'] or VGPU_DEVICE_PLUGIN_IMAGE
        resources = ['volcano.sh/vgpu-number', 'volcano.sh/vgpu-memory', 'volcano.sh/vgpu-cores']
        limits = {'volcano.sh/vgpu-number': '1', 'volcano.sh/vgpu-memory': '3000'}
        image = ctx.image(image_ref, var + '.device_plugin_image')
        dev_cfg = {'nvidia': {'resourceCountName': 'volcano.sh/vgpu-number', 'resourceMemoryName': 'volcano.sh/vgpu-memory',
                              'resourceMemoryPercentageName': 'volcano.sh/vgpu-memory-percentage',
                              'resourceCoreName': 'volcano.sh/vgpu-cores', 'overwriteEnv': False, 'defaultMemory': 0,
                              'defaultCores': 0, 'defaultGPUNum': 1, 'deviceSplitCount': vs['device_split_count'],
                              'deviceMemoryScaling': 1, 'deviceCoreScaling': 1, 'gpuMemoryFactor': 1}}
        dev_cm = config_map(ctx, VGPU_DEVICE_CONFIG, {'device-config.yaml': json.dumps(dev_cfg, indent=2, sort_keys=True) + '\n'},
                            scope='shared', namespace=VGPU_DEVICE_CONFIG_NAMESPACE)
        out.append(dev_cm)
        # the plugin loads the device config from the API once, at start: a changed config rolls its pods
        annotations = {CHECKSUM_ANNOTATION: config_checksum(dev_cm)}
        # volcano-scheduler loads it once per process too (deviceshare: config.InitDevicesConfig under a sync.Once):
        # when the role changes it, the role restarts volcano-scheduler (Volcano's Deployment, patched only if it exists)
        ctx.restarts.append({'api_version': 'apps/v1', 'kind': 'Deployment', 'namespace': vs['namespace'],
                             'name': check_name(vs['scheduler_deployment'], var + '.scheduler_deployment'),
                             'annotation': RESTART_ANNOTATION, 'value': annotations[CHECKSUM_ANNOTATION],
                             'when_changed': {'kind': 'ConfigMap', 'namespace': VGPU_DEVICE_CONFIG_NAMESPACE,
                                              'name': VGPU_DEVICE_CONFIG}})
        node_cfg = 'volcano-vgpu-node-config-' + ctx.pool
        out.append(config_map(ctx, node_cfg, {'config.json': json.dumps({'nodeconfig': []}, indent=2) + '\n'}))
        # registers devices and takes/releases node locks through Node annotations (nodes update/patch), patches
        # pods on allocation, reads its device config ConfigMap
        rules = [
            {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
            {'apiGroups': [''], 'resources': ['nodes/status'], 'verbs': ['patch']},
            {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
            {'apiGroups': [''], 'resources': ['configmaps'], 'verbs': ['get', 'list', 'watch']},
            {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch']},
        ]
        container = {'name': 'volcano-device-plugin', 'image': image,
                     'args': ['--device-split-count=%d' % vs['device_split_count']],
                     'lifecycle': {'postStart': {'exec': {'command': ['/bin/sh', '-c', VGPU_LIB_INSTALL]}}},
                     'env': [node_name_env(), {'name': 'HOOK_PATH', 'value': '/usr/local/vgpu'},
                             {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'},
                             {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'},
                             {'name': 'NVIDIA_DRIVER_CAPABILITIES', 'value': 'utility'}],
                     'securityContext': {'privileged': True, 'allowPrivilegeEscalation': True,
                                         'capabilities': {'drop': ['ALL'], 'add': ['SYS_ADMIN']}},
                     'volumeMounts': [{'name': 'deviceconfig', 'mountPath': '/config'}] + mounts +
                     [{'name': 'lib', 'mountPath': '/usr/local/vgpu'}, {'name': 'hosttmp', 'mountPath': '/tmp'}]}
        volumes += [{'name': 'deviceconfig', 'configMap': {'name': node_cfg}},
                    hostpath_volume('lib', '/usr/local/vgpu', 'DirectoryOrCreate'),
                    hostpath_volume('hosttmp', '/tmp', 'DirectoryOrCreate')]
    else:
        image_ref = vs['device_plugin_image'] or DEVICE_PLUGIN_IMAGE
        _check_known_bad(ctx, vs, image_ref, var)
        annotations = None
        resources = ['volcano.sh/gpu-memory', 'volcano.sh/gpu-number']
        limits = {'volcano.sh/gpu-memory': '1024'}
        image = ctx.image(image_ref, var + '.device_plugin_image')
        # volcano-device-plugin v1.0.0 defines no command-line flags (any flag makes it exit); it patches the node's
        # status with the GPU memory and updates pods on allocation
        rules = [
            {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']},
            {'apiGroups': [''], 'resources': ['nodes/status'], 'verbs': ['patch', 'update']},
            {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
            {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch']},
        ]
        container = {'name': 'volcano-device-plugin', 'image': image, 'env': [node_name_env()],
                     'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
                     'volumeMounts': mounts}
    out += rbac_for(ctx, name, rules)
    spec = {'serviceAccountName': name, 'priorityClassName': 'system-node-critical', 'nodeSelector': ctx.pool_selector(),
            'containers': [container], 'volumes': volumes}
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    out.append(daemonset(ctx, name, 'volcano-device-plugin', spec, annotations=annotations))
    ctx.note('volcano: only the scheduler configuration (GPU sharing) and the device plugin are managed here; install '
             'Volcano itself (%s) first. Pods use schedulerName: volcano.' % vs['version'])
    return out, {}, resources, limits


SETTINGS = {'volcano': VOLCANO_SCHEMA}

# What every volcano pool of a cluster shares: the vGPU device ConfigMap (kube-system), the scheduler ConfigMap it
# adopts and the scheduler Deployment it restarts. Pools whose values of these differ are refused by the pools' plan.
SHARED = {'settings': 'volcano',
          'keys': ('mode', 'device_split_count', 'namespace', 'scheduler_deployment', 'scheduler_configmap'),
          'pool_variables': (),
          'objects': "Volcano's scheduler configuration (volcano-scheduler-configmap, volcano-vgpu-device-config)"}


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS); Volcano's pods name schedulerName volcano."""
    manifests, labels, resources, limits = render(ctx, settings, nodes, facts)
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits,
            'scheduler_name': 'volcano'}


class VolcanoStack(Stack):
    """Volcano: the scheduler ConfigMap it adopts and the vGPU device config every volcano pool shares (SHARED); the
    render reads the scheduler's existing configuration and the API server's version."""
    shared = SHARED
    version_key = 'volcano'

    def __init__(self, name: str) -> None:
        super(VolcanoStack, self).__init__(name)
        self.shared_module = sys.modules[__name__]

    def live_queries(self, settings: dict, present: bool, namespace: str) -> list[dict]:
        volcano = settings_of(settings, 'volcano')
        if present and not volcano.get('existing_conf'):
            return [{'key': 'volcano_conf', 'kind': 'ConfigMap', 'name': volcano.get('scheduler_configmap') or CONFIGMAP,
                     'namespace': volcano.get('namespace') or 'volcano-system'}]
        return []

    def merge_objects(self, settings: dict, objects: dict, namespace: str, var: str) -> None:
        if objects.get('volcano_conf'):
            data = objects['volcano_conf'][0].get('data') or {}
            if CONF_KEY in data:
                settings['volcano'] = dict(settings_of(settings, 'volcano'), existing_conf=data[CONF_KEY])

    def own_metrics(self, settings: dict) -> dict | None:
        # the device plugins serve none (STKM-06); Volcano's own scheduler, in its namespace; per-pod allocations in
        # mode vgpu only (the deviceshare plugin's vGPU series)
        volcano = settings_of(settings, 'volcano')
        return {'pool': None,
                'scheduler': {'selects': 'service', 'labels': dict(SCHEDULER_SERVICE_LABELS),
                              'port': SCHEDULER_METRICS_PORT, 'port_name': SCHEDULER_METRICS_PORT_NAME,
                              'namespace': volcano.get('namespace') or VOLCANO_SCHEMA['namespace']['default'],
                              'needs': SCHEDULER_METRICS_FLAG, 'service': SCHEDULER_METRICS_SERVICE},
                'allocations': (volcano.get('mode') or VOLCANO_SCHEMA['mode']['default']) == 'vgpu', 'usage': False}

    def accounting_conflicts(self, strategies: list[str], whole: list[str]) -> list[str]:
        return ['Volcano GPU accounting and %s on the same node' % ', '.join(s for s in strategies if s != self.name)]


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry)."""
    return VolcanoStack(name)
