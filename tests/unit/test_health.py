"""The readiness gate against a real loopback HTTP server and a real log file.

The server walks through SGLang's phases (port closed -> 503 -> 200); fatal lines and
process exits must give their class within 2 s; secrets are masked in server_args.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sglang_layouts import health_gate, health_logs, health_preflight, health_proc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers JSON (no body for obj=None), for the fake engines."""

    def log_message(self, *a):
        pass

    def _send(self, code, obj=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeSGLang:
    """/health 503 until `ready`, then 200; /generate, /server_info, /model_info like SGLang's."""

    def __init__(self, port, api_key=None):
        self.ready = False
        self.api_key = api_key
        outer = self

        class H(JsonHandler):
            def _auth(self):
                if outer.api_key and self.headers.get("Authorization") != f"Bearer {outer.api_key}":
                    self._send(401, {"error": "unauthorized"})
                    return False
                return True

            def do_GET(self):
                if self.path == "/health":
                    self._send(200 if outer.ready else 503, {})
                elif not self._auth():
                    return
                elif self.path == "/server_info":
                    self._send(
                        200,
                        {
                            "tp_size": 8,
                            "api_key": outer.api_key,
                            "max_total_num_tokens": 172906,
                            "internal_states": [
                                {"memory_usage": {"weight": 71.8, "kvcache": 11.3, "graph": 1.2}}
                            ],
                        },
                    )
                elif self.path == "/model_info":
                    self._send(
                        200,
                        {
                            "model_path": "/models/Kimi-K2.6",
                            "architectures": ["KimiK25ForConditionalGeneration"],
                        },
                    )
                else:
                    self._send(404, {})

            def do_POST(self):
                if not self._auth():
                    return
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(200, {"text": "x", "meta_info": {"completion_tokens": 1}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def gate_fails(log, state, **kw) -> health_gate.HealthFailure:
    """The gate's verdict on a server whose port stays closed, reading the log from its end on."""
    kw.setdefault("timeout", 30)
    with pytest.raises(health_gate.HealthFailure) as ei:
        health_gate.wait_ready(
            f"http://127.0.0.1:{free_port()}",
            health_logs.FileFollower(str(log), log.stat().st_size),
            state,
            **kw,
        )
    return ei.value


def gate_ready(log, port, **kw) -> dict:
    """The gate's facts from the server on `port` (it never dies), reading the log from its end on."""
    return health_gate.wait_ready(
        f"http://127.0.0.1:{port}",
        health_logs.FileFollower(str(log), log.stat().st_size),
        Alive(),
        timeout=20,
        **kw,
    )


class Alive:
    def __init__(self):
        self.alive = True
        self.code = None

    def __call__(self):
        if self.alive:
            return health_proc.ProcState(alive=True, started_at=time.time() - 1)
        return health_proc.ProcState(
            alive=False, exit_status=f"exited with status {self.code}", exit_code=self.code
        )


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "engine.log"
    p.write_text("old run: torch.OutOfMemoryError: CUDA out of memory.\n")  # before this start: ignored
    return p


def append_later(path, lines, delay):
    def run():
        time.sleep(delay)
        with open(path, "a") as f:
            for line in lines:
                f.write(line + "\n")
                f.flush()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_loading_warming_ready_then_facts(log):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = Alive()
    server = {}

    def bring_up():
        time.sleep(0.5)  # loading: port closed
        server["s"] = FakeSGLang(port, api_key="k3y-canary")
        time.sleep(0.5)  # warming: 503
        server["s"].ready = True

    threading.Thread(target=bring_up, daemon=True).start()
    append_later(
        log, ["[TP0] Load weight begin. avail mem=94.47 GB", "The server is fired up and ready to roll!"], 0.3
    )
    try:
        facts = health_gate.wait_ready(
            url,
            health_logs.FileFollower(str(log), log.stat().st_size),
            state,
            timeout=20,
            api_key="k3y-canary",
        )
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
    failure = gate_fails(log, state)
    latency = time.monotonic() - t0 - 0.3
    assert failure.failure_class == cls
    assert failure.evidence["line"] == lines[-1]
    assert failure.evidence["log_tail"][-1] == lines[-1]
    assert "old run" not in " ".join(failure.evidence["log_tail"])
    assert latency < 2.0


def test_generic_line_alone_fails_only_after_grace_while_the_process_lives(log):
    state = Alive()
    append_later(log, ["Received sigquit from a child process. It usually means the child failed."], 0.2)
    t0 = time.monotonic()
    failure = gate_fails(log, state, grace=0.5)
    assert failure.failure_class == "crashed"
    assert 0.5 <= time.monotonic() - t0 < 2.0


def test_process_exit_without_a_fatal_line(log):
    state = Alive()

    def die():
        time.sleep(0.3)
        state.code = 1
        state.alive = False

    threading.Thread(target=die, daemon=True).start()
    append_later(log, ["[TP0] Load weight begin. avail mem=94.47 GB"], 0.1)
    t0 = time.monotonic()
    failure = gate_fails(log, state)
    assert failure.failure_class == "crashed"
    assert failure.evidence["exit_status"] == "exited with status 1"
    assert failure.evidence["line"] is None
    assert time.monotonic() - t0 < 2.5


def test_ready_timeout(log):
    failure = gate_fails(log, Alive(), timeout=0.6)
    assert failure.failure_class == "ready_timeout"


def test_file_follower_keeps_partial_lines(tmp_path):
    p = tmp_path / "l"
    p.write_bytes(b"")
    f = health_logs.FileFollower(str(p))
    with open(p, "ab") as w:
        w.write(b"half")
    assert f.read() == []
    with open(p, "ab") as w:
        w.write(b" line\nnext")
    assert f.read() == ["half line"]


def test_preflight_refuses_oom_unless_forced(tmp_path):
    reasons = ["tp4ep2 uses 4 of the 8 GPUs"]
    port = free_port()
    p = health_preflight.preflight("oom", reasons, False, str(tmp_path), "127.0.0.1", port, False)
    assert len(p) == 1 and "oom" in p[0] and reasons[0] in p[0]
    assert health_preflight.preflight("oom", reasons, True, str(tmp_path), "127.0.0.1", port, False) == []


def test_preflight_port_and_model_path(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        problems = health_preflight.preflight(
            "fits", [], False, str(tmp_path / "missing"), "127.0.0.1", port, False
        )
        assert any("does not exist" in x for x in problems)
        assert any(f"port {port}" in x for x in problems)
        # held by one of our layout units: fine
        assert health_preflight.preflight("fits", [], False, str(tmp_path), "127.0.0.1", port, True) == []


def test_check_alive_for_node_ranks_above_zero(log):
    off = log.stat().st_size
    with open(log, "a") as f:
        f.write("[TP8] Load weight begin. avail mem=94.47 GB\n")
    health_gate.check_alive(health_logs.FileFollower(str(log), off), Alive(), settle=0)
    with open(log, "a") as f:
        f.write(
            "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 8/16 clients joined.\n"
        )
    with pytest.raises(health_gate.HealthFailure) as ei:
        health_gate.check_alive(health_logs.FileFollower(str(log), off), Alive(), settle=0)
    assert ei.value.failure_class == "nccl_timeout"
    dead = Alive()
    dead.alive, dead.code = False, 1
    with pytest.raises(health_gate.HealthFailure) as ei:
        health_gate.check_alive(health_logs.FileFollower(str(log), log.stat().st_size), dead, settle=0)
    assert ei.value.failure_class == "crashed"
    assert ei.value.evidence["exit_status"] == "exited with status 1"


def test_a_traceback_of_a_live_server_that_becomes_ready_is_not_fatal(log):
    port = free_port()
    server = {}

    def bring_up():
        time.sleep(0.6)
        server["s"] = FakeSGLang(port)
        server["s"].ready = True

    threading.Thread(target=bring_up, daemon=True).start()
    append_later(log, ["Traceback (most recent call last):", "NameError: name '_now' is not defined"], 0.1)
    try:
        facts = gate_ready(log, port)
    finally:
        server["s"].close()
    assert facts["max_total_num_tokens"] == 172906


def test_a_generic_line_then_the_exit_decides_at_once(log):
    state = Alive()

    def die():
        time.sleep(0.4)
        state.code = None
        state.alive = False

    append_later(
        log, [PREFIX_EXC := "[TP0] Scheduler hit an exception: Traceback (most recent call last):"], 0.2
    )
    threading.Thread(target=die, daemon=True).start()
    t0 = time.monotonic()
    failure = gate_fails(log, state)
    assert failure.failure_class == "crashed"
    assert failure.evidence["line"] == PREFIX_EXC
    assert time.monotonic() - t0 < 2.5
