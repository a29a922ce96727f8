#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_metrics_manifests
short_description: Render the Kubernetes objects that scrape one pool's GPU metrics (dcgm-exporter, HAMi, Volcano)
version_added: 0.1.0
description:
  - Renders, for one node pool and its sharing O(strategy), NVIDIA's dcgm-exporter at the collection's pinned image
    (through O(registry), the mirror) - a ConfigMap with the counters it collects, a DaemonSet on the pool's nodes, a
    Service on port 9400 named C(metrics), its ServiceAccount and, for V(dra), the least RBAC it needs - and the
    monitoring objects.
  - The DaemonSet attributes GPU usage to pods as the strategy needs - the kubelet's pod-resources API for every
    strategy, the exporter's virtual-GPU option (C(KUBERNETES_VIRTUAL_GPUS)) and resource C(nvidia.com/gpu.shared) for
    V(time-slicing) and V(mps), MIG instance labels (C(GPU_I_PROFILE), C(GPU_I_ID)) as the exporter emits them for
    V(mig), and the DRA option (C(KUBERNETES_ENABLE_DRA)) with read access to ResourceSlices and Pods for V(dra).
  - With O(monitoring_api) true (or a list of API versions that holds C(monitoring.coreos.com/v1)) a ServiceMonitor
    selects the Service; otherwise the Service carries C(prometheus.io/scrape), C(prometheus.io/port) and
    C(prometheus.io/path) annotations. The caller detects the API (for example with M(gpuops.k8s_gpu.k8s_objects_info)
    or C(kubernetes.core.k8s_cluster_info)); the module never assumes it.
  - Pure and read-only; it talks to no cluster. Apply the objects with M(gpuops.k8s_gpu.k8s_converge) and prune with
    RV(prune).
  - For V(hami) and V(volcano) no dcgm-exporter is rendered (it does not attribute their resources to pods); the
    stack's own metrics are scraped instead. V(hami) - a Service C(hami-monitor-<pool>) in the stack's namespace
    (O(stack_namespace)) selecting the pool's device plugin pods, whose vGPU monitor serves C(:9394/metrics) (per
    container memory used and limit, SM utilisation), and a ServiceMonitor with C(honorLabels) (or the scrape
    annotations); with O(scheduler), the HAMi scheduler's C(:9395/metrics) (what it allocated) once, as Service and
    ServiceMonitor C(hami-scheduler-metrics). V(volcano) - the device plugins the collection deploys serve no
    metrics; with O(scheduler) and the Prometheus Operator's API, a ServiceMonitor C(volcano-scheduler-metrics)
    selecting Volcano's own Service C(volcano-scheduler-service) (C(:8080/metrics)), which already carries the scrape
    annotations, so without the API nothing is rendered for it.
  - V(gpushare), V(gpu-manager) and V(gpu-operator) are refused with the reason.
  - The facts behind each object and option are the rows of C(docs/conformance/dcgm-exporter.md) (STKM-* for HAMi
    and Volcano).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
attributes:
  check_mode:
    details:
      - This module does not modify state; check mode returns the same result as a normal run.
options:
  strategy:
    description:
      - Sharing strategy of the pool. The strategies whose pods dcgm-exporter can attribute, and those whose stack
        serves metrics of its own (V(hami), V(volcano)); V(gpu-operator) deploys its own exporter, and V(gpushare)
        and V(gpu-manager) count GPUs with resources dcgm-exporter skips and serve no metrics.
    type: str
    required: true
    choices: [exclusive, time-slicing, mps, mig, volcano, hami, dra]  # metrics/exporter.ALL_STRATEGIES
  pool:
    description: Name of the node pool (a DNS label of at most 49 characters); the objects are named C(dcgm-exporter-<pool>).
    type: str
    required: true
  namespace:
    description: Namespace of the exporter's namespaced objects.
    type: str
    default: kube-system
  registry:
    description: Image registry prefix (the collection's C(gpuops_mirror.registry)); empty to pull from nvcr.io.
    type: str
    default: ''
    aliases: [mirror]
  image_pull_secrets:
    description: Names of the image pull Secrets the exporter's pods get.
    type: list
    elements: str
    default: []
  node_selector:
    description: More node labels the pool's nodes carry, added to the pool and strategy labels the DaemonSet selects.
    type: dict
    default: {}
  strategy_label:
    description: The node label the pool's strategy is recorded in (role C(gpu_node_labels)' C(gpu_node_labels_strategy_label)).
    type: str
    default: gpuops.io/sharing-strategy
  settings:
    description:
      - The pool's sharing stack settings (as for M(gpuops.k8s_gpu.gpu_stack_manifests)); only the runtime class the
        pool's GPU pods use is read, for the exporter's pods, and for V(hami) and V(volcano) the stack's namespace
        (C(gpu_sharing_stack_namespace); C(volcano.namespace)) and Volcano's C(mode), keyed with or without the
        C(gpu_sharing_stack_) prefix.
    type: dict
    default: {}
  stack_namespace:
    description:
      - V(hami) - the namespace of HAMi's stack (role C(gpu_sharing_stack)'s C(gpu_sharing_stack_namespace)), where its
        pods run; the scrape objects go there. Empty - from O(settings), else V(kube-system).
      - V(volcano) - Volcano's scheduler is in C(volcano.namespace) of O(settings) (default V(volcano-system)).
    type: str
    default: ''
  scheduler:
    description:
      - V(hami) and V(volcano) - also scrape the stack's scheduler, a cluster-wide component shared by every pool of
        the stack. Set it true on one pool of the stack only (role C(gpuops.k8s_gpu.gpu_metrics) sets it on the first
        one), so the scheduler is scraped once; its objects carry that pool's labels and prune.
    type: bool
    default: true
  resource_names:
    description:
      - More extended resource names to attribute, beyond C(nvidia.com/gpu), the MIG resources and the ones the
        strategy advertises (for example a time-slicing C(resource_name) of your own).
    type: list
    elements: str
    default: []
  monitoring_api:
    description:
      - Whether the cluster serves C(monitoring.coreos.com/v1) (the Prometheus Operator's API) - a boolean, or the
        cluster's API versions as a list of C(group/version) strings.
    type: raw
    default: false
  monitoring_served:
    description:
      - Whether the cluster serves C(monitoring.coreos.com/v1), detected, whatever form O(monitoring_api) asks - a
        boolean or the cluster's API versions. Where it is served, RV(prune) names the ServiceMonitor kind and, with
        O(monitoring_api) false, RV(stale) names the pool's ServiceMonitors, so that a switch to scrape annotations
        removes the ServiceMonitors made before.
      - By default as O(monitoring_api).
    type: raw
  scrape_interval:
    description: The ServiceMonitor's scrape interval.
    type: str
    default: 30s
  extra_labels:
    description: Labels added to every object (keys the collection selects by are refused).
    type: dict
    default: {}
  rules:
    description:
      - A Prometheus rule file (a dictionary with C(groups)), returned as a PrometheusRule when O(monitoring_api) says
        the API is there, else as a ConfigMap holding the file.
    type: dict
  rules_name:
    description: Name of the PrometheusRule or ConfigMap of O(rules).
    type: str
    default: gpuops-gpu-rules
'''

EXAMPLES = r'''
- name: Scrape the HAMi pool a100 (its vGPU monitor, and HAMi's scheduler once)
  gpuops.k8s_gpu.gpu_metrics_manifests:
    strategy: hami
    pool: a100
    stack_namespace: kube-system
    monitoring_api: true
  register: hami_metrics

- name: Find the Prometheus Operator's API
  kubernetes.core.k8s_cluster_info:
  register: cluster

- name: Render the exporter of the time-slicing pool t4
  gpuops.k8s_gpu.gpu_metrics_manifests:
    strategy: time-slicing
    pool: t4
    registry: "{{ gpuops_mirror.registry | default('') }}"
    monitoring_api: "{{ cluster.apis.keys() | list }}"
  register: exporter

- name: Apply it
  gpuops.k8s_gpu.k8s_converge:
    definitions: "{{ exporter.objects }}"
'''

RETURN = r'''
objects:
  description:
    - Every object, in apply order (ServiceAccount, ConfigMap, RBAC, DaemonSet, Service, ServiceMonitor, rules).
    - For V(hami) and V(volcano) the Services and ServiceMonitors only.
  returned: always
  type: list
  elements: dict
image:
  description: The exporter's image as the pods pull it (the pin, through the mirror); empty for V(hami) and V(volcano).
  returned: always
  type: str
  sample: nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless
monitoring:
  description: Whether the monitoring.coreos.com/v1 objects were rendered (else scrape annotations).
  returned: always
  type: bool
attribution:
  description: How the pool's GPU usage is attributed to pods.
  returned: always
  type: dict
  contains:
    source:
      description: V(hami) or V(volcano) - the stack's own metrics (returned for those strategies only).
      type: str
    usage:
      description: Per-container usage series (HAMi's vGPU monitor; returned for V(hami) and V(volcano) only).
      type: bool
    allocations:
      description: Per-pod allocation series of the stack's scheduler (returned for V(hami) and V(volcano) only).
      type: bool
    pods:
      description: Pod, namespace and container labels (dcgm-exporter - from the kubelet's pod-resources API; V(hami) - from its vGPU monitor).
      type: bool
    virtual_gpus:
      description: The virtual-GPU option (shared GPUs, label C(vgpu)).
      type: bool
    dra:
      description: The DRA option (claim, pool and device labels).
      type: bool
    resource_names:
      description: The resources whose devices are attributed.
      type: list
      elements: str
    mig_instances:
      description: MIG instances get C(GPU_I_PROFILE) and C(GPU_I_ID).
      type: bool
prune:
  description:
    - What M(gpuops.k8s_gpu.k8s_converge) may prune after the apply - the exporter's objects of this pool only; the
      ServiceMonitor kind where O(monitoring_served).
  returned: always
  type: list
  elements: dict
stale:
  description:
    - The other monitoring form's objects of this pool, by kind and name (the ServiceMonitors - dcgm-exporter's, or a
      HAMi or Volcano pool's - where O(monitoring_served) and the Services carry scrape annotations), for a caller that
      removes the pool (the prune covers a present run).
  returned: always
  type: list
  elements: dict
notes:
  description: What the cluster must provide beyond the objects.
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics.exporter import (
    ALL_STRATEGIES, render, rule_objects)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL, StackError


def argument_spec() -> dict:
    return dict(
        strategy=dict(type='str', required=True, choices=list(ALL_STRATEGIES)),
        pool=dict(type='str', required=True),
        namespace=dict(type='str', default='kube-system'),
        registry=dict(type='str', default='', aliases=['mirror']),
        image_pull_secrets=dict(type='list', elements='str', default=[], no_log=False),
        node_selector=dict(type='dict', default={}),
        strategy_label=dict(type='str', default=STRATEGY_LABEL),
        settings=dict(type='dict', default={}),
        stack_namespace=dict(type='str', default=''),
        scheduler=dict(type='bool', default=True),
        resource_names=dict(type='list', elements='str', default=[]),
        monitoring_api=dict(type='raw', default=False),
        monitoring_served=dict(type='raw'),
        scrape_interval=dict(type='str', default='30s'),
        extra_labels=dict(type='dict', default={}),
        rules=dict(type='dict'),
        rules_name=dict(type='str', default='gpuops-gpu-rules'),
    )


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        out = render(module.params)
        if module.params['rules'] is not None:
            out['objects'] += rule_objects(module.params['rules'], module.params['rules_name'],
                                           module.params['namespace'], module.params['monitoring_api'],
                                           module.params['extra_labels'])
    except StackError as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, **out)


if __name__ == '__main__':
    main()
