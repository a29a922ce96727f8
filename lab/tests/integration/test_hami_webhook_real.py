"""HAMi's mutating webhook, as the collection renders it (stacks/hami, issue #27 item 3.4, HAMI-15), on the real
kube-apiserver (lab/kube/real.py, the shared `kube_real` cluster). There is no HAMi binary here (the Go module proxy
refuses github.com/Project-HAMi/HAMi at every version), so lab/kube/webhook_recorder.py stands in for hami-scheduler's
/webhook endpoint: it records every AdmissionReview the API server sends and admits the pod unchanged. The API
server's own admission chain decides which pods it sends, so the recorder's log is the webhook's real scope.

What runs here:
  * the MutatingWebhookConfiguration exactly as rendered (service reference, caBundle, selectors, rules,
    failurePolicy) is accepted by the API server's validation (a server-side dry-run create: stored for real it would
    take every pod create of the shared cluster to a Service nothing answers);
  * the same webhooks registered with the recorder (two changes, both in `registered()`: clientConfig names the
    recorder's URL instead of the hami-scheduler Service - no kube-proxy here, the API server would dial the Service's
    ClusterIP - and the namespaceSelector also requires this file's namespace label, so that no other test's pods are
    sent; within this file's namespaces the collection's selectors decide alone), applied twice by the collection's
    k8s_converge (the second run writes nothing: server-side defaulting of the webhook fields included);
  * which pod creates the API server sends: every pod of every namespace (GPU or not, pods of another NVIDIA pool
    included) except those the namespace or pod label hami.io/webhook=ignore excludes, creates only (no updates) -
    which is why the collection refuses the webhook beside another NVIDIA pool (HAMI-15), shown next;
  * the role itself on the real cluster, with a node of another NVIDIA pool (time-slicing) present: refused before any
    write, naming that pool;
  * failurePolicy Ignore: with hami-scheduler failing (the recorder answering HTTP 500) pods are still admitted, and the
    API server records the failed-open webhook in the create's audit annotations.
Not shown (no HAMi binary): what HAMi's handler does with a pod (schedulerName set, privileged GPU pods denied).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_hami_webhook_real.py
"""
from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "lab" / "kube"
sys.path.insert(0, str(KUBE))
sys.path.insert(0, str(ROOT / "build" / "collections"))

import real  # noqa: E402
import webhook_recorder  # noqa: E402
from conftest import ANSIBLE_TESTS_CFG, PLAY_TIMEOUT, VENV_BIN, run_module, wait_until  # noqa: E402
from test_gpu_sharing_stack import T4  # noqa: E402

S = "%d" % os.getpid()
USER = "gpuops-test-hami-webhook-%s" % S
TEST_LABEL = "gpuops.io/hami-webhook-test"
POOL = "hw%s" % S
NS_HAMI, NS_OTHER, NS_IGNORED = "hami-users-%s" % S, "ts-users-%s" % S, "ignored-%s" % S
IGNORE = {"hami.io/webhook": "ignore"}   # HAMi's opt-out label (charts/hami/templates/scheduler/webhook.yaml, v2.10.0)


def render(kube, ca_b64, live_nodes=()):
    """The HAMi stack as the role renders it for a pool alone in the cluster (or beside ``live_nodes``)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    return stacks_render.render({
        "strategy": "hami", "pool": POOL, "nodes": ["hami-node-%s" % S], "facts": {"hami-node-%s" % S: T4},
        "settings": {"hami": {"webhook_tls_secret": "hami-tls-%s" % S, "webhook_ca_bundle": ca_b64,
                              "kube_version": kube.version if str(kube.version).count(".") == 2 else "v1.37.2"}},
        "registry": "registry.example.com/mirror", "live_nodes": list(live_nodes)})


def webhook_of(out):
    hooks = [m for m in out["manifests"] if m["kind"] == "MutatingWebhookConfiguration"]
    assert len(hooks) == 1, [m["kind"] for m in out["manifests"]]
    return hooks[0]


def registered(rendered, url):
    """The rendered configuration pointed at the recorder and confined to this file's namespaces (see the docstring);
    every other field as rendered."""
    cfg = copy.deepcopy(rendered)
    cfg["metadata"]["name"] = "%s-%s" % (cfg["metadata"]["name"], S)
    for hook in cfg["webhooks"]:
        hook["clientConfig"] = {"url": url + hook["clientConfig"]["service"]["path"],
                                "caBundle": hook["clientConfig"]["caBundle"]}
        hook["namespaceSelector"]["matchExpressions"].append({"key": TEST_LABEL, "operator": "In", "values": [S]})
    return cfg


@pytest.fixture(scope="module")
def hw(kube_real, tmp_path_factory, collections_path):
    from kubernetes import client
    tmp = tmp_path_factory.mktemp("hami-webhook")
    pki = tmp / "pki"
    pki.mkdir()
    for f in ("ca.crt", "ca.key"):
        shutil.copy(os.path.join(kube_real.state, "pki", f), str(pki / f))
    # the serving certificate hami-scheduler's Secret would hold: the Service's DNS names, and the recorder's address
    crt, key = real.issue(str(pki), "hami-webhook", "hami-scheduler", server_names=[
        "127.0.0.1", "hami-scheduler.kube-system.svc", "hami-scheduler.kube-system.svc.cluster.local"])
    ca_b64 = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
    state = tmp / "recorder"
    srv = webhook_recorder.start(str(state), crt, key)
    url = "https://127.0.0.1:%d" % srv.server_address[1]
    api = kube_real.api()
    core = client.CoreV1Api(api)
    for ns, labels in ((NS_HAMI, {}), (NS_OTHER, {}), (NS_IGNORED, IGNORE)):
        core.create_namespace({"metadata": {"name": ns, "labels": dict({TEST_LABEL: S}, **labels)}})
    for ns in (NS_HAMI, NS_OTHER, NS_IGNORED):
        wait_until("ServiceAccount default in %s" % ns, lambda: [
            s for s in core.list_namespaced_service_account(ns).items if s.metadata.name == "default"])
    rendered = webhook_of(render(kube_real, ca_b64))
    ctx = {"kube": kube_real, "core": core, "api": api, "state": str(state), "url": url, "ca_b64": ca_b64,
           "rendered": rendered, "registered": registered(rendered, url), "collections": collections_path,
           "kubeconfig": kube_real.user(USER), "tmp": tmp}
    try:
        yield ctx
    finally:
        adm = client.AdmissionregistrationV1Api(api)
        try:
            adm.delete_mutating_webhook_configuration(ctx["registered"]["metadata"]["name"])
        except client.ApiException:
            pass
        for ns in (NS_HAMI, NS_OTHER, NS_IGNORED):
            core.delete_namespace(ns)
        srv.shutdown()


def converge(hw, definitions, check=False):
    return run_module(hw["collections"], "gpuops.k8s_gpu.k8s_converge",
                      json.dumps({"definitions": definitions, "state": "present", "kubeconfig": hw["kubeconfig"]}),
                      check=check)


def gpu_pod(name, ns, labels=None, gpu=True):
    res = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/cuda:12", "resources": res}],
                     "nodeSelector": {"no-such-node": S}, "terminationGracePeriodSeconds": 0}}


def sent(hw):
    return sorted((c["namespace"], c["name"], c["operation"]) for c in webhook_recorder.calls(hw["state"]))


def test_1_rendered_configuration_is_accepted_as_is(hw):
    """Validation and defaulting of the API server take the rendered object unchanged (dry run: see the docstring)."""
    from kubernetes import client
    adm = client.AdmissionregistrationV1Api(hw["api"])
    want = hw["rendered"]
    got = hw["api"].sanitize_for_serialization(adm.create_mutating_webhook_configuration(want, dry_run="All"))
    hook, stored = want["webhooks"][0], got["webhooks"][0]
    for key, value in hook.items():
        assert stored[key] == value, (key, value, stored[key])
    # what the server added (defaults the collection does not send)
    assert stored["matchPolicy"] == "Equivalent" and stored["reinvocationPolicy"] == "Never", stored
    with pytest.raises(client.ApiException) as exc:
        adm.read_mutating_webhook_configuration(want["metadata"]["name"] + "-" + S)
    assert exc.value.status == 404


def test_2_registered_twice_by_k8s_converge_second_run_writes_nothing(hw):
    kube = hw["kube"]
    start = kube.mark()
    res = converge(hw, [hw["registered"]])
    mid = kube.mark()
    assert not res.get("failed") and res["changed"], res
    again = converge(hw, [hw["registered"]])
    end = kube.mark()
    assert not again.get("failed") and not again["changed"], again
    first = kube.writes(start, mid, user=USER)
    assert [(v, c) for v, _u, c in first] in ([("create", 201)], [("patch", 201)]), first
    assert kube.writes(mid, end, user=USER) == []
    check = converge(hw, [hw["registered"]], check=True)
    assert not check["changed"], check


def test_3_which_pods_the_api_server_sends(hw):
    """Every pod create of the namespaces the selectors leave in: GPU pods of the HAMi pool's users and of another
    NVIDIA pool's users alike, and CPU pods; not the pods the hami.io/webhook=ignore label (namespace or pod) takes
    out; not pod updates."""
    from kubernetes import client
    core = hw["core"]
    probe = 0

    def webhook_live():
        # the API server picks up a new webhook configuration asynchronously: create probe pods until one is sent
        nonlocal probe
        probe += 1
        core.create_namespaced_pod(NS_HAMI, gpu_pod("probe-%d" % probe, NS_HAMI, gpu=False))
        return [c for c in sent(hw) if c[1].startswith("probe-")]
    wait_until("the API server sends pod creates to the recorder", webhook_live, 30)
    before = set(sent(hw))
    pods = [("gpu-hami", NS_HAMI, None, True), ("cpu-hami", NS_HAMI, None, False),
            ("gpu-other-pool", NS_OTHER, None, True), ("gpu-opted-out", NS_HAMI, IGNORE, True),
            ("gpu-ignored-ns", NS_IGNORED, None, True)]
    for name, ns, labels, gpu in pods:
        core.create_namespaced_pod(ns, gpu_pod(name, ns, labels, gpu))
    core.patch_namespaced_pod("gpu-hami", NS_HAMI, {"metadata": {"labels": {"touched": "yes"}}})
    # the last create below is sent (same namespace as the patch, after it): every earlier request has been decided
    core.create_namespaced_pod(NS_OTHER, gpu_pod("last", NS_OTHER))
    wait_until("the last pod create reached the recorder", lambda: (NS_OTHER, "last", "CREATE") in sent(hw), 30)
    new = sorted(set(sent(hw)) - before)
    assert new == sorted([(NS_HAMI, "gpu-hami", "CREATE"), (NS_HAMI, "cpu-hami", "CREATE"),
                          (NS_OTHER, "gpu-other-pool", "CREATE"), (NS_OTHER, "last", "CREATE")]), new
    for name, ns, _labels, _gpu in pods:
        assert core.read_namespaced_pod(name, ns).metadata.name == name   # admitted (the recorder allows all)
    calls = webhook_recorder.calls(hw["state"])
    assert {c["apiVersion"] for c in calls} == {"admission.k8s.io/v1"}   # the first of admissionReviewVersions
    # the rendered path, with the webhook's timeoutSeconds as the API server passes it on
    assert {c["path"] for c in calls} == {"/webhook?timeout=%ds" % hw["rendered"]["webhooks"][0]["timeoutSeconds"]}
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("no-such-pod", NS_HAMI)


def test_4_role_refuses_the_webhook_beside_another_nvidia_pool(hw, tmp_path):
    """The collection's answer to what test 3 shows (HAMI-15): with a node of a time-slicing pool in the cluster the
    role refuses HAMi's webhook before any write, naming that pool."""
    kube, core = hw["kube"], hw["core"]
    other = "hw-ts-%s" % S
    core.create_node({"metadata": {"name": other, "labels": {"gpuops.io/sharing-pool": "ts%s" % S,
                                                             "gpuops.io/sharing-strategy": "time-slicing"}}})
    core.create_namespaced_secret("kube-system", {"metadata": {"name": "hami-tls-%s" % S}, "type": "kubernetes.io/tls",
                                                  "data": {"tls.crt": "", "tls.key": ""}})
    v = {"gpu_sharing_stack_strategy": "hami", "gpu_sharing_stack_pool": POOL,
         "gpu_sharing_stack_nodes": ["hami-node-%s" % S], "gpu_sharing_stack_facts": {"hami-node-%s" % S: T4},
         "gpu_sharing_stack_registry": "registry.example.com/mirror",
         "gpu_sharing_stack_hami": {"webhook_tls_secret": "hami-tls-%s" % S, "webhook_ca_bundle": hw["ca_b64"]}}
    pb = tmp_path / "play.yml"
    pb.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "gpuops.k8s_gpu.gpu_sharing_stack"}, "vars": v}]}]))
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=hw["kubeconfig"], ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG,
               ANSIBLE_COLLECTIONS_PATH=hw["collections"])
    try:
        start = kube.mark()
        proc = subprocess.run([str(Path(VENV_BIN) / "ansible-playbook"), "-i", "localhost,", str(pb), "-e",
                               "ansible_python_interpreter=%s" % (Path(VENV_BIN) / "python")],
                              env=env, capture_output=True, text=True, timeout=PLAY_TIMEOUT, cwd=str(ROOT))
        end = kube.mark()
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "ts%s (time-slicing)" % S in proc.stdout and "schedulerName" in proc.stdout, proc.stdout[-3000:]
        assert kube.writes(start, end, user=USER) == []
    finally:
        core.delete_node(other)
        core.delete_namespaced_secret("hami-tls-%s" % S, "kube-system")


def test_5_failure_policy_ignore_admits_pods_when_hami_scheduler_fails(hw):
    """failurePolicy Ignore (as HAMi's chart): hami-scheduler answering errors does not stop pod creation; the API
    server notes the failed-open webhook on the request (audit annotation)."""
    kube, core = hw["kube"], hw["core"]
    assert hw["rendered"]["webhooks"][0]["failurePolicy"] == "Ignore"
    with open(os.path.join(hw["state"], "mode"), "w") as f:
        f.write("error")
    try:
        start = kube.mark()
        core.create_namespaced_pod(NS_HAMI, gpu_pod("while-failing", NS_HAMI))
        end = kube.mark()
    finally:
        with open(os.path.join(hw["state"], "mode"), "w") as f:
            f.write("allow")
    assert (NS_HAMI, "while-failing", "CREATE") in sent(hw)          # it was sent, and answered 500
    assert core.read_namespaced_pod("while-failing", NS_HAMI).metadata.name == "while-failing"
    ev = [e for e in kube.events(start, end) if e["verb"] == "create" and e["objectRef"].get("name") == "while-failing"]
    assert len(ev) == 1 and ev[0]["responseStatus"]["code"] == 201, ev
    failed_open = [k for k in (ev[0].get("annotations") or {}) if k.startswith("failed-open.mutation.webhook")]
    assert failed_open, ev[0].get("annotations")
