#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_stack_manifests
short_description: Render the Kubernetes manifests of a GPU sharing stack for one node pool
version_added: 0.1.0
description:
  - Renders, for one node pool and one sharing O(strategy), the Kubernetes objects of the stack (device plugin,
    scheduler parts, RBAC, configuration), the node labels the pool's nodes need, optional validation workloads, and
    for V(gpu-operator) and V(dra) (NVIDIA's DRA driver) the values for C(kubernetes.core.helm).
  - Pure and read-only; it talks to no cluster. Role P(gpuops.k8s_gpu.gpu_sharing_stack#role) applies the objects with
    M(gpuops.k8s_gpu.k8s_converge); the node labels go to role C(gpuops.k8s_gpu.gpu_node_labels).
  - Checks the input before anything is rendered - strategy, settings (unknown keys, types, ranges such as time-slicing
    replicas >= 2), pinned image tags, the hardware facts of C(gpuops.k8s_gpu.gpu_info) (MPS needs compute capability
    >= 7.0, MIG needs MIG-capable GPUs and existing profiles), two strategies on one pool, and two GPU accountings on one
    node (GPU memory next to whole GPUs) - and fails with a message naming the role variable, the node and what is allowed.
  - Every image goes through O(registry) (the collection's C(gpuops_mirror.registry)) and gets O(image_pull_secrets).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
  - gpuops.k8s_gpu.attributes.controller
attributes:
  check_mode:
    details:
      - This action does not modify state; check mode returns the same result as a normal run.
  platform:
    details:
      - The render runs on the controller (POSIX); nothing runs on the target host.
options:
  strategy:
    description: Sharing strategy of the pool.
    type: str
    required: true
    choices: [exclusive, time-slicing, mps, mig, gpushare, volcano, hami, gpu-manager, gpu-operator, dra]  # make generate: gpu_strategy.STRATEGIES
  pool:
    description: Name of the node pool (a DNS label); object names and the node label C(gpuops.io/sharing-pool) use it.
    type: str
    required: true
  nodes:
    description: Kubernetes node names of the pool.
    type: list
    elements: str
    default: []
  node_selector:
    description: Extra node selector for the pool's DaemonSets (with O(nodes) empty, the only selector).
    type: dict
    default: {}
  namespace:
    description: Namespace of the stack's namespaced objects.
    type: str
    default: kube-system
  registry:
    description: Image registry prefix (mirror) for every image; empty to pull from the upstream registries.
    type: str
    default: ''
  image_pull_secrets:
    description: Names of the image pull Secrets every pod gets.
    type: list
    elements: str
    default: []
  settings:
    description:
      - Settings per strategy family, keyed V(nvidia), V(time_slicing), V(mps), V(mig), V(gpushare), V(volcano),
        V(hami), V(gpu_manager), V(gpu_operator), V(dra). Only the ones the strategy uses are read; see the role's argument
        specification for every key.
    type: dict
    default: {}
  facts:
    description: Per node name, the facts of M(gpuops.k8s_gpu.gpu_info) (role C(gpu_probe) publishes them as C(gpu_probe_facts)).
    type: dict
    default: {}
  require_facts:
    description: For V(mps) and V(mig), fail when a node of the pool has no facts.
    type: bool
    default: true
  node_state:
    description:
      - Per node name, C(labels) and C(allocatable) of the live Node object, for the conflict checks (another
        strategy or pool on the node, another device plugin's GPU accounting).
    type: dict
    default: {}
  live_nodes:
    description: Node objects as read from the cluster (C(kubernetes.core.k8s_info) resources); fills O(node_state) for the pool's nodes.
    type: list
    elements: dict
    default: []
  node_strategies:
    description: Per node name, the strategy the inventory sets for that node; any other than O(strategy) is refused.
    type: dict
    default: {}
  check_conflicts:
    description: Refuse conflicting strategies and accountings (the role turns this off when it removes a stack).
    type: bool
    default: true
  allow_mixed_accounting:
    description: Do not refuse a node that already advertises GPU resources of another accounting.
    type: bool
    default: false
  validation:
    description:
      - Validation workloads - C(enabled) (bool), C(namespace), C(image), C(replicas) (gpushare binpack sample),
        C(runtime_class_name) (default - as the stack, see RV(runtime_class_name); V("") names none).
    type: dict
    default: {}
  live_runtime_classes:
    description:
      - RuntimeClass objects as read from the cluster. For the NVIDIA strategies the RuntimeClass named by
        C(settings.nvidia.runtime_class_name) is rendered only when it is missing or was created by this module; one
        created by anything else is used as it is and never changed.
    type: list
    elements: dict
    default: []
  live:
    description:
      - The result of M(gpuops.k8s_gpu.k8s_objects_info) for the queries the stack needs (role
        P(gpuops.k8s_gpu.gpu_sharing_stack#role) builds them with the filter P(gpuops.k8s_gpu.stack_live_queries#filter)).
      - Its C(objects.nodes) replace O(live_nodes) and its C(objects.runtime_classes) replace O(live_runtime_classes);
        Volcano's live scheduler configuration, kube-proxy's configuration and the API server version fill
        C(settings.volcano.existing_conf), C(settings.gpushare.kube_proxy_config) and C(settings.hami.kube_version)
        where those are not set; a HAMi webhook TLS Secret that was looked up and not found is refused.
    type: dict
    default: {}
  cdi_spec_ready:
    description:
      - Per node name, the host fact C(nvidia_container_runtime_cdi_spec_ready) that role
        C(gpuops.k8s_gpu.nvidia_container_runtime) sets. The CDI device list strategies (V(cdi-annotations),
        V(cdi-cri)) are refused unless every node of the pool has V(true) here (or
        C(settings.nvidia.assume_cdi_spec_ready) is V(true)).
    type: dict
    default: {}
  cdi_enabled:
    description:
      - Per node name, the host variable C(nvidia_container_runtime_cdi) of role
        C(gpuops.k8s_gpu.nvidia_container_runtime) (CDI on in the container runtime). Strategy V(dra) is refused
        unless every node of the pool has V(true) here (or C(settings.dra.assume_cdi_enabled) is V(true)).
    type: dict
    default: {}
  strategy_label:
    description:
      - The node label that records the sharing strategy of a node's pool, as role C(gpuops.k8s_gpu.gpu_node_labels)
        writes it (its C(gpu_node_labels_strategy_label); role P(gpuops.k8s_gpu.gpu_sharing_stack#role) passes its
        C(gpu_sharing_stack_strategy_label), which defaults to that).
      - The pool's nodes get it in RV(node_labels); the live nodes' pools are read by it (a node of another pool or
        strategy is refused, the pools that share an object); the DRA kubelet plugin's DaemonSet (V(dra)) is given a
        node affinity on it being V(dra).
      - Must be a Kubernetes label key (C([prefix/]name)).
    type: str
    default: gpuops.io/sharing-strategy
  var_prefix:
    description: Prefix of the variable names used in error messages.
    type: str
    default: gpu_sharing_stack_
  inventory_vars:
    description:
      - Also read, for every node of O(nodes) that is an inventory host, its host variables C(gpu_probe_facts),
        C(gpu_sharing_stack_strategy), C(nvidia_container_runtime_cdi_spec_ready) and C(nvidia_container_runtime_cdi)
        into O(facts), O(node_strategies), O(cdi_spec_ready) and O(cdi_enabled) (entries given in those options win),
        as filter P(gpuops.k8s_gpu.pool_host_vars#filter) does.
      - Read by the action plugin on the controller, so the nodes' facts are not templated into the task's arguments;
        a run of the module itself (no inventory) fails with it.
    type: bool
    default: false
requirements:
  - PyYAML (with ansible-core) to merge an existing Volcano scheduler configuration.
notes:
  - Runs on the controller - an action plugin of the same name renders in the Ansible process itself, so no module is
    sent to any host, C(delegate_to) and the connection have no effect, and no Python is needed on the target.
  - No helm binary is used; for V(gpu-operator) and V(dra) the rendered values are checked against a documented list of the chart's keys.
seealso:
  - module: gpuops.k8s_gpu.k8s_converge
  - module: gpuops.k8s_gpu.gpu_info
'''

EXAMPLES = r'''
- name: Render a time-slicing stack for pool a100
  gpuops.k8s_gpu.gpu_stack_manifests:
    strategy: time-slicing
    pool: a100
    nodes: "{{ groups['a100'] }}"
    registry: "{{ gpuops_mirror.registry | default('') }}"
    image_pull_secrets: [regcred]
    settings:
      time_slicing: {replicas: 4, rename_by_default: false, fail_requests_greater_than_one: true}
    facts: "{{ dict(groups['a100'] | zip(groups['a100'] | map('extract', hostvars, 'gpu_probe_facts'))) }}"
  register: stack

- name: Apply it
  gpuops.k8s_gpu.k8s_converge:
    definitions: "{{ stack.manifests }}"
'''

RETURN = r'''
manifests:
  description: Every object of the stack, in apply order.
  returned: always
  type: list
  elements: dict
pool_manifests:
  description: The objects that belong to this pool only.
  returned: always
  type: list
  elements: dict
shared_manifests:
  description:
    - Cluster-wide objects shared by every pool of the same strategy (scheduler extender, HAMi scheduler).
    - Role P(gpuops.k8s_gpu.gpu_sharing_stack#role) records the pool on each (annotation C(user.gpuops.io/<pool>)) and
      deletes one only when no other pool is recorded on it or in RV(other_pools).
  returned: always
  type: list
  elements: dict
stale_shared_manifests:
  description:
    - Shared objects (read with O(live)) on which this pool is recorded but which it no longer uses; the role releases
      them (its record goes, the object too once no other pool is recorded on it).
    - RuntimeClasses (its C(runtime_class_name) changed); for strategy C(dra), the collection's ResourceSlice admission
      policy and its binding (C(resourceslice_policy) switched off, or the release namespace moved) and the
      DeviceClass of an extended resource dropped from C(extended_resources).
  returned: always
  type: list
  elements: dict
stale_shared_keep:
  description: What the role passes as O(gpuops.k8s_gpu.k8s_converge#module:keep) when it releases
    RV(stale_shared_manifests) after an apply - RV(keep_shared) for RuntimeClasses, false for the DRA stack's objects
    (made from release settings every dra pool agrees on, so the records alone decide).
  returned: always
  type: bool
prune:
  description: What the role prunes after the apply (module M(gpuops.k8s_gpu.k8s_converge) option O(gpuops.k8s_gpu.k8s_converge#module:prune)) -
    the pool's own objects, by their labels, over every kind a strategy renders for a pool, that this render no longer
    makes (a MIG manager switched off, the pool's previous namespace).
  returned: always
  type: dict
  contains:
    label_selector:
      description: The pool's labels, as a label selector.
      type: str
    kinds:
      description: The kinds listed (C(api_version), C(kind)).
      type: list
      elements: dict
adopted_manifests:
  description: Objects of another installation this stack changes (Volcano's scheduler ConfigMap); never deleted.
  returned: always
  type: list
  elements: dict
validation_manifests:
  description: Validation workloads, when O(validation) has C(enabled=true).
  returned: always
  type: list
  elements: dict
node_labels:
  description:
    - Per node, the labels the stack needs. The stack never writes them itself - role P(gpuops.k8s_gpu.gpu_sharing_stack#role)
      publishes them and role C(gpuops.k8s_gpu.gpu_node_labels), the one writer of Node labels, sets them
      (C(gpu_node_labels_stacks)).
  returned: always
  type: dict
  sample: {gpu-node-1: {gpushare: 'true', gpuops.io/sharing-pool: a100, gpuops.io/sharing-strategy: gpushare}}
node_label_defaults:
  description:
    - Per node, labels to set only where the node has no value (another component may change them afterwards); for
      V(mig) with the MIG manager, C(nvidia.com/gpu.deploy.device-plugin=true), which mig-manager pauses while it
      reconfigures.
  returned: always
  type: dict
  sample: {gpu-node-1: {nvidia.com/gpu.deploy.device-plugin: 'true'}}
node_manifests:
  description:
    - Node definitions carrying only RV(node_labels), for schema checks. No role of the collection applies them
      (Node labels have one writer, role C(gpuops.k8s_gpu.gpu_node_labels)).
  returned: always
  type: list
  elements: dict
resources:
  description: Extended resources the stack advertises.
  returned: always
  type: list
  elements: str
  sample: [aliyun.com/gpu-mem, aliyun.com/gpu-count]
other_pools:
  description:
    - Other pools whose nodes (in O(live_nodes)) carry the same strategy (for the NVIDIA strategies, any of V(exclusive),
      V(time-slicing), V(mps), V(mig), which share one RuntimeClass).
  returned: always
  type: list
  elements: str
keep_shared:
  description:
    - Whether the role keeps the shared objects on removal whatever the records on them say (module
      M(gpuops.k8s_gpu.k8s_converge) option O(gpuops.k8s_gpu.k8s_converge#module:keep)) - there are pools in RV(other_pools) for which the records
      cannot decide - for the NVIDIA strategies, whose RuntimeClass names are each pool's setting, only pools recorded
      on no RuntimeClass (installed before pools were recorded); for the other strategies any other pool.
  returned: always
  type: bool
accounting:
  description: How the strategy accounts GPUs (V(whole-gpu), V(aliyun-gpu-mem), V(volcano-gpu-mem), V(tencent-vcuda), V(hami)).
  returned: always
  type: str
scheduler_name:
  description: Scheduler name pods must use (V(volcano), HAMi's), or null for the default scheduler.
  returned: always
  type: str
runtime_class_name:
  description:
    - The C(runtimeClassName) every GPU pod of the pool must set to get its GPU (the validation workloads carry it) -
      the NVIDIA strategies' RuntimeClass (default V(nvidia)), C(gpu_operator.runtime_class) (default V(nvidia)) for
      V(gpu-operator) (the operator creates it). Empty for V(gpushare), V(volcano), V(hami), V(gpu-manager) - their
      device plugins need nvidia as the nodes' default runtime, and so do GPU pods.
  returned: always
  type: str
runtime_class_wait:
  description:
    - The RuntimeClass a validation workload names that none of the stack's objects makes (for V(gpu-operator) the
      operator creates it once its ClusterPolicy is reconciled, after the Helm install), or null. Role
      C(gpuops.k8s_gpu.gpu_sharing_stack) (entry point C(ready)) waits for it before it applies the validation workloads,
      since the API server rejects a pod that names a RuntimeClass that does not exist.
  returned: always
  type: str
restarts:
  description:
    - Workloads of others that read a config of this stack once per process, to restart when that config changed -
      for Volcano's vGPU mode, C(volcano-scheduler) (C(kind), C(api_version), C(namespace), C(name)), restarted by
      setting the pod template annotation C(annotation) to C(value) when the object C(when_changed) was created or
      updated by the apply.
  returned: always
  type: list
  elements: dict
readiness:
  description:
    - What must hold before the stack is ready, or null. For V(mig) with the MIG manager - C(label)
      (C(nvidia.com/mig.config.state)), the C(value) it must reach on every node in C(nodes) (V(success)) and the
      C(failed_value) that means the MIG manager gave up (V(failed)).
  returned: always
  type: dict
extender_url:
  description:
    - For V(gpushare), the url_prefix kube-scheduler must use for the extender (give it to role
      gpuops.k8s_gpu.kube_scheduler_extender); it follows C(gpu_sharing_stack_gpushare.registration).
    - For V(gpu-manager), gpu-admission's url_prefix (C(gpu_sharing_stack_gpu_manager.admission_registration)). Null otherwise.
  returned: always
  type: str
extender:
  description:
    - For V(gpu-manager), gpu-admission's whole entry for C(kube_scheduler_extender_extenders) of role
      gpuops.k8s_gpu.kube_scheduler_extender (the C(extenders) option of module gpuops.k8s_gpu.kube_scheduler_config) -
      C(url_prefix), C(filter_verb) V(predicates), no C(bind_verb), C(node_cache_capable) false, C(managed_resources)
      C(tencent.com/vcuda-core) and C(tencent.com/vcuda-memory), C(ignorable) false. Null otherwise.
  returned: always
  type: dict
helm:
  description: For V(gpu-operator) and V(dra), the arguments for C(kubernetes.core.helm) (chart_ref, release_name, release_namespace,
    create_namespace, values, chart_version); null otherwise.
  returned: always
  type: dict
images:
  description: Every image reference used, after the mirror.
  returned: always
  type: list
  elements: str
warnings:
  description: Warnings (known-bad images, MiB memory unit, deprecations); also shown as Ansible warnings.
  returned: when there are any
  type: list
  elements: str
notes:
  description: Things to know that are not problems (what else the stack needs).
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.render import argument_spec, render


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    if module.params['inventory_vars']:
        module.fail_json(msg='inventory_vars is read by the action plugin of gpuops.k8s_gpu.gpu_stack_manifests on the '
                             'controller; this module run has no inventory (give facts, node_strategies, cdi_spec_ready '
                             'and cdi_enabled instead)')
    try:
        out = render(module.params)
    except StackError as e:
        module.fail_json(msg=str(e))
    for w in out['warnings']:
        module.warn(w)
    module.exit_json(changed=False, **out)


if __name__ == '__main__':
    main()
