"""lab/ansible-tests.cfg: the configuration `make test` gives ansible runs that bring none of their own.

ansible-core reads internal_poll_interval only from a configuration file (it has no environment variable), so the
file must parse to the value, run-tests.py must hand it out, and the lab's other configurations (the demo's, the
molecule scenarios', the two lab files that write their own) must set the same value.
"""
import configparser
import os
import subprocess

import yaml

from conftest import ROOT

CFG = os.path.join(ROOT, 'lab', 'ansible-tests.cfg')
VALUE = '0.01'


def test_ansible_reads_the_poll_interval_from_the_file():
    env = {k: v for k, v in os.environ.items() if not k.startswith('ANSIBLE_')}
    env['ANSIBLE_CONFIG'] = CFG
    out = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'ansible-config'), 'dump', '--only-changed'],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert 'DEFAULT_INTERNAL_POLL_INTERVAL(%s) = %s' % (CFG, VALUE) in out, out


def test_run_tests_hands_the_file_to_every_step():
    src = open(os.path.join(ROOT, 'lab', 'bin', 'run-tests.py')).read()
    assert "env.setdefault('ANSIBLE_CONFIG', os.path.join(ROOT, 'lab', 'ansible-tests.cfg'))" in src


def test_the_lab_configurations_agree():
    for path in ('lab/ansible-tests.cfg', 'lab/ansible.cfg'):
        cp = configparser.ConfigParser()
        cp.read(os.path.join(ROOT, path))
        assert cp.get('defaults', 'internal_poll_interval') == VALUE, path
    mol = yaml.safe_load(open(os.path.join(ROOT, 'molecule', '_shared', 'config.yml')))
    assert str(mol['ansible']['cfg']['defaults']['internal_poll_interval']) == VALUE
    for path in ('lab/tests/integration/test_gpu_sharing_stack.py', 'lab/tests/simulators/test_kube_emulator.py'):
        assert 'internal_poll_interval = %s\\n' % VALUE in open(os.path.join(ROOT, path)).read(), path
