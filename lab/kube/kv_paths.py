"""Where lab/bin/bootstrap.sh installs kubernetes-validate: beside the lab venv's packages, not on its import path
(lab/requirements-kv.txt says why). Shared by validate.py, which imports the package from there, and the emulator,
which only reads its schema files. Standard library only: the emulator imports it at start."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# kubernetes-validate 1.37 (schemas 1.25-1.37); GPUOPS_KV points elsewhere
KV_TARGET = os.environ.get("GPUOPS_KV", os.path.join(ROOT, ".venv", "kv"))
# kubernetes-validate 1.33.1, only for Kubernetes 1.24's schemas, never imported; GPUOPS_KV_LEGACY points elsewhere
LEGACY_TARGET = os.environ.get("GPUOPS_KV_LEGACY", os.path.join(ROOT, ".venv", "kv-legacy"))


def schema_root(target=KV_TARGET):
    """kubernetes-validate's directory of JSON schemas under ``target``, or None when it is not there."""
    base = os.path.join(target, "kubernetes_validate", "kubernetes-json-schema")
    return base if os.path.isdir(base) else None
