# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kube_scheduler_config module's main(): files, check mode, diff, backups, refusals that change nothing,
and state=absent (backup, check mode, the file of the collection's own directory)."""
import json
import os
import re
import shutil

import pytest
import yaml


from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import kube_scheduler_config
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import plan as scheduler_plan
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions as KV


FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'module_utils', 'fixtures', 'scheduler')
GPUSHARE = {'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filter_verb': 'filter', 'bind_verb': 'bind',
            'node_cache_capable': True, 'managed_resources': ['aliyun.com/gpu-mem']}


def run(capsys, args):
    with module_args(args):
        with pytest.raises(SystemExit):
            kube_scheduler_config.main()
    return json.loads(capsys.readouterr().out)


def snapshot(root):
    out = {}
    for dirpath, _dirs, files in os.walk(str(root)):
        for name in files:
            with open(os.path.join(dirpath, name), 'rb') as f:
                out[os.path.join(dirpath, name)] = f.read()
    return out


def test_scheduler_config_check_write_idempotent_and_merge(capsys, tmp_path):
    cfg = tmp_path / 'gpuops' / 'scheduler-config.yaml'
    args = {'mode': 'scheduler_config', 'distribution': 'kubeadm', 'kubernetes_version': 'v1.29.4',
            'config_path': str(cfg), 'extenders': [GPUSHARE]}
    res = run(capsys, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert res['changed'] is True and not cfg.exists()
    assert res['diff']['before'] == '' and 'gpushare-scheduler' in res['diff']['after']
    res = run(capsys, args)
    assert res['changed'] is True and res['api_version'] == 'kubescheduler.config.k8s.io/v1'
    doc = yaml.safe_load(cfg.read_text())
    assert doc['clientConnection']['kubeconfig'] == '/etc/kubernetes/scheduler.conf'
    assert oct(os.stat(str(cfg)).st_mode & 0o777) == '0o644'
    assert run(capsys, args)['changed'] is False
    # a profile added by someone else survives, and a backup is made
    doc['profiles'] = [{'schedulerName': 'default-scheduler'}]
    cfg.write_text(yaml.safe_dump(doc))
    res = run(capsys, dict(args, extenders=[GPUSHARE, {'url_prefix': 'http://x:1/y', 'filter_verb': 'f'}]))
    assert res['changed'] is True and os.path.exists(res['backup_file'])
    doc = yaml.safe_load(cfg.read_text())
    assert doc['profiles'] == [{'schedulerName': 'default-scheduler'}] and len(doc['extenders']) == 2


@pytest.mark.parametrize('override,pattern', [
    ({'kubernetes_version': 'v1.%d.0' % (KV.MAX_MINOR + 1)},
     'kubernetes_version: Kubernetes 1.%d is not supported' % (KV.MAX_MINOR + 1)),
    ({'extenders': [{'url_prefix': 'gopher://x', 'filter_verb': 'f'}]}, r'extenders\[0\].url_prefix'),
    ({'extenders': [{'url_prefix': 'http://x', 'bind_verb': 'b'}]}, 'allows one'),
    ({'distribution': None}, 'distribution: .*allowed values: kubeadm, rke1, rke2'),
])
def test_refusals_change_nothing(capsys, tmp_path, override, pattern):
    cfg = tmp_path / 'gpuops' / 'scheduler-config.yaml'
    cfg.parent.mkdir()
    cfg.write_text('apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n# keep me\n'
                   'extenders:\n- urlPrefix: http://a\n  bindVerb: bind\n')
    before = snapshot(tmp_path)
    args = {'mode': 'scheduler_config', 'distribution': 'kubeadm', 'kubernetes_version': '1.29', 'path': str(cfg),
            'config_path': '/etc/kubernetes/gpuops/scheduler-config.yaml', 'extenders': [GPUSHARE]}
    args.update(override)
    args = dict((k, v) for k, v in args.items() if v is not None)
    if 'allows one' not in pattern:
        cfg.write_text('')
        before = snapshot(tmp_path)
    res = run(capsys, args)
    assert res.get('failed') is True and res.get('changed') is False, res
    assert re.search(pattern, res['msg']), res['msg']
    assert snapshot(tmp_path) == before


def test_kubeadm_manifest_staged_outside_and_backup_outside_manifests(capsys, tmp_path):
    manifests = tmp_path / 'manifests'
    manifests.mkdir()
    manifest = manifests / 'kube-scheduler.yaml'
    shutil.copy(os.path.join(FIXTURES, 'kubeadm-kube-scheduler.yaml'), str(manifest))
    stage = tmp_path / 'tmp'
    args = {'mode': 'kubeadm_manifest', 'kubernetes_version': 'v1.29.4', 'path': str(manifest), 'tmp_dir': str(stage),
            'config_path': '/etc/kubernetes/gpuops/scheduler-config.yaml', 'config_checksum': 'c1'}
    res = run(capsys, dict(args, _ansible_check_mode=True))
    assert res['changed'] is True and not stage.exists()
    res = run(capsys, args)
    assert res['changed'] is True
    assert sorted(os.listdir(str(manifests))) == ['kube-scheduler.yaml']        # nothing else for kubelet to run
    assert os.path.dirname(res['backup_file']) == str(stage)
    pod = yaml.safe_load(manifest.read_text())
    assert '--config=/etc/kubernetes/gpuops/scheduler-config.yaml' in pod['spec']['containers'][0]['command']
    assert run(capsys, args)['changed'] is False
    assert run(capsys, dict(args, config_checksum='c2'))['changed'] is True


def test_kubeadm_configmap_returns_text(capsys):
    with open(os.path.join(FIXTURES, 'kubeadm-config-configmap.yaml')) as f:
        text = yaml.safe_load(f)['data']['ClusterConfiguration']
    args = {'mode': 'kubeadm_configmap', 'kubernetes_version': 'v1.29.4', 'cluster_configuration': text}
    res = run(capsys, args)
    assert res['changed'] is True and 'config: /etc/kubernetes/gpuops/scheduler-config.yaml' in res['cluster_configuration']
    res2 = run(capsys, dict(args, cluster_configuration=res['cluster_configuration']))
    assert res2['changed'] is False and res2['cluster_configuration'] == res['cluster_configuration']


def test_rke1_needs_path_and_existing_file(capsys, tmp_path):
    res = run(capsys, {'mode': 'rke1_cluster_yml', 'kubernetes_version': '1.26'})
    assert res['failed'] and 'path: required with mode=rke1_cluster_yml' in res['msg']
    res = run(capsys, {'mode': 'rke1_cluster_yml', 'kubernetes_version': '1.26', 'path': str(tmp_path / 'none.yml')})
    assert res['failed'] and 'must exist' in res['msg'] and not (tmp_path / 'none.yml').exists()


def test_default_config_paths():
    plan = scheduler_plan.plan
    base = {'kubernetes_version': '1.21', 'extenders': [GPUSHARE], 'cluster_configuration': None}
    res = plan(dict(base, mode='rke2_config', path='/nonexistent/config.yaml'), read=lambda p: None)
    assert res['config_path'] == '/etc/rancher/rke2/gpuops/scheduler-policy.json' and res['flag'] == 'policy-config-file'
    res = plan(dict(base, mode='scheduler_config', distribution='rke1', kubernetes_version='1.30'), read=lambda p: None)
    assert res['path'] == '/etc/kubernetes/gpuops/scheduler-config.yaml'
    assert res['document']['clientConnection']['kubeconfig'] == '/etc/kubernetes/ssl/kubecfg-kube-scheduler.yaml'


# state=absent

@pytest.fixture
def own_dir(tmp_path, monkeypatch):
    """Make tmp_path/gpuops the collection's own config directory (like /etc/kubernetes/gpuops)."""
    d = tmp_path / 'gpuops'
    monkeypatch.setattr(scheduler_plan, 'CONFIG_DIRS', {'rke1': str(d), 'rke2': str(d), 'kubeadm': str(d)})
    return d


def test_scheduler_config_absent_deletes_the_collections_file_with_a_backup(capsys, own_dir, tmp_path):
    cfg = own_dir / 'scheduler-config.yaml'
    args = {'mode': 'scheduler_config', 'distribution': 'kubeadm', 'kubernetes_version': 'v1.29.4',
            'config_path': str(cfg), 'extenders': [GPUSHARE]}
    assert run(capsys, args)['changed'] is True
    text = cfg.read_text()
    absent = dict(args, state='absent', extenders=[{'url_prefix': GPUSHARE['url_prefix']}])
    res = run(capsys, dict(absent, _ansible_check_mode=True))
    assert res['changed'] is True and res['config_removed'] is True and cfg.read_text() == text
    res = run(capsys, absent)
    assert res['changed'] is True and res['config_removed'] is True and not cfg.exists()
    with open(res['backup_file']) as f:
        assert f.read() == text
    res = run(capsys, absent)
    assert res['changed'] is False and res['config_removed'] is True


def test_scheduler_config_absent_keeps_other_extenders_and_foreign_files(capsys, own_dir, tmp_path):
    cfg = own_dir / 'scheduler-config.yaml'
    args = {'mode': 'scheduler_config', 'distribution': 'kubeadm', 'kubernetes_version': 'v1.29.4',
            'config_path': str(cfg), 'extenders': [GPUSHARE, {'url_prefix': 'http://x:1/y', 'filter_verb': 'f'}]}
    run(capsys, args)
    res = run(capsys, dict(args, state='absent', extenders=[GPUSHARE]))
    assert res['changed'] is True and res['config_removed'] is False
    doc = yaml.safe_load(cfg.read_text())
    assert [e['urlPrefix'] for e in doc['extenders']] == ['http://x:1/y']
    # a site's own file elsewhere is never deleted, even when only the skeleton is left
    site = tmp_path / 'site-scheduler.yaml'
    args = dict(args, config_path=str(site), extenders=[GPUSHARE])
    run(capsys, args)
    res = run(capsys, dict(args, state='absent'))
    assert res['changed'] is True and res['config_removed'] is False and site.exists()
    assert 'extenders' not in yaml.safe_load(site.read_text())


def test_kubeadm_manifest_absent_restores_the_original(capsys, tmp_path):
    manifest = tmp_path / 'kube-scheduler.yaml'
    shutil.copy(os.path.join(FIXTURES, 'kubeadm-kube-scheduler.yaml'), str(manifest))
    original = yaml.safe_load(manifest.read_text())
    args = {'mode': 'kubeadm_manifest', 'path': str(manifest), 'kubernetes_version': 'v1.29.4',
            'config_path': '/etc/kubernetes/gpuops/scheduler-config.yaml', 'tmp_dir': str(tmp_path / 'tmp'),
            'config_checksum': 'abc'}
    assert run(capsys, args)['changed'] is True
    res = run(capsys, dict(args, state='absent'))
    assert res['changed'] is True and os.path.dirname(res['backup_file']) == str(tmp_path / 'tmp')
    assert yaml.safe_load(manifest.read_text()) == original
    assert run(capsys, dict(args, state='absent'))['changed'] is False
    missing = dict(args, path=str(tmp_path / 'none.yaml'), state='absent')
    assert run(capsys, missing)['changed'] is False


# ------------------------------------------------------------------------------------ defect 13: the site's --config
def test_discover_then_merge_into_the_sites_config_with_backup_diff_and_no_rewrite(capsys, tmp_path):
    """kube-scheduler already runs with --config=<the site's file>: discover finds it, scheduler_config merges the
    extenders into it (profiles and clientConnection stay, backup, diff, idempotent) and the manifest keeps its flag."""
    site_dir = tmp_path / 'site'
    site_dir.mkdir()
    site = site_dir / 'sched.yaml'
    site_doc = {'apiVersion': 'kubescheduler.config.k8s.io/v1', 'kind': 'KubeSchedulerConfiguration',
                'clientConnection': {'kubeconfig': '/etc/kubernetes/site.conf'},
                'profiles': [{'schedulerName': 'default-scheduler',
                              'plugins': {'score': {'disabled': [{'name': 'ImageLocality'}]}}}]}
    site.write_text(yaml.safe_dump(site_doc))
    manifest = tmp_path / 'kube-scheduler.yaml'
    doc = yaml.safe_load(open(os.path.join(FIXTURES, 'kubeadm-kube-scheduler.yaml')))
    doc['spec']['containers'][0]['command'].append('--config=%s' % site)
    doc['spec']['containers'][0]['volumeMounts'].append({'mountPath': str(site_dir), 'name': 'site', 'readOnly': True})
    doc['spec']['volumes'].append({'name': 'site', 'hostPath': {'path': str(site_dir)}})
    manifest.write_text(yaml.safe_dump(doc))
    found = run(capsys, {'mode': 'discover', 'distribution': 'kubeadm', 'kubernetes_version': 'v1.35.0',
                         'path': str(manifest)})
    assert found['changed'] is False and found['flags'] == {'config': str(site)}
    assert found['config_path'] == str(site) and found['site_owned'] is True
    args = {'mode': 'scheduler_config', 'distribution': 'kubeadm', 'kubernetes_version': 'v1.35.0',
            'extenders': [GPUSHARE], 'current_flags': found['flags'], 'backup_dir': str(tmp_path / 'bk')}
    res = run(capsys, dict(args, _ansible_diff=True))
    assert res['changed'] is True and res['site_owned'] is True and res['path'] == str(site)
    assert os.path.exists(res['backup_file']) and 'gpushare-scheduler' in res['diff']['after']
    merged = yaml.safe_load(site.read_text())
    assert merged['profiles'] == site_doc['profiles'] and merged['clientConnection'] == site_doc['clientConnection']
    assert [e['urlPrefix'] for e in merged['extenders']] == [GPUSHARE['url_prefix']]
    assert not (tmp_path / 'gpuops').exists()
    assert run(capsys, args)['changed'] is False
    res = run(capsys, {'mode': 'kubeadm_manifest', 'kubernetes_version': 'v1.35.0', 'path': str(manifest),
                       'config_path': res['config_path'], 'config_checksum': 'c', 'tmp_dir': str(tmp_path / 'stage')})
    cmd = res['document']['spec']['containers'][0]['command']
    assert cmd.count('--config=%s' % site) == 1 and not [c for c in cmd if c.startswith('--config=/etc')]
    # absent removes only our extender; the site's file stays
    res = run(capsys, dict(args, state='absent'))
    assert res['config_removed'] is False and site.exists()
    assert yaml.safe_load(site.read_text()) == site_doc


def test_site_config_refusals_change_nothing(capsys, tmp_path):
    site = tmp_path / 'site' / 'sched.yaml'
    mine = tmp_path / 'gpuops' / 'mine.yaml'
    before = snapshot(tmp_path)
    base = {'mode': 'scheduler_config', 'distribution': 'kubeadm', 'kubernetes_version': 'v1.30.1', 'extenders': [GPUSHARE]}
    res = run(capsys, dict(base, current_flags={'config': str(site)}, config_path=str(mine)))
    assert res.get('failed') is True and str(site) in res['msg'] and str(mine) in res['msg']
    res = run(capsys, dict(base, current_flags={'config': str(site)}))
    assert res.get('failed') is True and 'missing or empty' in res['msg'] and str(site) in res['msg']
    res = run(capsys, dict(base, kubernetes_version='v1.21.3', current_flags={'config': str(site)}))
    assert res.get('failed') is True and str(site) in res['msg']
    assert snapshot(tmp_path) == before


def test_discover_rke1_refuses_a_version_mismatch(capsys, tmp_path):
    cluster = tmp_path / 'cluster.yml'
    shutil.copy(os.path.join(FIXTURES, 'rke1-cluster.yml'), str(cluster))
    res = run(capsys, {'mode': 'discover', 'distribution': 'rke1', 'kubernetes_version': 'v1.21.14', 'path': str(cluster)})
    assert res.get('failed') is True and 'v1.26.15-rancher1-1' in res['msg']
    res = run(capsys, {'mode': 'discover', 'distribution': 'rke1', 'kubernetes_version': 'v1.26.3', 'path': str(cluster)})
    assert res['flags'] == {} and res['site_owned'] is False
    assert res['config_path'] == '/etc/kubernetes/gpuops/scheduler-config.yaml'
    res = run(capsys, {'mode': 'discover', 'distribution': 'rke1', 'kubernetes_version': 'v1.20.3', 'path': str(cluster)})
    assert res.get('failed') is True
