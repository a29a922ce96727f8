"""gpu_doctor's health, readiness and virtualization checks on the NVML simulator answering as the real H100 did
(inventory h100-real-580, from lab/realgpu/samples/h100-580); each fault inventory differs from it only where the fault
is. The healthy case runs through Ansible; the fault cases run the module directly (python, module args on stdin-file),
which is the same code path without the CLI's second per run."""
import json
import os
import subprocess

import pytest

from conftest import ROOT, VENV_BIN, run_module

SIM_DIR = os.path.join(ROOT, 'lab', '.build', 'nvml_sim')
REAL = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', 'h100-real-580.json')
SIGNALS = os.path.join(ROOT, 'lab', 'realgpu', 'samples', 'h100-580', 'node-signals.txt')
MODULE = os.path.join(ROOT, 'plugins', 'modules', 'gpu_doctor.py')


@pytest.fixture(scope='module', autouse=True)
def built_simulator():
    subprocess.run(['bash', os.path.join(ROOT, 'lab', 'nvml_sim', 'build.sh')], check=True, capture_output=True)


@pytest.fixture
def dmesg(tmp_path):
    """The real node's kernel log lines (node-signals.txt): KVM, NVRM loading, the benign FBHUB line."""
    text = open(SIGNALS).read().split('## dmesg hypervisor/NVRM/Xid\n', 1)[1].split('\n## ', 1)[0]
    path = tmp_path / 'dmesg.txt'
    path.write_text(text + '\n')
    return path


def _inventory(tmp_path, mutate=None):
    data = json.load(open(REAL))
    if mutate:
        mutate(data['gpus'][0])
    path = tmp_path / 'inventory.json'
    path.write_text(json.dumps(data))
    return str(path)


def _env(inventory, tmp_path):
    return {'LD_LIBRARY_PATH': SIM_DIR, 'NVML_SIM_INVENTORY': inventory, 'NVML_SIM_STATE': str(tmp_path / 'state.json')}


def doctor(collections_path, tmp_path, inventory, **args):
    """The module run directly: python gpu_doctor.py ARGS_FILE (what Ansible does on the node, without the CLI)."""
    argfile = tmp_path / 'args.json'
    argfile.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ, PYTHONPATH=collections_path, **_env(inventory, tmp_path))
    proc = subprocess.run([os.path.join(VENV_BIN, 'python'), MODULE, str(argfile)], env=env, capture_output=True,
                          text=True, timeout=60)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('gpu_doctor did not answer JSON (rc=%s): %s %s' % (proc.returncode, proc.stdout, proc.stderr))


def _ids(res):
    return [f['id'] for f in res['findings']]


def test_real_h100_on_the_simulator_is_healthy_but_not_ready(collections_path, tmp_path, dmesg):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_doctor',
                     'strategy=time-slicing kernel_log=%s' % dmesg, env=_env(REAL, tmp_path))
    health = res['probe']['gpus'][0]['health']
    assert health['virtualization_mode'] == 'passthrough'
    assert health['remapped_rows'] == {'correctable': 0, 'uncorrectable': 0, 'pending': False, 'failure': False}
    assert health['pcie'] == {'gen': 5, 'width': 16, 'max_gen': 5, 'max_width': 16, 'gpu_max_gen': 5, 'replay': 0}
    assert health['clocks_event_reasons'] == ['gpu_idle']
    assert health['recovery_action'] == 'none'      # nvidia-smi -q of the real H100: GPU Recovery Action None
    assert res['probe']['nvml']['xid_events'] == []
    assert res['probe']['node']['hypervisor'] == 'kvm'
    assert 'gpu_passthrough' in _ids(res)
    # this lab machine's own container tools decide the readiness findings; the health ones must be absent
    health_ids = ('gpu_lost', 'ecc_uncorrectable', 'row_remap_pending', 'row_remap_failure', 'clocks_throttled',
                  'pcie_link_degraded', 'retired_pages_pending')
    assert not [i for i in _ids(res) if i in health_ids or i.startswith('xid_')]


FAULTS = [
    ('xid_nvml_event', lambda g: g.update(xid_events=[79]), 'xid_79', 'critical'),
    ('ecc_uncorrectable', lambda g: g.update(ecc_errors={'uncorrected_volatile': 1, 'uncorrected_aggregate': 1}),
     'ecc_uncorrectable', 'critical'),
    ('row_remap_pending', lambda g: g.update(remapped_rows={'uncorrectable': 1, 'pending': True}),
     'row_remap_pending', 'warning'),
    ('row_remap_failure', lambda g: g.update(remapped_rows={'uncorrectable': 9, 'failure': True}),
     'row_remap_failure', 'critical'),
    ('fallen_off_the_bus', lambda g: g['errors'].update({'*': 'GPU_IS_LOST'}), 'gpu_lost', 'critical'),
    ('throttle', lambda g: g.update(clocks_event_reasons=0x48), 'clocks_throttled', 'warning'),
    ('pcie_degraded', lambda g: g.update(pcie_link_width=8), 'pcie_link_degraded', 'warning'),
    ('retired_pages_pending', lambda g: g.update(retired_pages={'single_bit': 2, 'pending': True}),
     'retired_pages_pending', 'warning'),
    ('DH_12_recovery_action', lambda g: g.update(recovery_action=1), 'gpu_recovery_action', 'critical'),
]
DEEPER = [
    ('DH_16_hot', lambda g: g.update(temperature_c=90), 'gpu_temperature_slowdown', 'critical'),
    ('DH_16_warm', lambda g: g.update(temperature_c=85), 'gpu_temperature_high', 'warning'),
    ('DH_17_over_power', lambda g: g.update(power_usage_mw=760000), 'gpu_power_over_limit', 'critical'),
    ('DH_18_inforom_corrupted', lambda g: g.update(inforom_valid=False), 'inforom_corrupted', 'critical'),
]


@pytest.mark.parametrize('name,mutate,expected,severity', FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_found_on_the_simulator(collections_path, tmp_path, dmesg, name, mutate, expected, severity):
    checks = ['gpu_lost', 'xid', 'recovery_action', 'ecc', 'memory_repair', 'throttle', 'pcie', 'temperature', 'power',
              'inforom', 'nvlink', 'sxid']
    healthy = doctor(collections_path, tmp_path, _inventory(tmp_path), checks=checks, kernel_log=str(dmesg))
    assert healthy['findings'] == [], healthy['findings']
    res = doctor(collections_path, tmp_path, _inventory(tmp_path, mutate), checks=checks, kernel_log=str(dmesg))
    assert [(f['id'], f['severity']) for f in res['findings']] == [(expected, severity)]


@pytest.mark.parametrize('name,mutate,expected,severity', DEEPER, ids=[f[0] for f in DEEPER])
def test_DH_16_DH_17_DH_18_DH_21_temperature_power_inforom_on_the_simulator(collections_path, tmp_path, dmesg, name,
                                                                           mutate, expected, severity):
    """The real H100's answers (h100-real-580) give no finding with every new check (DH-21); each fault inventory
    differs only in its fault and gives exactly its finding."""
    test_each_fault_is_found_on_the_simulator(collections_path, tmp_path, dmesg, name, mutate, expected, severity)


def test_xid_in_the_kernel_log_since_boot(collections_path, tmp_path, dmesg):
    with open(str(dmesg), 'a') as f:
        f.write('[ 9001.123456] NVRM: Xid (PCI:0000:00:06): 79, pid=4242, name=python3, GPU has fallen off the bus.\n')
    res = doctor(collections_path, tmp_path, _inventory(tmp_path), checks=['xid'], kernel_log=str(dmesg))
    assert _ids(res) == ['xid_79']
    assert res['findings'][0]['evidence'][0].startswith('kernel log: NVRM: Xid (PCI:0000:00:06): 79')


def test_DH_05_simulator_answers_gi_profiles_with_mig_off_as_the_580_driver(collections_path, tmp_path):
    res = run_module(collections_path, 'gpuops.k8s_gpu.gpu_info', 'mig_profiles=true', env=_env(REAL, tmp_path))
    real = json.load(open(os.path.join(ROOT, 'lab', 'realgpu', 'samples', 'h100-580', 'gpu_info-mig_profiles.json')))
    ours, theirs = res['gpus'][0], real['gpus'][0]
    for key in sorted(theirs):
        assert ours.get(key) == theirs[key], key
    assert res['labels'] == real['labels']
    assert res['sharing'] == real['sharing']
    assert res['nvml'] == real['nvml'] or dict(res['nvml'], bindings_version=None) == dict(real['nvml'], bindings_version=None)


HGX = os.path.join(ROOT, 'lab', 'nvml_sim', 'inventories', 'hgx-a100-80gb.json')


def _hopper_hgx(tmp_path, **gpu1):
    """The HGX board with Hopper GPUs (NVLink fabric registration is Hopper and newer); GPU 1 carries the fault."""
    data = json.load(open(HGX))
    for g in data['gpus']:
        g['architecture'] = 'hopper'
    data['gpus'][1].update(gpu1)
    path = tmp_path / 'hgx-hopper.json'
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize('state,status,expected', [
    (None, None, []),
    ('not_started', None, [('fabric_registration_not_started', 'critical')]),
    ('in_progress', None, [('fabric_registration_in_progress', 'warning')]),
    ('completed', 'TIMEOUT', [('fabric_registration_failed', 'critical')]),
])
def test_DH_09_nvlink_fabric_registration_on_the_simulator(collections_path, tmp_path, state, status, expected):
    """nvmlDeviceGetGpuFabricInfoV on the simulator: registered (completed, success) by default for Hopper GPUs
    with NVLinks to NVSwitches; the A100 board answers NOT_SUPPORTED (no fabric state: nothing judged)."""
    fault = dict((k, v) for k, v in (('fabric_state', state), ('fabric_status', status)) if v)
    res = doctor(collections_path, tmp_path, _hopper_hgx(tmp_path, **fault), checks=['fabric'])
    assert [(f['id'], f['severity']) for f in res['findings']] == expected
    fabric = [g['health']['fabric'] for g in res['probe']['gpus']]
    assert fabric[0] == {'state': 'completed', 'status': 0, 'status_text': None}
    if expected:
        assert 'GPU 1 ' in res['findings'][0]['evidence'][0]
    if status:
        assert fabric[1] == {'state': 'completed', 'status': 10, 'status_text': 'Timeout'}
    a100 = doctor(collections_path, tmp_path, HGX, checks=['fabric'])
    assert a100['findings'] == [] and [g['health']['fabric'] for g in a100['probe']['gpus']] == [None] * 8


def test_DH_19_nvlink_state_and_counters_on_the_simulator(collections_path, tmp_path):
    """The HGX A100 board's NVLinks through the doctor: all 12 active and no errors is no finding; one link down and
    counted replays on GPU 1 are; the real H100 (NOT_SUPPORTED) is not applicable (covered by the fault cases)."""
    assert doctor(collections_path, tmp_path, HGX, checks=['nvlink'])['findings'] == []
    data = json.load(open(HGX))
    data['gpus'][1].update(nvlink_inactive=[3], nvlink_errors={'5': {'replay': 7}})
    path = tmp_path / 'hgx-nvlink.json'
    path.write_text(json.dumps(data))
    res = doctor(collections_path, tmp_path, str(path), checks=['nvlink'])
    assert [(f['id'], f['severity']) for f in res['findings']] == [('nvlink_inactive', 'critical'),
                                                                    ('nvlink_errors', 'warning')]
    assert res['findings'][1]['evidence'] == ['link 5: replay 7'] and 'GPU 1 ' in res['findings'][0]['summary']


def test_DH_20_nvswitch_sxid_in_the_kernel_log(collections_path, tmp_path, dmesg):
    """SXid lines as the 580 NVSwitch driver prints them (NVSWITCH_PRINT_SXID), after the real node's kernel log."""
    with open(str(dmesg), 'a') as f:
        f.write('[ 9001.000001] nvidia-nvswitch2: SXid (PCI:0000:c5:00.0): 12028, Fatal, Link 32 egress non-posted PRIV '
                'error (First)\n'
                '[ 9001.000002] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20034, Non-fatal, Link 08 LTSSM Fault Up\n')
    res = doctor(collections_path, tmp_path, _inventory(tmp_path), checks=['sxid'], kernel_log=str(dmesg))
    assert [(f['id'], f['severity']) for f in res['findings']] == [('nvswitch_sxid_fatal', 'critical'),
                                                                    ('nvswitch_sxid', 'warning')]
