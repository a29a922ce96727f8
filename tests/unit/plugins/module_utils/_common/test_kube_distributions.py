# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube_distributions: the one table of Kubernetes distributions (kubeadm, RKE1, RKE2, k3s). The scheduler planner
derives its tables from it; the role defaults and argument_specs that name the same paths and services are
compared with it here."""
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_distributions as KD
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import adapters as A
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import plan
from ansible_collections.gpuops.k8s_gpu.plugins.modules import kube_scheduler_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))


def _yaml(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return yaml.safe_load(f)


def _spec_defaults(role):
    opts = _yaml('roles', role, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    return dict((k, v.get('default')) for k, v in opts.items())


def test_scheduler_tables_come_from_the_one_table():
    assert plan.MODE_DISTRIBUTION == {'rke1_cluster_yml': 'rke1', 'rke2_config': 'rke2',
                                      'kubeadm_manifest': 'kubeadm', 'kubeadm_configmap': 'kubeadm'}
    assert plan.DISTRIBUTION_MODE is KD.DISTRIBUTION_MODE and plan.DEFAULT_PATHS is KD.SCHEDULER_DEFAULT_PATHS
    assert A.OWN_DIRS is KD.OWN_DIRS and plan.CONFIG_DIRS is KD.OWN_DIRS
    doc = yaml.safe_load(kube_scheduler_config.DOCUMENTATION)['options']
    assert doc['distribution']['choices'] == list(KD.SCHEDULER_DISTRIBUTIONS)
    assert set(KD.MODE_DISTRIBUTION) <= set(doc['mode']['choices'])


@pytest.mark.parametrize('where', ['defaults', 'argument_specs'])
def test_kube_scheduler_extender_defaults_are_the_tables(where):
    d = (_yaml('roles', 'kube_scheduler_extender', 'defaults', 'main.yml') if where == 'defaults'
         else _spec_defaults('kube_scheduler_extender'))
    assert d['kube_scheduler_extender_rke2_config_file'] == KD.KUBE_DISTRIBUTIONS['rke2']['config_file']
    assert d['kube_scheduler_extender_rke2_service'] == KD.KUBE_DISTRIBUTIONS['rke2']['server_service']
    assert d['kube_scheduler_extender_kubeadm_manifest'] == KD.KUBE_DISTRIBUTIONS['kubeadm']['scheduler_path']


@pytest.mark.parametrize('name', ['rke2', 'k3s'])
@pytest.mark.parametrize('where', ['defaults', 'argument_specs'])
def test_nvidia_container_runtime_defaults_are_the_tables(name, where):
    d = (_yaml('roles', 'nvidia_container_runtime', 'defaults', 'main.yml') if where == 'defaults'
         else _spec_defaults('nvidia_container_runtime'))
    assert d['nvidia_container_runtime_%s_config' % name] == KD.KUBE_DISTRIBUTIONS[name]['config_file']
    assert d['nvidia_container_runtime_%s_service' % name] == KD.KUBE_DISTRIBUTIONS[name]['agent_service']
    if where == 'defaults':   # the template path, rendered for both containerd config versions
        expr = d['nvidia_container_runtime_%s_template' % name]
        for version in sorted(KD.CONTAINERD_TEMPLATES):
            m = re.match(r"^\s*(\S+)/\{\{ '(\S+)'\s+if nvidia_container_runtime_template_config_version \| string == '3'"
                         r" else '(\S+)' \}\}\s*$", expr)
            assert m, expr
            rendered = m.group(1) + '/' + (m.group(2) if version == '3' else m.group(3))
            assert rendered == KD.containerd_template(name, version)
    else:   # the argument_specs description states the v3 path (RKE2) or the data directory (k3s, "as RKE2's")
        opts = _yaml('roles', 'nvidia_container_runtime', 'meta', 'argument_specs.yml')['argument_specs']['main']
        desc = opts['options']['nvidia_container_runtime_%s_template' % name]['description']
        desc = ' '.join(desc) if isinstance(desc, list) else desc
        stated = KD.containerd_template(name, '3') if name == 'rke2' else KD.KUBE_DISTRIBUTIONS[name]['containerd_dir']
        assert stated.split('/agent/')[0] in desc and (name != 'rke2' or stated in desc), desc


@pytest.mark.parametrize('where', ['defaults', 'argument_specs'])
def test_RKE_13_mig_boot_unit_is_ordered_before_every_kubelet_unit(where):
    """The MIG boot unit was ordered only before kubelet.service: on RKE2 and k3s, whose kubelet runs inside their
    own server and agent units, the geometry raced the node's kubelet at boot."""
    d = (_yaml('roles', 'gpu_node_sharing', 'defaults', 'main.yml') if where == 'defaults'
         else _spec_defaults('gpu_node_sharing'))
    kubelet_units = ['kubelet.service'] + ['%s.service' % KD.KUBE_DISTRIBUTIONS[n][k] for n in ('rke2', 'k3s')
                                           for k in ('server_service', 'agent_service')]
    assert kubelet_units == ['kubelet.service', 'rke2-server.service', 'rke2-agent.service', 'k3s.service',
                             'k3s-agent.service']
    assert d['gpu_node_sharing_mig_persist_before'] == kubelet_units
    template = open(os.path.join(ROOT, 'roles', 'gpu_node_sharing', 'templates',
                                 'gpuops-mig-geometry.service.j2')).read()
    assert "Before={{ (['nvidia-gpu-reset.target'] + gpu_node_sharing_mig_persist_before) | join(' ') }}" in template
