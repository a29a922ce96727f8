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
"""
import argparse
import json
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('log', nargs='?')
    ap.add_argument('--audit')
    ap.add_argument('--since', type=int, default=0)
    ap.add_argument('--cluster')
    ap.add_argument('--print', action='append', default=[], dest='tasks')
    ap.add_argument('--recap', action='store_true')
    ap.add_argument('--strict', action='store_true')
    a = ap.parse_args()
    if a.cluster:
        cluster(a.cluster)
        return 0
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
