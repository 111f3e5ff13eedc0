"""library/sglang_bench.py run by ansible-core itself, and sglang_result as the sweeps call it (its action
plugin, on the controller).

The load generator runs under the host's bare /usr/bin/python3 (no aiohttp) against a real
loopback server; check mode sends nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.helpers import ansible_module
from tests.helpers.bench_server import FakeServer

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = Path(sys.executable).with_name("ansible")
HOST_PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

pytestmark = pytest.mark.skipif(
    not ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)


def run_module(tmp_path, module, args: dict, python=HOST_PY, check=False):
    return ansible_module.run_module(tmp_path, module, args, python, ["--check"] if check else [])


def bench_ok(tmp_path, srv, **args):
    """sglang_bench against srv (concurrency 1 and 2 unless args say otherwise): the module's answer and
    its facts, once it has not failed."""
    res = run_module(tmp_path, "sglang_bench", {"url": srv.url, "concurrency": [1, 2], **args})
    assert not res.get("failed"), res
    return res, res["ansible_facts"]["sglang_bench"]


def test_module_measures_under_the_bare_host_python(tmp_path):
    progress = tmp_path / "p" / "bench.progress"
    with FakeServer(step_s=0.02, first_s=0.01) as srv:
        res, b = bench_ok(
            tmp_path,
            srv,
            input_len=16,
            output_len=4,
            prompts_per_stream=2,
            min_prompts=2,
            api_key="s3cret-key",
            progress_file=str(progress),
        )
    assert [lv["concurrency"] for lv in b["levels"]] == [1, 2]
    assert [lv["completed"] for lv in b["levels"]] == [2, 4]
    assert set(b["levels"][0]["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
    assert b["summary"]["peak_concurrency"] in (1, 2)
    # decode speed needs tokens read at different moments: a client descheduled for a whole
    # request reads its tokens in one receive, and the module then says so instead of a speed
    single = b["summary"]["single_request_tok_s"]
    one_chunk = [w for w in b["levels"][0]["warnings"] if "in one chunk" in w]
    assert (single is not None and single > 0) or (single is None and one_chunk), b["levels"][0]
    assert b["config"]["api_key_set"] is True and "s3cret-key" not in json.dumps(res)
    assert set(b["formulas"]) >= {
        "ttft_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "output_tok_s",
        "achieved_concurrency",
    }
    lines = progress.read_text().splitlines()
    assert [ln.split(" ", 1)[1].split(":")[0] for ln in lines] == [
        "level c=1 start",
        "level c=1 done",
        "level c=2 start",
        "level c=2 done",
        "bench finished",
    ]


def test_check_mode_sends_nothing(tmp_path):
    with FakeServer() as srv:
        res = run_module(tmp_path, "sglang_bench", {"url": srv.url, "concurrency": [1]}, check=True)
        assert srv.state.count == 0 and srv.state.flushes == 0
    assert not res.get("failed"), res
    assert "no request sent" in res["msg"]
    assert res["ansible_facts"]["sglang_bench"]["config"]["num_prompts"] == [8]


def test_unreachable_server_fails_with_a_class(tmp_path):
    res = run_module(tmp_path, "sglang_bench", {"url": "http://127.0.0.1:9", "concurrency": [1]})
    assert res["failed"] and res["failure_class"] == "bench_unreachable" and "not reachable" in res["msg"]


def test_a_server_that_dies_before_any_answer_is_a_death_not_all_failed(tmp_path):
    # the H200's Kimi rank shard: its first prefill (the warm-up) killed the engine, so no request
    # ever completed; the role's server-died path must get the summary, then the check's class
    with FakeServer(dead_after=1) as srv:
        res = run_module(tmp_path, "sglang_bench", {"url": srv.url, "concurrency": [1, 4]})
    assert not res.get("failed"), res
    b = res["ansible_facts"]["sglang_bench"]
    assert [lv["concurrency"] for lv in b["levels"]] == [1]  # stopped where it died
    assert b["summary"]["completed"] == 0 and b["summary"]["server_died"]["concurrency"] == 1


def test_result_module_stores_queries_and_never_overwrites(tmp_path):
    rd = str(tmp_path / "results")
    base = {"results_dir": rd, "run_id": "r1", "host": "h", "layout": "tp8"}
    q = run_module(tmp_path, "sglang_result", {**base, "state": "query"}, python=sys.executable)
    assert q["exists"] is False
    s1 = run_module(
        tmp_path,
        "sglang_result",
        {
            **base,
            "status": "skipped",
            "failure_class": "oom",
            "plan": {"verdict": "oom", "reasons": ["too big"]},
        },
        python=sys.executable,
    )
    assert s1["changed"] and s1["path"].endswith("r1/h/tp8.json") and s1["attempt"] == 1
    s2 = run_module(tmp_path, "sglang_result", {**base, "status": "failed"}, python=sys.executable)
    assert s2["path"].endswith("r1/h/tp8.attempt2.json")
    assert json.loads(Path(s1["path"]).read_text())["status"] == "skipped"
    q = run_module(tmp_path, "sglang_result", {**base, "state": "query"}, python=sys.executable)
    assert (q["exists"], q["attempts"], q["status"]) == (True, [1, 2], "failed")
    latest = run_module(tmp_path, "sglang_result", {**base, "state": "latest"}, python=sys.executable)
    assert latest["changed"] and os.readlink(Path(rd) / "latest") == "r1"


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"request_rates": [0]}, "> 0"),
        ({"request_rates": [1], "slo": {"ttft_p95": 10}}, "slo key 'ttft_p95' does not exist"),
        ({"stall_factor": 0.5}, "stall_factor must be a number >= 1"),
    ],
)
def test_bad_rate_or_slo_fails_before_any_request(tmp_path, extra, needle):
    with FakeServer() as srv:
        res = run_module(tmp_path, "sglang_bench", {"url": srv.url, "concurrency": [1], **extra})
        assert srv.state.count == 0 and srv.state.flushes == 0
    assert res["failed"] and res["failure_class"] == "bench_config" and needle in res["msg"]


def test_rate_ladder_through_the_module(tmp_path):
    with FakeServer(step_s=0.002, first_s=0.005) as srv:
        _, b = bench_ok(
            tmp_path,
            srv,
            concurrency=[],
            request_rates=[50, "inf"],
            num_prompts=4,
            input_len=4,
            output_len=3,
            warmup=0,
            slo={"ttft_p99_ms": 5000},
            progress_file=str(tmp_path / "p.progress"),
        )
    levels = b["levels"]
    assert [lv["request_rate"] for lv in levels] == [50.0, "inf"]
    assert all(lv["slo_met"] is True and lv["goodput_tok_s"] > 0 and "telemetry" in lv for lv in levels)
    # inf (all at once) is a burst, not a sustained rate: the highest finite rate that met counts
    assert b["summary"]["slo_max_rate"] == 50.0


def test_a_stalled_level_through_the_module_is_measured_again_and_warned(tmp_path):
    """A server that compiles (3 s, every stream stopped) on a batch size it has not met, no warm-up:
    the module marks c=2, measures it again and says so in its warnings and its progress file."""
    progress = tmp_path / "p.progress"
    # 4 s of compile at c=2 is a stall unless c=1 paused for 1.3 s (factor 1.5): no machine's load decides it
    with FakeServer(step_s=0.005, first_s=0.01, compile_s=4.0) as srv:
        res, b = bench_ok(
            tmp_path,
            srv,
            num_prompts=6,
            input_len=4,
            output_len=10,
            warmup=0,
            stall_min_s=1.0,
            stall_factor=1.5,
            progress_file=str(progress),
        )
    lv = b["levels"][1]
    assert lv["stall"]["detected"] is True and lv["stall"]["first"]["progress_gap_ms"] >= 3500
    assert lv["progress_gap_ms"] < 2000
    assert b["summary"]["stalled_levels"] == [
        {"mode": "concurrency", "concurrency": 2, "request_rate": None, "persisted": False}
    ]
    assert any("first measurement stalled" in w for w in res.get("warnings", []))
    lines = [ln.split(" ", 1)[1].split(":")[0] for ln in progress.read_text().splitlines()]
    assert lines[2:] == [
        "level c=2 start",
        "level c=2 stalled",
        "level c=2 again",
        "level c=2 done",
        "bench finished",
    ]
