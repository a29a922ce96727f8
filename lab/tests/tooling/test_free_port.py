"""lab/kube/real.py free_port: the lab's daemons listen on ports below the kernel's ephemeral range, so no outgoing
connection can take one between its pick and the daemon's bind (a CI-like run lost kube-controller-manager to
"bind: address already in use" on 49665, an ephemeral port)."""
import os
import random
import socket
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'kube'))
import real  # noqa: E402


def ephemeral_low():
    with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
        return int(f.read().split()[0])


def test_ports_are_below_the_ephemeral_range_and_free():
    low = ephemeral_low()
    for _ in range(50):
        port = real.free_port()
        assert max(1024, low - real.PORT_SPAN) <= port < low, port
        s = socket.socket()
        s.bind(('127.0.0.1', port))  # free when returned
        s.close()


def test_a_taken_port_is_skipped():
    """The first number the generator gives is listened on by someone: free_port takes the next one."""
    first = random.Random(7).randint(max(1024, ephemeral_low() - real.PORT_SPAN), ephemeral_low() - 1)
    busy = socket.socket()
    try:
        busy.bind(('127.0.0.1', first))
    except OSError:  # taken already by another process: that is the case under test too
        busy.close()
        busy = None
    else:
        busy.listen(1)
    try:
        port = real.free_port(random.Random(7))
        assert port != first, port
    finally:
        if busy:
            busy.close()
