"""The real NVIDIA H200's answers (lab/realgpu/samples/h200-580: driver 580.159.04, Firecracker VM passthrough, MIG
off; lab/realgpu/device-run.sh of 2026-11-29) against the collection and against the NVML simulator's inventory of the
same GPU (lab/nvml_sim/inventories/h200-real-580.json).

* GFD: NVIDIA's gpu-feature-discovery v0.19.1 (NVIDIA/k8s-device-plugin, the lab's build) --oneshot on the real driver
  for --mig-strategy none/single/mixed; the collection's labels (gpu_catalog.node_labels over the recorded gpu_info
  facts) judged by test_gfd_labels.check (rows GFD-01..07), and GFD on the simulator gives the real GFD's labels.
* Device plugin: NVIDIA's device plugin v0.19.1 under the stand-in kubelet (lab/go/kubelet-registrar) on the real
  driver, given the config the collection rendered from the real facts (lab/realgpu/device_plugin_record.py); the
  collection renders the same config today, the plugin registered the collection's resources, and the same config on
  the simulator answers the same (test_device_plugin.run_plugin).
* CDI: nvidia-ctk v1.20.0 `cdi generate --mode=nvml` on the real driver and on the simulator (test_nvidia_ctk's
  machinery) name the same devices with the same device nodes.
Run: .venv/bin/pytest -q -p no:xdist lab/tests/oracles/test_real_gpu_h200.py
"""
import json
import os

import pytest
import yaml

from oracle_util import INVENTORIES, ROOT
from test_device_plugin import binaries, node_config, render, run_plugin, stack  # noqa: F401 (fixtures)
from test_gfd_labels import catalog, check, gfd, run_gfd  # noqa: F401 (fixtures)
from test_nvidia_ctk import ctk, driver_root, nvml_sim, run_generate  # noqa: F401 (fixtures)

SAMPLES = os.path.join(ROOT, 'lab', 'realgpu', 'samples', 'h200-580')
INVENTORY = os.path.join(INVENTORIES, 'h200-real-580.json')
UUID = 'GPU-adc5c5ad-aa24-a723-d6a8-18d9afbe061f'
STRATEGIES = ('none', 'single', 'mixed')
DP_VARIANTS = ('exclusive', 'time-slicing-4', 'time-slicing-rename')


def _json(name):
    with open(os.path.join(SAMPLES, name)) as f:
        return json.load(f)


def _labels(strategy):
    with open(os.path.join(SAMPLES, 'gfd-%s.labels' % strategy)) as f:
        return dict(line.split('=', 1) for line in f.read().splitlines() if line)


def _facts():
    info = _json('gpu_info.json')
    return {k: v for k, v in info.items() if k not in ('_seconds', 'changed')}


# ----------------------------------------------------------------------------------------------------------- GFD
def test_GFD_09_collection_labels_are_the_real_gfds_on_the_real_h200(catalog):  # noqa: F811
    facts = _facts()
    # the labels gpu_info wrote on the GPU are those gpu_catalog writes today from the same facts
    today = catalog.node_labels(facts['gpus'], facts['nvml']['driver_version'], facts['nvml']['cuda_driver_version'])
    assert today == facts['labels']
    theirs = {s: _labels(s) for s in STRATEGIES}
    ours, none = check(catalog, facts, theirs)
    # what the real GPU shows: GFD's product from the NVML name, memory in MiB as NVML counts it (not the 141 GB of
    # the MIG catalogue's name), Hopper, MIG capable with MIG off
    assert (ours['nvidia.com/gpu.product'], ours['nvidia.com/gpu.memory'], ours['nvidia.com/gpu.family']) == (
        'NVIDIA-H200', '143771', 'hopper') == (none['nvidia.com/gpu.product'], none['nvidia.com/gpu.memory'],
                                               none['nvidia.com/gpu.family'])
    assert ours['nvidia.com/mig.capable'] == none['nvidia.com/mig.capable'] == 'true'
    # MIG off: single and mixed only add the strategy (no MIG device to label)
    for s in ('single', 'mixed'):
        assert {k: v for k, v in theirs[s].items() if k != 'nvidia.com/mig.strategy'} == none


def test_GFD_09_gfd_on_the_simulator_labels_as_on_the_real_h200(gfd, tmp_path):  # noqa: F811
    for strategy in STRATEGIES:
        sim = run_gfd(gfd, tmp_path, INVENTORY, strategy)
        real = _labels(strategy)
        # the machine type is the node's (DMI product name: none in the VM, 'unknown'; the lab gives 'lab')
        assert (real.pop('nvidia.com/gpu.machine'), sim.pop('nvidia.com/gpu.machine')) == ('unknown', 'lab')
        # the mode is the PCI class GFD reads from sysfs (internal/resource/nvml-device.go GetPCIClass): the real
        # H200 is a 3D controller (0x0302, 'compute'); the simulator provides no sysfs device (a stand-in limit)
        assert (real.pop('nvidia.com/gpu.mode'), sim.pop('nvidia.com/gpu.mode')) == ('compute', 'unknown')
        assert sim == real, strategy


# ------------------------------------------------------------------------------------------------ device plugin
def test_DP_28_the_collection_renders_today_what_the_real_plugin_was_given(stack):  # noqa: F811
    facts = _facts()
    for variant in DP_VARIANTS:
        rec = _json('dp-%s.json' % variant)
        out = render(stack, rec['strategy'], rec['settings'], facts)
        config, env = node_config(out)
        assert (config, env, out['resources']) == (rec['config'], rec['env'], rec['collection_resources']), variant


def _expected_devices(rec):
    sharing = (rec['settings'].get('time_slicing') or {}).get('replicas')
    return [UUID] if not sharing else ['%s::%d' % (UUID, i) for i in range(sharing)]


def test_DP_28_the_real_plugin_registered_the_collections_resources():
    for variant in DP_VARIANTS:
        rec = _json('dp-%s.json' % variant)
        assert rec['registrar_rc'] == 0, rec['plugin_log_tail']
        assert [r['resource'] for r in rec['results']] == rec['collection_resources'], variant
        for r in rec['results']:
            assert 'error' not in r and 'allocate_error' not in r, r
            assert [d['id'] for d in r['devices']] == _expected_devices(rec), variant
            assert all(d['health'] == 'Healthy' for d in r['devices'])
            # Allocate of one device: the runtime gets the GPU by UUID, the replica suffix dropped
            assert r['allocate_env']['NVIDIA_VISIBLE_DEVICES'] == UUID


def test_DP_28_the_plugin_on_the_simulator_answers_as_on_the_real_h200(binaries, tmp_path):  # noqa: F811
    keys = ('resource', 'endpoint', 'version', 'devices', 'options', 'allocate_env')
    for variant in DP_VARIANTS:
        rec = _json('dp-%s.json' % variant)
        d = tmp_path / variant
        d.mkdir()
        rc, results, log = run_plugin(binaries, d, INVENTORY, rec['config'], rec['env'])
        assert rc == 0, log[-3000:]
        assert [{k: r.get(k) for k in keys} for r in results] == [{k: r.get(k) for k in keys}
                                                                  for r in rec['results']], variant


# -------------------------------------------------------------------------------------------------------- CDI
def _devices(spec):
    return {d['name']: [n['path'] for n in d['containerEdits']['deviceNodes']] for d in spec['devices']}


def test_NCT_27_cdi_generate_on_the_simulator_names_the_devices_of_the_real_h200(ctk, nvml_sim, tmp_path):  # noqa: F811
    with open(os.path.join(SAMPLES, 'nvidia-ctk-cdi-generate.yaml')) as f:
        real = yaml.safe_load(f)
    with open(os.path.join(SAMPLES, 'nvidia-ctk-version.txt')) as f:
        assert 'version 1.20.0' in f.read()
    with open(INVENTORY) as f:
        inv = json.load(f)
    root, minors = driver_root(tmp_path, inv)
    env = dict(os.environ, LD_LIBRARY_PATH=nvml_sim, NVML_SIM_INVENTORY=INVENTORY,
               NVML_SIM_STATE=str(tmp_path / 'state.json'))
    spec_path = tmp_path / 'nvidia.yaml'
    proc = run_generate(ctk, tmp_path, root, minors, env, spec_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim = yaml.safe_load(spec_path.read_text())
    assert sim['kind'] == real['kind'] == 'nvidia.com/gpu'
    assert _devices(sim) == _devices(real) == {'0': ['/dev/nvidia0'], UUID: ['/dev/nvidia0'], 'all': ['/dev/nvidia0']}
    # the node-wide device nodes: the lab's driver root has /dev/nvidiactl; the real host had the UVM nodes too
    sim_common = [n['path'] for n in sim['containerEdits']['deviceNodes']]
    real_common = [n['path'] for n in real['containerEdits']['deviceNodes']]
    assert '/dev/nvidiactl' in sim_common and set(sim_common) <= set(real_common), (sim_common, real_common)
    # the real GPU's fabric answer (state not supported, status success) is no finding
    answer = _json('gpu_doctor-exclusive.json')
    assert answer['probe']['gpus'][0]['health']['fabric'] == {'state': 'not_supported', 'status': 0,
                                                             'status_text': None}
    assert not [f for f in answer['findings'] if f['id'].startswith('fabric')]


@pytest.mark.parametrize('strategy', STRATEGIES)
def test_GFD_09_the_real_gfd_ran_on_the_real_driver(strategy):
    """The recording is what it says: GFD v0.19.1 on the 580.159.04 driver, one H200 (its log names both)."""
    labels = _labels(strategy)
    assert labels['nvidia.com/cuda.driver-version.full'] == '580.159.04' and labels['nvidia.com/gpu.count'] == '1'
    assert labels.get('nvidia.com/mig.strategy', 'none') == strategy
    with open(os.path.join(SAMPLES, 'nvidia-device-plugin-version.txt')) as f:
        assert 'v0.19.1' in f.read()
