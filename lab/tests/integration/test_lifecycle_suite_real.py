"""Day 2 on one cluster (issue #37): pools of every strategy on ONE upstream control plane (lab/kube/real.py 1.37,
private to this file: pools of one strategy share cluster-scoped objects whose names carry no pool), kwok nodes, and
sequences of operations with the invariants of lab/tests/lifecycle.py checked after every step:

* every GPU node carries its own pool's labels only, and runs exactly its pool's DaemonSets (their nodeSelector,
  required node affinity and taints evaluated against the node's labels as the scheduler does); the GPU operator's
  operands (upstream's own selector: nvidia.com/gpu.present without deploy.operands=false) only on its pools' nodes;
* the collection's objects in the cluster are exactly the current pools' renders (nothing of an uninstalled pool
  remains), and each shared object records exactly the pools that use it (user.gpuops.io/<pool>);
* a re-run of every pool sends no write (audit log, the suite's own user) and the modules report no change;
* the share report (gpu_share_report's model) shows no conflict and no strategy other than the node's pool's;
* a refused step wrote nothing.

Two tests: a scripted sequence (add a pool of each strategy, change each setting that matters, move a node, migrate
pools, add and remove nodes, uninstall one, uninstall all), and the same operations as a hypothesis state machine
(derandomized, bounded in make test; GPUOPS_LIFECYCLE_EXAMPLES / GPUOPS_LIFECYCLE_STEPS for a soak run), shrunk to the
smallest failing sequence when an invariant breaks. The collection's Python layer runs in process (the functions the
roles' modules call, lab/tests/lifecycle.py); one scripted sequence through ansible-playbook is test_lifecycle_real.py.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_lifecycle_suite_real.py
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "lab" / "tests"))
sys.path.insert(0, str(ROOT / "build" / "collections"))

from conftest import private_kube, wait_until  # noqa: E402
from test_gpu_sharing_stack import A100, GPUSHARE_IMAGES, T4, VOLCANO_CONF  # noqa: E402
from test_gpu_sharing_stack_real import VOLCANO_SCHEDULER  # noqa: E402

import gpu_kwok_nodes  # noqa: E402

import lifecycle  # noqa: E402

sys.path.insert(0, str(ROOT / "lab" / "kube"))
import dra_slices  # noqa: E402

T4_NODES = ["lcs-t%d" % i for i in range(1, 9)]
A100_NODES = ["lcs-a%d" % i for i in range(1, 4)]
# two machines of two A100s: the GPUs a real lab node ran the collection's time-slicing and MPS pools on (3 replicas,
# lab/kube/real.py RECORDED_SHARING), so a pool of those strategies there publishes what that node published
A100X2_NODES = ["lcs-s1", "lcs-s2"]
NODES = T4_NODES + A100_NODES + A100X2_NODES
A100X2 = dict(A100, gpus=A100["gpus"][:2], sharing=dict(A100["sharing"], mig=dict(
    A100["sharing"]["mig"], gpus=[0, 1], profiles=dict((k, v) for k, v in A100["sharing"]["mig"]["profiles"].items()
                                                       if k in ("0", "1")))))
FACTS = dict([(n, T4) for n in T4_NODES] + [(n, A100) for n in A100_NODES] + [(n, A100X2) for n in A100X2_NODES])
# the nodes as a real lab node of the same GPUs published them (lab/tests/gpu_kwok_nodes.py; FACTS must agree)
SHAPES = dict([(n, "t4x1") for n in T4_NODES] + [(n, "a100x8") for n in A100_NODES]
              + [(n, "a100x2-time-slicing") for n in A100X2_NODES])
# NVIDIA's DRA kubelet plugin's devices, as it published them on a real lab node of the shape's inventory
# (lab/node/recordings/dra-slices.json)
DRA_INVENTORY = dict((n, gpu_kwok_nodes.shape(SHAPES[n])["inventory"]) for n in NODES)

# strategy -> the settings of a pool of it (role variable names without the gpu_sharing_stack_ prefix)
BASE = {
    "exclusive": {},
    # the replicas a real node recorded (RECORDED_SHARING): on lcs-s1/lcs-s2 the agents publish what it published
    "time-slicing": {"time_slicing": {"replicas": 3}},
    "mps": {"mps": {"replicas": 3}},
    "mig": {"mig": {"strategy": "single", "devices": {"1g.10gb": 7}}},
    "gpushare": {"gpushare": GPUSHARE_IMAGES},
    "volcano": {"volcano": {"version": "1.15", "accept_untested_kubernetes": True}},
    "hami": {"hami": {"device_split_count": 4}},
    "gpu-manager": {"gpu_manager": {"accept_unmaintained": True,
                                    "admission_image": "registry.example.com/tkestack/gpu-admission:47d56ae"}},
    "gpu-operator": {"gpu_operator": {"chart_path": "/srv/charts/gpu-operator-v26.7.0.tgz", "sharing": "time-slicing"}},
    # the DRA driver's release is rendered, not installed (helm_install false): the suite plays its kubelet plugin
    "dra": {"dra": {"chart_path": "/srv/charts/dra-driver-nvidia-gpu-v0.5.0.tgz", "chart_version": "0.5.0",
                    "assume_cdi_enabled": True, "claim_namespace": "lcs-claims",
                    "claim_templates": [{"name": "lcs-gpu", "kind": "gpu"}]}},
}
# the ready step's validation workloads for every strategy but gpu-operator (its RuntimeClass comes from the operator,
# which does not run here: the role's wait would fail; test_gpu_sharing_stack_real covers that wait)
for _s, _v in BASE.items():
    if _s != "gpu-operator":
        _v["validation"] = True
STRATEGIES = sorted(BASE)
# settings changes that matter per strategy: (description, settings)
CHANGES = {
    "time-slicing": [("replicas 8", {"time_slicing": {"replicas": 8}})],
    "mps": [("replicas 2", {"mps": {"replicas": 2}})],
    "mig": [("geometry 3g.40gb x2", {"mig": {"strategy": "single", "devices": {"3g.40gb": 2}}}),
            ("mixed, no manager", {"mig": {"strategy": "mixed", "devices": {"1g.10gb": 2, "2g.20gb": 1},
                                           "manager": False}})],
    "exclusive": [("runtime class nvidia-x", {"nvidia": {"runtime_class_name": "nvidia-x"}})],
    "gpu-manager": [("admission on a cluster IP", {"gpu_manager": dict(BASE["gpu-manager"]["gpu_manager"],
                                                                      admission_registration="cluster-ip",
                                                                      admission_cluster_ip="10.96.0.50")})],
    "hami": [("split 8", {"hami": {"device_split_count": 8}}),
             ("memory scaling 1.5", {"hami": {"device_split_count": 8, "device_memory_scaling": 1.5}})],
    "gpu-operator": [("mps", {"gpu_operator": dict(BASE["gpu-operator"]["gpu_operator"], sharing="mps")})],
    "dra": [("claim templates: a T4 by product, a shared claim", {"validation": True, "dra": dict(
        BASE["dra"]["dra"], claim_templates=[{"name": "lcs-t4", "kind": "gpu", "product_name": "Tesla T4"},
                                             {"name": "lcs-shared", "kind": "gpu", "shared": True}])})],
}
for _s, _changes in CHANGES.items():
    for _what, _settings in _changes:
        _settings.setdefault("validation", _s != "gpu-operator")


def pool(strategy, nodes, settings=None):
    return {"strategy": strategy, "nodes": list(nodes), "facts": FACTS,
            "settings": dict(BASE[strategy] if settings is None else settings)}


def own_claims(name, settings):
    """A dra pool's settings with claim names of its own (two dra pools may not render one claim into one
    namespace: the pools' plan refuses it, stacks/dra.claim_name_conflicts)."""
    if not settings or "dra" not in settings:
        return settings
    ds = dict(settings["dra"], claim_templates=[dict(t, name="%s-%s" % (name, t["name"].split("-", 2)[-1]))
                                                for t in settings["dra"]["claim_templates"]])
    return dict(settings, dra=ds)


def bare(n):
    if n in A100X2_NODES:
        return gpu_kwok_nodes.bare_sharing_node(n, SHAPES[n], facts=FACTS[n])
    return gpu_kwok_nodes.bare_node(n, SHAPES[n], facts=FACTS[n])


# the labels each node has before any stack (what GFD's labels fall back to once a pool's agents left)
BARE_LABELS = dict((n, bare(n)["metadata"]["labels"]) for n in NODES)


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    with private_kube(tmp_path_factory.mktemp("kube-lifecycle-suite"), "1.37") as k:
        from kubernetes import client
        core = client.CoreV1Api(k.api())
        for n in NODES:
            core.create_node(bare(n))
        # a control-plane node, as kubeadm labels and taints it: where control-plane agents (gpu-admission) go
        core.create_node(gpu_kwok_nodes.plain_node(
            lifecycle.CONTROL_PLANE, {lifecycle.CONTROL_PLANE_LABEL: ""},
            [{"key": lifecycle.CONTROL_PLANE_LABEL, "effect": "NoSchedule"}]))
        core.create_namespace({"metadata": {"name": "volcano-system"}})
        core.create_namespace({"metadata": {"name": "lcs-claims"}})
        core.create_namespaced_config_map("volcano-system", {
            "metadata": {"name": "volcano-scheduler-configmap"},
            "data": {"volcano-scheduler.conf": yaml.safe_dump(VOLCANO_CONF)}})
        client.AppsV1Api(k.api()).create_namespaced_deployment("volcano-system", VOLCANO_SCHEDULER)
        # kwok makes the nodes Ready and the node lifecycle controller then takes its not-ready taint off: the state
        # in which the scheduler places the agents (the invariants evaluate the nodes' taints too)
        wait_until("the kwok nodes ready and untainted", lambda: all(
            not [t for t in nd.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
            for nd in core.list_node().items if nd.metadata.name in NODES + [lifecycle.CONTROL_PLANE]), timeout=120)
        yield k


class Steps(object):
    """Runs operations on a Lab and checks the invariants after each: a refused step must have written nothing; an
    accepted one leaves the invariants true and a re-run of every pool writes nothing."""

    def __init__(self, lab):
        self.lab = lab
        self.log = []
        self.refusals = []

    def agents(self):
        """What the agents of the stacks do on kwok nodes once a step is done (the suite's stand-ins, not the
        collection): the DRA kubelet plugin publishes or withdraws its slices; the kubelet drops the MIG devices of a
        node whose device plugin is gone."""
        admin = self.lab.kube.api()
        self.lab.dra_plugin(admin)
        drop_mig_resources(self.lab, admin)
        device_plugins(self.lab, admin)
        lifecycle.wait_terminated(self.lab, admin)

    def do(self, what, fn, *args, rerun=True):
        start = self.lab.mark()
        try:
            reported = fn(*args)
        except lifecycle.Refused as e:
            writes = self.lab.writes_since(start)
            assert writes == [], "%s was refused (%s) after writing %s" % (what, e, writes)
            self.refusals.append((what, str(e)))
            self.log.append("%s: refused" % what)
            return False
        self.log.append("%s: %d writes reported" % (what, len(reported)))
        self.agents()
        bad = lifecycle.check(self.lab, NODES) + lifecycle.validation_invariant(self.lab, self.lab.kube.api())
        assert bad == [], "after %s:\n  %s\nsteps:\n  %s" % (what, "\n  ".join(bad), "\n  ".join(self.log))
        if rerun:
            writes, changed = self.lab.rerun()
            assert (writes, changed) == ([], []), "re-run after %s wrote %s; reported %s\nsteps:\n  %s" % (
                what, writes, changed, "\n  ".join(self.log))
        return True


def reset(lab):
    """Uninstall every pool (the last step of each sequence, and the start of each example)."""
    for name in sorted(lab.pools):
        lab.remove(name)
    Steps(lab).agents()
    assert lifecycle.check(lab, NODES) == []


def dra_devices(node):
    devices = dra_slices.recorded_devices(DRA_INVENTORY[node])
    assert devices, "no recorded DRA devices for %s (%s) in %s" % (node, DRA_INVENTORY[node], dra_slices.RECORDING)
    return devices


def mig_manager(lab, name, readiness):
    """NVIDIA's MIG manager and device plugin on kwok nodes, for the ready step's wait: each node of the pool reports
    the geometry applied (nvidia.com/mig.config.state=success, as mig-manager writes it: painted,
    gpu_kwok_nodes.PAINTED["nvidia-mig-manager"]) and publishes the MIG devices and GFD's MIG strategy label that a
    real lab node of its GPUs published under that geometry (gpu_kwok_nodes.mig_published: the recording). A geometry
    no real node recorded publishes what the readiness asks for (gpu_kwok_nodes.painted_mig, painted:
    PAINTED["nvidia-device-plugin (MIG geometries not recorded)"]); lab.mig_published says which. Written by the
    admin, not the suite's user (these writes are the agents')."""
    from kubernetes import client
    core = client.CoreV1Api(lab.kube.api())
    mig = lab.pools[name]["settings"].get("mig") or {}
    strategy = mig.get("strategy")
    lab.mig_resources = getattr(lab, "mig_resources", {})
    lab.mig_published = getattr(lab, "mig_published", [])
    for n in readiness["nodes"]:
        pub = gpu_kwok_nodes.mig_published(SHAPES[n], strategy, mig.get("devices"))
        if pub is None:
            pub = gpu_kwok_nodes.painted_mig(strategy, (readiness.get("allocatable") or {}).get(n) or {})
        lab.mig_published.append((name, n, pub["shape"]))
        core.patch_node(n, {"metadata": {"labels": dict(pub["labels"], **{readiness["label"]: readiness["value"]})}})
        if pub["capacity"]:
            core.patch_node_status(n, {"status": {"capacity": pub["capacity"], "allocatable": pub["allocatable"]}})
            lab.mig_resources.setdefault(n, set()).update(pub["capacity"])


GFD_MIG_STRATEGY = gpu_kwok_nodes.GFD_MIG_STRATEGY


def drop_mig_resources(lab, admin):
    """The kubelet once a node's device plugin is gone: the MIG devices it advertised leave the node's status (on
    kwok nodes the suite does it). A node still in a pool whose MIG manager published them keeps them."""
    from kubernetes import client
    core = client.CoreV1Api(admin)
    keep = set(n for name, st in lab.readiness.items() for n in lab.pools[name]["nodes"])
    for n, res in list(getattr(lab, "mig_resources", {}).items()):
        if n in keep:
            continue
        body = [{"op": "remove", "path": "/status/%s/%s" % (f, r.replace("~", "~0").replace("/", "~1"))}
                for f in ("capacity", "allocatable") for r in sorted(res)]
        core.patch_node_status(n, body)
        core.patch_node(n, {"metadata": {"labels": {GFD_MIG_STRATEGY: None}}})
        del lab.mig_resources[n]


def device_plugins(lab, admin):
    """The kubelet with the device plugin of a pool whose node agents a real lab node recorded
    (gpu_kwok_nodes.RECORDED_AGENTS: exclusive): the node publishes the recorded nvidia.com/gpu while it is in such a
    pool, and no longer once it left (a resource the MIG stand-in publishes stays). Other strategies' agents: not
    recorded, nothing published (gpu_kwok_nodes.NOT_RECORDED)."""
    from kubernetes import client
    core = client.CoreV1Api(admin)
    member = dict((n, p) for p in lab.pools.values() for n in p["nodes"])
    lab.dp_resources = getattr(lab, "dp_resources", {})
    for n in NODES:
        p = member.get(n) or {}
        strategy = p.get("strategy")
        # the pool's replicas: the recording holds one count (another count publishes nothing: not recorded)
        replicas = ((p.get("settings") or {}).get((strategy or "").replace("-", "_")) or {}).get("replicas") \
            if strategy in ("time-slicing", "mps") else None
        pub = gpu_kwok_nodes.agents_published(SHAPES[n], strategy, replicas=replicas)
        if pub is not None:
            pub = dict(pub, labels=gpu_kwok_nodes.agents_labels(SHAPES[n], strategy, replicas=replicas))
        had = lab.dp_resources.get(n)
        if had is not None and had != pub:
            mig = getattr(lab, "mig_resources", {}).get(n) or set()
            body = [{"op": "remove", "path": "/status/%s/%s" % (f, r.replace("~", "~0").replace("/", "~1"))}
                    for f in ("capacity", "allocatable") for r in sorted(set(had["capacity"]) - mig)]
            if body:
                core.patch_node_status(n, body)
            # GFD's labels go with the agents: the node layer's own (bare_node's) come back, the others leave; a
            # label the collection records as its own (the recorded node had the collection's, e.g. mps.capable)
            # is the collection's to write
            bare, own = BARE_LABELS[n], collection_labels(core, n)
            core.patch_node(n, {"metadata": {"labels": dict((k, bare.get(k)) for k in had["labels"] if k not in own)}})
            del lab.dp_resources[n]
            had = None
        if pub is not None and had is None:
            if pub["capacity"]:
                core.patch_node_status(n, {"status": {"capacity": pub["capacity"],
                                                      "allocatable": pub["allocatable"]}})
            own = collection_labels(core, n)
            core.patch_node(n, {"metadata": {"labels": dict((k, v) for k, v in pub["labels"].items()
                                                            if k not in own)}})
            lab.dp_resources[n] = pub


def collection_labels(core, name):
    """The labels the collection recorded as its own on the node (gpuops.io/managed-labels)."""
    record = json.loads((core.read_node(name).metadata.annotations or {}).get(lifecycle.RECORD) or "{}")
    return set(record) if isinstance(record, dict) else set()


def agree_with_daemonset_controller(lab, every, timeout=90):
    """The invariants' placement of the agents (lifecycle.lands_on) is upstream's: kube-controller-manager's DaemonSet
    controller counts the same nodes for every managed DaemonSet (it acts asynchronously: waited for)."""
    end = time.time() + timeout
    while True:
        bad = lifecycle.daemonset_disagreements(lab, every)
        if not bad or time.time() > end:
            break
        time.sleep(1)
    assert bad == [], bad


# the validation pods after the adds (pool -> {(outcome, node)}): scheduled where a real node of the pool's GPUs
# published the resource (exclusive: t4x1; time-slicing with 3 replicas: a100x2; MIG single 1g.10gb x7: a100x8;
# dra: the recorded slice), refused by the scheduler where nothing is published (mps: the recording publishes no
# resource; gpushare, gpu-manager: not recorded), left alone where the pod names a scheduler that does not run here
# (Volcano's, HAMi's: their schedulers are Deployments on kwok nodes)
VALIDATION_AFTER_ADDS = {
    "ex": [("scheduled", "lcs-t1")], "ts": [("scheduled", "lcs-s1")], "mig": [("scheduled", "lcs-a1")],
    "dr": [("scheduled", "lcs-t8")], "mps": [("refused", "")], "gsh": [("refused", "")], "gm": [("refused", "")],
    "vol": [("no scheduler", "volcano")], "ham": [("no scheduler", "hami-scheduler")],
    "ham2": [("no scheduler", "hami-scheduler")]}


def gpu_pods_on(kube, nodes):
    """namespace/name of the pods bound to ``nodes`` that hold a GPU (an extended resource or a claim), not finished."""
    from kubernetes import client
    api = kube.api()
    out = []
    for p in client.CoreV1Api(api).list_pod_for_all_namespaces().items:
        pod = api.sanitize_for_serialization(p)
        if pod["spec"].get("nodeName") in nodes and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") \
                and (lifecycle._pod_requests(pod) or pod["spec"].get("resourceClaims")):
            out.append("%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]))
    return sorted(out)


def evictions(kube, start):
    """namespace/name of every pod evicted since the mark, by any user (audit log)."""
    out = []
    for verb, uri, code in kube.writes(start, kube.mark()):
        parts = uri.split("?")[0].split("/")
        if verb == "create" and parts[-1] == "eviction" and code in (200, 201):
            out.append("%s/%s" % (parts[-4], parts[-2]))
    return sorted(out)


# Found by the suite (2026-11-29), fixed in strategy_migration.pool_labels: migrate_to_dra's switch of an exclusive
# pool's node to a dra pool kept two labels of the source pool's stack which the dra pool's stack does not give the
# node, and a move back did not set them: NVIDIA's device plugin config label nvidia.com/device-plugin.config and the
# GPU operator's confinement nvidia.com/gpu.deploy.operands=false (the switch dropped only the strategy and pool labels
# and the side's `labels`). The switch now drops every label the source pool's render gives a node and sets the
# target's: the follow-up cluster.yml run relabels nothing (what it may still put right; empty).
SWITCH_LEFTOVERS: set[str] = set()


def switch_and_follow(lab, steps, src, dst, nodes, serial=None):
    """A run of migrate_to_dra.yml for ``nodes`` (one batch), then cluster.yml with the inventory that followed: the
    source pool without them (uninstalled when none is left), the target pool with them. The switch must have left
    each moved node as the target pool's stack wants it: the follow-up run changes none of its labels."""
    out = lab.switch_nodes(src, dst, nodes, serial=serial or len(nodes), settle=steps.agents)
    lab.last_switch = out
    reported = list(out["changed"])
    # the source pool keeps a node (the suite does not empty it: the render refuses a pool with neither nodes nor a
    # node selector, also for its removal - docs/lab.md)
    assert lab.pools[src]["nodes"], lab.pools[src]
    before = dict((n, lab.nodes()[n]["metadata"].get("labels") or {}) for n in nodes)
    follow = lab.apply_all({src: lab.pools[src], dst: lab.pools[dst]})
    after = dict((n, lab.nodes()[n]["metadata"].get("labels") or {}) for n in nodes)
    diff = dict((n, dict((k, (before[n].get(k), after[n].get(k))) for k in set(before[n]) | set(after[n])
                         if before[n].get(k) != after[n].get(k))) for n in nodes)
    lab.switch_relabelled = sorted(set(k for d in diff.values() for k in d))
    # the follow-up run may only put right what SWITCH_LEFTOVERS names (nothing since the switch's fix)
    assert set(lab.switch_relabelled) <= SWITCH_LEFTOVERS, "cluster.yml after the switch relabelled %s: %s" % (
        nodes, diff)
    return reported + follow


def client_objects(kube, plural, namespace):
    from kubernetes import client
    return client.CustomObjectsApi(kube.api()).list_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, plural)["items"]


def kube_node(kube, name):
    from kubernetes import client
    return client.CoreV1Api(kube.api()).read_node(name)


def new_lab(kube, user):
    lab = lifecycle.Lab(kube, user=user)
    lab.dra_devices = dra_devices
    lab.mig_manager = mig_manager
    return lab


def test_scripted_sequence(kube):
    lab = new_lab(kube, "lifecycle-suite")
    s = Steps(lab)
    # 1. one pool of each strategy, each on a node of its own; two HAMi pools (they share the scheduler)
    layout = {"ex": ("exclusive", ["lcs-t1"]), "ts": ("time-slicing", ["lcs-s1"]), "mps": ("mps", ["lcs-s2"]),
              "mig": ("mig", ["lcs-a1"]), "gsh": ("gpushare", ["lcs-a2"]), "vol": ("volcano", ["lcs-t4"]),
              "ham": ("hami", ["lcs-t5"]), "ham2": ("hami", ["lcs-t6"]), "gm": ("gpu-manager", ["lcs-t7"]),
              "dr": ("dra", ["lcs-t8"])}
    for name, (strategy, nodes) in layout.items():
        assert s.do("add %s (%s)" % (name, strategy), lab.apply, name, pool(strategy, nodes), rerun=False)
    writes, changed = lab.rerun()
    assert (writes, changed) == ([], [])
    # the ready step ran: the MIG manager's wait saw the geometry the stand-in reported; validation workloads applied
    assert lab.readiness["mig"]["ready"] is True, lab.readiness
    # and it saw what a real node published under that geometry (the recording), not what the readiness asked for
    assert ("mig", "lcs-a1", "a100x8-mig-single") in lab.mig_published, lab.mig_published
    assert sorted(n for n, v in lab.validated.items() if v) == sorted(layout), lab.validated
    # the exclusive pool's node publishes what NVIDIA's device plugin published on a real node of its GPUs
    assert kube_node(kube, "lcs-t1").status.allocatable.get("nvidia.com/gpu") == "1"
    # the validation pods as the real scheduler placed them and kwok ran them (Steps.do checked each against the
    # nodes' published resources; here the outcome per pool is pinned)
    got = dict((name, sorted(set((o, d if o != lifecycle.REFUSED else "") for _p, o, d in outs)))
               for name, outs in lab.outcomes.items())
    assert got == VALIDATION_AFTER_ADDS, got
    reasons = dict((name, outs[0][2]) for name, outs in lab.outcomes.items() if outs[0][1] == lifecycle.REFUSED)
    for name, resource in (("mps", "nvidia.com/gpu"), ("gsh", "aliyun.com/gpu-mem"),
                           ("gm", "tencent.com/vcuda-core")):
        assert "1 Insufficient %s" % resource in reasons[name], reasons
    # the dra pool's claim: allocated by the scheduler from the slice the driver's stand-in published for lcs-t8
    claims = [c for c in client_objects(kube, "resourceclaims", "default")
              if c["metadata"]["name"].startswith("gpu-validate-dra-dr")]
    assert [r["pool"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]] == ["lcs-t8"], claims
    # the invariants' placement of the agents is upstream's: the DaemonSet controller counts the same nodes
    every = NODES + [lifecycle.CONTROL_PLANE]
    agree_with_daemonset_controller(lab, every)
    # 2. change each setting that matters (HAMi's below: its two pools share the scheduler)
    for name, (strategy, nodes) in layout.items():
        for what, settings in CHANGES.get(strategy, []) if strategy != "hami" else []:
            assert s.do("change %s: %s" % (name, what), lab.apply, name, pool(strategy, lab.pools[name]["nodes"],
                                                                                settings))
    # the two HAMi pools must agree on what they share: one alone is refused, both in one run are accepted
    split8 = CHANGES["hami"][0][1]
    assert not s.do("change ham only: split 8", lab.apply, "ham", pool("hami", ["lcs-t5"], split8))
    assert "hami pools ham, ham2 share" in s.refusals[-1][1]
    assert s.do("change ham and ham2: split 8", lab.apply_all,
                {"ham": pool("hami", ["lcs-t5"], split8), "ham2": pool("hami", ["lcs-t6"], split8)})
    # HAMi's memory scaling (deviceMemoryScaling in its device config, which both pools share)
    scaling = CHANGES["hami"][1][1]
    assert s.do("change ham and ham2: memory scaling 1.5", lab.apply_all,
                {"ham": pool("hami", ["lcs-t5"], scaling), "ham2": pool("hami", ["lcs-t6"], scaling)})
    # 3. move a node between pools: ts's node leaves (ts keeps no node: uninstall), joins ex
    assert s.do("uninstall ts", lab.remove, "ts")
    assert s.do("move lcs-s1 to ex", lab.apply, "ex", pool("exclusive", ["lcs-t1", "lcs-s1"],
                                                           lab.pools["ex"]["settings"]))
    assert s.do("lcs-s1 leaves ex", lab.leave, "ex", ["lcs-s1"])
    # 4. add nodes: ham2 gets lcs-s1 and lcs-t2
    assert s.do("add nodes to ham2", lab.apply, "ham2", dict(lab.pools["ham2"], nodes=["lcs-t6", "lcs-s1", "lcs-t2"]))
    # 5. migrate pools to another strategy (a direct apply is refused before any write where the model forbids it,
    # else through no stack): vol -> time-slicing, gsh -> dra (a second dra pool: one release), gm -> gpushare, dr
    # (dra) -> exclusive
    for name, target in (("vol", "time-slicing"), ("gsh", "dra"), ("gm", "gpushare"), ("dr", "exclusive")):
        nodes = lab.pools[name]["nodes"]
        s.do("migrate %s to %s directly" % (name, target), lab.apply, name, pool(target, nodes))
        if lab.pools[name]["strategy"] != target:
            assert s.do("uninstall %s" % name, lab.remove, name)
            assert s.do("install %s as %s" % (name, target), lab.apply, name, pool(target, nodes))
    # 6. a GPU operator pool beside the others (the MIG pool runs without the MIG manager since step 2)
    assert s.do("add op (gpu-operator)", lab.apply, "op", pool("gpu-operator", ["lcs-a3"]))
    for what, settings in CHANGES["gpu-operator"]:
        assert s.do("change op: %s" % what, lab.apply, "op", pool("gpu-operator", ["lcs-a3"], settings))
    agree_with_daemonset_controller(lab, every)
    # 7. the per-node switch of playbook migrate_to_dra.yml: ex (exclusive) gets lcs-t3 and lcs-t2 (which leaves
    # ham2), then two of its nodes move to the dra pool gsh node by node - a run that stops after the first node's
    # switch (the node stays cordoned and marked), the run again (lcs-t1 resumed, lcs-t3 migrated, one batch of two) -
    # then the inventory follows (cluster.yml with those nodes in gsh) and the invariants hold; the operator pool
    # beside them keeps its operands
    assert s.do("lcs-t2 leaves ham2", lab.leave, "ham2", ["lcs-t2"])
    assert s.do("add lcs-t3, lcs-t2 to ex", lab.apply, "ex", dict(lab.pools["ex"], nodes=["lcs-t1", "lcs-t3", "lcs-t2"]))
    moved = ["lcs-t1", "lcs-t3"]
    holding = gpu_pods_on(kube, moved)
    assert holding, "no pod holds a GPU of %s: the drain would prove nothing" % moved
    start = lab.mark()
    first = lab.switch_nodes("ex", "gsh", moved, stop_after_switch=True)
    assert first["steps"] == [("lcs-t1", "migrate"), ("lcs-t3", "migrate")], first
    assert kube_node(kube, "lcs-t1").spec.unschedulable is True
    assert s.do("migrate_to_dra ex -> gsh resumed, serial 2", switch_and_follow, lab, s, "ex", "gsh", moved)
    evicted = sorted(p for n in moved for p in (first["evicted"].get(n) or []) + (lab.last_switch["evicted"].get(n)
                                                                                   or []))
    # the drains selected every pod that held a GPU of their node, and nothing else was evicted in the cluster
    assert evicted == sorted(holding), (evicted, holding)
    assert evictions(kube, start) == sorted(holding), evictions(kube, start)
    assert lab.last_switch["steps"] == [("lcs-t1", "resume"), ("lcs-t3", "migrate")], lab.last_switch
    # the switch leaves the moved nodes as cluster.yml would (a GPU operator pool is beside them: the exclusive
    # stack's device plugin config and the operator's confinement go; the fixed defect SWITCH_LEFTOVERS named)
    assert lab.switch_relabelled == sorted(SWITCH_LEFTOVERS) == [], lab.switch_relabelled
    assert lab.pools["ex"]["nodes"] == ["lcs-t2"] and sorted(lab.pools["gsh"]["nodes"]) == ["lcs-a2", "lcs-t1",
                                                                                              "lcs-t3"], lab.pools
    # 8. uninstall one, then all
    assert s.do("uninstall ham", lab.remove, "ham")
    for name in sorted(lab.pools):
        assert s.do("uninstall %s" % name, lab.remove, name)
    # what stays: Volcano's adopted scheduler ConfigMap (merged configuration, documented) and its backup
    assert sorted(lab.managed()) == [("ConfigMap", "volcano-system", "gpuops-backup-configmap-volcano-scheduler-configmap"),
                                     ("ConfigMap", "volcano-system", "volcano-scheduler-configmap")]
    print("\n".join(s.log))
    print("refused:", s.refusals)


# ------------------------------------------------------------------------------------------------ randomized
# make test: a fixed, derandomized profile (the same sequences every run); a soak run sets more examples and steps:
#   GPUOPS_LIFECYCLE_EXAMPLES=50 GPUOPS_LIFECYCLE_STEPS=40 .venv/bin/pytest -q -p no:xdist \
#     lab/tests/integration/test_lifecycle_suite_real.py::test_randomized_sequences
# GPUOPS_LIFECYCLE_SEED=<n> draws other sequences (derandomize is then off).
EXAMPLES = int(os.environ.get("GPUOPS_LIFECYCLE_EXAMPLES") or 4)
STEPS = int(os.environ.get("GPUOPS_LIFECYCLE_STEPS") or 10)
SEED = os.environ.get("GPUOPS_LIFECYCLE_SEED")


def fits(strategy, node):
    """mig: the 8-A100 machines (the recorded geometries); dra: not the two-A100 machines (NVIDIA's DRA plugin was
    recorded on the inventories of the 8-GPU and T4 machines only, lab/node/recordings/dra-slices.json)."""
    if strategy == "mig":
        return FACTS[node] is A100
    return strategy != "dra" or node not in A100X2_NODES


def lifecycle_machine(lab):
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

    counter = [0]

    class Lifecycle(RuleBasedStateMachine):
        logs = []  # each example's steps (printed; the test requires accepted and refused steps among them)

        def __init__(self):
            super().__init__()
            reset(lab)
            self.s = Steps(lab)
            self.logs.append(self.s.log)

        def free(self, strategy):
            used = set(n for p in lab.pools.values() for n in p["nodes"])
            return [n for n in NODES if n not in used and fits(strategy, n)]

        @rule(strategy=st.sampled_from(STRATEGIES), data=st.data())
        def add_pool(self, strategy, data):
            free = self.free(strategy)
            if not free:
                return
            nodes = data.draw(st.lists(st.sampled_from(free), min_size=1, max_size=2, unique=True), label="nodes")
            counter[0] += 1
            name = "r%d-%s" % (counter[0], strategy.replace("gpu-", "g"))
            # a new pool of a strategy takes the settings the strategy's pools already agree on
            same = [p for p in lab.pools.values() if p["strategy"] == strategy]
            settings = own_claims(name, dict(same[0]["settings"]) if same else dict(BASE[strategy]))
            self.s.do("add %s on %s" % (name, nodes), lab.apply, name, pool(strategy, nodes, settings))

        @precondition(lambda self: any(p["strategy"] in CHANGES for p in lab.pools.values()))
        @rule(data=st.data())
        def change_setting(self, data):
            name = data.draw(st.sampled_from(sorted(n for n, p in lab.pools.items() if p["strategy"] in CHANGES)),
                             label="pool")
            strategy = lab.pools[name]["strategy"]
            what, settings = data.draw(st.sampled_from(CHANGES[strategy]), label="change")
            settings = own_claims(name, settings)
            if strategy == "hami":  # the pools of a strategy change together, in one run (they share the scheduler)
                changed = dict((n, dict(p, settings=settings)) for n, p in lab.pools.items() if p["strategy"] == strategy)
                self.s.do("change %s: %s" % (sorted(changed), what), lab.apply_all, changed)
            else:
                self.s.do("change %s: %s" % (name, what), lab.apply, name, dict(lab.pools[name], settings=settings))

        @precondition(lambda self: len(lab.pools) >= 2)
        @rule(data=st.data())
        def move_node(self, data):
            src = data.draw(st.sampled_from(sorted(lab.pools)), label="from")
            dst = data.draw(st.sampled_from(sorted(n for n in lab.pools if n != src)), label="to")
            node = data.draw(st.sampled_from(lab.pools[src]["nodes"]), label="node")
            if not fits(lab.pools[dst]["strategy"], node):
                return
            if len(lab.pools[src]["nodes"]) == 1:
                self.s.do("uninstall %s (its last node moves)" % src, lab.remove, src)
            else:
                self.s.do("%s leaves %s" % (node, src), lab.leave, src, [node])
            self.s.do("%s joins %s" % (node, dst), lab.apply, dst,
                      dict(lab.pools[dst], nodes=lab.pools[dst]["nodes"] + [node]))

        @precondition(lambda self: lab.pools)
        @rule(strategy=st.sampled_from(STRATEGIES), data=st.data())
        def migrate_pool(self, strategy, data):
            name = data.draw(st.sampled_from(sorted(lab.pools)), label="pool")
            old = lab.pools[name]
            if strategy == old["strategy"] or not all(fits(strategy, n) for n in old["nodes"]):
                return
            same = [p for p in lab.pools.values() if p["strategy"] == strategy]
            target = pool(strategy, old["nodes"], own_claims(name, dict(same[0]["settings"]) if same else None))
            # directly (refused before any write, or done), else through no stack
            if not self.s.do("migrate %s to %s directly" % (name, strategy), lab.apply, name, target):
                self.s.do("uninstall %s" % name, lab.remove, name)
                self.s.do("install %s as %s" % (name, strategy), lab.apply, name, target)

        def pool_of(self, strategy, size, data):
            """A pool of ``strategy`` with at least ``size`` nodes: one there is, else a new one on free nodes (an add
            step), else None."""
            have = sorted(n for n, p in lab.pools.items() if p["strategy"] == strategy and len(p["nodes"]) >= size)
            if have:
                return data.draw(st.sampled_from(have), label="%s pool" % strategy)
            free = self.free(strategy)
            if len(free) < size or [p for p in lab.pools.values() if p["strategy"] == strategy]:
                return None
            counter[0] += 1
            name = "r%d-%s" % (counter[0], strategy)
            if not self.s.do("add %s on %s" % (name, free[:size]), lab.apply, name,
                             pool(strategy, free[:size], own_claims(name, dict(BASE[strategy])))):
                return None
            return name

        @rule(back=st.booleans(), data=st.data())
        def switch_nodes(self, back, data):
            """Playbook migrate_to_dra.yml between an exclusive pool and a dra pool (back: dra -> exclusive), some of
            the source's nodes in batches of a drawn size, then cluster.yml with the inventory that followed (the
            pools are made first where there are none: the rule always has something to move)."""
            strategies = ("dra", "exclusive") if back else ("exclusive", "dra")
            src = self.pool_of(strategies[0], 2, data)
            dst = self.pool_of(strategies[1], 1, data) if src else None
            if not src or not dst:
                return
            movable = [n for n in lab.pools[src]["nodes"] if fits(lab.pools[dst]["strategy"], n)]
            keep = len(lab.pools[src]["nodes"]) - 1  # the source keeps a node (switch_and_follow)
            if not movable or keep < 1:
                return
            nodes = data.draw(st.lists(st.sampled_from(movable), min_size=1, max_size=min(2, keep, len(movable)),
                                       unique=True), label="nodes")
            serial = data.draw(st.integers(min_value=1, max_value=len(nodes)), label="serial")
            holding = gpu_pods_on(lab.kube, nodes)
            start = lab.mark()
            if self.s.do("migrate_to_dra %s -> %s: %s, serial %d" % (src, dst, nodes, serial), switch_and_follow,
                         lab, self.s, src, dst, nodes, serial):
                # the drain selected every pod holding a GPU of the nodes, and nothing else was evicted
                got = sorted(p for v in lab.last_switch["evicted"].values() for p in v)
                assert got == holding == evictions(lab.kube, start), (got, holding, evictions(lab.kube, start))

        @precondition(lambda self: lab.pools)
        @rule(data=st.data())
        def add_node(self, data):
            name = data.draw(st.sampled_from(sorted(lab.pools)), label="pool")
            free = self.free(lab.pools[name]["strategy"])
            if free:
                node = data.draw(st.sampled_from(free), label="node")
                self.s.do("add %s to %s" % (node, name), lab.apply, name,
                          dict(lab.pools[name], nodes=lab.pools[name]["nodes"] + [node]))

        @precondition(lambda self: any(len(p["nodes"]) > 1 for p in lab.pools.values()))
        @rule(data=st.data())
        def remove_node(self, data):
            name = data.draw(st.sampled_from(sorted(n for n, p in lab.pools.items() if len(p["nodes"]) > 1)),
                             label="pool")
            node = data.draw(st.sampled_from(lab.pools[name]["nodes"]), label="node")
            self.s.do("%s leaves %s" % (node, name), lab.leave, name, [node])

        @precondition(lambda self: lab.pools)
        @rule(data=st.data())
        def uninstall_pool(self, data):
            name = data.draw(st.sampled_from(sorted(lab.pools)), label="pool")
            self.s.do("uninstall %s" % name, lab.remove, name)

        def teardown(self):
            reset(lab)

    return Lifecycle


def test_randomized_sequences(kube):
    """The operations as a hypothesis state machine; every step checks the invariants and a re-run (Steps.do)."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test
    lab = new_lab(kube, "lifecycle-suite-random")
    machine = lifecycle_machine(lab)
    if SEED:
        import hypothesis
        machine = hypothesis.seed(int(SEED))(machine)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, derandomize=not SEED, database=None, deadline=None,
        print_blob=True, suppress_health_check=list(HealthCheck)))
    assert lab.pools == {}
    steps = [line for log in machine.logs for line in log]
    print("\n".join("example %d:\n  %s" % (i, "\n  ".join(log)) for i, log in enumerate(machine.logs)))
    # a machine whose rules all returned early would prove nothing
    accepted = [line for line in steps if not line.endswith(": refused")]
    assert len(accepted) >= 2 * EXAMPLES, steps
    # the per-node switch ran (the fixed profile draws it; a soak run more often)
    assert [line for line in accepted if line.startswith("migrate_to_dra ")], steps
