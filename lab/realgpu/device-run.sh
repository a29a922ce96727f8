#!/usr/bin/env bash
# The one prepared, read-only script for a lent GPU machine (the workplace's device tool), run from the checkout's root:
#   bash lab/realgpu/device-run.sh
# It needs python3 with nvidia-ml-py there and, carried in .whl/ (git-ignored), the ansible-core and resolvelib wheels
# (pip download --no-deps ... ansible-core==2.21.5 resolvelib==1.2.1); optionally, carried xz-compressed in .devcarry/
# (git-ignored), the lab's builds of nvidia-ctk (CDI oracle), gpu-feature-discovery (labels oracle),
# nvidia-device-plugin and kubelet-registrar (the collection's plugin config on the real driver). It changes no GPU
# setting: lab/bin/real-gpu-check.sh only reads (and checks that persistence, MIG and compute mode are unchanged),
# lab/realgpu/nvml_record.py only queries NVML (and runs a short ordinary PyTorch load to record what "used" reads),
# `nvidia-ctk cdi generate` writes its spec under the output directory, not to /etc/cdi or /var/run/cdi, GFD runs
# --oneshot into a file, and the device plugin only lists and allocates (environment answers) to the stand-in kubelet.
# Output: $OUT (or ./build/real-gpu-device) gets real-gpu.tgz (every answer) and the reports.
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
R=$WORK/rg
nvidia-smi -q -x > "$R/nvidia-smi-q-x.xml" 2>&1
nvidia-smi -q > "$R/nvidia-smi-q.txt" 2>&1
{ nvidia-smi mig -lgip; nvidia-smi mig -lgipp; } > "$R/nvidia-smi-mig-lgip.txt" 2>&1
nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader > "$R/nvidia-smi-compute-cap.csv" 2>&1
nvidia-smi nvlink -s > "$R/nvidia-smi-nvlink-s.txt" 2>&1
nvidia-smi topo -m > "$R/nvidia-smi-topo-m.txt" 2>&1
PYTHON=python3 timeout 240 lab/bin/real-gpu-check.sh --reps 50 --out "$WORK/rg" 2>&1 | tee "$WORK/rg/check.log"
rc=${PIPESTATUS[0]}
timeout 120 python3 lab/realgpu/nvml_record.py "$R" --load-seconds 8 2>&1 | tail -5
mkdir -p "$WORK/bin"
# python's lzma, not xz(1): the machine's image may lack xz-utils
python3 -c 'import lzma, os, sys
for f in sys.argv[2:]:
    dst = os.path.join(sys.argv[1], os.path.basename(f)[:-3])
    open(dst, "wb").write(lzma.open(f).read()); os.chmod(dst, 0o755)' "$WORK/bin" .devcarry/*.xz 2>&1 | tail -2
B=$WORK/bin
if [ -x "$B/gpu-feature-discovery" ]; then
  mt=/sys/class/dmi/id/product_name; [ -r "$mt" ] || { echo unknown > "$WORK/product_name"; mt=$WORK/product_name; }
  for s in none single mixed; do
    timeout 60 "$B/gpu-feature-discovery" --oneshot --no-timestamp --use-node-feature-api=false \
      --output-file="$R/gfd-$s.labels" --machine-type-file="$mt" --mig-strategy=$s > "$R/gfd-$s.log" 2>&1
    echo "gpu-feature-discovery --mig-strategy=$s: exit $? ($(wc -l < "$R/gfd-$s.labels" 2>/dev/null) labels)"
  done
fi
if [ -x "$B/nvidia-device-plugin" ] && [ -x "$B/kubelet-registrar" ]; then
  "$B/nvidia-device-plugin" --version > "$R/nvidia-device-plugin-version.txt" 2>&1
  timeout 240 python3 lab/realgpu/device_plugin_record.py "$R" "$B/nvidia-device-plugin" "$B/kubelet-registrar" 2>&1 | tail -5
fi
{ uname -a; cat /proc/driver/nvidia/version; cat /sys/class/dmi/id/product_name /sys/class/dmi/id/sys_vendor 2>&1
  grep -m1 -o 'hypervisor' /proc/cpuinfo; cat /sys/devices/system/clocksource/clocksource0/current_clocksource
  ls -l /dev/nvidia* 2>&1; ls /proc/driver/nvidia-caps 2>&1; cat /proc/driver/nvidia-caps/mig-minors 2>&1 | head -5
  for c in nvidia-cuda-mps-control nvidia-persistenced nv-fabricmanager dcgmi nv-hostengine dcgm-exporter nvidia-ctk \
    containerd docker crictl kubelet; do printf '%s: %s\n' "$c" "$(command -v $c || echo absent)"; done
  ls /usr/lib/x86_64-linux-gnu/libdcgm* /usr/local/nvidia/lib64/libdcgm* 2>&1 | head -3
  nvidia-smi -q -d PERFORMANCE,ECC,PAGE_RETIREMENT,ROW_REMAPPER
} > "$R/node-signals.txt" 2>&1
if [ -x "$B/nvidia-ctk" ]; then
  "$B/nvidia-ctk" --version > "$WORK/rg/nvidia-ctk-version.txt" 2>&1
  mkdir -p "$WORK/rg/cdi"
  timeout 60 "$B/nvidia-ctk" cdi generate --mode=nvml --output="$WORK/rg/cdi/nvidia.yaml" > "$WORK/rg/cdi-generate.log" 2>&1
  echo "nvidia-ctk cdi generate: exit $?"
  timeout 60 "$B/nvidia-ctk" cdi list --spec-dir "$WORK/rg/cdi" > "$WORK/rg/cdi-list.txt" 2>&1
  cat "$WORK/rg/cdi-list.txt"
fi
(dmesg 2>&1 | grep -iE 'xid|NVRM|hypervisor' | tail -30) > "$WORK/rg/kernel-nvrm.txt"
nvidia-smi --query-gpu=mig.mode.current,persistence_mode,compute_mode --format=csv,noheader | tee "$WORK/rg/state-after.txt"
cmp -s "$WORK/rg/state-before.txt" "$WORK/rg/state-after.txt" || { echo "GPU state changed"; rc=1; }
tar czf "$DEST/real-gpu.tgz" -C "$WORK" rg
cp "$WORK/rg/report.md" "$WORK/rg/report.json" "$DEST/" 2>/dev/null
echo "real-gpu-check exit $rc"
exit "$rc"
