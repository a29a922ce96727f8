# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd merges on real-world files: `containerd config default` (1.6.20), a 2.x v3 config, an RKE2 template."""
import difflib
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import runtime_config_containerd as rc
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_toml import TomlDocument

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'fixtures', 'runtime')
NV = '/usr/bin/nvidia-container-runtime'
CDI = ['/etc/cdi', '/var/run/cdi']


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def loads(text):
    if tomllib is None:
        pytest.skip('tomllib needs Python 3.11+')
    return tomllib.loads(text)


def flat(d, prefix=()):
    """{path tuple: leaf value} of a parsed TOML document."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def test_config_default_v2_inline_keeps_every_other_key():
    src = fixture('containerd-1.6.20-config-default.toml')
    doc = TomlDocument(src)
    assert rc.detect_version(doc) == 2
    assert rc.choose_mode('auto', doc, 2) == 'inline'  # the file configures the CRI plugin: no drop-in
    changes = rc.apply_runtime(doc, 2, 'nvidia', NV, True, None, True, CDI)
    before, after = flat(loads(src)), flat(loads(doc.text()))
    cri = ('plugins', 'io.containerd.grpc.v1.cri')
    runc, nvidia = cri + ('containerd', 'runtimes', 'runc'), cri + ('containerd', 'runtimes', 'nvidia')
    # the runc runtime's settings (the file's defaults here), copied: NCT-23
    copied = {nvidia + k[len(runc):]: v for k, v in before.items() if k[:len(runc)] == runc}
    assert len(copied) == 21
    expected = dict(before)
    expected.update(copied)
    expected.update({
        nvidia + ('runtime_type',): 'io.containerd.runc.v2',
        nvidia + ('options', 'BinaryName'): NV,
        nvidia + ('options', 'SystemdCgroup'): False,
        cri + ('containerd', 'default_runtime_name'): 'nvidia',
        cri + ('enable_cdi',): True,
        cri + ('cdi_spec_dirs',): CDI,
    })
    assert after == expected
    assert len(changes) == 6 + 18  # runc's 21 keys less runtime_type, BinaryName, SystemdCgroup (set above)
    # only added lines and the changed default_runtime_name line differ
    delta = list(difflib.ndiff(src.splitlines(), doc.text().splitlines()))
    assert [line[2:] for line in delta if line.startswith('- ')] == ['      default_runtime_name = "runc"']
    added = [line[2:] for line in delta if line.startswith('+ ') and line.strip() != '+']
    assert added[:5] == [
        '    enable_cdi = true', '    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]', '      default_runtime_name = "nvidia"',
        '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]',
        '          runtime_type = "io.containerd.runc.v2"']
    assert '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]' in added
    assert '            BinaryName = "/usr/bin/nvidia-container-runtime"' in added
    assert '            SystemdCgroup = false' in added and len(added) == 7 + 1 + 18


RUNC_SITE = """version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  privileged_without_host_devices = true # hardening: privileged pods get no host devices
  base_runtime_spec = "/etc/containerd/base-spec.json"
  cgroup_writable = true
  pod_annotations = [
    "io.kubernetes.cri-o.Devices",
  ]
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/opt/runc/bin/runc"
  Root = "/run/site-runc"
  SystemdCgroup = true
"""


def test_NCT_23_nvidia_runtime_gets_runcs_settings_kept_on_rerun_and_its_own_win():
    """nvidia-ctk copies the runc runtime's whole table into the NVIDIA runtime's (v1.20.0,
    pkg/config/engine/containerd/config.go): a site's hardening or base spec on runc applies to GPU pods too. Before
    NCT-23 the module copied SystemdCgroup alone, so privileged GPU pods got every host device on such a node."""
    doc = TomlDocument(RUNC_SITE)
    rc.apply_runtime(doc, 3, 'nvidia', NV, False, None, False, CDI)
    rt = loads(doc.text())['plugins']['io.containerd.cri.v1.runtime']['containerd']['runtimes']
    assert rt['nvidia'] == {
        'runtime_type': 'io.containerd.runc.v2', 'privileged_without_host_devices': True,
        'base_runtime_spec': '/etc/containerd/base-spec.json', 'cgroup_writable': True,
        'pod_annotations': ['io.kubernetes.cri-o.Devices'],
        # BinaryName is the runtime's own: never runc's binary
        'options': {'BinaryName': NV, 'Root': '/run/site-runc', 'SystemdCgroup': True}}
    once = doc.text()
    assert rc.apply_runtime(TomlDocument(once), 3, 'nvidia', NV, False, None, False, CDI) == []
    # a setting the NVIDIA runtime already has is the user's: kept, not overwritten by runc's
    mine = once.replace('privileged_without_host_devices = true', 'privileged_without_host_devices = false', 2)
    mine = mine.replace('privileged_without_host_devices = false', 'privileged_without_host_devices = true', 1)
    doc = TomlDocument(mine)
    assert rc.apply_runtime(doc, 3, 'nvidia', NV, False, None, False, CDI) == []
    assert loads(doc.text())['plugins']['io.containerd.cri.v1.runtime']['containerd']['runtimes']['nvidia'][
        'privileged_without_host_devices'] is False


def test_NCT_23_template_expression_copied_as_written():
    src = ('{{ template "base" . }}\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
           '  runtime_type = "io.containerd.runc.v2"\n  runtime_root = "{{ .NodeConfig.Root }}"\n')
    doc = TomlDocument(src)
    rc.apply_runtime(doc, 2, 'nvidia', NV, False, None, False, CDI, add_runc=False)
    assert doc.get_raw(rc.runtime_path(2, 'nvidia'), 'runtime_root') == '"{{ .NodeConfig.Root }}"'


def test_config_default_idempotent_and_absent_round_trip():
    src = fixture('containerd-1.6.20-config-default.toml')
    doc = TomlDocument(src)
    rc.apply_runtime(doc, 2, 'nvidia', NV, False, None, False, CDI)
    once = doc.text()
    doc2 = TomlDocument(once)
    assert rc.apply_runtime(doc2, 2, 'nvidia', NV, False, None, False, CDI) == []
    assert doc2.text() == once
    assert rc.apply_runtime(doc2, 2, 'nvidia', NV, False, None, False, CDI, state='absent') != []
    assert doc2.text() == src


def test_systemd_cgroup_copied_from_runc_or_forced():
    src = fixture('containerd-1.6.20-config-default.toml').replace('SystemdCgroup = false', 'SystemdCgroup = true')
    doc = TomlDocument(src)
    rc.apply_runtime(doc, 2, 'nvidia', NV, False, None, False, CDI)
    opts = loads(doc.text())['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']['nvidia']['options']
    assert opts['SystemdCgroup'] is True
    rc.apply_runtime(doc, 2, 'nvidia', NV, False, False, False, CDI)
    opts = loads(doc.text())['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']['nvidia']['options']
    assert opts['SystemdCgroup'] is False


def test_v3_site_config_inline():
    src = fixture('containerd-2.x-v3-site.toml')
    doc = TomlDocument(src)
    assert rc.detect_version(doc) == 3
    assert rc.choose_mode('auto', doc, 3) == 'inline'
    rc.apply_runtime(doc, 3, 'nvidia', NV, True, None, True, CDI)
    text = doc.text()
    data = loads(text)
    rt = data['plugins']['io.containerd.cri.v1.runtime']
    assert rt['containerd']['runtimes']['nvidia'] == {'runtime_type': 'io.containerd.runc.v2',
                                                      'options': {'BinaryName': NV, 'SystemdCgroup': True}}
    assert rt['containerd']['default_runtime_name'] == 'nvidia'
    assert rt['enable_cdi'] is True
    assert 'enable_cdi = true # turned on by the GPU team later' in text  # comment kept
    assert data['imports'] == ['/etc/containerd/certs.d/*.toml']
    assert data['plugins']['io.containerd.cri.v1.images']['pinned_images']['sandbox'] == 'registry.corp.example.com/pause:3.10'
    assert data['plugins']['io.containerd.grpc.v1.cri'] == {'disable_tcp_service': True}


def test_dropin_for_a_config_without_cri_section():
    src = '# site\nversion = 2\nroot = "/var/lib/containerd"\n\n[grpc]\n  address = "/run/containerd/containerd.sock"\n'
    doc = TomlDocument(src)
    assert rc.choose_mode('auto', doc, 2) == 'dropin'
    changes = rc.ensure_import(doc, '/etc/containerd/conf.d/99-nvidia.toml', 2)
    assert changes == ['imports += /etc/containerd/conf.d/99-nvidia.toml']
    assert doc.text() == src.replace('root = "/var/lib/containerd"\n',
                                     'root = "/var/lib/containerd"\nimports = ["/etc/containerd/conf.d/99-nvidia.toml"]\n')
    assert rc.ensure_import(doc, '/etc/containerd/conf.d/99-nvidia.toml', 2) == []
    dropin = rc.render_dropin(2, 'nvidia', NV, False, None, True, CDI)
    d = loads(dropin)
    assert d['version'] == 2
    runtimes = d['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']
    assert runtimes['nvidia']['options'] == {'BinaryName': NV}
    assert runtimes['runc'] == {'runtime_type': 'io.containerd.runc.v2'}  # else containerd drops its default runc
    assert d['plugins']['io.containerd.grpc.v1.cri']['enable_cdi'] is True


def test_imports_glob_and_empty_imports_of_config_default():
    doc = TomlDocument('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert rc.ensure_import(doc, '/etc/containerd/conf.d/99-nvidia.toml', 2) == []
    doc = TomlDocument('imports = []\nversion = 2\n')
    rc.ensure_import(doc, '/x/99.toml', 2)
    assert doc.text() == 'imports = ["/x/99.toml"]\nversion = 2\n'  # no second "imports" key
    doc = TomlDocument('')
    rc.ensure_import(doc, '/x/99.toml', 3)
    assert loads(doc.text()) == {'version': 3, 'imports': ['/x/99.toml']}


def test_rke2_template_edit_keeps_go_templates():
    src = fixture('rke2-config.toml.tmpl')
    doc = TomlDocument(src, append_only=True)
    assert rc.detect_version(doc) == 2
    changes = rc.apply_runtime(doc, 2, 'nvidia', NV, False, None, False, CDI, add_runc=False)
    text = doc.text()
    assert text.startswith(src)  # nothing before the appended tables changed
    added = text[len(src):]
    assert added == ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                     '  runtime_type = "io.containerd.runc.v2"\n\n'
                     '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                     '  BinaryName = "/usr/bin/nvidia-container-runtime"\n'
                     '  SystemdCgroup = {{ .SystemdCgroup }}\n')
    assert len(changes) == 3
    doc2 = TomlDocument(text, append_only=True)
    assert rc.apply_runtime(doc2, 2, 'nvidia', NV, False, None, False, CDI) == []
    # set as default edits the existing [..containerd] table in place, outside every {{ if }}
    rc.apply_runtime(doc2, 2, 'nvidia', NV, True, None, False, CDI)
    assert ('[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "{{ .NodeConfig.AgentConfig.Snapshotter }}"\n'
            '  disable_snapshot_annotations = {{ if eq .NodeConfig.AgentConfig.Snapshotter "stargz" }}false{{else}}true{{end}}\n'
            '  default_runtime_name = "nvidia"\n') in doc2.text()


def test_rke2_template_from_scratch():
    doc = TomlDocument(rc.RKE2_TEMPLATE_HEAD, append_only=True)
    assert rc.detect_version(doc) is None
    rc.apply_runtime(doc, 2, 'nvidia', NV, False, None, False, CDI, add_runc=False)  # runc comes from "base"
    assert doc.text().startswith('{{ template "base" . }}\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n')


@pytest.mark.parametrize('text', ['version = 1\n', 'version = "2"\n'])
def test_unsupported_versions(text):
    with pytest.raises(rc.ContainerdConfigError, match='not supported'):
        rc.detect_version(TomlDocument(text))


def test_imports_must_be_strings():
    with pytest.raises(rc.ContainerdConfigError, match='array of strings'):
        rc.ensure_import(TomlDocument('version = 2\nimports = [1]\n'), '/x', 2)


def test_debian_shipped_config_gets_runc_back():
    src = ('version = 2\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n    [plugins."io.containerd.grpc.v1.cri".cni]\n'
           '      bin_dir = "/usr/lib/cni"\n      conf_dir = "/etc/cni/net.d"\n  [plugins."io.containerd.internal.v1.opt"]\n'
           '    path = "/var/lib/containerd/opt"\n')
    doc = TomlDocument(src)
    rc.apply_runtime(doc, 2, 'nvidia', NV, False, True, False, CDI)
    d = loads(doc.text())
    runtimes = d['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']
    assert runtimes['runc'] == {'runtime_type': 'io.containerd.runc.v2', 'options': {'SystemdCgroup': True}}
    assert runtimes['nvidia']['options'] == {'BinaryName': NV, 'SystemdCgroup': True}
    assert d['plugins']['io.containerd.grpc.v1.cri']['cni'] == {'bin_dir': '/usr/lib/cni', 'conf_dir': '/etc/cni/net.d'}
    assert d['plugins']['io.containerd.internal.v1.opt'] == {'path': '/var/lib/containerd/opt'}


def test_remove_import_keeps_other_entries_and_drops_an_emptied_key():
    dropin = '/etc/containerd/conf.d/99-nvidia.toml'
    doc = TomlDocument('version = 2\nimports = ["/etc/containerd/certs.d/*.toml", "%s"]\nroot = "/r"\n' % dropin)
    assert rc.remove_import(doc, dropin) == ['imports -= %s' % dropin]
    assert loads(doc.text()) == {'version': 2, 'imports': ['/etc/containerd/certs.d/*.toml'], 'root': '/r'}
    assert rc.remove_import(doc, dropin) == []
    src = '# site\nversion = 2\nroot = "/var/lib/containerd"\n'
    doc = TomlDocument(src)
    rc.ensure_import(doc, dropin, 2)
    assert rc.remove_import(doc, dropin) == ['imports -= %s' % dropin]
    assert doc.text() == src  # the round trip gives back the original text
    # a glob that covers the drop-in is the site's, not the collection's
    doc = TomlDocument('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert rc.remove_import(doc, dropin) == [] and 'conf.d/*.toml' in doc.text()
    with pytest.raises(rc.ContainerdConfigError):
        rc.remove_import(TomlDocument('version = 2\nimports = [1]\n'), dropin)


# containerd 2.3's `config default` writes config version 4 (containerd v2.3.4 version/version.go ConfigVersion = 4;
# cmd/containerd/server/config/config.go: version 3 -> 4 moves server properties into plugins, the CRI runtime
# plugin io.containerd.cri.v1.runtime keeps its name and layout), with TOML literal strings; hand-written in that shape
V4_DEFAULT = ("version = 4\nroot = '/var/lib/containerd'\nimports = ['/etc/containerd/conf.d/*.toml']\n\n[plugins]\n"
              "  [plugins.'io.containerd.cri.v1.runtime']\n    enable_cdi = true\n"
              "    cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']\n\n"
              "    [plugins.'io.containerd.cri.v1.runtime'.containerd]\n      default_runtime_name = 'runc'\n\n"
              "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]\n"
              "        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
              "          runtime_type = 'io.containerd.runc.v2'\n\n"
              "          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n"
              "            SystemdCgroup = false\n")


def test_NCT_18_version_4_containerd_2_3_default_gets_the_v3_plugin_tables():
    """Found by the containerd oracle (lab/tests/oracles/test_containerd.py): a version 4 file was refused."""
    doc = TomlDocument(V4_DEFAULT)
    assert rc.detect_version(doc) == 4
    assert rc.choose_mode('auto', doc, 4) == 'inline'
    rc.apply_runtime(doc, 4, 'nvidia', NV, True, None, False, CDI)
    if tomllib:
        d = tomllib.loads(doc.text())
        cri = d['plugins']['io.containerd.cri.v1.runtime']
        assert d['version'] == 4
        assert cri['containerd']['default_runtime_name'] == 'nvidia'
        assert cri['containerd']['runtimes']['nvidia'] == {
            'runtime_type': 'io.containerd.runc.v2', 'options': {'BinaryName': NV, 'SystemdCgroup': False}}
    assert rc.render_dropin(4, 'nvidia', NV, False, None, False, CDI).count('version = 4') == 1


def test_version_5_is_refused():
    with pytest.raises(rc.ContainerdConfigError, match='version 5 is not supported'):
        rc.detect_version(TomlDocument('version = 5\n'))
