# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpu_metrics_objects: metrics/cluster behind the filter, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter.gpu_metrics_objects import FilterModule, gpu_metrics_objects


def kinds(objs):
    return [(o['kind'], o['metadata']['name'], o['metadata']['namespace']) for o in objs]


def test_the_filter_is_registered():
    assert FilterModule().filters()['gpu_metrics_objects'] is gpu_metrics_objects


def test_present_renders_and_bad_options_name_themselves():
    assert kinds(gpu_metrics_objects(False, 'm')) == [('ConfigMap', 'gpuops-gpu-alerts', 'm'),
                                                      ('ConfigMap', 'gpuops-gpu-dashboard', 'm')]
    with pytest.raises(AnsibleFilterError, match='gpu_metrics_objects: options: unknown key'):
        gpu_metrics_objects(True, rules_options={'thresold': 1})
    with pytest.raises(AnsibleFilterError, match='namespace'):
        gpu_metrics_objects(True, 'Bad_Name')


def test_absent_names_every_object_the_flags_may_make():
    assert kinds(gpu_metrics_objects(True, 'm', state='absent')) == [
        ('PrometheusRule', 'gpuops-gpu-alerts', 'm'), ('ConfigMap', 'gpuops-gpu-alerts', 'm'),
        ('ConfigMap', 'gpuops-gpu-dashboard', 'm')]
    assert kinds(gpu_metrics_objects(False, 'm', state='absent')) == [
        ('ConfigMap', 'gpuops-gpu-alerts', 'm'), ('ConfigMap', 'gpuops-gpu-dashboard', 'm')]
    assert gpu_metrics_objects(True, alert_rules=False, grafana_dashboard=False, state='absent') == []
    assert kinds(gpu_metrics_objects(False, 'm', grafana_dashboard=False, state='absent', served=True)) == [
        ('PrometheusRule', 'gpuops-gpu-alerts', 'm'), ('ConfigMap', 'gpuops-gpu-alerts', 'm')]
    with pytest.raises(AnsibleFilterError, match="state must be present, absent or stale; got 'gone'"):
        gpu_metrics_objects(True, state='gone')


def test_stale_is_the_rules_other_form():
    assert kinds(gpu_metrics_objects(True, 'm', state='stale')) == [('ConfigMap', 'gpuops-gpu-alerts', 'm')]
    assert kinds(gpu_metrics_objects(False, 'm', state='stale', served=True)) == [
        ('PrometheusRule', 'gpuops-gpu-alerts', 'm')]
    assert gpu_metrics_objects(False, 'm', state='stale', served=False) == []
    with pytest.raises(AnsibleFilterError, match='gpu_metrics_objects: served must be a boolean'):
        gpu_metrics_objects(False, state='stale', served='yes')
