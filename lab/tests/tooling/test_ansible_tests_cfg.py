"""lab/ansible-tests.cfg: the configuration `make test` gives ansible runs that bring none of their own.

ansible-core reads internal_poll_interval only from a configuration file (it has no environment variable), so the
file must parse to the value, run-tests.py must hand it out (and keep a configuration the caller chose), and the
configurations the lab cannot point at the file (the demo's lab/ansible.cfg, the molecule scenarios' generated one)
must set the same value.
"""
import configparser
import importlib.util
import os
import subprocess

import yaml

from conftest import ANSIBLE_TESTS_CFG, ROOT

VALUE = '0.01'
_SPEC = importlib.util.spec_from_file_location('run_tests', os.path.join(ROOT, 'lab', 'bin', 'run-tests.py'))
run_tests = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(run_tests)


def test_ansible_reads_the_poll_interval_from_the_file():
    env = {k: v for k, v in os.environ.items() if not k.startswith('ANSIBLE_')}
    env['ANSIBLE_CONFIG'] = ANSIBLE_TESTS_CFG
    out = subprocess.run([os.path.join(ROOT, '.venv', 'bin', 'ansible-config'), 'dump', '--only-changed'],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert 'DEFAULT_INTERNAL_POLL_INTERVAL(%s) = %s' % (ANSIBLE_TESTS_CFG, VALUE) in out, out


def test_run_tests_hands_the_file_to_every_step_and_keeps_a_chosen_one():
    assert run_tests.suite_env({'PATH': '/usr/bin'})['ANSIBLE_CONFIG'] == ANSIBLE_TESTS_CFG
    assert run_tests.suite_env({'ANSIBLE_CONFIG': '/etc/site.cfg'})['ANSIBLE_CONFIG'] == '/etc/site.cfg'


def test_the_lab_configurations_agree():
    for path in (ANSIBLE_TESTS_CFG, os.path.join(ROOT, 'lab', 'ansible.cfg')):
        cp = configparser.ConfigParser()
        cp.read(path)
        assert cp.get('defaults', 'internal_poll_interval') == VALUE, path
    mol = yaml.safe_load(open(os.path.join(ROOT, 'molecule', '_shared', 'config.yml')))
    assert str(mol['ansible']['cfg']['defaults']['internal_poll_interval']) == VALUE
