#!/usr/bin/env python3
"""LAB ONLY (make demo): the demo's real Kubernetes nodes, one per NVIDIA strategy it deploys (lab/node/node.py:
upstream's kubelet, containerd 2.3.4, runc, NVIDIA's nvidia-container-runtime 1.20.0 in CDI mode, /dev/nvidia* of the
lab, GPUs from the NVML simulator), registered with the demo's control plane under the inventory's host names.

    real_nodes.py up     --state DIR --kube-state KDIR --mirror HOST --node NAME:INVENTORY:GPUS... [--dra NAME]
    real_nodes.py down   --state DIR          stop the plugins, the nodes and the registry
DIR holds the state (real-nodes.json: registry, nodes, DRA plugin) and each node's directory; keep its path short (the
DRA plugin binds unix sockets under it: at most 107 bytes).

`up` (each step skipped when done: a second `up` keeps what runs):
* one registry of the lab (lab/node/registry.py, distribution v3) holding the images the stacks name, rewritten
  through gpuops_mirror.registry (HOST): NVIDIA's device-plugin family (lab/node/node.py device_plugin_image: the
  v0.19.1 programs under the collection's pinned name, the simulator library left out - the runtime injects the
  node's) and the validation pods' image (`validation_image`: busybox under the CUDA vectoradd name, printing the
  devices the container sees - no CUDA here);
* the nodes, started in parallel, each with its GPUs' device nodes, the registry as the mirror HOST, the taint
  nvidia.com/gpu:NoSchedule (only GPU pods land there); then NVIDIA's toolkit on each (node.py nvidia_toolkit: the
  CDI spec of `nvidia-ctk cdi generate` on the simulator; on GPUs in MIG mode one CDI device per MIG device, with the
  MIG capability devices and the mig-minors file the NVIDIA kernel module would make) with the node's inventory
  mounted into every GPU container at the simulator's default path (the driver's state is the host's: on a real
  node the driver library answers for the node's GPUs, here the simulator reads this file);
* the collection's node-layer module gpuops.k8s_gpu.container_runtime_config adds the `nvidia` runtime (CDI on) to
  each node's containerd config (one ansible-playbook run, lab/demo/real-nodes.yml), and containerd re-reads it;
* on the --dra node: NVIDIA's DRA kubelet plugin v0.5.0 (gpu-kubelet-plugin, lab/go) as a host process on the
  simulator, registered with that node's kubelet: it publishes the node's ResourceSlice (lab/tests/dra_node_plugin.py).
On the MIG node the collection's device-plugin DaemonSet pod runs as on the other nodes: the node's runc wrapper shows
the mig-minors file nvidia_toolkit wrote at every container's /proc/driver (lab/node/node.py RUNC_WRAPPER), as the
NVIDIA kernel module does on a real MIG node; the plugin in the pod reads it and registers the MIG devices.
Nothing is written on the Node objects: the kubelet registers them; capacities, labels and slices come from the agents
the collection deploys (device plugin, GFD) and the DRA plugin.
"""
import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'node'))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
import node as lab_node  # noqa: E402  (lab/node)
import real  # noqa: E402  (lab/kube)
import registry as lab_registry  # noqa: E402  (lab/node)

PYTHON = os.path.join(ROOT, '.venv', 'bin', 'python')
TAINT = 'nvidia.com/gpu=:NoSchedule'
SIM_INVENTORY_IN_CONTAINER = '/etc/nvml-sim/inventory.json'   # lab/nvml_sim's default inventory path
VALIDATION_SCRIPT = r'''#!/bin/sh
# lab/demo: the stand-in of the CUDA vectoradd sample (no CUDA in the lab): what the container was given
echo "gpuops-lab validation: NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-<unset>}"
echo "gpuops-lab validation: device nodes: $(cd /dev && find nvidia* -type c | sort | tr '\n' ' ')"
if [ -e /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 ] || ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.* >/dev/null 2>&1
then echo "gpuops-lab validation: driver library injected: $(ls /usr/lib/x86_64-linux-gnu | grep nvidia-ml | tr '\n' ' ')"
fi
echo "gpuops-lab validation: Test PASSED (devices seen; no CUDA kernel ran: the lab has no CUDA)"
'''


def log(msg):
    sys.stderr.write('  %s\n' % msg)
    sys.stderr.flush()


def _state_file(state):
    return os.path.join(state, 'real-nodes.json')


def load(state):
    try:
        with open(_state_file(state)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {'nodes': {}}


def save(state, doc):
    tmp = _state_file(state) + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, _state_file(state))


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (OSError, TypeError):
        return False


def pinned(name):
    """A pinned image of the collection (plugins/module_utils/_common/pins.py), rewritten through the mirror the
    same way the stacks do (stacks/common.mirror_image)."""
    sys.path.insert(0, subprocess.run(['bash', os.path.join(ROOT, 'lab', 'bin', 'collections-path.sh')],
                                      check=True, capture_output=True, text=True).stdout.strip())
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import pins
    pin = pins.pin(name)
    return '%s:%s' % (pin['repository'], pin['tag'])


def validation_image(out, name):
    """busybox (node.py build_images) under the validation workload's name, its entrypoint VALIDATION_SCRIPT."""
    import tarfile
    with tarfile.open(os.path.join(out, 'busybox.tar')) as tar:
        index = json.loads(tar.extractfile('index.json').read())
        man = json.loads(tar.extractfile('blobs/sha256/' + index['manifests'][0]['digest'].split(':')[1]).read())
        layer = tar.extractfile('blobs/sha256/' + man['layers'][0]['digest'].split(':')[1]).read()
    import io
    entries = []
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        for m in t.getmembers():
            if m.isdir():
                entries.append((m.name, 'dir', None, m.mode))
            elif m.issym():
                entries.append((m.name, 'symlink', m.linkname, m.mode))
            else:
                entries.append((m.name, 'file', t.extractfile(m).read(), m.mode))
    entries.append(('usr', 'dir', None, 0o755))
    entries.append(('usr/local', 'dir', None, 0o755))
    entries.append(('usr/local/bin', 'dir', None, 0o755))
    entries.append(('usr/local/bin/vectorAdd', 'file', VALIDATION_SCRIPT.encode(), 0o755))
    return lab_node.oci_archive(os.path.join(out, 'validation.tar'), name, entries,
                                {'Entrypoint': ['/usr/local/bin/vectorAdd'], 'Env': ['PATH=/bin:/usr/local/bin']})


def start_registry(state, doc, mirror, inventory):
    reg = doc.get('registry') or {}
    if reg and alive(reg.get('pid')):
        return reg['url']
    r = lab_registry.Registry(os.path.join(state, 'registry'))
    url = r.start()
    out = os.path.join(state, 'images')
    os.makedirs(out, exist_ok=True)
    images = lab_node.build_images(out)
    names = {'device-plugin': pinned('nvidia-device-plugin'), 'validation': pinned('cuda-sample')}
    pushed = {}
    for key, name in names.items():
        mirrored = '%s/%s' % (mirror, name.split('/', 1)[1])   # stacks/common.mirror_image
        if key == 'device-plugin':
            archive = lab_node.device_plugin_image(out, mirrored, inventory, nvml=False)
        else:
            archive = validation_image(out, mirrored)
        path = mirrored.split('/', 1)[1]
        r.push(archive, *path.rsplit(':', 1))
        pushed[key] = mirrored
    del images
    doc['registry'] = {'pid': r.proc.pid, 'url': url, 'images': pushed, 'dir': r.dir}
    save(state, doc)
    return url


def cdi_inventory_mount(state, inventory):
    """Mount the node's simulator inventory into every container the CDI spec's devices go to (top-level edits)."""
    import yaml
    path = os.path.join(state, 'run', 'cdi', 'nvidia.yaml')
    with open(path) as f:
        spec = yaml.safe_load(f)
    edits = spec.setdefault('containerEdits', {})
    mounts = [m for m in edits.get('mounts') or [] if m.get('containerPath') != SIM_INVENTORY_IN_CONTAINER]
    mounts.append({'hostPath': os.path.abspath(inventory), 'containerPath': SIM_INVENTORY_IN_CONTAINER,
                   'options': ['ro', 'nosuid', 'nodev', 'bind']})
    edits['mounts'] = mounts
    with open(path + '.tmp', 'w') as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    os.replace(path + '.tmp', path)


def node_inventory(state, name, inventory, gpus):
    """The node's simulator inventory file: INVENTORY (lab/nvml_sim/inventories/INVENTORY.json, or a recorded shape
    of lab/kube/real.py RECORDED_SHAPES, e.g. a100x8-mig-single: the GPUs with the pool's MIG geometry) cut to GPUS."""
    if inventory in real.RECORDED_SHAPES:
        inv = real.recorded_inventory(inventory)
    else:
        with open(os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', inventory + '.json')) as f:
            inv = json.load(f)
    inv['gpus'] = inv['gpus'][:gpus]
    path = os.path.join(state, 'inventories', name + '.json')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(inv, f, indent=1)
    return path


def start_node(kstate, state, name, inventory, gpus, mirror, url):
    nstate = os.path.join(state, 'nodes', name)
    try:
        lab_node.ns_pid(nstate)
        return nstate, 'running'
    except (OSError, RuntimeError, ValueError):
        pass
    t0 = time.time()
    proc = subprocess.run([PYTHON, lab_node.__file__, 'up', '--kube-state', kstate, '--state', nstate, '--name', name,
                           '--taint', TAINT, '--nvidia-devices', str(gpus),
                           '--mirror', '%s=%s' % (mirror.split('/', 1)[0], url)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError('node.py up %s failed:\n%s' % (name, proc.stderr[-4000:]))
    # GPUs in MIG mode (lab-a100): nvidia_toolkit makes the MIG capability devices in the node's /dev and runs
    # `nvidia-ctk cdi generate` with the mig-minors file the NVIDIA kernel module would write: one CDI device per MIG
    # device (lab/node/nvcaps.py)
    lab_node.nvidia_toolkit(nstate, inventory)
    cdi_inventory_mount(nstate, inventory)
    return nstate, 'started in %.0f s' % (time.time() - t0)


def configure_runtimes(doc):
    """The collection's container_runtime_config on each node's containerd config: the `nvidia` runtime, CDI on."""
    nodes = [{'name': n, 'config': os.path.join(v['state'], 'containerd.toml'),
              'runtime': os.path.join(real.built_dir('nvidia-container-runtime'), 'nvidia-container-runtime')}
             for n, v in sorted(doc['nodes'].items())]
    ctd = os.path.dirname(lab_node.programs(real.DEFAULT_VERSION)['containerd'])
    env = dict(os.environ, PATH=ctd + os.pathsep + os.environ['PATH'], ANSIBLE_LOCALHOST_WARNING='0',
               ANSIBLE_INVENTORY_UNPARSED_WARNING='0')
    proc = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
                           '-e', json.dumps({'lab_real_nodes': nodes, 'ansible_python_interpreter': PYTHON}),
                           os.path.join(HERE, 'real-nodes.yml')], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError('lab/demo/real-nodes.yml failed:\n%s\n%s' % (proc.stdout[-4000:], proc.stderr[-2000:]))
    changed = [line for line in proc.stdout.splitlines() if line.startswith('changed: ')]
    for n, v in doc['nodes'].items():
        if any(n in line for line in changed) or not v.get('runtime'):
            lab_node.restart_containerd(v['state'])
            v['runtime'] = 'nvidia'
    return len(changed)


def start_dra(kstate, state, doc, name):
    dra = doc.get('dra') or {}
    if dra and alive(dra.get('pid')):
        return
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests'))
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'tests', 'oracles'))
    import pathlib
    from dra_node_plugin import DraPlugin  # lab/tests: the plugin as a host process of a real node
    work = pathlib.Path(state, 'dra-plugin')
    if work.exists():
        import shutil
        shutil.rmtree(work)
    work.mkdir(parents=True)

    class Kube(object):
        kubeconfig = os.path.join(kstate, 'kubeconfig')
    plugin = DraPlugin(Kube(), work, doc['nodes'][name]['state'], name, doc['nodes'][name]['inventory'])
    proc = plugin.start()
    doc['dra'] = {'pid': proc.pid, 'node': name, 'log': str(plugin.log)}
    save(state, doc)
    # its ResourceSlice, published by the plugin itself once the kubelet registered it
    from kubernetes import client
    api = client.CustomObjectsApi(real.api_client(os.path.join(kstate, 'kubeconfig')))
    end = time.time() + 120
    while not [s for s in api.list_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices')['items']
               if s['spec'].get('nodeName') == name]:
        if proc.poll() is not None or time.time() > end:
            with open(plugin.log) as f:
                raise RuntimeError('NVIDIA gpu-kubelet-plugin on %s: %s, no ResourceSlice; its log ends:\n%s' % (
                    name, 'exited %s' % proc.returncode if proc.poll() is not None else 'none after 120 s',
                    f.read()[-3000:]))
        time.sleep(1)


def up(a):
    os.makedirs(a.state, exist_ok=True)
    doc = load(a.state)
    specs = []
    for spec in a.node:
        name, inventory, gpus = spec.split(':')
        specs.append((name, node_inventory(a.state, name, inventory, int(gpus)), int(gpus)))
    t0 = time.time()
    url = start_registry(a.state, doc, a.mirror, specs[0][1])
    log('registry %s: %s (%.0f s)' % (url, ', '.join(sorted(doc['registry']['images'].values())), time.time() - t0))
    with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
        futs = {n: pool.submit(start_node, a.kube_state, a.state, n, inv, g, a.mirror, url) for n, inv, g in specs}
        for n, inv, g in specs:
            nstate, what = futs[n].result()
            doc['nodes'].setdefault(n, {}).update(state=nstate, inventory=inv, gpus=g)
            log('%s: real node (%d GPU%s, %s) %s' % (n, g, '' if g == 1 else 's', os.path.basename(inv), what))
    save(a.state, doc)
    changed = configure_runtimes(doc)
    save(a.state, doc)
    log('runtime `nvidia` (CDI) in each node\'s containerd: gpuops.k8s_gpu.container_runtime_config, %d changed'
        % changed)
    if a.dra:
        start_dra(a.kube_state, a.state, doc, a.dra)
        log('%s: NVIDIA gpu-kubelet-plugin v0.5.0 (host process, pid %d) publishes its ResourceSlice'
            % (a.dra, doc['dra']['pid']))
    return 0


def down(a):
    doc = load(a.state)
    rc = 0
    if doc.get('dra') and alive(doc['dra'].get('pid')):
        os.kill(doc['dra']['pid'], signal.SIGTERM)
    nodes_dir = os.path.join(a.state, 'nodes')
    # every node directory (an `up` stopped half-way has not listed them all in the state file)
    for n in sorted(os.listdir(nodes_dir) if os.path.isdir(nodes_dir) else []):
        proc = subprocess.run([PYTHON, lab_node.__file__, 'down', '--state', os.path.join(nodes_dir, n)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            rc = 1
            log('%s: node.py down: %s' % (n, proc.stderr[-1000:]))
    reg = doc.get('registry') or {}
    if alive(reg.get('pid')):
        os.kill(reg['pid'], signal.SIGTERM)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    p = sub.add_parser('up')
    p.add_argument('--state', required=True)
    p.add_argument('--kube-state', required=True)
    p.add_argument('--mirror', required=True, help='gpuops_mirror.registry (HOST[/PATH])')
    p.add_argument('--node', action='append', required=True, help='NAME:INVENTORY:GPUS')
    p.add_argument('--dra')
    p = sub.add_parser('down')
    p.add_argument('--state', required=True)
    a = ap.parse_args()
    return {'up': up, 'down': down}[a.cmd](a)


if __name__ == '__main__':
    sys.exit(main())
