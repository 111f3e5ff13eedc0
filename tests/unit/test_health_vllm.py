"""The readiness gate for engine vllm against a loopback server that acts as vLLM 0.32.0 does
(docs/vllm.md): the port stays closed until it is up (no 503 while starting), /health 200 with
an empty body, /v1/models, a one-token /v1/completions, /version, no /server_info. The KV
capacity comes from the start-up line in the engine's log; exits, status 0 included, fail."""

import json
import threading
import time
from http.server import ThreadingHTTPServer

import pytest
from sglang_layouts import health_gate, health_logs
from test_health import (  # the fakes serve both
    Alive,
    JsonHandler,
    append_later,
    free_port,
    gate_fails,
    gate_ready,
)

KV_LINE = (
    "(EngineCore pid=22227) INFO 11-29 15:40:07 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 1024.00x"
)


class FakeVLLM:
    def __init__(self, port, served="tiny-qwen2"):
        self.requests = []
        outer = self

        class H(JsonHandler):
            def do_GET(self):
                outer.requests.append(("GET", self.path, None))
                if self.path == "/health":
                    self._send(200)
                elif self.path == "/v1/models":
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": served,
                                    "object": "model",
                                    "owned_by": "vllm",
                                    "root": "/abs/build/models/tiny-qwen2",
                                    "parent": None,
                                    "max_model_len": 2048,
                                }
                            ],
                        },
                    )
                elif self.path == "/version":
                    self._send(200, {"version": "0.32.0"})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.requests.append(("POST", self.path, body))
                if self.path == "/v1/completions" and body.get("model") == served:
                    self._send(
                        200,
                        {
                            "object": "text_completion",
                            "model": served,
                            "choices": [{"index": 0, "text": "!", "finish_reason": "length"}],
                            "usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1},
                        },
                    )
                elif self.path == "/v1/completions":
                    self._send(
                        404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
                    )
                else:
                    self._send(404, {"detail": "Not Found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "vllm.log"
    # an earlier start's lines: never this start's facts or failures
    p.write_text(
        "(EngineCore pid=1) INFO CPU KV cache size: 999 tokens, x\nOSError: [Errno 98] Address already in use\n"
    )
    return p


def test_engine_from_the_unit_name():
    assert health_gate.engine_of(None, "vllm-tiny-qwen2-cpu-tp1.service") == "vllm"
    assert health_gate.engine_of("", "sglang-kimi-k2-6-ep8.service") == "sglang"
    assert health_gate.engine_of("sim", "vllm-x.service") == "sim"
    with pytest.raises(ValueError):
        health_gate.engine_of("tgi")


def test_closed_port_then_ready_one_token_completion_and_facts(log):
    port = free_port()
    server = {}

    def bring_up():
        time.sleep(0.8)  # vLLM: connection refused the whole start, never 503
        server["s"] = FakeVLLM(port)

    threading.Thread(target=bring_up, daemon=True).start()
    append_later(
        log,
        [
            "(Worker pid=24075) INFO 11-29 15:39:20 [default_loader.py:291] Loading weights took 0.00 seconds",
            KV_LINE,
            "(APIServer pid=19036) INFO 11-29 15:40:11 [api_server.py:1033] Starting vLLM server on http://127.0.0.1:1",
            "INFO:     Application startup complete.",
        ],
        0.3,
    )
    try:
        facts = gate_ready(log, port, engine="vllm")
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
    assert facts["waited_s"] >= 0.7
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
        facts = gate_ready(log, port, engine="vllm")
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
    append_later(log, lines, 0.2)
    t0 = time.monotonic()
    failure = gate_fails(log, Alive(), engine="vllm")
    assert failure.failure_class == cls
    assert failure.evidence["line"] == lines[-1]
    assert time.monotonic() - t0 < 2.5


@pytest.mark.parametrize(
    ("code", "lines", "cls", "hint"),
    [
        # vLLM's API server exits 0 after its engine core died: the gate did not ask for that exit
        (0, [], "crashed", "status 0"),
        (2, ["usage: vllm serve [model_tag] [options]"], "bad_args", "argparse"),
    ],
)
def test_an_exit_without_a_fatal_line_is_classed_by_its_status(log, code, lines, cls, hint):
    state = Alive()
    if lines:
        append_later(log, lines, 0.1)

    def die():
        time.sleep(0.3)
        state.code, state.alive = code, False

    threading.Thread(target=die, daemon=True).start()
    failure = gate_fails(log, state, engine="vllm")
    assert failure.failure_class == cls and hint in failure.hint
    assert failure.evidence["exit_status"] == f"exited with status {code}"


def test_engine_dead_after_start_fails_the_alive_check(log):
    off = log.stat().st_size
    with open(log, "a") as f:
        f.write(
            "(APIServer pid=19036) ERROR 11-29 15:50:01 [core_client.py:610] [shutdown] MPClient: engine core "
            "exited unexpectedly; starting cleanup\n"
        )
    with pytest.raises(health_gate.HealthFailure) as ei:
        health_gate.check_alive(health_logs.FileFollower(str(log), off), Alive(), settle=0, engine="vllm")
    assert ei.value.failure_class == "crashed"


def test_the_engines_fields_drive_the_gate():
    from sglang_layouts import engines

    assert engines.engine("vllm").confirm_route == "/v1/completions"
    assert engines.engine("sim").confirm_route == engines.engine("sglang").confirm_route == "/generate"
    assert (engines.VLLM.kv_tokens_from, engines.SGLANG.kv_tokens_from) == ("log", "server_info")
    assert engines.engine_of_unit("vllm-tiny-qwen2-cpu-tp1.service") == "vllm"
    assert engines.engine_of_unit("sglang-kimi-k2-6-ep8.service") == engines.engine_of_unit(None) == "sglang"
    assert (engines.VLLM.fraction_flag, engines.SGLANG.unit_prefix) == ("--gpu-memory-utilization", "sglang")
