# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import copy

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog

T4 = {'index': 0, 'name': 'Tesla T4', 'compute_capability': '7.5', 'compute_capability_major': 7,
      'compute_capability_minor': 5, 'persistence_mode': True, 'mig_capable': False, 'mig_profiles': []}

HEALTHY = {
    'nvml': {'status': 'ok', 'driver_version': '535.183.01'},
    'source': 'nvml',
    'gpus': [T4],
    'node': {'nouveau_loaded': False, 'nvidia_module_loaded': True, 'nvidia_module_version': '535.183.01',
             'secure_boot': 'disabled', 'hypervisor': None, 'pci_gpus': [{'name': 'TU104GL [Tesla T4]', 'driver': 'nvidia'}],
             'nvswitch_count': 0, 'fabricmanager_required': False, 'fabricmanager_unit': 'not-found',
             'container_runtimes': {'installed': ['containerd', 'nvidia-container-runtime', 'nvidia-ctk'],
                                    'containerd_nvidia_runtime': True}},
}
HEALTHY['sharing'] = gpu_catalog.sharing_capabilities(HEALTHY['gpus'])


def facts(**changes):
    f = copy.deepcopy(HEALTHY)
    for path, value in changes.items():
        target = f
        keys = path.split('__')
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
    return f


def ids(findings):
    return [x['id'] for x in findings]


def test_healthy_node_has_no_findings():
    assert dc.diagnose(HEALTHY) == []
    assert dc.render_table('n1', []) == 'n1: no problem found'


def test_every_finding_is_complete():
    f = facts(node__nouveau_loaded=True, node__secure_boot='enabled', node__nvidia_module_loaded=False)
    f['nvml'] = {'status': 'driver_not_loaded'}
    for x in dc.diagnose(f):
        assert set(x) == {'id', 'severity', 'summary', 'evidence', 'remediation'}
        assert x['severity'] in dc.SEVERITIES
        assert x['evidence'] and x['remediation']


def test_nouveau():
    out = dc.diagnose(facts(node__nouveau_loaded=True))
    assert ids(out) == ['nouveau_loaded']
    assert 'modeset=0' in out[0]['remediation']


def test_secure_boot_blocks_unsigned_module():
    out = dc.diagnose(facts(node__secure_boot='enabled', node__nvidia_module_loaded=False))
    assert 'secure_boot_unsigned_module' in ids(out)
    out = dc.diagnose(facts(node__secure_boot='enabled'), extra={'nvidia_taint': 'OE'})
    assert [(x['id'], x['severity']) for x in out] == [('secure_boot_unsigned_module', 'warning')]


def test_driver_not_loaded_and_not_installed():
    f = facts()
    f['nvml'] = {'status': 'driver_not_loaded'}
    f['source'] = 'pci'
    f['gpus'] = [{'index': 0, 'name': 'TU104GL [Tesla T4]'}]
    out = dc.diagnose(f, checks=['driver'])
    assert ids(out) == ['driver_not_loaded']
    assert any('Tesla T4' in e for e in out[0]['evidence'])
    f['nvml'] = {'status': 'not_installed'}
    assert ids(dc.diagnose(f, checks=['driver'])) == ['driver_not_installed']


def test_version_mismatch():
    f = facts()
    f['nvml'] = {'status': 'version_mismatch'}
    out = dc.diagnose(f, extra={'nvml_library_version': '535.261.03'}, checks=['version_mismatch'])
    assert ids(out) == ['nvml_version_mismatch']
    assert 'kernel module: 535.183.01' in out[0]['evidence']
    assert 'libnvidia-ml: 535.261.03' in out[0]['evidence']


@pytest.mark.parametrize('unit,active,version,expected', [
    ('not-found', None, None, 'fabricmanager_missing'),
    ('enabled', 'inactive', '535.183.01', 'fabricmanager_inactive'),
    ('enabled', 'active', '535.161.08', 'fabricmanager_version'),
    ('enabled', 'active', '535.183.01', None),
])
def test_fabricmanager(unit, active, version, expected):
    f = facts(node__fabricmanager_required=True, node__nvswitch_count=6, node__fabricmanager_unit=unit)
    out = dc.diagnose(f, extra={'fabricmanager_active': active, 'fabricmanager_version': version})
    assert ids(out) == ([expected] if expected else [])
    if expected:
        assert '802' in out[0]['summary'] + out[0]['remediation']
        assert 'NVSwitch devices: 6' in out[0]['evidence']


def test_fabricmanager_not_needed_without_nvswitch():
    assert dc.diagnose(facts(node__fabricmanager_unit='not-found')) == []


def test_persistence_off_names_gpus():
    f = facts()
    f['gpus'] = [dict(T4, persistence_mode=False), dict(T4, index=1)]
    out = dc.diagnose(f)
    assert ids(out) == ['persistence_mode_off']
    assert out[0]['evidence'] == ['GPUs with persistence mode off: 0']


def test_vmware_geforce_with_visible_hypervisor():
    f = facts(node__hypervisor='vmware')
    f['gpus'] = [dict(T4, name='NVIDIA GeForce RTX 3090')]
    assert ids(dc.diagnose(f, extra={'hypervisor_cpu_flag': True})) == ['vmware_consumer_gpu_hypervisor_visible']
    assert dc.diagnose(f, extra={'hypervisor_cpu_flag': False}) == []
    assert dc.diagnose(facts(node__hypervisor='vmware')) == []  # a Tesla is fine


def test_runtime_missing_and_not_default():
    f = facts()
    f['node']['container_runtimes'] = {'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': False}
    assert ids(dc.diagnose(f)) == ['docker_nvidia_runtime_missing']
    f['node']['container_runtimes'] = {'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': True,
                                       'docker_default_runtime': 'runc'}
    assert [x for x in dc.diagnose(f, strategy='time-slicing') if x['severity'] != 'info'] == []
    assert ids(dc.diagnose(f, strategy='gpushare')) == ['docker_nvidia_not_default']
    f['node']['container_runtimes'] = {'installed': ['containerd', 'nvidia-ctk'], 'containerd_nvidia_runtime': False}
    assert ids(dc.diagnose(f)) == ['containerd_nvidia_runtime_missing']


def test_strategy_impossible_names_the_gpu():
    f = facts()
    f['gpus'] = [T4, dict(T4, index=1, name='Tesla P100-PCIE-16GB', compute_capability='6.0',
                          compute_capability_major=6, compute_capability_minor=0)]
    f['sharing'] = gpu_catalog.sharing_capabilities(f['gpus'])
    out = dc.diagnose(f, strategy='mps')
    assert ids(out) == ['strategy_impossible']
    assert 'Tesla P100-PCIE-16GB' in out[0]['evidence'][0]
    assert ids(dc.diagnose(f, strategy='mig')) == ['strategy_impossible']
    assert dc.diagnose(f, strategy='time-slicing') == []


def test_critical_sorted_first_and_table():
    f = facts(node__nouveau_loaded=True)
    f['gpus'] = [dict(T4, persistence_mode=False)]
    out = dc.diagnose(f)
    assert [x['severity'] for x in out] == ['critical', 'warning']
    table = dc.render_table('gpu1', out)
    assert 'nouveau_loaded' in table and 'fix:' in table and 'evidence:' in table


@pytest.mark.parametrize('kind,api,version,expected', [
    ('Policy', 'v1', 'v1.22.17', None),
    ('Policy', 'v1', 'v1.23.0', 'scheduler_config_api_removed'),
    ('KubeSchedulerConfiguration', 'kubescheduler.config.k8s.io/v1beta3', 'v1.24.3', None),
    ('KubeSchedulerConfiguration', 'kubescheduler.config.k8s.io/v1beta3', 'v1.29.4', 'scheduler_config_api_removed'),
    ('KubeSchedulerConfiguration', 'kubescheduler.config.k8s.io/v1', 'v1.24.3', 'scheduler_config_api_removed'),
    ('KubeSchedulerConfiguration', 'kubescheduler.config.k8s.io/v1', 'v1.33.1', None),
    ('KubeSchedulerConfiguration', 'kubescheduler.config.k8s.io/v1alpha1', 'v1.30.0', 'scheduler_config_api_unknown'),
])
def test_scheduler_config_against_version(kind, api, version, expected):
    extra = {'scheduler_config': {'kind': kind, 'apiVersion': api}, 'kubernetes_version': version,
             'scheduler_config_path': '/etc/kubernetes/scheduler-config.yaml'}
    out = dc.diagnose(HEALTHY, extra=extra)
    assert ids(out) == ([expected] if expected else [])
    if expected:
        assert any(version in e for e in out[0]['evidence'])


def test_scheduler_check_needs_both_inputs():
    assert dc.diagnose(HEALTHY, extra={'scheduler_config': {'kind': 'Policy', 'apiVersion': 'v1'}}) == []


def test_extender_unreachable():
    out = dc.diagnose(HEALTHY, extra={'extender_probes': {'http://127.0.0.1:32766/gpushare-scheduler': 'Connection refused',
                                                          'http://ok:1/x': None}})
    assert ids(out) == ['extender_unreachable']
    assert 'Connection refused' in out[0]['evidence'][0]


def test_known_bad_gpushare_image_any_registry():
    out = dc.diagnose(HEALTHY, extra={'cluster_images': [
        'registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a',
        'registry.example.com/mirror/acs/k8s-gpushare-schd-extender:1.11-d170d8a',
        'registry.example.com/acs/k8s-gpushare-schd-extender:2.0.1']})
    assert ids(out) == ['gpushare_extender_bad_image', 'gpushare_extender_bad_image']
    assert 'HTTP 500' in out[0]['summary']


@pytest.mark.parametrize('strategy', ['exclusive', 'time-slicing', 'mps', 'mig'])
def test_DP_18_doctor_says_nvidia_stacks_need_the_runtime_class(strategy):
    """The doctor used to say only gpushare/Volcano/HAMi need the nvidia runtime: the NVIDIA device plugin stacks need
    it too, through RuntimeClass nvidia (handler nvidia); it need not be the default."""
    f = facts()   # containerd with the nvidia runtime, not the default: nothing to report
    assert [x for x in dc.diagnose(f, strategy=strategy) if x['id'] != 'strategy_impossible'] == []
    f['node']['container_runtimes'] = {'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': True,
                                       'docker_default_runtime': 'runc'}
    # not the default: no problem for the stacks, only the note that GPU pods name the RuntimeClass (issue #27)
    assert [(x['id'], x['severity']) for x in dc.diagnose(f, strategy=strategy) if x['id'] != 'strategy_impossible'] \
        == [('runtime_class_nvidia_required', 'info')]
    for rt, check in (({'installed': ['containerd', 'nvidia-ctk'], 'containerd_nvidia_runtime': False}, 'containerd_nvidia_runtime_missing'),
                      ({'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': False}, 'docker_nvidia_runtime_missing')):
        f['node']['container_runtimes'] = rt
        found = [x for x in dc.diagnose(f, strategy=strategy) if x['id'] != 'strategy_impossible']
        assert ids(found) == [check] and 'RuntimeClass nvidia' in found[0]['remediation'], found


def test_DRV_10_secure_boot_finding_points_to_signed_precompiled_modules():
    out = dc.diagnose(facts(node__secure_boot='enabled', node__nvidia_module_loaded=False))
    f = [x for x in out if x['id'] == 'secure_boot_unsigned_module'][0]
    assert 'nvidia_driver_ubuntu_precompiled' in f['remediation']
    assert '<kernel flavour>' not in f['remediation']


def test_DRV_10_secure_boot_advice_names_the_packages_of_the_running_kernel():
    """The advice said linux-modules-nvidia-<branch>-server[-open]-<kernel flavour>; the packages are named after
    `uname -r` (precompiled_module_packages), and the branch is the installed driver's where there is one."""
    f = facts(node__secure_boot='enabled', node__nvidia_module_loaded=False, node__kernel_release='6.8.0-49-generic')
    extra = {'nvml_library_version': '580.159.04', 'machine': 'x86_64'}
    text = [x for x in dc.diagnose(f, extra=extra) if x['id'] == 'secure_boot_unsigned_module'][0]['remediation']
    assert 'open kernel modules: linux-modules-nvidia-580-server-open-6.8.0-49-generic ' \
           'linux-signatures-nvidia-6.8.0-49-generic' in text, text
    assert 'proprietary: linux-objects-nvidia-580-server-6.8.0-49-generic linux-modules-nvidia-580-server-6.8.0-49-generic' in text
    f['node']['kernel_release'] = '6.8.0-1012-nvidia-64k'
    text = [x for x in dc.diagnose(f, extra={'machine': 'aarch64'})
            if x['id'] == 'secure_boot_unsigned_module'][0]['remediation']
    assert 'linux-modules-nvidia-<branch>-server-open-6.8.0-1012-nvidia-64k' in text and 'signatures' not in text
    f['node']['kernel_release'] = None   # not read: the advice still says what to install
    text = [x for x in dc.diagnose(f) if x['id'] == 'secure_boot_unsigned_module'][0]['remediation']
    assert 'linux-modules-nvidia-<branch>-server-open-$(uname -r)' in text


def test_DRV_32_driver_not_loaded_advice_names_the_registered_dkms_module():
    f = facts()
    f['nvml'] = {'status': 'driver_not_loaded'}
    out = dc.diagnose(f, extra={'dkms_module': 'nvidia-srv'}, checks=['driver'])
    assert 'dkms install -m nvidia-srv -v <version>' in out[0]['remediation']
    out = dc.diagnose(f, extra={'dkms_module': None}, checks=['driver'])
    assert 'nvidia-srv for Ubuntu' in out[0]['remediation']


def test_DRV_21_persistence_finding_names_the_unit_override():
    out = dc.diagnose(facts(gpus=[dict(T4, persistence_mode=False)]))
    f = [x for x in out if x['id'] == 'persistence_mode_off'][0]
    assert '--no-persistence-mode' in f['remediation'] and 'nvidia_driver_persistence_mode' in f['remediation']
    on = dc.diagnose(facts(gpus=[dict(T4, persistence_mode=True)]))
    assert 'persistence_mode_off' not in [x['id'] for x in on]


def test_the_doctor_reads_the_default_runtime_strategies_from_the_model():
    """The doctor kept its own list (gpushare, volcano, hami) of strategies that need nvidia as docker's default
    runtime; it now asks the strategy model, and its messages name the model's strategies."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs
    assert not hasattr(dc, 'NEEDS_DEFAULT_RUNTIME')
    f = facts()
    f['node']['container_runtimes'] = {'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': True,
                                       'docker_default_runtime': 'runc'}
    flagged = [s for s in gs.NODE_STRATEGIES
               if 'docker_nvidia_not_default' in ids(dc.diagnose(f, strategy=s, checks=['runtime']))]
    assert tuple(flagged) == gs.DEFAULT_RUNTIME_STRATEGIES
    for rt in ({'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': False},
               {'installed': ['containerd', 'nvidia-ctk'], 'containerd_nvidia_runtime': False}):
        f['node']['container_runtimes'] = rt
        text = dc.diagnose(f, checks=['runtime'])[0]['remediation']
        assert '(exclusive, time-slicing, mps, mig) run their pods with RuntimeClass nvidia' in text, text
        assert 'gpushare, Volcano and HAMi need it as the default runtime.' in text, text


@pytest.mark.parametrize('engine,rt', [
    ('docker', {'installed': ['docker', 'nvidia-ctk'], 'docker_nvidia_runtime': True, 'docker_default_runtime': 'runc'}),
    ('containerd', {'installed': ['containerd', 'nvidia-ctk'], 'containerd_nvidia_runtime': True,
                    'containerd_default_runtime': 'runc'}),
])
def test_DH_10_runtime_class_needed_where_nvidia_is_not_the_default(engine, rt):
    """Issue #27 item 1: the NVIDIA device plugin stacks' GPU pods need runtimeClassName nvidia unless nvidia is the
    default runtime or CDI is used: an info finding for those strategies only (from the strategy model)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy as gs
    f = facts()
    f['node']['container_runtimes'] = dict(rt)
    flagged = [s for s in gs.NODE_STRATEGIES
               if 'runtime_class_nvidia_required' in ids(dc.diagnose(f, strategy=s, checks=['readiness']))]
    assert tuple(flagged) == gs.RUNTIME_CLASS_STRATEGIES == ('exclusive', 'time-slicing', 'mps', 'mig')
    out = dc.diagnose(f, strategy='time-slicing', checks=['readiness'])
    assert out[0]['severity'] == 'info' and engine in out[0]['summary'] and 'runc' in out[0]['evidence'][0]
    assert 'runtimeClassName: nvidia' in out[0]['remediation']
    f['node']['container_runtimes']['cdi_specs'] = ['/etc/cdi/nvidia.yaml']
    assert dc.diagnose(f, strategy='time-slicing', checks=['readiness'], extra={'cdi_required': True}) == []
    key = '%s_default_runtime' % engine
    f['node']['container_runtimes'][key] = 'nvidia'
    assert dc.diagnose(f, strategy='time-slicing', checks=['readiness']) == []
    f['node']['container_runtimes'][key] = None   # not read: nothing to judge
    assert dc.diagnose(f, strategy='time-slicing', checks=['readiness']) == []


@pytest.mark.parametrize('status', ['bindings_outdated', 'bindings_missing'])
def test_unusable_binding_is_no_impossible_strategy(status):
    """A probe whose binding failed said "no NVIDIA GPU found", and the doctor judged strategy_impossible (critical),
    so the gate left the node out of its pool for the collection's own tooling problem: now a warning that names it."""
    f = facts()
    f['nvml'] = {'status': status, 'error': 'the installed NVML Python binding (11.525.112) lacks ...'}
    f['source'] = 'pci'
    f['gpus'] = []
    f['sharing'] = gpu_catalog.sharing_capabilities([])
    out = dc.diagnose(f, strategy='time-slicing', checks=['driver', 'strategy'])
    assert [(x['id'], x['severity']) for x in out] == [('nvml_bindings_unusable', 'warning')]
    assert '11.525.112' in out[0]['evidence'][1] and 'nvidia-ml-py' in out[0]['remediation']
