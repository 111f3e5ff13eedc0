"""The search's loop after each measured layout: refit the speed model's efficiency factors for the
host, re-rank the candidates, pick the next one or stop (docs/planner.md, "Layout search").

Refit: three bounded scale factors over speed.py's constants (FACTORS), chosen to minimise the mean
squared log ratio of measured to predicted output tok/s over every level (and the single-request
speed) of every layout measured on the host so far; coordinate descent, golden-section per factor.
The observed error is exp(RMS log ratio) - 1 after the fit. The top_k best (re-ranked after each
refit) are measured; past them the sweep stops when the budget is spent, or when no unmeasured
candidate's calibrated prediction beats the best measured value by more than that error. Pure: records
and plans in, decisions out; the playbook only loops (tasks/search_step.yml).

Candidates over several hosts (nnodes > 1, replicas on several hosts) need every node at once: each
host's own loop leaves them, and a second loop (tasks/search_nodes_step.yml) measures them after,
decided once for every host, with a budget of its own (spans=True).
"""

from __future__ import annotations

import math

from .. import speed
from ..report.speed_check import predictable
from .search import lower_is_better, objective_value, rank_entries

# factor: (the constants it scales, (lowest, highest) scale). Bounded so that a fit on a few levels
# cannot run off: a bandwidth efficiency stays <= 0.98 (0.85 x 1.15).
FACTORS: dict[str, tuple[tuple[str, ...], tuple[float, float]]] = {
    "memory": (("eta_weights", "eta_kv"), (0.5, 1.15)),
    "compute": (("eta_f_bf16", "eta_f_fp8", "eta_f_int4"), (0.5, 1.5)),
    "overhead": (
        ("tau_kernel_us", "t_fixed_ms", "t_cpu_sched_ms", "t_hop_ms", "tau_cpu_eager_us"),
        (0.5, 3.0),
    ),
}
PASSES = 3
GOLDEN_STEPS = 14
MEASURED = ("ok", "degraded")


def constants_for(scales: dict[str, float]) -> dict[str, float]:
    """speed.py's constants under the scale factors (the table's own values times each scale)."""
    out = {}
    for factor, (names, _bounds) in FACTORS.items():
        s = float(scales.get(factor, 1.0))
        for name in names:
            out[name] = speed.CONSTANTS[name][0] * s
    return out


def measured_value(rec: dict, objective: str) -> float | None:
    """The objective's figure as a record measured it (None: not measured)."""
    if rec.get("status") not in MEASURED:
        return None
    summary = rec.get("summary") or {}
    if objective == "single":
        return summary.get("single_request_tok_s")
    if objective == "peak":
        return summary.get("peak_output_tok_s")
    if objective == "goodput":
        return summary.get("slo_goodput_tok_s")
    if objective == "cost_per_mtok":
        return (rec.get("cost_per_mtok") or {}).get("peak")
    return None


def _points(rec: dict) -> list[tuple[str, float]]:
    """(what, measured) of a record: single-request speed and each closed-loop level's output tok/s."""
    out = []
    single = (rec.get("summary") or {}).get("single_request_tok_s")
    if isinstance(single, int | float) and single > 0:
        out.append(("single", float(single)))
    for lv in rec.get("levels") or []:
        v = lv.get("output_tok_s")
        if (
            lv.get("concurrency") is not None
            and lv.get("request_rate") in (None, "inf")
            and isinstance(v, int | float)
            and v > 0
        ):
            out.append((str(lv["concurrency"]), float(v)))
    return out


def _workload(rec: dict) -> dict | None:
    sp = (rec.get("prediction") or {}).get("speed") or {}
    concs = sorted({int(w) for w, _measured in _points(rec) if w != "single"}) or [1]
    if not sp.get("input_len"):
        return None
    return {"concurrency": concs, "input_len": sp["input_len"], "output_len": sp["output_len"]}


def predict_record(rec: dict, constants: dict[str, float] | None = None) -> dict | None:
    """The record's layout predicted again (its plan's cost, argv, host) at its own levels."""
    from ..report.speed_check import predict_again

    workload = _workload(rec)
    if workload is None:
        return None
    with speed.overrides(constants or {}):
        return predict_again(rec, workload)


def _residuals(recs: list[dict], constants: dict[str, float]) -> list[float]:
    out = []
    for rec in recs:
        pred = predict_record(rec, constants)
        if not pred:
            continue
        for what, measured in _points(rec):
            p = (
                pred["single_tok_s"]
                if what == "single"
                else (pred["by_concurrency"].get(what) or {}).get("output_tok_s")
            )
            if p:
                out.append(math.log(measured / p))
    return out


def _loss(r: list[float]) -> float:
    return sum(x * x for x in r) / len(r) if r else 0.0


def error_of(residuals: list[float]) -> float | None:
    """exp(RMS log ratio) - 1: the model's typical relative miss."""
    return math.exp(math.sqrt(_loss(residuals))) - 1.0 if residuals else None


def refit(records: list[dict]) -> dict:
    """The host's scale factors fitted to every measured record, with the error before and after."""
    recs = [r for r in records if r.get("status") in MEASURED and _points(r) and predictable(r)]
    scales = {f: 1.0 for f in FACTORS}
    before = _residuals(recs, {})
    if not before:
        return {
            "scales": scales,
            "constants": {},
            "points": 0,
            "layouts": [],
            "error_before": None,
            "error_after": None,
        }
    best = _loss(before)
    phi = (math.sqrt(5) - 1) / 2
    for _pass in range(PASSES):
        for factor, (_names, (lo, hi)) in FACTORS.items():

            def f(x, factor=factor):
                trial = {**scales, factor: math.exp(x)}
                return _loss(_residuals(recs, constants_for(trial)))

            a, b = math.log(lo), math.log(hi)
            c, d = b - phi * (b - a), a + phi * (b - a)
            fc, fd = f(c), f(d)
            for _step in range(GOLDEN_STEPS):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - phi * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + phi * (b - a)
                    fd = f(d)
            x, fx = (c, fc) if fc < fd else (d, fd)
            if fx < best:
                best, scales[factor] = fx, math.exp(x)
    after = _residuals(recs, constants_for(scales))
    return {
        "scales": {k: round(v, 4) for k, v in scales.items()},
        "constants": {k: round(v, 6) for k, v in constants_for(scales).items()},
        "bounds": {k: list(v[1]) for k, v in FACTORS.items()},
        "points": len(after),
        "layouts": sorted(r["layout"] for r in recs),
        "error_before": round(error_of(before), 4),
        "error_after": round(error_of(after), 4),
    }


def recalibrated(
    entries: list[dict],
    plans: dict[str, dict],
    hardware: dict,
    bench: dict | None,
    objective: str,
    constants: dict,
) -> list[dict]:
    """Copies of the ranked entries with value_calibrated and rank_after_calibration (plans: each
    entry's plan by name, for the speed model's inputs)."""
    from .search import Predictor

    out = []
    with speed.overrides(constants):
        predictor = Predictor(hardware, bench)
        for e in entries:
            plan = plans.get(e["name"])
            sp = predictor(plan) if plan else None
            out.append(
                {
                    **e,
                    "value_calibrated": objective_value(objective, sp, e.get("gpus_used"), bench)
                    if sp
                    else e.get("value"),
                }
            )
    rank_entries(out, objective, key="value_calibrated", rank_key="rank_after_calibration")
    return out


def beats(objective: str, value: float | None, best: float | None, error: float) -> bool:
    """Is a predicted value better than the best measured one by more than the model's error?"""
    if value is None:
        return False
    if best is None:
        return True
    if lower_is_better(objective):
        return value < best / (1.0 + error)
    return value > best * (1.0 + error)


def _g(value: float | None) -> str:
    """A figure in a sentence; a layout the speed model cannot predict (no GPU name) has none."""
    return "no figure (the speed model cannot predict it)" if value is None else f"{value:.4g}"


def _spans(plan: dict | None) -> bool:
    return bool(((plan or {}).get("placement") or {}).get("spans"))


def step(
    section: dict,
    plans: dict[str, dict],
    records: list[dict],
    hardware: dict,
    bench: dict | None,
    spans: bool = False,
) -> dict:
    """What the sweep does next: {"stop": bool, "why", "next": name or None, "search": the record's
    search block for it, "calibration", "ranking": [name, rank_predicted, rank_after_calibration]}.

    section: the plan JSON's search; plans: every ranked entry's plan by name; records: this run's
    records of this host (any status); spans: pick among the candidates over several hosts (else
    among this host's own), each kind with its own budget."""
    objective = section["objective"]
    by_layout = {r["layout"]: r for r in records}
    fit = refit(records)
    ranked = recalibrated(section["ranked"], plans, hardware, bench, objective, fit["constants"])
    measured = {n: measured_value(r, objective) for n, r in by_layout.items()}
    measured = {n: v for n, v in measured.items() if v is not None}
    low = lower_is_better(objective)
    best_name = (min if low else max)(measured, key=measured.get) if measured else None
    best = measured.get(best_name) if best_name else None
    spent = sum(1 for r in records if r.get("search") and _spans(plans.get(r["layout"])) == spans)
    error = fit["error_after"] or 0.0
    shortlist = set(section.get("shortlist") or [])
    # a candidate over several hosts needs every node's sweep at once: the other loop's
    waiting = [
        e
        for e in ranked
        if e["name"] in shortlist and e["name"] not in by_layout and _spans(plans.get(e["name"])) == spans
    ]
    out = {
        "objective": objective,
        "stop": True,
        "next": None,
        "search": None,
        "calibration": fit,
        "best_measured": {"layout": best_name, "value": best},
        "spent": spent,
        "budget": section["budget"],
        "error": error,
        "ranking": [[e["name"], e["rank"], e["rank_after_calibration"]] for e in ranked],
    }
    beyond = [
        e
        for e in ranked
        if e["name"] not in shortlist
        and not e.get("named")
        and beats(objective, e["value_calibrated"], best, error)
    ]
    if beyond:
        out["beyond_shortlist"] = [e["name"] for e in beyond[:5]]
    if spent >= section["budget"]:
        out["why"] = f"the budget is spent ({spent} of {section['budget']} candidates measured)"
        return out
    if not waiting:
        out["why"] = "every shortlisted candidate" + (" over several hosts" if spans else "") + " is measured"
        return out
    pick = waiting[0]
    # the first top_k are measured whatever the model says; past them, only a predicted win
    if spent >= section["top_k"] and not beats(objective, pick["value_calibrated"], best, error):
        out["why"] = (
            f"no unmeasured candidate is predicted to beat {best_name} ({_g(best)} measured) by more than the "
            f"model's observed error ({100 * error:.0f}%): the best left, {pick['name']}, is predicted at "
            f"{_g(pick['value_calibrated'])} after calibration"
        )
        return out
    out["stop"] = False
    out["next"] = pick["name"]
    out["why"] = f"{pick['name']} is predicted at {_g(pick['value_calibrated'])} after calibration" + (
        f", above {best_name}'s measured {_g(best)} by more than {100 * error:.0f}%" if best_name else ""
    )
    out["search"] = {
        "rank_predicted": pick["rank"],
        "rank_after_calibration": pick["rank_after_calibration"],
        "value_predicted": pick["value"],
        "value_calibrated": pick["value_calibrated"],
        "objective": objective,
        "calibration": {k: fit[k] for k in ("scales", "points", "layouts", "error_before", "error_after")},
        "why": out["why"],
    }
    return out


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    """Kendall's tau-b of two equally long lists (None under two items or no untied pair)."""
    n = len(a)
    if n < 2 or len(b) != n:
        return None
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return round((conc - disc) / denom, 4) if denom else None


def report_section(records: list[dict], objective: str | None = None) -> dict | None:
    """The report's search section of one host's records (None without a search): predicted before
    and after the final calibration beside measured, Kendall tau, and whether the predicted best was
    the measured best. Before: the plan's prediction; after: refit on every measured record.
    objective: the search's (from its last step) when no record was chosen by the search."""
    searched = [r for r in records if r.get("search")]
    if not searched and objective is None:
        return None
    objective = objective or searched[0]["search"].get("objective") or "single"
    fit = refit(records)
    rows = []
    for rec in records:
        m = measured_value(rec, objective)
        sp = (rec.get("prediction") or {}).get("speed")
        if m is None or not sp:
            continue
        gpus = rec.get("gpus_used")
        bench = {
            "slo": (rec.get("bench_config") or {}).get("slo") or {},
            "gpu_hour_cost": (rec.get("cost_per_mtok") or {}).get("gpu_hour_cost"),
        }
        before = objective_value(objective, sp, gpus, bench)
        after_sp = _predict_full(rec, fit["constants"])
        after = objective_value(objective, after_sp, gpus, bench) if after_sp else None
        rows.append(
            {
                "host": rec["host"],
                "layout": rec["layout"],
                "named": not rec.get("search"),
                "rank_predicted": (rec.get("search") or {}).get("rank_predicted"),
                "rank_after_calibration": (rec.get("search") or {}).get("rank_after_calibration"),
                "predicted": before,
                "predicted_after_calibration": after,
                "measured": m,
            }
        )
    sign = 1 if lower_is_better(objective) else -1
    tau = kendall_tau([r["predicted"] or 0.0 for r in rows], [r["measured"] for r in rows])
    tau_after = kendall_tau(
        [r["predicted_after_calibration"] or 0.0 for r in rows], [r["measured"] for r in rows]
    )
    best_pred = min(rows, key=lambda r: sign * (r["predicted"] or 0.0))["layout"] if rows else None
    best_meas = min(rows, key=lambda r: sign * r["measured"])["layout"] if rows else None
    return {
        "objective": objective,
        "rows": rows,
        "kendall_tau": tau,
        "kendall_tau_after_calibration": tau_after,
        "predicted_best": best_pred,
        "measured_best": best_meas,
        "predicted_best_was_best": best_pred == best_meas if rows else None,
        "calibration": {k: fit[k] for k in ("scales", "points", "layouts", "error_before", "error_after")},
        "stopped": None,
    }


def _predict_full(rec: dict, constants: dict) -> dict | None:
    from ..report.speed_check import predict_again

    sp = (rec.get("prediction") or {}).get("speed") or {}
    workload = {
        "concurrency": [int(k) for k in (sp.get("by_concurrency") or {})] or None,
        "input_len": sp.get("input_len"),
        "output_len": sp.get("output_len"),
    }
    with speed.overrides(constants or {}):
        return predict_again(rec, workload)


def sweep_step(
    plan: dict, inputs: dict, results_dir: str, run_id: str, host: str, spans: bool = False
) -> dict:
    """step() for the sweep of one host: this run's records of the host from the result store, each
    ranked entry planned again from the planner's inputs (the speed model needs its cost). spans:
    the candidates over several hosts, from the records of this host and of every such layout
    (stored under its node rank 0 or router's host, which need not be this one)."""
    from ..report import results
    from .planner import plan_host

    section = plan["search"]
    try:
        records = results.load_run(results_dir, run_id)
    except results.ResultError:
        records = []
    named = {lay.get("name"): lay for lay in inputs.get("layouts") or []}
    layouts = [named.get(e["name"]) or dict(e["layout"], name=e["name"]) for e in section["ranked"]]
    replanned = plan_host({**inputs, "layouts": layouts, "search": None})
    plans = {p["name"]: p for p in replanned["layouts"]}
    records = [r for r in records if r["host"] == host or (spans and _spans(plans.get(r["layout"])))]
    return step(section, plans, records, plan["hardware"], inputs.get("bench"), spans)


def with_search(plan: dict, name: str, search: dict) -> dict:
    """The plan with layout `name`'s search block replaced by the step's (its record carries it):
    the loop over several hosts measures a layout by name, from each host's own plan entry."""
    layouts = [dict(e, search=search) if e["name"] == name else e for e in plan["layouts"]]
    return {**plan, "layouts": layouts}
