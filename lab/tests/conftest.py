"""Shared fixtures for the lab's tests (lab/tests). Nothing here is part of the collection."""
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

import adhoc_zygote

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
KUBE = os.path.join(ROOT, 'lab', 'kube')
# The ansible configuration make test hands to ansible runs without one of their own (lab/ansible-tests.cfg says why);
# lab tests that set ANSIBLE_CONFIG themselves point it here.
ANSIBLE_TESTS_CFG = os.path.join(ROOT, 'lab', 'ansible-tests.cfg')
# Upper bound for one ansible-playbook run in a lab test: a guard against a hang, never a timing. On a loaded
# 2-core machine (make test beside other work) a many-task play took over 300 s; CI's own limit is 90 minutes.
PLAY_TIMEOUT = int(os.environ.get('LAB_PLAY_TIMEOUT', '1200'))


def lab_collections_path(importable=False):
    """The collections path that holds this checkout as gpuops.k8s_gpu (lab/bin/collections-path.sh); with importable,
    also put on sys.path, so that a test imports the collection's Python as ansible_collections.gpuops.k8s_gpu."""
    out = subprocess.run(['bash', os.path.join(ROOT, 'lab/bin/collections-path.sh')], check=True,
                         capture_output=True, text=True).stdout.strip()
    if importable and out not in sys.path:
        sys.path.insert(0, out)
    return out


@pytest.fixture(scope='session')
def collections_path():
    return lab_collections_path()


def play_json(proc):
    """The document that ansible-playbook printed with the json stdout callback (proc: its CompletedProcess); fails the
    test, with the run's exit status and output, when stdout holds none."""
    try:
        return json.loads(proc.stdout[proc.stdout.index('{'):])
    except ValueError:
        pytest.fail('ansible-playbook output is not JSON rc=%s\n%s\n%s'
                    % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))


def run_module(collections_path, module, args='', env=None, check=False):
    """Run a module with `ansible localhost -c local` and return its JSON result."""
    e = dict(os.environ)
    e.update(env or {})
    e['ANSIBLE_COLLECTIONS_PATH'] = collections_path
    e['ANSIBLE_LOAD_CALLBACK_PLUGINS'] = '1'
    e['ANSIBLE_STDOUT_CALLBACK'] = 'ansible.builtin.json'
    e['ANSIBLE_LOCALHOST_WARNING'] = '0'
    e['ANSIBLE_PYTHON_INTERPRETER'] = os.path.join(VENV_BIN, 'python')
    cmd = [os.path.join(VENV_BIN, 'ansible'), 'localhost', '-c', 'local', '-m', module]
    if args:
        cmd += ['-a', args]
    if check:
        cmd.append('--check')
    proc = ansible_cli(cmd, env=e, cwd=ROOT)
    rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise AssertionError('ansible output is not JSON (rc=%s):\n%s\n%s' % (rc, stdout, stderr))
    return doc['plays'][0]['tasks'][0]['hosts']['localhost']


@contextlib.contextmanager
def kube_emulator(seed_dir, name, seed_docs, version='v1.29.4'):
    """Start the lab's Kubernetes API emulator seeded with ``seed_docs``; yield its kubeconfig, state dir and URL.

    Stops it afterwards (and fails when stopping fails); its state dir is removed unless
    KUBE_EMULATOR_KEEP_STATE is set.
    """
    seed = pathlib.Path(str(seed_dir)) / 'seed.yaml'
    seed.write_text(yaml.safe_dump_all(seed_docs))
    name = '%s-%d' % (name, os.getpid())
    out = subprocess.run([os.path.join(KUBE, 'start.sh'), '--name', name, '--version', version, '--seed', str(seed)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, 'start.sh failed: %s\n%s' % (out.stdout, out.stderr)
    kubeconfig = out.stdout.strip().splitlines()[-1]
    state = pathlib.Path(kubeconfig).parent
    port = int((state / 'port').read_text())
    yield {'name': name, 'kubeconfig': kubeconfig, 'state': state, 'url': 'http://127.0.0.1:%d' % port}
    stop = subprocess.run([os.path.join(KUBE, 'stop.sh'), '--name', name], capture_output=True, text=True, timeout=30)
    assert stop.returncode == 0, stop.stderr
    if not os.environ.get('KUBE_EMULATOR_KEEP_STATE'):
        shutil.rmtree(str(state), ignore_errors=True)


def emulator_get(emu, path):
    """GET a path of the emulator (e.g. /_emulator/requests?since=N) and decode its JSON."""
    with urllib.request.urlopen(emu['url'] + path, timeout=10) as r:
        return json.loads(r.read())


def sh(*cmd, check=True, timeout=900, **kw):
    """Run a command (arguments may be paths); fail the test with its output when it fails and ``check`` is set."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError('command failed (rc=%s): %s\n--- stdout\n%s\n--- stderr\n%s'
                             % (proc.returncode, ' '.join(map(str, cmd)), proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc


def run_role_on_localhost(collections_path, tmp_path, role, variables, args=()):
    """Apply a role of the collection to localhost (local connection, no facts) with ``variables`` as extra vars,
    through ansible-playbook and the json callback. Returns (CompletedProcess, parsed json document)."""
    (tmp_path / 'vars.json').write_text(json.dumps(dict(variables, ansible_python_interpreter=os.path.join(
        VENV_BIN, 'python'))))
    play = tmp_path / 'play.yml'
    play.write_text(yaml.safe_dump([{'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
                                     'roles': ['gpuops.k8s_gpu.%s' % role]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
               ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0')
    return run_playbook('localhost,', play, env, args=['-e', '@%s' % (tmp_path / 'vars.json')] + list(args))


# ---------------------------------------------------------------------------------------------- lab node containers
DOCKER_DIR = os.path.join(ROOT, 'lab', 'docker')
# the venv's NVML bindings, copied into node containers that run the NVML simulator
PYNVML = os.path.join(os.path.dirname(os.path.dirname(yaml.__file__)), 'pynvml.py')
# where lab/nvml_sim keeps its state in a node container
NVML_SIM_STATE = '/var/lib/nvml-sim/state.json'


def dexec(name, *cmd, check=True):
    """Run a command in a lab node container (docker exec); see sh for ``check``."""
    return sh('docker', 'exec', name, *cmd, check=check)


@contextlib.contextmanager
def lab_node(name, hostname, network=None, nvml_profile=None):
    """A lab node container (lab/docker/node.sh: Debian 12 with systemd as PID 1, a stand-in for a GPU machine) on
    the lab's docker engine, named ``name``. With ``nvml_profile`` (a profile of lab/nvml_sim/install.sh, e.g.
    'h100-mig') the NVML simulator stands in for the driver and the venv's pynvml is copied in. Yields the name; the
    container is removed afterwards, whatever happened."""
    sh(os.path.join(DOCKER_DIR, 'engine.sh'), 'up', timeout=300)
    sh(os.path.join(DOCKER_DIR, 'node-image.sh'), timeout=1200)
    try:
        sh(os.path.join(DOCKER_DIR, 'node.sh'), 'up', name, '--hostname', hostname,
           *(['--network', network] if network else []))
        if nvml_profile:
            sh(os.path.join(ROOT, 'lab', 'nvml_sim', 'install.sh'), name, nvml_profile)
            sh('docker', 'cp', PYNVML, '%s:/usr/lib/python3/dist-packages/pynvml.py' % name)
        yield name
    finally:
        sh(os.path.join(DOCKER_DIR, 'node.sh'), 'down', name, check=False)


def nvml_sim_state(name):
    """The NVML simulator's state (its GPUs, their MIG mode and instances) in node container ``name``."""
    return json.loads(dexec(name, 'cat', NVML_SIM_STATE).stdout)


def ansible_env(collections_path, **extra):
    """The environment of ansible-playbook against lab node containers: the collection, the json callback,
    pipelining, the venv's tools first on PATH; ``extra`` variables on top."""
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
                ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_PIPELINING='1',
                PATH='%s:%s' % (VENV_BIN, os.environ.get('PATH', '')), **extra)


def ansible_cli(cmd, env=None, cwd=None, timeout=None):
    """subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True) for a command line of
    the venv's `ansible-playbook` or `ansible`: forked from a zygote that imported ansible-core with the run's
    import-time inputs (lab/tests/adhoc_zygote.py), or run as a program with GPUOPS_LAB_ADHOC_ZYGOTE=off. A
    CompletedProcess either way; subprocess.TimeoutExpired past ``timeout``."""
    cmd = [str(c) for c in cmd]
    program = cmd[0]
    if adhoc_zygote.enabled() and os.path.dirname(program) == VENV_BIN and \
            os.path.basename(program) in ('ansible', 'ansible-playbook'):
        e = dict(os.environ) if env is None else dict(env)
        rc, stdout, stderr = adhoc_zygote.run(program, cmd[1:], e, os.path.abspath(cwd or os.getcwd()),
                                              timeout=timeout)
        proc = subprocess.CompletedProcess(cmd, rc, stdout, stderr)
    else:
        proc = subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True)
    return proc


def run_playbook(inventory, play, env, timeout=PLAY_TIMEOUT, args=()):
    """ansible-playbook -i ``inventory`` ``play`` (paths) ``args`` from the repository root; returns (CompletedProcess,
    the json callback's document). Output that is not JSON fails the test, showing it."""
    proc = ansible_cli([os.path.join(VENV_BIN, 'ansible-playbook'), '-i', str(inventory), str(play)] + list(args),
                       env=env, cwd=ROOT, timeout=timeout)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook output is not JSON (rc=%s):\n%s\n%s'
                             % (proc.returncode, proc.stdout[-6000:], proc.stderr[-4000:]))
    return proc, doc


def failed_tasks(doc):
    """'host | task: msg' of every failed (and not ignored) or unreachable task result of a json callback document."""
    return ['%s | %s: %s' % (h, t['task']['name'], r.get('msg', '')) for p in doc['plays'] for t in p['tasks']
            for h, r in t['hosts'].items()
            if (r.get('failed') and not r.get('ignore_errors')) or r.get('unreachable')]


# ---------------------------------------------------------------------------------------------- parallel runs
# `make test` runs this directory with pytest-xdist (`-n N --dist loadfile --no-loadscope-reorder`, see
# lab/bin/run-tests.py). The rules that keep that correct:
#  * every test file is one unit of work (its tests run in one worker, in file order, and its module-scoped
#    fixtures - node containers, emulators, simulators - start once). `--dist loadgroup` with xdist_group marks
#    would let independent files be split test by test, but with pytest 9.2 and pytest-xdist 3.8 the group never
#    reaches the node ids (xdist writes Item._nodeid, pytest 9.2 reads Item._id), so every test became its own unit
#    and ordered files (test_gpu_node_labels, test_mig_change) were split across workers and failed;
#  * the files are handed out heaviest first (WEIGHT, seconds measured on this 2-core machine) so that the
#    long docker files do not start last; files not listed come after them, in collection order;
#  * names of containers/emulators/simulators carry the pid or a random suffix, state lives in tmp_path or
#    lab/.state/<kind>/<name>, and the shared builds (nvml_sim/build.sh, vcsim/build.sh, nvidia_real/fetch.sh,
#    docker/node-image.sh, docker/engine.sh up) take a file lock, so workers never step on each other.
# Without xdist none of this changes anything: the order within a file and the fixtures are the same.
# lab pytest -n 4 on the loaded 2-core machine, 2026-11-24 (seconds of the file's tests, setup included; only the order
# matters, the step runs -n 2 now)
WEIGHT = {
    # the upgrade files (one 780 s file before a split into three; the rolls that stop share one lab again since
    # 2026-11-24: 720-785 s with -n 2, against 419-428 s for test_upgrade_driver.py; since 2026-11-29 the nodes go
    # back to the old driver from a snapshot, not through the role: alone at load 2, 287 s and 158 s, against 581 s
    # and 214 s before at load 3-5 - scaled to the old figures; one file and one lab again since session 21: the sum)
    'integration/test_upgrade_driver.py': 710,
    'integration/test_gpu_sharing_stack.py': 379,
    'integration/test_esxi_gpu_passthrough.py': 273,
    'integration/test_awx_runner.py': 215, 'integration/test_uninstall.py': 166,
    'integration/test_gpu_stack_nvidia_lab.py': 144, 'integration/test_kube_scheduler_config.py': 142,
    'integration/test_gpu_sharing_sim.py': 104,
    'simulators/test_vcsim.py': 82, 'integration/test_gpu_node_labels.py': 50,
    'integration/test_gpu_info_sim.py': 60, 'simulators/test_kube_emulator.py': 52,
    'integration/test_gpu_share_report.py': 22, 'integration/test_mig_persistence.py': 48,
    'integration/test_nvidia_container_runtime_cdi.py': 75, 'integration/test_mig_change.py': 120,
    # 2026-11-29 (session 20): the stand-in units' test and NVIDIA's own units with the real nvidia-ctk (NCT-26), 69 s
    'integration/test_nvidia_container_runtime_cdi_refresh.py': 70,
    # 2026-11-29 (session 19, docs/lab.md "Session 19"): node.yml five times instead of ten, one syntax-check and one
    # --list-tags run (about -38 % of 240); the Ubuntu stand-in with pipelining (397 s wall against 794 back to back)
    'integration/test_playbooks.py': 150, 'integration/test_nvidia_driver_ubuntu_standin.py': 110,
    # the real control plane's files (2026-11-26, -p no:xdist, the machine loaded; the cluster's start counted once)
    'integration/test_gpu_sharing_stack_real.py': 240, 'integration/test_kube_scheduler_real.py': 30,
    'simulators/test_kube_real.py': 30, 'integration/test_gpu_node_drain_real.py': 27,
    'integration/test_dra_real.py': 40,
    # strategy dra (2026-11-27, -p no:xdist, the machine loaded): the role's plays, and helm on the DRA driver's chart
    'integration/test_gpu_sharing_stack_dra_real.py': 105, 'oracles/test_dra_driver_chart.py': 25,
    # four cluster.yml runs on 10 and 30 kwok nodes (2026-11-27: 35 CPU-s, 167 s wall on a loaded machine)
    'integration/test_cluster_scale_real.py': 90,
    # 2026-11-27, -p no:xdist, load average 20 on the 2-core machine: 206 s wall, 34 CPU-s (sleeps: Retry-After,
    # outages of 5 s)
    'integration/test_faults_real.py': 150,
    # new on the real control plane, 2026-11-27 (-p no:xdist, the machine shared)
    'integration/test_hami_webhook_real.py': 25,
    # the doctor playbook's dra check (2026-11-27, -p no:xdist, the machine loaded; three local hosts)
    'integration/test_doctor_dra_real.py': 20,
    # issue #37 (2026-11-29, -p no:xdist, the machine shared): a private 1.33 control plane (34 s with its start), the
    # operator's RuntimeClass wait on the shared cluster
    'integration/test_dra_kube133_real.py': 35, 'integration/test_gpu_operator_runtime_class_real.py': 40,
    # issue #38 (2026-11-29, -p no:xdist, the machine shared): nvidia-ctk over the whole output and the role's CDI spec
    # with the real nvidia-ctk (two role runs)
    'oracles/test_nvidia_ctk.py': 45, 'oracles/test_real_gpu_h200.py': 8,
    # the lifecycle sequence on a private 1.37 control plane (121 s with sanity running beside it)
    'integration/test_lifecycle_real.py': 90,
    # the lifecycle suite in process on a private 1.37 control plane (2026-11-29, -p no:xdist: 50 s at load 4-7,
    # 82-176 s at load 10-15; with dra pools and the ready step 236 s at load 15, 27 CPU-s; with the validation pods
    # checked and the per-node switch of migrate_to_dra: 230 s at load 11-14, 42.5 CPU-s)
    'integration/test_lifecycle_suite_real.py': 150,
    # the scan for GPU nodes painted by hand in lab tests (issue #36, 2026-11-29: 1 CPU-s, 5-14 s wall shared)
    'tooling/test_no_painted_nodes.py': 8,
    'tooling/test_role_pass_includes.py': 1,
    # real nodes (lab/node: kubelet, containerd, runc), 2026-11-29, -p no:xdist, the machine shared
    'simulators/test_node_real.py': 24, 'integration/test_node_device_plugin_real.py': 60,
    'integration/test_node_dra_real.py': 40, 'integration/test_node_runtime_real.py': 62,
    # the collection's DaemonSet on a real node, the lab registry, the kwok nodes' recording (2026-11-29)
    'integration/test_node_daemonset_real.py': 130,
    # a MIG device through NVIDIA's runtime on a real node: the CDI spec's MIG devices, a pod gets its MIG device's
    # nodes (issue #36, the demo's lab-a100; 2026-11-30, -p no:xdist, the machine shared)
    'integration/test_node_mig_cdi_real.py': 60,
    # the DRA driver's chart on a real node: helm, the lab's DRA image through the mirror, the kubelet-plugin pod, a
    # claim (issue #36; 2026-11-30, -p no:xdist, the machine shared: 47-51 s wall, 5-7 CPU-s)
    'integration/test_node_dra_chart_real.py': 47,
    # the collection's exclusive and mps pools on a real node (issue #36, 2026-11-29, -p no:xdist, the machine shared)
    'integration/test_node_strategies_real.py': 90,
    # issue #40: DRA-backed extended resources on a real node, the migration playbook (six runs) on kwok nodes; issue
    # #41: the remediation loop on the real 1.37 and a private 1.34 control plane (2026-11-29, -p no:xdist, the machine
    # shared)
    'integration/test_dra_extended_real.py': 80, 'integration/test_dra_migrate_real.py': 210,
    'integration/test_remediation_real.py': 130, 'simulators/test_nvml_sim_reset.py': 5,
    # issue #41 follow-up: device-plugin holders from the kubelet's checkpoint on a real node, the plugin's Xid marking
    # (2026-11-29, -p no:xdist, the machine shared: 110 s wall with the node's start, 53 CPU-s); with the restart
    # after the repair and the validation pod (REM-16/17) and the role end to end: 216 s wall, 159 CPU-s
    # session 20 (2026-11-29, docs/lab.md): the NVML simulator's event wait sleeps its timeout, the plugin no longer
    # spins: 146 -> 70 CPU-s; wall at load 15-19 unchanged (387 / 396 s: waits for pods and plugins), so the weight stays
    'integration/test_remediation_device_plugin_real.py': 215,
    # #41: NVIDIA's DRA plugin's Xid taints and the DRA validation pod on a real node (2026-11-29, -p no:xdist: 50 s
    # wall, 29 CPU-s)
    'integration/test_remediation_dra_xid_real.py': 50,
    # issue #40 on a real node: the migration playbook, two runs, the kubelet's 30 s slice wiping delay (2026-11-29)
    # (session 20: 67 -> 37 CPU-s, the device plugin's spin gone; 209 / 231 s wall at load 15-19)
    'integration/test_dra_migrate_node_real.py': 140,
    # issue #40 across two real nodes: two real nodes up, four playbook runs (one in check mode), the kubelet's 30 s
    # slice wiping delay on the way back; alone, four runs: 110 s wall at load 4-5 (40 CPU-s of its children), 282 s
    # at load 12 (59 CPU-s)
    'integration/test_dra_migrate_pool_real.py': 150,
    # issue #40 claim templates with firstAvailable: the API server and the real scheduler on a kwok node (22 s alone)
    'integration/test_dra_first_available_real.py': 25,
    # two DeviceClasses mapping one extended resource name: the real scheduler on a kwok node (33 s alone), the role's
    # refusal on a private 1.37 plane (58 s alone; 2026-11-30, -p no:xdist, load 3-4)
    'integration/test_dra_extended_clash_real.py': 95,
}


def _file_of(item):
    return os.path.relpath(str(item.fspath), os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    if not (getattr(config.option, 'numprocesses', None) or hasattr(config, 'workerinput')):
        return
    order = {name: i for i, name in enumerate(sorted(WEIGHT, key=lambda n: -WEIGHT[n]))}
    items.sort(key=lambda it: order.get(_file_of(it), len(order)))  # stable: file order is kept


# ---------------------------------------------------------------------------------------------- CPU per test file
# The lab step is CPU-bound on the 2-core machine, so its cost is CPU seconds, not wall seconds. Each test records the
# CPU its worker process and the children it waited for (ansible-playbook, local modules, docker CLI, apt-get on the
# host) used from its setup to its teardown, as the junit property cpu_s; the main process sums them per file into
# build/test-results/<junit name>-cpu.json (lab-cpu.json for the lab step, lab-checks-lane-cpu.json and
# lab-molecule-lane-cpu.json for the files run-tests.py runs in the other lanes) and prints the heaviest files. Not counted: containers' processes, dockerd and
# daemons a test starts without waiting for (emulators, simulators).
def _cpu_now():
    import resource
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # with the ad-hoc runs the zygotes forked (run_module): children of a zygote, not of this process
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + adhoc_zygote.CPU_S[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == 'teardown' and hasattr(item, '_lab_cpu_before'):
        item.user_properties.append(('cpu_s', round(_cpu_now() - item._lab_cpu_before, 2)))
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item._lab_cpu_before = _cpu_now()


_CPU_BY_FILE = {}


def pytest_runtest_logreport(report):
    if report.when == 'teardown':
        for name, value in report.user_properties:
            if name == 'cpu_s':
                path = report.nodeid.split('::', 1)[0]
                _CPU_BY_FILE[path] = _CPU_BY_FILE.get(path, 0.0) + float(value)


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, 'workerinput') or not _CPU_BY_FILE:
        return
    by_file = dict(sorted(_CPU_BY_FILE.items(), key=lambda kv: -kv[1]))
    total = round(sum(by_file.values()), 1)
    junit = getattr(config.option, 'xmlpath', None) or 'lab.xml'
    out = os.path.join(ROOT, 'build', 'test-results', os.path.basename(junit).rsplit('.', 1)[0] + '-cpu.json')
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, 'w') as f:
        json.dump({'cpu_s_by_file': by_file, 'total_cpu_s': total}, f, indent=1)
    terminalreporter.write_line('lab CPU seconds per file (worker + waited-for children; %.0f s in all; %s):'
                                % (total, os.path.relpath(out, ROOT)))
    for path, cpu in list(by_file.items())[:12]:
        terminalreporter.write_line('  %7.1f  %s' % (cpu, path))


# ---------------------------------------------------------------------------------------------- real control plane
# lab/kube/real.py: upstream's etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1.
# One cluster is shared by every test that asks for it: in `make test` run-tests.py names its state directory
# (GPUOPS_KUBE_REAL_STATE) and stops it at the end; the first xdist worker that needs it starts it under a file lock.
# Without that variable (pytest run by hand) each worker starts its own and stops it when its session ends. Tests
# keep apart by namespace, by node and object names of their own, and by client identity (KubeReal.user): the audit
# log's events carry the user, so a test counts its own writes only.
KUBE_REAL_VERSION = os.environ.get('GPUOPS_KUBE_VERSION', '1.37')
AUDIT_MARK = 'gpuops-audit-mark'
AUDIT_READS = 'gpuops:audit-reads'  # lab/kube/audit-policy.yaml logs every request of this group, reads included
WRITE_VERBS = ('create', 'update', 'patch', 'delete', 'deletecollection')


@contextlib.contextmanager
def private_kube(state, version=None):
    """A real control plane of the caller's own (lab/kube/real.py up, no GPU nodes), stopped on exit; yields KubeReal.
    version: the minor (default GPUOPS_KUBE_VERSION, else 1.37)."""
    real = os.path.join(KUBE, 'real.py')
    sh(os.path.join(VENV_BIN, 'python'), real, 'up', '--state', str(state), '--owner-pid', str(os.getpid()),
       '--no-gpu-nodes', '--version', version or os.environ.get('GPUOPS_KUBE_VERSION', '1.37'), timeout=3600)
    try:
        yield KubeReal(state)
    finally:
        sh(os.path.join(VENV_BIN, 'python'), real, 'down', '--state', str(state), timeout=60)


class KubeReal(object):
    """A running lab/kube/real.py control plane: its state directory, admin kubeconfig and the audit log."""

    def __init__(self, state):
        self.state = str(state)
        self.kubeconfig = os.path.join(self.state, 'kubeconfig')
        with open(os.path.join(self.state, 'ready')) as f:
            ready = json.load(f)
        self.server = ready['server']
        self.version = ready['version']
        self.audit_log = os.path.join(self.state, 'audit.log')
        self.ca = os.path.join(self.state, 'pki', 'ca.crt')

    def user(self, name, groups=('system:masters',), reads=False):
        """Kubeconfig of a client-certificate user ``name`` (signed by the cluster's CA), made once. With ``reads``
        the user is also in group gpuops:audit-reads, whose reads the audit log records too (see ``requests``)."""
        if reads:
            groups = tuple(groups) + (AUDIT_READS,)
        safe = ''.join(c if c.isalnum() or c in '-_.' else '_' for c in name)
        path = os.path.join(self.state, 'users', safe + '.kubeconfig')
        if not os.path.exists(path):
            cmd = [os.path.join(VENV_BIN, 'python'), os.path.join(KUBE, 'real.py'), 'user', '--state', self.state,
                   name] + ['--group=%s' % g for g in groups]
            path = sh(*cmd, timeout=60).stdout.strip().splitlines()[-1]
        return path

    def api(self, kubeconfig=None):
        """A kubernetes.client.ApiClient for the admin (or ``kubeconfig``)."""
        from kubernetes import client, config
        conf = client.Configuration()
        config.load_kube_config(config_file=kubeconfig or self.kubeconfig, client_configuration=conf)
        return client.ApiClient(configuration=conf)

    def mark(self, kubeconfig=None):
        """Send a marker request (a GET the audit policy logs) and wait until the audit log has it; return the log's
        size then. Every request that completed before this call is in the log before that offset."""
        import uuid
        from kubernetes import client
        ua = 'gpuops-audit-mark/%s' % uuid.uuid4().hex
        api = self.api(kubeconfig)
        api.user_agent = ua
        try:
            client.CoreV1Api(api).read_namespaced_config_map(AUDIT_MARK, 'default')
        except client.ApiException as exc:
            assert exc.status == 404, exc
        end = time.time() + 30
        while time.time() < end:
            with open(self.audit_log, 'rb') as f:
                data = f.read()
            at = data.rfind(ua.encode())
            if at >= 0:
                return data.index(b'\n', at) + 1
            time.sleep(0.05)
        raise AssertionError('audit marker %s never reached %s' % (ua, self.audit_log))

    def events(self, start, end=None, user=None):
        """Audit events between two offsets (marks), optionally of one user only."""
        with open(self.audit_log, 'rb') as f:
            f.seek(start)
            data = f.read() if end is None else f.read(end - start)
        out = []
        for line in data.splitlines():
            ev = json.loads(line)
            if user is None or ev.get('user', {}).get('username') == user:
                out.append(ev)
        return out

    def writes(self, start, end=None, user=None):
        """The write requests (create/update/patch/delete, not dryRun) between two marks: what 'a re-run makes 0
        writes' counts. Each as (verb, requestURI, response code)."""
        return [(e['verb'], e['requestURI'], e.get('responseStatus', {}).get('code'))
                for e in self.events(start, end, user)
                if e['verb'] in WRITE_VERBS and 'dryRun=All' not in e['requestURI']]


    def requests(self, start, end=None, user=None):
        """Every request between two marks (reads only for users made with ``reads=True``), the marker GETs left out:
        each as (verb, requestURI, response code)."""
        return [(e['verb'], e['requestURI'], e.get('responseStatus', {}).get('code'))
                for e in self.events(start, end, user)
                if not e.get('userAgent', '').startswith('gpuops-audit-mark/')]


def kube_real_up(state, owner_pid, version=KUBE_REAL_VERSION):
    cmd = [os.path.join(VENV_BIN, 'python'), os.path.join(KUBE, 'real.py'), 'up', '--state', str(state),
           '--version', version, '--owner-pid', str(owner_pid)]
    sh(*cmd, timeout=3600)  # a cold build of the control plane takes minutes (docs/lab.md)


@pytest.fixture(scope='session')
def kube_real(tmp_path_factory):
    """The shared real control plane (KubeReal). Never skipped: a control plane that cannot be built or started fails
    every test that uses it, with real.py's message."""
    import fcntl
    shared = os.environ.get('GPUOPS_KUBE_REAL_STATE')
    if shared:
        os.makedirs(os.path.dirname(os.path.abspath(shared)), exist_ok=True)
        with open(shared.rstrip('/') + '.lock', 'w') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ready = os.path.join(shared, 'ready')
            if not (os.path.exists(ready) and os.path.exists(os.path.join(shared, 'supervisor.pid'))):
                kube_real_up(shared, int(os.environ.get('GPUOPS_KUBE_REAL_OWNER') or os.getpid()))
        yield KubeReal(shared)
        return
    state = tmp_path_factory.mktemp('kube-real')
    kube_real_up(state, os.getpid())
    try:
        yield KubeReal(state)
    finally:
        sh(os.path.join(VENV_BIN, 'python'), os.path.join(KUBE, 'real.py'), 'down', '--state', str(state), timeout=60)


def new_namespace(core, name, timeout=60):
    """Create namespace ``name`` and wait for its ``default`` ServiceAccount: the real ServiceAccount controller makes
    it asynchronously and admission refuses pods until it exists (a test creating a pod at once races it)."""
    core.create_namespace({'metadata': {'name': name}})
    wait_until('ServiceAccount %s/default' % name, lambda: core.list_namespaced_service_account(
        name, field_selector='metadata.name=default').items, timeout)


def wait_until(what, fn, timeout=60):
    """Poll ``fn`` every 0.3 s until it returns something true and return that; fail naming ``what`` and the last
    answer after ``timeout`` seconds (the real control plane's controllers and kwok act asynchronously)."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError('timed out after %d s: %s (last: %r)' % (timeout, what, last))


# ---------------------------------------------------------------------------------------------- nvidia.com/gpu on DRA
# The files whose pods ask plain nvidia.com/gpu of NVIDIA's DRA driver (DRAExtendedResource) share ONE DeviceClass that
# maps it, made by the first of them and never deleted while the shared plane runs. Why not one class per file: in
# kube-scheduler 1.37.2 (k8s.io/dynamic-resource-allocation v0.37.2 deviceclass/extendedresourcecache) deleting ANY class
# whose extendedResourceName is nvidia.com/gpu removes the scheduler's mapping of that name, whichever class the cache
# had picked, and the other classes that still map it are not taken back (kubernetes/kubernetes issue #141103, fixed on
# master by PR #141110 after the 1.37 cycle). A file's teardown deleting its own class left another file's pods
# Pending ("Insufficient nvidia.com/gpu": CI, test_DRAX_09 timed out). An Update of the class that changes its
# extendedResourceName puts the mapping back and requeues the pods asking that name (noderesources Fit's
# isSchedulableAfterDeviceClassEvent); an annotation-only Update puts it back for pods made afterwards but leaves the
# Pending ones Pending (test_dra_extended_clash_real.py, DRAX-14, shows each on the real scheduler). test_dra_real.py's
# chart release maps nvidia.com/gpu too (gpu.nvidia.com) and is uninstalled by that file: it calls this afterwards.
# The collection refuses a dra pool while a class it does not own maps the chart's name (DRAX-15): the files that run
# the role with a dra pool on this plane accept LAB_GPU_CLASS (gpu_sharing_stack_dra.accept_extended_resource_classes).
LAB_GPU_CLASS = 'gpu.shared.lab.gpuops.io'
LAB_GPU_CLASS_SELECTOR = ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")
_REMAP_NAME = 'lab.gpuops.io/remap'


def gpu_extended_mapping(co, create=True):
    """Make sure the scheduler maps nvidia.com/gpu to the lab's shared DeviceClass (``co``: a CustomObjectsApi of the
    shared plane): create it (``create``), or, where it exists, move its extendedResourceName away and back (two
    Updates), which restores a mapping a deletion of another class dropped. Returns the class name, or None where it
    does not exist and ``create`` is false."""
    from kubernetes.client import ApiException
    group, version = 'resource.k8s.io', 'v1'
    if create:
        try:
            co.create_cluster_custom_object(group, version, 'deviceclasses', {
                'apiVersion': '%s/%s' % (group, version), 'kind': 'DeviceClass', 'metadata': {'name': LAB_GPU_CLASS},
                'spec': {'selectors': [{'cel': {'expression': LAB_GPU_CLASS_SELECTOR}}],
                         'extendedResourceName': 'nvidia.com/gpu'}})
            return LAB_GPU_CLASS
        except ApiException as exc:
            if exc.status != 409:
                raise
    for name in (_REMAP_NAME, 'nvidia.com/gpu'):
        try:
            co.patch_cluster_custom_object(group, version, 'deviceclasses', LAB_GPU_CLASS,
                                           {'spec': {'extendedResourceName': name}})
        except ApiException as exc:
            if exc.status == 404 and not create:
                return None
            raise
    return LAB_GPU_CLASS


# ---------------------------------------------------------------------------------------------- real nodes
# lab/node/node.py: upstream's kubelet against containerd 2.3.4 and runc, in namespaces of its own, registered with the
# real control plane (lab/node/README.md). Each file starts the nodes it needs, named with its pid and tainted with a
# key only its pods tolerate, and stops them (no process, mount or cgroup left: asserted) and deletes the Node.
NODE_PY = os.path.join(ROOT, 'lab', 'node', 'node.py')


@contextlib.contextmanager
def real_node(kube, state, name, taint_key, labels=(), nvidia_devices=0, timeout=900, extra=()):
    """Start a real node (kube: KubeReal; state: its directory); yield the state directory; stop it afterwards.
    extra: more arguments of `node.py up` (e.g. --device-plugin-image NAME --nvml-inventory FILE)."""
    from kubernetes import client
    t0 = time.time()
    cmd = [os.path.join(VENV_BIN, 'python'), NODE_PY, 'up', '--kube-state', kube.state, '--state', str(state),
           '--name', name, '--version', kube.version, '--owner-pid', str(os.getpid()),
           '--taint', '%s=:NoSchedule' % taint_key, '--nvidia-devices', str(nvidia_devices)] + [
        '--label=%s' % label for label in labels] + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        sh(os.path.join(VENV_BIN, 'python'), NODE_PY, 'down', '--state', str(state), check=False, timeout=120)
        raise AssertionError('node.py up failed:\n%s\n%s' % (proc.stdout[-3000:], proc.stderr[-6000:]))
    sys.stderr.write('[real_node] %s up in %.1f s\n' % (name, time.time() - t0))
    core = client.CoreV1Api(kube.api())
    try:
        yield str(state)
    finally:
        down = sh(os.path.join(VENV_BIN, 'python'), NODE_PY, 'down', '--state', str(state), check=False, timeout=120)
        try:
            core.delete_node(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        assert down.returncode == 0, 'node.py down: %s%s' % (down.stdout, down.stderr)


def pytest_unconfigure(config):
    adhoc_zygote.stop_all()   # run_module's zygotes (each also ends by itself once this process is gone)
