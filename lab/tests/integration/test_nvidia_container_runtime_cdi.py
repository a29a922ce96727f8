"""Role nvidia_container_runtime, CDI spec (docs/conformance/nvidia-container-toolkit.md NCT-05): with a
toolkit that has no nvidia-cdi-refresh units the role runs `nvidia-ctk cdi generate --output=...` and installs the
spec only when it differs (a driver change gives a new spec), and sets nvidia_container_runtime_cdi_spec_ready.
nvidia-ctk here is a LAB STAND-IN script that writes a spec naming the "driver" of a file; the toolkit's refresh
units need systemd on a node with the NVIDIA driver and are not run here.

Run: .venv/bin/pytest lab/tests/integration/test_nvidia_container_runtime_cdi.py
"""
import os

from conftest import run_role_on_localhost

CTK = """#!/bin/sh
# LAB STAND-IN for nvidia-ctk (gpuops.k8s_gpu lab): `cdi generate --output=F` writes a spec naming the driver of
# the file DRIVER next to this script. Like the real one it adds .yaml to an output name that does not end in .yaml
# or .json (NVIDIA/nvidia-container-toolkit v1.20.0, pkg/nvcdi/spec/spec.go normalizePath; NCT-25).
for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done
case "$out" in *.yaml|*.json) ;; *) out="$out.yaml";; esac
[ "$1 $2" = "cdi generate" ] || exit 2
mkdir -p "$(dirname "$out")"
printf 'cdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\ncontainerEdits:\\n  env: [NVIDIA_DRIVER=%s]\\n' "$(cat "$(dirname "$0")/DRIVER")" > "$out"
"""


def run_role(collections_path, tmp_path, check=False):
    variables = {
        'nvidia_container_runtime_install': False, 'nvidia_container_runtime_engines': ['containerd'],
        # the spec only: this machine's containerd (Debian 12's 1.6.20) has no CDI and the role refuses
        # nvidia_container_runtime_cdi there (test_containerd_cdi_real.py)
        'nvidia_container_runtime_restart': False, 'nvidia_container_runtime_cdi_spec': True,
        'nvidia_container_runtime_containerd_config': str(tmp_path / 'config.toml'),
        'nvidia_container_runtime_containerd_config_version': '2',
        'nvidia_container_runtime_containerd_dropin': str(tmp_path / 'conf.d' / '99-nvidia.toml'),
        'nvidia_container_runtime_ctk': str(tmp_path / 'bin' / 'nvidia-ctk'),
        'nvidia_container_runtime_cdi_unit_dirs': [str(tmp_path / 'units')],
        'nvidia_container_runtime_cdi_spec_path': str(tmp_path / 'cdi' / 'nvidia.yaml')}
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables,
                                      ['--check'] if check else [])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = dict((t['task']['name'].split(' : ', 1)[-1], t['hosts']['localhost']) for p in doc['plays']
                 for t in p['tasks'] if 'localhost' in t['hosts'])
    return tasks


def ready(tasks):
    res = tasks['Tell the cluster layer whether a CDI spec exists']
    return (res.get('ansible_facts') or res).get('nvidia_container_runtime_cdi_spec_ready')


def test_NCT_05_spec_generated_fact_set_rerun_and_driver_change(collections_path, tmp_path):
    (tmp_path / 'bin').mkdir()
    (tmp_path / 'units').mkdir()
    ctk = tmp_path / 'bin' / 'nvidia-ctk'
    ctk.write_text(CTK)
    os.chmod(str(ctk), 0o755)
    (tmp_path / 'bin' / 'DRIVER').write_text('580.95.05')
    spec = tmp_path / 'cdi' / 'nvidia.yaml'
    (tmp_path / 'cdi').mkdir()
    tasks = run_role(collections_path, tmp_path, check=True)
    assert not spec.exists() and tasks['Install the generated spec when it differs (a changed driver gives a changed spec)']['changed']
    assert ready(tasks) is False, tasks['Tell the cluster layer whether a CDI spec exists']
    tasks = run_role(collections_path, tmp_path)
    assert 'NVIDIA_DRIVER=580.95.05' in spec.read_text()
    assert ready(tasks) is True
    assert os.listdir(str(spec.parent)) == ['nvidia.yaml']   # no scratch file beside the spec
    tasks = run_role(collections_path, tmp_path)
    assert not any(r.get('changed') for r in tasks.values())
    (tmp_path / 'bin' / 'DRIVER').write_text('595.45.04')   # the driver changed: a new spec
    tasks = run_role(collections_path, tmp_path)
    assert tasks['Install the generated spec when it differs (a changed driver gives a changed spec)']['changed']
    assert 'NVIDIA_DRIVER=595.45.04' in spec.read_text()


def test_NCT_25_spec_path_not_yaml_or_json_refused_before_any_change(collections_path, tmp_path):
    """nvidia-ctk would write <path>.yaml for another name (and runtimes load only *.yaml and *.json specs): the role
    refuses such a path up front, naming the variable and its value, and writes nothing."""
    variables = {
        'nvidia_container_runtime_install': False, 'nvidia_container_runtime_engines': ['containerd'],
        'nvidia_container_runtime_restart': False, 'nvidia_container_runtime_cdi_spec': True,
        'nvidia_container_runtime_containerd_config': str(tmp_path / 'config.toml'),
        'nvidia_container_runtime_cdi_spec_path': str(tmp_path / 'cdi' / 'nvidia.yml')}
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables)
    assert proc.returncode != 0
    msgs = [t['hosts']['localhost'].get('msg', '') for p in doc['plays'] for t in p['tasks'] if 'localhost' in t['hosts']]
    assert any('nvidia_container_runtime_cdi_spec_path (%s) must be an absolute path ending in .yaml or .json'
               % (tmp_path / 'cdi' / 'nvidia.yml') in m for m in msgs), msgs
    assert not (tmp_path / 'config.toml').exists() and not (tmp_path / 'cdi').exists()
