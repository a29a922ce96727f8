# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI in containerd's CRI plugin per release (docs/conformance/containerd.md): enable_cdi from 1.7.0, off by default
in 1.7, on by default from 2.0, gone (CDI always on) from 2.4."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import containerd_cdi as c


@pytest.mark.parametrize('text, want', [('1.6.20', (1, 6, 20)), ('v2.3.4', (2, 3, 4)), ('1.7.27-1', (1, 7, 27)),
                                        ('2.0', (2, 0, 0)), ('', None), (None, None), ('abc', None)])
def test_CTD_01_parse_version(text, want):
    assert c.parse_version(text) == want


def test_CTD_01_no_cdi_before_1_7():
    assert c.cdi_supported('1.6.20') is False and c.cdi_supported('1.6.39') is False
    assert c.cdi_supported('1.7.0') is True and c.cdi_supported('2.3.4') is True
    assert c.cdi_supported(None) is None
    # whatever a file says, 1.6 has no CDI
    assert c.cdi_effective('1.6.20', True) == 'unsupported' and c.cdi_effective('1.6.20', None) == 'unsupported'
    msg = c.unsupported_message('1.6.20', 'cdi=true')
    assert 'cdi=true' in msg and 'containerd 1.6.20' in msg and '1.7 or later' in msg


def test_CTD_02_containerd_1_7_off_unless_set():
    assert c.cdi_default('1.7.0') is False and c.cdi_default('1.7.27') is False
    assert c.cdi_effective('1.7.27', None) is False
    assert c.cdi_effective('1.7.27', True) is True and c.cdi_effective('1.7.27', False) is False


def test_CTD_03_containerd_2_on_unless_false():
    assert c.cdi_default('2.0.0') is True and c.cdi_default('2.3.4') is True
    assert c.cdi_effective('2.0.0', None) is True and c.cdi_effective('2.3.4', False) is False


def test_CTD_05_containerd_2_4_always_on_whatever_the_file_says():
    """containerd 2.4 removed enable_cdi: a leftover false no longer turns CDI off (the defect: the doctor named such a
    node's CDI disabled, critical, and its gate stopped rolls on a node whose containerd injects CDI devices)."""
    for version in ('2.4.0', '2.4.2', 'v2.5.1', '3.0.0'):
        assert c.enable_cdi_removed(version) is True
        for enable in (None, True, False):
            assert c.cdi_effective(version, enable) is True, (version, enable)
    for version in ('1.7.27', '2.0.0', '2.3.4', '2.3.9'):
        assert c.enable_cdi_removed(version) is False
    assert c.enable_cdi_removed(None) is None and c.enable_cdi_removed('abc') is None
    assert c.cdi_effective('2.3.4', False) is False


def test_CTD_02_unknown_release_follows_the_file_only():
    assert c.cdi_default(None) is None and c.cdi_default('1.6.20') is None
    assert c.cdi_effective(None, None) is None
    assert c.cdi_effective(None, False) is False and c.cdi_effective(None, True) is True
