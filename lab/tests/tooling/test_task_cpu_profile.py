"""The lab's per-task CPU profiler (lab/profile/gpuops_task_cpu.py, lab/bin/task-cpu-report.py): a measuring tool for
make test's budget (docs/lab.md, "Test suite time"). A real ansible-playbook run with it enabled writes one file whose
rows name the play's tasks in order with their CPU, the report sums them, and make test enables it only when
GPUOPS_TASK_CPU_DIR is set."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = ROOT / '.venv' / 'bin'


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RT = _load('run_tests_for_profile', ROOT / 'lab' / 'bin' / 'run-tests.py')
REPORT = _load('task_cpu_report', ROOT / 'lab' / 'bin' / 'task-cpu-report.py')

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      ansible.builtin.set_fact:
        a: 1
    - name: second
      ansible.builtin.command: "true"
      changed_when: false
    - name: third
      ansible.builtin.debug:
        msg: done
"""


def test_a_run_writes_its_tasks_and_the_report_sums_them(tmp_path):
    play = tmp_path / 'play.yml'
    play.write_text(PLAY)
    out = tmp_path / 'out'
    env = RT.suite_env(dict(os.environ, GPUOPS_TASK_CPU_DIR=str(out)))
    env.pop('PYTEST_CURRENT_TEST', None)
    proc = subprocess.run([str(VENV_BIN / 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
                           '-e', 'ansible_python_interpreter=%s' % (VENV_BIN / 'python'), str(play)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'gpuops_task_cpu' not in proc.stderr, proc.stderr   # no callback warning
    files = list(out.glob('*.json'))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    names = [r['task'].split(' | ')[0] for r in doc['rows']]
    assert names == ['<startup>', '<play> localhost', 'first', 'second', 'third'], names
    assert doc['playbook'].endswith('play.yml') and doc['total'] > 0
    assert all(r['cpu'] >= 0 for r in doc['rows'])
    s = REPORT.summarize(REPORT.load(str(out)))
    assert s['runs'] == 1 and s['task_results'] == 5
    assert abs(s['cpu_s'] - round(doc['total'], 1)) <= 0.1
    assert s['by_where'][0]['name'] == 'other: play.yml'


def test_make_test_enables_it_only_when_asked():
    base = {k: v for k, v in os.environ.items() if k not in ('GPUOPS_TASK_CPU_DIR', 'ANSIBLE_CALLBACKS_ENABLED',
                                                              'ANSIBLE_CALLBACK_PLUGINS')}
    env = RT.suite_env(base)
    assert 'ANSIBLE_CALLBACKS_ENABLED' not in env and 'ANSIBLE_CALLBACK_PLUGINS' not in env
    env = RT.suite_env(dict(base, GPUOPS_TASK_CPU_DIR='rel/dir'))
    assert env['ANSIBLE_CALLBACKS_ENABLED'] == 'gpuops_task_cpu'
    assert env['ANSIBLE_CALLBACK_PLUGINS'] == str(ROOT / 'lab' / 'profile')
    assert os.path.isabs(env['GPUOPS_TASK_CPU_DIR'])
