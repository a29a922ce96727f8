# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_info's facts as one dict: NVML probe, node probe, PCI fallback and derived facts.

Shared by gpu_info and gpu_doctor (modules cannot import each other).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_catalog
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node import node_probe, nvml_probe


def gather(mig_profiles: bool = True, with_node: bool = True, root: str = '/', health: bool = False,
           xid_wait_ms: int | None = None, log_lines: list[str] | None = None,
           run: Callable[..., Any] | None = None) -> dict[str, Any]:
    """All facts gpu_info returns; the doctor adds each GPU's health, NVML's Xid events and the kernel log. ``run``
    (a module's run_command) lets the node probe ask containerd its version."""
    asked: dict[str, Any] = {}
    if health:
        asked['include_health'] = True
    if xid_wait_ms is not None:
        asked['xid_wait_ms'] = xid_wait_ms
    nvml = nvml_probe.probe(include_mig_profiles=mig_profiles, **asked)
    gpus = nvml.pop('gpus')
    node = node_probe.node_facts(root, log_lines, run=run) if with_node else {}
    nvml_switches = nvml.pop('nvswitches', [])
    if with_node:
        # NVSwitches seen through the GPUs' NVLinks (NVML) count as well as those found on PCI
        node['nvswitch_count'] = max(node.get('nvswitch_count', 0), len(nvml_switches))
        node['fabricmanager_required'] = node['nvswitch_count'] > 0 or bool(node.get('nvlink5'))
        node['nvswitch_bus_ids_nvml'] = nvml_switches
    source = 'nvml'
    if nvml['status'] != 'ok':
        source = 'pci'
        gpus = [dict(index=i, name=d.get('name'), pci_bus_id=d['pci_bus_id'], pci_device_id=d['pci_device_id'],
                     driver=d.get('driver'))
                for i, d in enumerate(node.get('pci_gpus', []))]
    usable = [g for g in gpus if not g.get('error')] if source == 'nvml' else []
    return {
        'nvml': nvml,
        'gpus': gpus,
        'gpu_count': len(gpus),
        'source': source,
        'node': node,
        'sharing': gpu_catalog.sharing_capabilities(usable),
        'labels': gpu_catalog.node_labels(usable, nvml.get('driver_version'), nvml.get('cuda_driver_version')),
    }
