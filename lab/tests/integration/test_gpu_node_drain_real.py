"""Module gpuops.k8s_gpu.gpu_node_drain against the real control plane (lab/kube/real.py): upstream's eviction API with
PodDisruptionBudgets (the disruption controller computes what a PDB allows), the DaemonSet controller removing the
pods of a paused GPU client, the ReplicaSet controller recreating evicted pods (Pending: the node is cordoned), kwok
finishing the deletion of evicted pods as a kubelet would. Left alone as kubectl drain leaves them: the pod of a
DaemonSet that does not select on a paused label (ignore_daemonsets) and a mirror pod. The mirror pod is created as the
kubelet creates it: by the node's own identity (user system:node:NAME, group system:nodes), whose NodeRestriction
admission requires an owner reference to its Node ("node X can only create pods with an owner reference set to
itself"); a cluster admin may create a pod with the kubernetes.io/config.mirror annotation without one, a kubelet may
not. Evictions are counted from the audit log (create on pods/eviction, by this file's user).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_node_drain_real.py
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import run_module, wait_until as wait
from gpu_kwok_nodes import agents_node

SUFFIX = "%d" % os.getpid()
NODE = "drain-%s" % SUFFIX
NS = "drain-real-%s" % SUFFIX
MODULE = "gpuops.k8s_gpu.gpu_node_drain"
USER = "gpuops-test-drain-real-%s" % SUFFIX
MIRROR = "kube-proxy-static-%s" % NODE


@pytest.fixture(scope="module")
def lab(kube_real):
    from kubernetes import client
    api = kube_real.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    # an A100 node of an exclusive pool as a real lab node published it (GFD's labels, the plugin's nvidia.com/gpu 8)
    core.create_node(agents_node(NODE, "a100x8", "exclusive", labels={
        "nvidia.com/gpu.deploy.device-plugin": "true", "gpuops.io/drain-test": SUFFIX}))
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
    # a DaemonSet that does not select on a GPU deploy label (a node agent): kept by the drain
    apps.create_namespaced_daemon_set(NS, {"metadata": {"name": "node-agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
            "nodeSelector": {"gpuops.io/drain-test": SUFFIX},
            "containers": [{"name": "c", "image": "registry.example.com/agent:1"}]}}}})
    # a static pod's mirror pod, created as the kubelet does it (the Node's identity, owner reference to the Node)
    node_kc = kube_real.user("system:node:%s" % NODE, groups=("system:nodes",))
    node_core = client.CoreV1Api(kube_real.api(node_kc))
    uid = core.read_node(NODE).metadata.uid
    node_core.create_namespaced_pod(NS, {"metadata": {
        "name": MIRROR, "annotations": {"kubernetes.io/config.mirror": "0f1e2d", "kubernetes.io/config.hash": "0f1e2d",
                                        "kubernetes.io/config.source": "file"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": uid, "controller": True}]},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "registry.example.com/kube-proxy:1"}]}})
    wait("2 gpu-app pods, the device-plugin, node-agent and mirror pods Running on %s" % NODE, lambda: len(
        [p for p in core.list_namespaced_pod(NS).items if p.status.phase == "Running"]) == 5)
    yield {"core": core, "kube": kube_real, "node_kc": node_kc, "kc": kube_real.user(USER)}
    core.delete_namespace(NS)
    core.delete_node(NODE)


def test_mirror_pods_only_from_the_node_itself(lab):
    """NodeRestriction: the Node's own identity cannot create a mirror pod without an owner reference to itself."""
    from kubernetes import client
    node_core = client.CoreV1Api(lab["kube"].api(lab["node_kc"]))
    with pytest.raises(client.ApiException) as exc:
        node_core.create_namespaced_pod(NS, {"metadata": {"name": "no-owner", "annotations": {
            "kubernetes.io/config.mirror": "1"}}, "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]}})
    assert exc.value.status == 403 and "owner reference set to itself" in exc.value.body, exc.value.body


def drain(collections_path, kube, **kw):
    args = dict({"name": NODE, "kubeconfig": kube.user(USER), "poll_interval": 1}, **kw)
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
    start = kube.mark()
    res = drain(collections_path, kube, timeout=8)
    assert res.get("failed"), res
    assert sorted(p.split("/")[-1][:7] for p in res.get("pods_left", [])) == ["gpu-app", "gpu-app"], res
    # the message says why: the PodDisruptionBudget the eviction API named, and what is left on the node
    assert "disruption budget" in res["msg"] and "gpu-app" in res["msg"], res["msg"]
    # every eviction the real API server refused was a 429 (TooManyRequests: the PDB allows no disruption)
    refused = [w for w in kube.writes(start, kube.mark(), user=USER) if w[1].endswith("/eviction")]
    assert refused and {w[2] for w in refused} == {429}, refused
    node = core.read_node(NODE)
    assert node.spec.unschedulable is True
    restore = res.get("restore")
    assert restore, res
    policy.delete_namespaced_pod_disruption_budget("gpu-app", NS)
    start = kube.mark()
    res = drain(collections_path, kube, timeout=60)
    assert not res.get("failed"), res
    # evicted through the eviction API (pods/eviction creates, answered 201), the two gpu-app pods only
    evictions = [w for w in kube.writes(start, kube.mark(), user=USER) if w[1].endswith("/eviction")]
    assert sorted((w[1].split("/")[-2][:7], w[2]) for w in evictions) == [("gpu-app", 201), ("gpu-app", 201)], evictions
    running = [p for p in core.list_namespaced_pod(NS).items if p.spec.node_name == NODE and
               p.metadata.deletion_timestamp is None]
    # left alone as kubectl drain leaves them: the node agent's DaemonSet pod and the mirror pod
    assert sorted(p.metadata.name if p.metadata.name == MIRROR else p.metadata.name[:10] for p in running) == sorted(
        [MIRROR, "node-agent"]), [(p.metadata.name, p.status.phase) for p in running]
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
    wait("gpu-app, device-plugin, node-agent and the mirror pod Running again", lambda: len(
        [p for p in core.list_namespaced_pod(NS).items if p.status.phase == "Running"
         and p.metadata.deletion_timestamp is None]) == 5, 90)
