"""The readiness gate for engine vllm against a loopback server that acts as vLLM 0.32.0 does
(docs/vllm.md): the port stays closed until it is up (no 503 while starting), /health 200 with
an empty body, /v1/models, a one-token /v1/completions, /version, no /server_info. The KV
capacity comes from the start-up line in the engine's log; exits, status 0 included, fail.
The scripted events are timed from the gate's start, and the timeouts are hang ceilings."""

import threading

import pytest
from sglang_layouts.gate import health

from tests.helpers.engine_fakes import (
    HANG_S,
    Alive,
    FakeVLLM,
    append_later,
    bring_up_later,
    wait_from_end,
    wait_on_closed_port,
)
from tests.helpers.net import free_port

KV_LINE = (
    "(EngineCore pid=22227) INFO 11-29 15:40:07 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 1024.00x"
)


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "vllm.log"
    # an earlier start's lines: never this start's facts or failures
    p.write_text(
        "(EngineCore pid=1) INFO CPU KV cache size: 999 tokens, x\nOSError: [Errno 98] Address already in use\n"
    )
    return p


def test_engine_from_the_unit_name():
    assert health.engine_of(None, "vllm-tiny-qwen2-cpu-tp1.service") == "vllm"
    assert health.engine_of("", "sglang-kimi-k2-6-ep8.service") == "sglang"
    assert health.engine_of("sim", "vllm-x.service") == "sim"
    with pytest.raises(ValueError):
        health.engine_of("tgi")


def test_closed_port_then_ready_one_token_completion_and_facts(log):
    port = free_port()
    started = threading.Event()
    # vLLM: connection refused the whole start, never 503
    server = bring_up_later(FakeVLLM, port, 0.8, after=started)
    append_later(
        log,
        [
            "(Worker pid=24075) INFO 11-29 15:39:20 [default_loader.py:291] Loading weights took 0.00 seconds",
            KV_LINE,
            "(APIServer pid=19036) INFO 11-29 15:40:11 [api_server.py:1033] Starting vLLM server on http://127.0.0.1:1",
            "INFO:     Application startup complete.",
        ],
        0.3,
        after=started,
    )
    try:
        facts = wait_from_end(
            f"http://127.0.0.1:{port}", log, Alive(), started=started, timeout=HANG_S, engine="vllm"
        )
        posts = [r for r in server["s"].requests if r[0] == "POST"]
    finally:
        server["s"].close()
    assert facts["engine"] == "vllm"
    assert facts["max_total_num_tokens"] == 2097152  # this start's line, not the old 999
    assert facts["generate"] == {"completion_tokens": 1}
    assert facts["model_info"]["served_model_name"] == "tiny-qwen2"
    assert facts["model_info"]["max_model_len"] == 2048
    assert facts["server_args"]["version"] == "0.32.0"
    assert facts["memory_per_rank"] == []
    assert facts["ready_line_seen"] and not facts["already_ready"]
    assert posts == [
        (
            "POST",
            "/v1/completions",
            {"model": "tiny-qwen2", "prompt": "ping", "max_tokens": 1, "temperature": 0},
        )
    ]


def test_already_up_reads_the_kv_line_from_the_whole_log(log):
    port = free_port()
    with open(log, "a") as f:
        f.write(KV_LINE + "\n")
    s = FakeVLLM(port)
    try:
        facts = wait_from_end(f"http://127.0.0.1:{port}", log, Alive(), timeout=HANG_S, engine="vllm")
    finally:
        s.close()
    assert facts["already_ready"] and facts["max_total_num_tokens"] == 2097152


@pytest.mark.parametrize(
    ("lines", "cls"),
    [
        (
            [
                "(EngineCore pid=5738) ERROR 11-29 15:43:15 [core.py:1510] EngineCore failed to start.",
                "(EngineCore pid=5738) ERROR 11-29 15:43:15 [core.py:1510] ValueError: No available memory for "
                "the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            ],
            "kv_cache_no_memory",
        ),
        (["OSError: [Errno 98] Address already in use"], "port_in_use"),
        (
            [
                "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
                "'namespace/repo_name': '/nonexistent/tiny-qwen2'. Use `repo_type` argument if needed."
            ],
            "model_not_found",
        ),
    ],
)
def test_a_vllm_fatal_line_decides_while_the_process_lives(log, lines, cls):
    started = threading.Event()
    append_later(log, lines, 0.2, after=started)
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, Alive(), started=started, timeout=HANG_S, grace=60, engine="vllm")
    assert ei.value.failure_class == cls
    assert ei.value.evidence["line"] == lines[-1]
    assert ei.value.evidence["verdict_s_after_line"] < 60  # at once, not after a grace


def test_exit_status_zero_is_a_failure(log):
    """vLLM's API server exits 0 after its engine core died: the gate did not ask for that exit."""
    state = Alive()
    started = threading.Event()
    state.die_later(0.3, 0, after=started)
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, started=started, timeout=HANG_S, engine="vllm")
    assert ei.value.failure_class == "crashed"
    assert "status 0" in ei.value.hint
    assert ei.value.evidence["exit_status"] == "exited with status 0"


def test_argparse_exit_2_is_bad_args(log):
    state = Alive()
    started = threading.Event()
    written = append_later(log, ["usage: vllm serve [model_tag] [options]"], 0.1, after=started)
    state.die_later(0.2, 2, after=written)  # the exit follows the usage line
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, started=started, timeout=HANG_S, engine="vllm")
    assert ei.value.failure_class == "bad_args"


def test_engine_dead_after_start_fails_the_alive_check(log):
    off = log.stat().st_size
    with open(log, "a") as f:
        f.write(
            "(APIServer pid=19036) ERROR 11-29 15:50:01 [core_client.py:610] [shutdown] MPClient: engine core "
            "exited unexpectedly; starting cleanup\n"
        )
    with pytest.raises(health.HealthFailure) as ei:
        health.check_alive(health.FileFollower(str(log), off), Alive(), settle=0, engine="vllm")
    assert ei.value.failure_class == "crashed"
