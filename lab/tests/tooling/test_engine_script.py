"""lab/docker/engine.sh with stand-in `docker` and `dockerd` programs on PATH (no real daemon is touched).

CI stop 19 timed out because the dockerd that `engine.sh up` started inherited the descriptor of up.lock and
held that lock for its whole life: every later `up` waited until its caller's timeout. These tests start a fake
daemon through the real script and check that a second `up` finds it at once, that the daemon holds no lock,
and that a lock held too long ends in an error naming its holder instead of a silent hang.
"""
import fcntl
import os
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ENGINE = os.path.join(ROOT, 'lab', 'docker', 'engine.sh')

FAKE_DOCKERD = """#!/bin/bash
# stand-in daemon: says it is up, then idles until signalled
touch "$FAKE_STATE/up"
trap 'rm -f "$FAKE_STATE/up"; exit 0' TERM INT
while :; do sleep 0.2; done
"""

FAKE_DOCKER = """#!/bin/bash
# stand-in client: `info` answers while the stand-in daemon is up
[ "$1" = info ] || exit 2
[ -f "$FAKE_STATE/up" ] || { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
echo "fake vfs"
"""


@pytest.fixture
def fake_engine(tmp_path):
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    for name, text in (('dockerd', FAKE_DOCKERD), ('docker', FAKE_DOCKER)):
        p = bindir / name
        p.write_text(text)
        p.chmod(0o755)
    state = tmp_path / 'state'
    fake = tmp_path / 'fake'
    fake.mkdir()
    env = dict(os.environ, PATH='%s:%s' % (bindir, os.environ['PATH']), LAB_DOCKER_STATE=str(state),
               LAB_DOCKER_STORAGE_DRIVER='vfs', LAB_DOCKER_WAIT='20', FAKE_STATE=str(fake))
    yield env, state
    subprocess.run(['bash', ENGINE, 'down'], env=env, capture_output=True, text=True, timeout=60)


def engine(env, verb, timeout=60):
    return subprocess.run(['bash', ENGINE, verb], env=env, capture_output=True, text=True, timeout=timeout)


def open_paths(pid):
    out = set()
    fd_dir = '/proc/%d/fd' % pid
    for fd in os.listdir(fd_dir):
        try:
            out.add(os.readlink(os.path.join(fd_dir, fd)))
        except OSError:
            pass
    return out


def test_started_daemon_does_not_hold_the_up_lock(fake_engine):
    env, state = fake_engine
    first = engine(env, 'up')
    assert first.returncode == 0, first.stderr
    assert 'starting dockerd' in first.stderr
    pid = int((state / 'dockerd.pid').read_text())
    assert str(state / 'up.lock') not in open_paths(pid), 'the daemon inherited the descriptor of up.lock'
    t0 = time.monotonic()
    second = engine(env, 'up', timeout=30)
    assert second.returncode == 0, second.stderr
    assert 'started by us' in second.stderr
    assert time.monotonic() - t0 < 15, 'a second `up` waited on the lock'
    down = engine(env, 'down')
    assert down.returncode == 0 and 'stopped' in down.stderr, down.stderr


def test_a_lock_held_too_long_fails_and_names_the_holder(fake_engine):
    env, state = fake_engine
    state.mkdir(parents=True)
    with open(state / 'up.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = engine(dict(env, LAB_DOCKER_LOCK_WAIT='1'), 'up', timeout=30)
    assert proc.returncode != 0
    assert 'up.lock' in proc.stderr and 'for 1s' in proc.stderr, proc.stderr
    assert '%d(' % os.getpid() in proc.stderr, 'the holder is not named: %s' % proc.stderr
    assert not (state / 'dockerd.pid').exists(), 'nothing may start while the lock is held by another'


def test_a_daemon_that_is_slow_to_exec_is_not_taken_for_an_exit(fake_engine):
    """CI-faithful run r19 (session 11): under load the first `up` said "dockerd exited" about a daemon that was
    starting, because the wait loop checked the process's name before `setsid` had exec'd dockerd. A `setsid`
    that waits a second before its exec reproduces that window on a quiet machine."""
    env, state = fake_engine
    bindir = env['PATH'].split(':')[0]
    slow = os.path.join(bindir, 'setsid')
    with open(slow, 'w') as fh:
        fh.write('#!/bin/bash\n# stand-in: the window between fork and exec, made long\nsleep 1\nexec %s "$@"\n'
                 % subprocess.run(['bash', '-c', 'command -v setsid'], capture_output=True, text=True).stdout.strip())
    os.chmod(slow, 0o755)
    first = engine(env, 'up')
    assert first.returncode == 0, first.stderr
    assert 'dockerd answers' in first.stderr, first.stderr
