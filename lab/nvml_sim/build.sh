#!/usr/bin/env bash
# Build lab/.build/nvml_sim/libnvidia-ml.so.1 (the NVML simulator) against NVIDIA's nvml.h
# from the nvidia-nvml-dev wheel in .venv.  Idempotent: rebuilds only when a source changed.
#   NVML_H_DIR=/path/to/include  overrides where nvml.h is looked up.
#   FORCE=1                      forces a rebuild.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT="$ROOT/lab/.build/nvml_sim"
LIB="$OUT/libnvidia-ml.so.1"

find_nvml_h() {
  if [ -n "${NVML_H_DIR:-}" ] && [ -f "$NVML_H_DIR/nvml.h" ]; then echo "$NVML_H_DIR"; return; fi
  local h
  h=$(find "$ROOT/.venv/lib" -path '*/nvidia/*/include/nvml.h' 2>/dev/null | sort | tail -1)
  [ -n "$h" ] || h=$(find "$ROOT"/.venv*/lib -name nvml.h 2>/dev/null | sort | tail -1)
  [ -n "$h" ] || { echo "build.sh: nvml.h not found (install nvidia-nvml-dev into .venv or set NVML_H_DIR)" >&2; return 1; }
  dirname "$h"
}
INC=$(find_nvml_h)
SRCS=("$HERE"/src/*.c)
CFLAGS=(-std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden -D_FORTIFY_SOURCE=2 -I"$INC" -I"$HERE/src")
# shellcheck disable=SC2054  # commas belong to -Wl, options
LDFLAGS=(-shared -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script="$HERE/src/exports.map" -Wl,-z,defs -lpthread)

mkdir -p "$OUT"
# One build at a time (parallel test workers call this script concurrently); the others wait, then find it done.
exec 9>"$OUT/.build.lock"
flock 9
# Fingerprint: sources, headers, this script, the nvml.h used, compiler version.
FP=$( { cat "$HERE"/src/* "$0" "$INC/nvml.h"; gcc --version | head -1; } | sha256sum | cut -d' ' -f1)
if [ -z "${FORCE:-}" ] && [ -f "$LIB" ] && [ -f "$OUT/.fingerprint" ] && [ "$(cat "$OUT/.fingerprint")" = "$FP" ]; then
  exit 0
fi
echo "build.sh: compiling $LIB (nvml.h from $INC)" >&2
gcc "${CFLAGS[@]}" "${SRCS[@]}" -o "$LIB.tmp" "${LDFLAGS[@]}"
mv -f "$LIB.tmp" "$LIB"
ln -sfn libnvidia-ml.so.1 "$OUT/libnvidia-ml.so"
echo "$FP" > "$OUT/.fingerprint"
