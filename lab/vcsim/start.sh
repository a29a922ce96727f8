#!/usr/bin/env bash
# Start the lab vSphere simulator in the background (builds it first if needed). Idempotent.
#   lab/vcsim/start.sh [--model vcenter|esx] [--name NAME] [--gpus FILE] [--port N] [-- EXTRA VCSIM FLAGS]
# Writes lab/.state/vcsim/NAME.json (url, host, port, username, password, pid), NAME.pid and NAME.log,
# and prints the JSON on stdout. VCSIM_BIN overrides the binary, VCSIM_EXTRA_FLAGS adds simulator flags.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
STATE="${VCSIM_STATE_DIR:-$ROOT/lab/.state/vcsim}"
log() { printf '[vcsim-start] %s\n' "$*" >&2; }
PY=${VCSIM_PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3) || { log "ERROR: no python3"; exit 1; }

model=vcenter name="" gpus="" port=0 extra=()
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) log "usage: $0 [--model vcenter|esx] [--name NAME] [--gpus FILE] [--port N] [-- VCSIM FLAGS]"; exit 2 ;;
  esac
done
case $model in vcenter|esx) ;; *) log "unknown model $model"; exit 2 ;; esac
[ -n "$name" ] || name=$model
[[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { log "bad name $name"; exit 2; }
if [ -n "$gpus" ]; then
  [ -f "$gpus" ] || { log "no such GPU config: $gpus"; exit 2; }
  gpus=$(cd "$(dirname "$gpus")" && pwd)/$(basename "$gpus")
fi

if [ -n "${VCSIM_BIN:-}" ]; then
  BIN=$VCSIM_BIN
else
  "$HERE/build.sh" >&2
  BIN="$ROOT/lab/.build/vcsim/vcsim"
fi
[ -x "$BIN" ] || { log "no simulator binary at $BIN"; exit 1; }
mkdir -p "$STATE"
json="$STATE/$name.json" pidf="$STATE/$name.pid" logf="$STATE/$name.log"

sdk_answers() {  # sdk_answers URL
  "$PY" - "$1" <<'PY'
import ssl, sys, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE  # self-signed loopback simulator
try:
    r = urllib.request.urlopen(sys.argv[1] + "/vimServiceVersions.xml", context=ctx, timeout=2)
    sys.exit(0 if b"urn:vim25" in r.read() else 1)
except Exception:
    sys.exit(1)
PY
}
ours_running() {  # pid file points at a live simulator process started for this name
  [ -f "$pidf" ] || return 1
  local pid; pid=$(cat "$pidf")
  [[ $pid =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "-state-dir $STATE -name $name " || return 1
}
state_url() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$json"; }

if ours_running && [ -f "$json" ] && sdk_answers "$(state_url)"; then
  log "already running (pid $(cat "$pidf"))"
  cat "$json"
  exit 0
fi
if ours_running; then
  log "stale instance $(cat "$pidf") is not answering; stopping it"
  "$HERE/stop.sh" --name "$name" >&2
fi
rm -f "$json" "$pidf"

args=(-state-dir "$STATE" -name "$name" -model "$model" -l "127.0.0.1:$port")
[ -n "$gpus" ] && args+=(-gpus "$gpus")
args+=("${extra[@]}")
# VCSIM_EXTRA_FLAGS: more simulator flags from the environment (e.g. -without-fixes, for lab/tests/simulators/test_vcsim.py)
read -r -a env_flags <<< "${VCSIM_EXTRA_FLAGS:-}"
args+=("${env_flags[@]}")
setsid "$BIN" "${args[@]}" > "$logf" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$pidf"

for _ in $(seq 1 150); do
  if ! kill -0 "$pid" 2>/dev/null; then
    log "simulator exited; log follows"; cat "$logf" >&2; rm -f "$pidf"; exit 1
  fi
  if [ -f "$json" ] && sdk_answers "$(state_url)"; then
    log "started $name (pid $pid) at $(state_url)"
    cat "$json"
    exit 0
  fi
  sleep 0.2
done
log "simulator did not answer within 30s; stopping it"
"$HERE/stop.sh" --name "$name" >&2 || true
exit 1
