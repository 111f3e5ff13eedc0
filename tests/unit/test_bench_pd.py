"""A pd layout's TTFT split per level: the prefill servers' stage sums and counts (SGLang 0.5.16's
sglang:per_stage_req_latency_seconds) before and after a level give the mean prefill and KV-transfer
parts; a server without them leaves both null and says why."""

import pytest
from sglang_layouts.bench.common import BenchError
from sglang_layouts.bench.loadgen import make_config
from sglang_layouts.bench.telemetry import pd_counters, ttft_split

from tests.helpers.fake_http import JsonHandler, LoopbackServer


def metrics_server(text: str):
    class Handler(JsonHandler):
        def do_GET(self):
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return LoopbackServer(Handler)


def stage_metrics(prefill_s: float, transfer_s: float, n: int) -> str:
    """What SGLang 0.5.16's prefill server exposes with --enable-metrics (observability/
    metrics_collector.py: per_stage_req_latency_seconds, labels and stage; buckets left out)."""
    lab = 'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"'
    out = ["# TYPE sglang:per_stage_req_latency_seconds histogram"]
    for stage, seconds in (("prefill_forward", prefill_s), ("prefill_transfer_kv_cache", transfer_s)):
        out.append(f'sglang:per_stage_req_latency_seconds_bucket{{{lab},stage="{stage}",le="0.001"}} 0.0')
        out.append(f'sglang:per_stage_req_latency_seconds_sum{{{lab},stage="{stage}"}} {seconds}')
        out.append(f'sglang:per_stage_req_latency_seconds_count{{{lab},stage="{stage}"}} {float(n)}')
    out.append(f'sglang:per_stage_req_latency_seconds_count{{{lab},stage="prefill_bootstrap"}} {float(n)}')
    return "\n".join(out) + "\n"


def test_two_prefill_servers_stages_sum_and_split_the_level():
    with metrics_server(stage_metrics(1.5, 0.25, 10)) as a, metrics_server(stage_metrics(0.5, 0.75, 10)) as b:
        total, why = pd_counters([a.url, b.url])
    assert why is None
    assert total == {"prefill_s": 2.0, "prefill_n": 20.0, "transfer_s": 1.0, "transfer_n": 20.0}
    before = {"prefill_s": 1.0, "prefill_n": 10.0, "transfer_s": 0.5, "transfer_n": 10.0}
    out = ttft_split(before, total)
    # 10 requests in the level: 1 s of prefill and 0.5 s of transfer between them
    assert out["ttft_prefill_ms"] == 100.0 and out["ttft_transfer_ms"] == 50.0
    assert out["ttft_split"]["measured"] and out["ttft_split"]["requests"] == 10
    assert 'stage="prefill_transfer_kv_cache"' in out["ttft_split"]["source"]


def test_a_server_without_the_stages_leaves_the_split_null_and_says_why():
    lab = '{model_name="m",tp_rank="0"}'
    with metrics_server(f"sglang:num_running_reqs{lab} 3.0\n") as old:
        total, why = pd_counters([old.url])
    assert total is None and 'per_stage_req_latency_seconds_sum{stage="prefill_forward"}' in why
    out = ttft_split(None, None, why)
    assert out["ttft_prefill_ms"] is None and out["ttft_transfer_ms"] is None
    assert out["ttft_split"] == {"measured": False, "why": why}


def test_a_server_that_has_served_no_pd_request_yet_counts_zero_before_the_level():
    """prometheus_client makes a stage's series at its first observation: before a server's first
    request its /metrics has none, which before a level is zero and after it a server without the split."""
    lab = '{model_name="m",tp_rank="0"}'
    with metrics_server(f"sglang:num_running_reqs{lab} 0.0\n") as fresh:
        before, why = pd_counters([fresh.url], before_first=True)
        after, why_after = pd_counters([fresh.url])
    assert why is None and before == {
        "prefill_s": 0.0,
        "prefill_n": 0.0,
        "transfer_s": 0.0,
        "transfer_n": 0.0,
    }
    assert after is None and "per_stage_req_latency_seconds" in why_after
    with metrics_server(stage_metrics(0.8, 0.2, 4)) as served:
        after, _ = pd_counters([served.url])
    out = ttft_split(before, after)
    assert (out["ttft_prefill_ms"], out["ttft_transfer_ms"], out["ttft_split"]["requests"]) == (
        200.0,
        50.0,
        4,
    )


def test_a_level_without_transfers_is_not_split():
    same = {"prefill_s": 1.0, "prefill_n": 10.0, "transfer_s": 0.5, "transfer_n": 10.0}
    out = ttft_split(same, dict(same))
    assert out["ttft_prefill_ms"] is None and "no request of the level" in out["ttft_split"]["why"]


def test_bad_prefill_urls_are_refused_before_any_request():
    with pytest.raises(BenchError, match="pd_prefill_urls"):
        make_config("http://127.0.0.1:1", concurrency=[1], pd_prefill_urls=["prefill:30001"])
    cfg = make_config("http://127.0.0.1:1", concurrency=[1], pd_prefill_urls=["http://127.0.0.1:2/"])
    assert cfg["pd_prefill_urls"] == ["http://127.0.0.1:2"]
