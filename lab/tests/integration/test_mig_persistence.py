"""MIG persistence end to end: in a systemd node container with the NVML simulator (stand-in for the driver), the
gpu_node_sharing role applies a mig pool's geometry and installs the boot unit; the GPU instances are then wiped as
a reboot does (MIG mode stays on, no instances), the unit is started and the geometry must be back. The unit's
ordering is read back from systemd. Needs the lab's docker engine and node image, like test_uninstall.py."""
import json
import os


import pytest
import yaml

from conftest import NVML_SIM_STATE as STATE, ansible_env, dexec, failed_tasks, lab_node, nvml_sim_state, run_playbook

UNIT = 'gpuops-mig-geometry.service'


@pytest.fixture(scope='module')
def node(collections_path):
    with lab_node('i16-migp-%d' % os.getpid(), 'migp-1', network='none', nvml_profile='h100-mig') as name:
        yield name


def geometry(name):
    return [sorted((g['profile_id'], g['start'], len(g['compute_instances'])) for g in gpu['gpu_instances'])
            for gpu in nvml_sim_state(name)['gpus']]


def run_role(collections_path, tmp_path, name, variables):
    inv = tmp_path / 'hosts.yml'
    inv.write_text(yaml.safe_dump({'all': {'hosts': {'migp-1': {
        'ansible_host': name, 'ansible_connection': 'community.docker.docker',
        'ansible_python_interpreter': '/usr/bin/python3'}}, 'vars': {'gpuops_become': False}}}))
    play = tmp_path / 'play.yml'
    play.write_text(yaml.safe_dump([{'hosts': 'all', 'gather_facts': False, 'roles': [
        {'role': 'gpuops.k8s_gpu.gpu_node_sharing', 'vars': variables}]}]))
    proc, doc = run_playbook(inv, play, ansible_env(collections_path))
    return proc.returncode, doc, failed_tasks(doc)


POOL = {'gpu_node_sharing_strategy': 'mig', 'gpu_sharing_stack_mig': {'devices': {'3g.40gb': 1, '2g.20gb': 1,
                                                                                  '1g.10gb': 2}},
        'gpu_node_sharing_refresh_facts': False}
WANT = [(9, 4, 1), (14, 0, 1), (19, 2, 1), (19, 3, 1)]  # the only layout that holds 3g + 2g + 2x 1g on an H100


def test_boot_unit_recreates_the_geometry_after_the_instances_are_wiped(collections_path, tmp_path, node):
    rc, doc, fails = run_role(collections_path, tmp_path, node, POOL)
    assert rc == 0, fails
    assert geometry(node) == [WANT, WANT]
    assert dexec(node, 'systemctl', 'is-enabled', UNIT).stdout.strip() == 'enabled'
    conf = json.loads(dexec(node, 'cat', '/etc/gpuops/mig/config.json').stdout)
    assert conf['mig-configs']['gpuops-1g-10gb-2-2g-20gb-1-3g-40gb-1'][0]['mig-devices'] == POOL[
        'gpu_sharing_stack_mig']['devices']
    props = dict(line.split('=', 1) for line in dexec(
        node, 'systemctl', 'show', UNIT, '-p', 'After', '-p', 'Before', '-p', 'WantedBy', '-p', 'Type').stdout.split('\n')
        if '=' in line)
    assert props['Type'] == 'oneshot'
    assert {'nvidia-persistenced.service', 'nvidia-fabricmanager.service'} <= set(props['After'].split())
    assert {'kubelet.service', 'nvidia-gpu-reset.target'} <= set(props['Before'].split())
    assert 'multi-user.target' in props['WantedBy'].split()
    # a reboot: MIG mode is still on, the GPU and compute instances are gone
    dexec(node, 'python3', '-c', 'import json; p=%r; d=json.load(open(p)); '
          '[g.update(gpu_instances=[]) for g in d["gpus"]]; json.dump(d, open(p, "w"))' % STATE)
    assert geometry(node) == [[], []]
    rc, doc, fails = run_role(collections_path, tmp_path, node, POOL)
    verify = [r for p in doc['plays'] for t in p['tasks'] for r in t['hosts'].values()
              if t['task']['name'].endswith("Check that the GPUs hold the pool's MIG geometry")]
    # the role itself re-applies and checks - wipe again so that the unit alone is tested
    assert rc == 0, fails
    assert verify and verify[0]['mig_match'] is True
    dexec(node, 'python3', '-c', 'import json; p=%r; d=json.load(open(p)); '
          '[g.update(gpu_instances=[]) for g in d["gpus"]]; json.dump(d, open(p, "w"))' % STATE)
    dexec(node, 'systemctl', 'start', UNIT)
    assert geometry(node) == [WANT, WANT]
    log = dexec(node, 'journalctl', '-u', UNIT, '--no-pager', '-o', 'cat').stdout
    assert 'GPU 1: MIG devices re-created (2x 1g.10gb + 1x 2g.20gb + 1x 3g.40gb' in log, log
    # started again with the geometry in place: nothing is touched
    dexec(node, 'systemctl', 'restart', UNIT)
    assert geometry(node) == [WANT, WANT]
    assert 'GPU 0: MIG devices already match' in dexec(node, 'journalctl', '-u', UNIT, '--no-pager', '-o', 'cat').stdout


def test_another_strategy_removes_the_boot_unit(collections_path, tmp_path, node):
    rc, doc, fails = run_role(collections_path, tmp_path, node, {'gpu_node_sharing_strategy': 'exclusive',
                                                                 'gpu_node_sharing_refresh_facts': False})
    assert rc == 0, fails
    assert dexec(node, 'test', '-e', '/etc/systemd/system/' + UNIT, check=False).returncode == 1
    assert dexec(node, 'test', '-e', '/etc/gpuops/mig/config.json', check=False).returncode == 1
    assert 'not-found' in dexec(node, 'systemctl', 'show', UNIT, '-p', 'LoadState').stdout



def test_state_absent_takes_back_the_boot_unit_then_changes_nothing(collections_path, tmp_path, node):
    rc, doc, fails = run_role(collections_path, tmp_path, node, POOL)
    assert rc == 0, fails
    assert dexec(node, 'systemctl', 'is-enabled', UNIT).stdout.strip() == 'enabled'
    absent = dict(POOL, gpu_node_sharing_state='absent')
    rc, doc, fails = run_role(collections_path, tmp_path, node, absent)
    assert rc == 0, fails
    assert doc['stats']['migp-1']['changed'] > 0, doc['stats']
    for path in ('/etc/systemd/system/' + UNIT, '/etc/gpuops/mig/config.json',
                 '/usr/local/libexec/gpuops/gpuops-mig-apply.py'):
        assert dexec(node, 'test', '-e', path, check=False).returncode == 1, path
    assert 'not-found' in dexec(node, 'systemctl', 'show', UNIT, '-p', 'LoadState').stdout
    # MIG mode and the GPU instances stay (pods may use them)
    assert geometry(node) == [WANT, WANT]
    rc, doc, fails = run_role(collections_path, tmp_path, node, absent)
    assert rc == 0, fails
    assert doc['stats']['migp-1']['changed'] == 0, doc['stats']
