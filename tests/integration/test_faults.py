"""The fault matrix on the simulator (docs/reliability.md): what each fault leaves behind, and its class."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest
from sglang_layouts.bench import loadgen
from sglang_layouts.gate import health
from sglang_layouts.report import results

from sglang_sim.launcher import SimProcess
from tests.helpers.demo import FAST_DECODE
from tests.helpers.fake_http import JsonHandler, LoopbackServer
from tests.helpers.net import free_port, listening


def _cfg(url, levels, **kw):
    return loadgen.make_config(
        url,
        concurrency=levels,
        input_len=16,
        output_len=4,
        warmup=0,
        num_prompts=None,
        prompts_per_stream=2,
        min_prompts=3,
        vocab_size=1000,
        **kw,
    )


class _Alive:
    def __call__(self):
        return health.ProcState(alive=True, started_at=time.time() - 1)


# ---------------------------------------------------------------- engine killed / hung during the benchmark


def test_engine_killed_mid_benchmark_stops_the_ladder_at_that_level():
    with SimProcess(["--tp-size", "8"], env=FAST_DECODE) as s:
        s.wait_ready()
        lines = []

        def progress(line):
            lines.append(line)
            if line.startswith("level c=4 done"):
                os.kill(s.proc.pid, signal.SIGKILL)  # the engine dies between levels 4 and 16

        out = loadgen.run_benchmark(_cfg(s.url(""), [1, 4, 16, 64], request_timeout=120), progress=progress)
    died = out["summary"]["server_died"]
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 4, 16]  # 64 never ran
    assert out["levels"][0]["completed"] > 0 and out["levels"][1]["failed"] == 0
    assert out["levels"][2]["completed"] == 0 and died["concurrency"] == 16 and not died["hung"]
    assert any(line.startswith("bench failed: the server died during concurrency 16") for line in lines)


def test_engine_hung_by_sigstop_mid_benchmark_is_found_hung():
    with SimProcess(["--tp-size", "8"], env=FAST_DECODE) as s:
        s.wait_ready()

        def progress(line):
            if line.startswith("level c=1 done"):
                os.kill(s.proc.pid, signal.SIGSTOP)

        try:
            # no /flush_cache: against a stopped server it would wait its own 30 s
            cfg = _cfg(s.url(""), [1, 4, 16], request_timeout=2, flush_cache=False)
            out = loadgen.run_benchmark(cfg, progress=progress)
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
    died = out["summary"]["server_died"]
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 4]
    assert died["hung"] and "no answer to GET /health" in died["detail"]


def test_a_server_that_only_refuses_requests_is_not_taken_for_dead():
    """Failed requests while GET /health answers 200: the ladder goes on (the failures are figures)."""

    class H(JsonHandler):
        def do_GET(self):
            self._json(200)

    with LoopbackServer(H) as srv:
        cfg = {"url": srv.url}
        assert loadgen.level_server_died(cfg, {"concurrency": 4, "failed": 3}) is None
        assert (
            loadgen.level_server_died({"url": "http://127.0.0.1:9"}, {"concurrency": 4, "failed": 0}) is None
        )
    died = loadgen.level_server_died(cfg, {"concurrency": 4, "failed": 3})
    assert died and died["concurrency"] == 4 and not died["hung"]


# ---------------------------------------------------------------- engine hung during the readiness gate


def test_engine_hung_by_sigstop_during_the_gate_is_a_ready_timeout(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("")
    with SimProcess(["--tp-size", "8"], env={"SGLANG_SIM_LOAD_SECONDS": "5"}) as s:
        os.kill(s.proc.pid, signal.SIGSTOP)  # stopped while it loads: alive, silent, port closed
        try:
            with pytest.raises(health.HealthFailure) as ei:
                health.wait_ready(s.url(""), health.FileFollower(str(log), 0), _Alive(), timeout=3)
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
    assert ei.value.failure_class == "ready_timeout"


# ---------------------------------------------------------------- a foreign process on a port of the layout


def test_port_held_by_a_foreign_server_is_refused_in_preflight():
    api, metrics = free_port(), free_port()
    with listening(metrics):
        problems = health.preflight("fits", [], False, None, "127.0.0.1", api, False, ports=[metrics])
    assert len(problems) == 1 and f"port {metrics} on 127.0.0.1 is in use" in problems[0]
    assert health.preflight("fits", [], False, None, "127.0.0.1", api, False, ports=[metrics]) == []


# ---------------------------------------------------------------- paths the service user cannot read


def test_preflight_names_the_folder_the_service_user_cannot_enter(tmp_path, repo):
    private = tmp_path / "clone"
    (private / "models").mkdir(parents=True)
    private.chmod(0o700)
    problems = health.preflight(
        "fits",
        [],
        False,
        None,
        "127.0.0.1",
        free_port(),
        False,
        read_as="nobody",
        read_paths=[str(private / "models")],
    )
    assert problems and "nobody, who cannot enter" in problems[0] and "chmod o+x" in problems[0]
    assert health.unreadable("nobody", str(repo / "models" / "kimi-k2.6" / "config.json")) is None
    # not created yet: judged by the folders above it
    assert health.unreadable("nobody", str(repo / "build" / "not-yet" / "sim")) is None


# ---------------------------------------------------------------- the results dir's disk is full


def _record(run_id="r1"):
    return results.build_record(run_id, "h", "tp8", "ok", bench={"summary": {}, "levels": []})


def test_disk_full_while_storing_a_record_leaves_nothing_half_written(tmp_path, monkeypatch):
    real = os.write
    calls = []

    def full(fd, data):
        calls.append(1)
        if len(calls) == 1:
            return real(fd, bytes(data[:100]))  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results.os, "write", full)
    with pytest.raises(results.ResultError) as ei:
        results.write_record(str(tmp_path), _record())
    assert "No space left on device" in str(ei.value) and "run_id=r1" in str(ei.value)
    folder = tmp_path / "r1" / "h"
    assert list(folder.iterdir()) == []  # no record, no temporary file
    monkeypatch.setattr(results.os, "write", real)
    path, attempt = results.write_record(str(tmp_path), _record())
    assert attempt == 1 and json.loads(Path(path).read_text())["layout"] == "tp8"


def test_short_writes_still_store_the_whole_record(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(results.os, "write", lambda fd, data: real(fd, bytes(data[:7])))
    path, _ = results.write_record(str(tmp_path), _record())
    assert json.loads(Path(path).read_text())["schema"] == results.SCHEMA
