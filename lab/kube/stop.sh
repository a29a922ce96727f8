#!/usr/bin/env bash
# Stop an emulator started by lab/kube/start.sh: lab/kube/stop.sh [--name NAME]
# Only the pid recorded in lab/.state/kube/<name>/pid is signalled, and only if it is our emulator.py.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=default
while (($#)); do
  case "$1" in
    --name) NAME=$2; shift 2;;
    *) echo "stop.sh: unknown argument $1" >&2; exit 2;;
  esac
done
STATE=${KUBE_EMULATOR_STATE_ROOT:-$ROOT/lab/.state/kube}/$NAME
[[ -f $STATE/pid ]] || { echo "stop.sh: '$NAME' not running (no pid file)"; exit 0; }
PID=$(cat "$STATE/pid")
if kill -0 "$PID" 2>/dev/null && tr '\0' ' ' <"/proc/$PID/cmdline" | grep -q "lab/kube/emulator.py"; then
  kill -TERM "$PID"
  for _ in $(seq 1 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
  echo "stop.sh: stopped '$NAME' (pid $PID)"
else
  echo "stop.sh: pid $PID is not a running emulator; removing stale pid file"
fi
rm -f "$STATE/pid" "$STATE/port"
