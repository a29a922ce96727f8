"""The documentation's cross-references: relative links and anchors resolve, and troubleshooting.md covers every
finding the doctor can emit."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PAGES = sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md'))) + [os.path.join(ROOT, 'README.md')]
LINK = re.compile(r'\]\(([^)\s]+)\)')
FENCE = re.compile(r'^```.*?^```', re.S | re.M)


def slug(heading):
    """GitHub's anchor for a heading."""
    text = heading.strip().lower().replace('`', '')
    return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def anchors(path):
    with open(path, encoding='utf-8') as f:
        text = FENCE.sub('', f.read())
    return {slug(line.lstrip('#')) for line in text.splitlines() if line.startswith('#')}


def links(path):
    with open(path, encoding='utf-8') as f:
        text = FENCE.sub('', f.read())
    text = re.sub(r'`[^`\n]*`', '', text)  # links inside code spans are not links
    return [m.group(1) for m in LINK.finditer(text) if not re.match(r'^[a-z]+://|^mailto:', m.group(1))]


@pytest.mark.parametrize('page', PAGES, ids=[os.path.relpath(p, ROOT) for p in PAGES])
def test_relative_links_resolve(page):
    broken = []
    for link in links(page):
        target, _sep, anchor = link.partition('#')
        path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
        if not os.path.exists(path):
            broken.append('%s: no such file' % link)
        elif anchor and path.endswith('.md') and anchor not in anchors(path):
            broken.append('%s: no heading with that anchor in %s' % (link, os.path.relpath(path, ROOT)))
    assert not broken, '%s has broken links:\n  %s' % (os.path.relpath(page, ROOT), '\n  '.join(broken))


def doctor_ids():
    with open(os.path.join(ROOT, 'plugins', 'module_utils', '_doctor', 'gpu_doctor_checks.py'), encoding='utf-8') as f:
        src = f.read()
    ids = set(re.findall(r"finding\(\s*'([a-z0-9_]+)'", src))
    assert len(ids) >= 15, 'could not read the finding ids from gpu_doctor_checks.py: %s' % sorted(ids)
    return ids


def test_troubleshooting_covers_every_doctor_finding():
    with open(os.path.join(ROOT, 'docs', 'troubleshooting.md'), encoding='utf-8') as f:
        text = f.read()
    missing = sorted(i for i in doctor_ids() if '`%s`' % i not in text)
    assert not missing, 'docs/troubleshooting.md does not mention these doctor findings: %s' % ', '.join(missing)


def test_troubleshooting_cites_existing_seed_names():
    """Each entry names the field note it comes from; the names follow the seed files' NNN_<hash>.txt form."""
    with open(os.path.join(ROOT, 'docs', 'troubleshooting.md'), encoding='utf-8') as f:
        text = f.read()
    entries = re.split(r'^### ', text, flags=re.M)[1:]
    assert len(entries) >= 25
    for entry in entries:
        seed = re.search(r'\*\*Seed\*\*: (.*)', entry)
        assert seed, 'entry without a Seed line: %s' % entry.splitlines()[0]
        assert re.search(r'`\d{3}_[0-9a-f]{16}\.txt`|none', seed.group(1)), entry.splitlines()[0]
