"""CDI and Debian 12's real containerd 1.6.20 (docs/conformance/containerd.md CTD-01, CTD-04): the containerd this lab
machine runs (Debian's package, the one lab/bin/bootstrap.sh gets with docker.io, and the one molecule's containerd
node installs) reads a config with enable_cdi = true and cdi_spec_dirs without an error and runs without CDI - its CRI
plugin has no such keys (they arrived in 1.7.0). So role nvidia_container_runtime refuses nvidia_container_runtime_cdi
there before anything changes, naming the variable, the release found and what is needed.

The daemon is started for a moment on private root, state and socket paths (nothing of the machine's own containerd
is touched) and stopped by its own pid. Seconds in all.

Run: .venv/bin/pytest -q lab/tests/integration/test_containerd_cdi_real.py
"""
import os
import subprocess
import time
import tomllib

import pytest

from conftest import run_role_on_localhost

CONTAINERD = '/usr/bin/containerd'
DEBIAN = ' 1.6.20~ds1 '


@pytest.fixture(scope='module')
def containerd():
    """Debian 12's containerd 1.6.20; a machine without it cannot run these tests, which then fail (never skip)."""
    assert os.path.exists(CONTAINERD), '%s is missing: install Debian 12\'s containerd (apt-get install containerd)' \
        % CONTAINERD
    out = subprocess.run([CONTAINERD, '--version'], capture_output=True, text=True, check=True).stdout
    assert DEBIAN in out, 'these tests need Debian 12\'s containerd 1.6.20, found: %s' % out
    return CONTAINERD


CDI_CONFIG = '''version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  sandbox_image = "registry.lab.example:5000/pause:3.9"
'''


def test_CTD_04_containerd_1_6_20_reads_enable_cdi_silently_and_drops_it(containerd, tmp_path):
    cfg = tmp_path / 'config.toml'
    cfg.write_text(CDI_CONFIG)
    proc = subprocess.run([containerd, '--config', str(cfg), 'config', 'dump'], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and 'cdi' not in proc.stderr.lower(), proc.stderr
    cri = tomllib.loads(proc.stdout)['plugins']['io.containerd.grpc.v1.cri']
    assert cri['sandbox_image'] == 'registry.lab.example:5000/pause:3.9'  # the file was read
    assert 'enable_cdi' not in cri and 'cdi_spec_dirs' not in cri
    # its own default configuration has no CDI key either
    default = subprocess.run([containerd, 'config', 'default'], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    assert 'cdi' not in default.lower()


def test_CTD_04_containerd_1_6_20_daemon_runs_without_cdi(containerd, tmp_path):
    """The daemon itself, on private paths: the CRI plugin starts with the file's other settings, says nothing about
    enable_cdi and has no CDI field in the configuration it logs (1.7's has EnableCDI)."""
    root, state = tmp_path / 'root', tmp_path / 'state'
    cfg = tmp_path / 'daemon.toml'
    cfg.write_text('version = 2\nroot = "%s"\nstate = "%s"\n[grpc]\n  address = "%s"\n[ttrpc]\n  address = "%s"\n'
                   '[debug]\n  address = ""\n[metrics]\n  address = ""\n%s'
                   % (root, state, state / 'c.sock', state / 't.sock', CDI_CONFIG.split('\n', 1)[1]))
    log = tmp_path / 'containerd.log'
    with open(log, 'w') as out:
        daemon = subprocess.Popen([containerd, '--config', str(cfg)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and 'serving...' not in log.read_text() and daemon.poll() is None:
            time.sleep(0.2)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    text = log.read_text()
    assert 'serving...' in text, text[-3000:]
    [start] = [line for line in text.splitlines() if 'Start cri plugin with config' in line]
    assert 'SandboxImage:registry.lab.example:5000/pause:3.9' in start
    assert 'EnableSelinux:' in start and 'CDI' not in start and 'cdi' not in text.lower()


def test_CTD_01_role_refuses_cdi_on_containerd_1_6_before_anything_changes(containerd, collections_path, tmp_path):
    cfg = tmp_path / 'config.toml'
    cfg.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n')
    variables = {
        'nvidia_container_runtime_install': False, 'nvidia_container_runtime_engines': ['containerd'],
        'nvidia_container_runtime_restart': False, 'nvidia_container_runtime_cdi': True,
        'nvidia_container_runtime_runtimeclass': False,
        'nvidia_container_runtime_containerd_config': str(cfg),
        'nvidia_container_runtime_containerd_dropin': str(tmp_path / 'conf.d' / '99-nvidia.toml'),
        'nvidia_container_runtime_cdi_spec_path': str(tmp_path / 'cdi' / 'nvidia.yaml')}
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'nvidia_container_runtime', variables)
    assert proc.returncode != 0
    tasks = [(t['task']['name'].split(' : ', 1)[-1], t['hosts']['localhost']) for p in doc['plays']
             for t in p['tasks'] if 'localhost' in t['hosts']]
    failed = [(n, r) for n, r in tasks if r.get('failed')]
    assert [n for n, r in failed] == ['Check that containerd can take CDI before anything changes (containerd 1.7 or '
                                      'later)'], tasks
    msg = failed[0][1]['msg']
    for part in ('nvidia_container_runtime_cdi', 'containerd 1.6.20', 'upgrade containerd to 1.7 or later',
                 'nothing was changed'):
        assert part in msg, msg
    assert failed[0][1]['containerd_version'] == '1.6.20'
    # it was the first task on the node: nothing ran after it, nothing changed
    assert tasks[-1][0] == failed[0][0] and not any(r.get('changed') for n, r in tasks)
    assert cfg.read_text() == 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n'
    assert sorted(os.listdir(str(tmp_path))) == sorted(['config.toml', 'play.yml', 'vars.json'])
