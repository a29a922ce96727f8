# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Aliyun gpushare: scheduler extender (Deployment + Service + RBAC) and device plugin (DaemonSet + RBAC)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.gpu_stack_common import (
    CONTROL_PLANE_TOLERATIONS, GPU_TOLERATION, daemonset, deployment, hostpath_volume, node_name_env, pod_spec_common,
    rbac_for, split_image, validate_settings,
)

EXTENDER_IMAGE = 'registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a'
PLUGIN_IMAGE = 'registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23'
NODE_LABEL = 'gpushare'
RESOURCE = 'aliyun.com/gpu-mem'
RESOURCE_COUNT = 'aliyun.com/gpu-count'
EXTENDER_PORT = 12345
NODE_PORT = 32766

# Extender image tags known to answer HTTP 500 on bind for pods that carry fields newer than the Kubernetes
# client the extender was built with (e.g. enableServiceLinks=false, which Knative and KServe set).  The doctor
# (and this renderer) flag them.  Keyed by "repository path without registry:tag".
KNOWN_BAD_EXTENDER_TAGS = {
    'acs/k8s-gpushare-schd-extender:1.11-d170d8a':
        'bind fails with HTTP 500 for pods that set fields newer than its vendored Kubernetes client '
        '(e.g. enableServiceLinks=false as set by Knative/KServe)',
}

GPUSHARE_SCHEMA = {
    'extender_image': dict(type=str, default=EXTENDER_IMAGE),
    'device_plugin_image': dict(type=str, default=PLUGIN_IMAGE),
    'memory_unit': dict(type=str, default='GiB', choices=['GiB', 'MiB']),
    'extender_host_network': dict(type=bool, default=True),
    'extender_node_port': dict(type=int, default=NODE_PORT, min=30000, max=32767),
    'extender_port': dict(type=int, default=EXTENDER_PORT, min=1, max=65535),
    'extender_node_affinity': dict(type=bool, default=True),
    'log_level': dict(type=str, default='info', choices=['debug', 'info', 'warn', 'error']),
}

# kubelet's default gRPC max receive message size is 4 MiB; each fake device the plugin advertises costs
# roughly 40-60 bytes in ListAndWatch, so beyond ~65k devices per node the message is too large.
GRPC_DEVICE_LIMIT = 65536


def known_bad_extender(image):
    """Reason string when the image is a known-bad extender tag (any registry/mirror prefix), else None."""
    dummy, path, tag, dummy2 = split_image(image)
    for key, reason in KNOWN_BAD_EXTENDER_TAGS.items():
        kpath, ktag = key.rsplit(':', 1)
        if tag == ktag and (path == kpath or path.endswith('/' + kpath.split('/')[-1])):
            return reason
    return None


def _devices_per_node(facts_one, unit):
    total = 0
    for g in (facts_one or {}).get('gpus') or []:
        mib = g.get('memory_total_mib') or 0
        total += mib if unit == 'MiB' else mib // 1024
    return total


def render(ctx, settings, nodes, facts):
    gs = validate_settings(settings.get('gpushare'), GPUSHARE_SCHEMA, ctx.var('gpushare'))
    var = ctx.var('gpushare')
    ext_image = ctx.image(gs['extender_image'], var + '.extender_image')
    plugin_image = ctx.image(gs['device_plugin_image'], var + '.device_plugin_image')
    bad = known_bad_extender(gs['extender_image'])
    if bad:
        ctx.warn('%s.extender_image %s is a known-bad tag: %s. Build the extender from a fixed upstream commit into '
                 'your registry and set %s.extender_image (see docs/sharing_stacks.md).'
                 % (var, gs['extender_image'], bad, var))
    if gs['memory_unit'] == 'MiB':
        worst = max([(_devices_per_node(facts.get(n), 'MiB'), n) for n in nodes] or [(0, None)])
        if worst[0] > GRPC_DEVICE_LIMIT:
            ctx.warn('%s.memory_unit MiB makes %s advertise %d fake devices, beyond what fits in the kubelet\'s 4 MiB '
                     'gRPC message (about %d): the device plugin fails to register. Use GiB.'
                     % (var, worst[1], worst[0], GRPC_DEVICE_LIMIT))
        else:
            ctx.warn('%s.memory_unit MiB advertises one device per MiB: on large GPUs (e.g. 8 x 80 GiB = 655360 devices) '
                     'the ListAndWatch message overflows the kubelet\'s 4 MiB gRPC limit. GiB is safer.' % var)

    out = []
    # scheduler extender: cluster-wide, one per cluster (shared by every gpushare pool)
    ext = 'gpushare-schd-extender'
    out += rbac_for(ctx, ext, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']},
        {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['bindings', 'pods/binding'], 'verbs': ['create']},
        {'apiGroups': [''], 'resources': ['configmaps'], 'verbs': ['get', 'list', 'watch']},
    ], scope='shared')
    container = {'name': ext, 'image': ext_image,
                 'env': [{'name': 'LOG_LEVEL', 'value': gs['log_level']}, {'name': 'PORT', 'value': str(gs['extender_port'])}],
                 'ports': [{'name': 'http', 'containerPort': gs['extender_port']}],
                 'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}}}
    spec = {'serviceAccountName': ext, 'hostNetwork': gs['extender_host_network'], 'priorityClassName': 'system-cluster-critical',
            'containers': [container]}
    if gs['extender_node_affinity']:
        # upstream pins the extender to node-role.kubernetes.io/master; that label is gone on kubeadm >= 1.24 and RKE uses
        # node-role.kubernetes.io/controlplane=true. Any one of them (OR of terms) places it next to kube-scheduler.
        spec['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
            {'matchExpressions': [{'key': 'node-role.kubernetes.io/control-plane', 'operator': 'Exists'}]},
            {'matchExpressions': [{'key': 'node-role.kubernetes.io/master', 'operator': 'Exists'}]},
            {'matchExpressions': [{'key': 'node-role.kubernetes.io/controlplane', 'operator': 'In', 'values': ['true']}]},
        ]}}}
    pod_spec_common(ctx, spec, CONTROL_PLANE_TOLERATIONS + [{'key': 'node.cloudprovider.kubernetes.io/uninitialized',
                                                             'operator': 'Exists', 'effect': 'NoSchedule'}])
    out.append(deployment(ctx, ext, ext, spec, strategy='Recreate'))
    out.append({'apiVersion': 'v1', 'kind': 'Service', 'metadata': ctx.meta(ext, scope='shared'),
                'spec': {'type': 'NodePort', 'selector': {'app.kubernetes.io/name': ext},
                         'ports': [{'name': 'http', 'port': gs['extender_port'], 'targetPort': gs['extender_port'],
                                    'nodePort': gs['extender_node_port'], 'protocol': 'TCP'}]}})

    # device plugin: per pool
    dp = 'gpushare-device-plugin-' + ctx.pool
    out += rbac_for(ctx, dp, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']},
        {'apiGroups': [''], 'resources': ['nodes/status'], 'verbs': ['patch', 'update']},
        {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
    ])
    selector = ctx.pool_selector()
    selector[NODE_LABEL] = 'true'
    plugin = {'name': 'gpushare', 'image': plugin_image,
              'command': ['gpushare-device-plugin-v2', '-logtostderr', '--v=5', '--memory-unit=%s' % gs['memory_unit']],
              'env': [{'name': 'KUBECONFIG', 'value': '/etc/kubernetes/kubelet.conf'}, node_name_env()],
              'resources': {'limits': {'cpu': '1', 'memory': '300Mi'}, 'requests': {'cpu': '1', 'memory': '300Mi'}},
              'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
              'volumeMounts': [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'}]}
    dspec = {'serviceAccountName': dp, 'hostNetwork': True, 'priorityClassName': 'system-node-critical',
             'nodeSelector': selector, 'containers': [plugin],
             'volumes': [hostpath_volume('device-plugin', '/var/lib/kubelet/device-plugins')]}
    # single-node clusters put GPUs on the control plane: tolerate its taints too
    pod_spec_common(ctx, dspec, [GPU_TOLERATION] + CONTROL_PLANE_TOLERATIONS)
    out.append(daemonset(ctx, dp, 'gpushare-device-plugin', dspec))
    ctx.note('gpushare needs kube-scheduler configured with the gpushare extender (http://127.0.0.1:%d/gpushare-scheduler '
             'with hostNetwork, or NodePort %d): role gpuops.k8s_gpu.kube_scheduler_extender writes that configuration.'
             % (gs['extender_port'], gs['extender_node_port']))
    labels = dict((n, {NODE_LABEL: 'true'}) for n in nodes)
    return out, labels, [RESOURCE, RESOURCE_COUNT], {RESOURCE: '2'}
