"""playbooks/doctor.yml's dra check on the lab's real control plane (lab/kube/real.py): the controller reads the cluster
once for every node of a dra pool (the served group versions, the DRA driver's ResourceSlices, the dra nodes'
allocatable) and each node's doctor judges its own part.

Three hosts, all on this machine (connection local, the NVML simulator with a T4): two in a dra pool, kwok nodes of
their own, made from what a real lab node published (lab/tests/gpu_kwok_nodes.py) - one with its slice published by
lab/kube/dra_slices.py (the stand-in of NVIDIA's kubelet plugin, checked against the plugin in test_dra_real.py), one
with no slice and NVIDIA's exclusive device plugin running beside (its recorded nvidia.com/gpu) - and one host of no
dra pool. The requests are counted from the API server's audit log, by this test's own user: one list of slices and
one list of nodes for the whole play, not one per node.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_doctor_dra_real.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ANSIBLE_TESTS_CFG, KUBE, PLAY_TIMEOUT, ROOT, VENV_BIN

sys.path.insert(0, str(KUBE))
import dra_slices  # noqa: E402  (lab/kube)
from gpu_kwok_nodes import agents_node, bare_node, plain_node  # noqa: E402

SUFFIX = "%d" % os.getpid()
USER = "gpuops-test-doctor-dra-%s" % SUFFIX
GOOD, BARE, OTHER = ("docdra-%s-%s" % (n, SUFFIX) for n in ("good", "bare", "other"))
SIM = os.path.join(ROOT, "lab", ".build", "nvml_sim")


@pytest.fixture(scope="module")
def doctor(kube_real, tmp_path_factory, collections_path):
    from kubernetes import client
    subprocess.run(["bash", os.path.join(ROOT, "lab", "nvml_sim", "build.sh")], check=True, capture_output=True)
    # the doctor asks the containerd on PATH its version (CDI: none before 1.7, on by default from 2.0; this machine's
    # Debian 12 has 1.6.20): upstream's containerd v2.3.4 (lab/go/containerd) is first on PATH, as on a DRA node
    build = subprocess.run(["bash", os.path.join(ROOT, "lab", "go", "build.sh"), "containerd"], cwd=ROOT,
                           capture_output=True, text=True, timeout=3000)
    assert build.returncode == 0, "lab/go/build.sh containerd failed: %s" % build.stderr[-3000:]
    containerd_dir = build.stdout.strip().splitlines()[-1]
    api = kube_real.api()
    core = client.CoreV1Api(api)
    dra = {"gpuops.io/sharing-strategy": "dra"}
    # the recorded T4 node (lab/node/recordings): GOOD as the node layer leaves it (its slice below); BARE with
    # NVIDIA's exclusive device plugin (and GFD) running beside DRA, as a real node published them; OTHER no GPU
    core.create_node(bare_node(GOOD, "t4x1", labels=dra))
    core.create_node(agents_node(BARE, "t4x1", "exclusive", labels=dra))
    core.create_node(plain_node(OTHER))
    tmp = tmp_path_factory.mktemp("doctor-dra")
    try:
        dra_slices.publish(api, GOOD, "t4.json", str(tmp))
        # its reads are logged too (lab/kube/audit-policy.yaml): the requests are counted, not only the writes
        kc = kube_real.user(USER, groups=("system:masters", "gpuops:audit-reads"))
        host = {"ansible_connection": "local", "ansible_python_interpreter": str(Path(VENV_BIN) / "python")}
        inv = {"all": {"children": {"gpu_nodes": {"hosts": {
            GOOD: dict(host, gpuops_sharing_strategy="dra"), BARE: dict(host, gpuops_sharing_strategy="dra"),
            OTHER: dict(host)}}},
            "vars": {"gpuops_become": False, "gpuops_k8s_kubeconfig": kc}}}
        (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG,
                   ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1",
                   LD_LIBRARY_PATH=SIM, NVML_SIM_INVENTORY=os.path.join(ROOT, "lab", "nvml_sim", "inventories",
                                                                         "t4.json"),
                   NVML_SIM_STATE=str(tmp / "nvml-state.json"), PATH="%s:%s:%s" % (VENV_BIN, containerd_dir, os.environ["PATH"]))
        start = kube_real.mark()
        proc = subprocess.run([str(Path(VENV_BIN) / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                               os.path.join(ROOT, "playbooks", "doctor.yml"), "--tags", "doctor", "-f", "3"],
                              cwd=str(tmp), env=env, capture_output=True, text=True, timeout=PLAY_TIMEOUT)
        end = kube_real.mark()
        assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-3000:])
        result = json.loads(proc.stdout)
        found = {}
        for play in result["plays"]:
            for t in play["tasks"]:
                if t["task"]["name"] == "Diagnose the node":
                    for h, r in t["hosts"].items():
                        found[h] = r
        yield {"found": found, "events": kube_real.events(start, end, user=USER), "result": result,
               "containerd": containerd_dir}
    finally:
        for s in dra_slices.slices_of(api, GOOD):
            client.CustomObjectsApi(api).delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                                      s["metadata"]["name"])
        for n in (GOOD, BARE, OTHER):
            core.delete_node(n)


def _ids(res):
    return sorted(f["id"] for f in res["findings"] if f["id"].startswith("dra_"))


def test_DRAL_14_doctor_playbook_gives_each_dra_node_its_own_part(doctor):
    found = doctor["found"]
    assert sorted(found) == sorted([GOOD, BARE, OTHER])
    # the node whose slice covers its GPU: no dra finding (the API is served, its slice is there)
    assert _ids(found[GOOD]) == [], found[GOOD]["findings"]
    # the probe carries the containerd the doctor judged CDI by (2.3.4: on unless enable_cdi = false)
    assert found[GOOD]["probe"]["node"]["container_runtimes"]["containerd_version"] == "2.3.4"
    # no slice, and a device plugin's nvidia.com/gpu in its allocatable
    assert _ids(found[BARE]) == ["dra_device_plugin_beside", "dra_driver_not_publishing"], found[BARE]["findings"]
    ev = [f for f in found[BARE]["findings"] if f["id"] == "dra_device_plugin_beside"][0]["evidence"]
    assert "node allocatable nvidia.com/gpu: 1" in ev
    # a host of no dra pool gets no dra check (it has no slice: with the check it would say dra_driver_not_publishing)
    assert _ids(found[OTHER]) == []


def test_DRAL_14_controller_reads_stay_flat_with_the_fleet(doctor):
    """One list of the driver's slices and one list of the dra nodes for the play (two dra nodes here), no request per
    node, and nothing written."""
    reqs = [(e["verb"], (e.get("objectRef") or {}).get("resource")) for e in doctor["events"]]
    assert reqs.count(("list", "resourceslices")) == 1, reqs
    assert reqs.count(("list", "nodes")) == 1, reqs
    assert [r for r in reqs if r[0] in ("get", "watch") and r[1] in ("resourceslices", "nodes")] == [], reqs
    assert [r for r in reqs if r[0] in ("create", "update", "patch", "delete")] == [], reqs
