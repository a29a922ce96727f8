"""Strategy dra on Kubernetes 1.33 (issue #37 item 1), on upstream's own kube-apiserver, controller-manager and
scheduler v1.33.13 (lab/go/kube-1.33: built from the Go module proxy) with DRA switched on as a 1.33 cluster must
have it (the DynamicResourceAllocation gate and resource.k8s.io v1beta1/v1beta2 through --runtime-config,
lab/kube/real.py VERSION_FLAGS): a control plane of its own, not the shared 1.37 one.

* The role (stack, labels, ready) with the version read from the server: the pool's claims and the validation
  workload's template go in as resource.k8s.io/v1beta2 and are stored; a re-run changes nothing; state absent, which
  gives no version either, removes them all. Before the fix the validation template was resource.k8s.io/v1, which
  1.33 does not serve, and the removal rendered every claim as v1.
* What the renderer makes for 1.32 (resource.k8s.io/v1beta1, the flat DeviceRequest) is accepted by 1.33's v1beta1
  (the same flat request) with strict field validation, and the nested shape (`exactly`), which the collection sent
  as v1beta1 before, is refused as an unknown field.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_kube133_real.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import private_kube, wait_until  # noqa: E402
from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_real import failures, live_object, rendered, run_play, task_results  # noqa: E402
from gpu_kwok_nodes import bare_node  # noqa: E402  (the recorded T4 node before its stack)

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "build" / "collections"))
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra  # noqa: E402

NODE = "dra133-node"
POOL = "dra133"
CLAIMS = "dra133-claims"


@pytest.fixture(scope="module")
def kube133(tmp_path_factory):
    with private_kube(tmp_path_factory.mktemp("kube-133"), "1.33") as kube:
        from kubernetes import client
        core = client.CoreV1Api(kube.api())
        core.create_node(bare_node(NODE, "t4x1", facts=T4))
        core.create_namespace({"metadata": {"name": CLAIMS}})
        yield kube


def role_vars(state="present"):
    return {"gpu_sharing_stack_strategy": "dra", "gpu_sharing_stack_state": state, "gpu_sharing_stack_pool": POOL,
            "gpu_sharing_stack_nodes": [NODE], "gpu_sharing_stack_facts": {NODE: T4},
            "gpu_sharing_stack_dra": {
                "chart_path": "/srv/charts/dra-driver-nvidia-gpu-0.5.0.tgz", "chart_version": "0.5.0",
                "assume_cdi_enabled": True, "kube_dra_enabled": True, "claim_namespace": CLAIMS,
                "feature_gates": {"TimeSlicingSettings": True},
                "claim_templates": [{"name": "t4", "product_name": "Tesla T4", "min_memory": "15Gi", "count": 1},
                                    {"name": "t4-shared", "kind": "time-slicing", "shared": True}]},
            "gpu_sharing_stack_validation": True, "gpu_sharing_stack_validation_namespace": CLAIMS,
            "gpu_sharing_stack_helm_install": False}


def _policy_evaluated_on_v1beta2(kube):
    """The kubelet plugin's admission policy (DRA-14) evaluated on 1.33's resource.k8s.io/v1beta2 ResourceSlices (its
    expressions are checked only when a request comes): the release's kubelet plugin account (made here, with the
    chart's resourceslices rights: no release is installed on this plane), a token bound to a pod on NODE, writes
    NODE's slice and is refused another node's (403)."""
    from kubernetes import client
    api = kube.api()
    core, rbac, authz = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api), client.AuthorizationV1Api(api)
    ns, sa = "dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-service-account-kubeletplugin"
    user = "system:serviceaccount:%s:%s" % (ns, sa)
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
    rbac.create_cluster_role({"metadata": {"name": "dra133-slices"}, "rules": [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["create", "delete"]}]})
    rbac.create_cluster_role_binding({"metadata": {"name": "dra133-slices"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "dra133-slices"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
    wait_until("the binding seen by the RBAC authorizer", lambda: authz.create_subject_access_review({"spec": {
        "user": user, "resourceAttributes": {"verb": "create", "group": "resource.k8s.io",
                                             "resource": "resourceslices"}}}).status.allowed, 30)
    pod = core.create_namespaced_pod(ns, {"metadata": {"name": "plugin"}, "spec": {
        "nodeName": NODE, "serviceAccountName": sa, "containers": [{"name": "plugin", "image": "pause"}]}})
    tok = core.create_namespaced_service_account_token(sa, ns, {"spec": {"boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": "plugin", "uid": pod.metadata.uid}}}).status.token
    conf = client.Configuration()
    conf.host, conf.ssl_ca_cert = api.configuration.host, kube.ca
    conf.api_key = {"authorization": "Bearer " + tok}
    plugin = client.CustomObjectsApi(client.ApiClient(configuration=conf))

    def slice_of(name, node):
        return {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceSlice", "metadata": {"name": name},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": [],
                         "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}}
    plugin.create_cluster_custom_object("resource.k8s.io", "v1beta2", "resourceslices", slice_of("dra133-own", NODE))
    with pytest.raises(client.ApiException) as exc:
        plugin.create_cluster_custom_object("resource.k8s.io", "v1beta2", "resourceslices",
                                            slice_of("dra133-other", "elsewhere"))
    assert exc.value.status == 403 and "may not write the ResourceSlices of node elsewhere" in exc.value.body, (
        exc.value.body)
    plugin.delete_cluster_custom_object("resource.k8s.io", "v1beta2", "resourceslices", "dra133-own")


def test_DRA_13_role_on_kubernetes_1_33_applies_reruns_and_removes(kube133, tmp_path):
    cl = (kube133, kube133.kubeconfig)
    rc, result = run_play(cl, tmp_path, [{"name": "present", "block": stack_steps(role_vars())}])
    assert rc == 0, failures(result)
    want = rendered(result)
    assert sorted(k[0] for k in want) == ["Pod", "ResourceClaim", "ResourceClaimTemplate", "ResourceClaimTemplate",
                                          "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert {d["apiVersion"] for k, d in want.items() if k[0].startswith("Resource")} == {"resource.k8s.io/v1beta2"}
    # the kubelet plugin's admission policy (DRA-14) compiles against 1.33's resource.k8s.io/v1beta2 ResourceSlice
    [policy] = [d for k, d in want.items() if k[0] == "ValidatingAdmissionPolicy"]
    assert live_object(kube133, policy)["spec"]["matchConditions"] == policy["spec"]["matchConditions"]
    _policy_evaluated_on_v1beta2(kube133)
    assert all(live_object(kube133, d) is not None for d in want.values())
    renders = [r for n, r in task_results(result) if "Render the stack" in n and "helm" in r]
    assert renders[0]["helm"]["values"]["resourceApiVersion"] == "resource.k8s.io/v1beta2"
    rc, again = run_play(cl, tmp_path, [{"name": "again", "block": stack_steps(role_vars())}])
    assert rc == 0, failures(again)
    assert [n for n, r in task_results(again) if r.get("changed")] == []
    # the removal reads the version too (kube_version unset) and deletes the claims in the version 1.33 serves
    rc, gone = run_play(cl, tmp_path, [{"name": "absent", "block": stack_steps(role_vars("absent"))}])
    assert rc == 0, failures(gone)
    assert [k for k, d in want.items() if live_object(kube133, d) is not None] == []


def _create(kube, path, body):
    """POST with strict field validation (the admin's client certificate); (status, response text)."""
    import ssl
    import urllib.error
    import urllib.request
    import json
    ctx = ssl.create_default_context(cafile=kube.ca)
    pki = os.path.join(kube.state, "pki")
    ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
    req = urllib.request.Request(kube.server + path + "?fieldValidation=Strict", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_DRA_13_v1beta1_flat_request_accepted_and_the_nested_one_refused(kube133):
    specs = [{"name": "flat-a", "count": 2, "product_name": "Tesla T4"}, {"name": "flat-b", "kind": "time-slicing"}]
    for obj in dra.claim_templates(specs, CLAIMS, api_version="resource.k8s.io/v1beta1"):
        status, text = _create(kube133, "/apis/resource.k8s.io/v1beta1/namespaces/%s/resourceclaimtemplates" % CLAIMS, obj)
        assert status == 201, (obj, text)
    # what was sent before the fix: v1's nested request under the v1beta1 apiVersion
    [nested] = dra.claim_templates([{"name": "nested"}], CLAIMS, api_version="resource.k8s.io/v1beta2")
    nested["apiVersion"] = "resource.k8s.io/v1beta1"
    status, text = _create(kube133, "/apis/resource.k8s.io/v1beta1/namespaces/%s/resourceclaimtemplates" % CLAIMS, nested)
    assert status in (400, 422) and "exactly" in text, (status, text)
    # and resource.k8s.io/v1 is not served by 1.33 at all
    status, text = _create(kube133, "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % CLAIMS,
                           dict(nested, apiVersion="resource.k8s.io/v1"))
    assert status == 404, (status, text)
