"""Role gpu_sharing_stack's gated includes skip nothing that should run.

A role pass used to run seven tasks of entry point ``ready`` and two of ``present.yml`` that were skipped for most pools
(a worker process each, about 0.1 CPU-s: docs/lab.md, "Cost of a cluster-layer role pass"). They are included files
now (tasks/ready_steps.yml, tasks/present_followups.yml), included only when the render asks for one of their steps.
This test reads the files: every task of an included file is gated by a condition of its include (so a step added
without one, which the include's condition would skip for pools that need it, fails here), every condition of the
include gates a task, and the includes run once. The lab's real-server runs (test_gpu_sharing_stack_real.py: the
MIG wait, the validation workloads; test_gpu_operator_runtime_class_real.py: the RuntimeClass wait;
test_gpu_sharing_stack_dra_real.py: the Helm release) run the steps themselves.

Run: .venv/bin/pytest -q lab/tests/tooling/test_role_pass_includes.py   (seconds; no simulator)
"""
import os

import pytest
import yaml

from conftest import ROOT

TASKS = os.path.join(ROOT, 'roles', 'gpu_sharing_stack', 'tasks')
INCLUDE = 'ansible.builtin.include_tasks'


def _load(name):
    with open(os.path.join(TASKS, name)) as f:
        return yaml.safe_load(f)


def _walk(tasks):
    for t in tasks:
        if 'block' in t:
            yield from _walk(t['block'])
        else:
            yield t


def _when(task):
    w = task.get('when', [])
    return ' and '.join(w) if isinstance(w, list) else str(w)


def _include(parent, target):
    found = [t for t in _walk(_load(parent)) if t.get(INCLUDE) == target]
    assert len(found) == 1, (parent, target, found)
    return found[0]


# (file with the include, included file, the include condition's disjuncts: the facts of the render that gate a step)
GATES = [
    ('ready.yml', 'ready_steps.yml', ('gpu_sharing_stack__ready.helm is not none',
                                      'gpu_sharing_stack__ready.validation_manifests | length > 0',
                                      'gpu_sharing_stack__ready.readiness is not none')),
    ('present.yml', 'present_followups.yml', ('gpu_sharing_stack__stack.stale_shared_manifests | length > 0',
                                              'gpu_sharing_stack__stack.restarts | length > 0')),
]


@pytest.mark.parametrize('parent,included,disjuncts', GATES, ids=[g[1] for g in GATES])
def test_every_included_step_is_gated_by_its_include(parent, included, disjuncts):
    inc = _include(parent, included)
    assert inc.get('run_once') is True, (parent, included)
    condition = ' '.join(_when(inc).split())
    assert [d for d in disjuncts if d in condition] == list(disjuncts), condition
    assert condition.count(' or ') == len(disjuncts) - 1, condition
    steps = list(_walk(_load(included)))
    assert steps
    ungated = []
    used = set()
    registered = set()  # results of gated steps: a step that acts on one of them runs only after a gated step
    for t in steps:
        when = ' '.join(_when(t).split())
        hit = [d for d in disjuncts if d in when]
        if 'restarts' in str(t.get('loop', '')):  # a loop over the render's restarts: nothing to do when it is empty
            hit.append('gpu_sharing_stack__stack.restarts | length > 0')
        if not hit and not [r for r in registered if r in when]:
            ungated.append(t.get('name'))
        if t.get('register') and (hit or [r for r in registered if r in when]):
            registered.add(t['register'])
        used.update(hit)
    assert ungated == [], 'steps of %s that its include (%s) would skip when they are due' % (included, parent)
    assert used == set(disjuncts), 'a condition of the include gates no step: %s' % (set(disjuncts) - used)


def test_main_includes_one_state_file_for_each_allowed_state():
    """main.yml includes "<state>.yml" in one task; the argument spec allows exactly the states that have a file."""
    inc = [t for t in _walk(_load('main.yml')) if INCLUDE in t]
    assert [t[INCLUDE] for t in inc] == ['{{ gpu_sharing_stack_state }}.yml'] and inc[0].get('run_once') is True
    with open(os.path.join(ROOT, 'roles', 'gpu_sharing_stack', 'meta', 'argument_specs.yml')) as f:
        spec = yaml.safe_load(f)['argument_specs']['main']['options']['gpu_sharing_stack_state']
    assert sorted(spec['choices']) == ['absent', 'present']
    for state in spec['choices']:
        assert os.path.isfile(os.path.join(TASKS, state + '.yml')), state
