"""Service-level objectives of the load generator: the SLO mapping, goodput and slo_met per level, and the
bisection over request rate for the highest rate that meets the SLO (FORMULAS["slo*"], ["goodput_*"])."""

from __future__ import annotations

import math
import re

from .common import BenchError, is_number, parse_rate, percentile, rate_json, rate_label, say

_SLO_KEY = re.compile(r"^(ttft|itl|tpot|e2e)_(?:p([0-9]{1,2}(?:\.[0-9]+)?)_)?ms$")
SLO_OPTIONS = (
    "percentile",
    "max_error_rate",
    "search",
    "search_min_rate",
    "search_max_rate",
    "search_steps",
    "search_tolerance",
)


SLO_SEARCH_STEPS = 6


def make_slo(spec):
    """Normalise the SLO mapping: {"thresholds": {key: ms}, "checks": [[metric, q, ms, key]], ...} or None."""
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise BenchError(f"slo must be a mapping such as {{ttft_p99_ms: 2000, itl_p99_ms: 50}}, not {spec!r}")
    default_q = spec.get("percentile", 99)
    if not is_number(default_q) or not 0 < default_q <= 100:
        raise BenchError(f"slo percentile must be in (0, 100], not {default_q!r}")
    checks, thresholds = [], {}
    for key, value in spec.items():
        if key in SLO_OPTIONS:
            continue
        m = _SLO_KEY.match(str(key))
        if not m:
            raise BenchError(
                f"slo key {key!r} does not exist: use ttft_pNN_ms, itl_pNN_ms, tpot_pNN_ms or e2e_pNN_ms "
                f"(NN a percentile, e.g. ttft_p99_ms), <metric>_ms with percentile, or {', '.join(SLO_OPTIONS)}"
            )
        q = float(m.group(2)) if m.group(2) else float(default_q)
        if not 0 < q <= 100:
            raise BenchError(f"slo key {key!r}: the percentile must be in (0, 100]")
        if not is_number(value) or value <= 0:
            raise BenchError(f"slo {key} must be a number of milliseconds > 0, not {value!r}")
        checks.append([m.group(1), q, float(value), key])
        thresholds[key] = float(value)
    if not checks:
        raise BenchError(
            "slo has no threshold: give at least one of ttft_p99_ms, itl_p99_ms, tpot_p99_ms, e2e_p99_ms"
        )
    max_err = spec.get("max_error_rate", 0.0)
    if not is_number(max_err) or not 0 <= max_err < 1:
        raise BenchError(f"slo max_error_rate must be in [0, 1), not {max_err!r}")
    out = {"thresholds": thresholds, "checks": checks, "max_error_rate": float(max_err), "search": None}
    if spec.get("search"):
        steps = spec.get("search_steps", SLO_SEARCH_STEPS)
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= 30:
            raise BenchError(f"slo search_steps must be an integer in [1, 30], not {steps!r}")
        lo = parse_rate(spec.get("search_min_rate", 1.0))
        hi = spec.get("search_max_rate")
        hi = None if hi is None else parse_rate(hi)
        tol = spec.get("search_tolerance", 0.05)
        if math.isinf(lo) or (hi is not None and (math.isinf(hi) or hi < lo)):
            raise BenchError("slo search_min_rate / search_max_rate must be finite, min <= max")
        if not is_number(tol) or not 0 < tol < 1:
            raise BenchError(f"slo search_tolerance must be in (0, 1), not {tol!r}")
        out["search"] = {"steps": steps, "min_rate": lo, "max_rate": hi, "tolerance": float(tol)}
    elif "search" not in spec and any(k.startswith("search_") for k in spec):
        raise BenchError("slo search_* options need search: true")
    return out


def _request_itl_q(r, q):
    return percentile([1000.0 * g for g in r["itl"]], q) if r["itl"] else None


def evaluate_slo(slo, ok, n_sent, duration, itl_pooled_ms):
    """goodput and slo_met of one level (FORMULAS["slo"], ["goodput_*"], ["slo_met"]); Nones without an SLO."""
    if not slo:
        return {"goodput_req_s": None, "goodput_tok_s": None, "slo_met": None, "slo": None}
    figures = {
        "ttft": lambda r: 1000.0 * r["ttft"],
        "e2e": lambda r: 1000.0 * r["e2e"],
        "tpot": lambda r: (
            1000.0 * (r["e2e"] - r["ttft"]) / (r["completion_tokens"] - 1)
            if r["completion_tokens"] > 1
            else None
        ),
    }
    good = []
    for r in ok:
        fine = True
        for metric, q, limit, _key in slo["checks"]:
            v = _request_itl_q(r, q) if metric == "itl" else figures[metric](r)
            if v is not None and v > limit:
                fine = False
                break
        if fine:
            good.append(r)
    observed, met = {}, {}
    for metric, q, limit, key in slo["checks"]:
        if metric == "itl":
            values = itl_pooled_ms
        else:
            values = [v for v in (figures[metric](r) for r in ok) if v is not None]
        observed[key] = percentile(values, q)
        met[key] = observed[key] is not None and observed[key] <= limit
        if metric in ("tpot", "itl") and observed[key] is None and ok:
            met[key] = True  # single-token outputs: no gap to check
    failed = n_sent - len(ok)
    error_rate = failed / n_sent if n_sent else 0.0
    slo_met = bool(ok) and all(met.values()) and error_rate <= slo["max_error_rate"]
    return {
        "goodput_req_s": len(good) / duration if duration > 0 else 0.0,
        "goodput_tok_s": sum(r["completion_tokens"] for r in good) / duration if duration > 0 else 0.0,
        "slo_met": slo_met,
        "slo": {
            "thresholds": slo["thresholds"],
            "observed": observed,
            "met": met,
            "good": len(good),
            "error_rate": error_rate,
        },
    }


def rate_value(lv):
    r = lv.get("request_rate")
    return None if r is None else parse_rate(r)


def sustained_bracket(levels):
    """(lo, hi, met_above) over the rate levels: hi = the lowest finite rate that missed the SLO, lo =
    the highest finite rate below it that met it, met_above = rates above hi that met it anyway.

    A rate counts only if every lower tested rate met the SLO too, and inf (every request at once)
    is a burst, never a sustained rate: on real SGLang (H200, Qwen3-30B-A3B, fp8 KV cache) 4 and
    16 req/s missed the p99 ITL threshold while all 48 requests at once met it, because arrivals
    spread over time interrupt decoding with their prefills. Such a pass is reported, not crowned."""
    rated = [(rate_value(lv), bool(lv.get("slo_met"))) for lv in levels if lv.get("request_rate") is not None]
    missed = [r for r, ok in rated if not ok and not math.isinf(r)]
    hi = min(missed) if missed else None
    met = [r for r, ok in rated if ok]
    below = [r for r in met if not math.isinf(r) and (hi is None or r < hi)]
    lo = max(below) if below else None
    return lo, hi, sorted(r for r in met if hi is not None and r > hi)


def max_met_rate(levels):
    lo, _hi, _met_above = sustained_bracket(levels)
    return rate_json(lo)


def slo_search(cfg, levels, run, progress=None, keep_going=None):
    """Bisection over request rate for the highest sustained rate meeting the SLO
    (FORMULAS["slo_max_rate"]; sustained_bracket says which levels count).

    levels: the ladder's levels (their verdicts bracket the search); run(rate, step) measures one rate level.
    Returns {"slo_max_rate", "bracket", "steps": [rates], "stopped", "met_above_bracket"}; the new
    levels are appended to levels."""
    search = cfg["slo"]["search"]
    lo, hi, _met_above = sustained_bracket(levels)
    tried, stopped = [], "steps"
    for step in range(1, search["steps"] + 1):
        if hi is None:
            r = search["min_rate"] if lo is None else lo * 2
            if search["max_rate"] is not None:
                if lo is not None and lo >= search["max_rate"]:
                    stopped = "search_max_rate met"
                    break
                r = min(r, search["max_rate"])
        elif lo is None:
            r = hi / 2
        else:
            if (hi - lo) / hi <= search["tolerance"]:
                stopped = "tolerance"
                break
            r = (lo + hi) / 2
        if math.isinf(r) or r in tried:
            break
        tried.append(r)
        lv = run(r, step)
        levels.append(lv)
        if lv["slo_met"]:
            lo = r
        else:
            hi = r
        if keep_going is not None and not keep_going(lv):
            stopped = "stopped between levels"
            break
    lo, hi, above = sustained_bracket(levels)
    out = {
        "slo_max_rate": rate_json(lo),
        "bracket": [rate_json(lo), rate_json(hi)],
        "steps": tried,
        "stopped": stopped,
        "met_above_bracket": [rate_json(r) for r in above],
    }
    say(progress, f"slo search done: max rate {rate_label(lo) if lo is not None else 'none'} req/s")
    return out
