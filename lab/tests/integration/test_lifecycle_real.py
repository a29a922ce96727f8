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

Also on this plane (deleting CRDs on the shared plane would disturb other files): role gpu_metrics under
`gpu_metrics_monitoring: auto` while the Prometheus Operator's CRDs are deleted (held in deletion by a finalizer),
gone, and installed again (DCGMX-24).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_lifecycle_real.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import private_kube, run_role_on_localhost  # noqa: E402
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


# ------------------------------------------------------------- the Prometheus Operator removed and installed again
MET_NS = "lc-metrics"
MET_POOL = {"name": "lc-met", "strategy": "time-slicing"}
MET_USER = "gpuops-test-lifecycle-metrics"
MET_EX = "dcgm-exporter-lc-met"
HOLD = "lab.gpuops.io/hold"
SCRAPE = ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path")
CRDS = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


def metrics_role(collections_path, tmp_path, kubeconfig):
    proc, doc = run_role_on_localhost(collections_path, tmp_path, "gpu_metrics", {
        "gpu_metrics_pools": [MET_POOL], "gpu_metrics_namespace": MET_NS, "gpuops_k8s_kubeconfig": kubeconfig,
        "gpu_metrics_registry": "mirror.example.com/nvcr"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tasks = [t for play in doc["plays"] for t in play["tasks"]]
    return [t["hosts"]["localhost"] for t in tasks if t["task"]["name"].endswith("Publish what the role did")][0][
        "ansible_facts"]["gpu_metrics_result"]


def monitoring_objects(custom):
    """{plural: [(name, being deleted)]} of the Operator's kinds in MET_NS; a kind not served is left out."""
    from kubernetes.client.rest import ApiException
    out = {}
    for plural in ("servicemonitors", "prometheusrules"):
        try:
            items = custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", MET_NS, plural)["items"]
        except ApiException as e:
            assert e.status == 404, e
            continue
        out[plural] = sorted((i["metadata"]["name"], bool(i["metadata"].get("deletionTimestamp"))) for i in items)
    return out


def annotations_form(core):
    """(the scrape annotations on the pool's Service, whether the rules ConfigMap is there)."""
    ann = core.read_namespaced_service(MET_EX, MET_NS).metadata.annotations or {}
    maps = [c.metadata.name for c in core.list_namespaced_config_map(MET_NS).items]
    return [a for a in SCRAPE if a in ann], "gpuops-gpu-alerts" in maps


def test_DCGMX_24_the_operator_removed_and_installed_again_under_auto(kube, tmp_path, collections_path):
    """Issue #42, day 2: role gpu_metrics with gpu_metrics_monitoring auto (the default) while the Prometheus Operator
    comes and goes. (1) CRDs Established: the ServiceMonitor form. (2) The CRDs deleted while a finalizer holds the
    role's ServiceMonitor and PrometheusRule (as any controller's finalizer may): the CRDs stay, being deleted, and
    refuse every create of their kinds - the role moves to scrape annotations and the rules ConfigMap and touches
    neither kind. (3) The objects released, the CRDs gone: a re-run writes nothing. (4) The CRDs installed again: the
    ServiceMonitor form, the annotations and the rules ConfigMap removed. On this file's private plane: deleting the
    CRDs on the shared plane would disturb every other test of the Operator's kinds."""
    import monitoring_crds
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from conftest import new_namespace, wait_until
    api = kube.api()
    core, ext = client.CoreV1Api(api), client.ApiextensionsV1Api(api)
    custom = monitoring_crds.install(api)
    new_namespace(core, MET_NS)
    kubeconfig = kube.user(MET_USER, reads=True)
    # (1) the Operator's API served
    assert metrics_role(collections_path, tmp_path, kubeconfig)["monitoring"] is True
    assert monitoring_objects(custom) == {"servicemonitors": [(MET_EX, False)],
                                          "prometheusrules": [("gpuops-gpu-alerts", False)]}
    assert annotations_form(core) == ([], False)
    # (2) the Operator uninstalled, its CRDs held in deletion by the finalizer on the role's objects
    for plural, name in (("servicemonitors", MET_EX), ("prometheusrules", "gpuops-gpu-alerts")):
        custom.patch_namespaced_custom_object("monitoring.coreos.com", "v1", MET_NS, plural, name,
                                              {"metadata": {"finalizers": [HOLD]}})
    for crd in CRDS:
        ext.delete_custom_resource_definition(crd)
    wait_until("the role's ServiceMonitor and PrometheusRule being deleted with their CRDs", lambda: monitoring_objects(
        custom) == {"servicemonitors": [(MET_EX, True)], "prometheusrules": [("gpuops-gpu-alerts", True)]})
    assert all(ext.read_custom_resource_definition(c).metadata.deletion_timestamp for c in CRDS)
    since = kube.mark()
    result = metrics_role(collections_path, tmp_path, kubeconfig)
    writes = kube.writes(since, kube.mark(), user=MET_USER)
    assert result["monitoring"] is False and result["changed"] is True
    assert annotations_form(core) == (list(SCRAPE), True)
    assert not [w for w in writes if "monitoring.coreos.com" in str(w)], writes
    # (3) released: the objects and the CRDs go; a re-run writes nothing
    for plural, name in (("servicemonitors", MET_EX), ("prometheusrules", "gpuops-gpu-alerts")):
        custom.patch_namespaced_custom_object("monitoring.coreos.com", "v1", MET_NS, plural, name,
                                              {"metadata": {"finalizers": None}})

    def crds_gone():
        for crd in CRDS:
            try:
                ext.read_custom_resource_definition(crd)
                return False
            except ApiException as e:
                assert e.status == 404, e
        return True
    wait_until("the Operator's CRDs gone", crds_gone)
    since = kube.mark()
    result = metrics_role(collections_path, tmp_path, kubeconfig)
    assert kube.writes(since, kube.mark(), user=MET_USER) == [] and result["changed"] is False
    assert result["monitoring"] is False and annotations_form(core) == (list(SCRAPE), True)
    # (4) the Operator installed again
    custom = monitoring_crds.install(api)
    assert metrics_role(collections_path, tmp_path, kubeconfig)["monitoring"] is True
    assert monitoring_objects(custom) == {"servicemonitors": [(MET_EX, False)],
                                          "prometheusrules": [("gpuops-gpu-alerts", False)]}
    assert annotations_form(core) == ([], False)
