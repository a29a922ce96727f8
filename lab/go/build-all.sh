#!/usr/bin/env bash
# Build every program set of lab/go that `make test` uses, except the Kubernetes control plane's kube-* sets (step
# kube-build builds the one version the run uses): the oracles (nvidia-ctk, containerd, crio, migprofile,
# nvidia-container-runtime: the lab node's `nvidia` handler, its hook and nvidia-ctk of the toolkit v1.20.0,
# nvidia-device-plugin: gpu-feature-discovery and the device plugin, kubelet-registrar), NVIDIA's DRA kubelet plugin
# (dra-driver-nvidia-gpu, for the real-cluster DRA tests), Prometheus and promtool (prometheus: the alert rules'
# oracle), the dashboard's schema oracle (grafana-dashboard), the vSphere simulator (vcsim), etcd and kwok. One step before the lab tests, so that a fresh machine compiles them
# there, once, instead of inside whichever test asks first (lab/go/build.sh's lock makes a concurrent ask wait).
# Prints one line per set: NAME DIRECTORY.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
for set in $("$HERE/build.sh" --list); do
  case "$set" in kube-*) continue ;; esac
  printf '%s %s\n' "$set" "$("$HERE/build.sh" "$set")"
done
