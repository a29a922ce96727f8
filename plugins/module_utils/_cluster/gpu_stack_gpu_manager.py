# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tkestack gpu-manager (unmaintained upstream): refused for new deployments, rendered only to remove it.

gpu-manager cannot work from what this collection renders: its RBAC needs nodes update (it exits at start without it),
pods/status update and pods delete, and no allocation succeeds without its scheduler extender gpu-admission
(tkestack/gpu-admission), which registers with kube-scheduler through a Policy/extender configuration of its own.  The
strategy is refused with a pointer to HAMi (see docs/conformance/gpu-manager.md); `state: absent` still renders the
objects an older release of this collection created so that they can be removed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.gpu_stack_common import (
    GPU_TOLERATION, StackError, daemonset, hostpath_volume, node_name_env, pod_spec_common, rbac_for, validate_settings,
)

# upstream's git tags are vX.Y.Z, but hack/build.sh tags the image with the VERSION file's content, which has no v
# (VERSION at v1.1.5 is 1.1.5; gpu-manager.yaml there names tkestack/gpu-manager:1.0.3)
IMAGE = 'docker.io/tkestack/gpu-manager:1.1.5'
NODE_LABEL = 'nvidia-device-enable'
REFUSAL = ('gpu_sharing_stack_strategy gpu-manager is refused: tkestack gpu-manager is unmaintained upstream (last '
           'release v1.1.5) and does not work from what this collection renders: it needs nodes update (it exits at '
           'start without it), pods/status update and pods delete, and its scheduler extender gpu-admission '
           '(tkestack/gpu-admission) for any allocation to succeed. Use gpu_sharing_stack_strategy: hami, which offers '
           'the same vGPU memory/core split (nvidia.com/gpumem, nvidia.com/gpucores) and is maintained. An existing '
           'gpu-manager pool can still be removed with gpu_sharing_stack_state: absent.')
DEPRECATION = ('gpu-manager (tkestack) is unmaintained upstream and kept only for existing users: plan a move to '
               'gpu_sharing_stack_strategy: hami, which offers the same vGPU memory/core split (nvidia.com/gpumem, '
               'nvidia.com/gpucores) and is maintained.')

GPU_MANAGER_SCHEMA = {
    'image': dict(type=str, default=IMAGE),
    'log_level': dict(type=int, default=4, min=0, max=10),
    'extra_flags': dict(type=str, default='--logtostderr=false'),
}


def render(ctx, settings, nodes, facts):
    var = ctx.var('gpu_manager')
    gm = validate_settings(settings.get('gpu_manager'), GPU_MANAGER_SCHEMA, var)
    if not ctx.removing:
        raise StackError(REFUSAL)
    ctx.warn(DEPRECATION)
    image = ctx.image(gm['image'], var + '.image')
    name = 'gpu-manager-' + ctx.pool
    out = rbac_for(ctx, name, [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'list', 'watch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'update', 'patch']},
        {'apiGroups': [''], 'resources': ['events'], 'verbs': ['create', 'patch']},
    ])
    mounts = [('device-plugin', '/var/lib/kubelet/device-plugins', '/var/lib/kubelet/device-plugins', None),
              ('vdriver', '/etc/gpu-manager/vdriver', '/etc/gpu-manager/vdriver', 'DirectoryOrCreate'),
              ('vmdata', '/etc/gpu-manager/vm', '/etc/gpu-manager/vm', 'DirectoryOrCreate'),
              ('log', '/var/log/gpu-manager', '/var/log/gpu-manager', 'DirectoryOrCreate'),
              ('checkpoint', '/etc/gpu-manager/checkpoint', '/etc/gpu-manager/checkpoint', 'DirectoryOrCreate'),
              ('run-dir', '/var/run', '/var/run', None),
              ('cgroup', '/sys/fs/cgroup', '/sys/fs/cgroup', None),
              ('usr-directory', '/usr/local/host', '/usr', None)]
    container = {'name': 'gpu-manager', 'image': image,
                 'env': [{'name': 'LOG_LEVEL', 'value': str(gm['log_level'])},
                         {'name': 'EXTRA_FLAGS', 'value': gm['extra_flags']}, node_name_env()],
                 'ports': [{'name': 'metrics', 'containerPort': 5678, 'protocol': 'TCP'}],
                 'securityContext': {'privileged': True},
                 'volumeMounts': [{'name': n, 'mountPath': p} for n, p, dummy, dummy2 in mounts]}
    container['volumeMounts'][6]['readOnly'] = True
    container['volumeMounts'][7]['readOnly'] = True
    selector = ctx.pool_selector()
    selector[NODE_LABEL] = 'enable'
    spec = {'serviceAccountName': name, 'priorityClassName': 'system-node-critical', 'hostPID': True,
            'nodeSelector': selector, 'containers': [container],
            'volumes': [hostpath_volume(n, h, t) for n, dummy, h, t in mounts]}
    pod_spec_common(ctx, spec, [GPU_TOLERATION])
    out.append(daemonset(ctx, name, 'gpu-manager', spec))
    ctx.note('gpu-manager also needs its scheduler extender gpu-admission (tkestack/gpu-admission), which is not rendered.')
    labels = dict((n, {NODE_LABEL: 'enable'}) for n in nodes)
    return out, labels, ['tencent.com/vcuda-core', 'tencent.com/vcuda-memory'], \
        {'tencent.com/vcuda-core': '50', 'tencent.com/vcuda-memory': '4'}
