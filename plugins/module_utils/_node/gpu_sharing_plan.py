# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG geometry: validate a wanted geometry against a GPU's profiles and plan the change from the current one.

A geometry is a multiset of GPU-instance (GI) profiles, each GI holding exactly one compute instance (CI)
that spans the whole GI - what mig-parted's ``mig-devices`` describes. Nothing here talks to hardware.

Dependency-free on purpose (the standard library only, no Ansible, no other module_utils): role gpu_node_sharing
ships this file beside its boot script gpuops-mig-apply.py, which re-creates the geometry at boot with the same
profile names, device filter, placement and geometry rules as the module. gpu_sharing_config re-exports
SharingError and the profile-name functions.

Data shapes used throughout:

* profile: ``{'name': '1g.10gb', 'id': 19, 'slices': 1, 'max_instances': 7, 'memory_mib': 9728,
  'placement_size': 1, 'placements': [0, 1, ...] or None}`` (placements in memory slices, from NVML);
* current GI: ``{'id': 7, 'profile': '1g.10gb', 'profile_id': 19, 'start': 0, 'size': 1,
  'cis': [{'id': 0, 'profile_id': 0, 'slices': 1, 'full': True, 'name': '1g.10gb'}]}``.
"""

import re
# type comments, not annotations: role gpu_node_sharing runs this file at boot with gpu_node_sharing_mig_persist_python
# (/usr/bin/python3, which may be older than the modules' Python: 3.6 on EL 8), where PEP 563 is not available
from collections.abc import Iterable, Mapping, Sequence  # noqa: F401 (used in type comments)
from typing import Any  # noqa: F401 (used in type comments)


class SharingError(Exception):
    """A refusal: the request cannot be applied. The message is meant for the user."""


_FIELDS_RE = re.compile(r'^(?:(\d+)c\.)?(\d+)g\.(\d+)gb$')
_ATTR_RE = re.compile(r'^[a-z][a-z0-9.]*$')


def normalize_profile_name(name):
    # type: (object) -> str
    """'MIG 1g.10gb' / '1G.10GB' -> '1g.10gb'. Returns the cleaned string (not validated)."""
    text = str(name).strip()
    if text.upper().startswith('MIG '):
        text = text[4:].strip()
    return text.lower()


def parse_profile_name(name):
    # type: (object) -> dict[str, Any]
    """Parse a MIG profile name the way mig-parted does (go-nvlib's parseMigProfile).

    Grammar: ``[<C>c.]<G>g.<GB>gb`` optionally followed by ``+attr[,attr...]`` or ``-attr[,attr...]`` (not both);
    an attribute is letters, digits and dots, starts with a letter and does not end with a dot; no attribute twice.
    Returns ``{'c', 'g', 'gb', 'attributes', 'negated', 'name'}`` (``name`` canonical: lower case, attributes
    sorted) or raises ValueError with the reason.
    """
    text = normalize_profile_name(name)
    if not text:
        raise ValueError('the profile name is empty')
    plus = text.split('+', 1)
    minus = text.split('-', 1)
    if len(plus) == 2 and len(minus) == 2:
        raise ValueError("it has both '+' and '-' attributes")
    parts, negated = (plus, False) if len(plus) == 2 else (minus, len(minus) == 2)
    match = _FIELDS_RE.match(parts[0])
    if not match:
        raise ValueError("'%s' is not '<G>g.<GB>gb' or '<C>c.<G>g.<GB>gb'" % parts[0])
    g = int(match.group(2))
    c = int(match.group(1)) if match.group(1) is not None else g
    gb = int(match.group(3))
    attrs = []  # type: list[str]
    if len(parts) == 2:
        for attr in parts[1].split(','):
            if not _ATTR_RE.match(attr) or attr.endswith('.'):
                raise ValueError("attribute '%s' is not letters, digits and dots starting with a letter" % attr)
            if attr in attrs:
                raise ValueError("attribute '%s' is given twice" % attr)
            attrs.append(attr)
    attrs.sort()
    base = ('%dg.%dgb' % (g, gb)) if c == g else ('%dc.%dg.%dgb' % (c, g, gb))
    suffix = ('%s%s' % ('-' if negated else '+', ','.join(attrs))) if attrs else ''
    return {'c': c, 'g': g, 'gb': gb, 'attributes': attrs, 'negated': negated, 'name': base + suffix}


def canonical_profile_name(name):
    # type: (object) -> str
    """The canonical form of a MIG profile name, or the normalised text when it does not parse."""
    try:
        return parse_profile_name(name)['name']
    except ValueError:
        return normalize_profile_name(name)


def parse_pci_device_id(value, where):
    # type: (object, str) -> tuple[int, bool]
    """'0x20B210DE' -> (0x20B210DE, True); '0x20B2' -> (0x20B2, False) (device part only)."""
    text = str(value).strip()
    try:
        num = int(text, 16)
    except ValueError:
        raise SharingError("%s: device-filter '%s' is not a PCI device id; expected a hex value like "
                           "'0x20B210DE' (device id << 16 | vendor id 0x10DE) or '0x20B2'" % (where, value))
    digits = len(text[2:]) if text.lower().startswith('0x') else len(text)
    return num, digits > 4


def filter_matches(filters, pci_device_id):
    # type: (Iterable[tuple[int, bool]] | None, int | None) -> bool
    """Whether a GPU with PCI id ``pci_device_id`` passes an entry's device-filter ([(id, full)] or None)."""
    if filters is None:
        return True
    if pci_device_id is None:
        return False
    for num, full in filters:
        if full and num == pci_device_id:
            return True
        if not full and num == (pci_device_id >> 16) & 0xFFFF:
            return True
    return False


def _label(gpu):
    # type: (Mapping[str, Any]) -> str
    return 'GPU %s (%s)' % (gpu.get('index'), gpu.get('name') or 'unknown')


def _size_key(profile):
    # type: (Mapping[str, Any]) -> tuple[int, int, int, str]
    return (-(profile.get('placement_size') or 0), -(profile.get('slices') or 0), -(profile.get('memory_mib') or 0),
            profile['name'])


def compute_slice_total(profiles):
    # type: (Mapping[str, Mapping[str, Any]]) -> int
    """Compute slices of the GPU: the largest profile's slices (7 on A100/H100, 4 on A30)."""
    return max([p.get('slices') or 0 for p in profiles.values()] or [0])


def fit_placements(items, profiles, occupied=0):
    # type: (Iterable[str], Mapping[str, Mapping[str, Any]], int) -> list[tuple[str, int | None]] | None
    """Place ``items`` (profile names) into free memory slices; ``occupied`` is a bitmask of used slices.

    Returns a list of (name, start) in largest-first order, or None when they do not fit. Profiles without
    placement data are returned with start None (NVML chooses).
    """
    order = sorted(items, key=lambda n: _size_key(profiles[n]))
    result = []  # type: list[tuple[str, int | None]]

    def place(pos, mask):
        # type: (int, int) -> bool
        if pos == len(order):
            return True
        prof = profiles[order[pos]]
        starts = prof.get('placements')
        size = prof.get('placement_size')
        if starts is None or not size:
            result.append((order[pos], None))
            if place(pos + 1, mask):
                return True
            result.pop()
            return False
        for start in starts:
            bits = ((1 << size) - 1) << start
            if mask & bits:
                continue
            result.append((order[pos], start))
            if place(pos + 1, mask | bits):
                return True
            result.pop()
        return False

    if place(0, occupied):
        return result
    return None


def validate_geometry(gpu, wanted, profiles):
    # type: (Mapping[str, Any], Mapping[str, int], Mapping[str, Mapping[str, Any]]) -> None
    """Refuse a geometry the GPU cannot hold. ``wanted``: {profile name: count}; ``profiles``: name -> profile."""
    label = _label(gpu)
    allowed = ', '.join(sorted(profiles, key=lambda n: (profiles[n].get('slices') or 0, n))) or 'none'
    for name in sorted(wanted):
        if name not in profiles:
            raise SharingError("%s: MIG profile '%s' is not available on this GPU; allowed profiles: %s"
                               % (label, name, allowed))
    for name in sorted(wanted):
        prof = profiles[name]
        if prof.get('max_instances') is not None and wanted[name] > prof['max_instances']:
            raise SharingError("%s: %d x MIG profile '%s' requested; this GPU allows at most %d"
                               % (label, wanted[name], name, prof['max_instances']))
    total = compute_slice_total(profiles)
    used = sum((profiles[n].get('slices') or 0) * c for n, c in wanted.items())
    if total and used > total:
        raise SharingError("%s: MIG geometry %s needs %d compute slices; this GPU has %d"
                           % (label, format_geometry(wanted), used, total))
    items = []  # type: list[str]
    for name, count in wanted.items():
        items.extend([name] * count)
    if fit_placements(items, profiles) is None:
        raise SharingError("%s: MIG geometry %s does not fit the GPU's memory slices (no valid placement exists)"
                           % (label, format_geometry(wanted)))


def format_geometry(counts):
    # type: (Mapping[str, int]) -> str
    """{'1g.10gb': 2, '3g.40gb': 1} -> '1x 3g.40gb + 2x 1g.10gb' (stable order)."""
    if not counts:
        return 'no MIG devices'
    return ' + '.join('%dx %s' % (counts[n], n) for n in sorted(counts, key=lambda n: (-counts[n], n)))


def geometry_of(instances):
    # type: (Iterable[Mapping[str, Any]]) -> dict[str, int]
    """Current GIs -> {profile name: count} of GIs that have exactly one full-size CI."""
    out = {}  # type: dict[str, int]
    for gi in instances:
        if is_complete(gi):
            out[gi['profile']] = out.get(gi['profile'], 0) + 1
    return out


def describe_instances(instances):
    # type: (Iterable[Mapping[str, Any]]) -> list[str]
    """Current GIs -> a stable, comparable description (used in diffs)."""
    out = []  # type: list[str]
    for gi in sorted(instances, key=lambda g: (g.get('start') if g.get('start') is not None else 99, g['id'])):
        cis = [c.get('name') or str(c.get('profile_id')) for c in gi.get('cis', [])]
        out.append('%s@%s [%s]' % (gi['profile'], gi.get('start'), ', '.join(cis) if cis else 'no compute instance'))
    return out


def is_complete(gi):
    # type: (Mapping[str, Any]) -> bool
    cis = gi.get('cis') or []
    return len(cis) == 1 and bool(cis[0].get('full'))


def _mask(gi):
    # type: (Mapping[str, Any]) -> int
    if gi.get('start') is None or not gi.get('size'):
        return 0
    return ((1 << gi['size']) - 1) << gi['start']


def plan_geometry(gpu, instances, wanted, profiles):
    # type: (Mapping[str, Any], Sequence[Mapping[str, Any]], Mapping[str, int], Mapping[str, Mapping[str, Any]]) -> dict[str, Any]
    """Plan the change of one GPU from ``instances`` to ``wanted`` ({profile: count}).

    Returns a dict with lists ``destroy_cis`` [(gi id, ci id, ci name)], ``destroy_gis`` [(gi id, profile, start)],
    ``fix_gis`` [gi id] (kept GIs that need their full-size CI), ``create_gis`` [(profile, start or None)] in
    creation order (largest first), and ``actions`` (text); ``changed`` is False when nothing is to be done.
    """
    idx = gpu.get('index')
    by_profile = {}  # type: dict[str, list[Mapping[str, Any]]]
    for gi in instances:
        by_profile.setdefault(gi['profile'], []).append(gi)
    keep = []  # type: list[Mapping[str, Any]]
    for name, gis in by_profile.items():
        count = wanted.get(name, 0)
        # prefer GIs that are already complete, then the ones with the fewest CIs to clean up
        ranked = sorted(gis, key=lambda g: (not is_complete(g), len(g.get('cis') or []), g['id']))
        keep.extend(ranked[:count])
    missing = []  # type: list[str]
    for name, count in wanted.items():
        have = len([g for g in keep if g['profile'] == name])
        missing.extend([name] * (count - have))
    occupied = 0
    for gi in keep:
        occupied |= _mask(gi)
    placed = fit_placements(missing, profiles, occupied)
    if placed is None:
        # keeping what exists would fragment the GPU: rebuild every GI, largest first
        keep = []
        missing = []
        for name, count in wanted.items():
            missing.extend([name] * count)
        placed = fit_placements(missing, profiles, 0)
        if placed is None:
            raise SharingError("GPU %s: MIG geometry %s does not fit (no valid placement)" % (idx, format_geometry(wanted)))
    kept_ids = set(g['id'] for g in keep)
    plan = {'destroy_cis': [], 'destroy_gis': [], 'fix_gis': [], 'create_gis': placed, 'actions': []}  # type: dict[str, Any]
    actions = plan['actions']
    for gi in sorted(instances, key=lambda g: g['id']):
        if gi['id'] in kept_ids and is_complete(gi):
            continue
        for ci in gi.get('cis') or []:
            plan['destroy_cis'].append((gi['id'], ci['id'], ci.get('name')))
            actions.append('GPU %s: destroy compute instance %s (id %s) in GPU instance %s (id %s)'
                           % (idx, ci.get('name') or ci.get('profile_id'), ci['id'], gi['profile'], gi['id']))
    for gi in sorted(instances, key=lambda g: g['id']):
        if gi['id'] in kept_ids:
            if not is_complete(gi):
                plan['fix_gis'].append(gi['id'])
            continue
        plan['destroy_gis'].append((gi['id'], gi['profile'], gi.get('start')))
        actions.append('GPU %s: destroy GPU instance %s (id %s, placement %s)' % (idx, gi['profile'], gi['id'], gi.get('start')))
    for gi_id in plan['fix_gis']:
        gi = [g for g in instances if g['id'] == gi_id][0]
        actions.append('GPU %s: create compute instance %s in GPU instance %s (id %s)' % (idx, gi['profile'], gi['profile'], gi_id))
    for name, start in placed:
        where = ' at placement %s' % start if start is not None else ''
        actions.append('GPU %s: create GPU instance %s%s with compute instance %s' % (idx, name, where, name))
    plan['changed'] = bool(actions)
    return plan
