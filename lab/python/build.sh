#!/usr/bin/env bash
# Build the lab's controller interpreter once per machine: CPython 3.13 with profile-guided optimisation, from the
# upstream source tarball that Debian's `python3.13` source package carries (Debian 13 "trixie"; fetched with apt,
# which checks it against the signed Sources index). Prints the interpreter's path on stdout.
#
#   lab/python/build.sh              build if needed, print .../bin/python3.13
#   GPUOPS_PYTHON=/path/python3.x    skip the build and use that interpreter (bootstrap.sh checks it)
#
# Why: almost all of `make test` is Python on the controller (ansible-playbook, modules run on localhost, pytest,
# sanity, lint), and the whole run is CPU-bound on two cores. pyenv's 3.12 here is built with --enable-shared and
# neither PGO nor -fno-semantic-interposition; this build does a test file of the lab in 12 % less CPU (docs/lab.md,
# "Where the CPU goes"). It is cached under ~/.cache/gpuops/python/<minor>-pgo-<key> (key: RECIPE below), like the node
# image that lab/docker caches: the first run on a fresh machine pays the build (about 10 minutes on 2 cores).
# Debian's own 3.13 binaries cannot be used: they need trixie's C library.
set -euo pipefail
log() { printf '[python-build] %s\n' "$*" >&2; }
if [ -n "${GPUOPS_PYTHON:-}" ]; then echo "$GPUOPS_PYTHON"; exit 0; fi

SUITE=trixie PACKAGE=python3.13 MINOR=3.13
CONFIGURE=(--enable-optimizations --without-ensurepip)
# The cache key: what decides the build (not this file's comments). Change RECIPE to force a rebuild.
RECIPE="1 $SUITE $PACKAGE ${CONFIGURE[*]}"
KEY=$(echo "$RECIPE" | sha256sum | cut -c1-16)
CACHE=${GPUOPS_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuops/python}
PREFIX=$CACHE/$MINOR-pgo-$KEY
PY=$PREFIX/bin/python$MINOR
if [ -x "$PY" ] && [ -f "$PREFIX/.complete" ]; then echo "$PY"; exit 0; fi

mkdir -p "$CACHE"
exec 8>"$CACHE/.build.lock"
flock 8   # two checkouts bootstrapping at once build it once
if [ -x "$PY" ] && [ -f "$PREFIX/.complete" ]; then echo "$PY"; exit 0; fi

WORK=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# A private apt configuration with one deb-src line: the machine's own sources and lists stay untouched.
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial"
echo "deb-src http://deb.debian.org/debian $SUITE main" > "$WORK/apt/sources.list"
APT=(-o Dir::Etc::SourceList="$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$WORK/apt/lists" -o Dir::Cache="$WORK/apt/cache" -o APT::Sandbox::User=root)
log "fetching Debian $SUITE's $PACKAGE source package (upstream tarball)"
apt-get "${APT[@]}" -qq update
(cd "$WORK" && apt-get "${APT[@]}" -qq source --download-only "$PACKAGE" >/dev/null)
ORIG=$(ls "$WORK"/"${PACKAGE}"_*.orig.tar.xz)
VERSION=$(basename "$ORIG" .orig.tar.xz); VERSION=${VERSION#"${PACKAGE}"_}
log "building CPython $VERSION with --enable-optimizations into $PREFIX (once per machine; about 10 minutes)"
tar -C "$WORK" -xf "$ORIG"
SRC=$(find "$WORK" -maxdepth 1 -type d -name "Python-$MINOR.*" | head -1)
cd "$SRC"
# Static libpython (no --enable-shared): calls inside the interpreter need no PLT. No LTO: its single-threaded link
# would add minutes to a fresh machine's first run for a few percent.
rm -rf "$PREFIX"
./configure -q --prefix="$PREFIX" "${CONFIGURE[@]}" >"$WORK/configure.log" 2>&1 \
  || { tail -40 "$WORK/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$WORK/make.log" 2>&1 || { tail -60 "$WORK/make.log" >&2; exit 1; }
make install >"$WORK/install.log" 2>&1 || { tail -40 "$WORK/install.log" >&2; exit 1; }
# The modules the lab needs must have been built (configure leaves out what lacks its -dev package).
"$PY" -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid, readline, venv, ensurepip' \
  || { log "ERROR: the new interpreter lacks a module (see lab/python/apt-packages.txt)"; exit 1; }
echo "$VERSION" > "$PREFIX/.complete"
log "ready: $("$PY" -VV | head -1)"
echo "$PY"
