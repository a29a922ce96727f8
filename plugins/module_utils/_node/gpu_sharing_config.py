# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse and validate MIG configurations in NVIDIA mig-parted's file format, and the GPU selection.

The format (``version: v1``)::

    version: v1
    mig-configs:
      all-1g.10gb:
        - devices: all            # or a list of GPU indexes
          device-filter: 0x20B210DE   # optional: PCI device id(s), device<<16 | vendor
          mig-enabled: true
          mig-devices:
            1g.10gb: 7

Nothing here talks to hardware: errors are raised as :class:`SharingError` with a message that names the
entry, the value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.gpu_sharing_plan import (  # noqa: F401 pylint: disable=unused-import
    SharingError, canonical_profile_name, filter_matches, normalize_profile_name, parse_pci_device_id, parse_profile_name,
)

_ENTRY_KEYS = ('devices', 'device-filter', 'mig-enabled', 'mig-devices')
# The attributes NVML's GPU-instance profiles carry (go-nvlib, as vendored by mig-parted v0.15.0): media extensions
# (+me: NVML_GPU_INSTANCE_PROFILE_*_REV1), all media engines (+me.all: *_ALL_ME), graphics (+gfx: *_GFX) and no
# media engines (-me: *_NO_ME).
KNOWN_ATTRIBUTES = ('me', 'me.all', 'gfx')


def _profile_key(where: str, name: str) -> str:
    try:
        parsed = parse_profile_name(name)
    except ValueError as exc:
        raise SharingError("%s: '%s' is not a MIG profile name (%s); expected a name like '1g.10gb', '3g.40gb', "
                           "'1g.10gb+me', '1g.24gb+me.all', '1g.24gb-me' or '1g.24gb+gfx' (optionally prefixed with "
                           "'MIG ')" % (where, name, exc))
    if parsed['c'] != parsed['g']:
        raise SharingError(
            "%s: MIG profile '%s' is a compute-instance profile; only GPU-instance profiles (for example "
            "'1g.10gb' or '3g.40gb', each with one full-size compute instance) are supported" % (where, name))
    unknown = [a for a in parsed['attributes'] if a not in KNOWN_ATTRIBUTES]
    if unknown:
        raise SharingError("%s: MIG profile '%s' has attribute(s) %s that no NVIDIA GPU offers; allowed are %s"
                           % (where, name, ', '.join(unknown), ', '.join('+' + a for a in KNOWN_ATTRIBUTES) + ', -me'))
    if parsed['negated'] and parsed['attributes'] != ['me']:
        raise SharingError("%s: MIG profile '%s': only '-me' (no media engines) is a negative attribute" % (where, name))
    return parsed['name']


def _entry_devices(where: str, value: Any) -> str | list[int]:
    if value is None:
        raise SharingError("%s: 'devices' is required; use 'all' or a list of GPU indexes" % where)
    if isinstance(value, str):
        if value.strip().lower() == 'all':
            return 'all'
        raise SharingError("%s: devices '%s' is not allowed; use 'all' or a list of GPU indexes" % (where, value))
    if isinstance(value, bool) or isinstance(value, int):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise SharingError("%s: devices %r is not allowed; use 'all' or a non-empty list of GPU indexes" % (where, value))
    out: list[int] = []
    for item in value:
        if isinstance(item, bool):
            raise SharingError("%s: device %r is not a GPU index; use integers >= 0" % (where, item))
        try:
            idx = int(item)
        except (TypeError, ValueError):
            raise SharingError("%s: device %r is not a GPU index; use integers >= 0" % (where, item))
        if idx < 0:
            raise SharingError("%s: device %r is not a GPU index; use integers >= 0" % (where, item))
        if idx not in out:
            out.append(idx)
    return out


def _entry_bool(where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ('true', 'yes', 'on', '1'):
        return True
    if text in ('false', 'no', 'off', '0'):
        return False
    raise SharingError("%s: mig-enabled %r is not allowed; use true or false" % (where, value))


def _entry_mig_devices(where: str, value: Any, enabled: bool) -> dict[str, int]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SharingError("%s: mig-devices must be a mapping of MIG profile to count, e.g. {'1g.10gb': 7}; got %r"
                           % (where, value))
    if value and not enabled:
        raise SharingError("%s: mig-devices %r given with mig-enabled false; MIG devices need mig-enabled true"
                           % (where, dict(value)))
    out: dict[str, int] = {}
    for name, count in value.items():
        prof = _profile_key(where, name)
        if isinstance(count, bool):
            raise SharingError("%s: count %r for MIG profile '%s' is not allowed; use an integer >= 0" % (where, count, name))
        try:
            num = int(count)
        except (TypeError, ValueError):
            raise SharingError("%s: count %r for MIG profile '%s' is not allowed; use an integer >= 0" % (where, count, name))
        if num < 0 or str(num) != str(count).strip():
            raise SharingError("%s: count %r for MIG profile '%s' is not allowed; use an integer >= 0" % (where, count, name))
        if prof in out:
            raise SharingError("%s: MIG profile '%s' is listed twice (names are compared without a 'MIG ' prefix)"
                               % (where, name))
        if num:
            out[prof] = num
    return out


def parse_mig_config(config: Any, name: str | None) -> list[dict[str, Any]]:
    """Validate a mig-parted document and return the entries of the config ``name``.

    Each returned entry: ``{'devices': 'all' | [int], 'device_filter': [(int, full)] | None,
    'mig_enabled': bool, 'mig_devices': {profile: count}, 'where': str}``.
    """
    if not isinstance(config, dict):
        raise SharingError("mig_config must be a mapping in mig-parted format (version: v1, mig-configs: ...); got %s"
                           % type(config).__name__)
    version = config.get('version')
    if str(version) != 'v1':
        raise SharingError("mig_config: version %r is not supported; only 'v1' is" % (version,))
    unknown = sorted(set(config) - set(['version', 'mig-configs']))
    if unknown:
        raise SharingError("mig_config: unknown key(s) %s; allowed are 'version' and 'mig-configs'" % ', '.join(unknown))
    configs = config.get('mig-configs')
    if not isinstance(configs, dict) or not configs:
        raise SharingError("mig_config: 'mig-configs' must be a non-empty mapping of config names to lists of entries")
    if not name:
        if len(configs) == 1:
            name = list(configs)[0]
        else:
            raise SharingError("mig_config_name is required when mig_config has more than one config; available: %s"
                               % ', '.join(sorted(configs)))
    if name not in configs:
        raise SharingError("mig_config_name '%s' is not in mig_config; available: %s" % (name, ', '.join(sorted(configs))))
    entries = configs[name]
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise SharingError("mig_config '%s' must be a non-empty list of entries with 'devices' and 'mig-enabled'" % name)
    out = []
    for pos, entry in enumerate(entries):
        where = "mig_config '%s' entry %d" % (name, pos)
        if not isinstance(entry, dict):
            raise SharingError("%s: must be a mapping with 'devices', 'mig-enabled' and 'mig-devices'; got %r" % (where, entry))
        unknown = sorted(set(entry) - set(_ENTRY_KEYS))
        if unknown:
            raise SharingError("%s: unknown key(s) %s; allowed are %s" % (where, ', '.join(unknown), ', '.join(_ENTRY_KEYS)))
        if 'mig-enabled' not in entry:
            raise SharingError("%s: 'mig-enabled' is required (true or false)" % where)
        enabled = _entry_bool(where, entry['mig-enabled'])
        filt = entry.get('device-filter')
        filters = None
        if filt is not None:
            filt = filt if isinstance(filt, (list, tuple)) else [filt]
            filters = [parse_pci_device_id(f, where) for f in filt]
        out.append({
            'where': where,
            'devices': _entry_devices(where, entry.get('devices')),
            'device_filter': filters,
            'mig_enabled': enabled,
            'mig_devices': _entry_mig_devices(where, entry.get('mig-devices'), enabled),
        })
    return out


def assign_entries(entries: Iterable[Mapping[str, Any]], gpus: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """Map GPU index -> entry for the GPUs of ``gpus`` (dicts with 'index', 'pci_device_id').

    ``gpus`` are all the node's GPUs: device indexes are checked against them. Raises when an index is out
    of range or two entries select the same GPU.
    """
    indexes = [g['index'] for g in gpus]
    result: dict[int, Mapping[str, Any]] = {}
    for entry in entries:
        if entry['devices'] == 'all':
            wanted = indexes
        else:
            for idx in entry['devices']:
                if idx not in indexes:
                    raise SharingError("%s: GPU index %d is out of range; this node has %s"
                                       % (entry['where'], idx, describe_indexes(indexes)))
            wanted = entry['devices']
        for gpu in gpus:
            if gpu['index'] not in wanted or not filter_matches(entry['device_filter'], gpu.get('pci_device_id')):
                continue
            if gpu['index'] in result:
                raise SharingError("%s: GPU %d is also selected by %s; each GPU may match one entry only"
                                   % (entry['where'], gpu['index'], result[gpu['index']]['where']))
            result[gpu['index']] = entry
    return result


def describe_indexes(indexes: Sequence[int]) -> str:
    if not indexes:
        return 'no GPUs'
    if list(indexes) == list(range(len(indexes))):
        return '%d GPU(s), indexes 0-%d' % (len(indexes), len(indexes) - 1)
    return 'GPU indexes %s' % ', '.join(str(i) for i in indexes)


def select_gpus(selection: Any, gpus: Sequence[Mapping[str, Any]]) -> list[int]:
    """Resolve the ``gpus`` option ('all', indexes, UUIDs) against the node's GPUs; returns a list of indexes."""
    if selection is None:
        selection = ['all']
    if not isinstance(selection, (list, tuple)):
        selection = [selection]
    indexes = [g['index'] for g in gpus]
    by_uuid = dict((str(g.get('uuid')).lower(), g['index']) for g in gpus if g.get('uuid'))
    out: list[int] = []
    for item in selection:
        text = str(item).strip()
        if text.lower() == 'all':
            chosen = indexes
        elif re.match(r'^\d+$', text):
            idx = int(text)
            if idx not in indexes:
                raise SharingError("gpus: GPU index %d is out of range; this node has %s" % (idx, describe_indexes(indexes)))
            chosen = [idx]
        elif text.lower() in by_uuid:
            chosen = [by_uuid[text.lower()]]
        else:
            raise SharingError("gpus: '%s' is neither 'all', a GPU index nor the UUID of a GPU of this node; known UUIDs: %s"
                               % (text, ', '.join(str(g.get('uuid')) for g in gpus) or 'none'))
        for idx in chosen:
            if idx not in out:
                out.append(idx)
    return sorted(out)
