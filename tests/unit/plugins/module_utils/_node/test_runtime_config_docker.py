# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""daemon.json merges on a real-world file (registry mirrors, insecure registries, log-opts, another runtime)."""
import json
import os

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._node.runtime_config_docker import DaemonJsonError, merge_daemon_json

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'fixtures', 'runtime')
NV = '/usr/bin/nvidia-container-runtime'


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_merge_keeps_every_foreign_key_and_order():
    src = fixture('daemon-mirrors-logopts.json')
    before = json.loads(src)
    out, changes = merge_daemon_json(src, runtime_path=NV, set_as_default=True)
    after = json.loads(out)
    assert after['runtimes'] == {'crun': {'path': '/usr/bin/crun'}, 'nvidia': {'path': NV}}
    assert after['default-runtime'] == 'nvidia'
    for key in before:
        if key != 'runtimes':
            assert after[key] == before[key], key
    assert list(after)[:len(before)] == list(before)  # key order kept
    assert out.startswith('{\n    "registry-mirrors"')  # 4-space indentation of the file kept
    assert len(changes) == 2


def test_idempotent_returns_text_unchanged():
    src = fixture('daemon-mirrors-logopts.json')
    out = merge_daemon_json(src, runtime_path=NV, set_as_default=True)[0]
    again, changes = merge_daemon_json(out, runtime_path=NV, set_as_default=True)
    assert changes == [] and again is out
    # an already-correct file written by someone else is not reformatted
    compact = json.dumps(json.loads(out))
    assert merge_daemon_json(compact, runtime_path=NV, set_as_default=True) == (compact, [])


def test_default_runtime_reset_only_when_it_is_ours():
    out, changes = merge_daemon_json('{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "x"}}}', runtime_path='x')
    assert 'default-runtime' not in json.loads(out)
    out, changes = merge_daemon_json('{"default-runtime": "crun"}', runtime_path='x')
    assert json.loads(out)['default-runtime'] == 'crun'


def test_existing_entry_keys_kept_and_args():
    src = '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}'
    out, changes = merge_daemon_json(src, runtime_path=NV, runtime_args=['--debug'])
    assert json.loads(out)['runtimes']['nvidia'] == {'path': NV, 'args': [], 'runtimeArgs': ['--debug']}
    out2 = merge_daemon_json(out, runtime_path=NV, runtime_args=[])[0]
    assert 'runtimeArgs' not in json.loads(out2)['runtimes']['nvidia']
    assert merge_daemon_json(out, runtime_path=NV)[1] == []  # runtime_args None: args left alone


@pytest.mark.parametrize('src', [None, '', '  \n'])
def test_missing_or_empty_file(src):
    out, changes = merge_daemon_json(src, runtime_path=NV)
    assert json.loads(out) == {'runtimes': {'nvidia': {'path': NV}}}
    assert out.startswith('{\n  "runtimes"')


def test_absent_removes_only_ours():
    src = fixture('daemon-mirrors-logopts.json')
    added = merge_daemon_json(src, runtime_path=NV, set_as_default=True)[0]
    removed, changes = merge_daemon_json(added, state='absent')
    assert json.loads(removed) == json.loads(src)
    assert merge_daemon_json('{"runtimes": {"nvidia": {"path": "x"}}}', state='absent')[0].strip() == '{}'
    assert merge_daemon_json('{"a": 1}', state='absent') == ('{"a": 1}', [])


@pytest.mark.parametrize('src,msg', [
    ('{"a": 1,}', 'not valid JSON'), ('[1]', 'JSON object'), ('{"runtimes": []}', '"runtimes" must be an object'),
    ('{"runtimes": {"nvidia": "x"}}', 'runtimes.nvidia must be an object'),
])
def test_bad_files_refused(src, msg):
    with pytest.raises(DaemonJsonError, match=msg):
        merge_daemon_json(src)
