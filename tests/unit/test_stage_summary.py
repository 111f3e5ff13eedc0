"""make test's stage summary (ci/stage.sh): the seconds of each stage, then the end of a failed one's
output, which CI's tail would otherwise not show."""

from __future__ import annotations

import subprocess


def _stage(repo, stages, *args):
    return subprocess.run(
        [str(repo / "ci" / "stage.sh"), *args],
        env={"PATH": "/usr/bin:/bin", "STAGES_DIR": str(stages), "STAGE_TAIL": "2"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_failed_stage_repeats_its_last_lines_after_the_summary(repo, tmp_path):
    ok = _stage(repo, tmp_path, "fine", "sh", "-c", "echo fine-output")
    bad = _stage(repo, tmp_path, "broken", "sh", "-c", "echo one; echo two; echo three >&2; exit 3")
    assert ok.returncode == 0 and "fine-output" in ok.stdout
    # the stage's own output still goes through, stderr with it, and its status is the command's
    assert bad.returncode == 3 and bad.stdout.split() == ["one", "two", "three"]
    lines = _stage(repo, tmp_path, "summary").stdout.splitlines()
    assert any(ln.startswith("stage fine: ") and ln.endswith(" s") for ln in lines)
    assert any(ln.startswith("stage broken: ") and ln.endswith("(failed, exit 3)") for ln in lines)
    tail = lines.index(next(ln for ln in lines if ln.startswith("== stage broken failed (exit 3)")))
    # STAGE_TAIL lines of the failed stage, and nothing of the one that passed
    assert lines[tail + 1 :] == ["two", "three"]
    assert not any("fine-output" in ln for ln in lines)


def test_cpu_counted_outside_the_stages_is_printed_after_theirs(repo, tmp_path):
    # ci/molecule.sh writes the containers' CPU seconds beside the stages: no stage of that name
    assert _stage(repo, tmp_path, "quick", "true").returncode == 0
    (tmp_path / "quick.cpu").write_text("3\n")
    (tmp_path / "molecule-containers.cpu").write_text("391\n")
    lines = _stage(repo, tmp_path, "summary").stdout.splitlines()
    assert lines[-2:] == ["cpu quick: 3 s", "cpu molecule-containers: 391 s"]
    assert not any(ln.startswith("stage molecule-containers") for ln in lines)
