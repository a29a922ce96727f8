# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A minimal, text-preserving TOML editor for the few tables a container runtime config needs.

Python's tomllib (3.11+) can only read and managed nodes may run Python 3.8, so this module edits TOML
text line by line: it finds table headers (``[a."b.c".d]``), the ``key = value`` lines of each table
(values may span lines: arrays, inline tables, multi-line strings) and changes only the lines of the keys
it is asked to set. Every other byte of the file - comments, ordering, formatting, other tables, Go
template lines of a ``config.toml.tmpl`` - is kept as it is.

Not supported (a clear TomlEditError is raised rather than guessing): a table the editor has to touch
that is also defined through dotted keys or an inline table in a parent table, and arrays of tables on
the path of a table the editor has to touch.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


class TomlEditError(Exception):
    """The text cannot be edited safely."""


_BARE = re.compile(r'[A-Za-z0-9_-]+')
_HEADER = re.compile(r'^\s*\[')
_ESCAPES = {'b': '\b', 't': '\t', 'n': '\n', 'f': '\f', 'r': '\r', '"': '"', '\\': '\\'}


def _parse_key(text: str, pos: int, stop_chars: str) -> tuple[list[str], int]:
    """Parse a (dotted) key starting at pos. Returns (list of parts, position after the key)."""
    parts = []
    n = len(text)
    while True:
        while pos < n and text[pos] in ' \t':
            pos += 1
        if pos >= n:
            raise TomlEditError('unexpected end of key')
        c = text[pos]
        if c == '"':
            value, pos = _parse_basic_string(text, pos)
            parts.append(value)
        elif c == "'":
            end = text.find("'", pos + 1)
            if end < 0:
                raise TomlEditError('unterminated literal string in key')
            parts.append(text[pos + 1:end])
            pos = end + 1
        else:
            m = _BARE.match(text, pos)
            if not m:
                raise TomlEditError('invalid key at %r' % text[pos:pos + 20])
            parts.append(m.group(0))
            pos = m.end()
        while pos < n and text[pos] in ' \t':
            pos += 1
        if pos < n and text[pos] == '.':
            pos += 1
            continue
        if pos < n and text[pos] in stop_chars:
            return parts, pos
        raise TomlEditError('invalid key near %r' % text[pos:pos + 20])


def _parse_basic_string(text: str, pos: int) -> tuple[str, int]:
    """Parse a one-line basic string ("...") at pos. Returns (value, position after the closing quote)."""
    out: list[str] = []
    i = pos + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return ''.join(out), i + 1
        if c == '\\':
            i += 1
            if i >= n:
                break
            e = text[i]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
            elif e == 'u':
                out.append(chr(int(text[i + 1:i + 5], 16)))
                i += 4
            elif e == 'U':
                out.append(chr(int(text[i + 1:i + 9], 16)))
                i += 8
            else:
                raise TomlEditError('invalid escape \\%s' % e)
        else:
            out.append(c)
        i += 1
    raise TomlEditError('unterminated string')


def toml_string(value: str) -> str:
    """A TOML basic string for value."""
    out = ['"']
    for c in value:
        if c == '"':
            out.append('\\"')
        elif c == '\\':
            out.append('\\\\')
        elif c == '\n':
            out.append('\\n')
        elif c == '\t':
            out.append('\\t')
        elif ord(c) < 0x20 or ord(c) == 0x7f:
            out.append('\\u%04x' % ord(c))
        else:
            out.append(c)
    out.append('"')
    return ''.join(out)


def toml_key(part: str) -> str:
    """A key part, bare when possible, quoted otherwise."""
    bare = _BARE.match(part)
    if bare and bare.end() == len(part):
        return part
    return toml_string(part)


def toml_path(parts: Sequence[str]) -> str:
    return '.'.join(toml_key(p) for p in parts)


def toml_value(value: Any) -> str:
    """TOML text for a str, bool, int or list of those."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(toml_value(v) for v in value) + ']'
    raise TypeError('cannot write %r as TOML' % (value,))


def parse_value(text: str) -> Any:
    """Parse the simple TOML values this collection reads: strings, booleans, integers, arrays of those.

    Returns the Python value, or raises TomlEditError for anything else (floats, dates, inline tables).
    """
    value, pos = _parse_value(text, 0)
    rest = text[pos:].strip()
    if rest and not rest.startswith('#'):
        raise TomlEditError('unexpected text after value: %r' % rest[:20])
    return value


def _skip_ws(text: str, pos: int, newlines: bool = False) -> int:
    n = len(text)
    while pos < n:
        c = text[pos]
        if c in ' \t' or (newlines and c in '\r\n'):
            pos += 1
        elif newlines and c == '#':
            while pos < n and text[pos] != '\n':
                pos += 1
        else:
            break
    return pos


def _parse_value(text: str, pos: int) -> tuple[Any, int]:
    pos = _skip_ws(text, pos)
    if text.startswith('"""', pos) or text.startswith("'''", pos):
        q = text[pos:pos + 3]
        end = text.find(q, pos + 3)
        if end < 0:
            raise TomlEditError('unterminated multi-line string')
        body = text[pos + 3:end]
        if body.startswith('\n'):
            body = body[1:]
        if q == '"""' and '\\' in body:
            raise TomlEditError('escapes in multi-line strings are not supported')
        return body, end + 3
    c = text[pos:pos + 1]
    if c == '"':
        return _parse_basic_string(text, pos)
    if c == "'":
        end = text.find("'", pos + 1)
        if end < 0:
            raise TomlEditError('unterminated literal string')
        return text[pos + 1:end], end + 1
    if c == '[':
        items: list[Any] = []
        pos += 1
        while True:
            pos = _skip_ws(text, pos, newlines=True)
            if text[pos:pos + 1] == ']':
                return items, pos + 1
            item, pos = _parse_value(text, pos)
            items.append(item)
            pos = _skip_ws(text, pos, newlines=True)
            if text[pos:pos + 1] == ',':
                pos += 1
            elif text[pos:pos + 1] != ']':
                raise TomlEditError('invalid array')
    m = re.compile(r'(true|false)\b').match(text, pos)
    if m:
        return m.group(1) == 'true', m.end()
    m = re.compile(r'[+-]?(0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[0-9_]+)(?![0-9.eE:T-])').match(text, pos)
    if m:
        return int(m.group(0).replace('_', ''), 0), m.end()
    raise TomlEditError('unsupported value %r' % text[pos:pos + 20])


def parse_inline_table(text: str) -> dict[str, Any]:
    """Parse an inline table (``{ "linux/arm64" = "/usr/bin/crun", k.sub = 1 }``, as CRI-O's own ``crio config``
    writes platform_runtime_paths and default_annotations) of the simple values parse_value reads, nested inline
    tables and dotted keys. Raises TomlEditError for anything else."""
    pos = _skip_ws(text, 0)
    value, pos = _parse_inline_table(text, pos)
    rest = text[pos:].strip()
    if rest and not rest.startswith('#'):
        raise TomlEditError('unexpected text after inline table: %r' % rest[:20])
    return value


def _parse_inline_table(text: str, pos: int) -> tuple[dict[str, Any], int]:
    if text[pos:pos + 1] != '{':
        raise TomlEditError('not an inline table: %r' % text[pos:pos + 20])
    out: dict[str, Any] = {}
    pos += 1
    while True:
        pos = _skip_ws(text, pos)
        if text[pos:pos + 1] == '}' and not out:
            return out, pos + 1
        parts, pos = _parse_key(text, pos, '=')
        pos = _skip_ws(text, pos + 1)
        if text[pos:pos + 1] == '{':
            value, pos = _parse_inline_table(text, pos)
        else:
            value, pos = _parse_value(text, pos)
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise TomlEditError('key %s defined twice in an inline table' % toml_path(parts))
        if parts[-1] in node:
            raise TomlEditError('key %s defined twice in an inline table' % toml_path(parts))
        node[parts[-1]] = value
        pos = _skip_ws(text, pos)
        c = text[pos:pos + 1]
        if c == ',':
            pos += 1
        elif c == '}':
            return out, pos + 1
        else:
            raise TomlEditError('invalid inline table near %r' % text[pos:pos + 20])


def _value_end(lines: list[str], idx: int, col: int) -> int:
    """Index of the last line of a value that starts on lines[idx] at column col."""
    depth = 0
    i = idx
    pos = col
    while i < len(lines):
        line = lines[i]
        n = len(line)
        while pos < n:
            if line.startswith('"""', pos) or line.startswith("'''", pos):
                q = line[pos:pos + 3]
                end = line.find(q, pos + 3)
                while end < 0:
                    i += 1
                    if i >= len(lines):
                        raise TomlEditError('unterminated multi-line string')
                    line = lines[i]
                    n = len(line)
                    end = line.find(q)
                    pos = 0
                pos = end + 3
                continue
            c = line[pos]
            if c == '"':
                pos = _parse_basic_string(line, pos)[1]
                continue
            if c == "'":
                end = line.find("'", pos + 1)
                if end < 0:
                    raise TomlEditError('unterminated literal string')
                pos = end + 1
                continue
            if c == '#':
                break
            if c in '[{':
                depth += 1
            elif c in ']}':
                depth -= 1
            pos += 1
        if depth <= 0:
            return i
        i += 1
        pos = 0
    raise TomlEditError('unterminated array or inline table')


class Table(object):
    """One [table] of the document: its header line and the keys defined in it."""

    def __init__(self, path: list[str], header: int, array: bool = False) -> None:
        self.path = path          # list of key parts; [] for the root table
        self.header = header      # index of the header line, -1 for the root table
        self.array = array
        self.end: Any = None      # index one past the last line of the table (an int once parsed)
        self.keys: list[tuple[list[str], int, int, int]] = []  # (key parts, first line, last line, column of the value)


class TomlDocument(object):
    """Lines of a TOML (or TOML template) text with an index of tables and keys."""

    def __init__(self, text: str, append_only: bool = False) -> None:
        self.append_only = append_only  # new tables only at the end (templates: never inside a Go {{ if }})
        self.newline = '\r\n' if '\r\n' in text else '\n'
        self.lines = text.replace('\r\n', '\n').split('\n')
        self.trailing_newline = text.endswith('\n') or text == ''
        if self.trailing_newline and self.lines and self.lines[-1] == '':
            self.lines.pop()
        self._index()

    # ---------------------------------------------------------------- reading
    def _index(self) -> None:
        self.tables = [Table([], -1)]
        i = 0
        lines = self.lines
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if not stripped or stripped.startswith('#') or stripped.startswith('{{'):
                i += 1
                continue
            if _HEADER.match(line):
                array = stripped.startswith('[[')
                start = line.index('[') + (2 if array else 1)
                try:
                    parts, pos = _parse_key(line, start, ']')
                except TomlEditError as e:
                    raise TomlEditError('line %d: %s' % (i + 1, e))
                rest = line[pos:]
                close = ']]' if array else ']'
                tail = rest[len(close):].strip()
                if not rest.startswith(close) or (tail and not tail.startswith('#') and not tail.startswith('{{')):
                    raise TomlEditError('line %d: invalid table header' % (i + 1))
                self.tables[-1].end = i
                self.tables.append(Table(parts, i, array))
                i += 1
                continue
            try:
                parts, pos = _parse_key(line, 0, '=')
            except TomlEditError as e:
                if '{{' in line:   # a Go template line of a config.toml.tmpl
                    i += 1
                    continue
                raise TomlEditError('line %d: %s' % (i + 1, e))
            last = _value_end(lines, i, pos + 1)
            self.tables[-1].keys.append((parts, i, last, pos + 1))
            i = last + 1
        self.tables[-1].end = len(lines)

    def text(self) -> str:
        out = self.newline.join(self.lines)
        if self.trailing_newline and self.lines:
            out += self.newline
        return out

    def table(self, path: Sequence[str]) -> Table | None:
        """The table defined with a header for path (not arrays of tables), or None."""
        for t in self.tables:
            if t.path == list(path) and not t.array:
                return t
        return None

    def has_table_under(self, prefix: Sequence[str]) -> bool:
        """True when a header or a dotted key defines something at or under prefix."""
        prefix = list(prefix)
        for t in self.tables:
            for parts in [t.path] + [t.path + k[0] for k in t.keys]:
                if parts[:len(prefix)] == prefix:
                    return True
        return False

    def _find_key(self, path: Sequence[str], key: str) -> tuple[Table | None, tuple[list[str], int, int, int] | None]:
        t = self.table(path)
        if t is None:
            return None, None
        for k in t.keys:
            if k[0] == [key]:
                return t, k
        return t, None

    def get(self, path: Sequence[str], key: str, default: Any = None) -> Any:
        """The parsed value of key in table path, default when absent."""
        t, k = self._find_key(path, key)
        if k is None:
            return default
        return parse_value(self._value_text(k))

    def get_raw(self, path: Sequence[str], key: str) -> str | None:
        """The value text of key in table path (e.g. a Go template expression), None when absent."""
        t, k = self._find_key(path, key)
        return None if k is None else self._value_text(k).strip()

    def key_value(self, k: tuple[list[str], int, int, int]) -> Any:
        """The parsed value of one key entry of a table (Table.keys), an inline table as a dict."""
        text = self._value_text(k)
        if text.strip().startswith('{'):
            return parse_inline_table(text)
        return parse_value(text)

    def _value_text(self, k: tuple[list[str], int, int, int]) -> str:
        return '\n'.join([self.lines[k[1]][k[3]:]] + self.lines[k[1] + 1:k[2] + 1])

    def _check_not_inline(self, path: Sequence[str]) -> None:
        """Refuse to edit a table that a parent defines by a dotted key or an inline table."""
        path = list(path)
        for t in self.tables:
            if t.array and path[:len(t.path)] == t.path:
                raise TomlEditError('table %s lies inside the array of tables [[%s]]; edit it by hand'
                                    % (toml_path(path), toml_path(t.path)))
            for k in t.keys:
                full = t.path + k[0]
                if len(full) <= len(path) and path[:len(full)] == full:
                    raise TomlEditError('%s is defined by the key %s on line %d (dotted key or inline table); '
                                        'edit it by hand' % (toml_path(path), toml_path(full), k[1] + 1))

    # ---------------------------------------------------------------- writing
    def ensure_table(self, path: Sequence[str]) -> Table | None:
        """Return the table for path, appending a header at the end of the document when missing."""
        t = self.table(path)
        if t is not None:
            return t
        self._check_not_inline(path)
        indent = ''
        parent = None
        for cand in self.tables[1:]:
            if len(cand.path) < len(path) and path[:len(cand.path)] == cand.path:
                if parent is None or len(cand.path) > len(parent.path):
                    parent = cand
        if parent is not None:
            hline = self.lines[parent.header]
            pind = hline[:len(hline) - len(hline.lstrip())]
            # keep containerd's "two spaces per level" layout when the file uses it
            indent = pind + ('  ' * (len(path) - len(parent.path)) if pind or self._indented() else '')
        header = '%s[%s]' % (indent, toml_path(path))
        at = len(self.lines)
        if not self.append_only:
            # right after the last table of the nearest existing ancestor (e.g. next to runtimes.runc)
            for n in range(len(path) - 1, 0, -1):
                related = [t for t in self.tables[1:] if t.path[:n] == path[:n]]
                if related:
                    at = related[-1].end
                    while at > related[-1].header + 1 and not self.lines[at - 1].strip():
                        at -= 1
                    break
        new = ['', header] if at > 0 and self.lines[at - 1].strip() else [header]
        self.lines[at:at] = new
        self._index()
        return self.table(path)

    def _keys_indented(self) -> bool:
        return any(self.lines[k[1]][:1] in (' ', '\t') for t in self.tables[1:] for k in t.keys)

    def _indented(self) -> bool:
        return any(self.lines[t.header][:1] in (' ', '\t') for t in self.tables[1:])

    def set(self, path: Sequence[str], key: str, value: Any, raw: bool = False) -> bool:
        """Set key = value in table path (created when missing). Returns True when the text changed.

        With raw=True, value is written as it is (a Go template expression of a config.toml.tmpl)."""
        path = list(path)
        if path:
            self.ensure_table(path)
        t, k = self._find_key(path, key)
        new_value = value if raw else toml_value(value)
        if k is not None:
            first = self.lines[k[1]]
            if raw and self._value_text(k).strip() == value:
                return False
            try:
                old = parse_value(self._value_text(k))
                if old == value and type(old) is type(value):
                    return False
            except TomlEditError:
                pass
            comment = ''
            if k[1] == k[2]:
                seg = first[k[3]:]
                idx = seg.find('#')
                while idx > 0:
                    try:
                        parse_value(seg[:idx])
                    except TomlEditError:
                        idx = seg.find('#', idx + 1)
                        continue
                    comment = seg[len(seg[:idx].rstrip()):]
                    break
            self.lines[k[1]:k[2] + 1] = ['%s %s%s' % (first[:k[3]].rstrip(), new_value, comment)]
            self._index()
            return True
        if t is None:  # not reached: the root table always exists and ensure_table made path's (or raised)
            raise TomlEditError('table %s cannot be written' % toml_path(path))
        # insert after the table's last key (or right after its header)
        if t.keys:
            last = t.keys[-1]
            kline = self.lines[last[1]]
            indent = kline[:len(kline) - len(kline.lstrip())]
            at = last[2] + 1
        elif t.header >= 0:
            hline = self.lines[t.header]
            hind = hline[:len(hline) - len(hline.lstrip())]
            indent = hind + '  ' if hind or self._indented() or self._keys_indented() else ''
            at = t.header + 1
        else:
            indent = ''
            at = 0
        self.lines.insert(at, '%s%s = %s' % (indent, toml_key(key), new_value))
        self._index()
        return True

    def remove_key(self, path: Sequence[str], key: str) -> bool:
        t, k = self._find_key(path, key)
        if k is None:
            return False
        del self.lines[k[1]:k[2] + 1]
        self._index()
        return True

    def remove_tables(self, prefix: Sequence[str]) -> bool:
        """Remove the table at prefix and every table below it. Returns True when something was removed."""
        prefix = list(prefix)
        if not any(t.path[:len(prefix)] == prefix for t in self.tables[1:]):
            if self.has_table_under(prefix):
                self._check_not_inline(prefix)
            return False
        removed = False
        while True:
            under = [t for t in self.tables[1:] if t.path[:len(prefix)] == prefix]
            if not under:
                break
            t = under[-1]
            at_end = t.end >= len(self.lines)
            del self.lines[t.header:t.end]
            if at_end:
                while self.lines and not self.lines[-1].strip():
                    self.lines.pop()
            removed = True
            self._index()
        if removed:
            self._index()
        return removed
