"""Real starts on one H100 (tests/fixtures/sglang-0.5.16/h100/; leases h100-2026-12-06b, -06c, -07b,
-07c and -07e under benchmarks/results/) against the plan made from that lease's own ladder: weights
per GPU and KV tokens within 2 %, per server of a prefill/decode layout whose two servers share the
GPU.

Two starts miss, each kept as a strict xfail, so the test fails once the plan reaches the
measurement:

- the decode server that starts beside a prefill server finds the prefill server's CUDA graphs and
  activations outside its static pool (1.27 GB of prefill graphs logged) on the GPU, which the plan
  does not count (the second lease, with prefill graphs off, starts the same decode server within
  2 % of the plan);
- the Kimi K2.6 TP8 rank's weights are 0.53 GiB (0.7 %) over the plan, which its 3 GiB pool
  (mem_fraction_static 0.95) turns into 10 % of KV.

Qwen3-30B-A3B's KV pool was 2.1 % above the plan on the H100 while the plan reserved 1 GiB of CUDA
context for a one-GPU engine; these starts found 0.69-0.76 GiB in use before load
(memory.CUDA_CONTEXT_SINGLE_GPU_GIB), and with that the start is within 0.2 %.

gpt-oss on SGLang's triton_kernels MXFP4 path (lease h100-2026-12-07b): with PyTorch's default
allocator every start misses by the free fragments the allocator keeps after each layer's weight
swizzle (strict xfails; the plan's claims about them, its KV tokens an upper bound and expandable
segments the remedy, are checked); with expandable segments the plan models what stays mapped and
gpt-oss-20b and gpt-oss-120b cut to 18 layers are within 2 %; the 30-layer cut keeps 0.41 GiB more
than the model (its KV 3.4 % over the plan, a strict xfail), which the 1 GiB context of earlier
plans hid. The independent check (lease h100-2026-12-07c, the whole gpt-oss-120b with them, planned
before the start) is within 2 % on weights and 39 % over on KV tokens: 0.58 GiB
more stays than one page a freed block, and the H100's pool at mem_fraction_static 0.88 is 1.54 GiB.
"""

from pathlib import Path

import pytest
import yaml
from sglang_layouts.estimate import memory
from sglang_layouts.gate import logclass
from sglang_layouts.plan import planner

from benchmarks.plan_arch_check import DEFAULT_ALLOCATOR, as_ran, repo_model

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "fixtures" / "sglang-0.5.16" / "h100"
FIRST, SECOND, GPT_OSS, FP8 = "h100-2026-12-06b", "h100-2026-12-06c", "h100-2026-12-07b", "h100-2026-12-07e"
# lease h100-2026-12-07c ran the ladder prepared for an H200 (its plan written before the start)
WHOLE = "h200-2026-12-07b"
LEASES = {
    lease: yaml.safe_load((REPO / "benchmarks" / "results" / lease / "ladders.yml").read_text())[
        "sglang_gpu_ladders"
    ]
    for lease in (FIRST, SECOND, GPT_OSS, WHOLE, FP8)
}
# torch's capacity of the card the lease got (its records' gpu block: 81,559 MiB, 79.19 GiB usable)
H100 = {
    "gpu_count": 1,
    "gpu_memory_gib": 79.19,
    "gpu_interconnect": "single",
    "gpu_name": "NVIDIA H100 80GB HBM3",
}
BAR = 0.02


def measured(log: str) -> dict:
    """The start's figures, read by the gate's own parser (logclass.startup_figures)."""
    out: dict = {}
    for line in (LOGS / log).read_text().splitlines():
        out.update(logclass.startup_figures(line))
    return out


def planned(model: str, layout: str, lease: str) -> dict:
    inputs = {
        "host": "h",
        "model": repo_model(model),
        "sglang_version": "0.5.16",
        "hardware": H100,
        "serving": {"mem_fraction_static": 0.88},
        "layouts": [as_ran(lay) for lay in LEASES[lease][model] if lay["name"] == layout],
    }
    (lay,) = planner.plan_host(inputs)["layouts"]
    assert lay["verdict"] == "fits", lay["reasons"]
    return lay


def server(model: str, layout: str, role: str | None, lease: str) -> dict:
    lay = planned(model, layout, lease)
    return lay["pd"][role] if role else lay


CASES = [
    ("qwen1.5-moe-a2.7b.tp1.log", "qwen1.5-moe-a2.7b", "tp1", None, FIRST),
    ("qwen1.5-moe-a2.7b.pd-prefill.log", "qwen1.5-moe-a2.7b", "pd-tcp", "prefill", FIRST),
    pytest.param(
        "qwen1.5-moe-a2.7b.pd-decode.log",
        "qwen1.5-moe-a2.7b",
        "pd-tcp",
        "decode",
        FIRST,
        marks=pytest.mark.xfail(strict=True, reason="the prefill server's CUDA graphs are not planned"),
    ),
    # the same pd layout with prefill graphs off: nothing unplanned beside the decode server's pool
    ("qwen1.5-moe-a2.7b.pd-prefill.no-prefill-graphs.log", "qwen1.5-moe-a2.7b", "pd-tcp", "prefill", SECOND),
    ("qwen1.5-moe-a2.7b.pd-decode.no-prefill-graphs.log", "qwen1.5-moe-a2.7b", "pd-tcp", "decode", SECOND),
    # 2.1 % more KV than planned while the plan reserved 1 GiB of context for one GPU
    ("qwen3-30b-a3b.tp1.log", "qwen3-30b-a3b", "tp1", None, SECOND),
    # FP8 128 x 128 blocks (MiniMax-M2 cut to 16 layers, its 24-layer cut's H200 start is within 1 %)
    ("minimax-m2-cut16.tp1.log", "minimax-m2-cut16", "tp1", None, FP8),
    pytest.param(
        "kimi-k2.6-tp8-rank.tp1.log",
        "kimi-k2.6-tp8-rank",
        "tp1",
        None,
        FIRST,
        marks=pytest.mark.xfail(strict=True, reason="0.53 GiB of the TP8 rank's weights not planned"),
    ),
    # the independent check of the residue model: all 36 layers, planned before the start
    pytest.param(
        "gpt-oss-120b.tp1-expandable-segments.log",
        "gpt-oss-120b",
        "tp1-expandable-segments",
        None,
        WHOLE,
        marks=pytest.mark.xfail(strict=True, reason="0.58 GiB more residue than one page a freed block"),
    ),
]


RESIDUE = pytest.mark.xfail(strict=True, reason="what the caching allocator keeps after the MXFP4 swizzle")
GPT_OSS_STARTS = [
    ("gpt-oss-20b", "tp1"),
    ("gpt-oss-20b", "tp1-expandable-segments"),
    ("gpt-oss-120b-cut18", "tp1"),
    ("gpt-oss-120b-cut18", "tp1-expandable-segments"),
    ("gpt-oss-120b-cut30", "tp1-expandable-segments"),
]
# with PyTorch's default allocator the residue is its splitting history's (not modelled); with
# expandable segments it is what stays mapped of the freed blocks (memory.swizzle_residue_bytes)
PAGE_RESIDUE = {
    "gpt-oss-120b-cut30": pytest.mark.xfail(
        strict=True, reason="0.41 GiB more residue than one page a freed block"
    )
}
CASES += [
    pytest.param(
        f"{m}.{lay}.log",
        m,
        lay,
        None,
        GPT_OSS,
        marks=PAGE_RESIDUE.get(m, []) if "expandable" in lay else RESIDUE,
    )
    for m, lay in GPT_OSS_STARTS
]


@pytest.mark.parametrize(("log", "model", "layout", "role", "lease"), CASES)
def test_plan_matches_the_real_start(log, model, layout, role, lease):
    real, plan = measured(log), server(model, layout, role, lease)
    assert real["weights_gib"] > 0 and real["kv_tokens"] > 0
    assert abs(plan["weights_gib_per_gpu"] - real["weights_gib"]) <= BAR * real["weights_gib"], (plan, real)
    assert abs(plan["kv_tokens"] - real["kv_tokens"]) <= BAR * real["kv_tokens"], (plan["kv_tokens"], real)


def test_the_decode_pool_is_planned_on_what_the_prefill_server_left():
    # what makes the decode server's pool: the memory free at its start (logged before its weights
    # load) is the card less the prefill server's whole footprint; the plan counts its CUDA context
    # and static pool, so it is above the real figure by the prefill server's graphs and activations
    prefill, decode = (
        measured("qwen1.5-moe-a2.7b.pd-prefill.log"),
        measured("qwen1.5-moe-a2.7b.pd-decode.log"),
    )
    assert (
        decode["avail_gib_before_load"]
        < prefill["avail_gib_before_load"] - 0.42 * prefill["avail_gib_before_load"]
    )
    plan = server("qwen1.5-moe-a2.7b", "pd-tcp", "decode", FIRST)
    over = plan["kv_tokens"] / decode["kv_tokens"] - 1
    assert 0 < over < 0.15, over


def _gated(role, wave, seconds, kv, already=False):
    unit = {"name": f"u-{role}", "role": role, "start_wave": wave}
    return {
        "__sglang_service_unit": unit,
        "ready_after_s": seconds,
        "max_total_num_tokens": kv,
        "already_ready": already,
    }


def test_a_layout_starts_in_the_sum_of_its_waves_and_its_decode_server_stands_for_it():
    from sglang_layouts.plan.placement import layout_readiness

    # the pd-tcp start of the lease: prefill ready after 162.6 s, then decode after 67.8 s more
    pd = layout_readiness([_gated("prefill", 0, 162.6, 33845), _gated("decode", 1, 67.8, 43355)])
    assert pd == {"ready_after_s": 230.4, "router_s": None, "already_ready": False, "figures": 1}
    # then the router counted both servers healthy 14.5 s later: the layout's last wave
    routed = layout_readiness([_gated("prefill", 0, 162.6, 33845), _gated("decode", 1, 67.8, 43355)], 14.5)
    assert (routed["ready_after_s"], routed["router_s"]) == (244.9, 14.5)
    # replicas start together: the slowest one's time, the first server's figures
    rep = layout_readiness([_gated(None, 0, 60.0, 1, True), _gated(None, 0, 62.5, 2, True)])
    assert rep == {"ready_after_s": 62.5, "router_s": None, "already_ready": True, "figures": 0}
    assert layout_readiness([]) == {
        "ready_after_s": None,
        "router_s": None,
        "already_ready": False,
        "figures": 0,
    }


@pytest.mark.parametrize(("model", "layout"), [s for s in GPT_OSS_STARTS if "expandable" not in s[1]])
def test_with_the_default_allocator_the_plan_is_the_upper_bound_it_claims_and_names_the_remedy(model, layout):
    real, plan = measured(f"{model}.{layout}.log"), planned(model, layout, GPT_OSS)
    assert plan["weights_gib_per_gpu"] < real["weights_gib"]
    assert plan["kv_tokens"] >= real["kv_tokens"] and plan["kv_pool"]["swa_tokens"] >= real["swa_tokens"]
    (say,) = plan["weights_assumptions"]
    assert "upper bound" in say
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the layout's env" in say
    assert "allocator_residue" not in plan["ranks"][0]["components"]


def test_expandable_segments_return_what_the_plan_recommends_them_for():
    # The figures each line quotes are the logs': the default plan's recommendation (the 18-layer cut's
    # residue and its KV tokens without and with them), and the expandable plan's remaining miss over
    # the three starts with them. With them the plan adds what stays mapped of the two tensors each
    # MoE layer's swizzle frees: one 20 MiB page a block, 18 layers x 2 blocks.
    default, expandable = (
        measured("gpt-oss-120b-cut18.tp1.log"),
        measured("gpt-oss-120b-cut18.tp1-expandable-segments.log"),
    )
    plan = planned("gpt-oss-120b-cut18", "tp1", GPT_OSS)
    with_them = planned("gpt-oss-120b-cut18", "tp1-expandable-segments", GPT_OSS)
    residue = with_them["ranks"][0]["components"]["allocator_residue"]
    assert residue == pytest.approx(18 * 2 * 20 / 1024, abs=0.001)
    assert with_them["weights_gib_per_gpu"] == pytest.approx(plan["weights_gib_per_gpu"] + residue, abs=0.01)
    (recommends,) = plan["weights_assumptions"]
    assert f"{default['weights_gib'] - plan['weights_gib_per_gpu']:.1f} GiB on one H100" in recommends
    assert f"({default['kv_tokens']:,} -> {expandable['kv_tokens']:,})" in recommends
    assert (
        f"{100 * (1 - expandable['kv_tokens'] / with_them['kv_tokens']):.1f} % below that plan" in recommends
    )
    over = [
        measured(f"{m}.{lay}.log")["weights_gib"] - planned(m, lay, GPT_OSS)["weights_gib_per_gpu"]
        for m, lay in GPT_OSS_STARTS
        if "expandable" in lay
    ]
    assert (
        f"used {min(over):.2f} to {max(over):.2f} GiB more than this figure"
        in with_them["weights_assumptions"][0]
    )


@pytest.mark.parametrize(
    ("conf", "on"),
    [
        ("expandable_segments:True", True),
        ("garbage_collection_threshold:0.6, expandable_segments:True", True),
        ("expandable_segments:False", False),
        ("max_split_size_mb:128", False),
        ("", False),
    ],
)
def test_the_allocator_setting_is_read_as_pytorch_reads_it(conf, on):
    assert memory.expandable_segments({"PYTORCH_CUDA_ALLOC_CONF": conf}) is on
    assert memory.expandable_segments({"PYTORCH_ALLOC_CONF": conf}) is on
    # the name the H100 starts used is read first where both are set
    assert memory.expandable_segments({"PYTORCH_CUDA_ALLOC_CONF": conf, "PYTORCH_ALLOC_CONF": "x:1"}) is on


def test_the_whole_gpt_oss_120b_is_within_the_bar_on_weights_and_its_kv_an_upper_bound():
    # lease h100-2026-12-07c: the plan (66.93 GiB, 30,289 tokens) was written before the start; the
    # start used 67.51 GiB and held 24,975. Weights within 2 %; the KV pool, what the weights leave of
    # a 69.1 GiB budget (1.54 GiB), turns the 0.58 GiB into a fifth of itself; the plan stays above it.
    real = measured("gpt-oss-120b.tp1-expandable-segments.log")
    plan = planned("gpt-oss-120b", "tp1-expandable-segments", WHOLE)
    assert abs(plan["weights_gib_per_gpu"] - real["weights_gib"]) <= BAR * real["weights_gib"]
    assert plan["weights_gib_per_gpu"] < real["weights_gib"]
    assert plan["kv_tokens"] > real["kv_tokens"] and plan["kv_pool"]["swa_tokens"] > real["swa_tokens"]


@pytest.mark.parametrize(
    ("gpu_name", "env", "given"),
    [
        ("NVIDIA H100 80GB HBM3", {}, "expandable_segments:True"),  # the plan's choice on this path
        ("NVIDIA H100 80GB HBM3", DEFAULT_ALLOCATOR, "expandable_segments:False"),  # the layout's own
        ("NVIDIA B200", {}, None),  # not the triton_kernels path: the allocator is left alone
    ],
)
def test_the_mxfp4_path_gets_expandable_segments_unless_the_layout_chose(gpu_name, env, given):
    # gpt-oss-120b tp1 with the default allocator did not load on one H100 (the gate's fixture
    # fail-oom-at-load-fragmented.gpt-oss-120b-h100.log); with them it loaded within 0.9 % of the plan
    inputs = {
        "host": "h",
        "model": repo_model("gpt-oss-120b"),
        "sglang_version": "0.5.16",
        "hardware": {**H100, "gpu_name": gpu_name},
        "serving": {"mem_fraction_static": 0.88},
        "layouts": [{"name": "tp1", "tp": 1, "env": env, "args": {"context_length": 8192}}],
    }
    (lay,) = planner.plan_host(inputs)["layouts"]
    assert lay["env"].get("PYTORCH_CUDA_ALLOC_CONF") == given
    added = [n for n in lay["notes"] if "in the servers' env" in n]
    assert bool(added) == (given == "expandable_segments:True" and not env)
    modelled = "allocator_residue" in lay["ranks"][0]["components"]
    assert modelled == (given == "expandable_segments:True")
