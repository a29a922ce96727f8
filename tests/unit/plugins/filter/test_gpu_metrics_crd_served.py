# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpu_metrics_crd_served: metrics/cluster.crd_served behind the filter, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s_gpu.plugins.filter import gpu_metrics_crd_served as served_filter

FilterModule, gpu_metrics_crd_served = served_filter.FilterModule, served_filter.gpu_metrics_crd_served

ESTABLISHED = {'metadata': {'name': 'prometheusrules.monitoring.coreos.com'},
               'status': {'conditions': [{'type': 'Established', 'status': 'True'}]}}


def test_the_filter_is_registered():
    assert FilterModule().filters()['gpu_metrics_crd_served'] is gpu_metrics_crd_served


def test_DCGMX_24_served_only_while_established_and_not_being_deleted():
    assert gpu_metrics_crd_served([ESTABLISHED]) is True
    assert gpu_metrics_crd_served([]) is False
    deleting = dict(ESTABLISHED, metadata=dict(ESTABLISHED['metadata'], deletionTimestamp='2026-11-30T19:40:00Z'))
    assert gpu_metrics_crd_served([deleting]) is False


def test_bad_input_names_the_filter():
    with pytest.raises(AnsibleFilterError, match='gpu_metrics_crd_served: the CRD read must be a list of objects'):
        gpu_metrics_crd_served('servicemonitors')
