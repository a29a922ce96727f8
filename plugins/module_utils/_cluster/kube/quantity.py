# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes resource quantities ("8", "500m", "16Gi", "1e3") as exact Decimals: the one parser of the _cluster wing
(the GPU share report's accounting, the strategy migration's allocatable count).

The grammar is the one k8s.io/apimachinery documents on its Quantity type and parses (pkg/api/resource quantity.go
``ParseQuantity`` and suffix.go ``newSuffixer``, tag v0.37.2):

* a signed number: an optional ``+`` or ``-``, then digits, digits with a fraction, digits and a dot, or a dot and
  digits (``1``, ``1.5``, ``1.``, ``.5``);
* then exactly one suffix: a binary SI one (``Ki`` ``Mi`` ``Gi`` ``Ti`` ``Pi`` ``Ei``, powers of 1024), a decimal SI
  one (``n`` ``u`` ``m``, none, ``k`` ``M`` ``G`` ``T`` ``P`` ``E``, powers of 1000), or a decimal exponent (``e`` or
  ``E`` and a signed integer: ``1e3``, ``5E-2``). ``2E`` is two exa, ``2E3`` two thousand;
* nothing else: no blank, no second suffix (``1e3Ki``), no ``K``.

A value finer than a nano is rounded up, away from zero, to the next nano, as ParseQuantity does ("if you want some
resources, you should get some resources"). The apimachinery caps a binary SI value at 2^63-1; a count here is never
near it, so no cap is applied. A number that YAML or JSON already decoded (an int or a float, not a bool) is taken as
it is.
"""
from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, InvalidOperation, localcontext

BINARY_SI = {'Ki': 10, 'Mi': 20, 'Gi': 30, 'Ti': 40, 'Pi': 50, 'Ei': 60}
DECIMAL_SI = {'n': -9, 'u': -6, 'm': -3, '': 0, 'k': 3, 'M': 6, 'G': 9, 'T': 12, 'P': 15, 'E': 18}
NANO = Decimal('1e-9')

_QUANTITY = re.compile(
    r'(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))'
    r'(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))'
)


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity ('8', '500m', '16Gi', '1e3', 3) as a Decimal; ValueError naming the value when it is not
    one (None, a bool, a blank, an unknown or second suffix, an infinity)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError('not a Kubernetes quantity: %r' % (value,))
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError('not a Kubernetes quantity: %r (a number and one of the suffixes %s, or e<exponent>)'
                         % (value, ' '.join(list(BINARY_SI) + [s for s in DECIMAL_SI if s])))
    with localcontext() as ctx:
        # exact: a quantity's digits, times 2^60 at most, to the nano
        ctx.prec = 200
        try:
            number = Decimal(match.group('number'))
            if match.group('binary'):
                amount = number * (Decimal(2) ** BINARY_SI[match.group('binary')])
            elif match.group('exponent') is not None:
                amount = number.scaleb(int(match.group('exponent')))
            else:
                amount = number.scaleb(DECIMAL_SI[match.group('decimal')])
            exponent = amount.as_tuple().exponent
            if isinstance(exponent, int) and exponent < -9:
                amount = amount.quantize(NANO, rounding=ROUND_UP)
            if not amount.is_finite():
                raise InvalidOperation()
        except InvalidOperation:
            raise ValueError('not a Kubernetes quantity: %r (out of range)' % (value,))
    return amount


def parse_count(value: object) -> int | None:
    """A quantity that counts things (an extended resource's capacity or allocatable, which the API server holds to
    whole numbers) as an int; None when it is absent, not a quantity, or not whole."""
    try:
        amount = parse_quantity(value)
    except ValueError:
        return None
    if amount != amount.to_integral_value():
        return None
    return int(amount)
