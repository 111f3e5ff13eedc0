"""A pd layout's TTFT split per level: the decode servers' counters before and after a level give
the mean prefill and KV-transfer parts; a server without them leaves both null and says why."""

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


def sim_metrics(prefill_s: float, transfer_s: float, n: int) -> str:
    lab = '{model_name="m",tp_rank="0",pp_rank="0",dp_rank="0"}'
    return (
        f"sglang:num_running_reqs{lab} 0.0\n"
        f"sglang:sim_pd_prefill_seconds_total{lab} {prefill_s}\n"
        f"sglang:sim_pd_transfer_seconds_total{lab} {transfer_s}\n"
        f"sglang:sim_pd_transfers_total{lab} {n}\n"
    )


def test_two_decode_servers_counters_sum_and_split_the_level():
    with metrics_server(sim_metrics(1.5, 0.25, 10)) as a, metrics_server(sim_metrics(0.5, 0.75, 10)) as b:
        total, why = pd_counters([a.url, b.url])
    assert why is None and total == {"prefill_s": 2.0, "transfer_s": 1.0, "transfers": 20.0}
    before = {"prefill_s": 1.0, "transfer_s": 0.5, "transfers": 10.0}
    out = ttft_split(before, total)
    # 10 requests in the level: 1 s of prefill and 0.5 s of transfer between them
    assert out["ttft_prefill_ms"] == 100.0 and out["ttft_transfer_ms"] == 50.0
    assert out["ttft_split"]["measured"] and out["ttft_split"]["requests"] == 10


def test_sglangs_own_metrics_have_no_split_and_nothing_is_invented():
    lab = '{model_name="m",tp_rank="0"}'
    with metrics_server(f"sglang:num_running_reqs{lab} 3.0\n") as real:
        total, why = pd_counters([real.url])
    assert total is None and "does not export one" in why
    out = ttft_split(None, None, why)
    assert out["ttft_prefill_ms"] is None and out["ttft_transfer_ms"] is None
    assert out["ttft_split"] == {"measured": False, "why": why}


def test_a_level_without_transfers_is_not_split():
    same = {"prefill_s": 1.0, "transfer_s": 0.5, "transfers": 10.0}
    out = ttft_split(same, dict(same))
    assert out["ttft_prefill_ms"] is None and "no request of the level" in out["ttft_split"]["why"]


def test_bad_decode_urls_are_refused_before_any_request():
    with pytest.raises(BenchError, match="pd_decode_urls"):
        make_config("http://127.0.0.1:1", concurrency=[1], pd_decode_urls=["decode:30002"])
    cfg = make_config("http://127.0.0.1:1", concurrency=[1], pd_decode_urls=["http://127.0.0.1:2/"])
    assert cfg["pd_decode_urls"] == ["http://127.0.0.1:2"]
