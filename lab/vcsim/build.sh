#!/usr/bin/env bash
# Build the lab vSphere simulator: our front end and GPU extension (lab/go/vcsim: main.go, gpu.go) over govmomi
# v0.52.0's simulator library from the Go module proxy, through lab/go/build.sh (built once per machine and per
# content of the set, into ~/.cache/gpuops/go/vcsim-KEY/).
#   lab/vcsim/build.sh     -> lab/.build/vcsim/vcsim (a copy of the cached binary; a no-op when it is that one)
# The earlier build from Debian's govmomi 0.24.2 sources needed three bug-fix patches and a hook patched into the
# simulator package; v0.52.0 has none of those bugs and a method hook of its own (Registry.Handler), so there is
# nothing to patch (lab/vcsim/README.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT="$ROOT/lab/.build/vcsim"
BIN="$OUT/vcsim"
log() { printf '[vcsim-build] %s\n' "$*" >&2; }
case "${1:-}" in
  "") ;;
  --without-fixes) log "ERROR: --without-fixes is gone: govmomi v0.52.0 has none of the 0.24.2 bugs the fixes were for"; exit 2 ;;
  *) log "usage: $0"; exit 2 ;;
esac
DIR=$(bash "$ROOT/lab/go/build.sh" vcsim)
mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
flock 9
if [ -x "$BIN" ] && cmp -s "$DIR/vcsim" "$BIN"; then
  log "up to date: $BIN"
  exit 0
fi
cp "$DIR/vcsim" "$BIN.tmp.$$" && mv "$BIN.tmp.$$" "$BIN"
log "installed $BIN from $DIR"
