"""The speed model (module_utils/sglang_layouts/speed.py) against real records and its own physics."""

import json
from pathlib import Path

import pytest
from sglang_layouts import speed
from sglang_layouts.gpu_specs import gpu_spec
from sglang_layouts.plan import planner
from sglang_layouts.report import speed_check

REPO = Path(__file__).resolve().parents[2]
# the seed's model as an inventory names it: the host's folder, the config read on the controller
KIMI_MODEL = {
    "name": "kimi-k2.6",
    "path": "/models/kimi-k2.6",
    "hf_config_file": str(REPO / "models/kimi-k2.6/config.json"),
}
RESULTS = REPO / "benchmarks" / "results" / "collectives-h200x2-2026-11-29.json"
DATA = REPO / "module_utils" / "sglang_layouts" / "data" / "collectives_nvlink.json"
QWEN_TP1 = REPO / "benchmarks/results/h200-2026-12-02/results/h200-qwen3-30b-a3b/gpu-host/tp1.json"
H200 = {"gpu_count": 1, "gpu_memory_gib": 139.8, "gpu_interconnect": "none", "gpu_name": "NVIDIA H200"}
SEED = {
    "gpu_count": 8,
    "gpu_memory_gib": 94.97,
    "gpu_interconnect": "pcie",
    "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
}


def plan(model: str, hw: dict, serving=None, **layout) -> dict:
    spec = planner.load_model({"name": model, "hf_config_file": str(REPO / "models" / model / "config.json")})
    return planner.plan_layout({"name": "t", **layout}, spec, hw, serving or {"max_running_requests": 64})


def test_the_nvlink_figures_are_the_measured_ones():
    data, res = json.loads(DATA.read_text()), json.loads(RESULTS.read_text())
    assert data["source"] == "benchmarks/results/collectives-h200x2-2026-11-29.json"
    (row,) = [
        r
        for r in res["cuda_graph"]["results"]
        if (r["op"], r["bytes"], r["world_size"]) == ("all_reduce", 8192, 2)
    ]
    assert (
        speed.INTERCONNECTS["nvlink"]["alpha_us"]
        == row["time_us"]
        == data["ops"]["all_reduce"]["2"]["latency_us"]
    )


def test_the_h200_qwen_record_is_predicted_within_15_percent():
    """Qwen3-30B-A3B bf16, TP1, dummy weights, 256/256: the record's c1/c16/c64 output tok/s.
    No constant of the model was fitted to these figures (docs/cost-model.md)."""
    rec = json.loads(QWEN_TP1.read_text())
    cfg = rec["bench_config"]
    p = plan("qwen3-30b-a3b", H200, tp=1, args={"load_format": "dummy"})
    pred, why = speed.predict(
        p,
        H200,
        {"concurrency": cfg["concurrency"], "input_len": cfg["input_len"], "output_len": cfg["output_len"]},
    )
    assert why is None
    for level in rec["levels"]:
        got = pred["by_concurrency"][str(level["concurrency"])]["output_tok_s"]
        assert got == pytest.approx(level["output_tok_s"], rel=0.15), level["concurrency"]
        assert pred["by_concurrency"][str(level["concurrency"])]["itl_ms"] == pytest.approx(
            level["itl_ms"]["mean"], rel=0.15
        )


def test_ep_waits_for_its_busiest_rank_and_tp_does_not():
    tp8 = speed.model_for(plan("kimi-k2.6", SEED, tp=8), SEED)[0]
    ep8 = speed.model_for(plan("kimi-k2.6", SEED, tp=8, ep=8), SEED)[0]
    assert 2.45 < ep8.expert_share(1) * 48 < 2.7
    assert tp8.expert_share(1) * 384 == pytest.approx(8.0)
    assert ep8.expert_share(512) == pytest.approx(tp8.expert_share(512), rel=0.01)
    # same collectives (SGLang's EP default is all-reduce, no all-to-all): the seed's EP8 is slower
    # at batch 1 only by its busiest rank's extra expert bytes
    assert tp8.decode_terms(1)["collective"] == ep8.decode_terms(1)["collective"]


def test_dummy_weights_collapse_a_biased_router_but_not_a_softmax_one():
    kimi = plan("kimi-k2.6-cut8", H200, tp=1, args={"load_format": "dummy"})
    real = plan("kimi-k2.6-cut8", H200, tp=1)
    collapsed, uniform = speed.model_for(kimi, H200)[0], speed.model_for(real, H200)[0]
    assert collapsed.collapsed and not uniform.collapsed
    assert collapsed.decode_step(16) < 0.5 * uniform.decode_step(16)
    qwen = speed.model_for(plan("qwen3-30b-a3b", H200, tp=1, args={"load_format": "dummy"}), H200)[0]
    assert not qwen.collapsed


def test_without_cuda_graphs_the_host_launches_bound_the_step():
    on = speed.model_for(plan("kimi-k2.6", SEED, tp=8), SEED)[0]
    off = speed.model_for(plan("kimi-k2.6", SEED, tp=8, args={"disable_cuda_graph": True}), SEED)[0]
    assert not off.cuda_graph and on.cuda_graph
    assert off.decode_step(1) > 2 * on.decode_step(1)
    assert off.bound(1, 300) == "cpu"


SEARCH_H200 = REPO / "benchmarks/results/h200-2026-12-04b/h200i-qwen3-30b-a3b/gpu-host"


def test_a_decode_batch_above_the_largest_graph_runs_eager():
    """The H200 knob search (lease 2026-12-04b): with --cuda-graph-max-bs 32 its c64 level ran at
    790.8 tok/s, with 64 at 3230.3; the same layout below 32 requests did not differ."""
    serving = {"max_running_requests": 128}
    g32 = speed.model_for(
        plan("qwen3-30b-a3b", H200, serving, tp=1, args={"cuda_graph_max_bs_decode": 32}), H200
    )[0]
    g64 = speed.model_for(
        plan("qwen3-30b-a3b", H200, serving, tp=1, args={"cuda_graph_max_bs_decode": 64}), H200
    )[0]
    dflt = speed.model_for(plan("qwen3-30b-a3b", H200, serving, tp=1), H200)[0]
    assert (g32.graph_max_bs, g64.graph_max_bs, dflt.graph_max_bs) == (32, 64, 256)  # H200, tp < 4
    assert g32.decode_step(16) == g64.decode_step(16)
    assert g32.decode_step(64) > 2 * g64.decode_step(64)
    assert g64.decode_step(64) == dflt.decode_step(64)
    measured = {
        f.name.rsplit("=", 1)[1]: {
            lv["concurrency"]: lv["output_tok_s"] for lv in json.loads(f.read_text())["levels"]
        }
        for f in SEARCH_H200.glob("*.json")
    }
    assert measured["32.json"][64] < 0.5 * measured["64.json"][64]


def test_a_deprecated_alias_is_rendered_as_the_releases_current_flag():
    """SGLang 0.5.16 warns on --cuda-graph-max-bs (an alias of --cuda-graph-max-bs-decode)."""
    spec = planner.load_model(
        {"name": "qwen3-30b-a3b", "hf_config_file": str(REPO / "models/qwen3-30b-a3b/config.json")}
    )
    layout = {"name": "t", "tp": 1, "args": {"cuda_graph_max_bs": 32}}
    p = planner.plan_layout(layout, spec, H200, {}, sglang_version="0.5.16")
    assert speed.model_for(p, H200)[0].graph_max_bs == 32
    argv = [str(a) for a in p["argv"]]
    assert "--cuda-graph-max-bs" not in argv
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "32"


def test_pp_runs_micro_batches_of_max_running_over_pp():
    pp8 = speed.model_for(plan("kimi-k2.6", SEED, pp=8), SEED)[0]
    assert pp8.micro_batch(64) == 8 and not pp8.overlap
    # a full ring is slower per token than one micro-batch's pass, but 64 requests share it
    assert 64 / pp8.decode_step(64) > 1 / pp8.decode_step(1)


def test_an_unknown_gpu_gets_no_speed_and_names_the_table():
    hw = {**SEED, "gpu_name": "Imaginary GPU 9000"}
    p = plan("kimi-k2.6", hw, tp=8)
    pred, why = speed.predict(p, hw, None)
    assert pred is None and "gpu_specs.py" in why and "Imaginary GPU 9000" in why
    assert gpu_spec("NVIDIA L40S")["bandwidth_gbs"] == 864


def test_the_plan_carries_the_prediction_at_the_inventorys_benchmark():
    inputs = {
        "host": "seed-box",
        "model": KIMI_MODEL,
        "layouts": [{"name": "tp8", "tp": 8}, {"name": "tp2", "tp": 2}],
        "hardware": SEED,
        "serving": {},
        "bench": {"concurrency": [1, 4, 16], "input_len": 64, "output_len": 16},
    }
    doc = planner.plan_host(inputs)
    tp8, tp2 = doc["layouts"]
    assert tp2["verdict"] != "fits" and tp2["speed"] is None
    s = tp8["speed"]
    assert set(s) >= {
        "single_tok_s",
        "peak_tok_s",
        "peak_concurrency",
        "bound",
        "by_concurrency",
        "assumptions",
    }
    assert set(s["by_concurrency"]) == {"1", "4", "16"}
    assert set(s["by_concurrency"]["4"]) == {"output_tok_s", "ttft_ms", "itl_ms"}
    assert s["peak_tok_s"] == max(v["output_tok_s"] for v in s["by_concurrency"].values())
    assert doc["speed_note"] is None
    none = planner.plan_host({**inputs, "hardware": {k: v for k, v in SEED.items() if k != "gpu_name"}})
    assert none["layouts"][0]["speed"] is None and "gpu_name" in none["speed_note"]


def _record(plan_entry, levels, argv_extra=(), env=None, simulated=False):
    from sglang_layouts.report import results

    bench = {
        "summary": {"single_request_tok_s": levels[0][1], "peak_output_tok_s": max(t for _, t in levels)},
        "levels": [{"concurrency": c_, "output_tok_s": t} for c_, t in levels],
    }
    plan_entry = {**plan_entry, "argv": [*plan_entry["argv"], *argv_extra], "env": env or {}}
    if simulated:
        plan_entry["engine"] = "sim"
    rec = results.build_record(
        "r1", "seed-box", "tp8", "ok", engine="sim" if simulated else "sglang", plan=plan_entry, bench=bench
    )
    rec["gpu"] = {"gpu_interconnect": "pcie"}
    return rec


def _seed_tp8():
    inputs = {
        "host": "seed-box",
        "model": KIMI_MODEL,
        "layouts": [{"name": "tp8", "tp": 8}],
        "hardware": SEED,
        "serving": {"max_running_requests": 64},
        "bench": {"concurrency": [1, 64], "input_len": 256, "output_len": 256},
    }
    return planner.plan_host(inputs)["layouts"][0]


def test_a_real_row_far_below_its_prediction_is_flagged_with_its_own_evidence():
    from sglang_layouts.report import compare

    tp8 = _seed_tp8()
    pred = tp8["speed"]["by_concurrency"]
    slow = _record(
        tp8,
        [(1, pred["1"]["output_tok_s"] * 0.3), (64, pred["64"]["output_tok_s"])],
        argv_extra=["--disable-cuda-graph"],
        env={"NCCL_P2P_DISABLE": "1"},
    )
    (row,) = compare.rows([slow])
    assert row["speed_flag"] == "slower_than_hardware"
    causes = " | ".join(row["speed_flag_causes"])
    assert "CUDA graphs off" in causes and "NCCL_P2P_DISABLE=1" in causes and "PCIe with tp 8" in causes
    assert [c_["what"] for c_ in row["speed_compare"]] == ["single_tok_s", "c1", "c64"]
    on_time = _record(tp8, [(1, pred["1"]["output_tok_s"]), (64, pred["64"]["output_tok_s"] * 1.2)])
    assert compare.rows([on_time])[0]["speed_flag"] is None
    fast = _record(tp8, [(1, pred["1"]["output_tok_s"] * 1.5), (64, pred["64"]["output_tok_s"])])
    assert compare.rows([fast])[0]["speed_flag"] == "faster_than_model"
    # a simulated row's speed is the model itself: never flagged
    assert compare.rows([_record(tp8, [(1, 1.0), (64, 1.0)], simulated=True)])[0]["speed_flag"] is None
    # one GPU has no collectives: NCCL settings in its environment explain nothing
    tp1 = {**slow, "prediction": {**slow["prediction"], "parallel": {"tp": 1, "pp": 1}}}
    assert not any("NCCL" in c_ for c_ in speed_check.causes(tp1))
    md = compare.to_markdown("r1", compare.rows([slow]), compare.winners(compare.rows([slow])))
    assert "slower_than_hardware" in md and "predicted peak tok/s" in md


def test_the_demos_reference_rows_are_set_beside_the_prediction_at_their_own_workload():
    reference = json.loads((REPO / "benchmarks/reference/seed-box.json").read_text())
    rec = _record(_seed_tp8(), [(1, 80.0), (64, 600.0)], simulated=True)
    tp8, pp8, _ep8 = speed_check.reference_rows(reference, [rec])
    assert tp8["predicted_single_tok_s"] == pytest.approx(80, rel=0.05)  # the physics; the seed measured 26.3
    assert tp8["speed_flag"] == "slower_than_hardware" and tp8["speed_flag_causes"]
    assert pp8["predicted_single_tok_s"] is None  # no record of that layout in this run


def test_bench_predict_meets_the_h200_targets_on_every_record_the_repo_holds():
    """Every H200 record served with CUDA graphs: each figure within 15 %, the median within 8 %."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_predict.py"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    h200 = [r for r in doc["rows"] if r["group"] == "h200"]
    assert len(h200) >= 15
    assert all(abs(r["error_pct"]) <= 15 for r in h200), [r for r in h200 if abs(r["error_pct"]) > 15]
    assert doc["summary"]["h200"]["median_abs_error_pct"] <= 8
    # architectures first started on the lease of 2026-12-04b that still miss: printed beside, never
    # in the check, while their plans say the prediction is unchecked; Gemma 3 is in the check since its kernels
    # per layer were counted from SGLang's model file (archs.Arch.kernels_per_layer)
    unchecked = {r["what"].split()[0] for r in doc["rows"] if r["group"] == "h200-unchecked"}
    assert unchecked >= {"gpt-oss-120b", "mixtral-8x7b"} and "gemma-3-27b-text" not in unchecked
    assert {r["what"].split()[0] for r in h200} >= {"gemma-3-27b-text", "qwen3-30b-a3b"}
    # a level the stall rule calls stalled, kept as first measured, is shown apart: it timed a compile
    stalled = [r["what"] for r in doc["rows"] if r["group"] == "h200-stalled"]
    assert any(w.startswith("gpt-oss-120b tp1 c16 ") for w in stalled)
    # the seed's box, as the demo report predicts it at the reference's workload: every figure within
    # 30 % but those flagged, at most one flagged and that one with its cause named
    seed = [r for r in doc["rows"] if r["group"] == "seed"]
    flagged = [r for r in seed if speed_check.flag_of([r["measured"] / r["predicted"]])]
    assert len(seed) == 6 and len(flagged) <= 1 and all(r["cause_named"] for r in flagged)
    assert all(abs(r["error_pct"]) <= 30 for r in seed if r not in flagged), seed


def test_kv_transfer_is_the_plans_bytes_per_token_over_the_link():
    """pd layouts: one request's KV moves in bytes per token (the plan's, per rank) x prompt tokens
    / the link; the link follows the transfer backend and whether the roles share a host."""
    spec = planner.load_model({"name": "kimi-k2.6", "path": str(REPO / "models" / "kimi-k2.6")})
    plan = planner.plan_layout({"name": "t", "tp": 8}, spec, {"gpu_count": 8, "gpu_memory_gib": 94.97}, {})
    nvlink = speed.kv_link({"gpu_interconnect": "nvlink"}, "mooncake", same_host=True)
    pcie = speed.kv_link({"gpu_interconnect": "pcie"}, "mooncake", same_host=True)
    assert nvlink["name"] == "nvlink" and pcie["name"] == "pcie" and nvlink["gbs"] > pcie["gbs"]
    assert speed.kv_link({}, "mooncake", same_host=False)["name"] == "rdma"
    assert speed.kv_link({}, "mooncake_tcp", same_host=False)["name"] == "tcp"
    fake = speed.kv_link({}, "fake")
    t = speed.kv_transfer_s(plan["kv_bytes_per_token"], 4096, pcie["gbs"])
    assert t == pytest.approx(plan["kv_bytes_per_token"] * 4096 / (pcie["gbs"] * 1e9))
    assert speed.kv_transfer_s(plan["kv_bytes_per_token"], 8192, pcie["gbs"]) == pytest.approx(2 * t)
    assert speed.kv_transfer_s(plan["kv_bytes_per_token"], 4096, fake["gbs"]) == 0.0


def _pd_plan(layouts, interconnect="pcie", bench=None, model=None):
    return planner.plan_host(
        {
            "host": "h",
            "model": model or {"name": "kimi-k2.6", "path": str(REPO / "models" / "kimi-k2.6")},
            "layouts": layouts,
            "hardware": {
                "gpu_count": 8,
                "gpu_memory_gib": 192,
                "gpu_interconnect": interconnect,
                "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            },
            "serving": {},
            "bench": bench or {"concurrency": [1, 8, 64], "input_len": 1024, "output_len": 256},
        }
    )


def test_pd_speed_is_its_pools_rate_matched_plus_the_kv_transfer():
    one = {"name": "p1d1", "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}}}
    doc = _pd_plan([one])
    (lp,) = doc["layouts"]
    sp = lp["speed"]["pd"]
    # rate-matched: the slower pool's requests/s, and the output tokens they make
    assert sp["rate_matched"]["req_s"] == min(sp["prefill"]["req_s"], sp["decode"]["req_s"])
    assert sp["rate_matched"]["limited_by"] == (
        "prefill" if sp["prefill"]["req_s"] < sp["decode"]["req_s"] else "decode"
    )
    assert sp["rate_matched"]["output_tok_s"] == pytest.approx(sp["rate_matched"]["req_s"] * 256, rel=0.01)
    # the KV transfer: the prefill role's bytes per token (the plan's) x input_len over the host's link
    bpt = lp["pd"]["prefill"]["kv_bytes_per_token"]
    link = speed.kv_link({"gpu_interconnect": "pcie"}, "mooncake", same_host=True)
    assert sp["kv_transfer"]["bytes_per_request"] == bpt * 1024
    assert sp["kv_transfer"]["ms_per_request"] == pytest.approx(
        speed.kv_transfer_s(bpt, 1024, link["gbs"]) * 1e3, abs=1e-3
    )
    assert sp["kv_transfer"]["link"]["name"] == "pcie"
    # TTFT of one request: its prefill, its transfer and a decode step
    assert sp["ttft_ms_single"] > sp["prefill"]["prefill_ms"] + sp["kv_transfer"]["ms_per_request"]
    assert lp["speed"]["by_concurrency"]["1"]["ttft_ms"] == pytest.approx(sp["ttft_ms_single"], abs=0.2)
    # make plan says it under the table
    from sglang_layouts.plan.table import plan_table

    line = next(x for x in plan_table(doc) if x.startswith("  p1d1: "))
    assert f"rate-matched {sp['rate_matched']['req_s']:g} req/s" in line and "over pcie" in line
    # over NVLink the same KV moves faster
    nv = _pd_plan([one], interconnect="nvlink")["layouts"][0]["speed"]["pd"]["kv_transfer"]
    assert nv["ms_per_request"] < sp["kv_transfer"]["ms_per_request"]


def test_pd_speed_a_second_prefill_server_doubles_the_prefill_pool():
    qwen = {"name": "qwen3-30b-a3b", "path": str(REPO / "models" / "qwen3-30b-a3b")}
    one = {"name": "p1d1", "pd": {"prefill": {"tp": 1}, "decode": {"tp": 1}}}
    two = {"name": "p2d1", "pd": {"prefill": {"tp": 1, "replicas": 2}, "decode": {"tp": 1}}}
    a, b = _pd_plan([one, two], model=qwen)["layouts"]
    assert a["verdict"] == b["verdict"] == "fits", (a["reasons"], b["reasons"])
    pa, pb = a["speed"]["pd"], b["speed"]["pd"]
    assert pb["prefill"]["req_s"] == pytest.approx(2 * pa["prefill"]["req_s"], rel=0.01)
    assert pb["decode"] == pa["decode"]
    assert pb["rate_matched"]["req_s"] >= pa["rate_matched"]["req_s"]


def test_pd_speed_on_a_shared_gpu_runs_prefill_and_decode_in_turn():
    """Two servers on one GPU take turns on it: a cycle of a closed loop holds its prompts' prefill
    and its decode steps one after the other; on GPUs of their own the two overlap."""
    qwen = {"name": "qwen1.5-moe-a2.7b", "path": str(REPO / "models" / "qwen1.5-moe-a2.7b")}
    args = {"mem_fraction_static": 0.4}
    own = {"name": "own", "pd": {"prefill": {"tp": 1, "args": args}, "decode": {"tp": 1, "args": args}}}
    shared = {**own, "name": "shared", "pd": {**own["pd"], "share_gpus": True}}
    bench = {"concurrency": [64], "input_len": 8192, "output_len": 64}
    a = _pd_plan([own], bench=bench, model=qwen)["layouts"][0]
    b = _pd_plan(
        [{**shared, "pd": {**shared["pd"], "decode": {"tp": 1, "args": {"mem_fraction_static": 0.6}}}}],
        bench=bench,
        model=qwen,
    )["layouts"][0]
    assert a["gpus_used"] == 2 and b["gpus_used"] == 1, (a["reasons"], b["reasons"])
    assert not speed._shared_gpus(a) and speed._shared_gpus(b)
    sa, sb = a["speed"]["by_concurrency"]["64"], b["speed"]["by_concurrency"]["64"]
    assert sb["output_tok_s"] < sa["output_tok_s"]
    assert any("share GPUs" in x for x in b["speed"]["assumptions"])


def test_pd_speed_the_prompts_of_a_wave_queue_on_the_kv_link():
    """The link is shared: the last of c prompts that reach the decode server together has its KV
    (c - 1) transfers after the first (the H100's mooncake_tcp stage: 35.7 ms a request at c1,
    199.9 ms at c16). Over a slow link TTFT grows with the wave; over NVLink the queue is negligible."""
    qwen = {"name": "qwen1.5-moe-a2.7b", "path": str(REPO / "models" / "qwen1.5-moe-a2.7b")}
    pd = {
        "prefill": {"tp": 1, "args": {"mem_fraction_static": 0.4}},
        "decode": {"tp": 1, "args": {"mem_fraction_static": 0.6}},
        "share_gpus": True,
    }
    bench = {"concurrency": [1, 16], "input_len": 256, "output_len": 128}
    tcp = {"name": "tcp", "pd": {**pd, "transfer_backend": "mooncake_tcp"}}
    (lp,) = _pd_plan([tcp], bench=bench, model=qwen)["layouts"]
    sp = lp["speed"]
    transfer_ms = sp["pd"]["kv_transfer"]["ms_per_request"]
    one, wave = sp["by_concurrency"]["1"], sp["by_concurrency"]["16"]
    assert transfer_ms > 10  # 196,608 B/token x 256 tokens over TCP
    # a lone request's TTFT holds one transfer; the wave's last request waits for 15 more
    assert one["ttft_ms"] == pytest.approx(sp["pd"]["ttft_ms_single"], abs=0.2)
    assert wave["ttft_ms"] - one["ttft_ms"] >= 15 * transfer_ms - 0.5
    cycle_s = 16 * 128 / wave["output_tok_s"]
    assert cycle_s == pytest.approx((wave["ttft_ms"] + 128 * wave["itl_ms"]) / 1e3, rel=0.01)
    # over a fast link the same wave barely queues
    nvlink = {"name": "nv", "pd": {**pd, "transfer_backend": "mooncake"}}
    (fast,) = _pd_plan([nvlink], bench=bench, model=qwen, interconnect="nvlink")["layouts"]
    assert fast["speed"]["pd"]["kv_transfer"]["ms_per_request"] < transfer_ms / 10
    assert fast["speed"]["by_concurrency"]["16"]["output_tok_s"] > wave["output_tok_s"]


def test_an_architectures_own_kernel_count_reaches_the_decode_floor():
    """archs.Arch.kernels_per_layer is the one source: Gemma 3's unfused norms, RoPE and adds (64 of its
    73 kernels a layer, each at tau_elementwise_us) make its floor, an architecture without a count keeps
    its family's."""
    from sglang_layouts.estimate import archs

    gemma = plan("gemma-3-27b-text", H200, tp=1)
    qwen = plan("qwen3-30b-a3b", H200, tp=1)
    assert gemma["cost"]["kernels_per_layer"] == archs.ARCHS["Gemma3ForCausalLM"].kernels_per_layer == 73
    assert qwen["cost"]["kernels_per_layer"] is None
    g, _ = speed.model_for(gemma, H200)
    q, _ = speed.model_for(qwen, H200)
    assert g.k_layer == 73 and q.k_layer == speed.KERNELS_PER_LAYER["gqa_moe"]
    layers = gemma["cost"]["stages"][0]["layers"]
    assert (
        g.k_elementwise == archs.ARCHS["Gemma3ForCausalLM"].elementwise_per_layer == 64
        and q.k_elementwise == 0
    )
    for batch in (1, 16):
        floor = g.decode_terms(batch, 300 * batch)["kernel_latency"]
        # each elementwise node also moves the batch's hidden vectors, fp32 in and out
        moved = layers * 64 * batch * g.hidden * 8 / (speed.c("eta_elementwise") * g.bw)
        nodes = layers * (9 * speed.c("tau_kernel_us") + 64 * speed.c("tau_elementwise_us")) * 1e-6
        assert floor == pytest.approx(nodes + moved)


def test_the_servers_decode_lines_are_read_per_batch_without_the_intervals_that_timed_a_prefill(tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import decode_itl

    # lines of the gpt-oss-120b unit log of lease 2026-12-04b (SGLang 0.5.16, hybrid SWA pool wording)
    log = tmp_path / "sglang-gpt-oss-120b-tp1.service.log"
    log.write_text(
        "[2026-12-04 18:29:10] Prefill batch, #new-seq: 1, #new-token: 256, #cached-token: 0, full token usage: 0.00\n"
        "[2026-12-04 18:29:10] Decode batch, #running-req: 1, #full token: 297, full token usage: 0.00, #swa token: "
        "168, swa token usage: 0.00, cuda graph: True, gen throughput (token/s): 2.59, #queue-req: 0\n"
        "[2026-12-04 18:29:11] Decode batch, #running-req: 1, #full token: 337, full token usage: 0.00, #swa token: "
        "208, swa token usage: 0.00, cuda graph: True, gen throughput (token/s): 182.25, #queue-req: 0\n"
        "[2026-12-04 18:29:11] Decode batch, #running-req: 1, #full token: 377, full token usage: 0.00, #swa token: "
        "248, swa token usage: 0.00, cuda graph: True, gen throughput (token/s): 180.73, #queue-req: 0\n"
        "[2026-12-04 18:29:33] Decode batch, #running-req: 16, #full token: 5392, full token usage: 0.00, "
        "cuda graph: True, gen throughput (token/s): 2553.03, #queue-req: 0\n"
    )
    got = decode_itl.parse_log(str(log))
    assert set(got) == {1, 16}  # the 2.59 tok/s interval timed the prefill and the idle wait: left out
    assert got[1] == {"itl_ms": pytest.approx(1e3 / 181.49, abs=1e-3), "tokens": 357, "lines": 2}
    assert got[16]["itl_ms"] == pytest.approx(16e3 / 2553.03, abs=1e-3)
    # each record's log is found by the units' own names (a pd record's: its decode server's)
    lease = REPO / "benchmarks/results/h100-2026-12-06b"
    committed = json.loads((lease / "decode-itl.json").read_text())["records"]
    derived = json.loads(json.dumps(decode_itl.derive(str(lease / "logs"), str(lease))))
    assert derived == committed and len(committed) == 4
    # the committed medians check the model per batch: every record of the lease with its own prediction
    rows = decode_itl.check(json.loads((REPO / decode_itl.DEFAULT_DATA).read_text())["records"])
    models = {r["model"] for r in rows}
    assert {"gemma-3-27b-text", "gpt-oss-120b", "qwen3-next-80b-a3b-cut24"} <= models
    assert all(r["predicted_ms"] > 0 and r["measured_ms"] > 0 for r in rows)


def test_a_moe_kernel_on_its_default_config_is_read_from_the_start_and_named_as_a_cause():
    """The gate's parser marks SGLang's 'Using default MoE kernel config' line (real H200 starts: the
    MoE models without a tuned config file; Qwen3-30B-A3B and Kimi K2.6 ship one, dense Gemma 3 and
    gpt-oss's triton_kernels path need none), and a slow row that carries the mark names it."""
    from sglang_layouts.gate import logclass
    from sglang_layouts.report import speed_check

    fixtures = REPO / "tests" / "fixtures" / "sglang-0.5.16"

    def marked(path):
        return any(
            logclass.startup_figures(ln).get("moe_default_config") for ln in path.read_text().splitlines()
        )

    starts = [
        *sorted(fixtures.glob("arch-h200/*.log")),
        fixtures / "qwen3-30b-a3b.log",
        fixtures / "kimi-k2.6-cut8.warm.log",
    ]
    assert {p.stem for p in starts if marked(p)} == {
        "glm-4.5-air-fp8",
        "llama-4-scout-text-cut20",
        "minimax-m2-cut24",
        "qwen1.5-moe-a2.7b",
        "qwen3-next-80b-a3b-cut24",
    }
    rec = {"health": {"log_figures": {"moe_default_config": 1}}, "prediction": {"parallel": {"tp": 1}}}
    assert any("default Triton config" in c for c in speed_check.causes(rec))
    assert not any("default Triton config" in c for c in speed_check.causes({"health": {"log_figures": {}}}))


def test_a_long_pause_in_a_level_is_named_among_the_causes(repo):
    """Lease h100-2026-12-07f: gpt-oss-120b's c16 levels paused 2.0 s (tp1-a, at the level's start) and 5.6 s
    (tp1-b, after its first wave) with no output on any stream; the rows are slower than the hardware allows
    and the pause is what their own figures show. Their c1 levels (0.16 and 0.10 s) name none."""
    import json

    folder = repo / "benchmarks/results/h100-2026-12-07f/h100r-gpt-oss-120b/gpu-host"
    for name, seconds in (("tp1-a", "2.0"), ("tp1-b", "5.6")):
        rec = json.loads((folder / f"{name}.json").read_text())
        row = speed_check.check(rec)
        assert row["speed_flag"] == "slower_than_hardware"
        pauses = [c for c in row["speed_flag_causes"] if "with no output on any stream" in c]
        assert pauses == [
            f"{seconds} s with no output on any stream during level c16 (a kernel compiled for a new batch "
            "shape, or another pause of the server): its figure times the pause"
        ]
