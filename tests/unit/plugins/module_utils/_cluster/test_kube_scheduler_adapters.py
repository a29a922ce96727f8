# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Distribution adapters on real-world files: RKE1 cluster.yml, RKE2 config.yaml, kubeadm manifest and kubeadm-config."""
import copy
import os

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import adapters as A
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler.render import SchedulerConfigError

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'fixtures', 'scheduler')
CFG = '/etc/kubernetes/gpuops/scheduler-config.yaml'


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return yaml.safe_load(f)


def without(doc, *paths):
    """A copy of doc with the given dotted paths removed, to compare 'everything else'."""
    doc = copy.deepcopy(doc)
    for path in paths:
        parts = path.split('.')
        cur = doc
        for p in parts[:-1]:
            cur = cur.get(p, {})
        cur.pop(parts[-1], None)
    return doc


# ------------------------------------------------------------------------------------------------ RKE1
def test_rke1_sets_config_and_keeps_everything_else():
    old = fixture('rke1-cluster.yml')
    new, notes = A.rke1_cluster_yml(old, 'v1.26.15-rancher1-1', CFG, checksum='abc')
    sched = new['services']['scheduler']
    assert sched['extra_args'] == {'v': '2', 'config': CFG}
    assert sched['extra_binds'] == []          # /etc/kubernetes is bound by RKE already
    assert sched['extra_env'] == ['GPUOPS_SCHEDULER_CONFIG_CHECKSUM=abc']
    assert without(new, 'services.scheduler') == without(old, 'services.scheduler')
    assert new['private_registries'][0]['password'] == 's3cr3t' and notes == []
    assert old['services']['scheduler']['extra_args'] == {'v': '2'}   # input untouched
    again, dummy = A.rke1_cluster_yml(new, 'v1.26.15', CFG, checksum='abc')
    assert again == new


def test_rke1_bind_outside_etc_kubernetes_and_policy_below_123():
    old = fixture('rke1-cluster.yml')
    old['kubernetes_version'] = 'v1.20.15-rancher2-2'     # cluster.yml's version must match (defect 13)
    new, dummy = A.rke1_cluster_yml(old, 'v1.20.15', '/opt/gpuops/scheduler-policy.json')
    sched = new['services']['scheduler']
    assert sched['extra_args'] == {'v': '2', 'policy-config-file': '/opt/gpuops/scheduler-policy.json'}
    assert sched['extra_binds'] == ['/opt/gpuops:/opt/gpuops:ro']
    assert 'extra_env' in sched and sched['extra_env'] == []
    # upgrade across 1.23: the Policy flag goes, the bind stays single
    new['kubernetes_version'] = 'v1.24.17-rancher1-1'
    up, notes = A.rke1_cluster_yml(new, 'v1.24.17', '/opt/gpuops/scheduler-config.yaml')
    assert up['services']['scheduler']['extra_args'] == {'v': '2', 'config': '/opt/gpuops/scheduler-config.yaml'}
    assert up['services']['scheduler']['extra_binds'] == ['/opt/gpuops:/opt/gpuops:ro']
    assert 'policy-config-file' in notes[0]


def test_rke1_without_services_and_refusals():
    new, dummy = A.rke1_cluster_yml({'nodes': []}, '1.29', CFG)
    assert new['services'] == {'scheduler': {'extra_args': {'config': CFG}}}
    with pytest.raises(SchedulerConfigError, match='RKE1 cluster.yml'):
        A.rke1_cluster_yml({'token': 'x'}, '1.29', CFG)
    with pytest.raises(SchedulerConfigError, match='extra_args is not a mapping'):
        A.rke1_cluster_yml({'services': {'scheduler': {'extra_args': ['a']}}}, '1.29', CFG)
    with pytest.raises(SchedulerConfigError, match='ignores next to --config'):
        A.rke1_cluster_yml({'services': {'scheduler': {'extra_args': {'config': '/x/y.yaml'}}}}, '1.21', CFG)


@pytest.mark.parametrize('path', ['relative/x.yaml', '/x.yaml', '/etc/kubernetes/../x.yaml', '/etc/kubernetes/'])
def test_config_path_refused(path):
    with pytest.raises(SchedulerConfigError, match='config_path'):
        A.rke1_cluster_yml({'nodes': []}, '1.29', path)


# ------------------------------------------------------------------------------------------------ RKE2
def test_rke2_appends_ours_and_keeps_other_args():
    old = fixture('rke2-config.yaml')
    cfg = '/etc/rancher/rke2/gpuops/scheduler-config.yaml'
    new, notes = A.rke2_config(old, 'v1.28.9+rke2r1', cfg)
    assert new['kube-scheduler-arg'] == ['v=2', 'bind-address=0.0.0.0', 'config=' + cfg]
    assert new['kube-scheduler-extra-mount'] == ['/etc/rancher/rke2/gpuops:/etc/rancher/rke2/gpuops:ro']
    assert without(new, 'kube-scheduler-arg', 'kube-scheduler-extra-mount') == without(old, 'kube-scheduler-arg')
    again, dummy = A.rke2_config(new, 'v1.28.9+rke2r1', cfg)
    assert again == new and notes == []


def test_rke2_replaces_our_entries_only_and_accepts_strings():
    # (a --config naming another file is the site's and is refused: test_kube_scheduler_site_config.py)
    old = {'kube-scheduler-arg': 'v=2', 'kube-scheduler-extra-mount': ['/data:/data', '/srv/g:/etc/rancher/rke2/gpuops']}
    new, dummy = A.rke2_config(old, '1.30', '/etc/rancher/rke2/gpuops/s.yaml')
    assert new['kube-scheduler-arg'] == ['v=2', 'config=/etc/rancher/rke2/gpuops/s.yaml']
    assert new['kube-scheduler-extra-mount'] == ['/data:/data', '/etc/rancher/rke2/gpuops:/etc/rancher/rke2/gpuops:ro']
    empty, dummy = A.rke2_config(None, '1.30', '/etc/rancher/rke2/gpuops/s.yaml')
    assert set(empty) == {'kube-scheduler-arg', 'kube-scheduler-extra-mount'}
    with pytest.raises(SchedulerConfigError, match='kube-scheduler-arg must be a list'):
        A.rke2_config({'kube-scheduler-arg': {'a': 1}}, '1.30', '/etc/x/s.yaml')


def test_rke2_drops_policy_flags_from_123():
    old = {'kube-scheduler-arg': ['policy-config-file=/etc/p.json', 'use-legacy-policy-config=true', 'v=3']}
    new, notes = A.rke2_config(old, '1.23', '/etc/rancher/rke2/gpuops/s.yaml')
    assert new['kube-scheduler-arg'] == ['v=3', 'config=/etc/rancher/rke2/gpuops/s.yaml']
    assert '--policy-config-file, --use-legacy-policy-config' in notes[0]


# ------------------------------------------------------------------------------------------------ kubeadm
def test_kubeadm_manifest_flag_volume_mount_annotation():
    old = fixture('kubeadm-kube-scheduler.yaml')
    new, notes = A.kubeadm_manifest(old, 'v1.29.4', CFG, checksum='sum1')
    ctr = new['spec']['containers'][0]
    assert ctr['command'][:6] == old['spec']['containers'][0]['command']
    assert ctr['command'][6] == '--config=' + CFG and len(ctr['command']) == 7
    assert ctr['volumeMounts'][1] == {'mountPath': '/etc/kubernetes/gpuops', 'name': 'gpuops-scheduler-config', 'readOnly': True}
    assert new['spec']['volumes'][1] == {'hostPath': {'path': '/etc/kubernetes/gpuops', 'type': 'DirectoryOrCreate'},
                                         'name': 'gpuops-scheduler-config'}
    assert new['metadata']['annotations'] == {'gpuops.io/scheduler-config-checksum': 'sum1'}
    for key in ('livenessProbe', 'startupProbe', 'image', 'resources'):
        assert ctr[key] == old['spec']['containers'][0][key]
    assert new['spec']['priorityClassName'] == 'system-node-critical' and new['status'] == {}
    again, dummy = A.kubeadm_manifest(new, 'v1.29.4', CFG, checksum='sum1')
    assert again == new and notes == []
    changed, dummy = A.kubeadm_manifest(new, 'v1.29.4', CFG, checksum='sum2')
    assert changed['metadata']['annotations']['gpuops.io/scheduler-config-checksum'] == 'sum2'
    assert changed['spec'] == new['spec']


def test_kubeadm_manifest_refusals():
    old = fixture('kubeadm-kube-scheduler.yaml')
    with pytest.raises(SchedulerConfigError, match="no container named 'sched'"):
        A.kubeadm_manifest(old, '1.29', CFG, container='sched')
    with pytest.raises(SchedulerConfigError, match='not a Pod'):
        A.kubeadm_manifest({'kind': 'Deployment'}, '1.29', CFG)


def test_kubeadm_configmap_v1beta3_map_form():
    cm = fixture('kubeadm-config-configmap.yaml')
    old = yaml.safe_load(cm['data']['ClusterConfiguration'])
    new, dummy = A.kubeadm_cluster_configuration(old, 'v1.29.4', CFG)
    assert new['scheduler'] == {
        'extraArgs': {'v': '2', 'config': CFG},
        'extraVolumes': [{'name': 'gpuops-scheduler-config', 'hostPath': '/etc/kubernetes/gpuops',
                          'mountPath': '/etc/kubernetes/gpuops', 'readOnly': True, 'pathType': 'DirectoryOrCreate'}]}
    assert without(new, 'scheduler') == without(old, 'scheduler')
    assert A.kubeadm_cluster_configuration(new, 'v1.29.4', CFG)[0] == new


def test_kubeadm_configmap_v1beta4_list_form_drops_policy_flag():
    old = fixture('kubeadm-cluster-configuration-v1beta4.yaml')
    new, notes = A.kubeadm_cluster_configuration(old, 'v1.31.2', CFG)
    assert new['scheduler']['extraArgs'] == [{'name': 'v', 'value': '2'}, {'name': 'config', 'value': CFG}]
    assert 'policy-config-file' in notes[0]
    assert new['apiServer'] == old['apiServer']


def test_kubeadm_configmap_refusals():
    with pytest.raises(SchedulerConfigError, match='not a kubeadm ClusterConfiguration'):
        A.kubeadm_cluster_configuration({'kind': 'InitConfiguration'}, '1.29', CFG)
    with pytest.raises(SchedulerConfigError, match='kubeadm.k8s.io/v1beta1.*allowed'):
        A.kubeadm_cluster_configuration({'kind': 'ClusterConfiguration', 'apiVersion': 'kubeadm.k8s.io/v1beta1'}, '1.29', CFG)
    with pytest.raises(SchedulerConfigError, match='must be a list of name/value'):
        A.kubeadm_cluster_configuration({'kind': 'ClusterConfiguration', 'apiVersion': 'kubeadm.k8s.io/v1beta4',
                                         'scheduler': {'extraArgs': {'v': '2'}}}, '1.31', CFG)
