"""The `run_bench_serving` fixture drives SGLang's real bench_serving client.

The server here is a few lines of stdlib (http.server + SSE) that speaks the two streaming
formats bench_serving reads: SGLang's native /generate (cumulative text, server-side
`meta_info.completion_tokens`) and OpenAI /v1/completions (text deltas). It records what the
client sent, so the test checks the client's side (lengths, concurrency, request count) and
the row it wrote (token totals, latencies no smaller than the server's sleeps).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.helpers.fake_http import JsonHandler, LoopbackServer

TTFT_S = 0.02
TPOT_S = 0.005


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.active = 0
        self.max_active = 0


class _Handler(JsonHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no chunked encoding
    state: _State

    def do_GET(self):
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self):
        body = self._json_body()
        if self.path not in ("/generate", "/v1/completions"):
            self._json(404, {"error": "not found"})
            return
        st = self.state
        if self.path == "/generate":
            n = int(body["sampling_params"]["max_new_tokens"])
            prompt = body.get("input_ids") or body.get("text")
        else:
            n = int(body["max_tokens"])
            prompt = body.get("prompt")
        with st.lock:
            st.requests.append(
                {"path": self.path, "prompt_len": len(prompt), "max_new_tokens": n, "body": body}
            )
            st.active += 1
            st.max_active = max(st.max_active, st.active)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            time.sleep(TTFT_S)
            for i in range(1, n + 1):
                if i > 1:
                    time.sleep(TPOT_S)
                if self.path == "/generate":
                    chunk = {
                        "text": " a" * i,
                        "meta_info": {"completion_tokens": i, "prompt_tokens": len(prompt)},
                    }
                else:
                    chunk = {"choices": [{"index": 0, "text": " a", "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        finally:
            with st.lock:
                st.active -= 1


@pytest.fixture
def sse_server():
    state = _State()
    with LoopbackServer(type("Handler", (_Handler,), {"state": state})) as server:
        yield server.url, state


def test_sglang_backend_row_matches_what_the_server_saw(run_bench_serving, sse_server):
    url, state = sse_server
    # --tokenize-prompt (through extra_args) makes random-ids send the token ids themselves,
    # so the server can count them; without it bench_serving sends the decoded text.
    row = run_bench_serving(
        url,
        "sglang",
        num_prompts=12,
        input_len=40,
        output_len=10,
        concurrency=3,
        extra_args=["--tokenize-prompt"],
    )

    timed = [r for r in state.requests if r["max_new_tokens"] == 10]
    assert all(r["path"] == "/generate" for r in state.requests)
    # the 12 measured requests (plus at most one warm-up), each exactly 40 ids in, 10 out:
    # --random-range-ratio 1.0 fixes the lengths
    assert len(timed) >= 12 and len(state.requests) - 12 <= 1
    assert all(isinstance(r["body"].get("input_ids"), list) for r in timed)
    assert {r["prompt_len"] for r in timed} == {40}
    assert all(r["body"]["stream"] is True and r["body"]["sampling_params"]["ignore_eos"] for r in timed)
    assert state.max_active <= 3, "--max-concurrency 3 was not honoured"

    assert row["backend"] == "sglang"
    assert row["completed"] == 12
    assert row["total_input_tokens"] == 12 * 40
    assert row["total_output_tokens"] == 12 * 10  # the server's meta_info.completion_tokens
    assert row["max_concurrency"] == 3
    # latencies cannot be shorter than the server's sleeps (how much longer is the host's load)
    assert row["mean_ttft_ms"] >= TTFT_S * 1000
    assert row["mean_e2e_latency_ms"] >= (TTFT_S + 9 * TPOT_S) * 1000
    # TPOT is (latency - TTFT) / (output_len - 1) per request: a late first read makes it smaller
    # than the server's step on a busy host, so its formula is checked, not its size
    assert row["mean_tpot_ms"] == pytest.approx(
        (row["mean_e2e_latency_ms"] - row["mean_ttft_ms"]) / 9, rel=0.01
    )
    assert row["duration"] > 0 and row["output_throughput"] == pytest.approx(120 / row["duration"], rel=1e-6)
    assert "Successful requests:" in row["_stdout"]


def test_default_prompts_are_text(run_bench_serving, sse_server):
    url, state = sse_server
    row = run_bench_serving(url, "sglang", num_prompts=4, input_len=24, output_len=4, concurrency=None)
    timed = [r for r in state.requests if r["max_new_tokens"] == 4]
    assert len(timed) >= 4 and all(isinstance(r["body"].get("text"), str) for r in timed)
    # text prompts are shortened by the tokenizer's special tokens (our BOS): 23 ids each
    assert row["completed"] == 4 and row["total_input_tokens"] == 4 * (24 - 1)
    assert row["max_concurrency"] is None


def test_openai_backend(run_bench_serving, sse_server):
    url, state = sse_server
    row = run_bench_serving(url, "sglang-oai", num_prompts=6, input_len=16, output_len=5, concurrency=2)
    assert {r["path"] for r in state.requests} == {"/v1/completions"}
    assert row["completed"] == 6
    assert row["total_output_tokens"] == 6 * 5
    assert state.max_active <= 2


def test_failure_raises_with_the_clients_output(run_bench_serving, sse_server):
    url, _ = sse_server
    # no such backend: argparse in bench_serving exits 2; the helper must not return a row
    with pytest.raises(AssertionError, match="invalid choice"):  # conftest.OracleError
        run_bench_serving(url, "no-such-backend", num_prompts=1)
