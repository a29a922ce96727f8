"""lab/bin/run-tests.py, the runner of `make test`: a name that names no step stops it (make test-only STEPS=<typo> ran
nothing and exited 0), and a skipped test fails its step except where a skip is a result (the sanity steps)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("run_tests", ROOT / "lab" / "bin" / "run-tests.py")
RT = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(RT)

JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="s">
<testcase classname="a" name="passes"/>
<testcase classname="a" name="cannot_run"><skipped message="no GPU"/></testcase>
</testsuite></testsuites>"""


def test_a_step_name_that_names_no_step_is_an_error_not_an_empty_green_run():
    with pytest.raises(RT.UnknownSteps, match="no step of the suite starts with 'unitz'"):
        RT.steps(["units", "unitz"])
    assert [s[0] for s in RT.steps(["units"])] == ["units-2.21", "units-2.16"]
    proc = subprocess.run([sys.executable, str(ROOT / "lab" / "bin" / "run-tests.py"), "no-such-step"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "no step of the suite starts with 'no-such-step'" in proc.stderr, proc


@pytest.mark.parametrize("step,failed,skipped", [("lab", 1, 0), ("units-2.21", 1, 0), ("sanity-2.21", 0, 1)])
def test_skipped_tests_fail_their_step_except_sanity_results(tmp_path, monkeypatch, step, failed, skipped):
    monkeypatch.setattr(RT, "RESULTS", str(tmp_path))
    # the step's command writes its JUnit file, as pytest or ansible-test would
    cmd = [sys.executable, "-c", "open(%r, 'w').write(%r)" % (str(tmp_path / "r.xml"), JUNIT)]
    name, p, f, sk, _took, _cpu, note = RT.run_step(step, cmd, "r.xml", dict(os.environ), log=str(tmp_path / "log"))
    assert (p, f, sk) == (1, failed, skipped), note
    if failed:
        assert "a::cannot_run" in note and "1 skipped" in note


def test_the_last_line_counts_skips_and_ci_reads_it(capsys):
    class Args:
        serial = False
    todo = [("x", [], None, "lab"), ("sanity-2.21", [], "s.xml", "checks")]
    rc = RT.report(todo, {"x": ("x", 3, 0, 0, 1.0, 1.0, ""), "sanity-2.21": ("sanity-2.21", 5, 0, 2, 1.0, 1.0, "")},
                   2.0, Args())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 0 and last == "tests: 8 passed, 0 failed, 2 skipped"
    ci = (ROOT / ".ci" / "run").read_text()
    import re
    pattern = re.search(r"grep -E '([^']+)'", ci).group(1)
    assert re.match(pattern, last) and re.match(pattern, "tests: 8 passed, 0 failed")


def test_the_report_names_each_failing_test_before_the_last_line(tmp_path, monkeypatch, capsys):
    """CI shows the end of the output only: the failing tests are named there, above the closing line."""
    monkeypatch.setattr(RT, "RESULTS", str(tmp_path))
    (tmp_path / "m.xml").write_text("""<?xml version="1.0"?><testsuites><testsuite name="s">
<testcase classname="integration.test_x" name="ok"/>
<testcase classname="integration.test_x" name="breaks"><failure message="AttributeError: no info&#10;more">tb</failure></testcase>
<testcase classname="integration.test_y" name="setup"><error message="fixture failed">tb</error></testcase>
</testsuite></testsuites>""")

    class Args:
        serial = False
    todo = [("lab-molecule-lane", [], "m.xml", "molecule")]
    busy, total = RT.machine_cpu()
    rc = RT.report(todo, {"lab-molecule-lane": ("lab-molecule-lane", 1, 2, 0, 1.0, 1.0, "")}, 2.0, Args(),
                   (busy - 10, total - 20))
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 1 and out[-1] == "tests: 1 passed, 2 failed, 0 skipped"
    assert "FAILED lab-molecule-lane: integration.test_x::breaks: AttributeError: no info" in out
    assert "FAILED lab-molecule-lane: integration.test_y::setup: fixture failed" in out
    assert any(line.startswith("machine: ") and "CPU-s busy of" in line for line in out), out


def test_inotify_instances_are_raised_when_lower_and_left_when_enough(tmp_path):
    """make test raises fs.inotify.max_user_instances for the lab's real nodes (peak 111 of a fresh machine's 128)."""
    knob = tmp_path / "max_user_instances"
    knob.write_text("128\n")
    assert "raised from 128 to 1024" in RT.ensure_inotify_instances(str(knob))
    assert knob.read_text() == "1024\n"
    assert RT.ensure_inotify_instances(str(knob)) == "inotify: %s is 1024" % knob
    knob.write_text("4096\n")
    RT.ensure_inotify_instances(str(knob))
    assert knob.read_text() == "4096\n"
    assert "cannot read" in RT.ensure_inotify_instances(str(tmp_path / "absent"))
