# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes distributions the collection configures, defined once: kubeadm, RKE1, RKE2 and k3s.

Plain Python (no Ansible imports, no other module_utils). scheduler/plan and scheduler/adapters derive
their mode and path tables from it; the role defaults that name the same paths and services
(kube_scheduler_extender_rke2_*, kube_scheduler_extender_kubeadm_manifest, nvidia_container_runtime_rke2_* and
_k3s_*) are compared with it by tests/unit/plugins/module_utils/_common/test_kube_distributions.py.

Upstream facts: docs/conformance/kube-scheduler.md (the scheduler layouts), docs/conformance/rke2-k3s.md (the
config.yaml files, services and containerd templates; k3s-io/k3s pkg/agent/templates).
"""

# name -> facts:
#   scheduler_mode     the kube_scheduler_config mode that edits the distribution's scheduler settings (None: the
#                      collection does not configure this distribution's scheduler)
#   scheduler_path     that mode's default file ('' when the user must name it: RKE1's cluster.yml)
#   own_dir            the collection's own directory for the scheduler extender file on a control-plane node
#   config_file        the distribution's config.yaml (server and agent)
#   server_service, agent_service   its systemd units that a role restarts (None: no role restarts it)
#   containerd_dir     where its containerd template lives (the file name depends on the config version)
KUBE_DISTRIBUTIONS = {
    'kubeadm': {'scheduler_mode': 'kubeadm_manifest', 'scheduler_path': '/etc/kubernetes/manifests/kube-scheduler.yaml',
                'own_dir': '/etc/kubernetes/gpuops', 'config_file': None, 'server_service': None,
                'agent_service': None, 'containerd_dir': None},
    'rke1': {'scheduler_mode': 'rke1_cluster_yml', 'scheduler_path': '', 'own_dir': '/etc/kubernetes/gpuops',
             'config_file': None, 'server_service': None, 'agent_service': None, 'containerd_dir': None},
    'rke2': {'scheduler_mode': 'rke2_config', 'scheduler_path': '/etc/rancher/rke2/config.yaml',
             'own_dir': '/etc/rancher/rke2/gpuops', 'config_file': '/etc/rancher/rke2/config.yaml',
             'server_service': 'rke2-server', 'agent_service': 'rke2-agent',
             'containerd_dir': '/var/lib/rancher/rke2/agent/etc/containerd'},
    'k3s': {'scheduler_mode': None, 'scheduler_path': '', 'own_dir': None, 'config_file': '/etc/rancher/k3s/config.yaml',
            'server_service': 'k3s', 'agent_service': 'k3s-agent',
            'containerd_dir': '/var/lib/rancher/k3s/agent/etc/containerd'},
}  # type: dict[str, dict]
# containerd config version -> the template file RKE2 / k3s render their containerd config from
CONTAINERD_TEMPLATES = {'2': 'config.toml.tmpl', '3': 'config-v3.toml.tmpl'}
# the file RKE2 / k3s render from that template at each start, in containerd_dir, for either config version: the
# config their embedded containerd runs with (docs/conformance/rke2-k3s.md RKE-11)
CONTAINERD_RENDERED = 'config.toml'
# kubeadm's ClusterConfiguration in the kubeadm-config ConfigMap: a mode of its own for the same distribution
EXTRA_SCHEDULER_MODES = {'kubeadm_configmap': 'kubeadm'}

SCHEDULER_DISTRIBUTIONS = tuple(n for n in ('rke1', 'rke2', 'kubeadm') if KUBE_DISTRIBUTIONS[n]['scheduler_mode'])
# mode -> distribution, distribution -> its mode, mode -> default path, distribution -> own directory
MODE_DISTRIBUTION = dict([(KUBE_DISTRIBUTIONS[n]['scheduler_mode'], n) for n in SCHEDULER_DISTRIBUTIONS]
                         + list(EXTRA_SCHEDULER_MODES.items()))
DISTRIBUTION_MODE = dict((n, KUBE_DISTRIBUTIONS[n]['scheduler_mode']) for n in SCHEDULER_DISTRIBUTIONS)
SCHEDULER_DEFAULT_PATHS = dict((KUBE_DISTRIBUTIONS[n]['scheduler_mode'], KUBE_DISTRIBUTIONS[n]['scheduler_path'])
                               for n in SCHEDULER_DISTRIBUTIONS if KUBE_DISTRIBUTIONS[n]['scheduler_path'])
OWN_DIRS = dict((n, KUBE_DISTRIBUTIONS[n]['own_dir']) for n in SCHEDULER_DISTRIBUTIONS)


def containerd_rendered_configs():
    # type: () -> list
    """The containerd configs RKE2 and k3s render for their embedded containerd (absolute paths)."""
    return [d['containerd_dir'] + '/' + CONTAINERD_RENDERED for n, d in sorted(KUBE_DISTRIBUTIONS.items())
            if d['containerd_dir']]


def containerd_template(name, config_version):
    # type: (str, str) -> str
    """The containerd template path of RKE2 or k3s for a containerd config version ('2' or '3')."""
    return KUBE_DISTRIBUTIONS[name]['containerd_dir'] + '/' + CONTAINERD_TEMPLATES[str(config_version)]
