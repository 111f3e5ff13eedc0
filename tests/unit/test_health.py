"""The readiness gate against a real loopback HTTP server and a real log file.

The server walks through SGLang's phases (port closed -> 503 -> 200); fatal lines and
process exits give their class at once (before any grace or timeout could), a generic line only
after its grace; secrets are masked in server_args. The scripted events are timed from the gate's
start; grace and timeout are long wherever the test is not about them, so no verdict depends on
how busy the host is.
"""

import json
import threading

import pytest
from sglang_layouts.gate import health, preflight

from tests.helpers.engine_fakes import (
    HANG_S,
    Alive,
    FakeSGLang,
    append_later,
    bring_up_later,
    wait_from_end,
    wait_on_closed_port,
)
from tests.helpers.net import free_port, listening

GRACE = 60.0  # a generic line's grace where the test is not about it: only a hang reaches it


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "engine.log"
    p.write_text("old run: torch.OutOfMemoryError: CUDA out of memory.\n")  # before this start: ignored
    return p


def test_loading_warming_ready_then_facts(log):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = Alive()
    started = threading.Event()
    # loading: port closed for 0.5 s; warming: 503 for 0.5 s; then ready
    server = bring_up_later(FakeSGLang, port, 0.5, ready_after=0.5, after=started, api_key="k3y-canary")
    append_later(
        log,
        ["[TP0] Load weight begin. avail mem=94.47 GB", "The server is fired up and ready to roll!"],
        0.3,
        after=started,
    )
    try:
        facts = wait_from_end(url, log, state, started=started, timeout=HANG_S, api_key="k3y-canary")
    finally:
        server["s"].close()
    assert facts["max_total_num_tokens"] == 172906
    assert facts["memory_per_rank"][0]["weight"] == 71.8
    assert facts["model_info"]["model_path"] == "/models/Kimi-K2.6"
    assert facts["server_args"]["api_key"] == "***"
    assert "k3y-canary" not in json.dumps(facts)
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
def test_fatal_line_gives_the_verdict_at_once_while_the_process_lives(log, lines, cls):
    state = Alive()
    started = threading.Event()
    append_later(log, lines, 0.3, after=started)
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, started=started, timeout=HANG_S, grace=GRACE)
    assert ei.value.failure_class == cls
    assert ei.value.evidence["line"] == lines[-1]
    assert ei.value.evidence["log_tail"][-1] == lines[-1]
    assert "old run" not in " ".join(ei.value.evidence["log_tail"])
    assert ei.value.evidence["verdict_s_after_line"] < GRACE  # at once, not after a grace


def test_generic_line_alone_fails_only_after_grace_while_the_process_lives(log):
    state = Alive()
    started = threading.Event()
    append_later(
        log, ["Received sigquit from a child process. It usually means the child failed."], 0.2, after=started
    )
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, started=started, timeout=HANG_S, grace=0.5)
    assert ei.value.failure_class == "crashed"  # not ready_timeout: the grace decided
    assert ei.value.evidence["verdict_s_after_line"] >= 0.5


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


MOONCAKE = [
    {
        "module": "mooncake.engine",
        "package": "mooncake-transfer-engine",
        "for": "pd.transfer_backend mooncake_tcp",
    }
]


def _package(root, body: str):
    """A `mooncake` package whose `engine` module runs `body` when imported."""
    pkg = root / "mooncake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text(body)
    return str(root)


def test_preflight_imports_the_transfer_backend_with_the_units_environment(tmp_path):
    import sys

    # importable only with the unit's environment: its PYTHONPATH and a variable it sets
    path = _package(
        tmp_path / "ok", "import os\nassert os.environ.get('UNIT_MARK') == 'yes', 'not the unit env'\n"
    )
    env = {"PYTHONPATH": path, "UNIT_MARK": "yes"}
    assert preflight.import_problems(sys.executable, MOONCAKE, env) == []
    # the same module without the unit's variable fails: the check ran with exactly `env`
    bad = preflight.import_problems(sys.executable, MOONCAKE, {"PYTHONPATH": path})
    assert len(bad) == 1 and "not the unit env" in bad[0]
    # through preflight(): one problem more, the others unchanged
    with listening() as port:
        problems = health.preflight(
            "fits",
            [],
            False,
            str(tmp_path),
            "127.0.0.1",
            port,
            True,
            python=sys.executable,
            imports=MOONCAKE,
            env={},
        )
    assert len(problems) == 1 and "No module named 'mooncake'" in problems[0]
    assert "mooncake-transfer-engine" in problems[0] and "pd.transfer_backend mooncake_tcp" in problems[0]


def test_a_missing_shared_library_names_the_library_and_the_fix(tmp_path):
    import sys

    # what a wheel's extension raises when the host lacks a library it links (mooncake's engine.so)
    path = _package(
        tmp_path,
        "raise ImportError('libibverbs.so.1: cannot open shared object file: No such file or directory')\n",
    )
    (msg,) = preflight.import_problems(sys.executable, MOONCAKE, {"PYTHONPATH": path})
    assert msg.startswith("pd.transfer_backend mooncake_tcp needs the Python module mooncake.engine")
    assert "ImportError: libibverbs.so.1: cannot open shared object file" in msg
    assert "LD_LIBRARY_PATH" in msg and "sglang_venv_packages" in msg
    # a Python that is not there: said, not raised
    (msg,) = preflight.import_problems(str(tmp_path / "nope" / "python"), MOONCAKE, {})
    assert "build the engine's venv first" in msg


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
    started = threading.Event()
    server = bring_up_later(FakeSGLang, port, 0.6, ready_after=0, after=started)
    lines = ["Traceback (most recent call last):", "NameError: name '_now' is not defined"]
    append_later(log, lines, 0.1, after=started)
    try:
        facts = wait_from_end(
            f"http://127.0.0.1:{port}", log, Alive(), started=started, timeout=HANG_S, grace=GRACE
        )
    finally:
        server["s"].close()
    assert facts["max_total_num_tokens"] == 172906


SCHED_EXC = "[TP0] Scheduler hit an exception: Traceback (most recent call last):"


@pytest.mark.parametrize(
    ("line", "line_at", "code", "exit_at", "fatal_line"),
    [
        # no fatal line at all: the exit alone is the verdict, with its status
        pytest.param("[TP0] Load weight begin. avail mem=94.47 GB", 0.1, 1, 0.3, None, id="exit-alone"),
        # a generic line waits out its grace, unless the process exits first: then at once
        pytest.param(SCHED_EXC, 0.2, None, 0.4, SCHED_EXC, id="generic-line-then-exit"),
    ],
)
def test_a_process_exit_decides_at_once(log, line, line_at, code, exit_at, fatal_line):
    state = Alive()
    started = threading.Event()
    written = append_later(log, [line], line_at, after=started)
    state.die_later(exit_at - line_at, code, after=written)  # the exit follows the line
    with pytest.raises(health.HealthFailure) as ei:
        wait_on_closed_port(log, state, started=started, timeout=HANG_S, grace=GRACE)
    assert ei.value.failure_class == "crashed"  # not ready_timeout
    if code is not None:
        assert ei.value.evidence["exit_status"] == f"exited with status {code}"
    assert ei.value.evidence["line"] == fatal_line
    assert ei.value.evidence["waited_s"] < GRACE  # the exit cut the grace short
