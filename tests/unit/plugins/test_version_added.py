# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""version_added of every module and plugin is consistent with galaxy.yml's history: every DOCUMENTATION states
one, and it names a release of the collection (changelogs/changelog.yaml) or the version galaxy.yml is at now,
never a later one. Nothing was released yet and galaxy.yml has only ever said 0.1.0, so today that is 0.1.0."""
import ast
import glob
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))


def _version(text):
    return tuple(int(x) for x in str(text).split('.'))


def _documented():
    out = []
    for kind in ('modules', 'filter', 'action', 'lookup', 'inventory', 'callback', 'connection', 'test'):
        for path in sorted(glob.glob(os.path.join(ROOT, 'plugins', kind, '*.py'))):
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in tree.body:
                if isinstance(node, ast.Assign) and [getattr(t, 'id', None) for t in node.targets] == ['DOCUMENTATION']:
                    out.append((os.path.relpath(path, ROOT), yaml.safe_load(node.value.value)))
    return out


def _nested(doc, where=''):
    """Every version_added below the top level (options, suboptions), as (where, value)."""
    for name, opt in ((doc or {}).get('options') or {}).items():
        if 'version_added' in opt:
            yield where + name, opt['version_added']
        yield from _nested({'options': opt.get('suboptions')}, where + name + '.')


def _allowed():
    with open(os.path.join(ROOT, 'galaxy.yml')) as f:
        current = str(yaml.safe_load(f)['version'])
    with open(os.path.join(ROOT, 'changelogs', 'changelog.yaml')) as f:
        released = list((yaml.safe_load(f) or {}).get('releases') or {})
    return current, set(str(v) for v in released) | {current}


DOCUMENTED = _documented()


def test_every_plugin_is_found():
    assert len(DOCUMENTED) > 20 and any(p.startswith('plugins/modules/') for p, _d in DOCUMENTED)


@pytest.mark.parametrize('path, doc', DOCUMENTED, ids=[p for p, _d in DOCUMENTED])
def test_version_added_is_a_release_or_the_current_version(path, doc):
    current, allowed = _allowed()
    assert 'version_added' in doc, '%s: DOCUMENTATION has no version_added' % path
    for where, value in [('', doc['version_added'])] + list(_nested(doc)):
        assert str(value) in allowed and _version(value) <= _version(current), (
            '%s %s: version_added %s is neither a release (changelogs/changelog.yaml) nor galaxy.yml\'s version %s'
            % (path, where or 'DOCUMENTATION', value, current))
