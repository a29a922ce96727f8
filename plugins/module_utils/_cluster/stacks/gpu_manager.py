# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tkestack gpu-manager (unmaintained upstream) with its scheduler extender gpu-admission, behind an acknowledgement.

gpu-manager (tkestack/gpu-manager v1.1.5) allocates only what gpu-admission (tkestack/gpu-admission, master
47d56ae99ef7f24f2c9c4d33d17567e2e52f3ba2, untagged) wrote into the pod's annotations at filter time, so the two are
rendered together: the gpu-manager DaemonSet with the RBAC its code calls, gpu-admission (DaemonSet on the
control-plane nodes on the host network, or Deployment + Service with a fixed cluster IP) with the RBAC its code calls,
and the extender entry for role kube_scheduler_extender.  Both projects are unmaintained: deploying is refused unless
gpu_sharing_stack_gpu_manager.accept_unmaintained is true, and the refusal names HAMi as the way out.  Every rule, flag
and verb is a row of docs/conformance/gpu-manager.md.
"""

from __future__ import annotations

from typing import Any
import re
import sys

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    CONTROL_PLANE_TOLERATIONS, GPU_TOLERATION, StackError, daemonset, deployment, hostpath_volume, node_name_env,
    pod_spec_common, rbac_for, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Manifest, Rendered, Settings

# upstream's git tags are vX.Y.Z, but hack/build.sh tags the image with the VERSION file's content, which has no v
# (VERSION at v1.1.5 is 1.1.5; gpu-manager.yaml there names tkestack/gpu-manager:1.0.3)
IMAGE = pins.ref('gpu-manager')
NODE_LABEL = 'nvidia-device-enable'
RESOURCES = gpu_strategy.strategy('gpu-manager')['resources']  # the strategy model's
# gpu-admission's master (it has no tags); upstream publishes no image (deploy/gpu-admission.yaml names an internal
# gpu-admission-tke:36), its Dockerfile installs /usr/bin/gpu-admission and listens on 3456
ADMISSION_COMMIT = '47d56ae99ef7f24f2c9c4d33d17567e2e52f3ba2'
ADMISSION_BINARY = '/usr/bin/gpu-admission'
ADMISSION_PORT = 3456
# pkg/route/routes.go: POST /scheduler/predicates is the only extender route (no prioritize, no bind)
ADMISSION_PATH = '/scheduler'
ADMISSION_FILTER_VERB = 'predicates'
REGISTRATIONS = ('host-network', 'cluster-ip')
# gpu-manager v1.1.5 defaults to /var/run/dockershim.sock (cmd/manager/options/options.go), gone with Kubernetes 1.24;
# /var/run is mounted from the host, so containerd's socket is reachable there
RUNTIME_ENDPOINT = '/var/run/containerd/containerd.sock'

HAMI_WAY_OUT = ('gpu_sharing_stack_strategy: hami, which offers the same vGPU memory/core split (nvidia.com/gpumem, '
                'nvidia.com/gpucores), needs no extra scheduler extender and is maintained')
REFUSAL = ('gpu_sharing_stack_strategy gpu-manager is refused without %s.accept_unmaintained: true: tkestack '
           'gpu-manager (last release v1.1.5, 2021) and its scheduler extender gpu-admission (no release, last commit '
           '2020) are unmaintained upstream; gpu-manager talks CRI v1alpha2 only (containerd 1.6/1.7, not 2.x) and '
           'allocates nothing unless gpu-admission is registered with kube-scheduler. The way out is ' + HAMI_WAY_OUT +
           '. Sites that still run gpu-manager set %s.accept_unmaintained: true and %s.admission_image (gpu-admission '
           'built from tkestack/gpu-admission ' + ADMISSION_COMMIT + ', upstream publishes no image). An existing '
           'gpu-manager pool can also be removed with gpu_sharing_stack_state: absent.')
DEPRECATION = ('gpu-manager (tkestack) and gpu-admission are unmaintained upstream and deployed only because '
               '%s.accept_unmaintained is true: plan a move to ' + HAMI_WAY_OUT + '.')

GPU_MANAGER_SCHEMA = {
    'accept_unmaintained': dict(type=bool, default=False,
                                description='Acknowledge that gpu-manager and gpu-admission are unmaintained upstream; without it the strategy is refused.'),
    'image': dict(type=str, default=IMAGE, description='gpu-manager image.'),
    'log_level': dict(type=int, default=4, min=0, max=10, description='Log level (LOG_LEVEL, gpu-manager --v).'),
    'extra_flags': dict(type=str, default='--logtostderr=false',
                        description='More gpu-manager flags (EXTRA_FLAGS; the runtime endpoint and cgroup driver flags follow them).'),
    'container_runtime_endpoint': dict(type=str, default=RUNTIME_ENDPOINT,
                                       description="CRI socket gpu-manager talks to (CRI v1alpha2 only - containerd 1.6/1.7, not 2.x); upstream's default "
                                                   "is dockershim's."),
    'cgroup_driver': dict(type=str, default='systemd', choices=['systemd', 'cgroupfs'],
                          description="Must match the kubelet's cgroup driver (kubeadm's default is systemd)."),
    'admission_image': dict(type=str, default='',
                            description=('gpu-admission image built from tkestack/gpu-admission 47d56ae99ef7f24f2c9c4d33d17567e2e52f3ba2 (upstream '
                                         'publishes none).',
                                         'Required to deploy.')),
    'admission_registration': dict(type=str, default='host-network', choices=list(REGISTRATIONS),
                                   description=("V(host-network) - a DaemonSet on every control-plane node on the host network, URL "
                                                "C(http://127.0.0.1:3456/scheduler) (upstream's).",
                                                'V(cluster-ip) - a Deployment and a Service with the fixed address C(admission_cluster_ip).')),
    'admission_cluster_ip': dict(type=str, default='',
                                 description='With V(cluster-ip), a free IPv4 address in the Service CIDR (kube-scheduler cannot resolve Service names).'),
    'admission_port': dict(type=int, default=ADMISSION_PORT, min=1, max=65535, description='Port gpu-admission listens on.'),
    'admission_log_level': dict(type=int, default=4, min=0, max=10, description='gpu-admission --v.'),
}
_IPV4 = re.compile(r'^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$')

# What the code at the tags calls (docs/conformance/gpu-manager.md GPUM-04..GPUM-11); nothing more.
GPU_MANAGER_RULES = [
    # watchdog/label.go: Nodes().Get + Nodes().Update of its own node (labels), at start
    {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'update']},
    # watchdog/watchdog.go: pod informer (list, watch) on spec.nodeName; allocator.go: Pods().List/Get/Patch/Delete
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'patch', 'delete']},
    # allocator.go updatePodStatus: Pods().UpdateStatus
    {'apiGroups': [''], 'resources': ['pods/status'], 'verbs': ['update']},
]
ADMISSION_RULES = [
    # predicate/gpu_predicate.go: node and pod informers (list, watch), Pods().Patch of the predicate annotations
    {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['list', 'watch']},
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list', 'watch', 'patch']},
]


def admission_url(gm: dict[str, Any]) -> str:
    """The urlPrefix kube-scheduler must use for gpu-admission."""
    host = gm['admission_cluster_ip'] if gm['admission_registration'] == 'cluster-ip' else '127.0.0.1'
    return 'http://%s:%d%s' % (host, gm['admission_port'], ADMISSION_PATH)


def extender_entry(gm: dict[str, Any]) -> dict[str, Any]:
    """gpu-admission's entry for kube_scheduler_extender_extenders (module kube_scheduler_config's extenders)."""
    return {
        'url_prefix': admission_url(gm),
        'filter_verb': ADMISSION_FILTER_VERB,
        # the filter reads node capacity from the node objects kube-scheduler sends (build/scheduler-policy-config.json
        # sets nodeCacheCapable false)
        'node_cache_capable': False,
        'managed_resources': [{'name': r, 'ignored_by_scheduler': False} for r in RESOURCES],
        # upstream's policy leaves ignorable unset (false): a vcuda pod must not be bound without gpu-admission
        'ignorable': False,
    }


def _admission(ctx: Ctx, gm: dict[str, Any], var: str) -> list[Manifest]:
    name = 'gpu-admission'
    out = rbac_for(ctx, name, ADMISSION_RULES, scope='shared')
    # removal deletes by name: an earlier run's image need not be known
    image = ctx.image(gm['admission_image'] or 'docker.io/tkestack/gpu-admission:unset', var + '.admission_image')
    host_network = gm['admission_registration'] == 'host-network'
    listen = '%s:%d' % ('127.0.0.1' if host_network else '0.0.0.0', gm['admission_port'])
    container: dict[str, Any]
    container = {'name': name, 'image': image,
                 'command': [ADMISSION_BINARY, '--address=' + listen, '--v=%d' % gm['admission_log_level'],
                             '--logtostderr=true'],
                 'ports': [{'name': 'http', 'containerPort': gm['admission_port'], 'protocol': 'TCP'}],
                 'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}}}
    spec: dict[str, Any] = {'serviceAccountName': name, 'priorityClassName': 'system-cluster-critical',
                            'containers': [container]}
    pod_spec_common(ctx, spec, CONTROL_PLANE_TOLERATIONS)
    if host_network:
        # kube-scheduler runs on the host network of each control-plane node and calls 127.0.0.1:3456 (upstream's
        # scheduler-policy-config.json): one gpu-admission on every control-plane node, as upstream's hostNetwork Pod
        spec['hostNetwork'] = True
        spec['dnsPolicy'] = 'ClusterFirstWithHostNet'
        spec['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
            {'matchExpressions': [{'key': 'node-role.kubernetes.io/control-plane', 'operator': 'Exists'}]},
            {'matchExpressions': [{'key': 'node-role.kubernetes.io/master', 'operator': 'Exists'}]},
            {'matchExpressions': [{'key': 'node-role.kubernetes.io/controlplane', 'operator': 'In', 'values': ['true']}]},
        ]}}}
        out.append(daemonset(ctx, name, name, spec, scope='shared'))
    else:
        out.append(deployment(ctx, name, name, spec, strategy='Recreate'))
        out.append({'apiVersion': 'v1', 'kind': 'Service', 'metadata': ctx.meta(name, scope='shared'),
                    'spec': {'type': 'ClusterIP', 'clusterIP': gm['admission_cluster_ip'],
                             'selector': {'app.kubernetes.io/name': name},
                             'ports': [{'name': 'http', 'port': gm['admission_port'], 'targetPort': gm['admission_port'],
                                        'protocol': 'TCP'}]}})
    return out


def render(ctx: Ctx, settings: Settings, nodes: list[str], facts: dict[str, Any]) -> Rendered:
    var = ctx.var('gpu_manager')
    gm = validate_settings(settings.get('gpu_manager'), GPU_MANAGER_SCHEMA, var)
    if not ctx.removing:
        if not gm['accept_unmaintained']:
            raise StackError(REFUSAL % (var, var, var))
        if not gm['admission_image']:
            raise StackError('%s.admission_image is required: gpu-manager allocates nothing without its scheduler '
                             'extender gpu-admission, and upstream publishes no gpu-admission image (deploy/'
                             'gpu-admission.yaml names an internal gpu-admission-tke:36). Build it from tkestack/'
                             'gpu-admission %s with its Dockerfile and name it here; or move to %s.'
                             % (var, ADMISSION_COMMIT, HAMI_WAY_OUT))
        if gm['admission_registration'] == 'cluster-ip':
            if not _IPV4.match(gm['admission_cluster_ip']):
                raise StackError('%s.admission_registration cluster-ip needs %s.admission_cluster_ip, a free IPv4 '
                                 'address inside the cluster\'s Service CIDR (kube-scheduler runs on the host network '
                                 'and cannot resolve Service names); got %r' % (var, var, gm['admission_cluster_ip']))
        elif gm['admission_cluster_ip']:
            raise StackError('%s.admission_cluster_ip is only used with %s.admission_registration cluster-ip; '
                             'admission_registration is %s' % (var, var, gm['admission_registration']))
        ctx.warn(DEPRECATION % var)
    image = ctx.image(gm['image'], var + '.image')
    name = 'gpu-manager-' + ctx.pool
    out = rbac_for(ctx, name, GPU_MANAGER_RULES)
    # upstream gpu-manager.yaml: container path, host path, hostPath type
    mounts = [('device-plugin', '/var/lib/kubelet/device-plugins', '/var/lib/kubelet/device-plugins', 'Directory'),
              ('vdriver', '/etc/gpu-manager/vdriver', '/etc/gpu-manager/vdriver', 'DirectoryOrCreate'),
              ('vmdata', '/etc/gpu-manager/vm', '/etc/gpu-manager/vm', 'DirectoryOrCreate'),
              ('log', '/var/log/gpu-manager', '/etc/gpu-manager/log', 'DirectoryOrCreate'),
              ('checkpoint', '/etc/gpu-manager/checkpoint', '/etc/gpu-manager/checkpoint', 'DirectoryOrCreate'),
              ('run-dir', '/var/run', '/var/run', 'Directory'),
              ('cgroup', '/sys/fs/cgroup', '/sys/fs/cgroup', 'Directory'),
              ('usr-directory', '/usr/local/host', '/usr', 'Directory')]
    # build/start.sh passes $EXTRA_FLAGS last to gpu-manager: the runtime endpoint and cgroup driver go there
    flags = ' '.join(f for f in (gm['extra_flags'].strip(),
                                 '--container-runtime-endpoint=%s' % gm['container_runtime_endpoint'],
                                 '--cgroup-driver=%s' % gm['cgroup_driver']) if f)
    container: dict[str, Any] = {'name': 'gpu-manager', 'image': image,
                                 'env': [{'name': 'LOG_LEVEL', 'value': str(gm['log_level'])},
                                         {'name': 'EXTRA_FLAGS', 'value': flags}, node_name_env()],
                                 'ports': [{'name': 'metrics', 'containerPort': 5678, 'protocol': 'TCP'}],
                                 'securityContext': {'privileged': True},
                                 'volumeMounts': [{'name': n, 'mountPath': p} for n, p, dummy, dummy2 in mounts]}
    container['volumeMounts'][6]['readOnly'] = True
    container['volumeMounts'][7]['readOnly'] = True
    selector = ctx.pool_selector()
    selector[NODE_LABEL] = 'enable'
    spec = {'serviceAccountName': name, 'priorityClassName': 'system-node-critical', 'hostPID': True,
            'nodeSelector': selector, 'containers': [container],
            'volumes': [hostpath_volume(n, h, t) for n, dummy, h, t in mounts]}
    # upstream tolerates its own tencent.com/vcuda-core taint; the collection's GPU taint too
    pod_spec_common(ctx, spec, [GPU_TOLERATION, {'key': 'tencent.com/vcuda-core', 'operator': 'Exists',
                                                 'effect': 'NoSchedule'}])
    out.append(daemonset(ctx, name, 'gpu-manager', spec))
    out += _admission(ctx, gm, var)
    entry = extender_entry(gm)
    ctx.extender_url = entry['url_prefix']
    ctx.extender = entry
    if not ctx.removing:
        ctx.note('gpu-manager allocates only for pods gpu-admission filtered: register it with kube-scheduler through '
                 'role gpuops.k8s_gpu.kube_scheduler_extender with the returned extender (url_prefix %s, filter_verb '
                 '%s, no bind_verb, node_cache_capable false, managed_resources %s, ignorable false).'
                 % (entry['url_prefix'], ADMISSION_FILTER_VERB, ' and '.join(RESOURCES)))
        ctx.note('gpu-manager v1.1.5 talks CRI v1alpha2 to %s: containerd 1.6/1.7 serve it, containerd 2.x does not; '
                 'its --cgroup-driver (%s) must match the kubelet\'s.'
                 % (gm['container_runtime_endpoint'], gm['cgroup_driver']))
    labels = dict((n, {NODE_LABEL: 'enable'}) for n in nodes)
    return out, labels, list(RESOURCES), {'tencent.com/vcuda-core': '50', 'tencent.com/vcuda-memory': '4'}


SETTINGS = {'gpu_manager': GPU_MANAGER_SCHEMA}

# What every gpu-manager pool of a cluster shares: gpu-admission (Deployment, Service, RBAC) and its registration.
SHARED = {'settings': 'gpu_manager',
          'keys': ('admission_image', 'admission_registration', 'admission_cluster_ip', 'admission_port',
                   'admission_log_level'),
          'pool_variables': ('gpu_sharing_stack_namespace', 'gpu_sharing_stack_registry',
                             'gpu_sharing_stack_image_pull_secrets'),
          'objects': "gpu-admission, gpu-manager's scheduler extender"}


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS)."""
    manifests, labels, resources, limits = render(ctx, settings, nodes, facts)
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits}


class GpuManagerStack(Stack):
    """gpu-manager: gpu-admission, which every gpu-manager pool shares (SHARED)."""
    shared = SHARED

    def __init__(self, name: str) -> None:
        super(GpuManagerStack, self).__init__(name)
        self.shared_module = sys.modules[__name__]

    def migration_labels(self) -> dict[str, str]:
        # render above: the label gpu-manager's DaemonSet selects
        return {NODE_LABEL: 'enable'}


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry)."""
    return GpuManagerStack(name)
