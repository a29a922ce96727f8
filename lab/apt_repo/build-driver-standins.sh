#!/usr/bin/env bash
# Build a small signed flat apt repository of LAB STAND-IN packages with the names and dependency shapes of
# Ubuntu's NVIDIA server driver packages (nvidia-graphics-drivers-<branch>-server, linux-restricted-modules), for
# lab/tests/integration/test_nvidia_driver_ubuntu_standin.py. NOT NVIDIA OR CANONICAL SOFTWARE: the packages ship only text
# files; no driver, no library, no kernel module.
#   lab/apt_repo/build-driver-standins.sh OUTDIR [KREL]   prints OUTDIR; OUTDIR/{Packages,Release,InRelease,key.gpg,*.deb}
#   KREL: the node's running kernel release (`uname -r` there; default this machine's, which a container shares)
# Shapes (580 = 580.95.05-0ubuntu0.24.04.1, the "current" branch of the stand-in archive):
#   nvidia-headless-580-server[-open]      Depends: nvidia-dkms-580-server[-open], nvidia-headless-no-dkms-580-server[-open]
#   nvidia-headless-no-dkms-580-server[-open]  Depends: libnvidia-compute-580-server, nvidia-kernel-common-580-server
#   nvidia-dkms-580-server[-open]          Depends: nvidia-kernel-common-580-server
#   nvidia-utils-580-server, nvidia-compute-utils-580-server (ships nvidia-persistenced.service with
#     --no-persistence-mode, as Ubuntu's does), libnvidia-compute-580-server, nvidia-kernel-common-580-server
#   linux-modules-nvidia-580-server[-open]-<KREL>, linux-objects-nvidia-580-server-<KREL> (proprietary) and
#     linux-signatures-nvidia-<KREL> (version of the kernel, 6.8.0-45.45+1: Canonical's signed precompiled modules,
#     named after `uname -r` of the kernel they are built for, as NVIDIA's precompiled driver container installs
#     them)  the modules Depend: nvidia-kernel-common-580-server
#   Branch changes (issue 38): the server packages of 570 (570.195.03-0ubuntu0.24.04.1) and an older 580
#     (580.82.07-0ubuntu0.24.04.1) in the same shapes (no precompiled modules), and every branch's packages
#     Provide, Conflict with and Replace the virtual names that all branches share, as Ubuntu's debian/control
#     writes them (canonical/nvidia-graphics-drivers, debian/control, 515-server @003cef0f): nvidia-dkms-kernel,
#     nvidia-utils + nvidia-smi, libnvidia-compute, nvidia-compute-utils + nvidia-persistenced, nvidia-headless,
#     nvidia-kernel-common; so apt removes one branch's packages when it installs another's.
#   TRANSITIONAL: nvidia-headless-535-server, nvidia-dkms-535-server, nvidia-utils-535-server,
#     nvidia-compute-utils-535-server, libnvidia-compute-535-server at 580.95.05-0ubuntu0.24.04.1, each depending
#     on its 580 counterpart (what Ubuntu 24.04 did to the 535 server branch).
set -euo pipefail
OUT=${1:?usage: build-driver-standins.sh OUTDIR [KREL]}
KREL=${2:-$(uname -r)}
for t in dpkg-deb apt-ftparchive gpg; do command -v "$t" >/dev/null || { echo "ERROR: $t missing" >&2; exit 2; }; done
rm -rf "$OUT"; mkdir -p "$OUT/pkg" "$OUT/gnupg"; chmod 700 "$OUT/gnupg"
ARCH=amd64
DRV=580.95.05-0ubuntu0.24.04.1
KMOD=6.8.0-45.45+1

mkpkg() {  # name version depends [unit]; VIRT: virtual names the package Provides, Conflicts with and Replaces
  local name=$1 V=$2 deps=$3 d=$OUT/pkg/$1_$2
  mkdir -p "$d/DEBIAN" "$d/usr/share/doc/$name"
  cat > "$d/DEBIAN/control" <<CTL
Package: $name
Version: $V
Architecture: $ARCH
Maintainer: gpuops.k8s_gpu lab <lab@gpuops.invalid>
Section: restricted/libs
Priority: optional
Depends: $deps
Description: LAB STAND-IN for Ubuntu's $name - NOT NVIDIA OR CANONICAL SOFTWARE
 Built by gpuops.k8s_gpu lab/apt_repo/build-driver-standins.sh: same name and
 dependency shape as Ubuntu's package, ships only this notice.
CTL
  [ -n "$deps" ] || sed -i '/^Depends: *$/d' "$d/DEBIAN/control"
  if [ -n "${VIRT:-}" ]; then
    printf 'Provides: %s\nConflicts: %s\nReplaces: %s\n' "$VIRT" "$VIRT" "$VIRT" >> "$d/DEBIAN/control"
  fi
  printf 'LAB STAND-IN package (gpuops.k8s_gpu). Not NVIDIA or Canonical software.\n' \
    > "$d/usr/share/doc/$name/README.lab-stand-in"
  if [ "${4:-}" = unit ]; then
    mkdir -p "$d/lib/systemd/system"
    cat > "$d/lib/systemd/system/nvidia-persistenced.service" <<'UNIT'
# LAB STAND-IN of Ubuntu's unit shape (gpuops.k8s_gpu lab)
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
UNIT
  fi
  dpkg-deb --root-owner-group --build "$d" "$OUT/${name}_${V}_${ARCH}.deb" >/dev/null
}

server_branch() {  # branch version: the server packages of one driver version
  local B=$1 V=$2 F
  VIRT=nvidia-kernel-common mkpkg nvidia-kernel-common-$B-server "$V" ""
  VIRT=libnvidia-compute mkpkg libnvidia-compute-$B-server "$V" ""
  VIRT="nvidia-utils, nvidia-smi" mkpkg nvidia-utils-$B-server "$V" "libnvidia-compute-$B-server (= $V)"
  VIRT="nvidia-compute-utils, nvidia-persistenced" \
    mkpkg nvidia-compute-utils-$B-server "$V" "libnvidia-compute-$B-server (= $V)" unit
  for F in "" -open; do
    VIRT=nvidia-dkms-kernel mkpkg nvidia-dkms-$B-server$F "$V" "nvidia-kernel-common-$B-server (= $V)"
    mkpkg nvidia-headless-no-dkms-$B-server$F "$V" "libnvidia-compute-$B-server (= $V), nvidia-kernel-common-$B-server (= $V)"
    VIRT=nvidia-headless \
      mkpkg nvidia-headless-$B-server$F "$V" "nvidia-dkms-$B-server$F (= $V), nvidia-headless-no-dkms-$B-server$F (= $V)"
  done
}
B=580
server_branch $B "$DRV"
server_branch 580 580.82.07-0ubuntu0.24.04.1
server_branch 570 570.195.03-0ubuntu0.24.04.1
for F in "" -open; do
  mkpkg linux-modules-nvidia-$B-server$F-$KREL "$KMOD" "nvidia-kernel-common-$B-server (>= 580.95.05)"
done
mkpkg linux-objects-nvidia-$B-server-$KREL "$KMOD" ""
mkpkg linux-signatures-nvidia-$KREL "$KMOD" ""
# Ubuntu 24.04: the 535 server packages became transitional to another branch
for P in nvidia-headless nvidia-dkms nvidia-utils nvidia-compute-utils libnvidia-compute; do
  mkpkg $P-535-server "$DRV" "$P-$B-server (= $DRV)"
done

export GNUPGHOME=$OUT/gnupg
gpg --batch --quiet --passphrase '' --quick-gen-key 'gpuops lab driver stand-ins (THROWAWAY TEST KEY) <lab@gpuops.invalid>' ed25519 sign never 2>/dev/null
gpg --batch --export > "$OUT/key.gpg"
( cd "$OUT"
  apt-ftparchive packages . > Packages
  apt-ftparchive -o APT::FTPArchive::Release::Origin="gpuops-lab" \
    -o APT::FTPArchive::Release::Label="gpuops lab stand-in for Ubuntu's NVIDIA server driver packages" release . > Release.tmp
  mv Release.tmp Release
  gpg --batch --yes --clearsign -o InRelease Release )
rm -rf "$OUT/pkg" "$OUT/gnupg"
echo "$OUT"
