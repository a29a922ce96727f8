# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Defect 13: a kube-scheduler already started with the site's own --config (1.23+) or --policy-config-file
(below 1.23) is never pointed elsewhere silently: the extenders are merged into the site's file (its profiles,
plugins, clientConnection and apiVersion stay), or the change is refused naming that file. RKE1: cluster.yml's
kubernetes_version must match the version the role renders for."""
import copy
import os

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import adapters as A
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as R
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler.render import SchedulerConfigError

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'fixtures', 'scheduler')
OURS = '/etc/kubernetes/gpuops/scheduler-config.yaml'
SITE = '/etc/kubernetes/site/kube-scheduler-config.yaml'
GPUSHARE = {'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filter_verb': 'filter', 'bind_verb': 'bind',
            'node_cache_capable': True, 'managed_resources': ['aliyun.com/gpu-mem']}
SITE_DOC = {
    'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration',
    'clientConnection': {'kubeconfig': '/etc/kubernetes/site/scheduler.kubeconfig', 'qps': 100},
    'profiles': [{'schedulerName': 'default-scheduler',
                  'plugins': {'score': {'disabled': [{'name': 'NodeResourcesBalancedAllocation'}]}}},
                 {'schedulerName': 'bin-packing',
                  'pluginConfig': [{'name': 'NodeResourcesFit',
                                    'args': {'scoringStrategy': {'type': 'MostAllocated'}}}]}],
}


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return yaml.safe_load(f)


def manifest_with(*flags):
    doc = fixture('kubeadm-kube-scheduler.yaml')
    doc['spec']['containers'][0]['command'] += list(flags)
    return doc


# -------------------------------------------------------------------------------- adapters never replace silently
@pytest.mark.parametrize('version,flag', [('v1.29.4', '--config'), ('v1.37.0', '--config'),
                                          ('v1.21.14', '--policy-config-file')])
def test_adapters_refuse_to_repoint_the_sites_file(version, flag):
    """Before the fix the kubeadm/RKE2/RKE1 adapters replaced the site's flag value with ours."""
    ours = OURS if flag == '--config' else '/etc/kubernetes/gpuops/scheduler-policy.json'
    with pytest.raises(SchedulerConfigError) as err:
        A.kubeadm_manifest(manifest_with('%s=%s' % (flag, SITE)), version, ours)
    assert SITE in str(err.value) and 'merge' in str(err.value)
    with pytest.raises(SchedulerConfigError) as err:
        A.rke2_config({'kube-scheduler-arg': ['v=2', '%s=%s' % (flag[2:], SITE)]}, version, ours)
    assert SITE in str(err.value)
    rke1 = fixture('rke1-cluster.yml')
    rke1['kubernetes_version'] = version + '-rancher1-1'
    rke1['services']['scheduler']['extra_args'][flag[2:]] = SITE
    with pytest.raises(SchedulerConfigError) as err:
        A.rke1_cluster_yml(rke1, version, ours)
    assert SITE in str(err.value)


def test_current_flags_per_distribution():
    assert A.current_flags('kubeadm_manifest', manifest_with('--config=' + SITE)) == {'config': SITE}
    assert A.current_flags('rke2_config', {'kube-scheduler-arg': 'policy-config-file=/p.json'}) == {'policy-config-file': '/p.json'}
    rke1 = fixture('rke1-cluster.yml')
    rke1['services']['scheduler']['extra_args']['config'] = SITE
    assert A.current_flags('rke1_cluster_yml', rke1) == {'config': SITE}
    assert A.current_flags('rke2_config', None) == {}
    assert A.current_flags('kubeadm_manifest', fixture('kubeadm-kube-scheduler.yaml')) == {}


# -------------------------------------------------------------------------------- where the extenders go
def test_resolve_uses_the_sites_file_when_kube_scheduler_already_has_one():
    path, site_owned, notes = A.resolve_config_path('v1.30.2', {'config': SITE}, OURS)
    assert (path, site_owned) == (SITE, True) and SITE in notes[0]
    # our own file (an earlier run) stays ours
    assert A.resolve_config_path('v1.30.2', {'config': OURS}, OURS)[:2] == (OURS, False)
    assert A.resolve_config_path('v1.30.2', {}, OURS)[:2] == (OURS, False)
    # a Policy file below 1.23
    assert A.resolve_config_path('v1.20.15', {'policy-config-file': '/etc/kubernetes/site/policy.json'},
                                 '/etc/kubernetes/gpuops/scheduler-policy.json')[:2] == ('/etc/kubernetes/site/policy.json', True)
    # from 1.23 a leftover Policy flag is not a file of the site to merge into (kube-scheduler refuses the flag)
    assert A.resolve_config_path('v1.26.1', {'policy-config-file': '/p.json'}, OURS)[:2] == (OURS, False)


def test_resolve_refuses_an_explicit_other_path_and_config_below_123():
    with pytest.raises(SchedulerConfigError) as err:
        A.resolve_config_path('v1.30.2', {'config': SITE}, '/etc/kubernetes/gpuops/mine.yaml', explicit=True)
    assert SITE in str(err.value) and '/etc/kubernetes/gpuops/mine.yaml' in str(err.value)
    with pytest.raises(SchedulerConfigError) as err:
        A.resolve_config_path('v1.21.1', {'config': SITE}, '/etc/kubernetes/gpuops/scheduler-policy.json')
    assert SITE in str(err.value)


def test_merge_into_the_sites_file_keeps_it_in_charge():
    doc, notes = R.merge(copy.deepcopy(SITE_DOC), 'v1.30.2', [GPUSHARE], '/etc/kubernetes/scheduler.conf',
                         source=SITE, site_owned=True)
    assert doc['clientConnection'] == SITE_DOC['clientConnection']      # the site's kubeconfig and qps stay
    assert doc['profiles'] == SITE_DOC['profiles']
    assert [e['urlPrefix'] for e in doc['extenders']] == [GPUSHARE['url_prefix']]
    again, dummy = R.merge(doc, 'v1.30.2', [GPUSHARE], '/etc/kubernetes/scheduler.conf', source=SITE, site_owned=True)
    assert again == doc
    # a site file of an older apiVersion that the version still serves keeps it (no conversion of its profiles)
    old = dict(copy.deepcopy(SITE_DOC), apiVersion='kubescheduler.config.k8s.io/v1beta3')
    doc, notes = R.merge(old, 'v1.27.3', [GPUSHARE], '/etc/kubernetes/scheduler.conf', source=SITE, site_owned=True)
    assert doc['apiVersion'] == 'kubescheduler.config.k8s.io/v1beta3'
    # ... and refuses one the version no longer serves
    with pytest.raises(SchedulerConfigError) as err:
        R.merge(old, 'v1.29.0', [GPUSHARE], '/etc/kubernetes/scheduler.conf', source=SITE, site_owned=True)
    assert SITE in str(err.value) and 'v1beta3' in str(err.value)
    # a site file without clientConnection gets ours (kube-scheduler needs one), and a note says so
    bare = {'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration'}
    doc, notes = R.merge(bare, 'v1.30.2', [GPUSHARE], '/etc/kubernetes/scheduler.conf', source=SITE, site_owned=True)
    assert doc['clientConnection'] == {'kubeconfig': '/etc/kubernetes/scheduler.conf'}


def test_adapters_keep_the_sites_flag_and_mount():
    site_mount = {'mountPath': '/etc/kubernetes/site', 'name': 'site-config', 'readOnly': True}
    doc = manifest_with('--config=' + SITE)
    doc['spec']['containers'][0]['volumeMounts'].append(site_mount)
    doc['spec']['volumes'].append({'name': 'site-config', 'hostPath': {'path': '/etc/kubernetes/site'}})
    new, dummy = A.kubeadm_manifest(doc, 'v1.30.2', SITE, checksum='c1')
    cmd = new['spec']['containers'][0]['command']
    assert cmd.count('--config=' + SITE) == 1 and len(cmd) == len(doc['spec']['containers'][0]['command'])
    # the site already mounts the directory: no second mount at the same path (kubelet rejects duplicates)
    assert [m['mountPath'] for m in new['spec']['containers'][0]['volumeMounts']].count('/etc/kubernetes/site') == 1
    assert A.VOLUME_NAME not in [v['name'] for v in new['spec']['volumes']]
    rke2 = {'kube-scheduler-arg': ['config=' + SITE], 'kube-scheduler-extra-mount': ['/etc/kubernetes/site:/etc/kubernetes/site']}
    new, dummy = A.rke2_config(rke2, 'v1.30.2', SITE)
    assert new == rke2


# -------------------------------------------------------------------------------- RKE1 version
def test_rke1_refuses_a_version_that_differs_from_cluster_yml():
    """A 1.21 Policy flag on a 1.26 cluster stops kube-scheduler: cluster.yml's kubernetes_version decides."""
    old = fixture('rke1-cluster.yml')        # kubernetes_version: v1.26.15-rancher1-1
    with pytest.raises(SchedulerConfigError) as err:
        A.rke1_cluster_yml(old, 'v1.21.14', '/etc/kubernetes/gpuops/scheduler-policy.json')
    assert 'v1.26.15-rancher1-1' in str(err.value) and '1.21' in str(err.value) and 'kubernetes_version' in str(err.value)
    A.rke1_cluster_yml(old, 'v1.26.7', OURS)   # the patch level may differ
    del old['kubernetes_version']
    dummy, notes = A.rke1_cluster_yml(old, 'v1.26.7', OURS)
    assert any('kubernetes_version' in n for n in notes)
    old['kubernetes_version'] = 'latest'
    with pytest.raises(SchedulerConfigError):
        A.rke1_cluster_yml(old, 'v1.26.7', OURS)
