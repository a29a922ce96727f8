"""lab/bin/bump-pin.py: prints every place a pin bump touches, and applies it with --write (in a throwaway copy)."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, 'lab', 'bin', 'bump-pin.py')
PINS = os.path.join('plugins', 'module_utils', '_common', 'pins.py')


def run(root, *args):
    return subprocess.run([sys.executable, os.path.join(root, 'lab', 'bin', 'bump-pin.py')] + list(args), cwd=root,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)


def test_dry_run_names_every_place_of_the_pin():
    out = run(ROOT, 'hami', 'v2.11.0')
    assert out.returncode == 0, out.stderr
    for path in (PINS, 'roles/gpu_sharing_stack/meta/argument_specs.yml', 'docs/variables.md',
                 'tests/unit/plugins/module_utils/_cluster/test_gpu_stack_hami.py'):
        assert path in out.stdout, (path, out.stdout)
    assert 'changelogs/' not in out.stdout
    bad = run(ROOT, 'no-such-pin', '1')
    assert bad.returncode == 2 and 'pins: ' in bad.stderr


def test_write_applies_the_bump(tmp_path):
    root = str(tmp_path)
    for rel in (os.path.join('lab', 'bin', 'bump-pin.py'), PINS):
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(root, rel))
    spec = os.path.join(root, 'roles', 'r', 'meta', 'argument_specs.yml')
    os.makedirs(os.path.dirname(spec))
    with open(spec, 'w') as f:
        f.write('image:\n  default: docker.io/projecthami/hami:v2.10.0\nother: docker.io/projecthami/hami:v2.10.01\n')
    subprocess.run(['git', 'init', '-q', root], check=True)
    out = run(root, 'hami', 'v2.11.0', '--write')
    assert out.returncode == 0, out.stderr
    with open(spec) as f:
        assert f.read() == ('image:\n  default: docker.io/projecthami/hami:v2.11.0\n'
                            'other: docker.io/projecthami/hami:v2.10.01\n')
    with open(os.path.join(root, PINS)) as f:
        text = f.read()
    assert "tag='v2.11.0'" in text and text.count("tag='v2.10.0'") == 0
    # upstream_ref was the tag: it follows (the conformance rows are read again by hand: test_pins.py asks for a row
    # citing it), and the script says so
    assert "upstream_ref='v2.11.0'" in text and "upstream_ref='v2.10.0'" not in text
    assert 'by hand: read Project-HAMi/HAMi at v2.11.0 and update the rows of docs/conformance/hami.md' in out.stdout
    # a pin whose upstream_ref is not its tag (volcano: release 1.15, read at v1.15.1) keeps it unless --ref names it
    vol = run(root, 'volcano', '1.16', '--write')
    assert vol.returncode == 0 and 'give --ref REF' in vol.stdout, vol.stdout
    with open(os.path.join(root, PINS)) as f:
        text = f.read()
    assert "tag='1.16'" in text and "upstream_ref='v1.15.1'" in text
    vol = run(root, 'volcano', '1.17', '--write', '--ref', 'v1.17.0')
    assert vol.returncode == 0, vol.stderr
    with open(os.path.join(root, PINS)) as f:
        text = f.read()
    assert "tag='1.17'" in text and "upstream_ref='v1.17.0'" in text and "upstream_ref='v1.15.1'" not in text
    again = run(root, 'hami', 'v2.12.0')
    assert '2 files, 1 lines besides pins.py' in again.stdout, again.stdout
