# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""file_utils: the one read / back up / write-atomically helper the file-writing modules share."""
import os
import shutil

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import file_utils as fu


class FakeModule(object):
    """Just atomic_move, as AnsibleModule does it for a file on the same filesystem (keeps an existing mode)."""

    def __init__(self):
        self.moves = []

    def atomic_move(self, src, dest, unsafe_writes=False):
        self.moves.append((src, dest))
        if os.path.exists(dest):
            os.chmod(src, os.stat(dest).st_mode & 0o7777)
        shutil.move(src, dest)


def test_read_text_missing_is_none_and_unreadable_raises(tmp_path):
    assert fu.read_text(str(tmp_path / 'nope')) is None
    f = tmp_path / 'f'
    f.write_bytes(b'caf\xc3\xa9 \xff\n')
    assert fu.read_text(str(f)) == u'caf\xe9 \udcff\n'
    with pytest.raises((IOError, OSError)):
        fu.read_text(str(tmp_path))  # a directory exists but cannot be read as a file


def test_replace_file_new_file_gets_0644_and_no_backup(tmp_path):
    m = FakeModule()
    path = str(tmp_path / 'sub' / 'conf')
    assert fu.replace_file(m, path, b'a\n', backup=True) is None
    assert open(path, 'rb').read() == b'a\n' and os.stat(path).st_mode & 0o7777 == 0o644
    assert os.path.dirname(m.moves[0][0]) == os.path.dirname(path)


def test_replace_file_backs_up_keeps_mode_and_stages_elsewhere(tmp_path):
    m = FakeModule()
    conf = tmp_path / 'manifests' / 'kube-scheduler.yaml'
    conf.parent.mkdir()
    conf.write_bytes(b'old\n')
    os.chmod(str(conf), 0o600)
    stage = tmp_path / 'stage'
    backup = fu.replace_file(m, str(conf), b'new\n', backup=True, backup_dir=str(tmp_path / 'bk'), stage_dir=str(stage))
    assert conf.read_bytes() == b'new\n' and os.stat(str(conf)).st_mode & 0o7777 == 0o600
    assert open(backup, 'rb').read() == b'old\n' and os.path.dirname(backup) == str(tmp_path / 'bk')
    assert os.path.dirname(m.moves[0][0]) == str(stage) and os.stat(str(stage)).st_mode & 0o777 == 0o700
    assert sorted(os.listdir(str(conf.parent))) == ['kube-scheduler.yaml']  # nothing left beside the manifest


def test_replace_file_none_deletes_after_backup_and_mode_is_applied(tmp_path):
    m = FakeModule()
    f = tmp_path / 'unit'
    f.write_bytes(b'x')
    backup = fu.replace_file(m, str(f), None, backup=True)
    assert not f.exists() and open(backup, 'rb').read() == b'x' and os.path.dirname(backup) == str(tmp_path)
    assert fu.replace_file(m, str(f), None, backup=True) is None  # already gone: nothing to do
    fu.replace_file(m, str(f), b'y', mode=0o640)
    assert os.stat(str(f)).st_mode & 0o7777 == 0o640
    fu.replace_file(m, str(f), b'z', backup=False)
    assert sorted(os.listdir(str(tmp_path))) == sorted([os.path.basename(backup), 'unit'])
