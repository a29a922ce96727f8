#!/usr/bin/env bash
# Build the lab's local apt repository that stands in for NVIDIA's libnvidia-container repository.
#   lab/apt_repo/build.sh [--force]      prints the repository root (a directory served by serve.sh)
# Layout, the same as NVIDIA's (and as an air-gapped mirror of it):
#   <root>/libnvidia-container/gpgkey                                  ASCII-armoured signing key
#   <root>/libnvidia-container/stable/deb/amd64/{Packages,Packages.gz,Release,Release.gpg,InRelease,*.deb}
# The packages are LAB STAND-INS, not NVIDIA software, with the names and the dependency chain of NVIDIA's four
# (container-toolkit arch-overview):
#   nvidia-container-toolkit (V)   Depends: nvidia-container-toolkit-base (= V), libnvidia-container-tools (= V),
#                                           libnvidia-container-tools (<< 2.0.0)   (toolkit >= 1.18: "="; before: ">=")
#   libnvidia-container-tools (V)  Depends: libnvidia-container1 (>= V)
# nvidia-container-toolkit-base ships /usr/bin/nvidia-container-runtime as a shell wrapper that logs its call and
# execs runc, an /usr/bin/nvidia-ctk stub and, as the toolkit ships them from 1.18.0 on (in /lib/systemd/system from
# 1.20.0, /etc/systemd/system before), stand-in nvidia-cdi-refresh.path/.service units with upstream's names, triggers,
# output path and [Install] section; libnvidia-container-tools an nvidia-container-cli stub. Every stub prints its
# package version. Each package exists at two versions, VERSION and the newer NEWER, as NVIDIA's
# repository holds every release: pinning only some packages lets the libraries float to NEWER, which the tests see.
# Release is signed with a throwaway GPG key generated here (no passphrase), so signed-by is exercised.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${LAB_APT_REPO_DIR:-$ROOT/lab/.build/apt_repo}
VERSION=1.20.0-1~gpuopslab1
NEWER=1.20.1-1~gpuopslab1
ARCH=amd64
RECIPE=$(sha256sum "$0" | cut -c1-16)
# One build at a time: lab tests, molecule, the demo and the benches start servers concurrently, and a build
# removes the tree first. The lock lives beside the tree (a build removes the tree itself).
mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
flock -w 600 9 || { echo "ERROR: another build held $OUT.lock for 600s" >&2; exit 1; }
[ "${1:-}" = --force ] && rm -rf "$OUT"
if [ -f "$OUT/.recipe" ] && [ "$(cat "$OUT/.recipe")" = "$RECIPE" ]; then echo "$OUT/repo"; exit 0; fi
for t in dpkg-deb apt-ftparchive gpg; do
  command -v "$t" >/dev/null || { echo "ERROR: $t missing (apt-get install $(tr '\n' ' ' < "$(dirname "$0")/apt-packages.txt" | sed 's/#[^ ]*//'))" >&2; exit 2; }
done
rm -rf "$OUT"; mkdir -p "$OUT/pkg" "$OUT/gnupg"; chmod 700 "$OUT/gnupg"
REPO=$OUT/repo/libnvidia-container
DIST=$REPO/stable/deb/$ARCH
mkdir -p "$DIST"

mkpkg() {  # version, name, description, depends, files-function
  local V=$1 name=$2 desc=$3 deps=$4 d=$OUT/pkg/$2-$1
  mkdir -p "$d/DEBIAN" "$d/usr/bin" "$d/usr/share/doc/$name"
  [ "$name" != nvidia-container-toolkit-base ] || mkdir -p "$d/lib/systemd/system" "$d/etc/nvidia-container-toolkit"
  "$5" "$d" "$V"
  cat > "$d/DEBIAN/control" <<CTL
Package: $name
Version: $V
Architecture: $ARCH
Maintainer: gpuops.k8s_gpu lab <lab@gpuops.invalid>
Section: utils
Priority: optional
Depends: $deps
Description: LAB STAND-IN for NVIDIA's $name - NOT NVIDIA SOFTWARE
 $desc
 Built by gpuops.k8s_gpu lab/apt_repo/build.sh for tests without NVIDIA's
 repository. It does not inject GPUs into containers.
CTL
  [ -n "$deps" ] || sed -i '/^Depends: *$/d' "$d/DEBIAN/control"
  printf 'LAB STAND-IN package built by gpuops.k8s_gpu lab/apt_repo/build.sh. Not NVIDIA software.\n' \
    > "$d/usr/share/doc/$name/README.lab-stand-in"
  dpkg-deb --root-owner-group --build "$d" "$DIST/${name}_${V}_${ARCH}.deb" >/dev/null
}
base_files() {
  cat > "$1/usr/bin/nvidia-container-runtime" <<'SH'
#!/bin/sh
# LAB STAND-IN for nvidia-container-runtime (gpuops.k8s_gpu lab): records the call, then runs runc.
echo "$(date -u +%FT%TZ) nvidia-container-runtime (lab stand-in) $*" >> /var/log/nvidia-container-runtime-standin.log 2>/dev/null || true
exec runc "$@"
SH
  cat > "$1/usr/bin/nvidia-ctk" <<SH
#!/bin/sh
# LAB STAND-IN for nvidia-ctk (gpuops.k8s_gpu lab). \`cdi generate --output=F\` writes a small CDI spec to F (creating
# its folder) as the real command does; its devices are made up (the lab has no GPU or driver).
if [ "\$1" = cdi ] && [ "\$2" = generate ]; then
  out=\${NVIDIA_CTK_CDI_OUTPUT_FILE_PATH:-/var/run/cdi/nvidia.yaml}
  shift 2
  while [ \$# -gt 0 ]; do
    case "\$1" in --output=*) out=\${1#--output=} ;; --output) shift; out=\$1 ;; esac
    shift
  done
  mkdir -p "\$(dirname "\$out")"
  printf '%s\\n' '---' 'cdiVersion: 0.5.0' 'kind: nvidia.com/gpu' '# gpuops lab stand-in spec, not NVIDIA software' \\
    'devices:' '- name: "0"' '  containerEdits:' '    deviceNodes:' '    - path: /dev/null' \\
    'containerEdits:' '  env:' '  - NVIDIA_VISIBLE_DEVICES=void' > "\$out"
  exit 0
fi
echo "NVIDIA Container Toolkit CLI version ${2%%-*} (gpuops lab stand-in $2, not NVIDIA software)"
SH
  chmod 0755 "$1/usr/bin/nvidia-container-runtime" "$1/usr/bin/nvidia-ctk"
  # Stand-ins for the toolkit's CDI refresh units (NVIDIA/nvidia-container-toolkit deployments/systemd, v1.20.0): the
  # same names, path triggers, output path, env file and [Install]; upstream's conditions on nvidia-smi and on an
  # nvidia.ko in modules.dep are left out (the lab has no driver), so the service runs the stand-in nvidia-ctk.
  cat > "$1/lib/systemd/system/nvidia-cdi-refresh.path" <<'UNIT'
# LAB STAND-IN for the NVIDIA Container Toolkit's nvidia-cdi-refresh.path (gpuops.k8s_gpu lab) - not NVIDIA software
[Unit]
Description=LAB STAND-IN: trigger CDI refresh on NVIDIA driver or toolkit install / upgrade events

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/lib/modules/%v/modules.dep.bin
PathChanged=/usr/bin/nvidia-ctk

[Install]
WantedBy=multi-user.target
UNIT
  cat > "$1/lib/systemd/system/nvidia-cdi-refresh.service" <<'UNIT'
# LAB STAND-IN for the NVIDIA Container Toolkit's nvidia-cdi-refresh.service (gpuops.k8s_gpu lab) - not NVIDIA software
[Unit]
Description=LAB STAND-IN: refresh NVIDIA CDI specification file
ConditionPathExists=/usr/bin/nvidia-ctk

[Service]
Type=oneshot
Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecStart=/usr/bin/nvidia-ctk cdi generate

[Install]
WantedBy=multi-user.target
UNIT
  printf '# LAB STAND-IN for nvidia-cdi-refresh.env: NAME=value lines override the refresh service environment.\n' \
    > "$1/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
}
toolkit_files() {
  cat > "$1/usr/bin/nvidia-container-runtime-hook" <<'SH'
#!/bin/sh
# LAB STAND-IN for nvidia-container-runtime-hook (gpuops.k8s_gpu lab): does nothing.
exit 0
SH
  chmod 0755 "$1/usr/bin/nvidia-container-runtime-hook"
}
cli_files() {
  cat > "$1/usr/bin/nvidia-container-cli" <<SH
#!/bin/sh
# LAB STAND-IN for nvidia-container-cli (gpuops.k8s_gpu lab)
echo "cli-version: ${2%%-*} (gpuops lab stand-in $2, not NVIDIA software)"
SH
  chmod 0755 "$1/usr/bin/nvidia-container-cli"
}
lib_files() {
  mkdir -p "$1/usr/share/libnvidia-container1"
  printf 'LAB STAND-IN for libnvidia-container1 %s: no library.\n' "$2" > "$1/usr/share/libnvidia-container1/VERSION"
}
for V in "$VERSION" "$NEWER"; do
  mkpkg "$V" libnvidia-container1 "Ships no library, only a version file." "" lib_files
  mkpkg "$V" libnvidia-container-tools "Ships an nvidia-container-cli stub that prints its version." \
    "libnvidia-container1 (>= $V)" cli_files
  mkpkg "$V" nvidia-container-toolkit-base "Ships nvidia-container-runtime as a wrapper that execs runc, an nvidia-ctk stub and stand-in CDI refresh units." "runc" base_files
  mkpkg "$V" nvidia-container-toolkit "Depends on the stand-in base and tools packages; ships a no-op nvidia-container-runtime-hook." \
    "nvidia-container-toolkit-base (= $V), libnvidia-container-tools (= $V), libnvidia-container-tools (<< 2.0.0)" toolkit_files
done

export GNUPGHOME=$OUT/gnupg
gpg --batch --quiet --passphrase '' --quick-gen-key 'gpuops lab apt repository (THROWAWAY TEST KEY) <lab@gpuops.invalid>' ed25519 sign never 2>/dev/null
gpg --batch --armor --export > "$REPO/gpgkey"
( cd "$DIST"
  apt-ftparchive packages . > Packages
  gzip -9nk Packages
  apt-ftparchive -o APT::FTPArchive::Release::Origin="gpuops-lab" -o APT::FTPArchive::Release::Label="gpuops lab stand-in for libnvidia-container" \
    -o APT::FTPArchive::Release::Suite=stable -o APT::FTPArchive::Release::Architectures=$ARCH release . > ../Release.tmp
  mv ../Release.tmp Release
  gpg --batch --yes --armor --detach-sign -o Release.gpg Release
  gpg --batch --yes --clearsign -o InRelease Release )
# gpg started an agent for this home directory; it would outlive the build (and the demo that asked for it)
gpgconf --kill gpg-agent 2>/dev/null || true
echo "$RECIPE" > "$OUT/.recipe"
echo "[apt_repo] built $DIST ($VERSION and $NEWER)" >&2
echo "$OUT/repo"
