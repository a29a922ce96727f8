"""CRI-O as the oracle (github.com/cri-o/cri-o v1.34.0, built from the Go module proxy by lab/go/build.sh crio without
cgo): `crio --config crio.conf --config-dir crio.conf.d config` prints the configuration CRI-O runs with after reading
its main file and every drop-in. The collection's container_runtime_config module (and, beside it, nvidia-ctk 1.20.0)
write their drop-in for the same crio.conf (the module's unit fixture, CRI-O 1.36's defaults); CRI-O must then show the
nvidia runtime with the default runtime's monitor and root options, the default runtime as asked, and every other
setting as before.

Run: .venv/bin/pytest -q lab/tests/oracles/test_crio.py
"""
import os
import re
import shutil
import subprocess

import pytest

from oracle_util import NVIDIA_RUNTIME, RUNTIME_FIXTURES, go_program, run_ours, toml_output, without

SHARED = ('runtime_root', 'monitor_path', 'monitor_cgroup', 'monitor_exec_cgroup', 'allowed_annotations')


@pytest.fixture(scope='module')
def crio():
    return go_program('crio', 'crio version 1.34.0')


@pytest.fixture(scope='module')
def ctk():
    return go_program('nvidia-ctk')


def crio_config(crio, tmp_path):
    return toml_output([crio, '--config', str(tmp_path / 'crio.conf'), '--config-dir', str(tmp_path / 'crio.conf.d'),
                        'config'])


@pytest.mark.parametrize('default', [False, True], ids=['not-default', 'default'])
@pytest.mark.parametrize('side', ['module', 'nvidia-ctk'])
def test_CRIO_07_dropin_as_crio_reads_it(crio, ctk, tmp_path, side, default):
    (tmp_path / 'crio.conf.d').mkdir()
    shutil.copy(os.path.join(RUNTIME_FIXTURES, 'crio-1.36-default.conf'), tmp_path / 'crio.conf')
    before = crio_config(crio, tmp_path)
    dropin = tmp_path / 'crio.conf.d' / '99-nvidia.toml'
    if side == 'module':
        res = run_ours({'engine': 'crio', 'path': str(dropin), 'crio_config': str(tmp_path / 'crio.conf'),
                        'crio_config_dir': str(tmp_path / 'crio.conf.d'), 'set_as_default': default,
                        'backup': False})
        assert not res.get('failed'), res
    else:
        proc = subprocess.run([ctk, 'runtime', 'configure', '--runtime=crio', '--config=%s' % (tmp_path / 'crio.conf'),
                               '--drop-in-config=%s' % dropin] + (['--set-as-default'] if default else []),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    after = crio_config(crio, tmp_path)
    rt = after['crio']['runtime']
    nvidia, crun = rt['runtimes']['nvidia'], rt['runtimes']['crun']
    assert nvidia['runtime_path'] == NVIDIA_RUNTIME and nvidia['runtime_type'] == 'oci'
    assert {k: nvidia.get(k) for k in SHARED} == {k: crun.get(k) for k in SHARED}
    # `crio config` comments out a value equal to CRI-O's default (crun since 1.31)
    assert rt.get('default_runtime', 'crun') == ('nvidia' if default else 'crun')
    touched = [['crio', 'runtime', 'runtimes', 'nvidia'], ['crio', 'runtime', 'default_runtime']]
    assert without(after, *touched) == without(before, *touched)


def test_CRIO_08_cdi_has_no_switch(crio, tmp_path):
    """CRI-O injects CDI devices without a switch (internal/factory/container/device.go, from v1.24.0; the CRI
    CDIDevices field from v1.28.0): its configuration (v1.34.0's `crio config`, defaults written as comments) names the
    spec directories and has no enable_cdi, so nvidia_container_runtime_cdi is for containerd, rke2 and k3s only (the
    role refuses it for crio alone)."""
    (tmp_path / 'crio.conf.d').mkdir()
    (tmp_path / 'crio.conf').write_text('')
    proc = subprocess.run([crio, '--config', str(tmp_path / 'crio.conf'), '--config-dir', str(tmp_path / 'crio.conf.d'),
                           'config'], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r'^# cdi_spec_dirs = \[\n#\s+"/etc/cdi",\n#\s+"/var/run/cdi",\n# \]', proc.stdout, re.M), proc.stdout
    assert 'enable_cdi' not in proc.stdout and 'enable-cdi' not in proc.stdout


def module_dropin(crio, tmp_path):
    """The module's drop-in (not the default runtime) over tmp_path's crio.conf and crio.conf.d, read back by CRI-O:
    (CRI-O's whole configuration, its nvidia runtime)."""
    res = run_ours({'engine': 'crio', 'path': str(tmp_path / 'crio.conf.d' / '99-nvidia.toml'),
                    'crio_config': str(tmp_path / 'crio.conf'), 'crio_config_dir': str(tmp_path / 'crio.conf.d'),
                    'set_as_default': False, 'backup': False})
    assert not res.get('failed'), res
    after = crio_config(crio, tmp_path)
    nvidia = after['crio']['runtime']['runtimes']['nvidia']
    assert nvidia['runtime_path'] == NVIDIA_RUNTIME
    return after, nvidia


def test_CRIO_10_subtables_as_crio_reads_them(crio, tmp_path):
    """CRIO-10 read back by CRI-O itself: over a crio.conf whose default runtime (crun) has both map options written
    the way `crio config` writes them (inline tables), CRI-O v1.34.0 shows the module's nvidia runtime with crun's
    default_annotations and without crun's platform_runtime_paths (which would run crun's binary for those images),
    and every other setting as before."""
    (tmp_path / 'crio.conf.d').mkdir()
    shutil.copy(os.path.join(RUNTIME_FIXTURES, 'crio-1.36-crun-subtables.conf'), tmp_path / 'crio.conf')
    before = crio_config(crio, tmp_path)
    crun_before = before['crio']['runtime']['runtimes']['crun']
    # the fixture's maps are what CRI-O itself reads: the comparison below is not between two empty maps
    assert crun_before['default_annotations'] == {'io.kubernetes.cri-o.Devices': '', 'run.oci.keep_original_groups': '1'}
    assert set(crun_before['platform_runtime_paths']) == {'linux/arm64', 'linux/riscv64'}
    after, nvidia = module_dropin(crio, tmp_path)
    assert nvidia['default_annotations'] == crun_before['default_annotations']
    assert not nvidia.get('platform_runtime_paths')
    assert {k: nvidia.get(k) for k in SHARED} == {k: crun_before.get(k) for k in SHARED}
    assert without(after, ['crio', 'runtime', 'runtimes', 'nvidia']) == without(before, ['crio', 'runtime', 'runtimes', 'nvidia'])


def test_CRIO_11_a_site_dropin_replaces_the_default_runtime(crio, tmp_path):
    """CRIO-11: CRI-O v1.34.0 reads a drop-in that names the default runtime as that runtime's whole entry (its options
    from crio.conf are not kept: a site's `[crio.runtime.runtimes.crun]` with one option leaves crun with that option
    only), while plain options such as cgroup_manager merge option by option. The module's nvidia runtime then copies
    crun as CRI-O reads it (it merged option by option before: runtime_root, monitor_path and the annotations of
    crio.conf's crun, which CRI-O no longer had)."""
    (tmp_path / 'crio.conf.d').mkdir()
    shutil.copy(os.path.join(RUNTIME_FIXTURES, 'crio-1.36-crun-subtables.conf'), tmp_path / 'crio.conf')
    (tmp_path / 'crio.conf.d' / '10-site.conf').write_text(
        '[crio.runtime]\ncgroup_manager = "cgroupfs"\n\n[crio.runtime.runtimes.crun]\nmonitor_cgroup = "pod"\n')
    before = crio_config(crio, tmp_path)
    rt = before['crio']['runtime']
    crun = rt['runtimes']['crun']
    # what CRI-O itself made of the two files: crun is only the drop-in's; the plain option merged
    assert crun.get('monitor_cgroup') == 'pod' and not crun.get('runtime_root') and not crun.get('monitor_path')
    assert not crun.get('default_annotations') and not crun.get('allowed_annotations')
    assert rt.get('cgroup_manager') == 'cgroupfs' and rt.get('default_runtime', 'crun') == 'crun'
    after, nvidia = module_dropin(crio, tmp_path)
    copied = ('runtime_root', 'monitor_path', 'monitor_cgroup', 'monitor_exec_cgroup', 'allowed_annotations',
              'default_annotations', 'privileged_without_host_devices', 'runtime_config_path', 'container_min_memory')
    assert {k: nvidia.get(k) for k in copied} == {k: crun.get(k) for k in copied}
    assert without(after, ['crio', 'runtime', 'runtimes', 'nvidia']) == without(before, ['crio', 'runtime', 'runtimes', 'nvidia'])
