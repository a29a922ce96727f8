"""Strategy dra on every Kubernetes minor of its window (1.32-1.37): the pool's ResourceClaimTemplates, a shared
ResourceClaim and the validation workload's template are rendered in the resource.k8s.io version the minor serves
(1.32 v1beta1 with the flat DeviceRequest, 1.33 v1beta2, 1.34+ v1) and each is valid against that minor's own
strict schema (kubernetes-validate, lab/kube/validate.py: unknown fields are errors), for state present and absent
(removal deletes the same objects, so they must be in a version the cluster serves too). Issue #37 item 1.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_dra_claims_schema.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "lab" / "kube"))
sys.path.insert(0, str(ROOT / "build" / "collections"))

from validate import validate_documents  # noqa: E402
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as stacks_render  # noqa: E402

CLAIMS = [{"name": "full", "count": 2, "product_name": "Tesla T4", "min_memory": "10Gi"},
          {"name": "slice", "kind": "mig", "mig_profile": "1g.10gb"},
          {"name": "ts", "kind": "time-slicing", "interval": "Short"},
          {"name": "team", "shared": True}]


def render(minor, state):
    settings = {"chart_path": "/charts/dra-driver-nvidia-gpu", "chart_version": "v0.5.0",
                "kube_version": "v1.%d.3" % minor, "kube_dra_enabled": minor < 34, "claim_namespace": "ml",
                "claim_templates": CLAIMS, "feature_gates": {"TimeSlicingSettings": True}}
    return stacks_render.render({
        "strategy": "dra", "pool": "schema", "nodes": ["n1"], "settings": {"dra": settings},
        "cdi_enabled": {"n1": True} if state == "present" else {}, "check_conflicts": state == "present",
        "validation": {"enabled": True, "namespace": "gpu-check"}})


@pytest.mark.parametrize("state", ["present", "absent"])
@pytest.mark.parametrize("minor", [32, 33, 34, 37])
def test_DRA_13_claims_valid_against_the_schema_of_the_minor(minor, state):
    res = render(minor, state)
    docs = res["pool_manifests"] + res["validation_manifests"]
    assert sorted(d["kind"] for d in docs) == ["Pod", "ResourceClaim"] + ["ResourceClaimTemplate"] * 4
    want = {32: "resource.k8s.io/v1beta1", 33: "resource.k8s.io/v1beta2"}.get(minor, "resource.k8s.io/v1")
    assert {d["apiVersion"] for d in docs if d["kind"] != "Pod"} == {want}
    report = validate_documents(docs, source="dra-%d-%s" % (minor, state), minors=["1.%d" % minor])
    assert report["ok"], report["failures"]
    assert not report["not_validated"], report["not_validated"]
