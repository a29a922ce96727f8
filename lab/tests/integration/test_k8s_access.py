"""The Kubernetes access layer against the lab's API emulator (a stand-in for an API server).

A play that gives the kubeconfig only through module_defaults for the action group gpuops.k8s_gpu.k8s reaches the
emulator with our modules and kubernetes.core's; without it, the same play cannot connect (so the kubeconfig came
from the group and nowhere else).  Nothing skips: a dead emulator or a failed play is a failure.
"""
import json
import os
import subprocess

import pytest
import yaml

from conftest import PLAY_TIMEOUT, ROOT, VENV_BIN, emulator_get, kube_emulator

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"site": "kept"}},
        "status": {"allocatable": {"nvidia.com/gpu": "2"}, "capacity": {"nvidia.com/gpu": "2"}}}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    with kube_emulator(tmp_path_factory.mktemp("seed"), "k8s-access", [NODE]) as info:
        yield info


def play(tmp_path, collections_path, defaults):
    tasks = [
        {"name": "label through our converger", "gpuops.k8s_gpu.k8s_converge": {"definitions": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"gpuops.io/probe": "x"}}}]}},
        {"name": "read through our report", "gpuops.k8s_gpu.gpu_share_report": {}, "register": "report"},
        {"name": "read through kubernetes.core", "kubernetes.core.k8s_info": {"kind": "Node", "api_version": "v1"},
         "register": "nodes"},
        {"name": "show", "ansible.builtin.debug": {"msg": "{{ report.nodes | length }} {{ nodes.resources | length }}"}},
    ]
    p = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}
    if defaults is not None:
        p["module_defaults"] = {"group/gpuops.k8s_gpu.k8s": defaults}
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([p]))
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("K8S_AUTH_") and k != "KUBECONFIG")
    home = tmp_path / "home"   # no ~/.kube/config here
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(VENV_BIN, "python"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "rtmp"))
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", str(path)],
                          env=env, capture_output=True, text=True, cwd=ROOT, timeout=PLAY_TIMEOUT)
    doc = json.loads(proc.stdout)
    return proc, [t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]]


def test_K8S_06_module_defaults_group_reaches_the_emulator(emu, tmp_path, collections_path):
    before = emulator_get(emu, "/_emulator/requests?since=999999999")["seq"]
    proc, results = play(tmp_path, collections_path, {"kubeconfig": emu["kubeconfig"]})
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    converge, report, info = results[0], results[1], results[2]
    assert converge["changed"] and converge["updated"] == 1, converge
    assert [n["name"] for n in report["nodes"]] == ["gpu-node-1"], report
    assert [n["metadata"]["name"] for n in info["resources"]] == ["gpu-node-1"], info
    node = emulator_get(emu, "/api/v1/nodes/gpu-node-1")
    assert node["metadata"]["labels"] == {"site": "kept", "gpuops.io/probe": "x"}
    reqs = emulator_get(emu, "/_emulator/requests?since=%d" % before)["items"]
    assert [r["resource"] for r in reqs if r["write"]] == ["nodes"], reqs
    # again: nothing to change, no write request
    seq = emulator_get(emu, "/_emulator/requests?since=999999999")["seq"]
    proc, results = play(tmp_path, collections_path, {"kubeconfig": emu["kubeconfig"]})
    assert proc.returncode == 0 and not results[0]["changed"], results[0]
    assert not [r for r in emulator_get(emu, "/_emulator/requests?since=%d" % seq)["items"] if r["write"]]


def test_K8S_06_without_module_defaults_the_play_cannot_connect(emu, tmp_path, collections_path):
    seq = emulator_get(emu, "/_emulator/requests?since=999999999")["seq"]
    proc, results = play(tmp_path, collections_path, None)
    assert proc.returncode != 0 and results[0].get("failed"), results
    assert "cannot configure the Kubernetes client" in results[0]["msg"], results[0]["msg"]
    assert emulator_get(emu, "/_emulator/requests?since=%d" % seq)["items"] == []
