# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules' attributes: check mode, diff mode and platform, with their descriptions.

A module names one support level - gpuops.k8s_gpu.attributes.actionable or gpuops.k8s_gpu.attributes.info_module - and
gets the descriptions with it; a module that an action plugin runs on the controller adds
gpuops.k8s_gpu.attributes.controller (action, async). Its own attributes block says only what differs (a support
level, details) and wins over the fragments'. The fragments are literal text (ansible-test's yamllint reads them without running them).
"""


class ModuleDocFragment(object):

    # Only the platform (every module of the collection is a Python module: POSIX hosts)
    DOCUMENTATION = r'''
options: {}
attributes:
  platform:
    description: Target operating systems the module can run on (a Python module; Windows hosts are not supported).
    support: N/A
    platforms: posix
'''

    # Read-only info modules: full check mode, no diff (nothing changes)
    INFO_MODULE = r'''
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
    support: N/A
    details:
      - This action does not modify state.
  platform:
    description: Target operating systems the module can run on (a Python module; Windows hosts are not supported).
    support: N/A
    platforms: posix
'''

    # Added to a support level (info_module) by a module whose action plugin of the same name runs it in the controller
    # process (pure computation): action full, async none; nothing runs on the target
    CONTROLLER = r'''
options: {}
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details:
      - An action plugin of the same name does all of it in the controller process, with the module's argument
        specification; no module is sent to the target host, and C(delegate_to) has no effect.
  async:
    description: Supports being used with the C(async) keyword.
    support: none
'''

    # Modules that change state and support both check and diff mode
    ACTIONABLE = r'''
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
    support: full
  platform:
    description: Target operating systems the module can run on (a Python module; Windows hosts are not supported).
    support: N/A
    platforms: posix
'''
