"""Tests of the lab's NVML simulator (lab/nvml_sim) through the real, unmodified pynvml bindings.

pynvml caches the loaded library in a module global and LD_LIBRARY_PATH is read at process start,
so every scenario runs in a fresh Python subprocess against lab/.build/nvml_sim/libnvidia-ml.so.1.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import lab_collections_path

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / "lab" / "nvml_sim"
BUILD = ROOT / "lab" / ".build" / "nvml_sim"
LIB = BUILD / "libnvidia-ml.so.1"
INVENTORIES = SIM / "inventories"
PY = sys.executable

PRELUDE = textwrap.dedent("""
    import json, sys, ctypes
    import pynvml as n
    def exc(f, *a, **k):
        try:
            r = f(*a, **k)
            return ["OK", r if isinstance(r, (int, str, list, tuple, type(None))) else str(r)]
        except n.NVMLError as e:
            return [type(e).__name__]
    def s(v):
        return v.decode() if isinstance(v, bytes) else v
    def out(v):
        print("\\nRESULT=" + json.dumps(v))
""")


@pytest.fixture(scope="session", autouse=True)
def built_lib():
    subprocess.run([str(SIM / "build.sh")], check=True, cwd=ROOT)
    assert LIB.is_file(), "build.sh did not produce %s" % LIB


def sim_env(inventory, state, errors=None, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_SIM_")}
    env["LD_LIBRARY_PATH"] = str(BUILD)
    env["NVML_SIM_INVENTORY"] = str(inventory)
    env["NVML_SIM_STATE"] = str(state)
    if errors:
        env["NVML_SIM_ERRORS"] = errors
    env.update(extra)
    return env


def run(code, inventory, state, errors=None, expect_rc=0, **extra):
    proc = subprocess.run([PY, "-c", PRELUDE + textwrap.dedent(code)], env=sim_env(inventory, state, errors, **extra),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == expect_rc, "rc=%d\nstdout:%s\nstderr:%s" % (proc.returncode, proc.stdout, proc.stderr)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT="):
            return json.loads(line[len("RESULT="):])
    raise AssertionError("no RESULT line:\n" + proc.stdout + proc.stderr)


def ctl(inventory, state, *args):
    return subprocess.run([PY, str(SIM / "nvml-sim-ctl"), *args], env=sim_env(inventory, state),
                          capture_output=True, text=True, timeout=60, check=True).stdout


def inv(name):
    return INVENTORIES / (name + ".json")


def write_inv(tmp_path, base, mutate=None, name="inv.json"):
    data = json.loads(inv(base).read_text())
    if mutate:
        mutate(data)
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state" / "state.json"


def a100_mig_on(tmp_path, ngpus=1, **gpu_overrides):
    def m(d):
        d["gpus"] = d["gpus"][:ngpus]
        for g in d["gpus"]:
            g["mig_mode"] = True
            g.update(gpu_overrides)
    return write_inv(tmp_path, "hgx-a100-80gb", m)


ARCH = {"pascal": 4, "volta": 5, "turing": 6, "ampere": 7, "ada": 8, "hopper": 9, "blackwell": 10}
BRAND = {"tesla": 2, "nvidia": 14}


# ------------------------------------------------------------------ basics
def test_library_is_the_simulator_and_exports_only_nvml(state):
    r = run("""
        n.nvmlInit()
        maps = open('/proc/self/maps').read()
        out([l.split()[-1] for l in maps.splitlines() if 'libnvidia-ml' in l][:1])
    """, inv("t4"), state)
    assert r == [str(LIB)]
    syms = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=True).stdout
    names = {l.split()[-1] for l in syms.splitlines() if l.strip()}
    assert names and all(x.startswith("nvml") for x in names), sorted(x for x in names if not x.startswith("nvml"))
    required = """nvmlInit nvmlInit_v2 nvmlInitWithFlags nvmlShutdown nvmlErrorString nvmlSystemGetDriverVersion
        nvmlSystemGetNVMLVersion nvmlSystemGetCudaDriverVersion nvmlSystemGetCudaDriverVersion_v2 nvmlDeviceGetCount
        nvmlDeviceGetCount_v2 nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByUUID
        nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetName nvmlDeviceGetUUID
        nvmlDeviceGetSerial nvmlDeviceGetBrand nvmlDeviceGetMinorNumber nvmlDeviceGetIndex nvmlDeviceGetPciInfo
        nvmlDeviceGetPciInfo_v2 nvmlDeviceGetPciInfo_v3 nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2
        nvmlDeviceGetBAR1MemoryInfo nvmlDeviceGetCudaComputeCapability nvmlDeviceGetArchitecture
        nvmlDeviceGetPersistenceMode nvmlDeviceSetPersistenceMode nvmlDeviceGetComputeMode nvmlDeviceSetComputeMode
        nvmlDeviceGetMigMode nvmlDeviceSetMigMode nvmlDeviceGetGpuInstanceProfileInfo nvmlDeviceGetGpuInstanceProfileInfoV
        nvmlDeviceGetGpuInstancePossiblePlacements_v2 nvmlDeviceGetGpuInstanceRemainingCapacity nvmlDeviceCreateGpuInstance
        nvmlDeviceCreateGpuInstanceWithPlacement nvmlDeviceGetGpuInstances nvmlDeviceGetGpuInstanceById
        nvmlGpuInstanceGetInfo nvmlGpuInstanceDestroy nvmlGpuInstanceGetComputeInstanceProfileInfo
        nvmlGpuInstanceGetComputeInstanceProfileInfoV nvmlGpuInstanceGetComputeInstanceRemainingCapacity
        nvmlGpuInstanceCreateComputeInstance nvmlGpuInstanceGetComputeInstances nvmlGpuInstanceGetComputeInstanceById
        nvmlComputeInstanceGetInfo_v2 nvmlComputeInstanceDestroy nvmlDeviceGetMaxMigDeviceCount
        nvmlDeviceGetMigDeviceHandleByIndex nvmlDeviceIsMigDeviceHandle nvmlDeviceGetGpuInstanceId
        nvmlDeviceGetComputeInstanceId nvmlDeviceGetDeviceHandleFromMigDeviceHandle nvmlDeviceGetTemperature
        nvmlDeviceGetPowerUsage nvmlDeviceGetUtilizationRates nvmlDeviceGetClockInfo nvmlDeviceGetEccMode
        nvmlDeviceGetDisplayMode nvmlDeviceGetVirtualizationMode nvmlDeviceGetNumGpuCores""".split()
    assert not [x for x in required if x not in names]


def test_build_is_idempotent():
    before = LIB.stat().st_mtime_ns
    proc = subprocess.run([str(SIM / "build.sh")], capture_output=True, text=True, check=True)
    assert LIB.stat().st_mtime_ns == before and "compiling" not in proc.stderr


@pytest.mark.parametrize("name", sorted(p.stem for p in INVENTORIES.glob("*.json")))
def test_shipped_inventory_values(name, state):
    data = json.loads(inv(name).read_text())
    r = run("""
        n.nvmlInit()
        res = {"drv": s(n.nvmlSystemGetDriverVersion()), "cuda": n.nvmlSystemGetCudaDriverVersion(),
               "nvmlv": s(n.nvmlSystemGetNVMLVersion()), "gpus": []}
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            pci = n.nvmlDeviceGetPciInfo(h)
            res["gpus"].append({"name": s(n.nvmlDeviceGetName(h)), "uuid": s(n.nvmlDeviceGetUUID(h)),
                "serial": s(n.nvmlDeviceGetSerial(h)), "busId": s(pci.busId), "dev": pci.pciDeviceId,
                "sub": pci.pciSubSystemId, "mem": n.nvmlDeviceGetMemoryInfo(h).total,
                "bar1": n.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total, "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
                "arch": n.nvmlDeviceGetArchitecture(h), "brand": n.nvmlDeviceGetBrand(h),
                "minor": n.nvmlDeviceGetMinorNumber(h), "index": n.nvmlDeviceGetIndex(h),
                "pm": n.nvmlDeviceGetPersistenceMode(h), "cm": n.nvmlDeviceGetComputeMode(h),
                "mig": exc(n.nvmlDeviceGetMigMode, h),
                "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(h))),
                "by_bus": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(pci.busId))})
        n.nvmlShutdown()
        out(res)
    """, inv(name), state)
    assert r["drv"] == data["driver_version"] and r["cuda"] == data["cuda_driver_version"]
    assert r["nvmlv"] == data["nvml_version"]
    assert len(r["gpus"]) == len(data["gpus"]) >= 1
    for i, (got, want) in enumerate(zip(r["gpus"], data["gpus"])):
        assert got["name"] == want["name"] and got["uuid"] == want["uuid"] and got["serial"] == want["serial"]
        assert got["busId"] == want["pci_bus_id"] and got["dev"] == int(want["pci_device_id"], 16)
        assert got["sub"] == int(want["pci_subsystem_id"], 16)
        assert got["mem"] == want["memory_total_mib"] * 2**20 and got["bar1"] == want["bar1_total_mib"] * 2**20
        assert got["cc"] == [int(x) for x in want["compute_capability"].split(".")]
        assert got["arch"] == ARCH[want["architecture"]] and got["brand"] == BRAND[want["brand"]]
        assert got["minor"] == want["minor_number"] and got["index"] == i == got["by_uuid"] == got["by_bus"]
        assert got["pm"] == int(want["persistence_mode"]) and got["cm"] == 0
        if want["mig_capable"]:
            assert got["mig"] == ["OK", [int(want["mig_mode"])] * 2]
        else:
            assert got["mig"] == ["NVMLError_NotSupported"]


def test_known_device_facts(state):
    """Spot-check realistic values the brief pins down."""
    def first(name):
        return json.loads(inv(name).read_text())["gpus"][0]
    t4, v100, a100, h100, p100 = first("t4"), first("v100"), first("hgx-a100-80gb"), first("h100-mig"), first("p100")
    assert (t4["name"], t4["pci_device_id"], t4["memory_total_mib"], t4["compute_capability"], t4["bar1_total_mib"]) == \
        ("Tesla T4", "0x1EB810DE", 15360, "7.5", 256)
    assert (v100["pci_device_id"], v100["compute_capability"]) == ("0x1DB110DE", "7.0")
    assert (a100["pci_device_id"], a100["compute_capability"], a100["bar1_total_mib"]) == ("0x20B210DE", "8.0", 131072)
    assert (h100["pci_device_id"], h100["compute_capability"]) == ("0x233010DE", "9.0")
    assert (p100["pci_device_id"], p100["compute_capability"]) == ("0x15F810DE", "6.0")
    hgx = json.loads(inv("hgx-a100-80gb").read_text())
    assert len(hgx["gpus"]) == 8 and hgx["nvswitch_count"] == 6 == len(hgx["nvswitches"])
    assert len(json.loads(inv("bench-16").read_text())["gpus"]) == 16
    mixed = [g["compute_capability"] for g in json.loads(inv("mixed").read_text())["gpus"]]
    assert mixed == ["7.5", "8.0", "6.0"]


def test_memory_info_v1_and_v2(state):
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        m1 = n.nvmlDeviceGetMemoryInfo(h)
        m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        out({"v1": [m1.total, m1.free, m1.used], "v2": [m2.version, m2.total, m2.reserved, m2.free, m2.used],
             "badver": exc(n.nvmlDeviceGetMemoryInfo, h, version=0x01000028)})
    """, inv("t4"), state)
    total, reserved = 15360 * 2**20, 255 * 2**20
    assert r["v1"] == [total, total - reserved, reserved]
    assert r["v2"] == [0x02000028, total, reserved, total - reserved, 0]
    assert r["badver"] == ["NVMLError_ArgumentVersionMismatch"]


def test_handle_lookups_and_uninitialized(state):
    r = run("""
        out_ = {"before": exc(n.nvmlDeviceGetCount)}
        n.nvmlInit()
        out_["bus_short"] = n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(b"0000:47:00.0"))
        out_["bus_lower"] = n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(b"00000000:4e:00.0"))
        out_["bus_missing"] = exc(n.nvmlDeviceGetHandleByPciBusId, b"0000:99:00.0")
        out_["uuid_missing"] = exc(n.nvmlDeviceGetHandleByUUID, b"GPU-00000000-0000-0000-0000-000000000000")
        out_["idx_bad"] = exc(n.nvmlDeviceGetHandleByIndex, 8)
        out_["init2"] = exc(n.nvmlInit)
        n.nvmlShutdown(); n.nvmlShutdown()
        out_["after"] = exc(n.nvmlDeviceGetCount)
        out_["shutdown_again"] = exc(n.nvmlShutdown)
        out(out_)
    """, inv("hgx-a100-80gb"), state)
    assert r["before"] == ["NVMLError_Uninitialized"]
    assert r["bus_short"] == 2 and r["bus_lower"] == 3
    assert r["bus_missing"] == r["uuid_missing"] == ["NVMLError_NotFound"]
    assert r["idx_bad"] == ["NVMLError_InvalidArgument"]
    assert r["init2"] == ["OK", None]
    assert r["after"] == r["shutdown_again"] == ["NVMLError_Uninitialized"]


def test_prober_extras(state):
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        u = n.nvmlDeviceGetUtilizationRates(h)
        out([n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU), n.nvmlDeviceGetPowerUsage(h),
             n.nvmlDeviceGetEnforcedPowerLimit(h), [u.gpu, u.memory], n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
             n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM), n.nvmlDeviceGetEccMode(h), n.nvmlDeviceGetDisplayMode(h),
             n.nvmlDeviceGetVirtualizationMode(h), n.nvmlDeviceGetNumGpuCores(h), n.nvmlDeviceGetPerformanceState(h),
             n.nvmlDeviceGetMemoryBusWidth(h), n.nvmlDeviceGetCurrPcieLinkGeneration(h),
             len(n.nvmlDeviceGetComputeRunningProcesses(h)), s(n.nvmlErrorString(n.NVML_ERROR_GPU_IS_LOST))])
    """, inv("t4"), state)
    assert r[:14] == [38, 9500, 70000, [0, 0], 300, 5001, [1, 1], 0, 0, 2560, 0, 256, 3, 0]
    assert r[14]


# -------------------------------------------------------- modes and state
def test_persistence_and_compute_mode_persist_across_processes(state):
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        n.nvmlDeviceSetPersistenceMode(h, 0)
        n.nvmlDeviceSetComputeMode(h, n.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        out([exc(n.nvmlDeviceSetComputeMode, h, 7), exc(n.nvmlDeviceSetPersistenceMode, h, 5)])
    """, inv("v100"), state)
    assert r == [["NVMLError_InvalidArgument"], ["NVMLError_InvalidArgument"]]
    r = run("""
        n.nvmlInit()
        out([[n.nvmlDeviceGetPersistenceMode(h), n.nvmlDeviceGetComputeMode(h)]
             for h in map(n.nvmlDeviceGetHandleByIndex, range(2))])
    """, inv("v100"), state)
    assert r == [[1, 0], [0, n_EXCL := 3]]
    assert json.loads(state.read_text())["gpus"][1]["compute_mode"] == n_EXCL
    assert state.with_name("state.json.lock").exists()


def test_mig_enable_pending_then_reset(state):
    code_set = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out([n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE), n.nvmlDeviceGetMigMode(h),
             exc(n.nvmlDeviceGetGpuInstanceProfileInfo, h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE),
             exc(n.nvmlDeviceSetMigMode, h, 3)])
    """
    r = run(code_set, inv("hgx-a100-80gb"), state)
    assert r == [n_IN_USE := 19, [0, 1], ["NVMLError_NotSupported"], ["NVMLError_InvalidArgument"]]
    get_all = """
        n.nvmlInit()
        out([n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())])
    """
    assert run(get_all, inv("hgx-a100-80gb"), state) == [[0, 1]] + [[0, 0]] * 7   # another process sees pending
    ctl(inv("hgx-a100-80gb"), state, "reset-gpu", "0")
    assert run(get_all, inv("hgx-a100-80gb"), state) == [[1, 1]] + [[0, 0]] * 7
    # disable is pending as well; reset-gpu all applies it
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out([n.nvmlDeviceSetMigMode(h, 0), n.nvmlDeviceGetMigMode(h)])
    """, inv("hgx-a100-80gb"), state)
    assert r == [n_IN_USE, [1, 0]]
    ctl(inv("hgx-a100-80gb"), state, "reset-gpu", "all")
    assert run(get_all, inv("hgx-a100-80gb"), state) == [[0, 0]] * 8


def test_mig_apply_immediately_env_and_inventory(tmp_path, state):
    code = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out([n.nvmlDeviceSetMigMode(h, 1), n.nvmlDeviceGetMigMode(h)])
    """
    assert run(code, inv("hgx-a100-80gb"), state, NVML_SIM_MIG_APPLY_IMMEDIATELY="1") == [0, [1, 1]]
    per_gpu = write_inv(tmp_path, "hgx-a100-80gb", lambda d: d["gpus"][0].update(mig_apply_immediately=True))
    assert run(code, per_gpu, tmp_path / "s2.json") == [0, [1, 1]]
    glob = write_inv(tmp_path, "hgx-a100-80gb", lambda d: d.update(mig_apply_immediately=True), "g.json")
    assert run(code, glob, tmp_path / "s3.json") == [0, [1, 1]]


def test_mig_calls_not_supported_on_non_mig_gpu(state):
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out([exc(n.nvmlDeviceGetMigMode, h), exc(n.nvmlDeviceSetMigMode, h, 1),
             exc(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 0), exc(n.nvmlDeviceGetMaxMigDeviceCount, h),
             exc(n.nvmlDeviceCreateGpuInstance, h, 19), exc(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 0),
             exc(n.nvmlDeviceGetGpuInstanceId, h), n.nvmlDeviceIsMigDeviceHandle(h).value])
    """, inv("t4"), state)
    assert r[:7] == [["NVMLError_NotSupported"]] * 7 and r[7] == 0


# ------------------------------------------------------------ MIG tables
EXPECTED_TABLES = {
    # key: {profile index: (id, name, slices, instances, memory MiB, placements)}
    "A100-SXM4-80GB": {0: (19, "1g.10gb", 1, 7, 9728, [0, 1, 2, 3, 4, 5, 6]), 7: (20, "1g.10gb+me", 1, 1, 9728, None),
                       9: (15, "1g.20gb", 1, 4, 19968, [0, 2, 4, 6]), 1: (14, "2g.20gb", 2, 3, 19968, [0, 2, 4]),
                       2: (9, "3g.40gb", 3, 2, 40192, [0, 4]), 3: (5, "4g.40gb", 4, 1, 40192, [0]),
                       4: (0, "7g.80gb", 7, 1, 81152, [0])},
    "A100-SXM4-40GB": {0: (19, "1g.5gb", 1, 7, 4864, None), 7: (20, "1g.5gb+me", 1, 1, 4864, None),
                       9: (15, "1g.10gb", 1, 4, 9856, None), 1: (14, "2g.10gb", 2, 3, 9856, None),
                       2: (9, "3g.20gb", 3, 2, 19968, None), 3: (5, "4g.20gb", 4, 1, 19968, None),
                       4: (0, "7g.40gb", 7, 1, 40192, None)},
    "H100-80GB": {0: (19, "1g.10gb", 1, 7, 9984, None), 7: (20, "1g.10gb+me", 1, 1, 9984, None),
                  9: (15, "1g.20gb", 1, 4, 20096, None), 1: (14, "2g.20gb", 2, 3, 20096, None),
                  2: (9, "3g.40gb", 3, 2, 40448, None), 3: (5, "4g.40gb", 4, 1, 40448, None),
                  4: (0, "7g.80gb", 7, 1, 81152, None)},
    # measured on the real H200 (lab/realgpu/samples/h200-580/nvml-raw.json; also test_DH_03_real_gpu_calibration_through_the_recorder)
    "H200-141GB": {0: (19, "1g.18gb", 1, 7, 16384, [0, 1, 2, 3, 4, 5, 6]), 7: (20, "1g.18gb+me", 1, 1, 16384, None),
                   9: (15, "1g.35gb", 1, 4, 33280, [0, 2, 4, 6]), 1: (14, "2g.35gb", 2, 3, 33280, [0, 2, 4]),
                   2: (9, "3g.71gb", 3, 2, 71424, [0, 4]), 3: (5, "4g.71gb", 4, 1, 71424, [0]),
                   4: (0, "7g.141gb", 7, 1, 143360, [0])},
    "A30": {0: (14, "1g.6gb", 1, 4, 5952, [0, 1, 2, 3]), 7: (21, "1g.6gb+me", 1, 1, 5952, None),
            1: (5, "2g.12gb", 2, 2, 11968, [0, 2]), 8: (6, "2g.12gb+me", 2, 1, 11968, None), 3: (0, "4g.24gb", 4, 1, 24000, [0])},
}


@pytest.mark.parametrize("key", sorted(EXPECTED_TABLES))
def test_gpu_instance_profile_tables(key, tmp_path, state):
    path = a100_mig_on(tmp_path, mig_profile_table=key)
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        res = {}
        for idx in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                v2 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, idx)
                v1 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, idx, version=1)
            except n.NVMLError_NotSupported:
                continue
            assert (v1.id, v1.sliceCount, v1.memorySizeMB) == (v2.id, v2.sliceCount, v2.memorySizeMB)
            cnt = ctypes.c_uint(0)
            n.nvmlDeviceGetGpuInstancePossiblePlacements(h, v2.id, None, ctypes.byref(cnt))
            arr = (n.c_nvmlGpuInstancePlacement_t * cnt.value)()
            n.nvmlDeviceGetGpuInstancePossiblePlacements(h, v2.id, arr, ctypes.byref(cnt))
            res[idx] = [v2.id, s(v2.name), v2.sliceCount, v2.instanceCount, v2.memorySizeMB, [p.start for p in arr],
                        n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, v2.id)]
        res["bad"] = exc(n.nvmlDeviceGetGpuInstanceProfileInfo, h, n.NVML_GPU_INSTANCE_PROFILE_COUNT)
        res["max"] = n.nvmlDeviceGetMaxMigDeviceCount(h)
        out(res)
    """, path, state)
    assert r.pop("bad") == ["NVMLError_InvalidArgument"]
    assert r.pop("max") == (4 if key == "A30" else 7)
    want = EXPECTED_TABLES[key]
    assert sorted(int(k) for k in r) == sorted(want)
    for idx, (pid, name, slices, inst, mem, starts) in want.items():
        got = r[str(idx)]
        assert got[:5] == [pid, "MIG " + name, slices, inst, mem]
        if starts is not None:
            assert got[5] == starts
        assert got[6] == inst          # empty GPU: remaining capacity == max instances


# ------------------------------------------------------- GI / CI lifecycle
def test_gpu_and_compute_instance_lifecycle(tmp_path, state):
    path = a100_mig_on(tmp_path)
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        gi = n.nvmlDeviceCreateGpuInstance(h, 9)                     # 3g.40gb
        info = n.nvmlGpuInstanceGetInfo(gi)
        res = {"gi": [info.id, info.profileId, info.placement.start, info.placement.size,
                      n.nvmlDeviceGetIndex(info.device)]}
        cips = {}
        for p in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                c = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, p, 0)
                cips[p] = [c.id, c.sliceCount, c.instanceCount, c.multiprocessorCount, s(c.name)]
            except n.NVMLError_NotSupported:
                pass
        res["cips"] = cips
        res["ci_bad_eng"] = exc(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, 0, 1)
        ci2 = n.nvmlGpuInstanceCreateComputeInstance(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
        ci = n.nvmlGpuInstanceCreateComputeInstance(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
        res["ci_full"] = exc(n.nvmlGpuInstanceCreateComputeInstance, gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
        res["ci_bad"] = exc(n.nvmlGpuInstanceCreateComputeInstance, gi, n.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE)
        ci_info = n.nvmlComputeInstanceGetInfo(ci2)
        res["ci2"] = [ci_info.id, ci_info.profileId, ci_info.placement.start, ci_info.placement.size,
                      n.nvmlGpuInstanceGetInfo(ci_info.gpuInstance).id]
        cnt = ctypes.c_uint(0)
        arr = (n.c_nvmlComputeInstance_t * 8)()
        n.nvmlGpuInstanceGetComputeInstances(gi, 0, arr, ctypes.byref(cnt))
        res["n_ci_1slice"] = cnt.value
        res["ci_by_id"] = n.nvmlComputeInstanceGetInfo(n.nvmlGpuInstanceGetComputeInstanceById(gi, 0)).profileId
        res["ci_by_id_missing"] = exc(n.nvmlGpuInstanceGetComputeInstanceById, gi, 5)
        res["gi_by_id"] = n.nvmlGpuInstanceGetInfo(n.nvmlDeviceGetGpuInstanceById(h, info.id)).profileId
        res["gi_by_id_missing"] = exc(n.nvmlDeviceGetGpuInstanceById, h, 3)
        res["ci_remaining"] = n.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0)
        m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
        mem = n.nvmlDeviceGetMemoryInfo(m)
        res["mig"] = [s(n.nvmlDeviceGetName(m)), s(n.nvmlDeviceGetUUID(m))[:4], mem.total,
                      n.nvmlDeviceGetGpuInstanceId(m), n.nvmlDeviceGetComputeInstanceId(m),
                      n.nvmlDeviceIsMigDeviceHandle(m).value,
                      n.nvmlDeviceGetIndex(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)),
                      n.nvmlDeviceGetAttributes(m).multiprocessorCount]
        res["destroy_in_use"] = exc(n.nvmlGpuInstanceDestroy, gi)
        res["disable_in_use"] = exc(n.nvmlDeviceSetMigMode, h, 0)
        n.nvmlComputeInstanceDestroy(ci); n.nvmlComputeInstanceDestroy(ci2)
        res["stale_ci"] = exc(n.nvmlComputeInstanceGetInfo, ci)
        n.nvmlGpuInstanceDestroy(gi)
        res["stale_gi"] = exc(n.nvmlGpuInstanceGetInfo, gi)
        cnt = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstances(h, 9, (n.c_nvmlGpuInstance_t * 2)(), ctypes.byref(cnt))
        res["left"] = cnt.value
        out(res)
    """, path, state)
    assert r["gi"] == [1, 9, 0, 4, 0]
    assert r["cips"] == {"0": [0, 1, 3, 14, "MIG 1c.3g.40gb"], "1": [1, 2, 1, 28, "MIG 2c.3g.40gb"],
                         "2": [2, 3, 1, 42, "MIG 3g.40gb"]}
    assert r["ci_bad_eng"] == ["NVMLError_InvalidArgument"]
    assert r["ci_full"] == ["NVMLError_InsufficientResources"]
    assert r["ci_bad"] == ["NVMLError_InvalidArgument"]
    assert r["ci2"] == [0, 1, 0, 2, 1]
    assert r["n_ci_1slice"] == 1 and r["ci_by_id"] == 1 and r["ci_by_id_missing"] == ["NVMLError_NotFound"]
    assert r["gi_by_id"] == 9 and r["gi_by_id_missing"] == ["NVMLError_NotFound"]
    assert r["ci_remaining"] == 0
    assert r["mig"] == ["NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "MIG-", 40192 * 2**20, 1, 1, 1, 0, 14]
    assert r["destroy_in_use"] == r["disable_in_use"] == ["NVMLError_InUse"]
    assert r["stale_ci"] == r["stale_gi"] == ["NVMLError_InvalidArgument"]
    assert r["left"] == 0


def test_capacity_exhaustion_and_invalid_profiles(tmp_path, state):
    path = a100_mig_on(tmp_path)
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        caps, ids = [], []
        for _ in range(7):
            caps.append(n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19))
            ids.append(n.nvmlGpuInstanceGetInfo(n.nvmlDeviceCreateGpuInstance(h, 19)).id)
        out({"caps": caps, "ids": ids,
             "eighth": exc(n.nvmlDeviceCreateGpuInstance, h, 19),
             "big": exc(n.nvmlDeviceCreateGpuInstance, h, 0),
             "rem": [n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p) for p in (19, 15, 14, 9, 5, 0, 20)],
             "bad_id": exc(n.nvmlDeviceCreateGpuInstance, h, 99),
             "bad_rem": exc(n.nvmlDeviceGetGpuInstanceRemainingCapacity, h, 99),
             "unsupported_index": exc(n.nvmlDeviceGetGpuInstanceProfileInfo, h, n.NVML_GPU_INSTANCE_PROFILE_8_SLICE)})
    """, path, state)
    assert r["caps"] == [7, 6, 5, 4, 3, 2, 1]
    assert r["ids"] == [7, 8, 9, 10, 11, 12, 13]
    assert r["eighth"] == r["big"] == ["NVMLError_InsufficientResources"]
    assert r["rem"] == [0] * 7
    assert r["bad_id"] == r["bad_rem"] == ["NVMLError_InvalidArgument"]
    assert r["unsupported_index"] == ["NVMLError_NotSupported"]


def test_placements(tmp_path, state):
    path = a100_mig_on(tmp_path)
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        P = n.c_nvmlGpuInstancePlacement_t
        def place(pid, start, size):
            p = P(); p.start = start; p.size = size
            return n.nvmlDeviceCreateGpuInstanceWithPlacement(h, pid, ctypes.byref(p))
        res = {"second_3g": n.nvmlGpuInstanceGetInfo(place(9, 4, 4)).id,
               "misaligned": exc(place, 9, 2, 4), "wrong_size": exc(place, 9, 0, 2),
               "overlap": exc(place, 14, 4, 2),
               "one_2g": n.nvmlGpuInstanceGetInfo(place(14, 2, 2)).id,
               "auto": n.nvmlGpuInstanceGetInfo(n.nvmlDeviceCreateGpuInstance(h, 19)).placement.start,
               "rem_1g": n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19),
               "rem_4g": n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 5)}
        out(res)
    """, path, state)
    assert r == {"second_3g": 2, "misaligned": ["NVMLError_InvalidArgument"], "wrong_size": ["NVMLError_InvalidArgument"],
                 "overlap": ["NVMLError_InsufficientResources"], "one_2g": 4, "auto": 0, "rem_1g": 1, "rem_4g": 0}


def test_existing_geometry_and_mig_device_handles(state):
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        devs = []
        for i in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except n.NVMLError_NotFound:
                devs.append(None); continue
            uuid = n.nvmlDeviceGetUUID(m)
            back = n.nvmlDeviceGetHandleByUUID(uuid)
            devs.append([s(n.nvmlDeviceGetName(m)), s(uuid), n.nvmlDeviceGetMemoryInfo(m).total // 2**20,
                         n.nvmlDeviceGetGpuInstanceId(back), exc(n.nvmlDeviceGetPowerUsage, m)])
        cnt = ctypes.c_uint(0)
        arr = (n.c_nvmlGpuInstance_t * 7)()
        n.nvmlDeviceGetGpuInstances(h, 19, arr, ctypes.byref(cnt))
        ncis = []
        for gi in arr[:cnt.value]:
            c = ctypes.c_uint(0)
            n.nvmlGpuInstanceGetComputeInstances(gi, 0, (n.c_nvmlComputeInstance_t * 1)(), ctypes.byref(c))
            ncis.append(c.value)
        h1 = n.nvmlDeviceGetHandleByIndex(1)
        out({"devs": devs, "n_1g": cnt.value, "cis": ncis, "over_max": exc(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 7),
             "gpu1": [n.nvmlDeviceGetMigMode(h1), exc(n.nvmlDeviceGetMigDeviceHandleByIndex, h1, 0),
                      n.nvmlDeviceGetGpuInstanceRemainingCapacity(h1, 0)]})
    """, inv("h100-mig"), state)
    devs = r["devs"]
    assert [d and d[0] for d in devs[:3]] == ["NVIDIA H100 80GB HBM3 MIG 3g.40gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                                               "NVIDIA H100 80GB HBM3 MIG 1g.10gb"]
    assert devs[3:] == [None] * 4
    assert all(d[1].startswith("MIG-") and len(d[1]) == 40 for d in devs[:3]) and len({d[1] for d in devs[:3]}) == 3
    assert [d[2] for d in devs[:3]] == [40448, 9984, 9984] and [d[3] for d in devs[:3]] == [1, 11, 12]
    assert devs[0][4] == ["NVMLError_NotSupported"]
    assert r["n_1g"] == 3 and sorted(r["cis"]) == [0, 1, 1]
    assert r["over_max"] == ["NVMLError_InvalidArgument"]
    assert r["gpu1"] == [[1, 1], ["NVMLError_NotFound"], 1]


def test_cross_process_state(tmp_path, state):
    path = a100_mig_on(tmp_path, ngpus=2)
    r = run("""
        n.nvmlInit()
        gi = n.nvmlDeviceCreateGpuInstance(n.nvmlDeviceGetHandleByIndex(1), 14)
        n.nvmlGpuInstanceCreateComputeInstance(gi, 1)
        out(n.nvmlGpuInstanceGetInfo(gi).id)
    """, path, state)
    assert r == 3
    lister = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        cnt = ctypes.c_uint(0)
        arr = (n.c_nvmlGpuInstance_t * 3)()
        n.nvmlDeviceGetGpuInstances(h, 14, arr, ctypes.byref(cnt))
        res = [n.nvmlGpuInstanceGetInfo(g).id for g in arr[:cnt.value]]
        if "%s" == "destroy":
            ci = n.nvmlGpuInstanceGetComputeInstanceById(arr[0], 0)
            n.nvmlComputeInstanceDestroy(ci)
            n.nvmlGpuInstanceDestroy(arr[0])
        out(res)
    """
    assert run(lister % "destroy", path, state) == [3]
    assert run(lister % "list", path, state) == []
    # a long-lived process sees changes made by another process after it initialised
    r = run("""
        import subprocess, os
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        before = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0)
        subprocess.run([sys.executable, "-c", "import pynvml as n; n.nvmlInit(); "
                        "n.nvmlDeviceCreateGpuInstance(n.nvmlDeviceGetHandleByIndex(0), 0)"], check=True)
        out([before, n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0)])
    """, path, state)
    assert r == [1, 0]


def test_concurrent_writers_are_serialised(tmp_path, state):
    path = a100_mig_on(tmp_path)
    code = """
        n.nvmlInit()
        out(n.nvmlGpuInstanceGetInfo(n.nvmlDeviceCreateGpuInstance(n.nvmlDeviceGetHandleByIndex(0), 19)).id)
    """
    with ThreadPoolExecutor(max_workers=7) as ex:
        ids = list(ex.map(lambda _: run(code, path, state), range(7)))
    assert sorted(ids) == list(range(7, 14))
    st = json.loads(state.read_text())
    assert len(st["gpus"][0]["gpu_instances"]) == 7


def test_nvml_sim_ctl_show_and_reset_state(tmp_path, state):
    shown = json.loads(ctl(inv("h100-mig"), state, "show"))
    assert [len(g["gpu_instances"]) for g in shown["gpus"]] == [4, 0]
    path = a100_mig_on(tmp_path)
    run("n.nvmlInit(); n.nvmlDeviceCreateGpuInstance(n.nvmlDeviceGetHandleByIndex(0), 0); out(1)", path, state)
    assert json.loads(state.read_text())["gpus"][0]["gpu_instances"]
    ctl(path, state, "reset-state")
    assert not state.exists()
    assert run("n.nvmlInit(); out(n.nvmlDeviceGetGpuInstanceRemainingCapacity(n.nvmlDeviceGetHandleByIndex(0), 0))",
               path, state) == 1


# ---------------------------------------------------------- error injection
@pytest.mark.parametrize("err,cls", [("DRIVER_NOT_LOADED", "NVMLError_DriverNotLoaded"),
                                     ("LIB_RM_VERSION_MISMATCH", "NVMLError_LibRmVersionMismatch"),
                                     ("NO_PERMISSION", "NVMLError_NoPermission")])
def test_injected_init_errors_from_env(err, cls, state):
    r = run("out([exc(n.nvmlInit), exc(n.nvmlInitWithFlags, 0)])", inv("t4"), state, errors="nvmlInit=" + err)
    assert r == [[cls], [cls]]


@pytest.mark.parametrize("err,cls", [("NOT_SUPPORTED", "NVMLError_NotSupported"), ("GPU_IS_LOST", "NVMLError_GpuIsLost"),
                                     ("NO_PERMISSION", "NVMLError_NoPermission"),
                                     ("NVML_ERROR_DRIVER_NOT_LOADED", "NVMLError_DriverNotLoaded"),
                                     ("LIB_RM_VERSION_MISMATCH", "NVMLError_LibRmVersionMismatch")])
def test_injected_per_gpu_call_errors_from_env(err, cls, state):
    r = run("""
        n.nvmlInit()
        h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        out([exc(n.nvmlDeviceGetPowerUsage, h0), exc(n.nvmlDeviceGetPowerUsage, h1),
             exc(n.nvmlDeviceGetMemoryInfo, h1, version=n.nvmlMemory_v2), exc(n.nvmlDeviceGetName, h1)[0]])
    """, inv("v100"), state, errors="nvmlDeviceGetPowerUsage:1=%s, nvmlDeviceGetMemoryInfo=%s" % (err, err))
    assert r == [["OK", 42000], [cls], [cls], "OK"]


def test_injected_errors_from_inventory(tmp_path, state):
    def lost(d):
        d["gpus"][1]["errors"] = {"*": "GPU_IS_LOST"}
        d["gpus"][3]["errors"] = {"nvmlDeviceGetUUID": "GPU_IS_LOST"}
        d["gpus"][0]["errors"] = {"nvmlDeviceSetMigMode": "NO_PERMISSION"}
        d["errors"] = {"nvmlSystemGetCudaDriverVersion": "NOT_SUPPORTED", "nvmlDeviceGetSerial:2": "NOT_SUPPORTED"}
    path = write_inv(tmp_path, "hgx-a100-80gb", lost)
    r = run("""
        n.nvmlInit()
        h0, h2, h3 = (n.nvmlDeviceGetHandleByIndex(i) for i in (0, 2, 3))
        out([n.nvmlDeviceGetCount(), exc(n.nvmlDeviceGetHandleByIndex, 1), exc(n.nvmlDeviceGetUUID, h3),
             exc(n.nvmlDeviceGetName, h0)[0], exc(n.nvmlDeviceSetMigMode, h0, 1), exc(n.nvmlDeviceSetMigMode, h2, 0),
             exc(n.nvmlSystemGetCudaDriverVersion), exc(n.nvmlSystemGetCudaDriverVersion_v2),
             exc(n.nvmlDeviceGetSerial, h2), exc(n.nvmlDeviceGetSerial, h0)[0]])
    """, path, state)
    assert r == [8, ["NVMLError_GpuIsLost"], ["NVMLError_GpuIsLost"], "OK", ["NVMLError_NoPermission"], ["OK", 0],
                 ["NVMLError_NotSupported"], ["NVMLError_NotSupported"], ["NVMLError_NotSupported"], "OK"]
    glob = write_inv(tmp_path, "t4", lambda d: d.update(errors={"nvmlInit": "LIB_RM_VERSION_MISMATCH"}), "g.json")
    assert run("out(exc(n.nvmlInit))", glob, state) == ["NVMLError_LibRmVersionMismatch"]


def test_missing_and_broken_inventories(tmp_path, state):
    assert run("out(exc(n.nvmlInit))", tmp_path / "nope.json", state) == ["NVMLError_DriverNotLoaded"]
    broken = tmp_path / "broken.json"
    broken.write_text('{"gpus": [ {"name": "x", } ]}')
    assert run("out(exc(n.nvmlInit))", broken, state) == ["NVMLError_Unknown"]
    badtable = write_inv(tmp_path, "hgx-a100-80gb", lambda d: d["gpus"][0].update(mig_profile_table="B200"), "bt.json")
    assert run("out(exc(n.nvmlInit))", badtable, state) == ["NVMLError_Unknown"]
    badgeo = write_inv(tmp_path, "h100-mig", lambda d: d["gpus"][0]["mig_instances"].append({"profile": "4g.40gb"}), "bg.json")
    assert run("out(exc(n.nvmlInit))", badgeo, state) == ["NVMLError_Unknown"]
    (tmp_path / "garbage-state.json").write_text("{not json")
    assert run("n.nvmlInit(); out(n.nvmlDeviceGetCount())", inv("t4"), tmp_path / "garbage-state.json") == 1


def test_custom_inline_profile_table(tmp_path, state):
    table = {"memory_slices": 2, "max_mig_devices": 2, "profiles": [
        {"index": 0, "id": 30, "name": "1g.12gb", "slices": 1, "instances": 2, "memory_mib": 12288, "placements": [0, 1]},
        {"index": 1, "id": 31, "name": "2g.24gb", "slices": 2, "instances": 1, "memory_mib": 24576,
         "placement_size": 2, "placements": [0]}]}
    path = a100_mig_on(tmp_path, mig_profile_table=table)
    r = run("""
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        a = n.nvmlGpuInstanceGetInfo(n.nvmlDeviceCreateGpuInstance(h, 30)).id
        b = n.nvmlGpuInstanceGetInfo(n.nvmlDeviceCreateGpuInstance(h, 30)).id
        out([s(n.nvmlDeviceGetGpuInstanceProfileInfo(h, 1).name), a, b, exc(n.nvmlDeviceCreateGpuInstance, h, 31),
             n.nvmlDeviceGetMaxMigDeviceCount(h)])
    """, path, state)
    assert r == ["MIG 2g.24gb", 1, 2, ["NVMLError_InsufficientResources"], 2]


# the real GPUs the lab has recordings of (lab/realgpu/samples/<dir>) and the inventory calibrated on each
REAL_GPUS = {"h100-real-580": "h100-580", "h200-real-580": "h200-580"}
REAL_SAMPLES = ROOT / "lab" / "realgpu" / "samples"
# what the simulator does not answer as the real 580 driver did, on purpose: calls the collection never makes (the
# simulator does not export them, or answers NOT_SUPPORTED), and GPU-instance profile index 17, past the 580 driver's
# profile count (INVALID_ARGUMENT there) but within the count of the newer nvml.h the simulator is built against
REAL_STAND_IN_LIMITS = {
    "raw/gpus/0/board_id", "raw/gpus/0/module_id", "raw/gpus/0/multi_gpu_board", "raw/gpus/0/numa",
    "raw/gpus/0/gi_profiles/17", "health/accounting_mode", "health/app_clock_graphics", "health/conf_compute_state",
    "health/excluded_device_count", "health/host_vgpu_mode", "health/total_energy_mj",
    "health/temperature_threshold_mem_max"}
RECORD = """
    import sys; sys.path.insert(0, %r)
    import nvml_record as R
    N = R.N
    N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
    out({"raw": {"driver": R.call(N.nvmlSystemGetDriverVersion), "cuda_driver": R.call(N.nvmlSystemGetCudaDriverVersion),
                 "nvml_version": R.call(N.nvmlSystemGetNVMLVersion), "count": N.nvmlDeviceGetCount(),
                 "gpus": [R.device_raw(0)]},
         "health": R.health(h)})
""" % str(ROOT / "lab" / "realgpu")


def _recorded_form(v, sim):
    """The H100's capture came from an earlier recorder: numbers as strings, bare error strings; an answer that
    recorder failed to ask (a binding TypeError) is no answer (None)."""
    if isinstance(v, str):
        if "required positional argument" in v or "string indices" in v:
            return None
        if v.startswith("NVMLError_") and isinstance(sim, dict) and "error" in sim:
            return {"error": sim["error"] if sim["error"].split(":")[0] == v.split(":")[0] else v}
        if v.isdigit() and isinstance(sim, int):
            return int(v)
    if isinstance(v, dict) and "TypeError" in str(v.get("error", "")):
        return None
    return v


def _differences(real, sim, path, diffs, counted):
    real = _recorded_form(real, sim)
    if real is None:
        return
    if isinstance(real, dict) and isinstance(sim, dict) and "error" not in real and "error" not in sim:
        for k in real:
            if k in sim:
                _differences(real[k], sim[k], path + "/" + k, diffs, counted)
    elif isinstance(real, list) and isinstance(sim, list):
        # the earlier recorder asked one NVLink; the answers it has are compared
        if len(real) != len(sim) and not path.endswith("nvlink_states"):
            diffs.add(path)
        for i, (x, y) in enumerate(zip(real, sim)):
            _differences(x, y, "%s/%d" % (path, i), diffs, counted)
    else:
        counted.append(path)
        if real != sim:
            diffs.add(path)


@pytest.mark.parametrize("name", sorted(REAL_GPUS))
def test_DH_03_real_gpu_calibration_through_the_recorder(name, tmp_path):
    """The recorder that read the real GPU (lab/realgpu/nvml_record.py: device fields, GPU-instance profiles 0-17 with
    placements, health, fabric info, a 200 ms Xid wait) run on the simulator with the GPU's inventory answers what the
    real driver answered, value for value, but for the named stand-in limits (calls the collection does not make)."""
    raw = json.loads((REAL_SAMPLES / REAL_GPUS[name] / "nvml-raw.json").read_text())
    health = json.loads((REAL_SAMPLES / REAL_GPUS[name] / "nvml-health.json").read_text())
    sim = run(RECORD, inv(name), tmp_path / "s.json")
    diffs, counted = set(), []
    _differences({k: v for k, v in raw.items() if k != "bindings"}, sim["raw"], "raw", diffs, counted)
    _differences(health, sim["health"], "health", diffs, counted)
    roots = {d for d in diffs if not any(d == lim or d.startswith(lim + "/") for lim in REAL_STAND_IN_LIMITS)}
    assert roots == set(), sorted(roots)
    # enough was compared to mean something: every profile's fields and placements, the device and health fields
    assert len(counted) >= (150 if name == "h100-real-580" else 250), len(counted)
    if name == "h200-real-580":
        # the whole recorder ran there: each named limit is a real difference, none stale
        assert {lim for lim in REAL_STAND_IN_LIMITS if any(d == lim or d.startswith(lim + "/") for d in diffs)} == \
            REAL_STAND_IN_LIMITS


def test_h200_idle_usage_as_the_real_h200(tmp_path):
    """What a metrics exporter reads, idle (nvml-usage.json's idle samples on the real H200, nvml_record.usage_sample
    run on the simulator): utilization, memory, clocks, temperature, clock event reasons, P-state and the (empty)
    compute processes are the real idle answers; power is the health capture's (78.0 W, the idle samples 78.02-78.04 W).
    Not simulated (stand-in limits until the metrics work, #42): encoder/decoder utilization, the energy counter,
    per-process utilization and GPM (the real H200 answered all; GPM under load in nvml-usage.json)."""
    usage = json.loads((REAL_SAMPLES / "h200-580" / "nvml-usage.json").read_text())
    idle = [x for x in usage["samples"] if x["phase"] == "idle"]
    assert usage["gpm_supported"] is True and len(idle) == 2
    r = run("""
        import sys; sys.path.insert(0, %r)
        import nvml_record as R
        R.N.nvmlInit()
        out(R.usage_sample(R.N.nvmlDeviceGetHandleByIndex(0), 0))
    """ % str(ROOT / "lab" / "realgpu"), inv("h200-real-580"), tmp_path / "s.json")
    same = ("utilization", "memory", "sm_clock_mhz", "mem_clock_mhz", "temperature", "clocks_event_reasons", "pstate",
            "compute_processes")
    for sample in idle:
        assert {k: r[k] for k in same} == {k: sample[k] for k in same}
        assert abs(r["power_mw"] - sample["power_mw"]) <= 100
    assert sorted(k for k, v in r.items() if isinstance(v, dict) and "FunctionNotFound" in v.get("error", "")) == [
        "decoder", "encoder", "energy_mj", "gpm", "process_utilization"]


@pytest.mark.parametrize("name", sorted(REAL_GPUS))
def test_DH_03_health_answers_as_the_real_gpus(name, tmp_path):
    """Calibration: inventories h100-real-580 and h200-real-580 answer the health calls as the real H100 and H200 did
    (nvml-health.json), through the unmodified pynvml."""
    real = json.loads((REAL_SAMPLES / REAL_GPUS[name] / "nvml-health.json").read_text())
    r = run("""
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        hist = n.nvmlDeviceGetRowRemapperHistogram(h)
        es = n.nvmlEventSetCreate(); n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, es)
        out({"rows": [str(x) for x in n.nvmlDeviceGetRemappedRows(h)],
             "hist": {k: getattr(hist, k) for k in ("max", "high", "partial", "low", "none")},
             "sbe": exc(n.nvmlDeviceGetRetiredPages, h, 0), "dbe": exc(n.nvmlDeviceGetRetiredPages, h, 1),
             "pending": exc(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
             "ecc": [n.nvmlDeviceGetTotalEccErrors(h, t, c) for t in (1, 0) for c in (0, 1)],
             "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
             "supported": n.nvmlDeviceGetSupportedClocksEventReasons(h),
             "pcie": [n.nvmlDeviceGetCurrPcieLinkGeneration(h), n.nvmlDeviceGetMaxPcieLinkGeneration(h),
                      n.nvmlDeviceGetGpuMaxPcieLinkGeneration(h), n.nvmlDeviceGetCurrPcieLinkWidth(h),
                      n.nvmlDeviceGetMaxPcieLinkWidth(h), n.nvmlDeviceGetPcieReplayCounter(h)],
             "temps": [n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                       n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)],
             "virt": n.nvmlDeviceGetVirtualizationMode(h), "events": n.nvmlDeviceGetSupportedEventTypes(h),
             "inforom": s(n.nvmlDeviceGetInforomImageVersion(h)), "xid": exc(n.nvmlEventSetWait_v2, es, 200),
             "gi_with_mig_off": exc(lambda: n.nvmlDeviceGetGpuInstanceProfileInfo(h, 0).id)})
    """, inv(name), tmp_path / "s.json")
    assert r["rows"] == [str(x) for x in real["remapped_rows"]] and r["hist"] == real["row_remapper_histogram"]
    # no retired pages (they remap rows); the double-bit query: INVALID_ARGUMENT on the H100, NOT_SUPPORTED on the H200
    assert [r["sbe"], r["dbe"], r["pending"]] == [[real[k]["error"].split(":")[0]] for k in (
        "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending")]
    assert r["ecc"] == [real["ecc_uncorrected_volatile"], real["ecc_uncorrected_aggregate"],
                        real["ecc_corrected_volatile"], real["ecc_corrected_aggregate"]]
    assert (r["reasons"], r["supported"]) == (real["clocks_event_reasons"], real["supported_clocks_event_reasons"])
    assert r["pcie"] == [real["pcie_gen_current"], real["pcie_gen_max"], real["pcie_gen_gpu_max"],
                         real["pcie_width_current"], real["pcie_width_max"], real["pcie_replay_counter"]]
    assert r["temps"] == [real["temperature_threshold_slowdown"], real["temperature_threshold_shutdown"]]
    assert (r["virt"], r["events"], r["inforom"]) == (real["virtualization_mode"], real["supported_event_types"],
                                                      real["inforom_image"])
    assert r["xid"] == ["NVMLError_Timeout"]
    assert r["gi_with_mig_off"] == ["OK", 19]


def test_DH_12_recovery_action_field_as_the_real_driver(tmp_path):
    """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230) through the unmodified pynvml: the h100-real-580 inventory
    answers NONE, as the real H100 on 580 did (nvidia-smi -q "GPU Recovery Action: None"); a fault inventory names
    the action; a pre-570 driver and other fields answer NOT_SUPPORTED in the value; nvml_probe reads it."""
    real = (ROOT / "lab" / "realgpu" / "samples" / "h100-580" / "nvidia-smi-q.txt").read_text()
    assert re.search(r"GPU Recovery Action\s*:\s*None\s*$", real, re.M)
    code = """
        import sys; sys.path.insert(0, %r)
        from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        v = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, n.NVML_FI_DEV_ECC_CURRENT])
        out({"ret": [v[0].nvmlReturn, v[1].nvmlReturn], "value": v[0].value.uiVal, "type": v[0].valueType,
             "probe": nvml_probe.recovery_action(h)})
    """ % lab_collections_path()
    r = run(code, inv("h100-real-580"), tmp_path / "s.json")
    assert (r["ret"], r["value"], r["type"], r["probe"]) == ([0, 3], 0, 1, "none")
    p = write_inv(tmp_path, "h100-real-580", lambda d: d["gpus"][0].update(recovery_action=2))
    assert run(code, p, tmp_path / "s2.json")["probe"] == "node_reboot"
    p = write_inv(tmp_path, "h100-real-580", lambda d: d.update(driver_version="535.183.01"), name="old.json")
    r = run(code, p, tmp_path / "s3.json")
    assert r["ret"] == [3, 3] and r["probe"] is None


def test_DH_06_fault_answers_and_xid_events(tmp_path):
    def fault(d):
        g = d["gpus"][0]
        g.update(xid_events=[79, 48], remapped_rows={"uncorrectable": 2, "pending": True}, clocks_event_reasons=0x48,
                 pcie_link_width=8, retired_pages={"single_bit": 3, "double_bit": 1, "pending": True})
    p = write_inv(tmp_path, "h100-real-580", fault)
    r = run("""
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        es = n.nvmlEventSetCreate(); n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, es)
        xids = []
        while True:
            try:
                xids.append(n.nvmlEventSetWait_v2(es, 10).eventData)
            except n.NVMLError as e:
                xids.append(type(e).__name__); break
        # nothing left: TIMEOUT after the timeout, as the real one (not at once: a health loop would spin a CPU)
        import time
        t0, c0 = time.monotonic(), time.process_time()
        late = exc(n.nvmlEventSetWait_v2, es, 300)
        waited = [late, time.monotonic() - t0, time.process_time() - c0]
        n.nvmlEventSetFree(es)
        out({"xids": xids, "waited": waited, "rows": list(n.nvmlDeviceGetRemappedRows(h)), "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
             "width": n.nvmlDeviceGetCurrPcieLinkWidth(h), "sbe": len(n.nvmlDeviceGetRetiredPages(h, 0)),
             "dbe": len(n.nvmlDeviceGetRetiredPages(h, 1)), "pending": n.nvmlDeviceGetRetiredPagesPendingStatus(h),
             "mig_off_profiles_elsewhere": None})
    """, p, tmp_path / "s.json")
    assert r["xids"] == [79, 48, "NVMLError_Timeout"]
    late, wall, cpu = r["waited"]
    assert late == ["NVMLError_Timeout"] and 0.29 <= wall < 5 and cpu < 0.1, r["waited"]
    assert r["rows"] == [0, 2, 1, 0] and r["reasons"] == 0x48 and r["width"] == 8
    assert (r["sbe"], r["dbe"], r["pending"]) == (3, 1, 1)
    # GPUs of other inventories keep refusing GI profile info with MIG off (as older drivers)
    r = run("""
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(1)
        out(exc(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 0))
    """, inv("hgx-a100-80gb"), tmp_path / "s2.json")
    assert r == ["NVMLError_NotSupported"]


def test_DH_06_REM_18_xid_events_after_ms_happen_that_long_after_the_registration(tmp_path):
    """xid_events_after_ms: the GPU's Xids happen that long after an event set registered it (a GPU failing while its
    client runs, not in the client's first instant); a wait with a longer timeout returns when the Xid happens, one
    with a shorter answers TIMEOUT after its timeout, and a second set registered later waits its own delay."""
    p = write_inv(tmp_path, "h100-real-580", lambda d: d["gpus"][0].update(xid_events=[48], xid_events_after_ms=800))
    r = run("""
        import time
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        t0 = time.monotonic()
        es = n.nvmlEventSetCreate(); n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, es)
        early = [exc(n.nvmlEventSetWait_v2, es, 200), time.monotonic() - t0]
        c0 = time.process_time()
        xid = n.nvmlEventSetWait_v2(es, 5000).eventData
        at, cpu = time.monotonic() - t0, time.process_time() - c0
        es2 = n.nvmlEventSetCreate(); n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, es2)
        t1 = time.monotonic()
        second = [n.nvmlEventSetWait_v2(es2, 5000).eventData, time.monotonic() - t1]
        out({"early": early, "xid": xid, "at": at, "cpu": cpu, "second": second})
    """, p, tmp_path / "s.json")
    assert r["early"][0] == ["NVMLError_Timeout"] and 0.19 <= r["early"][1] < 0.7, r
    assert r["xid"] == 48 and 0.79 <= r["at"] < 3 and r["cpu"] < 0.1, r
    assert r["second"][0] == 48 and 0.79 <= r["second"][1] < 3, r


def test_DH_16_DH_17_DH_18_DH_19_health_answers_as_the_real_h100_and_as_faults(tmp_path):
    """Temperature against its thresholds, power against the enforced limit, InfoROM validation and NVLink state and
    error counters through the unmodified pynvml: h100-real-580 answers as the real H100 on 580 did (34 C of 89/95,
    102.7 W of 700 W, InfoROM valid - pynvml raised nothing - and NVLink NOT_SUPPORTED); fault inventories change
    only the fault, and nvml_probe reads each."""
    real = json.loads((ROOT / "lab" / "realgpu" / "samples" / "h100-580" / "nvml-health.json").read_text())
    smi = (ROOT / "lab" / "realgpu" / "samples" / "h100-580" / "nvidia-smi-q.txt").read_text()
    assert re.search(r"Current Power Limit\s*:\s*700\.00 W", smi) and re.search(r"Default Power Limit\s*:\s*700\.00 W", smi)
    code = """
        import sys; sys.path.insert(0, %r)
        from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        out({"temp": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
             "power": [n.nvmlDeviceGetPowerUsage(h), n.nvmlDeviceGetEnforcedPowerLimit(h),
                       n.nvmlDeviceGetPowerManagementDefaultLimit(h)],
             "inforom": exc(n.nvmlDeviceValidateInforom, h),
             "nvlink_state": exc(n.nvmlDeviceGetNvLinkState, h, 0),
             "nvlink_errors": exc(n.nvmlDeviceGetNvLinkErrorCounter, h, 0, n.NVML_NVLINK_ERROR_DL_REPLAY),
             "probe": {k: nvml_probe.gpu_health(h)[k] for k in ("temperature", "power", "inforom_valid", "nvlink")}})
    """ % lab_collections_path()
    r = run(code, inv("h100-real-580"), tmp_path / "s.json")
    assert r["temp"] == real["temperature_gpu"] and r["power"] == [real["power_usage_mw"], 700000, 700000]
    assert r["inforom"] == ["OK", None] and real["inforom_valid"] is None
    assert r["nvlink_state"] == ["NVMLError_NotSupported"] == [real["nvlink_state_0"]["error"].split(":")[0]]
    assert r["nvlink_errors"] == ["NVMLError_NotSupported"]
    assert r["probe"] == {"temperature": {"gpu": 34, "slowdown": 89, "shutdown": 95},
                          "power": {"usage_mw": 102716, "enforced_limit_mw": 700000, "default_limit_mw": 700000},
                          "inforom_valid": True, "nvlink": {"applicable": False, "reason": "not_supported", "links": []}}
    p = write_inv(tmp_path, "h100-real-580", lambda d: d["gpus"][0].update(inforom_valid=False, temperature_c=91,
                                                                           power_usage_mw=760000))
    r = run(code, p, tmp_path / "s2.json")
    assert r["inforom"] == ["NVMLError_CorruptedInforom"] and r["probe"]["inforom_valid"] is False
    assert r["probe"]["temperature"]["gpu"] == 91 and r["probe"]["power"]["usage_mw"] == 760000

    def hgx(d):
        d["gpus"][1].update(nvlink_inactive=[3], nvlink_errors={"5": {"replay": 7, "crc_flit": 2}})
    p = write_inv(tmp_path, "hgx-a100-80gb", hgx, name="hgx.json")
    r = run("""
        import sys; sys.path.insert(0, %r)
        from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import nvml_probe
        n.nvmlInit()
        nv = [nvml_probe.nvlink_health(n.nvmlDeviceGetHandleByIndex(i)) for i in (0, 1)]
        h = n.nvmlDeviceGetHandleByIndex(1)
        out({"nv": nv, "past": exc(n.nvmlDeviceGetNvLinkErrorCounter, h, 12, 0),
             "bad_counter": exc(n.nvmlDeviceGetNvLinkErrorCounter, h, 0, 9)})
    """ % lab_collections_path(), p, tmp_path / "s3.json")
    assert [lk["active"] for lk in r["nv"][0]["links"]] == [True] * 12
    assert [lk["link"] for lk in r["nv"][1]["links"] if not lk["active"]] == [3]
    assert r["nv"][1]["links"][5]["errors"] == {"replay": 7, "recovery": 0, "crc_flit": 2, "crc_data": 0}
    assert (r["past"], r["bad_counter"]) == (["NVMLError_InvalidArgument"], ["NVMLError_InvalidArgument"])
