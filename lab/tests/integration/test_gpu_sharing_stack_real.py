"""Role gpuops.k8s_gpu.gpu_sharing_stack against upstream's real API server (lab/kube/real.py), every strategy:
applied as is by the role (no dry-run shortcut), accepted by the server without changes to what was sent, a re-run
makes 0 writes, check mode 0 writes, `absent` removes exactly what was made. Writes are counted from the API server's
audit log (conftest.KubeReal), by this test's own client identity.

This file is the converge matrix's one home (the emulator's copy in test_gpu_sharing_stack.py moved here, with every
assertion): server-side defaulting, validation, admission, RBAC escalation checks, and real pods from the DaemonSet
controller on kwok nodes. The emulator keeps the schema matrix, the bad inputs and the refusals.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_sharing_stack_real.py
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

from conftest import ANSIBLE_TESTS_CFG, PLAY_TIMEOUT, VENV_BIN, ansible_cli, play_json  # noqa: E402
from test_gpu_sharing_stack import (A100, CASES, GPUSHARE_IMAGES, STRATEGIES, T4, VOLCANO_CONF, stack_steps,  # noqa: E402,F401
                                    task_results)

sys.path.insert(0, str(ROOT / "lab" / "kube"))
import real  # noqa: E402  (lab/kube)
import gpu_kwok_nodes  # noqa: E402  (lab/tests)

SUFFIX = "%d" % os.getpid()
USER = "gpuops-test-stack-real-%s" % SUFFIX
# the recorded shape of CASES["mig"]: eight A100s, seven 1g.10gb each, strategy single
MIG_SHAPE = "a100x8-mig-single"
MIG_RECORDED = real.load_recording()["shapes"][MIG_SHAPE]
assert (MIG_RECORDED["gpus"], MIG_RECORDED["mig_strategy"], MIG_RECORDED["mig_devices"]) == (
    len(A100["gpus"]), CASES["mig"][2]["gpu_sharing_stack_mig"]["strategy"],
    CASES["mig"][2]["gpu_sharing_stack_mig"]["devices"])
MANAGED = "app.kubernetes.io/managed-by=gpuops.k8s_gpu"
# the recorded shape of each GPU of CASES (lab/node/recordings/gpu-nodes.json): the T4 and the eight A100s
SHAPES = {"Tesla T4": "t4x1", "A100-SXM4-80GB": "a100x8"}


def node_name(strategy):
    return "gssr-%s-%s" % (strategy, SUFFIX)


def variant_node(variant):
    return "gssv-%s-%s" % (variant, SUFFIX)


# Settings other than each strategy's default case (the emulator's schema matrix in test_gpu_sharing_stack.py runs the
# same ones): {variant: (strategy, role variables)}. HAMi without its webhook is the default case above already (no
# webhook_tls_secret); HAMi with it is left out here: its MutatingWebhookConfiguration would send the GPU pods of every
# other test of the shared cluster to a webhook no process answers.
VARIANTS = {
    "mig-mixed": ("mig", {"gpu_sharing_stack_mig": {"strategy": "mixed", "devices": {"1g.10gb": 2, "2g.20gb": 1},
                                                    "manager": False}}),
    "ts-per-node": ("time-slicing", {"gpu_sharing_stack_time_slicing": {"replicas": 4, "rename_by_default": False},
                                     "gpu_sharing_stack_nvidia": {
                                         "extra_configs": {"big": {"version": "v1", "flags": {"migStrategy": "none"}}},
                                         "node_configs": {"@NODE@": "big"}}}),
    "volcano-gpu-share": ("volcano", {"gpu_sharing_stack_volcano": {"version": "1.15", "mode": "gpu-share",
                                                                    "accept_known_bad_images": True}}),
}


VOLCANO_SCHEDULER = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "volcano-scheduler", "namespace": "volcano-system"},
    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "volcano-scheduler"}},
             "template": {"metadata": {"labels": {"app": "volcano-scheduler"}},
                          "spec": {"containers": [{"name": "volcano-scheduler",
                                                   "image": "docker.io/volcanosh/vc-scheduler:v1.15.1"}]}}}}


def stack_node(name, strategy):
    """A kwok node of CASES[strategy]'s GPUs, from what a real lab node of those GPUs published (lab/tests/
    gpu_kwok_nodes.py): the T4 and A100 machines before their sharing stack (gpu_kwok_nodes.bare_node: the labels the
    node layer writes, no GPU resource - gpushare refuses a node that already advertises nvidia.com/gpu). The MIG
    node shows the geometry of CASES["mig"] applied: every GFD label and the 8 x 7 MIG devices the kubelet of a real
    lab node published with NVIDIA's plugin under the collection's single strategy on that geometry (gpu_kwok_nodes.
    mig_node, shape a100x8-mig-single), and the MIG manager's state success (the role waits for both: MIGM-14) -
    painted, gpu_kwok_nodes.PAINTED["nvidia-mig-manager"] (painted_mig_state): no real lab node runs the MIG
    manager."""
    facts = CASES[strategy][1]
    shape = SHAPES[facts["gpus"][0]["name"]]
    if strategy == "mig":
        gpu_kwok_nodes.agrees(facts, shape)
        return gpu_kwok_nodes.mig_node(name, MIG_SHAPE, labels=gpu_kwok_nodes.painted_mig_state())
    return gpu_kwok_nodes.bare_node(name, shape, facts=facts)


@pytest.fixture(scope="module")
def cl(kube_real, collections_path):
    """The kwok nodes of every strategy, Volcano's own objects, this test's user. collections_path: the plays below find
    the collection in build/collections, which that fixture makes (lab/bin/collections-path.sh) - run alone, this file
    failed every play without it ("the role 'gpuops.k8s_gpu.gpu_sharing_stack' was not found")."""
    assert Path(collections_path) == ROOT / "build" / "collections", collections_path
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    for strategy in STRATEGIES:
        core.create_node(stack_node(node_name(strategy), strategy))
    # Volcano's own scheduler ConfigMap, as a Volcano install has it (the role merges into it)
    try:
        core.create_namespace({"metadata": {"name": "volcano-system"}})
    except client.ApiException as exc:
        assert exc.status == 409
    try:
        core.create_namespaced_config_map("volcano-system", {
            "metadata": {"name": "volcano-scheduler-configmap"},
            "data": {"volcano-scheduler.conf": yaml.safe_dump(VOLCANO_CONF), "other-key": "keep-me"}})
    except client.ApiException as exc:
        assert exc.status == 409
    # and Volcano's scheduler Deployment, which the role restarts through its pod template when the vGPU device
    # config changes (VOL-15)
    try:
        client.AppsV1Api(kube_real.api()).create_namespaced_deployment("volcano-system", VOLCANO_SCHEDULER)
    except client.ApiException as exc:
        assert exc.status == 409
    kc = kube_real.user(USER)
    SERVER["minor"] = int(str(kube_real.version).lstrip("v").split(".")[1])
    yield kube_real, kc
    for strategy in STRATEGIES:
        try:
            core.delete_node(node_name(strategy))
        except client.ApiException:
            pass
    try:
        client.AppsV1Api(kube_real.api()).delete_namespaced_deployment("volcano-scheduler", "volcano-system")
    except client.ApiException:
        pass


def mark_task(cl_, name):
    """A task that sends the audit marker request named ``name`` (a GET the audit policy logs, by user agent), with
    the marker's bearer token (Ansible's url lookup sends no client certificate)."""
    kube, _kc = cl_
    url = kube.server + "/api/v1/namespaces/default/configmaps/gpuops-audit-mark"
    with open(os.path.join(kube.state, "marker.token")) as f:
        token = f.read().strip()
    return {"name": "mark %s" % name, "check_mode": False, "ansible.builtin.set_fact": {
        "mark_%s" % name.replace("-", "_"): "{{ lookup('ansible.builtin.url', %r, ca_path=%r, http_agent=%r, "
        "headers={'Authorization': %r}, split_lines=False) | length }}"
        % (url, kube.ca, "gpuops-audit-mark/%s-%s" % (SUFFIX, name), "Bearer " + token)}}


SERVER = {"minor": None}
# Volcano 1.15's compatibility table ends at Kubernetes 1.35 (VOL-13): on a newer real server the role refuses it
# unless the site accepts the untested version, as a site on that server would have to.
VOLCANO_LAST_MINOR = 35


def role_play(strategy, state="present", extra_vars=None, variant=None):
    """The role's steps for the pool of ``strategy`` (or of ``variant``, a key of VARIANTS: its own node and pool)."""
    _node, facts, extra = CASES[strategy]
    if variant:
        extra = VARIANTS[variant][1]
    if strategy == "volcano" and SERVER["minor"] and SERVER["minor"] > VOLCANO_LAST_MINOR:
        extra = dict(extra, gpu_sharing_stack_volcano=dict(extra["gpu_sharing_stack_volcano"],
                                                           accept_untested_kubernetes=True))
    n = variant_node(variant) if variant else node_name(strategy)
    if variant:
        extra = json.loads(json.dumps(extra).replace("@NODE@", n))
    v = {"gpu_sharing_stack_strategy": strategy, "gpu_sharing_stack_state": state,
         "gpu_sharing_stack_pool": ("v%s-%s" % (SUFFIX, variant)) if variant else "r%s-%s" % (SUFFIX, strategy),
         "gpu_sharing_stack_nodes": [n],
         "gpu_sharing_stack_facts": {n: facts},
         "gpu_sharing_stack_registry": "registry.example.com/mirror",
         "gpu_sharing_stack_image_pull_secrets": ["regcred"]}
    v.update(extra)
    v.update(extra_vars or {})
    return {"name": "%s (%s, %s)" % (v["gpu_sharing_stack_pool"], strategy, state), "block": stack_steps(v)}


def run_play(cl_, tmp_path, tasks, *args, env=None):
    """``env``: more environment for ansible-playbook, over the lab's (e.g. another ANSIBLE_COLLECTIONS_PATH)."""
    kube, kc = cl_
    extra = env or {}
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=kc, ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"),
               ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG, PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    env.update(extra)
    pb = tmp_path / "play.yml"
    pb.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                   "tasks": tasks}], sort_keys=False))
    p = ansible_cli([str(Path(VENV_BIN) / "ansible-playbook"), "-i", "localhost,", str(pb),
                     "-e", "ansible_python_interpreter=%s" % (Path(VENV_BIN) / "python")] + list(args),
                    cwd=tmp_path, env=env, timeout=PLAY_TIMEOUT)
    return p.returncode, play_json(p)


def failures(result):
    return [(n, r.get("msg")) for n, r in task_results(result) if r.get("failed") and not r.get("ignore_errors")]


def mark_offsets(kube):
    """{mark name: audit log offset just after its event} of this test's markers."""
    prefix = ("gpuops-audit-mark/%s-" % SUFFIX).encode()
    out = {}
    with open(kube.audit_log, "rb") as f:
        pos = 0
        for line in f:
            pos += len(line)
            at = line.find(prefix)
            if at >= 0:
                name = line[at + len(prefix):].split(b'"', 1)[0].decode()
                out[name] = pos
    return out


def wait_marks(kube, names, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        got = mark_offsets(kube)
        if set(names) <= set(got):
            return got
        time.sleep(0.1)
    raise AssertionError("audit markers missing: %s" % sorted(set(names) - set(mark_offsets(kube))))


def rendered(result):
    """{(kind, namespace, name): manifest} of what the render tasks returned (stack and validation workloads)."""
    out = {}
    for name, r in task_results(result):
        if "Render the stack" in name and "manifests" in r:
            for d in list(r.get("manifests") or []) + list(r.get("validation_manifests") or []):
                md = d["metadata"]
                out[(d["kind"], md.get("namespace"), md["name"])] = d
    return out


def differences(want, live, path=""):
    """Where ``live`` does not carry ``want`` as sent: (path, sent, stored). Lists compare item by item."""
    out = []
    if isinstance(want, dict):
        if not isinstance(live, dict):
            return [(path, want, live)]
        for k, v in want.items():
            out += differences(v, live.get(k), "%s.%s" % (path, k) if path else k)
    elif isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return [(path, want, live)]
        for i, (a, b) in enumerate(zip(want, live)):
            out += differences(a, b, "%s[%d]" % (path, i))
    elif want != live and not (isinstance(want, (int, float)) and str(want) == str(live)):
        out.append((path, want, live))
    return out


def live_object(kube, d):
    from kubernetes import dynamic
    dyn = dynamic.DynamicClient(kube.api())
    res = dyn.resources.get(api_version=d["apiVersion"], kind=d["kind"])
    md = d["metadata"]
    try:
        return dyn.get(res, name=md["name"], namespace=md.get("namespace") if res.namespaced else None).to_dict()
    except dynamic.exceptions.NotFoundError:
        return None


@pytest.fixture(scope="module")
def converged(cl, tmp_path_factory):
    """Every strategy applied, then applied again, by the role in one play (audit markers around each); what the
    server did with it. The tests below read this in file order; the last one removes everything."""
    kube, _kc = cl
    tmp_path = tmp_path_factory.mktemp("converge")
    tasks = []
    for strategy in STRATEGIES:
        tasks += [mark_task(cl, strategy + "-0"), role_play(strategy), mark_task(cl, strategy + "-1"),
                  role_play(strategy), mark_task(cl, strategy + "-2")]
    rc, result = run_play(cl, tmp_path, tasks)
    (tmp_path / "play-result.json").write_text(json.dumps(result))
    out = {"rc": rc, "failures": failures(result), "want": rendered(result), "counts": {}, "first": {}, "rerun": {},
           "changed": {}, "missing": [], "uids": {}}
    if rc != 0:
        return out
    marks = wait_marks(kube, [s + "-2" for s in STRATEGIES])
    for strategy in STRATEGIES:
        first = kube.writes(marks[strategy + "-0"], marks[strategy + "-1"], user=USER)
        second = kube.writes(marks[strategy + "-1"], marks[strategy + "-2"], user=USER)
        out["counts"][strategy] = (len(first), len(second))
        out["first"][strategy] = first
        if second:
            out["rerun"][strategy] = second
    for key, d in sorted(out["want"].items(), key=lambda kv: str(kv[0])):
        live = live_object(kube, d)
        if live is None:
            out["missing"].append(key)
            continue
        out["uids"][key] = live["metadata"]["uid"]
        diff = differences(d, live)
        if diff:
            out["changed"]["%s %s/%s" % key] = diff
    out["sas"], out["rbac_checked"], out["rbac"] = rbac_problems(kube, "r%s-" % SUFFIX)
    (tmp_path / "report.json").write_text(json.dumps(dict((k, v) for k, v in out.items() if k not in ("want", "uids")), indent=1,
                                                     default=str))
    print("\nreal API server (%s): writes (first apply, re-run) per strategy %s" % (kube.version, out["counts"]))
    return out


def test_every_strategy_applied_and_accepted(converged):
    """The role applies every strategy through the real API server: no failed task, every request accepted, every
    rendered object there."""
    assert converged["rc"] == 0, converged["failures"]
    assert converged["want"], "no render results in the play output"
    for strategy in STRATEGIES:
        assert converged["first"][strategy], strategy
        rejected = [w for w in converged["first"][strategy] if w[2] >= 300]
        assert rejected == [], (strategy, rejected)
    assert converged["missing"] == []


def test_K8S_12_server_stores_what_was_sent(converged):
    """Every field the collection sends is stored as sent (the server adds defaults, but changes nothing sent). This
    failed before b1dd2ea: config-manager's empty env values (KUBECONFIG, SIGNAL, PROCESS_TO_SIGNAL) were sent as
    value "" and the API server drops an empty EnvVar value (omitempty); the emulator kept "" and hid it."""
    assert converged["rc"] == 0, converged["failures"]
    assert converged["changed"] == {}, converged["changed"]


def test_K8S_12_rerun_makes_no_writes(converged):
    """A second run of every strategy makes 0 write requests (audit log, this test's user), defaulting included.
    Before b1dd2ea the device plugin DaemonSets were applied again on every run (exclusive 1, time-slicing 1, mps 2,
    mig 1 writes)."""
    assert converged["rc"] == 0, converged["failures"]
    assert converged["rerun"] == {}, converged["rerun"]


def test_rbac_by_impersonation(converged):
    """Every API call the conformance RBAC rows name for a component is allowed to its ServiceAccount by the real
    RBAC authorizer (SubjectAccessReview), and calls no row names are denied."""
    assert converged["rc"] == 0, converged["failures"]
    assert len(converged["sas"]) >= 7
    problems = [p for p in converged["rbac"] if not p[1].startswith("no RBAC row")]
    assert problems == [], problems


def test_every_component_has_an_rbac_row(converged):
    """Every workload ServiceAccount of the stacks has RBAC rows naming its calls. Failed (strict xfail) before GSH-11
    stated the gpushare scheduler extender's calls."""
    assert converged["rc"] == 0, converged["failures"]
    assert [p for p in converged["rbac"] if p[1].startswith("no RBAC row")] == []


def test_daemonsets_run_on_their_pool_nodes_only(cl, converged):
    """The real DaemonSet controller places each stack DaemonSet's pods on the kwok node of its pool and on no other
    node (selectors, tolerations, the nvidia.com/gpu.deploy.* and pool labels the role set), and kwok makes them
    Ready: desired = ready = 1 (this test's pools have one node each)."""
    from kubernetes import client
    kube, _kc = cl
    assert converged["rc"] == 0, converged["failures"]
    apps, core = client.AppsV1Api(kube.api()), client.CoreV1Api(kube.api())
    mine = {}
    control_plane = sorted(n.metadata.name for n in core.list_node().items
                           if "node-role.kubernetes.io/control-plane" in (n.metadata.labels or {}))
    for key, d in converged["want"].items():
        if key[0] == "DaemonSet" and key[2] == "gpu-admission":
            # shared, beside each kube-scheduler: control-plane nodes only, never a GPU node
            mine[key] = None
        elif key[0] == "DaemonSet":
            strategy = [s for s in STRATEGIES if key[2].endswith("r%s-%s" % (SUFFIX, s))]
            assert strategy, key
            mine[key] = strategy[0]
    assert len(mine) >= 8, sorted(mine)
    problems = {}
    end = time.time() + 90
    while True:
        problems = {}
        for (_kind, ns, name), strategy in sorted(mine.items()):
            ds = apps.read_namespaced_daemon_set(name, ns)
            sel = ",".join("%s=%s" % kv for kv in sorted(ds.spec.selector.match_labels.items()))
            nodes = sorted(p.spec.node_name for p in core.list_namespaced_pod(ns, label_selector=sel).items
                           if p.metadata.deletion_timestamp is None)
            st = ds.status
            got = (st.desired_number_scheduled, st.number_ready, nodes)
            if strategy is None:
                if got != (len(control_plane), len(control_plane), control_plane):
                    problems[name] = got
            elif got != (1, 1, [node_name(strategy)]):
                problems[name] = got
        if not problems or time.time() > end:
            break
        time.sleep(1)
    assert problems == {}, problems


def test_what_each_stack_leaves_on_the_server(cl, converged):
    """What the server holds after the converge, per strategy: the node labels each stack's components select on,
    gpu-admission beside kube-scheduler with the RBAC its code calls (GPUM-13..16), Volcano's scheduler configuration
    merged (other plugins and keys kept, the original backed up, the argument that makes volcano-scheduler exit
    removed) and volcano-scheduler restarted once through its pod template (VOL-15)."""
    from kubernetes import client
    kube, _kc = cl
    assert converged["rc"] == 0, converged["failures"]
    assert len(converged["want"]) > 40, sorted(converged["want"])
    core, apps = client.CoreV1Api(kube.api()), client.AppsV1Api(kube.api())
    rbac = client.RbacAuthorizationV1Api(kube.api())

    def labels(strategy):
        return core.read_node(node_name(strategy)).metadata.labels

    assert labels("gpushare")["gpushare"] == "true"
    assert labels("time-slicing")["nvidia.com/device-plugin.config"] == "time-slicing"
    assert labels("mig")["nvidia.com/mig.config"] == "gpuops-1g-10gb-7"
    assert labels("mps")["nvidia.com/mps.capable"] == "true"
    assert labels("hami")["gpu"] == "on"
    assert labels("gpu-manager")["nvidia-device-enable"] == "enable"
    adm = apps.read_namespaced_daemon_set("gpu-admission", "kube-system")
    assert adm.spec.template.spec.host_network is True
    assert rbac.read_cluster_role("gpu-admission").rules[1].verbs == ["list", "watch", "patch"]
    cm = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
    conf = yaml.safe_load(cm.data["volcano-scheduler.conf"])
    names = [p["name"] for t in conf["tiers"] for p in t["plugins"]]
    assert "tdm" in names and "deviceshare" in names
    ds = [p for t in conf["tiers"] for p in t["plugins"] if p["name"] == "deviceshare"][0]
    # the default mode is vGPU (gpu-share is deprecated upstream since 1.9); GPUNumberEnable would make it exit
    assert ds["arguments"] == {"deviceshare.GPUSharingEnable": False, "deviceshare.VGPUEnable": True}
    assert core.read_namespaced_config_map("volcano-vgpu-device-config", "kube-system").data["device-config.yaml"]
    assert cm.data["other-key"] == "keep-me"
    backup = core.read_namespaced_config_map("gpuops-backup-configmap-volcano-scheduler-configmap", "volcano-system")
    assert "tdm" in backup.data["object.json"]
    # restarted once: the re-run wrote nothing (test_K8S_12_rerun_makes_no_writes), so not again
    sched = apps.read_namespaced_deployment("volcano-scheduler", "volcano-system")
    restart = (sched.spec.template.metadata.annotations or {}).get("gpuops.io/vgpu-device-config-checksum")
    assert restart and len(restart) == 64, sched.spec.template.metadata


def test_check_mode_writes_nothing(cl, converged, tmp_path):
    """Check mode with a changed setting reports the change and writes nothing."""
    kube, _kc = cl
    tasks = [mark_task(cl, "c0"), role_play("time-slicing", extra_vars={
        "gpu_sharing_stack_time_slicing": {"replicas": 8}}), mark_task(cl, "c1")]
    rc, result = run_play(cl, tmp_path, tasks, "--check", "--diff")
    assert rc == 0, failures(result)
    marks = wait_marks(kube, ["c1"])
    assert kube.writes(marks["c0"], marks["c1"], user=USER) == []
    assert any(r.get("changed") for n, r in task_results(result) if "Apply" in n), "check mode reported no change"


def test_absent_removes_what_was_made(cl, converged, tmp_path):
    """state=absent: every object the role made is gone (or being deleted), the node labels it set are gone, the
    adopted Volcano ConfigMap stays."""
    kube, _kc = cl
    want = converged["want"]
    tasks = [role_play(s, state="absent") for s in STRATEGIES]
    rc, result = run_play(cl, tmp_path, tasks)
    assert rc == 0, failures(result)
    # Shared objects (the NVIDIA strategies' RuntimeClass) stay while another pool of the family uses them: on the
    # shared lab cluster a concurrent test's pool may. The role decides from the pools recorded on the object (users)
    # and from the pools whose nodes carry the family's labels (its render's other_pools); its last decision for each
    # object counts, and a pool of this test's own there would be a defect (each pool's absent removes its record and
    # its nodes' labels before the next strategy runs).
    own = ("r%s-" % SUFFIX, "v%s-" % SUFFIX)
    kept_for = {}
    for name, r in task_results(result):
        if name.endswith("Render the stack and check the input") and "other_pools" in r:
            for m in r.get("shared_manifests") or []:
                kept_for[(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])] = r["other_pools"]
        if name.endswith("Remove the shared objects when no other pool uses them") and "objects" in r:
            for o in r["objects"]:
                k = (o["kind"], o["namespace"], o["name"])
                kept_for[k] = sorted(set(kept_for.get(k) or []) | set(o.get("users") or [])) \
                    if o["action"] == "kept" else []
    for k, pools in kept_for.items():
        assert not [p for p in pools if p.startswith(own)], (k, pools)
    left = []
    for k, d in want.items():
        if k == ("ConfigMap", "volcano-system", "volcano-scheduler-configmap"):
            continue  # Volcano's own, adopted: the role merged into it and leaves it
        live = live_object(kube, d)
        if live is not None and not live.get("metadata", {}).get("deletionTimestamp"):
            if kept_for.get(k):
                continue  # kept for the concurrent pools the role named in its last render of the family
            shared = (d["metadata"].get("labels") or {}).get("gpuops.io/sharing-scope") == "shared"
            if shared and live["metadata"]["uid"] != converged["uids"].get(k):
                continue  # a shared object made anew since the converge, by a concurrent test's pool
            left.append(k)
    renders = [(r.get("strategy"), r.get("other_pools"), [m["metadata"]["name"] for m in r.get("shared_manifests") or []])
               for name, r in task_results(result) if name.endswith("Render the stack and check the input")]
    assert left == [], (left, kept_for, renders)
    from kubernetes import client
    core = client.CoreV1Api(kube.api())
    cm = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
    assert cm.data["other-key"] == "keep-me"
    for strategy in STRATEGIES:
        labels = core.read_node(node_name(strategy)).metadata.labels
        assert not [k for k in labels if k.startswith("gpuops.io/")], (strategy, labels)
        assert "gpushare" not in labels and "nvidia.com/device-plugin.config" not in labels
        assert "nvidia-device-enable" not in labels


# ---------------------------------------------------------------------------------------------- RBAC by impersonation
# The API calls each upstream component makes, from the RBAC rows of docs/conformance/*.md (row id first): every one
# must be allowed to the component's ServiceAccount by the real RBAC authorizer. (verb, group, resource[/sub], ns)
# with ns None = cluster scope, "*own*" = the component's namespace.
CALLS = {
    "nvidia-device-plugin": ("DP-15", [("get", "", "nodes", None), ("list", "", "nodes", None),
                                       ("watch", "", "nodes", None)]),
    "nvidia-mig-manager": ("MIGM-05", [("get", "", "nodes", None), ("list", "", "nodes", None),
                                       ("watch", "", "nodes", None), ("patch", "", "nodes", None),
                                       ("list", "", "pods", None), ("list", "", "pods", "*own*"),
                                       ("delete", "", "pods", "*own*")]),
    "gpushare-device-plugin": ("GSH-07", [("get", "", "nodes", None), ("list", "", "nodes", None),
                                          ("get", "", "nodes/proxy", None), ("patch", "", "nodes/status", None),
                                          ("update", "", "nodes/status", None), ("update", "", "pods", "default"),
                                          ("patch", "", "pods", "default"), ("create", "", "events", "default")]),
    "gpushare-schd-extender": ("GSH-11", [("list", "", "nodes", None), ("watch", "", "nodes", None),
                                          ("list", "", "pods", None), ("watch", "", "pods", None),
                                          ("get", "", "pods", "default"), ("patch", "", "pods", "default"),
                                          ("update", "", "pods", "default"), ("create", "", "pods/binding", "default"),
                                          ("list", "", "configmaps", None), ("watch", "", "configmaps", None)]),
    "gpu-manager": ("GPUM-04..GPUM-11", [("get", "", "nodes", None), ("update", "", "nodes", None),
                                         ("list", "", "pods", None), ("watch", "", "pods", None),
                                         ("get", "", "pods", "default"), ("patch", "", "pods", "default"),
                                         ("delete", "", "pods", "default"), ("update", "", "pods/status", "default")]),
    "gpu-admission": ("GPUM-13..GPUM-15", [("list", "", "nodes", None), ("watch", "", "nodes", None),
                                           ("list", "", "pods", None), ("watch", "", "pods", None),
                                           ("patch", "", "pods", "default")]),
    "volcano-device-plugin": ("VOL-08", [("get", "", "nodes", None), ("list", "", "nodes", None),
                                         ("watch", "", "nodes", None), ("update", "", "nodes", None),
                                         ("patch", "", "nodes", None), ("patch", "", "nodes/status", None),
                                         ("update", "", "pods", "default"), ("patch", "", "pods", "default"),
                                         ("get", "", "configmaps", "kube-system")]),
    "hami-scheduler": ("HAMI-08, HAMI-09", [("delete", "", "pods", "default"), ("update", "", "pods/status", "default"),
                                            ("create", "events.k8s.io", "events", "default"),
                                            ("patch", "", "pods", "default"), ("patch", "", "configmaps", "default"),
                                            ("patch", "", "nodes", None), ("list", "", "resourcequotas", None),
                                            ("create", "", "pods/binding", "default")]),
    "hami-device-plugin": ("HAMI-11", [("get", "", "nodes", None), ("list", "", "nodes", None),
                                       ("update", "", "nodes", None), ("patch", "", "nodes", None),
                                       ("get", "", "pods", None), ("list", "", "pods", None), ("watch", "", "pods", None),
                                       ("create", "", "pods", "default"), ("update", "", "pods", "default"),
                                       ("patch", "", "pods", "default"), ("create", "", "events", "default"),
                                       ("update", "", "events", "default"), ("list", "", "events", "default")]),
}
# Calls no row names: denied to every component's ServiceAccount.
NOT_NAMED = [("get", "", "secrets", "kube-system"), ("list", "", "secrets", None), ("delete", "", "nodes", None),
             ("create", "", "pods/exec", "default"), ("escalate", "rbac.authorization.k8s.io", "clusterroles", None),
             ("bind", "rbac.authorization.k8s.io", "clusterroles", None), ("create", "", "serviceaccounts/token", "kube-system"),
             ("delete", "apps", "daemonsets", "kube-system")]


# Calls upstream's ClusterRole grants a component but its code never makes (the collection leaves them out): denied.
NOT_MADE = {
    "gpu-manager": ("GPUM-12", [("create", "", "events", "default"), ("patch", "", "nodes", None)]),
    "gpu-admission": ("GPUM-16", [("get", "", "nodes", None), ("update", "", "pods", "default"),
                                  ("create", "", "pods/binding", "default")]),
    "gpushare-schd-extender": ("GSH-11", [("get", "", "nodes", None), ("get", "", "configmaps", "kube-system"),
                                          ("create", "", "events", "default"), ("patch", "", "events", "default"),
                                          ("create", "", "bindings", "default")]),
}


def component_of(sa_name):
    for comp in sorted(CALLS, key=len, reverse=True):
        if sa_name.startswith(comp):
            return comp
    return None


def rbac_problems(kube, pool_prefix):
    """[(service account, call, expected, got)] for every workload ServiceAccount of this test's pools."""
    from kubernetes import client
    apps = client.AppsV1Api(kube.api())
    authz = client.AuthorizationV1Api(kube.api())
    sas = set()
    for w in apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED).items + \
            apps.list_deployment_for_all_namespaces(label_selector=MANAGED).items:
        sa = w.spec.template.spec.service_account_name
        if sa:
            sas.add((w.metadata.namespace, sa))
    problems, checked = [], []
    for ns, sa in sorted(sas):
        comp = component_of(sa)
        user = "system:serviceaccount:%s:%s" % (ns, sa)
        groups = ["system:serviceaccounts", "system:serviceaccounts:%s" % ns, "system:authenticated"]
        expect = [(c, True) for c in (CALLS[comp][1] if comp else [])] + [(c, False) for c in NOT_NAMED] + \
            [(c, False) for c in (NOT_MADE[comp][1] if comp in NOT_MADE else [])]
        for (verb, group, resource, cns), allowed in expect:
            res, _, sub = resource.partition("/")
            ra = {"verb": verb, "group": group, "resource": res}
            if sub:
                ra["subresource"] = sub
            if cns:
                ra["namespace"] = ns if cns == "*own*" else cns
            got = authz.create_subject_access_review(
                {"spec": {"user": user, "groups": groups, "resourceAttributes": ra}}).status.allowed
            checked.append((sa, verb, resource))
            if bool(got) != allowed:
                problems.append((user, CALLS[comp][0] if comp and allowed else "not named", verb, group, resource,
                                 cns, "expected allowed" if allowed else "expected denied"))
        if comp is None:
            problems.append((user, "no RBAC row in docs/conformance names this component", "", "", "", "", ""))
    return sas, checked, problems


# ---------------------------------------------------------------------------------------------------- variants
def test_variants_applied_rerun_check_mode_and_absent(cl, converged, tmp_path):
    """Each of VARIANTS on its own kwok node and pool, in one play per step: applied as is (no failed task, no refused
    request, every rendered object stored as sent), a re-run makes 0 writes, a check-mode run 0 writes, `absent`
    removes every object it made."""
    from kubernetes import client
    kube, _kc = cl
    core = client.CoreV1Api(kube.api())
    for variant, (strategy, _extra) in VARIANTS.items():
        core.create_node(stack_node(variant_node(variant), strategy))
    try:
        tasks = []
        for variant, (strategy, _extra) in VARIANTS.items():
            tasks += [mark_task(cl, variant + "-0"), role_play(strategy, variant=variant), mark_task(cl, variant + "-1"),
                      role_play(strategy, variant=variant), mark_task(cl, variant + "-2")]
        rc, result = run_play(cl, tmp_path, tasks)
        assert rc == 0, failures(result)
        want = rendered(result)
        marks = wait_marks(kube, [v + "-2" for v in VARIANTS])
        counts, rerun = {}, {}
        for variant in VARIANTS:
            first = kube.writes(marks[variant + "-0"], marks[variant + "-1"], user=USER)
            second = kube.writes(marks[variant + "-1"], marks[variant + "-2"], user=USER)
            counts[variant] = (len(first), len(second))
            assert first and [w for w in first if w[2] >= 300] == [], (variant, first)
            if second:
                rerun[variant] = second
        print("\nreal API server (%s): writes (first apply, re-run) per variant %s" % (kube.version, counts))
        changed, missing = {}, []
        for key, d in sorted(want.items(), key=lambda kv: str(kv[0])):
            live = live_object(kube, d)
            if live is None:
                missing.append(key)
            elif differences(d, live):
                changed["%s %s/%s" % key] = differences(d, live)
        assert missing == [] and changed == {}, (missing, changed)
        assert rerun == {}, rerun
        mine = [k for k in want if "v%s-" % SUFFIX in k[2]]
        assert len(mine) >= len(VARIANTS), sorted(want)
        # check mode: the same settings again, nothing written
        tasks = [mark_task(cl, "vc0")] + [role_play(s, variant=v) for v, (s, _e) in VARIANTS.items()] + \
            [mark_task(cl, "vc1")]
        rc, result = run_play(cl, tmp_path, tasks, "--check")
        assert rc == 0, failures(result)
        marks = wait_marks(kube, ["vc1"])
        assert kube.writes(marks["vc0"], marks["vc1"], user=USER) == []
        # absent: every object of the variants' pools gone
        rc, result = run_play(cl, tmp_path, [role_play(s, state="absent", variant=v) for v, (s, _e) in VARIANTS.items()])
        assert rc == 0, failures(result)
        left = [k for k in mine if (lambda live: live is not None and not live["metadata"].get("deletionTimestamp"))(
            live_object(kube, want[k]))]
        assert left == [], left
    finally:
        for variant in VARIANTS:
            try:
                core.delete_node(variant_node(variant))
            except client.ApiException:
                pass
