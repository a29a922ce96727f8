# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CRI-O (docs/conformance/cri-o.md): the drop-in merged next to files written from CRI-O's own defaults, read back
the way CRI-O reads its files (crio.conf first, then crio.conf.d in lexical order, a later option winning; a file
that names a runtime replaces that runtime: CRIO-11).
CRI-O itself is not packaged in Debian 12's main archive, so it is not run here."""
import json
import os
import shutil
import tomllib

import pytest

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import container_runtime_config as mod
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import runtime_config_crio as crio

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'module_utils', 'fixtures', 'runtime')
NV = '/usr/bin/nvidia-container-runtime'
SITE = '[crio.runtime]\nlog_level = "debug"\n\n[crio.runtime.runtimes.kata]\nruntime_path = "/usr/bin/kata-runtime"\n'


def run(capsys, args):
    with module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def layout(tmp_path, site=SITE):
    conf = str(tmp_path / 'crio.conf')
    shutil.copy(os.path.join(FIXTURES, 'crio-1.36-default.conf'), conf)
    d = tmp_path / 'crio.conf.d'
    d.mkdir()
    if site is not None:
        (d / '10-site.conf').write_text(site)
    return {'engine': 'crio', 'crio_config': conf, 'crio_config_dir': str(d), 'path': str(d / '99-nvidia.toml')}


def crio_view(args):
    """The configuration CRI-O ends up with: every file in its order, merged option by option, except that a file
    naming a runtime replaces that runtime's whole entry (CRIO-11, as CRI-O v1.34.0 reads its files)."""
    merged = {}

    def merge(into, new, path=()):
        for k, v in new.items():
            if path == ('crio', 'runtime', 'runtimes'):
                into[k] = v
            elif isinstance(v, dict) and isinstance(into.get(k), dict):
                merge(into[k], v, path + (k,))
            else:
                into[k] = v
    files = [args['crio_config']] + [os.path.join(args['crio_config_dir'], n)
                                     for n in sorted(os.listdir(args['crio_config_dir']))]
    for f in files:
        with open(f, 'rb') as fh:
            merge(merged, tomllib.load(fh))
    return merged


def snapshot(args):
    out = {}
    for f in [args['crio_config']] + [os.path.join(args['crio_config_dir'], n)
                                      for n in os.listdir(args['crio_config_dir'])]:
        with open(f) as fh:
            out[f] = fh.read()
    return out


def test_CRIO_01_dropin_in_crio_conf_d(tmp_path, capsys):
    assert mod.DEFAULT_PATHS['crio'] == crio.DEFAULT_DROPIN == '/etc/crio/crio.conf.d/99-nvidia.toml'
    args = layout(tmp_path)
    before = snapshot(args)
    res = run(capsys, args)
    assert res['changed'] is True and res['config_mode'] == 'dropin'
    view = crio_view(args)
    rt = view['crio']['runtime']
    assert rt['runtimes']['nvidia']['runtime_path'] == NV and rt['runtimes']['nvidia']['runtime_type'] == 'oci'
    # every other setting of the other files is kept: they are only read
    assert rt['default_runtime'] == 'crun' and rt['log_level'] == 'debug' and 'kata' in rt['runtimes']
    assert rt['runtimes']['crun']['runtime_root'] == '/run/crun'
    for f, text in before.items():
        with open(f) as fh:
            assert fh.read() == text


def test_CRIO_02_copies_the_default_runtimes_options(tmp_path, capsys):
    args = layout(tmp_path)
    run(capsys, args)
    view = crio_view(args)['crio']['runtime']['runtimes']
    nv = view['nvidia']
    assert nv['runtime_root'] == '/run/crun' and nv['monitor_cgroup'] == 'system.slice'
    assert nv['allowed_annotations'] == ['io.containers.trace-syscall']
    assert {k: v for k, v in nv.items() if k not in ('runtime_path', 'runtime_type')} == {
        k: v for k, v in view['crun'].items() if k not in crio.NOT_COPIED}
    # a later file that names crun replaces it, as CRI-O reads it (CRIO-11): the NVIDIA runtime follows
    (tmp_path / 'crio.conf.d' / '10-site.conf').write_text(SITE + '\n[crio.runtime.runtimes.crun]\nmonitor_path = "/opt/conmon"\n')
    run(capsys, args)
    view = crio_view(args)['crio']['runtime']['runtimes']
    assert view['crun'] == {'monitor_path': '/opt/conmon'}
    assert view['nvidia'] == {'runtime_path': '/usr/bin/nvidia-container-runtime', 'runtime_type': 'oci',
                              'monitor_path': '/opt/conmon'}


def test_CRIO_03_default_runtime_when_asked(tmp_path, capsys):
    args = layout(tmp_path)
    run(capsys, dict(args, set_as_default=True))
    assert crio_view(args)['crio']['runtime']['default_runtime'] == 'nvidia'
    res = run(capsys, dict(args, set_as_default=False))
    assert res['changed'] is True and crio_view(args)['crio']['runtime']['default_runtime'] == 'crun'
    # another file naming the runtime as default is not this module's: it stays, with a warning
    (tmp_path / 'crio.conf.d' / '50-site.conf').write_text('[crio.runtime]\ndefault_runtime = "nvidia"\n')
    res = run(capsys, dict(args, set_as_default=False))
    assert res['changed'] is False
    assert 'another CRI-O file sets default_runtime' in json.dumps(res.get('warnings')), res.get('warnings')


def test_CRIO_04_check_diff_rerun_backup_absent(tmp_path, capsys):
    args = layout(tmp_path)
    with module_args(dict(args, _ansible_check_mode=True, _ansible_diff=True)):
        with pytest.raises(SystemExit):
            mod.main()
    res = json.loads(capsys.readouterr().out)
    assert res['changed'] is True and not os.path.exists(args['path'])
    assert res['diff'][0]['after_header'] == args['path'] and 'runtimes.nvidia' in res['diff'][0]['after']
    assert run(capsys, args)['changed'] is True
    assert run(capsys, args)['changed'] is False
    res = run(capsys, dict(args, set_as_default=True))
    assert res['changed'] is True and os.path.exists(res['backup_file'])
    # CRI-O reads every file below crio.conf.d (cri-o pkg/config UpdateFromPath walks it): the backup lies outside
    assert not os.path.dirname(res['backup_file']).startswith(args['crio_config_dir'])
    assert os.listdir(args['crio_config_dir']) == ['10-site.conf', '99-nvidia.toml'] or \
        sorted(os.listdir(args['crio_config_dir'])) == ['10-site.conf', '99-nvidia.toml']
    res = run(capsys, dict(args, state='absent'))
    assert res['changed'] is True and not os.path.exists(args['path'])
    assert run(capsys, dict(args, state='absent'))['changed'] is False
    assert sorted(os.listdir(args['crio_config_dir']))[0] == '10-site.conf'


def test_CRIO_06_bad_input_before_any_write(tmp_path, capsys):
    args = layout(tmp_path)
    for bad, msg in (({'cdi': True}, 'containerd only'), ({'mode': 'inline'}, 'containerd only'),
                     ({'runtime_args': ['x']}, 'docker only')):
        res = run(capsys, dict(args, **bad))
        assert res['failed'] is True and msg in res['msg']
        assert not os.path.exists(args['path'])
    (tmp_path / 'crio.conf.d' / '20-broken.conf').write_text('[crio.runtime\n')
    res = run(capsys, args)
    assert res['failed'] is True and 'nothing was changed' in res['msg'] and not os.path.exists(args['path'])


def test_CRIO_09_every_option_of_the_default_runtime_but_inherit_default_runtime(tmp_path, capsys):
    """nvidia-ctk copies the default runtime's whole table (v1.20.0, pkg/config/engine/crio/crio.go): a site's
    privileged_without_host_devices on crun holds for GPU pods too (before CRIO-09 only runtime_root, monitor_* and
    allowed_annotations were copied). inherit_default_runtime is not copied: CRI-O would replace the NVIDIA runtime's
    runtime_path by crun's (cri-o docs/crio.conf.5.md)."""
    args = layout(tmp_path, site=SITE + '\n[crio.runtime.runtimes.crun]\nprivileged_without_host_devices = true\n'
                                        'inherit_default_runtime = true\ncontainer_min_memory = "12MiB"\n')
    run(capsys, args)
    nv = crio_view(args)['crio']['runtime']['runtimes']['nvidia']
    assert nv['privileged_without_host_devices'] is True and nv['container_min_memory'] == '12MiB'
    assert nv['runtime_path'] == NV and nv['runtime_type'] == 'oci'
    assert 'inherit_default_runtime' not in nv
    assert run(capsys, args)['changed'] is False


@pytest.mark.parametrize('form', ['inline', 'table', 'dotted'])
def test_CRIO_10_the_default_runtimes_sub_tables_copied_but_platform_runtime_paths(tmp_path, capsys, form):
    """nvidia-ctk copies the default runtime's whole subtree (v1.20.0 pkg/config/engine/crio/crio.go
    GetDefaultRuntimeOptions: options.Copy()), its sub-tables too: default_annotations (cri-o v1.34.0 RuntimeHandler,
    map[string]string) reaches the NVIDIA runtime in every TOML form (`crio config` writes an inline table). Before,
    the module skipped [crio.runtime.runtimes.crun.<sub>] tables and dotted keys and failed on an inline table.
    platform_runtime_paths is never copied: CRI-O would run crun's path for a matching image platform instead of the
    NVIDIA runtime (cri-o internal/oci/oci.go PlatformRuntimePath)."""
    crun = {
        'inline': 'default_annotations = {"run.oci.keep_original_groups" = "1", "a.b/c" = ""}\n'
                  'platform_runtime_paths = {"linux/arm64" = "/usr/local/bin/crun-arm64"}\n',
        'table': 'runtime_root = "/run/crun"\n\n[crio.runtime.runtimes.crun.default_annotations]\n'
                 '"run.oci.keep_original_groups" = "1"\n"a.b/c" = ""\n\n'
                 '[crio.runtime.runtimes.crun.platform_runtime_paths]\n"linux/arm64" = "/usr/local/bin/crun-arm64"\n',
        'dotted': 'default_annotations."run.oci.keep_original_groups" = "1"\ndefault_annotations."a.b/c" = ""\n'
                  'platform_runtime_paths."linux/arm64" = "/usr/local/bin/crun-arm64"\n'}[form]
    args = layout(tmp_path, site=SITE + '\n[crio.runtime.runtimes.crun]\n' + crun)
    res = run(capsys, args)
    assert res['changed'] is True, res
    view = crio_view(args)['crio']['runtime']['runtimes']
    nv = view['nvidia']
    assert nv['default_annotations'] == {'run.oci.keep_original_groups': '1', 'a.b/c': ''}
    assert view['crun']['platform_runtime_paths'] == {'linux/arm64': '/usr/local/bin/crun-arm64'}
    assert 'platform_runtime_paths' not in nv and nv['runtime_path'] == NV
    assert run(capsys, args)['changed'] is False


def test_CRIO_10_sub_tables_merged_over_files_and_too_deep_refused():
    texts = [('crio.conf', '[crio.runtime.runtimes.crun]\ndefault_annotations = {"a" = "1", "b" = "2"}\n'),
             ('10-site.conf', '[crio.runtime.runtimes.crun.default_annotations]\nb = "3"\n')]
    # CRI-O replaces a runtime a later file names (CRIO-11): crun is then only what 10-site.conf says of it
    assert crio.effective(texts)[1]['crun'] == {'default_annotations': {'b': '3'}}
    # within one file the runtime's table and its sub-table make one entry
    one_file = [('crio.conf', '[crio.runtime.runtimes.crun]\nmonitor_path = "/m"\n'
                              '[crio.runtime.runtimes.crun.default_annotations]\na = "1"\n')]
    assert crio.effective(one_file)[1]['crun'] == {'monitor_path': '/m', 'default_annotations': {'a': '1'}}
    with pytest.raises(crio.CrioConfigError, match='nested deeper'):
        crio.effective([('x.conf', '[crio.runtime.runtimes.crun.default_annotations.x]\ny = "1"\n')])


def test_CRIO_11_a_later_file_that_names_a_runtime_replaces_it():
    """CRI-O v1.34.0 read back (lab/tests/oracles/test_crio.py::test_CRIO_11_a_site_dropin_replaces_the_default_runtime):
    a drop-in that sets one option of crun leaves crun with that option only; other runtimes and default_runtime are
    kept; the NVIDIA runtime then copies crun as CRI-O reads it."""
    texts = [('crio.conf', '[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\n'
                           'runtime_root = "/run/crun"\nmonitor_path = "/usr/libexec/crio/conmon"\n'
                           '[crio.runtime.runtimes.runc]\nruntime_root = "/run/runc"\n'),
             ('10-site.conf', '[crio.runtime.runtimes.crun]\nmonitor_cgroup = "pod"\n'),
             ('20-other.conf', '[crio.runtime]\ncgroup_manager = "cgroupfs"\n')]
    default, runtimes = crio.effective(texts)
    assert default == 'crun'
    assert runtimes == {'crun': {'monitor_cgroup': 'pod'}, 'runc': {'runtime_root': '/run/runc'}}
    text = crio.render_dropin('nvidia', '/usr/bin/nvidia-container-runtime', False, texts)
    assert 'monitor_cgroup = "pod"' in text and 'runtime_root' not in text and 'monitor_path' not in text
