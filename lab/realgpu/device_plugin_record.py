#!/usr/bin/env python3
"""On a real GPU machine: the collection's device-plugin configuration, rendered from the real GPU's facts, given to
NVIDIA's real device plugin (the lab's v0.19.1 build) under the lab's stand-in kubelet (lab/go/kubelet-registrar), on
the real driver. Read-only: the plugin only queries NVML; nothing here sets a GPU setting.

    python3 lab/realgpu/device_plugin_record.py OUTDIR PLUGIN REGISTRAR

For each variant (exclusive; time-slicing with 4 replicas; time-slicing renamed to nvidia.com/gpu.shared) it writes
dp-<variant>.json: the collection's rendered config and plugin environment, the registrar's answer (resources, device
ids and health, the Allocate answer's environment for one device) and the plugin's log's tail. The registrar's socket
is /var/lib/kubelet/device-plugins/kubelet.sock, where the plugin looks for it (made here; no kubelet runs there).
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = 'real-gpu-node'
VARIANTS = (
    ('exclusive', 'exclusive', {}),
    ('time-slicing-4', 'time-slicing', {'time_slicing': {'replicas': 4}}),
    ('time-slicing-rename', 'time-slicing', {'time_slicing': {'replicas': 2, 'rename_by_default': True}}),
)
SOCKET_DIR = '/var/lib/kubelet/device-plugins'


def collection():
    top = tempfile.mkdtemp(prefix='gpuops-ac-')
    os.makedirs(os.path.join(top, 'ansible_collections', 'gpuops'))
    os.symlink(ROOT, os.path.join(top, 'ansible_collections', 'gpuops', 'k8s_gpu'))
    sys.path.insert(0, top)


def node_config(out, node=NODE):
    """(config text, plugin environment) a node gets from a rendered pool: the ConfigMap entry its
    nvidia.com/device-plugin.config label names, and the plugin container's literal environment (also the oracle
    test_device_plugin.py's reading of a render)."""
    label = out['node_labels'][node]['nvidia.com/device-plugin.config']
    cm = [m for m in out['manifests'] if m['kind'] == 'ConfigMap' and m['metadata']['name'].endswith('-configs')][0]
    ds = [m for m in out['manifests'] if m['kind'] == 'DaemonSet'
          and m['metadata']['name'].startswith('nvidia-device-plugin-')][0]
    ctr = [c for c in ds['spec']['template']['spec']['containers'] if c['name'] == 'nvidia-device-plugin-ctr'][0]
    env = dict((e['name'], e.get('value', '')) for e in ctr['env'] if 'value' in e)
    return cm['data'][label], env


def run(outdir, plugin, registrar, name, config_text, env):
    cfg = os.path.join(outdir, 'dp-%s.config.yaml' % name)
    with open(cfg, 'w') as f:
        f.write(config_text)
    os.makedirs(SOCKET_DIR, exist_ok=True)
    sock = os.path.join(SOCKET_DIR, 'kubelet.sock')
    if os.path.exists(sock):
        os.unlink(sock)
    e = dict(os.environ)
    e.pop('NVIDIA_VISIBLE_DEVICES', None)
    e.update(env)
    e['CONFIG_FILE'] = cfg
    reg = subprocess.Popen([registrar, '-socket', sock, '-allocate', '1', '-settle', '500ms', '-timeout', '40s'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import time
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    log_path = os.path.join(outdir, 'dp-%s.log' % name)
    with open(log_path, 'w') as log:
        pl = subprocess.Popen([plugin], env=e, stdout=log, stderr=subprocess.STDOUT)
        try:
            out, err = reg.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            reg.kill()
            out, err = reg.communicate()
        pl.terminate()
        try:
            pl.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pl.kill()
            pl.wait()
    with open(log_path) as f:
        plugin_log = f.read()
    results = []
    for line in out.splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            results.append({'unparsed': line})
    return {'registrar_rc': reg.returncode, 'registrar_stderr': err[-2000:], 'results': results,
            'plugin_log_tail': plugin_log[-6000:]}


def main(argv):
    outdir, plugin, registrar = argv[1:4]
    os.makedirs(outdir, exist_ok=True)
    collection()
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_facts
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render
    facts = json.loads(json.dumps(gpu_facts.gather(with_node=False), default=str))
    summary = {}
    for name, strategy, settings in VARIANTS:
        out = stacks_render.render(dict(strategy=strategy, pool='p1', nodes=[NODE], facts={NODE: facts},
                                        settings=settings))
        config_text, env = node_config(out)
        rec = {'strategy': strategy, 'settings': settings, 'collection_resources': out['resources'],
               'config': config_text, 'env': env}
        rec.update(run(outdir, plugin, registrar, name, config_text, env))
        with open(os.path.join(outdir, 'dp-%s.json' % name), 'w') as f:
            json.dump(rec, f, indent=1, sort_keys=True)
        summary[name] = {r.get('resource'): [len(r.get('devices') or []), r.get('allocate_env'), r.get('error'),
                                             r.get('allocate_error')] for r in rec['results']}
        print('device plugin %s: %s' % (name, json.dumps(summary[name])))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
