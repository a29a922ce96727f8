"""lab/node/node.py down_state finds what a node left by the node's mount and pid namespaces. The kernel gives a freed
namespace's inode number to the next namespace made (seen here: a new unshare got both numbers of one that had gone
a second before), so CI of stop 50 reported a container of another node, started by a test running alongside, as a
process left by the node it was stopping. down_state now holds the node's namespaces open while it looks: their
numbers cannot be given again until it closes them. This test makes namespaces as the lab's nodes do (unshare
--mount --pid --fork) and checks that, held, the numbers of a gone namespace pair never come back while new ones are
made."""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'lab', 'node'))
import node  # noqa: E402

def start():
    """unshare --mount --pid --fork sleep: (the unshare process, its child in the new namespaces)."""
    p = subprocess.Popen(['unshare', '--mount', '--pid', '--fork', '--kill-child', 'sleep', '60'])
    end = time.time() + 10
    while time.time() < end:
        try:
            with open('/proc/%d/task/%d/children' % (p.pid, p.pid)) as f:
                kids = f.read().split()
            if kids and node._mntns(int(kids[0])) not in (None, node._mntns(p.pid)):
                return p, int(kids[0])
        except OSError:
            pass
        time.sleep(0.02)
    p.kill()
    raise AssertionError('unshare made no child in new namespaces within 10 s')


def stop(p):
    p.kill()
    p.wait()


def test_held_namespaces_keep_their_numbers_after_their_processes_are_gone():
    p, child = start()
    gone = node._mntns(child)
    held = node._hold_namespaces(child)
    try:
        assert len(held) == 2
        assert tuple(os.readlink('/proc/self/fd/%d' % fd) for fd in held) == gone
        stop(p)
        made = []
        for _ in range(6):
            time.sleep(0.3)   # the kernel frees a namespace a little after its last process (deferred work)
            q, c = start()
            made.append(node._mntns(c))
            stop(q)
        assert gone not in made, (gone, made)
        assert not any(ns[0] == gone[0] or ns[1] == gone[1] for ns in made), (gone, made)
    finally:
        for fd in held:
            os.close(fd)


def test_a_gone_process_holds_nothing():
    p, child = start()
    stop(p)
    end = time.time() + 5
    while os.path.exists('/proc/%d' % child) and time.time() < end:
        time.sleep(0.05)
    assert node._hold_namespaces(child) == []
