#!/usr/bin/env bash
# Stop a simulator started by start.sh (only the process recorded in lab/.state/vcsim/NAME.pid).
#   lab/vcsim/stop.sh [--name NAME]      (default name: vcenter)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
STATE="${VCSIM_STATE_DIR:-$ROOT/lab/.state/vcsim}"
log() { printf '[vcsim-stop] %s\n' "$*" >&2; }
name=vcenter
while (($#)); do
  case $1 in
    --name) name=$2; shift 2 ;;
    *) log "usage: $0 [--name NAME]"; exit 2 ;;
  esac
done
pidf="$STATE/$name.pid"
if [ ! -f "$pidf" ]; then
  log "$name: not running (no pid file)"; rm -f "$STATE/$name.json"; exit 0
fi
pid=$(cat "$pidf")
if [[ $pid =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] &&
   tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "-state-dir $STATE -name $name "; then
  kill -TERM "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then log "$name: pid $pid ignored TERM, sending KILL"; kill -KILL "$pid"; fi
  log "$name: stopped pid $pid"
else
  log "$name: pid $pid is not our simulator (already gone); cleaning up"
fi
rm -f "$pidf" "$STATE/$name.json"
