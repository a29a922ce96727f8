#!/usr/bin/env python3
"""A real Kubernetes node on this machine for the lab: upstream's kubelet (lab/go kube-1.37 or kube-1.34) against
containerd 2.3.4 with its own runc shim (lab/go containerd) and Debian's runc, registered with the lab's real control
plane (lab/kube/real.py). lab/node/README.md says what differs from a real node and why.

    lab/node/node.py up   --kube-state KDIR --state DIR --name NAME [--version 1.37] [--owner-pid PID]
                          [--label K=V]... [--taint K=V:EFFECT]... start, wait until the Node is Ready
    lab/node/node.py down --state DIR                              stop, leave no process, mount or cgroup
    lab/node/node.py restart-containerd --state DIR                containerd re-reads its config (SIGHUP to the node)
    lab/node/node.py images --out DIR [--version 1.37]             build the node's images (OCI archives)

The node is a process tree in namespaces of its own (`unshare --pid --mount --fork --kill-child`): its /var/lib,
/run and /var/log are directories of DIR bind-mounted there, so the kubelet, containerd, their sockets, the device
plugin directory (/var/lib/kubelet/device-plugins, a fixed path in the kubelet) and the CDI spec directory
(/var/run/cdi) sit at a real node's paths without touching the host's; its procfs is its own, with the six kernel
tunables the kubelet checks bind-mounted from files of the node (the host's sysctls are never written); when the
namespace's first process ends, the kernel kills every process in it (the containers included). The network is the
host's for hostNetwork pods; other pods get a namespace whose only peer is the API server (lab/node/cni.py).
Containers' cgroups live under a cgroup root of the node's own (/gpuops-node-NAME in every cgroup v1 hierarchy),
removed by `down`.
"""
import argparse
import hashlib
import io
import json
import re
import os
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
sys.path.insert(0, HERE)
import real  # noqa: E402  pylint: disable=wrong-import-position
import nvcaps  # noqa: E402  pylint: disable=wrong-import-position  (lab/node)

PAUSE_IMAGE = 'registry.k8s.io/pause:3.10.2'   # k8s.io/kubernetes build/pause/Makefile TAG of v1.37.2 and v1.34.4
BUSYBOX_IMAGE = 'gpuops.lab/busybox:1.35.0'    # Debian bookworm's busybox-static 1.35.0
BUSYBOX = '/bin/busybox'                      # busybox-static (lab/node/apt-packages.txt)
RUNC = os.environ.get('GPUOPS_NODE_RUNC') or shutil.which('runc') or '/usr/sbin/runc'  # Debian's runc package
# the tunables kubelet's container manager wants (pkg/kubelet/cm/container_manager_linux.go setupKernelTunables):
# the node's procfs shows files holding these values, so the kubelet never writes the host's sysctls
KERNEL_TUNABLES = {'vm/overcommit_memory': 1, 'vm/panic_on_oom': 0, 'kernel/panic': 10, 'kernel/panic_on_oops': 1,
                   'kernel/keys/root_maxkeys': 1000000, 'kernel/keys/root_maxbytes': 25000000}
NODE_MOUNTS = ('var-lib:/var/lib', 'run:/run', 'var-log:/var/log')
CGROUP_PREFIX = 'gpuops-node-'

# runc's BinaryName for the node's runtime: the sandbox (pause) container asks for oom_score_adj -998 and Guaranteed
# pods' containers for -997; lowering an oom_score_adj needs CAP_SYS_RESOURCE, which this machine's root lacks, and
# runc then fails ("failed to update /proc/self/oom_score_adj: Permission denied"). Negative values become 0.
# On a MIG node (mig_cap_devices wrote STATE/proc-driver/nvidia-caps/mig-minors) `runc create` also gets an OCI
# createContainer hook in the bundle's config.json: this same script, `runc gpuops-lab-proc-driver DIR`, which runc
# 1.1.5 runs in the container's mount namespace after the container's mounts and before pivot_root, with the rootfs
# as its working directory (opencontainers/runc v1.1.5 libcontainer/rootfs_linux.go prepareRootfs), and which
# bind-mounts DIR read-only over the container's proc/driver: what the NVIDIA kernel module shows in every
# container's /proc (driver/nvidia-caps/mig-minors). A bind mount into /proc is refused in config.json's mounts (runc
# checkProcMount); a hook's own mount is not checked. Every other runc call pays one `case` and the loop.
RUNC_WRAPPER = r"""#!/bin/sh
# lab/node: runc with negative oom_score_adj clamped to 0 (no CAP_SYS_RESOURCE here), and on a MIG node a
# createContainer hook showing the node's proc-driver directory at the container's /proc/driver (lab/node/README.md)
case "$1" in gpuops-lab-proc-driver)
  %(mount)s --bind "$2" proc/driver && exec %(mount)s -o remount,bind,ro proc/driver ;;
esac
prev=
create=
for a in "$@"; do
  f=
  case "$prev" in --bundle|-b) f="$a/config.json" ;; --process|-p) f="$a" ;; esac
  case "$a" in --bundle=*) f="${a#--bundle=}/config.json" ;; --process=*) f="${a#--process=}" ;; create) create=1 ;; esac
  if [ -n "$f" ] && [ -f "$f" ]; then
    sed -i -E 's/"oomScoreAdj":-[0-9]+/"oomScoreAdj":0/' "$f"
    if [ -n "$create" ] && [ -f %(minors)s ] && ! grep -q gpuops-lab-proc-driver "$f"; then
      if grep -q '"createContainer":\[' "$f"; then
        sed -i 's|"createContainer":\[|"createContainer":[%(hook)s,|' "$f"
      elif grep -q '"hooks":{' "$f"; then
        sed -i 's|"hooks":{|"hooks":{"createContainer":[%(hook)s],|' "$f"
      else
        sed -i '1s|^{|{"hooks":{"createContainer":[%(hook)s]},|' "$f"
      fi
    fi
  fi
  prev=$a
done
exec %(runc)s "$@"
"""
PROC_DRIVER = 'proc-driver'   # under STATE: what a MIG node's containers see at /proc/driver (mig_cap_devices)


def runc_wrapper(state):
    """The text of STATE/bin/runc (RUNC_WRAPPER) for the node in ``state``."""
    self_path = os.path.join(state, 'bin', 'runc')
    proc_driver = os.path.join(state, PROC_DRIVER)
    hook = json.dumps({'path': self_path, 'args': ['runc', 'gpuops-lab-proc-driver', proc_driver]},
                      separators=(',', ':'))
    for path in (self_path, proc_driver):
        if not re.match(r'^[A-Za-z0-9_./-]+$', path):
            raise SystemExit('node state path %r: only [A-Za-z0-9_./-] (it goes into the runc wrapper)' % path)
    return RUNC_WRAPPER % {'runc': RUNC, 'mount': shutil.which('mount') or '/bin/mount', 'hook': hook,
                           'minors': os.path.join(proc_driver, 'nvidia-caps', 'mig-minors')}


def log(msg):
    sys.stderr.write('[lab/node] %s\n' % msg)
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------------ programs
def programs(version):
    """{name: path}: the kubelet of kube-VERSION, containerd, its runc shim and ctr; builds missing sets."""
    # GPUOPS_KUBE_BINDIR: programs built elsewhere, as lab/kube/real.py reads it (debugging a build by hand)
    kube = os.environ.get('GPUOPS_KUBE_BINDIR') or real.built_dir('kube-' + version)
    ctrd = real.built_dir('containerd')
    out = {'kubelet': os.path.join(kube, 'kubelet')}
    for p in ('containerd', 'containerd-shim-runc-v2', 'ctr'):
        out[p] = os.path.join(ctrd, p)
    for p, path in out.items():
        if not os.access(path, os.X_OK):
            raise SystemExit('%s missing: %s (lab/go/%s/programs)' % (p, path, 'kube-' + version
                                                                        if p == 'kubelet' else 'containerd'))
    if not os.access(RUNC, os.X_OK):
        raise SystemExit('runc not found (Debian package runc, lab/node/apt-packages.txt; GPUOPS_NODE_RUNC)')
    return out


def kubernetes_module_dir(version):
    """k8s.io/kubernetes of the kube-VERSION set in the Go module cache (build/pause comes from there)."""
    d = os.path.join(ROOT, 'lab', 'go', 'kube-' + version)
    go = subprocess.run(['bash', '-c', 'source <(sed -n "/^find_go()/,/^}/p" %s) && find_go' % real.BUILD],
                        capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, GOFLAGS='-mod=readonly', GOTOOLCHAIN='local')
    subprocess.run([go, 'mod', 'download', 'k8s.io/kubernetes'], cwd=d, env=env, check=True, capture_output=True)
    return subprocess.run([go, 'list', '-m', '-f', '{{.Dir}}', 'k8s.io/kubernetes'], cwd=d, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


# ------------------------------------------------------------------------------------------------------ images
def _blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {'digest': 'sha256:' + digest, 'size': len(data)}


def oci_archive(path, name, entries, config):
    """An OCI image layout archive (what `ctr images import` reads) of one uncompressed layer made of ``entries``:
    (path, 'dir'|'file'|'symlink', content or link target, mode). Reproducible: fixed times and owners."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode='w', format=tarfile.PAX_FORMAT) as tar:
        for arc, kind, data, mode in entries:
            info = tarfile.TarInfo(arc)
            info.mtime, info.uid, info.gid, info.mode = 0, 0, 0, mode
            if kind == 'dir':
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == 'symlink':
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    blobs = {}
    layer_desc = dict(_blob(blobs, layer.getvalue()), mediaType='application/vnd.oci.image.layer.v1.tar')
    cfg = {'architecture': 'amd64', 'os': 'linux', 'config': config,
           'rootfs': {'type': 'layers', 'diff_ids': [layer_desc['digest']]},
           'history': [{'created_by': 'lab/node/node.py images', 'created': '1970-01-01T00:00:00Z'}],
           'created': '1970-01-01T00:00:00Z'}
    cfg_desc = dict(_blob(blobs, json.dumps(cfg, sort_keys=True).encode()),
                    mediaType='application/vnd.oci.image.config.v1+json')
    manifest = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.manifest.v1+json',
                'config': cfg_desc, 'layers': [layer_desc]}
    man_desc = dict(_blob(blobs, json.dumps(manifest, sort_keys=True).encode()),
                    mediaType='application/vnd.oci.image.manifest.v1+json',
                    platform={'architecture': 'amd64', 'os': 'linux'},
                    annotations={'io.containerd.image.name': name,
                                 'org.opencontainers.image.ref.name': name.rsplit(':', 1)[1]})
    index = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json', 'manifests': [man_desc]}
    tmp = path + '.tmp'
    with tarfile.open(tmp, mode='w') as tar:
        for arc, data in [('oci-layout', b'{"imageLayoutVersion":"1.0.0"}'),
                          ('index.json', json.dumps(index, sort_keys=True).encode())] + \
                sorted(('blobs/sha256/' + d, b) for d, b in blobs.items()):
            info = tarfile.TarInfo(arc)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
    return path


def build_images(out, version='1.37'):
    """The node's images as OCI archives in ``out``: the pause image compiled from k8s.io/kubernetes build/pause
    (its Makefile's CFLAGS, its Dockerfile's USER and ENTRYPOINT; FROM scratch) and a FROM-scratch busybox image
    (Debian's static busybox with a link per applet). {image name: archive path}."""
    os.makedirs(out, exist_ok=True)
    src = os.path.join(kubernetes_module_dir(version), 'build', 'pause', 'linux', 'pause.c')
    pause_bin = os.path.join(out, 'pause')
    subprocess.run(['gcc', '-Os', '-Wall', '-Werror', '-static', '-DVERSION=v3.10.2-gpuops-lab', '-o', pause_bin,
                    src], check=True)
    with open(pause_bin, 'rb') as f:
        pause = f.read()
    images = {PAUSE_IMAGE: oci_archive(os.path.join(out, 'pause.tar'), PAUSE_IMAGE, [('pause', 'file', pause, 0o755)],
                                       {'Entrypoint': ['/pause'], 'User': '65535:65535'})}
    if not os.access(BUSYBOX, os.X_OK):
        raise SystemExit('%s missing: install Debian package busybox-static (lab/node/apt-packages.txt)' % BUSYBOX)
    with open(BUSYBOX, 'rb') as f:
        bb = f.read()
    applets = subprocess.run([BUSYBOX, '--list'], capture_output=True, text=True, check=True).stdout.split()
    entries = [(d, 'dir', None, 0o755) for d in ('bin', 'dev', 'etc', 'proc', 'sys', 'tmp', 'var')]
    entries.append(('bin/busybox', 'file', bb, 0o755))
    entries += [('bin/' + a, 'symlink', 'busybox', 0o777) for a in sorted(set(applets)) if a != 'busybox']
    images[BUSYBOX_IMAGE] = oci_archive(os.path.join(out, 'busybox.tar'), BUSYBOX_IMAGE, entries,
                                        {'Cmd': ['sh'], 'Env': ['PATH=/bin']})
    return images


NVML_SIM_LIB = os.path.join(ROOT, 'lab', '.build', 'nvml_sim', 'libnvidia-ml.so.1')   # lab/nvml_sim/build.sh
DEVICE_PLUGIN_PROGRAMS = ('nvidia-device-plugin', 'gpu-feature-discovery', 'config-manager', 'mps-control-daemon')
IMAGE_MOUNT_PROGRAMS = ('/bin/mount', '/bin/umount')
# The rest of glibc (Debian's libc6) that NVIDIA's driver programs link (ldd of Debian's nvidia-smi,
# nvidia-cuda-mps-control and nvidia-cuda-mps-server 535.261.03): NVIDIA's runtime mounts the programs from the driver
# root into the plugin's containers, the image's C library runs them (upstream's UBI-based image has all of glibc).
IMAGE_DRIVER_PROGRAM_LIBS = tuple('/lib/x86_64-linux-gnu/' + lib
                                  for lib in ('libpthread.so.0', 'libm.so.6', 'libdl.so.2', 'librt.so.1'))


def _ldd(path):
    """The absolute paths of the shared objects a dynamically linked program loads (ldd), the loader included."""
    out = subprocess.run(['ldd', path], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        words = line.split()
        if '=>' in words and len(words) > words.index('=>') + 1 and words[words.index('=>') + 1].startswith('/'):
            libs.append(words[words.index('=>') + 1])
        elif words and words[0].startswith('/'):
            libs.append(words[0])
    return libs


def _image_dirs(files, extra=()):
    """The directory entries of an image whose files are ``files`` ({path in the image: source}): every parent of
    them and of the NVML simulator's inventory and state paths, /dev, /proc, /sys, /etc and ``extra`` (mode 0755),
    and /tmp (1777)."""
    dirs = set()
    for arc in list(files) + ['etc/nvml-sim/inventory.json', 'var/lib/nvml-sim/.keep']:
        d = os.path.dirname(arc)
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    entries = [(d, 'dir', None, 0o755) for d in sorted(dirs | {'dev', 'proc', 'sys', 'etc'} | set(extra))]
    entries.append(('tmp', 'dir', None, 0o1777))
    return entries


def device_plugin_image(out, name, inventory, nvml=True):
    """The NVIDIA device-plugin family's image (the pinned nvcr.io/nvidia/k8s-device-plugin name) FROM scratch:
    nvidia-device-plugin, gpu-feature-discovery, config-manager and mps-control-daemon of the lab/go
    nvidia-device-plugin set (k8s-device-plugin v0.19.1 from the Go module proxy, cgo), the C library and loader
    they link (the machine's glibc, Debian's libc6), and the NVML simulator as libnvidia-ml.so.1 - the stand-in for the driver library NVIDIA's
    container runtime would mount from the host - with the GPU inventory it simulates at its default path
    (/etc/nvml-sim/inventory.json; its state under /var/lib/nvml-sim). nvml=False leaves the simulator library out
    (the libraries it links stay): NVIDIA's container runtime injects it from the node's driver root (nvidia_toolkit)
    into containers that ask for GPUs. Returns the archive's path."""
    progs = real.built_dir('nvidia-device-plugin')
    if not os.path.exists(NVML_SIM_LIB):
        subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    files = {}
    for p in DEVICE_PLUGIN_PROGRAMS:
        files['usr/bin/' + p] = os.path.join(progs, p)
    # mount and umount (Debian's util-linux): `mps-control-daemon mount-shm` runs them (k8s.io/mount-utils), as
    # upstream's image (a UBI base) has them
    for p in IMAGE_MOUNT_PROGRAMS:
        files['usr/bin/' + os.path.basename(p)] = p
    for lib in sorted(set(_ldd(os.path.join(progs, 'nvidia-device-plugin')) + _ldd(NVML_SIM_LIB) + [
            lib for p in IMAGE_MOUNT_PROGRAMS for lib in _ldd(p)] + list(IMAGE_DRIVER_PROGRAM_LIBS))):
        files[lib.lstrip('/')] = os.path.realpath(lib)
    if nvml:
        files['usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1'] = NVML_SIM_LIB
    entries = _image_dirs(files)
    for arc, src in sorted(files.items()):
        with open(src, 'rb') as f:
            entries.append((arc, 'file', f.read(), 0o755))
    with open(inventory, 'rb') as f:
        entries.append(('etc/nvml-sim/inventory.json', 'file', f.read(), 0o644))
    return oci_archive(os.path.join(out, 'k8s-device-plugin.tar'), name, entries,
                       {'Env': ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
                        'Entrypoint': ['nvidia-device-plugin']})


# NVIDIA's DRA driver's image (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0 deployments/container/Dockerfile: a
# distroless/cc:debug base - busybox on PATH for the scripts' coreutils -, Debian's bash as /bin/bash, nvidia-cdi-hook
# of the container toolkit, the driver's programs in /usr/bin, hack/kubelet-plugin-prestart.sh and templates/).
DRA_MODULE = 'sigs.k8s.io/dra-driver-nvidia-gpu@v0.5.0'
# what the chart's kubelet-plugin pod runs besides the plugin: `bash /usr/bin/kubelet-plugin-prestart.sh` (init
# container) and `bash -c '... gpu-kubelet-plugin -v $(LOG_VERBOSITY)'` (gpus); the script's programs, busybox applets
DRA_SCRIPT_APPLETS = ('basename', 'cp', 'date', 'env', 'find', 'head', 'ln', 'ls', 'mount', 'readlink', 'sed',
                      'sleep')


def dra_module_dir():
    """The DRA driver's module in the Go module cache (lab/go dra-driver-nvidia-gpu downloads it)."""
    env = dict(os.environ, GOFLAGS='-mod=mod', GOTOOLCHAIN='local', PATH='/usr/local/go/bin:' + os.environ['PATH'])
    proc = subprocess.run(['go', 'mod', 'download', '-json', DRA_MODULE], cwd='/', env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError('go mod download %s failed: %s' % (DRA_MODULE, (proc.stdout + proc.stderr)[-3000:]))
    return json.loads(proc.stdout)['Dir']


def dra_plugin_image(out, name, inventory):
    """The image of the DRA driver's chart (its kubelet-plugin DaemonSet: init container and gpus container) FROM
    scratch, one layer: gpu-kubelet-plugin of the lab/go set dra-driver-nvidia-gpu (v0.5.0 from the Go module proxy,
    cgo) and nvidia-cdi-hook of the set nvidia-container-runtime (toolkit v1.20.0) in /usr/bin, the module's
    hack/kubelet-plugin-prestart.sh in /usr/bin and templates/ in /templates (as upstream's Dockerfile copies them),
    Debian's bash (/bin/bash, /usr/bin/bash) and static busybox with a link per program the scripts run, the C library
    and loader they link (ldd), and the NVML simulator's GPU inventory at its default path
    /etc/nvml-sim/inventory.json: the plugin loads libnvidia-ml.so.1 from the node's driver root (the chart's
    nvidiaDriverRoot, mounted at /driver-root), which on a lab node is the simulator (nvidia_toolkit). The environment
    is upstream's image's (NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility, NVIDIA_DISABLE_REQUIRE).
    Returns the archive's path."""
    os.makedirs(out, exist_ok=True)
    plugin = os.path.join(real.built_dir('dra-driver-nvidia-gpu'), 'gpu-kubelet-plugin')
    hook = os.path.join(real.built_dir('nvidia-container-runtime'), 'nvidia-cdi-hook')
    module = dra_module_dir()
    bash = shutil.which('bash') or '/bin/bash'
    files = {'usr/bin/gpu-kubelet-plugin': plugin, 'usr/bin/nvidia-cdi-hook': hook, 'bin/bash': bash,
             'usr/bin/kubelet-plugin-prestart.sh': os.path.join(module, 'hack', 'kubelet-plugin-prestart.sh'),
             'usr/bin/busybox': BUSYBOX}
    for tmpl in sorted(os.listdir(os.path.join(module, 'templates'))):
        files['templates/' + tmpl] = os.path.join(module, 'templates', tmpl)
    # the rest of glibc: the init container runs the driver root's nvidia-smi (upstream's distroless/cc base has it)
    for lib in sorted(set(_ldd(plugin) + _ldd(bash) + _ldd(hook) + list(IMAGE_DRIVER_PROGRAM_LIBS))):
        files[lib.lstrip('/')] = os.path.realpath(lib)
    entries = _image_dirs(files, ('root', 'run', 'var'))
    for arc, src in sorted(files.items()):
        with open(src, 'rb') as f:
            entries.append((arc, 'file', f.read(), 0o644 if arc.startswith('templates/') else 0o755))
    entries.append(('usr/bin/bash', 'symlink', '/bin/bash', 0o777))
    entries += [('usr/bin/' + a, 'symlink', 'busybox', 0o777) for a in DRA_SCRIPT_APPLETS]
    with open(inventory, 'rb') as f:
        entries.append(('etc/nvml-sim/inventory.json', 'file', f.read(), 0o644))
    entries.append(('etc/passwd', 'file', b'root:x:0:0:root:/root:/bin/bash\n', 0o644))
    entries.append(('etc/group', 'file', b'root:x:0:\n', 0o644))
    return oci_archive(os.path.join(out, 'dra-driver-nvidia-gpu.tar'), name, entries,
                       {'Env': ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
                                'NVIDIA_DISABLE_REQUIRE=true', 'NVIDIA_VISIBLE_DEVICES=all',
                                'NVIDIA_DRIVER_CAPABILITIES=utility'], 'User': 'root:root'})


# ------------------------------------------------------------------------------------- NVIDIA's container runtime
# NVIDIA/nvidia-container-toolkit v1.20.0 (lab/go nvidia-container-runtime): the node's `nvidia` handler in CDI mode.
# The runtime reads its config from the file NVIDIA_CTK_CONFIG_FILE_PATH names (api/config/v1/config.go of the
# module; default /etc/nvidia-container-runtime/config.toml, the shared machine's): containerd is started with it set
# (serve), and the shim and the runtime inherit containerd's environment.
NVIDIA_RUNTIME_CONFIG = os.path.join('etc', 'nvidia-container-runtime', 'config.toml')   # under STATE
NVIDIA_RUNTIME_LOG = '/var/log/nvidia-container-runtime.log'       # in the node: STATE/var-log/...
NVIDIA_CDI_SPEC = '/var/run/cdi/nvidia.yaml'                       # in the node: STATE/run/cdi/nvidia.yaml
TOOLKIT_PROGRAMS = ('nvidia-container-runtime', 'nvidia-cdi-hook', 'nvidia-ctk')
# NVIDIA's driver programs in the driver root's usr/bin, where NVIDIA's installer puts them: Debian bookworm non-free's
# 535.261.03 (lab/nvidia_real/fetch.sh; Debian's own paths under its unpacked root). `nvidia-ctk cdi generate` mounts
# each it finds (toolkit v1.20.0 pkg/nvcdi/driver-nvml.go newDriverBinariesDiscoverer) into the containers of GPUs:
# the MPS control daemon runs `nvidia-smi -c` and `nvidia-cuda-mps-control -d`, the plugin `nvidia-cuda-mps-control`.
DRIVER_PROGRAMS = {'nvidia-smi': 'usr/lib/nvidia/current/nvidia-smi',
                   'nvidia-cuda-mps-control': 'usr/bin/nvidia-cuda-mps-control',
                   'nvidia-cuda-mps-server': 'usr/sbin/nvidia-cuda-mps-server'}
NVIDIA_REAL_ROOT = os.path.join(ROOT, 'lab', '.build', 'nvidia_real', 'root')   # lab/nvidia_real/fetch.sh
NVIDIA_RUNTIME_TOML = '''# lab/node: NVIDIA's container runtime on this node (node.py nvidia_toolkit; NVIDIA_CTK_CONFIG_FILE_PATH)
[nvidia-container-runtime]
debug = "%(log)s"
log-level = "debug"
mode = "cdi"
runtimes = ["%(runc)s"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
spec-dirs = ["%(spec_dir)s"]
annotation-prefixes = ["cdi.k8s.io/"]

[nvidia-ctk]
path = "%(ctk)s"
'''


def nvidia_toolkit(state, inventory):
    """Make NVIDIA's container runtime usable on a running node (started with --nvidia-devices): a driver root
    STATE/driver holding the NVML simulator as libnvidia-ml.so.<driver version of INVENTORY> (with an empty
    libcuda.so.<version>: no CUDA here), the CDI spec that `nvidia-ctk cdi generate --mode=nvml` writes for it - run
    in the node's mount namespace on the simulator, --dev-root / (the node's /dev with the lab's device nodes) - at
    /var/run/cdi/nvidia.yaml, and the runtime's config (mode cdi, that spec directory, the node's runc as its
    low-level runtime, debug log at /var/log/nvidia-container-runtime.log). Returns {program: path} of the toolkit's
    binaries; the caller points the `nvidia` runtime's BinaryName at nvidia-container-runtime. The driver root's
    usr/bin also holds NVIDIA's driver programs nvidia-smi, nvidia-cuda-mps-control and nvidia-cuda-mps-server
    (Debian's, DRIVER_PROGRAMS), which the spec then mounts as on a real node.

    On an inventory with GPUs in MIG mode nvidia-ctk needs what the NVIDIA kernel module makes for MIG (without it:
    'error getting MIG capability device paths', nvidia-container-toolkit v1.20.0 internal/platform-support/dgpu/
    nvml.go): the capability devices /dev/nvidia-caps/nvidia-cap<minor> are made in the node's /dev (mig_cap_devices)
    and nvidia-ctk runs with a /proc of its own carrying driver/nvidia-caps/mig-minors (lab/node/nvcaps.py); the
    spec then has one device per MIG device (by <gpu>:<mig> and by MIG UUID: the GPU's node and the GPU instance's
    and compute instance's capability nodes) and none for the GPUs in MIG mode."""
    progs_dir = real.built_dir('nvidia-container-runtime')
    progs = {p: os.path.join(progs_dir, p) for p in TOOLKIT_PROGRAMS}
    if not os.path.exists(NVML_SIM_LIB):
        subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    with open(inventory) as f:
        inv = json.load(f)
    version = inv['driver_version']
    lib = os.path.join(state, 'driver', 'usr', 'lib', 'x86_64-linux-gnu')
    os.makedirs(lib, exist_ok=True)
    shutil.copyfile(NVML_SIM_LIB, os.path.join(lib, 'libnvidia-ml.so.' + version))
    open(os.path.join(lib, 'libcuda.so.' + version), 'wb').close()
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvidia_real', 'fetch.sh')], check=True, capture_output=True,
                   timeout=600)
    bindir = os.path.join(state, 'driver', 'usr', 'bin')
    os.makedirs(bindir, exist_ok=True)
    for prog, rel in DRIVER_PROGRAMS.items():
        shutil.copy2(os.path.join(NVIDIA_REAL_ROOT, rel), os.path.join(bindir, prog))
    os.makedirs(os.path.join(state, 'run', 'cdi'), exist_ok=True)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(NVML_SIM_LIB), NVML_SIM_INVENTORY=os.path.abspath(inventory),
               NVML_SIM_STATE=os.path.join(state, 'nvml-sim-state.json'))
    cmd = ['nsenter', '-t', str(ns_pid(state)), '-m']
    if nvcaps.mig_inventory(inv):
        minors = mig_cap_devices(state, inv)
        os.makedirs(os.path.join(state, 'nvidia-ctk-proc'), exist_ok=True)
        env.update(REALPROC=os.path.join(state, 'nvidia-ctk-proc'), MINORS=minors)
        cmd += ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', nvcaps.PRIVATE_PROC + 'exec "$@"', 'sh']
    proc = subprocess.run(cmd + [progs['nvidia-ctk'], 'cdi', 'generate',
                                 '--mode=nvml', '--driver-root=%s' % os.path.join(state, 'driver'), '--dev-root=/',
                                 '--nvidia-cdi-hook-path=%s' % progs['nvidia-cdi-hook'], '--output=%s' % NVIDIA_CDI_SPEC],
                          env=env, capture_output=True, text=True, timeout=120)
    _write(os.path.join(state, 'logs', 'nvidia-ctk-cdi-generate.log'), proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError('nvidia-ctk cdi generate failed (%d): %s' % (proc.returncode, proc.stderr[-3000:]))
    _write(os.path.join(state, NVIDIA_RUNTIME_CONFIG), NVIDIA_RUNTIME_TOML % {
        'log': NVIDIA_RUNTIME_LOG, 'runc': os.path.join(state, 'bin', 'runc'),
        'spec_dir': os.path.dirname(NVIDIA_CDI_SPEC), 'ctk': progs['nvidia-ctk']})
    return progs


# the capability devices of MIG in the node's /dev, made as the NVIDIA driver makes them (nvidia-modprobe: read-only,
# mode 0444 - the DeviceFileMode 292 of the driver's capability files)
_MIG_CAP_DEVICES = r'''
import os, sys
major = int(sys.argv[2])
os.makedirs('/dev/nvidia-caps', exist_ok=True)
for line in open(sys.argv[1]):
    minor = int(line.split()[1])
    path = '/dev/nvidia-caps/nvidia-cap%d' % minor
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(path, 0o444 | 0o020000, os.makedev(major, minor))
    os.chmod(path, 0o444)
'''


def mig_cap_devices(state, inv):
    """For a node whose GPUs (inventory ``inv``) are in MIG mode: STATE/proc-driver/nvidia-caps/mig-minors, the
    mig-minors file the NVIDIA kernel module would write (lab/node/nvcaps.py) - from then on the node's runc wrapper
    shows STATE/proc-driver at every new container's /proc/driver (RUNC_WRAPPER), as the module's procfs entries are
    in every container of a real MIG node - and in the node's /dev the character device of each of its capabilities,
    /dev/nvidia-caps/nvidia-cap<minor> (major NVIDIA_CAPS_MAJOR). Returns the file's path."""
    minors = os.path.join(state, PROC_DRIVER, 'nvidia-caps', 'mig-minors')
    _write(minors + '.tmp', '\n'.join(nvcaps.mig_minors_lines(inv)) + '\n')
    os.replace(minors + '.tmp', minors)   # the wrapper tests for the file: never a half-written one
    proc = subprocess.run(['nsenter', '-t', str(ns_pid(state)), '-m', sys.executable, '-c', _MIG_CAP_DEVICES, minors,
                           str(NVIDIA_CAPS_MAJOR)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError('making /dev/nvidia-caps in the node failed: %s' % proc.stderr[-2000:])
    return minors


# ------------------------------------------------------------------------------------------------------ cgroups
def cgroup_v1_roots(types=('cgroup',)):
    """Mount points of the cgroup v1 hierarchies (one per mount, e.g. /sys/fs/cgroup/memory); with types
    ('cgroup', 'cgroup2') the hybrid layout's unified hierarchy too."""
    out = []
    with open('/proc/self/mountinfo') as f:
        for line in f:
            left, right = line.split(' - ', 1)
            if right.split()[0] in types:
                out.append(left.split()[4])
    return sorted(set(out))


def make_cgroup_root(name):
    """/gpuops-node-NAME in every cgroup v1 hierarchy (the kubelet refuses a cgroupRoot that does not exist)."""
    rel = CGROUP_PREFIX + name
    for r in cgroup_v1_roots():
        d = os.path.join(r, rel)
        os.makedirs(d, exist_ok=True)
        for f in ('cpuset.cpus', 'cpuset.mems'):   # a new cpuset cgroup is empty: no task may join it
            if os.path.exists(os.path.join(d, f)):
                with open(os.path.join(r, f)) as src, open(os.path.join(d, f), 'w') as dst:
                    dst.write(src.read())
    return '/' + rel


def remove_cgroup_root(name, timeout=20):
    """rmdir the node's cgroups, deepest first, once their processes are gone; the paths left (empty list: none)."""
    rel = CGROUP_PREFIX + name
    end = time.time() + timeout
    left = []
    while True:
        left = []
        for r in cgroup_v1_roots(('cgroup', 'cgroup2')):   # runc makes the containers' in the unified one too
            top = os.path.join(r, rel)
            if not os.path.isdir(top):
                continue
            for d, _dirs, _files in sorted(os.walk(top), key=lambda t: -t[0].count('/')):
                try:
                    os.rmdir(d)
                except OSError:
                    left.append(d)
        if not left or time.time() > end:
            return left
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------------------ configs
def containerd_config(state, progs):
    """containerd 2.3's config (version 3) at a real node's paths inside the node's namespace."""
    return '''version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "/run/containerd/containerd.sock"

[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "/var/lib/containerd-opt"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "%(pause)s"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "%(certs_d)s"

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "%(runc)s"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["%(cni_bin)s"]
    conf_dir = "%(cni_conf)s"
    use_internal_loopback = true

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
''' % {'pause': PAUSE_IMAGE, 'runc': os.path.join(state, 'bin', 'runc'),
       'cni_bin': os.path.join(state, 'cni', 'bin'), 'cni_conf': os.path.join(state, 'cni', 'net.d'),
       'certs_d': os.path.join(state, 'certs.d')}


# A registry host's hosts.toml (containerd's registry host configuration): every pull of HOST/... goes to URL, the
# lab's registry (lab/node/registry.py, plain HTTP on 127.0.0.1), with the repository path kept - what a site's
# mirror configuration does; the name HOST itself is never resolved.
HOSTS_TOML = '''server = "%(url)s"

[host."%(url)s"]
  capabilities = ["pull", "resolve"]
'''


# The node's CNI network: lab/node/cni.py (type gpuops-lab-net). A pod without hostNetwork gets a network namespace
# with a loopback, its address and the `kubernetes` Service's ClusterIP, where a forwarder relays to the API server;
# nothing else is reachable (no pod network, no kube-proxy). Host-network pods never call it.
POD_SUBNET = '10.244.0.0/16'


def cni_conf(kstate):
    with open(os.path.join(kstate, 'server')) as f:
        server = f.read().strip()
    return {'cniVersion': '1.0.0', 'name': 'gpuops-lab-net',
            'plugins': [{'type': 'gpuops-lab-net', 'apiserver': server.split('://', 1)[-1], 'serviceIP': real.SERVICE_IP,
                         'podSubnet': POD_SUBNET, 'dataDir': '/var/lib/cni/gpuops-lab-net'}]}


CNI_WRAPPER = '#!/bin/sh\nexec %(python)s %(cni)s "$@"\n'


def host_ip():
    """The machine's first global IPv4 address: the node's InternalIP. The kubelet refuses a loopback node IP
    ("failed to validate nodeIP: nodeIP can't be loopback address") and then publishes no address at all."""
    out = subprocess.run(['ip', '-4', '-o', 'addr', 'show', 'scope', 'global'], capture_output=True, text=True,
                         check=True).stdout.split()
    for i, word in enumerate(out):
        if word == 'inet':
            return out[i + 1].split('/')[0]
    raise SystemExit('no global IPv4 address on this machine (ip -4 addr show scope global): the kubelet needs a '
                     'node IP that is not loopback')


def kubelet_config(name, port, healthz_port, cgroup_root, node_ip='127.0.0.1', client_ca=None):
    return {
        'apiVersion': 'kubelet.config.k8s.io/v1beta1', 'kind': 'KubeletConfiguration',
        'address': node_ip, 'port': port, 'readOnlyPort': 0,
        'healthzBindAddress': '127.0.0.1', 'healthzPort': healthz_port,
        # clients need a certificate of the cluster's CA (the API server has one: real.py apiserver-kubelet-client);
        # anything so authenticated may do anything (no webhook authorization)
        'authentication': {'anonymous': {'enabled': False}, 'webhook': {'enabled': False},
                           'x509': {'clientCAFile': client_ca} if client_ca else {}},
        'authorization': {'mode': 'AlwaysAllow'},
        'cgroupDriver': 'cgroupfs', 'cgroupRoot': cgroup_root,
        'failCgroupV1': False,   # 1.35+ refuses cgroup v1 unless told; this machine is cgroup v1 hybrid
        'failSwapOn': False,
        'containerRuntimeEndpoint': 'unix:///run/containerd/containerd.sock',
        'podLogsDir': '/var/log/pods',
        # a shared machine's disk and memory are not the node's: never evict, never collect images
        'evictionHard': {'memory.available': '1Mi', 'nodefs.available': '1%', 'nodefs.inodesFree': '1%',
                         'imagefs.available': '1%'},
        'imageGCHighThresholdPercent': 100, 'imageGCLowThresholdPercent': 99,
        'nodeStatusUpdateFrequency': '4s', 'syncFrequency': '10s',
        'resolvConf': '/etc/resolv.conf', 'maxPods': 110,
        'serializeImagePulls': False,
    }


# ------------------------------------------------------------------------------------------------------ up / down
def _write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, mode)


def up(args):
    state = os.path.abspath(args.state)
    kstate = os.path.abspath(args.kube_state)
    name = args.name
    progs = programs(args.version)
    if os.path.exists(os.path.join(state, 'unshare.pid')) and real._alive(int(open(os.path.join(state, 'unshare.pid')).read())):
        raise SystemExit('a node is already running in %s' % state)
    os.makedirs(state, exist_ok=True)
    for f in ('ready', 'failed'):
        if os.path.exists(os.path.join(state, f)):
            os.unlink(os.path.join(state, f))
    t0 = time.time()
    for sub in ('var-lib', 'run', 'var-log', 'logs', 'cni/bin', 'cni/net.d', 'bin', 'sysctl', 'dev-upper', 'dev-work'):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    images = build_images(os.path.join(state, 'images'), args.version)
    if args.device_plugin_image:
        if not args.nvml_inventory:
            raise SystemExit("--device-plugin-image needs --nvml-inventory (the GPUs of the image's NVML simulator)")
        images[args.device_plugin_image] = device_plugin_image(os.path.join(state, 'images'), args.device_plugin_image,
                                                               args.nvml_inventory)
    _write(os.path.join(state, 'bin', 'runc'), runc_wrapper(state), 0o755)
    _write(os.path.join(state, 'cni', 'net.d', '10-gpuops-lab.conflist'), json.dumps(cni_conf(kstate)))
    _write(os.path.join(state, 'cni', 'bin', 'gpuops-lab-net'), CNI_WRAPPER % {
        'python': sys.executable, 'cni': os.path.join(HERE, 'cni.py')}, 0o755)
    _write(os.path.join(state, 'containerd.toml'), containerd_config(state, progs))
    os.makedirs(os.path.join(state, 'certs.d'), exist_ok=True)
    for mirror in args.mirror or []:
        host, url = mirror.split('=', 1)
        _write(os.path.join(state, 'certs.d', host, 'hosts.toml'), HOSTS_TOML % {'url': url})
    for key, value in KERNEL_TUNABLES.items():
        _write(os.path.join(state, 'sysctl', key.replace('/', '.')), '%d\n' % value)
    cgroup_root = make_cgroup_root(name)
    port, healthz = real.free_port(), real.free_port()
    node_ip = host_ip()
    _write(os.path.join(state, 'kubelet.yaml'), json.dumps(kubelet_config(
        name, port, healthz, cgroup_root, node_ip, os.path.join(kstate, 'pki', 'ca.crt')), indent=1))
    kubeconfig = real.user_kubeconfig(kstate, 'system:node:' + name, ['system:nodes'])
    labels = ','.join(args.label or [])
    spec = {'name': name, 'version': args.version, 'programs': progs, 'images': images, 'port': port,
            'healthz_port': healthz, 'kubeconfig': kubeconfig, 'node_ip': node_ip, 'labels': labels, 'owner_pid': args.owner_pid,
            'taints': ','.join(args.taint or []), 'nvidia_devices': args.nvidia_devices,
            'cgroup_root': cgroup_root}
    _write(os.path.join(state, 'spec.json'), json.dumps(spec, indent=1))
    out = open(os.path.join(state, 'logs', 'node.log'), 'ab')
    cmd = ['unshare', '--pid', '--fork', '--kill-child', '--mount', '--mount-proc', '--propagation', 'private',
           sys.executable, os.path.abspath(__file__), 'serve', '--state', state]
    # the owner as a pidfd: the node's procfs shows only its own pid namespace, a pidfd works across namespaces
    fds = ()
    if args.owner_pid:
        fds = (os.pidfd_open(args.owner_pid),)
        cmd += ['--owner-fd', str(fds[0])]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, pass_fds=fds)
    for fd in fds:
        os.close(fd)
    _write(os.path.join(state, 'unshare.pid'), '%d\n' % proc.pid)
    end = time.time() + args.timeout
    while not os.path.exists(os.path.join(state, 'ready')):
        if proc.poll() is not None or os.path.exists(os.path.join(state, 'failed')) or time.time() > end:
            tail = _tail(state)
            down_state(state)
            raise SystemExit('node %s failed to start:\n%s' % (name, tail))
        time.sleep(0.1)
    try:
        _wait_ready(kstate, name, proc, end)
    except Exception as exc:  # pylint: disable=broad-except
        tail = _tail(state)
        down_state(state)
        raise SystemExit('node %s never became Ready: %s\n%s' % (name, exc, tail))
    _write(os.path.join(state, 'up-seconds'), '%.1f\n' % (time.time() - t0))
    log('node %s (kubelet %s) Ready in %.1f s' % (name, args.version, time.time() - t0))
    print(state)
    return 0


def _wait_ready(kstate, name, proc, end):
    """Until the Node is Ready; fails at once when the node's processes end."""
    from kubernetes import client
    api = client.CoreV1Api(real.api_client(os.path.join(kstate, 'kubeconfig')))
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError('the node stopped (unshare exit %s)' % proc.returncode)
        try:
            n = api.read_node(name)
            if any(c.type == 'Ready' and c.status == 'True' for c in (n.status.conditions or [])):
                return
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.3)
    raise RuntimeError('Node %s not Ready in time' % name)


def _tail(state):
    return real._tail(state, ('failed', 'logs/node.log', 'logs/containerd.log', 'logs/kubelet.log'))


def device_checkpoint(state):
    """The kubelet device manager's checkpoint of node STATE (its /var/lib/kubelet/device-plugins/
    kubelet_internal_checkpoint): its Data - PodDeviceEntries (pod UID, container, resource, the plugin's device IDs)
    and RegisteredDevices (the healthy devices by resource) -, or {} before the kubelet wrote one."""
    try:
        with open(os.path.join(state, 'var-lib', 'kubelet', 'device-plugins', 'kubelet_internal_checkpoint')) as f:
            return json.load(f).get('Data') or {}
    except (OSError, ValueError):
        return {}


def ns_pid(state):
    """The host pid of the node's first process (pid 1 in its namespace): unshare's only child. (Never read from inside
    the node: its procfs shows its own pid namespace only, where that process is 1.)"""
    with open(os.path.join(state, 'unshare.pid')) as f:
        pid = int(f.read())
    with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
        kids = [int(k) for k in f.read().split()]
    if len(kids) != 1 or 'node.py' not in real._cmdline(kids[0]) or state not in real._cmdline(kids[0]):
        raise RuntimeError('node of %s: no first process under unshare %d (children %s)' % (state, pid, kids))
    return kids[0]


def down_state(state, timeout=20):
    """Stop the node: SIGTERM to its first process (it stops the kubelet and containerd and exits; the kernel then
    kills every other process of the namespace), SIGKILL to unshare if that takes too long; remove its cgroups.
    Returns what was left (empty: nothing)."""
    pidfile = os.path.join(state, 'unshare.pid')
    if not os.path.exists(pidfile):
        return []
    pid = int(open(pidfile).read())
    host_pid = None
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
            kids = f.read().split()
        host_pid = int(kids[0]) if kids else None
    except OSError:
        pass
    nsino = _mntns(host_pid) if host_pid else None
    # hold the node's namespaces open while looking for what is left: a freed namespace's inode number is the lowest
    # free one, and the next namespaces made (a container of another node, started by a test running alongside) got
    # both numbers back once, and that container's process was reported as left by this node (CI of stop 50)
    held = _hold_namespaces(host_pid) if nsino else []
    if held and _mntns(host_pid) != nsino:
        nsino = None   # host_pid went (and its numbers were reused) between the two reads: nothing of it to look for
    if host_pid and real._alive(host_pid):
        os.kill(host_pid, signal.SIGTERM)
    end = time.time() + timeout
    while real._alive(pid) and time.time() < end:
        time.sleep(0.1)
    if real._alive(pid) and 'unshare' in real._cmdline(pid):
        os.kill(pid, signal.SIGKILL)   # --kill-child: its child gets SIGKILL, and with it the whole pid namespace
        time.sleep(0.5)
    left = []
    if nsino:
        end = time.time() + 10
        while True:
            left = [p for p in _pids() if _mntns(p) == nsino]
            if not left or time.time() > end:
                break
            time.sleep(0.2)
        left = ['process %d (%s)' % (p, real._cmdline(p)[:80]) for p in left]
    for fd in held:
        os.close(fd)
    try:
        spec = json.load(open(os.path.join(state, 'spec.json')))
        left += ['cgroup ' + d for d in remove_cgroup_root(spec['name'])]
    except OSError:
        pass
    os.unlink(pidfile)
    return left


def restart_containerd(state, timeout=60):
    """Restart the node's containerd (it re-reads its config; containers keep running under their shims)."""
    path = os.path.join(state, 'containerd-restarts')
    before = int(open(path).read()) if os.path.exists(path) else 0
    os.kill(ns_pid(state), signal.SIGHUP)
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and int(open(path).read() or 0) > before:
            return
        if os.path.exists(os.path.join(state, 'failed')):
            raise RuntimeError('node failed: %s' % open(os.path.join(state, 'failed')).read())
        time.sleep(0.1)
    raise RuntimeError('containerd not restarted within %d s' % timeout)


def _hold_namespaces(pid):
    """Open file descriptors on the process's mount and pid namespaces: while they are open the namespaces (and
    their inode numbers) live on, even after every process in them has gone."""
    fds = []
    for ns in ('mnt', 'pid'):
        try:
            fds.append(os.open('/proc/%d/ns/%s' % (pid, ns), os.O_RDONLY))
        except OSError:
            pass
    return fds


def _pids():
    return [int(p) for p in os.listdir('/proc') if p.isdigit()]


def _mntns(pid):
    """The process's mount and pid namespaces (a namespace's inode number can be reused as soon as it is freed: a
    node container started just after this node went got the node's mount namespace number once, and its systemd was
    taken for a leftover of the node; both numbers together identify the node's processes), or None."""
    try:
        return os.readlink('/proc/%d/ns/mnt' % pid), os.readlink('/proc/%d/ns/pid' % pid)
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------------ serve
def serve(args):
    """Inside the node's namespaces (pid 1 of its pid namespace): mounts, containerd, images, kubelet; then reap
    children until SIGTERM, the death of a daemon or of the owner."""
    state = os.path.abspath(args.state)
    spec = json.load(open(os.path.join(state, 'spec.json')))
    progs = spec['programs']
    stopping = []
    restart = []   # SIGHUP (node.py restart-containerd): restart containerd, as `systemctl restart containerd` would
    signal.signal(signal.SIGHUP, lambda *_a: restart.append(1))
    signal.signal(signal.SIGTERM, lambda *_a: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_a: stopping.append(1))
    procs = {}

    def start(name, cmd, env=None):
        out = open(os.path.join(state, 'logs', name + '.log'), 'ab')
        procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    try:
        for m in NODE_MOUNTS:
            src, dst = m.split(':')
            subprocess.run(['mount', '--bind', os.path.join(state, src), dst], check=True)
        # /run shared, as on a node whose init is systemd (every mount shared): a hostPath volume under it with
        # mountPropagation Bidirectional (the MPS control daemon's /run/nvidia/mps) needs it (containerd: `path ...
        # is mounted on "/run" but it is not a shared mount`). The namespace's mounts are private to the host's (unshare
        # --propagation private), so this peer group is the node's own: nothing reaches the machine's mounts.
        subprocess.run(['mount', '--make-rshared', '/run'], check=True)
        # the node's /dev: the host's devtmpfs under an overlay whose upper layer is STATE/dev-upper, so the device
        # nodes the lab makes (NVIDIA's, below) exist in the node only; pts, shm and mqueue fresh instances
        subprocess.run(['mount', '-t', 'overlay', 'gpuops-node-dev', '-o', 'lowerdir=/dev,upperdir=%s,workdir=%s' % (
            os.path.join(state, 'dev-upper'), os.path.join(state, 'dev-work')), '/dev'], check=True)
        subprocess.run(['mount', '-t', 'devpts', '-o', 'newinstance,ptmxmode=0666', 'devpts', '/dev/pts'], check=True)
        subprocess.run(['mount', '-t', 'tmpfs', '-o', 'mode=1777', 'shm', '/dev/shm'], check=True)
        make_nvidia_devices(spec.get('nvidia_devices', 0))
        for key in KERNEL_TUNABLES:
            subprocess.run(['mount', '--bind', os.path.join(state, 'sysctl', key.replace('/', '.')),
                            '/proc/sys/' + key], check=True)
        env = dict(os.environ)
        # containerd finds its shim on PATH: the lab's containerd-shim-runc-v2 2.3.4 before Debian's 1.6 one
        env['PATH'] = '%s:%s' % (os.path.dirname(progs['containerd-shim-runc-v2']), env.get('PATH', '/usr/bin:/bin'))
        # NVIDIA's container runtime (nvidia_toolkit), run by the shim with containerd's environment, reads the
        # node's config file, never the shared machine's /etc/nvidia-container-runtime
        env['NVIDIA_CTK_CONFIG_FILE_PATH'] = os.path.join(state, NVIDIA_RUNTIME_CONFIG)
        start('containerd', [progs['containerd'], '--config', os.path.join(state, 'containerd.toml')], env)
        sock = '/run/containerd/containerd.sock'
        _wait('containerd socket', lambda: os.path.exists(sock), 60, procs)
        restarts = 0
        for image, archive in sorted(spec['images'].items()):
            r = subprocess.run([progs['ctr'], '--address', sock, '-n', 'k8s.io', 'images', 'import',
                                '--snapshotter', 'overlayfs', '--platform', 'linux/amd64', archive],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError('ctr images import %s failed: %s%s' % (archive, r.stdout, r.stderr))
        cmd = [progs['kubelet'], '--config', os.path.join(state, 'kubelet.yaml'), '--hostname-override', spec['name'],
               '--node-ip', spec.get('node_ip', '127.0.0.1'), '--root-dir', '/var/lib/kubelet', '--v', '2']
        if spec['kubeconfig']:   # none: standalone (static pods only)
            cmd += ['--kubeconfig', spec['kubeconfig']]
        if spec['labels']:
            cmd += ['--node-labels', spec['labels']]
        if spec['taints']:
            cmd += ['--register-with-taints', spec['taints']]
        start('kubelet', cmd, env)
        with open(os.path.join(state, 'ready.tmp'), 'w') as f:
            json.dump({'pids': {n: p.pid for n, p in procs.items()}}, f)   # pids of the node's namespace
        os.replace(os.path.join(state, 'ready.tmp'), os.path.join(state, 'ready'))
        while not stopping:
            if restart:
                del restart[:]
                procs['containerd'].terminate()
                end = time.time() + 20
                while procs['containerd'].returncode is None and time.time() < end:
                    _reap(procs)
                    time.sleep(0.05)
                if os.path.exists(sock):
                    os.unlink(sock)
                start('containerd', [progs['containerd'], '--config', os.path.join(state, 'containerd.toml')], env)
                _wait('containerd socket', lambda: os.path.exists(sock), 60, procs)
                restarts += 1
                _write(os.path.join(state, 'containerd-restarts'), '%d\n' % restarts)
            _reap(procs)
            for n, p in procs.items():
                if p.returncode is not None:
                    raise RuntimeError('%s exited (%s); see %s' % (n, p.returncode,
                                                                   os.path.join(state, 'logs', n + '.log')))
            if args.owner_fd is not None and select.select([args.owner_fd], [], [], 0)[0]:
                log('owner pid %d is gone: stopping' % spec['owner_pid'])
                break
            time.sleep(0.3)
    except Exception as exc:  # pylint: disable=broad-except
        with open(os.path.join(state, 'failed'), 'w') as f:
            f.write('%s\n' % exc)
        log('ERROR: %s' % exc)
    real.stop(procs, ('kubelet', 'containerd'))
    return 0   # pid 1 leaves: the kernel kills the rest of the namespace


# The character devices NVIDIA's kernel modules make (major 195 is nvidia's; nvidia-uvm's and nvidia-caps' majors are
# allocated at load time, the values here are ones seen on real hosts). Opening them fails (ENXIO: no driver); they
# exist so that what stats them (containerd's device specs, CDI) finds a device, as on a GPU machine.
NVIDIA_UVM_MAJOR, NVIDIA_CAPS_MAJOR = 510, 508


def make_nvidia_devices(count):
    """In the node's /dev: nvidiactl, nvidia0..count-1, nvidia-uvm, nvidia-uvm-tools, nvidia-caps/nvidia-cap{1,2}."""
    if not count:
        return
    nodes = [('nvidiactl', 195, 255), ('nvidia-uvm', NVIDIA_UVM_MAJOR, 0), ('nvidia-uvm-tools', NVIDIA_UVM_MAJOR, 1),
             ('nvidia-caps/nvidia-cap1', NVIDIA_CAPS_MAJOR, 1), ('nvidia-caps/nvidia-cap2', NVIDIA_CAPS_MAJOR, 2)]
    nodes += [('nvidia%d' % i, 195, i) for i in range(count)]
    os.makedirs('/dev/nvidia-caps', exist_ok=True)
    for path, major, minor in nodes:
        # the host's /dev (the overlay's lower layer) may have one already: NVIDIA's library creates /dev/nvidiactl
        # when it runs as root without a driver (lab/tests/integration/test_gpu_info_real_driverless.py does). Removed
        # in the overlay only (a whiteout in the node's upper layer), then made as the node's own
        if os.path.lexists('/dev/' + path):
            os.unlink('/dev/' + path)
        os.mknod('/dev/' + path, 0o666 | 0o020000, os.makedev(major, minor))
        os.chmod('/dev/' + path, 0o666)


def _reap(procs):
    """pid 1 adopts every orphan of the namespace (shims, containers): collect them; note our own daemons' ends."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for p in procs.values():
            if p.pid == pid:
                p.returncode = os.waitstatus_to_exitcode(status)


def _wait(what, check, timeout, procs):
    end = time.time() + timeout
    while time.time() < end:
        _reap(procs)
        for n, p in procs.items():
            if p.returncode is not None:
                raise RuntimeError('%s exited (%s) while waiting for %s' % (n, p.returncode, what))
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError('timed out after %d s waiting for %s' % (timeout, what))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    p = sub.add_parser('up')
    p.add_argument('--kube-state', required=True)
    p.add_argument('--state', required=True)
    p.add_argument('--name', required=True)
    p.add_argument('--version', default=real.DEFAULT_VERSION, choices=real.VERSIONS)
    p.add_argument('--owner-pid', type=int, default=0)
    p.add_argument('--label', action='append')
    p.add_argument('--taint', action='append', help='KEY=VALUE:EFFECT, registered with the Node')
    p.add_argument('--nvidia-devices', type=int, default=0, help='make /dev/nvidia0..N-1 (and nvidiactl, nvidia-uvm, '
                   'nvidia-caps) in the node')
    p.add_argument('--device-plugin-image', help='also build and import the NVIDIA device-plugin image under this '
                   'name (nvidia-device-plugin, gpu-feature-discovery, config-manager on the NVML simulator)')
    p.add_argument('--nvml-inventory', help='the NVML simulator inventory baked into --device-plugin-image')
    p.add_argument('--mirror', action='append', help='HOST=URL: containerd pulls images named HOST/... from URL '
                   '(the lab registry, lab/node/registry.py)')
    p.add_argument('--timeout', type=int, default=180)
    p = sub.add_parser('serve')
    p.add_argument('--state', required=True)
    p.add_argument('--owner-fd', type=int)
    p = sub.add_parser('down')
    p.add_argument('--state', required=True)
    p = sub.add_parser('restart-containerd')
    p.add_argument('--state', required=True)
    p = sub.add_parser('images')
    p.add_argument('--out', required=True)
    p.add_argument('--version', default=real.DEFAULT_VERSION, choices=real.VERSIONS)
    args = ap.parse_args(argv)
    if args.cmd == 'up':
        return up(args)
    if args.cmd == 'serve':
        return serve(args)
    if args.cmd == 'down':
        left = down_state(os.path.abspath(args.state))
        for item in left:
            log('LEFT: %s' % item)
        return 1 if left else 0
    if args.cmd == 'restart-containerd':
        restart_containerd(os.path.abspath(args.state))
        return 0
    if args.cmd == 'images':
        for k, v in sorted(build_images(os.path.abspath(args.out), args.version).items()):
            print('%s %s' % (k, v))
        return 0
    return 2


if __name__ == '__main__':
    sys.exit(main())
