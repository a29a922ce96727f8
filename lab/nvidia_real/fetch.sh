#!/usr/bin/env bash
# Fetch Debian's real NVIDIA user-space pieces (non-free: libnvidia-ml1, nvidia-smi, nvidia-cuda-mps) and
# unpack them under lab/.build/nvidia_real/root without installing anything on this machine. The real
# libnvidia-ml gives the true "driver not loaded" behaviour (there is no kernel module here), which the probe
# and the doctor must recognise; nvidia-smi and nvidia-cuda-mps (nvidia-cuda-mps-control, -server) go into the
# lab nodes' driver root (lab/node/node.py nvidia_toolkit), as a real driver root has them. The host keeps its own apt sources (Debian main only): a private apt
# configuration under lab/.build/nvidia_real/apt adds non-free for this download only.
#   fetch.sh            -> prints the directory that holds libnvidia-ml.so.1
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT/lab/.build/nvidia_real"
PKGS=(libnvidia-ml1 nvidia-smi nvidia-cuda-mps)
LIBDIR="$OUT/root/usr/lib/x86_64-linux-gnu/nvidia/current"
# One fetch at a time (parallel test workers call this script concurrently); the others wait, then find it done.
mkdir -p "$OUT"
exec 9>"$OUT/.fetch.lock"
flock 9
if [ -e "$LIBDIR/libnvidia-ml.so.1" ] && [ -e "$OUT/root/usr/lib/nvidia/current/nvidia-smi" ] \
   && [ -e "$OUT/root/usr/bin/nvidia-cuda-mps-control" ] && [ -e "$OUT/root/usr/sbin/nvidia-cuda-mps-server" ]; then
  echo "$LIBDIR"; exit 0
fi
mirror=$(sed -n 's/^URIs:[[:space:]]*\(\S*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '/^deb / && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
apt_dir="$OUT/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$OUT/debs"
echo "deb $mirror bookworm main contrib non-free non-free-firmware" > "$apt_dir/sources.list"
APT=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" -o Debug::NoLocking=1)
apt-get "${APT[@]}" update -qq >&2
cd "$OUT/debs"
apt-get "${APT[@]}" download "${PKGS[@]}" >&2
for deb in "$OUT"/debs/*.deb; do dpkg-deb -x "$deb" "$OUT/root"; done
for f in "$LIBDIR/libnvidia-ml.so.1" "$OUT/root/usr/lib/nvidia/current/nvidia-smi" "$OUT/root/usr/bin/nvidia-cuda-mps-control" \
         "$OUT/root/usr/sbin/nvidia-cuda-mps-server"; do
  [ -e "$f" ] || { echo "$f not found after unpacking" >&2; exit 1; }
done
echo "$LIBDIR"
