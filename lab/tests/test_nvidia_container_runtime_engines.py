"""Role nvidia_container_runtime's one looped engine task, for the engines molecule does not cover (rke2 and k3s
config.toml.tmpl, docker + containerd drop-in paths are molecule's): present creates each template with the base
template and the runtime's tables, a re-run changes nothing, state=absent removes only the runtime's tables and
keeps the site's own lines; each engine's handler is notified for its own file only.

Run: .venv/bin/pytest lab/tests/test_nvidia_container_runtime_engines.py
"""
import os

from conftest import run_role_on_localhost

SITE_LINES = '# site template line kept by the role\n'


def run_role(collections_path, tmp_path, state, engines):
    variables = {
        'nvidia_container_runtime_state': state, 'nvidia_container_runtime_install': False,
        'nvidia_container_runtime_engines': engines, 'nvidia_container_runtime_restart': False,
        'nvidia_container_runtime_rke2_template': str(tmp_path / 'rke2' / 'config.toml.tmpl'),
        'nvidia_container_runtime_k3s_template': str(tmp_path / 'k3s' / 'config.toml.tmpl')}
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables, ['--diff'])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = dict((t['task']['name'].split(' : ', 1)[-1], t['hosts']['localhost']) for p in doc['plays']
                 for t in p['tasks'] if 'localhost' in t['hosts'])
    return doc['stats']['localhost']['changed'], tasks


def test_rke2_and_k3s_templates_present_rerun_absent(collections_path, tmp_path):
    for engine in ('rke2', 'k3s'):
        os.makedirs(str(tmp_path / engine))
    # rke2: an existing site template; k3s: none yet (created from the base template)
    rke2 = tmp_path / 'rke2' / 'config.toml.tmpl'
    rke2.write_text('{{ template "base" . }}\n' + SITE_LINES)
    for engines in (['rke2'], ['k3s']):
        changed, tasks = run_role(collections_path, tmp_path, 'present', engines)
        task = tasks['Add the runtime to each engine\'s configuration']
        assert changed == 1 and [r['item'] for r in task['results']] == engines
        assert task['results'][0]['changed'] is True
        path = tmp_path / engines[0] / 'config.toml.tmpl'
        text = path.read_text()
        assert text.startswith('{{ template "base" . }}')
        assert 'runtimes.nvidia]' in text and 'BinaryName = "/usr/bin/nvidia-container-runtime"' in text, text
        changed, _ = run_role(collections_path, tmp_path, 'present', engines)
        assert changed == 0
    assert SITE_LINES in rke2.read_text()
    changed, tasks = run_role(collections_path, tmp_path, 'absent', ['rke2'])
    assert changed == 1
    assert rke2.read_text() == '{{ template "base" . }}\n' + SITE_LINES
    assert 'runtimes.nvidia]' in (tmp_path / 'k3s' / 'config.toml.tmpl').read_text()   # other engine untouched
    assert run_role(collections_path, tmp_path, 'absent', ['rke2'])[0] == 0
