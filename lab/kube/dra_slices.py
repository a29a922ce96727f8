#!/usr/bin/env python3
"""ResourceSlices for the lab's kwok GPU nodes, as NVIDIA's DRA kubelet plugin publishes them (lab only).

    lab/kube/dra_slices.py show    --inventory INV [--node NAME]          print the slice (JSON) for one node
    lab/kube/dra_slices.py publish --kubeconfig KC --node NAME --inventory INV    create/replace it on the API server
    lab/kube/dra_slices.py publish --kubeconfig KC --lab                   every node of LAB_NODES below

A kwok node has no kubelet, so no kubelet plugin runs for it. This module plays the plugin's part for the slices: it
asks the NVML simulator (lab/nvml_sim, through the unmodified pynvml in a child process) what a node's inventory holds
and writes the ResourceSlice sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0 cmd/gpu-kubelet-plugin publishes for it with its
default feature gates (no DynamicMIG, no ConsumableShares, no PassthroughSupport): one slice per node, pool = node
name, driver gpu.nvidia.com; a full GPU `gpu-<minor>` unless MIG mode is on, then one device per existing MIG device
`gpu-<minor>-mig-<profile>-<giProfileId>-<placementStart>`. Attribute names, types and value formats are those of the
plugin's source at v0.5.0 (docs/conformance/dra-driver-nvidia-gpu-lab.md, rows DRAL-*); the oracle test
lab/tests/oracles/test_dra_kubelet_plugin.py runs the plugin itself on the same inventory and compares.
For the inventories of LAB_NODES the devices are not computed: they are those NVIDIA's plugin published through a
real lab node (RECORDING, RECORDED_INVENTORIES); the computed ones serve only an inventory not recorded, and
lab/tests/integration/test_node_dra_real.py checks that they equal the recording on every recorded inventory.
What this does not do: the plugin's CDI specs, NodePrepareResources (no kubelet calls it), pcieRoot/numaNode (they come
from sysfs, which a simulated GPU does not have; the plugin leaves them out there too).
Nothing here is part of the collection.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INVENTORIES = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')
NVML_SIM = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
VENV_PY = os.path.join(ROOT, '.venv', 'bin', 'python')

DRIVER = 'gpu.nvidia.com'          # main.go DriverName
API = 'resource.k8s.io/v1'
# The lab's kwok DRA nodes (lab/kube/real.py DRA_NODES: no device plugin, no nvidia.com/gpu) and the NVML simulator
# inventory each one's slice comes from (that of the node's recorded shape, real.RECORDED_SHAPES).
LAB_NODES = {
    'kwok-dra-t4-1': 't4.json',
    'kwok-dra-t4-2': 't4.json',
    'kwok-dra-a100-1': 'hgx-a100-80gb.json',
    'kwok-dra-h100-1': 'h100-mig.json',  # GPU 0: MIG 3g.40gb + 2x 1g.10gb (+ a GI without CI: no device); GPU 1: MIG on
}

# go-nvlib v0.12.0 pkg/nvlib/device/device.go GetBrandAsString / GetArchitectureAsString, by pynvml's constant name
BRANDS = {
    'NVML_BRAND_UNKNOWN': 'Unknown', 'NVML_BRAND_QUADRO': 'Quadro', 'NVML_BRAND_TESLA': 'Tesla', 'NVML_BRAND_NVS': 'NVS',
    'NVML_BRAND_GRID': 'Grid', 'NVML_BRAND_GEFORCE': 'GeForce', 'NVML_BRAND_TITAN': 'Titan',
    'NVML_BRAND_NVIDIA_VAPPS': 'NvidiaVApps', 'NVML_BRAND_NVIDIA_VPC': 'NvidiaVPC', 'NVML_BRAND_NVIDIA_VCS': 'NvidiaVCS',
    'NVML_BRAND_NVIDIA_VWS': 'NvidiaVWS', 'NVML_BRAND_NVIDIA_CLOUD_GAMING': 'NvidiaCloudGaming',
    'NVML_BRAND_QUADRO_RTX': 'QuadroRTX', 'NVML_BRAND_NVIDIA_RTX': 'NvidiaRTX', 'NVML_BRAND_NVIDIA': 'Nvidia',
    'NVML_BRAND_GEFORCE_RTX': 'GeForceRTX', 'NVML_BRAND_TITAN_RTX': 'TitanRTX',
}
ARCHS = {
    'NVML_DEVICE_ARCH_KEPLER': 'Kepler', 'NVML_DEVICE_ARCH_MAXWELL': 'Maxwell', 'NVML_DEVICE_ARCH_PASCAL': 'Pascal',
    'NVML_DEVICE_ARCH_VOLTA': 'Volta', 'NVML_DEVICE_ARCH_TURING': 'Turing', 'NVML_DEVICE_ARCH_AMPERE': 'Ampere',
    'NVML_DEVICE_ARCH_ADA': 'Ada Lovelace', 'NVML_DEVICE_ARCH_HOPPER': 'Hopper', 'NVML_DEVICE_ARCH_BLACKWELL': 'Blackwell',
    'NVML_DEVICE_ARCH_RUBIN': 'Rubin', 'NVML_DEVICE_ARCH_UNKNOWN': 'Unknown',
}

# Runs in a child process with the simulator's libnvidia-ml.so.1 on LD_LIBRARY_PATH: what NVML says about each GPU.
NVML_QUERY = r"""
import json, sys, pynvml as N
brands = {getattr(N, k): k for k in json.loads(sys.argv[1])}
archs = {getattr(N, k): k for k in json.loads(sys.argv[2]) if hasattr(N, k)}
def s(v):
    return v.decode() if isinstance(v, bytes) else v
N.nvmlInit()
out = {'driver': s(N.nvmlSystemGetDriverVersion()), 'cuda': N.nvmlSystemGetCudaDriverVersion(), 'gpus': []}
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    g = {'index': i, 'minor': N.nvmlDeviceGetMinorNumber(h), 'uuid': s(N.nvmlDeviceGetUUID(h)),
         'name': s(N.nvmlDeviceGetName(h)), 'brand': brands[N.nvmlDeviceGetBrand(h)],
         'arch': archs[N.nvmlDeviceGetArchitecture(h)], 'cc': list(N.nvmlDeviceGetCudaComputeCapability(h)),
         'memory': N.nvmlDeviceGetMemoryInfo(h).total, 'bus': s(N.nvmlDeviceGetPciInfo(h).busId), 'mig': False,
         'migs': []}
    try:
        g['mig'] = N.nvmlDeviceGetMigMode(h)[0] == 1
    except N.NVMLError:
        pass
    if g['mig']:
        for m in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                md = N.nvmlDeviceGetMigDeviceHandleByIndex(h, m)
            except N.NVMLError:
                continue
            gi = N.nvmlDeviceGetGpuInstanceById(h, N.nvmlDeviceGetGpuInstanceId(md))
            gii = N.nvmlGpuInstanceGetInfo(gi)
            prof = None
            for pid in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, pid)  # the V call (v2: with the name)
                except N.NVMLError:
                    continue
                if info.id == gii.profileId:
                    prof = info
                    break
            g['migs'].append({
                'uuid': s(N.nvmlDeviceGetUUID(md)), 'gi_profile_id': prof.id, 'name': s(getattr(prof, 'name', b'')),
                'gi_id': gii.id, 'ci_id': N.nvmlDeviceGetComputeInstanceId(md),
                'start': gii.placement.start, 'size': gii.placement.size,
                'multiprocessors': prof.multiprocessorCount, 'copyEngines': prof.copyEngineCount,
                'decoders': prof.decoderCount, 'encoders': prof.encoderCount, 'jpegEngines': prof.jpegCount,
                'ofaEngines': prof.ofaCount, 'memory_mib': prof.memorySizeMB})
    out['gpus'].append(g)
N.nvmlShutdown()
print(json.dumps(out))
"""


def inventory_path(inv):
    return inv if os.sep in inv else os.path.join(INVENTORIES, inv)


def nvml_view(inventory, state_dir):
    """What NVML (the simulator) reports for ``inventory``: driver/CUDA versions and each GPU with its MIG devices."""
    env = dict(os.environ, LD_LIBRARY_PATH=NVML_SIM, NVML_SIM_INVENTORY=inventory_path(inventory),
               NVML_SIM_STATE=os.path.join(state_dir, 'nvml-sim-state.json'))
    proc = subprocess.run([VENV_PY, '-c', NVML_QUERY, json.dumps(sorted(BRANDS)), json.dumps(sorted(ARCHS))],
                          env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError('NVML simulator query failed for %s (rc %d): %s'
                           % (inventory, proc.returncode, proc.stderr[-2000:]))
    return json.loads(proc.stdout)


def semver(v):
    """Masterminds/semver v3 NewVersion(v).String(): missing parts are 0, leading zeros dropped ('550.127.05')."""
    parts = [int(p) for p in v.split('.')]
    return '.'.join(str(p) for p in (parts + [0, 0])[:3])


def bus_id(raw):
    """go-nvlib GetPCIBusID: lower case, a 0000 prefix of an 8-digit domain dropped (00000000:18:00.0 -> 0000:18:00.0)."""
    b = raw.lower()
    if len(b) > 9 and b[:4] == '0000' and b[8] == ':' and all(c in '0123456789abcdef' for c in b[4:8]):
        b = b[4:]
    return b


def rfc1123(name):
    """cmd/gpu-kubelet-plugin toRFC1123Compliant for a profile name with '.' removed: lower case, [a-z0-9-] only."""
    out = ''.join(c if c.isalnum() or c == '-' else '-' for c in name.lower())
    return out.strip('-')


def _str(v):
    return {'string': v}


def _ver(v):
    return {'version': v}


def _cap(v):
    return {'value': str(v)}


def common_attributes(view, g):
    """The attributes a full GPU and its MIG devices share (deviceinfo.go Attributes, mig.go CommonAttributesMig)."""
    return {
        'productName': _str(g['name']), 'brand': _str(BRANDS[g['brand']]), 'architecture': _str(ARCHS[g['arch']]),
        'cudaComputeCapability': _ver(semver('%d.%d' % tuple(g['cc']))),
        'driverVersion': _ver(semver(view['driver'])),
        'cudaDriverVersion': _ver(semver('%d.%d' % (view['cuda'] // 1000, (view['cuda'] % 1000) // 10))),
        'resource.kubernetes.io/pciBusID': _str(bus_id(g['bus'])),
    }


def devices(view):
    out = []
    for g in view['gpus']:
        if not g['mig']:
            attrs = dict(common_attributes(view, g), type=_str('gpu'), uuid=_str(g['uuid']))
            out.append({'name': 'gpu-%d' % g['minor'], 'attributes': attrs,
                        'capacity': {'memory': _cap(g['memory'])}})
            continue
        for m in g['migs']:
            profile = m['name'][4:] if m['name'].startswith('MIG ') else m['name']
            attrs = dict(common_attributes(view, g), type=_str('mig'), parentUUID=_str(g['uuid']),
                         profile=_str(profile), uuid=_str(m['uuid']))
            cap = {k: _cap(m[k]) for k in ('multiprocessors', 'copyEngines', 'decoders', 'encoders', 'jpegEngines',
                                           'ofaEngines')}
            cap['memory'] = _cap(m['memory_mib'] * 1024 * 1024)
            for i in range(m['start'], m['start'] + m['size']):
                cap['memorySlice%d' % i] = _cap(1)
            name = 'gpu-%d-mig-%s-%d-%d' % (
                g['minor'], rfc1123(profile.replace('.', '')), m['gi_profile_id'], m['start'])
            out.append({'name': name, 'attributes': attrs, 'capacity': cap})
    return sorted(out, key=lambda d: d['name'])


# What a real lab node's DRA plugin published (lab/tests/integration/test_node_dra_real.py records and checks it):
# for these inventories the kwok nodes' slices carry the recorded devices, not the ones computed above.
RECORDING = os.path.join(ROOT, 'lab', 'node', 'recordings', 'dra-slices.json')
RECORDED_INVENTORIES = {'t4.json': 't4x1', 'hgx-a100-80gb.json': 'a100x8', 'h100-mig.json': 'h100x2-mig'}


def recorded_devices(inventory):
    """The devices a real node's plugin published for this inventory (None: not recorded)."""
    shape = RECORDED_INVENTORIES.get(os.path.basename(inventory_path(inventory)))
    if shape is None or inventory_path(inventory) != os.path.join(INVENTORIES, os.path.basename(inventory)):
        return None
    with open(RECORDING) as f:
        return json.load(f)['shapes'][shape]['devices']


def resource_slice(node, view, node_uid=None, devs=None):
    """The node's one ResourceSlice, named as the kubeletplugin helper's ResourceSlice controller names it
    (k8s.io/dynamic-resource-allocation resourceslice: generateName <index, 5 hex digits>-<driver>-<owner node>-) and
    owned by the Node."""
    meta = {'generateName': '00000-%s-%s-' % (DRIVER, node)}
    if node_uid:
        meta['ownerReferences'] = [{'apiVersion': 'v1', 'kind': 'Node', 'name': node, 'uid': node_uid,
                                    'controller': True}]
    return {'apiVersion': API, 'kind': 'ResourceSlice', 'metadata': meta,
            'spec': {'driver': DRIVER, 'nodeName': node,
                     'pool': {'name': node, 'generation': 1, 'resourceSliceCount': 1},
                     'devices': devs if devs is not None else devices(view)}}


# ------------------------------------------------------------------------------------------ the plugin itself
def plugin_binary():
    """gpu-kubelet-plugin of sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0, built by lab/go/build.sh (set
    dra-driver-nvidia-gpu); raises with the build's output when it cannot be built."""
    proc = subprocess.run(['bash', os.path.join(ROOT, 'lab', 'go', 'build.sh'), 'dra-driver-nvidia-gpu'],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError('lab/go/build.sh dra-driver-nvidia-gpu failed (rc %d):\n%s'
                           % (proc.returncode, proc.stderr[-4000:]))
    return os.path.join(proc.stdout.strip().splitlines()[-1], 'gpu-kubelet-plugin')


def plugin_dirs(workdir):
    """What the plugin needs on a node, made under ``workdir`` (the chart's kubelet-plugin DaemonSet mounts the real
    ones): a driver root holding libnvidia-ml.so.1 (the simulator's; the plugin dlopens it by that path) and an
    nvidia-smi (only looked up: root.go getNvidiaSMIPath), an nvidia-cdi-hook to copy (main.go; the CDI specs name it,
    nothing runs it here), the CDI root, the kubelet's plugin registry and plugin data directories."""
    d = {k: os.path.join(workdir, k) for k in ('driver', 'cdi', 'registry', 'plugins', 'host')}
    for k in d.values():
        os.makedirs(k, exist_ok=True)
    lib = os.path.join(d['driver'], 'usr', 'lib', 'x86_64-linux-gnu')
    os.makedirs(lib, exist_ok=True)
    os.makedirs(os.path.join(d['driver'], 'usr', 'bin'), exist_ok=True)
    import shutil
    # built here too: `make test-kube` runs this before any test that builds the simulator (a fresh checkout had no
    # lab/.build/nvml_sim and every test of test_dra_real.py errored); the script is idempotent
    proc = subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError('lab/nvml_sim/build.sh failed (rc %d):\n%s' % (proc.returncode, proc.stderr[-4000:]))
    shutil.copy(os.path.join(NVML_SIM, 'libnvidia-ml.so.1'), os.path.join(lib, 'libnvidia-ml.so.1'))
    for exe in (os.path.join(d['driver'], 'usr', 'bin', 'nvidia-smi'), os.path.join(workdir, 'nvidia-cdi-hook')):
        with open(exe, 'w') as f:
            f.write('#!/bin/sh\nexit 0\n')
        os.chmod(exe, 0o755)
    return d


def start_plugin(kubeconfig, node, inventory, workdir, binary=None, verbosity=2):
    """Start NVIDIA's gpu-kubelet-plugin for ``node`` on the NVML simulator with ``inventory``; it publishes the node's
    ResourceSlice itself (the kubeletplugin helper). Its kubelet registration socket waits for a kubelet that kwok
    never is. Returns the Popen (log: WORKDIR/plugin.log); stop it with stop_plugin."""
    d = plugin_dirs(workdir)
    env = dict(os.environ, NVML_SIM_INVENTORY=inventory_path(inventory),
               NVML_SIM_STATE=os.path.join(workdir, 'nvml-sim-state.json'))
    for k in ('NODE_NAME', 'NAMESPACE', 'CDI_ROOT', 'NVIDIA_DRIVER_ROOT', 'FEATURE_GATES', 'KUBECONFIG'):
        env.pop(k, None)
    cmd = [binary or plugin_binary(), '--kubeconfig', kubeconfig, '--node-name', node,
           '--image-name', 'gpuops.invalid/lab-none:v0.5.0',  # required flag; only MPS daemon templates use it
           '--nvidia-driver-root', d['driver'], '--container-driver-root', d['driver'], '--host-root', d['host'],
           '--nvidia-cdi-hook-path', os.path.join(workdir, 'nvidia-cdi-hook'), '--cdi-root', d['cdi'],
           '--kubelet-registrar-directory-path', d['registry'], '--kubelet-plugins-directory-path', d['plugins'],
           '-v', str(verbosity)]
    log = open(os.path.join(workdir, 'plugin.log'), 'ab')
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir, env=env)


def stop_plugin(proc, timeout=15):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _api(kubeconfig):
    from kubernetes import client, config
    conf = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=conf)
    return client.ApiClient(configuration=conf)


def slices_of(api, node=None):
    from kubernetes import client
    sel = 'spec.driver=%s' % DRIVER + (',spec.nodeName=%s' % node if node else '')
    res = client.CustomObjectsApi(api).list_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices',
                                                                  field_selector=sel)
    return res['items']


def publish(api, node, inventory, state_dir):
    """Replace the driver's slices of ``node`` with the one for ``inventory``; return the created object."""
    from kubernetes import client
    co = client.CustomObjectsApi(api)
    uid = client.CoreV1Api(api).read_node(node).metadata.uid
    for old in slices_of(api, node):
        co.delete_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices', old['metadata']['name'])
    recorded = recorded_devices(inventory)
    body = resource_slice(node, None if recorded is not None else nvml_view(inventory, state_dir), uid, recorded)
    return co.create_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices', body)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    p = sub.add_parser('show')
    p.add_argument('--inventory', required=True)
    p.add_argument('--node', default='node')
    p = sub.add_parser('publish')
    p.add_argument('--kubeconfig', required=True)
    p.add_argument('--node')
    p.add_argument('--inventory')
    p.add_argument('--lab', action='store_true')
    args = ap.parse_args(argv)
    import tempfile
    with tempfile.TemporaryDirectory(prefix='dra-slices-') as tmp:
        if args.cmd == 'show':
            json.dump(resource_slice(args.node, nvml_view(args.inventory, tmp)), sys.stdout, indent=1)
            print()
            return 0
        api = _api(args.kubeconfig)
        nodes = dict(LAB_NODES) if args.lab else {args.node: args.inventory}
        if None in nodes or None in nodes.values():
            ap.error('publish needs --lab or both --node and --inventory')
        for node, inv in sorted(nodes.items()):
            obj = publish(api, node, inv, tmp)
            print('%s %s %d devices' % (node, obj['metadata']['name'], len(obj['spec']['devices'])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
