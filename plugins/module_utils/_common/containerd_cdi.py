# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI in containerd's CRI plugin per containerd release (docs/conformance/containerd.md, CTD-01..CTD-05).

* ``enable_cdi`` and ``cdi_spec_dirs`` appeared in the CRI plugin's config with containerd 1.7.0 (absent from every 1.6
  release; 1.6.20 reads a config that sets them without a word and runs without CDI);
* containerd 1.7 leaves CDI off unless ``enable_cdi = true``; containerd 2.0 (config version 3) turns it on unless
  ``enable_cdi = false``;
* containerd 2.4 removed ``enable_cdi`` (deprecated from 2.2): CDI is always on, and a file that still sets the key,
  to true or false, is read with a warning that names it ("Ignoring unknown key"); ``cdi_spec_dirs`` stays.

Used by the runtime module (refuse cdi on containerd < 1.7), the dra strategy (a node whose containerd cannot do CDI)
and the doctor (CDI on or off as the node's containerd reads its config).
"""

from __future__ import annotations
import re

CDI_MIN = (1, 7)        # the first release whose CRI plugin has enable_cdi / cdi_spec_dirs
CDI_DEFAULT_ON = (2, 0)  # from this release on, enable_cdi defaults to true
CDI_ALWAYS_ON = (2, 4)   # from this release on, enable_cdi is gone: CDI is always on


def parse_version(text: object) -> tuple[int, int, int] | None:
    """'1.6.20', 'v2.3.4', '1.7.27-1' or '2.0' as a (major, minor, patch) tuple; None when not a version."""
    m = re.match(r'^\s*v?(\d+)\.(\d+)(?:\.(\d+))?', str(text or ''))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def cdi_supported(version: object) -> bool | None:
    """True/False whether this containerd (a version string) can do CDI at all; None when the version is unknown."""
    v = parse_version(version)
    return None if v is None else v[:2] >= CDI_MIN


def cdi_default(version: object) -> bool | None:
    """enable_cdi's default for this containerd: False (1.7), True (2.0 on); None when unknown or without CDI."""
    v = parse_version(version)
    if v is None or v[:2] < CDI_MIN:
        return None
    return v[:2] >= CDI_DEFAULT_ON


def enable_cdi_removed(version: object) -> bool | None:
    """True when this containerd no longer has enable_cdi (2.4 on: CDI always on, the key ignored with a warning);
    None when the version is unknown."""
    v = parse_version(version)
    return None if v is None else v[:2] >= CDI_ALWAYS_ON


def cdi_effective(version: object, enable_cdi: object) -> bool | str | None:
    """Whether this containerd injects CDI devices: 'unsupported' (before 1.7, whatever the file says), True from 2.4
    on (whatever the file says), True or False (enable_cdi where a file sets it, else the release's default), None
    (version unknown and no file sets it)."""
    if cdi_supported(version) is False:
        return 'unsupported'
    if enable_cdi_removed(version):
        return True
    if enable_cdi is not None:
        return bool(enable_cdi)
    return cdi_default(version)


def unsupported_message(version: object, what: str) -> str:
    """Why ``what`` (e.g. 'cdi=true') cannot be had on containerd ``version`` (older than 1.7)."""
    return ('%s needs CDI in containerd, which containerd %s does not have: enable_cdi and cdi_spec_dirs exist in the '
            'CRI plugin from containerd %d.%d (off by default there; on by default from %d.%d), and %s reads a config '
            'that sets them without an error and runs without CDI; upgrade containerd to %d.%d or later'
            % (what, version, CDI_MIN[0], CDI_MIN[1], CDI_DEFAULT_ON[0], CDI_DEFAULT_ON[1], version, CDI_MIN[0],
               CDI_MIN[1]))
