"""The layout search's pd candidates (plan/search_pd.py): prefill and decode pools of the vary: shapes,
through the planner's own rules, ranked by speed.predict_pd beside the aggregated candidates."""

import pytest
from sglang_layouts.estimate.model import PlanError
from sglang_layouts.names import layout_name_problem
from sglang_layouts.plan import calibrate, pd, planner
from sglang_layouts.plan.inputs import normalize_layout
from sglang_layouts.plan.rules import parallel_shape

H200 = {"gpu_count": 8, "gpu_memory_gib": 139.8, "gpu_interconnect": "nvlink", "gpu_name": "NVIDIA H200"}
SERVING = {"mem_fraction_static": 0.88, "context_length": 32768, "host": "127.0.0.1", "base_port": 30000}
# Long prompts under an ITL bound: where a decode pool free of prefill chunks earns its GPUs.
LONG = {"concurrency": [1, 4, 16, 64], "input_len": 4096, "output_len": 256, "slo": {"itl_p99_ms": 15}}
SHORT = {"concurrency": [1, 4, 16, 64], "input_len": 64, "output_len": 16}


def _plan(repo, search, model="qwen3-30b-a3b", bench=LONG, layouts=(), hosts=("h",), serving=SERVING):
    return planner.plan_host(
        {
            "host": hosts[0],
            "model": {"name": model, "path": str(repo / "models" / model)},
            "layouts": list(layouts),
            "hardware": H200,
            "serving": serving,
            "cluster": {"group": "g", "hosts": list(hosts)},
            "bench": bench,
            "search": search,
        }
    )


@pytest.fixture(scope="module")
def goodput_plan(repo):
    return _plan(repo, {"objective": "goodput", "pd": True})


def test_pd_candidates_are_generated_only_with_pd_and_named_by_their_roles(repo, goodput_plan):
    plain = _plan(repo, {"objective": "goodput"})
    assert not any(e["name"].startswith("auto-pd-") for e in plain["search"]["ranked"])
    ranked = goodput_plan["search"]["ranked"]
    pd = [e for e in ranked if e["name"].startswith("auto-pd-")]
    assert pd
    assert goodput_plan["search"]["candidates"] > plain["search"]["candidates"]
    for e in pd:
        assert layout_name_problem(e["name"]) is None
        roles = e["layout"]["pd"]
        pre, dec = roles["prefill"], roles["decode"]
        # the name says the roles: p<tp>x1x<dp>...+d<tp>x1x<dp>..., -r<n> past one replica
        p_text, d_text = e["name"].removeprefix("auto-pd-p").split("+d")
        assert p_text.startswith(f"{pre['tp']}x1x{pre['dp']}") and d_text.startswith(
            f"{dec['tp']}x1x{dec['dp']}"
        )
        assert (f"-r{pre['replicas']}" in p_text) == (pre["replicas"] > 1)
        # GPUs of their own that fill the host (gpus: all): the roles' GPUs as the rules count them
        gpus = {
            r: parallel_shape(
                normalize_layout({"name": r, **{k: v for k, v in roles[r].items() if k != "replicas"}})
            )["gpus_per_engine"]
            * roles[r]["replicas"]
            for r in ("prefill", "decode")
        }
        assert e["gpus_used"] == gpus["prefill"] + gpus["decode"] == 8
        # Qwen3 is GQA: SGLang's KV transfer needs one tp on both sides, so no other pair is generated
        assert pre["tp"] == dec["tp"]
        # ranked by the pd model: its pools and the KV link, saying how little of it real SGLang checked
        assert e["speed"]["pd"]["kv_transfer"]["link"]["name"] == "nvlink"
        assert any("NVLink links" in a and "unchecked" in a for a in e["speed"]["assumptions"])


def test_goodput_under_an_itl_bound_ranks_a_pd_layout_first(goodput_plan):
    """Under an ITL bound with 4k-token prompts, a prefill chunk in every decode batch breaks the
    bound at the aggregated layouts' high levels: a pd layout's goodput is the highest."""
    sec = goodput_plan["search"]
    first = sec["ranked"][0]
    assert first["name"].startswith("auto-pd-")
    best_agg = next(e for e in sec["ranked"] if not e["name"].startswith("auto-pd-"))
    assert first["value"] > best_agg["value"]
    # the shortlist's pd candidate joins the plan's layouts with its units: servers, then the router
    assert first["name"] in sec["shortlist"]
    entry = planner.layout_plan(goodput_plan, first["name"])
    assert entry["verdict"] == "fits" and entry["pd"]
    roles = [u["role"] for u in entry["units"]]
    assert roles[-1] == "router" and {"prefill", "decode"} <= set(roles)
    # a role on part of the host is the design: no "uses 4 of the 8 GPUs" note, and each role's
    # line keeps its own text after the layout's and the role's names
    for name in sec["shortlist"]:
        notes = planner.layout_plan(goodput_plan, name)["notes"]
        assert not any("of the 8 GPUs" in n for n in notes), notes


def test_a_roles_lines_keep_their_own_text():
    lines = pd.role_lines(
        "x",
        {
            "prefill": ["x-prefill: needs 2 GPUs: write tp: 2.", "x-prefill uses 4 of the 8 GPUs (...)."],
            "decode": ["a note of its own: kept whole"],
        },
    )
    assert lines == ["x: prefill: needs 2 GPUs: write tp: 2.", "x: decode: a note of its own: kept whole"]


def test_at_peak_on_short_prompts_the_aggregated_layouts_win(repo):
    sec = _plan(repo, {"objective": "peak", "pd": True}, bench=SHORT)["search"]
    assert not sec["ranked"][0]["name"].startswith("auto-pd-")
    assert sec["dropped"]["dominated"] > 0


def test_mla_pairs_may_differ_in_tp(repo):
    """Kimi K2.6's MLA latent is whole on every rank, so prefill and decode may differ in tp (a GQA
    model's may not: the first test)."""
    sec = _plan(
        repo,
        {"objective": "peak", "pd": True, "vary": {"ep": [1], "dp": [1]}},
        model="kimi-k2.6-cut8",
        bench=SHORT,
    )["search"]
    pd = [e["layout"]["pd"] for e in sec["ranked"] if e["name"].startswith("auto-pd-")]
    assert any(p["prefill"]["tp"] != p["decode"]["tp"] for p in pd)


def test_servers_that_bind_loopback_keep_a_pd_candidate_on_the_routers_host(repo):
    """Two hosts, servers on 127.0.0.1: the router could not reach a server on the other host
    (validate.check_pd_reach), so every pd candidate fits on one host's 8 GPUs."""
    two_hosts = {"objective": "goodput", "pd": True, "gpus": [2, 16], "vary": {"ep": [1], "dp": [1]}}
    sec = _plan(repo, two_hosts, hosts=("a", "b"))["search"]
    pd = [e for e in sec["ranked"] if e["name"].startswith("auto-pd-")]
    assert pd and max(e["gpus_used"] for e in pd) <= 8
    assert max(e["gpus_used"] for e in sec["ranked"]) == 16  # the aggregated ones span both
    # bound to every address (with an API key), the roles may take the other host
    reach = {**SERVING, "host": "0.0.0.0", "api_key_set": True}
    sec = _plan(repo, two_hosts, hosts=("a", "b"), serving=reach)
    assert max(e["gpus_used"] for e in sec["search"]["ranked"] if e["name"].startswith("auto-pd-")) > 8


def test_a_hand_written_pd_layout_stands_for_the_same_candidate_only(repo):
    named = {"name": "my-pd", "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}}}
    sec = _plan(repo, {"objective": "goodput", "pd": True}, layouts=[named])["search"]
    assert "auto-pd-p4x1x1+d4x1x1" not in {e["name"] for e in sec["ranked"]}
    assert "my-pd" in sec["named"] and sec["same_as_named"] == 1
    # the same role shapes on shared GPUs, or with another memory fraction, are other engines
    for other in (
        {"name": "shared", "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}, "share_gpus": True}},
        {"name": "mfs", "pd": {"prefill": {"tp": 4, "mem_fraction_static": 0.5}, "decode": {"tp": 4}}},
    ):
        sec = _plan(repo, {"objective": "goodput", "pd": True}, layouts=[other])["search"]
        assert "auto-pd-p4x1x1+d4x1x1" in {e["name"] for e in sec["ranked"]} and sec["same_as_named"] == 0


def test_vary_replicas_bounds_a_roles_replicas(repo):
    sec = _plan(repo, {"objective": "goodput", "pd": True, "vary": {"replicas": [1, 3]}})["search"]
    pd_roles = [e["layout"]["pd"] for e in sec["ranked"] if e["name"].startswith("auto-pd-")]
    assert pd_roles and {p[r]["replicas"] for p in pd_roles for r in ("prefill", "decode")} <= {1, 3}


@pytest.mark.parametrize(
    "pd, needle",
    [
        ("yes", "sglang_layout_search.pd must be true, false or a mapping"),
        ({"share_gpus": True}, "unknown key(s) share_gpus"),
        ({"prefill": {"tp": 2}}, "unknown key(s) prefill"),
        ({"transfer_backend": "carrier-pigeon"}, "'carrier-pigeon' is not one SGLang"),
        ({"router": {"policy": "fastest"}}, "pd.router.policy must be one of"),
    ],
)
def test_a_bad_pd_search_is_refused_before_anything_is_planned(repo, pd, needle):
    with pytest.raises(PlanError) as e:
        _plan(repo, {"objective": "peak", "pd": pd}, bench=SHORT)
    assert needle in str(e.value)
    assert "search-pd" not in str(e.value)


def test_the_sweeps_search_step_measures_the_pd_candidate_first(goodput_plan):
    """calibrate.step, the sweep's next-candidate rule, picks the shortlisted pd layout first (a layout
    on one host: the host's own loop, not the loop over several hosts)."""
    sec = goodput_plan["search"]
    plans = {p["name"]: p for p in goodput_plan["layouts"]}
    step = calibrate.step(sec, plans, [], goodput_plan["hardware"], LONG)
    assert step["next"] == sec["ranked"][0]["name"] and step["next"].startswith("auto-pd-")
    assert step["search"]["rank_predicted"] == 1
    assert calibrate.step(sec, plans, [], goodput_plan["hardware"], LONG, spans=True)["next"] is None


def test_the_shortlist_measures_one_of_each_exact_tie_before_the_next(goodput_plan):
    """Prefill roles that differ only in their ep are priced the same: the budget goes to distinct
    predictions first, and the table names what each tie stands beside."""
    from sglang_layouts.plan import search, table

    sec = goodput_plan["search"]
    by_name = {e["name"]: e for e in sec["ranked"]}
    shortlisted = [by_name[n] for n in sec["shortlist"]]
    figures = [search._figures(e, "goodput") for e in shortlisted]
    assert len(set(figures)) == len(figures) == sec["budget"]
    ties = [e for e in sec["ranked"] if e.get("tie_of")]
    assert ties, "the Qwen3 pd space has prefill-ep variants priced alike"
    for e in ties:
        leader = by_name[e["tie_of"]]
        assert leader["rank"] < e["rank"] and "tie_of" not in leader
        assert search._figures(leader, "goodput") == search._figures(e, "goodput")
        assert e["name"] not in sec["shortlist"]
    # the shortlist is still the best distinct ones in rank order
    distinct = [e for e in sec["ranked"] if not e.get("tie_of") and not e.get("named")]
    assert sec["shortlist"] == [e["name"] for e in distinct[: sec["budget"]]]
    tie_row = next(r for r in table.search_table(sec) if ties[0]["name"] in r)
    assert f"tie of {ties[0]['tie_of']}" in tie_row


def test_ties_fill_the_shortlist_only_when_no_distinct_candidate_is_left():
    from sglang_layouts.plan import search

    def entry(name, single, named=False):
        return {
            "name": name,
            "speed": {"single_tok_s": single, "peak_tok_s": 9.0},
            "memory": {},
            "gpus_used": 8,
            "value": 9.0,
            "named": named,
        }

    ranked = [entry("hand", 9.0, named=True), entry("a", 2.0), entry("a-ep2", 2.0), entry("b", 1.0)]
    assert [e["name"] for e in search.pick_shortlist(ranked, 2, "peak")] == ["a", "b"]
    assert [e["name"] for e in search.pick_shortlist(ranked, 5, "peak")] == ["a", "b", "a-ep2"]
    assert ranked[2]["tie_of"] == "a"


def test_a_measured_pd_layout_is_predicted_again_and_refits_the_model(goodput_plan):
    """A pd record keeps its roles as predict_pd reads them (the plan's speed.pd_inputs): calibration
    predicts it again at its own levels, and a pool slower than predicted moves the fit."""
    from sglang_layouts.report import results
    from sglang_layouts.report.speed_check import predict_again

    lay = next(p for p in goodput_plan["layouts"] if p.get("pd"))
    sp = lay["speed"]
    assert set(sp["pd_inputs"]) == {"transfer_backend", "hosts", "prefill", "decode"}
    levels = [
        {"concurrency": int(c), "output_tok_s": v["output_tok_s"] * 0.8}
        for c, v in sp["by_concurrency"].items()
    ]
    bench = {
        "summary": {
            "single_request_tok_s": sp["single_tok_s"] * 0.8,
            "peak_output_tok_s": max(v["output_tok_s"] for v in levels),
        },
        "levels": levels,
    }
    rec = results.build_record("r1", "h", lay["name"], "ok", plan=lay, bench=bench)
    again = predict_again(
        rec, {"concurrency": [1, 16], "input_len": LONG["input_len"], "output_len": LONG["output_len"]}
    )
    assert again["single_tok_s"] == sp["single_tok_s"]
    assert again["by_concurrency"]["16"] == sp["by_concurrency"]["16"]
    fit = calibrate.refit([rec])
    assert fit["layouts"] == [lay["name"]] and fit["points"] == len(levels) + 1
    assert fit["error_before"] == pytest.approx(0.25, abs=0.01)
    assert fit["error_after"] < fit["error_before"]
