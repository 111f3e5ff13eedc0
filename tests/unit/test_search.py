"""The layout search (plan/search.py, plan/calibrate.py): enumeration through the planner's own rules,
the ranking, the names, the refit on measured levels, the stop rule, Kendall tau, the report section."""

import json

import pytest
import yaml
from sglang_layouts import speed
from sglang_layouts.estimate.model import PlanError
from sglang_layouts.names import layout_name_problem
from sglang_layouts.plan import calibrate, planner, search, table
from sglang_layouts.report import results

from tests.helpers.demo import DEMO_SERVING, SEED_BOX

GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
BENCH = {"concurrency": [1, 4, 16], "input_len": 64, "output_len": 16}


def _inputs(repo, search_spec, layouts=None, hosts=("seed-box",)):
    return {
        "host": hosts[0],
        "model": {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")},
        "layouts": layouts if layouts is not None else [],
        "hardware": {**SEED_BOX, "gpu_name": GPU},
        "serving": DEMO_SERVING,
        "cluster": {
            "group": "g",
            "hosts": list(hosts),
            "addresses": [f"10.0.0.{i}" for i in range(len(hosts))],
        },
        "bench": BENCH,
        "search": search_spec,
    }


@pytest.fixture(scope="module")
def demo_layouts(repo):
    return yaml.safe_load((repo / "inventory/demo/group_vars/sglang_hosts.yml").read_text())["sglang_layouts"]


@pytest.fixture(scope="module")
def peak_plan(repo, demo_layouts):
    return planner.plan_host(_inputs(repo, {"objective": "peak"}, demo_layouts))


def test_every_candidate_is_ranked_or_counted_and_the_planner_decides_which(repo, peak_plan):
    sec = peak_plan["search"]
    auto = [e for e in sec["ranked"] if not e.get("named")]
    assert sec["candidates"] == len(auto) + sum(sec["dropped"].values()) + sec["same_as_named"]
    assert sec["dropped"]["invalid"] > 0 and sec["dropped"]["does_not_fit"] > 0
    spec = planner.load_model({"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")})
    for e in sec["ranked"]:
        assert set(e) >= {"name", "layout", "speed", "memory", "rank", "value"}
        # the planner itself says it fits
        again = planner.plan_layout(
            {**e["layout"], "name": e["name"]}, spec, {**SEED_BOX, "gpu_name": GPU}, DEMO_SERVING
        )
        assert again["verdict"] == "fits" and e["memory"]["kv_tokens"] == again["kv_tokens"]
    # an invalid shape is never ranked: ep must divide tp (the planner's rule)
    assert not any(e["layout"].get("ep", 1) > e["layout"].get("tp", 1) for e in auto)


def test_the_ranking_follows_the_objective_and_shows_the_hand_written_layouts(peak_plan, demo_layouts):
    sec = peak_plan["search"]
    values = [e["value"] for e in sec["ranked"]]
    assert values == sorted(values, reverse=True)
    assert [e["rank"] for e in sec["ranked"]] == list(range(1, len(values) + 1))
    fitting_named = {e["name"] for e in peak_plan["layouts"] if e["verdict"] == "fits" and "search" not in e}
    assert {e["name"] for e in sec["ranked"] if e.get("named")} == fitting_named
    # the shortlist is the best of the generated ones, and it joins the plan's layouts marked
    auto = [e["name"] for e in sec["ranked"] if not e.get("named")]
    assert sec["shortlist"] == auto[:3]
    marked = [e["name"] for e in peak_plan["layouts"] if "search" in e]
    assert marked == sec["shortlist"]
    lines = table.plan_table(peak_plan)
    assert any(line.startswith("search: ") for line in lines)
    assert any("hand-written" in line and "tp8" in line for line in lines)
    assert any(line.strip().startswith("dropped:") and "invalid" in line for line in lines)
    assert sec["named_unranked"] == {"tp4ep2": "oom", "tp2ep4": "invalid"}
    assert any("hand-written, not ranked: tp4ep2 (oom), tp2ep4 (invalid)" in line for line in lines)


def test_single_ranks_by_single_request_speed(repo, demo_layouts):
    doc = planner.plan_host(_inputs(repo, {"objective": "single"}, demo_layouts))
    singles = [e["speed"]["single_tok_s"] for e in doc["search"]["ranked"]]
    assert singles == sorted(singles, reverse=True)


def test_cost_per_mtok_ranks_cheapest_first_from_gpu_hours_and_peak(repo, demo_layouts, peak_plan):
    inputs = _inputs(repo, {"objective": "cost_per_mtok"}, demo_layouts)
    inputs["bench"] = {**BENCH, "gpu_hour_cost": 2.5}
    sec = planner.plan_host(inputs)["search"]
    ranked = [e for e in sec["ranked"] if e["value"] is not None]
    assert len(ranked) > 3
    # $ per 1M output tokens: GPU-hours spent per token at the predicted peak (results.cost_per_mtok)
    for e in ranked:
        expected = 2.5 * e["gpus_used"] / 3600.0 / e["speed"]["peak_tok_s"] * 1e6
        assert e["value"] == pytest.approx(expected)
    values = [e["value"] for e in ranked]
    assert values == sorted(values)  # lower is better: the cheapest first
    assert [e["rank"] for e in sec["ranked"]] == list(range(1, len(sec["ranked"]) + 1))
    assert sec["shortlist"] == [e["name"] for e in sec["ranked"] if not e.get("named")][:3]
    # Kimi fills the box (every candidate uses 8 GPUs): then cost follows peak speed alone
    assert {e["gpus_used"] for e in ranked} == {8}
    peak_rank = {e["name"]: e["rank"] for e in peak_plan["search"]["ranked"]}
    common = [e["name"] for e in ranked if e["name"] in peak_rank]
    assert common == sorted(common, key=peak_rank.get)


def test_cost_per_mtok_prefers_fewer_gpus_over_a_faster_peak():
    bench = {"gpu_hour_cost": 2.0}
    entries = []
    for name, gpus, peak in (("tp8", 8, 1500.0), ("tp4", 4, 1000.0), ("tp2", 2, None)):
        speed = {"peak_tok_s": peak, "single_tok_s": 10.0} if peak else None
        value = search.objective_value("cost_per_mtok", speed, gpus, bench)
        entries.append({"name": name, "gpus_used": gpus, "value": value})
    search.rank_entries(entries, "cost_per_mtok")
    # 4 GPUs at 1000 tok/s cost $2.22 per 1M tokens, 8 at 1500 $2.96; no prediction ranks last
    assert [(e["name"], e["rank"]) for e in entries] == [("tp4", 1), ("tp8", 2), ("tp2", 3)]
    assert entries[0]["value"] == pytest.approx(2.0 * 4 / 3600 / 1000 * 1e6)
    search.rank_entries(entries, "peak", key="value")  # the same figures read as a peak: higher first
    assert [e["name"] for e in entries][:2] == ["tp8", "tp4"]


def test_cost_per_mtok_without_a_gpu_hour_cost_is_refused(repo):
    with pytest.raises(PlanError) as e:
        planner.plan_host(_inputs(repo, {"objective": "cost_per_mtok"}))
    assert "needs sglang_gpu_hour_cost" in str(e.value)


def test_knobs_make_named_candidates_and_the_names_pass_the_name_rule(repo):
    spec = {
        "vary": {"tp": [8], "pp": [1], "dp": [1], "ep": [1, 8]},
        "knobs": {"kv_cache_dtype": ["auto", "fp8_e4m3"], "chunked_prefill_size": [4096, 8192]},
        "top_k": 2,
    }
    doc = planner.plan_host(_inputs(repo, spec))
    sec = doc["search"]
    assert sec["candidates"] == 8
    names = [e["name"] for e in sec["ranked"]]
    assert "auto-8x1x1-kv_cache_dtype=fp8_e4m3-chunked_prefill_size=4096" in names
    for e in sec["ranked"]:
        assert layout_name_problem(e["name"]) is None and e["name"].startswith("auto-8x1x1")
    # fp8 KV holds more tokens than bf16 KV (the planner's memory model), so a bf16 KV candidate
    # is dominated by its fp8 twin unless it is predicted faster
    kv = {}
    for e in sec["ranked"]:
        kv.setdefault(e["layout"]["args"]["kv_cache_dtype"], []).append(e)
    assert "fp8_e4m3" in kv and sec["dropped"]["dominated"] + len(sec["ranked"]) == 8
    # the shortlisted ones are planned with their knobs on the command line
    entry = next(e for e in doc["layouts"] if "search" in e)
    assert "--chunked-prefill-size" in entry["argv"]


def test_layout_names_map_what_a_name_cannot_carry():
    name = search.layout_name(
        {"tp": 4, "pp": 2, "dp": 2, "ep": 2, "enable_dp_attention": True}, {"x": "a/b c"}
    )
    assert name == "auto-4x2x2-ep2-dpa-x=a_b_c" and layout_name_problem(name) is None
    long = search.layout_name({"tp": 1, "pp": 1, "dp": 1}, {f"knob_{i}": "v" * 20 for i in range(6)})
    assert len(long) <= 128 and long.startswith("auto-1x1x1-k") and layout_name_problem(long) is None


@pytest.mark.parametrize(
    "spec, needle",
    [
        ({"objective": "fastest"}, "objective 'fastest' does not exist"),
        ({"budget": 0}, "budget must be at least 1"),
        ({"top_k": 0}, "top_k must be a whole number >= 1"),
        ({"knobs": {"no_such_flag": [1]}}, "no flag --no-such-flag"),
        ({"knobs": {"kv_cache_dtype": ["fp9"]}}, "--kv-cache-dtype must be one of"),
        ({"vary": {"kv_cache_dtype": ["fp8_e4m3"]}}, "put serving flags under knobs"),
        ({"objective": "goodput"}, "needs sglang_bench_slo"),
        ({"gpus": 3, "vary": {"tp": [8], "pp": [1], "dp": [1], "ep": [1]}}, "1 gpus"),
        ("peak", "must be a mapping"),
    ],
)
def test_bad_searches_are_refused_before_anything_is_planned(repo, spec, needle):
    with pytest.raises(PlanError, match=None) as e:
        planner.plan_host(_inputs(repo, spec))
    assert needle in str(e.value)


def test_the_dominated_never_include_a_hand_written_layout():
    base = {"memory": {"kv_tokens_total": 10}, "gpus_used": 8}
    entries = [
        {**base, "name": "a", "speed": {"single_tok_s": 10, "peak_tok_s": 100}},
        {**base, "name": "b", "speed": {"single_tok_s": 5, "peak_tok_s": 50}},
        {**base, "name": "c", "speed": {"single_tok_s": 5, "peak_tok_s": 50}, "named": True},
        {**base, "name": "d", "speed": {"single_tok_s": 10, "peak_tok_s": 100}},
        {**base, "name": "e", "speed": {"single_tok_s": 1, "peak_tok_s": 200}},
    ]
    # b is beaten by a on both figures; d ties a exactly (kept); c is hand-written (kept)
    assert search._dominated(entries, "peak") == {1}


def test_the_objectives_own_value_keeps_a_candidate_from_being_dominated():
    """Goodput under an SLO can rank first a candidate that is slower at single and peak (a pd
    layout's decode free of prefill chunks): the objective's value is one of the figures."""
    base = {"memory": {"kv_tokens_total": 10}, "gpus_used": 8}
    entries = [
        {**base, "name": "fast", "speed": {"single_tok_s": 10, "peak_tok_s": 100}, "value": 40.0},
        {**base, "name": "steady", "speed": {"single_tok_s": 9, "peak_tok_s": 90}, "value": 80.0},
        {**base, "name": "slow", "speed": {"single_tok_s": 9, "peak_tok_s": 90}, "value": 30.0},
    ]
    assert search._dominated(entries, "goodput") == {2}
    # lower is better for cost: the cheaper one stays
    cost = [dict(e, value=1 / e["value"]) for e in entries]
    assert search._dominated(cost, "cost_per_mtok") == {2}


# --- calibration --------------------------------------------------------------------------------


def _record(plan_entry, host, scale, run="r1", with_search=None):
    """A measured record of a plan entry whose every level ran at `scale` x the prediction."""
    sp = plan_entry["speed"]
    levels = [
        {"concurrency": int(c), "output_tok_s": v["output_tok_s"] * scale}
        for c, v in sp["by_concurrency"].items()
    ]
    peak = max(lv["output_tok_s"] for lv in levels)
    bench = {
        "summary": {"single_request_tok_s": sp["single_tok_s"] * scale, "peak_output_tok_s": peak},
        "levels": levels,
    }
    plan = dict(plan_entry)
    if with_search is not None:
        plan["search"] = with_search
    return results.build_record(run, host, plan_entry["name"], "ok", plan=plan, bench=bench)


def test_refit_recovers_a_uniform_slowdown_within_its_bounds(peak_plan):
    tp8 = next(e for e in peak_plan["layouts"] if e["name"] == "tp8")
    pp8 = next(e for e in peak_plan["layouts"] if e["name"] == "pp8")
    recs = [_record(tp8, "seed-box", 0.8), _record(pp8, "seed-box", 0.8)]
    fit = calibrate.refit(recs)
    assert fit["error_before"] == pytest.approx(0.25, abs=0.01)
    assert fit["error_after"] < 0.05 and fit["points"] == 8
    assert all(lo <= fit["scales"][f] <= hi for f, (_, (lo, hi)) in calibrate.FACTORS.items())
    assert fit["scales"]["memory"] < 1.0
    # the table is what it was outside the fit
    assert (
        speed.c("eta_weights") == speed.CONSTANTS["eta_weights"][0]
        and speed.CONSTANTS["eta_weights"][1] != "FIT"
    )
    # a far larger miss than the bounds allow: the fit stops at a bound and says the error left
    far = calibrate.refit([_record(tp8, "seed-box", 0.05)])
    assert far["error_after"] > 1.0 and far["scales"]["memory"] == pytest.approx(0.5, abs=0.01)


def _plans(doc):
    return {p["name"]: p for p in doc["layouts"]}


def test_step_picks_the_best_predicted_then_stops_by_rule_or_budget(repo, demo_layouts):
    doc = planner.plan_host(_inputs(repo, {"objective": "peak", "top_k": 3, "budget": 2}, demo_layouts))
    sec = doc["search"]
    replanned = planner.plan_host(
        {**_inputs(repo, None, [dict(e["layout"], name=e["name"]) for e in sec["ranked"]])}
    )
    plans = _plans(replanned)
    hw = doc["hardware"]
    # nothing measured: the best predicted shortlisted candidate
    first = calibrate.step(sec, plans, [], hw, BENCH)
    assert not first["stop"] and first["next"] == sec["shortlist"][0]
    assert first["search"]["rank_predicted"] == next(
        e["rank"] for e in sec["ranked"] if e["name"] == first["next"]
    )
    # the hand-written tp8 measured 3x its prediction: nothing left can beat it
    tp8 = _record(plans["tp8"], "seed-box", 3.0)
    stop = calibrate.step({**sec, "top_k": 0}, plans, [tp8], hw, BENCH)
    assert stop["stop"] and "no unmeasured candidate is predicted to beat tp8" in stop["why"]
    # within top_k the candidate is measured all the same
    assert not calibrate.step(sec, plans, [tp8], hw, BENCH)["stop"]
    # measured as predicted: the next candidate can still win; the budget ends it after two
    exact = _record(plans["pp8"], "seed-box", 1.0)
    go = calibrate.step(sec, plans, [exact], hw, BENCH)
    assert not go["stop"] and go["next"] == sec["shortlist"][0] and go["calibration"]["error_after"] < 0.01
    done = [
        _record(plans[n], "seed-box", 1.0, with_search={"rank_predicted": 1}) for n in sec["shortlist"][:2]
    ]
    spent = calibrate.step(sec, plans, [exact, *done], hw, BENCH)
    assert spent["stop"] and "budget is spent (2 of 2" in spent["why"]


def test_candidates_over_several_hosts_have_their_own_loop_and_budget(repo, tmp_path):
    spec = {
        "objective": "peak",
        "vary": {"tp": [8, 16], "pp": [1], "dp": [1], "ep": [1], "nnodes": [1, 2]},
        "top_k": 4,
        "budget": 2,
    }
    inputs = _inputs(repo, spec, [], hosts=("node-a", "node-b"))
    doc = planner.plan_host(inputs)
    entries = _plans(doc)
    spanning = [n for n in doc["search"]["shortlist"] if entries[n]["placement"]["spans"]]
    own = [n for n in doc["search"]["shortlist"] if not entries[n]["placement"]["spans"]]
    assert len(spanning) == 2 and own

    def step(spans):
        return calibrate.sweep_step(doc, inputs, str(tmp_path), "r1", "node-a", spans)

    # each loop picks only its own kind, the best predicted first
    assert step(False)["next"] == own[0]
    first = step(True)
    assert first["next"] == spanning[0] and first["spent"] == 0
    # the step's search block goes into the plan entry that sweep_layout.yml reads by name
    marked = calibrate.with_search(doc, first["next"], first["search"])
    assert _plans(marked)[first["next"]]["search"] == first["search"]
    assert _plans(marked)[own[0]] == entries[own[0]]
    # measured over both hosts: its record, even under the other host, counts for the loop over
    # hosts only; the host's own loop keeps its whole budget
    rec = _record(entries[spanning[0]], "node-b", 1.0, with_search=first["search"])
    results.write_record(str(tmp_path), rec)
    second = step(True)
    assert second["next"] == spanning[1] and second["spent"] == 1
    assert step(False)["spent"] == 0 and step(False)["next"] == own[0]
    results.write_record(
        str(tmp_path), _record(entries[spanning[1]], "node-a", 1.0, with_search=second["search"])
    )
    done = step(True)
    assert done["stop"] and "budget is spent (2 of 2" in done["why"]
    assert not step(False)["stop"]


def test_kendall_tau():
    assert calibrate.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert calibrate.kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0
    assert calibrate.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3, abs=1e-4)
    assert calibrate.kendall_tau([1], [1]) is None


def test_report_section_sets_predicted_before_and_after_beside_measured(peak_plan):
    plans = _plans(peak_plan)
    name = peak_plan["search"]["shortlist"][0]
    recs = [
        _record(plans["tp8"], "seed-box", 0.5),
        _record(plans["pp8"], "seed-box", 0.5),
        _record(
            plans[name],
            "seed-box",
            0.5,
            with_search={"rank_predicted": 4, "rank_after_calibration": 2, "objective": "peak"},
        ),
    ]
    sec = calibrate.report_section(recs)
    assert sec["objective"] == "peak" and len(sec["rows"]) == 3
    assert sec["kendall_tau"] == 1.0 and sec["predicted_best_was_best"] is True
    for row in sec["rows"]:
        assert row["measured"] == pytest.approx(row["predicted"] * 0.5, rel=0.01)
        assert abs(row["predicted_after_calibration"] / row["measured"] - 1) < abs(
            row["predicted"] / row["measured"] - 1
        )
    assert json.dumps(sec)
    # no search in the run: no section
    assert calibrate.report_section(recs[:2]) is None


def test_a_named_pd_layout_is_ranked_with_its_own_prediction(repo):
    """A fitting pd layout of the inventory is ranked beside the candidates by speed.predict_pd (its
    pools), not by a plain layout's model, and two pd layouts never share a cached prediction."""
    hw = {**SEED_BOX, "gpu_memory_gib": 192}
    layouts = [
        {"name": "pd44", "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}}},
        {
            "name": "pd44tcp",
            "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}, "transfer_backend": "mooncake_tcp"},
        },
    ]
    doc = planner.plan_host(
        {**_inputs(repo, {"objective": "peak"}, layouts), "hardware": {**hw, "gpu_name": GPU}}
    )
    ranked = {e["name"]: e for e in doc["search"]["ranked"] if e.get("named")}
    assert set(ranked) == {"pd44", "pd44tcp"}
    a, b = ranked["pd44"]["speed"], ranked["pd44tcp"]["speed"]
    assert (
        a["pd"]["kv_transfer"]["link"]["name"] == "pcie" and b["pd"]["kv_transfer"]["link"]["name"] == "tcp"
    )
    assert b["pd"]["kv_transfer"]["ms_per_request"] > a["pd"]["kv_transfer"]["ms_per_request"]
    assert a["peak_tok_s"] == next(p for p in doc["layouts"] if p["name"] == "pd44")["speed"]["peak_tok_s"]
