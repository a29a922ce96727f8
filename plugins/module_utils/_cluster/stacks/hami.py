# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HAMi (project-hami): device plugin, scheduler (kube-scheduler + HAMi extender) and mutating webhook.

Rendered: device config ConfigMap, device plugin DaemonSet (+ vGPU monitor) and its node config ConfigMap,
scheduler Deployment with its KubeSchedulerConfiguration, Service, RBAC, and the MutatingWebhookConfiguration when a
CA bundle and a TLS Secret are given.  Not rendered: the certificate generation jobs of HAMi's chart, ServiceMonitors,
non-NVIDIA devices.  What upstream requires (Project-HAMi/HAMi, charts/hami at v2.10.0) is listed in
docs/conformance/hami.md.
"""

from __future__ import annotations

from typing import Any
import json
import re
import sys

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack, settings_of
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    CONTROL_PLANE_TOLERATIONS, GPU_TOLERATION, StackError, cluster_role_binding, config_checksum, config_map, daemonset,
    deployment,
    hostpath_volume, node_name_env, pod_spec_common, rbac_for, split_image, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Rendered, Settings

HAMI_IMAGE = pins.ref('hami')
# HAMi's chart takes the kube-scheduler tag from the cluster's own version (v1.31.1+k3s1 -> v1.31.1); so do we.
KUBE_SCHEDULER_REPOSITORY = 'registry.k8s.io/kube-scheduler'
# Kubernetes minors this collection renders HAMi's scheduler configuration for: the supported range.
KUBE_MINORS = kube_versions.SUPPORTED
# vgpu-init.sh (the device plugin's postStart hook) exists in HAMi images from v2.5.0 on.
POST_START_SINCE = (2, 5, 0)
# Keys of HAMi's NVIDIA device configuration (NvidiaConfig and NodeDefaultConfig yaml tags in
# pkg/device/nvidia/device.go at v2.10.0); anything else is ignored by HAMi, so it is refused here.
DEVICE_CONFIG_KEYS = frozenset([
    'resourceCountName', 'resourceMemoryName', 'resourceCoreName', 'resourceMemoryPercentageName',
    'resourcePriorityName', 'overwriteEnv', 'defaultMemory', 'defaultCores', 'defaultGPUNum', 'memoryFactor',
    'disableCoreLimit', 'migProfileAllowlist', 'gpuCorePolicy', 'runtimeClassName', 'deviceSplitCount',
    'deviceMemoryScaling', 'deviceCoreScaling', 'preConfiguredDeviceMemory', 'libCudaLogLevel', 'enableNumaTopology'])
NODE_LABEL = 'gpu'
# the device plugin's registration annotation on its Node: v2.10.0 and the older spelling (label_plan refuses a node
# so registered to another accounting family; the share report reads the devices from it)
REGISTRATION_ANNOTATIONS = ('hami.io/node-nvidia-register', 'hami.io/node.nvidia.device-register')
SCHEDULER = 'hami-scheduler'
DEVICE_PLUGIN = 'hami-device-plugin'
# where HAMi serves its metrics (v2.10.0: cmd/vGPUmonitor/main.go and cmd/scheduler/main.go, --metrics-bind-address
# defaults; metrics/stack_metrics scrapes them): the vGPU monitor beside the device plugin, the scheduler's extender
MONITOR_PORT = 9394
SCHEDULER_METRICS_PORT = 9395
METRICS_PORT_NAME = 'metrics'
# pod template annotations of HAMi's chart (scheduler/deployment.yaml, device-plugin/daemonsetnvidia.yaml at v2.10.0)
CHECKSUM_SCHEDULER_CONFIG = 'checksum/hami-scheduler-config'
CHECKSUM_DEVICE_CONFIG = 'checksum/hami-scheduler-device-config'

# The scheduler pod runs kube-scheduler and HAMi's extender under one ServiceAccount.  kube-scheduler's needs (the
# system:kube-scheduler bootstrap role of kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/
# policy.go at v1.37.2): events (core and events.k8s.io), pods get/list/watch/delete (preemption), pods/binding and
# bindings create, pods/status patch/update, reads of what selects pods, volumes, volume attachments and storage
# (leasecandidates left out: coordinated leader election is behind a gate, off by default; leases kept: leader
# election is on, HAMI-16); plus HAMi's own ClusterRole
# (charts/hami/templates/scheduler/clusterrole.yaml at v2.10.0): pods/configmaps patch, nodes patch (node locks),
# resourcequotas read.
SCHEDULER_RULES = [
    {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch', 'delete']},
    {'apiGroups': [''], 'resources': ['pods/status'], 'verbs': ['patch', 'update']},
    {'apiGroups': [''], 'resources': ['bindings', 'pods/binding'], 'verbs': ['create']},
    {'apiGroups': ['', 'events.k8s.io'], 'resources': ['events'], 'verbs': ['create', 'patch', 'update', 'get', 'list']},
    {'apiGroups': [''], 'resources': ['configmaps'], 'verbs': ['get', 'list', 'watch', 'patch']},
    {'apiGroups': [''], 'resources': ['namespaces', 'services', 'persistentvolumes', 'persistentvolumeclaims',
                                      'replicationcontrollers', 'resourcequotas'],
     'verbs': ['get', 'list', 'watch']},
    {'apiGroups': ['apps'], 'resources': ['replicasets', 'statefulsets'], 'verbs': ['get', 'list', 'watch']},
    {'apiGroups': ['policy'], 'resources': ['poddisruptionbudgets'], 'verbs': ['get', 'list', 'watch']},
    {'apiGroups': ['storage.k8s.io'], 'resources': ['storageclasses', 'csinodes', 'csidrivers', 'csistoragecapacities',
                                                    'volumeattachments'],
     'verbs': ['get', 'list', 'watch']},
    {'apiGroups': ['coordination.k8s.io'], 'resources': ['leases'], 'verbs': ['get', 'list', 'watch', 'create', 'update']},
    {'apiGroups': ['authentication.k8s.io'], 'resources': ['tokenreviews'], 'verbs': ['create']},
    {'apiGroups': ['authorization.k8s.io'], 'resources': ['subjectaccessreviews'], 'verbs': ['create']},
]
SYSTEM_SCHEDULER_ROLES = ('system:kube-scheduler', 'system:volume-scheduler')
DEVICE_PLUGIN_RULES = [
    {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'create', 'update', 'patch']},
    {'apiGroups': [''], 'resources': ['events'], 'verbs': ['list', 'create', 'update']},
]
VGPU_INIT = '/k8s-vgpu/bin/vgpu-init.sh /usr/local/vgpu/'

HAMI_SCHEMA = {
    'image': dict(type=str, default=HAMI_IMAGE, description='HAMi image (images before v2.5.0 get no postStart hook, they lack vgpu-init.sh).'),
    'kube_scheduler_image': dict(type=str, default='',
                                 description="kube-scheduler image; empty for C(registry.k8s.io/kube-scheduler) at the cluster's own version, as HAMi's "
                                             "chart does."),
    'scheduler_name': dict(type=str, default=SCHEDULER, description='Scheduler name.'),
    'device_split_count': dict(type=int, default=10, min=1, max=100, description='Tasks per GPU (deviceSplitCount).'),
    'device_memory_scaling': dict(type=float, default=1.0, min=0.1, max=10.0, description='deviceMemoryScaling (above 1 oversubscribes memory).'),
    'device_core_scaling': dict(type=float, default=1.0, min=0.1, max=10.0, description='deviceCoreScaling.'),
    'default_memory': dict(type=int, default=0, min=0, description='Default GPU memory (MiB) of a task (defaultMemory); 0 means all.'),
    'default_cores': dict(type=int, default=0, min=0, max=100, description='Default percentage of GPU cores of a task.'),
    'disable_core_limit': dict(type=bool, default=False, description='Disable the core limit.'),
    'node_scheduler_policy': dict(type=str, default='binpack', choices=['binpack', 'spread'], description='Node scheduling policy.'),
    'gpu_scheduler_policy': dict(type=str, default='spread', choices=['binpack', 'spread'], description='GPU scheduling policy.'),
    'webhook_tls_secret': dict(type=str, default='',
                               description='kubernetes.io/tls Secret for the webhook (must exist); with O(gpu_sharing_stack_hami.webhook_ca_bundle) '
                                           'installs the webhook.'),
    'webhook_ca_bundle': dict(type=str, default='', description='Base64 PEM of the CA that signed the webhook certificate.'),
    'scheduler_port': dict(type=int, default=9443, min=1, max=65535, description='Port of the HAMi extender.'),
    'kube_version': dict(type=str, default='',
                         description=("The cluster's Kubernetes version (v1.%d to v1.%d); empty to read it from the API server."
                                      % KUBE_MINORS,
                                      'Selects the KubeSchedulerConfiguration API version and the kube-scheduler image tag.')),
    'extra_device_config': dict(type=dict, default={},
                                description="More keys of HAMi's NVIDIA device configuration (e.g. gpuCorePolicy); keys HAMi does not read are refused."),
}


def _device_config(hs: dict[str, Any], var: str) -> dict[str, Any]:
    nv: dict[str, Any] = {
        'resourceCountName': 'nvidia.com/gpu',
        'resourceMemoryName': 'nvidia.com/gpumem',
        'resourceMemoryPercentageName': 'nvidia.com/gpumem-percentage',
        'resourceCoreName': 'nvidia.com/gpucores',
        'resourcePriorityName': 'nvidia.com/priority',
        'overwriteEnv': False,
        'defaultMemory': hs['default_memory'],
        'defaultCores': hs['default_cores'],
        'defaultGPUNum': 1,
        'deviceSplitCount': hs['device_split_count'],
        'deviceMemoryScaling': hs['device_memory_scaling'],
        'deviceCoreScaling': hs['device_core_scaling'],
        'disableCoreLimit': hs['disable_core_limit'],
    }
    extra = hs['extra_device_config'] or {}
    unknown = sorted(k for k in extra if k not in DEVICE_CONFIG_KEYS)
    if unknown:
        raise StackError('%s.extra_device_config has key(s) %s that HAMi does not read (it would ignore them silently); '
                         'allowed keys: %s' % (var, ', '.join(unknown), ', '.join(sorted(DEVICE_CONFIG_KEYS))))
    nv.update(extra)
    return {'nvidia': nv}


def image_version(ref: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an image tag like v2.10.0 or 2.5.1-rc1, None for digests or other tags."""
    tag = split_image(ref)[2]
    m = re.match(r'^v?(\d+)\.(\d+)(?:\.(\d+))?', tag or '')
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def kube_version(text: Any, var: str) -> tuple[int, str | None]:
    """(minor, stripped version or None) of a Kubernetes version: v1.31.1+k3s1 -> (31, 'v1.31.1'); 1.31 -> (31, None)."""
    parsed = kube_versions.parse(text or '', strict=False)
    if not parsed or parsed[0] != 1:
        raise StackError('%s.kube_version must be the cluster\'s Kubernetes version (e.g. v1.31.4, as the role reads it '
                         'from the API server); got %r' % (var, text))
    minor, patch = parsed[1], parsed[2]
    if not kube_versions.in_range(minor, KUBE_MINORS):
        raise StackError('%s.kube_version must be between 1.%d and 1.%d; got %s'
                         % (var, KUBE_MINORS[0], KUBE_MINORS[1], text))
    full = 'v1.%d.%d' % (minor, patch) if patch is not None else None
    return minor, full


def _scheduler_config(hs: dict[str, Any], minor: int, https: bool, namespace: str) -> dict[str, Any]:
    api = kube_versions.scheduler_config_api(minor)[1]
    # the strategy model's resources and HAMi's request-only nvidia.com/priority
    managed = [{'name': n, 'ignoredByScheduler': True} for n in
               gpu_strategy.strategy('hami')['resources'] + ('nvidia.com/priority',)]
    ext: dict[str, Any] = {'urlPrefix': '%s://127.0.0.1:%d' % ('https' if https else 'http', hs['scheduler_port']),
                           'filterVerb': 'filter', 'bindVerb': 'bind', 'nodeCacheCapable': True, 'weight': 1,
                           'httpTimeout': '30s', 'enableHTTPS': https, 'managedResources': managed}
    if https:
        ext['tlsConfig'] = {'insecure': True}
    # leader election on, on a Lease of its own (scheduler_name in the stack's namespace), as HAMi's chart
    # (charts/hami/templates/scheduler/configmap.yaml, values.yaml scheduler.leaderElect: true, v2.10.0; HAMI-13)
    return {'apiVersion': api, 'kind': 'KubeSchedulerConfiguration',
            'leaderElection': {'leaderElect': True, 'resourceName': hs['scheduler_name'], 'resourceNamespace': namespace},
            'profiles': [{'schedulerName': hs['scheduler_name']}], 'extenders': [ext]}


def render(ctx: Ctx, settings: Settings, nodes: list[str], facts: dict[str, Any]) -> Rendered:
    var = ctx.var('hami')
    hs = validate_settings(settings.get('hami'), HAMI_SCHEMA, var)
    minor, full = kube_version(hs['kube_version'], var)
    image = ctx.image(hs['image'], var + '.image')
    ks_ref = hs['kube_scheduler_image']
    if not ks_ref:
        if not full:
            raise StackError('%s.kube_version %s has no patch version: the kube-scheduler image follows the cluster\'s '
                             'exact version (e.g. v1.%d.4); give it, or set %s.kube_scheduler_image'
                             % (var, hs['kube_version'], minor, var))
        ks_ref = '%s:%s' % (KUBE_SCHEDULER_REPOSITORY, full)
    ks_image = ctx.image(ks_ref, var + '.kube_scheduler_image')
    webhook = bool(hs['webhook_tls_secret'] and hs['webhook_ca_bundle'])
    if bool(hs['webhook_tls_secret']) != bool(hs['webhook_ca_bundle']):
        raise StackError('%s.webhook_tls_secret and %s.webhook_ca_bundle go together (a kubernetes.io/tls Secret in %s and '
                         'the base64 PEM of the CA that signed it); got only one' % (var, var, ctx.namespace))
    if not webhook:
        ctx.warn('%s: no webhook_tls_secret/webhook_ca_bundle, so HAMi\'s mutating webhook is not installed: GPU pods '
                 'must set schedulerName: %s themselves.' % (var, hs['scheduler_name']))
    ks_ver = image_version(ks_ref)
    if ks_ver and (ks_ver[0] != 1 or ks_ver[1] != minor):
        raise StackError('%s.kube_scheduler_image %s does not match the cluster\'s Kubernetes %s (%s.kube_version); '
                         'kube-scheduler must be the cluster\'s own minor version' % (var, ks_ref, hs['kube_version'], var))
    hami_ver = image_version(hs['image'])
    post_start = hami_ver is None or hami_ver >= POST_START_SINCE
    if hami_ver is None:
        ctx.note('%s.image %s has no version tag: the device plugin\'s postStart hook (vgpu-init.sh, in HAMi images '
                 'from v2.5.0) is rendered' % (var, hs['image']))

    out = []
    dev_cm = SCHEDULER + '-device'
    dev_cm_obj = config_map(ctx, dev_cm, {'device-config.yaml': json.dumps(_device_config(hs, var), indent=2, sort_keys=True) + '\n'},
                            scope='shared')
    out.append(dev_cm_obj)
    sched_text = json.dumps(_scheduler_config(hs, minor, webhook, ctx.namespace), indent=2, sort_keys=True) + '\n'
    sched_cm_obj = config_map(ctx, SCHEDULER, {'config.yaml': sched_text}, scope='shared')
    out.append(sched_cm_obj)
    # as HAMi's chart: the configs' checksums on the pod templates, so a changed config rolls the pods (both mount
    # device-config.yaml with subPath, which never sees a ConfigMap update, and read it at start)
    checksums = {CHECKSUM_SCHEDULER_CONFIG: config_checksum(sched_cm_obj),
                 CHECKSUM_DEVICE_CONFIG: config_checksum(dev_cm_obj)}
    out += rbac_for(ctx, SCHEDULER, SCHEDULER_RULES, scope='shared')
    # as HAMi's chart does: the cluster's own kube-scheduler roles as well, so the kube-scheduler container gets
    # whatever that Kubernetes version's scheduler reads (e.g. resource.k8s.io objects on newer clusters)
    for role in SYSTEM_SCHEDULER_ROLES:
        out.append(cluster_role_binding(ctx, '%s-%s' % (SCHEDULER, role.split(':', 1)[1]), role, SCHEDULER, scope='shared'))
    ext_cmd = ['scheduler', '--http_bind=0.0.0.0:%d' % hs['scheduler_port'], '--scheduler-name=%s' % hs['scheduler_name'],
               '--metrics-bind-address=:%d' % SCHEDULER_METRICS_PORT, '--node-scheduler-policy=%s' % hs['node_scheduler_policy'],
               '--gpu-scheduler-policy=%s' % hs['gpu_scheduler_policy'], '--device-config-file=/device-config.yaml',
               # the extender acts only while the kube-scheduler beside it holds that Lease (HAMi's
               # pkg/util/leaderelection: leader when the holder identity starts with its host name; HAMI-13)
               '--leader-elect=true', '--leader-elect-resource-name=%s' % hs['scheduler_name'],
               '--leader-elect-resource-namespace=%s' % ctx.namespace]
    ext_mounts: list[dict[str, Any]] = [{'name': 'device-config', 'mountPath': '/device-config.yaml', 'subPath': 'device-config.yaml'}]
    volumes = [{'name': 'scheduler-config', 'configMap': {'name': SCHEDULER}},
               {'name': 'device-config', 'configMap': {'name': dev_cm}}]
    if webhook:
        ext_cmd += ['--cert_file=/tls/tls.crt', '--key_file=/tls/tls.key']
        ext_mounts.append({'name': 'tls-config', 'mountPath': '/tls', 'readOnly': True})
        volumes.append({'name': 'tls-config', 'secret': {'secretName': hs['webhook_tls_secret']}})
    spec = {'serviceAccountName': SCHEDULER, 'priorityClassName': 'system-cluster-critical',
            'containers': [
                {'name': 'kube-scheduler', 'image': ks_image,
                 'command': ['kube-scheduler', '--config=/config/config.yaml'],
                 'volumeMounts': [{'name': 'scheduler-config', 'mountPath': '/config'}]},
                {'name': 'vgpu-scheduler-extender', 'image': image, 'command': ext_cmd,
                 'env': [{'name': 'POD_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}},
                         {'name': 'POD_NAMESPACE', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.namespace'}}}],
                 'ports': [{'name': 'http', 'containerPort': hs['scheduler_port'], 'protocol': 'TCP'},
                           {'name': METRICS_PORT_NAME, 'containerPort': SCHEDULER_METRICS_PORT, 'protocol': 'TCP'}],
                 'volumeMounts': ext_mounts}],
            'volumes': volumes}
    pod_spec_common(ctx, spec, CONTROL_PLANE_TOLERATIONS)
    # Recreate: the old pod is gone before the new one starts, so a config change never runs two schedulers of one
    # name at once (the default RollingUpdate starts the new pod first; HAMI-13)
    out.append(deployment(ctx, SCHEDULER, SCHEDULER, spec, annotations=checksums, strategy='Recreate'))
    out.append({'apiVersion': 'v1', 'kind': 'Service', 'metadata': ctx.meta(SCHEDULER, scope='shared'),
                'spec': {'type': 'ClusterIP', 'selector': {'app.kubernetes.io/name': SCHEDULER},
                         'ports': [{'name': 'http', 'port': 443, 'targetPort': hs['scheduler_port'], 'protocol': 'TCP'},
                                   {'name': METRICS_PORT_NAME, 'port': SCHEDULER_METRICS_PORT,
                                    'targetPort': SCHEDULER_METRICS_PORT, 'protocol': 'TCP'}]}})
    if webhook:
        out.append({'apiVersion': 'admissionregistration.k8s.io/v1', 'kind': 'MutatingWebhookConfiguration',
                    'metadata': ctx.meta('hami-webhook', namespace=False, scope='shared'),
                    'webhooks': [{'name': 'vgpu.hami.io', 'admissionReviewVersions': ['v1', 'v1beta1'],
                                  'sideEffects': 'None', 'failurePolicy': 'Ignore', 'timeoutSeconds': 10,
                                  'clientConfig': {'caBundle': hs['webhook_ca_bundle'],
                                                   'service': {'name': SCHEDULER, 'namespace': ctx.namespace,
                                                               'path': '/webhook', 'port': 443}},
                                  'namespaceSelector': {'matchExpressions': [
                                      {'key': 'hami.io/webhook', 'operator': 'NotIn', 'values': ['ignore']}]},
                                  'objectSelector': {'matchExpressions': [
                                      {'key': 'hami.io/webhook', 'operator': 'NotIn', 'values': ['ignore']}]},
                                  'rules': [{'apiGroups': [''], 'apiVersions': ['v1'], 'operations': ['CREATE'],
                                             'resources': ['pods'], 'scope': '*'}]}]})

    dp = DEVICE_PLUGIN + '-' + ctx.pool
    # the device plugin registers devices and takes/releases node locks through Node annotations, patches pods on
    # allocation and records events (charts/hami/templates/device-plugin/monitorrole.yaml at v2.10.0)
    out += rbac_for(ctx, dp, DEVICE_PLUGIN_RULES)
    # per-node overrides the plugin reads from /config/config.json (nodeconfig); none by default
    out.append(config_map(ctx, dp, {'config.json': json.dumps({'nodeconfig': []}, indent=2) + '\n'}))
    plugin = {'name': 'device-plugin', 'image': image,
              'command': ['nvidia-device-plugin', '--config-file=/device-config.yaml', '--mig-strategy=none',
                          '--disable-core-limit=%s' % ('true' if hs['disable_core_limit'] else 'false')],
              'env': [node_name_env(), {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'},
                      {'name': 'DEVICE_LIST_STRATEGY', 'value': 'envvar'},
                      {'name': 'HOOK_PATH', 'value': '/usr/local'}],
              'securityContext': {'privileged': True, 'allowPrivilegeEscalation': True,
                                  'capabilities': {'drop': ['ALL'], 'add': ['SYS_ADMIN']}},
              'volumeMounts': [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'},
                               {'name': 'lib', 'mountPath': '/usr/local/vgpu'},
                               {'name': 'usrbin', 'mountPath': '/usrbin'},
                               {'name': 'deviceconfig', 'mountPath': '/config'},
                               {'name': 'hosttmp', 'mountPath': '/tmp'},
                               {'name': 'device-config', 'mountPath': '/device-config.yaml', 'subPath': 'device-config.yaml'},
                               {'name': 'cdi-root', 'mountPath': '/var/run/cdi'}]}
    if post_start:
        # vgpu-init.sh copies HAMi-core (libvgpu.so) to the host's /usr/local/vgpu for the workload containers
        plugin['lifecycle'] = {'postStart': {'exec': {'command': ['/bin/sh', '-c', VGPU_INIT]}}}
    monitor = {'name': 'vgpu-monitor', 'image': image, 'command': ['vGPUmonitor'],
               'env': [node_name_env(), {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'},
                       {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'},
                       {'name': 'HOOK_PATH', 'value': '/usr/local/vgpu'}],
               'ports': [{'name': METRICS_PORT_NAME, 'containerPort': MONITOR_PORT, 'protocol': 'TCP'}],
               'securityContext': {'allowPrivilegeEscalation': False,
                                   'capabilities': {'drop': ['ALL'], 'add': ['SYS_ADMIN']}},
               'volumeMounts': [{'name': 'ctrs', 'mountPath': '/usr/local/vgpu/containers'},
                                {'name': 'dockers', 'mountPath': '/run/docker'},
                                {'name': 'containerds', 'mountPath': '/run/containerd'},
                                {'name': 'sysinfo', 'mountPath': '/sysinfo'},
                                {'name': 'hostvar', 'mountPath': '/hostvar'},
                                {'name': 'hosttmp', 'mountPath': '/tmp'}]}
    selector = ctx.pool_selector()
    selector[NODE_LABEL] = 'on'
    dspec = {'serviceAccountName': dp, 'priorityClassName': 'system-node-critical', 'hostPID': True,
             'nodeSelector': selector, 'containers': [plugin, monitor],
             'volumes': [hostpath_volume('device-plugin', '/var/lib/kubelet/device-plugins'),
                         hostpath_volume('lib', '/usr/local/vgpu', 'DirectoryOrCreate'),
                         hostpath_volume('usrbin', '/usr/bin'),
                         hostpath_volume('hosttmp', '/tmp'),
                         hostpath_volume('ctrs', '/usr/local/vgpu/containers', 'DirectoryOrCreate'),
                         hostpath_volume('dockers', '/run/docker'),
                         hostpath_volume('containerds', '/run/containerd'),
                         hostpath_volume('sysinfo', '/sys'),
                         hostpath_volume('hostvar', '/var'),
                         hostpath_volume('cdi-root', '/var/run/cdi', 'DirectoryOrCreate'),
                         {'name': 'deviceconfig', 'configMap': {'name': dp}},
                         {'name': 'device-config', 'configMap': {'name': dev_cm}}]}
    pod_spec_common(ctx, dspec, [GPU_TOLERATION] + CONTROL_PLANE_TOLERATIONS)
    out.append(daemonset(ctx, dp, DEVICE_PLUGIN, dspec, annotations=checksums))
    labels = dict((n, {NODE_LABEL: 'on'}) for n in nodes)
    return out, labels, ['nvidia.com/gpu', 'nvidia.com/gpumem', 'nvidia.com/gpucores'], \
        {'nvidia.com/gpu': '1', 'nvidia.com/gpumem': '3000', 'nvidia.com/gpucores': '30'}


SETTINGS = {'hami': HAMI_SCHEMA}

# What every hami pool of a cluster shares (hami-scheduler's Deployment, its config and device ConfigMaps, the webhook,
# RBAC; scope shared): every setting enters one of them, and so do the pool variables below. Pools of the strategy
# whose values differ are refused by the pools' plan (stacks/shared.conflicts).
SHARED = {'settings': 'hami', 'keys': tuple(HAMI_SCHEMA),
          'pool_variables': ('gpu_sharing_stack_namespace', 'gpu_sharing_stack_registry',
                             'gpu_sharing_stack_image_pull_secrets'),
          'objects': "HAMi's scheduler (hami-scheduler Deployment, its scheduler and device ConfigMaps, its webhook)"}


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS); HAMi's pods name its scheduler."""
    manifests, labels, resources, limits = render(ctx, settings, nodes, facts)
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits,
            'scheduler_name': validate_settings(settings.get('hami'), HAMI_SCHEMA, ctx.var('hami'))['scheduler_name']}


class HamiStack(Stack):
    """HAMi: one scheduler, device config and webhook for every hami pool (SHARED); its webhook takes over every
    nvidia.com/gpu pod of the cluster; its device plugin registers the Node (annotations); the render reads the API
    server's version (the scheduler image follows the minor) and checks the webhook's TLS Secret exists."""
    shared = SHARED
    may_intercept_nvidia_gpu = True
    registration_annotations = REGISTRATION_ANNOTATIONS
    version_key = 'hami'
    version_on_removal = True

    def __init__(self, name: str) -> None:
        super(HamiStack, self).__init__(name)
        self.shared_module = sys.modules[__name__]

    def migration_labels(self) -> dict[str, str]:
        # render above: the label HAMi's device plugin selects
        return {NODE_LABEL: 'on'}

    def own_metrics(self, settings: dict) -> dict | None:
        # the vGPU monitor beside each pool's device plugin, the scheduler's extender (render above; STKM-01, STKM-04)
        return {'pool': {'app': DEVICE_PLUGIN, 'port': MONITOR_PORT, 'port_name': METRICS_PORT_NAME},
                'scheduler': {'selects': 'pods', 'labels': {'app.kubernetes.io/name': SCHEDULER},
                              'port': SCHEDULER_METRICS_PORT, 'port_name': METRICS_PORT_NAME, 'namespace': None,
                              'needs': '', 'service': ''},
                'allocations': True, 'usage': True}

    def intercepts_nvidia_gpu(self, settings: dict) -> bool:
        return bool((settings.get('hami') or {}).get('webhook_tls_secret'))

    def intercept_error(self, pool: str, others: list[str], var: str) -> str:
        return ('Refusing %shami.webhook_tls_secret for pool %s: HAMi\'s webhook (v2.10.0) sends every pod '
                'of the cluster that asks for nvidia.com/gpu to hami-scheduler and denies those with a '
                'privileged container, so the pods of the other NVIDIA pool(s) %s would be scheduled by HAMi '
                '(which knows only its own nodes) or refused. Leave the webhook out (HAMi pods then set '
                'schedulerName themselves), or move those pools to hami'
                % (var, pool, ', '.join(others)))

    def intercept_warning(self, others: list[str], var: str) -> str:
        # node labels do not say whether that HAMi pool runs the webhook; its next role run refuses it beside us
        return ('pool(s) %s run HAMi: if HAMi\'s webhook is installed, it sends this pool\'s nvidia.com/gpu pods to '
                'hami-scheduler; run the HAMi pool without %shami.webhook_tls_secret' % (', '.join(others), var))

    def live_queries(self, settings: dict, present: bool, namespace: str) -> list[dict]:
        hami = settings_of(settings, 'hami')
        if present and hami.get('webhook_tls_secret'):
            return [{'key': 'hami_webhook_secret', 'kind': 'Secret', 'name': hami['webhook_tls_secret'],
                     'namespace': namespace or 'kube-system'}]
        return []

    def node_shows(self, labels: dict, annotations: dict, resources: dict, registered: list[str],
                   recorded: str | None = None) -> bool:
        # registered by HAMi's device plugin (its nvidia.com/gpu is HAMi's then), or one of its own resources
        return self.name in registered or super(HamiStack, self).node_shows(
            labels, annotations, resources, registered, recorded)

    def merge_objects(self, settings: dict, objects: dict, namespace: str, var: str) -> None:
        if 'hami_webhook_secret' in objects and not objects['hami_webhook_secret']:
            raise StackError('%shami.webhook_tls_secret names Secret %s/%s, which does not exist; create a '
                             'kubernetes.io/tls Secret (e.g. with cert-manager) first.'
                             % (var, namespace or 'kube-system', settings_of(settings, 'hami')['webhook_tls_secret']))


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry)."""
    return HamiStack(name)
