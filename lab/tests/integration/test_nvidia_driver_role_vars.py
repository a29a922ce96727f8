"""The nvidia_driver role's internal package lists (roles/nvidia_driver/vars/main.yml), rendered with Ansible's own
templating as the role renders them at its first read of the node (tasks/main.yml, "Read the driver state of the
node"), when nvidia_driver__before does not exist yet.

NVLink5 (HGX B200/B300, GB200): nvlsm, infiniband-diags and libnvsdm must be in that first read's package list on
every run, so that a node converged by an older release of the role (which installed them only on a fresh install)
is found missing them and gains them, and a re-run finds nothing missing. No node is needed: seconds.
"""
import os

import pytest
import yaml

from conftest import ROOT

try:   # ansible-core 2.19+: only trusted strings are templated
    from ansible.template import trust_as_template
except ImportError:   # older ansible-core: every string is a template
    def trust_as_template(value):
        return value
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

VARS = os.path.join(ROOT, 'roles', 'nvidia_driver', 'vars', 'main.yml')


def selection(wanted, fm_packages=('nvidia-fabricmanager', 'libnvidia-nscq')):
    """What nvidia_driver_info (select: true) returns for Ubuntu + NVIDIA's CUDA repository, R580, x86_64."""
    return {'selection': {'flavour': {'effective': 'open'},
                          'branch_lock': {'kind': 'apt', 'packages': ['nvidia-driver-pinning-580']}, 'packages': {
        'pinned': ['nvidia-open', 'libnvidia-compute-580'], 'unpinned': [],
        'version_package': 'libnvidia-compute-580', 'fabricmanager': list(fm_packages),
        'nvlink5': {'pinned': ['libnvsdm'], 'unpinned': ['nvlsm', 'infiniband-diags'], 'wanted': wanted,
                    'keep_on_removal': ['infiniband-diags']}}}}


def render(expr, **extra):
    with open(VARS) as f:
        role_vars = yaml.safe_load(f)
    ctx = dict((k, trust_as_template(v) if isinstance(v, str) else v) for k, v in role_vars.items())
    ctx.update(nvidia_driver_packages=[], nvidia_driver_extra_packages=[], nvidia_driver_fabricmanager_packages=[],
               nvidia_driver_version='', ansible_facts={'distribution': 'Ubuntu', 'os_family': 'Debian'})
    ctx.update(extra)
    return Templar(loader=DataLoader(), variables=ctx).template(trust_as_template(expr))


@pytest.mark.parametrize('wanted', [True, False])
def test_DRV_28_nvlink5_packages_in_the_first_read_without_nvidia_driver_before(wanted):
    sel = selection(wanted)
    extras = render('{{ nvidia_driver__extras }}', nvidia_driver__selection=sel)
    fm = render('{{ nvidia_driver__fm_packages }}', nvidia_driver__selection=sel)
    specs = render('{{ nvidia_driver__apt_specs }}', nvidia_driver__selection=sel)
    if wanted:
        assert {'nvlsm', 'infiniband-diags'} <= set(extras), extras
        assert 'libnvsdm' in fm, fm
        # the first read's package_specs: apt runs on a converged node that lacks them
        assert {'nvlsm', 'infiniband-diags'} <= set(specs), specs
    else:
        assert not ({'nvlsm', 'infiniband-diags'} & set(extras)), extras
        assert 'libnvsdm' not in fm, fm


def test_DRV_28_nvlink5_wanted_does_not_depend_on_the_read_after_install():
    # the old wiring read nvidia_driver__before.fabricmanager.nvlink5: set only from the first read on, so the first
    # read itself (the one that decides whether apt runs) never asked for the NVLink5 packages
    before = {'fabricmanager': {'wanted': True, 'nvlink5': True}}
    sel = selection(True)
    assert render('{{ nvidia_driver__extras }}', nvidia_driver__selection=sel) == render(
        '{{ nvidia_driver__extras }}', nvidia_driver__selection=sel, nvidia_driver__before=before)


DEFAULTS = os.path.join(ROOT, 'roles', 'nvidia_driver', 'defaults', 'main.yml')
RHEL_FACTS = {'os_family': 'RedHat', 'distribution': 'Rocky', 'distribution_major_version': '9',
              'distribution_version': '9.6'}


def render_default(expr, facts, mirror=None):
    with open(DEFAULTS) as f:
        defaults = yaml.safe_load(f)
    ctx = dict((k, trust_as_template(v) if isinstance(v, str) else v) for k, v in defaults.items())
    ctx.update(ansible_facts=facts, gpuops_mirror=mirror or {})
    return Templar(loader=DataLoader(), variables=ctx).template(trust_as_template(expr)).strip()


@pytest.mark.parametrize('arch, repo_arch', [('x86_64', 'x86_64'), ('aarch64', 'sbsa')])
def test_DRV_30_rhel_cuda_repository_layout_and_key(arch, repo_arch):
    # NVIDIA/ansible-role-nvidia-driver v2.3.1 (defaults/main.yml, vars/main.yml) and gpu-driver-container
    # rhel9/install.sh: .../compute/cuda/repos/rhel<major>/<x86_64|sbsa>/, key D42D0685.pub
    facts = dict(RHEL_FACTS, architecture=arch)
    url = render_default('{{ nvidia_driver_cuda_repo_url }}', facts)
    assert url == 'https://developer.download.nvidia.com/compute/cuda/repos/rhel9/%s/' % repo_arch
    assert render_default('{{ nvidia_driver_cuda_repo_key_url }}', facts) == url + 'D42D0685.pub'
    mirrored = render_default('{{ nvidia_driver_cuda_repo_url }}', facts, {'apt': 'http://mirror.lab'})
    assert mirrored == 'http://mirror.lab/nvidia-cuda/rhel9/%s/' % repo_arch


def test_DRV_31_epel_for_dkms_through_the_mirror_setting():
    # NVIDIA/ansible-role-nvidia-driver v2.3.1 (tasks/install-redhat.yml): dkms from EPEL, key RPM-GPG-KEY-EPEL-<major>
    facts = dict(RHEL_FACTS, architecture='x86_64')
    assert render_default('{{ nvidia_driver_epel_url }}', facts) == (
        'https://dl.fedoraproject.org/pub/epel/9/Everything/x86_64')
    assert render_default('{{ nvidia_driver_epel_key_url }}', facts) == (
        'https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9')
    assert render_default('{{ nvidia_driver_epel_url }}', facts, {'apt': 'http://mirror.lab'}) == (
        'http://mirror.lab/epel/9/Everything/x86_64')


TASKS = os.path.join(ROOT, 'roles', 'nvidia_driver', 'tasks')


def _tasks(name):
    with open(os.path.join(TASKS, name)) as f:
        return yaml.safe_load(f)


def _index(tasks, pred, what):
    found = [i for i, t in enumerate(tasks) if pred(t)]
    assert found, 'no task %s' % what
    return found[0]


def test_DRV_33_apt_branch_locked_before_the_driver_transaction():
    """CUDA repository (apt): the apt preferences and nvidia-driver-pinning-<b> go in before the driver, and the
    pinning package is not part of the driver's own apt transaction (there apt resolves the newest branch)."""
    tasks = _tasks('install-apt.yml')
    driver = _index(tasks, lambda t: t.get('name') == 'Install the driver packages, pinned', 'installing the driver')
    prefs = _index(tasks, lambda t: (t.get('ansible.builtin.copy') or {}).get('dest') ==
                   '/etc/apt/preferences.d/gpuops-nvidia-driver', 'writing the apt preferences')
    lock = _index(tasks, lambda t: 'nvidia_driver__branch_lock_packages' in str(
        (t.get('ansible.builtin.apt') or {}).get('name', '')), 'installing the pinning package')
    assert prefs < driver and lock < driver, (prefs, lock, driver)
    # nothing writes the preferences after the install any more
    assert not [t for t in _tasks('present.yml') if 'preferences.d' in str(t)]
    sel = selection(False)
    specs = render('{{ nvidia_driver__apt_specs }}', nvidia_driver__selection=sel)
    assert 'nvidia-driver-pinning-580' not in specs, specs
    assert render('{{ nvidia_driver__branch_lock_packages }}', nvidia_driver__selection=sel) == [
        'nvidia-driver-pinning-580']
    # the first read sees a missing pinning package (main.yml's package_specs), so a converged node gains it
    main = [t for t in _tasks('main.yml') if t.get('name') == 'Read the driver state of the node'][0]
    assert 'nvidia_driver__branch_lock_packages' in main['gpuops.k8s_gpu.nvidia_driver_info']['package_specs']


def test_DRV_33_rhel10_branch_versionlocked_before_dnf_install():
    """RHEL 10 (NVIDIA's R620 guide): dnf versionlock *nvidia*<b>* before dnf install nvidia-open, with the
    versionlock plugin installed first; skipped when the list already holds the pattern's entries."""
    tasks = _tasks('install-dnf.yml')
    install = _index(tasks, lambda t: t.get('name', '').startswith('Install the driver packages (RHEL 10'),
                     'installing the RHEL 10 packages')
    lock = _index(tasks, lambda t: (t.get('ansible.builtin.command') or {}).get('argv', [None] * 4)[2:4] ==
                  ['versionlock', 'add'], 'adding the branch versionlock')
    plugin = _index(tasks, lambda t: (t.get('ansible.builtin.dnf') or {}).get('name') ==
                    'python3-dnf-plugin-versionlock', 'installing the versionlock plugin')
    assert plugin < lock < install, (plugin, lock, install)
    assert 'not nvidia_driver__selection.selection.branch_lock_present' in tasks[lock]['when']
    assert 'branch_lock is not none' in tasks[plugin]['when']
    # the lock is released with the others (unhold before an upgrade, removal)
    for name in ('unhold.yml', 'absent.yml'):
        assert [t for t in _tasks(name) if (t.get('ansible.builtin.command') or {}).get('argv', [None] * 4)[2:4] ==
                ['versionlock', 'delete']], name


@pytest.mark.parametrize('state, refusal, passes', [
    ('present', 'nvidia_driver_method is "distro", but ...', False), ('absent', 'nvidia_driver_method is ...', True),
    ('present', None, True),
])
def test_DRV_23_nvlink5_refusal_asserted_right_after_the_selection(state, refusal, passes):
    """HGX B200/B300 with the distribution's own packages (issue 28 item 4): the role fails with the selection's
    refusal in select.yml, right after the selection and before main.yml reads or installs anything; removing the
    driver goes on."""
    tasks = _tasks('select.yml')
    sel = _index(tasks, lambda t: 'gpuops.k8s_gpu.nvidia_driver_info' in t, 'running the selection')
    check = _index(tasks, lambda t: 'selection.refusal' in str((t.get('ansible.builtin.assert') or {}).get('that')),
                   'asserting the refusal')
    assert check == sel + 2, (sel, check)   # only the debug line in between
    main = _tasks('main.yml')
    assert [t.get('ansible.builtin.import_tasks') for t in main[:2]] == ['preflight.yml', 'select.yml']
    spec = tasks[check]['ansible.builtin.assert']
    ctx = dict(nvidia_driver_state=state, nvidia_driver__selection={'selection': {'refusal': refusal}})
    ok = render('{{ %s }}' % spec['that'], **ctx)
    assert ok is passes, (state, refusal, ok)
    # the assert module validates fail_msg even when it passes: it must be a string, never None
    assert render(spec['fail_msg'], **ctx) == (refusal or '')


@pytest.mark.parametrize('method, version, want', [
    ('cuda_repo', '', ['nvidia-open=570.*', 'libnvidia-compute-580=570.*']),
    ('cuda_repo', '570.195.03', ['nvidia-open=570.195.03*', 'libnvidia-compute-580=570.195.03*']),
    ('distro', '', ['nvidia-open', 'libnvidia-compute-580'])])
def test_DRV_40_cuda_repo_specs_carry_the_branch(method, version, want):
    """NVIDIA's CUDA repository keeps its names across branches (nvidia-open, cuda-drivers): without the branch in
    the spec a node on 580 asked for 570 had every name installed, so apt never ran and only the branch check failed
    after the fact. The spec carries the branch, so the first read finds them missing and apt installs 570
    (allowed to downgrade by branch_change). Ubuntu's and Debian's own names need no suffix (Ubuntu's carry the
    branch in the name; Debian has one branch per release)."""
    specs = render('{{ nvidia_driver__apt_specs }}', nvidia_driver__selection=selection(False),
                   nvidia_driver_method=method, nvidia_driver_branch='570', nvidia_driver_version=version)
    assert specs[:2] == want, specs


def test_DRV_37_branch_change_released_before_the_install():
    """The holds, version locks and the old pinning package of the version being replaced go before the driver's
    install; apt and dnf may downgrade when branch_change says so."""
    tasks = _tasks('present.yml')
    install = _index(tasks, lambda t: t.get('name') == 'Install the driver packages', 'installing the driver')
    for what in ('release_holds', 'remove_first', 'release_versionlocks', 'old_branch_lock'):
        i = _index(tasks, lambda t, w=what: 'nvidia_driver__change.%s' % w in str(t), what)
        assert i < install, (what, i, install)
    main = [t for t in _tasks('main.yml') if t.get('name') == 'Read the driver state of the node'][0]
    assert 'nvidia_driver_branch' in main['gpuops.k8s_gpu.nvidia_driver_info']['branch']
    apt = [t for t in _tasks('install-apt.yml') if t.get('name') == 'Install the driver packages, pinned'][0]
    assert 'nvidia_driver__change.allow_downgrade' in apt['ansible.builtin.apt']['allow_downgrade']
    dnf = [t for t in _tasks('install-dnf.yml') if t.get('name') == 'Install the pinned driver version'][0]
    assert 'nvidia_driver__change.allow_downgrade' in dnf['ansible.builtin.dnf']['allow_downgrade']
    for down in (True, False):
        got = render('{{ nvidia_driver__change.allow_downgrade | default(false) | bool }}',
                     nvidia_driver__before={'branch_change': {'allow_downgrade': down}})
        assert got is down
    assert render('{{ nvidia_driver__change.release_holds | default([]) }}',
                  nvidia_driver__before={'branch_change': None}) == []
