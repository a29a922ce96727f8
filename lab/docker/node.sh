#!/usr/bin/env bash
# Lab "node" containers: Debian 12 + systemd as PID 1, standing in for a GPU machine.
#
#   node.sh up NAME [--hostname H] [--network host|none] [--wait SECONDS] [-- EXTRA DOCKER RUN ARGS...]
#   node.sh down NAME            stop (SIGRTMIN+3, systemd shuts down cleanly) and remove; no-op if absent
#   node.sh down-all             remove every container labelled gpuops.lab=node
#   node.sh exec NAME CMD...     run a command inside (docker exec, -t when stdin is a terminal)
#   node.sh wait NAME [SECONDS]  wait until systemd reports running/degraded
#   node.sh list                 list lab node containers
#
# `up` is idempotent: a running container is only waited for, a stopped one is started again.
# It builds/imports the image first if needed (node-image.sh) and needs a daemon (engine.sh up).
#
# Networking: --network host (default) shares the host's network namespace, because apt inside a node
# must reach the Debian mirror and the lab's daemon runs with --bridge=none (no docker bridge, no NAT).
# Nodes that need no network at all can use --network none (fully isolated; apt will not work there).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
IMAGE=${LAB_NODE_IMAGE:-gpuops-lab/node:bookworm}

log() { printf '[node] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# The flags that let systemd run as PID 1 without --privileged (which fails on these VMs: the
# daemon lacks CAP_SYS_RESOURCE). See README.md for why each one is needed.
SYSTEMD_FLAGS=(
  --cap-add SYS_ADMIN
  --security-opt seccomp=unconfined
  --security-opt apparmor=unconfined
  --tmpfs /run --tmpfs /run/lock
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw
  --cgroupns=host
  --stop-signal SIGRTMIN+3
  # NVIDIA's character devices (major 195: /dev/nvidiactl, /dev/nvidia0..). Without this rule the
  # device cgroup answers EPERM and Debian's real libnvidia-ml reports NVML_ERROR_UNKNOWN; with it,
  # opening a device node that has no driver behind it gives ENXIO, exactly as on a machine without
  # the kernel module, and NVML says DRIVER_NOT_LOADED. No real device is exposed (there is none).
  --device-cgroup-rule 'c 195:* rmw'
)

# The lab's bytecode cache for AnsiballZ payloads (lab/pyc_cache/gpuops_lab_pyc_cache.py): Debian's python3 in the
# node loads it through a .pth file in its site directory and keeps the compiled module_utils in a host directory
# that every node container shares. GPUOPS_LAB_PYC_CACHE=off leaves it out (the node is then the bare image).
PYC_CACHE_ARGS=()
pyc_cache_args() {
  local hook="$HERE/../pyc_cache" dir=${GPUOPS_LAB_PYC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuops/pyc}-node
  [ "${GPUOPS_LAB_PYC_CACHE:-}" != off ] || return 0
  hook=$(cd "$hook" && pwd)
  mkdir -p "$dir"
  local site=/usr/local/lib/python3.11/dist-packages
  PYC_CACHE_ARGS=(-v "$hook/gpuops_lab_pyc_cache.py:$site/gpuops_lab_pyc_cache.py:ro"
                  -v "$hook/gpuops_lab_pyc_cache.pth:$site/gpuops_lab_pyc_cache.pth:ro"
                  -v "$dir:/var/cache/gpuops-lab-pyc" -e GPUOPS_LAB_PYC_CACHE=/var/cache/gpuops-lab-pyc)
}

state_of() { docker inspect -f '{{.State.Status}}' "$1" 2>/dev/null || true; }

wait_systemd() {  # wait_systemd NAME SECONDS
  local name=$1 timeout=$2 deadline=$((SECONDS + $2)) st=""
  while ((SECONDS < deadline)); do
    [ "$(state_of "$name")" = running ] || { docker logs --tail 30 "$name" >&2 || true; die "$name is not running (state: $(state_of "$name"))"; }
    # before PID 1 has set up /run/systemd/system this prints "offline" or fails; keep polling
    st=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
    case "$st" in
      running) log "$name: systemd $st"; return 0 ;;
      degraded)
        log "$name: systemd degraded; failed units:"
        docker exec "$name" systemctl --failed --no-legend --plain >&2 || true
        return 0 ;;
      maintenance|stopping) die "$name: systemd is $st" ;;
    esac
    sleep 0.5
  done
  docker exec "$name" systemctl list-jobs --no-legend >&2 || true
  die "$name: systemd not up after ${timeout}s (last state: ${st:-none})"
}

cmd_up() {
  local name=${1:-}; [ -n "$name" ] || usage; shift
  local hostname=$name network=host wait=90 extra=()
  while (($#)); do
    case "$1" in
      --hostname) hostname=$2; shift 2 ;;
      --network) network=$2; shift 2 ;;
      --wait) wait=$2; shift 2 ;;
      --) shift; extra=("$@"); break ;;
      *) die "unknown option $1" ;;
    esac
  done
  case "$network" in host|none) ;; *) die "--network must be host or none (the lab daemon has no bridge)" ;; esac
  docker info >/dev/null 2>&1 || die "no Docker daemon answers (run lab/docker/engine.sh up)"
  "$HERE/node-image.sh"
  case "$(state_of "$name")" in
    running) ;;
    "")
      log "starting $name (hostname $hostname, network $network)"
      local hostsarg=()
      # host networking copies the host's /etc/hosts; make the node's own name resolve (sudo wants it)
      [ "$network" = host ] && hostsarg=(--add-host "$hostname:127.0.1.1")
      pyc_cache_args
      docker run -d --name "$name" --hostname "$hostname" --network "$network" "${hostsarg[@]}" \
        --label gpuops.lab=node --label "gpuops.lab.node=$name" \
        "${SYSTEMD_FLAGS[@]}" "${PYC_CACHE_ARGS[@]}" "${extra[@]}" "$IMAGE" /sbin/init >/dev/null ;;
    created|exited)
      log "starting existing container $name"
      docker start "$name" >/dev/null ;;
    *) die "$name is in state $(state_of "$name"); remove it with: $0 down $name" ;;
  esac
  wait_systemd "$name" "$wait"
}

cmd_down() {
  local name=${1:-}; [ -n "$name" ] || usage
  [ -n "$(state_of "$name")" ] || { log "$name: absent"; return 0; }
  [ "$(docker inspect -f '{{index .Config.Labels "gpuops.lab"}}' "$name")" = node ] \
    || die "$name is not a lab node container (no label gpuops.lab=node); not touching it"
  log "stopping $name"
  docker stop -t 30 "$name" >/dev/null
  docker rm -f "$name" >/dev/null
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  down-all)
    for n in $(docker ps -a --filter label=gpuops.lab=node --format '{{.Names}}'); do cmd_down "$n"; done ;;
  wait) shift; [ -n "${1:-}" ] || usage; wait_systemd "$1" "${2:-90}" ;;
  exec)
    shift; name=${1:-}; if [ -z "$name" ] || [ $# -lt 2 ]; then usage; fi; shift
    tty=(-i); [ -t 0 ] && [ -t 1 ] && tty=(-it)
    exec docker exec "${tty[@]}" "$name" "$@" ;;
  list) docker ps -a --filter label=gpuops.lab=node --format 'table {{.Names}}\t{{.Status}}\t{{.Image}}' ;;
  *) usage ;;
esac
