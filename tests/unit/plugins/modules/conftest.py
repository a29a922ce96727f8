# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Modules run on the managed node, never in the controller process: their warnings go into the result.

ansible-core 2.19+ sends module_utils warnings to the controller's display instead when the process has loaded
controller code (ansible.module_utils._internal.is_controller), which an earlier test file of the same process does
(the action and filter plugin tests import ansible.plugins). A module test's result then had no warnings, depending on
which files ran before it in the same worker (test_CRIO_03 failed after tests/unit/plugins/action). Each module test
runs as on a node."""
import pytest


@pytest.fixture(autouse=True)
def module_runs_on_the_node(monkeypatch):
    try:
        from ansible.module_utils import _internal
    except ImportError:  # ansible-core < 2.19: no controller switch
        return
    monkeypatch.setattr(_internal, 'is_controller', False, raising=False)
