# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Stack interface: what one strategy's stack owns beyond its manifests (issue #37, "the design change").

Each strategy module (plugins/module_utils/_cluster/stacks/gpu_stack_<stack>.py, the stack the strategy model names)
has one subclass of Stack and a ``stack(name)`` factory; stacks/registry maps every strategy of the model to its
object. The shared code (stacks/render, stacks/live, stacks/shared, pool_plan, label_plan, strategy_migration) asks
these objects and names no strategy: a new strategy is one module and one Stack, and the base class's answers are
those of a strategy that needs nothing special.

What a Stack answers:
  shared objects     shared (the module's SHARED: which settings and pool variables enter the objects its pools
                     share, so they must agree), own_conflicts (a check of its own instead), shared_module, shared_family (the strategies that share its shared
                     objects), shared_by_records (its shared objects are released by the pools' records)
  placement          claims_devices (devices through ResourceClaims, never beside a device plugin),
                     asks_nvidia_gpu / may_intercept_nvidia_gpu / intercepts_nvidia_gpu (who asks for nvidia.com/gpu
                     and who takes such pods over), places_on_every_gpu_node (its agents land on every GPU node) and
                     keep_off_labels (the labels that keep its agents off another pool's nodes),
                     follows_deploy_labels / pool_follows_deploy_labels (its own agents go by labels another stack
                     writes)
  node state         pool_node_labels (labels its agents select, beside the strategy and pool labels),
                     node_label_defaults, registration_annotations (a Node registered with its agents);
                     gpu_strategy.node_state says what uninstall clears
  live reads         live_queries, wants_version, merge_objects, merge_version (stacks/live), stale_shared (what a
                     pool releases of the shared objects it no longer makes)
  GPU pods           pod_runtime_class, runtime_class_note, validation (the validation workload)
  migration          migration_labels, migration_label_keys, migration_settings_labels (the labels a move onto or
                     off a pool sets, drops, cannot know), serving_sign (what shows its plugin serving a node;
                     strategy_migration)
  the share report   node_shows (a node's resources, labels and annotations show the strategy),
                     accounting_conflicts (what the report says when its accounting meets others on one node)
Restarts on change stay with each renderer (ctx.restarts, checksum annotations), which only it can compute.

Plain Python, no Ansible imports.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_strategy import RESOURCES


def settings_of(settings: dict | None, key: str) -> dict:
    """The dict of one settings key (a pool's settings: key -> dict), {} when unset or not a dict."""
    value = (settings or {}).get(key)
    return value if isinstance(value, dict) else {}


class Stack(object):
    """One strategy's stack. Subclasses override what their strategy does differently; the defaults are a
    node-level stack with nothing shared, nothing read from the cluster and a plain validation pod."""

    # the SHARED declaration of the module that owns the strategy's shared objects ({settings, keys, pool_variables,
    # objects}; stacks/shared) and that module (its SETTINGS give the defaults); None: no shared objects to agree on
    shared = None  # type: dict | None
    shared_module = None  # type: Any
    # the shared objects are released by each pool's records (SHARED_USER_PREFIX annotations), not by "no other pool"
    shared_by_records = False
    # devices are claimed through ResourceClaims (a DRA driver): never beside a device plugin on one node
    claims_devices = False
    # its GPU pods ask for nvidia.com/gpu from a device plugin other than HAMi's
    asks_nvidia_gpu = False
    # may run an admission webhook that takes over every pod asking for nvidia.com/gpu
    may_intercept_nvidia_gpu = False
    # its agents land on every GPU node of the cluster, unless keep_off_labels keeps them off
    places_on_every_gpu_node = False
    # labels its agents select on its nodes besides the strategy and pool labels (label_plan's plans)
    pool_node_labels = {}  # type: dict[str, str]
    # annotations its agents write on a Node they registered (a node so registered is refused to other families)
    registration_annotations = ()  # type: tuple[str, ...]
    # the settings key that carries the API server's version (kube_version), read live when unset; None: not read
    version_key = None  # type: str | None
    # the version is read for a removal too (the render of state absent needs it)
    version_on_removal = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.props = gpu_strategy.strategy(name)

    def __repr__(self) -> str:
        return '%s(%r)' % (type(self).__name__, self.name)

    @property
    def title(self) -> str:
        return str(self.props['title'])

    @property
    def family(self) -> str:
        return str(self.props['family'])

    # -- shared objects

    def shared_family(self) -> tuple[str, ...]:
        """The strategies whose pools share this strategy's shared objects (the other pools the render counts)."""
        return (self.name,)

    def own_conflicts(self, pools: list[dict]) -> list[str]:
        """Errors for this strategy's pools among ``pools`` (sharing_pools' {name, strategy, settings}) that disagree on
        what they share, for a strategy that checks it itself rather than through ``shared`` (stacks/shared)."""
        return []

    # -- placement

    def intercepts_nvidia_gpu(self, settings: dict) -> bool:
        """Whether the pool (its settings) runs the webhook that takes over every nvidia.com/gpu pod."""
        return False

    def intercept_error(self, pool: str, others: list[str], var: str) -> str:
        """The refusal when this pool would take over the pods of the other nvidia.com/gpu pools ``others``."""
        raise NotImplementedError(self.name)

    def intercept_warning(self, others: list[str], var: str) -> str:
        """The warning for a pool asking for nvidia.com/gpu beside this strategy's pools ``others``."""
        raise NotImplementedError(self.name)

    def keep_off_labels(self, strategy: str) -> dict[str, str]:
        """The labels a node of a pool of ``strategy`` carries to keep this stack's agents off it ({}: none needed;
        only a stack that places_on_every_gpu_node needs any)."""
        return {}

    def follows_deploy_labels(self, settings: dict, ctx: Any) -> bool:
        """Whether the pool's own agents go by labels another stack writes (then that stack cannot be kept off)."""
        return False

    def deploy_label_conflict(self, mine: list[str], followers: list[str]) -> str:
        """The refusal of this stack's pools ``mine`` beside the pools ``followers``, whose agents go by node labels
        this stack writes (sharing_pools' operator_mix, for a stack that places_on_every_gpu_node): its own words
        where it has them (the GPU operator's), these otherwise."""
        return ('%s pool(s) %s and pool(s) %s cannot share a cluster: the agents of %s go by node labels that %s '
                'writes on every GPU node' % (self.name, ', '.join(mine), ', '.join(followers), ', '.join(followers),
                                              self.name))

    def pool_follows_deploy_labels(self, pool_settings: dict) -> bool:
        """follows_deploy_labels for a pool of sharing_pools (settings: role variable name -> value)."""
        return False

    # -- node state

    def node_label_defaults(self, settings: dict, nodes: list[str], ctx: Any) -> dict[str, dict[str, str]]:
        """Node labels set only where a node has none (node -> {label: value})."""
        return {}

    def node_state(self) -> dict:
        """What its agents leave on a Node beyond the kubelet's registration (the strategy model's node_state)."""
        return gpu_strategy.node_state(self.name)

    # -- what the render reads from the cluster (stacks/live)

    def live_queries(self, settings: dict, present: bool, namespace: str) -> list[dict]:
        """k8s_objects_info queries for objects the strategy's render needs."""
        return []

    def wants_version(self, settings: dict, present: bool) -> bool:
        """Whether the API server's version must be read (its settings do not give it)."""
        if self.version_key is None or not (present or self.version_on_removal):
            return False
        return not settings_of(settings, self.version_key).get('kube_version')

    def merge_objects(self, settings: dict, objects: dict, namespace: str, var: str) -> None:
        """Put what the queries of any pool found (objects: key -> list) into ``settings`` (changed in place)."""

    def stale_shared(self, pool: str, shared: list[dict], live_objects: dict) -> list[dict]:
        """The strategy's own shared objects (besides the NVIDIA family's RuntimeClasses) that ``pool`` is recorded on
        and this render (``shared``) no longer makes, read from ``live_objects`` (its live_queries' answers by key):
        the role releases them by their records alone (render's stale_shared_keep false)."""
        return []

    def merge_version(self, settings: dict, version: str) -> None:
        """Put the API server's gitVersion into the strategy's settings when they do not give one."""
        if self.version_key is not None and not settings_of(settings, self.version_key).get('kube_version'):
            settings[self.version_key] = dict(settings_of(settings, self.version_key), kube_version=version)

    # -- GPU pods

    def pod_runtime_class(self, settings: dict, var: str) -> str:
        """The runtimeClassName a GPU pod of the pool must set ('' when nvidia must be the default runtime)."""
        return ''

    def runtime_class_note(self, runtime_class_name: str) -> str | None:
        """A note of the strategy's own about its GPU pods' runtime (None: the shared wording)."""
        return None

    def validation(self, ctx: Any, settings: dict, limits: dict, scheduler_name: str | None, val: dict, image: str,
                   runtime_class_name: str, claim_api_version: str | None = None) -> list[dict] | None:
        """The validation workload of the pool (val: the checked validation settings, image: its image as the
        registry mirror gives it), or None for the shared one (a pod asking for ``limits``)."""
        return None

    # -- migration between a device-plugin pool and a dra pool (strategy_migration)

    def migration_labels(self) -> dict[str, str]:
        """The labels this stack's render gives every node of a pool of this strategy besides the strategy and pool
        labels, as far as their values do not come from the pool's settings (migration_settings_labels)."""
        return dict(self.pool_node_labels)

    def migration_label_keys(self) -> list[str]:
        """Every label key this stack's render may give a node of a pool of this strategy (a move away drops them)."""
        return sorted(set(self.migration_labels()) | set(self.migration_settings_labels()))

    def migration_settings_labels(self) -> list[str]:
        """The label keys whose values come from the pool's settings, which a move onto the pool cannot know."""
        return []

    def serving_sign(self, resource: str) -> dict:
        """What shows this strategy's plugin serving a node: its extended resource ``resource`` in the allocatable."""
        return {'kind': 'resource', 'resource': resource}

    # -- the stack's own metrics (metrics/stack_metrics)

    def own_metrics(self, settings: dict) -> dict | None:
        """What the stack's own components serve as Prometheus metrics, for metrics/stack_metrics to scrape, or None
        (nothing: a strategy dcgm-exporter attributes, or a stack with no metrics). A dict: ``pool`` (the pool's pods that
        serve metrics: ``app``, their app.kubernetes.io/name, ``port`` and ``port_name``; None when the pool's agents
        serve none), ``scheduler`` (the stack's cluster-wide scheduler: ``selects`` 'pods' - the collection renders it,
        ``labels`` are its pods' - or 'service' - the stack's own installation, ``labels`` are its metrics Service's;
        ``port``, ``port_name``, ``namespace`` (None: the stack's namespace), ``needs`` (what it must run with, or ''),
        ``service``), ``allocations`` (the scheduler serves per-pod allocations with these settings) and ``usage``
        (per-container usage)."""
        return None

    # -- the share report (report/model)

    def node_shows(self, labels: dict, annotations: dict, resources: dict, registered: list[str],
                   recorded: str | None = None) -> bool:
        """Whether a node shows this strategy: a resource above zero that the model gives to it alone (``resources``:
        name -> quantity; ``registered``: the strategies whose registration_annotations the node carries;
        ``recorded``: the strategy the collection recorded for the node's pool, gpu_node_labels' strategy label,
        which a stack may read where the agents' resources alone do not tell, never against what they publish)."""
        return any(qty and (RESOURCES.get(name) or (None,))[0] == self.name for name, qty in resources.items())

    def accounting_conflicts(self, strategies: list[str], whole: list[str]) -> list[str]:
        """What the report says about this strategy's accounting beside the others of ``strategies`` on one node
        (called when they are of several families; ``whole``: those of whole-GPU accounting); [] for nothing of its
        own (the report then says it in general words)."""
        return []
