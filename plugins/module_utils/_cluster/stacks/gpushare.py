# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Aliyun gpushare: scheduler extender (Deployment + Service + RBAC) and device plugin (DaemonSet + RBAC)."""

from __future__ import annotations

import re
import sys
from typing import Any

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    HAS_YAML = False

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack, settings_of
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    CONTROL_PLANE_TOLERATIONS, GPU_TOLERATION, StackError, daemonset, deployment, hostpath_volume, node_name_env,
    pod_spec_common, quantity, rbac_for, split_image, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Rendered, Settings

EXTENDER_IMAGE = pins.ref('gpushare-extender')
PLUGIN_IMAGE = pins.ref('gpushare-device-plugin')
NODE_LABEL = 'gpushare'
RESOURCE, RESOURCE_COUNT = gpu_strategy.strategy('gpushare')['resources']  # the strategy model's
EXTENDER_PORT = 12345
NODE_PORT = 32766

# Images that predate upstream's fixes for pods carrying fields newer than the Kubernetes client they were built
# with (e.g. enableServiceLinks: false as Knative/KServe set it, seccompProfile, topologySpreadConstraints): the
# extender answers HTTP 500 on bind, the device plugin fails to update the pod on Allocate.  Both are the images
# upstream's own manifests still name.  Keyed by "repository path without registry:tag".
KNOWN_BAD_EXTENDER_TAGS = {
    'acs/k8s-gpushare-schd-extender:1.11-d170d8a':
        'bind fails with HTTP 500 for pods that set fields newer than its vendored Kubernetes client '
        '(e.g. enableServiceLinks=false as set by Knative/KServe); built from d170d8a (2019), before the fix',
}
KNOWN_BAD_PLUGIN_TAGS = {
    'acs/k8s-gpushare-plugin:v2-1.11-aff8a23':
        'Allocate fails to update pods that set fields newer than its vendored Kubernetes client; built from aff8a23 '
        '(2019), before the fix',
}
# Upstream commits that carry the fixes (build from these or later).
EXTENDER_FIX_COMMITS = (
    ('AliyunContainerService/gpushare-scheduler-extender', '4e418f19fa9c9d1f792705d98e672e532372b6cc',
     'fix bug: bind error when some pod fields are unknown (#152)'),
    ('AliyunContainerService/gpushare-scheduler-extender', '86f60252647b0896f4eaa6f1d771b41be1cc686a',
     'upgrade golang to 1.19 and k8s to 1.25 (#194)'),
)
PLUGIN_FIX_COMMITS = (
    ('AliyunContainerService/gpushare-device-plugin', 'dcd90b4c58123a28b9140a561f1791c4c26e1762',
     'fix bug: update pod error when allocate (#38)'),
)
BUILD_HINT = ('build both from those commits or later (git clone the repository, git checkout the commit, docker build '
              '-t REGISTRY/acs/IMAGE:TAG . with the repository\'s Dockerfile, docker push) and set '
              'gpu_sharing_stack_gpushare.extender_image and .device_plugin_image to them; for new deployments use '
              'gpu_sharing_stack_strategy: hami instead (maintained, enforces memory limits)')
REGISTRATIONS = ('node-port', 'host-network', 'cluster-ip')

GPUSHARE_SCHEMA = {
    'extender_image': dict(type=str, default='',
                           description=('Scheduler extender image, built from upstream commit 4e418f19fa9c9d1f792705d98e672e532372b6cc or later.',
                                        "Required unless O(gpu_sharing_stack_gpushare.accept_known_bad_images); upstream's published "
                                        "C(k8s-gpushare-schd-extender:1.11-d170d8a) fails bind (HTTP 500) for pods with newer fields "
                                        "(enableServiceLinks=false as Knative/KServe set it) and is refused.")),
    'device_plugin_image': dict(type=str, default='',
                                description=('Device plugin image, built from upstream commit dcd90b4c58123a28b9140a561f1791c4c26e1762 or later.',
                                             "Required unless O(gpu_sharing_stack_gpushare.accept_known_bad_images); upstream's published "
                                             "C(k8s-gpushare-plugin:v2-1.11-aff8a23) predates that fix and is refused.")),
    'accept_known_bad_images': dict(type=bool, default=False,
                                    description="Deploy upstream's known-bad images (when the images above are empty or name them) anyway, with a warning."),
    'registration': dict(type=str, default='node-port', choices=list(REGISTRATIONS),
                         description=('How kube-scheduler reaches the extender (the module returns the URL as C(extender_url)).',
                                      "V(node-port) is upstream's C(http://127.0.0.1:32766/gpushare-scheduler), answered only by kube-proxy in iptables "
                                      "mode.",
                                      'V(host-network) runs the extender as a DaemonSet on every control-plane node and uses '
                                      'C(http://127.0.0.1:12345/gpushare-scheduler).',
                                      'V(cluster-ip) gives the Service the fixed address O(gpu_sharing_stack_gpushare.extender_cluster_ip).')),
    'extender_cluster_ip': dict(type=str, default='',
                                description='Free IPv4 address inside the Service CIDR for O(gpu_sharing_stack_gpushare.registration=cluster-ip).'),
    # kube-proxy's mode ('' when unknown), or the kube-proxy ConfigMap's config.conf as the role reads it
    'kube_proxy_mode': dict(type=str, default='',
                            description=("kube-proxy's mode; empty to read it from the kube-proxy ConfigMap (kubeadm). With V(ipvs) or V(nftables) "
                                         "O(gpu_sharing_stack_gpushare.registration=node-port) is refused.",)),
    # internal: not a role option, the render fills it from the cluster's kube-proxy ConfigMap (stacks/live)
    'kube_proxy_config': dict(type=str, default='', internal=True),
    'memory_unit': dict(type=str, default='GiB', choices=['GiB', 'MiB'],
                        description="Unit of C(aliyun.com/gpu-mem); MiB overflows the kubelet's gRPC limit on large GPUs."),
    'extender_host_network': dict(type=bool, default=True, description='Run the extender on the host network (reachable at 127.0.0.1 from kube-scheduler).'),
    'extender_node_port': dict(type=int, default=NODE_PORT, min=30000, max=32767, description='NodePort of the extender Service.'),
    'extender_port': dict(type=int, default=EXTENDER_PORT, min=1, max=65535, description='Port the extender listens on.'),
    'extender_node_affinity': dict(type=bool, default=True, description='Place the extender on a control-plane node (kubeadm, old kubeadm, RKE labels).'),
    'log_level': dict(type=str, default='info', choices=['debug', 'info', 'warn', 'error'], description='Extender log level.'),
}

# kubelet's default gRPC max receive message size is 4 MiB; each fake device the plugin advertises costs
# roughly 40-60 bytes in ListAndWatch, so beyond ~65k devices per node the message is too large.
GRPC_DEVICE_LIMIT = 65536
_IPV4 = re.compile(r'^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$')


def _known_bad(image: str, table: dict[str, str]) -> str | None:
    dummy, path, tag, dummy2 = split_image(image)
    for key, reason in table.items():
        kpath, ktag = key.rsplit(':', 1)
        if tag == ktag and (path == kpath or path.endswith('/' + kpath.split('/')[-1])):
            return reason
    return None


def known_bad_extender(image: str) -> str | None:
    """Reason string when the image is a known-bad extender tag (any registry/mirror prefix), else None."""
    return _known_bad(image, KNOWN_BAD_EXTENDER_TAGS)


def known_bad_plugin(image: str) -> str | None:
    """Reason string when the image is a known-bad device plugin tag (any registry/mirror prefix), else None."""
    return _known_bad(image, KNOWN_BAD_PLUGIN_TAGS)


def fix_commits_text() -> str:
    return '; '.join('%s@%s (%s)' % c for c in EXTENDER_FIX_COMMITS + PLUGIN_FIX_COMMITS)


def _proxy_mode(config_text: Any) -> str:
    """mode: of a KubeProxyConfiguration (the kube-proxy ConfigMap's config.conf), '' when absent or unreadable."""
    if not config_text or not HAS_YAML:
        return ''
    try:
        conf = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return ''
    mode = conf.get('mode') if isinstance(conf, dict) else ''
    return mode if isinstance(mode, str) else ''


def extender_url(gs: dict[str, Any]) -> str:
    """The URL kube-scheduler must use for the extender (role kube_scheduler_extender's url_prefix)."""
    if gs['registration'] == 'cluster-ip':
        host, port = gs['extender_cluster_ip'], gs['extender_port']
    elif gs['registration'] == 'host-network':
        host, port = '127.0.0.1', gs['extender_port']
    else:
        host, port = '127.0.0.1', gs['extender_node_port']
    return 'http://%s:%d/gpushare-scheduler' % (host, port)


def _devices_per_node(facts_one: dict[str, Any] | None, unit: str) -> int:
    total = 0
    for g in (facts_one or {}).get('gpus') or []:
        mib = g.get('memory_total_mib') or 0
        total += mib if unit == 'MiB' else mib // 1024
    return total


def render(ctx: Ctx, settings: Settings, nodes: list[str], facts: dict[str, Any]) -> Rendered:
    gs = validate_settings(settings.get('gpushare'), GPUSHARE_SCHEMA, ctx.var('gpushare'))
    var = ctx.var('gpushare')
    bad = []
    for key, default, check in (('extender_image', EXTENDER_IMAGE, known_bad_extender),
                                ('device_plugin_image', PLUGIN_IMAGE, known_bad_plugin)):
        if not gs[key]:
            if not gs['accept_known_bad_images']:
                bad.append('%s.%s is not set and upstream\'s published image %s %s' % (var, key, default, check(default)))
            gs[key] = default
        elif check(gs[key]) and not gs['accept_known_bad_images']:
            bad.append('%s.%s %s: %s' % (var, key, gs[key], check(gs[key])))
    # removal renders the same objects to delete them, whatever images an earlier run deployed
    if bad and not ctx.removing:
        raise StackError('Refusing gpushare with known-bad images: %s. The fixes are upstream commits %s; %s. To deploy '
                         'the old images anyway, set %s.accept_known_bad_images: true.'
                         % ('; '.join(bad), fix_commits_text(), BUILD_HINT, var))
    for key, check in (('extender_image', known_bad_extender), ('device_plugin_image', known_bad_plugin)):
        reason = check(gs[key])
        if reason:
            ctx.warn('%s.%s %s is a known-bad image (accepted through accept_known_bad_images): %s. Fixed upstream in %s.'
                     % (var, key, gs[key], reason, fix_commits_text()))
    if gs['registration'] == 'cluster-ip':
        if not _IPV4.match(gs['extender_cluster_ip']):
            raise StackError('%s.registration cluster-ip needs %s.extender_cluster_ip, a free IPv4 address inside the '
                             'cluster\'s Service CIDR (kube-scheduler runs on the host network and cannot resolve '
                             'Service names); got %r' % (var, var, gs['extender_cluster_ip']))
    elif gs['extender_cluster_ip']:
        raise StackError('%s.extender_cluster_ip is only used with %s.registration cluster-ip; registration is %s'
                         % (var, var, gs['registration']))
    proxy_mode = (gs['kube_proxy_mode'] or _proxy_mode(gs['kube_proxy_config'])).strip().lower()
    if gs['registration'] == 'node-port' and proxy_mode in ('ipvs', 'nftables'):
        raise StackError('%s.registration node-port registers the extender at 127.0.0.1:%d, a NodePort that kube-proxy '
                         'in %s mode does not answer on the loopback address (this cluster\'s kube-proxy ConfigMap says '
                         'mode: %s); set %s.registration to host-network or cluster-ip'
                         % (var, gs['extender_node_port'], proxy_mode, proxy_mode, var))
    if gs['registration'] == 'host-network' and not gs['extender_host_network']:
        raise StackError('%s.registration host-network needs %s.extender_host_network: true' % (var, var))
    ext_image = ctx.image(gs['extender_image'], var + '.extender_image')
    plugin_image = ctx.image(gs['device_plugin_image'], var + '.device_plugin_image')
    if gs['memory_unit'] == 'MiB':
        sizes: list[tuple[int, str | None]] = [(_devices_per_node(facts.get(n), 'MiB'), n) for n in nodes]
        worst = max(sizes or [(0, None)])
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
    # exactly the calls the extender makes (GSH-11): its informers list/watch nodes, pods and configmaps; it gets,
    # patches (c0b6141) or updates (the published image, d170d8a) a pod and binds it. Upstream's ClusterRole also
    # grants nodes/configmaps get, events create/patch and `bindings` create, which no code path uses.
    out += rbac_for(ctx, ext, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['list', 'watch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['pods/binding'], 'verbs': ['create']},
        {'apiGroups': [''], 'resources': ['configmaps'], 'verbs': ['list', 'watch']},
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
    if gs['registration'] == 'host-network':
        # one extender on every control-plane node, so each kube-scheduler reaches its own on 127.0.0.1 whatever
        # kube-proxy's mode
        out.append(daemonset(ctx, ext, ext, spec, scope='shared'))
    else:
        out.append(deployment(ctx, ext, ext, spec, strategy='Recreate'))
    if gs['registration'] == 'cluster-ip':
        svc = {'type': 'ClusterIP', 'clusterIP': gs['extender_cluster_ip'],
               'ports': [{'name': 'http', 'port': gs['extender_port'], 'targetPort': gs['extender_port'], 'protocol': 'TCP'}]}
    elif gs['registration'] == 'node-port':
        svc = {'type': 'NodePort',
               'ports': [{'name': 'http', 'port': gs['extender_port'], 'targetPort': gs['extender_port'],
                          'nodePort': gs['extender_node_port'], 'protocol': 'TCP'}]}
    else:
        svc = None
    if svc:
        svc['selector'] = {'app.kubernetes.io/name': ext}
        out.append({'apiVersion': 'v1', 'kind': 'Service', 'metadata': ctx.meta(ext, scope='shared'), 'spec': svc})

    # device plugin: per pool
    dp = 'gpushare-device-plugin-' + ctx.pool
    out += rbac_for(ctx, dp, [
        {'apiGroups': [''], 'resources': ['nodes', 'nodes/proxy'], 'verbs': ['get', 'list', 'watch']},
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
    url = extender_url(gs)
    ctx.extender_url = url
    if gs['registration'] == 'node-port':
        ctx.note('gpushare: kube-scheduler reaches the extender at %s through kube-proxy answering NodePort %d on '
                 '127.0.0.1; that holds with kube-proxy in iptables mode only (not ipvs or nftables): there, set %s.'
                 'registration to host-network or cluster-ip.' % (url, gs['extender_node_port'], var))
    ctx.note('gpushare needs kube-scheduler configured with the extender url_prefix %s: role '
             'gpuops.k8s_gpu.kube_scheduler_extender writes that configuration.' % url)
    labels = dict((n, {NODE_LABEL: 'true'}) for n in nodes)
    return out, labels, [RESOURCE, RESOURCE_COUNT], {RESOURCE: '2'}


SETTINGS = {'gpushare': GPUSHARE_SCHEMA}

# What every gpushare pool of a cluster shares: the scheduler extender (Deployment, Service, RBAC) and its
# registration. Pools whose values of these differ are refused by the pools' plan.
SHARED = {'settings': 'gpushare',
          'keys': ('extender_image', 'registration', 'extender_cluster_ip', 'extender_host_network',
                   'extender_node_port', 'extender_port', 'extender_node_affinity', 'log_level'),
          'pool_variables': ('gpu_sharing_stack_namespace', 'gpu_sharing_stack_registry',
                             'gpu_sharing_stack_image_pull_secrets'),
          'objects': "gpushare's scheduler extender (gpushare-schd-extender and its registration)"}


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS)."""
    manifests, labels, resources, limits = render(ctx, settings, nodes, facts)
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits}


# kube-proxy's configuration (namespace, ConfigMap, key): its mode decides the extender's node-port registration
KUBE_PROXY = ('kube-system', 'kube-proxy', 'config.conf')


class GpushareStack(Stack):
    """gpushare: the scheduler extender every gpushare pool shares (SHARED); its device plugin selects the node label
    gpushare=true; the render reads kube-proxy's mode for the extender's node-port registration; the validation
    workload is the binpack sample (several replicas on one GPU)."""
    shared = SHARED
    pool_node_labels = {NODE_LABEL: 'true'}

    def __init__(self, name: str) -> None:
        super(GpushareStack, self).__init__(name)
        self.shared_module = sys.modules[__name__]

    def live_queries(self, settings: dict, present: bool, namespace: str) -> list[dict]:
        gpushare = settings_of(settings, 'gpushare')
        if present and (gpushare.get('registration') or 'node-port') == 'node-port' \
                and not gpushare.get('kube_proxy_mode'):
            return [{'key': 'kube_proxy', 'kind': 'ConfigMap', 'name': KUBE_PROXY[1], 'namespace': KUBE_PROXY[0]}]
        return []

    def merge_objects(self, settings: dict, objects: dict, namespace: str, var: str) -> None:
        if objects.get('kube_proxy'):
            data = objects['kube_proxy'][0].get('data') or {}
            settings['gpushare'] = dict(settings_of(settings, 'gpushare'), kube_proxy_config=data.get(KUBE_PROXY[2]) or '')

    def validation(self, ctx: Any, settings: dict, limits: dict, scheduler_name: str | None, val: dict, image: str,
                   runtime_class_name: str, claim_api_version: str | None = None) -> list[dict] | None:
        # the seeds' binpack sample: several replicas sharing one GPU through aliyun.com/gpu-mem
        spec = {'nodeSelector': ctx.pool_selector(),
                'tolerations': [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}],
                'containers': [{'name': 'binpack', 'image': image,
                                'resources': {'limits': dict((k, quantity(v)) for k, v in limits.items())}}]}
        if runtime_class_name:
            spec['runtimeClassName'] = runtime_class_name
        if ctx.image_pull_secrets:
            spec['imagePullSecrets'] = ctx.pull_secrets()
        return [deployment(ctx, 'gpushare-binpack-' + ctx.pool, 'gpushare-binpack', spec, scope='validation',
                           namespace=val['namespace'], replicas=val['replicas'])]

    def accounting_conflicts(self, strategies: list[str], whole: list[str]) -> list[str]:
        out = []
        if whole:
            out.append('gpu-mem accounting (gpushare) and whole-GPU accounting (%s) on the same node: both '
                       'schedulers hand out the same GPUs' % ', '.join(whole))
        if 'hami' in strategies:
            out.append('HAMi vGPU accounting and gpushare gpu-mem accounting on the same node')
        return out


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry)."""
    return GpushareStack(name)
