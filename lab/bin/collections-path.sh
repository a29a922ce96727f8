#!/usr/bin/env bash
# Make the repository visible to Ansible as the collection gpuops.k8s_gpu:
# build/collections/ansible_collections/gpuops/k8s_gpu -> repository root. Prints the collections path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
dir="$ROOT/build/collections/ansible_collections/gpuops"
mkdir -p "$dir"
[ "$(readlink "$dir/k8s_gpu" 2>/dev/null)" = "$ROOT" ] || ln -sfn "$ROOT" "$dir/k8s_gpu"
echo "$ROOT/build/collections"
