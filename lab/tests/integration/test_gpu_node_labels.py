"""gpuops.k8s_gpu.gpu_node_labels against the real control plane (lab/kube/real.py, the shared `kube_real` cluster),
with real ansible-playbook runs.

Converge, re-run with zero write requests, check mode, pool changes, refusals (nothing changes, no write request),
state=absent removing only the role's labels, schema validation. Requests are counted from the API server's audit log
by this file's own client identity (a user in group gpuops:audit-reads, so its reads are logged too: a re-run is one
list of the nodes and nothing else). This file's nodes carry its pid, so parallel tests on the shared cluster never
see them.

What the audit log cannot show: the request's Content-Type. That the role's patch is a JSON merge patch
(application/merge-patch+json) is asserted by tests/unit/plugins/module_utils/_cluster/test_node_labels_apply.py
(the emulator showed it here before the move). A no-op write is recognised by the Node's resourceVersion, which the
real server bumps only when a write changes the object.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_node_labels.py
Nothing here skips: a missing tool or a control plane that does not start is a failure.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "lab" / "kube"
VENV_BIN = ROOT / ".venv" / "bin"
sys.path.insert(0, str(KUBE))

import validate  # noqa: E402
from conftest import PLAY_TIMEOUT, WRITE_VERBS, wait_until  # noqa: E402

S = "%d" % os.getpid()
USER = "gpuops-test-node-labels-%s" % S


def n(short):
    """The cluster name of this file's node ``short`` (gpu-a ... gpu-d, gpu-x, gpu-z): with the pid."""
    return "%s-%s" % (short, S)


ANN = "gpuops.io/managed-labels"
STRATEGY = "gpuops.io/sharing-strategy"


def node(name, labels=None, allocatable=None, annotations=None):
    alloc = dict({"cpu": "32", "memory": "256Gi"}, **(allocatable or {}))
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **(labels or {})),
                         "annotations": annotations or {}},
            "status": {"capacity": alloc, "allocatable": alloc}}


SEED = [
    # foreign labels: team (kept), nvidia.com/gpu.product with another value (overwritten, restored on absent)
    node(n("gpu-a"), {"team": "ml", "nvidia.com/gpu.product": "Old-Product"}, {"nvidia.com/gpu": "2"}),
    node(n("gpu-b"), {"team": "research"}, {"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"}),
    node(n("gpu-c"), {}, {"nvidia.com/gpu": "1"}),
    node(n("gpu-d"), {STRATEGY: "mps"}, {"nvidia.com/gpu": "1"}),
]


def facts(product, mem, count, mig=False, mps=True):
    return {"gpu_count": count,
            "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(count),
                       "nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(mem),
                       "nvidia.com/mig.capable": "true" if mig else "false"},
            "sharing": {"exclusive": {"allowed": True}, "time-slicing": {"allowed": True},
                        "gpushare": {"allowed": True},
                        "mps": {"allowed": mps, "max_clients": 48 if mps else 0},
                        "mig": {"allowed": mig, "gpus": [], **({} if mig else {"reason": "GPU(s) 0 are not MIG capable"})}}}


INVENTORY = {
    "all": {
        "hosts": {"localhost": {"ansible_connection": "local",
                                "ansible_python_interpreter": str(VENV_BIN / "python")}},
        "children": {
            "gpu_nodes": {"hosts": {
                n("gpu-a"): {"gpu_probe_facts": facts("Tesla-T4", 15360, 2)},
                n("gpu-b"): {"gpu_probe_facts": facts("Tesla-T4", 15360, 2)},
            }},
            "gpu_conflict": {"hosts": {
                n("gpu-c"): {"gpu_probe_facts": facts("NVIDIA-A100-SXM4-80GB", 81920, 1, mig=True)},
                n("gpu-d"): {"gpu_probe_facts": facts("NVIDIA-A100-SXM4-80GB", 81920, 1, mig=True)},
            }},
            "no_facts": {"hosts": {n("gpu-x"): {"gpu_node_labels_node_name": n("gpu-c")}}},
        },
    }
}

PLAYBOOK = [{"name": "Label GPU nodes", "hosts": "localhost", "gather_facts": False,
             "roles": [{"role": "gpuops.k8s_gpu.gpu_node_labels"}],
             "post_tasks": [{"name": "Show the result",
                             "ansible.builtin.debug": {"var": "gpu_node_labels_result"}}]}]

BASE_VARS = {
    "gpu_node_labels_pools": [
        {"name": "ts", "strategy": "time-slicing", "nodes": [n("gpu-a")], "device_plugin_config": "ts-4"},
        {"name": "gs", "strategy": "gpushare", "nodes": [n("gpu-b")], "labels": {"pool": "shared"}},
    ],
    "gpu_node_labels_extra": {"gpuops.io/managed": "true"},
}


@pytest.fixture(scope="module")
def emu(kube_real):
    """This file's nodes on the shared real cluster; the kubeconfig of its own user (reads logged)."""
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    for d in SEED:
        core.create_node(copy.deepcopy(d))
    # the TTL controller annotates each new Node once: before the tests, so that it never lands inside one (test 9
    # reads a no-op write from an unchanged resourceVersion)
    wait_until("the TTL controller annotated this file's nodes", lambda: all(
        "node.alpha.kubernetes.io/ttl" in (core.read_node(d["metadata"]["name"]).metadata.annotations or {})
        for d in SEED))
    kc = kube_real.user(USER, reads=True)
    yield {"kube": kube_real, "core": core, "kubeconfig": kc}
    for d in SEED:
        try:
            core.delete_node(d["metadata"]["name"])
        except client.ApiException:
            pass


@pytest.fixture(scope="module")
def work(tmp_path_factory, collections_path):
    d = tmp_path_factory.mktemp("play")
    (d / "inventory.yml").write_text(yaml.safe_dump(INVENTORY))
    (d / "play.yml").write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    return {"dir": d, "collections": collections_path}


def live(emu, name):
    """The Node as the API server returns it (camelCase JSON)."""
    api = emu["kube"].api()
    return api.sanitize_for_serialization(emu["core"].read_node(name))


def req(verb, uri, code):
    """An audit log entry as the emulator's request log had it: verb, path, query, resource, write, dry_run."""
    parts = urlsplit(uri)
    query = dict(kv.split("=", 1) for kv in parts.query.split("&") if "=" in kv)
    segs = parts.path.strip("/").split("/")
    segs = segs[2:] if segs[0] == "api" else segs[3:]
    if len(segs) >= 2 and segs[0] == "namespaces" and len(segs) > 2:
        segs = segs[2:]
    dry = query.get("dryRun") == "All"
    return {"verb": verb, "path": parts.path, "query": query, "resource": segs[0] if segs else "", "status": code,
            "write": verb in WRITE_VERBS and not dry, "dry_run": dry}


def requests(emu, start, end):
    return [req(*r) for r in emu["kube"].requests(start, end, user=USER)]


def play(emu, work, extra_vars=None, check=False, diff=False, limit_group=None):
    """Run the role; returns (result dict or None, failure message or None, changed count, requests made)."""
    vars_ = copy.deepcopy(BASE_VARS)
    vars_.update(extra_vars or {})
    if limit_group:
        vars_["gpu_node_labels_group"] = limit_group
    vfile = work["dir"] / "vars.json"
    vfile.write_text(json.dumps(vars_))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=work["collections"], K8S_AUTH_KUBECONFIG=emu["kubeconfig"],
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(work["dir"] / "inventory.yml"), str(work["dir"] / "play.yml"),
           "-e", f"@{vfile}"]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    start = emu["kube"].mark()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=PLAY_TIMEOUT)
    end = emu["kube"].mark()
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"ansible-playbook output is not JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    stats = doc["stats"]["localhost"]
    failure, result, tasks = None, None, {}
    for task in doc["plays"][0]["tasks"]:
        res = task["hosts"].get("localhost", {})
        tasks[task["task"]["name"]] = res
        if res.get("failed"):
            failure = res.get("msg")
        if task["task"]["name"] == "Show the result":
            result = res.get("gpu_node_labels_result")
    assert (proc.returncode != 0) == (failure is not None), (proc.returncode, failure, proc.stderr[-2000:])
    return {"result": result, "failure": failure, "changed": stats["changed"], "requests": requests(emu, start, end),
            "tasks": tasks}


def writes(run):
    return [r for r in run["requests"] if r["write"]]


def test_1_converge(emu, work):
    rv_before = {x: live(emu, n(x))["metadata"]["resourceVersion"] for x in ("gpu-a", "gpu-b")}
    run = play(emu, work)
    assert run["failure"] is None, run["failure"]
    w = writes(run)
    assert sorted(r["path"] for r in w) == ["/api/v1/nodes/" + n("gpu-a"), "/api/v1/nodes/" + n("gpu-b")]
    assert {r["verb"] for r in w} == {"patch"} and {r["status"] for r in w} == {200}
    # each patch changed its node (the Content-Type, a JSON merge patch, is asserted by the unit test: see above)
    assert all(live(emu, n(x))["metadata"]["resourceVersion"] != rv for x, rv in rv_before.items())
    a = live(emu, n("gpu-a"))["metadata"]
    assert a["labels"] == {"kubernetes.io/hostname": n("gpu-a"), "team": "ml", "nvidia.com/gpu.present": "true",
                           "nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "Tesla-T4",
                           "nvidia.com/gpu.memory": "15360", "nvidia.com/mig.capable": "false",
                           "gpuops.io/managed": "true", STRATEGY: "time-slicing",
                           "nvidia.com/device-plugin.config": "ts-4"}
    record = json.loads(a["annotations"][ANN])
    assert record["nvidia.com/gpu.product"] == {"value": "Tesla-T4", "previous": "Old-Product"}
    assert record[STRATEGY] == {"value": "time-slicing", "previous": None}
    assert "team" not in record and "kubernetes.io/hostname" not in record
    b = live(emu, n("gpu-b"))["metadata"]["labels"]
    assert b["gpushare"] == "true" and b["pool"] == "shared" and b[STRATEGY] == "gpushare" and b["team"] == "research"
    assert "nvidia.com/device-plugin.config" not in b
    res = run["result"]
    assert res["changed"] is True and res["missing"] == []
    assert {x["node"]: x["changed"] for x in res["nodes"]} == {n("gpu-a"): True, n("gpu-b"): True}


def test_3_rerun_sends_zero_writes(emu, work):
    run = play(emu, work)
    assert run["failure"] is None
    assert writes(run) == []
    assert [(r["verb"], r["resource"]) for r in run["requests"] if r["verb"] != "get"] == [("list", "nodes")]
    assert run["changed"] == 0 and run["result"]["changed"] is False


def test_4_check_mode_changes_nothing_and_patches_are_schema_valid(emu, work):
    before = state(emu)
    run = play(emu, work, {"gpu_node_labels_extra": {"gpuops.io/managed": "yes", "zone": "a"}}, check=True, diff=True)
    assert run["failure"] is None
    assert writes(run) == []                                  # dryRun=All requests are not writes
    dry = [r for r in run["requests"] if r["dry_run"]]
    assert len(dry) == 2 and all(r["verb"] == "patch" and r["status"] == 200 for r in dry)
    assert run["changed"] == 1                                # one task (the patch loop) reports changed
    patched = [v for k, v in run["tasks"].items() if k.endswith("Patch the labels of the nodes that differ "
                                                                 "(JSON merge patch on metadata only)")][0]
    assert all(r["changed"] and "diff" in r for r in patched["results"])
    assert state(emu) == before
    # every manifest the role sends, and the resulting Node objects, pass strict schemas of Kubernetes 1.24-1.33
    docs = [x["patch"] for x in run["result"]["nodes"] if x["changed"]]
    assert len(docs) == 2 and docs[0]["metadata"]["labels"] == {"gpuops.io/managed": "yes", "zone": "a"}
    docs += [{"apiVersion": "v1", "kind": "Node", "metadata": {k: v for k, v in live(emu, n(x))["metadata"].items()
                                                                 if k in ("name", "labels", "annotations")}}
             for x in ("gpu-a", "gpu-b")]
    rep = validate.validate_documents(docs, source="gpu_node_labels")
    assert rep["ok"], rep["failures"]
    assert not rep["not_validated"]
    assert {r["minor"] for r in rep["results"]} >= {"1.24", "1.33"}


POOLS_WITHOUT_CONFIG = copy.deepcopy(BASE_VARS["gpu_node_labels_pools"])
del POOLS_WITHOUT_CONFIG[0]["device_plugin_config"]


def test_5_pool_change_removes_only_what_left(emu, work):
    pools = POOLS_WITHOUT_CONFIG
    run = play(emu, work, {"gpu_node_labels_pools": pools})
    assert run["failure"] is None
    assert [r["path"] for r in writes(run)] == ["/api/v1/nodes/" + n("gpu-a")]
    a = live(emu, n("gpu-a"))["metadata"]
    assert "nvidia.com/device-plugin.config" not in a["labels"] and a["labels"]["team"] == "ml"
    assert "nvidia.com/device-plugin.config" not in json.loads(a["annotations"][ANN])
    assert [x["removed"] for x in run["result"]["nodes"] if x["node"] == n("gpu-a")] == [
        ["nvidia.com/device-plugin.config"]]


REFUSALS = [  # (extra vars, group, expected message part, reads the cluster before refusing)
    ({"gpu_node_labels_pools": BASE_VARS["gpu_node_labels_pools"] + [
        {"name": "whole", "strategy": "exclusive", "nodes": [n("gpu-b")]}]}, None,
     f"{n('gpu-b')}: conflicting sharing strategies - pool gs says gpushare, pool whole says exclusive", False),
    ({"gpu_node_labels_pools": BASE_VARS["gpu_node_labels_pools"] + [
        {"name": "ts2", "strategy": "time-slicing", "nodes": [n("gpu-a")], "device_plugin_config": "ts-8"}]}, None,
     f"{n('gpu-a')}: pools ts and ts2 set label nvidia.com/device-plugin.config to different values (ts-4, ts-8)",
     False),
    ({"gpu_node_labels_pools": [{"name": "gs", "strategy": "gpushare", "nodes": [n("gpu-c")]}]}, "gpu_conflict",
     f"{n('gpu-c')}: node {n('gpu-c')} advertises nvidia.com/gpu=1, which belongs to another GPU accounting than "
     "gpushare", True),
    ({"gpu_node_labels_pools": [{"name": "ts", "strategy": "time-slicing", "nodes": [n("gpu-d")]}]}, "gpu_conflict",
     f"{n('gpu-d')}: node {n('gpu-d')} already has gpuops.io/sharing-strategy=mps, set by someone else", True),
    ({"gpu_node_labels_pools": [{"name": "m", "strategy": "mig", "nodes": [n("gpu-a")]}]}, None,
     f"{n('gpu-a')}: strategy mig (pool m) is not possible on this node: GPU(s) 0 are not MIG capable", False),
    ({"gpu_node_labels_pools": []}, "no_facts", f"{n('gpu-x')}: no gpu_probe_facts.labels", False),
    ({"gpu_node_labels_extra": {"bad key!": "x"}}, None, "label key bad key! is not a valid Kubernetes label key",
     False),
    ({"gpu_node_labels_extra": {"ok": "not valid!"}}, None, "label ok value not valid! is not a valid", False),
    ({"gpu_node_labels_pools": [{"name": "p", "strategy": "gpushare", "nodes": [n("gpu-c")]}]}, None,
     f"pool p: host {n('gpu-c')} is not in gpu_node_labels_group (gpu_nodes)", False),
    ({"gpu_node_labels_pools": [{"name": "p", "strategy": "sharing-everything", "nodes": [n("gpu-a")]}]}, None,
     "value of strategy must be one of: exclusive, time-slicing, mps, mig, gpushare, volcano, hami, gpu-manager, dra, "
     "got: sharing-everything found in gpu_node_labels_pools", False),
    ({"gpu_node_labels_state": "gone"}, None,
     "value of gpu_node_labels_state must be one of: present, absent, got: gone", False),
    ({}, "nope", "gpu_node_labels_group: inventory group nope does not exist", False),
]


def state(emu):
    """This file's nodes' labels and annotations as stored. The cluster's own controllers write to Nodes as well (the
    TTL controller's annotation, the node lifecycle controller's taints and resourceVersions with them), so not the
    whole object: that this file's client wrote nothing at all is the audit log's to show."""
    out = {}
    for d in SEED:
        meta = live(emu, d["metadata"]["name"])["metadata"]
        out[meta["name"]] = (meta.get("labels"), dict((k, v) for k, v in (meta.get("annotations") or {}).items()
                                                      if k != "node.alpha.kubernetes.io/ttl"))
    return out


def test_6_refusals_change_nothing(emu, work):
    """Every refusal in one ansible-playbook run (one play per case, block/rescue around include_role)."""
    plays = []
    for i, (extra, group, _needle, _reads) in enumerate(REFUSALS):
        vars_ = copy.deepcopy(BASE_VARS)
        vars_.update(extra)
        if group:
            vars_["gpu_node_labels_group"] = group
        plays.append({"name": f"case {i}", "hosts": "localhost", "gather_facts": False, "vars": vars_, "tasks": [
            {"block": [{"ansible.builtin.include_role": {"name": "gpuops.k8s_gpu.gpu_node_labels"}},
                       {"ansible.builtin.set_fact": {"refusal": "NOT REFUSED"}}],
             "rescue": [{"ansible.builtin.set_fact": {"refusal": "{{ ansible_failed_result.msg }}"}}]},
            {"name": "Refusal", "ansible.builtin.debug": {"var": "refusal"}}]})
    (work["dir"] / "refusals.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=work["collections"], K8S_AUTH_KUBECONFIG=emu["kubeconfig"],
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    state_before = state(emu)
    start = emu["kube"].mark()
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(work["dir"] / "inventory.yml"),
                           str(work["dir"] / "refusals.yml")], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=PLAY_TIMEOUT)
    end = emu["kube"].mark()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    got = []
    for p in doc["plays"]:
        task = [t for t in p["tasks"] if t["task"]["name"] == "Refusal"][0]
        got.append(task["hosts"]["localhost"]["refusal"])
    assert len(got) == len(REFUSALS)
    for (extra, group, needle, _reads), msg in zip(REFUSALS, got):
        assert needle in msg, (needle, msg)
        assert "nothing was changed" in msg or "Validation of arguments failed" in msg, msg
    reqs = requests(emu, start, end)
    assert [r for r in reqs if r["write"] or r["dry_run"]] == []
    # input errors fail before the cluster is read: only the cases that need the live nodes list them
    assert len([r for r in reqs if r["verb"] == "list"]) == len([c for c in REFUSALS if c[3]])
    assert state(emu) == state_before


def test_7_missing_node(emu, work):
    inv = copy.deepcopy(INVENTORY)
    inv["all"]["children"]["gpu_nodes"]["hosts"][n("gpu-z")] = {"gpu_probe_facts": facts("Tesla-T4", 15360, 1)}
    (work["dir"] / "inventory.yml").write_text(yaml.safe_dump(inv))
    try:
        run = play(emu, work, {"gpu_node_labels_pools": POOLS_WITHOUT_CONFIG})
        assert run["failure"] and f"{n('gpu-z')}: node {n('gpu-z')} is not in the cluster" in run["failure"]
        assert writes(run) == []
        run = play(emu, work, {"gpu_node_labels_pools": POOLS_WITHOUT_CONFIG,
                               "gpu_node_labels_fail_on_missing_nodes": False})
        assert run["failure"] is None and run["result"]["missing"] == [n("gpu-z")] and writes(run) == []
    finally:
        (work["dir"] / "inventory.yml").write_text(yaml.safe_dump(INVENTORY))


def test_8_absent_removes_only_ours(emu, work):
    # someone else (the admin, another client) changes one of our labels after we set it: absent leaves that one alone
    emu["core"].patch_node(n("gpu-b"), {"metadata": {"labels": {"pool": "theirs-now", "other-team": "x"}}})
    run = play(emu, work, {"gpu_node_labels_state": "absent"})
    assert run["failure"] is None
    # gpu-b is a gpushare node: the count gpushare's device plugin put into its status goes too (a status patch;
    # issue #37 item 6), the kubelet's own gpu-mem stays
    assert sorted(r["path"] for r in writes(run)) == ["/api/v1/nodes/" + n("gpu-a"), "/api/v1/nodes/" + n("gpu-b"),
                                                      "/api/v1/nodes/%s/status" % n("gpu-b")]
    status = live(emu, n("gpu-b"))["status"]
    for field in ("capacity", "allocatable"):
        assert "aliyun.com/gpu-count" not in status[field] and status[field]["aliyun.com/gpu-mem"] == "30", status
    a = live(emu, n("gpu-a"))["metadata"]
    assert a["labels"] == {"kubernetes.io/hostname": n("gpu-a"), "team": "ml", "nvidia.com/gpu.product": "Old-Product"}
    assert ANN not in (a.get("annotations") or {})
    b = live(emu, n("gpu-b"))["metadata"]
    assert b["labels"] == {"kubernetes.io/hostname": n("gpu-b"), "team": "research", "pool": "theirs-now",
                           "other-team": "x"}
    assert ANN not in (b.get("annotations") or {})
    nodes = {x["node"]: x for x in run["result"]["nodes"]}
    assert nodes[n("gpu-a")]["restored"] == ["nvidia.com/gpu.product"]
    assert nodes[n("gpu-b")]["kept"] == ["pool"]
    # absent again: nothing to do, no write
    run = play(emu, work, {"gpu_node_labels_state": "absent"})
    assert run["failure"] is None and writes(run) == [] and run["result"]["changed"] is False
    # untouched nodes were never written
    assert live(emu, n("gpu-d"))["metadata"]["labels"][STRATEGY] == "mps"


def test_9_kubernetes_core_patch_without_the_gate_always_writes(emu, work):
    """Why the role compares first: kubernetes.core.k8s state=patched sends a PATCH even when nothing changes (the
    real server answers it without changing the Node: its resourceVersion stays)."""
    pb = [{"name": "Naive", "hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "Patch an unchanged label", "kubernetes.core.k8s": {
            "state": "patched", "merge_type": "merge",
            "definition": {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": n("gpu-d"), "labels": {STRATEGY: "mps"}}}}}]}]
    (work["dir"] / "naive.yml").write_text(yaml.safe_dump(pb))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=work["collections"], K8S_AUTH_KUBECONFIG=emu["kubeconfig"])
    node_uri = "/api/v1/nodes/%s" % n("gpu-d")
    for _attempt in range(3):
        rv = live(emu, n("gpu-d"))["metadata"]["resourceVersion"]
        start = emu["kube"].mark()
        proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(work["dir"] / "inventory.yml"),
                               str(work["dir"] / "naive.yml")], env=env, capture_output=True, text=True, timeout=120)
        end = emu["kube"].mark()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        w = [r for r in requests(emu, start, end) if r["write"]]
        assert len(w) == 1 and w[0]["verb"] == "patch" and "changed=0" in proc.stdout
        if live(emu, n("gpu-d"))["metadata"]["resourceVersion"] == rv:   # not mutated
            break
        # the Node's own controllers and kwok may write it meanwhile (its status, the not-ready taint): then the
        # resourceVersion says nothing about the PATCH, and the run is repeated; if nobody else wrote, the PATCH did
        others = [e for e in emu["kube"].events(start, end)
                  if e.get("verb") in ("update", "patch") and e.get("requestURI", "").split("?")[0].startswith(node_uri)
                  and (e.get("user") or {}).get("username") != USER]
        assert others, "the PATCH of an unchanged label changed the Node (resourceVersion %s -> %s)" % (
            rv, live(emu, n("gpu-d"))["metadata"]["resourceVersion"])
    else:
        raise AssertionError("the Node was written by others during each of 3 runs: the PATCH's effect is unknown")
