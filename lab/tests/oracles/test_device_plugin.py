"""nvidia-device-plugin as the oracle of the device plugin configurations the collection renders
(plugins/module_utils/_cluster/stacks/nvidia.py) and of the resources it says they give. The plugin is
NVIDIA/k8s-device-plugin v0.19.1 (the newest release the Go module proxy serves; the pin is v0.20.0, see
docs/conformance/nvidia-device-plugin.md for what differs), built by lab/go/build.sh nvidia-device-plugin.

For each strategy and variant the collection's stack is rendered with gpu_info's facts probed from the NVML simulator
(pynvml), the config the node's label selects is taken from the rendered ConfigMap and the plugin container's
environment from the rendered DaemonSet, and the plugin runs on the simulator in a private mount namespace: /var/lib
is a tmpfs (the plugin's sockets live at the fixed /var/lib/kubelet/device-plugins) and /proc carries the
driver/nvidia-caps/mig-minors the kernel module would write. lab/go/kubelet-registrar (our code over k8s.io/kubelet's
v1beta1 API) stands in for the kubelet: it serves Registration, calls ListAndWatch on every plugin that registers and
Allocate for one device, and prints what it got. Configs the plugin refuses at start must be refused by the
collection first (DP-22..24).

Run: .venv/bin/pytest -q lab/tests/oracles/test_device_plugin.py
"""
import json
import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'realgpu'))
from device_plugin_record import node_config as _node_config  # noqa: E402  (lab/realgpu, also run on a real GPU)
from oracle_util import (INVENTORIES, PRIVATE_PROC, ROOT, _collections_path, build_nvml_sim, go_set, mig_minors_lines,
                         probe_facts, sim_env)

NODE = 'n1'
SCRIPT = PRIVATE_PROC + (
    'mount -t tmpfs gpuops-lab-kubelet /var/lib; mkdir -p /var/lib/kubelet/device-plugins; '
    '"$REGISTRAR" -socket /var/lib/kubelet/device-plugins/kubelet.sock -allocate "$ALLOCATE" -settle 300ms -timeout "$WAIT" '
    '> "$OUT" & reg=$!; '
    # the plugin restarts when kubelet.sock is made after its watch starts: start it once the socket is there
    'n=0; while [ ! -S /var/lib/kubelet/device-plugins/kubelet.sock ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done; '
    '"$@" > "$LOG" 2>&1 & pl=$!; '
    'rc=0; wait $reg || rc=$?; kill $pl 2>/dev/null || true; wait $pl 2>/dev/null || true; exit $rc')
# the MPS control daemon's command, as the plugin's health check uses it (it sends get_default_active_thread_percentage
# on stdin and needs exit status 0): a stand-in, the real daemon needs CUDA and a GPU
MPS_CONTROL_STANDIN = '#!/bin/sh\ncat >/dev/null\necho 100.0\n'


@pytest.fixture(scope='module')
def binaries():
    plugin = os.path.join(go_set('nvidia-device-plugin'), 'nvidia-device-plugin')
    registrar = os.path.join(go_set('kubelet-registrar'), 'kubelet-registrar')
    out = subprocess.run([plugin, '--version'], capture_output=True, text=True, check=True).stdout
    assert 'v0.19.1' in out, out
    build_nvml_sim()
    return plugin, registrar


@pytest.fixture(scope='module')
def stack():
    _collections_path()
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError
    return stacks_render, StackError


_FACTS = {}


def facts_of(inventory, tmp_path):
    """gpu_info's facts on the simulator with this inventory, probed once per inventory content in this module."""
    with open(inventory) as f:
        key = f.read()
    if key not in _FACTS:
        _FACTS[key] = probe_facts(inventory, tmp_path / 'state-probe.json')
    return _FACTS[key]


def render(stack, strategy, settings, facts):
    return stack[0].render(dict(strategy=strategy, pool='p1', nodes=[NODE], facts={NODE: facts}, settings=settings))


def node_config(out):
    """(config text, plugin environment) the node gets: the ConfigMap entry its label names, the container's env."""
    return _node_config(out, NODE)


def run_plugin(binaries, tmp_path, inventory, config_text, env=None, mps_control=False, wait='60s', allocate=1):
    """Run the plugin with this config under the stand-in kubelet; (registrar's exit status, results, plugin log)."""
    plugin, registrar = binaries
    with open(inventory) as f:
        inv = json.load(f)
    cfg, minors, out, log = (tmp_path / n for n in ('config.yaml', 'mig-minors', 'registrar.json', 'plugin.log'))
    cfg.write_text(config_text)
    minors.write_text('\n'.join(mig_minors_lines(inv)) + '\n')
    (tmp_path / 'realproc').mkdir(exist_ok=True)
    e = sim_env(inventory, tmp_path / 'state.json')
    e.update(env or {})
    e.update(REGISTRAR=registrar, OUT=str(out), LOG=str(log), WAIT=wait, REALPROC=str(tmp_path / 'realproc'),
             MINORS=str(minors), CONFIG_FILE=str(cfg), ALLOCATE=str(allocate))
    e.pop('NVIDIA_VISIBLE_DEVICES', None)
    if mps_control:
        bindir = tmp_path / 'bin'
        bindir.mkdir()
        (bindir / 'nvidia-cuda-mps-control').write_text(MPS_CONTROL_STANDIN)
        (bindir / 'nvidia-cuda-mps-control').chmod(0o755)
        e['PATH'] = '%s:%s' % (bindir, e['PATH'])
    # a session of its own: on a hang the plugin and the registrar go with the shell
    proc = subprocess.Popen(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', SCRIPT, 'sh', plugin],
                            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail('the plugin under the stand-in kubelet ran over 120 s: %s'
                    % (log.read_text()[-3000:] if log.exists() else ''))
    results = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc.returncode, results, log.read_text() if log.exists() else err


def _variant(tmp_path, base, count, **gpu):
    with open(os.path.join(INVENTORIES, base)) as f:
        inv = json.load(f)
    inv['gpus'] = [dict(g, **gpu) for g in inv['gpus'][:count]]
    path = tmp_path / 'inventory.json'
    path.write_text(json.dumps(inv))
    return str(path)


def _inventory(tmp_path, spec):
    if isinstance(spec, str):
        return os.path.join(INVENTORIES, spec)
    return _variant(tmp_path, *spec[:2], **spec[2])


MIG_1G = [{'profile': '1g.10gb'}] * 7
MIG_MIXED = [{'profile': '3g.40gb', 'placement': 0}, {'profile': '1g.10gb', 'placement': 4},
             {'profile': '1g.10gb', 'placement': 5}]
TS2 = {'version': 'v1', 'flags': {'migStrategy': 'none'},
       'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 2}]}}}
# id: (inventory or (base, GPUs, GPU overrides), strategy, settings, {resource: devices per GPU}, MPS stand-in
#      [, devices to allocate, the Allocate error expected])
VARIANTS = {
    'exclusive-t4': ('t4.json', 'exclusive', {}, {'nvidia.com/gpu': 1}, False),
    'exclusive-hgx-a100': ('hgx-a100-80gb.json', 'exclusive', {}, {'nvidia.com/gpu': 1}, False),
    'time-slicing-3': ('hgx-a100-80gb.json', 'time-slicing', {'time_slicing': {'replicas': 3}},
                       {'nvidia.com/gpu': 3}, False),
    # the default fail_requests_greater_than_one: a request for two replicas is refused at Allocate; without it, not
    'time-slicing-2-of-3': ('t4.json', 'time-slicing', {'time_slicing': {'replicas': 3}}, {'nvidia.com/gpu': 3},
                            False, 2, 'maximum request size for shared resources is 1; found 2'),
    'time-slicing-2-of-3-allowed': ('t4.json', 'time-slicing', {'time_slicing': {
        'replicas': 3, 'fail_requests_greater_than_one': False}}, {'nvidia.com/gpu': 3}, False, 2, None),
    'time-slicing-rename': ('t4.json', 'time-slicing', {'time_slicing': {'replicas': 4, 'rename_by_default': True}},
                            {'nvidia.com/gpu.shared': 4}, False),
    'mps-4': ('t4.json', 'mps', {'mps': {'replicas': 4}}, {'nvidia.com/gpu': 4}, True),
    'mps-rename': ('h100-real-580.json', 'mps', {'mps': {'replicas': 2, 'rename_by_default': True}},
                   {'nvidia.com/gpu.shared': 2}, True),
    'mig-single': (('hgx-a100-80gb.json', 2, {'mig_mode': True, 'mig_instances': MIG_1G}), 'mig',
                   {'mig': {'strategy': 'single', 'devices': {'1g.10gb': 7}}}, {'nvidia.com/gpu': 7}, False),
    'mig-mixed': (('h100-mig.json', 2, {'mig_mode': True, 'mig_instances': MIG_MIXED}), 'mig',
                  {'mig': {'strategy': 'mixed', 'devices': {'3g.40gb': 1, '1g.10gb': 2}}},
                  {'nvidia.com/mig-1g.10gb': 2, 'nvidia.com/mig-3g.40gb': 1}, False),
    'named-config': ('hgx-a100-80gb.json', 'exclusive',
                     {'nvidia': {'extra_configs': {'ts-2': TS2}, 'node_configs': {NODE: 'ts-2'}}},
                     {'nvidia.com/gpu': 2}, False),
    'unknown-keys': ('t4.json', 'exclusive', {'nvidia': {'extra_configs': {'ts-2': dict(TS2, bogus=1)},
                                                         'node_configs': {NODE: 'ts-2'}}},
                     {'nvidia.com/gpu': 2}, False),
}


@pytest.mark.parametrize('name', sorted(VARIANTS))
def test_DP_25_plugin_registers_the_resources_the_collection_names(binaries, stack, tmp_path, name):
    inv_spec, strategy, settings, per_gpu, mps, allocate, refusal = (VARIANTS[name] + (1, None))[:7]
    inventory = _inventory(tmp_path, inv_spec)
    facts = facts_of(inventory, tmp_path)
    gpus = len(facts['gpus'])
    out = render(stack, strategy, settings, facts)
    config, env = node_config(out)
    rc, results, log = run_plugin(binaries, tmp_path, inventory, config, env, mps_control=mps, allocate=allocate)
    assert rc == 0, log[-4000:]
    got = {r['resource']: r for r in results}
    # the collection's resource names (what the validation pod and the pool's accounting ask for) are registered
    assert sorted(got) == sorted(out['resources'])
    assert {k: len(r['devices']) for k, r in got.items()} == {k: n * gpus for k, n in per_gpu.items()}
    uuids = {g['uuid'] for g in facts['gpus']} | {m['uuid'] for g in facts['gpus'] for m in g.get('mig_devices') or []}
    for r in results:
        assert 'error' not in r and r['version'] == 'v1beta1', (r.get('error'), r)
        assert all(d['health'] == 'Healthy' for d in r['devices'])
        assert r['options']['get_preferred_allocation_available'] is True
        if refusal:
            assert refusal in r.get('allocate_error', ''), r
            continue
        assert 'allocate_error' not in r, r
        # the runtime gets the GPU (or MIG device) by UUID, the replica suffix dropped
        assert set(r['allocate_env']['NVIDIA_VISIBLE_DEVICES'].split(',')) <= uuids, r
        if mps:
            # the daemon's pipe directory under the plugin container's MPS mount (/mps, the collection's DP-05 mount)
            assert r['allocate_env']['CUDA_MPS_PIPE_DIRECTORY'] == '/mps/%s/pipe' % r['resource'], r


def test_DP_25_mps_without_its_control_daemon(binaries, stack, tmp_path):
    """What the plugin says when the MPS control daemon does not answer (here: its command is missing): it registers
    nothing for the resource and keeps running."""
    inventory = os.path.join(INVENTORIES, 't4.json')
    facts = facts_of(inventory, tmp_path)
    config, env = node_config(render(stack, 'mps', {'mps': {'replicas': 4}}, facts))
    env['PATH'] = '/usr/bin:/bin'
    rc, results, log = run_plugin(binaries, tmp_path, inventory, config, env, wait='2s')
    assert rc == 3 and results == []
    assert ('Failed to start plugin: error waiting for MPS daemon: error checking MPS daemon health: failed to start '
            'NVIDIA MPS command: exec: "nvidia-cuda-mps-control": executable file not found in $PATH') in log, log


def test_DP_26_lab_kwok_gpu_nodes_capacity_is_the_plugins(binaries, tmp_path):
    """lab/kube/real.py gives its kwok GPU nodes nvidia.com/gpu capacity = GPU count: what the plugin's exclusive
    config registers on the same GPUs (t4, hgx-a100-80gb; the H100 node's 8 GPUs have no inventory of 8)."""
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
    try:
        import real
    finally:
        sys.path.pop(0)
    config = json.dumps({'version': 'v1', 'flags': {'migStrategy': 'none'}})
    for node, inv in (('kwok-t4-1', 't4.json'), ('kwok-a100-1', 'hgx-a100-80gb.json')):
        d = tmp_path / node
        d.mkdir()
        rc, results, log = run_plugin(binaries, d, os.path.join(INVENTORIES, inv), config)
        assert rc == 0, log[-3000:]
        capacity = real.gpu_node(node, *real.GPU_NODES[node])['status']['capacity']
        assert {r['resource']: str(len(r['devices'])) for r in results} == {
            k: v for k, v in capacity.items() if k.startswith('nvidia.com/')}


# ------------------------------------------------------------------------------------------- configs it refuses
TS = {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 2}]}
MPS = {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 2}]}
# id: (config the plugin gets, pool strategy, collection settings that would put it in the pool, plugin's words)
REFUSED = {
    'replicas-1': ({'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/gpu', 'replicas': 1}]}}},
                   'time-slicing', {'time_slicing': {'replicas': 1}}, 'number of replicas must be >= 2'),
    'resource-other-domain': ({'sharing': {'timeSlicing': {'resources': [{'name': 'example.com/gpu', 'replicas': 2}]}}},
                              'time-slicing', {'time_slicing': {'resource_name': 'example.com/gpu'}},
                              "incorrect format for resource name 'nvidia.com/example.com/gpu'"),
    'resource-upper-case': ({'sharing': {'timeSlicing': {'resources': [{'name': 'nvidia.com/GPU', 'replicas': 2}]}}},
                            'time-slicing', {'time_slicing': {'resource_name': 'nvidia.com/GPU'}},
                            "incorrect format for resource name 'nvidia.com/GPU'"),
    'mig-strategy': ({'flags': {'migStrategy': 'foo'}}, 'exclusive', None, 'unknown MIG strategy: foo'),
    'list-strategy': ({'flags': {'plugin': {'deviceListStrategy': ['foo']}}}, 'exclusive', None,
                      'invalid --device-list-strategy option: invalid strategy: foo'),
    'no-resources': ({'sharing': {'timeSlicing': {'renameByDefault': True}}}, 'exclusive', None,
                     'no resources specified'),
    'fail-requests-type': ({'sharing': {'timeSlicing': dict(TS, failRequestsGreaterThanOne='yes')}}, 'exclusive', None,
                           'cannot unmarshal string into Go struct field'),
    'mps-mixed': ({'flags': {'migStrategy': 'mixed'}, 'sharing': {'mps': MPS}}, 'mps', None,
                  'using --mig-strategy=mixed is not supported with MPS'),
    'mps-outside-mps-pool': ({'sharing': {'mps': MPS}}, 'time-slicing', None,
                             'using MPS requires --mps-root to be specified'),
    'version': ({'version': 'v2'}, 'exclusive', None, 'unknown version: v2'),
}


@pytest.mark.parametrize('name', sorted(REFUSED))
def test_DP_22_DP_23_DP_24_configs_the_plugin_refuses_are_refused_first(binaries, stack, tmp_path, name):
    cfg, strategy, settings, words = REFUSED[name]
    cfg = dict({'version': 'v1'}, **cfg)
    facts = facts_of(os.path.join(INVENTORIES, 't4.json'), tmp_path)
    # the collection: as the pool's own settings where it has them, and always as an extra config of the pool
    asks = [{'nvidia': {'extra_configs': {'bad': cfg}}}] + ([settings] if settings else [])
    for ask in asks:
        with pytest.raises(stack[1]):
            render(stack, strategy, ask, facts)
    # the plugin (MPS_ROOT only where the collection sets it: in MPS pools) refuses to start, with these words
    plugin = binaries[0]
    path = tmp_path / 'config.json'
    path.write_text(json.dumps(cfg))
    env = sim_env(os.path.join(INVENTORIES, 't4.json'), tmp_path / 'state.json')
    if strategy == 'mps':
        env['MPS_ROOT'] = '/run/nvidia/mps'
    proc = subprocess.run([plugin, '--config-file=%s' % path, '--kubelet-socket=%s' % (tmp_path / 'kubelet.sock')],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and words in proc.stderr, proc.stderr[-3000:]
