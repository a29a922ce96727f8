#!/usr/bin/env bash
# make demo: bring up the lab and run playbooks/site.yml against it, twice (the second run must change nothing).
#
#   demo.sh        up + site.yml + report + idempotence check
#   demo.sh clean  remove the demo's node containers
#   demo.sh down   remove them and stop the Docker daemon if the lab started it
#
# EVERYTHING HERE IS SIMULATED: the GPUs come from the lab's NVML simulator (a C libnvidia-ml.so.1),
# the "nodes" are systemd containers on this machine. To run the same playbook on real machines:
#   ansible-playbook -i inventory/example/hosts.yml playbooks/site.yml
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VENV="$ROOT/.venv/bin"
NODES=(lab-t4:t4 lab-a100:hgx-a100-80gb lab-v100:v100)
banner() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

if [ "${1:-}" = down ] || [ "${1:-}" = clean ]; then
  for n in "${NODES[@]}"; do bash lab/docker/node.sh down "gpuops-${n%%:*}" || true; done
  [ "$1" = clean ] || bash lab/docker/engine.sh down || true
  exit 0
fi

cat <<'TXT'
------------------------------------------------------------------------------------------
 gpuops.k8s_gpu demo - THE LAB IS SIMULATED
   * nodes  : Debian 12 systemd containers on this machine (community.docker.docker connection)
   * GPUs   : the lab's NVML simulator (libnvidia-ml.so.1 built from NVIDIA's nvml.h), not real GPUs
   * no real driver, vCenter or Kubernetes cluster is touched
 Same playbook on a real fleet:  ansible-playbook -i inventory/example/hosts.yml playbooks/site.yml
------------------------------------------------------------------------------------------
TXT

export ANSIBLE_COLLECTIONS_PATH
ANSIBLE_COLLECTIONS_PATH=$(bash lab/bin/collections-path.sh)
export ANSIBLE_CONFIG="$ROOT/lab/ansible.cfg"
export PATH="$VENV:$PATH"

banner "Docker engine"
bash lab/docker/engine.sh up
banner "Node image"
bash lab/docker/node-image.sh
banner "NVML simulator"
bash lab/nvml_sim/build.sh
banner "Lab nodes (simulated GPUs)"
for n in "${NODES[@]}"; do
  host=${n%%:*} inv=${n#*:}
  bash lab/docker/node.sh up "gpuops-$host" --hostname "$host"
  bash lab/nvml_sim/install.sh "gpuops-$host" "$inv"
  echo "  gpuops-$host: simulated GPUs from lab/nvml_sim/inventories/$inv.json"
done

banner "ansible-playbook playbooks/site.yml (first run)"
ansible-playbook -i inventory/lab/hosts.yml playbooks/site.yml | tee build/demo-run1.log
banner "ansible-playbook playbooks/site.yml (second run: must change nothing)"
ansible-playbook -i inventory/lab/hosts.yml playbooks/site.yml > build/demo-run2.log
sed -n '/PLAY RECAP/,$p' build/demo-run2.log
if grep -E 'changed=[1-9]|failed=[1-9]|unreachable=[1-9]' build/demo-run2.log >/dev/null; then
  echo "DEMO FAILED: the second run changed or failed something" >&2
  exit 1
fi
banner "Done: second run changed nothing. Logs: build/demo-run1.log build/demo-run2.log; 'make lab-down' removes the lab."
