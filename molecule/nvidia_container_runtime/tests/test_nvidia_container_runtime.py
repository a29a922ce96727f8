"""Verify role gpuops.k8s_gpu.nvidia_container_runtime on the lab nodes (testinfra, docker:// backend)."""
import json
import tomllib

# the hosts the checks below name (test_the_checks_name_the_scenarios_hosts)
CHECKED_HOSTS = ["nvrt-docker", "nvrt-containerd"]

STANDIN_LOG = '/var/log/nvidia-container-runtime-standin.log'
VERSION = '1.20.0-1~gpuopslab1'


def _is(host, group):
    return host.backend.get_hostname().startswith('nvrt-' + group)


def test_toolkit_from_the_local_signed_repository(host):
    # all four pinned, although the repository also holds the newer 1.20.1 set (pinning only the two toolkit
    # packages would let libnvidia-container-tools / libnvidia-container1 float to it)
    for pkg in ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools',
                'libnvidia-container1'):
        assert host.package(pkg).is_installed
        assert host.package(pkg).version == VERSION, pkg
    assert 'Candidate: 1.20.1-1~gpuopslab1' in host.check_output('apt-cache policy libnvidia-container-tools')
    assert '1.20.0' in host.check_output('nvidia-container-cli --version')
    src = host.file('/etc/apt/sources.list.d/nvidia-container-toolkit.sources').content_string
    assert 'Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc' in src
    assert 'URIs: http://127.0.0.1:' in src and '/libnvidia-container/stable/deb/amd64' in src
    assert 'BEGIN PGP PUBLIC KEY BLOCK' in host.file('/etc/apt/keyrings/nvidia-container-toolkit.asc').content_string
    # apt really verified the signature: the repo's lists are there and no apt-key keyring was used
    policy = host.check_output('apt-cache policy nvidia-container-toolkit')
    assert '127.0.0.1' in policy
    assert not host.file('/etc/apt/trusted.gpg').exists
    assert 'LAB STAND-IN' in host.check_output('dpkg-query -W -f=\'${Description}\' nvidia-container-toolkit')
    assert 'stand-in' in host.check_output('nvidia-ctk --version')


def test_docker_runtime_and_foreign_keys(host):
    if not _is(host, 'docker'):
        return
    cfg = json.loads(host.file('/etc/docker/daemon.json').content_string)
    assert cfg['runtimes']['nvidia'] == {'path': '/usr/bin/nvidia-container-runtime'}
    assert cfg['default-runtime'] == 'nvidia'
    for key, value in {'bridge': 'none', 'iptables': False, 'storage-driver': 'vfs',
                       'registry-mirrors': ['https://registry-mirror.example.com'],
                       'insecure-registries': ['registry.lab.example:5000'], 'log-driver': 'json-file',
                       'log-opts': {'max-size': '10m', 'max-file': '3'}}.items():
        assert cfg[key] == value, key
    assert cfg['runtimes']['lab-runc'] == {'path': '/usr/sbin/runc'}
    backups = host.check_output('ls /etc/docker/').split()
    backups = [b for b in backups if b.startswith('daemon.json.') and b.endswith('~')]
    assert len(backups) == 1, backups
    original = json.loads(host.file('/etc/docker/' + backups[0]).content_string)
    assert 'nvidia' not in original['runtimes']


def test_docker_info_and_run_with_nvidia_runtime(host):
    if not _is(host, 'docker'):
        return
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert 'nvidia' in info['Runtimes'] and 'lab-runc' in info['Runtimes']
    assert info['DefaultRuntime'] == 'nvidia'
    assert info['Driver'] == 'vfs'
    assert info['RegistryConfig']['Mirrors'] == ['https://registry-mirror.example.com/']
    before = host.run('wc -l < %s' % STANDIN_LOG).stdout.strip() or '0'
    out = host.check_output('docker run --rm --runtime nvidia gpuops-lab/busybox:local /bin/sh -c "echo via-nvidia"')
    assert out.strip() == 'via-nvidia'
    after = host.check_output('wc -l < %s' % STANDIN_LOG).strip()
    assert int(after) > int(before), 'the stand-in nvidia-container-runtime was not called'
    # the default runtime is nvidia too
    host.check_output('docker run --rm gpuops-lab/busybox:local /bin/sh -c true')
    assert int(host.check_output('wc -l < %s' % STANDIN_LOG).strip()) > int(after)


def _dump(host, config):
    return tomllib.loads(host.check_output('containerd --config %s config dump' % config))


def test_containerd_inline_keeps_site_settings(host):
    if not _is(host, 'containerd'):
        return
    assert host.service('containerd').is_running
    cri = _dump(host, '/etc/containerd/config.toml')['plugins']['io.containerd.grpc.v1.cri']
    runtimes = cri['containerd']['runtimes']
    assert runtimes['nvidia']['runtime_type'] == 'io.containerd.runc.v2'
    assert runtimes['nvidia']['options']['BinaryName'] == '/usr/bin/nvidia-container-runtime'
    assert runtimes['nvidia']['options']['SystemdCgroup'] is True  # copied from runc
    assert runtimes['runc']['options']['SystemdCgroup'] is True
    assert cri['sandbox_image'] == 'registry.lab.example:5000/pause:3.9'
    assert cri['containerd']['default_runtime_name'] == 'runc'
    # containerd 1.6 does not know enable_cdi/cdi_spec_dirs (CDI arrived in 1.7; the role refuses CDI there, so the
    # scenario does not ask for it): neither is written
    in_file = tomllib.loads(host.file('/etc/containerd/config.toml').content_string)['plugins']['io.containerd.grpc.v1.cri']
    assert 'enable_cdi' not in in_file and 'enable_cdi' not in cri
    assert not host.file('/etc/containerd/conf.d/99-nvidia.toml').exists
    backups = [b for b in host.check_output('ls /etc/containerd/').split() if b.startswith('config.toml.')]
    assert len(backups) == 1, backups
    # the running daemon loaded it
    journal = host.check_output('journalctl -u containerd --no-pager -o cat')
    assert 'nvidia' in journal


def test_containerd_dropin_for_a_config_without_cri_section(host):
    if not _is(host, 'containerd'):
        return
    main = host.file('/etc/containerd/minimal.toml').content_string
    assert tomllib.loads(main)['imports'] == ['/etc/containerd/conf.d/99-nvidia-minimal.toml']
    assert '# site config without a CRI section' in main
    dump = _dump(host, '/etc/containerd/minimal.toml')
    runtimes = dump['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']
    assert runtimes['nvidia']['options']['BinaryName'] == '/usr/bin/nvidia-container-runtime'
    assert 'runc' in runtimes  # containerd's defaults are still there


def test_NCT_06_brownfield_guide_source_replaced_apt_update_works(host):
    """The containerd node was seeded as NVIDIA's install guide leaves it (prepare.yml): after the role exactly one
    source with one Signed-By serves the repository, the guide's list is backed up outside apt's directories, and
    apt-get update succeeds (it fails with "Conflicting values set for option Signed-By" otherwise)."""
    if not _is(host, 'containerd'):
        return
    assert not host.file('/etc/apt/sources.list.d/nvidia-container-toolkit.list').exists
    backups = host.check_output('ls /etc/apt/gpuops-backups/').split()
    assert any(b.startswith('nvidia-container-toolkit.list.') for b in backups), backups
    update = host.run('apt-get update')
    assert update.rc == 0 and 'Conflicting values' not in update.stdout + update.stderr, update.stderr


def test_the_checks_name_the_scenarios_hosts(host):
    """The hosts the checks of this file name are the scenario's platforms (molecule/_shared/hosts_guard.py)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "_shared"))
    from hosts_guard import assert_checks_name_the_scenarios_hosts
    assert_checks_name_the_scenarios_hosts(host, __file__, CHECKED_HOSTS)
