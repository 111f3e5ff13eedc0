"""The bad-input matrix (tests/bad_inputs.py) through the planner: the error or the verdict, and its words."""

import json

import pytest
from bad_inputs import CASES, materialise, planner_inputs
from sglang_layouts import planner


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path, repo):
    inputs = planner_inputs(materialise(case, tmp_path, repo), repo)
    if case.expect == "error":
        with pytest.raises(planner.PlanError) as err:
            planner.plan_host(inputs)
        for needle in case.needles:
            assert needle in str(err.value), str(err.value)
        return
    doc = planner.plan_host(inputs)
    if case.expect == "invalid":
        bad = [e for e in doc["layouts"] if e["verdict"] == "invalid"]
        assert bad, [e["verdict"] for e in doc["layouts"]]
        reasons = " ".join(r for e in bad for r in e["reasons"])
        for needle in case.needles:
            assert needle in reasons, reasons
        return
    assert case.expect == "sanitised"
    entry = doc["layouts"][0]
    name = case.check["masked"]
    assert entry["env"][name] == "***" and name in entry["secret_env"]
    assert case.check["absent"] not in json.dumps(doc)
    # the real value is there for the EnvironmentFile, and only there
    secrets = planner.layout_secret_env(inputs, entry["name"])
    assert secrets == {name: case.check["absent"]}


def test_matrix_is_large_enough():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


def test_secret_value_with_a_newline_is_not_echoed(tmp_path, repo):
    layouts = [{"name": "tp8", "tp": 8, "env": {"HF_TOKEN": "hf_abc\ndef"}}]
    with pytest.raises(planner.PlanError) as err:
        planner.plan_host(planner_inputs({"sglang_layouts": layouts}, repo))
    assert "hf_abc" not in str(err.value) and "env.HF_TOKEN" in str(err.value)


def test_api_key_name_is_always_secret():
    from sglang_layouts import secrets

    assert secrets.is_secret("SGLANG_API_KEY", []) and not secrets.is_secret("OMP_NUM_THREADS")
    assert secrets.mask_text("key=abc abcd", ["abc", "abcd"]) == "key=*** ***"


def test_reliability_doc_lists_every_case_and_only_tests_that_exist(repo):
    """docs/reliability.md is written from this table (ci/reliability.py --write); its tests exist."""
    import re

    from bad_inputs import OTHER_CASES

    doc = (repo / "docs" / "reliability.md").read_text()
    for cid in [c.id for c in CASES] + [c[0] for c in OTHER_CASES]:
        assert f"| {cid} |" in doc, f"{cid} missing: run ci/reliability.py --write"
    for node in set(re.findall(r"`(tests/[^`]+::[^`]+)`", doc)):
        path, name = node.split("::")
        assert f"def {name.split('[')[0]}(" in (repo / path).read_text(), node
