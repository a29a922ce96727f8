# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""stacks/common.quantity: the canonical form kube-apiserver stores (the lifecycle suite's ready step found the
HAMi and Volcano validation pods written on every re-run: 3000 sent, 3k stored)."""
from __future__ import annotations

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError, quantity


@pytest.mark.parametrize('given, stored', [
    ('3000', '3k'), (3000, '3k'), ('1', '1'), ('30', '30'), ('100', '100'), ('1500', '1500'), ('12000', '12k'),
    ('2000000', '2M'), ('0', '0'), ('0k', '0'), ('1000k', '1M'), ('1024Mi', '1Gi'), ('1536Mi', '1536Mi'),
    ('16Gi', '16Gi'), ('2048Ki', '2Mi'),
    # forms left as given
    ('0.5', '0.5'), ('100m', '100m'), ('3e3', '3e3'),
])
def test_quantity_is_the_form_the_api_server_stores(given, stored):
    assert quantity(given) == stored


def test_quantity_refuses_a_boolean():
    with pytest.raises(StackError):
        quantity(True)
