#!/usr/bin/env bash
# Build upstream Go programs from the Go module proxy, once per machine and per pinned set, into a cache.
#
#   lab/go/build.sh NAME            build lab/go/NAME (if not cached) and print the directory holding its binaries
#   lab/go/build.sh --check NAME    print that directory if it is built and complete, else exit 1 (builds nothing)
#   lab/go/build.sh --list          the program sets there are (one directory each under lab/go/)
#
# A program set is a directory lab/go/NAME/ with:
#   go.mod, go.sum   an ordinary module that requires the released upstream version(s) (go mod tidy was run here)
#   programs         one line per binary: IMPORT_PATH [out=NAME] [cgo=1] [ldflags=FILE] [tags=A,B]  (# comments allowed)
#                    or `@file MODULE PATH...`: copy files of a required module (e.g. kwok's stage configurations)
#                    into the build, under files/PATH
#   *.ldflags        optional: one line of -ldflags (e.g. -X k8s.io/component-base/version.gitVersion=v1.37.2)
#   toolchain        optional: one line, a GOTOOLCHAIN value (e.g. go1.27.3) when the upstream module needs a newer Go
# Nothing upstream is copied into the repository: the go command fetches the modules (GOMODCACHE, ~/go/pkg/mod) and
# compiles them (GOCACHE, ~/.cache/go-build); the binaries land in
#   ${GPUOPS_GO_CACHE:-~/.cache/gpuops/go}/NAME-KEY/   KEY = hash of the set's files, this script and `go version`
# with a .complete stamp written last, so an interrupted build is never used. Concurrent builds of one set wait on
# a lock. Builds of a set unused for 30 days are removed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${GPUOPS_GO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuops/go}
log() { printf '[lab/go] %s\n' "$*" >&2; }

find_go() {  # the newest Go among PATH's and the machine's own (Debian's golang-go 1.19 may come first on PATH)
  local c best="" bestv=0 v
  for c in "${GPUOPS_GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    v=$("$c" env GOVERSION 2>/dev/null | sed -E 's/^go([0-9]+)\.([0-9]+).*/\1 \2/' | awk '{printf "%d", $1*1000+$2}')
    [ -n "$v" ] && [ "$v" -gt "$bestv" ] && { best=$c; bestv=$v; }
  done
  [ "$bestv" -ge 1026 ] || { log "ERROR: Go >= 1.26 not found (PATH go, /usr/local/go/bin/go); set GPUOPS_GO"; return 1; }
  echo "$best"
}

case "${1:-}" in
  --list) for d in "$HERE"/*/; do [ -f "$d/programs" ] && basename "$d"; done; exit 0 ;;
  --check) CHECK=1; shift ;;
  ""|-h|--help) sed -n '2,8p' "$0"; exit 2 ;;
  *) CHECK=0 ;;
esac
NAME=${1:?program set name}
SET=$HERE/$NAME
[ -f "$SET/programs" ] && [ -f "$SET/go.mod" ] || { log "ERROR: no program set lab/go/$NAME (programs, go.mod)"; exit 2; }
GO=$(find_go)
if [ -f "$SET/toolchain" ]; then export GOTOOLCHAIN; GOTOOLCHAIN=$(tr -d ' \n' < "$SET/toolchain"); else export GOTOOLCHAIN=local; fi
KEY=$( { "$GO" version; echo "$GOTOOLCHAIN"; cat "$0"; for f in "$SET"/*; do [ -f "$f" ] && { echo "== ${f##*/}"; cat "$f"; }; done; } \
      | sha256sum | cut -c1-16)
OUT=$CACHE/$NAME-$KEY
if [ -f "$OUT/.complete" ]; then touch "$OUT/.complete"; echo "$OUT"; exit 0; fi
[ "$CHECK" = 0 ] || exit 1

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock-$NAME"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi   # another run built it while we waited
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
start=$(date +%s)
log "building $NAME with $("$GO" version | cut -d' ' -f3) into $OUT (first build on this machine)"
while read -r pkg opts; do
  case "$pkg" in ''|'#'*) continue ;; esac
  if [ "$pkg" = "@file" ]; then
    set -- $opts
    mod=$1; shift
    (cd "$SET" && GOFLAGS=-mod=readonly "$GO" mod download "$mod") || { log "ERROR: go mod download $mod failed"; exit 1; }
    dir=$(cd "$SET" && GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Dir}}' "$mod") && [ -n "$dir" ] \
      || { log "ERROR: $NAME/programs: module $mod has no directory in the module cache"; exit 1; }
    for f in "$@"; do
      install -D -m 0644 "$dir/$f" "$OUT.tmp/files/$f" || { log "ERROR: $NAME/programs: $mod has no $f"; exit 1; }
    done
    continue
  fi
  out=${pkg##*/} cgo=0 ldflags="" tags=""
  for o in $opts; do
    case "$o" in
      out=*) out=${o#out=} ;;
      cgo=*) cgo=${o#cgo=} ;;
      ldflags=*) ldflags=$(tr -d '\n' < "$SET/${o#ldflags=}") ;;
      tags=*) tags=${o#tags=} ;;
      *) log "ERROR: $NAME/programs: unknown option $o"; exit 2 ;;
    esac
  done
  t0=$(date +%s)
  (cd "$SET" && CGO_ENABLED=$cgo GOFLAGS=-mod=readonly "$GO" build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" \
     -o "$OUT.tmp/$out" "$pkg") || { log "ERROR: go build $pkg failed (set $NAME)"; exit 1; }
  log "  $out: $(( $(date +%s) - t0 )) s"
done < "$SET/programs"
printf '%s\n' "$KEY" > "$OUT.tmp/.complete.tmp"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"; mv "$OUT/.complete.tmp" "$OUT/.complete"
log "built $NAME in $(( $(date +%s) - start )) s"
# prune builds of this set unused for 30 days
for stamp in $(find "$CACHE" -maxdepth 2 -path "$CACHE/$NAME-*/.complete" -mtime +30 2>/dev/null); do
  [ "${stamp%/.complete}" = "$OUT" ] || rm -rf "${stamp%/.complete}"
done
echo "$OUT"
