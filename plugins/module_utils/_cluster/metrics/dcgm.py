# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's dcgm-exporter (pinned 4.5.3-4.8.2, docs/conformance/dcgm-exporter.md): the counters the collection asks it
for and the labels its series carry. The alert rules (metrics/rules.py) use only these names."""

from __future__ import annotations

# The DCGM fields the exporter's counters ConfigMap lists (each is a series of that name); the alert rules name no
# other exporter metric. DCGM_FI_DEV_CLOCKS_EVENT_REASONS is the name at the tag (the exporter's clock events
# collector watches dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASONS: internal/pkg/collector/clock_events_collector.go).
COUNTERS = (
    'DCGM_FI_DEV_XID_ERRORS',
    'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL',
    'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL',
    'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS',
    'DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS',
    'DCGM_FI_DEV_ROW_REMAP_FAILURE',
    'DCGM_FI_DEV_CLOCKS_EVENT_REASONS',
    'DCGM_FI_DEV_GPU_TEMP',
    'DCGM_FI_DEV_POWER_USAGE',
    'DCGM_FI_DEV_GPU_UTIL',
    'DCGM_FI_DEV_FB_USED',
    'DCGM_FI_DEV_FB_FREE',
    'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
    'DCGM_FI_PROF_SM_ACTIVE',
)

# Labels of a GPU series: gpu, UUID, device, modelName, GPU_I_PROFILE and GPU_I_ID (MIG only), Hostname (unless the
# exporter runs with --no-hostname) from the exporter's text template (internal/pkg/rendermetrics/render_metrics.go);
# pod, namespace, container from its Kubernetes transformation (internal/pkg/transformation/const.go) when a pod holds
# the GPU.
LABELS = ('gpu', 'UUID', 'device', 'modelName', 'Hostname', 'pod', 'namespace', 'container', 'GPU_I_PROFILE', 'GPU_I_ID')
