"""sglang_write_files' two faces: the action plugin writing in the controller's worker (plan.yml's
plan and unit previews, delegated to localhost) and library/sglang_write_files.py (what the action
runs over any other connection) do the same, with check mode, diff and pruning."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.ansible_module import ANSIBLE, module_main, run_module

pytestmark = pytest.mark.skipif(
    not ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)


def test_the_action_writes_in_the_controllers_worker_changes_only_what_differs_and_prunes(tmp_path):
    dest = tmp_path / "plan" / "h"
    (dest).mkdir(parents=True)
    (dest / "old.service").write_text("stale\n")
    (dest / "keep.txt").write_text("not ours\n")
    files = {"a.service": "A\n", "sub/b.json": "{}\n"}
    args = {"dest": str(dest), "files": files, "prune_glob": "*.service", "mode": "0600"}
    checked = run_module(tmp_path, "sglang_write_files", args, extra=["--check", "--diff"])
    # no module process: no invocation in the answer; check mode says what would change, writes nothing
    assert "invocation" not in checked and checked["changed"], checked
    assert sorted(Path(p).name for p in checked["written"]) == ["a.service", "b.json"]
    assert [Path(p).name for p in checked["removed"]] == ["old.service"]
    assert not (dest / "a.service").exists() and (dest / "old.service").exists()
    assert {d["after_header"] for d in checked["diff"]} >= {"(removed)", str(dest / "a.service")}
    done = run_module(tmp_path, "sglang_write_files", args)
    assert done["changed"] and "diff" not in done
    assert (dest / "a.service").read_text() == "A\n" and (dest / "sub" / "b.json").read_text() == "{}\n"
    assert oct((dest / "a.service").stat().st_mode & 0o777) == "0o600"
    assert not (dest / "old.service").exists() and (dest / "keep.txt").exists()
    again = run_module(tmp_path, "sglang_write_files", args)
    assert not again["changed"] and again["written"] == [] and again["removed"] == []


@pytest.mark.parametrize(
    "args, needle",
    [
        ({"files": {"../escape": "x"}}, "must stay inside dest"),
        ({"files": {"/etc/passwd": "x"}}, "must stay inside dest"),
        ({"files": {"a": "x"}, "mode": "rw-r--r--"}, "mode must be an octal mode"),
        ({"files": "not a mapping"}, "'files' is of type"),
    ],
)
def test_bad_names_and_modes_are_refused_before_anything_is_written(tmp_path, args, needle):
    out = run_module(tmp_path, "sglang_write_files", {"dest": str(tmp_path / "d"), **args})
    assert out["failed"] and needle in out["msg"], out
    assert not (tmp_path / "escape").exists()


def test_the_module_face_refuses_a_name_outside_dest(tmp_path, repo, monkeypatch, capsys):
    out = module_main(
        monkeypatch, capsys, "sglang_write_files", {"dest": str(tmp_path / "m"), "files": {"../x": "1"}}
    )
    assert out["failed"] and "must stay inside dest" in out["msg"]
    assert not (tmp_path / "x").exists()


def test_the_module_face_writes_the_same(tmp_path, repo, monkeypatch, capsys):
    """Over any other connection the action runs library/sglang_write_files.py: same spec, same function."""
    out = module_main(
        monkeypatch, capsys, "sglang_write_files", {"dest": str(tmp_path / "m"), "files": {"x.json": "[1]\n"}}
    )
    assert out["changed"] and "invocation" in out
    via_action = run_module(
        tmp_path, "sglang_write_files", {"dest": str(tmp_path / "a"), "files": {"x.json": "[1]\n"}}
    )
    assert (tmp_path / "m" / "x.json").read_text() == (tmp_path / "a" / "x.json").read_text() == "[1]\n"
    assert [Path(p).name for p in out["written"]] == [Path(p).name for p in via_action["written"]]
