#!/usr/bin/env python3
"""Strict schema validation of Kubernetes manifests against every supported minor (1.24-1.33).

Uses the JSON schemas shipped in kubernetes-validate (strict variants: unknown fields are errors).

* built-in kinds (core and the upstream API groups listed in BUILTIN_GROUPS): validated on each minor;
  a missing schema is a FAILURE ("schema-missing": the API does not exist / was removed in that minor);
* kinds from any other group are custom resources: reported in ``not_validated`` with the reason
  "not validated: custom resource" and never counted as passed.

Library:  from validate import validate_files, validate_documents
CLI:      python lab/kube/validate.py [--minor 1.29 ...] [--json] FILE...   (exit 0 ok, 1 failures, 2 usage/parse)
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Iterable, List, Optional

import yaml

try:
    import kubernetes_validate as kv
    from kubernetes_validate import utils as kv_utils
except ImportError as e:  # fail loudly: the lab requires it
    raise SystemExit(f"kubernetes-validate is required (pip install kubernetes-validate==1.33.1): {e}")

SUPPORTED_MINORS = [f"1.{m}" for m in range(24, 34)]
CUSTOM_RESOURCE_REASON = "not validated: custom resource"

# API groups served by kube-apiserver itself (anything else is a CRD / aggregated API)
BUILTIN_GROUPS = {
    "", "apps", "batch", "policy", "autoscaling", "extensions",
    "admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
    "authentication.k8s.io", "authorization.k8s.io", "certificates.k8s.io", "coordination.k8s.io",
    "discovery.k8s.io", "events.k8s.io", "flowcontrol.apiserver.k8s.io", "internal.apiserver.k8s.io",
    "networking.k8s.io", "node.k8s.io", "rbac.authorization.k8s.io", "resource.k8s.io",
    "scheduling.k8s.io", "storage.k8s.io", "storagemigration.k8s.io",
}


def available_minors() -> List[str]:
    """Minor versions for which the installed kubernetes-validate ships schemas."""
    return sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=lambda v: int(v.split(".")[1]))


def _group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _ident(doc: Dict[str, Any]) -> Dict[str, Any]:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return {"apiVersion": doc.get("apiVersion"), "kind": doc.get("kind"), "name": meta.get("name"),
            "namespace": meta.get("namespace")}


def load_documents(path: str) -> List[Dict[str, Any]]:
    """All non-empty YAML documents of a file; `kind: *List` documents are expanded into their items."""
    with (sys.stdin if path == "-" else open(path)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    out = []
    for d in docs:
        if isinstance(d, dict) and str(d.get("kind", "")).endswith("List") and isinstance(d.get("items"), list):
            out.extend(d["items"])
        else:
            out.append(d)
    return out


def validate_documents(docs: Iterable[Any], source: str = "<memory>", minors: Optional[List[str]] = None,
                       strict: bool = True) -> Dict[str, Any]:
    minors = list(minors or SUPPORTED_MINORS)
    have = set(available_minors())
    report: Dict[str, Any] = {"minors": minors, "strict": strict, "results": [], "not_validated": [],
                              "failures": [], "ok": True}
    missing_minors = [m for m in minors if m not in have]
    if missing_minors:
        # the fallback in kubernetes-validate would silently use an older schema set: refuse
        for m in missing_minors:
            report["failures"].append({"source": source, "index": None, "minor": m, "status": "minor-unsupported",
                                       "message": f"kubernetes-validate {kv.__version__} has no schemas for {m}"})
    for idx, doc in enumerate(docs):
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            report["failures"].append({"source": source, "index": idx, "minor": None, "status": "invalid-document",
                                       "message": "document is not a Kubernetes object (apiVersion/kind missing)"})
            continue
        ident = _ident(doc)
        if _group_of(doc["apiVersion"]) not in BUILTIN_GROUPS:
            report["not_validated"].append(dict(ident, source=source, index=idx, reason=CUSTOM_RESOURCE_REASON))
            continue
        for minor in minors:
            if minor not in have:
                continue
            entry = dict(ident, source=source, index=idx, minor=minor)
            try:
                kv.validate(doc, minor, strict=strict)
                entry.update(status="passed")
            except kv_utils.ValidationError as e:
                entry.update(status="failed", path=".".join(str(p) for p in e.path), message=e.message)
            except kv_utils.SchemaNotFoundError:
                entry.update(status="schema-missing",
                             message=f"no schema for {doc['apiVersion']}/{doc['kind']} in Kubernetes {minor} "
                                     f"(API not served or removed in that minor)")
            except kv_utils.VersionNotSupportedError:
                entry.update(status="minor-unsupported", message=f"no schemas for {minor}")
            except Exception as e:  # noqa: BLE001 - anything else is a failure, never a skip
                entry.update(status="error", message=f"{type(e).__name__}: {e}")
            report["results"].append(entry)
            if entry["status"] != "passed":
                report["failures"].append(entry)
    report["ok"] = not report["failures"]
    return report


def validate_files(paths: Iterable[str], minors: Optional[List[str]] = None, strict: bool = True) -> Dict[str, Any]:
    total: Dict[str, Any] = {"minors": list(minors or SUPPORTED_MINORS), "strict": strict, "results": [],
                             "not_validated": [], "failures": [], "ok": True}
    for p in paths:
        try:
            docs = load_documents(p)
        except (OSError, yaml.YAMLError) as e:
            total["failures"].append({"source": p, "index": None, "minor": None, "status": "unreadable",
                                      "message": str(e)})
            continue
        r = validate_documents(docs, p, minors, strict)
        for k in ("results", "not_validated", "failures"):
            total[k].extend(r[k])
    total["ok"] = not total["failures"]
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--minor", action="append", help="limit to these minors (repeatable); default 1.24..1.33")
    ap.add_argument("--non-strict", action="store_true", help="allow unknown fields (not for CI)")
    ap.add_argument("--json", action="store_true", help="print the machine-readable report")
    ap.add_argument("--list-minors", action="store_true", help="print the minors the installed schemas cover")
    a = ap.parse_args(argv)
    if a.list_minors:
        print(" ".join(available_minors()))
        return 0
    if not a.files:
        ap.error("no files given")
    rep = validate_files(a.files, a.minor, strict=not a.non_strict)
    if a.json:
        print(json.dumps(rep, indent=2))
    else:
        passed = sum(1 for r in rep["results"] if r["status"] == "passed")
        for f in rep["failures"]:
            what = f"{f.get('apiVersion')}/{f.get('kind')} {f.get('name')}" if f.get("kind") else ""
            loc = f" at {f['path']}" if f.get("path") else ""
            print(f"FAIL {f['source']}[{f.get('index')}] {what} k8s {f.get('minor')}: {f['status']}{loc}: "
                  f"{f.get('message')}")
        for n in rep["not_validated"]:
            print(f"SKIP {n['source']}[{n['index']}] {n['apiVersion']}/{n['kind']} {n['name']}: {n['reason']}")
        print(f"{passed} passed, {len(rep['failures'])} failed, {len(rep['not_validated'])} not validated "
              f"(custom resources); minors {', '.join(rep['minors'])}; strict={rep['strict']}")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
