"""Per-layout timing: how long one decode step and one prefill batch take.

Decode is memory-bound: in one step every GPU reads its share of the weights once for the
whole running batch, plus the KV cache of every running request, plus it waits for the
step's collectives. With B requests running and pp pipeline stages (micro-batches of
m = ceil(B / pp) requests on each stage):

    f         = 1 - (1 - top_k / n_experts) ** m       chance that an expert gets a token of the batch
    touched   = f without EP; with ep groups of experts_per_gpu experts the busiest GPU's share,
                E[max over ep groups of Binomial(experts_per_gpu, f)] / experts_per_gpu
    bytes     = dense + experts * touched + kv_bytes_per_token_layer * layers * kv_tokens_in_use / pp
    step      = sum over stages of t_stage + (pp - 1) * p2p_latency + overhead

with, per stage, t_stage = bytes / (bandwidth * efficiency) + collectives * collective_latency.
On NVLink the collective and hop latencies are measured figures read from
data/collectives_nvlink.json (NCCL on 2 x H200, benchmarks/bench_collectives.py); with the
plan's `allreduce_bytes_per_token` an all-reduce takes the measured time at its message size
(micro-batch x bytes per token) instead of the small-message latency.
`dense_bytes` (batch-independent: attention, dense layers, shared experts, lm_head),
`expert_bytes` (all routed-expert bytes held by one GPU of the stage), `layers` and
`collectives` per stage, and n_experts / top_k come from the planner's layout plan
(`cost`, see planner.decode_cost); `kv_bytes_per_token_layer` too. Every request in the
batch gets one token per step, so a stream's inter-token latency is the step time.

Prefill of a batch of new requests takes one step of that batch plus `prefill_per_token`
per input token; while it runs the decode batch waits (SGLang's default, no mixed chunks).

Every parameter can be overridden from the environment (README.md lists them).
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass

GIB = 1 << 30

# Small-message collective latency and point-to-point hop latency by interconnect (seconds).
# PCIe: NCCL all-reduce on 8 GPUs measured ~24 us with P2P, ~60 us reproduces the user's EP8
# figure (docs/kimi-k2-memory.md section 8). NVLink: measured, see NVLINK_DATA below; the
# figures here are used only when that file is missing or holds no all-reduce.
COLLECTIVE_LATENCY_S = {"pcie": 60e-6, "nvlink": 10e-6}
P2P_LATENCY_S = {"pcie": 20e-6, "nvlink": 5e-6}

# NCCL figures measured on an NVLink host (benchmarks/bench_collectives.py, see the file's
# "source"): per world size, the smallest message's time (latency) and the largest's bus bandwidth.
NVLINK_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "collectives_nvlink.json")


def load_collectives(path: str = NVLINK_DATA) -> dict | None:
    """The measured NVLink collectives (sglang_sim/data/collectives_nvlink.json), None when absent."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def measured(data: dict | None, op: str, world: int) -> tuple[dict | None, int | None]:
    """The figures of `op` at `world` GPUs, else at the largest measured world size below it
    (more GPUs only add ring steps, so that is a lower bound), else the smallest above."""
    table = ((data or {}).get("ops") or {}).get(op) or {}
    sizes = sorted(int(w) for w in table)
    if not sizes:
        return None, None
    below = [w for w in sizes if w <= max(2, world)]
    pick = below[-1] if below else sizes[0]
    return table[str(pick)], pick


def env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return float(raw)


@dataclass
class Stage:
    dense_bytes: float  # batch-independent bytes one GPU of the stage reads per step
    expert_bytes: float  # all routed-expert bytes held by one GPU of the stage
    layers: int
    collectives: int  # all-reduces per step on this stage


@dataclass
class CostModel:
    stages: list[Stage]
    n_experts: int
    top_k: int
    kv_bytes_per_token_layer: float
    bandwidth_bytes_s: float
    experts_per_gpu: int = 0  # local experts on one GPU (n_experts // ep); 0 = not MoE
    efficiency: float = 0.7
    collective_latency_s: float = 60e-6
    p2p_latency_s: float = 20e-6
    overhead_s: float = 0.3e-3
    prefill_per_token_s: float = 0.15e-3
    fixed_step_s: float | None = None
    collectives_source: dict | None = None  # where collective_latency_s came from when measured
    # measured all-reduce time by message size, ((bytes, seconds), ...) ascending, and the message
    # bytes per token of the batch (hidden_size x dtype bytes): both known -> size-dependent time
    collective_table: tuple[tuple[float, float], ...] = ()
    collective_bytes_per_token: float = 0.0

    def __post_init__(self):
        self._imbalance: dict[int, float] = {}

    def expert_share(self, micro: int) -> float:
        """Share of a GPU's expert bytes the busiest GPU reads for a micro-batch of `micro` tokens.

        Every expert is routed to with probability f = 1 - (1 - top_k / n_experts) ** micro. With
        ep > 1 the experts are split into groups of `experts_per_gpu`; the step waits for the group
        that got the most: E[max over groups of Binomial(experts_per_gpu, f)] / experts_per_gpu.
        (EP8 at batch 1: 2.6 experts on the busiest GPU instead of the mean 1.)
        """
        if not (self.n_experts and self.top_k):
            return 0.0
        if micro in self._imbalance:
            return self._imbalance[micro]
        f = 1.0 - (1.0 - min(1.0, self.top_k / self.n_experts)) ** micro
        local = self.experts_per_gpu or self.n_experts
        groups = max(1, self.n_experts // local)
        share = f
        if groups > 1 and 0.0 < f < 1.0:
            # E[max] = sum_x P(max > x) = sum_x (1 - F(x) ** groups), F the binomial CDF
            cdf, pmf, e_max = 0.0, (1.0 - f) ** local, 0.0
            for x in range(local):
                cdf += pmf
                e_max += 1.0 - min(1.0, cdf) ** groups
                pmf *= (local - x) / (x + 1) * f / (1.0 - f)
            share = e_max / local
        self._imbalance[micro] = share
        return share

    def collective_s(self, tokens: int) -> float:
        """Seconds for one all-reduce of `tokens` tokens' activations.

        The small-message latency, unless both the measured table and the message bytes per
        token are known: then the measured time at that size (linear between measured sizes,
        the largest size's bandwidth beyond it, the latency below the smallest).
        """
        table, per_token = self.collective_table, self.collective_bytes_per_token
        if not table or per_token <= 0:
            return self.collective_latency_s
        size = tokens * per_token
        if size <= table[0][0]:
            return self.collective_latency_s
        for (b0, t0), (b1, t1) in itertools.pairwise(table):
            if size <= b1:
                return t0 + (t1 - t0) * (size - b0) / (b1 - b0)
        b_last, t_last = table[-1]
        return t_last * size / b_last

    @property
    def pp(self) -> int:
        return max(1, len(self.stages))

    def decode_step(self, batch: int, kv_tokens_in_use: int = 0) -> float:
        """Seconds for one decode step of `batch` running requests."""
        if self.fixed_step_s is not None:
            return self.fixed_step_s
        if batch <= 0:
            return 0.0
        pp = self.pp
        micro = math.ceil(batch / pp)
        touched = self.expert_share(micro)
        kv_tokens = kv_tokens_in_use / pp
        rate = self.bandwidth_bytes_s * self.efficiency
        t = 0.0
        for st in self.stages:
            nbytes = (
                st.dense_bytes
                + st.expert_bytes * touched
                + self.kv_bytes_per_token_layer * st.layers * kv_tokens
            )
            t += nbytes / rate + st.collectives * self.collective_s(micro)
        return t + (pp - 1) * self.p2p_latency_s + self.overhead_s

    def prefill(self, new_tokens: int, batch: int) -> float:
        """Seconds for one prefill batch of `batch` requests holding `new_tokens` input tokens."""
        return self.decode_step(batch) + new_tokens * self.prefill_per_token_s

    def describe(self) -> dict:
        return {
            "stages": [vars(s) for s in self.stages],
            "n_experts": self.n_experts,
            "top_k": self.top_k,
            "experts_per_gpu": self.experts_per_gpu,
            "bandwidth_gbs": self.bandwidth_bytes_s / 1e9,
            "efficiency": self.efficiency,
            "collective_latency_us": self.collective_latency_s * 1e6,
            "p2p_latency_us": self.p2p_latency_s * 1e6,
            "collectives_measured": self.collectives_source,
            "overhead_ms": self.overhead_s * 1e3,
            "prefill_ms_per_token": self.prefill_per_token_s * 1e3,
            "fixed_step_ms": None if self.fixed_step_s is None else self.fixed_step_s * 1e3,
            "decode_step_ms": {str(b): round(self.decode_step(b) * 1e3, 3) for b in (1, 8, 64)},
        }


def from_plan(layout_plan: dict, hardware: dict) -> CostModel:
    """Build the model from the planner's layout plan (`cost`) and the simulated hardware."""
    cost = layout_plan.get("cost") or {}
    interconnect = str(hardware.get("gpu_interconnect") or cost.get("interconnect") or "pcie")
    bw_gbs = float(hardware.get("gpu_memory_bandwidth_gbs") or cost.get("bandwidth_gbs") or 1792)
    stages = [
        Stage(
            dense_bytes=float(s.get("dense_bytes", 0)),
            expert_bytes=float(s.get("expert_bytes", 0)),
            layers=int(s.get("layers", 0)),
            collectives=int(s.get("collectives", 0)),
        )
        for s in cost.get("stages") or []
    ]
    if not stages:
        # No cost in the plan: every weight byte of the busiest GPU is read each step.
        stages = [Stage(float(layout_plan.get("weights_gib_per_gpu") or 0) * GIB, 0.0, 0, 0)]
    model = CostModel(
        stages=stages,
        n_experts=int(cost.get("n_experts") or 0),
        top_k=int(cost.get("top_k") or 0),
        experts_per_gpu=int(cost.get("experts_per_gpu") or 0),
        kv_bytes_per_token_layer=float(cost.get("kv_bytes_per_token_layer") or 0),
        bandwidth_bytes_s=bw_gbs * 1e9,
        collective_latency_s=COLLECTIVE_LATENCY_S.get(interconnect, COLLECTIVE_LATENCY_S["pcie"]),
        p2p_latency_s=P2P_LATENCY_S.get(interconnect, P2P_LATENCY_S["pcie"]),
    )
    if interconnect == "nvlink":
        data = load_collectives()
        tp = int(cost.get("tp") or 2)
        ar, world = measured(data, "all_reduce", tp)
        if ar:
            model.collective_latency_s = float(ar["latency_us"]) * 1e-6
            model.collectives_source = {
                "all_reduce_latency_us": ar["latency_us"],
                "all_reduce_latency_bytes": ar.get("latency_bytes"),
                "all_reduce_busbw_gbs": ar.get("busbw_gbs"),
                "measured_world_size": world,
                "tp": tp,
                "source": (data or {}).get("source"),
            }
            table = ar.get("time_us_by_bytes") or {}
            model.collective_table = tuple(sorted((float(b), float(us) * 1e-6) for b, us in table.items()))
            model.collective_bytes_per_token = float(cost.get("allreduce_bytes_per_token") or 0)
        hop, _ = measured(data, "sendrecv", 2)
        if hop:
            model.p2p_latency_s = float(hop["latency_us"]) * 1e-6
    model.efficiency = env_float("SGLANG_SIM_BW_EFFICIENCY", model.efficiency)
    for env, attr, scale in (
        ("SGLANG_SIM_COLLECTIVE_US", "collective_latency_s", 1e-6),
        ("SGLANG_SIM_P2P_US", "p2p_latency_s", 1e-6),
        ("SGLANG_SIM_STEP_OVERHEAD_MS", "overhead_s", 1e-3),
        ("SGLANG_SIM_PREFILL_MS_PER_TOKEN", "prefill_per_token_s", 1e-3),
        ("SGLANG_SIM_DECODE_STEP_MS", "fixed_step_s", 1e-3),
    ):
        v = env_float(env, None)
        if v is not None:
            setattr(model, attr, v * scale)
            if attr == "collective_latency_s":
                model.collective_table = ()  # a fixed latency asked for: no size dependence
    return model
