"""Role gpuops.k8s_gpu.gpu_sharing_stack with the NVIDIA strategies against the lab's Kubernetes API emulator:
the RuntimeClass the device plugin pods name (DP-19) and the wait for NVIDIA's MIG manager (MIGM-12).

Run: .venv/bin/pytest lab/tests/integration/test_gpu_stack_nvidia_lab.py
The emulator runs no pods: the test writes nvidia.com/mig.config.state on the Node itself, as mig-manager would.
"""
from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import emulator_get as get, kube_emulator  # noqa: E402
from test_gpu_sharing_stack import A100, T4, node, role_play, run_play, task_results  # noqa: E402

SEED = [node("mig-ok"), node("mig-bad"), node("mig-slow"), node("ts-1"), node("ts-2"),
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "site-rc"}, "handler": "nvidia"}]
MIG = {"gpu_sharing_stack_mig": {"strategy": "single", "devices": {"1g.10gb": 7}},
       "gpu_sharing_stack_mig_state_retries": 2, "gpu_sharing_stack_mig_state_delay": 0}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    with kube_emulator(tmp_path_factory.mktemp("seed"), "nvl", SEED) as info:
        yield info


def patch_labels(emu, name, labels):
    """Merge-patch a Node's labels, as mig-manager does."""
    req = urllib.request.Request(emu["url"] + "/api/v1/nodes/" + name, method="PATCH",
                                 data=json.dumps({"metadata": {"labels": labels}}).encode(),
                                 headers={"Content-Type": "application/merge-patch+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def set_state(emu, name, value):
    patch_labels(emu, name, {"nvidia.com/mig.config.state": value})


def publish(emu, name, allocatable):
    """What the device plugin makes the kubelet publish in the Node's status (here the emulator's /status)."""
    req = urllib.request.Request(emu["url"] + "/api/v1/nodes/%s/status" % name, method="PATCH",
                                 data=json.dumps({"status": {"capacity": allocatable,
                                                             "allocatable": allocatable}}).encode(),
                                 headers={"Content-Type": "application/merge-patch+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def play(*tasks):
    return [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": list(tasks)}]


def failures(result):
    return [(n, r.get("msg")) for n, r in task_results(result) if r.get("failed")]


def test_MIGM_12_role_reports_mig_done_only_after_mig_config_state_success(emu, tmp_path):
    # a success left from the previous geometry (the node's 8 whole GPUs): the MIG manager has not reacted to the new
    # nvidia.com/mig.config yet (it sets pending only once it has; MIGM-14). Not taken: the role's wait runs out
    set_state(emu, "mig-ok", "success")
    publish(emu, "mig-ok", {"cpu": "32", "nvidia.com/gpu": "8"})
    rc, result = run_play(emu, tmp_path, play(role_play("mig", "mig-ok", A100, MIG, pool="migok")))
    assert rc != 0
    msgs = [m for _, m in failures(result)]
    assert any("mig-ok: allocatable {'nvidia.com/gpu': '8'}, not {'nvidia.com/gpu': '56'}" in m for m in msgs), msgs
    # applied: the device plugin publishes the geometry's 8 x 7 MIG devices
    publish(emu, "mig-ok", {"cpu": "32", "nvidia.com/gpu": "56"})
    rc, result = run_play(emu, tmp_path, play(role_play("mig", "mig-ok", A100, MIG, pool="migok")))
    assert rc == 0, failures(result)
    labels = get(emu, "/api/v1/nodes/mig-ok")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert labels["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert labels["nvidia.com/mig.config"] == "gpuops-1g-10gb-7"

    # mig-manager reported failed: the role fails naming the node and the state
    set_state(emu, "mig-bad", "failed")
    rc, result = run_play(emu, tmp_path, play(role_play("mig", "mig-bad", A100, MIG, pool="migbad")))
    assert rc != 0
    msgs = [m for _, m in failures(result)]
    assert any("has not applied the geometry" in m and "'mig-bad': 'failed'" in m and "nvidia-mig-manager" in m
               for m in msgs), msgs

    # nothing reported within the bounded wait (retries x delay): the role fails, saying the label is not set yet
    rc, result = run_play(emu, tmp_path, play(role_play("mig", "mig-slow", A100, MIG, pool="migslow")))
    assert rc != 0
    msgs = [m for _, m in failures(result)]
    assert any("'mig-slow': ''" in m and "gpu_sharing_stack_mig_state_retries" in m for m in msgs), msgs

    # a paused plugin stays paused on a re-run
    patch_labels(emu, "mig-ok", {"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change"})
    rc, result = run_play(emu, tmp_path, play(role_play("mig", "mig-ok", A100, MIG, pool="migok")))
    assert rc == 0, failures(result)
    assert get(emu, "/api/v1/nodes/mig-ok")["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == \
        "paused-for-mig-change"


def test_DP_19_role_applies_the_runtime_class_once_and_removes_it_with_the_last_pool(emu, tmp_path):
    ts = {"gpu_sharing_stack_time_slicing": {"replicas": 4}}
    rc, result = run_play(emu, tmp_path, play(role_play("time-slicing", "ts-1", T4, ts, pool="ts1"),
                                              role_play("exclusive", "ts-2", T4, {}, pool="ex2")))
    assert rc == 0, failures(result)
    rc_obj = get(emu, "/apis/node.k8s.io/v1/runtimeclasses/nvidia")
    assert rc_obj["handler"] == "nvidia"
    ds = get(emu, "/apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin-ts1")
    assert ds["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    # a RuntimeClass the site made is used as it is and never touched
    rc, result = run_play(emu, tmp_path, play(role_play(
        "exclusive", "ts-2", T4, {"gpu_sharing_stack_nvidia": {"runtime_class_name": "site-rc"}}, pool="ex2")))
    assert rc == 0, failures(result)
    site = get(emu, "/apis/node.k8s.io/v1/runtimeclasses/site-rc")
    assert "labels" not in site["metadata"] or not site["metadata"]["labels"]
    # removing one NVIDIA pool keeps the RuntimeClass for the other; removing the last one takes it
    rc, result = run_play(emu, tmp_path, play(role_play("time-slicing", "ts-1", T4, ts, state="absent", pool="ts1")))
    assert rc == 0, failures(result)
    # ex2 and the MIG pools of the other test still use it
    assert get(emu, "/apis/node.k8s.io/v1/runtimeclasses/nvidia")["handler"] == "nvidia"
    removals = [role_play("exclusive", "ts-2", T4, {"gpu_sharing_stack_nvidia": {"runtime_class_name": "site-rc"}},
                          state="absent", pool="ex2")]
    for name, pool in (("mig-ok", "migok"), ("mig-bad", "migbad"), ("mig-slow", "migslow")):
        removals.append(role_play("mig", name, A100, MIG, state="absent", pool=pool))
    rc, result = run_play(emu, tmp_path, play(*removals))
    assert rc == 0, failures(result)
    assert get(emu, "/apis/node.k8s.io/v1/runtimeclasses/site-rc")["handler"] == "nvidia"
    with pytest.raises(urllib.error.HTTPError) as e:
        get(emu, "/apis/node.k8s.io/v1/runtimeclasses/nvidia")
    assert e.value.code == 404
