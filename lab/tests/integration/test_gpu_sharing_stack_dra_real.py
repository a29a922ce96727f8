"""Role gpuops.k8s_gpu.gpu_sharing_stack with strategy dra against upstream's real API server (lab/kube/real.py): the
role's three steps as playbook cluster.yml runs them (stack, gpu_node_labels, ready), the Kubernetes version read from
the server, the pool's ResourceClaimTemplates and the validation workload (a claim, not nvidia.com/gpu) applied and
stored as sent, a re-run and a check-mode run make 0 writes, state absent removes them; a node without CDI is refused
before anything is written. Writes are counted from the API server's audit log, by this test's own user.

The DRA driver's Helm release is installed here in check mode only (kubernetes.core.helm with upstream's helm on
PATH: it reads the cluster, writes nothing): one release per cluster (its DeviceClasses are cluster objects), and
test_dra_real.py installs it for real through this role on the same shared cluster (install, re-run 0 writes, absent
removes what the install made) and its claims use the chart's DeviceClasses.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_sharing_stack_dra_real.py
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LAB_GPU_CLASS

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gpu_sharing_stack import T4, stack_steps  # noqa: E402
from test_gpu_sharing_stack_real import (  # noqa: E402
    failures, live_object, mark_task, rendered, run_play, task_results, wait_marks,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_kwok_nodes import bare_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "build" / "collections"))
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.converger import (  # noqa: E402
    appended_lists, is_subset,
)

SUFFIX = "%d" % os.getpid()
USER = "gpuops-test-stack-dra-%s" % SUFFIX
NODE = "gssd-%s" % SUFFIX
POOL = "d%s-dra" % SUFFIX
CLAIMS = "dra-role-claims-%s" % SUFFIX


def chart_dir():
    """The DRA driver's chart in the Go module cache (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0 through the proxy; a
    download that fails fails the test)."""
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local", PATH="/usr/local/go/bin:" + os.environ["PATH"])
    proc = subprocess.run(["go", "mod", "download", "-json", "sigs.k8s.io/dra-driver-nvidia-gpu@v0.5.0"], cwd="/",
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return os.path.join(json.loads(proc.stdout)["Dir"], "deployments", "helm", "dra-driver-nvidia-gpu")


@contextlib.contextmanager
def helm_on_path(go_set="helm"):
    """kubernetes.core.helm runs upstream's helm from PATH: lab/go/helm (helm.sh/helm/v3 v3.22.0) or ``go_set``
    (lab/go/helm-4: helm.sh/helm/v4 v4.3.1), first on PATH inside the block."""
    helm = subprocess.run(["bash", str(ROOT / "lab" / "go" / "build.sh"), go_set], capture_output=True, text=True,
                          timeout=3000)
    assert helm.returncode == 0, helm.stderr[-3000:]
    path = os.environ["PATH"]
    os.environ["PATH"] = helm.stdout.strip().splitlines()[-1] + ":" + path
    try:
        yield
    finally:
        os.environ["PATH"] = path


def role_vars(state="present", **dra):
    settings = {"chart_path": "/srv/charts/dra-driver-nvidia-gpu-0.5.0.tgz", "chart_version": "0.5.0",
                "assume_cdi_enabled": True, "feature_gates": {"TimeSlicingSettings": True},
                "claim_namespace": CLAIMS,
                "claim_templates": [{"name": "t4", "kind": "gpu", "product_name": "Tesla T4", "min_memory": "15Gi"},
                                    {"name": "t4-shared", "kind": "time-slicing", "shared": True}],
                # the lab's shared class mapping nvidia.com/gpu on this plane (conftest LAB_GPU_CLASS) maps a name of
                # the chart's: accepted, else the pool is refused (DRAX-15)
                "accept_extended_resource_classes": [LAB_GPU_CLASS],
                # the kubelet plugin's admission policy is a shared object, kept while another file's dra pool is on
                # this plane; test_dra_real.py tests it (DRA-14), this file removes exactly what it applied
                "resourceslice_policy": False}
    settings.update(dra)
    return {"gpu_sharing_stack_strategy": "dra", "gpu_sharing_stack_state": state, "gpu_sharing_stack_pool": POOL,
            "gpu_sharing_stack_nodes": [NODE], "gpu_sharing_stack_facts": {NODE: T4},
            "gpu_sharing_stack_registry": "registry.example.com/mirror",
            "gpu_sharing_stack_image_pull_secrets": ["regcred"], "gpu_sharing_stack_dra": settings,
            "gpu_sharing_stack_validation": True, "gpu_sharing_stack_validation_namespace": CLAIMS,
            "gpu_sharing_stack_helm_install": False}


def block(name, v, check=False):
    b = {"name": name, "block": stack_steps(v)}
    if check:
        b["check_mode"] = True
    return b


@pytest.fixture(scope="module")
def run(kube_real, tmp_path_factory):
    from kubernetes import client
    core = client.CoreV1Api(kube_real.api())
    # a T4 machine as a real lab node published it (recorded shape t4x1), before its stack
    core.create_node(bare_node(NODE, "t4x1", facts=T4))
    core.create_namespace({"metadata": {"name": CLAIMS}})
    cl = (kube_real, kube_real.user(USER))
    tmp = tmp_path_factory.mktemp("dra-role")
    names = ("dra-0", "dra-1", "dra-2", "dra-3")
    # first a pool whose node has no CDI: refused by the render, before anything is written
    refused = {"name": "no cdi", "ansible.builtin.include_role": {
        "name": "gpuops.k8s_gpu.gpu_sharing_stack", "apply": {"ignore_errors": True}},
        "vars": role_vars(assume_cdi_enabled=False)}
    tasks = [mark_task(cl, "dra-nocdi-0"), refused, mark_task(cl, "dra-nocdi-1"),
             mark_task(cl, names[0]), block("present", role_vars()), mark_task(cl, names[1]),
             block("again", role_vars()), mark_task(cl, names[2]),
             block("check", dict(role_vars(chart_path=chart_dir()), gpu_sharing_stack_helm_install=True), check=True),
             mark_task(cl, names[3])]
    with helm_on_path():
        rc, result = run_play(cl, tmp, tasks)
        (tmp / "play-result.json").write_text(json.dumps(result))
        out = {"rc": rc, "failures": failures(result), "result": result, "cl": cl, "tmp": tmp}
        if rc == 0:
            marks = wait_marks(kube_real, names + ("dra-nocdi-0", "dra-nocdi-1"))
            out["nocdi_writes"] = kube_real.writes(marks["dra-nocdi-0"], marks["dra-nocdi-1"], user=USER)
            out["writes"] = [kube_real.writes(marks[a], marks[b], user=USER) for a, b in zip(names, names[1:])]
            out["want"] = rendered(result)
            # stored as sent: the server adds defaults and appends to a Pod's tolerations and volumes (K8S-10,
            # K8S-11), and changes nothing sent (the converger's own comparison)
            out["stored"] = dict(("%s %s/%s" % k, is_subset(d, live_object(kube_real, d), appended_lists(d)))
                                 for k, d in out["want"].items())
            rc2, result2 = run_play(cl, tmp, [mark_task(cl, "dra-4"), block("absent", role_vars("absent")),
                                              mark_task(cl, "dra-5")])
            out["absent_rc"], out["absent_failures"] = rc2, failures(result2)
            marks = wait_marks(kube_real, ["dra-4", "dra-5"])
            out["writes"].append(kube_real.writes(marks["dra-4"], marks["dra-5"], user=USER))
            out["left"] = [k for k, d in out["want"].items() if live_object(kube_real, d) is not None]
        yield out
    core.delete_namespace(CLAIMS)
    core.delete_node(NODE)


def test_DRA_09_role_applies_the_pool_reads_the_version_and_reruns_write_nothing(run, kube_real):
    assert run["rc"] == 0, run["failures"]
    first, again, check, absent = run["writes"]
    print("\nreal API server (%s), strategy dra: writes first %d, re-run %d, check mode %d, absent %d"
          % (kube_real.version, len(first), len(again), len(check), len(absent)))
    assert [w for w in first if w[2] >= 300] == [], first
    kinds = sorted(set(w[1].split("?")[0].rsplit("/", 2)[-2] for w in first))
    assert {"resourceclaimtemplates", "resourceclaims", "pods"} <= set(kinds), first
    assert again == [] and check == [], (again, check)
    renders = [r for n, r in task_results(run["result"]) if "Render the stack" in n and "helm" in r]
    values = renders[0]["helm"]["values"]
    assert values["resourceApiVersion"] == "resource.k8s.io/v1"  # from the server's version (kube_version unset)
    assert values["gpuResourcesEnabledOverride"] is True
    assert [d for d in absent if d[0] == "delete"], absent


def test_DRA_01_helm_release_in_check_mode_would_install_and_writes_nothing(run):
    """Entry point ready hands the rendered values to kubernetes.core.helm. Failed before the fix: the task read
    helm.values, which Jinja resolves to the dict's values method ("Type 'method' is unsupported for variable
    storage"), for the GPU operator's release as well."""
    assert run["rc"] == 0, run["failures"]
    helm = [r for n, r in task_results(run["result"]) if n.endswith("Install the Helm release from the local chart "
                                                                      "(GPU operator, DRA driver)") and not r.get("skipped")]
    assert len(helm) == 1 and helm[0].get("changed") is True and not helm[0].get("failed"), helm
    assert run["writes"][2] == []


def test_DRA_06_claims_and_validation_workload_stored_as_sent_then_removed(run, kube_real):
    assert run["rc"] == 0, run["failures"]
    want = rendered(run["result"])
    kinds = sorted(k[0] for k in want)
    assert kinds == ["Pod", "ResourceClaim", "ResourceClaimTemplate", "ResourceClaimTemplate"], kinds
    pod = [d for k, d in want.items() if k[0] == "Pod"][0]
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    # stored as sent (the server adds defaults, changes nothing sent), and after state absent nothing is left
    assert [k for k, ok in run["stored"].items() if not ok] == []
    assert run["absent_rc"] == 0, run["absent_failures"]
    assert run["left"] == []


def test_DRA_07_role_refuses_a_node_without_cdi_and_writes_nothing(run):
    assert run["rc"] == 0, run["failures"]
    msgs = [r.get("msg", "") for n, r in task_results(run["result"]) if r.get("failed")]
    assert any("strategy dra needs CDI in the container runtime of every node of pool %s" % POOL in m
               and "set no nvidia_container_runtime_cdi (allowed: true" in m for m in msgs), msgs
    assert run["nocdi_writes"] == []
