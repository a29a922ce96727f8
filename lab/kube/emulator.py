#!/usr/bin/env python3
"""Small Kubernetes API server emulator for the gpuops.k8s_gpu test lab.

Plain HTTP on loopback, stdlib http.server + PyYAML. No controllers, no auth.
See lab/kube/README.md for the supported surface and the fidelity gaps.

    python lab/kube/emulator.py --port 0 --state-dir lab/.state/kube/default \
        [--version v1.29.4] [--seed nodes.yaml] [--history 5000]
"""
from __future__ import annotations

import argparse
import base64
import collections
import copy
import datetime
import json
import os
import random
import re
import signal
import string
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

import kv_paths  # lab/kube, beside this file

MISSING = object()

# --------------------------------------------------------------------------------------------
# Resource catalogue
# --------------------------------------------------------------------------------------------
RW = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class RType:
    def __init__(self, group, version, plural, kind, namespaced, short=(), subresources=(),
                 has_generation=False, status_sub=False, crd=None, categories=(), verbs=None):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced = namespaced
        self.short = list(short)
        self.subresources = list(subresources)
        self.has_generation = has_generation
        self.status_sub = status_sub or "status" in subresources
        if self.status_sub and "status" not in self.subresources:
            self.subresources.append("status")
        self.crd = crd  # name of the owning CRD for custom resources
        self.categories = list(categories)
        self.verbs = verbs or RW

    @property
    def gv(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self):
        return self.kind.lower()

    @property
    def builtin(self):
        return self.crd is None


def _builtin_types():
    T = RType
    gen = dict(has_generation=True)
    return [
        T("", "v1", "namespaces", "Namespace", False, ["ns"], ["status", "finalize"]),
        T("", "v1", "nodes", "Node", False, ["no"], ["status", "proxy"]),
        T("", "v1", "pods", "Pod", True, ["po"], ["status", "eviction", "log", "binding", "exec",
                                                  "ephemeralcontainers"], categories=["all"]),
        T("", "v1", "services", "Service", True, ["svc"], ["status", "proxy"], categories=["all"]),
        T("", "v1", "configmaps", "ConfigMap", True, ["cm"]),
        T("", "v1", "secrets", "Secret", True),
        T("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"], ["token"]),
        T("", "v1", "events", "Event", True, ["ev"]),
        T("", "v1", "endpoints", "Endpoints", True, ["ep"]),
        T("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ["pvc"], ["status"]),
        T("", "v1", "persistentvolumes", "PersistentVolume", False, ["pv"], ["status"]),
        T("", "v1", "limitranges", "LimitRange", True, ["limits"]),
        T("", "v1", "resourcequotas", "ResourceQuota", True, ["quota"], ["status"]),
        T("apps", "v1", "deployments", "Deployment", True, ["deploy"], ["status", "scale"],
          categories=["all"], **gen),
        T("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], ["status"], categories=["all"], **gen),
        T("apps", "v1", "statefulsets", "StatefulSet", True, ["sts"], ["status", "scale"],
          categories=["all"], **gen),
        T("apps", "v1", "replicasets", "ReplicaSet", True, ["rs"], ["status", "scale"],
          categories=["all"], **gen),
        T("apps", "v1", "controllerrevisions", "ControllerRevision", True),
        T("batch", "v1", "jobs", "Job", True, [], ["status"], categories=["all"], **gen),
        T("batch", "v1", "cronjobs", "CronJob", True, ["cj"], ["status"], categories=["all"], **gen),
        T("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        T("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        T("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        T("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        T("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
        T("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
          "MutatingWebhookConfiguration", False, **gen),
        T("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
          "ValidatingWebhookConfiguration", False, **gen),
        T("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ["pc"]),
        T("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
          False, ["crd", "crds"], ["status"], **gen),
        T("coordination.k8s.io", "v1", "leases", "Lease", True),
        T("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"], ["status"], **gen),
        T("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ["sc"]),
        T("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ["netpol"], **gen),
        T("events.k8s.io", "v1", "events", "Event", True, ["ev"]),
    ]


# strategic-merge-patch merge keys (by field name; "ports" is context dependent)
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "imagePullSecrets": "name", "hostAliases": "ip", "conditions": "type", "webhooks": "name",
    "ownerReferences": "uid", "secrets": "name", "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name", "addresses": "type", "taints": "key",
}
PRIMITIVE_SET_LISTS = {"finalizers"}

SPEC_STRUCT = {("", p) for p in ("namespaces", "nodes", "pods", "services", "persistentvolumeclaims",
                                 "persistentvolumes", "limitranges", "resourcequotas")} | {
    ("apps", p) for p in ("deployments", "daemonsets", "statefulsets", "replicasets")} | {
    ("batch", "jobs"), ("batch", "cronjobs"), ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "networkpolicies"), ("coordination.k8s.io", "leases")}
STATUS_DEFAULTS = {
    ("", "services"): {"loadBalancer": {}},
    ("apps", "deployments"): {},
    ("apps", "daemonsets"): {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                             "numberReady": 0},
    ("apps", "statefulsets"): {"replicas": 0, "availableReplicas": 0},
    ("apps", "replicasets"): {"replicas": 0},
    ("batch", "jobs"): {}, ("batch", "cronjobs"): {},
    ("policy", "poddisruptionbudgets"): {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                                         "expectedPods": 0},
}  # merged as sets by strategic merge patch


def merge_key_for(field, items):
    if field == "ports":
        if any(isinstance(i, dict) and "containerPort" in i for i in items):
            return "containerPort"
        return "port"
    return MERGE_KEYS.get(field)


# --------------------------------------------------------------------------------------------
# Errors / Status
# --------------------------------------------------------------------------------------------
class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self):
        b = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            b["details"] = self.details
        return b


def not_found(rt, name):
    res = rt.plural if not rt.group else f"{rt.plural}.{rt.group}"
    return ApiError(404, "NotFound", f'{res} "{name}" not found',
                    {"name": name, "group": rt.group, "kind": rt.plural})


def invalid(rt, name, causes):
    msg = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
    return ApiError(422, "Invalid", f'{rt.kind}.{rt.group or ""} "{name}" is invalid: {msg}'.replace('. "', ' "'),
                    {"name": name, "group": rt.group, "kind": rt.kind,
                     "causes": [{"reason": c.get("reason", "FieldValueInvalid"),
                                 "message": c["message"], "field": c["field"]} for c in causes]})


def bad_request(msg):
    return ApiError(400, "BadRequest", msg)


QUANTITY_MAPS = {"limits", "requests", "capacity", "allocatable", "hard", "used", "overhead"}


def _fmt_quantity(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == int(v):
            return str(int(v))
        milli = v * 1000
        return f"{int(round(milli))}m"
    return v


def normalize_quantities(obj, parent=None):
    """Numbers in resource-quantity maps are serialized as strings by the apiserver (1 -> "1",
    0.5 -> "500m"). String quantities are kept as given (no canonicalization)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if parent in QUANTITY_MAPS and isinstance(v, (int, float)):
                obj[k] = _fmt_quantity(v)
            else:
                normalize_quantities(v, k)
    elif isinstance(obj, list):
        for i in obj:
            normalize_quantities(i, None)
    return obj


def kv_schema_root():
    """The directory of kubernetes-validate's JSON schemas: .venv/kv (kv_paths.py), else an importable copy's. The
    package is never imported here."""
    base = kv_paths.schema_root()
    if base:
        return base
    import importlib.util
    spec = importlib.util.find_spec("kubernetes_validate")
    return os.path.join(os.path.dirname(spec.origin), "kubernetes-json-schema")


class Pruner:
    """Drops fields unknown to the built-in schema of the emulated minor, like the apiserver's decoder
    (fieldValidation Ignore/Warn) or reports them (Strict). Schemas: the non-strict JSON schemas shipped
    with kubernetes-validate. Kinds without a schema file are left alone."""

    def __init__(self, git_version):
        self.dir = None
        self.defs = None
        self.cache = {}
        try:
            base = kv_schema_root()
            have = sorted((d for d in os.listdir(base) if re.match(r"^v1\.\d+\.0-local$", d)),
                          key=lambda d: int(d.split(".")[1]))
        except Exception as e:  # fail loudly: without the schemas no unknown field would ever be dropped
            raise SystemExit(f"emulator: kubernetes-validate's schemas not found (lab/bin/bootstrap.sh installs them "
                             f"into .venv/kv; GPUOPS_KV points elsewhere): {e}") from e
        mm = re.match(r"v?1\.(\d+)", git_version or "")
        want = int(mm.group(1)) if mm else 29
        pick = [d for d in have if int(d.split(".")[1]) <= want] or have[:1]
        self.dir = os.path.join(base, pick[-1]) if pick else None
        self.minor = pick[-1] if pick else None

    def _schema(self, rt):
        if not self.dir or not rt.builtin:
            return None
        key = (rt.group, rt.version, rt.kind)
        if key not in self.cache:
            grp = rt.group.split(".")[0] if rt.group else ""
            fname = f"{rt.kind.lower()}-{grp + '-' if grp else ''}{rt.version}.json"
            path = os.path.join(self.dir, fname)
            self.cache[key] = json.load(open(path)) if os.path.exists(path) else None
            if self.cache[key] is not None and self.defs is None:
                self.defs = json.load(open(os.path.join(self.dir, "_definitions.json")))["$defs"]
        return self.cache[key]

    def _resolve(self, sch):
        while isinstance(sch, dict) and "$ref" in sch:
            sch = self.defs.get(sch["$ref"].rsplit("/", 1)[1], {})
        return sch or {}

    def prune(self, rt, obj):
        sch = self._schema(rt)
        unknown = []
        if sch is not None:
            self._walk(sch, obj, "", unknown)
        return unknown

    def _walk(self, sch, val, path, unknown):
        sch = self._resolve(sch)
        if isinstance(val, dict):
            props = sch.get("properties")
            if props:
                for k in list(val):
                    if k not in props:
                        unknown.append(f"{path}.{k}".lstrip("."))
                        del val[k]
                    elif val[k] is not None:
                        self._walk(props[k], val[k], f"{path}.{k}", unknown)
            elif isinstance(sch.get("additionalProperties"), dict):
                for k, v in val.items():
                    self._walk(sch["additionalProperties"], v, f"{path}[{k}]", unknown)
        elif isinstance(val, list) and isinstance(sch.get("items"), dict):
            for i, v in enumerate(val):
                self._walk(sch["items"], v, f"{path}[{i}]", unknown)


def now_ts():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------
_SET_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(sel):
    parts, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(sel):
    reqs = []
    for part in _split_selector(sel or ""):
        m = _SET_RE.match(part)
        if m:
            vals = {v.strip() for v in m.group(3).split(",") if v.strip()}
            reqs.append((m.group(1), m.group(2), vals))
            continue
        m = re.match(r"^([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)$", part)
        if m:
            op = {"=": "in", "==": "in", "!=": "notin"}[m.group(2)]
            reqs.append((m.group(1), op, {m.group(3)}))
            continue
        m = re.match(r"^!\s*([A-Za-z0-9_./-]+)$", part)
        if m:
            reqs.append((m.group(1), "!exists", None))
            continue
        m = re.match(r"^([A-Za-z0-9_./-]+)$", part)
        if m:
            reqs.append((m.group(1), "exists", None))
            continue
        raise bad_request(f"unable to parse requirement: invalid label selector: {part!r}")
    return reqs


def label_match(reqs, labels):
    labels = labels or {}
    for key, op, vals in reqs:
        if op == "in" and labels.get(key) not in vals:
            return False
        if op == "notin" and key in labels and labels[key] in vals:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


FIELD_SELECTORS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
}
EXTRA_FIELDS = {
    "pods": {"spec.nodeName": ("spec", "nodeName"), "status.phase": ("status", "phase"),
             "spec.restartPolicy": ("spec", "restartPolicy"),
             "spec.schedulerName": ("spec", "schedulerName"),
             "spec.serviceAccountName": ("spec", "serviceAccountName"),
             "status.podIP": ("status", "podIP"), "status.nominatedNodeName": ("status", "nominatedNodeName")},
    "nodes": {"spec.unschedulable": ("spec", "unschedulable")},
    "namespaces": {"status.phase": ("status", "phase")},
    "secrets": {"type": ("type",)},
    "events": {"involvedObject.name": ("involvedObject", "name"), "involvedObject.kind": ("involvedObject", "kind"),
               "involvedObject.namespace": ("involvedObject", "namespace"), "reason": ("reason",),
               "type": ("type",)},
}


def parse_field_selector(sel, rt):
    reqs = []
    allowed = dict(FIELD_SELECTORS)
    allowed.update(EXTRA_FIELDS.get(rt.plural, {}))
    for part in _split_selector(sel or ""):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{sel}'; can't understand '{part}'")
        field = m.group(1)
        if field not in allowed:
            raise bad_request(f'field label not supported: {field}')
        reqs.append((allowed[field], m.group(2) != "!=", m.group(3)))
    return reqs


def field_match(reqs, obj):
    for path, eq, val in reqs:
        cur = obj
        for p in path:
            cur = cur.get(p) if isinstance(cur, dict) else None
        if isinstance(cur, bool):
            cur = "true" if cur else "false"
        cur = "" if cur is None else str(cur)
        if (cur == val) != eq:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Merge helpers
# --------------------------------------------------------------------------------------------
def json_merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = json_merge_patch(result.get(k), v)
    return result


def strategic_merge(target, patch, field=None):
    """Strategic merge patch (subset): merge keys, $patch replace/delete, null deletes,
    $deleteFromPrimitiveList, $setElementOrder / $retainKeys ignored."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return MISSING
        result = copy.deepcopy(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if k.startswith("$setElementOrder/") or k == "$retainKeys" or k == "$patch":
                continue
            if k.startswith("$deleteFromPrimitiveList/"):
                fld = k.split("/", 1)[1]
                if isinstance(result.get(fld), list):
                    result[fld] = [x for x in result[fld] if x not in (v or [])]
                continue
            if v is None:
                result.pop(k, None)
                continue
            merged = strategic_merge(result.get(k, MISSING), v, k)
            if merged is MISSING:
                result.pop(k, None)
            else:
                result[k] = merged
        return result
    if isinstance(patch, list):
        if field in PRIMITIVE_SET_LISTS and isinstance(target, list):
            out = list(target)
            for x in patch:
                if x not in out:
                    out.append(x)
            return out
        mk = merge_key_for(field, patch + (target if isinstance(target, list) else []))
        if mk and isinstance(target, list) and all(isinstance(i, dict) for i in patch):
            if any(i.get("$patch") == "replace" for i in patch):
                return [{k: v for k, v in i.items() if k != "$patch"} for i in patch
                        if i.get("$patch") != "replace"]
            out = copy.deepcopy(target)
            for item in patch:
                if mk not in item:
                    out.append(copy.deepcopy(item))
                    continue
                idx = next((n for n, t in enumerate(out) if isinstance(t, dict) and t.get(mk) == item[mk]), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        out.pop(idx)
                    continue
                if idx is None:
                    out.append(strategic_merge({}, item))
                else:
                    out[idx] = strategic_merge(out[idx], item)
            return out
        return [strip_directives(copy.deepcopy(i)) for i in patch]
    return copy.deepcopy(patch)


def strip_directives(v):
    if isinstance(v, dict):
        return {k: strip_directives(x) for k, x in v.items() if not k.startswith("$")}
    if isinstance(v, list):
        return [strip_directives(x) for x in v]
    return v


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")

    def walk(parts):
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur, parts[-1]

    for op in ops:
        try:
            kind, parts = op["op"], _ptr(op["path"])
            if kind in ("add", "replace", "test", "remove"):
                parent, last = walk(parts)
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
                else:
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op["value"])
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            elif kind == "test":
                val = parent[int(last)] if isinstance(parent, list) else parent[last]
                if val != op["value"]:
                    raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                   f"request: testing value {op['path']} failed")
            elif kind in ("move", "copy"):
                src_parent, src_last = walk(_ptr(op["from"]))
                val = src_parent[int(src_last)] if isinstance(src_parent, list) else src_parent[src_last]
                if kind == "move":
                    if isinstance(src_parent, list):
                        src_parent.pop(int(src_last))
                    else:
                        del src_parent[src_last]
                parent, last = walk(parts)
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(val))
                else:
                    parent[last] = copy.deepcopy(val)
            else:
                raise bad_request(f"unknown json patch op {kind!r}")
        except ApiError:
            raise
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                           f"json patch {op!r} failed: {e}")
    return doc


# --------------------------------------------------------------------------------------------
# Field ownership (simplified managedFields)
# --------------------------------------------------------------------------------------------
SYSTEM_META = {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
               "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generateName"}


def owned_view(obj):
    """The part of an object that field ownership is tracked for."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SYSTEM_META}
    if meta:
        out["metadata"] = meta
    else:
        out.pop("metadata", None)
    return out


def leaf_paths(obj, prefix=()):
    paths = set()
    if not isinstance(obj, dict):
        return paths
    for k, v in obj.items():
        p = prefix + ("f:" + k,)
        if isinstance(v, dict) and v:
            paths |= leaf_paths(v, p)
        elif isinstance(v, list) and v and all(isinstance(i, dict) for i in v) and merge_key_for(k, v) \
                and all(merge_key_for(k, v) in i for i in v):
            mk = merge_key_for(k, v)
            for item in v:
                kp = p + ("k:" + json.dumps({mk: item[mk]}, separators=(",", ":")),)
                paths |= leaf_paths(item, kp)
        else:
            paths.add(p)
    return paths


def value_at(obj, path):
    cur = obj
    for el in path:
        if el.startswith("f:"):
            if not isinstance(cur, dict) or el[2:] not in cur:
                return MISSING
            cur = cur[el[2:]]
        else:
            key = json.loads(el[2:])
            (mk, mv), = key.items()
            if not isinstance(cur, list):
                return MISSING
            cur = next((i for i in cur if isinstance(i, dict) and i.get(mk) == mv), MISSING)
            if cur is MISSING:
                return MISSING
    return cur


def remove_path(obj, path):
    """Remove a leaf and prune containers that became empty along the way."""
    chain = [obj]
    cur = obj
    for el in path[:-1]:
        nxt = value_at(cur, (el,))
        if nxt is MISSING:
            return
        chain.append(nxt)
        cur = nxt
    last = path[-1]
    if last.startswith("f:") and isinstance(cur, dict):
        cur.pop(last[2:], None)
    # prune upwards
    for depth in range(len(path) - 1, 0, -1):
        parent, child, el = chain[depth - 1], chain[depth], path[depth - 1]
        if isinstance(child, dict) and not child:
            if el.startswith("f:"):
                parent.pop(el[2:], None)
            else:
                if isinstance(parent, list):
                    parent.remove(child)
        elif isinstance(child, list) and not child and el.startswith("f:"):
            parent.pop(el[2:], None)
        elif isinstance(child, dict) and not el.startswith("f:"):
            (mk, mv), = json.loads(el[2:]).items()
            if set(child) == {mk} and isinstance(parent, list):
                parent.remove(child)
        else:
            break


def paths_to_fields(paths):
    root = {}
    for p in sorted(paths):
        cur = root
        for el in p:
            cur = cur.setdefault(el, {})
    return root


def fields_to_paths(fields, prefix=()):
    out = set()
    for k, v in (fields or {}).items():
        if k == ".":
            continue
        if isinstance(v, dict) and v:
            out |= fields_to_paths(v, prefix + (k,))
        else:
            out.add(prefix + (k,))
    return out


def manager_from_ua(ua):
    ua = ua or "unknown"
    return ua.split("/")[0][:128] or "unknown"


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------
DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def validate_name(rt, name):
    if rt.group == "rbac.authorization.k8s.io":
        if name in (".", "..") or "/" in name or "%" in name:
            return "may not contain '/' or '%' and may not be '.' or '..'"
        return None
    if rt.plural == "namespaces":
        ok = DNS1123_LABEL.match(name) and len(name) <= 63
        return None if ok else ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                                "or '-', and must start and end with an alphanumeric character")
    if rt.plural == "services":
        ok = DNS1035_LABEL.match(name) and len(name) <= 63
        return None if ok else ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                                "start with an alphabetic character, and end with an alphanumeric character")
    if not (DNS1123_SUB.match(name) and len(name) <= 253):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character")
    return None


def _label_key_ok(key):
    if "/" in key:
        prefix, name = key.split("/", 1)
        if not (DNS1123_SUB.match(prefix) and len(prefix) <= 253):
            return False
    else:
        name = key
    return bool(QUALIFIED_NAME.match(name)) and len(name) <= 63


# --------------------------------------------------------------------------------------------
# Semantic validation the API server applies to what the collection creates. Rules read from
# kubernetes/kubernetes pkg/apis/core/validation/validation.go and pkg/apis/rbac/validation/validation.go
# (commit a7264f95 of the stored index, 1.36/1.37 development; the rules below are unchanged since 1.24).
# Messages follow upstream's field.Error texts so tests can match them. See lab/kube/README.md for what is
# still not checked.
# --------------------------------------------------------------------------------------------
IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# resource names the API server treats as native (overcommit allowed, any quantity); everything with a domain
# outside kubernetes.io (and not requests.*) is an extended resource: integer, request == limit, limit required
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage")
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
VOLUME_SOURCES = ("hostPath", "emptyDir", "secret", "configMap", "projected", "persistentVolumeClaim", "downwardAPI",
                  "csi", "ephemeral", "nfs", "image")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def _invalid(path, value, msg):
    return {"field": path, "message": f"Invalid value: {json.dumps(value)}: {msg}", "reason": "FieldValueInvalid"}


def _required(path, msg="Required value"):
    return {"field": path, "message": msg, "reason": "FieldValueRequired"}


def _dup(path, value):
    return {"field": path, "message": f"Duplicate value: {json.dumps(value)}", "reason": "FieldValueDuplicate"}


def _not_found(path, value):
    return {"field": path, "message": f"Not found: {json.dumps(value)}", "reason": "FieldValueNotFound"}


def _forbidden(path, msg):
    return {"field": path, "message": f"Forbidden: {msg}", "reason": "FieldValueForbidden"}


def is_extended_resource(name):
    if "/" not in name or name.startswith("requests."):
        return False
    return not name.split("/", 1)[0].endswith("kubernetes.io")


def _quantity_int(value):
    """An integer quantity or None: the API server parses the quantity and asks for a whole value
    (k8s.io/apimachinery resource.Quantity; '2', 2, '2000m' and '3k' (3000, the form it stores 3000 in) are integers,
    '2.5' and '1500m' are not)."""
    text = str(value).strip()
    m = re.match(r"^(\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$", text)
    if not m:
        return None
    n = int(m.group(1))
    suffix = m.group(2) or ""
    if suffix == "m":
        return n // 1000 if n % 1000 == 0 else None
    scale = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18,
             "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}[suffix]
    return n * scale


def _validate_resources(res, path, causes):
    if not isinstance(res, dict):
        return
    req = res.get("requests") or {}
    lim = res.get("limits") or {}
    for kind, values in (("limits", lim), ("requests", req)):
        for name, qty in values.items():
            if is_extended_resource(name) and _quantity_int(qty) is None:
                causes.append(_invalid(f"{path}.{kind}[{name}]", qty, "must be an integer"))
    for name, qty in req.items():
        if not is_extended_resource(name):
            continue
        if name not in lim:
            causes.append(_required(f"{path}.limits", "Required value: Limit must be set for non overcommitable resources"))
        elif _quantity_int(qty) is not None and _quantity_int(qty) != _quantity_int(lim[name]):
            causes.append(_invalid(f"{path}.requests[{name}]", str(qty), f"must be equal to {name} limit of {lim[name]}"))


def _validate_security_context(sc, path, causes):
    if not isinstance(sc, dict):
        return
    if sc.get("privileged") is True and sc.get("allowPrivilegeEscalation") is False:
        causes.append(_invalid(f"{path}", sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
    caps = [str(c) for c in ((sc.get("capabilities") or {}).get("add") or [])]
    # The API server compares the literal string CAP_SYS_ADMIN (pkg/apis/core/validation ValidateSecurityContext):
    # the usual spelling SYS_ADMIN passes, as HAMi's chart relies on.
    if sc.get("allowPrivilegeEscalation") is False and "CAP_SYS_ADMIN" in caps:
        causes.append(_invalid(f"{path}", sc, "cannot set `allowPrivilegeEscalation` to false and "
                               "`capabilities.Add` CAP_SYS_ADMIN"))


def validate_pod_spec(ps, base, causes, require_image=True):
    """core/validation ValidatePodSpec for the fields the collection renders."""
    if not isinstance(ps, dict) or not ps.get("containers"):
        causes.append(_required(f"{base}.containers"))
        return
    # volumes: DNS-1123 label names, unique, exactly one source
    volumes = set()
    for i, v in enumerate(ps.get("volumes") or []):
        vpath = f"{base}.volumes[{i}]"
        name = v.get("name") if isinstance(v, dict) else None
        if not name:
            causes.append(_required(f"{vpath}.name"))
            continue
        if not (DNS1123_LABEL.match(name) and len(name) <= 63):
            causes.append(_invalid(f"{vpath}.name", name, "a lowercase RFC 1123 label must consist of lower case "
                                   "alphanumeric characters or '-', and must start and end with an alphanumeric character"))
        if name in volumes:
            causes.append(_dup(f"{vpath}.name", name))
        volumes.add(name)
        sources = [k for k in v if k in VOLUME_SOURCES]
        if len(sources) != 1:
            causes.append(_required(vpath, "Required value: must specify a volume type") if not sources else
                          _forbidden(f"{vpath}.{sources[1]}", "may not specify more than 1 volume type"))
        hp = v.get("hostPath")
        if isinstance(hp, dict):
            if not str(hp.get("path") or ""):
                causes.append(_required(f"{vpath}.hostPath.path"))
            if str(hp.get("type") or "") not in HOST_PATH_TYPES:
                causes.append({"field": f"{vpath}.hostPath.type", "reason": "FieldValueNotSupported",
                               "message": f"Unsupported value: {json.dumps(hp.get('type'))}"})
    host_network = ps.get("hostNetwork") is True
    names = set()
    groups = [("initContainers", ps.get("initContainers") or []), ("containers", ps["containers"])]
    for group, ctrs in groups:
        for i, c in enumerate(ctrs):
            cpath = f"{base}.{group}[{i}]"
            if not isinstance(c, dict) or not c.get("name"):
                causes.append(_required(f"{cpath}.name"))
                continue
            name = c["name"]
            if not (DNS1123_LABEL.match(name) and len(name) <= 63):
                causes.append(_invalid(f"{cpath}.name", name, "a lowercase RFC 1123 label must consist of lower case "
                                       "alphanumeric characters or '-', and must start and end with an alphanumeric character"))
            if name in names:
                causes.append(_dup(f"{cpath}.name", name))
            names.add(name)
            if not c.get("image") and require_image:
                causes.append(_required(f"{cpath}.image"))
            # ports: numbers, protocol, IANA_SVC_NAME names unique per container, hostNetwork hostPort == containerPort
            pnames = set()
            for j, port in enumerate(c.get("ports") or []):
                ppath = f"{cpath}.ports[{j}]"
                cp, hp = port.get("containerPort"), port.get("hostPort")
                if not isinstance(cp, int) or not 1 <= cp <= 65535:
                    causes.append(_invalid(f"{ppath}.containerPort", cp, "must be between 1 and 65535, inclusive"))
                if hp is not None and (not isinstance(hp, int) or not 0 <= hp <= 65535):
                    causes.append(_invalid(f"{ppath}.hostPort", hp, "must be between 1 and 65535, inclusive"))
                if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
                    causes.append({"field": f"{ppath}.protocol", "reason": "FieldValueNotSupported",
                                   "message": f"Unsupported value: {json.dumps(port.get('protocol'))}: supported "
                                              "values: \"SCTP\", \"TCP\", \"UDP\""})
                pname = port.get("name")
                if pname:
                    if not (IANA_SVC_NAME.match(pname) and len(pname) <= 15 and "--" not in pname
                            and re.search(r"[a-z]", pname)):
                        causes.append(_invalid(f"{ppath}.name", pname, "must be no more than 15 characters, contain "
                                               "only lowercase alphanumerics and '-', start and end with an "
                                               "alphanumeric and contain at least one letter"))
                    if pname in pnames:
                        causes.append(_dup(f"{ppath}.name", pname))
                    pnames.add(pname)
                if host_network and group == "containers" and hp not in (None, 0) and hp != cp:
                    causes.append(_invalid(f"{ppath}.hostPort", hp, "must match `containerPort` when `hostNetwork` is true"))
            # volumeMounts: the volume exists, mountPath set and unique, subPath relative without '..'
            mpaths = set()
            for j, m in enumerate(c.get("volumeMounts") or []):
                mpath = f"{cpath}.volumeMounts[{j}]"
                if not m.get("name"):
                    causes.append(_required(f"{mpath}.name"))
                elif m["name"] not in volumes:
                    causes.append(_not_found(f"{mpath}.name", m["name"]))
                mp = m.get("mountPath")
                if not mp:
                    causes.append(_required(f"{mpath}.mountPath"))
                elif mp in mpaths:
                    causes.append(_invalid(f"{mpath}.mountPath", mp, "must be unique"))
                mpaths.add(mp)
                sub = str(m.get("subPath") or "")
                if sub.startswith("/") or ".." in sub.split("/"):
                    causes.append(_invalid(f"{mpath}.subPath", sub, "must be a relative path without '..'"))
            for j, e in enumerate(c.get("env") or []):
                if not e.get("name"):
                    causes.append(_required(f"{cpath}.env[{j}].name"))
            _validate_resources(c.get("resources"), f"{cpath}.resources", causes)
            _validate_security_context(c.get("securityContext"), f"{cpath}.securityContext", causes)
    # host namespaces vs process namespace sharing
    if ps.get("hostPID") is True and ps.get("shareProcessNamespace") is True:
        causes.append(_invalid(f"{base}.securityContext.shareProcessNamespace", True,
                               "ShareProcessNamespace and HostPID cannot both be enabled"))
    for fld in ("runtimeClassName", "priorityClassName", "serviceAccountName", "schedulerName"):
        val = ps.get(fld)
        if val is not None and val != "" and not (DNS1123_SUB.match(str(val)) and len(str(val)) <= 253):
            causes.append(_invalid(f"{base}.{fld}", val, "a lowercase RFC 1123 subdomain must consist of lower case "
                                   "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"))
    if ps.get("runtimeClassName") == "":
        causes.append(_invalid(f"{base}.runtimeClassName", "", "a lowercase RFC 1123 subdomain must consist of lower "
                               "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"))
    for i, t in enumerate(ps.get("tolerations") or []):
        tpath = f"{base}.tolerations[{i}]"
        op = t.get("operator", "Equal") or "Equal"
        if op not in ("Equal", "Exists"):
            causes.append({"field": f"{tpath}.operator", "reason": "FieldValueNotSupported",
                           "message": f"Unsupported value: {json.dumps(op)}: supported values: \"Equal\", \"Exists\""})
        if not t.get("key") and op != "Exists":
            causes.append(_invalid(f"{tpath}.operator", op, "operator must be Exists when `key` is empty, which means "
                                   "\"match all values and all keys\""))
        if op == "Exists" and t.get("value"):
            causes.append(_invalid(f"{tpath}.operator", t.get("value"), "value must be empty when `operator` is 'Exists'"))
        if t.get("key") and not _label_key_ok(str(t["key"])):
            causes.append(_invalid(f"{tpath}.key", t["key"], "name part must consist of alphanumeric characters, "
                                   "'-', '_' or '.'"))
        if t.get("effect", "") not in TOLERATION_EFFECTS:
            causes.append({"field": f"{tpath}.effect", "reason": "FieldValueNotSupported",
                           "message": f"Unsupported value: {json.dumps(t.get('effect'))}"})
    for k, v in (ps.get("nodeSelector") or {}).items():
        if not _label_key_ok(str(k)):
            causes.append(_invalid(f"{base}.nodeSelector", k, "name part must consist of alphanumeric characters, "
                                   "'-', '_' or '.'"))
        if not (isinstance(v, str) and LABEL_VALUE.match(v) and len(v) <= 63):
            causes.append(_invalid(f"{base}.nodeSelector", v, "a valid label must be an empty string or consist of "
                                   "alphanumeric characters, '-', '_' or '.'"))


def validate_rbac(rt, obj, causes):
    """rbac/validation: rule shape of Roles/ClusterRoles, roleRef and subjects of bindings."""
    if rt.kind in ("Role", "ClusterRole"):
        for i, r in enumerate(obj.get("rules") or []):
            rpath = f"rules[{i}]"
            if not isinstance(r, dict):
                causes.append(_required(rpath))
                continue
            if not r.get("verbs"):
                causes.append(_required(f"{rpath}.verbs", "Required value: verbs must contain at least one value"))
            if r.get("nonResourceURLs"):
                if rt.kind == "Role":
                    causes.append(_invalid(f"{rpath}.nonResourceURLs", r["nonResourceURLs"],
                                           "namespaced rules cannot apply to non-resource URLs"))
                if r.get("apiGroups") or r.get("resources") or r.get("resourceNames"):
                    causes.append(_invalid(f"{rpath}.nonResourceURLs", r["nonResourceURLs"],
                                           "rules cannot apply to both regular resources and non-resource URLs"))
                continue
            if not r.get("apiGroups"):
                causes.append(_required(f"{rpath}.apiGroups",
                                        "Required value: resource rules must supply at least one api group"))
            if not r.get("resources"):
                causes.append(_required(f"{rpath}.resources",
                                        "Required value: resource rules must supply at least one resource"))
    if rt.kind in ("RoleBinding", "ClusterRoleBinding"):
        ref = obj.get("roleRef") or {}
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            causes.append({"field": "roleRef.apiGroup", "reason": "FieldValueNotSupported",
                           "message": f"Unsupported value: {json.dumps(ref.get('apiGroup'))}: supported values: "
                                      "\"rbac.authorization.k8s.io\""})
        allowed = ("ClusterRole",) if rt.kind == "ClusterRoleBinding" else ("Role", "ClusterRole")
        if ref.get("kind") not in allowed:
            causes.append({"field": "roleRef.kind", "reason": "FieldValueNotSupported",
                           "message": f"Unsupported value: {json.dumps(ref.get('kind'))}: supported values: "
                                      + ", ".join(json.dumps(a) for a in allowed)})
        if not ref.get("name"):
            causes.append(_required("roleRef.name"))
        for i, sub in enumerate(obj.get("subjects") or []):
            spath = f"subjects[{i}]"
            kind = sub.get("kind")
            if not sub.get("name"):
                causes.append(_required(f"{spath}.name"))
            if kind == "ServiceAccount":
                if sub.get("apiGroup", ""):
                    causes.append({"field": f"{spath}.apiGroup", "reason": "FieldValueNotSupported",
                                   "message": f"Unsupported value: {json.dumps(sub.get('apiGroup'))}: supported values: \"\""})
                if rt.kind == "ClusterRoleBinding" and not sub.get("namespace"):
                    causes.append(_required(f"{spath}.namespace"))
            elif kind in ("User", "Group"):
                if sub.get("apiGroup") != "rbac.authorization.k8s.io":
                    causes.append({"field": f"{spath}.apiGroup", "reason": "FieldValueNotSupported",
                                   "message": f"Unsupported value: {json.dumps(sub.get('apiGroup'))}: supported "
                                              "values: \"rbac.authorization.k8s.io\""})
            else:
                causes.append({"field": f"{spath}.kind", "reason": "FieldValueNotSupported",
                               "message": f"Unsupported value: {json.dumps(kind)}: supported values: "
                                          "\"ServiceAccount\", \"User\", \"Group\""})


def validate_object(rt, obj):
    causes = []
    meta = obj.get("metadata") or {}
    for fld in ("labels", "annotations"):
        val = meta.get(fld)
        if val is None:
            continue
        if not isinstance(val, dict):
            raise bad_request(f"json: cannot unmarshal metadata.{fld} into Go struct field of type map[string]string")
        for k, v in val.items():
            if not isinstance(v, str):
                raise bad_request(f"json: cannot unmarshal {type(v).__name__} into Go struct field "
                                  f"ObjectMeta.metadata.{fld} of type string")
            if not _label_key_ok(k):
                causes.append({"field": f"metadata.{fld}", "message": f"Invalid value: {k!r}: name part must "
                               "consist of alphanumeric characters, '-', '_' or '.'"})
            if fld == "labels" and not (LABEL_VALUE.match(v) and len(v) <= 63):
                causes.append({"field": "metadata.labels", "message": f"Invalid value: {v!r}: a valid label "
                               "must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"})
    spec = obj.get("spec") or {}

    def pod_spec(ps, base):
        validate_pod_spec(ps, base, causes, require_image=(base == "spec"))

    if rt.builtin and rt.group == "" and rt.plural == "pods":
        pod_spec(spec, "spec")
    if rt.builtin and rt.group in ("apps", "batch") and rt.plural in ("deployments", "daemonsets", "statefulsets",
                                                                       "replicasets", "jobs"):
        tmpl = spec.get("template")
        if not isinstance(tmpl, dict):
            causes.append({"field": "spec.template", "message": "Required value", "reason": "FieldValueRequired"})
        else:
            pod_spec(tmpl.get("spec"), "spec.template.spec")
        if rt.group == "apps":
            sel = spec.get("selector")
            if not isinstance(sel, dict) or not (sel.get("matchLabels") or sel.get("matchExpressions")):
                causes.append({"field": "spec.selector", "message": "Required value", "reason": "FieldValueRequired"})
            elif isinstance(tmpl, dict) and sel.get("matchLabels"):
                tl = (tmpl.get("metadata") or {}).get("labels") or {}
                if any(tl.get(k) != v for k, v in sel["matchLabels"].items()):
                    causes.append({"field": "spec.template.metadata.labels",
                                   "message": f"Invalid value: {tl!r}: `selector` does not match template `labels`"})
    if rt.builtin and rt.group == "rbac.authorization.k8s.io":
        validate_rbac(rt, obj, causes)
    if rt.builtin and rt.group == "node.k8s.io" and rt.plural == "runtimeclasses":
        handler = obj.get("handler")
        if not handler:
            causes.append(_required("handler"))
        elif not (DNS1123_LABEL.match(str(handler)) and len(str(handler)) <= 63):
            causes.append(_invalid("handler", handler, "a lowercase RFC 1123 label must consist of lower case "
                                   "alphanumeric characters or '-', and must start and end with an alphanumeric character"))
    if rt.builtin and rt.plural in ("configmaps",) and rt.group == "":
        for fld in ("data",):
            for k, v in (obj.get(fld) or {}).items():
                if not isinstance(v, str):
                    raise bad_request(f"json: cannot unmarshal {type(v).__name__} into Go struct field "
                                      f"ConfigMap.{fld} of type string")
    if rt.builtin and rt.plural == "customresourcedefinitions":
        names = spec.get("names") or {}
        grp = spec.get("group")
        if not grp:
            causes.append({"field": "spec.group", "message": "Required value", "reason": "FieldValueRequired"})
        if not names.get("plural") or not names.get("kind"):
            causes.append({"field": "spec.names", "message": "plural and kind are required",
                           "reason": "FieldValueRequired"})
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append({"field": "spec.scope", "message": "Unsupported value: must be Namespaced or Cluster",
                           "reason": "FieldValueNotSupported"})
        if not spec.get("versions"):
            causes.append({"field": "spec.versions", "message": "Required value", "reason": "FieldValueRequired"})
        elif sum(1 for v in spec["versions"] if v.get("storage")) != 1:
            causes.append({"field": "spec.versions", "message": "must have exactly one version marked as storage "
                           "version"})
        if grp and names.get("plural") and meta.get("name") != f"{names['plural']}.{grp}":
            causes.append({"field": "metadata.name", "message": "must be spec.names.plural+\".\"+spec.group"})
    return causes


# --------------------------------------------------------------------------------------------
# Store
# --------------------------------------------------------------------------------------------
class Store:
    def __init__(self, git_version="v1.29.4"):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 1000
        self.git_version = git_version
        self.pruner = Pruner(git_version)
        self._tl = threading.local()  # per-request fieldValidation mode and warnings
        self.types = {}  # (group, version, plural) -> RType
        for t in _builtin_types():
            self.types[(t.group, t.version, t.plural)] = t
        self.objects = {}  # (group, plural, ns, name) -> obj (stored with storage apiVersion)
        self.events = collections.deque(maxlen=2000)  # (rv, type, group, plural, obj)
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            with self.lock:
                self._store_new(self.types[("", "v1", "namespaces")],
                                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, None,
                                "kube-apiserver")

    # -- helpers ---------------------------------------------------------------------------
    @property
    def field_validation(self):
        return getattr(self._tl, "fv", "Warn")

    @field_validation.setter
    def field_validation(self, v):
        self._tl.fv = v

    @property
    def warnings(self):
        if not hasattr(self._tl, "warnings"):
            self._tl.warnings = []
        return self._tl.warnings

    @warnings.setter
    def warnings(self, v):
        self._tl.warnings = v

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def groups(self):
        out = collections.OrderedDict()
        for t in self.types.values():
            out.setdefault(t.group, [])
            if t.version not in out[t.group]:
                out[t.group].append(t.version)
        return out

    def find_type(self, group, version, plural):
        t = self.types.get((group, version, plural))
        if t is None:
            # also allow singular / shortnames are never used in REST paths; real servers 404
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"group": group, "kind": plural})
        return t

    def type_for_kind(self, group, kind):
        for t in self.types.values():
            if t.group == group and t.kind == kind:
                return t
        return None

    def _notify(self, etype, rt, obj):
        self.events.append((int(obj["metadata"]["resourceVersion"]), etype, rt.group, rt.plural,
                            copy.deepcopy(obj)))
        self.cond.notify_all()

    def render(self, rt, obj, in_list=False):
        o = copy.deepcopy(obj)
        if in_list and rt.builtin:
            o.pop("apiVersion", None)
            o.pop("kind", None)
        else:
            o["apiVersion"] = rt.gv
            o["kind"] = rt.kind
        return o

    # -- managedFields ---------------------------------------------------------------------
    @staticmethod
    def _managers(obj):
        out = collections.OrderedDict()
        for e in (obj.get("metadata") or {}).get("managedFields") or []:
            key = (e.get("manager"), e.get("operation"), e.get("subresource", ""))
            out[key] = dict(e, _paths=fields_to_paths((e.get("fieldsV1") or {})))
        return out

    @staticmethod
    def _set_managers(obj, managers, rt):
        mf = []
        for (mgr, op, sub), e in managers.items():
            if not e["_paths"]:
                continue
            entry = {"manager": mgr, "operation": op, "apiVersion": e.get("apiVersion") or rt.gv,
                     "time": e.get("time") or now_ts(), "fieldsType": "FieldsV1",
                     "fieldsV1": paths_to_fields(e["_paths"])}
            if sub:
                entry["subresource"] = sub
            mf.append(entry)
        obj.setdefault("metadata", {})["managedFields"] = mf

    def _record_update(self, rt, old, new, manager, op="Update", subresource=""):
        """Record an Update-style change: changed leaves go to `manager`."""
        managers = self._managers(old) if old else collections.OrderedDict()
        old_view = owned_view(old) if old else {}
        new_view = owned_view(new)
        old_paths, new_paths = leaf_paths(old_view), leaf_paths(new_view)
        changed = {p for p in new_paths if value_at(old_view, p) != value_at(new_view, p)}
        gone = old_paths - new_paths
        for key, e in managers.items():
            e["_paths"] = (e["_paths"] - changed) - gone
        key = (manager, op, subresource)
        e = managers.get(key) or {"_paths": set()}
        if changed:
            e["_paths"] = e["_paths"] | changed
            e["time"] = now_ts()
            e["apiVersion"] = rt.gv
        managers[key] = e
        self._set_managers(new, managers, rt)

    # -- core write path -------------------------------------------------------------------
    def _store_new(self, rt, obj, ns, manager, dry_run=False, op="Update"):
        meta = obj.setdefault("metadata", {})
        name = meta["name"]
        key = (rt.group, rt.plural, ns or "", name)
        if key in self.objects:
            res = rt.plural if not rt.group else f"{rt.plural}.{rt.group}"
            raise ApiError(409, "AlreadyExists", f'{res} "{name}" already exists',
                           {"name": name, "group": rt.group, "kind": rt.plural})
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        for f in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation",
                  "managedFields", "selfLink"):
            meta.pop(f, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_ts()
        if rt.has_generation:
            meta["generation"] = 1
        obj["apiVersion"], obj["kind"] = rt.gv, rt.kind
        applied_paths = leaf_paths(owned_view(obj))  # defaulted fields are not owned by the applier
        self._defaults_on_create(rt, obj)
        if op == "Apply":
            self._set_managers(obj, collections.OrderedDict([((manager, "Apply", ""), {
                "_paths": applied_paths, "apiVersion": rt.gv, "time": now_ts()})]), rt)
        else:
            self._record_update(rt, None, obj, manager)
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        meta["resourceVersion"] = self.next_rv()
        self.objects[key] = obj
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self._crd_established(obj)
        self._notify("ADDED", rt, obj)
        return obj

    def _defaults_on_create(self, rt, obj):
        if not rt.builtin:
            return
        name = obj["metadata"]["name"]
        if rt.plural == "namespaces" and rt.group == "":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        elif rt.plural == "pods" and rt.group == "":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            obj.setdefault("spec", {}).setdefault("restartPolicy", "Always")
        elif rt.plural == "nodes" and rt.group == "":
            pass  # nodes may set status on create (like the real apiserver)
        elif rt.status_sub and rt.plural != "customresourcedefinitions":
            obj.pop("status", None)
        if rt.group == "apps" and rt.plural in ("deployments", "statefulsets", "replicasets"):
            obj.setdefault("spec", {}).setdefault("replicas", 1)  # the only workload default applied
        # Go structs are always serialized: `spec: {}` / initial status like a fresh real object
        if (rt.group, rt.plural) in SPEC_STRUCT:
            obj.setdefault("spec", {})
        if (rt.group, rt.plural) in STATUS_DEFAULTS and not obj.get("status"):
            obj["status"] = copy.deepcopy(STATUS_DEFAULTS[(rt.group, rt.plural)])

    def _crd_established(self, crd):
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec["group"]
        for v in spec.get("versions") or []:
            if not v.get("served", True):
                continue
            subs = ["status"] if "status" in ((v.get("subresources") or {})) else []
            if "scale" in (v.get("subresources") or {}):
                subs.append("scale")
            self.types[(group, v["name"], names["plural"])] = RType(
                group, v["name"], names["plural"], names["kind"], spec.get("scope") == "Namespaced",
                names.get("shortNames") or [], subs, has_generation=True, crd=crd["metadata"]["name"],
                categories=names.get("categories") or [])
        accepted = {k: v for k, v in names.items()}
        accepted.setdefault("singular", names["kind"].lower())
        accepted.setdefault("listKind", names["kind"] + "List")
        ts = now_ts()
        crd["status"] = {"acceptedNames": accepted, "storedVersions": [v["name"] for v in spec["versions"]
                                                                        if v.get("storage")],
                         "conditions": [
                             {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                              "message": "no conflicts found", "lastTransitionTime": ts},
                             {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                              "message": "the initial names have been accepted", "lastTransitionTime": ts}]}

    def _crd_removed(self, crd):
        for k, t in list(self.types.items()):
            if t.crd == crd["metadata"]["name"]:
                del self.types[k]
                for okey in [o for o in self.objects if o[0] == t.group and o[1] == t.plural]:
                    self._delete_key(t, okey)

    def _delete_key(self, rt, key):
        obj = self.objects.pop(key)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self._notify("DELETED", rt, obj)
        if rt.builtin and rt.group == "" and rt.plural == "namespaces":
            ns = key[3]
            for okey in [o for o in self.objects if o[2] == ns]:
                t = self.type_for_plural(okey[0], okey[1])
                self._delete_key(t, okey)
        if rt.builtin and rt.plural == "customresourcedefinitions":
            self._crd_removed(obj)
        return obj

    def type_for_plural(self, group, plural):
        for t in self.types.values():
            if t.group == group and t.plural == plural:
                return t
        raise KeyError((group, plural))

    def _check_ns(self, rt, ns):
        if rt.namespaced and (("", "namespaces", "", ns) not in self.objects):
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                           {"name": ns, "kind": "namespaces"})

    def get(self, rt, ns, name):
        obj = self.objects.get((rt.group, rt.plural, ns or "", name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def prune_unknown(self, rt, obj):
        unknown = self.pruner.prune(rt, obj)
        if unknown and self.field_validation == "Strict":
            raise bad_request("strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown))
        if unknown and self.field_validation == "Warn":
            self.warnings.extend(f'unknown field "{u}"' for u in unknown)

    def _check_body(self, rt, body, ns, name=None, require_kind=False):
        # like kube-apiserver, a JSON body without apiVersion/kind is decoded with the endpoint's GVK
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        kind, api = body.get("kind"), body.get("apiVersion")
        if require_kind and (not kind or not api):
            raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'")
        if kind and kind != rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        if api and api != rt.gv:
            raise bad_request(f"the API version in the data ({api}) does not match the expected API version ({rt.gv})")
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        meta = body.setdefault("metadata", {})
        if rt.builtin:
            self.prune_unknown(rt, body)
            normalize_quantities(body)
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if name is not None and meta.get("name") and meta["name"] != name:
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (meta["name"], name))
        if name is not None and not meta.get("name"):
            meta["name"] = name

    def create(self, rt, ns, body, manager, dry_run):
        self._check_body(rt, body, ns)
        meta = body["metadata"]
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choice(string.ascii_lowercase + string.digits)
                                                              for _ in range(5))
            else:
                raise invalid(rt, "", [{"field": "metadata.name", "reason": "FieldValueRequired",
                                        "message": "Required value: name or generateName is required"}])
        err = validate_name(rt, meta["name"])
        if err:
            raise invalid(rt, meta["name"], [{"field": "metadata.name", "message": f"Invalid value: "
                                              f"{meta['name']!r}: {err}"}])
        if rt.namespaced:
            self._check_ns(rt, ns)
        causes = validate_object(rt, body)
        if causes:
            raise invalid(rt, meta["name"], causes)
        return self._store_new(rt, body, ns, manager, dry_run)

    def _commit_update(self, rt, ns, old, new, manager, dry_run, op="Update", subresource="", managers=None):
        """Finish an update: keep system metadata, bump RV/generation only if something changed."""
        meta = new.setdefault("metadata", {})
        if rt.builtin:
            normalize_quantities(new)
        for f in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
            if f in old["metadata"]:
                meta[f] = old["metadata"][f]
            else:
                meta.pop(f, None)
        new["apiVersion"], new["kind"] = rt.gv, rt.kind
        if rt.has_generation:
            meta["generation"] = old["metadata"].get("generation", 1)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if rt.builtin and rt.plural == "namespaces":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        if managers is not None:
            meta["managedFields"] = copy.deepcopy(old["metadata"].get("managedFields") or [])
            self._set_managers(new, managers, rt)
        else:
            meta["managedFields"] = copy.deepcopy(old["metadata"].get("managedFields") or [])
            self._record_update(rt, old, new, manager, op, subresource)
        causes = validate_object(rt, new)
        if causes:
            raise invalid(rt, meta["name"], causes)
        if _strip_volatile(new) == _strip_volatile(old):
            return copy.deepcopy(old), False  # no-op: the real apiserver does not write either
        if rt.has_generation:
            body_old = {k: v for k, v in old.items() if k not in ("metadata", "status")}
            body_new = {k: v for k, v in new.items() if k not in ("metadata", "status")}
            if body_old != body_new:
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        if dry_run:
            return new, True
        meta["resourceVersion"] = self.next_rv()
        self.objects[(rt.group, rt.plural, ns or "", meta["name"])] = new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._delete_key(rt, (rt.group, rt.plural, ns or "", meta["name"]))  # last finalizer removed
            return new, True
        if rt.builtin and rt.plural == "customresourcedefinitions":
            self._crd_removed_types_only(new)
            self._crd_established(new)
        self._notify("MODIFIED", rt, new)
        return new, True

    def _crd_removed_types_only(self, crd):
        for k, t in list(self.types.items()):
            if t.crd == crd["metadata"]["name"]:
                del self.types[k]

    def _merge_subresource(self, rt, old, new, subresource):
        """Main resource writes keep status; status writes only change status."""
        if subresource == "status":
            out = copy.deepcopy(old)
            if "status" in new:
                out["status"] = new["status"]
            else:
                out.pop("status", None)
            # metadata labels/annotations may be changed through status as well
            return out
        if rt.status_sub:
            new = copy.deepcopy(new)
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    def update(self, rt, ns, name, body, manager, dry_run, subresource=""):
        self._check_body(rt, body, ns, name)
        old = self.get(rt, ns, name)
        rv = body["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            res = rt.plural if not rt.group else f"{rt.plural}.{rt.group}"
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": the object has been '
                           f'modified; please apply your changes to the latest version and try again',
                           {"name": name, "group": rt.group, "kind": rt.plural})
        new = self._merge_subresource(rt, old, copy.deepcopy(body), subresource)
        return self._commit_update(rt, ns, old, new, manager, dry_run, subresource=subresource)

    def patch(self, rt, ns, name, ctype, raw, manager, dry_run, force, subresource=""):
        ctype = (ctype or "").split(";")[0].strip()
        if ctype == "application/apply-patch+yaml" or ctype == "application/apply-patch+cbor":
            return self.apply(rt, ns, name, raw, manager, dry_run, force, subresource)
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}")
        old = self.get(rt, ns, name)
        if ctype == "application/strategic-merge-patch+json":
            if not rt.builtin:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               "accepted media types include: application/json-patch+json, "
                               "application/merge-patch+json, application/apply-patch+yaml")
            if not isinstance(patch, dict):
                raise bad_request("strategic merge patch must be a JSON object")
            new = strategic_merge(old, patch)
        elif ctype == "application/merge-patch+json":
            if not isinstance(patch, dict):
                raise bad_request("merge patch must be a JSON object")
            new = json_merge_patch(old, patch)
        elif ctype == "application/json-patch+json":
            new = json_patch(old, patch)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                           f"accepted media types include: application/json-patch+json, application/merge-patch+json,"
                           f" application/apply-patch+yaml, application/strategic-merge-patch+json ({ctype})")
        if not isinstance(new, dict):
            raise bad_request("patch produced a non-object")
        if rt.builtin:
            self.prune_unknown(rt, new)
        meta = new.setdefault("metadata", {})
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            res = rt.plural if not rt.group else f"{rt.plural}.{rt.group}"
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": the object has been '
                           'modified; please apply your changes to the latest version and try again',
                           {"name": name, "group": rt.group, "kind": rt.plural})
        if meta.get("name", name) != name:
            raise bad_request("metadata.name cannot be changed by a patch")
        new = self._merge_subresource(rt, old, new, subresource)
        return self._commit_update(rt, ns, old, new, manager, dry_run, subresource=subresource)

    def apply(self, rt, ns, name, raw, manager, dry_run, force, subresource=""):
        if not manager:
            raise bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: "
                              "is required for apply patch")
        try:
            applied = yaml.safe_load(raw.decode() if isinstance(raw, bytes) else raw)
        except yaml.YAMLError as e:
            raise bad_request(f"error decoding YAML: {e}")
        if not isinstance(applied, dict):
            raise bad_request("apply patch must be an object")
        if not applied.get("kind") or not applied.get("apiVersion"):
            raise bad_request("invalid object type: /, Kind=")
        self._check_body(rt, applied, ns, name)
        applied = strip_directives(applied)
        key = (rt.group, rt.plural, ns or "", name)
        if key not in self.objects:
            if subresource:
                raise not_found(rt, name)
            obj = copy.deepcopy(applied)
            err = validate_name(rt, name)
            if err:
                raise invalid(rt, name, [{"field": "metadata.name", "message": f"Invalid value: {name!r}: {err}"}])
            if rt.namespaced:
                self._check_ns(rt, ns)
            causes = validate_object(rt, obj)
            if causes:
                raise invalid(rt, name, causes)
            return self._store_new(rt, obj, ns, manager, dry_run, op="Apply"), True
        old = self.objects[key]
        rv = applied["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.plural} "{name}": the object has '
                           'been modified; please apply your changes to the latest version and try again')
        view_applied = owned_view(applied) if subresource != "status" else {"status": applied.get("status")}
        view_old = owned_view(old) if subresource != "status" else {"status": old.get("status")}
        A = leaf_paths(view_applied)
        managers = self._managers(old)
        me = (manager, "Apply", subresource)
        conflicts = []
        for p in sorted(A):
            if value_at(view_old, p) == value_at(view_applied, p):
                continue
            for k, e in managers.items():
                if k != me and p in e["_paths"]:
                    conflicts.append((k[0], p))
        if conflicts and not force:
            causes = [{"type": "FieldManagerConflict", "message": f'conflict with "{m}"',
                       "field": "." + ".".join(el[2:] if el.startswith("f:") else f"[{el[2:]}]" for el in p)}
                      for m, p in conflicts]
            raise ApiError(409, "Conflict", f"Apply failed with {len(causes)} conflict(s): " + "; ".join(
                f"{c['message']}: {c['field']}" for c in causes), {"causes": causes})
        prev = managers.get(me, {"_paths": set()})["_paths"]
        others = set()
        for k, e in managers.items():
            if k != me:
                if force:
                    e["_paths"] = e["_paths"] - A
                others |= e["_paths"]
        new = copy.deepcopy(old)
        for p in sorted(prev - A - others, key=len, reverse=True):
            remove_path(new, p)
        patch = {k: v for k, v in applied.items() if k not in ("apiVersion", "kind")}
        patch["metadata"] = {k: v for k, v in applied["metadata"].items() if k not in SYSTEM_META}
        if subresource == "status":
            patch = {"status": applied.get("status") or {}}
        new = strategic_merge(new, patch)
        if subresource != "status":
            new = self._merge_subresource(rt, old, new, "")
        entry = managers.get(me) or {}
        changed_vals = any(value_at(view_old, p) != value_at(view_applied, p) for p in A)
        entry["_paths"] = A
        if changed_vals or prev != A or "time" not in entry:
            entry["time"] = now_ts()
            entry["apiVersion"] = rt.gv
        managers[me] = entry
        return self._commit_update(rt, ns, old, new, manager, dry_run, op="Apply", subresource=subresource,
                                   managers=managers)

    def delete(self, rt, ns, name, dry_run, precondition_uid=None, precondition_rv=None):
        obj = self.get(rt, ns, name)
        if precondition_uid and precondition_uid != obj["metadata"]["uid"]:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {precondition_uid}, "
                           f"UID in object meta: {obj['metadata']['uid']}")
        if precondition_rv and precondition_rv != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "Precondition failed: ResourceVersion in precondition: "
                           f"{precondition_rv}, ResourceVersion in object meta: {obj['metadata']['resourceVersion']}")
        out = copy.deepcopy(obj)
        out["metadata"].setdefault("deletionTimestamp", now_ts())
        if rt.builtin and rt.plural == "namespaces":
            out["status"] = {"phase": "Terminating"}
        if dry_run:
            return out
        if out["metadata"].get("finalizers"):
            # as the apiserver: an object with finalizers stays (deletionTimestamp set) until they are removed
            if "deletionTimestamp" not in obj["metadata"]:
                out["metadata"]["resourceVersion"] = self.next_rv()
                self.objects[(rt.group, rt.plural, ns or "", name)] = out
                self._notify("MODIFIED", rt, out)
            return out
        self._delete_key(rt, (rt.group, rt.plural, ns or "", name))
        return out

    def list(self, rt, ns, label_sel, field_sel):
        lreqs = parse_label_selector(label_sel)
        freqs = parse_field_selector(field_sel, rt)
        items = []
        for (g, p, ons, name), obj in sorted(self.objects.items()):
            if g != rt.group or p != rt.plural:
                continue
            if ns and ons != ns:
                continue
            if not label_match(lreqs, obj["metadata"].get("labels")):
                continue
            if not field_match(freqs, obj):
                continue
            items.append(obj)
        return items


def _strip_volatile(obj):
    o = copy.deepcopy(obj)
    meta = o.get("metadata") or {}
    for f in ("resourceVersion", "generation"):
        meta.pop(f, None)
    for e in meta.get("managedFields") or []:
        e.pop("time", None)
    return o


# --------------------------------------------------------------------------------------------
# Request log
# --------------------------------------------------------------------------------------------
class RequestLog:
    def __init__(self, path, maxlen):
        self.path = path
        self.lock = threading.Lock()
        self.entries = collections.deque(maxlen=maxlen)
        self.seq = 0
        if path:
            open(path, "a").close()

    def add(self, entry):
        with self.lock:
            self.seq += 1
            entry = dict(seq=self.seq, **entry)
            self.entries.append(entry)
            if self.path:
                with open(self.path, "a") as f:
                    f.write(json.dumps(entry, sort_keys=True) + "\n")
        return entry

    def reset(self):
        with self.lock:
            self.entries.clear()
            if self.path:
                open(self.path, "w").close()
            return self.seq


# --------------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------------
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator/1"
    store: Store = None
    rlog: RequestLog = None

    def log_message(self, fmt, *args):  # quiet; the request log is the record
        if os.environ.get("KUBE_EMULATOR_VERBOSE"):
            sys.stderr.write("%s\n" % (fmt % args))

    # -- plumbing --------------------------------------------------------------------------
    def _send(self, code, body, ctype="application/json", headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self._status = code
        self._log_request()  # before the response leaves: a client that got its answer finds the entry
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.store.warnings and code < 300:
            for w in self.store.warnings[:20]:
                self.send_header("Warning", '299 - ' + json.dumps(w))
        self.store.warnings = []
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._status = code

    def _read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                out += self.rfile.read(size)
                self.rfile.readline()
            return out
        return b""

    def do_GET(self):
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _dispatch(self):
        t0 = time.time()
        self._status = 500
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        q = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self._verb = None
        self._mutated = False
        self._resource = None
        self._logged = True  # set to False below for API requests only
        if path.startswith("/_emulator"):
            try:
                self._emulator_endpoint(path, q)
            except Exception as e:  # pragma: no cover
                self._send(500, {"error": str(e)})
            return
        self._raw = b""
        self._t0, self._path_q = t0, (path, q)
        self._logged = False
        try:
            self._raw = self._read_body()
            self._handle(path, q, self._raw)
        except ApiError as e:
            self._send(e.code, e.body())
        except Exception as e:  # internal error -> 500 Status, logged
            import traceback
            traceback.print_exc()
            self._send(500, ApiError(500, "InternalError", f"emulator error: {e!r}").body())
        self._log_request()

    def _log_request(self):
        if getattr(self, "_logged", True):
            return
        self._logged = True
        path, q = self._path_q
        t0, raw = self._t0, self._raw
        dry = "All" in (q.get("dryRun") or "").split(",")
        method = self.command
        self.rlog.add({
            "ts": round(t0, 6), "method": method, "path": path, "query": q, "status": self._status,
            "verb": self._verb, "resource": self._resource,
            "class": "write" if method in WRITE_METHODS else "read",
            "dry_run": bool(dry), "write": method in WRITE_METHODS and not dry,
            "mutated": self._mutated, "user_agent": self.headers.get("User-Agent", ""),
            "content_type": self.headers.get("Content-Type", "") if method in WRITE_METHODS else "",
            "field_manager": q.get("fieldManager", ""),
            "body": raw[:4096].decode("utf-8", "replace") if raw and method in WRITE_METHODS else "",
            "duration_ms": round((time.time() - t0) * 1000, 2),
        })

    def _emulator_endpoint(self, path, q):
        if self.command == "GET" and path == "/_emulator/requests":
            since = int(q.get("since") or 0)
            with self.rlog.lock:
                items = [e for e in self.rlog.entries if e["seq"] > since]
                seq = self.rlog.seq
            if q.get("writes") in ("1", "true"):
                items = [e for e in items if e["write"]]
            self._send(200, {"seq": seq, "items": items})
        elif self.command == "POST" and path == "/_emulator/reset-log":
            self._read_body()
            self._send(200, {"seq": self.rlog.reset()})
        elif self.command == "GET" and path == "/_emulator/state":
            with self.store.lock:
                objs = [self.store.render(self.store.type_for_plural(k[0], k[1]), o)
                        for k, o in sorted(self.store.objects.items())]
                rv = self.store.rv
            self._send(200, {"resourceVersion": str(rv), "items": objs})
        elif self.command == "GET" and path == "/_emulator/healthz":
            self._send(200, {"ok": True, "pid": os.getpid(), "gitVersion": self.store.git_version})
        else:
            self._send(404, {"error": "unknown emulator endpoint"})

    # -- API -------------------------------------------------------------------------------
    def _handle(self, path, q, raw):
        st = self.store
        m = self.command
        if path in ("/healthz", "/readyz", "/livez") or path.startswith(("/healthz/", "/readyz/", "/livez/")):
            self._verb = "get"
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            self._verb = "get"
            gv = st.git_version
            mm = re.match(r"v?(\d+)\.(\d+)", gv)
            return self._send(200, {"major": mm.group(1) if mm else "1", "minor": mm.group(2) if mm else "29",
                                    "gitVersion": gv, "gitCommit": "0" * 40, "gitTreeState": "clean",
                                    "buildDate": "2024-04-16T00:00:00Z", "goVersion": "go1.22.2",
                                    "compiler": "gc", "platform": "linux/amd64",
                                    "emulationMajor": mm.group(1) if mm else "1",
                                    "emulationMinor": mm.group(2) if mm else "29"})
        if path == "/api" and m == "GET":
            self._verb = "get"
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.headers.get("Host", "127.0.0.1")}]})
        if path == "/apis" and m == "GET":
            self._verb = "get"
            with st.lock:
                groups = []
                for g, versions in st.groups().items():
                    if not g:
                        continue
                    vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
                    groups.append({"name": g, "versions": vs, "preferredVersion": vs[0]})
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        segs = [s for s in path.split("/") if s]
        if segs[:1] == ["api"] and len(segs) >= 2:
            group, version, rest = "", segs[1], segs[2:]
        elif segs[:1] == ["apis"] and len(segs) >= 2:
            group = segs[1]
            if len(segs) == 2 and m == "GET":
                self._verb = "get"
                with st.lock:
                    versions = st.groups().get(group)
                if not versions:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
                return self._send(200, {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": vs,
                                        "preferredVersion": vs[0]})
            if len(segs) < 3:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            version, rest = segs[2], segs[3:]
        elif path.startswith("/openapi"):
            raise ApiError(404, "NotFound", "the emulator does not serve OpenAPI documents")
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            if m != "GET":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            self._verb = "get"
            return self._send(200, self._resource_list(group, version))
        # resolve namespace / resource / name / subresource
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and len(rest) == 3 and
                                                             rest[2] in ("status", "finalize")):
            ns, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        with st.lock:
            rt = st.find_type(group, version, plural)
            self._resource = f"{plural}.{group}" if group else plural
            if sub:
                self._resource += "/" + sub
            if rt.namespaced and ns is None and name is not None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if not rt.namespaced and ns is not None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if sub and sub not in rt.subresources:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if not (m == "GET" and name is None and q.get("watch") in ("1", "true", "True")):
                return self._resource_op(rt, ns, name, sub, q, raw)
        self._verb = "watch"
        return self._watch(rt, ns, q)  # outside the store lock

    def _resource_list(self, group, version):
        st = self.store
        with st.lock:
            types = [t for t in st.types.values() if t.group == group and t.version == version]
        if not types:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = []
        for t in types:
            r = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
                 "verbs": t.verbs, "storageVersionHash": base64.b64encode(t.plural.encode()).decode()[:12]}
            if t.short:
                r["shortNames"] = t.short
            if t.categories:
                r["categories"] = t.categories
            res.append(r)
            for s in t.subresources:
                if s == "status":
                    res.append({"name": f"{t.plural}/status", "singularName": "", "namespaced": t.namespaced,
                                "kind": t.kind, "verbs": ["get", "patch", "update"]})
                elif s == "eviction":
                    res.append({"name": f"{t.plural}/eviction", "singularName": "", "namespaced": True,
                                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
                elif s == "scale":
                    res.append({"name": f"{t.plural}/scale", "singularName": "", "namespaced": t.namespaced,
                                "group": "autoscaling", "version": "v1", "kind": "Scale",
                                "verbs": ["get", "patch", "update"]})
                elif s == "finalize":
                    res.append({"name": f"{t.plural}/finalize", "singularName": "", "namespaced": False,
                                "kind": t.kind, "verbs": ["update"]})
                else:
                    res.append({"name": f"{t.plural}/{s}", "singularName": "", "namespaced": t.namespaced,
                                "kind": t.kind, "verbs": ["get"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

    def _parse_body(self, raw):
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        try:
            if ctype in ("application/yaml", "application/apply-patch+yaml"):
                return yaml.safe_load(raw.decode())
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"couldn't decode request body: {e}")

    def _resource_op(self, rt, ns, name, sub, q, raw):
        st = self.store
        m = self.command
        dry_vals = [v for v in (q.get("dryRun") or "").split(",") if v]
        if any(v != "All" for v in dry_vals):
            raise bad_request(f"Invalid value: {dry_vals!r}: supported values: \"All\"")
        dry = bool(dry_vals)
        fm = q.get("fieldManager") or ""
        manager = fm or manager_from_ua(self.headers.get("User-Agent"))
        fv = q.get("fieldValidation", "")
        if fv and fv not in ("Ignore", "Warn", "Strict"):
            raise bad_request(f"Invalid value: {fv!r}: fieldValidation must be one of Ignore, Warn, Strict")
        st.field_validation = fv or "Warn"
        st.warnings = []
        if name is None:
            if m == "GET":
                if q.get("watch") in ("1", "true", "True"):
                    self._verb = "watch"
                    return self._watch(rt, ns, q)
                self._verb = "list"
                if rt.namespaced and ns:
                    pass  # listing in a missing namespace returns an empty list, like the real server
                items = st.list(rt, ns, q.get("labelSelector"), q.get("fieldSelector"))
                start = 0
                if q.get("continue"):
                    try:
                        start = int(base64.b64decode(q["continue"]).decode())
                    except Exception:
                        raise bad_request("continue key is not valid")
                limit = int(q.get("limit") or 0)
                page = items[start:start + limit] if limit else items[start:]
                meta = {"resourceVersion": str(st.rv)}
                if limit and start + limit < len(items):
                    meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
                    meta["remainingItemCount"] = len(items) - start - limit
                return self._send(200, {"kind": rt.kind + "List", "apiVersion": rt.gv, "metadata": meta,
                                        "items": [st.render(rt, o, in_list=True) for o in page]})
            if m == "POST":
                self._verb = "create"
                if rt.namespaced and not ns:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                body = self._parse_body(raw)
                obj = st.create(rt, ns, body, manager, dry)
                self._mutated = not dry
                return self._send(201, st.render(rt, obj))
            if m == "DELETE":
                self._verb = "deletecollection"
                items = st.list(rt, ns, q.get("labelSelector"), q.get("fieldSelector"))
                out = []
                for o in list(items):
                    out.append(st.render(rt, st.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"],
                                                       dry), in_list=True))
                self._mutated = bool(out) and not dry
                return self._send(200, {"kind": rt.kind + "List", "apiVersion": rt.gv,
                                        "metadata": {"resourceVersion": str(st.rv)}, "items": out})
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        # named
        if sub == "eviction":
            if m != "POST":
                raise ApiError(405, "MethodNotAllowed", "eviction only supports create")
            self._verb = "create"
            body = self._parse_body(raw) or {}
            if body.get("kind") and body.get("kind") != "Eviction":
                raise bad_request("eviction body must be an Eviction")
            pod = st.get(rt, ns, name)
            pdb_block = self._pdb_blocks(ns, pod)
            if pdb_block:
                raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                               "budget.", {"causes": [{"reason": "DisruptionBudget", "message":
                                                        f"The disruption budget {pdb_block} is blocking"}]})
            st.delete(rt, ns, name, dry)
            self._mutated = not dry
            return self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                    "code": 201})
        if sub in ("log", "proxy", "exec", "binding", "token", "finalize", "ephemeralcontainers", "scale"):
            if sub == "finalize" and m == "PUT":
                self._verb = "update"
                body = self._parse_body(raw)
                obj, changed = st.update(rt, ns, name, body, manager, dry)
                self._mutated = changed and not dry
                return self._send(200, st.render(rt, obj))
            if sub == "log" and m == "GET":
                self._verb = "get"
                st.get(rt, ns, name)
                return self._send(200, b"", "text/plain")
            raise ApiError(405, "MethodNotAllowed", f"subresource {sub} is not implemented by the emulator")
        if m == "GET":
            self._verb = "get"
            return self._send(200, st.render(rt, st.get(rt, ns, name)))
        if m == "PUT":
            self._verb = "update"
            body = self._parse_body(raw)
            obj, changed = st.update(rt, ns, name, body, manager, dry, sub)
            self._mutated = changed and not dry
            return self._send(200, st.render(rt, obj))
        if m == "PATCH":
            self._verb = "patch"
            force = q.get("force") in ("true", "1", "True")
            ctype = self.headers.get("Content-Type", "")
            if force and not ctype.startswith("application/apply-patch"):
                raise bad_request("force: Forbidden: may not be specified for non-apply patch")
            if ctype.startswith("application/apply-patch"):
                manager = fm
            existed = (rt.group, rt.plural, ns or "", name) in st.objects
            obj, changed = st.patch(rt, ns, name, ctype, raw, manager, dry, force, sub)
            self._mutated = changed and not dry
            return self._send(200 if existed else 201, st.render(rt, obj))
        if m == "DELETE":
            self._verb = "delete"
            body = self._parse_body(raw) or {}
            pre = body.get("preconditions") or {}
            obj = st.delete(rt, ns, name, dry, pre.get("uid"), pre.get("resourceVersion"))
            self._mutated = not dry
            return self._send(200, st.render(rt, obj))
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _pdb_blocks(self, ns, pod):
        """Honour policy/v1 PDBs with maxUnavailable: 0 or minAvailable >= number of matching pods."""
        st = self.store
        pdbt = st.types.get(("policy", "v1", "poddisruptionbudgets"))
        if not pdbt:
            return None
        for pdb in st.list(pdbt, ns, None, None):
            sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            labels = pod["metadata"].get("labels") or {}
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                continue
            spec = pdb["spec"]
            podt = st.types[("", "v1", "pods")]
            matching = [p for p in st.list(podt, ns, None, None)
                        if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items())]
            if spec.get("maxUnavailable") in (0, "0", "0%"):
                return pdb["metadata"]["name"]
            ma = spec.get("minAvailable")
            if isinstance(ma, int) and len(matching) - 1 < ma:
                return pdb["metadata"]["name"]
        return None

    def _watch(self, rt, ns, q):
        st = self.store
        timeout = float(q.get("timeoutSeconds") or 30)
        lreqs = parse_label_selector(q.get("labelSelector"))
        freqs = parse_field_selector(q.get("fieldSelector"), rt)
        self._status = 200
        self._log_request()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

        def emit(etype, obj):
            line = json.dumps({"type": etype, "object": st.render(rt, obj)}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        def ok(obj):
            if ns and obj["metadata"].get("namespace") != ns:
                return False
            return label_match(lreqs, obj["metadata"].get("labels")) and field_match(freqs, obj)

        rv = q.get("resourceVersion")
        try:
            with st.lock:
                if not rv or rv == "0":
                    last = st.rv
                    initial = [copy.deepcopy(o) for o in st.list(rt, ns, None, None) if ok(o)]
                else:
                    try:
                        last = int(rv)
                    except ValueError:
                        last = st.rv
                    initial = []
                    oldest = st.events[0][0] if st.events else st.rv
                    if len(st.events) == st.events.maxlen and last < oldest - 1:
                        initial = None  # history evicted: 410 Expired, the client must relist
            if initial is None:
                line = json.dumps({"type": "ERROR", "object": ApiError(
                    410, "Expired", f"too old resource version: {last} ({oldest})").body()}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(line), line))
                self.wfile.flush()
                return
            for o in initial:
                emit("ADDED", o)
            deadline = time.time() + timeout
            while time.time() < deadline:
                with st.lock:
                    pending = [e for e in st.events if e[0] > last and e[2] == rt.group and e[3] == rt.plural]
                    if not pending:
                        st.cond.wait(timeout=min(1.0, max(0.0, deadline - time.time())))
                        continue
                for erv, etype, _, _, obj in pending:
                    last = max(last, erv)
                    if ok(obj):
                        emit(etype, obj)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


# --------------------------------------------------------------------------------------------
# Seeding / main
# --------------------------------------------------------------------------------------------
def load_seed(path):
    with open(path) as f:
        text = f.read()
    docs = [d for d in yaml.safe_load_all(text) if d]
    objs = []
    for d in docs:
        if isinstance(d, list):
            objs.extend(d)
        elif isinstance(d, dict) and "items" in d and "kind" not in d or (
                isinstance(d, dict) and str(d.get("kind", "")).endswith("List")):
            objs.extend(d.get("items") or [])
        else:
            objs.append(d)
    return objs


def seed_store(store, objs):
    """Create seed objects. Pods/Nodes keep the status given in the seed file."""
    for obj in objs:
        api = obj.get("apiVersion", "v1")
        group, version = (api.split("/", 1) if "/" in api else ("", api))
        t = next((t for t in store.types.values() if t.group == group and t.version == version
                  and t.kind == obj.get("kind")), None)
        if t is None:
            raise SystemExit(f"seed: unknown kind {api}/{obj.get('kind')}")
        ns = (obj.get("metadata") or {}).get("namespace") or ("default" if t.namespaced else None)
        status = copy.deepcopy(obj.get("status"))
        with store.lock:
            if t.namespaced and ("", "namespaces", "", ns) not in store.objects:
                store.create(store.types[("", "v1", "namespaces")], None,
                             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, "seed", False)
            created = store.create(t, ns, copy.deepcopy(obj), "seed", False)
            if status is not None and t.status_sub:
                created["status"] = status


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(port, state_dir, git_version="v1.29.4", seed=None, history=5000, host="127.0.0.1"):
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the emulator only listens on loopback")
    store = Store(git_version)
    if seed:
        seed_store(store, load_seed(seed))
    log_path = os.path.join(state_dir, "requests.jsonl") if state_dir else None
    if state_dir:
        os.makedirs(state_dir, exist_ok=True)
    handler = type("BoundHandler", (Handler,), {"store": store, "rlog": RequestLog(log_path, history)})
    srv = _Server((host, port), handler)
    srv.store = store
    srv.rlog = handler.rlog
    return srv


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--version", default="v1.29.4", help="gitVersion reported by /version")
    ap.add_argument("--seed", help="YAML/JSON file (multi-doc, list or List) of objects to create at start")
    ap.add_argument("--history", type=int, default=5000, help="in-memory request history size")
    a = ap.parse_args(argv)
    srv = make_server(a.port, a.state_dir, a.version, a.seed, a.history, a.host)
    port = srv.server_address[1]
    with open(os.path.join(a.state_dir, "port"), "w") as f:
        f.write(f"{port}\n")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start())
    print(f"kube-emulator listening on http://{a.host}:{port} (gitVersion {a.version})", flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
