"""The conformance tables (docs/conformance/*.md, convention in docs/conformance/README.md) stay tested.

Fails when a table's header differs from the convention, when a row id is malformed or repeated, when a row's
source does not name a repository (owner/name), a path and a tag or commit, when its test column is not
`file::function` naming an existing test function whose name contains the id, or when no test function in
tests/unit or lab/tests contains the id (with `_` for `-`).
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEADER = "| id | upstream requires | source (repo, path, tag) | we render / do | test |"
ID_RE = re.compile(r"^[A-Z][A-Z0-9]*-\d+$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
DEF_RE = re.compile(r"^\s*(?:async\s+)?def\s+(test_\w+)\s*\(", re.M)

REF_RE = re.compile(r"^(?:@?[0-9a-f]{7,40}|@?v?\d+(?:\.\d+)*[\w.+-]*|unpinned\b.*)$")


def source_problem(source):
    """None when a source cell names its sources well, else what is wrong.

    Sources are separated by ``;``. Each is ``owner/name, path[, path...], ref`` (ref: a tag such as v0.20.0, a commit,
    or the word ``unpinned`` followed by why, which marks a weak source openly), or an ``https://`` documentation page,
    or ``project rule: ...`` (a rule of this project, not an upstream fact). At least one upstream source is needed
    unless the whole cell is a project rule.
    """
    parts = [p.strip().strip("`").strip() for p in source.split(";") if p.strip()]
    if not parts:
        return "source must not be empty"
    upstream = 0
    for part in parts:
        if part.startswith("https://"):
            upstream += 1
            continue
        if part.startswith("project rule"):
            continue
        weak = re.search(r",\s*(unpinned\b.*)$", part)
        fields = [f.strip().strip("`") for f in (part[:weak.start()] if weak else part).split(",")]
        fields += [weak.group(1)] if weak else []
        if len(fields) < 3 or not REPO_RE.match(fields[0]) or not fields[1] or not REF_RE.match(fields[-1]):
            return "each source must be 'owner/name, path, tag-or-commit', an https:// page or 'project rule: ...'"
        upstream += 1
    if not upstream and not parts[0].startswith("project rule"):
        return "no upstream source"
    return None


def _cells(line):
    """Split a markdown table row on unescaped pipes outside backticks."""
    cells, cur, tick = [], "", False
    body = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "|"
            i += 2
            continue
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur.strip())
    return cells


def collect_test_functions(root):
    """{file relative to root: set of test function names} under tests/unit and lab/tests."""
    out = {}
    for base in ("tests/unit", "lab/tests"):
        for path in sorted((root / base).rglob("test_*.py")):
            out[str(path.relative_to(root))] = set(DEF_RE.findall(path.read_text(errors="replace")))
    return out


def check(root):
    """Every problem of every conformance table under root, as strings (empty: all good)."""
    problems, seen = [], {}
    tests = collect_test_functions(root)
    all_names = set().union(*tests.values()) if tests else set()
    tables = sorted(p for p in (root / "docs" / "conformance").glob("*.md") if p.name != "README.md")
    for table in tables:
        lines = table.read_text().splitlines()
        start = [i for i, line in enumerate(lines) if line.strip().startswith("| id ")]
        if len(start) != 1 or lines[start[0]].strip() != HEADER:
            problems.append(f"{table.name}: the table header must be exactly {HEADER!r} (once)")
            continue
        rows = []
        for line in lines[start[0] + 2:]:
            if not line.strip().startswith("|"):
                break
            rows.append(_cells(line))
        if not rows:
            problems.append(f"{table.name}: the table has no rows")
        for cells in rows:
            if len(cells) != 5:
                problems.append(f"{table.name}: row {cells[:1]} has {len(cells)} cells, expected 5")
                continue
            rid, requires, source, ours, test = cells
            where = f"{table.name} {rid}"
            if not ID_RE.match(rid):
                problems.append(f"{where}: id must be PREFIX-NN (upper case, dash, number)")
            if rid in seen:
                problems.append(f"{where}: id also used in {seen[rid]}")
            seen[rid] = table.name
            if not requires or not ours:
                problems.append(f"{where}: 'upstream requires' and 'we render / do' must not be empty")
            bad = source_problem(source)
            if bad:
                problems.append(f"{where}: {bad} (got {source!r})")
            key = rid.replace("-", "_")
            if not any(key in name for name in all_names):
                problems.append(f"{where}: no test function in tests/unit or lab/tests contains {key}")
            refs = [r.strip().strip("`") for r in re.split(r"[,;]\s*|<br>", test) if r.strip()]
            if not refs:
                problems.append(f"{where}: test must be file::function (got {test!r})")
            for ref in refs:
                if "::" not in ref:
                    problems.append(f"{where}: test must be file::function (got {ref!r})")
                    continue
                fname, func = ref.split("::", 1)
                func = func.split("[", 1)[0]
                if key not in func:
                    problems.append(f"{where}: test {func} does not contain {key}")
                elif func not in tests.get(fname, set()):
                    problems.append(f"{where}: {fname} has no function {func}")
    return problems


def test_conformance_tables_are_all_tested():
    tables = [p for p in (ROOT / "docs" / "conformance").glob("*.md") if p.name != "README.md"]
    assert tables, "docs/conformance holds no table"
    assert check(ROOT) == []


def _fake(tmp_path, table, tests="def test_AB_01_x():\n    pass\n"):
    (tmp_path / "docs" / "conformance").mkdir(parents=True)
    (tmp_path / "docs" / "conformance" / "README.md").write_text("| nothing | checked |\n")
    (tmp_path / "docs" / "conformance" / "ab.md").write_text(table)
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "lab" / "tests").mkdir(parents=True)
    (tmp_path / "lab" / "tests" / "test_ab.py").write_text(tests)
    return check(tmp_path)


GOOD_ROW = "| AB-01 | a flag | owner/repo, cmd/main.go, v1.2.3 | we pass it | lab/tests/test_ab.py::test_AB_01_x |\n"


def test_checker_accepts_a_good_table(tmp_path):
    assert _fake(tmp_path, HEADER + "\n|---|---|---|---|---|\n" + GOOD_ROW) == []


def test_checker_fails_a_row_without_a_test(tmp_path):
    problems = _fake(tmp_path, HEADER + "\n|---|---|---|---|---|\n" + GOOD_ROW.replace("AB-01", "AB-02"))
    assert any("no test function" in p and "AB_02" in p for p in problems), problems


def test_checker_fails_a_source_without_repo_path_tag(tmp_path):
    problems = _fake(tmp_path, HEADER + "\n|---|---|---|---|---|\n" + GOOD_ROW.replace("owner/repo, cmd/main.go, v1.2.3",
                                                                                    "the upstream README"))
    assert any("source must be" in p for p in problems), problems


def test_checker_fails_a_different_header_and_bad_ids(tmp_path):
    problems = _fake(tmp_path, HEADER.replace("| test |", "| tests |") + "\n|---|---|---|---|---|\n" + GOOD_ROW)
    assert any("header" in p for p in problems), problems
    bad = GOOD_ROW.replace("| AB-01 |", "| ab1 |")
    problems = check_fresh(tmp_path / "x", HEADER + "\n|---|---|---|---|---|\n" + bad)
    assert any("PREFIX-NN" in p for p in problems), problems


def check_fresh(path, table):
    path.mkdir()
    return _fake(path, table)


def test_checker_accepts_several_sources_and_tests_and_flags_each_bad_one(tmp_path):
    row = ("| AB-01 | a flag | owner/repo, cmd/main.go, v1.2.3; https://docs.example.com/guide/620/page.html; "
           "other/repo, a.go, unpinned (index copy, no tag) | we pass it | "
           "lab/tests/test_ab.py::test_AB_01_x, lab/tests/test_ab.py::test_AB_01_y |\n")
    tests = "def test_AB_01_x():\n    pass\n\n\ndef test_AB_01_y():\n    pass\n"
    assert _fake(tmp_path, HEADER + "\n|---|---|---|---|---|\n" + row, tests) == []
    problems = check_fresh(tmp_path / "x", HEADER + "\n|---|---|---|---|---|\n" +
                           row.replace("v1.2.3", "main-ish").replace("::test_AB_01_y", "::test_AB_01_z"))
    assert any("source must be" in p for p in problems), problems
    assert any("no function test_AB_01_z" in p for p in problems), problems
