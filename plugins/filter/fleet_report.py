# -*- coding: utf-8 -*-
# Copyright: gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of playbooks/report.yml: the fleet report's lines, one pass over the hosts' GPU facts."""

from __future__ import annotations

DOCUMENTATION = r'''
name: fleet_report
short_description: The fleet report of playbooks/report.yml, one line per host, from the hosts' GPU facts
version_added: 0.1.0
description:
  - Formats the fleet report (host, facts source, GPU count, models, driver, total GPU memory in MiB, whether MIG and
    MPS are allowed, NVML status) from the host fact C(gpu_probe_facts) of each host (as role gpu_probe or module
    M(gpuops.k8s_gpu.gpu_info) records it); a host without facts gets a C(not probed) line.
  - The hosts are reported in the order given (playbooks/report.yml sorts them). Each host's variables are read once
    (a template that reads C(hostvars[host]) per field costs seconds at thousands of hosts).
  - Fails naming the host and the key when a host's facts lack one the report prints.
extends_documentation_fragment:
  - gpuops.k8s_gpu.inventory_vars
options:
  _input:
    description: The hosts (inventory names).
    type: list
    elements: str
    required: true
author: gpuops.k8s_gpu developers
'''

EXAMPLES = r'''
- name: Print the fleet report
  ansible.builtin.debug:
    msg: "{{ groups['gpu_nodes'] | sort | gpuops.k8s_gpu.fleet_report(hostvars) }}"
'''

RETURN = r'''
_value:
  description: The report's lines (a header, then one line per host), ending with an empty string.
  type: list
  elements: str
'''

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

FORMAT = '%-16s %-6s %4s  %-24s %-12s %9s  %-4s %-4s %-5s'
HEADER = ('host', 'source', 'gpus', 'model', 'driver', 'MiB total', 'MIG', 'MPS', 'NVML')
MODEL_WIDTH = 24
_MISSING = object()


def _host_facts(hostvars: Any, host: str) -> Any:
    try:
        return hostvars[host]['gpu_probe_facts']
    except (KeyError, TypeError):
        return None


def _key(facts: Any, host: str, *path: str) -> Any:
    value = facts
    for k in path:
        try:
            value = value[k]
        except (KeyError, TypeError, IndexError):
            raise AnsibleFilterError('fleet_report: gpu_probe_facts of host %s has no %s'
                                     % (host, '.'.join(str(p) for p in path)))
    return value


def _int(value: Any) -> int:
    """An integer as Jinja's int filter makes it (a float or numeric text truncated; anything else 0)."""
    try:
        if isinstance(value, str):
            return int(value, 10)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _models(gpus: Any) -> list[str]:
    """The GPU models, first seen first, case-insensitively unique ('?' for a GPU without a name)."""
    out, seen = [], set()
    for g in gpus or []:
        name = g.get('name') if isinstance(g, dict) or hasattr(g, 'get') else None
        name = name or '?'
        key = name.lower() if isinstance(name, str) else name
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out


def _truncate(text: str, length: int = MODEL_WIDTH, end: str = '~') -> str:
    return text if len(text) <= length else text[:length - len(end)] + end


def host_line(host: str, facts: Any) -> str:
    """The report's line of one host (``facts``: its gpu_probe_facts, or None/empty when it has none)."""
    if not facts:
        return FORMAT % (host, '-', '-', 'not probed', '-', '-', '-', '-', '-')
    gpus = _key(facts, host, 'gpus')
    nvml = _key(facts, host, 'nvml')
    driver = nvml.get('driver_version') if hasattr(nvml, 'get') else None
    memory = sum(_int(g.get('memory_total_mib') or 0) for g in gpus or [])
    return FORMAT % (host, _key(facts, host, 'source'), _key(facts, host, 'gpu_count'),
                     _truncate(','.join(str(m) for m in _models(gpus))), driver or '-', memory,
                     'yes' if _key(facts, host, 'sharing', 'mig', 'allowed') else 'no',
                     'yes' if _key(facts, host, 'sharing', 'mps', 'allowed') else 'no',
                     _key(facts, host, 'nvml', 'status'))


def fleet_report(hosts: Any, hostvars: Any) -> list[str]:
    """The report's lines: the header, one line per host of ``hosts`` in that order, and '' (the text's last newline,
    as splitting the former template's output gave)."""
    if isinstance(hosts, str) or not hasattr(hosts, '__iter__'):
        raise AnsibleFilterError('fleet_report expects a list of host names, got %r' % (hosts,))
    return [FORMAT % HEADER] + [host_line(h, _host_facts(hostvars, h)) for h in hosts] + ['']


class FilterModule(object):
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'fleet_report': fleet_report}
