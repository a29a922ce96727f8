# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt helpers of the modules: deb822 source text, OpenPGP key formats, package specs, installed packages (dpkg)."""

from __future__ import annotations

import base64
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ARMOR_BEGIN = b'-----BEGIN PGP PUBLIC KEY BLOCK-----'
ARMOR_END = b'-----END PGP PUBLIC KEY BLOCK-----'
_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$')
DPKG_QUERY_FORMAT = '${Package}\t${db:Status-Abbrev}\t${Version}\n'
_PKG_RE = re.compile(r'^([a-z0-9][a-z0-9+.-]+)(?:=(\S+))?$')


class AptSourceError(Exception):
    """Bad input; the message names the option and what is allowed."""


def check_name(name: str) -> str:
    if not _NAME_RE.match(name or ''):
        raise AptSourceError('name %r must be a plain file name (letters, digits, "_", ".", "-"); the source is '
                             'written to /etc/apt/sources.list.d/<name>.sources' % (name,))
    return name


def check_supersedes(names: Sequence[str], name: str) -> list[str]:
    """The file names of supersedes (in sources.list.d), refused unless plain names of .list/.sources files other
    than the module's own <name>.sources."""
    for n in names:
        if not _NAME_RE.match(n or '') or not n.endswith(('.list', '.sources')):
            raise AptSourceError('supersedes: %r must be a plain file name in /etc/apt/sources.list.d ending in .list or '
                                 '.sources (letters, digits, "_", ".", "-")' % (n,))
        if n == name + '.sources':
            raise AptSourceError('supersedes: %r is the source file this module writes (name %r)' % (n, name))
    return list(names)


def render_deb822(uris: Sequence[str], suites: Sequence[str], components: Sequence[str] | None, keyring: str,
                  architectures: Sequence[str] | None = None, comment: str | None = None) -> str:
    """The text of a deb822 .sources file (Types: deb), signed by one keyring file."""
    if not uris:
        raise AptSourceError('uris must name at least one repository URL')
    for uri in uris:
        if not re.match(r'^(https?|file|ftp)://\S+$', uri or ''):
            raise AptSourceError('uris: %r is not an http(s), ftp or file URL' % (uri,))
    if not suites:
        raise AptSourceError('suites must name at least one suite (a distribution name, or an exact path ending in "/")')
    exact = [s for s in suites if s.endswith('/')]
    if exact and components:
        raise AptSourceError('suites %s are exact paths (ending in "/"); apt allows no components with them, but '
                             'components is %s' % (exact, components))
    if not exact and not components:
        raise AptSourceError('components must name at least one component (for example main) when the suites %s are '
                             'distribution names' % (suites,))
    lines = []
    if comment:
        lines += ['# ' + line for line in comment.splitlines()]
    lines += ['Types: deb', 'URIs: ' + ' '.join(uris), 'Suites: ' + ' '.join(suites)]
    if components:
        lines.append('Components: ' + ' '.join(components))
    if architectures:
        lines.append('Architectures: ' + ' '.join(architectures))
    lines.append('Signed-By: ' + keyring)
    return '\n'.join(lines) + '\n'


def key_format(data: bytes) -> str | None:
    """'armored', 'binary' (an OpenPGP packet stream) or None for anything else (an HTML error page, ...)."""
    stripped = data.lstrip()
    if stripped.startswith(ARMOR_BEGIN) and ARMOR_END in stripped:
        return 'armored'
    # an OpenPGP packet header has bit 7 set; a public key packet is tag 6 (old format 0x98/0x99, new format 0xc6)
    if data[:1] and data[0:1] in (b'\x98', b'\x99', b'\xc6'):
        return 'binary'
    return None


def dearmor(data: bytes) -> bytes:
    """The binary packets of an ASCII-armored public key block (what `gpg --dearmor` writes)."""
    text = data.decode('ascii', 'replace').replace('\r\n', '\n')
    start = text.find(ARMOR_BEGIN.decode())
    end = text.find(ARMOR_END.decode())
    if start < 0 or end < 0:
        raise AptSourceError('the key is not an ASCII-armored PGP public key block')
    body = text[start + len(ARMOR_BEGIN):end].strip('\n').split('\n')
    # armor headers (Version:, Comment:) end at the first blank line, if there are any
    if any(line.strip() == '' for line in body):
        first_blank = [i for i, line in enumerate(body) if line.strip() == ''][0]
        if all(':' in line for line in body[:first_blank]):
            body = body[first_blank + 1:]
    payload = ''.join(line.strip() for line in body if line.strip() and not line.startswith('='))
    try:
        return base64.b64decode(payload, validate=True)
    except (ValueError, TypeError) as e:
        raise AptSourceError('the armored key does not decode: %s' % e)


def keyring_bytes(data: bytes, keyring: str) -> bytes:
    """The bytes to store at keyring for the downloaded key data, in the format apt expects from its extension.

    apt reads a signed-by file ending in .asc as ASCII-armored and any other as binary OpenPGP packets; a key in
    the wrong format is ignored ("unsupported filetype") and every update then fails on the signature.
    """
    fmt = key_format(data)
    if fmt is None:
        raise AptSourceError('key_url did not return a PGP public key (neither ASCII-armored nor binary OpenPGP; '
                             'first bytes %r)' % (data[:40],))
    if keyring.endswith('.asc'):
        if fmt != 'armored':
            raise AptSourceError('keyring %s ends in .asc, which apt reads as ASCII-armored, but key_url returned a '
                                 'binary key; use a keyring path ending in .gpg' % keyring)
        return data
    return dearmor(data) if fmt == 'armored' else data


def parse_package_specs(specs: Iterable[str], option: str = 'packages') -> list[tuple[str, str | None]]:
    """['name', 'name=version-glob'] -> [(name, version or None)]; anything else is refused (naming option)."""
    out = []
    for spec in specs:
        m = _PKG_RE.match(spec or '')
        if not m:
            raise AptSourceError('%s: %r is not "name" or "name=version" (a version may use * wildcards, as '
                                 'ansible.builtin.apt accepts)' % (option, spec))
        out.append((m.group(1), m.group(2)))
    return out


def missing_packages(specs: Sequence[str], installed: Mapping[str, str]) -> list[str]:
    """The specs whose package is not installed, or installed at a version that does not match the spec.

    installed is {name: version} of the installed packages; a version matches as ansible.builtin.apt matches it
    (fnmatch, so "1.17.8-1*" matches "1.17.8-1~gpuopslab1").
    """
    missing = []
    for spec, (name, version) in zip(specs, parse_package_specs(specs)):
        have = installed.get(name)
        if have is None or (version is not None and not fnmatch.fnmatch(have, version)):
            missing.append(spec)
    return missing


def parse_dpkg_query(text: str | None) -> dict[str, str]:
    """Output of dpkg-query -W -f '${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' -> {name: version}.

    Only installed packages are returned (second letter of the status abbreviation is 'i');
    architecture qualifiers (libfoo:amd64) are dropped.
    """
    out = {}
    for line in (text or '').splitlines():
        parts = line.split('\t')
        if len(parts) < 3:
            continue
        name, status, version = parts[0].split(':', 1)[0], parts[1], parts[2].strip()
        if len(status) >= 2 and status[1] == 'i' and version:
            out[name] = version
    return out


def dpkg_installed(module: Any, names: Iterable[str]) -> dict[str, str] | None:
    """{name: version} of the installed packages among names, read with dpkg-query; None when the node has no
    dpkg-query (not Debian/Ubuntu)."""
    dpkg_query = module.get_bin_path('dpkg-query')
    if not dpkg_query:
        return None
    if not names:
        return {}
    rc, out, err = module.run_command([dpkg_query, '-W', '-f', DPKG_QUERY_FORMAT] + list(names))
    return parse_dpkg_query(out)


# ------------------------------------------------------------------ brownfield: sources already on the node
_ONE_LINE_RE = re.compile(r'^\s*(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)(.*)$')
DISABLED_MARK = '# disabled by gpuops.k8s_gpu (another source of this URI): '


def _norm_uri(uri: str, arch: str | None) -> str:
    return uri.replace('$(ARCH)', arch or '$(ARCH)').rstrip('/')


def one_line_entries(text: str | None) -> list[tuple[int, str, str, str | None]]:
    """[(line index, uri, suite, signed-by or None)] of the deb lines of a .list file (apt's one-line format)."""
    out = []
    for i, line in enumerate((text or '').split('\n')):
        m = _ONE_LINE_RE.match(line)
        if not m or m.group(1) != 'deb':
            continue
        opts = {}
        for opt in (m.group(2) or '').split():
            if '=' in opt:
                k, v = opt.split('=', 1)
                opts[k.strip().lower()] = v.strip()
        out.append((i, m.group(3), m.group(4), opts.get('signed-by')))
    return out


def deb822_stanzas(text: str | None) -> list[tuple[int | None, int, dict[str, str]]]:
    """[(first line, last line, {field lower-case: value})] of a .sources file (fields folded onto one line)."""
    stanzas = []
    cur, start, last_key = {}, None, None  # type: (dict[str, str], int | None, str | None)
    lines = (text or '').split('\n')
    for i, line in enumerate(lines + ['']):
        if not line.strip():
            if cur:
                stanzas.append((start, i - 1, cur))
            cur, start, last_key = {}, None, None
            continue
        if line.startswith('#'):
            continue
        if line[:1] in (' ', '\t') and last_key:
            cur[last_key] += '\n' + line.strip()
            continue
        if ':' in line:
            k, v = line.split(':', 1)
            last_key = k.strip().lower()
            cur[last_key] = v.strip()
            if start is None:
                start = i
    return stanzas


def conflicting_sources(files: Iterable[tuple[str, str]], uris: Iterable[str], suites: Iterable[str], keyring: str,
                        arch: str | None, unsigned: bool = True) -> list[tuple[str, str, list[Any], list[str | None]]]:
    """Entries of other source files (files: [(path, text)]) for one of uris + suites whose Signed-By is not
    keyring - apt then refuses every source ("Conflicting values set for option Signed-By").

    unsigned=False leaves out the entries without Signed-By: apt refuses only two different values (bookworm's
    apt 2.6.1 reads "deb URI suite main" next to a Signed-By source of the same URI and suite without an error).

    Returns [(path, kind, [line index or stanza (first, last)], [signed-by values])]."""
    wanted = set((_norm_uri(u, arch), s) for u in uris for s in suites)
    out = []
    for path, text in files:
        hits: list[Any] = []  # line indexes (one-line) or (first, last) stanzas (deb822)
        keys: list[str | None] = []
        if path.endswith('.sources'):
            for first, last, f in deb822_stanzas(text):
                if f.get('enabled', 'yes').lower() == 'no' or 'deb' not in f.get('types', '').split():
                    continue
                pairs = set((_norm_uri(u, arch), s) for u in f.get('uris', '').split()
                            for s in f.get('suites', '').split())
                signed = f.get('signed-by')
                if pairs & wanted and signed != keyring and (unsigned or signed is not None):
                    hits.append((first, last))
                    keys.append(signed)
        else:
            for idx, uri, suite, signed in one_line_entries(text):
                if (_norm_uri(uri, arch), suite) in wanted and signed != keyring and (unsigned or signed is not None):
                    hits.append(idx)
                    keys.append(signed)
        if hits:
            out.append((path, 'deb822' if path.endswith('.sources') else 'one-line', hits, keys))
    return out


def disable_entries(text: str, kind: str, hits: list[Any]) -> str | None:
    """text with the conflicting entries disabled: one-line entries commented out, deb822 stanzas "Enabled: no";
    None when nothing else would be left in the file (it is then removed)."""
    lines = text.split('\n')
    if kind == 'one-line':
        for idx in hits:
            lines[idx] = DISABLED_MARK + lines[idx]
        rest = one_line_entries('\n'.join(lines))
        if not rest and not any(_ONE_LINE_RE.match(line) and line.lstrip().startswith('deb-src') for line in lines):
            return None
        return '\n'.join(lines)
    stanzas = deb822_stanzas(text)
    if len(hits) == len(stanzas):
        return None
    for first, last in sorted(hits, reverse=True):
        lines.insert(last + 1, 'Enabled: no')
    return '\n'.join(lines)
