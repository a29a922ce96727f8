"""Day 2 on one cluster (issue #37), the first scripted sequence, on a private upstream control plane (lab/kube/real.py
1.37, kwok nodes; private because pools of one strategy share cluster-scoped objects whose names carry no pool, so
concurrent files on the shared cluster would rewrite each other's):

1. two hami pools of the same settings: applied; a re-run of both changes nothing (they render the same shared
   hami-scheduler objects);
2. HAMi's device plugin registers node b (its annotations, as upstream's plugin writes them);
3. pool b is uninstalled (stack and labels, state absent): the node keeps nothing of the collection or of HAMi, and
   pool a's scheduler is still there;
4. node b moves to a time-slicing pool: accepted (before the fix the label role refused it over HAMi's registration);
5. a re-run of both pools changes nothing, and every node carries only its own pool's labels.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_lifecycle_real.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import private_kube  # noqa: E402
from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_real import failures, run_play, task_results  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_kwok_nodes import bare_node  # noqa: E402

A, B = "lc-node-a", "lc-node-b"
# the nodes: Tesla T4 machines as a real lab node of shape t4x1 published them (lab/tests/gpu_kwok_nodes.py)
SHAPE = "t4x1"
POOL = "gpuops.io/sharing-pool"
STRATEGY = "gpuops.io/sharing-strategy"
# painted (gpu_kwok_nodes.PAINTED["HAMi device plugin"]): no real lab node runs HAMi's device plugin yet
HAMI_REGISTRATION = {"hami.io/node-nvidia-register": "GPU-0,10,15360,100,NVIDIA-Tesla T4,0,true,0,hami-core:",
                     "hami.io/node-handshake": "Reported 2026-11-29 03:00:00", "hami.io/node-nvidia-score": "[]"}


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    with private_kube(tmp_path_factory.mktemp("kube-lifecycle"), "1.37") as k:
        from kubernetes import client
        core = client.CoreV1Api(k.api())
        for n in (A, B):
            core.create_node(bare_node(n, SHAPE, facts=T4))
        yield k


def pool(name, strategy, node, state="present", **extra):
    v = {"gpu_sharing_stack_strategy": strategy, "gpu_sharing_stack_state": state, "gpu_sharing_stack_pool": name,
         "gpu_sharing_stack_nodes": [node], "gpu_sharing_stack_facts": {node: T4}}
    if strategy == "hami":
        v["gpu_sharing_stack_hami"] = {"device_split_count": 4}
    if strategy == "time-slicing":
        v["gpu_sharing_stack_time_slicing"] = {"replicas": 2}
    v.update(extra)
    return {"name": "%s (%s, %s)" % (name, strategy, state), "block": stack_steps(v)}


def changed(result):
    return [n for n, r in task_results(result) if r.get("changed")]


def node(kube, name):
    from kubernetes import client
    return client.CoreV1Api(kube.api()).read_node(name)


def test_lifecycle_two_pools_uninstall_one_move_its_node(kube, tmp_path):
    from kubernetes import client
    cl = (kube, kube.kubeconfig)
    both = [pool("ham-a", "hami", A), pool("ham-b", "hami", B)]
    rc, result = run_play(cl, tmp_path, both)
    assert rc == 0, failures(result)
    # 1. a re-run of the two pools of one strategy changes nothing
    rc, result = run_play(cl, tmp_path, both)
    assert rc == 0, failures(result)
    assert changed(result) == []
    # 2. HAMi's device plugin registers node b
    core = client.CoreV1Api(kube.api())
    core.patch_node(B, {"metadata": {"annotations": HAMI_REGISTRATION}})
    # 3. uninstall pool b
    rc, result = run_play(cl, tmp_path, [pool("ham-b", "hami", B, state="absent")])
    assert rc == 0, failures(result)
    meta = node(kube, B).metadata
    assert not [k for k in (meta.labels or {}) if k.startswith("gpuops.io/") or k == "gpu"], meta.labels
    assert not [k for k in (meta.annotations or {}) if k.startswith(("gpuops.io/", "hami.io/"))], meta.annotations
    apps = client.AppsV1Api(kube.api())
    assert apps.read_namespaced_deployment("hami-scheduler", "kube-system").metadata.name == "hami-scheduler"
    # 4. node b moves to a time-slicing pool
    moved = [pool("ham-a", "hami", A), pool("ts-b", "time-slicing", B)]
    rc, result = run_play(cl, tmp_path, moved)
    assert rc == 0, failures(result)
    # 5. a re-run changes nothing; each node carries its own pool's labels only
    rc, result = run_play(cl, tmp_path, moved)
    assert rc == 0, failures(result)
    assert changed(result) == []
    a, b = node(kube, A).metadata.labels, node(kube, B).metadata.labels
    assert (a[POOL], a[STRATEGY], b[POOL], b[STRATEGY]) == ("ham-a", "hami", "ts-b", "time-slicing")
    assert "gpu" not in b and a.get("gpu") == "on"


def test_another_inventorys_pool_keeps_the_shared_objects_it_uses(kube, tmp_path):
    """Issue #37, cross-inventory: pool ham-x of another inventory (it knows only itself) shares HAMi's objects with
    this inventory's ham-a. ham-a's run with another shared setting (device_split_count) is refused before anything is
    written, naming the objects, ham-x and the field; HAMi's objects keep ham-x's settings. Once ham-x is uninstalled
    (its records go with it), ham-a's change goes through, and a re-run writes nothing."""
    from kubernetes import client
    cl = (kube, kube.kubeconfig)
    c = "lc-node-c"
    client.CoreV1Api(kube.api()).create_node(bare_node(c, SHAPE, facts=T4))
    rc, result = run_play(cl, tmp_path, [pool("ham-x", "hami", c, gpu_sharing_stack_known_pools=["ham-x"])])
    assert rc == 0, failures(result)
    apps = client.AppsV1Api(kube.api())
    before = apps.read_namespaced_deployment("hami-scheduler", "kube-system")
    assert "user.gpuops.io/ham-x" in before.metadata.annotations and "user.gpuops.io/ham-a" in before.metadata.annotations
    split8 = {"gpu_sharing_stack_hami": {"device_split_count": 8}}
    rc, result = run_play(cl, tmp_path, [pool("ham-a", "hami", A, gpu_sharing_stack_known_pools=["ham-a"], **split8)])
    assert rc != 0
    msg = str(failures(result))
    assert "Refusing to change shared objects that users this run does not know (ham-a)" in msg, msg
    assert "(recorded users ham-x) would change in" in msg and "nothing was changed" in msg, msg
    after = apps.read_namespaced_deployment("hami-scheduler", "kube-system")
    assert after.metadata.resource_version == before.metadata.resource_version
    # ham-x leaves (its inventory uninstalls it): ham-a may now change what only it uses
    rc, result = run_play(cl, tmp_path, [pool("ham-x", "hami", c, state="absent")])
    assert rc == 0, failures(result)
    rc, result = run_play(cl, tmp_path, [pool("ham-a", "hami", A, gpu_sharing_stack_known_pools=["ham-a"], **split8)])
    assert rc == 0, failures(result)
    rc, result = run_play(cl, tmp_path, [pool("ham-a", "hami", A, gpu_sharing_stack_known_pools=["ham-a"], **split8)])
    assert rc == 0 and changed(result) == [], failures(result)
