# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/conformance/kube-scheduler.md: one test per row (KS-NN)."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as R
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler.render import SchedulerConfigError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions as KV

KUBECONFIG = '/etc/kubernetes/scheduler.conf'
# kube-scheduler config/v1 Extender's JSON names (docs/conformance/kube-scheduler.md, KS-02)
UPSTREAM_EXTENDER_FIELDS = {'urlPrefix', 'filterVerb', 'preemptVerb', 'prioritizeVerb', 'weight', 'bindVerb',
                            'enableHTTPS', 'tlsConfig', 'httpTimeout', 'nodeCacheCapable', 'managedResources',
                            'ignorable'}
FULL = {'url_prefix': 'https://ext.example:8443/x', 'filter_verb': 'filter', 'prioritize_verb': 'prioritize',
        'preempt_verb': 'preempt', 'bind_verb': 'bind', 'weight': 3, 'enable_https': True, 'http_timeout': '1500ms',
        'node_cache_capable': True, 'managed_resources': [{'name': 'example.com/gpu-mem', 'ignored_by_scheduler': True}],
        'ignorable': True}


def test_KS_01_api_version_per_minor_through_max_minor():
    # every accepted minor, from the home (kube_versions: MIN_MINOR .. MAX_MINOR), and the first one past each end
    for minor in range(KV.MIN_MINOR, KV.MAX_MINOR + 1):
        api = R.api_for_version('1.%d' % minor)
        want = ('v1' if minor < 23 else R.KSC_GROUP + '/v1beta3' if minor < 25 else R.KSC_GROUP + '/v1')
        assert api['apiVersion'] == want
        assert R.served(api['apiVersion'], minor) or api['kind'] == R.POLICY
        assert (R.eol_note('1.%d' % minor) is None) == (minor >= 24)
    assert not R.served(R.KSC_GROUP + '/v1beta3', 29)
    for bad in ('1.%d' % (KV.MAX_MINOR + 1), '1.%d' % (KV.MIN_MINOR - 1)):
        with pytest.raises(SchedulerConfigError):
            R.api_for_version(bad)


def test_KS_02_extender_fields_are_upstream_names():
    doc = R.render('v1.37.0', [FULL], KUBECONFIG)
    ext = doc['extenders'][0]
    assert set(ext) <= UPSTREAM_EXTENDER_FIELDS
    assert ext['httpTimeout'] == '1500ms' and ext['enableHTTPS'] is True
    assert ext['managedResources'] == [{'name': 'example.com/gpu-mem', 'ignoredByScheduler': True}]


def test_KS_03_prioritize_needs_positive_weight():
    assert R.normalize_extenders([{'url_prefix': 'http://a', 'prioritize_verb': 'p'}])[0]['weight'] == 1
    for weight in (0, -2):
        with pytest.raises(SchedulerConfigError, match='weight'):
            R.normalize_extenders([{'url_prefix': 'http://a', 'prioritize_verb': 'p', 'weight': weight}])
    with pytest.raises(SchedulerConfigError, match='prioritize_verb'):
        R.normalize_extenders([{'url_prefix': 'http://a', 'filter_verb': 'f', 'weight': 2}])


def test_KS_04_one_binder_after_merge():
    with pytest.raises(SchedulerConfigError, match='only one extender'):
        R.normalize_extenders([{'url_prefix': 'http://a', 'bind_verb': 'b'}, {'url_prefix': 'http://c', 'bind_verb': 'b'}])
    existing = R.render('1.30', [{'url_prefix': 'http://other', 'bind_verb': 'bind'}], KUBECONFIG)
    with pytest.raises(SchedulerConfigError, match='bindVerb'):
        R.merge(existing, '1.30', [{'url_prefix': 'http://ours', 'bind_verb': 'bind'}], KUBECONFIG)


def test_KS_05_managed_resources_unique_across_extenders():
    with pytest.raises(SchedulerConfigError, match='already managed'):
        R.normalize_extenders([{'url_prefix': 'http://a', 'filter_verb': 'f', 'managed_resources': ['example.com/r']},
                               {'url_prefix': 'http://b', 'filter_verb': 'f', 'managed_resources': ['example.com/r']}])
    with pytest.raises(SchedulerConfigError, match='extended resource'):
        R.normalize_extenders([{'url_prefix': 'http://a', 'filter_verb': 'f', 'managed_resources': ['kubernetes.io/r']}])
    existing = R.render('1.30', [{'url_prefix': 'http://other', 'filter_verb': 'f', 'managed_resources': ['example.com/r']}],
                        KUBECONFIG)
    with pytest.raises(SchedulerConfigError, match='two'):
        R.merge(existing, '1.30', [{'url_prefix': 'http://ours', 'filter_verb': 'f', 'managed_resources': ['example.com/r']}],
                KUBECONFIG)


def test_KS_06_site_profiles_untouched():
    site = {'apiVersion': R.KSC_GROUP + '/v1', 'kind': R.KSC, 'clientConnection': {'kubeconfig': '/site.conf'},
            'profiles': [{'schedulerName': 'default-scheduler', 'plugins': {'multiPoint': {'disabled': [{'name': '*'}]}}},
                         {'schedulerName': 'gpu', 'pluginConfig': [{'name': 'NodeResourcesFit', 'args': {}}]}]}
    doc, notes = R.merge(site, '1.37', [FULL], KUBECONFIG, source='/site.yaml', site_owned=True)
    assert doc['profiles'] == site['profiles'] and 'extenders' not in doc['profiles'][0]
    assert len(doc['extenders']) == 1


def test_KS_07_client_connection_kubeconfig():
    assert R.render('1.33', [FULL], KUBECONFIG)['clientConnection'] == {'kubeconfig': KUBECONFIG}
    ours = R.render('1.33', [FULL], '/old.conf')
    assert R.merge(ours, '1.33', [FULL], KUBECONFIG)[0]['clientConnection']['kubeconfig'] == KUBECONFIG
    site = dict(ours, clientConnection={'kubeconfig': '/site.conf', 'qps': 50})
    doc = R.merge(site, '1.33', [FULL], KUBECONFIG, site_owned=True)[0]
    assert doc['clientConnection'] == {'kubeconfig': '/site.conf', 'qps': 50}


def test_KS_08_filter_only_extender_beside_a_binder():
    # gpu-admission's entry (filter only, managedResources, nodeCacheCapable false) joins a file that already holds
    # gpushare's binding extender: both kept, one binder, every field as kube-scheduler reads it (v1 and a Policy)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpu_manager as gm
    adm = gm.extender_entry({'admission_registration': 'host-network', 'admission_cluster_ip': '', 'admission_port': 3456})
    share = {'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filter_verb': 'filter', 'bind_verb': 'bind',
             'node_cache_capable': True, 'managed_resources': [{'name': 'aliyun.com/gpu-mem', 'ignored_by_scheduler': False}]}
    existing = R.render('1.37', [share], KUBECONFIG)
    doc, dummy = R.merge(existing, '1.37', [adm], KUBECONFIG)
    assert [e['urlPrefix'] for e in doc['extenders']] == ['http://127.0.0.1:32766/gpushare-scheduler',
                                                          'http://127.0.0.1:3456/scheduler']
    ours = doc['extenders'][1]
    assert set(ours) <= UPSTREAM_EXTENDER_FIELDS
    assert ours['filterVerb'] == 'predicates' and 'bindVerb' not in ours and ours['nodeCacheCapable'] is False
    assert ours['ignorable'] is False
    assert [r['name'] for r in ours['managedResources']] == ['tencent.com/vcuda-core', 'tencent.com/vcuda-memory']
    policy = R.render('1.22', [share, adm])
    assert policy['kind'] == R.POLICY and policy['extenders'][1]['filterVerb'] == 'predicates'
