# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes versions this collection knows, defined once: the supported range, the one version parser and the
served-API windows (which apiVersions each Kubernetes minor serves, as the collection uses them).

Plain Python (no Ansible imports, no other module_utils): modules, module_utils, filter and action plugins read it.
Adding a Kubernetes minor is MAX_MINOR here plus the ranges the docs state (tests/unit/plugins/module_utils/
_common/test_kube_versions.py compares them); see docs/extending.md.

Upstream facts (docs/conformance/kube-scheduler.md, KEP-785 and the kube-scheduler flag history):
  * Policy (kind Policy, apiVersion v1) through --policy-config-file: served up to 1.22, removed in 1.23;
  * kubescheduler.config.k8s.io/v1beta2: 1.22-1.27; v1beta3: 1.23-1.28; v1: 1.25 onwards (the only version
    kube-scheduler still registers from 1.29; its Extender fields are unchanged through MAX_MINOR).
"""

from __future__ import annotations

import re

# the oldest minor any part of the collection accepts (the scheduler extender, for legacy RKE1 clusters)
MIN_MINOR = 16
# the oldest minor of the supported range; older ones are accepted only for legacy clusters, with a note
SUPPORTED_MIN_MINOR = 24
# the newest minor the collection renders for and tests against
MAX_MINOR = 37
# the minors upstream Kubernetes still supports (the three or four newest releases)
UPSTREAM_SUPPORTED = (34, 37)

# the supported range as (first, last) minor
SUPPORTED = (SUPPORTED_MIN_MINOR, MAX_MINOR)
# every minor any part of the collection accepts as (first, last)
ACCEPTED = (MIN_MINOR, MAX_MINOR)

KSC_GROUP = 'kubescheduler.config.k8s.io'
KSC = 'KubeSchedulerConfiguration'
POLICY = 'Policy'

# every served apiVersion of the scheduler's component config, as (first minor, last minor); None: still served
SCHEDULER_CONFIG_WINDOWS = {
    KSC_GROUP + '/v1beta2': (22, 27),
    KSC_GROUP + '/v1beta3': (23, 28),
    KSC_GROUP + '/v1': (25, None),
}
# the scheduler Policy file (--policy-config-file): the last minor that reads it
POLICY_LAST_MINOR = 22
# the component config apiVersion the collection renders, as (first minor, apiVersion); below the first: Policy
SCHEDULER_CONFIG_RENDERED = (
    (25, KSC_GROUP + '/v1'),
    (POLICY_LAST_MINOR + 1, KSC_GROUP + '/v1beta3'),
)

# v1.29.4, 1.29, v1.28.9+rke2r1, v1.36.0-eks-2d5f260: major, minor, optional patch, then the rest
_VERSION_RE = re.compile(r'^v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$')


def parse(text, strict=True):
    # type: (object, bool) -> tuple[int, int, int | None] | None
    """(major, minor, patch or None) of a Kubernetes version string, None when it is not one.

    strict: nothing may follow but a pre-release or build suffix starting with - or + (v1.28.9+rke2r1);
    strict=False reads the leading version and ignores the rest (the cluster's gitVersion as it comes).
    """
    m = _VERSION_RE.match(str(text if text is not None else '').strip())
    if not m:
        return None
    rest = m.group(4)
    if strict and rest and rest[0] not in '-+':
        return None
    return int(m.group(1)), int(m.group(2)), (int(m.group(3)) if m.group(3) is not None else None)


def minor_of(text, strict=False):
    # type: (object, bool) -> int | None
    """The minor of a Kubernetes 1.x version string, None when it is not one."""
    v = parse(text, strict=strict)
    return v[1] if v and v[0] == 1 else None


def in_range(minor, window):
    # type: (int, tuple[int, int | None]) -> bool
    """Whether the minor lies in (first, last); last None: open ended."""
    first, last = window
    return first <= minor and (last is None or minor <= last)


def scheduler_config_served(api_version, minor):
    # type: (str, int) -> bool
    """Whether kube-scheduler 1.<minor> reads the component config apiVersion."""
    window = SCHEDULER_CONFIG_WINDOWS.get(str(api_version))
    if not window:
        return False
    return in_range(minor, window)


def scheduler_config_api(minor):
    # type: (int) -> tuple[str, str]
    """The scheduler configuration this collection renders for a minor: (kind, apiVersion)."""
    for first, api in SCHEDULER_CONFIG_RENDERED:
        if minor >= first:
            return KSC, api
    return POLICY, 'v1'


def scheduler_config_summary() -> str:
    """'Policy below 1.23, <group>/v1beta3 for 1.23-1.24, <group>/v1 from 1.25': what scheduler_config_api renders."""
    parts = ['%s below 1.%d' % (POLICY, POLICY_LAST_MINOR + 1)]
    steps = list(reversed(SCHEDULER_CONFIG_RENDERED))
    for i, (first, api) in enumerate(steps):
        if i + 1 < len(steps):
            parts.append('%s for 1.%d-1.%d' % (api, first, steps[i + 1][0] - 1))
        else:
            parts.append('%s from 1.%d' % (api, first))
    return ', '.join(parts)
