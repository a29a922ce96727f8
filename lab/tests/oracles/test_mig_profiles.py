"""go-nvlib as a partial oracle for MIG profile names (github.com/NVIDIA/go-nvlib v0.13.0 pkg/nvlib/device, the library
mig-parted and the device plugin name profiles with; mig-parted itself is not served by the Go module proxy). The lab's
program lab/go/migprofile (our main.go over go-nvlib, built by lab/go/build.sh migprofile) gives go-nvlib's canonical
name for an NVML GPU-instance profile (NewMigProfile(...).String(): slices, attributes +me/+me.all/-me/+gfx from the
profile, memory rounded as go-nvlib does) and checks the name format (AssertValidMigProfileFormat).

For every row of the collection's MIG catalogue (plugins/module_utils/_common/gpu_catalog.py MIG_PRODUCTS) the
profile's NVML GPU-instance profile and its share of the memory slices must give the catalogue's name.

Run: .venv/bin/pytest -q lab/tests/oracles/test_mig_profiles.py
"""
import json
import os
import subprocess

from conftest import lab_collections_path
from oracle_util import ROOT, go_set

import pytest

GIB = 1 << 30


@pytest.fixture(scope='module')
def catalogue():
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
    return gpu_catalog


def oracle(requests):
    prog = os.path.join(go_set('migprofile'), 'migprofile')
    proc = subprocess.run([prog], input=''.join(json.dumps(r) + '\n' for r in requests), capture_output=True,
                          text=True, timeout=60, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_MIGP_19_catalogue_names_are_go_nvlib_names(catalogue):
    requests, rows = [], []
    for product, _ids, _rules, table in catalogue.MIG_PRODUCTS:
        full = max(table, key=lambda r: r['slices'])
        memory_slices = 8 if full['placement_size'] == 8 else 4  # the 7-slice GPUs have 8 memory slices
        total_gb = full['memory_gib']
        for row in table:
            # NVML's profile memory is a little under its share of the slices (e.g. 9856 MiB of 81920 for 1g.10gb);
            # go-nvlib rounds the share up to eighths of the device memory, then to whole GB
            share = row['placement_size'] / float(memory_slices)
            requests.append({'gi': row['nvml_profile_index'], 'ci_slices': row['slices'],
                             'mem_mb': int(share * total_gb * 1024 * 0.97), 'total_bytes': total_gb * GIB})
            rows.append((product, row['name']))
            requests.append({'parse': row['name']})
            rows.append((product, row['name']))
    answers = oracle(requests)
    assert len(answers) == len(requests)
    wrong = []
    for (product, name), req, ans in zip(rows, requests, answers):
        if 'gi' in req and ans.get('name') != name:
            wrong.append('%s %s: go-nvlib names it %s' % (product, name, ans.get('name') or ans.get('error')))
        if 'parse' in req and not ans.get('valid'):
            wrong.append('%s %s: go-nvlib refuses the name: %s' % (product, name, ans.get('error')))
    assert not wrong, '\n'.join(wrong)
    assert len(rows) == 2 * sum(len(t) for _p, _i, _r, t in catalogue.MIG_PRODUCTS) > 100


def test_MIGP_20_malformed_names_are_refused():
    """The oracle is not a yes-machine: malformed names go-nvlib refuses."""
    answers = oracle([{'parse': n} for n in ('1g', '1g.10', '1g.10gb+me-gfx', '', 'g.10gb')])
    assert [a['valid'] for a in answers] == [False] * 5, answers


@pytest.mark.parametrize('capture', ['h100-580', 'h200-580'])
def test_MIGP_21_go_nvlib_names_the_real_gpus_profiles_as_nvml(capture):
    """go-nvlib given what a real GPU answered (lab/realgpu/samples/<capture>/nvml-raw.json: each GPU-instance profile's
    index, slices and memory MiB, the device's memory) names every profile as NVML did (H200: 1g.18gb from 16384 MiB
    of 143771 MiB, 7g.141gb from 143360): mig-parted and the device plugin name the real GPU's profiles as the
    collection reads them from NVML."""
    with open(os.path.join(ROOT, 'lab', 'realgpu', 'samples', capture, 'nvml-raw.json')) as f:
        raw = json.load(f)['gpus'][0]
    rows = [(p['index'], p['nvmlDeviceGetGpuInstanceProfileInfoV']) for p in raw['gi_profiles']
            if isinstance(p['nvmlDeviceGetGpuInstanceProfileInfoV'], dict)
            and 'error' not in p['nvmlDeviceGetGpuInstanceProfileInfoV']]
    assert len(rows) == 7
    answers = oracle([{'gi': index, 'ci_slices': info['sliceCount'], 'mem_mb': info['memorySizeMB'],
                       'total_bytes': raw['mem_v2']['total']} for index, info in rows])
    assert [a.get('name') for a in answers] == [info['name'][len('MIG '):] for _i, info in rows]

