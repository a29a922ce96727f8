"""Role nvidia_container_runtime's one looped engine task, for the engines molecule does not cover (rke2, k3s, crio;
docker + containerd drop-in paths are molecule's).

RKE2 / k3s detect /usr/bin/nvidia-container-runtime themselves and render the nvidia runtime from their base
template (docs/conformance/rke2-k3s.md): the role leaves a site template byte for byte as it is, repairs a template
an earlier release filled with duplicate tables, and puts the default runtime into config.yaml (default-runtime),
keeping its other keys; a re-run changes nothing; state=absent removes only the default-runtime key it set.
CRI-O gets a drop-in next to a crio.conf written from CRI-O's own defaults. Each engine's handler is notified
for its own files only. RKE2, k3s and CRI-O themselves are not run here (none is packaged in Debian 12 main).

Run: .venv/bin/pytest lab/tests/integration/test_nvidia_container_runtime_engines.py
"""
import os

from conftest import run_role_on_localhost

SITE_LINES = '# site template line kept by the role\n'
SITE_CONFIG = 'token: K10site  # site\nnode-label:\n  - "gpu=true"\n'
OLD_TABLES = ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
              '  runtime_type = "io.containerd.runc.v2"\n\n'
              '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
              '  BinaryName = "/usr/bin/nvidia-container-runtime"\n  SystemdCgroup = {{ .SystemdCgroup }}\n')
CRIO_CONF = """[crio]
[crio.runtime]
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/libexec/crio/crun"
runtime_root = "/run/crun"
monitor_path = "/usr/libexec/crio/conmon"
allowed_annotations = ["io.containers.trace-syscall"]
"""


def run_role(collections_path, tmp_path, state, engines, **extra):
    variables = {
        'nvidia_container_runtime_state': state, 'nvidia_container_runtime_install': False,
        'nvidia_container_runtime_engines': engines, 'nvidia_container_runtime_restart': False,
        'nvidia_container_runtime_set_as_default': True,
        'nvidia_container_runtime_template_config_version': '2',
        'nvidia_container_runtime_rke2_template': str(tmp_path / 'rke2' / 'config.toml.tmpl'),
        'nvidia_container_runtime_rke2_config': str(tmp_path / 'rke2' / 'config.yaml'),
        'nvidia_container_runtime_k3s_template': str(tmp_path / 'k3s' / 'config.toml.tmpl'),
        'nvidia_container_runtime_k3s_config': str(tmp_path / 'k3s' / 'config.yaml'),
        'nvidia_container_runtime_crio_config': str(tmp_path / 'crio' / 'crio.conf'),
        'nvidia_container_runtime_crio_config_dir': str(tmp_path / 'crio' / 'crio.conf.d'),
        'nvidia_container_runtime_crio_dropin': str(tmp_path / 'crio' / 'crio.conf.d' / '99-nvidia.toml')}
    variables.update(extra)
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables, ['--diff'])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = dict((t['task']['name'].split(' : ', 1)[-1], t['hosts']['localhost']) for p in doc['plays']
                 for t in p['tasks'] if 'localhost' in t['hosts'])
    return doc['stats']['localhost']['changed'], tasks


def test_RKE_10_role_rke2_and_k3s_present_rerun_absent(collections_path, tmp_path):
    for engine in ('rke2', 'k3s'):
        os.makedirs(str(tmp_path / engine))
    # rke2: a site template and config.yaml; k3s: the template an earlier release wrote (duplicate tables)
    rke2 = tmp_path / 'rke2' / 'config.toml.tmpl'
    rke2.write_text('{{ template "base" . }}\n' + SITE_LINES)
    (tmp_path / 'rke2' / 'config.yaml').write_text(SITE_CONFIG)
    k3s = tmp_path / 'k3s' / 'config.toml.tmpl'
    k3s.write_text('{{ template "base" . }}\n' + OLD_TABLES)
    for engines in (['rke2'], ['k3s']):
        changed, tasks = run_role(collections_path, tmp_path, 'present', engines)
        task = tasks['Add the runtime to each engine\'s configuration']
        assert changed == 1 and [r['item'] for r in task['results']] == engines
        assert task['results'][0]['changed'] is True
        cfg = (tmp_path / engines[0] / 'config.yaml').read_text()
        assert cfg.endswith('default-runtime: nvidia\n'), cfg
        text = (tmp_path / engines[0] / 'config.toml.tmpl').read_text()
        assert 'runtimes.nvidia' not in text and text.startswith('{{ template "base" . }}'), text
        changed, _ = run_role(collections_path, tmp_path, 'present', engines)
        assert changed == 0
    assert rke2.read_text() == '{{ template "base" . }}\n' + SITE_LINES
    assert (tmp_path / 'rke2' / 'config.yaml').read_text() == SITE_CONFIG + 'default-runtime: nvidia\n'
    changed, tasks = run_role(collections_path, tmp_path, 'absent', ['rke2'])
    assert changed == 1
    assert rke2.read_text() == '{{ template "base" . }}\n' + SITE_LINES
    assert (tmp_path / 'rke2' / 'config.yaml').read_text() == SITE_CONFIG
    assert 'default-runtime: nvidia' in (tmp_path / 'k3s' / 'config.yaml').read_text()   # other engine untouched
    assert run_role(collections_path, tmp_path, 'absent', ['rke2'])[0] == 0


def test_CRIO_05_role_crio_dropin_present_rerun_absent(collections_path, tmp_path):
    os.makedirs(str(tmp_path / 'crio' / 'crio.conf.d'))
    (tmp_path / 'crio' / 'crio.conf').write_text(CRIO_CONF)
    dropin = tmp_path / 'crio' / 'crio.conf.d' / '99-nvidia.toml'
    changed, tasks = run_role(collections_path, tmp_path, 'present', ['crio'])
    assert changed == 1
    text = dropin.read_text()
    assert 'default_runtime = "nvidia"' in text and 'runtime_path = "/usr/bin/nvidia-container-runtime"' in text
    assert 'monitor_path = "/usr/libexec/crio/conmon"' in text
    assert (tmp_path / 'crio' / 'crio.conf').read_text() == CRIO_CONF
    assert run_role(collections_path, tmp_path, 'present', ['crio'])[0] == 0
    assert run_role(collections_path, tmp_path, 'absent', ['crio'])[0] == 1
    assert not dropin.exists() and (tmp_path / 'crio' / 'crio.conf').read_text() == CRIO_CONF
