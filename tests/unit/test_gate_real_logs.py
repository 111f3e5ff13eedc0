"""The real gate over real SGLang 0.5.16 logs from an H200 (tests/fixtures/sglang-0.5.16).

Each log is replayed with its own line timing (pauses over 50 ms shortened) into a log file
that the gate follows, beside an HTTP server that answers as the logged server did: a healthy
start is ready with no failure, each failure gets its class, and a requested stop is no failure.
Two of the failure logs are constructed from the real ones' format until their real capture
replaces them (the fixtures' README says which).

Where a verdict could depend on timing, the input is ordered instead: a healthy replay holds the
lines after its ready line until the gate answered, and the traceback tests hand the gate fixed
chunks of lines per read (ScriptedFollower).
"""

from pathlib import Path

import pytest
from sglang_layouts.gate import health, logclass, readiness

from tests.helpers.log_replay import Replay, ScriptedFollower, gate, parse
from tests.helpers.net import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16"
HEALTHY = {
    "qwen3-30b-a3b.log": 715564,
    "kimi-k2.6-cut8.cold.log": 6153105,
    "kimi-k2.6-cut8.warm.log": 6153124,
}
FAILED = {
    "fail-oom-at-load.kimi-k2.6-cut18.log": ("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory"),
    # H100 2026-12-07 (lease h100-2026-12-07c): gpt-oss-120b with PyTorch's default allocator, in the
    # MXFP4 weight swizzle, 5.27 GiB reserved but unallocated
    "fail-oom-at-load-fragmented.gpt-oss-120b-h100.log": (
        "cuda_oom",
        "torch.OutOfMemoryError: CUDA out of memory",
    ),
    "fail-kv-no-memory.kimi-k2.6-cut8-mfs045.log": (
        "kv_cache_no_memory",
        "ValueError: Loaded weights leave no GPU memory for the KV cache",
    ),
    "fail-flashinfer-jit-no-data.kimi-k2.6-cut8.log": ("jit_build_failed", ""),
    # H200 2026-12-03: ninja not on the PATH at the first prefill CUDA-graph capture's JIT build;
    # SGLang logs the error as a record of its own, then the scheduler's traceback ends with it
    "fail-jit-no-ninja.qwen3-30b-a3b.log": (
        "jit_build_failed",
        "[2026-12-03 19:44:23] FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
    ),
    # H200 2026-12-03: tp 2 on the one-GPU host (forced), TP1's scheduler cannot set its device
    "fail-gpu-unavailable-tp2.qwen3-30b-a3b.log": (
        "gpu_unavailable",
        "torch.AcceleratorError: CUDA error: invalid device ordinal",
    ),
}
GATE = {"poll": 0.05, "timeout": 60, "grace": 30}


def _lines(name):
    return (FIXTURES / name).read_text().splitlines()


@pytest.mark.parametrize(("name", "kv"), sorted(HEALTHY.items()))
def test_a_healthy_start_is_ready_with_no_failure(tmp_path, name, kv):
    # The replay holds the lines after the ready line (the stop's cascade) until the gate answered.
    replay = Replay(FIXTURES / name, tmp_path / "engine.log", max_gap=0.05, hold_after_ready=True).start()
    try:
        facts, failure, _ = gate(replay, **GATE)
    finally:
        replay.close()
    assert failure is None, failure and failure.as_dict()
    assert facts["max_total_num_tokens"] == kv
    assert facts["ready_line_seen"]
    # the phases the log went through, in order
    order = [
        p
        for p in ("loading weights", "KV cache allocated", "capturing CUDA graphs", "ready")
        if p in facts["phases"]
    ]
    assert order == ["loading weights", "KV cache allocated", "capturing CUDA graphs", "ready"]
    assert [facts["phases"][p] for p in order] == sorted(facts["phases"][p] for p in order)


def test_the_optional_feature_disabled_by_an_import_error_is_in_the_healthy_log():
    # The line the first version failed on: a live server's notice, before it was ready.
    lines = _lines("qwen3-30b-a3b.log")
    harmony = next(i for i, ln in enumerate(lines) if "No module named 'openai_harmony'" in ln)
    ready = next(i for i, ln in enumerate(lines) if logclass.READY_LINE in ln)
    assert harmony < ready
    assert logclass.classify_line(lines[harmony]) is None


@pytest.mark.parametrize(("name", "expected"), sorted(FAILED.items()))
def test_each_failure_gets_its_class(tmp_path, name, expected):
    cls, line_start = expected
    replay = Replay(FIXTURES / name, tmp_path / "engine.log", max_gap=0.05).start()
    try:
        facts, failure, _ = gate(replay, **GATE)
    finally:
        replay.close()
    assert facts is None
    assert failure.failure_class == cls, failure.as_dict()
    assert failure.evidence["line"].startswith(line_start)
    assert failure.evidence["log_tail"]
    assert cls in logclass.CLASSES
    # the gate says how long it waited for its verdict (the replayed log is compressed to seconds)
    assert 0 < failure.evidence["waited_s"] < GATE.get("timeout", 60)


def _engine_lines(name):
    """The engine's own lines of a fixture (without the capture's notes), in order."""
    return [ev.line for ev in parse(FIXTURES / name).events if ev.line is not None]


def _dead():
    return health.ProcState(alive=False, signal="KILL", exit_status="killed by signal 9 (KILL)")


def _alive():
    return health.ProcState(alive=True)


@pytest.mark.parametrize(("name", "expected"), sorted(FAILED.items()))
def test_an_exit_seen_before_the_traceback_is_read_waits_for_its_final_exception(monkeypatch, name, expected):
    # The engine is already dead when the gate starts, and the log reader lags: the lines up to
    # the traceback's header come at once, the rest a second later (journald after a SIGKILL).
    # The quiet bound is raised far above that second, so the verdict cannot depend on how fast
    # this machine runs: only reading the whole traceback gives the class and the evidence.
    monkeypatch.setattr(readiness, "TRACEBACK_QUIET_S", 30.0)
    cls, line_start = expected
    lines = _engine_lines(name)
    header = next(i for i, ln in enumerate(lines) if "Scheduler hit an exception" in ln)
    rest = lines[header + 1 :]
    chunks = [lines[: header + 1]] + [rest[i : i + 8] for i in range(0, len(rest), 8)]
    follower = ScriptedFollower(chunks, hold=(1, 1.0))
    with pytest.raises(health.HealthFailure) as exc:
        health.wait_ready(f"http://127.0.0.1:{free_port()}", follower, _dead, poll=0.05, timeout=120)
    failure = exc.value
    assert follower.done
    assert failure.failure_class == cls, failure.as_dict()
    assert failure.evidence["line"].startswith(line_start)
    assert "Traceback (most recent call last)" not in failure.evidence["line"]
    # the tail ends where the log ends, not inside the traceback
    assert failure.evidence["log_tail"][-1] == lines[-1]


def _live_failure(monkeypatch, name):
    """The gate's failure over a real log read 4 lines at a time while the process lives: the
    verdict can come from the log's content alone (a traceback stays open for 30 s of quiet)."""
    monkeypatch.setattr(readiness, "TRACEBACK_QUIET_S", 30.0)
    lines = _engine_lines(name)
    follower = ScriptedFollower([lines[i : i + 4] for i in range(0, len(lines), 4)])
    with pytest.raises(health.HealthFailure) as exc:
        health.wait_ready(f"http://127.0.0.1:{free_port()}", follower, _alive, poll=0.05, timeout=120)
    return exc.value


def test_a_missing_build_tool_is_a_jit_build_failure_while_the_process_lives(monkeypatch):
    # the class, the line that says what happened (the FileNotFoundError, not the traceback's
    # header) and the hint
    failure = _live_failure(monkeypatch, "fail-jit-no-ninja.qwen3-30b-a3b.log")
    assert failure.failure_class == "jit_build_failed"
    assert failure.evidence["line"].endswith(
        "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
    )
    for what in ("ninja", "PATH"):
        assert what in failure.hint


def test_a_definitive_line_inside_a_traceback_waits_for_the_traceback_to_end(monkeypatch):
    # TP1's "invalid device ordinal" is inside the scheduler's traceback: the verdict waits until the
    # traceback has ended (the launcher's next record), so the evidence is the exception, read whole.
    failure = _live_failure(monkeypatch, "fail-gpu-unavailable-tp2.qwen3-30b-a3b.log")
    ev = failure.evidence
    assert failure.failure_class == "gpu_unavailable"
    assert ev["line"] == "torch.AcceleratorError: CUDA error: invalid device ordinal"
    raised = ev["log_tail"].index(ev["line"])
    assert any("Received sigquit from a child process" in ln for ln in ev["log_tail"][raised:])


def test_a_gpu_index_past_the_host_says_the_layout_asks_for_too_many_gpus():
    m = logclass.classify(_lines("fail-gpu-unavailable-tp2.qwen3-30b-a3b.log"))
    assert m.cls == "gpu_unavailable" and m.definitive
    assert "more GPUs than the host shows" in m.hint
    assert m.line == "torch.AcceleratorError: CUDA error: invalid device ordinal"


@pytest.mark.parametrize(
    ("name", "fragmented"),
    [
        ("fail-oom-at-load-fragmented.gpt-oss-120b-h100.log", True),  # 5.27 GiB reserved, unallocated
        ("fail-oom-at-load.kimi-k2.6-cut18.log", False),  # 72.98 MiB: the weights do not fit
    ],
)
def test_an_oom_with_gibs_reserved_but_unallocated_names_the_allocators_setting(name, fragmented):
    m = logclass.classify(_lines(name))
    assert m.cls == "cuda_oom" and m.definitive
    assert ("expandable_segments:True" in m.hint) == fragmented
    assert m.line.startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_a_jit_build_failure_says_what_to_check():
    m = logclass.classify(_lines("fail-flashinfer-jit-no-data.kimi-k2.6-cut8.log"))
    assert m.cls == "jit_build_failed" and m.definitive
    assert "ninja" in m.line.lower()
    for what in ("nvcc", "CUDA_HOME", "ninja", "flashinfer/data/"):
        assert what in m.hint


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_a_healthy_log_up_to_its_stop_classifies_as_nothing(name):
    lines = _lines(name)
    stop = next(i for i, ln in enumerate(lines) if "SIGTERM received" in ln)
    assert logclass.classify(lines[:stop]) is None


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_a_requested_stop_is_no_failure(name):
    lines = _lines(name)
    # Unasked, SGLang's stop cascade reads as a dead rank (its scheduler "crashed with exit code -15").
    assert logclass.classify(lines).cls == "rank_died"
    # Asked for by the caller, or proven by the supervisor's marker before SGLang's SIGTERM line:
    assert logclass.classify(lines, stop_requested=True) is None
    stop = next(i for i, ln in enumerate(lines) if "SIGTERM received" in ln)
    marked = [*lines[:stop], f"{logclass.STOP_MARKER} (SIGTERM to process group 3839)", *lines[stop:]]
    c = logclass.LogClassifier()
    for ln in marked:
        c.feed(ln)
    assert c.found is None and c.stopping
    # ... and the launcher's exit by SIGKILL (137) after it is the end of that stop.
    assert logclass.classify_exit(137, None, stop_requested=True) is None
    assert logclass.classify_exit(None, "KILL", stop_requested=True) is None
    assert logclass.classify_exit(137, None)[0] == "crashed"


def test_check_alive_after_a_requested_stop_is_healthy(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("\n".join(_lines("qwen3-30b-a3b.log")) + "\n")

    def stopped():
        return health.ProcState(
            alive=False, signal="KILL", exit_status="killed by signal 9", stop_requested=True
        )

    health.check_alive(health.FileFollower(str(log), 0), stopped, settle=0)
    with pytest.raises(health.HealthFailure) as exc:

        def killed():
            return health.ProcState(alive=False, signal="KILL", exit_status="killed by signal 9")

        health.check_alive(health.FileFollower(str(log), 0), killed, settle=0)
    assert exc.value.failure_class == "rank_died"


def test_check_alive_names_the_exception_while_the_launcher_still_sleeps(tmp_path):
    # H200 2026-12-04: a Kimi K2.6 TP8 rank served as TP1 died at its first prefill, after ready;
    # SGLang sleeps 5 s "before crash diagnostics", so the check after the benchmark finds the
    # launcher alive: the class and the line come from the traceback's final exception.
    log = tmp_path / "engine.log"
    lines = _lines("fail-cublas-at-first-prefill.kimi-k2.6-tp8-rank.log")
    sigquit = next(i for i, ln in enumerate(lines) if "SIGQUIT received" in ln)
    log.write_text("\n".join(lines[: sigquit + 2]) + "\n")

    def sleeping():
        return health.ProcState(alive=True, started_at=None)

    with pytest.raises(health.HealthFailure) as exc:
        health.check_alive(health.FileFollower(str(log), 0), sleeping, settle=0)
    assert exc.value.failure_class == "crashed"
    assert exc.value.evidence["line"].startswith("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED")


@pytest.mark.parametrize(
    ("name", "cls"),
    [("qwen3-30b-a3b.log", None), ("fail-oom-at-load.kimi-k2.6-cut18.log", "cuda_oom")],
)
def test_the_gate_in_slices_reaches_the_same_verdict_and_reports_progress(tmp_path, name, cls):
    replay = Replay(FIXTURES / name, tmp_path / "engine.log", max_gap=0.1, hold_after_ready=True).start()
    pending, resume = [], None
    try:
        while True:
            facts, failure, _ = gate(replay, slice_s=0.15, resume=resume, **GATE)
            if failure is not None or not facts.get("pending"):
                break
            pending.append(facts["phase"])
            resume = facts["resume"]
            assert "api_key" not in str(resume)
    finally:
        replay.close()
    assert pending, "the replay is long enough for at least one slice"
    if cls is None:
        assert failure is None and facts["max_total_num_tokens"] == HEALTHY[name]
        assert facts["phases"]["ready"] >= facts["phases"]["loading weights"]
        assert "loading weights" in pending or "starting" in pending or "capturing CUDA graphs" in pending
    else:
        assert failure.failure_class == cls
