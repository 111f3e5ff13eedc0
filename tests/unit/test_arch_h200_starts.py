"""Each architecture of issue 31 against its real start on one H200 (item 4): the plan's weights per
GPU, KV tokens and the pool beside them (sliding-window tokens, linear-attention state requests)
against what SGLang 0.5.16 logged, within 2 %.

The logs are tests/fixtures/sglang-0.5.16/arch-h200/ (lease benchmarks/results/h200-2026-12-04b/,
and minimax-m2-cut24 from lease benchmarks/results/h200-2026-12-07/; dummy weights, tp1); each is
planned as that lease planned it: the layout of benchmarks/extra-vars/arch-check.yml,
mem_fraction_static 0.88, an H200 of 139.80 GiB (torch's capacity).
"""

from pathlib import Path

import pytest
import yaml
from sglang_layouts.gate import logclass
from sglang_layouts.plan import planner

from benchmarks.plan_arch_check import as_ran, repo_model

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "fixtures" / "sglang-0.5.16" / "arch-h200"
LADDERS = yaml.safe_load((REPO / "benchmarks" / "extra-vars" / "arch-check.yml").read_text())[
    "sglang_gpu_ladders"
]
H200 = {"gpu_count": 1, "gpu_memory_gib": 139.80, "gpu_interconnect": "single", "gpu_name": "NVIDIA H200"}
BAR = 0.02
STARTED = sorted(p.stem for p in LOGS.glob("*.log"))
# gpt-oss on Hopper (SGLang's triton_kernels MoE path): the plan models what mxfp4.py keeps, not the
# caching allocator's fragments from the per-layer swizzle (docs/planner.md); the start measured
# 70.26 GiB against 65.52 planned. strict: this test fails once the plan reaches the measurement.
ALLOCATOR_RESIDUE = {"gpt-oss-120b"}


def measured(name: str) -> dict:
    """The start's figures, read by the gate's own parser (logclass.startup_figures)."""
    out: dict = {}
    for line in (LOGS / f"{name}.log").read_text().splitlines():
        out.update(logclass.startup_figures(line))
    return out


def planned(name: str, gpu_name: str = "NVIDIA H200") -> dict:
    inputs = {
        "host": "h",
        "model": repo_model(name),
        "hardware": {**H200, "gpu_name": gpu_name},
        "serving": {"mem_fraction_static": 0.88},
        "layouts": [as_ran(lay) for lay in LADDERS[name]],
    }
    (lay,) = planner.plan_host(inputs)["layouts"]
    assert lay["verdict"] == "fits", lay["reasons"]
    return lay


def test_every_started_architecture_is_checked():
    # every architecture of arch-check.yml has a real start to replay
    assert set(STARTED) == set(LADDERS)
    assert len(STARTED) == 8


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= BAR * want


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="allocator residue not modelled"))
        if n in ALLOCATOR_RESIDUE
        else n
        for n in STARTED
    ],
)
def test_plan_matches_the_real_start(name):
    real, lay = measured(name), planned(name)
    assert real["weights_gib"] > 0 and real["kv_tokens"] > 0
    pool = lay["kv_pool"]
    assert ("swa_tokens" in real) == (pool["kind"] == "hybrid_swa")
    assert ("state_slots" in real) == (pool["kind"] == "linear")
    assert _close(lay["weights_gib_per_gpu"], real["weights_gib"]), (lay["weights_gib_per_gpu"], real)
    assert _close(lay["kv_tokens"], real["kv_tokens"]), (lay["kv_tokens"], real)
    if "swa_tokens" in real:
        assert _close(pool["swa_tokens"], real["swa_tokens"]), (pool, real)
    if "state_slots" in real:
        assert _close(pool["state_slots"], real["state_slots"]), (pool, real)


def test_gpt_oss_on_hopper_models_what_mxfp4_keeps_and_says_what_it_leaves_out():
    # The part of the 9.5 GiB the source explains is in the plan (Hopper padding, scales kept twice,
    # fp32 biases: +4.7 GiB over the checkpoint's bytes); the plan stays below the start, says why,
    # and its KV figure is the upper bound it claims to be.
    real, lay = measured("gpt-oss-120b"), planned("gpt-oss-120b")
    checkpoint = planned("gpt-oss-120b", "NVIDIA A100-SXM4-80GB")  # not Hopper: the checkpoint's bytes
    # per layer, 128 experts, hidden 2880, intermediate 2880: values padded 1440 -> 1472 (w13 and w2),
    # swizzled scales with M padded to 256 (5760 -> 5888, 2880 -> 3072), biases bf16 -> fp32
    extra = 128 * (32 * 5760 + 32 * 2880 + 5888 * 90 + 3072 * 90 + (5760 + 2880) * 2)
    got = (
        lay["ranks"][0]["components"]["routed_experts"]
        - checkpoint["ranks"][0]["components"]["routed_experts"]
    )
    assert got == pytest.approx(36 * extra / 2**30, abs=0.002)
    assert lay["weights_gib_per_gpu"] < real["weights_gib"] < lay["weights_gib_per_gpu"] * 1.08
    assert lay["kv_tokens"] > real["kv_tokens"]
    (say,) = lay["weights_assumptions"]
    assert "caching allocator" in say and "upper bound" in say
    assert any("caching allocator" in n for n in lay["notes"])
    assert checkpoint["weights_assumptions"] == []


def test_gpt_oss_with_ep_on_hopper_is_planned_with_bf16_experts():
    # ep > 1 leaves moe_runner_backend auto (arg_groups/overrides.py), and Mxfp4MoEMethod then
    # upcasts the experts to bf16 (upcast_from_mxfp): 64 experts a rank of w13 + w2 + biases, 2 B each
    inputs = {
        "host": "h",
        "model": {
            "name": "gpt-oss-120b",
            "path": "/m",
            "hf_config_file": str(REPO / "models/gpt-oss-120b/config.json"),
        },
        "hardware": {**H200, "gpu_count": 2, "gpu_interconnect": "nvlink"},
        "serving": {"mem_fraction_static": 0.88, "context_length": 8192},
        "layouts": [{"name": "tp2ep2", "tp": 2, "ep": 2}],
    }
    (lay,) = planner.plan_host(inputs)["layouts"]
    experts = lay["ranks"][0]["components"]["routed_experts"]
    assert experts == pytest.approx(36 * 64 * (3 * 2880 * 2880 + 3 * 2880) * 2 / 2**30, abs=0.002)
    assert "upcasts the MXFP4 experts to bf16" in lay["weights_assumptions"][0]
