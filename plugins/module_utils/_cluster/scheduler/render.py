# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube-scheduler extender configuration: API window per Kubernetes version, extender validation, rendering
of a Policy (JSON) or KubeSchedulerConfiguration (YAML) document, and merging into an existing document.

Pure functions (no I/O) so that every rule is unit-tested. Errors raise SchedulerConfigError with a message that
names the option and the allowed values.

The Kubernetes versions, the API windows and the one version parser live in _common/kube_versions.py: Policy
below 1.23, v1beta3 for 1.23-1.24 and v1 from 1.25; SUPPORTED_MIN_MINOR-MAX_MINOR is the supported range, MIN_MINOR
up to it stays accepted for legacy (RKE1) clusters and every result says they are end of life.
"""
from __future__ import annotations

import copy
import json
import re
from typing import Any, Union

YAML_IMPORT_ERROR: ImportError | None
try:
    import yaml
    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None
    HAS_YAML = False
    YAML_IMPORT_ERROR = exc

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions as KV
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.kube_versions import (  # pylint: disable=unused-import
    KSC, KSC_GROUP, MAX_MINOR, MIN_MINOR, POLICY, SUPPORTED_MIN_MINOR,  # noqa: F401 (re-exported: R.KSC_GROUP)
)

# distribution -> the kube-scheduler kubeconfig it generates (clientConnection.kubeconfig)
KUBECONFIGS = {
    'rke1': '/etc/kubernetes/ssl/kubecfg-kube-scheduler.yaml',
    'rke2': '/var/lib/rancher/rke2/server/cred/scheduler.kubeconfig',
    'kubeadm': '/etc/kubernetes/scheduler.conf',
}

# every served apiVersion of the scheduler's component config, as (first minor, last minor) by version name
SERVED_WINDOWS = dict((api.rsplit('/', 1)[-1], window) for api, window in KV.SCHEDULER_CONFIG_WINDOWS.items())

_DURATION_RE = re.compile(r'^(\d+(?:\.\d+)?)(ms|s|m|h)$')
_DURATION_NS = {'ms': 10 ** 6, 's': 10 ** 9, 'm': 60 * 10 ** 9, 'h': 3600 * 10 ** 9}
# extended resource names: a domain-prefixed name (not kubernetes.io), like aliyun.com/gpu-mem
_RESOURCE_RE = re.compile(r'^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')

EXTENDER_KEYS = ('url_prefix', 'filter_verb', 'prioritize_verb', 'preempt_verb', 'bind_verb', 'weight',
                 'enable_https', 'http_timeout', 'node_cache_capable', 'managed_resources', 'ignorable')

# gpushare-scheduler-extender's standard registration
GPUSHARE_EXTENDER = {
    'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler',
    'filter_verb': 'filter',
    'bind_verb': 'bind',
    'node_cache_capable': True,
    'managed_resources': [{'name': 'aliyun.com/gpu-mem', 'ignored_by_scheduler': False}],
    'ignorable': False,
}


class SchedulerConfigError(Exception):
    """A refused input; the message names the option, the value and what is allowed."""


# a Kubernetes version as the options give it ('v1.29.4', '1.29') or parsed ((1, 29))
# (a runtime alias: Union, as ansible-test's pylint checks module_utils as Python 3.9 code, where str | tuple fails)
Version = Union[str, tuple[int, ...]]
# a normalized extender (normalize_extenders: snake_case keys) and a rendered document (upstream field names)
Extender = dict[str, Any]
Document = dict[str, Any]


def parse_version(value: object, option: str = 'kubernetes_version') -> tuple[int, int]:
    """'v1.29.4', '1.29', '1.29.4-rke2r1' -> (1, 29). Refuses versions outside MIN_MINOR-MAX_MINOR."""
    parsed = KV.parse(value)
    if not parsed:
        raise SchedulerConfigError("%s: %r is not a Kubernetes version; expected a form like v1.29.4 or 1.29 "
                                   "(supported: 1.%d-1.%d)" % (option, value, MIN_MINOR, MAX_MINOR))
    major, minor = parsed[0], parsed[1]
    if major != 1 or not KV.in_range(minor, KV.ACCEPTED):
        raise SchedulerConfigError("%s: Kubernetes %d.%d is not supported; supported versions are 1.%d-1.%d "
                                   "(%s)"
                                   % (option, major, minor, MIN_MINOR, MAX_MINOR, KV.scheduler_config_summary()))
    return major, minor


def eol_note(version: Version) -> str | None:
    """A note for minors below the supported range (accepted only for legacy clusters), else None."""
    minor = parse_version(version)[1] if not isinstance(version, tuple) else version[1]
    if minor < SUPPORTED_MIN_MINOR:
        return ("Kubernetes 1.%d is end of life upstream; it is accepted only for legacy clusters (supported: 1.%d-1.%d)"
                % (minor, SUPPORTED_MIN_MINOR, MAX_MINOR))
    return None


def api_for_version(version: Version) -> dict[str, str]:
    """The document kind and apiVersion this collection renders for a Kubernetes version."""
    minor = parse_version(version)[1] if not isinstance(version, tuple) else version[1]
    kind, api = KV.scheduler_config_api(minor)
    if kind == POLICY:
        return {'kind': POLICY, 'apiVersion': api, 'flag': 'policy-config-file', 'format': 'json'}
    return {'kind': KSC, 'apiVersion': api, 'flag': 'config', 'format': 'yaml'}


def kubeconfig_for(distribution: str | None, kubeconfig: str | None = None) -> str:
    if kubeconfig:
        return kubeconfig
    if distribution is None or distribution not in KUBECONFIGS:
        raise SchedulerConfigError("distribution: %r is not known; allowed values: %s (or set kubeconfig)"
                                   % (distribution, ', '.join(sorted(KUBECONFIGS))))
    return KUBECONFIGS[distribution]


def parse_duration(value: object, where: str) -> int:
    """'30s', '1m', '500ms', '1.5s' -> nanoseconds (int)."""
    m = _DURATION_RE.match(str(value).strip())
    if not m:
        raise SchedulerConfigError("%s.http_timeout: %r is not a duration; use a number with ms, s, m or h, "
                                   "like 30s" % (where, value))
    ns = int(round(float(m.group(1)) * _DURATION_NS[m.group(2)]))
    if ns <= 0:
        raise SchedulerConfigError("%s.http_timeout: %r must be longer than 0" % (where, value))
    return ns


def _format_duration(ns: int) -> str:
    for unit in ('h', 'm', 's'):
        if ns % _DURATION_NS[unit] == 0:
            return '%d%s' % (ns // _DURATION_NS[unit], unit)
    return '%dms' % (ns // _DURATION_NS['ms']) if ns % _DURATION_NS['ms'] == 0 else '%dns' % ns


def _bool(value: object, where: str, key: str) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    raise SchedulerConfigError("%s.%s: %r is not a boolean; allowed values: true, false" % (where, key, value))


def _verb(value: object, where: str, key: str) -> str | None:
    if value is None or value == '':
        return None
    if not isinstance(value, str) or not re.match(r'^[A-Za-z0-9][-A-Za-z0-9_./]*$', value):
        raise SchedulerConfigError("%s.%s: %r is not a valid verb (a path segment such as 'filter')" % (where, key, value))
    return value


def normalize_extenders(extenders: object, option: str = 'extenders') -> list[Extender]:
    """Validate the user's extender list (snake_case keys) and return normalized dicts.

    Rules follow kube-scheduler's validation: urlPrefix is an http(s) URL, unique; weight is a positive integer
    when prioritizeVerb is set; at most one extender implements bind; managedResources names are extended
    resource names, unique per extender; at least one verb.
    """
    if not isinstance(extenders, list) or not extenders:
        raise SchedulerConfigError("%s: must be a non-empty list of extenders (each a dict with at least url_prefix "
                                   "and one of filter_verb, prioritize_verb, preempt_verb, bind_verb)" % option)
    out: list[Extender] = []
    seen: set[str] = set()
    binders: list[str] = []
    all_resources: dict[str, str] = {}   # kube-scheduler refuses a managed resource name listed by two extenders
    for index, ext in enumerate(extenders):
        where = '%s[%d]' % (option, index)
        if not isinstance(ext, dict):
            raise SchedulerConfigError("%s: %r is not a dict; expected keys: %s" % (where, ext, ', '.join(EXTENDER_KEYS)))
        unknown = sorted(set(ext) - set(EXTENDER_KEYS))
        if unknown:
            raise SchedulerConfigError("%s: unknown key(s) %s; allowed keys: %s" % (where, ', '.join(unknown), ', '.join(EXTENDER_KEYS)))
        url = ext.get('url_prefix')
        if not isinstance(url, str) or not re.match(r'^https?://[^\s/]+(/\S*)?$', url):
            raise SchedulerConfigError("%s.url_prefix: %r is not an http:// or https:// URL (e.g. "
                                       "http://127.0.0.1:32766/gpushare-scheduler)" % (where, url))
        url = url.rstrip('/')
        if url in seen:
            raise SchedulerConfigError("%s.url_prefix: %s is listed twice; each extender needs its own url_prefix" % (where, url))
        seen.add(url)
        norm: Extender = {'url_prefix': url}
        for key in ('filter_verb', 'prioritize_verb', 'preempt_verb', 'bind_verb'):
            verb = _verb(ext.get(key), where, key)
            if verb:
                norm[key] = verb
        if not any(k in norm for k in ('filter_verb', 'prioritize_verb', 'preempt_verb', 'bind_verb')):
            raise SchedulerConfigError("%s: an extender needs at least one of filter_verb, prioritize_verb, preempt_verb, bind_verb" % where)
        weight = ext.get('weight')
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
                raise SchedulerConfigError("%s.weight: %r must be a positive integer" % (where, weight))
            if 'prioritize_verb' not in norm:
                raise SchedulerConfigError("%s.weight: only meaningful with prioritize_verb; set prioritize_verb or drop weight" % where)
            norm['weight'] = weight
        elif 'prioritize_verb' in norm:
            norm['weight'] = 1
        if 'bind_verb' in norm:
            binders.append(where)
        for key in ('enable_https', 'node_cache_capable', 'ignorable'):
            val = _bool(ext.get(key), where, key)
            norm[key] = bool(val)
        if norm['enable_https'] and not url.startswith('https://'):
            raise SchedulerConfigError("%s.enable_https: true needs an https:// url_prefix (got %s)" % (where, url))
        if ext.get('http_timeout') not in (None, ''):
            norm['http_timeout_ns'] = parse_duration(ext['http_timeout'], where)
        resources = ext.get('managed_resources') or []
        if not isinstance(resources, list):
            raise SchedulerConfigError("%s.managed_resources: must be a list of names or of dicts with name and ignored_by_scheduler" % where)
        names: list[str] = []
        norm_res: list[dict[str, Any]] = []
        for rindex, res in enumerate(resources):
            rwhere = '%s.managed_resources[%d]' % (where, rindex)
            if isinstance(res, str):
                res = {'name': res}
            if not isinstance(res, dict) or set(res) - {'name', 'ignored_by_scheduler'}:
                raise SchedulerConfigError("%s: %r is not a resource name or a dict with keys name, ignored_by_scheduler" % (rwhere, res))
            name = res.get('name')
            if not isinstance(name, str) or not _RESOURCE_RE.match(name) or name.split('/')[0].endswith('kubernetes.io'):
                raise SchedulerConfigError("%s.name: %r is not an extended resource name (domain/name outside kubernetes.io, "
                                           "e.g. aliyun.com/gpu-mem)" % (rwhere, name))
            if name in names:
                raise SchedulerConfigError("%s.name: %s is listed twice" % (rwhere, name))
            if name in all_resources:
                raise SchedulerConfigError("%s.name: %s is already managed by %s; kube-scheduler refuses a managed "
                                           "resource listed by two extenders" % (rwhere, name, all_resources[name]))
            all_resources[name] = where
            names.append(name)
            norm_res.append({'name': name, 'ignored_by_scheduler': bool(_bool(res.get('ignored_by_scheduler'), rwhere, 'ignored_by_scheduler'))})
        if norm_res:
            norm['managed_resources'] = norm_res
        out.append(norm)
    if len(binders) > 1:
        raise SchedulerConfigError("%s: only one extender may implement bind_verb (kube-scheduler refuses more); set in %s"
                                   % (option, ', '.join(binders)))
    return out


def render_extender(ext: Extender, kind: str) -> Document:
    """A normalized extender as a Policy or KubeSchedulerConfiguration entry (upstream field names)."""
    doc: Document = {'urlPrefix': ext['url_prefix']}
    for key, field in (('filter_verb', 'filterVerb'), ('prioritize_verb', 'prioritizeVerb'),
                       ('preempt_verb', 'preemptVerb'), ('bind_verb', 'bindVerb'), ('weight', 'weight')):
        if key in ext:
            doc[field] = ext[key]
    doc['enableHttps' if kind == POLICY else 'enableHTTPS'] = ext['enable_https']
    if 'http_timeout_ns' in ext:
        # Policy: Go time.Duration (integer nanoseconds); component config: metav1.Duration string
        doc['httpTimeout'] = ext['http_timeout_ns'] if kind == POLICY else _format_duration(ext['http_timeout_ns'])
    doc['nodeCacheCapable'] = ext['node_cache_capable']
    if ext.get('managed_resources'):
        doc['managedResources'] = [{'name': r['name'], 'ignoredByScheduler': r['ignored_by_scheduler']}
                                   for r in ext['managed_resources']]
    doc['ignorable'] = ext['ignorable']
    return doc


def render(version: Version, extenders: object, kubeconfig: str | None = None) -> Document:
    """A fresh document for the version: Policy (no kubeconfig: the flag --kubeconfig stays in charge) or
    KubeSchedulerConfiguration with clientConnection.kubeconfig."""
    api = api_for_version(version)
    norm = normalize_extenders(extenders)
    if api['kind'] == POLICY:
        return {'kind': POLICY, 'apiVersion': 'v1', 'extenders': [render_extender(e, POLICY) for e in norm]}
    if not kubeconfig:
        raise SchedulerConfigError("kubeconfig: required for %s (set distribution to rke1, rke2 or kubeadm, or kubeconfig)" % api['apiVersion'])
    return {'apiVersion': api['apiVersion'], 'kind': KSC,
            'clientConnection': {'kubeconfig': kubeconfig},
            'extenders': [render_extender(e, KSC) for e in norm]}


def served(api_version: object, minor: int) -> bool:
    """Whether kube-scheduler 1.<minor> reads the component config apiVersion (SERVED_WINDOWS)."""
    return KV.scheduler_config_served(str(api_version), minor)


def merge(existing: object, version: Version, extenders: object, kubeconfig: str | None = None,
          source: str = 'the existing config', site_owned: bool = False) -> tuple[Document, list[str]]:
    """Merge our extenders into an existing document (dict or None) and return (document, notes).

    Every other key is kept: other extenders (matched by urlPrefix), profiles, leaderElection, predicates,
    priorities... Our extenders replace entries with the same urlPrefix in place, new ones are appended.
    A KubeSchedulerConfiguration of another served apiVersion is moved to the rendered one (the fields this
    module touches are identical in v1beta2, v1beta3 and v1) and a note says so. A document of the other kind
    (Policy vs component config) is refused: the two cannot be converted without losing settings.

    site_owned: the file is the one kube-scheduler's own --config (or --policy-config-file) names, the site's.
    It stays in charge: its apiVersion is kept when the version still serves it (refused otherwise, as its
    profiles would need a conversion), and its clientConnection is kept (ours is only added when it has none).
    """
    fresh = render(version, extenders, kubeconfig)
    notes: list[str] = []
    if existing is None or existing == {}:
        return fresh, notes
    if not isinstance(existing, dict):
        raise SchedulerConfigError("%s is not a mapping (it holds a %s); refusing to overwrite it" % (source, type(existing).__name__))
    doc = copy.deepcopy(existing)
    kind = doc.get('kind')
    if kind != fresh['kind']:
        raise SchedulerConfigError(
            "%s holds kind %r but Kubernetes %s needs a %s (%s); refusing to convert it - move it aside or point "
            "config_path at a new file" % (source, kind, '.'.join(str(p) for p in parse_version(version)),
                                           fresh['kind'], fresh['apiVersion']))
    minor = parse_version(version)[1] if not isinstance(version, tuple) else version[1]
    if kind == KSC and doc.get('apiVersion') != fresh['apiVersion']:
        old = doc.get('apiVersion')
        if site_owned and served(old, minor):
            notes.append('%s: kept the site\'s apiVersion %s (Kubernetes 1.%d serves it)' % (source, old, minor))
        elif site_owned:
            raise SchedulerConfigError(
                "%s (the site's kube-scheduler --config) has apiVersion %s, which Kubernetes 1.%d does not serve; "
                "refusing to convert the site's profiles - move it to %s first" % (source, old, minor, fresh['apiVersion']))
        else:
            notes.append('%s: apiVersion %s changed to %s' % (source, old, fresh['apiVersion']))
            doc['apiVersion'] = fresh['apiVersion']
    if kind == KSC:
        cc = doc.get('clientConnection')
        if cc is None:
            cc = doc['clientConnection'] = {}
        if not isinstance(cc, dict):
            raise SchedulerConfigError("%s: clientConnection is not a mapping" % source)
        if not site_owned or not cc.get('kubeconfig'):
            if site_owned:
                notes.append('%s: clientConnection.kubeconfig was missing; set to %s'
                             % (source, fresh['clientConnection']['kubeconfig']))
            cc['kubeconfig'] = fresh['clientConnection']['kubeconfig']
    current = doc.get('extenders')
    if current is None:
        current = doc['extenders'] = []
    if not isinstance(current, list):
        raise SchedulerConfigError("%s: extenders is not a list" % source)
    for ext in fresh['extenders']:
        for index, old in enumerate(current):
            if isinstance(old, dict) and str(old.get('urlPrefix', '')).rstrip('/') == ext['urlPrefix']:
                current[index] = ext
                break
        else:
            current.append(ext)
    owners: dict[Any, Any] = {}
    for ext in current:
        for res in (ext.get('managedResources') or []) if isinstance(ext, dict) else []:
            name = res.get('name') if isinstance(res, dict) else None
            if name in owners:
                raise SchedulerConfigError("extenders: after merging, %s would list the managed resource %s in two "
                                           "extenders (%s, %s); kube-scheduler refuses that"
                                           % (source, name, owners[name], ext.get('urlPrefix')))
            owners[name] = ext.get('urlPrefix')
    binders = [str(e.get('urlPrefix')) for e in current if isinstance(e, dict) and e.get('bindVerb')]
    if len(binders) > 1:
        raise SchedulerConfigError("extenders: after merging, %s would have %d extenders with bindVerb (%s); kube-scheduler "
                                   "allows one" % (source, len(binders), ', '.join(binders)))
    return doc, notes


def load(text: str | None, fmt: str, source: str) -> Any:
    """Parse YAML (a single document) or JSON text; '' -> None."""
    if text is None or not text.strip():
        return None
    try:
        # YAML is a superset of JSON: one parser for both, so a file of the other format gets a clear kind error
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except Exception as exc:  # yaml.YAMLError / ValueError
        raise SchedulerConfigError("%s cannot be parsed as %s: %s" % (source, fmt.upper(), exc))
    if len(docs) > 1:
        raise SchedulerConfigError("%s holds %d YAML documents; expected one" % (source, len(docs)))
    return docs[0] if docs else None


def dump(doc: object, fmt: str) -> str:
    if fmt == 'json':
        return json.dumps(doc, indent=2) + '\n'
    return yaml.safe_dump(doc, default_flow_style=False, sort_keys=False, width=1000)


def remove_extenders(existing: object, url_prefixes: list[str], source: str = 'the existing config'
                     ) -> tuple[Document | None, bool]:
    """Remove the extenders whose urlPrefix is one of url_prefixes (state=absent); every other key stays.

    Returns (document, only_skeleton): only_skeleton is True when nothing is left but what render() writes besides
    the extenders (kind, apiVersion, clientConnection.kubeconfig), i.e. the document holds nothing of anyone else.
    An empty "extenders" list is dropped. None (no file) gives (None, True).
    """
    if existing is None or existing == {}:
        return None, True
    if not isinstance(existing, dict):
        raise SchedulerConfigError("%s is not a mapping (it holds a %s); refusing to edit it" % (source, type(existing).__name__))
    doc = copy.deepcopy(existing)
    current = doc.get('extenders')
    if current is not None and not isinstance(current, list):
        raise SchedulerConfigError("%s: extenders is not a list" % source)
    ours = set(str(u).rstrip('/') for u in url_prefixes)
    if current is not None:
        kept = [e for e in current if not (isinstance(e, dict) and str(e.get('urlPrefix', '')).rstrip('/') in ours)]
        if kept:
            doc['extenders'] = kept
        else:
            del doc['extenders']
    cc = doc.get('clientConnection')
    skeleton = (set(doc) <= set(['kind', 'apiVersion', 'clientConnection'])
                and (cc is None or (isinstance(cc, dict) and set(cc) <= set(['kubeconfig']))))
    return doc, skeleton
