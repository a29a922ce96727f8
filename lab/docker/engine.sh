#!/usr/bin/env bash
# Manage the Docker engine the lab uses.
#   engine.sh up      install docker.io (Debian) if missing; start dockerd only if no daemon answers
#   engine.sh down    stop dockerd, but only if `up` started it (pid file in lab/.state/docker/)
#   engine.sh status  print whether a daemon answers and who started it
# Environment:
#   LAB_DOCKER_STORAGE_DRIVER  force a storage driver (default: overlay2 if it works, else vfs)
#   LAB_DOCKER_WAIT            seconds to wait for the daemon (default 60)
#   LAB_DOCKER_LOCK_WAIT       seconds to wait for another `up` to finish (default 600)
#   LAB_DOCKER_STATE           state directory (default lab/.state/docker; the tooling tests use their own)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${LAB_DOCKER_STATE:-$ROOT/lab/.state/docker}
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
DRIVERFILE="$STATE/storage-driver"
WAIT=${LAB_DOCKER_WAIT:-60}
LOCK_WAIT=${LAB_DOCKER_LOCK_WAIT:-600}

log() { printf '[engine] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# A daemon that is alive but stuck must not hang the caller: every probe is bounded.
answers() { timeout 20 docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

lock_holders() {  # pids (and names) of the processes with the lock file open
  # one find over every process's descriptors (a readlink per descriptor forked ~2000 times and took 48 s on the
  # loaded 2-core machine, past the tooling test's 30 s)
  local f fd out=""
  while IFS= read -r fd; do
    f=${fd#/proc/}; f=${f%%/*}
    out+="$f($(cat "/proc/$f/comm" 2>/dev/null)) "
  done < <(find /proc/[0-9]*/fd -maxdepth 1 -lname "$1" 2>/dev/null 9>&-)
  echo "${out:-none}"
}

our_pid() {  # prints the pid of the dockerd we started, if it is still alive
  [ -f "$PIDFILE" ] || return 1
  local pid; pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # guard against pid reuse: the process must be a dockerd
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
  echo "$pid"
}

install_docker() {
  command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && return 0
  log "installing docker.io from Debian"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends docker.io >/dev/null
}

overlay_works() {  # can the kernel mount overlayfs on the filesystem holding /var/lib/docker?
  local base=/var/lib/docker-overlay-probe.$$ rc=1
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
  grep -qw overlay /proc/filesystems || return 1
  mkdir -p "$base"/{l,u,w,m}
  if mount -t overlay overlay -o "lowerdir=$base/l,upperdir=$base/u,workdir=$base/w" "$base/m" 2>/dev/null; then
    umount "$base/m"; rc=0
  fi
  rm -rf "$base"
  return $rc
}

pick_driver() {
  if [ -n "${LAB_DOCKER_STORAGE_DRIVER:-}" ]; then echo "$LAB_DOCKER_STORAGE_DRIVER"; return; fi
  if overlay_works; then echo overlay2; else log "overlayfs does not mount here; falling back to vfs (slow, disk hungry)"; echo vfs; fi
}

cmd_up() {
  mkdir -p "$STATE"
  # one `up` at a time: parallel test workers and molecule scenarios call it concurrently
  exec 9>"$STATE/up.lock"
  flock -w "$LOCK_WAIT" 9 || die "another 'engine.sh up' held $STATE/up.lock for ${LOCK_WAIT}s; holders: $(lock_holders "$STATE/up.lock")"
  install_docker
  if answers; then
    if pid=$(our_pid); then log "dockerd (pid $pid, started by us) answers"; else log "a Docker daemon we did not start answers; using it"; fi
    return 0
  fi
  if pid=$(our_pid); then
    log "our dockerd (pid $pid) is alive but does not answer yet; waiting"
  else
    [ "$(id -u)" = 0 ] || die "dockerd must be started as root"
    local driver; driver=$(pick_driver)
    log "starting dockerd --bridge=none --iptables=false --storage-driver=$driver (log: $LOG)"
    echo "$driver" > "$DRIVERFILE"
    # setsid: the daemon must survive this shell and must not get our terminal's signals.
    # 9>&-: the daemon must not inherit the lock's descriptor, or it would hold up.lock for its whole life
    # and every later `up` would wait on it (CI stop 19 timed out that way).
    setsid dockerd --bridge=none --iptables=false --ip-masq=false --storage-driver="$driver" \
      >>"$LOG" 2>&1 </dev/null 9>&- &
    echo $! > "$PIDFILE"
  fi
  local i started; started=$(cat "$PIDFILE")
  for ((i = 0; i < WAIT * 2; i++)); do
    answers && { log "dockerd answers ($(docker info --format '{{.ServerVersion}} {{.Driver}}'))"; return 0; }
    # alive is enough here: our_pid's name check fails while the new process has not yet exec'd dockerd (its
    # name is still bash or setsid), which under load made a start that was going well look like an exit
    kill -0 "$started" 2>/dev/null || { tail -n 30 "$LOG" >&2; rm -f "$PIDFILE"; die "dockerd exited; see $LOG"; }
    sleep 0.5
  done
  tail -n 30 "$LOG" >&2
  die "dockerd did not answer within ${WAIT}s; see $LOG"
}

cmd_down() {
  local pid
  if ! pid=$(our_pid); then
    rm -f "$PIDFILE"
    if answers; then log "the running Docker daemon was not started by us; leaving it alone"; else log "no dockerd of ours is running"; fi
    return 0
  fi
  log "stopping dockerd (pid $pid)"
  kill -TERM "$pid"
  local i
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; return 0; }
    sleep 0.5
  done
  die "dockerd (pid $pid) did not stop within 30s"
}

cmd_status() {
  local pid owner="not started by us"
  pid=$(our_pid) && owner="started by us, pid $pid"
  if answers; then
    echo "docker: running ($owner); $(docker info --format 'server {{.ServerVersion}}, storage {{.Driver}}, cgroup v{{.CgroupVersion}} ({{.CgroupDriver}})')"
  else
    echo "docker: not answering${pid:+ (our dockerd pid $pid is alive)}"
    return 1
  fi
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
