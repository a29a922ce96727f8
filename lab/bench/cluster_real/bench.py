#!/usr/bin/env python3
"""Benchmark: the cluster layer on upstream's real API server (lab/kube/real.py) with 100, 1,000 and 5,000 kwok GPU nodes.

One control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) for the whole run; the nodes
grow from size to size. The nodes are kwok nodes shaped like the lab's GPU nodes (lab/kube/real.py gpu_node: GFD
labels, nvidia.com/gpu capacity) in seven pools, one per sharing strategy the collection deploys through the API
(exclusive, time-slicing, mps, mig, gpushare, volcano, hami; gpu-operator is a Helm release from a local chart and
gpu-manager is refused, so neither is here). Every node's probe facts are given in the inventory (as
lab/bench/cluster_scale does), so no node is probed. The nodes carry a taint no stack tolerates
(gpuops.io/bench=scale:NoSchedule): the stacks' DaemonSets would otherwise get one fake pod per node each, and the
run would measure the DaemonSet controller, the scheduler and kwok instead of the collection. kwok renews each node's
Lease every --lease-seconds / 4 (default 600 s; kubelet's 40 s would be 500 Lease writes a second at 5,000 nodes).

Per size N (nodes created first, in bulk with 16 client threads; the time until kwok has made them all Ready is
reported):
  converge   playbooks/cluster.yml (the new nodes' labels; at the first size also every pool's stack)
  re-run     playbooks/cluster.yml again: the steady state. Target: 0 writes, changed=0.
  report     playbooks/report.yml (fleet report and gpu_share_report). Target at 5,000 nodes: under a minute.
  doctor     playbooks/doctor.yml --tags cluster -e gpuops_doctor_cluster=true (the doctor's cluster play)
Per run: controller CPU (user + sys of ansible-playbook and its children), wall time, the collection's API requests
(reads and writes, from the API server's audit log: the bench's client is in group gpuops:audit-reads, whose every
request lab/kube/audit-policy.yaml logs), changed tasks, the CPU time kube-apiserver and etcd used during the run
(/proc/PID/stat), and the API server's request latency over the run (apiserver_request_duration_seconds from its
/metrics, watches left out: mean and the bucket bound of the 99th percentile, all clients, so kwok's heartbeats are in
it too).
Marginal CPU per node = slope of the re-run's CPU between consecutive sizes.

  .venv/bin/python lab/bench/cluster_real/bench.py [--smoke] [--sizes 100,1000] [--upgrade-nodes 50] [--json FILE]
The default sizes are 100,1000 (22 minutes with the roll on the shared 2-core lab machine, load 13-20); 5,000 is
opt-in: --sizes 100,1000,5000 (make bench-scale; docs/benchmarks.md). --steps report,doctor measures those two
without cluster.yml before them (minutes at 5,000 nodes instead of an hour).
"""
import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as c  # noqa: E402

ROOT = c.ROOT
REAL = os.path.join(ROOT, 'lab', 'kube', 'real.py')
PY = os.path.join(c.VENV_BIN, 'python')
USER = 'gpuops-bench-scale'
READ_GROUP = 'gpuops:audit-reads'
WRITE_VERBS = ('create', 'update', 'patch', 'delete', 'deletecollection')
TAINT = {'key': 'gpuops.io/bench', 'value': 'scale', 'effect': 'NoSchedule'}


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


real = _load('gpuops_lab_kube_real', REAL)
# the one place GPU kwok nodes' stand-ins are named (lab/tests/gpu_kwok_nodes.py PAINTED)
gpu_kwok_nodes = _load('gpuops_lab_gpu_kwok_nodes', os.path.join(ROOT, 'lab', 'tests', 'gpu_kwok_nodes.py'))
# gpu_info's facts as the cluster benchmarks give them, plus what the fleet report prints (source, NVML status and driver)
NVML = {'source': 'nvml', 'nvml': {'status': 'ok', 'driver_version': '580.95.05'}}
A100 = dict(_load('gpuops_bench_cluster', os.path.join(ROOT, 'lab', 'bench', 'cluster', 'bench.py')).A100, **NVML)
T4 = dict(c.T4_PROBE_FACTS, **NVML)
GPUSHARE_IMAGES = {'extender_image': 'registry.example.com/acs/k8s-gpushare-schd-extender:86f6025',
                   'device_plugin_image': 'registry.example.com/acs/k8s-gpushare-plugin:45fb8b8'}
VOLCANO_CONF = {'actions': 'enqueue, allocate, backfill',
                'tiers': [{'plugins': [{'name': 'priority'}, {'name': 'gang'}]},
                          {'plugins': [{'name': 'drf'}, {'name': 'predicates'}]}]}
# pool -> (strategy, lab GPU node shape (real.GPU_NODES), probe facts, pool variables, extra node labels)
POOLS = [
    ('pool-excl', 'exclusive', 'kwok-t4-1', T4, {}, {}),
    ('pool-ts', 'time-slicing', 'kwok-t4-1', T4,
     {'gpu_sharing_stack_time_slicing': {'replicas': 4, 'rename_by_default': False}}, {}),
    ('pool-mps', 'mps', 'kwok-t4-1', T4, {'gpu_sharing_stack_mps': {'replicas': 8}}, {}),
    # what NVIDIA's MIG manager writes once it applied the geometry (no pod runs on a kwok node): painted,
    # gpu_kwok_nodes.PAINTED['nvidia-mig-manager'] (no real lab node runs the MIG manager); kwok_node publishes the
    # geometry's MIG devices as the device plugin published them on a real lab node (the role waits for both: MIGM-14)
    ('pool-mig', 'mig', 'kwok-a100-1', A100, {'gpu_sharing_stack_mig': {'strategy': 'single', 'devices': {'1g.10gb': 7}}},
     gpu_kwok_nodes.painted_mig_state()),
    ('pool-gpushare', 'gpushare', 'kwok-a100-1', A100, {'gpu_sharing_stack_gpushare': GPUSHARE_IMAGES}, {}),
    # Volcano 1.15's compatibility table ends at Kubernetes 1.35: a site on 1.37 accepts the untested version
    ('pool-volcano', 'volcano', 'kwok-t4-1', T4,
     {'gpu_sharing_stack_volcano': {'version': '1.15', 'accept_untested_kubernetes': True}}, {}),
    ('pool-hami', 'hami', 'kwok-t4-1', T4,
     {'gpu_sharing_stack_hami': {'device_split_count': 4, 'device_memory_scaling': 1.5}}, {}),
]


def log(msg):
    sys.stderr.write('cluster_real: %s\n' % msg)
    sys.stderr.flush()


def node_name(i, prefix='scale'):
    return '%s-%05d' % (prefix, i)


def pool_of(i, pools):
    """The pool of node i: the index modulo the number of pools (a node keeps its pool as the fleet grows)."""
    return pools[i % len(pools)]


def kwok_node(i, pools, prefix='scale'):
    """Node i as a kwok node shaped like the lab's GPU node of its pool, with the bench's taint."""
    pool = pool_of(i, pools)
    count, product, memory, cc, mig = real.GPU_NODES[pool[2]]
    doc = real.gpu_node(node_name(i, prefix), count, product, memory, cc, mig)
    doc['metadata']['labels'].update(pool[5])
    doc['metadata']['labels']['gpuops.io/lab'] = 'bench-' + prefix
    if pool[1] in ('gpushare', 'hami', 'volcano'):
        # these stacks' device plugins advertise their own resources, and the collection refuses a node that already
        # advertises nvidia.com/gpu from another device plugin: such a node looks as before its stack
        for k in ('capacity', 'allocatable'):
            doc['status'][k].pop('nvidia.com/gpu', None)
    if pool[1] == 'mig':
        # the geometry applied: what the kubelet of a real lab node published with NVIDIA's device plugin under the
        # collection's config of that strategy on that geometry (lab/node/recordings/gpu-nodes.json)
        mig_cfg = pool[4]['gpu_sharing_stack_mig']
        shape = real.RECORDED_NODES[pool[2]] + '-mig-' + mig_cfg['strategy']
        rec = real.load_recording()['shapes'].get(shape) or {}
        if (rec.get('mig_devices'), rec.get('gpus')) != (mig_cfg['devices'], count):
            raise SystemExit('pool %s: no recorded MIG shape %s with %s on %d GPUs (%s)'
                             % (pool[0], shape, mig_cfg['devices'], count, real.RECORDING))
        for k in ('capacity', 'allocatable'):
            doc['status'][k].pop('nvidia.com/gpu', None)
            doc['status'][k].update(rec[k])
    doc['spec'] = {'taints': [dict(TAINT)]}
    return doc


# ------------------------------------------------------------------------------------------------------ the cluster
class Cluster(object):
    def __init__(self, state, lease_seconds):
        self.state = state
        out = subprocess.run([PY, REAL, 'up', '--state', state, '--no-gpu-nodes', '--owner-pid', str(os.getpid()),
                              '--kwok-lease-seconds', str(lease_seconds)], capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise SystemExit('lab/kube/real.py up failed:\n%s\n%s' % (out.stdout[-3000:], out.stderr[-3000:]))
        self.admin = os.path.join(state, 'kubeconfig')
        with open(os.path.join(state, 'ready')) as f:
            ready = json.load(f)
        self.version = ready['version']
        self.pids = ready['pids']
        out = subprocess.run([PY, REAL, 'user', '--state', state, USER, '--group', 'system:masters',
                              '--group', READ_GROUP], capture_output=True, text=True, timeout=120, check=True)
        self.kubeconfig = out.stdout.strip().splitlines()[-1]
        self.audit = os.path.join(state, 'audit.log')

    def down(self):
        subprocess.run([PY, REAL, 'down', '--state', self.state], capture_output=True, timeout=120)

    def core(self):
        from kubernetes import client
        return client.CoreV1Api(real.api_client(self.admin))

    def cpu(self):
        """CPU seconds kube-apiserver and etcd used so far."""
        tck = os.sysconf('SC_CLK_TCK')
        out = {}
        for name in ('kube-apiserver', 'etcd', 'kwok'):
            with open('/proc/%d/stat' % self.pids[name]) as f:
                fields = f.read().rsplit(') ', 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / float(tck)
        return out

    def metrics(self):
        """{le: count} summed over apiserver_request_duration_seconds buckets, the sum and count, and 429s."""
        text = real.https_get(self.state, '/metrics', timeout=60).decode()
        buckets, total, count, throttled = {}, 0.0, 0.0, 0.0
        for line in text.splitlines():
            if 'verb="WATCH' in line or 'verb="CONNECT"' in line:
                continue  # long-running requests: a watch lasts as long as its client keeps it
            if line.startswith('apiserver_request_duration_seconds_bucket{'):
                le = re.search(r'le="([^"]+)"', line).group(1)
                buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(' ', 1)[1])
            elif line.startswith('apiserver_request_duration_seconds_sum{'):
                total += float(line.rsplit(' ', 1)[1])
            elif line.startswith('apiserver_request_duration_seconds_count{'):
                count += float(line.rsplit(' ', 1)[1])
            elif line.startswith('apiserver_request_total{') and 'code="429"' in line:
                throttled += float(line.rsplit(' ', 1)[1])
        return {'buckets': buckets, 'sum': total, 'count': count, '429': throttled}

    def audit_size(self):
        return os.path.getsize(self.audit)

    def events(self, start):
        time.sleep(0.5)  # blocking audit mode: a request's event is written before its response; margin for the last
        with open(self.audit, 'rb') as f:
            f.seek(start)
            data = f.read()
        out = []
        for line in data.splitlines():
            if b'"' + USER.encode() + b'"' not in line:
                continue
            ev = json.loads(line)
            if ev.get('user', {}).get('username') == USER:
                out.append(ev)
        return out


def latency(before, after):
    n = after['count'] - before['count']
    if n <= 0:
        return {'requests': 0, 'mean_ms': float('nan'), 'p99_ms': float('nan'), '429': 0}
    mean = (after['sum'] - before['sum']) / n * 1000
    bounds = sorted(((float(le), after['buckets'][le] - before['buckets'].get(le, 0.0))
                     for le in after['buckets']), key=lambda x: x[0])
    p99 = float('inf')
    for le, cum in bounds:
        if cum >= 0.99 * n:
            p99 = le * 1000
            break
    return {'requests': int(n), 'mean_ms': mean, 'p99_ms': p99, '429': int(after['429'] - before['429'])}


def create_nodes(cl, start, end, pools, threads=16):
    """Nodes start..end-1, created concurrently; returns (seconds to create, seconds until kwok has them Ready)."""
    from kubernetes import client
    api = cl.core()
    t0 = time.monotonic()

    def one(i):
        for attempt in range(5):
            try:
                api.create_node(kwok_node(i, pools))
                return
            except client.ApiException as exc:
                if exc.status == 409:
                    return
                if exc.status in (429, 500, 503) and attempt < 4:
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise

    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, range(start, end)))
    created = time.monotonic() - t0
    names = set(node_name(i) for i in range(0, end))
    deadline = time.monotonic() + 600
    while True:
        ready = 0
        for n in api.list_node(label_selector='gpuops.io/lab=bench-scale').items:  # the bench's own nodes
            if n.metadata.name in names and any(x.type == 'Ready' and x.status == 'True'
                                                for x in (n.status.conditions or [])):
                ready += 1
        if ready >= len(names):
            break
        if time.monotonic() > deadline:
            raise SystemExit('kwok made only %d of %d nodes Ready in 600 s' % (ready, len(names)))
        time.sleep(1)
    return created, time.monotonic() - t0


# ------------------------------------------------------------------------------------------------------ inventory
def inventory(n, pools, kubeconfig, control_plane=False, prefix='scale'):
    """Inventory of nodes 0..n-1: group gpu_nodes with one child group per pool (named after the pool, with
    ``prefix`` in front when it is not the bench's own), every node's probe facts given."""
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': PY}
    children = {}
    for i in range(n):
        p = pool_of(i, pools)
        group = (p[0] if prefix == 'scale' else '%s-%s' % (prefix, p[0])).replace('-', '_')
        children.setdefault(group, {'hosts': {}, 'vars': dict(
            {'gpuops_sharing_strategy': p[1]}, **p[4])})['hosts'][node_name(i, prefix)] = {'gpu_probe_facts': p[3]}
    return {'all': {'hosts': {'localhost': local},
                    'vars': dict(local, gpuops_kubeconfig=kubeconfig, gpuops_become=False,
                                 gpuops_scheduler_extender=False),
                    'children': {'gpu_nodes': {'children': children},
                                 'kube_control_plane': {'hosts': {'localhost': {}} if control_plane else {}}}}}


RECAP = re.compile(r'^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', re.M)


def playbook(cmd, profile=None):
    """ansible-playbook with the default output callback, ok and skipped results not printed (what an operator of a
    large fleet runs; the json callback's one document of every result costs seconds of CPU of its own at 1,000
    nodes). Returns (wall seconds, {host: (ok, changed, unreachable, failed)}, CompletedProcess)."""
    e = dict(os.environ)
    e.update({'ANSIBLE_COLLECTIONS_PATH': c.collections_path(), 'ANSIBLE_STDOUT_CALLBACK': 'ansible.builtin.default',
              'ANSIBLE_DISPLAY_OK_HOSTS': '0', 'ANSIBLE_DISPLAY_SKIPPED_HOSTS': '0', 'ANSIBLE_LOCALHOST_WARNING': '0',
              'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0', 'ANSIBLE_DEPRECATION_WARNINGS': '0',
              'ANSIBLE_RETRY_FILES_ENABLED': '0', 'ANSIBLE_NOCOLOR': '1', 'ANSIBLE_PIPELINING': '1'})
    pre = [PY, '-m', 'cProfile', '-o', profile] if profile else []
    t0 = time.monotonic()
    # its own process group: a benchmark stopped half-way stops the playbook and its workers too
    proc = subprocess.Popen(pre + [os.path.join(c.VENV_BIN, 'ansible-playbook')] + cmd, cwd=ROOT, env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=3600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - t0
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    recap = dict((m.group(1), tuple(int(m.group(i)) for i in range(2, 6))) for m in RECAP.finditer(p.stdout))
    return wall, recap, p


def run(cl, inv, book, args=(), profile=None):
    """One ansible-playbook run with every measurement. Returns a dict."""
    m0, a0, s0 = cl.metrics(), cl.cpu(), cl.audit_size()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, recap, p = playbook(['-i', inv, os.path.join(ROOT, 'playbooks', book)] + list(args), profile)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    a1, m1 = cl.cpu(), cl.metrics()
    evs = cl.events(s0)
    if p.returncode != 0 or not recap:
        raise SystemExit('%s failed (rc %s):\n%s\n%s' % (book, p.returncode, p.stdout[-4000:], p.stderr[-3000:]))
    writes = [e for e in evs if e['verb'] in WRITE_VERBS and 'dryRun=All' not in e['requestURI']]
    return {'cpu': (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 'wall': wall,
            'requests': len(evs), 'reads': len(evs) - len(writes), 'writes': len(writes),
            'write_uris': sorted(set('%s %s' % (e['verb'], e['requestURI'].split('?')[0]) for e in writes))[:5],
            'changed': sum(x[1] for x in recap.values()),
            'evictions': sum(1 for e in writes if (e.get('objectRef') or {}).get('subresource') == 'eviction'),
            'apiserver_cpu': a1['kube-apiserver'] - a0['kube-apiserver'],
            'etcd_cpu': a1['etcd'] - a0['etcd'], 'kwok_cpu': a1['kwok'] - a0['kwok'], 'latency': latency(m0, m1)}


# ------------------------------------------------------------------------------------------------------ the roll
def roll_play(nodes):
    """upgrade_driver.yml's roll play with its Kubernetes part only: the drain block and the uncordon task taken from
    the playbook as they are (same module arguments, serial, max_fail_percentage, module_defaults and variables), the
    node part (gpu_probe, nvidia_driver's unhold/upgrade/upgrade_check, the doctor) left out: a kwok node has no
    operating system to upgrade (lab/tests/upgrade_lab.py runs that part on node containers, three nodes)."""
    import yaml
    with open(os.path.join(ROOT, 'playbooks', 'upgrade_driver.yml')) as f:
        plays = yaml.safe_load(f)
    roll = [p for p in plays if p['name'] == 'Upgrade driver - one batch of nodes at a time'][0]
    by_name = dict((t['name'], t) for t in roll['tasks'])
    drain = dict(by_name['Mark, cordon, wait for GPU jobs and drain (a drain that does not finish stops the roll)'])
    drain.pop('when')
    restore = by_name['Uncordon the node and remove the mark']
    play = dict((k, roll[k]) for k in ('module_defaults', 'serial', 'max_fail_percentage', 'vars'))
    play.update({'name': 'upgrade_driver.yml roll, Kubernetes part', 'hosts': 'roll', 'gather_facts': False,
                 'become': False, 'tasks': [drain, restore]})
    play['vars'] = dict(play['vars'], gpuops_upgrade_before={'driver_version': '580.95.05', 'gpu_count': 1})
    return [play]


def roll(cl, n_nodes, tmp):
    """The roll over the first ``n_nodes`` nodes of pool-excl, each running two pods of a Deployment (evicted through
    the eviction API; the ReplicaSet makes new ones elsewhere). Returns the measurements."""
    import yaml
    from kubernetes import client
    names = [node_name(i) for i in range(0, n_nodes * len(POOLS), len(POOLS))][:n_nodes]
    api = cl.core()
    for name in names:
        api.patch_node(name, {'metadata': {'labels': {'gpuops.io/bench-roll': 'true'}}})
    apps = client.AppsV1Api(real.api_client(cl.admin))
    replicas = 2 * n_nodes
    apps.create_namespaced_deployment('default', {
        'metadata': {'name': 'bench-roll'},
        'spec': {'replicas': replicas, 'selector': {'matchLabels': {'app': 'bench-roll'}},
                 'template': {'metadata': {'labels': {'app': 'bench-roll'}},
                              'spec': {'nodeSelector': {'gpuops.io/bench-roll': 'true'},
                                       'tolerations': [dict(TAINT, operator='Equal')],
                                       'containers': [{'name': 'c', 'image': 'registry.example.com/train:1'}]}}}})
    deadline = time.monotonic() + 300
    while True:
        running = [p for p in api.list_namespaced_pod('default', label_selector='app=bench-roll').items
                   if p.status.phase == 'Running']
        if len(running) >= replicas:
            break
        if time.monotonic() > deadline:
            raise SystemExit('only %d of %d roll pods Running after 300 s' % (len(running), replicas))
        time.sleep(1)
    inv = os.path.join(tmp, 'inv-roll.json')
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': PY}
    with open(inv, 'w') as f:
        json.dump({'all': {'hosts': {'localhost': local}, 'vars': dict(local, gpuops_kubeconfig=cl.kubeconfig),
                           'children': {'roll': {'hosts': dict((x, {}) for x in names)}}}}, f)
    pb = os.path.join(tmp, 'roll.yml')
    with open(pb, 'w') as f:
        yaml.safe_dump(roll_play(names), f, sort_keys=False)
    r = run(cl, inv, pb, ['-e', 'gpuops_upgrade_driver_version=580.105.08'])
    left = [x.metadata.name for x in api.list_node(label_selector='gpuops.io/bench-roll=true').items
            if x.spec.unschedulable]
    if left:
        raise SystemExit('the roll left nodes cordoned: %s' % left)
    r.update({'nodes': n_nodes, 'pods': replicas})
    # the Deployment goes: later sizes measure the cluster without it
    apps.delete_namespaced_deployment('bench-roll', 'default')
    return r


# ------------------------------------------------------------------------------------------------------ the bench
def seed_cluster(cl):
    """Volcano's own scheduler ConfigMap, as a Volcano install has it (role gpu_sharing_stack merges into it)."""
    import yaml
    api = cl.core()
    api.create_namespace({'metadata': {'name': 'volcano-system'}})
    api.create_namespaced_config_map('volcano-system', {'metadata': {'name': 'volcano-scheduler-configmap'},
                                                        'data': {'volcano-scheduler.conf': yaml.safe_dump(VOLCANO_CONF)}})


STEPS = ('converge', 'rerun', 'report', 'doctor')


def measure_size(cl, n, have, pools, tmp, profile_dir=None, steps=STEPS):
    log('%d nodes: creating %d' % (n, n - have))
    created, ready = create_nodes(cl, have, n, pools)
    inv = os.path.join(tmp, 'inv-%d.json' % n)
    with open(inv, 'w') as f:
        json.dump(inventory(n, pools, cl.kubeconfig), f)
    doc_inv = os.path.join(tmp, 'inv-doctor-%d.json' % n)
    with open(doc_inv, 'w') as f:
        json.dump(inventory(n, pools, cl.kubeconfig, control_plane=True), f)
    res = {'n': n, 'pools': len(pools), 'create_s': created, 'ready_s': ready}
    log('%d nodes: created in %.0f s, Ready in %.0f s' % (n, created, ready))
    if 'converge' in steps:
        res['converge'] = run(cl, inv, 'cluster.yml')
        log('%d nodes: converge %.1f s CPU, %d writes' % (n, res['converge']['cpu'], res['converge']['writes']))
    if 'rerun' in steps:
        res['rerun'] = run(cl, inv, 'cluster.yml',
                           profile=os.path.join(profile_dir, 'cluster-rerun-%d.prof' % n) if profile_dir else None)
        log('%d nodes: re-run %.1f s CPU, %d writes, changed %d' % (
            n, res['rerun']['cpu'], res['rerun']['writes'], res['rerun']['changed']))
    if 'report' in steps:
        res['report'] = run(cl, doc_inv, 'report.yml',
                            profile=os.path.join(profile_dir, 'report-%d.prof' % n) if profile_dir else None)
        log('%d nodes: report %.1f s wall, %.1f s CPU' % (n, res['report']['wall'], res['report']['cpu']))
    if 'doctor' in steps:
        res['doctor'] = run(cl, doc_inv, 'doctor.yml', ['--tags', 'cluster', '-e', 'gpuops_doctor_cluster=true'])
        log('%d nodes: doctor %.1f s wall' % (n, res['doctor']['wall']))
    return res


def f1(x):
    return '%.1f' % x


def rows(results):
    out, prev = [], None
    for r in [x for x in results if 'rerun' in x]:
        n, rr = r['n'], r['rerun']
        marginal = '%.0f' % ((rr['cpu'] - prev['rerun']['cpu']) / (n - prev['n']) * 1000) if prev else '-'
        out.append([n, r['pools'], '%.0f / %.0f' % (r['create_s'], r['ready_s']),
                    f1(rr['cpu']), '%.0f' % (rr['cpu'] / n * 1000), marginal, f1(rr['wall']),
                    '%d / %d' % (rr['reads'], rr['writes']), '%.3f' % (rr['requests'] / float(n)),
                    f1(rr['requests'] / float(r['pools'])), rr['changed'],
                    '%s / %s' % (f1(rr['apiserver_cpu']), f1(rr['etcd_cpu'])),
                    '%.1f / %s' % (rr['latency']['mean_ms'], '%.0f' % rr['latency']['p99_ms'])])
        prev = r
    return out


def other_rows(results, key):
    out = []
    for r in [x for x in results if key in x]:
        x = r[key]
        out.append([r['n'], f1(x['cpu']), f1(x['wall']), '%d / %d' % (x['reads'], x['writes']), x['changed'],
                    '%s / %s' % (f1(x['apiserver_cpu']), f1(x['etcd_cpu'])),
                    '%.1f / %.0f' % (x['latency']['mean_ms'], x['latency']['p99_ms'])])
    return out


def markdown(results, rolled, a, secs):
    lines = ['## Cluster layer on the real API server: 100 to 5,000 kwok GPU nodes', '',
             '`lab/bench/cluster_real/bench.py --sizes %s`: upstream\'s kube-apiserver %s, etcd, controller-manager, '
             'scheduler and kwok (lab/kube/real.py) on this machine; the nodes are kwok nodes shaped like the lab\'s '
             'GPU nodes in %d pools, one per strategy (exclusive, time-slicing, mps, mig, gpushare, volcano, hami), '
             'probe facts given in the inventory. Controller CPU = user + sys of ansible-playbook and its children; '
             'API requests = the collection\'s own, from the audit log (its client is in group gpuops:audit-reads, '
             'every request logged); API server CPU = CPU time of kube-apiserver / etcd over the run; latency = '
             'apiserver_request_duration_seconds over the run (watches left out; every client, kwok\'s Lease renewals included; p99 is '
             'the histogram bucket\'s bound). One sample per size.'
             % (a.sizes, results[0]['version'] if results else '?', len(POOLS)), '',
             '**Steady state: cluster.yml re-run** (labels and every stack already in place; targets: 0 writes, '
             'changed=0, at most 20 ms controller CPU per extra node, requests per pool constant):', '']
    head = ['nodes', 'pools', 'create / Ready s', 'CPU s', 'CPU ms per node', 'marginal ms per node', 'wall s',
            'reads / writes', 'requests per node', 'requests per pool', 'changed', 'apiserver / etcd CPU s',
            'latency mean / p99 ms']
    lines += c.table(head, rows(results))
    head2 = ['nodes', 'CPU s', 'wall s', 'reads / writes', 'changed', 'apiserver / etcd CPU s', 'latency mean / p99 ms']
    lines += ['', '**Converge: cluster.yml on the new nodes** (at the first size also every pool\'s stack; one label '
              'patch per new node):', '']
    lines += c.table(head2, other_rows(results, 'converge'))
    lines += ['', '**report.yml** (fleet report and gpu_share_report; target at 5,000 nodes: under a minute):', '']
    lines += c.table(head2, other_rows(results, 'report'))
    lines += ['', '**doctor.yml, the cluster play** (`--tags cluster -e gpuops_doctor_cluster=true`):', '']
    lines += c.table(head2, other_rows(results, 'doctor'))
    if rolled and rolled.get('error'):
        lines += ['', '**upgrade_driver.yml roll, Kubernetes part**: failed at %d nodes: %s' % (rolled['fleet'],
                                                                                           rolled['error'])]
    elif rolled:
        r = rolled
        lines += ['', '**upgrade_driver.yml roll, Kubernetes part** (%d nodes of pool-excl in a fleet of %d, serial 1, '
                  'each node running %d pods of a Deployment: mark, cordon, drain through the eviction API, then '
                  'uncordon and unmark, the tasks taken from the playbook as they are; the node part (probe, driver '
                  'upgrade, reboot, checks) is left out: a kwok node has no operating system, and '
                  'lab/tests/upgrade_lab.py runs it on node containers):' % (r['nodes'], r['fleet'], r['pods'] // r['nodes']),
                  '']
        lines += c.table(['nodes', 'controller CPU s', 'CPU ms per node', 'wall s', 'wall s per node',
                          'waiting s per node (wall - CPU)', 'reads / writes', 'evictions', 'changed',
                          'apiserver / etcd CPU s'],
                         [[r['nodes'], f1(r['cpu']), '%.0f' % (r['cpu'] / r['nodes'] * 1000), f1(r['wall']),
                           '%.2f' % (r['wall'] / r['nodes']), '%.2f' % ((r['wall'] - r['cpu']) / r['nodes']),
                           '%d / %d' % (r['reads'], r['writes']), r['evictions'], r['changed'],
                           '%s / %s' % (f1(r['apiserver_cpu']), f1(r['etcd_cpu']))]])
    lines += ['', 'Run time of this benchmark: %.0f s.' % secs]
    return '\n'.join(lines) + '\n'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--smoke', action='store_true', help='7 nodes only (one per pool), no roll')
    ap.add_argument('--sizes', default='100,1000')
    ap.add_argument('--lease-seconds', type=int, default=600)
    ap.add_argument('--upgrade-nodes', type=int, default=50,
                    help='nodes of the driver-upgrade roll (run after the first size with 7x as many nodes; 0: none)')
    ap.add_argument('--profile', help='directory for cProfile files of the re-run and report runs')
    ap.add_argument('--json', help='write the raw results here')
    ap.add_argument('--keep', help='state directory to use and leave running (debugging; stop: real.py down)')
    ap.add_argument('--steps', default=','.join(STEPS),
                    help='runs per size, of %s (report and doctor need no converge before them)' % ', '.join(STEPS))
    ap.add_argument('--render', help='print the tables of a --json file of an earlier run (sizes it finished)')
    a = ap.parse_args()
    if a.render:
        with open(a.render) as f:
            doc = json.load(f)
        a.sizes = ','.join(str(r['n']) for r in doc['sizes'])
        sys.stdout.write(markdown(doc['sizes'], doc['roll'], a, float('nan')))
        return
    if a.smoke:
        a.sizes = '7'
    sizes = [int(s) for s in a.sizes.split(',')]
    if sizes != sorted(sizes):
        raise SystemExit('--sizes must grow: %s' % a.sizes)
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix='bench-creal-')
    state = a.keep or os.path.join(tmp, 'kube')
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
    cl = Cluster(state, a.lease_seconds)
    results = []
    try:
        seed_cluster(cl)
        have = 0
        rolled = None
        for n in sizes:
            r = measure_size(cl, n, have, POOLS, tmp, a.profile, steps=a.steps.split(','))
            r['version'] = cl.version
            results.append(r)
            have = n
            if a.upgrade_nodes and rolled is None and n >= a.upgrade_nodes * len(POOLS):
                log('%d nodes: upgrade_driver.yml roll over %d nodes' % (n, a.upgrade_nodes))
                try:
                    rolled = roll(cl, a.upgrade_nodes, tmp)
                    rolled['fleet'] = n
                except (Exception, SystemExit) as exc:  # pylint: disable=broad-except
                    # the sizes after it still run; the table says what went wrong
                    rolled = {'error': str(exc)[-2000:], 'fleet': n}
                    log('the roll failed: %s' % str(exc)[-2000:])
            if a.json:
                with open(a.json, 'w') as f:
                    json.dump({'sizes': results, 'roll': rolled}, f, indent=1)
    finally:
        if not a.keep:
            cl.down()
        shutil.rmtree(tmp, ignore_errors=True)
    text = markdown(results, rolled, a, time.monotonic() - t0)
    c.write_section('cluster_real', text)
    sys.stdout.write(text)


if __name__ == '__main__':
    main()
