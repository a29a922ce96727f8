#!/usr/bin/env python3
"""A small HTTPS admission webhook for the lab: it records every AdmissionReview the API server sends and admits the
object unchanged, so that a webhook configuration the collection renders (HAMi's MutatingWebhookConfiguration) can be
registered with the real kube-apiserver (lab/kube/real.py) and its scope read from what the API server's admission
actually sends. HAMi's own webhook (pkg/scheduler/webhook.go) is not served by the Go module proxy here
(lab/go/README.md).

    webhook_recorder.py --state-dir DIR --cert CRT --key KEY [--port 0] [--mode allow|error]

* POST any path: an admission.k8s.io/v1 (or v1beta1) AdmissionReview -> the same kind and apiVersion with
  response {uid, allowed: true} (no patch) in mode `allow`; HTTP 500 in mode `error` (the API server then applies the
  webhook's failurePolicy);
* every call is appended to DIR/calls.jsonl ({path, apiVersion, operation, kind, resource, namespace, name,
  generateName, labels, uid, userInfo}); the chosen port is written to DIR/port; DIR/mode switches the mode while it
  runs (read on every call).
In-process: ``start(state_dir, cert, key)`` returns a started ``ThreadingHTTPServer`` (``shutdown()`` stops it).
"""
import argparse
import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _handler(state_dir, lock):
    calls = os.path.join(state_dir, 'calls.jsonl')
    mode_file = os.path.join(state_dir, 'mode')

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_a):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
            try:
                review = json.loads(body)
            except ValueError:
                self.send_error(400, 'not JSON')
                return
            req = review.get('request') or {}
            obj = req.get('object') or {}
            meta = obj.get('metadata') or {}
            rec = {'path': self.path, 'apiVersion': review.get('apiVersion'), 'operation': req.get('operation'),
                   'kind': (req.get('kind') or {}).get('kind'), 'resource': (req.get('resource') or {}).get('resource'),
                   'namespace': req.get('namespace'), 'name': req.get('name') or meta.get('name'),
                   'generateName': meta.get('generateName'), 'labels': meta.get('labels') or {},
                   'uid': req.get('uid'), 'user': (req.get('userInfo') or {}).get('username')}
            with lock:
                with open(calls, 'a') as f:
                    f.write(json.dumps(rec, sort_keys=True) + '\n')
            mode = 'allow'
            if os.path.exists(mode_file):
                with open(mode_file) as f:
                    mode = f.read().strip() or 'allow'
            if mode == 'error':
                self.send_error(500, 'lab webhook recorder: mode error')
                return
            out = json.dumps({'apiVersion': review.get('apiVersion'), 'kind': 'AdmissionReview',
                              'response': {'uid': req.get('uid'), 'allowed': True}}).encode()
            self.send_response(200)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    return Handler


def start(state_dir, cert, key, port=0, mode='allow'):
    """Serve on 127.0.0.1:``port`` (0: a free one, written to STATE/port) in a daemon thread; return the server."""
    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, 'mode'), 'w') as f:
        f.write(mode)
    srv = ThreadingHTTPServer(('127.0.0.1', port), _handler(state_dir, threading.Lock()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    with open(os.path.join(state_dir, 'port'), 'w') as f:
        f.write(str(srv.server_address[1]))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def calls(state_dir):
    path = os.path.join(state_dir, 'calls.jsonl')
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--state-dir', required=True)
    ap.add_argument('--cert', required=True)
    ap.add_argument('--key', required=True)
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--mode', choices=('allow', 'error'), default='allow')
    args = ap.parse_args(argv)
    srv = start(args.state_dir, args.cert, args.key, args.port, args.mode)
    sys.stderr.write('webhook recorder on https://127.0.0.1:%d\n' % srv.server_address[1])
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.shutdown()


if __name__ == '__main__':
    main()
