# -*- coding: utf-8 -*-
"""GPU operator values against NVIDIA/gpu-operator deployments/gpu-operator at v24.9.2 ... v26.7.0
(rows of docs/conformance/gpu-operator.md)."""
import io
import json
import tarfile

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import operator as op
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError

T4 = {'gpus': [{'index': 0}], 'sharing': {'mps': {'allowed': True}}}


def render(registry='', pull=None, **go):
    go.setdefault('chart_path', '/charts/gpu-operator-v26.7.0.tgz')
    return r.render(dict(strategy='gpu-operator', pool='p1', nodes=['n1'], facts={'n1': T4}, registry=registry,
                         image_pull_secrets=pull or [], settings={'gpu_operator': go}))


def values(**kw):
    return render(**kw)['helm']['values']


def test_GPUOP_01_defaults_render_without_mirror_or_pull_secrets():
    v = values()
    assert v == {'driver': {'enabled': False}, 'toolkit': {'enabled': False}, 'devicePlugin': {'enabled': True},
                 'nfd': {'enabled': True}, 'migManager': {'enabled': False}, 'mig': {'strategy': 'none'}}
    assert render()['helm']['chart_version'] == 'v26.7.0'


@pytest.mark.parametrize('chart,repo', [('v24.9.2', 'reg.example/m/nvidia/cloud-native'),
                                        ('v25.3.4', 'reg.example/m/nvidia/cloud-native'),
                                        ('v25.10.1', 'reg.example/m/nvidia'), ('v26.3.3', 'reg.example/m/nvidia'),
                                        ('v26.7.0', 'reg.example/m/nvidia')])
def test_GPUOP_02_validator_and_node_status_exporter_repository_per_chart(chart, repo):
    v = values(registry='reg.example/m', chart_version=chart)
    assert v['validator']['repository'] == repo
    assert v['nodeStatusExporter']['repository'] == repo
    assert v['migManager']['repository'] == 'reg.example/m/nvidia/cloud-native'
    assert v['toolkit']['repository'] == 'reg.example/m/nvidia/k8s'


def test_GPUOP_03_mig_strategy_none_is_said():
    assert values()['mig'] == {'strategy': 'none'}
    assert values(mig_strategy='mixed')['mig'] == {'strategy': 'mixed'}


def test_GPUOP_04_cdi_follows_the_chart_default_unless_set():
    assert 'cdi' not in values()
    assert 'cdi' not in values(chart_version='v24.9.2')
    assert values(cdi_enabled=False)['cdi'] == {'enabled': False}
    assert 'cdi' not in values(cdi_enabled=True)
    assert values(chart_version='v25.3.4', cdi_enabled=True)['cdi'] == {'enabled': True}


def test_GPUOP_05_default_runtime_only_where_the_chart_reads_it():
    assert values(chart_version='v24.9.2', default_runtime='containerd')['operator'] == {'defaultRuntime': 'containerd'}
    assert 'operator' not in values(chart_version='v24.9.2')
    with pytest.raises(StackError, match='default_runtime has no effect with gpu-operator chart v26.7.0'):
        render(default_runtime='containerd')


def _chart_tgz(path, version):
    data = ('apiVersion: v2\nname: gpu-operator\nversion: %s\nappVersion: %s\n' % (version, version)).encode()
    with tarfile.open(str(path), 'w:gz') as tar:
        info = tarfile.TarInfo('gpu-operator/Chart.yaml')
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_GPUOP_06_chart_version_from_setting_chart_or_name(tmp_path):
    tgz = tmp_path / 'operator.tgz'
    _chart_tgz(tgz, 'v25.10.1')
    assert render(chart_path=str(tgz))['helm']['chart_version'] == 'v25.10.1'
    d = tmp_path / 'chart'
    d.mkdir()
    (d / 'Chart.yaml').write_text('apiVersion: v2\nname: gpu-operator\nversion: v26.3.3\n')
    assert render(chart_path=str(d))['helm']['chart_version'] == 'v26.3.3'
    assert render(chart_path=str(d), chart_version='v26.7.0')['helm']['chart_version'] == 'v26.7.0'
    with pytest.raises(StackError, match='chart version is unknown'):
        render(chart_path='/charts/gpu-operator.tgz')
    with pytest.raises(StackError, match='not one this collection renders values for'):
        render(chart_version='v23.9.1')
    out = render(chart_version='v24.9.2')
    assert any('older release' in w for w in out['warnings'])


@pytest.mark.parametrize('chart', sorted(c['tag'] for c in op.CHARTS.values()))
def test_GPUOP_07_every_emitted_key_is_read_by_the_chart(chart):
    v = values(registry='reg.example/m', pull=['regcred'], chart_version=chart, sharing='time-slicing',
               mig_manager=False, cdi_enabled=False)
    assert set(op.leaf_paths(v)) <= op.DOCUMENTED_VALUE_KEYS
    assert 'cdi.default' not in op.leaf_paths(v)


def test_GPUOP_08_pull_secrets_shapes():
    v = values(pull=['regcred'])
    assert v['devicePlugin']['imagePullSecrets'] == ['regcred']
    assert v['validator']['imagePullSecrets'] == ['regcred']
    assert v['node-feature-discovery'] == {'imagePullSecrets': [{'name': 'regcred'}]}
    assert 'repository' not in v['devicePlugin']


@pytest.mark.parametrize('version', ['v1.0.0-devel', '0.0.0-git-v26.7.0'])
def test_GPUOP_06_a_chart_that_names_no_release_is_refused(tmp_path, version):
    """Issue #27 3.10: at every tag the source tree's Chart.yaml says v1.0.0-devel (the release workflow packages the
    chart with --version <tag>); it was read as release 1.0 and refused as unknown, naming a release nobody made."""
    d = tmp_path / 'chart'
    d.mkdir()
    (d / 'Chart.yaml').write_text('apiVersion: v2\nname: gpu-operator\nversion: %s\n' % version)
    with pytest.raises(StackError, match='source tree or a development build.*chart_version'):
        render(chart_path=str(d))
    assert render(chart_path=str(d), chart_version='v26.7.0')['helm']['chart_version'] == 'v26.7.0'


def _get(values, path):
    node = values
    for part in path.split('.'):
        node = (node or {}).get(part)
    return node


@pytest.mark.parametrize('chart', sorted(c['tag'] for c in op.CHARTS.values()))
@pytest.mark.parametrize('driver,toolkit', [(True, True), (False, False)])
def test_GPUOP_09_every_image_the_settings_enable_is_mirrored(chart, driver, toolkit):
    """Issue #27 3.3: with a mirror and driver_enabled, driver.manager (k8s-driver-manager) was left on nvcr.io."""
    v = values(registry='reg.example/m', pull=['regcred'], chart_version=chart, driver_enabled=driver,
               toolkit_enabled=toolkit)
    key = tuple(int(x) for x in chart.lstrip('v').split('.')[:2])
    on = {'always': True, 'driver': driver, 'toolkit': toolkit, 'never': False}
    for path, (repo, _image, when) in op.CHART_IMAGES[key].items():
        got = _get(v, path + '.repository')
        if on[when]:
            assert got == 'reg.example/m/' + repo.split('/', 1)[1], (chart, path)
        else:
            assert got is None or path in op.CHARTS[key]['repositories'], (chart, path)
    if driver:
        assert _get(v, 'driver.manager.repository') == 'reg.example/m/nvidia/cloud-native'
    assert set(op.leaf_paths(v)) <= op.DOCUMENTED_VALUE_KEYS


@pytest.mark.parametrize('chart,honoured', [('v24.9.2', False), ('v25.3.4', False), ('v25.10.1', False),
                                            ('v26.3.3', False), ('v26.7.0', True)])
def test_GPUOP_10_mps_fail_requests_false_only_with_a_device_plugin_that_honours_it(chart, honoured):
    """Issue #27 3.8: the chart's device plugin before v0.20.0 forces failRequestsGreaterThanOne on for MPS."""
    kw = dict(chart_version=chart, sharing='mps', fail_requests_greater_than_one=False)
    if honoured:
        cfg = json.loads(values(**kw)['devicePlugin']['config']['data']['mps'])
        assert cfg['sharing']['mps']['failRequestsGreaterThanOne'] is False
    else:
        with pytest.raises(StackError, match='fail_requests_greater_than_one: false has no effect.*forces it on'):
            render(**kw)
    # time-slicing and the default (true) are not affected
    values(chart_version=chart, sharing='time-slicing', fail_requests_greater_than_one=False)
    values(chart_version=chart, sharing='mps')


@pytest.mark.parametrize('chart', ['v24.9.2', 'v25.3.4', 'v25.10.1', 'v26.3.3', 'v26.7.0'])
def test_GPUOP_11_validation_waits_for_the_runtime_class_the_operator_creates(chart):
    res = r.render(dict(strategy='gpu-operator', pool='p1', nodes=['n1'], facts={'n1': T4},
                        settings={'gpu_operator': {'chart_path': '/c.tgz', 'chart_version': chart}},
                        validation={'enabled': True}))
    [pod] = res['validation_manifests']
    assert pod['spec']['runtimeClassName'] == 'nvidia' == res['runtime_class_name']
    # no manifest of the stack makes it: entry point ready waits for it after the Helm install
    assert not [m for m in res['manifests'] if m['kind'] == 'RuntimeClass']
    assert res['runtime_class_wait'] == 'nvidia'
    assert 'runtimeClass' not in res['helm']['values'].get('operator', {})
    own = r.render(dict(strategy='gpu-operator', pool='p1', nodes=['n1'], facts={'n1': T4},
                        settings={'gpu_operator': {'chart_path': '/c.tgz', 'chart_version': chart,
                                                   'runtime_class': 'nvidia-op'}},
                        validation={'enabled': True}))
    assert own['helm']['values']['operator']['runtimeClass'] == 'nvidia-op'
    assert own['validation_manifests'][0]['spec']['runtimeClassName'] == 'nvidia-op' == own['runtime_class_wait']
    assert set(op.leaf_paths(own['helm']['values'])) <= op.DOCUMENTED_VALUE_KEYS
    # without validation workloads there is nothing to wait for
    assert render()['runtime_class_wait'] is None
    with pytest.raises(StackError, match='runtime_class'):
        render(runtime_class='Bad Name')


def test_GPUOP_11_a_runtime_class_the_stack_makes_is_not_waited_for():
    res = r.render(dict(strategy='time-slicing', pool='p1', nodes=['n1'], facts={'n1': T4},
                        settings={'time_slicing': {'replicas': 2}}, validation={'enabled': True}))
    names = [m['metadata']['name'] for m in res['manifests'] if m['kind'] == 'RuntimeClass']
    assert res['validation_manifests'][0]['spec'].get('runtimeClassName') in names
    assert res['runtime_class_wait'] is None


def test_GPUOP_12_device_plugin_config_named_after_its_content_not_the_pool():
    def cfg(pool, **go):
        go.setdefault('chart_path', '/charts/gpu-operator-v26.7.0.tgz')
        return r.render(dict(strategy='gpu-operator', pool=pool, nodes=['n-' + pool], facts={'n-' + pool: T4},
                             settings={'gpu_operator': go}))['helm']['values']['devicePlugin']['config']
    a, b = cfg('a', sharing='time-slicing', replicas=4), cfg('b', sharing='time-slicing', replicas=4)
    # the one release of every gpu-operator pool: the same settings give the same values whatever the pool
    assert a == b and a['name'].startswith('gpuops-device-plugin-config-') and a['default'] == 'time-slicing'
    assert a['name'] == op.device_plugin_config_name(a['data'])
    # a changed config is a new name: the operator's DaemonSet mounts it by that name, so its pods roll
    changed = cfg('a', sharing='time-slicing', replicas=8)
    assert changed['name'] != a['name'] and changed['default'] == 'time-slicing'
    assert cfg('a', sharing='mps', replicas=4)['name'] != a['name']
    assert len(a['name']) <= 63


@pytest.mark.parametrize('strategy,settings,confined', [
    ('exclusive', {}, True), ('time-slicing', {'time_slicing': {'replicas': 2}}, True), ('mps', {}, True),
    ('mig', {'mig': {'devices': {'1g.10gb': 7}, 'manager': False}}, True),
    ('mig', {'mig': {'devices': {'1g.10gb': 7}}}, False),
    ('gpushare', {'gpushare': {'accept_known_bad_images': True, 'kube_proxy_mode': 'iptables'}}, True),
    ('volcano', {'volcano': {'version': '1.15', 'kube_version': 'v1.34.2'}}, True),
    ('hami', {'hami': {'kube_version': 'v1.34.2'}}, True),
    ('gpu-manager', {'gpu_manager': {'accept_unmaintained': True, 'admission_image': 'r/x:1'}}, True),
    ('gpu-operator', {'gpu_operator': {'chart_path': '/c-v26.7.0.tgz'}}, False),
])
def test_GPUOP_13_other_pools_nodes_keep_the_operators_operands_off(strategy, settings, confined):
    A100 = {'gpus': [{'index': 0, 'name': 'NVIDIA A100-SXM4-80GB', 'memory_total_mib': 81920}],
            'sharing': {'mig': {'allowed': True}, 'mps': {'allowed': True}}}
    res = r.render(dict(strategy=strategy, pool='p1', nodes=['n1'], facts={'n1': A100}, settings=settings,
                        require_facts=False))
    labels = res['node_labels']['n1']
    if confined:
        assert labels[op.OPERANDS_LABEL] == 'false'
    else:
        assert op.OPERANDS_LABEL not in labels


def test_GPUOP_13_gpu_operator_beside_a_mig_pool_with_the_manager_refused():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import sharing_pools

    def errors(mig_settings, other='mig'):
        groups = {'gpu_nodes': ['a', 'b'], 'ops': ['a'], 'migs': ['b']}
        hv = {'a': {'group_names': ['gpu_nodes', 'ops'], 'gpuops_sharing_strategy': 'gpu-operator'},
              'b': dict({'group_names': ['gpu_nodes', 'migs'], 'gpuops_sharing_strategy': other}, **mig_settings)}
        return sharing_pools(groups, hv, settings=['gpu_sharing_stack_mig'])['errors']
    [err] = errors({})
    assert err.startswith('gpu-operator pool(s) ops and mig pool(s) migs with the MIG manager cannot share a cluster')
    assert 'gpu_sharing_stack_mig.manager: false for migs' in err
    assert errors({'gpu_sharing_stack_mig': {'manager': False}}) == []
    assert errors({}, other='hami') == []


@pytest.mark.parametrize('chart', ['v24.9.2', 'v25.3.4', 'v25.10.1', 'v26.3.3', 'v26.7.0'])
def test_GPUOP_14_mig_manager_config_names_no_config_map(chart):
    A100 = {'gpus': [{'index': 0}], 'sharing': {'mig': {'allowed': True}}}
    v = r.render(dict(strategy='gpu-operator', pool='p1', nodes=['n1'], facts={'n1': A100},
                      settings={'gpu_operator': {'chart_path': '/c.tgz', 'chart_version': chart, 'mig_manager': True,
                                                 'mig_strategy': 'single'}}))['helm']['values']
    assert v['migManager'] == {'enabled': True, 'config': {'default': 'all-disabled'}}
