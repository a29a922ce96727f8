"""testinfra checks for molecule/gpu_sharing: read the simulated GPUs' state back through NVML in the node."""
import json

testinfra_hosts = ["ansible://gpu_nodes"]

READ = r"""
import json, pynvml as n
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    d = {"pm": n.nvmlDeviceGetPersistenceMode(h), "cm": n.nvmlDeviceGetComputeMode(h), "mig": None, "migdevs": []}
    try:
        d["mig"] = list(n.nvmlDeviceGetMigMode(h))
        for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except n.NVMLError:
                continue
            name = n.nvmlDeviceGetName(m)
            d["migdevs"].append(name.decode() if isinstance(name, bytes) else name)
    except n.NVMLError_NotSupported:
        pass
    out.append(d)
print(json.dumps(out))
"""


def _state(host):
    return json.loads(host.check_output("python3 -c '%s'" % READ.replace("'", "'\"'\"'")))


def test_persistence_on_everywhere(host):
    assert all(g["pm"] == 1 for g in _state(host))


def test_a100_geometry_or_t4_mps(host):
    name = host.backend.get_hostname()
    state = _state(host)
    if name == "sharing-a100":
        assert len(state) == 2
        for g in state:
            assert g["mig"] == [1, 1]
            assert len(g["migdevs"]) == 2
            assert all("3g.40gb" in m for m in g["migdevs"])
    else:
        assert state[0]["cm"] == 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
        unit = host.file("/etc/systemd/system/nvidia-mps.service")
        assert unit.is_file
        text = unit.content_string
        assert "nvidia-cuda-mps-control -d" in text
        assert "CUDA_MPS_PIPE_DIRECTORY=" in text
        assert "set_default_active_thread_percentage 50" in text
