# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU operator: Helm values for kubernetes.core.helm with a local chart (.tgz) path."""

from __future__ import annotations

from typing import Any
import hashlib
import json
import os
import re
import sys

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    CHART_VERSION, StackError, chart_family, chart_yaml_version, check_name, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Manifest, Settings

CONFIG_LABEL = 'nvidia.com/device-plugin.config'
MIG_CONFIG_LABEL = 'nvidia.com/mig.config'

# Per chart release family (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml and templates at the named tag):
# the components' image repositories (with a mirror only the registry host is rewritten; image names and versions
# stay as the chart sets them), and the keys the chart's templates read.  The validator and node-status-exporter moved
# from nvcr.io/nvidia/cloud-native/gpu-operator-validator to nvcr.io/nvidia/gpu-operator in v25.10;
# operator.defaultRuntime was dropped in v25.3; cdi.default is read up to v25.10 only; cdi.enabled defaults to true
# from v25.10.
_REPOS_OLD = {
    'operator': 'nvcr.io/nvidia', 'validator': 'nvcr.io/nvidia/cloud-native', 'driver': 'nvcr.io/nvidia',
    'toolkit': 'nvcr.io/nvidia/k8s', 'devicePlugin': 'nvcr.io/nvidia', 'dcgmExporter': 'nvcr.io/nvidia/k8s',
    'gfd': 'nvcr.io/nvidia', 'migManager': 'nvcr.io/nvidia/cloud-native',
    'nodeStatusExporter': 'nvcr.io/nvidia/cloud-native',
}
_REPOS_NEW = dict(_REPOS_OLD, validator='nvcr.io/nvidia', nodeStatusExporter='nvcr.io/nvidia')
CHARTS: dict[tuple[int, int], dict[str, Any]] = {
    (24, 9): {'tag': 'v24.9.2', 'device_plugin': (0, 17, 0), 'repositories': _REPOS_OLD, 'default_runtime': True, 'cdi_default': True,
              'cdi_enabled_default': False, 'outdated': True},
    (25, 3): {'tag': 'v25.3.4', 'device_plugin': (0, 17, 4), 'repositories': _REPOS_OLD, 'default_runtime': False, 'cdi_default': True,
              'cdi_enabled_default': False, 'outdated': True},
    (25, 10): {'tag': 'v25.10.1', 'device_plugin': (0, 18, 1), 'repositories': _REPOS_NEW, 'default_runtime': False, 'cdi_default': True,
               'cdi_enabled_default': True, 'outdated': False},
    (26, 3): {'tag': 'v26.3.3', 'device_plugin': (0, 19, 3), 'repositories': _REPOS_NEW, 'default_runtime': False, 'cdi_default': False,
              'cdi_enabled_default': True, 'outdated': False},
    (26, 7): {'tag': 'v26.7.0', 'device_plugin': (0, 20, 0), 'repositories': _REPOS_NEW, 'default_runtime': False, 'cdi_default': False,
              'cdi_enabled_default': True, 'outdated': False},
}
# Every image the chart can pull at each release (deployments/gpu-operator/values.yaml at the tag: each map with a
# repository and an image), as value path -> (source repository, image, when the collection's settings enable it).
# 'always': pulled with the collection's settings (enabled by the chart's defaults, which the collection keeps);
# 'driver' / 'toolkit': with driver_enabled / toolkit_enabled; 'never': disabled by default or sandbox workloads
# only, which the collection never enables. The node-feature-discovery subchart's image is mirrored apart.
_IMAGES_COMMON = {
    'operator': ('nvcr.io/nvidia', 'gpu-operator', 'always'),
    'driver': ('nvcr.io/nvidia', 'driver', 'driver'),
    'driver.manager': ('nvcr.io/nvidia/cloud-native', 'k8s-driver-manager', 'driver'),
    'toolkit': ('nvcr.io/nvidia/k8s', 'container-toolkit', 'toolkit'),
    'devicePlugin': ('nvcr.io/nvidia', 'k8s-device-plugin', 'always'),
    'dcgm': ('nvcr.io/nvidia/cloud-native', 'dcgm', 'never'),
    'dcgmExporter': ('nvcr.io/nvidia/k8s', 'dcgm-exporter', 'always'),
    'gfd': ('nvcr.io/nvidia', 'k8s-device-plugin', 'always'),
    'migManager': ('nvcr.io/nvidia/cloud-native', 'k8s-mig-manager', 'always'),
    'gds': ('nvcr.io/nvidia/cloud-native', 'nvidia-fs', 'never'),
    'gdrcopy': ('nvcr.io/nvidia/cloud-native', 'gdrdrv', 'never'),
    'vgpuManager.driverManager': ('nvcr.io/nvidia/cloud-native', 'k8s-driver-manager', 'never'),
    'vgpuDeviceManager': ('nvcr.io/nvidia/cloud-native', 'vgpu-device-manager', 'never'),
    'vfioManager.driverManager': ('nvcr.io/nvidia/cloud-native', 'k8s-driver-manager', 'never'),
    'sandboxDevicePlugin': ('nvcr.io/nvidia', 'kubevirt-gpu-device-plugin', 'never'),
    'ccManager': ('nvcr.io/nvidia/cloud-native', 'k8s-cc-manager', 'never'),
}
_IMAGES_OLD = dict(_IMAGES_COMMON, **{
    'validator': ('nvcr.io/nvidia/cloud-native', 'gpu-operator-validator', 'always'),
    'nodeStatusExporter': ('nvcr.io/nvidia/cloud-native', 'gpu-operator-validator', 'always'),
    # the CUDA base image the operator gives its operands as init container (ClusterPolicy operator.initContainer)
    'operator.initContainer': ('nvcr.io/nvidia', 'cuda', 'always'),
    'vfioManager': ('nvcr.io/nvidia', 'cuda', 'never'),
    'kataManager': ('nvcr.io/nvidia/cloud-native', 'k8s-kata-manager', 'never'),
})
_IMAGES_25_10 = dict(_IMAGES_OLD, **{
    'validator': ('nvcr.io/nvidia', 'gpu-operator', 'always'),
    'nodeStatusExporter': ('nvcr.io/nvidia', 'gpu-operator', 'always'),
})
_IMAGES_26 = dict(_IMAGES_COMMON, **{
    'validator': ('nvcr.io/nvidia', 'gpu-operator', 'always'),
    'nodeStatusExporter': ('nvcr.io/nvidia', 'gpu-operator', 'always'),
    'vfioManager': ('nvcr.io/nvidia/cloud-native', 'k8s-driver-manager', 'never'),
    'kataSandboxDevicePlugin': ('nvcr.io/nvidia/cloud-native', 'nvidia-sandbox-device-plugin', 'never'),
})
_IMAGES_26_7 = dict(_IMAGES_26, draDriver=('nvcr.io/nvidia', 'dra-driver-nvidia-gpu', 'never'))
CHART_IMAGES = {(24, 9): _IMAGES_OLD, (25, 3): _IMAGES_OLD, (25, 10): _IMAGES_25_10, (26, 3): _IMAGES_26,
                (26, 7): _IMAGES_26_7}
# value paths whose map has no imagePullSecrets of its own (driver.manager takes driver's)
_NO_PULL_SECRETS = frozenset(['driver.manager'])
CURRENT_CHART = pins.ref('gpu-operator')
# device_plugin above: devicePlugin.version of each release's values.yaml. Device plugins before v0.20.0 force
# sharing.mps.failRequestsGreaterThanOne on (k8s-device-plugin api/config/v1/config.go, v0.17.1 and v0.20.0).
MPS_FAIL_REQUESTS_HONOURED = (0, 20, 0)
# Kept for callers that list the repositories of the newest chart.
COMPONENT_REPOSITORIES = _REPOS_NEW

# Values this renderer may set, as dotted paths (every one is read by the chart's templates at the versions above);
# checked on every render because no helm binary renders the chart here.
DOCUMENTED_VALUE_KEYS = frozenset(
    ['%s.%s' % (c, k) for c in _REPOS_OLD for k in ('repository', 'imagePullSecrets')]
    + ['driver.enabled', 'toolkit.enabled', 'devicePlugin.enabled', 'migManager.enabled', 'mig.strategy',
       'devicePlugin.config.create', 'devicePlugin.config.name', 'devicePlugin.config.default', 'devicePlugin.config.data',
       'migManager.config.name', 'migManager.config.default', 'daemonsets.tolerations', 'daemonsets.priorityClassName',
       'node-feature-discovery.image.repository', 'node-feature-discovery.imagePullSecrets', 'nfd.enabled',
       'operator.defaultRuntime', 'cdi.enabled', 'cdi.default', 'driver.manager.repository',
       'operator.initContainer.repository', 'operator.initContainer.imagePullSecrets', 'operator.runtimeClass'])

# The RuntimeClass the operator creates (values.yaml operator.runtimeClass, default nvidia, at every release of CHARTS;
# the operator makes it in its pre-requisites state after the ClusterPolicy is reconciled, not the chart:
# controllers/object_controls.go RuntimeClasses and assets/pre-requisites/0200_runtime_class.yaml, v26.7.0; GPUOP-11).
RUNTIME_CLASS = 'nvidia'

GPU_OPERATOR_SCHEMA = {
    'chart_path': dict(type=str, default='', description='Local chart (.tgz or directory) on the controller; required for this strategy.'),
    'chart_version': dict(type=str, default='',
                          description=("Chart release (v24.9.x, v25.3.x, v25.10.x, v26.3.x, v26.7.x); empty to read the chart's Chart.yaml (or the version "
                                       "in the file name). Values are emitted per release.",)),
    'release_name': dict(type=str, default='gpu-operator', description='Helm release name.'),
    'namespace': dict(type=str, default='gpu-operator', description='Release namespace.'),
    'driver_enabled': dict(type=bool, default=False, description='Let the operator install the driver (false when role nvidia_driver installed it).'),
    'toolkit_enabled': dict(type=bool, default=False, description='Let the operator install the container toolkit.'),
    'sharing': dict(type=str, default='none', choices=['none', 'time-slicing', 'mps'], description='Device plugin sharing.'),
    'replicas': dict(type=int, default=4, min=2, description='Replicas per GPU for time-slicing/MPS.'),
    'rename_by_default': dict(type=bool, default=False, description='renameByDefault.'),
    'fail_requests_greater_than_one': dict(type=bool, default=True, description='failRequestsGreaterThanOne.'),
    'mig_strategy': dict(type=str, default='none', choices=['none', 'single', 'mixed'], description='MIG strategy.'),
    'mig_manager': dict(type=bool, default=False, description="Enable the operator's MIG manager."),
    'mig_config': dict(type=str, default='all-disabled', description="C(nvidia.com/mig.config) label value for the pool's nodes."),
    'default_runtime': dict(type=str, default=None, choices=['containerd', 'docker', 'crio'],
                            description='Container runtime (operator.defaultRuntime); only chart v24.9 reads it, newer charts refuse it.'),
    'nfd_enabled': dict(type=bool, default=True, description='Deploy node-feature-discovery.'),
    'cdi_enabled': dict(type=bool, default=None, description="Set cdi.enabled; unset keeps the chart's default (false up to v25.3, true from v25.10)."),
    'runtime_class': dict(type=str, default=RUNTIME_CLASS, description=(
        "Name of the RuntimeClass the operator creates once its ClusterPolicy is reconciled (chart value "
        "C(operator.runtimeClass), C(nvidia) by default) and the pool's GPU pods (the validation pod too) name. The role's "
        "entry point C(ready) waits for it after the Helm install before it applies the validation workloads.",)),
}

# Chart.yaml versions that name no release: the source tree's (v1.0.0-devel) and the OCI development builds'
# (0.0.0-git-<sha>); NVIDIA/gpu-operator deployments/gpu-operator/Chart.yaml and .github/workflows at v26.7.0
_UNRELEASED = re.compile(r'^(v?1\.0\.0-devel|v?0\.0\.0-git-.*)$')


def chart_release(go: dict[str, Any], var: str) -> tuple[tuple[int, int], str]:
    """(family key, version text) of the chart: chart_version, else the chart's Chart.yaml, else the file name."""
    text = go['chart_version']
    if not text:
        text = chart_yaml_version(go['chart_path'])
        if text and _UNRELEASED.match(text):
            # the source tree's Chart.yaml says v1.0.0-devel at every tag; release packaging sets the version
            # (helm package --version <tag>), development builds 0.0.0-git-<sha>: neither names a release
            raise StackError('%s: the gpu-operator chart at %s says version %s, which is a chart from the source tree '
                             'or a development build, not a release (released charts carry their release, e.g. %s): '
                             'set %s.chart_version to the release it was taken from, or use the released chart '
                             '(helm pull nvidia/gpu-operator --version %s)'
                             % (var, go['chart_path'], text, CURRENT_CHART, var, CURRENT_CHART))
    if not text:
        m = CHART_VERSION.search(os.path.basename(go['chart_path'].rstrip('/')))
        text = m.group(0) if m else ''
    return chart_family(text, CHARTS, var, 'gpu-operator', CURRENT_CHART)


def leaf_paths(values: dict[str, Any], prefix: str = '') -> list[str]:
    """Dotted paths of the leaves of a values dict (dicts under *.data are leaves)."""
    out: list[str] = []
    for k, v in values.items():
        p = prefix + k
        if isinstance(v, dict) and v and not p.endswith('.data'):
            out.extend(leaf_paths(v, p + '.'))
        else:
            out.append(p)
    return out


# Confinement of the one operator to its own pools' nodes. The operator labels every node it finds with
# nvidia.com/gpu.present=true (which role gpu_node_labels writes on every GPU node) with its deploy labels, and its
# operands (device plugin, GPU feature discovery, MIG manager, DCGM, validator, driver, toolkit) follow them
# (controllers/state_manager.go gpuStateLabels, addGPUStateLabels: a label already set keeps its value); a node
# carrying nvidia.com/gpu.deploy.operands=false gets all of them removed and runs no operand (hasOperandsDisabled,
# removeAllGPUStateLabels; v26.7.0; GPUOP-13). The nodes of every pool of another strategy carry it: their own stack
# advertises the GPUs and the node layer gives them the driver and the toolkit. dra pools keep their narrower label
# (stacks/dra OPERATOR_DEVICE_PLUGIN_LABEL): the DRA driver may use the operator's driver container.
OPERANDS_LABEL = 'nvidia.com/gpu.deploy.operands'
OPERANDS_OFF = 'false'


def confinement_labels(strategy: str) -> dict[str, str]:
    """The labels that keep the GPU operator's operands off a node of a pool of ``strategy``: every node-level
    strategy (its own device plugin on the node; gpu-operator and dra are whole-cluster stacks, see above)."""
    return {OPERANDS_LABEL: OPERANDS_OFF} if gpu_strategy.strategy(strategy)['node_strategy'] else {}


# The device plugin's config ConfigMap the chart creates (devicePlugin.config.create/name/data): named after its
# content, not after a pool. The one release serves every gpu-operator pool, so a pool's name in it would flip on
# every run of each pool; and the operator mounts the ConfigMap as a volume named after devicePlugin.config.name
# while config-manager follows only the node label nvidia.com/device-plugin.config (controllers/object_controls.go
# handleDevicePluginConfig, addSharedMountsForPluginConfig, v26.7.0; GPUOP-12): a new name on a new content changes
# the DaemonSet's pod template, so a changed time-slicing or MPS config reaches the running device plugins.
DEVICE_PLUGIN_CONFIG_PREFIX = 'gpuops-device-plugin-config-'


def device_plugin_config_name(data: dict[str, str]) -> str:
    """The ConfigMap name for the device plugin config ``data`` (config name -> text): prefix + content hash."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode('utf-8')).hexdigest()
    return DEVICE_PLUGIN_CONFIG_PREFIX + digest[:10]


def render(ctx: Ctx, settings: Settings, nodes: list[str],
           facts: dict[str, Any]) -> tuple[list[Manifest], dict[str, dict[str, str]], list[str], dict[str, Any], dict[str, Any]]:
    var = ctx.var('gpu_operator')
    go = validate_settings(settings.get('gpu_operator'), GPU_OPERATOR_SCHEMA, var)
    check_name(go['namespace'], var + '.namespace')
    if not go['chart_path']:
        raise StackError('%s.chart_path must be the path of the gpu-operator chart on the controller (a .tgz from '
                         '"helm pull nvidia/gpu-operator --version vXX.Y.Z", or an unpacked chart directory)' % var)
    chart_key, version = chart_release(go, var)
    chart = CHARTS[chart_key]
    if chart['outdated']:
        ctx.warn('%s: gpu-operator chart %s is an older release; move to %s' % (var, version, CURRENT_CHART))
    if go['sharing'] == 'mps' and not go['fail_requests_greater_than_one'] and chart['device_plugin'] < MPS_FAIL_REQUESTS_HONOURED:
        raise StackError('%s.fail_requests_greater_than_one: false has no effect with gpu-operator chart %s: its device '
                         'plugin v%s forces it on for MPS (honoured from v%s, chart %s). Remove the setting, or use '
                         'chart %s' % (var, version, '.'.join(str(x) for x in chart['device_plugin']),
                                       '.'.join(str(x) for x in MPS_FAIL_REQUESTS_HONOURED), CURRENT_CHART, CURRENT_CHART))
    if go['sharing'] != 'none' and go['mig_strategy'] == 'mixed':
        raise StackError('%s.sharing %s cannot be combined with %s.mig_strategy mixed' % (var, go['sharing'], var))
    values: dict[str, Any] = {'driver': {'enabled': go['driver_enabled']}, 'toolkit': {'enabled': go['toolkit_enabled']},
                              'devicePlugin': {'enabled': True}, 'nfd': {'enabled': go['nfd_enabled']},
                              'migManager': {'enabled': go['mig_manager']},
                              # always set: the chart's own default is single, so "none" has to be said
                              'mig': {'strategy': go['mig_strategy']}}
    if go['default_runtime'] is not None:
        if not chart['default_runtime']:
            raise StackError('%s.default_runtime has no effect with gpu-operator chart %s (operator.defaultRuntime was '
                             'removed in v25.3; the operator detects the runtime); remove it' % (var, version))
        values['operator'] = {'defaultRuntime': go['default_runtime']}
    check_name(go['runtime_class'], var + '.runtime_class')
    if go['runtime_class'] != RUNTIME_CLASS:
        values.setdefault('operator', {})['runtimeClass'] = go['runtime_class']
    if go['cdi_enabled'] is not None and go['cdi_enabled'] != chart['cdi_enabled_default']:
        values['cdi'] = {'enabled': go['cdi_enabled']}
    if not go['driver_enabled']:
        ctx.note('%s.driver_enabled is false: the operator expects the driver installed on the nodes (role '
                 'gpuops.k8s_gpu.nvidia_driver).' % var)
    cfg_name = 'default'
    if go['sharing'] != 'none':
        key = 'timeSlicing' if go['sharing'] == 'time-slicing' else 'mps'
        cfg_name = go['sharing']
        cfg = {'version': 'v1', 'flags': {'migStrategy': go['mig_strategy']},
               'sharing': {key: {'renameByDefault': go['rename_by_default'],
                                 'failRequestsGreaterThanOne': go['fail_requests_greater_than_one'],
                                 'resources': [{'name': 'nvidia.com/gpu', 'replicas': go['replicas']}]}}}
        data = {cfg_name: json.dumps(cfg, indent=2, sort_keys=True)}
        values['devicePlugin']['config'] = {'create': True, 'name': device_plugin_config_name(data),
                                            'default': cfg_name, 'data': data}
    if go['sharing'] == 'mps':
        for node in nodes:
            mps = ((facts.get(node) or {}).get('sharing') or {}).get('mps') or {}
            if facts.get(node) and not mps.get('allowed'):
                raise StackError('%s.sharing mps is not possible on %s: %s' % (var, node, mps.get('reason', 'not allowed')))
    if go['mig_manager']:
        # the default geometry only: a config name, even that of the operator's own default-mig-parted-config, makes
        # the operator treat it as a custom config (hasCustomConfig: config.yaml instead of its hardware-generated
        # config-default.yaml fallback; controllers/object_controls.go, v26.7.0; GPUOP-14)
        values['migManager']['config'] = {'default': 'all-disabled'}
        for node in nodes:
            mig = ((facts.get(node) or {}).get('sharing') or {}).get('mig') or {}
            if facts.get(node) and not mig.get('allowed'):
                raise StackError('%s.mig_manager is true but %s cannot use MIG: %s' % (var, node, mig.get('reason', '')))
    pull = list(ctx.image_pull_secrets)
    for comp, repo in sorted(chart['repositories'].items()):
        if ctx.registry:
            values.setdefault(comp, {})['repository'] = ctx.registry + '/' + repo.split('/', 1)[1]
        if pull:
            values.setdefault(comp, {})['imagePullSecrets'] = list(pull)
    # the other images the chart pulls with these settings (CHART_IMAGES): mirrored as well
    enabled = {'always': True, 'driver': go['driver_enabled'], 'toolkit': go['toolkit_enabled'], 'never': False}
    for path, (repo, _image, when) in sorted(CHART_IMAGES[chart_key].items()):
        if not enabled[when] or path in chart['repositories'] or not (ctx.registry or (pull and path not in _NO_PULL_SECRETS)):
            continue
        entry = values
        for part in path.split('.'):
            entry = entry.setdefault(part, {})
        if ctx.registry:
            entry['repository'] = ctx.registry + '/' + repo.split('/', 1)[1]
        if pull and path not in _NO_PULL_SECRETS:
            entry['imagePullSecrets'] = list(pull)
    if ctx.registry:
        values['node-feature-discovery'] = {'image': {'repository': ctx.registry + '/nfd/node-feature-discovery'}}
    if pull:
        values.setdefault('node-feature-discovery', {})['imagePullSecrets'] = [{'name': s} for s in pull]
    undocumented = [p for p in leaf_paths(values) if p not in DOCUMENTED_VALUE_KEYS]
    if undocumented:
        raise StackError('internal: gpu-operator values %s are not in the documented key list' % ', '.join(undocumented))
    labels: dict[str, dict[str, str]] = {}
    for node in nodes:
        labels[node] = {}
        if go['sharing'] != 'none':
            labels[node][CONFIG_LABEL] = cfg_name
        if go['mig_manager']:
            labels[node][MIG_CONFIG_LABEL] = go['mig_config']
    helm = {'chart_ref': go['chart_path'], 'release_name': go['release_name'], 'release_namespace': go['namespace'],
            'create_namespace': True, 'values': values, 'chart_version': version}
    res = 'nvidia.com/gpu.shared' if go['sharing'] != 'none' and go['rename_by_default'] else 'nvidia.com/gpu'
    return [], labels, [res], {res: '1'}, helm


SETTINGS = {'gpu_operator': GPU_OPERATOR_SCHEMA}

# What every gpu-operator pool of a cluster shares: the one Helm release (one ClusterPolicy per cluster). Every setting
# enters its values but mig_config (a label of the pool's nodes). Pools whose values differ are refused by the plan.
SHARED = {'settings': 'gpu_operator', 'keys': tuple(k for k in GPU_OPERATOR_SCHEMA if k != 'mig_config'),
          'pool_variables': ('gpu_sharing_stack_registry', 'gpu_sharing_stack_image_pull_secrets'),
          'objects': "the GPU operator's one Helm release (its ClusterPolicy is one per cluster)"}


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS); the GPU operator is a Helm release."""
    manifests, labels, resources, limits, helm = render(ctx, settings, nodes, facts)
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits, 'helm': helm}


class OperatorStack(Stack):
    """The GPU operator: one Helm release for every gpu-operator pool (SHARED); its operands land on every node labelled
    nvidia.com/gpu.present, so the nodes of the node-level pools carry confinement_labels; its pods name the operator's
    RuntimeClass."""
    shared = SHARED
    asks_nvidia_gpu = True
    places_on_every_gpu_node = True

    def __init__(self, name: str) -> None:
        super(OperatorStack, self).__init__(name)
        self.shared_module = sys.modules[__name__]

    def keep_off_labels(self, strategy: str) -> dict[str, str]:
        return confinement_labels(strategy)

    def migration_settings_labels(self) -> list[str]:
        # render above: the device plugin config (named after its content) and the MIG config, from the settings
        return sorted({CONFIG_LABEL, MIG_CONFIG_LABEL})

    def deploy_label_conflict(self, mine: list[str], followers: list[str]) -> str:
        """The refusal of this strategy's pools ``mine`` beside pools whose agents go by the operator's deploy labels
        (``followers``: mig pools with the MIG manager)."""
        return ('gpu-operator pool(s) %s and mig pool(s) %s with the MIG manager cannot share a cluster: the mig pools\' '
                'device plugin and MIG manager go by the nodes\' nvidia.com/gpu.deploy.device-plugin and '
                'nvidia.com/gpu.deploy.mig-manager labels, which the GPU operator writes to run its own device plugin '
                'and MIG manager there (or removes, with nvidia.com/gpu.deploy.operands=false); set '
                'gpu_sharing_stack_mig.manager: false for %s (the node layer applies the geometry), or run MIG through '
                'the gpu-operator pool (gpu_sharing_stack_gpu_operator.mig_manager)'
                % (', '.join(mine), ', '.join(followers), ', '.join(followers)))

    def pod_runtime_class(self, settings: dict, var: str) -> str:
        return validate_settings(settings.get('gpu_operator'), GPU_OPERATOR_SCHEMA, var + 'gpu_operator')['runtime_class']


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry)."""
    return OperatorStack(name)
