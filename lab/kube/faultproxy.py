#!/usr/bin/env python3
"""A fault-injecting HTTPS proxy in front of the lab's real API server (lab/kube/real.py); standard library only.

It terminates TLS with a serving certificate issued by the lab cluster's CA (real.issue), so that clients keep
verifying the server as they do against the API server itself, and forwards each request over a new TLS connection to
the API server with the client certificate of one user (a kubeconfig of real.user_kubeconfig / KubeReal.user): the
audit log names that user, so a test still counts its own writes. A kubeconfig pointing at the proxy (same CA, same
user) is written next to the record.

By seed and rate, each request that matches ``only`` (a callable on method and path; all requests by default) is
answered by the proxy itself instead of the API server, with one of:
  * ``429``: 429 Too Many Requests with ``Retry-After: N`` (what API Priority and Fairness answers; the request is not
    forwarded);
  * ``503``: 503 Service Unavailable without Retry-After (a load balancer or an apiserver that is not ready; not
    forwarded);
  * ``reset``: the connection reset (TCP RST) before the request is forwarded;
  * ``reset_after``: the request IS forwarded, the API server's answer is thrown away and the connection reset (a
    request that landed but whose answer was lost).
Instead of seed and rate, ``script`` (a callable on method and path) may name the fault of each request.
``down(seconds)`` closes the listening socket and every open connection for that long (the API server restarting:
connections refused), then listens again on the same port; ``up()`` ends such an outage early.

Every request is recorded (``record``: a list of dicts, and JSON lines in ``record_path``): time, method, path,
fault (None when forwarded), Retry-After sent, the API server's status. Deterministic for a seed: the n-th request
that matches gets the same decision (random.Random(seed), one draw per request, in arrival order).

    lab/kube/faultproxy.py --state DIR --user NAME [--seed 1] [--rate 0.1] [--faults 429,503,reset,reset_after]
                           [--retry-after 1] [--out DIR]          run until interrupted; prints the kubeconfig
"""
import argparse
import http.client
import json
import os
import random
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTS = ('429', '503', 'reset', 'reset_after')
HOP_HEADERS = ('connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade')


def _real():
    sys.path.insert(0, HERE)
    import real  # noqa: E402  pylint: disable=import-outside-toplevel
    return real


def _rst(sock):
    """Close with a TCP reset (SO_LINGER 0), as a dropped connection looks to the client."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def decisions(seed, rate, faults, n):
    """The faults a proxy with this seed, rate and faults gives its first ``n`` matching requests (None: forwarded);
    the same draws as FaultProxy.decide."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        draw = rng.random()
        pick = rng.randrange(len(faults)) if faults else 0
        out.append(faults[pick] if faults and draw < rate else None)
    return out


def first_faults(rate, faults, within, want, start=1, tries=200000):
    """The smallest seed from ``start`` whose first ``within`` requests meet every fault in ``want`` (a test that
    must see those faults picks its seed so, instead of hoping for them)."""
    for seed in range(start, start + tries):
        if set(want) <= set(decisions(seed, rate, faults, within)):
            return seed
    raise ValueError('no seed in [%d, %d) meets %s within %d requests at rate %s'
                     % (start, start + tries, ', '.join(want), within, rate))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'gpuops-faultproxy'

    def log_message(self, *_args):  # quiet
        pass

    def setup(self):
        self.request.do_handshake()
        BaseHTTPRequestHandler.setup(self)

    def _body(self):
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else None

    def _handle(self):
        proxy = self.server.proxy
        body = self._body()
        fault, entry = proxy.decide(self.command, self.path)
        if fault == 'down':
            entry['status'] = None
            entry['seconds'] = proxy.down_at[1]
            self.close_connection = True
            _rst(self.connection)
            proxy.down(proxy.down_at[1])
            return
        if fault == 'reset':
            entry['status'] = None
            self.close_connection = True
            _rst(self.connection)
            return
        if fault in ('429', '503'):
            status = int(fault)
            msg = (b'Too many requests, please try again later.\n' if status == 429
                   else b'service unavailable (faultproxy)\n')
            self.send_response(status)
            self.send_header('Content-Type', 'text/plain; charset=utf-8')
            self.send_header('Content-Length', str(len(msg)))
            if status == 429:
                self.send_header('Retry-After', str(entry['retry_after']))
            self.end_headers()
            self.wfile.write(msg)
            entry['status'] = status
            return
        try:
            status, reason, headers, data = proxy.forward(self.command, self.path, self.headers, body)
        except Exception as exc:  # pylint: disable=broad-except  # the API server itself is unreachable
            entry['status'] = None
            entry['error'] = str(exc)[:200]
            self.close_connection = True
            _rst(self.connection)
            return
        entry['status'] = status
        if fault == 'reset_after':
            self.close_connection = True
            _rst(self.connection)
            return
        self.send_response(status, reason)
        for k, v in headers:
            if k.lower() not in HOP_HEADERS and k.lower() != 'content-length':
                self.send_header(k, v)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, proxy, context):
        self.proxy = proxy
        self.context = context
        ThreadingHTTPServer.__init__(self, addr, _Handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        self.proxy.track(sock)
        # the TLS handshake happens in the request's own thread (setup), not in the accepting one
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):  # connections reset by either side are the point here
        pass


class FaultProxy(object):
    """The proxy, in threads of the calling process. ``start()`` returns the kubeconfig path; ``stop()`` ends it."""

    def __init__(self, state, user_kubeconfig, seed=1, rate=0.1, faults=FAULTS, retry_after=1, out=None,
                 only=None, name='faultproxy', down_at=None, script=None):
        self.state = str(state)
        self.seed, self.rate, self.faults, self.retry_after = seed, float(rate), tuple(faults), retry_after
        for f in self.faults:
            if f not in FAULTS:
                raise ValueError('fault %r is not one of %s' % (f, ', '.join(FAULTS)))
        self.only = only
        self.script = script  # a callable (method, path) -> fault or None that decides instead of seed and rate
        self.down_at = down_at  # (n, seconds): the n-th request (1-based) resets and the proxy goes down for seconds
        self.active = True
        self.out = str(out or os.path.join(self.state, 'faultproxy'))
        os.makedirs(self.out, exist_ok=True)
        self.name = name
        self.record = []
        self.record_path = os.path.join(self.out, name + '.jsonl')
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._socks = []
        self._server = None
        self._thread = None
        self._outage = None  # (thread that brings the listener back, event that ends the outage early)
        self._stopped = False
        self.port = None
        with open(user_kubeconfig) as f:
            kc = json.load(f)  # real.kubeconfig writes JSON
        cluster = kc['clusters'][0]['cluster']
        user = kc['users'][0]['user']
        self.upstream = cluster['server']
        self.ca = cluster['certificate-authority']
        self.cert, self.key = user['client-certificate'], user['client-key']
        up = self.upstream.split('://', 1)[1].rstrip('/')
        self._up_host, self._up_port = up.rsplit(':', 1)[0], int(up.rsplit(':', 1)[1])
        self._up_ctx = ssl.create_default_context(cafile=self.ca)
        self._up_ctx.load_cert_chain(self.cert, self.key)
        self._local = threading.local()
        pki = os.path.join(self.state, 'pki')
        real = _real()
        base = 'faultproxy-%d-%s' % (os.getpid(), name)
        crt, key = real.issue(pki, base, 'gpuops-faultproxy', server_names=['127.0.0.1', 'localhost'])
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(crt, key)
        self.kubeconfig = os.path.join(self.out, name + '.kubeconfig')
        self._real = real

    # --------------------------------------------------------------------------------------------- decisions
    def decide(self, method, path):
        """(fault or None, record entry) for the next request; the entry is in ``record`` already."""
        with self._lock:
            matches = self.active and (self.only is None or self.only(method, path))
            fault = None
            if self.down_at and len(self.record) + 1 == self.down_at[0]:
                fault = 'down'
            elif matches and self.script is not None:
                fault = self.script(method, path)
            elif matches:
                draw = self._rng.random()
                pick = self._rng.randrange(len(self.faults)) if self.faults else 0
                if draw < self.rate and self.faults:
                    fault = self.faults[pick]
            entry = {'t': round(time.monotonic(), 3), 'method': method, 'path': path, 'fault': fault,
                     'retry_after': self.retry_after if fault == '429' else None}
            self.record.append(entry)
            return fault, entry

    def forward(self, method, path, headers, body):
        conn = http.client.HTTPSConnection(self._up_host, self._up_port, context=self._up_ctx, timeout=60)
        try:
            fwd = dict((k, v) for k, v in headers.items() if k.lower() not in HOP_HEADERS and k.lower() != 'host')
            conn.request(method, path, body=body, headers=fwd)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()

    def track(self, sock):
        with self._lock:
            self._socks = [s for s in self._socks if s.fileno() >= 0] + [sock]

    # --------------------------------------------------------------------------------------------- life cycle
    def _listen(self, port=0):
        self._server = _Server(('127.0.0.1', port), self, self._ctx)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={'poll_interval': 0.05},
                                        daemon=True)
        self._thread.start()

    def start(self):
        self._listen()
        self._real.kubeconfig(self.kubeconfig, 'https://127.0.0.1:%d' % self.port, os.path.join(self.state, 'pki'),
                              self.cert, self.key, name='gpuops-faultproxy')
        return self.kubeconfig

    def _close_listener(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            _rst(s)

    def down(self, seconds, wait=False):
        """Refuse connections for ``seconds`` (listener closed, open connections reset), then listen again on the
        same port. Returns at once (a thread brings it back; up() ends the outage sooner) unless wait=True."""
        port = self.port
        self.down_since = time.monotonic()
        self._close_listener()
        early = threading.Event()

        def back():
            early.wait(seconds)
            if self._server is None and not self._stopped:
                self._listen(port)
            self.down_since = None
        t = threading.Thread(target=back, daemon=True)
        self._outage = (t, early)
        t.start()
        if wait:
            t.join()
        return t

    def up(self):
        """End the outage now (a test whose client has already given up need not wait for the rest of it): returns
        the seconds the proxy was down, once it listens again; None when it was not down."""
        since, outage = self.down_since, self._outage
        if since is None or outage is None:
            return None
        outage[1].set()
        outage[0].join()
        return time.monotonic() - since

    def stop(self):
        self._stopped = True
        if self._outage is not None:
            self._outage[1].set()  # an outage still running ends without listening again
        self._close_listener()
        self.save()

    def save(self):
        with self._lock:
            entries = list(self.record)
        with open(self.record_path, 'w') as f:
            for e in entries:
                f.write(json.dumps(e, sort_keys=True) + '\n')
        return self.record_path

    def injected(self):
        """The faults injected so far: [(method, path, fault)]."""
        with self._lock:
            return [(e['method'], e['path'], e['fault']) for e in self.record if e['fault']]

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *_exc):
        self.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--state', required=True, help='the state directory of lab/kube/real.py up')
    ap.add_argument('--user', required=True, help='the user whose client certificate the proxy forwards with')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--rate', type=float, default=0.1)
    ap.add_argument('--faults', default=','.join(FAULTS))
    ap.add_argument('--retry-after', type=int, default=1)
    ap.add_argument('--out', default=None)
    a = ap.parse_args(argv)
    kc = _real().user_kubeconfig(a.state, a.user)
    proxy = FaultProxy(a.state, kc, seed=a.seed, rate=a.rate, faults=[f for f in a.faults.split(',') if f],
                       retry_after=a.retry_after, out=a.out)
    print(proxy.start(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
        print(proxy.record_path)


if __name__ == '__main__':
    main()
