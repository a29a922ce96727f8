# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster-layer planning on the controller, one file per concern (issue #39 target 4; docs/layout.md):

* ``pool_plan``: the sharing pools of the GPU nodes (playbooks cluster, report, doctor, uninstall): ``sharing_pools``,
  ``pool_host_vars``, ``unprobed_hosts``;
* ``label_plan``: the node-label plans of role gpu_node_labels (what each node should carry; what to patch):
  ``label_static_plan``, ``label_live_plan``, ``stack_node_labels``, ``label_value``.

This module keeps the names that the filter and action plugins (and code written before the split) import from it.
"""

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.pool_plan import (
    LAYER_GROUPS, POOL_NAME_RE, SHARING_POOLS_FACTS, pool_host_vars, sharing_pools, unprobed_hosts,
)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.label_plan import (
    LABEL_NAME_RE, LABEL_PREFIX_RE, RECORD_RE, label_live_plan, label_static_plan, label_value, stack_node_labels,
)

__all__ = [
    'LAYER_GROUPS', 'POOL_NAME_RE', 'SHARING_POOLS_FACTS', 'pool_host_vars', 'sharing_pools', 'unprobed_hosts',
    'LABEL_NAME_RE', 'LABEL_PREFIX_RE', 'RECORD_RE', 'label_live_plan', 'label_static_plan', 'label_value',
    'stack_node_labels',
]
