"""Device taints on the lab's real control planes (issue #41, item 1): what the remediation loop (module
gpuops.k8s_gpu.gpu_remediation, docs/remediation.md) relies on, checked against upstream's own kube-apiserver,
kube-scheduler and kube-controller-manager (lab/kube/real.py; k8s.io/kubernetes v1.37.2 and v1.34.4 built from the Go
module proxy).

* 1.37 (the shared control plane): resource.k8s.io/v1 serves DeviceTaintRule (DRADeviceTaints and DRADeviceTaintRules
  GA, on by default); effect None is a dry run whose status (condition EvictionInProgress, reason NoEffect, written by
  kube-controller-manager's device-taint-eviction controller) counts the pods a NoExecute would evict; NoSchedule keeps
  the real scheduler from allocating the device and evicts nothing; NoExecute makes the controller delete exactly the
  pods whose claims hold the device; deleting the rule gives the device back to the scheduler.
* 1.34 (a control plane of this file's own): no version of resource.k8s.io serves devicetaintrules (DRADeviceTaints
  alpha, off by default; its only API version v1alpha3 is off too), so the loop falls back to the node (taint and
  cordon).

The devices are those of a driver of this file's own (a ResourceSlice written by the test as a DRA driver would, for a
kwok node of its own), so nothing here touches another test's pool. Conformance: docs/conformance/remediation.md
(rows REM-*; each test is named after its row).
Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_remediation_real.py
"""
from __future__ import annotations

import os
import time

import pytest

from conftest import private_kube, wait_until as wait

SUFFIX = "%d" % os.getpid()
NS = "rem-%s" % SUFFIX
NODE = "rem-dra-%s" % SUFFIX
DRIVER = "rem-%s.lab.gpuops.io" % SUFFIX
CLASS = "rem-%s" % SUFFIX
TAINT_KEY = "gpuops.lab/rem-%s" % SUFFIX      # the node's own taint: only this file's pods tolerate it
GROUP, V1 = "resource.k8s.io", "v1"
DEVICES = ("gpu-0", "gpu-1", "gpu-2")


def _uuid(name):
    return "GPU-%08d-0000-4000-8000-%012d" % (int(SUFFIX) % 10 ** 8, DEVICES.index(name))


class Lab(object):
    def __init__(self, kube):
        from kubernetes import client
        self.kube = kube
        self.api = kube.api()
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)

    def pod(self, name, labels=None):
        """A pod with a claim of its own (ResourceClaim ``name``, one device of this file's class) on this file's node."""
        self.co.create_namespaced_custom_object(GROUP, V1, NS, "resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}})
        self.core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": labels or {}}, "spec": {
            "terminationGracePeriodSeconds": 0, "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "c", "image": "registry.example.com/cuda:12",
                            "resources": {"claims": [{"name": "gpu"}]}}]}})

    def phase(self, name):
        from kubernetes import client
        try:
            return self.core.read_namespaced_pod(name, NS).status.phase
        except client.ApiException as exc:
            assert exc.status == 404, exc
            return None

    def running(self, name, timeout=60):
        return wait("pod %s/%s Running" % (NS, name), lambda: self.phase(name) == "Running", timeout)

    def device_of(self, claim):
        alloc = (self.co.get_namespaced_custom_object(GROUP, V1, NS, "resourceclaims", claim).get("status") or {})
        results = ((alloc.get("allocation") or {}).get("devices") or {}).get("results") or []
        return results[0]["device"] if results else None

    def rule(self, name, device, effect):
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
                "spec": {"deviceSelector": {"driver": DRIVER, "pool": NODE, "device": device},
                         "taint": {"key": "gpu.gpuops.io/unhealthy", "value": "xid-48", "effect": effect}}}
        try:
            return self.co.create_cluster_custom_object(GROUP, V1, "devicetaintrules", body)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
        return self.co.patch_cluster_custom_object(GROUP, V1, "devicetaintrules", name,
                                                   {"spec": {"taint": {"effect": effect}}})

    def condition(self, name):
        rule = self.co.get_cluster_custom_object(GROUP, V1, "devicetaintrules", name)
        for c in (rule.get("status") or {}).get("conditions") or []:
            if c["type"] == "EvictionInProgress" and c.get("observedGeneration") == rule["metadata"]["generation"]:
                return c
        return None


def served(kube):
    """{version: True} for the versions of resource.k8s.io whose discovery lists devicetaintrules."""
    from kubernetes import client
    api = kube.api()
    out = {}
    groups = client.ApisApi(api).get_api_versions().groups
    for g in groups:
        if g.name != GROUP:
            continue
        for v in g.versions:
            res = client.CustomObjectsApi(api).get_api_resources(GROUP, v.version).resources
            out[v.version] = any(r.name == "devicetaintrules" for r in res)
    return out


@pytest.fixture(scope="module")
def lab(kube_real):
    from kubernetes import client
    lab = Lab(kube_real)
    lab.core.create_namespace({"metadata": {"name": NS}})
    wait("ServiceAccount %s/default" % NS, lambda: lab.core.list_namespaced_service_account(
        NS, field_selector="metadata.name=default").items)
    lab.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "type": "kwok"},
        "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                   "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}})
    lab.co.create_cluster_custom_object(GROUP, V1, "deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "%s"' % DRIVER}}]}})
    lab.co.create_cluster_custom_object(GROUP, V1, "resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": NODE},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": d, "attributes": {"uuid": {"string": _uuid(d)}, "type": {"string": "gpu"}}}
                             for d in DEVICES]}})
    wait("node %s Ready (kwok)" % NODE, lambda: any(
        c.type == "Ready" and c.status == "True" for c in lab.core.read_node(NODE).status.conditions or []))
    yield lab
    for plural, name in (("devicetaintrules", "rem-%s-a" % SUFFIX), ("resourceslices", NODE), ("deviceclasses", CLASS)):
        try:
            lab.co.delete_cluster_custom_object(GROUP, V1, plural, name)
        except client.ApiException as exc:
            assert exc.status == 404, exc
    lab.core.delete_namespace(NS)
    lab.core.delete_node(NODE)


def test_REM_01_device_taint_rule_served_at_137(lab):
    """resource.k8s.io/v1 lists devicetaintrules (with its status subresource) at 1.37; the gates are on by default:
    the shared control plane runs without any --feature-gates."""
    assert lab.kube.version == "1.37"
    versions = served(lab.kube)
    assert versions.get("v1") is True, versions
    names = {r.name: r for r in lab.co.get_api_resources(GROUP, V1).resources}
    assert "devicetaintrules/status" in names and names["devicetaintrules"].namespaced is False
    argv = open("/proc/%d/cmdline" % _pid(lab.kube, "kube-apiserver"), "rb").read().decode(errors="replace")
    assert "feature-gates" not in argv and "runtime-config" not in argv, "the lab sets no gates at 1.37"


def _pid(kube, name):
    import json
    with open(os.path.join(kube.state, "ready")) as f:
        return json.load(f)["pids"][name]


def test_REM_02_none_is_a_dry_run_noschedule_and_noexecute_are_enforced(lab):
    """The loop's quarantine on the real programs, one device of three: None counts the pods a NoExecute would evict
    (controller status) and changes nothing; NoSchedule keeps the scheduler off the device, running pods stay;
    NoExecute deletes exactly the pods whose claims hold the device; the rule's deletion gives the device back."""
    rule = "rem-%s-a" % SUFFIX
    lab.pod("a")
    lab.pod("b")
    lab.running("a")
    lab.running("b")
    failing = lab.device_of("a")
    assert failing in DEVICES and lab.device_of("b") != failing
    # None: a dry run (device-taint-eviction controller status), nothing evicted
    lab.rule(rule, failing, "None")
    cond = wait("EvictionInProgress of %s with effect None" % rule, lambda: lab.condition(rule), 60)
    assert cond["reason"] == "NoEffect" and cond["status"] == "False", cond
    assert "1 published device selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace" \
        in cond["message"], cond["message"]
    # NoSchedule: the scheduler allocates around the device; the running pod stays
    lab.rule(rule, failing, "NoSchedule")
    lab.pod("c")
    lab.running("c")
    assert lab.device_of("c") not in (failing, lab.device_of("b"))
    lab.pod("d")       # only the tainted device is left
    wait("pod d unschedulable (the only free device is tainted NoSchedule)", lambda: any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in lab.core.read_namespaced_pod("d", NS).status.conditions or []), 60)
    assert lab.device_of("d") is None
    assert lab.phase("a") == "Running"
    # NoExecute: the controller deletes the pod that holds the device, and only that one
    lab.rule(rule, failing, "NoExecute")
    wait("pod a deleted by the device-taint-eviction controller", lambda: lab.phase("a") is None, 60)
    time.sleep(2)
    assert lab.phase("b") == "Running" and lab.phase("c") == "Running" and lab.device_of("d") is None
    cond = wait("EvictionInProgress of %s with effect NoExecute" % rule, lambda: lab.condition(rule), 60)
    assert cond["reason"] in ("Completed", "NotStarted", "PodsPendingEviction"), cond
    # release: the device is allocatable again
    lab.co.delete_cluster_custom_object(GROUP, V1, "devicetaintrules", rule)
    lab.running("d", 90)
    assert lab.device_of("d") == failing


def test_REM_03_no_device_taint_rule_at_134(tmp_path_factory):
    """1.34.4: DRADeviceTaints is alpha and off, v1alpha3 (its only API) is not served by default: no version of
    resource.k8s.io lists devicetaintrules, and a v1 ResourceSlice's device taints are dropped (the field is gated).
    gpu_remediation there quarantines a GPU of a DRA slice at node level (taint and cordon), mode dra refuses, the
    release gives the node back."""
    with private_kube(tmp_path_factory.mktemp("kube-134"), "1.34") as kube:
        assert kube.version == "1.34"
        versions = served(kube)
        assert "v1" in versions and not any(versions.values()), versions
        from kubernetes import client
        co = client.CustomObjectsApi(kube.api())
        slice_ = co.create_cluster_custom_object(GROUP, V1, "resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "rem134"},
            "spec": {"driver": DRIVER, "nodeName": "rem134", "pool": {"name": "rem134", "generation": 1,
                                                                      "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}]}})
        assert "taints" not in slice_["spec"]["devices"][0], slice_["spec"]["devices"][0]
        # the loop falls back to the node: the GPU is published by a DRA slice, but no rule can be made
        client.CoreV1Api(kube.api()).create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "rem134", "annotations": {"kwok.x-k8s.io/node": "fake"}}})
        uuid = "GPU-13400000-0000-4000-8000-000000000000"
        co.patch_cluster_custom_object(GROUP, V1, "resourceslices", "rem134", {"spec": {"devices": [
            {"name": "gpu-0", "attributes": {"uuid": {"string": uuid}}}]}})
        out = _module(None, kube.kubeconfig, node="rem134", gpus={uuid: {"findings": [FINDING]}}, dra_driver=DRIVER)
        assert out.get("failed") is not True and out["plan"][0]["kind"] == "node", out
        assert out["holders"] == {uuid: None} and out["evicted"] == []
        n = client.CoreV1Api(kube.api()).read_node("rem134")
        assert n.spec.unschedulable is True and "gpuops.io/gpu-unhealthy" in [t.key for t in n.spec.taints]
        mode_dra = _module(None, kube.kubeconfig, node="rem134", gpus={uuid: {"findings": [FINDING]}},
                           dra_driver=DRIVER, mode="dra")
        assert mode_dra["failed"] is True and "does not serve DeviceTaintRule" in mode_dra["msg"]
        assert _module(None, kube.kubeconfig, node="rem134", state="released")["released"] == [uuid]
        n = client.CoreV1Api(kube.api()).read_node("rem134")
        assert not n.spec.unschedulable and "gpuops.io/gpu-unhealthy" not in [t.key for t in n.spec.taints or []]


def _module(lab, kubeconfig, check=False, **args):
    import json
    from conftest import lab_collections_path, run_module
    return run_module(lab_collections_path(), "gpuops.k8s_gpu.gpu_remediation",
                      json.dumps(dict(args, kubeconfig=kubeconfig)), check=check)


def _record(lab):
    import json
    text = (lab.core.read_node(NODE).metadata.annotations or {}).get("gpuops.io/gpu-remediation")
    return json.loads(text) if text else None


def _events(lab, reason):
    return [e for e in lab.core.list_namespaced_event("default", field_selector="involvedObject.name=%s" % NODE).items
            if e.reason == reason]


def _clean(lab):
    lab.core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    lab.co.delete_collection_namespaced_custom_object(GROUP, V1, NS, "resourceclaims")
    wait("namespace %s empty" % NS, lambda: not lab.core.list_namespaced_pod(NS).items and not lab.co.list_namespaced_custom_object(
        GROUP, V1, NS, "resourceclaims")["items"], 60)


FINDING = {"id": "ecc_uncorrectable", "severity": "critical", "evidence": ["volatile uncorrectable ECC: 2"]}


def test_REM_04_REM_05_REM_08_the_module_on_the_real_control_plane(lab):
    """gpu_remediation against 1.37's real programs: a DRA GPU quarantined by a DeviceTaintRule (dry run first, the
    controller's count returned), only its holder evicted through the Eviction API, a re-run writes nothing, check mode
    writes nothing, the release deletes the rule and the record and leaves Events; then the node-level fallback (mode
    node, the device-plugin allocations given) taints and cordons, evicts only the holder of that GPU and the release
    keeps the site's own taint."""
    user = "gpuops-test-rem-%s" % SUFFIX
    kc = lab.kube.user(user)
    # a clean start: the pods and claims of the test before go, three pods of this test's own hold the three GPUs
    _clean(lab)
    pods = ("m0", "m1", "m2")
    for name in pods:
        lab.pod(name)
    for name in pods:
        lab.running(name)
    devices = dict((p, lab.device_of(p)) for p in pods)
    victim, victim2, keep = pods
    uuid = _uuid(devices[victim])
    gpus = {uuid: {"findings": [FINDING]}}
    out = _module(lab, kc, node=NODE, gpus=gpus, dra_driver=DRIVER, drain_timeout=30)
    assert out.get("failed") is not True, out
    assert out["plan"][0]["kind"] == "dra" and out["plan"][0]["device"] == [DRIVER, NODE, devices[victim]]
    rule = out["plan"][0]["rule"]
    assert "1 pod would be evicted in 1 namespace" in (out["dry_runs"][rule] or ""), out["dry_runs"]
    assert out["evicted"] == ["%s/%s" % (NS, victim)] and out["holders"] == {uuid: ["%s/%s" % (NS, victim)]}
    wait("pod %s evicted" % victim, lambda: lab.phase(victim) is None, 60)
    others = [victim2, keep]
    assert all(lab.phase(p) == "Running" for p in others), [(p, lab.phase(p)) for p in others]
    assert lab.co.get_cluster_custom_object(GROUP, V1, "devicetaintrules", rule)["spec"]["taint"]["effect"] == "NoSchedule"
    assert _record(lab)["gpus"][uuid]["why"] == ["ecc_uncorrectable"]
    assert _events(lab, "GPUQuarantined")
    start = lab.kube.mark()
    again = _module(lab, kc, node=NODE, gpus=gpus, dra_driver=DRIVER)
    assert again["changed"] is False and again["actions"] == []
    check = _module(lab, kc, check=True, node=NODE, state="released")
    assert check["changed"] is True and check["released"] == [uuid]
    assert lab.kube.writes(start, lab.kube.mark(), user=user) == []
    rel = _module(lab, kc, node=NODE, state="released")
    assert rel["released"] == [uuid] and _record(lab) is None and _events(lab, "GPUReleased")
    start = lab.kube.mark()
    assert _module(lab, kc, node=NODE, state="released")["changed"] is False
    assert lab.kube.writes(start, lab.kube.mark(), user=user) == []
    # node level (a device-plugin pool): taint and cordon, only the holder named by the allocations is evicted
    uuid2 = _uuid(devices[victim2])
    allocs = [{"namespace": NS, "name": p, "devices": [_uuid(devices[p])]} for p in others]
    out = _module(lab, kc, node=NODE, gpus={uuid2: {"findings": [FINDING]}}, mode="node", allocations=allocs,
                  drain_timeout=30)
    assert out.get("failed") is not True, out
    assert out["evicted"] == ["%s/%s" % (NS, victim2)]
    n = lab.core.read_node(NODE)
    # the node-lifecycle controller adds node.kubernetes.io/unschedulable for the cordon
    assert n.spec.unschedulable is True and {TAINT_KEY, "gpuops.io/gpu-unhealthy"} <= set(t.key for t in n.spec.taints)
    wait("pod %s evicted" % victim2, lambda: lab.phase(victim2) is None, 60)
    assert lab.phase(keep) == "Running"
    _module(lab, kc, node=NODE, state="released")
    n = lab.core.read_node(NODE)
    assert not n.spec.unschedulable and "gpuops.io/gpu-unhealthy" not in [t.key for t in n.spec.taints]
    wait("only the site's taint left (the controller takes its unschedulable taint off)",
         lambda: [t.key for t in lab.core.read_node(NODE).spec.taints or []] == [TAINT_KEY], 60)


def test_REM_07_simulator_fault_to_device_quarantine(lab, tmp_path):
    """Detection driven by the NVML simulator's inventory (hgx-a100-80gb, 8 GPUs): GPU 2 with uncorrectable volatile
    ECC errors and an Xid 79 in the kernel log for GPU 5's PCI address. gpu_doctor (run as Ansible runs it on a node)
    names exactly those two UUIDs in ``remediation`` (reset for GPU 2; reboot, not allowed unless asked, for GPU 5);
    gpu_remediation, given that value, puts a DeviceTaintRule on exactly those two devices of a slice that publishes
    the inventory's UUIDs, and the release removes both."""
    import json
    import subprocess
    from conftest import ROOT, VENV_BIN, lab_collections_path
    subprocess.run(["bash", os.path.join(ROOT, "lab", "nvml_sim", "build.sh")], check=True, capture_output=True)
    inv = json.load(open(os.path.join(ROOT, "lab", "nvml_sim", "inventories", "hgx-a100-80gb.json")))
    inv["gpus"][2]["ecc_errors"] = {"uncorrected_volatile": 2, "uncorrected_aggregate": 2}
    bus5 = inv["gpus"][5]["pci_bus_id"]          # 00000000:BB:00.0 -> the kernel's 0000:BB:00
    (tmp_path / "inventory.json").write_text(json.dumps(inv))
    (tmp_path / "dmesg.txt").write_text("[ 9001.1] NVRM: Xid (PCI:0000:%s): 79, pid=1, name=python3, GPU has fallen "
                                        "off the bus.\n" % bus5.split(":", 1)[1].rsplit(".", 1)[0].lower())
    (tmp_path / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "checks": ["gpu_lost", "xid", "recovery_action", "ecc", "memory_repair"],
        "kernel_log": str(tmp_path / "dmesg.txt")}}))
    env = dict(os.environ, PYTHONPATH=lab_collections_path(), LD_LIBRARY_PATH=os.path.join(ROOT, "lab", ".build", "nvml_sim"),
               NVML_SIM_INVENTORY=str(tmp_path / "inventory.json"), NVML_SIM_STATE=str(tmp_path / "state.json"))
    proc = subprocess.run([os.path.join(VENV_BIN, "python"), os.path.join(ROOT, "plugins", "modules", "gpu_doctor.py"),
                           str(tmp_path / "args.json")], env=env, capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stdout)
    u2, u5 = inv["gpus"][2]["uuid"], inv["gpus"][5]["uuid"]
    rem = doc["remediation"]
    assert sorted(rem) == sorted([u2, u5]), rem
    assert [f["id"] for f in rem[u2]["findings"]] == ["ecc_uncorrectable"] and rem[u2]["repair"]["action"] == "reset"
    assert [f["id"] for f in rem[u5]["findings"]] == ["xid_79"]
    assert rem[u5]["repair"]["action"] == "reboot" and rem[u5]["repair"]["allowed"] is False
    pool = "rem-sim-%s" % SUFFIX
    lab.co.create_cluster_custom_object(GROUP, V1, "resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": pool},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-%d" % i, "attributes": {"uuid": {"string": g["uuid"]}}}
                             for i, g in enumerate(inv["gpus"])]}})
    try:
        kc = lab.kube.user("gpuops-test-rem-%s" % SUFFIX)
        out = _module(lab, kc, node=NODE, gpus=rem, dra_driver=DRIVER, dry_run_timeout=0)
        assert out.get("failed") is not True, out
        assert sorted((e["uuid"], e["kind"], e["device"][2]) for e in out["plan"]) == sorted(
            [(u2, "dra", "gpu-2"), (u5, "dra", "gpu-5")])
        for e in out["plan"]:
            rule = lab.co.get_cluster_custom_object(GROUP, V1, "devicetaintrules", e["rule"])
            assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": pool, "device": e["device"][2]}
        assert _record(lab)["gpus"][u5]["repair"]["action"] == "reboot"
        rel = _module(lab, kc, node=NODE, state="released")
        assert sorted(rel["released"]) == sorted([u2, u5]) and _record(lab) is None
        assert not [r for r in lab.co.list_cluster_custom_object(GROUP, V1, "devicetaintrules")["items"]
                    if r["spec"]["deviceSelector"].get("pool") == pool]
    finally:
        lab.co.delete_cluster_custom_object(GROUP, V1, "resourceslices", pool)


def _playbook(lab, tmp_path, inventory_json, kubeconfig, *extra):
    """playbooks/remediate.yml on one local host whose NVML is the simulator with ``inventory_json``; the node's
    Kubernetes name is this file's kwok node; the kernel log is an empty file (no Xid); no nvidia-smi (no reset); the
    kubelet root dir an empty directory (no device-plugin checkpoint: no allocations)."""
    import json
    import subprocess
    from conftest import ROOT, VENV_BIN, lab_collections_path
    (tmp_path / "inventory.json").write_text(json.dumps(inventory_json))
    (tmp_path / "dmesg.txt").write_text("")
    (tmp_path / "kubelet").mkdir(exist_ok=True)    # the host's kubelet root dir: no device plugin, no checkpoint
    (tmp_path / "hosts.yml").write_text(json.dumps({"gpu_nodes": {"hosts": {"rem-host": {
        "ansible_connection": "local", "ansible_python_interpreter": os.path.join(VENV_BIN, "python"),
        "gpu_remediation_node_name": NODE}}}}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=lab_collections_path(),
               ANSIBLE_CONFIG=os.path.join(ROOT, "lab", "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="0",
               LD_LIBRARY_PATH=os.path.join(ROOT, "lab", ".build", "nvml_sim"),
               NVML_SIM_INVENTORY=str(tmp_path / "inventory.json"), NVML_SIM_STATE=str(tmp_path / "state.json"))
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), "playbooks/remediate.yml",
           "-e", json.dumps({"gpuops_become": False, "gpuops_k8s_kubeconfig": kubeconfig,
                             "gpu_remediation_kernel_log": str(tmp_path / "dmesg.txt"),
                             "gpu_remediation_kubelet_root_dir": str(tmp_path / "kubelet"),
                             "gpu_remediation_dra_driver": DRIVER, "gpu_remediation_reset": False,
                             # a kwok node runs no container: the validation pod is proved on a real node
                             # (test_remediation_device_plugin_real.py, REM-16)
                             "gpu_remediation_validate": False,
                             "gpu_remediation_dry_run_timeout": 0})] + list(extra)
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def test_REM_11_the_playbook_quarantines_keeps_until_healthy_then_releases(lab, tmp_path):
    """playbooks/remediate.yml (role gpu_remediation) on a host whose NVML is the simulator (hgx-a100-80gb, GPU 3
    with uncorrectable ECC errors), for this file's kwok node: check mode writes nothing; a run without the reset
    quarantines GPU 3 by a DeviceTaintRule and, the doctor still finding it unhealthy, keeps it; a run with the reset
    (the lab's nvidia-smi on the simulator) resets it, the doctor finds it healthy and the run releases it; a run on
    the healthy node writes nothing."""
    import json
    from conftest import ROOT
    base = json.load(open(os.path.join(ROOT, "lab", "nvml_sim", "inventories", "hgx-a100-80gb.json")))
    faulty = json.loads(json.dumps(base))
    faulty["gpus"][3]["ecc_errors"] = {"uncorrected_volatile": 1, "uncorrected_aggregate": 1}
    u3 = base["gpus"][3]["uuid"]
    pool = "rem-play-%s" % SUFFIX
    lab.co.create_cluster_custom_object(GROUP, V1, "resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": pool},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-%d" % i, "attributes": {"uuid": {"string": g["uuid"]}}}
                             for i, g in enumerate(base["gpus"])]}})
    user = "gpuops-test-rem-play-%s" % SUFFIX
    kc = lab.kube.user(user)
    try:
        start = lab.kube.mark()
        _playbook(lab, tmp_path, faulty, kc, "--check", "--diff")
        assert lab.kube.writes(start, lab.kube.mark(), user=user) == [] and _record(lab) is None
        _playbook(lab, tmp_path, faulty, kc)
        rec = _record(lab)
        assert list(rec["gpus"]) == [u3] and rec["gpus"][u3]["device"] == [DRIVER, pool, "gpu-3"]
        rule = rec["gpus"][u3]["rule"]
        assert lab.co.get_cluster_custom_object(GROUP, V1, "devicetaintrules", rule)["spec"]["taint"]["effect"] == \
            "NoSchedule"
        # the whole loop in one run: the reset (the lab's nvidia-smi on the simulator) clears the fault, the doctor
        # finds the GPU healthy and the same run releases it
        out = _playbook(lab, tmp_path, faulty, kc, "-e", json.dumps({
            "gpu_remediation_reset": True, "gpu_remediation_reset_delay": 0,
            "gpu_remediation_nvidia_smi": os.path.join(ROOT, "lab", "nvml_sim", "nvidia-smi")}))
        assert "Repair - reset the GPUs a reset repairs" in out
        assert _record(lab) is None
        assert rule not in [r["metadata"]["name"] for r in
                            lab.co.list_cluster_custom_object(GROUP, V1, "devicetaintrules")["items"]]
        start = lab.kube.mark()
        _playbook(lab, tmp_path, base, kc)
        assert lab.kube.writes(start, lab.kube.mark(), user=user) == []
    finally:
        lab.co.delete_cluster_custom_object(GROUP, V1, "resourceslices", pool)


def test_REM_04_a_disruption_budget_holds_the_drain(lab):
    """The drain asks the Eviction API, so a PodDisruptionBudget the real API server enforces (minAvailable 1 on the
    GPU's holder) refuses it: the module fails after drain_timeout naming the pod, the GPU stays quarantined (the rule
    stays); once the budget allows it, a re-run evicts the pod; the other GPU's pod stays."""
    from kubernetes import client
    _clean(lab)
    lab.pod("q0", {"app": "rem-pdb"})
    lab.pod("q1")
    lab.running("q0")
    lab.running("q1")
    uuid = _uuid(lab.device_of("q0"))
    policy = client.PolicyV1Api(lab.api)
    policy.create_namespaced_pod_disruption_budget(NS, {"metadata": {"name": "rem-pdb"}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": {"app": "rem-pdb"}}}})
    wait("the disruption controller allows 0 disruptions", lambda: (lambda st: st is not None and st.current_healthy == 1
         and st.disruptions_allowed == 0)(policy.read_namespaced_pod_disruption_budget("rem-pdb", NS).status), 60)
    kc = lab.kube.user("gpuops-test-rem-%s" % SUFFIX)
    gpus = {uuid: {"findings": [FINDING]}}
    out = _module(lab, kc, node=NODE, gpus=gpus, dra_driver=DRIVER, drain_timeout=4, dry_run_timeout=0)
    assert out["failed"] is True and out["pods_left"] == ["%s/q0" % NS] and "PodDisruptionBudget" in out["msg"], out
    assert lab.phase("q0") == "Running" and lab.phase("q1") == "Running"
    assert uuid in _record(lab)["gpus"]
    policy.delete_namespaced_pod_disruption_budget("rem-pdb", NS)
    out = _module(lab, kc, node=NODE, gpus=gpus, dra_driver=DRIVER, drain_timeout=30)
    assert out.get("failed") is not True and out["evicted"] == ["%s/q0" % NS], out
    wait("pod q0 evicted", lambda: lab.phase("q0") is None, 60)
    assert lab.phase("q1") == "Running"
    assert _module(lab, kc, node=NODE, state="released")["released"] == [uuid]
