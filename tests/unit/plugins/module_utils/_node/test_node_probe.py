# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe

PCI_IDS = """# pci.ids excerpt
10de  NVIDIA Corporation
\t1eb8  TU104GL [Tesla T4]
\t\t10de 12a2  T4 16GB
\t20b2  GA100 [A100 SXM4 80GB]
\t1af1  GA100 [A100 NVSwitch]
10df  Emulex Corporation
\t1eb8  Not an NVIDIA device
"""


def _write(root, rel, text, mode='w'):
    path = os.path.join(str(root), rel)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    with open(path, mode) as f:
        f.write(text)


def _pci(root, addr, vendor, device, klass, driver=None):
    base = 'sys/bus/pci/devices/%s/' % addr
    _write(root, base + 'vendor', vendor + '\n')
    _write(root, base + 'device', device + '\n')
    _write(root, base + 'class', klass + '\n')
    if driver:
        drv = os.path.join(str(root), 'sys/bus/pci/drivers', driver)
        os.makedirs(drv)
        os.symlink(drv, os.path.join(str(root), base, 'driver'))


def test_pci_devices_finds_gpus_and_nvswitches_with_names(tmp_path):
    _write(tmp_path, 'usr/share/misc/pci.ids', PCI_IDS)
    _pci(tmp_path, '0000:3b:00.0', '0x10de', '0x1eb8', '0x030200', driver='nvidia')
    _pci(tmp_path, '0000:07:00.0', '0x10de', '0x20b2', '0x030000')
    _pci(tmp_path, '0000:c1:00.0', '0x10de', '0x1af1', '0x068000')
    _pci(tmp_path, '0000:00:1f.0', '0x8086', '0x1234', '0x030000')  # Intel VGA: ignored
    _pci(tmp_path, '0000:05:00.1', '0x10de', '0x10f8', '0x040300')  # NVIDIA HDMI audio: ignored
    gpus, switches = node_probe.pci_devices(str(tmp_path))
    assert [g['pci_bus_id'] for g in gpus] == ['0000:07:00.0', '0000:3b:00.0']
    assert gpus[1]['name'] == 'TU104GL [Tesla T4]'
    assert gpus[1]['driver'] == 'nvidia'
    assert gpus[0]['driver'] is None
    assert [s['name'] for s in switches] == ['GA100 [A100 NVSwitch]']


def test_pci_names_stops_at_vendor_boundary(tmp_path):
    _write(tmp_path, 'usr/share/hwdata/pci.ids', PCI_IDS)
    names = node_probe.pci_names(str(tmp_path))
    assert names['0x1eb8'] == 'TU104GL [Tesla T4]'
    assert 'Not an NVIDIA device' not in names.values()


def test_pci_without_database_has_no_names(tmp_path):
    _pci(tmp_path, '0000:3b:00.0', '0x10de', '0x1eb8', '0x030200')
    gpus = node_probe.pci_devices(str(tmp_path))[0]
    assert gpus[0]['name'] is None


def test_no_sysfs_means_no_devices(tmp_path):
    assert node_probe.pci_devices(str(tmp_path)) == ([], [])


def test_modules_and_driver_version(tmp_path):
    _write(tmp_path, 'proc/modules', 'nouveau 2322432 0 - Live 0x0\ndrm 1 2 - Live 0x0\n')
    _write(tmp_path, 'proc/driver/nvidia/version',
           'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n'
           'GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n')
    assert 'nouveau' in node_probe.loaded_modules(str(tmp_path))
    assert node_probe.driver_version_from_proc(str(tmp_path)) == '535.183.01'


def test_open_kernel_module_version_line(tmp_path):
    _write(tmp_path, 'proc/driver/nvidia/version',
           'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n')
    assert node_probe.driver_version_from_proc(str(tmp_path)) == '550.54.15'


def test_secure_boot_states(tmp_path):
    assert node_probe.secure_boot(str(tmp_path)) == 'unsupported'
    os.makedirs(os.path.join(str(tmp_path), 'sys/firmware/efi/efivars'))
    assert node_probe.secure_boot(str(tmp_path)) == 'disabled'
    _write(tmp_path, node_probe.SECURE_BOOT_VAR, b'\x06\x00\x00\x00\x01', mode='wb')
    assert node_probe.secure_boot(str(tmp_path)) == 'enabled'
    _write(tmp_path, node_probe.SECURE_BOOT_VAR, b'\x06\x00\x00\x00\x00', mode='wb')
    assert node_probe.secure_boot(str(tmp_path)) == 'disabled'


def test_hypervisor_detection(tmp_path):
    assert node_probe.hypervisor(str(tmp_path)) is None
    _write(tmp_path, 'proc/cpuinfo', 'processor\t: 0\nflags\t\t: fpu vme hypervisor avx\n')
    assert node_probe.hypervisor(str(tmp_path)) == 'unknown'
    _write(tmp_path, 'sys/class/dmi/id/sys_vendor', 'VMware, Inc.\n')
    assert node_probe.hypervisor(str(tmp_path)) == 'vmware'


def test_container_runtimes_and_daemon_json(tmp_path):
    _write(tmp_path, 'usr/bin/dockerd', '')
    _write(tmp_path, 'usr/bin/nvidia-container-runtime', '')
    _write(tmp_path, 'etc/docker/daemon.json', json.dumps({
        'registry-mirrors': ['https://mirror.example'],
        'runtimes': {'nvidia': {'path': 'nvidia-container-runtime', 'runtimeArgs': []}},
        'default-runtime': 'nvidia'}))
    info = node_probe.container_runtimes(str(tmp_path))
    assert info['installed'] == ['docker', 'nvidia-container-runtime']
    assert info['docker_nvidia_runtime'] is True
    assert info['docker_default_runtime'] == 'nvidia'


def test_containerd_nvidia_runtime(tmp_path):
    _write(tmp_path, 'etc/containerd/config.toml',
           'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n')
    assert node_probe.container_runtimes(str(tmp_path))['containerd_nvidia_runtime'] is True
    assert node_probe.container_runtimes(str(tmp_path))['containerd_default_runtime'] == 'runc'


def test_containerd_default_runtime_from_the_drop_in(tmp_path):
    _write(tmp_path, 'etc/containerd/config.toml',
           'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n')
    _write(tmp_path, 'etc/containerd/conf.d/99-nvidia.toml',
           'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd]\n  default_runtime_name = "nvidia"\n'
           '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n')
    info = node_probe.container_runtimes(str(tmp_path))
    assert info['containerd_default_runtime'] == 'nvidia' and info['containerd_nvidia_runtime'] is True
    assert node_probe.container_runtimes(str(tmp_path / 'none'))['containerd_default_runtime'] is None


def test_invalid_daemon_json_is_reported(tmp_path):
    _write(tmp_path, 'etc/docker/daemon.json', '{"runtimes": ')
    info = node_probe.container_runtimes(str(tmp_path))
    assert info['docker_daemon_json_invalid'] is True


def test_systemd_unit_state(tmp_path):
    assert node_probe.systemd_unit_state(str(tmp_path), 'nvidia-fabricmanager.service') == 'not-found'
    _write(tmp_path, 'lib/systemd/system/nvidia-fabricmanager.service', '[Unit]\n')
    assert node_probe.systemd_unit_state(str(tmp_path), 'nvidia-fabricmanager.service') == 'disabled'
    _write(tmp_path, 'etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service', '')
    assert node_probe.systemd_unit_state(str(tmp_path), 'nvidia-fabricmanager.service') == 'enabled'


def test_node_facts_fabricmanager_required_with_nvswitch(tmp_path):
    _pci(tmp_path, '0000:c1:00.0', '0x10de', '0x1af1', '0x068000')
    facts = node_probe.node_facts(str(tmp_path))
    assert facts['nvswitch_count'] == 1
    assert facts['fabricmanager_required'] is True
    assert facts['fabricmanager_unit'] == 'not-found'


def test_DRAL_14_containerd_enable_cdi_where_a_file_sets_it(tmp_path):
    """The doctor's dra check reads containerd's enable_cdi (containerd v2.x: on by default, false deprecated); the
    drop-in, read last, wins; not set anywhere: None (containerd's own default)."""
    assert node_probe.container_runtimes(str(tmp_path))['containerd_enable_cdi'] is None
    _write(tmp_path, 'etc/containerd/config.toml',
           'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    assert node_probe.container_runtimes(str(tmp_path))['containerd_enable_cdi'] is False
    _write(tmp_path, 'etc/containerd/conf.d/99-nvidia.toml',
           'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true  # CDI\n')
    assert node_probe.container_runtimes(str(tmp_path))['containerd_enable_cdi'] is True


@pytest.mark.parametrize('out, want', [
    # Debian 12's package (the lab's node containers and this machine)
    ('containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n', (1, 6, 20)),
    # upstream's build (the lab's Go set: lab/go/containerd)
    ('containerd github.com/containerd/containerd/v2 v2.3.4 \n', (2, 3, 4)),
    # Docker's containerd.io package
    ('containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n', (1, 7, 27)),
    ('', None), ('containerd\n', None)])
def test_CTD_01_containerd_version_output(out, want):
    assert node_probe.parse_containerd_version(out) == want


def test_CTD_01_containerd_version_asked_only_with_a_runner(tmp_path):
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, 'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n', ''
    assert node_probe.container_runtimes(str(tmp_path), run)['containerd_version'] is None  # no binary
    _write(tmp_path, 'usr/bin/containerd', '')
    assert node_probe.container_runtimes(str(tmp_path))['containerd_version'] is None  # nothing executed
    assert calls == []
    rt = node_probe.container_runtimes(str(tmp_path), run)
    assert rt['containerd_version'] == '1.6.20' and calls == [[str(tmp_path / 'usr/bin/containerd'), '--version']]
    assert node_probe.node_facts(str(tmp_path), run=run)['container_runtimes']['containerd_version'] == '1.6.20'
    assert node_probe.container_runtimes(str(tmp_path), lambda argv: (1, '', 'boom'))['containerd_version'] is None


def test_CTD_01_containerd_on_path_first_on_the_running_system(tmp_path, monkeypatch):
    """On the running system (root /) the containerd on PATH is asked, as container_runtime_config asks it."""
    _write(tmp_path, 'bin/containerd', '#!/bin/sh\n')
    os.chmod(str(tmp_path / 'bin/containerd'), 0o755)
    monkeypatch.setenv('PATH', str(tmp_path / 'bin'))
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, 'containerd github.com/containerd/containerd/v2 v2.3.4 \n', ''
    assert node_probe.containerd_version('/', run) == '2.3.4'
    assert calls == [[str(tmp_path / 'bin/containerd'), '--version']]


# What k3s / RKE2 render into <data-dir>/agent/etc/containerd/config.toml when they find nvidia-container-runtime at
# start (docs/conformance/rke2-k3s.md RKE-01): config version 2 (containerd 1.7) and 3 (containerd 2.x).
_RENDERED_V2 = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "overlayfs"\n'
                '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
                '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]\n'
                '  runtime_type = "io.containerd.runc.v2"\n'
                '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia".options]\n'
                '  BinaryName = "/usr/bin/nvidia-container-runtime"\n')
_RENDERED_V3 = (_RENDERED_V2.replace('version = 2', 'version = 3')
                .replace('io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime'))
_NVIDIA_TABLE_V2 = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]'


@pytest.mark.parametrize('rendered', [_RENDERED_V2, _RENDERED_V3], ids=['config-v2', 'config-v3'])
def test_RKE_11_k3s_rendered_containerd_config_is_read(tmp_path, rendered):
    """k3s's embedded containerd runs with /var/lib/rancher/k3s/agent/etc/containerd/config.toml (rendered from its
    config.toml.tmpl / config-v3.toml.tmpl): the probe reads it, and the doctor does not call the nvidia runtime
    missing on a k3s GPU node whose k3s found the runtime (before the fix: containerd_nvidia_runtime_missing)."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._doctor import gpu_doctor_checks as dc
    _write(tmp_path, 'usr/local/bin/k3s', '')
    _write(tmp_path, 'usr/bin/nvidia-container-runtime', '')
    _write(tmp_path, 'var/lib/rancher/k3s/agent/etc/containerd/config.toml', rendered)
    info = node_probe.container_runtimes(str(tmp_path))
    assert info['installed'] == ['k3s', 'nvidia-container-runtime']
    assert info['containerd_nvidia_runtime'] is True
    assert info['containerd_default_runtime'] == 'runc'
    assert info['containerd_config_files'] == ['/var/lib/rancher/k3s/agent/etc/containerd/config.toml']
    facts = {'gpus': [{'index': 0, 'name': 'Tesla T4'}], 'node': {'container_runtimes': info}}
    assert dc.check_runtime(facts, {}) == []
    # the runtime absent from k3s's config: the finding names the file it read
    without = _RENDERED_V2.split(_NVIDIA_TABLE_V2, maxsplit=1)[0]
    _write(tmp_path, 'var/lib/rancher/k3s/agent/etc/containerd/config.toml', without)
    info = node_probe.container_runtimes(str(tmp_path))
    found = dc.check_runtime({'gpus': [{'index': 0}], 'node': {'container_runtimes': info}}, {})
    assert [x['id'] for x in found] == ['containerd_nvidia_runtime_missing']
    assert '/var/lib/rancher/k3s/agent/etc/containerd/config.toml' in found[0]['evidence'][0]


def test_RKE_12_rke2_rendered_containerd_config_is_read(tmp_path):
    """RKE2's embedded containerd runs with /var/lib/rancher/rke2/agent/etc/containerd/config.toml; with
    default-runtime: nvidia the base renders default_runtime_name there (RKE-04)."""
    _write(tmp_path, 'usr/local/bin/rke2', '')
    _write(tmp_path, 'var/lib/rancher/rke2/agent/etc/containerd/config.toml',
           _RENDERED_V3.replace('  snapshotter = "overlayfs"\n', '  snapshotter = "overlayfs"\n  default_runtime_name = "nvidia"\n'))
    info = node_probe.container_runtimes(str(tmp_path))
    assert info['containerd_nvidia_runtime'] is True and info['containerd_default_runtime'] == 'nvidia'
    assert info['containerd_config_files'] == ['/var/lib/rancher/rke2/agent/etc/containerd/config.toml']
