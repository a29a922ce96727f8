#!/usr/bin/env bash
# Start the Kubernetes API emulator in the background on a free loopback port.
#   lab/kube/start.sh [--name NAME] [--version v1.29.4] [--seed FILE] [--port N]
# Writes lab/.state/kube/<name>/{kubeconfig,pid,port,emulator.log,requests.jsonl} and prints the kubeconfig path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=default VERSION=v1.29.4 SEED="" PORT=0
while (($#)); do
  case "$1" in
    --name) NAME=$2; shift 2;;
    --version) VERSION=$2; shift 2;;
    --seed) SEED=$2; shift 2;;
    --port) PORT=$2; shift 2;;
    -h|--help) sed -n 2,4p "$0"; exit 0;;
    *) echo "start.sh: unknown argument $1" >&2; exit 2;;
  esac
done
[[ $NAME =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "start.sh: bad --name" >&2; exit 2; }
PY=${KUBE_EMULATOR_PYTHON:-$ROOT/.venv/bin/python}
STATE=${KUBE_EMULATOR_STATE_ROOT:-$ROOT/lab/.state/kube}/$NAME
mkdir -p "$STATE"
if [[ -f $STATE/pid ]] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
  echo "start.sh: emulator '$NAME' already running (pid $(cat "$STATE/pid"))" >&2; exit 1
fi
rm -f "$STATE/port" "$STATE/pid" "$STATE/kubeconfig" "$STATE/requests.jsonl"
args=(--port "$PORT" --state-dir "$STATE" --version "$VERSION")
[[ -n $SEED ]] && args+=(--seed "$(realpath "$SEED")")
nohup "$PY" "$ROOT/lab/kube/emulator.py" "${args[@]}" >"$STATE/emulator.log" 2>&1 &
PID=$!
echo "$PID" >"$STATE/pid"
for _ in $(seq 1 100); do
  if [[ -s $STATE/port ]]; then
    P=$(cat "$STATE/port")
    if "$PY" - "$P" <<'PYEOF' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=1).read()
PYEOF
  fi
  kill -0 "$PID" 2>/dev/null || { echo "start.sh: emulator died:" >&2; cat "$STATE/emulator.log" >&2; rm -f "$STATE/pid"; exit 1; }
  sleep 0.1
done
[[ -s $STATE/port ]] || { echo "start.sh: emulator not ready" >&2; kill "$PID"; rm -f "$STATE/pid"; exit 1; }
P=$(cat "$STATE/port")
cat >"$STATE/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: http://127.0.0.1:$P
contexts:
- name: $NAME
  context:
    cluster: $NAME
    user: $NAME-admin
    namespace: default
current-context: $NAME
users:
- name: $NAME-admin
  user:
    token: emulator-does-not-check-tokens
KCFG
chmod 600 "$STATE/kubeconfig"
echo "$STATE/kubeconfig"
