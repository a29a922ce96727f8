"""The nvidia_driver role's Ubuntu path end to end - install, verify what was installed, hold - in a lab node
container whose /etc/os-release says Ubuntu 24.04, against LAB STAND-IN packages with Ubuntu's names and
dependency shapes (lab/apt_repo/build-driver-standins.sh: open and proprietary server packages, Canonical-style
signed precompiled module packages, and the 535 server packages transitional to 580). No NVIDIA or Canonical
software is installed; the container is Debian 12 underneath (only os-release is changed, in this container).

Run: .venv/bin/pytest -q lab/tests/integration/test_nvidia_driver_ubuntu_standin.py   (needs root, dockerd, the node image)
"""
import json
import os
import subprocess

import pytest
import yaml

from conftest import ANSIBLE_TESTS_CFG, ROOT, sh

VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
DOCKER_DIR = os.path.join(ROOT, 'lab', 'docker')
REPO_IN_NODE = '/srv/gpuops-ubuntu-standin'
# the lab node is Debian 12 underneath; os-release names only Ubuntu (Ansible's detection looks for 'Debian' in it)
OS_RELEASE = '''PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
'''
DRV = '580.95.05-0ubuntu0.24.04.1'


def dexec(name, *cmd):
    return subprocess.run(['docker', 'exec', name] + list(cmd), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope='module')
def node(tmp_path_factory, collections_path):
    tmp = tmp_path_factory.mktemp('drv-ubuntu')
    sh(os.path.join(DOCKER_DIR, 'engine.sh'), 'up', timeout=300)
    sh(os.path.join(DOCKER_DIR, 'node-image.sh'), timeout=1200)
    name = 'i14-drv-ubuntu-%d' % os.getpid()
    try:
        sh(os.path.join(DOCKER_DIR, 'node.sh'), 'up', name, '--hostname', 'drv-ubuntu')
        # Canonical's precompiled module packages are named after the node's running kernel (`uname -r`)
        krel = dexec(name, 'uname', '-r').stdout.strip()
        assert krel, 'uname -r gave nothing in %s' % name
        repo = sh('bash', os.path.join(ROOT, 'lab', 'apt_repo', 'build-driver-standins.sh'), str(tmp / 'repo'),
                  krel).stdout.strip()
        sh('docker', 'cp', repo, '%s:%s' % (name, REPO_IN_NODE))
        (tmp / 'os-release').write_text(OS_RELEASE)
        # /etc/os-release is a symlink to ../usr/lib/os-release on Debian: replace the link in this container only
        sh('docker', 'exec', name, 'rm', '-f', '/etc/os-release')
        sh('docker', 'cp', str(tmp / 'os-release'), '%s:/etc/os-release' % name)
        (tmp / 'standin.list').write_text('deb [signed-by=%s/key.gpg] file:%s ./\n' % (REPO_IN_NODE, REPO_IN_NODE))
        sh('docker', 'cp', str(tmp / 'standin.list'), '%s:/etc/apt/sources.list.d/gpuops-ubuntu-standin.list' % name)
        sh('docker', 'exec', name, 'apt-get', 'update', '-q', timeout=300)
        inventory = {'all': {'hosts': {'drv-ubuntu': {
            'ansible_host': name, 'ansible_connection': 'community.docker.docker',
            'ansible_python_interpreter': '/usr/bin/python3', 'gpuops_become': False,
            'nvidia_driver_verify': False, 'nvidia_driver_reboot': False}}}}
        (tmp / 'hosts.yml').write_text(yaml.safe_dump(inventory))
        # pipelining: one `docker exec` per module run instead of four (temporary directory, copy, run, clean up);
        # the suite's ansible settings (lab/ansible-tests.cfg: the controller's result polling)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
                   ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_HOST_KEY_CHECKING='0', ANSIBLE_PIPELINING='1',
                   ANSIBLE_CONFIG=ANSIBLE_TESTS_CFG)
        yield {'name': name, 'tmp': tmp, 'env': env, 'krel': krel}
    finally:
        subprocess.run([os.path.join(DOCKER_DIR, 'node.sh'), 'down', name], capture_output=True, timeout=300)


def run_role(node, **role_vars):
    play = node['tmp'] / 'play.yml'
    play.write_text(yaml.safe_dump([{'name': 'driver', 'hosts': 'drv-ubuntu', 'gather_facts': True,
                                     'gather_subset': ['min'],
                                     'roles': [{'role': 'gpuops.k8s_gpu.nvidia_driver', 'vars': role_vars}]}]))
    proc = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), '-i', str(node['tmp'] / 'hosts.yml'), str(play)],
                          env=node['env'], capture_output=True, text=True, cwd=ROOT, timeout=900)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible output is not JSON (rc=%s):\n%s\n%s' % (proc.returncode, proc.stdout[-4000:],
                                                                               proc.stderr[-3000:]))
    return proc.returncode, doc


def failures(doc):
    out = []
    for play in doc.get('plays', []):
        for task in play.get('tasks', []):
            for host, res in task.get('hosts', {}).items():
                if res.get('failed'):
                    out.append('%s: %s' % (task['task']['name'], res.get('msg')))
    return out


def task_results(doc, name):
    return [dict((k, res.get(k)) for k in ('changed', 'packages_missing', 'msg', 'stdout', 'invocation'))
            for play in doc.get('plays', []) for task in play.get('tasks', []) if task['task']['name'].endswith(name)
            for res in task.get('hosts', {}).values()]


def installed(node):
    out = dexec(node['name'], 'dpkg-query', '-W', '-f', '${Package}\t${Version}\t${db:Status-Abbrev}\n').stdout
    return dict((p, v) for p, v, s in (line.split('\t') for line in out.splitlines()) if s[1:2] == 'i')  # 'ii ' or 'hi '


def held(node):
    return set(dexec(node['name'], 'apt-mark', 'showhold').stdout.split())


def test_DRV_20_ubuntu_2404_install_verify_hold_with_standins(node):
    facts = dexec(node['name'], 'python3', '-c', 'import platform; print(open("/etc/os-release").read())').stdout
    assert 'ID=ubuntu' in facts
    # 1. the transitional 535 server packages install branch 580: the role must fail clearly, not hold "535"
    rc, doc = run_role(node, nvidia_driver_branch='535', nvidia_driver_accept_eol_branch='535',
                       nvidia_driver_kernel_module_type='proprietary')
    assert rc != 0
    msg = ' | '.join(failures(doc))
    assert 'nvidia_driver_branch is 535 but the packages installed driver 580.95.05 (branch 580)' in msg, msg
    assert not (held(node) & {'nvidia-headless-535-server', 'libnvidia-compute-535-server'})
    dexec(node['name'], 'apt-get', 'purge', '-y', '-q', 'nvidia-headless-535-server', 'nvidia-dkms-535-server',
          'nvidia-utils-535-server', 'nvidia-compute-utils-535-server', 'libnvidia-compute-535-server')
    dexec(node['name'], 'apt-get', 'autoremove', '-y', '-q')

    # 2. the default branch (580) with open modules and Canonical's signed precompiled modules (as with Secure Boot)
    rc, doc = run_role(node, nvidia_driver_kernel_module_type='open', nvidia_driver_ubuntu_precompiled='true')
    assert rc == 0, failures(doc)
    pk = installed(node)
    for p in ('nvidia-headless-no-dkms-580-server-open', 'nvidia-utils-580-server', 'nvidia-compute-utils-580-server',
              'libnvidia-compute-580-server'):
        assert pk.get(p) == DRV, (p, pk.get(p), task_results(doc, 'Install the driver packages, pinned'),
                                  task_results(doc, 'Read the driver state of the node'))
    # the running kernel's own packages (DRV-10): modules (open: no linux-objects) and, on x86_64, the signatures
    assert pk.get('linux-modules-nvidia-580-server-open-%s' % node['krel']) == '6.8.0-45.45+1', sorted(pk)
    assert pk.get('linux-signatures-nvidia-%s' % node['krel']) == '6.8.0-45.45+1', sorted(pk)
    assert 'linux-objects-nvidia-580-server-%s' % node['krel'] not in pk
    assert 'nvidia-dkms-580-server-open' not in pk and 'nvidia-dkms-580-server' not in pk
    # what is really installed at the driver's version is held (nvidia-kernel-common came as a dependency)
    assert {'nvidia-headless-no-dkms-580-server-open', 'libnvidia-compute-580-server',
            'nvidia-kernel-common-580-server'} <= held(node)
    # Ubuntu's unit runs the daemon with --no-persistence-mode: the drop-in turns persistence on
    dropin = dexec(node['name'], 'cat',
                   '/etc/systemd/system/nvidia-persistenced.service.d/gpuops-persistence-mode.conf').stdout
    assert 'ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode --user nvidia-persistenced' in dropin
    report = json.loads(dexec(node['name'], 'cat', '/var/lib/gpuops/nvidia-driver.json').stdout)
    assert report['version'] == '580.95.05'

    # 3. a second run changes nothing
    rc, doc = run_role(node, nvidia_driver_kernel_module_type='open', nvidia_driver_ubuntu_precompiled='true')
    assert rc == 0, failures(doc)
    assert doc['stats']['drv-ubuntu']['changed'] == 0, [
        t['task']['name'] for p in doc['plays'] for t in p['tasks'] if t['hosts'].get('drv-ubuntu', {}).get('changed')]


def test_DRV_25_bad_flavour_fails_before_anything_changes(node):
    before = installed(node)
    rc, doc = run_role(node, nvidia_driver_kernel_module_type='closed')
    assert rc != 0
    msg = ' | '.join(failures(doc))
    assert 'nvidia_driver_kernel_module_type' in msg and 'auto, open, proprietary' in msg, msg
    assert installed(node) == before


DRV570 = '570.195.03-0ubuntu0.24.04.1'
DRV580_OLD = '580.82.07-0ubuntu0.24.04.1'


def nvidia_installed(node):
    return dict((p, v) for p, v in installed(node).items() if 'nvidia' in p)


def test_DRV_37_branch_change_both_ways_and_a_downgrade_with_the_roles_holds(node):
    """Issue 38: a node the role converged (its driver packages held) moves 580 -> 570 -> 580, then down to an older
    580 version. Ubuntu's branches Conflict with each other's virtual names, so apt must remove the held packages of
    the old branch: before the role released its own holds first, apt refused ("Held packages were changed"), and a
    lower version of the same names needs apt's --allow-downgrades."""
    name = node['name']
    # start from a converged 580 node with dkms (the role's own holds), whatever the tests before left
    dexec(name, 'apt-mark', 'unhold', *sorted(held(node)))
    leftover = sorted(nvidia_installed(node))
    if leftover:
        dexec(name, 'apt-get', 'purge', '-y', '-q', *leftover)
    common = dict(nvidia_driver_kernel_module_type='open', nvidia_driver_ubuntu_precompiled='false')
    rc, doc = run_role(node, **common)
    assert rc == 0, failures(doc)
    assert nvidia_installed(node).get('nvidia-dkms-580-server-open') == DRV, nvidia_installed(node)
    assert 'libnvidia-compute-580-server' in held(node)

    # down to branch 570 (past its end of life, so accepted by name)
    rc, doc = run_role(node, nvidia_driver_branch='570', nvidia_driver_accept_eol_branch='570', **common)
    assert rc == 0, (failures(doc), task_results(doc, 'Install the driver packages, pinned'))
    have = nvidia_installed(node)
    assert have.get('libnvidia-compute-570-server') == DRV570 and have.get('nvidia-dkms-570-server-open') == DRV570, have
    assert not [p for p in have if '-580-' in p], have
    assert {'libnvidia-compute-570-server', 'nvidia-dkms-570-server-open'} <= held(node)
    report = json.loads(dexec(name, 'cat', '/var/lib/gpuops/nvidia-driver.json').stdout)
    assert report['version'] == '570.195.03'

    # back up to 580
    rc, doc = run_role(node, **common)
    assert rc == 0, (failures(doc), task_results(doc, 'Install the driver packages, pinned'))
    have = nvidia_installed(node)
    assert have.get('libnvidia-compute-580-server') == DRV and not [p for p in have if '-570-' in p], have
    assert {'libnvidia-compute-580-server', 'nvidia-dkms-580-server-open'} <= held(node)

    # an older version of the same branch: the same names at a lower version
    rc, doc = run_role(node, nvidia_driver_version='580.82.07', **common)
    assert rc == 0, (failures(doc), task_results(doc, 'Install the driver packages, pinned'))
    have = nvidia_installed(node)
    assert have.get('libnvidia-compute-580-server') == DRV580_OLD, have
    assert have.get('nvidia-dkms-580-server-open') == DRV580_OLD, have
    assert {'libnvidia-compute-580-server', 'nvidia-dkms-580-server-open'} <= held(node)


def test_DRV_42_removal_keeps_the_initramfs_tool_and_the_build_tools(node):
    """state=absent removes the driver's packages and leaves what the role installed before the driver and says it
    leaves (roles/nvidia_driver/tasks/absent.yml: dkms, headers, initramfs-tools): on apt, the first read passes
    initramfs-tools in package_specs (to know whether apt must run), and its installed version came back in
    ``packages``, the removal list - apt removed initramfs-tools (on a real Ubuntu node apt then also removes the
    kernel images that depend on it). Found while reviewing the prerequisites read (session 21); failed before."""
    common = dict(nvidia_driver_kernel_module_type='open', nvidia_driver_ubuntu_precompiled='false')
    rc, doc = run_role(node, **common)
    assert rc == 0, failures(doc)
    before = installed(node)
    kept = [p for p in ('initramfs-tools', 'dkms') if p in before]
    assert 'initramfs-tools' in kept, sorted(before)
    rc, doc = run_role(node, nvidia_driver_state='absent', **common)
    assert rc == 0, failures(doc)
    after = installed(node)
    assert not [p for p in nvidia_installed(node)], nvidia_installed(node)
    assert [p for p in kept if p not in after] == [], (kept, sorted(after))
    assert not held(node) & set(before), held(node)
    # a second removal changes nothing
    rc, doc = run_role(node, nvidia_driver_state='absent', **common)
    assert rc == 0, failures(doc)
    assert doc['stats']['drv-ubuntu']['changed'] == 0, [
        t['task']['name'] for p in doc['plays'] for t in p['tasks'] if t['hosts'].get('drv-ubuntu', {}).get('changed')]


CUDA_IN_NODE = '/srv/gpuops-cuda-standin'
CUDA_KEYRING = '/etc/apt/keyrings/gpuops-nvidia-cuda.asc'


def run_repositories(node, **role_vars):
    """Only the role's apt repository tasks (tasks/repositories-apt.yml), method cuda_repo."""
    play = node['tmp'] / 'repos.yml'
    play.write_text(yaml.safe_dump([{'name': 'repositories', 'hosts': 'drv-ubuntu', 'gather_facts': True,
                                     'gather_subset': ['min'],
                                     'tasks': [{'name': 'The role\'s apt repositories', 'ansible.builtin.include_role': {
                                         'name': 'gpuops.k8s_gpu.nvidia_driver', 'tasks_from': 'repositories-apt'},
                                         'vars': role_vars}]}]))
    proc = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), '-i', str(node['tmp'] / 'hosts.yml'), str(play)],
                          env=node['env'], capture_output=True, text=True, cwd=ROOT, timeout=900)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_DRV_43_cuda_repo_list_of_the_previous_release_becomes_a_deb822_source(node, tmp_path):
    """A node the previous release configured for method cuda_repo (ansible.builtin.apt_repository: the one-line
    gpuops-nvidia-cuda.list with signed-by, the key by get_url at the same keyring) gets the deb822
    gpuops-nvidia-cuda.sources from apt_signed_repo; the .list is backed up to /etc/apt/gpuops-backups/ and removed,
    apt reads the repository once, no DEPRECATION WARNING, and a second run changes nothing. The CUDA repository is
    the lab's signed stand-in repository (a copy under another path, so the other tests' source is not touched)."""
    name = node['name']
    sh('docker', 'exec', name, 'cp', '-a', REPO_IN_NODE, CUDA_IN_NODE)
    # the stand-in repository's key is binary; the role's keyring is .asc (NVIDIA's 3bf863cc.pub is armored)
    gnupg = tmp_path / 'gnupg'
    gnupg.mkdir(mode=0o700)
    sh('docker', 'cp', '%s:%s/key.gpg' % (name, REPO_IN_NODE), str(tmp_path / 'key.gpg'))
    try:
        sh('gpg', '--homedir', str(gnupg), '--batch', '--quiet', '--import', str(tmp_path / 'key.gpg'))
        armored = sh('gpg', '--homedir', str(gnupg), '--batch', '--armor', '--export').stdout
    finally:   # gpg started an agent for this home: it must not outlive the test
        subprocess.run(['gpgconf', '--homedir', str(gnupg), '--kill', 'gpg-agent'], capture_output=True, check=False)
    assert armored.startswith('-----BEGIN PGP PUBLIC KEY BLOCK-----')
    (tmp_path / 'key.asc').write_text(armored)
    sh('docker', 'cp', str(tmp_path / 'key.asc'), '%s:%s/key.asc' % (name, CUDA_IN_NODE))
    url = 'file://%s/' % CUDA_IN_NODE
    # what the previous release left: the key where get_url put it, the line apt_repository wrote
    old_line = 'deb [signed-by=%s] %s /\n' % (CUDA_KEYRING, url)
    sh('docker', 'exec', name, 'install', '-D', '-m', '0644', CUDA_IN_NODE + '/key.asc', CUDA_KEYRING)
    (tmp_path / 'old.list').write_text(old_line)
    sh('docker', 'cp', str(tmp_path / 'old.list'), '%s:/etc/apt/sources.list.d/gpuops-nvidia-cuda.list' % name)
    assert dexec(name, 'apt-get', 'update', '-q').returncode == 0
    role_vars = dict(nvidia_driver_method='cuda_repo', nvidia_driver__os_distro_sources=False,
                     nvidia_driver_cuda_repo_url=url, nvidia_driver_cuda_repo_key_url='file://%s/key.asc' % CUDA_IN_NODE)
    rc, doc, stderr = run_repositories(node, **role_vars)
    assert rc == 0, failures(doc)
    assert 'DEPRECATION' not in stderr, stderr
    [res] = [t['hosts']['drv-ubuntu'] for p in doc['plays'] for t in p['tasks']
             if t['task']['name'].endswith("Add NVIDIA's CUDA repository with its signing key as the Signed-By keyring")]
    assert res['changed'] is True and res['keyring_changed'] is False
    assert [e['path'] for e in res['superseded']] == ['/etc/apt/sources.list.d/gpuops-nvidia-cuda.list']
    backup = res['superseded'][0]['backup']
    assert backup.startswith('/etc/apt/gpuops-backups/gpuops-nvidia-cuda.list.')
    assert dexec(name, 'cat', backup).stdout == old_line
    assert dexec(name, 'test', '-e', '/etc/apt/sources.list.d/gpuops-nvidia-cuda.list').returncode == 1
    assert dexec(name, 'cat', '/etc/apt/sources.list.d/gpuops-nvidia-cuda.sources').stdout == (
        '# Managed by gpuops.k8s_gpu (nvidia_driver)\nTypes: deb\nURIs: %s\nSuites: /\nSigned-By: %s\n'
        % (url, CUDA_KEYRING))
    # the role's own apt update ran (the source changed); apt reads the repository once, and trusts it
    upd = dexec(name, 'apt-get', 'update', '-q')
    assert upd.returncode == 0 and 'configured multiple times' not in upd.stdout + upd.stderr, upd.stdout + upd.stderr
    assert CUDA_IN_NODE in dexec(name, 'apt-cache', 'policy').stdout
    rc, doc, stderr = run_repositories(node, **role_vars)
    assert rc == 0 and doc['stats']['drv-ubuntu']['changed'] == 0, doc['stats']
