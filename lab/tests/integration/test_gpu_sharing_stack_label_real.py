"""A site's own strategy label (issue #36): role gpuops.k8s_gpu.gpu_sharing_stack and role gpu_node_labels, the steps
playbook cluster.yml runs, with gpu_node_labels_strategy_label set to another key, against upstream's real API server
(lab/kube/real.py), on kwok nodes of the recorded T4 shape. Before the fix the DRA kubelet plugin's DaemonSet asked for
gpuops.io/sharing-strategy In [dra] (it never landed on the site's nodes) and the stack published the pool's strategy
under the default key too, so the node carried it under both.

A dra pool (the DRA driver's Helm release not installed: gpu_sharing_stack_helm_install false; the values are the
render's) and a time-slicing pool: the node's labels as the API server stores them, the DRA values' node affinity, and
the replicas per GPU the time-slicing pool records (gpuops.io/sharing-replicas, read by the share report). State absent
removes what the run added.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_sharing_stack_label_real.py
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import LAB_GPU_CLASS

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gpu_sharing_stack import T4, stack_steps, task_results  # noqa: E402
from test_gpu_sharing_stack_real import failures, run_play  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_kwok_nodes import bare_node  # noqa: E402

SUFFIX = "%d" % os.getpid()
USER = "gpuops-test-stack-label-%s" % SUFFIX
LABEL = "example.com/gpu-strategy"
DEFAULT = "gpuops.io/sharing-strategy"
NODES = {"dra": "gssl-dra-%s" % SUFFIX, "time-slicing": "gssl-ts-%s" % SUFFIX}
POOLS = {"dra": "l%s-dra" % SUFFIX, "time-slicing": "l%s-ts" % SUFFIX}
TS_REPLICAS = 3


def role_vars(strategy, state):
    node = NODES[strategy]
    v = {"gpu_sharing_stack_strategy": strategy, "gpu_sharing_stack_state": state,
         "gpu_sharing_stack_pool": POOLS[strategy], "gpu_sharing_stack_nodes": [node],
         "gpu_sharing_stack_facts": {node: T4}, "gpu_sharing_stack_registry": "registry.example.com/mirror"}
    if strategy == "dra":
        v.update(gpu_sharing_stack_helm_install=False, gpu_sharing_stack_dra={
            "chart_path": "/srv/charts/dra-driver-nvidia-gpu-0.5.0.tgz", "chart_version": "0.5.0",
            "assume_cdi_enabled": True,
            # the lab's shared class mapping nvidia.com/gpu on this plane (conftest LAB_GPU_CLASS): accepted (DRAX-15)
            "accept_extended_resource_classes": [LAB_GPU_CLASS],
            # a shared object kept while another file's dra pool is on this plane (test_dra_real.py tests it, DRA-14)
            "resourceslice_policy": False})
    else:
        v["gpu_sharing_stack_time_slicing"] = {"replicas": TS_REPLICAS}
    return v


def play(state):
    return [{"name": "%s %s" % (s, state), "block": stack_steps(role_vars(s, state))} for s in ("dra", "time-slicing")]


def node_labels(core, name):
    return core.read_node(name).metadata.labels or {}


@pytest.fixture(scope="module")
def run(kube_real, collections_path, tmp_path_factory):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    for name in NODES.values():
        core.create_node(bare_node(name, "t4x1", facts=T4))
    cl = (kube_real, kube_real.user(USER))
    tmp = tmp_path_factory.mktemp("stack-label")
    # the site's choice, where every play sees it (group_vars/all): both roles follow it
    site = ["-e", json.dumps({"gpu_node_labels_strategy_label": LABEL})]
    rc, result = run_play(cl, tmp, play("present"), *site)
    out = {"rc": rc, "failures": failures(result), "result": result,
           "labels": dict((s, node_labels(core, n)) for s, n in NODES.items())}
    rc2, result2 = run_play(cl, tmp, play("absent"), *site)
    out.update(absent_rc=rc2, absent_failures=failures(result2),
               after=dict((s, node_labels(core, n)) for s, n in NODES.items()))
    yield out
    for name in NODES.values():
        core.delete_node(name)


def test_the_pools_strategy_is_written_under_the_sites_label_only(run):
    assert run["rc"] == 0, run["failures"]
    for strategy, labels in run["labels"].items():
        assert labels.get(LABEL) == strategy and labels.get("gpuops.io/sharing-pool") == POOLS[strategy], labels
        assert DEFAULT not in labels, labels


def test_the_dra_kubelet_plugins_affinity_asks_for_the_sites_label(run):
    assert run["rc"] == 0, run["failures"]
    renders = [r for n, r in task_results(run["result"]) if "Render the stack" in n and r.get("strategy") == "dra"]
    values = renders[0]["helm"]["values"]
    terms = values["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["dra"]}]}]
    # and the dra node matches it
    assert run["labels"]["dra"][LABEL] == "dra"


def test_the_time_slicing_pools_replicas_are_recorded_on_its_node(run):
    assert run["rc"] == 0, run["failures"]
    assert run["labels"]["time-slicing"].get("gpuops.io/sharing-replicas") == str(TS_REPLICAS), run["labels"]
    assert "gpuops.io/sharing-replicas" not in run["labels"]["dra"], run["labels"]


def test_absent_removes_the_labels_the_run_added(run):
    assert run["absent_rc"] == 0, run["absent_failures"]
    for labels in run["after"].values():
        assert not [k for k in labels if k.startswith("gpuops.io/") or k == LABEL], labels
