"""Layout search: from a model and hosts to the candidates worth measuring (sglang_layout_search).

Enumerate every combination of the parallelism and serving knobs the search varies, let the
planner's own rules (planner.plan_layout) drop the invalid and the ones that do not fit, rank the
rest by the speed model's prediction (speed.py) for the objective, and drop the dominated. The plan
JSON's `search` section holds the result; the top candidates join the plan's layouts so that the
sweep can deploy them. The calibration loop (refit, re-rank, stop) lives in plan/calibrate.py.

Names (tests outside the repo use them): sglang_layout_search: {objective, gpus, vary, knobs,
top_k, budget}; plan JSON search: {candidates, ranked: [{name, layout, speed, memory}], dropped};
generated layout names auto-<tp>x<pp>x<dp>[-ep<N>][-dpa][-n<nnodes>][-r<replicas>][-<knob>=<v>...].
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import re

from ..engines import SGLANG, engine_flags, flag_index
from ..estimate.model import PlanError, kind_of
from ..report.results import cost_per_mtok
from ..speed import predict as predict_speed
from ..speed import predict_pd
from .inputs import normalize_layout
from .rules import layout_problems, parallel_shape, pd_tp_problems
from .search_pd import normalize_pd_search, pd_candidates, pd_shape_key
from .validate import LOOPBACK

OBJECTIVES = {
    "single": "single-request decode tok/s (higher is better)",
    "peak": "peak output tok/s over the benchmark's levels (higher is better)",
    "goodput": "output tok/s at the best level that meets sglang_bench_slo (higher is better)",
    "cost_per_mtok": "$ per 1M output tokens at peak, from sglang_gpu_hour_cost (lower is better)",
}
SEARCH_KEYS = {
    "objective": f"one of {', '.join(OBJECTIVES)} (default single)",
    "gpus": "GPUs a candidate may use: all (whole hosts, the default), a number, or [min, max]",
    "vary": "parallelism to vary: {tp, pp, dp, ep, enable_dp_attention, moe_dense_tp_size, nnodes, replicas: [...]}",
    "knobs": "serving flags to vary: {<flag of the version's table>: [values]}",
    "top_k": "how many candidates the sweep measures at least, best predicted first (default 3)",
    "budget": "most candidates the sweep measures (default top_k); past top_k the stop rule decides",
    "pd": "true, or {transfer_backend, ib_device, router}: also prefill/decode pools of the vary: shapes (plan/search_pd.py)",
}
# The layout keys a search may vary, and moe_dense_tp_size (a flag, rendered under args:).
VARY_KEYS = ("tp", "pp", "dp", "ep", "enable_dp_attention", "moe_dense_tp_size", "nnodes", "replicas")
DEFAULT_TOP_K = 3
# Why a candidate left the ranking (the plan JSON's dropped counts).
REASONS = {
    "gpus": "uses a GPU count outside gpus",
    "invalid": "refused by the planner's parallelism rules",
    "does_not_fit": "does not fit in GPU memory",
    "dominated": "another candidate is predicted better on one figure and no worse on any, with no more GPUs",
}
_VALUE_CHARS = re.compile(r"[^A-Za-z0-9_.+]")


def _powers(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def _values(where: str, value, kind=int) -> list:
    if not isinstance(value, list) or not value:
        value = [value]
    out = []
    for v in value:
        if kind is bool:
            if not isinstance(v, bool):
                raise PlanError(f"{where}: values must be true or false, not {v!r}")
            out.append(v)
            continue
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise PlanError(f"{where}: values must be whole numbers >= 1, not {kind_of(v)}")
        try:
            n = int(str(v).strip())
        except ValueError:
            raise PlanError(f"{where}: values must be whole numbers >= 1, not {v!r}") from None
        if n < 1:
            raise PlanError(f"{where}: values must be whole numbers >= 1, not {v!r}")
        out.append(n)
    return list(dict.fromkeys(out))


def knob_key(flag: str) -> str:
    """A flag as a knob's name in a layout name: --kv-cache-dtype -> kv_cache_dtype."""
    return flag.lstrip("-").replace("-", "_")


def value_text(value) -> str:
    """A knob value as a layout name carries it: true/false, numbers as written, any character a
    layout name cannot hold (names.py) written as '_' (fp8/e4m3 -> fp8_e4m3)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return _VALUE_CHARS.sub("_", str(value)) or "_"


def shape_text(lay: dict) -> str:
    """<tp>x<pp>x<dp>[-ep<N>][-dpa]: a shape as candidate names write it (pd roles too, search_pd)."""
    text = f"{lay.get('tp', 1)}x{lay.get('pp', 1)}x{lay.get('dp', 1)}"
    if lay.get("ep", 1) > 1:
        text += f"-ep{lay['ep']}"
    if lay.get("enable_dp_attention"):
        text += "-dpa"
    return text


def gpus_pass(used: int, gpu_count: int, gpus_range) -> bool:
    """The search's gpus: rule: within [min, max], or whole hosts (gpus_range None)."""
    if gpus_range is None:
        return used % gpu_count == 0
    return gpus_range[0] <= used <= gpus_range[1]


def layout_name(lay: dict, knobs: dict) -> str:
    """auto-<tp>x<pp>x<dp>[-ep<N>][-dpa][-n<nnodes>][-r<replicas>][-<knob>=<v>...] (at most 128
    characters: a longer one keeps its shape and ends in a digest of its knobs)."""
    name = f"auto-{shape_text(lay)}"
    if lay.get("nnodes", 1) > 1:
        name += f"-n{lay['nnodes']}"
    if lay.get("replicas", 1) > 1:
        name += f"-r{lay['replicas']}"
    return with_knobs(name, knobs)


def with_knobs(name: str, knobs: dict, limit: int = 128) -> str:
    """A candidate's name with its knobs: -<knob>=<v>... (a tail that would pass `limit` characters
    is -k<digest of the knobs>)."""
    tail = "".join(f"-{knob_key(k)}={value_text(v)}" for k, v in knobs.items())
    if len(name + tail) > limit:
        digest = hashlib.sha256(json.dumps(knobs, sort_keys=True, default=str).encode()).hexdigest()[:10]
        tail = f"-k{digest}"
    return name + tail


def normalize_search(search, hardware: dict, cluster: dict, sglang_version: str | None = None) -> dict:
    """The search as the enumeration reads it; a bad one is refused before anything is planned."""
    from .planner import canonical_args

    where = "sglang_layout_search"
    if not isinstance(search, dict):
        raise PlanError(
            f"{where} must be a mapping like {{objective: peak, top_k: 3}}, not {kind_of(search)}"
        )
    unknown = sorted(set(search) - set(SEARCH_KEYS))
    if unknown:
        hints = [
            k + (f" (did you mean {c[0]}?)" if (c := difflib.get_close_matches(k, SEARCH_KEYS, n=1)) else "")
            for k in unknown
        ]
        raise PlanError(f"{where}: unknown key(s) {', '.join(hints)}. Known keys: {', '.join(SEARCH_KEYS)}")
    objective = search.get("objective") or "single"
    if objective not in OBJECTIVES:
        close = difflib.get_close_matches(str(objective), OBJECTIVES, n=1)
        raise PlanError(
            f"{where}.objective {objective!r} does not exist"
            + (f" (did you mean {close[0]}?)" if close else "")
            + f"; use one of {', '.join(OBJECTIVES)}."
        )
    top_k = search.get("top_k", DEFAULT_TOP_K)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise PlanError(f"{where}.top_k must be a whole number >= 1, not {top_k!r}")
    budget = search.get("budget", top_k)
    if isinstance(budget, bool) or not isinstance(budget, int | float) or budget < 1:
        raise PlanError(
            f"{where}.budget must be at least 1 (how many candidates the sweep may measure), not {budget!r}"
        )
    budget = int(budget)
    hosts = len(cluster.get("hosts") or []) or 1
    gpu_count = int(hardware["gpu_count"])
    gpus = search.get("gpus", "all")
    if gpus == "all" or gpus is None:
        gpus_range = None
    else:
        bounds = _values(f"{where}.gpus", gpus)
        if len(bounds) > 2:
            raise PlanError(f"{where}.gpus: give all, one number or [min, max], not {gpus!r}")
        gpus_range = (min(bounds), max(bounds))
    vary = search.get("vary") or {}
    if not isinstance(vary, dict):
        raise PlanError(f"{where}.vary must be a mapping like {{tp: [4, 8]}}, not {kind_of(vary)}")
    bad = sorted(set(vary) - set(VARY_KEYS))
    if bad:
        raise PlanError(
            f"{where}.vary: {', '.join(bad)} cannot be varied; vary {', '.join(VARY_KEYS)}, "
            "and put serving flags under knobs:"
        )
    nnodes = (
        _values(f"{where}.vary.nnodes", vary["nnodes"]) if "nnodes" in vary else list(range(1, hosts + 1))
    )
    total = gpu_count * max(nnodes)  # the most GPUs one engine can span
    space = {
        "tp": _values(f"{where}.vary.tp", vary["tp"]) if "tp" in vary else _powers(total),
        "pp": _values(f"{where}.vary.pp", vary["pp"]) if "pp" in vary else _powers(total),
        "dp": _values(f"{where}.vary.dp", vary["dp"]) if "dp" in vary else _powers(total),
        "ep": _values(f"{where}.vary.ep", vary["ep"]) if "ep" in vary else _powers(total),
        "enable_dp_attention": (
            _values(f"{where}.vary.enable_dp_attention", vary["enable_dp_attention"], bool)
            if "enable_dp_attention" in vary
            else [False, True]
        ),
        "nnodes": nnodes,
        "replicas": _values(f"{where}.vary.replicas", vary["replicas"]) if "replicas" in vary else [1],
        # a pd candidate's replicas per role: vary's where it names them, else every count that fits
        "pd_replicas": _values(f"{where}.vary.replicas", vary["replicas"]) if "replicas" in vary else None,
        "moe_dense_tp_size": (
            _values(f"{where}.vary.moe_dense_tp_size", vary["moe_dense_tp_size"])
            if "moe_dense_tp_size" in vary
            else [None]
        ),
    }
    knobs = search.get("knobs") or {}
    if not isinstance(knobs, dict):
        raise PlanError(f"{where}.knobs must be a mapping of flag to values, not {kind_of(knobs)}")
    table = engine_flags(SGLANG, sglang_version)
    index = flag_index(table)
    version = table.get("sglang_version", "?")
    out_knobs = {}
    for key, values in knobs.items():
        spelled = str(key) if str(key).startswith("--") else "--" + str(key).replace("_", "-")
        if spelled not in index:
            close = difflib.get_close_matches(spelled, index, n=1)
            raise PlanError(
                f"{where}.knobs.{key}: SGLang {version} has no flag {spelled}"
                + (f" (did you mean {close[0]}?)" if close else "")
                + ". Remove the knob or pin an SGLang that has it (sglang_version)."
            )
        values = values if isinstance(values, list) else [values]
        if not values:
            raise PlanError(f"{where}.knobs.{key}: give at least one value")
        for v in values:
            # the planner's own check of a value under args: (choices, switches, ranges)
            try:
                canonical_args(f"{where}.knobs", {key: v}, SGLANG, sglang_version)
            except PlanError as e:
                raise PlanError(
                    str(e).replace("layout sglang_layout_search.knobs", where + ".knobs")
                ) from None
        out_knobs[knob_key(index[spelled])] = list(dict.fromkeys(values))
    return {
        "objective": objective,
        "gpus": gpus_range,
        "space": space,
        "knobs": out_knobs,
        "top_k": top_k,
        "budget": budget,
        "pd": normalize_pd_search(search.get("pd"), table),
        "gpu_count": gpu_count,
        # the hosts a pd candidate's roles may take (one where the servers bind loopback: run())
        "pd_hosts": hosts,
    }


def candidates(norm: dict, role_ok=lambda shape, knobs: True, pair_problems=lambda pd: []) -> list[dict]:
    """Every layout of the search space, in a fixed order (shape first, then knobs); then, with pd:,
    for each knob set the pd layouts of role shapes role_ok(shape, knobs) allows and pairs without
    pair_problems(pd) (run() gives both from the planner)."""
    s = norm["space"]
    knob_names = list(norm["knobs"])
    knob_sets = [
        dict(zip(knob_names, vals, strict=True)) for vals in itertools.product(*norm["knobs"].values())
    ]
    out = []
    for tp, pp, dp, ep, dpa, nnodes, replicas, mdtp in itertools.product(
        s["tp"],
        s["pp"],
        s["dp"],
        s["ep"],
        s["enable_dp_attention"],
        s["nnodes"],
        s["replicas"],
        s["moe_dense_tp_size"],
    ):
        if dpa and dp == 1:
            continue  # the planner notes it does nothing: the same layout as without it
        lay = {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "ep": ep,
            "enable_dp_attention": dpa,
            "nnodes": nnodes,
            "replicas": replicas,
        }
        base = {} if mdtp is None else {"moe_dense_tp_size": mdtp}
        for ks in knob_sets:
            args = {**base, **ks}
            out.append({"name": layout_name(lay, args), **lay, **({"args": args} if args else {})})
    if norm.get("pd") is not None:
        for ks in knob_sets:
            for lay in pd_candidates(
                s,
                norm["pd"],
                norm["gpu_count"],
                norm["pd_hosts"],
                norm["gpus"],
                lambda shape, ks=ks: role_ok(shape, ks),
                pair_problems,
            ):
                # a role's servers are named <layout>-prefill / -decode (plan/pd.py): room for the suffix
                name = with_knobs(lay["name"], ks, 128 - len("-prefill"))
                out.append({**lay, "name": name, **({"args": ks} if ks else {})})
    return out


def objective_value(
    objective: str, speed: dict | None, gpus_used: int | None, bench: dict | None
) -> float | None:
    """The figure a candidate is ranked by (None: the model cannot say)."""
    if not speed:
        return None
    if objective == "single":
        return speed.get("single_tok_s")
    if objective == "peak":
        return speed.get("peak_tok_s")
    if objective == "goodput":
        # the model predicts mean TTFT/ITL; the SLO names p99s: a prediction, checked by the sweep
        slo = (bench or {}).get("slo") or {}
        best = 0.0
        for level in (speed.get("by_concurrency") or {}).values():
            ttft, itl = level.get("ttft_ms"), level.get("itl_ms")
            if slo.get("ttft_p99_ms") is not None and (ttft is None or ttft > float(slo["ttft_p99_ms"])):
                continue
            if slo.get("itl_p99_ms") is not None and (itl is None or itl > float(slo["itl_p99_ms"])):
                continue
            best = max(best, float(level.get("output_tok_s") or 0.0))
        return best
    if objective == "cost_per_mtok":
        cost = (bench or {}).get("gpu_hour_cost")
        return cost_per_mtok(cost, gpus_used, {"peak_output_tok_s": speed.get("peak_tok_s")})["peak"]
    raise PlanError(f"unknown objective {objective!r}")


def lower_is_better(objective: str) -> bool:
    return objective == "cost_per_mtok"


def check_objective_inputs(norm: dict, bench: dict | None) -> None:
    objective = norm["objective"]
    if objective == "goodput" and not ((bench or {}).get("slo") or {}):
        raise PlanError(
            "sglang_layout_search.objective goodput needs sglang_bench_slo (e.g. {ttft_p99_ms: 2000, itl_p99_ms: 50})"
        )
    if objective == "cost_per_mtok" and not (bench or {}).get("gpu_hour_cost"):
        raise PlanError(
            "sglang_layout_search.objective cost_per_mtok needs sglang_gpu_hour_cost ($ per GPU-hour)"
        )


def shape_key(lay: dict) -> str:
    """What makes two layouts the same engine (names aside): the planner's normalised keys."""
    if "pd" in lay:
        return json.dumps({"pd": pd_shape_key(lay)}, sort_keys=True)
    n = normalize_layout({**lay, "name": "x"})
    keep = {k: n[k] for k in ("tp", "pp", "ep", "dp", "nnodes", "replicas")}
    keep["enable_dp_attention"] = bool(n["enable_dp_attention"] and n["dp"] > 1)
    keep["args"] = {knob_key(str(k)): str(v) for k, v in sorted(n["args"].items())}
    keep["engine"] = n["engine"]
    return json.dumps(keep, sort_keys=True)


def _figures(entry: dict, objective: str) -> tuple:
    """Higher is better on each: single, peak, KV tokens, fewer GPUs, and the objective's own value (a
    goodput under an ITL bound may favour a candidate that is slower at its peak, a pd layout's)."""
    speed = entry.get("speed") or {}
    value = entry.get("value")
    return (
        speed.get("single_tok_s") or 0.0,
        speed.get("peak_tok_s") or 0.0,
        entry["memory"].get("kv_tokens_total") or 0,
        -(entry.get("gpus_used") or 0),
        float("-inf") if value is None else (-value if lower_is_better(objective) else value),
    )


def _dominated(entries: list[dict], objective: str) -> set[int]:
    """Indices of entries another entry beats on one figure and matches or beats on every other (no
    more GPUs). Exact ties stay: the model cannot tell them apart, a measurement can. Named
    (hand-written) layouts are never dropped."""
    by_figures: dict[tuple, list[int]] = {}
    for i, e in enumerate(entries):
        by_figures.setdefault(_figures(e, objective), []).append(i)
    distinct = sorted(by_figures, reverse=True)
    front: list[tuple] = []
    out = set()
    for f in distinct:
        if any(g != f and all(a >= b for a, b in zip(g, f, strict=True)) for g in front):
            out.update(i for i in by_figures[f] if not entries[i].get("named"))
            continue
        front.append(f)
    return out


def memory_of(plan: dict) -> dict:
    return {
        "weights_gib_per_gpu": plan.get("weights_gib_per_gpu"),
        "budget_gib": plan.get("budget_gib"),
        "kv_tokens": plan.get("kv_tokens"),
        "kv_tokens_total": plan.get("kv_tokens_total"),
    }


class Predictor:
    """The speed model's prediction of a planned layout, computed once per distinct input (the many
    candidates that differ only in a knob the model does not read share one)."""

    def __init__(self, hardware: dict, bench: dict | None):
        self.hardware = hardware
        self.bench = bench
        self.cache: dict[str, tuple] = {}

    def __call__(self, plan: dict) -> dict | None:
        from ..speed import prediction_key

        key = prediction_key(plan, self.hardware, self.bench)
        if key not in self.cache:
            speed, _why = (predict_pd if plan.get("pd") else predict_speed)(plan, self.hardware, self.bench)
            if speed:
                speed["hardware"] = {
                    k: self.hardware.get(k)
                    for k in ("gpu_name", "gpu_memory_bandwidth_gbs", "gpu_interconnect", "gpu_memory_gib")
                }
            self.cache[key] = (speed,)
        speed = self.cache[key][0]
        return json.loads(json.dumps(speed)) if speed else None


def run(
    search,
    named_layouts: list[dict],
    spec,
    hardware: dict,
    serving: dict,
    cluster: dict,
    sglang_version: str | None,
    bench: dict | None,
) -> tuple[dict, list[dict]]:
    """(the plan JSON's search section, the candidate layouts to plan and sweep: the shortlist).

    named_layouts: the inventory's own layouts (sglang_layouts): ranked beside the candidates and
    never dropped, so that the table shows where they stand."""
    from .planner import plan_layout

    norm = normalize_search(search, hardware, cluster, sglang_version)
    check_objective_inputs(norm, bench)
    objective = norm["objective"]
    named_keys = {}
    for lay in named_layouts:
        try:
            named_keys.setdefault(shape_key(lay), lay["name"])
        except PlanError:
            continue  # the planner names it when it plans the layout itself
    if norm["pd"] is not None and str(serving.get("host") or "127.0.0.1") in LOOPBACK:
        # servers that bind loopback serve only a router on their own host (validate.check_pd_reach)
        norm["pd_hosts"] = 1
    role_fits: dict[str, bool] = {}

    def role_ok(shape: dict, knobs: dict) -> bool:
        """A pd role's shape, with the knobs, as a layout of its own: allowed by the rules and fits
        (its weights and KV pool are a role's; once per shape and knobs, not per pair)."""
        key = json.dumps([shape, knobs], sort_keys=True, default=str)
        if key not in role_fits:
            try:
                role = plan_layout(
                    {"name": "role", **shape, "args": knobs}, spec, hardware, serving, cluster, sglang_version
                )
                role_fits[key] = role["verdict"] == "fits"
            except PlanError:
                role_fits[key] = False
        return role_fits[key]

    cands = candidates(norm, role_ok, lambda pd: pd_tp_problems(pd, spec))
    dropped = {k: 0 for k in REASONS}
    last = {}
    entries = []
    predictor = Predictor(hardware, bench)
    gpu_count = int(hardware["gpu_count"])
    same_as_named = 0
    shape_reasons: dict[tuple, list[str]] = {}
    shapes: dict[tuple, tuple] = {}
    for lay in cands:
        if named_keys and shape_key(lay) in named_keys:
            same_as_named += 1
            continue  # the inventory's layout stands for it (planned below under its own name)
        if "pd" in lay:
            problems = []  # pd_candidates made it of shapes the rules allow, with GPUs that pass gpus:
        else:
            # the planner's arithmetic of GPUs (rules.parallel_shape), before the full plan; once per shape
            shape = (
                lay["tp"],
                lay["pp"],
                lay["dp"],
                lay["ep"],
                lay["enable_dp_attention"],
                lay["nnodes"],
                lay["replicas"],
            )
            if shape not in shapes:
                normalized = normalize_layout({k: v for k, v in lay.items() if k != "args"})
                shapes[shape] = (normalized, parallel_shape(normalized))
            normalized, par = shapes[shape]
            used = par["gpus_per_engine"] * par["replicas"]
            if not gpus_pass(used, gpu_count, norm["gpus"]):
                dropped["gpus"] += 1
                last["gpus"] = (
                    f"{lay['name']}: uses {used} GPUs, outside gpus {norm['gpus'] or 'all (whole hosts)'}"
                )
                continue
            # the planner's parallelism rules (rules.layout_problems) read the shape, never args:
            # a shape they refuse is refused with every knob value, so it is checked once
            if shape not in shape_reasons:
                shape_reasons[shape] = layout_problems(normalized, par, spec, hardware)[0]
            problems = shape_reasons[shape]
        if problems:
            dropped["invalid"] += 1
            last["invalid"] = problems[0]
            continue
        plan = plan_layout(lay, spec, hardware, serving, cluster, sglang_version)
        if plan["verdict"] != "fits":
            reason = "invalid" if plan["verdict"] == "invalid" else "does_not_fit"
            dropped[reason] += 1
            # the deciding reason: an invalid layout's first rule, a memory verdict's own (the last)
            texts = plan["reasons"] or [f"{lay['name']}: {plan['verdict']}"]
            last[reason] = texts[0] if reason == "invalid" else texts[-1]
            continue
        speed = predictor(plan)
        entries.append(_entry(lay, plan, speed, objective, bench))
    unranked: dict[str, str] = {}
    for lay in named_layouts:
        try:
            plan = plan_layout(lay, spec, hardware, serving, cluster, sglang_version)
        except PlanError:
            continue
        if plan["verdict"] == "fits":
            e = _entry(lay, plan, predictor(plan), objective, bench)
            e["named"] = True
            entries.append(e)
        else:
            unranked[lay["name"]] = plan["verdict"]
    if not any(not e.get("named") for e in entries):
        gone = [k for k in ("does_not_fit", "invalid", "gpus") if dropped[k]]
        why = last[gone[0]] if gone else "the search space is empty"
        first = why.split(". ")[0].rstrip(".")
        raise PlanError(
            f"sglang_layout_search yields no valid layout: all {len(cands)} candidates were dropped "
            f"({', '.join(f'{dropped[k]} {k}' for k in gone) or 'none planned'}); the rule that removed the last: "
            f"{first if len(first) <= 220 else first[:217] + '...'}. Widen vary:, knobs: or gpus:."
        )
    for i in sorted(_dominated(entries, objective), reverse=True):
        entries.pop(i)
        dropped["dominated"] += 1
    rank_entries(entries, objective)
    shortlist = pick_shortlist(entries, max(norm["top_k"], norm["budget"]), objective)
    section = {
        "objective": objective,
        "objective_text": OBJECTIVES[objective],
        "top_k": norm["top_k"],
        "budget": norm["budget"],
        "candidates": len(cands),
        "ranked": entries,
        "dropped": dropped,
        "dropped_text": REASONS,
        # candidates that are one of the inventory's layouts: ranked under the inventory's name
        "same_as_named": same_as_named,
        "last_dropped": last,
        "shortlist": [e["name"] for e in shortlist],
        "named": [e["name"] for e in entries if e.get("named")],
        # the inventory's layouts that do not fit or are invalid (the plan's table says why)
        "named_unranked": unranked,
        "predictions": len(predictor.cache),
    }
    return section, [dict(e["layout"], name=e["name"]) for e in shortlist]


def pick_shortlist(entries: list[dict], size: int, objective: str) -> list[dict]:
    """The first `size` ranked candidates (named layouts are measured anyway), one of each exact tie
    first: candidates with the same figures (say, prefill roles that differ only in their ep, which
    the model does not price) would teach a measurement one thing several times. A tie's later
    members get `tie_of`, the candidate they tie with, and fill the shortlist only when no distinct
    candidate is left."""
    first: dict[tuple, str] = {}
    distinct, ties = [], []
    for e in entries:
        if e.get("named"):
            continue
        figures = _figures(e, objective)
        if figures in first:
            e["tie_of"] = first[figures]
            ties.append(e)
        else:
            first[figures] = e["name"]
            distinct.append(e)
    return (distinct + ties)[:size]


def _entry(lay: dict, plan: dict, speed: dict | None, objective: str, bench: dict | None) -> dict:
    layout = {k: v for k, v in lay.items() if k != "name"}
    return {
        "name": lay["name"],
        "layout": layout,
        "speed": speed,
        "memory": memory_of(plan),
        "gpus_used": plan["gpus_used"],
        "value": objective_value(objective, speed, plan["gpus_used"], bench),
    }


def rank_entries(entries: list[dict], objective: str, key: str = "value", rank_key: str = "rank") -> None:
    """Sort in place by the objective (best first; unknown last), then fewer GPUs, then name."""
    low = lower_is_better(objective)

    def order(e):
        v = e.get(key)
        if v is None:
            return (1, 0.0, e.get("gpus_used") or 0, e["name"])
        return (0, v if low else -v, e.get("gpus_used") or 0, e["name"])

    entries.sort(key=order)
    for i, e in enumerate(entries, 1):
        e[rank_key] = i


def shortlist_marks(plans: list[dict], section: dict) -> None:
    """Each shortlisted candidate's plan entry says so (the sweep measures these, named ones first)."""
    by_name = {e["name"]: e for e in section["ranked"]}
    for p in plans:
        e = by_name.get(p["name"])
        if e is not None and not e.get("named"):
            p["search"] = {
                "rank_predicted": e["rank"],
                "value_predicted": e["value"],
                "objective": section["objective"],
            }
