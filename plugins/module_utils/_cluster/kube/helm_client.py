# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether kubernetes.core.helm can drive the helm client a Helm release of a stack will run with.

kubernetes.core.helm runs the ``helm`` on the PATH of the host it runs on and reads its output; which helm majors a
kubernetes.core release can drive (docs/conformance/kubernetes-core.md K8S-21, its CHANGELOG.rst):
 * helm 3: every release the collection accepts (3.0.0 and later);
 * helm 4 (server-side apply by default, other flags and output): from kubernetes.core 6.4.0; 6.3.0 refuses helm 4
   before it runs it, and the releases before 6.3.0 run it with helm 3's flags and reading.
The role checks this before it changes anything, so that a site with helm 4 and an older kubernetes.core learns it
before the stack's objects are applied, not at the Helm release after them.
"""

from __future__ import annotations

import re
from typing import Any

HELM_4_FROM = (6, 4, 0)  # the first kubernetes.core release that drives helm 4
HELM_MIN = (3, 0, 0)

_SEMVER = re.compile(r'v?(\d+)\.(\d+)\.(\d+)')


def parse_version(text: Any) -> tuple[int, int, int] | None:
    """(major, minor, patch) of the first X.Y.Z in ``text`` (``helm version --short`` prints e.g. v4.3.1+g1a2b3c4;
    a collection version 6.6.0), else None."""
    m = _SEMVER.search(str(text or ''))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _dotted(v: tuple[int, int, int]) -> str:
    return '%d.%d.%d' % v


def helm_client_check(rc: Any, stdout: Any, stderr: Any, core_version: Any, host: str = '') -> dict[str, Any]:
    """The verdict on one ``helm version --short`` run (its rc, stdout, stderr) on ``host`` against the controller's
    kubernetes.core ``core_version`` (None when it cannot be read: only the helm side is checked then).

    Returns ok, msg (why not; empty when ok), helm_version and kubernetes_core_version (strings, '' when unknown)."""
    where = ' on %s' % host if host else ''
    core = parse_version(core_version)
    out: dict[str, Any] = {'ok': False, 'msg': '', 'helm_version': '',
                           'kubernetes_core_version': _dotted(core) if core else ''}
    helm = parse_version(stdout) if rc == 0 else None
    if helm is None:
        detail = (str(stderr or '').strip() or str(stdout or '').strip() or 'no output')[-300:]
        out['msg'] = ('the stack installs a Helm release with kubernetes.core.helm, which runs helm from the PATH%s: '
                      "'helm version --short' there gave rc %s (%s); install helm 3 or 4 there, or set "
                      'gpu_sharing_stack_helm_install to false and install the release yourself'
                      % (where, rc, detail))
        return out
    out['helm_version'] = _dotted(helm)
    if helm < HELM_MIN:
        out['msg'] = ('helm %s%s is older than %s, the oldest kubernetes.core.helm runs; install helm 3 or 4 there'
                      % (_dotted(helm), where, _dotted(HELM_MIN)))
        return out
    if helm[0] >= 4 and core is not None and core < HELM_4_FROM:
        out['msg'] = ('helm %s%s is helm 4, which kubernetes.core %s does not drive (helm 4 from kubernetes.core %s; '
                      '6.3.0 refuses it, older releases use helm 3 flags with it): install kubernetes.core %s or later '
                      'on the controller, or put helm 3 first on the PATH there'
                      % (_dotted(helm), where, _dotted(core), _dotted(HELM_4_FROM), _dotted(HELM_4_FROM)))
        return out
    out['ok'] = True
    return out
