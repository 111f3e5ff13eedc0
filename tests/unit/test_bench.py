"""The load generator against a real (stdlib) HTTP server on loopback."""

from __future__ import annotations

import statistics

import pytest
from sglang_layouts.bench import common, loadgen

from tests.helpers.bench_server import FakeServer


def test_percentile_matches_numpy_linear_method():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert common.percentile(xs, 50) == 3.0
    assert common.percentile(xs, 90) == pytest.approx(4.6)
    assert common.percentile(xs, 99) == pytest.approx(4.96)
    assert common.percentile([7.0], 99) == 7.0
    assert common.stats([]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_default_num_prompts_grows_with_concurrency_and_is_bounded():
    assert loadgen.default_num_prompts(1) == 8
    assert loadgen.default_num_prompts(16) == 64
    assert loadgen.default_num_prompts(64) == 256
    assert loadgen.default_num_prompts(10_000) == 1024
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        assert loadgen.default_num_prompts(c) >= 4 * c
    cfg = loadgen.make_config(
        "http://127.0.0.1:1", concurrency=[1, 4, 64], prompts_per_stream=2, min_prompts=4
    )
    assert cfg["num_prompts"] == [4, 8, 128]
    fixed = loadgen.make_config("http://127.0.0.1:1", concurrency=[1, 64], num_prompts=5)
    assert fixed["num_prompts"] == [5, 5]


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"api": "grpc"}, "api must be one of"),
        ({"concurrency": []}, "concurrency"),
        ({"concurrency": [0, 2]}, "concurrency"),
        ({"input_len": 0}, "input_len"),
        ({"num_prompts": 0}, "num_prompts"),
        ({"warmup": -1}, "warmup"),
    ],
)
def test_bad_arguments_are_refused(kwargs, needle):
    with pytest.raises(loadgen.BenchError, match=needle):
        loadgen.make_config("http://127.0.0.1:1", **kwargs)


def test_bad_url_is_refused():
    with pytest.raises(loadgen.BenchError, match="url"):
        loadgen.make_config("127.0.0.1:30000")


@pytest.mark.parametrize("chunked", [True, False])
def test_generate_figures_match_what_the_server_did(chunked):
    with FakeServer(step_s=0.004, first_s=0.03, chunked=chunked) as srv:
        cfg = loadgen.make_config(srv.url, concurrency=[1, 4], input_len=32, output_len=10, warmup=1, seed=7)
        lines = []
        out = loadgen.run_benchmark(cfg, progress=lines.append, keep_requests=True)
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 4]
    lv1, lv4 = out["levels"]
    assert (lv1["completed"], lv1["failed"]) == (8, 0)
    assert (lv4["completed"], lv4["failed"]) == (16, 0)
    # token counts are the server's, prompts the asked length
    assert lv4["output_tokens"] == 16 * 10 and lv4["token_source"] == "server"
    assert lv4["prompt_tokens"] == 16 * 32
    # every measured request reached the server with its own rid; warmup rids are distinct
    log = {e["rid"]: e for e in srv.settled()}
    rids = [r["rid"] for lv in out["levels"] for r in lv["requests"]]
    assert len(set(rids)) == len(rids) == 24 and all(r in log for r in rids)
    # the warm-up of each level: one request per stream, the level's streams at once (1, then 4)
    assert sum("-w" in r for r in log) == 1 + 4
    assert [lv["warmup"]["requests"] for lv in out["levels"]] == [1, 4]
    assert [lv["warmup"]["at_once"] for lv in out["levels"]] == [1, 4]
    assert all(lv["stall"]["detected"] is False for lv in out["levels"])
    assert srv.state.flushes == 2
    # measured TTFT / E2E vs the server's own schedule, as bounds that hold however busy the box is:
    # the client sends before the server sees the request and reads a token after the server sent
    # it, so its figures can only be longer; a TTFT taken at the wrong moment (the last token)
    # equals E2E, and ITLs that are not the gaps between tokens add up past E2E - TTFT. How
    # close the figures come to the server's is make bench-client's measurement, not a test's.
    for lv in out["levels"]:
        for r in lv["requests"]:
            e = log[r["rid"]]
            assert r["ttft_ms"] >= 1000 * (e["first_token"] - e["arrival"]) - 0.5, (r, e)
            assert r["e2e_ms"] >= 1000 * (e["token_times"][-1] - e["arrival"]) - 0.5, (r, e)
            assert len(r["itl_ms"]) == 9
            # equal when a descheduled client reads every token in one receive
            assert r["ttft_ms"] <= r["e2e_ms"]
            assert min(r["itl_ms"]) >= 0
            # the stream ends after its last token (the usage chunk, [DONE]): E2E is at least that
            assert r["ttft_ms"] + sum(r["itl_ms"]) <= r["e2e_ms"] + 0.01
    # per request decode_tok_s = 1000 / tpot_ms: the level's means are means of those (the mean of
    # the reciprocals, which a loaded box's spread of tpot moves away from 1000 / mean tpot)
    tpot = [(r["e2e_ms"] - r["ttft_ms"]) / (r["completion_tokens"] - 1) for r in lv1["requests"]]
    assert lv1["tpot_ms"]["mean"] == pytest.approx(statistics.fmean(tpot))
    # a request read in one receive has no decode speed and is left out of decode_tok_s
    streamed = [t for t, r in zip(tpot, lv1["requests"], strict=True) if sum(r["itl_ms"]) > 0]
    if streamed:
        assert lv1["decode_tok_s"]["mean"] == pytest.approx(statistics.fmean(1000 / t for t in streamed))
    else:
        assert lv1["decode_tok_s"]["mean"] is None
    assert lv4["output_tok_s"] == pytest.approx(lv4["output_tokens"] / lv4["duration_s"])
    assert lv4["request_s"] == pytest.approx(16 / lv4["duration_s"])
    # Little's law over the level's own requests (how close to 4 it gets depends on the machine's load)
    little = sum(r["e2e_ms"] for r in lv4["requests"]) / 1000 / lv4["duration_s"]
    assert lv4["achieved_concurrency"] == pytest.approx(little, rel=1e-3) and 0 < little <= 4.05
    assert srv.state.max_inflight == 4
    s = out["summary"]
    assert s["single_request_tok_s"] == lv1["decode_tok_s"]["mean"]
    # peak and knee by their rule over the levels as measured: on a loaded box c4 need not beat c1
    peak = max(out["levels"], key=lambda lv: lv["output_tok_s"])
    assert (s["peak_concurrency"], s["peak_output_tok_s"]) == (peak["concurrency"], peak["output_tok_s"])
    knee = next(lv for lv in out["levels"] if lv["output_tok_s"] >= 0.9 * peak["output_tok_s"])
    assert s["knee_concurrency"] == knee["concurrency"]
    # progress: start and done per level, then the end
    assert [ln.split(":")[0] for ln in lines] == [
        "level c=1 start",
        "level c=1 done",
        "level c=4 start",
        "level c=4 done",
        "bench finished",
    ]
    assert out["server"]["version"] == "fake-1"
    assert set(out["formulas"]) >= {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "achieved_concurrency"}
    # the measured prompts are random token ids of the asked length, ignore_eos set
    body = next(b for b in srv.state.bodies if "-r" in b["rid"])
    assert len(body["input_ids"]) == 32 and body["sampling_params"]["ignore_eos"] is True


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_routes_use_usage_counts(api):
    with FakeServer(step_s=0.002, first_s=0.01) as srv:
        cfg = loadgen.make_config(srv.url, api=api, concurrency=[2], input_len=8, output_len=5, warmup=0)
        out = loadgen.run_benchmark(cfg)
    lv = out["levels"][0]
    assert lv["completed"] == 8 and lv["token_source"] == "server" and lv["output_tokens"] == 40
    assert all(b["model"] == "fake-model" and b["stream_options"]["include_usage"] for b in srv.state.bodies)
    assert all(b["rid"] for b in srv.state.bodies)


def test_without_usage_tokens_are_counted_from_chunks_and_said_so():
    with FakeServer(step_s=0.001, first_s=0.005, usage=False) as srv:
        cfg = loadgen.make_config(
            srv.url, api="completions", concurrency=[1], num_prompts=2, output_len=4, warmup=0
        )
        out = loadgen.run_benchmark(cfg)
    assert out["levels"][0]["token_source"] == "chunks"
    assert out["levels"][0]["output_tokens"] == 8


def test_failed_requests_are_counted_and_excluded_from_latency():
    with FakeServer(step_s=0.002, first_s=0.005, fail_every=3, error_every=5) as srv:
        cfg = loadgen.make_config(
            srv.url, concurrency=[2], num_prompts=15, input_len=4, output_len=6, warmup=0, flush_cache=False
        )
        out = loadgen.run_benchmark(cfg, keep_requests=True)
    lv = out["levels"][0]
    failed = [r for r in lv["requests"] if not r["ok"]]
    assert lv["failed"] == len(failed) > 0 and lv["completed"] + lv["failed"] == 15
    assert {e["error"].split(":")[0] for e in lv["errors"]} <= {"HTTP 500", "server error"}
    assert lv["output_tokens"] == 6 * lv["completed"]
    assert all(r["ttft_ms"] is None or r["ok"] is False for r in failed)
    assert any("failed" in w for w in out["summary"]["warnings"])
    assert out["summary"]["error_rate"] == pytest.approx(lv["failed"] / 15)
    assert srv.state.flushes == 0


def test_short_of_target_concurrency_is_warned():
    with FakeServer(step_s=0.001, first_s=0.002) as srv:
        cfg = loadgen.make_config(srv.url, concurrency=[8], num_prompts=3, output_len=3, warmup=0)
        out = loadgen.run_benchmark(cfg)
    assert out["levels"][0]["achieved_concurrency"] < 4
    assert any("achieved" in w and "only 3 requests" in w for w in out["levels"][0]["warnings"])


def test_unreachable_server_is_a_clear_error():
    cfg = loadgen.make_config("http://127.0.0.1:9", concurrency=[1])
    with pytest.raises(loadgen.BenchError, match="not reachable"):
        loadgen.run_benchmark(cfg)


def test_a_server_whose_server_info_answers_is_not_asked_health():
    # SGLang's /health generates a token and sleeps 1 s before it looks: a second of every layout
    with FakeServer(step_s=0.001, first_s=0.002) as srv:
        cfg = loadgen.make_config(srv.url, concurrency=[1], num_prompts=1, output_len=2, warmup=0)
        out = loadgen.run_benchmark(cfg)
    assert out["levels"][0]["completed"] == 1 and "/server_info" in srv.state.gets
    assert "/health" not in srv.state.gets


@pytest.mark.parametrize(
    ("health", "outcome"), [(200, None), (503, "is not ready: GET /health answered HTTP 503")]
)
def test_without_server_info_health_decides(health, outcome):
    with FakeServer(step_s=0.001, first_s=0.002, server_info=False, health_status=health) as srv:
        cfg = loadgen.make_config(srv.url, concurrency=[1], num_prompts=1, output_len=2, warmup=0)
        if outcome:
            with pytest.raises(loadgen.BenchError, match=outcome):
                loadgen.run_benchmark(cfg)
        else:
            assert loadgen.run_benchmark(cfg)["levels"][0]["completed"] == 1
    assert srv.state.gets[:2] == ["/server_info", "/health"]


def test_timeout_fails_the_request_not_the_run():
    with FakeServer(step_s=0.2, first_s=0.01) as srv:
        cfg = loadgen.make_config(
            srv.url, concurrency=[1], num_prompts=1, output_len=5, warmup=0, request_timeout=0.3
        )
        out = loadgen.run_benchmark(cfg)
    lv = out["levels"][0]
    assert lv["failed"] == 1 and lv["errors"][0]["error"].startswith("timeout")


def test_knee_is_the_first_level_near_the_peak():
    def lv(c, tok):
        return {
            "concurrency": c,
            "completed": 1,
            "failed": 0,
            "output_tok_s": tok,
            "decode_tok_s": common.stats([1.0]),
            "ttft_ms": common.stats([1.0]),
            "warnings": [],
        }

    s = loadgen.summarize([lv(1, 10), lv(2, 19), lv(4, 35), lv(8, 60), lv(16, 66), lv(32, 70), lv(64, 69)])
    assert s["peak_concurrency"] == 32 and s["knee_concurrency"] == 16


def test_decode_speed_is_undefined_when_all_tokens_arrive_in_one_chunk():

    def req(ttft, e2e, itl):
        return {
            "ok": True,
            "completion_tokens": 16,
            "prompt_tokens": 8,
            "e2e": e2e,
            "ttft": ttft,
            "itl": itl,
            "token_source": "usage",
            "error": None,
        }

    cfg = {"output_len": 16}
    # one request streamed over 150 ms, one delivered in a single read (e2e - TTFT = 1 microsecond)
    level = loadgen.summarize_level(cfg, 1, [req(0.05, 0.2, [0.01] * 15), req(0.05, 0.050001, [])], 1.0, 2)
    assert level["decode_tok_s"]["mean"] == pytest.approx(15 / 0.15)
    assert any("one chunk" in w for w in level["warnings"])
