"""Levels measure the warm engine: the per-level warm-up, the progress gap and the stall rule.

The end-to-end tests run the load generator against the fake server of tests/helpers/bench_server.py
with compile_s: it stops every stream for seconds the first time it meets a batch size, as an engine that
compiles a kernel per batch shape does. The stall (3 s) is huge next to the fake's millisecond steps and
the rule's floor (1 s) sits far from both, so no verdict depends on the machine's speed."""

from __future__ import annotations

import pytest
from sglang_layouts.bench import common, loadgen
from sglang_layouts.bench import stall as bench_stall

from tests.helpers.bench_server import FakeServer

COMPILE_S = 3.0
FLOOR_S = 1.0


def _cfg(url, levels, **kw):
    return loadgen.make_config(
        url,
        concurrency=levels,
        input_len=8,
        output_len=10,
        stall_min_s=FLOOR_S,
        # a 3 s stall at c=4 stays past the limit unless c=1 (millisecond steps) paused for 0.5 s: the
        # default factor (4) would let a 0.19 s pause of a loaded machine at c=1 explain it away
        **{"stall_factor": 1.5, **kw},
    )


def _req(t_start, ttft, itl, ok=True):
    t_end = t_start + ttft + sum(itl)
    return {"ok": ok, "t_start": t_start, "t_end": t_end, "ttft": ttft, "itl": itl}


def test_progress_gap_is_the_longest_silence_while_requests_are_in_flight():
    a = _req(0.0, 0.1, [0.01] * 5)  # tokens 0.10 .. 0.15
    b = _req(0.05, 0.2, [0.01, 2.0, 0.01])  # tokens 0.25, 0.26, 2.26, 2.27: 2 s with nothing else in flight
    gap, at = bench_stall.progress_gap([a, b])
    assert gap == pytest.approx(2000.0) and at == pytest.approx(0.26)
    # idle time between requests (an open loop at a low rate) is no silence of the server's
    c = _req(10.0, 0.3, [0.01])
    assert bench_stall.progress_gap([a, c]) == (pytest.approx(300.0), pytest.approx(10.0))
    # failed requests are left out, as from every other figure
    assert bench_stall.progress_gap([_req(0.0, 5.0, [], ok=False), a])[0] == pytest.approx(100.0)
    assert bench_stall.progress_gap([]) == (None, None)


def _level(c, ttft_p50, gap, itl_p90=40.0, itl_p99=120.0):
    return {
        "mode": "concurrency",
        "concurrency": c,
        "completed": 4 * c,
        "ttft_ms": dict(common.stats([ttft_p50]), p50=ttft_p50),
        "itl_ms": {"mean": 30.0, "p50": 30.0, "p90": itl_p90, "p99": itl_p99},
        "progress_gap_ms": gap,
        "progress_gap_at_s": 0.0,
    }


def test_the_issues_level_is_a_stall_and_a_long_prefill_is_not():
    # issue #28: c=16 of an MLA + MoE model, TTFT p50 5.7 s, 11 s before the batch's first prefill
    c8 = _level(8, 250.0, 600.0)
    c16 = _level(16, 5700.0, 11000.0)
    v = bench_stall.stall_verdict(c16, bench_stall.neighbour_below([_level(1, 80.0, 90.0), c8], c16), 48)
    assert v["detected"] and len(v["reasons"]) == 2
    assert "no output on any stream for 11.0 s" in v["reasons"][0] and "TTFT p50 5.7 s" in v["reasons"][1]
    # a long batch prefill grows with the batch: 64 prompts take twice what 32 took
    c32, c64 = _level(32, 900.0, 6000.0), _level(64, 1800.0, 12000.0)
    assert bench_stall.stall_verdict(c64, c32, 128)["detected"] is False
    # a queue explains a TTFT: above max_running_requests the TTFT rule holds back
    c64q = _level(64, 9000.0, 1000.0)
    assert bench_stall.stall_verdict(c64q, c32, 128)["detected"] is True
    assert bench_stall.stall_verdict(c64q, c32, 48) == {
        "detected": False,
        "reasons": [],
        "gap_limit_ms": 4 * 6000.0 * 2,
        "ttft_limit_ms": None,
        "ttft_above_limit_ms": None,
        "wave_limit_ms": None,
    }
    # nothing shorter than the floor is a stall
    assert bench_stall.stall_verdict(_level(4, 10.0, 1900.0), None)["detected"] is False
    assert bench_stall.stall_verdict(_level(4, 10.0, 2100.0), None)["detected"] is True


def test_with_the_level_warm_up_a_compiling_server_is_measured_warm():
    # 30 ms steps: a warm-up request lasts 0.3 s, so its four requests sent at once are all in flight
    # together (batch 4 met in the warm-up) even when a loaded machine starts their threads apart
    with FakeServer(step_s=0.03, first_s=0.01, compile_s=COMPILE_S) as srv:
        cfg = _cfg(srv.url, [1, 4])
        lines = []
        out = loadgen.run_benchmark(cfg, progress=lines.append, keep_requests=True)
        pauses = list(srv.state.pauses)
        arrivals = {e["rid"]: e["arrival"] for e in srv.settled()}
    lv1, lv4 = out["levels"]
    # the warm-up made the new batch sizes (2, 3, 4): the server compiled then, before c=4's measurement
    assert sorted(p["batch"] for p in pauses) == [2, 3, 4]
    assert all("-l1-w" in p["rid"] for p in pauses)
    first_measured = min(arrivals[r["rid"]] for r in lv4["requests"])
    assert all(p["at"] + p["seconds"] < first_measured for p in pauses)
    assert lv4["warmup"]["requests"] == lv4["warmup"]["at_once"] == 4
    assert lv4["warmup"]["seconds"] >= COMPILE_S and lv4["warmup"]["cut"] is False
    # the first wave: each stream's first request (the four sent at once)
    firsts = {}
    for r in sorted(lv4["requests"], key=lambda r: r["t_start"]):
        firsts.setdefault(r["worker"], r["ttft_ms"])
    middle = sorted(firsts.values())[1:3]
    assert len(firsts) == 4 and lv4["first_wave_ttft_ms"] == pytest.approx(sum(middle) / 2)
    for lv in (lv1, lv4):
        assert lv["stall"]["detected"] is False and lv["progress_gap_ms"] < 1000 * FLOOR_S
    assert out["summary"]["stalled_levels"] == []
    assert not any("stalled" in ln for ln in lines)


def test_without_the_warm_up_the_stall_is_caught_marked_and_measured_again():
    with FakeServer(step_s=0.005, first_s=0.01, compile_s=COMPILE_S) as srv:
        cfg = _cfg(srv.url, [1, 4], warmup=0)
        lines = []
        out = loadgen.run_benchmark(cfg, progress=lines.append, keep_requests=True)
        pauses = list(srv.state.pauses)
    lv1, lv4 = out["levels"]
    assert lv1["stall"]["detected"] is False and lv1["warmup"] is None
    # the measured requests met batch sizes 2..4 first: the server stopped every stream for 3 s
    assert sorted(p["batch"] for p in pauses) == [2, 3, 4] and all("-l1-r" in p["rid"] for p in pauses)
    stall = lv4["stall"]
    assert stall["detected"] is True and stall["persisted"] is False and stall["reasons_again"] == []
    assert "no output on any stream" in stall["reasons"][0]
    first = stall["first"]
    assert first["progress_gap_ms"] >= 1000 * (COMPILE_S - 0.5) > stall["gap_limit_ms"]
    # the level's figures are the second measurement's: its own requests, no stall in them
    assert lv4["progress_gap_ms"] < 1000 * FLOOR_S
    assert first["duration_s"] > COMPILE_S > lv4["duration_s"]
    assert first["output_tok_s"] < lv4["output_tok_s"]
    assert all("-l1a2-r" in r["rid"] for r in lv4["requests"]) and lv4["completed"] == 16
    assert all("-l1-r" in r["rid"] for r in first["requests"])
    assert out["summary"]["peak_output_tok_s"] == max(lv1["output_tok_s"], lv4["output_tok_s"])
    assert out["summary"]["stalled_levels"] == [
        {"mode": "concurrency", "concurrency": 4, "request_rate": None, "persisted": False}
    ]
    assert any("first measurement stalled" in w for w in out["summary"]["warnings"])
    # the progress file says so, and the playbook's "level c=4 done" line comes once, after the second
    assert [ln.split(":")[0] for ln in lines] == [
        "level c=1 start",
        "level c=1 done",
        "level c=4 start",
        "level c=4 stalled",
        "level c=4 again",
        "level c=4 done",
        "bench finished",
    ]


@pytest.mark.parametrize("persists", [False, True])
def test_a_stall_inside_a_warm_level_is_caught_and_a_repeated_one_said_so(persists):
    """A one-off pause in the measured level (after a clean warm-up); when the second measurement pauses
    too, the level's own behaviour, not a cold server, and the record says so."""
    with FakeServer(step_s=0.005, first_s=0.01, compile_s=COMPILE_S, compiled=range(1, 9)) as srv:
        cfg = _cfg(srv.url, [4])
        srv.state.stall_rids = ("-r6",) if persists else (f"{cfg['rid_prefix']}-l0-r6",)
        out = loadgen.run_benchmark(cfg)
    (lv,) = out["levels"]
    assert lv["stall"]["detected"] is True and lv["stall"]["persisted"] is persists
    assert lv["stall"]["first"]["progress_gap_ms"] >= 1000 * (COMPILE_S - 0.5)
    assert (lv["progress_gap_ms"] >= 1000 * (COMPILE_S - 0.5)) is persists
    # after a first wave of milliseconds, the fourth rule's limit is the floor: it finds the pause too
    assert lv["stall"]["first"]["first_wave_ttft_ms"] < 1000 * FLOOR_S == lv["stall"]["wave_limit_ms"]
    assert any("level's first wave of prompts" in r for r in lv["stall"]["reasons"])
    assert any("stalled again" in w for w in lv["warnings"]) is persists


def test_stall_check_off_and_bad_settings():
    with FakeServer(step_s=0.005, first_s=0.01, compile_s=COMPILE_S) as srv:
        out = loadgen.run_benchmark(_cfg(srv.url, [2], warmup=0, stall_check=False))
    (lv,) = out["levels"]
    assert lv["stall"] is None and lv["progress_gap_ms"] >= 1000 * (COMPILE_S - 0.5)
    for kw, needle in (
        ({"stall_min_s": 0}, "stall_min_s"),
        ({"stall_factor": 0.5}, "stall_factor"),
        ({"level_warmup_timeout": 0}, "level_warmup_timeout"),
    ):
        with pytest.raises(loadgen.BenchError, match=needle):
            loadgen.make_config("http://127.0.0.1:1", **kw)


def test_the_warm_up_is_cut_at_its_time_bound_and_says_so():
    with FakeServer(step_s=0.005, first_s=0.01, compile_s=COMPILE_S) as srv:
        out = loadgen.run_benchmark(_cfg(srv.url, [2], level_warmup_timeout=0.5, stall_check=False))
    (lv,) = out["levels"]
    w = lv["warmup"]
    assert w["cut"] is True and w["timed_out"] == 2 and w["limit_s"] == 0.5
    assert any("warm-up was cut" in x for x in lv["warnings"])
    assert lv["completed"] == 8  # the level itself still ran


def test_the_report_shows_a_stalled_level_with_both_figures_and_ranks_by_the_second(tmp_path):
    from sglang_layouts.report import compare

    from tests.helpers.records import level, store

    c16 = dict(level(16, 1400.0, 90.0, 300.0), mode="concurrency", request_rate=None)
    c16["stall"] = {
        "detected": True,
        "reasons": ["no output on any stream for 11.0 s with requests in flight"],
        "gap_limit_ms": 4800.0,
        "ttft_limit_ms": 2000.0,
        "ttft_above_limit_ms": None,
        "first": dict(level(16, 508.9, 40.0, 5700.0), mode="concurrency", request_rate=None),
        "persisted": False,
        "reasons_again": [],
    }
    levels = [level(1, 248.5, 248.5, 80.0), level(8, 1300.0, 160.0, 250.0), c16]
    store(str(tmp_path), "run1", "h200", "ep8", levels, plan={"verdict": "fits"}, engine="sglang")
    other = [level(1, 200.0, 200.0, 90.0), level(16, 1350.0, 80, 320.0)]
    store(str(tmp_path), "run1", "h200", "tp8", other, plan={"verdict": "fits"}, engine="sglang")
    out = compare.build_report(str(tmp_path), "run1", plots=False)
    md = out["markdown"]
    assert "Levels measured again after a stall" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("- ep8") and "c=16" in ln)
    assert "first 508.9 tok/s, TTFT p50 5700.0 ms" in line and "measured again 1400.0 tok/s" in line
    assert "11.0 s" in line and "stalled again" not in line
    # the winner is ranked by the second measurement (1400 > 1350), not the stalled one (508.9)
    assert out["winners"]["peak_throughput"]["layout"] == "ep8"
    assert out["winners"]["peak_throughput"]["value"] == 1400.0


GPT_OSS = "benchmarks/results/h200-2026-12-04b/h200i-gpt-oss-120b/gpu-host/tp1.json"


def _record_levels(path):
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[2] / path).read_text())
    mrr = ((rec.get("health") or {}).get("server_args") or {}).get("max_running_requests")
    return [lv for lv in rec["levels"] if lv.get("completed")], mrr


def _verdicts(levels, mrr):
    return [
        bench_stall.stall_verdict(
            lv,
            bench_stall.neighbour_below(levels[:i], lv),
            mrr,
            above=bench_stall.neighbour_above(levels[:i] + levels[i + 1 :], lv),
        )
        for i, lv in enumerate(levels)
    ]


def test_a_ttft_far_beyond_a_heavier_levels_is_a_stall():
    """Lease 2026-12-04b, gpt-oss-120b c16: TTFT p50 2,951 ms against 507 ms at c64 (4x the load, no queue
    at max_running_requests 64) and 112 ms at c1; its 5.6 s pause was under the rule's limit from c1
    (154 ms x 16 x 4), and its TTFT under 4 x 112 ms x 16: only the level above shows it."""
    levels, mrr = _record_levels(GPT_OSS)
    assert [lv["concurrency"] for lv in levels] == [1, 16, 64] and mrr == 64
    c1, c16, c64 = _verdicts(levels, mrr)
    assert c1["detected"] is False and c64["detected"] is False
    assert c16["detected"] is True and len(c16["reasons"]) == 1
    assert "TTFT p50 3.0 s against 0.51 s at the heavier concurrency 64" in c16["reasons"][0]
    assert c16["ttft_above_limit_ms"] == pytest.approx(4 * levels[2]["ttft_ms"]["p50"])
    # without the level above, the two rules of the sweep let it pass (what the record says)
    assert bench_stall.stall_verdict(levels[1], levels[0], mrr)["detected"] is False
    assert levels[1]["stall"]["detected"] is False
    # a queue explains a TTFT: a level above max_running_requests is not held to a lighter one's
    assert bench_stall.stall_verdict(levels[1], None, 8, above=levels[2])["detected"] is False


def test_the_first_wave_is_each_streams_first_request_where_it_completed():
    results = [
        dict(_req(0.00, 0.30, [0.01]), worker=0),
        dict(_req(0.00, 0.50, [0.01]), worker=1),
        dict(
            _req(0.01, 9.00, [0.01], ok=False), worker=2
        ),  # stream 2's first failed: no first wave of its own
        dict(_req(0.40, 4.00, [0.01]), worker=0),  # stream 0's second: not the first wave
        dict(_req(9.50, 0.20, [0.01]), worker=2),
    ]
    assert bench_stall.first_wave_ttft_ms(results) == pytest.approx(400.0)
    assert bench_stall.first_wave_ttft_ms([results[2]]) is None
    assert bench_stall.first_wave_ttft_ms([]) is None


STALLED_C16 = "benchmarks/results/h100-2026-12-07f/h100r-gpt-oss-120b/gpu-host/tp1-b.json"


@pytest.mark.parametrize(("first_wave_ms", "caught"), [(300.0, True), (1390.0, True), (1400.0, False)])
def test_a_pause_after_the_first_wave_is_a_stall(first_wave_ms, caught):
    """Lease h100-2026-12-07f, gpt-oss-120b c16 (tp1-b): after the first 16 requests the server logged no
    prefill for 6 s with 16 requests in flight (progress gap 5,575 ms, TTFT p50 2.9 s); the rules of the
    sweep let it pass (4 x c1's 104 ms gap x 16 = 6,658 ms; 4 x 92 ms x 16 = 5,880 ms). The record holds no
    first-wave TTFT (it predates the figure): whatever it was below 5,575 / 4 ms, the fourth rule finds it."""
    levels, mrr = _record_levels(STALLED_C16)
    c1, c16 = levels
    assert [c1["concurrency"], c16["concurrency"], mrr] == [1, 16, 64]
    assert bench_stall.stall_verdict(c16, c1, mrr)["detected"] is False and c16["stall"]["detected"] is False
    v = bench_stall.stall_verdict(dict(c16, first_wave_ttft_ms=first_wave_ms), c1, mrr)
    assert v["detected"] is caught and v["wave_limit_ms"] == pytest.approx(max(2000.0, 4 * first_wave_ms))
    if caught:
        assert v["reasons"] == [
            f"no output on any stream for 5.6 s against {first_wave_ms / 1000:.2f} s for the level's first "
            f"wave of prompts, its largest prefill (limit {max(2.0, 4 * first_wave_ms / 1000):.1f} s)"
        ]
    # a queue explains a pause too: above max_running_requests the rule holds back
    assert bench_stall.stall_verdict(dict(c16, first_wave_ttft_ms=first_wave_ms), c1, 8)["detected"] is False


def test_no_level_of_the_qwen3_and_kimi_records_is_called_stalled():
    """Every level of every Qwen3 and Kimi record under benchmarks/results/: the three rules together
    find nothing the sweep's two did not."""
    import glob
    import json
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    checked = 0
    for path in sorted(glob.glob(str(repo / "benchmarks/results/**/*.json"), recursive=True)):
        try:
            rec = json.loads(Path(path).read_text())
        except ValueError:
            continue
        if not isinstance(rec, dict) or not rec.get("levels"):
            continue
        model = ((rec.get("health") or {}).get("model_info") or {}).get("model_path") or ""
        if not any(m in model.lower() for m in ("qwen3", "kimi")) or "next" in model.lower():
            continue
        levels = [lv for lv in rec["levels"] if lv.get("completed") and lv.get("ttft_ms")]
        mrr = ((rec.get("health") or {}).get("server_args") or {}).get("max_running_requests")
        for lv, v in zip(levels, _verdicts(levels, mrr), strict=True):
            assert v["detected"] is bool((lv.get("stall") or {}).get("detected")), (
                path,
                lv["concurrency"],
                v,
            )
            checked += 1
    assert checked >= 40


def test_after_the_sweep_a_level_slower_to_first_token_than_a_heavier_one_is_measured_again():
    """loadgen.recheck_against_above over real levels: the stalled one is measured once more, both kept."""
    with FakeServer(step_s=0.005, first_s=0.01, compile_s=COMPILE_S, compiled=range(1, 9)) as srv:
        cfg = _cfg(srv.url, [1, 2, 4])
        lines = []
        out = loadgen.run_benchmark(cfg, progress=lines.append)
        levels = out["levels"]
        assert all(lv["stall"]["detected"] is False for lv in levels)
        # the c=2 level as the record of issue #28 had it: its first tokens 5 s late, far past c=4's
        slow = dict(levels[1], ttft_ms=dict(levels[1]["ttft_ms"], p50=5000.0))
        levels[1] = slow
        loadgen.recheck_against_above(
            cfg, loadgen.level_specs(cfg), levels, {"max_running_requests": 8}, lines.append
        )
    again = levels[1]
    assert again["stall"]["detected"] is True and again["stall"]["persisted"] is False
    assert any("heavier concurrency 4" in r for r in again["stall"]["reasons"])
    assert again["stall"]["first"]["ttft_ms"]["p50"] == 5000.0 and again["ttft_ms"]["p50"] < 1000 * FLOOR_S
    assert levels[0]["stall"]["detected"] is False and levels[2]["stall"]["detected"] is False
    assert [ln.split(":")[0] for ln in lines[-3:]] == [
        "level c=2 stalled",
        "level c=2 again",
        "level c=2 done",
    ]
