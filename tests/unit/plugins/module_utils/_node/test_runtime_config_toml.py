# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The line-based TOML editor: parsing keys/values, setting keys, adding and removing tables."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_toml import (
    TomlDocument, TomlEditError, parse_value, toml_path, toml_string, toml_value)

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def loads(text):
    if tomllib is None:
        pytest.skip('tomllib needs Python 3.11+')
    return tomllib.loads(text)


@pytest.mark.parametrize('text,value', [
    ('"a\\"b"', 'a"b'), ("'C:\\x'", 'C:\\x'), ('true', True), ('false  # c', False), ('42', 42), ('-1_000', -1000),
    ('0x1f', 31), ('["a", "b"]', ['a', 'b']), ('[\n  "a", # x\n  "b",\n]', ['a', 'b']), ('[]', []),
    ('"\\u00e9"', u'\u00e9'),
])
def test_parse_value(text, value):
    assert parse_value(text) == value


@pytest.mark.parametrize('text', ['1.5', '1979-05-27', '{a = 1}', '"open', 'nope'])
def test_parse_value_refuses(text):
    with pytest.raises(TomlEditError):
        parse_value(text)


def test_writers():
    assert toml_string('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert toml_value([True, 1, 'x']) == '[true, 1, "x"]'
    assert toml_path(['plugins', 'io.containerd.grpc.v1.cri', 'containerd']) == 'plugins."io.containerd.grpc.v1.cri".containerd'
    with pytest.raises(TypeError):
        toml_value(1.5)


SAMPLE = '''# top comment
version = 2
imports = [
  "/etc/a/*.toml",  # first
]

[plugins]
  [plugins."x.y"]
    a = "1"   # keep me
    s = """multi
[not.a.table]
line"""
    b = { c = 1 }

  [[plugins."x.y".arr]]
    z = 1
'''


def test_index_and_get():
    doc = TomlDocument(SAMPLE)
    assert doc.get([], 'version') == 2
    assert doc.get([], 'imports') == ['/etc/a/*.toml']
    assert doc.get(['plugins', 'x.y'], 'a') == '1'
    assert doc.table(['not', 'a', 'table']) is None
    assert doc.get(['plugins', 'x.y'], 'missing', 'd') == 'd'
    assert doc.text() == SAMPLE


def test_set_keeps_comment_and_other_lines():
    doc = TomlDocument(SAMPLE)
    assert doc.set(['plugins', 'x.y'], 'a', '2') is True
    assert '    a = "2"   # keep me' in doc.text()
    assert doc.set(['plugins', 'x.y'], 'a', '2') is False
    assert doc.text().replace('a = "2"', 'a = "1"') == SAMPLE


def test_set_multiline_value_and_insert_new_key():
    doc = TomlDocument(SAMPLE)
    doc.set([], 'imports', ['/etc/a/*.toml', '/x.toml'])
    doc.set([], 'oom_score', 0)
    text = doc.text()
    assert 'imports = ["/etc/a/*.toml", "/x.toml"]\noom_score = 0\n' in text
    assert text.count('imports') == 1
    data = loads(text)
    assert data['imports'] == ['/etc/a/*.toml', '/x.toml']
    assert data['plugins']['x.y']['b'] == {'c': 1}


def test_new_table_goes_next_to_its_siblings_and_is_indented():
    doc = TomlDocument(SAMPLE)
    doc.set(['plugins', 'x.y', 'new'], 'k', True)
    text = doc.text()
    assert '\n    [plugins."x.y".new]\n      k = true\n' in text
    assert loads(text)['plugins']['x.y']['new'] == {'k': True}


def test_refuses_tables_defined_inline_or_in_arrays():
    doc = TomlDocument(SAMPLE)
    with pytest.raises(TomlEditError, match='dotted key or inline table'):
        doc.set(['plugins', 'x.y', 'b'], 'c', 2)
    with pytest.raises(TomlEditError, match='array of tables'):
        doc.set(['plugins', 'x.y', 'arr', 'sub'], 'c', 2)
    with pytest.raises(TomlEditError, match='dotted key or inline table'):
        doc.remove_tables(['plugins', 'x.y', 'b'])


def test_remove_tables_restores_the_text():
    doc = TomlDocument(SAMPLE)
    doc.set(['plugins', 'x.y', 'new'], 'k', True)
    doc.set(['plugins', 'x.y', 'new', 'deep'], 'k', 1)
    assert doc.remove_tables(['plugins', 'x.y', 'new']) is True
    assert doc.text() == SAMPLE
    assert doc.remove_tables(['plugins', 'x.y', 'new']) is False


def test_crlf_and_missing_trailing_newline_kept():
    text = 'version = 2\r\n[a]\r\n  b = 1'
    doc = TomlDocument(text)
    doc.set(['a'], 'b', 1)
    assert doc.text() == text
    doc.set(['a'], 'c', 2)
    assert doc.text() == 'version = 2\r\n[a]\r\n  b = 1\r\n  c = 2'


def test_empty_document():
    doc = TomlDocument('')
    doc.set([], 'version', 2)
    doc.set(['plugins', 'p'], 'k', 'v')
    assert loads(doc.text()) == {'version': 2, 'plugins': {'p': {'k': 'v'}}}


@pytest.mark.parametrize('bad', ['[a\n', 'a = "x\n', 'a = [1,\n', '= 1\n', '[a] junk\n'])
def test_invalid_documents_raise(bad):
    with pytest.raises(TomlEditError):
        TomlDocument(bad)


def test_CRIO_10_inline_tables_as_crio_config_writes_them():
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_toml import (
        TomlDocument, TomlEditError, parse_inline_table)
    assert parse_inline_table('{"linux/arm64" = "/a","linux/riscv64" = "/b"}') == {'linux/arm64': '/a',
                                                                                   'linux/riscv64': '/b'}
    assert parse_inline_table('{ }') == {} and parse_inline_table('{a.b = 1, c = {d = true}} # x') == {
        'a': {'b': 1}, 'c': {'d': True}}
    for bad in ('{a = 1', '{a = 1,, }', '{a = 1} x', '{a = 1, a = 2}', '[1]'):
        with pytest.raises(TomlEditError):
            parse_inline_table(bad)
    doc = TomlDocument('[t]\nm = {"k" = "v"}\nn = 3\n')
    assert [doc.key_value(k) for k in doc.table(['t']).keys] == [{'k': 'v'}, 3]
