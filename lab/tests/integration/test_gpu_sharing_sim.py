"""gpu_sharing end to end: the real module, run by Ansible, through the real nvidia-ml-py bindings, against the
NVML simulator. The simulator's state file is the ground truth: refusals and check mode must leave it byte for byte
unchanged."""
import json
import os
import subprocess

import pytest

from conftest import ROOT, run_module

SIM_DIR = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
INV_DIR = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories')
CTL = os.path.join(ROOT, 'lab', 'nvml_sim', 'nvml-sim-ctl')
MODULE = 'gpuops.k8s_gpu.gpu_sharing'

CONFIG = {
    'version': 'v1',
    'mig-configs': {
        'all-disabled': [{'devices': 'all', 'mig-enabled': False}],
        'all-1g.10gb': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}],
        'all-3g.40gb': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'MIG 3g.40gb': 2}}],
        'h100-gpu0': [{'devices': [0], 'mig-enabled': True, 'mig-devices': {'4g.40gb': 1, '1g.10gb': 3}}],
        'unknown-profile': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.5gb': 7}}],
        'too-many': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 8}}],
        'out-of-range': [{'devices': [0, 9], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1}}],
        'mixed-a100': [{'devices': 'all', 'device-filter': '0x20F110DE', 'mig-enabled': True,
                        'mig-devices': {'3g.20gb': 2}}],
    },
}


@pytest.fixture(scope='module', autouse=True)
def built_simulator():
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)
    assert os.path.exists(os.path.join(SIM_DIR, 'libnvidia-ml.so.1'))


def _env(inventory, state, **extra):
    env = {'LD_LIBRARY_PATH': SIM_DIR, 'NVML_SIM_INVENTORY': os.path.join(INV_DIR, inventory + '.json'),
           'NVML_SIM_STATE': str(state)}
    env.update(extra)
    return env


def _ctl(env, *args):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([CTL] + list(args), env=e, check=True, capture_output=True, text=True).stdout


def _materialise(env):
    """Write the state file (reset-gpu all is a no-op on modes that are not pending) and return its bytes."""
    _ctl(env, 'reset-gpu', 'all')
    with open(env['NVML_SIM_STATE'], 'rb') as f:
        return f.read()


def _state_bytes(env):
    with open(env['NVML_SIM_STATE'], 'rb') as f:
        return f.read()


def _state(env):
    return json.loads(_state_bytes(env))


def _run(env, args, check=False):
    return run_module(pytest.collections_path, MODULE, json.dumps(args), env=env, check=check)


@pytest.fixture(autouse=True)
def _cp(collections_path):
    pytest.collections_path = collections_path


def _geometry(gpu_state):
    """Sorted (profile_id, start, [ci profile ids]) of one GPU in the simulator's state file."""
    return sorted((g['profile_id'], g['start'], sorted(c['profile_id'] for c in g['compute_instances']))
                  for g in gpu_state['gpu_instances'])


def test_persistence_and_compute_mode(tmp_path):
    env = _env('t4', tmp_path / 's.json')
    before = _materialise(env)
    args = {'persistence_mode': True, 'compute_mode': 'exclusive_process'}
    res = _run(env, args, check=True)
    assert res.get('failed') is not True, res
    assert res['changed'] is True
    assert res['actions'] == ['GPU 0: set persistence mode enabled',
                              'GPU 0: set compute mode exclusive_process (was default)']
    assert res['gpus'][0]['compute_mode'] == 'exclusive_process'      # predicted
    assert _state_bytes(env) == before, 'check mode changed the GPU'
    res = _run(env, args)
    assert res['changed'] is True and len(res['actions']) == 2
    assert res['gpus'][0]['persistence_mode'] is True and res['gpus'][0]['compute_mode'] == 'exclusive_process'
    assert res['diff'][0]['before']['gpus'][0]['compute_mode'] == 'default'
    assert res['diff'][0]['after']['gpus'][0]['compute_mode'] == 'exclusive_process'
    st = _state(env)['gpus'][0]
    assert st['persistence_mode'] in (1, True) and st['compute_mode'] in (3, 'exclusive_process')
    res = _run(env, args)
    assert res['changed'] is False and res['actions'] == []


def test_mig_enable_pending_reset_geometry_and_idempotence(tmp_path):
    env = _env('hgx-a100-80gb', tmp_path / 's.json')
    args = {'mig_config': CONFIG, 'mig_config_name': 'all-1g.10gb'}
    res = _run(env, args)
    assert res.get('failed') is not True, res
    assert res['changed'] is True
    assert res['actions'] == ['GPU %d: enable MIG mode' % i for i in range(8)]
    assert res['reboot_required'] is True and res['gpu_reset_pending'] == list(range(8))
    assert any('pending' in w and 'GPU 0' in w for w in res['warnings'])
    assert all(g['mig_current'] is False and g['mig_pending'] is True for g in res['gpus'])
    # pending: nothing more to do until the reset, and that is said again
    res = _run(env, args)
    assert res['changed'] is False and res['reboot_required'] is True
    _ctl(env, 'reset-gpu', 'all')
    before = _state_bytes(env)
    res = _run(env, args, check=True)
    assert res['changed'] is True and res['reboot_required'] is False
    assert len([a for a in res['actions'] if 'create GPU instance 1g.10gb' in a]) == 56
    assert res['gpus'][3]['mig_devices'] == {'1g.10gb': 7}
    assert _state_bytes(env) == before, 'check mode changed the GPU'
    res = _run(env, args)
    assert res['changed'] is True and len(res['actions']) == 56
    for g in _state(env)['gpus']:
        assert _geometry(g) == [(19, s, [0]) for s in range(7)]
    assert all(g['mig_devices'] == {'1g.10gb': 7} for g in res['gpus'])
    # another geometry: everything destroyed (CIs first) and rebuilt
    args['mig_config_name'] = 'all-3g.40gb'
    res = _run(env, args)
    assert res['changed'] is True
    acts = res['actions']
    assert len(acts) == 8 * (7 + 7 + 2)
    gpu0 = [a for a in acts if a.startswith('GPU 0:')]
    assert all('compute instance' in a for a in gpu0[:7]) and all('destroy GPU instance' in a for a in gpu0[7:14])
    for g in _state(env)['gpus']:
        assert _geometry(g) == [(9, 0, [2]), (9, 4, [2])]
    res = _run(env, args)
    assert res['changed'] is False and res['actions'] == []
    # disabling destroys the instances first, then the mode change is pending again
    res = _run(env, dict(args, mig_config_name='all-disabled', gpus=['1']))
    assert res['changed'] is True and res['actions'][-1] == 'GPU 1: disable MIG mode'
    assert res['gpu_reset_pending'] == [1] and res['gpus'][0]['mig_instances'] == []


def test_h100_existing_geometry_replaced_exactly(tmp_path):
    env = _env('h100-mig', tmp_path / 's.json')
    args = {'mig_config': CONFIG, 'mig_config_name': 'h100-gpu0'}
    res = _run(env, args)
    assert res.get('failed') is not True, res
    # 3g.40gb@0 is in the way of 4g.40gb (placement 0 only); the 1g.10gb at 4, 5 stay; the one at 6 gets its CI
    assert res['actions'] == [
        'GPU 0: destroy compute instance 3g.40gb (id 0) in GPU instance 3g.40gb (id 1)',
        'GPU 0: destroy GPU instance 3g.40gb (id 1, placement 0)',
        'GPU 0: create compute instance 1g.10gb in GPU instance 1g.10gb (id 13)',
        'GPU 0: create GPU instance 4g.40gb at placement 0 with compute instance 4g.40gb',
    ]
    st = _state(env)['gpus']
    assert _geometry(st[0]) == [(5, 0, [3]), (19, 4, [0]), (19, 5, [0]), (19, 6, [0])]
    assert res['gpus'][0]['mig_devices'] == {'4g.40gb': 1, '1g.10gb': 3}
    res = _run(env, args)
    assert res['changed'] is False and res['actions'] == []


def test_mig_applied_in_one_run_when_mode_applies_immediately(tmp_path):
    env = _env('hgx-a100-80gb', tmp_path / 's.json', NVML_SIM_MIG_APPLY_IMMEDIATELY='1')
    res = _run(env, {'gpus': ['0'], 'mig_config': CONFIG, 'mig_config_name': 'all-3g.40gb'})
    assert res.get('failed') is not True, res
    assert res['reboot_required'] is False
    assert res['actions'][0] == 'GPU 0: enable MIG mode' and len(res['actions']) == 3
    assert _geometry(_state(env)['gpus'][0]) == [(9, 0, [2]), (9, 4, [2])]


@pytest.mark.parametrize('inventory,args,needles', [
    ('hgx-a100-80gb', {'mig_config': CONFIG, 'mig_config_name': 'unknown-profile'},
     ['GPU 0 (NVIDIA A100-SXM4-80GB)', "'1g.5gb'", '1g.10gb, ']),
    ('hgx-a100-80gb', {'mig_config': CONFIG, 'mig_config_name': 'too-many'}, ['GPU 0', '8 x', "'1g.10gb'", 'at most 7']),
    ('hgx-a100-80gb', {'mig_config': CONFIG, 'mig_config_name': 'out-of-range'}, ['GPU index 9', 'indexes 0-7']),
    ('hgx-a100-80gb', {'gpus': ['0', '8'], 'persistence_mode': False}, ['gpus', 'GPU index 8', 'indexes 0-7']),
    ('hgx-a100-80gb', {'mig_config': {'version': 'v2', 'mig-configs': {}}}, ["version 'v2'", "'v1'"]),
    ('t4', {'mig_mode': 'enabled'}, ['GPU 0 (Tesla T4)', 'does not support MIG', 'none']),
    ('mixed', {'persistence_mode': True, 'mps': {'unit_path': '/nonexistent/nvidia-mps.service'}},
     ['GPU 2 (Tesla P100-PCIE-16GB)', '6.0', '>= 7.0']),
    ('mixed', {'mig_config': CONFIG, 'mig_config_name': 'all-1g.10gb'}, ['GPU 0 (Tesla T4)', 'does not support MIG',
                                                                         '1 (NVIDIA A100-PCIE-40GB)']),
], ids=['unknown-profile', 'count-over-max', 'config-index-out-of-range', 'gpus-index-out-of-range',
        'malformed-version', 'mig-on-t4', 'mps-on-p100', 'mig-on-mixed'])
def test_refusals_change_nothing(tmp_path, inventory, args, needles):
    # more malformed configurations (counts, keys, names) are covered by the unit tests of gpu_sharing_config
    env = _env(inventory, tmp_path / 's.json')
    before = _materialise(env)
    res = _run(env, args)
    assert res.get('failed') is True, res
    assert res['changed'] is False and res['actions'] == []
    for needle in needles:
        assert needle in res['msg'], (needle, res['msg'])
    assert _state_bytes(env) == before


def test_device_filter_selects_the_a100_only(tmp_path):
    env = _env('mixed', tmp_path / 's.json', NVML_SIM_MIG_APPLY_IMMEDIATELY='1')
    res = _run(env, {'mig_config': CONFIG, 'mig_config_name': 'mixed-a100'})
    assert res.get('failed') is not True, res
    assert [a.split(':')[0] for a in res['actions']] == ['GPU 1'] * 3
    assert res['gpus'][1]['mig_devices'] == {'3g.20gb': 2}


def test_failure_half_way_reports_what_was_done(tmp_path):
    env = _env('hgx-a100-80gb', tmp_path / 's.json', NVML_SIM_MIG_APPLY_IMMEDIATELY='1')
    res = _run(env, {'gpus': ['0'], 'mig_mode': 'enabled'})
    assert res['changed'] is True
    env['NVML_SIM_ERRORS'] = 'nvmlDeviceCreateGpuInstanceWithPlacement:0=INSUFFICIENT_RESOURCES'
    res = _run(env, {'gpus': ['0'], 'mig_config': CONFIG, 'mig_config_name': 'all-3g.40gb'})
    assert res.get('failed') is True
    assert 'create GPU instance 3g.40gb' in res['msg'] and 'insufficient resources' in res['msg'].lower()
    assert res['changed'] is False and res['actions'] == []


def test_mps_unit_written_idempotent_and_removed(tmp_path):
    env = _env('mixed', tmp_path / 's.json')
    unit = tmp_path / 'systemd' / 'nvidia-mps.service'
    mps = {'unit_path': str(unit), 'pipe_directory': str(tmp_path / 'pipe'), 'log_directory': str(tmp_path / 'log'),
           'active_thread_percentage': 50, 'pinned_device_mem_limit': '0=2G,1=4G', 'backup': True}
    args = {'gpus': ['0', '1'], 'mps': mps}
    res = _run(env, args, check=True)
    assert res['changed'] is True and res['mps_unit_changed'] is True and not unit.exists()
    assert not (tmp_path / 'pipe').exists()
    res = _run(env, args)
    assert res.get('failed') is not True, res
    assert res['changed'] is True and res['mps_unit_changed'] is True
    text = unit.read_text()
    for line in ('ExecStart=/usr/bin/nvidia-cuda-mps-control -d',
                 'Environment=CUDA_MPS_PIPE_DIRECTORY=%s' % (tmp_path / 'pipe'),
                 'Environment=CUDA_MPS_LOG_DIRECTORY=%s' % (tmp_path / 'log'),
                 "ExecStartPost=/bin/sh -c 'echo set_default_active_thread_percentage 50 | /usr/bin/nvidia-cuda-mps-control'",
                 "ExecStartPost=/bin/sh -c 'echo set_default_device_pinned_mem_limit 0 2G | /usr/bin/nvidia-cuda-mps-control'",
                 "ExecStartPost=/bin/sh -c 'echo set_default_device_pinned_mem_limit 1 4G | /usr/bin/nvidia-cuda-mps-control'",
                 "ExecStop=/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'",
                 'Environment=CUDA_VISIBLE_DEVICES=GPU-a033c932-1be8-de8d-a358-534d46555ddf,'
                 'GPU-6d912eda-ea1e-1138-8276-88e233369a8a'):
        assert line in text.splitlines(), line
    assert (tmp_path / 'pipe').is_dir() and (tmp_path / 'log').is_dir()
    assert res['diff'][1]['after'] == text and res['diff'][1]['before'] == ''
    res = _run(env, args)
    assert res['changed'] is False and res['mps_unit_changed'] is False
    mps['active_thread_percentage'] = 25
    res = _run(env, args)
    assert res['mps_unit_changed'] is True and res['backup_file']
    assert 'set_default_active_thread_percentage 25' in unit.read_text()
    res = _run(env, {'gpus': ['0', '1'], 'mps': dict(mps, state='absent')})
    assert res['mps_unit_changed'] is True and not unit.exists()


def test_MIGP_15_media_extension_profiles_applied_on_rtx_pro_6000(tmp_path):
    """mig-parted's names for the RTX PRO 6000 Blackwell (-me, +me.all, +gfx) are accepted and applied."""
    env = _env('rtx-pro-6000-mig', tmp_path / 's.json')
    cfg = {'version': 'v1', 'mig-configs': {
        'media': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.24gb-me': 2, '2g.48gb+me.all': 1}}],
        'gfx': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'MIG 4g.96gb+gfx': 1}}],
        'bad': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.24gb+me': 1}}]}}
    res = _run(env, {'mig_config': cfg, 'mig_config_name': 'media'})
    assert res.get('failed') is not True, res
    assert res['gpus'][0]['mig_devices'] == {'1g.24gb-me': 2, '2g.48gb+me.all': 1}
    assert sorted(g[0] for g in _geometry(_state(env)['gpus'][0])) == [31, 31, 33]
    assert _run(env, {'mig_config': cfg, 'mig_config_name': 'media'})['changed'] is False
    res = _run(env, {'mig_config': cfg, 'mig_config_name': 'gfx'})
    assert res['gpus'][0]['mig_devices'] == {'4g.96gb+gfx': 1}
    before = _state_bytes(env)
    res = _run(env, {'mig_config': cfg, 'mig_config_name': 'bad'})
    assert res.get('failed') is True
    assert "'1g.24gb+me' is not available" in res['msg'] and '1g.24gb+me.all' in res['msg']
    assert _state_bytes(env) == before


def test_mig_verify_fails_when_the_instances_are_gone_and_passes_after_apply(tmp_path):
    """mig_verify (the check upgrade_driver's post-reboot verification calls): no change, clear message."""
    env = _env('h100-mig', tmp_path / 's.json')
    args = {'gpus': ['1'], 'mig_config': CONFIG, 'mig_config_name': 'all-3g.40gb'}
    before = _materialise(env)
    res = _run(env, dict(args, mig_verify=True))
    assert res.get('failed') is True and res['changed'] is False
    assert res['mig_match'] is False
    assert res['mismatches'] == ['GPU 1 (NVIDIA H100 80GB HBM3): MIG devices are no MIG devices, the geometry wants 2x 3g.40gb']
    assert 'GPU 1 (NVIDIA H100 80GB HBM3): MIG devices are no MIG devices' in res['msg']
    assert _state_bytes(env) == before, 'mig_verify changed the GPU'
    assert _run(env, args)['changed'] is True
    res = _run(env, dict(args, mig_verify=True))
    assert res.get('failed') is not True, res
    assert res['mig_match'] is True and res['mismatches'] == [] and res['changed'] is False
    res = _run(env, dict(args, mig_verify=True, compute_mode='default'))
    assert res.get('failed') is True and 'mutually exclusive' in res['msg']
