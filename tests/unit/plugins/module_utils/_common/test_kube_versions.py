# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube_versions: the one place for the Kubernetes range, the version parser and the served-API windows; the ranges
the argument_specs, module docs, role READMEs and docs state are compared with it (a new minor is one file)."""
import glob
import os
import re

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import kube_versions as KV

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..'))


@pytest.mark.parametrize('text,strict,expected', [
    ('v1.29.4', True, (1, 29, 4)),
    ('1.29', True, (1, 29, None)),
    ('v1.28.9+rke2r1', True, (1, 28, 9)),
    ('v1.36.0-eks-2d5f260', True, (1, 36, 0)),
    (' v1.30.1 ', True, (1, 30, 1)),
    ('1.29.4.5', True, None),
    ('v1.29x', True, None),
    ('v1.29x', False, (1, 29, None)),
    ('1.29.4.5', False, (1, 29, 4)),
    ('latest', False, None),
    ('', False, None),
    (None, True, None),
])
def test_parse(text, strict, expected):
    assert KV.parse(text, strict=strict) == expected


def test_minor_of_and_ranges():
    assert KV.minor_of('v1.31.1+k3s1') == 31
    assert KV.minor_of('v2.1.0') is None
    assert KV.minor_of('') is None
    assert KV.SUPPORTED == (KV.SUPPORTED_MIN_MINOR, KV.MAX_MINOR)
    assert KV.MIN_MINOR < KV.SUPPORTED_MIN_MINOR <= KV.UPSTREAM_SUPPORTED[0] <= KV.UPSTREAM_SUPPORTED[1] == KV.MAX_MINOR
    assert KV.in_range(37, (25, None)) and not KV.in_range(24, (25, None)) and not KV.in_range(29, (23, 28))


def test_scheduler_config_windows():
    assert KV.scheduler_config_api(KV.MIN_MINOR) == ('Policy', 'v1')
    assert KV.scheduler_config_api(22) == ('Policy', 'v1')
    assert KV.scheduler_config_api(23) == (KV.KSC, KV.KSC_GROUP + '/v1beta3')
    assert KV.scheduler_config_api(24) == (KV.KSC, KV.KSC_GROUP + '/v1beta3')
    assert KV.scheduler_config_api(KV.MAX_MINOR) == (KV.KSC, KV.KSC_GROUP + '/v1')
    # what the collection renders is served by the minor it renders for, for every accepted minor
    for minor in range(KV.POLICY_LAST_MINOR + 1, KV.MAX_MINOR + 1):
        assert KV.scheduler_config_served(KV.scheduler_config_api(minor)[1], minor), minor
    assert not KV.scheduler_config_served(KV.KSC_GROUP + '/v1beta3', 29)
    assert not KV.scheduler_config_served('v1', 29)
    assert KV.scheduler_config_summary() == ('Policy below 1.23, kubescheduler.config.k8s.io/v1beta3 for 1.23-1.24, '
                                             'kubescheduler.config.k8s.io/v1 from 1.25')


def _read(path):
    with open(path) as f:
        return f.read()


# "1.24 to 1.37", "v1.24 to v1.37", "1.16-1.37", "1.24–1.37", "1.25 - 1.37", "1.25 – 1.37", "1.25 through 1.37"
_RANGE = re.compile(r'\bv?1\.(\d+)(?: to | - | \u2013 |-|\u2013| through )v?1\.(\d+)\b')
# the places that state the range to users: module docs, argument_specs (and the READMEs and variables doc generated
# from them), the docs, the conformance pages and the README
STATEMENT_FILES = (['plugins/modules/*.py', 'roles/*/meta/argument_specs.yml', 'roles/*/README.md', 'docs/*.md',
                    'docs/conformance/*.md', 'README.md'])
# the Markdown pages written by hand (not generated from argument_specs), where make generate writes the ranges
# between <!-- gen:kube RANGE --> markers (lab/bin/gen-from-model.py)
HAND_WRITTEN_DOCS = ['docs/*.md', 'docs/conformance/*.md', 'README.md']
GENERATED_DOCS = ('docs/variables.md',)
_MARKED = re.compile(r'<!-- gen:kube [a-z0-9-]+ -->[^<]*<!-- /gen -->')


def _statements():
    for pattern in STATEMENT_FILES:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            text = _read(path)
            for m in _RANGE.finditer(text):
                yield os.path.relpath(path, ROOT), int(m.group(1)), int(m.group(2))


def test_the_stated_kubernetes_ranges_end_at_max_minor():
    """A range that starts at one of kube_versions' boundaries and runs past the last component-config change is a
    statement of the collection's range: it ends at MAX_MINOR (older ranges, like 1.16 to 1.23 for legacy clusters or
    Volcano's own table, start elsewhere or end below)."""
    starts = (KV.MIN_MINOR, KV.SUPPORTED_MIN_MINOR, KV.SCHEDULER_CONFIG_RENDERED[0][0])
    last_change = max(w[1] for w in KV.SCHEDULER_CONFIG_WINDOWS.values() if w[1] is not None)
    found = [(p, a, b) for p, a, b in _statements() if a in starts and b > last_change]
    wrong = [(p, '1.%d-1.%d' % (a, b)) for p, a, b in found if b != KV.MAX_MINOR]
    assert not wrong, 'ranges that disagree with kube_versions.MAX_MINOR (1.%d): %s' % (KV.MAX_MINOR, wrong)
    where = set(p for p, _a, _b in found)
    # the argument_specs and the module docs that state the range are read (the test cannot pass on nothing)
    for path in ('plugins/modules/kube_scheduler_config.py', 'roles/kube_scheduler_extender/meta/argument_specs.yml',
                 'roles/gpu_sharing_stack/meta/argument_specs.yml'):
        assert path in where, path
    assert ('roles/kube_scheduler_extender/meta/argument_specs.yml', KV.SUPPORTED_MIN_MINOR, KV.MAX_MINOR) in found
    assert ('roles/gpu_sharing_stack/meta/argument_specs.yml', KV.SUPPORTED_MIN_MINOR, KV.MAX_MINOR) in found
    assert ('plugins/modules/kube_scheduler_config.py', KV.MIN_MINOR, KV.MAX_MINOR) in found


def test_the_hand_written_docs_state_the_range_in_generated_markers():
    """The range statements in hand-written Markdown are written by make generate (lab/bin/gen-from-model.py, from
    this module), between markers; the one exception is a range inside a code span (a quoted error message), which the
    test above keeps equal to MAX_MINOR. docs/cluster.md's "1.25 – 1.37" was missed by the old pattern."""
    starts = (KV.MIN_MINOR, KV.SUPPORTED_MIN_MINOR, KV.SCHEDULER_CONFIG_RENDERED[0][0], KV.UPSTREAM_SUPPORTED[0])
    last_change = max(w[1] for w in KV.SCHEDULER_CONFIG_WINDOWS.values() if w[1] is not None)
    unmarked, marked = [], 0
    for pattern in HAND_WRITTEN_DOCS:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            rel = os.path.relpath(path, ROOT)
            if rel in GENERATED_DOCS:
                continue
            for n, line in enumerate(_read(path).splitlines(), 1):
                marked += len(_MARKED.findall(line))
                rest = _MARKED.sub('', line)
                rest = re.sub(r'`[^`]*`', '', rest)  # code spans: quoted output
                for m in _RANGE.finditer(rest):
                    if int(m.group(1)) in starts and int(m.group(2)) > last_change:
                        unmarked.append('%s:%d: %s' % (rel, n, m.group(0)))
    assert not unmarked, 'ranges not written by make generate (mark them <!-- gen:kube RANGE -->): %s' % unmarked
    assert marked >= 16, marked
    cluster = _read(os.path.join(ROOT, 'docs', 'cluster.md'))
    assert '<!-- gen:kube scheduler-v1 -->1.%d \u2013 1.%d<!-- /gen -->' % (
        KV.SCHEDULER_CONFIG_RENDERED[0][0], KV.MAX_MINOR) in cluster


def test_the_module_doc_states_the_rendered_windows():
    text = re.sub(r'\s+', ' ', _read(os.path.join(ROOT, 'plugins/modules/kube_scheduler_config.py')))
    v1beta3_first = KV.SCHEDULER_CONFIG_RENDERED[1][0]
    v1_first = KV.SCHEDULER_CONFIG_RENDERED[0][0]
    assert 'for 1.%d to 1.%d, C(%s/v1beta3)' % (KV.MIN_MINOR, KV.POLICY_LAST_MINOR, KV.KSC_GROUP) in text
    assert 'for 1.%d and 1.%d, and C(%s/v1) from 1.%d to 1.%d.' % (
        v1beta3_first, v1_first - 1, KV.KSC_GROUP, v1_first, KV.MAX_MINOR) in text
    assert '1.%d to 1.%d is the supported range; 1.%d to 1.%d are accepted for legacy' % (
        KV.SUPPORTED_MIN_MINOR, KV.MAX_MINOR, KV.MIN_MINOR, KV.SUPPORTED_MIN_MINOR - 1) in text


def test_no_other_kubernetes_range_literal_in_plugins():
    """The minors live in kube_versions.py: no other module_utils file compares with a literal Kubernetes range."""
    offenders = []
    for path in glob.glob(os.path.join(ROOT, 'plugins', '**', '*.py'), recursive=True):
        if path.endswith('kube_versions.py'):
            continue
        for n, line in enumerate(_read(path).splitlines(), 1):
            code = line.split('#', 1)[0]
            pattern = (r'KUBE_MINORS\s*=\s*\(|MAX_MINOR\s*=\s*\d|MIN_MINOR\s*=\s*\d|minor\s*[<>]=?\s*2[2-5]\b|'
                       r"'kubescheduler\.config\.k8s\.io/v1\w*'\s*:\s*\(")
            if re.search(pattern, code):
                offenders.append('%s:%d: %s' % (os.path.relpath(path, ROOT), n, line.strip()))
    assert not offenders, offenders
