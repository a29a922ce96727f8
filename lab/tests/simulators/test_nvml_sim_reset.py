"""The NVML simulator's GPU reset (issue #41 item 4) through the lab's nvidia-smi (lab/nvml_sim/nvidia-smi), driven by
the collection's modules as they run on a node: gpu_doctor finds the fault in ``remediation``, gpu_reset resets the
GPU, gpu_doctor finds it healthy; the refusals (reset not supported, GPU in use) as the real nvidia-smi answers them.
Conformance: docs/conformance/remediation.md REM-12 (each test is named after its row).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/simulators/test_nvml_sim_reset.py
"""
import json
import os
import subprocess

import pytest

from conftest import ROOT, VENV_BIN, lab_collections_path

SIM_DIR = os.path.join(ROOT, "lab", ".build", "nvml_sim")
SMI = os.path.join(ROOT, "lab", "nvml_sim", "nvidia-smi")
HGX = os.path.join(ROOT, "lab", "nvml_sim", "inventories", "hgx-a100-80gb.json")
CHECKS = ["gpu_lost", "xid", "recovery_action", "ecc", "memory_repair"]


@pytest.fixture(scope="module", autouse=True)
def built_simulator():
    subprocess.run(["bash", os.path.join(ROOT, "lab", "nvml_sim", "build.sh")], check=True, capture_output=True)


def module(tmp_path, name, **args):
    """A collection module run as Ansible runs it on a node (python MODULE ARGS_FILE) on the simulator."""
    argfile = tmp_path / ("%s-args.json" % name)
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=lab_collections_path(), LD_LIBRARY_PATH=SIM_DIR,
               NVML_SIM_INVENTORY=str(tmp_path / "inventory.json"), NVML_SIM_STATE=str(tmp_path / "state.json"))
    proc = subprocess.run([os.path.join(VENV_BIN, "python"), os.path.join(ROOT, "plugins", "modules", name + ".py"),
                           str(argfile)], env=env, capture_output=True, text=True, timeout=120)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("%s did not answer JSON (rc=%s): %s %s" % (name, proc.returncode, proc.stdout, proc.stderr))


def inventory(tmp_path, **gpu0):
    inv = json.load(open(HGX))
    inv["driver_version"] = "580.159.04"          # 570+: the recovery action field is answered
    inv["gpus"][0].update(gpu0)
    (tmp_path / "inventory.json").write_text(json.dumps(inv))
    (tmp_path / "dmesg.txt").write_text("")
    return inv["gpus"][0]["uuid"]


FAULT = {"ecc_errors": {"uncorrected_volatile": 3, "uncorrected_aggregate": 3},
         "remapped_rows": {"correctable": 0, "uncorrectable": 3, "pending": True, "failure": False},
         "recovery_action": 1}


def doctor(tmp_path, severity="critical"):
    return module(tmp_path, "gpu_doctor", checks=CHECKS, kernel_log=str(tmp_path / "dmesg.txt"),
                  remediation_severity=severity)


def test_REM_12_reset_clears_what_a_reset_repairs(tmp_path):
    u = inventory(tmp_path, **FAULT)
    before = doctor(tmp_path, "warning")["remediation"]
    assert list(before) == [u]
    assert sorted(f["id"] for f in before[u]["findings"]) == ["ecc_uncorrectable", "gpu_recovery_action",
                                                              "row_remap_pending"]
    assert before[u]["repair"] == dict(before[u]["repair"], action="reset", allowed=True)
    out = module(tmp_path, "gpu_reset", uuids=[u], nvidia_smi=SMI, delay=0)
    assert out.get("failed") is not True and out["changed"] is True, out
    assert out["results"][0]["result"] == "reset" and "was successfully reset" in out["results"][0]["message"]
    assert doctor(tmp_path)["remediation"] == {}
    # the aggregate ECC count stays (a warning of the GPU's history); the pending remapping and the recovery action
    # are gone
    after = doctor(tmp_path, "warning")
    assert [f["id"] for f in after["findings"]] == ["ecc_uncorrectable_history"]


def test_REM_12_check_mode_resets_nothing(tmp_path):
    u = inventory(tmp_path, **FAULT)
    argfile = tmp_path / "check.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"uuids": [u], "nvidia_smi": SMI, "_ansible_check_mode": True}}))
    env = dict(os.environ, PYTHONPATH=lab_collections_path(), LD_LIBRARY_PATH=SIM_DIR,
               NVML_SIM_INVENTORY=str(tmp_path / "inventory.json"), NVML_SIM_STATE=str(tmp_path / "state.json"))
    out = json.loads(subprocess.run([os.path.join(VENV_BIN, "python"), os.path.join(ROOT, "plugins", "modules",
                                     "gpu_reset.py"), str(argfile)], env=env, capture_output=True, text=True).stdout)
    assert out["results"][0]["result"] == "would_reset"
    assert list(doctor(tmp_path)["remediation"]) == [u]


def test_REM_12_reset_not_supported_is_not_retried(tmp_path):
    u = inventory(tmp_path, reset_supported=False, **FAULT)
    out = module(tmp_path, "gpu_reset", uuids=[u], nvidia_smi=SMI, tries=3, delay=0)
    assert out["failed"] is True and out["results"][0]["result"] == "not_supported" and out["results"][0]["tries"] == 1
    assert "Resetting GPU 00000000:07:00.0 is not supported." in out["msg"]
    assert list(doctor(tmp_path)["remediation"]) == [u]


def test_REM_12_in_use_is_tried_again_within_the_bound(tmp_path):
    u = inventory(tmp_path, reset_in_use=2, **FAULT)
    out = module(tmp_path, "gpu_reset", uuids=[u], nvidia_smi=SMI, tries=3, delay=0)
    assert out.get("failed") is not True and out["results"][0] == dict(out["results"][0], result="reset", tries=3)
    assert doctor(tmp_path)["remediation"] == {}
    u = inventory(tmp_path, reset_in_use=5, **FAULT)
    (tmp_path / "state.json").unlink()
    out = module(tmp_path, "gpu_reset", uuids=[u], nvidia_smi=SMI, tries=2, delay=0)
    assert out["failed"] is True and out["results"][0] == dict(out["results"][0], result="in_use", tries=2)
    assert list(doctor(tmp_path)["remediation"]) == [u]


def test_REM_17_xids_of_before_a_reset_are_not_delivered_after_it(tmp_path):
    """An Xid the NVML events delivered before the reset is not delivered again to a client that registers after it
    (NVML sends only events that happen after the registration): a device plugin restarted after the repair lists the
    GPU healthy, and the doctor's second run no longer names it for that Xid."""
    u = inventory(tmp_path, xid_events=[48])
    before = doctor(tmp_path)["remediation"]
    assert list(before) == [u] and [f["id"] for f in before[u]["findings"]] == ["xid_48"], before
    assert doctor(tmp_path)["remediation"] == before          # not reset yet: every new event set gets it again
    out = module(tmp_path, "gpu_reset", uuids=[u], nvidia_smi=SMI, delay=0)
    assert out.get("failed") is not True and out["changed"] is True, out
    assert doctor(tmp_path)["remediation"] == {}
