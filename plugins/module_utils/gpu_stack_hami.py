# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HAMi (project-hami): device plugin, scheduler (kube-scheduler + HAMi extender) and mutating webhook.

Rendered: device config ConfigMap, device plugin DaemonSet (+ vGPU monitor), scheduler Deployment with its
KubeSchedulerConfiguration, Service, RBAC, and the MutatingWebhookConfiguration when a CA bundle and a TLS Secret
are given.  Not rendered: the certificate generation jobs of HAMi's chart, ServiceMonitors, non-NVIDIA devices.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.gpu_stack_common import (
    CONTROL_PLANE_TOLERATIONS, GPU_TOLERATION, StackError, config_map, daemonset, deployment, hostpath_volume,
    node_name_env, pod_spec_common, rbac_for, validate_settings,
)

HAMI_IMAGE = 'docker.io/projecthami/hami:v2.4.1'
KUBE_SCHEDULER_IMAGE = 'registry.k8s.io/kube-scheduler:v1.29.4'
NODE_LABEL = 'gpu'
SCHEDULER = 'hami-scheduler'
DEVICE_PLUGIN = 'hami-device-plugin'

HAMI_SCHEMA = {
    'image': dict(type=str, default=HAMI_IMAGE),
    'kube_scheduler_image': dict(type=str, default=KUBE_SCHEDULER_IMAGE),
    'scheduler_name': dict(type=str, default=SCHEDULER),
    'device_split_count': dict(type=int, default=10, min=1, max=100),
    'device_memory_scaling': dict(type=float, default=1.0, min=0.1, max=10.0),
    'device_core_scaling': dict(type=float, default=1.0, min=0.1, max=10.0),
    'default_mem': dict(type=int, default=0, min=0),
    'default_cores': dict(type=int, default=0, min=0, max=100),
    'disable_core_limit': dict(type=bool, default=False),
    'node_scheduler_policy': dict(type=str, default='binpack', choices=['binpack', 'spread']),
    'gpu_scheduler_policy': dict(type=str, default='spread', choices=['binpack', 'spread']),
    'webhook_tls_secret': dict(type=str, default=''),
    'webhook_ca_bundle': dict(type=str, default=''),
    'scheduler_port': dict(type=int, default=9443, min=1, max=65535),
    'kube_version': dict(type=str, default='1.29'),
}


def _device_config(hs):
    return {'nvidia': {
        'resourceCountName': 'nvidia.com/gpu',
        'resourceMemoryName': 'nvidia.com/gpumem',
        'resourceMemoryPercentageName': 'nvidia.com/gpumem-percentage',
        'resourceCoreName': 'nvidia.com/gpucores',
        'resourcePriorityName': 'nvidia.com/priority',
        'overwriteEnv': False,
        'defaultMem': hs['default_mem'],
        'defaultCores': hs['default_cores'],
        'defaultGPUNum': 1,
        'deviceSplitCount': hs['device_split_count'],
        'deviceMemoryScaling': hs['device_memory_scaling'],
        'deviceCoreScaling': hs['device_core_scaling'],
        'migstrategy': 'none',
        'disablecorelimit': 'true' if hs['disable_core_limit'] else 'false',
    }}


def _scheduler_config(hs, minor, https):
    api = 'kubescheduler.config.k8s.io/v1' if minor >= 25 else 'kubescheduler.config.k8s.io/v1beta3'
    managed = [{'name': n, 'ignoredByScheduler': True} for n in
               ('nvidia.com/gpu', 'nvidia.com/gpumem', 'nvidia.com/gpucores', 'nvidia.com/gpumem-percentage',
                'nvidia.com/priority')]
    ext = {'urlPrefix': '%s://127.0.0.1:%d' % ('https' if https else 'http', hs['scheduler_port']),
           'filterVerb': 'filter', 'bindVerb': 'bind', 'nodeCacheCapable': True, 'weight': 1,
           'httpTimeout': '30s', 'enableHTTPS': https, 'managedResources': managed}
    if https:
        ext['tlsConfig'] = {'insecure': True}
    return {'apiVersion': api, 'kind': 'KubeSchedulerConfiguration', 'leaderElection': {'leaderElect': False},
            'profiles': [{'schedulerName': hs['scheduler_name']}], 'extenders': [ext]}


def render(ctx, settings, nodes, facts):
    var = ctx.var('hami')
    hs = validate_settings(settings.get('hami'), HAMI_SCHEMA, var)
    try:
        minor = int(str(hs['kube_version']).lstrip('v').split('.')[1])
    except (IndexError, ValueError):
        raise StackError('%s.kube_version must look like 1.29; got %r' % (var, hs['kube_version']))
    if not 24 <= minor <= 33:
        raise StackError('%s.kube_version must be between 1.24 and 1.33; got %s' % (var, hs['kube_version']))
    image = ctx.image(hs['image'], var + '.image')
    ks_image = ctx.image(hs['kube_scheduler_image'], var + '.kube_scheduler_image')
    webhook = bool(hs['webhook_tls_secret'] and hs['webhook_ca_bundle'])
    if bool(hs['webhook_tls_secret']) != bool(hs['webhook_ca_bundle']):
        raise StackError('%s.webhook_tls_secret and %s.webhook_ca_bundle go together (a kubernetes.io/tls Secret in %s and '
                         'the base64 PEM of the CA that signed it); got only one' % (var, var, ctx.namespace))
    if not webhook:
        ctx.warn('%s: no webhook_tls_secret/webhook_ca_bundle, so HAMi\'s mutating webhook is not installed: GPU pods '
                 'must set schedulerName: %s themselves.' % (var, hs['scheduler_name']))
    ts = hs['kube_scheduler_image'].rsplit(':', 1)[-1].lstrip('v').split('.')
    if len(ts) >= 2 and ts[1].isdigit() and int(ts[1]) != minor:
        ctx.warn('%s.kube_scheduler_image %s does not match %s.kube_version %s; use the cluster\'s kube-scheduler version.'
                 % (var, hs['kube_scheduler_image'], var, hs['kube_version']))

    out = []
    dev_cm = SCHEDULER + '-device'
    out.append(config_map(ctx, dev_cm, {'device-config.yaml': json.dumps(_device_config(hs), indent=2, sort_keys=True) + '\n'},
                          scope='shared'))
    sched_text = json.dumps(_scheduler_config(hs, minor, webhook), indent=2, sort_keys=True) + '\n'
    out.append(config_map(ctx, SCHEDULER, {'config.yaml': sched_text}, scope='shared'))
    out += rbac_for(ctx, SCHEDULER, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['bindings', 'pods/binding'], 'verbs': ['create']},
        {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch', 'update']},
        {'apiGroups': [''], 'resources': ['configmaps', 'namespaces', 'services', 'persistentvolumes',
                                          'persistentvolumeclaims', 'replicationcontrollers'],
         'verbs': ['get', 'list', 'watch']},
        {'apiGroups': ['apps'], 'resources': ['replicasets', 'statefulsets'], 'verbs': ['get', 'list', 'watch']},
        {'apiGroups': ['policy'], 'resources': ['poddisruptionbudgets'], 'verbs': ['get', 'list', 'watch']},
        {'apiGroups': ['storage.k8s.io'], 'resources': ['storageclasses', 'csinodes', 'csidrivers', 'csistoragecapacities'],
         'verbs': ['get', 'list', 'watch']},
        {'apiGroups': ['coordination.k8s.io'], 'resources': ['leases'], 'verbs': ['get', 'list', 'watch', 'create', 'update']},
    ], scope='shared')
    ext_cmd = ['scheduler', '--http_bind=0.0.0.0:%d' % hs['scheduler_port'], '--scheduler-name=%s' % hs['scheduler_name'],
               '--metrics-bind-address=:9395', '--node-scheduler-policy=%s' % hs['node_scheduler_policy'],
               '--gpu-scheduler-policy=%s' % hs['gpu_scheduler_policy'], '--device-config-file=/device-config.yaml']
    ext_mounts = [{'name': 'device-config', 'mountPath': '/device-config.yaml', 'subPath': 'device-config.yaml'}]
    volumes = [{'name': 'scheduler-config', 'configMap': {'name': SCHEDULER}},
               {'name': 'device-config', 'configMap': {'name': dev_cm}}]
    if webhook:
        ext_cmd += ['--cert_file=/tls/tls.crt', '--key_file=/tls/tls.key']
        ext_mounts.append({'name': 'tls-config', 'mountPath': '/tls', 'readOnly': True})
        volumes.append({'name': 'tls-config', 'secret': {'secretName': hs['webhook_tls_secret']}})
    spec = {'serviceAccountName': SCHEDULER, 'priorityClassName': 'system-cluster-critical',
            'containers': [
                {'name': 'kube-scheduler', 'image': ks_image,
                 'command': ['kube-scheduler', '--config=/config/config.yaml', '--leader-elect=false'],
                 'volumeMounts': [{'name': 'scheduler-config', 'mountPath': '/config'}]},
                {'name': 'vgpu-scheduler-extender', 'image': image, 'command': ext_cmd,
                 'env': [{'name': 'POD_NAMESPACE', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.namespace'}}}],
                 'ports': [{'name': 'http', 'containerPort': hs['scheduler_port'], 'protocol': 'TCP'},
                           {'name': 'metrics', 'containerPort': 9395, 'protocol': 'TCP'}],
                 'volumeMounts': ext_mounts}],
            'volumes': volumes}
    pod_spec_common(ctx, spec, CONTROL_PLANE_TOLERATIONS)
    out.append(deployment(ctx, SCHEDULER, SCHEDULER, spec))
    out.append({'apiVersion': 'v1', 'kind': 'Service', 'metadata': ctx.meta(SCHEDULER, scope='shared'),
                'spec': {'type': 'ClusterIP', 'selector': {'app.kubernetes.io/name': SCHEDULER},
                         'ports': [{'name': 'http', 'port': 443, 'targetPort': hs['scheduler_port'], 'protocol': 'TCP'},
                                   {'name': 'metrics', 'port': 9395, 'targetPort': 9395, 'protocol': 'TCP'}]}})
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
    out += rbac_for(ctx, dp, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
    ])
    plugin = {'name': 'device-plugin', 'image': image,
              'command': ['nvidia-device-plugin', '--config-file=/device-config.yaml', '--mig-strategy=none',
                          '--disable-core-limit=%s' % ('true' if hs['disable_core_limit'] else 'false')],
              'lifecycle': {'postStart': {'exec': {'command': ['/bin/sh', '-c', '/k8s-vgpu/bin/vgpu-init.sh /usr/local/vgpu/']}}},
              'env': [node_name_env(), {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'},
                      {'name': 'HOOK_PATH', 'value': '/usr/local'}],
              'securityContext': {'privileged': True, 'capabilities': {'add': ['SYS_ADMIN']}},
              'volumeMounts': [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'},
                               {'name': 'lib', 'mountPath': '/usr/local/vgpu'},
                               {'name': 'usrbin', 'mountPath': '/usrbin'},
                               {'name': 'hosttmp', 'mountPath': '/tmp'},
                               {'name': 'device-config', 'mountPath': '/device-config.yaml', 'subPath': 'device-config.yaml'}]}
    monitor = {'name': 'vgpu-monitor', 'image': image, 'command': ['vGPUmonitor'],
               'env': [node_name_env(), {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'},
                       {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'},
                       {'name': 'HOOK_PATH', 'value': '/usr/local/vgpu'}],
               'ports': [{'name': 'metrics', 'containerPort': 9394, 'protocol': 'TCP'}],
               'securityContext': {'privileged': True},
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
                         {'name': 'device-config', 'configMap': {'name': dev_cm}}]}
    pod_spec_common(ctx, dspec, [GPU_TOLERATION] + CONTROL_PLANE_TOLERATIONS)
    out.append(daemonset(ctx, dp, DEVICE_PLUGIN, dspec))
    labels = dict((n, {NODE_LABEL: 'on'}) for n in nodes)
    return out, labels, ['nvidia.com/gpu', 'nvidia.com/gpumem', 'nvidia.com/gpucores'], \
        {'nvidia.com/gpu': '1', 'nvidia.com/gpumem': '3000', 'nvidia.com/gpucores': '30'}
