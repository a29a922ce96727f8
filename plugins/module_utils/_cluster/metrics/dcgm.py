# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection knows of NVIDIA's dcgm-exporter at the pinned tag (pins 'dcgm-exporter'): the counters it is
told to collect, the labels its series carry, and the names of the options it reads. The facts and their sources are
the rows of docs/conformance/dcgm-exporter.md (DCGMX-*); the exporter's objects are rendered by metrics/exporter.

Plain data: no Ansible import, nothing of the cluster wings.
"""

from __future__ import annotations

# The counters every pool's exporter collects, in this order; the alert rules (metrics/rules) use only these.
# DCGM_FI_DEV_CLOCKS_EVENT_REASONS is the name at the tag (the exporter's clock events collector watches it:
# internal/pkg/collector/clock_events_collector.go; DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is its legacy alias).
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

# The Prometheus type of each counter as the collectors file writes it (the exporter accepts gauge, counter,
# histogram, summary and label; DCGMX-05) and the help text, in our own words: the file is CSV with three fields, so
# a help text has no comma and no quote.
COUNTER_INFO = {
    'DCGM_FI_DEV_XID_ERRORS': ('gauge', 'The last Xid error the driver reported for the GPU (0: none since start).'),
    'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL': ('counter', 'Double-bit (uncorrectable) ECC errors since the driver loaded.'),
    'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL': ('counter', 'Single-bit (corrected) ECC errors since the driver loaded.'),
    'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS': ('counter', 'Memory rows remapped after uncorrectable errors.'),
    'DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS': ('counter', 'Memory rows remapped after correctable errors.'),
    'DCGM_FI_DEV_ROW_REMAP_FAILURE': ('gauge', '1 when a row remapping failed and the GPU needs service; else 0.'),
    'DCGM_FI_DEV_CLOCKS_EVENT_REASONS': ('gauge', 'Bit mask of the reasons the GPU clocks are held down now.'),
    'DCGM_FI_DEV_GPU_TEMP': ('gauge', 'GPU temperature in degrees C.'),
    'DCGM_FI_DEV_POWER_USAGE': ('gauge', 'Power draw in W.'),
    'DCGM_FI_DEV_GPU_UTIL': ('gauge', 'Share of time a kernel ran on the GPU in percent.'),
    'DCGM_FI_DEV_FB_USED': ('gauge', 'Frame buffer memory in use in MiB.'),
    'DCGM_FI_DEV_FB_FREE': ('gauge', 'Frame buffer memory free in MiB.'),
    'DCGM_FI_PROF_GR_ENGINE_ACTIVE': ('gauge', 'Ratio of time the graphics or compute engine was busy (0-1).'),
    'DCGM_FI_PROF_SM_ACTIVE': ('gauge', 'Ratio of cycles an SM had at least one warp resident (0-1).'),
}
# the types the exporter's collectors file accepts (DCGMX-05)
PROM_TYPES = ('gauge', 'counter', 'histogram', 'summary', 'label')

# The labels of a GPU series (DCGMX-10): per GPU, per pod (with pod attribution), per MIG instance (MIG mode)
GPU_LABELS = ('gpu', 'UUID', 'pci_bus_id', 'device', 'modelName', 'Hostname')
POD_LABELS = ('pod', 'namespace', 'container')
MIG_LABELS = ('GPU_I_PROFILE', 'GPU_I_ID')
# with the virtual-GPU option, the replica of a shared GPU the pod holds (DCGMX-12)
VGPU_LABEL = 'vgpu'
# with DRA attribution (DCGMX-13)
DRA_LABELS = ('dra_claim_name', 'dra_claim_namespace', 'dra_driver_name', 'dra_pool_name', 'dra_device_name')
DRA_MIG_LABELS = ('dra_mig_profile', 'dra_mig_device_uuid')
# the labels the alert rules and the dashboards read
LABELS = ('gpu', 'UUID', 'device', 'modelName', 'Hostname', 'pod', 'namespace', 'container', 'GPU_I_PROFILE',
          'GPU_I_ID')

# The exporter's options (pkg/cmd/app.go at the pinned tag, DCGMX-03/04): flag -> environment variable. The collection
# sets the environment variables, as upstream's chart does.
FLAGS = {
    'collectors': 'DCGM_EXPORTER_COLLECTORS',
    'address': 'DCGM_EXPORTER_LISTEN',
    'kubernetes': 'DCGM_EXPORTER_KUBERNETES',
    'kubernetes-gpu-id-type': 'DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE',
    'kubernetes-virtual-gpus': 'KUBERNETES_VIRTUAL_GPUS',
    'kubernetes-enable-dra': 'KUBERNETES_ENABLE_DRA',
    'nvidia-resource-names': 'NVIDIA_RESOURCE_NAMES',
    'pod-resources-kubelet-socket': 'DCGM_POD_RESOURCES_KUBELET_SOCKET',
    'xid-count-window-size': 'DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE',
    'clock-events-count-window-size': 'DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE',
}
ENV_COLLECTORS = FLAGS['collectors']
ENV_LISTEN = FLAGS['address']
ENV_KUBERNETES = FLAGS['kubernetes']
ENV_GPU_ID_TYPE = FLAGS['kubernetes-gpu-id-type']
ENV_VIRTUAL_GPUS = FLAGS['kubernetes-virtual-gpus']
ENV_DRA = FLAGS['kubernetes-enable-dra']
ENV_RESOURCE_NAMES = FLAGS['nvidia-resource-names']
# the GPU id type matching a device plugin that names devices by UUID (NVIDIA's default deviceIDStrategy uuid)
GPU_ID_TYPE = 'uid'
# the node the pod runs on: the exporter then watches that node's pods only (DCGMX-08)
ENV_NODE_NAME = 'NODE_NAME'

PORT = 9400
PORT_NAME = 'metrics'
METRICS_PATH = '/metrics'
HEALTH_PATH = '/health'
# the kubelet's pod-resources directory: the exporter reads its socket kubelet.sock to find the pods of a device
POD_RESOURCES_DIR = '/var/lib/kubelet/pod-resources'
# where our collectors file is mounted in the container (a ConfigMap volume) and its key
COLLECTORS_DIR = '/etc/gpuops/dcgm-exporter'
COLLECTORS_KEY = 'counters.csv'
# the resource name upstream's exporter always attributes; other names must be listed in NVIDIA_RESOURCE_NAMES, MIG
# resources (nvidia.com/mig-*) are attributed by their prefix (DCGMX-11)
DEFAULT_RESOURCE = 'nvidia.com/gpu'
MIG_RESOURCE_PREFIX = 'nvidia.com/mig-'


def collectors_csv(counters: tuple[str, ...] = COUNTERS) -> str:
    """The collectors file the exporter reads (-f / DCGM_EXPORTER_COLLECTORS): one `name, type, help` line a counter."""
    lines = ['# DCGM field, Prometheus metric type, help (gpuops.k8s_gpu)']
    for name in counters:
        kind, text = COUNTER_INFO[name]
        lines.append('%s, %s, %s' % (name, kind, text))
    return '\n'.join(lines) + '\n'
