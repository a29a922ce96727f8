"""A warm start for the lab's `ansible` and `ansible-playbook` runs (conftest.ansible_cli): the lab only, never the
collection.

Every `ansible localhost -m MODULE` process spends about 0.4 of its 0.7 CPU-seconds importing ansible-core
(measured 2026-12-01: `ansible localhost -m ping` 0.74 CPU-s, the imports alone 0.42); make test runs about 250 of
them and about 450 `ansible-playbook` runs. A zygote is a process that has imported the entry point of one of the two
(`ansible.cli.adhoc`, `ansible.cli.playbook`) as the venv's script does, with the environment a run would have, and
then forks one child per run: the child takes the run's environment, directory, arguments and output files and calls
the entry point's `main()`, so the run does all of its own work (configuration, inventory, plugins, the collection
loader, the tasks, their results) but the imports.

What ansible-core computes while it is imported depends on its configuration (ANSIBLE_* variables, the configuration
file, HOME, the locale): a zygote serves only runs whose environment equals the one it was started with, but for the
variables that only the module reads at run time (RUNTIME_ONLY: the Kubernetes client's, the NVML simulator's, the
library path it loads through), and whose configuration files are the same (key()). Anything else starts another
zygote (at most MAX_ZYGOTES per test process, the oldest stopped). GPUOPS_LAB_ADHOC_ZYGOTE=off runs the programs
themselves, as before.

The child's CPU is reported back (wait4's rusage: the child and the task workers it waited for) and counted by the
lab's CPU per test file (conftest._cpu_now), as a child of the test would be; when a zygote is stopped and reaped,
the same CPU reaches the test process's children's rusage and is taken off the count again. A zygote ends by itself
once the test process that started it is gone.
"""
from __future__ import annotations

import array
import fnmatch
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

RUNTIME_ONLY = ('K8S_AUTH_*', 'KUBECONFIG', 'NVML_SIM_*', 'LD_LIBRARY_PATH', 'PYTEST_CURRENT_TEST')
MAX_ZYGOTES = 4
CONFIG_FILES = ('ansible.cfg', '~/.ansible.cfg', '/etc/ansible/ansible.cfg')


def key(env, cwd):
    """What a zygote's imports depend on: the environment but RUNTIME_ONLY, and the path, size, modification time and
    inode of every configuration file ansible-core may read (ANSIBLE_CONFIG, ansible.cfg in the working directory,
    ~/.ansible.cfg, /etc/ansible/ansible.cfg; the directory itself only where one of them is relative to it and
    exists: ansible-core's imports read the directory for nothing else)."""
    kept = sorted((k, v) for k, v in env.items() if not any(fnmatch.fnmatchcase(k, p) for p in RUNTIME_ONLY))
    files = []
    home = env.get('HOME', '')
    for name in ((env.get('ANSIBLE_CONFIG') or ''),) + CONFIG_FILES:
        if not name:
            continue
        path = os.path.join(home, name[2:]) if name.startswith('~/') else os.path.join(cwd, name)
        try:
            st = os.stat(path)
            files.append((path, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            files.append((name, None))
    return hashlib.sha256(json.dumps([kept, files]).encode()).hexdigest()[:16]


class Zygote(object):
    """One zygote process (serve()) for one key, reached through a Unix socket."""

    def __init__(self, program, env, cwd):
        self.dir = tempfile.mkdtemp(prefix='gpuops-adhoc-zygote-')
        self.sock_path = os.path.join(self.dir, 'sock')
        self.log = open(os.path.join(self.dir, 'log'), 'w+')
        # the interpreter of the `ansible` script's #! line, as the run would have it (sys.executable, the
        # ansible_playbook_python variable), and the program's path as its argv[0]
        with open(program) as f:
            python = f.readline()[2:].strip()
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), 'serve', self.sock_path, program], env=env,
                                     cwd=cwd,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        self.cpu_s = 0.0    # CPU of the runs it forked and waited for
        end = time.time() + 120
        while not os.path.exists(os.path.join(self.dir, 'ready')):
            if self.proc.poll() is not None or time.time() > end:
                self.log.seek(0)
                raise RuntimeError('the ad-hoc zygote did not start (rc %s): %s' % (self.proc.poll(), self.log.read()))
            time.sleep(0.02)

    def run(self, argv, env, cwd, timeout=None):
        """Run ``argv`` (the command line without the program) in a child of the zygote: (rc, stdout, stderr,
        cpu_s of the child and the processes it waited for, timed_out). Past ``timeout`` seconds the child is killed
        (SIGKILL), as subprocess.run kills a program that outlives its timeout; its task workers end as they do then."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            timed_out = False
            try:
                s.connect(self.sock_path)
                msg = json.dumps({'argv': argv, 'env': env, 'cwd': cwd}).encode()
                s.sendmsg([struct.pack('!I', len(msg)) + msg],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [out.fileno(), err.fileno()]))])
                lines = []
                buf = b''
                end = None if timeout is None else time.monotonic() + timeout
                while len(lines) < 2:
                    if end is not None and not timed_out:
                        left = end - time.monotonic()
                        if left <= 0 and lines:
                            timed_out = True
                            try:
                                os.kill(json.loads(lines[0])['pid'], signal.SIGKILL)
                            except ProcessLookupError:
                                pass
                            s.settimeout(None)
                        else:
                            s.settimeout(max(left, 0.01))
                    try:
                        chunk = s.recv(4096)
                    except socket.timeout:
                        continue
                    if not chunk:
                        raise RuntimeError('the zygote closed the connection (its log: %s)' % self.log.name)
                    buf += chunk
                    while b'\n' in buf:
                        line, buf = buf.split(b'\n', 1)
                        lines.append(line)
            finally:
                s.close()
            status = json.loads(lines[1])
            out.seek(0)
            err.seek(0)
            return (status['rc'], out.read().decode('utf-8', 'replace'), err.read().decode('utf-8', 'replace'),
                    status['cpu_s'], timed_out)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # reaping the zygote adds the runs it waited for to this process's children's CPU, counted already run by run
        CPU_S[0] -= self.cpu_s
        self.log.close()
        for name in ('sock', 'ready', 'log'):
            try:
                os.unlink(os.path.join(self.dir, name))
            except OSError:
                pass
        os.rmdir(self.dir)


_ZYGOTES = []    # [(key, Zygote)], newest last
CPU_S = [0.0]    # CPU of the runs the zygotes forked for this process, for the lab's CPU per test file
STATS = {'zygotes': 0, 'runs': 0}


def enabled():
    return os.environ.get('GPUOPS_LAB_ADHOC_ZYGOTE', 'on') != 'off'


def run(program, argv, env, cwd, timeout=None):
    """(rc, stdout, stderr) of ``program`` (the venv's `ansible` or `ansible-playbook`) with the arguments ``argv``,
    run with ``env`` in ``cwd`` by a zygote of their key; subprocess.TimeoutExpired past ``timeout`` seconds."""
    k = key(env, cwd) + program
    for zk, z in list(_ZYGOTES):
        if z.proc.poll() is not None:    # ended (its test process's parent check, a crash): forget it
            _ZYGOTES.remove((zk, z))
            z.stop()
    for zk, z in _ZYGOTES:
        if zk == k:
            break
    else:
        z = Zygote(program, env, cwd)
        STATS['zygotes'] += 1
        _ZYGOTES.append((k, z))
        while len(_ZYGOTES) > MAX_ZYGOTES:
            _ZYGOTES.pop(0)[1].stop()
    STATS['runs'] += 1
    rc, out, err, cpu, timed_out = z.run(argv, env, cwd, timeout)
    CPU_S[0] += cpu
    z.cpu_s += cpu
    if timed_out:
        raise subprocess.TimeoutExpired([program] + list(argv), timeout, output=out, stderr=err)
    return rc, out, err


def stop_all():
    while _ZYGOTES:
        _ZYGOTES.pop()[1].stop()
    if os.environ.get('GPUOPS_LAB_ZYGOTE_STATS') and STATS['runs']:
        with open(os.environ['GPUOPS_LAB_ZYGOTE_STATS'], 'a') as f:
            f.write(json.dumps(dict(STATS, pid=os.getpid())) + '\n')


# ------------------------------------------------------------------------------------------------------ the zygote
def _child(req, fds, program):
    """In the forked child: become the run (environment, directory, arguments, output) and call the entry point."""
    rc = 1
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (devnull,) + tuple(fds):
            os.close(fd)
        os.chdir(req['cwd'])
        os.environ.clear()
        os.environ.update(req['env'])
        sys.argv = [program] + list(req['argv'])
        main = _entry(program)
        try:
            rc = main()
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:   # the child must never return into the zygote's loop
        import traceback
        traceback.print_exc()
        rc = 250
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(rc or 0)


def _entry(program):
    """The main() of the venv's `ansible` or `ansible-playbook` script."""
    if os.path.basename(program) == 'ansible-playbook':
        from ansible.cli.playbook import main
    else:
        from ansible.cli.adhoc import main
    return main


def serve(sock_path, program):
    sys.path[0] = os.path.dirname(program)   # as for the script itself (this file's directory is nothing of the run's)
    _entry(program)   # the imports the children inherit
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(4)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    owner = os.getppid()
    with open(os.path.join(os.path.dirname(sock_path), 'ready'), 'w') as f:
        f.write(str(os.getpid()))
    srv.settimeout(5)
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            if os.getppid() != owner:   # the test process is gone
                os._exit(0)
            continue
        conn.settimeout(None)
        fds = array.array('i')
        head, anc, _flags, _addr = conn.recvmsg(4, socket.CMSG_LEN(2 * fds.itemsize))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
        size = struct.unpack('!I', head)[0]
        body = b''
        while len(body) < size:
            body += conn.recv(size - len(body))
        req = json.loads(body)
        pid = os.fork()
        if pid == 0:
            srv.close()
            conn.close()
            _child(req, list(fds), program)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)   # (the child does it too): the client may kill the group before the child runs
        except OSError:
            pass
        try:
            conn.sendall((json.dumps({'pid': pid}) + '\n').encode())
        except OSError:
            pass
        _pid, status, ru = os.wait4(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        try:
            conn.sendall((json.dumps({'rc': rc, 'cpu_s': ru.ru_utime + ru.ru_stime}) + '\n').encode())
        except OSError:   # the client is gone (killed with its test)
            pass
        conn.close()


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'serve':
        serve(sys.argv[2], sys.argv[3])
    else:
        sys.exit('usage: adhoc_zygote.py serve SOCKET PROGRAM')
