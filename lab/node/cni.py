#!/usr/bin/env python3
"""The lab node's CNI plugin (type `gpuops-lab-net`, CNI spec 1.0.0): pods without hostNetwork get a network namespace
of their own that holds only a loopback, an interface with the pod's address (leading nowhere) and the `kubernetes` Service's ClusterIP; a forwarder
started by ADD listens on that ClusterIP:443 inside the pod's namespace and relays every connection to the lab's API
server (127.0.0.1:PORT in the node's network namespace, the host's). Nothing is changed in the host's network (no
interface, route or iptables rule): the listening socket is made inside the pod's namespace (setns) and the
connections to the API server outside it, by one process.

What it stands in for: a pod network (a CNI plugin such as bridge or calico) plus kube-proxy, for exactly one
destination: in-cluster clients (client-go's InClusterConfig: KUBERNETES_SERVICE_HOST/PORT, which the kubelet sets
from the `kubernetes` Service) reach the API server; pods cannot reach each other or anything else.
lab/node/README.md lists it among the node's deviations.

containerd runs it as `STATE/cni/bin/gpuops-lab-net` (a wrapper exec'ing this file) with CNI_COMMAND, CNI_NETNS,
CNI_CONTAINERID and the network configuration on stdin; its fields `apiserver` (host:port), `serviceIP`, `podSubnet`
(a /16 of which pods get addresses on their loopback) and `dataDir` are the lab's own.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading

CNI_VERSION = '1.0.0'
SUPPORTED = ['0.3.0', '0.3.1', '0.4.0', '1.0.0']
IP = '/usr/sbin/ip' if os.path.exists('/usr/sbin/ip') else 'ip'


def _error(code, msg, details=''):
    json.dump({'cniVersion': CNI_VERSION, 'code': code, 'msg': msg, 'details': details}, sys.stdout)
    return 1


def _in_netns(netns, *cmd):
    subprocess.run(['nsenter', '--net=' + netns, IP] + list(cmd), check=True, capture_output=True, text=True)


def _pod_ip(conf):
    """The next address of the pod subnet (a counter file of the node): never reused while the node lives."""
    data = conf['dataDir']
    os.makedirs(data, exist_ok=True)
    path = os.path.join(data, 'last')
    import fcntl
    with open(os.path.join(data, 'lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        n = int(open(path).read()) + 1 if os.path.exists(path) else 2
        with open(path, 'w') as f:
            f.write('%d\n' % n)
    a, b = conf['podSubnet'].split('/')[0].split('.')[:2]
    return '%s.%s.%d.%d' % (a, b, n // 254, 2 + n % 254)


def add(conf, env):
    netns, cid = env['CNI_NETNS'], env['CNI_CONTAINERID']
    ip = _pod_ip(conf)
    ifname = env.get('CNI_IFNAME') or 'eth0'
    _in_netns(netns, 'link', 'set', 'lo', 'up')
    # the pod's interface: one end of a veth pair whose other end stays in the pod's namespace too (no module for
    # dummy interfaces here); it carries the pod's address, leads nowhere
    _in_netns(netns, 'link', 'add', ifname, 'type', 'veth', 'peer', 'name', 'gpuops-nowhere')
    _in_netns(netns, 'link', 'set', ifname, 'up')
    _in_netns(netns, 'addr', 'add', ip + '/32', 'dev', ifname)
    _in_netns(netns, 'addr', 'add', conf['serviceIP'] + '/32', 'dev', 'lo')
    pidfile = os.path.join(conf['dataDir'], cid + '.pid')
    logf = os.path.join(conf['dataDir'], cid + '.log')
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the forwarder: its own session, outlives the plugin until DEL (or the node's end)
        os.close(ready_r)
        os.setsid()
        fd = os.open(logf, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        try:
            forward(netns, conf['serviceIP'], 443, conf['apiserver'], ready_w)
        finally:
            os._exit(0)
    os.close(ready_w)
    ok = os.read(ready_r, 16)
    os.close(ready_r)
    if ok != b'ok':
        return _error(11, 'gpuops-lab-net: the forwarder did not start', open(logf).read()[-2000:])
    with open(pidfile, 'w') as f:
        f.write('%d\n' % pid)
    json.dump({'cniVersion': conf.get('cniVersion', CNI_VERSION),
               'interfaces': [{'name': ifname, 'sandbox': netns}],
               'ips': [{'address': ip + '/32', 'interface': 0}]}, sys.stdout)
    return 0


def delete(conf, env):
    pidfile = os.path.join(conf['dataDir'], env['CNI_CONTAINERID'] + '.pid')
    if os.path.exists(pidfile):
        try:
            os.killpg(int(open(pidfile).read()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        os.unlink(pidfile)
    return 0


def forward(netns, listen_ip, listen_port, target, ready_fd):
    """Listen on listen_ip:listen_port inside netns; relay each connection to target (host:port) from here."""
    host_ns = os.open('/proc/self/ns/net', os.O_RDONLY)
    pod_ns = os.open(netns, os.O_RDONLY)
    os.setns(pod_ns, os.CLONE_NEWNET)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((listen_ip, listen_port))
    srv.listen(64)
    os.setns(host_ns, os.CLONE_NEWNET)
    os.close(pod_ns)
    os.write(ready_fd, b'ok')
    os.close(ready_fd)
    host, port = target.rsplit(':', 1)

    def pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        conn, _addr = srv.accept()
        try:
            up = socket.create_connection((host, int(port)), timeout=10)
            up.settimeout(None)
        except OSError as exc:
            sys.stderr.write('connect %s: %s\n' % (target, exc))
            conn.close()
            continue
        threading.Thread(target=pipe, args=(conn, up), daemon=True).start()
        threading.Thread(target=pipe, args=(up, conn), daemon=True).start()


def main():
    env = os.environ
    cmd = env.get('CNI_COMMAND', '')
    if cmd == 'VERSION':
        json.dump({'cniVersion': CNI_VERSION, 'supportedVersions': SUPPORTED}, sys.stdout)
        return 0
    conf = json.load(sys.stdin)
    try:
        if cmd == 'ADD':
            return add(conf, env)
        if cmd == 'DEL':
            return delete(conf, env)
        if cmd in ('CHECK', 'STATUS', 'GC'):
            return 0
    except subprocess.CalledProcessError as exc:
        return _error(11, 'gpuops-lab-net %s: %s failed' % (cmd, ' '.join(exc.cmd)), exc.stderr or '')
    except OSError as exc:
        return _error(11, 'gpuops-lab-net %s: %s' % (cmd, exc))
    return _error(4, 'gpuops-lab-net: unknown CNI_COMMAND %r' % cmd)


if __name__ == '__main__':
    sys.exit(main())
