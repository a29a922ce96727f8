# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dynamic Resource Allocation with NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu): the Helm
values of the driver's chart per release, its feature gates, the Kubernetes window, the checks that keep it off the
nodes of the GPU device plugin, and what users write (ResourceClaimTemplates that select devices with CEL).

Every fact here was read at the chart release named in CHARTS (docs/conformance/dra-driver-nvidia-gpu.md, rows DRA-*).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
import json
import re

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, kube_versions, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.containerd_cdi import CDI_MIN, cdi_supported
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    GPU_TOLERATION, MANAGED_BY, POOL_LABEL, SCOPE_LABEL, SHARED_USER_PREFIX, STACK_LABEL, StackError, chart_family,
    chart_yaml_version, check_name, split_image, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Manifest, Settings
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.operator import (
    leaf_paths,
)

# The driver's name (its home: gpu_strategy), the API group of its opaque claim configuration and its kinds
# (api/nvidia.com/resource/v1beta1 api.go: GroupName, Version, GpuConfigKind, MigDeviceConfigKind; DRA-05).
DRIVER = gpu_strategy.NVIDIA_DRA_DRIVER
CONFIG_API_VERSION = 'resource.nvidia.com/v1beta1'
GPU_CONFIG = 'GpuConfig'
MIG_CONFIG = 'MigDeviceConfig'
# The DeviceClasses the chart creates (templates/deviceclass-*.yaml), by the values switch that creates them (DRA-04).
# The collection renders none of them: the chart owns them, and its uninstall removes them.
CHART_DEVICE_CLASSES = {
    'gpu.nvidia.com': 'resources.gpus.enabled',
    'mig.nvidia.com': 'resources.gpus.enabled',
    'vfio.gpu.nvidia.com': 'resources.gpus.enabled',
    'compute-domain-daemon.nvidia.com': 'resources.computeDomains.enabled',
    'compute-domain-default-channel.nvidia.com': 'resources.computeDomains.enabled',
}
GPU_CLASS = 'gpu.nvidia.com'
MIG_CLASS = 'mig.nvidia.com'

# The attributes the kubelet plugin publishes for a full GPU and a MIG device (cmd/gpu-kubelet-plugin deviceinfo.go
# GpuInfo.Attributes, mig.go CommonAttributesMig; DRA-06), with their DeviceAttribute type, and the capacity that
# carries the device memory in bytes ('memory', partitions.go fullGpuCapacity, mig.go CommonCapacitiesMig). No GPU
# index is published as an attribute: a GPU is named gpu-<minor> in the ResourceSlice, which CEL cannot read; select
# one GPU by its uuid.
GPU_ATTRIBUTES = {'type': 'string', 'uuid': 'string', 'productName': 'string', 'brand': 'string',
                  'architecture': 'string', 'cudaComputeCapability': 'version', 'driverVersion': 'version',
                  'cudaDriverVersion': 'version'}
MIG_ATTRIBUTES = dict(GPU_ATTRIBUTES, parentUUID='string', profile='string')
MEMORY_CAPACITY = 'memory'

# The driver's feature gates at each chart release (pkg/featuregates/featuregates.go; DRA-03): name -> (pre-release,
# default); the pairs ValidateFeatureGates refuses together, and the gates another one needs.
_GATES_0_5 = {
    'TimeSlicingSettings': ('alpha', False), 'MPSSupport': ('alpha', False),
    'IMEXDaemonsWithDNSNames': ('beta', True), 'PassthroughSupport': ('alpha', False),
    'NVMLDeviceHealthCheck': ('alpha', False), 'DynamicMIG': ('alpha', False),
    'ComputeDomainCliques': ('beta', True), 'CrashOnNVLinkFabricErrors': ('beta', True),
    'DeviceMetadata': ('alpha', False), 'FabricManagerPartitioning': ('alpha', False),
    'HostManagedIMEXDaemon': ('alpha', False), 'DRAListTypeAttributes': ('alpha', False),
    'ConsumableShares': ('alpha', False),
}
CHARTS: dict[tuple[int, int], dict[str, Any]] = {
    (0, 5): {
        'tag': 'v0.5.0',
        # Chart.yaml kubeVersion ">=1.32.0-0" (DRA-02)
        'kube_min_minor': 32,
        # values.yaml image.repository; image.tag empty means "v" + appVersion (templates/_helpers.tpl fullimage)
        'image_repository': 'registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu',
        'gates': _GATES_0_5,
        'exclusive': (('DynamicMIG', 'PassthroughSupport'), ('DynamicMIG', 'NVMLDeviceHealthCheck'),
                      ('DynamicMIG', 'MPSSupport'), ('PassthroughSupport', 'NVMLDeviceHealthCheck')),
        'requires': (('ComputeDomainCliques', 'IMEXDaemonsWithDNSNames'), ('DeviceMetadata', 'PassthroughSupport')),
    },
}
CURRENT_CHART = pins.tag('dra-driver-nvidia-gpu')
IMAGE = pins.ref('dra-driver-nvidia-gpu-image')

# The resource.k8s.io version each Kubernetes minor serves newest (k8s.io/api v0.33.0 has resource/v1beta2 and no v1,
# v0.34.4 has resource/v1), and the minor from which DRA is on by default (k8s.io/kubernetes v1.34.4
# pkg/features/kube_features.go DynamicResourceAllocation: beta and off by default from 1.32, GA and on from 1.34;
# DRA-09). The chart's resourceApiVersion is set from it, so helm template renders what helm install would.
DRA_GA_MINOR = 34
RESOURCE_API = ((34, 'resource.k8s.io/v1'), (33, 'resource.k8s.io/v1beta2'), (32, 'resource.k8s.io/v1beta1'))
# Extended resources backed by DRA (KEP-5004): the feature gate DRAExtendedResource per minor, from its history in
# k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go (alpha and off from 1.34, beta and on from 1.36, GA and
# locked on from 1.37) and v1.34.4 (alpha, off); absent before 1.34 (v1.33.13 has no such gate). Read on the lab's
# real API servers (kubernetes_feature_enabled): 1.37.2 stage "" (GA) 1, 1.34.4 ALPHA 0, and there 1.34 drops
# spec.extendedResourceName from a DeviceClass on create (DRAX-01, DRAX-02). (first minor, stage, on by default).
EXTENDED_RESOURCE_GATE = 'DRAExtendedResource'
EXTENDED_RESOURCE_STAGES = ((37, 'GA', True), (36, 'beta', True), (34, 'alpha', False))
# The chart's own mapping: templates/deviceclass-gpu.yaml at v0.5.0 gives gpu.nvidia.com extendedResourceName
# nvidia.com/gpu whenever the DeviceClass apiVersion is resource.k8s.io/v1 (DRA-11); no value of values.yaml switches
# it off. So the collection renders no class of its own for it (two classes would map one name: the scheduler takes
# the newest, dynamic-resource-allocation v0.37.2 deviceclass/extendedresourcecache, and the API server accepts both).
CHART_EXTENDED_RESOURCES = {'nvidia.com/gpu': GPU_CLASS}
EXTENDED_KINDS = ('gpu', 'time-slicing', 'mps', 'mig')
MIG_RESOURCE_PREFIX = 'nvidia.com/mig-'

# The one version above whose DeviceRequest is flat (k8s.io/api v0.32.0 resource/v1beta1 types.go DeviceRequest:
# deviceClassName, selectors, allocationMode, count beside name); v1beta2 (v0.33.0) and v1 (v0.34.4) nest them under
# exactly (ExactDeviceRequest). DRA-13.
RESOURCE_API_FLAT = 'resource.k8s.io/v1beta1'
RESOURCE_API_V1 = RESOURCE_API[0][1]

# Value paths this renderer may set (every one is read by the chart's templates at the releases above, DRA-01);
# checked on every render.
DOCUMENTED_VALUE_KEYS = frozenset([
    'gpuResourcesEnabledOverride', 'resources.gpus.enabled', 'resources.computeDomains.enabled', 'nvidiaDriverRoot',
    'image.repository', 'imagePullSecrets', 'featureGates', 'resourceApiVersion', 'kubeletPlugin.nodeSelector',
    'kubeletPlugin.affinity', 'kubeletPlugin.tolerations', 'logVerbosity',
])

DRA_SCHEMA: dict[str, dict[str, Any]] = {
    'chart_path': dict(type=str, default='', description=(
        'Local chart (.tgz or directory) on the controller; required for this strategy.',)),
    'chart_version': dict(type=str, default='', description=(
        "Chart release (v0.5.x); empty to read the chart's Chart.yaml. Values are emitted per release.")),
    'release_name': dict(type=str, default='dra-driver-nvidia-gpu', description='Helm release name.'),
    'namespace': dict(type=str, default='dra-driver-nvidia-gpu', description=(
        'Release namespace (the chart refuses C(default)).')),
    'driver_root': dict(type=str, default='/', description=(
        'Where the NVIDIA driver is on the nodes (chart value C(nvidiaDriverRoot)) - V(/) for a driver installed on the'
        " host (role nvidia_driver), C(/run/nvidia/driver) for the GPU operator's driver container.",)),
    'feature_gates': dict(type=dict, default={}, description=(
        "The driver's feature gates, name to V(true)/V(false) (chart value C(featureGates)). Unknown gates, mutually "
        'exclusive gates (C(DynamicMIG) with C(MPSSupport), C(PassthroughSupport) or C(NVMLDeviceHealthCheck); '
        'C(PassthroughSupport) with C(NVMLDeviceHealthCheck)) and a gate without the one it needs are refused; alpha '
        'gates switched on are warned about.',
        'Time-slicing claims need C(TimeSlicingSettings), MPS claims C(MPSSupport) (both alpha in v0.5.0).',)),
    'compute_domains': dict(type=bool, default=False, description=(
        "Also enable the driver's ComputeDomains (IMEX, multi-node NVLink); off by default.")),
    'kube_version': dict(type=str, default='', description=(
        "The cluster's Kubernetes version; empty to read it from the API server.")),
    'kube_dra_enabled': dict(type=bool, default=False, description=(
        'On Kubernetes 1.32 or 1.33, V(true) says the cluster runs DRA - the C(DynamicResourceAllocation) feature gate '
        'on for kube-apiserver, kube-controller-manager, kube-scheduler and every kubelet, and kube-apiserver serving '
        'C(resource.k8s.io/v1beta1) (1.32) or C(v1beta2) (1.33) through C(--runtime-config). Refused without it there.',)),
    'assume_cdi_enabled': dict(type=bool, default=False, description=(
        "Do not check the nodes' C(nvidia_container_runtime_cdi) (the runtime has CDI on by other means).")),
    'claim_templates': dict(type=list, default=[], elements='dict', description=(
        'ResourceClaimTemplates to render into O(gpu_sharing_stack_dra.claim_namespace), each a dict with C(name), '
        'C(kind) (V(gpu), V(mig), V(time-slicing), V(mps)), C(count), the CEL selectors C(product_name), '
        'C(architecture), C(min_memory), C(mig_profile), C(uuid), and C(interval) (time-slicing), '
        'C(mps_active_thread_percentage), C(mps_pinned_memory_limit) (mps), C(shared) (a ResourceClaim that several '
        'pods share instead of a template). Or, instead of the device keys, C(first_available): a list of 1 to 8 '
        'such device specs (each with an optional C(name)), prioritized alternatives the scheduler takes the first of '
        'that it can allocate (e.g. a 1g.10gb MIG device, else a time-sliced GPU; Kubernetes 1.34+). See '
        'docs/sharing_stacks.md.',)),
    'claim_namespace': dict(type=str, default='', description=(
        'Namespace of the rendered claim templates (it must exist).')),
    'log_verbosity': dict(type=int, default=None, min=0, max=7, description=(
        "The driver's log verbosity (chart value C(logVerbosity)); unset keeps the chart's default.")),
    'extended_resources': dict(type=list, default=[], elements='dict', description=(
        'Extended resources backed by DRA (Kubernetes KEP-5004, feature gate C(DRAExtendedResource), on by default '
        'from 1.36): one DeviceClass per entry whose C(extendedResourceName) is what the workloads already ask for, so '
        'a pod asking for it in C(resources.limits) gets a DRA device without a ResourceClaim in its spec. Each a dict '
        'with C(name) (the extended resource, e.g. V(nvidia.com/gpu.shared), V(nvidia.com/mig-1g.10gb)), C(kind) '
        '(V(gpu), V(time-slicing), V(mps), V(mig); V(mig) reads the profile from a V(nvidia.com/mig-<profile>) name '
        'unless C(mig_profile) is given), the CEL selectors C(product_name), C(architecture), C(min_memory), and '
        'C(interval) (time-slicing), C(mps_active_thread_percentage), C(mps_pinned_memory_limit) (mps) as the '
        "class's GpuConfig.",
        "V(nvidia.com/gpu) is refused here: the chart's own C(gpu.nvidia.com) class maps it (on resource.k8s.io/v1) "
        'and no chart value switches that off; two classes mapping one name are refused. Refused below Kubernetes '
        '1.36 (the gate is alpha and off on 1.34 and 1.35, absent before). See docs/sharing_stacks.md.',)),
    'workload_resources': dict(type=list, default=[], elements='str', description=(
        "The extended resources the pool's workloads ask for (e.g. V(nvidia.com/gpu), V(nvidia.com/gpu.shared)): "
        "each must be mapped by a class (the chart's C(gpu.nvidia.com) maps V(nvidia.com/gpu), "
        'O(gpu_sharing_stack_dra.extended_resources) the others), else the pool is refused before anything changes. '
        'Empty: not checked.',)),
    'resourceslice_policy': dict(type=bool, default=True, description=(
        "A ValidatingAdmissionPolicy of the collection's (cluster-wide, one per release namespace, kept while a dra "
        "pool uses it) that lets the release's kubelet plugin account (C(<fullname>-service-account-kubeletplugin)) "
        'create, update and delete only ResourceSlices of the node its token is bound to, or slices for all nodes or '
        "a node selector, as the chart means its own policy to: the chart's names another account and applies to "
        'nothing at v0.5.0 (kubernetes-sigs/dra-driver-nvidia-gpu issue 1317). V(false) renders none.',)),
    'accept_extended_resource_classes': dict(type=list, default=[], elements='str', description=(
        "DeviceClasses of the site's (neither the chart's nor the collection's) that may map an extended resource "
        "name the release or O(gpu_sharing_stack_dra.extended_resources) maps too (C(spec.extendedResourceName)), "
        'e.g. while workloads move from a class of the site to the chart\'s C(gpu.nvidia.com). Any other such class '
        'refuses the pool before anything changes: kube-scheduler backs the name with the newer of the two classes '
        '(creationTimestamp, then name), and on Kubernetes 1.36 and 1.37 (1.36.6 and 1.37.2 included) deleting '
        'either class drops its mapping of the name for both until the scheduler restarts (kubernetes/kubernetes'
        '#141103, fixed on master by #141110). An accepted class is named in the notes. See docs/sharing_stacks.md.',)),
}

# NVIDIA's GPU operator (NVIDIA/gpu-operator v26.7.0, controllers/state_manager.go gpuStateLabels, addGPUStateLabels;
# assets/state-device-plugin/0500_daemonset.yaml and state-mps-control-daemon/0400_daemonset.yaml nodeSelector): its
# device plugin and MPS control daemon run on nodes whose nvidia.com/gpu.deploy.device-plugin is "true", and the
# operator sets that label only where a node has none (or an empty value): a node that carries "false" keeps it and
# gets no device plugin from the operator. Every node of a dra pool carries it (DRA-12).
OPERATOR_DEVICE_PLUGIN_LABEL = 'nvidia.com/gpu.deploy.device-plugin'
OPERATOR_DEVICE_PLUGIN_OFF = 'false'

# The settings that go into the one Helm release every dra pool of a cluster shares (its DeviceClasses are cluster
# objects): the keys of gpu_sharing_stack_dra the values or the release come from, and the pool-level variables that
# enter the values (mirror, pull secrets, node selector). Two dra pools that differ in one of them are refused.
RELEASE_SETTINGS = ('chart_path', 'chart_version', 'release_name', 'namespace', 'driver_root', 'feature_gates',
                    'compute_domains', 'log_verbosity', 'kube_dra_enabled', 'extended_resources',
                    'resourceslice_policy')
RELEASE_POOL_VARIABLES = ('gpu_sharing_stack_registry', 'gpu_sharing_stack_image_pull_secrets',
                          'gpu_sharing_stack_node_selector')

CDI_SETTING = 'nvidia_container_runtime_cdi'


def chart_release(ds: dict[str, Any], var: str) -> tuple[tuple[int, int], str]:
    """(family key, version text) of the driver's chart: chart_version, else the chart's Chart.yaml."""
    text = ds['chart_version'] or chart_yaml_version(ds['chart_path']) or ''
    return chart_family(text, CHARTS, var, 'dra-driver-nvidia-gpu', CURRENT_CHART)


def feature_gates(gates: dict[str, Any] | None, chart: dict[str, Any], var: str,
                  warn: Callable[[str], None]) -> dict[str, bool]:
    """The featureGates value for the chart: the pool's settings checked against the release's gates. Unknown gates,
    mutually exclusive gates and a gate without the gate it needs are refused by name; alpha gates switched on are
    warned about by name. Only the gates the pool sets are passed on (the others keep the driver's default)."""
    known = chart['gates']
    out = {}
    for name in sorted(gates or {}):
        if name not in known:
            raise StackError('%s.feature_gates: %s is not a feature gate of dra-driver-nvidia-gpu %s; allowed: %s'
                             % (var, name, chart['tag'], ', '.join(sorted(known))))
        value = (gates or {})[name]
        if not isinstance(value, bool):
            raise StackError('%s.feature_gates.%s must be true or false; got %r' % (var, name, value))
        out[name] = value
    effective = dict((n, out.get(n, d)) for n, (dummy, d) in known.items())
    for a, b in chart['exclusive']:
        if effective[a] and effective[b]:
            raise StackError('%s.feature_gates: %s and %s are mutually exclusive in dra-driver-nvidia-gpu %s (the driver '
                             'refuses to start with both); switch one off' % (var, a, b, chart['tag']))
    for a, b in chart['requires']:
        if effective[a] and not effective[b]:
            raise StackError('%s.feature_gates: %s needs %s in dra-driver-nvidia-gpu %s (%s is %s); set %s: true or %s: '
                             'false' % (var, a, b, chart['tag'], b, 'off' if b in out else 'off by default', b, a))
    alpha = [n for n in sorted(out) if out[n] and known[n][0] == 'alpha']
    if alpha:
        warn('%s.feature_gates: %s %s alpha in dra-driver-nvidia-gpu %s (off by default; may change or go away in a '
             'later release)' % (var, ', '.join(alpha), 'is' if len(alpha) == 1 else 'are', chart['tag']))
    return out


def resource_api(minor: int) -> str | None:
    """The resource.k8s.io apiVersion a Kubernetes minor serves newest (None below 1.32)."""
    for first, api in RESOURCE_API:
        if minor >= first:
            return api
    return None


def kube_window(ds: dict[str, Any], var: str, chart: dict[str, Any], warn: Callable[[str], None],
                removing: bool = False) -> int | None:
    """The cluster's minor, checked against the DRA window: 1.34+ (DRA GA); 1.32/1.33 only with kube_dra_enabled (the
    cluster's DynamicResourceAllocation gates and runtime-config shown enabled); below the chart's kubeVersion
    refused. None while removing without a version."""
    text = ds['kube_version']
    if removing:
        # removal renders the same objects and refuses nothing about the cluster it is leaving
        parsed = kube_versions.parse(text, strict=False) if text else None
        return parsed[1] if parsed and parsed[0] == 1 and parsed[1] >= chart['kube_min_minor'] else None
    if not text:
        raise StackError('%s.kube_version is unknown: the role reads it from the cluster (k8s_objects_info version); '
                         'set it (e.g. v1.34.2) when the cluster cannot be read' % var)
    parsed = kube_versions.parse(text, strict=False)
    if not parsed or parsed[0] != 1:
        raise StackError('%s.kube_version must be a Kubernetes version (e.g. v1.34.2); got %r' % (var, text))
    minor = parsed[1]
    if minor < chart['kube_min_minor']:
        raise StackError('%s.kube_version %s: dra-driver-nvidia-gpu %s needs Kubernetes 1.%d or newer (its chart\'s '
                         'kubeVersion), and the collection runs DRA on 1.%d+ (1.%d-1.%d with %s.kube_dra_enabled); '
                         'allowed: 1.%d-1.%d' % (var, text, chart['tag'], chart['kube_min_minor'], DRA_GA_MINOR,
                                                 chart['kube_min_minor'], DRA_GA_MINOR - 1, var, chart['kube_min_minor'],
                                                 kube_versions.MAX_MINOR))
    if minor < DRA_GA_MINOR and not ds['kube_dra_enabled']:
        raise StackError('%s.kube_version %s: DRA is beta and off by default before Kubernetes 1.%d; set %s.kube_dra_enabled:'
                         ' true once the DynamicResourceAllocation feature gate is on for kube-apiserver, '
                         'kube-controller-manager, kube-scheduler and every kubelet, and kube-apiserver serves %s '
                         '(--runtime-config=%s=true); or move the cluster to 1.%d+'
                         % (var, text, DRA_GA_MINOR, var, resource_api(minor), resource_api(minor), DRA_GA_MINOR))
    if minor >= DRA_GA_MINOR and ds['kube_dra_enabled']:
        warn('%s.kube_dra_enabled has no effect on Kubernetes %s: DRA is GA and on from 1.%d' % (var, text, DRA_GA_MINOR))
    if minor > kube_versions.MAX_MINOR:
        warn('%s.kube_version %s is newer than the collection knows (1.%d); resource.k8s.io/v1 is assumed'
             % (var, text, kube_versions.MAX_MINOR))
    return minor


def containerd_without_cdi(nodes: list[str], facts: dict[str, Any] | None) -> list[str]:
    """'<node> runs containerd <version>' for each node whose probe facts (gpu_probe_facts: node.container_runtimes.
    containerd_version) name a containerd older than 1.7, which has no CDI (docs/conformance/containerd.md CTD-01)."""
    out = []
    for n in nodes:
        runtimes = (((facts or {}).get(n) or {}).get('node') or {}).get('container_runtimes') or {}
        version = runtimes.get('containerd_version')
        if version and cdi_supported(version) is False:
            out.append('%s runs containerd %s' % (n, version))
    return out


def check_cdi(ctx: Ctx, ds: dict[str, Any], nodes: list[str], cdi_enabled: dict[str, Any] | None,
              facts: dict[str, Any] | None = None) -> None:
    """The DRA driver's kubelet plugin hands devices to containers as CDI devices (it writes its specs into
    /var/run/cdi, CDI_ROOT of templates/kubeletplugin.yaml; DRA-07): the container runtime of every node must have CDI
    on, which role nvidia_container_runtime sets with nvidia_container_runtime_cdi. A node whose probe shows a
    containerd older than 1.7 cannot have it on at all and is refused whatever the variables say."""
    var = ctx.var('dra')
    old = containerd_without_cdi(nodes, facts)
    if old:
        raise StackError('strategy dra needs CDI in the container runtime of every node of pool %s (the DRA driver '
                         'hands devices to containers as CDI devices), and containerd has CDI from %d.%d on: %s '
                         '(gpu_probe_facts); upgrade containerd on %s to %d.%d or later (2.0+ enables CDI by default)'
                         % (ctx.pool, CDI_MIN[0], CDI_MIN[1], '; '.join(old),
                            'it' if len(old) == 1 else 'them', CDI_MIN[0], CDI_MIN[1]))
    if ds['assume_cdi_enabled']:
        ctx.warn('%s.assume_cdi_enabled is true: the nodes\' container runtimes are not checked for CDI' % var)
        return
    if not nodes:
        raise StackError('%s needs CDI in the container runtime of every node, and with %snodes empty no node can be '
                         'checked; list the pool\'s nodes, or set %s.assume_cdi_enabled: true'
                         % (var, ctx.var_prefix, var))
    known = cdi_enabled or {}
    off = [n for n in nodes if n in known and known[n] is not True]
    missing = [n for n in nodes if n not in known]
    problems = []
    for n in off:
        problems.append('%s has %s=%r (allowed: true)' % (n, CDI_SETTING, known[n]))
    if missing:
        problems.append('%s set no %s (allowed: true; playbooks/node.yml with it on enables CDI in containerd, rke2 '
                        'and k3s), or set %s.assume_cdi_enabled: true if the runtime has CDI on (containerd 2.0+ and '
                        'CRI-O, from 1.24 on without a switch, have it on by default)' % (', '.join(missing), CDI_SETTING, var))
    if problems:
        raise StackError('strategy dra needs CDI in the container runtime of every node of pool %s (the DRA driver '
                         'hands devices to containers as CDI devices): %s' % (ctx.pool, '; '.join(problems)))


def _image_values(ctx: Ctx, chart: dict[str, Any], version: str, var: str) -> dict[str, Any]:
    """image.repository through the mirror (the tag stays the chart's own, v + appVersion) and pull secrets."""
    values: dict[str, Any] = {}
    source = '%s:%s' % (chart['image_repository'], version)
    ref = ctx.image(source, var + '.image')
    if ctx.registry:
        host, path, dummy, dummy2 = split_image(ref)
        values['image'] = {'repository': '%s/%s' % (host, path) if host else path}
    if ctx.image_pull_secrets:
        values['imagePullSecrets'] = ctx.pull_secrets()
    return values


def render(ctx: Ctx, settings: Settings, nodes: list[str], facts: dict[str, Any],
           node_state: dict[str, dict[str, Any]] | None = None, live_nodes: list[Manifest] | None = None,
           cdi_enabled: dict[str, Any] | None = None, removing: bool = False,
           live_classes: list[Manifest] | None = None
           ) -> tuple[list[Manifest], dict[str, dict[str, str]], list[str], dict[str, Any], dict[str, Any], str]:
    """(manifests, labels, resources, limits, helm, claim_api_version) of a dra pool: the driver's Helm release (values
    for the chart release), the pool's ResourceClaimTemplates when the pool names a claim_namespace, and the
    resource.k8s.io version claims are rendered in (the cluster's minor; v1 while removing without a version).
    live_classes: the cluster's DeviceClasses (DEVICE_CLASS_QUERY; None: not read): a class of the site's mapping a
    name the release or the pool's classes map refuses the pool (removing: a warning, extended_resource_clashes)."""
    var = ctx.var('dra')
    ds = validate_settings(settings.get('dra'), DRA_SCHEMA, var)
    check_name(ds['namespace'], var + '.namespace')
    check_name(ds['release_name'], var + '.release_name')
    if ds['namespace'] == 'default':
        raise StackError('%s.namespace: the dra-driver-nvidia-gpu chart refuses the default namespace; use its own '
                         '(e.g. dra-driver-nvidia-gpu)' % var)
    if not ds['chart_path']:
        raise StackError('%s.chart_path must be the path of the dra-driver-nvidia-gpu chart on the controller (a .tgz '
                         'from "helm pull oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu --version '
                         '%s", or an unpacked chart directory)' % (var, CURRENT_CHART.lstrip('v')))
    if not ds['driver_root'].startswith('/'):
        raise StackError('%s.driver_root must be an absolute path (/ for a driver installed on the host, '
                         '/run/nvidia/driver for the GPU operator\'s driver container); got %r' % (var, ds['driver_root']))
    key, version = chart_release(ds, var)
    chart = CHARTS[key]
    gates = feature_gates(ds['feature_gates'], chart, var, ctx.warn)
    minor = kube_window(ds, var, chart, ctx.warn, removing)
    if not removing:
        check_device_plugin_nodes(ctx, nodes, node_state, live_nodes)
        check_cdi(ctx, ds, nodes, cdi_enabled, facts)
    values = {
        # the chart refuses resources.gpus.enabled without it (templates/validation.yaml, DRA-08): the collection
        # keeps the driver off every node of a device-plugin pool (check_device_plugin_nodes, the pools' plan)
        'gpuResourcesEnabledOverride': True,
        'resources': {'gpus': {'enabled': True}, 'computeDomains': {'enabled': ds['compute_domains']}},
        'nvidiaDriverRoot': ds['driver_root'],
        'kubeletPlugin': {
            # the chart's own affinity asks for NFD's or the GPU operator's labels; the strategy label of the dra
            # pools replaces it (one release serves every dra pool: the DeviceClasses are cluster objects)
            'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
                {'matchExpressions': [{'key': ctx.strategy_label, 'operator': 'In', 'values': ['dra']}]}]}}},
            'tolerations': [dict(GPU_TOLERATION)],
        },
    }
    if ctx.node_selector:
        values['kubeletPlugin']['nodeSelector'] = dict(ctx.node_selector)
    if minor is not None:
        values['resourceApiVersion'] = resource_api(minor)
    if gates:
        values['featureGates'] = gates
    if ds['log_verbosity'] is not None:
        values['logVerbosity'] = str(ds['log_verbosity'])
    values.update(_image_values(ctx, chart, version, var))
    undocumented = [p for p in leaf_paths(values) if p not in DOCUMENTED_VALUE_KEYS
                    and not p.startswith(('featureGates.', 'kubeletPlugin.affinity.', 'kubeletPlugin.nodeSelector.',
                                          'image.'))]
    if undocumented:
        raise StackError('internal: dra-driver-nvidia-gpu values %s are not in the documented key list'
                         % ', '.join(undocumented))
    # kube_window gives a minor of 1.32 or later (the chart's kubeVersion), which resource_api always answers
    claim_api = (resource_api(minor) if minor is not None else None) or RESOURCE_API[0][1]
    manifests = []
    if ds['claim_templates']:
        if not ds['claim_namespace']:
            raise StackError('%s.claim_templates needs %s.claim_namespace (the namespace of the workloads that use them)'
                             % (var, var))
        check_name(ds['claim_namespace'], var + '.claim_namespace')
        enabled = dict((n, gates.get(n, d)) for n, (dummy, d) in chart['gates'].items())
        for obj in claim_templates(ds['claim_templates'], ds['claim_namespace'], gates=enabled,
                                   api_version=claim_api, var=var + '.claim_templates'):
            meta = ctx.meta(obj['metadata']['name'], namespace=ds['claim_namespace'])
            obj['metadata'] = meta
            manifests.append(obj)
    if ds['extended_resources'] or ds['workload_resources']:
        enabled = dict((n, gates.get(n, d)) for n, (dummy, d) in chart['gates'].items())
        # removal renders the same classes (to delete them) and refuses nothing about the cluster it is leaving
        for obj in extended_resource_classes(ds['extended_resources'], gates=None if removing else enabled,
                                             minor=None if removing else minor,
                                             workload=() if removing else ds['workload_resources'],
                                             var=var + '.extended_resources',
                                             workload_var=var + '.workload_resources'):
            obj['metadata'] = ctx.meta(obj['metadata']['name'], namespace=False, scope='shared')
            manifests.append(obj)
    if live_classes is not None:
        ours = dict((n, ('%s dra (its chart\'s DeviceClass %s maps %s on resource.k8s.io/v1; no chart value switches '
                         'that off)' % (ctx.var('strategy'), c, n), c)) for n, c in CHART_EXTENDED_RESOURCES.items())
        for i, m in enumerate(m for m in manifests if m['kind'] == 'DeviceClass'):
            ours[m['spec']['extendedResourceName']] = ('%s.extended_resources[%d]' % (var, i), m['metadata']['name'])
        accept_var = var + '.accept_extended_resource_classes'
        clashes, taken = extended_resource_clashes(live_classes, ours, ds['accept_extended_resource_classes'],
                                                   accept_var)
        if removing:
            for msg in clash_removal_warnings(clashes + taken, ctx.pool):
                ctx.warn(msg)
        elif clashes:
            raise StackError(clash_error(clashes, accept_var))
        for c in [] if removing else taken:
            ctx.note('%s: DeviceClass %s maps %s like %s (%s); accepted by %s. kube-scheduler backs it with the newer '
                     'class only, and on %s deleting either drops the mapping for both (%s)'
                     % (var, c['site'], c['name'], c['ours'], c['var'], accept_var, CLASH_MINORS, CLASH_UPSTREAM))
    if ds['resourceslice_policy']:
        manifests.extend(resourceslice_policy(ctx, ds['release_name'], ds['namespace']))
    if not removing:
        ctx.note('%s: the chart creates the DeviceClasses %s (and %s with %s.compute_domains); its uninstall removes them'
                 % (var, ', '.join(sorted(c for c, v in CHART_DEVICE_CLASSES.items() if v == 'resources.gpus.enabled')),
                    ', '.join(sorted(c for c, v in CHART_DEVICE_CLASSES.items() if v != 'resources.gpus.enabled')), var))
    helm = {'chart_ref': ds['chart_path'], 'release_name': ds['release_name'], 'release_namespace': ds['namespace'],
            'create_namespace': True, 'values': values, 'chart_version': version}
    # keeps the GPU operator's device plugin off the pool's nodes (OPERATOR_DEVICE_PLUGIN_LABEL)
    labels = dict((n, {OPERATOR_DEVICE_PLUGIN_LABEL: OPERATOR_DEVICE_PLUGIN_OFF}) for n in nodes)
    return manifests, labels, [], {}, helm, claim_api


SETTINGS = {'dra': DRA_SCHEMA}

CHART_NAME = 'dra-driver-nvidia-gpu'
# The token of a pod's service account names the pod's node in this extra (ServiceAccountTokenPodNodeInfo, GA and
# locked on from Kubernetes 1.32: k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go), the DRA minimum here.
NODE_NAME_EXTRA = 'authentication.kubernetes.io/node-name'


def kubelet_plugin_account(release_name: str, namespace: str) -> str:
    """The user name of the kubelet plugin's service account in the chart's release (templates/_helpers.tpl fullname
    and serviceAccountName, templates/kubeletplugin.yaml: <fullname>-service-account-kubeletplugin; the collection sets
    neither nameOverride, fullnameOverride nor serviceAccount.name)."""
    fullname = release_name if CHART_NAME in release_name else '%s-%s' % (release_name, CHART_NAME)
    fullname = fullname[:63].rstrip('-')
    return 'system:serviceaccount:%s:%s-service-account-kubeletplugin' % (namespace, fullname)


# The stack's shared objects besides the release: resourceslice_policy()'s policy and binding and the DeviceClasses of
# extended_resources, all from release settings every dra pool agrees on. One the render no longer makes - the policy
# when resourceslice_policy is switched off or under its old name when the release namespace moves, the class of an
# extended resource dropped from the list (it would go on mapping that name to DRA for the scheduler) - is released by
# the pool that recorded itself on it (DraStack.stale_shared; the role's present_followups), deleted once no other
# pool is recorded on it.
POLICY_API = 'admissionregistration.k8s.io/v1'
POLICY_QUERY = 'dra_policies'


def _ours(obj: dict[str, Any], pool: str) -> bool:
    meta = obj.get('metadata') or {}
    labels = meta.get('labels') or {}
    return (labels.get('app.kubernetes.io/managed-by') == MANAGED_BY and labels.get(STACK_LABEL) == 'dra'
            and labels.get(SCOPE_LABEL) == 'shared' and SHARED_USER_PREFIX + pool in (meta.get('annotations') or {}))


def stale_shared(pool: str, shared: list[Manifest], live: dict[str, Any]) -> list[Manifest]:
    """The stack's shared objects the pool recorded itself on that ``shared`` (this render's) no longer has: live
    DeviceClasses (DEVICE_CLASS_QUERY) and ValidatingAdmissionPolicies (POLICY_QUERY, each with its binding of the
    same name) under the stack's labels, as names to release (apiVersion, kind, metadata.name and the scope label)."""
    made = set((m['kind'], m['metadata']['name']) for m in shared)
    out: list[Manifest] = []
    for key, api, kinds in ((DEVICE_CLASS_QUERY, RESOURCE_API_V1, ('DeviceClass',)),
                            (POLICY_QUERY, POLICY_API, ('ValidatingAdmissionPolicyBinding',
                                                        'ValidatingAdmissionPolicy'))):
        for obj in live.get(key) or []:
            name = (obj.get('metadata') or {}).get('name')
            if not _ours(obj, pool) or (kinds[-1], name) in made:
                continue
            out.extend({'apiVersion': api, 'kind': k, 'metadata': {'name': name, 'labels': {SCOPE_LABEL: 'shared'}}}
                       for k in kinds)
    return out


def resourceslice_policy(ctx: Ctx, release_name: str, namespace: str) -> list[Manifest]:
    """The collection's ValidatingAdmissionPolicy and its binding for the release's kubelet plugin account (DRA-14):
    a ResourceSlice it creates, updates or deletes must be for the node its token is bound to, or for all nodes or a
    node selector (what the chart's own policy allows, were it to match)."""
    name = 'gpuops-dra-resourceslices-%s' % namespace
    user = kubelet_plugin_account(release_name, namespace)
    policy = {
        'apiVersion': 'admissionregistration.k8s.io/v1', 'kind': 'ValidatingAdmissionPolicy',
        'metadata': ctx.meta(name, namespace=False, scope='shared'),
        'spec': {
            'failurePolicy': 'Fail',
            'matchConstraints': {'resourceRules': [{
                'apiGroups': ['resource.k8s.io'], 'apiVersions': ['*'], 'operations': ['CREATE', 'UPDATE', 'DELETE'],
                'resources': ['resourceslices']}]},
            'matchConditions': [{'name': 'kubelet-plugin-account',
                                 'expression': 'request.userInfo.username == "%s"' % user}],
            'variables': [
                {'name': 'tokenNode',
                 'expression': "request.userInfo.extra[?'%s'][0].orValue('')" % NODE_NAME_EXTRA},
                {'name': 'sliceNode', 'expression': (
                    "(request.operation == 'DELETE' ? oldObject : object).spec.?nodeName.orValue('')")},
                {'name': 'fleetWide', 'expression': (
                    "(request.operation == 'DELETE' ? oldObject : object).spec.?allNodes.orValue(false) || "
                    "(request.operation == 'DELETE' ? oldObject : object).spec.?nodeSelector.hasValue()")},
            ],
            'validations': [
                {'expression': "variables.tokenNode != ''", 'reason': 'Forbidden',
                 'message': ('the DRA kubelet plugin account may write ResourceSlices only with a token bound to a '
                             'pod on a node (gpuops.k8s_gpu, %s)' % name)},
                {'expression': 'variables.sliceNode == variables.tokenNode || variables.fleetWide', 'reason': 'Forbidden',
                 'messageExpression': ("'the DRA kubelet plugin on node ' + variables.tokenNode + ' may not write the "
                                       "ResourceSlices of node ' + variables.sliceNode + ' (gpuops.k8s_gpu, %s)'"
                                       % name)},
            ]}}
    binding = {
        'apiVersion': 'admissionregistration.k8s.io/v1', 'kind': 'ValidatingAdmissionPolicyBinding',
        'metadata': ctx.meta(name, namespace=False, scope='shared'),
        'spec': {'policyName': name, 'validationActions': ['Deny']}}
    return [policy, binding]


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS); the DRA driver is a Helm release."""
    manifests, labels, resources, limits, helm, claim_api = render(
        ctx, settings, nodes, facts, node_state=inputs['node_state'], live_nodes=inputs['live_nodes'],
        cdi_enabled=inputs['cdi_enabled'], removing=inputs['removing'],
        live_classes=(inputs.get('live_objects') or {}).get(DEVICE_CLASS_QUERY))
    # the pool's claim templates and shared claims (scope pool) in the version they are rendered in: one dropped from
    # claim_templates is pruned after the apply (the lifecycle suite found it left in the cluster for ever)
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits, 'helm': helm,
            'claim_api_version': claim_api,
            'prune_kinds': [(claim_api, 'ResourceClaimTemplate'), (claim_api, 'ResourceClaim')]}


def _release_view(settings: dict[str, Any]) -> dict[str, Any]:
    """What of a pool's settings (sharing_pools' 'settings': variable name -> value) goes into the shared release:
    {name: value}, the dra keys with the role's defaults filled in, the pool variables as given (None: not set)."""
    dra = settings.get('gpu_sharing_stack_dra')
    dra = dra if isinstance(dra, dict) else {}
    out = {}
    for key in RELEASE_SETTINGS:
        out['gpu_sharing_stack_dra.' + key] = dra.get(key, DRA_SCHEMA[key]['default'])
    for var in RELEASE_POOL_VARIABLES:
        out[var] = settings.get(var)
    return out


def release_conflicts(pools: list[dict[str, Any]]) -> list[str]:
    """Errors for dra pools whose settings of the shared Helm release differ: ``pools`` is sharing_pools' list
    ({name, strategy, settings}); only the settings sharing_pools was asked to copy are compared. One error naming the
    pools and each key that differs, with every pool's value."""
    dra_pools = [p for p in pools if p.get('strategy') == 'dra']
    if len(dra_pools) < 2:
        return []
    views = [(p['name'], _release_view(p.get('settings') or {})) for p in dra_pools]
    differ = []
    for key in sorted(views[0][1]):
        values = [(name, view[key]) for name, view in views]
        if any(v != values[0][1] for dummy, v in values[1:]):
            differ.append('%s (%s)' % (key, ', '.join('%s: %s' % (n, 'unset' if v is None else json_text(v))
                                                      for n, v in values)))
    if not differ:
        return []
    return ['dra pools %s share one Helm release of NVIDIA\'s DRA driver (its DeviceClasses are cluster objects), so '
            'the settings of that release must be the same in each; they differ in %s'
            % (', '.join(n for n, dummy in views), '; '.join(differ))]


def claim_name_conflicts(pools: list[dict[str, Any]]) -> list[str]:
    """Errors for dra pools that render a ResourceClaimTemplate or ResourceClaim of one name into one namespace
    (gpu_sharing_stack_dra.claim_templates, claim_namespace): the object carries one pool's label, so each pool's run
    would take it over (a re-run is never changed=0) and one pool's uninstall or prune would delete the other's. Found
    by the lifecycle suite (two dra pools with the same settings)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for p in pools:
        if p.get('strategy') != 'dra':
            continue
        ds = (p.get('settings') or {}).get('gpu_sharing_stack_dra')
        ds = ds if isinstance(ds, dict) else {}
        ns = ds.get('claim_namespace') or ''
        for t in ds.get('claim_templates') or []:
            if isinstance(t, dict) and t.get('name'):
                seen.setdefault((ns, t['name']), []).append(p['name'])
    return ['dra pools %s render the claim %s/%s each (gpu_sharing_stack_dra.claim_templates in one '
            'claim_namespace): one object cannot belong to two pools; give each pool its own claim names'
            % (', '.join(names), ns, name) for (ns, name), names in sorted(seen.items()) if len(names) > 1]


def json_text(value: Any) -> str:
    """A setting's value as compact, key-sorted text (for messages)."""
    return json.dumps(value, sort_keys=True, separators=(',', ':'))


def check_device_plugin_nodes(ctx: Ctx, nodes: list[str], node_state: dict[str, dict[str, Any]] | None,
                              live_nodes: list[Manifest] | None) -> None:
    """Refuse a node of the pool that a device-plugin pool holds (its pool label) or where a device plugin already
    advertises a GPU resource: the DRA driver must not run beside the GPU device plugin on one node (the chart's
    gpuResourcesEnabledOverride, until KEP 5004 is GA). allow_mixed_accounting does not lift this."""
    state = dict(node_state or {})
    for obj in live_nodes or []:
        meta = obj.get('metadata') or {}
        if meta.get('name') in nodes and meta.get('name') not in state:
            state[meta['name']] = {'labels': meta.get('labels') or {},
                                   'allocatable': (obj.get('status') or {}).get('allocatable') or {}}
    problems = []
    for node in nodes:
        st = state.get(node) or {}
        labels = st.get('labels') or {}
        other = labels.get(ctx.strategy_label)
        if other and other != 'dra':
            problems.append('%s is in pool %s (strategy %s, a device plugin)' % (node, labels.get(POOL_LABEL, '?'), other))
            continue
        adv = ['%s=%s' % (r, q) for r, q in sorted((st.get('allocatable') or {}).items())
               if gpu_strategy.resource_family(r) is not None and gpu_strategy.positive_quantity(q)]
        if adv:
            problems.append('%s advertises %s from a device plugin' % (node, ', '.join(adv)))
    if problems:
        raise StackError('Refusing %sstrategy=dra for pool %s: the DRA driver must not run on a node of the GPU device '
                         'plugin (dra-driver-nvidia-gpu %s, gpuResourcesEnabledOverride); %s. Remove the device plugin '
                         'pool from these nodes first (%sstate: absent for that pool)'
                         % (ctx.var_prefix, ctx.pool, CURRENT_CHART, '; '.join(problems), ctx.var_prefix))


# ---- what users write

CLAIM_KINDS = ('gpu', 'mig', 'time-slicing', 'mps')
TIME_SLICE_INTERVALS = ('Default', 'Short', 'Medium', 'Long')
_QUANTITY = re.compile(r'^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$')
_CLAIM_KEYS = {
    'name': dict(type=str, default=None),
    'kind': dict(type=str, default='gpu', choices=list(CLAIM_KINDS)),
    'count': dict(type=int, default=1, min=1, max=64),
    'product_name': dict(type=str, default=''),
    'architecture': dict(type=str, default=''),
    'min_memory': dict(type=str, default=''),
    'mig_profile': dict(type=str, default=''),
    'uuid': dict(type=str, default=''),
    'interval': dict(type=str, default='Default', choices=list(TIME_SLICE_INTERVALS)),
    'mps_active_thread_percentage': dict(type=int, default=None, min=1, max=100),
    'mps_pinned_memory_limit': dict(type=str, default=''),
    'shared': dict(type=bool, default=False),
    'first_available': dict(type=list, default=None),
}
# one alternative of first_available: a device spec without the claim's own keys (its name is the subrequest's)
_ALTERNATIVE_KEYS = dict((k, v) for k, v in _CLAIM_KEYS.items() if k not in ('shared', 'first_available'))
# resource.k8s.io/v1 DeviceRequest.firstAvailable: at most 8 subrequests (k8s.io/api v0.37.2 resource/v1/types.go
# FirstAvailableDeviceRequestMaxSize); gate DRAPrioritizedList alpha 1.33, beta and on 1.34, GA 1.36, locked 1.37
# (kubernetes v1.37.2 pkg/features/kube_features.go): the collection renders it on resource.k8s.io/v1 (1.34+) only
FIRST_AVAILABLE_MAX = 8


def _cel_string(value: str) -> str:
    return "'%s'" % value.replace('\\', '\\\\').replace("'", "\\'")


def selectors(spec: dict[str, Any]) -> list[str]:
    """The CEL expressions that select the device a claim spec asks for (on the attributes of DRA-06)."""
    attr = "device.attributes['%s']" % DRIVER
    out = []
    if spec.get('product_name'):
        out.append('%s.productName == %s' % (attr, _cel_string(spec['product_name'])))
    if spec.get('architecture'):
        out.append('%s.architecture == %s' % (attr, _cel_string(spec['architecture'])))
    if spec.get('mig_profile'):
        out.append('%s.profile == %s' % (attr, _cel_string(spec['mig_profile'])))
    if spec.get('uuid'):
        out.append('%s.uuid == %s' % (attr, _cel_string(spec['uuid'])))
    if spec.get('min_memory'):
        out.append("device.capacity['%s'].%s.compareTo(quantity(%s)) >= 0"
                   % (DRIVER, MEMORY_CAPACITY, _cel_string(spec['min_memory'])))
    return out


def claim_templates(specs: Any, namespace: str, gates: dict[str, bool] | None = None,
                    api_version: str = 'resource.k8s.io/v1', var: str = 'claim_templates') -> list[Manifest]:
    """ResourceClaimTemplates (resource.k8s.io/v1 by default) for NVIDIA's DRA driver, one per spec.

    Input: ``specs``, a list of dicts, each with
      name (required, a DNS label: the template's name and its one request's name),
      kind: gpu (a full GPU, DeviceClass gpu.nvidia.com), mig (a MIG device, DeviceClass mig.nvidia.com; needs
        mig_profile), time-slicing (a full GPU shared by time-slicing, GpuConfig sharing TimeSlicing; needs the
        driver's TimeSlicingSettings gate) or mps (a full GPU shared through MPS, GpuConfig sharing MPS; needs MPSSupport),
      count (devices asked for, default 1), and the selectors product_name, architecture, min_memory (a quantity, e.g.
        40Gi, compared with the device's memory capacity), mig_profile (e.g. 1g.10gb), uuid (one GPU or MIG device),
      interval (time-slicing: Default, Short, Medium or Long), mps_active_thread_percentage and
        mps_pinned_memory_limit (mps),
      shared (true: a ResourceClaim instead of a template, which the pods that name it with resourceClaimName share;
        a template gives each pod its own claim, so time-slicing and MPS then share a GPU between that pod's
        containers only).
    ``namespace``: the namespace of the objects. ``gates``: the driver's feature gates as the cluster runs them (name ->
    bool; None skips the gate checks). ``api_version``: the resource.k8s.io version to render.
    Output: a list of ResourceClaimTemplate (or ResourceClaim) dicts, in the order of ``specs``. StackError names the
    spec and key for bad input."""
    if not isinstance(specs, list):
        raise StackError('%s must be a list of claim specs; got %r' % (var, specs))
    check_name(namespace, var + ' namespace')
    out, names = [], set()
    for i, raw in enumerate(specs):
        where = '%s[%d]' % (var, i)
        spec = validate_settings(raw, _CLAIM_KEYS, where)
        name = check_name(spec['name'], where + '.name')
        if name in names:
            raise StackError('%s.name %s is used twice' % (where, name))
        names.add(name)
        if spec['first_available'] is not None:
            devices = _first_available(raw, spec, name, where, gates, api_version)
        else:
            request, sharing = _device_request(spec, where, gates)
            if api_version == RESOURCE_API_FLAT:
                # v1beta1 (Kubernetes 1.32) has the flat DeviceRequest: the class, count and selectors beside the name
                # (k8s.io/api v0.32.0 resource/v1beta1 types.go DeviceRequest; v1beta2 and v1 nest them under exactly)
                devices = {'requests': [dict(request, name=name)]}
            else:
                devices = {'requests': [{'name': name, 'exactly': request}]}
            if sharing:
                devices['config'] = [_sharing_config([name], sharing)]
        meta = {'name': name, 'namespace': namespace}
        if spec['shared']:
            out.append({'apiVersion': api_version, 'kind': 'ResourceClaim', 'metadata': meta,
                        'spec': {'devices': devices}})
        else:
            out.append({'apiVersion': api_version, 'kind': 'ResourceClaimTemplate', 'metadata': meta,
                        'spec': {'spec': {'devices': devices}}})
    return out


def _sharing_config(requests: list[str], sharing: dict[str, Any]) -> dict[str, Any]:
    return {'requests': requests, 'opaque': {'driver': DRIVER, 'parameters': {
        'apiVersion': CONFIG_API_VERSION, 'kind': GPU_CONFIG, 'sharing': sharing}}}


def _first_available(raw: dict[str, Any], spec: dict[str, Any], name: str, where: str,
                     gates: dict[str, Any] | None, api_version: str) -> dict[str, Any]:
    """The devices of a claim whose one request lists prioritized alternatives (``first_available``: device specs,
    the scheduler takes the first it can allocate); each alternative's GpuConfig names its subrequest."""
    own = sorted(k for k in raw if k not in ('name', 'shared', 'first_available'))
    if own:
        raise StackError('%s: with first_available the device keys go in each alternative; got %s beside it'
                         % (where, ', '.join(own)))
    if api_version != RESOURCE_API_V1:
        raise StackError('%s.first_available needs resource.k8s.io/v1 (Kubernetes 1.34+: feature gate '
                         'DRAPrioritizedList, alpha and off on 1.33, absent before); this cluster gets %s'
                         % (where, api_version))
    alternatives = spec['first_available']
    if not 1 <= len(alternatives) <= FIRST_AVAILABLE_MAX:
        raise StackError('%s.first_available must list 1 to %d alternatives; got %d'
                         % (where, FIRST_AVAILABLE_MAX, len(alternatives)))
    subs: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    seen: set[str] = set()
    for j, alt_raw in enumerate(alternatives):
        alt_where = '%s.first_available[%d]' % (where, j)
        alt = validate_settings(alt_raw, _ALTERNATIVE_KEYS, alt_where)
        sub = check_name(alt['name'] or '%s-%d' % (alt['kind'], j), alt_where + '.name')
        if sub in seen:
            raise StackError('%s.name %s is used twice' % (alt_where, sub))
        seen.add(sub)
        request, sharing = _device_request(alt, alt_where, gates)
        subs.append(dict(request, name=sub))
        if sharing:
            config.append(_sharing_config(['%s/%s' % (name, sub)], sharing))
    devices: dict[str, Any] = {'requests': [{'name': name, 'firstAvailable': subs}]}
    if config:
        devices['config'] = config
    return devices


def _device_request(spec: dict[str, Any], where: str,
                    gates: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the DeviceRequest's class, count and selectors, the GpuConfig sharing or None) of one device spec."""
    kind = spec['kind']
    if spec['min_memory'] and not _QUANTITY.match(spec['min_memory']):
        raise StackError('%s.min_memory must be a Kubernetes quantity (e.g. 40Gi); got %r' % (where, spec['min_memory']))
    if kind == 'mig' and not spec['mig_profile']:
        raise StackError('%s: kind mig needs mig_profile (e.g. 1g.10gb)' % where)
    if kind != 'mig' and spec['mig_profile']:
        raise StackError('%s.mig_profile is for kind mig only; got kind %s' % (where, kind))
    if kind != 'time-slicing' and spec['interval'] != 'Default':
        raise StackError('%s.interval is for kind time-slicing only; got kind %s' % (where, kind))
    if kind != 'mps' and (spec['mps_active_thread_percentage'] is not None or spec['mps_pinned_memory_limit']):
        raise StackError('%s: mps_active_thread_percentage and mps_pinned_memory_limit are for kind mps only; got kind '
                         '%s' % (where, kind))
    if spec['mps_pinned_memory_limit'] and not _QUANTITY.match(spec['mps_pinned_memory_limit']):
        raise StackError('%s.mps_pinned_memory_limit must be a Kubernetes quantity (e.g. 10Gi); got %r'
                         % (where, spec['mps_pinned_memory_limit']))
    gate = {'time-slicing': 'TimeSlicingSettings', 'mps': 'MPSSupport'}.get(kind)
    if gate and gates is not None and not gates.get(gate):
        raise StackError('%s: kind %s needs the driver\'s %s feature gate (alpha), which is off; set it in the '
                         'pool\'s feature_gates' % (where, kind, gate))
    request: dict[str, Any] = {'deviceClassName': MIG_CLASS if kind == 'mig' else GPU_CLASS}
    if spec['count'] != 1:
        request['count'] = spec['count']
    sel = selectors(spec)
    if sel:
        request['selectors'] = [{'cel': {'expression': e}} for e in sel]
    sharing: dict[str, Any] | None = None
    if kind == 'time-slicing':
        sharing = {'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': spec['interval']}}
    elif kind == 'mps':
        mps: dict[str, Any] = {}
        if spec['mps_active_thread_percentage'] is not None:
            mps['defaultActiveThreadPercentage'] = spec['mps_active_thread_percentage']
        if spec['mps_pinned_memory_limit']:
            mps['defaultPinnedDeviceMemoryLimit'] = spec['mps_pinned_memory_limit']
        sharing = {'strategy': 'MPS'}
        if mps:
            sharing['mpsConfig'] = mps
    return request, sharing


def extended_resource_stage(minor: int) -> tuple[str, bool] | None:
    """(stage, on by default) of the DRAExtendedResource gate on a Kubernetes minor; None where the gate is absent."""
    for first, stage, default in EXTENDED_RESOURCE_STAGES:
        if minor >= first:
            return stage, default
    return None


_EXTENDED_KEYS = {
    'name': dict(type=str, default=None),
    'kind': dict(type=str, default='gpu', choices=list(EXTENDED_KINDS)),
    'mig_profile': dict(type=str, default=''),
    'product_name': dict(type=str, default=''),
    'architecture': dict(type=str, default=''),
    'min_memory': dict(type=str, default=''),
    'interval': dict(type=str, default='Default', choices=list(TIME_SLICE_INTERVALS)),
    'mps_active_thread_percentage': dict(type=int, default=None, min=1, max=100),
    'mps_pinned_memory_limit': dict(type=str, default=''),
}
_QUALIFIED_PART = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')
_DNS_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')


def check_extended_resource_name(name: Any, where: str) -> str:
    """An extended resource name as the API server takes it for a DeviceClass's extendedResourceName (k8s.io/kubernetes
    v1.37.2 pkg/apis/resource/validation; its messages seen on the lab's 1.37 server, DRAX-02): a domain-prefixed
    name, not in the kubernetes.io domain, without the requests. prefix."""
    if not isinstance(name, str) or '/' not in name:
        raise StackError('%s must be a domain-prefixed extended resource name (e.g. nvidia.com/gpu.shared); got %r'
                         % (where, name))
    domain, path = name.split('/', 1)
    if (not _DNS_SUBDOMAIN.match(domain) or not _QUALIFIED_PART.match(path) or len(path) > 63
            or len(domain) > 253):
        raise StackError('%s must be a domain-prefixed extended resource name (e.g. nvidia.com/gpu.shared); got %r'
                         % (where, name))
    if domain == 'kubernetes.io' or domain.endswith('.kubernetes.io'):
        raise StackError('%s %s: an extended resource name must not be in the kubernetes.io domain' % (where, name))
    if name.startswith('requests.'):
        raise StackError('%s %s: an extended resource name must not have the requests. prefix' % (where, name))
    return name


def extended_class_name(resource: str) -> str:
    """The DeviceClass name for an extended resource: '<path>.<domain>.extended.gpuops.io' (lower case; a cluster
    object, one per name)."""
    domain, path = resource.split('/', 1)
    name = ('%s.%s.extended.gpuops.io' % (path, domain)).lower().replace('_', '-')
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise StackError('extended resource %s gives no valid DeviceClass name (%s)' % (resource, name))
    return name


def extended_resource_classes(specs: Any, gates: dict[str, bool] | None = None, minor: int | None = None,
                              workload: Any = (), var: str = 'extended_resources',
                              workload_var: str = 'workload_resources',
                              api_version: str = 'resource.k8s.io/v1') -> list[Manifest]:
    """DeviceClasses (resource.k8s.io/v1) whose spec.extendedResourceName is what the workloads ask for (KEP-5004).

    Input: ``specs``, a list of dicts (the pool's extended_resources: name, kind, mig_profile, the CEL selectors
    product_name, architecture, min_memory, and interval / mps_active_thread_percentage / mps_pinned_memory_limit for
    the class's GpuConfig); ``gates``: the driver's feature gates as the release runs them (None skips the checks);
    ``minor``: the cluster's Kubernetes minor (None: not checked); ``workload``: the names the pool's workloads ask
    for (each must be mapped by the chart's class or a spec).
    Output: a list of DeviceClass dicts (metadata holds the name only), in the order of ``specs``. StackError before
    anything is rendered: a minor where the gate is off or absent (naming the minor, the gate and its stage), a name
    mapped twice (the chart's nvidia.com/gpu included), a workload resource no class maps, and bad input by key."""
    if not isinstance(specs, list):
        raise StackError('%s must be a list of extended resources; got %r' % (var, specs))
    if not isinstance(workload, (list, tuple)):
        raise StackError('%s must be a list of extended resource names; got %r' % (workload_var, workload))
    if (specs or workload) and minor is not None:
        stage = extended_resource_stage(minor)
        if stage is None or not stage[1]:
            raise StackError(
                '%s: Kubernetes 1.%d cannot back extended resources with DRA: its feature gate %s is %s (it is beta and '
                'on by default from 1.36, GA from 1.37; k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go), and '
                'its API server drops a DeviceClass\'s spec.extendedResourceName without it; move the cluster to 1.36+ '
                'or leave %s and %s empty'
                % (var if specs else workload_var, minor, EXTENDED_RESOURCE_GATE,
                   'absent' if stage is None else '%s and off by default' % stage[0], var, workload_var))
    mapped = dict(CHART_EXTENDED_RESOURCES)
    out = []
    for i, raw in enumerate(specs):
        where = '%s[%d]' % (var, i)
        spec = validate_settings(raw, _EXTENDED_KEYS, where)
        name = check_extended_resource_name(spec['name'], where + '.name')
        if name in mapped:
            if name in CHART_EXTENDED_RESOURCES:
                raise StackError(
                    '%s.name %s: the chart\'s DeviceClass %s already maps it (dra-driver-nvidia-gpu %s templates/'
                    'deviceclass-gpu.yaml: extendedResourceName nvidia.com/gpu with resource.k8s.io/v1, and no chart '
                    'value switches it off); two classes must not map one name (the scheduler would take the newer '
                    'one). Whole GPUs need no entry here' % (where, name, mapped[name], CURRENT_CHART))
            raise StackError('%s.name %s is mapped twice (also by %s); one class per extended resource'
                             % (where, name, mapped[name]))
        kind = spec['kind']
        profile = spec['mig_profile']
        if kind == 'mig' and not profile:
            if not name.startswith(MIG_RESOURCE_PREFIX) or name == MIG_RESOURCE_PREFIX:
                raise StackError('%s: kind mig needs mig_profile (e.g. 1g.10gb) or a name %s<profile>; got %s'
                                 % (where, MIG_RESOURCE_PREFIX, name))
            profile = name[len(MIG_RESOURCE_PREFIX):]
        if kind != 'mig' and profile:
            raise StackError('%s.mig_profile is for kind mig only; got kind %s' % (where, kind))
        if kind != 'time-slicing' and spec['interval'] != 'Default':
            raise StackError('%s.interval is for kind time-slicing only; got kind %s' % (where, kind))
        if kind != 'mps' and (spec['mps_active_thread_percentage'] is not None or spec['mps_pinned_memory_limit']):
            raise StackError('%s: mps_active_thread_percentage and mps_pinned_memory_limit are for kind mps only; got '
                             'kind %s' % (where, kind))
        for key in ('min_memory', 'mps_pinned_memory_limit'):
            if spec[key] and not _QUANTITY.match(spec[key]):
                raise StackError('%s.%s must be a Kubernetes quantity (e.g. 40Gi); got %r' % (where, key, spec[key]))
        gate = {'time-slicing': 'TimeSlicingSettings', 'mps': 'MPSSupport'}.get(kind)
        if gate and gates is not None and not gates.get(gate):
            raise StackError('%s: kind %s needs the driver\'s %s feature gate (alpha), which is off; set it in '
                             'feature_gates' % (where, kind, gate))
        cls = extended_class_name(name)
        if cls in mapped.values():
            raise StackError('%s.name %s gives the DeviceClass name %s, which another entry has (names that differ in '
                             'case only)' % (where, name, cls))
        exprs = ["device.driver == '%s' && device.attributes['%s'].type == '%s'"
                 % (DRIVER, DRIVER, 'mig' if kind == 'mig' else 'gpu')]
        exprs += selectors(dict(spec, mig_profile=profile))
        body = {'selectors': [{'cel': {'expression': e}} for e in exprs], 'extendedResourceName': name}
        sharing = None
        if kind == 'time-slicing':
            sharing = {'strategy': 'TimeSlicing', 'timeSlicingConfig': {'interval': spec['interval']}}
        elif kind == 'mps':
            sharing = {'strategy': 'MPS'}
            mps = {}
            if spec['mps_active_thread_percentage'] is not None:
                mps['defaultActiveThreadPercentage'] = spec['mps_active_thread_percentage']
            if spec['mps_pinned_memory_limit']:
                mps['defaultPinnedDeviceMemoryLimit'] = spec['mps_pinned_memory_limit']
            if mps:
                sharing['mpsConfig'] = mps
        if sharing:
            body['config'] = [{'opaque': {'driver': DRIVER, 'parameters': {
                'apiVersion': CONFIG_API_VERSION, 'kind': GPU_CONFIG, 'sharing': sharing}}}]
        mapped[name] = cls
        out.append({'apiVersion': api_version, 'kind': 'DeviceClass', 'metadata': {'name': cls}, 'spec': body})
    missing = []
    for i, name in enumerate(workload):
        check_extended_resource_name(name, '%s[%d]' % (workload_var, i))
        if name not in mapped:
            missing.append(name)
    if missing:
        raise StackError('%s: no DeviceClass maps %s, which the pool\'s workloads ask for; mapped: %s. Add %s to %s '
                         '(kind gpu, time-slicing, mps or mig)'
                         % (workload_var, ', '.join(missing), ', '.join(sorted(mapped)),
                            'it' if len(missing) == 1 else 'them', var))
    return out


# Two DeviceClasses mapping one extended resource name (DRAX-14, DRAX-15). The API server accepts them; kube-scheduler's
# cache (k8s.io/dynamic-resource-allocation v0.37.2 deviceclass/extendedresourcecache) backs the name with the newer
# class (creationTimestamp, then the smaller name), and its OnDelete removes the name's entry whichever class owns it,
# without taking the other class back: on the lab's real kube-scheduler v1.37.2 deleting either class leaves pods
# asking the name Pending with noderesources Fit's "Insufficient <name>" (lab/tests/integration/
# test_dra_extended_clash_real.py). An Update of the surviving class puts the mapping back for new pods; only one that
# changes its extendedResourceName (or an Add) retries the Pending pods (Fit's isSchedulableAfterDeviceClassEvent).
# kubernetes/kubernetes issue #141103, fixed on master by PR #141110. The same OnDelete is in v0.35.4 and v0.36.6 (the
# newest 1.35 and 1.36 modules read; the collection backs extended resources with DRA from 1.36, where the gate is on
# by default): CLASH_MINORS says which releases carry it.
DEVICE_CLASS_QUERY = 'dra_device_classes'
CLASH_UPSTREAM = 'kubernetes/kubernetes#141103, fixed on master by #141110'
CLASH_MINORS = 'Kubernetes 1.36 and 1.37 (1.36.6 and 1.37.2 included)'


def own_device_class(obj: dict[str, Any]) -> bool:
    """Whether a live DeviceClass is the release's (by name: the chart's classes, CHART_DEVICE_CLASSES) or the
    collection's (its managed-by and stack labels, as ctx.meta gives them)."""
    meta = obj.get('metadata') or {}
    labels = meta.get('labels') or {}
    return meta.get('name') in CHART_DEVICE_CLASSES or (
        labels.get('app.kubernetes.io/managed-by') == MANAGED_BY and labels.get(STACK_LABEL) == 'dra')


def _scheduler_pick(classes: list[dict[str, Any]]) -> str:
    """The class kube-scheduler's cache keeps for one name: the newest creationTimestamp, on a tie the smaller name
    (RFC 3339 UTC timestamps of whole seconds compare as text)."""
    newest = max(str((c.get('metadata') or {}).get('creationTimestamp') or '') for c in classes)
    return min(str(c['metadata']['name']) for c in classes
               if str((c.get('metadata') or {}).get('creationTimestamp') or '') == newest)


def extended_resource_clashes(live_classes: list[dict[str, Any]] | None, ours: dict[str, tuple[str, str]],
                              accepted: Any, var: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The live DeviceClasses of the site's that map a name the release or the pool's classes map.

    Input: ``live_classes``, the cluster's DeviceClasses (resource.k8s.io/v1; None or [] where none were read or the
    server does not serve the API); ``ours``: extended resource name -> (the variable that maps it, the DeviceClass
    that maps it for the collection or the chart); ``accepted``: the class names of accept_extended_resource_classes
    (``var``: that variable, for its errors).
    Output: (clashes, accepted clashes), each a list of {name, site, var, ours, ours_live, pick} sorted by name and
    site class: ``ours_live`` whether our class exists, ``pick`` the class the scheduler backs the name with (None
    while ours does not exist yet: this run would create the newest). Classes of the release or the collection
    (own_device_class), and a class of the very name of ours (the object this run applies), are never a clash.
    StackError for an accepted entry that is not a class name."""
    if not isinstance(accepted, (list, tuple)):
        raise StackError('%s must be a list of DeviceClass names; got %r' % (var, accepted))
    for i, name in enumerate(accepted):
        if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise StackError('%s[%d] must be a DeviceClass name (a DNS subdomain); got %r' % (var, i, name))
    live = [c for c in live_classes or [] if isinstance(c, dict) and (c.get('metadata') or {}).get('name')]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for c in live:
        ern = (c.get('spec') or {}).get('extendedResourceName')
        if ern:
            by_name.setdefault(ern, []).append(c)
    clashes: list[dict[str, Any]] = []
    taken: list[dict[str, Any]] = []
    for name in sorted(ours):
        mapping_var, cls = ours[name]
        classes = by_name.get(name) or []
        ours_live = any(c['metadata']['name'] == cls for c in classes)
        for c in sorted(classes, key=lambda c: c['metadata']['name']):
            # ours by labels or name; one of our class's name is the one object this run applies, not a second class
            if own_device_class(c) or c['metadata']['name'] == cls:
                continue
            site = c['metadata']['name']
            entry = {'name': name, 'site': site, 'var': mapping_var, 'ours': cls, 'ours_live': ours_live,
                     'pick': _scheduler_pick(classes) if ours_live else None}
            (taken if site in accepted else clashes).append(entry)
    return clashes, taken


def clash_error(clashes: list[dict[str, Any]], accept_var: str) -> str:
    """One refusal for every clash (extended_resource_clashes), naming each class, name and variable, and why."""
    parts = []
    for c in clashes:
        now = ('kube-scheduler backs it with %s now' % c['pick'] if c['pick'] else
               'this run would create %s, the newer class, so kube-scheduler would back it with that one instead of '
               '%s' % (c['ours'], c['site']))
        parts.append('DeviceClass %s maps %s (spec.extendedResourceName), which %s maps too (DeviceClass %s): %s'
                     % (c['site'], c['name'], c['var'], c['ours'], now))
    names = sorted(set(c['name'] for c in clashes))
    return ('%s. Two classes mapping one extended resource name: the API server accepts them, kube-scheduler backs the '
            'name with the newer one only (creationTimestamp, then the smaller name), and on %s deleting either '
            'class later drops the scheduler\'s mapping for both, so pods asking %s stay Pending ("Insufficient %s") '
            'until kube-scheduler restarts (%s). Nothing was changed. Remove spec.extendedResourceName from the '
            'site\'s class (or the entry of extended_resources that maps it), or list the class in %s if both are '
            'meant to map it (during a move from one class to the other)'
            % ('; '.join(parts), CLASH_MINORS, ', '.join(names), names[0] if len(names) == 1 else '<name>',
               CLASH_UPSTREAM, accept_var))


def clash_removal_warnings(clashes: list[dict[str, Any]], pool: str) -> list[str]:
    """What the removal of a pool says for each of its live classes whose name a class of the site's maps too."""
    out = []
    for c in clashes:
        if not c['ours_live']:
            continue
        whose = ("the chart's, removed with the Helm release by the last dra pool" if c['ours'] in CHART_DEVICE_CLASSES
                 else "the collection's, removed by the last pool that uses it")
        out.append(
            'Removing pool %s deletes DeviceClass %s (%s), which maps %s like the site\'s DeviceClass %s: on %s that '
            'deletion drops kube-scheduler\'s mapping of %s for %s as well (%s), and pods asking %s stay Pending '
            '("Insufficient %s"). Afterwards restart kube-scheduler, or update %s\'s spec.extendedResourceName to '
            'another name and back (the scheduler takes the class back and retries the Pending pods), or delete and '
            're-create %s; an update of its labels or annotations alone retries no Pending pod'
            % (pool, c['ours'], whose, c['name'], c['site'], CLASH_MINORS, c['name'], c['site'], CLASH_UPSTREAM,
               c['name'], c['name'], c['site'], c['site']))
    return out


def validation_pod(ctx: Ctx, name: str, namespace: str, image: str, claim: Manifest,
                   scheduler_name: str | None = None) -> Manifest:
    """A Pod that runs the CUDA sample on a device of ``claim`` (a ResourceClaimTemplate or ResourceClaim from
    claim_templates): its container names the claim in resources.claims, not nvidia.com/gpu."""
    ref = {'name': 'gpu'}
    if claim['kind'] == 'ResourceClaim':
        ref['resourceClaimName'] = claim['metadata']['name']
    else:
        ref['resourceClaimTemplateName'] = claim['metadata']['name']
    spec = {'restartPolicy': 'Never', 'resourceClaims': [ref],
            'containers': [{'name': 'cuda', 'image': image, 'resources': {'claims': [{'name': 'gpu'}]}}],
            'tolerations': [dict(GPU_TOLERATION)], 'nodeSelector': ctx.pool_selector()}
    if scheduler_name:
        spec['schedulerName'] = scheduler_name
    if ctx.image_pull_secrets:
        spec['imagePullSecrets'] = ctx.pull_secrets()
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': ctx.meta(name, namespace=namespace, scope='validation'),
            'spec': spec}


class DraStack(Stack):
    """dra: NVIDIA's DRA driver, one Helm release (its pools' agreement: release_conflicts); devices are claimed, so
    never beside a device plugin; its nodes carry the label that keeps the GPU operator's device plugin off; the render
    reads the API server's version (claims go in the resource.k8s.io version the minor serves), for a removal too; a
    validation workload asks for a claim."""
    claims_devices = True
    version_key = 'dra'
    version_on_removal = True

    def own_conflicts(self, pools: list[dict]) -> list[str]:
        return release_conflicts(pools) + claim_name_conflicts(pools)

    def live_queries(self, settings: dict, present: bool, namespace: str) -> list[dict]:
        # the cluster's DeviceClasses: a class of the site's mapping a name the release or the pool's classes map
        # refuses the pool (a removal warns); a server without resource.k8s.io/v1 answers none (render: DRAX-15)
        # and the collection's admission policies of the stack (stale_shared: a pool releases one it no longer uses)
        return [{'key': DEVICE_CLASS_QUERY, 'api_version': RESOURCE_API_V1, 'kind': 'DeviceClass'},
                {'key': POLICY_QUERY, 'api_version': POLICY_API, 'kind': 'ValidatingAdmissionPolicy',
                 'label_selectors': ['app.kubernetes.io/managed-by=%s' % MANAGED_BY, '%s=dra' % STACK_LABEL]}]

    def stale_shared(self, pool: str, shared: list[dict], live_objects: dict) -> list[dict]:
        return stale_shared(pool, shared, live_objects)

    def runtime_class_note(self, runtime_class_name: str) -> str | None:
        if runtime_class_name:
            return None
        return ('GPU pods of this pool (strategy dra) ask for devices with a ResourceClaim (resourceClaims and '
                'resources.claims; stacks/dra.claim_templates renders the templates), not nvidia.com/gpu; the DRA '
                'driver hands the devices over as CDI devices, so no RuntimeClass and no default runtime is needed')

    def validation(self, ctx: Any, settings: dict, limits: dict, scheduler_name: str | None, val: dict, image: str,
                   runtime_class_name: str, claim_api_version: str | None = None) -> list[dict] | None:
        # a claim, not nvidia.com/gpu: a template for one full GPU of the pool's driver, and the pod that uses it
        ns = val['namespace']
        name = 'gpu-validate-dra-' + ctx.pool
        # in the resource.k8s.io version the cluster's minor serves (the stack's render says which)
        template = claim_templates([{'name': name, 'kind': 'gpu'}], ns, var=ctx.var('validation'),
                                   api_version=claim_api_version or RESOURCE_API[0][1])[0]
        template['metadata'] = ctx.meta(name, namespace=ns, scope='validation')
        pod = validation_pod(ctx, name, ns, image, template, scheduler_name)
        if runtime_class_name:
            pod['spec']['runtimeClassName'] = runtime_class_name
        return [template, pod]

    def migration_labels(self) -> dict[str, str]:
        # the labels every node of a dra pool carries besides the strategy and pool labels (DRA-12)
        return {OPERATOR_DEVICE_PLUGIN_LABEL: OPERATOR_DEVICE_PLUGIN_OFF}

    def serving_sign(self, resource: str) -> dict:
        # the driver's ResourceSlices on the node
        return {'kind': 'slice', 'driver': DRIVER}


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry)."""
    return DraStack(name)
