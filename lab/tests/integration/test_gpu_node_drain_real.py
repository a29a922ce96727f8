"""Module gpuops.k8s_gpu.gpu_node_drain against the real control plane (lab/kube/real.py): upstream's eviction API with
PodDisruptionBudgets (the disruption controller computes what a PDB allows), the DaemonSet controller removing the
pods of a paused GPU client, the ReplicaSet controller recreating evicted pods (Pending: the node is cordoned), kwok
finishing the deletion of evicted pods as a kubelet would.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_node_drain_real.py
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import run_module, wait_until as wait

SUFFIX = "%d" % os.getpid()
NODE = "drain-%s" % SUFFIX
NS = "drain-real-%s" % SUFFIX
MODULE = "gpuops.k8s_gpu.gpu_node_drain"


@pytest.fixture(scope="module")
def lab(kube_real):
    from kubernetes import client
    api = kube_real.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    res = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"}
    core.create_node({"metadata": {"name": NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                   "labels": {"kubernetes.io/hostname": NODE, "nvidia.com/gpu.present": "true",
                                              "nvidia.com/gpu.deploy.device-plugin": "true",
                                              "gpuops.io/drain-test": SUFFIX}},
                      "status": {"capacity": res, "allocatable": dict(res)}})
    core.create_namespace({"metadata": {"name": NS}})
    apps.create_namespaced_deployment(NS, {"metadata": {"name": "gpu-app"}, "spec": {
        "replicas": 2, "selector": {"matchLabels": {"app": "gpu-app"}},
        "template": {"metadata": {"labels": {"app": "gpu-app"}}, "spec": {
            "nodeSelector": {"gpuops.io/drain-test": SUFFIX}, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "registry.example.com/cuda:12",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    # a GPU client the MIG-manager way: its DaemonSet selects on the deploy label
    apps.create_namespaced_daemon_set(NS, {"metadata": {"name": "device-plugin"}, "spec": {
        "selector": {"matchLabels": {"app": "dp"}},
        "template": {"metadata": {"labels": {"app": "dp"}}, "spec": {
            "nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true", "gpuops.io/drain-test": SUFFIX},
            "containers": [{"name": "c", "image": "registry.example.com/dp:1"}]}}}})
    wait("2 gpu-app pods and the device-plugin pod Running on %s" % NODE, lambda: len(
        [p for p in core.list_namespaced_pod(NS).items if p.status.phase == "Running"]) == 3)
    yield {"core": core, "kube": kube_real}
    core.delete_namespace(NS)
    core.delete_node(NODE)


def drain(collections_path, kube, **kw):
    args = dict({"name": NODE, "kubeconfig": kube.kubeconfig, "poll_interval": 1}, **kw)
    return run_module(collections_path, MODULE, json.dumps(args))


def test_pdb_blocks_then_drain_and_restore(lab, collections_path):
    from kubernetes import client
    core, kube = lab["core"], lab["kube"]
    policy = client.PolicyV1Api(kube.api())
    policy.create_namespaced_pod_disruption_budget(NS, {"metadata": {"name": "gpu-app"}, "spec": {
        "minAvailable": 2, "selector": {"matchLabels": {"app": "gpu-app"}}}})
    wait("PDB status observed", lambda: (lambda p: p.status and p.status.observed_generation and
                                         p.status.current_healthy == 2)(
        policy.read_namespaced_pod_disruption_budget("gpu-app", NS)))
    res = drain(collections_path, kube, timeout=8)
    assert res.get("failed"), res
    assert sorted(p.split("/")[-1][:7] for p in res.get("pods_left", [])) == ["gpu-app", "gpu-app"], res
    node = core.read_node(NODE)
    assert node.spec.unschedulable is True
    restore = res.get("restore")
    assert restore, res
    policy.delete_namespaced_pod_disruption_budget("gpu-app", NS)
    res = drain(collections_path, kube, timeout=60)
    assert not res.get("failed"), res
    running = [p for p in core.list_namespaced_pod(NS).items if p.spec.node_name == NODE and
               p.metadata.deletion_timestamp is None]
    assert running == [], [(p.metadata.name, p.status.phase) for p in running]
    labels = core.read_node(NODE).metadata.labels
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    # the replacements wait: the node is cordoned
    pending = [p for p in core.list_namespaced_pod(NS, label_selector="app=gpu-app").items]
    assert pending and all(p.status.phase == "Pending" and not p.spec.node_name for p in pending)
    res = drain(collections_path, kube, state="restored", restore=res["restore"])
    assert not res.get("failed"), res
    node = core.read_node(NODE)
    assert not node.spec.unschedulable
    assert node.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    wait("gpu-app and device-plugin Running again", lambda: len(
        [p for p in core.list_namespaced_pod(NS).items if p.status.phase == "Running"
         and p.metadata.deletion_timestamp is None]) == 3, 90)
