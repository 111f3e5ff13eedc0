"""Reports of runs with request rates, an SLO and a GPU-hour cost; old records still load."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sglang_layouts.bench import loadgen
from sglang_layouts.bench import slo as bench_slo
from sglang_layouts.report import compare, results

SLO = {"ttft_p99_ms": 2000.0, "itl_p99_ms": 50.0}


def _lv(rate, tok, ttft_p99, met, goodput, mode="rate", concurrency=None):
    st = {"mean": ttft_p99 / 2, "p50": ttft_p99 / 2, "p90": ttft_p99, "p99": ttft_p99}
    return {
        "mode": mode,
        "concurrency": concurrency,
        "request_rate": rate,
        "completed": 10,
        "failed": 0,
        "output_tok_s": tok,
        "request_s": tok / 100,
        "decode_tok_s": {"mean": 20.0, "p50": 20.0, "p90": 20.0, "p99": 20.0},
        "ttft_ms": st,
        "warnings": [],
        "goodput_tok_s": goodput,
        "goodput_req_s": goodput / 100,
        "slo_met": met,
        "slo": {"thresholds": SLO, "observed": {}, "met": {}, "good": 1, "error_rate": 0.0},
        "telemetry": {"interval_s": 1.0, "server": {"available": False}, "gpu": "absent"},
    }


def _store(rd, layout, gpus, levels, engine="sglang", cost=2.5, run="slo"):
    summary = loadgen.summarize(levels)
    rec = results.build_record(
        run,
        "h200",
        layout,
        "ok",
        engine=engine,
        plan={"verdict": "fits", "gpus_used": gpus},
        bench={"summary": summary, "levels": levels, "config": {}, "server": {}},
        gpu_hour_cost=cost,
    )
    results.write_record(rd, rec)
    return rec


def test_winner_under_the_slo_is_the_best_goodput_not_the_peak(tmp_path):
    rd = str(tmp_path)
    # tp8: higher peak (at a rate that misses the SLO); ep8: more goodput under the SLO
    tp8 = _store(
        rd,
        "tp8",
        8,
        [
            _lv(1.0, 200.0, 300.0, True, 200.0),
            _lv(4.0, 700.0, 1500.0, True, 650.0),
            _lv(8.0, 1200.0, 9000.0, False, 90.0),
        ],
    )
    _store(
        rd,
        "ep8",
        8,
        [
            _lv(1.0, 210.0, 250.0, True, 210.0),
            _lv(4.0, 800.0, 900.0, True, 800.0),
            _lv(8.0, 1000.0, 1800.0, True, 990.0),
        ],
    )
    assert tp8["slo_max_rate"] == 4.0
    cost = tp8["cost_per_mtok"]
    assert cost["peak"] == pytest.approx(2.5 * 8 / 3600 / 1200.0 * 1e6)
    assert cost["slo"] == pytest.approx(2.5 * 8 / 3600 / 650.0 * 1e6)
    out = compare.build_report(rd, "slo", plots=True)
    win = out["winners"]
    assert win["peak_throughput"]["layout"] == "tp8"
    assert win["goodput_under_slo"]["layout"] == "ep8" and win["goodput_under_slo"]["slo_max_rate"] == 8.0
    md = out["markdown"]
    assert "**Winner under the SLO (itl_p99_ms <= 50, ttft_p99_ms <= 2000): ep8**" in md
    assert "tp8: max rate under the SLO 4.00 req/s" in md
    assert "max rate under SLO req/s" in md and "$/1M tok under SLO" in md
    rows = {
        r["layout"]: r for r in csv.DictReader(io.StringIO((tmp_path / "slo" / "summary.csv").read_text()))
    }
    assert float(rows["tp8"]["slo_max_rate"]) == 4.0 and float(rows["ep8"]["slo_goodput_tok_s"]) == 990.0
    assert float(rows["tp8"]["cost_peak"]) == pytest.approx(cost["peak"])
    doc = json.loads((tmp_path / "slo" / "summary.json").read_text())
    assert doc["winners"]["goodput_under_slo"]["layout"] == "ep8" and "cost_per_mtok" in doc["formulas"]
    for png in ("rate_throughput.png", "rate_ttft.png", "goodput.png"):
        assert (tmp_path / "slo" / png).read_bytes()[:4] == b"\x89PNG"
        assert f"({png})" in md


def test_simulated_rows_stay_marked_and_never_win_under_the_slo(tmp_path):
    rd = str(tmp_path)
    _store(rd, "sim-ep8", 8, [_lv(8.0, 5000.0, 10.0, True, 5000.0)], engine="sim")
    _store(rd, "tp1", 1, [_lv(1.0, 30.0, 100.0, True, 30.0)], engine="vllm")
    out = compare.build_report(rd, "slo", plots=False)
    w = out["winners"]["goodput_under_slo"]
    assert w["layout"] == "tp1" and not w["simulated"]
    assert "sim-ep8 [simulated]: max rate under the SLO" in out["markdown"]


def test_no_layout_meeting_the_slo_is_said(tmp_path):
    rd = str(tmp_path)
    _store(rd, "tp8", 8, [_lv(1.0, 100.0, 9000.0, False, 0.0)])
    md = compare.build_report(rd, "slo", plots=False)["markdown"]
    assert "Winner under the SLO (itl_p99_ms <= 50, ttft_p99_ms <= 2000): none (no layout met it)" in md


def test_a_record_of_the_old_schema_still_loads(tmp_path):
    """A record as stored before rates/SLO/cost: no mode, request_rate, slo_max_rate or cost_per_mtok."""
    rd = tmp_path
    old = {
        "schema": results.SCHEMA,
        "run_id": "old",
        "host": "box",
        "layout": "tp8",
        "status": "ok",
        "simulated": False,
        "engine": "sglang",
        "gpus_used": 8,
        "summary": {"single_request_tok_s": 26.3, "peak_output_tok_s": 808.0, "peak_concurrency": 64},
        "levels": [
            {
                "concurrency": c,
                "completed": 4,
                "failed": 0,
                "output_tok_s": t,
                "decode_tok_s": {"mean": 20.0},
                "ttft_ms": {"p99": 100.0},
                "warnings": [],
            }
            for c, t in ((1, 26.3), (64, 808.0))
        ],
        "formulas": {},
        "extra": {},
    }
    (rd / "old" / "box").mkdir(parents=True)
    (rd / "old" / "box" / "tp8.json").write_text(json.dumps(old))
    out = compare.build_report(str(rd), "old", plots=True)
    assert out["winners"]["peak_throughput"]["layout"] == "tp8" and "goodput_under_slo" not in out["winners"]
    md = out["markdown"]
    assert "under SLO" not in md.split("\n\n")[1]  # no empty SLO / cost columns
    assert "rate_throughput.png" not in out["files"] and "throughput.png" in out["files"]
    row = compare.rows(results.load_run(str(rd), "old"))[0]
    assert row["slo_max_rate"] is None and row["cost_peak"] is None


def test_a_pass_above_a_missed_rate_is_said_and_not_counted(tmp_path):
    """What real SGLang did on the H200 (fp8 KV cache): 4 req/s missed the SLO, all requests at once
    met it. The search looks below 4; the report says the burst met it and that it does not count."""
    levels = [_lv(4.0, 800.0, 900.0, False, 100.0), _lv("inf", 2200.0, 1800.0, True, 2100.0)]
    slo = bench_slo.make_slo({"ttft_p99_ms": 2000, "itl_p99_ms": 50, "search": True, "search_steps": 2})
    search = bench_slo.slo_search(
        {"slo": slo}, levels, lambda rate, step: _lv(rate, 300.0 * rate, 500.0, rate <= 2.0, 290.0 * rate)
    )
    assert search["slo_max_rate"] == 2.0 and search["met_above_bracket"] == ["inf"]
    summary = {**loadgen.summarize(levels, slo_max_rate=search["slo_max_rate"]), "slo_search": search}
    rec = results.build_record(
        "slo",
        "h200",
        "tp1-fp8kv",
        "ok",
        plan={"verdict": "fits", "gpus_used": 1},
        bench={"summary": summary, "levels": levels, "config": {}, "server": {}},
        gpu_hour_cost=2.5,
    )
    results.write_record(str(tmp_path), rec)
    md = compare.build_report(str(tmp_path), "slo", plots=False)["markdown"]
    assert "tp1-fp8kv: max rate under the SLO 2.00 req/s" in md
    assert "met it again at inf req/s above the missed 3.00 req/s (not counted" in md
