# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metrics/cluster: the alert rules and the dashboard as Kubernetes objects (the filter: tests/unit/plugins/filter)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import cluster, dashboard, rules
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError


def kinds(objs):
    return [(o['kind'], o['metadata']['name'], o['metadata']['namespace']) for o in objs]


def test_with_the_operator_a_prometheus_rule_and_the_dashboard():
    objs = cluster.objects(True, 'monitoring')
    assert kinds(objs) == [('PrometheusRule', 'gpuops-gpu-alerts', 'monitoring'),
                           ('ConfigMap', 'gpuops-gpu-dashboard', 'monitoring')]
    rule, board = objs
    assert rule['spec']['groups'] == rules.alert_rules({})['groups']
    assert board['metadata']['labels']['grafana_dashboard'] == '1'
    assert json.loads(board['data']['gpuops-gpu-sharing.json']) == dashboard.dashboard()
    for o in objs:
        assert o['metadata']['labels']['app.kubernetes.io/managed-by'] == 'gpuops.k8s_gpu'
        assert o['metadata']['labels']['gpuops.io/sharing-scope'] == 'metrics-cluster'


def test_without_the_operator_the_rules_are_a_config_map_holding_the_rule_file():
    objs = cluster.objects(False)
    assert kinds(objs) == [('ConfigMap', 'gpuops-gpu-alerts', 'kube-system'),
                           ('ConfigMap', 'gpuops-gpu-dashboard', 'kube-system')]
    [(key, text)] = objs[0]['data'].items()
    assert key == 'gpuops-gpu-alerts.rules.yml' and json.loads(text)['groups'] == rules.alert_rules({})['groups']


def test_rule_options_reach_the_rules_and_bad_ones_are_refused():
    objs = cluster.objects(True, rules_options={'extra_labels': {'team': 'gpu'}}, grafana_dashboard=False)
    assert all(r['labels']['team'] == 'gpu' for g in objs[0]['spec']['groups'] for r in g['rules'])
    with pytest.raises(rules.RulesError, match='unknown key'):
        cluster.objects(True, rules_options={'thresold': 1})


def test_flags_and_bad_input():
    assert cluster.objects(True, alert_rules=False, grafana_dashboard=False) == []
    with pytest.raises(StackError, match='namespace'):
        cluster.objects(True, 'Not_A_Namespace')
    with pytest.raises(StackError, match='alert_rules and grafana_dashboard must be true or false'):
        cluster.objects(True, alert_rules='yes')


def test_names_every_object_the_flags_may_make():
    assert kinds(cluster.names(True, 'm')) == [
        ('PrometheusRule', 'gpuops-gpu-alerts', 'm'), ('ConfigMap', 'gpuops-gpu-alerts', 'm'),
        ('ConfigMap', 'gpuops-gpu-dashboard', 'm')]
    assert kinds(cluster.names(False, 'm', grafana_dashboard=False)) == [('ConfigMap', 'gpuops-gpu-alerts', 'm')]
    assert cluster.names(True, alert_rules=False, grafana_dashboard=False) == []


def test_absent_names_the_prometheus_rule_wherever_the_api_is_served():
    """Annotations forced while the Operator's API is served: state absent still removes a PrometheusRule made before."""
    assert kinds(cluster.names(False, 'm', grafana_dashboard=False, served=True)) == [
        ('PrometheusRule', 'gpuops-gpu-alerts', 'm'), ('ConfigMap', 'gpuops-gpu-alerts', 'm')]
    assert kinds(cluster.names(False, 'm', grafana_dashboard=False, served=['v1'])) == [
        ('ConfigMap', 'gpuops-gpu-alerts', 'm')]


def test_stale_is_the_other_form_of_the_rules():
    """After a switch of form the role removes the rules' other form: exactly one form stays."""
    assert kinds(cluster.stale(True, 'm')) == [('ConfigMap', 'gpuops-gpu-alerts', 'm')]
    assert kinds(cluster.stale(True, 'm', served=False)) == [('ConfigMap', 'gpuops-gpu-alerts', 'm')]
    assert kinds(cluster.stale(False, 'm', served=True)) == [('PrometheusRule', 'gpuops-gpu-alerts', 'm')]
    assert cluster.stale(False, 'm', served=['v1', 'monitoring.coreos.com/v1'])[0]['apiVersion'] == \
        'monitoring.coreos.com/v1'
    assert cluster.stale(False, 'm') == [] and cluster.stale(False, 'm', served=False) == []
    assert cluster.stale(True, 'm', alert_rules=False) == []      # rules not asked: left alone
    # the stale object is never one that objects() renders with the same input, and is of the same name
    for mon, served in ((True, True), (False, True), (True, False)):
        made = set((o['kind'], o['metadata']['name']) for o in cluster.objects(mon, 'm'))
        gone = set((o['kind'], o['metadata']['name']) for o in cluster.stale(mon, 'm', served=served))
        assert not made & gone and all(n == cluster.RULES_NAME for _k, n in gone)
    with pytest.raises(StackError, match="served must be a boolean or the list.*got 'yes'"):
        cluster.stale(False, served='yes')


def crd(established='True', deleting=False, conditions=True):
    obj = {'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
           'metadata': {'name': 'servicemonitors.monitoring.coreos.com'}}
    if deleting:
        obj['metadata']['deletionTimestamp'] = '2026-11-30T19:40:00Z'
    if conditions:
        obj['status'] = {'conditions': [{'type': 'NamesAccepted', 'status': 'True'},
                                        {'type': 'Established', 'status': established}]}
    return obj


@pytest.mark.parametrize('found, served', [
    ([], False),                                    # not installed
    (None, False),
    ([crd()], True),                                # Established
    ([crd(deleting=True)], False),                  # being deleted: refuses creates of its kind (DCGMX-24)
    ([crd(established='False')], False),            # not Established yet
    ([crd(conditions=False)], False),               # no status read (or none yet)
    ([crd(deleting=True), crd()], True),
])
def test_DCGMX_24_a_crd_serves_its_kind_when_established_and_not_being_deleted(found, served):
    assert cluster.crd_served(found) is served


@pytest.mark.parametrize('bad', ['servicemonitors', {'metadata': {}}, ['x']])
def test_a_crd_read_of_another_shape_is_refused(bad):
    with pytest.raises(StackError, match='the CRD read must be a list of objects'):
        cluster.crd_served(bad)
