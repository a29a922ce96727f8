"""The collection under API faults, on the real control plane (lab/kube/real.py) behind the lab's fault proxy
(lab/kube/faultproxy.py, one per test): 429 with Retry-After (as API Priority and Fairness answers), 503, connections
reset before the request is forwarded and after it landed, and the API server unreachable for some seconds.

What must hold (issue #31, section 2; the retry policy is kube/access's, docs/troubleshooting.md):
  * role gpu_node_labels and a sharing stack as cluster.yml applies it (role gpu_sharing_stack, gpu_node_labels with
    the stack's labels, then the stack's ready step) under 10 % faults end in the state a run without faults reaches:
    the same labels as on a twin set of nodes labelled without faults, every rendered object live as rendered, and a
    re-run without faults makes 0 writes (audit log, this test's user);
  * nothing of the site's is lost or half-written: other labels and annotations of the nodes, a site ConfigMap next to
    the stack's objects;
  * retries honour Retry-After (the proxy's record: the next try of a request answered 429 comes no sooner) and are
    bounded (a proxy that stays down makes the run stop with the policy's message, and the next run finishes);
  * gpu_node_drain: the API server unreachable in the middle of a drain; the next run finishes the drain, and a node
    an operator had cordoned before stays cordoned after the restore.

Seeds are chosen so that the first requests meet each kind of fault (faultproxy.first_faults), so no test passes for
want of a fault; every test asserts what was injected.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_faults_real.py
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "lab" / "kube"))
sys.path.insert(0, str(HERE))

import faultproxy  # noqa: E402
from conftest import ansible_cli, new_namespace, run_module, wait_until  # noqa: E402
from gpu_kwok_nodes import agents_node  # noqa: E402
from test_gpu_node_labels import facts  # noqa: E402
from test_gpu_sharing_stack import CASES, role_play  # noqa: E402
from test_gpu_sharing_stack_real import (differences, failures, live_object, rendered, run_play,  # noqa: E402
                                         task_results)

SUFFIX = "%d" % os.getpid()
USER = "gpuops-test-faults-%s" % SUFFIX
SITE = {"team": "ml", "site.example.com/rack": "r7"}
SITE_ANN = {"site.example.com/owner": "ops"}
RATE = 0.1
# the outage tests: the retry policy's budget (GPUOPS_K8S_RETRY_TOTAL) and the longest the proxy stays down (the test
# brings it back as soon as the run has given up)
RETRY_TOTAL_S = 2
OUTAGE_S = 120


def proxy(kube, kc, name, **kw):
    kw.setdefault("rate", RATE)
    return faultproxy.FaultProxy(kube.state, kc, name="%s-%s" % (name, SUFFIX), **kw)


def gpu_node(name, labels=None, unschedulable=False):
    """A T4 machine whose GPU NVIDIA's device plugin serves, as a real lab node published it (gpu_kwok_nodes.
    agents_node: shape t4x1, exclusive - GFD's labels, nvidia.com/gpu 1), with the site's own labels and annotations
    (the tests check that no run takes them away)."""
    node = agents_node(name, "t4x1", "exclusive", labels=dict(SITE, **(labels or {})))
    node["metadata"]["annotations"].update(SITE_ANN)
    node["spec"] = {"unschedulable": True} if unschedulable else {}
    return node


@pytest.fixture(scope="module")
def cl(kube_real):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    kc = kube_real.user(USER)
    made = []

    def node(name, **kw):
        core.create_node(gpu_node(name, **kw))
        made.append(name)
    yield {"kube": kube_real, "kc": kc, "core": core, "node": node}
    for name in made:
        try:
            core.delete_node(name)
        except client.ApiException:
            pass


def honoured_retry_after(record):
    """(request, answer 429 at, next try at, Retry-After) for every 429 the proxy sent whose retry came too early."""
    early = []
    for i, e in enumerate(record):
        if e["fault"] != "429":
            continue
        nxt = next((n for n in record[i + 1:] if n["method"] == e["method"] and n["path"] == e["path"]), None)
        if nxt is not None and nxt["t"] - e["t"] < e["retry_after"] - 0.05:
            early.append(("%s %s" % (e["method"], e["path"]), e["t"], nxt["t"], e["retry_after"]))
    return early


def kinds(record):
    return sorted(set(e["fault"] for e in record if e["fault"]))


# ---------------------------------------------------------------------------------------------- the proxy itself
def test_proxy_answers_faults_by_seed(cl):
    """The proxy's own contract: 429 with Retry-After and 503 as HTTP answers, resets, forwarding otherwise, the same
    decisions for the same seed, and a record of each."""
    import ssl
    import urllib.error
    import urllib.request
    kube = cl["kube"]
    with proxy(kube, cl["kc"], "contract", rate=1.0, faults=["429"], retry_after=3) as p:
        ctx = ssl.create_default_context(cafile=kube.ca)
        ctx.load_cert_chain(*faultproxy_user_cert(cl["kc"]))
        url = "https://127.0.0.1:%d/version" % p.port
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, context=ctx, timeout=10)
        assert err.value.code == 429 and err.value.headers["Retry-After"] == "3"
        p.rate, p.faults = 1.0, ("503",)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, context=ctx, timeout=10)
        assert err.value.code == 503 and err.value.headers.get("Retry-After") is None
        p.faults = ("reset",)
        with pytest.raises((ConnectionError, urllib.error.URLError)):
            urllib.request.urlopen(url, context=ctx, timeout=10)
        p.rate = 0.0
        with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
            assert json.loads(r.read())["major"] == "1"
        assert [e["fault"] for e in p.record] == ["429", "503", "reset", None]
        assert p.record[-1]["status"] == 200
        # an outage refuses connections until up() ends it (well before its 60 s)
        p.down(60)
        with pytest.raises((ConnectionError, urllib.error.URLError)):
            urllib.request.urlopen(url, context=ctx, timeout=10)
        assert 0 < p.up() < 30 and p.down_since is None
        with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
            assert r.status == 200
    decisions = [faultproxy.decisions(7, RATE, faultproxy.FAULTS, 50) for _ in range(2)]
    assert decisions[0] == decisions[1] and 1 <= sum(1 for d in decisions[0] if d) <= 15


def faultproxy_user_cert(kc):
    with open(kc) as f:
        user = json.load(f)["users"][0]["user"]
    return user["client-certificate"], user["client-key"]


# ---------------------------------------------------------------------------------------------- node labels
LABEL_NODES = 3


def labels_inventory(prefix):
    # the probe facts of the nodes' GPUs (gpu_node: one T4)
    hosts = dict(("%s-%d" % (prefix, i), {"gpu_probe_facts": facts("Tesla-T4", 15360, 1)})
                 for i in range(LABEL_NODES))
    return {"all": {"hosts": {"localhost": {"ansible_connection": "local"}},
                    "children": {"gpu_nodes": {"hosts": hosts}}}}


def labels_play(tmp_path, kc, prefix, env=None):
    from conftest import ANSIBLE_TESTS_CFG, PLAY_TIMEOUT, VENV_BIN
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(labels_inventory(prefix)))
    nodes = ["%s-%d" % (prefix, i) for i in range(LABEL_NODES)]
    play = [{"hosts": "localhost", "gather_facts": False, "roles": [{"role": "gpuops.k8s_gpu.gpu_node_labels"}],
             "vars": {"gpu_node_labels_pools": [
                 {"name": "ts-%s" % prefix, "strategy": "time-slicing", "nodes": nodes[:2],
                  "device_plugin_config": "ts-4"},
                 {"name": "ex-%s" % prefix, "strategy": "exclusive", "nodes": nodes[2:]}],
                 "gpu_node_labels_extra": {"gpuops.io/managed": "true"}}}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    e = dict(os.environ, K8S_AUTH_KUBECONFIG=kc, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
             ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1",
             ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"), ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG,
             PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), **(env or {}))
    p = ansible_cli([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(tmp_path / "inv.yml"),
                        str(tmp_path / "play.yml"), "-e", "ansible_python_interpreter=%s"
                        % os.path.join(VENV_BIN, "python")], env=e, cwd=tmp_path, timeout=PLAY_TIMEOUT)
    result = json.loads(p.stdout[p.stdout.index("{"):])
    return p.returncode, result


def node_meta(core, name):
    n = core.read_node(name)
    return dict(n.metadata.labels or {}), dict(n.metadata.annotations or {})


def strip(prefix, d):
    return dict((k, v.replace(prefix, "P") if isinstance(v, str) else v) for k, v in d.items()
                if k != "kubernetes.io/hostname")


def test_K8S_13_node_labels_under_faults_same_state_and_rerun_writes_nothing(cl, tmp_path):
    kube, core = cl["kube"], cl["core"]
    clean, faulty = "fa-%s" % SUFFIX, "fb-%s" % SUFFIX
    for prefix in (clean, faulty):
        for i in range(LABEL_NODES):
            cl["node"]("%s-%d" % (prefix, i))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    seed = faultproxy.first_faults(RATE, faultproxy.FAULTS, within=4, want=("429", "reset_after"))
    # the twin labelled without faults runs beside the faulted run (other nodes, the API server directly): its CPU
    # overlaps the faulted run's Retry-After and back-off waits
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        twin = ex.submit(labels_play, tmp_path / "a", cl["kc"], clean)
        with proxy(kube, cl["kc"], "labels", seed=seed) as p:
            rc, result = labels_play(tmp_path / "b", p.kubeconfig, faulty)
        rc_a, result_a = twin.result()
    assert rc_a == 0, failures(result_a)
    (tmp_path / "record.json").write_text(json.dumps(p.record, indent=1))
    assert rc == 0, (failures(result), p.record)
    assert {"429", "reset_after"} <= set(kinds(p.record)), p.record
    assert honoured_retry_after(p.record) == [], p.record
    for i in range(LABEL_NODES):
        a_labels, a_ann = node_meta(core, "%s-%d" % (clean, i))
        b_labels, b_ann = node_meta(core, "%s-%d" % (faulty, i))
        assert strip(faulty, b_labels) == strip(clean, a_labels)
        assert strip(faulty, b_ann) == strip(clean, a_ann)
        for k, v in SITE.items():
            assert b_labels[k] == v
        for k, v in SITE_ANN.items():
            assert b_ann[k] == v
    start = kube.mark()
    rc, result = labels_play(tmp_path / "c", cl["kc"], faulty)
    assert rc == 0, failures(result)
    assert kube.writes(start, kube.mark(), user=USER) == []


# ---------------------------------------------------------------------------------------------- a sharing stack
def stack_task(pool, node):
    _n, node_facts, extra = CASES["time-slicing"]
    return role_play("time-slicing", node, node_facts, extra, pool=pool)


SITE_CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "site-settings-%s" % SUFFIX},
           "data": {"owner": "site", "keep": "me"}}


def test_stack_apply_under_faults_same_state_site_kept_rerun_writes_nothing(cl, tmp_path):
    from kubernetes import client
    kube, core = cl["kube"], cl["core"]
    pool, node = "fs%s" % SUFFIX, "fs-%s" % SUFFIX
    cl["node"](node)
    seed = faultproxy.first_faults(RATE, faultproxy.FAULTS, within=12, want=("429", "503", "reset", "reset_after"))
    with proxy(kube, cl["kc"], "stack", seed=seed) as p:
        rc, result = run_play((kube, p.kubeconfig), tmp_path, [stack_task(pool, node)])
    (tmp_path / "record.json").write_text(json.dumps(p.record, indent=1))
    assert rc == 0, (failures(result), kinds(p.record))
    assert set(faultproxy.FAULTS) <= set(kinds(p.record)), p.record
    assert honoured_retry_after(p.record) == [], p.record
    want = rendered(result)
    assert want
    ns = sorted(set(k[1] for k in want if k[1]))[0]
    # a site object next to the stack's: untouched by the faulted run and the re-run
    site = dict(SITE_CM, metadata=dict(SITE_CM["metadata"], namespace=ns))
    try:
        core.create_namespaced_config_map(ns, site)
    except client.ApiException as exc:
        assert exc.status == 409
    changed = dict(("%s %s/%s" % k, differences(d, live_object(kube, d))) for k, d in want.items())
    assert dict((k, v) for k, v in changed.items() if v) == {}
    labels, ann = node_meta(core, node)
    for k, v in SITE.items():
        assert labels[k] == v
    for k, v in SITE_ANN.items():
        assert ann[k] == v
    start = kube.mark()
    rc, result = run_play((kube, cl["kc"]), tmp_path, [stack_task(pool, node)])
    assert rc == 0, failures(result)
    assert kube.writes(start, kube.mark(), user=USER) == []
    assert core.read_namespaced_config_map(site["metadata"]["name"], ns).data == SITE_CM["data"]
    core.delete_namespaced_config_map(site["metadata"]["name"], ns)


def stack_objects_task(pool, node):
    """The stack's objects only (role gpu_sharing_stack, as cluster.yml's first stack step), no labels or ready."""
    block = stack_task(pool, node)["block"]
    return {"name": block[0]["name"], "block": block[:1]}


def test_uninstall_keeps_the_shared_runtime_class_a_pool_applied_before_labelling_its_nodes(cl, tmp_path):
    """Issue 37 item 8 (CI of main failed at random on it): pool A of the NVIDIA family has applied its objects, the
    shared RuntimeClass among them, and not yet labelled its node (cluster.yml labels after the stack's apply; another
    inventory, team or AWX slice runs at the same time). Pool B's uninstall must keep the RuntimeClass: its render
    sees no other pool's labelled node, so before the fix it deleted it. A records itself on the object when it
    applies it; B's removal names A among the users it kept the object for. Then A's own uninstall takes it (unless a
    concurrent test's pool of the family uses it: the role names those)."""
    kube = cl["kube"]
    a, b = "ua%s" % SUFFIX, "ub%s" % SUFFIX
    na, nb = "ua-%s" % SUFFIX, "ub-%s" % SUFFIX
    cl["node"](na)
    cl["node"](nb)
    rc, result = run_play((kube, cl["kc"]), tmp_path, [stack_objects_task(a, na)])
    assert rc == 0, failures(result)
    shared = [d for k, d in rendered(result).items()
              if (d["metadata"].get("labels") or {}).get("gpuops.io/sharing-scope") == "shared"]
    assert [d["kind"] for d in shared] == ["RuntimeClass"], shared
    name = shared[0]["metadata"]["name"]
    users = sorted(k for k in (live_object(kube, shared[0])["metadata"].get("annotations") or {})
                   if k.startswith("user.gpuops.io/"))
    assert "user.gpuops.io/" + a in users, users
    _n, node_facts, extra = CASES["time-slicing"]
    rc, result = run_play((kube, cl["kc"]), tmp_path, [role_play("time-slicing", nb, node_facts, extra, pool=b,
                                                                 state="absent")])
    assert rc == 0, failures(result)
    removal = [r for n, r in task_results(result) if n.endswith("Remove the shared objects when no other pool uses them")]
    assert removal, [n for n, _r in task_results(result)]
    kept = [o for o in removal[0]["objects"] if o["kind"] == "RuntimeClass" and o["name"] == name]
    assert kept and kept[0]["action"] == "kept" and a in kept[0]["users"], removal[0]["objects"]
    live = live_object(kube, shared[0])
    assert live is not None and not live["metadata"].get("deletionTimestamp")
    # A's uninstall: its record goes; the object goes too unless another pool is recorded or labelled meanwhile
    rc, result = run_play((kube, cl["kc"]), tmp_path, [role_play("time-slicing", na, node_facts, extra, pool=a,
                                                                 state="absent")])
    assert rc == 0, failures(result)
    live = live_object(kube, shared[0])
    assert live is None or "user.gpuops.io/" + a not in (live["metadata"].get("annotations") or {}), live
    removal = [r for n, r in task_results(result) if n.endswith("Remove the shared objects when no other pool uses them")]
    if live is not None and not live["metadata"].get("deletionTimestamp"):
        kept = [o for o in removal[0]["objects"] if o["kind"] == "RuntimeClass" and o["name"] == name]
        assert kept and kept[0]["action"] == "kept", removal[0]["objects"]
        assert not [u for u in kept[0]["users"] if u in (a, b)], kept
        # kept for a concurrent test's pool: recorded on the object (kept[0]["users"]) or labelled (other_pools)


def test_stack_apply_with_the_api_server_gone_stops_clearly_and_the_next_run_finishes(cl, tmp_path, monkeypatch):
    """The API server unreachable in the middle of the stack's apply (the 8th request on) for longer than the retry
    budget: the run stops naming the request and the limits; the next run (server back) finishes the job. The outage
    lasts until the first run has stopped (OUTAGE_S at most), so it outlasts the budget whatever the machine's load."""
    kube = cl["kube"]
    pool, node = "fd%s" % SUFFIX, "fd-%s" % SUFFIX
    cl["node"](node)
    with proxy(kube, cl["kc"], "stack-down", rate=0.0, down_at=(8, OUTAGE_S)) as p:
        monkeypatch.setenv("GPUOPS_K8S_RETRY_TOTAL", str(RETRY_TOTAL_S))  # the policy's budget shorter than the outage
        rc, result = run_play((kube, p.kubeconfig), tmp_path, [stack_objects_task(pool, node)])
        monkeypatch.delenv("GPUOPS_K8S_RETRY_TOTAL")
        assert [e for e in p.record if e["fault"] == "down"], p.record
        assert p.up() is not None, p.record  # still down when the run stopped: it gave up, not the outage
        rc2, result2 = run_play((kube, p.kubeconfig), tmp_path, [stack_objects_task(pool, node)])
    msgs = [m for _n, m in failures(result)]
    assert rc != 0 and any("gave up" in (m or "") for m in msgs), msgs
    assert rc2 == 0, failures(result2)
    want = rendered(result2)
    assert want and dict((k, differences(d, live_object(kube, d))) for k, d in want.items()
                         if differences(d, live_object(kube, d))) == {}


# ---------------------------------------------------------------------------------------------- drain
def test_drain_with_the_api_server_gone_next_run_finishes_operator_cordon_kept(cl, collections_path):
    kube, core = cl["kube"], cl["core"]
    node, ns = "fdr-%s" % SUFFIX, "faults-drain-%s" % SUFFIX
    cl["node"](node, labels={"gpuops.io/faults-drain": SUFFIX}, unschedulable=True)  # an operator's cordon
    new_namespace(core, ns)
    try:
        for i in range(2):
            core.create_namespaced_pod(ns, {"metadata": {"name": "gpu-%d" % i}, "spec": {
                "nodeName": node, "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "registry.example.com/cuda:12",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        wait_until("2 pods Running on %s" % node, lambda: len(
            [q for q in core.list_namespaced_pod(ns).items if q.status.phase == "Running"]) == 2)
        env = {"GPUOPS_K8S_RETRY_TOTAL": str(RETRY_TOTAL_S)}
        with proxy(kube, cl["kc"], "drain", rate=0.0, down_at=(4, OUTAGE_S)) as p:
            args = {"name": node, "kubeconfig": p.kubeconfig, "poll_interval": 1, "timeout": 60}
            first = run_module(collections_path, "gpuops.k8s_gpu.gpu_node_drain", json.dumps(args), env=env)
            assert [e for e in p.record if e["fault"] == "down"], p.record
            # the API server back once the first run has given up (it was still down then)
            assert p.up() is not None, p.record
            second = run_module(collections_path, "gpuops.k8s_gpu.gpu_node_drain", json.dumps(args), env=env)
        assert first.get("failed") and "gave up" in first["msg"], first
        assert not second.get("failed"), second
        assert core.read_node(node).spec.unschedulable is True
        left = [q.metadata.name for q in core.list_namespaced_pod(ns).items if q.metadata.deletion_timestamp is None]
        assert left == [], left
        restore = second["restore"]
        assert restore.get("uncordon") is False, restore
        res = run_module(collections_path, "gpuops.k8s_gpu.gpu_node_drain",
                         json.dumps({"name": node, "kubeconfig": cl["kc"], "state": "restored", "restore": restore}))
        assert not res.get("failed"), res
        assert core.read_node(node).spec.unschedulable is True, "the operator's cordon was lifted"
    finally:
        core.delete_namespace(ns)


# ---------------------------------------------------------------------------------------------- kubernetes.core
CORE_CASES = [("GET 429", "GET", "429"), ("GET reset", "GET", "reset"), ("GET 503", "GET", "503"),
              ("PATCH 429", "PATCH", "429"), ("PATCH 503", "PATCH", "503"), ("PATCH reset", "PATCH", "reset")]


def test_K8S_16_what_kubernetes_cores_own_client_retries(cl, tmp_path):
    """The fact behind the task-level retries of the kubernetes.core tasks in roles and playbooks: kubernetes.core's
    client (kubernetes 37 on urllib3 2, its defaults) retries a GET answered 429 with Retry-After (after it) and a GET
    whose connection was reset, not a GET answered 503 without Retry-After, and nothing of a merge PATCH. One
    ConfigMap per case; the proxy faults the first request of the case's method on it."""
    from kubernetes import client
    kube, core = cl["kube"], cl["core"]
    names = dict((case, "faults-core-%s-%d" % (SUFFIX, i)) for i, (case, _m, _f) in enumerate(CORE_CASES))
    for name in names.values():
        core.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"a": "x"}})
    done = set()

    def script(method, path):
        for case, m, fault in CORE_CASES:
            if m == method and path.split("?")[0].endswith("/" + names[case]) and case not in done:
                done.add(case)
                return fault
        return None
    tasks = []
    for case, method, _f in CORE_CASES:
        info = {"kind": "ConfigMap", "api_version": "v1", "namespace": "default", "name": names[case]}
        if method == "GET":
            tasks.append({"name": case, "kubernetes.core.k8s_info": info, "ignore_errors": True})
        else:
            tasks.append({"name": case, "ignore_errors": True, "kubernetes.core.k8s": dict(
                info, state="patched", merge_type="merge", definition={"data": {"a": "y"}})})
    try:
        with proxy(kube, cl["kc"], "core", retry_after=1, script=script) as p:
            rc, result = run_play((kube, p.kubeconfig), tmp_path, tasks)
    finally:
        for name in names.values():
            try:
                core.delete_namespaced_config_map(name, "default")
            except client.ApiException:
                pass
    failed = dict((n, bool(r.get("failed"))) for n, r in task_results(result))
    got = {}
    for case, method, _f in CORE_CASES:
        tries = [e for e in p.record if e["method"] == method and e["path"].split("?")[0].endswith("/" + names[case])]
        got[case] = (failed[case], len(tries))
        if case == "GET 429":
            assert tries[1]["t"] - tries[0]["t"] >= 1 - 0.05, tries
    assert got == {"GET 429": (False, 2), "GET reset": (False, 2), "GET 503": (True, 1),
                   "PATCH 429": (True, 1), "PATCH 503": (True, 1), "PATCH reset": (True, 1)}, got
