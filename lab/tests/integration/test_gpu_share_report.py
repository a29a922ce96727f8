"""gpuops.k8s_gpu.gpu_share_report against the lab Kubernetes API emulator (lab/kube).

One emulator for the module, seeded with nodes of every sharing strategy and pods in every state; the module runs
through `ansible localhost` (real AnsibleModule, real kubernetes client) and the numbers are checked exactly.

Run: /work/main/.venv/bin/pytest lab/tests/integration/test_gpu_share_report.py
Nothing here skips: a missing tool or a dead emulator is a failure.
"""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from conftest import kube_emulator, run_module

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "lab" / "kube"

HAMI_REGISTER = ("GPU-aaaa-0,10,15360,100,NVIDIA-Tesla T4,0,true,0,hami-core:"
                 "GPU-aaaa-1,10,15360,100,NVIDIA-Tesla T4,0,true,1,hami-core:")


def node(name, ip, capacity, labels=None, annotations=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **(labels or {})),
                         "annotations": annotations or {}},
            "status": {"capacity": dict({"cpu": "32", "memory": "256Gi"}, **capacity),
                       "allocatable": dict({"cpu": "31", "memory": "250Gi"}, **capacity),
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def pod(name, node_name, requests, phase="Running", annotations=None, namespace="ml", init=None):
    spec = {"containers": [{"name": "main", "image": "registry.example.com/mirror/cuda:12.4.1-base",
                            "resources": {"limits": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    if init:
        spec["initContainers"] = [{"name": "init", "image": "registry.example.com/mirror/busybox:1.36",
                                   "resources": {"limits": init}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": spec, "status": {"phase": phase}}


def gs_ann(idx, mem, assigned="true"):
    a = {"ALIYUN_COM_GPU_MEM_POD": str(mem), "ALIYUN_COM_GPU_MEM_DEV": "15", "ALIYUN_COM_GPU_MEM_ASSIGNED": assigned,
         "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1763860000000000000"}
    if idx is not None:
        a["ALIYUN_COM_GPU_MEM_IDX"] = str(idx)
    return a


SEED = [
    # gpushare: 2 x T4 (15 GiB each)
    node("gs-1", "10.0.0.11", {"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"}, {"gpushare": "true"}),
    node("gs-2", "10.0.0.12", {"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"}, {"gpushare": "true"}),
    # time-slicing: 2 GPUs x 4 replicas
    node("ts-1", "10.0.0.21", {"nvidia.com/gpu": "8"},
         {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
          "nvidia.com/gpu.count": "2"}),
    # MIG mixed
    node("mig-1", "10.0.0.31", {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
         {"nvidia.com/mig.strategy": "mixed"}),
    # HAMi: 2 GPUs, 10 vGPUs each
    node("hami-1", "10.0.0.41", {"nvidia.com/gpu": "20"}, annotations={"hami.io/node-nvidia-register": HAMI_REGISTER}),
    # Volcano gpu-share: 2 GPUs, 32768 MiB total
    node("vc-1", "10.0.0.51", {"volcano.sh/gpu-memory": "32768", "volcano.sh/gpu-number": "2"}),
    # conflicting accounting: gpushare and whole GPUs on one node
    node("bad-1", "10.0.0.61", {"aliyun.com/gpu-mem": "16", "aliyun.com/gpu-count": "1", "nvidia.com/gpu": "1"}),
    # no GPU
    node("cpu-1", "10.0.0.71", {}),
    # gpushare pods
    pod("gs-a", "gs-1", {"aliyun.com/gpu-mem": "6"}, annotations=gs_ann(0, 6)),
    pod("gs-b", "gs-1", {"aliyun.com/gpu-mem": "3"}, phase="Pending", annotations=gs_ann(1, 3, "false")),
    pod("gs-c", "gs-1", {"aliyun.com/gpu-mem": "2"}, phase="Pending", annotations=gs_ann(None, 2, "false")),
    pod("gs-done", "gs-1", {"aliyun.com/gpu-mem": "8"}, phase="Succeeded", annotations=gs_ann(0, 8)),
    pod("gs-failed", "gs-2", {"aliyun.com/gpu-mem": "8"}, phase="Failed", annotations=gs_ann(1, 8)),
    pod("gs-d", "gs-2", {"aliyun.com/gpu-mem": "4"}, annotations=gs_ann(1, 4), namespace="team-b"),
    # time-slicing pods: 3 replicas (one via an init container bigger than the app container)
    pod("ts-a", "ts-1", {"nvidia.com/gpu": "1"}),
    pod("ts-b", "ts-1", {"nvidia.com/gpu": "1"}, init={"nvidia.com/gpu": "2"}),
    pod("ts-done", "ts-1", {"nvidia.com/gpu": "4"}, phase="Succeeded"),
    # MIG pods
    pod("mig-a", "mig-1", {"nvidia.com/mig-1g.10gb": "2"}),
    pod("mig-b", "mig-1", {"nvidia.com/mig-3g.40gb": "1"}),
    # HAMi pods
    pod("hami-a", "hami-1", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
        annotations={"hami.io/vgpu-devices-allocated": "GPU-aaaa-0,NVIDIA,3000,30:;", "hami.io/vgpu-node": "hami-1"}),
    pod("hami-b", "hami-1", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000"},
        annotations={"hami.io/vgpu-devices-allocated": "GPU-aaaa-0,NVIDIA,2000,0:GPU-aaaa-1,NVIDIA,2000,0:;"}),
    pod("hami-odd", "hami-1", {"nvidia.com/gpu": "1"},
        annotations={"hami.io/vgpu-devices-allocated": "something-new"}),
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


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    with kube_emulator(tmp_path_factory.mktemp("seed"), "share-report", SEED) as info:
        yield info


def requests_since(emu, seq):
    with urllib.request.urlopen(f"{emu['url']}/_emulator/requests?since={seq}", timeout=10) as r:
        return json.loads(r.read())


def seq_now(emu):
    return requests_since(emu, 999999999)["seq"]


def report(collections_path, emu, args="", check=False, diff=False):
    env = {"K8S_AUTH_KUBECONFIG": emu["kubeconfig"]}
    if diff:
        env["ANSIBLE_DIFF_ALWAYS"] = "1"
    return run_module(collections_path, "gpuops.k8s_gpu.gpu_share_report", args, env=env, check=check)


@pytest.fixture(scope="module")
def full(collections_path, emu):
    seq = seq_now(emu)
    res = report(collections_path, emu)
    assert not res.get("failed"), res
    reqs = requests_since(emu, seq)["items"]
    res["_requests"] = reqs
    return res


def by_name(res):
    return {n["name"]: n for n in res["nodes"]}


def test_read_only_two_list_calls(full):
    """Two lists (nodes, pods) and one discovery GET of /apis/resource.k8s.io (DRA): the emulator does not serve the
    group (404), so no ResourceClaim or ResourceSlice list follows."""
    reqs = full["_requests"]
    assert [r["verb"] for r in reqs] == ["list", "list", "get"], reqs
    assert reqs[2]["path"] == "/apis/resource.k8s.io" and full["dra"] == {"served": False, "claims": [], "nodes": {},
                                                                          "notes": []}
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
    assert ts["replicas"] == 4 and ts["physical_gpus"] == 2
    assert ts["resources"]["nvidia.com/gpu"] == {"allocatable": 8, "allocated": 3, "free": 5, "percent": 37,
                                                 "unit": "GPU"}
    mig = nodes["mig-1"]
    assert mig["strategies"] == ["mig"]
    assert mig["resources"]["nvidia.com/mig-1g.10gb"]["allocated"] == 2
    assert mig["resources"]["nvidia.com/mig-3g.40gb"]["percent"] == 50
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
    assert full["conflicts"] == ["bad-1 - " + bad["conflicts"][0]]
    assert [p["name"] for p in full["unscheduled"]] == ["wait-a"]
    cl = full["cluster"]
    assert cl["nodes"] == 8 and cl["gpu_nodes"] == 7 and cl["unscheduled_pods"] == 1
    # nvidia.com/gpu: ts-1 8 + hami-1 20 + bad-1 1 = 29 allocatable; 3 + 4 + 1 allocated (wait-a has no node)
    assert cl["resources"]["nvidia.com/gpu"] == {"allocatable": 29, "allocated": 8, "free": 21, "percent": 27,
                                                 "unit": "GPU"}
    assert by_name(full)["cpu-1"]["resources"] == {}
    assert "web" not in [p["name"] for p in full["pods"]]


def test_table_like_kubectl_inspect_gpushare(full):
    lines = full["table"].splitlines()
    head = lines[0].split()
    assert head == ["NAME", "IPADDRESS", "GPU0(Allocated/Total)", "GPU1(Allocated/Total)", "PENDING(Allocated)",
                    "GPU", "Memory(GiB)"]
    assert lines[1].split() == ["bad-1", "10.0.0.61", "8/16", "8/16"]
    assert lines[2].split() == ["gs-1", "10.0.0.11", "6/15", "3/15", "2", "11/30"]
    assert lines[3].split() == ["gs-2", "10.0.0.12", "0/15", "4/15", "4/30"]
    i = lines.index("Allocated/Total GPU Memory In Cluster:")
    assert lines[i + 1] == "23/76 (30%)"
    rows = [ln.split() for ln in lines]
    assert ["ts-1", "10.0.0.21", "time-slicing", "nvidia.com/gpu", "3/8", "37%"] in rows
    assert ["mig-1", "10.0.0.31", "mig", "nvidia.com/mig-3g.40gb", "1/2", "50%"] in rows
    assert ["nvidia.com/gpu", "8/29", "(27%)"] in rows
    assert any(ln.startswith("CONFLICT bad-1:") for ln in lines)
    assert "Pods requesting GPU resources without a node: ml/wait-a" in lines


def test_node_filter(collections_path, emu):
    res = report(collections_path, emu, "node_selector=gpushare=true")
    assert [n["name"] for n in res["nodes"]] == ["gs-1", "gs-2"]
    assert res["cluster"]["gpushare"]["memory_total"] == 60
    assert "bad-a" not in [p["name"] for p in res["pods"]]
    res = report(collections_path, emu, "nodes=ts-1,nope")
    assert res["failed"] and "nope not found" in res["msg"]


def test_report_file_markdown_html_check_and_diff(collections_path, emu, tmp_path):
    path = tmp_path / "report.md"
    seq = seq_now(emu)
    res = report(collections_path, emu, f"report_path={path}", check=True)
    assert res["changed"] is True and not path.exists()
    res = report(collections_path, emu, f"report_path={path}", diff=True)
    assert res["changed"] is True and path.exists()
    assert res["diff"]["before"] == "" and res["diff"]["after"] == path.read_text()
    text = path.read_text()
    assert text.startswith("# GPU share report\n")
    assert "| nvidia.com/gpu | 8 | 29 | 21 | 27% |" in text
    assert "ml/gs-a (mem 6)" in text and "CONFLICT:" in text
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    res = report(collections_path, emu, f"report_path={path}")
    assert res["changed"] is False
    res = report(collections_path, emu, f"report_path={path}", check=True)
    assert res["changed"] is False
    assert not [r for r in requests_since(emu, seq)["items"] if r["write"]]
    # html, then back up the original when it changes
    res = report(collections_path, emu, f"report_path={path} report_format=html backup=true")
    assert res["changed"] is True and Path(res["backup_file"]).read_text() == text
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<td>ml/gs-a (mem 6)</td>" in html
    res = report(collections_path, emu, f"report_path={path} report_format=html")
    assert res["changed"] is False


def test_bad_input_fails_before_contacting_the_cluster(collections_path, emu, tmp_path):
    seq = seq_now(emu)
    res = report(collections_path, emu, "report_format=pdf")
    assert res["failed"] and "report_format" in res["msg"] and "markdown, html" in res["msg"]
    res = report(collections_path, emu, f"report_path={tmp_path}/missing/r.md")
    assert res["failed"] and "does not exist" in res["msg"]
    res = report(collections_path, emu, "report_mode=rw-r--r--")
    assert res["failed"] and "report_mode" in res["msg"]
    assert requests_since(emu, seq)["items"] == []
