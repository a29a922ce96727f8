# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube-scheduler extender config: version windows, extender validation, rendering and merging."""
import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as R
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler.render import SchedulerConfigError
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions as KV

GPUSHARE = dict(R.GPUSHARE_EXTENDER)
OTHER = {'url_prefix': 'http://volcano.example:8080/ext', 'prioritize_verb': 'prioritize', 'weight': 5,
         'http_timeout': '1.5s', 'ignorable': True}

# upstream: Policy up to 1.22; v1beta3 1.23-1.28; v1 from 1.25 (KEP-785); this collection: v1beta3 for 1.23-1.24
SERVED = {'v1beta3': range(23, 29), 'v1': range(25, 34)}


@pytest.mark.parametrize('minor', range(16, 34))
def test_api_window_per_version(minor):
    api = R.api_for_version('v1.%d.3' % minor)
    if minor <= 22:
        assert (api['kind'], api['apiVersion'], api['flag'], api['format']) == ('Policy', 'v1', 'policy-config-file', 'json')
    elif minor <= 24:
        assert (api['kind'], api['apiVersion'], api['flag']) == ('KubeSchedulerConfiguration', 'kubescheduler.config.k8s.io/v1beta3', 'config')
    else:
        assert api['apiVersion'] == 'kubescheduler.config.k8s.io/v1'
    if api['kind'] == 'KubeSchedulerConfiguration':
        # the rendered version is served by that kube-scheduler
        assert minor in SERVED[api['apiVersion'].split('/')[1]]
        first, last = R.SERVED_WINDOWS[api['apiVersion'].split('/')[1]]
        assert first <= minor and (last is None or minor <= last)


@pytest.mark.parametrize('text,expected', [('v1.29.4', (1, 29)), ('1.23', (1, 23)), ('v1.28.9+rke2r1', (1, 28)),
                                           ('v1.26.15-rancher1-1', (1, 26)), (' 1.33.0 ', (1, 33)), ('v1.37.1', (1, 37))])
def test_parse_version(text, expected):
    assert R.parse_version(text) == expected


# the first minor past the range comes from the home (kube_versions.MAX_MINOR + 1), not a literal
@pytest.mark.parametrize('text', ['v1.%d.12' % (KV.MIN_MINOR - 1), '1.%d' % (KV.MAX_MINOR + 1), 'v2.1', 'latest', '',
                                  None, '1'])
def test_unsupported_versions_are_refused_naming_the_option(text):
    with pytest.raises(SchedulerConfigError) as err:
        R.parse_version(text)
    assert 'kubernetes_version' in str(err.value)
    assert '1.%d-1.%d' % (KV.MIN_MINOR, KV.MAX_MINOR) in str(err.value)


def test_render_v1_gpushare():
    doc = R.render('v1.29.4', [GPUSHARE], '/etc/kubernetes/scheduler.conf')
    assert doc == {
        'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration',
        'clientConnection': {'kubeconfig': '/etc/kubernetes/scheduler.conf'},
        'extenders': [{'urlPrefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filterVerb': 'filter',
                       'bindVerb': 'bind', 'enableHTTPS': False, 'nodeCacheCapable': True,
                       'managedResources': [{'name': 'aliyun.com/gpu-mem', 'ignoredByScheduler': False}],
                       'ignorable': False}]}


def test_render_v1beta3_several_extenders_all_fields():
    doc = R.render('1.24', [GPUSHARE, OTHER], R.KUBECONFIGS['rke2'])
    assert doc['apiVersion'] == 'kubescheduler.config.k8s.io/v1beta3'
    assert doc['clientConnection']['kubeconfig'] == '/var/lib/rancher/rke2/server/cred/scheduler.kubeconfig'
    assert doc['extenders'][1] == {'urlPrefix': 'http://volcano.example:8080/ext', 'prioritizeVerb': 'prioritize',
                                   'weight': 5, 'enableHTTPS': False, 'httpTimeout': '1500ms',
                                   'nodeCacheCapable': False, 'ignorable': True}


def test_render_policy_json_fields():
    doc = R.render('v1.20.15', [GPUSHARE, dict(OTHER, http_timeout='30s')])
    assert doc['kind'] == 'Policy' and doc['apiVersion'] == 'v1'
    assert 'clientConnection' not in doc
    ext = doc['extenders'][0]
    assert ext['enableHttps'] is False and 'enableHTTPS' not in ext
    assert ext['managedResources'] == [{'name': 'aliyun.com/gpu-mem', 'ignoredByScheduler': False}]
    assert doc['extenders'][1]['httpTimeout'] == 30 * 10 ** 9   # Go time.Duration in the legacy Policy
    assert json.loads(R.dump(doc, 'json')) == doc


def test_kubeconfig_per_distribution():
    assert R.kubeconfig_for('rke1') == '/etc/kubernetes/ssl/kubecfg-kube-scheduler.yaml'
    assert R.kubeconfig_for('rke2') == '/var/lib/rancher/rke2/server/cred/scheduler.kubeconfig'
    assert R.kubeconfig_for('kubeadm') == '/etc/kubernetes/scheduler.conf'
    assert R.kubeconfig_for('k3s', '/x/y') == '/x/y'
    with pytest.raises(SchedulerConfigError, match='distribution.*rke1, rke2'):
        R.kubeconfig_for('k3s')


def test_managed_resources_as_plain_names():
    norm = R.normalize_extenders([{'url_prefix': 'https://e.example/x/', 'filter_verb': 'f', 'enable_https': True,
                                   'managed_resources': ['aliyun.com/gpu-mem', {'name': 'nvidia.com/gpu', 'ignored_by_scheduler': True}]}])
    assert norm[0]['url_prefix'] == 'https://e.example/x'
    assert norm[0]['managed_resources'] == [{'name': 'aliyun.com/gpu-mem', 'ignored_by_scheduler': False},
                                            {'name': 'nvidia.com/gpu', 'ignored_by_scheduler': True}]


@pytest.mark.parametrize('extenders,pattern', [
    ([], 'non-empty list'),
    ('x', 'non-empty list'),
    (['x'], r'extenders\[0\]: .* is not a dict'),
    ([{'url_prefix': 'ftp://x', 'filter_verb': 'f'}], r'extenders\[0\]\.url_prefix.*http'),
    ([{'filter_verb': 'f'}], r'url_prefix: None'),
    ([{'url_prefix': 'http://x'}], 'at least one of filter_verb'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'colour': 1}], 'unknown key.*colour'),
    ([{'url_prefix': 'http://x', 'prioritize_verb': 'p', 'weight': 0}], r'weight: 0 must be a positive'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'weight': 2}], 'only meaningful with prioritize_verb'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f bad'}], 'not a valid verb'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'http_timeout': '30'}], 'http_timeout.*not a duration'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'enable_https': True}], 'needs an https'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'ignorable': 'yes'}], 'ignorable.*not a boolean'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'managed_resources': ['gpu-mem']}], 'not an extended resource name'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'managed_resources': ['kubernetes.io/gpu']}], 'outside kubernetes.io'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f', 'managed_resources': ['a.io/x', 'a.io/x']}], 'listed twice'),
    ([{'url_prefix': 'http://x', 'filter_verb': 'f'}, {'url_prefix': 'http://x/', 'filter_verb': 'g'}], 'listed twice'),
    ([{'url_prefix': 'http://x', 'bind_verb': 'b'}, {'url_prefix': 'http://y', 'bind_verb': 'b'}], 'only one extender may implement bind'),
])
def test_malformed_extenders(extenders, pattern):
    with pytest.raises(SchedulerConfigError, match=pattern):
        R.normalize_extenders(extenders)


EXISTING_V1 = {
    'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration',
    'clientConnection': {'kubeconfig': '/old', 'qps': 50},
    'leaderElection': {'leaderElect': True},
    'profiles': [{'schedulerName': 'default-scheduler'},
                 {'schedulerName': 'bin-packing', 'pluginConfig': [{'name': 'NodeResourcesFit', 'args': {
                     'scoringStrategy': {'type': 'MostAllocated'}}}]}],
    'extenders': [{'urlPrefix': 'http://other:1/x', 'filterVerb': 'filter'},
                  {'urlPrefix': 'http://127.0.0.1:32766/gpushare-scheduler/', 'filterVerb': 'old'}],
}


def test_merge_keeps_profiles_and_other_extenders_and_replaces_ours_in_place():
    doc, notes = R.merge(EXISTING_V1, 'v1.30.1', [GPUSHARE, OTHER], '/etc/kubernetes/scheduler.conf')
    assert notes == []
    assert doc['profiles'] == EXISTING_V1['profiles'] and doc['leaderElection'] == {'leaderElect': True}
    assert doc['clientConnection'] == {'kubeconfig': '/etc/kubernetes/scheduler.conf', 'qps': 50}
    assert [e['urlPrefix'] for e in doc['extenders']] == ['http://other:1/x', 'http://127.0.0.1:32766/gpushare-scheduler',
                                                          'http://volcano.example:8080/ext']
    assert doc['extenders'][1]['filterVerb'] == 'filter'
    assert EXISTING_V1['extenders'][1]['filterVerb'] == 'old'   # input untouched
    again, dummy = R.merge(doc, 'v1.30.1', [GPUSHARE, OTHER], '/etc/kubernetes/scheduler.conf')
    assert again == doc


def test_merge_moves_served_apiversion_and_says_so():
    old = dict(EXISTING_V1, apiVersion='kubescheduler.config.k8s.io/v1beta3')
    doc, notes = R.merge(old, '1.25', [GPUSHARE], 'k')
    assert doc['apiVersion'] == 'kubescheduler.config.k8s.io/v1'
    assert 'v1beta3 changed to kubescheduler.config.k8s.io/v1' in notes[0]


def test_merge_policy_keeps_predicates():
    old = {'kind': 'Policy', 'apiVersion': 'v1', 'predicates': [{'name': 'PodFitsResources'}],
           'priorities': [{'name': 'LeastRequestedPriority', 'weight': 1}], 'hardPodAffinitySymmetricWeight': 10}
    doc, dummy = R.merge(old, '1.18', [GPUSHARE])
    assert doc['predicates'] == old['predicates'] and doc['hardPodAffinitySymmetricWeight'] == 10
    assert doc['extenders'][0]['urlPrefix'] == GPUSHARE['url_prefix']


@pytest.mark.parametrize('existing,version,pattern', [
    ({'kind': 'Policy', 'apiVersion': 'v1'}, '1.29', "holds kind 'Policy' but Kubernetes 1.29 needs a KubeSchedulerConfiguration"),
    (EXISTING_V1, '1.22', 'needs a Policy'),
    (['a'], '1.29', 'not a mapping'),
    (dict(EXISTING_V1, extenders={'a': 1}), '1.29', 'extenders is not a list'),
    (dict(EXISTING_V1, extenders=[{'urlPrefix': 'http://b', 'bindVerb': 'bind'}]), '1.29', 'allows one'),
])
def test_merge_refusals(existing, version, pattern):
    with pytest.raises(SchedulerConfigError, match=pattern):
        R.merge(existing, version, [GPUSHARE], 'k', source='the file')


def test_render_ksc_needs_kubeconfig():
    with pytest.raises(SchedulerConfigError, match='kubeconfig: required'):
        R.render('1.29', [GPUSHARE])


def test_load_and_dump():
    assert R.load('', 'yaml', 'x') is None
    assert R.load('{"kind": "Policy"}', 'json', 'x') == {'kind': 'Policy'}
    with pytest.raises(SchedulerConfigError, match='x cannot be parsed as YAML'):
        R.load('a: [', 'yaml', 'x')
    with pytest.raises(SchedulerConfigError, match='2 YAML documents'):
        R.load('a: 1\n---\nb: 2\n', 'yaml', 'x')
    doc = R.render('1.29', [GPUSHARE], 'k')
    text = R.dump(doc, 'yaml')
    assert text.startswith('apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n')
    assert R.load(text, 'yaml', 'x') == doc


def test_structural_shape_of_every_rendered_ksc():
    """No schema for kubescheduler.config.k8s.io ships with kubernetes-validate: check the fields by hand."""
    allowed = {'urlPrefix', 'filterVerb', 'prioritizeVerb', 'preemptVerb', 'bindVerb', 'weight', 'enableHTTPS',
               'tlsConfig', 'httpTimeout', 'nodeCacheCapable', 'managedResources', 'ignorable'}
    for minor in range(23, 34):
        doc = R.render('1.%d' % minor, [GPUSHARE, OTHER], 'k')
        assert set(doc) == {'apiVersion', 'kind', 'clientConnection', 'extenders'}
        for ext in doc['extenders']:
            assert set(ext) <= allowed
            assert isinstance(ext['nodeCacheCapable'], bool) and isinstance(ext['ignorable'], bool)
            for res in ext.get('managedResources', []):
                assert set(res) == {'name', 'ignoredByScheduler'}
