#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_share_report
short_description: Report who holds which GPU in a Kubernetes cluster, for every GPU sharing strategy
version_added: 0.1.0
description:
  - Reads the cluster's Nodes and the Pods that have not finished (phase not C(Succeeded) or C(Failed)) with the
    kubernetes Python client and accounts GPU resources per node, per GPU where the strategy publishes it, and for the
    cluster.
  - "gpushare (Alibaba gpushare scheduler extender and device plugin): C(aliyun.com/gpu-mem) and C(aliyun.com/gpu-count)
    node resources, pod annotations C(ALIYUN_COM_GPU_MEM_IDX), C(ALIYUN_COM_GPU_MEM_POD), C(ALIYUN_COM_GPU_MEM_DEV),
    C(ALIYUN_COM_GPU_MEM_ASSIGNED), C(ALIYUN_COM_GPU_MEM_ASSUME_TIME). Per-GPU totals are the node's gpu-mem divided by
    its gpu-count, as C(kubectl inspect gpushare) shows them; pods without a GPU index are counted as pending."
  - "NVIDIA device plugin: C(nvidia.com/gpu) (whole GPUs, or GPUs x replicas with time-slicing or MPS sharing, from
    the GFD labels C(nvidia.com/gpu.replicas) and C(nvidia.com/gpu.sharing-strategy)), the renamed
    C(nvidia.com/gpu.shared), and MIG devices C(nvidia.com/mig-<profile>) (mixed strategy) or C(nvidia.com/gpu) with
    C(nvidia.com/mig.strategy=single). The device plugin does not publish which GPU a pod got, so these are node
    totals."
  - "The collection's NVIDIA stacks do not deploy GPU feature discovery (GFD). On a node without GFD's labels
    (C(nvidia.com/mig.strategy), C(nvidia.com/gpu.sharing-strategy), C(nvidia.com/gpu.replicas)),
    C(nvidia.com/gpu) takes the strategy the role gpu_node_labels recorded for the node's pool in the label
    O(strategy_label) when that is V(time-slicing), V(mps) or V(mig) (MIG strategy single), else V(exclusive).
    What the node publishes wins over that record: MIG devices, C(nvidia.com/gpu.shared), GFD's labels where present,
    a HAMi registration. A record the node contradicts (the label says V(time-slicing), GFD says one replica) is a
    note of the node and of the cluster in RV(notes), not an accounting conflict."
  - "Replicas per GPU likewise: GFD's C(nvidia.com/gpu.replicas) where the node has it, else the label
    C(gpuops.io/sharing-replicas) that the collection's NVIDIA stack gives a time-slicing or MPS pool's nodes (the
    replicas of the device plugin config the node's C(nvidia.com/device-plugin.config) selects; role
    gpu_node_labels writes it with the pool's labels). RV(nodes[].replicas_source) says which; the table marks the
    collection's record C((record)). A record GFD's label contradicts is a note of the node and of the cluster."
  - "HAMi: C(nvidia.com/gpu), C(nvidia.com/gpumem), C(nvidia.com/gpumem-percentage), C(nvidia.com/gpucores); per-GPU
    holders from the pod annotation C(hami.io/vgpu-devices-allocated) matched by UUID against the node annotation
    C(hami.io/node-nvidia-register). Annotations in a form the module does not know are reported in RV(notes)."
  - "Volcano: C(volcano.sh/gpu-memory) and C(volcano.sh/gpu-number) (per GPU with the pod annotation
    C(volcano.sh/gpu-index)), C(volcano.sh/vgpu-number), C(volcano.sh/vgpu-memory), C(volcano.sh/vgpu-cores).
    tkestack gpu-manager: C(tencent.com/vcuda-core) and C(tencent.com/vcuda-memory)."
  - "Dynamic Resource Allocation (C(resource.k8s.io/v1), Kubernetes 1.34 and later; probed once per run by API
    discovery, nothing more is asked of a cluster that does not serve it): the ResourceClaims (of O(namespace), or of
    every namespace) and the ResourceSlices, two list requests whatever the number of nodes. Per claim, the devices
    the scheduler allocated (driver, pool, device, node and the device's C(uuid), C(productName), C(type) and MIG
    C(profile) attributes from the slice), the pods that hold it (C(status.reservedFor)), whether it is shared, and
    for a claim not allocated the scheduler's reason from its pods' C(PodScheduled) condition; per node the devices
    each DRA driver publishes and how many are allocated. See RV(dra)."
  - Flags nodes where two accountings hand out the same GPUs (gpushare gpu-mem and whole-GPU C(nvidia.com/gpu) on one
    node, for example, or NVIDIA's DRA driver C(gpu.nvidia.com) publishing devices where the device plugin advertises
    C(nvidia.com/gpu)) in RV(conflicts).
  - Returns JSON facts and a readable table, and writes a Markdown or HTML report file on request. Only the report file
    is ever written; the cluster is only read (list nodes, list pods, and where served list ResourceClaims and
    ResourceSlices).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
  - gpuops.k8s_gpu.k8s_auth_options
attributes:
  check_mode:
    details:
      - The cluster is read as usual; the report file is not written, C(changed) says whether it would be.
  diff_mode:
    details:
      - The before and after text of the report file.
options:
  nodes:
    description:
      - Only report these nodes (by name). Pods on other nodes are left out.
      - Every name must exist; an unknown name fails the module.
    type: list
    elements: str
  node_selector:
    description: Only report nodes matching this label selector, for example V(nvidia.com/gpu.present=true).
    type: str
  namespace:
    description: Only count pods of this namespace. By default pods of every namespace count.
    type: str
  gpushare_memory_unit:
    description:
      - Unit of C(aliyun.com/gpu-mem), as the gpushare device plugin was started (C(--memory-unit)). Only labels the
        numbers; nothing is converted.
    type: str
    choices: [GiB, MiB]
    default: GiB
  report_path:
    description:
      - Write the report to this file. It is rewritten only when its content differs (the report has no timestamp).
      - The parent directory must exist.
    type: path
  report_format:
    description: Format of O(report_path).
    type: str
    choices: [markdown, html]
    default: markdown
  report_mode:
    description: File mode of O(report_path) when the module writes it.
    type: str
    default: '0644'
  backup:
    description: Keep a timestamped copy of the previous O(report_path) before replacing it.
    type: bool
    default: false
  strategy_label:
    description:
      - The node label that records the sharing strategy of the node's pool, as the role gpu_node_labels writes it
        (its C(gpu_node_labels_strategy_label)) and the module M(gpuops.k8s_gpu.gpu_node_labels_apply) its
        O(gpuops.k8s_gpu.gpu_node_labels_apply#module:strategy_label).
      - Read where GFD's labels are absent to tell time-slicing, MPS and MIG single from exclusive; see the
        description for which source wins.
      - Must be a Kubernetes label key (C([prefix/]name)).
    type: str
    default: gpuops.io/sharing-strategy
  prometheus_url:
    description:
      - A Prometheus that scrapes NVIDIA's dcgm-exporter on the GPU nodes, and HAMi's vGPU monitor on HAMi pools' (its
        base URL; the module reads C(/api/v1/query)). Given, the report joins what was used with what was allocated,
        see RV(usage).
      - Ten instant queries over O(usage_window), whatever the number of nodes; nothing is written to Prometheus.
    type: str
  prometheus_token:
    description: A bearer token for O(prometheus_url) (a Prometheus behind an authenticating proxy).
    type: str
  prometheus_ca_cert:
    description: A CA bundle to verify O(prometheus_url)'s certificate with.
    type: path
  prometheus_validate_certs:
    description: Verify O(prometheus_url)'s TLS certificate.
    type: bool
    default: true
  usage_window:
    description:
      - How far back the usage is averaged, as a Prometheus duration (V(1h), V(30m), V(1d12h)).
    type: str
    default: 1h
  usage_time:
    description:
      - Evaluate the usage at this time (RFC 3339 or Unix seconds) instead of Prometheus' now, to look at a past
        window.
    type: str
  usage_idle_percent:
    description:
      - A running pod whose GPUs were all active less than this percent on average over O(usage_window) is listed in
        the C(idle) list of RV(usage). Activity is DCGM's graphics-engine activity where the GPU reports it, else its
        utilisation.
    type: float
    default: 1.0
  node_health:
    description:
      - The doctor's verdict per Kubernetes node name (the host fact C(gpuops_doctor_verdict) that playbooks/node.yml
        records; playbooks/report.yml passes it with the filter C(gpuops.k8s_gpu.doctor_health)).
      - Given, the report has a health column - V(ok), V(warning), V(CRITICAL), V(CRITICAL (gated)) (left out of its
        pool), or V(-) for a node without a verdict - and the doctor's notes about the node's pods (RuntimeClass
        C(nvidia) where nvidia is not the default runtime).
    type: dict
notes:
  - The module needs list permission on nodes and pods (cluster-wide, or in O(namespace) for pods), and where the
    cluster serves C(resource.k8s.io/v1) on C(resourceclaims) (same scope as pods) and C(resourceslices); without the
    latter the DRA part is left out with a note in RV(notes).
  - Percentages are rounded down, as C(kubectl inspect gpushare) does.
seealso:
  - module: gpuops.k8s_gpu.gpu_info
  - name: gpushare device plugin user guide (kubectl inspect gpushare)
    description: The command whose table RV(table) follows.
    link: https://github.com/AliyunContainerService/gpushare-device-plugin
'''

EXAMPLES = r'''
- name: Who holds which GPU
  gpuops.k8s_gpu.gpu_share_report:
    kubeconfig: ~/.kube/config
  register: share

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ share.table }}"

- name: Fail when a node is accounted twice
  ansible.builtin.assert:
    that: share.conflicts | length == 0
    fail_msg: "{{ share.conflicts }}"

- name: Keep an HTML report for the GPU nodes
  gpuops.k8s_gpu.gpu_share_report:
    node_selector: nvidia.com/gpu.present=true
    report_path: /var/www/reports/gpu-share.html
    report_format: html
'''

RETURN = r'''
nodes:
  description: One entry per node (GPU nodes and others), sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    address:
      description: InternalIP (else ExternalIP, else Hostname) of the node.
      type: str
    strategies:
      description: Sharing strategies the node's resources, labels and annotations show (exclusive, time-slicing, mps,
        mig, gpushare, hami, volcano, gpu-manager).
      type: list
      elements: str
    conflicts:
      description: Accounting conflicts on this node.
      type: list
      elements: str
    resources:
      description: Per GPU resource name, C(allocatable), C(allocated) (sum of the effective requests of the node's
        pods), C(free), C(percent) and C(unit). C(allocatable) is null for resources the node does not advertise;
        for HAMi's C(nvidia.com/gpumem) and C(nvidia.com/gpucores) it comes from the node's register annotation
        (C(source)). HAMi and Volcano vGPU memory and cores are per device, so they count times the device count.
      type: dict
    gpus:
      description: Per GPU where the strategy publishes it (gpushare, HAMi, Volcano gpu-share, gpu-manager) -
        C(index), C(uuid), C(type), C(memory_total), C(memory_allocated), C(memory_unit), C(memory_percent) and
        C(holders) (namespace, pod, phase, memory, cores, resource).
      type: list
      elements: dict
    gpushare:
      description: gpushare memory of the node - C(memory_total), C(memory_allocated), C(memory_pending) (pods without a
        GPU index), C(memory_percent), C(memory_unit).
      type: dict
      returned: for nodes with gpushare resources or pods
    replicas:
      description: Replicas per GPU, when above 1 - GFD's label C(nvidia.com/gpu.replicas), else the collection's
        record C(gpuops.io/sharing-replicas) (RV(nodes[].replicas_source)).
      type: int
      returned: when shared
    replicas_source:
      description: Where RV(nodes[].replicas) comes from - V(gfd) (GPU feature discovery's label) or V(record) (the
        replicas the collection's stack configured for the node's pool, label C(gpuops.io/sharing-replicas)).
      type: str
      returned: when shared
    physical_gpus:
      description: C(nvidia.com/gpu) allocatable divided by RV(nodes[].replicas).
      type: raw
      returned: when shared
    pods:
      description: The pods of this node that hold GPU resources (same form as RV(pods)).
      type: list
      elements: dict
    notes:
      description: What the module could not read or had to assume for this node.
      type: list
      elements: str
    health:
      description: The doctor's verdict as one cell - V(ok), V(warning), V(CRITICAL), V(CRITICAL (gated)) or V(-).
      type: str
      returned: when O(node_health) is given
    dra:
      description: Devices this node's ResourceSlices publish per DRA driver (C(devices)) and how many of them the
        reported claims hold (C(allocated)).
      type: dict
      returned: when the cluster serves resource.k8s.io/v1 and the node has ResourceSlices
    health_findings:
      description: The ids of the node's critical and warning findings.
      type: list
      elements: str
      returned: when O(node_health) is given and the node has such findings
pods:
  description: Pods that hold GPU resources (not finished), with C(namespace), C(name), C(node), C(phase), C(requests)
    (effective requests per GPU resource) and C(gpus) (GPU placement where known; C(pending) for gpushare pods without
    an index).
  returned: always
  type: list
  elements: dict
unscheduled:
  description: Pods that request GPU resources but have no node (or a node that does not exist).
  returned: always
  type: list
  elements: dict
cluster:
  description: Cluster totals - C(nodes), C(gpu_nodes) (nodes with GPU resources or devices of NVIDIA's DRA driver
    C(gpu.nvidia.com)), C(pods), C(unscheduled_pods), C(dra_claims) and C(dra_pending_claims) (ResourceClaims, 0 where
    resource.k8s.io/v1 is not served), C(resources) (same form as RV(nodes[].resources)) and C(gpushare) (memory
    totals, when any node has gpushare).
  returned: always
  type: dict
  sample:
    nodes: 3
    gpu_nodes: 2
    pods: 4
    unscheduled_pods: 0
    dra_claims: 0
    dra_pending_claims: 0
    resources:
      nvidia.com/gpu: {allocatable: 8, allocated: 3, free: 5, percent: 37, unit: GPU}
    gpushare: {memory_total: 60, memory_allocated: 9, memory_percent: 15, memory_unit: GiB}
dra:
  description:
    - The Dynamic Resource Allocation part. C(served) says whether the API server serves C(resource.k8s.io/v1); when
      it does not, C(claims) is empty and C(nodes) too.
    - C(claims) - one entry per ResourceClaim, sorted by namespace and name - C(namespace), C(name), C(state)
      (V(allocated) or V(pending)), C(devices) (per allocated device C(request), C(driver), C(pool), C(device),
      C(node), C(uuid), C(product), C(type), C(profile); the last four from the device's attributes in its
      ResourceSlice, null where the driver does not publish them), C(pods) (C(namespace), C(name), C(node), C(phase)
      of the pods that hold the claim, or that wait for a pending one), C(shared) (more than one pod) and C(reason)
      (pending claims - the scheduler's reason from the pods' C(PodScheduled) condition, V(no pod uses it yet), or
      V(waiting for the scheduler)).
    - C(nodes) - per node name, C(devices) (devices published per driver) and C(allocated) (devices of the reported
      claims per driver). The same entry is RV(nodes[].dra).
  returned: always
  type: dict
  sample:
    served: true
    claims:
      - namespace: ml
        name: train-gpu-x7k2p
        state: allocated
        shared: false
        reason: null
        pods: [{namespace: ml, name: train, node: gpu-a100-1, phase: Running}]
        devices:
          - {request: gpu, driver: gpu.nvidia.com, pool: gpu-a100-1, device: gpu-3, node: gpu-a100-1,
             uuid: GPU-8a5b6c1e-0b0c-4f53-9f9b-2f1b6d3c1a01, product: NVIDIA A100-SXM4-80GB, type: gpu, profile: null}
    nodes:
      gpu-a100-1: {devices: {gpu.nvidia.com: 8}, allocated: {gpu.nvidia.com: 1}}
usage:
  description:
    - What the GPUs were used for over O(usage_window), from NVIDIA dcgm-exporter's series in O(prometheus_url) (and
      HAMi's vGPU monitor's on HAMi pools), joined with the pods that hold GPU resources. C(gpus) - one entry per GPU or MIG instance the exporter reports
      (C(node), C(index), C(uuid), C(model), C(mig_instance), C(memory_used_mib) average and C(memory_used_max_mib)
      peak, C(memory_total_mib), C(active_percent), C(activity_source), C(holders) - the pods the exporter attributes
      it to, C(shared)); C(pods) - per running pod of RV(pods) its C(requests), the GPUs it was seen on,
      C(memory_used_mib) and C(active_percent) (C(measured) V(gpu) - its GPUs' use, from DCGM; V(pod) - its own use
      and its C(memory_limit_mib), from HAMi's monitor), C(shared) and C(idle); C(idle) - the pods whose GPUs stayed below
      O(usage_idle_percent); C(unseen) - running GPU pods no series names (no exporter on their node, or its
      Kubernetes attribution is off); C(unattributed) - active GPUs no pod holds; C(notes).
    - DCGM measures a GPU, not a process - on a GPU several pods share (time-slicing, MPS) each pod shows the GPU's use;
      HAMi's monitor measures each container, so a HAMi pod shows its own.
  returned: when O(prometheus_url) is set
  type: dict
conflicts:
  description: Every node conflict as C(node - message).
  returned: always
  type: list
  elements: str
notes:
  description: Everything the module could not read or had to assume, cluster-wide.
  returned: always
  type: list
  elements: str
table:
  description: A readable table. gpushare first, as C(kubectl inspect gpushare) prints it, then every other GPU
    resource per node and in the cluster.
  returned: always
  type: str
  sample: |-
    NAME    IPADDRESS  GPU0(Allocated/Total)  GPU1(Allocated/Total)  GPU Memory(GiB)
    node-a  10.0.0.11  6/15                   0/15                   6/30
    ---------------------------------------------------------------------------------
    Allocated/Total GPU Memory In Cluster:
    6/30 (20%)
report_path:
  description: The report file, when O(report_path) is set.
  returned: when O(report_path) is set
  type: str
backup_file:
  description: Copy of the previous report file.
  returned: when O(backup=true) and the file was replaced
  type: str
'''

from typing import Any

import json
import os

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import kube
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import render
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import usage
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import STRATEGY_LABEL, strategy_label_error
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import read_text, replace_file
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_gate as gate


def argument_spec() -> dict[str, Any]:
    spec = access.auth_arg_spec(env_fallback)
    spec.update(
        nodes=dict(type='list', elements='str'),
        node_selector=dict(type='str'),
        namespace=dict(type='str'),
        gpushare_memory_unit=dict(type='str', choices=['GiB', 'MiB'], default='GiB'),
        report_path=dict(type='path'),
        report_format=dict(type='str', choices=['markdown', 'html'], default='markdown'),
        report_mode=dict(type='str', default='0644'),
        backup=dict(type='bool', default=False),
        node_health=dict(type='dict'),
        strategy_label=dict(type='str', default=STRATEGY_LABEL),
        prometheus_url=dict(type='str'),
        prometheus_token=dict(type='str', no_log=True),
        prometheus_ca_cert=dict(type='path'),
        prometheus_validate_certs=dict(type='bool', default=True),
        usage_window=dict(type='str', default='1h'),
        usage_time=dict(type='str'),
        usage_idle_percent=dict(type='float', default=1.0),
    )
    return spec


def check_params(module: AnsibleModule) -> int:
    """Refuse bad input before the cluster is contacted."""
    p = module.params
    kubeconfig, error = access.check_kubeconfig(p.get('kubeconfig'))
    if error:
        module.fail_json(msg=error)
    p['kubeconfig'] = kubeconfig
    label_error = strategy_label_error(p['strategy_label'])
    if label_error:
        module.fail_json(msg=label_error)
    usage_errors = usage.check_options(p['prometheus_url'], p['usage_window'], p['usage_time'],
                                       p['usage_idle_percent'])
    if usage_errors:
        module.fail_json(msg='; '.join(usage_errors))
    try:
        mode = int(p['report_mode'], 8)
        if mode < 0 or mode > 0o7777:
            raise ValueError()
    except (TypeError, ValueError):
        module.fail_json(msg="report_mode must be an octal file mode such as '0644', got %r" % p['report_mode'])
    if p.get('report_path'):
        parent = os.path.dirname(p['report_path']) or '.'
        if not os.path.isdir(parent):
            module.fail_json(msg='report_path: directory %s does not exist' % parent)
        if os.path.isdir(p['report_path']):
            module.fail_json(msg='report_path: %s is a directory; give a file name' % p['report_path'])
    return int(p['report_mode'], 8)


def write_report(module: AnsibleModule, path: str, content: str, mode: int) -> tuple[bool, dict[str, Any], str | None]:
    """(changed, diff, backup_file) for writing content to path; nothing is written in check mode."""
    before = read_text(path)
    diff = {'before': before or '', 'after': content, 'before_header': path, 'after_header': path}
    content_changed = before != content
    current_mode = (os.stat(path).st_mode & 0o7777) if before is not None else None
    changed = content_changed or current_mode != mode
    backup_file = None
    if not changed or module.check_mode:
        return changed, diff, backup_file
    if content_changed:
        backup_file = replace_file(module, path, to_bytes(content), backup=module.params['backup'], mode=mode)
    os.chmod(path, mode)
    return changed, diff, backup_file


def read_usage(module: AnsibleModule) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The instant vectors of usage.queries() from the Prometheus at prometheus_url (fails the module on an error)."""
    p = module.params
    headers = {'Accept': 'application/json'}
    if p['prometheus_token']:
        headers['Authorization'] = 'Bearer %s' % p['prometheus_token']
    answers = {}
    for name, url in usage.query_urls(p['prometheus_url'], p['usage_window'], p['usage_time']).items():
        try:
            resp = open_url(url, headers=headers, validate_certs=p['prometheus_validate_certs'],
                            ca_path=p['prometheus_ca_cert'], timeout=30, http_agent='gpuops.k8s_gpu')
            answer = json.loads(to_text(resp.read()))
        except HTTPError as e:
            try:
                answer = json.loads(to_text(e.read()))
            except ValueError:
                module.fail_json(msg='prometheus_url: %s answered HTTP %s to %s' % (p['prometheus_url'], e.code, url))
        except (URLError, OSError, ValueError) as e:
            module.fail_json(msg='prometheus_url: cannot read %s: %s' % (url, to_text(e)))
        try:
            answers[name] = usage.vector(answer, name)
        except usage.AnswerError as e:
            module.fail_json(msg='prometheus_url: %s' % e)
    return answers


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    mode = check_params(module)
    if kube.KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=kube.KUBERNETES_IMPORT_ERROR)
    p = module.params
    try:
        api = kube.build_client(p)
        nodes, pods = kube.read_cluster(api, node_selector=p['node_selector'], nodes=p['nodes'],
                                        namespace=p['namespace'])
        dra = kube.read_dra(api, namespace=p['namespace'])
    except kube.KubeError as e:
        module.fail_json(msg=str(e))
    if p['nodes']:
        missing = sorted(set(p['nodes']) - set((n.get('metadata') or {}).get('name') for n in nodes))
        if missing:
            module.fail_json(msg='nodes: %s not found in the cluster%s' % (
                ', '.join(missing), ' (with node_selector %s)' % p['node_selector'] if p['node_selector'] else ''))
    restricted = bool(p['nodes'] or p['node_selector'])
    report = model.analyse(nodes, pods, gpushare_memory_unit=p['gpushare_memory_unit'], restricted=restricted,
                           strategy_label=p['strategy_label'])
    model.add_dra(report, dra, pods, restricted=restricted)
    gate.apply_health(report, p['node_health'])
    if p['prometheus_url']:
        report['usage'] = usage.join(report, read_usage(module), p['usage_window'], at=p['usage_time'],
                                     idle_percent=p['usage_idle_percent'], source=p['prometheus_url'])
    result = dict(changed=False, nodes=report['nodes'], pods=report['pods'], unscheduled=report['unscheduled'],
                  cluster=report['cluster'], notes=report['notes'], dra=report['dra'],
                  conflicts=['%s - %s' % (n['name'], c) for n in report['nodes'] for c in n['conflicts']],
                  table=render.table(report))
    if 'usage' in report:
        result['usage'] = report['usage']
    if p['report_path']:
        content = render.render(report, p['report_format'])
        changed, diff, backup_file = write_report(module, p['report_path'], content, mode)
        result['changed'] = changed
        result['report_path'] = p['report_path']
        if backup_file:
            result['backup_file'] = backup_file
        if module._diff and changed:
            result['diff'] = diff
    module.exit_json(**result)


if __name__ == '__main__':
    main()
