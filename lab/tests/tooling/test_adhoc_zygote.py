"""The warm start of run_module's ad-hoc `ansible` runs (lab/tests/adhoc_zygote.py): a run forked from a zygote
answers as `ansible` itself does (result, exit status, output streams), takes its own environment down to the module,
and a zygote serves only runs whose import-time inputs equal its own."""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import adhoc_zygote  # noqa: E402
from conftest import ROOT, VENV_BIN, lab_collections_path  # noqa: E402

ANSIBLE = os.path.join(VENV_BIN, 'ansible')


def _env(**extra):
    e = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=lab_collections_path(), ANSIBLE_LOAD_CALLBACK_PLUGINS='1',
             ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json', ANSIBLE_LOCALHOST_WARNING='0',
             ANSIBLE_PYTHON_INTERPRETER=os.path.join(VENV_BIN, 'python'))
    e.update(extra)
    return e


def _direct(argv, env):
    import subprocess
    p = subprocess.run([ANSIBLE] + argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def _result(stdout):
    doc = json.loads(stdout)
    r = doc['plays'][0]['tasks'][0]['hosts']['localhost']
    for k in ('start', 'end', 'delta'):
        r.pop(k, None)
    return r


@pytest.fixture
def fresh():
    adhoc_zygote.stop_all()
    yield
    adhoc_zygote.stop_all()


def test_a_forked_run_answers_as_ansible_does(fresh):
    env = _env(GPUOPS_ZYGOTE_PROBE='one')
    cases = [['localhost', '-c', 'local', '-m', 'ansible.builtin.command', '-a', 'printenv GPUOPS_ZYGOTE_PROBE'],
             ['localhost', '-c', 'local', '-m', 'ansible.builtin.fail', '-a', 'msg=refused'],
             ['localhost', '-c', 'local', '-m', 'gpuops.k8s_gpu.gpu_doctor', '-a', 'strategy=nonsense'],
             ['localhost', '-c', 'local', '-m', 'ansible.builtin.command', '-a', 'true', '--check']]
    for argv in cases:
        rc, out, err = adhoc_zygote.run(ANSIBLE, argv, env, ROOT)
        drc, dout, derr = _direct(argv, env)
        assert (rc, _result(out)) == (drc, _result(dout)), (argv, out, dout)
        assert err == derr, (argv, err, derr)
    # the module saw the run's own environment
    rc, out, _ = adhoc_zygote.run(ANSIBLE, cases[0], env, ROOT)
    assert rc == 0 and _result(out)['stdout'] == 'one'
    # a bad command line: the CLI's own exit status and message
    rc, out, err = adhoc_zygote.run(ANSIBLE, ['localhost', '--no-such-option'], env, ROOT)
    drc, dout, derr = _direct(['localhost', '--no-such-option'], env)
    assert (rc, out, err) == (drc, dout, derr) and rc != 0


def test_a_zygote_serves_only_runs_with_its_import_time_inputs(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(adhoc_zygote, 'MAX_ZYGOTES', 2)
    cfg = tmp_path / 'ansible.cfg'
    cfg.write_text('[defaults]\nforks = 3\n')
    env = _env(ANSIBLE_CONFIG=str(cfg), K8S_AUTH_KUBECONFIG='/a')
    argv = ['localhost', '-c', 'local', '-m', 'ansible.builtin.command', '-a', 'printenv K8S_AUTH_KUBECONFIG']
    cpu0 = adhoc_zygote.CPU_S[0]
    assert _result(adhoc_zygote.run(ANSIBLE, argv, env, ROOT)[1])['stdout'] == '/a'
    first = adhoc_zygote._ZYGOTES[-1][1].proc.pid
    # a variable only the module reads: the same zygote, and the module sees the new value
    assert _result(adhoc_zygote.run(ANSIBLE, argv, dict(env, K8S_AUTH_KUBECONFIG='/b'), ROOT)[1])['stdout'] == '/b'
    assert [z.proc.pid for _k, z in adhoc_zygote._ZYGOTES] == [first]
    assert adhoc_zygote.CPU_S[0] > cpu0
    # an ANSIBLE_ variable: another zygote
    adhoc_zygote.run(ANSIBLE, argv, dict(env, ANSIBLE_FORKS='2'), ROOT)
    assert len(adhoc_zygote._ZYGOTES) == 2 and adhoc_zygote._ZYGOTES[-1][1].proc.pid != first
    # the configuration file changed: another zygote again, the oldest stopped (MAX_ZYGOTES)
    time.sleep(0.01)
    cfg.write_text('[defaults]\nforks = 4\n')
    adhoc_zygote.run(ANSIBLE, argv, env, ROOT)
    assert len(adhoc_zygote._ZYGOTES) == adhoc_zygote.MAX_ZYGOTES
    assert first not in [z.proc.pid for _k, z in adhoc_zygote._ZYGOTES]
    assert adhoc_zygote.key(env, ROOT) != adhoc_zygote.key(dict(env, HOME='/elsewhere'), ROOT)
    # the working directory counts only through an ansible.cfg in it
    assert adhoc_zygote.key(env, ROOT) == adhoc_zygote.key(env, str(tmp_path / 'elsewhere'))
    env2 = dict(env)
    env2.pop('ANSIBLE_CONFIG')
    (tmp_path / 'w').mkdir()
    before = adhoc_zygote.key(env2, str(tmp_path / 'w'))
    (tmp_path / 'w' / 'ansible.cfg').write_text('[defaults]\n')
    assert adhoc_zygote.key(env2, str(tmp_path / 'w')) != before
    assert adhoc_zygote.key(env, ROOT) == adhoc_zygote.key(dict(env, NVML_SIM_STATE='/x', LD_LIBRARY_PATH='/y'), ROOT)


def test_a_playbook_run_answers_as_ansible_playbook_does_and_a_timeout_kills_it(fresh, tmp_path):
    import subprocess
    from conftest import ansible_cli
    play = tmp_path / 'play.yml'
    play.write_text('- hosts: localhost\n  gather_facts: false\n  tasks:\n'
                    '    - ansible.builtin.command: printenv GPUOPS_ZYGOTE_PROBE\n      register: r\n'
                    '    - ansible.builtin.debug: {var: r.stdout}\n'
                    '    - ansible.builtin.fail: {msg: stop}\n')
    env = _env(GPUOPS_ZYGOTE_PROBE='two')
    cmd = [os.path.join(VENV_BIN, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', str(play)]
    forked = ansible_cli(cmd, env=env, cwd=str(tmp_path), timeout=300)
    assert adhoc_zygote._ZYGOTES, 'the run was not forked from a zygote'
    direct = subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert forked.returncode == direct.returncode == 2
    tasks = [[(t['task']['name'], _strip(t['hosts']['localhost'])) for t in json.loads(p.stdout)['plays'][0]['tasks']]
             for p in (forked, direct)]
    assert tasks[0] == tasks[1] and tasks[0][1][1]['r.stdout'] == 'two', tasks
    assert forked.stderr == direct.stderr
    # past its timeout the run is killed (SIGKILL), as subprocess.run kills a program; a task still running goes on
    # in its worker's own session either way (seen with ansible-playbook itself); the zygote serves the next run
    play.write_text('- hosts: localhost\n  gather_facts: false\n  tasks:\n'
                    '    - ansible.builtin.command: sleep 599.5\n')
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            ansible_cli(cmd, env=env, cwd=str(tmp_path), timeout=8)
    finally:
        subprocess.run(['pkill', '-f', 'sleep 599.5'])
    assert ansible_cli(cmd[:-1] + ['--version'], env=env, cwd=str(tmp_path)).returncode == 0


def _strip(r):
    r = dict(r)
    for k in ('start', 'end', 'delta', 'duration'):
        r.pop(k, None)
    return r
