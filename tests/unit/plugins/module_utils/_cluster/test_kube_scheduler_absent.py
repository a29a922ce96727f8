# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""state=absent of the scheduler config: each adapter undoes exactly what it added (round trip on real-world files)."""
import os

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import adapters as A
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as R

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'fixtures', 'scheduler')
CFG = '/etc/kubernetes/gpuops/scheduler-config.yaml'
GPUSHARE = {'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filter_verb': 'filter', 'bind_verb': 'bind'}


def load(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize('version', ['v1.29.4', 'v1.22.17'])
def test_kubeadm_manifest_round_trip(version):
    orig = load('kubeadm-kube-scheduler.yaml')
    added, _n = A.kubeadm_manifest(orig, version, CFG, 'abc')
    assert added != orig
    removed, _n = A.kubeadm_manifest_absent(added, CFG)
    assert removed == orig
    assert A.kubeadm_manifest_absent(orig, CFG)[0] == orig


def test_kubeadm_manifest_absent_keeps_a_foreign_config_flag():
    orig = load('kubeadm-kube-scheduler.yaml')
    orig['spec']['containers'][0]['command'].append('--config=/etc/kubernetes/site-scheduler.yaml')
    assert A.kubeadm_manifest_absent(orig, CFG)[0] == orig


def test_rke1_and_rke2_round_trip():
    for name, add, remove in (('rke1-cluster.yml', lambda d: A.rke1_cluster_yml(d, 'v1.26.15', '/opt/gpuops/s.yaml', 'x')[0],
                               lambda d: A.rke1_cluster_yml_absent(d, '/opt/gpuops/s.yaml')[0]),
                              ('rke2-config.yaml', lambda d: A.rke2_config(d, 'v1.28.9+rke2r1', '/etc/rancher/rke2/gpuops/s.yaml')[0],
                               lambda d: A.rke2_config_absent(d, '/etc/rancher/rke2/gpuops/s.yaml')[0])):
        orig = load(name)
        added = add(orig)
        assert added != orig
        assert remove(added) == orig, name
    assert A.rke2_config_absent(None, '/etc/rancher/rke2/gpuops/s.yaml')[0] is None


def test_kubeadm_cluster_configuration_round_trip():
    for name in ('kubeadm-cluster-configuration-v1beta4.yaml',):
        orig = load(name)
        added, _n = A.kubeadm_cluster_configuration(orig, 'v1.31.1', CFG)
        # the Policy flag removed for 1.23+ is not brought back (it would stop kube-scheduler from starting)
        orig['scheduler']['extraArgs'] = [a for a in orig['scheduler']['extraArgs'] if a['name'] != 'policy-config-file']
        assert A.kubeadm_cluster_configuration_absent(added, CFG)[0] == orig
    cm = load('kubeadm-config-configmap.yaml')
    orig = yaml.safe_load(cm['data']['ClusterConfiguration'])
    added, _n = A.kubeadm_cluster_configuration(orig, 'v1.29.4', CFG)
    assert A.kubeadm_cluster_configuration_absent(added, CFG)[0] == orig


def test_remove_extenders_keeps_others_and_says_when_only_the_skeleton_is_left():
    doc = R.render('v1.29.4', [GPUSHARE], '/etc/kubernetes/scheduler.conf')
    new, skeleton = R.remove_extenders(doc, ['http://127.0.0.1:32766/gpushare-scheduler/'])
    assert skeleton is True and 'extenders' not in new
    other = {'urlPrefix': 'http://hami:443/scheduler', 'filterVerb': 'filter'}
    doc = R.merge({'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration',
                   'profiles': [{'schedulerName': 'default-scheduler'}], 'extenders': [other]},
                  'v1.29.4', [GPUSHARE], '/etc/kubernetes/scheduler.conf')[0]
    new, skeleton = R.remove_extenders(doc, [GPUSHARE['url_prefix']])
    assert skeleton is False and new['extenders'] == [other] and new['profiles'] == [{'schedulerName': 'default-scheduler'}]
    assert R.remove_extenders(None, ['x']) == (None, True)
    with pytest.raises(R.SchedulerConfigError):
        R.remove_extenders({'extenders': 'nope'}, ['x'])
