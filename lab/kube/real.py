#!/usr/bin/env python3
"""A real Kubernetes control plane on 127.0.0.1 for the lab: upstream's etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (built by lab/go/build.sh from the Go module proxy) and kwok for fake nodes and pods.

    lab/kube/real.py up   --state DIR [--version 1.37] [--owner-pid PID] [--no-gpu-nodes] [--kwok-lease-seconds 600]
                                                                          start, print DIR/kubeconfig
    lab/kube/real.py down --state DIR                                                          stop, leave no process
    lab/kube/real.py build [--version 1.37]        build the program sets (kube-1.37, etcd, kwok) if missing
    lab/kube/real.py user --state DIR NAME [--group G]   a client certificate kubeconfig for user NAME (DIR/users/)

What `up` starts (one supervisor process, `real.py serve`, owns them all; `down` or the death of --owner-pid stops it,
and the supervisor stops its children, which also get SIGKILL from the kernel should the supervisor die):
  * etcd on two free loopback ports, data in DIR/etcd (no fsync: a test cluster);
  * kube-apiserver serving TLS on a free port (its own CA, DIR/pki), client-certificate authentication,
    a ServiceAccount token signer (RSA key pair), authorization Node,RBAC, the default admission plugins plus
    NodeRestriction, --allow-privileged (as kubeadm and RKE2 run it), and an audit policy (audit-policy.yaml beside
    this file) that writes every write request to DIR/audit.log (JSON lines, one event per request);
  * kube-controller-manager with one ServiceAccount per controller (--use-service-account-credentials) and
    kube-scheduler (DIR/scheduler-config.yaml unless `serve` is given another), no leader election;
  * kwok managing the nodes annotated kwok.x-k8s.io/node=fake: they become Ready (lease heartbeats) and pods bound
    to them become Running and Ready; kwok's own stage files come from its module (lab/go/kwok/programs @file);
  * unless --no-gpu-nodes: the lab's GPU nodes (GPU_NODES below): kwok nodes with every label gpu-feature-discovery
    wrote and every extended resource the kubelet published on a real lab node of the same GPUs (RECORDING), and
    the MIG ones (MIG_NODES: a recorded MIG shape each, its MIG devices as the kubelet published them).
Clients: DIR/kubeconfig is user gpuops-admin (group system:masters, a client certificate); `user` makes others, so
that a test's writes can be counted by user name in the audit log.
"""
import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import ssl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, 'lab', 'go', 'build.sh')
AUDIT_POLICY = os.path.join(HERE, 'audit-policy.yaml')
VERSIONS = ('1.37', '1.34', '1.33')
# Flags a minor needs beyond the common ones: 1.33 serves DRA (resource.k8s.io v1beta1/v1beta2) only with the
# DynamicResourceAllocation gate on for every component and the API versions switched on (k8s.io/kubernetes v1.33.13
# pkg/features/kube_features.go: beta, off by default), as strategy dra's kube_dra_enabled says a cluster does.
VERSION_FLAGS = {
    '1.33': {'gates': ['--feature-gates=DynamicResourceAllocation=true'],
             'apiserver': ['--runtime-config=resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true']},
}
DEFAULT_VERSION = os.environ.get('GPUOPS_KUBE_VERSION', '1.37')
ADMIN = 'gpuops-admin'
SERVICE_CIDR = '10.96.0.0/16'
SERVICE_IP = '10.96.0.1'

# The lab's GPU machines as kwok nodes: name -> (GPU count, product, memory MiB, compute capability, MIG capable).
# Their labels and extended resources are not written here: gpu_node takes every GFD label and every extended
# resource's capacity/allocatable from the recording of what a real lab node published for the same GPUs (RECORDING,
# made and checked by lab/tests/integration/test_node_daemonset_real.py); the tuple names the shape, and the
# recording must agree with it.
GPU_NODES = {
    'kwok-t4-1': (1, 'Tesla-T4', 15360, (7, 5), False),
    'kwok-t4-2': (1, 'Tesla-T4', 15360, (7, 5), False),
    'kwok-a100-1': (8, 'NVIDIA-A100-SXM4-80GB', 81920, (8, 0), True),
    'kwok-h100-1': (8, 'NVIDIA-H100-80GB-HBM3', 81559, (9, 0), True),
}
RECORDING = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'node', 'recordings',
                                          'gpu-nodes.json'))
# recorded shape -> (NVML simulator inventory, GPU count): the GPUs a real lab node ran with when it was recorded
RECORDED_SHAPES = {'t4x1': ('t4.json', 1), 'a100x8': ('hgx-a100-80gb.json', 8), 'h100x8': ('h100-real-580.json', 8),
                   'a100x8-mig-single': ('hgx-a100-80gb.json', 8), 'h100x2-mig-mixed': ('h100-mig.json', 2),
                   'a100x2-time-slicing': ('hgx-a100-80gb.json', 2), 'a100x2-mps': ('hgx-a100-80gb.json', 2),
                   'p100x1': ('p100.json', 1), 'h100x1-mig-single': ('h100-mig.json', 1),
                   't4x1-time-slicing': ('t4.json', 1)}
# the MIG shapes: shape -> (MIG strategy of GFD and of the device plugin, the collection's gpu_sharing_stack_mig
# devices, the MIG instances every GPU gets or None: the inventory's own). a100x8-mig-single is the geometry the
# collection's MIG tests apply (seven 1g.10gb per GPU); h100x2-mig-mixed is h100-mig.json as it is (the inventory of
# the DRA kwok node kwok-dra-h100-1: GPU 0 3g.40gb + 2x 1g.10gb + a GPU instance without compute instance, GPU 1 MIG on
# without instances); h100x1-mig-single is the MIG node of the driver-upgrade lab (lab/upgrade/nvml-h100-mig.json: one
# H100, 3g.40gb at placements 0 and 4, the pool's gpu_node_sharing_mig_devices {'3g.40gb': 2}) under the single
# strategy.
RECORDED_MIG = {'a100x8-mig-single': ('single', {'1g.10gb': 7}, [{'profile': '1g.10gb'}] * 7),
                'h100x2-mig-mixed': ('mixed', {'3g.40gb': 1, '1g.10gb': 2}, None),
                'h100x1-mig-single': ('single', {'3g.40gb': 2}, [{'profile': '3g.40gb', 'placement': 0},
                                                                {'profile': '3g.40gb', 'placement': 4}])}
# the shared pools: shape -> (strategy, replicas): GFD with the pool's config the collection renders and what the
# kubelet published with the pool's device plugin - time-slicing: the collection's own DaemonSet's plugin on the
# real node (GPUs x replicas); mps: nothing (the shape's not_published: the plugin stops at the MPS daemon's health
# check, the node's nvidia-cuda-mps-control finding no control daemon: NVIDIA's MPS daemon cannot start one, its
# nvidia-smi refuses the NVML simulator).
# Made by the same run as the others (test_node_daemonset_real.py: its node runs the time-slicing pool of 2 A100s
# with 3 replicas; t4x1-time-slicing, the demo's and the lifecycle tests' T4 pool of 4 replicas, is GFD and the
# plugin in pods with the T4's inventory and the config the collection renders for that pool).
RECORDED_SHARING = {'a100x2-time-slicing': ('time-slicing', 3), 'a100x2-mps': ('mps', 3),
                    't4x1-time-slicing': ('time-slicing', 4)}
RECORDED_NODES = {'kwok-t4-1': 't4x1', 'kwok-t4-2': 't4x1', 'kwok-a100-1': 'a100x8', 'kwok-h100-1': 'h100x8'}
# The lab's MIG machines as kwok nodes, each of a recorded MIG shape (RECORDED_MIG): every GFD label of the shape's
# strategy and the MIG devices the kubelet published with NVIDIA's plugin under the collection's MIG config (single:
# nvidia.com/gpu 56; mixed: nvidia.com/mig-<profile>). For tests that read MIG nodes: nothing about them is painted.
MIG_NODES = {'kwok-a100-mig-1': 'a100x8-mig-single', 'kwok-h100-mig-1': 'h100x2-mig-mixed'}
# The lab's DRA machines as kwok nodes (issue #36, section 3), each of a recorded shape: a node of a dra pool runs
# NVIDIA's DRA kubelet plugin and neither the device plugin nor GFD (the dra stack keeps them off), so it carries the
# labels the collection's node layer writes (SHAPE_LABELS, nvidia.com/gpu.present), no nvidia.com/* extended
# resource, and the ResourceSlice the plugin publishes (lab/kube/dra_slices.py LAB_NODES: the same inventory). They
# used to be the device-plugin nodes above: kwok-t4-1 published nvidia.com/gpu and a slice of the same GPU, and
# kwok-h100-1 (8 whole H100s) the slice of two H100s in MIG mode - nodes that cannot exist. Label gpuops.io/lab is
# 'real-dra', so a test selecting the device-plugin nodes (gpuops.io/lab=real) never sees them.
DRA_NODES = {'kwok-dra-t4-1': 't4x1', 'kwok-dra-t4-2': 't4x1', 'kwok-dra-a100-1': 'a100x8',
             'kwok-dra-h100-1': 'h100x2-mig-mixed'}
# the GFD labels that name a shape (a GPU_NODES tuple, the scale fleets' tuples): those the collection's node layer
# writes too. A kwok node carries every label of its recorded shape, not only these.
SHAPE_LABELS = ('nvidia.com/gpu.count', 'nvidia.com/gpu.product', 'nvidia.com/gpu.memory',
                'nvidia.com/gpu.compute.major', 'nvidia.com/gpu.compute.minor', 'nvidia.com/mig.capable')


def recorded_inventory(shape):
    """The simulator inventory of a recorded shape: the file's GPUs, the first one repeated (new UUID, serial, PCI
    bus id, minor) up to the count when the file has fewer (the real H100's capture has one GPU); a MIG shape's GPUs
    with its MIG instances (RECORDED_MIG)."""
    name, count = RECORDED_SHAPES[shape]
    with open(os.path.join(os.path.dirname(RECORDING), '..', '..', 'nvml_sim', 'inventories', name)) as f:
        inv = json.load(f)
    gpus = inv['gpus'][:count]
    while len(gpus) < count:
        i = len(gpus)
        g = dict(inv['gpus'][0])
        g['uuid'] = g['uuid'][:-2] + '%02x' % i
        g['serial'] = str(int(g['serial']) + i)
        g['pci_bus_id'] = '00000000:%02X:00.0' % (0x10 + i)
        g['minor_number'] = i
        gpus.append(g)
    mig = RECORDED_MIG.get(shape)
    if mig and mig[2] is not None:
        gpus = [dict(g, mig_mode=True, mig_instances=mig[2]) for g in gpus]
    inv['gpus'] = gpus
    return inv


def load_recording():
    with open(RECORDING) as f:
        return json.load(f)


KWOK_ANNOTATION = 'kwok.x-k8s.io/node'


def log(msg):
    sys.stderr.write('[lab/kube/real] %s\n' % msg)
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------------ binaries
def built_dir(name, build=True):
    cmd = ['bash', BUILD] + ([] if build else ['--check']) + [name]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        if not build:
            return None
        raise SystemExit('lab/go/build.sh %s failed (exit %d):\n%s' % (name, proc.returncode, proc.stderr[-4000:]))
    if build and proc.stderr.strip():
        sys.stderr.write(proc.stderr)
    return proc.stdout.strip().splitlines()[-1]


def binaries(version, build=True):
    """{program: path} for the control plane at minor ``version``; builds missing sets unless build=False."""
    if version not in VERSIONS:
        raise SystemExit('version must be one of %s; got %s' % (', '.join(VERSIONS), version))
    out = {}
    for name in ('kube-' + version, 'etcd', 'kwok'):
        if name.startswith('kube-') and os.environ.get('GPUOPS_KUBE_BINDIR'):
            d = os.environ['GPUOPS_KUBE_BINDIR']  # programs built elsewhere (debugging a build by hand)
        else:
            d = built_dir(name, build)
        if d is None:
            raise SystemExit('program set %s is not built (run lab/kube/real.py build --version %s)' % (name, version))
        for f in os.listdir(d):
            if not f.startswith('.'):
                out[f] = os.path.join(d, f)
    return out


# ------------------------------------------------------------------------------------------------------ PKI
def _pki():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID
    return x509, hashes, serialization, ec, rsa, NameOID


def _write_key(path, key):
    _x509, _h, serialization, _ec, _rsa, _oid = _pki()
    with open(path, 'wb') as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _write_cert(path, cert):
    _x509, _h, serialization, _ec, _rsa, _oid = _pki()
    with open(path, 'wb') as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))


def _load_ca(pki):
    x509, _h, serialization, _ec, _rsa, _oid = _pki()
    with open(os.path.join(pki, 'ca.crt'), 'rb') as f:
        cert = x509.load_pem_x509_certificate(f.read())
    with open(os.path.join(pki, 'ca.key'), 'rb') as f:
        key = serialization.load_pem_private_key(f.read(), None)
    return cert, key


def issue(pki, base, cn, orgs=(), server_names=None):
    """A certificate signed by the cluster CA: client (cn, orgs) or serving (server_names: DNS names / IPs)."""
    import ipaddress
    x509, hashes, _s, ec, _rsa, NameOID = _pki()
    from cryptography.x509.oid import ExtendedKeyUsageOID
    ca_cert, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(ca_cert.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if server_names:
        sans = []
        for n in server_names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = b.sign(ca_key, hashes.SHA256())
    _write_key(os.path.join(pki, base + '.key'), key)
    _write_cert(os.path.join(pki, base + '.crt'), cert)
    return os.path.join(pki, base + '.crt'), os.path.join(pki, base + '.key')


def make_pki(pki):
    x509, hashes, serialization, ec, rsa, NameOID = _pki()
    os.makedirs(pki, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'gpuops-lab-kubernetes-ca')])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_key(os.path.join(pki, 'ca.key'), key)
    _write_cert(os.path.join(pki, 'ca.crt'), cert)
    issue(pki, 'apiserver', 'kube-apiserver', server_names=[
        '127.0.0.1', 'localhost', SERVICE_IP, 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc',
        'kubernetes.default.svc.cluster.local'])
    # the ServiceAccount token signer
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(os.path.join(pki, 'sa.key'), sa)
    with open(os.path.join(pki, 'sa.pub'), 'wb') as f:
        f.write(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo))


def kubeconfig(path, server, pki, cert, key, name='gpuops-lab'):
    doc = {'apiVersion': 'v1', 'kind': 'Config', 'current-context': name,
           'clusters': [{'name': name, 'cluster': {'server': server,
                                                  'certificate-authority': os.path.join(pki, 'ca.crt')}}],
           'users': [{'name': name, 'user': {'client-certificate': cert, 'client-key': key}}],
           'contexts': [{'name': name, 'context': {'cluster': name, 'user': name, 'namespace': 'default'}}]}
    with open(path, 'w') as f:
        json.dump(doc, f, indent=1)  # JSON is YAML
    os.chmod(path, 0o600)
    return path


def user_kubeconfig(state, user, groups=()):
    """A kubeconfig for ``user`` (client certificate signed by the cluster CA) in STATE/users/."""
    pki = os.path.join(state, 'pki')
    users = os.path.join(state, 'users')
    os.makedirs(users, exist_ok=True)
    safe = ''.join(c if c.isalnum() or c in '-_.' else '_' for c in user)
    cert, key = _issue_into(pki, users, safe, user, groups)
    with open(os.path.join(state, 'server')) as f:
        server = f.read().strip()
    return kubeconfig(os.path.join(users, safe + '.kubeconfig'), server, pki, cert, key)


def _issue_into(pki, outdir, base, cn, orgs):
    cert, key = issue(pki, '.tmp-' + base, cn, orgs)
    dst_c, dst_k = os.path.join(outdir, base + '.crt'), os.path.join(outdir, base + '.key')
    os.replace(cert, dst_c)
    os.replace(key, dst_k)
    return dst_c, dst_k


# ------------------------------------------------------------------------------------------------------ processes
# Listening ports are taken below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 here). A
# port the kernel gives to bind(port 0) is from that range, which every outgoing connection draws from too: between
# this process closing it and the daemon binding it (seconds under load), a client's connection could take it (CI-like
# run, session 23: kube-controller-manager "bind: address already in use" on 49665). Below the range only listeners
# take ports: a random one, checked free by binding it, is reused by nothing but another lab process picking the same
# number within those seconds (one in several thousand per pick).
PORT_SPAN = 12000


def free_port(rng=None):
    import random
    rng = rng or random.SystemRandom()
    try:
        with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top, bottom = low - 1, max(1024, low - PORT_SPAN)
    for _ in range(200):
        port = rng.randint(bottom, top)
        s = socket.socket()
        try:
            s.bind(('127.0.0.1', port))
        except OSError:
            continue
        finally:
            s.close()
        return port
    raise RuntimeError('no free port in %d-%d on 127.0.0.1 after 200 tries' % (bottom, top))


def _pdeathsig():
    """In the child: SIGKILL when the supervisor dies, whatever killed it."""
    import ctypes
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def https_get(state, path, timeout=5):
    ctx = ssl.create_default_context(cafile=os.path.join(state, 'pki', 'ca.crt'))
    ctx.load_cert_chain(os.path.join(state, 'pki', 'admin.crt'), os.path.join(state, 'pki', 'admin.key'))
    with open(os.path.join(state, 'server')) as f:
        server = f.read().strip()
    with urllib.request.urlopen(server + path, context=ctx, timeout=timeout) as r:
        return r.read()


def wait_for(what, check, timeout, procs):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        for name, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError('%s exited (%s) while waiting for %s' % (name, p.returncode, what))
        try:
            if check():
                return
        except Exception as exc:  # pylint: disable=broad-except
            last = exc
        time.sleep(0.2)
    raise RuntimeError('timed out after %d s waiting for %s (last error: %s)' % (timeout, what, last))


def scheduler_config(state, path):
    with open(path, 'w') as f:
        json.dump({'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration',
                   'clientConnection': {'kubeconfig': os.path.join(state, 'scheduler.kubeconfig')},
                   'leaderElection': {'leaderElect': False}}, f, indent=1)
    return path


def kwok_config(state, bins):
    """kwok's stages (fast node initialisation, lease heartbeats, fast pod lifecycle) from kwok's own module."""
    stages = os.path.join(os.path.dirname(bins['kwok']), 'files')
    out = []
    for root, _dirs, files in os.walk(stages):
        for f in sorted(files):
            if f.endswith('.yaml') and 'kustomization' not in f:
                out.append(os.path.join(root, f))
    if not out:
        raise RuntimeError('kwok stage files missing under %s (lab/go/kwok/programs @file lines)' % stages)
    return out


def _flags(version, part):
    return list(VERSION_FLAGS.get(version, {}).get(part, []))


def serve(args):
    """Run the control plane in the foreground until SIGTERM/SIGINT or until --owner-pid is gone."""
    state = os.path.abspath(args.state)
    bins = binaries(args.version, build=False)
    pki = os.path.join(state, 'pki')
    logs = os.path.join(state, 'logs')
    os.makedirs(logs, exist_ok=True)
    procs = {}
    stopping = []

    def stop(*_a):
        stopping.append(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def start(name, cmd):
        out = open(os.path.join(logs, name + '.log'), 'ab')
        procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       preexec_fn=_pdeathsig, cwd=state)
        with open(os.path.join(state, 'pids'), 'a') as f:
            f.write('%s %d\n' % (name, procs[name].pid))

    def teardown():
        stop(procs, ('kwok', 'kube-scheduler', 'kube-controller-manager', 'kube-apiserver', 'etcd'))

    try:
        ec, ep, port = free_port(), free_port(), free_port()
        server = 'https://127.0.0.1:%d' % port
        with open(os.path.join(state, 'server'), 'w') as f:
            f.write(server + '\n')
        start('etcd', [bins['etcd'], '--name', 'lab', '--data-dir', os.path.join(state, 'etcd'),
                       '--listen-client-urls', 'http://127.0.0.1:%d' % ec,
                       '--advertise-client-urls', 'http://127.0.0.1:%d' % ec,
                       '--listen-peer-urls', 'http://127.0.0.1:%d' % ep,
                       '--initial-advertise-peer-urls', 'http://127.0.0.1:%d' % ep,
                       '--initial-cluster', 'lab=http://127.0.0.1:%d' % ep,
                       '--unsafe-no-fsync', '--log-level', 'warn', '--quota-backend-bytes', str(2 << 30)])
        start('kube-apiserver', [
            bins['kube-apiserver'], '--etcd-servers', 'http://127.0.0.1:%d' % ec,
            '--bind-address', '127.0.0.1', '--advertise-address', '127.0.0.1', '--secure-port', str(port),
            '--tls-cert-file', os.path.join(pki, 'apiserver.crt'),
            '--tls-private-key-file', os.path.join(pki, 'apiserver.key'),
            '--client-ca-file', os.path.join(pki, 'ca.crt'),
            '--service-account-issuer', 'https://kubernetes.default.svc.cluster.local',
            '--service-account-key-file', os.path.join(pki, 'sa.pub'),
            '--service-account-signing-key-file', os.path.join(pki, 'sa.key'),
            '--service-cluster-ip-range', SERVICE_CIDR,
            '--authorization-mode', 'Node,RBAC', '--enable-admission-plugins', 'NodeRestriction',
            '--allow-privileged=true', '--endpoint-reconciler-type', 'none',
            # as kubeadm sets them: the lab's real nodes (lab/node) are reached at their InternalIP (names resolve
            # nowhere), with a client certificate the kubelets verify against the cluster's CA
            '--kubelet-preferred-address-types', 'InternalIP,ExternalIP,Hostname',
            '--kubelet-client-certificate', os.path.join(pki, 'apiserver-kubelet-client.crt'),
            '--kubelet-client-key', os.path.join(pki, 'apiserver-kubelet-client.key'),
            '--audit-policy-file', AUDIT_POLICY, '--audit-log-path', os.path.join(state, 'audit.log'),
            '--audit-log-format', 'json', '--audit-log-mode', 'blocking', '--audit-log-maxsize', '0',
            '--profiling=false', '--v', '1'] + _flags(args.version, 'gates') + _flags(args.version, 'apiserver'))
        wait_for('kube-apiserver /readyz', lambda: https_get(state, '/readyz') == b'ok', args.timeout, procs)
        common = ['--leader-elect=false', '--profiling=false', '--v', '1']
        start('kube-controller-manager', [
            bins['kube-controller-manager'], '--kubeconfig', os.path.join(state, 'controller-manager.kubeconfig'),
            '--authentication-kubeconfig', os.path.join(state, 'controller-manager.kubeconfig'),
            '--authorization-kubeconfig', os.path.join(state, 'controller-manager.kubeconfig'),
            '--bind-address', '127.0.0.1', '--secure-port', str(free_port()),
            '--service-account-private-key-file', os.path.join(pki, 'sa.key'),
            '--root-ca-file', os.path.join(pki, 'ca.crt'), '--use-service-account-credentials=true',
            '--service-cluster-ip-range', SERVICE_CIDR, '--concurrent-daemonset-syncs', '4',
            '--node-monitor-grace-period', '10m'] + common + _flags(args.version, 'gates'))
        start('kube-scheduler', [
            bins['kube-scheduler'], '--config', args.scheduler_config or scheduler_config(
                state, os.path.join(state, 'scheduler-config.yaml')),
            '--authentication-kubeconfig', os.path.join(state, 'scheduler.kubeconfig'),
            '--authorization-kubeconfig', os.path.join(state, 'scheduler.kubeconfig'),
            '--bind-address', '127.0.0.1', '--secure-port', str(free_port()), '--v', '1'] + _flags(args.version, 'gates'))
        kcmd = [bins['kwok'], '--kubeconfig', os.path.join(state, 'kwok.kubeconfig'),
                '--manage-all-nodes=false', '--manage-nodes-with-annotation-selector', KWOK_ANNOTATION + '=fake',
                '--server-address', '127.0.0.1:%d' % free_port(), '--node-ip', '127.0.0.1',
                '--cidr', '10.244.0.1/16', '--node-lease-duration-seconds', str(args.kwok_lease_seconds)]
        for c in kwok_config(state, bins):
            kcmd += ['--config', c]
        start('kwok', kcmd)
        with open(os.path.join(state, 'ready.tmp'), 'w') as f:
            json.dump({'server': server, 'version': args.version, 'pid': os.getpid(),
                       'pids': {n: p.pid for n, p in procs.items()}}, f)
        os.replace(os.path.join(state, 'ready.tmp'), os.path.join(state, 'ready'))
        while not stopping:
            for name, p in procs.items():
                if p.poll() is not None:
                    raise RuntimeError('%s exited (%s); see %s' % (name, p.returncode,
                                                                   os.path.join(logs, name + '.log')))
            if args.owner_pid and not _alive(args.owner_pid):
                log('owner pid %d is gone: stopping' % args.owner_pid)
                break
            time.sleep(0.5)
    except Exception as exc:  # pylint: disable=broad-except
        with open(os.path.join(state, 'failed'), 'w') as f:
            f.write('%s\n' % exc)
        log('ERROR: %s' % exc)
        teardown()
        return 1
    teardown()
    return 0


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().split(') ', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


# ------------------------------------------------------------------------------------------------------ objects
def gpu_node(name, count, product, memory, cc, mig):
    """A kwok GPU node: every label GFD wrote and every extended resource's capacity/allocatable the kubelet published
    on a real lab node of the same GPUs (RECORDING); the shape's tuple must agree with it (a drift fails here, naming
    both). A node of GPU_NODES takes its recorded shape (RECORDED_NODES); any other name (the scale test's and the
    benchmarks' fleets) the recorded shape without MIG devices or sharing whose labels are the tuple's, and no such
    shape fails, naming the shapes there are."""
    shapes = load_recording()['shapes']
    want = {'nvidia.com/gpu.count': str(count), 'nvidia.com/gpu.product': product,
            'nvidia.com/gpu.memory': str(memory), 'nvidia.com/gpu.compute.major': str(cc[0]),
            'nvidia.com/gpu.compute.minor': str(cc[1]), 'nvidia.com/mig.capable': 'true' if mig else 'false'}
    if name in RECORDED_NODES:
        rec = shapes[RECORDED_NODES[name]]
    else:
        found = [r for r in shapes.values() if not r.get('mig_strategy') and not r.get('sharing_strategy')
                 and {k: r['labels'].get(k) for k in SHAPE_LABELS} == want]
        if not found:
            raise SystemExit('%s: no recorded shape has the labels %s (recorded: %s in %s)'
                             % (name, want, ', '.join(sorted(shapes)), RECORDING))
        rec = found[0]
    got = {k: rec['labels'].get(k) for k in SHAPE_LABELS}
    if got != want:
        raise SystemExit('GPU_NODES[%s] %s disagrees with the recording %s (%s)' % (name, want, got, RECORDING))
    return recorded_node(name, rec)


def recorded_node(name, rec):
    """A kwok node of the recorded shape ``rec`` (a value of RECORDING's shapes, or its key): all its GFD labels, all
    its extended resources."""
    if isinstance(rec, str):
        rec = load_recording()['shapes'][rec]
    # nvidia.com/gpu.present is NFD's/the operator's label, not GFD's (GFD-05): the lab's, as the node layer writes it
    labels = {'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64',
              'type': 'kwok', 'nvidia.com/gpu.present': 'true', 'gpuops.io/lab': 'real'}
    labels.update(rec['labels'])
    base = {'cpu': '64', 'memory': '512Gi', 'pods': '110'}
    return {'apiVersion': 'v1', 'kind': 'Node',
            'metadata': {'name': name, 'labels': labels, 'annotations': {KWOK_ANNOTATION: 'fake'}},
            'status': {'capacity': dict(base, **rec['capacity']), 'allocatable': dict(base, **rec['allocatable'])}}


def layer_node(name, rec, lab=None):
    """A kwok node of the recorded shape ``rec`` (or its key) as the collection's node layer leaves it, before any
    sharing stack: recorded_node less every GFD label but SHAPE_LABELS and nvidia.com/gpu.present, and less every
    extended resource; ``lab``: its gpuops.io/lab label (none: a test's node)."""
    if isinstance(rec, str):
        rec = load_recording()['shapes'][rec]
    node = recorded_node(name, rec)
    keep = set(SHAPE_LABELS) | {'nvidia.com/gpu.present'}
    labels = dict((k, v) for k, v in node['metadata']['labels'].items()
                  if (not k.startswith('nvidia.com/') or k in keep) and k != 'gpuops.io/lab')
    if lab:
        labels['gpuops.io/lab'] = lab
    node['metadata']['labels'] = labels
    for field in ('capacity', 'allocatable'):
        for r in rec[field]:
            node['status'][field].pop(r)
    return node


def dra_node(name, shape):
    """A kwok node of a dra pool (DRA_NODES): layer_node, no extended resource (the DRA plugin publishes a slice)."""
    return layer_node(name, shape, lab='real-dra')


def api_client(kubeconfig_path):
    from kubernetes import client, config
    return client.ApiClient(configuration=_conf(kubeconfig_path, config, client))


def _conf(path, config, client):
    c = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=c)
    return c


def create_nodes(state, nodes):
    from kubernetes import client
    api = client.CoreV1Api(api_client(os.path.join(state, 'kubeconfig')))
    for n in nodes:
        api.create_node(n)


def wait_nodes_ready(state, names, timeout=60):
    from kubernetes import client
    api = client.CoreV1Api(api_client(os.path.join(state, 'kubeconfig')))
    end = time.time() + timeout
    while time.time() < end:
        ready = set()
        for n in api.list_node().items:
            if any(c.type == 'Ready' and c.status == 'True' for c in (n.status.conditions or [])):
                ready.add(n.metadata.name)
        if set(names) <= ready:
            return
        time.sleep(0.3)
    raise RuntimeError('nodes not Ready after %d s: %s' % (timeout, sorted(set(names) - ready)))


def marker_setup(state):
    """The object audit markers read (ConfigMap default/gpuops-audit-mark) and a bearer token that may read only it
    (ServiceAccount default/gpuops-audit-marker; STATE/marker.token): Ansible's url lookup, which tests use to mark
    the audit log from inside a play, sends no client certificate."""
    from kubernetes import client
    api = api_client(os.path.join(state, 'kubeconfig'))
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_config_map('default', {'metadata': {'name': 'gpuops-audit-mark'}})
    core.create_namespaced_service_account('default', {'metadata': {'name': 'gpuops-audit-marker'}})
    rbac.create_namespaced_role('default', {'metadata': {'name': 'gpuops-audit-marker'}, 'rules': [
        {'apiGroups': [''], 'resources': ['configmaps'], 'resourceNames': ['gpuops-audit-mark'], 'verbs': ['get']}]})
    rbac.create_namespaced_role_binding('default', {
        'metadata': {'name': 'gpuops-audit-marker'},
        'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role', 'name': 'gpuops-audit-marker'},
        'subjects': [{'kind': 'ServiceAccount', 'name': 'gpuops-audit-marker', 'namespace': 'default'}]})
    tok = core.create_namespaced_service_account_token('gpuops-audit-marker', 'default',
                                                       {'spec': {'expirationSeconds': 7 * 86400}})
    with open(os.path.join(state, 'marker.token'), 'w') as f:
        f.write(tok.status.token)
    os.chmod(os.path.join(state, 'marker.token'), 0o600)


# ------------------------------------------------------------------------------------------------------ up / down
def up(args):
    state = os.path.abspath(args.state)
    binaries(args.version, build=not args.no_build)  # built (or found) before anything starts
    if os.path.exists(os.path.join(state, 'supervisor.pid')):
        pid = int(open(os.path.join(state, 'supervisor.pid')).read())
        if _alive(pid):
            raise SystemExit('a cluster is already running in %s (pid %d)' % (state, pid))
    os.makedirs(state, exist_ok=True)
    for f in ('ready', 'failed', 'pids', 'audit.log', 'server'):
        if os.path.exists(os.path.join(state, f)):
            os.unlink(os.path.join(state, f))
    pki = os.path.join(state, 'pki')
    t0 = time.time()
    if not os.path.exists(os.path.join(pki, 'ca.crt')):
        make_pki(pki)
    for base, cn, orgs in (('admin', ADMIN, ['system:masters']),
                           ('controller-manager', 'system:kube-controller-manager', []),
                           ('scheduler', 'system:kube-scheduler', []),
                           ('kwok', 'kwok-controller', ['system:masters']),
                           # the API server's client certificate towards kubelets (lab/node), as kubeadm names it
                           ('apiserver-kubelet-client', 'kube-apiserver-kubelet-client', ['system:masters'])):
        if not os.path.exists(os.path.join(pki, base + '.crt')):
            issue(pki, base, cn, orgs)
    cmd = [sys.executable, os.path.abspath(__file__), 'serve', '--state', state, '--version', args.version,
           '--timeout', str(args.timeout)]
    if args.owner_pid:
        cmd += ['--owner-pid', str(args.owner_pid)]
    if args.scheduler_config:
        cmd += ['--scheduler-config', os.path.abspath(args.scheduler_config)]
    cmd += ['--kwok-lease-seconds', str(args.kwok_lease_seconds)]
    out = open(os.path.join(state, 'supervisor.log'), 'ab')
    sup = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           start_new_session=True)
    with open(os.path.join(state, 'supervisor.pid'), 'w') as f:
        f.write('%d\n' % sup.pid)
    # kubeconfigs need the port, which serve picks: wait for the server file
    end = time.time() + args.timeout
    while not os.path.exists(os.path.join(state, 'server')):
        if sup.poll() is not None or time.time() > end:
            raise SystemExit('control plane failed to start: %s' % _tail(state))
        time.sleep(0.05)
    time.sleep(0.05)
    with open(os.path.join(state, 'server')) as f:
        server = f.read().strip()
    for base in ('admin', 'controller-manager', 'scheduler', 'kwok'):
        kubeconfig(os.path.join(state, 'kubeconfig' if base == 'admin' else base + '.kubeconfig'), server, pki,
                   os.path.join(pki, base + '.crt'), os.path.join(pki, base + '.key'))
    while not os.path.exists(os.path.join(state, 'ready')):
        if sup.poll() is not None or os.path.exists(os.path.join(state, 'failed')) or time.time() > end:
            down_state(state)
            raise SystemExit('control plane failed to start: %s' % _tail(state))
        time.sleep(0.1)
    try:
        # the object audit markers read (tests' marker GETs answer 200; audit-policy.yaml logs them)
        marker_setup(state)
    except Exception:
        down_state(state)
        raise
    if not args.no_gpu_nodes:
        try:
            create_nodes(state, [gpu_node(n, *spec) for n, spec in sorted(GPU_NODES.items())]
                         + [recorded_node(n, shape) for n, shape in sorted(MIG_NODES.items())]
                         + [dra_node(n, shape) for n, shape in sorted(DRA_NODES.items())])
            wait_nodes_ready(state, sorted(GPU_NODES) + sorted(MIG_NODES) + sorted(DRA_NODES), timeout=args.timeout)
        except Exception:
            down_state(state)
            raise
    with open(os.path.join(state, 'up-seconds'), 'w') as f:
        f.write('%.1f\n' % (time.time() - t0))
    log('control plane %s up at %s in %.1f s' % (args.version, server, time.time() - t0))
    print(os.path.join(state, 'kubeconfig'))
    return 0


def stop(procs, names):
    """Stop the processes ``procs[name]`` in the order of ``names``: SIGTERM, 10 s, then SIGKILL."""
    for name in names:
        p = procs.get(name)
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _tail(state, files=('failed', 'supervisor.log', 'logs/kube-apiserver.log', 'logs/etcd.log')):
    """The last 3,000 characters of each of ``files`` (paths in ``state``) that exists, for a failure message."""
    out = []
    for f in files:
        p = os.path.join(state, f)
        if os.path.exists(p):
            with open(p, errors='replace') as fh:
                out.append('--- %s\n%s' % (f, fh.read()[-3000:]))
    return '\n'.join(out)


def down_state(state, timeout=30):
    """Stop the supervisor of ``state`` (it stops its children), then make sure none of them is left."""
    pidfile = os.path.join(state, 'supervisor.pid')
    if not os.path.exists(pidfile):
        return False
    pid = int(open(pidfile).read())
    if _alive(pid) and os.path.abspath(__file__) in _cmdline(pid):
        os.kill(pid, signal.SIGTERM)
        end = time.time() + timeout
        while _alive(pid) and time.time() < end:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    # children (PDEATHSIG covers a killed supervisor; this covers anything still there)
    children = []
    if os.path.exists(os.path.join(state, 'pids')):
        for line in open(os.path.join(state, 'pids')):
            name, cpid = line.split()
            cpid = int(cpid)
            children.append(cpid)
            if _alive(cpid) and state in _cmdline(cpid):
                os.kill(cpid, signal.SIGKILL)

    def exiting(c):
        # still ours: its command line names the state, or is already empty (a process whose memory is released in
        # the middle of its exit reads an empty cmdline while it is not yet a zombie; a test found one so, under load)
        return _alive(c) and (state in _cmdline(c) or _cmdline(c) == '')
    # SIGTERM from the supervisor, SIGKILL (ours, or PDEATHSIG's when the supervisor was killed) are delivered
    # asynchronously: return once every child is gone, so that a caller that looks right after `down` finds none
    end = time.time() + 15
    while [c for c in children if exiting(c)] and time.time() < end:
        time.sleep(0.05)
    os.unlink(pidfile)
    return True


def _cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return f.read().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
        return ''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    for name in ('up', 'serve'):
        p = sub.add_parser(name)
        p.add_argument('--state', required=True)
        p.add_argument('--version', default=DEFAULT_VERSION, choices=VERSIONS)
        p.add_argument('--owner-pid', type=int, default=0)
        p.add_argument('--timeout', type=int, default=180)
        p.add_argument('--scheduler-config')
        # kwok renews each node's Lease every quarter of this (kwok v0.8.0). 600 s (a renewal every 150 s), not
        # kubelet's 40 s: the node lifecycle controller's grace period here is 10 min, no test reads a kwok node's
        # Lease, and at 40 s ten nodes' renewals were a third of an idle plane's CPU (docs/lab.md, session 22)
        p.add_argument('--kwok-lease-seconds', type=int, default=600)
        if name == 'up':
            p.add_argument('--no-gpu-nodes', action='store_true')
            p.add_argument('--no-build', action='store_true')
    p = sub.add_parser('down')
    p.add_argument('--state', required=True)
    p = sub.add_parser('build')
    p.add_argument('--version', default=DEFAULT_VERSION, choices=VERSIONS)
    p = sub.add_parser('user')
    p.add_argument('--state', required=True)
    p.add_argument('name')
    p.add_argument('--group', action='append', default=[])
    args = ap.parse_args(argv)
    if args.cmd == 'up':
        return up(args)
    if args.cmd == 'serve':
        return serve(args)
    if args.cmd == 'down':
        stopped = down_state(os.path.abspath(args.state))
        log('stopped' if stopped else 'nothing running in %s' % args.state)
        return 0
    if args.cmd == 'build':
        for k, v in sorted(binaries(args.version).items()):
            print('%s %s' % (k, v))
        return 0
    if args.cmd == 'user':
        print(user_kubeconfig(os.path.abspath(args.state), args.name, args.group))
        return 0
    return 2


if __name__ == '__main__':
    sys.exit(main())
