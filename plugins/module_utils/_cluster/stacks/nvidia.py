# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA k8s-device-plugin stacks: exclusive, time-slicing, MPS, MIG (with mig-parted config)."""

from __future__ import annotations

from typing import Any
import copy
import json
import re

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy, pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import (
    MIG_RESOURCE, NVIDIA_PLUGIN_STRATEGIES, mig_config_name)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.base import Stack

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    GPU_TOLERATION, MANAGED_BY, REPLICAS_LABEL, SCOPE_LABEL, STACK_LABEL, StackError, check_name, cluster_role,
    cluster_role_binding, config_checksum, config_map, daemonset, hostpath_volume, node_name_env, pod_spec_common, service_account,
    split_image, validate_settings,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import Ctx, Manifest, Rendered, Settings

CONFIG_LABEL = 'nvidia.com/device-plugin.config'
MIG_CONFIG_LABEL = 'nvidia.com/mig.config'
MIG_STATE_LABEL = 'nvidia.com/mig.config.state'
MPS_CAPABLE_LABEL = 'nvidia.com/mps.capable'
# mig-manager pauses the device plugin through this node label (true -> paused-for-mig-change -> true) and waits
# for the pods labelled app=nvidia-device-plugin-daemonset on the node to go (mig-parted pkg/mig/reconfigure).
DEPLOY_PLUGIN_LABEL = 'nvidia.com/gpu.deploy.device-plugin'
DEPLOY_MIG_MANAGER_LABEL = 'nvidia.com/gpu.deploy.mig-manager'
PLUGIN_POD_APP = 'nvidia-device-plugin-daemonset'
SHARING_LABEL = 'nvidia.com/gpu.sharing-strategy'
NVIDIA_STRATEGIES = NVIDIA_PLUGIN_STRATEGIES  # from the strategy model (gpu_strategy)
CDI_STRATEGIES = ('cdi-annotations', 'cdi-cri')
CDI_FACT = 'nvidia_container_runtime_cdi_spec_ready'
# The node.k8s.io/v1 RuntimeClass the NVIDIA stacks share; labelled apart from any one pool or strategy.
RUNTIME_CLASS_STACK = 'nvidia-device-plugin'

DEVICE_PLUGIN_IMAGE = pins.ref('nvidia-device-plugin')
MIG_MANAGER_IMAGE = pins.ref('mig-manager')
# Pod template annotation with the configs' checksum (the chart's nvidia-device-plugin.podAnnotations at v0.20.0):
# config-manager reacts to the node label only, so a changed config under the same name must roll the pods.
CHECKSUM_ANNOTATION = 'checksum/config'
# First device plugin release that honours sharing.mps.failRequestsGreaterThanOne (older ones force it on).
MPS_FAIL_REQUESTS_HONOURED = (0, 20, 0)

# What the device plugin refuses at start (NVIDIA/k8s-device-plugin v0.20.0: api/config/v1/consts.go, resources.go
# NewResourceName, replicas.go, cmd/nvidia-device-plugin/main.go validateFlags; docs/conformance/nvidia-device-plugin.md
# DP-22..24, observed with the plugin v0.19.1 in lab/tests/oracles/test_device_plugin.py): refused here first.
MIG_STRATEGIES = ('none', 'single', 'mixed')
DEVICE_LIST_STRATEGIES = ('envvar', 'volume-mounts', 'cdi-annotations', 'cdi-cri')
DEVICE_ID_STRATEGIES = ('uuid', 'index')
RESOURCE_PREFIX = 'nvidia.com/'
MAX_RESOURCE_NAME = 63
_DNS_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')

NVIDIA_SCHEMA = {
    'image': dict(type=str, default=DEVICE_PLUGIN_IMAGE, description='Device plugin image (pinned).'),
    'fail_on_init_error': dict(type=bool, default=True, description='C(flags.failOnInitError).'),
    'device_list_strategy': dict(type=str, default='envvar',
                                 choices=['envvar', 'volume-mounts', 'cdi-annotations', 'cdi-cri'],
                                 description=('C(flags.plugin.deviceListStrategy).',
                                              "V(volume-mounts) adds CAP_SYS_ADMIN to the plugin container, as upstream's chart does; the runtime must "
                                              "accept device lists as volume mounts (C(accept-nvidia-visible-devices-as-volume-mounts)).",
                                              "V(cdi-annotations) and V(cdi-cri) mount the host's driver root (O(gpu_sharing_stack_nvidia.driver_root)) "
                                              "read-only at C(/driver-root) and are refused unless every node of the pool reports "
                                              "C(nvidia_container_runtime_cdi_spec_ready=true) (role nvidia_container_runtime with CDI enabled) or "
                                              "O(gpu_sharing_stack_nvidia.assume_cdi_spec_ready) is true.")),
    'pass_device_specs': dict(type=bool, default=False,
                              description="C(flags.plugin.passDeviceSpecs); runs the plugin container privileged, as upstream's chart does for it."),
    'priority_class_name': dict(type=str, default='system-node-critical', description='Priority class of the device plugin pods.'),
    'runtime_class_name': dict(type=str, default='nvidia',
                               description=('RuntimeClass every NVIDIA device plugin, MPS control daemon and MIG manager pod names (C(runtimeClassName)), '
                                            'so they run with the nvidia runtime on nodes where it is not the default.',
                                            "Empty omits C(runtimeClassName); then nvidia must be the node's default runtime "
                                            "(C(nvidia_container_runtime_set_as_default=true)).")),
    'runtime_class_create': dict(type=bool, default=True,
                                 description=('Create the RuntimeClass (handler C(nvidia)) when the cluster has none of that name. One that exists is used '
                                              'as it is and never changed; the one created here goes when the last NVIDIA pool is removed.',)),
    'driver_root': dict(type=str, default='/',
                        description='Host path of the NVIDIA driver installation (C(NVIDIA_DRIVER_ROOT)); used by the CDI strategies.'),
    'assume_cdi_spec_ready': dict(type=bool, default=False, description='Skip the check that every node reports a CDI specification (CDI strategies only).'),
    'extra_configs': dict(type=dict, default={},
                          description=("More named device plugin configurations (version v1) in the pool's ConfigMap.",
                                       'Each is checked as the device plugin checks it at start (MIG, list and id strategies, sharing resources, names, '
                                       'replicas of at least 2); C(sharing.mps) only in a pool of strategy C(mps), and not with C(migStrategy) mixed.')),
    'node_configs': dict(type=dict, default={}, description='Per node, the configuration name its C(nvidia.com/device-plugin.config) label selects.'),
}
TIME_SLICING_SCHEMA = {
    'replicas': dict(type=int, default=4, min=2, description='Replicas per GPU (at least 2).'),
    'rename_by_default': dict(type=bool, default=False, description='Advertise C(<resource>.shared) instead of the resource name.'),
    'fail_requests_greater_than_one': dict(type=bool, default=True, description='Refuse requests of more than one shared GPU.'),
    'resource_name': dict(type=str, default='nvidia.com/gpu',
                          description=('Resource to share, C(nvidia.com/) followed by lower-case letters, digits, C(-) and C(.) (63 characters in all); '
                                       'the device plugin refuses other names.',)),
}
MPS_SCHEMA = {
    'replicas': dict(type=int, default=4, min=2, description="MPS clients per GPU (2 to the facts' C(max_clients))."),
    'rename_by_default': dict(type=bool, default=False, description='Advertise C(<resource>.shared).'),
    'fail_requests_greater_than_one': dict(type=bool, default=True,
                                           description=('Refuse requests of more than one shared GPU (C(sharing.mps.failRequestsGreaterThanOne)).',
                                                        'V(false) needs device plugin v0.20.0 or newer (older releases force it on for MPS) and is refused '
                                                        'with an older O(gpu_sharing_stack_nvidia.image).')),
    'resource_name': dict(type=str, default='nvidia.com/gpu',
                          description=('Resource to share, C(nvidia.com/) followed by lower-case letters, digits, C(-) and C(.) (63 characters in all); '
                                       'the device plugin refuses other names.',)),
    'mps_root': dict(type=str, default='/run/nvidia/mps', description='Host directory of the MPS pipes and shared memory.'),
}
MIG_SCHEMA = {
    'strategy': dict(type=str, default='single', choices=['single', 'mixed'], description='Device plugin MIG strategy.'),
    'config_name': dict(type=str, default='',
                        description='mig-parted configuration name (the C(nvidia.com/mig.config) label); derived from O(gpu_sharing_stack_mig.devices) '
                                    'when empty.'),
    'devices': dict(type=dict, default={}, description='MIG profile -> count per GPU, for example C(1g.10gb: 7); one profile for V(single).'),
    'manager': dict(type=bool, default=True, description="Deploy NVIDIA's MIG manager to apply the geometry."),
    'manager_image': dict(type=str, default=MIG_MANAGER_IMAGE, description='MIG manager image.'),
    'with_reboot': dict(type=bool, default=False, description='Let the MIG manager reboot nodes when a MIG mode change needs it.'),
}


def _plugin_config(nv: dict[str, Any], mig_strategy: str = 'none', sharing: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {'version': 'v1',
                           'flags': {'migStrategy': mig_strategy, 'failOnInitError': nv['fail_on_init_error'],
                                     'plugin': {'passDeviceSpecs': nv['pass_device_specs'],
                                                'deviceListStrategy': [nv['device_list_strategy']]}}}
    if sharing:
        cfg['sharing'] = sharing
    return cfg


def resource_name_problem(name: Any, full: bool = True) -> str | None:
    """None when the device plugin takes ``name`` as the name of a shared resource, else why not. The plugin puts
    nvidia.com/ before a name without it; ``full`` asks for the full name (the collection's own settings, whose name
    it also hands to the validation pod)."""
    if not isinstance(name, str) or not name:
        return 'must be a resource name such as nvidia.com/gpu'
    if full and not name.startswith(RESOURCE_PREFIX):
        return 'must start with %s (the device plugin serves nvidia.com resources only)' % RESOURCE_PREFIX
    whole = name if name.startswith(RESOURCE_PREFIX) else RESOURCE_PREFIX + name
    if len(whole) > MAX_RESOURCE_NAME:
        return 'is longer than %d characters (%s)' % (MAX_RESOURCE_NAME, whole)
    if not _DNS_SUBDOMAIN.match(whole[len(RESOURCE_PREFIX):]):
        return ('must be nvidia.com/ followed by lower-case letters, digits, "-" and "." (a DNS subdomain); the device '
                'plugin refuses %s' % whole)
    return None


def _check_replicated(where: str, rr: Any) -> None:
    if not isinstance(rr, dict):
        raise StackError('%s must be a dictionary with resources; got %r' % (where, rr))
    for key in ('renameByDefault', 'failRequestsGreaterThanOne'):
        if key in rr and not isinstance(rr[key], bool):
            raise StackError('%s.%s must be true or false; got %r' % (where, key, rr[key]))
    res = rr.get('resources')
    if not isinstance(res, list) or not res:
        raise StackError('%s.resources must be a non-empty list of {name, replicas}; the device plugin refuses a sharing '
                         'section without resources' % where)
    for i, r in enumerate(res):
        at = '%s.resources[%d]' % (where, i)
        if not isinstance(r, dict):
            raise StackError('%s must be a dictionary with name and replicas; got %r' % (at, r))
        problem = resource_name_problem(r.get('name'), full=False)
        if problem:
            raise StackError('%s.name %r %s' % (at, r.get('name'), problem))
        n = r.get('replicas')
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise StackError('%s.replicas must be an integer of at least 2; got %r' % (at, n))
        dev = r.get('devices', 'all')
        ok = dev == 'all' or (isinstance(dev, int) and not isinstance(dev, bool) and dev > 0) or isinstance(dev, list)
        if not ok:
            raise StackError('%s.devices must be "all", a positive count or a list of GPU indexes/UUIDs; got %r' % (at, dev))


def check_plugin_config(where: str, cfg: dict[str, Any], strategy: str) -> None:
    """Refuse a device plugin configuration (an extra config) that the plugin would refuse at start, naming the key."""
    flags = cfg.get('flags') or {}
    if not isinstance(flags, dict):
        raise StackError('%s.flags must be a dictionary; got %r' % (where, flags))
    mig = flags.get('migStrategy')
    if mig is not None and mig not in MIG_STRATEGIES:
        raise StackError('%s.flags.migStrategy is %r; allowed: %s' % (where, mig, ', '.join(MIG_STRATEGIES)))
    plugin = flags.get('plugin') or {}
    if not isinstance(plugin, dict):
        raise StackError('%s.flags.plugin must be a dictionary; got %r' % (where, plugin))
    dls = plugin.get('deviceListStrategy')
    for v in ([dls] if isinstance(dls, str) else dls or []):
        if v not in DEVICE_LIST_STRATEGIES:
            raise StackError('%s.flags.plugin.deviceListStrategy has %r; allowed: %s'
                             % (where, v, ', '.join(DEVICE_LIST_STRATEGIES)))
    dis = plugin.get('deviceIDStrategy')
    if dis is not None and dis not in DEVICE_ID_STRATEGIES:
        raise StackError('%s.flags.plugin.deviceIDStrategy is %r; allowed: %s' % (where, dis, ', '.join(DEVICE_ID_STRATEGIES)))
    sharing = cfg.get('sharing') or {}
    if not isinstance(sharing, dict):
        raise StackError('%s.sharing must be a dictionary; got %r' % (where, sharing))
    for key in ('timeSlicing', 'mps'):
        if sharing.get(key) is not None:
            _check_replicated('%s.sharing.%s' % (where, key), sharing[key])
    if sharing.get('mps') is not None:
        if strategy != 'mps':
            raise StackError('%s.sharing.mps: only a pool of strategy mps runs the MPS control daemon and gives the '
                             'plugin its MPS root (the plugin refuses MPS without one); this pool is %s'
                             % (where, strategy))
        if mig == 'mixed':
            raise StackError('%s: sharing.mps with flags.migStrategy mixed; the device plugin does not support MPS with '
                             'the mixed MIG strategy (use none or single)' % where)


# the settings keys whose block shares each GPU N ways (its replicas: the config's sharing.timeSlicing / sharing.mps)
REPLICATED_SETTINGS = ('time_slicing', 'mps')


def config_replicas(cfg: dict[str, Any]) -> int | None:
    """The replicas per GPU of a device plugin configuration: its one shared resource's (time-slicing or MPS) when it
    applies to every GPU (devices all), else None - no sharing, or no one number per GPU (several resources, some
    GPUs only)."""
    sharing = cfg.get('sharing') or {}
    found = [r for key in ('timeSlicing', 'mps') for r in ((sharing.get(key) or {}).get('resources') or [])]
    if len(found) != 1 or found[0].get('devices', 'all') != 'all':
        return None
    return found[0].get('replicas')


def _replicated(settings: dict[str, Any]) -> dict[str, Any]:
    return {'renameByDefault': settings['rename_by_default'],
            'failRequestsGreaterThanOne': settings['fail_requests_greater_than_one'],
            'resources': [{'name': settings['resource_name'], 'replicas': settings['replicas']}]}


def _to_yaml_text(obj: Any) -> str:
    # JSON is valid YAML; sorted keys keep the text stable between runs (zero writes on re-run).
    return json.dumps(obj, indent=2, sort_keys=True) + '\n'


def _config_manager(image: str, oneshot: bool, default_config: str, process: str) -> dict[str, Any]:
    env = [
        {'name': 'ONESHOT', 'value': 'true' if oneshot else 'false'},
        {'name': 'KUBECONFIG', 'value': ''},
        node_name_env(),
        {'name': 'NODE_LABEL', 'value': CONFIG_LABEL},
        {'name': 'CONFIG_FILE_SRCDIR', 'value': '/available-configs'},
        {'name': 'CONFIG_FILE_DST', 'value': '/config/config.yaml'},
        {'name': 'DEFAULT_CONFIG', 'value': default_config},
        {'name': 'FALLBACK_STRATEGIES', 'value': 'named,single'},
        {'name': 'SEND_SIGNAL', 'value': 'false' if oneshot else 'true'},
        {'name': 'SIGNAL', 'value': '' if oneshot else '1'},
        {'name': 'PROCESS_TO_SIGNAL', 'value': '' if oneshot else process},
    ]
    # An empty variable is a name alone: the API server drops an EnvVar's empty value (omitempty), so an entry sent
    # with value "" never matches the stored object and every run would apply the DaemonSet again (found by the lab's
    # real kube-apiserver v1.37.2); the kubelet sets a variable without value to "" all the same.
    env = [e if e.get('value') != '' else {'name': e['name']} for e in env]
    return {'name': 'config-manager-init' if oneshot else 'config-manager', 'image': image,
            'command': ['config-manager'], 'env': env,
            'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
            'volumeMounts': [{'name': 'available-configs', 'mountPath': '/available-configs'},
                             {'name': 'config', 'mountPath': '/config'}]}


def _check_resource_name(var: str, name: Any) -> None:
    problem = resource_name_problem(name)
    if problem:
        raise StackError('%s.resource_name %r %s' % (var, name, problem))


def _check_facts(ctx: Ctx, strategy: str, nodes: list[str], facts: dict[str, Any], require_facts: bool) -> None:
    """MPS/MIG need hardware support: refuse with the node, GPU and reason from gpu_info's facts."""
    problems: list[str] = []
    for node in nodes:
        f = facts.get(node)
        if not f:
            if require_facts:
                problems.append('%s: no gpu_probe_facts (run role gpuops.k8s_gpu.gpu_probe on it first, or set %s: false)'
                                % (node, ctx.var('require_facts')))
            continue
        share = (f.get('sharing') or {}).get(strategy) or {}
        if not share.get('allowed'):
            problems.append('%s: %s' % (node, share.get('reason') or '%s not allowed by the probed hardware' % strategy))
    if problems:
        raise StackError('%s=%s is not possible on pool %s: %s' % (ctx.var('strategy'), strategy, ctx.pool, '; '.join(problems)))


def image_version(ref: str) -> tuple[int, ...] | None:
    """(major, minor, patch) of an image tag such as v0.20.0 or v0.15.0-ubuntu20.04; None when it has none."""
    tag = split_image(ref)[2] or ''
    m = re.match(r'^v?(\d+)\.(\d+)\.(\d+)', tag)
    return tuple(int(x) for x in m.groups()) if m else None


def _all_configs_flags(configs: dict[str, dict[str, Any]]) -> tuple[bool, bool, bool]:
    """(any migStrategy other than none, any volume-mounts strategy, any passDeviceSpecs) over every named config.

    The config-manager sidecar switches between the ConfigMap's configs when a node's label changes, so the pod must
    carry what the most demanding config needs (upstream's chart reasons over every config the same way)."""
    mig = vol = specs = False
    for cfg in configs.values():
        flags = cfg.get('flags') or {}
        plugin = flags.get('plugin') or {}
        if flags.get('migStrategy', 'none') not in (None, 'none'):
            mig = True
        strategies = plugin.get('deviceListStrategy') or []
        if isinstance(strategies, str):
            strategies = [strategies]
        if 'volume-mounts' in strategies:
            vol = True
        if plugin.get('passDeviceSpecs'):
            specs = True
    return mig, vol, specs


def plugin_security_context(configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The device plugin container's securityContext, as upstream's chart derives it (nvidia-device-plugin.securityContext):
    privileged for passDeviceSpecs (compatWithCPUManager), CAP_SYS_ADMIN added for MIG (NVIDIA_MIG_MONITOR_DEVICES=all)
    or the volume-mounts list strategy, otherwise no privilege escalation and every capability dropped."""
    mig, vol, specs = _all_configs_flags(configs)
    if specs:
        return {'privileged': True}
    if mig or vol:
        return {'capabilities': {'add': ['SYS_ADMIN']}}
    return {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}}


def _check_cdi(ctx: Ctx, nv: dict[str, Any], nodes: list[str], cdi_spec_ready: dict[str, Any] | None) -> None:
    """CDI list strategies need a CDI spec on every node: refuse unless the runtime role reported it (or the user asserts it)."""
    if nv['assume_cdi_spec_ready']:
        ctx.warn('%s.assume_cdi_spec_ready is true: the nodes are not checked for a CDI specification' % ctx.var('nvidia'))
        return
    var = '%s.device_list_strategy=%s' % (ctx.var('nvidia'), nv['device_list_strategy'])
    if not nodes:
        raise StackError('%s needs a CDI specification on every node, and with %snodes empty no node can be checked; '
                         'list the pool\'s nodes, or set %s.assume_cdi_spec_ready: true' % (var, ctx.var_prefix, ctx.var('nvidia')))
    known = cdi_spec_ready or {}
    missing = [n for n in nodes if n not in known]
    notready = [n for n in nodes if n in known and known[n] is not True]
    problems: list[str] = []
    if notready:
        problems.append('%s report %s=%s (run playbooks/node.yml with nvidia_container_runtime_cdi: true on them)'
                        % (', '.join(notready), CDI_FACT, ', '.join(str(known[n]) for n in notready)))
    if missing:
        problems.append('no %s fact for %s: run playbooks/node.yml with CDI enabled on them first (same play as the '
                        'cluster layer), or set %s.assume_cdi_spec_ready: true if the CDI spec is in place'
                        % (CDI_FACT, ', '.join(missing), ctx.var('nvidia')))
    if problems:
        raise StackError('%s needs a CDI specification (/var/run/cdi or /etc/cdi) on every node of pool %s: %s'
                         % (var, ctx.pool, '; '.join(problems)))


def runtime_class(name: str) -> Manifest:
    """The RuntimeClass the device plugin pods name (handler = the nvidia runtime the runtime role configures)."""
    return {'apiVersion': 'node.k8s.io/v1', 'kind': 'RuntimeClass', 'handler': 'nvidia',
            'metadata': {'name': name, 'labels': {
                'app.kubernetes.io/managed-by': MANAGED_BY, 'app.kubernetes.io/part-of': 'gpu-sharing-stack',
                STACK_LABEL: RUNTIME_CLASS_STACK, SCOPE_LABEL: 'shared'}}}


def _runtime_class(ctx: Ctx, nv: dict[str, Any], live_runtime_classes: list[Manifest] | None,
                   removing: bool) -> list[Manifest]:
    """[RuntimeClass] to apply (or remove), or [] when it is not ours to manage."""
    name = nv['runtime_class_name']
    if not name:
        ctx.note('%s.runtime_class_name is empty: the device plugin pods use the node\'s default runtime, which must be '
                 'nvidia (nvidia_container_runtime_set_as_default: true)' % ctx.var('nvidia'))
        return []
    check_name(name, ctx.var('nvidia') + '.runtime_class_name')
    live = [o for o in live_runtime_classes or [] if (o.get('metadata') or {}).get('name') == name]
    if live:
        labels = live[0]['metadata'].get('labels') or {}
        ours = labels.get(STACK_LABEL) == RUNTIME_CLASS_STACK and labels.get('app.kubernetes.io/managed-by') == MANAGED_BY
        if not ours:
            if live[0].get('handler') != 'nvidia':
                ctx.warn('RuntimeClass %s exists with handler %s (not nvidia); the device plugin pods use it as it is'
                         % (name, live[0].get('handler')))
            return []
        return [runtime_class(name)]
    if removing or not nv['runtime_class_create']:
        if not removing:
            ctx.note('%s.runtime_class_create is false: RuntimeClass %s must exist before the device plugin pods start'
                     % (ctx.var('nvidia'), name))
        return []
    return [runtime_class(name)]


def render(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
           require_facts: bool = True, live_runtime_classes: list[Manifest] | None = None,
           cdi_spec_ready: dict[str, Any] | None = None, node_state: dict[str, dict[str, Any]] | None = None,
           removing: bool = False) -> Rendered:
    """Return (manifests, node_labels, resource_names, validation_limits)."""
    nv = validate_settings(settings.get('nvidia'), NVIDIA_SCHEMA, ctx.var('nvidia'))
    image = ctx.image(nv['image'], ctx.var('nvidia') + '.image')
    if nv['device_list_strategy'] in CDI_STRATEGIES and not removing:
        _check_cdi(ctx, nv, nodes, cdi_spec_ready)
    mig_strategy = 'none'
    sharing = None
    resources = ['nvidia.com/gpu']
    limits = {'nvidia.com/gpu': '1'}
    extra: list[Manifest] = []
    node_labels: dict[str, dict[str, str]] = {}
    mps = None
    mig = None
    if strategy == 'exclusive':
        cfg_name = 'exclusive'
    elif strategy == 'time-slicing':
        ts = validate_settings(settings.get('time_slicing'), TIME_SLICING_SCHEMA, ctx.var('time_slicing'))
        _check_resource_name(ctx.var('time_slicing'), ts['resource_name'])
        sharing = {'timeSlicing': _replicated(ts)}
        cfg_name = 'time-slicing'
        res = ts['resource_name'] + ('.shared' if ts['rename_by_default'] else '')
        resources, limits = [res], {res: '1'}
    elif strategy == 'mps':
        mps = validate_settings(settings.get('mps'), MPS_SCHEMA, ctx.var('mps'))
        _check_resource_name(ctx.var('mps'), mps['resource_name'])
        version = image_version(nv['image'])
        if not mps['fail_requests_greater_than_one'] and (version is None or version < MPS_FAIL_REQUESTS_HONOURED):
            raise StackError('%s.fail_requests_greater_than_one: false has no effect with %s.image %s: device plugin '
                             'releases before v%s force it on for MPS (a request for more than one shared GPU fails '
                             'whatever the setting). Remove the setting, or use an image of v%s or newer'
                             % (ctx.var('mps'), ctx.var('nvidia'), nv['image'],
                                '.'.join(str(x) for x in MPS_FAIL_REQUESTS_HONOURED),
                                '.'.join(str(x) for x in MPS_FAIL_REQUESTS_HONOURED)))
        _check_facts(ctx, 'mps', nodes, facts, require_facts)
        for node in nodes:
            mc = ((facts.get(node) or {}).get('sharing') or {}).get('mps', {}).get('max_clients')
            if mc and mps['replicas'] > mc:
                raise StackError('%s.replicas is %d but %s allows at most %d MPS clients per GPU'
                                 % (ctx.var('mps'), mps['replicas'], node, mc))
        sharing = {'mps': _replicated(mps)}
        cfg_name = 'mps'
        res = mps['resource_name'] + ('.shared' if mps['rename_by_default'] else '')
        resources, limits = [res], {res: '1'}
    elif strategy == 'mig':
        mig = validate_settings(settings.get('mig'), MIG_SCHEMA, ctx.var('mig'))
        _check_facts(ctx, 'mig', nodes, facts, require_facts)
        mig_strategy = mig['strategy']
        cfg_name = 'mig-' + mig_strategy
        extra, mig_label, resources, limits = _mig(ctx, mig, nodes, facts, nv['runtime_class_name'])
        for node in nodes:
            node_labels.setdefault(node, {})[MIG_CONFIG_LABEL] = mig_label
            if mig['manager']:
                node_labels[node][DEPLOY_MIG_MANAGER_LABEL] = 'true'
                # mig-manager owns this label while it reconfigures (paused-for-mig-change); set it only when it is
                # missing, as the GPU operator does, so a re-run never resumes a paused plugin
                current = (((node_state or {}).get(node) or {}).get('labels') or {}).get(DEPLOY_PLUGIN_LABEL)
                if removing or current is None:
                    node_labels[node][DEPLOY_PLUGIN_LABEL] = 'true'
    else:
        raise StackError('internal: %s is not an NVIDIA device plugin strategy' % strategy)

    configs = {cfg_name: _plugin_config(nv, mig_strategy, sharing)}
    for name, cfg in sorted(nv['extra_configs'].items()):
        check_name(name, '%s.extra_configs key' % ctx.var('nvidia'))
        if not isinstance(cfg, dict) or cfg.get('version') != 'v1':
            raise StackError('%s.extra_configs.%s must be a device plugin configuration dictionary with version: v1'
                             % (ctx.var('nvidia'), name))
        check_plugin_config('%s.extra_configs.%s' % (ctx.var('nvidia'), name), cfg, strategy)
        configs[name] = cfg
    for node, name in nv['node_configs'].items():
        if name not in configs:
            raise StackError('%s.node_configs.%s names config %r; the pool has: %s'
                             % (ctx.var('nvidia'), node, name, ', '.join(sorted(configs))))
    for node in nodes:
        node_labels.setdefault(node, {})[CONFIG_LABEL] = nv['node_configs'].get(node, cfg_name)
        # the replicas per GPU of the config the node selects, for the share report (GFD is not deployed)
        replicas = config_replicas(configs[node_labels[node][CONFIG_LABEL]])
        if replicas:
            node_labels[node][REPLICAS_LABEL] = str(replicas)
        if strategy == 'mps':
            node_labels[node][MPS_CAPABLE_LABEL] = 'true'

    base = 'nvidia-device-plugin-' + ctx.pool
    manifests = _runtime_class(ctx, nv, live_runtime_classes, removing)
    configs_cm = config_map(ctx, base + '-configs', dict((k, _to_yaml_text(v)) for k, v in configs.items()))
    checksum = {CHECKSUM_ANNOTATION: config_checksum(configs_cm)}
    manifests.append(configs_cm)
    manifests.append(service_account(ctx, base))
    # config-manager reads its own node's label: read-only access to nodes is all it needs
    manifests.append(cluster_role(ctx, base, [{'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']}]))
    manifests.append(cluster_role_binding(ctx, base, base, base))

    any_mig, _vol, _specs = _all_configs_flags(configs)
    security = plugin_security_context(configs)
    volumes = [hostpath_volume('device-plugin', '/var/lib/kubelet/device-plugins', 'Directory'),
               hostpath_volume('cdi-root', '/var/run/cdi', 'DirectoryOrCreate'),
               {'name': 'available-configs', 'configMap': {'name': base + '-configs'}},
               {'name': 'config', 'emptyDir': {}}]
    # config-manager makes /config/config.yaml a symlink into /available-configs: whoever reads it mounts both
    mounts: list[dict[str, Any]]
    mounts = [{'name': 'device-plugin', 'mountPath': '/var/lib/kubelet/device-plugins'},
              {'name': 'cdi-root', 'mountPath': '/var/run/cdi'},
              {'name': 'available-configs', 'mountPath': '/available-configs'},
              {'name': 'config', 'mountPath': '/config'}]
    env = [node_name_env(), {'name': 'CONFIG_FILE', 'value': '/config/config.yaml'}]
    if nv['device_list_strategy'] in CDI_STRATEGIES:
        # the plugin writes the CDI spec from the driver files it finds under /driver-root
        env.append({'name': 'NVIDIA_DRIVER_ROOT', 'value': nv['driver_root']})
        volumes.append(hostpath_volume('driver-root', nv['driver_root'], 'Directory'))
        mounts.append({'name': 'driver-root', 'mountPath': '/driver-root', 'readOnly': True})
    if any_mig:
        env.append({'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'})
    if mps is not None:
        env.append({'name': 'MPS_ROOT', 'value': mps['mps_root']})
        volumes += [hostpath_volume('mps-root', mps['mps_root'], 'DirectoryOrCreate'),
                    hostpath_volume('mps-shm', mps['mps_root'] + '/shm')]
        mounts += [{'name': 'mps-root', 'mountPath': '/mps'}, {'name': 'mps-shm', 'mountPath': '/dev/shm'}]
    env += [{'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'},
            {'name': 'NVIDIA_DRIVER_CAPABILITIES', 'value': 'compute,utility'}]
    plugin = {'name': 'nvidia-device-plugin-ctr', 'image': image, 'command': ['nvidia-device-plugin'], 'env': env,
              'securityContext': copy.deepcopy(security), 'volumeMounts': mounts}
    sidecar = _config_manager(image, False, cfg_name, 'nvidia-device-plugin')
    sidecar['securityContext'] = copy.deepcopy(security)
    selector = ctx.pool_selector()
    if mig is not None and mig['manager']:
        selector[DEPLOY_PLUGIN_LABEL] = 'true'
    spec = {'serviceAccountName': base, 'priorityClassName': nv['priority_class_name'], 'shareProcessNamespace': True,
            'nodeSelector': selector,
            'initContainers': [_config_manager(image, True, cfg_name, '')],
            'containers': [plugin, sidecar],
            'volumes': volumes}
    if nv['runtime_class_name']:
        spec['runtimeClassName'] = nv['runtime_class_name']
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    manifests.append(daemonset(ctx, base, 'nvidia-device-plugin', spec, pod_labels={'app': PLUGIN_POD_APP},
                               annotations=checksum))
    if mps is not None:
        manifests.append(_mps_daemon(ctx, nv, image, mps, cfg_name, base, any_mig, checksum))
    manifests.extend(extra)
    return manifests, node_labels, resources, limits


def owns_deploy_labels(strategy: str, settings: Settings, ctx: Ctx) -> bool:
    """Whether the pool's own agents go by NVIDIA's nvidia.com/gpu.deploy.* labels (mig with the MIG manager: its
    device plugin selects DEPLOY_PLUGIN_LABEL, the manager DEPLOY_MIG_MANAGER_LABEL), which the GPU operator also
    writes and removes."""
    if strategy != 'mig':
        return False
    return validate_settings(settings.get('mig'), MIG_SCHEMA, ctx.var('mig'))['manager']


def label_defaults(strategy: str, settings: Settings, nodes: list[str], ctx: Ctx) -> dict[str, dict[str, str]]:
    """Node labels set only where a node has none: with the MIG manager, nvidia.com/gpu.deploy.device-plugin, which
    mig-manager sets to paused-for-mig-change while it reconfigures (node -> {label: value})."""
    if strategy != 'mig':
        return {}
    mig = validate_settings(settings.get('mig'), MIG_SCHEMA, ctx.var('mig'))
    if not mig['manager']:
        return {}
    return dict((node, {DEPLOY_PLUGIN_LABEL: 'true'}) for node in sorted(nodes))


def readiness(strategy: str, settings: Settings, nodes: list[str], ctx: Ctx,
              facts: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """For MIG with the manager: what each node must show before the stack is ready. The MIG manager's state label
    must say success, but a success is also what the node says from the previous geometry until the manager has seen
    the new nvidia.com/mig.config (its watch reacts after the label is written, and sets pending first): so the node's
    nvidia.com/mig.config must be the geometry asked for, and the node's allocatable must show that geometry's MIG
    devices (what the device plugin publishes once the geometry is applied: nvidia.com/gpu per MIG device with strategy
    single, nvidia.com/mig-<profile> with mixed), for every node whose MIG-capable GPUs the probe facts name."""
    if strategy != 'mig':
        return None
    mig = validate_settings(settings.get('mig'), MIG_SCHEMA, ctx.var('mig'))
    if not mig['manager'] or not nodes:
        return None
    devices = mig['devices'] or {}
    allocatable: dict[str, dict[str, str]] = {}
    for node in sorted(nodes):
        gpus = len((((facts or {}).get(node) or {}).get('sharing') or {}).get('mig', {}).get('profiles') or {})
        if not gpus:
            continue
        if mig['strategy'] == 'single':
            allocatable[node] = {'nvidia.com/gpu': str(gpus * sum(devices.values()))}
        else:
            allocatable[node] = dict(('nvidia.com/mig-' + p, str(gpus * c)) for p, c in sorted(devices.items()))
    return {'label': MIG_STATE_LABEL, 'value': 'success', 'failed_value': 'failed', 'nodes': sorted(nodes),
            'config_label': MIG_CONFIG_LABEL, 'config_value': mig_config_name(devices, mig['config_name']),
            'allocatable': allocatable}


def _mps_daemon(ctx: Ctx, nv: dict[str, Any], image: str, mps: dict[str, Any], cfg_name: str, base: str,
                any_mig: bool = False, annotations: dict[str, str] | None = None) -> Manifest:
    root = mps['mps_root']
    mounts = [{'name': 'mps-root', 'mountPath': '/mps'}, {'name': 'mps-shm', 'mountPath': '/dev/shm'},
              {'name': 'available-configs', 'mountPath': '/available-configs'},
              {'name': 'config', 'mountPath': '/config'}]
    init_mounts = {'name': 'mps-control-daemon-mounts', 'image': image, 'command': ['mps-control-daemon', 'mount-shm'],
                   'securityContext': {'privileged': True},
                   'volumeMounts': [{'name': 'mps-root', 'mountPath': '/mps', 'mountPropagation': 'Bidirectional'}]}
    daemon: dict[str, Any] = {'name': 'mps-control-daemon-ctr', 'image': image, 'command': ['mps-control-daemon'],
                              'env': [node_name_env(), {'name': 'CONFIG_FILE', 'value': '/config/config.yaml'},
                                      {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'},
                                      {'name': 'NVIDIA_DRIVER_CAPABILITIES', 'value': 'compute,utility'}],
                              'securityContext': {'privileged': True}, 'volumeMounts': mounts}
    if any_mig:
        daemon['env'].insert(2, {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'})
    selector = ctx.pool_selector()
    selector[MPS_CAPABLE_LABEL] = 'true'
    # upstream's chart (mps.enableHostPID, default true) gives the daemon the host's PID namespace and then does not
    # set shareProcessNamespace: the API server refuses a pod spec with both.
    spec = {'serviceAccountName': base, 'priorityClassName': nv['priority_class_name'],
            'hostPID': True, 'nodeSelector': selector,
            'initContainers': [init_mounts, _config_manager(image, True, cfg_name, '')],
            'containers': [daemon, _config_manager(image, False, cfg_name, '/usr/bin/mps-control-daemon')],
            'volumes': [hostpath_volume('mps-root', root, 'DirectoryOrCreate'), hostpath_volume('mps-shm', root + '/shm'),
                        {'name': 'available-configs', 'configMap': {'name': base + '-configs'}},
                        {'name': 'config', 'emptyDir': {}}]}
    if nv['runtime_class_name']:
        spec['runtimeClassName'] = nv['runtime_class_name']
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    return daemonset(ctx, 'nvidia-mps-control-daemon-' + ctx.pool, 'nvidia-mps-control-daemon', spec,
                     annotations=annotations)


def _mig(ctx: Ctx, mig: dict[str, Any], nodes: list[str], facts: dict[str, Any],
         runtime_class_name: str = '') -> tuple[list[Manifest], str, list[str], dict[str, str]]:
    devices = mig['devices']
    var = ctx.var('mig')
    if not devices:
        raise StackError('%s.devices must name the MIG profiles and counts per GPU, e.g. {"1g.10gb": 7}' % var)
    for prof, count in devices.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise StackError('%s.devices.%s must be a positive integer; got %r' % (var, prof, count))
    if mig['strategy'] == 'single' and len(devices) != 1:
        raise StackError('%s.strategy single needs one MIG profile in %s.devices (every GPU split the same way); got %s. '
                         'Use strategy mixed for several profiles.' % (var, var, ', '.join(sorted(devices))))
    for node in nodes:
        prof = ((facts.get(node) or {}).get('sharing') or {}).get('mig', {}).get('profiles') or {}
        for gpu, names in sorted(prof.items()):
            missing = [p for p in devices if p not in names]
            if missing:
                raise StackError('%s.devices asks for MIG profile(s) %s but GPU %s of %s offers only: %s'
                                 % (var, ', '.join(missing), gpu, node, ', '.join(names)))
    name = mig_config_name(devices, mig['config_name'])
    check_name(name, var + '.config_name')
    parted = {'version': 'v1', 'mig-configs': {
        'all-disabled': [{'devices': 'all', 'mig-enabled': False}],
        name: [{'devices': 'all', 'mig-enabled': True, 'mig-devices': dict((k, v) for k, v in sorted(devices.items()))}]}}
    cm_name = 'mig-parted-config-' + ctx.pool
    parted_cm = config_map(ctx, cm_name, {'config.yaml': _to_yaml_text(parted)})
    out = [parted_cm]
    if mig['strategy'] == 'single':
        resources = ['nvidia.com/gpu']
        limits = {'nvidia.com/gpu': '1'}
    else:
        resources = ['nvidia.com/mig-' + p for p in sorted(devices)]
        limits = {resources[0]: '1'}
    if mig['manager']:
        out.extend(_mig_manager(ctx, mig, cm_name, runtime_class_name, config_checksum(parted_cm)))
    else:
        ctx.warn('%s.manager is false: apply the MIG geometry %s on the nodes yourself (module gpuops.k8s_gpu.gpu_sharing '
                 'or nvidia-mig-parted apply with ConfigMap %s)' % (var, name, cm_name))
    return out, name, resources, limits


def _mig_manager(ctx: Ctx, mig: dict[str, Any], cm_name: str, runtime_class_name: str,
                 checksum: str = '') -> list[Manifest]:
    """NVIDIA's MIG manager (k8s-mig-manager), with the API access its reconfigure flow really uses."""
    image = ctx.image(mig['manager_image'], ctx.var('mig') + '.manager_image')
    mgr = 'nvidia-mig-manager-' + ctx.pool
    out = [service_account(ctx, mgr)]
    # nodes: informer on its node (list/watch), read and merge-patch its labels; pods: list on its node in every
    # namespace (waits for DaemonSet pods with a gpu.deploy nodeSelector), delete validator pods in its namespace
    out.append(cluster_role(ctx, mgr, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch', 'patch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list']}]))
    out.append(cluster_role_binding(ctx, mgr, mgr, mgr))
    out.append({'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'Role', 'metadata': ctx.meta(mgr),
                'rules': [{'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list', 'delete']}]})
    out.append({'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'RoleBinding', 'metadata': ctx.meta(mgr),
                'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role', 'name': mgr},
                'subjects': [{'kind': 'ServiceAccount', 'name': mgr, 'namespace': ctx.namespace}]})
    env = [node_name_env(),
           {'name': 'POD_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}},
           {'name': 'POD_NAMESPACE', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.namespace'}}},
           {'name': 'CONFIG_FILE', 'value': '/mig-parted-config/config.yaml'},
           {'name': 'HOST_ROOT_MOUNT', 'value': '/host'},
           {'name': 'DEFAULT_GPU_CLIENTS_NAMESPACE', 'value': ctx.namespace},
           {'name': 'WITH_REBOOT', 'value': 'true' if mig['with_reboot'] else 'false'}]
    selector = ctx.pool_selector()
    selector[DEPLOY_MIG_MANAGER_LABEL] = 'true'
    spec = {'serviceAccountName': mgr, 'priorityClassName': 'system-node-critical', 'hostPID': True, 'hostIPC': True,
            'nodeSelector': selector,
            'containers': [{'name': 'nvidia-mig-manager', 'image': image, 'env': env,
                            'securityContext': {'privileged': True},
                            'volumeMounts': [{'name': 'host-root', 'mountPath': '/host', 'mountPropagation': 'HostToContainer'},
                                             {'name': 'host-sys', 'mountPath': '/sys'},
                                             {'name': 'cdi-root', 'mountPath': '/var/run/cdi'},
                                             {'name': 'mig-parted-config', 'mountPath': '/mig-parted-config'}]}],
            'volumes': [hostpath_volume('host-root', '/'), hostpath_volume('host-sys', '/sys', 'Directory'),
                        hostpath_volume('cdi-root', '/var/run/cdi', 'DirectoryOrCreate'),
                        {'name': 'mig-parted-config', 'configMap': {'name': cm_name}}]}
    if runtime_class_name:
        # the image relies on the nvidia runtime for NVML and nvidia-smi (NVIDIA_VISIBLE_DEVICES=all in its Dockerfile)
        spec['runtimeClassName'] = runtime_class_name
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    # mig-manager applies the label's config at start and then on label changes only: a changed geometry under the
    # same config name rolls its pod
    out.append(daemonset(ctx, mgr, 'nvidia-mig-manager', spec, annotations={CHECKSUM_ANNOTATION: checksum}))
    return out


# the settings of the NVIDIA strategies (gpu_strategy.stack_info(...)['settings'] names which of them a strategy reads)
SETTINGS = {'nvidia': NVIDIA_SCHEMA, 'time_slicing': TIME_SLICING_SCHEMA, 'mps': MPS_SCHEMA, 'mig': MIG_SCHEMA}


def render_stack(ctx: Ctx, strategy: str, settings: Settings, nodes: list[str], facts: dict[str, Any],
                 inputs: dict[str, Any]) -> dict[str, Any]:
    """The one renderer signature (stacks/render.STACKS): exclusive, time-slicing, mps and mig."""
    manifests, labels, resources, limits = render(
        ctx, strategy, settings, nodes, facts, inputs['require_facts'],
        live_runtime_classes=inputs['live_runtime_classes'], cdi_spec_ready=inputs['cdi_spec_ready'],
        node_state=inputs['node_state'], removing=inputs['removing'])
    return {'manifests': manifests, 'labels': labels, 'resources': resources, 'limits': limits,
            'readiness': readiness(strategy, settings, nodes, ctx, facts)}


class NvidiaStack(Stack):
    """exclusive, time-slicing, mps and mig: NVIDIA's device plugin, one DaemonSet per pool. The four share the
    RuntimeClass(es) their pools name, released by each pool's records; a mig pool with the MIG manager goes by the
    nvidia.com/gpu.deploy.* labels the GPU operator also writes, and defaults its nodes' device-plugin deploy label."""
    shared_by_records = True
    asks_nvidia_gpu = True

    def shared_family(self) -> tuple[str, ...]:
        return tuple(NVIDIA_STRATEGIES)

    def pod_runtime_class(self, settings: dict, var: str) -> str:
        return validate_settings(settings.get('nvidia'), NVIDIA_SCHEMA, var + 'nvidia')['runtime_class_name']

    def follows_deploy_labels(self, settings: dict, ctx: Any) -> bool:
        return owns_deploy_labels(self.name, settings, ctx)

    def pool_follows_deploy_labels(self, pool_settings: dict) -> bool:
        if self.name != 'mig':
            return False
        own = pool_settings.get('gpu_sharing_stack_mig')
        return bool((own if isinstance(own, dict) else {}).get('manager', True))

    def node_label_defaults(self, settings: dict, nodes: list[str], ctx: Any) -> dict[str, dict[str, str]]:
        return label_defaults(self.name, settings, nodes, ctx)

    def migration_labels(self) -> dict[str, str]:
        # render above: the device plugin's config label names the strategy's own config (exclusive, time-slicing,
        # mps; a node_configs entry for the node names another), mps adds mps.capable; mig's come from its settings
        if self.name == 'mig':
            return {}
        out = {CONFIG_LABEL: self.name}
        if self.name == 'mps':
            out[MPS_CAPABLE_LABEL] = 'true'
        return out

    def migration_label_keys(self) -> list[str]:
        # a node_configs entry may select a shared config in any NVIDIA pool: its replicas record
        return sorted(set(super(NvidiaStack, self).migration_label_keys()) | {CONFIG_LABEL, REPLICAS_LABEL})

    def migration_settings_labels(self) -> list[str]:
        # the replicas per GPU of a strategy whose settings share each GPU (time_slicing, mps: their replicas); the
        # MIG geometry's config name and, with the MIG manager, its deploy labels
        if set(gpu_strategy.stack_info(self.name)['settings']) & set(REPLICATED_SETTINGS):
            return [REPLICAS_LABEL]
        if self.name != 'mig':
            return []
        return sorted({CONFIG_LABEL, MIG_CONFIG_LABEL, DEPLOY_MIG_MANAGER_LABEL, DEPLOY_PLUGIN_LABEL})

    def node_shows(self, labels: dict, annotations: dict, resources: dict, registered: list[str],
                   recorded: str | None = None) -> bool:
        # which NVIDIA strategy the node shows. What the running agents publish comes first: MIG devices
        # (nvidia.com/mig-*), the renamed nvidia.com/gpu.shared, and for nvidia.com/gpu GPU feature discovery's labels
        # where the node has any of them (mig.strategy single, the sharing strategy label, else a replica count above
        # one, else exclusive). Without GFD labels (the collection's stacks do not deploy GFD) nvidia.com/gpu is the
        # strategy the collection recorded for the node's pool (``recorded``: gpu_node_labels' strategy label) when
        # that is time-slicing, mps or mig, else exclusive. nvidia.com/gpu on a node another stack registered (HAMi)
        # is that stack's. report/model notes a record the agents contradict.
        shown = set()
        for name, qty in resources.items():
            if not qty:
                continue
            if MIG_RESOURCE.match(name):
                shown.add('mig')
            elif name == 'nvidia.com/gpu':
                if not registered:
                    shown.add(_plugin_gpu_strategy(labels, recorded))
            elif name == 'nvidia.com/gpu.shared':
                sharing = labels.get(SHARING_LABEL) if SHARING_LABEL in labels else recorded
                shown.add('mps' if sharing == 'mps' else 'time-slicing')
        return self.name in shown


# GPU feature discovery's labels that say how the device plugin shares nvidia.com/gpu
GFD_MIG_STRATEGY_LABEL = 'nvidia.com/mig.strategy'
GFD_REPLICAS_LABEL = 'nvidia.com/gpu.replicas'
GFD_LABELS = (GFD_MIG_STRATEGY_LABEL, SHARING_LABEL, GFD_REPLICAS_LABEL)


def _plugin_gpu_strategy(labels: dict, recorded: str | None) -> str:
    """The NVIDIA strategy of a node's nvidia.com/gpu: GFD's labels when the node has any, else the collection's
    record (time-slicing, mps, mig), else exclusive."""
    if not any(k in labels for k in GFD_LABELS):
        # the device plugin strategies the collection records (exclusive, time-slicing, mps, mig); any other value
        # (another family's pool, none) leaves the plugin's nvidia.com/gpu whole GPUs
        return recorded if recorded in NVIDIA_STRATEGIES else 'exclusive'
    if labels.get(GFD_MIG_STRATEGY_LABEL) == 'single':
        return 'mig'
    sharing = labels.get(SHARING_LABEL)
    if sharing in ('time-slicing', 'mps'):
        return sharing
    try:
        replicas = int(labels.get(GFD_REPLICAS_LABEL, '')) or 1
    except (TypeError, ValueError):
        replicas = 1
    return 'time-slicing' if replicas > 1 else 'exclusive'


def stack(name: str) -> Stack:
    """The Stack of strategy ``name`` (stacks/registry): one object per NVIDIA strategy."""
    return NvidiaStack(name)
