"""sglang_bench_wait: the host's shell loop (bench.progress) run by a real /bin/sh, and the action
plugin run by ansible-core."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from sglang_layouts.bench import progress

from tests.helpers.ansible_module import ANSIBLE, run_module

pytestmark = pytest.mark.skipif(
    not ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)


def _slice(path, level, slice_s=30.0):
    return subprocess.run(
        ["/bin/sh", "-c", progress.slice_command(str(path), level, slice_s, 0.05)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_loop_ends_on_the_levels_line_once_it_is_written(tmp_path):
    path = tmp_path / "bench.progress"
    path.write_text("10:00:00 level c=1 started\n10:00:01 level c=16 done: 10 tok/s\n")
    started = threading.Event()

    def write_later():
        started.wait()
        with path.open("a") as fh:
            fh.write("10:00:02 level c=1 done: 250.0 tok/s, TTFT p50 20 ms, 2/2 ok\n")

    writer = threading.Thread(target=write_later)
    writer.start()
    # the line is not there yet: a short slice ends without it ("c=16" is not "c=1")
    assert _slice(path, "c=1", slice_s=0.2).returncode == progress.NOT_YET
    started.set()
    writer.join()
    done = _slice(path, "c=1")
    assert done.returncode == 0
    assert progress.ended(done.stdout) == ("level c=1 done: 250.0 tok/s, TTFT p50 20 ms, 2/2 ok", False)


def test_a_failure_line_ends_the_wait_and_says_so(tmp_path):
    path = tmp_path / "bench.progress"
    path.write_text(
        "10:00:00 bench failed: no server at http://127.0.0.1:1; the levels after it were not run\n"
    )
    for level in ("c=64", "r=0.5", progress.SLO_SEARCH):
        line, failed = progress.ended(_slice(path, level).stdout)
        assert failed and line.startswith("bench failed: no server"), level


def test_a_file_not_written_yet_is_a_file_without_the_line(tmp_path):
    assert _slice(tmp_path / "absent.progress", "c=1", slice_s=0.1).returncode == progress.NOT_YET


def test_labels_with_shell_and_regex_characters_are_fixed_strings(tmp_path):
    path = tmp_path / "it's a folder" / "bench.progress"
    path.parent.mkdir()
    path.write_text("10:00:00 level r=0x5 done: x\n10:00:01 level r=0.5 done: 3 req/s\n")
    assert progress.ended(_slice(path, "r=0.5").stdout)[0] == "level r=0.5 done: 3 req/s"


def test_the_action_returns_the_line_and_fails_with_the_timeout(tmp_path):
    path = tmp_path / "bench.progress"
    path.write_text("10:00:00 slo search done: max rate 2 req/s\n")
    res = run_module(tmp_path, "sglang_bench_wait", {"path": str(path), "levels": ["slo search"]})
    assert not res.get("failed"), res
    assert res["line"] == "slo search done: max rate 2 req/s" and res["bench_failed"] is False
    late = run_module(tmp_path, "sglang_bench_wait", {"path": str(path), "levels": ["c=1"], "timeout": 0.3})
    assert late["failed"] and "no line for c=1" in late["msg"] and "sglang_bench_level_timeout" in late["msg"]
    bad = run_module(tmp_path, "sglang_bench_wait", {"path": str(path)})
    assert bad["failed"] and "levels" in bad["msg"]


def test_the_action_waits_for_every_level_in_turn_and_shows_each_line(tmp_path):
    path = tmp_path / "bench.progress"
    path.write_text(
        "10:00:00 level c=1 done: 250.0 tok/s, 2/2 ok\n"
        "10:00:01 level c=16 done: 1500.0 tok/s, 32/32 ok\n"
        "10:00:09 slo search done: max rate 3 req/s\n"
    )
    args = {"path": str(path), "levels": ["c=1", "c=16", "slo search"], "label": "gpu-host/tp1"}
    res, stderr = run_module(tmp_path, "sglang_bench_wait", args, with_stderr=True)
    assert not res.get("failed"), res
    assert res["lines"] == [
        "level c=1 done: 250.0 tok/s, 2/2 ok",
        "level c=16 done: 1500.0 tok/s, 32/32 ok",
        "slo search done: max rate 3 req/s",
    ]
    assert res["line"] == res["lines"][-1] and res["bench_failed"] is False
    for line in res["lines"]:
        assert f"gpu-host/tp1 {line}" in stderr
    # a level whose line never comes fails with the lines that did come
    short = run_module(tmp_path, "sglang_bench_wait", {**args, "levels": ["c=1", "c=64"], "timeout": 0.3})
    assert short["failed"] and "no line for c=64" in short["msg"]
    assert short["lines"] == ["level c=1 done: 250.0 tok/s, 2/2 ok"]


def test_the_action_stops_at_the_load_generators_failure(tmp_path):
    path = tmp_path / "bench.progress"
    path.write_text(
        "10:00:00 level c=1 done: 250.0 tok/s, 2/2 ok\n"
        "10:00:02 bench failed: the server died during concurrency 16\n"
    )
    args = {"path": str(path), "levels": ["c=1", "c=16", "c=64"], "timeout": 600}
    res = run_module(tmp_path, "sglang_bench_wait", args)
    assert not res.get("failed"), res
    assert res["bench_failed"] is True and len(res["lines"]) == 2
    assert res["line"].startswith("bench failed: the server died during concurrency 16")


def _job_file(async_dir, jid, result):
    async_dir.mkdir(exist_ok=True)
    (async_dir / jid).write_text(json.dumps(result))


def test_the_loop_sees_the_job_end_without_the_line(tmp_path):
    path, job = tmp_path / "bench.progress", tmp_path / "j1"
    path.write_text("10:00:00 level c=1 done: 250.0 tok/s\n")
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1"}))
    cmd = progress.slice_command(str(path), "c=16", 0.2, 0.05, str(job))
    assert (
        subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, timeout=300).returncode
        == progress.NOT_YET
    )
    job.write_text(json.dumps({"failed": True, "msg": "concurrency 0: must be at least 1"}))
    ended = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert ended.returncode == progress.JOB_ENDED
    result = progress.job_result(ended.stdout, "j1")
    assert result["failed"] and result["finished"] and "concurrency 0" in result["msg"]
    # the line wins over the job's end when both are there
    path.write_text("10:00:00 level c=16 done: 1500.0 tok/s\n")
    assert subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, timeout=300).returncode == 0
    # a job still running, read as async_status reads it
    assert progress.job_result('{"started": true, "finished": false}', "j1")["finished"] is False
    assert progress.job_result("not json", "j1")["failed"]


def test_the_action_returns_the_jobs_result_after_the_last_line(tmp_path):
    path, async_dir = tmp_path / "bench.progress", tmp_path / "async"
    path.write_text("10:00:00 level c=1 done: 250.0 tok/s, 2/2 ok\n")
    facts = {"sglang_bench": {"summary": {"completed": 2}, "levels": [{"concurrency": 1}]}}
    _job_file(async_dir, "77.1", {"changed": False, "ansible_facts": facts})
    extra = ("-e", f"ansible_async_dir={async_dir}")
    args = {"path": str(path), "levels": ["c=1"], "job": "77.1", "timeout": 600}
    res = run_module(tmp_path, "sglang_bench_wait", args, extra=extra)
    assert not res.get("failed"), res
    assert res["finished"] and res["ansible_job_id"] == "77.1"
    assert res["ansible_facts"] == facts and res["lines"] == ["level c=1 done: 250.0 tok/s, 2/2 ok"]


def test_a_job_that_fails_before_any_line_fails_the_wait_with_its_message(tmp_path):
    """Bad input ends the job at once: the wait says why then, not after the level's timeout (600 s)."""
    path, async_dir = tmp_path / "bench.progress", tmp_path / "async"
    failed = {"failed": True, "msg": "request rate 0: must be > 0", "failure_class": "bench_config"}
    _job_file(async_dir, "77.2", failed)
    extra = ("-e", f"ansible_async_dir={async_dir}")
    args = {"path": str(path), "levels": ["c=1", "c=16"], "job": "77.2", "timeout": 600}
    res = run_module(tmp_path, "sglang_bench_wait", args, extra=extra)
    assert res["failed"] and res["msg"] == failed["msg"] and res["failure_class"] == "bench_config"
    assert res["waited_s"] < 600 and res["lines"] == []
    # a job that ended well without a level's line is a failure too (the labels and the ladder differ)
    _job_file(async_dir, "77.3", {"changed": False, "ansible_facts": {"sglang_bench": {}}})
    res = run_module(tmp_path, "sglang_bench_wait", {**args, "job": "77.3"}, extra=extra)
    assert res["failed"] and "ended without a line for c=1" in res["msg"]


def test_the_slo_search_gets_its_own_timeout():
    assert progress.level_timeout("c=16", 600) == 600.0
    assert progress.level_timeout(progress.SLO_SEARCH, 600) == 600.0
    assert progress.level_timeout(progress.SLO_SEARCH, 600, 3600) == 3600.0
    assert progress.level_timeout("c=16", 600, 3600) == 600.0
