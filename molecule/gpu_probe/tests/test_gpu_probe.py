"""testinfra checks for molecule/gpu_probe (run by molecule/_shared/verify.yml)."""
import json

testinfra_hosts = ["ansible://gpu_nodes"]

# the hosts the checks below name (test_the_checks_name_the_scenarios_hosts)
CHECKED_HOSTS = ["gpu-probe-t4", "gpu-probe-hgx", "gpu-probe-nodrv"]

REPORT = "/var/lib/gpuops/gpu-info.json"


def _report(host):
    f = host.file(REPORT)
    assert f.is_file
    assert f.mode == 0o644
    return json.loads(f.content_string)


def _name(host):
    return host.backend.get_hostname()


def test_pynvml_installed_from_debian(host):
    assert host.package("python3-pynvml").is_installed


def test_report_matches_the_node(host):
    r = _report(host)
    name = _name(host)
    if name == "gpu-probe-t4":
        assert r["nvml"]["status"] == "ok"
        assert r["source"] == "nvml"
        assert r["gpu_count"] == 1
        g = r["gpus"][0]
        assert g["name"] == "Tesla T4"
        assert g["memory_total_mib"] == 15360
        assert g["compute_capability"] == "7.5"
        assert g["architecture"] == "turing"
        assert g["mig_capable"] is False
        assert r["sharing"]["mps"]["allowed"] is True
        assert r["sharing"]["mig"]["allowed"] is False
        assert r["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    elif name == "gpu-probe-hgx":
        assert r["nvml"]["status"] == "ok"
        assert r["gpu_count"] == 8
        assert {g["name"] for g in r["gpus"]} == {"NVIDIA A100-SXM4-80GB"}
        assert all(g["mig_capable"] for g in r["gpus"])
        assert r["sharing"]["mig"]["allowed"] is True
        assert "3g.40gb" in r["sharing"]["mig"]["profiles"]["0"]
        assert r["labels"]["nvidia.com/gpu.count"] == "8"
        assert r["labels"]["nvidia.com/mig.capable"] == "true"
    elif name == "gpu-probe-nodrv":
        # Debian's real libnvidia-ml1 without a kernel module
        assert r["nvml"]["status"] == "driver_not_loaded"
        assert r["source"] == "pci"
        assert r["labels"] == {}
    else:
        raise AssertionError("unexpected host %s" % name)


def test_real_library_is_debians_on_the_driverless_node(host):
    if _name(host) != "gpu-probe-nodrv":
        # the simulator's library comes first in the loader's search path on simulated nodes
        assert "/usr/local/lib/nvml-sim/libnvidia-ml.so.1" in host.check_output("ldconfig -p | grep libnvidia-ml.so.1")
        return
    assert host.package("libnvidia-ml1").is_installed
    assert "nvml-sim" not in host.check_output("ldconfig -p | grep libnvidia-ml.so.1 || true")


def test_the_checks_name_the_scenarios_hosts(host):
    """The hosts the checks of this file name are the scenario's platforms (molecule/_shared/hosts_guard.py)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "_shared"))
    from hosts_guard import assert_checks_name_the_scenarios_hosts
    assert_checks_name_the_scenarios_hosts(host, __file__, CHECKED_HOSTS)
