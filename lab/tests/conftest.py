"""Shared fixtures for the lab's tests (lab/tests). Nothing here is part of the collection."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')


@pytest.fixture(scope='session')
def collections_path():
    out = subprocess.run(['bash', os.path.join(ROOT, 'lab/bin/collections-path.sh')], check=True,
                         capture_output=True, text=True).stdout.strip()
    return out


def run_module(collections_path, module, args='', env=None, check=False):
    """Run a module with `ansible localhost -c local` and return its JSON result."""
    e = dict(os.environ)
    e.update(env or {})
    e['ANSIBLE_COLLECTIONS_PATH'] = collections_path
    e['ANSIBLE_LOAD_CALLBACK_PLUGINS'] = '1'
    e['ANSIBLE_STDOUT_CALLBACK'] = 'ansible.builtin.json'
    e['ANSIBLE_LOCALHOST_WARNING'] = '0'
    e['ANSIBLE_PYTHON_INTERPRETER'] = os.path.join(VENV_BIN, 'python')
    cmd = [os.path.join(VENV_BIN, 'ansible'), 'localhost', '-c', 'local', '-m', module]
    if args:
        cmd += ['-a', args]
    if check:
        cmd.append('--check')
    proc = subprocess.run(cmd, env=e, capture_output=True, text=True, cwd=ROOT)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible output is not JSON (rc=%s):\n%s\n%s' % (proc.returncode, proc.stdout, proc.stderr))
    return doc['plays'][0]['tasks'][0]['hosts']['localhost']
