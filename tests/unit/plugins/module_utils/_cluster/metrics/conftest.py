# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the metrics unit tests."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.modules import gpu_metrics_manifests
from ansible_collections.gpuops.k8s_gpu.tests.unit.plugins.modules.utils import capture_exit, main_runner


@pytest.fixture
def run(monkeypatch):
    """Run module gpu_metrics_manifests with the given parameters; returns its result."""
    capture_exit(monkeypatch)
    return main_runner(gpu_metrics_manifests.main, [])
