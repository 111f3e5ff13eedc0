"""sglang_result's two faces: the action plugin storing in the controller's worker (what every run from
the repo or the collection uses) and library/sglang_result.py (what the action runs over any other
connection) store the same record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.ansible_module import ANSIBLE, module_main, run_module

pytestmark = pytest.mark.skipif(
    not ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)


def test_the_result_action_stores_in_the_controllers_worker_like_the_module(tmp_path):
    """Delegated to the controller (local connection) the record is written by the action itself: no
    module process, so no `invocation` in its answer; the record is the module's to the field."""
    base = {"results_dir": str(tmp_path / "results"), "run_id": "r1", "host": "h", "layout": "tp1"}
    stored = run_module(tmp_path, "sglang_result", {**base, "status": "skipped", "failure_class": "oom"})
    assert not stored.get("failed") and "invocation" not in stored, stored
    again = run_module(tmp_path, "sglang_result", {**base, "status": "skipped", "failure_class": "oom"})
    assert (stored["attempt"], again["attempt"]) == (1, 2)
    query = run_module(tmp_path, "sglang_result", {**base, "state": "query"})
    assert query["exists"] and query["attempts"] == [1, 2] and query["status"] == "skipped"
    checked = run_module(tmp_path, "sglang_result", {**base, "status": "skipped"}, extra=["--check"])
    assert checked["attempt"] == 3 and not Path(checked["path"]).exists()
    wrong = run_module(tmp_path, "sglang_result", {**base, "status": "great"})
    assert wrong["failed"] and "great" in wrong["msg"]
    first = json.loads(Path(stored["path"]).read_text())
    assert first["status"] == "skipped" and first["failure_class"] == "oom"


def test_the_module_face_stores_the_same_record(tmp_path, repo, monkeypatch, capsys):
    """Over any other connection the action runs library/sglang_result.py: same spec, same function."""
    args = {
        "results_dir": str(tmp_path / "results"),
        "run_id": "r1",
        "host": "h",
        "layout": "tp1",
        "status": "skipped",
        "failure_class": "oom",
    }
    out = module_main(monkeypatch, capsys, "sglang_result", args)
    assert out["attempt"] == 1 and "invocation" in out
    record = json.loads(Path(out["path"]).read_text())
    via_action = run_module(
        tmp_path,
        "sglang_result",
        {**args, "results_dir": str(tmp_path / "other")},
    )
    other = json.loads(Path(via_action["path"]).read_text())
    assert {k: v for k, v in record.items() if k != "created_at"} == {
        k: v for k, v in other.items() if k != "created_at"
    }
