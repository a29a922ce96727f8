# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""stacks/common.chart_yaml_version: a chart's version from its Chart.yaml, None when it cannot be read (issue #39:
mypy found that a .tgz whose <chart>/Chart.yaml is not a regular file raised AttributeError: extractfile gives None)."""
from __future__ import annotations

import io
import tarfile

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import chart_yaml_version


def _tgz(path, members):
    with tarfile.open(str(path), 'w:gz') as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_version_from_a_packed_chart(tmp_path):
    path = _tgz(tmp_path / 'c-1.2.3.tgz', [('c/Chart.yaml', b'apiVersion: v2\nname: c\nversion: "1.2.3"\n')])
    assert chart_yaml_version(path) == '1.2.3'


def test_version_from_an_unpacked_chart(tmp_path):
    (tmp_path / 'Chart.yaml').write_text('name: c\nversion: 0.5.0\n')
    assert chart_yaml_version(str(tmp_path)) == '0.5.0'


def test_a_chart_yaml_that_is_not_a_file_cannot_be_read(tmp_path):
    path = _tgz(tmp_path / 'odd.tgz', [('c/Chart.yaml', None)])
    assert chart_yaml_version(path) is None


def test_no_chart_yaml_and_no_archive(tmp_path):
    assert chart_yaml_version(_tgz(tmp_path / 'e.tgz', [('c/values.yaml', b'a: 1\n')])) is None
    (tmp_path / 'x.txt').write_text('not a chart')
    assert chart_yaml_version(str(tmp_path / 'x.txt')) is None
