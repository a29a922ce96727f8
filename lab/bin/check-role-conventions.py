#!/usr/bin/env python3
"""Check the roles' lifecycle and naming conventions (lab tooling; run by lab/tests/tooling/test_role_lifecycle.py).

    .venv/bin/python lab/bin/check-role-conventions.py [--root DIR]

Conventions (docs/roles.md):
  * state: every role that changes something documents ``<role>_state`` (choices present, absent) in
    meta/argument_specs.yml and sets it in defaults/main.yml; READ_ONLY_ROLES lists the roles that only read.
  * private variables: every variable a role defines for itself - ``register``, ``set_fact`` keys, task and block
    ``vars``, ``loop_var`` and the keys of vars/main.yml - is named ``<role>__<name>``, unless it is one of the
    facts the role publishes for later plays and other roles (PUBLISHED, documented in docs/roles.md). Options
    (defaults/ and argument_specs) are ``<role>_<name>`` and never ``<role>__<name>``.
  * handlers: every handler's ``listen`` topic starts with ``<role> : ``, and every ``notify`` in a role's tasks
    names a handler of the same role as ``<role> : <handler name>`` (the form Ansible itself resolves for role
    handlers and prints as ``RUNNING HANDLER [<role> : <name>]``), so no notification can reach another role's or a
    play's handler of the same name.
Prints one line per problem as ``path:line: role-conventions: message``; exit 1 when there is any.
Reads the collection's files only.
"""
import argparse
import glob
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Roles that change nothing on any system, so they have no <role>_state.
READ_ONLY_ROLES = {}
# Facts a role publishes on purpose (read by other roles, playbooks or users); documented in docs/roles.md.
PUBLISHED = {
    'esxi_gpu_passthrough': {'esxi_gpu_passthrough_result'},
    'gpu_probe': {'gpu_probe_facts'},
    'gpu_node_labels': {'gpu_node_labels_result'},
    'gpu_metrics': {'gpu_metrics_result'},
    'gpu_sharing_stack': {'gpu_sharing_stack_rendered'},
    'nvidia_container_runtime': {'nvidia_container_runtime_cdi_spec_ready'},
}
# Files outside roles/ that read a role's internal variables (lab tests of the role's data tables, molecule's
# verify of a handler's result): --fix renames there too.
FIX_ALSO = ['lab/tests/integration/test_awx_config.py', 'lab/tests/integration/test_awx_runner.py', 'molecule/nvidia_driver/converge.yml']
# keywords of a task that hold nested task lists
NESTED = ('block', 'rescue', 'always')


def rel(path):
    return os.path.relpath(path, ROOT)


class Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's !unsafe / !vault tags as plain values."""


Loader.add_constructor('!unsafe', lambda loader, node: loader.construct_scalar(node))
Loader.add_constructor('!vault', lambda loader, node: loader.construct_scalar(node))


def load(path):
    with open(path, encoding='utf-8') as f:
        return yaml.load(f, Loader=Loader)  # nosec - SafeLoader with two scalar tags


def line_of(path, needle):
    try:
        with open(path, encoding='utf-8') as f:
            for i, line in enumerate(f, 1):
                if needle in line:
                    return i
    except OSError:
        pass
    return 1


def walk(tasks):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in NESTED:
            for sub in walk(task.get(key)):
                yield sub


def defined_names(task):
    """(kind, name) of every variable a task defines."""
    out = []
    if isinstance(task.get('register'), str):
        out.append(('register', task['register']))
    for key in ('ansible.builtin.set_fact', 'set_fact'):
        if isinstance(task.get(key), dict):
            out.extend(('set_fact', k) for k in task[key] if k not in ('cacheable',))
    if isinstance(task.get('vars'), dict):
        out.extend(('vars', k) for k in task['vars'])
    loop_var = (task.get('loop_control') or {}).get('loop_var')
    if isinstance(loop_var, str):
        out.append(('loop_var', loop_var))
    return out


def notifies(task):
    value = task.get('notify')
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def all_options():
    names = set()
    for spec_path in glob.glob(os.path.join(ROOT, 'roles', '*', 'meta', 'argument_specs.yml')):
        for ep in ((load(spec_path) or {}).get('argument_specs') or {}).values():
            names.update(((ep or {}).get('options') or {}).keys())
    return names


def private_name(role, name):
    """The <role>__<name> form of an internal variable (old forms: __<role>_<name>, <role>_<name>)."""
    for old in ('__%s_' % role, '%s_' % role):
        if name.startswith(old):
            return '%s__%s' % (role, name[len(old):])
    return None


def check_role(role, role_dir, options_anywhere=frozenset(), renames=None, topic_map=None):
    problems = []
    renames = {} if renames is None else renames
    topic_map = {} if topic_map is None else topic_map
    private = re.compile(r'^%s__[a-z0-9_]+$' % re.escape(role))
    published = PUBLISHED.get(role, set())
    # options of every entry point
    spec_path = os.path.join(role_dir, 'meta', 'argument_specs.yml')
    specs = (load(spec_path) or {}).get('argument_specs') or {} if os.path.exists(spec_path) else {}
    options = {}
    for ep in specs.values():
        options.update((ep or {}).get('options') or {})
    for name in options:
        if name.startswith(role + '__') or not name.startswith(role + '_'):
            problems.append('%s:%d: role-conventions: option %s is not named %s_<name>'
                            % (rel(spec_path), line_of(spec_path, name + ':'), name, role))
    # state
    state = role + '_state'
    if role not in READ_ONLY_ROLES:
        opt = options.get(state)
        if not opt or sorted(opt.get('choices') or []) != ['absent', 'present']:
            problems.append('%s:1: role-conventions: %s changes something but has no option %s with choices '
                            'present, absent' % (rel(spec_path), role, state))
        defaults_path = os.path.join(role_dir, 'defaults', 'main.yml')
        defaults = load(defaults_path) if os.path.exists(defaults_path) else {}
        if (defaults or {}).get(state) != 'present':
            problems.append('%s:1: role-conventions: defaults/main.yml must set %s: present'
                            % (rel(defaults_path), state))
    # private variables: vars/main.yml
    vars_path = os.path.join(role_dir, 'vars', 'main.yml')
    if os.path.exists(vars_path):
        for name in load(vars_path) or {}:
            if not private.match(name) and name not in published:
                renames[name] = private_name(role, name)
                problems.append('%s:%d: role-conventions: internal variable %s is not named %s__<name>'
                                % (rel(vars_path), line_of(vars_path, name + ':'), name, role))
    # handlers
    handler_names = set()
    listens = set()
    hpath = os.path.join(role_dir, 'handlers', 'main.yml')
    if os.path.exists(hpath):
        for handler in walk(load(hpath)):
            if 'name' in handler:
                handler_names.add(handler['name'])
            topics = handler.get('listen') or []
            for topic in [topics] if isinstance(topics, str) else topics:
                listens.add(topic)
                if not topic.startswith(role + ' : '):
                    topic_map[topic] = '%s : %s' % (role, topic[len(role):].strip() if topic.startswith(role) else topic)
                    renames[topic] = topic_map[topic]
                    problems.append('%s:%d: role-conventions: handler topic "%s" does not start with "%s : "'
                                    % (rel(hpath), line_of(hpath, topic), topic, role))
            for kind, name in defined_names(handler):
                if not private.match(name) and name not in published:
                    renames[name] = private_name(role, name)
                    problems.append('%s:%d: role-conventions: %s %s is not named %s__<name>'
                                    % (rel(hpath), line_of(hpath, name), kind, name, role))
    # tasks
    for path in sorted(glob.glob(os.path.join(role_dir, 'tasks', '*.yml'))):
        for task in walk(load(path)):
            for kind, name in defined_names(task):
                if name in options or (kind == 'vars' and name in options_anywhere):
                    continue    # options of this role pinned for an included file, or of a role it includes
                if not private.match(name) and name not in published:
                    renames[name] = private_name(role, name)
                    problems.append('%s:%d: role-conventions: %s %s is not named %s__<name>'
                                    % (rel(path), line_of(path, name), kind, name, role))
            for target in notifies(task):
                pattern = re.escape(target).replace(r'\{\{\ item\ \}\}', '.+')
                ok = target.startswith(role + ' : ') and (
                    target in listens or any(re.match('^%s$' % pattern, '%s : %s' % (role, n)) for n in handler_names))
                if not ok:
                    if target in topic_map:
                        renames[target] = topic_map[target]
                    elif not target.startswith(role + ' : '):
                        renames[target] = '%s : %s' % (role, target)
                    problems.append('%s:%d: role-conventions: notify "%s" must name a handler of this role as '
                                    '"%s : <handler name>"' % (rel(path), line_of(path, target), target, role))
    return problems


def fix(role_dir, renames):
    """Rename in every text file of the role (and FIX_ALSO): variables as whole words, notify/listen strings
    where they stand as a notify or listen value."""
    words = dict((k, v) for k, v in renames.items() if re.match(r'^[A-Za-z0-9_]+$', k))
    strings = dict((k, v) for k, v in renames.items() if k not in words)
    files = [p for p in glob.glob(os.path.join(role_dir, '**', '*'), recursive=True)
             if os.path.isfile(p) and not p.endswith(('README.md', 'argument_specs.yml'))]
    files += [os.path.join(ROOT, p) for p in FIX_ALSO if os.path.exists(os.path.join(ROOT, p))]
    for path in files:
        with open(path, encoding='utf-8') as f:
            text = f.read()
        new = text
        for old, repl in sorted(words.items(), key=lambda kv: -len(kv[0])):
            new = re.sub(r'(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])' % re.escape(old), repl, new)
        for old, repl in strings.items():
            new = re.sub(r'^([ \t]*(?:notify|listen|-)[ \t]*:?[ \t]*)(["\']?)%s\2[ \t]*$' % re.escape(old),
                         lambda m: '%s"%s"' % (m.group(1), repl), new, flags=re.M)
        if new != text:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(new)
            print('fixed %s' % rel(path))


def main():
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--root', default=ROOT, help='collection root (default: this repository)')
    ap.add_argument('--fix', action='store_true',
                    help='rename internal variables to <role>__<name> and qualify notify/listen with "<role> : " '
                         'in the role\'s files (and FIX_ALSO), then check again')
    args = ap.parse_args()
    ROOT = os.path.abspath(args.root)
    problems = []
    roles = sorted(d for d in glob.glob(os.path.join(ROOT, 'roles', '*')) if os.path.isdir(d))
    anywhere = all_options()
    for role_dir in roles:
        renames = {}
        problems.extend(check_role(os.path.basename(role_dir), role_dir, anywhere, renames))
        if args.fix and renames:
            fix(role_dir, dict((k, v) for k, v in renames.items() if v))
    if args.fix:
        problems = []
        for role_dir in roles:
            problems.extend(check_role(os.path.basename(role_dir), role_dir, anywhere))
    for line in problems:
        print(line)
    print('role-conventions: %d roles, %d problems' % (len(roles), len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
