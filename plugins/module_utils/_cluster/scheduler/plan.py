# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planning of the kube_scheduler_config module: which file, which document, what changes - without writing.

plan() reads through injectable functions (read, exists, sha256), so the unit tests run it on fixture files."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import adapters as A
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as R
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_distributions as KD
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.file_utils import read_text

# the Kubernetes distributions' scheduler layouts: one table, _common/kube_distributions.py
MODE_DISTRIBUTION = KD.MODE_DISTRIBUTION
DISTRIBUTION_MODE = KD.DISTRIBUTION_MODE
DEFAULT_PATHS = KD.SCHEDULER_DEFAULT_PATHS
CONFIG_DIRS = A.OWN_DIRS


def _sha256(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def plan(params: dict[str, Any], read: Callable[[str], str | None] = read_text,
         exists: Callable[[str], bool] = os.path.exists, sha256: Callable[[str], str] = _sha256) -> dict[str, Any]:
    """Everything the module decides, without writing: returns a dict (see main). Raises SchedulerConfigError."""
    mode = params['mode']
    absent = params.get('state') == 'absent'
    version = params['kubernetes_version']
    R.parse_version(version)
    api = R.api_for_version(version)
    distribution = MODE_DISTRIBUTION.get(mode) or params.get('distribution')
    if params.get('distribution') and mode in MODE_DISTRIBUTION and params['distribution'] != distribution:
        raise R.SchedulerConfigError("distribution: %s does not match mode=%s (which is %s)" % (params['distribution'], mode, distribution))
    config_path = params.get('config_path')
    if not config_path:
        if not distribution:
            raise R.SchedulerConfigError("distribution: required with mode=scheduler_config unless config_path is set; "
                                         "allowed values: rke1, rke2, kubeadm")
        name = 'scheduler-policy.json' if api['kind'] == R.POLICY else 'scheduler-config.yaml'
        config_path = CONFIG_DIRS[distribution] + '/' + name
    A.check_config_path(config_path)
    eol = R.eol_note(version)
    result: dict[str, Any]
    result = {'kind': api['kind'], 'api_version': api['apiVersion'], 'flag': api['flag'], 'config_path': config_path,
              'notes': [eol] if eol else []}

    if mode == 'discover':
        return _plan_discover(params, result, read, distribution, config_path)
    site_owned = False
    if mode == 'scheduler_config':
        flags = dict((str(k), str(v)) for k, v in (params.get('current_flags') or {}).items() if v)
        config_path, site_owned, notes = A.resolve_config_path(version, flags, config_path,
                                                               explicit=bool(params.get('config_path')))
        result.update(config_path=config_path, site_owned=site_owned)
        result['notes'] += notes

    if mode == 'kubeadm_configmap':
        text = params.get('cluster_configuration')
        if not text or not text.strip():
            raise R.SchedulerConfigError("cluster_configuration: required with mode=kubeadm_configmap (the ClusterConfiguration "
                                         "key of the kube-system/kubeadm-config ConfigMap)")
        old = R.load(text, 'yaml', 'cluster_configuration')
        if absent:
            new, notes = A.kubeadm_cluster_configuration_absent(old, config_path)
        else:
            new, notes = A.kubeadm_cluster_configuration(old, version, config_path)
        result.update(document=new, notes=notes, changed=new != old, before=text,
                      after=R.dump(new, 'yaml') if new != old else text)
        result['cluster_configuration'] = result['after']
        return result

    path = params.get('path') or (config_path if mode == 'scheduler_config' else DEFAULT_PATHS.get(mode))
    if not path:
        raise R.SchedulerConfigError("path: required with mode=%s (the cluster.yml that `rke up` reads)" % mode)
    text = read(path)
    fmt = api['format'] if mode == 'scheduler_config' else 'yaml'
    old = R.load(text, fmt, path)
    if absent:
        return _plan_absent(params, result, mode, path, text, old, fmt, config_path)
    if mode == 'scheduler_config':
        if not params.get('extenders'):
            raise R.SchedulerConfigError("extenders: required with mode=scheduler_config (a non-empty list)")
        kubeconfig = None
        if api['kind'] == R.KSC:
            kubeconfig = R.kubeconfig_for(distribution, params.get('kubeconfig'))
        if site_owned and old is None:
            raise R.SchedulerConfigError("%s is named by kube-scheduler's --%s but is missing or empty on this host; "
                                         "refusing to create the site's file - check the path" % (path, api['flag']))
        new, notes = R.merge(old, version, params['extenders'], kubeconfig, source=path, site_owned=site_owned)
    elif mode == 'rke1_cluster_yml':
        if old is None:
            raise R.SchedulerConfigError("path: %s does not exist or is empty; the RKE1 cluster.yml must exist" % path)
        new, notes = A.rke1_cluster_yml(old, version, config_path, params.get('config_checksum'))
    elif mode == 'rke2_config':
        new, notes = A.rke2_config(old, version, config_path)
    else:
        if old is None:
            raise R.SchedulerConfigError("path: %s does not exist or is empty; is this a kubeadm control-plane node?" % path)
        checksum = params.get('config_checksum')
        if not checksum and exists(config_path):
            checksum = sha256(config_path)
        new, notes = A.kubeadm_manifest(old, version, config_path, checksum)
    changed = new != old
    result.update(path=path, document=new, notes=result['notes'] + notes, changed=changed, before=text or '',
                  after=R.dump(new, fmt) if changed else (text or ''))
    result['content'] = result['after']
    return result


def _plan_discover(params: dict[str, Any], result: dict[str, Any], read: Callable[[str], str | None],
                   distribution: str | None, config_path: str) -> dict[str, Any]:
    """mode=discover: read the distribution's file, return the flags naming a config file and where the extenders go."""
    if not distribution:
        raise R.SchedulerConfigError("distribution: required with mode=discover; allowed values: rke1, rke2, kubeadm")
    source = DISTRIBUTION_MODE[distribution]
    path = params.get('path') or DEFAULT_PATHS.get(source)
    if not path:
        raise R.SchedulerConfigError("path: required with mode=discover and distribution=rke1 (the cluster.yml that `rke up` reads)")
    old = R.load(read(path), 'yaml', path)
    notes: list[str] = []
    if distribution == 'rke1':
        if old is None:
            raise R.SchedulerConfigError("path: %s does not exist or is empty; the RKE1 cluster.yml must exist" % path)
        if not isinstance(old, dict):
            raise R.SchedulerConfigError("cluster.yml is not a mapping; is path an RKE1 cluster.yml?")
        notes += A.rke1_version_check(old, params['kubernetes_version'])
    elif distribution == 'kubeadm' and old is None:
        raise R.SchedulerConfigError("path: %s does not exist or is empty; is this a kubeadm control-plane node?" % path)
    flags = A.current_flags(source, old)
    resolved, site_owned, more = A.resolve_config_path(params['kubernetes_version'], flags, config_path,
                                                       explicit=bool(params.get('config_path')))
    result.update(path=path, flags=flags, config_path=resolved, site_owned=site_owned, changed=False, document=None,
                  notes=result['notes'] + notes + more)
    return result


def _plan_absent(params: dict[str, Any], result: dict[str, Any], mode: str, path: str, text: str | None, old: Any,
                 fmt: str, config_path: str) -> dict[str, Any]:
    """state=absent: the document without what the module adds; result['delete'] when the file goes."""
    delete = False
    if mode == 'scheduler_config':
        if not params.get('extenders'):
            raise R.SchedulerConfigError("extenders: required with mode=scheduler_config and state=absent (the url_prefix of "
                                         "each extender to remove)")
        new, skeleton = R.remove_extenders(old, [e['url_prefix'] for e in params['extenders']], source=path)
        own_dir = os.path.dirname(path) in CONFIG_DIRS.values()
        delete = old is not None and skeleton and own_dir
        result['config_removed'] = old is None or delete
    elif old is None:
        new = None  # nothing to undo in a missing file
    elif mode == 'rke1_cluster_yml':
        new, _n = A.rke1_cluster_yml_absent(old, config_path)
    elif mode == 'rke2_config':
        new, _n = A.rke2_config_absent(old, config_path)
    else:
        new, _n = A.kubeadm_manifest_absent(old, config_path)
    changed = delete or new != old
    if delete:
        after = ''
    else:
        after = (R.dump(new, fmt) if new is not None else '') if changed else (text or '')
    result.update(path=path, document=None if delete else new, changed=changed, before=text or '', after=after,
                  content=after, delete=delete)
    return result
