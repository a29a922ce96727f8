# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers for the modules' unit tests: feed arguments to a module's main() and catch its result."""
import contextlib
import json

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    patch_module_args = None


@contextlib.contextmanager
def module_args(args):
    """Make AnsibleModule see ``args`` as the task's arguments (any supported ansible-core)."""
    if patch_module_args is not None:
        with patch_module_args(args):
            yield
        return
    old = basic._ANSIBLE_ARGS
    basic._ANSIBLE_ARGS = to_bytes(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    try:
        yield
    finally:
        basic._ANSIBLE_ARGS = old


class Exit(Exception):
    """Raised instead of exiting: args[0] is the module's result with ``failed`` set."""


def capture_exit(monkeypatch):
    """Make exit_json / fail_json raise Exit with the result (``failed`` False / True) instead of exiting."""
    def exit_json(self, **kw):
        raise Exit(dict(kw, failed=False))

    def fail_json(self, **kw):
        raise Exit(dict(kw, failed=True))

    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)


def run_main(main, args):
    """Run a module's main() with ``args`` (capture_exit must be active); return its result dict."""
    with module_args(args):
        try:
            main()
        except Exit as e:
            return e.args[0]
    raise AssertionError('main() returned without exit_json or fail_json')


def main_runner(main, calls):
    """A test fixture's runner: ``run(args, check=False, diff=False)`` runs main() with ``args`` (check and diff mode
    as Ansible passes them, unless ``args`` sets them itself) and returns its result; ``run.calls`` is ``calls``, the list the fixture's fakes record in."""
    def run(args, check=False, diff=False):
        return run_main(main, dict({'_ansible_check_mode': check, '_ansible_diff': diff}, **args))  # args win

    run.calls = calls
    return run
