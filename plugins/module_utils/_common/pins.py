# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every image, chart and package version the collection pins, defined once, each with the upstream repository and
ref its behaviour was read at (the conformance table in docs/conformance/ names the rows).

Plain Python (no Ansible imports, no other module_utils): the stack renderers import it; the literal defaults that
must stay literal (argument_specs, role defaults, playbooks) are compared with it by
tests/unit/plugins/module_utils/_common/test_pins.py. `lab/bin/bump-pin.py NAME VERSION` prints every place a bump
touches (and applies it with --write); docs/extending.md has the checklist.

Each pin:
  kind:         image (repository:tag), chart (a Helm chart release), package (a distribution package version) or
                release (a project release the renderer follows)
  repository:   the image repository (kind image) or the chart/package name
  tag:          the pinned tag or version
  upstream:     the source repository the facts were read from, and upstream_ref the tag or commit read
  conformance:  the conformance table that records what was read
"""

from __future__ import annotations

PINS = {
    'nvidia-device-plugin': dict(
        kind='image', repository='nvcr.io/nvidia/k8s-device-plugin', tag='v0.20.0',
        upstream='NVIDIA/k8s-device-plugin', upstream_ref='v0.20.0', conformance='docs/conformance/nvidia-device-plugin.md'),
    'mig-manager': dict(
        kind='image', repository='nvcr.io/nvidia/cloud-native/k8s-mig-manager', tag='v0.15.0',
        upstream='NVIDIA/mig-parted', upstream_ref='v0.15.0', conformance='docs/conformance/mig-manager.md'),
    'gpu-operator': dict(
        kind='chart', repository='gpu-operator', tag='v26.7.0',
        upstream='NVIDIA/gpu-operator', upstream_ref='v26.7.0', conformance='docs/conformance/gpu-operator.md'),
    'hami': dict(
        kind='image', repository='docker.io/projecthami/hami', tag='v2.10.0',
        upstream='Project-HAMi/HAMi', upstream_ref='v2.10.0', conformance='docs/conformance/hami.md'),
    'volcano': dict(
        kind='release', repository='volcano', tag='1.15',
        upstream='volcano-sh/volcano', upstream_ref='v1.15.1', conformance='docs/conformance/volcano.md'),
    'volcano-vgpu-device-plugin': dict(
        kind='image', repository='docker.io/projecthami/volcano-vgpu-device-plugin', tag='v1.12.0',
        upstream='Project-HAMi/volcano-vgpu-device-plugin', upstream_ref='v1.12.0',
        conformance='docs/conformance/volcano.md'),
    'volcano-device-plugin': dict(
        kind='image', repository='docker.io/volcanosh/volcano-device-plugin', tag='v1.0.0',
        upstream='volcano-sh/devices', upstream_ref='v1.0.0', conformance='docs/conformance/volcano.md'),
    'gpushare-extender': dict(
        kind='image', repository='registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender', tag='1.11-d170d8a',
        upstream='AliyunContainerService/gpushare-scheduler-extender',
        upstream_ref='c0b61411cddabd1b19500878ab355afeeae5589e', conformance='docs/conformance/gpushare.md'),
    'gpushare-device-plugin': dict(
        kind='image', repository='registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin', tag='v2-1.11-aff8a23',
        upstream='AliyunContainerService/gpushare-device-plugin',
        upstream_ref='45fb8b88692250cff2d53cb64b0a41864a5fcaf3', conformance='docs/conformance/gpushare.md'),
    'gpu-manager': dict(
        kind='image', repository='docker.io/tkestack/gpu-manager', tag='1.1.5',
        upstream='tkestack/gpu-manager', upstream_ref='v1.1.5', conformance='docs/conformance/gpu-manager.md'),
    'cuda-sample': dict(
        kind='image', repository='nvcr.io/nvidia/k8s/cuda-sample', tag='vectoradd-cuda12.5.0',
        upstream='NVIDIA/cuda-samples (NGC image nvcr.io/nvidia/k8s/cuda-sample)', upstream_ref='vectoradd-cuda12.5.0',
        conformance=''),
    'dra-driver-nvidia-gpu': dict(
        kind='chart', repository='dra-driver-nvidia-gpu', tag='v0.5.0',
        upstream='kubernetes-sigs/dra-driver-nvidia-gpu', upstream_ref='v0.5.0',
        conformance='docs/conformance/dra-driver-nvidia-gpu.md'),
    'dra-driver-nvidia-gpu-image': dict(
        kind='image', repository='registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu', tag='v0.5.0',
        upstream='kubernetes-sigs/dra-driver-nvidia-gpu', upstream_ref='v0.5.0',
        conformance='docs/conformance/dra-driver-nvidia-gpu.md'),
    'dcgm-exporter': dict(
        kind='image', repository='nvcr.io/nvidia/k8s/dcgm-exporter', tag='4.5.3-4.8.2-distroless',
        upstream='NVIDIA/dcgm-exporter', upstream_ref='4.5.3-4.8.2', conformance='docs/conformance/dcgm-exporter.md'),
    'nvidia-container-toolkit': dict(
        kind='package', repository='nvidia-container-toolkit', tag='1.20.0-1',
        upstream='NVIDIA/nvidia-container-toolkit', upstream_ref='v1.20.0',
        conformance='docs/conformance/nvidia-container-toolkit.md'),
}


def pin(name: str) -> dict:
    """The pin's dict; KeyError names the known pins."""
    if name not in PINS:
        raise KeyError('no pin %r; pins: %s' % (name, ', '.join(sorted(PINS))))
    return PINS[name]


def tag(name: str) -> str:
    return pin(name)['tag']


def ref(name: str) -> str:
    """What the collection writes: repository:tag for an image, the tag otherwise."""
    p = pin(name)
    return '%s:%s' % (p['repository'], p['tag']) if p['kind'] == 'image' else p['tag']
