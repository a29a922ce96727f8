# LAB ONLY - a measuring tool, never part of the collection (lab/profile/README.md).
"""Callback plugin gpuops_task_cpu: the controller CPU of every task of an ansible-playbook run.

Enabled by lab/bin/run-tests.py when GPUOPS_TASK_CPU_DIR is set (ANSIBLE_CALLBACK_PLUGINS=lab/profile,
ANSIBLE_CALLBACKS_ENABLED=gpuops_task_cpu); each run writes GPUOPS_TASK_CPU_DIR/<pid>-<time>.json: the playbook, argv,
the pytest test or molecule scenario that ran it (PYTEST_CURRENT_TEST, MOLECULE_SCENARIO_NAME), the process tree's
CPU at the start of the first play (Python start-up, imports, inventory, collection loader) and per task the CPU the
process and the children it reaped used from that task's start to the next one's (getrusage SELF + CHILDREN). A task's
workers and the modules they run locally are reaped around the next task's start, so a module's cost may land on
the task after it; per role or playbook the sums hold. Modules run inside containers are not counted here.
lab/bin/task-cpu-report.py sums the files."""
from __future__ import annotations

import json
import os
import resource
import sys
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: gpuops_task_cpu
type: aggregate
short_description: controller CPU per task (the lab's measuring tool)
description: Writes one JSON file per ansible-playbook run into the directory GPUOPS_TASK_CPU_DIR names.
requirements: [enabled through callbacks_enabled]
'''


def _cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gpuops_task_cpu'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._current = None
        self._mark = _cpu()
        self._rows = []
        self._playbook = None

    def _close(self):
        now = _cpu()
        if self._current is not None:
            self._rows.append({'task': self._current, 'cpu': round(now - self._mark, 4)})
        self._current, self._mark = None, now

    def v2_playbook_on_start(self, playbook):
        now = _cpu()
        self._playbook = getattr(playbook, '_file_name', None)
        self._rows.append({'task': '<startup>', 'cpu': round(now, 4)})
        self._mark = now

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._current = '<play> %s' % (play.get_name() or '')

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        path = task.get_path() or ''
        self._current = '%s | %s' % (task.get_name(), path.split('/ansible_collections/')[-1])

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_stats(self, stats):
        self._close()
        out = os.environ.get('GPUOPS_TASK_CPU_DIR')
        if not out:
            return
        os.makedirs(out, exist_ok=True)
        doc = {'playbook': self._playbook, 'argv': sys.argv, 'cwd': os.getcwd(),
               'test': os.environ.get('PYTEST_CURRENT_TEST'), 'scenario': os.environ.get('MOLECULE_SCENARIO_NAME'),
               'total': round(_cpu(), 3), 'rows': self._rows}
        with open(os.path.join(out, '%d-%d.json' % (os.getpid(), int(time.time() * 1000))), 'w') as f:
            json.dump(doc, f)
