#!/usr/bin/env bash
# Install everything `make test` and `make demo` need on a fresh Debian 12 machine of this project's kind.
# Idempotent: a second run finds everything in place and does (almost) nothing.
#   - Debian packages from `main` (docker.io, debootstrap, golang, shellcheck, ...)
#   - .venv       : Python 3.12, ansible 14 (ansible-core 2.21) + lab/test tools + the collection's needs
#   - .venv-2.16  : Python 3.12, ansible-core 2.16 for sanity/units on the oldest supported release
#   - .venv-eco   : Python 3.12, antsibull-docs and galaxy-importer (the ecosystem's checks on the built collection)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
log() { printf '[bootstrap] %s\n' "$*" >&2; }

APT_PACKAGES=(docker.io debootstrap golang-go gcc make rsync git shellcheck
              ca-certificates pciutils kmod)
# Each lab component may list extra Debian packages in lab/<component>/apt-packages.txt.
for f in lab/*/apt-packages.txt; do
  [ -f "$f" ] || continue
  while read -r p _; do
    if [ -n "$p" ] && [ "${p#\#}" = "$p" ]; then APT_PACKAGES+=("$p"); fi
  done < "$f"
done
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

find_python312() {
  local c
  for c in "${PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)"; do
    [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2]==(3,12)' 2>/dev/null && { echo "$c"; return; }
  done
  if command -v pyenv >/dev/null 2>&1; then
    for c in "$(pyenv root)"/versions/3.12*/bin/python3.12; do
      [ -x "$c" ] && { echo "$c"; return; }
    done
  fi
  for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    [ -x "$c" ] && { echo "$c"; return; }
  done
  return 1
}
PY=$(find_python312) || { log "ERROR: Python 3.12 not found (set PYTHON312=/path/to/python3.12)"; exit 1; }

# The venvs are built once per machine and per set of requirements, in a cache outside the clone
# (GPUOPS_VENV_CACHE, default ~/.cache/gpuops/venvs), and .venv / .venv-2.16 are symbolic links to them: a fresh
# clone on a machine that built them before starts in seconds instead of the ~70 s two pip installs take (CI clones
# afresh every time). A venv is not relocatable, so it is built where it stays; the key is the interpreter, the
# requirement files and this function's version, and a build that did not finish is never used (no .complete).
# GPUOPS_VENV_CACHE=off builds the venvs inside the clone, as real directories, as before.
VENV_CACHE=${GPUOPS_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuops/venvs}

ensure_venv() {  # ensure_venv DIR KEY EXTRAS REQFILE...: DIR is a venv built for KEY (rebuilt otherwise)
  local dir=$1 want=$2 extras=$3 pair; shift 3
  if [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$want" ] && [ -x "$dir/bin/python" ]; then
    touch "$dir/.complete"   # last use: cached builds unused for 30 days are removed below
    return 0
  fi
  log "creating $dir with $PY"
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip
  local args=(); for r in "$@"; do args+=(-r "$r"); done
  "$dir/bin/python" -m pip install -q "${args[@]}"
  # EXTRAS: "SUBDIR=REQFILE ...", packages installed with --no-deps beside the venv's own, outside its import path:
  # kubernetes-validate for lab/kube/validate.py (.venv/kv) and its 1.33.1 copy for Kubernetes 1.24's schemas
  # (.venv/kv-legacy). See lab/requirements-kv.txt for why they are not importable by default.
  for pair in $extras; do
    "$dir/bin/python" -m pip install -q --no-deps --target "$dir/${pair%%=*}" -r "${pair#*=}"
  done
  echo "$want" > "$dir/.complete"   # last: a build that did not finish is never used
}

make_venv() {  # make_venv LINK EXTRAS REQFILE...: LINK is the venv (a link into the cache, or a directory)
  local link=$1 extras=$2 pair; shift 2
  local want; want=$( { "$PY" -c 'import sys; print(sys.version)'; echo "$PY"; echo "venv-layout 3"
                        cat "$@"; for pair in $extras; do echo "$pair"; cat "${pair#*=}"; done; } | sha256sum | cut -d' ' -f1)
  if [ "$VENV_CACHE" = off ]; then
    [ -L "$link" ] && rm -f "$link"
    ensure_venv "$link" "$want" "$extras" "$@"
    return 0
  fi
  local dir=$VENV_CACHE/${link#.}-${want:0:16}
  mkdir -p "$VENV_CACHE"
  # two clones bootstrapping at once: one builds, the other waits and uses it
  ( flock 8; ensure_venv "$dir" "$want" "$extras" "$@" ) 8>"$VENV_CACHE/.lock"
  if [ "$(readlink "$link" 2>/dev/null)" != "$dir" ]; then
    rm -rf "$link"
    ln -s "$dir" "$link"
  fi
}
make_venv .venv "kv=lab/requirements-kv.txt kv-legacy=lab/requirements-kv-legacy.txt" lab/requirements-dev.txt requirements.txt
make_venv .venv-2.16 "" lab/requirements-2.16.txt requirements.txt
# antsibull-docs and galaxy-importer (the `eco` step of make test): their own ansible-core and ansible-lint
make_venv .venv-eco "" lab/requirements-eco.txt

# The lab's bytecode cache for what Python imports from zip files, i.e. AnsiballZ payloads (lab/pyc_cache): a
# module and a .pth file in the venv that runs the lab's modules on the controller. Written only when it differs,
# atomically (clones share the cached venv).
install_pyc_cache() {  # install_pyc_cache VENV
  local site src=lab/pyc_cache/gpuops_lab_pyc_cache.py
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cmp -s "$src" "$site/gpuops_lab_pyc_cache.py" || { cp "$src" "$site/.gpuops_lab_pyc_cache.$$" && mv "$site/.gpuops_lab_pyc_cache.$$" "$site/gpuops_lab_pyc_cache.py"; }
  [ "$(cat "$site/gpuops_lab_pyc_cache.pth" 2>/dev/null)" = "import gpuops_lab_pyc_cache" ] \
    || { echo "import gpuops_lab_pyc_cache" > "$site/.gpuops_lab_pyc_cache.pth.$$" && mv "$site/.gpuops_lab_pyc_cache.pth.$$" "$site/gpuops_lab_pyc_cache.pth"; }
}
install_pyc_cache .venv
if [ "$VENV_CACHE" != off ]; then   # this machine's old builds, never one this clone links to
  find "$VENV_CACHE" -mindepth 2 -maxdepth 2 -name .complete -mtime +30 -printf '%h\n' 2>/dev/null \
    | while read -r old; do [ "$old" = "$(readlink .venv)" ] || [ "$old" = "$(readlink .venv-2.16)" ] || [ "$old" = "$(readlink .venv-eco)" ] || rm -rf "$old"; done
fi
log "ready: $("$ROOT/.venv/bin/ansible" --version | sed -n 1p); $("$ROOT/.venv-2.16/bin/ansible" --version | sed -n 1p)"
