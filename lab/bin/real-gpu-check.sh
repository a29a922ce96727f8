#!/usr/bin/env bash
# Read-only check on a REAL NVIDIA GPU node: gpu_info vs nvidia-smi field by field, gpu_doctor, NVML probe timing.
# Changes nothing on the GPU. See docs/lab.md ("Check on a real GPU") and lab/realgpu/real_gpu_check.py.
#   lab/bin/real-gpu-check.sh [--reps N] [--out DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
exec "$ROOT/.venv/bin/python" "$ROOT/lab/realgpu/real_gpu_check.py" "$@"
