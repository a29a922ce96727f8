"""The objects of module gpu_metrics_manifests are valid to upstream's kube-apiserver (the shared real control plane,
`kube_real`, lab/kube/real.py): every object the exporter of each strategy's pool renders (and the rule ConfigMap) is
created with a server-side dry run (dryRun=All: validation, defaulting and admission, nothing stored). The
ServiceMonitor and PrometheusRule go against the Prometheus Operator's own CustomResourceDefinitions (v0.85.0 from the
Go module proxy, lab/go/prometheus-operator), installed once on the shared cluster: accepted, nothing pruned.

Run: .venv/bin/pytest -q lab/tests/integration/test_gpu_metrics_real.py -p no:xdist
"""
from __future__ import annotations

import os
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


# --------------------------------------------------------------------------- least RBAC of the DRA exporter
# The API calls dcgm-exporter 4.5.3-4.8.2 makes with KUBERNETES_ENABLE_DRA and pod attribution (DCGMX-22, read from its
# source at the tag, not from our render): client-go informers, list and watch, of the pods of every namespace (field
# selector spec.nodeName) and of resource.k8s.io ResourceSlices (cluster-scoped). (verb, group, resource[/sub], ns,
# field selector) with ns None = cluster scope.
DRA_CALLS = [("list", "", "pods", None, "spec.nodeName=gpu-node-1"), ("watch", "", "pods", None,
                                                                      "spec.nodeName=gpu-node-1"),
             ("list", "resource.k8s.io", "resourceslices", None, None),
             ("watch", "resource.k8s.io", "resourceslices", None, None)]
# just outside: what the exporter never asks (the chart's get included)
DRA_OUTSIDE = [("get", "", "pods", "default", None), ("get", "resource.k8s.io", "resourceslices", None, None),
               ("list", "apps", "pods", None, None), ("get", "", "pods/log", "default", None),
               ("create", "", "pods", "default", None), ("delete", "", "pods", "default", None),
               ("patch", "resource.k8s.io", "resourceslices", None, None),
               ("create", "resource.k8s.io", "resourceslices", None, None),
               ("list", "resource.k8s.io", "resourceclaims", None, None),
               ("list", "resource.k8s.io", "deviceclasses", None, None), ("list", "", "nodes", None, None),
               ("get", "", "configmaps", "kube-system", None), ("list", "", "secrets", None, None)]


def test_DCGMX_22_dra_exporter_rbac_by_impersonation(apis):
    """A dra pool's ServiceAccount, ClusterRole and binding as rendered, stored for real; the real RBAC authorizer
    (SubjectAccessReview) allows each call of DRA_CALLS to the ServiceAccount and denies each of DRA_OUTSIDE; then,
    impersonating it, the exporter's own requests pass the authorizer (never 403) and a secret's read is 403."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from conftest import new_namespace, wait_until
    sfx = "%d" % os.getpid()
    ns, pool = "dcgmx22-%s" % sfx, "dcgmx22-%s" % sfx
    out = exporter.render({"strategy": "dra", "pool": pool, "namespace": ns})
    objs = [o for o in out["objects"] if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    [sa] = [o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"]
    new_namespace(apis["core"], ns)
    try:
        apis["core"].create_namespaced_service_account(ns, objs[0])
        apis["rbac"].create_cluster_role(objs[1])
        apis["rbac"].create_cluster_role_binding(objs[2])
        user = "system:serviceaccount:%s:%s" % (ns, sa)
        groups = ["system:serviceaccounts", "system:serviceaccounts:%s" % ns, "system:authenticated"]
        authz = client.AuthorizationV1Api(apis["api"])
        # the RBAC authorizer reads bindings from an informer: a binding created a moment ago may not be seen yet
        # (CI of 4e8b0dd: the first call denied, the next allowed). Wait until it is (a call it must allow), then check
        # every call; a binding that never takes effect fails here.
        wait_until("the exporter's ClusterRoleBinding seen by the RBAC authorizer", lambda: authz.
                   create_subject_access_review({"spec": {"user": user, "groups": groups, "resourceAttributes": {
                       "verb": "list", "group": "resource.k8s.io", "resource": "resourceslices"}}}).status.allowed, 30)
        problems = []
        for calls, allowed in ((DRA_CALLS, True), (DRA_OUTSIDE, False)):
            for verb, group, resource, cns, fsel in calls:
                res, _, sub = resource.partition("/")
                ra = {"verb": verb, "group": group, "resource": res}
                if sub:
                    ra["subresource"] = sub
                if cns:
                    ra["namespace"] = cns
                if fsel:
                    key, _, value = fsel.partition("=")
                    ra["fieldSelector"] = {"requirements": [{"key": key, "operator": "In", "values": [value]}]}
                got = authz.create_subject_access_review(
                    {"spec": {"user": user, "groups": groups, "resourceAttributes": ra}}).status.allowed
                if bool(got) != allowed:
                    problems.append((verb, group, resource, cns, "expected %s" % ("allowed" if allowed else "denied")))
        assert problems == [], problems
        # the exporter's requests themselves, as the ServiceAccount (impersonation: the API server adds the
        # ServiceAccount's groups): past the authorizer, whatever the version serves
        imp = client.ApiClient(configuration=apis["api"].configuration)
        imp.set_default_header("Impersonate-User", user)

        def status(path, query):
            method, url, headers, _body, _post = imp.param_serialize("GET", path, query_params=query,
                                                                     auth_settings=["BearerToken"])
            try:
                return imp.call_api(method, url, header_params=headers).status
            except ApiException as e:
                return e.status
        assert status("/api/v1/pods", [("fieldSelector", "spec.nodeName=gpu-node-1"), ("limit", "1")]) == 200
        assert status("/api/v1/pods", [("fieldSelector", "spec.nodeName=gpu-node-1"), ("watch", "true"),
                                       ("timeoutSeconds", "1")]) == 200
        assert status("/apis/resource.k8s.io/v1beta1/resourceslices", [("limit", "1")]) in (200, 404)
        assert status("/apis/resource.k8s.io/v1/resourceslices", [("limit", "1")]) == 200
        assert status("/api/v1/namespaces/kube-system/secrets", [("limit", "1")]) == 403
        assert status("/api/v1/namespaces/default/pods/none", []) == 403
    finally:
        for call, name in ((apis["rbac"].delete_cluster_role_binding, objs[2]["metadata"]["name"]),
                           (apis["rbac"].delete_cluster_role, objs[1]["metadata"]["name"])):
            try:
                call(name)
            except ApiException:
                pass
        apis["core"].delete_namespace(ns)
