#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_metrics_manifests
short_description: Render the Kubernetes objects of one pool's GPU metrics exporter (NVIDIA dcgm-exporter)
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
  - The facts behind each object and option are the rows of C(docs/conformance/dcgm-exporter.md).
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
      - Sharing strategy of the pool. The strategies whose pods dcgm-exporter can attribute; V(gpu-operator) deploys
        its own exporter, and the memory-sharing stacks count GPUs with resources of their own.
    type: str
    required: true
    choices: [exclusive, time-slicing, mps, mig, dra]  # metrics/exporter.STRATEGIES
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
        pool's GPU pods use is read, for the exporter's pods.
    type: dict
    default: {}
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
  description: Every object, in apply order (ServiceAccount, ConfigMap, RBAC, DaemonSet, Service, ServiceMonitor, rules).
  returned: always
  type: list
  elements: dict
image:
  description: The exporter's image as the pods pull it (the pin, through the mirror).
  returned: always
  type: str
  sample: nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless
monitoring:
  description: Whether the monitoring.coreos.com/v1 objects were rendered (else scrape annotations).
  returned: always
  type: bool
attribution:
  description: How the exporter attributes the pool's GPUs.
  returned: always
  type: dict
  contains:
    pods:
      description: Pod, namespace and container labels from the kubelet's pod-resources API.
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
  description: What M(gpuops.k8s_gpu.k8s_converge) may prune after the apply - the exporter's objects of this pool only.
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
    STRATEGIES, render, rule_objects)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL, StackError


def argument_spec() -> dict:
    return dict(
        strategy=dict(type='str', required=True, choices=list(STRATEGIES)),
        pool=dict(type='str', required=True),
        namespace=dict(type='str', default='kube-system'),
        registry=dict(type='str', default='', aliases=['mirror']),
        image_pull_secrets=dict(type='list', elements='str', default=[], no_log=False),
        node_selector=dict(type='dict', default={}),
        strategy_label=dict(type='str', default=STRATEGY_LABEL),
        settings=dict(type='dict', default={}),
        resource_names=dict(type='list', elements='str', default=[]),
        monitoring_api=dict(type='raw', default=False),
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
