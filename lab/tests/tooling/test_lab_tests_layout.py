"""lab/tests keeps its four parts (simulators/, integration/, tooling/, oracles/) and every reference to a lab test file
points at the file's place: lab/bin/lab-tests-layout.py --check reports nothing to move or rewrite."""
import os
import subprocess
import sys

from conftest import ROOT


def test_lab_tests_are_in_their_parts_and_references_follow():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'lab', 'bin', 'lab-tests-layout.py'), '--check'],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, 'run lab/bin/lab-tests-layout.py (no --check) to fix:\n' + proc.stdout + proc.stderr
