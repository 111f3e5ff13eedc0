"""The simulator fails the way SGLang fails: log lines, exit status, what the health gate classifies."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from sglang_layouts.gate import logclass
from sglang_layouts.plan import planner

from sglang_sim.failures import format_size
from sglang_sim.launcher import DEFAULT_MODEL, PACKAGE_ROOT, SimProcess
from tests.helpers.demo import FAST_DECODE, kimi_plan
from tests.helpers.sims import assert_closed_while_loading

GIB = 1 << 30


def generate(url: str, n: int = 3, timeout: float = 120.0) -> dict:
    body = json.dumps(
        {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
    ).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=timeout) as r:
        return json.loads(r.read())


def classify(text: str) -> str | None:
    m = logclass.classify(text.splitlines())
    return m.cls if m else None


def test_tp4_ep2_dies_of_cuda_oom_with_the_plans_figures():
    """The reported incident: --tp-size 4 --ep-size 2 on 8 x 94.97 GiB."""
    spec, plan = kimi_plan(tp=4, ep=2)
    assert plan["failure"] == "oom_at_load"
    with SimProcess(["--tp-size", "4", "--ep-size", "2"], env={"SGLANG_SIM_LOAD_SECONDS": "0.5"}) as s:
        s.wait_for_line("Load weight begin")
        rc = s.wait_exit()
        t_oom, line = s.wait_for_line("CUDA out of memory")
    assert rc == -9  # kill_process_tree(os.getpid()): SIGKILL of itself
    assert t_oom - s.started_at >= 0.5  # not before the load delay
    m = re.search(
        r"Tried to allocate ([\d.]+ [MG]iB)\. GPU (\d+) has a total capacity of 94\.97 GiB of which ([\d.]+ [KMG]iB) "
        r"is free\..* Of the allocated memory ([\d.]+ GiB) is allocated by PyTorch",
        line,
    )
    assert m, line
    # the figures come from the planner's allocation sequence of the fullest rank
    seq = planner.allocation_sequence(spec, plan, 0)
    cum, tried = 0, None
    for _name, nbytes in seq:
        # the caching allocator: 2 MiB blocks for large tensors, 512 B granules for small ones
        grain = (2 << 20) if nbytes > (1 << 20) else 512
        block = -(-nbytes // grain) * grain
        if cum + block + planner.CUDA_CONTEXT_GIB * GIB > 94.97 * GIB:
            tried = nbytes
            break
        cum += block
    assert m.group(1) == format_size(tried) and m.group(4) == format_size(cum)
    text = s.text
    assert text.index("Scheduler hit an exception: Traceback") < text.index("torch.OutOfMemoryError")
    assert "Received sigquit from a child process. It usually means the child failed." in text
    assert "Uvicorn running" not in text
    assert classify(text) == "cuda_oom"


def test_ep_greater_than_tp_is_a_zero_division():
    """SGLang 0.5.23: each scheduler child dies deriving its MoE ranks; the main process exits 1."""
    with SimProcess(["--tp-size", "2", "--ep-size", "4"]) as s:
        rc = s.wait_exit()
    assert rc == 1
    text = s.text
    assert text.count("ZeroDivisionError: integer division or modulo by zero") == 2  # one per rank
    assert "in derive_spawn_ranks" in text and "Load weight begin" not in text
    assert (
        text.rstrip().splitlines()[-1].startswith("RuntimeError: Rank 0 scheduler died during initialization")
    )


def test_weights_fit_but_no_kv_cache():
    _, plan = kimi_plan(tp=8)
    low = round(plan["weights_gib_per_gpu"] / 94.97 - 0.02, 2)  # budget below the weights
    with SimProcess(["--tp-size", "8", "--mem-fraction-static", str(low)]) as s:
        rc = s.wait_exit()
    assert rc == -9
    assert "Load weight end." in s.text
    assert (
        f"Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static={low}"
        in s.text
    )
    assert classify(s.text) == "kv_cache_no_memory"


def test_unknown_flag_exits_2_like_argparse():
    env = {"PYTHONPATH": str(PACKAGE_ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "sglang_sim", "--model-path", str(DEFAULT_MODEL), "--tp-sise", "8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert p.stderr.startswith("usage: launch_server.py")
    assert (
        "error: unrecognized arguments: --tp-sise" in p.stderr or "error: unrecognized arguments" in p.stderr
    )
    assert classify(p.stderr) == "bad_args"


def test_port_taken():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with SimProcess(["--tp-size", "8"], port=port) as s:
            rc = s.wait_exit()
    assert rc == 1
    assert re.search(
        r"ERROR: +\[Errno 98\] error while attempting to bind on address \('127\.0\.0\.1', \d+\): "
        r"address already in use",
        s.text,
    )
    assert classify(s.text) == "port_in_use"


def test_crash_after_n_requests():
    env = {**FAST_DECODE, "SGLANG_SIM_FAULT": "crash_after:2", "SGLANG_SIM_HEALTH_POLL_SECONDS": "0.05"}
    with SimProcess(["--tp-size", "8"], env=env) as s:
        s.wait_ready()
        with urllib.request.urlopen(s.url("/health"), timeout=120) as r:
            assert r.status == 200  # a health probe is not a request that counts
        assert generate(s.url("/generate"))["meta_info"]["completion_tokens"] == 3
        time.sleep(0.1)
        assert s.proc.poll() is None
        assert generate(s.url("/generate"))["meta_info"]["completion_tokens"] == 3
        rc = s.wait_exit()
    assert rc == -9
    text = s.text
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in text
    assert classify(text) == "crashed"


def test_hang_keeps_port_open_and_stops_answering():
    with SimProcess(["--tp-size", "8"], env={**FAST_DECODE, "SGLANG_SIM_FAULT": "hang_after:1"}) as s:
        s.wait_ready()
        generate(s.url("/generate"))
        with socket.create_connection(("127.0.0.1", s.port), timeout=60):
            pass  # still accepting connections
        with pytest.raises(TimeoutError):
            urllib.request.urlopen(s.url("/health"), timeout=1.0)
        assert s.proc.poll() is None


def test_nccl_watchdog_timeout():
    env = {
        **FAST_DECODE,
        "SGLANG_SIM_FAULT": "nccl_timeout_after:1",
        "SGLANG_SIM_NCCL_TIMEOUT_SECONDS": "0.3",
    }
    with SimProcess(["--tp-size", "8"], env=env) as s:
        s.wait_ready()
        generate(s.url("/generate"))
        rc = s.wait_exit()
    assert rc == -9
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" in s.text
    assert "Timeout(ms)=300)" in s.text
    assert classify(s.text) == "nccl_timeout"


def test_slow_start_keeps_the_port_closed(tmp_path):
    # the load is held open (SGLANG_SIM_HOLD_DIR) until the test has looked at the closed port
    (tmp_path / "warmup").touch()  # the warm-up is not held
    with SimProcess(
        ["--tp-size", "8", "--sim-fault", "slow_start:2"], env={"SGLANG_SIM_HOLD_DIR": str(tmp_path)}
    ) as s:
        assert_closed_while_loading(s, tmp_path)
        t1, _ = s.wait_for_line("Load weight end")
        assert t1 - s.started_at >= 2.0  # the slow start's seconds at least
        s.wait_ready()


@pytest.mark.parametrize(
    ("args", "needle", "cls"),
    [
        (
            ["--tp-size", "16"],
            "torch.AcceleratorError: CUDA error: invalid device ordinal",
            "gpu_unavailable",
        ),
        (["--tp-size", "6"], "AssertionError: 64 attention heads do not split 6 ways", "crashed"),
    ],
)
def test_invalid_layouts_die_in_a_scheduler(args, needle, cls):
    with SimProcess(args) as s:
        rc = s.wait_exit()
    assert rc == -9
    assert "Scheduler hit an exception: Traceback" in s.text and needle in s.text
    assert "Uvicorn running" not in s.text
    m = logclass.classify(s.text.splitlines())
    assert m.cls == cls and m.line.startswith(needle)  # the exception says what happened, not the header


def test_a_jit_build_tool_missing_at_graph_capture():
    env = {"SGLANG_SIM_FAULT": "jit_missing:ninja", "SGLANG_SIM_LOAD_SECONDS": "0.2"}
    with SimProcess(["--tp-size", "8"], env=env) as s:
        rc = s.wait_exit()
    assert rc == -9
    lines = s.text.splitlines()
    cause = "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
    final = "Exception: Capture cuda graph failed: [Errno 2] No such file or directory: 'ninja'"
    assert lines.index(cause) < lines.index(final)
    assert "Uvicorn running" not in s.text
    m = logclass.classify(lines)
    assert m.cls == "jit_build_failed" and m.line == cause


def test_invalid_server_args_fail_in_the_main_process():
    with SimProcess(["--tp-size", "8", "--dp-size", "3", "--enable-dp-attention"]) as s:
        rc = s.wait_exit()
    assert rc == 1
    assert s.text.rstrip().splitlines()[-1].startswith("AssertionError: dp-attention needs tp % dp == 0")


def test_killed_at_in_flight_dies_as_the_nth_concurrent_request_arrives():
    """Fault killed_at_in_flight:3: two streams run (each far from done), the third request's
    arrival is the SIGKILL, with no line of its own."""
    env = {"SGLANG_SIM_DECODE_STEP_MS": "50", "SGLANG_SIM_FAULT": "killed_at_in_flight:3"}
    body = json.dumps(
        {"input_ids": [1, 2], "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
    ).encode()
    with SimProcess(["--tp-size", "8"], env=env) as s:
        s.wait_ready()
        # two streams that each have 100 s of tokens left once their first one is read
        streams = [urllib.request.urlopen(urllib.request.Request(s.url("/generate"), data=body), timeout=120)]
        streams.append(
            urllib.request.urlopen(urllib.request.Request(s.url("/generate"), data=body), timeout=120)
        )
        for r in streams:
            assert r.readline().startswith(b"data: ")
        assert s.proc.poll() is None  # two at once: alive
        with pytest.raises(OSError):
            generate(s.url("/generate"))
        rc = s.wait_exit()
        for r in streams:
            r.close()
    assert rc == -9
    assert "Scheduler hit an exception" not in s.text and "SIGQUIT" not in s.text
