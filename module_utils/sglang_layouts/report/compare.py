"""The comparison report of one run: records -> table rows, winners, CSV, JSON, Markdown, plots.

Pure functions first (``rows``, ``winners``, ``to_csv``, ``to_markdown``); ``build_report``
does the file I/O; ``plot`` needs matplotlib (the controller's .venv) and uses the Agg
backend; without matplotlib the tables are written and the report says the
plots were skipped. Command line::

    python -m sglang_layouts.report.compare --results-dir results [--run-id ID] [--no-plots]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys

from .. import engines
from ..fileio import write_atomic
from . import results as _results
from . import speed_check

# Columns shown in REPORT.md only when some row has a value (old records and runs without an SLO or a cost).
OPTIONAL_COLUMNS = (
    "slo_max_rate",
    "slo_goodput_tok_s",
    "cost_peak",
    "cost_slo",
    "predicted_single_tok_s",
    "predicted_peak_tok_s",
    "speed_flag",
    "tool_s",
    "ttft_prefill_peak_ms",
    "ttft_transfer_peak_ms",
)

COLUMNS = (
    ("host", "host"),
    ("layout", "layout"),
    ("engine", "engine"),
    ("gpus", "GPUs"),
    ("status", "status"),
    ("single_tok_s", "single-request tok/s"),
    ("peak_tok_s", "peak tok/s"),
    ("peak_concurrency", "@ conc."),
    ("predicted_single_tok_s", "predicted single tok/s"),
    ("predicted_peak_tok_s", "predicted peak tok/s"),
    ("speed_flag", "speed flag"),
    ("peak_tok_s_per_gpu", "peak tok/s/GPU"),
    ("ttft_c1_p50_ms", "TTFT c=1 p50 ms"),
    ("ttft_c1_p99_ms", "TTFT c=1 p99 ms"),
    ("ttft_peak_p50_ms", "TTFT peak p50 ms"),
    ("ttft_peak_p99_ms", "TTFT peak p99 ms"),
    # pd layouts: the peak level's mean TTFT parts, where the decode servers measure them (bench/loadgen.py)
    ("ttft_prefill_peak_ms", "TTFT peak: prefill ms"),
    ("ttft_transfer_peak_ms", "TTFT peak: KV transfer ms"),
    ("knee_concurrency", "knee"),
    ("slo_max_rate", "max rate under SLO req/s"),
    ("slo_goodput_tok_s", "goodput tok/s under SLO"),
    ("cost_peak", "$/1M tok at peak"),
    ("cost_slo", "$/1M tok under SLO"),
    ("ready_s", "ready s"),
    # the tool's own time for the layout (record timing.tool_s, results.FORMULAS["timing"])
    ("tool_s", "tool s"),
    ("kv_predicted", "KV tokens predicted"),
    ("kv_measured", "KV tokens measured"),
    ("kv_error_pct", "KV error %"),
    ("weights_predicted", "weights GiB/GPU predicted"),
    ("weights_measured", "weights GiB/GPU measured"),
    ("simulated", "simulated"),
    ("dummy_weights", "dummy weights"),
)


def _status_text(rec):
    status = rec.get("status")
    if status in ("failed",):
        return f"failed: {rec.get('failure_class') or 'unknown'}"
    if status == "skipped":
        verdict = (rec.get("prediction") or {}).get("verdict") or rec.get("failure_class") or "skipped"
        return f"skipped: {verdict}"
    if status == "degraded":
        failed = (rec.get("summary") or {}).get("failed")
        return f"degraded ({failed} requests failed)"
    return status or "?"


def engine_of(rec):
    """The record's engine: its own field, else the plan's, else sglang (records before the field)."""
    return (
        rec.get("engine")
        or (rec.get("prediction") or {}).get("engine")
        or (engines.SIM_NAME if rec.get("simulated") else engines.SGLANG.name)
    )


def measured_weights_gib(health):
    """GiB of weights per GPU as the engine measured them: its start-up log (the largest rank), else
    /server_info's per-rank memory_usage.weight."""
    logged = (health.get("log_figures") or {}).get("weights_gib")
    if logged is not None:
        return logged
    per_rank = [r.get("weight") for r in health.get("memory_per_rank") or [] if r.get("weight") is not None]
    return max(per_rank) if per_rank else None


def trust(row):
    """How far a row's speed can be trusted: 2 = real engine, real weights; 1 = real engine, dummy
    weights (real memory and kernels, random routing); 0 = the simulator's cost model."""
    if row["simulated"]:
        return 0
    return 1 if row.get("dummy_weights") else 2


def rows(records):
    """One row per record (the latest attempt of each host/layout), in record order."""
    out = []
    for rec in records:
        s = rec.get("summary") or {}
        kv = rec.get("kv_tokens") or {}
        health = rec.get("health") or {}
        cost = rec.get("cost_per_mtok") or {}  # records before cost_per_mtok: no cost
        out.append(
            {
                "host": rec["host"],
                "layout": rec["layout"],
                "engine": engine_of(rec),
                "gpus": rec.get("gpus_used"),
                "status": _status_text(rec),
                "status_code": rec.get("status"),
                "failure_class": rec.get("failure_class"),
                "single_tok_s": s.get("single_request_tok_s"),
                "peak_tok_s": s.get("peak_output_tok_s"),
                "peak_concurrency": s.get("peak_concurrency"),
                "peak_tok_s_per_gpu": s.get("peak_tok_s_per_gpu"),
                "ttft_c1_p50_ms": s.get("single_request_ttft_ms_p50"),
                "ttft_c1_p99_ms": s.get("single_request_ttft_ms_p99"),
                "ttft_peak_p50_ms": s.get("peak_ttft_ms_p50"),
                "ttft_peak_p99_ms": s.get("peak_ttft_ms_p99"),
                **_pd_split(rec, s.get("peak_concurrency")),
                "knee_concurrency": s.get("knee_concurrency"),
                "peak_request_rate": s.get("peak_request_rate"),
                "slo_max_rate": rec.get("slo_max_rate", s.get("slo_max_rate")),
                "slo_goodput_tok_s": s.get("slo_goodput_tok_s"),
                "slo_goodput_req_s": s.get("slo_goodput_req_s"),
                # rates that met the SLO above the lowest missed one (slo.sustained_bracket)
                "slo_met_above": (s.get("slo_search") or {}).get("met_above_bracket") or [],
                "slo_bracket": (s.get("slo_search") or {}).get("bracket"),
                "slo": _slo_of(rec),
                "cost_peak": cost.get("peak"),
                "cost_slo": cost.get("slo"),
                "ready_s": health.get("ready_after_s"),
                "tool_s": (rec.get("timing") or {}).get("tool_s"),
                "kv_predicted": kv.get("predicted"),
                "kv_measured": kv.get("measured"),
                "kv_error_pct": kv.get("error_pct"),
                "weights_predicted": (rec.get("prediction") or {}).get("weights_gib_per_gpu"),
                "weights_measured": measured_weights_gib(health),
                "simulated": bool(rec.get("simulated")),
                "dummy_weights": bool(rec.get("dummy_weights")),
                "replicas": ((rec.get("prediction") or {}).get("parallel") or {}).get("replicas") or 1,
                "reasons": rec.get("reasons") or [],
                "msg": rec.get("msg"),
                "attempt": rec.get("attempt", 1),
                "stalled": _stalled_levels(rec),
                **_speed_fields(rec),
            }
        )
    return out


def _pd_split(rec, peak_concurrency):
    """A pd layout's peak level: its measured prefill and KV-transfer parts of TTFT (null where the
    servers do not measure them, and for every other layout)."""
    level = next(
        (
            lv
            for lv in rec.get("levels") or []
            if lv.get("mode", "concurrency") == "concurrency" and lv.get("concurrency") == peak_concurrency
        ),
        {},
    )
    return {
        "ttft_prefill_peak_ms": level.get("ttft_prefill_ms"),
        "ttft_transfer_peak_ms": level.get("ttft_transfer_ms"),
    }


def _stalled_levels(rec):
    """The levels measured once more after a stall (records before the stall rule have none): both figures."""
    out = []
    for lv in rec.get("levels") or []:
        stall = lv.get("stall") or {}
        if not stall.get("detected"):
            continue
        first = stall.get("first") or {}
        out.append(
            {
                "level": f"c={lv['concurrency']}"
                if lv.get("request_rate") is None
                else f"{lv['request_rate']} req/s",
                "reasons": stall.get("reasons") or [],
                "persisted": bool(stall.get("persisted")),
                "first_tok_s": first.get("output_tok_s"),
                "first_ttft_p50_ms": (first.get("ttft_ms") or {}).get("p50"),
                "tok_s": lv.get("output_tok_s"),
                "ttft_p50_ms": (lv.get("ttft_ms") or {}).get("p50"),
            }
        )
    return out


def _speed_fields(rec):
    """The prediction the record was measured against, and the flag when they differ (report/speed_check.py)."""
    speed = (rec.get("prediction") or {}).get("speed") or {}
    return {
        "predicted_single_tok_s": speed.get("single_tok_s"),
        "predicted_peak_tok_s": speed.get("peak_tok_s"),
        **speed_check.check(rec),
    }


def _slo_of(rec):
    """The SLO thresholds a record was measured against (None without one or in old records)."""
    for lv in rec.get("levels") or []:
        if (lv.get("slo") or {}).get("thresholds"):
            return lv["slo"]["thresholds"]
    return ((rec.get("bench_config") or {}).get("slo") or {}).get("thresholds")


def winners(table):
    """The best row for single-request speed, for peak throughput and, when the run has an SLO, for goodput
    under it (ok/degraded rows only). Every winner is chosen here (one place to extend).

    Rows from real engines are preferred: a simulated row wins only in a run with no real one.
    """

    def best(key):
        cands = [r for r in table if r["status_code"] in ("ok", "degraded") and r[key] is not None]
        if not cands:
            return None
        # a simulated figure never beats a measured one, nor a dummy-weight one a real-weight one
        top = max(trust(r) for r in cands)
        cands = [r for r in cands if trust(r) == top]
        r = max(cands, key=lambda r: r[key])
        return {
            "host": r["host"],
            "layout": r["layout"],
            "engine": r.get("engine"),
            "value": r[key],
            "simulated": r["simulated"],
            "dummy_weights": r.get("dummy_weights", False),
        }

    win = {"single_request": best("single_tok_s"), "peak_throughput": best("peak_tok_s")}
    if any(r.get("slo_goodput_tok_s") is not None for r in table):
        # the winner of a run with an SLO: the highest goodput under it
        win["goodput_under_slo"] = best("slo_goodput_tok_s")
        if win["goodput_under_slo"]:
            r = next(
                r
                for r in table
                if (r["host"], r["layout"])
                == (win["goodput_under_slo"]["host"], win["goodput_under_slo"]["layout"])
            )
            win["goodput_under_slo"]["slo_max_rate"] = r.get("slo_max_rate")
            win["goodput_under_slo"]["slo"] = r.get("slo")
    if win["peak_throughput"]:
        r = next(
            r
            for r in table
            if (r["host"], r["layout"]) == (win["peak_throughput"]["host"], win["peak_throughput"]["layout"])
        )
        win["peak_throughput"]["concurrency"] = r["peak_concurrency"]
    return win


def _fmt(v, key=None):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if key in ("kv_error_pct",):
            return f"{v:+.1f}"
        if key in ("cost_peak", "cost_slo"):
            return f"{v:.3f}"
        return f"{v:.1f}" if abs(v) >= 10 or key in ("ready_s", "tool_s") else f"{v:.2f}"
    return str(v)


def to_csv(table):
    buf = io.StringIO()
    keys = [k for k, _header in COLUMNS] + [
        "peak_request_rate",
        "slo_goodput_req_s",
        "replicas",
        "failure_class",
        "attempt",
    ]
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in table:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    return buf.getvalue()


def _label(row, multi_host, multi_engine=False):
    name = f"{row['host']}/{row['layout']}" if multi_host else row["layout"]
    if row["simulated"]:
        return f"{name} [simulated]"
    if row.get("dummy_weights"):
        return f"{name} [dummy weights]"
    return f"{name} [{row['engine']}]" if multi_engine and row.get("engine") else name


def _record_label(rec, multi_host, multi_engine):
    """A plot legend's name for a stored record (the row label of _label)."""
    row = {
        "host": rec["host"],
        "layout": rec["layout"],
        "simulated": rec.get("simulated"),
        "dummy_weights": rec.get("dummy_weights"),
        "engine": engine_of(rec),
    }
    return _label(row, multi_host, multi_engine)


def _engine_tag(row, multi_engine):
    """' (vllm)' beside a layout's name when the run holds several engines; simulated rows say so."""
    if row.get("simulated"):
        return " (simulated)"
    if row.get("dummy_weights"):
        return " (dummy weights)"
    return f" ({row.get('engine')})" if multi_engine and row.get("engine") else ""


def _speed_lines(table, reference, multi_host, multi_engine):
    """Predicted beside measured for every level of every real row; flags with their causes; the
    reference measurements beside the prediction for the same layout."""
    lines = []
    real = [r for r in table if not r["simulated"] and r.get("speed_compare")]
    if real:
        lines += [
            "",
            "Predicted (module_utils/sglang_layouts/speed.py) beside measured output tok/s:",
            "",
        ]
        for r in real:
            cells = ", ".join(
                f"{c['what']} {_fmt(c['measured'])} vs {_fmt(c['predicted'])} ({_fmt(c['ratio'])}x)"
                for c in r["speed_compare"]
            )
            lines.append(f"- {_label(r, multi_host, multi_engine)}: {cells}")
    for r in table:
        if r.get("speed_flag"):
            why = "; ".join(r.get("speed_flag_causes") or []) or "no cause in its own evidence"
            lines.append(f"- **{_label(r, multi_host, multi_engine)}: {r['speed_flag']}** ({why})")
    if reference:
        lines += [
            "",
            f"Reference measurements ({reference.get('source') or 'by hand'}) beside this run's prediction:",
            "",
            "| host | layout | single tok/s | predicted | peak tok/s | predicted | flag |",
            "|---|---|---|---|---|---|---|",
        ]
        for ref in reference["rows"]:
            flag = ref["speed_flag"] or ""
            if flag and ref.get("speed_flag_causes"):
                flag += " (" + "; ".join(ref["speed_flag_causes"]) + ")"
            lines.append(
                f"| {ref.get('host')} | {ref.get('layout')} (reference) | {_fmt(ref.get('single_tok_s'))} | "
                f"{_fmt(ref.get('predicted_single_tok_s'))} | {_fmt(ref.get('peak_tok_s'))} | "
                f"{_fmt(ref.get('predicted_peak_tok_s'))} | {flag} |"
            )
    return lines


def to_markdown(run_id, table, win, plots=(), reference=None):
    multi_host = len({r["host"] for r in table}) > 1
    multi_engine = len({r.get("engine") for r in table}) > 1
    simulated = any(r["simulated"] for r in table)
    lines = [f"# Layout comparison: run {run_id}", ""]
    if simulated:
        lines += [
            "> **SIMULATED**: rows marked *simulated* come from the simulated engine (`sglang_sim`), not from "
            "GPUs. They show the flow and the planner's verdicts; their speeds are the simulator's cost model.",
            "",
        ]
    if any(r.get("dummy_weights") for r in table):
        lines += [
            "> **DUMMY WEIGHTS**: rows marked *dummy weights* ran the real engine on real GPUs with random "
            "weights (`--load-format dummy`): memory, KV capacity and kernel speed are real; outputs are not, "
            "and MoE routing of random logits is not the trained model's. A real-weight row always wins over them.",
            "",
        ]
    cols = [
        (k, h)
        for k, h in COLUMNS
        if k not in ("host", "simulated", "dummy_weights") or (k == "host" and multi_host)
    ]
    cols = [(k, h) for k, h in cols if k not in OPTIONAL_COLUMNS or any(r.get(k) is not None for r in table)]
    lines.append("| " + " | ".join(h for _key, h in cols) + " |")
    lines.append("|" + "|".join("---" for _col in cols) + "|")
    for r in table:
        cells = []
        for k, _header in cols:
            if k == "layout":
                replicas = f" ({r['replicas']} replicas, router)" if (r.get("replicas") or 1) > 1 else ""
                cells.append(f"{r['layout']}{replicas}{_engine_tag(r, multi_engine)}")
            else:
                cells.append(_fmt(r[k], k))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    slo_win = win.get("goodput_under_slo")
    if "goodput_under_slo" in win:
        slo = next((r["slo"] for r in table if r.get("slo")), None) or {}
        slo_text = ", ".join(f"{k} <= {v:g}" for k, v in sorted(slo.items()))
        if slo_win is None or not slo_win["value"]:
            lines.append(f"- Winner under the SLO ({slo_text}): none (no layout met it).")
        else:
            who = f"{slo_win['host']}/{slo_win['layout']}" if multi_host else slo_win["layout"]
            rate = slo_win.get("slo_max_rate")
            at = f", max rate under the SLO {rate} req/s" if rate is not None else ""
            lines.append(
                f"- **Winner under the SLO ({slo_text}): {who}**{_engine_tag(slo_win, multi_engine)}: "
                f"{slo_win['value']:.1f} output tok/s of goodput{at}."
            )
        for r in table:
            if r.get("slo_goodput_tok_s") is not None:
                cost = f", {r['cost_slo']:.3f} $/1M tok" if r.get("cost_slo") is not None else ""
                above = ""
                if r.get("slo_met_above"):
                    missed = (r.get("slo_bracket") or [None, None])[1]
                    above = (
                        f"; met it again at {', '.join(map(str, r['slo_met_above']))} req/s above the missed "
                        f"{_fmt(missed)} req/s (not counted: the max rate is the highest rate below every miss)"
                    )
                lines.append(
                    f"  - {_label(r, multi_host, multi_engine)}: max rate under the SLO "
                    f"{_fmt(r.get('slo_max_rate'))} req/s, goodput {_fmt(r['slo_goodput_tok_s'])} tok/s{cost}{above}"
                )
    for title, key, unit in (
        ("single-request speed", "single_request", "tok/s at concurrency 1"),
        ("peak throughput", "peak_throughput", "aggregate output tok/s"),
    ):
        w = win.get(key)
        if w is None:
            lines.append(f"- Winner for {title}: none (no layout was measured).")
            continue
        at = f" @ concurrency {w['concurrency']}" if w.get("concurrency") else ""
        sim = _engine_tag(w, multi_engine)
        who = f"{w['host']}/{w['layout']}" if multi_host else w["layout"]
        lines.append(f"- **Winner for {title}: {who}**{sim}: {w['value']:.1f} {unit}{at}.")
    stalled = [(r, s) for r in table for s in r.get("stalled") or []]
    if stalled:
        lines += [
            "",
            "Levels measured again after a stall (the table and the winners use the second measurement):",
            "",
        ]
        for r, s in stalled:
            again = "; it stalled again (the level's own behaviour)" if s["persisted"] else ""
            lines.append(
                f"- {_label(r, multi_host, multi_engine)} {s['level']}: stalled ({'; '.join(s['reasons'])}), "
                f"first {_fmt(s['first_tok_s'])} tok/s, TTFT p50 {_fmt(s['first_ttft_p50_ms'])} ms; "
                f"measured again {_fmt(s['tok_s'])} tok/s, TTFT p50 {_fmt(s['ttft_p50_ms'])} ms{again}"
            )
    notes = [r for r in table if r["status_code"] in ("failed", "skipped")]
    if notes:
        lines += ["", "Not measured:", ""]
        for r in notes:
            why = "; ".join(r["reasons"]) or r["msg"] or ""
            lines.append(
                f"- {_label(r, multi_host, multi_engine)}: {r['status']}{(' - ' + why) if why else ''}"
            )
    lines += _speed_lines(table, reference, multi_host, multi_engine)
    if plots:
        lines += [""] + [f"![{os.path.splitext(p)[0]}]({p})" for p in plots]
    lines += [
        "",
        "Single-request tok/s = mean (completion_tokens - 1) / (e2e - TTFT) at concurrency 1; peak tok/s = max over "
        "levels of output tokens / level duration; knee = smallest concurrency reaching 90 % of the peak; KV error = "
        "(predicted - measured) / measured; goodput = output tokens of requests meeting every SLO threshold / level "
        "duration; max rate under SLO = highest request rate whose level met the SLO (ladder + bisection); "
        "$/1M tok = gpu_hour_cost x GPUs / 3600 / tok/s x 1e6. Every record carries all formulas under `formulas`.",
        "",
    ]
    return "\n".join(lines)


def matplotlib_available():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _save(plt, fig, path, xlabel, ylabel, title, legend=True, grid_axis="both"):
    """Label the figure's one axes, write it as a PNG at `path`, close it; returns the file name."""
    (ax,) = fig.axes
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis=grid_axis, alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def plot(records, outdir, run_id):
    """Two PNGs: output tok/s vs concurrency per layout, and the Pareto view. Returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in records if r.get("levels") and r.get("status") in ("ok", "degraded")]
    multi_host = len({r["host"] for r in records}) > 1
    multi_engine = len({engine_of(r) for r in records}) > 1
    simulated = any(r.get("simulated") for r in records)
    tag = " (SIMULATED)" if simulated else ""
    names = []

    fig, ax = plt.subplots(figsize=(8, 5))
    for rec in measured:
        lv = sorted(_closed_levels(rec), key=lambda x: x["concurrency"])
        label = _record_label(rec, multi_host, multi_engine)
        ax.plot([x["concurrency"] for x in lv], [x["output_tok_s"] for x in lv], marker="o", label=label)
    ax.set_xscale("log", base=2)
    xy = ("concurrency (streams)", "aggregate output tok/s")
    title = f"Output throughput vs concurrency, run {run_id}{tag}"
    names.append(_save(plt, fig, os.path.join(outdir, "throughput.png"), *xy, title, legend=bool(measured)))

    fig, ax = plt.subplots(figsize=(8, 5))
    points = []
    for rec in measured:
        gpus = rec.get("gpus_used") or 1
        label = _record_label(rec, multi_host, multi_engine)
        xs, ys = [], []
        for x in sorted(_closed_levels(rec), key=lambda x: x["concurrency"]):
            per_user = (x.get("decode_tok_s") or {}).get("mean")
            if per_user is None:
                continue
            xs.append(per_user)
            ys.append(x["output_tok_s"] / gpus)
            points.append((per_user, x["output_tok_s"] / gpus))
            ax.annotate(f"c{x['concurrency']}", (xs[-1], ys[-1]), fontsize=6, alpha=0.7)
        ax.plot(xs, ys, marker="o", label=label)
    frontier = pareto_front(points)
    if frontier:
        ax.plot(
            [p[0] for p in frontier], [p[1] for p in frontier], "k--", lw=1, alpha=0.5, label="Pareto front"
        )
    xy = ("tok/s per user (mean per-request decode speed)", "tok/s per GPU (aggregate output / GPUs used)")
    title = f"Per-user speed vs per-GPU throughput, run {run_id}{tag}"
    names.append(_save(plt, fig, os.path.join(outdir, "pareto.png"), *xy, title, legend=bool(measured)))
    names += plot_rates(plt, measured, outdir, run_id, multi_host, multi_engine, tag)
    names += plot_goodput(plt, measured, outdir, run_id, multi_host, multi_engine, tag)
    return names


def _closed_levels(rec):
    """Concurrency levels (old records have no mode: all of theirs)."""
    return [x for x in rec.get("levels") or [] if x.get("mode", "concurrency") == "concurrency"]


def _rate_levels(rec):
    """Finite-rate levels (ladder and SLO search) sorted by rate; inf has no place on a rate axis."""
    out = []
    for x in rec.get("levels") or []:
        r = x.get("request_rate")
        if r is not None and r != "inf" and x.get("completed"):
            out.append((float(r), x))
    return sorted(out, key=lambda p: p[0])


def plot_rates(plt, measured, outdir, run_id, multi_host, multi_engine, tag):
    """rate_throughput.png (output tok/s vs request rate) and rate_ttft.png (p99 TTFT vs rate, SLO line)."""
    with_rates = [rec for rec in measured if _rate_levels(rec)]
    if not with_rates:
        return []
    names = []
    for fname, title, ylabel, value in (
        (
            "rate_throughput.png",
            "Output throughput vs request rate",
            "output tok/s",
            lambda x: x["output_tok_s"],
        ),
        (
            "rate_ttft.png",
            "p99 TTFT vs request rate",
            "TTFT p99 (ms)",
            lambda x: (x.get("ttft_ms") or {}).get("p99"),
        ),
    ):
        fig, ax = plt.subplots(figsize=(8, 5))
        for rec in with_rates:
            pts = [(r, value(x)) for r, x in _rate_levels(rec) if value(x) is not None]
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=_record_label(rec, multi_host, multi_engine),
            )
        if fname == "rate_ttft.png":
            limit = next(
                (
                    (_slo_of(rec) or {}).get(k)
                    for rec in with_rates
                    for k in (_slo_of(rec) or {})
                    if k.startswith("ttft")
                ),
                None,
            )
            if limit is not None:
                ax.axhline(limit, color="red", ls="--", lw=1, label=f"SLO {limit:g} ms")
        xlabel = "request rate (req/s, open loop; inf left out)"
        names.append(
            _save(plt, fig, os.path.join(outdir, fname), xlabel, ylabel, f"{title}, run {run_id}{tag}")
        )
    return names


def plot_goodput(plt, measured, outdir, run_id, multi_host, multi_engine, tag):
    """goodput.png: the best goodput under the SLO per layout (bars), when the run had an SLO."""
    bars = [
        (_record_label(rec, multi_host, multi_engine), (rec.get("summary") or {}).get("slo_goodput_tok_s"))
        for rec in measured
    ]
    bars = [(name, v) for name, v in bars if v is not None]
    if not bars:
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.bar([b[0] for b in bars], [b[1] for b in bars], color="tab:green")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    title = f"Goodput under the SLO per layout, run {run_id}{tag}"
    ylabel = "goodput under the SLO (output tok/s)"
    return [_save(plt, fig, os.path.join(outdir, "goodput.png"), None, ylabel, title, False, "y")]


def pareto_front(points):
    """Points not dominated in (x, y), both larger-is-better; sorted by x."""
    front = []
    for p in sorted(set(points), key=lambda p: (-p[0], -p[1])):
        if not front or p[1] > front[-1][1]:
            front.append(p)
    return sorted(front)


def build_report(results_dir, run_id=None, plots=True, reference_path=None):
    """Write REPORT.md, summary.csv, summary.json (and the PNGs) into results/<run id>/; returns a summary."""
    run_id = _results.resolve_run_id(results_dir, run_id)
    records = sorted(
        _results.load_run(results_dir, run_id),
        key=lambda r: (r["host"], int((r.get("extra") or {}).get("order", 10**6)), r["layout"]),
    )
    table = rows(records)
    win = winners(table)
    outdir = _results.run_dir(results_dir, run_id)
    skipped = None
    if plots and records and not matplotlib_available():
        # a plain ansible-core controller: the tables are the report, the plots are extras
        skipped = "Plots skipped: matplotlib is not installed on the controller (pip install matplotlib to draw them)."
    pngs = plot(records, outdir, run_id) if plots and records and skipped is None else []
    reference = None
    if reference_path:
        with open(reference_path, encoding="utf-8") as f:
            ref_doc = json.load(f)
        reference = {**ref_doc, "rows": speed_check.reference_rows(ref_doc, records)}
    markdown = to_markdown(run_id, table, win, pngs, reference)
    search = search_sections(records, outdir)
    if search:
        markdown = markdown.rstrip("\n") + "\n\n" + "\n".join(search_markdown(search)) + "\n"
    if skipped:
        markdown = markdown.rstrip("\n") + f"\n\n{skipped}\n"
    write_atomic(os.path.join(outdir, "REPORT.md"), markdown)
    write_atomic(os.path.join(outdir, "summary.csv"), to_csv(table))
    doc = {
        "schema": "sglang-layouts/summary/v1",
        "run_id": run_id,
        "simulated": any(r["simulated"] for r in table),
        "dummy_weights": any(r["dummy_weights"] for r in table),
        "engines": sorted({r["engine"] for r in table if r.get("engine")}),
        "winners": win,
        "rows": table,
        "reference_rows": (reference or {}).get("rows") or [],
        "formulas": _results.FORMULAS,
        **({"search": search} if search else {}),
    }
    write_atomic(os.path.join(outdir, "summary.json"), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return {
        "run_id": run_id,
        "dir": outdir,
        "files": ["REPORT.md", "summary.csv", "summary.json", *pngs],
        "markdown": markdown,
        "winners": win,
        "rows": len(table),
        # layouts with figures (ok or degraded): a sweep that measured none exits non-zero
        "measured": sum(1 for r in table if r["status_code"] in ("ok", "degraded")),
        "plots_skipped": skipped,
        **({"search": search} if search else {}),
    }


def search_sections(records, outdir):
    """The layout search of the run (calibrate.report_section): the first searched host's
    section, every host's under `hosts`, with why each host's search stopped (search-<host>.json)."""
    from ..plan.calibrate import report_section

    hosts = {}
    for host in sorted({r["host"] for r in records}):
        step_file = os.path.join(outdir, f"search-{host}.json")
        last = {}
        if os.path.isfile(step_file):
            with open(step_file, encoding="utf-8") as f:
                last = json.load(f)
        section = report_section([r for r in records if r["host"] == host], last.get("objective"))
        if section is None:
            continue
        section["stopped"] = last.get("why") if last.get("stop") else None
        # the inventory's own layouts were ranked too: their places from the last step's ranking
        places = {name: (before, after) for name, before, after in last.get("ranking") or []}
        for row in section["rows"]:
            if row["rank_predicted"] is None and row["layout"] in places:
                row["rank_predicted"], row["rank_after_calibration"] = places[row["layout"]]
        section["beyond_shortlist"] = last.get("beyond_shortlist") or []
        hosts[host] = section
    if not hosts:
        return None
    first = hosts[next(iter(hosts))]
    return {**first, "host": next(iter(hosts)), "hosts": hosts}


def search_markdown(search):
    out = ["## Layout search", ""]
    for host, sec in search["hosts"].items():
        cal = sec["calibration"]
        out += [
            f"{host}: objective {sec['objective']}; Kendall tau {_fmt(sec['kendall_tau'])} before calibration, "
            f"{_fmt(sec['kendall_tau_after_calibration'])} after; predicted best {sec['predicted_best']}, measured best "
            f"{sec['measured_best']} ({'the same' if sec['predicted_best_was_best'] else 'not the same'}).",
            "",
            "| layout | chosen by | rank predicted | rank after calibration | predicted | predicted after calibration | measured |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in sec["rows"]:
            out.append(
                f"| {r['layout']} | {'inventory' if r['named'] else 'search'} | {_fmt(r['rank_predicted'])} | "
                f"{_fmt(r['rank_after_calibration'])} | {_fmt(r['predicted'])} | {_fmt(r['predicted_after_calibration'])} | "
                f"{_fmt(r['measured'])} |"
            )
        scales = ", ".join(f"{k} x{v:g}" for k, v in cal["scales"].items())
        out += [
            "",
            f"Calibration ({cal['points']} measured points of {', '.join(cal['layouts'])}): {scales}; "
            f"model error {_pct(cal['error_before'])} before, {_pct(cal['error_after'])} after the refit.",
        ]
        if sec.get("stopped"):
            out.append(f"The search stopped: {sec['stopped']}.")
        if sec.get("beyond_shortlist"):
            out.append(
                "Predicted after calibration to beat the best measured, outside the shortlist (raise top_k or budget): "
                + ", ".join(sec["beyond_shortlist"])
            )
        out.append("")
    return out


def _pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m sglang_layouts.report.compare", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--results-dir", required=True)
    ap.add_argument("--run-id", default=None, help="default: the run results/latest points at")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON instead of the Markdown")
    ap.add_argument(
        "--reference", default=None, help="JSON of reference measurements to set beside the prediction"
    )
    args = ap.parse_args(argv)
    try:
        out = build_report(
            args.results_dir, args.run_id, plots=not args.no_plots, reference_path=args.reference
        )
    except _results.ResultError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "markdown"}, indent=2))
    else:
        print(out["markdown"])
        print(f"(written to {out['dir']}: {', '.join(out['files'])})")
    if out["plots_skipped"]:
        print(out["plots_skipped"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
