#!/usr/bin/env python3
"""LAB ONLY (make demo): put the demo's cluster objects (lab/demo/kube-seed.yaml) into the lab's real control plane
(lab/kube/real.py) and wait until kwok reports them.

    kube_seed.py KUBECONFIG SEED [--timeout 120]

* Nodes (lab-cp, lab-t4, lab-a100, lab-v100: the inventory's host names, which gpu_node_labels and the stacks look
  for) are created as kwok nodes (annotation kwok.x-k8s.io/node=fake) with the seed's labels, taints, addresses and
  capacity; kwok's stages make them Ready (its node-initialize stage keeps the capacity given here). The seed's
  conditions are dropped: kwok writes them.
* Pods (once the namespace's ServiceAccount `default` exists) keep their spec.nodeName (the scheduler does not place
  them) and lose their status: the API server resets a pod's status on create, and kwok's pod stages make a pod bound
  to a kwok node Running.
* Other objects (the kubeadm-config ConfigMap) are created as they are.
An object that already exists is left as it is (a second call changes nothing). Prints one line per object.
"""
import argparse
import os
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'kube'))
import real  # noqa: E402  (lab/kube/real.py: the kubeconfig loader and the kwok annotation)


def prepare(doc):
    """The object to create on the real server for one seed document."""
    doc = dict(doc)
    meta = doc['metadata'] = dict(doc.get('metadata') or {})
    if doc['kind'] == 'Node':
        meta['annotations'] = dict(meta.get('annotations') or {}, **{real.KWOK_ANNOTATION: 'fake'})
        status = dict(doc.get('status') or {})
        status.pop('conditions', None)
        doc['status'] = status
    elif doc['kind'] == 'Pod':
        doc.pop('status', None)
    return doc


def wait_service_account(core, ns, timeout):
    """The ServiceAccount admission plugin refuses a pod (403) until the controller-manager has made the namespace's
    ServiceAccount `default`, a moment after the control plane is up."""
    from kubernetes.client.rest import ApiException
    end = time.time() + timeout
    while True:
        try:
            core.read_namespaced_service_account('default', ns)
            return
        except ApiException as e:
            if e.status != 404 or time.time() > end:
                raise
        time.sleep(0.2)


def seed(kubeconfig, path, timeout):
    from kubernetes import client, dynamic
    from kubernetes.client.rest import ApiException
    dyn = dynamic.DynamicClient(real.api_client(kubeconfig))
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    nodes, pods = [], []
    for doc in docs:
        obj = prepare(doc)
        api = dyn.resources.get(api_version=obj['apiVersion'], kind=obj['kind'])
        ns = obj['metadata'].get('namespace')
        if obj['kind'] == 'Pod':
            wait_service_account(client.CoreV1Api(real.api_client(kubeconfig)), ns, timeout)
        try:
            api.create(body=obj, namespace=ns) if ns else api.create(body=obj)
            what = 'created'
        except ApiException as e:
            if e.status != 409:
                raise
            what = 'exists'
        name = '%s/%s' % (ns, obj['metadata']['name']) if ns else obj['metadata']['name']
        print('%s %s %s' % (obj['kind'], name, what))
        if obj['kind'] == 'Node':
            nodes.append(obj['metadata']['name'])
        elif obj['kind'] == 'Pod':
            pods.append((ns, obj['metadata']['name']))
    core = client.CoreV1Api(real.api_client(kubeconfig))
    end = time.time() + timeout
    while True:
        ready = {n.metadata.name for n in core.list_node().items
                 if any(c.type == 'Ready' and c.status == 'True' for c in (n.status.conditions or []))}
        running = {(p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items
                   if p.status.phase == 'Running'}
        missing = sorted(set(nodes) - ready) + ['%s/%s' % p for p in sorted(set(pods) - running)]
        if not missing:
            return 0
        if time.time() > end:
            print('not Ready/Running after %d s: %s' % (timeout, ', '.join(missing)), file=sys.stderr)
            return 1
        time.sleep(0.3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('kubeconfig')
    ap.add_argument('seed')
    ap.add_argument('--timeout', type=int, default=120)
    a = ap.parse_args()
    return seed(a.kubeconfig, a.seed, a.timeout)


if __name__ == '__main__':
    sys.exit(main())
