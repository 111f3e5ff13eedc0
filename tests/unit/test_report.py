"""The report: rows, winners, CSV/JSON/Markdown and the PNGs, from stored records."""

from __future__ import annotations

import csv
import io
import json

from sglang_layouts.report import compare, results

from tests.helpers.records import level as _level
from tests.helpers.records import store


def _store(rd, layout, gpus, levels, status="ok", engine="sim", **kw):
    plan = {
        "verdict": kw.pop("verdict", "fits"),
        "gpus_used": gpus,
        "kv_tokens": 1000,
        "reasons": kw.pop("reasons", []),
    }
    store(rd, "run1", "seed-box", layout, levels, plan, status, engine, **kw)


def _fill(rd):
    _store(
        rd,
        "tp8",
        8,
        [_level(1, 26.0, 26.0, 50.0), _level(16, 400.0, 25.0, 80.0), _level(64, 808.0, 12.6, 300.0)],
    )
    _store(
        rd,
        "ep8",
        8,
        [_level(1, 65.0, 65.0, 40.0), _level(16, 900.0, 56.0, 70.0), _level(64, 961.0, 15.0, 250.0)],
    )
    _store(
        rd,
        "tp4ep2",
        4,
        [],
        status="skipped",
        verdict="oom",
        reasons=["weights 150 GiB per GPU > budget 83.6 GiB"],
    )
    _store(
        rd,
        "pp8",
        8,
        [],
        status="failed",
        failure_class="oom_at_load",
        msg="died",
        evidence={"line": "CUDA out of memory"},
    )


def test_rows_winners_and_files(tmp_path):
    rd = str(tmp_path)
    _fill(rd)
    results.update_latest(rd, "run1")
    out = compare.build_report(rd, None, plots=True)
    assert out["run_id"] == "run1" and out["rows"] == 4
    assert out["winners"]["single_request"]["layout"] == "ep8"
    assert out["winners"]["peak_throughput"] == {
        "host": "seed-box",
        "layout": "ep8",
        "engine": "sim",
        "value": 961.0,
        "simulated": True,
        "dummy_weights": False,
        "concurrency": 64,
    }
    md = (tmp_path / "run1" / "REPORT.md").read_text()
    assert "SIMULATED" in md and "ep8 (simulated)" in md
    assert "Winner for single-request speed: ep8" in md and "Winner for peak throughput: ep8" in md
    assert "failed: oom_at_load" in md and "skipped: oom" in md and "weights 150 GiB" in md
    assert "![throughput](throughput.png)" in md
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run1" / "summary.csv").read_text())))
    tp8 = next(r for r in rows if r["layout"] == "tp8")
    assert (
        float(tp8["peak_tok_s"]) == 808.0 and tp8["peak_concurrency"] == "64" and tp8["simulated"] == "True"
    )
    assert float(tp8["kv_error_pct"]) == (1000 - 900) / 900 * 100
    assert tp8["ttft_c1_p50_ms"] == "50.0" and tp8["ttft_peak_p99_ms"] == "600.0"
    doc = json.loads((tmp_path / "run1" / "summary.json").read_text())
    assert doc["simulated"] is True and len(doc["rows"]) == 4 and "ttft_ms" in doc["formulas"]
    for png in ("throughput.png", "pareto.png"):
        data = (tmp_path / "run1" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_report_is_rebuilt_from_stored_results_and_prefers_the_latest_attempt(tmp_path):
    rd = str(tmp_path)
    _fill(rd)
    _store(
        rd, "pp8", 8, [_level(1, 36.9, 36.9, 45.0), _level(64, 396.0, 6.0, 400.0)]
    )  # forced rerun succeeded
    out = compare.build_report(rd, "run1", plots=False)
    md = out["markdown"]
    assert "failed: oom_at_load" not in md
    assert out["files"] == ["REPORT.md", "summary.csv", "summary.json"]


def test_real_engine_rows_are_not_marked_simulated(tmp_path):
    rd = str(tmp_path)
    _store(rd, "tp8", 8, [_level(1, 26.0, 26.0, 50.0)], engine="sglang")
    out = compare.build_report(rd, "run1", plots=False)
    assert "SIMULATED" not in out["markdown"] and "simulated" not in out["markdown"].split("\n")[2:][0]


def test_pareto_front():
    pts = [(10, 100), (20, 90), (15, 80), (5, 120), (20, 95)]
    assert compare.pareto_front(pts) == [(5, 120), (10, 100), (20, 95)]


def test_cli_prints_the_table(tmp_path, capsys):
    rd = str(tmp_path)
    _fill(rd)
    assert compare.main(["--results-dir", rd, "--run-id", "run1", "--no-plots"]) == 0
    assert "| layout |" in capsys.readouterr().out
    assert compare.main(["--results-dir", rd, "--run-id", "nope", "--no-plots"]) == 2


def test_a_simulated_row_never_beats_a_real_one(tmp_path):
    rd = str(tmp_path)
    # the simulator's cost model is faster than the real engine here; the real row must still win
    _store(rd, "sim-tp8", 8, [_level(1, 80.0, 80.0, 20.0), _level(4, 300.0, 75.0, 25.0)], engine="sim")
    _store(rd, "cpu-tp1", 1, [_level(1, 30.0, 30.0, 40.0), _level(4, 100.0, 25.0, 45.0)], engine="vllm")
    win = compare.winners(compare.rows(results.load_run(rd, "run1")))
    assert win["single_request"]["layout"] == "cpu-tp1" and not win["single_request"]["simulated"]
    assert win["peak_throughput"]["layout"] == "cpu-tp1"


def test_without_matplotlib_the_tables_are_written_and_the_plots_skipped(tmp_path, monkeypatch):
    """A plain ansible-core controller: matplotlib cannot be imported."""
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *a, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    rd = str(tmp_path)
    _fill(rd)
    out = compare.build_report(rd, "run1", plots=True)
    assert out["files"] == ["REPORT.md", "summary.csv", "summary.json"] and out["measured"] == 2
    md = (tmp_path / "run1" / "REPORT.md").read_text()
    assert "Plots skipped: matplotlib is not installed" in md and "Winner for peak throughput: ep8" in md
    assert not list((tmp_path / "run1").glob("*.png"))


def test_the_tools_own_time_is_a_column_when_records_have_it(tmp_path):
    rd = str(tmp_path)
    _fill(rd)
    results.update_latest(rd, "run1")
    md = compare.build_report(rd, None, plots=False) and (tmp_path / "run1" / "REPORT.md").read_text()
    assert "tool s" not in md  # records without timing: no empty column
    timing = results.layout_timing(
        {"start": 0, "ready": 12, "end": 40}, {"ready_after_s": 10}, [{"duration_s": 20}], 2
    )
    _store(rd, "dp-attention", 8, [_level(1, 30.0, 30.0, 45.0)], timing=timing)
    compare.build_report(rd, None, plots=False)
    md = (tmp_path / "run1" / "REPORT.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| layout"))
    assert "| ready s | tool s |" in header
    row = next(line for line in md.splitlines() if line.startswith("| dp-attention"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[header.strip("|").split("|").index(" tool s ")] == "8.0"
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run1" / "summary.csv").read_text())))
    assert next(r for r in rows if r["layout"] == "dp-attention")["tool_s"] == "8.0"


def test_a_pd_layout_is_compared_on_the_same_columns_with_its_ttft_split(tmp_path):
    """A pd layout's row sits beside the others (tok/s, TTFT, cost...); its peak level's prefill and
    KV-transfer parts of TTFT get their own columns, empty for layouts that have none."""
    rd = str(tmp_path)
    _fill(rd)
    pd_levels = [_level(1, 40.0, 40.0, 60.0), _level(64, 1000.0, 16.0, 200.0)]
    pd_levels[1].update({"ttft_prefill_ms": 120.0, "ttft_transfer_ms": 2.5, "ttft_split": {"measured": True}})
    pd_levels[0].update({"ttft_prefill_ms": 30.0, "ttft_transfer_ms": 2.0, "ttft_split": {"measured": True}})
    _store(rd, "pd44", 8, pd_levels)
    results.update_latest(rd, "run1")
    compare.build_report(rd, None, plots=False)
    md = (tmp_path / "run1" / "REPORT.md").read_text()
    header = [
        c.strip()
        for c in next(ln for ln in md.splitlines() if ln.startswith("| layout")).strip("|").split("|")
    ]
    cells = {
        name: [
            c.strip()
            for c in next(ln for ln in md.splitlines() if ln.startswith(f"| {name} ")).strip("|").split("|")
        ]
        for name in ("pd44", "tp8")
    }
    col = header.index("TTFT peak: prefill ms")
    assert (
        cells["pd44"][col] == "120.0" and cells["pd44"][header.index("TTFT peak: KV transfer ms")] == "2.50"
    )
    assert cells["tp8"][col] in ("", "-", "None")
    assert cells["pd44"][header.index("peak tok/s")] == "1000.0"
    assert "Winner for peak throughput: pd44" in md
