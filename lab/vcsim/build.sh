#!/usr/bin/env bash
# Build the lab vSphere simulator from Debian's govmomi 0.24.2 sources (GOPATH mode, offline).
#   lab/vcsim/build.sh [--force] [--without-fixes]
# Output: lab/.build/vcsim/vcsim. Skips the build when sources, patches and our Go files are unchanged, and copies
# the binary from the machine's cache (~/.cache/gpuops/vcsim/<stamp>) when another clone built the same one.
# --without-fixes builds lab/.build/vcsim/vcsim-without-fixes: the same simulator minus the bug-fix
# patches (patches/*-fix-*.diff), to show the upstream 0.24.2 bugs (VCSIM_BIN=... pytest lab/tests/simulators/test_vcsim.py).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT="$ROOT/lab/.build/vcsim"
SRC_GOVMOMI=${VCSIM_GOVMOMI_SRC:-/usr/share/gocode/src/github.com/vmware/govmomi}
SRC_UUID=${VCSIM_UUID_SRC:-/usr/share/gocode/src/github.com/google/uuid}
log() { printf '[vcsim-build] %s\n' "$*" >&2; }

force=0 fixes=1
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --without-fixes) fixes=0 ;;
    *) log "usage: $0 [--force] [--without-fixes]"; exit 2 ;;
  esac
done
if [ $fixes = 1 ]; then
  GOPATH_DIR="$OUT/gopath" BIN="$OUT/vcsim" STAMP="$OUT/.stamp"
else
  GOPATH_DIR="$OUT/gopath-without-fixes" BIN="$OUT/vcsim-without-fixes" STAMP="$OUT/.stamp-without-fixes"
fi

# One build at a time (parallel test workers start simulators concurrently); the others wait, then find it done.
mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
flock 9

command -v go >/dev/null || { log "ERROR: go not found (apt-get install golang-go)"; exit 1; }
for d in "$SRC_GOVMOMI/simulator" "$SRC_UUID"; do
  [ -d "$d" ] || { log "ERROR: $d missing (apt-get install golang-github-vmware-govmomi-dev golang-github-google-uuid-dev)"; exit 1; }
done

# Everything that determines the binary goes into the stamp.
stamp_of() {
  {
    go version
    dpkg-query -W -f='${Package} ${Version}\n' golang-github-vmware-govmomi-dev golang-github-google-uuid-dev 2>/dev/null || true
    (cd "$SRC_GOVMOMI" && find . -type f -printf '%P %s %T@\n' | LC_ALL=C sort)
    (cd "$HERE" && shopt -s nullglob && LC_ALL=C sha256sum build.sh main.go patches/*.diff simext/*.go)
    echo "fixes=$fixes"
  } | sha256sum | cut -d' ' -f1
}
want=$(stamp_of)
if [ $force = 0 ] && [ -x "$BIN" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  log "up to date: $BIN"
  exit 0
fi
# The machine's cache of built simulators (one per stamp, outside the clone: CI clones afresh for every run and the
# build costs about 45 CPU-seconds); GPUOPS_BUILD_CACHE=off always builds. Entries unused for 30 days are removed.
CACHE_ROOT=${GPUOPS_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuops}
CACHED=$CACHE_ROOT/vcsim/$want/$(basename "$BIN")
if [ $force = 0 ] && [ "$CACHE_ROOT" != off ] && [ -x "$CACHED" ]; then
  cp "$CACHED" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  touch "$CACHED"
  echo "$want" > "$STAMP"
  log "from the machine's cache: $CACHED"
  exit 0
fi

start=$(date +%s)
log "copying govmomi sources into $GOPATH_DIR"
rm -rf "$GOPATH_DIR/src"
mkdir -p "$GOPATH_DIR/src/github.com/vmware" "$GOPATH_DIR/src/github.com/google" "$GOPATH_DIR/src/gpuops/vcsim"
cp -a "$SRC_GOVMOMI" "$GOPATH_DIR/src/github.com/vmware/govmomi"
cp -a "$SRC_UUID" "$GOPATH_DIR/src/github.com/google/uuid"
chmod -R u+w "$GOPATH_DIR/src"

for p in "$HERE"/patches/*.diff; do
  [ -e "$p" ] || continue
  case $(basename "$p") in *-fix-*) [ $fixes = 1 ] || { log "skipping $(basename "$p")"; continue; } ;; esac
  log "applying $(basename "$p")"
  patch -p1 --batch --forward --no-backup-if-mismatch -s -d "$GOPATH_DIR/src/github.com/vmware/govmomi" < "$p"
done
for f in "$HERE"/simext/*.go; do
  [ -e "$f" ] || continue
  cp "$f" "$GOPATH_DIR/src/github.com/vmware/govmomi/simulator/"
done
cp "$HERE/main.go" "$GOPATH_DIR/src/gpuops/vcsim/main.go"

log "go build (GOPATH mode)"
GOCACHE_DIR="$OUT/gocache"
[ "$CACHE_ROOT" = off ] || GOCACHE_DIR="$CACHE_ROOT/go-build"   # Go's own cache is content-addressed and shareable
mkdir -p "$GOCACHE_DIR"
(cd "$GOPATH_DIR/src/gpuops/vcsim" &&
  GOPATH="$GOPATH_DIR" GO111MODULE=off GOFLAGS='' GOCACHE="$GOCACHE_DIR" CGO_ENABLED=0 \
    go build -trimpath -o "$BIN.tmp" .)
mv "$BIN.tmp" "$BIN"
echo "$want" > "$STAMP"
if [ "$CACHE_ROOT" != off ]; then
  mkdir -p "$(dirname "$CACHED")"
  cp "$BIN" "$CACHED.tmp.$$" && mv "$CACHED.tmp.$$" "$CACHED"
  find "$CACHE_ROOT/vcsim" -mindepth 2 -maxdepth 2 -type f -mtime +30 -delete 2>/dev/null || true
  find "$CACHE_ROOT/vcsim" -mindepth 1 -maxdepth 1 -type d -empty -delete 2>/dev/null || true
fi
log "built $BIN in $(( $(date +%s) - start ))s"
