#!/usr/bin/env python3
"""A small kube-scheduler extender for the lab: it records every call and answers like gpushare's extender does for
the verbs the collection registers (filter, bind), so that the real kube-scheduler's use of the
KubeSchedulerConfiguration the collection writes can be checked. The upstream extender
(AliyunContainerService/gpushare-scheduler-extender) is not served by the Go module proxy here (lab/go/README.md).

    extender.py --state-dir DIR --kubeconfig KC [--port 0] [--reject NODE]... [--filter-verb VERB]...

* POST <prefix>/filter (or each --filter-verb, e.g. gpu-admission's `predicates` under `/scheduler`): ExtenderArgs (k8s.io/kube-scheduler extender/v1: Pod, Nodes or NodeNames) -> an
  ExtenderFilterResult keeping every candidate except the --reject nodes (FailedNodes says why);
* POST <prefix>/bind: ExtenderBindingArgs (PodName, PodNamespace, PodUID, Node) -> binds the pod through the API
  (pods/binding, as gpushare's extender does) and answers ExtenderBindingResult;
* every call is appended to DIR/calls.jsonl ({path, verb, pod, nodes, node}); the chosen port is written to DIR/port.
Go's encoding/json matches these field names case-insensitively; the names above are the Go field names.
"""
import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--state-dir', required=True)
    ap.add_argument('--kubeconfig', required=True)
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--reject', action='append', default=[])
    ap.add_argument('--filter-verb', action='append', default=[],
                    help='path segment(s) answered as the filter verb (default: filter; gpu-admission: predicates)')
    args = ap.parse_args(argv)
    args.filter_verb = args.filter_verb or ['filter']
    from kubernetes import client, config
    conf = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=conf)
    core = client.CoreV1Api(client.ApiClient(conf))
    lock = threading.Lock()
    calls = os.path.join(args.state_dir, 'calls.jsonl')

    def record(entry):
        with lock, open(calls, 'a') as f:
            f.write(json.dumps(entry) + '\n')

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_a):
            pass

        def reply(self, doc, code=200):
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get('Content-Length') or 0)) or b'{}')
            verb = self.path.rstrip('/').rsplit('/', 1)[-1]
            if verb in args.filter_verb:
                pod = body.get('Pod') or {}
                md = pod.get('metadata') or {}
                if body.get('NodeNames') is not None:
                    names = list(body['NodeNames'])
                else:
                    names = [n['metadata']['name'] for n in ((body.get('Nodes') or {}).get('items') or [])]
                keep = [n for n in names if n not in args.reject]
                failed = dict((n, 'rejected by the lab extender') for n in names if n in args.reject)
                record({'path': self.path, 'verb': verb, 'pod': '%s/%s' % (md.get('namespace'), md.get('name')),
                        'nodes': names, 'node_cache_capable': body.get('NodeNames') is not None})
                if body.get('NodeNames') is not None:
                    return self.reply({'NodeNames': keep, 'FailedNodes': failed})
                items = [n for n in body['Nodes']['items'] if n['metadata']['name'] in keep]
                return self.reply({'Nodes': {'items': items}, 'FailedNodes': failed})
            if verb == 'bind':
                record({'path': self.path, 'verb': verb, 'pod': '%s/%s' % (body.get('PodNamespace'), body.get('PodName')),
                        'node': body.get('Node')})
                try:
                    core.create_namespaced_binding(body['PodNamespace'], {
                        'apiVersion': 'v1', 'kind': 'Binding',
                        'metadata': {'name': body['PodName'], 'uid': body.get('PodUID')},
                        'target': {'apiVersion': 'v1', 'kind': 'Node', 'name': body['Node']}},
                        _preload_content=False)
                except client.ApiException as exc:
                    return self.reply({'Error': 'binding failed: %s %s' % (exc.status, exc.body)})
                return self.reply({})
            record({'path': self.path, 'verb': verb})
            return self.reply({'Error': 'unknown verb %s' % verb}, 404)

    srv = ThreadingHTTPServer(('127.0.0.1', args.port), Handler)
    with open(os.path.join(args.state_dir, 'port.tmp'), 'w') as f:
        f.write(str(srv.server_address[1]))
    os.replace(os.path.join(args.state_dir, 'port.tmp'), os.path.join(args.state_dir, 'port'))
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
