# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RKE2 / k3s: what their own containerd base template renders, and their config.yaml.

Facts (docs/conformance/rke2-k3s.md, read from k3s-io/k3s pkg/agent/containerd/runtimes.go and
pkg/agent/templates; RKE2 builds its agent from k3s's packages):

* at agent start k3s/RKE2 look for ``nvidia-container-runtime`` (runtime ``nvidia``) and
  ``nvidia-container-runtime-experimental`` (``nvidia-experimental``) in ``/usr/local/nvidia/toolkit`` (GPU
  Operator) and then ``/usr/bin`` (packages), and the base template renders a ``runtimes.<name>`` table and its
  ``options`` table (``BinaryName``) for every runtime found;
* the base template always renders the CRI plugin table, the runc runtime tables and (a snapshotter is always
  set) the CRI plugin's ``containerd`` table; a ``config.toml.tmpl`` that starts with ``{{ template "base" . }}``
  and adds any of these tables again makes containerd refuse the file (a table defined twice);
* the default runtime is their own ``default-runtime`` option (config.yaml key, flag ``--default-runtime``),
  which the base template renders as ``default_runtime_name``.

So the collection writes template tables only for a runtime the base does not render, and the default runtime
into config.yaml.
"""
from __future__ import annotations

import re

DETECTED_RUNTIMES = {'nvidia': 'nvidia-container-runtime',
                     'nvidia-experimental': 'nvidia-container-runtime-experimental'}
DETECT_DIRS = ('/usr/local/nvidia/toolkit', '/usr/bin')
DEFAULT_RUNTIME_KEY = 'default-runtime'
_BASE_RE = re.compile(r'\{\{-?\s*template\s+"base"\s')
_KEY_RE = re.compile(r'^([A-Za-z0-9_.-]+|"[^"]*"|\'[^\']*\')\s*:(?:\s+(.*?))?\s*$')


class RancherConfigError(Exception):
    """config.yaml cannot be edited safely."""


def base_renders_runtime(name: str, binary: str) -> bool:
    """True when RKE2's / k3s's runtime detection finds this runtime (name and binary) on its own."""
    wanted = DETECTED_RUNTIMES.get(name)
    return wanted is not None and binary in ['%s/%s' % (d, wanted) for d in DETECT_DIRS]


def template_uses_base(text: str | None) -> bool:
    """True when the template renders k3s's base template (or its ExtraRuntimes loop), or is missing/empty
    (RKE2 / k3s then render the base template alone)."""
    text = text or ''
    return not text.strip() or bool(_BASE_RE.search(text)) or '.ExtraRuntimes' in text


def _strip_comment(value: str | None) -> str:
    if value is None:
        return ''
    if value[:1] in ('"', "'"):
        q = value[0]
        end = value.find(q, 1)
        return value[:end + 1] if end > 0 else value
    return re.sub(r'\s+#.*$', '', value).strip()


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in ('"', "'"):
        return value[1:-1]
    return value


def _top_level_keys(text: str | None) -> tuple[list[str], list[tuple[int, str, str | None]]]:
    """[(index of line, key, raw value)] of the top-level keys of a block-style YAML mapping."""
    lines = (text or '').split('\n')
    out: list[tuple[int, str, str | None]] = []
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith('#') or line[:1] in (' ', '\t', '-'):
            continue
        if line.strip() in ('---', '...'):
            if line.strip() == '---' and any(k for k in out):
                raise RancherConfigError('holds more than one YAML document')
            continue
        m = _KEY_RE.match(line)
        if not m:
            raise RancherConfigError('line %d is not a "key: value" line of a YAML mapping (%r); edit it by hand'
                                     % (i + 1, line[:60]))
        out.append((i, _unquote(m.group(1)), m.group(2)))
    return lines, out


def yaml_get(text: str | None, key: str) -> str | None:
    """The scalar value of a top-level key of config.yaml, None when absent."""
    lines, keys = _top_level_keys(text)
    found = [k for k in keys if k[1] == key]
    if len(found) > 1:
        raise RancherConfigError('defines %s %d times' % (key, len(found)))
    if not found:
        return None
    raw = _strip_comment(found[0][2])
    if not raw:
        raise RancherConfigError('%s is not a plain value (a list or mapping follows it); edit it by hand' % key)
    return _unquote(raw)


def yaml_set(text: str | None, key: str, value: str) -> str | None:
    """config.yaml text with the top-level key set to the string value; every other line kept."""
    current = yaml_get(text, key)
    if current == value:
        return text
    lines, keys = _top_level_keys(text)
    new = '%s: %s' % (key, value)
    if current is not None:
        idx = [k[0] for k in keys if k[1] == key][0]
        lines[idx] = new
        return '\n'.join(lines)
    body = text or ''
    if body and not body.endswith('\n'):
        body += '\n'
    return body + new + '\n'


def yaml_remove(text: str | None, key: str) -> str | None:
    """config.yaml text without the top-level key (a scalar); unchanged when absent."""
    if yaml_get(text, key) is None:
        return text
    lines, keys = _top_level_keys(text)
    idx = [k[0] for k in keys if k[1] == key][0]
    del lines[idx]
    return '\n'.join(lines)
