#!/usr/bin/env bash
# Install the NVML simulator into a running docker container ("node"):
#   install.sh CONTAINER INVENTORY_NAME_OR_PATH
# INVENTORY is a file path or the name of a shipped inventory (t4, hgx-a100-80gb, ... = inventories/NAME.json).
# Result inside the container:
#   /usr/local/lib/nvml-sim/libnvidia-ml.so.1 (+ libnvidia-ml.so symlink), /etc/ld.so.conf.d/00-nvml-sim.conf,
#   ldconfig run, /etc/nvml-sim/inventory.json, /usr/local/bin/nvml-sim-ctl, /var/lib/nvml-sim/ (state dir).
# Any process then finds simulated GPUs via CDLL("libnvidia-ml.so.1") without environment variables.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 2 ] || { echo "usage: $0 CONTAINER INVENTORY_NAME_OR_PATH" >&2; exit 2; }
CTR=$1 INV=$2
if [ ! -f "$INV" ]; then
  [ -f "$HERE/inventories/$INV.json" ] || { echo "install.sh: no inventory '$INV' (a file, or a name from $HERE/inventories/*.json)" >&2; exit 2; }
  INV="$HERE/inventories/$INV.json"
fi
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$INV" || { echo "install.sh: $INV is not valid JSON" >&2; exit 2; }
"$HERE/build.sh"
LIB="$HERE/../.build/nvml_sim/libnvidia-ml.so.1"
DOCKER=${DOCKER:-docker}
$DOCKER exec "$CTR" mkdir -p /usr/local/lib/nvml-sim /etc/nvml-sim /etc/ld.so.conf.d /var/lib/nvml-sim /usr/local/bin
$DOCKER cp "$LIB" "$CTR:/usr/local/lib/nvml-sim/libnvidia-ml.so.1"
$DOCKER cp "$INV" "$CTR:/etc/nvml-sim/inventory.json"
$DOCKER cp "$HERE/nvml-sim-ctl" "$CTR:/usr/local/bin/nvml-sim-ctl"
$DOCKER exec "$CTR" sh -ec '
  chmod 0755 /usr/local/lib/nvml-sim/libnvidia-ml.so.1 /usr/local/bin/nvml-sim-ctl
  chmod 0644 /etc/nvml-sim/inventory.json
  ln -sfn libnvidia-ml.so.1 /usr/local/lib/nvml-sim/libnvidia-ml.so
  echo /usr/local/lib/nvml-sim > /etc/ld.so.conf.d/00-nvml-sim.conf
  rm -f /var/lib/nvml-sim/state.json /var/lib/nvml-sim/state.json.lock
  ldconfig
  ldconfig -p | grep -q "libnvidia-ml.so.1 .*/usr/local/lib/nvml-sim/" || { echo "install.sh: ldconfig did not pick up the simulator" >&2; exit 1; }'
echo "install.sh: NVML simulator installed in $CTR with $(basename "$INV")" >&2
