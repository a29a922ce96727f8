# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RKE2 / k3s (docs/conformance/rke2-k3s.md): the base template's tables are built from the facts written down
there, the module's template is rendered on top of them ({{ template "base" . }} replaced by the base), and the
result must parse as TOML - a table defined twice makes tomllib fail exactly as it makes containerd refuse the file.
RKE2 and k3s themselves cannot be obtained here, so their own rendering is not run."""
import json
import re
import tomllib

import pytest

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import container_runtime_config as mod
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import runtime_config_rancher as rr

NV = '/usr/bin/nvidia-container-runtime'
CRI = {2: '"io.containerd.grpc.v1.cri"', 3: "'io.containerd.cri.v1.runtime'"}


def base(version, detected=(), default_runtime=None, systemd_cgroup='true'):
    """The tables the RKE2/k3s base template renders (RKE-01..RKE-05), with the values of a typical node."""
    cri = 'plugins.%s' % CRI[version]
    out = ['version = %d' % version, '', '[plugins."io.containerd.internal.v1.opt"]',
           '  path = "/var/lib/rancher/rke2/agent/containerd"']
    if version == 2:
        out += ['[%s]' % cri, '  stream_server_address = "127.0.0.1"', '  stream_server_port = "10010"',
                '  sandbox_image = "index.docker.io/rancher/mirrored-pause:3.6"',
                '[%s.containerd]' % cri, '  snapshotter = "overlayfs"', '  disable_snapshot_annotations = true']
        if default_runtime:
            out.append('  default_runtime_name = "%s"' % default_runtime)
    else:
        out += ["[plugins.'io.containerd.cri.v1.images']", '  snapshotter = "overlayfs"',
                '  disable_snapshot_annotations = true',
                '[%s]' % cri, '  enable_selinux = false', '  enable_unprivileged_ports = true']
        out += ['[%s.containerd]' % cri] + (['  default_runtime_name = "%s"' % default_runtime]
                                            if default_runtime else [])
    out += ['[%s.cni]' % cri, '  bin_dir = "/var/lib/rancher/rke2/data/current/bin"',
            '  conf_dir = "/var/lib/rancher/rke2/agent/etc/cni/net.d"',
            '[%s.containerd.runtimes.runc]' % cri, '  runtime_type = "io.containerd.runc.v2"',
            '[%s.containerd.runtimes.runc.options]' % cri, '  SystemdCgroup = %s' % systemd_cgroup]
    for name in detected:
        out += ['[%s.containerd.runtimes."%s"]' % (cri, name), '  runtime_type = "io.containerd.runc.v2"',
                '[%s.containerd.runtimes."%s".options]' % (cri, name),
                '  BinaryName = "/usr/bin/%s"' % rr.DETECTED_RUNTIMES[name]]
    return '\n'.join(out) + '\n'


def render(template, version, detected=('nvidia',), default_runtime=None):
    """What RKE2/k3s write to config.toml: the base in place of {{ template "base" . }}, SystemdCgroup filled."""
    text = re.sub(r'\{\{-?\s*template\s+"base"\s+\.\s*-?\}\}', lambda m: base(version, detected, default_runtime),
                  template)
    return text.replace('{{ .SystemdCgroup }}', 'true')


def run(capsys, args):
    with module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def tmpl_args(path, version, **kw):
    args = {'engine': 'containerd', 'mode': 'template', 'config_version': str(version), 'path': str(path)}
    args.update(kw)
    return args


def test_RKE_01_base_parses_and_detects_nvidia():
    for v in (2, 3):
        d = tomllib.loads(base(v, ('nvidia', 'nvidia-experimental'), 'nvidia'))
        plugin = 'io.containerd.grpc.v1.cri' if v == 2 else 'io.containerd.cri.v1.runtime'
        rts = d['plugins'][plugin]['containerd']['runtimes']
        assert sorted(rts) == ['nvidia', 'nvidia-experimental', 'runc']
        assert d['plugins'][plugin]['containerd']['default_runtime_name'] == 'nvidia'
    assert rr.base_renders_runtime('nvidia', NV)
    assert rr.base_renders_runtime('nvidia', '/usr/local/nvidia/toolkit/nvidia-container-runtime')
    assert rr.base_renders_runtime('nvidia-experimental', '/usr/bin/nvidia-container-runtime-experimental')
    assert not rr.base_renders_runtime('nvidia', '/opt/nvidia/bin/nvidia-container-runtime')
    assert not rr.base_renders_runtime('nvidia-gpu', NV)


def test_RKE_02_old_duplicate_is_the_bug():
    """What the module wrote before: the nvidia tables appended after the base line - containerd sees them twice."""
    old = ('{{ template "base" . }}\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
           '  runtime_type = "io.containerd.runc.v2"\n\n'
           '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
           '  BinaryName = "/usr/bin/nvidia-container-runtime"\n  SystemdCgroup = {{ .SystemdCgroup }}\n')
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(render(old, 2))


@pytest.mark.parametrize('version,name', [(2, 'config.toml.tmpl'), (3, 'config-v3.toml.tmpl')])
def test_RKE_03_detected_runtime_no_template_no_duplicate(tmp_path, capsys, version, name):
    """Detected nvidia, not the default: no template is written; the base alone parses."""
    path = tmp_path / name
    res = run(capsys, tmpl_args(path, version))
    assert res['changed'] is False and not path.exists()
    tomllib.loads(render('{{ template "base" . }}\n', version))


@pytest.mark.parametrize('version', [2, 3])
def test_RKE_04_default_runtime_in_config_yaml_keeps_keys(tmp_path, capsys, version):
    path = tmp_path / 'config.toml.tmpl'
    cfg = tmp_path / 'config.yaml'
    site = 'token: K10secret  # site\nnode-label:\n  - "gpu=true"\nselinux: true\n'
    cfg.write_text(site)
    args = tmpl_args(path, version, set_as_default=True, distribution_config=str(cfg))
    res = run(capsys, args)
    assert res['changed'] is True and not path.exists()
    assert cfg.read_text() == site + 'default-runtime: nvidia\n'
    assert res['config_backup_file']
    # what RKE2/k3s render with default-runtime: nvidia - one containerd table, nvidia the default
    d = tomllib.loads(render('{{ template "base" . }}\n', version, default_runtime='nvidia'))
    plugin = 'io.containerd.grpc.v1.cri' if version == 2 else 'io.containerd.cri.v1.runtime'
    assert d['plugins'][plugin]['containerd']['default_runtime_name'] == 'nvidia'
    assert run(capsys, args)['changed'] is False
    # not the default any more: the key goes, every other line stays
    res = run(capsys, dict(args, set_as_default=False))
    assert res['changed'] is True and cfg.read_text() == site


def test_RKE_05_earlier_duplicate_tables_are_removed(tmp_path, capsys):
    """A template left by the earlier module (nvidia tables + a containerd table with the default) is repaired."""
    path = tmp_path / 'config.toml.tmpl'
    site = '{{ template "base" . }}\n# site line\n'
    path.write_text(site + '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                    '  runtime_type = "io.containerd.runc.v2"\n\n'
                    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                    '  BinaryName = "/usr/bin/nvidia-container-runtime"\n  SystemdCgroup = {{ .SystemdCgroup }}\n\n'
                    '[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n')
    cfg = tmp_path / 'config.yaml'
    res = run(capsys, tmpl_args(path, 2, set_as_default=True, distribution_config=str(cfg)))
    assert res['changed'] is True and res['backup_file']
    assert path.read_text() == site
    assert cfg.read_text() == 'default-runtime: nvidia\n'
    tomllib.loads(render(path.read_text(), 2, default_runtime='nvidia'))


@pytest.mark.parametrize('version', [2, 3])
def test_RKE_06_undetected_runtime_gets_tables_without_duplicates(tmp_path, capsys, version):
    path = tmp_path / 'config.toml.tmpl'
    cfg = tmp_path / 'config.yaml'
    binary = '/opt/nvidia/bin/nvidia-container-runtime'
    args = tmpl_args(path, version, runtime_name='nvidia-opt', runtime_path=binary, set_as_default=True,
                     distribution_config=str(cfg))
    assert run(capsys, args)['changed'] is True
    text = path.read_text()
    assert text.startswith('{{ template "base" . }}\n') and 'SystemdCgroup = {{ .SystemdCgroup }}' in text
    d = tomllib.loads(render(text, version, default_runtime='nvidia-opt'))
    plugin = 'io.containerd.grpc.v1.cri' if version == 2 else 'io.containerd.cri.v1.runtime'
    rts = d['plugins'][plugin]['containerd']['runtimes']
    assert rts['nvidia-opt'] == {'runtime_type': 'io.containerd.runc.v2',
                                 'options': {'BinaryName': binary, 'SystemdCgroup': True}}
    assert 'nvidia' in rts and 'runc' in rts
    assert cfg.read_text() == 'default-runtime: nvidia-opt\n'
    assert run(capsys, args)['changed'] is False
    # absent: the tables and the default go, the base line stays
    res = run(capsys, dict(args, state='absent'))
    assert res['changed'] is True and path.read_text() == '{{ template "base" . }}\n' and cfg.read_text() == ''


def test_RKE_07_refusals_before_any_write(tmp_path, capsys):
    path = tmp_path / 'config.toml.tmpl'
    res = run(capsys, tmpl_args(path, 2, set_as_default=True))
    assert res['failed'] is True and 'distribution_config' in res['msg'] and not path.exists()
    res = run(capsys, tmpl_args(path, 2, cdi=True, runtime_path='/opt/x/nvidia-container-runtime'))
    assert res['failed'] is True and 'cdi=true' in res['msg'] and not path.exists()
    cfg = tmp_path / 'config.yaml'
    cfg.write_text('default-runtime:\n  - a\n')
    res = run(capsys, tmpl_args(path, 2, set_as_default=True, distribution_config=str(cfg)))
    assert res['failed'] is True and 'not a plain value' in res['msg']
    assert cfg.read_text() == 'default-runtime:\n  - a\n'
    res = run(capsys, {'engine': 'containerd', 'distribution_config': str(cfg)})
    assert res['failed'] is True and 'mode=template' in res['msg']


def test_RKE_08_full_template_edited_inline(tmp_path, capsys):
    """A full template without the base line (and without the ExtraRuntimes loop) renders nothing by itself: the
    runtime is added inline, the default in its own containerd table."""
    path = tmp_path / 'config.toml.tmpl'
    path.write_text(base(2).replace('SystemdCgroup = true', 'SystemdCgroup = {{ .SystemdCgroup }}'))
    assert not rr.template_uses_base(path.read_text())
    res = run(capsys, tmpl_args(path, 2, set_as_default=True))
    assert res['changed'] is True
    d = tomllib.loads(render(path.read_text(), 2))
    c = d['plugins']['io.containerd.grpc.v1.cri']['containerd']
    assert c['default_runtime_name'] == 'nvidia' and c['runtimes']['nvidia']['options']['BinaryName'] == NV


def test_RKE_09_yaml_edits():
    assert rr.yaml_get('a: 1\ndefault-runtime: "nvidia" # x\n', 'default-runtime') == 'nvidia'
    assert rr.yaml_set('a: 1', 'default-runtime', 'nvidia') == 'a: 1\ndefault-runtime: nvidia\n'
    assert rr.yaml_set('default-runtime: runc\nb: 2\n', 'default-runtime', 'nvidia') == 'default-runtime: nvidia\nb: 2\n'
    assert rr.yaml_remove('a: 1\ndefault-runtime: nvidia\n', 'default-runtime') == 'a: 1\n'
    with pytest.raises(rr.RancherConfigError, match='2 times'):
        rr.yaml_get('default-runtime: a\ndefault-runtime: b\n', 'default-runtime')
    with pytest.raises(rr.RancherConfigError, match='line 1'):
        rr.yaml_get('{default-runtime: a}\n', 'default-runtime')
