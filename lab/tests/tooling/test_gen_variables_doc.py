"""lab/bin/gen-variables-doc.py: docs/variables.md generation and the drift check lint.sh runs."""
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'bin', 'gen-variables-doc.py')

SPECS = """\
---
argument_specs:
  main:
    short_description: A demo role
    description:
      - Uses C(code), V(value), O(demo_mode=fast), M(gpuops.k8s_gpu.gpu_info) and L(a link,https://example.com).
    options:
      demo_mode:
        description: Mode.
        type: str
        choices: [fast, slow]
        default: fast
      demo_count:
        description: A count.
        type: int
        default: 3
      demo_url:
        description: Computed from the mirror.
        type: str
      demo_settings:
        description: Settings.
        type: dict
        default: {}
        options:
          size:
            description: Size with a | pipe.
            type: int
            default: 4
  extra:
    short_description: Second entry point
    options:
      demo_extra:
        description: Only for tasks_from extra.
        type: bool
        default: false
"""
DEFAULTS = """\
---
demo_mode: fast
demo_count: 3
demo_url: "{{ gpuops_mirror.files | default('') }}/x"
demo_settings: {}
demo_extra: false
"""


def run(root, *args):
    return subprocess.run([sys.executable, SCRIPT, '--root', str(root)] + list(args), capture_output=True, text=True)


@pytest.fixture()
def tree(tmp_path):
    role = tmp_path / 'roles' / 'demo'
    (role / 'meta').mkdir(parents=True)
    (role / 'defaults').mkdir()
    (tmp_path / 'docs').mkdir()
    (role / 'meta' / 'argument_specs.yml').write_text(SPECS)
    (role / 'defaults' / 'main.yml').write_text(DEFAULTS)
    return tmp_path


def test_generate_then_check_passes(tree):
    gen = run(tree)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    doc = (tree / 'docs' / 'variables.md').read_text()
    assert '### demo — entry point `main`' in doc
    assert '### demo — entry point `extra` (`tasks_from: extra`)' in doc
    assert '| `demo_mode` | str | `fast` | `fast`, `slow` |  | Mode. |' in doc
    assert '| `demo_settings.size` | int | `4` |  |  | Size with a \\| pipe. |' in doc
    assert "computed: `{{ gpuops_mirror.files \\| default('') }}/x`" in doc
    assert '`code`, `value`, `demo_mode=fast`, `gpuops.k8s_gpu.gpu_info` and [a link](https://example.com)' in doc
    chk = run(tree, '--check')
    assert chk.returncode == 0, chk.stdout + chk.stderr
    assert '0 errors' in chk.stdout
    # a second generation changes nothing
    assert 'up to date' in run(tree).stdout


def test_stale_page_fails(tree):
    run(tree)
    spec = tree / 'roles' / 'demo' / 'meta' / 'argument_specs.yml'
    spec.write_text(SPECS.replace('description: Mode.', 'description: The mode.'))
    chk = run(tree, '--check')
    assert chk.returncode == 1
    assert 'docs/variables.md is stale' in chk.stdout
    assert '.venv/bin/python lab/bin/gen-variables-doc.py' in chk.stdout


@pytest.mark.parametrize('defaults, message', [
    (DEFAULTS + 'demo_secret: x\n',
     'roles/demo/defaults/main.yml:7: variables-doc: demo_secret is defined in defaults but no argument_specs'),
    (DEFAULTS.replace('demo_count: 3', 'demo_count: 5'),
     'roles/demo/defaults/main.yml:3: variables-doc: demo_count defaults to 5 in defaults but argument_specs'),
    (DEFAULTS.replace('demo_count: 3\n', ''),
     'variables-doc: demo_count has default 3 in argument_specs (main) but defaults/main.yml does not set it'),
    (DEFAULTS.replace('demo_mode: fast', 'demo_mode: medium'),
     "variables-doc: demo_mode = medium in defaults is not one of the argument_specs choices [fast, slow]"),
    (DEFAULTS.replace('demo_extra: false', 'demo_extra: "no"'),
     "variables-doc: demo_extra = 'no' in defaults is a str, argument_specs (extra) says type bool"),
])
def test_drift_fails_with_file_line_and_variable(tree, defaults, message):
    (tree / 'roles' / 'demo' / 'defaults' / 'main.yml').write_text(defaults)
    run(tree)  # the page is current: only the drift fails
    chk = run(tree, '--check')
    assert chk.returncode == 1, chk.stdout
    assert message in chk.stdout, chk.stdout


def test_required_placeholder(tree):
    spec = SPECS.replace("""      demo_count:
        description: A count.""", """      demo_host:
        description: Host (must be set).
        type: str
        required: true
      demo_dist:
        description: Distribution (must be set).
        type: str
        required: true
        choices: [a, b]
      demo_count:
        description: A count.""")
    (tree / 'roles' / 'demo' / 'meta' / 'argument_specs.yml').write_text(spec)
    (tree / 'roles' / 'demo' / 'defaults' / 'main.yml').write_text(DEFAULTS + 'demo_host: ""\ndemo_dist: ""\n')
    run(tree)
    chk = run(tree, '--check')
    # '' for a required option with choices is rejected by role validation: fine. Without choices it never fires: warn.
    assert chk.returncode == 0, chk.stdout
    assert 'warning: demo_host is required' in chk.stdout
    assert 'demo_dist' not in chk.stdout


def test_unparsable_yaml_is_a_finding_not_a_traceback(tree):
    (tree / 'roles' / 'demo' / 'defaults' / 'main.yml').write_text('---\ndemo_mode: a: b\n')
    chk = run(tree, '--check')
    assert chk.returncode == 1
    assert 'Traceback' not in chk.stdout + chk.stderr
    assert 'roles/demo/defaults/main.yml:2: variables-doc: cannot parse YAML' in chk.stdout
