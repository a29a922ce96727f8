"""LAB ONLY: what the NVIDIA kernel module writes for MIG and the lab has not (no module loads here), shared by the
real lab nodes (lab/node/node.py nvidia_toolkit, lab/demo/real_nodes.py) and the tests (lab/tests/oracles/oracle_util.py,
lab/tests/dp_node_plugin.py): /proc/driver/nvidia-caps/mig-minors, the file NVIDIA's programs read to find the
capability device of a MIG GPU instance or compute instance (nvidia-container-toolkit v1.20.0 internal/nvcaps/nvcaps.go
nvcapsMigMinorsPath; k8s-device-plugin v0.19.1 reads the same path), and a shell prologue that gives one process a
/proc carrying it. Nothing here is part of the collection."""


def cap_minor(gpu, gi, ci=None):
    """Our numbering of the MIG capability devices (the kernel module's own differs; nvidia-ctk and the device plugin
    only follow the mig-minors file): gpu<g>/gi<i>/access and gpu<g>/gi<i>/ci<c>/access."""
    access = 3 + gpu * 135 + gi * 9
    return access if ci is None else access + 1 + ci


def mig_minors_lines(inv):
    """The lines of /proc/driver/nvidia-caps/mig-minors that the NVIDIA kernel module would write for the inventory's
    GPUs (config, monitor, and every GPU instance and compute instance capability)."""
    lines = ['config 1', 'monitor 2']
    for i, g in enumerate(inv['gpus']):
        minor = g.get('minor_number', i)
        for gi in range(15):
            lines.append('gpu%d/gi%d/access %d' % (minor, gi, cap_minor(minor, gi)))
            for ci in range(8):
                lines.append('gpu%d/gi%d/ci%d/access %d' % (minor, gi, ci, cap_minor(minor, gi, ci)))
    return lines


def mig_inventory(inv):
    """Whether the inventory (a parsed lab/nvml_sim inventory) has a GPU in MIG mode."""
    return any(g.get('mig_mode') for g in inv['gpus'])


# A shell prologue for `unshare --mount --propagation private sh -c`: /proc becomes a tmpfs with links to a fresh procfs
# (mounted at $REALPROC) and a driver/nvidia-caps/mig-minors copied from $MINORS (the path is fixed in upstream's
# programs and only the NVIDIA kernel module writes it). Needs root (mount); fails, never skips, without it.
PRIVATE_PROC = ('set -e; mount -t proc proc "$REALPROC"; mount -t tmpfs gpuops-lab-proc /proc; '
                'for e in "$REALPROC"/*; do ln -s "$e" "/proc/${e##*/}"; done; rm -f /proc/driver; '
                'mkdir -p /proc/driver/nvidia-caps; cp "$MINORS" /proc/driver/nvidia-caps/mig-minors; ')
