"""The real kube-scheduler (lab/kube/real.py's build) runs with the KubeSchedulerConfiguration that module
gpuops.k8s_gpu.kube_scheduler_config writes, and places a GPU pod through the gpushare extender the file registers.
The extender is the lab's recording one (lab/kube/extender.py): upstream's is not served by the Go module proxy.

* site profiles: a site's own KubeSchedulerConfiguration (its own profile name, its leader election) is what
  kube-scheduler's --config names; the module merges the extender into it (current_flags) and keeps the rest; the
  scheduler started with the merged file calls the extender's filter for a pod asking for aliyun.com/gpu-mem, skips
  the node the extender rejects, and the extender binds the pod (bind verb); kwok runs it.
* the collection's own file for the kubeadm and RKE2 layouts (distribution kubeadm / rke2; clientConnection.kubeconfig
  set to the lab's scheduler credentials through the module's kubeconfig option, as the layouts' paths do not exist
  here): kube-scheduler loads, validates and starts with it.
* gpu_share_report on the pod the real scheduler placed (through the extender) and kwok runs.
* gpu-manager's scheduler extender gpu-admission (issue #27 3.9): the entry module gpu_stack_manifests returns for
  strategy gpu-manager (`extender`: filterVerb `predicates` under `/scheduler`, no bind verb, managedResources
  tencent.com/vcuda-core and vcuda-memory, nodeCacheCapable false, ignorable false) goes through
  kube_scheduler_config into the site's file; the real kube-scheduler calls it for a pod asking for
  tencent.com/vcuda-core and not for a pod without it, and binds the vcuda pod itself to the node the extender kept.
  The lab's recording extender stands in for gpu-admission (tkestack/gpu-admission is not served by the Go module
  proxy: 403).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_kube_scheduler_real.py
"""
from __future__ import annotations

import json
import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import KUBE, VENV_BIN, new_namespace, run_module

MODULE = "gpuops.k8s_gpu.kube_scheduler_config"
SUFFIX = "%d" % os.getpid()
SCHED = "gpuops-site-sched-%s" % SUFFIX


def binary(kube, name):
    ready = json.loads((Path(kube.state) / "ready").read_text())
    out = subprocess.run([os.path.join(VENV_BIN, "python"), os.path.join(KUBE, "real.py"), "build", "--version",
                          kube.version],
                         capture_output=True, text=True, check=True).stdout
    paths = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert ready["version"] == kube.version
    return paths[name]


def wait(what, fn, timeout=60, proc=None, logf=None):
    end = time.time() + timeout
    while time.time() < end:
        got = fn()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError("%s: process exited %s\n%s" % (what, proc.returncode, Path(logf).read_text()[-4000:]))
        time.sleep(0.3)
    raise AssertionError("timed out after %d s: %s%s" % (timeout, what, ("\n" + Path(logf).read_text()[-4000:]) if logf else ""))


def nodes_ready(core, names):
    """The nodes kwok has made Ready, without the not-ready taint the node lifecycle controller sets at first (until
    then the scheduler filters them out before any extender sees them)."""
    def ready():
        for n in names:
            node = core.read_node(n)
            if not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                return False
            if any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or []):
                return False
        return True
    wait("nodes %s Ready" % names, ready, 60)


@contextlib.contextmanager
def recording_extender(kube_real, d, nodes, capacity, labels, *args):
    """Two kwok nodes with ``capacity`` and ``labels`` and the lab's recording extender (lab/kube/extender.py, the
    first node rejected, ``args`` added), running until the block ends; yields the port it listens on."""
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    for n in nodes:
        core.create_node({"metadata": {"name": n, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                       "labels": dict(labels, **{"kubernetes.io/hostname": n})},
                          "status": {"capacity": dict(capacity), "allocatable": dict(capacity)}})
    logf = open(d / "extender.log", "w")
    proc = subprocess.Popen([os.path.join(VENV_BIN, "python"), os.path.join(KUBE, "extender.py"), "--state-dir", str(d),
                             "--kubeconfig", kube_real.kubeconfig, "--reject", nodes[0]] + list(args),
                            stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait("extender port", lambda: (d / "port").exists(), 30, proc, d / "extender.log")
        nodes_ready(core, nodes)
        yield int((d / "port").read_text())
    finally:
        proc.terminate()
        proc.wait(10)
        for n in nodes:
            try:
                core.delete_node(n)
            except client.ApiException:
                pass


@pytest.fixture(scope="module")
def extender(kube_real, tmp_path_factory):
    d = tmp_path_factory.mktemp("extender")
    nodes = ["gsx-a-%s" % SUFFIX, "gsx-b-%s" % SUFFIX]
    res = {"cpu": "32", "memory": "256Gi", "pods": "110", "aliyun.com/gpu-mem": "32", "aliyun.com/gpu-count": "1"}
    with recording_extender(kube_real, d, nodes, res, {"gpushare": "true", "gpuops.io/sched-test": SUFFIX}) as port:
        yield {"dir": d, "url": "http://127.0.0.1:%s/gpushare-scheduler" % port, "nodes": nodes}


def extender_spec(url):
    return [{"url_prefix": url, "filter_verb": "filter", "bind_verb": "bind", "node_cache_capable": True,
             "managed_resources": [{"name": "aliyun.com/gpu-mem", "ignored_by_scheduler": False}]}]


def start_scheduler(kube, config, tmp_path, name):
    logf = tmp_path / ("%s.log" % name)
    proc = subprocess.Popen([binary(kube, "kube-scheduler"), "--config", str(config), "--secure-port", "0", "--v", "2"],
                            stdout=open(logf, "w"), stderr=subprocess.STDOUT)
    return proc, logf


def test_site_profile_merged_scheduler_calls_extender_and_it_binds(kube_real, extender, tmp_path, collections_path):
    site = tmp_path / "site-scheduler.yaml"
    site.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": os.path.join(kube_real.state, "scheduler.kubeconfig")},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": SCHED, "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}}}]}))
    res = run_module(collections_path, MODULE, json.dumps({
        "mode": "scheduler_config", "distribution": "kubeadm", "kubernetes_version": kube_real.version,
        "current_flags": {"config": str(site)}, "extenders": extender_spec(extender["url"]), "backup": False}))
    assert not res.get("failed"), res
    merged = yaml.safe_load(site.read_text())
    assert merged["profiles"][0]["schedulerName"] == SCHED and merged["leaderElection"] == {"leaderElect": False}
    assert [e["urlPrefix"] for e in merged["extenders"]] == [extender["url"]]
    proc, logf = start_scheduler(kube_real, site, tmp_path, "site")
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    ns = "sched-real-%s" % SUFFIX
    new_namespace(core, ns)
    try:
        core.create_namespaced_pod(ns, {"metadata": {"name": "share"}, "spec": {
            "schedulerName": SCHED, "nodeSelector": {"gpuops.io/sched-test": SUFFIX},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.example.com/cuda:12",
                            "resources": {"limits": {"aliyun.com/gpu-mem": "8"}}}]}})
        pod = wait("pod bound by the extender and Running", lambda: (lambda p: p if p.spec.node_name and
                                                                       p.status.phase == "Running" else None)(
            core.read_namespaced_pod("share", ns)), 90, proc, logf)
        assert pod.spec.node_name == extender["nodes"][1]
        calls = [json.loads(line) for line in (extender["dir"] / "calls.jsonl").read_text().splitlines()]
        mine = [c for c in calls if c.get("pod") == "%s/share" % ns]
        verbs = [c["verb"] for c in mine]
        assert verbs[0] == "filter" and verbs[-1] == "bind", mine
        assert sorted(mine[0]["nodes"]) == sorted(extender["nodes"]) and mine[0]["node_cache_capable"] is True
        assert mine[-1]["node"] == extender["nodes"][1]
        # gpu_share_report on the pod the real scheduler (through the extender) placed and kwok runs
        rep = run_module(collections_path, "gpuops.k8s_gpu.gpu_share_report", json.dumps({
            "kubeconfig": kube_real.kubeconfig, "node_selector": "gpuops.io/sched-test=%s" % SUFFIX}))
        assert not rep.get("failed"), rep
        by_node = dict((n["name"], n) for n in rep["nodes"])
        assert set(by_node) == set(extender["nodes"]), sorted(by_node)
        b = by_node[extender["nodes"][1]]
        assert b["resources"]["aliyun.com/gpu-mem"]["allocated"] in (8, "8"), b
        assert [(p["namespace"], p["name"]) for p in b["pods"]] == [(ns, "share")], b["pods"]
        assert by_node[extender["nodes"][0]]["resources"]["aliyun.com/gpu-mem"]["allocated"] in (0, "0")
    finally:
        proc.terminate()
        proc.wait(15)
        core.delete_namespace(ns)


@pytest.mark.parametrize("distribution", ["kubeadm", "rke2"])
def test_collection_file_loads_in_kube_scheduler(kube_real, extender, tmp_path, collections_path, distribution):
    cfg = tmp_path / "scheduler-config.yaml"
    res = run_module(collections_path, MODULE, json.dumps({
        "mode": "scheduler_config", "distribution": distribution, "kubernetes_version": kube_real.version,
        "path": str(cfg), "config_path": str(cfg), "kubeconfig": os.path.join(kube_real.state, "scheduler.kubeconfig"),
        "extenders": extender_spec(extender["url"]), "backup": False}))
    assert not res.get("failed"), res
    doc = yaml.safe_load(cfg.read_text())
    assert doc["kind"] == "KubeSchedulerConfiguration", doc
    # upstream's loader and validation accept the file and the scheduler starts (it runs for a few seconds beside the
    # shared cluster's scheduler, under leader election as the file says; no pod of this test is scheduled by it)
    proc, logf = start_scheduler(kube_real, cfg, tmp_path, distribution)
    try:
        wait("kube-scheduler started with the collection's file", lambda: "Attempting to acquire leader lease" in
             logf.read_text() or "Starting Kubernetes Scheduler" in logf.read_text(), 60, proc, logf)
        time.sleep(1)
        assert proc.poll() is None, logf.read_text()[-4000:]
    finally:
        proc.terminate()
        proc.wait(15)


@pytest.fixture(scope="module")
def admission(kube_real, tmp_path_factory):
    """The lab's recording extender answering gpu-admission's verb (POST /scheduler/predicates), two vcuda nodes, the
    first rejected."""
    d = tmp_path_factory.mktemp("admission")
    nodes = ["gmx-a-%s" % SUFFIX, "gmx-b-%s" % SUFFIX]
    res = {"cpu": "32", "memory": "256Gi", "pods": "110", "tencent.com/vcuda-core": "100",
           "tencent.com/vcuda-memory": "60"}
    labels = {"nvidia-device-enable": "enable", "gpuops.io/sched-test": "gm" + SUFFIX}
    with recording_extender(kube_real, d, nodes, res, labels, "--filter-verb", "predicates") as port:
        yield {"dir": d, "port": port, "nodes": nodes}


def test_gpu_admission_entry_called_for_vcuda_pods_only(kube_real, admission, tmp_path, collections_path):
    out = run_module(collections_path, "gpuops.k8s_gpu.gpu_stack_manifests", json.dumps({
        "strategy": "gpu-manager", "pool": "gm", "nodes": admission["nodes"],
        "settings": {"gpu_manager": {"accept_unmaintained": True, "admission_port": admission["port"],
                                     "admission_image": "registry.example.com/tkestack/gpu-admission:47d56ae"}}}))
    assert not out.get("failed"), out
    entry = out["extender"]
    assert entry["url_prefix"] == "http://127.0.0.1:%d/scheduler" % admission["port"], entry
    assert entry["filter_verb"] == "predicates" and not entry.get("bind_verb"), entry
    sched = "gpuops-gm-sched-%s" % SUFFIX
    site = tmp_path / "site-scheduler.yaml"
    site.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": os.path.join(kube_real.state, "scheduler.kubeconfig")},
        "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": sched}]}))
    res = run_module(collections_path, MODULE, json.dumps({
        "mode": "scheduler_config", "distribution": "kubeadm", "kubernetes_version": kube_real.version,
        "current_flags": {"config": str(site)}, "extenders": [entry], "backup": False}))
    assert not res.get("failed"), res
    written = yaml.safe_load(site.read_text())["extenders"]
    assert written == [{"urlPrefix": entry["url_prefix"], "filterVerb": "predicates", "enableHTTPS": False,
                        "nodeCacheCapable": False,
                        "managedResources": [{"name": "tencent.com/vcuda-core", "ignoredByScheduler": False},
                                             {"name": "tencent.com/vcuda-memory", "ignoredByScheduler": False}],
                        "ignorable": False}], written
    proc, logf = start_scheduler(kube_real, site, tmp_path, "gpu-admission")
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    ns = "sched-gm-%s" % SUFFIX
    new_namespace(core, ns)

    def pod(name, limits):
        c = {"name": "c", "image": "registry.example.com/cuda:12"}
        if limits:
            c["resources"] = {"limits": limits}
        return {"metadata": {"name": name}, "spec": {
            "schedulerName": sched, "nodeSelector": {"gpuops.io/sched-test": "gm" + SUFFIX},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}], "containers": [c]}}
    try:
        core.create_namespaced_pod(ns, pod("plain", None))
        core.create_namespaced_pod(ns, pod("vcuda", {"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "4"}))
        bound = {}
        for name in ("plain", "vcuda"):
            bound[name] = wait("pod %s bound and Running" % name, lambda: (lambda p: p if p.spec.node_name and
                                                                           p.status.phase == "Running" else None)(
                core.read_namespaced_pod(name, ns)), 90, proc, logf).spec.node_name
        calls = [json.loads(line) for line in (admission["dir"] / "calls.jsonl").read_text().splitlines()]
        by_pod = {}
        for c in calls:
            by_pod.setdefault(c.get("pod"), []).append(c)
        assert "%s/plain" % ns not in by_pod, calls  # managedResources: no vcuda resource, no extender call
        mine = by_pod["%s/vcuda" % ns]
        assert [c["path"] for c in mine] == ["/scheduler/predicates"] * len(mine), mine  # no bind verb
        assert sorted(mine[0]["nodes"]) == sorted(admission["nodes"]) and mine[0]["node_cache_capable"] is False
        assert bound["vcuda"] == admission["nodes"][1], bound  # the node the extender kept; kube-scheduler bound it
        assert bound["plain"] in admission["nodes"], bound
    finally:
        proc.terminate()
        proc.wait(15)
        core.delete_namespace(ns)
