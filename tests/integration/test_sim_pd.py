"""The simulator acts prefill/decode disaggregation: a prefill and a decode process, the bootstrap
handshake, the KV transfer timed from the plan's bytes per token and the link, and the transfer
failures with SGLang's lines. Requests go to both servers at once with the bootstrap fields, as
sglang-router --pd-disaggregation sends them (docs/router.md)."""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request

from sglang_layouts.bench.telemetry import parse_prometheus
from sglang_layouts.gate import logclass
from sglang_layouts.speed import kv_transfer_s

from sglang_sim.launcher import SimProcess, free_port
from tests.helpers.demo import FAST_DECODE, kimi_plan

FAST = {"SGLANG_SIM_LOAD_SECONDS": "0.1", "SGLANG_SIM_WARMUP_SECONDS": "0.05", **FAST_DECODE}


def post(url: str, body: dict, timeout: float = 120.0) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def pd_request(
    prefill: SimProcess, decode: SimProcess, bootstrap: int, prompt: int, max_new: int = 4
) -> dict:
    """One request as the router sends it: the same body, with the bootstrap fields, to both."""
    body = {
        "input_ids": list(range(1, prompt + 1)),
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True},
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": bootstrap,
        "bootstrap_room": random.getrandbits(62),
    }
    out: dict = {}

    def send(name: str, sim: SimProcess) -> None:
        out[name] = post(sim.url("/generate"), body)

    threads = [
        threading.Thread(target=send, args=(n, s)) for n, s in (("prefill", prefill), ("decode", decode))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def body_e2e(got: dict) -> float:
    return got["decode"][1]["meta_info"]["e2e_latency"]


def servers(prefill_env: dict | None = None, decode_env: dict | None = None, tp: int = 8):
    bootstrap = free_port()
    common = ["--tp-size", str(tp)]
    prefill = SimProcess(
        [*common, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bootstrap)],
        env={**FAST, **(prefill_env or {})},
    )
    decode = SimProcess([*common, "--disaggregation-mode", "decode"], env={**FAST, **(decode_env or {})})
    return bootstrap, prefill, decode


def test_a_request_is_prefilled_transferred_and_decoded():
    """The decode server answers with every token; the prefill server only prefills (one token); the
    first token waits for the KV transfer: the plan's bytes per token x prompt tokens / the link."""
    link_gbs = 0.05  # a slow link, so that the transfer dominates the first token
    bootstrap, prefill, decode = servers({"SGLANG_SIM_KV_LINK_GBS": str(link_gbs)})
    prefill.argv.append("--enable-metrics")
    with prefill, decode:
        prefill.wait_ready()
        decode.wait_ready()
        with urllib.request.urlopen(f"http://127.0.0.1:{bootstrap}/health", timeout=30) as r:
            assert r.status == 200  # the prefill's bootstrap server
        # as prometheus_client: no stage series before the first observation
        with urllib.request.urlopen(prefill.url("/metrics"), timeout=30) as r:
            assert "per_stage_req_latency_seconds_count{" not in r.read().decode()
        prompt = 2000
        got = pd_request(prefill, decode, bootstrap, prompt, max_new=5)
        with urllib.request.urlopen(prefill.url("/metrics"), timeout=30) as r:
            metrics = r.read().decode()
        prefill.wait_for_line(f"#new-token: {prompt}")  # as read by the log's reader, not raced
        prefill_text, decode_text = prefill.text, decode.text
    _, plan = kimi_plan(tp=8)
    transfer = kv_transfer_s(plan["kv_bytes_per_token"], prompt, link_gbs)
    assert transfer > 0.5, transfer  # the test's premise: a transfer long enough to see
    status, body = got["decode"]
    assert status == 200 and body["meta_info"]["completion_tokens"] == 5, body
    # the decode server's first token came after the transfer (its arrival is the request's)
    assert body["meta_info"]["e2e_latency"] >= transfer
    status, body = got["prefill"]
    assert status == 200 and body["meta_info"]["completion_tokens"] == 1, body
    # the prefill server's metrics, as SGLang's: one request's prefill and its transfer as timed
    stages = {
        (name, labels["stage"]): value
        for name, series in parse_prometheus(metrics).items()
        for labels, value in series
        if name.startswith("sglang:per_stage_req_latency_seconds")
    }
    assert stages[("sglang:per_stage_req_latency_seconds_count", "prefill_transfer_kv_cache")] == 1
    assert stages[("sglang:per_stage_req_latency_seconds_count", "prefill_forward")] == 1
    # the stage holds the transfer and any wait for the link (none here: one request), and ends
    # before the prefill server answers
    transfer_stage = stages[("sglang:per_stage_req_latency_seconds_sum", "prefill_transfer_kv_cache")]
    assert transfer * (1 - 1e-3) <= transfer_stage <= body_e2e(got)
    assert 0 < stages[("sglang:per_stage_req_latency_seconds_sum", "prefill_forward")] < body_e2e(got)
    # the prefill server prefilled the prompt; the decode server did not prefill it again
    assert f"#new-token: {prompt}" in prefill_text
    assert f"#new-token: {prompt}" not in decode_text


def test_a_request_without_a_bootstrap_room_is_refused():
    _, prefill, _ = servers()
    with prefill:
        prefill.wait_ready()
        status, body = post(
            prefill.url("/generate"), {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}
        )
    assert status == 400 and "bootstrap room" in body["error"]["message"]


def test_transfer_error_fails_both_sides_with_sglangs_lines():
    bootstrap, prefill, decode = servers({"SGLANG_SIM_FAULT": "transfer_error_after:1"})
    with prefill, decode:
        prefill.wait_ready()
        decode.wait_ready()
        first = pd_request(prefill, decode, bootstrap, 16)
        second = pd_request(prefill, decode, bootstrap, 16)
        prefill.wait_for_line("Prefill transfer failed")
        decode.wait_for_line("Decode transfer failed")
        p_text, d_text = prefill.text, decode.text
    assert first["decode"][0] == 200  # the fault starts after one finished request
    assert second["prefill"][0] == 500 and second["decode"][0] == 500
    assert "Decode instance could be dead, remote mooncake session" in p_text
    assert "Failed to get kvcache from prefill instance, it might be dead" in d_text
    assert "Prefill transfer failed" in second["prefill"][1]["error"]["message"]
    for text in (p_text, d_text):
        m = logclass.classify(text.splitlines())
        assert m is not None and m.cls == "kv_transfer_failed", (m, text[-2000:])


def test_bootstrap_timeout_then_decode_waiting_timeout():
    """The decode's handshake never reaches the prefill server: it gives the request up after
    SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, the decode server after ..._WAITING_TIMEOUT."""
    env = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "0.5", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "1"}
    bootstrap, prefill, decode = servers({**env, "SGLANG_SIM_FAULT": "bootstrap_timeout_after:0"}, env)
    with prefill, decode:
        prefill.wait_ready()
        decode.wait_ready()
        got = pd_request(prefill, decode, bootstrap, 16)
        # a server logs its failure as it answers: the line may reach the reader after the answer
        prefill.wait_for_line("in KVPoll.Bootstrapping")
        decode.wait_for_line("in KVPoll.WaitingForInput")
        p_text, d_text = prefill.text, decode.text
    assert got["prefill"][0] == 500 and got["decode"][0] == 500
    assert "timed out after 0.5s in KVPoll.Bootstrapping" in p_text
    assert "export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600" in p_text
    assert "in KVPoll.WaitingForInput" in d_text
    m = logclass.classify(p_text.splitlines())
    assert m is not None and m.cls == "kv_bootstrap_timeout", m
    m = logclass.classify(d_text.splitlines())
    assert m is not None and m.cls == "kv_transfer_timeout", m


def test_sglangs_placeholder_bootstrap_host_is_served_by_one_server_alone():
    """SGLang's warm-up and health probes (and the gate's confirmation) carry bootstrap_host 2.2.2.2:
    each server answers them alone, with no peer and no transfer."""
    _, prefill, decode = servers()
    body = {
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 3, "ignore_eos": True},
        "bootstrap_host": "2.2.2.2",
        "bootstrap_room": 0,
    }
    with prefill, decode:
        prefill.wait_ready()
        decode.wait_ready()
        p_status, p_body = post(prefill.url("/generate"), body)
        d_status, d_body = post(decode.url("/generate"), body)
        d_text = decode.text
    assert p_status == 200 and d_status == 200, (p_body, d_body)
    assert d_body["meta_info"]["completion_tokens"] == 3
    assert "#new-token: 3," not in d_text  # the decode server prefills nothing of its own
