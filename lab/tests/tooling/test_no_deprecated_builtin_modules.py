"""No task of the collection's roles or playbooks uses a builtin module that an ansible-core we support deprecates or
has removed. Each ansible-core says so in its own runtime metadata (ansible/config/ansible_builtin_runtime.yml,
plugin_routing.modules.<name>.deprecation / .tombstone): ansible-core 2.21.5's deprecates apt_repository and apt_key
("Use deb822_repository instead.", removal_version 2.25), and every run that used them printed a DEPRECATION WARNING.
This test reads that metadata from both of the lab's venvs (.venv: 2.21, .venv-2.16) and every module key of every
task (FQCN ansible.builtin.X / ansible.legacy.X or short X, action:/local_action: included, inside blocks too) under
roles/*/tasks, roles/*/handlers and playbooks/, and names file, task and ansible-core's warning text."""
import glob
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENVS = ('.venv', '.venv-2.16')
BUILTIN_PREFIXES = ('ansible.builtin.', 'ansible.legacy.')
BLOCK_KEYS = ('block', 'rescue', 'always')
PLAY_TASK_KEYS = ('pre_tasks', 'tasks', 'post_tasks', 'handlers')


def runtime_yml(venv):
    found = sorted(glob.glob(os.path.join(ROOT, venv, 'lib', 'python3*', 'site-packages', 'ansible', 'config',
                                          'ansible_builtin_runtime.yml')))
    return found[0] if found else None


def retired_modules(path):
    """{module short name: (kind, text)} of the modules the runtime metadata at path deprecates or has removed."""
    with open(path) as f:
        routing = (yaml.safe_load(f) or {}).get('plugin_routing', {}).get('modules', {}) or {}
    out = {}
    for name, entry in routing.items():
        for kind in ('tombstone', 'deprecation'):
            info = (entry or {}).get(kind)
            if info is not None:
                when = info.get('removal_version') or info.get('removal_date') or '?'
                verb = 'has been removed' if kind == 'tombstone' else 'has been deprecated'
                out[name] = (kind, 'ansible.builtin.%s %s. %s (%s %s)' % (
                    name, verb, info.get('warning_text', ''), 'removed' if kind == 'tombstone' else 'removal', when))
                break
    return out


def task_keywords():
    """The keys of a task that are not its module, from ansible-core itself (Task, Handler, Block attributes)."""
    from ansible.playbook.block import Block
    from ansible.playbook.handler import Handler
    from ansible.playbook.task import Task
    return (frozenset(Task.fattributes) | frozenset(Handler.fattributes) | frozenset(Block.fattributes)
            | {'local_action', 'async', 'args'})


def task_modules(task, keywords):
    """The module names a task names (its one non-keyword key, or action:/local_action:)."""
    names = []
    for key, value in task.items():
        if key in ('action', 'local_action'):
            mod = value.get('module') if isinstance(value, dict) else str(value).split()[0] if value else None
            if mod:
                names.append(mod)
        elif key not in keywords and not key.startswith('with_') and key not in BLOCK_KEYS:
            names.append(key)
    return names


def walk_tasks(items, keywords):
    """(task name, module) of every task of a task list, blocks included."""
    for task in items or []:
        if not isinstance(task, dict):
            continue
        if any(k in task for k in BLOCK_KEYS):
            for k in BLOCK_KEYS:
                yield from walk_tasks(task.get(k), keywords)
            continue
        for mod in task_modules(task, keywords):
            yield task.get('name', '<unnamed>'), mod


def task_files():
    files = sorted(glob.glob(os.path.join(ROOT, 'roles', '*', 'tasks', '**', '*.yml'), recursive=True)
                   + glob.glob(os.path.join(ROOT, 'roles', '*', 'handlers', '**', '*.yml'), recursive=True)
                   + glob.glob(os.path.join(ROOT, 'playbooks', '**', '*.yml'), recursive=True))
    return files


def uses(path, keywords):
    """(task name, module) of the tasks of one tasks/handlers file or playbook."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, list):
        return []
    plays = [d for d in doc if isinstance(d, dict) and ('hosts' in d or 'import_playbook' in d)]
    if not plays:
        return list(walk_tasks(doc, keywords))
    out = []
    for play in plays:
        for key in PLAY_TASK_KEYS:
            out += list(walk_tasks(play.get(key), keywords))
    return out


def short(module):
    for prefix in BUILTIN_PREFIXES:
        if module.startswith(prefix):
            return module[len(prefix):]
    return None if '.' in module else module


@pytest.mark.parametrize('venv', VENVS)
def test_DRV_43_no_task_uses_a_deprecated_or_removed_builtin_module(venv):
    path = runtime_yml(venv)
    assert path, '%s has no ansible/config/ansible_builtin_runtime.yml (run lab/bin/bootstrap.sh)' % venv
    retired = retired_modules(path)
    keywords = task_keywords()
    found = []
    files = task_files()
    assert len(files) > 20, 'no task files found under %s' % ROOT
    for f in files:
        for name, module in uses(f, keywords):
            s = short(module)
            if s in retired:
                found.append('%s: task "%s" uses %s: %s' % (os.path.relpath(f, ROOT), name, module, retired[s][1]))
    assert not found, ('ansible-core of %s (%s):\n' % (venv, os.path.relpath(path, ROOT))) + '\n'.join(found)


def test_the_reader_sees_modules_and_the_metadata():
    """The scan is not vacuous: it finds modules in blocks and action:, and reads 2.21's deprecation of apt_repository."""
    keywords = task_keywords()
    tasks = [{'name': 'a', 'block': [{'name': 'b', 'ansible.builtin.apt_repository': {'repo': 'x'}, 'when': 'y'}],
              'rescue': [{'name': 'c', 'action': 'apt_key url=z'}]},
             {'name': 'd', 'local_action': {'module': 'ansible.legacy.apt_key'}, 'register': 'r', 'loop': [1]},
             {'name': 'e', 'gpuops.k8s_gpu.apt_signed_repo': {}, 'notify': 'h', 'with_items': [1]}]
    assert list(walk_tasks(tasks, keywords)) == [('b', 'ansible.builtin.apt_repository'), ('c', 'apt_key'),
                                                 ('d', 'ansible.legacy.apt_key'), ('e', 'gpuops.k8s_gpu.apt_signed_repo')]
    assert [short(m) for _n, m in walk_tasks(tasks, keywords)] == ['apt_repository', 'apt_key', 'apt_key', None]
    path = runtime_yml('.venv')
    assert path
    retired = retired_modules(path)
    assert retired['apt_repository'][0] == 'deprecation'
    assert 'Use deb822_repository instead.' in retired['apt_repository'][1]
