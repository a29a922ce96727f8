"""Dynamic Resource Allocation on the lab's real control plane (lab/kube/real.py): NVIDIA's DRA kubelet plugin
publishes the kwok GPU nodes' ResourceSlices, the real kube-scheduler allocates claims against them, kwok runs the pods
and gpu_share_report shows what the scheduler allocated (issue #32, the lab side).

* The plugin is upstream's own: gpu-kubelet-plugin of sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0 (lab/go/build.sh
  dra-driver-nvidia-gpu), one process per kwok GPU node, each on the NVML simulator with that node's inventory
  (lab/kube/dra_slices.py LAB_NODES) and a driver root, CDI root and kubelet directories of its own under tmp_path.
  It publishes the node's slice through the API server itself (the kubeletplugin helper) and is stopped once the
  slice is there: no kubelet ever calls it (kwok is no kubelet), so it has nothing more to do; the slices stay.
* lab/kube/dra_slices.py (the lab's Python stand-in for the plugin's slices) gives the same spec for the same
  inventory: checked against the plugin's here, so the stand-in can serve where the Go set is not built.
* DeviceClasses gpu.nvidia.com and mig.nvidia.com are the chart's own: fixture `release` installs
  dra-driver-nvidia-gpu v0.5.0 (from the Go module cache) through role gpu_sharing_stack, strategy dra, with a real
  kubernetes.core.helm install (upstream's helm v3.22.0 on PATH), runs it again (0 writes), state absent keeps it
  while another dra pool is on the cluster, and the file's last test removes it (state absent, once no other file's dra
  pool is there). The one place of a test session that installs that release (one per cluster).
* helm 4 (K8S-21): the fixture runs the role again with helm 4.3.1 (lab/go/helm-4) first on PATH on the release helm 3
  installed (0 writes); after the removal the release is installed, run again and removed with helm 4, and with helm 4
  and a kubernetes.core that says 6.3.0 the role stops at its helm client check before any write.
* Claims: TEMPLATES below are the collection's own ResourceClaimTemplates (stacks/dra.claim_templates, kinds gpu,
  mig, time-slicing, mps; plugins/module_utils/_cluster/stacks/dra.py): the real scheduler allocates them.

Conformance: docs/conformance/dra-driver-nvidia-gpu-lab.md (rows DRAL-*; each test is named after its row).
Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_real.py   (make test-kube KUBE_VERSION=1.34 too)
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import (KUBE, LAB_GPU_CLASS, ROOT, gpu_extended_mapping, lab_collections_path, new_namespace, run_module,
                      wait_until as wait)

sys.path.insert(0, str(KUBE))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dra_slices  # noqa: E402  (lab/kube)
from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_dra_real import chart_dir, helm_on_path  # noqa: E402
from test_gpu_sharing_stack_real import failures, run_play, task_results  # noqa: E402
from gpu_kwok_nodes import bare_node  # noqa: E402  (the recorded T4 node before its stack)

SUFFIX = "%d" % os.getpid()
NS = "dra-lab-%s" % SUFFIX
GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "gpu.nvidia.com"
NODES = dra_slices.LAB_NODES
# The DRA driver's release, installed by the collection's role (strategy dra, a real kubernetes.core.helm install of
# the chart dra-driver-nvidia-gpu v0.5.0 from the Go module cache): its DeviceClasses gpu.nvidia.com and mig.nvidia.com
# are the ones the claims below use. One release per cluster (the DeviceClasses are cluster objects): this file is the
# one place of the session that installs it; test_gpu_sharing_stack_dra_real.py runs helm in check mode only.
ROLE_USER = "gpuops-test-dra-release-%s" % SUFFIX
ROLE_NODE = "dra-release-%s" % SUFFIX       # the pool's node: a kwok node of its own, no device plugin resource
POOL = "dra-lab-%s" % SUFFIX
RELEASE_NS = "dra-driver-%s" % SUFFIX

def _collection_dra():
    """The collection's stacks/dra (plugins/module_utils/_cluster), imported from the lab's collections path."""
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra as stacks_dra
    return stacks_dra


# The ResourceClaimTemplates users write (issue #32), rendered by the collection (stacks/dra.claim_templates, the
# renderer of strategy dra's claim_templates): a full GPU, a MIG profile that kwok-dra-h100-1 has, a GPU shared by
# time-slicing and by MPS (the driver's GpuConfig; the scheduler does not read opaque config, the plugin applies it
# at prepare time). The sharing kinds need the driver's alpha gates, given here as the pool would switch them on.
SPECS = [
    {"name": "gpu", "kind": "gpu"},
    {"name": "gpu-mig-1g10gb", "kind": "mig", "mig_profile": "1g.10gb"},
    {"name": "gpu-time-sliced", "kind": "time-slicing", "interval": "Long"},
    {"name": "gpu-mps", "kind": "mps", "mps_active_thread_percentage": 50},
]
TEMPLATES = dict(zip([s["kind"] for s in SPECS], _collection_dra().claim_templates(
    SPECS, NS, gates={"TimeSlicingSettings": True, "MPSSupport": True}, api_version="%s/%s" % (GROUP, VERSION))))


class Dra(object):
    def __init__(self, kube, published, nvml):
        from kubernetes import client
        self.kube = kube
        self.api = kube.api()
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)
        self.published = published      # node -> the slice the plugin published (as read back)
        self.nvml = nvml                # node -> dra_slices.nvml_view of its inventory

    def slices(self):
        return self.co.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                                  field_selector="spec.driver=%s" % DRIVER)["items"]

    def claim(self, name):
        return self.co.get_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", name)

    def claims(self):
        return self.co.list_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims")["items"]

    def create(self, plural, body):
        return self.co.create_namespaced_custom_object(GROUP, VERSION, NS, plural, body)

    def pod(self, name, claims):
        """A pod whose one container uses ``claims`` ({pod claim name: ('template'|'claim', object name)})."""
        refs = [dict({"name": n}, **({"resourceClaimTemplateName": o} if k == "template" else {"resourceClaimName": o}))
                for n, (k, o) in sorted(claims.items())]
        return self.core.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": {
            "terminationGracePeriodSeconds": 0, "resourceClaims": refs,
            "containers": [{"name": "c", "image": "registry.example.com/cuda:12",
                            "resources": {"claims": [{"name": n} for n in sorted(claims)]}}]}})

    def read_pod(self, name):
        return self.core.read_namespaced_pod(name, NS)

    def running(self, name, timeout=60):
        return wait("pod %s/%s Running (kwok runs pods whose claims the scheduler allocated)" % (NS, name),
                    lambda: (lambda p: p if p.status.phase == "Running" else None)(self.read_pod(name)), timeout)

    def allocation(self, pod_name):
        """[(request, driver, pool, device)] of the claims of a pod (template claims through resourceClaimStatuses)."""
        pod = self.read_pod(pod_name)
        names = [s.resource_claim_name for s in (pod.status.resource_claim_statuses or [])]
        names += [c.resource_claim_name for c in (pod.spec.resource_claims or []) if c.resource_claim_name]
        out = []
        for n in names:
            alloc = (self.claim(n).get("status") or {}).get("allocation") or {}
            out += [(r["request"], r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"]]
        return out

    def device(self, pool, name):
        for s in self.slices():
            if s["spec"]["pool"]["name"] == pool:
                for d in s["spec"]["devices"]:
                    if d["name"] == name:
                        return d
        raise AssertionError("no device %s in pool %s" % (name, pool))


def _wait_slices(co, nodes, procs, timeout=90):
    def ready():
        for node, proc in procs.items():
            if proc.poll() is not None:
                raise AssertionError("gpu-kubelet-plugin for %s exited (%s): %s" % (
                    node, proc.returncode, Path(proc.args[-1]).name))
        items = co.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                              field_selector="spec.driver=%s" % DRIVER)["items"]
        got = {s["spec"]["nodeName"]: s for s in items if s["spec"]["nodeName"] in nodes}
        return got if set(got) == set(nodes) else None
    return wait("the plugin's ResourceSlices for %s" % ", ".join(sorted(nodes)), ready, timeout)


def release_vars(state="present", dra=None):
    return {"gpu_sharing_stack_strategy": "dra", "gpu_sharing_stack_state": state, "gpu_sharing_stack_pool": POOL,
            "gpu_sharing_stack_nodes": [ROLE_NODE], "gpu_sharing_stack_facts": {ROLE_NODE: T4},
            "gpu_sharing_stack_dra": dict({"chart_path": chart_dir(), "chart_version": "0.5.0", "namespace": RELEASE_NS,
                                           "assume_cdi_enabled": True,
                                           # the lab's shared class mapping nvidia.com/gpu (conftest.
                                           # gpu_extended_mapping) maps the chart's name: accepted, else the release
                                           # is refused (DRAX-15)
                                           "accept_extended_resource_classes": [LAB_GPU_CLASS]}, **(dra or {}))}


def _objects(events, verb):
    """{(resource, namespace, name)} of the successful ``verb`` requests among audit events; for ``create`` also the
    server-side applies that created their object (verb patch, code 201: helm 4 installs so)."""
    def made(e):
        code = (e.get("responseStatus") or {}).get("code", 500)
        return (e["verb"] == verb and code < 300) or (verb == "create" and e["verb"] == "patch" and code == 201)
    return set((e["objectRef"].get("resource"), e["objectRef"].get("namespace"), e["objectRef"].get("name"))
               for e in events if made(e) and e.get("objectRef") and "dryRun=All" not in e["requestURI"])


class Release(object):
    """The role's runs against the shared cluster, each between two audit marks: writes by ROLE_USER."""

    def __init__(self, kube, tmp):
        self.kube, self.tmp = kube, tmp
        self.kc = kube.user(ROLE_USER)
        self.runs = {}
        self.present = False  # the release may be on the cluster (a run failed, or none removed it since)

    def run(self, name, state="present", env=None, expect_rc=0, dra=None):
        start = self.kube.mark()
        rc, result = run_play((self.kube, self.kc), self.tmp, [{"name": name, "block": stack_steps(
            release_vars(state, dra))}], env=env)
        end = self.kube.mark()
        events = self.kube.events(start, end, user=ROLE_USER)
        removed = state == "absent" and not [r for n, r in task_results(result) if n.endswith(
            "Render the stack and check the input") and r.get("other_pools")]
        if rc == 0:
            self.present = state == "present" or (self.present and not removed)
        elif expect_rc == 0:
            self.present = True  # a run that failed may have left anything
        self.runs[name] = {"rc": rc, "failures": failures(result), "result": result,
                           "writes": self.kube.writes(start, end, user=ROLE_USER),
                           "created": _objects(events, "create"), "deleted": _objects(events, "delete")}
        assert (rc == 0) == (expect_rc == 0), (name, rc, failures(result))
        return self.runs[name]


@pytest.fixture(scope="module")
def release(kube_real, tmp_path_factory):
    """The DRA driver's release installed through the role (real helm install), then the same run again."""
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    core.create_node(bare_node(ROLE_NODE, "t4x1", facts=T4))
    rel = Release(kube_real, tmp_path_factory.mktemp("dra-release"))
    with helm_on_path():
        try:
            rel.run("install")
            rel.run("again")
            # the same run with helm 4 first on PATH (a site that upgraded its helm client between two runs)
            with helm_on_path("helm-4"):
                rel.run("again-helm-4")
            yield rel
        finally:
            if rel.present:
                rel.run("absent-at-exit", "absent")
                # the chart's gpu.nvidia.com mapped nvidia.com/gpu: its deletion dropped the 1.37.2 scheduler's mapping
                # for the lab's shared class too (conftest.gpu_extended_mapping, kubernetes#141103); put it back
                gpu_extended_mapping(client.CustomObjectsApi(kube_real.api()), create=False)
            core.delete_node(ROLE_NODE)


@pytest.fixture(scope="module")
def dra(kube_real, release, tmp_path_factory):
    from kubernetes import client
    api = kube_real.api()
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    for name in ("gpu.nvidia.com", "mig.nvidia.com"):
        wait("DeviceClass %s of the chart" % name, lambda: co.get_cluster_custom_object(
            GROUP, VERSION, "deviceclasses", name))
    work = tmp_path_factory.mktemp("dra-plugins")
    binary = dra_slices.plugin_binary()
    procs, logs = {}, {}
    try:
        for node, inv in sorted(NODES.items()):
            d = work / node
            d.mkdir()
            logs[node] = d / "plugin.log"
            procs[node] = dra_slices.start_plugin(kube_real.kubeconfig, node, inv, str(d), binary)
        try:
            published = _wait_slices(co, set(NODES), procs)
        except AssertionError as exc:
            tails = ["--- %s\n%s" % (n, p.read_text()[-3000:]) for n, p in logs.items() if p.exists()]
            raise AssertionError("%s\n%s" % (exc, "\n".join(tails)))
    finally:
        for p in procs.values():
            dra_slices.stop_plugin(p)
    nvml = {node: dra_slices.nvml_view(inv, str(work / node)) for node, inv in NODES.items()}
    new_namespace(core, NS)
    for t in TEMPLATES.values():
        co.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaimtemplates", copy.deepcopy(t))
    yield Dra(kube_real, published, nvml)
    core.delete_namespace(NS)
    for s in co.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                           field_selector="spec.driver=%s" % DRIVER)["items"]:
        if s["spec"]["nodeName"] in NODES:
            co.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", s["metadata"]["name"])


# ------------------------------------------------------------------------------------------------ the go set
GO_SET = Path(ROOT) / "lab" / "go" / "dra-driver-nvidia-gpu"


def test_DRAL_13_go_set_replaces_what_the_proxy_does_not_serve():
    """v0.5.0's go.mod requires k8s.io/kubernetes v1.37.0-rc.0 and github.com/NVIDIA/go-nvfm v0.1.0, neither served by
    the Go module proxy here (403): the set replaces the first by v1.37.2 (only pkg/kubelet/checkpointmanager is
    imported) and the second by the lab's stand-in (nvfm-stub: no Fabric Manager). lab/go/build.sh keys a build on the
    set's top-level files only and the stand-in lives in a sub-directory (a replace target is a module directory), so
    `programs` names its content hash: a changed stand-in must change that line, and so the key."""
    gomod = (GO_SET / "go.mod").read_text()
    assert "\tsigs.k8s.io/dra-driver-nvidia-gpu v0.5.0 // indirect" in gomod  # go mod tidy: the tool's module
    assert "replace github.com/NVIDIA/go-nvfm => ./nvfm-stub" in gomod
    assert "replace k8s.io/kubernetes => k8s.io/kubernetes v1.37.2" in gomod
    stub = GO_SET / "nvfm-stub"
    h = hashlib.sha256()
    for f in sorted(p for p in stub.rglob("*") if p.is_file()):
        h.update(f.relative_to(stub).as_posix().encode() + b"\0" + f.read_bytes())
    programs = (stub.parent / "programs").read_text()
    assert "nvfm-stub sha256 %s" % h.hexdigest() in programs, h.hexdigest()


def test_DRAL_12_alpha_gates_off_by_default():
    """The plugin's feature gates as the binary lists them: the sharing and partitioning ones alpha and off, so the
    slices are the static-MIG, one-slice-per-node form (no DynamicMIG partitions, no consumable shares)."""
    import subprocess
    out = subprocess.run([dra_slices.plugin_binary(), "--help"], capture_output=True, text=True, timeout=60).stdout
    for gate in ("DynamicMIG", "TimeSlicingSettings", "MPSSupport", "PassthroughSupport", "ConsumableShares",
                 "NVMLDeviceHealthCheck", "FabricManagerPartitioning"):
        assert "%s=true|false (ALPHA - default=false)" % gate in out, gate
    version = subprocess.run([dra_slices.plugin_binary(), "--version"], capture_output=True, text=True).stdout
    assert "version v0.5.0" in version


def test_DRAL_11_what_the_plugin_needs_to_start(dra, tmp_path):
    """--image-name is a required flag; the nvidia-cdi-hook named by --nvidia-cdi-hook-path (default none) is read at
    start; the driver root must hold libnvidia-ml.so.1 and nvidia-smi. lab/kube/dra_slices.py plugin_dirs gives all
    three (test_DRAL_01: the plugin runs with them)."""
    import subprocess
    binary = dra_slices.plugin_binary()
    d = dra_slices.plugin_dirs(str(tmp_path))
    base = [binary, "--kubeconfig", dra.kube.kubeconfig, "--node-name", "kwok-dra-t4-1", "--cdi-root", d["cdi"],
            "--kubelet-registrar-directory-path", d["registry"], "--kubelet-plugins-directory-path", d["plugins"]]

    def run(*extra):
        return subprocess.run(base + list(extra), capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert 'Required flag "image-name" not set' in run().stderr
    assert "error reading nvidia-cdi-hook" in run("--image-name", "x").stderr
    os.unlink(os.path.join(d["driver"], "usr", "bin", "nvidia-smi"))
    proc = run("--image-name", "x", "--nvidia-cdi-hook-path", str(tmp_path / "nvidia-cdi-hook"),
               "--nvidia-driver-root", d["driver"], "--container-driver-root", d["driver"])
    assert 'error locating "nvidia-smi"' in proc.stderr, proc.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ the slices
def _devices(node_view):
    names = []
    for g in node_view["gpus"]:
        if not g["mig"]:
            names.append("gpu-%d" % g["minor"])
        for m in g["migs"]:
            names.append("gpu-%d-mig-%s-%d-%d" % (g["minor"], m["name"][4:].replace(".", ""), m["gi_profile_id"],
                                                  m["start"]))
    return sorted(names)


def test_DRAL_01_plugin_publishes_one_slice_per_kwok_gpu_node(dra):
    """One slice per node, driver gpu.nvidia.com, pool named after the node, owned by the Node, named
    00000-gpu.nvidia.com-<node>-*; a full GPU gpu-<minor> per GPU without MIG, a device per MIG device of a GPU in MIG
    mode (none for the GPU whose MIG mode is on without instances, none for a GPU instance without a compute instance)."""
    for node, s in sorted(dra.published.items()):
        spec = s["spec"]
        assert spec["driver"] == DRIVER and spec["nodeName"] == node
        assert spec["pool"] == {"name": node, "generation": spec["pool"]["generation"], "resourceSliceCount": 1}
        assert s["metadata"]["name"].startswith("00000-gpu.nvidia.com-%s-" % node)
        assert [(o["kind"], o["name"], o.get("controller")) for o in s["metadata"]["ownerReferences"]] == [
            ("Node", node, True)]
        assert sorted(d["name"] for d in spec["devices"]) == _devices(dra.nvml[node]), node
    h100 = sorted(d["name"] for d in dra.published["kwok-dra-h100-1"]["spec"]["devices"])
    assert h100 == ["gpu-0-mig-1g10gb-19-4", "gpu-0-mig-1g10gb-19-5", "gpu-0-mig-3g40gb-9-0"]
    assert len(dra.published["kwok-dra-a100-1"]["spec"]["devices"]) == 8


def _quantity_bytes(text):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    for u, m in units.items():
        if str(text).endswith(u):
            return int(str(text)[:-2]) * m
    return int(text)


def _normal(spec):
    """A slice spec with device order and quantity spelling out of the comparison."""
    out = copy.deepcopy(spec)
    out["pool"].pop("generation", None)
    for d in out["devices"]:
        for c in (d.get("capacity") or {}).values():
            c["value"] = _quantity_bytes(c["value"])
    out["devices"].sort(key=lambda d: d["name"])
    return out


def test_DRAL_02_attributes_and_capacities_the_stand_in_matches(dra):
    """Attribute names, types and values as the plugin publishes them (the plugin's own output on the NVML simulator),
    and lab/kube/dra_slices.py gives the same spec for the same inventory."""
    t4 = next(d for d in dra.published["kwok-dra-t4-1"]["spec"]["devices"])
    assert t4["attributes"] == {
        "type": {"string": "gpu"}, "uuid": {"string": dra.nvml["kwok-dra-t4-1"]["gpus"][0]["uuid"]},
        "productName": {"string": "Tesla T4"}, "brand": {"string": "Tesla"}, "architecture": {"string": "Turing"},
        "cudaComputeCapability": {"version": "7.5.0"}, "driverVersion": {"version": "535.183.1"},
        "cudaDriverVersion": {"version": "12.2.0"}, "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}}
    assert _quantity_bytes(t4["capacity"]["memory"]["value"]) == 15360 << 20
    mig = dra.device("kwok-dra-h100-1", "gpu-0-mig-3g40gb-9-0")
    assert {k: v for k, v in mig["attributes"].items() if k in ("type", "profile", "parentUUID", "productName")} == {
        "type": {"string": "mig"}, "profile": {"string": "3g.40gb"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "parentUUID": {"string": dra.nvml["kwok-dra-h100-1"]["gpus"][0]["uuid"]}}
    assert sorted(mig["capacity"]) == ["copyEngines", "decoders", "encoders", "jpegEngines", "memory",
                                       "memorySlice0", "memorySlice1", "memorySlice2", "memorySlice3",
                                       "multiprocessors", "ofaEngines"]
    for node, s in dra.published.items():
        ours = dra_slices.resource_slice(node, dra.nvml[node])
        assert _normal(ours["spec"]) == _normal(s["spec"]), node
        assert ours["metadata"]["generateName"] == s["metadata"]["generateName"]


def test_DRAL_02_stand_in_publishes_what_the_plugin_publishes(dra, tmp_path):
    """lab/kube/dra_slices.py publish (the stand-in, without the Go program) on a kwok node of its own with the
    inventory of kwok-dra-h100-1: the server holds the same devices as the plugin's slice for kwok-dra-h100-1, owned by the
    node; a second publish replaces it (one slice per node, as the plugin keeps it)."""
    node = "dra-standin-%s" % SUFFIX
    dra.core.create_node({"metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"}}})
    try:
        first = dra_slices.publish(dra.api, node, NODES["kwok-dra-h100-1"], str(tmp_path))
        again = dra_slices.publish(dra.api, node, NODES["kwok-dra-h100-1"], str(tmp_path))
        [held] = dra_slices.slices_of(dra.api, node)
        assert held["metadata"]["name"] == again["metadata"]["name"] != first["metadata"]["name"]
        assert held["metadata"]["ownerReferences"][0]["name"] == node
        ours, theirs = _normal(held["spec"]), _normal(dra.published["kwok-dra-h100-1"]["spec"])
        for spec in (ours, theirs):
            spec.pop("nodeName")
            spec["pool"].pop("name")
        assert ours == theirs
    finally:
        for s in dra_slices.slices_of(dra.api, node):
            dra.co.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", s["metadata"]["name"])
        dra.core.delete_node(node)


# ------------------------------------------------------------------------------------------------ scheduling
def test_DRAL_03_full_gpu_template_gets_a_whole_gpu_and_kwok_runs_the_pod(dra):
    """A pod with the full-GPU template (class gpu.nvidia.com: type == 'gpu') gets one whole GPU (never a MIG device);
    the claim controller made its claim from the template, the scheduler allocated it and kwok runs the pod."""
    dra.pod("full", {"gpu": ("template", TEMPLATES["gpu"]["metadata"]["name"])})
    dra.running("full")
    [(req, driver, pool, device)] = dra.allocation("full")
    assert (req, driver) == ("gpu", DRIVER) and pool in NODES and device.startswith("gpu-") and "mig" not in device
    assert dra.read_pod("full").spec.node_name == pool
    assert dra.device(pool, device)["attributes"]["type"] == {"string": "gpu"}


def test_DRAL_04_mig_profile_template_gets_that_mig_device(dra):
    dra.pod("mig", {"gpu": ("template", TEMPLATES["mig"]["metadata"]["name"])})
    dra.running("mig")
    [(_req, _driver, pool, device)] = dra.allocation("mig")
    assert pool == "kwok-dra-h100-1" and device in ("gpu-0-mig-1g10gb-19-4", "gpu-0-mig-1g10gb-19-5")
    assert dra.device(pool, device)["attributes"]["profile"] == {"string": "1g.10gb"}


def test_DRAL_05_cel_on_product_and_memory(dra):
    """CEL on the attributes (productName) and capacity (memory) the plugin publishes picks the matching GPU."""
    cel = {
        "a100": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'",
        "t4": "device.attributes['gpu.nvidia.com'].productName.startsWith('Tesla T4')",
        "big": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0 && "
               "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0')) == false",
    }
    for name, expr in cel.items():
        dra.create("resourceclaims", {"metadata": {"name": "cel-" + name}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
                "expression": expr}}]}}]}}})
        dra.pod("cel-" + name, {"gpu": ("claim", "cel-" + name)})
    for name in cel:
        dra.running("cel-" + name)
    pools = {name: dra.allocation("cel-" + name)[0][2] for name in cel}
    assert pools == {"a100": "kwok-dra-a100-1", "t4": pools["t4"], "big": "kwok-dra-a100-1"}
    assert pools["t4"] in ("kwok-dra-t4-1", "kwok-dra-t4-2")


def test_DRAL_06_two_pods_share_one_claim(dra):
    """One ResourceClaim used by two pods: one allocation, both pods reserved on it, both on the device's node. (An
    A100: the 8-GPU node has free GPUs whatever the other tests took; the two T4 nodes have one GPU each.)"""
    dra.create("resourceclaims", {"metadata": {"name": "shared"}, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
            "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'"}}]}}]}}})
    dra.pod("shared-a", {"gpu": ("claim", "shared")})
    dra.pod("shared-b", {"gpu": ("claim", "shared")})
    a, b = dra.running("shared-a"), dra.running("shared-b")
    claim = dra.claim("shared")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert a.spec.node_name == b.spec.node_name == result["pool"]
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["shared-a", "shared-b"]


def test_DRAL_07_time_slicing_and_mps_templates_are_allocated(dra):
    """The sharing templates carry the driver's GpuConfig as opaque config: the scheduler allocates a whole GPU and
    the config stays in the claim for the plugin (prepare time, not exercised here: no kubelet)."""
    for kind in ("time-slicing", "mps"):
        dra.pod(kind, {"gpu": ("template", TEMPLATES[kind]["metadata"]["name"])})
    for kind in ("time-slicing", "mps"):
        dra.running(kind)
        [(_r, _d, pool, device)] = dra.allocation(kind)
        assert "mig" not in device and pool in NODES
        name = dra.read_pod(kind).status.resource_claim_statuses[0].resource_claim_name
        config = dra.claim(name)["status"]["allocation"]["devices"]["config"]
        assert config[0]["opaque"]["parameters"]["sharing"]["strategy"] == (
            "TimeSlicing" if kind == "time-slicing" else "MPS")


def test_DRAL_08_nothing_fits_stays_pending_with_the_schedulers_reason(dra):
    dra.create("resourceclaims", {"metadata": {"name": "b200"}, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
            "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}}]}}]}}})
    dra.pod("b200", {"gpu": ("claim", "b200")})

    def unschedulable():
        p = dra.read_pod("b200")
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c
        return None
    cond = wait("pod b200 Unschedulable", unschedulable)
    assert "cannot allocate all claims" in cond.message, cond.message
    assert dra.read_pod("b200").status.phase == "Pending"
    assert not (dra.claim("b200").get("status") or {}).get("allocation")


def test_DRAL_10_resource_v1_served_by_default_and_the_extended_resource_name(dra):
    """resource.k8s.io/v1 is served and the scheduler's DRA plugin works with real.py's default flags at 1.34 and 1.37
    (DynamicResourceAllocation GA and on from 1.34: no feature gate, no runtime-config). The chart's
    extendedResourceName on gpu.nvidia.com is kept at 1.37 (DRAExtendedResource GA, locked) and dropped by the API
    server at 1.34 (alpha, off): a renderer comparing what it applied with what it reads back sees the difference."""
    from kubernetes import client
    groups = client.ApisApi(dra.api).get_api_versions().groups
    [res] = [g for g in groups if g.name == GROUP]
    assert "v1" in [v.version for v in res.versions]
    dc = dra.co.get_cluster_custom_object(GROUP, VERSION, "deviceclasses", "gpu.nvidia.com")
    if dra.kube.version == "1.34":
        assert "extendedResourceName" not in dc["spec"]
    else:
        assert dc["spec"]["extendedResourceName"] == "nvidia.com/gpu"


# ------------------------------------------------------------------------------------------------ the report
def test_DRAL_09_report_shows_what_the_scheduler_allocated(dra, collections_path):
    """gpu_share_report: every allocated claim of the namespace with its driver, pool, device and node and the device's
    uuid/product from the slices, the pods holding it (the shared claim with both), the pending claim with the
    scheduler's reason. Equal to the claims' status as the scheduler wrote it."""
    wait("the report's pods are Running", lambda: all(
        dra.read_pod(n).status.phase == "Running" for n in ("full", "mig", "shared-a", "shared-b")))
    res = run_module(collections_path, "gpuops.k8s_gpu.gpu_share_report",
                     json.dumps({"kubeconfig": dra.kube.kubeconfig, "namespace": NS}))
    assert not res.get("failed"), res
    rep = res["dra"]
    assert rep["served"] is True
    expected = {}
    for c in dra.claims():
        alloc = (c.get("status") or {}).get("allocation")
        key = c["metadata"]["name"]
        if not alloc:
            expected[key] = None
            continue
        expected[key] = sorted((r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"])
    shown = {c["name"]: (sorted((d["driver"], d["pool"], d["device"]) for d in c["devices"])
                         if c["state"] == "allocated" else None) for c in rep["claims"]}
    assert shown == expected
    by_name = {c["name"]: c for c in rep["claims"]}
    shared = by_name["shared"]
    assert sorted(p["name"] for p in shared["pods"]) == ["shared-a", "shared-b"] and shared["shared"] is True
    [dev] = shared["devices"]
    assert dev["node"] == dev["pool"] == "kwok-dra-a100-1" and dev["product"] == "NVIDIA A100-SXM4-80GB"
    assert dev["uuid"] == dra.device(dev["pool"], dev["device"])["attributes"]["uuid"]["string"]
    mig_claim = [c for c in rep["claims"] if any(p["name"] == "mig" for p in c["pods"])][0]
    assert mig_claim["devices"][0]["profile"] == "1g.10gb" and mig_claim["devices"][0]["uuid"].startswith("MIG-")
    pending = by_name["b200"]
    assert pending["state"] == "pending" and "cannot allocate all claims" in pending["reason"]
    assert [p["name"] for p in pending["pods"]] == ["b200"]
    assert "b200" in res["table"] and "cannot allocate all claims" in res["table"]


# ------------------------------------------------------------------------------------------------ the role's release
def test_DRA_01_role_installs_the_release_and_a_rerun_writes_nothing(release):
    """The role (strategy dra, entry point ready) installs the chart with kubernetes.core.helm for real: the chart's
    DeviceClasses, the kubelet plugin's DaemonSet and the release's record are created; the same run again makes 0
    writes (audit log, the role's own user)."""
    first, again = release.runs["install"], release.runs["again"]
    helm = [r for n, r in task_results(first["result"]) if n.endswith("(GPU operator, DRA driver)")
            and not r.get("skipped")]
    assert len(helm) == 1 and helm[0].get("changed") is True, helm
    made = first["created"]
    assert {("deviceclasses", None, "gpu.nvidia.com"), ("deviceclasses", None, "mig.nvidia.com")} <= made, made
    assert ("daemonsets", RELEASE_NS, "dra-driver-nvidia-gpu-kubelet-plugin") in made, made
    assert [w for w in first["writes"] if w[2] >= 300] == [], first["writes"]
    print("\nDRA driver release through the role at %s: %d writes (%d objects created), re-run %d writes"
          % (release.kube.version, len(first["writes"]), len(made), len(again["writes"])))
    assert again["writes"] == [], again["writes"]


PLUGIN_ACCOUNT = "dra-driver-nvidia-gpu-service-account-kubeletplugin"


def _slice(name, node=None, all_nodes=False):
    spec = {"driver": DRIVER, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}, "devices": []}
    if all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": spec}


def test_DRA_14_the_collections_policy_keeps_the_kubelet_plugin_to_its_own_nodes_slices(release, dra):
    """The role's ValidatingAdmissionPolicy for the release's kubelet plugin account (the chart's own names another
    account: DRA-14), on the real API server's admission chain: with a token of that account bound to a pod on the
    role's node - what the kubelet plugin's DaemonSet pod has - the chart's ClusterRole lets it create, update and
    delete ResourceSlices anywhere, and the policy lets it write only its node's slices and fleet-wide ones (allNodes),
    and nothing with a token bound to no pod."""
    from kubernetes import client
    admin = release.kube.api()
    core, co = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    pod_name, other = "dra14-plugin-%s" % SUFFIX, "dra14-elsewhere-%s" % SUFFIX
    pod = core.create_namespaced_pod(RELEASE_NS, {
        "metadata": {"name": pod_name},
        "spec": {"nodeName": ROLE_NODE, "serviceAccountName": PLUGIN_ACCOUNT,
                 "tolerations": [{"operator": "Exists"}], "containers": [{"name": "plugin", "image": "pause"}]}})

    def as_plugin(bound):
        spec = {"expirationSeconds": 600}
        if bound:
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod_name, "uid": pod.metadata.uid}
        tok = core.create_namespaced_service_account_token(PLUGIN_ACCOUNT, RELEASE_NS, {"spec": spec}).status.token
        conf = client.Configuration()
        conf.host, conf.ssl_ca_cert = admin.configuration.host, release.kube.ca
        conf.api_key = {"authorization": "Bearer " + tok}
        return client.CustomObjectsApi(client.ApiClient(configuration=conf))

    def refused(call, *args):
        with pytest.raises(client.ApiException) as exc:
            call(GROUP, VERSION, "resourceslices", *args)
        assert exc.value.status == 403 and "gpuops-dra-resourceslices-%s" % RELEASE_NS in exc.value.body, (
            exc.value.status, exc.value.body)
        return json.loads(exc.value.body)["message"]

    names = ["dra14-own-%s" % SUFFIX, "dra14-fleet-%s" % SUFFIX, "dra14-other-%s" % SUFFIX]
    try:
        plugin = as_plugin(bound=True)
        own = plugin.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice(names[0], ROLE_NODE))
        own["spec"]["pool"]["generation"] = 2
        plugin.replace_cluster_custom_object(GROUP, VERSION, "resourceslices", names[0], own)
        plugin.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice(names[1], all_nodes=True))
        msg = refused(plugin.create_cluster_custom_object, _slice(names[2], other))
        assert "on node %s may not write the ResourceSlices of node %s" % (ROLE_NODE, other) in msg, msg
        # another node's slice (the admin's): neither updated nor deleted by the plugin
        theirs = co.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice(names[2], other))
        theirs["spec"]["pool"]["generation"] = 2
        refused(plugin.replace_cluster_custom_object, names[2], theirs)
        refused(plugin.delete_cluster_custom_object, names[2])
        # a token bound to no pod names no node
        msg = refused(as_plugin(bound=False).create_cluster_custom_object, _slice(names[0] + "-x", ROLE_NODE))
        assert "only with a token bound to a pod on a node" in msg, msg
        for name in names[:2]:
            plugin.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
    finally:
        for name in names:
            try:
                co.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
            except client.ApiException as exc:
                assert exc.status == 404, exc
        core.delete_namespaced_pod(pod_name, RELEASE_NS, grace_period_seconds=0)


def test_DRA_14_switched_off_the_policy_goes_and_switched_on_it_comes_back(release):
    """Day 2 of DRA-14: the pool's run with resourceslice_policy false deletes the policy and its binding it recorded
    itself on (before the fix both stayed for ever: only RuntimeClasses were released), and writes nothing else; with
    the setting back on, the next run creates both again, and a re-run writes nothing."""
    policy = "gpuops-dra-resourceslices-%s" % RELEASE_NS
    both = {("validatingadmissionpolicies", None, policy), ("validatingadmissionpolicybindings", None, policy)}
    off = release.run("policy-off", dra={"resourceslice_policy": False})
    assert off["deleted"] == both and off["created"] == set(), (off["deleted"], off["created"])
    assert [w for w in off["writes"] if w[0] != "delete"] == [], off["writes"]
    on = release.run("policy-on")
    assert on["created"] == both and on["deleted"] == set(), (on["created"], on["deleted"])
    assert release.run("policy-on-again")["writes"] == []


def test_K8S_17_helm_deprecates_status_values_on_every_run_with_the_release(release):
    """kubernetes.core.helm 6.6.0 deprecates its status.values return value on every run that finds the release (here
    the install: the status it returns after installing), whatever the task reads; the role registers no helm result and
    reads no status.values. Not suppressed by the role: a task's ansible_deprecation_warnings: false does not cover a
    module's returned deprecations (ansible-core 2.21 shows them from the callback; tried in the lab)."""
    helm = [r for n, r in task_results(release.runs["install"]["result"]) if n.endswith("(GPU operator, DRA driver)")
            and not r.get("skipped")]
    assert len(helm) == 1, helm
    assert any("'status.values' return value is deprecated" in (d.get("msg") or "")
               for d in helm[0].get("deprecations") or []), helm[0]
    assert "release_values" in (helm[0].get("status") or {}), helm[0].get("status")


STRATEGY_LABEL, POOL_LABEL = "gpuops.io/sharing-strategy", "gpuops.io/sharing-pool"
OTHER_NODE, OTHER_POOL = "dra-other-%s" % SUFFIX, "dra-other-%s" % SUFFIX


def _other_dra_pools(core, own=POOL):
    """The DRA pools on the shared plane now other than ``own`` (this file's): what the role's render counts as
    other_pools (every Node labelled with strategy dra and a pool label not ``own``). Other files (test_dra_migrate_*,
    test_dra_extended_*, test_doctor_dra_real) label nodes so while they run, in parallel with this file."""
    return sorted(set(n.metadata.labels.get(POOL_LABEL) for n in core.list_node(
        label_selector="%s=dra" % STRATEGY_LABEL).items if n.metadata.labels.get(POOL_LABEL) not in (None, own)))


def _wait_alone(core, timeout=600, own=POOL):
    """Until no other file's DRA pool is on the shared plane (they last as long as their file's fixture): the pools
    waited for. This file waits with its pool's node labelled; test_dra_extended_real.py's DRAX-03 waits only after a
    removal took its node's labels off, so the two never wait for each other."""
    end, seen = time.time() + timeout, set()
    while True:
        others = _other_dra_pools(core, own)
        if not others:
            return sorted(seen)
        seen.update(others)
        if time.time() > end:
            pytest.fail("after %d s other files' DRA pools are still on the shared plane: %s" % (timeout, others))
        time.sleep(2)


def _render(run):
    [r] = [r for n, r in task_results(run["result"]) if n.endswith("Render the stack and check the input")]
    return r


def _release_kept(release, run, install="install"):
    """The absent ``run`` kept the release: its helm task skipped, none of the objects the install made deleted but
    this pool's own (none: the release's pool renders no object of its own here)."""
    helm = [r for n, r in task_results(run["result"]) if "Remove the Helm release (GPU operator, DRA driver)" in n]
    assert len(helm) == 1 and helm[0].get("skipped") is True, helm
    assert run["deleted"] & release.runs[install]["created"] == set(), run["deleted"]


def _remove_when_alone(release, core, name):
    """Run state absent as ``name`` once no other file's DRA pool is on the shared plane; the objects it deleted.
    Other files' DRA pools keep the release as OTHER_POOL does (make test runs files in parallel on the shared plane):
    a run that met one all the same (it came between the wait and the run) is checked to have kept the release, then
    the wait and the run are repeated."""
    deleted = set()
    for attempt in range(5):
        start = time.time()
        waited = _wait_alone(core)
        if waited:
            print("\nDRA-01 %s: waited %.0f s for other files' DRA pools %s" % (name, time.time() - start, waited))
        gone = release.run(name, "absent")
        deleted |= gone["deleted"]
        if not _render(gone)["other_pools"]:
            return deleted
        _release_kept(release, gone)
        del release.runs[name]
    pytest.fail("five removals in a row met another file's DRA pool: %s" % _render(gone)["other_pools"])


def test_DRA_01_absent_keeps_the_release_while_another_dra_pool_is_there(release, dra):
    """Before the removal below: with another DRA pool on the cluster (a Node labelled strategy dra, pool OTHER_POOL),
    state absent removes this pool's objects but keeps the release - the chart's DeviceClasses and kubelet plugin serve
    that pool too (render other_pools; roles/gpu_sharing_stack/tasks/absent.yml)."""
    from kubernetes import client
    core = client.CoreV1Api(release.kube.api())
    core.create_node(bare_node(OTHER_NODE, "t4x1", facts=T4, labels={STRATEGY_LABEL: "dra", POOL_LABEL: OTHER_POOL}))
    try:
        kept = release.run("absent-kept", "absent")
    finally:
        core.delete_node(OTHER_NODE)
    assert OTHER_POOL in _render(kept)["other_pools"], _render(kept)["other_pools"]
    _release_kept(release, kept)
    co = client.CustomObjectsApi(release.kube.api())
    for name in ("gpu.nvidia.com", "mig.nvidia.com"):
        co.get_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)


def test_DRA_01_absent_removes_exactly_what_the_install_made(release, dra):
    """Last in this file (the claims above use the chart's DeviceClasses): state absent uninstalls the release, which
    deletes every object the install created but the namespace (helm leaves a namespace it was asked to create) and
    the chart's CustomResourceDefinitions (its crds/ directory: helm installs those and never deletes them, so no
    user's ComputeDomain goes with an uninstall); the DeviceClasses are gone."""
    from kubernetes import client
    core = client.CoreV1Api(release.kube.api())
    deleted = set(release.runs.get("absent-kept", {}).get("deleted", set())) | _remove_when_alone(release, core, "absent")
    # (the uninstall deleted gpu.nvidia.com, which maps nvidia.com/gpu: put back the scheduler's mapping of the lab's
    # shared class for the other files' pods - conftest.gpu_extended_mapping, kubernetes#141103)
    gpu_extended_mapping(client.CustomObjectsApi(release.kube.api()), create=False)
    made = release.runs["install"]["created"]
    kept = set(o for o in made if o[0] in ("namespaces", "customresourcedefinitions"))
    # (the CRDs are created only where the session has none yet: the chart oracle may have applied them first)
    assert ("namespaces", None, RELEASE_NS) in kept and kept <= {
        ("namespaces", None, RELEASE_NS), ("customresourcedefinitions", None, "computedomains.resource.nvidia.com"),
        ("customresourcedefinitions", None, "computedomaincliques.resource.nvidia.com")}, kept
    assert deleted == made - kept, (sorted(made - kept - deleted), sorted(deleted - made))
    co = client.CustomObjectsApi(release.kube.api())
    for name in ("gpu.nvidia.com", "mig.nvidia.com"):
        with pytest.raises(client.ApiException) as exc:
            co.get_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)
        assert exc.value.status == 404


def test_K8S_21_helm_4_installs_reruns_and_removes_the_release(release, dra):
    """After the removal above, the same release with helm 4 (lab/go/helm-4: helm.sh/helm/v4 v4.3.1) first on PATH,
    driven by kubernetes.core.helm 6.6.0 (helm 4 since 6.4.0): the install creates what helm 3's did (helm 4 applies
    server-side: its creates are apply patches, code 201), but the namespace and the CRDs that are still there; the
    same run again makes 0 writes; state absent deletes exactly what the install made. The run before the removal
    (`again-helm-4`, the fixture) was helm 4 on the release helm 3 installed: 0 writes too."""
    from kubernetes import client
    core = client.CoreV1Api(release.kube.api())
    # helm 4 on the release helm 3 installed (upgrade's --server-side auto keeps the release's client-side apply)
    assert release.runs["again-helm-4"]["writes"] == [], release.runs["again-helm-4"]["writes"]
    v3 = release.runs["install"]["created"]
    with helm_on_path("helm-4"):
        first = release.run("install-helm-4")
        again = release.run("again-helm-4-installed")
        deleted = _remove_when_alone(release, core, "absent-helm-4")
    gpu_extended_mapping(client.CustomObjectsApi(release.kube.api()), create=False)
    made = first["created"]
    assert made == set(o for o in v3 if o[0] not in ("namespaces", "customresourcedefinitions")), (
        sorted(made ^ v3))
    applied = [w for w in first["writes"] if w[0] == "patch"]
    assert applied, first["writes"]
    assert [w for w in first["writes"] if w[2] >= 300] == [], first["writes"]
    assert again["writes"] == [], again["writes"]
    assert deleted == made, (sorted(made - deleted), sorted(deleted - made))
    print("\nDRA driver release with helm 4 at %s: %d writes (%d objects created, %d by server-side apply), re-run 0"
          % (release.kube.version, len(first["writes"]), len(made), len(applied)))


def _kubernetes_core_labelled(tmp_path, version):
    """A collections path whose kubernetes.core is the installed one (every entry linked) but for its MANIFEST.json,
    which says ``version``: what filter helm_client_check reads on the controller."""
    import ansible_collections.kubernetes.core as core
    real = list(core.__path__)[0]
    dest = tmp_path / "ansible_collections" / "kubernetes" / "core"
    dest.mkdir(parents=True)
    for entry in os.listdir(real):
        if entry != "MANIFEST.json":
            os.symlink(os.path.join(real, entry), str(dest / entry))
    with open(os.path.join(real, "MANIFEST.json")) as f:
        manifest = json.load(f)
    manifest["collection_info"]["version"] = version
    (dest / "MANIFEST.json").write_text(json.dumps(manifest))
    return str(tmp_path)


def test_K8S_21_helm_4_with_an_older_kubernetes_core_is_refused_before_any_write(release, dra, tmp_path):
    """helm 4 first on PATH and a controller whose kubernetes.core says 6.3.0 (the installed collection relabelled:
    6.3.0 refuses helm 4, CHANGELOG.rst of kubernetes.core): the role stops at its helm client check, before the
    stack's objects and the release - 0 writes - naming both versions and what to change."""
    ac = _kubernetes_core_labelled(tmp_path, "6.3.0")
    with helm_on_path("helm-4"):
        run = release.run("refused-helm-4", env={"ANSIBLE_COLLECTIONS_PATH": "%s:%s" % (
            ac, os.path.join(ROOT, "build", "collections"))}, expect_rc=2)
    [(task, msg)] = run["failures"]
    assert task.endswith("Check that kubernetes.core can drive that helm client"), run["failures"]
    assert "helm 4.3.1 on localhost is helm 4" in msg and "kubernetes.core 6.3.0" in msg and "6.4.0" in msg, msg
    assert run["writes"] == [], run["writes"]
