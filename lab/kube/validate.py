#!/usr/bin/env python3
"""Strict schema validation of Kubernetes manifests against every supported minor (1.24-1.37).

Uses the JSON schemas shipped in kubernetes-validate (strict variants: unknown fields are errors).

* built-in kinds (core and the upstream API groups listed in BUILTIN_GROUPS): validated on each minor;
  a missing schema is a FAILURE ("schema-missing": the API does not exist / was removed in that minor);
* kinds from any other group are custom resources: reported in ``not_validated`` with the reason
  "not validated: custom resource" and never counted as passed.

Each distinct document is validated once per minor (results are cached by the document's canonical JSON), so
the same ServiceAccount or ConfigMap rendered by several strategies costs one schema check per minor.

Library:  from validate import validate_files, validate_documents
CLI:      python lab/kube/validate.py [--minor 1.29 ...] [--json] FILE...   (exit 0 ok, 1 failures, 2 usage/parse)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Dict, Iterable, List, Optional

import yaml

from kv_paths import KV_TARGET, LEGACY_TARGET, schema_root

# kubernetes-validate 1.37 lives outside the venv's import path, in .venv/kv (kv_paths.py); an installed copy on the
# normal path is used when that directory does not exist.
if os.path.isdir(KV_TARGET) and KV_TARGET not in sys.path:
    sys.path.append(KV_TARGET)

try:
    import jsonschema
    import referencing
    import kubernetes_validate as kv
except ImportError as e:  # fail loudly: the lab requires it
    raise SystemExit(f"kubernetes-validate is required (lab/bin/bootstrap.sh installs it into {KV_TARGET}): {e}")

# kubernetes-validate 1.37 ships schemas for 1.25-1.37 only; 1.24's come from the 1.33.1 wheel, installed by
# lab/bin/bootstrap.sh with `pip install --no-deps --target .venv/kv-legacy` (lab/requirements-kv-legacy.txt).

SUPPORTED_MINORS = [f"1.{m}" for m in range(24, 38)]
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


_SCHEMA_DIR_RE = re.compile(r"^v(\d+)\.(\d+)\.\d+-local$")


def _schema_roots() -> List[str]:
    """Schema roots, newest package first: the installed kubernetes-validate, then the legacy copy."""
    roots = [os.path.join(os.path.dirname(os.path.abspath(kv.__file__)), "kubernetes-json-schema")]
    legacy = schema_root(LEGACY_TARGET)
    if legacy:
        roots.append(legacy)
    return roots


def schema_dirs() -> Dict[str, str]:
    """minor ('1.24') -> its directory of non-strict schemas ('-strict' is appended for strict validation).
    A minor the installed package ships is taken from it; only the others come from the legacy copy."""
    out: Dict[str, str] = {}
    for root in _schema_roots():
        for name in sorted(os.listdir(root)):
            m = _SCHEMA_DIR_RE.match(name)
            if m and f"{m.group(1)}.{m.group(2)}" not in out:
                out[f"{m.group(1)}.{m.group(2)}"] = os.path.join(root, name)
    return out


def available_minors() -> List[str]:
    """Minor versions for which schemas are installed (kubernetes-validate plus the legacy copy for 1.24)."""
    return sorted(schema_dirs(), key=lambda v: int(v.split(".")[1]))


class SchemaMissing(Exception):
    pass


_VALIDATORS: Dict[Any, Any] = {}
_DEFINITIONS: Dict[str, Any] = {}


def _validator(doc: Dict[str, Any], minor: str, strict: bool):
    """A jsonschema validator for the document's kind on one minor (kubernetes-validate's file layout), cached:
    kubernetes_validate.validate() reloads the 1 MB definitions file on every call."""
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    directory = schema_dirs()[minor] + ("-strict" if strict else "")
    fname = os.path.join(directory, f"{str(doc['kind']).lower()}-{api_version}.json")
    hit = _VALIDATORS.get(fname)
    if hit is not None:
        return hit
    if not os.path.exists(fname):
        raise SchemaMissing(fname)
    with open(fname) as f:
        schema = json.load(f)
    if directory not in _DEFINITIONS:
        with open(os.path.join(directory, "_definitions.json")) as f:
            _DEFINITIONS[directory] = referencing.Resource.from_contents(json.load(f))
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = _DEFINITIONS[directory] @ registry
    _VALIDATORS[fname] = jsonschema.validators.Draft202012Validator(schema, registry=registry)
    return _VALIDATORS[fname]


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


_CACHE: Dict[Any, Dict[str, Any]] = {}


def _check(doc: Dict[str, Any], minor: str, strict: bool) -> Dict[str, Any]:
    """Validate one document on one minor; the outcome (status, path, message) is cached."""
    key = (json.dumps(doc, sort_keys=True, default=str), minor, strict)
    hit = _CACHE.get(key)
    if hit is not None:
        return dict(hit)
    try:
        _validator(doc, minor, strict).validate(doc)
        out: Dict[str, Any] = {"status": "passed"}
    except jsonschema.ValidationError as e:
        out = {"status": "failed", "path": ".".join(str(p) for p in e.path), "message": e.message}
    except SchemaMissing:
        out = {"status": "schema-missing",
               "message": f"no schema for {doc['apiVersion']}/{doc['kind']} in Kubernetes {minor} "
                          f"(API not served or removed in that minor)"}
    except KeyError:
        out = {"status": "minor-unsupported", "message": f"no schemas for {minor}"}
    except Exception as e:  # noqa: BLE001 - anything else is a failure, never a skip
        out = {"status": "error", "message": f"{type(e).__name__}: {e}"}
    _CACHE[key] = dict(out)
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
                                       "message": f"kubernetes-validate {kv.__version__} (and {LEGACY_TARGET}) has no "
                                                  f"schemas for {m}; run lab/bin/bootstrap.sh"})
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
            entry.update(_check(doc, minor, strict))
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
    ap.add_argument("--minor", action="append", help="limit to these minors (repeatable); default 1.24..1.37")
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
