#!/usr/bin/env bash
# Read-only check on a REAL NVIDIA GPU node: gpu_info vs nvidia-smi field by field, gpu_doctor for every strategy
# (health checks included), NVML's MIG profiles vs the catalogue, NVML probe timing. Changes nothing on the GPU.
# See docs/lab.md ("Check on a real GPU") and lab/realgpu/real_gpu_check.py.
#   lab/bin/real-gpu-check.sh [--reps N] [--out DIR] [--kernel-log PATH]
# Python: $PYTHON if set, else the checkout's .venv/bin/python if it exists, else python3 from PATH. It needs
# nvidia-ml-py and ansible-core importable (installed, or wheels unpacked on PYTHONPATH); no ansible CLI, no collection.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=$(command -v python3); fi
fi
exec "$PY" "$ROOT/lab/realgpu/real_gpu_check.py" "$@"
