#!/bin/sh
# STAND-IN for NVIDIA's NVIDIA-Linux-x86_64-@VERSION@.run (lab only; lab/tests/integration/test_upgrade_driver.py serves it
# from a file:// gpuops_mirror.files). No NVIDIA code and no kernel module: it does what the real installer
# leaves behind that the collection looks at, and makes the NVML simulator report the new driver, as loading
# the new kernel module would on a real node.
#  - like nvidia-installer, it first uninstalls a previous runfile installation (nvidia-uninstall)
#  - lays down libnvidia-ml.so.@VERSION@ (what nvidia_driver_info reads as the installed runfile version),
#    nvidia-persistenced and nvidia-uninstall
#  - sets driver_version / nvml_version in the simulator's inventory (/etc/nvml-sim/inventory.json)
# Fault injection: /etc/gpuops-lab/report-driver-version makes the simulator report that version instead
# (a node whose GPUs do not come up on the new driver); /etc/gpuops-lab/drop-mig-instances drops every GPU's MIG
# instances, MIG mode staying on (what a reboot does to a MIG node when nothing re-creates its geometry);
# /etc/gpuops-lab/never-come-back halts the node (systemd, PID 1 of the container) two seconds after the install:
# a node that goes down for the new driver and never comes back.
set -e
version=@VERSION@
echo "$0 $*" >> /var/log/gpuops-lab-nvidia-installer.log
if [ -x /usr/bin/nvidia-uninstall ]; then
  /usr/bin/nvidia-uninstall
fi
lib=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.$version
touch "$lib"
printf '#!/bin/sh\nexit 0\n' > /usr/bin/nvidia-persistenced
printf '#!/bin/sh\nrm -f %s /usr/bin/nvidia-persistenced /usr/bin/nvidia-uninstall\n' "$lib" > /usr/bin/nvidia-uninstall
chmod 0755 /usr/bin/nvidia-persistenced /usr/bin/nvidia-uninstall
reported=$version
if [ -s /etc/gpuops-lab/report-driver-version ]; then
  reported=$(cat /etc/gpuops-lab/report-driver-version)
fi
python3 - "$reported" <<'PY'
import json, os, sys
path = '/etc/nvml-sim/inventory.json'
with open(path) as f:
    inv = json.load(f)
inv['driver_version'] = sys.argv[1]
inv['nvml_version'] = '12.' + sys.argv[1]
if os.path.exists('/etc/gpuops-lab/drop-mig-instances'):
    for gpu in inv['gpus']:
        gpu.pop('mig_instances', None)
    for state in ('/var/lib/nvml-sim/state.json', '/var/lib/nvml-sim/state.json.lock'):
        if os.path.exists(state):
            os.remove(state)
with open(path + '.tmp', 'w') as f:
    json.dump(inv, f, indent=1)
os.rename(path + '.tmp', path)
PY
if [ -e /etc/gpuops-lab/never-come-back ]; then
  nohup sh -c 'sleep 2; systemctl --no-block halt || kill -s RTMIN+3 1' >/dev/null 2>&1 &
fi
