"""Result records: schema, never-overwrite, attempts, latest symlink."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from sglang_layouts.report import results

from tests.helpers.records import assert_timing_adds_up


def _bench(tok=100.0):
    return {
        "summary": {"single_request_tok_s": 40.0, "peak_output_tok_s": tok, "peak_concurrency": 16},
        "levels": [{"concurrency": 1, "output_tok_s": 40.0}],
        "config": {"input_len": 8},
        "server": {"version": "x"},
    }


def test_record_carries_schema_formulas_prediction_and_kv_error():
    plan = {
        "verdict": "fits",
        "gpus_used": 8,
        "kv_tokens": 1100,
        "argv": ["python3", "-m", "x"],
        "reasons": [],
    }
    rec = results.build_record(
        "r1",
        "box",
        "tp8",
        "ok",
        engine="sim",
        plan=plan,
        health={"max_total_num_tokens": 1000},
        bench=_bench(),
    )
    assert rec["schema"] == results.SCHEMA and rec["simulated"] is True
    assert rec["kv_tokens"] == {"predicted": 1100, "measured": 1000, "error_pct": pytest.approx(10.0)}
    assert rec["summary"]["peak_tok_s_per_gpu"] == pytest.approx(100.0 / 8)
    assert rec["argv"] == ["python3", "-m", "x"] and rec["prediction"]["verdict"] == "fits"
    assert {"ttft_ms", "tpot_ms", "itl_ms", "kv_tokens_error_pct", "tok_s_per_gpu"} <= set(rec["formulas"])


@pytest.mark.parametrize("bad", ["latest", "../x", "a/b", "", ".", "x" * 200])
def test_unsafe_names_are_refused(bad):
    with pytest.raises(results.ResultError):
        results.record_path("/tmp", bad, "h", "l")


def test_status_must_be_known():
    with pytest.raises(results.ResultError, match="status"):
        results.build_record("r", "h", "l", "great")


def test_records_are_never_overwritten_a_rerun_adds_an_attempt(tmp_path):
    rd = str(tmp_path)
    p1, a1 = results.write_record(rd, results.build_record("r1", "h", "tp8", "ok", bench=_bench(100.0)))
    before = Path(p1).read_bytes()
    p2, a2 = results.write_record(
        rd, results.build_record("r1", "h", "tp8", "failed", failure_class="oom_at_load")
    )
    assert (a1, a2) == (1, 2) and p1.endswith("r1/h/tp8.json") and p2.endswith("r1/h/tp8.attempt2.json")
    assert Path(p1).read_bytes() == before
    assert json.loads(Path(p2).read_text())["attempt"] == 2
    assert results.attempts(rd, "r1", "h", "tp8") == [1, 2]
    recs = results.load_run(rd, "r1")
    assert [(r["layout"], r["status"], r["attempt"]) for r in recs] == [("tp8", "failed", 2)]
    assert len(results.load_run(rd, "r1", all_attempts=True)) == 2
    # no temporary files left behind
    assert sorted(os.listdir(tmp_path / "r1" / "h")) == ["tp8.attempt2.json", "tp8.json"]


def test_concurrent_writers_never_lose_a_record(tmp_path):
    rd = str(tmp_path)
    paths = []

    def w(i):
        paths.append(results.write_record(rd, results.build_record("r", "h", "ep8", "ok", extra={"i": i}))[0])

    threads = [threading.Thread(target=w, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 8
    seen = {json.loads(Path(p).read_text())["extra"]["i"] for p in paths}
    assert seen == set(range(8))


def test_latest_symlink_points_at_the_newest_run(tmp_path):
    rd = str(tmp_path)
    results.write_record(rd, results.build_record("20260101T000000Z", "h", "a", "ok"))
    results.update_latest(rd, "20260101T000000Z")
    results.update_latest(rd, "20260102T000000Z")
    assert os.readlink(tmp_path / "latest") == "20260102T000000Z"
    assert results.resolve_run_id(rd) == "20260102T000000Z"
    assert results.resolve_run_id(rd, "other") == "other"


def test_resolve_without_latest_says_what_to_do(tmp_path):
    with pytest.raises(results.ResultError, match="run a sweep first"):
        results.resolve_run_id(str(tmp_path))


def test_new_run_id_is_a_sortable_utc_stamp():
    import datetime as dt

    assert (
        results.new_run_id(dt.datetime(2026, 11, 29, 15, 23, 0, tzinfo=dt.timezone.utc)) == "20261129T152300Z"
    )


def test_cost_per_mtok_at_peak_and_under_the_slo():
    from sglang_layouts.report import results as r

    c = r.cost_per_mtok(3.6, 8, {"peak_output_tok_s": 1000.0, "slo_goodput_tok_s": 400.0})
    # 3.6 $/GPU-h x 8 GPUs = 28.8 $/h = 0.008 $/s; 1000 tok/s -> 8 $ per 1M tokens
    assert c["peak"] == pytest.approx(8.0) and c["slo"] == pytest.approx(20.0)
    assert r.cost_per_mtok(None, 8, {"peak_output_tok_s": 1000.0})["peak"] is None
    assert r.cost_per_mtok(3.6, 8, {"peak_output_tok_s": 1000.0, "slo_goodput_tok_s": 0.0})["slo"] is None


def test_record_keeps_the_speed_it_was_measured_against():
    speed = {"single_tok_s": 50.0, "peak_tok_s": 90.0, "by_concurrency": {"1": {"output_tok_s": 45.0}}}
    plan = {"verdict": "fits", "gpus_used": 8, "speed": speed}
    bench = {
        **_bench(),
        "levels": [{"concurrency": 1, "output_tok_s": 40.0}, {"concurrency": 4, "output_tok_s": 80}],
    }
    rec = results.build_record("r1", "box", "tp8", "ok", engine="sglang", plan=plan, bench=bench)
    assert rec["prediction"]["speed"] == speed
    assert [lv["predicted_output_tok_s"] for lv in rec["levels"]] == [45.0, None]
    assert "predicted_output_tok_s" not in bench["levels"][0]  # the bench facts are not changed in place


def test_layout_timing_is_the_wall_time_less_the_engines_start_levels_and_stop():
    # the layout: ready in 99.9 s, 22.9 s of levels, records 146 s apart
    marks = {"start": 1000.0, "ready": 1103.0, "end": 1146.0}
    levels = [{"duration_s": 12.9}, {"duration_s": 10.0}, {"concurrency": 64}]
    t = results.layout_timing(marks, {"ready_after_s": 99.9}, levels, stop_s=1.2)
    assert t == {
        "deploy_s": 103.0,
        "ready_s": 99.9,
        "bench_s": 22.9,
        "warmup_s": 0.0,
        "stop_s": 1.2,
        "tool_s": 22.0,
        "wall_s": 146.0,
    }
    assert_timing_adds_up(t)
    assert "tool_s = wall_s - ready_s - bench_s - warmup_s - stop_s" in results.FORMULAS["timing"]


def test_layout_timing_keeps_the_warm_ups_and_a_stalled_first_measurement_apart_from_the_tool():
    # the levels' warm-ups are the engine's work (warmup_s); a level measured again after a stall
    # counts both of its measurements in bench_s (loadgen.measure_level keeps the first under stall.first)
    levels = [
        {"duration_s": 10.0, "warmup": {"seconds": 0.5}},
        {
            "duration_s": 4.0,
            "warmup": {"seconds": 1.5},
            "stall": {"detected": True, "first": {"duration_s": 9.0, "warmup": {"seconds": 1.5}}},
        },
        {"duration_s": 2.0, "warmup": None, "stall": {"detected": False}},
    ]
    t = results.layout_timing(
        {"start": 0.0, "ready": 12.0, "end": 60.0}, {"ready_after_s": 11.0}, levels, 3.0
    )
    assert (t["bench_s"], t["warmup_s"], t["stop_s"], t["wall_s"]) == (25.0, 2.0, 3.0, 60.0)
    assert t["tool_s"] == 19.0
    assert_timing_adds_up(t)


def test_layout_timing_of_a_start_that_failed_counts_the_gates_wait():
    t = results.layout_timing(
        {"start": "10.0", "ready": "50.0", "end": "57.5"}, {}, None, "0", gate_waited_s=38.8
    )
    assert t == {
        "deploy_s": 40.0,
        "ready_s": 38.8,
        "bench_s": 0.0,
        "warmup_s": 0.0,
        "stop_s": 0.0,
        "tool_s": 8.7,
        "wall_s": 47.5,
    }
    assert_timing_adds_up(t)
    # no marks: nothing is made up
    t = results.layout_timing({}, {}, [], None)
    assert t["tool_s"] is None and t["wall_s"] is None and t["deploy_s"] is None


def test_the_record_keeps_the_timing():
    timing = results.layout_timing(
        {"start": 0, "ready": 5, "end": 9}, {"ready_after_s": 4}, [{"duration_s": 3}], 1
    )
    rec = results.build_record("r1", "h", "tp8", "ok", engine="sim", timing=timing)
    assert rec["timing"]["tool_s"] == 1.0 and "timing" in rec["formulas"]
    assert results.build_record("r1", "h", "tp8", "ok", engine="sim")["timing"] is None
