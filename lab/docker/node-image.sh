#!/usr/bin/env bash
# Build the lab's "node" image (gpuops-lab/node:bookworm): a Debian 12 root filesystem made by
# debootstrap that boots systemd inside a container and stands in for a GPU machine.
#
#   node-image.sh            ensure the image exists for the current recipe (no-op when it does)
#   node-image.sh --force    rebuild the rootfs from scratch and re-import it
#   node-image.sh --recipe   print the recipe hash and exit
#
# The recipe hash is the sha256 of this script plus the Debian mirror URLs it resolved. It is stored as
# the image label gpuops.lab.recipe and as the extra tag gpuops-lab/node:bookworm-<hash12>; the image is
# rebuilt only when the hash changes. The rootfs tarball is cached in lab/.build/docker/ so that after
# `docker system prune -a` the image comes back with a plain `docker import` (seconds, no network).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD="$ROOT/lab/.build/docker"
IMAGE_REPO=gpuops-lab/node
SUITE=bookworm
IMAGE="$IMAGE_REPO:$SUITE"
# Packages on top of debootstrap's minbase. systemd-sysv gives /sbin/init; python3(-apt) make it an
# Ansible target (the apt module needs python3-apt); sudo for become; kmod/pciutils because the roles
# probe modules and PCI devices; the rest is what a real node would have.
PACKAGES=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,ca-certificates,kmod,pciutils,procps,iproute2,gnupg,curl,less
# Units that cannot work (or only make noise) in a container sharing the host's kernel.
MASK_UNITS=(
  getty.target console-getty.service getty@tty1.service        # no consoles
  systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket
  systemd-udev-trigger.service systemd-udev-settle.service     # /dev is docker's, no uevents
  systemd-remount-fs.service                                   # / is an overlay set up by docker
  systemd-modules-load.service                                 # no kernel modules can load
  sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount sys-fs-fuse-connections.mount
  dev-hugepages.mount
  apt-daily.timer apt-daily-upgrade.timer fstrim.timer         # would grab the apt lock mid-test
  e2scrub_all.timer e2scrub_reap.service
)

log() { printf '[node-image] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- Debian mirror: the one the host itself uses -------------------------------------------------------
# Prints "MIRROR SECURITY_MIRROR" from deb822 /etc/apt/sources.list.d/*.sources or one-line sources.list.
host_mirrors() {
  local mirror="" security=""
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: paragraphs separated by blank lines; take URIs of paragraphs whose Types include deb
    while IFS=$'\t' read -r uris suites; do
      case " $suites " in
        *-security*) [ -n "$security" ] || security=${uris%% *} ;;
        *) [ -n "$mirror" ] || mirror=${uris%% *} ;;
      esac
    done < <(awk 'BEGIN{RS=""; FS="\n"} {
        t=""; u=""; s="";
        for (i=1;i<=NF;i++) {
          if ($i ~ /^Types:/) t=$i; else if ($i ~ /^URIs:/) u=$i; else if ($i ~ /^Suites:/) s=$i; else if ($i ~ /^Enabled: *no/) t="";
        }
        if (t ~ /(^|[ :])deb( |$)/ && u != "") { sub(/^URIs: */,"",u); sub(/^Suites: */,"",s); print u "\t" s }
      }' "$f")
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    while read -r type rest; do
      [ "$type" = deb ] || continue
      # shellcheck disable=SC2086  # split the rest of the line into words on purpose
      set -- $rest
      [ "${1#[}" != "$1" ] && shift   # skip [options]
      case "$2" in
        *-security*) [ -n "$security" ] || security=$1 ;;
        *) [ -n "$mirror" ] || mirror=$1 ;;
      esac
    done < "$f"
  done
  mirror=${LAB_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}
  security=${LAB_DEBIAN_SECURITY_MIRROR:-${security:-${mirror%/debian}/debian-security}}
  echo "${mirror%/} ${security%/}"
}

read -r MIRROR SECURITY_MIRROR < <(host_mirrors)
RECIPE=$( { cat "${BASH_SOURCE[0]}"; echo "$MIRROR $SECURITY_MIRROR"; } | sha256sum | cut -c1-64)
SHORT=${RECIPE:0:12}
TARBALL="$BUILD/node-$SUITE-$SHORT.tar"

image_current() {
  [ "$(docker image inspect -f '{{index .Config.Labels "gpuops.lab.recipe"}}' "$IMAGE" 2>/dev/null)" = "$RECIPE" ]
}

cleanup_rootfs() {  # unmount anything left mounted inside, then delete without crossing filesystems
  local dir=$1
  [ -d "$dir" ] || return 0
  awk -v d="$dir" '$2 ~ "^"d {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$dir"
}

build_rootfs() {
  command -v debootstrap >/dev/null || die "debootstrap missing (apt-get install debootstrap)"
  [ "$(id -u)" = 0 ] || die "building the rootfs needs root (debootstrap, chroot)"
  local rootfs="$BUILD/rootfs-$SHORT"
  cleanup_rootfs "$rootfs"
  # shellcheck disable=SC2064  # expand $rootfs now: it is local to this function
  trap "cleanup_rootfs '$rootfs'" EXIT
  log "debootstrap $SUITE (minbase) from $MIRROR into $rootfs"
  debootstrap --variant=minbase --include="$PACKAGES" --components=main "$SUITE" "$rootfs" "$MIRROR" \
    > "$BUILD/debootstrap.log" 2>&1 || { tail -n 40 "$BUILD/debootstrap.log" >&2; die "debootstrap failed; see $BUILD/debootstrap.log"; }

  log "configuring apt sources, units and identity"
  rm -f "$rootfs/etc/apt/sources.list"
  cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # No recommends, no interactive prompts: keeps role runs in the lab fast and deterministic.
  cat > "$rootfs/etc/apt/apt.conf.d/90gpuops-lab" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
EOF
  local u
  for u in "${MASK_UNITS[@]}"; do ln -sfn /dev/null "$rootfs/etc/systemd/system/$u"; done
  # A fresh machine-id per container (systemd writes one at first boot when the file is empty).
  : > "$rootfs/etc/machine-id"; rm -f "$rootfs/var/lib/dbus/machine-id"
  echo 'LANG=C.UTF-8' > "$rootfs/etc/default/locale"
  echo node > "$rootfs/etc/hostname"
  # journald: keep logs in memory, small, no console forwarding.
  mkdir -p "$rootfs/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\nForwardToConsole=no\n' \
    > "$rootfs/etc/systemd/journald.conf.d/10-gpuops-lab.conf"

  log "apt-get update inside the rootfs (lists stay in the image)"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf" 2>/dev/null || true
  chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    sh -c 'apt-get update -qq && apt-get clean' || die "apt-get update in the rootfs failed"
  rm -f "$rootfs/etc/resolv.conf"  # docker bind-mounts its own
  rm -rf "$rootfs"/var/log/*.log "$rootfs/var/log/apt"/* "$rootfs"/tmp/* "$rootfs"/var/tmp/*
  # Remove any mounts debootstrap might have left (proc, sys) before archiving.
  awk -v d="$rootfs" '$2 ~ "^"d {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done

  log "archiving rootfs to $TARBALL"
  rm -f "$BUILD"/node-"$SUITE"-*.tar   # keep only the current recipe's tarball
  tar --numeric-owner --xattrs --acls -C "$rootfs" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
  cleanup_rootfs "$rootfs"
  trap - EXIT
}

import_image() {
  # `docker import --change` rejects STOPSIGNAL; node.sh passes --stop-signal SIGRTMIN+3 instead.
  log "docker import $TARBALL as $IMAGE"
  docker import \
    --change 'CMD ["/sbin/init"]' \
    --change 'ENV container=docker LANG=C.UTF-8' \
    --change "LABEL gpuops.lab.recipe=$RECIPE gpuops.lab.suite=$SUITE gpuops.lab.mirror=$MIRROR" \
    "$TARBALL" "$IMAGE" >/dev/null
  docker tag "$IMAGE" "$IMAGE_REPO:$SUITE-$SHORT"
}

main() {
  case "${1:-}" in
    --recipe) echo "$RECIPE"; return 0 ;;
    --force|"") ;;
    *) echo "usage: $0 [--force|--recipe]" >&2; return 2 ;;
  esac
  docker info >/dev/null 2>&1 || die "no Docker daemon answers (run lab/docker/engine.sh up)"
  mkdir -p "$BUILD"
  # Serialise builds: several molecule scenarios may ask for the image at the same time.
  exec 9>"$BUILD/node-image.lock"
  flock 9
  if [ "${1:-}" != --force ] && image_current; then
    log "$IMAGE is current (recipe $SHORT)"
    return 0
  fi
  local t0=$SECONDS
  if [ "${1:-}" = --force ] || [ ! -s "$TARBALL" ]; then
    build_rootfs
    log "rootfs built in $((SECONDS - t0))s"
  else
    log "re-importing cached rootfs $TARBALL"
  fi
  import_image
  log "$IMAGE ready (recipe $SHORT) in $((SECONDS - t0))s"
}
main "$@"
