# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter fleet_report prints what playbooks/report.yml's former template (templates/fleet_report.j2, kept below as
the reference and rendered with Jinja2) printed, line for line, for every shape of facts the report meets."""
import jinja2
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter.fleet_report import FilterModule, fleet_report

# playbooks/templates/fleet_report.j2 as it was before the filter replaced it (rendered by the template lookup, whose
# trim_blocks defaults to true, and split on newlines by the task)
FORMER_TEMPLATE = """{% set fmt = '%-16s %-6s %4s  %-24s %-12s %9s  %-4s %-4s %-5s' %}
{{ fmt | format('host', 'source', 'gpus', 'model', 'driver', 'MiB total', 'MIG', 'MPS', 'NVML') }}
{% for h in gpuops_report_hosts | default(ansible_play_hosts_all) | sort %}
{%   set g = hostvars[h].gpu_probe_facts | default({}) %}
{%   if g %}
{%     set models = g.gpus | map(attribute='name') | map('default', '?', true) | unique | list %}
{{ fmt | format(h, g.source, g.gpu_count, models | join(',') | truncate(24, true, '~', 0),
                g.nvml.driver_version | default('-', true), g.gpus | map(attribute='memory_total_mib') | map('default', 0, true) | map('int') | sum,
                'yes' if g.sharing.mig.allowed else 'no', 'yes' if g.sharing.mps.allowed else 'no', g.nvml.status) }}
{%   else %}
{{ fmt | format(h, '-', '-', 'not probed', '-', '-', '-', '-', '-') }}
{%   endif %}
{% endfor %}
"""

H100 = {'source': 'nvml', 'gpu_count': 2, 'nvml': {'status': 'ok', 'driver_version': '580.95.05'},
        'gpus': [{'name': 'NVIDIA H100 80GB HBM3', 'memory_total_mib': 81559},
                 {'name': 'nvidia h100 80gb hbm3', 'memory_total_mib': '81559'}],
        'sharing': {'mig': {'allowed': True}, 'mps': {'allowed': False}}}
MIXED = {'source': 'lspci', 'gpu_count': 3, 'nvml': {'status': 'unavailable'},
         'gpus': [{'name': 'Tesla T4'}, {'memory_total_mib': '15360.0'},
                  {'name': 'NVIDIA A100-SXM4-40GB with more', 'memory_total_mib': None}],
         'sharing': {'mig': {'allowed': False}, 'mps': {'allowed': True}}}
EMPTY = {'source': 'nvml', 'gpu_count': 0, 'nvml': {'status': 'ok', 'driver_version': ''}, 'gpus': [],
         'sharing': {'mig': {'allowed': False}, 'mps': {'allowed': False}}}
HOSTVARS = {'a-node-with-a-very-long-name-01': {'gpu_probe_facts': H100}, 'b': {'gpu_probe_facts': MIXED},
            'c': {}, 'd': {'gpu_probe_facts': {}}, 'e': {'gpu_probe_facts': EMPTY},
            'f': {'gpu_probe_facts': dict(H100, gpus=[{'name': 'Tesla T4', 'memory_total_mib': 'n/a'}] * 3)}}


def former(hosts, hostvars):
    env = jinja2.Environment(trim_blocks=True)
    text = env.from_string(FORMER_TEMPLATE).render(gpuops_report_hosts=hosts, hostvars=hostvars)
    return text.split('\n')


def test_same_lines_as_the_former_template():
    hosts = sorted(HOSTVARS)
    assert fleet_report(hosts, HOSTVARS) == former(hosts, HOSTVARS)
    assert fleet_report(hosts, HOSTVARS)[-1] == ''


def test_the_filter_is_registered_and_keeps_the_order_given():
    f = FilterModule().filters()['fleet_report']
    lines = f(['e', 'c'], HOSTVARS)
    assert [x.split()[0] for x in lines[1:-1]] == ['e', 'c']
    assert lines[2].split()[1:4] == ['-', '-', 'not']
    assert f([], HOSTVARS) == former([], HOSTVARS)


def test_facts_without_a_printed_key_name_the_host_and_the_key():
    broken = {'n1': {'gpu_probe_facts': dict((k, v) for k, v in H100.items() if k != 'sharing')}}
    with pytest.raises(AnsibleFilterError, match='host n1 has no sharing.mig.allowed'):
        fleet_report(['n1'], broken)
    with pytest.raises(AnsibleFilterError, match='expects a list of host names'):
        fleet_report('n1', broken)
