# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver_info module: argument spec and the package readers (dpkg / rpm) with a fake module."""
from ansible_collections.gpuops.k8s_gpu.plugins.modules import nvidia_driver_info as mod


class FakeModule(object):
    def __init__(self, bins, outputs):
        self.bins = bins
        self.outputs = outputs
        self.calls = []

    def get_bin_path(self, name, required=False):
        return self.bins.get(name)

    def run_command(self, argv):
        self.calls.append(argv)
        return 0, self.outputs[argv[1]], ''


def test_argument_spec():
    spec = mod.argument_spec()
    assert spec['kernel_module']['choices'] == ['auto', 'required', 'skip']
    assert spec['kernel_module']['default'] == 'auto'
    assert spec['fabricmanager']['choices'] == ['auto', 'always', 'never']
    assert spec['method']['choices'] == ['distro', 'cuda_repo', 'runfile']
    assert spec['reboot']['default'] is True and spec['local_connection']['default'] is False


def test_read_packages_dpkg():
    m = FakeModule({'dpkg-query': '/usr/bin/dpkg-query', 'dpkg': '/usr/bin/dpkg'},
                   {'-W': 'nvidia-driver\thi \t535.309.01-0+deb12u1\nnvidia-smi\tun \t\n',
                    '--get-selections': 'nvidia-driver\t\t\thold\n'})
    versions, selections, family = mod.read_packages(m, ['nvidia-driver', 'nvidia-smi'])
    assert versions == {'nvidia-driver': '535.309.01-0+deb12u1'}
    assert selections == {'nvidia-driver': 'hold'}
    assert family == 'Debian'
    assert m.calls[1] == ['/usr/bin/dpkg', '--get-selections', 'nvidia-driver']


def test_read_packages_rpm_ignores_not_installed_lines():
    m = FakeModule({'rpm': '/usr/bin/rpm'},
                   {'-q': 'nvidia-driver\t3:535.183.01-1.el9\npackage nvidia-fabric-manager is not installed\n'})
    versions, selections, family = mod.read_packages(m, ['nvidia-driver', 'nvidia-fabric-manager'])
    assert versions == {'nvidia-driver': '3:535.183.01-1.el9'}
    assert selections == {} and family == 'RedHat'


def test_read_packages_without_a_package_manager():
    assert mod.read_packages(FakeModule({}, {}), ['x']) == ({}, {}, None)


def test_package_specs_report_what_apt_would_install(monkeypatch, capsys):
    import json
    import pytest
    from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
    seen = []

    def fake_read(module, names):
        seen.append(list(names))
        return {'nvidia-driver': '535.309.01-0+deb12u1', 'nvidia-smi': '535.309.01-0+deb12u1',
                'initramfs-tools': '0.142'}, {}, 'Debian'
    monkeypatch.setattr(mod, 'read_packages', fake_read)
    specs = ['nvidia-driver=535.309.01*', 'nvidia-smi=550.54.14*', 'nvidia-kernel-dkms=535.309.01*', 'initramfs-tools']
    with module_args({'packages': ['nvidia-driver'], 'package_specs': specs, 'kernel_module': 'skip'}):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    assert res['packages_missing'] == ['nvidia-smi=550.54.14*', 'nvidia-kernel-dkms=535.309.01*']
    assert seen == [['nvidia-driver', 'nvidia-smi', 'nvidia-kernel-dkms', 'initramfs-tools']]
    with module_args({'package_specs': ['nvidia-driver>=535']}):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    assert res['failed'] is True and 'package_specs:' in res['msg']


def test_prerequisites_installed_are_read_apart_from_the_driver_packages(monkeypatch, capsys):
    """The role's prerequisites (the initramfs tool, dkms, headers) are read in their own query: the installed ones
    come back in prerequisites_installed (the role then skips its package step), never in packages or selections
    (state=absent removes and releases what packages lists)."""
    import json
    import pytest
    from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
    seen = []
    installed = {'nvidia-driver': '535.309.01-0+deb12u1', 'initramfs-tools': '0.142', 'dkms': '3.0.10-8'}

    def fake_read(module, names):
        seen.append(list(names))
        return dict((n, v) for n, v in installed.items() if n in names), {'nvidia-driver': 'hold'}, 'Debian'
    monkeypatch.setattr(mod, 'read_packages', fake_read)
    prereq = ['initramfs-tools', 'dkms', 'linux-headers-6.1.0-9-amd64']
    with module_args({'packages': ['nvidia-driver'], 'prerequisites': prereq, 'kernel_module': 'skip'}):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    assert res['prerequisites_installed'] == ['dkms', 'initramfs-tools']
    assert res['packages'] == {'nvidia-driver': '535.309.01-0+deb12u1'}
    assert seen == [['nvidia-driver'], prereq]
    # none asked: no second query, an empty list
    del seen[:]
    with module_args({'packages': ['nvidia-driver'], 'kernel_module': 'skip'}):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    assert res['prerequisites_installed'] == [] and seen == [['nvidia-driver']]


def _run_select(monkeypatch, capsys, args, gpus, vpds=None):
    """Run the module with select on a node whose PCI probe shows gpus; fail the test if it reads packages."""
    import json
    import pytest
    from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
    monkeypatch.setattr(mod.node_probe, 'pci_devices',
                        lambda root: ([{'pci_device_id': g, 'pci_bus_id': '0000:01:00.0'} for g in gpus], []))
    monkeypatch.setattr(mod.node_probe, 'secure_boot', lambda root: 'disabled')
    monkeypatch.setattr(mod, 'infiniband_vpds', lambda root: list(vpds or []))
    touched = []
    monkeypatch.setattr(mod, 'read_packages', lambda module, names: touched.append(names) or ({}, {}, 'Debian'))
    base = {'select': True, 'os_family': 'Ubuntu', 'os_major': '24', 'branch': '580'}
    base.update(args)
    with module_args(base):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out), touched


import pytest  # noqa: E402


@pytest.mark.parametrize('args, gpus, words', [
    ({'branch': '535'}, ['0x20b0'], ['nvidia_driver_branch 535', 'June', 'nvidia_driver_accept_eol_branch']),
    ({'kernel_module_type': 'open'}, ['0x15f7'],
     ['nvidia_driver_kernel_module_type "open"', 'pascal', 'allowed here: proprietary, auto']),
    ({'kernel_module_type': 'proprietary'}, ['0x2901'],
     ['nvidia_driver_kernel_module_type "proprietary"', 'blackwell', 'allowed here: open, auto']),
    ({'os_family': 'RedHat', 'os_major': '7'}, ['0x20b0'], ['RHEL/CentOS 7 is not supported']),
])
def test_DRV_25_bad_inputs_fail_before_anything_changes(monkeypatch, capsys, args, gpus, words):
    if args.get('branch') == '535':
        words = [w for w in words if w != 'June']   # the table gives 2026-06
        words.append('2026-06')
    res, touched = _run_select(monkeypatch, capsys, args, gpus)
    assert res['failed'] is True, res
    for w in words:
        assert w in res['msg'], (w, res['msg'])
    assert touched == []   # failed before even reading the packages


def test_DRV_25_unknown_flavour_refused_by_the_argument_spec(monkeypatch, capsys):
    res, touched = _run_select(monkeypatch, capsys, {'kernel_module_type': 'closed'}, ['0x2330'])
    assert res['failed'] is True
    assert 'kernel_module_type' in res['msg'] and 'auto, open, proprietary' in res['msg']
    assert touched == []


def test_DRV_02_select_returns_the_choice(monkeypatch, capsys):
    res, touched = _run_select(monkeypatch, capsys, {}, ['0x2330'])
    assert res['selection']['branch']['type'] == 'ltsb'
    assert res['selection']['flavour']['effective'] == 'open'
    assert res['selection']['packages']['version_package'] == 'libnvidia-compute-580-server'


def test_DRV_20_discover_installed_includes_held_packages():
    out = ('nvidia-headless-580-server\t580.95.05-0ubuntu0.24.04.1\thi \n'
           'libnvidia-compute-580-server\t580.95.05-0ubuntu0.24.04.1\tii \n'
           'nvidia-dkms-535-server\t580.95.05-0ubuntu0.24.04.1\trc \n'
           'bash\t5.2.15-2\tii \n')
    m = FakeModule({'dpkg-query': '/usr/bin/dpkg-query'}, {'-W': out})
    assert mod.discover_installed(m) == {'nvidia-headless-580-server': '580.95.05-0ubuntu0.24.04.1',
                                         'libnvidia-compute-580-server': '580.95.05-0ubuntu0.24.04.1'}


@pytest.mark.parametrize('fabricmanager, wanted', [('auto', True), ('never', False)])
def test_DRV_28_select_wants_the_nvlink5_packages_on_an_nvlink5_system(monkeypatch, capsys, fabricmanager, wanted):
    res, touched = _run_select(monkeypatch, capsys, {'method': 'cuda_repo', 'fabricmanager': fabricmanager},
                               ['0x2901'], vpds=['PN MCX75310\x00V0 SW_MNG\x00'])
    nv = res['selection']['packages']['nvlink5']
    assert nv['wanted'] is wanted, res['selection']
    assert nv['unpinned'] == ['nvlsm', 'infiniband-diags'] and nv['pinned'] == ['libnvsdm']
    res, touched = _run_select(monkeypatch, capsys, {'method': 'cuda_repo'}, ['0x2901'], vpds=['PN MCX75310'])
    assert res['selection']['packages']['nvlink5']['wanted'] is False


def test_DRV_37_first_read_says_what_a_branch_change_must_release(monkeypatch, capsys):
    """Ubuntu node on 570 with the role's holds, role asked for 580: the role's names for 580 are not installed,
    so the installed driver comes from the NVIDIA packages that are there, and their holds are what goes first."""
    import json
    from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
    v570 = '570.195.03-0ubuntu0.24.04.1'
    have = {'nvidia-headless-570-server': v570, 'libnvidia-compute-570-server': v570, 'nvidia-dkms-570-server': v570}
    monkeypatch.setattr(mod, 'discover_installed', lambda module: dict(have))

    def fake_read(module, names):
        versions = dict((n, have[n]) for n in names if n in have)
        return versions, dict((n, 'hold') for n in versions), 'Debian'
    monkeypatch.setattr(mod, 'read_packages', fake_read)
    monkeypatch.setattr(mod.node_probe, 'pci_devices', lambda root: ([], []))
    args = {'packages': ['nvidia-headless-580-server', 'libnvidia-compute-580-server'], 'kernel_module': 'skip',
            'driver_package': 'libnvidia-compute-580-server', 'branch': '580', 'os_family': 'Ubuntu'}
    with module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    change = res['branch_change']
    assert change['direction'] == 'up' and change['from'] == '570.195.03', change
    assert change['release_holds'] == sorted(have), change
    # without a branch (the role's other reads) nothing is computed
    with module_args(dict(args, branch='')):
        with pytest.raises(SystemExit):
            mod.main()
    assert json.loads(capsys.readouterr().out)['branch_change'] is None
