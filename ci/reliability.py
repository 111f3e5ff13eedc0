#!/usr/bin/env python3
"""docs/reliability.md's tables of bad inputs and faults, with pass/fail from their tests.

    ci/reliability.py            run every test the tables name (one pytest run), print the
                                 tables with PASS/FAIL per case and the counts
    ci/reliability.py --write    rewrite the bad-input table from tests/bad_inputs.py (its source)
    ci/reliability.py --no-run   print the tables and counts of covered cases only

A case passes when every test its row names passed. Exit status 1 when a case failed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- bad-inputs:begin (ci/reliability.py --write) -->", "<!-- bad-inputs:end -->"
UNIT = "tests/unit/test_bad_inputs.py::test_bad_input[{}]"
PLAN = "tests/integration/test_plan.py::test_every_bad_input_is_refused_by_plan_yml_in_one_run"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", "\\n").replace("\r", "\\r").replace("\x00", "\\0")


def bad_input_table() -> str:
    sys.path.insert(0, str(REPO / "tests"))
    from bad_inputs import CASES, OTHER_CASES

    lines = ["| id | bad input | outcome | tests |", "|---|---|---|---|"]
    for c in CASES:
        if c.expect == "sanitised":
            outcome = f"accepted; {c.check['masked']} is *** in the plan and the unit, its value only in the EnvironmentFile"
        elif c.expect == "accepted":
            outcome = "accepted" + (
                f"; argv has `{' '.join(c.check['argv_has'])}`" if c.check.get("argv_has") else ""
            )
        else:
            outcome = ("error: " if c.expect == "error" else "verdict invalid: ") + "; ".join(
                f"`{_cell(n)}`" for n in c.needles
            )
        tests = [UNIT.format(c.id)] + ([PLAN] if c.plan_yml else []) + list(c.also)
        lines.append(f"| {c.id} | {_cell(c.what)} | {outcome} | {'<br>'.join(f'`{t}`' for t in tests)} |")
    for cid, what, outcome, tests in OTHER_CASES:
        lines.append(f"| {cid} | {_cell(what)} | {outcome} | {'<br>'.join(f'`{t}`' for t in tests)} |")
    return "\n".join(lines)


def write_doc() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{bad_input_table()}\n{END}{tail}")


def read_rows() -> list[dict]:
    """Every table row of the doc that names tests: {kind, id, tests}. Kind: the section's heading."""
    rows, kind = [], None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            kind = line[3:].strip()
        if not line.startswith("| ") or line.startswith("| id ") or "`tests/" not in line:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append({"kind": kind, "id": cells[0], "tests": re.findall(r"`(tests/[^`]+::[^`]+)`", cells[-1])})
    return rows


def run_tests(node_ids: list[str]) -> dict[str, str]:
    """pytest once over every node id; {node id: passed | failed | skipped | missing}."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *node_ids]
        subprocess.run(cmd, cwd=REPO, check=False)
        cases = {}
        for tc in ET.parse(xml).getroot().iter("testcase"):
            state = "passed"
            if tc.find("failure") is not None or tc.find("error") is not None:
                state = "failed"
            elif tc.find("skipped") is not None:
                state = "skipped"
            cases[(tc.get("classname"), tc.get("name"))] = state
    out = {}
    for node in node_ids:
        path, name = node.split("::", 1)
        cls = path[: -len(".py")].replace("/", ".")
        states = [s for (c, n), s in cases.items() if c == cls and (n == name or n.startswith(name + "["))]
        out[node] = "missing" if not states else ("failed" if "failed" in states else states[0])
    return out


def longest_refusal() -> tuple[int, int, str]:
    """(lines, characters, case id) of the longest message the planner refuses a case of the matrix with."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "module_utils"))
    from bad_inputs import CASES, materialise, planner_inputs
    from sglang_layouts.plan.validate import plan_outcome

    worst = (0, 0, "")
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            if c.expect != "error":
                continue
            folder = Path(tmp) / c.id
            folder.mkdir()
            message = plan_outcome(planner_inputs(materialise(c, folder, REPO), REPO)).get("refused") or ""
            worst = max(worst, (len(message.splitlines()), len(message), c.id))
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--write", action="store_true", help="rewrite the bad-input table from tests/bad_inputs.py"
    )
    ap.add_argument("--no-run", action="store_true", help="do not run the tests; print what is covered")
    args = ap.parse_args(argv)
    if args.write:
        write_doc()
        print(f"wrote {DOC.relative_to(REPO)}")
        return 0
    rows = read_rows()
    results = {} if args.no_run else run_tests(sorted({t for r in rows for t in r["tests"]}))
    counts: dict[str, list[int]] = {}
    print(f"\n{'kind':<12} {'case':<34} {'result':<7} tests")
    for r in rows:
        states = [results.get(t, "not run") for t in r["tests"]]
        verdict = "-" if args.no_run else ("PASS" if all(s == "passed" for s in states) else "FAIL")
        kind = "bad input" if r["kind"].lower().startswith("bad") else "fault"
        c = counts.setdefault(kind, [0, 0])
        c[0] += 1
        c[1] += verdict == "PASS"
        detail = ", ".join(
            f"{t.split('::')[-1]}={s}" for t, s in zip(r["tests"], states, strict=True) if s != "passed"
        )
        print(f"{kind:<12} {r['id']:<34} {verdict:<7} {detail if verdict == 'FAIL' else len(r['tests'])}")
    print()
    for kind, (covered, passed) in counts.items():
        print(
            f"{kind}s: {covered} covered"
            + ("" if args.no_run else f", {passed} passed, {covered - passed} failed")
        )
    lines, chars, case = longest_refusal()
    print(f"longest refusal: {lines} line(s), {chars} characters ({case})")
    return 0 if args.no_run or all(p == c for c, p in counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
