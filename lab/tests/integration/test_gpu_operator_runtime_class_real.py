"""Strategy gpu-operator with validation on upstream's real API server (lab/kube/real.py): the validation pod names
the RuntimeClass the operator creates once its ClusterPolicy is reconciled (after the Helm install, not by the chart),
and the API server rejects a pod whose RuntimeClass does not exist. Entry point ready installs the release first,
waits (bounded) for that RuntimeClass, and only then applies the validation workloads: with the RuntimeClass never
made it fails with its own message and applies nothing; made late (as the operator does), the run succeeds and a
re-run writes nothing. Issue #37 item 3.

The RuntimeClass name is this test's own (gpu_sharing_stack_gpu_operator.runtime_class, the chart's
operator.runtimeClass): the shared cluster's `nvidia` belongs to other tests. The Helm install is off (no chart here);
the test plays the operator's part by creating the RuntimeClass.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_operator_runtime_class_real.py
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_real import failures, run_play  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_kwok_nodes import bare_node  # noqa: E402

SUFFIX = "%d" % os.getpid()
USER = "gpuops-test-op-rc-%s" % SUFFIX
NODE = "gsorc-%s" % SUFFIX
POOL = "o%s-op" % SUFFIX
RC = "gpuops-op-rc-%s" % SUFFIX
NS = "op-rc-check-%s" % SUFFIX


@pytest.fixture(scope="module")
def cl(kube_real):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    # a T4 machine as a real lab node published it (recorded shape t4x1), before its stack
    core.create_node(bare_node(NODE, "t4x1", facts=T4))
    core.create_namespace({"metadata": {"name": NS}})
    yield kube_real, kube_real.user(USER)
    node = client.NodeV1Api(kube_real.api())
    for call in (lambda: core.delete_namespace(NS), lambda: core.delete_node(NODE),
                 lambda: node.delete_runtime_class(RC)):
        try:
            call()
        except client.ApiException:
            pass


def pool_vars(retries):
    return {"gpu_sharing_stack_strategy": "gpu-operator", "gpu_sharing_stack_pool": POOL,
            "gpu_sharing_stack_nodes": [NODE], "gpu_sharing_stack_facts": {NODE: T4},
            "gpu_sharing_stack_gpu_operator": {"chart_path": "/srv/charts/gpu-operator-v26.7.0.tgz",
                                               "runtime_class": RC},
            "gpu_sharing_stack_helm_install": False, "gpu_sharing_stack_validation": True,
            "gpu_sharing_stack_validation_namespace": NS,
            "gpu_sharing_stack_runtime_class_retries": retries, "gpu_sharing_stack_runtime_class_delay": 1}


def validation_pod(kube):
    from kubernetes import client
    try:
        return client.CoreV1Api(kube.api()).read_namespaced_pod("gpu-validate-gpu-operator-" + POOL, NS)
    except client.ApiException as exc:
        assert exc.status == 404
        return None


def test_GPUOP_11_validation_waits_for_the_operators_runtime_class_and_fails_clearly_without_it(cl, tmp_path):
    kube = cl[0]
    rc, result = run_play(cl, tmp_path, [{"name": "op", "block": stack_steps(pool_vars(3))}])
    assert rc != 0
    [(task, msg)] = failures(result)
    assert task.endswith("Fail unless the RuntimeClass the validation workloads name exists"), (task, msg)
    assert "namespace gpu-operator;" in msg, msg  # the operator's release namespace
    assert "RuntimeClass %s, which the validation workloads name, does not exist after 3 reads" % RC in msg, msg
    assert "gpu_sharing_stack_gpu_operator.runtime_class" in msg and "were not applied" in msg, msg
    assert validation_pod(kube) is None


def test_GPUOP_11_validation_applied_once_the_operator_made_the_runtime_class(cl, tmp_path):
    from kubernetes import client
    kube = cl[0]
    node = client.NodeV1Api(kube.api())
    core = client.CoreV1Api(kube.api())
    made = []

    def operator():
        # the operator's part: the RuntimeClass appears a while after the pool's labels are on the node (ready follows)
        end = time.time() + 120
        while time.time() < end:
            labels = core.read_node(NODE).metadata.labels or {}
            if labels.get("gpuops.io/sharing-pool") == POOL:
                time.sleep(3)
                node.create_runtime_class({"metadata": {"name": RC}, "handler": "nvidia"})
                made.append(time.time())
                return
            time.sleep(0.2)

    t = threading.Thread(target=operator, daemon=True)
    t.start()
    rc, result = run_play(cl, tmp_path, [{"name": "op", "block": stack_steps(pool_vars(60))}])
    t.join(5)
    assert rc == 0, failures(result)
    assert made, "the pool's labels never reached the node"
    pod = validation_pod(kube)
    assert pod is not None and pod.spec.runtime_class_name == RC
    # a re-run finds it all in place
    rc, result = run_play(cl, tmp_path, [{"name": "op", "block": stack_steps(pool_vars(60))}])
    assert rc == 0, failures(result)
    changed = [n for n, r in __import__("test_gpu_sharing_stack_real").task_results(result) if r.get("changed")]
    assert changed == [], changed
