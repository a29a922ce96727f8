#!/usr/bin/env bash
# Install everything `make test` and `make demo` need on a fresh Debian 12 machine of this project's kind.
# Idempotent: a second run finds everything in place and does (almost) nothing.
#   - Debian packages from `main` (docker.io, debootstrap, golang, govmomi sources, shellcheck, ...)
#   - .venv       : Python 3.12, ansible 14 (ansible-core 2.21) + lab/test tools + the collection's needs
#   - .venv-2.16  : Python 3.12, ansible-core 2.16 for sanity/units on the oldest supported release
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
log() { printf '[bootstrap] %s\n' "$*" >&2; }

APT_PACKAGES=(docker.io debootstrap golang-go golang-github-vmware-govmomi-dev gcc make rsync git shellcheck
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

make_venv() {  # make_venv DIR REQFILE...
  local dir=$1; shift
  local stamp="$dir/.requirements.sha"
  local want; want=$(cat "$@" | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/bin/python" ]; then
    return 0
  fi
  log "creating $dir with $PY"
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip
  local args=(); for r in "$@"; do args+=(-r "$r"); done
  "$dir/bin/python" -m pip install -q "${args[@]}"
  echo "$want" > "$stamp"
}
make_venv .venv lab/requirements-dev.txt requirements.txt
make_venv .venv-2.16 lab/requirements-2.16.txt requirements.txt
# Kubernetes 1.24 schemas for lab/kube/validate.py (kubernetes-validate 1.37 starts at 1.25): a second, never
# imported copy of kubernetes-validate beside the venv's packages
legacy_want=$(sha256sum lab/requirements-kv-legacy.txt | cut -d' ' -f1)
if [ "$(cat .venv/kv-legacy/.requirements.sha 2>/dev/null)" != "$legacy_want" ]; then
  rm -rf .venv/kv-legacy
  .venv/bin/python -m pip install -q --no-deps --target .venv/kv-legacy -r lab/requirements-kv-legacy.txt
  echo "$legacy_want" > .venv/kv-legacy/.requirements.sha
fi
log "ready: $("$ROOT/.venv/bin/ansible" --version | sed -n 1p); $("$ROOT/.venv-2.16/bin/ansible" --version | sed -n 1p)"
