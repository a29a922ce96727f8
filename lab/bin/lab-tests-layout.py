#!/usr/bin/env python3
"""Keep lab/tests in its four parts and every reference to a lab test file pointing at the right place.

    lab/tests/simulators/   tests of the lab's stand-ins themselves (NVML simulator, Kubernetes API emulator,
                            vSphere simulator, node containers): they prove the stand-ins behave like the real thing
    lab/tests/integration/  the collection's modules, roles and playbooks run end to end against those stand-ins
    lab/tests/tooling/      the repository's own checks and lab tools (docs links, conformance index, generated
                            variables page, benchmark parsing, real-GPU check script)
    lab/tests/oracles/      differential tests: upstream's own programs (built from the Go module proxy by
                            lab/go/build.sh) and the collection get the same input and must answer the same
    lab/tests/conftest.py and the helpers (vcsim_lab.py) stay in lab/tests and are shared by all four.

    lab/bin/lab-tests-layout.py          move every test_*.py still directly in lab/tests (git mv) into its part,
                                         fix its ROOT computation (one directory deeper) and rewrite every
                                         `lab/tests/test_x.py` reference in tracked text files (conformance tables
                                         included) to the new path. Idempotent: re-run it after merging branches
                                         that added or referenced lab test files at the old place.
    lab/bin/lab-tests-layout.py --check  only report what the above would change (exit 1 when anything)
A file not named below goes to integration/.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, 'lab', 'tests')
PARTS = ('simulators', 'integration', 'tooling', 'oracles')
SIMULATORS = {'test_nvml_sim.py', 'test_kube_emulator.py', 'test_vcsim.py', 'test_node_container.py',
              'test_kube_real.py', 'test_node_real.py'}
TOOLING = {'test_docs.py', 'test_conformance_index.py', 'test_gen_variables_doc.py', 'test_bench_node_roles.py',
           'test_real_gpu_check.py', 'test_lab_tests_layout.py', 'test_role_lifecycle.py', 'test_layout.py',
           'test_engine_script.py'}
ORACLES = {'test_nvidia_ctk.py', 'test_containerd.py', 'test_crio.py', 'test_vcsim_govmomi.py', 'test_mig_profiles.py',
           'test_real_gpu_cdi.py', 'test_gfd_labels.py', 'test_device_plugin.py', 'test_dra_driver_chart.py'}
REF = re.compile(r'lab/tests/(test_[A-Za-z0-9_]+\.py)')
PARENTS = re.compile(r'(Path\(__file__\)\.resolve\(\)\.parents\[)(\d+)(\])')
DIRNAMES = re.compile(r'((?:os\.path\.dirname\()+)(os\.path\.abspath\(__file__\))(\)+)')


def part_of(name):
    if name in SIMULATORS:
        return 'simulators'
    if name in TOOLING:
        return 'tooling'
    if name in ORACLES:
        return 'oracles'
    return 'integration'


def deeper(text):
    """The file's own location computations, one directory deeper."""
    text = PARENTS.sub(lambda m: '%s%d%s' % (m.group(1), int(m.group(2)) + 1, m.group(3)), text)
    return DIRNAMES.sub(lambda m: 'os.path.dirname(' + m.group(1) + m.group(2) + ')' + m.group(3), text)


def where_now():
    """{basename: part} of every test file in the parts."""
    out = {}
    for part in PARTS:
        d = os.path.join(TESTS, part)
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name.startswith('test_') and name.endswith('.py'):
                    out[name] = part
    return out


def tracked_text_files():
    names = subprocess.run(['git', 'ls-files', '-z'], cwd=ROOT, check=True, capture_output=True).stdout.split(b'\0')
    for name in names:
        name = name.decode()
        if name and name.endswith(('.md', '.py', '.yml', '.yaml', '.sh', '.txt', '.cfg', '.ini', '.toml')) \
                and os.path.isfile(os.path.join(ROOT, name)):
            yield name


def main(argv):
    check = '--check' in argv
    changes = []
    stray = sorted(n for n in os.listdir(TESTS) if n.startswith('test_') and n.endswith('.py'))
    for name in stray:
        part = part_of(name)
        changes.append('move lab/tests/%s -> lab/tests/%s/%s' % (name, part, name))
        if not check:
            os.makedirs(os.path.join(TESTS, part), exist_ok=True)
            subprocess.run(['git', 'mv', os.path.join('lab', 'tests', name), os.path.join('lab', 'tests', part, name)],
                           cwd=ROOT, check=True)
            path = os.path.join(TESTS, part, name)
            with open(path) as f:
                text = f.read()
            with open(path, 'w') as f:
                f.write(deeper(text))
    placed = where_now()
    if check:
        placed.update((n, part_of(n)) for n in stray)
    for rel in tracked_text_files():
        path = os.path.join(ROOT, rel)
        try:
            with open(path, encoding='utf-8') as f:
                text = f.read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        new = REF.sub(lambda m: 'lab/tests/%s/%s' % (placed[m.group(1)], m.group(1)) if m.group(1) in placed
                      else m.group(0), text)
        if new != text:
            changes.append('rewrite references in %s' % rel)
            if not check:
                with open(path, 'w', encoding='utf-8') as f:
                    f.write(new)
    for line in changes:
        print(line)
    return 1 if (check and changes) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
