"""Lab tests of role gpuops.k8s_gpu.gpu_sharing_stack against the Kubernetes API emulator (lab/kube).

Run: /work/main/.venv/bin/pytest lab/tests/integration/test_gpu_sharing_stack.py
Nothing skips: a dead emulator or a failed play is a failure.  Write counts come from the emulator's request log
(`write` = a non-dry-run POST/PUT/PATCH/DELETE).
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "lab" / "kube"
VENV_BIN = ROOT / ".venv" / "bin"
sys.path.insert(0, str(KUBE))
sys.path.insert(0, str(ROOT / "build" / "collections"))

import validate  # noqa: E402
from conftest import ANSIBLE_TESTS_CFG, PLAY_TIMEOUT, ansible_cli, kube_emulator, play_json  # noqa: E402

# gpu-manager deploys only with accept_unmaintained and a gpu-admission image (refused without: see
# test_bad_inputs_fail_clearly_and_change_nothing)
STRATEGIES = ["exclusive", "time-slicing", "mps", "mig", "gpushare", "volcano", "hami", "gpu-manager", "gpu-operator"]
# gpushare refuses upstream's known-bad images unless images are named: these stand for images built from the fixes
GPUSHARE_IMAGES = {"extender_image": "registry.example.com/acs/k8s-gpushare-schd-extender:86f6025",
                   "device_plugin_image": "registry.example.com/acs/k8s-gpushare-plugin:45fb8b8"}
MANAGED = "app.kubernetes.io/managed-by=gpuops.k8s_gpu"


def node(name, labels=None, alloc=None):
    alloc = dict(alloc or {})
    alloc.setdefault("cpu", "32")
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **(labels or {}))},
            "status": {"capacity": dict(alloc), "allocatable": dict(alloc)}}


VOLCANO_CONF = {"actions": "enqueue, allocate, backfill",
                "tiers": [{"plugins": [{"name": "priority"}, {"name": "gang"}]},
                          {"plugins": [{"name": "drf"}, {"name": "predicates"},
                                       {"name": "deviceshare", "arguments": {"deviceshare.GPUNumberEnable": True}},
                                       {"name": "tdm",
                                                                                  "arguments": {"tdm.revocable-zone.rz1": "10:00-21:00"}}]}]}
# gpu-4 (the MIG pool) says what NVIDIA's MIG manager and the device plugin would show once the geometry is applied
# (state success, the geometry's 8 x 7 MIG devices in allocatable): the emulator runs no pods, and the role waits for
# both before it reports the stack done (MIGM-12, MIGM-14; test_gpu_stack_nvidia_lab shows a stale success refused).
SEED = [node("cp-1", {"node-role.kubernetes.io/control-plane": ""})] + \
    [node("gpu-%d" % i, {"nvidia.com/mig.config.state": "success"} if i == 4 else None,
          alloc={"nvidia.com/gpu": "56"} if i == 4 else None) for i in range(1, 10)] + \
    [node("busy-1", alloc={"nvidia.com/gpu": "8"}),
     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-system"}},
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
      "data": {"volcano-scheduler.conf": yaml.safe_dump(VOLCANO_CONF), "other-key": "keep-me"}},
     # Volcano's own scheduler (installed by the site): restarted when the vGPU device config changes
     {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "volcano-scheduler", "namespace": "volcano-system"},
      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "volcano-scheduler"}},
               "template": {"metadata": {"labels": {"app": "volcano-scheduler"}},
                            "spec": {"containers": [{"name": "volcano-scheduler",
                                                     "image": "docker.io/volcanosh/vc-scheduler:v1.15.1"}]}}}}]

T4 = {"gpus": [{"index": 0, "name": "Tesla T4", "memory_total_mib": 15360, "compute_capability": "7.5"}],
      "sharing": {"mps": {"allowed": True, "max_clients": 48},
                  "mig": {"allowed": False, "gpus": [], "reason": "GPU(s) 0 are not MIG capable"}}}
A100 = {"gpus": [{"index": i, "name": "A100-SXM4-80GB", "memory_total_mib": 81920} for i in range(8)],
        "sharing": {"mps": {"allowed": True, "max_clients": 48},
                    "mig": {"allowed": True, "gpus": list(range(8)),
                            "profiles": {str(i): ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"] for i in range(8)}}}}
P100 = {"gpus": [{"index": 0, "name": "Tesla P100", "compute_capability": "6.0"}],
        "sharing": {"mps": {"allowed": False, "max_clients": 0,
                            "reason": "GPU 0 (Tesla P100) has compute capability 6.0; MPS needs >= 7.0"},
                    "mig": {"allowed": False, "reason": "GPU(s) 0 are not MIG capable"}}}

# strategy -> (node, facts, extra role vars)
CASES = {
    "exclusive": ("gpu-1", T4, {}),
    "time-slicing": ("gpu-2", T4, {"gpu_sharing_stack_time_slicing": {"replicas": 4, "rename_by_default": False}}),
    "mps": ("gpu-3", T4, {"gpu_sharing_stack_mps": {"replicas": 8}}),
    "mig": ("gpu-4", A100, {"gpu_sharing_stack_mig": {"strategy": "single", "devices": {"1g.10gb": 7}}}),
    "gpushare": ("gpu-5", A100, {"gpu_sharing_stack_validation": True, "gpu_sharing_stack_gpushare": GPUSHARE_IMAGES}),
    "volcano": ("gpu-6", T4, {"gpu_sharing_stack_volcano": {"version": "1.15"}}),
    "hami": ("gpu-7", T4, {"gpu_sharing_stack_hami": {"device_split_count": 4, "device_memory_scaling": 1.5}}),
    "gpu-manager": ("gpu-8", T4, {"gpu_sharing_stack_gpu_manager": {
        "accept_unmaintained": True, "admission_image": "registry.example.com/tkestack/gpu-admission:47d56ae"}}),
    "gpu-operator": ("gpu-9", T4, {"gpu_sharing_stack_gpu_operator": {"chart_path": "/srv/charts/gpu-operator-v26.7.0.tgz",
                                                                      "sharing": "time-slicing"},
                                   "gpu_sharing_stack_helm_install": False}),
}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    with kube_emulator(tmp_path_factory.mktemp("seed"), "gss", SEED) as info:
        yield info


def http_get(emu, path):
    with urllib.request.urlopen(emu["url"] + path, timeout=10) as r:
        return json.loads(r.read())


def log_entries(emu):
    return [json.loads(line) for line in (emu["state"] / "requests.jsonl").read_text().splitlines() if line.strip()]


def writes_between(entries, lo, hi):
    return [e for e in entries if lo < e["seq"] <= hi and e["write"]]


def run_play(emu, workdir, play, *extra, inventory="localhost,"):
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=emu["kubeconfig"], ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"),
               ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG, PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    pb = workdir / "play.yml"
    pb.write_text(yaml.safe_dump(play, sort_keys=False))
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", inventory, str(pb),
           "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}", *extra]
    p = ansible_cli(cmd, cwd=workdir, env=env, timeout=PLAY_TIMEOUT)
    result = play_json(p)
    return p.returncode, result


def task_results(result):
    for play in result["plays"]:
        for t in play["tasks"]:
            for host, r in t["hosts"].items():
                yield t["task"]["name"], r


def stack_steps(v):
    """A stack as playbook cluster.yml runs it: the role (objects; it publishes the labels its nodes need), role
    gpu_node_labels (the one writer of Node labels) with the stack's labels only (no inventory group), then the role's
    entry point ready (validation workloads, Helm release, the wait for the MIG manager) - present only."""
    pool = v.get("gpu_sharing_stack_pool", "gpu")
    state = v.get("gpu_sharing_stack_state", "present")
    steps = [{"name": f"stack {pool}", "ansible.builtin.include_role": {"name": "gpuops.k8s_gpu.gpu_sharing_stack"},
              "vars": v},
             {"name": f"labels {pool}", "ansible.builtin.include_role": {"name": "gpuops.k8s_gpu.gpu_node_labels"},
              "vars": {"gpu_node_labels_group": "", "gpu_node_labels_state": state,
                       "gpu_node_labels_stacks": "{{ {'%s': gpu_sharing_stack_rendered['%s']} }}" % (pool, pool)}}]
    if state == "present":
        steps.append({"name": f"ready {pool}", "ansible.builtin.include_role": {
            "name": "gpuops.k8s_gpu.gpu_sharing_stack", "tasks_from": "ready"}, "vars": v})
    return steps


def role_play(strategy, node_name, facts, extra, state="present", pool=None):
    v = {"gpu_sharing_stack_strategy": strategy, "gpu_sharing_stack_state": state,
         "gpu_sharing_stack_pool": pool or ("pool-" + strategy), "gpu_sharing_stack_nodes": [node_name],
         "gpu_sharing_stack_facts": {node_name: facts},
         "gpu_sharing_stack_registry": "registry.example.com/mirror",
         "gpu_sharing_stack_image_pull_secrets": ["regcred"]}
    v.update(extra)
    return {"name": f"{v['gpu_sharing_stack_pool']} ({strategy}, {state})", "block": stack_steps(v)}


def seq_task(mark):
    """The emulator's request sequence number at this point of the play, kept as marks[mark]. A lookup on the
    controller, not a module run: the same reading without a module process (CPU of the lab step)."""
    return [{"name": f"record {mark}", "ansible.builtin.set_fact": {
        "marks": "{{ marks | default({}) | combine({'%s': (lookup('ansible.builtin.url', emu_url ~ "
                 "'/_emulator/requests?since=999999999', split_lines=False) | from_json).seq}) }}" % mark},
        "check_mode": False}]


# --------------------------------------------------------------------------------------------------------------
def test_schema_matrix_every_strategy():
    """Every rendered manifest of every strategy validates strictly against Kubernetes 1.24-1.37."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render
    total = 0
    not_validated = []
    for strategy in STRATEGIES:
        node_name, facts, extra = CASES[strategy]
        settings = dict((k.replace("gpu_sharing_stack_", ""), v) for k, v in extra.items() if isinstance(v, dict))
        variants = [settings]
        if strategy == "hami":
            # the role passes the API server's version; here the two ends of the window
            variants = [dict(settings, hami=dict(settings["hami"], kube_version="v1.37.1")),
                        dict(settings, hami={"webhook_tls_secret": "hami-tls", "webhook_ca_bundle": "Q0E=",
                                             "kube_version": "v1.24.17"})]
        if strategy == "volcano":
            variants += [{"volcano": {"version": "1.8", "mode": "gpu-share", "accept_known_bad_images": True}}, {"volcano": {"version": "1.11", "mode": "vgpu"}},
                         {"volcano": {"version": "1.15", "mode": "gpu-share", "accept_known_bad_images": True}}]
        if strategy == "mig":
            variants.append({"mig": {"strategy": "mixed", "devices": {"1g.10gb": 2, "2g.20gb": 1}, "manager": False}})
        if strategy == "time-slicing":
            variants.append({"nvidia": {"extra_configs": {"big": {"version": "v1", "flags": {"migStrategy": "none"}}},
                                        "node_configs": {node_name: "big"}}})
        for s in variants:
            out = render.render({"strategy": strategy, "pool": "p", "nodes": [node_name], "facts": {node_name: facts},
                                 "settings": s, "registry": "registry.example.com/mirror",
                                 "image_pull_secrets": ["regcred"], "validation": {"enabled": True}})
            docs = out["manifests"] + out["validation_manifests"] + out["node_manifests"]
            rep = validate.validate_documents(docs, source=strategy)
            assert rep["ok"], (strategy, rep["failures"][:5])
            total += len(docs)
            not_validated += [(strategy, r["kind"]) for r in rep["not_validated"]]
            for img in out["images"]:
                assert img.startswith("registry.example.com/mirror/"), img
            for d in out["manifests"]:
                tmpl = ((d.get("spec") or {}).get("template") or {}).get("spec")
                if tmpl:
                    assert tmpl.get("imagePullSecrets") == [{"name": "regcred"}], (strategy, d["metadata"]["name"])
    assert total > 60
    # no CRD kinds are rendered by any strategy: everything was schema-validated
    assert not_validated == []


# The converge matrix (first apply writes, a re-run writes nothing, check mode writes nothing, absent removes what
# was made, and what each stack leaves on the server) runs against upstream's real API server in
# test_gpu_sharing_stack_real.py; the emulator keeps the cases below.

BAD = [
    ("replicas 1", {"strategy": "time-slicing", "node": "gpu-1", "facts": T4,
                    "extra": {"gpu_sharing_stack_time_slicing": {"replicas": 1}}},
     "gpu_sharing_stack_time_slicing.replicas must be >= 2"),
    ("MPS on CC 6.0", {"strategy": "mps", "node": "gpu-1", "facts": P100, "extra": {}},
     "compute capability 6.0; MPS needs >= 7.0"),
    ("unknown strategy", {"strategy": "vgpu-magic", "node": "gpu-1", "facts": T4, "extra": {}},
     "gpu_sharing_stack_strategy"),
    ("unknown setting", {"strategy": "gpushare", "node": "gpu-1", "facts": T4,
                         "extra": {"gpu_sharing_stack_gpushare": {"memory_units": "GiB"}}},
     "memory_units"),
    ("gpushare next to whole-GPU accounting", {"strategy": "gpushare", "node": "busy-1", "facts": T4, "extra": {}},
     "显存资源及卡资源联动"),
    ("MIG profile missing", {"strategy": "mig", "node": "gpu-1", "facts": A100,
                             "extra": {"gpu_sharing_stack_mig": {"devices": {"1g.5gb": 7}}}},
     "offers only"),
    ("MIG on a T4", {"strategy": "mig", "node": "gpu-1", "facts": T4,
                     "extra": {"gpu_sharing_stack_mig": {"devices": {"1g.10gb": 7}}}},
     "not MIG capable"),
    ("gpu-manager", {"strategy": "gpu-manager", "node": "gpu-8", "facts": T4, "extra": {}},
     "gpu_sharing_stack_gpu_manager.accept_unmaintained: true"),
    ("gpu-manager without a gpu-admission image", {"strategy": "gpu-manager", "node": "gpu-8", "facts": T4,
                                                   "extra": {"gpu_sharing_stack_gpu_manager": {"accept_unmaintained": True}}},
     "gpu_sharing_stack_gpu_manager.admission_image is required"),
    ("gpushare with upstream's known-bad images", {"strategy": "gpushare", "node": "gpu-8", "facts": T4, "extra": {}},
     "4e418f19fa9c9d1f792705d98e672e532372b6cc"),
]


def test_bad_inputs_fail_clearly_and_change_nothing(emu, tmp_path):
    tasks = seq_task("b0")
    for title, case, dummy in BAD:
        tasks.append({"name": title, "block": [role_play(case["strategy"], case["node"], case["facts"], case["extra"],
                                                         pool="bad")],
                      "rescue": [{"name": f"failed: {title}", "ansible.builtin.debug": {
                          "msg": "{{ ansible_failed_result.msg | default('') }}"}}]})
    tasks += seq_task("b1")
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "vars": {"emu_url": emu["url"]}, "tasks": tasks}]
    rc, result = run_play(emu, tmp_path, play)
    msgs = {}
    marks = {}
    for name, r in task_results(result):
        if name.startswith("failed: "):
            msgs[name[len("failed: "):]] = r.get("msg", "")
        if name.startswith("record "):
            marks.update(r["ansible_facts"]["marks"])
    for title, case, expected in BAD:
        assert title in msgs, f"{title} did not fail"
        assert expected in msgs[title], (title, msgs[title])
    assert writes_between(log_entries(emu), marks["b0"], marks["b1"]) == []


def test_two_strategies_on_one_pool_refused(emu, tmp_path):
    """The inventory sets another strategy for a pool node, then a second pool claims a node of the first."""
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}},
                                           "children": {"poolx": {"hosts": {"gpu-1": {"gpu_sharing_stack_strategy": "gpushare"},
                                                                            "gpu-2": {}}}}}}))
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "vars": {"emu_url": emu["url"]},
             "tasks": seq_task("t0") + [
                 {"name": "two", "block": [{"ansible.builtin.include_role": {"name": "gpuops.k8s_gpu.gpu_sharing_stack"},
                                            "vars": {"gpu_sharing_stack_strategy": "time-slicing",
                                                     "gpu_sharing_stack_pool": "poolx",
                                                     "gpu_sharing_stack_facts": {"gpu-1": T4, "gpu-2": T4}}}],
                  "rescue": [{"name": "failed: two", "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}}]},
             ] + seq_task("t1") + [
                 {"name": "pool a", "block": stack_steps(
                     {"gpu_sharing_stack_strategy": "exclusive", "gpu_sharing_stack_pool": "pool-a",
                      "gpu_sharing_stack_nodes": ["gpu-2"], "gpu_sharing_stack_facts": {"gpu-2": T4}})},
                 ] + seq_task("t2") + [
                 {"name": "overlap", "block": [{"ansible.builtin.include_role": {"name": "gpuops.k8s_gpu.gpu_sharing_stack"},
                                                "vars": {"gpu_sharing_stack_strategy": "hami", "gpu_sharing_stack_pool": "pool-b",
                                                         "gpu_sharing_stack_nodes": ["gpu-2"]}}],
                  "rescue": [{"name": "failed: overlap", "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}}]},
                 ] + seq_task("t3") + [
                 {"name": "cleanup", "block": stack_steps(
                     {"gpu_sharing_stack_strategy": "exclusive", "gpu_sharing_stack_pool": "pool-a",
                      "gpu_sharing_stack_state": "absent", "gpu_sharing_stack_nodes": ["gpu-2"]})}]}]
    rc, result = run_play(emu, tmp_path, play, inventory=str(inv))
    assert rc == 0, [(n, r.get("msg")) for n, r in task_results(result) if r.get("failed")]
    msgs, marks = {}, {}
    for name, r in task_results(result):
        if name.startswith("failed: "):
            msgs[name[8:]] = r.get("msg", "")
        if name.startswith("record "):
            marks.update(r["ansible_facts"]["marks"])
    assert "two strategies on one pool" in msgs["two"] and "gpu-1" in msgs["two"]
    assert "already belongs to pool pool-a" in msgs["overlap"]
    entries = log_entries(emu)
    assert writes_between(entries, marks["t0"], marks["t1"]) == []
    assert writes_between(entries, marks["t2"], marks["t3"]) == []
