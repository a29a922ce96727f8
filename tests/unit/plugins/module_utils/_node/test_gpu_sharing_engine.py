# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_sharing logic with a stand-in backend: validate first, plan, check mode, apply, pending MIG."""
import copy

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import gpu_sharing_engine as engine
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_config import SharingError

_TABLE = [('1g.10gb', 19, 1, 7, 1, [0, 1, 2, 3, 4, 5, 6]), ('2g.20gb', 14, 2, 3, 2, [0, 2, 4]),
          ('3g.40gb', 9, 3, 2, 4, [0, 4]), ('4g.40gb', 5, 4, 1, 4, [0]), ('7g.80gb', 0, 7, 1, 8, [0])]
PROFILES = dict((n, {'name': n, 'id': i, 'slices': s, 'max_instances': m, 'memory_mib': 10240 * ps,
                     'placement_size': ps, 'placements': pl}) for n, i, s, m, ps, pl in _TABLE)


def a100(index, mig=False, pending=None):
    return {'index': index, 'name': 'NVIDIA A100-SXM4-80GB', 'uuid': 'GPU-a100-%d' % index, 'pci_device_id': 0x20B210DE,
            'compute_capability': (8, 0), 'persistence_mode': True, 'compute_mode': 'default', 'mig_capable': True,
            'mig_current': mig, 'mig_pending': mig if pending is None else pending,
            'mig_profiles': copy.deepcopy(PROFILES), 'mig_profile_source': 'nvml', 'mig_instances': []}


def old_gpu(index, name, cc):
    return {'index': index, 'name': name, 'uuid': 'GPU-old-%d' % index, 'pci_device_id': 0x15F810DE,
            'compute_capability': cc, 'persistence_mode': False, 'compute_mode': 'default', 'mig_capable': False,
            'mig_current': None, 'mig_pending': None, 'mig_profiles': {}, 'mig_profile_source': None, 'mig_instances': []}


class FakeBackend(object):
    """Keeps GPUs as dicts; every change is recorded in ``calls``."""

    def __init__(self, gpus, immediate=False, fail_on=None):
        self.state = gpus
        self.immediate = immediate
        self.fail_on = fail_on
        self.calls = []

    def _call(self, name, *args):
        self.calls.append((name,) + args)
        if self.fail_on == name:
            raise RuntimeError('Insufficient Resources')

    def gpus(self):
        return copy.deepcopy(self.state)

    def gpu(self, index):
        return copy.deepcopy(self.state[index])

    def set_persistence_mode(self, index, value):
        self._call('persistence', index, value)
        self.state[index]['persistence_mode'] = value

    def set_compute_mode(self, index, value):
        self._call('compute_mode', index, value)
        self.state[index]['compute_mode'] = value

    def set_mig_mode(self, index, value):
        self._call('mig_mode', index, value)
        g = self.state[index]
        g['mig_pending'] = value
        if g['mig_current'] == value:
            return True
        if self.immediate:
            g['mig_current'] = value
            g['mig_instances'] = []
            return True
        return False

    def destroy_compute_instance(self, index, gi_id, ci_id):
        self._call('destroy_ci', index, gi_id, ci_id)
        gi = [g for g in self.state[index]['mig_instances'] if g['id'] == gi_id][0]
        gi['cis'] = [c for c in gi['cis'] if c['id'] != ci_id]

    def destroy_gpu_instance(self, index, gi_id):
        self._call('destroy_gi', index, gi_id)
        gi = [g for g in self.state[index]['mig_instances'] if g['id'] == gi_id][0]
        assert not gi['cis'], 'GI destroyed before its CIs'
        self.state[index]['mig_instances'].remove(gi)

    def create_gpu_instance(self, index, profile, start=None):
        self._call('create_gi', index, profile['name'], start)
        gis = self.state[index]['mig_instances']
        gid = max([g['id'] for g in gis] + [0]) + 1
        gis.append({'id': gid, 'profile': profile['name'], 'profile_id': profile['id'], 'start': start,
                    'size': profile['placement_size'], 'cis': []})
        return gid

    def create_full_compute_instance(self, index, gi_id, slices):
        self._call('create_ci', index, gi_id, slices)
        gi = [g for g in self.state[index]['mig_instances'] if g['id'] == gi_id][0]
        gi['cis'].append({'id': 0, 'profile_id': 0, 'slices': slices, 'full': True, 'name': gi['profile']})
        return 0


def cfg(devices):
    return {'version': 'v1', 'mig-configs': {'c': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': devices}]}}


def params(**kw):
    base = {'gpus': ['all'], 'persistence_mode': None, 'compute_mode': None, 'mig_mode': None, 'mig_config': None,
            'mig_config_name': None, 'mps': None}
    base.update(kw)
    return base


def test_check_mode_predicts_and_changes_nothing():
    be = FakeBackend([a100(0, mig=True)])
    res = engine.run(be, params(compute_mode='exclusive_process', mig_config=cfg({'3g.40gb': 2})), check_mode=True)
    assert be.calls == []
    assert res['changed'] is True
    assert res['actions'][0] == 'GPU 0: set compute mode exclusive_process (was default)'
    assert len(res['actions']) == 3
    assert res['gpus'][0]['mig_devices'] == {'3g.40gb': 2}
    assert res['diff']['before']['gpus'][0]['mig_devices'] == {}


def test_apply_then_idempotent():
    be = FakeBackend([a100(0, mig=True), a100(1, mig=True)])
    p = params(mig_config=cfg({'1g.10gb': 7}))
    res = engine.run(be, p, check_mode=False)
    assert res['changed'] is True and len(res['actions']) == 14
    assert res['gpus'][1]['mig_devices'] == {'1g.10gb': 7}
    be.calls = []
    res = engine.run(be, p, check_mode=False)
    assert res['changed'] is False and res['actions'] == [] and be.calls == []


def test_enable_mig_pending_defers_geometry():
    be = FakeBackend([a100(0)])
    res = engine.run(be, params(mig_config=cfg({'3g.40gb': 2})), check_mode=False)
    assert be.calls == [('mig_mode', 0, True)]
    assert res['reboot_required'] is True and res['gpu_reset_pending'] == [0]
    assert any('pending' in w and 'GPU 0 (NVIDIA A100-SXM4-80GB)' in w for w in res['warnings'])
    be.calls = []
    res = engine.run(be, params(mig_config=cfg({'3g.40gb': 2})), check_mode=False)
    assert be.calls == [] and res['changed'] is False and res['reboot_required'] is True


def test_enable_mig_immediate_applies_geometry_same_run():
    be = FakeBackend([a100(0)], immediate=True)
    res = engine.run(be, params(mig_config=cfg({'3g.40gb': 2})), check_mode=False)
    assert res['reboot_required'] is False
    assert [c[0] for c in be.calls] == ['mig_mode', 'create_gi', 'create_ci', 'create_gi', 'create_ci']
    assert res['gpus'][0]['mig_devices'] == {'3g.40gb': 2}


def test_disable_mig_destroys_instances_first():
    gpu = a100(0, mig=True)
    gpu['mig_instances'] = [{'id': 1, 'profile': '7g.80gb', 'profile_id': 0, 'start': 0, 'size': 8,
                             'cis': [{'id': 0, 'profile_id': 4, 'slices': 7, 'full': True, 'name': '7g.80gb'}]}]
    be = FakeBackend([gpu])
    res = engine.run(be, params(mig_mode='disabled'), check_mode=False)
    assert [c[0] for c in be.calls] == ['destroy_ci', 'destroy_gi', 'mig_mode']
    assert res['gpu_reset_pending'] == [0]


def test_refusal_happens_before_any_change():
    # GPU 0 would change (compute mode) but GPU 1 asks for a profile it does not have
    be = FakeBackend([a100(0, mig=True), a100(1, mig=True)])
    with pytest.raises(SharingError) as err:
        engine.run(be, params(compute_mode='prohibited', mig_config=cfg({'1g.5gb': 1})), check_mode=False)
    assert be.calls == []
    assert "GPU 0 (NVIDIA A100-SXM4-80GB): MIG profile '1g.5gb'" in str(err.value)


def test_mig_enabled_on_gpu_without_mig_refused():
    be = FakeBackend([old_gpu(0, 'Tesla T4', (7, 5)), a100(1)])
    with pytest.raises(SharingError) as err:
        engine.run(be, params(mig_mode='enabled'), check_mode=False)
    assert 'GPU 0 (Tesla T4)' in str(err.value) and 'MIG-capable GPUs on this node: 1 (NVIDIA A100-SXM4-80GB)' in str(err.value)
    res = engine.run(be, params(gpus=['1'], mig_mode='enabled'), check_mode=True)
    assert res['actions'] == ['GPU 1: enable MIG mode'] and be.calls == []
    res = engine.run(be, params(mig_mode='disabled'), check_mode=False)
    assert res['changed'] is False


def test_mps_refused_on_cc_6_before_anything_changes():
    be = FakeBackend([old_gpu(0, 'Tesla T4', (7, 5)), old_gpu(1, 'Tesla P100-PCIE-16GB', (6, 0))])
    with pytest.raises(SharingError) as err:
        engine.run(be, params(persistence_mode=True, mps={'state': 'present'}), check_mode=False)
    assert 'GPU 1 (Tesla P100-PCIE-16GB) has compute capability 6.0' in str(err.value)
    assert be.calls == []
    res = engine.run(be, params(gpus=['0'], mps={'state': 'present', 'active_thread_percentage': 20}), check_mode=False)
    assert 'set_default_active_thread_percentage 20' in res['mps']['content']
    assert 'CUDA_VISIBLE_DEVICES=GPU-old-0' in res['mps']['content']


def test_failure_half_way_lists_done_actions():
    be = FakeBackend([a100(0, mig=True)], fail_on='create_gi')
    be.state[0]['mig_instances'] = [{'id': 1, 'profile': '7g.80gb', 'profile_id': 0, 'start': 0, 'size': 8,
                                     'cis': [{'id': 0, 'profile_id': 4, 'slices': 7, 'full': True, 'name': '7g.80gb'}]}]
    with pytest.raises(engine.ApplyError) as err:
        engine.run(be, params(mig_config=cfg({'3g.40gb': 2})), check_mode=False)
    assert 'create GPU instance 3g.40gb' in str(err.value) and 'Insufficient Resources' in str(err.value)
    assert len(err.value.done) == 2 and 'destroy GPU instance 7g.80gb' in err.value.done[1]


def test_catalog_only_profiles_warn_when_unknown():
    gpu = a100(0)
    gpu['mig_profiles'] = {}
    be = FakeBackend([gpu])
    res = engine.run(be, params(mig_config=cfg({'1g.10gb': 1})), check_mode=True)
    assert any('checked once MIG mode is active' in w for w in res['warnings'])
    assert res['actions'] == ['GPU 0: enable MIG mode'] and res['reboot_required'] is True


def test_failure_of_the_compute_instance_reports_the_bare_gpu_instance():
    be = FakeBackend([a100(0, mig=True)], fail_on='create_ci')
    with pytest.raises(engine.ApplyError) as err:
        engine.run(be, params(mig_config=cfg({'7g.80gb': 1})), check_mode=False)
    assert err.value.done == ['GPU 0: create GPU instance 7g.80gb (id 1) - its compute instance failed']


def test_mig_active_without_profiles_refused():
    gpu = a100(0, mig=True)
    gpu['mig_profiles'] = {}
    be = FakeBackend([gpu])
    with pytest.raises(SharingError) as err:
        engine.run(be, params(mig_config=cfg({'1g.10gb': 1})), check_mode=False)
    assert 'GPU 0 (NVIDIA A100-SXM4-80GB)' in str(err.value) and 'no MIG profiles' in str(err.value)
    assert be.calls == []


def _cfg7():
    entry = {'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}
    return {'mig_config': {'version': 'v1', 'mig-configs': {'c': [entry]}}, 'mig_config_name': 'c', 'gpus': ['all']}


def test_verify_mig_on_without_devices_after_a_reboot_is_a_mismatch():
    backend = FakeBackend([a100(0, mig=True), a100(1, mig=False)])
    res = engine.verify(backend, _cfg7())
    assert res['mig_match'] is False
    assert res['mismatches'] == [
        'GPU 0 (NVIDIA A100-SXM4-80GB): MIG devices are no MIG devices, the geometry wants 7x 1g.10gb',
        'GPU 1 (NVIDIA A100-SXM4-80GB): MIG mode is disabled, the geometry wants it enabled']
    assert backend.calls == []
    # the same, per GPU, for callers that word it themselves (playbook upgrade_driver's filter upgrade_verify)
    assert [(g['index'], g['mig_current'], g['mig_devices'], g['wanted_mig_enabled'], g['wanted_mig_devices'],
             g['problems']) for g in res['mismatched_gpus']] == [
        (0, True, {}, True, {'1g.10gb': 7}, res['mismatches'][:1]),
        (1, False, {}, True, {'1g.10gb': 7}, res['mismatches'][1:])]


def test_verify_matches_after_apply_and_names_gpu_instances_without_compute_instance():
    backend = FakeBackend([a100(0, mig=True)])
    engine.run(backend, _cfg7(), False)
    assert engine.verify(backend, _cfg7()) == {'mig_match': True, 'mismatches': [], 'mismatched_gpus': [],
                                               'gpus': [engine.public_state(backend.gpu(0))]}
    backend.state[0]['mig_instances'][0]['cis'] = []
    res = engine.verify(backend, _cfg7())
    assert res['mig_match'] is False
    assert 'MIG devices are 6x 1g.10gb' in res['mismatches'][0]
    assert 'have no full-size compute instance' in res['mismatches'][1]


class BusyBackend(FakeBackend):
    """GPU 0 runs process 4242 for ``busy_polls`` polls; a fake clock advances 2 s per sleep (no real waiting)."""

    def __init__(self, gpus, busy_polls):
        super(BusyBackend, self).__init__(gpus)
        self.busy_polls = busy_polls
        self.now = 0
        self.polls = 0

    def processes(self, index):
        if index != 0:
            return []
        self.polls += 1
        return [4242] if self.polls <= self.busy_polls else []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_mig_change_on_a_busy_gpu_is_refused_before_any_change():
    backend = BusyBackend([a100(0, mig=True), a100(1, mig=True)], busy_polls=99)
    with pytest.raises(SharingError) as err:
        engine.run(backend, dict(_cfg7(), mig_busy_timeout=10), False)
    msg = str(err.value)
    assert 'nothing was changed' in msg and 'GPU 0 (NVIDIA A100-SXM4-80GB) is busy (process(es) 4242)' in msg
    assert 'GPU 1' not in msg and 'mig_busy_timeout' in msg and '(was 10 s)' in msg
    assert backend.calls == [] and backend.now >= 10


def test_mig_change_waits_for_the_gpu_to_become_idle():
    backend = BusyBackend([a100(0, mig=True)], busy_polls=2)
    res = engine.run(backend, dict(_cfg7(), mig_busy_timeout=10), False)
    assert res['changed'] is True and backend.now == 4
    assert engine.verify(backend, _cfg7())['mig_match'] is True


def test_busy_gpu_without_mig_change_is_not_checked():
    backend = BusyBackend([a100(0, mig=True)], busy_polls=0)
    engine.run(backend, _cfg7(), False)
    backend.polls, backend.busy_polls = 0, 99
    res = engine.run(backend, dict(_cfg7(), mig_busy_timeout=0), False)
    assert res['changed'] is False and backend.polls == 0
