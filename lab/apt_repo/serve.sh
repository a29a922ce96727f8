#!/usr/bin/env bash
# Serve the lab apt repository over HTTP on 127.0.0.1 (node containers use host networking, so they reach it).
#   lab/apt_repo/serve.sh start [--port N]   builds if needed, starts python -m http.server, prints the base URL
#   lab/apt_repo/serve.sh stop | status
# State: lab/.state/apt_repo/{pid,port,http.log}. stop only signals the pid it started (if it is still http.server).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${LAB_APT_REPO_STATE:-$ROOT/lab/.state/apt_repo}
PY=${LAB_APT_REPO_PYTHON:-python3}
mkdir -p "$STATE"
running() { [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null && grep -q http.server "/proc/$(cat "$STATE/pid")/cmdline" 2>/dev/null; }
case "${1:-}" in
  start)
    PORT=0; [ "${2:-}" = --port ] && PORT=$3
    DIR=$(bash "$ROOT/lab/apt_repo/build.sh")
    if running; then echo "http://127.0.0.1:$(cat "$STATE/port")"; exit 0; fi
    # a port below the kernel's ephemeral range, as the lab's daemons take theirs (lab/kube/real.py free_port)
    if [ "$PORT" = 0 ]; then PORT=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import real; print(real.free_port())' "$ROOT/lab/kube"); fi
    setsid "$PY" -m http.server --bind 127.0.0.1 --directory "$DIR" "$PORT" > "$STATE/http.log" 2>&1 < /dev/null &
    echo $! > "$STATE/pid"; echo "$PORT" > "$STATE/port"
    for _ in $(seq 50); do
      "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/libnvidia-container/gpgkey', timeout=1)" 2>/dev/null && break
      sleep 0.1
    done
    echo "[apt_repo] serving $DIR on http://127.0.0.1:$PORT (pid $(cat "$STATE/pid"))" >&2
    echo "http://127.0.0.1:$PORT" ;;
  stop)
    if running; then kill "$(cat "$STATE/pid")"; echo "[apt_repo] stopped" >&2; fi
    rm -f "$STATE/pid" "$STATE/port" ;;
  status)
    if running; then echo "http://127.0.0.1:$(cat "$STATE/port")"; else echo "not running" >&2; exit 1; fi ;;
  *) echo "usage: $0 start [--port N] | stop | status" >&2; exit 2 ;;
esac
