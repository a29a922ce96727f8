# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU operator: Helm values for kubernetes.core.helm with a local chart (.tgz) path."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils.gpu_stack_common import (
    StackError, check_name, validate_settings,
)

CONFIG_LABEL = 'nvidia.com/device-plugin.config'
MIG_CONFIG_LABEL = 'nvidia.com/mig.config'

# Default image repositories of the chart's components (nvcr.io); with a mirror only the repository is rewritten,
# image names and versions stay as the (pinned) local chart sets them.
COMPONENT_REPOSITORIES = {
    'operator': 'nvcr.io/nvidia',
    'validator': 'nvcr.io/nvidia/cloud-native',
    'driver': 'nvcr.io/nvidia',
    'toolkit': 'nvcr.io/nvidia/k8s',
    'devicePlugin': 'nvcr.io/nvidia',
    'dcgmExporter': 'nvcr.io/nvidia/k8s',
    'gfd': 'nvcr.io/nvidia',
    'migManager': 'nvcr.io/nvidia/cloud-native',
    'nodeStatusExporter': 'nvcr.io/nvidia/cloud-native',
}

# Keys of the gpu-operator chart's values.yaml (v24.x) that this renderer may set, as dotted paths; the lab and unit
# tests check every rendered leaf against this list because no helm binary is available to render the chart.
DOCUMENTED_VALUE_KEYS = frozenset(
    ['%s.%s' % (c, k) for c in COMPONENT_REPOSITORIES for k in ('repository', 'imagePullSecrets')]
    + ['driver.enabled', 'toolkit.enabled', 'devicePlugin.enabled', 'migManager.enabled', 'mig.strategy',
       'devicePlugin.config.create', 'devicePlugin.config.name', 'devicePlugin.config.default', 'devicePlugin.config.data',
       'migManager.config.name', 'migManager.config.default', 'daemonsets.tolerations', 'daemonsets.priorityClassName',
       'node-feature-discovery.image.repository', 'node-feature-discovery.imagePullSecrets', 'nfd.enabled',
       'operator.defaultRuntime', 'cdi.enabled', 'cdi.default'])

GPU_OPERATOR_SCHEMA = {
    'chart_path': dict(type=str, default=''),
    'release_name': dict(type=str, default='gpu-operator'),
    'namespace': dict(type=str, default='gpu-operator'),
    'driver_enabled': dict(type=bool, default=False),
    'toolkit_enabled': dict(type=bool, default=False),
    'sharing': dict(type=str, default='none', choices=['none', 'time-slicing', 'mps']),
    'replicas': dict(type=int, default=4, min=2),
    'rename_by_default': dict(type=bool, default=False),
    'fail_requests_greater_than_one': dict(type=bool, default=True),
    'mig_strategy': dict(type=str, default='none', choices=['none', 'single', 'mixed']),
    'mig_manager': dict(type=bool, default=False),
    'mig_config': dict(type=str, default='all-disabled'),
    'default_runtime': dict(type=str, default='containerd', choices=['containerd', 'docker', 'crio']),
    'nfd_enabled': dict(type=bool, default=True),
    'cdi_enabled': dict(type=bool, default=False),
}


def leaf_paths(values, prefix=''):
    """Dotted paths of the leaves of a values dict (dicts under *.data are leaves)."""
    out = []
    for k, v in values.items():
        p = prefix + k
        if isinstance(v, dict) and v and not p.endswith('.data'):
            out.extend(leaf_paths(v, p + '.'))
        else:
            out.append(p)
    return out


def render(ctx, settings, nodes, facts):
    var = ctx.var('gpu_operator')
    go = validate_settings(settings.get('gpu_operator'), GPU_OPERATOR_SCHEMA, var)
    check_name(go['namespace'], var + '.namespace')
    if not go['chart_path']:
        raise StackError('%s.chart_path must be the path of the gpu-operator chart on the controller (a .tgz from '
                         '"helm pull nvidia/gpu-operator --version vXX.Y.Z", or an unpacked chart directory)' % var)
    if go['sharing'] != 'none' and go['mig_strategy'] == 'mixed':
        raise StackError('%s.sharing %s cannot be combined with %s.mig_strategy mixed' % (var, go['sharing'], var))
    values = {'driver': {'enabled': go['driver_enabled']}, 'toolkit': {'enabled': go['toolkit_enabled']},
              'devicePlugin': {'enabled': True}, 'operator': {'defaultRuntime': go['default_runtime']},
              'nfd': {'enabled': go['nfd_enabled']}, 'cdi': {'enabled': go['cdi_enabled'], 'default': False},
              'migManager': {'enabled': go['mig_manager']}}
    if go['mig_strategy'] != 'none':
        values['mig'] = {'strategy': go['mig_strategy']}
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
        values['devicePlugin']['config'] = {'create': True, 'name': 'device-plugin-config-' + ctx.pool,
                                            'default': cfg_name, 'data': {cfg_name: json.dumps(cfg, indent=2, sort_keys=True)}}
    if go['sharing'] == 'mps':
        for node in nodes:
            mps = ((facts.get(node) or {}).get('sharing') or {}).get('mps') or {}
            if facts.get(node) and not mps.get('allowed'):
                raise StackError('%s.sharing mps is not possible on %s: %s' % (var, node, mps.get('reason', 'not allowed')))
    if go['mig_manager']:
        values['migManager']['config'] = {'name': 'default-mig-parted-config', 'default': 'all-disabled'}
        for node in nodes:
            mig = ((facts.get(node) or {}).get('sharing') or {}).get('mig') or {}
            if facts.get(node) and not mig.get('allowed'):
                raise StackError('%s.mig_manager is true but %s cannot use MIG: %s' % (var, node, mig.get('reason', '')))
    pull = list(ctx.image_pull_secrets)
    for comp, repo in sorted(COMPONENT_REPOSITORIES.items()):
        part = values.setdefault(comp, {})
        if ctx.registry:
            part['repository'] = ctx.registry + '/' + repo.split('/', 1)[1]
        if pull:
            part['imagePullSecrets'] = list(pull)
    if ctx.registry:
        values['node-feature-discovery'] = {'image': {'repository': ctx.registry + '/nfd/node-feature-discovery'}}
        if pull:
            values['node-feature-discovery']['imagePullSecrets'] = [{'name': s} for s in pull]
    undocumented = [p for p in leaf_paths(values) if p not in DOCUMENTED_VALUE_KEYS]
    if undocumented:
        raise StackError('internal: gpu-operator values %s are not in the documented key list' % ', '.join(undocumented))
    labels = {}
    for node in nodes:
        labels[node] = {}
        if go['sharing'] != 'none':
            labels[node][CONFIG_LABEL] = cfg_name
        if go['mig_manager']:
            labels[node][MIG_CONFIG_LABEL] = go['mig_config']
    helm = {'chart_ref': go['chart_path'], 'release_name': go['release_name'], 'release_namespace': go['namespace'],
            'create_namespace': True, 'values': values}
    res = 'nvidia.com/gpu.shared' if go['sharing'] != 'none' and go['rename_by_default'] else 'nvidia.com/gpu'
    return [], labels, [res], {res: '1'}, helm
