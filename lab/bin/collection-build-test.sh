#!/usr/bin/env bash
# Build the collection tarball, install it into an empty collections path and use it from there:
# proves `ansible-galaxy collection build` produces something that installs and works.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV="$ROOT/.venv/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$ROOT"
"$VENV/ansible-galaxy" collection build --force --output-path "$tmp/dist" . >/dev/null 2>&1
tarball=$(ls "$tmp"/dist/gpuops-k8s_gpu-*.tar.gz)
echo "built $(basename "$tarball") ($(du -k "$tarball" | cut -f1) KiB)"
if tar tzf "$tarball" | grep -E '^(lab|\.ci|\.venv|build)/' ; then
  echo "FAIL: the tarball contains lab or build files" >&2; exit 1
fi
unset ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS
"$VENV/ansible-galaxy" collection install --force --offline --no-deps -p "$tmp/collections" "$tarball" >/dev/null 2>&1
cd "$tmp"
export ANSIBLE_COLLECTIONS_PATH="$tmp/collections"
"$VENV/ansible-doc" -t module gpuops.k8s_gpu.gpu_info 2>&1 | grep -q mig_profiles || { echo "FAIL: ansible-doc cannot read gpu_info from the installed tarball" >&2; exit 1; }
"$VENV/ansible-doc" -t role -l gpuops.k8s_gpu | grep -q gpu_probe
out=$("$VENV/ansible" localhost -c local -m gpuops.k8s_gpu.gpu_info -a node_facts=false 2>/dev/null)
echo "$out" | grep -q '"status"' || { echo "FAIL: installed gpu_info did not run: $out" >&2; exit 1; }
echo "installed collection works: $(echo "$out" | grep -o '"status": "[a-z_]*"')"
