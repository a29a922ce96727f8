"""playbooks/site.yml run the way AWX runs it: ansible-runner over an AWX-style private data dir.

Run: .venv/bin/pytest -q lab/tests/integration/test_awx_runner.py   (needs root for Docker; about 2-4 minutes)

What AWX would do for a launch of the "gpuops site" job template (roles/awx_config), done here with lab/awx/awx_job.py:
  * project/          the collection's playbooks, as AWX's project sync checks them out; the collection itself is built
                      with ansible-galaxy and installed into requirements_collections/ (what AWX's project sync does
                      for a project's collections/requirements.yml); other collections come from the lab's .venv,
                      which stands in for the execution environment
  * inventory/hosts   AWX's executable inventory script (JSON with _meta.hostvars), with the contract's groups:
                      gpu_nodes -> one pool group per sharing strategy, kube_control_plane, esxi_gpu_vms
  * env/extravars     the site survey's answers validated and merged as AWX does
  * env/envvars       the kubeconfig credential type's injectors rendered as AWX renders them (file injector -> a
                      private file under env/, K8S_AUTH_KUBECONFIG pointing at it) + AWX's job env
  * env/settings      job settings
Then ansible_runner.run twice; the runner artifacts (status, rc, job events, playbook_on_stats) must show run 1
successful and run 2 with changed=0 on every host.

Lab: two node containers (h3-awx-t4: Tesla T4 in a time-slicing pool, h3-awx-v100: 2 x V100 in an exclusive pool)
with the NVML simulator, and the lab's Kubernetes API emulator seeded with those nodes. Nothing here skips.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / 'lab' / 'awx'))
import awx_job  # noqa: E402  pylint: disable=wrong-import-position

from conftest import kube_emulator, emulator_get, sh  # noqa: E402  pylint: disable=wrong-import-position
import gpu_kwok_nodes  # noqa: E402  pylint: disable=wrong-import-position  (lab/tests: the recorded shapes)

VENV_BIN = ROOT / '.venv' / 'bin'
PREFIX = 'h3-awx'
# the T4 node's allocatable as a real lab node published it with the collection's time-slicing pool of 4 replicas
# (recorded shape t4x1-time-slicing, lab/node/recordings/gpu-nodes.json); the V100 node's: no V100 shape is recorded
NODES = {'t4': ('t4', 'time-slicing', gpu_kwok_nodes.agents_published('t4x1', 'time-slicing', replicas=4)['allocatable']),
         'v100': ('v100', 'exclusive', {'nvidia.com/gpu': '2'})}


def catalog():
    def unsafe(loader, node):
        return loader.construct_scalar(node)
    loader = type('L', (yaml.SafeLoader,), {})
    loader.add_constructor('!unsafe', unsafe)
    with open(ROOT / 'roles' / 'awx_config' / 'vars' / 'main.yml') as f:
        return yaml.load(f, Loader=loader)  # noqa: S506 - SafeLoader subclass


def k8s_node(name, allocatable):
    alloc = dict({'cpu': '16', 'memory': '64Gi'}, **allocatable)
    return {'apiVersion': 'v1', 'kind': 'Node',
            'metadata': {'name': name, 'labels': {'kubernetes.io/hostname': name}},
            'status': {'capacity': alloc, 'allocatable': alloc}}


def inventory():
    pools = {}
    for suffix, (inv, strategy, _) in NODES.items():
        pools['h3_pool_%s' % suffix] = {
            'hosts': {'%s-%s' % (PREFIX, suffix): {'ansible_host': '%s-%s' % (PREFIX, suffix), 'lab_nvml_inventory': inv}},
            'vars': {'gpuops_sharing_strategy': strategy}}
    pools['h3_pool_t4']['vars']['gpu_sharing_stack_time_slicing'] = {'replicas': 4}
    return {'all': {'children': {
        'gpu_nodes': {'children': pools,
                      'vars': {'ansible_connection': 'community.docker.docker',
                               'ansible_python_interpreter': '/usr/bin/python3'}},
        # no vSphere VMs and no control-plane node in this lab: those plays must find no hosts and do nothing
        'esxi_gpu_vms': {'hosts': {}},
        'kube_control_plane': {'hosts': {}}},
        'vars': {}}}


@pytest.fixture(scope='module')
def lab(tmp_path_factory):
    sh('bash', ROOT / 'lab/docker/engine.sh', 'up', timeout=300)
    names = ['%s-%s' % (PREFIX, s) for s in NODES]
    t0 = time.monotonic()
    try:
        for suffix, (inv, _, _) in NODES.items():
            name = '%s-%s' % (PREFIX, suffix)
            sh('bash', ROOT / 'lab/docker/node.sh', 'up', name, '--hostname', name)
            sh('bash', ROOT / 'lab/nvml_sim/install.sh', name, inv)
        seed = [k8s_node('%s-%s' % (PREFIX, s), alloc) for s, (_, _, alloc) in NODES.items()]
        with kube_emulator(tmp_path_factory.mktemp('seed'), PREFIX, seed) as emu:
            print('lab up in %.0fs' % (time.monotonic() - t0))
            yield {'emu': emu, 'nodes': names}
    finally:
        for n in names:
            sh('bash', ROOT / 'lab/docker/node.sh', 'down', n, check=False)


@pytest.fixture(scope='module')
def collection(tmp_path_factory):
    """The collection as AWX's project sync installs it: built tarball, installed into requirements_collections."""
    out = tmp_path_factory.mktemp('build')
    sh(VENV_BIN / 'ansible-galaxy', 'collection', 'build', '--output-path', out, ROOT, timeout=300)
    return glob.glob(str(out / '*.tar.gz'))[0]


def make_job(pdd, lab, collection, answers, template='site', job_slice=None, job_id=1):
    cat = catalog()
    jt = cat['awx_config__job_template_catalog'][template]
    extravars = awx_job.survey_extra_vars(jt['survey'], answers)
    # AWX's meta variables for every job
    extravars.update({'awx_job_id': job_id, 'awx_job_template_name': 'gpuops %s' % template,
                      'awx_job_launch_type': 'manual', 'tower_job_id': job_id})
    kube_type = cat['awx_config__kubeconfig_type_definition']
    env, files = {}, {}
    if 'kubeconfig' in jt['credentials']:   # the node template has no cluster credential
        env, cred_extra, files = awx_job.inject_custom(
            kube_type, {'kubeconfig': Path(lab['emu']['kubeconfig']).read_text()}, str(pdd))
        assert not cred_extra
    collections_dir = pdd / 'requirements_collections'
    # --force and a collections path of its own: ansible-galaxy skips a collection it finds already installed in
    # ANSIBLE_COLLECTIONS_PATH (make test points that at the working tree), which would leave the project empty
    galaxy_env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_dir))
    sh(VENV_BIN / 'ansible-galaxy', 'collection', 'install', '--offline', '--no-deps', '--force', '-p', collections_dir,
       collection, env=galaxy_env)
    assert (collections_dir / 'ansible_collections' / 'gpuops' / 'k8s_gpu' / 'MANIFEST.json').is_file(), \
        'the collection was not installed into the project\'s requirements_collections'
    # AWX's job environment: collections from the project's requirements first, then the EE's own (here: .venv's)
    env.update({'ANSIBLE_COLLECTIONS_PATHS': str(collections_dir), 'ANSIBLE_COLLECTIONS_PATH': str(collections_dir),
                'ANSIBLE_HOST_KEY_CHECKING': 'False', 'ANSIBLE_FORCE_COLOR': 'False', 'AWX_PRIVATE_DATA_DIR': str(pdd),
                'ANSIBLE_INVENTORY_UNPARSED_FAILED': 'True', 'ANSIBLE_PYTHON_INTERPRETER': '/usr/bin/python3',
                'PATH': '%s:%s' % (VENV_BIN, os.environ['PATH'])})
    awx_job.build_private_data_dir(str(pdd), str(ROOT), inventory(), extravars, env, {'job_timeout': 1800},
                                   job_slice=job_slice)
    return {'extravars': extravars, 'env': env, 'files': files, 'playbook': jt['playbook']}


def run(pdd, ident, playbook='playbooks/site.yml'):
    import ansible_runner  # the engine AWX uses
    t0 = time.monotonic()
    r = ansible_runner.run(private_data_dir=str(pdd), playbook=playbook, ident=ident, quiet=True,
                           timeout=1500)
    took = time.monotonic() - t0
    stats, failed, changed = summary(list(r.events))
    print('%s: status=%s rc=%s %.0fs stats=%s' % (ident, r.status, r.rc, took, json.dumps(
        dict((k, stats.get(k)) for k in ('ok', 'changed', 'failures', 'dark', 'skipped')))))
    return r, stats, failed, changed, took


ANSWERS = {'gpuops_node_driver': 'false', 'gpuops_node_runtime': 'false'}


@pytest.fixture(scope='module')
def sliced(lab, collection, tmp_path_factory):
    """The `node` job template launched with job_slice_count 2, as AWX runs a sliced job: two jobs at the same time,
    each with its own private data dir and the inventory of its slice (lab/awx/awx_job.py slice_script_data)."""
    cat = catalog()['awx_config__job_template_catalog']
    assert cat['node'].get('slice') is True and not any(t.get('slice') for n, t in cat.items() if n != 'node')
    jobs = {}
    for number in (1, 2):
        pdd = tmp_path_factory.mktemp('slice%d' % number)
        job = make_job(pdd, lab, collection, ANSWERS, template='node', job_slice=(number, 2), job_id=10 + number)
        jobs[number] = (pdd, job)
    # each slice job in a process of its own (ansible-runner's command line, as AWX starts one per job): no
    # threads here, because ansible-runner forks a pty for ansible-playbook, which is unsafe from a threaded process
    procs = {}
    for number, (pdd, job) in jobs.items():
        procs[number] = subprocess.Popen(
            [str(VENV_BIN / 'ansible-runner'), 'run', str(pdd), '-p', job['playbook'], '-i', 'slice%d' % number],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out = {}
    for number, (pdd, _job) in jobs.items():
        _o, err = procs[number].communicate(timeout=1500)
        hosts = set(json.loads(sh(pdd / 'inventory' / 'hosts').stdout)['_meta']['hostvars'])
        out[number] = (hosts, procs[number].returncode, err.decode(errors='replace')) + artifacts(pdd, 'slice%d' % number)
    return out


def artifacts(pdd, ident):
    """status, rc, stats, failed and changed events of a job, read from its artifacts on disk as AWX reads them."""
    art = pdd / 'artifacts' / ident
    events = sorted((json.loads(p.read_text()) for p in (art / 'job_events').glob('*.json')),
                    key=lambda e: e.get('counter', 0))
    return ((art / 'status').read_text(), (art / 'rc').read_text()) + summary(events)


def summary(events):
    """The playbook_on_stats data, the failed (host, task, msg) and the changed (host, task) of a job's events."""
    stats = [e for e in events if e.get('event') == 'playbook_on_stats'][-1]['event_data']
    failed = [(e['event_data'].get('host'), e['event_data'].get('task'), e['event_data'].get('res', {}).get('msg'))
              for e in events if e.get('event') in ('runner_on_failed', 'runner_on_unreachable')
              and not e['event_data'].get('ignore_errors')]
    changed = [(e['event_data'].get('host'), e['event_data'].get('task')) for e in events
               if e.get('event') == 'runner_on_ok' and e['event_data'].get('res', {}).get('changed')]
    return stats, failed, changed


def test_node_job_template_sliced_like_awx(lab, sliced):
    """Each slice job sees only its slice of the inventory (hosts by name, every 2nd from its offset) and runs the
    node layer on those hosts only, successfully."""
    nodes = sorted(lab['nodes'])
    for number, (hosts, exit_code, err, status, rc, stats, failed, changed) in sorted(sliced.items()):
        assert hosts == set(nodes[number - 1::2]), (number, hosts)
        assert (exit_code, status, rc, failed) == (0, 'successful', '0', []), err[-4000:]
        assert set(stats['ok']) == hosts, stats
        assert set(h for h, _t in changed) <= hosts, changed
    assert set().union(*[v[0] for v in sliced.values()]) == set(nodes)


def test_site_job_template_runs_like_awx_twice(lab, collection, tmp_path, sliced):
    pdd = tmp_path / 'pdd'
    pdd.mkdir()
    # The survey: the lab has no driver to install (containers cannot load a kernel module) and no NVIDIA apt
    # repository in this test; answering "false" exercises the survey's string booleans through the playbooks' | bool.
    job = make_job(pdd, lab, collection, ANSWERS)
    kubeconfig_file = job['env']['K8S_AUTH_KUBECONFIG']
    assert kubeconfig_file.startswith(str(pdd / 'env')) and oct(os.stat(kubeconfig_file).st_mode & 0o777) == '0o600'
    assert Path(kubeconfig_file).read_text() == Path(lab['emu']['kubeconfig']).read_text()
    hosts_script = sh(pdd / 'inventory' / 'hosts').stdout
    assert set(json.loads(hosts_script)['_meta']['hostvars']) == set(lab['nodes'])

    since = emulator_get(lab['emu'], '/_emulator/requests')['seq']
    r1, stats1, failed1, changed1, took1 = run(pdd, 'run1')
    assert (r1.status, r1.rc, failed1) == ('successful', 0, []), r1.stdout.read()[-8000:]
    # the sliced node job (fixture `sliced`, before this job) left every node where one site job leaves it: this
    # first site job changes nothing on the nodes, only the cluster (on the controller)
    assert [(h, t) for h, t in changed1 if h in lab['nodes']] == [], changed1
    assert set(stats1['ok']) >= set(lab['nodes']) | {'localhost'}
    assert not stats1.get('failures') and not stats1.get('dark')
    # the cluster layer reached the emulator through the kubeconfig credential's K8S_AUTH_KUBECONFIG
    writes = emulator_get(lab['emu'], '/_emulator/requests?since=%d&writes=1' % since)['items']
    assert writes, 'site.yml wrote nothing to the cluster: the kubeconfig credential did not reach the cluster layer'
    for suffix, (_, strategy, _) in NODES.items():
        node = emulator_get(lab['emu'], '/api/v1/nodes/%s-%s' % (PREFIX, suffix))
        assert node['metadata']['labels'].get('gpuops.io/sharing-strategy') == strategy, node['metadata']['labels']

    # run 2: same job again (AWX makes a new private data dir per job; so do we)
    pdd2 = tmp_path / 'pdd2'
    pdd2.mkdir()
    make_job(pdd2, lab, collection, ANSWERS)
    r2, stats2, failed2, changed2, took2 = run(pdd2, 'run2')
    assert (r2.status, r2.rc, failed2) == ('successful', 0, []), r2.stdout.read()[-8000:]
    assert not stats2.get('changed'), 'second run changed: %s' % changed2
    assert changed2 == []
    # artifacts as AWX stores them: status, rc, job events and stats on disk
    art = pdd2 / 'artifacts' / 'run2'
    assert (art / 'status').read_text() == 'successful' and (art / 'rc').read_text() == '0'
    assert any(json.loads(p.read_text()).get('event') == 'playbook_on_stats' for p in (art / 'job_events').glob('*.json'))
    # secrets: the kubeconfig content never shows up in the job output
    token_lines = [ln for ln in Path(lab['emu']['kubeconfig']).read_text().splitlines() if 'token' in ln]
    out = (pdd2 / 'artifacts' / 'run2' / 'stdout').read_text()
    for ln in token_lines:
        assert ln.split(':', 1)[-1].strip() not in out
    print('durations: run1 %.0fs, run2 %.0fs' % (took1, took2))
    shutil.rmtree(str(pdd / 'project'), ignore_errors=True)
