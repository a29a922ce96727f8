"""gpuops.k8s_gpu.gpu_share_report on pods the real kube-scheduler placed (lab/kube/real.py, the shared `kube_real`
cluster).

Nodes of every sharing strategy (kwok nodes: Ready, their pods become Running as on a kubelet) and pods in every
state; the module runs through `ansible localhost` (real AnsibleModule, real kubernetes client) and the numbers are
checked exactly. How the pods got where they are:
  * the real kube-scheduler binds every pod the default scheduler can fit (gpushare's aliyun.com/gpu-mem,
    time-slicing's nvidia.com/gpu replicas, MIG resources, Volcano's volcano.sh/gpu-memory, whole GPUs), each
    steered by a nodeSelector on the node's hostname label;
  * HAMi's pods ask for nvidia.com/gpumem and nvidia.com/gpucores, which no node advertises (HAMi's own scheduler
    accounts for them from the node's register annotation): they name schedulerName hami-scheduler and are bound
    through pods/binding as hami-scheduler binds them;
  * kwok makes bound pods Running; the pods in other phases (Pending on a node while gpushare's device plugin has
    not allocated, Succeeded, Failed) get that phase through the status subresource, as a kubelet reports it;
  * one pod no node can take stays unscheduled (the scheduler leaves it Pending).
The nodes carry a NoSchedule taint of this file (its pods tolerate it), so no other test's pod lands on them, and the
label gpuops.io/share-report=<pid>, by which the report is restricted to them (node_selector). Unscheduled pods are
listed from the whole cluster by design (restricting nodes cannot say where a pod without a node belongs): the
assertions on them count this file's namespaces only, other tests on the shared cluster may have their own.
Reads and writes are counted from the audit log (this file's user is in group gpuops:audit-reads).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_share_report.py
Nothing here skips: a missing tool or a control plane that does not start is a failure.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from conftest import WRITE_VERBS, run_module, wait_until

ROOT = Path(__file__).resolve().parents[3]
S = "%d" % os.getpid()
USER = "gpuops-test-share-report-%s" % S
MINE = "gpuops.io/share-report"
ML, TEAM_B = "ml-%s" % S, "team-b-%s" % S
TAINT = {"key": MINE, "value": S, "effect": "NoSchedule"}

MIG_MIXED = json.loads((ROOT / "lab" / "node" / "recordings" / "gpu-nodes.json").read_text())["shapes"][
    "h100x2-mig-mixed"]
assert MIG_MIXED["capacity"] == {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "1"}, MIG_MIXED["capacity"]
# time-slicing: the recorded shape a100x2-time-slicing (two A100s under the collection's time-slicing pool with 3
# replicas, as a real lab node published it: GFD's labels, nvidia.com/gpu 6)
TIME_SLICED = json.loads((ROOT / "lab" / "node" / "recordings" / "gpu-nodes.json").read_text())["shapes"][
    "a100x2-time-slicing"]
assert (TIME_SLICED["capacity"], TIME_SLICED["replicas"], TIME_SLICED["gpus"]) == ({"nvidia.com/gpu": "6"}, 3, 2), (
    TIME_SLICED["capacity"])
HAMI_REGISTER = ("GPU-aaaa-0,10,15360,100,NVIDIA-Tesla T4,0,true,0,hami-core:"
                 "GPU-aaaa-1,10,15360,100,NVIDIA-Tesla T4,0,true,1,hami-core:")


def n(short):
    """The cluster name of this file's node ``short`` (gs-1, ts-1, ...): with the pid."""
    return "%s-%s" % (short, S)


def node(name, ip, capacity, labels=None, annotations=None):
    name = n(name)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name, MINE: S}, **(labels or {})),
                         "annotations": dict({"kwok.x-k8s.io/node": "fake"}, **(annotations or {}))},
            "spec": {"taints": [TAINT]},
            "status": {"capacity": dict({"cpu": "32", "memory": "256Gi", "pods": "110"}, **capacity),
                       "allocatable": dict({"cpu": "31", "memory": "250Gi", "pods": "110"}, **capacity),
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def pod(name, node_name, requests, phase="Running", annotations=None, namespace=ML, init=None, scheduler=None):
    """A pod for node ``node_name`` (short name; None: no node can take it). ``phase`` is what it ends in."""
    spec = {"containers": [{"name": "main", "image": "registry.example.com/mirror/cuda:12.4.1-base",
                            "resources": {"limits": requests}}],
            "tolerations": [dict(TAINT, operator="Equal")], "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": n(node_name) if node_name else "no-such-node-" + S}}
    if scheduler:
        spec["schedulerName"] = scheduler
    if init:
        spec["initContainers"] = [{"name": "init", "image": "registry.example.com/mirror/busybox:1.36",
                                   "resources": {"limits": init}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": spec, "_phase": phase, "_node": n(node_name) if node_name else None}


def gs_ann(idx, mem, assigned="true"):
    a = {"ALIYUN_COM_GPU_MEM_POD": str(mem), "ALIYUN_COM_GPU_MEM_DEV": "15", "ALIYUN_COM_GPU_MEM_ASSIGNED": assigned,
         "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1763860000000000000"}
    if idx is not None:
        a["ALIYUN_COM_GPU_MEM_IDX"] = str(idx)
    return a


NODES = [
    # gpushare: 2 x T4 (15 GiB each)
    node("gs-1", "10.0.0.11", {"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"}, {"gpushare": "true"}),
    node("gs-2", "10.0.0.12", {"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"}, {"gpushare": "true"}),
    # time-slicing: 2 GPUs x 3 replicas, the recorded shape a100x2-time-slicing (every GFD label of it), not painted
    node("ts-1", "10.0.0.21", TIME_SLICED["capacity"], TIME_SLICED["labels"]),
    # MIG mixed: the recorded shape h100x2-mig-mixed (what a real lab node published with NVIDIA's plugin under the
    # collection's mixed strategy: 2x 1g.10gb and a 3g.40gb; every GFD label of it), not painted
    node("mig-1", "10.0.0.31", MIG_MIXED["capacity"], MIG_MIXED["labels"]),
    # HAMi: 2 GPUs, 10 vGPUs each
    node("hami-1", "10.0.0.41", {"nvidia.com/gpu": "20"}, annotations={"hami.io/node-nvidia-register": HAMI_REGISTER}),
    # Volcano gpu-share: 2 GPUs, 32768 MiB total
    node("vc-1", "10.0.0.51", {"volcano.sh/gpu-memory": "32768", "volcano.sh/gpu-number": "2"}),
    # conflicting accounting: gpushare and whole GPUs on one node
    node("bad-1", "10.0.0.61", {"aliyun.com/gpu-mem": "16", "aliyun.com/gpu-count": "1", "nvidia.com/gpu": "1"}),
    # no GPU
    node("cpu-1", "10.0.0.71", {}),
]
HAMI = "hami-scheduler"
PODS = [
    # gpushare pods
    pod("gs-a", "gs-1", {"aliyun.com/gpu-mem": "6"}, annotations=gs_ann(0, 6)),
    pod("gs-b", "gs-1", {"aliyun.com/gpu-mem": "3"}, phase="Pending", annotations=gs_ann(1, 3, "false")),
    pod("gs-c", "gs-1", {"aliyun.com/gpu-mem": "2"}, phase="Pending", annotations=gs_ann(None, 2, "false")),
    pod("gs-done", "gs-1", {"aliyun.com/gpu-mem": "8"}, phase="Succeeded", annotations=gs_ann(0, 8)),
    pod("gs-failed", "gs-2", {"aliyun.com/gpu-mem": "8"}, phase="Failed", annotations=gs_ann(1, 8)),
    pod("gs-d", "gs-2", {"aliyun.com/gpu-mem": "4"}, annotations=gs_ann(1, 4), namespace=TEAM_B),
    # time-slicing pods: 3 replicas (one via an init container bigger than the app container)
    pod("ts-a", "ts-1", {"nvidia.com/gpu": "1"}),
    pod("ts-b", "ts-1", {"nvidia.com/gpu": "1"}, init={"nvidia.com/gpu": "2"}),
    pod("ts-done", "ts-1", {"nvidia.com/gpu": "3"}, phase="Succeeded"),
    # MIG pods
    pod("mig-a", "mig-1", {"nvidia.com/mig-1g.10gb": "2"}),
    pod("mig-b", "mig-1", {"nvidia.com/mig-3g.40gb": "1"}),
    # HAMi pods (bound as hami-scheduler binds them)
    pod("hami-a", "hami-1", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
        annotations={"hami.io/vgpu-devices-allocated": "GPU-aaaa-0,NVIDIA,3000,30:;", "hami.io/vgpu-node": n("hami-1")},
        scheduler=HAMI),
    pod("hami-b", "hami-1", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000"},
        annotations={"hami.io/vgpu-devices-allocated": "GPU-aaaa-0,NVIDIA,2000,0:GPU-aaaa-1,NVIDIA,2000,0:;"},
        scheduler=HAMI),
    pod("hami-odd", "hami-1", {"nvidia.com/gpu": "1"},
        annotations={"hami.io/vgpu-devices-allocated": "something-new"}, scheduler=HAMI),
    # Volcano
    pod("vc-a", "vc-1", {"volcano.sh/gpu-memory": "4096"}, annotations={"volcano.sh/gpu-index": "1"}),
    # conflict node pods
    pod("bad-a", "bad-1", {"aliyun.com/gpu-mem": "8"}, annotations=gs_ann(0, 8)),
    pod("bad-b", "bad-1", {"nvidia.com/gpu": "1"}),
    # unscheduled
    pod("wait-a", None, {"nvidia.com/gpu": "1"}, phase="Pending"),
    # not a GPU pod
    pod("web", "cpu-1", {"cpu": "1"}),
]


def _placed(core):
    """{(namespace, name): (node, phase, Ready)} of this file's pods."""
    out = {}
    for ns in (ML, TEAM_B):
        for p in core.list_namespaced_pod(ns).items:
            ready = [c.status for c in (p.status.conditions or []) if c.type == "Ready"]
            out[(ns, p.metadata.name)] = (p.spec.node_name, p.status.phase, ready == ["True"])
    return out


@pytest.fixture(scope="module")
def emu(kube_real):
    """This file's nodes and pods on the shared real cluster, placed by the real scheduler (HAMi's bound as HAMi's
    scheduler would); yields the cluster and this file's kubeconfig (a user whose reads the audit log records)."""
    from kubernetes import client
    api = kube_real.api()
    core = client.CoreV1Api(api)
    for d in NODES:
        core.create_node(d)
    for ns in (ML, TEAM_B):
        core.create_namespace({"metadata": {"name": ns}})
    for ns in (ML, TEAM_B):
        wait_until("ServiceAccount default in %s" % ns, lambda: [
            s for s in core.list_namespaced_service_account(ns).items if s.metadata.name == "default"])
    wait_until("kwok made this file's nodes Ready", lambda: all(
        [c.status for c in (core.read_node(d["metadata"]["name"]).status.conditions or []) if c.type == "Ready"]
        == ["True"] for d in NODES))
    try:
        for p in PODS:
            core.create_namespaced_pod(p["metadata"]["namespace"],
                                       dict((k, v) for k, v in p.items() if not k.startswith("_")))
        for p in PODS:
            if p["spec"].get("schedulerName") == HAMI:
                core.create_namespaced_binding(p["metadata"]["namespace"], {
                    "metadata": {"name": p["metadata"]["name"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": p["_node"]}}, _preload_content=False)
        want = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["_node"] for p in PODS}
        wait_until("every pod bound to its node and Running (wait-a unscheduled)", lambda: (lambda got: all(
            (got.get(k) or (None,))[0] == node_ and (node_ is None or got[k][1:] == ("Running", True))
            for k, node_ in want.items()))(_placed(core)), 90)
        for p in PODS:
            if p["_node"] and p["_phase"] != "Running":
                core.patch_namespaced_pod_status(p["metadata"]["name"], p["metadata"]["namespace"],
                                                 {"status": {"phase": p["_phase"]}})
        phases = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["_phase"] for p in PODS}
        wait_until("every pod in its phase", lambda: (lambda got: all(got[k][1] == v for k, v in phases.items()))(
            _placed(core)), 30)
        kc = kube_real.user(USER, reads=True)
        yield {"kube": kube_real, "kubeconfig": kc, "core": core, "placed": _placed(core)}
    finally:
        for ns in (ML, TEAM_B):
            core.delete_namespace(ns)
        for d in NODES:
            core.delete_node(d["metadata"]["name"])


def req(verb, uri, code):
    parts = urlsplit(uri)
    query = dict((k, unquote(v)) for k, v in (kv.split("=", 1) for kv in parts.query.split("&") if "=" in kv))
    return {"verb": verb, "path": parts.path, "query": query, "status": code,
            "resource": parts.path.rstrip("/").rsplit("/", 1)[-1],
            "write": verb in WRITE_VERBS and query.get("dryRun") != "All"}


def requests(emu, start, end):
    return [req(*r) for r in emu["kube"].requests(start, end, user=USER)]


SELECT = "node_selector=%s=%s" % (MINE, S)
# the report file must be the same on the second run: this file's namespace only, so that other tests' pods without a
# node (listed from the whole cluster) cannot change it between two runs
FILE_ARGS = "%s namespace=%s" % (SELECT, ML)


def report(collections_path, emu, args="", check=False, diff=False):
    env = {"K8S_AUTH_KUBECONFIG": emu["kubeconfig"]}
    if diff:
        env["ANSIBLE_DIFF_ALWAYS"] = "1"
    return run_module(collections_path, "gpuops.k8s_gpu.gpu_share_report", args, env=env, check=check)


@pytest.fixture(scope="module")
def full(collections_path, emu):
    start = emu["kube"].mark()
    res = report(collections_path, emu, SELECT)
    end = emu["kube"].mark()
    assert not res.get("failed"), res
    res["_requests"] = requests(emu, start, end)
    return res


def test_pods_placed_by_the_real_scheduler(emu):
    """What the report reads was placed by upstream's scheduler (and kwok, and hami's binding): every pod on its
    node, wait-a on none."""
    placed = emu["placed"]
    assert placed[(ML, "wait-a")][0] is None and placed[(ML, "wait-a")][1] == "Pending"
    assert placed[(ML, "gs-a")] == (n("gs-1"), "Running", True)
    assert placed[(ML, "ts-done")][:2] == (n("ts-1"), "Succeeded")
    assert placed[(ML, "hami-b")][:2] == (n("hami-1"), "Running")


def mine_unscheduled(res):
    return [p for p in res["unscheduled"] if p["namespace"] in (ML, TEAM_B)]


def by_name(res):
    """{short node name: report entry} (the pid suffix taken off)."""
    return {x["name"][:-len(S) - 1]: x for x in res["nodes"]}


def test_read_only_two_list_calls(full):
    """Two lists (nodes, pods), one discovery GET of /apis/resource.k8s.io (DRA) and, the group being served by the real
    API server, one list each of ResourceClaims and ResourceSlices: a fixed number of requests, whatever the fleet."""
    reqs = full["_requests"]
    assert [(r["verb"], r["resource"], r["status"]) for r in reqs] == [
        ("list", "nodes", 200), ("list", "pods", 200), ("get", "resource.k8s.io", 200),
        ("list", "resourceclaims", 200), ("list", "resourceslices", 200)], reqs
    assert full["dra"]["served"] is True
    assert not [r for r in reqs if r["write"]]
    pods_req = [r for r in reqs if r["resource"] == "pods"][0]
    assert pods_req["query"]["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert full["changed"] is False


def test_gpushare_per_gpu_and_pending(full):
    n = by_name(full)["gs-1"]
    assert n["strategies"] == ["gpushare"]
    gpus = {g["index"]: g for g in n["gpus"]}
    assert gpus[0]["memory_total"] == 15 and gpus[0]["memory_allocated"] == 6
    assert [h["pod"] for h in gpus[0]["holders"]] == ["gs-a"]          # gs-done (Succeeded) does not count
    assert gpus[1]["memory_allocated"] == 3 and gpus[1]["holders"][0]["assigned"] is False
    assert n["gpushare"] == {"memory_total": 30, "memory_allocated": 11, "memory_pending": 2, "memory_percent": 36,
                             "memory_unit": "GiB"}
    assert n["resources"]["aliyun.com/gpu-mem"] == {"allocatable": 30, "allocated": 11, "free": 19, "percent": 36,
                                                    "unit": "GiB"}
    pods = {p["name"]: p for p in n["pods"]}
    assert pods["gs-c"]["gpus"] == [{"index": None, "resource": "aliyun.com/gpu-mem", "memory": 2,
                                     "memory_unit": "GiB", "pending": True}]
    assert pods["gs-a"]["gpushare"]["device_memory"] == "15"
    n2 = by_name(full)["gs-2"]
    assert n2["gpushare"]["memory_allocated"] == 4                        # gs-failed does not count
    assert full["cluster"]["gpushare"] == {"memory_total": 76, "memory_allocated": 23, "memory_percent": 30,
                                           "memory_unit": "GiB"}


def test_time_slicing_mig_volcano_totals(full):
    nodes = by_name(full)
    ts = nodes["ts-1"]
    assert ts["strategies"] == ["time-slicing"]
    assert ts["replicas"] == 3 and ts["physical_gpus"] == 2 and ts["replicas_source"] == "gfd"
    assert ts["resources"]["nvidia.com/gpu"] == {"allocatable": 6, "allocated": 3, "free": 3, "percent": 50,
                                                 "unit": "GPU"}
    mig = nodes["mig-1"]
    assert mig["strategies"] == ["mig"]
    assert mig["resources"]["nvidia.com/mig-1g.10gb"] == {"allocatable": 2, "allocated": 2, "free": 0, "percent": 100,
                                                          "unit": "MIG device"}
    assert mig["resources"]["nvidia.com/mig-3g.40gb"]["allocated"] == 1
    vc = nodes["vc-1"]
    assert vc["strategies"] == ["volcano"]
    g = {x["index"]: x for x in vc["gpus"]}
    assert g[1]["memory_allocated"] == 4096 and g[1]["memory_total"] == 16384 and g[0]["holders"] == []


def test_hami_per_gpu_and_unknown_annotation(full):
    h = by_name(full)["hami-1"]
    assert h["strategies"] == ["hami"]
    g = {x["uuid"]: x for x in h["gpus"]}
    assert g["GPU-aaaa-0"]["memory_allocated"] == 5000 and g["GPU-aaaa-0"]["memory_total"] == 15360
    assert g["GPU-aaaa-0"]["cores_allocated"] == 30 and g["GPU-aaaa-0"]["split"] == 10
    assert g["GPU-aaaa-1"]["memory_allocated"] == 2000
    assert sorted(x["pod"] for x in g["GPU-aaaa-0"]["holders"]) == ["hami-a", "hami-b"]
    assert h["resources"]["nvidia.com/gpu"]["allocated"] == 4
    # gpumem is per vGPU: hami-b holds 2 x 2000 MiB; the total comes from the node's HAMi register annotation
    assert h["resources"]["nvidia.com/gpumem"] == {"allocatable": 30720, "allocated": 7000, "free": 23720,
                                                   "percent": 22, "unit": "MiB",
                                                   "source": "hami.io/node-nvidia-register"}
    assert h["resources"]["nvidia.com/gpucores"]["allocatable"] == 200
    assert any("hami-odd" in x and "not understood" in x for x in h["notes"]), h["notes"]


def test_conflicts_cluster_and_unscheduled(full):
    bad = by_name(full)["bad-1"]
    assert bad["strategies"] == ["exclusive", "gpushare"]
    assert len(bad["conflicts"]) == 1 and "gpu-mem accounting" in bad["conflicts"][0]
    assert full["conflicts"] == [n("bad-1") + " - " + bad["conflicts"][0]]
    assert [p["name"] for p in mine_unscheduled(full)] == ["wait-a"]
    cl = full["cluster"]
    # other tests' pods without a node count too (the module lists them from the whole cluster): see the docstring
    assert cl["nodes"] == 8 and cl["gpu_nodes"] == 7 and cl["unscheduled_pods"] == len(full["unscheduled"]) >= 1
    # nvidia.com/gpu: ts-1 6 + hami-1 20 + bad-1 1 = 27 allocatable; 3 + 4 + 1 allocated (wait-a has no node)
    assert cl["resources"]["nvidia.com/gpu"] == {"allocatable": 27, "allocated": 8, "free": 19, "percent": 29,
                                                 "unit": "GPU"}
    assert by_name(full)["cpu-1"]["resources"] == {}
    assert "web" not in [p["name"] for p in full["pods"]]


def test_table_like_kubectl_inspect_gpushare(full):
    lines = full["table"].splitlines()
    head = lines[0].split()
    assert head == ["NAME", "IPADDRESS", "GPU0(Allocated/Total)", "GPU1(Allocated/Total)", "PENDING(Allocated)",
                    "GPU", "Memory(GiB)"]
    assert lines[1].split() == [n("bad-1"), "10.0.0.61", "8/16", "8/16"]
    assert lines[2].split() == [n("gs-1"), "10.0.0.11", "6/15", "3/15", "2", "11/30"]
    assert lines[3].split() == [n("gs-2"), "10.0.0.12", "0/15", "4/15", "4/30"]
    i = lines.index("Allocated/Total GPU Memory In Cluster:")
    assert lines[i + 1] == "23/76 (30%)"
    rows = [ln.split() for ln in lines]
    # the REPLICAS/GPU column (a node has replicas): GFD's nvidia.com/gpu.replicas on ts-1, as it is (issue #36)
    assert ["NAME", "IPADDRESS", "STRATEGY", "RESOURCE", "ALLOCATED/ALLOCATABLE", "PERCENT", "REPLICAS/GPU"] in rows
    assert [n("ts-1"), "10.0.0.21", "time-slicing", "nvidia.com/gpu", "3/6", "50%", "3"] in rows
    assert [n("mig-1"), "10.0.0.31", "mig", "nvidia.com/mig-3g.40gb", "1/1", "100%", "-"] in rows
    assert ["nvidia.com/gpu", "8/27", "(29%)"] in rows
    assert any(ln.startswith("CONFLICT %s:" % n("bad-1")) for ln in lines)
    waiting = [ln for ln in lines if ln.startswith("Pods requesting GPU resources without a node: ")]
    assert len(waiting) == 1 and "%s/wait-a" % ML in waiting[0].split(": ", 1)[1].split(", "), waiting


def test_node_filter(collections_path, emu):
    res = report(collections_path, emu, "node_selector=gpushare=true,%s=%s" % (MINE, S))
    assert [x["name"] for x in res["nodes"]] == [n("gs-1"), n("gs-2")]
    assert res["cluster"]["gpushare"]["memory_total"] == 60
    assert "bad-a" not in [p["name"] for p in res["pods"]]
    res = report(collections_path, emu, "nodes=%s,nope" % n("ts-1"))
    assert res["failed"] and "nope not found" in res["msg"]


def test_report_file_markdown_html_check_and_diff(collections_path, emu, tmp_path):
    path = tmp_path / "report.md"
    start = emu["kube"].mark()
    res = report(collections_path, emu, f"{FILE_ARGS} report_path={path}", check=True)
    assert res["changed"] is True and not path.exists()
    res = report(collections_path, emu, f"{FILE_ARGS} report_path={path}", diff=True)
    assert res["changed"] is True and path.exists()
    assert res["diff"]["before"] == "" and res["diff"]["after"] == path.read_text()
    text = path.read_text()
    assert text.startswith("# GPU share report\n")
    assert "| nvidia.com/gpu | 8 | 27 | 19 | 29% |" in text
    assert f"{ML}/gs-a (mem 6)" in text and "CONFLICT:" in text
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    res = report(collections_path, emu, f"{FILE_ARGS} report_path={path}")
    assert res["changed"] is False
    res = report(collections_path, emu, f"{FILE_ARGS} report_path={path}", check=True)
    assert res["changed"] is False
    reqs = requests(emu, start, emu["kube"].mark())
    assert reqs and not [r for r in reqs if r["write"]]
    # html, then back up the original when it changes
    res = report(collections_path, emu, f"{FILE_ARGS} report_path={path} report_format=html backup=true")
    assert res["changed"] is True and Path(res["backup_file"]).read_text() == text
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and f"<td>{ML}/gs-a (mem 6)</td>" in html
    res = report(collections_path, emu, f"{FILE_ARGS} report_path={path} report_format=html")
    assert res["changed"] is False


def test_bad_input_fails_before_contacting_the_cluster(collections_path, emu, tmp_path):
    start = emu["kube"].mark()
    res = report(collections_path, emu, "report_format=pdf")
    assert res["failed"] and "report_format" in res["msg"] and "markdown, html" in res["msg"]
    res = report(collections_path, emu, f"report_path={tmp_path}/missing/r.md")
    assert res["failed"] and "does not exist" in res["msg"]
    res = report(collections_path, emu, "report_mode=rw-r--r--")
    assert res["failed"] and "report_mode" in res["msg"]
    assert requests(emu, start, emu["kube"].mark()) == []
