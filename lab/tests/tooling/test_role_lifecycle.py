"""Roles as lifecycle units: <role>_state on every role that changes something, one private-variable convention,
role-qualified handler notifications (lab/bin/check-role-conventions.py), README per role generated from
argument_specs (lab/bin/gen-role-readmes.py), and uninstall.yml calling roles instead of re-implementing them.

Run: .venv/bin/pytest -q lab/tests/tooling/test_role_lifecycle.py   (seconds; no simulator)
"""
import os
import shutil
import subprocess
import sys

import yaml

from conftest import ROOT

CHECK = os.path.join(ROOT, 'lab', 'bin', 'check-role-conventions.py')
READMES = os.path.join(ROOT, 'lab', 'bin', 'gen-role-readmes.py')


def run(*args):
    return subprocess.run([sys.executable] + list(args), capture_output=True, text=True, cwd=ROOT, timeout=120)


def role_tree(tmp_path, tasks, handlers=None, defaults=None, options=None, varsmain=None):
    """A collection root with one role 'demo' (and nothing else)."""
    role = tmp_path / 'roles' / 'demo'
    for d in ('tasks', 'meta', 'defaults', 'handlers', 'vars'):
        (role / d).mkdir(parents=True, exist_ok=True)
    (role / 'tasks' / 'main.yml').write_text(yaml.safe_dump(tasks, sort_keys=False))
    if handlers is not None:
        (role / 'handlers' / 'main.yml').write_text(yaml.safe_dump(handlers, sort_keys=False))
    if varsmain is not None:
        (role / 'vars' / 'main.yml').write_text(yaml.safe_dump(varsmain, sort_keys=False))
    (role / 'defaults' / 'main.yml').write_text(yaml.safe_dump(
        defaults if defaults is not None else {'demo_state': 'present'}))
    opts = options if options is not None else {
        'demo_state': {'description': 'x', 'type': 'str', 'choices': ['present', 'absent'], 'default': 'present'}}
    (role / 'meta' / 'argument_specs.yml').write_text(yaml.safe_dump(
        {'argument_specs': {'main': {'short_description': 'Demo', 'options': opts}}}, sort_keys=False))
    return role


# ------------------------------------------------------------------------------------------------ the collection

def test_every_role_follows_the_conventions():
    proc = run(CHECK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'role-conventions: 11 roles, 0 problems' in proc.stdout


def test_role_readmes_are_current():
    proc = run(READMES, '--check')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for role in os.listdir(os.path.join(ROOT, 'roles')):
        text = open(os.path.join(ROOT, 'roles', role, 'README.md')).read()
        assert text.startswith('# gpuops.k8s_gpu.%s\n' % role)
        assert '`%s_state`' % role in text, role


def test_uninstall_calls_the_roles_with_state_absent():
    plays = yaml.safe_load(open(os.path.join(ROOT, 'playbooks', 'uninstall.yml')))
    included = []
    modules = []
    for play in plays:
        for task in play.get('tasks') or []:
            if 'ansible.builtin.include_role' in task:
                role = task['ansible.builtin.include_role']['name'].split('.')[-1]
                included.append((role, (task.get('vars') or {}).get('%s_state' % role, 'present')))
            modules.extend(k for k in task if k.startswith('gpuops.k8s_gpu.'))
            for sub in task.get('block') or []:
                modules.extend(k for k in sub if k.startswith('gpuops.k8s_gpu.'))
    # the read-only probe first (role gpu_probe installing nothing, writing no report), then every removal
    assert included == [('gpu_probe', 'present'), ('gpu_sharing_stack', 'absent'), ('gpu_metrics', 'absent'),
                        ('gpu_node_labels', 'absent'),
                        ('kube_scheduler_extender', 'absent'), ('gpu_node_sharing', 'absent'), ('gpu_probe', 'absent'),
                        ('nvidia_container_runtime', 'absent')]
    probe = plays[0]['tasks'][0]['vars']
    assert probe['gpu_probe_bindings_method'] == 'none' and probe['gpu_probe_report_path'] == ''
    # no module call left: nothing is re-implemented in the playbook
    assert modules == []
    assert all('handlers' not in play for play in plays)


def test_awx_config_absent_removes_in_reverse_order_what_present_creates():
    tasks = yaml.safe_load(open(os.path.join(ROOT, 'roles', 'awx_config', 'tasks', 'main.yml')))
    blocks = [t for t in tasks if 'block' in t][0]['block']
    present = [t for t in blocks if "awx_config_state == 'present'" in t['when']][0]['block']
    absent = [t for t in blocks if "awx_config_state == 'absent'" in t['when']][0]['block']

    def modules(ts, state):
        out = []
        for t in ts:
            mod = [k for k in t if k.startswith('awx.awx.')][0]
            assert t[mod]['state'] == state, t['name']
            if not out or out[-1] != mod:
                out.append(mod)
        return out
    created = modules(present, 'present')
    removed = modules(absent, 'absent')
    assert removed == list(reversed(created))
    # the organization only when the role created it; credentials never logged
    org = [t for t in absent if 'awx.awx.organization' in t][0]
    assert org['when'] == 'awx_config_create_organization | bool'
    assert all(t.get('no_log') is True for t in absent if 'awx.awx.credential' in t)


# ------------------------------------------------------------------------------------------------ the checker

def test_checker_finds_each_kind_of_problem_and_fix_repairs_the_names(tmp_path):
    role = role_tree(tmp_path, [
        {'name': 'Read', 'ansible.builtin.command': {'cmd': 'true'}, 'register': 'demo_out', 'changed_when': False},
        {'name': 'Keep', 'ansible.builtin.set_fact': {'__demo_value': '{{ demo_out.stdout }}'}},
        {'name': 'Write', 'ansible.builtin.copy': {'content': '{{ __demo_value }}', 'dest': '/tmp/x', 'mode': '0644'},
         'notify': 'Restart demo'},
    ], handlers=[{'name': 'Restart demo', 'ansible.builtin.command': {'cmd': 'true'}, 'changed_when': True,
                  'listen': 'demo restarted'}],
        varsmain={'demo_table': {'a': 1}})
    proc = run(CHECK, '--root', str(tmp_path))
    assert proc.returncode == 1
    out = proc.stdout
    assert 'register demo_out is not named demo__<name>' in out
    assert 'set_fact __demo_value is not named demo__<name>' in out
    assert 'internal variable demo_table is not named demo__<name>' in out
    assert 'notify "Restart demo" must name a handler of this role as "demo : <handler name>"' in out
    assert 'handler topic "demo restarted" does not start with "demo : "' in out

    proc = run(CHECK, '--root', str(tmp_path), '--fix')
    assert proc.returncode == 0, proc.stdout
    tasks = yaml.safe_load((role / 'tasks' / 'main.yml').read_text())
    assert tasks[0]['register'] == 'demo__out'
    assert tasks[1]['ansible.builtin.set_fact'] == {'demo__value': '{{ demo__out.stdout }}'}
    assert tasks[2]['ansible.builtin.copy']['content'] == '{{ demo__value }}'
    assert tasks[2]['notify'] == 'demo : Restart demo'
    assert yaml.safe_load((role / 'handlers' / 'main.yml').read_text())[0]['listen'] == 'demo : restarted'
    assert yaml.safe_load((role / 'vars' / 'main.yml').read_text()) == {'demo__table': {'a': 1}}


def test_checker_wants_a_state_option_and_role_prefixed_options(tmp_path):
    role_tree(tmp_path, [{'name': 'Noop', 'ansible.builtin.debug': {'msg': 'x'}}], defaults={},
              options={'other_mode': {'description': 'x', 'type': 'str'},
                       'demo__hidden': {'description': 'x', 'type': 'str'}})
    proc = run(CHECK, '--root', str(tmp_path))
    assert proc.returncode == 1
    assert 'demo changes something but has no option demo_state with choices present, absent' in proc.stdout
    assert 'defaults/main.yml must set demo_state: present' in proc.stdout
    assert 'option other_mode is not named demo_<name>' in proc.stdout
    assert 'option demo__hidden is not named demo_<name>' in proc.stdout


def test_checker_allows_published_facts_and_options_passed_to_an_included_role(tmp_path):
    role_tree(tmp_path, [
        {'name': 'Probe again', 'ansible.builtin.include_role': {'name': 'gpuops.k8s_gpu.gpu_probe'},
         'vars': {'gpu_probe_report_path': ''}},
        {'name': 'Loop', 'ansible.builtin.debug': {'msg': '{{ item }}'}, 'loop': [1],
         'loop_control': {'loop_var': 'demo__item'}},
    ])
    gp = tmp_path / 'roles' / 'gpu_probe'
    shutil.copytree(os.path.join(ROOT, 'roles', 'gpu_probe'), str(gp))
    proc = run(CHECK, '--root', str(tmp_path))
    assert proc.returncode == 0, proc.stdout


# ------------------------------------------------------------------------------------------------ the READMEs

def test_readme_generator_renders_the_specs_and_flags_a_stale_readme(tmp_path):
    role = role_tree(tmp_path, [{'name': 'Noop', 'ansible.builtin.debug': {'msg': 'x'}}],
                     defaults={'demo_state': 'present', 'demo_count': 3},
                     options={'demo_state': {'description': 'V(absent) removes it.', 'type': 'str',
                                             'choices': ['present', 'absent'], 'default': 'present'},
                              'demo_count': {'description': 'How many C(things).', 'type': 'int', 'default': 3}})
    (role / 'meta' / 'main.yml').write_text(yaml.safe_dump({'galaxy_info': {
        'min_ansible_version': '2.16', 'platforms': [{'name': 'Ubuntu', 'versions': ['noble']}]}}))
    proc = run(READMES, '--root', str(tmp_path), '--check')
    assert proc.returncode == 1 and 'roles/demo/README.md:1: role-readmes: missing' in proc.stdout
    proc = run(READMES, '--root', str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    text = (role / 'README.md').read_text()
    assert '# gpuops.k8s_gpu.demo' in text and 'Do not edit' in text
    assert '`demo_state`: `present`, `absent` (default `present`). `absent` removes it.' in text
    assert '| `demo_count` | int | `3` |  |  | How many `things`. |' in text
    assert '- Ubuntu noble' in text and '- ansible-core 2.16 or newer' in text
    assert run(READMES, '--root', str(tmp_path), '--check').returncode == 0
    (role / 'README.md').write_text(text.replace('How many', 'How much'))
    proc = run(READMES, '--root', str(tmp_path), '--check')
    assert proc.returncode == 1 and 'roles/demo/README.md:1: role-readmes: stale' in proc.stdout
