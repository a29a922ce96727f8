# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube_scheduler_config state=absent: files on disk, backup, check mode, the file of the collection's own directory."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil

import pytest
import yaml

from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import module_args
from ansible_collections.gpuops.k8s_gpu.plugins.modules import kube_scheduler_config

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'module_utils', 'fixtures', 'scheduler')
GPUSHARE = {'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filter_verb': 'filter', 'bind_verb': 'bind',
            'node_cache_capable': True, 'managed_resources': ['aliyun.com/gpu-mem']}


def run(capsys, args):
    with module_args(args):
        with pytest.raises(SystemExit):
            kube_scheduler_config.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def own_dir(tmp_path, monkeypatch):
    """Make tmp_path/gpuops the collection's own config directory (like /etc/kubernetes/gpuops)."""
    d = tmp_path / 'gpuops'
    monkeypatch.setattr(kube_scheduler_config, 'CONFIG_DIRS', {'rke1': str(d), 'rke2': str(d), 'kubeadm': str(d)})
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
