"""The objects of module gpu_metrics_manifests are valid to upstream's kube-apiserver (the shared real control plane,
`kube_real`, lab/kube/real.py): every object the exporter of each strategy's pool renders (and the rule ConfigMap) is
created with a server-side dry run (dryRun=All: validation, defaulting and admission, nothing stored). The
ServiceMonitor and PrometheusRule go against the Prometheus Operator's own CustomResourceDefinitions (v0.85.0 from the
Go module proxy, lab/go/prometheus-operator), installed once on the shared cluster: accepted, nothing pruned.

Run: .venv/bin/pytest -q lab/tests/integration/test_gpu_metrics_real.py -p no:xdist
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "build" / "collections"))

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter, stack_metrics  # noqa: E402


@pytest.fixture(scope="module")
def apis(kube_real):
    from kubernetes import client
    api = kube_real.api()
    return {"api": api, "core": client.CoreV1Api(api), "apps": client.AppsV1Api(api),
            "rbac": client.RbacAuthorizationV1Api(api)}


def dry_create(apis, obj):
    """Create ``obj`` with dryRun=All; the object as the API server would store it."""
    ns = obj["metadata"].get("namespace")
    kind = obj["kind"]
    calls = {
        "ConfigMap": lambda: apis["core"].create_namespaced_config_map(ns, obj, dry_run="All"),
        "ServiceAccount": lambda: apis["core"].create_namespaced_service_account(ns, obj, dry_run="All"),
        "Service": lambda: apis["core"].create_namespaced_service(ns, obj, dry_run="All"),
        "DaemonSet": lambda: apis["apps"].create_namespaced_daemon_set(ns, obj, dry_run="All"),
        "ClusterRole": lambda: apis["rbac"].create_cluster_role(obj, dry_run="All"),
        "ClusterRoleBinding": lambda: apis["rbac"].create_cluster_role_binding(obj, dry_run="All"),
    }
    return apis["api"].sanitize_for_serialization(calls[kind]())


@pytest.mark.parametrize("strategy", exporter.STRATEGIES)
def test_DCGMX_20_every_object_is_valid_to_the_real_api_server(apis, strategy):
    out = exporter.render({"strategy": strategy, "pool": "metrics-%s" % strategy, "registry": "registry.example.com/m",
                           "image_pull_secrets": ["regcred"], "extra_labels": {"team": "gpu"}})
    objects = out["objects"] + exporter.rule_objects(
        {"groups": [{"name": "gpu", "rules": [{"alert": "GpuXid", "expr": "DCGM_FI_DEV_XID_ERRORS > 0"}]}]},
        "gpuops-gpu-rules-%s" % strategy)
    assert [o["kind"] for o in objects][-1] == "ConfigMap"
    for obj in objects:
        stored = dry_create(apis, obj)
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
        if obj["kind"] == "DaemonSet":
            want, got = obj["spec"]["template"]["spec"], stored["spec"]["template"]["spec"]
            for key in ("nodeSelector", "hostPID", "runtimeClassName", "automountServiceAccountToken",
                        "serviceAccountName", "priorityClassName", "volumes"):
                if key == "volumes":
                    assert [v["name"] for v in got[key]] == [v["name"] for v in want[key]]
                else:
                    assert got.get(key) == want.get(key), key
            c_want, c_got = want["containers"][0], got["containers"][0]
            assert c_got["env"] == c_want["env"] and c_got["image"] == c_want["image"]
            assert c_got["securityContext"] == c_want["securityContext"]
        if obj["kind"] == "ClusterRole":
            assert stored["rules"] == obj["rules"]
        if obj["kind"] == "Service":
            assert stored["spec"]["ports"][0]["targetPort"] == "metrics" and stored["spec"]["clusterIP"]


# --------------------------------------------------------------------------- the Prometheus Operator's own schemas
@pytest.fixture(scope="module")
def monitoring_crds(apis):
    """The two CRDs on the shared cluster (lab/tests/monitoring_crds: left installed, created once)."""
    import monitoring_crds as crds
    return crds.install(apis["api"])


@pytest.mark.parametrize("strategy", ["exclusive", "time-slicing"])
def test_DCGMX_21_service_monitor_and_prometheus_rule_fit_the_operators_schemas(apis, monitoring_crds, strategy):
    """Created with dryRun=All against the Prometheus Operator's CRD schemas: accepted, and nothing of ours pruned
    (a structural schema drops unknown fields silently: what the server would store equals what we sent)."""
    out = exporter.render({"strategy": strategy, "pool": "mon-%s" % strategy, "monitoring_api": True})
    [mon] = [o for o in out["objects"] if o["kind"] == "ServiceMonitor"]
    [rule] = exporter.rule_objects({"groups": [{"name": "gpuops", "rules": [
        {"alert": "GpuOpsXid", "expr": "DCGM_FI_DEV_XID_ERRORS > 0", "for": "1m", "labels": {"severity": "critical"},
         "annotations": {"summary": "Xid {{ $value }} on {{ $labels.Hostname }}"}}]}]}, "gpuops-rules-%s" % strategy,
        monitoring_api=True)
    for obj, plural in ((mon, "servicemonitors"), (rule, "prometheusrules")):
        stored = monitoring_crds.create_namespaced_custom_object(
            "monitoring.coreos.com", "v1", obj["metadata"]["namespace"], plural, obj, dry_run="All")
        assert stored["spec"] == obj["spec"], (plural, stored["spec"], obj["spec"])
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]


# --------------------------------------------------------------------------- HAMi's and Volcano's own metrics
@pytest.mark.parametrize("strategy", stack_metrics.STRATEGIES)
@pytest.mark.parametrize("monitoring", [False, True], ids=["annotations", "servicemonitor"])
def test_STKM_09_stack_scrape_objects_are_valid_to_the_real_api_server(apis, monitoring_crds, strategy, monitoring):
    """The scrape objects of a HAMi or Volcano pool (scheduler included), with and without the operator's API, in the
    stack's namespace: each created with dryRun=All; the stored Service and ServiceMonitor spec is the one sent."""
    pool = "stkm-%s-%s" % (strategy, "sm" if monitoring else "an")
    out = exporter.render({"strategy": strategy, "pool": pool, "monitoring_api": monitoring,
                           "stack_namespace": "kube-system", "extra_labels": {"team": "gpu"},
                           "settings": {"volcano": {"namespace": "kube-system"}}})  # Volcano's own, not the lab's
    if strategy == "volcano" and not monitoring:
        assert out["objects"] == []
    for obj in out["objects"]:
        if obj["kind"] == "ServiceMonitor":
            stored = monitoring_crds.create_namespaced_custom_object(
                "monitoring.coreos.com", "v1", obj["metadata"]["namespace"], "servicemonitors", obj, dry_run="All")
            assert stored["spec"] == obj["spec"], (stored["spec"], obj["spec"])
        else:
            stored = dry_create(apis, obj)
            assert stored["spec"]["selector"] == obj["spec"]["selector"]
            assert stored["spec"]["ports"][0]["targetPort"] == obj["spec"]["ports"][0]["targetPort"]
            assert stored["metadata"].get("annotations") == obj["metadata"].get("annotations")
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
