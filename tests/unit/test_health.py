"""The readiness gate against a real loopback HTTP server and a real log file.

The server walks through SGLang's phases (port closed -> 503 -> 200); fatal lines and
process exits must give their class within 2 s; secrets are masked in server_args.
"""

import json
import time

import pytest
from sglang_layouts import health

from tests.helpers.engine_fakes import (
    Alive,
    FakeSGLang,
    append_later,
    append_then_die,
    bring_up_later,
    wait_from_end,
    wait_on_closed_port,
)
from tests.helpers.net import free_port, listening


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "engine.log"
    p.write_text("old run: torch.OutOfMemoryError: CUDA out of memory.\n")  # before this start: ignored
    return p


def test_loading_warming_ready_then_facts(log):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = Alive()
    # loading: port closed for 0.5 s; warming: 503 for 0.5 s; then ready
    server = bring_up_later(FakeSGLang, port, 0.5, ready_after=0.5, api_key="k3y-canary")
    append_later(
        log, ["[TP0] Load weight begin. avail mem=94.47 GB", "The server is fired up and ready to roll!"], 0.3
    )
    try:
        facts = wait_from_end(url, log, state, timeout=20, api_key="k3y-canary")
    finally:
        server["s"].close()
    assert facts["max_total_num_tokens"] == 172906
    assert facts["memory_per_rank"][0]["weight"] == 71.8
    assert facts["model_info"]["model_path"] == "/models/Kimi-K2.6"
    assert facts["server_args"]["api_key"] == "***"
    assert "k3y-canary" not in json.dumps(facts)
    assert facts["waited_s"] >= 0.9
    assert facts["ready_line_seen"]
    assert not facts["already_ready"]


@pytest.mark.parametrize(
    ("lines", "cls"),
    [
        (
            [
                "[TP1] Scheduler hit an exception: Traceback (most recent call last):",
                '  File "scheduler.py", line 3612, in run_scheduler_process',
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.31 GiB.",
            ],
            "cuda_oom",
        ),
        (
            ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."],
            "kv_cache_no_memory",
        ),
        (
            ["Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600012 ms"],
            "nccl_timeout",
        ),
    ],
)
def test_fatal_line_gives_the_verdict_within_2s_while_the_process_lives(log, lines, cls):
    state = Alive()
    append_later(log, lines, 0.3)
    t0 = time.monotonic()
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, timeout=30)
    latency = time.monotonic() - t0 - 0.3
    assert ei.value.failure_class == cls
    assert ei.value.evidence["line"] == lines[-1]
    assert ei.value.evidence["log_tail"][-1] == lines[-1]
    assert "old run" not in " ".join(ei.value.evidence["log_tail"])
    assert latency < 2.0


def test_generic_line_alone_fails_only_after_grace_while_the_process_lives(log):
    state = Alive()
    append_later(log, ["Received sigquit from a child process. It usually means the child failed."], 0.2)
    t0 = time.monotonic()
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, timeout=30, grace=0.5)
    assert ei.value.failure_class == "crashed"
    assert 0.5 <= time.monotonic() - t0 < 2.0


def test_ready_timeout(log):
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, Alive(), timeout=0.6)
    assert ei.value.failure_class == "ready_timeout"


def test_file_follower_keeps_partial_lines(tmp_path):
    p = tmp_path / "l"
    p.write_bytes(b"")
    f = health.FileFollower(str(p))
    with open(p, "ab") as w:
        w.write(b"half")
    assert f.read() == []
    with open(p, "ab") as w:
        w.write(b" line\nnext")
    assert f.read() == ["half line"]


def test_preflight_refuses_oom_unless_forced(tmp_path):
    reasons = ["tp4ep2 uses 4 of the 8 GPUs"]
    port = free_port()
    p = health.preflight("oom", reasons, False, str(tmp_path), "127.0.0.1", port, False)
    assert len(p) == 1 and "oom" in p[0] and reasons[0] in p[0]
    assert health.preflight("oom", reasons, True, str(tmp_path), "127.0.0.1", port, False) == []


def test_preflight_port_and_model_path(tmp_path):
    with listening() as port:
        problems = health.preflight("fits", [], False, str(tmp_path / "missing"), "127.0.0.1", port, False)
        assert any("does not exist" in x for x in problems)
        assert any(f"port {port}" in x for x in problems)
        # held by one of our layout units: fine
        assert health.preflight("fits", [], False, str(tmp_path), "127.0.0.1", port, True) == []


def test_check_alive_for_node_ranks_above_zero(log):
    off = log.stat().st_size
    with open(log, "a") as f:
        f.write("[TP8] Load weight begin. avail mem=94.47 GB\n")
    health.check_alive(health.FileFollower(str(log), off), Alive(), settle=0)
    with open(log, "a") as f:
        f.write(
            "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 8/16 clients joined.\n"
        )
    with pytest.raises(health.HealthFailure) as ei:
        health.check_alive(health.FileFollower(str(log), off), Alive(), settle=0)
    assert ei.value.failure_class == "nccl_timeout"
    dead = Alive()
    dead.alive, dead.code = False, 1
    with pytest.raises(health.HealthFailure) as ei:
        health.check_alive(health.FileFollower(str(log), log.stat().st_size), dead, settle=0)
    assert ei.value.failure_class == "crashed"
    assert ei.value.evidence["exit_status"] == "exited with status 1"


def test_a_traceback_of_a_live_server_that_becomes_ready_is_not_fatal(log):
    port = free_port()
    server = bring_up_later(FakeSGLang, port, 0.6, ready_after=0)
    append_later(log, ["Traceback (most recent call last):", "NameError: name '_now' is not defined"], 0.1)
    try:
        facts = wait_from_end(f"http://127.0.0.1:{port}", log, Alive(), timeout=20)
    finally:
        server["s"].close()
    assert facts["max_total_num_tokens"] == 172906


SCHED_EXC = "[TP0] Scheduler hit an exception: Traceback (most recent call last):"


@pytest.mark.parametrize(
    ("line", "code", "fatal_line"),
    [
        # no fatal line at all: the exit alone is the verdict, with its status
        pytest.param("[TP0] Load weight begin. avail mem=94.47 GB", 1, None, id="exit-alone"),
        # a generic line waits out its grace, unless the process exits first: then at once
        pytest.param(SCHED_EXC, None, SCHED_EXC, id="generic-line-then-exit"),
    ],
)
def test_a_process_exit_decides_at_once(log, line, code, fatal_line):
    # The line is written before the exit, in one thread: the verdict cannot depend on which of two
    # timers this machine runs first. The ceiling is far below the 30 s grace: only a hang misses it.
    state = Alive()
    append_then_die(log, [line], 0.2, state, code)
    t0 = time.monotonic()
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, timeout=60)
    assert ei.value.failure_class == "crashed"
    if code is not None:
        assert ei.value.evidence["exit_status"] == f"exited with status {code}"
    assert ei.value.evidence["line"] == fatal_line
    assert time.monotonic() - t0 < 10
