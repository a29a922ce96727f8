# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""K8S-21: filter helm_client_check (module_utils/_cluster/kube/helm_client) - which helm client kubernetes.core.helm
can drive: helm 3 with every release, helm 4 from kubernetes.core 6.4.0 (CHANGELOG.rst of kubernetes.core: 6.3.0
limits helm to <4.0.0, 6.4.0 adds helm 4 across the helm modules). The helm outputs are what `helm version --short`
printed for the lab's builds (lab/go/helm v3.22.0, lab/go/helm-4 v4.3.1) and for a release binary (with +g<commit>)."""
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.filter import helm_client_check as flt
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.helm_client import (
    helm_client_check, parse_version)

f = flt.FilterModule().filters()['helm_client_check']


@pytest.mark.parametrize('text, want', [
    ('v3.22.0', (3, 22, 0)), ('v4.3.1+g1a2b3c4', (4, 3, 1)), ('6.6.0', (6, 6, 0)), ('6.4.0-dev', (6, 4, 0)),
    ('', None), (None, None), ('helm: not found', None)])
def test_K8S_21_parse_version(text, want):
    assert parse_version(text) == want


@pytest.mark.parametrize('helm, core, ok', [
    ('v3.22.0', '3.0.0', True), ('v3.22.0', '6.6.0', True), ('v3.19.5+gabc', '6.3.0', True),
    ('v4.3.1', '6.4.0', True), ('v4.3.1+g1a2b3c4', '6.6.0', True), ('v4.0.0', '7.0.0', True),
    ('v4.3.1', '6.3.0', False), ('v4.3.1', '6.2.0', False), ('v4.0.0', '5.4.2', False), ('v4.3.1', '3.0.0', False),
    # kubernetes.core unknown: only the helm side
    ('v4.3.1', None, True), ('v2.17.0', '6.6.0', False)])
def test_K8S_21_pairs(helm, core, ok):
    res = helm_client_check(0, helm + '\n', '', core, host='localhost')
    assert res['ok'] is ok, res
    assert res['helm_version'] == '.'.join(str(x) for x in parse_version(helm))
    if ok:
        assert res['msg'] == ''
    else:
        assert res['msg'] and ' on localhost' in res['msg'], res
    if not ok and helm.startswith('v4'):
        assert 'kubernetes.core %s' % core in res['msg'] and '6.4.0' in res['msg'], res['msg']


def test_K8S_21_no_helm_names_the_host_the_error_and_the_ways_out():
    # what ansible.builtin.command returns for a missing binary under failed_when: false (rc 2, the error in msg)
    res = f({'rc': 2, 'stdout': '', 'stderr': '', 'msg': "[Errno 2] No such file or directory: b'helm'"},
            host='ctl-1', kubernetes_core_version='6.6.0')
    assert res['ok'] is False and res['helm_version'] == '' and res['kubernetes_core_version'] == '6.6.0'
    assert 'on ctl-1' in res['msg'] and 'No such file or directory' in res['msg'], res['msg']
    assert 'gpu_sharing_stack_helm_install' in res['msg'], res['msg']


def test_K8S_21_a_helm_that_fails_is_not_read_as_a_version():
    res = f({'rc': 1, 'stdout': 'v4.3.1', 'stderr': 'Error: unknown flag'}, kubernetes_core_version='6.6.0')
    assert res['ok'] is False and 'rc 1' in res['msg'] and 'unknown flag' in res['msg'], res


def test_K8S_21_filter_reads_the_controllers_kubernetes_core(tmp_path, monkeypatch):
    """The default kubernetes.core version is the loaded collection's MANIFEST.json (galaxy.yml in a checkout)."""
    from ansible_collections.kubernetes import core
    with open(os.path.join(list(core.__path__)[0], 'MANIFEST.json')) as fh:
        installed = json.load(fh)['collection_info']['version']
    assert flt.installed_kubernetes_core_version() == installed
    assert f({'rc': 0, 'stdout': 'v3.22.0'})['kubernetes_core_version'] == installed
    # a source checkout: galaxy.yml only
    (tmp_path / 'galaxy.yml').write_text('namespace: kubernetes\nname: core\nversion: 6.3.0\n')
    monkeypatch.setattr(core, '__path__', [str(tmp_path)])
    assert flt.installed_kubernetes_core_version() == '6.3.0'
    res = f({'rc': 0, 'stdout': 'v4.3.1'}, host='localhost')
    assert res['ok'] is False and 'kubernetes.core 6.3.0' in res['msg'], res
    monkeypatch.setattr(core, '__path__', [str(tmp_path / 'nothing')])
    assert flt.installed_kubernetes_core_version() is None
    assert f({'rc': 0, 'stdout': 'v4.3.1'})['ok'] is True
