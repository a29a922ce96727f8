#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: kube_scheduler_config
short_description: Register scheduler extenders with kube-scheduler on RKE1, RKE2 and kubeadm clusters
version_added: 0.1.0
description:
  - Writes the kube-scheduler extender configuration for the cluster's Kubernetes version and points
    kube-scheduler at it through the distribution's own configuration, one file per call (see O(mode)).
  # make generate: kube_versions policy scheduler-v1 supported legacy
  - The document follows the Kubernetes version - a scheduler C(Policy) (JSON, flag C(--policy-config-file))
    for 1.16 to 1.22, C(kubescheduler.config.k8s.io/v1beta3) C(KubeSchedulerConfiguration) for 1.23 and 1.24, and
    C(kubescheduler.config.k8s.io/v1) from 1.25 to 1.37. Other versions are refused. 1.24 to 1.37 is the supported
    range; 1.16 to 1.23 are accepted for legacy (RKE1) clusters and RV(notes) says they are end of life.
  - A kube-scheduler that already reads a file of the site's own (C(--config) from 1.23, C(--policy-config-file)
    below) is never pointed elsewhere - V(discover) finds that file and V(scheduler_config) with O(current_flags)
    merges the extenders into it, keeping its profiles, plugins, C(clientConnection) and served C(apiVersion); an
    explicit O(config_path) naming another file is refused, and so are the adapter modes when the flag names another file.
  - Merges into what is there - other extenders, profiles and every other key are kept; an extender with the same
    C(urlPrefix) is replaced in place. The module only writes when the parsed content differs, so a re-run
    changes nothing.
  - Refusals (unsupported version, malformed extender, unparsable or foreign file) name the option and the allowed
    values and happen before anything is written.
  - Does not restart anything. The role P(gpuops.k8s_gpu.kube_scheduler_extender#role) runs C(rke up), restarts
    C(rke2-server) or lets kubelet recreate the static pod.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
options:
  mode:
    description:
      - Which file this call edits.
      - V(scheduler_config) writes the Policy or KubeSchedulerConfiguration file itself (O(path), default O(config_path)).
      - V(rke1_cluster_yml) edits an RKE1 C(cluster.yml) - C(services.scheduler.extra_args), C(extra_binds) when the
        config directory is outside C(/etc/kubernetes), and C(extra_env) with the config checksum.
      - V(rke2_config) edits C(/etc/rancher/rke2/config.yaml) - C(kube-scheduler-arg) and C(kube-scheduler-extra-mount).
      - V(kubeadm_manifest) edits the static pod manifest - a copy is written in O(tmp_dir), outside the manifests
        directory, and moved in, so kubelet never sees a half-written file or a backup.
      - V(kubeadm_configmap) edits the text O(cluster_configuration) (the C(ClusterConfiguration) key of the
        C(kube-system/kubeadm-config) ConfigMap) and returns it as RV(cluster_configuration); no file is touched.
      - V(discover) only reads the distribution's file (O(distribution) chooses which; O(path) as for the adapter
        modes) and returns RV(flags), the file the extenders go to (RV(config_path)) and RV(site_owned). For RKE1 it
        also refuses a O(kubernetes_version) whose minor differs from C(kubernetes_version) in C(cluster.yml).
    type: str
    required: true
    choices: [scheduler_config, rke1_cluster_yml, rke2_config, kubeadm_manifest, kubeadm_configmap, discover]
  state:
    description:
      - V(present) registers the extenders and points kube-scheduler at the file.
      - V(absent) undoes it. With V(scheduler_config), removes the extenders of O(extenders) (matched by
        C(url_prefix); the other fields are ignored) and keeps every other extender and key; the file is deleted
        when nothing else is left in it and it lives in the collection's own directory (C(/etc/kubernetes/gpuops),
        C(/etc/rancher/rke2/gpuops)) - RV(config_removed) then says so. With the adapter modes, removes the flag that
        names O(config_path) (only with that value), the mount of its directory and the checksum annotation or
        environment entry, and keeps everything else; call them only when RV(config_removed) is true, as
        kube-scheduler still needs the flag while the file holds other extenders.
    type: str
    choices: [present, absent]
    default: present
  path:
    description:
      - The file to edit.
      - Defaults - V(scheduler_config) O(config_path); V(rke2_config) C(/etc/rancher/rke2/config.yaml);
        V(kubeadm_manifest) C(/etc/kubernetes/manifests/kube-scheduler.yaml). Required for V(rke1_cluster_yml).
    type: path
  kubernetes_version:
    description:
      # make generate: kube_versions accepted legacy
      - The cluster's Kubernetes version, like V(v1.29.4), V(1.29) or V(v1.28.9+rke2r1). 1.16 to 1.37 are accepted
        (1.16 to 1.23 only for legacy clusters).
      - With V(rke1_cluster_yml) and V(discover) for RKE1, its minor must match C(kubernetes_version) of C(cluster.yml).
    type: str
    required: true
  distribution:
    description:
      - The Kubernetes distribution; chooses C(clientConnection.kubeconfig) and the default O(config_path).
      - Implied by O(mode) for the adapter modes; needed with V(scheduler_config) unless O(kubeconfig) is set.
    type: str
    choices: [rke1, rke2, kubeadm]
  kubeconfig:
    description:
      - C(clientConnection.kubeconfig) of the KubeSchedulerConfiguration, as seen inside the kube-scheduler container.
      - Defaults by O(distribution) - RKE1 C(/etc/kubernetes/ssl/kubecfg-kube-scheduler.yaml), RKE2
        C(/var/lib/rancher/rke2/server/cred/scheduler.kubeconfig), kubeadm C(/etc/kubernetes/scheduler.conf).
      - Not used for a Policy (below 1.23), where the C(--kubeconfig) flag stays in charge.
    type: str
  config_path:
    description:
      - Where the extender configuration file lives on the control-plane hosts (the same path inside the
        kube-scheduler container; its directory is mounted read-only).
      - Defaults to C(scheduler-config.yaml), or C(scheduler-policy.json) below 1.23, in C(/etc/kubernetes/gpuops)
        (RKE1, kubeadm) or C(/etc/rancher/rke2/gpuops) (RKE2).
    type: path
  extenders:
    description:
      - The extenders to register. Needed for V(scheduler_config); ignored by the other modes.
      - At most one extender in the resulting file may have O(extenders[].bind_verb).
    type: list
    elements: dict
    suboptions:
      url_prefix:
        description: Extender URL prefix, like V(http://127.0.0.1:32766/gpushare-scheduler). Identifies the extender when merging.
        type: str
        required: true
      filter_verb:
        description: Verb of the filter call.
        type: str
      prioritize_verb:
        description: Verb of the prioritize call.
        type: str
      preempt_verb:
        description: Verb of the preempt call.
        type: str
      bind_verb:
        description: Verb of the bind call; the extender then binds pods instead of kube-scheduler.
        type: str
      weight:
        description: Multiplier of the prioritize scores; positive, only with O(extenders[].prioritize_verb) (default 1 then).
        type: int
      enable_https:
        description: Use HTTPS (needs an C(https://) O(extenders[].url_prefix)).
        type: bool
        default: false
      http_timeout:
        description: Timeout of the extender calls, like V(30s) or V(500ms); kube-scheduler's default when unset.
        type: str
      node_cache_capable:
        description: The extender caches node information, so kube-scheduler sends node names only.
        type: bool
        default: false
      managed_resources:
        description:
          - Extended resources the extender manages - names like V(aliyun.com/gpu-mem), or dicts with C(name)
            and C(ignored_by_scheduler).
        type: list
        elements: raw
      ignorable:
        description: Scheduling goes on when the extender is unreachable.
        type: bool
        default: false
  current_flags:
    description:
      - With V(scheduler_config), the kube-scheduler flags that name a configuration file now (RV(flags) of
        V(discover)) - keys C(config) and C(policy-config-file), values the file paths.
      - When the flag the version uses names a file other than the collection's, the extenders are merged into that
        file (the site's) instead of O(config_path)'s default; an explicit O(config_path) naming another file is refused.
    type: dict
  cluster_configuration:
    description:
      - With V(kubeadm_configmap), the C(ClusterConfiguration) YAML text of the C(kubeadm-config) ConfigMap
        (kubeadm.k8s.io v1beta2, v1beta3 or v1beta4).
    type: str
  config_checksum:
    description:
      - A checksum of the configuration file, written into the kubeadm manifest (annotation
        C(gpuops.io/scheduler-config-checksum)) or the RKE1 C(extra_env), so that the scheduler is recreated when only
        the file's content changed.
      - With V(kubeadm_manifest), defaults to the SHA-256 of O(config_path) when that file exists on the host.
    type: str
  tmp_dir:
    description: With V(kubeadm_manifest), the staging directory outside C(/etc/kubernetes/manifests) (created C(0700)).
    type: path
    default: /etc/kubernetes/tmp
  backup:
    description:
      - Keep a copy of the file before changing it.
      - PyYAML does not keep comments or quoting of YAML files it rewrites; the backup keeps the original text.
    type: bool
    default: true
  backup_dir:
    description:
      - Directory of the backup copies. Defaults to the file's own directory, and to O(tmp_dir) for
        V(kubeadm_manifest) (kubelet would run a backup left in the manifests directory).
    type: path
requirements:
  - PyYAML on the host that runs the module.
notes:
  - Files are rewritten with PyYAML; comments are lost (the backup keeps them). Nothing is written when the
    parsed content is already right.
  - The extender file is created C(0644) when missing; existing files keep their owner and mode.
  - kube-scheduler does not reload its configuration; the distribution adapters make the scheduler restart
    (C(rke up), C(rke2-server) restart, static pod recreated on a manifest change).
seealso:
  - module: gpuops.k8s_gpu.gpu_info
'''

EXAMPLES = r'''
- name: Write the gpushare extender configuration on a kubeadm control plane
  gpuops.k8s_gpu.kube_scheduler_config:
    mode: scheduler_config
    distribution: kubeadm
    kubernetes_version: v1.29.4
    extenders:
      - url_prefix: http://127.0.0.1:32766/gpushare-scheduler
        filter_verb: filter
        bind_verb: bind
        node_cache_capable: true
        managed_resources:
          - name: aliyun.com/gpu-mem
            ignored_by_scheduler: false
  register: sched_cfg

- name: Point the static pod at it
  gpuops.k8s_gpu.kube_scheduler_config:
    mode: kubeadm_manifest
    kubernetes_version: v1.29.4

- name: RKE2 server configuration
  gpuops.k8s_gpu.kube_scheduler_config:
    mode: rke2_config
    kubernetes_version: v1.28.9+rke2r1

- name: Edit an RKE1 cluster.yml
  gpuops.k8s_gpu.kube_scheduler_config:
    mode: rke1_cluster_yml
    path: /opt/rke/cluster.yml
    kubernetes_version: v1.26.15
'''

RETURN = r'''
path:
  description: The file edited (absent for V(kubeadm_configmap)).
  returned: when a file is edited
  type: str
  sample: /etc/kubernetes/manifests/kube-scheduler.yaml
kind:
  description: The extender document kind for the version, V(Policy) or V(KubeSchedulerConfiguration).
  returned: always
  type: str
  sample: KubeSchedulerConfiguration
api_version:
  description: The apiVersion of the extender document.
  returned: always
  type: str
  sample: kubescheduler.config.k8s.io/v1
flag:
  description: The kube-scheduler flag that carries O(config_path), V(config) or V(policy-config-file).
  returned: always
  type: str
  sample: config
config_path:
  description: The extender configuration file path used.
  returned: always
  type: str
  sample: /etc/kubernetes/gpuops/scheduler-config.yaml
content:
  description: The full text the edited file has (or would have in check mode).
  returned: when a file is edited
  type: str
document:
  description: The resulting document, parsed.
  returned: always
  type: dict
config_removed:
  description: With O(state=absent) and V(scheduler_config), whether the extender configuration file is gone (deleted now, or never there).
  returned: when O(state=absent) and O(mode=scheduler_config)
  type: bool
cluster_configuration:
  description: With V(kubeadm_configmap), the resulting ClusterConfiguration text (the input text when unchanged).
  returned: when O(mode=kubeadm_configmap)
  type: str
backup_file:
  description: The backup copy made before the change.
  returned: when a backup was made
  type: str
  sample: /etc/kubernetes/tmp/kube-scheduler.yaml.2026-11-23@10:11:12~
flags:
  description: With V(discover), the kube-scheduler flags that name a configuration file (C(config), C(policy-config-file)).
  returned: when O(mode=discover)
  type: dict
  sample: {config: /etc/kubernetes/site/kube-scheduler-config.yaml}
site_owned:
  description: Whether the extender file is the site's own (named by kube-scheduler's flag), merged into and never deleted.
  returned: when O(mode=discover) or O(mode=scheduler_config)
  type: bool
notes:
  description: What the module did besides the obvious (apiVersion migration, removed Policy flags, the site's file kept in charge, end-of-life versions).
  returned: always
  type: list
  elements: str
'''

from typing import Any

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as R
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import replace_file
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler.plan import plan

EXTENDER_SPEC = dict(
    url_prefix=dict(type='str', required=True),
    filter_verb=dict(type='str'),
    prioritize_verb=dict(type='str'),
    preempt_verb=dict(type='str'),
    bind_verb=dict(type='str'),
    weight=dict(type='int'),
    enable_https=dict(type='bool', default=False),
    http_timeout=dict(type='str'),
    node_cache_capable=dict(type='bool', default=False),
    managed_resources=dict(type='list', elements='raw'),
    ignorable=dict(type='bool', default=False),
)


def argument_spec() -> dict[str, Any]:
    return dict(
        mode=dict(type='str', required=True, choices=['scheduler_config', 'rke1_cluster_yml', 'rke2_config',
                                                      'kubeadm_manifest', 'kubeadm_configmap', 'discover']),
        state=dict(type='str', default='present', choices=['present', 'absent']),
        path=dict(type='path'),
        kubernetes_version=dict(type='str', required=True),
        distribution=dict(type='str', choices=['rke1', 'rke2', 'kubeadm']),
        kubeconfig=dict(type='str'),
        config_path=dict(type='path'),
        extenders=dict(type='list', elements='dict', options=EXTENDER_SPEC),
        current_flags=dict(type='dict'),
        cluster_configuration=dict(type='str'),
        config_checksum=dict(type='str'),
        tmp_dir=dict(type='path', default='/etc/kubernetes/tmp'),
        backup=dict(type='bool', default=True),
        backup_dir=dict(type='path'),
    )


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    if not R.HAS_YAML:
        module.fail_json(msg=missing_required_lib('PyYAML'), exception=R.YAML_IMPORT_ERROR)
    params = module.params
    try:
        res = plan(params)
    except R.SchedulerConfigError as exc:
        module.fail_json(msg=to_native(exc), changed=False)
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot read %s: %s' % (params.get('path') or params.get('config_path'), to_native(exc)),
                         exception=traceback.format_exc())
    out = dict(changed=res['changed'], kind=res['kind'], api_version=res['api_version'], flag=res['flag'],
               config_path=res['config_path'], document=res['document'], notes=res['notes'])
    if 'site_owned' in res:
        out['site_owned'] = res['site_owned']
    if params['mode'] == 'discover':
        module.exit_json(path=res['path'], flags=res['flags'], **out)
    label = res.get('path') or 'kube-system/kubeadm-config ClusterConfiguration'
    if res['changed']:
        out['diff'] = dict(before=res['before'], after=res['after'], before_header=label, after_header=label)
    if params['mode'] == 'kubeadm_configmap':
        out['cluster_configuration'] = res['cluster_configuration']
        module.exit_json(**out)
    out['path'] = res['path']
    out['content'] = res['content']
    if 'config_removed' in res:
        out['config_removed'] = res['config_removed']
    if res['changed'] and not module.check_mode:
        path = res['path']
        # a static pod manifest's backup and temporary file stay out of the directory the kubelet reads
        manifest = params['mode'] == 'kubeadm_manifest'
        try:
            backup_file = replace_file(module, path, None if res.get('delete') else to_bytes(res['after']),
                                       backup=params['backup'],
                                       backup_dir=params.get('backup_dir') or (params['tmp_dir'] if manifest else None),
                                       stage_dir=params['tmp_dir'] if manifest else None)
            if backup_file:
                out['backup_file'] = backup_file
        except (IOError, OSError) as exc:
            module.fail_json(msg='cannot write %s: %s' % (path, to_native(exc)), exception=traceback.format_exc(), **out)
    module.exit_json(**out)


if __name__ == '__main__':
    main()
