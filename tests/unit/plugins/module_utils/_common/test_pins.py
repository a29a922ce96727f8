# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pins: one place for every image, chart and package pin. The renderers import it; the literals that must stay
literal (argument_specs defaults, role defaults, playbooks) and the rendered manifests are compared with it."""
import glob
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import pins
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpu_manager
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpushare
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import hami
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import nvidia
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import operator
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import volcano
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import runtime_toolkit_repo as toolkit

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))
T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}], 'sharing': {}}
A100 = {'gpus': [{'index': 0, 'name': 'NVIDIA A100-SXM4-40GB', 'memory_total_mib': 40960, 'mig_capable': True}],
        'sharing': {}}


def test_every_pin_is_complete():
    for name, p in pins.PINS.items():
        assert p['kind'] in ('image', 'chart', 'package', 'release'), name
        assert p['repository'] and p['tag'] and p['upstream'] and p['upstream_ref'], name
        if p['conformance']:
            assert os.path.isfile(os.path.join(ROOT, p['conformance'])), (name, p['conformance'])
    # an image's reference is its repository and tag, a chart's its tag (compared with the home, not a literal)
    assert pins.ref('hami') == pins.pin('hami')['repository'] + ':' + pins.tag('hami')
    assert pins.ref('hami').startswith('docker.io/projecthami/hami:v')
    assert pins.ref('gpu-operator') == pins.tag('gpu-operator') and pins.tag('gpu-operator').startswith('v')
    with pytest.raises(KeyError, match='pins: '):
        pins.pin('nope')


@pytest.mark.parametrize('name,value', [
    ('nvidia-device-plugin', nvidia.DEVICE_PLUGIN_IMAGE),
    ('mig-manager', nvidia.MIG_MANAGER_IMAGE),
    ('hami', hami.HAMI_IMAGE),
    ('volcano-device-plugin', volcano.DEVICE_PLUGIN_IMAGE),
    ('volcano-vgpu-device-plugin', volcano.VGPU_DEVICE_PLUGIN_IMAGE),
    ('volcano', volcano.VOLCANO_SCHEMA['version']['default']),
    ('gpushare-extender', gpushare.EXTENDER_IMAGE),
    ('gpushare-device-plugin', gpushare.PLUGIN_IMAGE),
    ('gpu-manager', gpu_manager.IMAGE),
    ('cuda-sample', r.VALIDATION_IMAGE),
    ('gpu-operator', operator.CURRENT_CHART),
    ('nvidia-container-toolkit', toolkit.DEFAULT_VERSION),
    ('dra-driver-nvidia-gpu', dra.CURRENT_CHART),
    ('dra-driver-nvidia-gpu-image', dra.IMAGE),
    ('dcgm-exporter', exporter.IMAGE),
])
def test_the_renderers_use_the_pin(name, value):
    assert value == pins.ref(name)


def _images(out):
    found = set()
    for m in out['manifests']:
        spec = (m.get('spec') or {}).get('template', {}).get('spec') or {}
        for c in (spec.get('containers') or []) + (spec.get('initContainers') or []):
            found.add(c['image'])
    return found


def test_the_render_matches_the_pin():
    out = r.render(dict(strategy='time-slicing', pool='p', nodes=['n1'], facts={'n1': T4}, registry='', settings={}))
    assert pins.ref('nvidia-device-plugin') in _images(out)
    out = r.render(dict(strategy='hami', pool='p', nodes=['n1'], facts={'n1': T4}, registry='',
                        settings={'hami': {'kube_version': 'v1.33.2'}}))
    assert pins.ref('hami') in _images(out)
    out = r.render(dict(strategy='volcano', pool='p', nodes=['n1'], facts={'n1': T4}, registry='', settings={}))
    assert pins.ref('volcano-vgpu-device-plugin') in _images(out)


# option names (role argument_specs) whose default is a pin that is not an image reference
NON_IMAGE_DEFAULTS = {
    ('gpu_sharing_stack', 'gpu_sharing_stack_volcano', 'version'): 'volcano',
    ('nvidia_container_runtime', 'nvidia_container_runtime_version'): 'nvidia-container-toolkit',
}
IMAGE_PINS = dict((p['repository'], name) for name, p in pins.PINS.items() if p['kind'] == 'image')


def _walk(options, path):
    for key, spec in (options or {}).items():
        yield path + (key,), spec
        if isinstance(spec, dict) and spec.get('options'):
            yield from _walk(spec['options'], path + (key,))


def test_argument_specs_defaults_equal_the_pins():
    seen = {}
    for path in sorted(glob.glob(os.path.join(ROOT, 'roles', '*', 'meta', 'argument_specs.yml'))):
        role = path.split(os.sep)[-3]
        with open(path) as f:
            doc = yaml.safe_load(f)
        for ep in (doc.get('argument_specs') or {}).values():
            for opt, spec in _walk(ep.get('options'), (role,)):
                default = spec.get('default') if isinstance(spec, dict) else None
                if not isinstance(default, str):
                    continue
                name = NON_IMAGE_DEFAULTS.get(opt) or IMAGE_PINS.get(default.rsplit(':', 1)[0])
                if name:
                    assert default == pins.ref(name), (opt, default, pins.ref(name))
                    seen[name] = opt
    # the defaults the roles expose are all found (the test cannot pass on nothing)
    for name in ('nvidia-device-plugin', 'mig-manager', 'hami', 'cuda-sample', 'volcano', 'nvidia-container-toolkit'):
        assert name in seen, name


def test_role_defaults_and_playbooks_equal_the_pins():
    """Every pinned repository named with a tag in roles/ and playbooks/ YAML carries the pinned tag."""
    found = []
    files = glob.glob(os.path.join(ROOT, 'roles', '**', '*.yml'), recursive=True) + \
        glob.glob(os.path.join(ROOT, 'playbooks', '**', '*.yml'), recursive=True)
    for path in sorted(files):
        with open(path) as f:
            text = f.read()
        for repo, name in IMAGE_PINS.items():
            for m in re.finditer(re.escape(repo) + r':([A-Za-z0-9._-]+)', text):
                found.append((os.path.relpath(path, ROOT), name, m.group(1)))
        if os.path.basename(path) == 'main.yml' and 'defaults' in path.split(os.sep):
            doc = yaml.safe_load(text) or {}
            for (role, var), name in ((k, v) for k, v in NON_IMAGE_DEFAULTS.items() if len(k) == 2):
                if var in doc:
                    found.append((os.path.relpath(path, ROOT), name, doc[var]))
    wrong = [f for f in found if f[2] != pins.tag(f[1])]
    assert not wrong, wrong
    where = set((p, n) for p, n, _t in found)
    assert ('playbooks/cluster.yml', 'cuda-sample') in where
    assert ('roles/gpu_sharing_stack/defaults/main.yml', 'cuda-sample') in where
    assert ('roles/nvidia_container_runtime/defaults/main.yml', 'nvidia-container-toolkit') in where


def test_conformance_rows_cite_the_upstream_ref():
    """The facts of a pin were read at its upstream_ref: its conformance table has a row citing the repository at that
    ref (a commit may be cited by its first 7 characters or more). After a bump (lab/bin/bump-pin.py --write moves
    upstream_ref with the tag) this fails until the rows are read again at the new release."""
    missing = []
    for name, p in sorted(pins.PINS.items()):
        if not p['conformance']:
            continue
        with open(os.path.join(ROOT, p['conformance']), encoding='utf-8') as f:
            rows = [line for line in f.read().splitlines() if line.startswith('|')]
        upstream = p['upstream'].split(' ')[0]
        refs = set()
        for row in rows:
            for m in re.finditer(r'%s,[^|;]*' % re.escape(upstream), row):
                refs.update(re.findall(r'[\w.-]+', m.group(0).rsplit(',', 1)[-1]))
        ok = p['upstream_ref'] in refs or any(len(r) >= 7 and p['upstream_ref'].startswith(r) for r in refs)
        if not ok:
            missing.append('%s: no row of %s cites %s at %s' % (name, p['conformance'], upstream, p['upstream_ref']))
    assert not missing, missing
