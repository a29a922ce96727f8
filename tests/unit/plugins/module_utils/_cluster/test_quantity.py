# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube/quantity.py against the quantity grammar of k8s.io/apimachinery pkg/api/resource (quantity.go ParseQuantity,
suffix.go newSuffixer; tag v0.37.2): the values below are what ParseQuantity makes of each text (a fact of that
source, not a copy of its tests)."""
from decimal import Decimal

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import quantity as q


@pytest.mark.parametrize('text, expected', [
    # <number>: digits, digits.digits, digits., .digits; a sign
    ('8', '8'), ('0', '0'), ('007', '7'), ('1.5', '1.5'), ('1.', '1'), ('.5', '0.5'), ('+3', '3'), ('-3', '-3'),
    # <binarySI>: powers of 1024
    ('1Ki', '1024'), ('16Gi', str(16 * 1024 ** 3)), ('1.5Ki', '1536'), ('2Ei', str(2 * 1024 ** 6)), ('-1Mi', '-1048576'),
    # <decimalSI>, and n, u (suffix.go): powers of 1000
    ('500m', '0.5'), ('250u', '0.00025'), ('7n', '0.000000007'), ('1k', '1000'), ('3M', '3e6'), ('2G', '2e9'),
    ('4T', '4e12'), ('5P', '5e15'), ('2E', '2e18'),
    # <decimalExponent>: e or E and a signed integer (2E is exa, 2E3 an exponent)
    ('1e3', '1000'), ('2E3', '2000'), ('5e-2', '0.05'), ('5E+2', '500'), ('1.5e1', '15'),
    # finer than a nano: rounded up, away from zero, to the next nano
    ('0.1n', '1e-9'), ('1.0000000001', '1.000000001'), ('-1e-10', '-1e-9'),
    # numbers already decoded from YAML/JSON
    (3, '3'), (1.5, '1.5'), (0, '0'),
])
def test_the_grammar(text, expected):
    assert q.parse_quantity(text) == Decimal(expected)


@pytest.mark.parametrize('text', [
    '', ' ', '1 Gi', ' 1', '1Gi ', 'abc', '.', '+', '-', '1K', '1Xi', 'Gi', '1e', '1e1.5', '1ee3', '1e3Ki', '1Kim',
    '1..5', '0x10', '1,5', 'inf', 'nan', '1e99999999999',
    None, True, False, float('inf'), float('nan'), [1], {'value': '1'}, b'1',
])
def test_not_a_quantity(text):
    with pytest.raises(ValueError) as err:
        q.parse_quantity(text)
    assert repr(text) in str(err.value)


@pytest.mark.parametrize('text, expected', [('4', 4), ('2k', 2000), ('1e3', 1000), ('8000m', 8), (16, 16),
                                            ('500m', None), ('x', None), (None, None), ('', None)])
def test_parse_count(text, expected):
    assert q.parse_count(text) == expected


def test_the_report_reads_the_same_parser():
    """One parser: the share report's accounting and the strategy migration take kube/quantity's."""
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model as m
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import strategy_migration as sm
    assert m.parse_quantity is q.parse_quantity and sm.parse_count is q.parse_count
