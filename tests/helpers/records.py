"""Result records as the sweep stores them, for the report's tests: a measured concurrency level
and a record written through the real results.build_record / results.write_record; the accounting
every record's timing keeps."""

from __future__ import annotations

import pytest
from sglang_layouts.bench import loadgen
from sglang_layouts.report import results

TIMING_ENGINE_PARTS = ("ready_s", "bench_s", "warmup_s", "stop_s")


def assert_timing_adds_up(t):
    """A record's timing (results.FORMULAS["timing"]): every part of the engine's time >= 0, and tool_s
    the wall time less those parts (to the records' rounding)."""
    assert set(t) == {"deploy_s", "wall_s", "tool_s", *TIMING_ENGINE_PARTS}
    assert all(t[k] >= 0 for k in TIMING_ENGINE_PARTS), t
    assert t["tool_s"] == pytest.approx(t["wall_s"] - sum(t[k] for k in TIMING_ENGINE_PARTS), abs=0.003), t


def level(c, tok, per_user, ttft):
    """One concurrency level: `tok` output tok/s in all, `per_user` decode tok/s, `ttft` ms (p99 twice)."""
    st = {"mean": ttft, "p50": ttft, "p90": ttft, "p99": ttft * 2}
    return {
        "concurrency": c,
        "completed": 4 * c,
        "failed": 0,
        "output_tok_s": tok,
        "decode_tok_s": {"mean": per_user, "p50": per_user, "p90": per_user, "p99": per_user},
        "ttft_ms": st,
        "warnings": [],
    }


def store(rd, run_id, host, layout, levels, plan, status="ok", engine="sim", ready_after_s=2.5, **kw):
    """Write the record of one layout into results dir `rd` and return it. An "ok" record gets the
    levels (summarized by the real loadgen.summarize) and health facts; any other status neither."""
    ok = status == "ok"
    rec = results.build_record(
        run_id,
        host,
        layout,
        status,
        engine=engine,
        plan=plan,
        health={"max_total_num_tokens": 900, "ready_after_s": ready_after_s} if ok else {},
        bench={"summary": loadgen.summarize(levels), "levels": levels, "config": {}, "server": {}}
        if ok
        else None,
        **kw,
    )
    results.write_record(rd, rec)
    return rec
