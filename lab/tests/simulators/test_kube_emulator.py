"""Tests for the lab Kubernetes API emulator (lab/kube/emulator.py) and lab/kube/validate.py.

Run: /work/main/.venv/bin/pytest lab/tests/simulators/test_kube_emulator.py
Nothing here skips: a missing tool or a dead emulator is a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "lab" / "kube"
VENV_BIN = ROOT / ".venv" / "bin"
sys.path.insert(0, str(KUBE))

import emulator  # noqa: E402
import validate  # noqa: E402
from conftest import ANSIBLE_TESTS_CFG, play_json  # noqa: E402

from kubernetes import client as k8s, config as k8s_config, dynamic  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

SEED = [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "gpu-node-1", "labels": {"kubernetes.io/hostname": "gpu-node-1",
                                                   "nvidia.com/gpu.present": "true"}},
     "status": {"capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "aliyun.com/gpu-mem": "640"},
                "allocatable": {"cpu": "31", "memory": "250Gi", "nvidia.com/gpu": "8", "aliyun.com/gpu-mem": "640"},
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-node-1", "labels": {"role": "cpu"}},
     "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}},
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "trainer-abcde", "namespace": "ml",
                  "labels": {"app": "trainer"},
                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer",
                                       "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]},
     "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "main", "image": "busybox"}]},
     "status": {"phase": "Running"}},
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "web-xyz", "namespace": "ml", "labels": {"app": "web"},
                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                       "uid": "00000000-0000-0000-0000-000000000002", "controller": True}]},
     "spec": {"nodeName": "cpu-node-1", "containers": [{"name": "main", "image": "nginx"}]}},
]


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    seed = tmp_path_factory.mktemp("seed") / "seed.yaml"
    seed.write_text(yaml.safe_dump_all(SEED))
    name = f"pytest-{os.getpid()}"
    out = subprocess.run([str(KUBE / "start.sh"), "--name", name, "--version", "v1.29.4", "--seed", str(seed)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"start.sh failed: {out.stdout}\n{out.stderr}"
    kubeconfig = out.stdout.strip().splitlines()[-1]
    state = Path(kubeconfig).parent
    port = int((state / "port").read_text())
    info = {"name": name, "kubeconfig": kubeconfig, "state": state, "url": f"http://127.0.0.1:{port}"}
    yield info
    stop = subprocess.run([str(KUBE / "stop.sh"), "--name", name], capture_output=True, text=True, timeout=30)
    assert stop.returncode == 0, stop.stderr
    assert not (state / "pid").exists()
    if not os.environ.get("KUBE_EMULATOR_KEEP_STATE"):
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def api(emu):
    return k8s_config.new_client_from_config(emu["kubeconfig"])


@pytest.fixture(scope="module")
def dyn(api, tmp_path_factory):
    cache = tmp_path_factory.mktemp("dyncache") / "discovery.json"
    return dynamic.DynamicClient(api, cache_file=str(cache))


def http(emu, method, path, body=None, ctype="application/json"):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(emu["url"] + path, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def log_seq(emu):
    return http(emu, "GET", "/_emulator/requests?since=999999999")[1]["seq"]


def requests_since(emu, seq):
    return http(emu, "GET", f"/_emulator/requests?since={seq}")[1]["items"]


def status_body(exc):
    return json.loads(exc.body)


# --------------------------------------------------------------------------------------------
# python client
# --------------------------------------------------------------------------------------------
def test_version_and_discovery(api, dyn):
    assert dyn.version["kubernetes"]["gitVersion"] == "v1.29.4"
    needed = [("v1", k) for k in ("Namespace", "Node", "Pod", "Service", "ConfigMap", "Secret", "ServiceAccount",
                                  "Event")]
    needed += [("apps/v1", k) for k in ("Deployment", "DaemonSet", "StatefulSet")]
    needed += [("rbac.authorization.k8s.io/v1", k) for k in ("Role", "RoleBinding", "ClusterRole",
                                                             "ClusterRoleBinding")]
    needed += [("node.k8s.io/v1", "RuntimeClass"), ("batch/v1", "Job"),
               ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
               ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
               ("scheduling.k8s.io/v1", "PriorityClass"), ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
               ("coordination.k8s.io/v1", "Lease")]
    for av, kind in needed:
        r = dyn.resources.get(api_version=av, kind=kind)
        assert r.kind == kind
    assert dyn.resources.get(api_version="v1", kind="Pod").namespaced is True
    assert dyn.resources.get(api_version="v1", kind="Node").namespaced is False
    assert "eviction" in dyn.resources.get(api_version="v1", kind="Pod").subresources
    groups = {g.name for g in k8s.ApisApi(api).get_api_versions().groups}
    assert {"apps", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "coordination.k8s.io"} <= groups


def test_seeded_nodes(api):
    node = k8s.CoreV1Api(api).read_node("gpu-node-1")
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["aliyun.com/gpu-mem"] == "640"
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert node.metadata.uid and node.metadata.resource_version


def test_node_post_and_status_subresource(api, emu):
    core = k8s.CoreV1Api(api)
    st, _ = http(emu, "POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-2", "labels": {"gpu": "a100"}},
        "status": {"capacity": {"nvidia.com/gpu": 4}, "allocatable": {"nvidia.com/gpu": 4}}})
    assert st == 201
    n = core.read_node("gpu-node-2")
    assert n.status.allocatable["nvidia.com/gpu"] == "4"  # numbers come back as quantity strings
    # main-resource writes keep status, status writes change only status
    core.patch_node("gpu-node-2", {"spec": {"unschedulable": True}, "status": {"capacity": {"nvidia.com/gpu": "0"}}})
    n = core.read_node("gpu-node-2")
    assert n.spec.unschedulable is True and n.status.capacity["nvidia.com/gpu"] == "4"
    core.patch_node_status("gpu-node-2", {"status": {"capacity": {"nvidia.com/gpu": "2"}}, "spec": {"taints": []}})
    n = core.read_node("gpu-node-2")
    assert n.status.capacity["nvidia.com/gpu"] == "2" and n.spec.unschedulable is True
    assert [x.metadata.name for x in core.list_node(field_selector="spec.unschedulable=true").items] == \
        ["gpu-node-2"]
    core.delete_node("gpu-node-2")


def test_stop_only_signals_its_own_emulator(tmp_path):
    state_root = tmp_path / "st"
    (state_root / "fake").mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (state_root / "fake" / "pid").write_text(f"{sleeper.pid}\n")
        out = subprocess.run([str(KUBE / "stop.sh"), "--name", "fake"], capture_output=True, text=True,
                             env=dict(os.environ, KUBE_EMULATOR_STATE_ROOT=str(state_root)), timeout=30)
        assert out.returncode == 0 and "not a running emulator" in out.stdout
        assert sleeper.poll() is None, "stop.sh killed a process it did not start"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_crud_and_metadata(api, emu):
    core = k8s.CoreV1Api(api)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="crud")))
    cm = core.create_namespaced_config_map("crud", {"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": "c1", "labels": {"a": "b"}},
                                                    "data": {"k": "v"}})
    assert cm.metadata.uid and cm.metadata.creation_timestamp and cm.metadata.namespace == "crud"
    rv1 = cm.metadata.resource_version
    cm.data["k"] = "v2"
    cm2 = core.replace_namespaced_config_map("c1", "crud", cm)
    assert int(cm2.metadata.resource_version) > int(rv1)
    # no-op PUT does not bump resourceVersion (like the real apiserver)
    cm3 = core.replace_namespaced_config_map("c1", "crud", cm2)
    assert cm3.metadata.resource_version == cm2.metadata.resource_version
    assert core.read_namespaced_config_map("c1", "crud").data == {"k": "v2"}
    deleted = core.delete_namespaced_config_map("c1", "crud")
    assert deleted is not None
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("c1", "crud")
    assert e.value.status == 404 and status_body(e.value)["reason"] == "NotFound"
    # generation for apps
    apps = k8s.AppsV1Api(api)
    dep = apps.create_namespaced_deployment("crud", deployment("d1"))
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("d1", "crud", {"spec": {"replicas": 3}})
    assert dep.metadata.generation == 2 and dep.spec.replicas == 3
    dep = apps.patch_namespaced_deployment("d1", "crud", {"metadata": {"labels": {"x": "y"}}})
    assert dep.metadata.generation == 2
    # deleting the namespace removes its content
    core.delete_namespace("crud")
    assert not any(i.metadata.name == "d1" for i in apps.list_deployment_for_all_namespaces().items)


def deployment(name, labels=None):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": "busybox:1",
                                                           "env": [{"name": "A", "value": "1"}]}]}}}}


def test_missing_namespace_is_404(api):
    with pytest.raises(ApiException) as e:
        k8s.CoreV1Api(api).create_namespaced_config_map(
            "does-not-exist", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    body = status_body(e.value)
    assert e.value.status == 404
    assert body["kind"] == "Status" and body["reason"] == "NotFound"
    assert body["message"] == 'namespaces "does-not-exist" not found'


def test_already_exists_invalid_and_stale_put(api):
    core = k8s.CoreV1Api(api)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dup"}, "data": {"a": "1"}}
    first = core.create_namespaced_config_map("default", body)
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("default", body)
    assert e.value.status == 409 and status_body(e.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("default", {"apiVersion": "v1", "kind": "ConfigMap",
                                                      "metadata": {"name": "Bad_Name"}})
    assert e.value.status == 422 and status_body(e.value)["reason"] == "Invalid"
    core.patch_namespaced_config_map("dup", "default", {"data": {"a": "2"}})
    stale = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "dup", "resourceVersion": first.metadata.resource_version}, "data": {"a": "3"}}
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("dup", "default", stale)
    assert e.value.status == 409 and status_body(e.value)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("dup", "default").data == {"a": "2"}
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                               "spec": {"containers": []}})
    assert e.value.status == 422


def test_unknown_fields_pruned_or_rejected(emu):
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "prune", "bogus": 1},
            **{k: v for k, v in deployment("prune").items() if k not in ("apiVersion", "kind", "metadata")}}
    body["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    body["spec"]["typo"] = True
    st, b = http(emu, "POST", "/apis/apps/v1/namespaces/default/deployments?fieldValidation=Strict", body)
    assert st == 400 and "unknown field" in b["message"] and "spec.typo" in b["message"]
    req = urllib.request.Request(emu["url"] + "/apis/apps/v1/namespaces/default/deployments",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        warnings = r.headers.get_all("Warning")
        created = json.loads(r.read())
    assert any("imagePullPolice" in w for w in warnings) and any("spec.typo" in w for w in warnings)
    assert "typo" not in created["spec"] and "bogus" not in created["metadata"]
    assert "imagePullPolice" not in created["spec"]["template"]["spec"]["containers"][0]
    # merge-patching an unknown field stores nothing and changes nothing
    st, b = http(emu, "PATCH", "/apis/apps/v1/namespaces/default/deployments/prune", {"spec": {"typo": 1}},
                 "application/merge-patch+json")
    assert st == 200 and b["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_label_and_field_selectors(api):
    core = k8s.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sel"}})
    specs = {"s1": {"tier": "gpu", "env": "prod"}, "s2": {"tier": "gpu", "env": "dev"},
             "s3": {"tier": "cpu", "env": "prod", "legacy": "yes"}, "s4": {}}
    for n, labels in specs.items():
        core.create_namespaced_config_map("sel", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": n, "labels": labels}})

    def names(**kw):
        return sorted(i.metadata.name for i in core.list_namespaced_config_map("sel", **kw).items)

    assert names(label_selector="tier=gpu") == ["s1", "s2"]
    assert names(label_selector="tier==gpu,env!=dev") == ["s1"]
    assert names(label_selector="env in (prod, dev),tier notin (cpu)") == ["s1", "s2"]
    assert names(label_selector="!legacy") == ["s1", "s2", "s4"]
    assert names(label_selector="legacy") == ["s3"]
    assert names(label_selector="env!=prod") == ["s2", "s4"]
    assert names(field_selector="metadata.name=s2") == ["s2"]
    assert names(field_selector="metadata.name!=s2", label_selector="tier") == ["s1", "s3"]
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=cpu-node-1").items
    assert [p.metadata.name for p in pods] == ["web-xyz"]
    with pytest.raises(ApiException) as e:
        core.list_namespaced_config_map("sel", field_selector="data.foo=bar")
    assert e.value.status == 400
    # pagination
    page = core.list_namespaced_config_map("sel", limit=3)
    assert len(page.items) == 3 and page.metadata._continue
    rest = core.list_namespaced_config_map("sel", limit=3, _continue=page.metadata._continue)
    assert len(rest.items) == 1


def test_list_kind(emu, dyn):
    st, raw = http(emu, "GET", "/api/v1/pods")
    assert st == 200
    assert raw["kind"] == "PodList" and raw["apiVersion"] == "v1"
    assert int(raw["metadata"]["resourceVersion"]) > 0
    deps = dyn.resources.get(api_version="apps/v1", kind="Deployment").get()
    assert deps.kind == "DeploymentList" and deps.apiVersion == "apps/v1"


def test_dry_run_all_leaves_nothing(api, emu):
    core = k8s.CoreV1Api(api)
    seq = log_seq(emu)
    obj = core.create_namespaced_config_map("default", {"apiVersion": "v1", "kind": "ConfigMap",
                                                        "metadata": {"name": "dry"}}, dry_run="All")
    assert obj.metadata.name == "dry"
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("dry", "default")
    core.create_namespaced_config_map("default", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "dry2"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("dry2", "default", {"data": {"a": "2"}}, dry_run="All")
    core.delete_namespaced_config_map("dry2", "default", dry_run="All")
    assert core.read_namespaced_config_map("dry2", "default").data == {"a": "1"}
    reqs = requests_since(emu, seq)
    dry = [r for r in reqs if r["dry_run"]]
    assert len(dry) == 3 and not any(r["write"] or r["mutated"] for r in dry)
    assert [r["verb"] for r in reqs if r["write"]] == ["create"]


def test_server_side_apply(dyn, emu):
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "namespace": "default",
                                                                  "labels": {"a": "1", "b": "2"}},
            "data": {"x": "1", "y": "2"}}
    created = cms.server_side_apply(body=body, name="ssa", namespace="default", field_manager="lab")
    assert created.data.x == "1"
    mf = created.metadata.managedFields
    assert mf[0]["manager"] == "lab" and mf[0]["operation"] == "Apply"
    rv = created.metadata.resourceVersion
    # identical apply: no change, same resourceVersion
    again = cms.server_side_apply(body=body, name="ssa", namespace="default", field_manager="lab")
    assert again.metadata.resourceVersion == rv
    # dropping a field this manager owned removes it
    body2 = json.loads(json.dumps(body))
    del body2["data"]["y"]
    del body2["metadata"]["labels"]["b"]
    body2["data"]["x"] = "10"
    upd = cms.server_side_apply(body=body2, name="ssa", namespace="default", field_manager="lab")
    assert upd.data.to_dict() == {"x": "10"} and dict(upd.metadata.labels) == {"a": "1"}
    # another manager conflicts unless forced
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"x": "99"}}
    with pytest.raises(dynamic.exceptions.ConflictError) as e:
        cms.server_side_apply(body=other, name="ssa", namespace="default", field_manager="intruder")
    assert "conflict" in json.loads(e.value.body)["message"]
    forced = cms.server_side_apply(body=other, name="ssa", namespace="default", field_manager="intruder",
                                   force_conflicts=True)
    assert forced.data.x == "99"
    # fieldManager is required for apply
    st, b = http(emu, "PATCH", "/api/v1/namespaces/default/configmaps/ssa", other, "application/apply-patch+yaml")
    assert st == 400 and b["kind"] == "Status"


def test_patch_flavours(api, emu):
    apps = k8s.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment("pf"))
    # strategic merge: containers merged by name, env by name
    d = apps.patch_namespaced_deployment("pf", "default", {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "image": "pause"}, {"name": "main", "env": [{"name": "B", "value": "2"}]}]}}}})
    cs = {c.name: c for c in d.spec.template.spec.containers}
    assert set(cs) == {"main", "side"} and cs["main"].image == "busybox:1"
    assert {e.name for e in cs["main"].env} == {"A", "B"}
    # $patch: delete
    d = apps.patch_namespaced_deployment("pf", "default", {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "$patch": "delete"}]}}}})
    assert [c.name for c in d.spec.template.spec.containers] == ["main"]
    # json merge patch / json patch
    path = "/apis/apps/v1/namespaces/default/deployments/pf"
    st, raw = http(emu, "PATCH", path, {"metadata": {"labels": {"m": "1"}}}, "application/merge-patch+json")
    assert st == 200 and raw["metadata"]["labels"] == {"m": "1"}
    st, raw = http(emu, "PATCH", path, [{"op": "replace", "path": "/spec/replicas", "value": 5}],
                   "application/json-patch+json")
    assert st == 200
    assert raw["spec"]["replicas"] == 5


def test_crd_makes_kind_served(api, dyn, emu, tmp_path):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "clusterpolicies.nvidia.com"},
           "spec": {"group": "nvidia.com", "scope": "Cluster",
                    "names": {"plural": "clusterpolicies", "singular": "clusterpolicy", "kind": "ClusterPolicy",
                              "listKind": "ClusterPolicyList"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "subresources": {"status": {}},
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition").create(body=crd)
    fresh = dynamic.DynamicClient(api, cache_file=str(tmp_path / "cache.json"))
    cp = fresh.resources.get(api_version="nvidia.com/v1", kind="ClusterPolicy")
    assert cp.namespaced is False
    obj = cp.create(body={"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                          "metadata": {"name": "cluster-policy"}, "spec": {"driver": {"enabled": True}}})
    assert obj.metadata.generation == 1
    lst = cp.get()
    assert lst.kind == "ClusterPolicyList" and lst["items"][0]["kind"] == "ClusterPolicy"
    # strategic merge is not allowed for custom resources
    st, b = http(emu, "PATCH", "/apis/nvidia.com/v1/clusterpolicies/cluster-policy", {"spec": {}},
                 "application/strategic-merge-patch+json")
    assert st == 415 and b["reason"] == "UnsupportedMediaType"
    got = k8s.ApiextensionsV1Api(api).read_custom_resource_definition("clusterpolicies.nvidia.com")
    assert {c.type: c.status for c in got.status.conditions}["Established"] == "True"


def test_watch_streams_events(emu, api):
    core = k8s.CoreV1Api(api)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    events = []

    def reader():
        req = urllib.request.Request(emu["url"] + f"/api/v1/namespaces/default/configmaps?watch=true"
                                     f"&resourceVersion={rv}&timeoutSeconds=3")
        with urllib.request.urlopen(req, timeout=10) as r:
            for line in r:
                events.append(json.loads(line))

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.3)
    core.create_namespaced_config_map("default", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "watched"}})
    core.delete_namespaced_config_map("watched", "default")
    t.join(timeout=10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "watched"),
                                                                               ("DELETED", "watched")]


def test_watch_expired_resource_version(tmp_path):
    srv = emulator.make_server(0, str(tmp_path))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        with srv.store.lock:
            srv.store.events.extend([(10_000 + i, "MODIFIED", "", "configmaps", {}) for i in range(2000)])
        with urllib.request.urlopen(url + "/api/v1/configmaps?watch=1&resourceVersion=5", timeout=5) as r:
            ev = [json.loads(line) for line in r]
        assert ev[0]["type"] == "ERROR" and ev[0]["object"]["code"] == 410
    finally:
        srv.shutdown()
        srv.server_close()


def test_request_log_file_endpoint_and_bound(emu, tmp_path):
    lines = (emu["state"] / "requests.jsonl").read_text().splitlines()
    assert lines, "request log file is empty"
    entry = json.loads(lines[-1])
    for k in ("seq", "method", "path", "query", "status", "verb", "class", "dry_run", "write", "mutated"):
        assert k in entry
    # bounded in-memory history, in-process server
    srv = emulator.make_server(0, str(tmp_path), history=5)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        for _ in range(12):
            urllib.request.urlopen(url + "/api/v1/namespaces").read()
        with urllib.request.urlopen(url + "/_emulator/requests") as r:
            data = json.loads(r.read())
        assert data["seq"] == 12 and len(data["items"]) == 5
        assert len((tmp_path / "requests.jsonl").read_text().splitlines()) == 12
        urllib.request.urlopen(urllib.request.Request(url + "/_emulator/reset-log", data=b"", method="POST")).read()
        with urllib.request.urlopen(url + "/_emulator/requests") as r:
            assert json.loads(r.read())["items"] == []
        assert (tmp_path / "requests.jsonl").read_text() == ""
    finally:
        srv.shutdown()
        srv.server_close()


def test_unit_selector_and_merge_helpers():
    reqs = emulator.parse_label_selector("a=b,c!=d,e in (x,y),!f,g")
    assert emulator.label_match(reqs, {"a": "b", "e": "y", "g": "1"})
    assert not emulator.label_match(reqs, {"a": "b", "e": "y", "g": "1", "f": ""})
    assert not emulator.label_match(reqs, {"a": "b", "c": "d", "e": "x", "g": ""})
    with pytest.raises(emulator.ApiError):
        emulator.parse_label_selector("a in x")
    assert emulator.json_merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}) == {"a": {"c": 2}}
    assert emulator.strategic_merge({"finalizers": ["a"]}, {"finalizers": ["b"]}) == {"finalizers": ["a", "b"]}
    assert emulator.strategic_merge({"args": ["a"]}, {"args": ["b"]}) == {"args": ["b"]}


# --------------------------------------------------------------------------------------------
# Ansible kubernetes.core against the emulator
# --------------------------------------------------------------------------------------------
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    cm_value: "{{ value | default('one') }}"
  tasks:
    - name: client-side (default, strategic merge update)
      kubernetes.core.k8s:
        state: present
        definition: "{{ lookup('template', 'objs.j2', template_vars={'suffix': 'd', 'v': cm_value}) | from_yaml_all | list }}"
    - name: client-side apply
      kubernetes.core.k8s:
        state: present
        apply: true
        definition: "{{ lookup('template', 'objs.j2', template_vars={'suffix': 'a', 'v': cm_value}) | from_yaml_all | list }}"
    - name: server-side apply
      kubernetes.core.k8s:
        state: present
        apply: true
        server_side_apply:
          field_manager: gpuops
          force_conflicts: true
        definition: "{{ lookup('template', 'objs.j2', template_vars={'suffix': 's', 'v': cm_value}) | from_yaml_all | list }}"
"""

OBJS = """---
apiVersion: v1
kind: Namespace
metadata:
  name: lab-{{ suffix }}
  labels: {gpuops.io/lab: "true"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg-{{ suffix }}
  namespace: lab-{{ suffix }}
  labels: {gpuops.io/lab: "true", mode: "{{ suffix }}"}
data:
  key: "{{ v }}"
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ds-{{ suffix }}
  namespace: lab-{{ suffix }}
  labels: {gpuops.io/lab: "true"}
spec:
  selector: {matchLabels: {app: ds-{{ suffix }}}}
  template:
    metadata: {labels: {app: ds-{{ suffix }}}}
    spec:
      nodeSelector: {nvidia.com/gpu.present: "true"}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
        - name: agent
          image: registry.example/agent:1.0
          env: [{name: MODE, value: "{{ suffix }}"}]
          resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: gpuops-{{ suffix }}
  labels: {gpuops.io/lab: "true"}
rules:
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list, patch]
"""

ABSENT = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: remove cluster role
      kubernetes.core.k8s:
        state: absent
        api_version: rbac.authorization.k8s.io/v1
        kind: ClusterRole
        name: gpuops-d
    - name: remove namespace
      kubernetes.core.k8s:
        state: absent
        kind: Namespace
        name: lab-d
    - name: info by label
      kubernetes.core.k8s_info:
        kind: ConfigMap
        label_selectors: ["gpuops.io/lab=true", "mode in (a, s)"]
      register: cms
    - name: info on nodes
      kubernetes.core.k8s_info:
        kind: Node
        label_selectors: ["nvidia.com/gpu.present"]
      register: gpu_nodes
    - name: drain
      kubernetes.core.k8s_drain:
        name: gpu-node-1
        state: drain
        delete_options:
          wait_timeout: 20
          wait_sleep: 1
      register: drained
    - copy:
        dest: "{{ out }}"
        content: "{{ {'cms': cms.resources | map(attribute='metadata.name') | sort,
                      'gpu_nodes': gpu_nodes.resources | map(attribute='metadata.name') | list,
                      'drain': drained} | to_json }}"
"""


def run_playbook(emu, workdir, playbook, *extra):
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=emu["kubeconfig"], ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG,
               PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}", TMPDIR=str(workdir))
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
           "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}", *extra]
    seq = log_seq(emu)
    p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=180)
    result = play_json(p)
    if p.returncode != 0:
        failed = [(t["task"]["name"], h.get("msg"), h.get("exception", "")[-1500:])
                  for play in result["plays"] for t in play["tasks"] for h in t["hosts"].values()
                  if h.get("failed")]
        pytest.fail(f"ansible-playbook failed rc={p.returncode}: {failed}\n{p.stderr[-2000:]}")
    stats = result["stats"]["localhost"]
    return stats, requests_since(emu, seq), result


def changed_tasks(result):
    out = []
    for play in result["plays"]:
        for t in play["tasks"]:
            r = t["hosts"].get("localhost", {})
            if r.get("changed"):
                out.append((t["task"]["name"], [(x.get("method"), x.get("diff")) for x in
                                                (r.get("result", {}).get("results") or [r])]))
    return out


@pytest.fixture(scope="module")
def ansible_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ansible")
    (d / "site.yml").write_text(PLAY)
    (d / "templates").mkdir()
    (d / "templates" / "objs.j2").write_text(OBJS)
    (d / "objs.j2").write_text(OBJS)
    (d / "absent.yml").write_text(ABSENT)
    return d


def _writes(reqs):
    return [r for r in reqs if r["write"]]


def test_ansible_present_idempotent_and_check_mode(emu, api, ansible_dir):
    stats, reqs, _ = run_playbook(emu, ansible_dir, ansible_dir / "site.yml")
    assert stats["failures"] == 0 and stats["changed"] == 3
    created = [r for r in _writes(reqs) if r["verb"] == "create" or r["status"] == 201]
    assert len(created) == 12, [(r["method"], r["path"], r["status"]) for r in _writes(reqs)]
    core = k8s.CoreV1Api(api)
    for s in "das":
        assert core.read_namespaced_config_map(f"cfg-{s}", f"lab-{s}").data == {"key": "one"}
        assert k8s.AppsV1Api(api).read_namespaced_daemon_set(f"ds-{s}", f"lab-{s}").spec.template.spec \
            .containers[0].resources.limits["nvidia.com/gpu"] == "1"
    ssa_cm = core.read_namespaced_config_map("cfg-s", "lab-s")
    assert any(m.manager == "gpuops" and m.operation == "Apply" for m in ssa_cm.metadata.managed_fields)

    # second run: nothing changes
    stats, reqs, result = run_playbook(emu, ansible_dir, ansible_dir / "site.yml")
    assert stats["failures"] == 0 and stats["changed"] == 0, changed_tasks(result)
    mutating = [r for r in reqs if r["mutated"]]
    assert mutating == [], mutating
    writes = _writes(reqs)
    assert all(r["method"] == "PATCH" and not r["mutated"] for r in writes), writes
    # client-side apply (apply: true): zero write requests for the Namespace and the ConfigMap.
    # kubernetes.core 6.6 apply.py re-sends a merge patch whenever the object holds a list that is not in
    # its STRATEGIC_MERGE_PATCH_KEYS table (ClusterRole.rules, pod tolerations) or an int quantity
    # (`nvidia.com/gpu: 1`, stored as "1"): those PATCHes would hit a real apiserver too.
    apply_writes = {r["path"].rsplit("/", 1)[1] for r in writes if "lab-a" in r["path"] or r["path"].endswith("-a")}
    assert apply_writes <= {"ds-a", "gpuops-a"}, apply_writes
    # default mode (strategic-merge PATCH) and server-side apply always send a PATCH, mutating nothing
    for s in "ds":
        sent = {r["path"].rsplit("/", 1)[1] for r in writes if f"lab-{s}" in r["path"] or r["path"].endswith(f"-{s}")}
        assert sent == {f"lab-{s}", f"cfg-{s}", f"ds-{s}", f"gpuops-{s}"}, sent

    # check mode with a changed value: reports changed, but only dry-run requests reach the server
    before = http(emu, "GET", "/_emulator/state")[1]["resourceVersion"]
    stats, reqs, _ = run_playbook(emu, ansible_dir, ansible_dir / "site.yml", "--check", "-e", "value=two")
    assert stats["failures"] == 0 and stats["changed"] == 3
    assert _writes(reqs) == [] and not any(r["mutated"] for r in reqs)
    assert any(r["dry_run"] for r in reqs), "check mode should use server-side dry run"
    assert http(emu, "GET", "/_emulator/state")[1]["resourceVersion"] == before
    assert core.read_namespaced_config_map("cfg-a", "lab-a").data == {"key": "one"}


def test_ansible_absent_info_and_drain(emu, api, ansible_dir):
    if not any(n.metadata.name == "lab-d" for n in k8s.CoreV1Api(api).list_namespace().items):
        pytest.fail("test_ansible_present_idempotent_and_check_mode must run first (creates lab-d)")
    out = ansible_dir / "out.json"
    stats, reqs, _ = run_playbook(emu, ansible_dir, ansible_dir / "absent.yml", "-e", f"out={out}")
    assert stats["failures"] == 0
    res = json.loads(out.read_text())
    core = k8s.CoreV1Api(api)
    assert "lab-d" not in {n.metadata.name for n in core.list_namespace().items}
    assert "gpuops-d" not in {r.metadata.name for r in k8s.RbacAuthorizationV1Api(api).list_cluster_role().items}
    assert res["cms"] == ["cfg-a", "cfg-s"]
    assert res["gpu_nodes"] == ["gpu-node-1"]
    node = core.read_node("gpu-node-1")
    assert node.spec.unschedulable is True
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items if p.metadata.name == "trainer-abcde"] \
        == []
    assert any(r["resource"] == "pods/eviction" and r["status"] == 201 for r in reqs)
    assert any(r["resource"] == "nodes" and r["method"] == "PATCH" and r["mutated"] for r in reqs)
    # the pod on the other node is untouched
    assert core.read_namespaced_pod("web-xyz", "ml").spec.node_name == "cpu-node-1"


# --------------------------------------------------------------------------------------------
# schema validation
# --------------------------------------------------------------------------------------------
def test_validate_minors_available():
    have = validate.available_minors()
    assert set(validate.SUPPORTED_MINORS) <= set(have), have


def test_validate_good_deployment_all_minors(tmp_path):
    f = tmp_path / "dep.yaml"
    f.write_text(yaml.safe_dump_all([deployment("ok"), {"apiVersion": "v1", "kind": "ConfigMap",
                                                        "metadata": {"name": "c"}, "data": {"a": "b"}}]))
    rep = validate.validate_files([str(f)])
    assert rep["ok"], rep["failures"]
    assert len([r for r in rep["results"] if r["status"] == "passed"]) == 2 * len(validate.SUPPORTED_MINORS)
    assert validate.main([str(f)]) == 0


def test_validate_unknown_field_fails_strict(tmp_path):
    d = deployment("typo")
    d["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    rep = validate.validate_documents([d], "typo")
    assert not rep["ok"]
    assert {r["minor"] for r in rep["failures"]} == set(validate.SUPPORTED_MINORS)
    assert all(r["status"] == "failed" and "imagePullPolice" in r["message"] for r in rep["failures"])
    f = tmp_path / "typo.yaml"
    f.write_text(yaml.safe_dump(d))
    assert validate.main([str(f)]) == 1


def test_validate_removed_api_fails_where_removed():
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}
    rep = validate.validate_documents([pdb], "pdb")
    by_minor = {r["minor"]: r["status"] for r in rep["results"]}
    assert by_minor["1.24"] == "passed"
    assert all(by_minor[m] == "schema-missing" for m in validate.SUPPORTED_MINORS if m != "1.24")
    assert not rep["ok"]
    unknown_builtin = {"apiVersion": "apps/v1", "kind": "Frobnicator", "metadata": {"name": "x"}}
    assert not validate.validate_documents([unknown_builtin])["ok"]


def test_validate_custom_resources_reported(tmp_path):
    docs = [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": {"anything": True}},
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}},
            deployment("ok")]
    rep = validate.validate_documents(docs, "mixed")
    assert rep["ok"]
    assert [(n["kind"], n["reason"]) for n in rep["not_validated"]] == [
        ("ClusterPolicy", "not validated: custom resource"), ("Queue", "not validated: custom resource")]
    assert not any(r["kind"] in ("ClusterPolicy", "Queue") for r in rep["results"])


# --------------------------------------------------------------------------------------------
# Semantic validation as the API server does it (core/validation and rbac/validation)
# --------------------------------------------------------------------------------------------
def _ds(**spec):
    pod = {"containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.18.0"}]}
    pod.update(spec)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "semantic", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "semantic"}},
                     "template": {"metadata": {"labels": {"app": "semantic"}}, "spec": pod}}}


def _causes(kind, obj, group="apps", plural="daemonsets"):
    rt = [t for t in emulator._builtin_types() if t.group == group and t.plural == plural][0]
    assert rt.kind == kind
    return emulator.validate_object(rt, obj)


def _msgs(causes):
    return [(c["field"], c["message"]) for c in causes]


def test_emulator_rejects_hostpid_with_shareprocessnamespace_422(emu):
    """The MPS control daemon's old spec: the API server answers 422 Invalid (defect 1 fails in the lab)."""
    body = _ds(hostPID=True, shareProcessNamespace=True)
    code, status = http(emu, "POST", "/apis/apps/v1/namespaces/default/daemonsets", body)
    assert code == 422 and status["reason"] == "Invalid", status
    causes = status["details"]["causes"]
    assert any(c["field"] == "spec.template.spec.securityContext.shareProcessNamespace"
               and "ShareProcessNamespace and HostPID cannot both be enabled" in c["message"] for c in causes), causes
    # each alone is fine
    assert _causes("DaemonSet", _ds(hostPID=True)) == []
    assert _causes("DaemonSet", _ds(shareProcessNamespace=True, hostIPC=True, hostNetwork=True)) == []


def test_emulator_container_and_volume_names_unique_and_mounts_resolve():
    ctr = {"name": "plugin", "image": "x", "volumeMounts": [{"name": "dp", "mountPath": "/var/lib/kubelet"},
                                                            {"name": "missing", "mountPath": "/run"},
                                                            {"name": "dp", "mountPath": "/var/lib/kubelet"}]}
    causes = _msgs(_causes("DaemonSet", _ds(
        containers=[ctr, {"name": "plugin", "image": "x"}, {"name": "Bad_Name", "image": "x"}],
        volumes=[{"name": "dp", "hostPath": {"path": "/var/lib/kubelet"}}, {"name": "dp", "emptyDir": {}},
                 {"name": "two", "hostPath": {"path": "/a"}, "emptyDir": {}}, {"name": "none"},
                 {"name": "hp", "hostPath": {"path": "/x", "type": "Dir"}}])))
    base = "spec.template.spec."
    assert (base + "containers[1].name", 'Duplicate value: "plugin"') in causes
    assert any(f == base + "containers[2].name" and "RFC 1123 label" in m for f, m in causes)
    assert (base + "volumes[1].name", 'Duplicate value: "dp"') in causes
    assert (base + "containers[0].volumeMounts[1].name", 'Not found: "missing"') in causes
    assert (base + "containers[0].volumeMounts[2].mountPath", 'Invalid value: "/var/lib/kubelet": must be unique') in causes
    assert any(f == base + "volumes[2].emptyDir" and "more than 1 volume type" in m for f, m in causes)
    assert any(f == base + "volumes[3]" and "must specify a volume type" in m for f, m in causes)
    assert any(f == base + "volumes[4].hostPath.type" for f, m in causes)


def test_emulator_ports_and_host_network():
    ctr = {"name": "c", "image": "x", "ports": [{"containerPort": 9400, "hostPort": 9401, "name": "metrics"},
                                                {"containerPort": 0}, {"containerPort": 80, "name": "metrics"},
                                                {"containerPort": 81, "name": "Not_A_Port_Name_Too_Long"},
                                                {"containerPort": 82, "protocol": "HTTP"}]}
    causes = _msgs(_causes("DaemonSet", _ds(containers=[ctr], hostNetwork=True)))
    p = "spec.template.spec.containers[0].ports"
    assert (p + "[0].hostPort", "Invalid value: 9401: must match `containerPort` when `hostNetwork` is true") in causes
    assert any(f == p + "[1].containerPort" for f, m in causes)
    assert (p + "[2].name", 'Duplicate value: "metrics"') in causes
    assert any(f == p + "[3].name" for f, m in causes)
    assert any(f == p + "[4].protocol" and "Unsupported value" in m for f, m in causes)
    ok = {"name": "c", "image": "x", "ports": [{"containerPort": 9400, "hostPort": 9400, "name": "metrics"}]}
    assert _causes("DaemonSet", _ds(containers=[ok], hostNetwork=True)) == []


def test_emulator_extended_resources_requests_equal_limits():
    def res(r):
        return _ds(containers=[{"name": "c", "image": "x", "resources": r}])
    assert _causes("DaemonSet", res({"limits": {"nvidia.com/gpu": 1}})) == []
    assert _causes("DaemonSet", res({"requests": {"nvidia.com/gpu": "2", "cpu": "100m"},
                                     "limits": {"nvidia.com/gpu": 2, "cpu": "1"}})) == []
    r = "spec.template.spec.containers[0].resources"
    assert _msgs(_causes("DaemonSet", res({"requests": {"nvidia.com/gpu": 1}}))) == [
        (r + ".limits", "Required value: Limit must be set for non overcommitable resources")]
    assert _msgs(_causes("DaemonSet", res({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}))) == [
        (r + ".requests[nvidia.com/gpu]", 'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2')]
    assert _msgs(_causes("DaemonSet", res({"limits": {"aliyun.com/gpu-mem": "0.5"}}))) == [
        (r + ".limits[aliyun.com/gpu-mem]", 'Invalid value: "0.5": must be an integer')]
    # native resources may overcommit
    assert _causes("DaemonSet", res({"requests": {"memory": "1Gi"}})) == []


def test_emulator_runtime_class_name_security_context_tolerations():
    base = "spec.template.spec."
    causes = _msgs(_causes("DaemonSet", _ds(runtimeClassName="Nvidia_Runtime")))
    assert any(f == base + "runtimeClassName" and "RFC 1123 subdomain" in m for f, m in causes)
    assert _causes("DaemonSet", _ds(runtimeClassName="nvidia")) == []
    sc = {"allowPrivilegeEscalation": False, "capabilities": {"add": ["CAP_SYS_ADMIN"], "drop": ["ALL"]}}
    causes = _msgs(_causes("DaemonSet", _ds(containers=[{"name": "c", "image": "x", "securityContext": sc}])))
    assert any("CAP_SYS_ADMIN" in m for f, m in causes)
    # the API server compares the literal CAP_SYS_ADMIN: spelled SYS_ADMIN the same pod is accepted
    sc = {"allowPrivilegeEscalation": False, "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}}
    assert _causes("DaemonSet", _ds(containers=[{"name": "c", "image": "x", "securityContext": sc}])) == []
    sc = {"privileged": True, "allowPrivilegeEscalation": False}
    causes = _msgs(_causes("DaemonSet", _ds(containers=[{"name": "c", "image": "x", "securityContext": sc}])))
    assert any("`privileged` to true" in m for f, m in causes)
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}, {"operator": "Equal", "value": "a"},
           {"key": "k", "operator": "Equal", "effect": "Never"}, {"operator": "Exists"}]
    causes = _msgs(_causes("DaemonSet", _ds(tolerations=tol)))
    assert [f for f, m in causes] == [base + "tolerations[0].operator", base + "tolerations[1].operator",
                                      base + "tolerations[2].effect"]


def test_emulator_rbac_rule_shape_and_bindings(emu):
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "gpuops-bad"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": []},
                      {"resources": ["pods"], "verbs": ["get"]},
                      {"apiGroups": [""], "verbs": ["get"]},
                      {"nonResourceURLs": ["/metrics"], "resources": ["pods"], "verbs": ["get"]},
                      {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
    code, status = http(emu, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    assert code == 422 and status["reason"] == "Invalid"
    causes = _msgs(status["details"]["causes"])
    assert ("rules[0].verbs", "Required value: verbs must contain at least one value") in causes
    assert ("rules[1].apiGroups", "Required value: resource rules must supply at least one api group") in causes
    assert ("rules[2].resources", "Required value: resource rules must supply at least one resource") in causes
    assert any(f == "rules[3].nonResourceURLs" for f, m in causes) and len(causes) == 4
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
               "subjects": [{"kind": "ServiceAccount", "name": "sa"}, {"kind": "User", "name": "u"}]}
    causes = _msgs(_causes("ClusterRoleBinding", binding, "rbac.authorization.k8s.io", "clusterrolebindings"))
    assert [f for f, m in causes] == ["roleRef.kind", "subjects[0].namespace", "subjects[1].apiGroup"]


def test_emulator_every_rendered_stack_manifest_passes_semantic_validation():
    """What the collection renders for every strategy goes through the same rules (this found the MPS control
    daemon's hostPID + shareProcessNamespace, issue 13 defect 1)."""
    sys.path.insert(0, str(ROOT / "lab" / "tests"))
    from test_gpu_sharing_stack import CASES, STRATEGIES  # noqa: E402 - one source of the per-strategy inputs
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
    by_kind = {(t.group, t.kind): t for t in emulator._builtin_types()}
    problems = {}
    for strategy in STRATEGIES:
        node_name, facts, extra = CASES[strategy]
        settings = dict((k.replace("gpu_sharing_stack_", ""), v) for k, v in extra.items() if isinstance(v, dict))
        if strategy == "hami":   # the role reads it from the API server's /version
            settings["hami"] = dict(settings.get("hami") or {}, kube_version="v1.31.4")
        out = render.render({"strategy": strategy, "pool": "p", "nodes": [node_name],
                             "facts": {node_name: facts}, "settings": settings,
                             "registry": "registry.example.com/mirror", "image_pull_secrets": ["regcred"],
                             "validation": {"enabled": True}})
        for doc in out["manifests"] + out["validation_manifests"]:
            group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
            rt = by_kind.get((group, doc["kind"]))
            if rt is None:
                continue
            causes = emulator.validate_object(rt, doc)
            name_err = emulator.validate_name(rt, doc["metadata"]["name"])
            if causes or name_err:
                problems.setdefault(strategy, []).append((doc["kind"], doc["metadata"]["name"], causes, name_err))
    assert problems == {}, problems
