"""gpu-feature-discovery as the oracle of the node labels the collection writes "the GFD way" (gpu_info's facts ->
gpu_catalog.node_labels -> role gpu_node_labels). GFD is NVIDIA/k8s-device-plugin v0.19.1 (cmd/gpu-feature-discovery),
the newest release the Go module proxy serves; the collection pins v0.20.0, whose label code differs from v0.19.1 only
in compute capability 13 -> family rubin (docs/conformance/gpu-feature-discovery.md says what the oracle vouches for).

For every NVML simulator inventory and each --mig-strategy (none, single, mixed), GFD runs once (--oneshot, an output
file, no timestamp, no NodeFeature API) and the collection's gpu_facts.gather runs through pynvml on the same
inventory; the rows GFD-01..07 say what must be equal and what differs on purpose.

Run: .venv/bin/pytest -q lab/tests/oracles/test_gfd_labels.py
"""
import json
import os
import subprocess
import sys

import pytest

from oracle_util import INVENTORIES, ROOT, _collections_path, build_nvml_sim, go_set, inventories, probe_facts, sim_env

# the labels gpu_catalog.node_labels writes; all but gpu.present are GFD's names (GFD-05)
OURS = ('nvidia.com/gpu.count', 'nvidia.com/gpu.product', 'nvidia.com/gpu.memory', 'nvidia.com/gpu.compute.major',
        'nvidia.com/gpu.compute.minor', 'nvidia.com/gpu.family', 'nvidia.com/mig.capable',
        'nvidia.com/cuda.driver.major', 'nvidia.com/cuda.driver.minor', 'nvidia.com/cuda.driver.rev',
        'nvidia.com/cuda.runtime.major', 'nvidia.com/cuda.runtime.minor')
PRODUCT = ('nvidia.com/gpu.count', 'nvidia.com/gpu.product', 'nvidia.com/gpu.memory', 'nvidia.com/gpu.compute.major',
           'nvidia.com/gpu.compute.minor', 'nvidia.com/gpu.family')
# what GFD's MIG labeler rewrites under --mig-strategy=single (internal/lm/mig-strategy.go)
SINGLE_REWRITES = ('nvidia.com/gpu.product', 'nvidia.com/gpu.count', 'nvidia.com/gpu.memory',
                   'nvidia.com/gpu.replicas', 'nvidia.com/gpu.sharing-strategy')

MIG_ATTRIBUTES = ['nvidia.com/gpu.' + a for a in ('engines.copy', 'engines.decoder', 'engines.encoder', 'engines.jpeg',
                                                  'engines.ofa', 'multiprocessors', 'slices.ci', 'slices.gi')]


@pytest.fixture(scope='module')
def gfd():
    path = os.path.join(go_set('nvidia-device-plugin'), 'gpu-feature-discovery')
    out = subprocess.run([path, '--version'], capture_output=True, text=True, check=True).stdout
    assert 'version v0.19.1' in out, out
    build_nvml_sim()
    return path


@pytest.fixture(scope='module')
def catalog():
    _collections_path()
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
    return gpu_catalog


def run_gfd(gfd, tmp_path, inventory, strategy):
    out = tmp_path / ('gfd-%s' % strategy)
    machine = tmp_path / 'product_name'
    machine.write_text('lab\n')
    proc = subprocess.run([gfd, '--oneshot', '--no-timestamp', '--use-node-feature-api=false',
                           '--output-file=%s' % out, '--machine-type-file=%s' % machine, '--mig-strategy=%s' % strategy],
                          env=sim_env(inventory, tmp_path / ('state-%s.json' % strategy)), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split('=', 1) for line in out.read_text().splitlines() if line)


def ours_and_gfd(gfd, tmp_path, inventory):
    facts = probe_facts(inventory, tmp_path / 'state-ours.json')
    assert facts['nvml']['status'] == 'ok', facts['nvml']
    return facts, {s: run_gfd(gfd, tmp_path, inventory, s) for s in ('none', 'single', 'mixed')}


def check(catalog, facts, theirs):
    ours = facts['labels']
    gpus = [g for g in facts['gpus'] if not g.get('error')]
    # GFD-05: nvidia.com/gpu.present is the GPU operator's label (from NFD's PCI labels), never GFD's
    assert ours['nvidia.com/gpu.present'] == 'true'
    assert all('nvidia.com/gpu.present' not in t for t in theirs.values())
    none = theirs['none']
    names = {g['name'] for g in gpus}
    if len(names) == 1:
        # GFD-01..04: every other label we write is GFD's, name and value
        assert {k: ours.get(k) for k in OURS} == {k: none.get(k) for k in OURS}
    else:
        # GFD-03: on a node with several products GFD labels one of them (Go map order: any run may pick another,
        # "Multiple device types detected"); ours are the first GPU's product. Both pair a product with its own
        # count, memory and compute capability; the node-wide labels are equal.
        per_product = [catalog.node_labels([g for g in gpus if g['name'] == n], facts['nvml']['driver_version'],
                                           facts['nvml']['cuda_driver_version']) for n in sorted(names)]
        for t in theirs.values():
            assert {k: t.get(k) for k in PRODUCT} in [{k: p.get(k) for k in PRODUCT} for p in per_product]
        assert {k: ours.get(k) for k in PRODUCT} == {k: catalog.node_labels(
            [g for g in gpus if g['name'] == gpus[0]['name']])[k] for k in PRODUCT}
        assert {k: ours.get(k) for k in OURS if k not in PRODUCT} == {k: none.get(k) for k in OURS if k not in PRODUCT}
    # GFD-06: ours are GFD's --mig-strategy=none view. single and mixed add mig.strategy and per-MIG-device labels
    # (mixed: nvidia.com/mig-<profile>.*; single: the MIG devices replace the whole-GPU product, count and memory,
    # or "-MIG-INVALID" with count 0 where a MIG-enabled GPU has no MIG device or devices differ)
    assert 'nvidia.com/mig.strategy' not in none and not any(k.startswith('nvidia.com/mig-') for k in ours)
    mig_enabled = [g for g in gpus if g.get('mig_current')]
    # which product GFD labels on a node with several is its own random pick (above), run by run
    varies = PRODUCT if len(names) > 1 else ()
    none = {k: v for k, v in none.items() if k not in varies}
    for strategy in ('single', 'mixed'):
        t = {k: v for k, v in theirs[strategy].items() if k not in varies}
        assert t.pop('nvidia.com/mig.strategy') == strategy
        migs = sorted(k for k in t if k.startswith('nvidia.com/mig-'))
        if strategy == 'mixed':
            assert bool(migs) == any(g.get('mig_devices') for g in mig_enabled)
        else:
            assert not migs
        for k in migs:
            t.pop(k)
        if strategy == 'single' and mig_enabled:
            rewritten = {k: t.pop(k) for k in SINGLE_REWRITES}
            if any(not g.get('mig_devices') for g in mig_enabled) or len(mig_enabled) < len(gpus):
                assert rewritten['nvidia.com/gpu.product'].endswith('-MIG-INVALID')
                assert rewritten['nvidia.com/gpu.count'] == '0' and rewritten['nvidia.com/gpu.memory'] == '0'
            else:
                # a valid single: the MIG devices' attributes under nvidia.com/gpu (engines, multiprocessors, slices)
                attrs = sorted(k for k in t if k not in none)
                assert attrs == sorted(MIG_ATTRIBUTES), attrs
                for k in attrs:
                    t.pop(k)
            none_rest = {k: v for k, v in none.items() if k not in SINGLE_REWRITES}
            assert t == none_rest
        else:
            assert t == none
    return ours, theirs['none']


@pytest.mark.parametrize('inventory', inventories())
def test_GFD_03_GFD_05_GFD_06_gfd_labels_of_every_inventory_and_mig_strategy(gfd, catalog, tmp_path, inventory):
    facts, theirs = ours_and_gfd(gfd, tmp_path, os.path.join(INVENTORIES, inventory))
    check(catalog, facts, theirs)


def _variant(tmp_path, base, **gpu):
    with open(os.path.join(INVENTORIES, base)) as f:
        inv = json.load(f)
    inv['gpus'] = [dict(inv['gpus'][0], **gpu)]
    path = tmp_path / 'inventory.json'
    path.write_text(json.dumps(inv))
    return path


@pytest.mark.parametrize('gpu,family,product', [
    # an Ada GPU: NVML's architecture enum says ada, GFD's family (from the compute capability) ada-lovelace
    ({'name': 'NVIDIA L4', 'compute_capability': '8.9', 'architecture': 'ada'}, 'ada-lovelace', 'NVIDIA-L4'),
    # GFD drops characters a label value cannot hold, then joins the words with '-'
    ({'name': 'NVIDIA  RTX/A6000 (x)', 'compute_capability': '8.6', 'architecture': 'ampere'}, 'ampere',
     'NVIDIA-RTXA6000-x'),
    # a GPU older than any family the collection knows of by NVML enum
    ({'name': 'Tesla K80', 'compute_capability': '3.7', 'architecture': 'kepler', 'mig_capable': False}, 'kepler',
     'Tesla-K80'),
], ids=['ada', 'odd-name', 'kepler'])
def test_GFD_01_family_and_GFD_04_product_of_gpus_the_inventories_lack(gfd, catalog, tmp_path, gpu, family, product):
    facts, theirs = ours_and_gfd(gfd, tmp_path, _variant(tmp_path, 't4.json', **gpu))
    ours, none = check(catalog, facts, theirs)
    assert ours['nvidia.com/gpu.family'] == none['nvidia.com/gpu.family'] == family
    assert ours['nvidia.com/gpu.product'] == none['nvidia.com/gpu.product'] == product


def test_GFD_02_mig_capable_when_a_later_gpu_is(gfd, catalog, tmp_path):
    """mixed.json: a T4 first, the MIG-capable A100 later; GFD says mig.capable=true when any GPU is capable."""
    facts, theirs = ours_and_gfd(gfd, tmp_path, os.path.join(INVENTORIES, 'mixed.json'))
    assert facts['labels']['nvidia.com/mig.capable'] == theirs['none']['nvidia.com/mig.capable'] == 'true'
    assert facts['labels']['nvidia.com/gpu.product'] == 'Tesla-T4' and facts['labels']['nvidia.com/gpu.count'] == '1'


# the lab's kwok GPU nodes (lab/kube/real.py GPU_NODES) -> the simulator inventory of the same GPU
KWOK_INVENTORY = {'kwok-t4-1': 't4.json', 'kwok-t4-2': 't4.json', 'kwok-a100-1': 'hgx-a100-80gb.json',
                  'kwok-h100-1': 'h100-real-580.json'}


def test_GFD_07_kwok_gpu_nodes_carry_gfd_labels(gfd, tmp_path):
    """The labels the real-cluster lab gives its kwok GPU nodes (all those GFD wrote on a real lab node, recorded) are
    every label GFD writes (--no-timestamp) for the same GPU. The H100 node has 8 GPUs, the real H100's inventory one:
    its count is not compared."""
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
    try:
        import real
    finally:
        sys.path.pop(0)
    assert sorted(real.GPU_NODES) == sorted(KWOK_INVENTORY)
    for name, spec in sorted(real.GPU_NODES.items()):
        inv = os.path.join(INVENTORIES, KWOK_INVENTORY[name])
        with open(inv) as f:
            gpus = len(json.load(f)['gpus'])
        labels = real.gpu_node(name, *spec)['metadata']['labels']
        theirs = run_gfd(gfd, tmp_path, inv, 'none')
        keys = [k for k in labels if k.startswith('nvidia.com/') and k != 'nvidia.com/gpu.present']
        if gpus != spec[0]:
            keys.remove('nvidia.com/gpu.count')
        assert {k: labels[k] for k in keys} == {k: theirs.get(k) for k in keys}, name
        # all of GFD's: none missing
        assert sorted(set(theirs) - set(keys) - {'nvidia.com/gpu.count'}) == [], name


def test_GFD_08_collection_labels_are_those_gfd_wrote_on_a_real_node(tmp_path):
    """For every shape recorded from a real lab node (lab/node/recordings/gpu-nodes.json: GFD v0.19.1 in a pod of the
    node, on the simulator), the labels the collection writes (gpu_info's facts on the same GPUs) have the values GFD
    wrote there; gpu.present is not GFD's (GFD-05), and under --mig-strategy=single GFD's count, product and memory
    are the MIG devices' while ours stay the whole GPUs' (GFD-06). A MIG shape also shows what GFD adds that the
    collection does not write (its mig.strategy, the mixed strategy's per-profile labels); a shared pool's shape (time-
    slicing, mps: GFD with the pool's config) what GFD renames (the -SHARED product) and adds (strategy, replicas)."""
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
    try:
        import real
    finally:
        sys.path.pop(0)
    shapes = real.load_recording()['shapes']
    assert {k for k, v in shapes.items() if v.get('mig_strategy')} == set(real.RECORDED_MIG)
    assert {k for k, v in shapes.items() if v.get('sharing_strategy')} == set(real.RECORDED_SHARING)
    for shape, rec in sorted(shapes.items()):
        inv = tmp_path / ('%s.json' % shape)
        inv.write_text(json.dumps(real.recorded_inventory(shape)))
        ours = dict(probe_facts(str(inv), tmp_path / ('%s-state.json' % shape))['labels'])
        assert ours.pop('nvidia.com/gpu.present') == 'true'
        differ = {k: (v, rec['labels'].get(k)) for k, v in ours.items() if rec['labels'].get(k) != v}
        if rec.get('sharing_strategy'):
            # a shared pool (real.RECORDED_SHARING): GFD with the pool's config renames the product (-SHARED) and
            # says the strategy and replicas; the collection's labels stay the GPUs'
            assert sorted(differ) == ['nvidia.com/gpu.product'], (shape, differ)
            assert rec['labels']['nvidia.com/gpu.product'] == ours['nvidia.com/gpu.product'] + '-SHARED', shape
            assert (rec['labels']['nvidia.com/gpu.sharing-strategy'], rec['labels']['nvidia.com/gpu.replicas']) == (
                rec['sharing_strategy'], str(rec['replicas'])), shape
            assert (rec['sharing_strategy'], rec['replicas']) == real.RECORDED_SHARING[shape], shape
        elif rec.get('mig_strategy') == 'single':
            assert sorted(differ) == ['nvidia.com/gpu.count', 'nvidia.com/gpu.memory', 'nvidia.com/gpu.product'], (
                shape, differ)
            assert rec['labels']['nvidia.com/gpu.product'].startswith(ours['nvidia.com/gpu.product'] + '-MIG-')
        else:
            assert differ == {}, shape
        if rec.get('mig_strategy'):
            assert rec['labels']['nvidia.com/mig.strategy'] == rec['mig_strategy']
            assert 'nvidia.com/mig.strategy' not in ours


def test_GFD_06_single_strategy_on_a_uniform_mig_node(gfd, catalog, tmp_path):
    """Two A100s split into seven 1g.10gb each: under --mig-strategy=single GFD labels the MIG devices as the node's
    nvidia.com/gpu (product <GPU>-MIG-1g.10gb, count 14); ours stay the whole GPUs' (GFD-06)."""
    with open(os.path.join(INVENTORIES, 'hgx-a100-80gb.json')) as f:
        inv = json.load(f)
    inv['gpus'] = [dict(g, mig_mode=True, mig_instances=[{'profile': '1g.10gb'}] * 7) for g in inv['gpus'][:2]]
    path = tmp_path / 'inventory.json'
    path.write_text(json.dumps(inv))
    facts, theirs = ours_and_gfd(gfd, tmp_path, path)
    ours, _ = check(catalog, facts, theirs)
    single = theirs['single']
    assert single['nvidia.com/gpu.product'] == 'NVIDIA-A100-SXM4-80GB-MIG-1g.10gb'
    assert single['nvidia.com/gpu.count'] == '14'
    assert ours['nvidia.com/gpu.product'] == 'NVIDIA-A100-SXM4-80GB' and ours['nvidia.com/gpu.count'] == '2'
    assert theirs['mixed']['nvidia.com/mig-1g.10gb.count'] == '14'
