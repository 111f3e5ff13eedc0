"""The simulator as a real process on a real port: start-up, endpoints, wire formats, schedule."""

from __future__ import annotations

import itertools
import json
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request

import pytest

from sglang_sim.launcher import DEFAULT_MODEL, SimProcess
from tests.helpers.demo import kimi_plan
from tests.helpers.sims import assert_closed_while_loading, scheduled_sim


def get(url: str, timeout: float = 60.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url: str, body: dict, timeout: float = 120.0):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sse(
    url: str, body: dict, timeout: float = 120.0, first: threading.Event | None = None
) -> list[tuple[float, str]]:
    """POST and return (arrival time, data) of every SSE event; `first` is set at the first one."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    events = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                events.append((time.monotonic(), line[6:]))
                if first is not None:
                    first.set()
    return events


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    args = [
        "--tp-size",
        "8",
        "--enable-metrics",
        "--max-running-requests",
        "3",
        "--served-model-name",
        "kimi",
    ]
    with scheduled_sim(tmp_path_factory.mktemp("sim"), args, decode_step_ms=20, SGLANG_SIM_EOS_MEAN="8") as s:
        yield s


def test_startup_port_closed_while_loading_then_503_then_200(tmp_path):
    # each phase is held (SGLANG_SIM_HOLD_DIR) until the test has looked at it: no race with its seconds
    env = {"SGLANG_SIM_HEALTH_POLL_SECONDS": "0.05", "SGLANG_SIM_HOLD_DIR": str(tmp_path)}
    with SimProcess(["--tp-size", "8"], env=env) as s:
        assert_closed_while_loading(s, tmp_path)
        s.wait_for_line("Uvicorn running on")
        assert get(s.url("/health"))[0] == 503
        assert get(s.url("/health_generate"))[0] == 503
        assert get(s.url("/model_info"))[0] == 200  # answers before warm-up, as SGLang does
        (tmp_path / "warmup").touch()
        s.wait_ready()
        assert get(s.url("/health"))[0] == 200
        text = s.text
        order = [
            "server_args=ServerArgs(",
            "Load weight begin. avail mem=",
            "Load weight end.",
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens:",
            "max_total_num_tokens=",
            "Uvicorn running on",
            "The server is fired up and ready to roll!",
        ]
        positions = [text.index(x) for x in order]
        assert positions == sorted(positions)
        _, plan = kimi_plan(tp=8)
        assert f"#tokens: {plan['kv_tokens']}, KV size:" in text
        assert f"max_total_num_tokens={plan['kv_tokens']}," in text
        w = plan["ranks"][0]["weights_gib"]
        assert f"mem usage={w:.2f} GB." in text
        assert "[20" in text and " TP7] Load weight end." in text


def test_info_endpoints(sim):
    status, body = get(sim.url("/server_info"))
    info = json.loads(body)
    _, plan = kimi_plan(tp=8)
    assert status == 200
    assert info["tp_size"] == 8 and info["ep_size"] == 1
    assert info["max_total_num_tokens"] == plan["kv_tokens"]
    mem = info["internal_states"][0]["memory_usage"]
    assert set(mem) == {"weight", "kvcache", "graph", "token_capacity"}
    assert mem["weight"] == pytest.approx(plan["weights_gib_per_gpu"], abs=0.01)
    assert mem["token_capacity"] == plan["kv_tokens"]
    assert len(info["sim"]["memory_usage_per_rank"]) == 8
    assert json.loads(get(sim.url("/get_server_info"))[1])["tp_size"] == 8
    mi = json.loads(get(sim.url("/model_info"))[1])
    assert mi["model_path"] == str(DEFAULT_MODEL) and mi["is_generation"] is True
    assert json.loads(get(sim.url("/get_model_info"))[1]) == mi
    models = json.loads(get(sim.url("/v1/models"))[1])
    assert models["data"][0]["id"] == "kimi"
    assert get(sim.url("/flush_cache"))[0] == 200
    assert get(sim.url("/nope"))[0] == 404


def test_generate_stream_cumulative_and_done(sim):
    events = sse(
        sim.url("/generate"),
        {
            "text": "Hello there",
            "stream": True,
            "rid": "gen-1",
            "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
        },
    )
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5, 6]
    for a, b in itertools.pairwise(chunks):
        assert b["text"].startswith(a["text"]) and len(b["text"]) > len(a["text"])
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    assert all("e2e_latency" not in c["meta_info"] for c in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6}
    assert last["e2e_latency"] > 0 and last["id"] == "gen-1" and last["prompt_tokens"] == 2


def test_generate_non_stream_and_input_ids(sim):
    status, body = post(
        sim.url("/generate"),
        {"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}},
    )
    out = json.loads(body)
    assert status == 200
    assert out["meta_info"]["prompt_tokens"] == 5 and out["meta_info"]["completion_tokens"] == 4
    assert len(out["output_ids"]) == 4 and out["text"]


def test_eos_is_deterministic_and_within_max(sim):
    lengths = []
    for _ in range(2):
        for i in range(3):
            _, body = post(
                sim.url("/generate"), {"text": f"prompt {i} " * 3, "sampling_params": {"max_new_tokens": 600}}
            )
            meta = json.loads(body)["meta_info"]
            assert 1 <= meta["completion_tokens"] <= 600
            lengths.append((meta["completion_tokens"], json.dumps(meta["finish_reason"])))
    assert lengths[:3] == lengths[3:]
    assert any('"stop"' in fr for _, fr in lengths)


def test_openai_completions_stream_with_usage(sim):
    events = sse(
        sim.url("/v1/completions"),
        {
            "model": "asked-name",
            "prompt": "Say something",
            "max_tokens": 5,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in events[:-1]]
    content, usage = chunks[:-1], chunks[-1]
    assert len(content) == 5
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in content)
    assert all(c["model"] == "asked-name" for c in chunks)  # the model the request named
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 4 + ["length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 5
    # without include_usage: no usage chunk
    events = sse(
        sim.url("/v1/completions"), {"prompt": "x", "max_tokens": 3, "ignore_eos": True, "stream": True}
    )
    assert [json.loads(d)["choices"][0]["text"] != "" for _, d in events[:-1]] == [True] * 3


def test_openai_chat_stream_and_non_stream(sim):
    body = {
        "model": "kimi",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "ignore_eos": True,
    }
    events = sse(sim.url("/v1/chat/completions"), {**body, "stream": True})
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert sum(1 for c in chunks if c["choices"][0]["delta"].get("content")) == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    status, raw = post(sim.url("/v1/chat/completions"), body)
    out = json.loads(raw)
    assert status == 200 and out["object"] == "chat.completion"
    assert out["usage"]["completion_tokens"] == 4 and out["choices"][0]["message"]["content"]


def test_bad_requests(sim):
    status, body = post(sim.url("/generate"), {"sampling_params": {}})
    assert status == 400 and "input_ids" in json.loads(body)["error"]["message"]
    status, _ = post(sim.url("/generate"), {"input_ids": [1] * 300000})
    assert status == 400


def test_schedule_matches_client_and_batching(sim):
    """Four concurrent streams with max_running_requests=3: one waits; ITL = the 20 ms step."""
    results = {}

    def run(i):
        results[i] = sse(
            sim.url("/generate"),
            {
                "input_ids": [7] * 10,
                "stream": True,
                "rid": f"sched-{i}",
                "sampling_params": {"max_new_tokens": 15, "ignore_eos": True},
            },
        )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert get(sim.url("/sim/stats"))[0] == 200  # writes the finished requests' schedule records
    recs = {}
    for line in sim.schedule_log.read_text().splitlines():
        rec = json.loads(line)
        if rec["rid"].startswith("sched-"):
            recs[rec["rid"]] = rec
    assert len(recs) == 4
    for rec in recs.values():
        assert rec["completion_tokens"] == 15 and len(rec["token_times"]) == 15
        assert rec["first_token"] == rec["token_times"][0] >= rec["arrival"]
    # exactly one request waited for a free slot: its first token comes after another one's last token
    lasts = sorted(r["token_times"][-1] for r in recs.values())
    waited = [r for r in recs.values() if r["first_token"] >= lasts[0] - 1e-9]
    assert len(waited) == 1
    # decode gaps are the fixed 20 ms step (a prefill of the late request may interleave once)
    gaps = [b - a for r in recs.values() for a, b in itertools.pairwise(r["token_times"])]
    assert statistics.median(gaps) == pytest.approx(0.020, abs=1e-6)
    # the client got every token, none before the schedule made it due (one monotonic clock);
    # how much later is the host's load, which no test judges
    for i, events in results.items():
        sched = recs[f"sched-{i}"]["token_times"]
        assert len(events) == len(sched) + 1 and events[-1][1] == "[DONE]"
        assert all(t_client >= t_due for (t_client, _), t_due in zip(events, sched, strict=False))


def test_metrics(sim):
    status, body = get(sim.url("/metrics"))
    text = body.decode()
    assert status == 200
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:generation_tokens_total",
    ):
        assert f"# TYPE {name} " in text
    gen = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sglang:generation_tokens_total{")
    ]
    assert gen and gen[0] > 0


def test_metrics_off_without_flag():
    with SimProcess(["--tp-size", "8"]) as s:
        s.wait_for_line("Uvicorn running on")
        assert get(s.url("/metrics"))[0] == 404


def test_sigterm_drains_then_kills_itself():
    # SIGTERM once the request streams (its first token read); its 500 x 20 ms = 10 s of tokens
    # left keep the drain going far longer than the test takes to look at it
    tokens = 500
    with SimProcess(
        ["--tp-size", "8"], env={"SGLANG_SIM_DECODE_STEP_MS": "20", "SGLANG_SIM_DRAIN_POLL_SECONDS": "0.05"}
    ) as s:
        s.wait_ready()
        got = {}
        streaming = threading.Event()

        def run():
            got["events"] = sse(
                s.url("/generate"),
                {
                    "input_ids": [1],
                    "stream": True,
                    "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
                },
                first=streaming,
            )

        t = threading.Thread(target=run)
        t.start()
        assert streaming.wait(120)
        s.proc.terminate()
        s.wait_for_line("Draining requests and shutting down...")
        assert get(s.url("/health"))[0] == 503  # draining
        rc = s.wait_exit()
        t.join()
        assert rc == -9
        assert "SIGTERM received. signum=15" in s.text and "Draining requests and shutting down..." in s.text
        assert json.loads(got["events"][-2][1])["meta_info"]["completion_tokens"] == tokens


def test_keep_alive_pipelining_and_expect_continue(sim):
    body = json.dumps(
        {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}
    ).encode()
    req = b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
    with socket.create_connection(("127.0.0.1", sim.port), timeout=60) as c:
        c.sendall(req + req + b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")  # three requests, one connection
        data = b""
        while data.count(b"HTTP/1.1 200 OK") < 3 or not data.endswith(b"}]}"):
            chunk = c.recv(65536)
            assert chunk, data
            data += chunk
        assert data.count(b'"completion_tokens": 2') == 2
        head = (
            b"POST /generate HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: %d\r\n\r\n"
            % len(body)
        )
        c.sendall(head)
        assert c.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        c.sendall(body)
        assert b"HTTP/1.1 200 OK" in c.recv(65536)


# Multi-node (rank 1 needs rank 0 at --dist-init-addr): tests/integration/test_multinode_sim.py
