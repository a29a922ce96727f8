#!/usr/bin/env python3
"""LAB ONLY (make demo): read an ansible-playbook JSON log (ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json).

    summary.py LOG --print "TASK NAME" [--print ...]   print the msg (a list of lines) of those debug tasks
    summary.py LOG --recap [--strict]                  print the per-host recap; --strict: exit 1 when any host
                                                       (localhost included) changed, failed or was unreachable
    summary.py --audit AUDIT_LOG --since LINES [--strict]
                                  the write requests the playbooks' client (user gpuops-admin) sent to the lab's API
                                  server after the first LINES lines of its audit log (lab/kube/real.py writes every
                                  write request there; dryRun requests are left out); --strict: exit 1 when any
    summary.py --cluster KUBECONFIG   the nodes and pods as the lab's API server holds them
    summary.py --containers KUBECONFIG [--real-state DIR] [--strict]
                                  per pool and node: which pods ran a container (a real node: the kubelet's container
                                  statuses from containerd - started, exit code - and the validation pod's log lines
                                  naming the devices it saw; the exact error of a container that failed) and which
                                  were only scheduled (a kwok node: no container); with --real-state (real_nodes.py's
                                  state): the MIG node's host-process device plugin, and per validation pod the devices
                                  the kubelet allocated, their CDI device nodes and whether the container saw exactly
                                  those; --strict: exit 1 when a real node ran no container or a validation pod saw
                                  other devices
"""
import argparse
import json
import os
import sys


def load(path):
    text = open(path).read()
    # the JSON callback prints one document; anything before it (warnings) is skipped
    return json.loads(text[text.index('{'):])


ADMIN = 'gpuops-admin'   # lab/kube/real.py's admin client, the kubeconfig the playbooks use


def audit_writes(path, since):
    """[(verb, resource, namespace/name)] of the admin's write requests after line ``since`` of the audit log."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if i < since or not line.strip():
                continue
            e = json.loads(line)
            if e.get('user', {}).get('username') != ADMIN or 'dryRun=' in e.get('requestURI', ''):
                continue
            ref = e.get('objectRef', {})
            name = '/'.join(x for x in (ref.get('namespace'), ref.get('name')) if x)
            resource = ref.get('resource', '') + ('/' + ref['subresource'] if ref.get('subresource') else '')
            out.append((e.get('verb'), resource, name))
    return out


def cluster(kubeconfig):
    """Print the nodes (Ready, GPU capacity, a few labels) and the pods on them, read from the API server."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'kube'))
    import real  # lab/kube/real.py: the client of a state's kubeconfig
    from kubernetes import client
    core = client.CoreV1Api(real.api_client(kubeconfig))
    gpu_keys = ('nvidia.com/gpu', 'aliyun.com/gpu-mem', 'aliyun.com/gpu-count')
    shown = ('gpuops.io/sharing-strategy', 'nvidia.com/gpu.product', 'nvidia.com/gpu.count',
             'nvidia.com/device-plugin.config', 'nvidia.com/mig.config')
    print('%-10s %-6s %-28s %s' % ('NODE', 'READY', 'GPU CAPACITY', 'LABELS (some of them)'))
    for n in sorted(core.list_node().items, key=lambda n: n.metadata.name):
        ready = any(c.type == 'Ready' and c.status == 'True' for c in (n.status.conditions or []))
        cap = ','.join('%s=%s' % (k, v) for k, v in sorted((n.status.capacity or {}).items()) if k in gpu_keys)
        labels = ','.join('%s=%s' % (k, v) for k, v in sorted((n.metadata.labels or {}).items())
                          if k in shown)
        print('%-10s %-6s %-28s %s' % (n.metadata.name, ready, cap or '-', labels or '-'))
    pods = core.list_pod_for_all_namespaces().items
    print('%d pods: %s' % (len(pods), ', '.join('%s %s' % (phase, count) for phase, count in sorted(
        {p.status.phase: sum(1 for q in pods if q.status.phase == p.status.phase) for p in pods}.items()))))
    for p in sorted(pods, key=lambda p: (p.spec.node_name or '', p.metadata.namespace, p.metadata.name)):
        print('  %-10s %-9s %s/%s' % (p.spec.node_name or '(none)', p.status.phase, p.metadata.namespace,
                                      p.metadata.name))


KWOK_ANNOTATION = 'kwok.x-k8s.io/node'
VALIDATION_MARK = 'gpuops-lab validation: '   # lab/demo/real_nodes.py VALIDATION_SCRIPT


def container_line(c):
    """One container status: (ran, text)."""
    st = c.state
    if st.running is not None:
        return True, '%s running since %s' % (c.name, st.running.started_at)
    if st.terminated is not None:
        t = st.terminated
        return bool(c.container_id), '%s exited %s (%s)%s' % (c.name, t.exit_code, t.reason, ', restarts %d'
                                                              % c.restart_count if c.restart_count else '')
    if st.waiting is not None:
        last = c.last_state.terminated if c.last_state is not None else None
        ran = last is not None and bool(c.container_id or last.container_id)
        return ran, '%s waiting: %s%s' % (c.name, st.waiting.reason, '; last exit %s, restarts %d' % (
            last.exit_code, c.restart_count) if last is not None else '')
    return False, '%s: no state' % c.name


def error_line(core, pod, c):
    """The last log line of a failed container naming an error (its previous run's when it restarted)."""
    from kubernetes.client.rest import ApiException
    for previous in (False, True):
        try:
            text = core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace, container=c.name,
                                                previous=previous) or ''
        except ApiException:
            continue
        lines = [ln for ln in text.splitlines() if 'error' in ln.lower() or 'failed' in ln.lower()]
        if lines:
            line = lines[-1].strip()
            return line if len(line) <= 500 else line[:150] + ' ... ' + line[-340:]
    return None


def _node():
    """lab/node/node.py, for what a real node's state directory holds (its kubelet's device checkpoint)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'node'))
    import node  # pylint: disable=import-outside-toplevel
    return node


DEVICE_NODES_MARK = 'device nodes: '   # the validation script's line of the /dev/nvidia* character devices it saw


def _cdi_devices(state):
    """The node's CDI spec (lab/node/node.py nvidia_toolkit: nvidia-ctk's, kind nvidia.com/gpu): (the device nodes of
    every container, {device name: its device nodes}), paths relative to /dev."""
    import yaml
    with open(os.path.join(state, 'run', 'cdi', 'nvidia.yaml')) as f:
        spec = yaml.safe_load(f)

    def nodes(edits):
        return sorted(n['path'][len('/dev/'):] for n in (edits or {}).get('deviceNodes') or [])
    return nodes(spec.get('containerEdits')), {d['name']: nodes(d.get('containerEdits')) for d in spec['devices']}


def allocation_line(state, pod, log):
    """What the kubelet allocated to the validation pod on a real node (its checkpoint: the plugin's device IDs), the
    CDI device NVIDIA's runtime resolves each to (envvar strategy: NVIDIA_VISIBLE_DEVICES holds the ID, a GPU or MIG
    UUID; a time-slicing replica <uuid>::<n> is its GPU) and its device nodes in the node's CDI spec, against the device
    nodes the container listed: (ok, text); (True, None) when the pod got no device-plugin device (DRA)."""
    entries = [e for e in _node().device_checkpoint(state).get('PodDeviceEntries') or []
               if e.get('PodUID') == pod.metadata.uid]
    if not entries:
        return True, None
    ids = sorted(set(i for e in entries for v in (e.get('DeviceIDs') or {}).values() for i in v))
    common, devices = _cdi_devices(state)
    names = sorted(set(i.split('::')[0] for i in ids))
    want = set(common)
    for n in names:
        want.update(devices.get(n, ['<no CDI device %s>' % n]))
    seen = [ln[len(VALIDATION_MARK + DEVICE_NODES_MARK):].split() for ln in log.splitlines()
            if ln.startswith(VALIDATION_MARK + DEVICE_NODES_MARK)]
    # the other name of the same device in the spec (nvidia-ctk names each by UUID and by index, <gpu>:<mig> for MIG)
    alias = ['%s (= %s)' % (n, ', '.join(k for k, v in sorted(devices.items()) if v == devices.get(n)
                                         and k not in (n, 'all'))) for n in names]
    ok = bool(seen) and sorted(seen[-1]) == sorted(want)
    return ok, 'the kubelet allocated %s %s; CDI device nvidia.com/gpu=%s: %s; %s' % (
        ', '.join(sorted(set(e['ResourceName'] for e in entries))), ' '.join(ids), '; '.join(alias),
        ' '.join(sorted(want)), 'the container saw exactly these' if ok else 'the container saw %s: MISMATCH' % (
            ' '.join(seen[-1]) if seen else 'no device-nodes line'))


def containers(kubeconfig, real_state=None):
    """Per pool (the node label gpuops.io/sharing-pool) and node: real (a kubelet registered it) or kwok, the GPU
    resources and ResourceSlices it publishes, and each pod on it: which containers ran (container statuses the
    kubelet read from containerd) and what the validation pods printed. With real_state (lab/demo/real_nodes.py's
    state directory): for each validation pod that got device-plugin
    devices what the kubelet allocated and whether the container saw exactly those devices' nodes.
    Returns (the real nodes that ran nothing, the validation pods that saw other devices than allocated)."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'kube'))
    import real
    from kubernetes import client
    api = real.api_client(kubeconfig)
    core = client.CoreV1Api(api)
    try:
        slices = client.CustomObjectsApi(api).list_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices')
    except client.ApiException:
        slices = {'items': []}
    pods = core.list_pod_for_all_namespaces().items
    idle, wrong = [], []
    real_doc = {}
    if real_state:
        with open(os.path.join(real_state, 'real-nodes.json')) as f:
            real_doc = json.load(f)
    nodes = sorted(core.list_node().items, key=lambda n: ((n.metadata.labels or {}).get('gpuops.io/sharing-pool', ''),
                                                          n.metadata.name))
    for n in nodes:
        name, labels = n.metadata.name, n.metadata.labels or {}
        kwok = (n.metadata.annotations or {}).get(KWOK_ANNOTATION) == 'fake'
        pool = labels.get('gpuops.io/sharing-pool', '-')
        gpu = ', '.join('%s=%s' % kv for kv in sorted((n.status.allocatable or {}).items())
                        if '/' in kv[0] and not kv[0].startswith('hugepages'))
        sl = [s for s in slices.get('items', []) if s.get('spec', {}).get('nodeName') == name]
        print('%s  pool %s (%s)  %s' % (name, pool, labels.get('gpuops.io/sharing-strategy', '-'),
                                       'KWOK node: no kubelet, pods only scheduled' if kwok else
                                       'REAL node: kubelet %s, %s' % (n.status.node_info.kubelet_version,
                                                                      n.status.node_info.container_runtime_version)))
        gfd = sorted(k for k in labels if k.startswith('nvidia.com/'))
        print('    allocatable: %s; nvidia.com labels: %d%s; ResourceSlices: %s' % (
            gpu or 'no extended resource', len(gfd), ' (%s=%s)' % ('nvidia.com/gpu.product', labels.get(
                'nvidia.com/gpu.product')) if gfd else '',
            ', '.join('%s %d devices' % (s['spec']['driver'], len(s['spec'].get('devices') or [])) for s in sl)
            or 'none'))
        node_state = ((real_doc.get('nodes') or {}).get(name) or {}).get('state')
        ran_any = False
        for p in sorted((p for p in pods if p.spec.node_name == name), key=lambda p: (p.metadata.namespace,
                                                                                       p.metadata.name)):
            statuses = (p.status.init_container_statuses or []) + (p.status.container_statuses or [])
            if kwok:
                print('    %-9s %s/%s: scheduled only (kwok says %s; no container)' % (
                    p.status.phase, p.metadata.namespace, p.metadata.name, p.status.phase))
                continue
            lines = [container_line(c) for c in statuses]
            ran = any(r for r, _t in lines)
            ran_any = ran_any or ran
            print('    %-9s %s/%s: %s' % (p.status.phase, p.metadata.namespace, p.metadata.name,
                                          'RAN a container' if ran else 'no container ran'))
            for c, (r, text) in zip(statuses, lines):
                print('        %s' % text)
                bad = (c.state.terminated is not None and c.state.terminated.exit_code) or (
                    c.state.waiting is not None and c.state.waiting.reason not in ('PodInitializing',
                                                                                    'ContainerCreating'))
                if bad:
                    err = error_line(core, p, c)
                    if err:
                        print('          error: %s' % err)
                    elif c.state.waiting is not None and c.state.waiting.message:
                        print('          %s' % c.state.waiting.message[:500])
            if 'validation' in p.metadata.name or (p.metadata.labels or {}).get('gpuops.io/sharing-scope') == 'validation':
                try:
                    log = core.read_namespaced_pod_log(p.metadata.name, p.metadata.namespace) or ''
                except client.ApiException as exc:
                    log = 'no log: %s' % exc.reason
                for ln in log.splitlines():
                    if ln.startswith(VALIDATION_MARK):
                        print('          log: %s' % ln[len(VALIDATION_MARK):])
                if node_state and ran:
                    ok, text = allocation_line(node_state, p, log)
                    if text:
                        print('          %s' % text)
                    if not ok:
                        wrong.append('%s/%s' % (p.metadata.namespace, p.metadata.name))
        if not kwok and not ran_any:
            idle.append(name)
    pending = [p for p in pods if not p.spec.node_name]
    if pending:
        print('not scheduled (no node has what they ask):')
    for p in sorted(pending, key=lambda p: (p.metadata.namespace, p.metadata.name)):
        why = [c.message for c in p.status.conditions or [] if c.type == 'PodScheduled' and c.message]
        print('    %-9s %s/%s: %s' % (p.status.phase, p.metadata.namespace, p.metadata.name, (why or ['-'])[0][:300]))
    return idle, wrong


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('log', nargs='?')
    ap.add_argument('--audit')
    ap.add_argument('--since', type=int, default=0)
    ap.add_argument('--cluster')
    ap.add_argument('--containers')
    ap.add_argument('--real-state', help='with --containers: lab/demo/real_nodes.py\'s state directory')
    ap.add_argument('--print', action='append', default=[], dest='tasks')
    ap.add_argument('--recap', action='store_true')
    ap.add_argument('--strict', action='store_true')
    a = ap.parse_args()
    if a.cluster:
        cluster(a.cluster)
        return 0
    if a.containers:
        idle, wrong = containers(a.containers, a.real_state)
        if idle:
            print('real nodes on which no container ran: %s' % ', '.join(idle), file=sys.stderr)
        if wrong:
            print('validation pods that saw other devices than the kubelet allocated: %s' % ', '.join(wrong),
                  file=sys.stderr)
        return 1 if a.strict and (idle or wrong) else 0
    if a.audit:
        writes = audit_writes(a.audit, a.since)
        print('%d write requests from %s to the API server' % (len(writes), ADMIN))
        for w in writes:
            print('  %s %s %s' % w)
        return 1 if a.strict and writes else 0
    doc = load(a.log)
    for want in a.tasks:
        for play in doc['plays']:
            for task in play['tasks']:
                if task['task']['name'] != want:
                    continue
                for host, res in sorted(task['hosts'].items()):
                    if res.get('skipped'):
                        continue
                    msg = res.get('msg', '')
                    lines = msg if isinstance(msg, list) else str(msg).splitlines()
                    if want.startswith('Print the findings'):
                        print('--- %s' % host)
                    print('\n'.join(line for line in lines if line.strip()))
    if a.recap:
        bad = []
        for host, s in sorted(doc['stats'].items()):
            print('%-12s ok=%-3d changed=%-3d failed=%-3d unreachable=%-3d skipped=%d'
                  % (host, s.get('ok', 0), s.get('changed', 0), s.get('failures', 0), s.get('unreachable', 0),
                     s.get('skipped', 0)))
            if s.get('changed', 0) or s.get('failures', 0) or s.get('unreachable', 0):
                bad.append(host)
        if a.strict and bad:
            for play in doc['plays']:
                for task in play['tasks']:
                    for host, res in task['hosts'].items():
                        if res.get('changed') or res.get('failed') or res.get('unreachable'):
                            print('  %s: %s: %s' % (host, task['task']['name'],
                                                    'changed' if res.get('changed') else res.get('msg', 'failed')))
            print('not idempotent / not clean: %s' % ', '.join(bad), file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
