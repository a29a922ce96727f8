"""Role nvidia_container_runtime refuses bad input before anything changes: the message names each broken rule's
variable, its value and what is allowed (the role's one preflight task, or meta/argument_specs.yml for types and
choices), and a pre-existing daemon.json is left byte for byte.

Run: .venv/bin/pytest lab/tests/integration/test_nvidia_container_runtime_preflight.py
"""
import json

import pytest

from conftest import run_role_on_localhost

DAEMON = {'registry-mirrors': ['https://mirror.example'], 'log-opts': {'max-size': '10m'}}

CASES = [
    ({'nvidia_container_runtime_engines': ['containerd', 'rke2']},
     ['nvidia_container_runtime_engines ["containerd", "rke2"] combines containerd with rke2/k3s']),
    ({'nvidia_container_runtime_engines': ['rke2', 'k3s']}, ['names both rke2 and k3s']),
    ({'nvidia_container_runtime_engines': []}, ['nvidia_container_runtime_engines is []', 'non-empty list of docker, containerd, crio, rke2, k3s']),
    # two broken rules in one run: both are named
    ({'nvidia_container_runtime_name': 'nv idia', 'nvidia_container_runtime_binary': 'nvidia-container-runtime'},
     ['nvidia_container_runtime_name (nv idia) must be a plain name',
      'nvidia_container_runtime_binary (nvidia-container-runtime) must be an absolute path']),
    ({'nvidia_container_runtime_cdi': True}, ['nvidia_container_runtime_cdi applies to containerd, rke2 and k3s only']),
    ({'nvidia_container_runtime_install': True, 'nvidia_container_runtime_repo_base_url': 'mirror.local'},
     ["nvidia_container_runtime_repo_base_url is 'mirror.local'; it must be an http(s) or file URL",
      'gpuops_mirror.apt']),
    ({'nvidia_container_runtime_install': True, 'nvidia_container_runtime_repo_base_url': 'http://mirror.local',
      'nvidia_container_runtime_repo_url': 'mirror.local/libnvidia-container/stable/deb/amd64',
      'nvidia_container_runtime_repo_key_url': 'mirror.local/libnvidia-container/gpgkey'},
     ["nvidia_container_runtime_repo_url is 'mirror.local/libnvidia-container/stable/deb/amd64'; it must be an http(s) or file URL",
      "nvidia_container_runtime_repo_key_url is 'mirror.local/libnvidia-container/gpgkey'"]),
    # no facts here: the OS family is unknown (apt and dnf are the supported ones)
    ({'nvidia_container_runtime_install': True, 'nvidia_container_runtime_repo_base_url': 'http://mirror.local'},
     ["ansible_facts.os_family is 'unknown'", 'Debian (apt) and RedHat', 'nvidia_container_runtime_install=false']),
    ({'nvidia_container_runtime_install': True, 'nvidia_container_runtime_version': 'latest'},
     ["nvidia_container_runtime_version is 'latest'", '1.20.0-1']),
    # types and choices: meta/argument_specs.yml, before the role's first task
    ({'nvidia_container_runtime_engines': ['docker', 'podman']},
     ['nvidia_container_runtime_engines', 'docker, containerd, crio, rke2, k3s', 'podman']),
    ({'nvidia_container_runtime_containerd_mode': 'merge'}, ['nvidia_container_runtime_containerd_mode', 'auto, inline, dropin']),
    ({'nvidia_container_runtime_containerd_config_version': 1}, ['nvidia_container_runtime_containerd_config_version', 'auto, 2, 3']),
]


@pytest.mark.parametrize('bad,needles', CASES, ids=[','.join(sorted(c[0])) + '=' + json.dumps(list(c[0].values()))
                                                   for c in CASES])
def test_bad_input_is_refused_before_any_change(bad, needles, collections_path, tmp_path):
    daemon = tmp_path / 'daemon.json'
    daemon.write_text(json.dumps(DAEMON, indent=2))
    before = daemon.read_bytes()
    variables = {'nvidia_container_runtime_install': False, 'nvidia_container_runtime_engines': ['docker'],
                 'nvidia_container_runtime_docker_config': str(daemon), 'nvidia_container_runtime_restart': False}
    variables.update(bad)
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = [(t['task']['name'], r) for p in doc['plays'] for t in p['tasks'] for r in t['hosts'].values()
              if r.get('failed')]
    assert len(failed) == 1, failed
    name, result = failed[0]
    assert 'Validating arguments' in name or 'Check the variables' in name, name
    for needle in needles:
        assert needle in result['msg'], (needle, result['msg'])
    ran = [t['task']['name'] for p in doc['plays'] for t in p['tasks']
           if any(not r.get('skipped') for r in t['hosts'].values())]
    assert ran[-1] == name, ran   # nothing ran after the refusal
    assert daemon.read_bytes() == before
