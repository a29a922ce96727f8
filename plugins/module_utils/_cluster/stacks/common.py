# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers for the GPU sharing stack renderers (gpu_stack_*): errors, settings validation,
images through the collection's mirror, common metadata, scheduling constraints."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import tarfile
from typing import Any

# the record shapes the stacks pass around, named for what they hold (plain dicts, as the API server and the role
# variables give them): a rendered or live Kubernetes object, and a pool's settings (settings key -> its block)
Manifest = dict[str, Any]
Settings = dict[str, Any]
# what a strategy module's render() gives its render_stack(): the manifests, the node labels (node -> {label: value}),
# the extended resources the pool's pods ask for, and a GPU pod's limits (resource -> quantity)
Rendered = tuple[list[Manifest], dict[str, dict[str, str]], list[str], dict[str, Any]]

MANAGED_BY = 'gpuops.k8s_gpu'
LABEL_PREFIX = 'gpuops.io/'
POOL_LABEL = LABEL_PREFIX + 'sharing-pool'
# the label a node's pool strategy is recorded in (role gpu_node_labels' gpu_node_labels_strategy_label default): the
# one Python home of the default of gpu_node_labels_apply's, gpu_share_report's and the label filters' strategy_label
STRATEGY_LABEL = LABEL_PREFIX + 'sharing-strategy'
SCOPE_LABEL = LABEL_PREFIX + 'sharing-scope'
# the replicas per GPU an NVIDIA device plugin pool configured (time-slicing, MPS: the config its node's
# nvidia.com/device-plugin.config selects), written with the pool's labels: the share report's per-GPU replicas where
# GPU feature discovery's nvidia.com/gpu.replicas is absent (the collection's stacks do not deploy GFD; issue #36)
REPLICAS_LABEL = LABEL_PREFIX + 'sharing-replicas'
STACK_LABEL = LABEL_PREFIX + 'sharing-stack'
# a pool that applies an object it shares with other pools records itself on it: annotation <prefix><pool> (module
# k8s_converge's user_annotation_prefix default; tests/unit/.../test_gpu_stack_render.py checks they agree)
SHARED_USER_PREFIX = 'user.gpuops.io/'

# The strategies a pool can have: gpu_strategy.STRATEGIES (the strategy model).

# Taints a control-plane node carries on kubeadm (old and new), RKE1/RKE2 and k3s.  Tolerating them lets a
# single-node cluster, or the control plane of an RKE cluster, run the pods that must run there.
CONTROL_PLANE_TOLERATIONS = [
    {'key': 'node-role.kubernetes.io/control-plane', 'operator': 'Exists', 'effect': 'NoSchedule'},
    {'key': 'node-role.kubernetes.io/master', 'operator': 'Exists', 'effect': 'NoSchedule'},
    {'key': 'node-role.kubernetes.io/controlplane', 'operator': 'Exists', 'effect': 'NoSchedule'},
    {'key': 'node-role.kubernetes.io/etcd', 'operator': 'Exists', 'effect': 'NoExecute'},
]
GPU_TOLERATION = {'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}

# A Kubernetes label key, [prefix/]name (apimachinery's IsQualifiedName): the check of every label key the collection is
# given (gpu_node_labels' extra labels, the strategy_label options of gpu_stack_manifests, gpu_share_report and
# gpu_node_labels_apply)
LABEL_NAME_RE = re.compile(r'^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$')
LABEL_PREFIX_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
LABEL_KEY_FORM = ('[prefix/]name, name at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric; '
                  'prefix a DNS subdomain')


def valid_label_key(key: Any) -> bool:
    """Whether ``key`` is a Kubernetes label key: [prefix/]name (LABEL_KEY_FORM)."""
    if not isinstance(key, str):
        return False
    parts = key.split('/')
    kname = parts[-1]
    return not (len(parts) > 2 or len(kname) > 63 or not LABEL_NAME_RE.match(kname)
                or (len(parts) == 2 and (len(parts[0]) > 253 or not LABEL_PREFIX_RE.match(parts[0]))))


def strategy_label_error(value: Any, name: str = 'strategy_label') -> str | None:
    """The message refusing ``value`` as the label a node's pool strategy is recorded in (option or variable
    ``name``), or None when it is a label key."""
    if valid_label_key(value):
        return None
    return ('%s: %r is not a valid Kubernetes label key (%s); the default is %s'
            % (name, value, LABEL_KEY_FORM, STRATEGY_LABEL))


_DNS_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')
_IMAGE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._\-/:@]*$')


class StackError(Exception):
    """Bad input. The message names the role variable and what is allowed."""


# A chart release as chart_version, a Chart.yaml or a chart's file name writes it: v26.7.0, 0.5.0 (what follows the
# patch number is not read). Unanchored, for search in a file name; match() anchors it at the start.
CHART_VERSION = re.compile(r'v?(\d+)\.(\d+)\.(\d+)')


def chart_yaml_version(path: str) -> str | None:
    """version: of the chart's Chart.yaml (a .tgz or an unpacked directory), or None when it cannot be read."""
    text = None
    try:
        if os.path.isdir(path):
            with open(os.path.join(path, 'Chart.yaml')) as f:
                text = f.read()
        elif os.path.isfile(path) and tarfile.is_tarfile(path):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.name.count('/') == 1 and member.name.endswith('/Chart.yaml'):
                        # None for a member that is not a file (a directory named Chart.yaml): not readable
                        data = tar.extractfile(member)
                        text = data.read().decode('utf-8') if data is not None else None
                        break
    except (IOError, OSError, tarfile.TarError):
        return None
    if text is None:
        return None
    m = re.search(r'^version:\s*["\']?([^"\'\s]+)', text, re.M)
    return m.group(1) if m else None


def chart_family(text: Any, charts: dict[tuple[int, int], Any], var: str, chart: str,
                 example: str) -> tuple[tuple[int, int], str]:
    """(family key (major, minor), 'vX.Y.Z') of the chart version ``text`` of a Helm-installed stack: ``charts`` is the
    renderer's table by release family, ``chart`` the chart's name in messages, ``example`` the pinned release. A text
    that is no version, or a family the table does not have, is refused naming ``var`` and what to set."""
    m = CHART_VERSION.match(str(text).strip())
    if not m:
        raise StackError('%s: the %s chart version is unknown: set %s.chart_version (e.g. %s) or point %s.chart_path at '
                         'the chart (its Chart.yaml is read)' % (var, chart, var, example, var))
    key = (int(m.group(1)), int(m.group(2)))
    if key not in charts:
        raise StackError('%s: %s chart %s is not one this collection renders values for; known releases: %s'
                         % (var, chart, text, ', '.join('v%d.%d.x' % k for k in sorted(charts))))
    return key, 'v%s.%s.%s' % m.groups()


class Ctx(object):
    """What every renderer needs: pool, namespace, images, pull secrets, warnings."""

    def __init__(self, pool: str, namespace: str, strategy: str, registry: str | None = '',
                 image_pull_secrets: list[str] | None = None, node_selector: dict[str, str] | None = None,
                 var_prefix: str = 'gpu_sharing_stack_', strategy_label: str = STRATEGY_LABEL) -> None:
        self.pool = pool
        self.namespace = namespace
        self.strategy = strategy
        self.registry = (registry or '').rstrip('/')
        self.image_pull_secrets = list(image_pull_secrets or [])
        self.node_selector = dict(node_selector or {})
        self.var_prefix = var_prefix
        # the label the pool's strategy is recorded in on its nodes (gpu_node_labels_strategy_label): what the stack
        # writes, reads on live nodes and selects nodes by
        self.strategy_label = strategy_label
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.images: list[str] = []
        # set by renderers: the scheduler extender URL kube-scheduler must use (gpushare); True while removing
        self.extender_url: str | None = None
        # set by renderers: the whole extender entry for role kube_scheduler_extender (gpu-manager's gpu-admission)
        self.extender: dict[str, Any] | None = None
        self.removing = False
        # workloads of others that read a config of ours once per process: restart them when it changes
        self.restarts: list[dict[str, Any]] = []

    def var(self, name: str) -> str:
        return self.var_prefix + name

    def warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)

    def image(self, ref: Any, var_name: str) -> str:
        """Pinned image reference through the mirror; remembers every image used."""
        out = mirror_image(ref, self.registry, var_name)
        if out not in self.images:
            self.images.append(out)
        return out

    def pull_secrets(self) -> list[dict[str, str]]:
        return [{'name': s} for s in self.image_pull_secrets]

    def pool_selector(self) -> dict[str, str]:
        """Node selector of the pool's DaemonSets: the pool label set on its nodes plus any user selector."""
        sel = {POOL_LABEL: self.pool}
        sel.update(self.node_selector)
        return sel

    def meta(self, name: str, namespace: str | bool = True, scope: str = 'pool', labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
        lab = {
            'app.kubernetes.io/managed-by': MANAGED_BY,
            'app.kubernetes.io/part-of': 'gpu-sharing-stack',
            STACK_LABEL: self.strategy,
            SCOPE_LABEL: scope,
        }
        if scope == 'pool':
            lab[POOL_LABEL] = self.pool
        lab.update(labels or {})
        m: dict[str, Any] = {'name': name, 'labels': lab}
        if namespace:
            m['namespace'] = namespace if isinstance(namespace, str) else self.namespace
        if annotations:
            m['annotations'] = dict(annotations)
        return m


def check_name(value: Any, var_name: str) -> str:
    if not isinstance(value, str) or not _DNS_LABEL.match(value):
        raise StackError('%s must be a DNS label (lowercase letters, digits and "-", at most 63 characters); got %r'
                         % (var_name, value))
    return value


def split_image(ref: str) -> tuple[str | None, str, str | None, str | None]:
    """(registry-or-None, path, tag-or-None, digest-or-None) of an image reference."""
    digest = None
    if '@' in ref:
        ref, digest = ref.split('@', 1)
    tag = None
    last = ref.rsplit('/', 1)[-1]
    if ':' in last:
        ref, tag = ref.rsplit(':', 1)
    first = ref.split('/', 1)[0]
    if '/' in ref and ('.' in first or ':' in first or first == 'localhost'):
        return first, ref.split('/', 1)[1], tag, digest
    return None, ref, tag, digest


def mirror_image(ref: Any, registry: str, var_name: str) -> str:
    """Pinned image reference, rewritten to the mirror prefix when one is set.

    The mirror prefix replaces the source registry host and keeps the repository path:
    nvcr.io/nvidia/k8s-device-plugin:v0.17.1 with registry.example.com/mirror becomes
    registry.example.com/mirror/nvidia/k8s-device-plugin:v0.17.1 (Docker Hub official images keep library/).
    """
    if not isinstance(ref, str) or not ref or not _IMAGE.match(ref):
        raise StackError('%s must be a container image reference; got %r' % (var_name, ref))
    host, path, tag, digest = split_image(ref)
    if not digest and (not tag or tag == 'latest'):
        raise StackError('%s must pin a tag other than "latest" or a digest (e.g. %s:v1.2.3); got %r'
                         % (var_name, path, ref))
    if not registry:
        return ref
    if host is None and '/' not in path:
        path = 'library/' + path
    out = registry + '/' + path
    if tag:
        out += ':' + tag
    if digest:
        out += '@' + digest
    return out


def validate_settings(settings: Any, schema: dict[str, Any], var_name: str) -> dict[str, Any]:
    """Apply defaults and check a settings dict against a schema.

    schema: {key: dict(type=int|float|bool|str|list|dict, default=..., choices=[...], min=..., max=...)}
    Unknown keys and wrong types are errors naming var_name.key and what is allowed.
    """
    settings = settings or {}
    if not isinstance(settings, dict):
        raise StackError('%s must be a dictionary; got %r' % (var_name, settings))
    unknown = sorted(set(settings) - set(schema))
    if unknown:
        raise StackError('%s has unknown key(s) %s; allowed keys: %s'
                         % (var_name, ', '.join(unknown), ', '.join(sorted(schema))))
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        name = '%s.%s' % (var_name, key)
        value = settings.get(key, copy.deepcopy(spec.get('default')))
        if value is None:
            out[key] = None
            continue
        value = _coerce(value, spec['type'], name)
        if spec.get('choices') is not None and value not in spec['choices']:
            raise StackError('%s must be one of %s; got %r' % (name, ', '.join(str(c) for c in spec['choices']), value))
        if spec.get('min') is not None and value < spec['min']:
            raise StackError('%s must be >= %s; got %r' % (name, spec['min'], value))
        if spec.get('max') is not None and value > spec['max']:
            raise StackError('%s must be <= %s; got %r' % (name, spec['max'], value))
        out[key] = value
    return out


def argument_spec(schema: dict[str, Any], var_name: str) -> dict[str, dict[str, Any]]:
    """The Ansible argument spec of one settings block, built in process from its schema (the one declaration of its
    keys): each key's ``type`` is a checker with the render's own conversions (below: no bool for an int, no dict for
    a string; a ValueError names ``var_name.key`` and the value), ``choices`` and ``default`` (a copy) as declared.
    ``min`` and ``max`` stay the render's: an argument spec cannot state them. Validated with Ansible's
    ArgumentSpecValidator (filter stack_settings), it refuses unknown keys and fills every default once; the
    render's ``validate_settings`` then finds each key present and fills none (docs/extending.md, one settings
    pipeline)."""
    out: dict[str, dict[str, Any]] = {}
    for key, spec in schema.items():
        entry: dict[str, Any] = {'type': _type_check(spec['type'], '%s.%s' % (var_name, key))}
        if spec.get('choices') is not None:
            entry['choices'] = list(spec['choices'])
        if spec.get('default') is not None:
            entry['default'] = copy.deepcopy(spec['default'])
        out[key] = entry
    return out


def _type_check(kind: type, name: str) -> Any:
    """A type checker for ArgumentSpecValidator: ``_coerce``'s conversion, None left as None (an explicit null is the
    render's to judge, as before); named after the type for Ansible's message (".. unable to convert to int: ..")."""
    def check(value: Any) -> Any:
        if value is None:
            return None
        try:
            return _coerce(value, kind, name)
        except StackError as e:
            raise ValueError(str(e)) from e
    check.__name__ = kind.__name__
    return check


def _coerce(value: Any, kind: type, name: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ('true', 'yes', 'on', '1', 'false', 'no', 'off', '0'):
            return value.lower() in ('true', 'yes', 'on', '1')
        raise StackError('%s must be a boolean; got %r' % (name, value))
    if kind is int:
        if isinstance(value, bool):
            raise StackError('%s must be an integer; got %r' % (name, value))
        try:
            if isinstance(value, float) and value != int(value):
                raise ValueError()
            return int(value)
        except (TypeError, ValueError):
            raise StackError('%s must be an integer; got %r' % (name, value))
    if kind is float:
        if isinstance(value, bool):
            raise StackError('%s must be a number; got %r' % (name, value))
        try:
            return float(value)
        except (TypeError, ValueError):
            raise StackError('%s must be a number; got %r' % (name, value))
    if kind is str:
        if isinstance(value, (dict, list)):
            raise StackError('%s must be a string; got %r' % (name, value))
        return str(value)
    if not isinstance(value, kind):
        raise StackError('%s must be a %s; got %r' % (name, kind.__name__, value))
    return value


def hostpath_volume(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    hp = {'path': path}
    if kind:
        hp['type'] = kind
    return {'name': name, 'hostPath': hp}


def node_name_env() -> dict[str, Any]:
    return {'name': 'NODE_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'spec.nodeName'}}}


def service_account(ctx: Ctx, name: str, scope: str = 'pool', namespace: str | bool = True) -> Manifest:
    return {'apiVersion': 'v1', 'kind': 'ServiceAccount', 'metadata': ctx.meta(name, namespace=namespace, scope=scope)}


def cluster_role(ctx: Ctx, name: str, rules: list[dict[str, Any]], scope: str = 'pool') -> Manifest:
    return {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRole',
            'metadata': ctx.meta(name, namespace=False, scope=scope), 'rules': rules}


def cluster_role_binding(ctx: Ctx, name: str, role: str, sa_name: str, scope: str = 'pool',
                         namespace: str | None = None) -> Manifest:
    return {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRoleBinding',
            'metadata': ctx.meta(name, namespace=False, scope=scope),
            'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole', 'name': role},
            'subjects': [{'kind': 'ServiceAccount', 'name': sa_name, 'namespace': namespace or ctx.namespace}]}


def rbac_for(ctx: Ctx, name: str, rules: list[dict[str, Any]], scope: str = 'pool',
             namespace: str | None = None) -> list[Manifest]:
    """ServiceAccount + ClusterRole + ClusterRoleBinding of one component (least privilege: rules as given)."""
    ns = namespace or ctx.namespace
    return [service_account(ctx, name, scope=scope, namespace=ns), cluster_role(ctx, name, rules, scope=scope),
            cluster_role_binding(ctx, name, name, name, scope=scope, namespace=ns)]


def pod_spec_common(ctx: Ctx, spec: dict[str, Any], tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Add pull secrets and tolerations to a pod spec (in place) and return it."""
    if ctx.image_pull_secrets:
        spec['imagePullSecrets'] = ctx.pull_secrets()
    if tolerations:
        spec['tolerations'] = copy.deepcopy(tolerations)
    return spec


def daemonset(ctx: Ctx, name: str, app_label: str, pod_spec: dict[str, Any], scope: str = 'pool',
              namespace: str | None = None, annotations: dict[str, str] | None = None,
              pod_labels: dict[str, str] | None = None) -> Manifest:
    """DaemonSet; pod_labels are added to the pod template only (labels other components select pods by)."""
    sel = {'app.kubernetes.io/name': app_label}
    if scope == 'pool':
        sel[POOL_LABEL] = ctx.pool
    tmpl_meta: dict[str, Any] = {'labels': dict(sel)}
    tmpl_meta['labels'].update(pod_labels or {})
    if annotations:
        tmpl_meta['annotations'] = dict(annotations)
    return {'apiVersion': 'apps/v1', 'kind': 'DaemonSet',
            'metadata': ctx.meta(name, namespace=namespace or True, scope=scope, labels={'app.kubernetes.io/name': app_label}),
            'spec': {'selector': {'matchLabels': sel},
                     'updateStrategy': {'type': 'RollingUpdate'},
                     'template': {'metadata': tmpl_meta, 'spec': pod_spec}}}


def deployment(ctx: Ctx, name: str, app_label: str, pod_spec: dict[str, Any], scope: str = 'shared',
               namespace: str | None = None, replicas: int = 1, strategy: str | None = None,
               annotations: dict[str, str] | None = None) -> Manifest:
    sel = {'app.kubernetes.io/name': app_label}
    if scope in ('pool', 'validation'):
        # a pool's own Deployment selects its pool's pods only: the Deployments of two pools of one strategy in one
        # namespace would otherwise overlap (each counted the other's pods as its own; the lifecycle suite's
        # randomized run found it with two gpushare pools)
        sel[POOL_LABEL] = ctx.pool
    spec: dict[str, Any] = {'replicas': replicas, 'selector': {'matchLabels': sel},
                            'template': {'metadata': {'labels': dict(sel)}, 'spec': pod_spec}}
    if annotations:
        spec['template']['metadata']['annotations'] = dict(annotations)
    if strategy:
        spec['strategy'] = {'type': strategy}
    return {'apiVersion': 'apps/v1', 'kind': 'Deployment',
            'metadata': ctx.meta(name, namespace=namespace or True, scope=scope, labels={'app.kubernetes.io/name': app_label}),
            'spec': spec}


def config_map(ctx: Ctx, name: str, data: dict[str, Any], scope: str = 'pool', namespace: str | None = None) -> Manifest:
    for k, v in data.items():
        if not isinstance(v, str):
            raise StackError('internal: ConfigMap %s key %s is not a string' % (name, k))
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': ctx.meta(name, namespace=namespace or True, scope=scope),
            'data': dict(data)}


def config_checksum(*config_maps: Manifest) -> str:
    """sha256 of the data of the given ConfigMap manifests, for a pod template annotation: a changed config changes
    the template, so the DaemonSet or Deployment rolls its pods (the programs read their config once, at start; a
    subPath mount never sees an update). Upstream's charts do the same with checksum/... annotations."""
    text = json.dumps([cm.get('data') or {} for cm in config_maps], sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


_DECIMAL_SUFFIXES = (('E', 18), ('P', 15), ('T', 12), ('G', 9), ('M', 6), ('k', 3))
_BINARY_SUFFIXES = (('Ei', 60), ('Pi', 50), ('Ti', 40), ('Gi', 30), ('Mi', 20), ('Ki', 10))
_QUANTITY_TEXT = re.compile(r'^([0-9]+)(|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)$')


def quantity(value: Any) -> str:
    """Resource quantities as the API server returns them (strings): an integer quantity in its canonical form, as
    kube-apiserver stores it (k8s.io/apimachinery pkg/api/resource quantity.go CanonicalizeBytes: decimal SI with
    the largest exponent, a multiple of 3, that keeps the mantissa an integer - 3000 is stored as 3k -, binary SI
    with the largest power of 1024 that divides the value - 1024Mi is stored as 1Gi). A re-run then compares equal to
    the live object instead of writing it again. Other forms (fractions, milli, exponents) are returned as given."""
    if isinstance(value, bool):
        raise StackError('quantity must not be a boolean')
    text = str(value)
    m = _QUANTITY_TEXT.match(text)
    if not m:
        return text
    number, suffix = int(m.group(1)), m.group(2)
    if number == 0:
        return '0'
    if suffix.endswith('i'):
        n = number << dict(_BINARY_SUFFIXES)[suffix]
        for name, shift in _BINARY_SUFFIXES:
            if n % (1 << shift) == 0:
                return '%d%s' % (n >> shift, name)
        return '%d' % n
    n = number * 10 ** dict(_DECIMAL_SUFFIXES).get(suffix, 0)
    for name, exp in _DECIMAL_SUFFIXES:
        if n % 10 ** exp == 0:
            return '%d%s' % (n // 10 ** exp, name)
    return '%d' % n


def validation_pod(ctx: Ctx, name: str, namespace: str, image: str, limits: dict[str, Any],
                   scheduler_name: str | None = None, annotations: dict[str, str] | None = None) -> Manifest:
    spec: dict[str, Any] = {'restartPolicy': 'Never',
                            'containers': [{'name': 'cuda', 'image': image,
                                            'resources': {'limits': dict((k, quantity(v)) for k, v in limits.items())}}],
                            'tolerations': [dict(GPU_TOLERATION)]}
    if scheduler_name:
        spec['schedulerName'] = scheduler_name
    if ctx.image_pull_secrets:
        spec['imagePullSecrets'] = ctx.pull_secrets()
    meta = ctx.meta(name, namespace=namespace, scope='validation')
    if annotations:
        meta['annotations'] = dict(annotations)
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': meta, 'spec': spec}


def stack_readiness(nodes: list[Manifest] | None, readiness: dict[str, Any] | None, pool: str = '', namespace: str = '',
                    retries: Any = None, delay: Any = None, var: str = 'gpu_sharing_stack_') -> dict[str, Any]:
    """Whether a stack is ready, from the Node objects of its pool and its ``readiness`` (gpu_stack_manifests: the
    node ``label`` that must reach ``value`` on every node of ``nodes``; ``failed_value`` means its owner gave up; with
    ``config_label``/``config_value`` the node must carry the configuration asked for, and with ``allocatable`` (node ->
    {resource: quantity}) publish those resources: a ``value`` left from the previous configuration is not taken).

    Returns {'ready', 'done' (ready, or a node reports failed_value: waiting longer cannot help), 'failed' (nodes
    that report failed_value), 'states' (node name -> label value, '' when not set yet), 'waiting' (node -> what it
    does not show yet), 'msg' (why it is not ready, '' when it is)}. ``readiness`` None: nothing to wait for."""
    if not readiness:
        return {'ready': True, 'done': True, 'failed': [], 'states': {}, 'waiting': {}, 'msg': ''}
    label = readiness['label']
    states: dict[Any, Any] = {}  # node name (from the API: str) -> label value
    seen = {}
    for obj in nodes or []:
        meta = obj.get('metadata') or {}
        states[meta.get('name')] = (meta.get('labels') or {}).get(label, '')
        seen[meta.get('name')] = obj
    want = list(readiness.get('nodes') or [])
    waiting = {}
    for n in want:
        obj = seen.get(n) or {}
        labels = (obj.get('metadata') or {}).get('labels') or {}
        why = []
        if states.get(n) != readiness['value']:
            why.append('%s=%r' % (label, states.get(n, '')))
        config = readiness.get('config_label')
        if config and labels.get(config) != readiness.get('config_value'):
            why.append('%s=%r, not %r' % (config, labels.get(config, ''), readiness.get('config_value')))
        have = (obj.get('status') or {}).get('allocatable') or {}
        short = dict((r, have.get(r, '0')) for r, q in sorted(((readiness.get('allocatable') or {}).get(n) or {}).items())
                     if str(have.get(r, '0')) != str(q))
        if short:
            why.append('allocatable %s, not %s' % (short, dict((r, (readiness['allocatable'][n])[r]) for r in short)))
        if why:
            waiting[n] = '; '.join(why)
    ready = not waiting
    failed = sorted(n for n, v in states.items() if v == readiness.get('failed_value'))
    msg = ''
    if not ready:
        msg = ('The MIG manager has not applied the geometry %s on every node of pool %s within %s x %s s: node label %s '
               'is, per node, %r (expected %s on %s; "" = not set yet); not ready yet: %s. A %s left from the previous '
               'geometry is not taken: the node must carry the geometry asked for and publish its MIG devices. Read the '
               'logs of the pool\'s nvidia-mig-manager pods (kubectl -n %s logs -l '
               'app.kubernetes.io/name=nvidia-mig-manager) and of its device plugin; raise %smig_state_retries for slow '
               'GPU resets.'
               % (readiness.get('config_value') or '', pool, retries, delay, label, states, readiness['value'],
                  ', '.join(want), '; '.join('%s: %s' % kv for kv in sorted(waiting.items())), readiness['value'],
                  namespace, var))
    return {'ready': ready, 'done': ready or bool(failed), 'failed': failed, 'states': states, 'waiting': waiting,
            'msg': msg}
