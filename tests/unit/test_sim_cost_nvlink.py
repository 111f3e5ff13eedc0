"""The simulator's cost model on NVLink uses the NCCL figures measured on 2 x H200.

sglang_sim/data/collectives_nvlink.json is derived from
benchmarks/results/collectives-h200x2-2026-11-29.json (benchmarks/bench_collectives.py run
through the device tool's nvidia-h200-x2 kind); these tests tie the three together.
"""

import json
from pathlib import Path

import pytest
from sglang_layouts import planner

from sglang_sim import cost
from sglang_sim.cost import from_plan

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "collectives-h200x2-2026-11-29.json"
DATA = REPO / "sglang_sim" / "data" / "collectives_nvlink.json"
H200X2 = {
    "gpu_count": 2,
    "gpu_memory_gib": 139.8,
    "gpu_interconnect": "nvlink",
    "gpu_memory_bandwidth_gbs": 4800,
}


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    for name in ("SGLANG_SIM_COLLECTIVE_US", "SGLANG_SIM_P2P_US", "SGLANG_SIM_DECODE_STEP_MS"):
        monkeypatch.delenv(name, raising=False)


def llama_tp2(hw=H200X2, tp=2):
    cfg = json.loads((REPO / "tests" / "fixtures" / "configs" / "llama-3.1-70b.json").read_text())
    spec = planner.load_model({"name": "llama-3.1-70b", "hf_config": cfg})
    return planner.plan_layout({"name": f"tp{tp}", "tp": tp}, spec, hw, {})


def result(doc, mode, op, nbytes, world=2):
    (row,) = [
        r for r in doc[mode]["results"] if (r["op"], r["bytes"], r["world_size"]) == (op, nbytes, world)
    ]
    return row


def test_data_file_is_derived_from_the_results():
    data, res = json.loads(DATA.read_text()), json.loads(RESULTS.read_text())
    assert data["source"] == "benchmarks/results/collectives-h200x2-2026-11-29.json"
    assert (
        res["machine"]["gpus"] == ["NVIDIA H200", "NVIDIA H200"] and res["machine"]["driver"] == "580.159.04"
    )
    for op in ("all_reduce", "all_to_all", "sendrecv"):
        d = data["ops"][op]["2"]
        assert d["latency_us"] == result(res, "cuda_graph", op, 8192)["time_us"]
        assert d["busbw_gbs"] == result(res, "cuda_graph", op, 256 << 20)["busbw_gbs"]
        assert d["eager_latency_us"] == result(res, "eager", op, 8192)["time_us"]
    assert all(r["correct"] for mode in ("eager", "cuda_graph") for r in res[mode]["results"])
    # nccl-tests' bus bandwidth factors, n = 2
    ar, a2a = result(res, "eager", "all_reduce", 256 << 20), result(res, "eager", "all_to_all", 256 << 20)
    assert ar["busbw_gbs"] == pytest.approx(ar["algbw_gbs"] * 2 * (2 - 1) / 2, rel=1e-3)
    assert a2a["busbw_gbs"] == pytest.approx(a2a["algbw_gbs"] * (2 - 1) / 2, rel=1e-3)


def test_nvlink_uses_the_measured_latency():
    data = json.loads(DATA.read_text())
    measured_ar = data["ops"]["all_reduce"]["2"]["latency_us"] * 1e-6
    measured_hop = data["ops"]["sendrecv"]["2"]["latency_us"] * 1e-6
    m = from_plan(llama_tp2(), H200X2)
    assert m.collective_latency_s == pytest.approx(measured_ar)
    assert m.collective_latency_s != cost.COLLECTIVE_LATENCY_S["nvlink"]  # not the old guess
    assert m.p2p_latency_s == pytest.approx(measured_hop)
    assert m.collectives_source["measured_world_size"] == 2
    assert m.collectives_source["source"] == "benchmarks/results/collectives-h200x2-2026-11-29.json"
    assert m.describe()["collective_latency_us"] == pytest.approx(
        data["ops"]["all_reduce"]["2"]["latency_us"]
    )
    # the planner gives the message size (hidden 8192 x bf16): one token's all-reduce is the measured
    # time at 16 KB; without a size, every all-reduce costs the small-message latency
    assert m.collective_bytes_per_token == 8192 * 2
    m.collective_bytes_per_token = 0
    # the step holds 2 x 80 + 1 all-reduces at that latency: moving it moves the step by exactly that
    collectives = sum(s.collectives for s in m.stages)
    assert collectives == 161
    base = m.decode_step(1)
    m.collective_latency_s += 1e-6
    assert m.decode_step(1) - base == pytest.approx(collectives * 1e-6)


def test_pcie_keeps_its_figure_and_env_overrides_win(monkeypatch):
    pcie = {**H200X2, "gpu_interconnect": "pcie"}
    m = from_plan(llama_tp2(pcie), pcie)
    assert m.collective_latency_s == cost.COLLECTIVE_LATENCY_S["pcie"] and m.collectives_source is None
    monkeypatch.setenv("SGLANG_SIM_COLLECTIVE_US", "25")
    m = from_plan(llama_tp2(), H200X2)
    assert m.collective_latency_s == pytest.approx(25e-6) and m.collective_table == ()


def test_larger_tp_uses_the_largest_measured_world_size():
    hw = {**H200X2, "gpu_count": 8}
    m = from_plan(llama_tp2(hw, tp=8), hw)
    assert m.collectives_source == {**m.collectives_source, "tp": 8, "measured_world_size": 2}


def test_missing_data_file_falls_back(monkeypatch, tmp_path):
    monkeypatch.setattr(cost, "NVLINK_DATA", str(tmp_path / "absent.json"))
    monkeypatch.setattr(cost.load_collectives, "__defaults__", (str(tmp_path / "absent.json"),))
    m = from_plan(llama_tp2(), H200X2)
    assert m.collective_latency_s == cost.COLLECTIVE_LATENCY_S["nvlink"] and m.collectives_source is None


def test_message_size_dependent_time_when_the_plan_gives_bytes_per_token():
    plan = llama_tp2()
    plan = {**plan, "cost": {**plan["cost"], "allreduce_bytes_per_token": 8192 * 2}}  # hidden x bf16
    m = from_plan(plan, H200X2)
    table = json.loads(DATA.read_text())["ops"]["all_reduce"]["2"]["time_us_by_bytes"]
    assert m.collective_s(1) == pytest.approx(table["16384"] * 1e-6)  # one token: 16 KB, measured
    assert m.collective_s(64) == pytest.approx(table[str(1 << 20)] * 1e-6)  # 64 x 16 KB = 1 MiB, measured
    assert m.collective_s(96) == pytest.approx((table[str(1 << 20)] + table[str(2 << 20)]) / 2 * 1e-6)
    m.collective_bytes_per_token = 1024  # below the smallest measured size: the 8 KB latency
    assert m.collective_s(1) == pytest.approx(m.collective_latency_s)
    m.collective_bytes_per_token = 8192 * 2
    big = (1 << 28) // (8192 * 2) * 2  # 512 MiB: past the table, at the 256 MB bandwidth
    assert m.collective_s(big) == pytest.approx(table[str(1 << 28)] * 2e-6)
