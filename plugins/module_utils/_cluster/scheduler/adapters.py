# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Distribution adapters: point kube-scheduler at the extender config file, keeping every other setting.

* RKE1 ``cluster.yml``: ``services.scheduler.extra_args`` (+ ``extra_binds`` outside /etc/kubernetes, + an
  ``extra_env`` checksum so that ``rke up`` recreates the container when only the file's content changed);
* RKE2 ``/etc/rancher/rke2/config.yaml``: ``kube-scheduler-arg`` and ``kube-scheduler-extra-mount``;
* kubeadm static Pod manifest: the container's command flag, a hostPath volume + volumeMount and a checksum
  annotation (kubelet recreates the static pod when the manifest changes);
* kubeadm ``ClusterConfiguration`` (``kubeadm-config`` ConfigMap): ``scheduler.extraArgs`` (map in
  kubeadm.k8s.io/v1beta2 and v1beta3, list of name/value in v1beta4) and ``scheduler.extraVolumes``, so that
  ``kubeadm upgrade`` regenerates the manifest with them.

Each function takes the parsed document and returns (new document, notes); it never mutates its input.
The directory that holds the config file is mounted (not the file): files are replaced by rename, and a file bind
mount would keep showing the old inode to a running container.
"""
from __future__ import annotations

import copy
import posixpath
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_distributions as KD
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler.render import (
    SchedulerConfigError, Version, api_for_version, parse_version)

VOLUME_NAME = 'gpuops-scheduler-config'
CHECKSUM_KEY = 'gpuops.io/scheduler-config-checksum'
CHECKSUM_ENV = 'GPUOPS_SCHEDULER_CONFIG_CHECKSUM'
# the collection's own directories for the extender file (distribution -> directory); a file elsewhere that
# kube-scheduler already reads is the site's
OWN_DIRS = KD.OWN_DIRS   # _common/kube_distributions.py
# flags kube-scheduler dropped in 1.23 (with the Policy API): left in place they stop it from starting
POLICY_FLAGS = ('policy-config-file', 'policy-configmap', 'policy-configmap-namespace', 'use-legacy-policy-config')

# a distribution's file as YAML gives it (cluster.yml, config.yaml, a static Pod manifest, a ClusterConfiguration)
Doc = Any
# (the document after the change, notes)
Changed = tuple[Any, list[str]]


def check_config_path(config_path: object) -> str:
    if not isinstance(config_path, str) or not config_path.startswith('/') or config_path.endswith('/') \
            or posixpath.normpath(config_path) != config_path:
        raise SchedulerConfigError("config_path: %r must be an absolute, normalized file path" % (config_path,))
    if posixpath.dirname(config_path) == '/':
        raise SchedulerConfigError("config_path: %r sits in / ; its directory is mounted into kube-scheduler, use a "
                                   "dedicated directory such as /etc/kubernetes/gpuops" % config_path)
    return posixpath.dirname(config_path)


def _config_below_123(other: str) -> SchedulerConfigError:
    return SchedulerConfigError(
        "kube-scheduler already runs with --config=%s; below Kubernetes 1.23 this module registers the extenders "
        "with --policy-config-file, which kube-scheduler ignores next to --config. Add the extenders to %s "
        "instead (mode=scheduler_config with config_path=%s on a 1.23+ cluster) or remove --config" % (other, other, other))


def flag_plan(version: Version, config_path: str, current: dict[str, str]
              ) -> tuple[dict[str, str], list[str], list[str]]:
    """current: dict flag -> value of kube-scheduler's present flags. Returns (set dict, remove list, notes).

    The flag that carries the extender file is set only when it is missing or already names config_path: a value
    naming another file is the site's own configuration, never replaced (defect 13) - resolve_config_path() turns
    it into the file to merge into, and this refusal is the guard when that step was skipped."""
    api = api_for_version(version)
    notes: list[str] = []
    flag = api['flag']
    if flag == 'policy-config-file' and current.get('config'):
        raise _config_below_123(current['config'])
    other = current.get(flag)
    if other and other != config_path:
        raise SchedulerConfigError(
            "kube-scheduler already runs with --%s=%s, the site's own file; refusing to point it at %s instead. "
            "Leave config_path unset so that the extenders are merged into %s (the role does this), or set "
            "config_path=%s" % (flag, other, config_path, other, other))
    if flag == 'config':
        remove = [f for f in POLICY_FLAGS if f in current]
        if remove:
            notes.append('removed kube-scheduler flag(s) %s: the Policy API is gone from Kubernetes 1.23'
                         % ', '.join('--' + f for f in remove))
        return {'config': config_path}, remove, notes
    return {'policy-config-file': config_path}, [], notes


def current_flags(mode: str, doc: Doc) -> dict[str, str]:
    """The kube-scheduler flags that name a scheduler configuration file (--config, --policy-config-file) in a
    distribution's file: mode is rke1_cluster_yml, rke2_config or kubeadm_manifest. {} when none is set."""
    found: dict[str, str] = {}
    if not isinstance(doc, dict):
        return found
    if mode == 'rke1_cluster_yml':
        services = doc.get('services')
        scheduler = services.get('scheduler') if isinstance(services, dict) else None
        args = scheduler.get('extra_args') if isinstance(scheduler, dict) else None
        pairs: list[tuple[str, str | None]] = [(str(k), str(v)) for k, v in args.items()] if isinstance(args, dict) else []
    elif mode == 'rke2_config':
        pairs = [_split_flag(str(a)) for a in _as_list(doc.get('kube-scheduler-arg'), 'kube-scheduler-arg')]
    else:
        pairs = []
        for ctr in (doc.get('spec') or {}).get('containers') or []:
            if isinstance(ctr, dict) and ctr.get('name') == 'kube-scheduler':
                pairs = [_split_flag(str(a)) for a in (ctr.get('command') or [])[1:] + (ctr.get('args') or [])
                         if str(a).startswith('--')]
    for key, value in pairs:
        if key in ('config', 'policy-config-file') and value:
            found[key] = value
    return found


def resolve_config_path(version: Version, flags: dict[str, str], config_path: str, explicit: bool = False
                        ) -> tuple[str, bool, list[str]]:
    """Where the extenders go, given kube-scheduler's current flags (current_flags()): returns
    (path, site_owned, notes).

    When kube-scheduler already reads a file of its own through the flag the version uses (--config from 1.23,
    --policy-config-file below), that file stays in charge and the extenders are merged into it (site_owned).
    An explicit config_path naming another file is refused, naming both; so is --config below 1.23."""
    api = api_for_version(version)
    flag = api['flag']
    if flag == 'policy-config-file' and flags.get('config'):
        raise _config_below_123(flags['config'])
    current = flags.get(flag)
    if not current:
        return config_path, False, []
    if current == config_path:
        return config_path, posixpath.dirname(current) not in OWN_DIRS.values(), []
    if explicit:
        raise SchedulerConfigError(
            "config_path: %s differs from the file kube-scheduler already reads (--%s=%s, the site's); refusing to "
            "replace it. Leave config_path unset to merge the extenders into %s, or set config_path=%s"
            % (config_path, flag, current, current, current))
    check_config_path(current)
    return current, True, ["kube-scheduler already reads %s (--%s); the extenders are merged into it and it stays "
                           "in charge" % (current, flag)]


def _covered(mount_paths: list[Any], config_path: str) -> bool:
    """Whether one of the container paths already shows config_path (the file itself or a parent directory)."""
    for path in mount_paths:
        path = str(path).rstrip('/') or '/'
        if config_path == path or config_path.startswith(path + '/'):
            return True
    return False


def rke1_version_check(doc: dict[str, Any], version: Version) -> list[str]:
    """cluster.yml's kubernetes_version must have the minor the extender file is rendered for: a Policy flag on a
    1.23+ cluster (or --config on an older one) stops kube-scheduler. Returns notes."""
    declared = doc.get('kubernetes_version')
    if declared in (None, ''):
        return ["cluster.yml sets no kubernetes_version (rke up uses its release's default); could not compare it "
                "with %s" % version]
    try:
        have = parse_version(declared, option='cluster.yml kubernetes_version')
    except SchedulerConfigError as exc:
        raise SchedulerConfigError("%s; cannot tell which scheduler document kube-scheduler reads" % exc)
    want = parse_version(version)
    if have != want:
        raise SchedulerConfigError(
            "kubernetes_version: %s (Kubernetes %d.%d) does not match cluster.yml's kubernetes_version %s "
            "(Kubernetes %d.%d); set the role's kubernetes_version to the cluster's, or leave it empty to read it"
            % (version, want[0], want[1], declared, have[0], have[1]))
    return []


def _split_flag(arg: str) -> tuple[str, str | None]:
    text = arg[2:] if arg.startswith('--') else arg
    key, sep, value = text.partition('=')
    return key, (value if sep else None)


# ---------------------------------------------------------------------------------------------------- RKE1
def rke1_cluster_yml(doc: Doc, version: Version, config_path: str, checksum: str | None = None) -> Changed:
    if not isinstance(doc, dict):
        raise SchedulerConfigError("cluster.yml is not a mapping; is path an RKE1 cluster.yml?")
    if 'nodes' not in doc and 'services' not in doc:
        raise SchedulerConfigError("cluster.yml has neither 'nodes' nor 'services'; is path an RKE1 cluster.yml?")
    directory = check_config_path(config_path)
    version_notes = rke1_version_check(doc, version)
    new = copy.deepcopy(doc)
    services = new.get('services')
    if services is None:
        services = new['services'] = {}
    scheduler = services.get('scheduler')
    if scheduler is None:
        scheduler = services['scheduler'] = {}
    if not isinstance(services, dict) or not isinstance(scheduler, dict):
        raise SchedulerConfigError("cluster.yml: services.scheduler is not a mapping")
    args = scheduler.get('extra_args')
    if args is None:
        args = scheduler['extra_args'] = {}
    if not isinstance(args, dict):
        raise SchedulerConfigError("cluster.yml: services.scheduler.extra_args is not a mapping")
    setting, remove, notes = flag_plan(version, config_path, dict((k, str(v)) for k, v in args.items()))
    notes = version_notes + notes
    for key in remove:
        del args[key]
    args.update(setting)
    binds = scheduler.get('extra_binds')
    others = [str(b).split(':')[1] for b in binds or [] if len(str(b).split(':')) > 1
              and str(b).split(':')[1] != directory] if isinstance(binds, list) else []
    if not (directory + '/').startswith('/etc/kubernetes/') and not _covered(others, config_path):
        if binds is None:
            binds = scheduler['extra_binds'] = []
        if not isinstance(binds, list):
            raise SchedulerConfigError("cluster.yml: services.scheduler.extra_binds is not a list")
        wanted = '%s:%s:ro' % (directory, directory)
        same = [i for i, b in enumerate(binds) if str(b).split(':')[1:2] == [directory]]
        if same:
            binds[same[0]] = wanted
        else:
            binds.append(wanted)
    if checksum:
        env = scheduler.get('extra_env')
        if env is None:
            env = scheduler['extra_env'] = []
        if not isinstance(env, list):
            raise SchedulerConfigError("cluster.yml: services.scheduler.extra_env is not a list")
        wanted = '%s=%s' % (CHECKSUM_ENV, checksum)
        same = [i for i, e in enumerate(env) if str(e).split('=', 1)[0] == CHECKSUM_ENV]
        if same:
            env[same[0]] = wanted
        else:
            env.append(wanted)
    return new, notes


# ---------------------------------------------------------------------------------------------------- RKE2
def _as_list(value: object, key: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return list(value)
    raise SchedulerConfigError("config.yaml: %s must be a list of strings (or one string)" % key)


def rke2_config(doc: Doc, version: Version, config_path: str) -> Changed:
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise SchedulerConfigError("RKE2 config.yaml is not a mapping")
    directory = check_config_path(config_path)
    new = copy.deepcopy(doc)
    args = _as_list(new.get('kube-scheduler-arg'), 'kube-scheduler-arg')
    current = dict(_split_flag(str(a)) for a in args)
    setting, remove, notes = flag_plan(version, config_path, dict((k, v or '') for k, v in current.items()))
    kept = [a for a in args if _split_flag(str(a))[0] not in remove]
    for key, value in setting.items():
        entry = '%s=%s' % (key, value)
        idx = [i for i, a in enumerate(kept) if _split_flag(str(a))[0] == key]
        if idx:
            kept[idx[0]] = entry
        else:
            kept.append(entry)
    new['kube-scheduler-arg'] = kept
    mounts = _as_list(new.get('kube-scheduler-extra-mount'), 'kube-scheduler-extra-mount')
    wanted = '%s:%s:ro' % (directory, directory)
    idx = [i for i, m in enumerate(mounts) if str(m).split(':')[1:2] == [directory]]
    if idx and str(mounts[idx[0]]) != wanted and str(mounts[idx[0]]).split(':', 1)[0] == directory:
        return new, notes + ['kept the existing mount %s of %s' % (mounts[idx[0]], directory)]
    others = [str(m).split(':')[1] for m in mounts if len(str(m).split(':')) > 1 and str(m).split(':')[1] != directory]
    if _covered(others, config_path):
        return new, notes
    if idx:
        mounts[idx[0]] = wanted
    else:
        mounts.append(wanted)
    new['kube-scheduler-extra-mount'] = mounts
    return new, notes


# ---------------------------------------------------------------------------------------------------- kubeadm
def kubeadm_manifest(doc: Doc, version: Version, config_path: str, checksum: str | None = None,
                     container: str = 'kube-scheduler') -> Changed:
    if not isinstance(doc, dict) or doc.get('kind') != 'Pod':
        raise SchedulerConfigError("the kube-scheduler manifest is not a Pod (kind %r)" % (doc.get('kind') if isinstance(doc, dict) else doc,))
    directory = check_config_path(config_path)
    new = copy.deepcopy(doc)
    spec = new.get('spec') or {}
    containers = spec.get('containers') or []
    found = [c for c in containers if isinstance(c, dict) and c.get('name') == container]
    if not found:
        raise SchedulerConfigError("the manifest has no container named %r (containers: %s)"
                                   % (container, ', '.join(str(c.get('name')) for c in containers if isinstance(c, dict))))
    ctr = found[0]
    command = list(ctr.get('command') or [])
    if not command:
        raise SchedulerConfigError("container %s has no command; expected kube-scheduler and its flags" % container)
    flags = dict(_split_flag(a) for a in command[1:] if str(a).startswith('--'))
    setting, remove, notes = flag_plan(version, config_path, dict((k, v or '') for k, v in flags.items()))
    command = [a for a in command if not (str(a).startswith('--') and _split_flag(a)[0] in remove)]
    for key, value in setting.items():
        entry = '--%s=%s' % (key, value)
        idx = [i for i, a in enumerate(command) if str(a).startswith('--') and _split_flag(a)[0] == key]
        if idx:
            command[idx[0]] = entry
        else:
            command.append(entry)
    ctr['command'] = command
    mounts = ctr.get('volumeMounts')
    others = [m.get('mountPath') for m in mounts or [] if isinstance(m, dict) and m.get('name') != VOLUME_NAME]
    if _covered([p for p in others if p], config_path):
        # the site's own mount already shows the file (a second mount at the same path is rejected)
        notes.append('%s is already mounted into kube-scheduler by the manifest; no mount added' % config_path)
    else:
        if mounts is None:
            mounts = ctr['volumeMounts'] = []
        mount = {'mountPath': directory, 'name': VOLUME_NAME, 'readOnly': True}
        _upsert_named(mounts, mount)
        volumes = spec.get('volumes')
        if volumes is None:
            volumes = spec['volumes'] = []
        _upsert_named(volumes, {'hostPath': {'path': directory, 'type': 'DirectoryOrCreate'}, 'name': VOLUME_NAME})
        clash = [v for v in volumes if v.get('name') != VOLUME_NAME and (v.get('hostPath') or {}).get('path') == directory]
        if clash:
            notes.append('volume %s also mounts %s' % (clash[0].get('name'), directory))
    if checksum:
        meta = new.setdefault('metadata', {})
        ann = meta.get('annotations')
        if ann is None:
            ann = meta['annotations'] = {}
        ann[CHECKSUM_KEY] = checksum
    return new, notes


def _upsert_named(items: list[Any], item: dict[str, Any]) -> None:
    for i, cur in enumerate(items):
        if isinstance(cur, dict) and cur.get('name') == item['name']:
            items[i] = item
            return
    items.append(item)


def kubeadm_cluster_configuration(doc: Doc, version: Version, config_path: str) -> Changed:
    """kubeadm's ClusterConfiguration (the kubeadm-config ConfigMap's data.ClusterConfiguration)."""
    if not isinstance(doc, dict) or doc.get('kind') != 'ClusterConfiguration':
        raise SchedulerConfigError("cluster_configuration is not a kubeadm ClusterConfiguration (kind %r)"
                                   % (doc.get('kind') if isinstance(doc, dict) else doc,))
    api = str(doc.get('apiVersion', ''))
    if api not in ('kubeadm.k8s.io/v1beta2', 'kubeadm.k8s.io/v1beta3', 'kubeadm.k8s.io/v1beta4'):
        raise SchedulerConfigError("cluster_configuration: apiVersion %r is not supported; allowed: kubeadm.k8s.io/v1beta2, "
                                   "kubeadm.k8s.io/v1beta3, kubeadm.k8s.io/v1beta4" % api)
    directory = check_config_path(config_path)
    new = copy.deepcopy(doc)
    sched = new.get('scheduler')
    if sched is None:
        sched = new['scheduler'] = {}
    if not isinstance(sched, dict):
        raise SchedulerConfigError("cluster_configuration: scheduler is not a mapping")
    as_list = api.endswith('v1beta4')
    # a list of name/value (v1beta4) or a mapping, as the document has it
    args: Any = sched.get('extraArgs')
    if args is None:
        args = sched['extraArgs'] = [] if as_list else {}
    if as_list:
        if not isinstance(args, list):
            raise SchedulerConfigError("cluster_configuration: scheduler.extraArgs must be a list of name/value in %s" % api)
        current = dict((str(a.get('name')), str(a.get('value', ''))) for a in args if isinstance(a, dict))
    else:
        if not isinstance(args, dict):
            raise SchedulerConfigError("cluster_configuration: scheduler.extraArgs must be a mapping in %s" % api)
        current = dict((k, str(v)) for k, v in args.items())
    setting, remove, notes = flag_plan(version, config_path, current)
    if as_list:
        args[:] = [a for a in args if not (isinstance(a, dict) and a.get('name') in remove)]
        for key, value in setting.items():
            _upsert_named(args, {'name': key, 'value': value})
    else:
        for key in remove:
            del args[key]
        args.update(setting)
    volumes = sched.get('extraVolumes')
    if volumes is None:
        volumes = sched['extraVolumes'] = []
    if not isinstance(volumes, list):
        raise SchedulerConfigError("cluster_configuration: scheduler.extraVolumes is not a list")
    _upsert_named(volumes, {'name': VOLUME_NAME, 'hostPath': directory, 'mountPath': directory, 'readOnly': True,
                            'pathType': 'DirectoryOrCreate'})
    return new, notes


# ---------------------------------------------------------------------------------------------------- state=absent
# Undo exactly what the functions above add: the flag naming config_path (only with that value), the mount of its
# directory, the checksum annotation / env entry; containers they created empty go too. Everything else stays.
# Policy flags removed for 1.23+ are not brought back (they stop kube-scheduler from starting).
OUR_FLAGS = ('config', 'policy-config-file')


def _drop_empty(mapping: dict[str, Any] | None, key: str) -> None:
    if mapping is not None and key in mapping and mapping[key] in ({}, [], None):
        del mapping[key]


def rke1_cluster_yml_absent(doc: Doc, config_path: str) -> Changed:
    if not isinstance(doc, dict):
        raise SchedulerConfigError("cluster.yml is not a mapping; is path an RKE1 cluster.yml?")
    directory = check_config_path(config_path)
    new = copy.deepcopy(doc)
    services = new.get('services')
    scheduler = services.get('scheduler') if isinstance(services, dict) else None
    if not isinstance(scheduler, dict):
        return new, []
    args = scheduler.get('extra_args')
    if isinstance(args, dict):
        for key in OUR_FLAGS:
            if key in args and str(args[key]) == config_path:
                del args[key]
    binds = scheduler.get('extra_binds')
    if isinstance(binds, list):
        scheduler['extra_binds'] = [b for b in binds if str(b) != '%s:%s:ro' % (directory, directory)]
    env = scheduler.get('extra_env')
    if isinstance(env, list):
        scheduler['extra_env'] = [e for e in env if str(e).split('=', 1)[0] != CHECKSUM_ENV]
    _drop_empty(scheduler, 'extra_args')  # empty lists stay: RKE1 reads them like missing keys
    _drop_empty(services, 'scheduler')
    _drop_empty(new, 'services')
    return new, []


def rke2_config_absent(doc: Doc, config_path: str) -> Changed:
    if doc is None:
        return None, []
    if not isinstance(doc, dict):
        raise SchedulerConfigError("RKE2 config.yaml is not a mapping")
    directory = check_config_path(config_path)
    new = copy.deepcopy(doc)
    if 'kube-scheduler-arg' in new:
        args = _as_list(new.get('kube-scheduler-arg'), 'kube-scheduler-arg')
        new['kube-scheduler-arg'] = [a for a in args
                                     if not (_split_flag(str(a))[0] in OUR_FLAGS and _split_flag(str(a))[1] == config_path)]
        _drop_empty(new, 'kube-scheduler-arg')
    if 'kube-scheduler-extra-mount' in new:
        mounts = _as_list(new.get('kube-scheduler-extra-mount'), 'kube-scheduler-extra-mount')
        new['kube-scheduler-extra-mount'] = [m for m in mounts if str(m) != '%s:%s:ro' % (directory, directory)]
        _drop_empty(new, 'kube-scheduler-extra-mount')
    return new, []


def kubeadm_manifest_absent(doc: Doc, config_path: str, container: str = 'kube-scheduler') -> Changed:
    if not isinstance(doc, dict) or doc.get('kind') != 'Pod':
        raise SchedulerConfigError("the kube-scheduler manifest is not a Pod (kind %r)" % (doc.get('kind') if isinstance(doc, dict) else doc,))
    check_config_path(config_path)
    new = copy.deepcopy(doc)
    spec = new.get('spec') or {}
    for ctr in spec.get('containers') or []:
        if not isinstance(ctr, dict) or ctr.get('name') != container:
            continue
        ctr['command'] = [a for a in ctr.get('command') or []
                          if not (str(a).startswith('--') and _split_flag(str(a))[0] in OUR_FLAGS
                                  and _split_flag(str(a))[1] == config_path)]
        if isinstance(ctr.get('volumeMounts'), list):
            ctr['volumeMounts'] = [m for m in ctr['volumeMounts'] if not (isinstance(m, dict) and m.get('name') == VOLUME_NAME)]
            _drop_empty(ctr, 'volumeMounts')
    if isinstance(spec.get('volumes'), list):
        spec['volumes'] = [v for v in spec['volumes'] if not (isinstance(v, dict) and v.get('name') == VOLUME_NAME)]
        _drop_empty(spec, 'volumes')
    meta = new.get('metadata')
    if isinstance(meta, dict) and isinstance(meta.get('annotations'), dict):
        meta['annotations'].pop(CHECKSUM_KEY, None)
        _drop_empty(meta, 'annotations')
    return new, []


def kubeadm_cluster_configuration_absent(doc: Doc, config_path: str) -> Changed:
    if not isinstance(doc, dict) or doc.get('kind') != 'ClusterConfiguration':
        raise SchedulerConfigError("cluster_configuration is not a kubeadm ClusterConfiguration (kind %r)"
                                   % (doc.get('kind') if isinstance(doc, dict) else doc,))
    check_config_path(config_path)
    new = copy.deepcopy(doc)
    sched = new.get('scheduler')
    if not isinstance(sched, dict):
        return new, []
    args = sched.get('extraArgs')
    if isinstance(args, list):
        sched['extraArgs'] = [a for a in args if not (isinstance(a, dict) and a.get('name') in OUR_FLAGS
                                                      and str(a.get('value', '')) == config_path)]
    elif isinstance(args, dict):
        for key in OUR_FLAGS:
            if key in args and str(args[key]) == config_path:
                del args[key]
    if isinstance(sched.get('extraVolumes'), list):
        sched['extraVolumes'] = [v for v in sched['extraVolumes'] if not (isinstance(v, dict) and v.get('name') == VOLUME_NAME)]
    _drop_empty(sched, 'extraArgs')
    _drop_empty(sched, 'extraVolumes')
    return new, []
