#!/usr/bin/env bash
# The one prepared, read-only script for a lent GPU machine (the workplace's device tool), run from the checkout's root:
#   bash lab/realgpu/device-run.sh
# It needs python3 with nvidia-ml-py there and, carried in .whl/ (git-ignored), the ansible-core and resolvelib wheels
# (pip download --no-deps ... ansible-core==2.21.5 resolvelib==1.2.1); optionally .devcarry/nvidia-ctk (the lab's
# nvidia-ctk build, lab/go/build.sh nvidia-ctk) for the CDI oracle on the real driver. It changes nothing on the GPU:
# lab/bin/real-gpu-check.sh only reads (and checks that persistence, MIG and compute mode are unchanged), and
# `nvidia-ctk cdi generate` writes its spec to a file under the output directory, not to /etc/cdi or /var/run/cdi.
# Output: $OUT (or ./build/real-gpu-device) gets real-gpu.tgz (every JSON answer) and the reports.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DEST=${OUT:-$ROOT/build/real-gpu-device}
WORK=/tmp/gpuops-real-gpu
rm -rf "$WORK" && mkdir -p "$WORK/rg" "$DEST"
python3 -m pip install -q --no-index --no-deps --target "$WORK/site" .whl/ansible_core-*.whl .whl/resolvelib-*.whl || exit 2
export PYTHONPATH=$WORK/site
nvidia-smi -L
nvidia-smi --query-gpu=mig.mode.current,persistence_mode,compute_mode --format=csv,noheader | tee "$WORK/rg/state-before.txt"
PYTHON=python3 timeout 300 lab/bin/real-gpu-check.sh --reps 50 --out "$WORK/rg" 2>&1 | tee "$WORK/rg/check.log"
rc=${PIPESTATUS[0]}
if [ -x .devcarry/nvidia-ctk ]; then
  .devcarry/nvidia-ctk --version > "$WORK/rg/nvidia-ctk-version.txt" 2>&1
  mkdir -p "$WORK/rg/cdi"
  timeout 60 .devcarry/nvidia-ctk cdi generate --mode=nvml --output="$WORK/rg/cdi/nvidia.yaml" > "$WORK/rg/cdi-generate.log" 2>&1
  echo "nvidia-ctk cdi generate: exit $?"
  timeout 60 .devcarry/nvidia-ctk cdi list --spec-dir "$WORK/rg/cdi" > "$WORK/rg/cdi-list.txt" 2>&1
  cat "$WORK/rg/cdi-list.txt"
fi
(dmesg 2>&1 | grep -iE 'xid|NVRM|hypervisor' | tail -30) > "$WORK/rg/kernel-nvrm.txt"
nvidia-smi --query-gpu=mig.mode.current,persistence_mode,compute_mode --format=csv,noheader | tee "$WORK/rg/state-after.txt"
cmp -s "$WORK/rg/state-before.txt" "$WORK/rg/state-after.txt" || { echo "GPU state changed"; rc=1; }
tar czf "$DEST/real-gpu.tgz" -C "$WORK" rg
cp "$WORK/rg/report.md" "$WORK/rg/report.json" "$DEST/" 2>/dev/null
echo "real-gpu-check exit $rc"
exit "$rc"
